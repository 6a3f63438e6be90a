# agentrun-operator. `make run` runs the operator; `make test` runs every test.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
CRD_REF_DOCS_VERSION ?= v0.3.0
CRD_REF_DOCS ?= $(LOCALBIN)/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
# golangci-lint is built from hack/golangci-lint, a module that pins it (this
# version) together with the kube-api-linter module plugin.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUBE_VERSION ?= v1.37.2
KUBE_BIN ?= $(LOCALBIN)/k8s/$(KUBE_VERSION)
# -p 1: packages run one at a time, so the latency assertions of the
# controller suite (a fixed Secret wakes its runs within a second) are not
# measured against a parallel compile on a 2-core machine.
GO_TEST_FLAGS ?= -count=1 -p 1 -timeout 60m
# test/ is a second module holding the test-only packages (the Helm chart's
# tests, the load tests and benchmarks), so that their dependencies (the Helm
# SDK, pod-security-admission) stay out of the operator's go.mod. Every go
# command that covers the repository runs there too.
TEST_MODULE ?= test

.PHONY: all
all: build

##@ Development

# The validating webhooks (internal/policyadmission's marker) are generated
# into config/webhook, which config/default installs; the manager serves
# them (internal/admissionserver) with its own certificate.
.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests from markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/..." paths="./controllers/..." paths="./internal/manager/..." \
		paths="./internal/toolpolicy/..." paths="./internal/policyadmission/..." paths="./internal/schedule/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	$(MAKE) --no-print-directory chart

# The Helm chart carries the generated CRDs, the manager's RBAC rules, the
# webhooks of config/webhook and config/monitoring's alerts and dashboard as
# copies, so it cannot drift from config/ (verify-generated and
# test/helmchart fail when the copies differ).
CHART_DIR ?= charts/agentrun-operator

.PHONY: chart
chart: ## Copy the generated CRDs, manager RBAC rules, webhooks, alerts and dashboard from config/ into the Helm chart.
	rm -f $(CHART_DIR)/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART_DIR)/crds/
	cp config/rbac/role.yaml $(CHART_DIR)/files/manager-role.yaml
	cp config/webhook/manifests.yaml $(CHART_DIR)/files/webhook-manifests.yaml
	cp config/monitoring/prometheusrule.yaml $(CHART_DIR)/files/prometheusrule.yaml
	cp config/monitoring/grafana-dashboard.json $(CHART_DIR)/files/grafana-dashboard.json

.PHONY: generate
generate: $(CONTROLLER_GEN) api-docs ## Generate deepcopy code and the API reference (docs/api-reference.md).
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

# The API reference is rendered by crd-ref-docs with this project's own
# templates (hack/api-docs/templates) and configuration.
.PHONY: api-docs
api-docs: $(CRD_REF_DOCS) ## Generate docs/api-reference.md from api/v1alpha1 (crd-ref-docs).
	$(CRD_REF_DOCS) --log-level=ERROR --source-path=./api/v1alpha1 --config=hack/api-docs/config.yaml \
		--renderer=markdown --templates-dir=hack/api-docs/templates \
		--template-value=generator="crd-ref-docs $(CRD_REF_DOCS_VERSION)" --output-path=docs/api-reference.md

.PHONY: fmt
fmt: ## go fmt (both modules).
	go fmt ./...
	cd $(TEST_MODULE) && go fmt ./...

.PHONY: vet
vet: ## go vet the modules (and the tracing package as -tags otlpgrpc builds it).
	go vet ./...
	go vet -tags otlpgrpc ./internal/tracing/...
	cd $(TEST_MODULE) && go vet ./...
	cd hack/release && go vet ./...

.PHONY: controlplane
controlplane: ## Build kube-apiserver, etcd, kubectl and kube-controller-manager from Go modules into bin/k8s/$(KUBE_VERSION) (once each).
	bash hack/build-controlplane.sh

.PHONY: test
test: manifests generate vet controlplane ## Regenerate, vet, build the control plane if missing, run all tests.
	go test $(GO_TEST_FLAGS) ./...
	go test $(GO_TEST_FLAGS) -tags otlpgrpc ./internal/tracing/
	cd $(TEST_MODULE) && go test $(GO_TEST_FLAGS) ./...
	cd hack/release && go test $(GO_TEST_FLAGS) ./...
	$(MAKE) test-monitoring
	$(MAKE) test-stores

