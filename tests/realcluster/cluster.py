#!/usr/bin/env python3
"""A real Kubernetes control plane on 127.0.0.1 for the realcluster test tier.

    cluster.py up --bin-dir BUILD/realcluster/k8s-v1.37.2 --state-dir DIR

starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler (binaries from
tests/realcluster/build.sh) with generated certificates and kubeadm's flags, creates the
Nodes node-a, node-b and node-c (no kubelet: their Leases in kube-node-lease are renewed here
so the node lifecycle controller keeps them Ready and schedulable; `--nodes ""` creates none,
for a cluster whose nodes are real kubelets: node.py), waits until /readyz is ok,
the nodes are untainted and the `default` ServiceAccount exists, then writes DIR/ready.json
and keeps the nodes alive until SIGTERM/SIGINT, when it stops everything it started (by pid:
SIGTERM, bounded wait, SIGKILL). Children also get SIGTERM if this process dies
(PR_SET_PDEATHSIG). Component logs are DIR/<component>.log.

DIR holds: ca.crt/ca.key (the cluster CA), apiserver.crt, apiserver-kubelet-client.crt/key
(what kube-apiserver presents to kubelets: logs, exec), sa.key/sa.pub (service account
signing), admin.crt/admin.key (CN kubernetes-admin, O system:masters) and admin.conf,
controller-manager.conf, scheduler.conf, and ready.json:
{"url", "ca", "kubeconfig", "admin_cert", "admin_key", "pid", "bin_dir", "kubectl",
 "nodes", "state_dir", "version", "started_s"}.

As a library (the tests start one per test file when no shared one is running):
    c = Cluster(bin_dir, state_dir).start(); ...; c.stop()

Restarts (the node tier's soak, tests/soak/node_soak.py): c.restart("kube-apiserver") stops one
component by pid (SIGTERM, or the signal given) and starts it again with the same arguments,
ports and state (etcd's data directory), returning once it is healthy. A running `up` serves
the same on a Unix socket, DIR/control.sock (ready.json's "control"): one JSON line
{"restart": "etcd", "signal": "KILL"} in, one line {"ok": true, "seconds": 4.2} (or
{"ok": false, "error": "..."}) out; control_request(path, ...) is the client. A component that
exits on its own still stops `up`, one being restarted does not, with one exception:
kube-controller-manager and kube-scheduler exit by design when they lose their leader Lease
(etcd or kube-apiserver away for longer than their renew deadline), and a kubeadm node's
kubelet restarts them (static pods); `up` does the same (Supervisor) and logs it.
"""

import argparse
import concurrent.futures
import ctypes
import json
import os
import queue
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request
import ssl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from standin import certs  # noqa: E402  (the stand-in's certificate and kubeconfig helpers)
from harness import Client, ApiError, wait_for  # noqa: E402

