#!/usr/bin/env bash
# Installs what hostpath-provisioner needs on Debian 12, only what is missing.
#   scripts/setup.sh          build dependencies
#   scripts/setup.sh --test   build + test dependencies (cmocka, python3-kubernetes, kubectl's
#                             peers, valgrind, clang for the sanitizer build, buildah/debootstrap)
set -euo pipefail

build_pkgs=(meson ninja-build pkg-config gcc libc6-dev libuv1-dev libcurl4-openssl-dev
            libjansson-dev libyaml-dev node-llhttp ca-certificates)
test_pkgs=(libcmocka-dev python3 python3-kubernetes openssl curl valgrind
           buildah debootstrap)

want=("${build_pkgs[@]}")
if [ "${1:-}" = "--test" ]; then
    want+=("${test_pkgs[@]}")
fi

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
