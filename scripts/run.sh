#!/usr/bin/env bash
# Builds hostpath-provisioner and runs it.
#  - With a kubeconfig ($KUBECONFIG or ~/.kube/config) it runs against that cluster with
#    --pv-dir ${PV_DIR:-/var/lib/hostpath-provisioner}; extra arguments are passed through.
#  - Without one, a demo: it starts the project's local Kubernetes API server
#    (tests/integration/apiserver.py) in a temporary directory, runs the provisioner against it,
#    and scripts/demo.py creates a StorageClass and a claim, waits until the claim is Bound and
#    prints a summary (the claim, the PV, the directory, the metrics URL) and, for each step,
#    the kubectl command that does the same. It needs only the build dependencies plus python3
#    and openssl (scripts/setup.sh --demo), not kubectl. The provisioner then keeps running;
#    Ctrl-C stops everything and removes the temporary directory (it holds the demo CA's key).
# HP_BINARY=path runs that binary instead of building build/hostpath-provisioner.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# Ctrl-C (or SIGTERM) at any point: exit, which runs the demo's cleanup once it is armed.
interrupted=""
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

kubeconfig="${KUBECONFIG:-${HOME:-}/.kube/config}"
cluster=""
if [ -f "${kubeconfig%%:*}" ] || [ -n "${KUBERNETES_SERVICE_HOST:-}" ]; then
    cluster=1
fi

if [ -n "$cluster" ]; then
    scripts/setup.sh
else
    scripts/setup.sh --demo
fi
if [ -n "${HP_BINARY:-}" ]; then
    bin=$HP_BINARY
    if [ ! -x "$bin" ]; then
        echo "run: HP_BINARY=$bin is not an executable file" >&2
        exit 1
    fi
else
    # Quiet when it works; when a step fails, everything it printed is shown, with the step.
    if [ ! -f build/build.ninja ]; then
        setup_args=(build)
        if [ -d build/meson-private ]; then
            setup_args=(--reconfigure build) # an earlier setup stopped half way
        fi
        if ! meson setup "${setup_args[@]}" >build.setup.log 2>&1; then
            cat build.setup.log >&2
            echo "run: configuring the build failed: 'meson setup build' said the above" \
                 "(also in build.setup.log). scripts/setup.sh installs the build dependencies;" \
                 "the provisioner needs no test dependency." >&2
            exit 1
        fi
    fi
    if ! ninja -C build hostpath-provisioner >build.ninja.log 2>&1; then
        cat build.ninja.log >&2
        echo "run: building the provisioner failed: 'ninja -C build hostpath-provisioner'" \
             "said the above (also in build.ninja.log)" >&2
        exit 1
    fi
    bin="$root/build/hostpath-provisioner"
fi

if [ -n "$cluster" ]; then
    echo "run: using kubeconfig ${kubeconfig%%:*} (Ctrl-C to stop)" >&2
    exec "$bin" --pv-dir "${PV_DIR:-/var/lib/hostpath-provisioner}" "$@"
fi

# No cluster: the demo. Everything it starts is stopped, and its directory removed, on any exit.
state=""
api_pid=""
prov_pid=""
tail_pid=""
# Stops one process we started: SIGTERM, at most 10 s for it to exit, then SIGKILL.
stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    trap '' INT TERM # a second Ctrl-C must not interrupt the cleanup
    local pid
    # Ctrl-C reached the provisioner too (the terminal signals the whole group): let it finish
    # its own clean stop (a SIGTERM now would be a second signal, which exits at once).
    if [ -n "$interrupted" ] && [ -n "$prov_pid" ]; then
        for _ in $(seq 1 50); do
            kill -0 "$prov_pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    for pid in "$prov_pid" "$api_pid" "$tail_pid"; do
        if [ -n "$pid" ]; then
            stop_pid "$pid"
        fi
    done
    if [ -n "$state" ]; then
        rm -rf "$state"
        echo "run: demo stopped; removed $state" >&2
    fi
}
trap cleanup EXIT

state=$(mktemp -d "${TMPDIR:-/tmp}/hostpath-demo.XXXXXX")
pv_dir="$state/volumes"
log="$state/provisioner.log"
echo "run: no kubeconfig found; starting a demo cluster (the project's local API server)" \
    "in $state" >&2
/usr/bin/python3 tests/integration/apiserver.py --state-dir "$state" --port 0 \
    >"$state/apiserver.out" 2>&1 </dev/null &
api_pid=$!
for _ in $(seq 1 150); do
    [ -f "$state/ready.json" ] && break
    kill -0 "$api_pid" 2>/dev/null || break
    sleep 0.1
done
if [ ! -f "$state/ready.json" ]; then
    echo "run: the demo API server did not start:" >&2
    cat "$state/apiserver.out" >&2
    exit 1
fi

echo "run: starting the provisioner: $bin --kubeconfig $state/kubeconfig --pv-dir $pv_dir" \
    "--metrics-address 127.0.0.1:0 $*" >&2
: >"$log"
"$bin" --kubeconfig "$state/kubeconfig" --pv-dir "$pv_dir" --metrics-address 127.0.0.1:0 "$@" \
    2>"$log" </dev/null &
prov_pid=$!
# Its log, live on this terminal, and kept in $log for demo.py to find the metrics port.
tail -n +1 -f --pid="$prov_pid" "$log" >&2 &
tail_pid=$!

/usr/bin/python3 scripts/demo.py --state "$state" --pv-dir "$pv_dir" --provisioner-log "$log" \
    --provisioner-pid "$prov_pid"

rc=0
wait "$prov_pid" || rc=$?
prov_pid=""
echo "run: the provisioner exited with status $rc" >&2
exit "$rc"
