/* watch: a reflector in the manner of client-go's tools/cache/reflector.go — a paged LIST, then
 * a WATCH from the list's resourceVersion, resumed from the last resourceVersion seen whenever
 * the stream ends, and a fresh LIST when the server says that version is gone (410).
 *
 * Loop thread only. One uv_timer per watch serves as the delay before the next LIST or WATCH
 * (backoff) and, while a stream is open, as a watchdog against a silently dead connection.
 *
 * Restart policy (never a tight loop):
 * - failures counts consecutive unhealthy attempts; a watch stream that delivered an event
 *   (including a BOOKMARK) or stayed open for at least a second resets it.
 * - a stream that ends cleanly and was healthy re-watches at once; any other restart waits
 *   backoff(failures): base * 2^(n-1) capped at max, with "equal jitter" (a random delay in
 *   [d/2, d]).
 * - a relist (410 on the watch, ERROR 410 event, expired continue token, over-long line) runs
 *   at once the first time and backs off when it repeats without a healthy stream in between.
 *
 * Reading the collection (hp_watch_initial): a paged LIST (from etcd, or its first page from the
 * watch cache with resourceVersion=0), or a streaming list: a WATCH with sendInitialEvents=true
 * whose ADDED events up to the BOOKMARK annotated k8s.io/initial-events-end are the collection
 * (client-go's watchList). Either is one replace pass for the handler (on_list_begin, objects,
 * on_list_end). A streaming list that breaks before its end bookmark is started again from
 * scratch, like a LIST whose page failed; a server that refuses one is listed from then on.
 */
#include "hostpath/watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/common.h"
#include "hostpath/kube_client.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

/* ---- line splitter ---- */

/* After an unusually long line the buffer is released instead of kept for the next one. */
#define SPLITTER_KEEP_CAP (256u * 1024)
/* Likewise the reader's tokens after a LIST page or a huge event (20 bytes each: 320 KiB). */
#define JSON_KEEP_TOKENS 16384

void hp_line_splitter_init(struct hp_line_splitter *s, size_t max_line)
{
    hp_buf_init(&s->partial, max_line);
}

void hp_line_splitter_free(struct hp_line_splitter *s)
{
    hp_buf_free(&s->partial);
}

static void splitter_line_done(struct hp_line_splitter *s)
{
    if (s->partial.cap > SPLITTER_KEEP_CAP)
        hp_buf_free(&s->partial);
    else
        hp_buf_reset(&s->partial);
}

