#!/usr/bin/env python3
"""A real node for the realcluster tier: containerd + runc + bridge CNI + a kubelet.

    node.py up --bin-dir BUILD/realcluster/k8s-v1.37.2 --state-dir DIR [--images-dir I]
    node.py clean --state-dir DIR      after a crash: what `up` would have undone
    node.py snapshot > F; node.py compare F    is the machine as it was?

`up` starts a control plane without stand-in nodes (cluster.py, in DIR/cluster), then this
machine's node `localhost`, waits until it is Ready, writes DIR/ready.json and runs until
SIGTERM/SIGINT, when it stops everything and leaves the machine as it found it.

The node:
- containerd (Debian's, 1.6) with its own config, root, state and socket under DIR/containerd
  (never the system's), started with HTTP_PROXY/HTTPS_PROXY pointing at a loopback port that
  is bound and never listened on, so an image that is not here fails at once, locally,
  instead of being pulled; the images are imported from OCI archives (images.py), and
  served by images.Registry on 127.0.0.1 as the first host of docker.io and registry.k8s.io
  (hosts.toml under DIR/containerd/certs.d), so that a pod whose image is pulled on every
  start (`imagePullPolicy: Always`) gets the imported image: nothing leaves the machine;
- a bridge CNI network (bridge `hpnt0`, no gateway, no masquerade, no route out: pods reach
  only each other) with host-local IPAM whose state lives under DIR;
- a kubelet named `localhost` (the API server reaches it by that Hostname address, from
  /etc/hosts, never DNS; a kubelet refuses a loopback node IP, so the node's InternalIP is the
  one the kubelet picks itself) with a KubeletConfiguration for this cgroup v1 host
  (failCgroupV1: false, cgroupDriver: cgroupfs, cgroupsPerQOS: false, enforceNodeAllocatable:
  [], failSwapOn: false, localStorageCapacityIsolation: false), its API and healthz on
  127.0.0.1, webhook authentication and authorization, a client certificate for
  system:node:localhost and a serving certificate signed by the cluster's CA.

Some things a kubelet and containerd do outside their directories whatever they are told:
the kubelet sets vm.overcommit_memory, kernel.panic and kernel.panic_on_oops and makes
/var/lib/kubelet/device-plugins and /var/log/containers; containerd's shims put their sockets
in /run/containerd/s (network namespaces go under DIR: netns_mounts_under_state_dir); runc
makes cgroups named after the containers; the kubelet adds its KUBE-* iptables chains; the
bridge plugin may turn net.ipv4.ip_forward on; a pod's hostPath DirectoryOrCreate makes its
directory. Before
starting, what exists of all that is recorded in DIR/restore.json; stop() (and `clean`)
remove what was made and restore the sysctls, even after a failed start.

One node tier at a time per machine: an flock on /run/lock/hostpath-provisioner-node.lock.

As a library: n = Node(bin_dir, state_dir, cluster).start(images); ...; n.stop().
n.restart("kubelet") (or "containerd") stops that process by pid and starts it again with the
same configuration, as Cluster.restart does for the control plane; `up` serves both on its
control socket, DIR/control.sock (ready.json's "control"; see cluster.py).
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, HERE)
from standin import certs  # noqa: E402
from harness import ApiError, Client, wait_for  # noqa: E402
from cluster import (Cluster, ControlServer, Supervisor, _pdeathsig, _quiet,  # noqa: E402
                     free_port, restart_proc)
import images  # noqa: E402

LOCK = "/run/lock/hostpath-provisioner-node.lock"
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops",
           "net.ipv4.ip_forward")
# Paths the kubelet, containerd, runc, CNI or a pod's hostPath may make outside the state
# directory; each one that did not exist before the node started is removed after.
OUTSIDE_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods",
                 "/run/containerd", "/run/netns", "/var/run/netns", "/var/lib/cni",
                 "/usr/libexec/kubernetes", "/run/runc", "/var/lib/containerd",
                 "/var/lib/hostpath-provisioner", "/etc/kubernetes",
                 "/opt/local-path-provisioner",  # bench/bench_node.py's rival, and the
                 "/opt/local-path-provisioner-shared")  # paths of its e2e fixtures
# hostPath directories that pods mount with mountPropagation (the manifests' volume root,
# HostToContainer): containerd refuses a path whose mount is neither shared nor slave, and
# this machine's / is a private mount (a systemd host's is shared). Each is made a shared bind
# mount of itself for the node's lifetime (recorded; clean unmounts it). The two /opt paths are
# local-path-provisioner's, which test_node_lpp.py mounts into our pod the same way.
SHARED_PATHS = ("/var/lib/hostpath-provisioner", "/opt/local-path-provisioner",
                "/opt/local-path-provisioner-shared")
CGROUP_ROOT = "/sys/fs/cgroup"
BRIDGE = "hpnt0"
POD_SUBNET = "10.253.0.0/24"
NODE_NAME = "localhost"


def _log_default(msg):
    sys.stderr.write("node: %s\n" % msg)


def read_sysctl(name):
    with open("/proc/sys/" + name.replace(".", "/")) as f:
        return f.read().strip()


def write_sysctl(name, value):
    with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
        f.write(value)


def mounts_under(prefixes):
    """Mount points under any of the prefixes, deepest first (from /proc/self/mountinfo)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if any(mp == p or mp.startswith(p.rstrip("/") + "/") for p in prefixes):
                out.append(mp)
    return sorted(set(out), key=lambda m: (-m.count("/"), m))


