/* fakeapi: a benchmark-only stand-in for kube-apiserver, fast enough that the provisioner, not the
 * server, is what a benchmark measures. Not a test fixture (tests/integration/apiserver.py is the
 * faithful one): it serves only what the provisioner uses, over plain HTTP/1.1 on loopback.
 *
 * One thread, one libuv loop, llhttp for requests. Everything lives in memory:
 * - persistentvolumeclaims (namespaced; also listed/watched across namespaces),
 *   persistentvolumes, storageclasses and leases: get, list (limit/continue, resourceVersion),
 *   watch (chunked newline-delimited events, resume from a resourceVersion out of a per-resource
 *   history, 410 Expired below it, timeoutSeconds), create (201, 409 AlreadyExists), update
 *   (PUT), merge patch (annotations, labels and spec merged one level deep, finalizers replaced,
 *   metadata.resourceVersion as a precondition), delete (finalizers hold a deleting object);
 * - events: create and patch are answered (echoing the body) and counted, not stored;
 * - a minimal binder in kube-controller-manager's steps: a claim of a class with a provisioner
 *   gets the storage-provisioner annotations (one write); a PV created with a claimRef to an
 *   existing claim becomes Bound, then the claim gets spec.volumeName, then status Bound (three
 *   writes, three events); a PV whose claim is gone becomes Released; a bound claim whose PV is
 *   gone becomes Lost.
 * - /admin/: create N claims at once, delete them all, counters (requests by verb and resource,
 *   objects by phase, the monotonic time of the last bind and the last PV deletion).
 *
 * Answers are appended to a per-connection buffer and written once per loop iteration (a
 * uv_prepare handle), so a burst of events or pipelined answers costs one write(2) per
 * connection. Every response carries the API Priority and Fairness headers unless --apf off.
 *
 *   fakeapi [--port 0] [--state-dir DIR] [--apf on|off] [--history 200000]
 *           [--class NAME=PROVISIONER[:WaitForFirstConsumer]]...
 *
 * With --state-dir it writes DIR/kubeconfig (http://127.0.0.1:PORT, a token) and DIR/ready.json
 * ({"port", "url", "pid", "kubeconfig"}). SIGTERM/SIGINT stop it.
 */
#include <errno.h>
#include <inttypes.h>
#include <llhttp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "hostpath/json.h"

#define MAX_BODY (3u * 1024 * 1024)
#define MAX_URL 8192
#define MAX_WATCH_BACKLOG (256u * 1024 * 1024) /* unsent bytes before a watcher is dropped */
#define READ_BUF (256u * 1024)

#define containerof(p, T, m) ((T *)((char *)(p)-offsetof(T, m)))

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "fakeapi: out of memory\n");
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "fakeapi: out of memory\n");
        abort();
    }
    return p;
}

static char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static char *xstrdup(const char *s)
{
    return s ? xstrndup(s, strlen(s)) : NULL;
}

/* ---- growable buffer ---- */

struct sb {
    char *d;
    size_t len, cap;
};

static void sb_reserve(struct sb *b, size_t more)
{
    if (b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    b->d = xrealloc(b->d, cap);
    b->cap = cap;
}

static inline void sb_put(struct sb *b, const void *p, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->d + b->len, p, n);
    b->len += n;
    b->d[b->len] = '\0';
}

