"""Capacity-aware scheduling (issue 21), against the stand-in: the CSIDriver object the leader
keeps, the CSIStorageCapacity objects each node's instance publishes (what placement could grant,
per class), how they follow provisioning, deletion and a filling disk, the rate limit, the
garbage collection of objects of gone classes and nodes, and the provisioner names that turn it
off. The real kube-scheduler using them is tests/realcluster/test_real_capacity.py.

Budgets from --config need no mounts; the filling-disk case mounts a tmpfs (root only; skipped
loudly otherwise).
"""

import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NODES_PATH, PROVISIONER, PVC_PATH, PVS_PATH,  # noqa: E402
                     ProvisionerTestCase, node, quantity_bytes, scrape, wait_for)

GI = 1024 ** 3
MI = 1024 ** 2
NS = "hp-system"
DRIVERS = "/apis/storage.k8s.io/v1/csidrivers"
DRIVER = DRIVERS + "/" + PROVISIONER
CAPS = "/apis/storage.k8s.io/v1/namespaces/%s/csistoragecapacities" % NS
DRIVER_LABEL = "csi.storage.k8s.io/drivername"
MANAGED_LABEL = "csi.storage.k8s.io/managed-by"


qty = quantity_bytes


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-capsched-"
    fast = ("--retry-base-delay", "50ms", "--retry-max-delay", "1s", "--resync-period", "0",
            "--v", "2", "--leader-elect-namespace", NS, "--capacity-update-interval", "200ms")

    def disks(self, budgets):
        """A --config for node-a: one directory per budget ({name: "1Gi"})."""
        paths, cap = [], {}
        for name, b in budgets.items():
            d = os.path.join(self.tmp, name)
            os.makedirs(d, exist_ok=True)
            paths.append(d)
            if b:
                cap[d] = b
        e = {"node": "node-a", "paths": paths}
        if cap:
            e["capacity"] = cap
        path = os.path.join(self.tmp, "config.json")
        with open(path + ".new", "w") as f:
            json.dump({"nodePathMap": [e]}, f)
        os.replace(path + ".new", path)
        return path, paths

    def node_instance(self, cfg, *args, name="node-a"):
        return self.provisioner("--node-name", name, "--config", cfg, *args)

    def objects(self, managed_by="hostpath-provisioner-node-a"):
        """node-a's objects (as its instance selects them), by class."""
        sel = "%s=%s,%s=%s" % (DRIVER_LABEL, PROVISIONER, MANAGED_LABEL, managed_by)
        return {o["storageClassName"]: o
                for o in self.api.list(CAPS, labelSelector=sel)["items"]}

    def numbers(self, cls):
        o = self.objects().get(cls)
        return None if o is None else (qty(o["capacity"]), qty(o["maximumVolumeSize"]))

    def wait_numbers(self, cls, want, timeout=20):
        wait_for(lambda: self.numbers(cls) == want, timeout,
                 what="%s's CSIStorageCapacity says %s (it says %s)" % (
                     cls, want, self.numbers(cls)))

    def claim_on(self, name, cls, size, node_name="node-a"):
        return self.add_claim(name, cls, size=size, selected_node=node_name)


