#!/usr/bin/env bash
# Installs what hostpath-provisioner needs on Debian 12, only what is missing.
#   scripts/setup.sh          build dependencies
#   scripts/setup.sh --demo   build dependencies + what the scripts/run.sh demo needs (python3 for
#                             the local API server and scripts/demo.py, openssl for its CA)
#   scripts/setup.sh --test   build + test dependencies (cmocka, python3-kubernetes, python3-yaml
#                             for the chart's tests, kubectl's peers, valgrind, clang for the
#                             sanitizer build, buildah/debootstrap, the VM tier's qemu,
#                             xfsprogs, e2fsprogs and kmod, and the node tier's containerd, runc,
#                             CNI plugins and busybox-static)
set -euo pipefail

# The default build links libcurl (OpenSSL flavour), OpenSSL and libcurl's other dependencies
# statically (meson option static_deps): their -dev packages carry the .a archives.
build_pkgs=(meson ninja-build pkg-config gcc libc6-dev libuv1-dev libcurl4-openssl-dev
            libjansson-dev libyaml-dev node-llhttp ca-certificates
            libssl-dev libnghttp2-dev libidn2-dev libpsl-dev libunistring-dev libzstd-dev
            libbrotli-dev zlib1g-dev)
demo_pkgs=(python3 openssl)
# The VM tier (tests/vm): qemu-system-x86 (qemu-system-x86_64, and qemu-system-data's qboot
# firmware), the mkfs tools the guest runs from the host's root (xfsprogs, e2fsprogs), kmod
# (depmod for the unpacked kernel; modprobe inside), apt (apt-get download of the kernel) and
# dpkg (dpkg -x) are Debian's own.
# The node tier (tests/realcluster/node.py) runs a real node: containerd, runc and the CNI
# plugins; its images are made from busybox-static (and a static C pause: libc6-dev's libc.a).
test_pkgs=(libcmocka-dev python3 python3-kubernetes python3-yaml openssl curl valgrind git
           buildah debootstrap
           qemu-system-x86 xfsprogs e2fsprogs kmod
           containerd runc containernetworking-plugins busybox-static iproute2)

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

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
        echo "setup: these Debian packages are missing: ${missing[*]}. Installing them needs" \
             "root: run this as root, or install sudo, or install them yourself" \
             "(apt-get install ${missing[*]})" >&2
        exit 1
    fi
    sudo=(sudo)
fi
echo "setup: installing ${missing[*]}" >&2
# Another apt or dpkg may hold the lock (an unattended upgrade): wait for it, bounded.
lock=(-o DPkg::Lock::Timeout=300)
if ! "${sudo[@]}" apt-get "${lock[@]}" update -q >&2; then
    echo "setup: 'apt-get update' failed (its output is above): is the network up, and do" \
         "/etc/apt/sources.list or /etc/apt/sources.list.d/ name a Debian 12 (bookworm) mirror?" >&2
    exit 1
fi
if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -q \
        --no-install-recommends "${missing[@]}" >&2; then
    echo "setup: installing ${missing[*]} failed (apt-get's output is above)" >&2
    exit 1
fi