def cgroup_dirs():
    """Every cgroup directory of the v1 hierarchies (relative to their hierarchy)."""
    out = set()
    try:
        ctrls = os.listdir(CGROUP_ROOT)
    except OSError:
        return out
    for c in ctrls:
        base = os.path.join(CGROUP_ROOT, c)
        if not os.path.isdir(base) or os.path.islink(base):
            continue
        for root, dirs, _ in os.walk(base):
            for d in dirs:
                out.add(os.path.relpath(os.path.join(root, d), CGROUP_ROOT))
    return out


def iptables_chains():
    """{(tool, table, chain)} of KUBE-* chains (the kubelet's own)."""
    out = set()
    for tool in ("iptables", "ip6tables"):
        if not shutil.which(tool):
            continue
        for table in ("filter", "nat", "mangle"):
            r = subprocess.run([tool, "-w", "5", "-t", table, "-S"], capture_output=True,
                               text=True, timeout=30)
            for line in r.stdout.splitlines():
                m = re.match(r"-N (KUBE-\S+)$", line)
                if m:
                    out.add((tool, table, m.group(1)))
    return out


def netns_files():
    out = set()
    for d in ("/run/netns", "/var/run/netns"):
        try:
            out.update(os.path.join(os.path.realpath(d), n) for n in os.listdir(d))
        except OSError:
            pass
    return out


class NodeLock:
    """flock on LOCK, held while a node tier runs; the file is removed on release (a waiter
    that locked the removed file sees it is no longer the path's and tries again)."""

    def __init__(self, path=LOCK):
        self.path = path
        self.fd = None

    def acquire(self, state_dir, timeout=0.0):
        deadline = time.monotonic() + timeout
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
                finally:
                    os.close(fd)
                if time.monotonic() >= deadline:
                    raise RuntimeError("another node tier runs on this machine (%s holds %s); "
                                       "one at a time" % (holder or "?", self.path))
                time.sleep(1.0)
                continue
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except OSError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, ("pid %d, state %s\n" % (os.getpid(), state_dir)).encode(), 0)
            self.fd = fd
            return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


