"""An adversarial review of data safety by identity (issue 24) and of the drop-in for
local-path-provisioner (issue 20), through the real binary against the local API server.

Each test is an attack a user or administrator could make; each failed before its fix.
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
                     PROVISIONER, Provisioner, journal_records, namespace, volume)
from harness import claim as claim_obj  # noqa: E402
from test_identity import IdentityBase  # noqa: E402
from test_ownership import ANN_BY, ANN_ID, ANN_ON_DELETE, IDENTITY, read  # noqa: E402


class AdvBase(IdentityBase):
    tmp_prefix = "hp-adversarial-"

    def tearDown(self):
        super().tearDown()
        if self.prov is not None:  # printed when the test failed
            self._logs += "\n--- %s ---\n%s" % (self.prov.name, self.prov.log[-8000:])
            keep = os.environ.get("HP_KEEP_LOGS")
            if keep:
                with open(os.path.join(keep, self.id() + ".log"), "w") as f:
                    f.write(self.prov.log)


class AffinityTest(AdvBase):
    """A hand-made PV whose node affinity names this node among others is on this node's disk."""

    def admin_pv_affinity(self, name, ns, claim, path, terms, local=False, annotations=None):
        if ns != "default":
            self.api.create(NSS_PATH, namespace(ns))
        c = self.api.create(PVCS_PATH % ns, claim_obj(ns, claim, "", volume_name=name))
        pv = volume(name, path=path, reclaim="Retain", claim_ref=c, annotations=annotations)
        if local:
            pv["spec"]["local"] = pv["spec"].pop("hostPath")
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
        self.api.create(PVS_PATH, pv)
        self.wait_bound(claim, ns=ns)
        return c

    def test_pv_affinity_listing_several_nodes_blocks_deletion(self):
        self.add_class()
        p = self.provisioner("--node-name", "node-a")
        c, path = self.bound_with_data("x3")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        terms = [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                        "values": ["node-b", "node-a"]}]}]
        self.admin_pv_affinity("second", "ns4", "y3",
                               os.path.join(alias, os.path.basename(path)), terms)
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.assert_release_waits_for(c, path, "second", p)

    def test_pv_affinity_in_a_second_term_blocks_deletion(self):
        self.add_class()
        p = self.provisioner("--node-name", "node-a")
        c, path = self.bound_with_data("x3")
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        terms = [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                        "values": ["node-b"]}]},
                 {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                        "values": ["node-a"]}]}]
        self.admin_pv_affinity("second", "ns4", "y3",
                               os.path.join(alias, os.path.basename(path)), terms, local=True)
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.assert_release_waits_for(c, path, "second", p)


