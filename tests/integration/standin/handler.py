"""The HTTP request handler: request parsing, APF response headers, bodies, dispatch
(authentication, faults, routing), discovery and OpenAPI routes. The verbs, watches, auth
and admin are mixins from resources, watch, auth and admin.
"""

import gzip
import json
import socket
import ssl
import time
import traceback
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, unquote, urlsplit

from .admin import AdminMixin
from .auth import AuthMixin
from .common import dumps, IDLE_TIMEOUT, K8S_VERSION, log, new_uid, REQUEST
from .discovery import api_group, _gv_list, OPENAPI_DOCS, OPENAPI_ROOT, resource_list
from .errors import (ApiError, err_bad_request, err_internal, err_method_not_allowed,
                     err_path_not_found)
from .kinds import GROUPS, KINDS
from .resources import ResourceMixin
from .watch import WatchMixin

MAX_BODY = 3 * 1024 * 1024
GZIP_THRESHOLD = 128 * 1024


class Headers:
    """Case-insensitive request headers (what the handler needs of email.message)."""

    def __init__(self):
        self.d = {}
        self.order = []

    def add(self, k, v):
        lk = k.lower()
        if lk in self.d:
            self.d[lk] = self.d[lk] + ", " + v
        else:
            self.d[lk] = v
            self.order.append(k)

    def get(self, k, default=None):
        return self.d.get(k.lower(), default)

    def __getitem__(self, k):
        return self.d.get(k.lower())

    def __contains__(self, k):
        return k.lower() in self.d

    def items(self):
        return [(k, self.d[k.lower()]) for k in self.order]


