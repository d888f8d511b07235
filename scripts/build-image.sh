#!/usr/bin/env bash
# Builds the Containerfile without a Docker engine or a registry:
#  1. debootstrap --variant=minbase bookworm makes a Debian root file system from Debian's
#     archive, committed with buildah as debian:bookworm-slim (the Containerfile's FROM);
#  2. buildah bud (vfs storage, chroot isolation) builds the image as
#     localhost/hostpath-provisioner:<version>.
# The base image is cached in buildah's storage; set REBUILD_BASE=1 to make it again.
#   scripts/build-image.sh [tag]
set -euo pipefail
cd "$(dirname "$0")/.."
export STORAGE_DRIVER=vfs
export BUILDAH_ISOLATION=chroot
tag=${1:-localhost/hostpath-provisioner:0.1.0}
base=docker.io/library/debian:bookworm-slim
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

for tool in buildah debootstrap; do
    command -v "$tool" >/dev/null || { echo "build-image: $tool is not installed (scripts/setup.sh --test installs it)" >&2; exit 77; }
done

if [ -n "${REBUILD_BASE:-}" ] || ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    rootfs=$(mktemp -d /tmp/hp-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "build-image: debootstrap bookworm into $rootfs" >&2
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
        { tail -20 "$rootfs.log" >&2; exit 1; }
    # Slim it the way debian:bookworm-slim is slimmed: no documentation, manuals or locales,
    # now and for every package installed later.
    mkdir -p "$rootfs"/etc/dpkg/dpkg.cfg.d
    cat >"$rootfs"/etc/dpkg/dpkg.cfg.d/slim <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
CFG
    find "$rootfs"/usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
        "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    ctr=$(buildah from scratch)
    mnt=$(buildah mount "$ctr")
    cp -a "$rootfs"/. "$mnt"/
    buildah umount "$ctr" >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "$ctr"
    buildah commit --rm "$ctr" "$base" >/dev/null
    rm -f "$rootfs.log"
fi

echo "build-image: building $tag" >&2
buildah bud --isolation chroot --layers=false -f Containerfile -t "$tag" . >&2
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$tag"
