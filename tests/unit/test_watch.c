/* Unit tests for watch: the line splitter, and the reflector end to end against a scripted
 * HTTP/1.1 server on 127.0.0.1 on the same loop — paged LIST with continue, watch events split
 * across chunks, bookmarks, malformed lines, ERROR 410 and HTTP 410 relists, an expired continue
 * token, resumption from the last resourceVersion, backoff growth, no tight loop on streams that
 * end at once, over-long lines, and stopping from inside a handler. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "fake_http.h"
#include "hostpath/buf.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/metrics.h"
#include "hostpath/watch.h"

/* ---- line splitter ---- */

struct lines {
    char out[4096];
    size_t len;
    int n;
    int abort_at; /* return 7 from the nth line (1-based); 0 = never */
};

static int on_line(char *line, size_t len, void *data)
{
    struct lines *l = data;
    assert_int_equal(strlen(line), len); /* NUL-terminated, no embedded newline */
    assert_null(memchr(line, '\n', len));
    line[0] = line[0]; /* writable */
    l->n++;
    l->len += (size_t)snprintf(l->out + l->len, sizeof(l->out) - l->len, "[%s]", line);
    return l->abort_at && l->n == l->abort_at ? 7 : 0;
}

static void test_splitter_every_boundary(void **state)
{
    const char *input = "{\"a\":1}\n\n{\"b\":2}\r\nlast-line\n\r\ntail";
    const char *want = "[{\"a\":1}][{\"b\":2}][last-line]";
    size_t n = strlen(input);
    (void)state;

    /* Split in two at every byte, and in three at every pair of bytes. */
    for (size_t i = 0; i <= n; i++) {
        for (size_t j = i; j <= n; j++) {
            struct hp_line_splitter s;
            struct lines l;
            memset(&l, 0, sizeof(l));
            hp_line_splitter_init(&s, 64);
            assert_int_equal(hp_line_splitter_feed(&s, input, i, on_line, &l), 0);
            assert_int_equal(hp_line_splitter_feed(&s, input + i, j - i, on_line, &l), 0);
            assert_int_equal(hp_line_splitter_feed(&s, input + j, n - j, on_line, &l), 0);
            assert_string_equal(l.out, want);
            assert_int_equal(l.n, 3);
            /* "tail" waits for its newline. */
            assert_int_equal(hp_line_splitter_feed(&s, "\n", 1, on_line, &l), 0);
            assert_int_equal(l.n, 4);
            hp_line_splitter_free(&s);
        }
    }
}

static void test_splitter_byte_by_byte(void **state)
{
    const char *input = "one\ntwo\r\n\nthree\n";
    struct hp_line_splitter s;
    struct lines l;
    (void)state;

    memset(&l, 0, sizeof(l));
    hp_line_splitter_init(&s, 16);
    for (size_t i = 0; input[i]; i++)
        assert_int_equal(hp_line_splitter_feed(&s, input + i, 1, on_line, &l), 0);
    assert_string_equal(l.out, "[one][two][three]");
    assert_int_equal(hp_line_splitter_feed(&s, "", 0, on_line, &l), 0);
    hp_line_splitter_free(&s);
}

static void test_splitter_too_long(void **state)
{
    struct hp_line_splitter s;
    struct lines l;
    (void)state;

    memset(&l, 0, sizeof(l));
    hp_line_splitter_init(&s, 8);
    /* Exactly the limit is fine. */
    assert_int_equal(hp_line_splitter_feed(&s, "12345678\n", 9, on_line, &l), 0);
    assert_string_equal(l.out, "[12345678]");
    /* One more byte fails, also when it arrives in pieces and before any newline. */
    assert_int_equal(hp_line_splitter_feed(&s, "12345", 5, on_line, &l), 0);
    assert_int_equal(hp_line_splitter_feed(&s, "6789", 4, on_line, &l), -E2BIG);
    assert_int_equal(l.n, 1);
    hp_line_splitter_free(&s);

    hp_line_splitter_init(&s, 8);
    assert_int_equal(hp_line_splitter_feed(&s, "ok\n123456789\nnever\n", 19, on_line, &l), -E2BIG);
    assert_int_equal(l.n, 2);
    hp_line_splitter_free(&s);
}

static void test_splitter_abort(void **state)
{
    struct hp_line_splitter s;
    struct lines l;
    (void)state;

    memset(&l, 0, sizeof(l));
    l.abort_at = 2;
    hp_line_splitter_init(&s, 64);
    assert_int_equal(hp_line_splitter_feed(&s, "a\nb\nc\n", 6, on_line, &l), 7);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.out, "[a][b]");
    hp_line_splitter_free(&s);
}

/* ---- reflector fixture ---- */

#define MAX_REQ 64