class Handler(AuthMixin, ResourceMixin, WatchMixin, AdminMixin, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # set by main

    def parse_request(self):
        """A leaner replacement for BaseHTTPRequestHandler.parse_request (whose use of
        email.parser costs more than the rest of a request)."""
        self.command = None
        self.request_version = "HTTP/0.9"
        self.close_connection = True
        line = self.raw_requestline.decode("iso-8859-1").rstrip("\r\n")
        self.requestline = line
        words = line.split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            self.send_error(400, "Bad request syntax (%r)" % line)
            return False
        self.command, self.path, self.request_version = words
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.send_error(505, "Invalid HTTP version (%s)" % self.request_version)
            return False
        hdrs = Headers()
        for _ in range(200):
            raw = self.rfile.readline(65537)
            if len(raw) > 65536:
                self.send_error(431, "Line too long")
                return False
            if raw in (b"\r\n", b"\n", b""):
                break
            k, sep, v = raw.decode("iso-8859-1").partition(":")
            if not sep or not k.strip():
                self.send_error(400, "Bad header line")
                return False
            hdrs.add(k.strip(), v.strip())
        else:
            self.send_error(431, "Too many headers")
            return False
        self.headers = hdrs
        conn = (hdrs.get("Connection") or "").lower()
        if self.request_version == "HTTP/1.1":
            self.close_connection = conn == "close"
        else:
            self.close_connection = conn != "keep-alive"
        if (hdrs.get("Expect") or "").lower() == "100-continue" and \
                self.request_version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def setup(self):
        super().setup()
        self.connection.settimeout(IDLE_TIMEOUT)

    def log_message(self, fmt, *args):
        if self.state.opts.verbose:
            log("http: " + (fmt % args))

    def send_response(self, code, message=None):
        if not getattr(self, "_logged", True) and not self.path.startswith("/admin/"):
            self._logged = True
            u = urlsplit(self.path)
            self.state.log_request({
                "time": self._t0, "method": self.command, "path": u.path, "query": u.query,
                "status": code, "user_agent": self.headers.get("User-Agent", ""),
                "content_type": self.headers.get("Content-Type", ""),
                "warnings": list(getattr(REQUEST, "warnings", None) or ()),
                "user": getattr(self, "_user", None), "watch": getattr(self, "_watch", False),
                "duration_ms": round((time.time() - self._t0) * 1000, 3)})
        self._responded = True
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())
        self.send_apf_headers()

    def send_apf_headers(self):
        """What the WithPriorityAndFairness filter adds to every request it classifies (all but
        those refused by authentication, which runs before it): the matched FlowSchema's and
        PriorityLevelConfiguration's UIDs, under the names Go's canonical header form gives
        them. The classification is the mandatory objects' (health probes and system:masters
        are exempt; service accounts are workload-low; everybody else global-default)."""
        st = self.state
        if not st.apf or self.path.startswith("/admin/"):
            return
        path = urlsplit(self.path).path
        if path in ("/healthz", "/livez", "/readyz") or \
                path.startswith(("/healthz/", "/livez/", "/readyz/")):
            fs, pl = "probes", "exempt"
        elif path == "/version":
            fs, pl = "global-default", "global-default"
        elif getattr(self, "_user", None) is None:
            return
        elif "system:masters" in (getattr(self, "_groups", None) or ()):
            fs, pl = "exempt", "exempt"
        elif self._user.startswith("system:serviceaccount:"):
            fs, pl = "service-accounts", "workload-low"
        else:
            fs, pl = "global-default", "global-default"
        self.send_header("X-Kubernetes-Pf-Flowschema-Uid", st.apf_uids["flowschemas"][fs])
        self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid",
                         st.apf_uids["prioritylevelconfigurations"][pl])

    # -- plumbing ----------------------------------------------------------------------------

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = b""
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline(1024)
                if len(out) > MAX_BODY:
                    raise ApiError(413, "RequestEntityTooLarge",
                                   "Request entity too large: limit is 3145728")
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge",
                           "Request entity too large: limit is 3145728")
        return self.rfile.read(n) if n > 0 else b""

    def send_body(self, code, body, ctype="application/json", headers=None):
        if self._reply_delay_ms:  # an injected slow reply (admin.py, action delay_reply)
            time.sleep(self._reply_delay_ms / 1000.0)
            self._reply_delay_ms = 0
        if isinstance(body, str):
            body = body.encode("utf-8")
        gz = False
        if len(body) >= GZIP_THRESHOLD and self.command == "GET" and \
                "gzip" in (self.headers.get("Accept-Encoding") or "").lower():
            # APIResponseCompression: large responses are gzipped at level 1.
            body = gzip.compress(body, compresslevel=1)
            gz = True
        self.send_response(code)
        self.send_header("Audit-Id", new_uid())
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        for w in getattr(REQUEST, "warnings", None) or ():
            self.send_header("Warning", '299 - "%s"' % w.replace('"', '\\"'))
        if gz:
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        # Headers and body in one write: with separate small writes, Nagle's algorithm and
        # the peer's delayed ACK would stall every response by ~40 ms.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def send_error_status(self, e):
        if e.text is not None:
            self.send_body(e.code, e.text, "text/plain; charset=utf-8", e.headers)
        else:
            self.send_body(e.code, dumps(e.status()), headers=e.headers)

    def dispatch(self, method):
        self._t0 = time.time()
        self._logged = False
        self._responded = False
        self._reply_delay_ms = 0
        self._watch = False
        self._user = None
        try:
            body = self.read_body()
        except ApiError as e:
            self.send_error_status(e)
            return
        except (OSError, ValueError):
            self.close_connection = True
            return
        u = urlsplit(self.path)
        path = u.path
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        REQUEST.warnings = []
        REQUEST.field_validation = q.get("fieldValidation") or "Warn"
        try:
            if REQUEST.field_validation not in ("Ignore", "Warn", "Strict"):
                raise err_bad_request('fieldValidation parameter unsupported: "%s". Must be one '
                                      'of "Ignore", "Warn", or "Strict"'
                                      % REQUEST.field_validation)
            if path.startswith("/admin/"):
                self.handle_admin(method, path, q, body)
                return
            if path in ("/healthz", "/livez", "/readyz", "/version") or \
                    path.startswith(("/healthz/", "/livez/", "/readyz/")):
                if self.handle_public(path):
                    return
            self._user = self.authenticate()
            if self._user is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            self.authorize(method, path, q)
            f = self.state.take_fault(method, path, u.query,
                                      self.headers.get("User-Agent", "") or "")
            if f is not None and self.apply_fault(f):
                return
            self.route(method, path, q, body)
        except ApiError as e:
            if self._responded:  # e.g. inside a watch stream: nothing sane left to send
                self.close_connection = True
            else:
                self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, socket.timeout):
            self.close_connection = True
        except Exception:
            log("error: %s %s\n%s" % (method, self.path, traceback.format_exc()))
            if self._responded:
                self.close_connection = True
                return
            try:
                self.send_error_status(err_internal("unexpected server error"))
            except OSError:
                self.close_connection = True

    def handle_public(self, path):
        if path == "/version":
            self.send_body(200, json.dumps(K8S_VERSION, indent=2))
        else:
            self.send_body(200, "ok", "text/plain; charset=utf-8",
                           {"X-Content-Type-Options": "nosniff"})
        return True

    # -- routing -----------------------------------------------------------------------------

    def route(self, method, path, q, body):
        segs = [unquote(s) for s in path.split("/") if s]
        if not segs:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version",
                     "/openapi/v3"] + ["/apis/%s" % g for g in GROUPS] + \
                ["/apis/%s/%s" % (g, v) for g in GROUPS for v in GROUPS[g]]
            self.send_body(200, json.dumps({"paths": sorted(paths)}, indent=2))
            return
        if segs[0] == "openapi":
            return self.route_openapi(segs)
        if segs[0] == "api":
            if len(segs) == 1:
                if method != "GET":
                    raise err_method_not_allowed()
                self.send_body(200, dumps({"kind": "APIVersions", "versions": ["v1"],
                                           "serverAddressByClientCIDRs": [{
                                               "clientCIDR": "0.0.0.0/0",
                                               "serverAddress": "127.0.0.1:%d"
                                               % self.state.port}]}))
                return
            group, version, rest = "", segs[1], segs[2:]
        elif segs[0] == "apis":
            if len(segs) == 1:
                self.send_body(200, dumps({"kind": "APIGroupList", "apiVersion": "v1",
                                           "groups": [api_group(g) for g in GROUPS]}))
                return
            if segs[1] not in GROUPS:
                raise err_path_not_found()
            if len(segs) == 2:
                d = {"kind": "APIGroup", "apiVersion": "v1"}
                d.update(api_group(segs[1]))
                self.send_body(200, dumps(d))
                return
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            self.send_body(404, "404 page not found\n", "text/plain; charset=utf-8")
            return
        if (group, version) not in _gv_list():
            raise err_path_not_found()
        if not rest:
            if method != "GET":
                raise err_method_not_allowed()
            self.send_body(200, dumps(resource_list(group, version)))
            return
        watch_path = False
        if rest[0] == "watch":
            watch_path = True
            rest = rest[1:]
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces" and \
                (group, version, rest[2]) in KINDS and KINDS[(group, version, rest[2])].namespaced:
            ns = rest[1]
            rest = rest[2:]
        kind = KINDS.get((group, version, rest[0])) if rest else None
        if kind is None or len(rest) > 3:
            raise err_path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (kind.namespaced and ns is None and name is not None) or \
                (not kind.namespaced and ns is not None):
            raise err_path_not_found()
        if sub is not None and not ((sub == "status" and kind.has_status) or
                                    (sub == "finalize" and kind.resource == "namespaces")):
            raise err_path_not_found()
        self.serve_resource(method, kind, ns, name, sub, q, body, watch_path)

    def route_openapi(self, segs):
        if segs[:2] == ["openapi", "v3"]:
            if len(segs) == 2:
                self.send_body(200, OPENAPI_ROOT)
                return
            doc = OPENAPI_DOCS.get("/".join(segs[2:]))
            if doc is not None:
                self.send_body(200, doc[0], headers={"Etag": '"%s"' % doc[1]})
                return
        self.send_body(404, "404 page not found\n", "text/plain; charset=utf-8")