static inline void sb_puts(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->d ? b->d + b->len : NULL, b->d ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (!b->d || b->len + (size_t)n + 1 > b->cap) {
        sb_reserve(b, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(b->d + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

static void sb_u64(struct sb *b, uint64_t v)
{
    char tmp[24];
    int i = (int)sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sb_put(b, tmp + i, sizeof(tmp) - (size_t)i);
}

static void sb_free(struct sb *b)
{
    free(b->d);
    b->d = NULL;
    b->len = b->cap = 0;
}

/* ---- kinds and objects ---- */

enum kind { K_PVC, K_PV, K_SC, K_LEASE, K_N };

static const struct kindinfo {
    const char *resource, *kind, *api_version, *group;
    int namespaced;
} KINDS[K_N] = {
    [K_PVC] = {"persistentvolumeclaims", "PersistentVolumeClaim", "v1", "", 1},
    [K_PV] = {"persistentvolumes", "PersistentVolume", "v1", "", 0},
    [K_SC] = {"storageclasses", "StorageClass", "storage.k8s.io/v1", "storage.k8s.io", 0},
    [K_LEASE] = {"leases", "Lease", "coordination.k8s.io/v1", "coordination.k8s.io", 1},
};

struct obj {
    struct obj *hnext;      /* hash chain */
    struct obj *prev, *next; /* creation order */
    enum kind kind;
    uint64_t seq, rv;
    char *ns; /* "" when cluster-scoped */
    char *name;
    char uid[40];
    char ctime[24];
    char *ann, *labels, *fins; /* raw JSON (object, object, array) or NULL */
    char *spec;                /* raw JSON object or NULL */
    char *rest;                /* raw ",\"key\":value" top-level members besides the usual */
    char phase[12];            /* status.phase, "" = no status */
    char *del_ts;              /* deletionTimestamp or NULL */
    char *cref_ns, *cref_name, *cref_uid; /* PV spec.claimRef */
    char *volume_name;                    /* PVC spec.volumeName */
    char *provisioner;                    /* StorageClass */
    int wffc;                             /* StorageClass WaitForFirstConsumer */
    char *json;                           /* cached rendering, NULL when stale */
    size_t json_len;
    char *mf;    /* raw metadata.managedFields (populated objects), or NULL */
    char *elabels; /* the labels (raw JSON) its last watch event carried */
    int node_idx;  /* populated objects: the node index, else -1 */
};

struct table {
    struct obj **b;
    size_t nb, count;
    struct obj head; /* creation-order list sentinel */
};

/* One rendered watch event, already framed as an HTTP chunk. */
struct evl {
    uint64_t rv;
    char ns[64];
    char type;   /* 'A', 'M', 'D' */
    char *lab;   /* the object's labels, packed ("k\0v\0...\0"), or NULL */
    char *plab;  /* its labels before this change (MODIFIED), or NULL */
    size_t line; /* offset of the JSON line in data (after the chunk header) */
    size_t len;
    char data[];
};

/* Events kept per resource for watches that resume from a resourceVersion. */
struct ring {
    struct evl **a;
    size_t cap, head, count;
    uint64_t floor; /* events with rv <= floor are gone */
};

/* One listening port: with --listeners N, each instance of a fan-out benchmark gets its own, so
 * what the server sends is counted per instance. */
struct listener {
    uv_tcp_t tcp;
    int idx, port;
    uint64_t bytes;                /* written to its connections: headers, bodies, events */
    uint64_t list_items[K_N], list_bytes[K_N];
    uint64_t watch_events[K_N], watch_bytes[K_N];
};

/* A label selector: equality-based requirements (k=v, k==v, k!=v, k, !k), ANDed. */
#define SEL_MAX 8
enum sel_op { SEL_EQ, SEL_NE, SEL_EXISTS, SEL_ABSENT };
struct sel {
    int n;
    struct {
        enum sel_op op;
        char key[128], val[128];
    } r[SEL_MAX];
};

enum verb { V_GET, V_LIST, V_WATCH, V_POST, V_PUT, V_PATCH, V_DELETE, V_N };
static const char *const VERBS[V_N] = {"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"};
enum res { R_PVC, R_PV, R_SC, R_LEASE, R_EVENT, R_OTHER, R_N };
static const char *const RESNAMES[R_N] = {"persistentvolumeclaims", "persistentvolumes",
                                          "storageclasses", "leases", "events", "other"};

struct conn;

static struct {
    uv_loop_t *loop;
    struct listener *listeners;
    int nlisteners;
    uv_prepare_t flusher;
    uv_timer_t ticker;
    uv_signal_t sigterm, sigint;
    int apf;
    uint64_t rv, seq;
    uint32_t uid_prefix;
    struct table t[K_N];
    struct ring ring[K_N];
    size_t history;
    struct conn *watchers[K_N];
    struct conn *dirty;
    struct hp_json j, j2;
    struct sb scratch, scratch2;
    uint64_t counts[V_N][R_N];
    uint64_t events_created, events_patched;
    uint64_t claims_bound, pvs_bound, pvs_released, pvs_deleted, pvs_created;
    uint64_t t_last_bound, t_last_pv_created, t_last_pv_deleted, t_last_claim_deleted;
    size_t conns, conns_max;
    int port;
    time_t ctime_sec;
    char ctime_str[24];
    char flowschema_uid[40], prioritylevel_uid[40];
} S;

static void touch(struct obj *o)
{
    free(o->json);
    o->json = NULL;
}

static uint64_t fnv(const char *a, const char *b)
{
    uint64_t h = 14695981039346656037ull;
    for (; *a; a++)
        h = (h ^ (unsigned char)*a) * 1099511628211ull;
    h = (h ^ '/') * 1099511628211ull;
    for (; *b; b++)
        h = (h ^ (unsigned char)*b) * 1099511628211ull;
    return h;
}

static void table_init(struct table *t)
{
    t->nb = 1024;
    t->b = calloc(t->nb, sizeof(*t->b));
    if (!t->b)
        abort();
    t->head.prev = t->head.next = &t->head;
}

static struct obj *table_get(struct table *t, const char *ns, const char *name)
{
    for (struct obj *o = t->b[fnv(ns, name) & (t->nb - 1)]; o; o = o->hnext) {
        if (strcmp(o->name, name) == 0 && strcmp(o->ns, ns) == 0)
            return o;
    }
    return NULL;
}

static void table_put(struct table *t, struct obj *o)
{
    if (t->count + 1 > t->nb) {
        size_t nb = t->nb * 2;
        struct obj **b = calloc(nb, sizeof(*b));
        if (!b)
            abort();
        for (size_t i = 0; i < t->nb; i++) {
            for (struct obj *x = t->b[i], *nx; x; x = nx) {
                nx = x->hnext;
                size_t k = fnv(x->ns, x->name) & (nb - 1);
                x->hnext = b[k];
                b[k] = x;
            }
        }
        free(t->b);
        t->b = b;
        t->nb = nb;
    }
    size_t k = fnv(o->ns, o->name) & (t->nb - 1);
    o->hnext = t->b[k];
    t->b[k] = o;
    o->prev = t->head.prev;
    o->next = &t->head;
    t->head.prev->next = o;
    t->head.prev = o;
    t->count++;
}

static void table_del(struct table *t, struct obj *o)
{
    struct obj **pp = &t->b[fnv(o->ns, o->name) & (t->nb - 1)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = o->hnext;
    o->prev->next = o->next;
    o->next->prev = o->prev;
    t->count--;
}

static void obj_free(struct obj *o)
{
    free(o->ns);
    free(o->name);
    free(o->ann);
    free(o->labels);
    free(o->fins);
    free(o->spec);
    free(o->rest);
    free(o->del_ts);
    free(o->cref_ns);
    free(o->cref_name);
    free(o->cref_uid);
    free(o->volume_name);
    free(o->provisioner);
    free(o->json);
    free(o->mf);
    free(o->elabels);
    free(o);
}

static const char *now_str(void)
{
    time_t t = time(NULL);
    if (t != S.ctime_sec) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(S.ctime_str, sizeof(S.ctime_str), "%Y-%m-%dT%H:%M:%SZ", &tm);
        S.ctime_sec = t;
    }
    return S.ctime_str;
}

static void render(struct obj *o)
{
    if (o->json)
        return;
    const struct kindinfo *k = &KINDS[o->kind];
    struct sb *b = &S.scratch;
    b->len = 0;
    sb_puts(b, "{\"kind\":\"");
    sb_puts(b, k->kind);
    sb_puts(b, "\",\"apiVersion\":\"");
    sb_puts(b, k->api_version);
    sb_puts(b, "\",\"metadata\":{\"name\":\"");
    sb_puts(b, o->name);
    if (o->ns[0]) {
        sb_puts(b, "\",\"namespace\":\"");
        sb_puts(b, o->ns);
    }
    sb_puts(b, "\",\"uid\":\"");
    sb_puts(b, o->uid);
    sb_puts(b, "\",\"resourceVersion\":\"");
    sb_u64(b, o->rv);
    sb_puts(b, "\",\"creationTimestamp\":\"");
    sb_puts(b, o->ctime);
    sb_puts(b, "\"");
    if (o->del_ts) {
        sb_puts(b, ",\"deletionTimestamp\":\"");
        sb_puts(b, o->del_ts);
        sb_puts(b, "\",\"deletionGracePeriodSeconds\":0");
    }
    if (o->labels) {
        sb_puts(b, ",\"labels\":");
        sb_puts(b, o->labels);
    }
    if (o->ann) {
        sb_puts(b, ",\"annotations\":");
        sb_puts(b, o->ann);
    }
    if (o->fins) {
        sb_puts(b, ",\"finalizers\":");
        sb_puts(b, o->fins);
    }
    if (o->mf) {
        sb_puts(b, ",\"managedFields\":");
        sb_puts(b, o->mf);
    }
    sb_puts(b, "}");
    if (o->spec) {
        sb_puts(b, ",\"spec\":");
        sb_puts(b, o->spec);
    }
    if (o->phase[0]) {
        sb_puts(b, ",\"status\":{\"phase\":\"");
        sb_puts(b, o->phase);
        sb_puts(b, "\"}");
    }
    if (o->rest)
        sb_puts(b, o->rest);
    sb_puts(b, "}");
    o->json = xstrndup(b->d, b->len);
    o->json_len = b->len;
}

static void make_uid(char *out)
{
    uint64_t n = ++S.seq;
    snprintf(out, 40, "%08" PRIx32 "-%04x-4%03x-8%03x-%012" PRIx64, S.uid_prefix,
             (unsigned)((n >> 48) & 0xffff), (unsigned)((n >> 36) & 0xfff),
             (unsigned)((n >> 24) & 0xfff), (uint64_t)(n & 0xffffffffffffull));
}

/* ---- connections and output ---- */

struct wreq {
    uv_write_t req;
    struct conn *c;
    struct sb buf;
};

struct conn {
    uv_tcp_t tcp;
    llhttp_t parser;
    struct sb url, body;
    struct sb out;       /* not yet handed to the kernel */
    struct sb spare;     /* a buffer a finished write gave back */
    int writing;         /* a uv_write is in flight */
    int in_dirty;
    struct conn *dnext;
    int closing;
    int close_after_flush;
    int keep_alive;
    struct listener *l;
    /* watch */
    int watching;
    enum kind wkind;
    char wns[64];
    struct sel *wsel; /* labelSelector, or NULL */
    uint64_t wdeadline; /* uv_now ms; 0 = none */
    struct conn *wprev, *wnext;
};

static void conn_close(struct conn *c);
static void flush_conn(struct conn *c);

static void mark_dirty(struct conn *c)
{
    if (!c->in_dirty && !c->closing) {
        c->in_dirty = 1;
        c->dnext = S.dirty;
        S.dirty = c;
    }
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = containerof(req, struct wreq, req);
    struct conn *c = w->c;
    c->writing = 0;
    if (!c->spare.d) {
        c->spare = w->buf;
        c->spare.len = 0;
    } else {
        sb_free(&w->buf);
    }
    free(w);
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->out.len || c->close_after_flush)
        mark_dirty(c);
}

static void flush_conn(struct conn *c)
{
    if (c->closing || c->writing)
        return;
    if (c->out.len) {
        if (c->l)
            c->l->bytes += c->out.len;
        uv_buf_t b = uv_buf_init(c->out.d, (unsigned)c->out.len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n == UV_EAGAIN)
            n = 0;
        if (n < 0) {
            conn_close(c);
            return;
        }
        if ((size_t)n < c->out.len) {
            struct wreq *w = xmalloc(sizeof(*w));
            w->c = c;
            w->buf = c->out;
            c->out = c->spare;
            c->spare = (struct sb){0};
            uv_buf_t rest = uv_buf_init(w->buf.d + n, (unsigned)(w->buf.len - (size_t)n));
            if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &rest, 1, on_written) < 0) {
                sb_free(&w->buf);
                free(w);
                conn_close(c);
                return;
            }
            c->writing = 1;
            return;
        }
        c->out.len = 0;
    }
    if (c->close_after_flush)
        conn_close(c);
}

static void on_flush(uv_prepare_t *h)
{
    (void)h;
    while (S.dirty) {
        struct conn *c = S.dirty;
        S.dirty = c->dnext;
        c->in_dirty = 0;
        flush_conn(c);
    }
}

static void watch_unlink(struct conn *c)
{
    if (!c->watching)
        return;
    if (c->wprev)
        c->wprev->wnext = c->wnext;
    else
        S.watchers[c->wkind] = c->wnext;
    if (c->wnext)
        c->wnext->wprev = c->wprev;
    c->wprev = c->wnext = NULL;
    c->watching = 0;
    free(c->wsel);
    c->wsel = NULL;
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = containerof((uv_tcp_t *)h, struct conn, tcp);
    sb_free(&c->url);
    sb_free(&c->body);
    sb_free(&c->out);
    sb_free(&c->spare);
    free(c->wsel);
    free(c);
    S.conns--;
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    watch_unlink(c);
    if (c->in_dirty) { /* leave the dirty list */
        struct conn **pp = &S.dirty;
        while (*pp && *pp != c)
            pp = &(*pp)->dnext;
        if (*pp)
            *pp = c->dnext;
        c->in_dirty = 0;
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void head(struct conn *c, int code, const char *text, const char *extra)
{
    struct sb *o = &c->out;
    sb_puts(o, "HTTP/1.1 ");
    sb_u64(o, (uint64_t)code);
    sb_puts(o, " ");
    sb_puts(o, text);
    sb_puts(o, "\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n");
    if (S.apf) {
        sb_puts(o, "X-Kubernetes-Pf-Flowschema-Uid: ");
        sb_puts(o, S.flowschema_uid);
        sb_puts(o, "\r\nX-Kubernetes-Pf-Prioritylevel-Uid: ");
        sb_puts(o, S.prioritylevel_uid);
        sb_puts(o, "\r\n");
    }
    if (extra)
        sb_puts(o, extra);
}

static const char *status_text(int code)
{
    switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Request Entity Too Large";
    case 422: return "Unprocessable Entity";
    default: return "Error";
    }
}

static void respond(struct conn *c, int code, const char *body, size_t len)
{
    head(c, code, status_text(code), NULL);
    sb_puts(&c->out, "Content-Length: ");
    sb_u64(&c->out, len);
    sb_puts(&c->out, c->keep_alive ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
    sb_put(&c->out, body, len);
    if (!c->keep_alive)
        c->close_after_flush = 1;
    mark_dirty(c);
}

static void respond_obj(struct conn *c, int code, struct obj *o)
{
    render(o);
    respond(c, code, o->json, o->json_len);
}

static const char *REASONS[] = {[400] = "BadRequest", [404] = "NotFound", [405] = "MethodNotAllowed",
                                [409] = "AlreadyExists", [410] = "Expired", [413] =
                                                                                "RequestEntityTooLarge",
                                [422] = "Invalid"};

static void respond_status(struct conn *c, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void respond_status(struct conn *c, int code, const char *reason, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!reason)
        reason = code < (int)(sizeof(REASONS) / sizeof(REASONS[0])) && REASONS[code]
                     ? REASONS[code]
                     : "InternalError";
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b,
              "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"%s\",\"reason\":\"%s\",\"code\":%d}",
              msg, reason, code);
    respond(c, code, b->d, b->len);
}

/* ---- watch events ---- */

static void evl_free(struct evl *e);

static void ring_push(struct ring *r, struct evl *e)
{
    if (!r->a) {
        r->cap = S.history ? S.history : 1;
        r->a = calloc(r->cap, sizeof(*r->a));
        if (!r->a)
            abort();
    }
    if (r->count == r->cap) {
        struct evl *old = r->a[r->head];
        r->floor = old->rv;
        evl_free(old);
        r->a[r->head] = e;
        r->head = (r->head + 1) % r->cap;
        return;
    }
    r->a[(r->head + r->count) % r->cap] = e;
    r->count++;
}

static struct evl *ring_at(const struct ring *r, size_t i)
{
    return r->a[(r->head + i) % r->cap];
}

static void evl_free(struct evl *e)
{
    if (!e)
        return;
    free(e->lab);
    free(e->plab);
    free(e);
}

/* Frames one event line as a chunk: "<hex>\r\n<line>\n\r\n" (object: json[0..jlen)). */
static struct evl *frame_event(const char *type, const char *json, size_t jlen)
{
    size_t tl = strlen(type);
    size_t line = 9 + tl + 11 + jlen + 1 + 1; /* {"type":"T","object":J}\n */
    char hex[20];
    int hl = snprintf(hex, sizeof(hex), "%zx\r\n", line);
    struct evl *e = xmalloc(sizeof(*e) + (size_t)hl + line + 2);
    char *p = e->data;
    memcpy(p, hex, (size_t)hl);
    p += hl;
    memcpy(p, "{\"type\":\"", 9);
    p += 9;
    memcpy(p, type, tl);
    p += tl;
    memcpy(p, "\",\"object\":", 11);
    p += 11;
    memcpy(p, json, jlen);
    p += jlen;
    memcpy(p, "}\n\r\n", 4);
    p += 4;
    e->len = (size_t)(p - e->data);
    e->line = (size_t)hl;
    e->type = type[0];
    e->lab = e->plab = NULL;
    e->rv = 0;
    e->ns[0] = '\0';
    return e;
}

static struct evl *make_event(const char *type, struct obj *o)
{
    render(o);
    struct evl *e = frame_event(type, o->json, o->json_len);
    e->rv = o->rv;
    snprintf(e->ns, sizeof(e->ns), "%s", o->ns);
    return e;
}

static const char *type_name(char t);

/* The same event as another type (a watch whose selector the object entered or left). */
static struct evl *retype_event(const struct evl *e, const char *type)
{
    /* {"type":"T","object": */
    const char *obj = e->data + e->line + 9 + strlen(type_name(e->type)) + 11;
    size_t jlen = (size_t)(e->data + e->len - 4 - obj); /* "}\n\r\n" */
    struct evl *x = frame_event(type, obj, jlen);
    x->rv = e->rv;
    memcpy(x->ns, e->ns, sizeof(x->ns));
    return x;
}

/* "k\0v\0...\0" of a raw JSON labels object, or NULL when there are none. */
static char *pack_labels(const char *raw)
{
    static struct hp_json j;
    static int init;
    if (!raw)
        return NULL;
    if (!init) {
        hp_json_init(&j);
        init = 1;
    }
    if (hp_json_parse(&j, raw, strlen(raw)) != 0 || !hp_json_is(&j, 0, HP_JSON_OBJECT))
        return NULL;
    struct sb b = {0};
    for (int k = hp_json_first(&j, 0); k >= 0; k = hp_json_next(&j, 0, k)) {
        int kl = hp_json_str_len(&j, k), vl = hp_json_str_len(&j, k + 1);
        if (kl < 0 || vl < 0)
            continue;
        sb_reserve(&b, (size_t)kl + (size_t)vl + 2);
        (void)hp_json_str_copy(&j, k, b.d + b.len, (size_t)kl + 1);
        b.len += (size_t)kl + 1;
        (void)hp_json_str_copy(&j, k + 1, b.d + b.len, (size_t)vl + 1);
        b.len += (size_t)vl + 1;
    }
    if (!b.len)
        return NULL;
    sb_put(&b, "", 1);
    return b.d;
}

static const char *packed_get(const char *p, const char *key)
{
    for (; p && *p; p += strlen(p) + 1) {
        const char *v = p + strlen(p) + 1;
        if (strcmp(p, key) == 0)
            return v;
        p = v;
    }
    return NULL;
}

/* Parses a labelSelector; 0, or -1 for what this server does not take (set-based forms). */
static int sel_parse(const char *text, struct sel *out)
{
    out->n = 0;
    for (const char *p = text; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char part[300];
        if (len >= sizeof(part) || out->n == SEL_MAX)
            return -1;
        memcpy(part, p, len);
        part[len] = '\0';
        p += len + (comma ? 1 : 0);
        char *a = part, *z = part + len;
        while (*a == ' ')
            a++;
        while (z > a && z[-1] == ' ')
            *--z = '\0';
        if (!*a)
            continue;
        if (strchr(a, '(') || strstr(a, " in ") || strstr(a, " notin "))
            return -1;
        enum sel_op op;
        char *key = a, *val = "";
        char *ne = strstr(a, "!="), *eq = strchr(a, '=');
        if (a[0] == '!') {
            op = SEL_ABSENT;
            key = a + 1;
        } else if (ne) {
            op = SEL_NE;
            *ne = '\0';
            val = ne + 2;
        } else if (eq) {
            op = SEL_EQ;
            *eq = '\0';
            val = eq[1] == '=' ? eq + 2 : eq + 1;
        } else {
            op = SEL_EXISTS;
        }
        if (strlen(key) >= sizeof(out->r[0].key) || strlen(val) >= sizeof(out->r[0].val) || !*key)
            return -1;
        out->r[out->n].op = op;
        memcpy(out->r[out->n].key, key, strlen(key) + 1); /* lengths checked above */
        memcpy(out->r[out->n].val, val, strlen(val) + 1);
        out->n++;
    }
    return 0;
}

static int sel_match(const struct sel *s, const char *packed)
{
    for (int i = 0; s && i < s->n; i++) {
        const char *v = packed_get(packed, s->r[i].key);
        switch (s->r[i].op) {
        case SEL_EQ:
            if (!v || strcmp(v, s->r[i].val) != 0)
                return 0;
            break;
        case SEL_NE:
            if (v && strcmp(v, s->r[i].val) == 0)
                return 0;
            break;
        case SEL_EXISTS:
            if (!v)
                return 0;
            break;
        case SEL_ABSENT:
            if (v)
                return 0;
            break;
        }
    }
    return 1;
}

/* What watcher selector s sees of event e: 0 nothing, else the event's type as it sees it
 * (an object entering the selection is ADDED for it, one leaving it DELETED). */
static char sel_view(const struct sel *s, const struct evl *e)
{
    if (!s)
        return e->type;
    int now = sel_match(s, e->lab);
    if (e->type != 'M')
        return now ? e->type : 0;
    int was = sel_match(s, e->plab);
    return now ? (was ? 'M' : 'A') : (was ? 'D' : 0);
}

static const char *type_name(char t)
{
    return t == 'A' ? "ADDED" : t == 'M' ? "MODIFIED" : "DELETED";
}

static void watch_send(struct conn *w, enum kind kind, const struct evl *e)
{
    sb_put(&w->out, e->data, e->len);
    if (w->l) {
        w->l->watch_events[kind]++;
        w->l->watch_bytes[kind] += e->len;
    }
}

/* Sends e to w as w's selector sees it (variants made once per event, in v[3]). */
static void watch_deliver(struct conn *w, enum kind kind, const struct evl *e, struct evl *v[3])
{
    char t = sel_view(w->wsel, e);
    if (!t)
        return;
    if (t == e->type) {
        watch_send(w, kind, e);
        return;
    }
    int i = t == 'A' ? 0 : t == 'M' ? 1 : 2;
    if (!v[i])
        v[i] = retype_event(e, type_name(t));
    watch_send(w, kind, v[i]);
}

static int watch_wants(const struct conn *w, const char *ns)
{
    return !w->wns[0] || strcmp(w->wns, ns) == 0;
}

static void emit(const char *type, struct obj *o)
{
    struct evl *e = make_event(type, o);
    struct evl *v[3] = {NULL, NULL, NULL};
    e->lab = pack_labels(o->labels);
    if (e->type == 'M')
        e->plab = pack_labels(o->elabels);
    free(o->elabels);
    o->elabels = xstrdup(o->labels);
    for (struct conn *w = S.watchers[o->kind], *nx; w; w = nx) {
        nx = w->wnext;
        if (!watch_wants(w, e->ns))
            continue;
        if (w->out.len > MAX_WATCH_BACKLOG) {
            fprintf(stderr, "fakeapi: dropping a watcher that stopped reading\n");
            conn_close(w);
            continue;
        }
        size_t before = w->out.len;
        watch_deliver(w, o->kind, e, v);
        if (w->out.len != before)
            mark_dirty(w);
    }
    for (int i = 0; i < 3; i++)
        evl_free(v[i]);
    ring_push(&S.ring[o->kind], e);
}

static void end_watch(struct conn *c)
{
    sb_puts(&c->out, "0\r\n\r\n");
    mark_dirty(c);
    watch_unlink(c);
    c->wdeadline = 0;
    llhttp_resume(&c->parser); /* the connection may carry the next request */
}

static void on_tick(uv_timer_t *t)
{
    uint64_t now = uv_now(S.loop);
    (void)t;
    for (int k = 0; k < K_N; k++) {
        for (struct conn *w = S.watchers[k], *nx; w; w = nx) {
            nx = w->wnext;
            if (w->wdeadline && now >= w->wdeadline)
                end_watch(w);
        }
    }
}

/* ---- JSON helpers ---- */

/* Appends a value token as JSON text (a string's raw bytes are its escaped form). */
static void put_value(struct sb *b, const struct hp_json *j, int tok)
{
    size_t n;
    const char *raw = hp_json_raw(j, tok, &n);
    if (hp_json_is(j, tok, HP_JSON_STRING)) {
        sb_put(b, "\"", 1);
        sb_put(b, raw, n);
        sb_put(b, "\"", 1);
    } else {
        sb_put(b, raw, n);
    }
}

static char *value_dup(const struct hp_json *j, int tok)
{
    if (tok < 0 || hp_json_is(j, tok, HP_JSON_NULL))
        return NULL;
    struct sb b = {0};
    put_value(&b, j, tok);
    return b.d;
}

static char *str_dup(const struct hp_json *j, int tok)
{
    int n = hp_json_str_len(j, tok);
    if (n < 0 || hp_json_str_has_nul(j, tok))
        return NULL;
    char *s = xmalloc((size_t)n + 1);
    (void)hp_json_str_copy(j, tok, s, (size_t)n + 1);
    return s;
}

/* A JSON merge patch of one object level: keys of patch replace (null removes) keys of old (raw
 * JSON object text or NULL). Returns the new raw text, or NULL when nothing is left (the API
 * server drops empty maps). Values are replaced whole, not merged deeper. */
static char *merge_level(const char *old, const struct hp_json *pj, int patch)
{
    if (patch < 0)
        return xstrdup(old);
    if (!hp_json_is(pj, patch, HP_JSON_OBJECT))
        return value_dup(pj, patch);
    struct sb b = {0};
    char key[512];
    int n = 0;
    sb_put(&b, "{", 1);
    if (old && hp_json_parse(&S.j2, old, strlen(old)) == 0) {
        for (int k = hp_json_first(&S.j2, 0); k >= 0; k = hp_json_next(&S.j2, 0, k)) {
            if (hp_json_str_copy(&S.j2, k, key, sizeof(key)) >= (int)sizeof(key) ||
                hp_json_get(pj, patch, key) < 0) {
                if (n++)
                    sb_put(&b, ",", 1);
                put_value(&b, &S.j2, k);
                sb_put(&b, ":", 1);
                put_value(&b, &S.j2, k + 1);
            }
        }
    }
    for (int k = hp_json_first(pj, patch); k >= 0; k = hp_json_next(pj, patch, k)) {
        if (hp_json_is(pj, k + 1, HP_JSON_NULL))
            continue;
        if (n++)
            sb_put(&b, ",", 1);
        put_value(&b, pj, k);
        sb_put(&b, ":", 1);
        put_value(&b, pj, k + 1);
    }
    sb_put(&b, "}", 1);
    if (!n) {
        sb_free(&b);
        return NULL;
    }
    return b.d;
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 253)
        return 0;
    for (; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.'))
            return 0;
    }
    return 1;
}

/* Parsed fields that depend on spec or rest. */
static void derive(struct obj *o, const struct hp_json *j, int root)
{
    int spec = hp_json_get(j, root, "spec");
    if (o->kind == K_PV) {
        int ref = hp_json_get(j, spec, "claimRef");
        free(o->cref_ns);
        free(o->cref_name);
        free(o->cref_uid);
        o->cref_ns = str_dup(j, hp_json_get(j, ref, "namespace"));
        o->cref_name = str_dup(j, hp_json_get(j, ref, "name"));
        o->cref_uid = str_dup(j, hp_json_get(j, ref, "uid"));
    } else if (o->kind == K_PVC) {
        free(o->volume_name);
        o->volume_name = str_dup(j, hp_json_get(j, spec, "volumeName"));
        if (o->volume_name && !o->volume_name[0]) {
            free(o->volume_name);
            o->volume_name = NULL;
        }
    } else if (o->kind == K_SC) {
        free(o->provisioner);
        o->provisioner = str_dup(j, hp_json_get(j, root, "provisioner"));
        o->wffc = hp_json_str_eq(j, hp_json_get(j, root, "volumeBindingMode"),
                                 "WaitForFirstConsumer");
    }
}

/* Takes metadata (annotations, labels, finalizers), spec and the other top-level members of a
 * parsed body into o (an update replaces them all). */
static void take_body(struct obj *o, const struct hp_json *j)
{
    int meta = hp_json_get(j, 0, "metadata");
    free(o->ann);
    free(o->labels);
    free(o->fins);
    free(o->spec);
    free(o->rest);
    o->ann = value_dup(j, hp_json_get(j, meta, "annotations"));
    o->labels = value_dup(j, hp_json_get(j, meta, "labels"));
    o->fins = value_dup(j, hp_json_get(j, meta, "finalizers"));
    if (o->fins && strcmp(o->fins, "[]") == 0) {
        free(o->fins);
        o->fins = NULL;
    }
    o->spec = value_dup(j, hp_json_get(j, 0, "spec"));
    struct sb rest = {0};
    for (int k = hp_json_first(j, 0); k >= 0; k = hp_json_next(j, 0, k)) {
        if (hp_json_str_eq(j, k, "metadata") || hp_json_str_eq(j, k, "spec") ||
            hp_json_str_eq(j, k, "status") || hp_json_str_eq(j, k, "kind") ||
            hp_json_str_eq(j, k, "apiVersion"))
            continue;
        sb_put(&rest, ",", 1);
        put_value(&rest, j, k);
        sb_put(&rest, ":", 1);
        put_value(&rest, j, k + 1);
    }
    o->rest = rest.d;
    derive(o, j, 0);
}

/* ---- the binder (kube-controller-manager's PV controller, minimally) ---- */

static void changed(struct obj *o, const char *type)
{
    o->rv = ++S.rv;
    touch(o);
    emit(type, o);
}

static void set_phase(struct obj *o, const char *phase)
{
    snprintf(o->phase, sizeof(o->phase), "%s", phase);
    changed(o, "MODIFIED");
}

static struct obj *class_of(const struct obj *claim)
{
    char cls[256] = "";
    if (claim->spec && hp_json_parse(&S.j2, claim->spec, strlen(claim->spec)) == 0)
        (void)hp_json_str_copy(&S.j2, hp_json_get(&S.j2, 0, "storageClassName"), cls,
                               sizeof(cls));
    return cls[0] ? table_get(&S.t[K_SC], "", cls) : NULL;
}

/* A new claim of a class with a provisioner gets the storage-provisioner annotations (for a
 * WaitForFirstConsumer class only once it has a selected node): one write, one event. */
static void binder_claim_added(struct obj *claim)
{
    struct obj *sc = class_of(claim);
    if (!sc || !sc->provisioner || strcmp(sc->provisioner, "kubernetes.io/no-provisioner") == 0)
        return;
    if (claim->ann && strstr(claim->ann, "\"volume.kubernetes.io/storage-provisioner\""))
        return;
    if (sc->wffc && !(claim->ann && strstr(claim->ann, "\"volume.kubernetes.io/selected-node\"")))
        return;
    struct sb p = {0};
    sb_printf(&p,
              "{\"volume.kubernetes.io/storage-provisioner\":\"%s\","
              "\"volume.beta.kubernetes.io/storage-provisioner\":\"%s\"}",
              sc->provisioner, sc->provisioner);
    if (hp_json_parse(&S.j, p.d, p.len) == 0) {
        char *ann = merge_level(claim->ann, &S.j, 0);
        free(claim->ann);
        claim->ann = ann;
        changed(claim, "MODIFIED");
    }
    sb_free(&p);
}

/* After a PV is created or its claim changed: bind, or mark Released / Available. */
static void binder_sync_pv(struct obj *pv)
{
    if (pv->del_ts)
        return;
    if (!pv->cref_name) {
        if (strcmp(pv->phase, "Available") != 0)
            set_phase(pv, "Available");
        return;
    }
    struct obj *claim = table_get(&S.t[K_PVC], pv->cref_ns ? pv->cref_ns : "", pv->cref_name);
    if (!claim || (pv->cref_uid && pv->cref_uid[0] && strcmp(pv->cref_uid, claim->uid) != 0)) {
        if (strcmp(pv->phase, "Released") != 0) {
            set_phase(pv, "Released");
            S.pvs_released++;
        }
        return;
    }
    if (claim->volume_name && strcmp(claim->volume_name, pv->name) != 0)
        return; /* the claim is bound elsewhere */
    if (strcmp(pv->phase, "Bound") != 0) {
        set_phase(pv, "Bound");
        S.pvs_bound++;
    }
    if (!claim->volume_name) {
        /* spec.volumeName and pv.kubernetes.io/bind-completed, then status: two writes. */
        claim->volume_name = xstrdup(pv->name);
        struct sb s = {0};
        size_t sl = claim->spec ? strlen(claim->spec) : 0;
        if (sl > 2 && claim->spec[sl - 1] == '}') {
            sb_put(&s, claim->spec, sl - 1);
            sb_puts(&s, ",");
        } else {
            sb_puts(&s, "{");
        }
        sb_printf(&s, "\"volumeName\":\"%s\"}", pv->name);
        free(claim->spec);
        claim->spec = s.d;
        static const char bc[] = "{\"pv.kubernetes.io/bind-completed\":\"yes\"}";
        if (hp_json_parse(&S.j, bc, sizeof(bc) - 1) == 0) {
            char *ann = merge_level(claim->ann, &S.j, 0);
            free(claim->ann);
            claim->ann = ann;
        }
        changed(claim, "MODIFIED");
    }
    if (strcmp(claim->phase, "Bound") != 0) {
        set_phase(claim, "Bound");
        S.claims_bound++;
        S.t_last_bound = uv_hrtime();
    }
}

static void binder_claim_gone(struct obj *claim)
{
    if (strcmp(claim->phase, "Bound") == 0 && S.claims_bound)
        S.claims_bound--;
    if (!claim->volume_name)
        return;
    struct obj *pv = table_get(&S.t[K_PV], "", claim->volume_name);
    if (pv && pv->cref_uid && strcmp(pv->cref_uid, claim->uid) == 0 && !pv->del_ts &&
        strcmp(pv->phase, "Released") != 0) {
        if (strcmp(pv->phase, "Bound") == 0 && S.pvs_bound)
            S.pvs_bound--;
        set_phase(pv, "Released");
        S.pvs_released++;
    }
}

static void binder_pv_gone(struct obj *pv)
{
    if (strcmp(pv->phase, "Bound") == 0 && S.pvs_bound)
        S.pvs_bound--;
    if (strcmp(pv->phase, "Released") == 0 && S.pvs_released)
        S.pvs_released--;
    if (!pv->cref_name)
        return;
    struct obj *claim = table_get(&S.t[K_PVC], pv->cref_ns ? pv->cref_ns : "", pv->cref_name);
    if (claim && claim->volume_name && strcmp(claim->volume_name, pv->name) == 0 &&
        !claim->del_ts && strcmp(claim->phase, "Lost") != 0) {
        if (strcmp(claim->phase, "Bound") == 0 && S.claims_bound)
            S.claims_bound--;
        set_phase(claim, "Lost");
    }
}

/* ---- object lifecycle ---- */

static struct obj *obj_new(enum kind kind, const char *ns, const char *name)
{
    struct obj *o = calloc(1, sizeof(*o));
    if (!o)
        abort();
    o->kind = kind;
    o->node_idx = -1;
    o->ns = xstrdup(ns);
    o->name = xstrdup(name);
    make_uid(o->uid);
    snprintf(o->ctime, sizeof(o->ctime), "%s", now_str());
    if (kind == K_PVC || kind == K_PV)
        snprintf(o->phase, sizeof(o->phase), "Pending");
    return o;
}

/* Inserts a new object: ADDED, then the binder's reaction. The caller answers first. */
static void obj_added(struct obj *o)
{
    o->seq = S.seq;
    o->rv = ++S.rv;
    table_put(&S.t[o->kind], o);
    emit("ADDED", o);
}

static void after_add(struct obj *o)
{
    if (o->kind == K_PVC)
        binder_claim_added(o);
    else if (o->kind == K_PV) {
        S.pvs_created++;
        S.t_last_pv_created = uv_hrtime();
        binder_sync_pv(o);
    }
}

/* Removes o for good: DELETED (and the answer to c, when given, with the object as deleted),
 * then the binder's reaction; frees it. */
static void obj_remove(struct obj *o, struct conn *c)
{
    o->rv = ++S.rv;
    touch(o);
    table_del(&S.t[o->kind], o);
    emit("DELETED", o);
    if (c)
        respond_obj(c, 200, o);
    if (o->kind == K_PVC) {
        S.t_last_claim_deleted = uv_hrtime();
        binder_claim_gone(o);
    } else if (o->kind == K_PV) {
        S.pvs_deleted++;
        S.t_last_pv_deleted = uv_hrtime();
        binder_pv_gone(o);
    }
    obj_free(o);
}

/* DELETE: an object with finalizers only gets a deletionTimestamp. c (optional) gets the answer. */
static void obj_delete(struct obj *o, struct conn *c)
{
    if (o->fins) {
        if (!o->del_ts) {
            o->del_ts = xstrdup(now_str());
            changed(o, "MODIFIED");
        }
        if (c)
            respond_obj(c, 200, o);
        return;
    }
    obj_remove(o, c);
}

/* ---- request handling ---- */

struct req {
    enum llhttp_method method;
    char *path;    /* NUL-terminated copy of the path (segments split in place) */
    const char *q; /* raw query (no '?'), "" if none */
    char *seg[12];
    int nseg;
};

/* Value of a query parameter copied into out (percent-decoding only %XX). */
static int query_get(const char *q, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
            size_t o = 0;
            for (size_t i = kl + 1; i < len && o + 1 < cap; i++) {
                if (p[i] == '%' && i + 2 < len) {
                    char h[3] = {p[i + 1], p[i + 2], 0};
                    out[o++] = (char)strtol(h, NULL, 16);
                    i += 2;
                } else {
                    out[o++] = p[i] == '+' ? ' ' : p[i];
                }
            }
            out[o] = '\0';
            return 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    if (cap)
        out[0] = '\0';
    return 0;
}

static uint64_t query_u64(const char *q, const char *key)
{
    char v[32];
    if (!query_get(q, key, v, sizeof(v)))
        return 0;
    return strtoull(v, NULL, 10);
}

static int obj_selected(const struct sel *s, const struct obj *o);

static void list_objects(struct conn *c, enum kind kind, const char *ns, const char *q)
{
    char cont[64], selt[600];
    struct sel sel, *sp = NULL;
    if (query_get(q, "labelSelector", selt, sizeof(selt)) && selt[0]) {
        if (sel_parse(selt, &sel) < 0) {
            respond_status(c, 400, NULL, "unable to parse requirement: %s", selt);
            return;
        }
        sp = &sel;
    }
    uint64_t limit = query_u64(q, "limit");
    uint64_t list_rv = S.rv, after = 0;
    if (query_get(q, "continue", cont, sizeof(cont)) && cont[0]) {
        char *dot = strchr(cont, '.');
        if (!dot) {
            respond_status(c, 400, NULL, "invalid continue token");
            return;
        }
        list_rv = strtoull(cont, NULL, 10);
        after = strtoull(dot + 1, NULL, 10);
    }
    struct table *t = &S.t[kind];
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_puts(b, "{\"kind\":\"");
    sb_puts(b, KINDS[kind].kind);
    sb_puts(b, "List\",\"apiVersion\":\"");
    sb_puts(b, KINDS[kind].api_version);
    sb_puts(b, "\",\"metadata\":{\"resourceVersion\":\"");
    sb_u64(b, list_rv);
    sb_puts(b, "\"},\"items\":[");
    size_t meta_end = b->len - 11; /* the '}' closing metadata */
    uint64_t n = 0, last = 0;
    struct obj *o;
    for (o = t->head.next; o != &t->head; o = o->next) {
        if (o->seq <= after || (ns && strcmp(o->ns, ns) != 0))
            continue;
        if (sp && !obj_selected(sp, o))
            continue;
        if (limit && n == limit)
            break;
        render(o);
        if (n++)
            sb_put(b, ",", 1);
        sb_put(b, o->json, o->json_len);
        last = o->seq;
    }
    sb_puts(b, "]}");
    int more = 0;
    for (; o != &t->head; o = o->next) {
        if ((!ns || strcmp(o->ns, ns) == 0) && (!sp || obj_selected(sp, o))) {
            more = 1;
            break;
        }
    }
    if (more) {
        char tok[80];
        int tl = snprintf(tok, sizeof(tok), ",\"continue\":\"%" PRIu64 ".%" PRIu64 "\"", list_rv,
                          last);
        sb_reserve(b, (size_t)tl);
        memmove(b->d + meta_end + (size_t)tl, b->d + meta_end, b->len - meta_end + 1);
        memcpy(b->d + meta_end, tok, (size_t)tl);
        b->len += (size_t)tl;
    }
    if (c->l) {
        c->l->list_items[kind] += n;
        c->l->list_bytes[kind] += b->len;
    }
    respond(c, 200, b->d, b->len);
}

/* Whether selector s selects object o (its labels as they are now). */
static int obj_selected(const struct sel *s, const struct obj *o)
{
    if (!s)
        return 1;
    char *packed = pack_labels(o->labels);
    int m = sel_match(s, packed);
    free(packed);
    return m;
}

static void start_watch(struct conn *c, enum kind kind, const char *ns, const char *q)
{
    char rvs[32], selt[600], b8[8];
    int has_rv = query_get(q, "resourceVersion", rvs, sizeof(rvs)) && rvs[0];
    uint64_t rv = has_rv ? strtoull(rvs, NULL, 10) : 0;
    struct ring *r = &S.ring[kind];
    struct sel *sp = NULL;
    /* sendInitialEvents=true (a streaming list): the current objects as ADDED, then a BOOKMARK
     * annotated k8s.io/initial-events-end, then the watch goes on. */
    int initial = query_get(q, "sendInitialEvents", b8, sizeof(b8)) && !strcmp(b8, "true");
    int bookmarks = query_get(q, "allowWatchBookmarks", b8, sizeof(b8)) && !strcmp(b8, "true");

    if (query_get(q, "labelSelector", selt, sizeof(selt)) && selt[0]) {
        sp = xmalloc(sizeof(*sp));
        if (sel_parse(selt, sp) < 0) {
            free(sp);
            respond_status(c, 400, NULL, "unable to parse requirement: %s", selt);
            return;
        }
    }
    if (initial && !bookmarks) {
        free(sp);
        respond_status(c, 422, "Invalid", "sendInitialEvents requires allowWatchBookmarks");
        return;
    }
    head(c, 200, "OK", "Transfer-Encoding: chunked\r\n\r\n");
    mark_dirty(c);
    if (!initial && rv && rv < r->floor) {
        free(sp);
        struct sb *b = &S.scratch2;
        b->len = 0;
        sb_printf(b,
                  "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                  "\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource "
                  "version: %" PRIu64 " (%" PRIu64 ")\",\"reason\":\"Expired\",\"code\":410}}\n",
                  rv, r->floor + 1);
        sb_printf(&c->out, "%zx\r\n", b->len);
        sb_put(&c->out, b->d, b->len);
        sb_puts(&c->out, "\r\n0\r\n\r\n");
        return;
    }
    c->wsel = sp;
    if (!rv || initial) {
        for (struct obj *o = S.t[kind].head.next; o != &S.t[kind].head; o = o->next) {
            if ((ns && strcmp(o->ns, ns) != 0) || !obj_selected(sp, o))
                continue;
            struct evl *e = make_event("ADDED", o);
            watch_send(c, kind, e);
            evl_free(e);
        }
        if (initial) {
            struct sb *b = &S.scratch2;
            b->len = 0;
            sb_printf(b,
                      "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"%s\",\"apiVersion\":\"%s\","
                      "\"metadata\":{\"resourceVersion\":\"%" PRIu64 "\",\"annotations\":"
                      "{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
                      KINDS[kind].kind, KINDS[kind].api_version, S.rv);
            sb_printf(&c->out, "%zx\r\n", b->len);
            sb_put(&c->out, b->d, b->len);
            sb_puts(&c->out, "\r\n");
        }
    } else {
        /* First event newer than rv (binary search: a ring's rvs increase). */
        size_t lo = 0, hi = r->count;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (ring_at(r, mid)->rv <= rv)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < r->count; i++) {
            struct evl *e = ring_at(r, i);
            struct evl *v[3] = {NULL, NULL, NULL};
            if (!ns || strcmp(e->ns, ns) == 0)
                watch_deliver(c, kind, e, v);
            for (int k = 0; k < 3; k++)
                evl_free(v[k]);
        }
    }
    c->watching = 1;
    c->wkind = kind;
    snprintf(c->wns, sizeof(c->wns), "%s", ns ? ns : "");
    uint64_t timeout = query_u64(q, "timeoutSeconds");
    c->wdeadline = timeout ? uv_now(S.loop) + timeout * 1000 : 0;
    c->wprev = NULL;
    c->wnext = S.watchers[kind];
    if (c->wnext)
        c->wnext->wprev = c;
    S.watchers[kind] = c;
}

