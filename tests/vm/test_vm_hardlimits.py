"""Hard limits end to end against a real kernel: the real provisioner binary, the local API
server (tests/integration/apiserver.py) and XFS and ext4 scratch disks made for project quotas,
all inside the test VM (tests/vm/README.md). No pods: the tests write into the volumes
themselves, as uid 65534 without CAP_SYS_RESOURCE, as a pod's process would.

    meson test -C build --suite vm                  (the test "hardlimits_vm")

Inside the VM it expects (tests/meson.build passes them): HP_VM=1, HP_BINARY, HP_QUOTA_SHOW
(tests/vm/quota_show.c), and the disks /mnt/xfs (XFS, -o prjquota), /mnt/ext4 (ext4 -O
quota,project, -o prjquota) and /mnt/ext4-plain (ext4 without project quotas).

What it checks, on XFS and on ext4:
- a claim provisions on a path with hardLimits: its record names a project ID, its directory
  carries it (with inheritance), its limit is the claim's size; two volumes never share an ID;
- writing past the size fails (EDQUOT on ext4; ENOSPC on XFS, which reports a project's limit
  as a full disk), and kubelet's used-bytes metric is the quota's own count;
- expanding the claim raises the limit online before the new size is reported, and as much
  again can be written;
- releasing (delete) removes the limit and frees the ID; retain keeps the directory, its ID and
  its record, without a limit;
- kill -9 at each crash point of provisioning (also one where hard limits were turned on for
  the path while a provisioning was cut short), expansion, cleanup and deletion, then a restart:
  every volume has exactly one ID, its own, and the limit its PV says; nothing released keeps a
  limit; nothing is half made.
And a path asking for hard limits on a filesystem without project quotas stops the start with
exit 2 and the reason (what to make and mount it with).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from harness import (PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH, SCS_PATH,  # noqa: E402
                     ALL_EVENTS_PATH, ApiServer, Provisioner, claim, journal_records,
                     quantity_bytes, scrape, storage_class, wait_for)

MI = 1 << 20
DISKS = {"xfs": "/mnt/xfs", "ext4": "/mnt/ext4"}
PLAIN = "/mnt/ext4-plain"
# How far below its limit a writer may be stopped (allocation units, the directory's own block,
# delayed allocation's reservations).
SLACK = 2 * MI
# Waits sized for software emulation (a start of python is a second or more).
T = 120

API = None
WORK = None


def setUpModule():
    global API, WORK
    if os.environ.get("HP_VM") != "1":
        raise unittest.SkipTest("runs inside the test VM only (tests/vm/vm.py; meson test "
                                "--suite vm)")
    for var in ("HP_BINARY", "HP_QUOTA_SHOW"):
        if not os.environ.get(var):
            raise unittest.SkipTest("%s is not set (tests/meson.build sets it)" % var)
    WORK = tempfile.mkdtemp(prefix="hp-vm-hl-")
    t0 = time.monotonic()
    API = ApiServer(WORK).start(timeout=300)
    print("api server ready after %.1fs" % (time.monotonic() - t0), flush=True)


def tearDownModule():
    if API:
        API.stop()
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def qs(*args):
    """quota_show's answer as a dict (key=value words), or its lines for "list"."""
    r = subprocess.run([os.environ["HP_QUOTA_SHOW"]] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("quota_show %s: %s" % (" ".join(map(str, args)), r.stderr))
    if args[0] == "list":
        return [tuple(int(x) for x in line.split()) for line in r.stdout.splitlines()]
    return dict(w.split("=", 1) for w in r.stdout.split())


class Base(unittest.TestCase):
    fs = None
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "2s", "--kube-api-qps", "0",
            "--resync-period", "0", "--usage-scan-period", "1s", "--v", "2")
    seq = 0

    def setUp(self):
        Base.seq += 1
        self.tag = "t%d%s" % (Base.seq, self.fs or "")
        self.root = os.path.join(DISKS.get(self.fs, PLAIN), self.tag)
        self.provisioner_name = "%s.hostpath-provisioner.io" % self.tag
        self.dir = os.path.join(WORK, self.tag)
        os.makedirs(self.dir)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.alive():
                code = p.stop(timeout=30)
                self.assertEqual(code, 0, "%s exit code; log:\n%s" % (p.name, p.log[-3000:]))

    # -- setup -----------------------------------------------------------------------------

    def config(self, hard=True, root=None):
        entry = {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [root or self.root]}
        if hard:
            entry["hardLimits"] = True
        path = os.path.join(self.dir, "config.json")
        with open(path + ".new", "w") as f:
            json.dump({"nodePathMap": [entry]}, f)
        os.replace(path + ".new", path)
        return path

    def start(self, name="prov", env=None, wait=True, hard=True):
        p = Provisioner(API, os.path.join(self.dir, name, "unused"), "--config",
                        self.config(hard=hard),
                        "--provisioner-name", self.provisioner_name, *self.fast, env=env,
                        name=name)
        os.makedirs(os.path.dirname(p.pv_dir), exist_ok=True)
        p.start()
        self.procs.append(p)
        if wait:
            p.wait_log(r"caches synced", T)
        return p

    def add_class(self, name, **params):
        API.create(SCS_PATH, storage_class(
            "%s-%s" % (self.tag, name), self.provisioner_name, allow_expansion=True,
            parameters=params or None))
        return "%s-%s" % (self.tag, name)

    def add_claim(self, name, cls, size):
        return API.create(PVCS_PATH % "default", claim("default", "%s-%s" % (self.tag, name),
                                                       cls, size=size))

    def wait(self, pred, what, timeout=T):
        try:
            return wait_for(pred, timeout, interval=0.2, what=what)
        except TimeoutError as e:
            logs = "".join("\n--- %s ---\n%s" % (p.name, p.log[-4000:]) for p in self.procs)
            self.fail("%s%s" % (e, logs))

    def bound(self, c):
        name = c["metadata"]["name"]

        def is_bound():
            got = API.get(PVC_PATH % ("default", name))
            return got if (got.get("status") or {}).get("phase") == "Bound" else None
        return self.wait(is_bound, "claim %s bound" % name)

    def pv_of(self, c):
        return API.get(PV_PATH % ("pvc-" + c["metadata"]["uid"]))

    def our_pvs(self):
        return [p for p in API.list(PVS_PATH)["items"]
                if (p["metadata"].get("annotations") or {}).get(
                    "pv.kubernetes.io/provisioned-by") == self.provisioner_name]

    def events(self, name, reason):
        return [e for e in API.list(ALL_EVENTS_PATH)["items"]
                if e["involvedObject"].get("name") == name and e["reason"] == reason]

    # -- what the kernel says --------------------------------------------------------------

    def project(self, pid):
        d = qs("project", self.root, pid)
        return {k: int(v) for k, v in d.items()}

    def tag_of(self, path):
        d = qs("dir", path)
        return int(d["project"]), int(d["inherit"])

    def fill(self, path, max_bytes):
        d = qs("fill", path, max_bytes)
        return int(d["wrote"]), d["error"]

    def check_limited_volume(self, pv, rec):
        """The volume of PV pv: its record names an ID, its directory carries it, its limit is
        the PV's capacity. Returns the ID."""
        self.assertIn("projectID", rec, "record of %s names no project ID" % pv["metadata"]["name"])
        pid = int(rec["projectID"])
        self.assertEqual(rec["state"], "created")
        path = pv["spec"]["hostPath"]["path"]
        self.assertEqual(self.tag_of(path), (pid, 1), path)
        want = quantity_bytes(pv["spec"]["capacity"]["storage"])
        self.assertEqual(self.project(pid)["hard"], want, "limit of project %d" % pid)
        return pid

    def check_write_stops(self, path, at, start=0):
        wrote, err = self.fill(os.path.join(path, "data"), 4 * at)
        self.assertIn(err, ("EDQUOT",) if self.fs == "ext4" else ("ENOSPC", "EDQUOT"),
                      "wrote %d of a %d-byte limit, then %s" % (wrote, at, err))
        self.assertLessEqual(start + wrote, at)
        self.assertGreaterEqual(start + wrote, at - SLACK)
        return wrote, err

    def our_ids(self, ids):
        """Of project IDs (from quota_show list), those this test may own: not named by the
        records of the other tests' roots on the same filesystem."""
        disk = os.path.dirname(self.root)
        others = set()
        for d in os.listdir(disk):
            other = os.path.join(disk, d)
            if other != self.root and os.path.isdir(other):
                others |= {int(r["projectID"]) for r in journal_records(other).values()
                           if "projectID" in r}
        return {i for i in ids if i >= 1000000 and i not in others}

    def sync(self):
        subprocess.run(["sync", "-f", self.root], timeout=60)

    def wait_project_free(self, pid):
        def free():
            self.sync()  # XFS frees inodes in the background
            p = self.project(pid)
            return p if p["in_use"] == 0 and p["hard"] == 0 else None
        return self.wait(free, "project %d free" % pid, timeout=60)