int hp_line_splitter_feed(struct hp_line_splitter *s, const char *chunk, size_t len,
                          int (*on_line)(char *line, size_t len, void *data), void *data)
{
    while (len) {
        const char *nl = memchr(chunk, '\n', len);
        size_t n = nl ? (size_t)(nl - chunk) : len;

        if (hp_buf_append(&s->partial, chunk, n)) {
            splitter_line_done(s);
            return -E2BIG;
        }
        if (!nl)
            return 0;
        chunk += n + 1;
        len -= n + 1;

        char *line = s->partial.data;
        size_t l = s->partial.len;
        if (l && line[l - 1] == '\r')
            line[--l] = '\0';
        int rc = l ? on_line(line, l, data) : 0;
        splitter_line_done(s);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- reflector ---- */

enum wstate { W_WAITING, W_LISTING, W_WATCHING, W_STOPPED };
enum next_action { NEXT_LIST, NEXT_WATCH };
/* END_NO_STREAM: a server that ignored sendInitialEvents (older than 1.27: a plain bookmark came
 * first, where a server that streams sends the end of the initial events before any other). */
enum end_reason { END_NONE, END_RELIST, END_FAIL, END_NO_STREAM };

struct hp_watch {
    uv_loop_t *loop;
    struct hp_kube_client *client;
    char *name;
    char *path;
    char sep; /* '?' or '&' before our query parameters */
    char *lsel, *fsel; /* labelSelector, fieldSelector, or NULL */
    enum hp_watch_initial initial; /* how the next LIST is read (after fallbacks) */
    int page_rv0;  /* the LIST page in flight asked for resourceVersion=0 */
    int streaming; /* a streaming list is in flight: its end bookmark has not come yet */
    int stream_begun; /* ... and on_list_begin was called for it */
    struct hp_watch_handler handler;
    void *data;
    struct hp_watch_opts opts;

    uv_timer_t timer;
    enum wstate state;
    enum next_action next;
    struct hp_kube_req *req;

    char *rv;      /* last resourceVersion seen; "" before the first list */
    size_t rv_cap; /* bytes allocated for rv: events rewrite it in place */
    char *list_rv; /* resourceVersion of the LIST in progress */
    char *cont;    /* continue token of the next page, or NULL */
    unsigned page; /* pages of the LIST in progress delivered so far */
    unsigned limit; /* objects asked for per page now (opts.page_limit, less after big pages) */
    int synced;
    unsigned failures;
    uint64_t rng;

    /* Reads LIST pages and watch lines; its tokens are reused from one line to the next. */
    struct hp_json json;

    /* Current watch stream. */
    struct hp_line_splitter splitter;
    enum end_reason end;
    uint64_t stream_start_ms;
    unsigned stream_events;

    hp_close_cb close_cb;
    void *close_data;
};

static void start_list(struct hp_watch *w);
static void start_watch(struct hp_watch *w);

static uint64_t now_ms(struct hp_watch *w)
{
    return hp_clock_now(&w->opts.clock, uv_now(w->loop));
}

static uint64_t rand64(struct hp_watch *w)
{
    /* xorshift64*: jitter only, not security. */
    uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint64_t backoff_ms(struct hp_watch *w, unsigned n)
{
    uint64_t d = w->opts.backoff_base_ms;

    for (unsigned i = 1; i < n && d < w->opts.backoff_max_ms; i++)
        d *= 2;
    if (d > w->opts.backoff_max_ms)
        d = w->opts.backoff_max_ms;
    return d / 2 + (d / 2 ? rand64(w) % (d / 2 + 1) : 0);
}

/* Copy of a string token, or NULL when tok is not a string. Caller frees. */
static char *tok_dup(const struct hp_json *j, int tok)
{
    int n = hp_json_str_len(j, tok);
    char *s;

    if (n < 0)
        return NULL;
    s = hp_xmalloc((size_t)n + 1);
    (void)hp_json_str_copy(j, tok, s, (size_t)n + 1);
    return s;
}

/* Room for an n-byte resourceVersion in w->rv (its old content is lost when it grows). */
static void rv_reserve(struct hp_watch *w, size_t n)
{
    if (n + 1 > w->rv_cap) {
        free(w->rv);
        w->rv_cap = n + 1 < 32 ? 32 : n + 1;
        w->rv = hp_xmalloc(w->rv_cap);
    }
}

/* w->rv = s[0..n), in place when it fits: every watch event carries a new resourceVersion. */
static void set_rv(struct hp_watch *w, const char *s, size_t n)
{
    rv_reserve(w, n);
    memcpy(w->rv, s, n);
    w->rv[n] = '\0';
}

/* obj.metadata.resourceVersion, when a non-empty string, becomes w->rv. */
static void take_rv(struct hp_watch *w, const struct hp_json *j, int obj)
{
    int tok = hp_json_path(j, obj, "metadata", "resourceVersion", NULL);
    int n = hp_json_str_len(j, tok);

    if (n <= 0)
        return;
    rv_reserve(w, (size_t)n);
    (void)hp_json_str_copy(j, tok, w->rv, w->rv_cap);
}

static void on_timer(uv_timer_t *t);

static void schedule(struct hp_watch *w, enum next_action next, uint64_t delay)
{
    w->state = W_WAITING;
    w->next = next;
    (void)uv_timer_start(&w->timer, on_timer, delay, 0); /* cannot fail on an open timer */
}

/* A relist runs at once the first time; repeated without a healthy stream, it backs off. */
static void schedule_relist(struct hp_watch *w)
{
    uint64_t delay = w->failures ? backoff_ms(w, w->failures) : 0;

    w->failures++;
    hp_metrics_watch_relist(w->name);
    free(w->cont);
    w->cont = NULL;
    schedule(w, NEXT_LIST, delay);
}

static void schedule_failure(struct hp_watch *w, enum next_action next)
{
    w->failures++;
    uint64_t delay = backoff_ms(w, w->failures);
    hp_log_v(2, "watch: retrying resource=%s in %llums failures=%u", w->name,
             (unsigned long long)delay, w->failures);
    schedule(w, next, delay);
}

static void log_http_failure(struct hp_watch *w, const char *what, int status,
                             const struct hp_kube_response *resp)
{
    char reason[128], message[256];

    if (status < 0) {
        /* kube_client's text says what was tried and the likely cause. */
        hp_log_warn("watch: %s failed resource=%s err=\"%s\"", what, w->name,
                    resp->error ? resp->error : strerror(-status));
        return;
    }
    hp_kube_status_parse(resp->body, reason, sizeof(reason), message, sizeof(message));
    /* kube_client said once what to check for 401 and 403: every retry is not news. */
    if (resp->code == 401 || resp->code == 403)
        hp_log_v(2, "watch: %s failed resource=%s code=%ld reason=%s message=\"%s\"", what,
                 w->name, resp->code, reason, message);
    else
        hp_log_warn("watch: %s failed resource=%s code=%ld reason=%s message=\"%s\"", what,
                    w->name, resp->code, reason, message);
}

/* ---- LIST ---- */

/* Delivers one page. Returns 0, or -EBADMSG when the body is not a list, or -ECANCELED when a
 * handler stopped the watch. */
static int deliver_page(struct hp_watch *w, const struct hp_kube_response *resp)
{
    struct hp_json *j = &w->json;
    int rc = hp_json_parse(j, resp->body, resp->body_len);
    int items = hp_json_get(j, 0, "items"), meta = hp_json_get(j, 0, "metadata"), item;

    if (rc || !hp_json_is(j, 0, HP_JSON_OBJECT) ||
        !(hp_json_is(j, items, HP_JSON_ARRAY) || hp_json_is(j, items, HP_JSON_NULL))) {
        hp_log_warn("watch: list body is not a list resource=%s error=%s at=%zu", w->name,
                    rc ? j->err : "no items", rc ? j->err_pos : (size_t)0);
        hp_json_trim(j, JSON_KEEP_TOKENS);
        return -EBADMSG;
    }
    int rv = hp_json_get(j, meta, "resourceVersion");
    if (hp_json_str_len(j, rv) > 0) {
        free(w->list_rv);
        w->list_rv = tok_dup(j, rv);
    }
    int cont = hp_json_get(j, meta, "continue");
    free(w->cont);
    w->cont = hp_json_str_len(j, cont) > 0 ? tok_dup(j, cont) : NULL;

    rc = 0;
    if (w->page++ == 0 && w->handler.on_list_begin) {
        w->handler.on_list_begin(w, w->data);
        if (w->state == W_STOPPED)
            rc = -ECANCELED;
    }
    for (item = hp_json_first(j, items); !rc && item >= 0; item = hp_json_next(j, items, item)) {
        if (!hp_json_is(j, item, HP_JSON_OBJECT))
            continue;
        if (w->handler.on_object)
            w->handler.on_object(w, HP_WATCH_ADDED, j, item, w->data);
        if (w->state == W_STOPPED)
            rc = -ECANCELED;
    }
    hp_json_trim(j, JSON_KEEP_TOKENS); /* a page's tokens are not kept for the watch lines */
    return rc;
}

static void on_list_done(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                         void *data)
{
    struct hp_watch *w = data;

    (void)req;
    w->req = NULL;
    if (status == -E2BIG && w->page_rv0) {
        /* The watch cache ignored the limit (before Kubernetes 1.33 it does for
         * resourceVersion=0) and the whole collection is more than a page may be: read it from
         * etcd, paged, from now on. */
        hp_log_info("watch: the watch cache answered a list larger than %zu bytes without "
                    "paging it; listing from etcd, paged, from now on resource=%s",
                    w->opts.max_page_bytes, w->name);
        w->initial = HP_WATCH_INITIAL_LIST;
        start_list(w);
        return;
    }
    if (status == -E2BIG && w->limit > 1) {
        /* Other tenants' big objects: ask for fewer per page, so that no page body is ever
         * held whole beyond max_page_bytes (memory is bound by the page, not the cluster). */
        w->limit = w->limit / 4 ? w->limit / 4 : 1;
        hp_log_info("watch: list page larger than %zu bytes, asking for %u objects per page "
                    "resource=%s",
                    w->opts.max_page_bytes, w->limit, w->name);
        start_list(w);
        return;
    }
    if (status < 0 || resp->code != 200) {
        if (status == 0 && resp->code == 410 && w->cont) {
            hp_log_info("watch: list continue token expired, listing again resource=%s", w->name);
            schedule_relist(w);
            return;
        }
        log_http_failure(w, "list", status, resp);
        free(w->cont);
        w->cont = NULL;
        schedule_failure(w, NEXT_LIST);
        return;
    }
    /* Small pages again once the big objects are behind us. */
    if (w->limit < w->opts.page_limit && resp->body_len < w->opts.max_page_bytes / 8)
        w->limit = w->limit * 2 < w->opts.page_limit ? w->limit * 2 : w->opts.page_limit;
    int rc = deliver_page(w, resp);
    if (rc == -ECANCELED)
        return; /* stopped by a handler */
    if (rc) {
        free(w->cont);
        w->cont = NULL;
        schedule_failure(w, NEXT_LIST);
        return;
    }
    if (w->cont) {
        start_list(w);
        return;
    }
    set_rv(w, w->list_rv ? w->list_rv : "", w->list_rv ? strlen(w->list_rv) : 0);
    w->synced = 1;
    hp_log_v(2, "watch: listed resource=%s resourceVersion=%s pages=%u", w->name, w->rv, w->page);
    if (w->handler.on_list_end) {
        w->handler.on_list_end(w, w->data);
        if (w->state == W_STOPPED)
            return;
    }
    start_watch(w);
}

/* The selectors, as query parameters after the first. */
static void append_filters(const struct hp_watch *w, struct hp_buf *q)
{
    if (w->lsel) {
        (void)hp_buf_appends(q, "&labelSelector=");
        (void)hp_buf_append_urlenc(q, w->lsel);
    }
    if (w->fsel) {
        (void)hp_buf_appends(q, "&fieldSelector=");
        (void)hp_buf_append_urlenc(q, w->fsel);
    }
}

static void start_stream(struct hp_watch *w);

/* Starts (cont == NULL) or continues a LIST; or starts a streaming list. */
static void start_list(struct hp_watch *w)
{
    struct hp_buf q;

    if (w->initial == HP_WATCH_INITIAL_STREAM && !w->cont) {
        start_stream(w);
        return;
    }
    hp_buf_init(&q, 0);
    (void)hp_buf_printf(&q, "%s%climit=%u", w->path, w->sep, w->limit);
    append_filters(w, &q);
    w->page_rv0 = 0;
    if (w->cont) {
        (void)hp_buf_appends(&q, "&continue=");
        (void)hp_buf_append_urlenc(&q, w->cont);
    } else {
        w->page = 0;
        free(w->list_rv);
        w->list_rv = NULL;
        if (w->initial == HP_WATCH_INITIAL_CACHE) {
            /* Any version the watch cache has: no read from etcd. Continue pages carry their
             * own version in the token. */
            (void)hp_buf_appends(&q, "&resourceVersion=0");
            w->page_rv0 = 1;
        }
    }
    w->state = W_LISTING;
    w->req = hp_kube_request(w->client, "GET", q.data, NULL, NULL, on_list_done, w);
    hp_kube_req_set_max_body(w->req, w->opts.max_page_bytes);
    hp_buf_free(&q);
}

/* ---- WATCH ---- */

static int is_gone(const struct hp_json *j, int status)
{
    int reason = hp_json_get(j, status, "reason");
    int64_t code;

    if (hp_json_int(j, hp_json_get(j, status, "code"), &code) == 0 && code == 410)
        return 1;
    return hp_json_str_eq(j, reason, "Expired") || hp_json_str_eq(j, reason, "Gone");
}

static void malformed(struct hp_watch *w, const char *why)
{
    hp_log_warn("watch: skipping malformed event resource=%s: %s", w->name, why);
    hp_metrics_watch_malformed(w->name);
}

/* The BOOKMARK that ends a streaming list's initial events. */
static int initial_events_end(const struct hp_json *j, int obj)
{
    int ann = hp_json_path(j, obj, "metadata", "annotations", NULL);
    return hp_json_str_eq(j, hp_json_get(j, ann, "k8s.io/initial-events-end"), "true");
}

/* A streaming list's initial events are all in: the handler is in sync as of w->rv, and the
 * stream goes on as a watch. Returns nonzero when a handler stopped the watch. */
static int stream_listed(struct hp_watch *w)
{
    w->streaming = 0;
    if (!w->stream_begun && w->handler.on_list_begin) {
        w->handler.on_list_begin(w, w->data); /* an empty collection */
        if (w->state == W_STOPPED)
            return 1;
    }
    w->stream_begun = 0;
    w->synced = 1;
    hp_log_v(2, "watch: listed (streaming) resource=%s resourceVersion=%s", w->name, w->rv);
    if (w->handler.on_list_end)
        w->handler.on_list_end(w, w->data);
    return w->state == W_STOPPED;
}

/* One watch event line. Returns nonzero to end the stream (w->end says why, or stopped). */
static int on_event_line(char *line, size_t len, void *data)
{
    struct hp_watch *w = data;
    struct hp_json *j = &w->json;
    int type, obj;
    enum hp_watch_type t;

    hp_json_trim(j, JSON_KEEP_TOKENS); /* what an unusually large previous line left */
    if (hp_json_parse(j, line, len) != 0) {
        char why[96];
        snprintf(why, sizeof(why), "%s at byte %zu", j->err, j->err_pos);
        malformed(w, why);
        return 0;
    }
    type = hp_json_get(j, 0, "type");
    obj = hp_json_get(j, 0, "object");
    if (!hp_json_is(j, type, HP_JSON_STRING) || !hp_json_is(j, obj, HP_JSON_OBJECT)) {
        malformed(w, "no type or object");
        return 0;
    }
    if (hp_json_str_eq(j, type, "ADDED"))
        t = HP_WATCH_ADDED;
    else if (hp_json_str_eq(j, type, "MODIFIED"))
        t = HP_WATCH_MODIFIED;
    else if (hp_json_str_eq(j, type, "DELETED"))
        t = HP_WATCH_DELETED;
    else if (hp_json_str_eq(j, type, "BOOKMARK")) {
        take_rv(w, j, obj);
        w->stream_events++;
        if (w->streaming) {
            if (initial_events_end(j, obj))
                return stream_listed(w);
            w->end = END_NO_STREAM;
            return 1;
        }
        return 0;
    } else if (hp_json_str_eq(j, type, "ERROR")) {
        char msg[256];
        int64_t code = 0;
        (void)hp_json_int(j, hp_json_get(j, obj, "code"), &code); /* stays 0 when absent */
        if (hp_json_str_copy(j, hp_json_get(j, obj, "message"), msg, sizeof(msg)) < 0)
            msg[0] = '\0';
        w->end = is_gone(j, obj) ? END_RELIST : END_FAIL;
        hp_log_info("watch: server ended the watch resource=%s code=%lld message=\"%s\"", w->name,
                    (long long)code, msg);
        return 1;
    } else {
        malformed(w, "unknown event type");
        return 0;
    }
    take_rv(w, j, obj);
    w->stream_events++;
    if (w->streaming && !w->stream_begun) {
        w->stream_begun = 1;
        if (w->handler.on_list_begin)
            w->handler.on_list_begin(w, w->data);
        if (w->state == W_STOPPED)
            return 1;
    }
    if (w->handler.on_object)
        w->handler.on_object(w, t, j, obj, w->data);
    return w->state == W_STOPPED;
}

static int on_watch_data(struct hp_kube_req *req, const char *chunk, size_t len, void *data)
{
    struct hp_watch *w = data;

    (void)req;
    int rc = hp_line_splitter_feed(&w->splitter, chunk, len, on_event_line, w);

    if (rc == -E2BIG) {
        hp_log_warn("watch: event longer than %u bytes, listing again resource=%s",
                    (unsigned)HP_WATCH_MAX_LINE, w->name);
        w->end = END_RELIST;
    }
    return rc != 0;
}

/* 504 "Too large resource version" (details.causes[].reason ResourceVersionTooLarge). */
static int too_large_rv(const struct hp_kube_response *resp)
{
    struct hp_json j;
    char msg[256];
    int causes, c, found = 0;

    hp_json_init(&j);
    if (resp->body && hp_json_parse(&j, resp->body, resp->body_len) == 0) {
        found = hp_json_str_copy(&j, hp_json_get(&j, 0, "message"), msg, sizeof(msg)) >= 0 &&
                strstr(msg, "Too large resource version") != NULL;
        causes = hp_json_path(&j, 0, "details", "causes", NULL);
        for (c = hp_json_first(&j, causes); c >= 0; c = hp_json_next(&j, causes, c)) {
            if (hp_json_str_eq(&j, hp_json_get(&j, c, "reason"), "ResourceVersionTooLarge"))
                found = 1;
        }
    }
    hp_json_free(&j);
    return found;
}

static void on_watch_done(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                          void *data)
{
    struct hp_watch *w = data;
    enum end_reason end = w->end;
    /* An error answer is never a healthy stream, however long the server took to send it. */
    int http_error = status == 0 && (resp->code < 200 || resp->code >= 300);
    int was_streaming = w->streaming;
    int healthy = !http_error && (w->stream_events > 0 || now_ms(w) - w->stream_start_ms >= 1000);
    enum next_action retry = NEXT_WATCH;

    (void)req;
    w->req = NULL;
    (void)uv_timer_stop(&w->timer); /* the watchdog */
    if (w->splitter.partial.len)
        hp_log_warn("watch: stream ended inside an event resource=%s", w->name);
    hp_line_splitter_free(&w->splitter);
    if (healthy)
        w->failures = 0;
    hp_metrics_watch_restart(w->name);

    w->streaming = 0;
    w->stream_begun = 0;
    if (was_streaming && (end == END_NO_STREAM ||
                          (http_error && (resp->code == 400 || resp->code == 422)))) {
        /* No streaming lists here (the WatchList feature is off, or the server is older). */
        if (end == END_NO_STREAM)
            hp_log_info("watch: the API server does not send streaming lists (a bookmark came "
                        "before the end of the initial events); listing from its watch cache "
                        "instead resource=%s",
                        w->name);
        else
            hp_log_info("watch: the API server refused a streaming list (code=%ld); listing "
                        "from its watch cache instead resource=%s",
                        resp->code, w->name);
        w->initial = HP_WATCH_INITIAL_CACHE;
        schedule(w, NEXT_LIST, 0);
        return;
    }
    if (was_streaming && end == END_NONE)
        end = status == 0 && resp->code == 410 ? END_RELIST : END_FAIL;
    if (end == END_NONE) {
        if (status == 0 && resp->code == 410)
            end = END_RELIST;
        else if (status < 0 || http_error) {
            log_http_failure(w, "watch", status, resp);
            end = END_FAIL;
            /* A resourceVersion newer than the server's (a server restored or restarted
             * with a shorter history) never becomes valid by retrying the watch: list again
             * after the backoff, as client-go's reflector does. */
            if (http_error && too_large_rv(resp))
                retry = NEXT_LIST;
        }
    }
    switch (end) {
    case END_RELIST:
        hp_log_info("watch: listing again resource=%s resourceVersion=%s", w->name, w->rv);
        schedule_relist(w);
        return;
    case END_FAIL:
        if (was_streaming) {
            /* The collection was not all in: it is read again from the start. */
            if (http_error || status < 0)
                log_http_failure(w, "streaming list", status, resp);
            else
                hp_log_warn("watch: streaming list ended before its last object resource=%s",
                            w->name);
            schedule_failure(w, NEXT_LIST);
            return;
        }
        if (retry == NEXT_LIST)
            hp_metrics_watch_relist(w->name);
        schedule_failure(w, retry);
        return;
    case END_NONE:
    case END_NO_STREAM: /* handled above */
        break;
    }
    if (healthy) {
        hp_log_v(3, "watch: stream closed, resuming resource=%s resourceVersion=%s", w->name,
                 w->rv);
        schedule(w, NEXT_WATCH, 0);
    } else {
        /* A stream that closes at once without an event is a failure in disguise. */
        schedule_failure(w, NEXT_WATCH);
    }
}

static void start_watch(struct hp_watch *w)
{
    struct hp_buf q;
    unsigned tmin = w->opts.timeout_min_s;
    unsigned timeout = tmin + (unsigned)(rand64(w) % tmin);

    hp_buf_init(&q, 0);
    (void)hp_buf_printf(&q, "%s%cwatch=1&allowWatchBookmarks=true", w->path, w->sep);
    append_filters(w, &q);
    if (w->rv && w->rv[0]) {
        (void)hp_buf_appends(&q, "&resourceVersion=");
        (void)hp_buf_append_urlenc(&q, w->rv);
    }
    (void)hp_buf_printf(&q, "&timeoutSeconds=%u", timeout);
    hp_line_splitter_free(&w->splitter);
    hp_line_splitter_init(&w->splitter, HP_WATCH_MAX_LINE);
    w->end = END_NONE;
    w->stream_events = 0;
    w->stream_start_ms = now_ms(w);
    w->state = W_WATCHING;
    w->req = hp_kube_stream(w->client, q.data, on_watch_data, on_watch_done, w);
    hp_buf_free(&q);
    /* Watchdog: the server ends the stream after timeoutSeconds; a connection that died
     * without a reset would otherwise hold the watch forever. */
    (void)uv_timer_start(&w->timer, on_timer, (uint64_t)timeout * 1000 + 60000, 0);
}

/* A streaming list: a WATCH whose first events are the collection (see the top comment). Its
 * resourceVersion is unset: the collection as of now (a consistent read, served by the watch
 * cache). */
static void start_stream(struct hp_watch *w)
{
    struct hp_buf q;
    unsigned tmin = w->opts.timeout_min_s;
    unsigned timeout = tmin + (unsigned)(rand64(w) % tmin);

    hp_buf_init(&q, 0);
    (void)hp_buf_printf(&q,
                        "%s%cwatch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                        "&allowWatchBookmarks=true",
                        w->path, w->sep);
    append_filters(w, &q);
    (void)hp_buf_printf(&q, "&timeoutSeconds=%u", timeout);
    hp_line_splitter_free(&w->splitter);
    hp_line_splitter_init(&w->splitter, HP_WATCH_MAX_LINE);
    free(w->cont);
    w->cont = NULL;
    w->page = 0;
    w->end = END_NONE;
    w->stream_events = 0;
    w->stream_start_ms = now_ms(w);
    w->streaming = 1;
    w->stream_begun = 0;
    w->state = W_WATCHING;
    w->req = hp_kube_stream(w->client, q.data, on_watch_data, on_watch_done, w);
    hp_buf_free(&q);
    (void)uv_timer_start(&w->timer, on_timer, (uint64_t)timeout * 1000 + 60000, 0);
}

static void on_timer(uv_timer_t *t)
{
    struct hp_watch *w = hp_container_of(t, struct hp_watch, timer);

    switch (w->state) {
    case W_WATCHING:
        hp_log_warn("watch: stream outlived its timeout, restarting resource=%s", w->name);
        hp_kube_cancel(w->req);
        w->req = NULL;
        hp_line_splitter_free(&w->splitter);
        hp_metrics_watch_restart(w->name);
        schedule_failure(w, w->streaming ? NEXT_LIST : NEXT_WATCH);
        w->streaming = 0;
        w->stream_begun = 0;
        return;
    case W_WAITING:
        if (w->next == NEXT_LIST)
            start_list(w);
        else
            start_watch(w);
        return;
    case W_LISTING:
    case W_STOPPED:
        return;
    }
}

struct hp_watch *hp_watch_new(uv_loop_t *loop, struct hp_kube_client *client, const char *name,
                                const char *path, const struct hp_watch_handler *handler,
                                void *data, const struct hp_watch_opts *opts)
{
    struct hp_watch *w = hp_xcalloc(1, sizeof(*w));

    w->loop = loop;
    w->client = client;
    w->name = hp_xstrdup(name);
    w->path = hp_xstrdup(path);
    w->sep = strchr(path, '?') ? '&' : '?';
    w->handler = *handler;
    w->data = data;
    if (opts)
        w->opts = *opts;
    w->lsel = w->opts.label_selector && *w->opts.label_selector
                  ? hp_xstrdup(w->opts.label_selector)
                  : NULL;
    w->fsel = w->opts.field_selector && *w->opts.field_selector
                  ? hp_xstrdup(w->opts.field_selector)
                  : NULL;
    w->opts.label_selector = w->opts.field_selector = NULL; /* the copies above are used */
    w->initial = w->opts.initial;
    if (!w->opts.backoff_base_ms)
        w->opts.backoff_base_ms = 1000;
    if (!w->opts.backoff_max_ms)
        w->opts.backoff_max_ms = 30000;
    if (w->opts.backoff_max_ms < w->opts.backoff_base_ms)
        w->opts.backoff_max_ms = w->opts.backoff_base_ms;
    if (!w->opts.page_limit)
        w->opts.page_limit = 500;
    if (!w->opts.max_page_bytes)
        w->opts.max_page_bytes = HP_WATCH_MAX_PAGE;
    w->limit = w->opts.page_limit;
    if (!w->opts.timeout_min_s)
        w->opts.timeout_min_s = 300;
    set_rv(w, "", 0);
    hp_json_init(&w->json);
    w->rng = uv_hrtime() ^ ((uint64_t)(uintptr_t)w << 16) ^ 0x9E3779B97F4A7C15ULL;
    if (!w->rng)
        w->rng = 1;
    hp_line_splitter_init(&w->splitter, HP_WATCH_MAX_LINE);
    (void)uv_timer_init(loop, &w->timer); /* cannot fail */
    start_list(w);
    return w;
}

void hp_watch_relist(struct hp_watch *w)
{
    if (w->state == W_STOPPED)
        return;
    if (w->req) {
        hp_kube_cancel(w->req);
        w->req = NULL;
    }
    (void)uv_timer_stop(&w->timer);
    hp_line_splitter_free(&w->splitter);
    hp_line_splitter_init(&w->splitter, HP_WATCH_MAX_LINE);
    free(w->cont);
    w->cont = NULL;
    w->streaming = 0;
    w->stream_begun = 0;
    hp_metrics_watch_relist(w->name);
    start_list(w);
}

int hp_watch_synced(const struct hp_watch *w)
{
    return w->synced;
}

const char *hp_watch_resource_version(const struct hp_watch *w)
{
    return w->rv;
}

enum hp_watch_initial hp_watch_initial_mode(const struct hp_watch *w)
{
    return w->initial;
}

static void on_watch_closed(uv_handle_t *h)
{
    struct hp_watch *w = hp_container_of((uv_timer_t *)h, struct hp_watch, timer);
    hp_close_cb cb = w->close_cb;
    void *data = w->close_data;

    hp_line_splitter_free(&w->splitter);
    hp_json_free(&w->json);
    free(w->name);
    free(w->path);
    free(w->lsel);
    free(w->fsel);
    free(w->rv);
    free(w->list_rv);
    free(w->cont);
    free(w);
    if (cb)
        cb(data);
}

void hp_watch_close(struct hp_watch *w, hp_close_cb close_cb, void *data)
{
    if (w->state == W_STOPPED)
        return;
    w->state = W_STOPPED;
    w->close_cb = close_cb;
    w->close_data = data;
    if (w->req) {
        hp_kube_cancel(w->req);
        w->req = NULL;
    }
    uv_close((uv_handle_t *)&w->timer, on_watch_closed);
}