struct wfx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_watch *w;
    struct hp_watch_opts opts;
    uint64_t clock;
    int client_closed;
    int watch_closed;
    /* server side */
    int nreq;
    char paths[MAX_REQ][4096];
    double at[MAX_REQ];
    void (*script)(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i);
    /* handler side */
    char events[4096];
    size_t events_len;
    int list_begins, list_ends, objects;
    int stop_at_object; /* stop the watch from inside the nth on_object */
    int calls_after_stop;
    int stopped;
    int nreq_target;
};

static uint64_t fake_clock(void *data)
{
    return ((struct wfx *)data)->clock;
}

static void ev_append(struct wfx *f, const char *s)
{
    f->events_len += (size_t)snprintf(f->events + f->events_len, sizeof(f->events) - f->events_len,
                                      "%s%s", f->events_len ? " " : "", s);
}

static void on_watch_closed(void *data)
{
    ((struct wfx *)data)->watch_closed++;
}

static void h_list_begin(struct hp_watch *w, void *data)
{
    struct wfx *f = data;
    assert_ptr_equal(w, f->w); /* the object first */
    if (f->stopped)
        f->calls_after_stop++;
    f->list_begins++;
    ev_append(f, "B");
}

static void h_list_end(struct hp_watch *w, void *data)
{
    struct wfx *f = data;
    assert_ptr_equal(w, f->w);
    if (f->stopped)
        f->calls_after_stop++;
    f->list_ends++;
    ev_append(f, "E");
}

static void h_object(struct hp_watch *w, enum hp_watch_type type, const struct hp_json *j, int obj,
                     void *data)
{
    struct wfx *f = data;
    assert_ptr_equal(w, f->w);
    char buf[64], name[48];
    if (hp_json_str_copy(j, hp_json_path(j, obj, "metadata", "name", NULL), name, sizeof(name)) < 0)
        snprintf(name, sizeof(name), "?");
    if (f->stopped)
        f->calls_after_stop++;
    f->objects++;
    snprintf(buf, sizeof(buf), "%c:%s",
             type == HP_WATCH_ADDED      ? 'A'
             : type == HP_WATCH_MODIFIED ? 'M'
                                         : 'D',
             name);
    ev_append(f, buf);
    if (f->stop_at_object && f->objects == f->stop_at_object) {
        hp_watch_close(f->w, on_watch_closed, f);
        f->stopped = 1;
    }
}

static const struct hp_watch_handler handler = {
    .on_list_begin = h_list_begin,
    .on_object = h_object,
    .on_list_end = h_list_end,
};

static void h_script(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct wfx *f = data;
    int i = f->nreq++;
    assert_true(i < MAX_REQ);
    snprintf(f->paths[i], sizeof(f->paths[i]), "%s", r->path);
    f->at[i] = r->at_ms;
    f->script(f, c, r, i);
}

static void wfx_setup(struct wfx *f, void (*script)(struct wfx *, struct fh_conn *,
                                                    const struct fh_request *, int))
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, h_script, f);
    f->script = script;
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, NULL), 0);
    f->clock = 1000000;
    f->opts.backoff_base_ms = 20;
    f->opts.backoff_max_ms = 1000;
    f->opts.page_limit = 2;
    f->opts.timeout_min_s = 5;
    f->opts.clock.now_ms = fake_clock;
    f->opts.clock.data = f;
}

static void wfx_start(struct wfx *f, const char *name, const char *path)
{
    f->w = hp_watch_new(&f->loop, f->client, name, path, &handler, f, &f->opts);
    assert_non_null(f->w);
    assert_int_equal(f->list_begins, 0); /* nothing before return */
    assert_int_equal(hp_watch_synced(f->w), 0);
    assert_string_equal(hp_watch_resource_version(f->w), "");
}

static void on_client_closed(void *data)
{
    ((struct wfx *)data)->client_closed++;
}

static void wfx_teardown(struct wfx *f)
{
    if (f->w && !f->stopped) {
        hp_watch_close(f->w, on_watch_closed, f);
        f->stopped = 1;
    }
    int before = f->calls_after_stop;
    assert_true(fh_run_until(&f->loop, &f->watch_closed, 5000));
    assert_int_equal(f->watch_closed, 1);
    assert_int_equal(f->calls_after_stop, before);
    assert_int_equal(f->calls_after_stop, 0);
    hp_kube_client_close(f->client, on_client_closed, f);
    assert_true(fh_run_until(&f->loop, &f->client_closed, 5000));
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
}

static int nreq_reached(void *p)
{
    struct wfx *f = p;
    return f->nreq >= f->nreq_target;
}

