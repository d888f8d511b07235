#!/usr/bin/env bash
# Installs the test dependencies, builds twice (plain with -Werror, and with AddressSanitizer +
# UndefinedBehaviorSanitizer) and runs every unit and integration test in both builds (the fast
# tier; the Helm chart's tests use helm, built once from the Go module proxy like the control
# plane below). Then the realcluster tier, once, in the plain build: it builds a real Kubernetes
# control plane from the Go module proxy (cached in build/realcluster/ and Go's caches: only
# the first build on a machine pays), starts it on 127.0.0.1 (tests/realcluster/cluster.py),
# runs the suite "realcluster" against it and stops it. Then the node tier: the same control
# plane plus a real node (kubelet, containerd, runc, bridge CNI: tests/realcluster/node.py),
# our image and the e2e images imported without a registry, the suite "node" (real pods, the
# upstream External Storage e2e suite) run against it; the machine must be left as it was
# (node.py snapshot/compare). And the VM tier, once, in the plain
# build: the suite "vm" (tests/vm/README.md), a virtual machine booting Debian's own kernel,
# which has project quotas (this machine's has none for XFS), about four minutes.
# The last line is "N passed, M failed[, K skipped]".
#   scripts/test.sh [meson test args...]   e.g. scripts/test.sh --suite unit
#   REALCLUSTER=0 scripts/test.sh          fast tier only (default when args are given)
#   REALCLUSTER=1 scripts/test.sh ARGS     the real tier too, with ARGS for its meson test
#   REALCLUSTER=only scripts/test.sh [ARGS]  the plain build and the real tiers only
#   NODETIER=0 ...                         without the node tier; NODETIER=only: the plain
#                                          build and the node tier only
#   FRESH=0 scripts/test.sh                skip the fresh-machine demo (run with the real tier)
#   VM=0 / VM=1 / VM=only                  the same for the VM tier (on by default without args)
set -uo pipefail
cd "$(dirname "$0")/.."
# When this run started: the node tier's e2e test leaves its [Slow] set out when too much of
# CI's 90 minutes is gone (a fresh machine's first builds), see tests/realcluster/test_node_e2e.py.
export HP_CI_T0=${HP_CI_T0:-$(date +%s)}

if ! scripts/setup.sh --test; then
    echo "test: installing the test dependencies failed (scripts/setup.sh --test said why, above)"
    echo "0 passed, 1 failed"
    exit 1
fi

passed=0; failed=0; skipped=0
# Sets up (or re-configures: scripts/run.sh may have made it without the test dependencies,
# which turns the tests off) and builds one build directory, with the tests required: a test
# dependency still missing is an error here, not a silently smaller run. On failure prints the
# step's whole output, says which step failed and returns 1.
configure_and_build() {
    local dir=$1; shift
    local opts=(--werror -Dtests=enabled -Dintegration=enabled "$@")
    if [ ! -f "$dir/build.ninja" ]; then
        local setup=(meson setup "$dir")
        [ -d "$dir/meson-private" ] && setup=(meson setup --reconfigure "$dir")
        if ! "${setup[@]}" "${opts[@]}" >"$dir.setup.log" 2>&1; then
            cat "$dir.setup.log"
            echo "test: configuring $dir failed: '${setup[*]} ${opts[*]}' said the above" \
                 "(also in $dir.setup.log)"
            return 1
        fi
    elif ! meson configure "$dir" "${opts[@]}" >"$dir.setup.log" 2>&1; then
        cat "$dir.setup.log"
        echo "test: re-configuring $dir failed: 'meson configure $dir ${opts[*]}' said the above"
        return 1
    fi
    if ! ninja -C "$dir" >"$dir.ninja.log" 2>&1; then
        cat "$dir.ninja.log"
        echo "test: building $dir failed: 'ninja -C $dir' said the above (also in $dir.ninja.log)"
        return 1
    fi
}

run_build() {
    local dir=$1; shift
    if ! configure_and_build "$dir" "$@"; then
        failed=$((failed + 1)); return
    fi
    meson test -C "$dir" --print-errorlogs --num-processes 2 --no-suite realcluster \
        --no-suite vm --no-suite node "${TEST_ARGS[@]}" 2>&1 | tee "$dir.test.log"
    count "$dir.test.log"
}

# Adds a meson test log's summary to the totals (a log without one is a failure).
count() {
    local ok fail skip timeout upass
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$1" | tail -1)
    fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$1" | tail -1)
    skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$1" | tail -1)
    timeout=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$1" | tail -1)
    upass=$(sed -n 's/^Unexpected Pass: *\([0-9]*\).*/\1/p' "$1" | tail -1)
    if [ -z "$ok" ]; then failed=$((failed + 1)); return; fi
    passed=$((passed + ok))
    failed=$((failed + ${fail:-0} + ${timeout:-0} + ${upass:-0}))
    skipped=$((skipped + ${skip:-0}))
}

