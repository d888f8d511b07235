#!/usr/bin/env python3
"""The soak on the real node tier (issue 23): claims of every class shape, each with a pod that
writes a file of known content into its volume and reads it back, while the provisioner's pod,
the control plane and the node fail around it; then proof, read on the node's disks, that not
one byte a pod wrote was lost.

    tests/soak/node_soak.py --short      # the CI form (meson test soak_node_short, suite node)
    tests/soak/node_soak.py              # the full run (1,000 claims with pods, 20+ faults)

Runs as root on the node tier (tests/realcluster/node.py): the one of $HP_NODE_STATE, else a
control plane and node of its own (binaries from tests/realcluster/build.sh, images built).
Exit 77 when that cannot be (no binaries, not root).

What runs (tests/soak/README.md, "The soak on a real node", says it for the operator):
- our image as manifests/install.yaml's Deployment, applied with kubectl apply -k through
  nodeharness's sandbox overlay plus the soak's own patch: a ConfigMap with a --config of two
  volume paths under /var/lib/hostpath-soak (mounted into the pod like the manifests' own
  hostPath, HostToContainer): `main`, a directory of the machine's disk, and `small`, a loop
  ext4 image (ENOSPC when full, unmounted and mounted again); and the API server address is a
  proxy of the soak's that cuts the provisioner's connections (its watches) every few seconds;
- StorageClasses of every shape: Immediate and WaitForFirstConsumer, reclaim Retain and Delete,
  onDelete delete / retain (with reuseRetained) / archive, hostPath and `local` volumes, a
  nested pathPattern that reuses claim names, two classes on the small disk;
- claims, each with a busybox pod (uid 1000) that writes `payload-<n>` (a token repeated to a
  random size, checksum known in advance), reads it back every few seconds and exits; some
  claims deleted while their pod runs (protection must hold them), some kept to the end, the
  retained ones claimed again under the same name (reuseRetained gives the data back, which
  the next pod checks before it writes).
Faults, during the load: kill -9 of the provisioner's container process (by pid, from
containerd), `kubectl delete pod`, `kubectl rollout restart`; kube-apiserver, etcd,
kube-controller-manager, kube-scheduler and the kubelet restarted (SIGTERM or SIGKILL, through
node.py's control socket); the provisioner's API connections cut; the small disk filled and
freed, unmounted and mounted again; the provisioner stopped, its journals replaced by a copy
taken earlier (a stale journal, as a restored backup leaves it), started again.
Invariants, during and after (findings count objects, the first of each kind is named): see
tests/soak/README.md. The last line is

    soak: N claims, K kills, F faults: 0 lost, 0 duplicated, 0 wrong deletions, 0 orphans, 0 bytes lost

and any finding exits 1.
"""

import argparse
import calendar
import hashlib
import heapq
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(os.path.dirname(HERE), "realcluster")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, REAL)
sys.path.insert(0, HERE)
from harness import (ALL_PVCS_PATH, JOURNAL_DIR, PVC_PATH, PVCS_PATH, PV_PATH,  # noqa: E402
                     PVS_PATH, SANITIZER, SC_PATH, SCS_PATH, ApiError, Client, claim,
                     journal_records, read_text, storage_class)
from soak import fmt_ms, fmt_t, pct, walk_dirs  # noqa: E402

SOAK_ROOT = "/var/lib/hostpath-soak"
MAIN = SOAK_ROOT + "/main"
SMALL = SOAK_ROOT + "/small"
ROOTS = (MAIN, SMALL)
PROV_NS = "hostpath-provisioner"
DEPLOY = "hostpath-provisioner"
PROV_LABEL = "app.kubernetes.io/name=hostpath-provisioner"
SOAK_LABEL = "hostpath-soak"
NAMESPACES = ["nsoak-0", "nsoak-1", "nsoak-2"]
PODS_PATH = "/api/v1/namespaces/%s/pods"
POD_PATH = "/api/v1/namespaces/%s/pods/%s"
NS_PATH = "/api/v1/namespaces/%s"
EVENTS_PATH = "/api/v1/namespaces/%s/events"
CSIDRIVER_PATH = "/apis/storage.k8s.io/v1/csidrivers/%s"
ANN_ON_DELETE = "hostpath.provisioner/on-delete"
WFFC = "WaitForFirstConsumer"
# Exit codes of the pod script (POD_SCRIPT).
EXIT_OK, EXIT_MISMATCH, EXIT_WRITEFAIL, EXIT_NOVOLUME = 0, 3, 4, 10

# The pod: verify what earlier pods wrote ($VERIFY: name=sha256 ...), write $FILE ($TOKEN
# repeated to $SIZE bytes) through a temporary name, then read it back $ROUNDS times.
POD_SCRIPT = r"""
cd /data || { echo NOVOLUME; exit 10; }
for pair in $VERIFY; do
  n=${pair%%=*}; want=${pair#*=}
  got=$(sha256sum "$n" 2>&1 | cut -d' ' -f1)
  [ "$got" = "$want" ] || { echo "MISMATCH-BEFORE $n $got"; ls -la; exit 3; }
done
t=".$FILE.tmp"
if ! yes "$TOKEN" | head -c "$SIZE" > "$t"; then
  echo "WRITEFAIL $(df -k . | tail -1)"; rm -f "$t"; exit 4
fi
sync
mv "$t" "$FILE" || { echo WRITEFAIL-RENAME; rm -f "$t"; exit 4; }
sync
echo "WROTE $FILE"
i=0
while [ "$i" -lt "$ROUNDS" ]; do
  sleep "$PAUSE"
  got=$(sha256sum "$FILE" 2>&1 | cut -d' ' -f1)
  [ "$got" = "$SHA" ] || { echo "MISMATCH $FILE $got"; ls -la; exit 3; }
  i=$((i+1))
done
echo DONE
"""


def now():
    return time.monotonic()