class CopiedAnnotationsTest(AdvBase):
    """An administrator makes a PV by copying one of ours (`kubectl get pv -o yaml`): it carries
    our provisioned-by and identity annotations, but no record of ours owns it."""

    def test_copied_pv_through_a_symlink_inside_the_root_blocks_deletion(self):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        link = os.path.join(self.pv_dir, "alias")
        os.symlink(os.path.basename(path), link)
        self.api.create(NSS_PATH, namespace("ns4"))
        other = self.api.create(PVCS_PATH % "ns4", claim_obj("ns4", "y3", "",
                                                             volume_name="copied"))
        self.api.create(PVS_PATH, volume("copied", path=link, reclaim="Retain",
                                         claim_ref=other,
                                         annotations={ANN_BY: PROVISIONER, ANN_ID: IDENTITY}))
        self.wait_bound("y3", ns="ns4")
        self.api.delete(PVC_PATH % ("default", "x3"))
        name = self.pv_of(c)
        p.wait_log(r"not removing %s: .*PersistentVolume copied" % re.escape(path), 20)
        self.wait_event(name, "VolumeFailedDelete", kind="PersistentVolume")
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")



    def copied_pv(self, name, path, ns="ns4", claim="y3", reclaim="Retain", cls="",
                  on_delete="delete"):
        """A PV copied from one of ours: our annotations, the on-delete one included (None: a
        copy of an earlier version's PV, which had none)."""
        self.api.create(NSS_PATH, namespace(ns))
        other = self.api.create(PVCS_PATH % ns, claim_obj(ns, claim, cls, volume_name=name))
        ann = {ANN_BY: PROVISIONER, ANN_ID: IDENTITY}
        if on_delete:
            ann[ANN_ON_DELETE] = on_delete
        self.api.create(PVS_PATH, volume(name, path=path, reclaim=reclaim, claim_ref=other,
                                         cls=cls, host_path_type="DirectoryOrCreate",
                                         annotations=ann))
        self.wait_bound(claim, ns=ns)

    def test_released_copy_of_a_live_volume_removes_nothing(self):
        """A copy on the very path of a live volume, reclaim Delete, released: it is not ours
        (no record), and the directory is the live volume's."""
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        self.copied_pv("copied", path, reclaim="Delete", cls="hostpath")
        self.api.delete(PVC_PATH % ("ns4", "y3"))
        self.wait(lambda: self.pv("copied")["status"]["phase"] == "Released", 20, "Released")
        time.sleep(2.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(self.pv(self.pv_of(c))["status"]["phase"], "Bound")
        self.assertNotIn("copied", journal_records(self.pv_dir))
        # The live volume's own release waits for the copy to go.
        self.api.delete(PVC_PATH % ("default", "x3"))
        p.wait_log(r"not removing (volume directory )?%s: .*PersistentVolume copied"
                   % re.escape(path), 20)
        self.api.delete(PV_PATH % "copied")
        self.wait_gone(c, path, timeout=40)

    def test_copy_made_while_the_provisioner_was_down(self):
        """The same, with the copy made while the provisioner was down: at start it is not
        recorded as an earlier version's volume (its directory is another volume's)."""
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        p.stop()
        self.copied_pv("copied", path, reclaim="Delete", cls="hostpath", on_delete=None)
        p = self.provisioner()
        p.wait_log(r"caches synced", 20)
        self.api.delete(PVC_PATH % ("ns4", "y3"))
        self.wait(lambda: not self.api.exists(PV_PATH % "copied") or
                  self.pv("copied")["status"]["phase"] == "Released", 20, "Released")
        time.sleep(2.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        # Taken for an earlier version's volume on another volume's directory: kept.
        rec = journal_records(self.pv_dir).get("copied")
        if rec:
            self.assertEqual(rec["onDelete"], "retain")
        if self.api.exists(PV_PATH % "copied"):
            self.api.delete(PV_PATH % "copied")
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.wait_gone(c, path, timeout=40)

class SpellingTest(AdvBase):
    """One directory, every spelling a PV can give it."""

    def released_waits(self, pv_path_fn, other="second"):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        pv_path = pv_path_fn(path)
        self.admin_pv(other, "ns4", "y3", pv_path)
        self.api.delete(PVC_PATH % ("default", "x3"))
        name = self.pv_of(c)
        p.wait_log(r"not removing %s: .*PersistentVolume %s" % (re.escape(path), other), 20)
        self.wait_event(name, "VolumeFailedDelete", kind="PersistentVolume")
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(self.pv(name)["status"]["phase"], "Released")
        return c, path, p

    def test_relative_symlink_chain_with_dotdot_and_slashes(self):
        def spell(path):
            base = os.path.join(self.tmp, "a", "b")
            os.makedirs(base)
            # l1 -> b/l2 (relative), l2 -> ../l3, l3 -> ../volumes (relative, through ..)
            os.symlink("b/l2", os.path.join(self.tmp, "a", "l1"))
            os.symlink("../l3", os.path.join(base, "l2"))
            os.symlink("../volumes", os.path.join(self.tmp, "a", "l3"))
            return "%s//a/./l1//%s/" % (self.tmp, os.path.basename(path))
        self.released_waits(spell)

    def test_physical_dotdot_after_a_symlink(self):
        def spell(path):
            deep = os.path.join(self.tmp, "x", "y")
            os.makedirs(deep)
            os.symlink(deep, os.path.join(self.tmp, "jump"))
            # jump/.. is x physically (not tmp): x/up -> the root's parent. The API server
            # refuses '..' in a PV's path, not in a symlink's target.
            os.symlink(self.tmp, os.path.join(self.tmp, "x", "up"))
            os.symlink("jump/../up/volumes", os.path.join(self.tmp, "via"))
            return os.path.join(self.tmp, "via", os.path.basename(path))
        self.released_waits(spell)

    def test_symlink_made_after_the_pv(self):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        later = os.path.join(self.tmp, "later")
        self.admin_pv("second", "ns4", "y3", os.path.join(later, os.path.basename(path)))
        os.symlink(self.pv_dir, later)  # the PV dangled until now
        self.api.delete(PVC_PATH % ("default", "x3"))
        p.wait_log(r"not removing %s: .*PersistentVolume second" % re.escape(path), 20)
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")

    def test_dangling_symlink_in_the_middle(self):
        """A dangling symlink's target is where kubelet's DirectoryOrCreate makes the path."""
        def spell(path):
            os.symlink(os.path.join(self.tmp, "volumes", os.path.basename(path), "sub"),
                       os.path.join(self.tmp, "dangling"))
            return os.path.join(self.tmp, "dangling", "more")
        self.released_waits(spell)

    def test_symlink_loop_counts_as_in_use_until_its_pv_goes(self):
        def spell(path):
            os.symlink("loop2", os.path.join(self.pv_dir, "loop1"))
            os.symlink("loop1", os.path.join(self.pv_dir, "loop2"))
            return os.path.join(self.pv_dir, "loop1", "x")
        c, path, p = self.released_waits(spell)
        self.api.delete(PVC_PATH % ("ns4", "y3"))
        self.api.delete(PV_PATH % "second")
        self.wait_gone(c, path, timeout=40)

    def test_bind_mount_of_a_subdirectory_local_pv_of_another_provisioner(self):
        self.add_class()
        p = self.provisioner()
        c, path = self.bound_with_data("x3")
        os.mkdir(os.path.join(path, "sub"))
        inner = os.path.join(self.tmp, "inner-bind")
        self.bind_mount(os.path.join(path, "sub"), inner)
        self.api.create(NSS_PATH, namespace("ns4"))
        other = self.api.create(PVCS_PATH % "ns4", claim_obj("ns4", "y3", "",
                                                             volume_name="theirs"))
        pv = volume("theirs", path=inner, reclaim="Delete", claim_ref=other,
                    annotations={ANN_BY: "rancher.io/local-path"})
        pv["spec"]["local"] = pv["spec"].pop("hostPath")
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["any"]}]}]}}
        self.api.create(PVS_PATH, pv)
        self.wait_bound("y3", ns="ns4")
        self.api.delete(PVC_PATH % ("default", "x3"))
        p.wait_log(r"not removing %s: it contains the directory of PersistentVolume theirs"
                   % re.escape(path), 20)
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")

    def test_views_of_the_root_and_above_do_not_block(self):
        """PVs of --pv-dir itself, its parent and / hold none of the volumes (a backup pod's
        view): a release goes ahead."""
        self.add_class()
        self.provisioner()
        c, path = self.bound_with_data("x3")
        self.admin_pv("root-view", "ns4", "a", self.pv_dir + "/")
        self.admin_pv("parent-view", "ns5", "b", self.tmp)
        self.admin_pv("slash-view", "ns6", "c", "/")
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.wait_gone(c, path)