static int parse_body(struct conn *c)
{
    if (hp_json_parse(&S.j, c->body.d ? c->body.d : "", c->body.len) != 0 ||
        !hp_json_is(&S.j, 0, HP_JSON_OBJECT)) {
        respond_status(c, 400, NULL, "the body of the request was in an unknown format");
        return -1;
    }
    return 0;
}

static void create_object(struct conn *c, enum kind kind, const char *ns)
{
    char name[254];
    if (parse_body(c))
        return;
    int meta = hp_json_get(&S.j, 0, "metadata");
    if (hp_json_str_copy(&S.j, hp_json_get(&S.j, meta, "name"), name, sizeof(name)) < 0 ||
        !name_ok(name)) {
        respond_status(c, 422, NULL, "%s: metadata.name: Invalid value", KINDS[kind].kind);
        return;
    }
    int bns = hp_json_get(&S.j, meta, "namespace");
    if (bns >= 0 && !hp_json_str_eq(&S.j, bns, ns ? ns : "")) {
        respond_status(c, 400, NULL, "the namespace of the provided object does not match the "
                                     "namespace sent on the request");
        return;
    }
    if (table_get(&S.t[kind], ns ? ns : "", name)) {
        respond_status(c, 409, "AlreadyExists", "%s \\\"%s\\\" already exists",
                       KINDS[kind].resource, name);
        return;
    }
    struct obj *o = obj_new(kind, ns ? ns : "", name);
    take_body(o, &S.j);
    obj_added(o);
    respond_obj(c, 201, o);
    after_add(o);
}

