#!/usr/bin/env python3
"""Real pods on a real node (node.py): the provisioner runs from our image as the manifests'
Deployment and DaemonSet, in cluster, with the service account token the kubelet projected;
busybox pods running as uid 1000 write into the volumes it makes and read them back.

- Deployment (manifests/install.yaml, Immediate): a claim, a pod writes, is deleted, another
  pod reads the data back; deleting the claim removes the directory and the PV.
- DaemonSet (WaitForFirstConsumer): the scheduler picks the node, the node's instance
  provisions there, pods write and read.
- README's permission story: the 0777 default is writable by any non-root pod; a uid/gid
  class (0770, 1000:1000) by that user or group only; fsGroup changes nothing on a hostPath
  volume.
- `kubectl rollout restart` of the provisioner while claims are being created: every claim
  gets exactly one volume.
- Retain and archive: what a pod wrote is still on the node after the claim is gone.
"""

import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodeharness import (HOST_PV_DIR, NS, PROV, PV_PATH, PVC_PATH,  # noqa: E402
                         NodeTestCase, require_node_cluster, wait_until)
from realharness import SELECTED  # noqa: E402
from harness import volume_dirs  # noqa: E402

WRITE = "id -u > /data/uid && echo hello-from-$(id -u) > /data/data && sync && cat /data/data"
READ = "cat /data/data && ls -ln /data"


def setUpModule():
    require_node_cluster()


def stat_owner(path):
    st = os.stat(path)
    return st.st_uid, st.st_gid, st.st_mode & 0o7777


