#!/usr/bin/env python3
"""Fan-out (not a test): N node instances of the real binary against one bench/fakeapi that
holds a large cluster, and what each instance and the server pay for it.

    bench/bench_fanout.py [--binary build-release/hostpath-provisioner]
                          [--fakeapi build-release/bench/fakeapi] [--instances 10,100]
                          [--claims 100000] [--nodes N] [--labels on|off]
                          [--touch 2000] [--provision 5] [--tmpdir /dev/shm]

The server (fakeapi --listeners N: one port per instance, so that what it sends is counted per
instance) is populated with --claims bound claims and as many Bound PVs, as this provisioner makes
them, spread round robin over --nodes nodes node-0000.. (default: one per instance). Instance i
runs with --node-name node-%04d, its own --pv-dir and kubeconfig, --kube-api-qps 0,
--resync-period 0, --usage-scan-period 0 and no metrics server; with --leader-elect on (the
default, as the DaemonSet runs) also --leader-elect with a 60 s retry period (lease traffic
stays out of the figures): instance 0 starts first and leads (it serves unscheduled claims and,
from issue 22 on, labels claims for their node); its figures are shown apart from the others'. With
--labels on the PVs (and claims) carry the labels this version puts on what it makes
(hostpath-provisioner.io/node and /provisioner); off, they carry none, as an older version made
them.

Phases, each measured per instance (median and max over instances) and for the server:
  - start-up: from the instances' start to every one logging "caches synced": bytes the server
    sent to each (all answers, LIST bodies, watch events) and the objects in them, by resource;
    CPU per instance (all threads, /proc/PID/task/*/schedstat);
  - RSS after sync (VmRSS, RssAnon; read --settle seconds after the last sync, the provisioner
    trims its heap every 2 s);
  - claim events that concern no instance: --touch bound claims of nodes without an instance
    (of every node when each node has one) get an annotation changed, one MODIFIED event each:
    bytes and events each instance received per claim event, CPU per instance per event, and
    the server's bytes per claim event summed over instances (what one event costs the API
    server at this many nodes);
  - provisioning: --provision new claims per instance node (selected-node set, class
    WaitForFirstConsumer): bytes per instance and in total per claim provisioned, and per
    claim watch event the server emitted;
  - RSS after provisioning.

Kills only what it started, by pid. Memory: an instance of a version that caches every object
holds the whole cluster; check `free` against instances x that before running large N.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROV = "hostpath-provisioner.io"
RES = ("persistentvolumeclaims", "persistentvolumes", "storageclasses", "leases")


def status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ns(pid):
    """CPU time of every thread of pid, in nanoseconds (schedstat: no tick rounding)."""
    total = 0
    for p in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(p) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Fake:
    def __init__(self, binary, state_dir, listeners):
        os.makedirs(state_dir, exist_ok=True)
        self.state_dir = state_dir
        cmd = [binary, "--state-dir", state_dir, "--listeners", str(listeners),
               "--class", "hostpath=%s:WaitForFirstConsumer" % PROV]
        self.log = open(os.path.join(state_dir, "fakeapi.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        ready = os.path.join(state_dir, "ready.json")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("fakeapi exited with %s" % self.proc.returncode)
            try:
                with open(ready) as f:
                    info = json.load(f)
                if info["pid"] == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        else:
            raise RuntimeError("fakeapi not ready")
        self.url = info["url"]
        self.pid = self.proc.pid

    def kubeconfig(self, i, n):
        return os.path.join(self.state_dir, "kubeconfig.%d" % i if n > 1 else "kubeconfig")

    def call(self, method, path, timeout=600):
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def wait(pred, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError("timed out waiting for " + what)


def log_has(path, text):
    try:
        with open(path, "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


def quiet(fake, procs, what, timeout):
    """Waits until the server has nothing left to send and no instance used more than 2 ms of
    CPU in 0.5 s (timers: the heap trim every 2 s)."""
    def idle():
        if fake.call("GET", "/admin/listeners")["pending"]:
            return False
        a = [cpu_ns(p.pid) for p in procs]
        time.sleep(0.5)
        b = [cpu_ns(p.pid) for p in procs]
        if os.environ.get("FANOUT_DEBUG"):
            print("quiet?", [y - x for x, y in zip(a, b)], flush=True)
        return all(y - x < 2e6 for x, y in zip(a, b))
    wait(idle, timeout, what, interval=0.1)


def progress(a, text):
    if a.verbose:
        print("  [%s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


def med(xs):
    return statistics.median(xs) if xs else 0


def one(a, n, tmp):
    nodes = a.nodes or n
    fake = Fake(a.fakeapi, os.path.join(tmp, "fake"), n)
    procs, logs = [], []
    r = {"instances": n, "nodes": nodes, "claims": a.claims, "leader_elect": a.leader_elect}
    try:
        t = time.monotonic()
        pop = fake.call("POST", "/admin/populate?claims=%d&nodes=%d&root=%s&labels=%d"
                        "&claim_labels=%d&size=64Ki" % (a.claims, nodes, os.path.join(tmp, "volumes"),
                                              a.labels == "on", a.labels == "on"))
        if pop["created"] != a.claims:
            raise RuntimeError("populated %s claims" % pop["created"])
        r["t_populate"] = time.monotonic() - t
        progress(a, "populated %d claims and PVs in %.1f s" % (a.claims, r["t_populate"]))
        fake.call("POST", "/admin/reset")
        t0 = time.monotonic()
        for i in range(n):
            node = "node-%04d" % i
            pv_dir = os.path.join(tmp, "volumes", node)
            os.makedirs(pv_dir, exist_ok=True)
            log = os.path.join(tmp, "%s.log" % node)
            args = [a.binary, "--kubeconfig", fake.kubeconfig(i, n), "--node-name", node,
                    "--pv-dir", pv_dir, "--metrics-address", "", "--resync-period", "0",
                    "--usage-scan-period", "0", "--kube-api-qps", "0"]
            if a.leader_elect == "on":
                args += ["--leader-elect", "--leader-elect-namespace", "default",
                         "--leader-elect-lease-duration", "120s",
                         "--leader-elect-renew-deadline", "100s",
                         "--leader-elect-retry-period", "60s"]
            args += a.extra
            with open(log, "ab") as err:
                procs.append(subprocess.Popen(args, stdout=err, stderr=err,
                                              stdin=subprocess.DEVNULL))
            logs.append(log)
            if i == 0 and a.leader_elect == "on":
                wait(lambda: log_has(log, "became leader") or procs[0].poll() is not None, 60,
                     "instance 0 leading", interval=0.05)
        for p, log in zip(procs, logs):
            wait(lambda: log_has(log, "caches synced") or p.poll() is not None,
                 a.timeout, "caches synced in %s" % log, interval=0.2)
            if p.poll() is not None:
                raise RuntimeError("instance exited with %s: %s" % (p.returncode, log))
        r["t_sync"] = time.monotonic() - t0
        progress(a, "%d instances synced in %.1f s" % (n, r["t_sync"]))
        quiet(fake, procs, "start-up to settle", a.timeout)
        st = fake.call("GET", "/admin/listeners")["listeners"]
        r["start_bytes"] = [x["bytes"] for x in st]
        for res in RES[:2]:
            r["start_" + res] = [x[res]["list_items"] + x[res]["watch_events"] for x in st]
        r["start_cpu_ms"] = [cpu_ns(p.pid) / 1e6 for p in procs]
        time.sleep(a.settle)
        r["rss_sync"] = [status_kib(p.pid, "VmRSS") for p in procs]
        r["anon_sync"] = [status_kib(p.pid, "RssAnon") for p in procs]

        # Claim events that concern no instance.
        if a.touch:
            fake.call("POST", "/admin/reset")
            c0 = [cpu_ns(p.pid) for p in procs]
            from_node = n if nodes > n else 0
            got = fake.call("POST", "/admin/touch?n=%d&node_from=%d" % (a.touch, from_node))
            quiet(fake, procs, "touch events delivered", a.timeout)
            c1 = [cpu_ns(p.pid) for p in procs]
            st = fake.call("GET", "/admin/listeners")["listeners"]
            m = got["touched"]
            r["touched"] = m
            r["touch_bytes"] = [x["bytes"] / m for x in st]
            r["touch_events"] = [x["persistentvolumeclaims"]["watch_events"] / m for x in st]
            r["touch_cpu_us"] = [(b - a_) / 1e3 / m for a_, b in zip(c0, c1)]
            r["touch_server_bytes"] = sum(x["bytes"] for x in st) / m
            progress(a, "%d claim events delivered" % m)

        # Provisioning on every instance's node.
        if a.provision:
            fake.call("POST", "/admin/reset")
            s0 = fake.call("GET", "/admin/stats")
            c0 = [cpu_ns(p.pid) for p in procs]
            for i in range(n):
                fake.call("POST", "/admin/claims?n=%d&prefix=p%d-&node=node-%04d&class=hostpath"
                          % (a.provision, i, i))
            want = s0["claims_bound"] + n * a.provision
            wait(lambda: fake.call("GET", "/admin/stats")["claims_bound"] >= want, a.timeout,
                 "%d new claims bound" % (n * a.provision))
            quiet(fake, procs, "provisioning settled", a.timeout)
            c1 = [cpu_ns(p.pid) for p in procs]
            st = fake.call("GET", "/admin/listeners")["listeners"]
            k = n * a.provision
            r["prov_bytes_total"] = sum(x["bytes"] for x in st) / k
            r["prov_claim_events"] = sum(x["persistentvolumeclaims"]["watch_events"]
                                         for x in st) / k
            r["prov_bytes"] = [x["bytes"] / a.provision for x in st]
            r["prov_cpu_ms"] = [(b - a_) / 1e6 / a.provision for a_, b in zip(c0, c1)]
            time.sleep(a.settle)
            r["rss_after"] = [status_kib(p.pid, "VmRSS") for p in procs]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        r["exit"] = [p.wait(60) for p in procs]
        return r
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        fake.stop()


def show(r):
    n = r["instances"]
    # With a leader (instance 0), the medians and maxima are the other instances'; the leader's
    # own figures follow.
    lead = r.get("leader_elect") == "on" and n > 1
    pick = (lambda xs: xs[1:]) if lead else (lambda xs: xs)  # noqa: E731
    r = dict(r)
    for k, v in list(r.items()):
        if isinstance(v, list) and len(v) == n and k != "exit":
            r["leader_" + k] = v[0]
            r[k] = pick(v)
    mib = lambda k: "%.2f / %.2f" % (med(r[k]) / 1024, max(r[k]) / 1024)  # noqa: E731
    rows = [
        ("cluster", "%d claims, %d PVs, %d nodes, %d instances" % (r["claims"], r["claims"],
                                                                  r["nodes"], n)),
        ("start-up: all instances synced", "%.1f s" % r["t_sync"]),
        ("start-up bytes per instance (median / max)",
         "%.2f / %.2f MB" % (med(r["start_bytes"]) / 1e6, max(r["start_bytes"]) / 1e6)),
        ("start-up objects per instance: claims / PVs (median)",
         "%d / %d" % (med(r["start_persistentvolumeclaims"]),
                      med(r["start_persistentvolumes"]))),
        ("start-up bytes, server total", "%.1f MB" % (sum(r["start_bytes"]) / 1e6)),
        ("start-up CPU per instance (median / max)",
         "%.0f / %.0f ms" % (med(r["start_cpu_ms"]), max(r["start_cpu_ms"]))),
        ("RSS after sync (median / max)", mib("rss_sync") + " MiB"),
        ("anonymous after sync (median / max)", mib("anon_sync") + " MiB"),
    ]
    if "touched" in r:
        rows += [
            ("claim event (%d of other nodes' claims):" % r["touched"], ""),
            ("  bytes per instance per event (median)", "%.0f B" % med(r["touch_bytes"])),
            ("  watch events per instance per event (median)", "%.2f" % med(r["touch_events"])),
            ("  CPU per instance per event (median / max)",
             "%.1f / %.1f us" % (med(r["touch_cpu_us"]), max(r["touch_cpu_us"]))),
            ("  server bytes per event, all instances", "%.0f B" % r["touch_server_bytes"]),
        ]
    if "prov_bytes" in r:
        rows += [
            ("provisioning (claims on every instance's node):", ""),
            ("  server bytes per claim provisioned, all instances",
             "%.0f B" % r["prov_bytes_total"]),
            ("  claim watch events sent per claim provisioned, all instances",
             "%.1f" % r["prov_claim_events"]),
            ("  bytes per instance per own claim (median / max)",
             "%.0f / %.0f B" % (med(r["prov_bytes"]), max(r["prov_bytes"]))),
            ("  CPU per instance per own claim (median / max)",
             "%.2f / %.2f ms" % (med(r["prov_cpu_ms"]), max(r["prov_cpu_ms"]))),
            ("  RSS after provisioning (median / max)", mib("rss_after") + " MiB"),
        ]
    if lead:
        rows += [
            ("the leader (instance 0): start-up bytes, claims / PVs",
             "%.2f MB, %d / %d" % (r["leader_start_bytes"] / 1e6,
                                   r["leader_start_persistentvolumeclaims"],
                                   r["leader_start_persistentvolumes"])),
            ("  RSS after sync", "%.2f MiB" % (r["leader_rss_sync"] / 1024)),
        ]
        if "touched" in r:
            rows += [("  bytes and CPU per claim event",
                      "%.0f B, %.1f us" % (r["leader_touch_bytes"], r["leader_touch_cpu_us"]))]
        if "prov_bytes" in r:
            k = n  # prov_* are per claim of its node: a.provision claims per node
            rows += [("  bytes and CPU per claim provisioned anywhere (it watches them all)",
                      "%.0f B, %.3f ms" % (r["leader_prov_bytes"] / k,
                                           r["leader_prov_cpu_ms"] / k))]
    rows.append(("exit codes", " ".join(sorted(set(str(x) for x in r["exit"])))))
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print("  %-*s  %s" % (w, k, v))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("HP_BINARY") or
                    os.path.join(ROOT, "build-release", "hostpath-provisioner"))
    ap.add_argument("--fakeapi", default=None, help="default: bench/fakeapi next to --binary")
    ap.add_argument("--instances", default="10,100", help="comma-separated N to run")
    ap.add_argument("--claims", type=int, default=100000)
    ap.add_argument("--nodes", type=int, default=0,
                    help="nodes the cluster's volumes are spread over (default: N)")
    ap.add_argument("--labels", choices=("on", "off"), default="off",
                    help="the populated PVs and claims carry this version's labels")
    ap.add_argument("--touch", type=int, default=2000)
    ap.add_argument("--provision", type=int, default=5, help="new claims per instance node")
    ap.add_argument("--tmpdir", default=None, help="parent of the --pv-dirs (e.g. /dev/shm)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--settle", type=float, default=4.0)
    ap.add_argument("--leader-elect", choices=("on", "off"), default="on",
                    help="run the instances with leader election (instance 0 leads)")
    ap.add_argument("-v", "--verbose", action="store_true", help="say what it is doing")
    ap.add_argument("--json", default=None, help="append each result as a JSON line here")
    ap.add_argument("extra", nargs="*", help="more provisioner flags (after --)")
    a = ap.parse_args()
    if a.fakeapi is None:
        a.fakeapi = os.path.join(os.path.dirname(os.path.abspath(a.binary)), "bench", "fakeapi")
    for p in (a.binary, a.fakeapi):
        if not os.access(p, os.X_OK):
            sys.exit("no executable at %s (meson setup build-release -Dbuildtype=release && "
                     "ninja -C build-release)" % p)
    print("bench_fanout: binary %s, %d claims and PVs, labels %s" % (a.binary, a.claims,
                                                                    a.labels))
    failed = 0
    for n in [int(x) for x in a.instances.split(",") if x]:
        tmp = tempfile.mkdtemp(prefix="hp-fanout-", dir=a.tmpdir)
        try:
            r = one(a, n, tmp)
        except (RuntimeError, TimeoutError, OSError) as e:
            print("N=%d FAILED: %s" % (n, e))
            for log in sorted(glob.glob(os.path.join(tmp, "node-*.log")))[:2]:
                print("--- %s\n%s" % (log, open(log, errors="replace").read()[-2000:]))
            failed += 1
            continue
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print("\nN = %d:" % n)
        show(r)
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(dict(r, binary=a.binary, labels=a.labels)) + "\n")
        failed += sum(1 for x in r["exit"] if x != 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
