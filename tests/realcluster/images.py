#!/usr/bin/env python3
"""Container images for the node tier, made here without any registry.

No registry is reachable from this machine, and containerd is started so that any pull fails
at once (node.py). Every image a pod of the tier runs is therefore built here as an OCI image
archive and imported into containerd's `k8s.io` namespace under the name the manifests or the
upstream e2e suite ask for (the versions are those of test/utils/image/manifest.go of the
pinned Kubernetes release; the sandbox image is the one node.py gives containerd):

| name | content |
| --- | --- |
| registry.k8s.io/pause:3.10.2 | `/pause`, images/pause.c linked statically (holds the pod's namespaces, reaps, exits 0 on SIGTERM) |
| registry.k8s.io/e2e-test-images/busybox:1.37.0-2 | Debian's busybox-static with every applet linked, `/etc/passwd` with root, `user` (uid 1000) and nobody |
| registry.k8s.io/e2e-test-images/agnhost:2.66.1 | the busybox file system plus `/agnhost` built from k8s.io/kubernetes/test/images/agnhost (entrypoint `/agnhost`, as upstream) |
| registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1, nginx:1.27.0-2 | the busybox image under these names: the storage specs use them only to run `/bin/sh` scripts (write, read, `dd`, `sha256sum`, execute a file on the volume), which busybox answers |
| docker.io/library/busybox:latest, docker.io/jenkins/jenkins:latest | the busybox image under the names local-path-provisioner's e2e fixtures give (`busybox`, `jenkins/jenkins`: a `/bin/sh` script as uid 1000, `sleep`) |
| docker.io/library/nginx:stable-alpine | the busybox file system serving HTTP on port 80 with busybox's `httpd`, stopping on SIGTERM as nginx does (its fixtures' `nginx:stable-alpine` only has to run until deleted, and `stat` in `kubectl exec`) |
| localhost/hostpath-provisioner:0.1.0 | ours, from scripts/build-image.sh (buildah), pushed to an OCI archive |

    images.py build --bin-dir BIN --out DIR          writes DIR/<name>.tar for each
    images.py import --address SOCK --out DIR        ctr -n k8s.io images import each

The archives are also served by `Registry`, a read-only registry on 127.0.0.1 (the OCI
distribution API's pull side: manifests by tag or digest, blobs) that node.py gives containerd
as the only host of docker.io and registry.k8s.io: a pod whose image is pulled on every start
(`imagePullPolicy: Always`, which `:latest` or no tag implies, as local-path-provisioner's
`jenkins/jenkins` and `busybox`) gets the same imported image instead of an error.

The archives are OCI image layouts (one uncompressed layer, deterministic: mtime 0, owner
root), named by both `org.opencontainers.image.ref.name` and containerd's
`io.containerd.image.name` annotation.
"""

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

PAUSE = "registry.k8s.io/pause:3.10.2"
E2E = "registry.k8s.io/e2e-test-images/"
BUSYBOX = E2E + "busybox:1.37.0-2"
AGNHOST = E2E + "agnhost:2.66.1"
# Names the storage e2e specs run with /bin/sh scripts only; the busybox image serves them.
BUSYBOX_ALIASES = (E2E + "glibc-dns-testing:2.1.1", E2E + "nginx:1.27.0-2")
# local-path-provisioner v0.0.37's e2e fixtures (test/testdata, examples/): `busybox` and
# `jenkins/jenkins` run /bin/sh scripts and sleep; `nginx:stable-alpine` runs until deleted.
LPP_BUSYBOX_NAMES = ("docker.io/library/busybox:latest", "docker.io/jenkins/jenkins:latest")
LPP_NGINX = "docker.io/library/nginx:stable-alpine"
OURS = "localhost/hostpath-provisioner:0.1.0"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "user:x:1000:1000:user:/home/user:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
GROUP = "root:x:0:\nuser:x:1000:\nnobody:x:65534:\n"