class ProvisionIntoTest(AdvBase):
    def test_new_volume_around_a_pv_not_yet_made_through_a_symlink(self):
        """An administrator's DirectoryOrCreate PV below where a claim's pattern renders, not made
        yet, spelled through a symlink: the new volume would hold it."""
        self.add_class(parameters={"pathPattern": "{{.PVC.Annotations.dir}}"})
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.provisioner()
        self.admin_pv("admins", "ns4", "y", os.path.join(alias, "shared", "data"))
        c = self.add_claim("mine", annotations={"dir": "shared"})
        ev = self.wait_event("mine", "ProvisioningFailed")
        self.assertIn("PersistentVolume admins", ev["message"])
        self.assert_no_pv(c)
        self.assertFalse(os.path.exists(os.path.join(self.pv_dir, "shared")))

    def test_reuse_retained_refuses_a_directory_with_a_pv_inside_through_a_bind_mount(self):
        self.add_class(parameters={"onDelete": "retain", "reuseRetained": "true"})
        self.provisioner()
        c, path = self.bound_with_data("data")
        name = self.pv_of(c)
        self.api.delete(PVC_PATH % ("default", "data"))
        self.wait(lambda: journal_records(self.pv_dir).get(name, {}).get("state")
                  == "retained", 20, "retained")
        os.mkdir(os.path.join(path, "sub"))
        inner = os.path.join(self.tmp, "bind")
        self.bind_mount(os.path.join(path, "sub"), inner)
        self.admin_pv("rebound", "ns2", "other", inner)
        again = self.add_claim("data")
        ev = self.wait_event("data", "ProvisioningFailed")
        self.assertIn("PersistentVolume rebound", ev["message"])
        self.assert_no_pv(again)
        self.assertEqual(journal_records(self.pv_dir)[name]["state"], "retained")


