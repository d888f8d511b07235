#!/usr/bin/env python3
"""The provisioner's own ceiling (not a test): the real binary against bench/fakeapi, the fast
in-memory stand-in for the API server, each pinned to its own core (taskset -c 0 for the
provisioner and its threads, -c 1 for the server), N claims created at once by the server
itself, then all deleted at once.

    bench/bench_fast.py [--binary build-release/hostpath-provisioner]
                        [--fakeapi build-release/bench/fakeapi] [--claims 2000] [--runs 3]
                        [--configs qps0,default] [--apf on|off|both] [--tmpdir /dev/shm]

Reports per configuration (medians over --runs, every run's figures with -v):
  - volumes/s: claims created -> last claim Bound (timestamps taken by the server, so no
    polling error), and claims deleted -> last PV object deleted;
  - the provisioner's CPU per volume (utime+stime of all its threads) and its CPU use during
    the burst (1.0 = the one core saturated), the server's CPU use (to show it is not the
    bottleneck);
  - API requests per volume by verb and resource, as the server counted them;
  - RSS and anonymous memory idle (caches synced), holding N volumes, after deleting them
    (read --settle seconds after the burst).

Configurations: `qps0` runs with --kube-api-qps 0 (no client-side limit), `default` with the
provisioner's default flags. --apf says whether the server sends the API Priority and Fairness
headers (as a real server with APF does), `both` runs each configuration with and without.
"""

import argparse
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
CLK = os.sysconf("SC_CLK_TCK")
PROV = "hostpath-provisioner.io"


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def taskset(cpu):
    """The taskset prefix for a CPU, or [] when there is no taskset or that CPU."""
    if shutil.which("taskset") and cpu < (os.cpu_count() or 1):
        return ["taskset", "-c", str(cpu)]
    return []


class Fake:
    def __init__(self, binary, state_dir, apf, cpu):
        os.makedirs(state_dir, exist_ok=True)
        self.state_dir = state_dir
        cmd = taskset(cpu) + [binary, "--state-dir", state_dir, "--apf", apf,
                              "--class", "hostpath=" + PROV]
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
        self.kubeconfig = info["kubeconfig"]
        self.pid = self.proc.pid

    def call(self, method, path):
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stats(self):
        return self.call("GET", "/admin/stats")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def volume_dirs(pv_dir):
    try:
        return [n for n in os.listdir(pv_dir) if not n.startswith(".")]
    except FileNotFoundError:
        return []


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise TimeoutError("timed out waiting for " + what)


def one_run(a, config, apf, tmp):
    """One server, one provisioner, N claims in and out. Returns a dict of figures."""
    fake = Fake(a.fakeapi, os.path.join(tmp, "fake"), apf, 1)
    prov = None
    try:
        pv_dir = os.path.join(tmp, "volumes")
        os.makedirs(pv_dir, exist_ok=True)
        args = [a.binary, "--kubeconfig", fake.kubeconfig, "--pv-dir", pv_dir,
                "--metrics-address", "127.0.0.1:0", "--resync-period", "0"]
        if config == "qps0":
            args += ["--kube-api-qps", "0"]
        args += a.extra
        err = open(os.path.join(tmp, "provisioner.stderr"), "ab")
        prov = subprocess.Popen(taskset(0) + args, stdout=err, stderr=err,
                                stdin=subprocess.DEVNULL)
        err.close()
        log = os.path.join(tmp, "provisioner.stderr")
        wait(lambda: "caches synced" in open(log, errors="replace").read(), 30, "caches synced")
        time.sleep(1.0)
        pid = prov.pid
        r = {"rss_idle": status_kib(pid, "VmRSS"), "anon_idle": status_kib(pid, "RssAnon")}
        fake.call("POST", "/admin/reset")
        n = a.claims
        c0, s0 = cpu_seconds(pid), cpu_seconds(fake.pid)
        made = fake.call("POST", "/admin/claims?n=%d&prefix=b&class=hostpath" % n)
        if made["created"] != n:
            raise RuntimeError("server created %d claims" % made["created"])
        st = wait(lambda: (lambda s: s if s["claims_bound"] >= n else None)(fake.stats()),
                  a.timeout, "%d claims bound" % n)
        c1, s1 = cpu_seconds(pid), cpu_seconds(fake.pid)
        r["t_bind"] = (st["t_last_bound_ns"] - made["t0_ns"]) / 1e9
        r["wall_bind"] = (st["now_ns"] - made["t0_ns"]) / 1e9
        r["cpu_prov"] = c1 - c0
        r["cpu_fake_prov"] = s1 - s0
        r["req_prov"] = st["requests"]
        r["events_prov"] = st["events_created"] + st["events_patched"]
        time.sleep(a.settle)
        r["rss_full"] = status_kib(pid, "VmRSS")
        r["anon_full"] = status_kib(pid, "RssAnon")
        if len(volume_dirs(pv_dir)) != n:
            raise RuntimeError("%d directories for %d claims" % (len(volume_dirs(pv_dir)), n))

        fake.call("POST", "/admin/reset")
        c2, s2 = cpu_seconds(pid), cpu_seconds(fake.pid)
        gone = fake.call("DELETE", "/admin/claims")
        st = wait(lambda: (lambda s: s if s["pvs"] == 0 else None)(fake.stats()), a.timeout,
                  "all PVs deleted")
        wait(lambda: not volume_dirs(pv_dir), a.timeout, "all directories removed")
        c3, s3 = cpu_seconds(pid), cpu_seconds(fake.pid)
        r["t_delete"] = (st["t_last_pv_deleted_ns"] - gone["t0_ns"]) / 1e9
        r["cpu_del"] = c3 - c2
        r["cpu_fake_del"] = s3 - s2
        r["req_del"] = st["requests"]
        time.sleep(a.settle)
        r["rss_after"] = status_kib(pid, "VmRSS")
        r["hwm"] = status_kib(pid, "VmHWM")
        prov.send_signal(signal.SIGTERM)
        r["exit"] = prov.wait(30)
        return r
    finally:
        if prov is not None and prov.poll() is None:
            prov.kill()
            prov.wait(5)
        fake.stop()