static struct obj *find_or_404(struct conn *c, enum kind kind, const char *ns, const char *name)
{
    struct obj *o = table_get(&S.t[kind], ns ? ns : "", name);
    if (!o)
        respond_status(c, 404, "NotFound", "%s \\\"%s\\\" not found", KINDS[kind].resource, name);
    return o;
}

/* metadata.resourceVersion of the body, when given, must be the object's. */
static int precondition(struct conn *c, struct obj *o)
{
    int rvt = hp_json_path(&S.j, 0, "metadata", "resourceVersion", NULL);
    char rvs[32];
    if (rvt < 0 || hp_json_is(&S.j, rvt, HP_JSON_NULL))
        return 0;
    if (hp_json_str_copy(&S.j, rvt, rvs, sizeof(rvs)) < 0 || strtoull(rvs, NULL, 10) != o->rv) {
        respond_status(c, 409, "Conflict",
                       "Operation cannot be fulfilled on %s \\\"%s\\\": the object has been "
                       "modified; please apply your changes to the latest version and try again",
                       KINDS[o->kind].resource, o->name);
        return -1;
    }
    return 0;
}

/* After an update or patch: a no-op keeps the resourceVersion and sends nothing; a deleting
 * object whose last finalizer went is removed. */
static void finish_change(struct conn *c, struct obj *o, const char *before, size_t before_len)
{
    render(o);
    if (o->json_len == before_len && memcmp(o->json, before, before_len) == 0) {
        respond_obj(c, 200, o);
        return;
    }
    changed(o, "MODIFIED");
    respond_obj(c, 200, o);
    if (o->del_ts && !o->fins) {
        obj_remove(o, NULL);
        return;
    }
    if (o->kind == K_PV)
        binder_sync_pv(o);
}