def payload(token, size):
    unit = (token + "\n").encode()
    return (unit * (size // len(unit) + 1))[:size]


def sha256_file(path, limit=64 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = limit
        while left > 0:
            b = f.read(min(left, 1 << 20))
            if not b:
                break
            h.update(b)
            left -= len(b)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Logging and findings
# ---------------------------------------------------------------------------------------------

LOG_LOCK = threading.Lock()
LOG_FILE = None


def log(msg, console=False):
    line = "%s %s" % (time.strftime("%H:%M:%S"), msg)
    with LOG_LOCK:
        if LOG_FILE:
            LOG_FILE.write(line + "\n")
            LOG_FILE.flush()
        if console:
            print(msg, flush=True)


def say(msg):
    log(msg, console=True)


class Findings:
    """The counted kinds; the first of each named. One object once per kind."""

    KINDS = ("lost", "duplicated", "wrong deletions", "orphans", "bytes lost", "crashes",
             "memory", "errors")
    UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def __init__(self):
        self.lock = threading.Lock()
        self.items = {k: [] for k in self.KINDS}
        self.keys = set()
        self.bytes_lost = 0

    def add(self, kind, key, msg, nbytes=0):
        m = self.UID.search(key)
        key = m.group(0) if m else key
        with self.lock:
            if (kind, key) in self.keys:
                return False
            self.keys.add((kind, key))
            self.items[kind].append(msg)
            self.bytes_lost += nbytes
        log("FINDING %s: %s" % (kind, msg))
        return True

    def count(self, kind):
        with self.lock:
            return len(self.items[kind])


# ---------------------------------------------------------------------------------------------
# The API: calls that ride out a restarting control plane, and reflectors
# ---------------------------------------------------------------------------------------------

class Api:
    def __init__(self, nc, stopping):
        info = nc.info
        self.client = Client(nc.url, ca=nc.ca, cert=info["admin_cert"], key=info["admin_key"],
                             user_agent="hp-node-soak/1.0", timeout=15.0)
        self.stopping = stopping

    def call(self, method, path, body=None, query=None, content_type=None, ok=(),
             deadline=90.0):
        """One API call, retried on 5xx, 429 and connection errors (a control plane being
        restarted) for at most `deadline` seconds; an ApiError with a status in `ok` (or any
        other 4xx) is raised at once."""
        end = now() + deadline
        delay = 0.1
        err = None
        for _ in range(100000):
            try:
                return self.client.call(method, path, body, query, content_type)
            except ApiError as e:
                if e.status in ok or (e.status < 500 and e.status != 429):
                    raise
                err = e
            except (OSError, ValueError) as e:
                err = e
                self.client.local.conn = None
            if now() >= end:
                break
            time.sleep(delay)
            delay = min(1.0, delay * 2)
        raise RuntimeError("%s %s: %s" % (method, path, err))

    def get(self, path, **q):
        return self.call("GET", path, query=q)

    def exists(self, path):
        try:
            self.call("GET", path, ok=(404,))
            return True
        except ApiError:
            return False


class Reflector(threading.Thread):
    """LIST then WATCH one collection; resume after a closed watch, relist after 410 or a
    control plane restart. on_replace(items) after each list, on_event(type, obj) after."""

    def __init__(self, soak, path, query, on_event, on_replace, name):
        super().__init__(daemon=True, name=name)
        self.soak, self.path, self.query = soak, path, dict(query)
        self.on_event, self.on_replace = on_event, on_replace
        nc = soak.nc
        self.client = Client(nc.url, ca=nc.ca, cert=nc.info["admin_cert"],
                             key=nc.info["admin_key"], user_agent="hp-node-soak/1.0",
                             timeout=15.0)
        self.rv = None
        self.synced = threading.Event()
        self.stream = None

    def run(self):
        while not self.soak.stopping.is_set():
            try:
                if self.rv is None:
                    items, tok = [], None
                    for _ in range(10000):
                        q = dict(self.query, limit=500)
                        if tok:
                            q["continue"] = tok
                        body = self.client.call("GET", self.path, query=q)
                        items += body.get("items") or []
                        tok = (body.get("metadata") or {}).get("continue")
                        if not tok:
                            break
                    self.on_replace(items)
                    self.rv = body["metadata"]["resourceVersion"]
                    self.synced.set()
                self.watch_once()
            except (ApiError, OSError, ValueError, RuntimeError, KeyError) as e:
                if isinstance(e, ApiError) and e.status == 410:
                    self.rv = None
                log("reflector %s: %s" % (self.name, str(e)[:200]))
                self.client.local.conn = None
                self.soak.stopping.wait(0.5)
            except Exception:
                log("reflector %s: %s" % (self.name, traceback.format_exc()))
                self.soak.stopping.wait(1.0)

    def watch_once(self):
        q = dict(self.query, resourceVersion=self.rv, allowWatchBookmarks="true",
                 timeoutSeconds="60")
        self.stream = w = self.client.watch(self.path, timeout=75.0, **q)
        try:
            if w.status == 410:
                self.rv = None
                return
            if w.status != 200:
                raise ApiError(w.status, getattr(w, "error", None), "WATCH", self.path)
            while not self.soak.stopping.is_set():
                ev = w.next(1.0)
                if ev is None:
                    if w.eof:
                        return
                    continue
                t = ev.get("type")
                if t == "ERROR":
                    if (ev.get("object") or {}).get("code") == 410:
                        self.rv = None
                    return
                if "raw" in ev or "error" in ev or t is None:
                    return
                obj = ev["object"]
                if t != "BOOKMARK":
                    self.on_event(t, obj)
                self.rv = obj["metadata"]["resourceVersion"]
        finally:
            w.close()

    def stop(self):
        if self.stream is not None:
            self.stream.close()
        self.client.close()


# ---------------------------------------------------------------------------------------------
# The proxy in front of kube-apiserver that cuts the provisioner's connections
# ---------------------------------------------------------------------------------------------

class CuttingProxy:
    """TCP forwarding from 127.0.0.1:port to the API server (TLS passes through untouched);
    cut() closes every connection at once (abruptly: RST), as a load balancer or a network
    blip does: every watch and request on them ends."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = set()
        self.closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, name="proxy", daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
                u.settimeout(None)
            except OSError:
                self._rst(c)
                continue
            with self.lock:
                self.conns.add((c, u))
                self.accepted += 1
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b, (c, u)), daemon=True).start()

    def _pump(self, src, dst, pair):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self.lock:
                if pair in self.conns:
                    self.conns.discard(pair)
                    for s in pair:
                        s.close()

    @staticmethod
    def _rst(s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        except OSError:
            pass
        s.close()

    def cut(self):
        with self.lock:
            pairs, self.conns = list(self.conns), set()
        for c, u in pairs:
            self._rst(c)
            self._rst(u)
        return len(pairs)

    def close(self):
        self.closed = True
        try:
            self.lsock.close()
        except OSError:
            pass
        self.cut()


# ---------------------------------------------------------------------------------------------
# The disks: /var/lib/hostpath-soak/{main,small}
# ---------------------------------------------------------------------------------------------

def run(args, ok=True, timeout=60):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if ok and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r


def mountpoints():
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            out.append(line.split()[4].replace("\\040", " "))
    return out


class Disks:
    """SOAK_ROOT, a shared bind mount of itself (so that a mount under it reaches the
    provisioner's container, whose hostPath mount is HostToContainer), holding `main` (a
    directory of the machine's disk) and `small` (a loop ext4 image, no reserved blocks, so
    root gets ENOSPC too). The loop device is set to detach itself once nothing uses it (a
    crash leaves no loop device behind once node.py clean unmounts SOAK_ROOT)."""

    def __init__(self, workdir, size_mib):
        self.workdir, self.size_mib = workdir, size_mib
        self.image = os.path.join(workdir, "small.img")
        self.loop = None
        self.made_root = False
        self.mounted = False
        self.filler = os.path.join(SMALL, "soak-filler")

    def setup(self):
        if os.path.lexists(SOAK_ROOT):
            raise RuntimeError("%s exists: left by an earlier soak? (unmount what is under it "
                               "and remove it, or run node.py clean on its node tier)"
                               % SOAK_ROOT)
        os.makedirs(SOAK_ROOT)
        self.made_root = True
        run(["mount", "--bind", SOAK_ROOT, SOAK_ROOT])
        run(["mount", "--make-shared", SOAK_ROOT])
        os.makedirs(MAIN)
        os.makedirs(SMALL)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mib << 20)
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", self.image])
        self.attach()
        self.mount()

    def attach(self):
        self.loop = run(["losetup", "--find", "--show", self.image]).stdout.strip()
        log("disk: %s on %s" % (self.image, self.loop))

    def loop_is_ours(self):
        if not self.loop:
            return False
        try:
            with open("/sys/block/%s/loop/backing_file" % os.path.basename(self.loop)) as f:
                return f.read().strip() == os.path.realpath(self.image)
        except OSError:
            return False

    def mount(self):
        """Mounts the small disk; the same loop device when something (a pod's mount) still
        holds its file system, so the kernel gives back that very file system (never a second
        one on the same image)."""
        if not self.loop_is_ours():
            self.attach()
        run(["mount", "-t", "ext4", self.loop, SMALL])
        # Detach by itself once unmounted and unused.
        run(["losetup", "-d", self.loop], ok=False)
        self.mounted = True

    def unmount(self, tries=40):
        for i in range(tries):
            r = run(["umount", SMALL], ok=False)
            if r.returncode == 0:
                self.mounted = False
                return True
            time.sleep(0.25)
        log("disk: umount %s kept failing (%s)" % (SMALL, r.stderr.strip()))
        return False

    def fill(self):
        with open(self.filler, "wb") as f:
            st = os.statvfs(SMALL)
            try:
                os.posix_fallocate(f.fileno(), 0, max(4096, st.f_bavail * st.f_frsize))
            except OSError:
                pass
            chunk = b"\0" * 65536
            for _ in range(100000):
                try:
                    f.write(chunk)
                    f.flush()
                except OSError:
                    break
        return os.statvfs(SMALL).f_bavail

    def free(self):
        try:
            os.unlink(self.filler)
        except OSError:
            pass

    def teardown(self):
        if not self.made_root:
            return
        for mp in sorted((m for m in mountpoints() if m == SOAK_ROOT or
                          m.startswith(SOAK_ROOT + "/")), key=lambda m: -m.count("/")):
            if run(["umount", mp], ok=False).returncode != 0:
                run(["umount", "-l", mp], ok=False)
        for mp in mountpoints():
            if mp == SOAK_ROOT:
                run(["umount", "-l", mp], ok=False)
        if self.loop_is_ours():
            run(["losetup", "-d", self.loop], ok=False)
        shutil.rmtree(SOAK_ROOT, ignore_errors=True)
        try:
            os.unlink(self.image)
        except OSError:
            pass
        self.made_root = False


# ---------------------------------------------------------------------------------------------
# Classes and claims
# ---------------------------------------------------------------------------------------------

class ClassSpec:
    """A StorageClass of the soak and what its volumes' release must leave."""

    def __init__(self, name, binding="Immediate", reclaim="Delete", on_delete=None, path=None,
                 local=False, reuse=False, pattern=None, weight=1, small=False, names=None):
        self.name, self.binding, self.reclaim = name, binding, reclaim
        self.on_delete = on_delete or "delete"
        self.small, self.local, self.reuse = small, local, reuse
        self.pattern, self.weight, self.names = pattern, weight, names
        self.root = SMALL if small else MAIN

    @property
    def wffc(self):
        return self.binding == WFFC

    @property
    def policy(self):
        """What a release does to the directory: delete, retain or archive ("retain" for a
        Retain reclaim policy: no release at all)."""
        return "retain" if self.reclaim == "Retain" else self.on_delete

    def obj(self):
        params = {"mode": "0777", "nodePath": self.root}
        if self.on_delete != "delete":
            params["onDelete"] = self.on_delete
        if self.reuse:
            params["reuseRetained"] = "true"
        if self.pattern:
            params["pathPattern"] = self.pattern
        sc = storage_class(self.name, PROV_NAME, reclaim=self.reclaim, binding=self.binding,
                           parameters=params, labels={SOAK_LABEL: "1"})
        if self.local:
            sc["metadata"]["annotations"] = {"defaultVolumeType": "local"}
        return sc


PROV_NAME = None  # the manifests' provisioner name, set in main()


def class_specs():
    return [
        ClassSpec("soak-imm-delete", weight=4),
        ClassSpec("soak-wffc-delete", binding=WFFC, weight=4),
        ClassSpec("soak-imm-retain", reclaim="Retain", weight=1),
        ClassSpec("soak-wffc-archive", binding=WFFC, on_delete="archive", weight=2),
        ClassSpec("soak-imm-reuse", on_delete="retain", reuse=True, weight=2),
        ClassSpec("soak-wffc-local", binding=WFFC, local=True, weight=2),
        ClassSpec("soak-imm-nested", pattern="{{.PVC.Namespace}}/{{.PVC.Name}}", weight=2,
                  names=6),
        ClassSpec("soak-small-host", small=True, weight=2),
        ClassSpec("soak-small-local", binding=WFFC, small=True, local=True, on_delete="archive",
                  weight=1),
    ]


class Claim:
    """One claim of the soak (a name used again is a new Claim), its pod, and what its volume
    must hold: files {name: (sha256, size)} on the node."""

    def __init__(self, seq, ns, name, cls, plan, gen=1, verify=None, reuse_of=None):
        self.seq, self.ns, self.name, self.cls, self.plan = seq, ns, name, cls, plan
        self.gen = gen                  # 2 for a claim taking a retained directory back
        self.verify = dict(verify or {})  # files the pod must find before writing (reuse)
        self.reuse_of = reuse_of        # the Claim whose directory this one should get back
        self.uid = None
        self.state = "new"
        self.next_t = 0.0
        self.created_t = None
        self.bound_t = None
        self.pv = None                  # PV name once seen bound
        self.path = None                # its directory on the node (the PV's path)
        self.pod = None
        self.pod_created_t = None
        self.pod_uid = None
        self.token = None
        self.size = 0
        self.pod_n = 0                  # pods run on this claim so far
        self.file = None                # what the current pod writes
        self.files = {}                 # name -> (sha256, size): on the node, verified
        self.wrote = False
        self.write_refused = False
        self.deleted = False            # we sent DELETE for the claim
        self.deleted_t = None
        self.deleted_while_running = False
        self.gone = False               # the claim object is gone
        self.released_t = None          # its PV seen Released or gone after the claim went
        self.outcome = None             # the release's checked outcome
        self.exit_code = None
        self.refused = False
        self.no_record = False          # made while a stale journal was later put in place
        self.reused = None              # for a gen-2 claim: True when it got the directory back
        self.last_check = 0.0

    @property
    def key(self):
        return "%s/%s" % (self.ns, self.name)

    def __repr__(self):
        return "claim %s #%d (uid %s, class %s, plan %s)" % (self.key, self.seq, self.uid,
                                                              self.cls.name, self.plan)


# ---------------------------------------------------------------------------------------------
# The soak
# ---------------------------------------------------------------------------------------------

class Soak:
    def __init__(self, o, nc):
        self.o, self.nc = o, nc
        self.rng = random.Random(o.seed)
        self.tmp = o.workdir
        self.findings = Findings()
        self.lock = threading.RLock()
        self.stopping = threading.Event()   # everything stops
        self.loading = threading.Event()    # claims are being created
        self.api = Api(nc, self.stopping)
        self.classes = {c.name: c for c in class_specs()}
        self.disks = Disks(self.tmp, o.disk_mib)
        self.proxy = None
        self.claims = []            # every Claim, in creation order
        self.by_uid = {}
        self.active = []            # Claims not finished
        self.names_busy = set()     # ns/name of claims whose object may still exist
        self.seq = 0
        self.pvs = {}               # name -> summary
        self.pv_uids = {}           # name -> set of uids seen
        self.pvcs = {}              # uid -> summary
        self.pods = {}              # ns/name -> summary
        self.hand_deleted_pvs = set()
        self.faults = {k: 0 for k in (
            "kill9", "delete_pod", "rollout", "apiserver", "etcd", "kubelet", "kcm",
            "scheduler", "cuts", "disk_full", "unmount", "stale_journal")}
        self.fault_windows = []     # (kind, start monotonic, end monotonic)
        self.fault_active = {}      # kind -> start monotonic
        self.kills_by_pod = {}      # provisioner pod uid -> kill -9s we did
        self.prov = {}              # provisioner pod uid -> state (Monitor)
        self.unmounted_unknown = False  # the small disk is unmounted and never held a volume
        self.prov_log_offsets = {}
        self.prov_exits = {}        # provisioner pod uid -> (exit code, reason, finishedAt)
        self.rss_peak = 0
        self.rss_samples = []       # (t, kB)
        self.stopped_pods = {}      # pod uid -> expected graceful stop (name)
        self.stale = None           # {"copy_t", "restore_t", "copy_dir"}
        self.apiserver_restarts = []  # (from, until) epoch seconds: kube-apiserver restarting
        self.expected_unrecorded = set()   # absolute directories a stale journal forgot
        self.latencies = []         # claim created (or pod) -> Bound
        self.pod_runs = []          # claim created -> payload written
        self.suspects = {}
        self.internal_error = False
        self.threads = []
        self.t0 = None
        self.counts = {"written": 0, "write_refused": 0, "verified_bytes": 0,
                       "deleted_running": 0, "reused": 0, "kept": 0, "refused": 0,
                       "no_record_kept": 0, "pods": 0}

    # -- helpers ---------------------------------------------------------------------------

    def kubectl(self, *args, ok=True, timeout=120):
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        env = dict(os.environ, KUBECONFIG=self.nc.kubeconfig, HOME=home,
                   KUBECACHEDIR=os.path.join(self.tmp, "kcache"))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        last = None
        for _ in range(20):
            r = subprocess.run([self.nc.kubectl] + list(args), capture_output=True, text=True,
                               env=env, timeout=timeout)
            if r.returncode == 0 or not ok:
                return r
            last = r
            # The control plane may be restarting: try again, bounded.
            if not re.search(r"connection refused|EOF|timeout|unavailable|ServiceUnavailable|"
                             r"TLS handshake|etcdserver|the server is currently unable|"
                             r"reset by peer", r.stderr + r.stdout):
                break
            time.sleep(2)
        raise RuntimeError("kubectl %s failed (%d): %s%s" % (" ".join(args), last.returncode,
                                                           last.stdout, last.stderr))

    def fault_recent(self, kinds, slack):
        t = now()
        for k in kinds:
            if k in self.fault_active:
                return True
        return any(k in kinds and s - 1 <= t <= e + slack for k, s, e in self.fault_windows)

    def fault_begin(self, kind):
        self.fault_active[kind] = now()
        log("fault: %s begins" % kind)

    def fault_end(self, kind):
        s = self.fault_active.pop(kind, now())
        self.fault_windows.append((kind, s, now()))
        log("fault: %s ends (%.1fs)" % (kind, now() - s))

    def spawn(self, fn, *args, name=None):
        th = threading.Thread(target=self.guard, args=(fn,) + args, daemon=True,
                              name=name or fn.__name__)
        th.start()
        self.threads.append(th)
        return th

    def guard(self, fn, *args):
        try:
            fn(*args)
        except Exception:
            say("soak: thread %s failed:\n%s" % (fn.__name__, traceback.format_exc()))
            self.internal_error = True

    # -- set-up ----------------------------------------------------------------------------

    def overlay(self, metrics_port):
        """manifests/install.yaml through nodeharness's sandbox patch (the API server address
        is the cutting proxy's), plus the soak's patch: the --config ConfigMap (two volume
        paths under SOAK_ROOT), SOAK_ROOT mounted like the manifests' own hostPath, --v=2."""
        import nodeharness
        d = os.path.join(self.tmp, "overlay")
        os.makedirs(d, exist_ok=True)
        shutil.copy(os.path.join(nodeharness.MANIFESTS, "install.yaml"), d)
        cfg = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                "paths": [MAIN, SMALL]}]}
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "hostpath-soak-config", "namespace": PROV_NS},
              "data": {"config.json": json.dumps(cfg, indent=1)}}
        with open(os.path.join(d, "soak-config.yaml"), "w") as f:
            json.dump(cm, f, indent=1)
        sp = nodeharness.sandbox_patch("Deployment", DEPLOY, self.proxy.port, metrics_port)
        c = "/spec/template/spec/containers/0"
        soak_patch = [
            {"op": "test", "path": c + "/args/1", "value": "--pv-dir=/var/lib/hostpath-provisioner"},
            {"op": "add", "path": c + "/args/-", "value": "--config=/etc/hostpath-soak/config.json"},
            {"op": "add", "path": c + "/args/-", "value": "--v=2"},
            {"op": "add", "path": c + "/volumeMounts/-",
             "value": {"name": "soak-disks", "mountPath": SOAK_ROOT,
                       "mountPropagation": "HostToContainer"}},
            {"op": "add", "path": c + "/volumeMounts/-",
             "value": {"name": "soak-config", "mountPath": "/etc/hostpath-soak",
                       "readOnly": True}},
            {"op": "add", "path": "/spec/template/spec/volumes/-",
             "value": {"name": "soak-disks", "hostPath": {"path": SOAK_ROOT,
                                                          "type": "Directory"}}},
            {"op": "add", "path": "/spec/template/spec/volumes/-",
             "value": {"name": "soak-config", "configMap": {"name": "hostpath-soak-config"}}},
        ]
        k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
             "resources": ["install.yaml", "soak-config.yaml"],
             "patches": [{"target": sp["target"], "patch": json.dumps(sp["patch"])},
                         {"target": sp["target"], "patch": json.dumps(soak_patch)}]}
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            json.dump(k, f, indent=1)
        return d

    def setup(self):
        o = self.o
        self.csidriver_existed = self.api.exists(CSIDRIVER_PATH % PROV_NAME)
        self.disks.setup()
        self.proxy = CuttingProxy(self.nc.api_port)
        from cluster import free_port
        self.metrics_port = free_port()
        self.overlay_dir = self.overlay(self.metrics_port)
        def ns_terminating():
            ns = self._get(NS_PATH % PROV_NS)
            return ns is not None and ns["metadata"].get("deletionTimestamp")
        if ns_terminating():
            # An earlier test of the node suite uninstalled it: its namespace is going.
            self.wait(lambda: not self.api.exists(NS_PATH % PROV_NS), 300,
                      "namespace %s deleted (by an earlier test)" % PROV_NS)
        if self.api.exists(NS_PATH % PROV_NS):
            raise RuntimeError("namespace %s exists: the provisioner is installed already "
                               "(by another test?)" % PROV_NS)
        self.kubectl("apply", "-k", self.overlay_dir)
        for c in self.classes.values():
            try:
                self.api.call("DELETE", SC_PATH % c.name, ok=(404,))
            except ApiError:
                pass
            self.api.call("POST", SCS_PATH, c.obj())
        for ns in NAMESPACES:
            self.api.call("POST", "/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {SOAK_LABEL: "1"}}}, ok=(409,))
        for ns in NAMESPACES:
            self.wait(lambda: self.api.exists("/api/v1/namespaces/%s/serviceaccounts/default"
                                              % ns), 60, "ServiceAccount %s/default" % ns)
        self.pv_ref = Reflector(self, PVS_PATH, {}, self.on_pv_event, self.on_pv_replace,
                                "pvs")
        self.pvc_ref = Reflector(self, ALL_PVCS_PATH, {"labelSelector": SOAK_LABEL},
                                 self.on_pvc_event, self.on_pvc_replace, "pvcs")
        self.pod_ref = Reflector(self, "/api/v1/pods", {"labelSelector": SOAK_LABEL},
                                 self.on_pod_event, self.on_pod_replace, "pods")
        # The provisioner's pods: how each container ended (a graceful stop exits 0; its last
        # log lines may go with the pod before they are copied).
        self.prov_ref = Reflector(self, PODS_PATH % PROV_NS, {"labelSelector": PROV_LABEL},
                                  self.on_prov_event, self.on_prov_replace, "provpods")
        for r in (self.pv_ref, self.pvc_ref, self.pod_ref, self.prov_ref):
            r.start()
            r.synced.wait(60)
        self.spawn(self.monitor)
        self.wait_provisioner_ready(120)
        say("soak: provisioner running from %s (pod %s), volume paths %s and %s (loop ext4, "
            "%d MiB)" % (self.prov_image, self.ready_pod, MAIN, SMALL, o.disk_mib))

    def wait(self, pred, timeout, what, interval=0.5):
        end = now() + timeout
        last = None
        while now() < end:
            try:
                v = pred()
                if v:
                    return v
            except (ApiError, OSError, RuntimeError) as e:
                last = e
            if self.stopping.is_set():
                break
            time.sleep(interval)
        raise TimeoutError("timed out after %ds waiting for %s%s" % (
            timeout, what, " (last error: %s)" % last if last else ""))

    def provisioner_pods(self):
        return self.api.call("GET", PODS_PATH % PROV_NS, query={"labelSelector": PROV_LABEL},
                             deadline=30)["items"]

    def ready_provisioner(self, exclude=()):
        for p in self.provisioner_pods():
            if p["metadata"]["uid"] in exclude or p["metadata"].get("deletionTimestamp"):
                continue
            conds = {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions")
                     or []}
            if conds.get("Ready") == "True":
                return p
        return None

    def wait_provisioner_ready(self, timeout, exclude=()):
        p = self.wait(lambda: self.ready_provisioner(exclude), timeout,
                      "the provisioner pod Ready")
        self.ready_pod = p["metadata"]["name"]
        self.prov_image = p["spec"]["containers"][0]["image"]
        return p

    # -- watch handlers (reflector threads) -------------------------------------------------

    def _pv_summary(self, obj):
        m, spec = obj["metadata"], obj.get("spec") or {}
        cr = spec.get("claimRef") or {}
        ann = m.get("annotations") or {}
        path = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
        return {"uid": m["uid"], "claim_uid": cr.get("uid"), "path": path,
                "local": bool(spec.get("local")), "class": spec.get("storageClassName"),
                "phase": (obj.get("status") or {}).get("phase"),
                "reclaim": spec.get("persistentVolumeReclaimPolicy"),
                "on_delete": ann.get(ANN_ON_DELETE),
                "deleting": bool(m.get("deletionTimestamp")), "seen_t": now()}

    def _ours(self, s):
        return s["class"] in self.classes

    def _pv_added(self, name, s):
        uids = self.pv_uids.setdefault(name, set())
        if s["uid"] not in uids:
            uids.add(s["uid"])
            if len(uids) > 1:
                self.findings.add("duplicated", "pv:" + name, "PV %s was created %d times "
                                  "(uids %s)" % (name, len(uids), sorted(uids)))
        c = self.by_uid.get(s["claim_uid"])
        if c is not None and s["phase"] in ("Bound", "Released", "Available"):
            if c.pv is None:
                c.pv = name
            if c.path is None and s["path"]:
                c.path = s["path"]
                if self.stale and self.stale.get("copy_t") and \
                        not self.stale.get("restore_t") and c.cls.root in self.stale["dirs"]:
                    c.no_record = True   # made after the copy: no record once it is back
            if name != "pvc-" + c.uid:
                self.findings.add("duplicated", "pvname:" + name,
                                  "PV %s names %s but is not pvc-<uid>" % (name, c))

    def _pv_removed(self, name, s):
        c = self.by_uid.get(s["claim_uid"])
        if c is not None and not c.deleted:
            self.findings.add("wrong deletions", "pvdel:" + name,
                              "PV %s of live %s was deleted" % (name, c))
        if s["reclaim"] == "Retain" and name not in self.hand_deleted_pvs:
            self.findings.add("wrong deletions", "pvdel:" + name,
                              "PV %s (reclaim Retain, %s) was deleted" % (name, c))

    def on_pv_event(self, typ, obj):
        name = obj["metadata"]["name"]
        s = self._pv_summary(obj)
        if not self._ours(s):
            return
        with self.lock:
            if typ == "DELETED":
                self.pvs.pop(name, None)
                self._pv_removed(name, s)
            else:
                self.pvs[name] = s
                self._pv_added(name, s)

    def on_pv_replace(self, items):
        with self.lock:
            new = {}
            for o in items:
                s = self._pv_summary(o)
                if self._ours(s):
                    new[o["metadata"]["name"]] = s
            for name, s in list(self.pvs.items()):
                if name not in new or new[name]["uid"] != s["uid"]:
                    self._pv_removed(name, s)
            self.pvs = new
            for name, s in new.items():
                self._pv_added(name, s)

    def _pvc_summary(self, obj):
        m, spec = obj["metadata"], obj.get("spec") or {}
        return {"uid": m["uid"], "key": "%s/%s" % (m["namespace"], m["name"]),
                "phase": (obj.get("status") or {}).get("phase"),
                "volume": spec.get("volumeName"),
                "deleting": bool(m.get("deletionTimestamp"))}

    def _pvc_gone(self, uid):
        c = self.by_uid.get(uid)
        if c is None:
            return
        if not c.deleted:
            self.findings.add("lost", "claimgone:" + uid, "%s disappeared while live" % c)
        c.gone = True

    def on_pvc_event(self, typ, obj):
        s = self._pvc_summary(obj)
        with self.lock:
            if typ == "DELETED":
                self.pvcs.pop(s["uid"], None)
                self._pvc_gone(s["uid"])
            else:
                self.pvcs[s["uid"]] = s

    def on_pvc_replace(self, items):
        with self.lock:
            new = {}
            for o in items:
                s = self._pvc_summary(o)
                new[s["uid"]] = s
            for uid in list(self.pvcs):
                if uid not in new:
                    self._pvc_gone(uid)
            self.pvcs = new

    def _pod_summary(self, obj):
        m, st = obj["metadata"], obj.get("status") or {}
        code = None
        for cs in st.get("containerStatuses") or []:
            t = (cs.get("state") or {}).get("terminated")
            if t:
                code = t.get("exitCode")
        return {"uid": m["uid"], "phase": st.get("phase"), "exit": code,
                "node": (obj.get("spec") or {}).get("nodeName"),
                "deleting": bool(m.get("deletionTimestamp"))}

    def on_pod_event(self, typ, obj):
        key = "%s/%s" % (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            if typ == "DELETED":
                cur = self.pods.get(key)
                if cur and cur["uid"] == obj["metadata"]["uid"]:
                    del self.pods[key]
            else:
                self.pods[key] = self._pod_summary(obj)

    def on_pod_replace(self, items):
        with self.lock:
            self.pods = {"%s/%s" % (o["metadata"]["namespace"], o["metadata"]["name"]):
                         self._pod_summary(o) for o in items}

    # -- the workload ------------------------------------------------------------------------

    def pick_class(self):
        cs = list(self.classes.values())
        return self.rng.choices(cs, weights=[c.weight for c in cs])[0]

    def new_claim(self):
        """The next claim to create: its class, plan and name."""
        cls = self.pick_class()
        ns = self.rng.choice(NAMESPACES)
        r = self.rng.random()
        if r < self.o.keep_fraction:
            plan = "keep"
        elif r < self.o.keep_fraction + self.o.running_delete_fraction:
            plan = "delete-running"
        else:
            plan = "normal"
        if cls.reuse and plan == "normal" and self.rng.random() < 0.7:
            plan = "reuse"
        elif plan == "normal" and self.rng.random() < self.o.reread_fraction:
            plan = "reread"
        with self.lock:
            if cls.names:
                free = ["%s-%d" % (cls.name.replace("soak-", ""), i) for i in range(cls.names)]
                free = [n for n in free if "%s/%s" % (ns, n) not in self.names_busy]
                if not free:
                    return None
                name = self.rng.choice(free)
            else:
                name = "c-%d" % (self.seq + 1)
            self.seq += 1
            c = Claim(self.seq, ns, name, cls, plan)
            self.names_busy.add(c.key)
        return c

    def active_pods(self):
        return sum(1 for c in self.active if c.state in ("new", "binding", "running",
                                                         "pod_deleting"))

    def driver(self):
        """Creates claims (at most --max-active with a pod at once, at the planned rate) and
        moves every claim through its life."""
        o = self.o
        for _ in range(10 ** 8):
            if self.stopping.is_set():
                return
            t = now()
            if self.loading.is_set():
                with self.lock:
                    due = (t - self.t0) * o.claims / o.duration - len(self.claims)
                    room = o.max_active - self.active_pods()
                if len(self.claims) >= o.claims:
                    self.loading.clear()
                elif due > 0 and room > 0:
                    c = self.new_claim()
                    if c is not None:
                        with self.lock:
                            self.claims.append(c)
                            self.active.append(c)
            for c in list(self.active):
                if self.stopping.is_set():
                    return
                if c.next_t > now():
                    continue
                try:
                    self.step(c)
                except (RuntimeError, ApiError, OSError) as e:
                    log("step %s (%s): %s" % (c, c.state, str(e)[:300]))
                    c.next_t = now() + 2.0
            with self.lock:
                self.active = [c for c in self.active if c.state not in ("done", "refused")]
            time.sleep(0.2)

    def step(self, c):
        getattr(self, "step_" + c.state.replace("-", "_"))(c)

    def step_new(self, c):
        labels = {SOAK_LABEL: "1", "seq": str(c.seq)}
        size = "1Mi" if c.cls.small else "16Mi"
        try:
            got = self.api.call("POST", PVCS_PATH % c.ns, claim(c.ns, c.name, c.cls.name,
                                                                 size=size, labels=labels),
                                ok=(409,), deadline=20)
        except ApiError:
            # The name is still taken (the claim of the last generation is going): later.
            cur = self._get(PVC_PATH % (c.ns, c.name))
            if cur is not None and (cur["metadata"].get("labels") or {}).get("seq") == \
                    str(c.seq):
                got = cur  # ours: a restart cut the create's answer
            else:
                c.next_t = now() + 1.0
                return
        with self.lock:
            c.uid = got["metadata"]["uid"]
            self.by_uid[c.uid] = c
            c.created_t = now()
            s = self.pvcs.get(c.uid)
        if c.cls.wffc:
            self.create_pod(c)
            c.state = "running"
        else:
            c.state = "binding"

    def _get(self, path):
        try:
            return self.api.call("GET", path, ok=(404,), deadline=20)
        except ApiError:
            return None

    def bound_pv(self, c):
        with self.lock:
            s = self.pvcs.get(c.uid)
            if not s or s["phase"] != "Bound" or not s["volume"]:
                return None
            pv = self.pvs.get(s["volume"])
            if pv is None or not pv["path"]:
                return None
            c.pv, c.path = s["volume"], pv["path"]
            if c.bound_t is None:
                c.bound_t = now()
                self.latencies.append((c.bound_t, c.bound_t - (c.pod_created_t if c.cls.wffc
                                                               else c.created_t)))
            return pv

    def step_binding(self, c):
        if self.bound_pv(c) is None:
            c.next_t = now() + 0.5
            return
        if c.reuse_of is not None:
            c.reused = c.path == c.reuse_of.path
            if c.reused:
                c.verify = dict(c.reuse_of.files)
                c.files.update(c.reuse_of.files)
                self.counts["reused"] += 1
            else:
                self.reuse_missed(c)
        if c.cls.small and self.small_faulted():
            # The kubelet would make the directory (hostPath DirectoryOrCreate) on the empty
            # mount point: the kubelet's doing, not the provisioner's. Started once it is back.
            c.next_t = now() + 1.0
            return
        self.create_pod(c)
        c.state = "running"

    def reuse_missed(self, c):
        """A claim of a reuseRetained class that did not get its retained directory back (a
        new one instead): the data is not lost (it stays retained) but the promise is broken,
        unless a stale journal forgot the directory was retained."""
        o = c.reuse_of
        if o.no_record or self.stale_overlaps(o):
            log("reuse: %s got %s, not %s (stale journal window)" % (c, c.path, o.path))
            return
        self.findings.add("lost", "reuse:" + c.uid, "%s got a new directory %s instead of the "
                          "retained %s of %s (reuseRetained)" % (c, c.path, o.path, o))

    def stale_overlaps(self, c):
        st = self.stale
        return bool(st and st.get("copy_t") and (c.deleted_t or now()) >= st["copy_t"] and
                    (c.created_t or 0) <= (st.get("restore_t") or now()))

    def create_pod(self, c):
        import nodeharness
        c.pod_n += 1
        c.pod = "p-%s-%d-%d" % (c.name, c.seq, c.pod_n)
        c.file = "payload-%d-%d" % (c.gen, c.pod_n)
        c.token = "%s-%d-%d-%d" % (c.name, c.seq, c.gen, c.pod_n)
        c.size = self.rng.randint(self.o.min_size, self.o.max_size)
        c.wrote = False
        rounds = self.o.rounds * (3 if c.plan == "delete-running" else 1)
        data = payload(c.token, c.size)
        sha = hashlib.sha256(data).hexdigest()
        c.files[c.file] = (sha, c.size)
        p = nodeharness.pod_spec(c.pod, c.ns, [c.name], POD_SCRIPT, uid=1000)
        p["metadata"]["labels"] = {SOAK_LABEL: "1", "seq": str(c.seq)}
        p["spec"]["terminationGracePeriodSeconds"] = 2
        env = {"TOKEN": c.token, "SIZE": str(c.size), "FILE": c.file, "SHA": sha,
               "ROUNDS": str(rounds), "PAUSE": str(self.o.pause),
               "VERIFY": " ".join("%s=%s" % (n, v[0]) for n, v in sorted(c.verify.items()))}
        p["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
        try:
            got = self.api.call("POST", PODS_PATH % c.ns, p, ok=(409,), deadline=30)
        except ApiError:
            got = self._get(POD_PATH % (c.ns, c.pod))
            if got is None or (got["metadata"].get("labels") or {}).get("seq") != str(c.seq):
                raise RuntimeError("pod %s/%s exists and is not ours" % (c.ns, c.pod))
        c.pod_uid = got["metadata"]["uid"]
        c.pod_created_t = now()
        self.counts["pods"] += 1

    def node_file(self, c, name):
        return os.path.join(c.path, name)

    def check_written(self, c):
        """The pod's file on the node, once it is there (renamed into place whole)."""
        if c.wrote or not c.path:
            return
        p = self.node_file(c, c.file)
        if not os.path.exists(p):
            return
        sha, size = c.files[c.file]
        got = sha256_file(p)
        c.wrote = True
        self.pod_runs.append(now() - c.created_t)
        self.counts["written"] += 1
        if got != sha:
            self.findings.add("bytes lost", "written:" + c.uid, "%s: %s on the node does not "
                              "hold what the pod wrote (sha256 %s, want %s)"
                              % (c, p, got, sha), nbytes=size)

    def step_running(self, c):
        if c.path is None:
            self.bound_pv(c)
        self.check_written(c)
        with self.lock:
            pod = self.pods.get("%s/%s" % (c.ns, c.pod))
        if pod is None or pod["uid"] != c.pod_uid:
            c.next_t = now() + 0.5
            return
        if c.plan == "delete-running" and c.wrote and not c.deleted and \
                pod["phase"] == "Running":
            self.delete_claim(c)
            c.deleted_while_running = True
            self.counts["deleted_running"] += 1
        if pod["phase"] not in ("Succeeded", "Failed"):
            c.next_t = now() + 0.5
            return
        if c.cls.small and self.small_faulted():
            c.next_t = now() + 1.0  # the host sees the empty mount point: judged once it is back
            return
        self.check_written(c)
        c.exit_code = pod["exit"]
        if not c.wrote:
            c.files.pop(c.file, None)
        if c.exit_code == EXIT_OK and not c.wrote:
            self.findings.add("bytes lost", "nofile:" + c.uid, "%s: the pod wrote and read "
                              "back %s, which is not in %s on the node"
                              % (c, c.file, c.path), nbytes=c.size)
        elif c.exit_code == EXIT_MISMATCH:
            self.findings.add("bytes lost", "mismatch:" + c.uid, "%s: its pod read back other "
                              "bytes than it wrote (or than the last pod wrote): %s"
                              % (c, self.pod_log(c)[-600:]), nbytes=c.size)
        elif c.exit_code == EXIT_WRITEFAIL:
            c.write_refused = True
            self.counts["write_refused"] += 1
            if not (c.cls.small and self.fault_recent(("disk_full",), 30)):
                self.findings.add("crashes", "writefail:" + c.uid, "%s: its pod could not "
                                  "write (no disk fault explains it): %s"
                                  % (c, self.pod_log(c)[-600:]))
        elif c.exit_code != EXIT_OK:
            self.findings.add("crashes", "pod:" + c.uid, "%s: its pod ended %s with exit %s: %s"
                              % (c, pod["phase"], c.exit_code, self.pod_log(c)[-600:]))
        self.delete_pod(c)
        c.state = "pod_deleting"

    def pod_log(self, c):
        try:
            r = self.api.client.request("GET", POD_PATH % (c.ns, c.pod) + "/log", timeout=10)
            return r.raw.decode(errors="replace")
        except OSError as e:
            return "(log: %s)" % e

    def delete_pod(self, c):
        try:
            self.api.call("DELETE", POD_PATH % (c.ns, c.pod), ok=(404,), deadline=30)
        except ApiError:
            pass

    def delete_claim(self, c):
        # Marked first: the watches may see the claim go before this call returns, and a
        # DELETE that timed out may still have been carried out.
        c.deleted = True
        c.deleted_t = now()
        try:
            self.api.call("DELETE", PVC_PATH % (c.ns, c.name), ok=(404,), deadline=30)
        except (ApiError, RuntimeError):
            pass

    def step_pod_deleting(self, c):
        with self.lock:
            pod = self.pods.get("%s/%s" % (c.ns, c.pod))
        if pod is not None and pod["uid"] == c.pod_uid:
            c.next_t = now() + 0.5
            return
        if c.plan == "reread" and c.pod_n == 1 and c.wrote and not self.finishing:
            if c.cls.small and self.small_faulted():
                c.next_t = now() + 1.0  # as in step_binding
                return
            # A second pod on the volume: it must find the first one's file, then writes its
            # own.
            c.verify = dict(c.files)
            self.create_pod(c)
            c.state = "running"
            return
        if c.plan == "keep" and not self.finishing:
            c.state = "kept"
            self.counts["kept"] += 1
            return
        if not c.deleted:
            self.delete_claim(c)
        c.state = "releasing"

    def step_kept(self, c):
        if self.finishing:
            self.delete_claim(c)
            c.state = "releasing"
        else:
            c.next_t = now() + 1.0

    finishing = False

    def step_releasing(self, c):
        """The claim is deleted; once it is gone, its volume must end as its policy says."""
        if not c.gone:
            with self.lock:
                present = c.uid in self.pvcs
            if present or self.api.exists(PVC_PATH % (c.ns, c.name)) and \
                    (self._get(PVC_PATH % (c.ns, c.name)) or {}).get(
                        "metadata", {}).get("uid") == c.uid:
                c.next_t = now() + 0.5
                return
            c.gone = True
        with self.lock:
            self.names_busy.discard(c.key)
            pv = self.pvs.get(c.pv) if c.pv else None
        if c.pv is None:          # never bound: nothing was made
            c.state = "done"
            c.outcome = "never bound"
            return
        out = self.release_outcome(c, pv)
        if out is None:
            c.next_t = now() + 1.0
            return
        c.outcome = out
        c.released_t = now()
        log("released %s: %s" % (c, out))
        if c.plan == "reuse" and c.gen == 1 and out == "retained" and c.files and \
                not self.finishing and self.loading.is_set():
            n = Claim(self.seq + 1, c.ns, c.name, c.cls, "normal", gen=2, reuse_of=c)
            with self.lock:
                self.seq += 1
                n.next_t = now() + self.rng.uniform(1.0, 5.0)
                self.names_busy.add(n.key)
                self.claims.append(n)
                self.active.append(n)
        c.state = "done"

    def release_outcome(self, c, pv):
        """What became of a gone claim's volume, once it is final: None while the release is
        still to come."""
        if c.cls.small and self.small_faulted():
            return None  # the host sees the empty mount point: judged once it is back
        pol = c.cls.policy
        if c.gen == 2 and c.reused and c.cls.on_delete == "retain":
            pol = "retain"
        if c.cls.reclaim == "Retain":
            if pv is None:
                return "PV gone"  # _pv_removed reports it
            if pv["phase"] != "Released":
                return None
            self.check_files(c, c.path, "in the Released PV's directory (reclaim Retain)")
            return "kept Released"
        if pv is not None:
            if pv["phase"] == "Released" and self.unrecorded(c, 20):
                # Made after the stale copy: no record names it, so it is never removed.
                self.check_files(c, c.path, "kept without a record (stale journal)")
                self.counts["no_record_kept"] += 1
                return "kept without record"
            return None
        if pol == "delete":
            if os.path.lexists(c.path):
                return None   # the directory goes right after the PV; the auditor judges
            return "deleted"
        if pol == "retain":
            self.check_files(c, c.path, "in the retained directory")
            return "retained"
        # archive
        if os.path.lexists(c.path):
            if self.unrecorded(c, 20):
                self.check_files(c, c.path, "kept without a record (stale journal)")
                return "kept without record"
            return None
        arch = self.archived_path(c)
        if arch is None:
            self.findings.add("wrong deletions", "archive:" + c.uid, "%s: its directory %s is "
                              "gone and no archived-* directory holds it" % (c, c.path),
                              nbytes=sum(v[1] for v in c.files.values()))
            return "archive missing"
        self.check_files(c, arch, "in the archived directory")
        c.archived_as = arch
        return "archived"

    def unrecorded(self, c, secs):
        """c's volume was made after the stale copy, the stale journal is in place (for `secs`
        seconds, and c deleted as long), and no record names it: the provisioner must keep it
        (it deletes nothing it has no record of)."""
        st = self.stale
        if not (c.no_record and st and st.get("restore_t")):
            return False
        if now() - max(st["restore_t"], c.deleted_t or now()) < secs:
            return False
        return c.pv not in journal_records(c.cls.root)

    def archived_path(self, c):
        root = c.cls.root
        for pv, r in journal_records(root).items():
            if pv == c.pv and r.get("archivedAs"):
                return os.path.join(root, r["archivedAs"])
        parent, base = os.path.split(c.path)
        try:
            for n in os.listdir(parent):
                if n.startswith("archived-") and base[:40] in n:
                    return os.path.join(parent, n)
        except OSError:
            pass
        return None

    def check_files(self, c, d, when):
        """Every file c's pods wrote is in d with its content."""
        ok = True
        for name, (sha, size) in c.files.items():
            p = os.path.join(d, name)
            try:
                got = sha256_file(p)
            except OSError as e:
                got = "(%s)" % e.strerror
            if got != sha:
                ok = False
                self.findings.add("bytes lost", "file:%s:%s" % (c.uid, name),
                                  "%s: %s %s is %s, the pod wrote sha256 %s"
                                  % (c, p, when, got, sha), nbytes=size)
            else:
                self.counts["verified_bytes"] += size
        return ok

    # -- continuous checks --------------------------------------------------------------------

    def sampler(self):
        """Every 2 s: the directory of every claim whose volume must still hold its data is
        there with its files (their size; their checksum once every ~20 s per claim); a claim
        deleted while its pod runs keeps its PV Bound until the pod is gone."""
        for _ in range(10 ** 7):
            if self.stopping.wait(2.0):
                return
            with self.lock:
                todo = [c for c in self.active if c.path and c.files and c.state in
                        ("running", "pod_deleting", "kept", "releasing") and not c.gone]
            for c in todo:
                if self.stopping.is_set():
                    return
                self.sample(c)

    def small_faulted(self):
        return self.fault_recent(("unmount",), 5)

    def sample(self, c):
        with self.lock:
            pv = self.pvs.get(c.pv) if c.pv else None
            pod = self.pods.get("%s/%s" % (c.ns, c.pod)) if c.pod else None
        if c.cls.small and self.small_faulted():
            return  # the host sees the empty mount point; pods still see their disk
        if pv is None or pv["phase"] != "Bound":
            if c.deleted_while_running and pod is not None and pod["uid"] == c.pod_uid and \
                    pod["phase"] == "Running" and pv is not None and \
                    self.released_under_running_pod(c):
                self.findings.add("wrong deletions", "protect:" + c.uid, "%s: deleted while "
                                  "its pod runs, its PV is %s before the pod ended (claim "
                                  "protection)" % (c, pv["phase"]))
            return    # released (or not yet seen bound): the release checks take over
        if not os.path.isdir(c.path):
            if self.still_must_exist(c):
                self.findings.add("wrong deletions", "dir:" + c.uid, "%s: directory %s of its "
                                  "Bound PV %s is missing" % (c, c.path, c.pv),
                                  nbytes=sum(v[1] for v in c.files.values()))
            return
        full = now() - c.last_check > 20
        for name, (sha, size) in list(c.files.items()):
            if name == c.file and not c.wrote:
                continue
            p = os.path.join(c.path, name)
            try:
                st = os.stat(p)
                bad = st.st_size != size or (full and sha256_file(p) != sha)
            except OSError:
                bad = True
            if bad and self.still_must_exist(c):
                self.findings.add("bytes lost", "file:%s:%s" % (c.uid, name), "%s: %s on the "
                                  "node lost what the pod wrote (Bound PV %s)" % (c, p, c.pv),
                                  nbytes=size)
        if full:
            c.last_check = now()

    def released_under_running_pod(self, c):
        """Checked again from fresh objects (the watches of PVs and pods lag each other after
        a control-plane restart): the PV first, then the pod, which cannot still be running
        if the claim was rightly let go before the PV was released."""
        try:
            pv = self.api.call("GET", PV_PATH % c.pv, ok=(404,), deadline=10)
            pod = self.api.call("GET", POD_PATH % (c.ns, c.pod), ok=(404,), deadline=10)
        except (ApiError, RuntimeError):
            return False
        return (pv.get("status") or {}).get("phase") not in (None, "Bound", "Pending") and \
            pod["metadata"].get("uid") == c.pod_uid and \
            (pod.get("status") or {}).get("phase") == "Running"

    def still_must_exist(self, c):
        """Checked again from fresh objects: a Bound PV of ours, not being deleted."""
        try:
            pv = self.api.call("GET", PV_PATH % c.pv, ok=(404,), deadline=10)
        except (ApiError, RuntimeError):
            return False
        return (pv.get("status") or {}).get("phase") == "Bound" and \
            not pv["metadata"].get("deletionTimestamp")

    def audit(self, final=False):
        """Directories vs PVs vs journal records, per volume path: [(kind, key, message)]."""
        with self.lock:
            pvs = dict(self.pvs)
        problems = []
        by_path = {}
        for name, s in pvs.items():
            if s["path"]:
                by_path.setdefault(s["path"], []).append(name)
        for path, names in by_path.items():
            if len(names) > 1:
                problems.append(("duplicated", "path:" + path, "PVs %s share the directory %s"
                                 % (sorted(names), path)))
        for root in ROOTS:
            if root == SMALL and (not self.disks.mounted or self.small_faulted()):
                continue
            recs = journal_records(root)
            accounted, parents, rec_paths = set(), set(), {}
            for pv, r in recs.items():
                st, p = r.get("state"), r.get("path")
                if p:
                    rec_paths.setdefault(p, []).append(pv)
                    if st != "archived":
                        accounted.add(p)
                if r.get("archivedAs"):
                    accounted.add(r["archivedAs"])
                for par in r.get("parent") or []:
                    parents.add(par)
                if st in ("created", "retained") and p and \
                        not os.path.isdir(os.path.join(root, p)):
                    problems.append(("wrong deletions", "recdir:%s:%s" % (root, pv),
                                     "record %s (%s) under %s: directory %s is missing"
                                     % (pv, st, root, p)))
                if st == "archived" and r.get("archivedAs") == p and self.stale_forgot(pv):
                    # The stale journal said "created" for a directory archived since (it is in
                    # archived-..., which no record names): the provisioner found nothing left
                    # to archive under the recorded name and says so (archivedAs = path).
                    pass
                elif st == "archived" and not os.path.isdir(os.path.join(
                        root, r.get("archivedAs", ""))):
                    problems.append(("wrong deletions", "recdir:%s:%s" % (root, pv),
                                     "record %s archived as %s under %s: missing"
                                     % (pv, r.get("archivedAs"), root)))
                if final:
                    if st in ("creating", "deleting"):
                        problems.append(("orphans", "rec:" + pv, "record %s under %s is still "
                                         "%s after settle" % (pv, root, st)))
                    elif st == "created" and pv not in pvs and not self.stale_forgot(pv) \
                            and pv not in self.hand_deleted_pvs:
                        # (A Retain PV deleted by hand keeps its "created" record until the
                        # provisioner's next sweep, at its resync, records it retained.)
                        problems.append(("orphans", "rec:" + pv, "record %s under %s is "
                                         "'created' but the PV is gone" % (pv, root)))
            for p, names in rec_paths.items():
                live = [n for n in names if recs[n].get("state") != "archived"]
                if len(live) > 1 and not all(self.stale_forgot(n) for n in live[1:]):
                    problems.append(("duplicated", "recpath:%s:%s" % (root, p),
                                     "records %s all own %s under %s" % (sorted(live), p,
                                                                          root)))
            try:
                for f in os.listdir(os.path.join(root, JOURNAL_DIR, "parents")):
                    parents.add(read_text(os.path.join(root, JOURNAL_DIR, "parents", f))
                                .strip())
            except OSError:
                pass
            for name, s in pvs.items():
                if s["path"] and s["path"].startswith(root + "/"):
                    rel = os.path.relpath(s["path"], root)
                    accounted.add(rel)
                    if not os.path.isdir(s["path"]) and s["phase"] in ("Bound", "Released"):
                        problems.append(("lost", "pvdir:" + name, "PV %s (%s) has no "
                                         "directory %s" % (name, s["phase"], s["path"])))
            ancestors = set()
            for p in accounted | parents:
                parts = p.split("/")
                for i in range(1, len(parts)):
                    ancestors.add("/".join(parts[:i]))
            for rel in walk_dirs(root, accounted):
                if rel in accounted or rel in parents or rel in ancestors:
                    continue
                if root == SMALL and rel == "lost+found":
                    continue  # mkfs.ext4 made it
                if os.path.join(root, rel) in self.expected_unrecorded:
                    continue
                problems.append(("orphans", "dir:%s/%s" % (root, rel),
                                 "directory %s under %s has no PV and no ownership record"
                                 % (rel, root)))
            if final:
                try:
                    staged = os.listdir(os.path.join(root, JOURNAL_DIR, "staging"))
                except OSError:
                    staged = []
                for s in staged:
                    problems.append(("orphans", "staging:%s/%s" % (root, s),
                                     "staging entry %s left under %s" % (s, root)))
        return problems

    def stale_forgot(self, pv):
        """A record the stale journal brought back for a volume that changed since the copy."""
        return bool(self.stale and self.stale.get("restore_t") and
                    pv in self.stale.get("copied", ()))

    def auditor(self):
        took = 0.0
        for _ in range(10 ** 7):
            if self.stopping.wait(max(self.o.audit_every, 10 * took)):
                return
            t = now()
            try:
                found = self.audit()
            except Exception:
                log("audit: %s" % traceback.format_exc())
                continue
            took = now() - t
            keys = set()
            for kind, key, msg in found:
                keys.add(key)
                first = self.suspects.setdefault(key, t)
                if t - first >= 60.0:    # not an operation in flight
                    self.findings.add(kind, key, msg + " (for %.0f s while running)"
                                      % (t - first))
            for k in list(self.suspects):
                if k not in keys:
                    del self.suspects[k]

    # -- the provisioner's pods: restarts, memory, logs --------------------------------------

    def container_pids(self):
        """containerd task id -> host pid, from the node's containerd."""
        r = run(["ctr", "--address", self.nc.node["address"], "--namespace", "k8s.io",
                 "tasks", "ls"], ok=False, timeout=30)
        out = {}
        for line in r.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 3 and f[1].isdigit():
                out[f[0]] = int(f[1])
        return out

    def monitor(self):
        """Every second: each provisioner pod's restart count against our kills (a restart we
        did not cause is a crash), its process's memory, and its log copied off the node
        (kubelet removes a deleted pod's logs)."""
        os.makedirs(os.path.join(self.tmp, "provisioner-logs"), exist_ok=True)
        for _ in range(10 ** 7):
            if self.stopping.wait(1.0):
                return
            try:
                self.monitor_once()
            except (ApiError, RuntimeError, OSError) as e:
                log("monitor: %s" % str(e)[:200])
            self.copy_logs()

    def monitor_once(self):
        pods = self.api.call("GET", PODS_PATH % PROV_NS, query={"labelSelector": PROV_LABEL},
                             deadline=5)["items"]
        pids = None
        for p in pods:
            uid = p["metadata"]["uid"]
            st = self.prov.setdefault(uid, {"name": p["metadata"]["name"], "restarts": 0,
                                            "hwm": 0, "cids": set()})
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                rc = cs.get("restartCount") or 0
                if rc > st["restarts"]:
                    st["restarts"] = rc
                    kills = self.kills_by_pod.get(uid, 0)
                    if rc > kills:
                        last = (cs.get("lastState") or {}).get("terminated") or {}
                        self.findings.add("crashes", "restart:%s:%d" % (uid, rc),
                                          "provisioner pod %s restarted %d times, %d of them "
                                          "our kill -9 (last end: %s exit %s at %s)"
                                          % (st["name"], rc, kills, last.get("reason"),
                                             last.get("exitCode"), last.get("finishedAt")))
                cid = (cs.get("containerID") or "").replace("containerd://", "")
                if cid and (cs.get("state") or {}).get("running"):
                    st["cids"].add(cid)
                    if pids is None:
                        pids = self.container_pids()
                    pid = pids.get(cid)
                    st["pid"] = pid
                    if pid:
                        self.sample_memory(st, pid)

    def sample_memory(self, st, pid):
        try:
            with open("/proc/%d/status" % pid) as f:
                vals = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            return
        rss = int(vals.get("VmRSS", "0 kB").split()[0])
        hwm = int(vals.get("VmHWM", "0 kB").split()[0])
        st["hwm"] = max(st["hwm"], hwm)
        self.rss_peak = max(self.rss_peak, hwm)
        self.rss_samples.append((now(), rss))
        if hwm > self.o.max_rss_mib * 1024:
            self.findings.add("memory", "rss:%s" % st["name"], "provisioner pod %s peaked at "
                              "%.1f MiB resident (bound %d MiB)"
                              % (st["name"], hwm / 1024.0, self.o.max_rss_mib))

    def copy_logs(self):
        base = os.path.join(self.nc.node["state_dir"], "pod-logs")
        try:
            dirs = [d for d in os.listdir(base) if d.startswith(PROV_NS + "_")]
        except OSError:
            return
        for d in dirs:
            cdir = os.path.join(base, d, "hostpath-provisioner")
            try:
                files = os.listdir(cdir)
            except OSError:
                continue
            for f in files:
                src = os.path.join(cdir, f)
                dst = os.path.join(self.tmp, "provisioner-logs", "%s--%s" % (d, f))
                off = self.prov_log_offsets.get(src, 0)
                try:
                    with open(src, "rb") as fi:
                        fi.seek(off)
                        data = fi.read()
                except OSError:
                    continue
                if data:
                    with open(dst, "ab") as fo:
                        fo.write(data)
                    self.prov_log_offsets[src] = off + len(data)

    def prov_log(self, pod_uid):
        """Our copy of a provisioner pod's logs (every container instance), CRI prefixes
        removed."""
        out = []
        d = os.path.join(self.tmp, "provisioner-logs")
        for f in sorted(os.listdir(d)):
            if pod_uid in f:
                for line in read_text(os.path.join(d, f)).splitlines():
                    out.append(line.split(" ", 3)[-1] if line[:4].isdigit() else line)
        return "\n".join(out)

    # -- faults -----------------------------------------------------------------------------

    def running_provisioner(self):
        """(pod, container id) of the provisioner whose container runs now, or (None, None)."""
        for p in self.provisioner_pods():
            if p["metadata"].get("deletionTimestamp"):
                continue
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                if (cs.get("state") or {}).get("running") and cs.get("containerID"):
                    return p, cs["containerID"].replace("containerd://", "")
        return None, None

    def fault_kill9(self):
        """kill -9 of the provisioner's process, found through containerd: the kubelet starts
        the container again (restartCount + 1, which the monitor expects)."""
        pod, cid = self.running_provisioner()
        pid = self.container_pids().get(cid) if cid else None
        if not pid:
            log("fault: kill -9 skipped: no running provisioner container")
            return False
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.kills_by_pod[uid] = self.kills_by_pod.get(uid, 0) + 1
            want = self.kills_by_pod[uid]
        os.kill(pid, signal.SIGKILL)
        log("fault: kill -9 of the provisioner (pod %s, pid %d)" % (pod["metadata"]["name"],
                                                                    pid))

        def restarted():
            for p in self.provisioner_pods():
                if p["metadata"]["uid"] != uid:
                    continue
                for cs in (p.get("status") or {}).get("containerStatuses") or []:
                    if (cs.get("restartCount") or 0) >= want and cs.get("ready"):
                        return True
            return False
        self.wait(restarted, 180, "the provisioner container restarted after kill -9")
        return True

    def on_prov_event(self, typ, obj):
        uid = obj["metadata"]["uid"]
        for cs in (obj.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term:
                with self.lock:
                    self.prov_exits[uid] = (term.get("exitCode"), term.get("reason"),
                                            term.get("finishedAt"))

    def on_prov_replace(self, items):
        for it in items:
            self.on_prov_event("ADDED", it)

    def graceful_stop_check(self, uid, name, timeout=90):
        """A pod we stopped (delete, rollout, scale to 0) must end with "main: stopped" and
        exit 0 (the kubelet's word, when the pod's last log lines went with it)."""
        end = now() + timeout
        while now() < end:
            self.copy_logs()
            if re.search(r"main: stopped", self.prov_log(uid)):
                return True
            with self.lock:
                ex = self.prov_exits.get(uid)
            if ex is not None and ex[0] == 0:
                log("provisioner pod %s exited 0 (%s at %s); its last log lines went with the "
                    "pod" % (name, ex[1], ex[2]))
                return True
            if ex is not None:
                self.findings.add("crashes", "stop:" + uid, "provisioner pod %s ended with "
                                  "exit %s (%s at %s) after its stop; its log ends:\n%s"
                                  % (name, ex[0], ex[1], ex[2], self.prov_log(uid)[-1200:]))
                return False
            time.sleep(0.3)
        self.findings.add("crashes", "stop:" + uid, "provisioner pod %s did not log "
                          "\"main: stopped\" within %ds of its stop; its log ends:\n%s"
                          % (name, timeout, self.prov_log(uid)[-1200:]))
        return False

    def fault_delete_pod(self):
        pod, _ = self.running_provisioner()
        if pod is None:
            return False
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        self.kubectl("delete", "pod", "-n", PROV_NS, name, "--wait=false")
        log("fault: kubectl delete pod %s" % name)
        self.wait_provisioner_ready(180, exclude=(uid,))
        self.graceful_stop_check(uid, name)
        return True

    def fault_rollout(self):
        pod, _ = self.running_provisioner()
        old = pod["metadata"]["uid"] if pod else None
        self.kubectl("rollout", "restart", "deployment/" + DEPLOY, "-n", PROV_NS)
        log("fault: kubectl rollout restart deployment/%s" % DEPLOY)
        self.wait_provisioner_ready(180, exclude=(old,) if old else ())
        if old:
            self.graceful_stop_check(old, pod["metadata"]["name"])
        return True

    def fault_restart(self, component, sig):
        log("fault: restart %s (SIG%s)" % (component, sig))
        t0 = time.time()
        took = self.nc.restart(component, sig)
        log("fault: %s healthy again after %.1fs" % (component, took))
        if component == "kube-apiserver":
            # Until it is healthy it may serve requests before its RBAC authorizer has read
            # the roles (403 for a request allowed before and after).
            self.apiserver_restarts.append((t0, time.time() + 5))
        return True

    def fault_disk_full(self, secs):
        self.fault_begin("disk_full")
        try:
            left = self.disks.fill()
            log("fault: %s full (%d blocks left)" % (SMALL, left))
            self.stopping.wait(secs)
        finally:
            self.disks.free()
            self.fault_end("disk_full")

    def fault_unmount(self, secs):
        self.fault_begin("unmount")
        # A disk that never held a volume has no journal, and no list names it: a provisioner
        # started while it is unmounted cannot tell its mount point from a new disk (README, "A
        # missing disk is not an empty disk"); provisioner restarts wait for the window's end.
        self.unmounted_unknown = not os.path.isdir(os.path.join(SMALL, JOURNAL_DIR))
        try:
            if not self.disks.unmount():
                log("fault: unmount skipped: %s stays busy" % SMALL)
                return False
            log("fault: %s unmounted" % SMALL)
            self.stopping.wait(secs)
        finally:
            if not self.disks.mounted:
                self.disks.mount()
                log("fault: %s mounted again" % SMALL)
            self.unmounted_unknown = False
            self.fault_end("unmount")
        return True

    def scale(self, n):
        self.kubectl("scale", "deployment/" + DEPLOY, "-n", PROV_NS, "--replicas=%d" % n)

    def stop_provisioner(self):
        """Scaled to 0 (a graceful stop); returns once no provisioner pod is left."""
        pod, _ = self.running_provisioner()
        self.scale(0)
        self.wait(lambda: not self.provisioner_pods(), 180, "no provisioner pod")
        if pod is not None:
            self.graceful_stop_check(pod["metadata"]["uid"], pod["metadata"]["name"])

    def fault_stale_copy(self):
        """The provisioner stopped (so the copy is whole, as a backup of a stopped node or a
        snapshot is), each volume path's journal copied aside, the provisioner started again."""
        self.stop_provisioner()
        st = {"copy_t": now(), "copied": set(), "copied_recs": {}, "dirs": {}}
        try:
            for root in ROOTS:
                # (A path with no journal yet, no volume made there so far, is not copied and
                # its journal is left alone at the restore.)
                if root == SMALL and not self.disks.mounted or \
                        not os.path.isdir(os.path.join(root, JOURNAL_DIR)):
                    continue
                dst = os.path.join(self.tmp, "stale-journal", os.path.basename(root))
                shutil.copytree(os.path.join(root, JOURNAL_DIR), dst, symlinks=True)
                st["dirs"][root] = dst
                recs = journal_records(root)
                st["copied"].update(recs)
                st["copied_recs"].update(recs)
            self.stale = st
        finally:
            self.scale(1)
        self.wait_provisioner_ready(180)
        log("fault: journals copied aside (%d records)" % len(st["copied"]))
        return True

    def fault_stale_restore(self):
        """The provisioner stopped, each journal replaced by the copy taken earlier (what a
        restored backup leaves), started again: it must delete nothing on the word of a stale
        record and keep what no record names."""
        st = self.stale
        if not st:
            return False
        self.stop_provisioner()
        try:
            for root, src in st["dirs"].items():
                j = os.path.join(root, JOURNAL_DIR)
                live = os.path.join(self.tmp, "live-journal", os.path.basename(root))
                shutil.copytree(j, live, symlinks=True)
                shutil.rmtree(j)
                shutil.copytree(src, j, symlinks=True)
        except BaseException:
            self.scale(1)
            raise
        st["restore_t"] = now()
        with self.lock:
            stale_recs = st["copied_recs"]
            for c in self.claims:
                # Made since the copy: a directory no record names once the copy is back (its
                # PV, while there, accounts for it).
                if c.no_record and c.path:
                    self.expected_unrecorded.add(c.path)
                # Archived since the copy: the stale journal does not name archived-...
                if getattr(c, "archived_as", None) and \
                        (stale_recs.get(c.pv) or {}).get("state") != "archived":
                    self.expected_unrecorded.add(c.archived_as)
        self.scale(1)
        self.wait_provisioner_ready(180)
        log("fault: stale journals in place, the provisioner started on them")
        return True

    def cutter(self):
        for _ in range(10 ** 7):
            if self.stopping.wait(self.rng.uniform(self.o.cut_min, self.o.cut_max)) or \
                    self.load_over.is_set():
                return
            if self.proxy.cut():
                self.faults["cuts"] += 1

    load_over = threading.Event()

    def timeline(self):
        """The faults of the load phase: (seconds after the start, kind, argument)."""
        o = self.o
        D = o.duration
        if o.short:
            plan = [(0.08, "kill9"), (0.14, "disk_full"), (0.20, "apiserver", "KILL"),
                    (0.28, "etcd", "TERM"), (0.34, "stale_copy"), (0.40, "delete_pod"),
                    (0.46, "stale_restore"), (0.52, "kubelet", "TERM"), (0.58, "unmount"),
                    (0.78, "rollout")]
            return [(D * f, k, a[0] if a else None) for f, k, *a in plan]
        cp = [("apiserver", "TERM"), ("etcd", "TERM"), ("kubelet", "TERM"),
              ("apiserver", "KILL"), ("etcd", "KILL"), ("kubelet", "KILL"),
              ("kube-controller-manager", "TERM"), ("kube-scheduler", "KILL")]
        prov = ["kill9", "delete_pod", "rollout"]
        events = []
        n = o.control_faults + o.provisioner_faults
        for i in range(n):
            at = D * 0.9 * (i + 0.5) / n
            if i % 3 == 2 and sum(1 for e in events if e[1] in prov) < o.provisioner_faults:
                events.append((at, prov[len([e for e in events if e[1] in prov]) % 3], None))
            else:
                k, sig = cp[len([e for e in events if e[1] not in prov]) % len(cp)]
                events.append((at, k, sig))
        for f in (0.15, 0.62):
            events.append((D * f, "disk_full", None))
        for f in (0.35, 0.80):
            events.append((D * f, "unmount", None))
        events.append((D * 0.30, "stale_copy", None))
        events.append((D * 0.55, "stale_restore", None))
        return sorted(events, key=lambda e: e[0])

    COMPONENT = {"apiserver": "kube-apiserver", "etcd": "etcd", "kubelet": "kubelet",
                 "kube-controller-manager": "kube-controller-manager",
                 "kube-scheduler": "kube-scheduler"}
    FAULT_KEY = {"kube-controller-manager": "kcm", "kube-scheduler": "scheduler"}

    def chaos(self):
        bg = []
        for at, kind, arg in self.timeline():
            while now() - self.t0 < at:
                if self.stopping.wait(0.2):
                    return
            # Provisioner restarts and unmount windows are combined as they fall (N3 in
            # tests/soak/README.md is fixed: the main path's journals file names the small
            # one), unless the small disk never held a volume (fault_unmount).
            if kind in ("kill9", "delete_pod", "rollout", "stale_restore") and \
                    self.unmounted_unknown:
                log("fault: %s waits: %s is unmounted and never held a volume" % (kind, SMALL))
                for _ in range(int((self.o.disk_fault_secs + 60) / 0.2)):
                    if not self.unmounted_unknown or self.stopping.wait(0.2):
                        break
            try:
                if kind in ("disk_full", "unmount"):
                    fn = self.fault_disk_full if kind == "disk_full" else self.fault_unmount
                    th = threading.Thread(target=self.guard, args=(fn, self.o.disk_fault_secs),
                                          daemon=True)
                    th.start()
                    bg.append(th)
                    self.faults[kind] += 1
                    continue
                if kind in self.COMPONENT:
                    done = self.fault_restart(self.COMPONENT[kind], arg)
                else:
                    done = getattr(self, "fault_" + kind)()
                if done:
                    key = self.FAULT_KEY.get(kind, kind)
                    if kind.startswith("stale"):
                        key = "stale_journal"
                        if kind == "stale_copy":
                            continue
                    self.faults[key] += 1
            except Exception:
                self.findings.add("crashes", "fault:%s:%.0f" % (kind, at), "fault %s failed: %s"
                                  % (kind, traceback.format_exc()[-1500:]))
        for th in bg:
            th.join(self.o.disk_fault_secs + 120)

    def fault_total(self):
        f = self.faults
        return sum(f.values())

    def control_plane_faults(self):
        f = self.faults
        return f["apiserver"] + f["etcd"] + f["kubelet"] + f["kcm"] + f["scheduler"]

    def provisioner_kills(self):
        f = self.faults
        return f["kill9"] + f["delete_pod"] + f["rollout"]

    # -- reporting ----------------------------------------------------------------------------

    def report_line(self, window=60.0):
        with self.lock:
            t = now()
            recent = sorted(v for (at, v) in self.latencies if at >= t - window)
            live = sum(1 for c in self.active)
            npv = len(self.pvs)
            created = len(self.claims)
            f = dict(self.faults)
            done = sum(1 for c in self.claims if c.state == "done")
        rss = self.rss_samples[-1][1] / 1024.0 if self.rss_samples else 0
        say("soak: [%s] claims %d (done %d, active %d) | pods %d | PVs %d | faults %d (kill -9 "
            "%d, delete %d, rollout %d, apiserver %d, etcd %d, kubelet %d, kcm %d, scheduler "
            "%d, cuts %d, disk full %d, unmount %d, stale journal %d) | claim->Bound p50 %s p99 "
            "%s (%d) | provisioner RSS %.1f MiB"
            % (fmt_t(now() - self.t0), created, done, live, self.counts["pods"], npv,
               self.fault_total(), f["kill9"], f["delete_pod"], f["rollout"], f["apiserver"],
               f["etcd"], f["kubelet"], f["kcm"], f["scheduler"], f["cuts"], f["disk_full"],
               f["unmount"], f["stale_journal"], fmt_ms(pct(recent, 50)),
               fmt_ms(pct(recent, 99)), len(recent), rss))

    def reporter(self):
        last = now()
        for _ in range(10 ** 7):
            if self.stopping.wait(2.0):
                return
            if now() - last >= self.o.report_every:
                last = now()
                self.report_line(self.o.report_every)

    # -- the run ------------------------------------------------------------------------------

    def run(self):
        o = self.o
        say("soak: %d claims with pods over ~%ds (at most %d at once), seed %d, workdir %s"
            % (o.claims, o.duration, o.max_active, o.seed, self.tmp))
        t_setup = now()
        self.setup()
        say("soak: set up in %.0fs" % (now() - t_setup))
        self.t0 = now()
        self.loading.set()
        self.spawn(self.driver)
        for fn in (self.sampler, self.auditor, self.reporter):
            self.spawn(fn)
        cutter = self.spawn(self.cutter)
        chaos = self.spawn(self.chaos)
        hard_end = self.t0 + o.duration * 4 + 900
        while now() < hard_end and (self.loading.is_set() or chaos.is_alive()):
            time.sleep(0.5)
        self.load_over.set()
        cutter.join(5)
        load_secs = now() - self.t0
        say("soak: load phase over after %s: %d claims created; settling"
            % (fmt_t(load_secs), len(self.claims)))
        settled = self.settle()
        self.report_line(window=load_secs + 600)
        self.final_checks(settled)
        return self.finish(load_secs)

    def settle(self):
        """Every claim through its life: the kept ones deleted now, every release checked."""
        end = now() + self.o.settle
        self.finishing = True
        what = ""
        for _ in range(100000):
            with self.lock:
                left = [c for c in self.active if c.state not in ("done", "refused")]
                states = {}
                for c in left:
                    states[c.state] = states.get(c.state, 0) + 1
            if not left:
                say("soak: settled")
                return True
            what = "%d claims not finished: %s; first: %s" % (len(left), states, left[0])
            if now() >= end:
                say("soak: not settled after %ds: %s" % (self.o.settle, what))
                return False
            time.sleep(1.0)
        return False

    def claim_events(self, c, reason):
        try:
            ev = self.api.call("GET", EVENTS_PATH % c.ns, query={
                "fieldSelector": "involvedObject.name=%s" % c.name}, deadline=20)["items"]
        except RuntimeError:
            return []
        return [e for e in ev if e.get("reason") == reason and
                (e.get("involvedObject") or {}).get("uid") in (c.uid, None)]

    def final_checks(self, settled):
        F = self.findings
        # Claims that never got a volume must have been refused with an event.
        for c in list(self.active):
            if c.pv is None and c.uid:
                evs = self.claim_events(c, "ProvisioningFailed")
                if evs:
                    self.counts["refused"] += 1
                    log("refused: %s: %s" % (c, evs[-1].get("message")))
                else:
                    F.add("lost", "unbound:" + c.uid, "%s never got a volume and has no "
                          "ProvisioningFailed event (state %s)" % (c, c.state))
            elif c.state != "done":
                F.add("lost", "unsettled:" + (c.uid or c.key), "%s did not finish: state %s, "
                      "PV %s, path %s" % (c, c.state, c.pv, c.path))
        # Every release as its policy says (checked as it happened); what is on disk now.
        with self.lock:
            claims = list(self.claims)
            pvs = dict(self.pvs)
        for c in claims:
            if c.state != "done" or not c.pv:
                continue
            pol = c.cls.policy
            # A directory a later claim of the same name holds (a nested pathPattern reuses
            # paths) is that claim's: still active, or kept in place (retained, Released, kept
            # without a record after the stale journal).
            holders = ("retained", "kept Released", "kept without record")
            if c.outcome in ("deleted",) and os.path.lexists(c.path) and not \
                    any(o.path == c.path and (o.state != "done" or o.outcome in holders)
                        for o in claims if o is not c):
                F.add("orphans", "dir:" + c.path, "%s: directory %s of a deleted volume "
                      "(onDelete delete) is still there" % (c, c.path))
            if c.outcome in ("retained", "kept Released", "kept without record"):
                reused = any(o.reuse_of is c and o.reused for o in claims)
                if not reused:
                    self.check_files(c, c.path, "at the end (%s)" % c.outcome)
            if c.outcome == "archived":
                self.check_files(c, c.archived_as, "at the end (archived)")
            log("final: %s %s policy %s" % (c, c.outcome, pol))
        # Retained PVs (reclaim Retain) still Released: deleted by hand now, which is not a
        # release: their data stays.
        for name, s in pvs.items():
            if s["reclaim"] == "Retain" and s["phase"] == "Released":
                self.hand_deleted_pvs.add(name)
                try:
                    self.api.call("DELETE", PV_PATH % name, ok=(404,), deadline=30)
                except ApiError:
                    pass
        if self.hand_deleted_pvs:
            time.sleep(5)
            for c in claims:
                if c.pv in self.hand_deleted_pvs and c.files:
                    self.check_files(c, c.path, "after its Released PV was deleted by hand")
        # The journal, the disks and the PVs agree.
        time.sleep(3)
        for kind, key, msg in self.audit(final=True):
            if kind == "orphans" and key.startswith("dir:") and any(
                    c.pv in self.hand_deleted_pvs and key.endswith(c.path) for c in claims):
                continue  # retained by hand-deleting its PV: recorded retained, kept
            F.add(kind, key, msg)
        # The provisioner: running, restarted only by our kills.
        try:
            self.monitor_once()
        except (ApiError, RuntimeError, OSError) as e:
            log("monitor: %s" % e)
        pod, _ = self.running_provisioner()
        if pod is None:
            F.add("crashes", "end", "no provisioner container runs at the end")
        if not settled:
            F.add("lost", "settle", "the soak did not settle within %ds" % self.o.settle)

    def scan_logs(self):
        """Sanitizer reports and ERROR lines of the provisioner that no injected fault
        explains."""
        d = os.path.join(self.tmp, "provisioner-logs")
        shapes = {}
        explained = list(EXPLAINED)
        copied = self.stale.get("copied", ()) if self.stale and self.stale.get("restore_t") \
            else None
        for f in sorted(os.listdir(d)):
            text = read_text(os.path.join(d, f))
            if re.search(SANITIZER, text):
                self.findings.add("crashes", "san:" + f, "sanitizer report in %s" % f)
            for line in text.splitlines():
                msg = line.split(" ", 3)[-1] if line[:4].isdigit() else line
                if not msg.startswith("E"):
                    continue
                if any(re.search(p, msg) for p in explained):
                    continue
                if "(HTTP 403 Forbidden)" in msg and self.during_apiserver_restart(msg):
                    continue  # its authorizer not ready yet (fault_restart)
                m = re.search(r"no ownership record for (pvc-\S+) ", msg)
                if m and copied is not None and m.group(1) not in copied:
                    continue  # made after the stale copy: its release is refused, as it must be
                shape = re.sub(r"\d+", "N", Findings.UID.sub("U", msg.split("] ", 1)[-1]))
                first = shapes.setdefault(shape, [0, f, msg[:600]])
                first[0] += 1
        for shape, (n, f, line) in shapes.items():
            self.findings.add("errors", "err:" + shape, "%d line(s) like %s: %s" % (n, f, line))

    def during_apiserver_restart(self, line):
        """Whether a klog line ("E1128 14:45:50.542638 ...", UTC) was written while
        kube-apiserver was restarting."""
        m = re.match(r"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)", line)
        if not m:
            return False
        mo, d, hh, mm, ss, frac = m.groups()
        year = time.gmtime().tm_year
        t = calendar.timegm((year, int(mo), int(d), int(hh), int(mm), int(ss), 0, 0, 0)) + \
            float("0." + frac)
        return any(a <= t <= b for a, b in self.apiserver_restarts)

    def finish(self, load_secs):
        F = self.findings
        self.copy_logs()
        self.scan_logs()
        with self.lock:
            lat = sorted(v for _, v in self.latencies)
            runs = sorted(self.pod_runs)
        f = self.faults
        summary = {
            "claims": len(self.claims), "pods": self.counts["pods"], "counts": dict(self.counts),
            "faults": dict(f), "fault_total": self.fault_total(),
            "control_plane_faults": self.control_plane_faults(),
            "provisioner_kills": self.provisioner_kills(),
            "load_seconds": round(load_secs), "total_seconds": round(now() - self.t_start),
            "bound_p50_ms": lat and round(pct(lat, 50) * 1000),
            "bound_p99_ms": lat and round(pct(lat, 99) * 1000),
            "written_p50_ms": runs and round(pct(runs, 50) * 1000),
            "provisioner_peak_rss_kib": self.rss_peak,
            "findings": {k: F.count(k) for k in F.KINDS}, "bytes_lost": F.bytes_lost,
            "seed": self.o.seed,
        }
        if self.o.summary:
            with open(self.o.summary, "w") as fh:
                json.dump(summary, fh, indent=1)
        say("soak: took %s (load %s); %d pods wrote %d files, %d writes refused (disk full), "
            "%d bytes verified on the node; claim->Bound p50 %s p99 %s; written p50 %s; "
            "%d deleted while their pod ran, %d reused, %d kept to the end, %d kept without a "
            "record (stale journal); provisioner peak RSS %.1f MiB"
            % (fmt_t(now() - self.t_start), fmt_t(load_secs), self.counts["pods"],
               self.counts["written"], self.counts["write_refused"],
               self.counts["verified_bytes"], fmt_ms(pct(lat, 50)), fmt_ms(pct(lat, 99)),
               fmt_ms(pct(runs, 50)), self.counts["deleted_running"], self.counts["reused"],
               self.counts["kept"], self.counts["no_record_kept"], self.rss_peak / 1024.0))
        say("soak: faults: %d control plane (kube-apiserver %d, etcd %d, kubelet %d, "
            "kube-controller-manager %d, kube-scheduler %d), %d provisioner pod (kill -9 %d, "
            "delete %d, rollout %d), %d connection cuts, disk full %d, unmount %d, stale "
            "journal %d" % (self.control_plane_faults(), f["apiserver"], f["etcd"],
                            f["kubelet"], f["kcm"], f["scheduler"], self.provisioner_kills(),
                            f["kill9"], f["delete_pod"], f["rollout"], f["cuts"],
                            f["disk_full"], f["unmount"], f["stale_journal"]))
        bad = False
        for k in F.KINDS:
            items = F.items[k]
            if items:
                bad = True
                say("soak: %d %s, first: %s" % (len(items), k, items[0]))
                for m in items[1:10]:
                    log("  also: " + m, console=True)
        if self.internal_error:
            bad = True
            say("soak: an internal error of the soak itself (see above)")
        say("soak: %d claims, %d kills, %d faults: %d lost, %d duplicated, %d wrong deletions, "
            "%d orphans, %d bytes lost" % (
                len(self.claims), self.provisioner_kills(), self.fault_total(),
                F.count("lost"), F.count("duplicated"), F.count("wrong deletions"),
                F.count("orphans"), F.bytes_lost))
        return 1 if bad else 0

    # -- clean-up -----------------------------------------------------------------------------

    def cleanup(self, ok):
        """Everything the soak made goes: pods, claims, namespaces, the provisioner, classes,
        PVs, the CSIDriver if it made it, the proxy, the disks; the work directory unless kept
        or the run failed."""
        self.stopping.set()
        self.load_over.set()
        errors = []
        if not ok:
            # The node's and control plane's logs (a node the soak started goes with it).
            dst = os.path.join(self.tmp, "node-logs")
            os.makedirs(dst, exist_ok=True)
            for d in (self.nc.node.get("state_dir"), self.nc.state_dir):
                try:
                    for n in os.listdir(d or "/nonexistent"):
                        if n.endswith(".log"):
                            shutil.copy(os.path.join(d, n), dst)
                except OSError:
                    pass

        def step(what, fn):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - every step runs
                errors.append("%s: %s" % (what, e))
                log("cleanup: %s: %s" % (what, traceback.format_exc()))
        api = Api(self.nc, threading.Event())

        def namespaces():
            for ns in NAMESPACES:
                try:
                    api.call("DELETE", NS_PATH % ns, ok=(404,), deadline=60)
                except ApiError:
                    pass
            end = now() + 240
            while now() < end and any(api.exists(NS_PATH % ns) for ns in NAMESPACES):
                time.sleep(1)

        def uninstall():
            if getattr(self, "overlay_dir", None):
                self.kubectl("delete", "-k", self.overlay_dir, "--ignore-not-found",
                             "--wait=true", "--timeout=180s", ok=False, timeout=240)

        def classes_and_pvs():
            for c in self.classes.values():
                try:
                    api.call("DELETE", SC_PATH % c.name, ok=(404,), deadline=60)
                except ApiError:
                    pass
            for pv in api.call("GET", PVS_PATH, deadline=60)["items"]:
                if (pv.get("spec") or {}).get("storageClassName") in self.classes:
                    path = PV_PATH % pv["metadata"]["name"]
                    try:
                        api.call("DELETE", path, ok=(404,), deadline=30)
                        api.call("PATCH", path, {"metadata": {"finalizers": None}},
                                 content_type="application/merge-patch+json", ok=(404,),
                                 deadline=30)
                    except ApiError:
                        pass
            if not getattr(self, "csidriver_existed", True):
                try:
                    api.call("DELETE", CSIDRIVER_PATH % PROV_NAME, ok=(404,), deadline=30)
                except ApiError:
                    pass
        step("namespaces", namespaces)
        step("uninstall", uninstall)
        step("classes and PVs", classes_and_pvs)
        for r in (getattr(self, n, None) for n in ("pv_ref", "pvc_ref", "pod_ref",
                                                         "prov_ref")):
            if r is not None:
                step("reflector", r.stop)
        if self.proxy is not None:
            step("proxy", self.proxy.close)
        step("disks", self.disks.teardown)
        if errors:
            say("soak: clean-up left: %s" % "; ".join(errors))
        if ok and not errors and not self.o.keep and not self.o.workdir_given:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            say("soak: logs kept in %s" % self.tmp)
        return not errors


# ERROR lines an injected fault explains: a disk that was full or unmounted, an API server,
# etcd or connection that went away.
EXPLAINED = [
    r"No space left on device",
    r"is its disk mounted",
    r"is the disk that holds the volumes mounted",
]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true",
                    help="the CI form: %(prog)s's short plan (~5 minutes)")
    ap.add_argument("--claims", type=int, help="claims created (1000; --short 60)")
    ap.add_argument("--duration", type=float, help="planned load phase in seconds: claims are "
                    "created at claims/duration per second at most (1800; --short 150)")
    ap.add_argument("--max-active", type=int, help="claims with a pod at once (60; --short 30; "
                    "the node runs at most maxPods)")
    ap.add_argument("--control-faults", type=int, default=20,
                    help="control plane restarts in the full run")
    ap.add_argument("--provisioner-faults", type=int, default=10,
                    help="kill -9 / delete / rollout of the provisioner's pod in the full run")
    ap.add_argument("--keep-fraction", type=float, default=0.08)
    ap.add_argument("--running-delete-fraction", type=float, default=0.15)
    ap.add_argument("--reread-fraction", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=3, help="read-backs per pod")
    ap.add_argument("--pause", type=int, default=2, help="seconds between read-backs")
    ap.add_argument("--min-size", type=int, default=4096)
    ap.add_argument("--max-size", type=int, default=256 << 10)
    ap.add_argument("--disk-mib", type=int, default=64, help="the small disk")
    ap.add_argument("--disk-fault-secs", type=float, help="disk full / unmounted (30; --short "
                    "15)")
    ap.add_argument("--cut-min", type=float, default=5.0)
    ap.add_argument("--cut-max", type=float, default=15.0)
    ap.add_argument("--max-rss-mib", type=int, default=48,
                    help="the provisioner's resident memory bound")
    ap.add_argument("--settle", type=float, help="seconds for everything to finish after the "
                    "load (600; --short 150)")
    ap.add_argument("--audit-every", type=float, default=10.0)
    ap.add_argument("--report-every", type=float, help="(60; --short 30)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--workdir", help="work here (kept) instead of a temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--summary", help="write a JSON summary here")
    o = ap.parse_args(argv)
    s = o.short
    o.claims = o.claims or (60 if s else 1000)
    o.duration = o.duration or (150.0 if s else 1800.0)
    o.max_active = o.max_active or (30 if s else 60)
    o.disk_fault_secs = o.disk_fault_secs or (15.0 if s else 30.0)
    o.settle = o.settle or (150.0 if s else 600.0)
    o.report_every = o.report_every or (30.0 if s else 60.0)
    if o.seed is None:
        o.seed = random.randrange(1 << 30)
    return o


def main(argv=None):
    global LOG_FILE, PROV_NAME
    o = parse_args(argv)
    t_start = now()

    def on_term(signum, frame):
        # meson's timeout, a ^C: the clean-up below still runs (and a node of our own is
        # stopped at exit), once.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    import nodeharness
    import realharness
    realharness.require_binary()        # these exit 77 (skip) when the tier cannot run
    nc = nodeharness.get_node_cluster()
    PROV_NAME = nodeharness.PROV
    o.workdir_given = bool(o.workdir)
    o.workdir = o.workdir or tempfile.mkdtemp(prefix="hp-node-soak-")
    os.makedirs(o.workdir, exist_ok=True)
    LOG_FILE = open(os.path.join(o.workdir, "soak.log"), "a")
    soak = Soak(o, nc)
    soak.t_start = t_start
    code, clean = 1, False
    try:
        code = soak.run()
    except Exception:
        say("soak: aborted:\n%s" % traceback.format_exc())
        code = 1
    finally:
        clean = soak.cleanup(code == 0)
    say("soak: wall time %s" % fmt_t(now() - t_start))
    return code if clean else 1


if __name__ == "__main__":
    sys.exit(main())