# The realcluster tier in the plain build (the provisioner binary under test is the same code
# the sanitizer build already ran through every scenario against the stand-in; the real
# control plane adds protocol and controller behaviour, not new C paths worth a second run).
cluster_pid=""
node_pid=""
stop_node() {
    if [ -n "$node_pid" ] && kill -0 "$node_pid" 2>/dev/null; then
        kill -TERM "$node_pid" 2>/dev/null
        for _ in $(seq 1 360); do kill -0 "$node_pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$node_pid" 2>/dev/null
    fi
    node_pid=""
}
stop_cluster() {
    if [ -n "$cluster_pid" ] && kill -0 "$cluster_pid" 2>/dev/null; then
        kill -TERM "$cluster_pid" 2>/dev/null
        for _ in $(seq 1 60); do kill -0 "$cluster_pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$cluster_pid" 2>/dev/null
    fi
    cluster_pid=""
}
trap 'stop_cluster; stop_node' EXIT

run_realcluster() {
    local dir=build t0 bin state logs=build/realcluster-logs
    t0=$(date +%s)
    if [ ! -f "$dir/build.ninja" ]; then
        echo "realcluster: no $dir build"; failed=$((failed + 1)); return
    fi
    if ! bin=$(tests/realcluster/build.sh "$dir/realcluster" \
            2> >(tee "$dir/realcluster.build.log" >&2)); then
        echo "realcluster: building the control plane failed (log: $dir/realcluster.build.log)"
        failed=$((failed + 1)); return
    fi
    rm -rf "$logs"; mkdir -p "$logs"
    state=$(mktemp -d "${TMPDIR:-/tmp}/hp-realcluster.XXXXXX")
    /usr/bin/python3 tests/realcluster/cluster.py up --bin-dir "$bin" --state-dir "$state" \
        >"$logs/cluster.log" 2>&1 &
    cluster_pid=$!
    local i
    for i in $(seq 1 600); do # bounded: 5 minutes
        [ -f "$state/ready.json" ] && break
        kill -0 "$cluster_pid" 2>/dev/null || break
        sleep 0.5
    done
    if [ -f "$state/ready.json" ]; then
        echo "realcluster: control plane up after $(($(date +%s) - t0))s"
        HP_REALCLUSTER_STATE=$state HP_REALCLUSTER_LOGS=$PWD/$logs/provisioners \
            meson test -C "$dir" --print-errorlogs --num-processes 1 --suite realcluster \
            "${REAL_ARGS[@]}" 2>&1 | tee "$dir.realcluster.log"
        count "$dir.realcluster.log"
    else
        echo "realcluster: the control plane did not start:"; tail -40 "$logs/cluster.log"
        for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
            [ -f "$state/$c.log" ] && { echo "--- $c"; tail -15 "$state/$c.log"; }
        done
        failed=$((failed + 1))
    fi
    stop_cluster
    cp "$state"/*.log "$logs/" 2>/dev/null
    rm -rf "$state"
    echo "realcluster: tier took $(($(date +%s) - t0))s (logs: $logs/)"
}

# The node tier: a control plane without stand-in nodes and a real node (node.py up), the
# images built and imported, the suite "node", then the machine compared with a snapshot
# taken before (a difference is a failure: the tier must leave the machine as it was).
run_nodetier() {
    local dir=build t0 bin state logs=build/nodetier-logs
    t0=$(date +%s)
    if ! bin=$(tests/realcluster/build.sh "$dir/realcluster" 2>>"$dir/realcluster.build.log"); then
        echo "nodetier: building the binaries failed (log: $dir/realcluster.build.log)"
        failed=$((failed + 1)); return
    fi
    rm -rf "$logs"; mkdir -p "$logs"
    if ! /usr/bin/python3 tests/realcluster/images.py build --bin-dir "$bin" \
            --out "$dir/realcluster/images" >"$logs/images.log" 2>&1; then
        echo "nodetier: building the images failed:"; tail -30 "$logs/images.log"
        failed=$((failed + 1)); return
    fi
    echo "nodetier: images built after $(($(date +%s) - t0))s"
    /usr/bin/python3 tests/realcluster/node.py snapshot >"$logs/machine-before.json"
    state=$(mktemp -d "${TMPDIR:-/tmp}/hp-node.XXXXXX")
    /usr/bin/python3 tests/realcluster/node.py up --bin-dir "$bin" --state-dir "$state" \
        --images-dir "$dir/realcluster/images" >"$logs/node.log" 2>&1 &
    node_pid=$!
    local i
    for i in $(seq 1 720); do # bounded: 6 minutes
        [ -f "$state/ready.json" ] && break
        kill -0 "$node_pid" 2>/dev/null || break
        sleep 0.5
    done
    if [ -f "$state/ready.json" ]; then
        echo "nodetier: control plane and node up after $(($(date +%s) - t0))s"
        HP_NODE_STATE=$state HP_REALCLUSTER_LOGS=$PWD/$logs/provisioners \
            meson test -C "$dir" --print-errorlogs --num-processes 1 --suite node \
            "${REAL_ARGS[@]}" 2>&1 | tee "$dir.nodetier.log"
        count "$dir.nodetier.log"
    else
        echo "nodetier: the node did not start:"; tail -40 "$logs/node.log"
        for c in containerd kubelet; do
            [ -f "$state/node/$c.log" ] && { echo "--- $c"; tail -15 "$state/node/$c.log"; }
        done
        failed=$((failed + 1))
    fi
    stop_node
    cp "$state"/cluster/*.log "$state"/node/*.log "$logs/" 2>/dev/null
    # After a crash of node.py: undo what it left (a no-op after a clean stop).
    /usr/bin/python3 tests/realcluster/node.py clean --state-dir "$state/node" \
        >>"$logs/node.log" 2>&1
    if ! /usr/bin/python3 tests/realcluster/node.py compare "$logs/machine-before.json"; then
        failed=$((failed + 1))
    fi
    rm -rf "$state"
    echo "nodetier: tier took $(($(date +%s) - t0))s (logs: $logs/)"
}

# helm for the chart's tests (tests/integration/test_chart.py in both builds,
# tests/realcluster/test_real_helm.py), built from the Go module proxy once and cached under
# build/realcluster/ like the control plane (with the same Go, find-go.sh's); the tests find it
# through HP_HELM.
build_helm() {
    if [ -n "${HP_HELM:-}" ]; then return; fi
    mkdir -p build
    if HP_HELM=$(tests/realcluster/build-helm.sh build/realcluster \
            2> >(tee build/helm.build.log >&2)); then
        export HP_HELM
    else
        echo "helm: the build failed (log: build/helm.build.log)"; failed=$((failed + 1))
    fi
}

# The fresh-machine test's demo half (tests/fresh/run.sh): README's first command in a new
# minbase Debian 12 root. Counted as one test; skipped (counted) where it cannot run.
run_fresh() {
    local t0 rc
    t0=$(date +%s)
    if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
        echo "fresh: SKIPPED (needs root and debootstrap)"; skipped=$((skipped + 1)); return
    fi
    tests/fresh/run.sh --demo 2>&1 | tee build-fresh.log
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    echo "fresh: took $(($(date +%s) - t0))s (log: build-fresh.log, build-fresh/)"
}

# The VM tier in the plain build: qemu boots Debian's kernel (fetched into a cache by
# tests/vm/vm.py) and runs the suite "vm" inside; one VM at a time.
run_vm() {
    local dir=build t0
    t0=$(date +%s)
    if [ ! -f "$dir/build.ninja" ]; then
        echo "vm: no $dir build"; failed=$((failed + 1)); return
    fi
    if ! /usr/bin/python3 tests/vm/vm.py prepare >"$dir/vm.prepare.log" 2>&1; then
        echo "vm: preparing the VM failed:"; tail -20 "$dir/vm.prepare.log"
        failed=$((failed + 1)); return
    fi
    meson test -C "$dir" --print-errorlogs --num-processes 1 --suite vm "${VM_ARGS[@]}" 2>&1 |
        tee "$dir.vm.log"
    count "$dir.vm.log"
    echo "vm: tier took $(($(date +%s) - t0))s"
}

TEST_ARGS=("$@")
REAL_ARGS=()
VM_ARGS=()
vm=${VM:-}
if [ -z "$vm" ]; then
    if [ "$#" -eq 0 ]; then vm=1; else vm=0; fi
else
    VM_ARGS=("$@")
fi
realcluster=${REALCLUSTER:-}
nodetier=${NODETIER:-1}
if [ -z "$realcluster" ]; then
    if [ "$#" -eq 0 ]; then realcluster=1; else realcluster=0; fi
else
    REAL_ARGS=("$@")
fi

build_helm
if [ "$realcluster" = only ] || [ "$vm" = only ] || [ "$nodetier" = only ]; then
    if ! configure_and_build build; then
        echo "0 passed, 1 failed"; exit 1
    fi
    # One tier "only": another runs too only when its variable says 1 itself (the node tier:
    # also with REALCLUSTER=only, unless NODETIER=0).
    if [ "$vm" = only ] || [ "${VM:-}" = 1 ]; then run_vm; fi
    if [ "$nodetier" != only ] && { [ "$realcluster" = only ] || [ "${REALCLUSTER:-}" = 1 ]; }
    then
        run_realcluster
    fi
    if [ "$nodetier" = only ] || { [ "$nodetier" != 0 ] && [ "$realcluster" = only ]; }; then
        run_nodetier
    fi
else
    run_build build
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
        run_build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
    if [ "$vm" = 1 ]; then
        run_vm
    fi
    if [ "$realcluster" = 1 ]; then
        [ "${FRESH:-1}" = 0 ] || run_fresh
        run_realcluster
        [ "$nodetier" = 0 ] || run_nodetier
    fi
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
