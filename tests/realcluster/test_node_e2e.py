#!/usr/bin/env python3
"""The upstream Kubernetes storage e2e suite against hostpath-provisioner on the real node.

e2e.test (built by build.sh from k8s.io/kubernetes/test/e2e of the pinned release) runs the
`External Storage [Driver: hostpath-provisioner]` specs that e2e/hostpath-driver.yaml enables
(the capabilities it declares), against the provisioner installed from manifests/install.yaml
through the sandbox overlay (nodeharness.sandbox_overlay): the fast set, then the [Slow] set
(about 7 minutes) when CI's time allows it: HP_E2E_SLOW=1 always runs it, HP_E2E_SLOW=0 never;
unset, it runs unless more than HP_E2E_SLOW_BUDGET_MIN (55) minutes have passed since
scripts/test.sh started (HP_CI_T0), as on a fresh machine whose first builds took their ~35
minutes: CI must end within 90. Every spec that cannot run on this machine is skipped by name below,
with the reason; any other failure fails the test. The counts and every spec's outcome are
printed (and kept in $HP_REALCLUSTER_LOGS/e2e-*.txt) for the table in README.
"""

import os
import re
import subprocess
import sys
import time
import unittest
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodeharness import NodeTestCase, require_node_cluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "e2e", "hostpath-driver.yaml")
DRIVER_NAME = "hostpath-provisioner"  # DriverInfo.Name in DRIVER
FOCUS = r"External.Storage.*hostpath-provisioner"
# Out of scope for a provisioner of this kind (the driver file declares none of them), and
# tests of the cluster rather than of the driver.
SKIP_ALWAYS = [r"\[Feature:", r"\[Disruptive\]", r"\[Serial\]"]
# Specs that cannot run on this machine, by name, each with its reason.
HOSTEXEC = ("uses e2e's HostExec: `nsenter --mount=/rootfs/proc/1/ns/mnt` from a privileged "
            "pod, which this sandbox denies ('can't open /rootfs/proc/1/ns/mnt: Permission "
            "denied')")
SKIP = [
    (r"volumeMode should not mount / map unused volumes in a pod",
     HOSTEXEC + "; it also looks under /var/lib/kubelet, not the node's --root-dir"),
]


def setUpModule():
    require_node_cluster()


def parse_junit(path):
    """[(name, outcome, message)] from ginkgo's JUnit report; outcome is passed, failed or
    skipped."""
    out = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name", "")
        if tc.find("failure") is not None or tc.find("error") is not None:
            f = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
            out.append((name, "failed", (f.get("message") or f.text or "")[:2000]))
        elif tc.find("skipped") is not None:
            out.append((name, "skipped", tc.find("skipped").get("message") or ""))
        else:
            out.append((name, "passed", ""))
    return out


def slow_set_wanted(now=None):
    """Whether to run the [Slow] set, and why (see the module's docstring)."""
    forced = os.environ.get("HP_E2E_SLOW", "")
    if forced == "0":
        return False, "is left out (HP_E2E_SLOW=0)"
    if forced == "1":
        return True, "runs (HP_E2E_SLOW=1)"
    t0 = os.environ.get("HP_CI_T0", "")
    budget = float(os.environ.get("HP_E2E_SLOW_BUDGET_MIN", "55"))
    if not t0.isdigit():
        return True, "runs (not under scripts/test.sh: no time budget)"
    spent = ((now if now is not None else time.time()) - int(t0)) / 60
    if spent > budget:
        return False, ("is left out: %.0f min of CI spent before it, more than %g "
                       "(HP_E2E_SLOW_BUDGET_MIN); it takes about 7 min and CI ends at 90 "
                       "(HP_E2E_SLOW=1 runs it anyway)" % (spent, budget))
    return True, "runs (%.0f min of CI spent, budget %g)" % (spent, budget)


