#!/usr/bin/env python3
"""Capacity-aware scheduling with the real kube-scheduler (issue 21).

Three instances, one per node (--node-name node-a, node-b, node-c), share one --config whose
paths have budgets of 1 Gi, 3 Gi and 10 Gi (no mount needed), and a WaitForFirstConsumer class.
Each publishes a CSIStorageCapacity object for its node; the leader makes the CSIDriver object
(storageCapacity: true) named after the provisioner, so kube-scheduler's VolumeBinding plugin
weighs them. Pods never run here (there is no kubelet): the scheduler's decision - the claim's
volume.kubernetes.io/selected-node and the pod's spec.nodeName - is what is checked.

- A claim that fits only on one node is sent there on the first try: no ProvisioningFailed, no
  selected node handed back, no other instance ever looks at it, one Scheduled event.
- A burst of claims that together fill all three nodes exactly ends with every node full and
  none over its budget: the burst spreads as room runs out (claims sent to a node whose object
  was not updated yet are handed back and land elsewhere; the count of those round trips is
  printed).
- The objects follow deletions back up.

Provisioner names here are DNS subdomains (<test id>.hostpath.test), as a CSIDriver needs.
"""

import json
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (POD_PATH, PVC_PATH, PV_PATH, SELECTED,  # noqa: E402
                         RealClusterTestCase, require_cluster)
from harness import quantity_bytes  # noqa: E402

GI = 1024 ** 3
NODES = ("node-a", "node-b", "node-c")
BUDGETS = {"node-a": 1, "node-b": 3, "node-c": 10}  # Gi
CSIDRIVERS = "/apis/storage.k8s.io/v1/csidrivers"
TOPOLOGY = "kubernetes.io/hostname"


def setUpModule():
    require_cluster()


qty = quantity_bytes