/* Runs until the server has seen n requests. */
static int wait_requests(struct wfx *f, int n, uint64_t timeout_ms)
{
    f->nreq_target = n;
    return fh_run_until_cb(&f->loop, timeout_ms, nreq_reached, f);
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Asserts a watch request path and returns its timeoutSeconds. */
static unsigned assert_watch_path(const char *path, const char *base, const char *rv)
{
    char want[512];
    snprintf(want, sizeof(want),
             "%s%swatch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=", base,
             strchr(base, '?') ? "&" : "?", rv);
    if (!starts_with(path, want))
        fail_msg("watch path %s, want prefix %s", path, want);
    char *end;
    unsigned long t = strtoul(path + strlen(want), &end, 10);
    assert_true(*end == '\0');
    return (unsigned)t;
}

static double metric(const char *family, const char *resource)
{
    struct hp_buf b;
    char prefix[256];
    double v = 0;
    hp_buf_init(&b, 0);
    hp_metrics_render(&b);
    snprintf(prefix, sizeof(prefix), "%s{resource=\"%s\"} ", family, resource);
    const char *p = strstr(b.data, prefix);
    if (p)
        v = strtod(p + strlen(prefix), NULL);
    hp_buf_free(&b);
    return v;
}

#define PVC "/api/v1/persistentvolumeclaims"

static const char *status_body(int code, const char *reason)
{
    static char buf[256];
    snprintf(buf, sizeof(buf),
             "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"%s\","
             "\"reason\":\"%s\",\"code\":%d}",
             reason, reason, code);
    return buf;
}

#define OBJ(name, rv) "{\"metadata\":{\"name\":\"" name "\",\"resourceVersion\":\"" rv "\"}}"
#define EVENT(type, name, rv) "{\"type\":\"" type "\",\"object\":" OBJ(name, rv) "}\n"

static void script_e2e(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 200, NULL,
                 "{\"kind\":\"PersistentVolumeClaimList\",\"apiVersion\":\"v1\",\"metadata\":"
                 "{\"resourceVersion\":\"100\",\"continue\":\"tok/1+\"},\"items\":[" OBJ(
                     "a", "10") "," OBJ("b", "11") "]}");
        break;
    case 1:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"100\",\"continue\":\"\"},\"items\":[" OBJ(
                     "c", "12") "]}");
        break;
    case 2:
        /* Events split mid-line across chunks, malformed lines, CRLF, a bookmark. */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "d", "101") "{\"type\":\"MODI");
        fh_chunk_str(c, 10, "FIED\",\"object\":" OBJ("a", "102") "}\nnot json\n{\"type\":\"BOOK");
        fh_chunk_str(c, 10,
                     "MARK\"}\n\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":"
                     "\"PersistentVolumeClaim\",\"metadata\":{\"resourceVersion\":\"105\"}}}\r\n");
        /* Invalid UTF-8 is malformed; escapes are read as their characters. */
        fh_chunk_str(c, 10,
                     "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xc3(\"}}}\n"
                     "{\"type\":\"MODIFI\\u0045D\",\"object\":{\"metadata\":{\"name\":\"\\u0063\","
                     "\"resourceVersion\":\"10\\u0035\"}}}\n" EVENT("DELETED", "b", "106"));
        fh_stream_end(c, 10);
        break;
    case 3:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0,
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                     "\"status\":\"Failure\",\"message\":\"too old resource version: 106 (200)\","
                     "\"reason\":\"Expired\",\"code\":410}}\n");
        /* and the stream stays open: the client must end it */
        break;
    case 4:
        fh_reply(
            c, 200, NULL,
            "{\"metadata\":{\"resourceVersion\":\"200\",\"continue\":\"tok2\"},\"items\":[" OBJ(
                "a", "10") "," OBJ("c", "12") "]}");
        break;
    case 5:
        fh_reply(c, 410, NULL, status_body(410, "Expired"));
        break;
    case 6:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"210\"},\"items\":[" OBJ("a", "10") "," OBJ(
                     "c", "12") "," OBJ("d", "101") "]}");
        break;
    case 7:
        /* One event, half of the next, then the connection drops. */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "e", "211") "{\"type\":\"MODIFIED\",\"obj");
        fh_close_after(c, 30);
        break;
    case 8:
    case 9:
    case 10:
    case 11:
        fh_reply(c, 500, NULL, status_body(500, "InternalError"));
        break;
    case 12:
        fh_reply(c, 410, NULL, status_body(410, "Gone"));
        break;
    case 13:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"300\"},\"items\":[" OBJ("a", "10") "]}");
        break;
    case 14:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0,
                     "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":"
                     "{\"resourceVersion\":\"301\"}}}\n");
        break;
    default:
        fh_reply(c, 500, NULL, status_body(500, "Unexpected"));
        break;
    }
}

