#!/usr/bin/env python3
"""End-to-end provisioning benchmark (not a test): the local API server from
tests/integration, the real provisioner binary, N claims created at once.

Measures, for the provisioner process:
  - idle RSS (caches synced, no claims), RSS holding N volumes, peak RSS (VmHWM);
  - CPU seconds (utime+stime from /proc/PID/stat) spent provisioning and deleting;
  - time from the first claim created to the last PV created (the provisioner's own
    counter) and to the last claim Bound (seen on a watch), and the same for deletion.

    bench/bench_provision.py [--claims 1000] [--binary build/hostpath-provisioner]
                             [--configs default,qps0] [--apf both] [--threads 8] [--workers 4]

Each configuration runs against a fresh server: `default` runs the provisioner with its default
flags, `qps0` with --kube-api-qps 0, `qps=N` with --kube-api-qps N; --apf on|off|both says whether
the server sends the API Priority and Fairness headers (a real server with APF does). The last
table compares them side by side, with the API requests per volume by verb and resource (the
server's request log, the provisioner's requests only).

The API server is a Python stand-in: with thousands of claims it, not the provisioner, is
usually what paces the run (compare "claims created" with "all bound"). CPU per volume is the
provisioner's CPU only, so it is not skewed by the server.

--syscalls attaches `strace -f -c` to every thread of the provisioner for the provisioning and
the deletion phase and reports system calls per volume (fsync and fdatasync first); strace
slows the process down, so CPU and times of such a run are not comparable: measure CPU without
it. bench/bench_disk.sh runs both on loop-mounted ext4 and XFS.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from harness import (PVC_PATH, PVCS_PATH, PVS_PATH, SCS_PATH, ApiServer, Provisioner,  # noqa
                     claim, storage_class, volume_dirs, wait_for)

PROV = "hostpath-provisioner.io"
CLK = os.sysconf("SC_CLK_TCK")


def proc_status(pid, key):
    """A /proc/PID/status field in KiB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """utime + stime of the process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # fields 14 and 15 of stat(5)


def sockets(pid):
    """Open sockets of the process (API connections, watches, the metrics listener)."""
    n = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def metric(url, family):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == family:
            total += float(m.group(3))
    return total


class Strace:
    """strace -f -c attached to every thread of pid, counting system calls until stop()."""

    def __init__(self, pid, out):
        self.out = out
        tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
        args = ["strace", "-f", "-c", "-o", out]
        for t in tids:
            args += ["-p", t]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # strace says "Process N attached" once per thread on stderr; give it a moment.
        time.sleep(1.0)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        counts = {}
        with open(self.out) as f:
            for line in f:
                m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$", line)
                if m and m.group(3) != "total":
                    counts[m.group(3)] = int(m.group(1))
        return counts


def fmt_syscalls(counts, n):
    first = ["fsync", "fdatasync"]
    rest = sorted((k for k in counts if k not in first), key=lambda k: -counts[k])
    total = sum(counts.values())
    return "total %.1f: " % (total / n) + ", ".join(
        "%s %.2f" % (k, counts.get(k, 0) / n) for k in first + rest[:14])


def run_threads(fn, items, threads):
    errors = []

    def worker(k):
        try:
            for i in range(k, len(items), threads):
                fn(items[i])
        except Exception as e:
            errors.append(e)
    ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


class PhaseWatch:
    """Follows claims on a watch and records when each became Bound or was deleted."""

    def __init__(self, api, rv):
        self.stream = api.watch(PVCS_PATH % "default", timeout=3600, resourceVersion=rv,
                                allowWatchBookmarks="false")
        self.bound, self.deleted = {}, {}
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            ev = self.stream.next(0.5)
            if ev is None:
                if self.stream.eof:
                    return
                continue
            obj = ev.get("object") or {}
            name = (obj.get("metadata") or {}).get("name")
            now = time.monotonic()
            with self.lock:
                if ev.get("type") == "DELETED":
                    self.deleted.setdefault(name, now)
                elif (obj.get("status") or {}).get("phase") == "Bound":
                    self.bound.setdefault(name, now)

    def counts(self):
        with self.lock:
            return len(self.bound), len(self.deleted)

    def last(self, which):
        with self.lock:
            d = self.bound if which == "bound" else self.deleted
            return max(d.values()) if d else None

    def close(self):
        self.stop = True
        self.stream.close()


REQ_RESOURCES = ("persistentvolumeclaims", "persistentvolumes", "events", "storageclasses",
                 "leases")


def requests_by_verb(api, since):
    """{"POST events": n, ...} for the provisioner's requests after log sequence `since`
    (watches and lists left out), and the last sequence number seen."""
    out, last = {}, since
    for r in api.requests(since=since):
        last = max(last, r["seq"])
        if not r["user_agent"].startswith("hostpath-provisioner") or r["watch"]:
            continue
        parts = [x for x in r["path"].split("/") if x]
        res = next((x for x in parts if x in REQ_RESOURCES), "other")
        named = parts and parts[-1] != res
        verb = r["method"] if r["method"] != "GET" or named else "LIST"
        out["%s %s" % (verb, res)] = out.get("%s %s" % (verb, res), 0) + 1
    return out, last


def flags_of(config):
    if config == "default":
        return []
    if config == "qps0":
        return ["--kube-api-qps", "0"]
    if config.startswith("qps="):
        return ["--kube-api-qps", config[4:]]
    raise SystemExit("unknown configuration %r (default, qps0, qps=N)" % config)


def run_one(a, config, apf):
    """One server and one provisioner; returns (rows, summary) or raises SystemExit."""
    n = a.claims
    tmp = tempfile.mkdtemp(prefix="hp-bench-", dir=a.tmpdir)
    api = ApiServer(tmp, bookmark_interval=3600, apf=apf == "on")
    prov = None
    try:
        api.start()
        api.create(SCS_PATH, storage_class("hostpath", PROV))
        pv_dir = os.path.join(tmp, "volumes")
        prov = Provisioner(api, pv_dir, *(flags_of(config) + [
                           "--resync-period", "0", "--workers", a.workers]), binary=a.binary)
        prov.start()
        pid = prov.pid
        wait_for(lambda: "caches synced" in prov.log, 60, what="caches synced")
        murl = prov.metrics_url()
        time.sleep(1.0)
        rss_idle = proc_status(pid, "VmRSS")
        anon_idle = proc_status(pid, "RssAnon")
        tracer = Strace(pid, os.path.join(tmp, "strace-provision.txt")) if a.syscalls else None
        cpu0 = cpu_seconds(pid)
        _, seq0 = requests_by_verb(api, 0)

        rv = api.list(PVCS_PATH % "default")["metadata"]["resourceVersion"]
        watch = PhaseWatch(api, rv)
        names = ["b%05d" % i for i in range(n)]
        t0 = time.monotonic()
        peak_socks = idle_socks = sockets(pid)
        creator = threading.Thread(target=run_threads, daemon=True, args=(
            # 1Mi: each request is reserved on the disk, a thousand 1Gi claims would not fit.
            lambda nm: api.create(PVCS_PATH % "default",
                                  claim("default", nm, "hostpath", size="1Mi")),
            names, a.threads))
        creator.start()
        while creator.is_alive():
            peak_socks = max(peak_socks, sockets(pid))
            creator.join(0.02)
        t_created = time.monotonic() - t0
        t_pvs = None
        deadline = t0 + a.timeout
        while time.monotonic() < deadline:
            peak_socks = max(peak_socks, sockets(pid))
            if t_pvs is None and metric(murl, "controller_persistentvolumeclaim_provision_total") >= n:
                t_pvs = time.monotonic() - t0
            if watch.counts()[0] >= n and t_pvs is not None:
                break
            time.sleep(0.02)
        else:
            sys.exit("timed out: %d of %d bound" % (watch.counts()[0], n))
        t_bound = watch.last("bound") - t0
        cpu1 = cpu_seconds(pid)
        sys_prov = tracer.stop() if tracer else None
        req_prov, seq1 = requests_by_verb(api, seq0)
        time.sleep(a.settle)
        rss_full = proc_status(pid, "VmRSS")
        anon_full = proc_status(pid, "RssAnon")
        full_socks = sockets(pid)
        if len(volume_dirs(pv_dir)) != n:  # the ownership journal's directory is not counted
            sys.exit("expected %d directories, found %d" % (n, len(volume_dirs(pv_dir))))

        tracer = Strace(pid, os.path.join(tmp, "strace-delete.txt")) if a.syscalls else None
        t1 = time.monotonic()
        run_threads(lambda nm: api.delete(PVC_PATH % ("default", nm)), names, a.threads)
        t_delreq = time.monotonic() - t1
        deadline = t1 + a.timeout
        while time.monotonic() < deadline:
            if not volume_dirs(pv_dir) and \
                    metric(murl, "controller_persistentvolume_delete_total") >= n:
                break
            time.sleep(0.02)
        else:
            sys.exit("timed out deleting: %d directories left" % len(volume_dirs(pv_dir)))
        cpu2 = cpu_seconds(pid)
        # The deletion's last step (the record forgotten once the PV object is gone) comes
        # after the directories: wait for the PVs, then stop counting.
        while time.monotonic() < deadline and api.list(PVS_PATH)["items"]:
            time.sleep(0.1)
        time.sleep(0.5)
        sys_del = tracer.stop() if tracer else None
        # The PV objects go once the server's pv-protection controller lets them.
        while time.monotonic() < deadline and api.list(PVS_PATH)["items"]:
            time.sleep(0.1)
        t_deleted = time.monotonic() - t1
        req_del, _ = requests_by_verb(api, seq1)
        time.sleep(a.settle)
        rss_after = proc_status(pid, "VmRSS")
        peak = proc_status(pid, "VmHWM")
        watch.close()
        left = len(api.list(PVS_PATH)["items"])
        code = prov.stop(signal.SIGTERM, timeout=30)

        rows = [
            ("claims", "%d" % n),
            ("claims created by the client", "%.2f s" % t_created),
            ("first create -> last PV created", "%.2f s" % t_pvs),
            ("first create -> all claims Bound", "%.2f s" % t_bound),
            ("first delete -> all directories and PVs gone", "%.2f s (delete requests %.2f s)"
             % (t_deleted, t_delreq)),
            ("provisioner CPU, provisioning", "%.3f s (%.3f ms/volume)"
             % (cpu1 - cpu0, (cpu1 - cpu0) * 1000 / n)),
            ("provisioner CPU, deleting", "%.3f s (%.3f ms/volume)"
             % (cpu2 - cpu1, (cpu2 - cpu1) * 1000 / n)),
            ("RSS idle (caches synced)", "%.2f MiB (anonymous %.2f MiB)"
             % (rss_idle / 1024, anon_idle / 1024)),
            ("RSS holding %d volumes" % n, "%.2f MiB (anonymous %.2f MiB)"
             % (rss_full / 1024, anon_full / 1024)),
            ("RSS after deleting them", "%.2f MiB" % (rss_after / 1024)),
            ("peak RSS (VmHWM)", "%.2f MiB" % (peak / 1024)),
            ("sockets idle / peak while provisioning / holding", "%d / %d / %d"
             % (idle_socks, peak_socks, full_socks)),
            ("PVs left / exit code", "%d / %s" % (left, code)),
        ]
        if a.syscalls:
            rows[5:7] = [(k + " (under strace)", v) for k, v in rows[5:7]]
            rows += [("system calls per volume, provisioning", fmt_syscalls(sys_prov, n)),
                     ("system calls per volume, deleting", fmt_syscalls(sys_del, n))]
        rows += [
            ("requests per volume, provisioning", fmt_reqs(req_prov, n)),
            ("requests per volume, deleting", fmt_reqs(req_del, n)),
        ]
        summary = {"config": config, "apf": apf, "t_bound": t_bound,
                   "cpu_prov": (cpu1 - cpu0) * 1000 / n, "cpu_del": (cpu2 - cpu1) * 1000 / n,
                   "rss_idle": rss_idle, "rss_full": rss_full, "anon_idle": anon_idle,
                   "anon_full": anon_full, "writes": sum(v for k, v in req_prov.items()
                                                        if not k.startswith(("GET", "LIST"))) / n,
                   "code": code}
        w = max(len(k) for k, _ in rows)
        print("\n%s, APF headers %s (%s, --workers %s, --pv-dir %s)" % (
            " ".join(flags_of(config)) or "default flags", apf, a.binary, a.workers, pv_dir))
        for k, v in rows:
            print("  %-*s  %s" % (w, k, v))
        if code != 0:
            print("provisioner exit code %s; log tail:\n%s" % (code, prov.log[-2000:]))
        return summary
    finally:
        if prov is not None and prov.alive():
            prov.kill9()
        api.stop()
        if a.keep:
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def fmt_reqs(reqs, n):
    return ", ".join("%s %.2f" % (k, v / n) for k, v in sorted(reqs.items())) or "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=1000)
    ap.add_argument("--binary", default=os.environ.get("HP_BINARY") or
                    os.path.join(ROOT, "build", "hostpath-provisioner"))
    ap.add_argument("--configs", default="default,qps0",
                    help="comma-separated: default (no rate flags), qps0 (--kube-api-qps 0), "
                    "qps=N")
    ap.add_argument("--qps", default=None, help="shorthand for --configs qps=N")
    ap.add_argument("--apf", choices=("on", "off", "both"), default="both",
                    help="API Priority and Fairness headers from the server")
    ap.add_argument("--threads", type=int, default=8, help="client threads creating claims")
    ap.add_argument("--workers", default="4", help="--workers of the provisioner")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between the end of a burst and reading RSS")
    ap.add_argument("--tmpdir", default=None,
                    help="parent of the temporary directory holding --pv-dir (e.g. /dev/shm "
                         "to leave the disk's mkdir/rmdir cost out)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--syscalls", action="store_true",
                    help="count system calls per volume with strace (slows the run: CPU and "
                         "times are then not comparable)")
    a = ap.parse_args()
    if not os.access(a.binary, os.X_OK):
        sys.exit("no provisioner binary at %s (build it, or pass --binary)" % a.binary)
    configs = ["qps=" + a.qps] if a.qps is not None else [c for c in a.configs.split(",") if c]
    apfs = ["on", "off"] if a.apf == "both" else [a.apf]
    out = [run_one(a, c, f) for c in configs for f in apfs]
    print("\nside by side (%d claims):" % a.claims)
    print("  %-26s %-4s %9s %9s %9s %11s %13s %13s" % (
        "flags", "APF", "all Bound", "CPU/vol", "CPU/del", "writes/vol", "RSS idle", "RSS holding"))
    for r in out:
        print("  %-26s %-4s %8.2fs %7.2fms %7.2fms %11.2f %8.2f MiB %8.2f MiB" % (
            " ".join(flags_of(r["config"])) or "default", r["apf"], r["t_bound"], r["cpu_prov"],
            r["cpu_del"], r["writes"], r["rss_idle"] / 1024, r["rss_full"] / 1024))
    return 1 if any(r["code"] != 0 for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())
