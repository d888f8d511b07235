"""The store: objects, one resourceVersion counter, per-resource event history (for
watches and consistent list snapshots), watchers, listeners, and persistence (--persist on:
dump and load of state.json).
"""

import bisect
import json
import os
import threading

from .common import dumps
from .kinds import BY_RES, KIND_LIST
from .kinds.base import go_order, META_ORDER


# ---------------------------------------------------------------------------------------
# Store: objects, one resourceVersion counter, per-resource event history, watchers
# ---------------------------------------------------------------------------------------

class WEvent:
    __slots__ = ("rv", "type", "key", "obj", "prev", "cache")

    def __init__(self, rv, typ, key, obj, prev):
        self.rv, self.type, self.key, self.obj, self.prev = rv, typ, key, obj, prev
        self.cache = None


class History:
    def __init__(self, cap):
        self.cap = max(1, cap)
        self.rvs = []
        self.evs = []
        self.floor = 0  # resourceVersions below this are gone ("oldest - 1")

    def append(self, ev):
        self.rvs.append(ev.rv)
        self.evs.append(ev)
        if len(self.evs) > self.cap + self.cap // 4 + 16:
            drop = len(self.evs) - self.cap
            del self.rvs[:drop]
            del self.evs[:drop]
            self.floor = max(self.floor, self.rvs[0] - 1)

    def since(self, rv):
        return self.evs[bisect.bisect_right(self.rvs, rv):]

    def compact(self, rv):
        self.rvs, self.evs = [], []
        self.floor = max(self.floor, rv)


class Store:
    def __init__(self, history_cap):
        self.lock = threading.RLock()
        self.rv_cond = threading.Condition(self.lock)
        self.rv = 0
        self.objs = {k.resource: {} for k in KIND_LIST}
        self.jcache = {k.resource: {} for k in KIND_LIST}
        self.hist = {k.resource: History(history_cap) for k in KIND_LIST}
        self.watchers = {k.resource: set() for k in KIND_LIST}
        self.listeners = []

    def get(self, res, key):
        return self.objs[res].get(key)

    def obj_json(self, res, key, obj):
        c = self.jcache[res].get(key)
        if c is not None and c[0] is obj:
            return c[1]
        s = dumps(obj)
        self.jcache[res][key] = (obj, s)
        return s

    def _emit(self, res, typ, key, obj, prev):
        ev = WEvent(self.rv, typ, key, obj, prev)
        self.hist[res].append(ev)
        for w in self.watchers[res]:
            w.q.put(ev)
        for fn in self.listeners:
            fn(res, typ, key, obj, prev)
        self.rv_cond.notify_all()

    def put(self, res, key, obj, prev):
        """Stores obj (a new dict, owned by the store from now on). Caller holds lock."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        ordered = go_order(obj, BY_RES[res].order)
        ordered["metadata"] = go_order(obj["metadata"], META_ORDER)
        obj.clear()
        obj.update(ordered)
        self.objs[res][key] = obj
        self._emit(res, "ADDED" if prev is None else "MODIFIED", key, obj, prev)
        return obj

    def remove(self, res, key):
        prev = self.objs[res].pop(key)
        self.jcache[res].pop(key, None)
        self.rv += 1
        obj = dict(prev)
        obj["metadata"] = dict(prev["metadata"])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(res, "DELETED", key, obj, prev)
        return obj

    def snapshot_at(self, res, rv):
        """The resource's objects as they were at rv, or None if history is too short."""
        h = self.hist[res]
        if rv < h.floor:
            return None
        objs = self.objs[res]
        later = h.since(rv)
        if not later:
            return objs
        objs = dict(objs)
        for ev in reversed(later):
            if ev.type == "ADDED":
                objs.pop(ev.key, None)
            else:
                objs[ev.key] = ev.prev
        return objs

    def compact(self):
        with self.lock:
            for h in self.hist.values():
                h.compact(self.rv)
            return self.rv

    # -- persistence (--persist on): what etcd would keep across a restart ------------------

    STATE_FILE = "state.json"

    def dump(self, path):
        """Writes every object and the resourceVersion counter to path (atomically: a temporary
        file, fsync, rename). Caller holds the lock, so the dump is one consistent moment."""
        state = {"version": 1, "resourceVersion": self.rv,
                 "objects": {res: list(objs.values()) for res, objs in self.objs.items()}}
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def load(self, path):
        """Replaces the store's objects with a dump()'s (before any watch or controller
        runs). The watch history starts empty at the loaded resourceVersion, as the watch
        cache of a restarted kube-apiserver does: a watch resuming from an older
        resourceVersion gets 410 Expired and relists. Listeners see every object as ADDED
        (the controllers rebuild their indexes). Returns the number of objects loaded."""
        with open(path) as f:
            state = json.load(f)
        n = 0
        with self.lock:
            self.rv = max(self.rv, int(state["resourceVersion"]))
            for res in self.objs:
                self.objs[res] = {}
                self.jcache[res] = {}
                self.hist[res] = History(self.hist[res].cap)
                self.hist[res].floor = self.rv
            for res, items in state["objects"].items():
                kind = BY_RES[res]
                for obj in items:
                    m = obj["metadata"]
                    key = kind.key(m.get("namespace", ""), m["name"])
                    self.objs[res][key] = obj
                    n += 1
            for res, objs in self.objs.items():
                for key, obj in objs.items():
                    for fn in self.listeners:
                        fn(res, "ADDED", key, obj, None)
        return n