static int rv_is_301(void *p)
{
    struct wfx *f = p;
    return strcmp(hp_watch_resource_version(f->w), "301") == 0;
}

static void assert_gap(const struct wfx *f, int k, double lo, double hi)
{
    double g = f->at[k + 1] - f->at[k];
    if (g < lo - 2 || g > hi)
        fail_msg("gap between requests %d and %d is %.1f ms, want [%.0f, %.0f]", k, k + 1, g, lo,
                 hi);
}

static void test_reflector_e2e(void **state)
{
    struct wfx f;
    (void)state;

    wfx_setup(&f, script_e2e);
    wfx_start(&f, "e2e", PVC);
    assert_true(wait_requests(&f, 15, 10000));
    assert_true(fh_run_until_cb(&f.loop, 5000, rv_is_301, &f));
    fh_run_for(&f.loop, 50);
    assert_int_equal(f.nreq, 15);

    assert_string_equal(f.events, "B A:a A:b A:c E A:d M:a M:c D:b B A:a A:c B A:a A:c A:d E "
                                  "A:e B A:a E");
    assert_int_equal(f.list_begins, 4);
    assert_int_equal(f.list_ends, 3);
    assert_int_equal(hp_watch_synced(f.w), 1);

    assert_string_equal(f.paths[0], PVC "?limit=2");
    assert_string_equal(f.paths[1], PVC "?limit=2&continue=tok%2F1%2B");
    unsigned t = assert_watch_path(f.paths[2], PVC, "100");
    assert_true(t >= 5 && t < 10);
    /* The clean end of a stream that delivered events resumes at once from the last RV. */
    assert_watch_path(f.paths[3], PVC, "106");
    /* ERROR 410 -> relist from scratch (no resourceVersion, no continue). */
    assert_string_equal(f.paths[4], PVC "?limit=2");
    assert_string_equal(f.paths[5], PVC "?limit=2&continue=tok2");
    /* Expired continue token -> the LIST starts over. */
    assert_string_equal(f.paths[6], PVC "?limit=2");
    assert_watch_path(f.paths[7], PVC, "210");
    /* Broken stream and 500s -> resume from the last RV seen (211, from the event). */
    for (int i = 8; i <= 12; i++)
        assert_watch_path(f.paths[i], PVC, "211");
    /* HTTP 410 on the watch -> relist. */
    assert_string_equal(f.paths[13], PVC "?limit=2");
    assert_watch_path(f.paths[14], PVC, "300");

    /* Backoff: base 20 ms doubling, each delay in [d/2, d]; generous upper bounds. */
    assert_gap(&f, 8, 20, 40 + 400);
    assert_gap(&f, 9, 40, 80 + 400);
    assert_gap(&f, 10, 80, 160 + 400);
    assert_gap(&f, 11, 160, 320 + 400);
    assert_gap(&f, 12, 160, 320 + 400); /* a repeated relist backs off too */
    assert_true(f.at[12] - f.at[11] > f.at[9] - f.at[8]);

    assert_true(metric("hostpath_watch_malformed_events_total", "e2e") == 3);
    assert_true(metric("hostpath_watch_relists_total", "e2e") == 3);
    assert_true(metric("hostpath_watch_restarts_total", "e2e") == 8);
    wfx_teardown(&f);
}

/* ---- healthy streams re-watch at once; streams that end at once back off ---- */

static void script_loop(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[]}");
        break;
    case 1:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0,
                     "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":"
                     "{\"resourceVersion\":\"6\"}}}\n");
        fh_stream_end(c, 10);
        break;
    case 2:
        /* No event, but the stream lasted 1.5 s by the watch's clock. */
        f->clock += 1500;
        fh_stream_begin(c, 200);
        fh_stream_end(c, 10);
        break;
    default:
        /* Ends at once without an event. */
        fh_stream_begin(c, 200);
        fh_stream_end(c, 0);
        break;
    }
}

static void test_no_tight_loop(void **state)
{
    struct wfx f;
    (void)state;

    wfx_setup(&f, script_loop);
    f.opts.backoff_base_ms = 5000;
    f.opts.backoff_max_ms = 30000;
    wfx_start(&f, "loop", PVC);
    assert_true(wait_requests(&f, 4, 3000));
    assert_watch_path(f.paths[1], PVC, "5");
    assert_watch_path(f.paths[2], PVC, "6");
    assert_watch_path(f.paths[3], PVC, "6");
    assert_true(f.at[2] - f.at[1] < 1000);
    assert_true(f.at[3] - f.at[2] < 1000);
    /* The third stream ended at once with nothing: the next try waits >= 2.5 s. */
    fh_run_for(&f.loop, 600);
    assert_int_equal(f.nreq, 4);
    assert_string_equal(f.events, "B E");
    assert_true(metric("hostpath_watch_relists_total", "loop") == 0);
    wfx_teardown(&f);
}

