#!/usr/bin/env python3
"""Chaos soak (issue 13): thousands of claims created and deleted while provisioners are
killed, watches closed, writes failed, history compacted, the API server restarted, a disk
filled and a disk made read-only -- then proof that nothing was lost, duplicated or wrongly
deleted.

    tests/soak/soak.py --binary build/hostpath-provisioner            # the full soak
    tests/soak/soak.py --binary build/hostpath-provisioner --short    # the CI one (~2 min)

Topology, against the local API server (tests/integration/apiserver.py, --persist on):
- a Deployment on one node: --replicas provisioners with --leader-elect, one --identity and
  one --pv-dir, serving the Immediate classes (provisioner hostpath-provisioner.io);
- a DaemonSet: one provisioner per node (--node-name node-X, --leader-elect, its own --pv-dir
  on a tmpfs of its own), serving the WaitForFirstConsumer classes
  (hostpath-provisioner.io-local). The soak is the scheduler: it sets selected-node on claims
  that have none (at creation, later, or after a provisioner asked for another node).

Faults, all at once, over the load phase: kill -9 of a random provisioner (the Deployment's
leader half of the time) every --kill-every seconds and a restart; as many graceful stops
(SIGTERM, as a rolling update does: it must exit 0 with "main: stopped" within 35 s, running
filesystem work finished) and a restart, halfway between the kills; every provisioner watch
closed every second; --fault-rate of the provisioners' writes answered 500/503/429 (with
Retry-After)/409; the watch history compacted every minute; one API server restart (state
kept); node-a's disk filled by a file and freed; node-b's disk remounted read-only and back;
StorageClasses deleted and re-created.

Invariants, checked while it runs and after a settle period (see tests/soak/README.md): every
live claim has exactly one PV and every PV one directory; no directory of a live claim's PV is
ever missing; no PV is created twice for one claim; every directory under every --pv-dir is a
PV's, a journal record's or a recorded parent; after settle nothing of a deleted Delete-policy
claim remains; retained and archived data (a marker file written into each bound volume) is
intact; the journal matches the disk; no process died other than by our kills; no ERROR line
that an injected fault does not explain.

One line a minute; the last line is
    soak: N claims, K kills, F faults: 0 lost, 0 duplicated, 0 wrong deletions, 0 orphans
and any non-zero count (or a crash, or an unexplained error line) exits 1 naming the first
offending object. Exit 77: the binary is missing.
"""

import argparse
import heapq
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from harness import (JOURNAL_DIR, LEASE_PATH, NODES_PATH, NSS_PATH,  # noqa: E402
                     PVC_PATH, PVCS_PATH, PVS_PATH, SANITIZER, SC_PATH, SCS_PATH, ALL_PVCS_PATH,
                     ApiError, ApiServer, Client, Provisioner, claim, journal_records,
                     namespace, node, read_text, storage_class)

DEPLOY_PROV = "hostpath-provisioner.io"
NODE_PROV = "hostpath-provisioner.io-local"
DEPLOY_ID = "deploy"
SELECTED = "volume.kubernetes.io/selected-node"
ANN_ID = "hostPathProvisionerIdentity"
ANN_ON_DELETE = "hostpath.provisioner/on-delete"
MARKER = "soak-marker"
TOKEN_LABEL = "soak-token"
UA = "hp-soak/1.0"
PROV_UA = "hostpath-provisioner/"
NAMESPACES = ["soak-0", "soak-1", "soak-2", "soak-3"]
# The provisioner's crash points (src/crashpoint.c callers): --crashpoints picks among them.
CRASH_STEPS = ["provision-staged", "provision-recorded", "provision-renamed",
               "provision-created", "provision-pv-created", "release-marked",
               "release-removing", "release-removed", "release-archived", "delete-pv-deleted"]


class ClassSpec:
    def __init__(self, name, prov, reclaim, binding, on_delete, pattern=None, weight=1,
                 flip=False, churn=False):
        self.name, self.prov, self.reclaim, self.binding = name, prov, reclaim, binding
        self.on_delete, self.pattern, self.weight = on_delete, pattern, weight
        self.flip, self.churn = flip, churn
        self.generation = 0

    @property
    def wffc(self):
        return self.binding == "WaitForFirstConsumer"

    def current_on_delete(self):
        if self.flip:
            return "delete" if self.generation % 2 == 0 else "retain"
        return self.on_delete

    def obj(self):
        params = {"mode": "0777"}
        od = self.current_on_delete()
        if od:
            params["onDelete"] = od
        if self.pattern:
            params["pathPattern"] = self.pattern
        return storage_class(self.name, self.prov, reclaim=self.reclaim, binding=self.binding,
                             parameters=params)


def class_specs():
    W = "WaitForFirstConsumer"
    return [
        ClassSpec("imm-delete", DEPLOY_PROV, "Delete", "Immediate", "delete", weight=5,
                  churn=True),
        ClassSpec("imm-nested", DEPLOY_PROV, "Delete", "Immediate", "delete",
                  pattern="{{.PVC.Namespace}}/{{.PVName}}", weight=2),
        ClassSpec("imm-retain", DEPLOY_PROV, "Retain", "Immediate", None, weight=1),
        ClassSpec("imm-keep", DEPLOY_PROV, "Delete", "Immediate", "retain", weight=1),
        ClassSpec("imm-archive", DEPLOY_PROV, "Delete", "Immediate", "archive", weight=1,
                  churn=True),
        ClassSpec("imm-flip", DEPLOY_PROV, "Delete", "Immediate", "delete", weight=1,
                  flip=True, churn=True),
        ClassSpec("local-delete", NODE_PROV, "Delete", W, "delete", weight=5, churn=True),
        ClassSpec("local-archive", NODE_PROV, "Delete", W, "archive", weight=1),
        ClassSpec("local-retain", NODE_PROV, "Retain", W, None, weight=1),
    ]


def now():
    return time.monotonic()


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def fmt_ms(v):
    return "-" if v is None else "%dms" % round(v * 1000)


