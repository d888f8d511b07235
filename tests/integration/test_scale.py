"""Scale: 1,000 claims created at once -> 1,000 Bound claims, 1,000 PVs, 1,000 directories;
then all deleted at once -> no PV and no directory left. Each phase has a generous bound (the
local API server is Python, and the suite also runs under AddressSanitizer). Elapsed times are
printed, never asserted: bench/ measures speed.

HP_SCALE_CLAIMS overrides the count (e.g. for a quick local run).
"""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PVC_PATH, PVS_PATH, ProvisionerTestCase, volume_dirs, wait_for  # noqa: E402

N = int(os.environ.get("HP_SCALE_CLAIMS", "1000"))
BOUND = 240.0
THREADS = 8


def run_threads(fn, names):
    """fn(name) for every name from THREADS threads (one keep-alive connection each). Returns
    the results in order; raises the first error."""
    out = [None] * len(names)
    errors = []

    def worker(k):
        try:
            for i in range(k, len(names), THREADS):
                out[i] = fn(names[i])
        except Exception as e:  # reported by the caller
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError("requests did not finish in %.0fs" % BOUND)
    return out


class ScaleTest(ProvisionerTestCase):
    tmp_prefix = "hp-scale-"
    fast = ("--kube-api-qps", "0", "--resync-period", "0", "--retry-base-delay", "50ms",
            "--retry-max-delay", "2s")

    def test_thousand_claims_at_once(self):
        self.add_class()
        prov = self.provisioner()
        prov.wait_log(r"caches synced", 30)

        names = ["s%04d" % i for i in range(N)]
        t0 = time.monotonic()
        # 1Mi each: every request is reserved on the volume directory's disk, and a thousand
        # 1Gi claims would not fit on the machine's free space.
        claims = run_threads(lambda n: self.add_claim(n, size="1Mi"), names)
        t_created = time.monotonic() - t0
        last = [0]

        def all_bound():
            last[0] = len(self.bound_names())
            return last[0] == N
        try:
            wait_for(all_bound, BOUND - (time.monotonic() - t0), interval=0.5,
                     what="%d claims bound" % N)
        except TimeoutError as e:
            self.fail("%s: %d of %d bound\n%s" % (e, last[0], N, prov.log[-3000:]))
        t_bound = time.monotonic() - t0

        pvs = self.api.list(PVS_PATH)["items"]
        self.assertEqual(len(pvs), N)
        uids = {c["metadata"]["uid"] for c in claims}
        self.assertEqual({p["spec"]["claimRef"]["uid"] for p in pvs}, uids)
        self.assertEqual({p["metadata"]["name"] for p in pvs}, {"pvc-" + u for u in uids})
        dirs = volume_dirs(self.pv_dir)
        self.assertEqual(len(dirs), N)
        self.assertEqual(set(dirs), {os.path.basename(p["spec"]["hostPath"]["path"])
                                     for p in pvs})
        self.assertTrue(prov.alive())

        # And all of them deleted at once: every PV and directory goes.
        t1 = time.monotonic()
        run_threads(lambda n: self.api.delete(PVC_PATH % ("default", n)), names)
        try:
            wait_for(lambda: not volume_dirs(self.pv_dir) and
                     not self.api.list(PVS_PATH)["items"], BOUND, interval=0.5,
                     what="all volumes deleted")
        except TimeoutError as e:
            self.fail("%s: %d directories, %d PVs left\n%s"
                      % (e, len(volume_dirs(self.pv_dir)), len(self.api.list(PVS_PATH)["items"]),
                         prov.log[-3000:]))
        t_deleted = time.monotonic() - t1
        code = prov.stop(timeout=30)
        self.assertEqual(code, 0, prov.log[-3000:])
        print("\n%d claims: created in %.1fs, all bound %.1fs after the first create, "
              "all deleted %.1fs after the first delete" % (N, t_created, t_bound, t_deleted))


if __name__ == "__main__":
    unittest.main(verbosity=2)
