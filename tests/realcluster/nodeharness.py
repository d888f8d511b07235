"""Harness for the node tier: the realcluster control plane plus a real node (node.py), so
pods run: our image as the manifests' Deployment or DaemonSet, and busybox pods that write
into the volumes it makes.

The cluster is shared when $HP_NODE_STATE names the state directory of a running
`node.py up` (scripts/test.sh starts one for the tier); otherwise each test file starts its
own control plane and node (binaries from $HP_REALCLUSTER_BIN or the build directory's
realcluster/k8s-<version>; image archives built into realcluster/images) and stops both at
exit. Without the binaries, or not as root, the file is skipped (exit 77).

The manifests are applied as a user would apply them, through a kustomize overlay with only
the changes this sandbox forces (see sandbox_overlay()).
"""

import atexit
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import realharness  # noqa: E402
from realharness import (PODS_PATH, POD_PATH, PV_PATH, PVC_PATH, SRC, Client,  # noqa: E402
                         RealClusterTestCase, claim, default_bin_dir, skip_module,
                         storage_class, wait_for)
import images  # noqa: E402

NS = "hostpath-provisioner"
HOST_PV_DIR = "/var/lib/hostpath-provisioner"
MANIFESTS = os.path.join(SRC, "manifests")


def _manifests_provisioner_name():
    with open(os.path.join(MANIFESTS, "deployment.yaml")) as f:
        return re.search(r"--provisioner-name=(\S+)", f.read()).group(1)


PROV = _manifests_provisioner_name()  # the manifests' provisioner name
BUSYBOX = images.BUSYBOX


class NodeCluster:
    """The control plane and node of a `node.py up` (its ready.json) or of this process."""

    def __init__(self, info):
        self.info = info
        self.url, self.ca, self.kubeconfig = info["url"], info["ca"], info["kubeconfig"]
        self.kubectl = info["kubectl"]
        self.nodes = tuple(info["nodes"])
        self.node = info["node"]
        self.state_dir = info["state_dir"]
        self.bin_dir = info["bin_dir"]
        self.version = info["version"]
        self.client = Client(self.url, ca=self.ca, cert=info["admin_cert"],
                             key=info["admin_key"], user_agent="node-tests/1.0")

    @property
    def api_port(self):
        return int(self.url.rsplit(":", 1)[1])

    def log_tail(self, name, n=40):
        for d in (self.state_dir, self.node["state_dir"]):
            try:
                with open(os.path.join(d, name + ".log"), errors="replace") as f:
                    return "".join(f.readlines()[-n:])
            except OSError:
                continue
        return ""

    def path(self, *p):
        return os.path.join(self.state_dir, *p)

    # Set when this process started the cluster and node itself (get_node_cluster).
    owners = None

    def restart(self, component, signal="TERM", timeout=300.0):
        """Restarts a component of the control plane (etcd, kube-apiserver,
        kube-controller-manager, kube-scheduler) or of the node (kubelet, containerd), by pid
        with SIGTERM or SIGKILL ("KILL"), its state kept; returns the seconds until it was
        healthy again. Through `node.py up`'s control socket, or directly when this process
        runs the node."""
        if self.owners:
            import signal as sigmod
            for o in self.owners:
                if component in o.args:
                    return o.restart(component, getattr(sigmod, "SIG" + signal))
            raise RuntimeError("no component %r" % component)
        path = self.info.get("control")
        if not path:
            raise RuntimeError("this node tier (%s) has no control socket: started by an "
                               "older node.py?" % self.state_dir)
        from cluster import control_request
        ans = control_request(path, {"restart": component, "signal": signal}, timeout)
        if not ans.get("ok"):
            raise RuntimeError("restart %s: %s" % (component, ans.get("error")))
        return ans["seconds"]


_nc = None


