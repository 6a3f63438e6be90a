#!/usr/bin/env bash
# Builds etcd, kubectl, kube-apiserver and kube-controller-manager from the
# Go module proxy into bin/k8s/<version>/, the folder every envtest suite and
# `make run` use.
#
# Each binary has its own stamp (.stamp-<name>): the hash of this module's
# go.mod and go.sum, and the hash of its recipe (version, flags, package and
# the package's own files here). It is rebuilt only when one of them changes
# and, when only go.mod or go.sum changed, only if the modules it is built
# from changed: the modules a binary was built from are embedded in it (`go
# version -m`) and compared with those `go list` resolves now. So adding a
# binary, or a module only it needs, builds only it. A folder built by the
# earlier script (one .stamp for all three binaries it built) is adopted the
# same way, binary by binary.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/hack/controlplane"
version=v1.37.2
out="$root/bin/k8s/$version"

minor=${version#v1.}; minor=${minor%%.*}
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
export CGO_ENABLED=0
build_flags=(-trimpath -ldflags "$ld")

# name, package, and how long it takes on a 2-core machine with an empty
# Go build cache (the later ones reuse much of what the earlier compiled).
binaries=(
  "etcd go.etcd.io/etcd/server/v3 2"
  "kubectl ./kubectl 5"
  "kube-apiserver ./kube-apiserver 8"
  "kube-controller-manager ./kube-controller-manager 4"
)

cd "$mod"
mods=$(cat go.mod go.sum | sha256sum | cut -c1-12)

# recipe hashes what builds a package besides its modules.
recipe() {
  {
    echo "$version CGO_ENABLED=$CGO_ENABLED ${build_flags[*]} $1"
    if [ -d "$1" ]; then cat "$1"/*.go; fi
  } | sha256sum | cut -c1-12
}

# wanted lists the modules (path version, and => its replacement) go would
# build package $1 from now; built lists those binary $2 was built from.
wanted() {
  go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}{{end}}{{end}}' "$1" | sort -u
}
built() {
  go version -m "$1" | awk -F'\t' '
    ($2 == "mod" && $4 != "(devel)") || $2 == "dep" { if (m != "") print m; m = $3 " " $4 }
    $2 == "=>" { m = m " => " $3 " " $4 }
    END { if (m != "") print m }' | sort -u
}

todo=()
for b in "${binaries[@]}"; do
  read -r name pkg _ <<<"$b"
  want="$mods $(recipe "$pkg")"
  have=$(cat "$out/.stamp-$name" 2>/dev/null || true)
  if [ -x "$out/$name" ] && [ "$have" = "$want" ]; then
    continue
  fi
  # Same recipe (or built by the earlier all-in-one script), other go.sum:
  # kept if it was built from exactly the modules it needs now.
  if [ -x "$out/$name" ] && { [ "${have#* }" = "${want#* }" ] || { [ -z "$have" ] && [ -f "$out/.stamp" ]; }; } \
    && [ "$(built "$out/$name")" = "$(wanted "$pkg")" ]; then
    echo "$want" >"$out/.stamp-$name"
    continue
  fi
  todo+=("$b")
done
[ "${#todo[@]}" -gt 0 ] || exit 0

names=() minutes=0
for b in "${todo[@]}"; do
  read -r name _ m <<<"$b"
  names+=("$name") minutes=$((minutes + m))
done
echo ">> Building the local control plane ($version: ${names[*]}) from Go modules into bin/k8s/$version." >&2
echo ">> This happens once per version and takes up to about $minutes minutes on a 2-core machine (Go compiles Kubernetes); each binary is built once." >&2
mkdir -p "$out"
start=$(date +%s)
for b in "${todo[@]}"; do
  read -r name pkg _ <<<"$b"
  go build "${build_flags[@]}" -o "$out/$name" "$pkg"
  echo "$mods $(recipe "$pkg")" >"$out/.stamp-$name"
  echo ">> $name built ($(($(date +%s) - start))s)" >&2
done
