#!/usr/bin/env bash
# Installs what hostpath-provisioner needs on Debian 12, only what is missing.
#   scripts/setup.sh          build dependencies
#   scripts/setup.sh --demo   build dependencies + what the scripts/run.sh demo needs (python3 for
#                             the local API server and scripts/demo.py, openssl for its CA)
#   scripts/setup.sh --test   build + test dependencies (cmocka, python3-kubernetes, kubectl's
#                             peers, valgrind, clang for the sanitizer build, buildah/debootstrap,
#                             containerd/runc/CNI plugins/busybox-static for the node tier)
set -euo pipefail

# The default build links libcurl (OpenSSL flavour), OpenSSL and libcurl's other dependencies
# statically (meson option static_deps): their -dev packages carry the .a archives.
build_pkgs=(meson ninja-build pkg-config gcc libc6-dev libuv1-dev libcurl4-openssl-dev
            libjansson-dev libyaml-dev node-llhttp ca-certificates
            libssl-dev libnghttp2-dev libidn2-dev libpsl-dev libunistring-dev libzstd-dev
            libbrotli-dev zlib1g-dev)
demo_pkgs=(python3 openssl)
# The node tier (tests/realcluster/node.py) runs a real node: containerd, runc and the CNI
# plugins; its images are made from busybox-static (and a static C pause: libc6-dev's libc.a).
test_pkgs=(libcmocka-dev python3 python3-kubernetes openssl curl valgrind
           buildah debootstrap containerd runc containernetworking-plugins busybox-static
           iproute2)

want=("${build_pkgs[@]}")
case "${1:-}" in
    "") ;;
    --demo) want+=("${demo_pkgs[@]}") ;;
    --test) want+=("${test_pkgs[@]}") ;;
    *) echo "usage: scripts/setup.sh [--demo|--test]" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
$sudo apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