def get_node_cluster():
    global _nc
    if _nc is not None:
        return _nc
    state = os.environ.get("HP_NODE_STATE")
    if state:
        try:
            with open(os.path.join(state, "ready.json")) as f:
                _nc = NodeCluster(json.load(f))
        except OSError as e:
            raise RuntimeError("HP_NODE_STATE=%s: no ready.json (is `node.py up` running?): %s"
                               % (state, e))
        return _nc
    bin_dir = default_bin_dir()
    missing = [b for b in ("kube-apiserver", "kubelet", "agnhost")
               if not os.access(os.path.join(bin_dir, b), os.X_OK)]
    if missing:
        skip_module("no %s in %s: run tests/realcluster/build.sh %s (scripts/test.sh does)"
                    % (", ".join(missing), bin_dir, os.path.dirname(bin_dir)))
    if os.geteuid() != 0:
        skip_module("the node tier runs a kubelet and containerd: it needs root")
    from cluster import Cluster
    import node as nodemod
    archives = images.build_all(os.path.join(os.path.dirname(bin_dir), "images"), bin_dir)
    tmp = tempfile.mkdtemp(prefix="hp-node-")
    c = Cluster(bin_dir, os.path.join(tmp, "cluster"), nodes=()).start()
    try:
        n = nodemod.Node(bin_dir, os.path.join(tmp, "node"), c).start(archives)
    except BaseException:
        c.stop()
        raise

    # As `node.py up` does: kube-controller-manager and kube-scheduler started again when
    # they exit (a lost leader Lease), any other exit only logged (the tests then fail).
    from cluster import Supervisor
    sup = Supervisor([c, n], lambda m: sys.stderr.write("node: %s\n" % m),
                     lambda name, code: sys.stderr.write("node: %s exited with %s\n"
                                                         % (name, code)))

    def stop():
        sup.stop()
        try:
            n.stop()
        finally:
            c.stop()
            subprocess.run(["rm", "-rf", tmp], check=False)
    atexit.register(stop)
    info = c.info()
    info["nodes"] = [n.name]
    info["node"] = n.info()
    _nc = NodeCluster(info)
    _nc.owners = (c, n)
    return _nc


def require_node_cluster():
    realharness.require_binary()
    return get_node_cluster()


def sandbox_patch(kind, name, api_port, metrics_port):
    """The JSON patch for the manifests' Deployment or DaemonSet that this sandbox forces, and
    nothing else:
    - hostNetwork: there is no kube-proxy, so the `kubernetes` Service's ClusterIP
      (10.96.0.1) leads nowhere; on the host network the pod reaches the API server where it
      listens, 127.0.0.1;
    - KUBERNETES_SERVICE_HOST/PORT = that address (the kubelet would set the ClusterIP);
    - the metrics port: on the host network :8080 is the machine's port 8080, shared with
      everything else running here, so a free one is given (args and containerPort, which the
      probes follow).
    The `test` operations make the patch fail loudly if the manifests change under it."""
    c = "/spec/template/spec/containers/0"
    return {"target": {"kind": kind, "name": name}, "patch": [
        {"op": "test", "path": c + "/name", "value": "hostpath-provisioner"},
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": c + "/env/-",
         "value": {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}},
        {"op": "add", "path": c + "/env/-",
         "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)}},
        {"op": "test", "path": c + "/args/3", "value": "--metrics-address=:8080"},
        {"op": "replace", "path": c + "/args/3", "value": "--metrics-address=:%d" % metrics_port},
        {"op": "test", "path": c + "/ports/0/containerPort", "value": 8080},
        {"op": "replace", "path": c + "/ports/0/containerPort", "value": metrics_port},
    ]}


