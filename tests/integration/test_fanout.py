#!/usr/bin/env python3
"""A node instance keeps only what it can act on, and the API server sends it little else
(issue 22; docs/design.md, "A thousand nodes").

Two instances play node-a (started first: the leader, --leader-elect) and node-b against the
stand-in. What is checked:
- PVs we make carry hostpath-provisioner.io/node and hostpath-provisioner.io/provisioner, and
  node-b watches PVs by its node label plus the PVs without one; its log (--v 5 names every
  object the API server sends it) shows no PV and no claim of node-a;
- the leader labels WaitForFirstConsumer claims for their node, and again when the scheduler
  picks another node; node-b watches claims by its label;
- a hand-made PV on node-b (no label of ours) is still seen by node-b's identity check;
- an upgrade from the version before the labels, volumes in place: nothing is lost, deleted or
  provisioned twice; each PV is labelled by its own node's instance, which still releases it;
- a bound claim of node-b from before the labels whose request grows is labelled by the
  leader (from its PV's node when it names no selected node) and expanded by node-b.
"""

import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NODES_PATH, PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH,  # noqa: E402
                     ProvisionerTestCase, node, phase, volume, volume_dirs, wait_for)

NS = "default"
NODE_LABEL = "hostpath-provisioner.io/node"
PROV_LABEL = "hostpath-provisioner.io/provisioner"
SELECTED = "volume.kubernetes.io/selected-node"
LEADER = ("--leader-elect", "--leader-elect-lease-duration", "3s",
          "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms")


def received(p, resource):
    """The object keys p's log says the API server sent it for resource (--v 5)."""
    return set(re.findall(r"informer: received resource=%s type=\S+ object=(\S+)"
                          % re.escape(resource), p.log))