class Node:
    def __init__(self, bin_dir, state_dir, cluster, name=NODE_NAME, log=None,
                 bridge=BRIDGE, subnet=POD_SUBNET):
        self.bin_dir = os.path.abspath(bin_dir)
        self.state_dir = os.path.abspath(state_dir)
        self.cluster = cluster
        self.name = name
        self.bridge = bridge
        self.subnet = subnet
        self._log = log or _log_default
        self.procs = []  # (name, Popen)
        self.args = {}   # name -> (command line, environment), for restart()
        self.health = {}
        self.proc_lock = threading.RLock()  # as Cluster.lock
        self.stopping = False
        self.lock = NodeLock()
        self._proxy_sock = None
        self.registry = None
        self.kubelet_port = self.healthz_port = None
        self.client = None

    # -- paths -------------------------------------------------------------------------

    def path(self, *p):
        return os.path.join(self.state_dir, *p)

    @property
    def address(self):
        """containerd's socket."""
        return self.path("containerd", "containerd.sock")

    @property
    def kubelet_root(self):
        return self.path("kubelet")

    # -- start -------------------------------------------------------------------------

    def start(self, image_archives=(), timeout=240.0):
        t0 = time.monotonic()
        deadline = t0 + timeout
        for b in ("kubelet",):
            if not os.access(os.path.join(self.bin_dir, b), os.X_OK):
                raise RuntimeError("missing %s (run tests/realcluster/build.sh)"
                                   % os.path.join(self.bin_dir, b))
        for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr"):
            if not shutil.which(tool):
                raise RuntimeError("%s is not installed (scripts/setup.sh --test installs "
                                   "containerd, runc and containernetworking-plugins)" % tool)
        if not os.path.exists("/usr/lib/cni/bridge"):
            raise RuntimeError("/usr/lib/cni/bridge missing (install containernetworking-"
                               "plugins)")
        os.makedirs(self.state_dir, exist_ok=True)
        self.lock.acquire(self.state_dir)
        try:
            self._record()
            self._share_paths()
            self._start_containerd(deadline, image_archives)
            t_img = time.monotonic()
            images.import_archives(self.address, image_archives)
            if image_archives:
                self._log("imported %d image archives in %.1fs" % (
                    len(image_archives), time.monotonic() - t_img))
            self._start_kubelet(deadline)
        except BaseException:
            self.stop()
            raise
        self._log("node %s ready in %.1fs" % (self.name, time.monotonic() - t0))
        return self

    def _record(self):
        """restore.json: what exists before we change anything."""
        rec = {"sysctls": {k: read_sysctl(k) for k in SYSCTLS},
               "existing": [p for p in OUTSIDE_PATHS if os.path.lexists(p)],
               "cgroups": sorted(cgroup_dirs()),
               "chains": sorted(list(c) for c in iptables_chains()),
               "netns": sorted(netns_files()),
               "bridge_existed": os.path.exists("/sys/class/net/" + self.bridge),
               "bridge": self.bridge,
               "address": self.address,
               "state_dir": self.state_dir}
        if rec["bridge_existed"]:
            raise RuntimeError("network interface %s exists already (a node tier left "
                               "behind? node.py clean --state-dir ITS_DIR)" % self.bridge)
        tmp = self.path("restore.json.tmp")
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=1)
        os.replace(tmp, self.path("restore.json"))

    def _share_paths(self):
        for p in SHARED_PATHS:
            os.makedirs(p, exist_ok=True)
            for args in (["mount", "--bind", p, p], ["mount", "--make-shared", p]):
                r = subprocess.run(args, capture_output=True, text=True, timeout=30)
                if r.returncode != 0:
                    raise RuntimeError("%s: %s" % (" ".join(args), r.stderr.strip()))
            with open(self.path("shared-mounts"), "a") as f:
                f.write(p + "\n")

    def _spawn(self, name, args, env=None, health=None):
        if isinstance(args, tuple):  # a restart: (command line, environment)
            args, env = args
        log = open(self.path(name + ".log"), "ab")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=_pdeathsig,
                             cwd=self.state_dir, env=env)
        log.close()
        self.args[name] = (list(args), env)
        if health is not None:
            self.health[name] = health
        for i, (n, _) in enumerate(self.procs):
            if n == name:
                self.procs[i] = (name, p)
                return p
        self.procs.append((name, p))
        return p

    def exited(self):
        """[(name, Popen)] of the node's processes that exited (not those being restarted)."""
        with self.proc_lock:
            return [(n, p) for n, p in self.procs if p.poll() is not None]

    def restart(self, name, sig=signal.SIGTERM, timeout=120.0):
        """Stops "kubelet" or "containerd" by pid with sig and starts it again with the same
        configuration (pods keep running: containerd's shims hold them); returns the seconds
        until it was healthy again (the kubelet: its /healthz and the node Ready)."""
        return restart_proc(self, name, sig, timeout, self._log, self.proc_lock)

    def log_tail(self, name, n=40):
        try:
            with open(self.path(name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def _wait(self, what, pred, deadline, interval=0.2):
        def check():
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited with %s; last log lines:\n%s" % (
                        name, p.returncode, self.log_tail(name)))
            return pred()
        return wait_for(check, max(1.0, deadline - time.monotonic()), interval=interval,
                        what=what)

    def _start_containerd(self, deadline, image_archives=()):
        cd = self.path("containerd")
        for d in ("root", "state", "opt", "runc"):
            os.makedirs(os.path.join(cd, d), exist_ok=True)
        os.makedirs(self.path("cni", "net.d"), exist_ok=True)
        os.makedirs(self.path("cni", "ipam"), exist_ok=True)
        with open(self.path("cni", "net.d", "10-hp-node.conflist"), "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": "hp-node-tier", "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": False,
                "ipMasq": False, "hairpinMode": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                         "dataDir": self.path("cni", "ipam")}}]}, f, indent=1)
        # The imported images served to containerd by a registry of our own (images.Registry)
        # for every pull of a host it holds images of.
        certs_d = os.path.join(cd, "certs.d")
        self.registry = images.Registry(image_archives).start()
        for host in sorted(self.registry.hosts):
            os.makedirs(os.path.join(certs_d, host), exist_ok=True)
            with open(os.path.join(certs_d, host, "hosts.toml"), "w") as f:
                f.write(self.registry.hosts_toml(host))
        cfg = self.path("containerd", "config.toml")
        with open(cfg, "w") as f:
            f.write(CONTAINERD_CONFIG.format(
                root=os.path.join(cd, "root"), state=os.path.join(cd, "state"),
                address=self.address, opt=os.path.join(cd, "opt"),
                runc_root=os.path.join(cd, "runc"), pause=images.PAUSE,
                cni_conf=self.path("cni", "net.d"), certs_d=certs_d))
        # Any pull goes to a proxy port that is bound and not listening: refused at once,
        # locally. The socket is held for the node's lifetime so nothing else takes the port.
        self._proxy_sock = socket.socket()
        self._proxy_sock.bind(("127.0.0.1", 0))
        proxy = "http://127.0.0.1:%d" % self._proxy_sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items()
               if k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")}
        env.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy,
                   NO_PROXY="", no_proxy="")
        def up():
            r = subprocess.run(["ctr", "--address", self.address, "version"],
                               capture_output=True, timeout=10)
            return r.returncode == 0
        self._spawn("containerd", ["containerd", "--config", cfg, "--log-level", "info"],
                    env=env, health=up)
        self._wait("containerd up", up, deadline, interval=0.3)

    def _certs(self):
        pki = self.path("pki")
        os.makedirs(pki, exist_ok=True)
        for f in ("ca.crt", "ca.key"):
            dst = os.path.join(pki, f)
            if not os.path.exists(dst):
                os.symlink(self.cluster.path(f), dst)
        certs.sign_cert(pki, "kubelet-client", "system:node:" + self.name, "clientAuth",
                        orgs=("system:nodes",))
        certs.sign_cert(pki, "kubelet-serving", "system:node:" + self.name, "serverAuth",
                        san="DNS:%s,IP:127.0.0.1" % self.name)
        certs.write_kubeconfig(self.path("kubelet.conf"), self.cluster.url, self.cluster.ca,
                               cert=os.path.join(pki, "kubelet-client.crt"),
                               key=os.path.join(pki, "kubelet-client.key"))

    def _start_kubelet(self, deadline):
        self._certs()
        self.kubelet_port, self.healthz_port = free_port(), free_port()
        with open(self.path("resolv.conf"), "w") as f:
            # Pods resolve nothing off this machine: a name server on their own loopback.
            f.write("nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n")
        for d in ("kubelet", "pod-logs", "volume-plugins"):
            os.makedirs(self.path(d), exist_ok=True)
        cfg = self.path("kubelet-config.yaml")
        with open(cfg, "w") as f:
            f.write(KUBELET_CONFIG.format(
                port=self.kubelet_port, healthz=self.healthz_port, ca=self.cluster.ca,
                crt=self.path("pki", "kubelet-serving.crt"),
                key=self.path("pki", "kubelet-serving.key"),
                endpoint="unix://" + self.address, pod_logs=self.path("pod-logs"),
                resolv=self.path("resolv.conf"), plugins=self.path("volume-plugins")))
        self._spawn("kubelet", [
            os.path.join(self.bin_dir, "kubelet"), "--config=" + cfg,
            "--kubeconfig=" + self.path("kubelet.conf"), "--root-dir=" + self.kubelet_root,
            "--hostname-override=" + self.name, "--v=2"],
            health=lambda: self._kubelet_healthy() and self.ready())
        self.client = Client(self.cluster.url, ca=self.cluster.ca,
                             cert=self.cluster.path("admin.crt"),
                             key=self.cluster.path("admin.key"), user_agent="node-tier/1.0")
        self._wait("node %s Ready and untainted" % self.name, lambda: _quiet(self.ready),
                   deadline, interval=0.5)

    def _kubelet_healthy(self):
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.healthz_port,
                                    timeout=5) as r:
            return r.status == 200

    def ready(self):
        n = self.client.get("/api/v1/nodes/" + self.name)
        conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
        return conds.get("Ready") == "True" and not n["spec"].get("taints")

    def info(self):
        return {"name": self.name, "address": self.address, "state_dir": self.state_dir,
                "kubelet_port": self.kubelet_port, "healthz_port": self.healthz_port,
                "kubelet_root": self.kubelet_root, "bridge": self.bridge,
                "subnet": self.subnet}

    # -- stop --------------------------------------------------------------------------

    def drain(self, timeout=90.0):
        """Every pod off this node: a NoExecute taint (the taint manager evicts, the
        DaemonSet controller stops placing pods here), then deletes, bounded."""
        if self.client is None:
            return
        path = "/api/v1/nodes/" + self.name
        try:
            node = self.client.get(path)
        except (ApiError, OSError):
            return
        taints = [t for t in node["spec"].get("taints") or []
                  if t["key"] != "hostpath.test/teardown"]
        taints.append({"key": "hostpath.test/teardown", "effect": "NoExecute"})
        _quiet(lambda: self.client.patch(path, {"spec": {"unschedulable": True,
                                                         "taints": taints}}))

        def pods():
            return [p for p in self.client.list("/api/v1/pods", fieldSelector="spec.nodeName="
                                                + self.name)["items"]]

        def gone():
            left = pods()
            for p in left:
                if not p["metadata"].get("deletionTimestamp"):
                    _quiet(lambda: self.client.delete("/api/v1/namespaces/%s/pods/%s" % (
                        p["metadata"]["namespace"], p["metadata"]["name"])))
            return not left
        try:
            wait_for(gone, timeout, interval=1.0, what="pods on %s gone" % self.name)
        except TimeoutError as e:
            self._log("%s; forcing" % e)
            for p in _quiet(pods) or []:
                _quiet(lambda: self.client.delete("/api/v1/namespaces/%s/pods/%s" % (
                    p["metadata"]["namespace"], p["metadata"]["name"]),
                    {"gracePeriodSeconds": 0}))

    def stop(self, timeout=20.0):
        """Stops the node and leaves the machine as it was (see the module doc). Every step
        runs even when one before it failed; the first failure is re-raised at the end."""
        errors = []

        def step(what, fn, *a):
            try:
                fn(*a)
            except Exception as e:  # noqa: BLE001 - every step must run
                self._log("stop: %s failed: %s" % (what, e))
                errors.append("%s: %s" % (what, e))

        self.stopping = True
        if any(n == "kubelet" and p.poll() is None for n, p in self.procs):
            step("drain", self.drain)
        step("stop kubelet", self._stop_proc, "kubelet", timeout)
        if any(n == "containerd" and p.poll() is None for n, p in self.procs):
            step("containers", self._remove_containers)
        step("stop containerd", self._stop_proc, "containerd", timeout)
        if self.client is not None:
            self.client.close()
        if self._proxy_sock is not None:
            self._proxy_sock.close()
            self._proxy_sock = None
        if self.registry is not None:
            step("stop registry", self.registry.stop)
            self.registry = None
        step("clean", clean, self.state_dir, self._log)
        if self.client is not None:
            _quiet(lambda: self.client.delete("/api/v1/nodes/" + self.name))
        self.procs = []
        self.lock.release()
        if errors:
            raise RuntimeError("node stop: " + "; ".join(errors))

    def _stop_proc(self, name, timeout):
        with self.proc_lock:
            self._stop_proc_locked(name, timeout)

    def _stop_proc_locked(self, name, timeout):
        for n, p in self.procs:
            if n == name and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._log("%s (pid %d) ignored SIGTERM; killing" % (name, p.pid))
                    p.kill()
                    p.wait(10)

    def _ctr(self, *args, timeout=60):
        return subprocess.run(["ctr", "--address", self.address, "--namespace", "k8s.io"]
                              + list(args), capture_output=True, text=True, timeout=timeout)

    def _remove_containers(self):
        """What the kubelet left (stopped sandboxes, or anything after a failed drain): each
        task killed and deleted, each container removed, through containerd."""
        tasks = self._ctr("tasks", "ls", "-q").stdout.split()
        for t in tasks:
            self._ctr("tasks", "kill", "-a", "-s", "SIGKILL", t)
        for t in tasks:
            for _ in range(50):
                if self._ctr("tasks", "delete", "-f", t).returncode == 0:
                    break
                time.sleep(0.2)
        for c in self._ctr("containers", "ls", "-q").stdout.split():
            self._ctr("containers", "rm", c)