static void update_object(struct conn *c, struct obj *o)
{
    if (parse_body(c) || precondition(c, o))
        return;
    render(o);
    char *before = o->json;
    size_t before_len = o->json_len;
    o->json = NULL;
    take_body(o, &S.j);
    finish_change(c, o, before, before_len);
    free(before);
}

static void patch_object(struct conn *c, struct obj *o)
{
    if (parse_body(c) || precondition(c, o))
        return;
    render(o);
    char *before = o->json;
    size_t before_len = o->json_len;
    o->json = NULL;
    int meta = hp_json_get(&S.j, 0, "metadata");
    char *v;
    int t;
    if ((t = hp_json_get(&S.j, meta, "annotations")) >= 0) {
        v = merge_level(o->ann, &S.j, t);
        free(o->ann);
        o->ann = v;
    }
    if ((t = hp_json_get(&S.j, meta, "labels")) >= 0) {
        v = merge_level(o->labels, &S.j, t);
        free(o->labels);
        o->labels = v;
    }
    if ((t = hp_json_get(&S.j, meta, "finalizers")) >= 0) {
        free(o->fins);
        o->fins = value_dup(&S.j, t);
        if (o->fins && strcmp(o->fins, "[]") == 0) {
            free(o->fins);
            o->fins = NULL;
        }
    }
    if ((t = hp_json_get(&S.j, 0, "spec")) >= 0) {
        v = merge_level(o->spec, &S.j, t);
        free(o->spec);
        o->spec = v ? v : xstrdup("{}");
        /* derive() reads spec at the root of a document: wrap it. */
        struct sb w = {0};
        sb_puts(&w, "{\"spec\":");
        sb_puts(&w, o->spec);
        sb_puts(&w, "}");
        if (hp_json_parse(&S.j2, w.d, w.len) == 0)
            derive(o, &S.j2, 0);
        sb_free(&w);
    }
    finish_change(c, o, before, before_len);
    free(before);
}

static void count(enum verb v, enum res r)
{
    S.counts[v][r]++;
}

static void handle_events(struct conn *c, const char *name)
{
    /* Events are answered and counted, not stored: the provisioner never reads them back. */
    if (c->parser.method == HTTP_POST && !name) {
        count(V_POST, R_EVENT);
        S.events_created++;
        respond(c, 201, c->body.d ? c->body.d : "{}", c->body.d ? c->body.len : 2);
    } else if (c->parser.method == HTTP_PATCH && name) {
        count(V_PATCH, R_EVENT);
        S.events_patched++;
        respond(c, 200, c->body.d ? c->body.d : "{}", c->body.d ? c->body.len : 2);
    } else {
        count(c->parser.method == HTTP_GET ? V_GET : V_DELETE, R_EVENT);
        respond(c, 200, "{\"kind\":\"EventList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":[]}",
                68);
    }
}

