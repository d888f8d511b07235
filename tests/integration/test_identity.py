"""Data safety by identity: a directory is known by what it is on disk, not by how a path spells
it (README "Data safety", the identity rule).

Each test is one of the reproductions of an adversarial review, which lost, exposed or
stranded data before (the checks compared path text):
1. a hand-made PV reaching a volume's directory through a symlink (and through a bind mount):
   deleting the volume's claim removed the directory under the live PV;
2. --pv-dir given as a symlink, a hand-made PV naming the real path: the same;
3. reuseRetained handed a retained directory that an administrator had re-bound (through an
   aliased path) to another namespace's claim to the re-created claim: two tenants, one
   directory;
4. a pathPattern rendered a new volume inside an administrator's PV reached through an alias;
5. --config changed from [R] to [R/inner] was accepted: volumes under R/inner then could never
   be released;
6. a path taken out of --config lost its volumes' policy after a restart (PVs Released for
   ever, onDelete never carried out);
7. a pod's 300 nested directories made its volume undeletable (a depth limit of 256).
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (NSS_PATH, PV_PATH, PVC_PATH, PVCS_PATH, PVS_PATH,  # noqa: E402
                     Provisioner, journal_records, namespace, volume)
from harness import claim as claim_obj  # noqa: E402
from test_ownership import Base, read, write  # noqa: E402


class IdentityBase(Base):
    tmp_prefix = "hp-identity-"

    def admin_pv(self, name, ns, claim, path):
        """An administrator's PV of their own at path, bound to a new claim ns/claim."""
        if ns != "default":
            self.api.create(NSS_PATH, namespace(ns))
        c = self.api.create(PVCS_PATH % ns, claim_obj(ns, claim, "", volume_name=name))
        self.api.create(PVS_PATH, volume(name, path=path, reclaim="Retain", claim_ref=c))
        self.wait_bound(claim, ns=ns)
        return c

    def bind_mount(self, src, dst):
        if os.geteuid() != 0:
            self.skipTest("bind mounts need root")
        os.makedirs(dst, exist_ok=True)
        r = subprocess.run(["mount", "--bind", src, dst], capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            self.skipTest("mount --bind not permitted here: %s" % r.stderr.strip())
        self.mounts.append(dst)

    def assert_release_waits_for(self, c, path, other, p):
        name = self.pv_of(c)
        p.wait_log(r"not removing %s: it is the directory of PersistentVolume %s"
                   % (re.escape(path), other), 20)
        ev = self.wait_event(name, "VolumeFailedDelete", kind="PersistentVolume")
        self.assertIn("PersistentVolume %s" % other, ev["message"])
        time.sleep(1.0)  # retried meanwhile, never removed
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(self.pv(name)["status"]["phase"], "Released")

    def release_after_other_goes(self, c, path, other, other_ns, other_claim):
        self.api.delete(PVC_PATH % (other_ns, other_claim))
        self.api.delete(PV_PATH % other)
        self.wait_gone(c, path, timeout=40)


class AliasTest(IdentityBase):
    def test_1_symlinked_alias_of_a_live_volume_blocks_its_deletion(self):
        self.add_class()
        p = self.provisioner()
        self.api.create(NSS_PATH, namespace("ns3"))
        c, path = self.bound_with_data("x3", ns="ns3")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.admin_pv("second", "ns4", "y3", os.path.join(alias, os.path.basename(path)))
        self.api.delete(PVC_PATH % ("ns3", "x3"))
        self.assert_release_waits_for(c, path, "second", p)
        self.release_after_other_goes(c, path, "second", "ns4", "y3")

    def test_1_bind_mounted_alias_blocks_deletion(self):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        alias = os.path.join(self.tmp, "bind")
        self.bind_mount(self.pv_dir, alias)
        self.admin_pv("second", "ns4", "y3", os.path.join(alias, os.path.basename(path)))
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.assert_release_waits_for(c, path, "second", p)
        # A PV of a directory inside the volume, through a bind mount of that directory.
        self.api.delete(PVC_PATH % ("ns4", "y3"))
        self.api.delete(PV_PATH % "second")
        os.mkdir(os.path.join(path, "sub"))
        inner = os.path.join(self.tmp, "inner-bind")
        self.bind_mount(os.path.join(path, "sub"), inner)
        self.admin_pv("third", "ns5", "z", inner)
        p.wait_log(r"not removing %s: it contains the directory of PersistentVolume third"
                   % re.escape(path), 30)
        self.assertTrue(os.path.isfile(os.path.join(path, "data")))

    def test_2_pv_dir_is_a_symlink_and_the_pv_names_the_real_path(self):
        real = os.path.join(self.tmp, "real-volumes")
        os.rename(self.pv_dir, real)
        os.symlink(real, self.pv_dir)
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        self.assertTrue(path.startswith(self.pv_dir + "/"))  # the PV says --pv-dir's spelling
        self.admin_pv("second", "ns4", "y3", os.path.join(real, os.path.basename(path)))
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.assert_release_waits_for(c, path, "second", p)
        self.release_after_other_goes(c, path, "second", "ns4", "y3")

    def test_3_reuse_retained_refuses_a_directory_rebound_through_an_alias(self):
        self.add_class(parameters={"onDelete": "retain", "reuseRetained": "true"})
        p = self.provisioner()
        self.api.create(NSS_PATH, namespace("ns1"))
        c, path = self.bound_with_data("data", ns="ns1")
        name = self.pv_of(c)
        self.api.delete(PVC_PATH % ("ns1", "data"))
        self.wait(lambda: journal_records(self.pv_dir).get(name, {}).get("state")
                  == "retained", 20, "retained")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.admin_pv("rebound", "ns2", "other", os.path.join(alias, os.path.basename(path)))
        again = self.add_claim("data", ns="ns1")
        ev = self.wait_event("data", "ProvisioningFailed")
        self.assertIn("PersistentVolume rebound", ev["message"])
        time.sleep(1.0)
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(again)))
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(journal_records(self.pv_dir)[name]["state"], "retained")
        self.assertNotRegex(p.log, r"reused-from=%s" % name)

    def test_4_new_volume_inside_an_aliased_pv_is_refused(self):
        self.add_class(parameters={"pathPattern": "{{.PVC.Annotations.dir}}/{{.PVC.Name}}"})
        shared = os.path.join(self.pv_dir, "shared")
        os.mkdir(shared)
        write(os.path.join(shared, "data"), "admin's data\n")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.provisioner()
        self.admin_pv("admins", "ns4", "y", os.path.join(alias, "shared"))
        c = self.add_claim("mine", annotations={"dir": "shared"})
        ev = self.wait_event("mine", "ProvisioningFailed")
        self.assertIn("lies inside the directory of PersistentVolume admins", ev["message"])
        time.sleep(0.5)
        self.assertFalse(self.api.exists(PV_PATH % self.pv_of(c)))
        self.assertEqual(sorted(os.listdir(shared)), ["data"])


