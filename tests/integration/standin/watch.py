"""Watches: the Watcher (one per watch request, fed by the store) and the handler methods
that stream events, bookmarks and the initial list.
"""

import queue
import random
import select
import socket
import ssl
import time
from urllib.parse import urlsplit

from .common import dumps, IDLE_TIMEOUT, new_uid, parse_go_bool
from .errors import err_bad_request, err_expired, err_invalid, forbidden, not_supported
from .registry import parse_rv, too_large_rv
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .tables import make_table, table_accept


class Watcher:
    _ids = 0

    def __init__(self, kind, ns, lsel, fsel, path, query, ua):
        Watcher._ids += 1
        self.id = Watcher._ids
        self.q = queue.SimpleQueue()
        self.kind, self.ns, self.lsel, self.fsel = kind, ns, lsel, fsel
        self.path, self.query, self.ua = path, query, ua
        self.started = time.time()

    def matches(self, key, obj):
        if obj is None:
            return False
        if self.ns is not None and not key.startswith(self.ns + "/"):
            return False
        return labels_match(self.lsel, obj["metadata"].get("labels")) and \
            fields_match(self.fsel, self.kind, obj)

    def info(self):
        return {"id": self.id, "resource": self.kind.resource, "path": self.path,
                "query": self.query, "user_agent": self.ua, "started": self.started}


