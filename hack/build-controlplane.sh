#!/usr/bin/env bash
# Builds kube-apiserver, etcd and kubectl from the Go module proxy into
# bin/k8s/<version>/, the folder every envtest suite and `make run` use.
# Rebuilt only when the pinned version (or this module's go.sum) changes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/hack/controlplane"
version=v1.37.2
stamp=$(cat "$mod/go.mod" "$mod/go.sum" "$0" | sha256sum | cut -c1-12)
out="$root/bin/k8s/$version"

if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] \
  && [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ] && [ -x "$out/kubectl" ]; then
  exit 0
fi

echo ">> Building the local control plane ($version: kube-apiserver, etcd, kubectl) from Go modules into bin/k8s/$version." >&2
echo ">> This happens once per version and takes 5 to 15 minutes on a 2-core machine (Go compiles the API server)." >&2
mkdir -p "$out"
minor=${version#v1.}; minor=${minor%%.*}
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
cd "$mod"
export CGO_ENABLED=0
start=$(date +%s)
go build -trimpath -ldflags "$ld" -o "$out/etcd" go.etcd.io/etcd/server/v3
echo ">> etcd built ($(( $(date +%s) - start ))s)" >&2
go build -trimpath -ldflags "$ld" -o "$out/kubectl" ./kubectl
echo ">> kubectl built ($(( $(date +%s) - start ))s)" >&2
go build -trimpath -ldflags "$ld" -o "$out/kube-apiserver" ./kube-apiserver
echo ">> kube-apiserver built ($(( $(date +%s) - start ))s)" >&2
echo "$stamp" > "$out/.stamp"