class PodsTest(NodeTestCase):
    def provisioner_log(self, pod):
        return self.pod_log(pod["metadata"]["name"], NS)

    def check_in_cluster(self, pod):
        """The provisioner pod runs our image with the token the kubelet projected."""
        c = pod["spec"]["containers"][0]
        self.assertEqual(c["image"], "localhost/hostpath-provisioner:0.1.0")
        self.assertTrue(any(v.get("projected") for v in pod["spec"]["volumes"]),
                        "no projected service account token volume")
        log = self.provisioner_log(pod)
        self.assertRegex(log, r"credentials=\S*in-cluster|credentials=\S*serviceaccount",
                         "not in-cluster credentials:\n" + log[-2000:])
        self.assertNotRegex(log, r"status=40[13]", log[-3000:])
        # The kubelet projected the token: the API server's audience and the pod's binding.
        sa_dir = [m for m in c["volumeMounts"]
                  if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"]
        self.assertTrue(sa_dir, c["volumeMounts"])

    def write_read_delete(self, cls, claim_name, node=None):
        """A pod writes as uid 1000, is deleted; a second pod reads the data back; the claim is
        deleted and its directory and PV go. Returns the host directory it had."""
        c = self.make_claim(claim_name, cls)
        log = self.run_pod("writer", [claim_name], WRITE, node=node)
        self.assertIn("hello-from-1000", log)
        c = self.wait_bound(claim_name)
        pv = c["spec"]["volumeName"]
        self.assertEqual(pv, "pvc-" + c["metadata"]["uid"])
        path = self.host_path(claim_name)
        self.assertTrue(path.startswith(HOST_PV_DIR + "/"), path)
        with open(os.path.join(path, "data")) as f:
            self.assertEqual(f.read(), "hello-from-1000\n")
        self.assertEqual(os.stat(os.path.join(path, "data")).st_uid, 1000)
        self.delete_pod_wait("writer")
        log = self.run_pod("reader", [claim_name], READ, node=node)
        self.assertIn("hello-from-1000", log)
        self.delete_pod_wait("reader")
        self.api.delete(PVC_PATH % (self.ns, claim_name))
        self.wait_gone(PV_PATH % pv, 60)
        wait_until(lambda: not os.path.exists(path), 30, "%s removed" % path)
        return path

    def test_deployment_install_yaml(self):
        pod = self.install("deployment")
        self.assertEqual(pod["spec"]["nodeName"], self.cluster.node["name"])
        self.check_in_cluster(pod)
        path = self.write_read_delete("hostpath", "c1")
        # The shipped class's pathPattern.
        self.assertRegex(os.path.basename(path), r"^%s-c1-pvc-[0-9a-f-]{36}$" % self.ns)

    def test_daemonset_wait_for_first_consumer(self):
        pod = self.install("daemonset")
        self.check_in_cluster(pod)
        node = self.cluster.node["name"]
        self.make_claim("w1", "hostpath-local")
        # Pending until a pod uses it: WaitForFirstConsumer.
        time.sleep(2)
        self.assertEqual(self.phase("w1"), "Pending")
        self.assertNotIn(SELECTED, self.claim_of("w1")["metadata"].get("annotations") or {})
        log = self.run_pod("writer", ["w1"], WRITE)
        self.assertIn("hello-from-1000", log)
        c = self.wait_bound("w1")
        self.assertEqual(c["metadata"]["annotations"][SELECTED], node)
        pv = self.pv(c["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        self.assertIn(node, str(terms))
        self.assertEqual(pv["metadata"]["annotations"].get("hostPathProvisionerIdentity"), node)
        path = pv["spec"]["hostPath"]["path"]
        self.delete_pod_wait("writer")
        self.assertIn("hello-from-1000", self.run_pod("reader", ["w1"], READ))
        self.delete_pod_wait("reader")
        self.api.delete(PVC_PATH % (self.ns, "w1"))
        self.wait_gone(PV_PATH % pv["metadata"]["name"])
        wait_until(lambda: not os.path.exists(path), 30, "%s removed" % path)

    def test_permissions(self):
        self.install("deployment")
        uidcls = "%s-uid1000" % self.id_
        # manifests/storageclass.yaml's commented hostpath-uid1000 class.
        self.make_class(uidcls, parameters={"mode": "0770", "uid": "1000", "gid": "1000"})
        self.make_claim("open", "hostpath")
        self.make_claim("mine", uidcls)
        self.wait_bound("open")
        self.wait_bound("mine")
        open_dir, mine_dir = self.host_path("open"), self.host_path("mine")
        self.assertEqual(stat_owner(open_dir), (0, 0, 0o777))
        self.assertEqual(stat_owner(mine_dir), (1000, 1000, 0o770))
        touch = "touch /data/f-$(id -u) && echo wrote"
        # 0777: any non-root user writes.
        for uid in (1000, 2000):
            self.assertIn("wrote", self.run_pod("open-%d" % uid, ["open"], touch, uid=uid,
                                                gid=uid))
        # 1000:1000 0770: user 1000 writes; user 2000 is refused; group 1000 through
        # runAsGroup, fsGroup or supplementalGroups writes.
        self.assertIn("wrote", self.run_pod("mine-1000", ["mine"], touch, uid=1000, gid=1000))
        log = self.run_pod("mine-2000", ["mine"], touch, uid=2000, gid=2000, expect="Failed")
        self.assertIn("Permission denied", log)
        self.assertIn("wrote", self.run_pod("mine-rg", ["mine"], touch, uid=2001, gid=1000))
        self.assertIn("wrote", self.run_pod("mine-fsg", ["mine"], touch, uid=2002, gid=2002,
                                            fs_group=1000))
        self.assertIn("wrote", self.run_pod("mine-sg", ["mine"], touch, uid=2003, gid=2003,
                                            groups=[1000]))
        # fsGroup does not apply to hostPath: a pod with fsGroup 3000 gets no group ownership
        # of the volume (kubelet changes nothing), so on the 1000:1000 0770 class it is refused,
        # and the 0777 directory stays root:root without setgid.
        log = self.run_pod("fsg-3000", ["mine"], touch, uid=3000, gid=3000, fs_group=3000,
                           expect="Failed")
        self.assertIn("Permission denied", log)
        self.run_pod("fsg-open", ["open"], touch, uid=3000, gid=3000, fs_group=3000)
        self.assertEqual(stat_owner(open_dir), (0, 0, 0o777))
        self.assertEqual(stat_owner(mine_dir), (1000, 1000, 0o770))
        self.assertEqual(os.stat(os.path.join(open_dir, "f-3000")).st_gid, 3000)
        self.assertFalse(os.path.exists(os.path.join(mine_dir, "f-3000")))
        self.assertEqual(sorted(os.listdir(mine_dir)),
                         ["f-1000", "f-2001", "f-2002", "f-2003"])

    def test_rollout_restart_while_claiming(self):
        old = self.install("deployment")
        # Claims are made every 0.25 s from before the rollout until 5 more after the new pod
        # is Ready (a Recreate rollout and a 5 s readiness period take a varying time), at
        # most 160.
        cap, after, made, errors = 160, 5, [], []
        stop, ready = threading.Event(), threading.Event()

        def create():
            left = after
            for i in range(cap):
                if stop.is_set() or left == 0:
                    return
                try:
                    c = self.make_claim("r%03d" % i, "hostpath")
                    made.append(c["metadata"]["uid"])
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)
                    return
                if ready.is_set():
                    left -= 1
                time.sleep(0.25)
        t = threading.Thread(target=create)
        t.start()
        self.addCleanup(stop.set)
        wait_until(lambda: len(made) >= 5, 30, "5 claims created")
        self.kubectl("rollout", "restart", "deployment/hostpath-provisioner", "-n", NS)
        new = self.wait_provisioner_ready("deployment", exclude=(old["metadata"]["name"],))
        restarted_at = len(made)
        ready.set()
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertEqual(errors, [])
        n = len(made)
        self.assertLess(restarted_at, n, "the rollout ended after every claim was created")
        self.assertNotEqual(new["metadata"]["name"], old["metadata"]["name"])
        for i in range(n):
            self.wait_bound("r%03d" % i, timeout=120)
        # Exactly one PV per claim, each the claim's own, and one directory each.
        pvs = [pv for pv in self.api.list("/api/v1/persistentvolumes")["items"]
               if (pv["spec"].get("claimRef") or {}).get("namespace") == self.ns]
        self.assertEqual(sorted(pv["metadata"]["name"] for pv in pvs),
                         sorted("pvc-" + u for u in made))
        for pv in pvs:
            self.assertEqual(pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
                             PROV)
        dirs = [d for d in volume_dirs(HOST_PV_DIR) if d.startswith(self.ns + "-")]
        self.assertEqual(len(dirs), n, dirs)
        self.assertEqual(sorted(dirs), sorted(os.path.basename(pv["spec"]["hostPath"]["path"])
                                              for pv in pvs))
        # The old pod stopped gracefully (it releases its Lease on SIGTERM).
        for i in range(n):
            self.api.delete(PVC_PATH % (self.ns, "r%03d" % i))
        wait_until(lambda: not [d for d in volume_dirs(HOST_PV_DIR)
                                if d.startswith(self.ns + "-")], 120, "directories removed")

    def test_retain_and_archive(self):
        self.install("deployment")
        keep, arch = "%s-retain" % self.id_, "%s-archive" % self.id_
        self.make_class(keep, reclaim="Retain")
        self.make_class(arch, parameters={"onDelete": "archive"})
        self.make_claim("kept", keep)
        self.make_claim("archived", arch)
        for name in ("kept", "archived"):
            self.assertIn("hello-from-1000", self.run_pod("w-" + name, [name], WRITE))
            self.delete_pod_wait("w-" + name)
        kept_pv = self.claim_of("kept")["spec"]["volumeName"]
        kept_dir, arch_dir = self.host_path("kept"), self.host_path("archived")
        arch_pv = self.claim_of("archived")["spec"]["volumeName"]
        self.api.delete(PVC_PATH % (self.ns, "kept"))
        self.api.delete(PVC_PATH % (self.ns, "archived"))
        # Retain: the PV is Released and stays, the data with it.
        wait_until(lambda: self.pv(kept_pv)["status"]["phase"] == "Released", 60,
                   "retained PV Released")
        # Archive: the PV goes, the directory is renamed archived-<name>, data inside.
        self.wait_gone(PV_PATH % arch_pv)
        archived = os.path.join(os.path.dirname(arch_dir), "archived-" +
                                os.path.basename(arch_dir))
        wait_until(lambda: os.path.isdir(archived), 30, archived)
        self.assertFalse(os.path.exists(arch_dir))
        for d in (kept_dir, archived):
            with open(os.path.join(d, "data")) as f:
                self.assertEqual(f.read(), "hello-from-1000\n")
        time.sleep(2)
        self.assertTrue(os.path.exists(os.path.join(kept_dir, "data")))
        # Deleting the retained PV by hand is not a release: the data stays.
        self.api.delete(PV_PATH % kept_pv)
        self.wait_gone(PV_PATH % kept_pv)
        time.sleep(2)
        with open(os.path.join(kept_dir, "data")) as f:
            self.assertEqual(f.read(), "hello-from-1000\n")
        self.assertTrue(re.match(r"^archived-", os.path.basename(archived)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