class PublishTest(Base):
    def test_objects_follow_provisioning_and_deletion(self):
        cfg, (small, big) = self.disks({"small": "1Gi", "big": "3Gi"})
        self.add_class("local", binding="WaitForFirstConsumer")
        self.add_class("small-only", binding="WaitForFirstConsumer",
                       parameters={"nodePath": small})
        self.add_class("elsewhere", binding="WaitForFirstConsumer",
                       parameters={"nodePath": "/not/on/this/node"})
        self.add_class("foreign", provisioner="example.com/other")
        self.add_class("broken", parameters={"noSuchParameter": "x"})
        prov = self.node_instance(cfg)
        # One object per class of ours, in the provisioner's namespace, for this node: the
        # total room placement could grant, and the largest single volume it grants now.
        self.wait_numbers("local", (4 * GI, 3 * GI))
        self.wait_numbers("small-only", (1 * GI, 1 * GI))
        self.wait_numbers("elsewhere", (0, 0))
        objs = self.objects()
        self.assertEqual(sorted(objs), ["elsewhere", "local", "small-only"])
        o = objs["local"]
        self.assertEqual(o["metadata"]["labels"], {DRIVER_LABEL: PROVISIONER,
                                                   MANAGED_LABEL: "hostpath-provisioner-node-a"})
        self.assertEqual(o["nodeTopology"], {"matchLabels": {"kubernetes.io/hostname": "node-a"}})
        self.assertTrue(o["metadata"]["name"].startswith("node-a-local-"))
        # The CSIDriver that makes kube-scheduler read them.
        d = self.api.get(DRIVER)
        self.assertEqual({k: d["spec"][k] for k in ("attachRequired", "podInfoOnMount",
                                                    "storageCapacity", "volumeLifecycleModes")},
                         {"attachRequired": False, "podInfoOnMount": False,
                          "storageCapacity": True, "volumeLifecycleModes": ["Persistent"]})
        prov.wait_log(r"capacity: created CSIDriver %s storageCapacity=true" % PROVISIONER, 10)
        prov.wait_log(r"capacity: publishing CSIStorageCapacity objects namespace=%s "
                      r"node=node-a managed-by=hostpath-provisioner-node-a" % NS, 10)

        # A 2 Gi volume goes on the big disk: 2 Gi left in all, 1 Gi at most in one piece.
        self.claim_on("two", "local", "2Gi")
        self.wait_bound("two")
        self.wait_numbers("local", (2 * GI, 1 * GI))
        self.wait_numbers("small-only", (1 * GI, 1 * GI))
        # One on the small disk through its class: both classes see it.
        self.claim_on("one", "small-only", "1Gi")
        self.wait_bound("one")
        self.wait_numbers("small-only", (0, 0))
        self.wait_numbers("local", (1 * GI, 1 * GI))
        # Deletion gives the room back.
        self.api.delete(PVC_PATH % ("default", "two"))
        self.wait_numbers("local", (3 * GI, 3 * GI), timeout=30)
        self.api.delete(PVC_PATH % ("default", "one"))
        self.wait_numbers("local", (4 * GI, 3 * GI), timeout=30)
        self.wait_numbers("small-only", (1 * GI, 1 * GI))
        m = scrape(prov)
        self.assertEqual(m.get("hostpath_capacity_publishing"), 1)
        self.assertGreaterEqual(m.get("hostpath_capacity_objects_written_total",
                                        operation="create"), 3)
        self.assertGreaterEqual(m.get("hostpath_capacity_objects_written_total",
                                        operation="update"), 4)
        self.assertEqual(m.get("hostpath_capacity_write_failures_total", operation="update"),
                         0)
        self.assertEqual(m.get("hostpath_csidriver_writes_total", operation="create"), 1)
        # The gauges are drawn from the provisioner's watched copy of its objects, which
        # learns the update a moment after the server has it.
        self.wait(lambda: (scrape(prov).get("hostpath_capacity_published_bytes",
                                            storageclass="local", field="capacity"),
                           scrape(prov).get("hostpath_capacity_published_bytes",
                                            storageclass="local",
                                            field="maximumVolumeSize")) == (4 * GI, 3 * GI),
                  10, "published_bytes for local at 4 GiB / 3 GiB")

    def test_rate_limited_and_only_on_change(self):
        cfg, _ = self.disks({"disk": "10Gi"})
        self.add_class("local", binding="WaitForFirstConsumer")
        # A limit far longer than the test waits for anything: what must not wait for it.
        prov = self.node_instance(cfg, "--capacity-update-interval", "60s")
        self.wait_numbers("local", (10 * GI, 10 * GI))
        name = self.objects()["local"]["metadata"]["name"]
        path = CAPS + "/" + name

        def writes(since):
            return [r for r in self.api.requests(since=since, path_prefix=path)
                    if r["method"] != "GET"]
        # Less room after a placement is news the scheduler needs at once: written without
        # waiting for the interval, at most once per placement.
        since = self.api.requests()[-1]["seq"]
        for i in range(8):
            self.claim_on("c%d" % i, "local", "100Mi")
            self.wait_numbers("local", (10 * GI - (i + 1) * 100 * MI,) * 2, timeout=15)
        w = writes(since)
        self.assertEqual([r["method"] for r in w], ["PATCH"] * len(w))
        self.assertGreaterEqual(len(w), 8)
        # Room coming back waits its turn: of two deletions, one is written at most (a write
        # that adds room takes the turn of the 60 s; only less room after a placement does not).
        self.wait_bound(["c%d" % i for i in range(8)])
        since = self.api.requests()[-1]["seq"]
        self.api.delete(PVC_PATH % ("default", "c0"))
        prov.wait_log(r"controller: deleted volume .*default-c0-", 15)
        self.api.delete(PVC_PATH % ("default", "c1"))
        prov.wait_log(r"controller: deleted volume .*default-c1-", 15)
        time.sleep(2)
        self.assertLessEqual(len(writes(since)), 1)
        self.assertIn(self.numbers("local"), [(10 * GI - n * 100 * MI,) * 2 for n in (7, 8)])
        prov.stop()

        # With a 2 s limit: six deletions within a second, fewer writes, at least the interval
        # apart; the last one says the true number.
        self.node_instance(cfg, "--capacity-update-interval", "2s")
        self.wait_numbers("local", (10 * GI - 6 * 100 * MI,) * 2)
        since = self.api.requests()[-1]["seq"]
        t0 = time.time()
        for i in range(2, 8):
            self.api.delete(PVC_PATH % ("default", "c%d" % i))
            time.sleep(0.1)
        self.wait_numbers("local", (10 * GI, 10 * GI), timeout=30)
        elapsed = time.time() - t0
        w = writes(since)
        self.assertTrue(all(r["method"] == "PATCH" for r in w), w)
        self.assertLess(len(w), 6)
        self.assertLessEqual(len(w), int(elapsed / 2) + 2)
        times = [r["time"] for r in w]
        for a, b in zip(times, times[1:]):
            self.assertGreaterEqual(b - a, 1.8, "writes %.2fs apart" % (b - a))
        # Nothing changes: nothing is written, however long we wait.
        since = self.api.requests()[-1]["seq"]
        time.sleep(3)
        self.assertEqual([r for r in self.api.requests(since=since, path_prefix=CAPS)
                          if r["method"] != "GET"], [])


