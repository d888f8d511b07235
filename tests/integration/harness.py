"""Harness for the hostpath-provisioner integration tests.

    with tempfile.TemporaryDirectory() as tmp, ApiServer(tmp) as api:
        api.create("/apis/storage.k8s.io/v1/storageclasses",
                   storage_class("hostpath", "hostpath-provisioner.io"))
        api.create("/api/v1/namespaces/default/persistentvolumeclaims",
                   claim("default", "c1", "hostpath"))
        with Provisioner(api, os.path.join(tmp, "pv")) as prov:
            wait_for(lambda: api.get(PVC_PATH % ("default", "c1"))["status"]["phase"] == "Bound",
                     10, what="claim c1 bound")

ApiServer starts tests/integration/apiserver.py (a local kube-apiserver stand-in, see
README.md) on a free 127.0.0.1 port and talks to it over HTTPS with the generated CA.
Provisioner runs $HP_BINARY against it. Everything is bounded in time; processes are
stopped by pid.
"""

import http.client
import json
import os
import queue
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
from urllib.parse import urlencode, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
APISERVER = os.path.join(HERE, "apiserver.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

PVC_PATH = "/api/v1/namespaces/%s/persistentvolumeclaims/%s"
PVCS_PATH = "/api/v1/namespaces/%s/persistentvolumeclaims"
ALL_PVCS_PATH = "/api/v1/persistentvolumeclaims"
PV_PATH = "/api/v1/persistentvolumes/%s"
PVS_PATH = "/api/v1/persistentvolumes"
SC_PATH = "/apis/storage.k8s.io/v1/storageclasses/%s"
SCS_PATH = "/apis/storage.k8s.io/v1/storageclasses"
EVENTS_PATH = "/api/v1/namespaces/%s/events"
ALL_EVENTS_PATH = "/api/v1/events"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/%s/leases"
NS_PATH = "/api/v1/namespaces/%s"
NSS_PATH = "/api/v1/namespaces"
NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/namespaces/%s/pods"

# The provisioner name of the tests' StorageClasses (the binary's default --provisioner-name).
PROVISIONER = "hostpath-provisioner.io"
# A sanitizer report in a provisioner's stderr (ASan/LSan/UBSan builds).
SANITIZER = r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:"

PATCH_TYPES = {"merge": "application/merge-patch+json",
               "strategic": "application/strategic-merge-patch+json",
               "json": "application/json-patch+json"}


class ApiError(Exception):
    """An HTTP error answer from the API server. body is the decoded Status when JSON."""

    def __init__(self, status, body, method="", path="", headers=None):
        self.status = status
        self.body = body
        self.headers = headers or {}
        msg = body.get("message") if isinstance(body, dict) else body
        super().__init__("%s %s -> %d: %s" % (method, path, status, msg))

    @property
    def reason(self):
        return self.body.get("reason") if isinstance(self.body, dict) else None


class Response:
    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers
        self.raw = raw
        ctype = headers.get("Content-Type", "")
        self.body = raw.decode("utf-8", "replace")
        if "json" in ctype and raw:
            try:
                self.body = json.loads(raw)
            except ValueError:
                pass

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body)


# The provisioner's ownership journal under every volume root (README "Data safety").
JOURNAL_DIR = ".hostpath-provisioner"


def volume_dirs(path):
    """The entries of a volume root, sorted, without the ownership journal ([] when the root
    does not exist)."""
    try:
        return sorted(n for n in os.listdir(path) if n != JOURNAL_DIR)
    except FileNotFoundError:
        return []


def journal_records(root):
    """The ownership records under a volume root: {pv name: {key: value}} (a key that repeats,
    like parent, maps to a list). Values are percent-decoded as the provisioner writes them."""
    from urllib.parse import unquote
    out = {}
    d = os.path.join(root, JOURNAL_DIR, "records")
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for n in names:
        if n.startswith("."):
            continue
        rec = {}
        for line in read_text(os.path.join(d, n)).splitlines():
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, v = line.split("=", 1)
            v = unquote(v)
            if k == "parent":
                rec.setdefault(k, []).append(v)
            else:
                rec[k] = v
        out[n] = rec
    return out


def sanitizer_build(binary):
    """True when the binary links AddressSanitizer (its allocator keeps freed memory in a
    quarantine and its shadow memory counts in RSS, so RSS says little about our own memory)."""
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return b"libasan" in out