/* ---- LIST failures retry the LIST; a non-410 ERROR re-watches from the same RV ---- */

static void script_errors(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 500, NULL, status_body(500, "InternalError"));
        break;
    case 1:
        fh_reply(c, 200, NULL, "this is not json");
        break;
    case 2:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"7\"},\"items\":null}");
        break;
    case 3:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0,
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":500,"
                     "\"reason\":\"InternalError\",\"message\":\"etcd is sad\"}}\n");
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

static void test_list_and_watch_errors(void **state)
{
    struct wfx f;
    const char *path = "/api/v1/pods?labelSelector=app%3Dx";
    (void)state;

    wfx_setup(&f, script_errors);
    wfx_start(&f, "errors", path);
    assert_true(wait_requests(&f, 5, 5000));
    assert_string_equal(f.paths[0], "/api/v1/pods?labelSelector=app%3Dx&limit=2");
    assert_string_equal(f.paths[1], "/api/v1/pods?labelSelector=app%3Dx&limit=2");
    assert_string_equal(f.paths[2], "/api/v1/pods?labelSelector=app%3Dx&limit=2");
    assert_watch_path(f.paths[3], path, "7");
    assert_watch_path(f.paths[4], path, "7");
    assert_gap(&f, 0, 10, 20 + 400);
    assert_gap(&f, 1, 20, 40 + 400);
    assert_gap(&f, 3, 40, 80 + 400); /* failures keep counting across the list */
    assert_string_equal(f.events, "B E");
    assert_int_equal(hp_watch_synced(f.w), 1);
    assert_string_equal(hp_watch_resource_version(f.w), "7");
    assert_true(metric("hostpath_watch_relists_total", "errors") == 0);
    wfx_teardown(&f);
}

/* ---- an over-long line fails the stream and relists ---- */

static char *big_chunk;
static size_t big_chunk_len;

static void script_long(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}");
        break;
    case 1:
        fh_stream_begin(c, 200);
        for (int k = 0; k < 17; k++)
            fh_write(c, big_chunk, big_chunk_len, 0, 0);
        break;
    case 2:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"2\"},\"items\":[" OBJ("z", "2") "]}");
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

static void test_long_line_relists(void **state)
{
    struct wfx f;
    const size_t mib = 1024 * 1024;
    (void)state;

    big_chunk = hp_xmalloc(mib + 16);
    memcpy(big_chunk, "100000\r\n", 8);
    memset(big_chunk + 8, 'x', mib);
    memcpy(big_chunk + 8 + mib, "\r\n", 2);
    big_chunk_len = 8 + mib + 2;

    wfx_setup(&f, script_long);
    wfx_start(&f, "long", PVC);
    assert_true(wait_requests(&f, 4, 10000));
    assert_watch_path(f.paths[1], PVC, "1");
    assert_string_equal(f.paths[2], PVC "?limit=2");
    assert_watch_path(f.paths[3], PVC, "2");
    assert_string_equal(f.events, "B E B A:z E");
    assert_true(metric("hostpath_watch_relists_total", "long") == 1);
    wfx_teardown(&f);
    free(big_chunk);
}

/* ---- stopping from inside a handler ---- */

static void script_stop(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"9\",\"continue\":\"more\"},\"items\":[" OBJ(
                     "a", "1") "," OBJ("b", "2") "]}");
        break;
    case 1:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[" OBJ("c", "3") "]}");
        break;
    default:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "d", "10") EVENT("ADDED", "e", "11"));
        fh_chunk_str(c, 20, EVENT("ADDED", "f", "12"));
        break;
    }
}

static void test_stop_inside_handler(void **state)
{
    struct wfx f;
    (void)state;

    /* During a LIST page. */
    wfx_setup(&f, script_stop);
    f.stop_at_object = 1;
    wfx_start(&f, "stop1", PVC);
    assert_true(fh_run_until(&f.loop, &f.watch_closed, 5000));
    fh_run_for(&f.loop, 50);
    assert_string_equal(f.events, "B A:a");
    assert_int_equal(f.nreq, 1);
    wfx_teardown(&f);

    /* During a watch chunk holding two events. */
    wfx_setup(&f, script_stop);
    f.stop_at_object = 4;
    wfx_start(&f, "stop2", PVC);
    assert_true(fh_run_until(&f.loop, &f.watch_closed, 5000));
    fh_run_for(&f.loop, 80);
    assert_string_equal(f.events, "B A:a A:b A:c E A:d");
    assert_int_equal(f.nreq, 3);
    wfx_teardown(&f);

    /* Stopped before anything happened. */
    wfx_setup(&f, script_stop);
    wfx_start(&f, "stop3", PVC);
    hp_watch_close(f.w, on_watch_closed, &f);
    f.stopped = 1;
    assert_int_equal(f.watch_closed, 0); /* freed from the loop */
    fh_run_for(&f.loop, 50);
    assert_int_equal(f.nreq, 0);
    assert_string_equal(f.events, "");
    wfx_teardown(&f);
}

