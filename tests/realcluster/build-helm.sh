#!/usr/bin/env bash
# Builds the helm command the chart's tests use (charts/hostpath-provisioner), once per version:
#   tests/realcluster/build-helm.sh OUT_DIR
# makes OUT_DIR/helm-<version>/helm (the version is helm.sh/helm/v4's in helm/go.mod) and prints
# that path on stdout. Built from the Go module proxy with the module's go.sum, like build.sh
# builds the control plane, with the same Go caches and the same kind of stamp (a hash of
# helm/go.mod, helm/go.sum and this script), so a second run is a no-op. Progress and the time
# taken go to stderr. Next to helm, OUT_DIR/helm-<version>/local-path-provisioner-<version>/ holds
# local-path-provisioner's own chart, taken from its Go module (its hash pinned below):
# tests/integration/test_chart.py renders it with the same values as ours and compares.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-helm.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# As build.sh: the machine's Go, else one fetched from the Go module proxy by find-go.sh; the
# caches where a developer's are, whatever CI's environment says.
gobin=$("$here/find-go.sh") || exit 1
export PATH=$gobin:$PATH
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export GOPATH=${GOPATH:-$home/go}
export GOCACHE=${GOCACHE:-$home/.cache/go-build}
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

mod="$here/helm"
need=$(awk '$1 == "go" {print $2; exit}' "$mod/go.mod")
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    export GOTOOLCHAIN=go1.26.8
    echo "helm: go $have is older than go.mod's $need: using GOTOOLCHAIN=$GOTOOLCHAIN" >&2
fi

version=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")
dest="$out/helm-$version"
stamp=$(cat "$mod/go.mod" "$mod/go.sum" "$here/build-helm.sh" | sha256sum | cut -c1-16)
# local-path-provisioner's module and its go.sum hash (`go mod download -json` prints it as Sum).
lpp_module=github.com/rancher/local-path-provisioner
lpp_version=v0.0.37
lpp_sum=h1:xRGhYXH31HtfbYWA9Qe8zAqCmHuw4dDRZNrDlWe0OQg=
lpp_chart="$dest/local-path-provisioner-$lpp_version"

if [ -x "$dest/helm" ] && [ -f "$lpp_chart/Chart.yaml" ] &&
        [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "helm: $version cached in $dest" >&2
    echo "$dest/helm"
    exit 0
fi

mkdir -p "$dest"
rm -f "$dest/.stamp"
start=$(date +%s)
echo "helm: building helm $version with $(go version | cut -d' ' -f3)" \
     "(the first build on a machine takes a few minutes on 2 cores)" >&2
# The version `helm version` reports, as helm's Makefile stamps a release build.
v=helm.sh/helm/v4/internal/version
ldflags="-s -w -X $v.version=$version -X $v.metadata= -X $v.gitTreeState=clean"
cd "$mod"
go mod download >&2
go build -trimpath -ldflags "$ldflags" -o "$dest/helm" helm.sh/helm/v4/cmd/helm >&2
# Helm writes nothing here, but give it homes of its own anyway: never the user's.
tmp=$(mktemp -d)
HELM_CONFIG_HOME=$tmp HELM_CACHE_HOME=$tmp HELM_DATA_HOME=$tmp "$dest/helm" version --short >&2
rm -rf "$tmp"

# Its module is not in go.sum (it is not built, only its chart is read): the sum database is
# skipped and the hash checked here instead.
info=$(cd / && GONOSUMDB=github.com/rancher GOFLAGS=-mod=mod \
    go mod download -json "$lpp_module@$lpp_version")
got=$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
dir=$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ "$got" != "$lpp_sum" ] || [ ! -f "$dir/deploy/chart/local-path-provisioner/Chart.yaml" ]; then
    echo "helm: $lpp_module@$lpp_version: hash '$got', expected '$lpp_sum' (or no chart in" \
         "'$dir')" >&2
    exit 1
fi
rm -rf "$lpp_chart"
cp -r "$dir/deploy/chart/local-path-provisioner" "$lpp_chart"
chmod -R u+w "$lpp_chart" # the module cache is read-only
echo "$stamp" >"$dest/.stamp"
echo "helm: built $version in $(($(date +%s) - start))s ($dest/helm)" >&2
echo "$dest/helm"