class AccountingTest(Base):
    def test_volume_watched_before_its_create_answer_counts_once(self):
        """The PV's watch event comes before the create's answer (a slow reply): from then on
        its size counts through the PV, not also through the provisioning's reservation."""
        cfg, _ = self.disks({"disk": "1Gi"})
        self.add_class("local", binding="WaitForFirstConsumer")
        self.node_instance(cfg)
        self.wait_numbers("local", (GI, GI))
        self.api.fail_next("POST", PVS_PATH, action="delay_reply", delay_ms=4000)
        self.claim_on("a", "local", "600Mi")
        wait_for(lambda: self.api.list(PVS_PATH)["items"], 10, what="a's PV stored")
        # Its answer is still on its way: one volume of 600 Mi is what the object says (twice
        # it would be nothing left), and a 400 Mi claim fits.
        for _ in range(5):
            self.assertEqual(self.numbers("local"), (424 * MI, 424 * MI))
            time.sleep(0.2)
        self.claim_on("b", "local", "400Mi")
        self.wait_bound("b")
        self.wait_bound("a")
        self.assertEqual(self.events_for("b", "ProvisioningFailed"), [])
        self.wait_numbers("local", (24 * MI, 24 * MI))


class SharedPathTest(Base):
    def test_class_on_a_shared_path_is_published_once_by_the_leader(self):
        """A class on a sharedFileSystemPath reaches every node: one object whose nodeTopology
        selects all nodes ({}), written by the leader (it alone provisions there); the node
        classes keep one object per node."""
        dirs = {n: os.path.join(self.tmp, n) for n in ("nfs", "disk-a", "disk-b")}
        for d in dirs.values():
            os.makedirs(d)
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"storageClassConfigs": {
                "local": {"nodePathMap": [
                    {"node": "node-a", "paths": [dirs["disk-a"]],
                     "capacity": {dirs["disk-a"]: "1Gi"}},
                    {"node": "node-b", "paths": [dirs["disk-b"]],
                     "capacity": {dirs["disk-b"]: "2Gi"}}]},
                "nfs": {"sharedFileSystemPath": dirs["nfs"]}}}, f)
        self.add_class("local", binding="WaitForFirstConsumer")
        self.add_class("nfs", binding="WaitForFirstConsumer")
        common = ("--config", cfg, "--leader-elect", "--leader-elect-namespace", NS,
                  "--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1s",
                  "--leader-elect-retry-period", "250ms")
        a = self.spawn("--node-name", "node-a", *common, name="a")
        a.wait_log(r"became leader", 15)
        b = self.spawn("--node-name", "node-b", *common, name="b")
        b.wait_log(r"caches synced", 15)

        def by_manager():
            out = {}
            for o in self.api.list(CAPS)["items"]:
                key = (o["metadata"]["labels"][MANAGED_LABEL], o["storageClassName"])
                out[key] = o
            return out
        want = {("hostpath-provisioner-node-a", "local"), ("hostpath-provisioner-node-b", "local"),
                ("hostpath-provisioner-shared", "nfs")}
        wait_for(lambda: set(by_manager()) == want, 20, what="objects %s" % sorted(want))
        objs = by_manager()
        shared = objs[("hostpath-provisioner-shared", "nfs")]
        self.assertEqual(shared["nodeTopology"], {})
        self.assertTrue(shared["metadata"]["name"].startswith("shared-nfs-"))
        self.assertGreater(qty(shared["capacity"]), 0)
        self.assertEqual(qty(objs[("hostpath-provisioner-node-b", "local")]["capacity"]), 2 * GI)
        uid = shared["metadata"]["uid"]
        # The leader goes: the next one finds the object and keeps it; the standby never
        # touched it.
        self.assertNotIn("shared-nfs-", b.log)
        a.stop()
        b.wait_log(r"became leader", 20)
        time.sleep(1)
        objs = by_manager()
        self.assertEqual(objs[("hostpath-provisioner-shared", "nfs")]["metadata"]["uid"], uid)
        self.assertNotIn(("hostpath-provisioner-node-a", "nfs"), objs)