class LimitsTest(Base):
    """Provision, write past the size, expand, write more, release."""

    def run_limits(self):
        prov = self.start()
        prov.wait_log(r"hard limits on %s: %s at" % (re.escape(self.root), self.fs), 5)
        cls = self.add_class("del")
        keep = self.add_class("keep", onDelete="retain")
        a = self.add_claim("a", cls, "8Mi")
        b = self.add_claim("b", cls, "4Mi")
        k = self.add_claim("k", keep, "2Mi")
        for c in (a, b, k):
            self.bound(c)
        recs = journal_records(self.root)
        pva, pvb, pvk = self.pv_of(a), self.pv_of(b), self.pv_of(k)
        ids = [self.check_limited_volume(p, recs[p["metadata"]["name"]])
               for p in (pva, pvb, pvk)]
        self.assertEqual(len(set(ids)), 3, "two volumes share a project ID: %r" % ids)
        patha = pva["spec"]["hostPath"]["path"]

        # Past the size: refused, while the disk has room.
        wrote, err = self.check_write_stops(patha, 8 * MI)
        used = self.project(ids[0])["bytes"]
        self.assertGreaterEqual(used, wrote)
        print("%s: 8Mi volume (project %d): wrote %.2f MiB, then %s; quota counts %d bytes"
              % (self.fs, ids[0], wrote / MI, err, used), flush=True)
        # kubelet's used bytes is the quota's count (read, not walked).
        claim_a = a["metadata"]["name"]

        def metric_is_quota():
            v = scrape(prov).get("kubelet_volume_stats_used_bytes", namespace="default",
                                 persistentvolumeclaim=claim_a,
                                 persistentvolume=pva["metadata"]["name"])
            return v if v == self.project(ids[0])["bytes"] else None
        self.wait(metric_is_quota, "kubelet_volume_stats_used_bytes of %s = the quota's bytes"
                  % claim_a)

        # Expansion: the limit first, then the PV and the claim; then as much again fits.
        API.patch(PVC_PATH % ("default", claim_a),
                  {"spec": {"resources": {"requests": {"storage": "16Mi"}}}})

        # Waits for what only the provisioner's last status patch writes: the stand-in's binder
        # copies the PV's new size into status.capacity by itself, and the claim is marked
        # (allocatedResources, allocatedResourceStatuses) before the limit grows.
        def grown():
            got = API.get(PVC_PATH % ("default", claim_a))
            st = got.get("status") or {}
            return ((st.get("allocatedResources") or {}).get("storage") == "16Mi" and
                    "allocatedResourceStatuses" not in st)
        self.wait(grown, "claim %s status grown to 16Mi" % claim_a)
        self.assertEqual(self.project(ids[0])["hard"], 16 * MI)
        self.assertEqual(self.pv_of(a)["spec"]["capacity"]["storage"], "16Mi")
        more, err = self.check_write_stops(patha, 16 * MI, start=wrote)
        self.assertGreaterEqual(more, 8 * MI - SLACK)
        print("%s: grown to 16Mi: wrote %.2f MiB more, then %s"
              % (self.fs, more / MI, err), flush=True)
        self.wait(lambda: self.events(claim_a, "VolumeResizeSuccessful"),
                  "VolumeResizeSuccessful on %s" % claim_a)

        # Release: delete frees the limit and the ID; retain keeps the directory and its ID.
        for c in (a, k):
            API.delete(PVC_PATH % ("default", c["metadata"]["name"]))
        self.wait(lambda: not API.exists(PV_PATH % pva["metadata"]["name"]) and
                  not API.exists(PV_PATH % pvk["metadata"]["name"]), "PVs of a and k deleted")
        self.assertFalse(os.path.exists(patha))
        recs = journal_records(self.root)
        self.assertNotIn(pva["metadata"]["name"], recs)
        self.wait_project_free(ids[0])
        rk = recs[pvk["metadata"]["name"]]
        self.assertEqual(rk["state"], "retained")
        self.assertEqual(int(rk["projectID"]), ids[2])
        self.assertEqual(self.project(ids[2])["hard"], 0)
        self.assertEqual(self.tag_of(pvk["spec"]["hostPath"]["path"]), (ids[2], 1))
        # What is left in use: b, and the retained directory (which carries its ID).
        ours = self.our_ids(i for (i, *_rest) in qs("list", self.root))
        self.assertEqual(ours, {ids[1], ids[2]})
        # A new claim never gets an ID a record names or a directory carries.
        n = self.add_claim("n", cls, "1Mi")
        self.bound(n)
        pvn = self.pv_of(n)
        nid = self.check_limited_volume(pvn, journal_records(self.root)[pvn["metadata"]["name"]])
        self.assertNotIn(nid, ids[1:])