# The controllers' tests that prove a run's durability (restart, kill -9,
# fencing, dangling writes, write counts, status-write faults, and the
# store's and the archive's own) run once more on each database:
# PostgreSQL (Debian's postgresql package, started by the tests in a
# temporary directory; .ci/run installs it) and SQLite. `make test` ran
# them on ConfigMaps.
STORE_TESTS ?= Restart|Kill|Dangling|CancelDuringAWrite|WritesPer|ShardHandedOver|SurvivesRestart|StatusWaits|StatusWriteFaults|Store|Archive

.PHONY: test-stores
test-stores: controlplane ## Re-run the controllers' durability tests on PostgreSQL and on SQLite.
	AGENTRUN_TEST_STORE=postgres go test $(GO_TEST_FLAGS) -run '$(STORE_TESTS)' ./controllers/
	AGENTRUN_TEST_STORE=sqlite go test $(GO_TEST_FLAGS) -run '$(STORE_TESTS)' ./controllers/

# hack/monitoring is its own module (Prometheus's parser and rule engine
# would raise the operator's own dependencies): it checks config/monitoring
# against the metrics a running manager exports.
.PHONY: test-monitoring
test-monitoring: controlplane ## Check the dashboard and alerts of config/monitoring against the manager's metrics.
	cd hack/monitoring && go vet ./... && go test $(GO_TEST_FLAGS) ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Fail if generated files are not committed.
	@git diff --exit-code -- api config charts docs/api-reference.md || { echo "generated files are stale: run 'make manifests generate' and commit"; exit 1; }

# BENCH picks benchmarks by name (a go test -bench pattern), e.g.
# `make bench BENCH=RunEconomy300`; the default runs them all, the
# operator's own (controllers, internal/toolpolicy's BenchmarkEvaluate10000Calls)
# and then those of the test module. The load
# benchmarks of test/loadtest take minutes each (docs/benchmarks.md).
BENCH ?= .
BENCH_TIMEOUT ?= 240m

.PHONY: bench
bench: controlplane ## Run benchmarks (BENCH=pattern selects some; see docs/benchmarks.md).
	go test -run '^$$' -bench '$(BENCH)' -benchmem -timeout $(BENCH_TIMEOUT) ./...
	cd $(TEST_MODULE) && go test -run '^$$' -bench '$(BENCH)' -benchmem -timeout $(BENCH_TIMEOUT) ./...

# LINT_FLAGS passes options through, e.g. `make lint LINT_FLAGS=--fix`.
LINT_FLAGS ?=

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint on the modules (.golangci.yml; kube-api-linter on api/), as make vet does.
	$(GOLANGCI_LINT) run $(LINT_FLAGS) ./...
	$(GOLANGCI_LINT) run $(LINT_FLAGS) --build-tags otlpgrpc ./internal/tracing/...
	cd $(TEST_MODULE) && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml $(LINT_FLAGS) ./...
	cd hack/release && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml $(LINT_FLAGS) ./...

##@ Build

# GO_BUILD is how every shipped binary is built, here and in the image and
# release archives: static, no file paths of this machine, no symbol table.
GO_BUILD ?= CGO_ENABLED=0 go build -trimpath -ldflags="-s -w"

.PHONY: build
build: ## Build the manager and the kubectl plugin into bin/ (static, as the image's).
	$(GO_BUILD) -o $(LOCALBIN)/manager ./cmd/manager
	$(GO_BUILD) -o $(LOCALBIN)/kubectl-agentrun ./cmd/kubectl-agentrun

# RUN_ARGS passes flags to hack/run-local, e.g. `make run RUN_ARGS=--verbose`.
RUN_ARGS ?=