static void handle_resource(struct conn *c, enum kind kind, const char *ns, const char *name,
                            const char *q)
{
    int m = c->parser.method;
    enum res r = (enum res)kind;
    if (!name) {
        if (m == HTTP_GET) {
            char w[8];
            if (query_get(q, "watch", w, sizeof(w)) && (!strcmp(w, "1") || !strcmp(w, "true"))) {
                count(V_WATCH, r);
                start_watch(c, kind, ns, q);
            } else {
                count(V_LIST, r);
                list_objects(c, kind, ns, q);
            }
        } else if (m == HTTP_POST) {
            count(V_POST, r);
            create_object(c, kind, ns);
        } else {
            respond_status(c, 405, NULL, "the server does not allow this method");
        }
        return;
    }
    struct obj *o;
    switch (m) {
    case HTTP_GET:
        count(V_GET, r);
        if ((o = find_or_404(c, kind, ns, name)))
            respond_obj(c, 200, o);
        return;
    case HTTP_PUT:
        count(V_PUT, r);
        if ((o = find_or_404(c, kind, ns, name)))
            update_object(c, o);
        return;
    case HTTP_PATCH:
        count(V_PATCH, r);
        if ((o = find_or_404(c, kind, ns, name)))
            patch_object(c, o);
        return;
    case HTTP_DELETE:
        count(V_DELETE, r);
        if ((o = find_or_404(c, kind, ns, name)))
            obj_delete(o, c);
        return;
    default:
        respond_status(c, 405, NULL, "the server does not allow this method");
    }
}

/* ---- admin ---- */

static void admin_create_claims(struct conn *c, const char *q)
{
    char prefix[64], ns[64], cls[128], node[128], size[32];
    uint64_t n = query_u64(q, "n"), start = query_u64(q, "start");
    if (!query_get(q, "prefix", prefix, sizeof(prefix)) || !prefix[0])
        snprintf(prefix, sizeof(prefix), "claim-");
    if (!query_get(q, "namespace", ns, sizeof(ns)) || !ns[0])
        snprintf(ns, sizeof(ns), "default");
    if (!query_get(q, "class", cls, sizeof(cls)) || !cls[0])
        snprintf(cls, sizeof(cls), "hostpath");
    query_get(q, "node", node, sizeof(node));
    if (!query_get(q, "size", size, sizeof(size)) || !size[0])
        snprintf(size, sizeof(size), "1Mi");
    uint64_t t0 = uv_hrtime(), made = 0;
    char name[160];
    for (uint64_t i = 0; i < n && i < 10000000; i++) {
        snprintf(name, sizeof(name), "%s%06" PRIu64, prefix, start + i);
        if (!name_ok(name) || table_get(&S.t[K_PVC], ns, name))
            continue;
        struct obj *o = obj_new(K_PVC, ns, name);
        struct sb s = {0};
        sb_printf(&s,
                  "{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":"
                  "\"%s\"}},\"storageClassName\":\"%s\",\"volumeMode\":\"Filesystem\"}",
                  size, cls);
        o->spec = s.d;
        if (node[0]) {
            struct sb a = {0};
            sb_printf(&a, "{\"volume.kubernetes.io/selected-node\":\"%s\"}", node);
            o->ann = a.d;
        }
        obj_added(o);
        after_add(o);
        made++;
    }
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b, "{\"created\":%" PRIu64 ",\"t0_ns\":%" PRIu64 ",\"t1_ns\":%" PRIu64 "}", made, t0,
              uv_hrtime());
    respond(c, 200, b->d, b->len);
}

static void admin_delete_claims(struct conn *c, const char *q)
{
    char ns[64];
    int any_ns = !query_get(q, "namespace", ns, sizeof(ns)) || !ns[0];
    uint64_t t0 = uv_hrtime(), n = 0;
    struct table *t = &S.t[K_PVC];
    for (struct obj *o = t->head.next, *nx; o != &t->head; o = nx) {
        nx = o->next;
        if (!any_ns && strcmp(o->ns, ns) != 0)
            continue;
        n++;
        /* obj_delete may free o; its successor is not touched by the binder (PVs only). */
        obj_delete(o, NULL);
    }
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b, "{\"deleted\":%" PRIu64 ",\"t0_ns\":%" PRIu64 ",\"t1_ns\":%" PRIu64 "}", n, t0,
              uv_hrtime());
    respond(c, 200, b->d, b->len);
}

static void admin_stats(struct conn *c)
{
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b,
              "{\"resourceVersion\":%" PRIu64 ",\"claims\":%zu,\"claims_bound\":%" PRIu64
              ",\"pvs\":%zu,\"pvs_bound\":%" PRIu64 ",\"pvs_released\":%" PRIu64
              ",\"pvs_created\":%" PRIu64 ",\"pvs_deleted\":%" PRIu64 ",\"classes\":%zu,"
              "\"events_created\":%" PRIu64 ",\"events_patched\":%" PRIu64
              ",\"t_last_bound_ns\":%" PRIu64 ",\"t_last_pv_created_ns\":%" PRIu64
              ",\"t_last_pv_deleted_ns\":%" PRIu64 ",\"t_last_claim_deleted_ns\":%" PRIu64
              ",\"now_ns\":%" PRIu64 ",\"connections\":%zu,\"connections_max\":%zu,"
              "\"apf\":%s,\"requests\":{",
              S.rv, S.t[K_PVC].count, S.claims_bound, S.t[K_PV].count, S.pvs_bound,
              S.pvs_released, S.pvs_created, S.pvs_deleted, S.t[K_SC].count, S.events_created,
              S.events_patched, S.t_last_bound, S.t_last_pv_created, S.t_last_pv_deleted,
              S.t_last_claim_deleted, uv_hrtime(), S.conns, S.conns_max,
              S.apf ? "true" : "false");
    int n = 0;
    for (int v = 0; v < V_N; v++) {
        for (int r = 0; r < R_N; r++) {
            if (S.counts[v][r])
                sb_printf(b, "%s\"%s %s\":%" PRIu64, n++ ? "," : "", VERBS[v], RESNAMES[r],
                          S.counts[v][r]);
        }
    }
    sb_puts(b, "}}");
    respond(c, 200, b->d, b->len);
}

/* The managedFields a real API server keeps on a bound claim and on one of our PVs (their
 * size is what a watch sends per object, so the populated objects carry them). */
