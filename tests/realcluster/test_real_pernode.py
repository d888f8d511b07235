#!/usr/bin/env python3
"""Per-node mode against a real control plane: three instances (--node-name node-a, node-b,
node-c, one --pv-dir each) and a WaitForFirstConsumer class. Pods using the claims are
scheduled by the real kube-scheduler, which writes volume.kubernetes.io/selected-node; only
that node's instance provisions, with node affinity and its node name as identity, and only
it deletes. And (issue 22) the real API server sends a node's instance its own node's PVs and
claims only: the PVs carry hostpath-provisioner.io/node, the leader labels the claims.
"""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (IDENTITY_ANN, POD_PATH, PV_PATH, PVC_PATH, PVS_PATH,  # noqa: E402
                         SELECTED, RealClusterTestCase, require_cluster)
from harness import volume  # noqa: E402

NODE_LABEL = "hostpath-provisioner.io/node"


def received(p, resource):
    """The objects p's log (--v 5) says the API server sent it for resource."""
    return set(re.findall(r"informer: received resource=%s type=\S+ object=(\S+)"
                          % re.escape(resource), p.log))


def setUpModule():
    require_cluster()


NODES = ("node-a", "node-b", "node-c")



def volume_dirs(pv_dir):
    """The volume directories under pv_dir (not the ownership journal's .hostpath-provisioner)."""
    return [d for d in os.listdir(pv_dir) if not d.startswith(".")]

