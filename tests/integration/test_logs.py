#!/usr/bin/env python3
"""Logs that answer "what is it doing" (issue 11), from the real binary against the local API
server.

- The start banner lists the effective configuration by flag name (workers, resync period,
  leader election with its lease and durations, kube-api-qps/burst, ...) and no secret.
- --log-format json: every line is one JSON object; the provisioning and deletion lines carry
  claim, pv and path as fields, not inside msg.
- --v 4: every API request, watches included (method, path with watch=1, status, ms) when they
  open and when they end; a request that got no HTTP answer has status=error and the error.
- A wrong token: one line saying to check the token / kubeconfig user, not one per retry; the
  provisioner recovers by itself once the token is accepted.
- Connection errors name what was tried and the likely cause: http:// to the TLS port, https://
  to a plain HTTP port, nothing listening.
- A standby replica says who holds the lease, once.
"""

import http.server
import json
import os
import re
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (PVC_PATH, PV_PATH, ProvisionerTestCase, wait_for)  # noqa: E402

NS = "default"
LEASE = "hostpath-provisioner.io"
CHECK_TOKEN = "check the token / kubeconfig user"


def free_port():
    """A loopback port that nothing listens on (bound a moment ago, closed now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def json_lines(text):
    """Every line parsed as JSON (fails on the first that is not one object)."""
    out = []
    for ln in text.splitlines():
        obj = json.loads(ln)
        assert isinstance(obj, dict), ln
        out.append(obj)
    return out


class Base(ProvisionerTestCase):
    tmp_prefix = "hp-logs-"

    def setUp(self):
        super().setUp()
        self.add_class()


class BannerTest(Base):
    def test_banner_lists_the_effective_configuration(self):
        p = self.spawn("--leader-elect", "--workers", "3", "--resync-period", "90s",
                       "--retry-base-delay", "250ms", "--kube-api-qps", "7.5",
                       "--kube-api-burst", "9", "--failed-retry-threshold", "4",
                       "--add-finalizer")
        m = p.wait_log(r"main: starting hostpath-provisioner (.*)\n", 10)
        banner = m.group(1)
        want = {
            "version": None, "provisioner": "hostpath-provisioner.io", "pv-dir": p.pv_dir,
            "identity": None, "node": "(none)", "api": self.api.url,
            "credentials": self.api.kubeconfig, "auth": "token",
            "default-reclaim-policy": "Delete", "workers": "3", "resync-period": "1m30s",
            "retry-base-delay": "250ms", "retry-max-delay": "5m",
            "failed-retry-threshold": "4", "leader-elect": "on",
            "leader-elect-lease": "%s/%s" % (NS, LEASE),
            "leader-elect-lease-duration": "15s", "leader-elect-renew-deadline": "10s",
            "leader-elect-retry-period": "2s", "kube-api-qps": "7.5", "kube-api-burst": "9",
            "kube-api-limit": "always",
            "metrics-address": "127.0.0.1:0", "add-finalizer": "on", "log-verbosity": "0",
            "log-format": "text",
        }
        got = dict(re.findall(r"(\S+?)=(\S+)", banner))
        for k, v in want.items():
            self.assertIn(k, got, banner)
            if v is not None:
                self.assertEqual(got[k], v, "%s in %s" % (k, banner))
        self.assertNotIn(self.api.token, p.log)

    def test_banner_without_leader_election(self):
        p = self.spawn("--log-format", "json", "--metrics-address", "")
        line = wait_for(lambda: [o for o in json_lines(p.log)
                                 if o["msg"] == "main: starting hostpath-provisioner"], 10,
                        what="banner")[0]
        self.assertEqual(line["leader-elect"], "off")
        self.assertNotIn("leader-elect-lease", line)
        self.assertEqual(line["metrics-address"], "off")
        self.assertEqual(line["workers"], "4")
        self.assertEqual(line["resync-period"], "15m")
        self.assertEqual(line["kube-api-qps"], "50")
        self.assertEqual(line["kube-api-limit"], "until-server-shows-apf")
        self.assertEqual(line["log-format"], "json")


class JsonTest(Base):
    def test_json_lines_carry_claim_and_pv_fields(self):
        p = self.spawn("--log-format", "json")
        self.add_claim("c1")
        bound = self.wait_bound("c1")
        pv = bound["spec"]["volumeName"]
        path = self.api.get(PV_PATH % pv)["spec"]["hostPath"]["path"]
        lines = wait_for(lambda: (lambda ls: ls if any(o.get("pv") == pv for o in ls)
                                  else None)(json_lines(p.log)), 10, what="provisioning line")
        prov = [o for o in lines if o["msg"] == "controller: provisioned volume"]
        self.assertEqual(len(prov), 1, lines)
        self.assertEqual(prov[0]["claim"], "%s/c1" % NS)
        self.assertEqual(prov[0]["pv"], pv)
        self.assertEqual(prov[0]["path"], path)
        self.assertEqual(prov[0]["level"], "info")
        self.assertNotIn("claim=", prov[0]["msg"])

        self.api.delete(PVC_PATH % (NS, "c1"))
        wait_for(lambda: any(o["msg"] == "controller: deleted volume" and o.get("pv") == pv
                             for o in json_lines(p.log)), 15, what="deletion line")
        self.assertEqual(p.stop(), 0)
        json_lines(p.log)  # to the last line


class RequestLogTest(Base):
    WATCH = (r"kube_client: watch %s method=GET path=(/api/v1/persistentvolumeclaims\?\S*"
             r"watch=1\S*) status=(\d+) ms=(\d+)")

    def test_v4_shows_every_request_and_watch(self):
        p = self.spawn("--v", "4")
        p.wait_log(r"caches synced", 10)
        opened = p.wait_log(self.WATCH % "opened", 10)
        # The first is a streaming list: the collection, then its changes, on one stream.
        self.assertIn("sendInitialEvents=true", opened.group(1))
        self.assertEqual(opened.group(2), "200")
        # The server ends the streams: each end is a line, then a new watch opens, resuming
        # where the last one ended.
        self.api.close_watches("/api/v1/persistentvolumeclaims")
        ended = p.wait_log(self.WATCH % "ended", 10)
        self.assertEqual(ended.group(1), opened.group(1))
        self.assertEqual(ended.group(2), "200")
        wait_for(lambda: len(re.findall(self.WATCH % "opened", p.log)) >= 2, 10,
                 what="the watch opened again")
        self.assertIn("resourceVersion=", re.findall(self.WATCH % "opened", p.log)[1][0])
        # Writes too: a claim's provisioning.
        self.add_claim("c1")
        self.wait_bound("c1")
        p.wait_log(r"kube_client: request method=POST path=/api/v1/persistentvolumes "
                   r"status=201 ms=\d+", 10)
        self.assertNotRegex(p.log, r"status=0\b")
        self.assertEqual(p.stop(), 0)
        self.assertRegex(p.log, self.WATCH % "cancelled")

    def test_v4_json_request_fields(self):
        p = self.spawn("--v", "4", "--log-format", "json")
        p.wait_log(r"caches synced", 10)
        p.wait_log(r"watch opened", 10)
        self.assertEqual(p.stop(), 0)
        watches = [o for o in json_lines(p.log) if o["msg"] == "kube_client: watch opened"]
        self.assertEqual(len(watches), 3, watches)
        for o in watches:
            self.assertEqual(o["method"], "GET")
            self.assertIn("watch=1", o["path"])
            self.assertEqual(o["status"], "200")
            self.assertRegex(o["ms"], r"^\d+$")

    def test_v4_names_the_status_of_a_request_without_answer(self):
        port = free_port()
        p = self.spawn("--v", "4", "--master", "https://127.0.0.1:%d" % port)
        m = p.wait_log(r"kube_client: request method=GET path=\S+ status=(\S+) ms=\d+ "
                       r"err=\"([^\n]*)\"", 10)
        self.assertEqual(m.group(1), "error")
        self.assertIn("nothing listens on 127.0.0.1:%d" % port, m.group(2))


class AuthTest(Base):
    def test_wrong_token_says_what_to_check_once(self):
        bad = "wrong-token-%d" % os.getpid()
        kc = self.api.write_kubeconfig(os.path.join(self.tmp, "wrong.kubeconfig"), token=bad)
        p = self.spawn(kubeconfig=kc)
        p.wait_log(CHECK_TOKEN, 10)
        # Several retries of three lists (backoff from 1 s), still one line.
        wait_for(lambda: len(self.api.requests(path_prefix="/api/v1/persistentvolumes")) >= 3,
                 15, what="retries")
        lines = [ln for ln in p.log.splitlines() if CHECK_TOKEN in ln]
        self.assertEqual(len(lines), 1, p.log)
        self.assertRegex(lines[0], r"^E.*HTTP 401 Unauthorized")
        self.assertIn("credentials=%s auth=token" % kc, lines[0])
        self.assertNotRegex(p.log, r"watch: list failed.*401", "retries are not news at --v 0")
        self.assertNotIn(bad, p.log)
        self.assertTrue(p.alive())
        # The token becomes valid: it recovers by itself.
        self.api.set_tokens([self.api.token, bad])
        p.wait_log(r"caches synced", 40)



class ForbiddenTest(Base):
    api_kw = {"authorization": "RBAC"}

    def test_forbidden_names_the_rbac_check(self):
        # A user no role is bound to: every list is forbidden.
        cert, key = self.api.mint_client_cert("nobody")
        kc = self.api.write_kubeconfig(os.path.join(self.tmp, "nobody.kubeconfig"), cert=cert,
                                       key=key)
        p = self.spawn(kubeconfig=kc)
        p.wait_log(r"HTTP 403 Forbidden", 10)
        wait_for(lambda: len(self.api.requests(path_prefix="/api/v1/persistentvolumes")) >= 3,
                 15, what="retries")
        lines = [ln for ln in p.log.splitlines() if "HTTP 403 Forbidden" in ln]
        # One per request kind (the lists of classes and volumes; claims wait for classes; as
        # leader, the CSIDriver read and the list of capacity objects), not one per retry.
        kinds = sorted(re.search(r'request="GET ([^?"]*)', ln).group(1) for ln in lines)
        self.assertEqual(kinds, ["/api/v1/persistentvolumes",
                                 "/apis/storage.k8s.io/v1/csidrivers/hostpath-provisioner.io",
                                 "/apis/storage.k8s.io/v1/namespaces/default/"
                                 "csistoragecapacities",
                                 "/apis/storage.k8s.io/v1/storageclasses"], p.log)
        for ln in lines:
            self.assertIn("RBAC", ln)
            self.assertIn("auth=client-certificate", ln)
            self.assertRegex(ln, r'message=".*nobody.*"')


class _PlainHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


# The first read of a collection is a streaming list (a watch), or a LIST where refused.
LIST_FAILED = r"watch: (?:streaming list|list|watch) failed resource=\S+ err=\"([^\n]*)\""


class ConnectionHintTest(Base):
    def test_http_to_the_tls_port(self):
        p = self.spawn("--master", "http://127.0.0.1:%d" % self.api.port)
        m = p.wait_log(LIST_FAILED, 10)
        self.assertIn("127.0.0.1:%d closed the connection without an HTTP answer" % self.api.port,
                      m.group(1))
        self.assertIn("the server URL must start with https://", m.group(1))
        self.assertIn("check --master / the kubeconfig server", m.group(1))

    def test_https_to_a_plain_http_port(self):
        srv = http.server.HTTPServer(("127.0.0.1", 0), _PlainHandler)
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1},
                             daemon=True)
        t.start()
        self.addCleanup(lambda: (srv.shutdown(), srv.server_close(), t.join(5)))
        port = srv.server_address[1]
        p = self.spawn("--master", "https://127.0.0.1:%d" % port)
        m = p.wait_log(LIST_FAILED, 10)
        self.assertIn("TLS handshake with 127.0.0.1:%d failed" % port, m.group(1))
        self.assertIn("plain HTTP port", m.group(1))

    def test_nothing_listens(self):
        port = free_port()
        p = self.spawn("--master", "https://127.0.0.1:%d" % port)
        m = p.wait_log(LIST_FAILED, 10)
        self.assertIn("connection refused: nothing listens on 127.0.0.1:%d" % port, m.group(1))
        self.assertNotIn("No route to host", p.log)


class StandbyTest(Base):
    SHORT = ["--leader-elect", "--leader-elect-lease-duration", "3s",
             "--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms"]

    def test_standby_logs_the_holder_once(self):
        a = self.spawn(*self.SHORT, name="a")
        a.wait_log(r"became leader", 10)
        holder = a.wait_log(r"leader election on lease=\S+ identity=(\S+)", 10).group(1)
        b = self.spawn(*self.SHORT, name="b")
        want = "leader: lease held by other identity=%s lease=%s/%s" % (holder, NS, LEASE)
        b.wait_log(re.escape(want), 10)
        time.sleep(2)  # four more attempts
        self.assertEqual(b.log.count(want), 1, b.log)
        self.assertNotIn("lease held by other", a.log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