class CrashAroundIdentityTest(AdvBase):
    """kill -9 in the middle of a release, an aliasing PV made while the provisioner is down:
    the restart must not finish the removal under it."""

    def crash_then_alias(self, step):
        self.add_class()
        first = self.spawn(*self.fast, name="setup", pv_dir=self.pv_dir)
        c, path = self.bound_with_data("x3")
        for i in range(50):  # something to remove, so that the removal has steps
            with open(os.path.join(path, "f%02d" % i), "w") as f:
                f.write("x")
        first.stop()
        victim = self.spawn(*self.fast, name="victim", pv_dir=self.pv_dir,
                            env={"HOSTPATH_TEST_CRASH_AT": "%s:1" % step})
        victim.wait_log(r"caches synced", 20)
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.wait(lambda: not victim.alive(), 30, "crash at %s" % step)
        self.assertIn("crashpoint: %s" % step, victim.log)
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.admin_pv("second", "ns4", "y3", os.path.join(alias, os.path.basename(path)))
        after = self.spawn(*self.fast, name="after", pv_dir=self.pv_dir)
        after.wait_log(r"not removing %s: .*PersistentVolume second" % re.escape(path), 20)
        time.sleep(1.0)
        self.assertTrue(os.path.isdir(path))
        self.assertEqual(self.pv(self.pv_of(c))["status"]["phase"], "Released")
        self.assertEqual(journal_records(self.pv_dir)[self.pv_of(c)]["state"], "deleting")
        left = set(os.listdir(path))
        time.sleep(1.0)
        self.assertEqual(set(os.listdir(path)), left, "removal went on under a live PV")
        return c, path, after

    def test_crash_after_deleting_is_recorded(self):
        c, path, p = self.crash_then_alias("release-marked")
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.assertEqual(len(os.listdir(path)), 51)

    def test_crash_half_way_through_the_removal(self):
        self.crash_then_alias("release-removing")

    def test_orphan_sweep_finishing_a_removal_under_an_alias(self):
        """The PV of a volume whose removal was cut short is deleted by hand while the
        provisioner is down: the orphan sweep finishes "deleting" records, but not under a live
        PV that aliases the directory."""
        self.add_class()
        first = self.spawn(*self.fast, name="setup", pv_dir=self.pv_dir)
        c, path = self.bound_with_data("x3")
        first.stop()
        victim = self.spawn(*self.fast, name="victim", pv_dir=self.pv_dir,
                            env={"HOSTPATH_TEST_CRASH_AT": "release-marked:1"})
        victim.wait_log(r"caches synced", 20)
        self.api.delete(PVC_PATH % ("default", "x3"))
        self.wait(lambda: not victim.alive(), 30, "crash")
        self.api.delete(PV_PATH % self.pv_of(c))
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.admin_pv("second", "ns4", "y3", os.path.join(alias, os.path.basename(path)))
        after = self.spawn(*self.fast, "--resync-period", "1s", name="after",
                           pv_dir=self.pv_dir)
        after.wait_log(r"caches synced", 20)
        time.sleep(4.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")
        self.api.delete(PVC_PATH % ("ns4", "y3"))
        self.api.delete(PV_PATH % "second")
        self.wait(lambda: not os.path.exists(path), 30, "removal finished once the alias went")


class RootsAttackTest(AdvBase):
    fast = IdentityBase.fast + ("--resync-period", "2s")

    def config(self, doc):
        path = os.path.join(self.tmp, "config.json")
        with open(path + ".new", "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        os.replace(path + ".new", path)
        return path

    def paths(self, *paths):
        return {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                 "paths": list(paths)}]}

    def start_fails(self, cfg, *args):
        p = Provisioner(self.api, self.pv_dir, "--config", cfg, *args)
        r = subprocess.run(p.command(), capture_output=True, text=True, timeout=30,
                           env=p.environment())
        self.assertEqual(r.returncode, 2, r.stderr[-2000:])
        return r.stderr

    def test_start_refuses_roots_that_are_one_directory_or_nested_on_disk(self):
        a = os.path.join(self.tmp, "disk-a")
        os.makedirs(os.path.join(a, "sub"))
        link = os.path.join(self.tmp, "link-a")
        os.symlink(a, link)
        rel = os.path.join(self.tmp, "rel-link")
        os.symlink("disk-a/sub", rel)
        err = self.start_fails(self.config(self.paths(a, link + "/")))
        self.assertIn("one directory", err)
        err = self.start_fails(self.config(self.paths(rel, a)))
        self.assertIn("one inside the other", err)
        bind = os.path.join(self.tmp, "bind")
        self.bind_mount(os.path.join(a, "sub"), bind)
        err = self.start_fails(self.config(self.paths(a, bind)))
        self.assertIn("one inside the other", err)

    def test_reload_refuses_overlaps_and_bad_files_and_keeps_the_old_map(self):
        a = os.path.join(self.tmp, "disk-a")
        b = os.path.join(self.tmp, "disk-b")
        os.makedirs(a)
        os.makedirs(b)
        link = os.path.join(self.tmp, "link-a")
        os.symlink(a, link)
        self.add_class()
        cfg = self.config(self.paths(a))
        p = self.provisioner("--config", cfg)
        self.bound_with_data("first")
        bad = [
            (self.paths(a, link), r"one directory"),
            ('{"nodePathMap": [', r"not valid"),
            (self.paths(a, ""), r"not valid"),
            (self.paths(a, a), r"not valid"),
            ({"nodePathMap": self.paths(a)["nodePathMap"], "surprise": 1}, r"not valid"),
            (self.paths(a, "relative/x"), r"not valid"),
        ]
        for doc, why in bad:
            mark = len(p.log)
            self.config(doc)
            self.wait(lambda: re.search(why, p.log[mark:]) and
                      re.search(r"previous map stays", p.log[mark:]), 20,
                      "reload of %r refused" % (doc,))
            self.assertTrue(p.alive())
        # Still provisioning on the old map, and a good file is taken.
        c = self.add_claim("second")
        self.wait_bound("second")
        self.assertTrue(self.path_of(c).startswith(a + "/"))
        self.config(self.paths(b))
        p.wait_log(r"reloaded: paths=%s" % re.escape(b), 20)
        c = self.add_claim("third")
        self.wait_bound("third")
        self.assertTrue(self.path_of(c).startswith(b + "/"))

    def test_sighup_does_not_kill_the_provisioner(self):
        """Daemons re-read their configuration on SIGHUP; the provisioner must at least not
        die of it (the signal's default action) and must re-read --config."""
        a = os.path.join(self.tmp, "disk-a")
        b = os.path.join(self.tmp, "disk-b")
        os.makedirs(a)
        os.makedirs(b)
        self.add_class()
        cfg = self.config(self.paths(a))
        p = self.provisioner("--config", cfg)
        p.wait_log(r"caches synced", 20)
        p.proc.send_signal(1)  # SIGHUP
        p.wait_log(r"SIGHUP: re-reading --config", 10)
        time.sleep(0.5)
        self.assertTrue(p.alive(), "provisioner died of SIGHUP: exit %s" % p.proc.poll())
        self.bound_with_data("first")
        # A change written in place, keeping its size and mtime second, is seen on SIGHUP.
        st = os.stat(cfg)
        text = open(cfg).read().replace(a, b)
        with open(cfg, "w") as f:
            f.write(text)
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))
        p.proc.send_signal(1)
        p.wait_log(r"reloaded: paths=%s" % re.escape(b), 20)