def read_text(path):
    """The file's text ("" when it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def stop_process(p, sig=signal.SIGTERM, timeout=10.0):
    """Sends sig to a subprocess.Popen (by pid) unless it has exited, and waits for it at most
    timeout seconds; then kills it with SIGKILL. Returns whether it exited in time."""
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
            return False
    return True


def wait_for(predicate, timeout, interval=0.05, what="condition"):
    """Polls predicate() until it returns a true value (which is returned). ApiError and
    OSError raised by the predicate count as "not yet". Raises TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except (ApiError, OSError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s%s"
                               % (timeout, what, " (last error: %s)" % last if last else ""))
        time.sleep(interval)


class Client:
    """A small JSON client with one keep-alive HTTPS connection per thread."""

    def __init__(self, url, token=None, ca=None, cert=None, key=None,
                 user_agent="hp-test-harness/1.0", timeout=30.0):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca) if ca else \
            ssl._create_unverified_context()
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.user_agent = user_agent
        self.timeout = timeout
        self.local = threading.local()
        self.conns = []
        self.clock = threading.Lock()

    def connect(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def _headers(self, content_type=None, extra=None):
        h = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if content_type:
            h["Content-Type"] = content_type
        h.update(extra or {})
        return h

    @staticmethod
    def url(path, query=None):
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return path + ("?" + urlencode(q) if q else "")

    def request(self, method, path, body=None, query=None, content_type=None, headers=None,
                timeout=None):
        """Sends one request; returns a Response whatever the status. With timeout, it uses
        a fresh connection of its own (never retried)."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            content_type = content_type or "application/json"
        if isinstance(body, str):
            body = body.encode()
        url = self.url(path, query)
        h = self._headers(content_type, headers)
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            reused = conn is not None and timeout is None
            if not reused:
                conn = self.connect(timeout)
                if timeout is None:
                    self.local.conn = conn
                    with self.clock:
                        self.conns.append(conn)
            try:
                conn.request(method, url, body=body, headers=h)
                r = conn.getresponse()
                raw = r.read()
                hdrs = {}
                for k, v in r.getheaders():  # repeated headers (Warning) joined as in HTTP
                    hdrs[k] = hdrs[k] + ", " + v if k in hdrs else v
                resp = Response(r.status, hdrs, raw)
                if timeout is not None or r.will_close:
                    conn.close()
                    if timeout is None:
                        self.local.conn = None
                return resp
            except (http.client.RemoteDisconnected, http.client.CannotSendRequest,
                    BrokenPipeError, ConnectionResetError):
                conn.close()
                self.local.conn = None
                # Only a kept-alive connection that died while idle (a server restart) is
                # retried; a fresh connection's failure (e.g. an injected disconnect) is not.
                if attempt == 1 or not reused:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        """Closes the keep-alive connections of every thread."""
        with self.clock:
            conns, self.conns = self.conns, []
        for c in conns:
            c.close()
        self.local = threading.local()

    def call(self, method, path, body=None, query=None, content_type=None, headers=None):
        r = self.request(method, path, body, query, content_type, headers)
        if r.status >= 400:
            raise ApiError(r.status, r.body, method, path, r.headers)
        return r.body

    def get(self, path, **query):
        return self.call("GET", path, query=query)

    def list(self, path, **query):
        return self.call("GET", path, query=query)

    def create(self, path, obj, **query):
        return self.call("POST", path, obj, query=query)

    def update(self, path, obj, **query):
        return self.call("PUT", path, obj, query=query)

    def patch(self, path, patch, type="merge", **query):
        return self.call("PATCH", path, patch, query=query, content_type=PATCH_TYPES[type])

    def delete(self, path, body=None, **query):
        return self.call("DELETE", path, body, query=query)

    def watch(self, path, timeout=30.0, **query):
        query = dict(query)
        query.setdefault("watch", "1")
        return WatchStream(self, path, query, timeout)


class WatchStream:
    """A watch held open by a reader thread. next() returns the next event (a dict; raw
    lines that are not JSON come as {"raw": line}) or None when nothing came in time."""

    EOF = object()

    def __init__(self, client, path, query, timeout):
        self.conn = client.connect(timeout)
        self.conn.request("GET", client.url(path, query), headers=client._headers())
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.q = queue.Queue()
        self.closed = False
        self.eof = False
        if self.status != 200:
            raw = self.resp.read()
            try:
                self.error = json.loads(raw)
            except ValueError:
                self.error = raw
            self.conn.close()
            self.eof = True
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                try:
                    self.q.put(json.loads(line))
                except ValueError:
                    self.q.put({"raw": line})
        except (OSError, ValueError, AttributeError, http.client.HTTPException) as e:
            # AttributeError: http.client's chunk reader after close() from another thread.
            self.q.put({"error": repr(e)})
        finally:
            self.q.put(self.EOF)

    def next(self, timeout=5.0):
        if self.eof:
            return None
        try:
            item = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is self.EOF:
            self.eof = True
            return None
        return item

    def collect(self, n, timeout=5.0, types=None):
        """Up to n events (of the given types, others skipped) within timeout seconds."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ev = self.next(left)
            if ev is None:
                if self.eof:
                    break
                continue
            if types is None or ev.get("type") in types:
                out.append(ev)
        return out

    def wait_eof(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self.next(max(0.01, deadline - time.monotonic()))
        return self.eof

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.conn.sock and self.conn.sock.shutdown(2)
            except OSError:
                pass
            self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


class ClientCalls:
    """The API calls the tests use, delegated to self.client (a Client): the stand-in's
    ApiServer and the real cluster's admin client share them."""

    def request(self, *a, **kw):
        return self.client.request(*a, **kw)

    def get(self, path, **query):
        return self.client.get(path, **query)

    def list(self, path, **query):
        return self.client.list(path, **query)

    def create(self, path, obj, **query):
        return self.client.create(path, obj, **query)

    def update(self, path, obj, **query):
        return self.client.update(path, obj, **query)

    def patch(self, path, patch, type="merge", **query):
        return self.client.patch(path, patch, type, **query)

    def delete(self, path, body=None, **query):
        return self.client.delete(path, body, **query)

    def watch(self, path, timeout=30.0, **query):
        return self.client.watch(path, timeout, **query)

    def exists(self, path):
        r = self.client.request("GET", path)
        if r.status == 404:
            return False
        if r.status >= 400:
            raise ApiError(r.status, r.body, "GET", path)
        return True


class ApiServer(ClientCalls):
    """Runs apiserver.py as a subprocess. Use as a context manager."""

    def __init__(self, tmpdir, binder=True, protection=True, binder_events=True, port=0,
                 token=None, client_ca=True, history=None, bookmark_interval=None,
                 require_namespaces=False, managed_fields=True, watch_list=True,
                 authorization=None, apf=True, extra_args=(), name="apiserver",
                 persist=False):
        self.state_dir = os.path.join(tmpdir, name)
        self.persist = persist  # state.json written on SIGTERM, loaded at start
        self.binder, self.protection, self.binder_events = binder, protection, binder_events
        self.port = port
        self.token = token
        self.client_ca = client_ca
        self.history = history
        self.bookmark_interval = bookmark_interval
        self.require_namespaces = require_namespaces
        self.managed_fields = managed_fields
        self.watch_list = watch_list
        self.authorization = authorization  # None (AlwaysAllow) or "RBAC"
        self.apf = apf  # API Priority and Fairness response headers
        self.extra_args = list(extra_args)
        self.proc = None
        self.client = None

    def _onoff(self, v):
        return "on" if v else "off"

    def start(self, timeout=15.0):
        os.makedirs(self.state_dir, exist_ok=True)
        ready = os.path.join(self.state_dir, "ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        cmd = [PYTHON, APISERVER, "--state-dir", self.state_dir, "--port", str(self.port),
               "--binder", self._onoff(self.binder),
               "--protection", self._onoff(self.protection),
               "--binder-events", self._onoff(self.binder_events),
               "--require-namespaces", self._onoff(self.require_namespaces),
               "--managed-fields", self._onoff(self.managed_fields),
               "--watch-list", self._onoff(self.watch_list), "--apf", self._onoff(self.apf)]
        if self.token:
            cmd += ["--token", self.token]
        if self.client_ca:
            cmd += ["--client-ca", "auto"]
        if self.history is not None:
            cmd += ["--history", str(self.history)]
        if self.bookmark_interval is not None:
            cmd += ["--bookmark-interval", str(self.bookmark_interval)]
        if self.authorization:
            cmd += ["--authorization", self.authorization]
        if self.persist:
            cmd += ["--persist", "on"]
        cmd += self.extra_args
        out = open(os.path.join(self.state_dir, "stdout.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        out.close()
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("apiserver.py exited with %s:\n%s"
                                   % (self.proc.returncode, self.output()))
            try:
                with open(ready) as f:
                    info = json.load(f)
                if info.get("pid") == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("apiserver.py not ready within %.0fs:\n%s"
                               % (timeout, self.output()))
        self.url = info["url"]
        self.port = info["port"]
        self.token = info["token"]
        self.pid = info["pid"]
        self.kubeconfig = info["kubeconfig"]
        self.ca = info["ca"]
        self.client = Client(self.url, self.token, self.ca)
        return self

    def output(self):
        text = ""
        for n in ("stdout.log", "apiserver.log"):
            try:
                with open(os.path.join(self.state_dir, n), errors="replace") as f:
                    text += f.read()[-4000:]
            except OSError:
                pass
        return text

    def log_text(self):
        return read_text(os.path.join(self.state_dir, "apiserver.log"))

    def stop(self, timeout=10.0):
        """SIGTERM by pid, bounded wait, then SIGKILL. Returns the exit code."""
        if self.client is not None:
            self.client.close()
        p = self.proc
        if p is None:
            return None
        stop_process(p, timeout=timeout)
        self.proc = None
        return p.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def restart(self, timeout=15.0):
        """Stops (SIGTERM) and starts again on the same port with the same certificates and
        token. The new server starts empty (state is in memory), unless persist=True: then
        it has every object and the resourceVersion counter of the old one (an empty watch
        history: resuming an older watch gives 410)."""
        self.stop()
        return self.start(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    # -- admin -----------------------------------------------------------------------------

    def admin(self, method, what, body=None, **query):
        return self.client.call(method, "/admin/" + what, body, query=query or None)

    def state(self):
        return self.admin("GET", "state")

    def open_watches(self, path_prefix=""):
        return [w for w in self.admin("GET", "watches")["watches"]
                if w["path"].startswith(path_prefix)]

    def close_watches(self, path_prefix="", abrupt=False, user_agent=""):
        """Ends the open watches whose path starts with path_prefix and whose client's
        User-Agent starts with user_agent; returns how many."""
        return self.admin("POST", "close-watches",
                          {"path_prefix": path_prefix, "abrupt": abrupt,
                           "user_agent": user_agent})["closed"]

    def fail_next(self, method, prefix, status=None, count=1, retry_after=None, delay_ms=None,
                  query_contains="", action=None, body=None, message=None, probability=None,
                  user_agent=None):
        """Fails (status), delays (delay_ms) or drops (action="disconnect") the next `count`
        (<= 0: every one until clear_faults) requests whose method (or "*", or a comma-separated
        set like "POST,PUT") and path prefix match, and whose User-Agent starts with user_agent;
        with probability, only that fraction of them (drawn per request). 429 answers in plain
        text like API Priority and Fairness does unless body="status"."""
        d = {"method": method, "path_prefix": prefix, "count": count,
             "query_contains": query_contains}
        for k, v in (("status", status), ("retry_after", retry_after), ("delay_ms", delay_ms),
                     ("action", action), ("body", body), ("message", message),
                     ("probability", probability), ("user_agent", user_agent)):
            if v is not None:
                d[k] = v
        return self.admin("POST", "faults", d)

    def clear_faults(self):
        return self.admin("DELETE", "faults")

    def compact(self):
        """Drops all watch history: any older resourceVersion becomes 410 Expired."""
        return self.admin("POST", "compact")["resourceVersion"]

    def malformed(self, path_prefix="", line=None, repeat=None, no_newline=False):
        d = {"path_prefix": path_prefix, "no_newline": no_newline}
        if line is not None:
            d["line"] = line
        if repeat is not None:
            d["repeat"] = repeat
        return self.admin("POST", "malformed", d)["sent"]

    def requests(self, since=0, method=None, path_prefix=None, watch=None):
        out = self.admin("GET", "requests", since=since)["requests"]
        return [r for r in out if (method is None or r["method"] == method) and
                (path_prefix is None or r["path"].startswith(path_prefix)) and
                (watch is None or r["watch"] == watch)]

    def clear_requests(self):
        return self.admin("DELETE", "requests")

    def set_binder(self, on, protection=None, events=None):
        d = {"binder": bool(on)}
        if protection is not None:
            d["protection"] = bool(protection)
        if events is not None:
            d["binder_events"] = bool(events)
        return self.admin("POST", "controllers", d)

    def set_tokens(self, tokens):
        """Replaces the accepted API tokens (the admin token keeps working for /admin/)."""
        return self.admin("POST", "tokens", {"tokens": list(tokens)})

    def set_bookmark_interval(self, seconds):
        return self.admin("POST", "config", {"bookmark_interval": seconds})

    def set_apf(self, on):
        """Turns the API Priority and Fairness response headers on or off; returns the config
        ({"apf", "apf_uids": {"flowschemas": {name: uid}, "prioritylevelconfigurations": ...}})."""
        return self.admin("POST", "config", {"apf": bool(on)})

    def wait_idle(self, timeout=10.0):
        """Waits until the controller thread has nothing queued."""
        return wait_for(lambda: self.state()["controllers_idle"], timeout,
                        what="apiserver controllers idle")

    # -- credentials -----------------------------------------------------------------------

    def mint_client_cert(self, cn="test-user", orgs=(), name=None):
        """A client certificate signed by the server's CA. Returns (cert, key) paths."""
        sys.path.insert(0, HERE)
        from standin import certs
        return certs.sign_cert(self.state_dir, name or "client-" + cn, cn, "clientAuth",
                               orgs=orgs)

    def write_kubeconfig(self, path, token=None, cert=None, key=None, url=None,
                         namespace="default"):
        """Writes a kubeconfig for this server with the given credentials."""
        sys.path.insert(0, HERE)
        from standin import certs
        certs.write_kubeconfig(path, url or self.url, self.ca, token=token, cert=cert,
                               key=key, namespace=namespace)
        return path


# ---------------------------------------------------------------------------------------
# Object builders
# ---------------------------------------------------------------------------------------

QUANTITY_UNITS = {None: 1, "Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4,
                  "Pi": 1024 ** 5, "Ei": 1024 ** 6, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
                  "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}


def quantity_bytes(v):
    """A whole quantity as the API writes it back, in bytes: canonical form, so 59140096000
    bytes come back as "59140096k" and 1 GiB as "1Gi"."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", v)
    assert m, v
    return int(m.group(1)) * QUANTITY_UNITS[m.group(2)]


def storage_class(name, provisioner, reclaim="Delete", binding="Immediate", parameters=None,
                  mount_options=None, default=False, allow_expansion=None, labels=None):
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
          "metadata": {"name": name}, "provisioner": provisioner,
          "reclaimPolicy": reclaim, "volumeBindingMode": binding}
    if parameters is not None:
        sc["parameters"] = dict(parameters)
    if mount_options is not None:
        sc["mountOptions"] = list(mount_options)
    if default:
        sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if allow_expansion is not None:
        sc["allowVolumeExpansion"] = allow_expansion
    if labels:
        sc["metadata"]["labels"] = dict(labels)
    return sc


# Size for tests that make many claims: each claim's size is reserved on the disk, and fifty
# 1Gi claims do not fit every machine's /tmp (a tmpfs of half the memory, a small disk).
SMALL = "1Mi"


def claim(ns, name, cls, size="1Gi", modes=("ReadWriteOnce",), annotations=None, labels=None,
          volume_mode=None, selected_node=None, volume_name=None):
    """A PersistentVolumeClaim. cls=None leaves storageClassName unset (default class)."""
    c = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": name, "namespace": ns},
         "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}}
    if cls is not None:
        c["spec"]["storageClassName"] = cls
    ann = dict(annotations or {})
    if selected_node:
        ann["volume.kubernetes.io/selected-node"] = selected_node
    if ann:
        c["metadata"]["annotations"] = ann
    if labels:
        c["metadata"]["labels"] = dict(labels)
    if volume_mode:
        c["spec"]["volumeMode"] = volume_mode
    if volume_name:
        c["spec"]["volumeName"] = volume_name
    return c


def volume(name, size="1Gi", path="/tmp/pv", cls="", claim_ref=None, reclaim="Retain",
           modes=("ReadWriteOnce",), node=None, annotations=None, labels=None,
           host_path_type=None):
    """A hostPath PersistentVolume. claim_ref is a claim object (its uid is used) or a
    (namespace, name) tuple."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": name},
          "spec": {"capacity": {"storage": size}, "accessModes": list(modes),
                   "persistentVolumeReclaimPolicy": reclaim, "hostPath": {"path": path}}}
    if host_path_type is not None:
        pv["spec"]["hostPath"]["type"] = host_path_type
    if cls:
        pv["spec"]["storageClassName"] = cls
    if isinstance(claim_ref, dict):
        m = claim_ref["metadata"]
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": m["namespace"], "name": m["name"],
                                  "uid": m["uid"]}
    elif claim_ref:
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                                  "namespace": claim_ref[0], "name": claim_ref[1]}
    if node:
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
    if annotations:
        pv["metadata"]["annotations"] = dict(annotations)
    if labels:
        pv["metadata"]["labels"] = dict(labels)
    return pv


def namespace(name, labels=None):
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    if labels:
        ns["metadata"]["labels"] = dict(labels)
    return ns


def node(name, labels=None):
    lb = {"kubernetes.io/hostname": name}
    lb.update(labels or {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lb},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(ns, name, claims=(), node_name=None, image="busybox"):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
         "spec": {"containers": [{"name": "c", "image": image}],
                  "volumes": [{"name": "v%d" % i, "persistentVolumeClaim": {"claimName": c}}
                              for i, c in enumerate(claims)]}}
    if node_name:
        p["spec"]["nodeName"] = node_name
    return p


# ---------------------------------------------------------------------------------------
# The provisioner under test
# ---------------------------------------------------------------------------------------

def binary_path():
    return os.environ.get("HP_BINARY") or os.path.join(
        os.environ.get("HP_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE))), "build",
        "hostpath-provisioner")


def require_binary():
    """Raises unittest.SkipTest when $HP_BINARY is not an executable file."""
    b = binary_path()
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        raise unittest.SkipTest("provisioner binary not found: %s" % b)
    return b


class Provisioner:
    """Runs the provisioner binary against an ApiServer:
    BINARY --kubeconfig K --pv-dir D [--metrics-address 127.0.0.1:0] ARGS...
    stderr and stdout go to files in pv_dir's parent; `log` returns stderr so far."""

    _n = 0

    def __init__(self, server, pv_dir, *args, env=None, binary=None,
                 metrics_address="127.0.0.1:0", kubeconfig=None, start=True, name=None):
        self.server = server
        self.pv_dir = pv_dir
        self.args = list(args)
        self.env = env
        self.binary = binary or binary_path()
        self.metrics_address = metrics_address
        self.kubeconfig = kubeconfig
        Provisioner._n += 1
        self.name = name or "provisioner-%d" % Provisioner._n
        base = os.path.dirname(os.path.abspath(pv_dir.rstrip("/")))
        self.log_path = os.path.join(base, self.name + ".stderr")
        self.out_path = os.path.join(base, self.name + ".stdout")
        self.proc = None
        self.returncode = None
        self.autostart = start

    def command(self):
        cmd = [self.binary, "--kubeconfig", self.kubeconfig or self.server.kubeconfig,
               "--pv-dir", self.pv_dir]
        if self.metrics_address is not None and \
                not any(a.startswith("--metrics-address") for a in self.args):
            cmd += ["--metrics-address", self.metrics_address]
        return cmd + self.args

    def environment(self):
        """The process environment: this one without KUBECONFIG, plus `env`."""
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        env.update(self.env or {})
        return env

    def start(self):
        os.makedirs(self.pv_dir, exist_ok=True)
        err = open(self.log_path, "ab")
        out = open(self.out_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, env=self.environment())
        err.close()
        out.close()
        self.returncode = None
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def log(self):
        return read_text(self.log_path)

    @property
    def stdout(self):
        return read_text(self.out_path)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_log(self, pattern, timeout=10.0):
        """Waits for a regular expression to appear in stderr; returns the match."""
        rx = re.compile(pattern)
        return wait_for(lambda: rx.search(self.log), timeout, what="log line /%s/" % pattern)

    def metrics_url(self, timeout=10.0):
        """http://127.0.0.1:PORT, parsed from the log line that reports the listening
        address (any '127.0.0.1:<port>' after the word 'listen')."""
        m = wait_for(lambda: re.search(r"listen\w*\b.*?(127\.0\.0\.1:\d+)", self.log), timeout,
                     what="metrics listening address in the log")
        return "http://" + m.group(1)

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Sends sig by pid and waits (bounded). Returns the exit code (negative for a
        signal). On timeout it kills with SIGKILL and raises TimeoutError."""
        p = self.proc
        if p is None:
            return self.returncode
        exited = stop_process(p, sig, timeout)
        self.proc = None
        self.returncode = p.returncode
        if not exited:
            raise TimeoutError("provisioner pid %d did not exit within %.0fs of signal %d"
                               % (p.pid, timeout, sig))
        return self.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc is not None:
            self.returncode = self.proc.returncode
        self.proc = None
        return self.returncode

    def __enter__(self):
        if self.autostart:
            self.start()
        return self

    def __exit__(self, *a):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except TimeoutError:
                pass
        elif self.proc is not None:
            self.returncode = self.proc.returncode


# ---------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """A parsed Prometheus text exposition: `types` {family: type}, `samples`
    {(name, frozenset(labels)): value}. An unparsable line or a repeated sample raises
    AssertionError."""

    def __init__(self, text):
        self.text = text
        self.types = {}
        self.samples = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, typ = line.split(" ", 3)
                self.types[name] = typ
            elif line and not line.startswith("#"):
                m = _SAMPLE.match(line)
                if not m:
                    raise AssertionError("unparsable metrics line: %r" % line)
                key = (m.group(1), frozenset(_LABEL.findall(m.group(2) or "")))
                if key in self.samples:
                    raise AssertionError("duplicate sample: %r" % line)
                self.samples[key] = float(m.group(3))

    def get(self, metric, /, **labels):
        """The sample with exactly these labels (0 when absent)."""
        return self.samples.get((metric, frozenset(labels.items())), 0.0)

    def sum(self, metric, /, **labels):
        """Sum over every sample of the metric whose labels include these."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == metric and want <= ls)


def metrics_text(prov, timeout=10.0):
    """The provisioner's /metrics page."""
    with urllib.request.urlopen(prov.metrics_url() + "/metrics", timeout=timeout) as r:
        return r.read().decode()


def scrape(prov, timeout=5.0):
    """The provisioner's /metrics, parsed (Metrics)."""
    return Metrics(metrics_text(prov, timeout))


def metric(prov, family, label_filter=""):
    """Sum of a metric family's samples whose label set contains label_filter (text, e.g.
    'errno="ENOSPC"')."""
    total = 0.0
    for line in metrics_text(prov).splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == family and label_filter in (m.group(2) or ""):
            total += float(m.group(3))
    return total


# ---------------------------------------------------------------------------------------
# The test case base
# ---------------------------------------------------------------------------------------

def phase(api, name, ns="default"):
    """A claim's status.phase (None when it has none)."""
    return (api.get(PVC_PATH % (ns, name)).get("status") or {}).get("phase")


class ProvisionerTestCase(unittest.TestCase):
    """A fresh API server (self.api) in a fresh temporary directory (self.tmp) per test, and
    the provisioner(s) under test. Per-file differences are class attributes:

    - tmp_prefix: the temporary directory's prefix; api_kw: ApiServer keyword arguments;
    - fast: the flags every provisioner() gets before its own arguments;
    - make_pv_dir: create self.pv_dir (<tmp>/volumes) before the test.

    Two ways to run the binary:
    - provisioner(*args): one owned provisioner on self.pv_dir (the latest is self.prov);
      at cleanup it is stopped with SIGTERM and must exit 0.
    - spawn(*args, name=): replicas in self.procs, each with its own <tmp>/pv-<name>; stopped
      at tearDown (bounded), none may have logged a sanitizer report, and their logs are
      printed when the test failed.
    """

    tmp_prefix = "hp-test-"
    api_kw = {}
    fast = ()
    make_pv_dir = False
    stop_timeout = 30.0
    _logs = ""

    def setUp(self):
        require_binary()
        self._tmp = tempfile.TemporaryDirectory(prefix=self.tmp_prefix)
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        self.api = ApiServer(self.tmp, **self.api_kw).start()
        self.addCleanup(self.api.stop)
        self.pv_dir = os.path.join(self.tmp, "volumes")
        if self.make_pv_dir:
            os.makedirs(self.pv_dir)
        self.prov = None
        self.procs = []
        self.mounts = []
        self.addCleanup(self.unmount_all)

    def tearDown(self):
        for p in self.procs:
            if p.alive():
                try:
                    p.stop(timeout=10)
                except (TimeoutError, AssertionError):  # killed by pid already
                    pass
        seen, logs = set(), []
        for p in self.procs:  # a replica restarted under its name shares its log file
            if p.log_path not in seen:
                seen.add(p.log_path)
                logs.append("\n--- %s (exit %s) ---\n%s" % (p.name, p.returncode,
                                                           p.log[-6000:]))
        self._logs = "".join(logs)
        for p in self.procs:
            self.assertNotRegex(p.log, SANITIZER, "sanitizer report in %s's log" % p.name)

    def run(self, result=None):
        result = result if result is not None else self.defaultTestResult()
        before = len(result.failures) + len(result.errors)
        super().run(result)
        if len(result.failures) + len(result.errors) > before and self._logs:
            sys.stderr.write(self._logs + "\n")
        return result

    # -- the provisioner -------------------------------------------------------------------

    def provisioner(self, *args, pv_dir=None):
        p = Provisioner(self.api, pv_dir or self.pv_dir, *(tuple(self.fast) + args))
        p.start()
        self.prov = p
        self.addCleanup(self._stop, p)
        return p

    def _stop(self, p):
        if p.alive():
            code = p.stop(timeout=self.stop_timeout)
            self.assertEqual(code, 0, "provisioner exit code; log:\n" + p.log[-3000:])

    def spawn(self, *args, name=None, pv_dir=None, cls=None, **kw):
        """Starts a replica (a Provisioner, or cls) named `name` (default prov-N) on pv_dir
        (default <tmp>/pv-<name>) and adds it to self.procs."""
        name = name or "prov-%d" % (len(self.procs) + 1)
        p = (cls or Provisioner)(self.api, pv_dir or os.path.join(self.tmp, "pv-" + name),
                                 *args, name=name, **kw)
        p.start()
        self.procs.append(p)
        return p

    # -- waiting ---------------------------------------------------------------------------

    def failure_context(self):
        """What a failed wait() reports besides its own message."""
        return "--- provisioner log ---\n%s\n--- apiserver log ---\n%s" % (
            self.prov.log[-4000:] if self.prov else "", self.api.output())

    def wait(self, pred, timeout, what, interval=0.05):
        """wait_for that fails the test with failure_context() attached."""
        try:
            return wait_for(pred, timeout, interval=interval, what=what)
        except TimeoutError as e:
            self.fail("%s\n%s" % (e, self.failure_context()))

    def wait_bound(self, claim, ns="default", timeout=30):
        """Waits until a claim (a name, a claim object, or a list of claim objects) is Bound;
        returns the (last) bound claim."""
        if isinstance(claim, (list, tuple)):
            got = None
            for c in claim:
                got = self.wait_bound(c, ns, timeout)
            return got
        if isinstance(claim, dict):
            ns, name = claim["metadata"].get("namespace", ns), claim["metadata"]["name"]
        else:
            name = claim

        def bound():
            c = self.api.get(PVC_PATH % (ns, name))
            return c if (c.get("status") or {}).get("phase") == "Bound" else None
        return self.wait(bound, timeout, "claim %s/%s bound" % (ns, name))

    def bound_names(self, ns="default"):
        return {c["metadata"]["name"] for c in self.api.list(PVCS_PATH % ns)["items"]
                if (c.get("status") or {}).get("phase") == "Bound"}

    # -- objects ---------------------------------------------------------------------------

    def add_class(self, name="hostpath", **kw):
        kw.setdefault("provisioner", PROVISIONER)
        return self.api.create(SCS_PATH, storage_class(name, **kw))

    def add_claim(self, name, cls="hostpath", ns="default", **kw):
        return self.api.create(PVCS_PATH % ns, claim(ns, name, cls, **kw))

    def make_claims(self, prefix, n, cls="hostpath", ns="default", **kw):
        return [self.add_claim("%s%d" % (prefix, i), cls, ns, **kw) for i in range(n)]

    def pv(self, name):
        return self.api.get(PV_PATH % name)

    def gone(self, path):
        return not self.api.exists(path)

    def events_for(self, name, reason=None, kind=None):
        """The provisioner's events (any namespace) about the object `name`."""
        items = self.api.list(ALL_EVENTS_PATH)["items"]
        return [e for e in items if e["involvedObject"].get("name") == name and
                (kind is None or e["involvedObject"].get("kind") == kind) and
                (reason is None or e["reason"] == reason) and
                (e.get("source") or {}).get("component") == PROVISIONER]

    def wait_event(self, name, reason, kind=None, timeout=20):
        return self.wait(lambda: self.events_for(name, reason, kind), timeout,
                         "event %s on %s" % (reason, name))[0]

    # -- mounts ----------------------------------------------------------------------------

    def mount_tmpfs(self, path, opts):
        """Mounts a tmpfs on path (made if missing), unmounted at cleanup (lazily when busy).
        Returns the mount command's CompletedProcess: check returncode."""
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            self.mounts.append(path)
        return r

    def unmount_all(self):
        for m in reversed(self.mounts):
            if subprocess.run(["umount", m], capture_output=True, timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
        self.mounts = []


def skip_module(reason):
    """Prints a loud skip message and exits with meson's skip code (77)."""
    sys.stdout.write("\n%s\nSKIPPED: %s\n%s\n" % ("=" * 70, reason, "=" * 70))
    sys.stdout.flush()
    sys.exit(77)
