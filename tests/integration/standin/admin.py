"""The /admin/ endpoints (see tests/integration/README.md) and injected faults: errors,
delays, disconnects, watch errors; watch closing, history compaction, malformed watch lines,
the request log, controller switches, tokens, config.
"""

import json
import random
import socket
import time

from .common import dumps
from .errors import ApiError, err_bad_request, err_path_not_found, MSG_MODIFIED


class Fault:
    _ids = 0

    def __init__(self, d):
        Fault._ids += 1
        self.id = Fault._ids
        self.method = (d.get("method") or "*").upper()
        # "POST,PUT": any of these methods.
        self.methods = frozenset(m.strip() for m in self.method.split(",") if m.strip())
        self.prefix = d.get("path_prefix") or d.get("prefix") or "/"
        self.query_contains = d.get("query_contains") or ""
        self.user_agent = d.get("user_agent") or ""  # a prefix of the User-Agent header
        self.probability = float(d.get("probability") or 1.0)  # of a matching request
        self.count = int(d.get("count", 1))
        self.forever = self.count <= 0  # until DELETE /admin/faults
        self.hits = 0
        self.status = d.get("status")
        self.retry_after = d.get("retry_after")
        self.delay_ms = int(d.get("delay_ms") or 0)
        self.action = d.get("action") or ("error" if self.status else "delay")
        self.body = d.get("body")
        self.message = d.get("message")

    def matches(self, method, path, query, user_agent=""):
        return (self.forever or self.count > 0) and \
            ("*" in self.methods or method in self.methods) and \
            path.startswith(self.prefix) and self.query_contains in query and \
            user_agent.startswith(self.user_agent) and \
            (self.probability >= 1.0 or random.random() < self.probability)

    def info(self):
        return {k: getattr(self, k) for k in ("id", "method", "prefix", "query_contains",
                                               "user_agent", "probability", "count", "forever",
                                               "hits", "status", "retry_after", "delay_ms",
                                               "action", "body", "message")}


REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}
MESSAGES = {500: "Internal error occurred: injected fault",
            503: "the server is currently unable to handle the request",
            429: "Too many requests, please try again later.",
            504: "Timeout: request did not complete within requested timeout - context deadline "
                 "exceeded",
            410: "too old resource version: 1 (2)", 403: "forbidden: injected fault",
            409: "Operation cannot be fulfilled: " + MSG_MODIFIED}


