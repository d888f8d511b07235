"""The container image, built for real with scripts/build-image.sh (debootstrap + buildah, no
registry), runs the provisioner against the local API server on 127.0.0.1 and provisions a
claim into a host directory mounted into the container.

Skipped (exit 77, loudly) when buildah or debootstrap is missing; scripts/setup.sh --test (and so
CI) installs both. The base image is cached in buildah's storage between runs.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (PV_PATH, PVC_PATH, PVCS_PATH, SCS_PATH, ApiServer, claim,  # noqa: E402
                     skip_module, stop_process, storage_class, wait_for)

ROOT = os.environ.get("HP_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TAG = "localhost/hostpath-provisioner:test"
ENV = dict(os.environ, STORAGE_DRIVER="vfs", BUILDAH_ISOLATION="chroot")


def buildah(*args, timeout=120, check=True):
    return subprocess.run(["buildah"] + list(args), env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, check=check)


class ImageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([os.path.join(ROOT, "scripts", "build-image.sh"), TAG], cwd=ROOT,
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=900)
        if r.returncode != 0:
            raise AssertionError("image build failed:\n" + r.stdout[-4000:])
        cls.size_line = r.stdout.strip().splitlines()[-1]
        print("image:", cls.size_line)

    def container(self):
        name = "hp-test-%d-%d" % (os.getpid(), time.monotonic_ns() % 100000)
        buildah("from", "--name", name, TAG)
        self.addCleanup(buildah, "rm", name, check=False)
        return name

    def test_version_and_contents(self):
        ctr = self.container()
        out = buildah("run", ctr, "--", "/usr/bin/hostpath-provisioner", "--version").stdout
        self.assertIn("hostpath-provisioner 0.1.0", out)
        # No shell, no package manager, no compiler in the final image.
        mnt = buildah("mount", ctr).stdout.strip()
        self.addCleanup(buildah, "umount", ctr, check=False)
        for tool in ("bin/sh", "usr/bin/apt-get", "usr/bin/gcc", "usr/bin/meson"):
            self.assertFalse(os.path.lexists(os.path.join(mnt, tool)), tool)
        cfg = buildah("inspect", "--type", "image", "--format",
                      "{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Labels}}", TAG).stdout
        self.assertIn("/usr/bin/hostpath-provisioner", cfg)
        self.assertIn("org.opencontainers.image.title", cfg)

    def test_provisions_a_claim_from_the_image(self):
        tmp = tempfile.mkdtemp(prefix="hp-image-")
        self.addCleanup(shutil.rmtree, tmp, True)
        pv_dir = os.path.join(tmp, "volumes")
        os.makedirs(pv_dir)
        with ApiServer(tmp) as api:
            api.create(SCS_PATH, storage_class("hostpath", "hostpath-provisioner.io"))
            ctr = self.container()
            log = open(os.path.join(tmp, "container.log"), "wb")
            # chroot isolation shares the host's network: 127.0.0.1 is the API server.
            proc = subprocess.Popen(
                ["buildah", "run", "-v", "%s:%s:ro" % (api.state_dir, api.state_dir),
                 "-v", "%s:/var/lib/hostpath-provisioner" % pv_dir, ctr, "--",
                 "/usr/bin/hostpath-provisioner", "--kubeconfig", api.kubeconfig,
                 "--pv-dir", "/var/lib/hostpath-provisioner", "--metrics-address", "",
                 "--identity", "image-test"],
                env=ENV, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            log.close()

            self.addCleanup(stop_process, proc, timeout=15)
            c = api.create(PVCS_PATH % "default", claim("default", "img", "hostpath"))
            name = "pvc-" + c["metadata"]["uid"]
            try:
                wait_for(lambda: api.get(PVC_PATH % ("default", "img"))["status"]["phase"]
                         == "Bound", 60, what="claim bound by the containerised provisioner")
            except Exception:
                with open(os.path.join(tmp, "container.log")) as f:
                    print(f.read()[-4000:])
                raise
            pv = api.get(PV_PATH % name)
            self.assertEqual(pv["metadata"]["annotations"]["hostPathProvisionerIdentity"],
                             "image-test")
            self.assertEqual(pv["spec"]["hostPath"]["path"],
                             "/var/lib/hostpath-provisioner/default-img-" + name)
            self.assertTrue(os.path.isdir(os.path.join(pv_dir, "default-img-" + name)))
            stop_process(proc, timeout=15)


if __name__ == "__main__":
    for tool in ("buildah", "debootstrap"):
        if not shutil.which(tool):
            skip_module("%s is not installed (scripts/setup.sh --test installs it); the "
                        "container image was NOT built or tested" % tool)
    # Inside a chroot (tests/fresh/run.sh runs the fast tier in one), buildah cannot commit a
    # layer: it remounts "/", which is not a mount point there (EINVAL). A machine or a
    # container has its own root; the image tier is tested there (CI runs it).
    try:
        with open("/proc/self/mountinfo") as f:
            root_mounted = any(line.split()[4] == "/" for line in f if len(line.split()) > 4)
    except OSError:
        root_mounted = True
    if not root_mounted:
        skip_module("running inside a chroot whose \"/\" is not a mount point, where buildah "
                    "cannot commit an image layer; the container image was NOT built or tested "
                    "here")
    binary = os.environ.get("HP_BINARY", "")
    if binary and "libasan" in subprocess.run(["ldd", binary], stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, text=True).stdout:
        skip_module("the image is built from source with its own release build; it is tested "
                    "once, in the plain build, not again in the sanitizer build")
    unittest.main(verbosity=2)