NODES = ("node-a", "node-b", "node-c")
SERVICE_CIDR = "10.96.0.0/12"
# The node lifecycle controller marks a node Unknown (and taints it) 50 s after its last
# heartbeat; renewing the node Leases every 10 s, as the kubelet does, keeps them Ready.
HEARTBEAT_S = 10.0
MICRO = "%Y-%m-%dT%H:%M:%S.000000Z"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _pdeathsig():
    """In the child before exec: SIGTERM when the parent dies, so nothing outlives us."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def now_micro():
    return time.strftime(MICRO, time.gmtime())


class Cluster:
    def __init__(self, bin_dir, state_dir, nodes=NODES, log=None):
        self.bin_dir = os.path.abspath(bin_dir)
        self.state_dir = os.path.abspath(state_dir)
        self.nodes = tuple(nodes)
        self.procs = []  # (name, Popen), in start order
        self.args = {}   # name -> its command line, for restart()
        self.health = {}  # name -> predicate: healthy (after a start or restart)
        # Held while a component is restarted, and by whoever checks that none has exited.
        self.lock = threading.RLock()
        self.stopping = False
        self.client = None
        self.url = None
        self._stop_hb = threading.Event()
        self._hb = None
        self._log = log or (lambda msg: sys.stderr.write("realcluster: %s\n" % msg))
        self.version = os.path.basename(self.bin_dir).replace("k8s-", "")

    # -- files --------------------------------------------------------------------------

    def path(self, *p):
        return os.path.join(self.state_dir, *p)

    def bin(self, name):
        return os.path.join(self.bin_dir, name)

    @property
    def ca(self):
        return self.path("ca.crt")

    @property
    def kubeconfig(self):
        """The admin kubeconfig (system:masters); harness.Provisioner reads this attribute."""
        return self.path("admin.conf")

    @property
    def kubectl(self):
        return self.bin("kubectl")

    def _certs(self):
        os.makedirs(self.state_dir, exist_ok=True)
        certs.make_ca(self.state_dir)
        san = ",".join(["IP:127.0.0.1", "IP:10.96.0.1", "DNS:localhost", "DNS:kubernetes",
                        "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                        "DNS:kubernetes.default.svc.cluster.local"])
        certs.sign_cert(self.state_dir, "apiserver", "kube-apiserver", "serverAuth", san=san)
        certs.sign_cert(self.state_dir, "admin", "kubernetes-admin", "clientAuth",
                        orgs=("system:masters",))
        certs.sign_cert(self.state_dir, "controller-manager", "system:kube-controller-manager",
                        "clientAuth")
        certs.sign_cert(self.state_dir, "scheduler", "system:kube-scheduler", "clientAuth")
        # kubeadm's apiserver-kubelet-client: kube-apiserver's identity towards kubelets
        # (logs, exec, port-forward), which authorize it by SubjectAccessReview.
        certs.sign_cert(self.state_dir, "apiserver-kubelet-client",
                        "kube-apiserver-kubelet-client", "clientAuth",
                        orgs=("system:masters",))
        certs._openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                       "-out", self.path("sa.key"))
        certs._openssl("pkey", "-in", self.path("sa.key"), "-pubout", "-out",
                       self.path("sa.pub"))
        os.chmod(self.path("sa.key"), 0o600)

    def _kubeconfigs(self):
        for name in ("admin", "controller-manager", "scheduler"):
            certs.write_kubeconfig(self.path(name + ".conf"), self.url, self.ca,
                                   cert=self.path(name + ".crt"),
                                   key=self.path(name + ".key"))

    # -- processes ----------------------------------------------------------------------

    def _spawn(self, name, args, health=None):
        log = open(self.path(name + ".log"), "ab")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=_pdeathsig,
                             cwd=self.state_dir)
        log.close()
        self.args[name] = list(args)
        if health is not None:
            self.health[name] = health
        for i, (n, _) in enumerate(self.procs):
            if n == name:  # a restart: same place in the start (and stop) order
                self.procs[i] = (name, p)
                return p
        self.procs.append((name, p))
        return p

    def exited(self):
        """[(name, Popen)] of the components that exited (not those being restarted)."""
        with self.lock:
            return [(n, p) for n, p in self.procs if p.poll() is not None]

    def restart(self, name, sig=signal.SIGTERM, timeout=120.0):
        """Stops component `name` by pid with sig (SIGKILL after 30 s) and starts it again with
        the same command line (ports, certificates, etcd's data directory: its state is kept);
        returns the seconds until it was healthy again. Restarts are serialised."""
        return restart_proc(self, name, sig, timeout, self._log, self.lock)

    def _check_alive(self):
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError("%s exited with %s; last log lines:\n%s" % (
                    name, p.returncode, self.log_tail(name)))

    def log_tail(self, name, n=40):
        try:
            with open(self.path(name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def _wait(self, what, pred, timeout):
        def check():
            self._check_alive()
            return pred()
        return wait_for(check, timeout, interval=0.2, what=what)

    @staticmethod
    def _https_ok(url):
        ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def start(self, timeout=240.0):
        t0 = time.monotonic()
        for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            if not os.access(self.bin(b), os.X_OK):
                raise RuntimeError("missing %s (run tests/realcluster/build.sh)" % self.bin(b))
        self._certs()
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        kcm_port, sched_port = free_port(), free_port()
        self.url = "https://127.0.0.1:%d" % api_port
        self._kubeconfigs()
        try:
            self._start_components(etcd_port, peer_port, api_port, kcm_port, sched_port,
                                   t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self._log("control plane %s ready at %s in %.1fs" % (self.version, self.url,
                                                              time.monotonic() - t0))
        return self

    def _start_components(self, etcd_port, peer_port, api_port, kcm_port, sched_port,
                          deadline):
        def left():
            return max(1.0, deadline - time.monotonic())

        etcd_url = "http://127.0.0.1:%d" % etcd_port

        def etcd_ok():
            try:
                with urllib.request.urlopen(etcd_url + "/health", timeout=5) as r:
                    return json.load(r).get("health") == "true"
            except (OSError, ValueError):
                return False
        self._spawn("etcd", [self.bin("etcd"), "--data-dir", self.path("etcd-data"),
                             "--client-port", str(etcd_port), "--peer-port", str(peer_port)],
                    health=etcd_ok)
        self._wait("etcd healthy", etcd_ok, left())

        # The flags kubeadm writes into kube-apiserver.yaml, on loopback. Aggregation
        # (front-proxy) is left out: no extension API server exists here. The endpoint
        # reconciler is off because the advertised address is loopback, which the kubernetes
        # Service's endpoints may not hold. Kubelets (node.py) are reached by their Hostname
        # address only ("localhost": /etc/hosts, never DNS), their serving certificates
        # checked against the cluster CA.
        self._spawn("kube-apiserver", [
            self.bin("kube-apiserver"),
            "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1",
            "--secure-port=%d" % api_port,
            "--allow-privileged=true",
            "--authorization-mode=Node,RBAC",
            "--client-ca-file=" + self.ca,
            "--enable-admission-plugins=NodeRestriction",
            "--enable-bootstrap-token-auth=true",
            "--etcd-servers=" + etcd_url,
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=" + self.path("sa.pub"),
            "--service-account-signing-key-file=" + self.path("sa.key"),
            "--service-cluster-ip-range=" + SERVICE_CIDR,
            "--tls-cert-file=" + self.path("apiserver.crt"),
            "--tls-private-key-file=" + self.path("apiserver.key"),
            "--endpoint-reconciler-type=none",
            "--kubelet-client-certificate=" + self.path("apiserver-kubelet-client.crt"),
            "--kubelet-client-key=" + self.path("apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority=" + self.ca,
            "--kubelet-preferred-address-types=Hostname",
            "--profiling=false",
        ], health=lambda: _quiet(readyz))
        self.client = Client(self.url, ca=self.ca, cert=self.path("admin.crt"),
                             key=self.path("admin.key"), user_agent="realcluster-harness/1.0")

        def readyz():
            r = self.client.request("GET", "/readyz", timeout=5)
            return r.status == 200
        self._wait("kube-apiserver /readyz", lambda: _quiet(readyz), left())

        self._spawn("kube-controller-manager", [
            self.bin("kube-controller-manager"),
            "--kubeconfig=" + self.path("controller-manager.conf"),
            "--authentication-kubeconfig=" + self.path("controller-manager.conf"),
            "--authorization-kubeconfig=" + self.path("controller-manager.conf"),
            "--bind-address=127.0.0.1", "--secure-port=%d" % kcm_port,
            "--client-ca-file=" + self.ca,
            "--cluster-name=kubernetes",
            "--cluster-signing-cert-file=" + self.ca,
            "--cluster-signing-key-file=" + self.path("ca.key"),
            "--controllers=*,bootstrapsigner,tokencleaner",
            "--leader-elect=true",
            "--root-ca-file=" + self.ca,
            "--service-account-private-key-file=" + self.path("sa.key"),
            "--use-service-account-credentials=true",
        ], health=lambda: self._https_ok("https://127.0.0.1:%d/healthz" % kcm_port))
        self._spawn("kube-scheduler", [
            self.bin("kube-scheduler"),
            "--kubeconfig=" + self.path("scheduler.conf"),
            "--authentication-kubeconfig=" + self.path("scheduler.conf"),
            "--authorization-kubeconfig=" + self.path("scheduler.conf"),
            "--bind-address=127.0.0.1", "--secure-port=%d" % sched_port,
            "--leader-elect=true",
        ], health=lambda: self._https_ok("https://127.0.0.1:%d/healthz" % sched_port))
        self._wait("kube-controller-manager /healthz",
                   lambda: self._https_ok("https://127.0.0.1:%d/healthz" % kcm_port), left())
        self._wait("kube-scheduler /healthz",
                   lambda: self._https_ok("https://127.0.0.1:%d/healthz" % sched_port), left())

        for n in self.nodes:
            self.add_node(n)
        if self.nodes:
            self._hb = threading.Thread(target=self._heartbeat, name="node-heartbeat",
                                        daemon=True)
            self._hb.start()
            # The node lifecycle controller removes the not-ready taint (set at creation by
            # the TaintNodesByCondition admission) once it has seen the nodes Ready.
            self._wait("nodes untainted", lambda: _quiet(self._nodes_untainted), left())
        self._wait("ServiceAccount default/default",
                   lambda: _quiet(lambda: self.client.get(
                       "/api/v1/namespaces/default/serviceaccounts/default")), left())
        self._wait("kube-scheduler leader lease", lambda: _quiet(lambda: self.client.get(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler")),
            left())

    def _nodes_untainted(self):
        items = self.client.list("/api/v1/nodes")["items"]
        mine = [n for n in items if n["metadata"]["name"] in self.nodes]
        return len(mine) == len(self.nodes) and all(
            not (n["spec"].get("taints")) for n in mine)

    def add_node(self, name):
        """A Node that looks like a kubelet's (Ready, capacity, hostname label), and its
        Lease."""
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64"}},
                "status": {
                    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110",
                                 "ephemeral-storage": "100Gi"},
                    "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110",
                                    "ephemeral-storage": "100Gi"},
                    "conditions": [{"type": "Ready", "status": "True",
                                    "reason": "KubeletReady",
                                    "message": "realcluster test node (no kubelet)",
                                    "lastHeartbeatTime": time.strftime(
                                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "lastTransitionTime": time.strftime(
                                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}],
                    "addresses": [{"type": "Hostname", "address": name}]}}
        self.client.create("/api/v1/nodes", node)
        self.client.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                     "renewTime": now_micro()}})

    def _heartbeat(self):
        c = Client(self.url, ca=self.ca, cert=self.path("admin.crt"),
                   key=self.path("admin.key"), user_agent="realcluster-heartbeat/1.0")
        while not self._stop_hb.wait(HEARTBEAT_S):
            for n in self.nodes:
                try:
                    c.patch("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
                            + n, {"spec": {"renewTime": now_micro()}})
                except (ApiError, OSError) as e:
                    self._log("node %s heartbeat failed: %s" % (n, e))
        c.close()

    def stop(self, timeout=20.0):
        """Stops every component this object started, newest first, by pid (after a restart
        in progress)."""
        self.stopping = True
        self._stop_hb.set()
        if self.client is not None:
            self.client.close()
        with self.lock:
            for name, p in reversed(self.procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout)
                    except subprocess.TimeoutExpired:
                        self._log("%s (pid %d) ignored SIGTERM; killing" % (name, p.pid))
                        p.kill()
                        p.wait(10)
            self.procs = []
        if self._hb is not None:
            self._hb.join(HEARTBEAT_S + 35)
            self._hb = None

    def info(self):
        return {"url": self.url, "ca": self.ca, "kubeconfig": self.kubeconfig,
                "admin_cert": self.path("admin.crt"), "admin_key": self.path("admin.key"),
                "pid": os.getpid(), "bin_dir": self.bin_dir, "kubectl": self.kubectl,
                "nodes": list(self.nodes), "state_dir": self.state_dir,
                "version": self.version}


SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT}


class _Spawner:
    """One daemon thread that forks the restarted components. PR_SET_PDEATHSIG fires when the
    *thread* that forked a child ends: a request's or test's thread would take its children
    with it, and a ThreadPoolExecutor's worker is joined (ends) at interpreter shutdown, before
    the atexit handlers that stop the cluster, which then found etcd and the kubelet gone. A
    daemon thread lives until the process ends."""

    def __init__(self):
        self.q = queue.Queue()
        self.thread = None
        self.lock = threading.Lock()

    def _run(self):
        for _ in iter(int, 1):
            fn, args, fut = self.q.get()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

    def submit(self, fn, *args):
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="spawner", daemon=True)
                self.thread.start()
        fut = concurrent.futures.Future()
        self.q.put((fn, args, fut))
        return fut


_SPAWNER = _Spawner()


def restart_proc(owner, name, sig, timeout, log, lock):
    """Cluster.restart and Node.restart: owner has procs, args, health and _spawn; lock is
    held throughout (restarts are serialised, and exited() does not see this one)."""
    t0 = time.monotonic()
    with lock:
        if getattr(owner, "stopping", False):
            raise RuntimeError("stopping: %s is not restarted" % name)
        cur = [p for n, p in owner.procs if n == name]
        if not cur or name not in owner.args:
            raise RuntimeError("no component %r to restart (have %s)"
                               % (name, ", ".join(n for n, _ in owner.procs)))
        p = cur[0]
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                log("%s (pid %d) did not exit on signal %d in 30 s; killing" % (name, p.pid, sig))
                p.kill()
                p.wait(10)
        log("%s (pid %d) stopped (exit %s); starting it again" % (name, p.pid, p.returncode))
        # Started from a thread that lives as long as this process: PR_SET_PDEATHSIG fires when
        # the *thread* that forked the child ends (a control request's, a test's).
        new = _SPAWNER.submit(owner._spawn, name, owner.args[name]).result()
        health = owner.health.get(name)
        deadline = t0 + timeout
        for _ in range(100000):
            if new.poll() is not None:
                raise RuntimeError("%s exited with %s after its restart" % (name, new.returncode))
            if health is None or _quiet(health):
                break
            if time.monotonic() >= deadline:
                raise RuntimeError("%s not healthy %.0f s after its restart" % (name, timeout))
            time.sleep(0.2)
    took = time.monotonic() - t0
    log("%s restarted (pid %d) in %.1fs" % (name, new.pid, took))
    return took


class ControlServer:
    """The control socket of a running `up`: one JSON request line, one JSON answer line.
    {"restart": NAME, "signal": "TERM"|"KILL"} restarts component NAME of the first owner
    (a Cluster, a node.Node) that has it."""

    def __init__(self, path, owners):
        self.path = path
        owners = list(owners)
        try:
            os.unlink(path)
        except OSError:
            pass

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                try:
                    req = json.loads(self.rfile.readline(65536) or b"{}")
                    name = req["restart"]
                    sig = SIGNALS[req.get("signal", "TERM")]
                    for o in owners:
                        if name in o.args:
                            ans = {"ok": True, "seconds": round(o.restart(name, sig), 2)}
                            break
                    else:
                        ans = {"ok": False, "error": "no component %r" % name}
                except Exception as e:  # noqa: BLE001 - the answer says what went wrong
                    ans = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
                self.wfile.write((json.dumps(ans) + "\n").encode())

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(path, Handler)
        os.chmod(path, 0o600)
        self.thread = threading.Thread(target=self.server.serve_forever, name="control",
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


# Components that exit by design when they lose their leader Lease ("Leaderelection lost"),
# and that a kubeadm node's kubelet restarts (static pods): the Supervisor does the same.
RESTART_ON_EXIT = ("kube-controller-manager", "kube-scheduler")


class Supervisor:
    """Watches the components of owners (Cluster, node.Node) every second: one of
    RESTART_ON_EXIT that exited is started again (at most `budget` times in all), any other
    exit is fatal: on_fatal(name, returncode) is called once and the supervisor stops."""

    def __init__(self, owners, log, on_fatal, budget=100):
        self.owners, self.log, self.on_fatal, self.budget = list(owners), log, on_fatal, budget
        self.restarts = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped.wait(1.0):
            for o in self.owners:
                for name, p in o.exited():
                    if self.stopped.is_set():
                        return
                    if name in RESTART_ON_EXIT and self.restarts < self.budget:
                        self.restarts += 1
                        self.log("%s exited with %s (leader Lease lost?): starting it again, as "
                                 "a kubelet restarts a static pod" % (name, p.returncode))
                        try:
                            o.restart(name)
                            continue
                        except RuntimeError as e:
                            self.log("restarting %s failed: %s" % (name, e))
                    self.stopped.set()
                    self.on_fatal(name, p.returncode)
                    return

    def stop(self):
        self.stopped.set()
        if self.thread is not threading.current_thread():
            self.thread.join(130)


def control_request(path, req, timeout=300.0):
    """Sends one request to a ControlServer; returns its answer (a dict)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf or b'{"ok": false, "error": "no answer"}')