class FanoutTest(ProvisionerTestCase):
    tmp_prefix = "hp-fanout-"
    fast = ()

    def setUp(self):
        super().setUp()
        for n in ("node-a", "node-b", "node-c"):
            self.api.create(NODES_PATH, node(n))

    def instance(self, name, *args, pv_dir=None):
        p = self.spawn("--node-name", name, "--v", "5", "--retry-base-delay", "50ms",
                       "--retry-max-delay", "1s", "--kube-api-qps", "0", *(LEADER + args),
                       name=name, pv_dir=pv_dir)
        p.wait_log(r"caches synced", 20)
        return p

    def leader_and_b(self, *args, pv_dirs=(None, None)):
        a = self.instance("node-a", *args, pv_dir=pv_dirs[0])
        a.wait_log(r"main: became leader", 15)
        b = self.instance("node-b", *args, pv_dir=pv_dirs[1])
        return a, b

    def claim_for(self, name, node_name, cls="local", **kw):
        return self.add_claim(name, cls, NS, selected_node=node_name, size="1Ki", **kw)

    def pv_of(self, c):
        return self.pv("pvc-" + c["metadata"]["uid"])

    def test_each_instance_receives_its_own_objects_only(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        a, b = self.leader_and_b()
        mine = {n: [self.claim_for("%s-%d" % (n, i), n) for i in range(2)]
                for n in ("node-a", "node-b")}
        for cs in mine.values():
            self.wait_bound(cs)
        pvs = {n: [self.pv_of(c) for c in cs] for n, cs in mine.items()}
        for n, vs in pvs.items():
            for v in vs:
                self.assertEqual(v["metadata"]["labels"],
                                 {NODE_LABEL: n, PROV_LABEL: "hostpath-provisioner.io"})
        # The leader labelled every claim for node-b; bound, they keep the label. Its own
        # node's it served from its own copy, unlabelled and never patched: one Deployment on
        # local-path-provisioner's RBAC, which grants no patch of claims, must not need it.
        for n, cs in mine.items():
            for c in cs:
                got = self.api.get(PVC_PATH % (NS, c["metadata"]["name"]))
                self.assertEqual((got["metadata"].get("labels") or {}).get(NODE_LABEL),
                                 n if n == "node-b" else None)
        patched = {r["path"] for r in self.api.requests(method="PATCH")}
        for c in mine["node-a"]:
            self.assertNotIn(PVC_PATH % (NS, c["metadata"]["name"]), patched)

        # A claim for node-c (no instance), then the scheduler changes its mind to node-b: the
        # leader labels it for node-c, then for node-b, which provisions it.
        moved = self.claim_for("moved", "node-c")
        self.wait(lambda: (self.api.get(PVC_PATH % (NS, "moved"))["metadata"].get("labels")
                           or {}).get(NODE_LABEL) == "node-c", 10, "moved labelled node-c")
        time.sleep(0.3)
        self.assertEqual(phase(self.api, "moved"), "Pending")
        self.api.patch(PVC_PATH % (NS, "moved"), {"metadata": {"annotations": {
            SELECTED: "node-b"}}})
        self.wait_bound("moved")
        self.assertEqual(self.pv_of(moved)["metadata"]["labels"][NODE_LABEL], "node-b")
        pvs["node-b"].append(self.pv_of(moved))

        # node-b was sent nothing of node-a's: no PV, and no claim (it is not the leader).
        names = {n: {v["metadata"]["name"] for v in vs} for n, vs in pvs.items()}
        # b logs the PV's watch event when it handles it, which can be after the claim is
        # Bound.
        self.wait(lambda: names["node-b"] <= (received(b, "persistentvolumes")
                                             | received(b, "persistentvolumes-unlabelled")),
                  10, "node-b received its PVs")
        got_b = received(b, "persistentvolumes") | received(b, "persistentvolumes-unlabelled")
        self.assertEqual(got_b & names["node-a"], set(), b.log[-3000:])
        self.assertTrue(names["node-b"] <= got_b)
        claims_b = received(b, "persistentvolumeclaims")
        self.assertEqual(claims_b & {NS + "/node-a-0", NS + "/node-a-1"}, set())
        self.assertTrue({NS + "/node-b-0", NS + "/node-b-1", NS + "/moved"} <= claims_b)
        # The leader watches every claim (it labels them), but only its node's PVs.
        got_a = received(a, "persistentvolumes") | received(a, "persistentvolumes-unlabelled")
        self.assertEqual(got_a & names["node-b"], set())
        self.assertTrue({NS + "/node-b-0", NS + "/moved"} <= received(a, "persistentvolumeclaims"))
        # What node-b asked for: its label, and the PVs without one.
        queries = [r.get("query") or "" for r in self.api.requests(method="GET")
                   if r["path"] == PVS_PATH]
        self.assertTrue(any("labelSelector=hostpath-provisioner.io%2Fnode%3Dnode-b" in q
                            for q in queries), queries)
        self.assertTrue(any("labelSelector=%21hostpath-provisioner.io%2Fnode" in q
                            for q in queries), queries)
        for p in (a, b):
            self.assertNotRegex(p.log, r"\nE\d{4}")

    def test_hand_made_pv_on_the_node_is_still_checked(self):
        """An administrator's PV on node-b carries no label of ours: node-b still sees it (the
        watch of PVs without a node label) and refuses a volume inside its directory."""
        self.add_class("local", binding="WaitForFirstConsumer",
                       parameters={"pathPattern": "{{.PVC.Annotations.dir}}/{{.PVC.Name}}"})
        b_dir = os.path.join(self.tmp, "pv-node-b")
        shared = os.path.join(b_dir, "shared")
        os.makedirs(shared)
        with open(os.path.join(shared, "data"), "w") as f:
            f.write("admin's data\n")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(b_dir, alias)
        self.api.create(PVS_PATH, volume("admins", path=os.path.join(alias, "shared"),
                                         node="node-b"))
        # and one on node-a, which is not node-b's business
        self.api.create(PVS_PATH, volume("admins-a", path="/elsewhere", node="node-a"))
        a, b = self.leader_and_b(pv_dirs=(None, b_dir))
        c = self.claim_for("mine", "node-b", annotations={"dir": "shared"})
        ev = self.wait_event("mine", "ProvisioningFailed")
        self.assertIn("lies inside the directory of PersistentVolume admins", ev["message"])
        time.sleep(0.5)
        self.assertFalse(self.api.exists(PV_PATH % ("pvc-" + c["metadata"]["uid"])))
        self.assertEqual(sorted(os.listdir(shared)), ["data"])
        self.assertIn("admins", received(b, "persistentvolumes-unlabelled"))
        # Kept: on its node. The other node's was sent (no label to filter on) and dropped.
        self.assertIn("admins-a", received(b, "persistentvolumes-unlabelled"))

    def test_upgrade_labels_existing_volumes(self):
        """Volumes made by the version before the labels: the same PVs and journal records,
        without our labels (it wrote none; nothing else it wrote differs). After the upgrade
        each instance labels its own PVs, nothing is lost or provisioned twice, and each still
        releases its own."""
        self.add_class("local", binding="WaitForFirstConsumer")
        dirs = {n: os.path.join(self.tmp, "pv-" + n) for n in ("node-a", "node-b")}
        a, b = self.leader_and_b(pv_dirs=(dirs["node-a"], dirs["node-b"]))
        claims = {n: [self.claim_for("%s-%d" % (n, i), n) for i in range(3)] for n in dirs}
        for cs in claims.values():
            self.wait_bound(cs)
        for p in (a, b):
            self.assertEqual(p.stop(signal.SIGTERM), 0)
        # A restarted replica writes on in its log file: only what follows counts.
        since = {"node-a": len(a.log), "node-b": len(b.log)}
        # What the previous version left: no labels on PVs or claims.
        for cs in claims.values():
            for c in cs:
                self.api.patch(PV_PATH % ("pvc-" + c["metadata"]["uid"]),
                               {"metadata": {"labels": {NODE_LABEL: None, PROV_LABEL: None}}})
                self.api.patch(PVC_PATH % (NS, c["metadata"]["name"]),
                               {"metadata": {"labels": {NODE_LABEL: None}}})
        before_dirs = {n: volume_dirs(d) for n, d in dirs.items()}
        self.api.clear_requests()

        a, b = self.leader_and_b(pv_dirs=(dirs["node-a"], dirs["node-b"]))
        log_a = lambda: a.log[since["node-a"]:]  # noqa: E731
        log_b = lambda: b.log[since["node-b"]:]  # noqa: E731
        for n, cs in claims.items():
            for c in cs:
                name = "pvc-" + c["metadata"]["uid"]
                self.wait(lambda: (self.pv(name)["metadata"].get("labels") or {}).get(
                    NODE_LABEL) == n, 15, "%s labelled %s" % (name, n))
                self.assertEqual(self.pv(name)["metadata"]["labels"][PROV_LABEL],
                                 "hostpath-provisioner.io")
                self.assertEqual(phase(self.api, c["metadata"]["name"]), "Bound")
        # Each PV labelled by its own node's instance (a merge patch: idempotent; a second
        # one while the labelled copy is on its way is waste, not harm, and not expected).
        patches = [r for r in self.api.requests(method="PATCH", path_prefix=PVS_PATH + "/")]
        self.assertEqual(len({r["path"] for r in patches}), 6, patches)
        for n, log in (("node-a", log_a), ("node-b", log_b)):
            # Logged once the PATCH is answered: the last one can still be on its way.
            want = {"pvc-" + c["metadata"]["uid"] for c in claims[n]}
            self.wait(lambda: set(re.findall(r"labelled volume pv=(\S+)", log())) >= want, 10,
                      "%s's 'labelled volume' lines" % n)
            self.assertEqual(set(re.findall(r"labelled volume pv=(\S+)", log())), want)
        # Nothing lost, nothing made twice.
        self.assertEqual({n: volume_dirs(d) for n, d in dirs.items()}, before_dirs)
        self.assertEqual(len(self.api.list(PVS_PATH)["items"]), 6)
        self.assertEqual([r for r in self.api.requests(method="POST", path_prefix=PVS_PATH)
                          if r["path"] == PVS_PATH], [])
        for log in (log_a(), log_b()):
            self.assertNotIn("controller: provisioned volume", log)
            self.assertNotIn("deleted volume", log)
        # node-b's labelled PVs left the watch of unlabelled PVs for its node's watch; it still
        # works on them: a released one is deleted by node-b, and only it.
        victim = claims["node-b"][0]
        vname = "pvc-" + victim["metadata"]["uid"]
        self.api.delete(PVC_PATH % (NS, victim["metadata"]["name"]))
        self.wait(lambda: not self.api.exists(PV_PATH % vname), 20, "%s deleted" % vname)
        self.assertEqual(len(volume_dirs(dirs["node-b"])), 2)
        self.assertEqual(len(volume_dirs(dirs["node-a"])), 3)
        # The PV can be gone before b has handled the DELETE's answer and logged it.
        self.wait(lambda: re.search(r"deleted volume", log_b()), 10, "b's 'deleted volume'")
        self.assertEqual(len(re.findall(r"deleted volume", log_b())), 1)
        self.assertNotIn("deleted volume", log_a())
        # And new claims are served as before.
        late = self.claim_for("late", "node-b")
        self.wait_bound(late)
        self.assertEqual(len(volume_dirs(dirs["node-b"])), 3)
        for p in (a, b):
            self.assertNotRegex(p.log, r"\nE\d{4}")

    def test_old_claim_expands_on_its_node(self):
        """A bound claim of node-b from before the labels (not sent to node-b) grows: the
        leader labels it -- from its PV's node when it has no selected-node annotation -- and
        node-b expands its volume."""
        self.add_class("local", binding="WaitForFirstConsumer", allow_expansion=True)
        a, b = self.leader_and_b()
        old = [self.claim_for("old-%d" % i, "node-b") for i in range(2)]
        self.wait_bound(old)
        for i, c in enumerate(old):
            meta = {"labels": {NODE_LABEL: None}}
            if i == 1:  # as an Immediate claim would be: no selected node
                meta["annotations"] = {SELECTED: None}
            self.api.patch(PVC_PATH % (NS, c["metadata"]["name"]), {"metadata": meta})
        for c in old:
            self.api.patch(PVC_PATH % (NS, c["metadata"]["name"]),
                           {"spec": {"resources": {"requests": {"storage": "2Ki"}}}})
        for c in old:
            name = c["metadata"]["name"]
            self.wait(lambda: (self.api.get(PVC_PATH % (NS, name)).get("status") or {}).get(
                "capacity", {}).get("storage") == "2Ki", 20, "%s expanded" % name)
            self.assertEqual(self.pv_of(c)["spec"]["capacity"]["storage"], "2Ki")
            self.wait(lambda: (self.api.get(PVC_PATH % (NS, name))["metadata"].get("labels")
                               or {}).get(NODE_LABEL) == "node-b", 10,
                      "%s labelled node-b" % name)
        # The binder copies the PV's size into the claim's status by itself; the line is
        # logged once the provisioner's own claim PATCH is answered, a moment later.
        want = {NS + "/" + c["metadata"]["name"] for c in old}
        self.wait(lambda: set(re.findall(r"expanded volume claim=(\S+)", b.log)) >= want, 10,
                  "b's 'expanded volume' lines for %s" % sorted(want))
        self.assertEqual(set(re.findall(r"expanded volume claim=(\S+)", b.log)), want,
                         b.log[-3000:])
        self.assertNotIn("expanded volume", a.log)


if __name__ == "__main__":
    unittest.main()