def per_volume(reqs, n):
    return {k: v / n for k, v in sorted(reqs.items()) if not k.startswith(("LIST", "WATCH"))}


def fmt_reqs(d):
    return ", ".join("%s %.2f" % (k, v) for k, v in d.items()) or "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.environ.get("HP_BINARY") or
                    os.path.join(ROOT, "build-release", "hostpath-provisioner"))
    ap.add_argument("--fakeapi", default=None, help="default: bench/fakeapi next to --binary")
    ap.add_argument("--claims", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", default="qps0,default",
                    help="comma-separated: qps0 (--kube-api-qps 0), default (no rate flags)")
    ap.add_argument("--apf", choices=("on", "off", "both"), default="on")
    ap.add_argument("--tmpdir", default=None, help="parent of --pv-dir (e.g. /dev/shm)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between the end of a burst and reading RSS (the provisioner "
                    "trims free heap memory every 2 s)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run")
    ap.add_argument("extra", nargs="*", help="more provisioner flags (after --)")
    a = ap.parse_args()
    if a.fakeapi is None:
        a.fakeapi = os.path.join(os.path.dirname(os.path.abspath(a.binary)), "bench", "fakeapi")
    for p in (a.binary, a.fakeapi):
        if not os.access(p, os.X_OK):
            sys.exit("no executable at %s (meson setup build-release --buildtype=release && "
                     "ninja -C build-release)" % p)
    apfs = ["on", "off"] if a.apf == "both" else [a.apf]
    configs = [c for c in a.configs.split(",") if c]
    n = a.claims
    print("bench_fast: %d claims, %d run(s) each, binary %s, provisioner on CPU 0, fakeapi on "
          "CPU 1, --pv-dir under %s" % (n, a.runs, a.binary, a.tmpdir or tempfile.gettempdir()))
    failed = 0
    for config in configs:
        for apf in apfs:
            runs = []
            for i in range(a.runs):
                tmp = tempfile.mkdtemp(prefix="hp-fast-", dir=a.tmpdir)
                try:
                    r = one_run(a, config, apf, tmp)
                except (RuntimeError, TimeoutError) as e:
                    print("  %s apf=%s run %d FAILED: %s\n%s" % (
                        config, apf, i + 1, e,
                        open(os.path.join(tmp, "provisioner.stderr"),
                             errors="replace").read()[-3000:]))
                    failed += 1
                    continue
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                runs.append(r)
                if a.verbose:
                    print("  run %d: bind %.3f s (%.0f/s), delete %.3f s, CPU %.3f/%.3f ms/vol, "
                          "prov CPU use %.2f, server %.2f, RSS idle %.1f MiB full %.1f MiB"
                          % (i + 1, r["t_bind"], n / r["t_bind"], r["t_delete"],
                             r["cpu_prov"] * 1e3 / n, r["cpu_del"] * 1e3 / n,
                             r["cpu_prov"] / r["wall_bind"], r["cpu_fake_prov"] / r["wall_bind"],
                             r["rss_idle"] / 1024, r["rss_full"] / 1024))
            if not runs:
                continue
            med = lambda k: statistics.median(x[k] for x in runs)  # noqa: E731
            rows = [
                ("provisioned: claims created -> all Bound",
                 "%.3f s = %.0f volumes/s" % (med("t_bind"), n / med("t_bind"))),
                ("deleted: claims deleted -> all PVs gone",
                 "%.3f s = %.0f volumes/s" % (med("t_delete"), n / med("t_delete"))),
                ("provisioner CPU per volume, provisioning / deleting",
                 "%.3f / %.3f ms" % (med("cpu_prov") * 1e3 / n, med("cpu_del") * 1e3 / n)),
                ("CPU use while provisioning: provisioner / fakeapi (1.0 = one core)",
                 "%.2f / %.2f" % (statistics.median(x["cpu_prov"] / x["wall_bind"] for x in runs),
                                  statistics.median(x["cpu_fake_prov"] / x["wall_bind"]
                                                    for x in runs))),
                ("requests per volume, provisioning", fmt_reqs(per_volume(runs[0]["req_prov"], n))),
                ("requests per volume, deleting", fmt_reqs(per_volume(runs[0]["req_del"], n))),
                ("RSS idle / holding %d / after delete" % n,
                 "%.2f / %.2f / %.2f MiB" % (med("rss_idle") / 1024, med("rss_full") / 1024,
                                             med("rss_after") / 1024)),
                ("anonymous idle / holding", "%.2f / %.2f MiB" % (med("anon_idle") / 1024,
                                                                  med("anon_full") / 1024)),
                ("peak RSS (VmHWM)", "%.2f MiB" % (med("hwm") / 1024)),
                ("exit codes", " ".join(str(x["exit"]) for x in runs)),
            ]
            w = max(len(k) for k, _ in rows)
            print("\n%s (%s), APF headers %s, median of %d run(s):" % (
                config, "--kube-api-qps 0" if config == "qps0" else "default flags", apf,
                len(runs)))
            for k, v in rows:
                print("  %-*s  %s" % (w, k, v))
            failed += sum(1 for x in runs if x["exit"] != 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