def _quiet(fn):
    """fn() with API and socket errors as "not yet"."""
    try:
        return fn()
    except (ApiError, OSError, ValueError):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start, write ready.json, run until SIGTERM")
    up.add_argument("--bin-dir", required=True)
    up.add_argument("--state-dir", required=True)
    up.add_argument("--timeout", type=float, default=240.0)
    up.add_argument("--nodes", default=",".join(NODES),
                    help="comma-separated Node objects to create and keep Ready without a "
                         "kubelet (default %(default)s; '' for none)")
    a = ap.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    c = Cluster(a.bin_dir, a.state_dir, nodes=[n for n in a.nodes.split(",") if n])
    t0 = time.monotonic()
    try:
        c.start(a.timeout)
    except Exception as e:  # noqa: BLE001 - reported, then exit non-zero
        sys.stderr.write("realcluster: start failed: %s\n" % e)
        return 1
    control = ControlServer(c.path("control.sock"), [c])
    info = c.info()
    info["started_s"] = round(time.monotonic() - t0, 1)
    info["control"] = control.path
    tmp = c.path("ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, c.path("ready.json"))
    def fatal(name, code):
        sys.stderr.write("realcluster: %s exited with %s:\n%s" % (name, code, c.log_tail(name)))
        stop.set()
    sup = Supervisor([c], c._log, fatal)
    while not stop.wait(1.0):
        pass
    sup.stop()
    control.close()
    c.stop()
    try:
        os.unlink(c.path("ready.json"))
    except OSError:
        pass
    sys.stderr.write("realcluster: stopped\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
