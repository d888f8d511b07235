/* events: core/v1 Events on claims and volumes, aggregated like client-go's EventCorrelator.
 *
 * Loop thread only. The first occurrence of (object uid, type, reason, message) is POSTed as a
 * new Event named "<object>.<unix nanos hex>"; a repeat within the cache PATCHes count and
 * lastTimestamp of that Event instead (a 404 on the PATCH, when the server has already expired
 * the Event, falls back to a new POST). The cache holds the most recent HP_EVENTS_CACHE entries.
 *
 * One write per Event at a time, as client-go's broadcaster: repeats that come while a write
 * is in flight only count, and one PATCH with the latest count follows when it completes. Over
 * HTTP/2 two writes in flight run concurrently on the server, which may apply count 3 before
 * count 2 (the count goes backwards), or a PATCH before the POST that creates the Event.
 */
#include "hostpath/events.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostpath/buf.h"
#include "hostpath/kube_client.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

#define HP_EVENTS_CACHE 512

struct event_entry {
    uint64_t hash; /* 0 = empty slot */
    char *namespace_;
    char *name; /* the Event object's name */
    unsigned count;
    uint64_t last_used;
    int busy;       /* a write of this Event is in flight */
    char *pending;  /* repeats since then: the Event as a fresh POST body (the 404 fallback) */
    char *pending_reason;
    int pending_warning;
    unsigned pending_n;  /* how many */
    char pending_ts[32]; /* their latest lastTimestamp */
};

struct event_write {
    struct hp_events *events;
    struct hp_kube_req *req;
    struct hp_list link; /* in hp_events.writes */
    char *retry_body; /* for a PATCH that may need to fall back to POST */
    uint64_t hash;    /* the cache entry a PATCH counts for */
    char *retry_path;
    char *reason;
    int warning;
};

struct hp_events {
    struct hp_kube_client *client;
    char *component;
    char *host;
    struct event_entry cache[HP_EVENTS_CACHE];
    uint64_t tick;
    struct hp_list writes; /* in flight */
};

struct hp_events *hp_events_new(struct hp_kube_client *client, const char *component,
                                const char *host)
{
    struct hp_events *e = hp_xcalloc(1, sizeof(*e));
    e->client = client;
    e->component = hp_xstrdup(component);
    e->host = host && *host ? hp_xstrdup(host) : NULL;
    hp_list_init(&e->writes);
    return e;
}

static void write_free(struct event_write *w)
{
    hp_list_remove(&w->link);
    free(w->retry_body);
    free(w->retry_path);
    free(w->reason);
    free(w);
}

void hp_events_free(struct hp_events *e)
{
    if (!e)
        return;
    struct event_write *w;
    while ((w = hp_list_first_entry(&e->writes, struct event_write, link)) != NULL) {
        hp_kube_cancel(w->req);
        write_free(w);
    }
    for (size_t i = 0; i < HP_EVENTS_CACHE; i++) {
        free(e->cache[i].namespace_);
        free(e->cache[i].name);
        free(e->cache[i].pending);
        free(e->cache[i].pending_reason);
    }
    free(e->component);
    free(e->host);
    free(e);
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; s && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    h ^= 0xff; /* field separator */
    h *= 1099511628211ull;
    return h;
}

