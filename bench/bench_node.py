#!/usr/bin/env python3
"""hostpath-provisioner against rancher/local-path-provisioner on a real node (not CI).

Both run in cluster on the node tier's node (tests/realcluster/node.py): ours as
manifests/daemonset.yaml (class hostpath-local, WaitForFirstConsumer), local-path-provisioner
v0.0.37 built from its Go module and deployed from its own deploy/local-path-storage.yaml
(class local-path, WaitForFirstConsumer; its helper pods run the local busybox image). Both
get the same sandbox changes (nodeharness.sandbox_patch: host network, the API server's
loopback address, a free health/metrics port).

For each configuration: N claims, each with a pod (busybox, sleep) using it, created at once;
per pair the time from the claim's creation to the pod Running (p50, p99, the last = total);
then everything deleted and the time until every PV is gone. The provisioner's CPU time
(user+system, /proc/PID/stat, from before the first claim to the end of the deletions) and
peak resident memory (VmHWM) are read from the node. local-path-provisioner's helper pods
(one per volume made or deleted) are counted too; their own CPU is not in its number.

    bench/bench_node.py [--claims 100] [--configs ours,ours-tuned,lpp,lpp-tuned] [--out F]

It runs against the node of a `node.py up` ($HP_NODE_STATE) or starts one (root; the
binaries from tests/realcluster/build.sh). local-path-provisioner is built with
`GONOSUMDB=github.com/rancher go install github.com/rancher/local-path-provisioner@v0.0.37`
(CGO off) and imported as docker.io/rancher/local-path-provisioner:v0.0.37 (busybox base).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RC = os.path.join(ROOT, "tests", "realcluster")
sys.path.insert(0, RC)
os.environ.setdefault("HP_SOURCE_ROOT", ROOT)
os.environ.setdefault("HP_BINARY", os.path.join(ROOT, "build", "hostpath-provisioner"))
import images  # noqa: E402
import nodeharness  # noqa: E402
from cluster import free_port  # noqa: E402
from harness import ApiError, wait_for  # noqa: E402

LPP_VERSION = "v0.0.37"
LPP_MODULE = "github.com/rancher/local-path-provisioner"
LPP_IMAGE = "docker.io/rancher/local-path-provisioner:" + LPP_VERSION
LPP_NS = "local-path-storage"
CLK_TCK = os.sysconf("SC_CLK_TCK")

CONFIGS = {
    # ours: manifests/daemonset.yaml as shipped (default flags) / no client-side rate limit
    "ours": ("ours", []),
    "ours-tuned": ("ours", ["--kube-api-qps=0", "--kube-api-burst=1000", "--workers=16"]),
    # local-path-provisioner: its deploy yaml as shipped / its client limits and workers up
    "lpp": ("lpp", []),
    "lpp-tuned": ("lpp", ["--kube-client-qps=1000", "--kube-client-burst=1000",
                          "--worker-threads=16"]),
}


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


def kubectl(nc, *args, input=None, ok=True, timeout=300):
    env = dict(os.environ, KUBECONFIG=nc.kubeconfig)
    r = subprocess.run([nc.kubectl] + list(args), capture_output=True, text=True, env=env,
                       input=input, timeout=timeout)
    if ok and r.returncode != 0:
        raise RuntimeError("kubectl %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
    return r.stdout


def build_lpp(out_dir):
    """go install the module (CGO off) and wrap the binary in an image archive."""
    env = dict(os.environ, GONOSUMDB="github.com/rancher", CGO_ENABLED="0", GOFLAGS="",
               GOBIN=os.path.join(out_dir, "bin"),
               PATH="/usr/local/go/bin:" + os.environ.get("PATH", ""))
    t0 = time.monotonic()
    subprocess.run(["go", "install", "%s@%s" % (LPP_MODULE, LPP_VERSION)], env=env, check=True,
                   timeout=3600)
    exe = os.path.join(out_dir, "bin", "local-path-provisioner")
    log("local-path-provisioner %s built in %.0fs" % (LPP_VERSION, time.monotonic() - t0))
    layer = images.busybox_layer(lambda ly: ly.host_file("usr/bin/local-path-provisioner", exe))
    return images.write_oci_archive(os.path.join(out_dir, "local-path-provisioner.tar"),
                                    [LPP_IMAGE], layer,
                                    {"Env": [images.PATH_ENV], "Cmd": ["local-path-provisioner"]})


def lpp_manifest(nc, health_port, extra_args):
    """local-path-storage.yaml from the module, with the sandbox changes (host network, the
    API server's address, a free health port) and the helper image set to the local
    busybox; extra_args go after `start`."""
    gomodcache = subprocess.run(["/usr/local/go/bin/go", "env", "GOMODCACHE"],
                                capture_output=True, text=True, check=True).stdout.strip()
    path = os.path.join(gomodcache, "github.com/rancher/local-path-provisioner@" + LPP_VERSION,
                        "deploy", "local-path-storage.yaml")
    with open(path) as f:
        text = f.read()
    assert "image: docker.io/library/busybox\n" in text
    text = text.replace("image: docker.io/library/busybox\n", "image: %s\n" % images.BUSYBOX)
    d = tempfile.mkdtemp(prefix="hp-bench-lpp-")
    with open(os.path.join(d, "local-path-storage.yaml"), "w") as f:
        f.write(text)
    c = "/spec/template/spec/containers/0"
    patch = [
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": c + "/env/-",
         "value": {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}},
        {"op": "add", "path": c + "/env/-",
         "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(nc.api_port)}},
        {"op": "test", "path": c + "/env/2/name", "value": "HEALTH_PORT"},
        {"op": "replace", "path": c + "/env/2/value", "value": str(health_port)},
        {"op": "replace", "path": c + "/ports/0/containerPort", "value": health_port},
    ] + [{"op": "add", "path": c + "/command/-", "value": a} for a in extra_args]
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": ["local-path-storage.yaml"],
         "patches": [{"target": {"kind": "Deployment", "name": "local-path-provisioner"},
                      "patch": json.dumps(patch)}]}
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        json.dump(k, f)
    return d


def ours_overlay(nc, port, extra_args):
    d = tempfile.mkdtemp(prefix="hp-bench-ours-")
    nodeharness.sandbox_overlay(d, "daemonset", nc.api_port, port)
    with open(os.path.join(d, "kustomization.yaml")) as f:
        k = json.load(f)
    patch = json.loads(k["patches"][0]["patch"])
    patch += [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": a}
              for a in extra_args]
    k["patches"][0]["patch"] = json.dumps(patch)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        json.dump(k, f)
    return d


def provisioner_pid(nc, comm_prefix):
    """The provisioner's process on our node: its comm starts with comm_prefix and its
    parent is a containerd shim of the node's containerd."""
    address = nc.node["address"]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/comm" % pid) as f:
                if not f.read().startswith(comm_prefix):
                    continue
            with open("/proc/%s/stat" % pid) as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open("/proc/%s/cmdline" % ppid, "rb") as f:
                if address.encode() in f.read():
                    return int(pid)
        except (OSError, IndexError):
            continue
    return None


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[i]


def run_config(nc, name, n):
    who, extra = CONFIGS[name]
    api = nc.client
    port = free_port()
    if who == "ours":
        d, ns_p, sel, cls, comm = (ours_overlay(nc, port, extra), nodeharness.NS,
                                   "app.kubernetes.io/name=hostpath-provisioner-node",
                                   "hostpath-local", "hostpath-provi")
    else:
        d, ns_p, sel, cls, comm = (lpp_manifest(nc, port, extra), LPP_NS,
                                   "app=local-path-provisioner", "local-path", "local-path-prov")
    kubectl(nc, "apply", "-k", d)
    try:
        wait_for(lambda: any(
            {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or []}
            .get("Ready") == "True"
            for p in api.list("/api/v1/namespaces/%s/pods" % ns_p, labelSelector=sel)["items"]),
            180, interval=0.5, what="%s provisioner Ready" % name)
        pid = wait_for(lambda: provisioner_pid(nc, comm), 30, what="provisioner pid")
        return measure(nc, name, n, cls, pid)
    finally:
        kubectl(nc, "delete", "-k", d, "--ignore-not-found", "--wait=true", "--timeout=180s",
                ok=False)


def measure(nc, name, n, cls, pid):
    api = nc.client
    ns = "bench-%s-%d" % (name, os.getpid())
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns}})
    wait_for(lambda: api.get("/api/v1/namespaces/%s/serviceaccounts/default" % ns), 30,
             what="default ServiceAccount")
    time.sleep(2)
    cpu0, created, running = cpu_s(pid), {}, {}
    helpers = set()
    stop = threading.Event()

    def watch_helpers():
        while not stop.is_set():
            try:
                for p in api.list("/api/v1/namespaces/%s/pods" % LPP_NS)["items"]:
                    if p["metadata"]["name"].startswith("helper-pod"):
                        helpers.add(p["metadata"]["uid"])
            except (ApiError, OSError):
                pass
            stop.wait(0.5)
    hw = threading.Thread(target=watch_helpers, daemon=True)
    hw.start()
    t0 = time.monotonic()
    for i in range(n):
        c = "c%03d" % i
        created[c] = time.monotonic()
        api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % ns, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": c, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "resources": {"requests": {"storage": "16Mi"}}}})
        api.create("/api/v1/namespaces/%s/pods" % ns, nodeharness.pod_spec(
            c, ns, [c], "sleep 3600", uid=1000))
    made_s = time.monotonic() - t0

    def all_running():
        for p in api.list("/api/v1/namespaces/%s/pods" % ns)["items"]:
            nm = p["metadata"]["name"]
            if nm not in running and (p.get("status") or {}).get("phase") == "Running":
                running[nm] = time.monotonic()
        return len(running) == n
    wait_for(all_running, 900, interval=0.2, what="%d pods Running" % n)
    lat = sorted(running[c] - created[c] for c in created)
    total = max(running.values()) - t0
    # Deletion: pods and claims, until every PV of this namespace is gone.
    t1 = time.monotonic()
    api.delete("/api/v1/namespaces/%s" % ns)

    def pvs_gone():
        return not [pv for pv in api.list("/api/v1/persistentvolumes")["items"]
                    if (pv["spec"].get("claimRef") or {}).get("namespace") == ns]
    wait_for(pvs_gone, 900, interval=0.5, what="PVs of %s deleted" % ns)
    deleted_s = time.monotonic() - t1
    cpu = cpu_s(pid) - cpu0
    hwm = hwm_kib(pid)
    stop.set()
    hw.join(5)
    wait_for(lambda: not _exists(api, "/api/v1/namespaces/" + ns), 300, interval=1,
             what="namespace %s gone" % ns)
    r = {"config": name, "claims": n, "create_s": round(made_s, 1),
         "p50_s": round(pct(lat, 50), 2), "p99_s": round(pct(lat, 99), 2),
         "total_s": round(total, 1), "delete_s": round(deleted_s, 1),
         "cpu_s": round(cpu, 2), "peak_rss_mib": round(hwm / 1024.0, 1),
         "helper_pods": len(helpers)}
    log(json.dumps(r))
    return r


