"""Shared plumbing of the stand-in: the version it reports, its log (DIR/apiserver.log),
JSON helpers, uids, timestamps, Go's boolean parsing, the connection idle timeout and the
per-request thread-local (fieldValidation directive and warnings).
"""

import json
import random
import threading
import time
import uuid

K8S_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "70d3cc986aa8221cd1dfb1121852688902d3bf53",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T17:59:15Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

LOG = None  # file object for DIR/apiserver.log


def log(msg):
    line = "%s %s\n" % (time.strftime("%H:%M:%S"), msg)
    f = LOG
    if f is not None:
        try:
            f.write(line)
            f.flush()
        except (OSError, ValueError):
            pass


_enc = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(obj):
    return _enc.encode(obj)


def clone(v):
    """Deep copy of a JSON value (faster than copy.deepcopy)."""
    if isinstance(v, dict):
        return {k: clone(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clone(x) for x in v]
    return v


def new_uid():
    """A random (version 4) UUID without a getrandom() system call per object."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


def now_time():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


def parse_go_bool(v):
    if v in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if v in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(v)


IDLE_TIMEOUT = 300


REQUEST = threading.local()  # per-request: fieldValidation directive and warnings