def sandbox_overlay(dest, workload, api_port, metrics_port):
    """A kustomize directory at dest: the manifests as shipped plus sandbox_patch().
    workload "deployment": manifests/install.yaml (what README's single-node install applies);
    "daemonset": rbac.yaml, storageclass.yaml and daemonset.yaml (README's multi-node
    install)."""
    os.makedirs(dest, exist_ok=True)
    if workload == "deployment":
        files, kind, name = ["install.yaml"], "Deployment", "hostpath-provisioner"
    else:
        files = ["rbac.yaml", "storageclass.yaml", "daemonset.yaml"]
        kind, name = "DaemonSet", "hostpath-provisioner-node"
    for f in files:
        with open(os.path.join(MANIFESTS, f)) as src, open(os.path.join(dest, f), "w") as dst:
            dst.write(src.read())
    p = sandbox_patch(kind, name, api_port, metrics_port)
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": files,
         "patches": [{"target": p["target"], "patch": json.dumps(p["patch"])}]}
    with open(os.path.join(dest, "kustomization.yaml"), "w") as f:
        json.dump(k, f, indent=1)  # JSON is YAML
    return dest


def pod_spec(name, ns, claims, script, uid=1000, gid=None, fs_group=None, groups=None,
             node=None, image=BUSYBOX, mount="/data"):
    """A busybox pod running `script` with sh as uid (and gid), the claims mounted at
    mount (one claim) or mount<i>; never restarted."""
    sc = {"runAsUser": uid, "runAsNonRoot": uid != 0}
    if gid is not None:
        sc["runAsGroup"] = gid
    if fs_group is not None:
        sc["fsGroup"] = fs_group
    if groups:
        sc["supplementalGroups"] = list(groups)
    mounts = [{"name": "v%d" % i, "mountPath": mount if len(claims) == 1 else "%s%d" % (mount, i)}
              for i in range(len(claims))]
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
         "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
                  "securityContext": sc,
                  "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                                  "command": ["sh", "-c", script], "volumeMounts": mounts}],
                  "volumes": [{"name": "v%d" % i, "persistentVolumeClaim": {"claimName": c}}
                              for i, c in enumerate(claims)]}}
    if node:
        p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return p


