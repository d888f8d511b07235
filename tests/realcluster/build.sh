#!/usr/bin/env bash
# Builds the realcluster control plane and node from the Go module proxy, once per version:
#   tests/realcluster/build.sh OUT_DIR
# makes OUT_DIR/k8s-<version>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,
# etcd} (the control plane), {kubelet,agnhost} (the node, and the e2e suite's test image
# program) and e2e.test (`go test -c k8s.io/kubernetes/test/e2e`, the upstream e2e suite);
# the version is k8s.io/kubernetes's in go.mod. It prints that directory on stdout.
# A stamp (a hash of go.mod, go.sum and the sources here) makes a second run a no-op; Go's own
# build cache (~/.cache/go-build) and module cache (~/go/pkg/mod) make a rebuild after a change
# here cheap too. Progress and the time taken go to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd) # absolute: the build runs from this directory

# A Go toolchain: the machine's (/usr/local/go on this project's machines), else one fetched
# from the Go module proxy by find-go.sh (a fresh Debian 12 has none new enough).
gobin=$("$here/find-go.sh") || exit 1
export PATH=$gobin:$PATH
# CI's environment may lack HOME or this machine's Go settings: keep the caches where a
# developer's are, so CI and developers on one machine share them.
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export GOPATH=${GOPATH:-$home/go}
export GOCACHE=${GOCACHE:-$home/.cache/go-build}
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

# go.mod says which Go it needs; an older go (>= 1.21) fetches that toolchain from the module
# proxy when allowed to.
need=$(awk '$1 == "go" {print $2; exit}' "$here/go.mod")
have=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    export GOTOOLCHAIN=go1.26.8
    echo "realcluster: go $have is older than go.mod's $need: using GOTOOLCHAIN=$GOTOOLCHAIN" >&2
fi

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
dest="$out/k8s-$version"
stamp=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here"/etcd/*.go | sha256sum | cut -c1-16)
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet agnhost e2e.test)

have_all() {
    local b
    for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
    [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]
}

if have_all; then
    echo "realcluster: control plane $version cached in $dest" >&2
    echo "$dest"
    exit 0
fi

mkdir -p "$dest"
rm -f "$dest/.stamp"
start=$(date +%s)
echo "realcluster: building Kubernetes $version (kube-apiserver, kube-controller-manager," \
     "kube-scheduler, kubectl, kubelet, agnhost, e2e.test) and etcd with" \
     "$(go version | cut -d' ' -f3) (the first build on a machine takes ~30 minutes on 2 cores)" >&2

# The version the binaries report (/version, kubectl version), as the release build stamps it.
pkgs="k8s.io/component-base/version k8s.io/client-go/pkg/version"
ldflags="-s -w"
for p in $pkgs; do
    ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

cd "$here"
go mod download >&2
dl=$(date +%s)
echo "realcluster: modules ready in $((dl - start))s" >&2
go build -trimpath -ldflags "$ldflags" -o "$dest/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./etcd >&2
cp=$(date +%s)
echo "realcluster: control plane built in $((cp - dl))s" >&2
go build -trimpath -ldflags "$ldflags" -o "$dest/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/test/images/agnhost >&2
node=$(date +%s)
echo "realcluster: kubelet and agnhost built in $((node - cp))s" >&2
# The upstream e2e suite as its release ships it (the e2e.test binary of kubernetes-test).
go test -c -trimpath -ldflags "$ldflags" -o "$dest/e2e.test" k8s.io/kubernetes/test/e2e >&2
echo "realcluster: e2e.test built in $(($(date +%s) - node))s" >&2
echo "$stamp" >"$dest/.stamp"
end=$(date +%s)
echo "realcluster: built $version in $((end - start))s ($dest)" >&2
echo "$dest"
