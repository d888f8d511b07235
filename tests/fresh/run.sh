#!/usr/bin/env bash
# The fresh-machine test: README's two commands, run as a newcomer runs them, on a Debian 12
# machine that has never seen the project.
#
#   tests/fresh/run.sh [--demo] [--tests | --full] [--keep] [--refresh]
#
# It makes a Debian 12 root with `debootstrap --variant=minbase bookworm` (once per machine: the
# result is cached as a tarball in $HP_FRESH_CACHE, default /var/cache/hostpath-provisioner-fresh;
# --refresh makes it again), unpacks a copy, gives it the apt sources of a Debian 12 install
# (bookworm, bookworm-updates, bookworm-security), this machine's resolv.conf and the /etc/hosts
# Debian's installer writes, clones this
# checkout's HEAD into /root/hostpath-provisioner (committed work only), mounts /proc, /sys,
# /dev and a tmpfs /tmp into it, and inside a chroot, as root, with an empty environment:
#
#   --demo (the default)  ./scripts/run.sh  until its claim is Bound, then Ctrl-C (SIGINT to its
#                         process group, as a terminal sends it): it must exit 130 within 60 s,
#                         its provisioner having logged `main: stopped`, every process it started
#                         gone and its temporary directory removed;
#   --tests               then  REALCLUSTER=0 ./scripts/test.sh  (the fast tier: it must end
#                         "N passed, 0 failed");
#   --full                then  FRESH=0 ./scripts/test.sh  as README says (both tiers; on a fresh
#                         root that includes fetching Go and building Kubernetes; FRESH=0 only
#                         keeps it from running this test again inside itself).
#
# Nothing is installed in the root beforehand: what the commands need, they must install. Only
# downloaded .deb files are kept between runs ($HP_FRESH_CACHE/apt-archives, bind-mounted as the
# root's /var/cache/apt/archives), so a second run downloads less; every package is still
# installed by the commands under test.
# Whatever happens, everything is unmounted, every process started in the root is killed (by
# pid) and the root is removed (--keep leaves it, unmounted, and prints where).
# Needs root, debootstrap and git (scripts/setup.sh --test installs debootstrap).
# The last line is "fresh: passed (...)" or "fresh: FAILED: <why>"; the exit status 0 or 1.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
cache=${HP_FRESH_CACHE:-/var/cache/hostpath-provisioner-fresh}
mirror=${HP_FRESH_MIRROR:-http://deb.debian.org/debian}
demo=1; tests=""; keep=""; refresh=""
for a in "$@"; do
    case "$a" in
        --demo) demo=1 ;;
        --tests) tests=fast ;;
        --full) tests=full ;;
        --keep) keep=1 ;;
        --refresh) refresh=1 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//; /^set -uo/d'; exit 0 ;;
        *) echo "fresh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done