LPP = "rancher.io/local-path"
LPP_NODE_ANN = "local.path.provisioner/selected-node"


class TakeOverAttackTest(AdvBase):
    """--take-over of local-path-provisioner's volumes, as it leaves them, and as an
    administrator could have left them."""

    fast = IdentityBase.fast + ("--provisioner-name", LPP, "--node-name", "node-a",
                                "--take-over")

    def lpp_pv(self, name, path, reclaim="Delete", node="node-a", make=True, local=False,
               bind=True, ns="default"):
        c = None
        if bind:
            c = self.api.create(PVCS_PATH % ns, claim_obj(ns, name, "local-path",
                                                          volume_name="pvc-" + name))
        if make:
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "data"), "w") as f:
                f.write("lpp data\n")
        gone = {"metadata": {"namespace": ns, "name": name, "uid": "0000-" + name}}
        pv = volume("pvc-" + name, path=path, cls="local-path", claim_ref=c or gone,
                    reclaim=reclaim, node=node, host_path_type="DirectoryOrCreate",
                    annotations={"pv.kubernetes.io/provisioned-by": LPP,
                                 LPP_NODE_ANN: node})
        if local:
            pv["spec"]["local"] = {"path": path}
            del pv["spec"]["hostPath"]
        self.api.create(PVS_PATH, pv)
        if bind:
            self.wait_bound(name, ns=ns)
        return c

    def setUp(self):
        super().setUp()
        self.add_class("local-path", provisioner=LPP)

    def events_for(self, name, reason=None, kind=None):
        items = self.api.list("/api/v1/events")["items"]
        return [e for e in items if e["involvedObject"].get("name") == name and
                (kind is None or e["involvedObject"].get("kind") == kind) and
                (reason is None or e["reason"] == reason) and
                (e.get("source") or {}).get("component") == LPP]

    def test_symlink_on_the_way_is_not_taken_over(self):
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(self.pv_dir, "link"))
        path = os.path.join(self.pv_dir, "link", "pvc-x_default_x")
        self.lpp_pv("x", path)
        self.provisioner()
        ev = self.wait_event("pvc-x", "VolumeNotTakenOver", kind="PersistentVolume")
        self.assertNotIn("pvc-x", journal_records(self.pv_dir))
        self.api.delete(PVC_PATH % ("default", "x"))
        time.sleep(1.5)
        self.assertEqual(read(os.path.join(outside, "pvc-x_default_x", "data")), "lpp data\n")
        self.assertTrue(ev["message"])

    def test_the_root_itself_is_not_taken_over(self):
        self.lpp_pv("x", self.pv_dir + "/")
        with open(os.path.join(self.pv_dir, "keep"), "w") as f:
            f.write("k")
        self.provisioner()
        self.wait_event("pvc-x", "VolumeNotTakenOver", kind="PersistentVolume")
        self.api.delete(PVC_PATH % ("default", "x"))
        time.sleep(1.5)
        self.assertTrue(os.path.isfile(os.path.join(self.pv_dir, "keep")))

    def test_nested_volumes_of_local_path_provisioner(self):
        """allowUnsafePathPattern let it make a volume inside another: at most one of them is
        taken over, and neither is ever removed while the other lives."""
        outer = os.path.join(self.pv_dir, "team")
        inner = os.path.join(outer, "db")
        self.lpp_pv("outer", outer)
        self.lpp_pv("inner", inner)
        p = self.provisioner()
        p.wait_log(r"caches synced", 20)
        self.wait(lambda: len(self.events_for("pvc-outer", "VolumeNotTakenOver") +
                              self.events_for("pvc-inner", "VolumeNotTakenOver")) >= 1, 20,
                  "one of the nested volumes not taken over")
        recs = journal_records(self.pv_dir)
        self.assertLessEqual(len(recs), 1, recs)
        self.api.delete(PVC_PATH % ("default", "outer"))
        time.sleep(2.0)
        self.assertEqual(read(os.path.join(inner, "data")), "lpp data\n")
        self.api.delete(PVC_PATH % ("default", "inner"))
        time.sleep(2.0)
        self.assertEqual(read(os.path.join(outer, "data")), "lpp data\n")

    def test_aliased_by_a_hand_made_pv_is_not_taken_over(self):
        path = os.path.join(self.pv_dir, "pvc-x_default_x")
        self.lpp_pv("x", path)
        alias = os.path.join(self.tmp, "alias")
        os.symlink(self.pv_dir, alias)
        self.admin_pv("admins", "ns4", "y", os.path.join(alias, "pvc-x_default_x"))
        self.provisioner()
        ev = self.wait_event("pvc-x", "VolumeNotTakenOver", kind="PersistentVolume")
        self.assertIn("PersistentVolume admins", ev["message"])
        self.api.delete(PVC_PATH % ("default", "x"))
        time.sleep(1.5)
        self.assertEqual(read(os.path.join(path, "data")), "lpp data\n")

    def test_released_while_switching_is_deleted_as_it_would_have_been(self):
        """A claim deleted while neither provisioner ran: its PV waits Released; taken over, it
        is released by its policy (Delete: removed; Retain: kept)."""
        gone = os.path.join(self.pv_dir, "pvc-gone_default_gone")
        kept = os.path.join(self.pv_dir, "pvc-kept_default_kept")
        self.lpp_pv("gone", gone, bind=False)
        self.lpp_pv("kept", kept, reclaim="Retain", bind=False)
        self.wait(lambda: self.pv("pvc-gone")["status"]["phase"] == "Released", 20, "Released")
        self.provisioner()
        self.wait(lambda: not self.api.exists(PV_PATH % "pvc-gone") and
                  not os.path.exists(gone), 30, "released volume deleted after take-over")
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(kept, "data")), "lpp data\n")
        self.assertTrue(self.api.exists(PV_PATH % "pvc-kept"))

    def test_local_volume_on_a_node_affinity_key(self):
        """Its local PVs on nodeAffinityKey: the affinity holds a label's value, the annotation
        the node. Taken over on that node only."""
        path = os.path.join(self.pv_dir, "pvc-l_default_l")
        c = self.api.create(PVCS_PATH % "default", claim_obj("default", "l", "local-path",
                                                             volume_name="pvc-l"))
        os.makedirs(path)
        pv = volume("pvc-l", path=path, cls="local-path", claim_ref=c, reclaim="Delete",
                    annotations={"pv.kubernetes.io/provisioned-by": LPP,
                                 LPP_NODE_ANN: "node-a"})
        pv["spec"]["local"] = {"path": path}
        del pv["spec"]["hostPath"]
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/stable-id", "operator": "In", "values": ["id-7"]}]}]}}
        self.api.create(PVS_PATH, pv)
        self.wait_bound("l")
        p = self.provisioner()
        p.wait_log(r"took over a volume of local-path-provisioner pv=pvc-l", 20)
        self.api.delete(PVC_PATH % ("default", "l"))
        self.wait(lambda: not os.path.exists(path), 20, "local volume removed")