class CleanupTest(Base):
    def test_objects_of_gone_classes_and_nodes_are_removed(self):
        cfg, _ = self.disks({"disk": "2Gi"})
        self.add_class("local", binding="WaitForFirstConsumer")
        self.add_class("short-lived", binding="WaitForFirstConsumer")
        self.api.create(NODES_PATH, node("node-b"))

        def stale(name, cls, node_name, managed_by):
            self.api.create(CAPS, {
                "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": name, "namespace": NS,
                             "labels": {DRIVER_LABEL: PROVISIONER, MANAGED_LABEL: managed_by}},
                "storageClassName": cls,
                "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node_name}},
                "capacity": "5Gi", "maximumVolumeSize": "5Gi"})
        # Left by an earlier run of this node for a class that no longer exists; by node-b
        # (still a node); by node-x (gone); and another provisioner's.
        stale("old-class", "gone", "node-a", "hostpath-provisioner-node-a")
        stale("of-node-b", "local", "node-b", "hostpath-provisioner-node-b")
        stale("of-node-x", "local", "node-x", "hostpath-provisioner-node-x")
        self.api.create(CAPS, {
            "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"name": "not-ours", "namespace": NS,
                         "labels": {DRIVER_LABEL: "other.example.com"}},
            "storageClassName": "local", "capacity": "1Gi"})
        prov = self.node_instance(cfg)
        self.wait_numbers("short-lived", (2 * GI, 2 * GI))
        wait_for(lambda: not self.api.exists(CAPS + "/old-class"), 20,
                 what="this node's object of a gone class deleted")
        wait_for(lambda: not self.api.exists(CAPS + "/of-node-x"), 20,
                 what="the object of a node that no longer exists deleted")
        prov.wait_log(r"capacity: deleted CSIStorageCapacity %s/of-node-x of node node-x, "
                      r"which no longer exists" % NS, 10)
        self.assertTrue(self.api.exists(CAPS + "/of-node-b"))
        self.assertTrue(self.api.exists(CAPS + "/not-ours"))
        # A class deleted: its object goes.
        name = self.objects()["short-lived"]["metadata"]["name"]
        self.api.delete("/apis/storage.k8s.io/v1/storageclasses/%s" % "short-lived")
        wait_for(lambda: not self.api.exists(CAPS + "/" + name), 20,
                 what="the object of a deleted class deleted")
        # An object of ours deleted by someone else: made again.
        name = self.objects()["local"]["metadata"]["name"]
        self.api.delete(CAPS + "/" + name)
        wait_for(lambda: self.api.exists(CAPS + "/" + name), 20, what="object made again")
        self.assertEqual(self.numbers("local"), (2 * GI, 2 * GI))
        # Edited by hand: put right.
        self.api.patch(CAPS + "/" + name, {"capacity": "100Gi", "maximumVolumeSize": "100Gi"})
        self.wait_numbers("local", (2 * GI, 2 * GI))
        self.assertEqual(scrape(prov).get("hostpath_capacity_stale_objects_deleted_total"), 1)


