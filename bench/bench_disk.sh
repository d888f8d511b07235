#!/bin/sh
# Per-volume cost on real filesystems: bench/bench_provision.py (1,000 claims created then
# deleted, --kube-api-qps 0, the local HTTPS API server) with --pv-dir on a loop-mounted ext4
# and a loop-mounted XFS, once for CPU and times and once under strace for the system calls
# per volume. Root only (losetup, mount); needs e2fsprogs and xfsprogs (scripts/setup.sh
# --test installs them). Leaves nothing mounted.
#
#   bench/bench_disk.sh [build-release/hostpath-provisioner] [claims]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-${HP_BINARY:-$here/../build/hostpath-provisioner}}
claims=${2:-1000}
[ "$(id -u)" = 0 ] || { echo "bench_disk.sh: needs root (loop mounts)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/hp-bench-disk.XXXXXX)
mnt=""
cleanup() {
    [ -n "$mnt" ] && umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
for fs in ext4 xfs; do
    img=$work/$fs.img
    truncate -s 2G "$img"
    case $fs in
        ext4) mkfs.ext4 -q -F "$img" ;;
        xfs) mkfs.xfs -q -f "$img" ;;
    esac
    mnt=$work/$fs
    mkdir -p "$mnt"
    mount -o loop "$img" "$mnt"
    echo "== $fs ($(findmnt -n -o SOURCE,OPTIONS "$mnt"))"
    python3 "$here/bench_provision.py" --binary "$bin" --claims "$claims" --configs qps0 \
        --apf on --tmpdir "$mnt"
    python3 "$here/bench_provision.py" --binary "$bin" --claims "$claims" --configs qps0 \
        --apf on --tmpdir "$mnt" --syscalls | grep -E "system calls|strace|exit code"
    umount "$mnt"
    mnt=""
    rm -f "$img"
done