class LppConfigAttackTest(AdvBase):
    """local-path-provisioner's config.json as its own Helm chart renders it."""

    def config(self, doc):
        path = os.path.join(self.tmp, "config.json")
        with open(path + ".new", "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        os.replace(path + ".new", path)
        return path

    def test_chart_storage_class_configs_beside_its_default_node_path_map(self):
        """Its chart's values.yaml has a nodePathMap by default, so setting storageClassConfigs
        as its values document renders both keys; it uses storageClassConfigs and ignores the
        top level. So does this provisioner, and it says so."""
        top = os.path.join(self.tmp, "opt-lpp")
        fast = os.path.join(self.tmp, "fast")
        os.makedirs(fast)
        cfg = self.config({
            "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [top]}],
            "storageClassConfigs": {"fast": {"nodePathMap": [
                {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [fast]}]}}})
        self.add_class("fast")
        p = self.provisioner("--config", cfg)
        p.wait_log(r"nodePathMap at the top of --config .* is ignored", 20)
        c = self.add_claim("c", cls="fast")
        self.wait_bound("c")
        self.assertTrue(self.path_of(c).startswith(fast + "/"))
        self.assertFalse(os.path.exists(top))


class PathPatternAttackTest(AdvBase):
    """pathPattern as a tenant (claim annotations) and an administrator (class) can write it."""

    def refused(self, name, cls, words, **kw):
        c = self.add_claim(name, cls=cls, **kw)
        ev = self.wait_event(name, "ProvisioningFailed")
        for w in words:
            self.assertIn(w, ev["message"])
        self.assert_no_pv(c)
        return ev

    def test_journal_is_never_a_volume(self):
        self.add_class()
        self.add_class("by-ann", parameters={"pathPattern": "{{ .PVC.Annotations.d }}"})
        self.add_class("unsafe", parameters={
            "pathPattern": "x/../{{ .PVC.Annotations.d }}/{{ .PVC.Name }}",
            "allowUnsafePathPattern": "true"})
        self.add_class("unsafe-abs", parameters={
            "pathPattern": "/.hostpath-provisioner/records/{{ .PVC.Name }}",
            "allowUnsafePathPattern": "true"})
        self.provisioner()
        self.bound_with_data("first")  # the journal exists
        before = sorted(os.listdir(os.path.join(self.pv_dir, ".hostpath-provisioner")))
        self.refused("a", "by-ann", ["journal"], annotations={"d": ".hostpath-provisioner"})
        self.refused("b", "unsafe", ["journal"], annotations={"d": ".hostpath-provisioner"})
        self.refused("c", "unsafe-abs", ["journal"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.pv_dir, ".hostpath-provisioner"))),
                         before)

    def test_unsafe_fixture_twice_collides(self):
        """Its fixture renders <root>/etc for every claim: the second claim is refused, and
        deleting the first removes only <root>/etc."""
        self.add_class("skip", parameters={
            "pathPattern": "/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/",
            "allowUnsafePathPattern": "true"})
        self.provisioner()
        c1, path = self.bound_with_data("one", cls="skip")
        self.assertEqual(path, os.path.join(self.pv_dir, "etc"))
        self.refused("two", "skip", [self.pv_of(c1)])
        self.api.delete(PVC_PATH % ("default", "one"))
        self.wait_gone(c1, path)
        self.assertTrue(os.path.isdir(self.pv_dir))

    def test_unsafe_traversal_by_annotation_stays_inside(self):
        self.add_class("unsafe", parameters={
            "pathPattern": "{{ .PVC.Annotations.a }}/{{ .PVC.Annotations.b }}/{{ .PVC.Name }}",
            "allowUnsafePathPattern": "true"})
        self.provisioner()
        self.refused("up", "unsafe", ["volume root"], annotations={"a": "..", "b": ".."})
        c = self.add_claim("ok", cls="unsafe", annotations={"a": "x", "b": ".."})
        self.wait_bound("ok")
        self.assertEqual(self.path_of(c), os.path.join(self.pv_dir, "ok"))

    def test_unsafe_parameter_false_wins_over_annotation(self):
        from harness import SCS_PATH, storage_class
        sc = storage_class("mixed", PROVISIONER, parameters={
            "pathPattern": "../{{ .PVC.Name }}", "allowUnsafePathPattern": "false"})
        sc["metadata"]["annotations"] = {"allowUnsafePathPattern": "true"}
        self.api.create(SCS_PATH, sc)
        self.provisioner()
        self.refused("m", "mixed", [".."])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "m")))

    def test_pvc_metadata_fields(self):
        """Its README: the template sees the claim's whole metadata object (PVC)."""
        self.add_class("uid", parameters={
            "pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/{{ .PVC.UID }}"})
        self.provisioner()
        c = self.add_claim("u", cls="uid")
        self.wait_bound("u")
        self.assertEqual(self.path_of(c), os.path.join(self.pv_dir, "default", "u",
                                                       c["metadata"]["uid"]))