class DriverTest(Base):
    def test_existing_driver_is_updated_keeping_other_fields(self):
        self.api.create(DRIVERS, {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                                  "metadata": {"name": PROVISIONER,
                                               "labels": {"team": "storage"}},
                                  "spec": {"attachRequired": False, "storageCapacity": False,
                                           "podInfoOnMount": True, "fsGroupPolicy": "File"}})
        cfg, _ = self.disks({"disk": "1Gi"})
        prov = self.node_instance(cfg)
        wait_for(lambda: self.api.get(DRIVER)["spec"]["storageCapacity"], 15,
                 what="storageCapacity: true")
        d = self.api.get(DRIVER)
        self.assertFalse(d["spec"]["podInfoOnMount"])
        self.assertEqual(d["spec"]["fsGroupPolicy"], "File")  # not ours: kept
        self.assertEqual(d["metadata"]["labels"], {"team": "storage"})
        prov.wait_log(r"capacity: updated CSIDriver %s storageCapacity=true" % PROVISIONER, 5)
        self.assertEqual(scrape(prov).get("hostpath_csidriver_writes_total",
                                            operation="update"), 1)

    def test_immutable_field_is_reported_not_fought(self):
        self.api.create(DRIVERS, {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                                  "metadata": {"name": PROVISIONER}, "spec": {}})
        cfg, _ = self.disks({"disk": "1Gi"})
        prov = self.node_instance(cfg)
        prov.wait_log(r"CSIDriver %s has attachRequired other than false, which cannot be "
                      r"changed in place: delete it \(kubectl delete csidriver %s\) and the "
                      r"leader makes it again" % (PROVISIONER, PROVISIONER), 15)
        self.assertEqual([r for r in self.api.requests(path_prefix=DRIVERS)
                          if r["method"] == "PUT"], [])
        self.assertTrue(self.api.get(DRIVER)["spec"]["attachRequired"])

    def test_without_node_name_no_objects_and_capacity_false(self):
        self.add_class("hostpath")
        prov = self.provisioner()
        prov.wait_log(r"capacity: no --node-name: this instance publishes no "
                      r"CSIStorageCapacity objects", 10)
        wait_for(lambda: self.api.exists(DRIVER), 10, what="CSIDriver made")
        self.assertFalse(self.api.get(DRIVER)["spec"]["storageCapacity"])
        self.add_claim("c", "hostpath")
        self.wait_bound("c")
        self.assertEqual(self.api.list(CAPS)["items"], [])
        self.assertEqual(scrape(prov).get("hostpath_capacity_publishing"), 0)

    def test_standby_leaves_the_driver_alone(self):
        self.add_class("hostpath")
        a = self.spawn("--leader-elect", "--node-name", "node-a", name="a")
        a.wait_log(r"became leader", 15)
        wait_for(lambda: self.api.exists(DRIVER), 10, what="CSIDriver made")
        b = self.spawn("--leader-elect", "--node-name", "node-b", name="b")
        b.wait_log(r"caches synced", 15)
        time.sleep(1)
        self.assertNotIn("CSIDriver", b.log)
        # Both publish their own node's objects, leader or not (spawn: namespace default).
        caps = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities"
        wait_for(lambda: {o["metadata"]["labels"][MANAGED_LABEL]
                          for o in self.api.list(caps)["items"]} ==
                 {"hostpath-provisioner-node-a", "hostpath-provisioner-node-b"}, 15,
                 what="objects of both nodes")