class WatchMixin:
    """Handler methods serving watch requests (mixed into handler.Handler)."""

    # -- watch -------------------------------------------------------------------------------

    def serve_watch(self, kind, ns, q):
        st, reg = self.state, self.state.reg
        store = reg.store
        mode, av = table_accept(self.headers.get("Accept"))
        lsel = parse_label_selector(q.get("labelSelector"))
        fsel = parse_field_selector(q.get("fieldSelector"), kind)
        rv = q.get("resourceVersion") or ""
        rvm = q.get("resourceVersionMatch") or ""
        try:
            allow_bm = parse_go_bool(q["allowWatchBookmarks"]) \
                if "allowWatchBookmarks" in q else False
            sie = parse_go_bool(q["sendInitialEvents"]) if "sendInitialEvents" in q else None
            timeout = int(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        except ValueError as e:
            raise err_bad_request("invalid watch options: %s" % e) from None
        errs = []
        if sie is not None:
            if rvm != "NotOlderThan":
                errs.append(forbidden("resourceVersionMatch", "sendInitialEvents requires setting "
                                      "resourceVersionMatch to NotOlderThan"))
            if not st.watch_list:
                errs.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for "
                                      "watch unless the WatchList feature gate is enabled"))
        if rvm:
            if sie is None:
                errs.append(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden "
                                      "for watch unless sendInitialEvents is provided"))
            if rvm != "NotOlderThan":
                errs.append(not_supported("resourceVersionMatch", rvm, ["NotOlderThan"]))
        if errs:
            raise err_invalid("ListOptions", "meta.k8s.io", "", errs)
        if st.watch_list and sie is None and not rvm and rv in ("", "0"):
            sie = True  # SetListOptionsDefaults with the WatchList feature enabled (1.32)
        n_rv = parse_rv(rv)
        if n_rv > 0 and not reg.wait_for_rv(n_rv):
            raise too_large_rv(n_rv, store.rv)
        u = urlsplit(self.path)
        w = Watcher(kind, ns, lsel, fsel, u.path, u.query, self.headers.get("User-Agent", ""))
        initial, backlog, expired = [], [], None
        with reg.lock:
            snap_rv = store.rv
            if rv in ("", "0") and sie is not False:
                objs = store.objs[kind.resource]
                initial = [(k, objs[k]) for k in sorted(objs) if w.matches(k, objs[k])]
            elif sie:
                objs = store.objs[kind.resource]
                initial = [(k, objs[k]) for k in sorted(objs) if w.matches(k, objs[k])]
            elif rv not in ("", "0"):
                h = store.hist[kind.resource]
                if n_rv < h.floor:
                    expired = err_expired("too old resource version: %d (%d)"
                                          % (n_rv, h.floor))
                else:
                    backlog = h.since(n_rv)
            if expired is None:
                store.watchers[kind.resource].add(w)
        self._watch = True
        try:
            self.send_response(200)
            self.send_header("Audit-Id", new_uid())
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if expired is not None:
                self.write_event_line(dumps({"type": "ERROR", "object": expired.status()}))
                self.wfile.write(b"0\r\n\r\n")
                return
            self.stream(w, kind, mode, av, q, initial, backlog, snap_rv, allow_bm,
                        bool(sie), timeout)
        finally:
            with reg.lock:
                store.watchers[kind.resource].discard(w)

    def write_event_line(self, line):
        data = line.encode("utf-8") + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def client_gone(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        if not r:
            return False
        try:
            self.connection.settimeout(0.05)
            data = self.connection.recv(4096)
            return not data
        except (ssl.SSLWantReadError, socket.timeout, BlockingIOError):
            return False
        except (OSError, ssl.SSLError):
            return True
        finally:
            try:
                self.connection.settimeout(IDLE_TIMEOUT)
            except OSError:
                pass

    def stream(self, w, kind, mode, av, q, initial, backlog, snap_rv, allow_bm, sie, timeout):
        reg = self.state.reg
        include = q.get("includeObject", "Metadata")
        headers_sent = [False]

        def obj_line(typ, obj):
            if mode == "table":
                t = make_table(kind, [obj], av, include, headers=not headers_sent[0],
                               list_meta={"resourceVersion": obj["metadata"]["resourceVersion"]})
                headers_sent[0] = True
                return dumps({"type": typ, "object": t})
            return '{"type":"%s","object":{"kind":"%s","apiVersion":"%s",%s}' % (
                typ, kind.kind, kind.api_version, dumps(obj)[1:])

        def ev_line(ev, typ):
            if mode != "table" and ev.type == typ:
                if ev.cache is None:
                    ev.cache = obj_line(typ, ev.obj)
                return ev.cache
            return obj_line(typ, ev.obj)

        def bookmark(rv, initial_end=False):
            if mode == "table":
                b = {"kind": "Table", "apiVersion": av,
                     "metadata": {"resourceVersion": str(rv)}, "columnDefinitions": None,
                     "rows": None}
            else:
                meta = {"resourceVersion": str(rv), "creationTimestamp": None}
                if initial_end:
                    meta["annotations"] = {"k8s.io/initial-events-end": "true"}
                b = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
                b.update(kind.empty())
            return dumps({"type": "BOOKMARK", "object": b})

        def translate(ev):
            """The event this watcher sees (ADDED/MODIFIED/DELETED), or None."""
            now = w.matches(ev.key, ev.obj) if ev.type != "DELETED" else False
            before = w.matches(ev.key, ev.prev) if ev.prev is not None else False
            if ev.type == "ADDED":
                return "ADDED" if now else None
            if ev.type == "DELETED":
                return "DELETED" if before else None
            if now and before:
                return "MODIFIED"
            if now:
                return "ADDED"
            if before:
                return "DELETED"
            return None

        out = []
        for k, o in initial:
            out.append(obj_line("ADDED", o))
        last_rv = snap_rv
        for ev in backlog:
            t = translate(ev)
            if t:
                out.append(ev_line(ev, t))
            last_rv = max(last_rv, ev.rv)
        if sie and allow_bm:
            out.append(bookmark(snap_rv, initial_end=True))
        if out:
            self.write_lines(out)
        start = time.monotonic()
        deadline = start + (timeout if timeout is not None
                            else self.state.opts.min_request_timeout * (1 + random.random()))
        interval = self.state.bookmark_interval
        next_bm = start + interval
        next_check = start + 0.5
        while True:
            now = time.monotonic()
            if now >= deadline:
                if allow_bm:
                    with reg.lock:
                        rv_now = reg.store.rv
                    self.drain(w, translate, ev_line)
                    self.write_lines([bookmark(rv_now)])
                self.wfile.write(b"0\r\n\r\n")
                return
            if allow_bm and now >= next_bm:
                with reg.lock:
                    rv_now = reg.store.rv
                if self.drain(w, translate, ev_line) == "closed":
                    return
                self.write_lines([bookmark(rv_now)])
                next_bm = now + self.state.bookmark_interval
            if now >= next_check:
                if self.client_gone():
                    self.close_connection = True
                    return
                next_check = now + 0.5
            wait = min(deadline, next_check, next_bm if allow_bm else deadline) - now
            try:
                item = w.q.get(timeout=max(0.0, wait))
            except queue.Empty:
                continue
            r = self.handle_item(item, w, translate, ev_line)
            if r == "closed":
                return
            if self.drain(w, translate, ev_line) == "closed":
                return

    def write_lines(self, lines):
        buf = b"".join(b"%x\r\n%s\n\r\n" % (len(x.encode("utf-8")) + 1, x.encode("utf-8"))
                       for x in lines)
        self.wfile.write(buf)

    def handle_item(self, item, w, translate, ev_line):
        if isinstance(item, tuple):
            if item[0] == "close":
                if item[1]:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                else:
                    self.wfile.write(b"0\r\n\r\n")
                return "closed"
            if item[0] == "malformed":
                data = item[1]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return None
        t = translate(item)
        if t:
            self.write_lines([ev_line(item, t)])
        return None

    def drain(self, w, translate, ev_line):
        lines = []
        while True:
            try:
                item = w.q.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, tuple):
                if lines:
                    self.write_lines(lines)
                    lines = []
                if self.handle_item(item, w, translate, ev_line) == "closed":
                    return "closed"
                continue
            t = translate(item)
            if t:
                lines.append(ev_line(item, t))
        if lines:
            self.write_lines(lines)
        return None