/* A page bigger than max_page_bytes is asked for again with fewer objects, and the limit grows
 * back after small pages; hp_watch_relist lists from scratch. */
static void script_big_pages(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)i;
    if (strstr(r->path, "watch=1")) {
        fh_stream_begin(c, 200);
        return;
    }
    /* Each object is ~300 bytes; a page of more than 2 does not fit 1000 bytes. */
    char pad[280];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    const char *lim = strstr(r->path, "limit=");
    int limit = lim ? atoi(lim + 6) : 500;
    const char *cont = strstr(r->path, "continue=");
    int from = cont ? atoi(cont + 9) : 0;
    struct hp_buf b;
    hp_buf_init(&b, 0);
    (void)hp_buf_appends(&b, "{\"kind\":\"List\",\"metadata\":{\"resourceVersion\":\"7\"");
    int n = 12;
    if (from + limit < n)
        (void)hp_buf_printf(&b, ",\"continue\":\"%d\"", from + limit);
    (void)hp_buf_appends(&b, "},\"items\":[");
    for (int k = from; k < n && k < from + limit; k++)
        (void)hp_buf_printf(&b, "%s{\"metadata\":{\"name\":\"o%d\",\"x\":\"%s\"}}",
                            k > from ? "," : "", k, pad);
    (void)hp_buf_appends(&b, "]}");
    (void)f;
    fh_reply(c, 200, NULL, b.data);
    hp_buf_free(&b);
}

static void test_big_pages_get_smaller(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_big_pages);
    f.opts.page_limit = 8;
    f.opts.max_page_bytes = 1000;
    wfx_start(&f, "things", "/apis/x/v1/things");
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    assert_int_equal(f.objects, 12); /* all of them, once each */
    assert_int_equal(f.list_begins, 1);
    /* limit=8 too big -> 2; then pages of 2 fit (and grow back only after small bodies). */
    assert_non_null(strstr(f.paths[0], "limit=8"));
    assert_non_null(strstr(f.paths[1], "limit=2"));
    assert_null(strstr(f.paths[1], "continue="));
    for (int i = 1; i < f.nreq && !strstr(f.paths[i], "watch=1"); i++)
        assert_null(strstr(f.paths[i], "limit=8"));
    /* A relist from scratch: a new replace pass, the same objects again. */
    int before = f.nreq;
    hp_watch_relist(f.w);
    assert_true(wait_requests(&f, before + 2, 5000));
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    fh_run_for(&f.loop, 50);
    assert_int_equal(f.list_begins, 2);
    assert_int_equal(f.list_ends, 2);
    assert_int_equal(f.objects, 24);
    wfx_teardown(&f);
}

/* ---- selectors, the watch cache, streaming lists ---- */

#define SEL "app=x,!gone"
#define SEL_Q "labelSelector=app%3Dx%2C%21gone&fieldSelector=metadata.name%3Da"

static void script_selectors(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"5\",\"continue\":\"k\"},\"items\":[" OBJ(
                     "a", "1") "]}");
        break;
    case 1:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[]}");
        break;
    case 2:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0,
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                     "\"reason\":\"Expired\"}}\n");
        break;
    case 3:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}");
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

/* The selectors go on every LIST page and WATCH; from the watch cache, the first page of every
 * LIST asks for resourceVersion=0 (continue pages carry their own version). */
static void test_selectors_and_cache(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_selectors);
    f.opts.label_selector = SEL;
    f.opts.field_selector = "metadata.name=a";
    f.opts.initial = HP_WATCH_INITIAL_CACHE;
    wfx_start(&f, "sel", PVC);
    assert_true(wait_requests(&f, 5, 5000));
    assert_string_equal(f.paths[0], PVC "?limit=2&" SEL_Q "&resourceVersion=0");
    assert_string_equal(f.paths[1], PVC "?limit=2&" SEL_Q "&continue=k");
    assert_true(starts_with(f.paths[2], PVC "?watch=1&allowWatchBookmarks=true&" SEL_Q
                                            "&resourceVersion=5&timeoutSeconds="));
    /* the 410 relist reads the cache again */
    assert_string_equal(f.paths[3], PVC "?limit=2&" SEL_Q "&resourceVersion=0");
    assert_int_equal(hp_watch_initial_mode(f.w), HP_WATCH_INITIAL_CACHE);
    assert_string_equal(f.events, "B A:a E B E");
    wfx_teardown(&f);
}

