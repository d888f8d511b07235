#!/usr/bin/env bash
# Builds hostpath-provisioner and runs it.
#  - With a kubeconfig ($KUBECONFIG or ~/.kube/config) it runs against that cluster with
#    --pv-dir ${PV_DIR:-/var/lib/hostpath-provisioner}; extra arguments are passed through.
#  - Without one, it starts the project's local Kubernetes API server (tests/integration) as a
#    demo cluster, creates a StorageClass and a claim, and runs the provisioner against it so
#    you can watch a claim get bound. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/setup.sh
if [ ! -f build/build.ninja ]; then
    meson setup build >/dev/null
fi
ninja -C build hostpath-provisioner >/dev/null
bin="$root/build/hostpath-provisioner"

kubeconfig="${KUBECONFIG:-$HOME/.kube/config}"
if [ -f "${kubeconfig%%:*}" ] || [ -n "${KUBERNETES_SERVICE_HOST:-}" ]; then
    echo "run: using kubeconfig ${kubeconfig%%:*} (Ctrl-C to stop)" >&2
    exec "$bin" --pv-dir "${PV_DIR:-/var/lib/hostpath-provisioner}" "$@"
fi

# No cluster: a local demo API server.
scripts/setup.sh --test >/dev/null
state=$(mktemp -d /tmp/hostpath-demo.XXXXXX)
pv_dir="$state/volumes"
echo "run: no kubeconfig found; starting a local demo API server in $state" >&2
/usr/bin/python3 tests/integration/apiserver.py --state-dir "$state" --port 0 \
    >"$state/apiserver.out" 2>&1 &
api_pid=$!
prov_pid=""
cleanup() {
    [ -n "$prov_pid" ] && kill -TERM "$prov_pid" 2>/dev/null && wait "$prov_pid" 2>/dev/null
    kill "$api_pid" 2>/dev/null || true
    wait "$api_pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
for _ in $(seq 1 150); do
    [ -f "$state/ready.json" ] && break
    sleep 0.1
done
[ -f "$state/ready.json" ] || { echo "run: demo API server did not start:" >&2; cat "$state/apiserver.out" >&2; exit 1; }
export KUBECONFIG="$state/kubeconfig"

"$bin" --pv-dir "$pv_dir" --metrics-address 127.0.0.1:0 "$@" &
prov_pid=$!
sleep 0.5
cat <<YAML | kubectl apply -f - >&2
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: hostpath
provisioner: example.com/hostpath
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: demo-claim
  namespace: default
spec:
  storageClassName: hostpath
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
YAML
for _ in $(seq 1 100); do
    phase=$(kubectl get pvc demo-claim -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [ "$phase" = "Bound" ] && break
    sleep 0.1
done
kubectl get pvc,pv >&2 || true
echo "run: volume directories under $pv_dir:" >&2
ls -l "$pv_dir" >&2 || true
echo "run: demo cluster kubeconfig: KUBECONFIG=$KUBECONFIG  (Ctrl-C to stop)" >&2
wait "$prov_pid"
