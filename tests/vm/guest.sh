#!/bin/bash
# Runs inside the test VM, started by vminit as /bin/bash guest.sh /hp-vm (the run directory
# shared with the host, read-write). The root is the host's, read-only under a tmpfs overlay.
#
# Reads from the run directory, written by tests/vm/vm.py:
#   modules   the extracted kernel's modules directory (a host path, visible here)
#   disks     one line per scratch disk: SERIAL FSTYPE MOUNTPOINT MKFS-OPTS MOUNT-OPTS, separated
#             by \x1f (a tab is white space to read: empty fields would vanish)
#   cmd       the command, as a bash script (cd, exports, exec)
# Writes: guest.log (this script's own steps), output (the command's stdout and stderr), rc (its
# exit code), times (guest uptime: when this script started, when the disks were ready, when the
# command ended).
set -u
run=${1:-/hp-vm}
exec </dev/null >>"$run/guest.log" 2>&1

uptime_s() { local u; read -r u _ </proc/uptime; echo "$u"; }
echo "start $(uptime_s)" >"$run/times"
fail() {
    echo "guest: $*"
    echo "guest: $*" >>"$run/output"
    echo 125 >"$run/rc"
    exit 125
}

# The kernel's modules, where modprobe and the kernel's own module requests look for them.
kver=$(uname -r)
mods=$(cat "$run/modules")
mkdir -p /lib/modules || fail "cannot make /lib/modules"
ln -sfn "$mods" "/lib/modules/$kver" || fail "cannot link /lib/modules/$kver"

# The scratch disks: found by their serial (the host's disk order is not the guest's).
disk_list=""
if [ -s "$run/disks" ]; then
    while IFS=$'\x1f' read -r serial fstype mnt mkfsopts mountopts; do
        dev=""
        # Bounded: the disk shows up within a few seconds. Builtins only: every program
        # started here is read over 9p under emulation, and costs.
        for ((i = 0; i < 50; i++)); do
            for b in /sys/block/vd*; do
                [ -e "$b/serial" ] && [ "$(<"$b/serial")" = "$serial" ] &&
                    dev=/dev/${b##*/} && break
            done
            [ -n "$dev" ] && break
            read -r -t 0.1 <> <(:) || true # a builtin sleep
        done
        [ -n "$dev" ] || fail "disk $serial did not appear"
        case "$fstype" in
        raw) echo "guest: $serial is $dev (raw)"; disk_list+="raw:$dev "; continue ;;
        # No discard: the image is a fresh sparse file, and discarding it is slow here.
        xfs) mkfs=(mkfs.xfs -q -f -K) ;;
        ext4|ext3|ext2) mkfs=("mkfs.$fstype" -q -F -E nodiscard) ;;
        *) mkfs=("mkfs.$fstype") ;;
        esac
        # mkfsopts is split on spaces on purpose: "-O quota,project" is two words.
        # shellcheck disable=SC2206
        mkfs+=($mkfsopts "$dev")
        echo "guest: $(uptime_s) ${mkfs[*]}"
        "${mkfs[@]}" || fail "${mkfs[*]} failed"
        mkdir -p "$mnt" || fail "cannot make $mnt"
        opts=()
        [ -n "$mountopts" ] && opts=(-o "$mountopts")
        mount -t "$fstype" "${opts[@]}" "$dev" "$mnt" ||
            fail "mount -t $fstype ${opts[*]} $dev $mnt failed"
        echo "guest: $(uptime_s) $dev ($fstype) mounted on $mnt"
        disk_list+="$fstype:$mnt "
    done <"$run/disks"
fi
echo "ready $(uptime_s)" >>"$run/times"

HP_VM=1 HP_VM_DISKS="${disk_list% }" /bin/bash "$run/cmd" >"$run/output" 2>&1 </dev/null
rc=$?
echo "end $(uptime_s)" >>"$run/times"
echo "guest: command exited $rc"
# Unmount the disks so that their journals are clean (the images are thrown away, but a
# command that left a mount busy should still see its exit code reported).
if [ -s "$run/disks" ]; then
    while IFS=$'\x1f' read -r _ fstype mnt _ _; do
        [ "$fstype" = raw ] || umount "$mnt" || echo "guest: umount $mnt failed"
    done <"$run/disks"
fi
echo "$rc" >"$run/rc"
sync
exit 0