static const char CLAIM_MF[] =
    "[{\"manager\":\"kubectl-client-side-apply\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
    "\"time\":\"2026-11-01T10:00:00Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":"
    "{\"f:annotations\":{\".\":{},\"f:kubectl.kubernetes.io/last-applied-configuration\":{}}},"
    "\"f:spec\":{\"f:accessModes\":{},\"f:resources\":{\"f:requests\":{\".\":{},\"f:storage\":{}}},"
    "\"f:storageClassName\":{},\"f:volumeMode\":{}}}},{\"manager\":\"kube-scheduler\","
    "\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2026-11-01T10:00:01Z\","
    "\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{\"f:annotations\":"
    "{\"f:volume.kubernetes.io/selected-node\":{}}}}},{\"manager\":\"kube-controller-manager\","
    "\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2026-11-01T10:00:02Z\","
    "\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":{\"f:annotations\":"
    "{\"f:pv.kubernetes.io/bind-completed\":{},\"f:volume.beta.kubernetes.io/storage-provisioner\":"
    "{},\"f:volume.kubernetes.io/storage-provisioner\":{}}},\"f:spec\":{\"f:volumeName\":{}}}},"
    "{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
    "\"time\":\"2026-11-01T10:00:02Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":"
    "{\"f:accessModes\":{},\"f:capacity\":{\".\":{},\"f:storage\":{}},\"f:phase\":{}}},"
    "\"subresource\":\"status\"}]";
static const char PV_MF[] =
    "[{\"manager\":\"hostpath-provisioner\",\"operation\":\"Update\",\"apiVersion\":\"v1\","
    "\"time\":\"2026-11-01T10:00:01Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:metadata\":"
    "{\"f:annotations\":{\".\":{},\"f:hostPathProvisionerIdentity\":{},"
    "\"f:hostpath.provisioner/on-delete\":{},\"f:pv.kubernetes.io/provisioned-by\":{}}},"
    "\"f:spec\":{\"f:accessModes\":{},\"f:capacity\":{\".\":{},\"f:storage\":{}},"
    "\"f:claimRef\":{},\"f:hostPath\":{\".\":{},\"f:path\":{},\"f:type\":{}},"
    "\"f:nodeAffinity\":{\".\":{},\"f:required\":{}},\"f:persistentVolumeReclaimPolicy\":{},"
    "\"f:storageClassName\":{},\"f:volumeMode\":{}}}},{\"manager\":\"kube-controller-manager\","
    "\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2026-11-01T10:00:02Z\","
    "\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{\"f:status\":{\"f:phase\":{}}},"
    "\"subresource\":\"status\"}]";

/* A label value for s as the provisioner writes it (hp_label_value): s itself when it is one,
 * else a sanitised prefix and a hash. */
static void label_value(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s), i;
    int ok = n > 0 && n <= 63;
    for (i = 0; ok && i < n; i++) {
        char ch = s[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && ((i == 0 || i == n - 1) || (ch != '-' && ch != '_' && ch != '.')))
            ok = 0;
    }
    if (ok) {
        snprintf(out, cap, "%s", s);
        return;
    }
    uint64_t h = 14695981039346656037ull;
    for (const char *p = s; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    char pre[48];
    size_t k = 0;
    for (i = 0; s[i] && k < 46; i++) {
        char ch = s[i];
        int alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        pre[k++] = alnum || ch == '-' || ch == '.' || ch == '_' ? ch : '_';
    }
    while (k && !((pre[k - 1] >= 'a' && pre[k - 1] <= 'z') || (pre[k - 1] >= 'A' && pre[k - 1] <= 'Z') ||
                  (pre[k - 1] >= '0' && pre[k - 1] <= '9')))
        k--;
    pre[k] = '\0';
    int lead = k && ((pre[0] >= 'a' && pre[0] <= 'z') || (pre[0] >= 'A' && pre[0] <= 'Z') ||
                     (pre[0] >= '0' && pre[0] <= '9'));
    snprintf(out, cap, "%.46s-%016" PRIx64, lead ? pre : "x", h);
}

/* POST /admin/populate?claims=N&nodes=K&root=DIR[&class=][&provisioner=][&prefix=][&labels=1]
 * [&claim_labels=1][&size=]: N bound claims (namespace "default") and their N Bound PVs, spread
 * over nodes node-0000.. node-(K-1) round robin, as our provisioner makes them (identity = node
 * name, hostPath ROOT/<node>/<pv>, node affinity, on-delete annotation). labels=1 puts our node
 * and provisioner labels on the PVs (claim_labels=1 the node label on the claims), as a cluster
 * whose volumes this version made. No watch event is sent (populate before instances start):
 * older resourceVersions become too old to watch from. */
static void admin_populate(struct conn *c, const char *q)
{
    char root[1024], cls[128], prov[254], prefix[64], size[32], lv[64], pv[80], node[64], tmp[64];
    uint64_t n = query_u64(q, "claims"), nodes = query_u64(q, "nodes");
    int labels = query_u64(q, "labels") != 0, claim_labels = query_u64(q, "claim_labels") != 0;
    if (!query_get(q, "root", root, sizeof(root)) || !root[0] || !nodes) {
        respond_status(c, 400, NULL, "populate needs root and nodes");
        return;
    }
    if (!query_get(q, "class", cls, sizeof(cls)) || !cls[0])
        snprintf(cls, sizeof(cls), "hostpath");
    if (!query_get(q, "provisioner", prov, sizeof(prov)) || !prov[0])
        snprintf(prov, sizeof(prov), "hostpath-provisioner.io");
    if (!query_get(q, "prefix", prefix, sizeof(prefix)) || !prefix[0])
        snprintf(prefix, sizeof(prefix), "data-");
    if (!query_get(q, "size", size, sizeof(size)) || !size[0])
        snprintf(size, sizeof(size), "1Gi");
    label_value(prov, lv, sizeof(lv));
    uint64_t made = 0;
    char name[160];
    for (uint64_t i = 0; i < n && i < 10000000; i++) {
        uint64_t ni = i % nodes;
        snprintf(node, sizeof(node), "node-%04" PRIu64, ni);
        snprintf(name, sizeof(name), "%s%07" PRIu64, prefix, i);
        if (table_get(&S.t[K_PVC], "default", name))
            continue;
        struct obj *cl = obj_new(K_PVC, "default", name);
        snprintf(pv, sizeof(pv), "pvc-%s", cl->uid);
        struct sb a = {0};
        sb_printf(&a,
                  "{\"pv.kubernetes.io/bind-completed\":\"yes\",\"volume.beta.kubernetes.io/"
                  "storage-provisioner\":\"%s\",\"volume.kubernetes.io/selected-node\":\"%s\","
                  "\"volume.kubernetes.io/storage-provisioner\":\"%s\"}",
                  prov, node, prov);
        cl->ann = a.d;
        cl->fins = xstrdup("[\"kubernetes.io/pvc-protection\"]");
        if (claim_labels) {
            struct sb l = {0};
            label_value(node, tmp, sizeof(tmp));
            sb_printf(&l, "{\"app\":\"bench\",\"hostpath-provisioner.io/node\":\"%s\"}", tmp);
            cl->labels = l.d;
        } else {
            cl->labels = xstrdup("{\"app\":\"bench\"}");
        }
        struct sb sp = {0};
        sb_printf(&sp,
                  "{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":"
                  "\"%s\"}},\"storageClassName\":\"%s\",\"volumeMode\":\"Filesystem\","
                  "\"volumeName\":\"%s\"}",
                  size, cls, pv);
        cl->spec = sp.d;
        cl->volume_name = xstrdup(pv);
        struct sb st = {0};
        sb_printf(&st, ",\"status\":{\"phase\":\"Bound\",\"accessModes\":[\"ReadWriteOnce\"],"
                       "\"capacity\":{\"storage\":\"%s\"}}", size);
        cl->rest = st.d;
        cl->phase[0] = '\0'; /* status is in rest */
        cl->mf = xstrdup(CLAIM_MF);
        cl->node_idx = (int)ni;

        struct obj *v = obj_new(K_PV, "", pv);
        struct sb va = {0};
        sb_printf(&va,
                  "{\"hostPathProvisionerIdentity\":\"%s\",\"hostpath.provisioner/on-delete\":"
                  "\"delete\",\"pv.kubernetes.io/provisioned-by\":\"%s\"}",
                  node, prov);
        v->ann = va.d;
        v->fins = xstrdup("[\"kubernetes.io/pv-protection\"]");
        if (labels) {
            struct sb l = {0};
            label_value(node, tmp, sizeof(tmp));
            sb_printf(&l, "{\"hostpath-provisioner.io/node\":\"%s\","
                          "\"hostpath-provisioner.io/provisioner\":\"%s\"}", tmp, lv);
            v->labels = l.d;
        }
        struct sb vs = {0};
        sb_printf(&vs,
                  "{\"accessModes\":[\"ReadWriteOnce\"],\"capacity\":{\"storage\":\"%s\"},"
                  "\"claimRef\":{\"kind\":\"PersistentVolumeClaim\",\"namespace\":\"default\","
                  "\"name\":\"%s\",\"uid\":\"%s\",\"apiVersion\":\"v1\",\"resourceVersion\":\"1\"},"
                  "\"hostPath\":{\"path\":\"%s/%s/%s\",\"type\":\"DirectoryOrCreate\"},"
                  "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":"
                  "[{\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"%s\"]}]}]}},"
                  "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"%s\","
                  "\"volumeMode\":\"Filesystem\"}",
                  size, name, cl->uid, root, node, pv, node, cls);
        v->spec = vs.d;
        v->cref_ns = xstrdup("default");
        v->cref_name = xstrdup(name);
        v->cref_uid = xstrdup(cl->uid);
        snprintf(v->phase, sizeof(v->phase), "Bound");
        v->mf = xstrdup(PV_MF);
        v->node_idx = (int)ni;
        cl->seq = v->seq = S.seq;
        cl->rv = ++S.rv;
        v->rv = ++S.rv;
        table_put(&S.t[K_PVC], cl);
        table_put(&S.t[K_PV], v);
        cl->elabels = xstrdup(cl->labels);
        v->elabels = xstrdup(v->labels);
        S.claims_bound++;
        S.pvs_bound++;
        made++;
    }
    /* Nothing was recorded in the watch history: a watch from before now must relist. */
    S.ring[K_PVC].floor = S.ring[K_PV].floor = S.rv;
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b, "{\"created\":%" PRIu64 ",\"resourceVersion\":%" PRIu64 "}", made, S.rv);
    respond(c, 200, b->d, b->len);
}

/* POST /admin/touch?n=M[&node_from=F]: M bound claims (of populated nodes >= F, in creation
 * order, round robin from where the last touch stopped) get an annotation changed: M claim
 * watch events that concern no provisioner. */
static void admin_touch(struct conn *c, const char *q)
{
    static uint64_t counter;
    static struct obj *cursor;
    uint64_t n = query_u64(q, "n"), from = query_u64(q, "node_from"), done = 0;
    struct table *t = &S.t[K_PVC];
    uint64_t t0 = uv_hrtime(), seen = 0;
    struct obj *o = cursor && cursor->kind == K_PVC ? cursor : t->head.next;
    while (done < n && seen < 2 * t->count + 2) {
        if (o == &t->head) {
            o = o->next;
            seen++;
            continue;
        }
        seen++;
        if (o->node_idx >= 0 && (uint64_t)o->node_idx >= from) {
            char p[128];
            snprintf(p, sizeof(p), "{\"bench.hostpath-provisioner.io/touched\":\"%" PRIu64 "\"}",
                     ++counter);
            if (hp_json_parse(&S.j, p, strlen(p)) == 0) {
                char *ann = merge_level(o->ann, &S.j, 0);
                free(o->ann);
                o->ann = ann;
                changed(o, "MODIFIED");
                done++;
            }
        }
        o = o->next;
    }
    cursor = o == &t->head ? NULL : o;
    struct sb *b = &S.scratch2;
    b->len = 0;
    sb_printf(b, "{\"touched\":%" PRIu64 ",\"t0_ns\":%" PRIu64 ",\"t1_ns\":%" PRIu64 "}", done,
              t0, uv_hrtime());
    respond(c, 200, b->d, b->len);
}

/* GET /admin/listeners: what was sent through each listener since the last reset. */
static void admin_listeners(struct conn *c)
{
    struct sb *b = &S.scratch2;
    size_t pending = 0;
    b->len = 0;
    for (size_t k = 0; k < K_N; k++)
        for (struct conn *w = S.watchers[k]; w; w = w->wnext)
            pending += w->out.len + (w->writing ? 1 : 0);
    sb_printf(b, "{\"pending\":%zu,\"listeners\":[", pending);
    for (int i = 0; i < S.nlisteners; i++) {
        const struct listener *l = &S.listeners[i];
        sb_printf(b, "%s{\"port\":%d,\"bytes\":%" PRIu64, i ? "," : "", l->port, l->bytes);
        for (int k = 0; k < K_N; k++)
            sb_printf(b, ",\"%s\":{\"list_items\":%" PRIu64 ",\"list_bytes\":%" PRIu64
                         ",\"watch_events\":%" PRIu64 ",\"watch_bytes\":%" PRIu64 "}",
                      KINDS[k].resource, l->list_items[k], l->list_bytes[k], l->watch_events[k],
                      l->watch_bytes[k]);
        sb_puts(b, "}");
    }
    sb_puts(b, "]}");
    respond(c, 200, b->d, b->len);
}

static void handle_admin(struct conn *c, struct req *r)
{
    int m = c->parser.method;
    const char *what = r->nseg > 1 ? r->seg[1] : "";
    if (!strcmp(what, "claims") && m == HTTP_POST)
        admin_create_claims(c, r->q);
    else if (!strcmp(what, "claims") && m == HTTP_DELETE)
        admin_delete_claims(c, r->q);
    else if (!strcmp(what, "stats") && m == HTTP_GET)
        admin_stats(c);
    else if (!strcmp(what, "populate") && m == HTTP_POST)
        admin_populate(c, r->q);
    else if (!strcmp(what, "touch") && m == HTTP_POST)
        admin_touch(c, r->q);
    else if (!strcmp(what, "listeners") && m == HTTP_GET)
        admin_listeners(c);
    else if (!strcmp(what, "reset") && m == HTTP_POST) {
        memset(S.counts, 0, sizeof(S.counts));
        S.events_created = S.events_patched = 0;
        S.pvs_created = S.pvs_deleted = 0;
        for (int i = 0; i < S.nlisteners; i++) {
            struct listener *l = &S.listeners[i];
            l->bytes = 0;
            memset(l->list_items, 0, sizeof(l->list_items));
            memset(l->list_bytes, 0, sizeof(l->list_bytes));
            memset(l->watch_events, 0, sizeof(l->watch_events));
            memset(l->watch_bytes, 0, sizeof(l->watch_bytes));
        }
        respond(c, 200, "{}", 2);
    } else
        respond_status(c, 404, "NotFound", "no such admin endpoint");
}

static int kind_of(const char *group, const char *resource, enum kind *out)
{
    for (int k = 0; k < K_N; k++) {
        if (strcmp(KINDS[k].resource, resource) == 0 && strcmp(KINDS[k].group, group) == 0) {
            *out = (enum kind)k;
            return 1;
        }
    }
    return 0;
}