class XfsLimits(LimitsTest):
    fs = "xfs"

    def test_limit_write_expand_release(self):
        self.run_limits()


class Ext4Limits(LimitsTest):
    fs = "ext4"

    def test_limit_write_expand_release(self):
        self.run_limits()


class RefusedTest(Base):
    fs = None

    def test_path_without_project_quotas_is_refused_at_start(self):
        os.makedirs(self.root, exist_ok=True)
        p = Provisioner(API, os.path.join(self.dir, "unused"), "--config", self.config(),
                        "--provisioner-name", self.provisioner_name)
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=T,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--config path %s has hardLimits, but they cannot be enforced there"
                      % self.root, r.stderr)
        self.assertIn("has no project quota accounting", r.stderr)
        self.assertIn("tune2fs -O quota,project", r.stderr)
        self.assertIn("mount it with -o prjquota", r.stderr)
        print("refused: %s" % [l for l in r.stderr.splitlines() if "hardLimits" in l][0])


# ---- kill -9 at every step ----------------------------------------------------------------

PROVISION_STEPS = ["provision-recorded", "provision-renamed", "provision-quota-tagged",
                   "provision-quota-limited", "provision-created", "provision-pv-created"]
DELETE_STEPS = ["release-marked", "release-removed", "release-quota-cleared",
                "delete-pv-deleted"]
