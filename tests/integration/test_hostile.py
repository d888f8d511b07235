"""Hostile input: whatever other tenants put in their objects, and whatever the environment
looks like at start, the provisioner keeps serving (issue "keep serving when other tenants'
objects, clients or the environment are hostile").

- A NUL (\\u0000, valid JSON the real API server accepts in annotation values) in a foreign
  claim, present before start or arriving by watch, does not stop provisioning; an object whose
  decision fields hold one is skipped alone, counted and logged once; a DELETED event of such an
  object is still applied.
- 150 foreign claims with 250 KiB annotations: our claim is provisioned; peak RSS is recorded.
- --pv-dir that is a file, read-only, or missing with a missing parent: one error line naming
  --pv-dir and exit 2; missing with its parent present: made.
- Claims the API says cannot be dynamically provisioned (spec.selector, a data source) are
  refused with an event saying why.
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH, Provisioner,  # noqa: E402
                     ProvisionerTestCase, binary_path, claim, metric, sanitizer_build, volume)

NUL_NOTE = {"note": "before\u0000after"}


def read_status(pid, key):
    """A /proc/<pid>/status value in KiB (0 when the process is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-hostile-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2")
    make_pv_dir = True


class NulTest(Base):
    def test_nul_in_foreign_claims_before_start_and_by_watch(self):
        self.add_class()
        self.add_class("other", provisioner="example.com/other")
        # A NUL where nothing reads it, and one where a decision would (selected-node).
        self.add_claim("foreign-note", cls="other", annotations=NUL_NOTE)
        self.add_claim("foreign-node", cls="other",
                       annotations={"volume.kubernetes.io/selected-node": "node\u0000x"})
        self.add_claim("ours-note", annotations=NUL_NOTE)
        prov = self.provisioner()
        self.wait_bound("ours-note")  # a NUL in an annotation nothing reads costs nothing
        c = self.add_claim("mine")
        self.wait_bound("mine")
        # More by watch, then ours still served.
        self.add_claim("foreign-late", cls="other",
                       annotations={"volume.kubernetes.io/storage-provisioner": "a\u0000b"})
        c2 = self.add_claim("mine-later")
        self.wait_bound("mine-later")
        self.assertTrue(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))
        self.assertTrue(self.api.exists(PV_PATH % ("pvc-" + c2["metadata"]["uid"])))
        # Other provisioners' claims are dropped by the watch filter before anything decodes
        # them (the memory rule, docs/design.md), NULs and all.
        dropped = metric(prov, "hostpath_watch_dropped_objects_total",
                         'resource="persistentvolumeclaims"')
        self.assertGreaterEqual(dropped, 3)
        for name in ("default/foreign-node", "default/foreign-late"):
            self.assertNotIn("object=%s" % name, prov.log)
        # One of ours with a NUL where a decision would read it: reported once, not served,
        # and the others still are.
        self.add_claim("ours-node",
                       annotations={"volume.kubernetes.io/selected-node": "node\u0000x"})
        c3 = self.add_claim("mine-last")
        self.wait_bound("mine-last")
        self.assertTrue(self.api.exists(PV_PATH % ("pvc-" + c3["metadata"]["uid"])))
        prov.wait_log(r"cannot be represented.*object=default/ours-node\b", 10)
        self.assertEqual(len(re.findall(r"cannot be represented.*object=default/ours-node\b",
                                        prov.log)), 1)
        n = metric(prov, "hostpath_watch_undecodable_objects_total",
                   'resource="persistentvolumeclaims"')
        self.assertGreaterEqual(n, 1)
        self.assertNotIn("list body is not a list", prov.log)
        # The undecodable claim is touched again: still logged once only.
        self.api.patch(PVC_PATH % ("default", "ours-node"),
                       {"metadata": {"labels": {"touched": "yes"}}})
        self.add_claim("sync-point")
        self.wait_bound("sync-point")
        self.assertEqual(len(re.findall(r"object=default/ours-node\b", prov.log)), 1)

    def test_deleted_event_of_undecodable_object_is_applied(self):
        """A PV holds a path under --pv-dir, so a claim rendering that path is refused. The PV
        is updated to hold a NUL where a decision reads (skipped: the cached copy stays), then
        deleted: the DELETED event carries the NUL too, yet it is applied by its name, and the
        claim is provisioned."""
        self.add_class(parameters={"pathPattern": "{{.PVC.Name}}"})
        path = os.path.join(self.pv_dir, "data")
        pv = volume("pv-held", path=path, reclaim="Retain")
        self.api.create(PVS_PATH, pv)
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 20)
        self.add_claim("data")
        ev = self.wait_event("data", "ProvisioningFailed")
        self.assertIn("pv-held", ev["message"])
        self.api.patch(PV_PATH % "pv-held", {"metadata": {"annotations": {
            "pv.kubernetes.io/provisioned-by": "x\u0000y"}}})
        self.wait(lambda: metric(prov, "hostpath_watch_undecodable_objects_total",
                                 'resource="persistentvolumes"') >= 1, 10, "update skipped")
        self.api.delete(PV_PATH % "pv-held")
        self.wait(lambda: metric(prov, "hostpath_watch_undecodable_objects_total",
                                 'resource="persistentvolumes"') >= 2, 10, "DELETED seen")
        # Any change to the claim reconciles it again: the path is free now.
        self.api.patch(PVC_PATH % ("default", "data"), {"metadata": {"labels": {"retry": "1"}}})
        self.wait_bound("data")