class PerNodeTest(RealClusterTestCase):
    def test_three_nodes_each_serves_its_own(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        insts = {}
        for n in NODES:
            insts[n] = self.spawn("--node-name", n, name=n)
        for p in insts.values():
            p.wait_log(r"caches synced", 30)

        claims = {}
        for n in NODES:
            for i in range(2):
                name = "%s-%d" % (n, i)
                claims[name] = (n, self.add_claim(name, cls="local"))
                self.add_pod("pod-" + name, [name], node=n)
        # One claim whose pod lets the scheduler choose.
        free = self.add_claim("free", cls="local")
        self.add_pod("pod-free", ["free"])

        for name, (n, c) in claims.items():
            bound = self.wait_bound(name, timeout=90)
            self.assertEqual(bound["metadata"]["annotations"][SELECTED], n)
            pv = self.pv(bound["spec"]["volumeName"])
            self.assertEqual(pv["metadata"]["annotations"][IDENTITY_ANN], n)
            self.assertEqual(pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
                             ["matchExpressions"][0]["values"], [n])
            path = pv["spec"]["hostPath"]["path"]
            self.assertEqual(os.path.dirname(path), insts[n].pv_dir)
            self.assertTrue(os.path.isdir(path))
            self.wait(lambda: self.api.get(POD_PATH % (self.ns, "pod-" + name))["spec"]
                      .get("nodeName") == n, 60, "pod-%s scheduled to %s" % (name, n))
            self.wait(lambda: self.events_for(name, "ProvisioningSucceeded"), 20,
                      "ProvisioningSucceeded for %s" % name)
            evs = self.events_for(name, "ProvisioningSucceeded")
            self.assertEqual([(e.get("count", 1), e["source"].get("host")) for e in evs],
                             [(1, n)], "claim %s provisioned more than once" % name)
        bound = self.wait_bound("free", timeout=90)
        chosen = bound["metadata"]["annotations"][SELECTED]
        self.assertIn(chosen, NODES)
        pv = self.pv(bound["spec"]["volumeName"])
        self.assertEqual(pv["metadata"]["annotations"][IDENTITY_ANN], chosen)
        self.assertEqual(len(self.my_pvs()), 7)
        for n, p in insts.items():
            made = 2 + (1 if n == chosen else 0)
            # Bound once the PV exists; the line is read from stderr a moment later.
            self.wait(lambda: len(re.findall(r"controller: provisioned volume", p.log)) >= made,
                      10, "%d 'provisioned volume' lines from %s" % (made, n))
            self.assertEqual(len(re.findall(r"controller: provisioned volume", p.log)), made,
                             p.log[-2000:])
            self.assertEqual(len(volume_dirs(p.pv_dir)), made)

        # Deleting node-a's claims (pods first: pvc-protection) removes node-a's directories
        # and nothing else.
        for i in range(2):
            self.delete_pod("pod-node-a-%d" % i)
            self.api.delete(PVC_PATH % (self.ns, "node-a-%d" % i))
        for i in range(2):
            c = claims["node-a-%d" % i][1]
            self.wait_gone(PV_PATH % ("pvc-" + c["metadata"]["uid"]))
        self.assertEqual(volume_dirs(insts["node-a"].pv_dir),
                         [d for d in volume_dirs(insts["node-a"].pv_dir) if "free" in d])
        # The PV can be gone before node-a has handled the DELETE's answer and logged it.
        self.wait(lambda: len(re.findall(r"controller: deleted volume",
                                         insts["node-a"].log)) >= 2, 10,
                  "2 'deleted volume' lines from node-a")
        self.assertEqual(len(re.findall(r"controller: deleted volume", insts["node-a"].log)),
                         2)
        for n in ("node-b", "node-c"):
            self.assertNotIn("controller: deleted volume", insts[n].log)

        # node-b is down: its released volume waits for it; node-c does not touch it.
        self.assertEqual(insts["node-b"].stop(), 0)
        victim = claims["node-b-0"][1]
        vpv = "pvc-" + victim["metadata"]["uid"]
        self.delete_pod("pod-node-b-0")
        self.api.delete(PVC_PATH % (self.ns, "node-b-0"))
        self.wait(lambda: self.pv(vpv)["status"]["phase"] == "Released", 30, "Released")
        time.sleep(2.0)
        self.assertTrue(self.api.exists(PV_PATH % vpv))
        self.assertNotIn("controller: deleted volume", insts["node-c"].log)
        b2 = self.spawn("--node-name", "node-b", name="node-b", pv_dir=insts["node-b"].pv_dir)
        self.wait_gone(PV_PATH % vpv)
        self.wait(lambda: not os.path.lexists(os.path.join(
            b2.pv_dir, "%s-node-b-0-%s" % (self.ns, vpv))), 10, "node-b-0's directory removed")
        self.assertEqual(len(volume_dirs(b2.pv_dir)),
                         1 + (1 if chosen == "node-b" else 0))
        for name in ("node-b-1", "node-c-0", "node-c-1", "free"):
            self.assertEqual(self.phase(name), "Bound")

    def test_node_without_an_instance_stays_pending(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        a = self.spawn("--node-name", "node-a", name="node-a")
        a.wait_log(r"caches synced", 30)
        self.add_claim("on-c", cls="local")
        self.add_pod("pod-c", ["on-c"], node="node-c")
        self.wait(lambda: (self.claim_of("on-c")["metadata"].get("annotations") or {})
                  .get(SELECTED) == "node-c", 60, "scheduler selected node-c")
        time.sleep(2.0)
        self.assertEqual(self.phase("on-c"), "Pending")
        self.assertEqual(self.my_pvs(), [])
        self.assertEqual(self.events_for("on-c"), [])
        self.assertNotIn("nodeName", self.api.get(POD_PATH % (self.ns, "pod-c"))["spec"])
        # node-c's instance arrives: the claim binds and the scheduler finishes the pod.
        self.spawn("--node-name", "node-c", name="node-c")
        self.wait_bound("on-c", timeout=90)
        self.wait(lambda: self.api.get(POD_PATH % (self.ns, "pod-c"))["spec"]
                  .get("nodeName") == "node-c", 90, "pod-c scheduled")


    def test_each_instance_is_sent_its_own_node_only(self):
        """The real API server filters by our labels: node-b is sent no PV and no claim of
        node-a (its log names every object it is sent), only the PVs without a node label
        besides its own; node-a, the leader, labels node-b's claims for node-b and serves its
        own node's claims from its own copy, unlabelled (no PATCH where RBAC may grant none)."""
        self.add_class("local", binding="WaitForFirstConsumer")
        lead = ("--leader-elect", "--leader-elect-namespace", self.ns, "--v", "5")
        a = self.spawn("--node-name", "node-a", *lead, name="node-a")
        a.wait_log(r"main: became leader", 30)
        b = self.spawn("--node-name", "node-b", *lead, name="node-b")
        for p in (a, b):
            p.wait_log(r"caches synced", 30)
        # An administrator's PV on node-c: no label of ours, so every instance is sent it.
        hand = self.id_ + "-hand"
        self.api.create(PVS_PATH, volume(hand, path="/srv/hand", node="node-c"))
        self.addCleanup(self._delete_quietly, PV_PATH % hand)
        names = {}
        for n in ("node-a", "node-b"):
            for i in range(2):
                name = "%s-%d" % (n, i)
                names[name] = n
                self.add_claim(name, cls="local")
                self.add_pod("pod-" + name, [name], node=n)
        pvs = {"node-a": set(), "node-b": set()}
        for name, n in names.items():
            bound = self.wait_bound(name, timeout=90)
            self.assertEqual(bound["metadata"]["annotations"][SELECTED], n)
            labels = bound["metadata"].get("labels") or {}
            if n == "node-b":
                self.assertEqual(labels.get(NODE_LABEL), n)
            else:
                self.assertNotIn(NODE_LABEL, labels)
            pv = self.pv(bound["spec"]["volumeName"])
            self.assertEqual(pv["metadata"]["labels"][NODE_LABEL], n)
            # the provisioner name holds a '/': a label value made of it and a hash
            self.assertRegex(pv["metadata"]["labels"]["hostpath-provisioner.io/provisioner"],
                             r"^hostpath.test_[-A-Za-z0-9_.]*-[0-9a-f]{16}$")
            pvs[n].add(pv["metadata"]["name"])
        self.wait(lambda: pvs["node-b"] <= received(b, "persistentvolumes"), 10,
                  "node-b sent its PVs")
        got_b = received(b, "persistentvolumes") | received(b, "persistentvolumes-unlabelled")
        self.assertEqual(got_b & pvs["node-a"], set(), "node-b was sent node-a's PVs")
        self.assertIn(hand, received(b, "persistentvolumes-unlabelled"))
        # Every PV node-b was sent through its node's watch is labelled with node-b.
        for name in received(b, "persistentvolumes") & {v["metadata"]["name"] for v in
                                                          self.api.list(PVS_PATH)["items"]}:
            self.assertEqual(self.pv(name)["metadata"]["labels"].get(NODE_LABEL), "node-b")
        claims_b = received(b, "persistentvolumeclaims")
        self.assertEqual(claims_b & {"%s/node-a-0" % self.ns, "%s/node-a-1" % self.ns}, set())
        self.assertTrue({"%s/node-b-0" % self.ns, "%s/node-b-1" % self.ns} <= claims_b)
        got_a = received(a, "persistentvolumes") | received(a, "persistentvolumes-unlabelled")
        self.assertEqual(got_a & pvs["node-b"], set(), "node-a was sent node-b's PVs")
        for p in (a, b):
            self.assertNotRegex(p.log, r"\nE\d{4}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
