#!/usr/bin/env python3
"""Our client against the real kube-apiserver: HTTP/2 with every watch and request multiplexed
over one TLS connection, API Priority and Fairness seen, events as `kubectl describe pvc`
shows them, metrics.

HTTP/2 is proven twice, independently: the provisioner's --v 4 request lines carry the
protocol libcurl negotiated (http=2), and /proc shows the process holds exactly one TCP
connection to the API server while its three watches are open, which HTTP/1.1 cannot do (a
watch holds its connection until it ends).
"""

import os
import re
import sys
import time
import unittest
import urllib.error
import urllib.request
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realharness import (PV_PATH, PVC_PATH, RealClusterTestCase,  # noqa: E402
                         connections_to, require_cluster, scrape)


def setUpModule():
    require_cluster()


# The --v 4 line of a finished request or watch: method, path, status, HTTP version.
REQ_LINE = re.compile(r"kube_client: (?:request|watch ended) method=(GET|POST|PUT|PATCH|DELETE) "
                      r"path=(\S+) status=(\S+) ms=\d+ (?:err=\"[^\"\n]*\" )?http=(\S+)")


class ClientTest(RealClusterTestCase):
    def api_port(self):
        return urlsplit(self.cluster.url).port

    def test_http2_one_connection_for_watches_and_writes(self):
        self.add_class()
        p = self.provisioner("--node-name", "node-a")
        p.wait_log(r"caches synced", 30)
        # The three lists are done and the three watches (claims, volumes, classes) start on
        # the same connection.
        self.wait(lambda: len(connections_to(p.pid, self.api_port())) == 1, 10,
                  "one connection after the initial lists")
        first = connections_to(p.pid, self.api_port())
        # Claims made now reach the provisioner only through the claim watch; their PVs'
        # Released phase (after the claims are deleted) only through the volume watch. Writes
        # (PV create/delete, events) run beside both watches.
        for i in range(3):
            self.add_claim("c%d" % i)
        for i in range(3):
            self.wait_bound("c%d" % i)
        conns = connections_to(p.pid, self.api_port())
        self.assertEqual(conns, first, "connections from the provisioner to the API server: "
                         "%r (HTTP/2 multiplexes all watches and requests over one)" % conns)
        for i in range(3):
            self.api.delete(PVC_PATH % (self.ns, "c%d" % i))
        self.wait(lambda: not self.my_pvs(), 60, "PVs deleted")
        self.assertEqual(connections_to(p.pid, self.api_port()), first,
                         "the same single connection carried the deletions")
        self.assertNotRegex(p.log, r"watch: .*(failed|listing again|resuming)")

        lines = REQ_LINE.findall(p.log)
        # The collections are read by streaming lists (watches); the requests: three PV
        # creates and deletes and their events.
        self.assertGreater(len(lines), 6, p.log[-2000:])
        versions = {v for _, _, _, v in lines}
        self.assertEqual(versions, {"2"}, "HTTP versions seen: %r" % versions)
        methods = {m for m, _, _, _ in lines}
        self.assertTrue({"POST", "DELETE"} <= methods, methods)
        watches = re.findall(r"kube_client: watch opened method=GET \S+ status=200 ms=\d+ "
                             r"http=(\S+)", p.log)
        self.assertGreaterEqual(len(watches), 3, p.log[-2000:])
        self.assertEqual(set(watches), {"2"}, "HTTP versions of the watches: %r" % watches)

    def test_api_priority_and_fairness_seen(self):
        p = self.provisioner()
        m = p.wait_log(r"server has API Priority and Fairness flowschema-uid=(\S+)", 30)
        uid = m.group(1)
        # The UID names a real FlowSchema: the admin certificate is in system:masters, which
        # the "exempt" schema matches.
        schemas = self.api.list("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas")["items"]
        byuid = {s["metadata"]["uid"]: s["metadata"]["name"] for s in schemas}
        self.assertEqual(byuid.get(uid), "exempt", byuid)
        self.assertEqual(len(re.findall(r"server has API Priority and Fairness", p.log)), 1)
        # The default client-side write limit gave way to it, once.
        self.assertEqual(len(re.findall(r"runs API Priority and Fairness, which protects it: "
                                        r"the default client-side write limit is off", p.log)), 1)
        # Every response carries the headers (checked on one of ours).
        r = self.api.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims" % self.ns)
        self.assertIn("X-Kubernetes-Pf-Flowschema-Uid", r.headers)
        self.assertIn("X-Kubernetes-Pf-Prioritylevel-Uid", r.headers)

    def test_events_in_kubectl_describe(self):
        self.add_class(parameters={"mode": "0700"})
        self.add_class("bad", parameters={"sizeLimit": "1Gi"})
        self.provisioner()
        c = self.add_claim("shown")
        self.add_claim("refused", cls="bad")
        self.wait_bound("shown")
        self.wait_event("shown", "ProvisioningSucceeded")
        self.wait_event("refused", "ProvisioningFailed")
        # kube-controller-manager writes its event when it gets to it.
        self.wait_event("shown", "ExternalProvisioning", component="persistentvolume-controller")
        out = self.kubectl("describe", "pvc", "-n", self.ns, "shown").stdout
        ev = out[out.index("Events:"):]
        name = "pvc-" + c["metadata"]["uid"]
        self.assertRegex(ev, r"Normal\s+ExternalProvisioning\s+.*persistentvolume-controller")
        # No "Provisioning" event is required: one is written only for a provisioning still
        # running after 0.5 s (its ProvisioningSucceeded says it all).
        self.assertRegex(ev, r"Normal\s+ProvisioningSucceeded\s+.*%s\s+.*%s" % (
            re.escape(self.prov_name), name))
        self.assertRegex(out, r"Status:\s+Bound")
        self.assertRegex(out, r"Volume:\s+%s" % name)
        out = self.kubectl("describe", "pvc", "-n", self.ns, "refused").stdout
        self.assertRegex(out[out.index("Events:"):],
                         r"Warning\s+ProvisioningFailed\s+.*%s\s+.*unknown StorageClass "
                         r"parameter \"sizeLimit\"" % re.escape(self.prov_name))
        # Repeats aggregate into one Event with a count ("(x3 over ...)" in describe).
        for i in range(2):
            self.api.patch(PVC_PATH % (self.ns, "refused"),
                           {"metadata": {"labels": {"touch": str(i)}}})
        self.wait(lambda: self.events_for("refused", "ProvisioningFailed")[0].get("count", 1)
                  >= 3, 30, "ProvisioningFailed count 3")
        self.assertEqual(len(self.events_for("refused", "ProvisioningFailed")), 1)
        out = self.kubectl("describe", "pvc", "-n", self.ns, "refused").stdout
        self.assertRegex(out, r"ProvisioningFailed\s+\d+s \(x[3-9] over \d+s\)")
        # kubectl get events shows the same, with our component as the source.
        out = self.kubectl("get", "events", "-n", self.ns, "-o", "wide").stdout
        self.assertIn(self.prov_name, out)

    def test_metrics_after_real_traffic(self):
        self.add_class()
        p = self.provisioner()
        url = p.metrics_url()
        self.wait(lambda: http_status(url + "/readyz") == 200, 30, "/readyz 200")
        m0 = scrape(p)
        c = self.add_claim("m1")
        self.wait_bound("m1")
        self.api.delete(PVC_PATH % (self.ns, "m1"))
        self.wait_gone(PV_PATH % ("pvc-" + c["metadata"]["uid"]))
        cls = {"class": self.cls_name()}
        m = self.wait(lambda: (lambda m: m if m.get("controller_persistentvolume_delete_total",
                                                    **cls) == 1 else None)(scrape(p)), 15,
                      "delete_total 1")
        lab = dict(cls, source="")
        self.assertEqual(m.get("controller_persistentvolumeclaim_provision_total", **lab), 1,
                         m.text)
        self.assertEqual(m.get("controller_persistentvolumeclaim_provision_duration_seconds"
                               "_count", **lab), 1)
        self.assertEqual(m.sum("controller_persistentvolumeclaim_provision_failed_total"), 0)
        self.assertEqual(m.get("controller_persistentvolume_delete_duration_seconds_count",
                               **cls), 1)
        self.assertGreaterEqual(m.get("rest_client_requests_total", method="POST", code="201"),
                                m0.get("rest_client_requests_total", method="POST", code="201")
                                + 2)  # the PV and an event
        self.assertGreaterEqual(m.get("rest_client_requests_total", method="DELETE",
                                      code="200"), 1)
        bad = {dict(ls).get("code"): v for (n, ls), v in m.samples.items()
               if n == "rest_client_requests_total" and dict(ls).get("code", "")[:1] in "45"}
        self.assertEqual(bad, {}, "error answers from the real server")
        self.assertEqual(m.sum("hostpath_watch_relists_total"), 0)
        self.assertEqual(m.sum("hostpath_watch_malformed_events_total"), 0)
        self.wait(lambda: scrape(p).sum("workqueue_depth") == 0, 15, "work queue drained")


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


if __name__ == "__main__":
    unittest.main(verbosity=2)