/* A watch cache that ignores the limit (before Kubernetes 1.33) answers with everything: too big
 * a body, so the list is read from etcd, paged, from then on. */
static void script_cache_unpaged(struct wfx *f, struct fh_conn *c, const struct fh_request *r,
                                 int i)
{
    (void)f;
    (void)i;
    if (strstr(r->path, "watch=1")) {
        fh_stream_begin(c, 200);
        return;
    }
    int rv0 = strstr(r->path, "resourceVersion=0") != NULL;
    const char *cont = strstr(r->path, "continue=");
    int from = cont ? atoi(cont + 9) : 0;
    int n = 6, limit = rv0 ? n : 2;
    char pad[200];
    memset(pad, 'p', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    struct hp_buf b;
    hp_buf_init(&b, 0);
    (void)hp_buf_appends(&b, "{\"metadata\":{\"resourceVersion\":\"3\"");
    if (from + limit < n)
        (void)hp_buf_printf(&b, ",\"continue\":\"%d\"", from + limit);
    (void)hp_buf_appends(&b, "},\"items\":[");
    for (int k = from; k < n && k < from + limit; k++)
        (void)hp_buf_printf(&b, "%s{\"metadata\":{\"name\":\"o%d\",\"x\":\"%s\"}}",
                            k > from ? "," : "", k, pad);
    (void)hp_buf_appends(&b, "]}");
    fh_reply(c, 200, NULL, b.data);
    hp_buf_free(&b);
}

static void test_cache_unpaged_falls_back(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_cache_unpaged);
    f.opts.initial = HP_WATCH_INITIAL_CACHE;
    f.opts.max_page_bytes = 1000; /* six 250-byte objects do not fit; two do */
    wfx_start(&f, "unpaged", PVC);
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    assert_string_equal(f.paths[0], PVC "?limit=2&resourceVersion=0");
    assert_string_equal(f.paths[1], PVC "?limit=2");
    assert_string_equal(f.paths[2], PVC "?limit=2&continue=2");
    assert_int_equal(f.objects, 6);
    assert_int_equal(f.list_begins, 1); /* the refused page delivered nothing */
    assert_int_equal(hp_watch_initial_mode(f.w), HP_WATCH_INITIAL_LIST);
    int before = f.nreq;
    hp_watch_relist(f.w); /* and later lists go to etcd directly */
    assert_true(wait_requests(&f, before + 1, 5000));
    assert_string_equal(f.paths[before], PVC "?limit=2");
    wfx_teardown(&f);
}

#define STREAM_END(rv)                                                                            \
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"PersistentVolumeClaim\",\"metadata\":"          \
    "{\"resourceVersion\":\"" rv "\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n"

static void script_stream(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0: /* objects, the end bookmark, a plain bookmark, then a watch event */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "a", "3") EVENT("ADDED", "b", "4"));
        fh_chunk_str(c, 5,
                     STREAM_END("6") "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":"
                     "{\"resourceVersion\":\"7\"}}}\n" EVENT("MODIFIED", "a", "8"));
        fh_stream_end(c, 10);
        break;
    case 2: /* an empty collection: the end bookmark alone */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, STREAM_END("20"));
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

/* A streaming list: its ADDED events up to the end bookmark are one replace pass; the stream
 * goes on as a watch, and once it ends the watch resumes from the last version (no list). */
static void test_streaming_list(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_stream);
    f.opts.label_selector = "x=y";
    f.opts.initial = HP_WATCH_INITIAL_STREAM;
    wfx_start(&f, "stream", PVC);
    assert_true(wait_requests(&f, 2, 5000));
    const char *want = PVC "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                           "&allowWatchBookmarks=true&labelSelector=x%3Dy&timeoutSeconds=";
    if (!starts_with(f.paths[0], want))
        fail_msg("stream path %s", f.paths[0]);
    assert_string_equal(f.events, "B A:a A:b E M:a");
    assert_int_equal(hp_watch_synced(f.w), 1);
    assert_true(starts_with(f.paths[1], PVC "?watch=1&allowWatchBookmarks=true&labelSelector="
                                            "x%3Dy&resourceVersion=8&timeoutSeconds="));
    /* A relist streams again; an empty collection is a pass of its own. */
    hp_watch_relist(f.w);
    assert_true(wait_requests(&f, 3, 5000));
    assert_true(starts_with(f.paths[2], want));
    fh_run_for(&f.loop, 50);
    assert_string_equal(f.events, "B A:a A:b E M:a B E");
    assert_string_equal(hp_watch_resource_version(f.w), "20");
    wfx_teardown(&f);
}