class NodeTestCase(RealClusterTestCase):
    """RealClusterTestCase on the node tier's cluster, with pods that run."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = require_node_cluster()
        cls.api = realharness.Api(cls.cluster.client)

    # -- the manifests ---------------------------------------------------------------------

    def install(self, workload, metrics_port=None):
        """Applies the manifests with the sandbox overlay (kubectl apply -k) and waits until
        the provisioner pod is Ready on the node. Everything is deleted at cleanup, and the
        namespace waited for."""
        from cluster import free_port
        self.metrics_port = metrics_port or free_port()
        d = sandbox_overlay(os.path.join(self.tmp, "overlay-" + workload), workload,
                            self.cluster.api_port, self.metrics_port)
        self.overlay = d
        self.delete_namespace(NS)  # a leftover of an earlier run
        self.addCleanup(self._uninstall, d)
        out = self.kubectl("apply", "-k", d).stdout
        self.assertIn("namespace/%s" % NS, out)
        pod = self.wait_provisioner_ready(workload)
        return pod

    def _uninstall(self, d):
        self.kubectl("delete", "-k", d, "--ignore-not-found", "--wait=false", ok=False)
        self.delete_namespace(NS, timeout=180)
        # Volumes a test left (Retain) are not ours to keep.
        for pv in self.api.list("/api/v1/persistentvolumes")["items"]:
            if (pv["metadata"].get("annotations") or {}).get(
                    "pv.kubernetes.io/provisioned-by") == PROV:
                self._delete_quietly(PV_PATH % pv["metadata"]["name"])

    def provisioner_pods(self, workload):
        label = ("hostpath-provisioner" if workload == "deployment"
                 else "hostpath-provisioner-node")
        return self.api.list(PODS_PATH % NS, labelSelector="app.kubernetes.io/name=" + label
                             )["items"]

    def wait_provisioner_ready(self, workload, timeout=120, exclude=()):
        def ready():
            for p in self.provisioner_pods(workload):
                if p["metadata"]["name"] in exclude or p["metadata"].get("deletionTimestamp"):
                    continue
                conds = {c["type"]: c["status"] for c in
                         (p.get("status") or {}).get("conditions") or []}
                if conds.get("Ready") == "True":
                    return p
            return None
        try:
            return wait_for(ready, timeout, interval=0.5, what="%s pod Ready" % workload)
        except TimeoutError as e:
            self.fail("%s\n%s\n--- kubelet ---\n%s" % (
                e, self.describe_pods(NS), self.cluster.log_tail("kubelet", 30)))

    def describe_pods(self, ns):
        r = self.kubectl("describe", "pods", "-n", ns, ok=False)
        logs = self.kubectl("logs", "-n", ns, "--all-containers", "--prefix", "--tail=40",
                            "-l", "app.kubernetes.io/part-of!=nothing", ok=False)
        return r.stdout[-6000:] + "\n--- logs ---\n" + logs.stdout[-6000:] + logs.stderr[-500:]

    def pod_log(self, name, ns=None):
        r = self.api.client.request("GET", POD_PATH % (ns or self.ns, name) + "/log")
        if r.status != 200:
            raise AssertionError("pod %s log: HTTP %d %s" % (name, r.status, r.body))
        return r.body if isinstance(r.body, str) else r.raw.decode(errors="replace")

    # -- pods that run -----------------------------------------------------------------------

    def run_pod(self, name, claims, script, timeout=120, expect="Succeeded", **kw):
        """Creates pod_spec(...) in self.ns, waits for it to end; returns its log. The phase
        must be `expect` (None: either)."""
        self.api.create(PODS_PATH % self.ns, pod_spec(name, self.ns, claims, script, **kw))

        def ended():
            p = self.api.get(POD_PATH % (self.ns, name))
            phase = (p.get("status") or {}).get("phase")
            return p if phase in ("Succeeded", "Failed") else None
        try:
            p = wait_for(ended, timeout, interval=0.3, what="pod %s ended" % name)
        except TimeoutError as e:
            self.fail("%s\n%s" % (e, self.describe_pods(self.ns)))
        log = self.pod_log(name)
        phase = p["status"]["phase"]
        if expect is not None:
            self.assertEqual(phase, expect, "pod %s: %s; log:\n%s\n%s" % (
                name, phase, log, json.dumps(p["status"], indent=1)[:3000]))
        return log

    def delete_pod_wait(self, name, ns=None, timeout=60):
        ns = ns or self.ns
        self._delete_quietly(POD_PATH % (ns, name))
        self.wait_gone(POD_PATH % (ns, name), timeout)

    def host_path(self, claim_name, ns=None):
        """The node directory of a bound claim (its PV's hostPath)."""
        c = self.claim_of(claim_name, ns)
        return self.pv(c["spec"]["volumeName"])["spec"]["hostPath"]["path"]

    def make_claim(self, name, cls, ns=None, size="64Mi", **kw):
        return self.api.create("/api/v1/namespaces/%s/persistentvolumeclaims" % (ns or self.ns),
                               claim(ns or self.ns, name, cls, size=size, **kw))

    def make_class(self, name, reclaim="Delete", binding="Immediate", parameters=None):
        """A class of the manifests' provisioner, deleted at cleanup."""
        self.classes.append(name)
        return self.api.create("/apis/storage.k8s.io/v1/storageclasses", storage_class(
            name, PROV, reclaim=reclaim, binding=binding, parameters=parameters))


def wait_until(pred, timeout, what, interval=0.3):
    return wait_for(pred, timeout, interval=interval, what=what)


__all__ = ["NS", "PROV", "HOST_PV_DIR", "NodeTestCase", "get_node_cluster", "pod_spec",
           "sandbox_overlay", "sandbox_patch", "require_node_cluster", "PVC_PATH", "PV_PATH",
           "POD_PATH", "PODS_PATH", "wait_until"]