static void now_rfc3339(char *out, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static struct event_write *start_write(struct hp_events *e, const char *method,
                                       const char *path, const char *body, const char *ctype,
                                       const char *reason, int warning,
                                       const char *fallback_path, const char *fallback_body);

static struct event_entry *cache_find(struct hp_events *e, uint64_t hash)
{
    for (size_t i = 0; hash && i < HP_EVENTS_CACHE; i++)
        if (e->cache[i].hash == hash)
            return &e->cache[i];
    return NULL;
}

static void start_patch(struct hp_events *e, struct event_entry *c, const char *ts,
                        const char *fresh, const char *reason, int warning);

/* The write of cache entry c completed: send the repeats that came meanwhile, if any. */
static void entry_write_done(struct hp_events *e, struct event_entry *c)
{
    if (!c->pending) {
        c->busy = 0;
        return;
    }
    char *fresh = c->pending, *reason = c->pending_reason;
    c->pending = c->pending_reason = NULL;
    c->pending_n = 0;
    start_patch(e, c, c->pending_ts, fresh, reason, c->pending_warning);
    free(fresh);
    free(reason);
}

static void on_write_done(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct event_write *w = data;
    struct hp_events *e = w->events;
    struct event_entry *c = cache_find(e, w->hash); /* NULL once evicted */
    int ok = status == 0 && resp->code >= 200 && resp->code < 300;

    (void)req;
    if (!ok && status == 0 && resp->code == 404 && w->retry_body) {
        /* The aggregated Event expired on the server: create it anew, counting from 1 (and
         * the repeats still pending after that). */
        if (c)
            c->count = 1 + c->pending_n;
        start_write(e, "POST", w->retry_path, w->retry_body, NULL, w->reason, w->warning, NULL,
                    NULL)
            ->hash = w->hash;
        write_free(w);
        return;
    }
    if (!ok) {
        char reason[64] = "", message[256] = "";
        if (status == 0)
            hp_kube_status_parse(resp->body, reason, sizeof(reason), message, sizeof(message));
        hp_log_warn("events: could not write event reason=%s code=%ld error=\"%s\"", w->reason,
                    resp->code, status ? resp->error : message);
    }
    hp_metrics_event(w->warning ? "Warning" : "Normal", w->reason, ok);
    write_free(w);
    if (c)
        entry_write_done(e, c);
}

static struct event_write *start_write(struct hp_events *e, const char *method,
                                       const char *path, const char *body, const char *ctype,
                                       const char *reason, int warning,
                                       const char *fallback_path, const char *fallback_body)
{
    struct event_write *w = hp_xcalloc(1, sizeof(*w));
    w->events = e;
    w->reason = hp_xstrdup(reason);
    w->warning = warning;
    if (fallback_body) {
        w->retry_body = hp_xstrdup(fallback_body);
        w->retry_path = hp_xstrdup(fallback_path);
    }
    hp_list_insert_tail(&e->writes, &w->link);
    w->req = hp_kube_request(e->client, method, path, body, ctype, on_write_done, w);
    return w;
}

static struct event_entry *cache_slot(struct hp_events *e, uint64_t hash, int *found)
{
    struct event_entry *victim = &e->cache[0];
    for (size_t i = 0; i < HP_EVENTS_CACHE; i++) {
        struct event_entry *c = &e->cache[i];
        if (c->hash == hash) {
            *found = 1;
            return c;
        }
        if (c->last_used < victim->last_used)
            victim = c;
    }
    *found = 0;
    free(victim->namespace_);
    free(victim->name);
    free(victim->pending);
    free(victim->pending_reason);
    memset(victim, 0, sizeof(*victim));
    return victim;
}

static char *event_body(struct hp_events *e, const struct hp_object_ref *ref, const char *ns,
                        const char *name, int warning, const char *reason, const char *message,
                        const char *ts)
{
    json_t *involved = json_pack("{s:s, s:s, s:s}", "kind", ref->kind, "apiVersion",
                                 ref->api_version ? ref->api_version : "v1", "name", ref->name);
    if (ref->namespace_ && *ref->namespace_)
        json_object_set_new(involved, "namespace", json_string(ref->namespace_));
    if (ref->uid && *ref->uid)
        json_object_set_new(involved, "uid", json_string(ref->uid));
    if (ref->resource_version && *ref->resource_version)
        json_object_set_new(involved, "resourceVersion", json_string(ref->resource_version));
    json_t *source = json_pack("{s:s}", "component", e->component);
    if (e->host)
        json_object_set_new(source, "host", json_string(e->host));
    json_t *ev = json_pack(
        "{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:o, s:s, s:s, s:i, s:s, s:s}",
        "apiVersion", "v1", "kind", "Event", "metadata", "name", name, "namespace", ns,
        "involvedObject", involved, "reason", reason, "message", message, "type",
        warning ? "Warning" : "Normal", "source", source, "firstTimestamp", ts, "lastTimestamp",
        ts, "count", 1, "reportingComponent", e->component, "reportingInstance",
        e->host ? e->host : "");
    char *body = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    return body;
}

/* PATCHes count and lastTimestamp of cache entry c's Event; fresh is the whole Event to POST
 * instead when the server has expired it (count 1). */
static void start_patch(struct hp_events *e, struct event_entry *c, const char *ts,
                        const char *fresh, const char *reason, int warning)
{
    char *patch = hp_xasprintf("{\"count\":%u,\"lastTimestamp\":\"%s\"}", c->count, ts);
    char *path = hp_xasprintf("/api/v1/namespaces/%s/events/%s", c->namespace_, c->name);
    char *create_path = hp_xasprintf("/api/v1/namespaces/%s/events", c->namespace_);
    c->busy = 1;
    start_write(e, "PATCH", path, patch, "application/strategic-merge-patch+json", reason,
                warning, create_path, fresh)
        ->hash = c->hash;
    free(create_path);
    free(patch);
    free(path);
}

void hp_events_emit(struct hp_events *e, const struct hp_object_ref *ref, int warning,
                    const char *reason, const char *fmt, ...)
{
    char message[1024];
    char ts[32];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    now_rfc3339(ts, sizeof(ts));

    const char *ns = ref->namespace_ && *ref->namespace_ ? ref->namespace_ : "default";
    uint64_t h = 14695981039346656037ull;
    h = fnv1a(h, ref->kind);
    h = fnv1a(h, ns);
    h = fnv1a(h, ref->name);
    h = fnv1a(h, ref->uid);
    h = fnv1a(h, warning ? "W" : "N");
    h = fnv1a(h, reason);
    h = fnv1a(h, message);
    if (h == 0)
        h = 1;

    int found;
    struct event_entry *c = cache_slot(e, h, &found);
    c->last_used = ++e->tick;
    char *create_path = hp_xasprintf("/api/v1/namespaces/%s/events", ns);
    if (found) {
        c->count++;
        char *fresh = event_body(e, ref, ns, c->name, warning, reason, message, ts);
        if (c->busy) { /* counted; one PATCH follows the write in flight */
            free(c->pending);
            free(c->pending_reason);
            c->pending = fresh;
            c->pending_reason = hp_xstrdup(reason);
            c->pending_warning = warning;
            c->pending_n++;
            snprintf(c->pending_ts, sizeof(c->pending_ts), "%s", ts);
        } else {
            start_patch(e, c, ts, fresh, reason, warning);
            free(fresh);
        }
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        c->hash = h;
        c->namespace_ = hp_xstrdup(ns);
        c->name = hp_xasprintf("%.200s.%llx", ref->name,
                               (unsigned long long)now.tv_sec * 1000000000ull +
                                   (unsigned long long)now.tv_nsec);
        c->count = 1;
        c->busy = 1;
        char *body = event_body(e, ref, ns, c->name, warning, reason, message, ts);
        start_write(e, "POST", create_path, body, NULL, reason, warning, NULL, NULL)->hash = h;
        free(body);
    }
    hp_log_v(2, "events: %s %s %s/%s: %s", warning ? "Warning" : "Normal", reason, ns, ref->name,
             message);
    free(create_path);
}