class BigForeignClaimsTest(Base):
    N = int(os.environ.get("HP_HOSTILE_CLAIMS", "150"))
    SIZE = 250 * 1024

    def test_big_annotations_on_foreign_claims(self):
        self.add_class()
        self.add_class("other", provisioner="example.com/other")
        blob = "x" * self.SIZE
        for i in range(self.N):
            self.api.create(PVCS_PATH % "default",
                            claim("default", "big-%03d" % i, "other", annotations={"blob": blob}))
        asan = sanitizer_build(binary_path())
        p = self.provisioner()
        peak = 0
        deadline = time.monotonic() + 120
        c = self.add_claim("mine")
        while time.monotonic() < deadline:
            peak = max(peak, read_status(p.pid, "VmHWM"))
            ph = (self.api.get(PVC_PATH % ("default", "mine")).get("status") or {}).get("phase")
            if ph == "Bound":
                break
            time.sleep(0.1)
        self.wait_bound(c)
        peak = max(peak, read_status(p.pid, "VmHWM"))
        rss = read_status(p.pid, "VmRSS")
        print("\n%d foreign claims x %d KiB annotations: peak RSS %.1f MiB, RSS after %.1f MiB%s"
              % (self.N, self.SIZE // 1024, peak / 1024.0, rss / 1024.0,
                 " (ASan build: its shadow memory and quarantine, not ours)" if asan else ""))
        # The pod's memory limit in manifests/ is 64Mi: far below it (the 32 MiB target is
        # measured by bench/, not asserted here). ASan's own memory says nothing about ours.
        if not asan:
            self.assertLess(peak, 48 * 1024, "peak RSS %d KiB" % peak)
        self.assertNotIn("list body is not a list", p.log)
        # Read as a stream, object by object (or, from a server without streaming lists,
        # in pages made smaller when one is too big).
        self.assertTrue("listed (streaming) resource=persistentvolumeclaims" in p.log or
                        "asking for" in p.log, p.log[-2000:])


class PvDirTest(Base):
    make_pv_dir = False

    def start_expect_exit(self, pv_dir):
        p = Provisioner(self.api, pv_dir, *self.fast)
        cmd = p.command()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=p.environment())
        return r

    def test_pv_dir_is_a_file(self):
        f = os.path.join(self.tmp, "file")
        with open(f, "w") as fh:
            fh.write("x")
        r = self.start_expect_exit(f)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if "--pv-dir" in ln]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("not a directory", lines[0])
        self.assertIn(f, lines[0])

    def test_pv_dir_missing_parent(self):
        d = os.path.join(self.tmp, "no", "such", "dir")
        r = self.start_expect_exit(d)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"--pv-dir %s does not exist" % re.escape(d))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "no")))

    def test_pv_dir_read_only(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a read-only tmpfs")
        d = os.path.join(self.tmp, "ro")
        r = self.mount_tmpfs(d, "ro,size=64k")
        if r.returncode != 0:
            self.skipTest("cannot mount: %s" % r.stderr)
        r = self.start_expect_exit(d)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"--pv-dir %s is not writable.*Read-only" % re.escape(d))

    def test_nothing_is_made_when_the_kubeconfig_is_wrong(self):
        """A refused start leaves the disk as it was: a missing --pv-dir is made only once the
        credentials are known to load (and, in the sanitizer build, nothing leaks on the way
        out: exit 2, not the leak checker's 1)."""
        d = os.path.join(self.tmp, "fresh")
        p = Provisioner(self.api, d, *self.fast)
        cmd = p.command() + ["--kubeconfig", os.path.join(self.tmp, "no-such-kubeconfig")]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no-such-kubeconfig", r.stderr)
        self.assertFalse(os.path.exists(d))
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                        "paths": [d]}]}, f)
        r = subprocess.run(cmd + ["--config", cfg], capture_output=True, text=True, timeout=20,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("LeakSanitizer", r.stderr)
        self.assertFalse(os.path.exists(d))

    def test_pv_dir_missing_is_made_when_its_parent_exists(self):
        d = os.path.join(self.tmp, "fresh")
        self.add_class()
        p = Provisioner(self.api, d, *self.fast)
        cmd = p.command()
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                env=p.environment(), text=True)
        try:
            self.wait(lambda: os.path.isdir(d), 10, "--pv-dir made")
            self.add_claim("c")
            self.wait_bound("c")
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=10)
        self.assertIn("created --pv-dir %s" % d, err)
        self.assertEqual(proc.returncode, 0)


class RefuseTest(Base):
    def test_selector_and_data_source_refused(self):
        self.add_class()
        self.provisioner()
        sel = claim("default", "with-selector", "hostpath")
        sel["spec"]["selector"] = {"matchLabels": {"tier": "gold"}}
        self.api.create(PVCS_PATH % "default", sel)
        src = claim("default", "with-source", "hostpath")
        src["spec"]["dataSource"] = {"kind": "PersistentVolumeClaim", "name": "other"}
        self.api.create(PVCS_PATH % "default", src)
        ref = claim("default", "with-ref", "hostpath")
        ref["spec"]["dataSourceRef"] = {"kind": "PersistentVolumeClaim", "name": "other"}
        self.api.create(PVCS_PATH % "default", ref)
        for name, words in (("with-selector", "selector"), ("with-source", "data source"),
                            ("with-ref", "data source")):
            ev = self.wait_event(name, "ProvisioningFailed")
            self.assertEqual(ev["type"], "Warning")
            self.assertIn(words, ev["message"])
        self.add_claim("plain")
        self.wait_bound("plain")
        pvs = self.api.list(PVS_PATH)["items"]
        self.assertEqual([p["spec"]["claimRef"]["name"] for p in pvs], ["plain"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