class AdminMixin:
    """Handler methods: injected faults and /admin/ (mixed into handler.Handler)."""

    def apply_fault(self, f):
        """Returns True when the request was answered (or dropped) by the fault."""
        if f.action == "delay_reply":
            # Done now (stored, seen by watches), answered delay_ms later: a slow reply.
            self._reply_delay_ms = f.delay_ms
            return False
        if f.delay_ms:
            time.sleep(f.delay_ms / 1000.0)
        if f.action == "delay" and not f.status:
            return False
        if f.action == "disconnect":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return True
        code = int(f.status)
        headers = {}
        if f.retry_after is not None:
            headers["Retry-After"] = str(f.retry_after)
        msg = f.message or MESSAGES.get(code, "injected fault")
        text = None
        if f.body == "text" or (code == 429 and f.body != "status"):
            text = msg + "\n"
        details = {}
        if f.retry_after is not None:
            details["retryAfterSeconds"] = int(f.retry_after)
        e = ApiError(code, REASONS.get(code, "Unknown"), msg, details or None, headers, text)
        if f.action == "watch_error":
            # What the watch cache does: 200, then one ERROR event carrying the Status.
            self._watch = True
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.write_event_line(dumps({"type": "ERROR", "object": e.status()}))
            self.wfile.write(b"0\r\n\r\n")
            return True
        self.send_error_status(e)
        return True

    # -- admin -------------------------------------------------------------------------------

    def handle_admin(self, method, path, q, body):
        st = self.state
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() != "bearer " or auth[7:].strip() != st.admin_token:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        try:
            d = json.loads(body) if body.strip() else {}
        except ValueError as e:
            raise err_bad_request("admin: bad JSON: %s" % e) from None
        what = path[len("/admin/"):].rstrip("/")
        reg = st.reg
        out = None
        if what == "state" and method == "GET":
            with reg.lock:
                out = {"resourceVersion": reg.store.rv,
                       "objects": {r: len(o) for r, o in reg.store.objs.items()},
                       "floors": {r: h.floor for r, h in reg.store.hist.items()},
                       "watches": sum(len(x) for x in reg.store.watchers.values()),
                       "binder": reg.binder, "protection": reg.protection,
                       "controllers_idle": st.ctrl.idle(), "port": st.port}
        elif what == "watches" and method == "GET":
            ws = st.all_watchers()
            out = {"count": len(ws), "watches": [w.info() for w in ws]}
        elif what == "close-watches" and method == "POST":
            prefix = d.get("path_prefix") or ""
            ua = d.get("user_agent") or ""
            n = 0
            for w in st.all_watchers():
                if w.path.startswith(prefix) and (w.ua or "").startswith(ua):
                    w.q.put(("close", bool(d.get("abrupt"))))
                    n += 1
            out = {"closed": n}
        elif what == "faults":
            if method == "POST":
                f = Fault(d)
                with st.flock:
                    st.faults.append(f)
                out = f.info()
            elif method == "GET":
                with st.flock:
                    out = {"faults": [f.info() for f in st.faults]}
            elif method == "DELETE":
                with st.flock:
                    out = {"cleared": len(st.faults)}
                    st.faults.clear()
        elif what == "compact" and method == "POST":
            out = {"resourceVersion": reg.store.compact()}
        elif what == "malformed" and method == "POST":
            prefix = d.get("path_prefix") or ""
            line = d.get("line")
            if line is None:
                line = '{"type":"MODIFIED","object":{"kind":"PersistentVolumeClaim","metadata":'
            data = line.encode("utf-8") + (b"" if d.get("no_newline") else b"\n")
            if d.get("repeat"):
                data = data * int(d["repeat"])
            n = 0
            for w in st.all_watchers():
                if w.path.startswith(prefix):
                    w.q.put(("malformed", data))
                    n += 1
            out = {"sent": n}
        elif what == "controllers":
            if method == "POST":
                changed = False
                if "binder" in d:
                    changed = changed or (bool(d["binder"]) and not reg.binder)
                    reg.binder = bool(d["binder"])
                if "protection" in d:
                    changed = changed or (bool(d["protection"]) and not reg.protection)
                    reg.protection = bool(d["protection"])
                if "binder_events" in d:
                    st.opts.binder_events = "on" if d["binder_events"] else "off"
                if changed:
                    st.ctrl.mark_all()
            out = {"binder": reg.binder, "protection": reg.protection,
                   "binder_events": st.opts.binder_events == "on"}
        elif what == "requests":
            if method == "GET":
                since = int(q.get("since") or 0)
                with st.rlock:
                    out = {"requests": [r for r in st.reqlog if r["seq"] > since],
                           "next": st.reqseq}
            elif method == "DELETE":
                with st.rlock:
                    out = {"cleared": len(st.reqlog)}
                    st.reqlog = []
        elif what == "tokens":
            if method == "POST":
                st.tokens = set(d.get("tokens") or [])
            out = {"count": len(st.tokens)}
        elif what == "config":
            if method == "POST" and "bookmark_interval" in d:
                st.bookmark_interval = float(d["bookmark_interval"])
            if method == "POST" and "apf" in d:
                st.apf = bool(d["apf"])
            out = {"bookmark_interval": st.bookmark_interval, "apf": st.apf,
                   "apf_uids": st.apf_uids}
        if out is None:
            raise err_path_not_found()
        self.send_body(200, json.dumps(out))