# `make run` is quiet up to its hints: the steps before it run silently (a
# first run still says what it builds once), and run-local is exec'd, so
# make waits on it directly. Ctrl-C stops run-local cleanly (exit 0), and as
# run-local takes the terminal's foreground, make itself is not interrupted
# (it would re-raise the SIGINT and end with status 130): `make run` exits 0.
# It builds only what running needs: the generated files (CRDs, RBAC,
# deepcopy, API docs) are committed, so it does not regenerate them, and a
# first run does not build controller-gen or crd-ref-docs (test/tour's
# TestMakeRunBuildsNoGenerators holds it to that).
.PHONY: run
run: ## Run the operator: against $$KUBECONFIG if reachable, else a local control plane.
	@$(MAKE) --no-print-directory -s controlplane build
	@go build -o $(LOCALBIN)/run-local ./hack/run-local
	@exec $(LOCALBIN)/run-local $(RUN_ARGS)

# The krew plugin archive for this machine and a copy of plugins/agentrun.yaml
# carrying its sha256, so `kubectl krew install --manifest --archive` can
# install the plugin from a local build (the committed manifest's sums are
# placeholders until a release).
KREW_DIR ?= $(LOCALBIN)/krew
KREW_PLATFORM ?= $(shell go env GOOS)_$(shell go env GOARCH)

.PHONY: plugin-archive
plugin-archive: build ## Build bin/krew/kubectl-agentrun_<os>_<arch>.tar.gz and bin/krew/agentrun.yaml with its sha256.
	@mkdir -p $(KREW_DIR)
	@tar -C $(LOCALBIN) -czf $(KREW_DIR)/kubectl-agentrun_$(KREW_PLATFORM).tar.gz kubectl-agentrun
	@sum=$$(sha256sum $(KREW_DIR)/kubectl-agentrun_$(KREW_PLATFORM).tar.gz | cut -d' ' -f1) && \
		grep -q 'kubectl-agentrun_$(KREW_PLATFORM)\.tar\.gz' plugins/agentrun.yaml || { echo "plugins/agentrun.yaml has no archive for $(KREW_PLATFORM)"; exit 1; } && \
		sed '/kubectl-agentrun_$(KREW_PLATFORM)\.tar\.gz/{n;s/"0\{64\}" # placeholder: computed at release/"'"$$sum"'" # this machine'"'"'s build/;}' plugins/agentrun.yaml > $(KREW_DIR)/agentrun.yaml && \
		grep -q "$$sum" $(KREW_DIR)/agentrun.yaml || { echo "no placeholder sha256 for $(KREW_PLATFORM) in plugins/agentrun.yaml"; exit 1; }
	@echo ">> $(KREW_DIR)/kubectl-agentrun_$(KREW_PLATFORM).tar.gz and $(KREW_DIR)/agentrun.yaml (its sha256 filled in)"

##@ Release

# The release (docs/releasing.md): the manager image, assembled by
# hack/release with go-containerregistry (no Docker engine, no base image),
# its SBOMs, the Helm chart pinned to the image's digest, the plugin archives
# and their krew manifest, under DIST. Every time in them is the commit's
# (SOURCE_DATE_EPOCH), so the same commit gives the same digests.
DIST ?= $(CURDIR)/dist
# VERSION is the release's, the chart's appVersion (the tag the chart pulls,
# and the krew manifest's version must be the same).
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' $(CHART_DIR)/Chart.yaml)
# REGISTRY is where `make image-push` pushes: IMAGE is REGISTRY/agentrun-operator.
REGISTRY ?= ghcr.io/agentrun-dev
IMAGE ?= $(REGISTRY)/agentrun-operator
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
# IMAGE_LICENSES is the image's org.opencontainers.image.licenses label (an
# SPDX expression). The repository declares no license yet, so it says so.
IMAGE_LICENSES ?= NOASSERTION
# BUILD holds the binaries the image and the archives are made of, one
# OS_ARCH directory per platform.
BUILD ?= $(DIST)/build
RELEASE_FLAGS = -repo=$(CURDIR) -bin=$(BUILD) -image=$(IMAGE) -version=$(VERSION)
# hack/release is its own module; go run caches the command it builds.
RELEASE_TOOL = cd hack/release && go run .