class Layer:
    """One image layer built in memory: directories, files and symlinks, owner root, mtime 0,
    in the order added (parents first)."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)
        self.names = set()

    def _info(self, name, kind, mode, size=0, target=""):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.size, ti.linkname = kind, mode, size, target
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "root", "root"
        return ti

    def dir(self, name, mode=0o755):
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.names:
                self.names.add(d)
                self.tar.addfile(self._info(d, tarfile.DIRTYPE, mode if i == len(parts)
                                            else 0o755))

    def file(self, name, data, mode=0o644):
        name = name.strip("/")
        if "/" in name:
            self.dir(os.path.dirname(name))
        if isinstance(data, str):
            data = data.encode()
        self.names.add(name)
        self.tar.addfile(self._info(name, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))

    def host_file(self, name, path, mode=0o755):
        name = name.strip("/")
        if "/" in name:
            self.dir(os.path.dirname(name))
        self.names.add(name)
        with open(path, "rb") as f:
            self.tar.addfile(self._info(name, tarfile.REGTYPE, mode, os.fstat(f.fileno())
                                        .st_size), f)

    def symlink(self, name, target):
        name = name.strip("/")
        if name in self.names:
            return
        if "/" in name:
            self.dir(os.path.dirname(name))
        self.names.add(name)
        self.tar.addfile(self._info(name, tarfile.SYMTYPE, 0o777, target=target))

    def close(self):
        self.tar.close()
        return self.buf.getvalue()


def write_oci_archive(path, refs, layer_bytes, config):
    """An OCI image layout archive at path holding one image under each name in refs."""
    def blob(data):
        return "sha256:" + hashlib.sha256(data).hexdigest(), data

    layer_digest, _ = blob(layer_bytes)
    cfg = {"architecture": "amd64", "os": "linux", "config": config,
           "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
           "history": [{"created_by": "tests/realcluster/images.py"}]}
    cfg_digest, cfg_bytes = blob(json.dumps(cfg, sort_keys=True).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": cfg_digest, "size": len(cfg_bytes)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": layer_digest, "size": len(layer_bytes)}]}
    man_digest, man_bytes = blob(json.dumps(manifest, sort_keys=True).encode())
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "digest": man_digest, "size": len(man_bytes),
                            "platform": {"architecture": "amd64", "os": "linux"},
                            "annotations": {"io.containerd.image.name": ref,
                                            "org.opencontainers.image.ref.name": ref}}
                           for ref in refs]}
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w") as t:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            t.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for d, data in ((layer_digest, layer_bytes), (cfg_digest, cfg_bytes),
                        (man_digest, man_bytes)):
            add("blobs/sha256/" + d.split(":")[1], data)
    os.replace(tmp, path)
    return path


def is_static(path):
    """True when the ELF file at path has no program interpreter (PT_INTERP)."""
    import struct
    with open(os.path.realpath(path), "rb") as f:
        h = f.read(64)
        if h[:4] != b"\x7fELF" or h[4] != 2:
            return False
        phoff, = struct.unpack_from("<Q", h, 32)
        phentsize, phnum = struct.unpack_from("<HH", h, 54)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
    return all(struct.unpack_from("<I", ph, i * phentsize)[0] != 3 for i in range(phnum))


def busybox_layer(extra=None):
    """Debian's static busybox with all its applets, the passwd/group above, /tmp."""
    bb = shutil.which("busybox") or "/bin/busybox"
    r = subprocess.run([bb, "--list-full"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError("busybox --list-full failed: is busybox-static installed?")
    if not is_static(bb):
        raise RuntimeError("%s is not statically linked (install busybox-static)" % bb)
    ly = Layer()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "home/user", "proc", "sys",
              "dev", "var"):
        ly.dir(d, 0o700 if d == "root" else 0o755)
    ly.dir("tmp", 0o1777)
    ly.host_file("bin/busybox", bb)
    for applet in r.stdout.split():
        if applet != "bin/busybox":
            ly.symlink(applet, "/bin/busybox")
    ly.file("etc/passwd", PASSWD)
    ly.file("etc/group", GROUP)
    ly.file("etc/nsswitch.conf", "hosts: files dns\npasswd: files\ngroup: files\n")
    if extra:
        extra(ly)
    return ly.close()


def build_pause(out, workdir):
    exe = os.path.join(workdir, "pause")
    r = subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
                        os.path.join(HERE, "images", "pause.c")],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("compiling images/pause.c failed:\n" + r.stderr)
    ly = Layer()
    ly.host_file("pause", exe)
    return write_oci_archive(os.path.join(out, "pause.tar"), [PAUSE], ly.close(),
                             {"Entrypoint": ["/pause"], "User": "65535:65535",
                              "Env": [PATH_ENV]})