t_start=$(date +%s)
say() { echo "fresh: [$(($(date +%s) - t_start))s] $*"; }
fail() { echo "fresh: FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot and mounts)"
command -v debootstrap >/dev/null || fail "debootstrap is not installed (scripts/setup.sh --test)"
command -v git >/dev/null || fail "git is not installed"

# ---- the cached minbase root ----
mkdir -p "$cache/apt-archives/partial"
tarball="$cache/bookworm-minbase.tar"
exec 9>"$cache/.lock"
flock -w 1800 9 || fail "another fresh-machine test holds $cache/.lock"
if [ -n "$refresh" ] || [ ! -s "$tarball" ]; then
    say "making a Debian 12 minbase root with debootstrap (once per machine, ~1 min)"
    tmp_root="$cache/minbase.tmp"
    rm -rf "$tmp_root"
    if ! debootstrap --variant=minbase bookworm "$tmp_root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
        tail -30 "$cache/debootstrap.log"
        rm -rf "$tmp_root"
        fail "debootstrap failed (log above, whole in $cache/debootstrap.log)"
    fi
    tar -C "$tmp_root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball" ||
        fail "could not write $tarball"
    rm -rf "$tmp_root"
fi

# ---- a new root from it ----
root=$(mktemp -d /var/tmp/hp-fresh.XXXXXX)
mounted=()   # mount points, in mount order
log_dir=${HP_FRESH_LOGS:-$src/build-fresh}
rm -rf "$log_dir"; mkdir -p "$log_dir"

# Kills every process whose root directory is ours (only processes started in it can be).
kill_inside() {
    local sig=$1 p r n=0
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        if [ "$r" = "$root" ]; then
            kill "-$sig" "${p#/proc/}" 2>/dev/null && n=$((n + 1))
        fi
    done
    echo "$n"
}
cleanup() {
    local i n
    trap '' INT TERM
    for i in $(seq 1 20); do
        n=$(kill_inside TERM)
        [ "$n" -eq 0 ] && break
        sleep 0.5
    done
    [ "$(kill_inside KILL)" -eq 0 ] || sleep 1
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -R "${mounted[$i]}" 2>/dev/null || umount -R -l "${mounted[$i]}" 2>/dev/null ||
            echo "fresh: could not unmount ${mounted[$i]}"
    done
    if grep -q " $root/" /proc/self/mountinfo; then
        echo "fresh: something is still mounted under $root; not removing it:"
        grep " $root/" /proc/self/mountinfo | cut -d' ' -f5
        return
    fi
    if [ -n "$keep" ]; then
        echo "fresh: kept the root at $root (logs in $log_dir)"
    else
        rm -rf "$root"
        echo "fresh: removed the root (logs kept in $log_dir)"
    fi
}
trap cleanup EXIT
trap 'fail "interrupted"' INT TERM

say "unpacking the minbase root into $root"
tar -C "$root" -xf "$tarball" || fail "could not unpack $tarball"
# The apt sources of a Debian 12 installation, and this machine's resolver.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# What Debian's installer writes (debootstrap writes neither): without /etc/hosts, "localhost"
# would be asked of the DNS server.
cat >"$root/etc/hosts" <<EOF
127.0.0.1	localhost
127.0.1.1	$(uname -n)

::1     localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters
EOF
uname -n >"$root/etc/hostname"
# CA certificates this machine's administrator added (a TLS-inspecting proxy on the way out, as
# in some offices and sandboxes): the root's ca-certificates package, once the commands install
# it, includes them as it would on this machine; the root has none of its own yet.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

head=$(git -C "$src" rev-parse --short HEAD)
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
    say "note: $src has uncommitted changes; only the commit $head is tested"
fi
git clone -q --no-hardlinks "$src" "$root/root/hostpath-provisioner" ||
    fail "git clone of $src failed"
say "cloned $head into /root/hostpath-provisioner"

mnt() { # mnt TARGET ARGS...: mounts and remembers it
    local target=$1; shift
    mount "$@" "$target" || fail "mount $* $target failed"
    mounted+=("$target")
}
mnt "$root/proc" -t proc proc
mnt "$root/sys" -t sysfs sysfs
mnt "$root/dev" --rbind /dev
mount --make-rslave "$root/dev"
mnt "$root/tmp" -t tmpfs -o mode=1777 tmpfs
mnt "$root/var/cache/apt/archives" --bind "$cache/apt-archives"

# A command line runs inside the root as a newcomer's root shell would: in the project's
# checkout, with a login-like, otherwise empty environment; in its own session, so that
# SIGINT to its process group is what a terminal's Ctrl-C is.
# Run as "${inside[@]}" "COMMAND LINE": env, setsid, chroot, env and bash keep one pid (each
# execs the next; setsid needs no fork, this script's children being no group leaders), so a
# background run's $! is its process group. A background command of a script starts with SIGINT
# and SIGQUIT ignored, and a shell cannot trap a signal ignored at its start: the first env gives
# them back their default, as a terminal's shell has them.
inside=(env --default-signal=INT,QUIT setsid chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb USER=root
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c)
project=/root/hostpath-provisioner

# ---- README command 1: the demo ----
if [ -n "$demo" ]; then
    say "running ./scripts/run.sh (installs, builds, starts the demo cluster)"
    dlog="$log_dir/run.log"
    "${inside[@]}" "cd $project && ./scripts/run.sh" >"$dlog" 2>&1 </dev/null &
    pid=$!
    sleep 1
    if [ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" != "$pid" ]; then
        fail "could not start ./scripts/run.sh in a process group of its own"
    fi
    bound=""
    for _ in $(seq 1 1800); do # bounded: 15 minutes (apt downloads and a build)
        if grep -q "^demo: claim default/demo-claim is Bound" "$dlog"; then bound=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if [ -z "$bound" ]; then
        tail -60 "$dlog"
        if kill -0 "$pid" 2>/dev/null; then
            fail "./scripts/run.sh did not reach a Bound claim within 15 minutes (log above, whole in $dlog)"
        fi
        wait "$pid"; rc=$?
        fail "./scripts/run.sh exited with status $rc before its claim was Bound (log above, whole in $dlog)"
    fi
    say "the demo's claim is Bound; pressing Ctrl-C"
    sleep 2 # the summary is printed after the Bound line
    kill -INT -- "-$pid" 2>/dev/null
    stopped=""
    for _ in $(seq 1 120); do
        kill -0 "$pid" 2>/dev/null || { stopped=1; break; }
        sleep 0.5
    done
    if [ -z "$stopped" ]; then
        tail -30 "$dlog"
        fail "./scripts/run.sh did not exit within 60 s of Ctrl-C (log above, whole in $dlog)"
    fi
    wait "$pid"; rc=$?
    why=()
    [ "$rc" -eq 130 ] || why+=("exit status $rc (a Ctrl-C'd script exits 130)")
    grep -q "main: stopped" "$dlog" || why+=("the provisioner never logged 'main: stopped'")
    demo_dir=$(sed -n 's/^run: demo stopped; removed \(.*\)$/\1/p' "$dlog" | tail -1)
    if [ -z "$demo_dir" ]; then
        why+=("run.sh never said it removed its temporary directory")
    elif [ -e "$root$demo_dir" ]; then
        why+=("its temporary directory $demo_dir is still there")
    fi
    left=$(for p in /proc/[0-9]*; do
               [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && cat "$p/comm" 2>/dev/null
           done | tr '\n' ' ')
    [ -z "$left" ] || why+=("processes left running: $left")
    if [ "${#why[@]}" -gt 0 ]; then
        tail -40 "$dlog"
        fail "the demo did not stop cleanly: ${why[*]} (log above, whole in $dlog)"
    fi
    say "demo passed: Bound, Ctrl-C, exit 130, 'main: stopped', $demo_dir removed"
fi

# ---- README command 2: the tests ----
if [ -n "$tests" ]; then
    cmd="FRESH=0 ./scripts/test.sh" # not the fresh test again, inside itself
    [ "$tests" = fast ] && cmd="REALCLUSTER=0 ./scripts/test.sh"
    say "running $cmd"
    tlog="$log_dir/test.log"
    "${inside[@]}" "cd $project && $cmd" >"$tlog" 2>&1 </dev/null
    rc=$?
    last=$(tail -1 "$tlog")
    if [ "$rc" -ne 0 ] || ! [[ "$last" =~ ^[0-9]+\ passed,\ 0\ failed ]]; then
        grep -E "FAIL|ERROR|TIMEOUT|failed" "$tlog" | tail -40
        fail "$cmd exited $rc, last line '$last' (whole log in $tlog)"
    fi
    say "$cmd passed: $last"
fi

echo "fresh: passed (commit $head, $(($(date +%s) - t_start)) s)"
