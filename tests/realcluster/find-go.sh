#!/usr/bin/env bash
# Prints the directory of a Go toolchain that can build what tests/realcluster/go.mod needs
# (its `go` line), fetching one when the machine has none.
#
#   goroot_bin=$(tests/realcluster/find-go.sh)  &&  export PATH=$goroot_bin:$PATH
#
# In order: `go` from /usr/local/go/bin or $PATH when it is new enough, or >= 1.21 (such a go
# fetches the toolchain go.mod asks for itself when GOTOOLCHAIN says so, as build.sh does); else
# (no Go, or Debian 12's golang-go 1.19, which predates GOTOOLCHAIN) the official toolchain
# golang.org/toolchain@v0.0.1-go$PINNED from the Go module proxy ($GOPROXY's first entry, else
# proxy.golang.org) -- the same archive `go` itself downloads for GOTOOLCHAIN -- checked against
# the SHA-256 pinned below and unpacked once into ~/.cache/hostpath-provisioner/go$PINNED.
# Needs curl and python3 for that (scripts/setup.sh --test installs both).
# Progress and errors go to stderr; exit 1 with the reason when no toolchain can be had.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

PINNED=1.26.8
declare -A SHA256=(
    [amd64]=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
    [arm64]=02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99
)

need=$(awk '$1 == "go" {print $2; exit}' "$here/go.mod")
older() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ] && [ "$1" != "$2" ]; }

for go in /usr/local/go/bin/go "$(command -v go || true)"; do
    [ -n "$go" ] && [ -x "$go" ] || continue
    have=$("$go" env GOVERSION 2>/dev/null | sed 's/^go//') || continue
    [ -n "$have" ] || continue # go < 1.?? has no GOVERSION: too old anyway
    if ! older "$have" "$need"; then
        dirname "$go"; exit 0
    fi
    if ! older "$have" 1.21; then
        dirname "$go"; exit 0 # build.sh sets GOTOOLCHAIN: it fetches the newer one itself
    fi
done

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
dest="$home/.cache/hostpath-provisioner/go$PINNED"
if [ -x "$dest/bin/go" ]; then
    echo "$dest/bin"; exit 0
fi
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) echo "find-go: no Go toolchain, and none pinned for $(uname -m): install Go >= $need" >&2
       exit 1 ;;
esac
for c in curl python3; do
    command -v "$c" >/dev/null ||
        { echo "find-go: no Go toolchain here, and fetching one needs $c (scripts/setup.sh --test)" >&2
          exit 1; }
done
proxy=${GOPROXY:-https://proxy.golang.org}; proxy=${proxy%%,*}; proxy=${proxy%%|*}
case "$proxy" in off|direct|"") proxy=https://proxy.golang.org ;; esac
mod="golang.org/toolchain@v0.0.1-go$PINNED.linux-$arch"
url="$proxy/golang.org/toolchain/@v/v0.0.1-go$PINNED.linux-$arch.zip"
echo "find-go: no Go >= $need on this machine (Debian 12's golang-go is 1.19): fetching" \
     "go$PINNED ($mod, ~70 MB) from the Go module proxy into $dest" >&2
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d "$(dirname "$dest")/.go-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ! curl -fsSL --retry 3 -o "$tmp/go.zip" "$url"; then
    echo "find-go: downloading $url failed" >&2; exit 1
fi
got=$(sha256sum "$tmp/go.zip" | cut -d' ' -f1)
if [ "$got" != "${SHA256[$arch]}" ]; then
    echo "find-go: $url has SHA-256 $got, expected ${SHA256[$arch]}: not using it" >&2; exit 1
fi
# The archive keeps Unix modes in its entries; Python's zipfile does not apply them itself.
python3 - "$tmp/go.zip" "$tmp/x" "$mod/" <<'EOF'
import os, sys, zipfile
zpath, out, prefix = sys.argv[1:]
with zipfile.ZipFile(zpath) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or ".." in info.filename.split("/"):
            sys.exit("unexpected entry %r" % info.filename)
        path = z.extract(info, out)
        mode = (info.external_attr >> 16) & 0o777
        if mode and not info.is_dir():
            os.chmod(path, mode)
EOF
mv "$tmp/x/$mod" "$dest"
echo "find-go: go$PINNED ready in $dest" >&2
echo "$dest/bin"