def build_busybox(out):
    return write_oci_archive(os.path.join(out, "busybox.tar"),
                             [BUSYBOX] + list(BUSYBOX_ALIASES) + list(LPP_BUSYBOX_NAMES),
                             busybox_layer(), {"Cmd": ["sh"], "Env": [PATH_ENV]})


def build_nginx(out):
    """nginx:stable-alpine's stand-in: busybox httpd in the foreground on port 80."""
    def html(ly):
        ly.file("usr/share/nginx/html/index.html", "stand-in for nginx:stable-alpine\n")
    # As PID 1, httpd would ignore SIGTERM (no handler) and every pod deletion would wait for
    # its grace period; nginx stops on SIGTERM, and so does this shell.
    serve = ("trap 'exit 0' TERM INT; httpd -f -v -p 80 -h /usr/share/nginx/html & wait")
    return write_oci_archive(os.path.join(out, "nginx.tar"), [LPP_NGINX], busybox_layer(html),
                             {"Cmd": ["sh", "-c", serve], "Env": [PATH_ENV],
                              "ExposedPorts": {"80/tcp": {}}})


def build_agnhost(out, bin_dir):
    agn = os.path.join(bin_dir, "agnhost")
    if not os.access(agn, os.X_OK):
        raise RuntimeError("missing %s (run tests/realcluster/build.sh)" % agn)
    layer = busybox_layer(lambda ly: ly.host_file("agnhost", agn))
    return write_oci_archive(os.path.join(out, "agnhost.tar"), [AGNHOST], layer,
                             {"Entrypoint": ["/agnhost"], "Cmd": ["pause"], "Env": [PATH_ENV]})