class OffTest(Base):
    def test_name_that_cannot_name_a_csidriver(self):
        self.add_class("local", provisioner="rancher.io/local-path",
                       binding="WaitForFirstConsumer")
        cfg, _ = self.disks({"disk": "1Gi"})
        prov = self.node_instance(cfg, "--provisioner-name", "rancher.io/local-path")
        prov.wait_log(r"capacity: capacity-aware scheduling is off: --provisioner-name "
                      r"rancher\.io/local-path cannot name a CSIDriver \(a CSIDriver name must "
                      r"be a lower-case DNS subdomain", 10)
        self.claim_on("c", "local", "100Mi")
        self.wait_bound("c")
        self.assertEqual(len(re.findall(r"cannot name a CSIDriver", prov.log)), 1)
        self.assertEqual(self.api.requests(path_prefix="/apis/storage.k8s.io/v1/csidrivers"), [])
        self.assertEqual([r for r in self.api.requests()
                          if "csistoragecapacities" in r["path"]], [])
        self.assertEqual(scrape(prov).get("hostpath_capacity_publishing"), 0)

    def test_disabled_by_flag(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        cfg, _ = self.disks({"disk": "1Gi"})
        prov = self.node_instance(cfg, "--enable-capacity=false")
        prov.wait_log(r"capacity: capacity-aware scheduling is off \(--enable-capacity=false\)",
                      10)
        self.claim_on("c", "local", "100Mi")
        self.wait_bound("c")
        self.assertEqual([r for r in self.api.requests()
                          if "csidrivers" in r["path"] or "csistoragecapacities" in r["path"]],
                         [])


class FillingDiskTest(Base):
    def test_free_bytes_are_polled(self):
        if os.geteuid() != 0:
            self.skipTest("SKIPPED LOUDLY: mounting a tmpfs of known size needs root")
        d = os.path.join(self.tmp, "disk")
        r = self.mount_tmpfs(d, "size=64m")
        if r.returncode != 0:
            self.skipTest("SKIPPED LOUDLY: cannot mount a tmpfs here: %s" % r.stderr.strip())
        path = os.path.join(self.tmp, "config.json")
        with open(path, "w") as f:
            json.dump({"nodePathMap": [{"node": "node-a", "paths": [d]}]}, f)
        self.add_class("local", binding="WaitForFirstConsumer")
        self.node_instance(path, "--capacity-poll-interval", "500ms")
        wait_for(lambda: self.numbers("local") and self.numbers("local")[0] >= 60 * MI, 20,
                 what="a 64 MiB disk published")
        # Something fills the disk outside any volume: the free bytes show within a poll.
        with open(os.path.join(d, "filler"), "wb") as f:
            f.write(b"\0" * (40 * MI))
        wait_for(lambda: self.numbers("local")[0] <= 25 * MI, 20,
                 what="the filled disk published (%s)" % (self.numbers("local"),))
        self.assertEqual(self.numbers("local")[0], self.numbers("local")[1])
        os.unlink(os.path.join(d, "filler"))
        wait_for(lambda: self.numbers("local")[0] >= 60 * MI, 20, what="room back")


if __name__ == "__main__":
    unittest.main(verbosity=2)