static void route(struct conn *c)
{
    struct req r = {.method = c->parser.method};
    char *path = xstrndup(c->url.d ? c->url.d : "/", c->url.d ? c->url.len : 1);
    char *qm = strchr(path, '?');
    r.q = "";
    if (qm) {
        *qm = '\0';
        r.q = c->url.d + (qm - path) + 1;
    }
    r.path = path;
    for (char *p = path; *p && r.nseg < (int)(sizeof(r.seg) / sizeof(r.seg[0]));) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        r.seg[r.nseg++] = p;
        char *sl = strchr(p, '/');
        if (!sl)
            break;
        *sl = '\0';
        p = sl + 1;
    }
    const char *group = "";
    char **rest = NULL;
    int nrest = 0;
    if (r.nseg == 1 && (!strcmp(r.seg[0], "healthz") || !strcmp(r.seg[0], "readyz") ||
                        !strcmp(r.seg[0], "livez"))) {
        respond(c, 200, "\"ok\"", 4);
        goto out;
    }
    if (r.nseg == 1 && !strcmp(r.seg[0], "version")) {
        static const char v[] = "{\"major\":\"1\",\"minor\":\"32\",\"gitVersion\":\"v1.32.0-fakeapi\"}";
        respond(c, 200, v, sizeof(v) - 1);
        goto out;
    }
    if (r.nseg >= 1 && !strcmp(r.seg[0], "admin")) {
        handle_admin(c, &r);
        goto out;
    }
    if (r.nseg >= 3 && !strcmp(r.seg[0], "api") && !strcmp(r.seg[1], "v1")) {
        rest = r.seg + 2;
        nrest = r.nseg - 2;
    } else if (r.nseg >= 4 && !strcmp(r.seg[0], "apis") && !strcmp(r.seg[2], "v1")) {
        group = r.seg[1];
        rest = r.seg + 3;
        nrest = r.nseg - 3;
    }
    const char *ns = NULL, *res = NULL, *name = NULL;
    if (nrest >= 3 && !strcmp(rest[0], "namespaces")) {
        ns = rest[1];
        res = rest[2];
        name = nrest >= 4 ? rest[3] : NULL;
        if (nrest > 4)
            res = NULL;
    } else if (nrest == 2 && !strcmp(rest[0], "namespaces")) {
        struct sb *b = &S.scratch2;
        b->len = 0;
        sb_printf(b, "{\"kind\":\"Namespace\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\"},"
                     "\"status\":{\"phase\":\"Active\"}}", name_ok(rest[1]) ? rest[1] : "x");
        respond(c, 200, b->d, b->len);
        goto out;
    } else if (nrest >= 1 && nrest <= 2) {
        res = rest[0];
        name = nrest == 2 ? rest[1] : NULL;
    }
    enum kind k;
    if (res && !strcmp(group, "") && !strcmp(res, "events")) {
        handle_events(c, name);
    } else if (res && kind_of(group, res, &k) && (ns != NULL) <= KINDS[k].namespaced) {
        if (!ns && KINDS[k].namespaced && (name || c->parser.method != HTTP_GET)) {
            respond_status(c, 404, "NotFound", "the server could not find the requested resource");
        } else {
            handle_resource(c, k, ns, name, r.q);
        }
    } else {
        count(V_GET, R_OTHER);
        respond_status(c, 404, "NotFound", "the server could not find the requested resource");
    }
out:
    free(path);
}

/* ---- HTTP plumbing ---- */

static struct conn *conn_of(llhttp_t *p)
{
    return containerof(p, struct conn, parser);
}

static int on_message_begin(llhttp_t *p)
{
    struct conn *c = conn_of(p);
    c->url.len = 0;
    c->body.len = 0;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = conn_of(p);
    if (c->url.len + len > MAX_URL)
        return HPE_USER;
    sb_put(&c->url, at, len);
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = conn_of(p);
    if (c->body.len + len > MAX_BODY)
        return HPE_USER;
    sb_put(&c->body, at, len);
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct conn *c = conn_of(p);
    c->keep_alive = llhttp_should_keep_alive(p);
    if (!c->url.d)
        sb_put(&c->url, "/", 1);
    route(c);
    if (c->watching || !c->keep_alive)
        return HPE_PAUSED; /* nothing more is parsed on a watch or a closing connection */
    return 0;
}

static const llhttp_settings_t SETTINGS = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char rbuf[READ_BUF]; /* one thread: the data is parsed before the next read */
    (void)h;
    (void)hint;
    *buf = uv_buf_init(rbuf, sizeof(rbuf));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct conn *c = containerof((uv_tcp_t *)s, struct conn, tcp);
    if (n < 0) {
        conn_close(c);
        return;
    }
    if (n == 0 || c->watching || c->close_after_flush)
        return;
    llhttp_errno_t err = llhttp_execute(&c->parser, buf->base, (size_t)n);
    if (err == HPE_OK || err == HPE_PAUSED)
        return;
    c->keep_alive = 0;
    respond_status(c, err == HPE_USER ? 413 : 400, NULL, "%s", llhttp_errno_name(err));
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    if (uv_tcp_init(S.loop, &c->tcp) < 0) {
        free(c);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        S.conns++;
        return;
    }
    S.conns++;
    if (S.conns > S.conns_max)
        S.conns_max = S.conns;
    c->l = server->data;
    (void)uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &SETTINGS);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
        conn_close(c);
}

/* ---- start-up ---- */

static void on_signal(uv_signal_t *h, int sig)
{
    (void)h;
    (void)sig;
    uv_stop(S.loop);
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    fputs(text, f);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return -errno;
    return 0;
}

static void add_class(const char *spec)
{
    /* NAME=PROVISIONER[:WaitForFirstConsumer] */
    const char *eq = strchr(spec, '=');
    if (!eq) {
        fprintf(stderr, "fakeapi: --class NAME=PROVISIONER[:WaitForFirstConsumer]\n");
        exit(2);
    }
    char name[254], prov[254];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - spec), spec);
    snprintf(prov, sizeof(prov), "%s", eq + 1);
    int wffc = 0;
    char *colon = strchr(prov, ':');
    if (colon) {
        wffc = !strcmp(colon + 1, "WaitForFirstConsumer");
        *colon = '\0';
    }
    struct sb b = {0};
    sb_printf(&b,
              "{\"metadata\":{\"name\":\"%s\"},\"provisioner\":\"%s\",\"reclaimPolicy\":\"Delete\","
              "\"volumeBindingMode\":\"%s\"}",
              name, prov, wffc ? "WaitForFirstConsumer" : "Immediate");
    if (!name_ok(name) || hp_json_parse(&S.j, b.d, b.len) != 0) {
        fprintf(stderr, "fakeapi: bad --class %s\n", spec);
        exit(2);
    }
    struct obj *o = obj_new(K_SC, "", name);
    take_body(o, &S.j);
    obj_added(o);
    sb_free(&b);
}

static void usage(void)
{
    fprintf(stderr, "usage: fakeapi [--port N] [--state-dir DIR] [--apf on|off] [--history N]\n"
                    "               [--class NAME=PROVISIONER[:WaitForFirstConsumer]]...\n"
                    "               [--listeners N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *state_dir = NULL;
    int port = 0, nlisteners = 1;
    S.apf = 1;
    S.history = 200000;
    S.loop = uv_default_loop();
    hp_json_init(&S.j);
    hp_json_init(&S.j2);
    for (int k = 0; k < K_N; k++)
        table_init(&S.t[k]);
    S.uid_prefix = (uint32_t)(uv_hrtime() ^ (uint64_t)getpid() << 16);
    snprintf(S.flowschema_uid, sizeof(S.flowschema_uid), "%08" PRIx32 "-fa00-4000-8000-00000000e0e0",
             S.uid_prefix);
    snprintf(S.prioritylevel_uid, sizeof(S.prioritylevel_uid),
             "%08" PRIx32 "-fa00-4000-8000-00000000e1e1", S.uid_prefix);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--port") && v)
            port = (int)strtol(v, NULL, 10), i++;
        else if (!strcmp(a, "--state-dir") && v)
            state_dir = v, i++;
        else if (!strcmp(a, "--apf") && v && (!strcmp(v, "on") || !strcmp(v, "off")))
            S.apf = !strcmp(v, "on"), i++;
        else if (!strcmp(a, "--history") && v)
            S.history = (size_t)strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--class") && v)
            add_class(v), i++;
        else if (!strcmp(a, "--listeners") && v)
            nlisteners = (int)strtol(v, NULL, 10), i++;
        else
            usage();
    }
    if (!S.history)
        S.history = 1;

    if (nlisteners < 1 || nlisteners > 4096)
        usage();
    S.nlisteners = nlisteners;
    S.listeners = calloc((size_t)nlisteners, sizeof(*S.listeners));
    if (!S.listeners)
        abort();
    for (int i = 0; i < nlisteners; i++) {
        struct listener *l = &S.listeners[i];
        struct sockaddr_in addr;
        int rc;
        l->idx = i;
        l->tcp.data = l;
        (void)uv_ip4_addr("127.0.0.1", i == 0 ? port : 0, &addr);
        if ((rc = uv_tcp_init(S.loop, &l->tcp)) < 0 ||
            (rc = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&addr, 0)) < 0 ||
            (rc = uv_listen((uv_stream_t *)&l->tcp, 1024, on_connection)) < 0) {
            fprintf(stderr, "fakeapi: cannot listen on 127.0.0.1:%d: %s\n", port, uv_strerror(rc));
            return 1;
        }
        int alen = sizeof(addr);
        (void)uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&addr, &alen);
        l->port = ntohs(addr.sin_port);
    }
    S.port = S.listeners[0].port;

    (void)uv_prepare_init(S.loop, &S.flusher);
    (void)uv_prepare_start(&S.flusher, on_flush);
    (void)uv_timer_init(S.loop, &S.ticker);
    (void)uv_timer_start(&S.ticker, on_tick, 1000, 1000);
    (void)uv_signal_init(S.loop, &S.sigterm);
    (void)uv_signal_start(&S.sigterm, on_signal, SIGTERM);
    (void)uv_signal_init(S.loop, &S.sigint);
    (void)uv_signal_start(&S.sigint, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);

    if (state_dir) {
        char text[8192], kc[4200];
        snprintf(kc, sizeof(kc), "%s/kubeconfig", state_dir);
        snprintf(text, sizeof(text),
                 "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: "
                 "http://127.0.0.1:%d\n  name: fake\ncontexts:\n- context:\n    cluster: fake\n"
                 "    user: fake\n  name: fake\ncurrent-context: fake\nusers:\n- name: fake\n"
                 "  user:\n    token: fakeapi-token\n",
                 S.port);
        if (write_file(state_dir, "kubeconfig", text) < 0) {
            fprintf(stderr, "fakeapi: cannot write %s: %s\n", kc, strerror(errno));
            return 1;
        }
        /* kubeconfig.<i>: the same through listener i (what a fan-out instance uses). */
        for (int i = 0; nlisteners > 1 && i < nlisteners; i++) {
            char name[64];
            snprintf(name, sizeof(name), "kubeconfig.%d", i);
            snprintf(text, sizeof(text),
                     "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: "
                     "http://127.0.0.1:%d\n  name: fake\ncontexts:\n- context:\n    cluster: fake\n"
                     "    user: fake\n  name: fake\ncurrent-context: fake\nusers:\n- name: fake\n"
                     "  user:\n    token: fakeapi-token\n",
                     S.listeners[i].port);
            if (write_file(state_dir, name, text) < 0) {
                fprintf(stderr, "fakeapi: cannot write %s: %s\n", name, strerror(errno));
                return 1;
            }
        }
        snprintf(text, sizeof(text),
                 "{\"port\": %d, \"url\": \"http://127.0.0.1:%d\", \"pid\": %d, "
                 "\"kubeconfig\": \"%s\", \"listeners\": %d}\n",
                 S.port, S.port, (int)getpid(), kc, nlisteners);
        if (write_file(state_dir, "ready.json", text) < 0) {
            fprintf(stderr, "fakeapi: cannot write ready.json: %s\n", strerror(errno));
            return 1;
        }
    }
    printf("%d\n", S.port);
    fflush(stdout);
    uv_run(S.loop, UV_RUN_DEFAULT);
    return 0;
}