def clean(state_dir, log=_log_default):
    """Undoes what a node left on the machine, from DIR/restore.json: its processes (shims
    and containers found by the node's containerd socket), mounts under DIR, its network
    namespaces and bridge, the cgroups runc made for its containers, the kubelet's iptables
    chains, the paths made outside DIR; restores the sysctls. Safe to run twice."""
    state_dir = os.path.abspath(state_dir)
    try:
        with open(os.path.join(state_dir, "restore.json")) as f:
            rec = json.load(f)
    except OSError:
        return
    address = rec["address"]
    errors = []

    def attempt(what, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            log("clean: %s: %s" % (what, e))
            errors.append(what)

    attempt("processes", lambda: _kill_ours(address, state_dir, log))
    attempt("mounts", lambda: _unmount(mounts_under([state_dir]), log))
    try:
        with open(os.path.join(state_dir, "shared-mounts")) as f:
            shared = [line.strip() for line in f if line.strip()]
    except OSError:
        shared = []
    # Our shared bind mounts (SHARED_PATHS), and whatever pods mounted beneath them.
    attempt("shared mounts", lambda: [_unmount(mounts_under([p]), log) for p in shared])
    if shared:
        os.unlink(os.path.join(state_dir, "shared-mounts"))
    new_netns = sorted(netns_files() - set(rec["netns"]))
    attempt("netns", lambda: _remove_netns(new_netns, log))
    attempt("bridge", lambda: subprocess.run(
        ["ip", "link", "del", rec["bridge"]], capture_output=True, timeout=30)
        if os.path.exists("/sys/class/net/" + rec["bridge"]) and not rec["bridge_existed"]
        else None)
    attempt("cgroups", lambda: _remove_cgroups(set(rec["cgroups"]), log))
    attempt("iptables", lambda: _remove_chains({tuple(c) for c in rec["chains"]}))
    for p in OUTSIDE_PATHS:
        if p not in rec["existing"] and os.path.lexists(p):
            attempt(p, lambda p=p: _remove_tree(p, log))
    for k, v in rec["sysctls"].items():
        attempt("sysctl " + k, lambda k=k, v=v: read_sysctl(k) != v and write_sysctl(k, v))
    if errors:
        raise RuntimeError("clean left: " + ", ".join(errors))


def _kill_ours(address, state_dir, log):
    """containerd, its shims and their containers, found by our socket path or state dir in
    their command line or by being a shim's child: SIGKILL by pid, bounded wait."""
    ours = set()
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(pid))
        if address in cmd or (" " + state_dir + "/") in (" " + cmd):
            ours.add(int(pid))
    todo = list(ours)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in ours:
                ours.add(c)
                todo.append(c)
    ours.discard(os.getpid())
    for pid in ours:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if ours:
        log("clean: killed %d leftover processes (%s)" % (len(ours), sorted(ours)))
    deadline = time.monotonic() + 10
    while ours and time.monotonic() < deadline:
        ours = {p for p in ours if os.path.exists("/proc/%d" % p)}
        time.sleep(0.1)


