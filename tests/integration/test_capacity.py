"""Capacity: several disks per node, placement that respects size, per-volume usage metrics and
online expansion (issue "Capacity").

Real filesystems of known size are tmpfs mounts made by the test (root only; skipped loudly
otherwise); budgets from --config need no mounts. Every provisioner here runs with --config.
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PV_PATH, PVC_PATH, ProvisionerTestCase, journal_records,  # noqa: E402
                     scrape)

MI = 1024 * 1024


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-capacity-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--kube-api-qps", "0",
            "--resync-period", "0", "--v", "2", "--usage-scan-period", "1s")

    def config(self, entries, extra=None):
        """Writes a --config file; entries: [(node, [paths], {path: budget}, allow)]."""
        m = []
        for node, paths, cap, allow in entries:
            e = {"node": node, "paths": paths}
            if cap:
                e["capacity"] = cap
            if allow is not None:
                e["allowRootFilesystem"] = allow
            m.append(e)
        doc = {"nodePathMap": m}
        doc.update(extra or {})
        path = os.path.join(self.tmp, "config.json")
        tmp = path + ".new"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)  # atomic, like a ConfigMap's symlink swap
        return path

    def dirs(self, *names):
        out = []
        for n in names:
            d = os.path.join(self.tmp, n)
            os.makedirs(d, exist_ok=True)
            out.append(d)
        return out

    def mount(self, name, size):
        if os.geteuid() != 0:
            self.skipTest("SKIPPED LOUDLY: mounting a tmpfs of known size needs root")
        d = os.path.join(self.tmp, name)
        r = self.mount_tmpfs(d, "size=%s" % size)
        if r.returncode != 0:
            self.skipTest("SKIPPED LOUDLY: cannot mount a tmpfs here: %s" % r.stderr.strip())
        return d

    def start(self, cfg, *args):
        return self.provisioner("--config", cfg, *args)

    def pv_path(self, c):
        return self.pv("pvc-" + c["metadata"]["uid"])["spec"]["hostPath"]["path"]


class PlacementTest(Base):
    def test_roomier_disk_is_chosen(self):
        small, big = self.mount("small", "8m"), self.mount("big", "32m")
        self.add_class()
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [small, big], None,
                                 None)]))
        c = self.add_claim("a", size="4Mi")
        self.wait_bound("a")
        self.assertTrue(self.pv_path(c).startswith(big + "/"), self.pv_path(c))
        # The journal lives on the disk the volume is on.
        self.assertIn("pvc-" + c["metadata"]["uid"], journal_records(big))
        self.assertEqual(journal_records(small), {})

    def test_too_large_for_every_path_is_refused_with_numbers(self):
        small, big = self.mount("small", "8m"), self.mount("big", "16m")
        self.add_class()
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [small, big], None,
                                 None)]))
        c = self.add_claim("huge", size="1Gi")
        ev = self.wait_event("huge", "ProvisioningFailed")
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("needs 1Gi", ev["message"])
        self.assertIn(small, ev["message"])
        self.assertIn(big, ev["message"])
        self.assertRegex(ev["message"], r"has [0-9.]+Mi")
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))

    def test_two_that_fit_alone_do_not_fit_together(self):
        """The 4 TiB + 4 TiB on one 4 TiB disk case, scaled down: budgets reserve."""
        (p,) = self.dirs("disk")
        self.add_class()
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p], {p: "10Mi"},
                                 None)]))
        self.add_claim("one", size="6Mi")
        self.wait_bound("one")
        two = self.add_claim("two", size="6Mi")
        ev = self.wait_event("two", "ProvisioningFailed")
        self.assertIn("needs 6Mi", ev["message"])
        self.assertIn("has 4Mi left of its 10Mi budget", ev["message"])
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + two["metadata"]["uid"])))
        # Deleting the first makes room: the second is retried and bound.
        self.api.delete(PVC_PATH % ("default", "one"))
        self.wait_bound("two", timeout=60)

    def test_node_path(self):
        p1, p2 = self.dirs("p1", "p2")
        self.add_class("first", parameters={"nodePath": p1})
        self.add_class("second", parameters={"nodePath": p2})
        self.add_class("nowhere", parameters={"nodePath": "/not/configured"})
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, p2], None, None)]))
        a = self.add_claim("a", cls="first")
        b = self.add_claim("b", cls="second")
        self.wait_bound([a, b])
        self.assertTrue(self.pv_path(a).startswith(p1 + "/"))
        self.assertTrue(self.pv_path(b).startswith(p2 + "/"))
        self.add_claim("c", cls="nowhere")
        ev = self.wait_event("c", "ProvisioningFailed")
        self.assertIn("nodePath=\"/not/configured\" is not one of this node's paths", ev["message"])

    def test_node_without_paths_keeps_no_volumes(self):
        """local-path-provisioner's README example, unchanged: "paths": [] keeps volumes off
        that node. Its claims are refused and handed back to the scheduler."""
        (p,) = self.dirs("opt")
        self.add_class()
        prov = self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p], None, None),
                                       ("node-x", [], None, None)]),
                          "--node-name", "node-x")
        prov.wait_log(r"caches synced", 20)
        c = self.add_claim("here", selected_node="node-x")
        ev = self.wait_event("here", "ProvisioningFailed")
        self.assertIn("this node has no volume paths (its --config entry lists none)",
                      ev["message"])
        self.wait(lambda: "volume.kubernetes.io/selected-node" not in
                  (self.api.get(PVC_PATH % ("default", "here"))["metadata"].get("annotations")
                   or {}), 20, "the claim handed back to the scheduler")
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))
        self.assertEqual(os.listdir(p), [])

    def test_root_filesystem_flag_and_refusal(self):
        (p,) = self.dirs("onroot")
        root_dev = os.stat("/").st_dev
        if os.stat(p).st_dev != root_dev:
            self.skipTest("SKIPPED LOUDLY: the test directory is not on the root filesystem")
        self.add_class()
        prov = self.start(self.config([("node-x", [p], None, False)]),
                          "--node-name", "node-x")
        prov.wait_log(r"is on the root filesystem", 20)
        self.add_claim("r", selected_node="node-x")
        ev = self.wait_event("r", "ProvisioningFailed")
        self.assertIn("root filesystem and allowRootFilesystem is false", ev["message"])
        m = scrape(prov)
        self.assertEqual(m.get("hostpath_path_on_root_filesystem", path=p), 1)


class ConfigReloadTest(Base):
    def test_reload_adds_a_path_and_invalid_reload_keeps_the_old_map(self):
        p1, p2 = self.dirs("p1", "p2")
        self.add_class("second", parameters={"nodePath": p2})
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1], None, None)])
        prov = self.start(cfg)
        prov.wait_log(r"caches synced", 20)
        self.add_claim("early", cls="second")
        self.wait_event("early", "ProvisioningFailed")
        # An invalid config: logged, the old map stays.
        self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, p2], None, None)],
                    extra={"setupCommand": "/bin/sh"})
        prov.wait_log(r"--config changed but is not valid, the previous map stays.*"
                      r"setupCommand", 15)
        # A valid one adds p2: the next claim of that class uses it.
        self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, p2], None, None)])
        prov.wait_log(r"--config .* reloaded: paths=%s,%s" % (re.escape(p1), re.escape(p2)), 15)
        c = self.add_claim("late", cls="second")
        self.wait_bound("late")
        self.assertTrue(self.pv_path(c).startswith(p2 + "/"))
        self.assertGreater(scrape(prov).sum("hostpath_path_available_bytes", path=p2), 0)
        # p2 taken out again: it keeps its volume but takes nothing new, and says so.
        self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1], None, None)])
        prov.wait_log(r"volume path %s is no longer configured" % re.escape(p2), 15)
        self.assertEqual(scrape(prov).sum("hostpath_path_available_bytes", path=p2), 0)

    def test_reload_with_an_unusable_path_keeps_the_old_map(self):
        """A reload is held to the checks of a start: a path that is a file, or whose parent
        does not exist (a disk not mounted), is refused with the old map kept."""
        (p1,) = self.dirs("p1")
        afile = os.path.join(self.tmp, "afile")
        with open(afile, "w") as f:
            f.write("not a directory\n")
        missing = os.path.join(self.tmp, "no-such-disk", "volumes")
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1], None, None)])
        self.add_class()
        prov = self.start(cfg)
        prov.wait_log(r"caches synced", 20)
        self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, afile], None, None)])
        prov.wait_log(r"--config path %s is not a directory" % re.escape(afile), 15)
        prov.wait_log(r"--config .* changed, but a path of this node cannot be used; the "
                      r"previous map stays", 5)
        self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [missing], None, None)])
        prov.wait_log(r"--config path %s does not exist and neither does its parent"
                      % re.escape(missing), 15)
        self.assertFalse(os.path.exists(os.path.dirname(missing)))
        c = self.add_claim("still", size="1Mi")
        self.wait_bound("still")
        self.assertTrue(self.pv_path(c).startswith(p1 + "/"))
        self.assertNotRegex(prov.log, r"reloaded: paths=")

    def test_paths_that_are_one_directory_through_a_symlink_exit_2(self):
        (p1,) = self.dirs("disk")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(p1, alias)
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, alias], None, None)])
        from harness import Provisioner
        p = Provisioner(self.api, os.path.join(self.tmp, "unused"), "--config", cfg)
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=20,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--config paths %s and %s are one directory on disk"
                      % (p1, alias), r.stderr)

    def test_invalid_config_at_start_exits_2(self):
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", ["relative"], None, None)])
        from harness import Provisioner
        p = Provisioner(self.api, os.path.join(self.tmp, "unused"), "--config", cfg)
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=20,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("not an absolute directory path", r.stderr)
        # local-path-provisioner's nodePathMap and sharedFileSystemPath are exclusive (it
        # refuses each claim of such a config; the config is refused at start here).
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", ["/x"], None, None)],
                          extra={"sharedFileSystemPath": "/shared"})
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=20,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("both \"nodePathMap\" and \"sharedFileSystemPath\" are set", r.stderr)
        # Its helper-pod settings are not implemented: refused by name.
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", ["/x"], None, None)],
                          extra={"setupCommand": "/bin/setup"})
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=20,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("\"setupCommand\" (a local-path-provisioner setting) is not supported",
                      r.stderr)


class HardLimitsTest(Base):
    """What of hard limits this machine can show without quotas (tests/vm has the rest): a path
    that asks for them on a filesystem without project quotas is refused at start and at reload
    with the reason, and a class that requires them is never placed on a path without them."""

    def run_once(self, cfg):
        from harness import Provisioner
        p = Provisioner(self.api, os.path.join(self.tmp, "unused"), "--config", cfg)
        return subprocess.run(p.command(), capture_output=True, text=True, timeout=20,
                              env=p.environment())

    def test_path_without_project_quotas_exits_2(self):
        t = self.mount("tmpfs-disk", "8m")
        (plain,) = self.dirs("plain")
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [plain, t], None, None)],
                          extra=None)
        with open(cfg) as f:
            doc = json.load(f)
        doc["nodePathMap"][0]["hardLimits"] = {t: True}
        with open(cfg, "w") as f:
            json.dump(doc, f)
        r = self.run_once(cfg)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--config path %s has hardLimits, but they cannot be enforced there" % t,
                      r.stderr)
        self.assertIn("filesystem tmpfs has no project quotas: hard limits need XFS (mounted "
                      "with prjquota) or ext4 (made with -O quota,project, mounted with "
                      "prjquota)", r.stderr)
        self.assertEqual(os.listdir(t), [])  # nothing was made there

    def test_reload_asking_for_hard_limits_where_they_cannot_be_keeps_the_old_map(self):
        t = self.mount("tmpfs-disk", "8m")
        cfg = self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [t], None, None)])
        self.add_class()
        prov = self.start(cfg)
        prov.wait_log(r"caches synced", 20)
        doc = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [t],
                                "hardLimits": True}]}
        with open(cfg + ".new", "w") as f:
            json.dump(doc, f)
        os.replace(cfg + ".new", cfg)
        prov.wait_log(r"--config path %s has hardLimits, but they cannot be enforced there: .*"
                      r"filesystem tmpfs has no project quotas" % re.escape(t), 15)
        prov.wait_log(r"changed, but a path of this node cannot be used; the previous map "
                      r"stays", 5)
        self.add_claim("still", size="1Mi")
        self.wait_bound("still")  # the old map: no hard limits asked, none needed

    def test_class_that_requires_hard_limits_is_not_placed_without_them(self):
        p1, p2 = self.dirs("p1", "p2")
        self.add_class("strict", parameters={"hardLimits": "required"})
        self.add_class("loose", parameters={"hardLimits": "optional"})
        self.add_class("typo", parameters={"hardLimits": "yes"})
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p1, p2], None, None)]))
        c = self.add_claim("strict", cls="strict", size="1Mi")
        ev = self.wait_event("strict", "ProvisioningFailed")
        self.assertEqual(ev["type"], "Warning")
        for p in (p1, p2):
            self.assertIn("%s has no hard limits (\"hardLimits\" in --config), which the "
                          "StorageClass requires (parameter hardLimits: required)" % p,
                          ev["message"])
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))
        self.assertEqual(journal_records(p1), {})
        self.assertEqual(journal_records(p2), {})
        self.add_claim("loose", cls="loose", size="1Mi")
        self.wait_bound("loose")
        self.add_claim("typo", cls="typo", size="1Mi")
        ev = self.wait_event("typo", "ProvisioningFailed")
        self.assertIn("parameter hardLimits=\"yes\" is not required or optional", ev["message"])


class UsageTest(Base):
    def labels(self, c):
        return {"namespace": "default", "persistentvolumeclaim": c["metadata"]["name"],
                "persistentvolume": "pvc-" + c["metadata"]["uid"]}

    def test_usage_follows_a_file_and_over_capacity_is_reported(self):
        (p,) = self.dirs("disk")
        self.add_class()
        prov = self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p], None,
                                        None)]))
        c = self.add_claim("u", size="2Mi")
        self.wait_bound("u")
        lb = self.labels(c)
        self.wait(lambda: scrape(prov).get("kubelet_volume_stats_capacity_bytes", **lb) ==
                  2 * MI, 10, "capacity exported")
        d = self.pv_path(c)
        with open(os.path.join(d, "data"), "wb") as f:
            f.write(os.urandom(MI))
            f.flush()
            os.fsync(f.fileno())
        used = self.wait(lambda: scrape(prov).get("kubelet_volume_stats_used_bytes", **lb)
                         >= MI and scrape(prov), 10, "used bytes follow the file")
        self.assertGreaterEqual(used.get("kubelet_volume_stats_inodes_used", **lb), 2)
        self.assertLessEqual(used.get("kubelet_volume_stats_available_bytes", **lb), MI + 4096)
        self.assertGreater(used.get("kubelet_volume_stats_inodes", **lb), 0)
        self.assertGreater(used.get("kubelet_volume_stats_inodes_free", **lb), 0)
        self.assertEqual(used.types["kubelet_volume_stats_used_bytes"], "gauge")
        # Over its capacity: one Warning event per crossing.
        with open(os.path.join(d, "more"), "wb") as f:
            f.write(os.urandom(2 * MI))
        ev = self.wait_event("u", "VolumeOverCapacity", timeout=15)
        self.assertEqual(ev["type"], "Warning")
        self.assertIn("more than its capacity of 2Mi", ev["message"])
        self.wait(lambda: scrape(prov).get("hostpath_volume_over_capacity", **lb) == 1, 10,
                  "over-capacity metric")
        time.sleep(2.5)  # more scans: still one crossing
        self.assertEqual(sum(e.get("count", 1) for e in
                             self.events_for("u", "VolumeOverCapacity")), 1)
        # Removed: the numbers drop.
        os.unlink(os.path.join(d, "data"))
        os.unlink(os.path.join(d, "more"))
        self.wait(lambda: scrape(prov).get("kubelet_volume_stats_used_bytes", **lb) < MI, 10,
                  "used bytes drop")
        self.assertEqual(scrape(prov).get("hostpath_volume_over_capacity", **lb), 0)

    def test_path_metrics(self):
        (p,) = self.dirs("disk")
        self.add_class()
        prov = self.start(self.config([("node-a", [p], {p: "100Mi"}, None)]),
                          "--node-name", "node-a")
        self.add_claim("m", size="30Mi", selected_node="node-a")
        self.wait_bound("m")
        m = self.wait(lambda: (lambda s: s if s.get("hostpath_path_reserved_bytes", path=p,
                                                      node="node-a") == 30 * MI else None)(
            scrape(prov)), 10, "reserved bytes")
        self.assertEqual(m.get("hostpath_path_capacity_bytes", path=p, node="node-a"), 100 * MI)
        self.assertEqual(m.get("hostpath_path_available_bytes", path=p, node="node-a"), 70 * MI)
        for fam in ("hostpath_path_capacity_bytes", "hostpath_path_reserved_bytes",
                    "hostpath_path_available_bytes", "hostpath_path_on_root_filesystem"):
            self.assertEqual(m.types[fam], "gauge", fam)


class ExpansionTest(Base):
    def wait_grown(self, name, size, timeout):
        """Waits for what only the last status patch writes (allocatedResources size, no
        allocatedResourceStatuses entry), checks the Resizing condition is gone; the status."""
        def done():
            st = self.api.get(PVC_PATH % ("default", name))["status"]
            return (st.get("allocatedResources") == {"storage": size} and
                    "allocatedResourceStatuses" not in st and st)
        st = self.wait(done, timeout, "claim %s status grown to %s" % (name, size))
        self.assertFalse([x for x in st.get("conditions") or [] if x["type"] == "Resizing"], st)
        return st

    def test_grow_and_refuse_without_room(self):
        (p,) = self.dirs("disk")
        self.add_class(allow_expansion=True)
        self.add_class("fixed", allow_expansion=False)
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p], {p: "10Mi"}, None)]))
        c = self.add_claim("g", size="2Mi")
        f = self.add_claim("f", cls="fixed", size="1Mi")
        self.wait_bound([c, f])
        pv = "pvc-" + c["metadata"]["uid"]
        since = self.api.requests()[-1]["seq"]
        self.api.patch(PVC_PATH % ("default", "g"),
                       {"spec": {"resources": {"requests": {"storage": "4Mi"}}}})
        # As the external resizer does: the claim is marked first (allocatedResources the new
        # size, allocatedResourceStatuses ControllerResizeInProgress, a Resizing condition),
        # then the PV grows, then the claim's status says it is done (capacity and
        # allocatedResources the new size, no status entry, no Resizing condition: Kubernetes
        # >= 1.34 reads these, and the upstream volume-expand e2e specs wait on the condition).
        # The stand-in's binder copies the PV's new size into status.capacity by itself: wait
        # for what only the last patch writes.
        st = self.wait_grown("g", "4Mi", 15)
        self.assertEqual(self.pv(pv)["spec"]["capacity"]["storage"], "4Mi")
        self.assertEqual(st["capacity"], {"storage": "4Mi"})
        order = [("pv" if r["path"] == PV_PATH % pv else "claim")
                 for r in self.api.requests(since=since, method="PATCH")
                 if r["path"] in (PV_PATH % pv, PVC_PATH % ("default", "g") + "/status")]
        self.assertEqual(order, ["claim", "pv", "claim"])
        self.wait_event("g", "Resizing")
        ok = self.wait_event("g", "VolumeResizeSuccessful")
        self.assertIn(pv, ok["message"])
        # Beyond the path's room (10Mi budget, 5Mi taken): refused with the numbers.
        self.api.patch(PVC_PATH % ("default", "g"),
                       {"spec": {"resources": {"requests": {"storage": "20Mi"}}}})
        bad = self.wait_event("g", "VolumeResizeFailed")
        self.assertEqual(bad["type"], "Warning")
        self.assertIn("needs 16Mi more", bad["message"])
        self.assertEqual(self.pv(pv)["spec"]["capacity"]["storage"], "4Mi")
        # A class without expansion: left alone.
        self.api.patch(PVC_PATH % ("default", "f"),
                       {"spec": {"resources": {"requests": {"storage": "2Mi"}}}})
        time.sleep(1.0)
        self.assertEqual(self.pv("pvc-" + f["metadata"]["uid"])["spec"]["capacity"]["storage"],
                         "1Mi")
        self.assertFalse(self.events_for("f", "Resizing"))

    def test_failed_growth_retried_without_marking_again(self):
        """The PV's update refused three times after the claim was marked: retried with
        backoff, the claim not marked again (a mark is a write to the claim, which would run
        its key again at once, past the backoff), then done; one claim status patch before the
        PV, one after."""
        (p,) = self.dirs("disk")
        self.add_class(allow_expansion=True)
        self.start(self.config([("DEFAULT_PATH_FOR_NON_LISTED_NODES", [p], {p: "10Mi"}, None)]))
        c = self.add_claim("g", size="2Mi")
        self.wait_bound(c)
        pv = "pvc-" + c["metadata"]["uid"]
        since = self.api.requests()[-1]["seq"]
        self.api.fail_next("PATCH", PV_PATH % pv, status=500, count=3)
        self.api.patch(PVC_PATH % ("default", "g"),
                       {"spec": {"resources": {"requests": {"storage": "4Mi"}}}})
        self.wait_grown("g", "4Mi", 30)
        self.assertEqual(self.pv(pv)["spec"]["capacity"]["storage"], "4Mi")
        time.sleep(0.5)  # a duplicate would come now
        patches = [(r["path"], r["status"]) for r in self.api.requests(since=since, method="PATCH")
                   if r["path"] in (PV_PATH % pv, PVC_PATH % ("default", "g") + "/status")]
        claim = [st for path, st in patches if path != PV_PATH % pv]
        pvs = [st for path, st in patches if path == PV_PATH % pv]
        self.assertEqual(claim, [200, 200], patches)
        self.assertEqual(pvs, [500, 500, 500, 200], patches)
        self.assertEqual(patches[0][0], PVC_PATH % ("default", "g") + "/status")
        self.assertEqual(len(self.events_for("g", "VolumeResizeFailed")), 1)  # one, counted
        self.assertEqual(len(self.events_for("g", "VolumeResizeSuccessful")), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