class E2ETest(NodeTestCase):
    def run_e2e(self, label, focus, skip, timeout_s):
        e2e = os.path.join(self.cluster.bin_dir, "e2e.test")
        if not os.access(e2e, os.X_OK):
            self.fail("missing %s (run tests/realcluster/build.sh)" % e2e)
        report = os.path.join(self.tmp, "junit-%s.xml" % label)
        home = os.path.join(self.tmp, "home")
        os.makedirs(home, exist_ok=True)
        cmd = [e2e, "-kubeconfig", self.cluster.kubeconfig,
               "-storage.testdriver", DRIVER,
               "-ginkgo.focus", focus, "-ginkgo.skip", "|".join(skip),
               "-ginkgo.junit-report", report, "-ginkgo.no-color", "-ginkgo.v",
               "-ginkgo.timeout", "%ds" % timeout_s,
               # no cloud provider, no SSH to nodes, no log dump from them
               "-node-os-distro", "debian",
               "-report-dir", self.tmp, "-disable-log-dump",
               "-allowed-not-ready-nodes", "0", "-e2e-verify-service-account=false"]
        env = dict(os.environ, HOME=home, KUBECONFIG=self.cluster.kubeconfig,
                   KUBECTL_PATH=self.cluster.kubectl)
        t0 = time.monotonic()
        log_path = os.path.join(self.tmp, "e2e-%s.log" % label)
        with open(log_path, "wb") as log:
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                               stdin=subprocess.DEVNULL, timeout=timeout_s + 300, cwd=self.tmp)
        took = time.monotonic() - t0
        with open(log_path, errors="replace") as f:
            text = f.read()
        if not os.path.exists(report):
            self.fail("e2e.test exited %d without a report:\n%s" % (r.returncode, text[-6000:]))
        results = parse_junit(report)
        summary = self.summarize(label, results, took, r.returncode)
        sys.stdout.write(summary)
        keep = os.environ.get("HP_REALCLUSTER_LOGS")
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, "e2e-%s.txt" % label), "w") as f:
                f.write(summary)
            with open(os.path.join(keep, "e2e-%s.log" % label), "w") as f:
                f.write(text)
        failed = [x for x in results if x[1] == "failed"]
        self.assertEqual(failed, [], "failed specs; e2e.test output tail:\n" + text[-8000:])
        self.assertTrue(any(c == "passed" for c, _, _ in self.classify(results)),
                        "no spec of ours ran:\n" + text[-4000:])
        self.assertEqual(r.returncode, 0, text[-6000:])
        return results

    @staticmethod
    def classify(results, label=None):
        """Our driver's specs as (category, name, reason): passed, failed, skipped by the
        suite (a capability the driver file does not declare: its message), skipped here
        (SKIP: the reason written there), not selected (the focus/skip of this run)."""
        out = []
        for name, outcome, msg in results:
            if "[Driver: %s" % DRIVER_NAME not in name:
                continue
            short = re.sub(r"^(\[It\]\s*)?External Storage \[Driver: [^\]]*\]\s*", "", name)
            short = re.sub(r"\s*\[Driver: [^\]]*\]\s*$", "", short)
            mine = [why for rx, why in SKIP if re.search(rx, name)]
            if label and ("[Slow]" in name) != (label == "slow") and outcome == "skipped":
                out.append(("not selected", short, ""))
            elif outcome in ("passed", "failed"):
                out.append((outcome, short, " ".join(msg.split())[:300]))
            elif mine:
                out.append(("skipped here", short, mine[0]))
            elif msg.startswith("skipped - "):
                out.append(("skipped by the suite", short, msg[len("skipped - "):].strip()))
            else:
                out.append(("not selected", short, ""))
        return out

    @classmethod
    def summarize(cls, label, results, took, code):
        rows = cls.classify(results, label)
        counts = {}
        for cat, _, _ in rows:
            counts[cat] = counts.get(cat, 0) + 1
        lines = ["\n=== e2e %s: %s in %.0fs (exit %d) ===\n" % (
            label, ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())), took, code)]
        for cat, name, why in sorted(rows, key=lambda r: (r[0], r[1])):
            if cat != "not selected":
                lines.append("%-20s %s%s\n" % (cat, name, (" -- " + why) if why else ""))
        return "".join(lines)

    @classmethod
    def table(cls, runs):
        """README's table: per test pattern and suite, how many specs passed, failed, were
        skipped by the suite (with its reasons) or here (with ours), over the runs
        [(label, results)]."""
        rows = {}
        for label, results in runs:
            for cat, name, why in cls.classify(results, label):
                if cat == "not selected":
                    continue
                m = re.match(r"\[Testpattern: (.*?)\] (\S+) ", name)
                key = (m.group(1), m.group(2)) if m else ("", name)
                r = rows.setdefault(key, {"passed": 0, "failed": 0, "skipped by the suite": 0,
                                          "skipped here": 0, "why": set()})
                r[cat] += 1
                if why and cat.startswith("skipped"):
                    r["why"].add(re.sub(r"\s*-+ skipping$", "", why.split(" -- ")[0])[:160])
        out = ["| test pattern | suite | passed | failed | skipped by the suite | skipped here "
               "| why skipped |", "|---|---|---|---|---|---|---|"]
        for (pattern, suite), r in sorted(rows.items()):
            out.append("| %s | %s | %d | %d | %d | %d | %s |" % (
                pattern, suite, r["passed"], r["failed"], r["skipped by the suite"],
                r["skipped here"], "; ".join(sorted(r["why"])).replace("|", "/")))
        return "\n".join(out) + "\n"

    def test_external_storage(self):
        self.install("deployment")
        skips = SKIP_ALWAYS + [s for s, _ in SKIP]
        runs = [("fast", self.run_e2e("fast", FOCUS, skips + [r"\[Slow\]"], 2400))]
        run_slow, why = slow_set_wanted()
        print("e2e: the [Slow] set %s" % why, flush=True)
        if run_slow:
            runs.append(("slow", self.run_e2e("slow", FOCUS + r".*\[Slow\]", skips, 2400)))
        table = self.table(runs)
        sys.stdout.write("\n" + table)
        keep = os.environ.get("HP_REALCLUSTER_LOGS")
        if keep:
            with open(os.path.join(keep, "e2e-table.md"), "w") as f:
                f.write(table)


if __name__ == "__main__":
    unittest.main(verbosity=2)
