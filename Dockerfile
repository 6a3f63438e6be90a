# Multi-stage build of the manager: a static binary on a distroless, non-root
# base. The flags match `make build`; cmd/manager's build test runs this
# file's own build line, keeping it honest on machines without Docker.
FROM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o manager ./cmd/manager
# The plugin binary too: the chart's web console runs
# `kubectl-agentrun console --in-cluster` from this image.
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o kubectl-agentrun ./cmd/kubectl-agentrun

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager .
COPY --from=builder /workspace/kubectl-agentrun .
USER 65532:65532
ENTRYPOINT ["/manager"]