def _exists(api, path):
    try:
        api.get(path)
        return True
    except ApiError as e:
        if e.status == 404:
            return False
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--configs", default="ours,lpp,ours-tuned,lpp-tuned")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", help="append the results here (JSON lines)")
    a = ap.parse_args()
    names = a.configs.split(",")
    for nm in names:
        if nm not in CONFIGS:
            ap.error("unknown config %s (%s)" % (nm, ", ".join(CONFIGS)))
    nc = nodeharness.get_node_cluster()
    if any(CONFIGS[nm][0] == "lpp" for nm in names):
        out = os.path.join(ROOT, "build", "bench-lpp")
        os.makedirs(out, exist_ok=True)
        images.import_archives(nc.node["address"], [build_lpp(out)])
    results = []
    for _ in range(a.runs):
        for nm in names:
            r = run_config(nc, nm, a.claims)
            results.append(r)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print("| config | claims | claim → pod Running p50 | p99 | all Running | all PVs deleted | "
          "provisioner CPU | peak RSS | helper pods |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print("| %(config)s | %(claims)d | %(p50_s).2f s | %(p99_s).2f s | %(total_s).1f s | "
              "%(delete_s).1f s | %(cpu_s).2f s | %(peak_rss_mib).1f MiB | %(helper_pods)d |" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