N = 3


class CrashTest(Base):
    """kill -9 (the process sends itself SIGKILL at a named step) with N claims, then a
    restart: one ID per volume, its own; the limit its PV says; nothing released still
    limited; no record without its volume."""

    def invariants(self, claims):
        pvs = {p["metadata"]["name"]: p for p in self.our_pvs()}
        recs = journal_records(self.root)
        self.assertEqual(set(recs), set(pvs), "records without a PV, or PVs without a record")
        ids = {}
        for c in claims:
            pv = self.pv_of(c)
            pid = self.check_limited_volume(pv, recs[pv["metadata"]["name"]])
            self.assertNotIn(pid, ids.values(), "two volumes share project %d" % pid)
            ids[pv["metadata"]["name"]] = pid
        staging = os.path.join(self.root, ".hostpath-provisioner", "staging")
        self.assertEqual(os.listdir(staging), [])
        # No project of ours is limited but those of live volumes.
        limited = self.our_ids(i for (i, _b, _n, hard) in qs("list", self.root) if hard)
        self.assertEqual(limited, set(ids.values()))
        return ids

    def victim(self, step, hit, name="victim", hard=True):
        return self.start(name=name, env={"HOSTPATH_TEST_CRASH_AT": "%s:%d" % (step, hit)},
                          hard=hard)

    def crashed(self, v, step):
        self.wait(lambda: not v.alive(), "the crash at %s" % step)
        self.assertIn("crashpoint: %s" % step, v.log)
        v.kill9()

    def crash_provisioning(self, step):
        cls = self.add_class("c")
        v = self.victim(step, 1 if step == "provision-pv-created" else 2)
        claims = [self.add_claim("c%d" % i, cls, "%dMi" % (i + 1)) for i in range(N)]
        self.crashed(v, step)
        if os.environ.get("HP_VM_DEBUG"):
            for n, r in sorted(journal_records(self.root).items()):
                d = os.path.join(self.root, r["path"])
                print("  left: %s %s project %s dir %s" % (n, r["state"], r.get("projectID"),
                                                        self.tag_of(d) if os.path.isdir(d)
                                                        else "missing"), flush=True)
        self.start(name="after")
        for c in claims:
            self.bound(c)
        time.sleep(0.5)
        ids = self.invariants(claims)
        print("%s: kill -9 at %s: %d volumes, projects %s" % (self.fs, step, N,
                                                              sorted(ids.values())), flush=True)

    def crash_deleting(self, step):
        cls = self.add_class("c")
        first = self.start(name="first")
        claims = [self.add_claim("c%d" % i, cls, "2Mi") for i in range(N)]
        for c in claims:
            self.bound(c)
        ids = self.invariants(claims)
        for c in claims:
            self.fill(os.path.join(self.pv_of(c)["spec"]["hostPath"]["path"], "x"), 64 * 1024)
        self.assertEqual(first.stop(timeout=30), 0)
        v = self.victim(step, 1 if step == "delete-pv-deleted" else 2)
        for c in claims:
            API.delete(PVC_PATH % ("default", c["metadata"]["name"]))
        self.crashed(v, step)
        self.start(name="after")
        self.wait(lambda: not self.our_pvs() and not journal_records(self.root),
                  "every volume and record gone after %s" % step)
        self.assertEqual([n for n in os.listdir(self.root) if n != ".hostpath-provisioner"], [])
        for pid in ids.values():
            self.wait_project_free(pid)
        print("%s: kill -9 at %s: %d volumes released, projects %s free"
              % (self.fs, step, N, sorted(ids.values())), flush=True)

    def crash_expanding(self):
        step = "expand-limit-raised"
        cls = self.add_class("c")
        first = self.start(name="first")
        c = self.add_claim("c", cls, "2Mi")
        self.bound(c)
        self.assertEqual(first.stop(timeout=30), 0)
        v = self.victim(step, 1)
        API.patch(PVC_PATH % ("default", c["metadata"]["name"]),
                  {"spec": {"resources": {"requests": {"storage": "6Mi"}}}})
        self.crashed(v, step)
        self.start(name="after")

        def grown():
            got = API.get(PVC_PATH % ("default", c["metadata"]["name"]))
            st = got.get("status") or {}
            return ((st.get("allocatedResources") or {}).get("storage") == "6Mi" and
                    "allocatedResourceStatuses" not in st)
        self.wait(grown, "the expansion finished after the restart")
        (pid,) = self.invariants([c]).values()
        print("%s: kill -9 at %s: limit of project %d is %d MiB"
              % (self.fs, step, pid, self.project(pid)["hard"] // MI), flush=True)

    def crash_recording_late(self):
        """A provisioning cut short before hard limits were turned on for its path, finished
        after: its ID is recorded first (kill -9 right then), then carried and limited."""
        step = "provision-quota-recorded"
        cls = self.add_class("c")
        v = self.victim("provision-renamed", 1, name="before", hard=False)
        c = self.add_claim("c", cls, "3Mi")
        self.crashed(v, "provision-renamed")
        (rec,) = journal_records(self.root).values()
        self.assertNotIn("projectID", rec)
        v = self.victim(step, 1)
        self.crashed(v, step)
        (rec,) = journal_records(self.root).values()
        pid = int(rec["projectID"])
        self.assertEqual(rec["state"], "creating")
        self.assertEqual(self.tag_of(os.path.join(self.root, rec["path"]))[0], 0)
        self.start(name="after")
        self.bound(c)
        ids = self.invariants([c])
        self.assertEqual(list(ids.values()), [pid])
        print("%s: kill -9 at %s: project %d recorded, then carried and limited after the "
              "restart" % (self.fs, step, pid), flush=True)

    def crash_cleanup(self):
        """A PV the API server refuses for good: the half-made volume is undone (CLEANUP), and
        kill -9 after its limit is cleared leaves a record the restart finishes."""
        step = "cleanup-quota-cleared"
        cls = self.add_class("c")
        API.fail_next("POST", PVS_PATH, status=422, count=1,
                      message="refused for good by the test")
        v = self.victim(step, 1)
        c = self.add_claim("c", cls, "2Mi")
        self.crashed(v, step)
        recs = journal_records(self.root)
        self.assertEqual(len(recs), 1)
        pid = int(list(recs.values())[0]["projectID"])
        self.assertEqual(self.project(pid)["hard"], 0)
        API.delete(PVC_PATH % ("default", c["metadata"]["name"]))
        API.clear_faults()
        self.start(name="after")
        self.wait(lambda: not journal_records(self.root), "the half-made volume undone")
        self.assertEqual([n for n in os.listdir(self.root) if n != ".hostpath-provisioner"], [])
        self.wait_project_free(pid)
        print("%s: kill -9 at %s: undone after the restart, project %d free"
              % (self.fs, step, pid), flush=True)


def _step_test(kind, step):
    def test(self):
        if kind == "provision":
            self.crash_provisioning(step)
        elif kind == "delete":
            self.crash_deleting(step)
        elif kind == "expand":
            self.crash_expanding()
        elif kind == "late":
            self.crash_recording_late()
        else:
            self.crash_cleanup()
    test.__doc__ = "kill -9 at %s" % step
    return test


class XfsCrash(CrashTest):
    fs = "xfs"


class Ext4Crash(CrashTest):
    fs = "ext4"


for _cls in (XfsCrash, Ext4Crash):
    for _step in PROVISION_STEPS:
        setattr(_cls, "test_" + _step.replace("-", "_"), _step_test("provision", _step))
    for _step in DELETE_STEPS:
        setattr(_cls, "test_" + _step.replace("-", "_"), _step_test("delete", _step))
    setattr(_cls, "test_expand_limit_raised", _step_test("expand", "expand-limit-raised"))
    setattr(_cls, "test_cleanup_quota_cleared", _step_test("cleanup", "cleanup-quota-cleared"))
    setattr(_cls, "test_provision_quota_recorded",
            _step_test("late", "provision-quota-recorded"))
del _cls, _step  # else the loader finds the last class a second time, under this name


if __name__ == "__main__":
    unittest.main(verbosity=2)
