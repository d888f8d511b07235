"""The server: shared state (registry, controllers, faults, request log, tokens, API
Priority and Fairness objects), the TLS ThreadingHTTPServer, and main() (options, state
directory, certificates, kubeconfig, ready.json, signals, persistence).
"""

import argparse
import base64
import json
import os
import signal
import socket
import ssl
import threading
import traceback
from http.server import ThreadingHTTPServer

from . import __doc__ as PACKAGE_DOC  # --help's description
from . import common
from .certs import make_ca, sign_cert, write_kubeconfig
from .common import log, new_uid
from .controllers import Controllers
from .handler import Handler
from .registry import Registry
from .store import Store


# The mandatory API Priority and Fairness objects a request can be classified into.
APF_FLOWSCHEMAS = ("exempt", "probes", "service-accounts", "global-default")
APF_PRIORITY_LEVELS = ("exempt", "workload-low", "global-default")


class State:
    def __init__(self, opts):
        self.opts = opts
        self.reg = Registry(opts)
        self.ctrl = Controllers(self.reg)
        self.admin_token = opts.token
        self.tokens = {opts.token}
        self.faults = []
        self.flock = threading.Lock()
        self.reqlog = []
        self.reqseq = 0
        self.rlock = threading.Lock()
        self.bookmark_interval = opts.bookmark_interval
        self.watch_list = opts.watch_list == "on"
        self.port = 0
        # API Priority and Fairness: the UIDs of the mandatory FlowSchemas and
        # PriorityLevelConfigurations a request is classified into (new at every start, as the
        # objects of a fresh cluster are).
        self.apf = opts.apf == "on"
        self.apf_uids = {"flowschemas": {n: new_uid() for n in APF_FLOWSCHEMAS},
                         "prioritylevelconfigurations": {n: new_uid()
                                                         for n in APF_PRIORITY_LEVELS}}

    def all_watchers(self):
        with self.reg.lock:
            return [w for ws in self.reg.store.watchers.values() for w in ws]

    def take_fault(self, method, path, query, user_agent=""):
        with self.flock:
            for f in self.faults:
                if f.matches(method, path, query, user_agent):
                    f.hits += 1
                    if not f.forever:
                        f.count -= 1
                        if f.count <= 0:
                            self.faults.remove(f)
                    return f
        return None

    def log_request(self, entry):
        with self.rlock:
            self.reqseq += 1
            entry["seq"] = self.reqseq
            self.reqlog.append(entry)
            if len(self.reqlog) > 200000:
                del self.reqlog[:50000]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, handler, ctx):
        super().__init__(addr, handler)
        self.ctx = ctx

    def process_request_thread(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(10)
            conn = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            if Handler.state.opts.verbose:
                log("tls: handshake failed from %s: %s" % (client_address, e))
            try:
                request.close()
            except OSError:
                pass
            return
        try:
            self.finish_request(conn, client_address)
        except (OSError, ssl.SSLError):
            pass
        except Exception:
            log("error: connection %s\n%s" % (client_address, traceback.format_exc()))
        finally:
            try:
                self.shutdown_request(conn)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        log("error: %s\n%s" % (client_address, traceback.format_exc()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=PACKAGE_DOC.split("\n\n")[0])
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", default=None, help="bearer token (default: random)")
    ap.add_argument("--binder", choices=("on", "off"), default="on",
                    help="PV controller stand-in: annotate, bind, release")
    ap.add_argument("--protection", choices=("on", "off"), default="on",
                    help="pvc/pv-protection finalizers and their controllers")
    ap.add_argument("--binder-events", choices=("on", "off"), default="on",
                    help="ExternalProvisioning/WaitForFirstConsumer events from the binder")
    ap.add_argument("--require-namespaces", choices=("on", "off"), default="off",
                    help="reject creates into missing namespaces (off: create them)")
    ap.add_argument("--managed-fields", choices=("on", "off"), default="on")
    ap.add_argument("--watch-list", choices=("on", "off"), default="on",
                    help="WatchList feature gate (on in v1.32)")
    ap.add_argument("--history", type=int, default=20000,
                    help="watch history kept per resource")
    ap.add_argument("--bookmark-interval", type=float, default=1.0)
    ap.add_argument("--min-request-timeout", type=float, default=1800.0)
    ap.add_argument("--client-ca", default=None,
                    help="'auto' (the generated CA) or a CA bundle path: accept client certs")
    ap.add_argument("--authorization", choices=("AlwaysAllow", "RBAC"), default="AlwaysAllow",
                    help="RBAC: authorize requests with the stored Roles, ClusterRoles and "
                    "bindings (the --token user is in system:masters)")
    ap.add_argument("--persist", choices=("on", "off"), default="off",
                    help="on: load DIR/state.json at start when it exists, write it on "
                    "SIGTERM/SIGINT (state survives a restart; SIGKILL loses it)")
    ap.add_argument("--apf", choices=("on", "off"), default="on",
                    help="API Priority and Fairness headers (X-Kubernetes-PF-FlowSchema-UID, "
                    "X-Kubernetes-PF-PriorityLevel-UID) on every response, as a real server "
                    "with APF (on by default since 1.20) sends them")
    ap.add_argument("--verbose", action="store_true")
    opts = ap.parse_args(argv)
    sd = os.path.abspath(opts.state_dir)
    os.makedirs(sd, exist_ok=True)
    common.LOG = open(os.path.join(sd, "apiserver.log"), "a", buffering=1)
    if not opts.token:
        opts.token = base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")
    try:
        os.unlink(os.path.join(sd, "ready.json"))
    except FileNotFoundError:
        pass
    ca_crt, _ = make_ca(sd)
    srv_crt = os.path.join(sd, "server.crt")
    srv_key = os.path.join(sd, "server.key")
    if not (os.path.exists(srv_crt) and os.path.exists(srv_key)):
        sign_cert(sd, "server", "kube-apiserver", "serverAuth",
                  san="IP:127.0.0.1,DNS:localhost")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(srv_crt, srv_key)
    ctx.set_alpn_protocols(["http/1.1"])
    if opts.client_ca:
        ctx.load_verify_locations(ca_crt if opts.client_ca == "auto" else opts.client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    state = State(opts)
    state_file = os.path.join(sd, Store.STATE_FILE)
    if opts.persist == "on" and os.path.exists(state_file):
        n = state.reg.store.load(state_file)
        log("loaded %d objects at resourceVersion %d from %s"
            % (n, state.reg.store.rv, state_file))
    Handler.state = state
    httpd = Server(("127.0.0.1", opts.port), Handler, ctx)
    port = httpd.server_address[1]
    state.port = port
    url = "https://127.0.0.1:%d" % port
    write_kubeconfig(os.path.join(sd, "kubeconfig"), url, ca_crt, token=opts.token)
    state.ctrl.start()

    def on_signal(signum, frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ready = {"port": port, "url": url, "token": opts.token, "pid": os.getpid(),
             "ca": ca_crt, "kubeconfig": os.path.join(sd, "kubeconfig")}
    tmp = os.path.join(sd, "ready.json.tmp")
    with open(tmp, "w") as f:
        json.dump(ready, f)
    os.replace(tmp, os.path.join(sd, "ready.json"))
    log("listening on %s (pid %d)" % (url, os.getpid()))
    print(port, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        state.ctrl.stop()
        if opts.persist == "on":
            # The lock is kept to the end: a request still in flight cannot change anything
            # after the dump (its client sees the connection drop, never a lost success).
            state.reg.lock.acquire()
            state.reg.store.dump(state_file)
            log("saved %d objects at resourceVersion %d to %s"
                % (sum(len(o) for o in state.reg.store.objs.values()), state.reg.store.rv,
                   state_file))
        log("stopped")
    return 0