def build_ours(out, log=None):
    """scripts/build-image.sh, then the image from buildah's storage to an OCI archive."""
    env = dict(os.environ, STORAGE_DRIVER="vfs", BUILDAH_ISOLATION="chroot")
    r = subprocess.run([os.path.join(SRC, "scripts", "build-image.sh"), OURS], cwd=SRC, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    if log:
        log(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "(no output)")
    if r.returncode != 0:
        raise RuntimeError("scripts/build-image.sh failed:\n" + r.stdout[-4000:])
    path = os.path.join(out, "hostpath-provisioner.tar")
    if os.path.exists(path):
        os.unlink(path)
    r = subprocess.run(["buildah", "push", "--quiet", OURS, "oci-archive:%s:%s" % (path, OURS)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise RuntimeError("buildah push failed:\n" + r.stdout[-4000:])
    return path


def build_all(out, bin_dir, ours=True, log=None):
    """Writes every archive into out; returns their paths."""
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hp-images-") as work:
        paths = [build_pause(out, work), build_busybox(out), build_nginx(out),
                 build_agnhost(out, bin_dir)]
    if ours:
        paths.append(build_ours(out, log))
    return paths


def import_archives(address, paths, ctr="ctr", timeout=600):
    """ctr -n k8s.io images import, into the containerd at `address` (never a pull)."""
    for p in paths:
        r = subprocess.run([ctr, "--address", address, "--namespace", "k8s.io", "images",
                            "import", p], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("ctr images import %s failed: %s" % (p, r.stderr.strip()))


def split_ref(ref):
    """(host, repository, tag) of a full image name such as docker.io/library/busybox:latest;
    None when the name has no registry host (localhost/... is no registry either)."""
    host, _, rest = ref.partition("/")
    if not rest or ("." not in host and ":" not in host) or "@" in rest:
        return None
    repo, _, tag = rest.rpartition(":")
    if not repo or "/" in tag:
        return None
    return host, repo, tag


class Registry:
    """A read-only registry on 127.0.0.1 serving the images of OCI archives written by
    write_oci_archive (the pull side of the OCI distribution API: /v2/, manifests by tag or
    digest, blobs; GET and HEAD). containerd asks it first for the hosts in self.hosts (node.py
    writes their hosts.toml), so `imagePullPolicy: Always` resolves to the image already
    imported, byte for byte the same, and nothing is fetched. An image it does not hold is 404:
    containerd then tries the real host, through node.py's dead proxy, and fails at once.

        r = Registry(paths).start(); r.port; r.hosts; ...; r.stop()
    """

    def __init__(self, archives):
        self.tags = {}   # (host, repo, tag) -> manifest digest
        self.blobs = {}  # digest -> (archive, member, media type or None)
        self.hosts = set()
        for path in archives:
            with tarfile.open(path) as t:
                index = json.load(t.extractfile("index.json"))
                names = set(t.getnames())
            for m in index.get("manifests", []):
                ann = m.get("annotations") or {}
                for ref in {ann.get("io.containerd.image.name"),
                            ann.get("org.opencontainers.image.ref.name")}:
                    parts = split_ref(ref or "")
                    if parts:
                        self.tags[parts] = m["digest"]
                        self.hosts.add(parts[0])
                self.blobs[m["digest"]] = (path, None, m["mediaType"])
            for n in names:
                if n.startswith("blobs/sha256/"):
                    d = "sha256:" + n.rsplit("/", 1)[1]
                    mt = self.blobs.get(d, (None, None, None))[2]
                    self.blobs[d] = (path, n, mt)
        self.server = self.thread = None
        self.port = None
        self.requests = []  # (method, path, status), for a test to see what was asked

    def blob(self, digest):
        path, member, media = self.blobs[digest]
        with tarfile.open(path) as t:
            return t.extractfile(member).read(), media

    def start(self):
        import http.server
        import threading
        reg = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, code, body=b"", headers=()):
                reg.requests.append((self.command, self.path, code))
                self.send_response(code)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            def do_GET(self):
                from urllib.parse import parse_qs, urlsplit
                u = urlsplit(self.path)
                ns = (parse_qs(u.query).get("ns") or [None])[0]
                if u.path in ("/v2", "/v2/"):
                    return self.answer(200, b"{}", [("Content-Type", "application/json")])
                m = re.match(r"^/v2/(.+)/(manifests|blobs)/([^/]+)$", u.path)
                if not m:
                    return self.answer(404)
                repo, kind, ref = m.groups()
                digest = ref if ref.startswith("sha256:") else None
                if digest is None and kind == "manifests":
                    for (host, r, tag), d in reg.tags.items():
                        if r == repo and tag == ref and (ns is None or ns == host):
                            digest = d
                            break
                if digest not in reg.blobs or reg.blobs[digest][1] is None:
                    return self.answer(404)
                data, media = reg.blob(digest)
                hdrs = [("Docker-Content-Digest", digest),
                        ("Content-Type", media if kind == "manifests" and media
                         else "application/octet-stream")]
                return self.answer(200, data, hdrs)

            do_HEAD = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="registry",
                                       daemon=True)
        self.thread.start()
        return self

    def hosts_toml(self, host):
        """containerd's hosts.toml for host: this registry first, then the real one."""
        upstream = "https://registry-1.docker.io" if host == "docker.io" else "https://" + host
        return ('server = "%s"\n\n[host."http://127.0.0.1:%d"]\n'
                '  capabilities = ["pull", "resolve"]\n' % (upstream, self.port))

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(10)
            self.server = None


def list_images(address, ctr="ctr"):
    r = subprocess.run([ctr, "--address", address, "--namespace", "k8s.io", "images", "ls",
                        "-q"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("ctr images ls failed: " + r.stderr.strip())
    return r.stdout.split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--bin-dir", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--no-ours", action="store_true", help="skip scripts/build-image.sh")
    i = sub.add_parser("import")
    i.add_argument("--address", required=True)
    i.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "build":
        for p in build_all(a.out, a.bin_dir, ours=not a.no_ours, log=print):
            print(p)
    else:
        paths = sorted(os.path.join(a.out, f) for f in os.listdir(a.out) if f.endswith(".tar"))
        import_archives(a.address, paths)
        print("\n".join(list_images(a.address)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