def _unmount(mps, log):
    for mp in mps:
        r = subprocess.run(["umount", mp], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            r = subprocess.run(["umount", "-l", mp], capture_output=True, text=True,
                               timeout=30)
            if r.returncode != 0:
                log("clean: umount %s: %s" % (mp, r.stderr.strip()))


def _remove_netns(paths, log):
    for p in paths:
        _unmount([p] if mounts_under([p]) else [], log)
        try:
            os.unlink(p)
        except OSError:
            pass


def _remove_cgroups(before, log):
    """New cgroups named like containerd ids (64 hex) or the kubelet's own (kubepods*),
    children first. Other new cgroups (another program's) are left alone."""
    made = sorted(cgroup_dirs() - before, key=lambda d: -d.count("/"))
    pat = re.compile(r"^(?:[0-9a-f]{64}|kubepods.*|k8s\.io|podruntime|runtime|kubelet)$")
    for d in made:
        rel = d.split("/", 1)[1] if "/" in d else ""
        if rel and all(pat.match(part) for part in rel.split("/")):
            try:
                os.rmdir(os.path.join(CGROUP_ROOT, d))
            except OSError as e:
                log("clean: rmdir cgroup %s: %s" % (d, e))


def _remove_chains(before):
    now = iptables_chains()
    for tool, table, chain in sorted(now - before):
        # Rules jumping to it first, then the chain.
        r = subprocess.run([tool, "-w", "5", "-t", table, "-S"], capture_output=True,
                           text=True, timeout=30)
        for line in r.stdout.splitlines():
            if line.startswith("-A ") and ("-j " + chain) in line:
                subprocess.run([tool, "-w", "5", "-t", table] + ["-D"] + line.split()[1:],
                               capture_output=True, timeout=30)
        subprocess.run([tool, "-w", "5", "-t", table, "-F", chain], capture_output=True,
                       timeout=30)
        subprocess.run([tool, "-w", "5", "-t", table, "-X", chain], capture_output=True,
                       timeout=30)


def _remove_tree(p, log):
    _unmount(mounts_under([p]), log)
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def snapshot():
    """What of the machine a node tier may change, for `snapshot`/`compare` (scripts/test.sh
    runs both around the tier: a difference fails it)."""
    pat = re.compile(r"(^|/)([0-9a-f]{64}|kubepods[^/]*)$")
    return {"sysctls": {k: read_sysctl(k) for k in SYSCTLS},
            "paths": sorted(p for p in OUTSIDE_PATHS if os.path.lexists(p)),
            "lock": os.path.lexists(LOCK),
            "bridge": os.path.exists("/sys/class/net/" + BRIDGE),
            "netns": sorted(netns_files()),
            "chains": sorted("%s %s %s" % c for c in iptables_chains()),
            "cgroups": sorted(d for d in cgroup_dirs() if pat.search(d)),
            "mounts": mounts_under(["/var/lib/kubelet", "/run/netns", "/run/containerd"]
                                   + list(SHARED_PATHS)),
            "shims": sorted(pid for pid in os.listdir("/proc") if pid.isdigit()
                            and _comm(pid) == "containerd-shim")}


def _comm(pid):
    try:
        with open("/proc/%s/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def compare(before, after):
    """The differences between two snapshots, as lines."""
    out = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            out.append("%s: before %s, after %s" % (k, json.dumps(before.get(k)),
                                                    json.dumps(after.get(k))))
    return out


CONTAINERD_CONFIG = """\
# containerd for the node tier (tests/realcluster/node.py): everything under the state dir.
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{address}"

[ttrpc]
  address = "{address}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # This sandbox drops CAP_SYS_RESOURCE: a negative oom_score_adj (the kubelet asks -998
  # for sandboxes) is refused, so scores are kept at or above containerd's own (0).
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384
  # Pod network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "{runc_root}"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
    max_conf_num = 1

  # <host>/hosts.toml: images.Registry first (node.py writes them).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs_d}"
"""

KUBELET_CONFIG = """\
# kubelet for the node tier (tests/realcluster/node.py): a cgroup v1 host, loopback only.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
tlsCertFile: {crt}
tlsPrivateKeyFile: {key}
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
containerRuntimeEndpoint: {endpoint}
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
podLogsDir: {pod_logs}
resolvConf: {resolv}
volumePluginDir: {plugins}
clusterDomain: cluster.local
# The machine's disk is shared with everything else on it: evict only when truly full, and
# never garbage-collect the imported images (they cannot be pulled again).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 250
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="control plane + node, ready.json, run until SIGTERM")
    up.add_argument("--bin-dir", required=True)
    up.add_argument("--state-dir", required=True)
    up.add_argument("--images-dir", help="OCI archives to import (images.py build); "
                    "default: built into STATE/images")
    up.add_argument("--timeout", type=float, default=300.0)
    cl = sub.add_parser("clean", help="undo what a node left behind (after a crash)")
    cl.add_argument("--state-dir", required=True)
    sub.add_parser("snapshot", help="print what of the machine a node tier may change (JSON)")
    cmp_ = sub.add_parser("compare", help="compare the machine with a snapshot; exit 1 and "
                          "print the differences when it is not as it was")
    cmp_.add_argument("before")
    a = ap.parse_args()
    if a.cmd == "clean":
        clean(a.state_dir)
        return 0
    if a.cmd == "snapshot":
        json.dump(snapshot(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if a.cmd == "compare":
        with open(a.before) as f:
            diff = compare(json.load(f), snapshot())
        for line in diff:
            sys.stdout.write("node: machine not as it was: %s\n" % line)
        return 1 if diff else 0

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state = os.path.abspath(a.state_dir)
    os.makedirs(state, exist_ok=True)
    t0 = time.monotonic()
    if a.images_dir:
        archives = sorted(os.path.join(a.images_dir, f) for f in os.listdir(a.images_dir)
                          if f.endswith(".tar"))
    else:
        archives = images.build_all(os.path.join(state, "images"), a.bin_dir,
                                    log=lambda m: _log_default("image: " + m))
    c = Cluster(a.bin_dir, os.path.join(state, "cluster"), nodes=())
    n = None
    try:
        c.start(a.timeout)
        n = Node(a.bin_dir, os.path.join(state, "node"), c).start(archives, a.timeout)
    except Exception as e:  # noqa: BLE001 - reported, then exit non-zero
        sys.stderr.write("node: start failed: %s\n" % e)
        if n is None:
            c.stop()
        return 1
    control = ControlServer(os.path.join(state, "control.sock"), [c, n])
    info = c.info()
    info["nodes"] = [n.name]
    info["node"] = n.info()
    info["started_s"] = round(time.monotonic() - t0, 1)
    info["control"] = control.path
    tmp = os.path.join(state, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, os.path.join(state, "ready.json"))
    def fatal(name, code):
        sys.stderr.write("node: %s exited with %s\n" % (name, code))
        stop.set()
    sup = Supervisor([c, n], _log_default, fatal)
    while not stop.wait(1.0):
        pass
    sup.stop()
    control.close()
    code = 0
    try:
        n.stop()
    except RuntimeError as e:
        sys.stderr.write("node: %s\n" % e)
        code = 1
    c.stop()
    try:
        os.unlink(os.path.join(state, "ready.json"))
    except OSError:
        pass
    sys.stderr.write("node: stopped\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
