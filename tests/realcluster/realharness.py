"""Harness for the realcluster tier: the provisioner against a real control plane.

The control plane (cluster.py) is shared when $HP_REALCLUSTER_STATE names the state directory
of a running `cluster.py up` (scripts/test.sh starts one for the whole tier); otherwise each
test file starts its own from $HP_REALCLUSTER_BIN (default: the build directory's
realcluster/k8s-<version>, made by tests/realcluster/build.sh) and stops it at exit. With
neither, the file is skipped (exit 77) with a message saying how to build the binaries.

Tests share the cluster, so each RealClusterTestCase test gets its own namespace, its own
provisioner name (hostpath.test/<id>) and class names prefixed with it; its provisioners are
stopped and its cluster-scoped objects (PVs, StorageClasses) removed at cleanup.

Provisioner, wait_for, Metrics/scrape, the object builders and the path templates come from
tests/integration/harness.py.
"""

import atexit
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, HERE)
from harness import (ALL_EVENTS_PATH, PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH,  # noqa: E402,F401
                     SANITIZER, SC_PATH, SCS_PATH, ApiError, Client, ClientCalls, Provisioner,
                     claim, require_binary, scrape, skip_module, storage_class, wait_for)
from cluster import Cluster  # noqa: E402

SRC = os.environ.get("HP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
PODS_PATH = "/api/v1/namespaces/%s/pods"
POD_PATH = "/api/v1/namespaces/%s/pods/%s"
NS_PATH = "/api/v1/namespaces/%s"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s"
SELECTED = "volume.kubernetes.io/selected-node"
IDENTITY_ANN = "hostPathProvisionerIdentity"
FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"


def k8s_version():
    with open(os.path.join(HERE, "go.mod")) as f:
        m = re.search(r"^\s*k8s\.io/kubernetes (v\S+)", f.read(), re.M)
    return m.group(1)


def default_bin_dir():
    if os.environ.get("HP_REALCLUSTER_BIN"):
        return os.environ["HP_REALCLUSTER_BIN"]
    binary = os.environ.get("HP_BINARY") or os.path.join(SRC, "build", "hostpath-provisioner")
    return os.path.join(os.path.dirname(binary), "realcluster", "k8s-" + k8s_version())


class SharedCluster:
    """A running `cluster.py up`, attached to through its ready.json."""

    def __init__(self, state_dir):
        with open(os.path.join(state_dir, "ready.json")) as f:
            info = json.load(f)
        self.info = info
        self.url, self.ca, self.kubeconfig = info["url"], info["ca"], info["kubeconfig"]
        self.kubectl = info["kubectl"]
        self.nodes = tuple(info["nodes"])
        self.state_dir = info["state_dir"]
        self.version = info["version"]
        self.client = Client(self.url, ca=self.ca, cert=info["admin_cert"],
                             key=info["admin_key"], user_agent="realcluster-tests/1.0")

    def log_tail(self, name, n=40):
        try:
            with open(os.path.join(self.state_dir, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def path(self, *p):
        return os.path.join(self.state_dir, *p)


_cluster = None


def get_cluster():
    """The cluster for this process (attached or started once; stopped at exit)."""
    global _cluster
    if _cluster is not None:
        return _cluster
    state = os.environ.get("HP_REALCLUSTER_STATE")
    if state:
        if not os.path.exists(os.path.join(state, "ready.json")):
            raise RuntimeError("HP_REALCLUSTER_STATE=%s has no ready.json (is `cluster.py up` "
                               "running?)" % state)
        _cluster = SharedCluster(state)
        return _cluster
    bin_dir = default_bin_dir()
    if not os.access(os.path.join(bin_dir, "kube-apiserver"), os.X_OK):
        skip_module("no control plane binaries in %s: run tests/realcluster/build.sh %s "
                    "(scripts/test.sh does)" % (bin_dir, os.path.dirname(bin_dir)))
    tmp = tempfile.mkdtemp(prefix="hp-realcluster-")
    c = Cluster(bin_dir, tmp).start()
    c.client.user_agent = "realcluster-tests/1.0"

    def stop():
        c.stop()
        subprocess.run(["rm", "-rf", tmp], check=False)
    atexit.register(stop)
    _cluster = c
    return c


def require_cluster():
    """For setUpModule: attach or start now, so a failure is reported once."""
    require_binary()
    return get_cluster()


_ids = itertools.count(1)
_RUN = os.urandom(2).hex()


class Api(ClientCalls):
    """The admin client with the calls the tests use (those of harness.ApiServer)."""

    def __init__(self, client):
        self.client = client


class RealClusterTestCase(unittest.TestCase):
    """Per test: a namespace (self.ns), a provisioner name (self.prov_name), a temporary
    directory (self.tmp) with self.pv_dir; provisioner()/spawn() as in ProvisionerTestCase."""

    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--v", "4")
    stop_timeout = 30.0
    _logs = ""

    @classmethod
    def setUpClass(cls):
        cls.cluster = require_cluster()
        cls.api = Api(cls.cluster.client)

    def setUp(self):
        require_binary()
        # A DNS label unique across the files sharing the cluster: t<n>-<4 hex>-<test name>.
        short = re.sub(r"[^a-z0-9]+", "-", self._testMethodName.lower().replace("test_", ""))
        self.id_ = ("t%d-%s-%s" % (next(_ids), _RUN, short))[:40].strip("-")
        self.ns = self.id_
        self.prov_name = "hostpath.test/" + self.id_
        self._tmp = tempfile.TemporaryDirectory(prefix="hp-real-")
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        self.pv_dir = os.path.join(self.tmp, "volumes")
        self.procs = []
        self.prov = None
        self.classes = []
        self.addCleanup(self._cleanup_cluster_objects)
        self.make_namespace(self.ns)

    # -- namespaces and classes ------------------------------------------------------------

    def make_namespace(self, name):
        self.api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name}})
        self.addCleanup(self.delete_namespace, name, False)
        # Pods need the namespace's default ServiceAccount (the serviceaccount controller
        # makes it).
        self.wait(lambda: self.api.exists("/api/v1/namespaces/%s/serviceaccounts/default"
                                          % name), 30, "ServiceAccount %s/default" % name)

    def cls_name(self, name="hostpath"):
        return "%s-%s" % (self.id_, name)

    def add_class(self, name="hostpath", **kw):
        kw.setdefault("provisioner", self.prov_name)
        sc = self.api.create(SCS_PATH, storage_class(self.cls_name(name), **kw))
        self.classes.append(sc["metadata"]["name"])
        return sc

    def add_claim(self, name, cls="hostpath", ns=None, **kw):
        ns = ns or self.ns
        cname = self.cls_name(cls) if cls else cls
        return self.api.create(PVCS_PATH % ns, claim(ns, name, cname, **kw))

    def add_pod(self, name, claims, ns=None, node=None):
        """A pod using the claims (never runs: there is no kubelet); node pins it with a
        nodeSelector, the scheduler still decides."""
        ns = ns or self.ns
        p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
             "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}],
                      "terminationGracePeriodSeconds": 0,
                      "volumes": [{"name": "v%d" % i, "persistentVolumeClaim": {"claimName": c}}
                                  for i, c in enumerate(claims)]}}
        if node:
            p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        return self.api.create(PODS_PATH % ns, p)

    def delete_pod(self, name, ns=None):
        """Deletes at once (a scheduled pod would otherwise wait for its kubelet)."""
        self.api.delete(POD_PATH % (ns or self.ns, name), {"gracePeriodSeconds": 0})

    def claim_of(self, name, ns=None):
        return self.api.get(PVC_PATH % (ns or self.ns, name))

    def phase(self, name, ns=None):
        return (self.claim_of(name, ns).get("status") or {}).get("phase")

    def pv(self, name):
        return self.api.get(PV_PATH % name)

    def gone(self, path):
        return not self.api.exists(path)

    def my_pvs(self):
        return [pv for pv in self.api.list(PVS_PATH)["items"]
                if (pv["metadata"].get("annotations") or {}).get(
                    "pv.kubernetes.io/provisioned-by") == self.prov_name]

    # -- the provisioner -------------------------------------------------------------------

    def provisioner(self, *args, pv_dir=None, kubeconfig=None, env=None, name=None):
        """One provisioner (self.prov) for this test's provisioner name; stopped at cleanup,
        where it must exit 0."""
        p = Provisioner(self.cluster, pv_dir or self.pv_dir,
                        *(("--provisioner-name", self.prov_name) + tuple(self.fast) + args),
                        kubeconfig=kubeconfig, env=env, name=name)
        p.start()
        self.prov = p
        self.procs.append(p)
        self.addCleanup(self._stop, p)
        return p

    def spawn(self, *args, name, pv_dir=None, **kw):
        """A replica named `name` on <tmp>/pv-<name>."""
        p = Provisioner(self.cluster, pv_dir or os.path.join(self.tmp, "pv-" + name),
                        *(("--provisioner-name", self.prov_name) + tuple(self.fast) + args),
                        name=name, **kw)
        p.start()
        self.procs.append(p)
        self.addCleanup(self._stop, p)
        return p

    def _stop(self, p):
        if p.alive():
            code = p.stop(timeout=self.stop_timeout)
            self.assertEqual(code, 0, "%s exit code; log:\n%s" % (p.name, p.log[-3000:]))

    def tearDown(self):
        seen, logs = set(), []
        for p in self.procs:
            if p.log_path not in seen:
                seen.add(p.log_path)
                logs.append("\n--- %s ---\n%s" % (p.name, p.log[-5000:]))
        self._logs = "".join(logs)
        keep = os.environ.get("HP_REALCLUSTER_LOGS")
        if keep:  # scripts/test.sh keeps every provisioner log of the tier for inspection
            os.makedirs(keep, exist_ok=True)
            for p in self.procs:
                with open(os.path.join(keep, "%s--%s.log" % (self.id_, p.name)), "a") as f:
                    f.write(p.log)
        for p in self.procs:
            self.assertNotRegex(p.log, SANITIZER, "sanitizer report in %s's log" % p.name)

    def run(self, result=None):
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        super().run(result)
        if len(result.failures) + len(result.errors) > before and self._logs:
            sys.stderr.write(self._logs + "\n")
        return result

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, pred, timeout, what, interval=0.1):
        try:
            return wait_for(pred, timeout, interval=interval, what=what)
        except TimeoutError as e:
            ctx = "\n".join("--- %s ---\n%s" % (p.name, p.log[-3000:]) for p in self.procs)
            self.fail("%s\n%s\n--- kube-controller-manager ---\n%s" % (
                e, ctx, self.cluster.log_tail("kube-controller-manager", 15)))

    def wait_bound(self, name, ns=None, timeout=60):
        def bound():
            c = self.claim_of(name, ns)
            return c if (c.get("status") or {}).get("phase") == "Bound" else None
        return self.wait(bound, timeout, "claim %s bound" % name)

    def wait_gone(self, path, timeout=60):
        return self.wait(lambda: self.gone(path), timeout, "%s gone" % path)

    def events_for(self, name, reason=None, ns=None, component=None):
        """Events about object `name` (any kind) from `component` (default: this test's
        provisioner name; "*" for any)."""
        component = component or self.prov_name
        path = ("/api/v1/namespaces/%s/events" % ns) if ns else ALL_EVENTS_PATH
        out = []
        for e in self.api.list(path)["items"]:
            if e["involvedObject"].get("name") != name:
                continue
            if reason is not None and e["reason"] != reason:
                continue
            src = (e.get("source") or {}).get("component") or e.get("reportingComponent")
            if component != "*" and src != component:
                continue
            out.append(e)
        return out

    def wait_event(self, name, reason, timeout=30, **kw):
        return self.wait(lambda: self.events_for(name, reason, **kw), timeout,
                         "event %s on %s" % (reason, name))[0]

    def wait_rbac(self, ns, sa):
        """Until the API server's authorizer has the bindings just made for ServiceAccount
        ns/sa: it learns them from its own watch a moment after they were created, and a
        real kubelet takes longer than that to start a container. Asked as the
        ServiceAccount (SubjectAccessReview) for what the provisioner does first: its Lease,
        the PVs."""
        user = "system:serviceaccount:%s:%s" % (ns, sa)
        groups = ["system:serviceaccounts", "system:serviceaccounts:" + ns,
                  "system:authenticated"]
        asks = [{"namespace": ns, "verb": "get", "group": "coordination.k8s.io",
                 "resource": "leases"},
                {"verb": "list", "group": "", "resource": "persistentvolumes"}]

        def allowed():
            for attrs in asks:
                r = self.api.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
                    "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": {"user": user, "groups": groups, "resourceAttributes": attrs}})
                if not r.get("status", {}).get("allowed"):
                    return False
            return True
        self.wait(allowed, 30, "RBAC of %s in effect" % user, interval=0.2)

    # -- kubectl ---------------------------------------------------------------------------

    def kubectl(self, *args, kubeconfig=None, ok=True, timeout=120, input=None):
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        env = dict(os.environ, KUBECONFIG=kubeconfig or self.cluster.kubeconfig, HOME=home,
                   KUBECACHEDIR=os.path.join(self.tmp, "kcache"))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        r = subprocess.run([self.cluster.kubectl] + list(args), capture_output=True, text=True,
                           env=env, timeout=timeout, input=input)
        if ok and r.returncode != 0:
            raise AssertionError("kubectl %s failed (%d):\n%s%s" % (
                " ".join(args), r.returncode, r.stdout, r.stderr))
        return r

    # -- credentials -----------------------------------------------------------------------

    def service_account_kubeconfig(self, ns, sa, path=None, seconds=3600):
        """A kubeconfig with a token for ServiceAccount ns/sa from the TokenRequest API (the
        real authenticator and authorizer decide what it may do)."""
        tr = self.api.create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (ns, sa), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}})
        token = tr["status"]["token"]
        path = path or os.path.join(self.tmp, "sa-%s-%s.conf" % (ns, sa))
        from standin import certs
        certs.write_kubeconfig(path, self.cluster.url, self.cluster.ca, token=token,
                               namespace=ns)
        return path, token

    # -- cleanup ---------------------------------------------------------------------------

    def delete_namespace(self, name, wait=True, timeout=120):
        """Deletes a namespace and force-deletes its pods: a pod bound to a node is otherwise
        finalized by that node's kubelet, and there is none, so the namespace would stay
        Terminating for ever. With wait, until it is gone."""
        self._delete_quietly(NS_PATH % name)
        self._delete_quietly(PODS_PATH % name, {"gracePeriodSeconds": 0})
        if wait:
            def gone():
                self._delete_quietly(PODS_PATH % name, {"gracePeriodSeconds": 0})
                return not self.api.exists(NS_PATH % name)
            wait_for(gone, timeout, interval=0.5, what="namespace %s deleted" % name)

    def _delete_quietly(self, path, body=None):
        try:
            self.api.delete(path, body)
        except (ApiError, OSError):
            pass

    def _cleanup_cluster_objects(self):
        """After the provisioners stopped: this test's PVs (finalizers dropped) and classes.
        The namespace is deleted by its own cleanup (the namespace controller finishes it)."""
        for p in self.procs:
            if p.alive():
                try:
                    p.stop(timeout=10)
                except TimeoutError:
                    pass
        for pv in self.my_pvs():
            path = PV_PATH % pv["metadata"]["name"]
            self._delete_quietly(path)
            try:
                self.api.patch(path, {"metadata": {"finalizers": None}})
            except (ApiError, OSError):
                pass
        for c in self.classes:
            self._delete_quietly(SC_PATH % c)


def connections_to(pid, port):
    """Established TCP connections of process pid to 127.0.0.1:port, from /proc (a list of
    local ports)."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if inode in inodes and state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                out.append(int(local.rsplit(":", 1)[1], 16))
    return out