class RootsTest(IdentityBase):
    fast = Base.fast + ("--resync-period", "2s")

    def config(self, paths):
        doc = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": paths}]}
        path = os.path.join(self.tmp, "config.json")
        with open(path + ".new", "w") as f:
            json.dump(doc, f)
        os.replace(path + ".new", path)
        return path

    def test_5_nested_roots_after_a_reload_are_refused(self):
        outer = os.path.join(self.tmp, "disk")
        inner = os.path.join(outer, "inner")
        os.makedirs(inner)
        self.add_class()
        cfg = self.config([outer])
        p = self.provisioner("--config", cfg)
        c, path = self.bound_with_data("first")
        self.assertTrue(path.startswith(outer + "/"))
        self.config([inner])
        p.wait_log(r"volume path %s lies inside %s, a path no longer configured whose "
                   r"ownership journal still holds volumes" % (re.escape(inner),
                                                                re.escape(outer)), 20)
        p.wait_log(r"changed, but a path of this node cannot be used; the previous map stays",
                   5)
        second = self.add_claim("second")
        self.wait_bound("second")
        self.assertTrue(self.path_of(second).startswith(outer + "/"))
        self.assertFalse(self.path_of(second).startswith(inner + "/"))
        # Both release as usual.
        self.api.delete(PVC_PATH % ("default", "first"))
        self.wait_gone(c, path)
        p.stop()
        # At start: the same configuration is refused while the outer path holds a volume.
        r = subprocess.run(Provisioner(self.api, self.pv_dir, "--config", cfg).command(),
                           capture_output=True, text=True, timeout=20,
                           env=Provisioner(self.api, self.pv_dir).environment())
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("lies inside %s, a path no longer configured" % outer, r.stderr)

    def test_6_a_removed_path_keeps_its_policy_after_a_restart(self):
        a = os.path.join(self.tmp, "disk-a")
        b = os.path.join(self.tmp, "disk-b")
        os.makedirs(a)
        os.makedirs(b)
        self.add_class("on-a", parameters={"nodePath": a})
        self.add_class("on-b", parameters={"nodePath": b})
        self.add_class("archive-a", parameters={"nodePath": a, "onDelete": "archive"})
        cfg = self.config([a, b])
        p = self.provisioner("--config", cfg)
        ca, path_a = self.bound_with_data("on-a", cls="on-a")
        cr, path_r = self.bound_with_data("arch", cls="archive-a")
        cb, path_b = self.bound_with_data("on-b", cls="on-b")
        self.config([b])
        p.wait_log(r"volume path %s is no longer configured" % re.escape(a), 15)
        p.stop()
        p2 = self.provisioner("--config", cfg)
        p2.wait_log(r"volume path %s is no longer configured but still holds volumes"
                    % re.escape(a), 15)
        self.api.delete(PVC_PATH % ("default", "on-a"))
        self.api.delete(PVC_PATH % ("default", "arch"))
        self.wait_gone(ca, path_a)
        self.wait_gone(cr, None)
        archived = [n for n in os.listdir(a) if n.startswith("archived-")]
        self.assertEqual(len(archived), 1, os.listdir(a))
        self.assertEqual(read(os.path.join(a, archived[0], "data")), "first tenant's data\n")
        self.assertNotRegex(p2.log, r"is not inside --pv-dir")
        # disk-b's volume is untouched; disk-a stays known while its archive is recorded.
        self.assertEqual(read(os.path.join(path_b, "data")), "first tenant's data\n")
        roots = read(os.path.join(b, ".hostpath-provisioner", "roots"))
        self.assertIn(a + "\n", roots)
        self.assertIn(b + "\n", roots)


class DepthTest(IdentityBase):
    def test_7_deeply_nested_volume_is_removed(self):
        """3,000 levels (a path far longer than PATH_MAX): made relative to directory fds."""
        self.add_class()
        self.provisioner()
        c, path = self.bound_with_data("deep")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(3000):
                os.mkdir("d", dir_fd=fd)
                if i % 500 == 0:
                    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
                nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = nfd
        finally:
            os.close(fd)
        self.api.delete(PVC_PATH % ("default", "deep"))
        self.wait_gone(c, path, timeout=60)


if __name__ == "__main__":
    unittest.main()