# Builds the manager (IMAGE_PLATFORMS) and the plugin (those and
# PLUGIN_PLATFORMS) into $(BUILD)/OS_ARCH/, with GO_BUILD's flags.
.PHONY: release-binaries
release-binaries:
	@for p in $(sort $(IMAGE_PLATFORMS) $(PLUGIN_PLATFORMS)); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(BUILD)/$${os}_$${arch}; \
		echo ">> building for $$p into $$out"; \
		if [[ " $(IMAGE_PLATFORMS) " == *" $$p "* ]]; then GOOS=$$os GOARCH=$$arch $(GO_BUILD) -o $$out/manager ./cmd/manager; fi; \
		GOOS=$$os GOARCH=$$arch $(GO_BUILD) -o $$out/kubectl-agentrun ./cmd/kubectl-agentrun; \
	done

# image-files and release-files assemble from the binaries in $(BUILD)
# without building them (test/release assembles twice from one build).
.PHONY: image-files
image-files:
	@rm -rf $(DIST)/image
	@$(RELEASE_TOOL) image $(RELEASE_FLAGS) -out=$(DIST)/image -platforms="$(IMAGE_PLATFORMS)" -licenses="$(IMAGE_LICENSES)"

.PHONY: release-files
release-files: image-files
	@$(RELEASE_TOOL) dist $(RELEASE_FLAGS) -out=$(DIST) -image-dir=$(DIST)/image -plugin-platforms="$(PLUGIN_PLATFORMS)"

.PHONY: image
image: ## Build the manager image (IMAGE_PLATFORMS) into $(DIST)/image: OCI layout, docker/kind archives, SBOMs.
	@$(MAKE) --no-print-directory release-binaries PLUGIN_PLATFORMS=
	@$(MAKE) --no-print-directory image-files

# Pushes what `make image` (or `make release`) built, not a rebuild: the
# image pushed is the one that was tested.
.PHONY: image-push
image-push: ## Push $(DIST)/image (make image) to $(IMAGE):$(VERSION) (REGISTRY=...; docker login's credentials); print its digest.
	@test -f $(DIST)/image/oci/index.json || { echo "no image in $(DIST)/image: run make image first"; exit 1; }
	@$(RELEASE_TOOL) push $(RELEASE_FLAGS) -layout=$(DIST)/image/oci

.PHONY: release
release: ## Build the release into $(DIST): image, chart pinned to it, plugin archives, krew manifest, checksums.txt.
	@$(MAKE) --no-print-directory release-binaries
	@$(MAKE) --no-print-directory release-files

$(CONTROLLER_GEN):
	@mkdir -p $(LOCALBIN)
	@echo ">> Installing controller-gen $(CONTROLLER_TOOLS_VERSION) into bin/ (once)"
	@tmp=$$(mktemp -d) && GOBIN=$$tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION) && mv $$tmp/controller-gen $@ && rm -rf $$tmp

$(CRD_REF_DOCS):
	@mkdir -p $(LOCALBIN)
	@echo ">> Installing crd-ref-docs $(CRD_REF_DOCS_VERSION) into bin/ (once)"
	@tmp=$$(mktemp -d) && GOBIN=$$tmp go install github.com/elastic/crd-ref-docs@$(CRD_REF_DOCS_VERSION) && mv $$tmp/crd-ref-docs $@ && rm -rf $$tmp

# Rebuilt when hack/golangci-lint changes (a new golangci-lint or
# kube-api-linter version). `golangci-lint custom` would clone golangci-lint
# from GitHub; this builds the same binary from the Go module proxy.
$(GOLANGCI_LINT): hack/golangci-lint/go.mod hack/golangci-lint/go.sum hack/golangci-lint/main.go
	@mkdir -p $(LOCALBIN)
	@v=$$(cd hack/golangci-lint && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2) && \
		test "$$v" = "$(GOLANGCI_LINT_VERSION)" || { echo "hack/golangci-lint/go.mod pins golangci-lint $$v, the Makefile $(GOLANGCI_LINT_VERSION)"; exit 1; }
	@echo ">> Building golangci-lint $(GOLANGCI_LINT_VERSION) with kube-api-linter into bin/ (once; a few minutes)"
	cd hack/golangci-lint && go build -trimpath -o $@ .

.PHONY: help
help: ## Show targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