static void script_stream_breaks(struct wfx *f, struct fh_conn *c, const struct fh_request *r,
                                 int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0: /* refused: no streaming lists on this server */
        fh_reply(c, 422, NULL, status_body(422, "Invalid"));
        break;
    default:
        fh_reply(c, 200, NULL, "{\"metadata\":{\"resourceVersion\":\"2\"},\"items\":[]}");
        break;
    }
}

/* A server older than streaming lists ignores sendInitialEvents: a legacy watch sends every
 * object as ADDED and, in time, a plain bookmark: it is listed from its watch cache instead. */
static void script_stream_ignored(struct wfx *f, struct fh_conn *c, const struct fh_request *r,
                                  int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "a", "3")
                     "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":"
                     "\"4\"}}}\n");
        break; /* held open: the client ends it */
    case 1:
        fh_reply(c, 200, NULL,
                 "{\"metadata\":{\"resourceVersion\":\"5\"},\"items\":[" OBJ("b", "5") "]}");
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

static void test_streaming_ignored(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_stream_ignored);
    f.opts.initial = HP_WATCH_INITIAL_STREAM;
    wfx_start(&f, "ignored", PVC);
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    assert_string_equal(f.paths[1], PVC "?limit=2&resourceVersion=0");
    assert_int_equal(hp_watch_initial_mode(f.w), HP_WATCH_INITIAL_CACHE);
    /* the unfinished pass of the stream, then the list's own */
    assert_string_equal(f.events, "B A:a B A:b E");
    wfx_teardown(&f);
}

/* A server that refuses streaming lists is listed from its watch cache instead. */
static void test_streaming_refused(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_stream_breaks);
    f.opts.initial = HP_WATCH_INITIAL_STREAM;
    wfx_start(&f, "refused", PVC);
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    assert_non_null(strstr(f.paths[0], "sendInitialEvents=true"));
    assert_string_equal(f.paths[1], PVC "?limit=2&resourceVersion=0");
    assert_int_equal(hp_watch_initial_mode(f.w), HP_WATCH_INITIAL_CACHE);
    assert_true(f.at[1] - f.at[0] < 1000); /* at once, not after a backoff */
    wfx_teardown(&f);
}

static void script_stream_cut(struct wfx *f, struct fh_conn *c, const struct fh_request *r, int i)
{
    (void)f;
    (void)r;
    switch (i) {
    case 0: /* an object, then the connection drops before the end bookmark */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "a", "3"));
        fh_close_after(c, 20);
        break;
    case 1: /* a clean end, still before the end bookmark */
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "a", "3"));
        fh_stream_end(c, 10);
        break;
    case 2:
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, EVENT("ADDED", "b", "4") STREAM_END("5"));
        break;
    default:
        fh_stream_begin(c, 200);
        break;
    }
}

/* A streaming list that ends before its end bookmark is read again from the start (a new pass,
 * which forgets what the broken one delivered but the new one does not). */
static void test_streaming_cut(void **state)
{
    struct wfx f;
    (void)state;
    wfx_setup(&f, script_stream_cut);
    f.opts.initial = HP_WATCH_INITIAL_STREAM;
    wfx_start(&f, "cut", PVC);
    assert_true(fh_run_until_cb(&f.loop, 5000, (int (*)(void *))hp_watch_synced, f.w));
    assert_int_equal(f.nreq, 3);
    for (int i = 0; i < 3; i++)
        assert_non_null(strstr(f.paths[i], "sendInitialEvents=true"));
    assert_string_equal(f.events, "B A:a B A:a B A:b E");
    assert_int_equal(hp_watch_initial_mode(f.w), HP_WATCH_INITIAL_STREAM);
    assert_true(metric("hostpath_watch_relists_total", "cut") == 0);
    wfx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_big_pages_get_smaller),
        cmocka_unit_test(test_splitter_every_boundary),
        cmocka_unit_test(test_splitter_byte_by_byte),
        cmocka_unit_test(test_splitter_too_long),
        cmocka_unit_test(test_splitter_abort),
        cmocka_unit_test(test_reflector_e2e),
        cmocka_unit_test(test_no_tight_loop),
        cmocka_unit_test(test_list_and_watch_errors),
        cmocka_unit_test(test_long_line_relists),
        cmocka_unit_test(test_stop_inside_handler),
        cmocka_unit_test(test_selectors_and_cache),
        cmocka_unit_test(test_cache_unpaged_falls_back),
        cmocka_unit_test(test_streaming_list),
        cmocka_unit_test(test_streaming_refused),
        cmocka_unit_test(test_streaming_ignored),
        cmocka_unit_test(test_streaming_cut),
    };
    hp_metrics_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hp_metrics_free();
    return rc;
}