def fmt_t(secs):
    secs = int(secs)
    return "%d:%02d" % (secs // 60, secs % 60)


class Claim:
    __slots__ = ("ns", "name", "cls", "uid", "token", "created_t", "ready_t", "deleted",
                 "deleted_t", "keep", "pv_seen_t", "pv_path", "pv_on_delete", "marker",
                 "marker_path", "bound", "node", "gone", "sched_rv")

    def __init__(self, ns, name, cls, token):
        self.ns, self.name, self.cls, self.token = ns, name, cls, token
        self.uid = None
        self.created_t = self.ready_t = None
        self.deleted = False
        self.deleted_t = None
        self.keep = False
        self.pv_seen_t = None
        self.pv_path = None
        self.pv_on_delete = None
        self.marker = None        # the token written into soak-marker, once written
        self.marker_path = None
        self.bound = False
        self.node = None          # the selected node we set (None: none, or removed since)
        self.sched_rv = 0         # resourceVersion of our last write of selected-node
        self.gone = False         # the claim object is gone from the API server

    @property
    def key(self):
        return "%s/%s" % (self.ns, self.name)

    def __repr__(self):
        return "claim %s (uid %s, class %s)" % (self.key, self.uid, self.cls.name)


class Findings:
    """The four counted kinds plus crashes and unexplained errors; the first of each named."""

    KINDS = ("lost", "duplicated", "wrong deletions", "orphans", "crashes", "errors")

    def __init__(self):
        self.lock = threading.Lock()
        self.items = {k: [] for k in self.KINDS}
        self.keys = set()

    UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

    def add(self, kind, key, msg):
        """Counts objects, not checks: findings of one kind about one volume (its claim uid is
        in the PV's name and its directory's) count once."""
        m = self.UID.search(key)
        key = m.group(0) if m else key
        with self.lock:
            if (kind, key) in self.keys:
                return False
            self.keys.add((kind, key))
            self.items[kind].append(msg)
        log("FINDING %s: %s" % (kind, msg))
        return True

    def count(self, kind):
        with self.lock:
            return len(self.items[kind])


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


# ---------------------------------------------------------------------------------------------
# A reflector: LIST, then WATCH from the list's resourceVersion; resume after a closed watch,
# relist after 410 or an API server restart. Events go to handlers in order, on its thread.
# ---------------------------------------------------------------------------------------------

class Reflector(threading.Thread):
    def __init__(self, soak, path, on_event, on_replace, name):
        super().__init__(daemon=True, name=name)
        self.soak, self.path = soak, path
        self.on_event, self.on_replace = on_event, on_replace
        self.client = Client(soak.api.url, soak.api.token, soak.api.ca, user_agent=UA)
        self.rv = None
        self.synced = threading.Event()
        self.relists = 0
        self.stream = None

    def list_all(self):
        items, tok = [], None
        for _ in range(10000):
            q = {"limit": 500}
            if tok:
                q["continue"] = tok
            body = self.client.call("GET", self.path, query=q)
            items += body.get("items") or []
            tok = (body.get("metadata") or {}).get("continue")
            if not tok:
                return items, body["metadata"]["resourceVersion"]
        raise RuntimeError("endless list of %s" % self.path)

    def run(self):
        while not self.soak.stopping.is_set():
            try:
                if self.rv is None:
                    items, rv = self.list_all()
                    self.on_replace(items)
                    self.rv = rv
                    self.relists += 1
                    self.synced.set()
                self.watch_once()
            except (ApiError, OSError, ValueError, RuntimeError) as e:
                if isinstance(e, ApiError) and e.status == 410:
                    self.rv = None
                log("reflector %s: %s" % (self.name, e))
                self.soak.stopping.wait(0.3)
            except Exception:
                log("reflector %s: %s" % (self.name, traceback.format_exc()))
                self.soak.stopping.wait(0.5)

    def watch_once(self):
        self.stream = w = self.client.watch(self.path, timeout=20.0, resourceVersion=self.rv,
                                            allowWatchBookmarks="true")
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
                    code = (ev.get("object") or {}).get("code")
                    if code == 410:
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
# The soak
# ---------------------------------------------------------------------------------------------

class Soak:
    def __init__(self, opts):
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.tmp = opts.workdir or tempfile.mkdtemp(prefix="hp-soak-")
        os.makedirs(self.tmp, exist_ok=True)
        self.findings = Findings()
        self.lock = threading.RLock()
        self.stopping = threading.Event()     # everything stops
        self.load_done = threading.Event()    # the load and fault phase is over
        self.finishing = threading.Event()    # the provisioners are being stopped
        self.classes = {c.name: c for c in class_specs()}
        self.claims = {}          # uid -> Claim
        self.by_key = {}          # ns/name -> Claim (the latest of that name)
        self.free_names = []      # names whose claims are gone, to reuse
        self.name_seq = 0
        self.created = 0
        self.deleted = 0
        self.pending_creates = 0
        self.deletions = []       # heap of (due monotonic, seq, uid)
        self.dseq = 0
        self.pvs = {}             # name -> summary dict
        self.pv_uids = {}         # name -> set of metadata.uid ever seen
        self.pv_by_claim = {}     # claim uid -> PV name (the latest seen)
        self.unbound = set()      # uids of live claims without a PV yet (backpressure)
        self.pv_created = 0
        self.pvcs = {}            # ns/name -> claim object summary
        self.latencies = []       # (monotonic when seen, seconds)
        self.marker_queue = []    # heap of (due, uid)
        self.faults = {"kills": 0, "watch_closes": 0, "api_faults": 0, "compactions": 0,
                       "api_restarts": 0, "disk_full": 0, "read_only": 0, "class_churn": 0,
                       "reschedules": 0, "crashpoint_kills": 0, "stops": 0}
        self.armed_total = 0
        self.api_fault_base = 0   # hits counted before the API server restart
        self.fs_active = {"full": False, "ro": False}
        self.fs_windows = []      # (kind, start wall, end wall)
        self.killed_pids = set()
        self.procs = []           # Provisioner objects
        self.rss = {}             # name -> peak VmHWM kB
        self.start_refusals = 0
        self.mounts = []
        self.threads = []
        self.t0 = None
        self.suspects = {}        # audit key -> first seen monotonic
        self.api = None

    # -- set-up ----------------------------------------------------------------------------

    def mount_tmpfs(self, path, size):
        os.makedirs(path, exist_ok=True)
        if os.geteuid() != 0 or self.o.no_fs_faults:
            return False
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs",
                            path], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            say("soak: cannot mount a tmpfs on %s (%s): disk faults are skipped"
                % (path, r.stderr.strip()))
            return False
        self.mounts.append(path)
        return True

    def setup(self):
        o = self.o
        self.api = ApiServer(self.tmp, persist=True, history=o.history).start()
        self.client = Client(self.api.url, self.api.token, self.api.ca, user_agent=UA)
        for ns in NAMESPACES:
            self.api.create(NSS_PATH, namespace(ns))
        self.nodes = ["node-%s" % chr(ord("a") + i) for i in range(o.nodes)]
        for n in self.nodes:
            self.api.create(NODES_PATH, node(n))
        for c in self.classes.values():
            self.api.create(SCS_PATH, c.obj())
        # Disks: the Deployment's on the machine's disk; each node's on a tmpfs of its own.
        self.deploy_dir = os.path.join(self.tmp, "deploy-pv")
        os.makedirs(self.deploy_dir)
        self.disks = {}
        self.roots = {DEPLOY_ID: self.deploy_dir}
        for n in self.nodes:
            disk = os.path.join(self.tmp, "disk-" + n)
            mounted = self.mount_tmpfs(disk, o.disk_size)
            self.disks[n] = (disk, mounted)
            self.roots[n] = os.path.join(disk, "pv")
            os.makedirs(self.roots[n], exist_ok=True)
        common = ["--resync-period", o.resync, "--v", str(o.verbosity),
                  "--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "3s",
                  "--leader-elect-retry-period", "1s"] + list(o.provisioner_arg or [])
        for i in range(o.replicas):
            p = Provisioner(self.api, self.deploy_dir, "--provisioner-name", DEPLOY_PROV,
                            "--identity", DEPLOY_ID, "--leader-elect", *common,
                            binary=o.binary, name="deploy-%d" % i)
            p.group = "deploy"
            self.procs.append(p)
        for n in self.nodes:
            p = Provisioner(self.api, self.roots[n], "--provisioner-name", NODE_PROV,
                            "--node-name", n, "--leader-elect", *common, binary=o.binary,
                            name=n)
            p.group = "node"
            self.procs.append(p)
        for p in self.procs:
            # Logs next to soak.log, not on the node disks (they are unmounted at the end).
            p.log_path = os.path.join(self.tmp, p.name + ".stderr")
            p.out_path = os.path.join(self.tmp, p.name + ".stdout")
            self.start_proc(p)
        self.pv_ref = Reflector(self, PVS_PATH, self.on_pv_event, self.on_pv_replace, "pvs")
        self.pvc_ref = Reflector(self, ALL_PVCS_PATH, self.on_pvc_event, self.on_pvc_replace,
                                 "pvcs")
        self.pv_ref.start()
        self.pvc_ref.start()
        for p in self.procs:
            wait(lambda: "caches synced" in p.log, 30, "%s synced" % p.name)
        self.pv_ref.synced.wait(30)
        self.pvc_ref.synced.wait(30)

    # -- the API client with retries (our own requests are never faulted, but the server
    #    restarts) ---------------------------------------------------------------------------

    def call(self, method, path, body=None, query=None, content_type=None, ok=(),
             deadline=60.0):
        end = now() + deadline
        delay = 0.05
        while True:
            try:
                return self.client.call(method, path, body, query, content_type)
            except ApiError as e:
                if e.status in ok:
                    raise
                if e.status < 500 and e.status != 429:
                    raise
                err = e
            except OSError as e:
                err = e
            if now() >= end or self.stopping.is_set():
                raise RuntimeError("%s %s: %s" % (method, path, err))
            time.sleep(delay)
            delay = min(1.0, delay * 2)

    # -- watch handlers (reflector threads) -------------------------------------------------

    def _pv_summary(self, obj):
        m, spec = obj["metadata"], obj.get("spec") or {}
        cr = spec.get("claimRef") or {}
        ann = m.get("annotations") or {}
        return {"uid": m["uid"], "claim_uid": cr.get("uid"),
                "claim": "%s/%s" % (cr.get("namespace"), cr.get("name")),
                "path": (spec.get("hostPath") or {}).get("path"),
                "phase": (obj.get("status") or {}).get("phase"),
                "reclaim": spec.get("persistentVolumeReclaimPolicy"),
                "on_delete": ann.get(ANN_ON_DELETE), "identity": ann.get(ANN_ID),
                "deleting": bool(m.get("deletionTimestamp")), "class": spec.get(
                    "storageClassName")}

    def _pv_added(self, name, s):
        if s["claim_uid"]:
            self.pv_by_claim[s["claim_uid"]] = name
        uids = self.pv_uids.setdefault(name, set())
        if s["uid"] not in uids:
            uids.add(s["uid"])
            self.pv_created += 1
            if len(uids) > 1:
                self.findings.add("duplicated", "pv:" + name,
                                  "PV %s was created %d times (uids %s) for claim %s uid %s"
                                  % (name, len(uids), sorted(uids), s["claim"],
                                     s["claim_uid"]))
        c = self.claims.get(s["claim_uid"])
        if c is not None:
            if name != "pvc-" + c.uid:
                self.findings.add("duplicated", "pvname:" + name,
                                  "PV %s names claim %s but is not pvc-<uid>" % (name, c))
            if c.pv_seen_t is None:
                c.pv_seen_t = now()
                self.unbound.discard(c.uid)
                if c.ready_t is not None:
                    self.latencies.append((c.pv_seen_t, c.pv_seen_t - c.ready_t))
            c.pv_path = s["path"]
            c.pv_on_delete = s["on_delete"]

    def _pv_removed(self, name, s):
        c = self.claims.get(s["claim_uid"])
        if c is not None and not c.deleted:
            self.findings.add("wrong deletions", "pvdel:" + name,
                              "PV %s of live %s was deleted" % (name, c))
        if s["reclaim"] == "Retain":
            self.findings.add("wrong deletions", "pvdel:" + name,
                              "PV %s (reclaim Retain, %s) was deleted" % (name, s["claim"]))

    def on_pv_event(self, typ, obj):
        name = obj["metadata"]["name"]
        s = self._pv_summary(obj)
        with self.lock:
            if typ == "DELETED":
                self.pvs.pop(name, None)
                self._pv_removed(name, s)
            else:
                self.pvs[name] = s
                self._pv_added(name, s)

    def on_pv_replace(self, items):
        with self.lock:
            new = {o["metadata"]["name"]: self._pv_summary(o) for o in items}
            for name, s in list(self.pvs.items()):
                if name not in new or new[name]["uid"] != s["uid"]:
                    self._pv_removed(name, s)
            self.pvs = new
            for name, s in new.items():
                self._pv_added(name, s)

    def _pvc_summary(self, obj):
        m, spec = obj["metadata"], obj.get("spec") or {}
        ann = m.get("annotations") or {}
        return {"uid": m["uid"], "rv": int(m["resourceVersion"]),
                "phase": (obj.get("status") or {}).get("phase"),
                "volume": spec.get("volumeName"), "node": ann.get(SELECTED),
                "class": spec.get("storageClassName"), "deleting": bool(
                    m.get("deletionTimestamp")), "token": (m.get("labels") or {}).get(
                        TOKEN_LABEL)}

    def _pvc_seen(self, key, s):
        c = self.claims.get(s["uid"])
        if c is None:
            return
        if s["phase"] == "Bound" and not c.bound:
            c.bound = True
            heapq.heappush(self.marker_queue, (now(), c.uid))
        if c.node and not s["node"] and not c.deleted and not s["volume"] and \
                s["rv"] > c.sched_rv:
            # A provisioner removed selected-node: the scheduler picks again.
            self.faults["reschedules"] += 1
            c.node = None

    def on_pvc_event(self, typ, obj):
        m = obj["metadata"]
        key = "%s/%s" % (m["namespace"], m["name"])
        s = self._pvc_summary(obj)
        with self.lock:
            if typ == "DELETED":
                cur = self.pvcs.get(key)
                if cur is not None and cur["uid"] == s["uid"]:
                    del self.pvcs[key]
                self._pvc_gone(s["uid"])
            else:
                self.pvcs[key] = s
                self._pvc_seen(key, s)

    def _pvc_gone(self, uid):
        c = self.claims.get(uid)
        if c is None:
            return
        if not c.deleted:
            self.findings.add("lost", "claimgone:" + uid, "%s disappeared while live" % c)
        elif not c.gone:
            c.gone = True
            self.free_names.append((c.ns, c.name))

    def on_pvc_replace(self, items):
        with self.lock:
            new = {}
            for o in items:
                m = o["metadata"]
                new["%s/%s" % (m["namespace"], m["name"])] = self._pvc_summary(o)
            uids = {s["uid"] for s in new.values()}
            for key, s in self.pvcs.items():
                if s["uid"] not in uids:
                    self._pvc_gone(s["uid"])
            self.pvcs = new
            for key, s in new.items():
                self._pvc_seen(key, s)

    # -- load -------------------------------------------------------------------------------

    def pick_class(self):
        cs = list(self.classes.values())
        return self.rng.choices(cs, weights=[c.weight for c in cs])[0]

    def lifetime(self):
        r = self.rng.random()
        if r < self.o.keep_fraction:
            return None                                   # lives to the end
        if r < self.o.keep_fraction + 0.15:
            return self.rng.uniform(0.0, 0.4)             # deleted mid-provisioning
        return self.rng.uniform(1.0, self.o.max_lifetime)

    def unbound_live(self):
        return len(self.unbound)

    def creator(self, idx):
        rng = random.Random(self.o.seed * 1000 + idx)
        while now() < self.hard_end:
            if self.stopping.is_set():
                return
            with self.lock:
                if self.created + self.pending_creates >= self.o.claims:
                    return
                # Pace: the planned rate, and no more than --max-unbound claims waiting.
                ahead = self.created + self.pending_creates - \
                    (now() - self.t0) * self.o.claims / self.o.duration
                backlog = self.unbound_live() + self.pending_creates
                if ahead > 0 or backlog >= self.o.max_unbound:
                    wait_s = 0.05
                else:
                    wait_s = 0
                    self.pending_creates += 1
            if wait_s:
                time.sleep(wait_s)
                continue
            try:
                self.create_one(rng)
            finally:
                with self.lock:
                    self.pending_creates -= 1

    def create_one(self, rng):
        cls = self.pick_class()
        ns = None
        with self.lock:
            if self.free_names and rng.random() < 0.15:
                ns, name = self.free_names.pop(rng.randrange(len(self.free_names)))
            if ns is None:
                self.name_seq += 1
                ns, name = rng.choice(NAMESPACES), "c-%d" % self.name_seq
        token = "%016x" % rng.getrandbits(64)
        c = Claim(ns, name, cls, token)
        nd = None
        if cls.wffc and rng.random() < 0.5:
            nd = rng.choice(self.nodes)
        obj = claim(ns, name, cls.name, size="%dKi" % rng.randint(16, 64),
                    selected_node=nd, labels={TOKEN_LABEL: token})
        try:
            got = self.call("POST", PVCS_PATH % ns, obj, ok=(409,))
        except ApiError as e:
            if e.status != 409:
                raise
            try:
                cur = self.call("GET", PVC_PATH % (ns, name), ok=(404,))
            except ApiError:
                return
            if (cur["metadata"].get("labels") or {}).get(TOKEN_LABEL) != token:
                return  # the name is still taken by an older claim: another name next time
            got = cur   # our create went through before a restart cut its answer
        except RuntimeError as e:
            log("create %s/%s: %s" % (ns, name, e))
            return
        t = now()
        with self.lock:
            c.uid = got["metadata"]["uid"]
            c.created_t = t
            c.node = nd
            c.sched_rv = int(got["metadata"]["resourceVersion"])
            c.ready_t = t if (not cls.wffc or nd) else None
            self.claims[c.uid] = c
            self.by_key[c.key] = c
            self.created += 1
            life = self.lifetime()
            if life is None:
                c.keep = True
            else:
                self.dseq += 1
                heapq.heappush(self.deletions, (t + life, self.dseq, c.uid))
            self.unbound.add(c.uid)
            # A PV may have been seen before we knew the uid.
            name = self.pv_by_claim.get(c.uid)
            if name in self.pvs:
                self._pv_added(name, self.pvs[name])
            s = self.pvcs.get(c.key)
            if s and s["uid"] == c.uid:
                self._pvc_seen(c.key, s)

    def deleter(self):
        for _ in range(10 ** 7):
            if self.stopping.is_set():
                return
            with self.lock:
                due = self.deletions and self.deletions[0][0] <= now()
                if due:
                    _, _, uid = heapq.heappop(self.deletions)
                    c = self.claims[uid]
                    c.deleted = True
                    c.deleted_t = now()
                    self.unbound.discard(uid)
                    marker = (c.marker, c.marker_path)
                elif self.created >= self.o.claims and not self.deletions:
                    return
            if not due:
                time.sleep(0.02)
                continue
            if marker[0]:
                self.check_marker(c, marker[1], marker[0], "before deleting the claim")
            try:
                self.call("DELETE", PVC_PATH % (c.ns, c.name), ok=(404,))
            except ApiError:
                pass
            except RuntimeError as e:
                log("delete %s: %s" % (c, e))
            with self.lock:
                self.deleted += 1

    def check_marker(self, c, path, token, when):
        """The marker file holds what we wrote: else the data was lost or replaced."""
        try:
            with open(os.path.join(path, MARKER)) as f:
                got = f.read()
        except OSError as e:
            got = "(%s)" % e.strerror
        want = "%s %s\n" % (c.uid, token)
        if got != want:
            self.findings.add("wrong deletions", "marker:" + c.uid,
                              "%s: marker in %s %s is %r, wrote %r" % (c, path, when,
                                                                       got[:100], want))
            return False
        return True

    def marker_writer(self):
        """Writes soak-marker into each volume once its claim is bound (retried while the disk
        is full or read-only)."""
        for _ in range(10 ** 8):
            if self.stopping.is_set():
                return
            with self.lock:
                item = None
                if self.marker_queue and self.marker_queue[0][0] <= now():
                    item = heapq.heappop(self.marker_queue)
                if item is None:
                    pass
                else:
                    c = self.claims[item[1]]
                    if c.deleted or c.marker:
                        continue
                    if not c.pv_path:
                        heapq.heappush(self.marker_queue, (now() + 0.5, c.uid))
                        continue
                    try:
                        tok = "%016x" % self.rng.getrandbits(64)
                        p = os.path.join(c.pv_path, MARKER)
                        with open(p, "w") as f:
                            f.write("%s %s\n" % (c.uid, tok))
                        c.marker, c.marker_path = tok, c.pv_path
                    except OSError as e:
                        if e.errno not in (28, 30):  # ENOSPC, EROFS: while the fault lasts
                            log("marker %s: %s" % (c, e))
                        heapq.heappush(self.marker_queue, (now() + 1.0, c.uid))
                    continue
            time.sleep(0.05)

    def scheduler(self):
        """The scheduler's part: a WaitForFirstConsumer claim without selected-node gets one
        (a random node) a moment after it was created or after a provisioner removed it."""
        for _ in range(10 ** 7):
            if self.stopping.wait(0.3):
                return
            todo = []
            with self.lock:
                for key, s in self.pvcs.items():
                    c = self.claims.get(s["uid"])
                    if c is None or c.deleted or not c.cls.wffc or s["node"] or s["volume"] \
                            or c.node or s["rv"] < c.sched_rv:
                        continue
                    todo.append(c)
            for c in todo:
                nd = self.rng.choice(self.nodes)
                try:
                    got = self.call("PATCH", PVC_PATH % (c.ns, c.name),
                                    {"metadata": {"annotations": {SELECTED: nd}}},
                                    content_type="application/merge-patch+json", ok=(404, 409),
                                    deadline=5)
                except (ApiError, RuntimeError):
                    continue
                with self.lock:
                    c.node = nd
                    c.sched_rv = max(c.sched_rv, int(got["metadata"]["resourceVersion"]))
                    if c.ready_t is None:
                        c.ready_t = now()

    # -- faults -----------------------------------------------------------------------------

    def install_api_faults(self):
        per = self.o.fault_rate / 4.0
        for status, ra in ((500, None), (503, 1), (429, 1), (409, None)):
            self.api.fail_next("POST,PUT,PATCH,DELETE", "/", status=status, count=0,
                               retry_after=ra, probability=per, user_agent=PROV_UA)

    def api_fault_hits(self):
        try:
            fs = self.api.admin("GET", "faults")["faults"]
        except (ApiError, OSError):
            return None
        return sum(f["hits"] for f in fs)

    def leader_proc(self):
        try:
            lease = self.api.get(LEASE_PATH % ("default", DEPLOY_PROV.replace("/", "-")))
        except (ApiError, OSError):
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        for p in self.procs:
            if p.group == "deploy" and p.alive():
                ids = re.findall(r"leader election on lease=\S+ identity=(\S+)", p.log)
                if ids and ids[-1] == holder:
                    return p
        return None

    def pick_victim(self):
        """The Deployment's leader half of the time, else any running provisioner."""
        victim = None
        if self.rng.random() < 0.5:
            victim = self.leader_proc()
        if victim is None:
            alive = [p for p in self.procs if p.alive()]
            if alive:
                victim = self.rng.choice(alive)
        return victim

    def kill_one(self):
        victim = self.pick_victim()
        if victim is None:
            return
        pid = victim.pid
        with self.lock:
            self.killed_pids.add(pid)
        self.sample_rss(victim)
        victim.kill9()
        self.faults["kills"] += 1
        log("fault: kill -9 %s pid %d" % (victim.name, pid))
        time.sleep(self.rng.uniform(0.2, 2.0))
        self.start_proc(victim)

    def stop_one(self):
        """A graceful stop, as a rolling update makes one: SIGTERM, then exit 0 with
        "main: stopped" within 35 s (the provisioner's own deadline is 30 s), whatever it was
        doing; then a restart."""
        victim = self.pick_victim()
        if victim is None:
            return
        pid = victim.pid
        with self.lock:
            self.killed_pids.add(pid)  # its exit is ours: the supervisor leaves it alone
        self.sample_rss(victim)
        log("fault: SIGTERM %s pid %d" % (victim.name, pid))
        t0 = now()
        try:
            code = victim.stop(timeout=35)
        except TimeoutError as e:
            code = None
            self.findings.add("crashes", "sigterm:%d" % pid, str(e))
        since = read_text(victim.log_path)[getattr(victim, "log_start", 0):]
        if code is not None and (code != 0 or not re.search(r"main: stopped", since)):
            self.findings.add("crashes", "sigterm:%d" % pid,
                              "%s pid %d exited %s on SIGTERM (not 0 with \"main: stopped\"); "
                              "log tail:\n%s" % (victim.name, pid, code, since[-1500:]))
        self.faults["stops"] += 1
        log("%s pid %d stopped in %.2fs (exit %s)" % (victim.name, pid, now() - t0, code))
        time.sleep(self.rng.uniform(0.2, 2.0))
        self.start_proc(victim)

    def start_proc(self, p):
        """(Re)starts a provisioner; with --crashpoints, armed to kill itself at a random step
        of its filesystem work (HOSTPATH_TEST_CRASH_AT) while the budget lasts."""
        p.env = None
        p.armed = None
        if self.o.crashpoints and not self.load_done.is_set() and \
                self.armed_total < self.o.crashpoints and self.rng.random() < 0.5:
            p.armed = "%s:%d" % (self.rng.choice(CRASH_STEPS), self.rng.randint(1, 12))
            p.env = {"HOSTPATH_TEST_CRASH_AT": p.armed}
            self.armed_total += 1
        try:
            p.log_start = os.path.getsize(p.log_path)
        except OSError:
            p.log_start = 0
        p.start()
        log("started %s pid %d%s" % (p.name, p.pid, " armed " + p.armed if p.armed else ""))

    def supervisor(self):
        """Restarts a provisioner that exited without being killed by us, and counts it as a
        crash unless it refused to start on a read-only disk while that fault lasted."""
        for _ in range(10 ** 7):
            if self.stopping.wait(0.5) or self.finishing.is_set():
                return
            for p in self.procs:
                if self.finishing.is_set():
                    return
                if p.proc is None or p.proc.poll() is None:
                    continue
                pid, code = p.proc.pid, p.proc.returncode
                with self.lock:
                    ours = pid in self.killed_pids
                if ours:
                    continue
                tail = p.log[-3000:]
                since = read_text(p.log_path)[getattr(p, "log_start", 0):]
                if getattr(p, "armed", None) and re.search(r"crashpoint: \S+ reached", since):
                    self.faults["kills"] += 1
                    self.faults["crashpoint_kills"] += 1
                    log("fault: %s pid %d killed itself at %s" % (p.name, pid, p.armed))
                    with self.lock:
                        self.killed_pids.add(pid)
                    if not self.stopping.is_set():
                        self.start_proc(p)
                    continue
                refused = re.search(r"is not writable by this process|cannot be used", tail)
                if refused and (self.fs_active["ro"] or self.fs_recent("ro")):
                    self.start_refusals += 1
                    log("%s pid %d refused to start on the read-only disk (exit %s)"
                        % (p.name, pid, code))
                    with self.lock:
                        self.killed_pids.add(pid)
                    time.sleep(1.0)
                else:
                    self.findings.add("crashes", "pid:%d" % pid,
                                      "%s pid %d exited with %s, not killed by us; log tail:\n%s"
                                      % (p.name, pid, code, tail[-1500:]))
                    with self.lock:
                        self.killed_pids.add(pid)
                if not self.stopping.is_set():
                    self.start_proc(p)

    def fs_recent(self, kind, slack=15.0):
        t = time.time()
        return any(k == kind and s - 1 <= t <= e + slack for k, s, e in self.fs_windows)

    def fill_disk(self, n, secs):
        disk, mounted = self.disks[n]
        if not mounted:
            return
        path = os.path.join(disk, "filler")
        start = time.time()
        self.fs_active["full"] = True
        try:
            with open(path, "wb") as f:
                st = os.statvfs(disk)
                free = st.f_bavail * st.f_frsize
                try:
                    os.posix_fallocate(f.fileno(), 0, max(4096, free))
                except OSError:
                    pass
                chunk = b"\0" * 65536
                for _ in range(100000):
                    try:
                        f.write(chunk)
                        f.flush()
                    except OSError:
                        break
            self.faults["disk_full"] += 1
            log("fault: %s full (%s)" % (disk, os.statvfs(disk).f_bavail))
            self.stopping.wait(secs)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
            self.fs_active["full"] = False
            self.fs_windows.append(("full", start, time.time()))
            log("fault: %s freed" % disk)

    def remount(self, disk, mode):
        for _ in range(50):
            r = subprocess.run(["mount", "-o", "remount,%s" % mode, disk], capture_output=True,
                               text=True, timeout=30)
            if r.returncode == 0:
                return True
            time.sleep(0.1)
        log("remount %s %s failed: %s" % (disk, mode, r.stderr.strip()))
        return False

    def read_only(self, n, secs):
        disk, mounted = self.disks[n]
        if not mounted:
            return
        start = time.time()
        if not self.remount(disk, "ro"):
            return
        self.fs_active["ro"] = True
        self.faults["read_only"] += 1
        log("fault: %s read-only" % disk)
        try:
            self.stopping.wait(secs)
        finally:
            for _ in range(20):
                if self.remount(disk, "rw"):
                    break
            self.fs_active["ro"] = False
            self.fs_windows.append(("ro", start, time.time()))
            log("fault: %s writable again" % disk)

    def restart_api(self):
        hits = self.api_fault_hits() or 0
        self.api_fault_base += hits
        log("fault: API server restart")
        self.api.restart()
        self.faults["api_restarts"] += 1
        if not self.load_done.is_set():
            self.install_api_faults()

    def churn_class(self):
        cs = [c for c in self.classes.values() if c.churn]
        c = self.rng.choice(cs)
        try:
            self.call("DELETE", SC_PATH % c.name, ok=(404,))
        except (ApiError, RuntimeError):
            return
        self.faults["class_churn"] += 1
        log("fault: class %s deleted" % c.name)
        self.stopping.wait(self.rng.uniform(1.0, 4.0))
        c.generation += 1
        for _ in range(100):
            try:
                self.call("POST", SCS_PATH, c.obj(), ok=(409,))
                break
            except ApiError:
                time.sleep(0.2)   # the old one may still be going
            except RuntimeError:
                time.sleep(0.5)
        log("fault: class %s re-created (onDelete %s)" % (c.name, c.current_on_delete()))

    def watch_closer(self):
        for i in range(10 ** 7):
            if self.load_done.wait(1.0):
                return
            try:
                self.api.close_watches(abrupt=bool(i % 2), user_agent=PROV_UA)
                self.faults["watch_closes"] += 1
            except (ApiError, OSError):
                pass

    def chaos(self):
        """The fault timeline of the load phase."""
        o = self.o
        D = o.duration
        events = []
        for i in range(o.kills):
            events.append(((i + 1) * o.kill_every, "kill"))
        for i in range(o.stops):
            events.append(((i + 0.5) * o.stop_every, "stop"))
        t = 60.0
        while t < D:
            events.append((t, "compact"))
            t += 60.0
        events.append((D * 0.45, "restart"))
        events.append((D * 0.25, "full"))
        events.append((D * 0.60, "ro"))
        n_churn = max(2, int(D / 40))
        for i in range(n_churn):
            events.append((D * (i + 0.5) / n_churn, "churn"))
        events.sort()
        bg = []
        for at, what in events:
            while now() - self.t0 < at:
                if self.stopping.wait(0.2):
                    return
            try:
                if what == "kill":
                    self.kill_one()
                elif what == "stop":
                    self.stop_one()
                elif what == "compact":
                    self.api.compact()
                    self.faults["compactions"] += 1
                    log("fault: history compacted")
                elif what == "restart":
                    self.restart_api()
                elif what == "full":
                    th = threading.Thread(target=self.fill_disk,
                                          args=(self.nodes[0], o.fs_fault_secs), daemon=True)
                    th.start()
                    bg.append(th)
                elif what == "ro":
                    th = threading.Thread(target=self.read_only,
                                          args=(self.nodes[-1], o.fs_fault_secs), daemon=True)
                    th.start()
                    bg.append(th)
                elif what == "churn":
                    th = threading.Thread(target=self.churn_class, daemon=True)
                    th.start()
                    bg.append(th)
            except Exception:
                log("chaos %s: %s" % (what, traceback.format_exc()))
        for th in bg:
            th.join(o.fs_fault_secs + 60)

    # -- continuous checks ------------------------------------------------------------------

    def sampler(self):
        """Every second: the directory (and marker) of every live bound claim's PV exists."""
        for _ in range(10 ** 7):
            if self.stopping.wait(1.0):
                return
            with self.lock:
                live = [(c, c.pv_path, c.marker) for c in self.claims.values()
                        if not c.deleted and c.bound and c.pv_path]
            for c, path, marker in live:
                if os.path.isdir(path):
                    continue
                with self.lock:
                    if c.deleted:
                        continue
                if not os.path.isdir(path):
                    self.findings.add("wrong deletions", "dir:" + c.uid,
                                      "directory %s of live %s is missing" % (path, c))

    def audit(self, final=False):
        """Directories vs PVs vs journal. Returns (orphans, journal problems) as
        [(key, message)]. A directory exists from before its record is written (staging is
        in the journal) to after its record goes, so a miss is real if it persists."""
        with self.lock:
            pvs = dict(self.pvs)
        by_path = {}
        problems = []
        for name, s in pvs.items():
            if s["path"]:
                by_path.setdefault(s["path"], []).append(name)
        for path, names in by_path.items():
            if len(names) > 1:
                problems.append(("duplicated", "path:" + path,
                                 "PVs %s share the directory %s" % (sorted(names), path)))
        for ident, root in self.roots.items():
            recs = journal_records(root)
            accounted = set()
            parents = set()
            rec_paths = {}
            for pv, r in recs.items():
                st = r.get("state")
                p = r.get("path")
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
                if st == "archived" and not os.path.isdir(os.path.join(root,
                                                                       r.get("archivedAs", ""))):
                    problems.append(("wrong deletions", "recdir:%s:%s" % (root, pv),
                                     "record %s archived as %s under %s: missing"
                                     % (pv, r.get("archivedAs"), root)))
                if not final:
                    continue
                if st in ("creating", "deleting"):
                    problems.append(("orphans", "rec:" + pv, "record %s under %s is still %s "
                                     "after settle" % (pv, root, st)))
                elif st == "created":
                    s = pvs.get(pv)
                    if s is None:
                        problems.append(("orphans", "rec:" + pv,
                                         "record %s under %s is 'created' but the PV is gone"
                                         % (pv, root)))
                    elif s["path"] != os.path.join(root, p):
                        problems.append(("duplicated", "rec:" + pv,
                                         "record %s says %s, PV says %s" % (pv, p, s["path"])))
            for p, names in rec_paths.items():
                live = [n for n in names if recs[n].get("state") != "archived"]
                if len(live) > 1:
                    problems.append(("duplicated", "recpath:%s:%s" % (root, p),
                                     "records %s all own %s under %s" % (sorted(live), p, root)))
            try:
                pdir = os.path.join(root, JOURNAL_DIR, "parents")
                for f in os.listdir(pdir):
                    parents.add(read_text(os.path.join(pdir, f)).strip())
            except OSError:
                pass
            for name, s in pvs.items():
                if s["path"] and s["path"].startswith(root + "/"):
                    accounted.add(os.path.relpath(s["path"], root))
            ancestors = set()
            for p in accounted | parents:
                parts = p.split("/")
                for i in range(1, len(parts)):
                    ancestors.add("/".join(parts[:i]))
            for rel in walk_dirs(root, accounted):
                if rel in accounted or rel in parents or rel in ancestors:
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

    def auditor(self):
        took = 0.0
        for _ in range(10 ** 7):
            # At most a tenth of the time on auditing: the journal grows with retained volumes.
            if self.stopping.wait(max(self.o.audit_every, 10 * took)):
                return
            t = now()
            try:
                found = self.audit()
            except Exception:
                log("audit: %s" % traceback.format_exc())
                continue
            took = now() - t
            t = now()
            keys = set()
            # A disk fault stalls the settling of what it caught (retries back off, a claim
            # given up waits for the resync): that root is judged at the end only.
            faulted = [self.roots[n] for n in self.nodes
                       if self.fs_active["full"] or self.fs_active["ro"] or
                       self.fs_recent("full", 150) or self.fs_recent("ro", 150)]
            for kind, key, msg in found:
                if any(r + "/" in key or key.endswith(r) for r in faulted):
                    continue
                keys.add(key)
                first = self.suspects.setdefault(key, t)
                # Seen in audits a minute apart: not an operation in flight.
                if t - first >= 60.0:
                    self.findings.add(kind, key, msg + " (for %.0f s while running)"
                                      % (t - first))
            for k in list(self.suspects):
                if k not in keys:
                    del self.suspects[k]

    def sample_rss(self, p=None):
        procs = [p] if p else self.procs
        for q in procs:
            if q is None or q.pid is None:
                continue
            kb = vm_hwm(q.pid)
            if kb:
                self.rss[q.name] = max(self.rss.get(q.name, 0), kb)
        if p is None and self.api.proc is not None:
            kb = vm_hwm(self.api.proc.pid)
            if kb:
                self.rss["apiserver"] = max(self.rss.get("apiserver", 0), kb)

    def reporter(self):
        last = now()
        for i in range(10 ** 7):
            if self.stopping.wait(5.0):
                return
            try:
                self.sample_rss()
            except Exception:
                pass
            if now() - last >= self.o.report_every:
                last = now()
                self.report_line()

    def fault_total(self):
        hits = None if self.load_done.is_set() else self.api_fault_hits()
        if hits is not None:
            self.faults["api_faults"] = self.api_fault_base + hits
        f = self.faults
        return (f["watch_closes"] + f["api_faults"] + f["compactions"] + f["api_restarts"] +
                f["disk_full"] + f["read_only"] + f["class_churn"] + f["stops"])

    def report_line(self, window=60.0):
        total = self.fault_total()
        with self.lock:
            live = sum(1 for c in self.claims.values() if not c.deleted)
            bound = sum(1 for c in self.claims.values() if not c.deleted and c.bound)
            t = now()
            recent = sorted(v for (at, v) in self.latencies if at >= t - window)
            npv = len(self.pvs)
            created, deleted = self.created, self.deleted
        f = self.faults
        say("soak: [%s] claims created %d deleted %d live %d bound %d | PVs %d (%d made) | "
            "kills %d%s, faults %d (SIGTERM %d, api %d, watch closes %d, compactions %d, "
            "restarts %d, disk full %d, read-only %d, class churn %d) | claim->PV p50 %s p99 %s "
            "(%d)"
            % (fmt_t(now() - self.t0), created, deleted, live, bound, npv, self.pv_created,
               f["kills"], " (%d at crashpoints)" % f["crashpoint_kills"]
               if f["crashpoint_kills"] else "", total, f["stops"], f["api_faults"],
               f["watch_closes"], f["compactions"],
               f["api_restarts"], f["disk_full"], f["read_only"], f["class_churn"],
               fmt_ms(pct(recent, 50)), fmt_ms(pct(recent, 99)), len(recent)))

    # -- the run ----------------------------------------------------------------------------

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

    internal_error = False

    def run(self):
        o = self.o
        say("soak: %d claims over ~%ds, %d kills (every %.0fs), %d Deployment replicas + %d "
            "nodes, workdir %s" % (o.claims, o.duration, o.kills, o.kill_every, o.replicas,
                                   o.nodes, self.tmp))
        self.setup()
        self.t0 = now()
        self.hard_end = self.t0 + o.duration * 4 + 600
        self.install_api_faults()
        creators = [self.spawn(self.creator, i, name="creator-%d" % i) for i in range(o.threads)]
        deleters = [self.spawn(self.deleter, name="deleter-%d" % i) for i in range(2)]
        for fn in (self.marker_writer, self.scheduler, self.supervisor, self.sampler,
                   self.auditor, self.reporter):
            self.spawn(fn)
        closer = self.spawn(self.watch_closer)
        chaos = self.spawn(self.chaos)
        for th in creators + deleters + [chaos]:
            th.join(max(1.0, self.hard_end - now()))
        load_secs = now() - self.t0
        self.fault_total()
        self.load_done.set()   # the API fault count is final from here
        closer.join(5)
        self.api.clear_faults()
        say("soak: load phase over after %s: %d claims created, %d deleted; settling"
            % (fmt_t(load_secs), self.created, self.deleted))
        settled = self.settle()
        self.report_line(window=load_secs + 600)
        self.final_checks(settled)
        return self.finish(load_secs)

    def settle(self):
        """Waits until the provisioners are done: live claims bound, gone claims' PVs gone
        (Delete) or Released (Retain), no record creating or deleting."""
        end = now() + self.o.settle
        what = ""
        for _ in range(100000):
            if now() >= end:
                say("soak: not settled after %ds: %s" % (self.o.settle, what))
                return False
            time.sleep(2.0)
            with self.lock:
                live_unbound = [c for c in self.claims.values()
                                if not c.deleted and not (c.bound and c.pv_seen_t)]
                gone_pvs = [n for n, s in self.pvs.items()
                            if s["reclaim"] == "Delete" and s["claim_uid"] in self.claims and
                            self.claims[s["claim_uid"]].deleted]
                present = [c for c in self.claims.values() if c.deleted and not c.gone]
            # A claim made and deleted while our watch was down was never seen going: ask.
            for c in present[:50]:
                try:
                    got = self.call("GET", PVC_PATH % (c.ns, c.name), ok=(404,), deadline=5)
                    gone = got["metadata"]["uid"] != c.uid
                except ApiError:
                    gone = True
                except RuntimeError:
                    gone = False
                if gone:
                    with self.lock:
                        self._pvc_gone(c.uid)
            with self.lock:
                present = [c for c in self.claims.values() if c.deleted and not c.gone]
            busy = []
            for ident, root in self.roots.items():
                for pv, r in journal_records(root).items():
                    if r.get("state") in ("creating", "deleting"):
                        busy.append(pv)
            what = ("%d live claims not bound (first: %s), %d PVs of deleted claims "
                    "(first: %s), %d deleted claims still present, %d records in flight"
                    % (len(live_unbound), live_unbound[:1], len(gone_pvs), gone_pvs[:1],
                       len(present), len(busy)))
            if not live_unbound and not gone_pvs and not present and not busy:
                # One more round for the orphan sweep and the last watch events.
                time.sleep(3.0)
                say("soak: settled")
                return True
        return False

    def final_checks(self, settled):
        F = self.findings
        # Fresh views from the API server (our watches may lag).
        pvs_list = self.call("GET", PVS_PATH)["items"]
        with self.lock:
            self.on_pv_replace(pvs_list)
            pvs = dict(self.pvs)
            claims = list(self.claims.values())
        pvcs = {}
        for o in self.call("GET", ALL_PVCS_PATH)["items"]:
            pvcs[o["metadata"]["uid"]] = o
        by_claim = {}
        for name, s in pvs.items():
            by_claim.setdefault(s["claim_uid"], []).append(name)
            root = self.roots.get(s["identity"])
            if root is None or not (s["path"] or "").startswith(root + "/"):
                F.add("duplicated", "owner:" + name, "PV %s (identity %s) has its directory "
                      "%s outside that identity's --pv-dir %s" % (name, s["identity"],
                                                                  s["path"], root))
        recs = {}
        for ident, root in self.roots.items():
            for pv, r in journal_records(root).items():
                recs[pv] = (root, r)
        for c in claims:
            mine = by_claim.get(c.uid, [])
            pvname = "pvc-" + c.uid
            if not c.deleted:
                obj = pvcs.get(c.uid)
                if obj is None:
                    F.add("lost", "claim:" + c.uid, "%s is gone from the API server" % c)
                    continue
                if len(mine) != 1:
                    F.add("lost" if not mine else "duplicated", "claim:" + c.uid,
                          "%s has %d PVs %s after settle (phase %s)"
                          % (c, len(mine), mine, (obj.get("status") or {}).get("phase")))
                    continue
                s = pvs[mine[0]]
                if (obj.get("status") or {}).get("phase") != "Bound" or \
                        obj["spec"].get("volumeName") != mine[0]:
                    F.add("lost", "claim:" + c.uid, "%s is %s with volumeName %r, PV %s"
                          % (c, (obj.get("status") or {}).get("phase"),
                             obj["spec"].get("volumeName"), mine[0]))
                if not s["path"] or not os.path.isdir(s["path"]):
                    F.add("wrong deletions", "dir:" + c.uid, "directory %s of live %s missing"
                          % (s["path"], c))
                elif c.marker:
                    self.check_marker(c, c.marker_path, c.marker, "at the end")
                if pvname not in recs:
                    F.add("orphans", "norec:" + pvname, "PV %s of live %s has no ownership "
                          "record" % (pvname, c))
                continue
            # A deleted claim: what remains is what its policy says.
            if c.uid in pvcs:
                F.add("orphans", "claim:" + c.uid, "deleted %s is still present" % c)
            policy = c.pv_on_delete or (recs.get(pvname, (None, {}))[1].get("onDelete"))
            root, rec = recs.get(pvname, (None, None))
            if c.cls.reclaim == "Retain":
                if c.pv_seen_t is not None and not mine:
                    F.add("wrong deletions", "retainpv:" + c.uid,
                          "PV %s of %s (reclaim Retain) is gone" % (pvname, c))
                if c.marker:
                    self.check_marker(c, c.marker_path, c.marker, "after release (Retain)")
                continue
            if mine:
                F.add("orphans", "pv:" + pvname, "PV %s of deleted %s (reclaim Delete) "
                      "still exists (phase %s)" % (pvname, c, pvs[mine[0]]["phase"]))
            if policy == "retain":
                if c.marker:
                    self.check_marker(c, c.marker_path, c.marker, "in the retained directory")
                if rec is not None and rec.get("state") != "retained":
                    F.add("orphans", "rec:" + pvname, "record %s of deleted %s is %s, not "
                          "retained" % (pvname, c, rec.get("state")))
                elif rec is None and c.marker:
                    F.add("wrong deletions", "rec:" + pvname, "retained volume %s of %s has "
                          "no record" % (pvname, c))
            elif policy == "archive":
                if c.marker:
                    if rec is None or rec.get("state") != "archived":
                        F.add("wrong deletions", "rec:" + pvname,
                              "archived volume %s of %s: record %s"
                              % (pvname, c, rec and rec.get("state")))
                    else:
                        self.check_marker(c, os.path.join(root, rec["archivedAs"]), c.marker,
                                          "in the archived directory")
                    if os.path.lexists(c.marker_path):
                        F.add("orphans", "dir:" + c.marker_path, "%s of archived %s is still "
                              "there" % (c.marker_path, c))
                elif rec is not None and rec.get("state") != "archived":
                    F.add("orphans", "rec:" + pvname, "record %s of deleted %s is %s"
                          % (pvname, c, rec.get("state")))
            else:
                if rec is not None:
                    F.add("orphans", "rec:" + pvname, "record %s of deleted %s (%s) remains: "
                          "%s" % (pvname, c, policy, rec.get("state")))
                if c.pv_path and os.path.lexists(c.pv_path):
                    F.add("orphans", "dir:" + c.pv_path, "directory %s of deleted %s "
                          "(onDelete %s) remains" % (c.pv_path, c, policy))
        for kind, key, msg in self.audit(final=True):
            F.add(kind, key, msg)
        if not settled:
            F.add("orphans", "settle", "the provisioners did not settle within %ds"
                  % self.o.settle)

    def finish(self, load_secs):
        F = self.findings
        self.sample_rss()
        self.finishing.set()
        for th in self.threads:
            if th.name == "supervisor":
                th.join(5)
        # Every provisioner stops cleanly on SIGTERM.
        for p in self.procs:
            if p.alive():
                pid = p.pid
                try:
                    code = p.stop(timeout=15)
                except TimeoutError as e:
                    F.add("crashes", "stop:%s" % p.name, str(e))
                    continue
                if code != 0:
                    F.add("crashes", "stop:%s" % p.name, "%s pid %d exited %s on SIGTERM"
                          % (p.name, pid, code))
            else:
                F.add("crashes", "dead:%s" % p.name, "%s was not running at the end" % p.name)
        self.stopping.set()
        self.pv_ref.stop()
        self.pvc_ref.stop()
        self.scan_logs()
        total = self.fault_total() if self.api.alive() else None
        f = self.faults
        if total is None:
            total = (f["watch_closes"] + f["api_faults"] + f["compactions"] +
                     f["api_restarts"] + f["disk_full"] + f["read_only"] + f["class_churn"])
        self.api.stop()
        if any(F.items.values()):
            self.keep_disks()
        self.unmount_all()
        with self.lock:
            lat = sorted(v for _, v in self.latencies)
        summary = {
            "claims": self.created, "deleted": self.deleted, "kills": f["kills"],
            "faults": total, "fault_detail": dict(f), "load_seconds": round(load_secs),
            "total_seconds": round(now() - self.t0), "pvs_created": self.pv_created,
            "latency_p50_ms": lat and round(pct(lat, 50) * 1000),
            "latency_p99_ms": lat and round(pct(lat, 99) * 1000),
            "latency_max_ms": lat and round(lat[-1] * 1000),
            "peak_rss_kib": dict(sorted(self.rss.items())),
            "start_refusals_read_only": self.start_refusals,
            "counts": {k: F.count(k) for k in F.KINDS},
        }
        if self.o.summary:
            with open(self.o.summary, "w") as fh:
                json.dump(summary, fh, indent=1)
        say("soak: took %s (load %s); claim->PV p50 %s p99 %s max %s over %d claims; "
            "peak RSS %s" % (fmt_t(now() - self.t0), fmt_t(load_secs),
                             fmt_ms(pct(lat, 50)), fmt_ms(pct(lat, 99)),
                             fmt_ms(lat[-1] if lat else None), len(lat),
                             ", ".join("%s %.1f MiB" % (k, v / 1024.0)
                                       for k, v in sorted(self.rss.items()))))
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
            "%d orphans" % (self.created, f["kills"], total, F.count("lost"),
                            F.count("duplicated"), F.count("wrong deletions"),
                            F.count("orphans")))
        return 1 if bad else 0

    def scan_logs(self):
        """Sanitizer reports, and ERROR lines no injected fault explains."""
        seen = set()
        shapes = {}
        for p in self.procs:
            if p.log_path in seen:
                continue
            seen.add(p.log_path)
            text = read_text(p.log_path)
            m = re.search(SANITIZER, text)
            if m:
                i = m.start()
                self.findings.add("crashes", "san:" + p.name, "sanitizer report in %s: %s"
                                  % (p.name, text[i:i + 1500]))
            for line in text.splitlines():
                if not (line.startswith("E") or '"level":"error"' in line):
                    continue
                if explained(line):
                    continue
                # Grouped by what the line says, whatever object it names.
                shape = re.sub(r"\d+", "N", Findings.UID.sub("U", line.split("] ", 1)[-1]))
                first = shapes.setdefault(shape, [0, p.name, line[:600]])
                first[0] += 1
        for shape, (n, name, line) in shapes.items():
            self.findings.add("errors", "err:" + shape,
                              "%d line(s) like %s: %s" % (n, name, line))

    def keep_disks(self):
        """The node disks are tmpfs: keep their journals and a listing for the post-mortem."""
        for n in self.nodes:
            root = self.roots[n]
            dst = os.path.join(self.tmp, "kept-" + n)
            try:
                shutil.copytree(os.path.join(root, JOURNAL_DIR), os.path.join(dst, JOURNAL_DIR),
                                symlinks=True)
            except (OSError, shutil.Error) as e:
                log("keeping the journal of %s: %s" % (n, e))
            with open(os.path.join(self.tmp, "listing-%s.txt" % n), "w") as f:
                for rel in sorted(walk_dirs(root, set())):
                    f.write(rel + "\n")

    def unmount_all(self):
        for m in reversed(self.mounts):
            if subprocess.run(["umount", m], capture_output=True, timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
        self.mounts = []

    def cleanup(self, ok):
        self.stopping.set()
        for p in self.procs:
            if p.alive():
                try:
                    p.kill9()
                except Exception:
                    pass
        if self.api is not None:
            self.api.stop()
        self.unmount_all()
        if ok and not self.o.keep and not self.o.workdir:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            say("soak: logs and disks kept in %s" % self.tmp)


# ERROR lines an injected fault explains: a disk that was full or read-only, a write the API
# server failed on purpose, a provisioner killed mid-way.
EXPLAINED = [
    r"No space left on device",
    r"Read-only file system",
    r"HTTP (409|429|500|503)\b",
    r"injected fault",
    r"is not writable by this process",
]


def explained(line):
    return any(re.search(p, line) for p in EXPLAINED)


def walk_dirs(root, stop_at):
    """Relative paths of the directories under root (not the journal), not descending into
    the ones in stop_at (a volume's contents are its user's)."""
    out = []
    todo = [""]
    for _ in range(1000000):
        if not todo:
            break
        rel = todo.pop()
        try:
            names = os.listdir(os.path.join(root, rel))
        except OSError:
            continue
        for n in names:
            if not rel and n == JOURNAL_DIR:
                continue
            r = os.path.join(rel, n) if rel else n
            if os.path.isdir(os.path.join(root, r)) and \
                    not os.path.islink(os.path.join(root, r)):
                out.append(r)
                if r not in stop_at:
                    todo.append(r)
    return out


def vm_hwm(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def wait(pred, timeout, what):
    end = now() + timeout
    while now() < end:
        if pred():
            return True
        time.sleep(0.1)
    raise TimeoutError("timed out waiting for " + what)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("HP_BINARY"),
                    help="the provisioner (default $HP_BINARY)")
    ap.add_argument("--short", action="store_true",
                    help="the CI soak: 1,000 claims, 3 kills, about 2 minutes")
    ap.add_argument("--claims", type=int, help="claims created (10000; --short 1000)")
    ap.add_argument("--kills", type=int, help="kill -9 of a provisioner (10; --short 3)")
    ap.add_argument("--duration", type=float,
                    help="planned load phase in seconds: claims are created at claims/duration "
                    "per second at most (1200; --short 100)")
    ap.add_argument("--kill-every", type=float, help="seconds (duration/(kills+1))")
    ap.add_argument("--stops", type=int, help="graceful stops (SIGTERM) of a provisioner, "
                    "each checked to exit 0, and a restart (as many as --kills)")
    ap.add_argument("--threads", type=int, default=4, help="client threads creating claims")
    ap.add_argument("--replicas", type=int, default=3, help="Deployment replicas")
    ap.add_argument("--nodes", type=int, default=2, help="per-node instances")
    ap.add_argument("--max-unbound", type=int, default=150,
                    help="at most this many live claims waiting for a PV (backpressure)")
    ap.add_argument("--max-lifetime", type=float, help="seconds a claim lives at most (40; "
                    "--short 20)")
    ap.add_argument("--keep-fraction", type=float, default=0.05,
                    help="claims never deleted (checked at the end)")
    ap.add_argument("--fault-rate", type=float, default=0.10,
                    help="fraction of the provisioners' writes failed (500/503/429/409)")
    ap.add_argument("--fs-fault-secs", type=float, help="disk full / read-only for this long "
                    "(20; --short 10)")
    ap.add_argument("--disk-size", default="64m", help="each node's tmpfs")
    ap.add_argument("--no-fs-faults", action="store_true", help="no tmpfs, no disk faults")
    ap.add_argument("--settle", type=float, help="seconds to wait for the provisioners to "
                    "finish after the load (300; --short 150)")
    ap.add_argument("--resync", default="1m", help="--resync-period of the provisioners")
    ap.add_argument("--verbosity", type=int, default=2, help="--v of the provisioners")
    ap.add_argument("--history", type=int, default=20000, help="API server watch history")
    ap.add_argument("--audit-every", type=float, default=5.0)
    ap.add_argument("--report-every", type=float, default=60.0)
    ap.add_argument("--provisioner-arg", action="append", help="extra provisioner flag")
    ap.add_argument("--crashpoints", type=int, default=0,
                    help="also arm this many (re)starts to kill -9 themselves at a random step "
                    "of provisioning or deletion (HOSTPATH_TEST_CRASH_AT), on top of --kills")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", help="work here (kept) instead of a temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--summary", help="write a JSON summary here")
    o = ap.parse_args(argv)
    short = o.short
    o.claims = o.claims or (1000 if short else 10000)
    o.kills = o.kills if o.kills is not None else (3 if short else 10)
    o.duration = o.duration or (100.0 if short else 1200.0)
    o.kill_every = o.kill_every or o.duration / (o.kills + 1)
    o.stops = o.stops if o.stops is not None else o.kills
    o.stop_every = o.duration / (o.stops + 1)
    o.max_lifetime = o.max_lifetime or (20.0 if short else 40.0)
    o.fs_fault_secs = o.fs_fault_secs or (10.0 if short else 20.0)
    o.settle = o.settle or (150.0 if short else 300.0)
    if o.seed is None:
        o.seed = random.randrange(1 << 30)
    return o


def main(argv=None):
    global LOG_FILE
    o = parse_args(argv)
    if not o.binary or not (os.path.isfile(o.binary) and os.access(o.binary, os.X_OK)):
        print("SKIPPED: provisioner binary not found: %r (--binary or HP_BINARY)" % o.binary)
        return 77
    soak = Soak(o)
    LOG_FILE = open(os.path.join(soak.tmp, "soak.log"), "a")
    say("soak: seed %d" % o.seed)
    code = 1
    try:
        code = soak.run()
    except Exception:
        say("soak: aborted:\n%s" % traceback.format_exc())
        code = 1
    finally:
        soak.cleanup(code == 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