class SharedPathAttackTest(AdvBase):
    """sharedFileSystemPath: one filesystem on every node, so node affinity does not keep two PVs
    on it apart."""

    def test_pv_of_another_node_on_the_shared_path_blocks_deletion(self):
        shared = os.path.join(self.tmp, "nfs")
        os.makedirs(shared)
        cfg = os.path.join(self.tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"sharedFileSystemPath": shared}, f)
        self.add_class()
        p = self.provisioner("--config", cfg, "--node-name", "node-a")
        c, path = self.bound_with_data("x3", modes=("ReadWriteMany",))
        self.assertTrue(path.startswith(shared + "/"))
        # An administrator's PV on node-b, on the same file, pinned there.
        self.api.create(NSS_PATH, namespace("ns4"))
        other = self.api.create(PVCS_PATH % "ns4", claim_obj("ns4", "y3", "",
                                                             volume_name="on-b"))
        self.api.create(PVS_PATH, volume("on-b", path=path, reclaim="Retain", claim_ref=other,
                                         node="node-b"))
        self.wait_bound("y3", ns="ns4")
        self.api.delete(PVC_PATH % ("default", "x3"))
        p.wait_log(r"not removing (volume directory )?%s: .*PersistentVolume on-b"
                   % re.escape(path), 20)
        time.sleep(1.0)
        self.assertEqual(read(os.path.join(path, "data")), "first tenant's data\n")

if __name__ == "__main__":
    unittest.main()