class CapacityTest(RealClusterTestCase):
    def setUp(self):
        super().setUp()
        # A CSIDriver name: a lower-case DNS subdomain of at most 63 characters.
        self.prov_name = self.id_ + ".hostpath.test"
        self.addCleanup(self._delete_quietly, CSIDRIVERS + "/" + self.prov_name)
        self.caps = "/apis/storage.k8s.io/v1/namespaces/%s/csistoragecapacities" % self.ns

    def start_nodes(self):
        entries, dirs = [], {}
        for n in NODES:
            d = os.path.join(self.tmp, "disk-" + n)
            os.makedirs(d)
            dirs[n] = d
            entries.append({"node": n, "paths": [d], "capacity": {d: "%dGi" % BUDGETS[n]}})
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"nodePathMap": entries}, f)
        insts = {}
        for n in NODES:
            # The default --capacity-update-interval (5s): less room is written at once, more
            # room waits its turn.
            insts[n] = self.spawn("--node-name", n, "--config", cfg, "--leader-elect",
                                  "--leader-elect-namespace", self.ns, name=n)
        for n, p in insts.items():
            p.wait_log(r"capacity: publishing CSIStorageCapacity objects namespace=%s node=%s"
                       % (self.ns, n), 30)
        return insts, dirs

    def published(self):
        """{node: (capacity, maximumVolumeSize)} of the class's objects."""
        out = {}
        for o in self.api.list(self.caps)["items"]:
            if o["storageClassName"] != self.cls_name("local"):
                continue
            node = o["nodeTopology"]["matchLabels"][TOPOLOGY]
            out[node] = (qty(o["capacity"]), qty(o["maximumVolumeSize"]))
        return out

    def wait_published(self, want, timeout=60):
        return self.wait(lambda: self.published() == want, timeout,
                         "published %s (now %s)" % (want, self.published()))

    def driver_ready(self):
        """The CSIDriver exists with storageCapacity: true, and the scheduler has had a moment
        to see it and the objects (its informers)."""
        self.wait(lambda: self.api.exists(CSIDRIVERS + "/" + self.prov_name) and
                  self.api.get(CSIDRIVERS + "/" + self.prov_name)["spec"]["storageCapacity"],
                  30, "CSIDriver with storageCapacity: true")
        d = self.api.get(CSIDRIVERS + "/" + self.prov_name)["spec"]
        self.assertEqual((d["attachRequired"], d["podInfoOnMount"], d["volumeLifecycleModes"]),
                         (False, False, ["Persistent"]))
        time.sleep(2)

    def pod_events(self, pod):
        return [e for e in self.api.list("/api/v1/namespaces/%s/events" % self.ns)["items"]
                if e["involvedObject"].get("kind") == "Pod" and
                e["involvedObject"].get("name") == pod]

    def test_claim_that_fits_one_node_goes_there_first_try(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        insts, dirs = self.start_nodes()
        self.wait_published({n: (b * GI, b * GI) for n, b in BUDGETS.items()})
        self.driver_ready()

        # 5 Gi fits node-c only (node-a has 1 Gi, node-b 3 Gi).
        self.add_claim("big", cls="local", size="5Gi")
        self.add_pod("pod-big", ["big"])
        bound = self.wait_bound("big", timeout=90)
        self.assertEqual(bound["metadata"]["annotations"][SELECTED], "node-c")
        self.wait(lambda: self.api.get(POD_PATH % (self.ns, "pod-big"))["spec"]
                  .get("nodeName") == "node-c", 60, "pod-big bound to node-c")
        pv = self.pv(bound["spec"]["volumeName"])
        self.assertTrue(pv["spec"]["hostPath"]["path"].startswith(dirs["node-c"] + "/"))
        # The first try: no refusal, no selected node handed back, nobody else involved.
        # (Events are sent a moment after what they tell of: wait for them first.)
        self.wait(lambda: self.events_for("big", "ProvisioningSucceeded", ns=self.ns), 20,
                  "ProvisioningSucceeded for big")
        self.wait(lambda: [e for e in self.pod_events("pod-big") if e["reason"] == "Scheduled"],
                  20, "pod-big's Scheduled event")
        self.assertEqual(self.events_for("big", "ProvisioningFailed", ns=self.ns), [])
        self.assertEqual([(e.get("count", 1), e["source"].get("host")) for e in
                          self.events_for("big", "ProvisioningSucceeded", ns=self.ns)],
                         [(1, "node-c")])
        # (A scheduler whose watch has not shown it the claim yet says "not found": not a
        # capacity matter.)
        self.assertEqual([e["reason"] for e in self.pod_events("pod-big")
                          if e["reason"] == "Scheduled" or (e["reason"] == "FailedScheduling"
                                                           and "not found" not in e["message"])],
                         ["Scheduled"])
        # Other nodes' instances never act on it: the leader (one of them) labels it for
        # node-c, nothing more; the others are not even sent it (their watch selects claims
        # labelled with their own node).
        for n in ("node-a", "node-b"):
            acted = [ln for ln in insts[n].log.splitlines() if "/big" in ln and
                     "ctl_labels.c" not in ln and "method=PATCH" not in ln]
            self.assertEqual(acted, [], "%s's instance acted on the claim" % n)
        self.assertNotRegex(insts["node-c"].log, r"no room|handed back|reschedul")
        # node-c's object follows: 5 Gi left, in one piece.
        self.wait_published({"node-a": (GI, GI), "node-b": (3 * GI, 3 * GI),
                             "node-c": (5 * GI, 5 * GI)})

        # Too big for every node: the scheduler keeps it pending; no instance is asked.
        self.add_claim("huge", cls="local", size="11Gi")
        self.add_pod("pod-huge", ["huge"])
        self.wait(lambda: any(e["reason"] == "FailedScheduling"
                              for e in self.pod_events("pod-huge")), 60,
                  "FailedScheduling for pod-huge")
        time.sleep(2)
        self.assertNotIn(SELECTED, self.claim_of("huge")["metadata"].get("annotations") or {})
        self.assertEqual(self.events_for("huge", ns=self.ns), [])
        msg = [e["message"] for e in self.pod_events("pod-huge")
               if e["reason"] == "FailedScheduling"][-1]
        self.assertIn("did not have enough free storage", msg)

    def test_burst_spreads_as_room_runs_out_and_objects_follow_deletions(self):
        self.add_class("local", binding="WaitForFirstConsumer")
        insts, dirs = self.start_nodes()
        self.wait_published({n: (b * GI, b * GI) for n, b in BUDGETS.items()})
        self.driver_ready()

        # 14 claims of 1 Gi at once: exactly what the three nodes hold together.
        total = sum(BUDGETS.values())
        names = ["c%02d" % i for i in range(total)]
        for c in names:
            self.add_claim(c, cls="local", size="1Gi")
            self.add_pod("pod-" + c, [c])
        t0 = time.monotonic()
        for c in names:
            self.wait_bound(c, timeout=240)
        took = time.monotonic() - t0
        per_node = {n: 0 for n in NODES}
        where = {}
        for c in names:
            node = self.claim_of(c)["metadata"]["annotations"][SELECTED]
            per_node[node] += 1
            where[c] = node
        # Every node full, none over: the provisioners' accounting and the scheduler agree.
        self.assertEqual(per_node, BUDGETS)
        for c in names:
            self.wait(lambda: self.api.get(POD_PATH % (self.ns, "pod-" + c))["spec"]
                      .get("nodeName") == where[c], 60, "pod-%s bound" % c)
        self.wait_published({n: (0, 0) for n in NODES})
        round_trips = sum(len(self.events_for(c, "ProvisioningFailed", ns=self.ns))
                          for c in names)
        sys.stderr.write("\nburst of %d claims: bound in %.1fs, %d handed back to the "
                         "scheduler (a node's object not yet updated)\n"
                         % (len(names), took, round_trips))
        for n, p in insts.items():
            # Bound once the PV exists; the line is read from stderr a moment later.
            self.wait(lambda: len(re.findall(r"controller: provisioned volume", p.log)) >=
                      BUDGETS[n], 10, "%d 'provisioned volume' lines from %s" % (BUDGETS[n], n))
            self.assertEqual(len(re.findall(r"controller: provisioned volume", p.log)),
                             BUDGETS[n], n)

        # Deletions: node-c's objects grow back as its volumes go.
        on_c = [c for c in names if where[c] == "node-c"][:4]
        pvs = [self.claim_of(c)["spec"]["volumeName"] for c in on_c]
        for c in on_c:
            self.delete_pod("pod-" + c)
            self.api.delete(PVC_PATH % (self.ns, c))
        for pv in pvs:
            self.wait_gone(PV_PATH % pv)
        self.wait_published({"node-a": (0, 0), "node-b": (0, 0), "node-c": (4 * GI, 4 * GI)})
        # And the room is used again, on node-c: a 4 Gi claim goes there first try.
        self.add_claim("again", cls="local", size="4Gi")
        self.add_pod("pod-again", ["again"])
        bound = self.wait_bound("again", timeout=90)
        self.assertEqual(bound["metadata"]["annotations"][SELECTED], "node-c")
        self.assertEqual(self.events_for("again", "ProvisioningFailed", ns=self.ns), [])
        self.wait_published({n: (0, 0) for n in NODES})


if __name__ == "__main__":
    unittest.main(verbosity=2)
