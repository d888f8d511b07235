/* Unit tests for kube_client: requests against a scripted HTTP/1.1 server on 127.0.0.1 running on
 * the same loop (plain http), covering bodies and headers, Status parsing, Retry-After, streams,
 * cancellation, transport errors, the write rate limiter, the body cap, close with requests in
 * flight and token re-reading on 401; and what the log says: transport errors with what was
 * tried and the likely cause (also against raw TCP servers: TLS to a plain port, plain HTTP to
 * a TLS port), one line per request at --v 4 (watches when they open and end), and 401/403
 * explained once. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
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
#include "hostpath/common.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

/* ---- fixture ---- */

struct cap {
    int calls;
    int status;
    long code;
    char *body;
    size_t body_len;
    uint64_t retry_after_ms;
    char error[512];
    int has_error;
};

static void cap_free(struct cap *c)
{
    free(c->body);
    c->body = NULL;
}

static void on_resp(struct hp_kube_req *req, int status, const struct hp_kube_response *r,
                    void *data)
{
    struct cap *c = data;
    assert_non_null(req); /* the request first */
    c->calls++;
    c->status = status;
    c->code = r->code;
    free(c->body);
    assert_non_null(r->body);
    assert_int_equal(strlen(r->body), r->body_len);
    c->body = hp_xstrndup(r->body, r->body_len);
    c->body_len = r->body_len;
    c->retry_after_ms = r->retry_after_ms;
    c->has_error = r->error != NULL;
    if (r->error)
        snprintf(c->error, sizeof(c->error), "%s", r->error);
    if (status < 0)
        assert_non_null(r->error);
}

static int cap_done(void *p)
{
    return ((struct cap *)p)->calls > 0;
}

#define MAX_SEEN 32
struct fx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    int closed;
    /* what the server saw */
    int nseen;
    struct fh_request seen[MAX_SEEN];
    char seen_body[MAX_SEEN][256];
};

static void fx_record(struct fx *f, const struct fh_request *r)
{
    assert_true(f->nseen < MAX_SEEN);
    f->seen[f->nseen] = *r;
    f->seen[f->nseen].body = NULL;
    snprintf(f->seen_body[f->nseen], sizeof(f->seen_body[0]), "%s", r->body);
    f->nseen++;
}

static void fx_setup(struct fx *f, fh_handler h, const struct hp_kube_client_opts *opts)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, h, f);
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    f->creds.token = hp_xstrdup("secret");
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, opts), 0);
    assert_non_null(f->client);
}

static void on_client_closed(void *data)
{
    int *closed = data;
    (*closed)++;
}

static void fx_teardown(struct fx *f)
{
    if (f->client && !f->closed) {
        hp_kube_client_close(f->client, on_client_closed, &f->closed);
        assert_true(fh_run_until(&f->loop, &f->closed, 5000));
    }
    assert_int_equal(f->closed, 1);
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
}

/* ---- GET / POST / PATCH / DELETE round trip ---- */

static void h_echo(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    if (strcmp(r->method, "GET") == 0)
        fh_reply(c, 200, NULL, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}");
    else if (strcmp(r->method, "POST") == 0)
        fh_reply(c, 201, NULL, r->body);
    else
        fh_reply(c, 200, NULL, "{\"kind\":\"Status\",\"status\":\"Success\"}");
}

static void do_request(struct fx *f, const char *method, const char *path, const char *body,
                       const char *ct, struct cap *cap)
{
    memset(cap, 0, sizeof(*cap));
    struct hp_kube_req *r = hp_kube_request(f->client, method, path, body, ct, on_resp, cap);
    assert_non_null(r);
    assert_int_equal(cap->calls, 0); /* never before return */
    assert_true(fh_run_until_cb(&f->loop, 5000, cap_done, cap));
    assert_int_equal(cap->calls, 1);
}

static void test_roundtrip(void **state)
{
    struct fx f;
    struct cap cap;
    char v[256];
    (void)state;

    fx_setup(&f, h_echo, NULL);
    do_request(&f, "GET", "/api/v1/namespaces/default/pods/x", NULL, NULL, &cap);
    assert_int_equal(cap.status, 0);
    assert_int_equal(cap.code, 200);
    assert_string_equal(cap.body, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}");
    assert_int_equal(cap.retry_after_ms, 0);
    assert_false(cap.has_error);
    assert_string_equal(f.seen[0].method, "GET");
    assert_string_equal(f.seen[0].path, "/api/v1/namespaces/default/pods/x");
    assert_true(fh_header(&f.seen[0], "Authorization", v, sizeof(v)));
    assert_string_equal(v, "Bearer secret");
    assert_true(fh_header(&f.seen[0], "Accept", v, sizeof(v)));
    assert_string_equal(v, "application/json");
    assert_true(fh_header(&f.seen[0], "User-Agent", v, sizeof(v)));
    assert_string_equal(v, "hostpath-provisioner/" HP_VERSION);
    assert_false(fh_header(&f.seen[0], "Content-Type", v, sizeof(v)));
    cap_free(&cap);

    const char *pv = "{\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":\"pvc-1\"}}";
    do_request(&f, "POST", "/api/v1/persistentvolumes", pv, NULL, &cap);
    assert_int_equal(cap.status, 0);
    assert_int_equal(cap.code, 201);
    assert_string_equal(cap.body, pv);
    assert_string_equal(f.seen[1].method, "POST");
    assert_string_equal(f.seen_body[1], pv);
    assert_true(fh_header(&f.seen[1], "Content-Type", v, sizeof(v)));
    assert_string_equal(v, "application/json");
    assert_true(fh_header(&f.seen[1], "Authorization", v, sizeof(v)));
    assert_string_equal(v, "Bearer secret");
    assert_false(fh_header(&f.seen[1], "Expect", v, sizeof(v)));
    cap_free(&cap);

    do_request(&f, "PATCH", "/api/v1/persistentvolumes/pvc-1", "{\"metadata\":{}}",
               "application/merge-patch+json", &cap);
    assert_int_equal(cap.code, 200);
    assert_string_equal(f.seen[2].method, "PATCH");
    assert_string_equal(f.seen_body[2], "{\"metadata\":{}}");
    assert_true(fh_header(&f.seen[2], "Content-Type", v, sizeof(v)));
    assert_string_equal(v, "application/merge-patch+json");
    cap_free(&cap);

    do_request(&f, "DELETE", "/api/v1/persistentvolumes/pvc-1", NULL, NULL, &cap);
    assert_int_equal(cap.code, 200);
    assert_string_equal(f.seen[3].method, "DELETE");
    assert_string_equal(f.seen_body[3], "");
    cap_free(&cap);

    do_request(&f, "PUT", "/api/v1/persistentvolumes/pvc-1", "{}", NULL, &cap);
    assert_int_equal(cap.code, 200);
    assert_string_equal(f.seen[4].method, "PUT");
    assert_string_equal(f.seen_body[4], "{}");
    cap_free(&cap);

    const char *opts = "{\"kind\":\"DeleteOptions\",\"propagationPolicy\":\"Background\"}";
    do_request(&f, "DELETE", "/api/v1/persistentvolumes/pvc-2", opts, NULL, &cap);
    assert_int_equal(cap.code, 200);
    assert_string_equal(f.seen[5].method, "DELETE");
    assert_string_equal(f.seen_body[5], opts);
    assert_true(fh_header(&f.seen[5], "Content-Type", v, sizeof(v)));
    assert_string_equal(v, "application/json");
    cap_free(&cap);

    /* Sequential requests reuse one keep-alive connection. */
    assert_int_equal(f.srv.nconn, 1);
    assert_int_equal(hp_kube_client_inflight(f.client), 0);
    fx_teardown(&f);
}

/* ---- error statuses ---- */

static void h_errors(struct fh_conn *c, const struct fh_request *r, void *data)
{
    (void)data;
    if (strcmp(r->path, "/missing") == 0)
        fh_reply(c, 404, NULL,
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                 "\"message\":\"persistentvolumes \\\"pvc-1\\\" not found\","
                 "\"reason\":\"NotFound\",\"code\":404}");
    else if (strcmp(r->path, "/busy") == 0)
        fh_reply(c, 429, "Retry-After: 3\r\n",
                 "{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"code\":429}");
    else
        fh_reply(c, 500, "retry-after:   7  \r\n", "oops");
}

static void test_error_status(void **state)
{
    struct fx f;
    struct cap cap;
    char reason[64], message[128];
    (void)state;

    fx_setup(&f, h_errors, NULL);
    do_request(&f, "GET", "/missing", NULL, NULL, &cap);
    assert_int_equal(cap.status, 0); /* an HTTP status is data, not an error */
    assert_int_equal(cap.code, 404);
    assert_false(cap.has_error);
    assert_int_equal(cap.retry_after_ms, 0);
    assert_int_equal(
        hp_kube_status_parse(cap.body, reason, sizeof(reason), message, sizeof(message)), 404);
    assert_string_equal(reason, "NotFound");
    assert_string_equal(message, "persistentvolumes \"pvc-1\" not found");
    cap_free(&cap);

    do_request(&f, "POST", "/busy", "{}", NULL, &cap);
    assert_int_equal(cap.code, 429);
    assert_int_equal(cap.retry_after_ms, 3000);
    cap_free(&cap);

    do_request(&f, "GET", "/other", NULL, NULL, &cap);
    assert_int_equal(cap.code, 500);
    assert_int_equal(cap.retry_after_ms, 7000);
    assert_string_equal(cap.body, "oops");
    assert_int_equal(
        hp_kube_status_parse(cap.body, reason, sizeof(reason), message, sizeof(message)), 0);
    cap_free(&cap);
    fx_teardown(&f);
}

/* Retry-After values by path: each is honoured up to the client's cap, never beyond, and
 * nothing overflows (a year, 2^64 and more, a far HTTP-date); junk and past dates mean none. */
static const struct {
    const char *path;
    const char *header;
    uint64_t want_capped;  /* with max_retry_after_ms = 2500 */
    uint64_t want_default; /* with the default cap (5 minutes) */
} retry_cases[] = {
    {"/s1", "Retry-After: 1\r\n", 1000, 1000},
    {"/s2", "Retry-After: 2\r\n", 2000, 2000},
    {"/s3", "Retry-After: 3\r\n", 2500, 3000},
    {"/year", "Retry-After: 31536000\r\n", 2500, HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS},
    {"/u64", "Retry-After: 18446744073709551615\r\n", 2500, HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS},
    {"/huge", "Retry-After: 99999999999999999999999999\r\n", 2500,
     HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS},
    {"/date", "Retry-After: Fri, 31 Dec 9999 23:59:59 GMT\r\n", 2500,
     HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS},
    {"/past", "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", 0, 0},
    {"/neg", "Retry-After: -5\r\n", 0, 0},
    {"/junk", "Retry-After: 5s\r\n", 0, 0},
    {"/none", NULL, 0, 0},
};

static void h_retry_after(struct fh_conn *c, const struct fh_request *r, void *data)
{
    (void)data;
    for (size_t i = 0; i < HP_ARRAY_SIZE(retry_cases); i++) {
        if (strcmp(r->path, retry_cases[i].path) == 0) {
            fh_reply(c, 429, retry_cases[i].header, "{}");
            return;
        }
    }
    fh_reply(c, 404, NULL, "{}");
}

static void test_retry_after_cap(void **state)
{
    struct fx f;
    struct cap cap;
    (void)state;

    for (int capped = 0; capped <= 1; capped++) {
        struct hp_kube_client_opts o = {.max_retry_after_ms = 2500};
        fx_setup(&f, h_retry_after, capped ? &o : NULL);
        for (size_t i = 0; i < HP_ARRAY_SIZE(retry_cases); i++) {
            /* GET: a 429 on a write would also pause the writes that follow. */
            do_request(&f, "GET", retry_cases[i].path, NULL, NULL, &cap);
            assert_int_equal(cap.code, 429);
            uint64_t want = capped ? retry_cases[i].want_capped : retry_cases[i].want_default;
            if (cap.retry_after_ms != want)
                fail_msg("%s capped=%d: retry_after_ms %llu, want %llu", retry_cases[i].path,
                         capped, (unsigned long long)cap.retry_after_ms,
                         (unsigned long long)want);
            cap_free(&cap);
        }
        fx_teardown(&f);
    }
}

static void test_status_parse(void **state)
{
    char reason[8], message[16];
    (void)state;

    assert_int_equal(hp_kube_status_parse("", reason, sizeof(reason), message, sizeof(message)), 0);
    assert_string_equal(reason, "");
    assert_int_equal(hp_kube_status_parse(NULL, reason, sizeof(reason), message, sizeof(message)),
                     0);
    assert_int_equal(
        hp_kube_status_parse("not json", reason, sizeof(reason), message, sizeof(message)), 0);
    assert_int_equal(hp_kube_status_parse("[1]", reason, sizeof(reason), message, sizeof(message)),
                     0);
    /* Truncated to the buffers, always terminated. */
    assert_int_equal(hp_kube_status_parse("{\"code\":409,\"reason\":\"AlreadyExists\","
                                          "\"message\":\"a very long message indeed\"}",
                                          reason, sizeof(reason), message, sizeof(message)),
                     409);
    assert_string_equal(reason, "Already");
    assert_string_equal(message, "a very long mes");
    /* Missing fields are empty; NULL buffers are allowed. */
    assert_int_equal(hp_kube_status_parse("{\"code\":500}", reason, sizeof(reason), NULL, 0), 500);
    assert_string_equal(reason, "");
    /* Not a string, not an integer: absent. Escapes are read. */
    assert_int_equal(
        hp_kube_status_parse("{\"code\":\"409\",\"reason\":7,\"message\":\"\\u00e9t\\u00e9\"}",
                             reason, sizeof(reason), message, sizeof(message)),
        0);
    assert_string_equal(reason, "");
    assert_string_equal(message, "\xc3\xa9t\xc3\xa9");
    /* A string holding \u0000 (a Status quoting user data) is cut there; the rest is read. */
    assert_int_equal(hp_kube_status_parse("{\"code\":409,\"reason\":\"a\\u0000b\"}", reason,
                                          sizeof(reason), message, sizeof(message)),
                     409);
    assert_string_equal(reason, "a");
    assert_string_equal(message, "");
}

/* ---- streams ---- */

struct stream_cap {
    struct cap done;
    struct hp_buf data;
    int chunks;
    int cancel_in_data; /* cancel own request from on_data */
    int abort_in_data;  /* return nonzero from on_data */
    int close_in_data;  /* close the client from on_data */
    struct hp_kube_req *self;
    struct hp_kube_req *other; /* cancelled from on_data when set */
    struct fx *f;
    struct cap after; /* request started from inside on_data */
    int start_after;
};

static int on_stream_data(struct hp_kube_req *req, const char *chunk, size_t len, void *data)
{
    struct stream_cap *s = data;
    if (s->self)
        assert_ptr_equal(req, s->self);
    s->chunks++;
    assert_int_equal(hp_buf_append(&s->data, chunk, len), 0);
    if (s->start_after) {
        s->start_after = 0;
        /* Starting a request from inside curl's write callback must be safe. */
        hp_kube_request(s->f->client, "GET", "/after", NULL, NULL, on_resp, &s->after);
    }
    if (s->other) {
        hp_kube_cancel(s->other);
        s->other = NULL;
    }
    if (s->cancel_in_data) {
        hp_kube_cancel(s->self);
        hp_kube_cancel(s->self); /* idempotent while the cancel is pending */
    }
    if (s->close_in_data)
        hp_kube_client_close(s->f->client, on_client_closed, &s->f->closed);
    return s->abort_in_data;
}

static void on_stream_done(struct hp_kube_req *req, int status, const struct hp_kube_response *r,
                           void *data)
{
    struct stream_cap *s = data;
    if (s->self)
        assert_ptr_equal(req, s->self);
    on_resp(req, status, r, &s->done);
}

static void h_stream(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    if (strcmp(r->path, "/watch") == 0) {
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, "{\"type\":\"ADD");
        fh_chunk_str(c, 20, "ED\"}\n{\"ty");
        fh_chunk_str(c, 20, "pe\":\"X\"}\n");
        fh_stream_end(c, 20);
    } else if (strcmp(r->path, "/denied") == 0) {
        fh_reply(c, 403, NULL, "{\"kind\":\"Status\",\"code\":403}");
    } else if (strcmp(r->path, "/hold-stream") == 0) {
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, "a\n");
        fh_chunk_str(c, 50, "b\n");
        /* then nothing: the stream stays open */
    } else if (strcmp(r->path, "/hold") == 0) {
        /* never answered */
    } else {
        fh_reply(c, 200, NULL, "{}");
    }
}

static void stream_init(struct stream_cap *s, struct fx *f)
{
    memset(s, 0, sizeof(*s));
    hp_buf_init(&s->data, 0);
    s->f = f;
}

static void stream_free(struct stream_cap *s)
{
    hp_buf_free(&s->data);
    cap_free(&s->done);
    cap_free(&s->after);
}

static void test_stream(void **state)
{
    struct fx f;
    struct stream_cap s;
    (void)state;

    fx_setup(&f, h_stream, NULL);
    stream_init(&s, &f);
    s.self = hp_kube_stream(f.client, "/watch", on_stream_data, on_stream_done, &s);
    assert_non_null(s.self);
    assert_int_equal(hp_kube_client_inflight(f.client), 1);
    assert_true(fh_run_until_cb(&f.loop, 5000, cap_done, &s.done));
    assert_int_equal(s.done.status, 0);
    assert_int_equal(s.done.code, 200);
    assert_int_equal(s.done.body_len, 0); /* delivered to on_data instead */
    assert_string_equal(s.data.data, "{\"type\":\"ADDED\"}\n{\"type\":\"X\"}\n");
    assert_true(s.chunks >= 3); /* arrived in pieces */
    assert_int_equal(hp_kube_client_inflight(f.client), 0);
    stream_free(&s);

    /* A non-2xx stream is buffered for on_done; on_data never sees it. */
    stream_init(&s, &f);
    hp_kube_stream(f.client, "/denied", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, cap_done, &s.done));
    assert_int_equal(s.chunks, 0);
    assert_int_equal(s.done.code, 403);
    assert_string_equal(s.done.body, "{\"kind\":\"Status\",\"code\":403}");
    stream_free(&s);

    /* on_data returning nonzero aborts the stream: on_done gets -ECANCELED. */
    stream_init(&s, &f);
    s.abort_in_data = 1;
    hp_kube_stream(f.client, "/hold-stream", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, cap_done, &s.done));
    assert_int_equal(s.chunks, 1);
    assert_int_equal(s.done.status, -ECANCELED);
    assert_int_equal(s.done.code, 200);
    stream_free(&s);
    fx_teardown(&f);
}

static int after_and_idle(void *p)
{
    struct stream_cap *s = p;
    return s->after.calls > 0 && hp_kube_client_inflight(s->f->client) == 0;
}

static void test_cancel_in_on_data(void **state)
{
    struct fx f;
    struct stream_cap s;
    struct cap held;
    (void)state;

    fx_setup(&f, h_stream, NULL);
    memset(&held, 0, sizeof(held));
    stream_init(&s, &f);
    s.cancel_in_data = 1;
    s.start_after = 1;
    /* A held request, cancelled from the stream's on_data while curl is on the stack. */
    s.other = hp_kube_request(f.client, "GET", "/hold", NULL, NULL, on_resp, &held);
    s.self = hp_kube_stream(f.client, "/hold-stream", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, after_and_idle, &s));
    fh_run_for(&f.loop, 150); /* the held "b\n" chunk would arrive within this */
    assert_int_equal(s.chunks, 1);
    assert_string_equal(s.data.data, "a\n");
    assert_int_equal(s.done.calls, 0);
    assert_int_equal(held.calls, 0);
    assert_int_equal(s.after.calls, 1);
    assert_int_equal(s.after.code, 200);
    assert_int_equal(hp_kube_client_inflight(f.client), 0);
    stream_free(&s);
    fx_teardown(&f);
}

static int nseen_at_least_1(void *p)
{
    return ((struct fx *)p)->nseen >= 1;
}

static int no_conns(void *p)
{
    return ((struct fx *)p)->srv.conns == NULL;
}

static void test_cancel_before_completion(void **state)
{
    struct fx f;
    struct cap a, b;
    (void)state;

    fx_setup(&f, h_stream, NULL);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    /* Cancelled while queued: the server never sees it. */
    struct hp_kube_req *rb = hp_kube_request(f.client, "GET", "/never", NULL, NULL, on_resp, &b);
    hp_kube_cancel(rb);
    assert_int_equal(hp_kube_client_inflight(f.client), 0);

    /* Cancelled while the server holds it. */
    struct hp_kube_req *ra = hp_kube_request(f.client, "GET", "/hold", NULL, NULL, on_resp, &a);
    assert_true(fh_run_until_cb(&f.loop, 5000, nseen_at_least_1, &f));
    assert_string_equal(f.seen[0].path, "/hold");
    hp_kube_cancel(ra);
    assert_int_equal(hp_kube_client_inflight(f.client), 0);
    /* curl drops the connection of the abandoned transfer. */
    assert_true(fh_run_until_cb(&f.loop, 5000, no_conns, &f));
    fh_run_for(&f.loop, 50);
    assert_int_equal(a.calls, 0);
    assert_int_equal(b.calls, 0);
    assert_int_equal(f.nseen, 1);
    fx_teardown(&f);
}

/* ---- transport errors ---- */

static void test_connection_refused(void **state)
{
    uv_loop_t loop;
    uv_tcp_t probe;
    struct sockaddr_in addr;
    struct sockaddr_storage name;
    int namelen = sizeof(name), closed = 0;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct cap cap;
    (void)state;

    /* A port that was free a moment ago and has no listener now. */
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uv_tcp_init(&loop, &probe), 0);
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
    assert_int_equal(uv_tcp_bind(&probe, (struct sockaddr *)&addr, 0), 0);
    assert_int_equal(uv_tcp_getsockname(&probe, (struct sockaddr *)&name, &namelen), 0);
    int port = ntohs(((struct sockaddr_in *)&name)->sin_port);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&loop, UV_RUN_NOWAIT);

    memset(&creds, 0, sizeof(creds));
    creds.server = hp_xasprintf("http://127.0.0.1:%d", port);
    memset(&cap, 0, sizeof(cap));
    assert_int_equal(hp_kube_client_new(&client, &loop, &creds, NULL), 0);
    hp_kube_request(client, "GET", "/api", NULL, NULL, on_resp, &cap);
    assert_true(fh_run_until_cb(&loop, 5000, cap_done, &cap));
    assert_int_equal(cap.status, -ECONNREFUSED);
    assert_int_equal(cap.code, 0);
    assert_true(cap.has_error);
    /* What was tried and the likely cause. */
    char want[96];
    snprintf(want, sizeof(want), "connection refused: nothing listens on 127.0.0.1:%d", port);
    if (!strstr(cap.error, want))
        fail_msg("error \"%s\" lacks \"%s\"", cap.error, want);
    assert_string_equal(cap.body, "");
    cap_free(&cap);
    hp_kube_client_close(client, on_client_closed, &closed);
    assert_int_equal(closed, 0); /* close_cb fires from the loop */
    assert_true(fh_run_until(&loop, &closed, 5000));
    assert_int_equal(uv_loop_close(&loop), 0);
    hp_kube_creds_free(&creds);
}

static void test_bad_url(void **state)
{
    struct fx f;
    struct cap cap;
    (void)state;

    fx_setup(&f, h_echo, NULL);
    /* A space in the path is rejected by curl's URL parser. */
    do_request(&f, "GET", "/api/v1/x y", NULL, NULL, &cap);
    assert_true(cap.status < 0);
    assert_true(cap.has_error);
    cap_free(&cap);
    fx_teardown(&f);
}

/* ---- write rate limiter ---- */

static int all_done(void *p)
{
    struct cap *caps = p;
    for (int i = 0; i < 8; i++)
        if (!caps[i].calls)
            return 0;
    return 1;
}

static void test_rate_limit(void **state)
{
    struct fx f;
    struct cap caps[8];
    struct hp_kube_client_opts opts = {.qps = 10, .burst = 2};
    char path[32];
    (void)state;

    fx_setup(&f, h_echo, &opts);
    memset(caps, 0, sizeof(caps));
    double t0 = fh_now_ms();
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "/w%d", i);
        hp_kube_request(f.client, "POST", path, "{}", NULL, on_resp, &caps[i]);
    }
    for (int i = 5; i < 8; i++) {
        snprintf(path, sizeof(path), "/r%d", i);
        hp_kube_request(f.client, "GET", path, NULL, NULL, on_resp, &caps[i]);
    }
    assert_true(fh_run_until_cb(&f.loop, 5000, all_done, caps));
    assert_int_equal(f.nseen, 8);

    double w_at[5] = {0}, last_get = 0;
    int next_w = 0;
    for (int i = 0; i < f.nseen; i++) {
        const struct fh_request *r = &f.seen[i];
        if (strcmp(r->method, "POST") == 0) {
            /* Writes leave the FIFO in order. */
            snprintf(path, sizeof(path), "/w%d", next_w);
            assert_string_equal(r->path, path);
            w_at[next_w++] = r->at_ms - t0;
        } else if (r->at_ms - t0 > last_get) {
            last_get = r->at_ms - t0;
        }
    }
    assert_int_equal(next_w, 5);
    /* burst 2 then 10/s: w2 ~100 ms, w3 ~200 ms, w4 ~300 ms. */
    assert_true(w_at[2] >= 90);
    assert_true(w_at[3] >= 190);
    assert_true(w_at[4] >= 250);
    assert_true(w_at[4] < 3000);
    /* Reads are not limited: they do not wait behind the writes. */
    assert_true(last_get < w_at[3]);
    for (int i = 0; i < 8; i++)
        cap_free(&caps[i]);
    fx_teardown(&f);
}

/* After the burst, writes leave in batches (at most ten wakeups a second), not one at a time:
 * at 100/s, ten every 100 ms. */
static void test_rate_limit_batches(void **state)
{
    struct fx f;
    enum { N = 30 };
    static struct cap caps[N];
    struct hp_kube_client_opts opts = {.qps = 100, .burst = 10};
    char path[32];
    (void)state;

    fx_setup(&f, h_echo, &opts);
    memset(caps, 0, sizeof(caps));
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof(path), "/w%d", i);
        hp_kube_request(f.client, "POST", path, "{}", NULL, on_resp, &caps[i]);
    }
    double t0 = fh_now_ms();
    while (f.nseen < N && fh_now_ms() - t0 < 5000)
        (void)uv_run(&f.loop, UV_RUN_ONCE);
    assert_int_equal(f.nseen, N);
    /* The burst at once; then writes 10..19 together about 100 ms later, 20..29 after that. */
    double first = f.seen[0].at_ms;
    assert_true(f.seen[9].at_ms - first < 60);
    assert_true(f.seen[10].at_ms - first >= 90);
    assert_true(f.seen[19].at_ms - f.seen[10].at_ms < 40);
    assert_true(f.seen[20].at_ms - f.seen[19].at_ms >= 60);
    for (int i = 0; i < N; i++)
        cap_free(&caps[i]);
    fx_teardown(&f);
}

/* ---- API Priority and Fairness, the global 429 pause, Events last ---- */

#define APF_HEADERS                                                                               \
    "X-Kubernetes-PF-FlowSchema-UID: 7f6e1c0a-0000-4000-8000-000000000001\r\n"                    \
    "X-Kubernetes-PF-PriorityLevel-UID: 7f6e1c0a-0000-4000-8000-000000000002\r\n"

static void h_apf(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    fh_reply(c, strcmp(r->method, "POST") == 0 ? 201 : 200, APF_HEADERS, "{}");
}

struct caps_n {
    struct cap *caps;
    int n;
};

static int n_done(void *p)
{
    struct caps_n *cn = p;
    for (int i = 0; i < cn->n; i++)
        if (!cn->caps[i].calls)
            return 0;
    return 1;
}

/* Sends one GET, then n POSTs; returns the ms from the first POST's arrival to the last's. */
static double post_spread(struct fx *f, int n)
{
    struct cap get, caps[16];
    struct caps_n cn = {caps, n};
    char path[32];

    assert_true(n <= 16 && f->nseen + 1 + n <= MAX_SEEN);
    do_request(f, "GET", "/api/v1/namespaces", NULL, NULL, &get);
    cap_free(&get);
    memset(caps, 0, sizeof(caps));
    int first = f->nseen;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "/w%d", i);
        hp_kube_request(f->client, "POST", path, "{}", NULL, on_resp, &caps[i]);
    }
    assert_true(fh_run_until_cb(&f->loop, 10000, n_done, &cn));
    for (int i = 0; i < n; i++) {
        assert_true(caps[i].code == 201);
        cap_free(&caps[i]);
    }
    return f->seen[f->nseen - 1].at_ms - f->seen[first].at_ms;
}

static void test_apf_lifts_default_limit(void **state)
{
    struct fx f;
    /* 5 writes/s, burst 1: six writes would take a second. */
    struct hp_kube_client_opts opts = {.qps = 5, .burst = 1, .limit_until_apf = 1};
    (void)state;

    fx_setup(&f, h_apf, &opts);
    assert_int_equal(hp_kube_client_apf_seen(f.client), 0);
    assert_int_equal(hp_kube_client_limited(f.client), 1);
    double spread = post_spread(&f, 6);
    assert_int_equal(hp_kube_client_apf_seen(f.client), 1);
    assert_int_equal(hp_kube_client_limited(f.client), 0);
    assert_true(spread < 500);
    fx_teardown(&f);
}

static void test_apf_keeps_explicit_limit(void **state)
{
    struct fx f;
    /* The flags were given: APF on the server changes nothing. */
    struct hp_kube_client_opts opts = {.qps = 10, .burst = 1, .limit_until_apf = 0};
    (void)state;

    fx_setup(&f, h_apf, &opts);
    double spread = post_spread(&f, 5);
    assert_int_equal(hp_kube_client_apf_seen(f.client), 1);
    assert_int_equal(hp_kube_client_limited(f.client), 1);
    assert_true(spread >= 300); /* four waits of 100 ms after the first token */
    fx_teardown(&f);
}

static void test_no_apf_keeps_default_limit(void **state)
{
    struct fx f;
    /* A server without APF (or one that hides it): the default limit stays. */
    struct hp_kube_client_opts opts = {.qps = 10, .burst = 1, .limit_until_apf = 1};
    (void)state;

    fx_setup(&f, h_echo, &opts);
    double spread = post_spread(&f, 5);
    assert_int_equal(hp_kube_client_apf_seen(f.client), 0);
    assert_int_equal(hp_kube_client_limited(f.client), 1);
    assert_true(spread >= 300);
    fx_teardown(&f);
}

/* /busy* answers 429 (with Retry-After: 1 for /busy-ra), everything else 201. */
static void h_busy(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    if (strncmp(r->path, "/busy-ra", 8) == 0)
        fh_reply(c, 429, "Retry-After: 1\r\n", "{\"kind\":\"Status\",\"code\":429}");
    else if (strncmp(r->path, "/busy", 5) == 0)
        fh_reply(c, 429, NULL, "{\"kind\":\"Status\",\"code\":429}");
    else
        fh_reply(c, 201, APF_HEADERS, "{}");
}

/* Sends a write to busy_path; once it is answered sends two writes to other paths and returns
 * the ms between the 429 and the first of them reaching the server. */
static double pause_after(struct fx *f, const char *busy_path)
{
    struct cap busy, caps[2];
    struct caps_n cn = {caps, 2};

    do_request(f, "POST", busy_path, "{}", NULL, &busy);
    assert_int_equal(busy.code, 429);
    cap_free(&busy);
    double answered = fh_now_ms();
    int first = f->nseen;
    memset(caps, 0, sizeof(caps));
    hp_kube_request(f->client, "PATCH", "/other-a", "{}", NULL, on_resp, &caps[0]);
    hp_kube_request(f->client, "DELETE", "/other-b", NULL, NULL, on_resp, &caps[1]);
    assert_true(fh_run_until_cb(&f->loop, 10000, n_done, &cn));
    cap_free(&caps[0]);
    cap_free(&caps[1]);
    return f->seen[first].at_ms - answered;
}

static void test_429_pauses_all_writes(void **state)
{
    struct fx f;
    struct cap get;
    /* No client-side limit at all: only the pause slows the writes. */
    struct hp_kube_client_opts opts = {.qps = 0};
    (void)state;

    fx_setup(&f, h_busy, &opts);
    double p1 = pause_after(&f, "/busy");
    assert_true(p1 >= 200 && p1 < 1000); /* 250 ms */
    /* The other writes succeeded: the next 429 starts over at 250 ms. */
    double p2 = pause_after(&f, "/busy");
    assert_true(p2 >= 200 && p2 < 1000);
    /* Retry-After names the pause. */
    double p3 = pause_after(&f, "/busy-ra");
    assert_true(p3 >= 900 && p3 < 3000);
    /* Reads do not wait. */
    double t0 = fh_now_ms();
    struct cap busy;
    do_request(&f, "POST", "/busy-ra2", "{}", NULL, &busy);
    cap_free(&busy);
    do_request(&f, "GET", "/api/v1/nodes", NULL, NULL, &get);
    assert_true(fh_now_ms() - t0 < 700);
    cap_free(&get);
    fx_teardown(&f);
}

static void test_429_pause_doubles(void **state)
{
    struct fx f;
    struct cap caps[3];
    struct hp_kube_client_opts opts = {.qps = 0};
    (void)state;

    fx_setup(&f, h_busy, &opts);
    /* Three 429s in a row: the third write waits 250 + 500 ms after the first answer. */
    memset(caps, 0, sizeof(caps));
    do_request(&f, "POST", "/busy1", "{}", NULL, &caps[0]);
    double t0 = fh_now_ms();
    do_request(&f, "POST", "/busy2", "{}", NULL, &caps[1]);
    do_request(&f, "POST", "/busy3", "{}", NULL, &caps[2]);
    double waited = f.seen[2].at_ms - t0;
    assert_true(waited >= 700 && waited < 3000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(caps[i].code, 429);
        cap_free(&caps[i]);
    }
    fx_teardown(&f);
}

static void test_events_after_other_writes(void **state)
{
    struct fx f;
    struct cap caps[6];
    struct caps_n cn = {caps, 6};
    /* One token at a time: the order the writes leave in is the order the server sees. */
    struct hp_kube_client_opts opts = {.qps = 50, .burst = 1};
    static const char *const paths[6] = {
        "/api/v1/namespaces/a/events",      "/api/v1/namespaces/a/events",
        "/api/v1/persistentvolumes",        "/api/v1/persistentvolumes/pv-1",
        "/api/v1/namespaces/a/persistentvolumeclaims/c/status",
        "/api/v1/namespaces/a/events/e-1",
    };
    static const char *const methods[6] = {"POST", "POST", "POST", "DELETE", "PATCH", "PATCH"};
    (void)state;

    fx_setup(&f, h_echo, &opts);
    memset(caps, 0, sizeof(caps));
    for (int i = 0; i < 6; i++)
        hp_kube_request(f.client, methods[i], paths[i], strcmp(methods[i], "DELETE") ? "{}" : NULL,
                        NULL, on_resp, &caps[i]);
    assert_true(fh_run_until_cb(&f.loop, 5000, n_done, &cn));
    assert_int_equal(f.nseen, 6);
    static const int order[6] = {2, 3, 4, 0, 1, 5};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(f.seen[i].method, methods[order[i]]);
        assert_string_equal(f.seen[i].path, paths[order[i]]);
    }
    for (int i = 0; i < 6; i++)
        cap_free(&caps[i]);
    fx_teardown(&f);
}

/* Holds every write for 300 ms. */
static void h_slow(struct fh_conn *c, const struct fh_request *r, void *data)
{
    (void)r;
    (void)data;
    const char *resp = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                       "Content-Length: 2\r\n\r\n{}";
    fh_write(c, resp, strlen(resp), 0, 300);
    fh_done(c);
}

static void test_writes_in_flight_bounded(void **state)
{
    struct fx f;
    enum { N = HP_KUBE_MAX_WRITES_IN_FLIGHT + 36 };
    static struct cap caps[N];
    struct caps_n cn = {caps, N};
    struct hp_kube_client_opts opts = {.qps = 0};
    char path[32];
    size_t most = 0;
    (void)state;

    fx_setup(&f, h_slow, &opts);
    memset(caps, 0, sizeof(caps));
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof(path), "/w%d", i);
        hp_kube_request(f.client, "POST", path, "{}", NULL, on_resp, &caps[i]);
    }
    double t0 = fh_now_ms();
    while (!n_done(&cn) && fh_now_ms() - t0 < 20000) {
        (void)uv_run(&f.loop, UV_RUN_ONCE);
        size_t now = hp_kube_client_writes_in_flight(f.client);
        if (now > most)
            most = now;
    }
    assert_true(n_done(&cn));
    assert_int_equal(most, HP_KUBE_MAX_WRITES_IN_FLIGHT);
    assert_int_equal(hp_kube_client_writes_in_flight(f.client), 0);
    for (int i = 0; i < N; i++)
        cap_free(&caps[i]);
    fx_teardown(&f);
}

/* ---- body cap ---- */

static char *big_chunk;
static size_t big_chunk_len;

static void h_big(struct fh_conn *c, const struct fh_request *r, void *data)
{
    (void)data;
    if (strcmp(r->path, "/big-length") == 0) {
        const char *h = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        "Content-Length: 67108865\r\n\r\n{";
        fh_write(c, h, strlen(h), 1, 0);
        /* the rest never comes: the client must give up on the header alone */
    } else if (strcmp(r->path, "/big-chunked") == 0) {
        fh_stream_begin(c, 200);
        for (int i = 0; i < 65; i++)
            fh_write(c, big_chunk, big_chunk_len, 0, 0);
        fh_stream_end(c, 0);
    } else {
        fh_reply(c, 200, NULL, "{}");
    }
}

static void test_body_cap(void **state)
{
    struct fx f;
    struct cap cap;
    (void)state;

    /* One 1 MiB HTTP chunk, written 65 times: 65 MiB > HP_KUBE_MAX_BODY. */
    const size_t mib = 1024 * 1024;
    big_chunk = hp_xmalloc(mib + 16);
    memcpy(big_chunk, "100000\r\n", 8);
    memset(big_chunk + 8, 'x', mib);
    memcpy(big_chunk + 8 + mib, "\r\n", 2);
    big_chunk_len = 8 + mib + 2;

    fx_setup(&f, h_big, NULL);
    do_request(&f, "GET", "/big-length", NULL, NULL, &cap);
    assert_int_equal(cap.status, -E2BIG);
    assert_true(cap.has_error);
    cap_free(&cap);

    do_request(&f, "GET", "/big-chunked", NULL, NULL, &cap);
    assert_int_equal(cap.status, -E2BIG);
    assert_int_equal(cap.code, 200);
    cap_free(&cap);

    /* The client still works afterwards. */
    do_request(&f, "GET", "/small", NULL, NULL, &cap);
    assert_int_equal(cap.status, 0);
    assert_string_equal(cap.body, "{}");
    cap_free(&cap);
    fx_teardown(&f);
    free(big_chunk);
}

/* ---- close with requests in flight ---- */

static int nseen_at_least_4(void *p)
{
    return ((struct fx *)p)->nseen >= 4;
}

static void test_close_inflight(void **state)
{
    struct fx f;
    struct cap caps[5];
    struct stream_cap s;
    struct hp_kube_client_opts opts = {.qps = 1, .burst = 1};
    (void)state;

    fx_setup(&f, h_stream, &opts);
    memset(caps, 0, sizeof(caps));
    stream_init(&s, &f);
    hp_kube_request(f.client, "GET", "/hold", NULL, NULL, on_resp, &caps[0]);
    hp_kube_request(f.client, "GET", "/hold", NULL, NULL, on_resp, &caps[1]);
    hp_kube_request(f.client, "POST", "/hold", "{}", NULL, on_resp, &caps[2]);
    hp_kube_request(f.client, "POST", "/hold", "{}", NULL, on_resp, &caps[3]); /* rate-limited */
    hp_kube_stream(f.client, "/hold-stream", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, nseen_at_least_4, &f));
    assert_int_equal(hp_kube_client_inflight(f.client), 5);
    hp_kube_client_close(f.client, on_client_closed, &f.closed);
    assert_true(fh_run_until(&f.loop, &f.closed, 5000));
    /* The server sees every connection go away. */
    assert_true(fh_run_until_cb(&f.loop, 5000, no_conns, &f));
    for (int i = 0; i < 5; i++)
        assert_int_equal(caps[i].calls, 0);
    assert_int_equal(s.done.calls, 0);
    assert_int_equal(f.nseen, 4);
    stream_free(&s);
    fx_teardown(&f);
}

struct close_in_cb {
    struct fx *f;
    struct cap held;
    int calls;
};

static void on_resp_close(struct hp_kube_req *req, int status, const struct hp_kube_response *r,
                          void *data)
{
    struct close_in_cb *x = data;
    (void)req;
    (void)status;
    (void)r;
    x->calls++;
    hp_kube_client_close(x->f->client, on_client_closed, &x->f->closed);
}

static void test_close_from_callbacks(void **state)
{
    struct fx f;
    struct close_in_cb x;
    struct stream_cap s;
    (void)state;

    /* From a completion callback, with another request held by the server. */
    fx_setup(&f, h_stream, NULL);
    memset(&x, 0, sizeof(x));
    x.f = &f;
    hp_kube_request(f.client, "GET", "/hold", NULL, NULL, on_resp, &x.held);
    assert_true(fh_run_until_cb(&f.loop, 5000, nseen_at_least_1, &f));
    hp_kube_request(f.client, "GET", "/quick", NULL, NULL, on_resp_close, &x);
    assert_true(fh_run_until(&f.loop, &f.closed, 5000));
    assert_int_equal(x.calls, 1);
    assert_int_equal(x.held.calls, 0);
    fx_teardown(&f);

    /* From a stream's on_data, while curl is on the stack. */
    fx_setup(&f, h_stream, NULL);
    stream_init(&s, &f);
    s.close_in_data = 1;
    hp_kube_stream(f.client, "/hold-stream", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until(&f.loop, &f.closed, 5000));
    assert_int_equal(s.chunks, 1);
    assert_int_equal(s.done.calls, 0);
    stream_free(&s);
    fx_teardown(&f);
}

/* ---- token re-read on 401 ---- */

struct token_fx {
    struct fx f;
    const char *want;
};

static void h_token(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    struct token_fx *t = hp_container_of(f, struct token_fx, f);
    char v[256], want[256];
    fx_record(f, r);
    snprintf(want, sizeof(want), "Bearer %s", t->want);
    if (fh_header(r, "Authorization", v, sizeof(v)) && strcmp(v, want) == 0)
        fh_reply(c, 200, NULL, "{}");
    else
        fh_reply(c, 401, NULL, "{\"kind\":\"Status\",\"reason\":\"Unauthorized\",\"code\":401}");
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

static void test_token_reread_on_401(void **state)
{
    struct token_fx t;
    struct cap cap;
    char dir[] = "/tmp/hp-test-token-XXXXXX";
    (void)state;

    assert_non_null(mkdtemp(dir));
    char *path = hp_xasprintf("%s/token", dir);
    write_file(path, "rotated-token\n");

    memset(&t, 0, sizeof(t));
    t.want = "rotated-token";
    fx_setup(&t.f, h_token, NULL);
    free(t.f.creds.token);
    t.f.creds.token = hp_xstrdup("old-token");
    t.f.creds.token_file = hp_xstrdup(path);

    /* 401 with the old token; the file holds a new one: retried once, transparently. */
    do_request(&t.f, "GET", "/api/v1/persistentvolumes", NULL, NULL, &cap);
    assert_int_equal(cap.status, 0);
    assert_int_equal(cap.code, 200);
    assert_int_equal(t.f.nseen, 2);
    assert_string_equal(t.f.creds.token, "rotated-token");
    cap_free(&cap);

    /* The server wants yet another token, the file did not change: the 401 is reported. */
    t.want = "other";
    do_request(&t.f, "POST", "/api/v1/persistentvolumes", "{}", NULL, &cap);
    assert_int_equal(cap.status, 0);
    assert_int_equal(cap.code, 401);
    assert_int_equal(t.f.nseen, 3);
    cap_free(&cap);

    /* The file rotates again: the next 401 picks it up. */
    write_file(path, "other");
    do_request(&t.f, "GET", "/x", NULL, NULL, &cap);
    assert_int_equal(cap.code, 200);
    assert_int_equal(t.f.nseen, 5);
    cap_free(&cap);

    fx_teardown(&t.f);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
    free(path);
}

/* ---- what the log says ---- */

/* Log lines go to a pipe the test reads: everything logged so far accumulates in `logged`. */
static int log_pipe[2] = {-1, -1};
static struct hp_buf logged;

static void log_capture(int verbosity, enum hp_log_format format)
{
    assert_int_equal(pipe(log_pipe), 0);
    assert_int_equal(fcntl(log_pipe[0], F_SETFL, O_NONBLOCK), 0);
    hp_buf_init(&logged, 0);
    hp_log_set_fd(log_pipe[1]);
    hp_log_init(verbosity, format);
}

/* Reads what was logged since the last call; returns all of it (NUL-terminated). */
static const char *log_read(void)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(log_pipe[0], buf, sizeof(buf))) > 0)
        assert_int_equal(hp_buf_append(&logged, buf, (size_t)n), 0);
    return logged.data ? logged.data : "";
}

static void log_release(void)
{
    hp_log_set_fd(-1);
    hp_log_init(0, HP_LOG_TEXT);
    (void)close(log_pipe[0]);
    (void)close(log_pipe[1]);
    hp_buf_free(&logged);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

struct explain_case {
    struct hp__kube_failure f;
    const char *want[3]; /* substrings of the explanation */
    const char *not;     /* a substring it must not have, or NULL */
};

static void test_explain_transport_errors(void **state)
{
    static const char *const check = "check --master / the kubeconfig server";
    const struct explain_case cases[] = {
        {{.curl_code = CURLE_COULDNT_RESOLVE_HOST, .text = "Could not resolve host: api.x",
          .addr = "api.x:6443", .host = "api.x"},
         {"could not resolve host api.x", check, NULL}, "No route"},
        {{.curl_code = CURLE_COULDNT_CONNECT, .os_errno = ECONNREFUSED,
          .text = "Failed to connect to 127.0.0.1 port 1", .addr = "127.0.0.1:1"},
         {"connection refused: nothing listens on 127.0.0.1:1", check, NULL}, NULL},
        {{.curl_code = CURLE_COULDNT_CONNECT, .os_errno = EHOSTUNREACH, .addr = "10.0.0.1:6443"},
         {"cannot connect to 10.0.0.1:6443: No route to host", "firewall", check}, NULL},
        {{.curl_code = CURLE_OPERATION_TIMEDOUT, .text = "Connection timed out after 10001 ms",
          .connect_timeout_ms = 10000, .addr = "10.0.0.1:6443"},
         {"no connection to 10.0.0.1:6443 within 10000 ms", "firewall", check}, NULL},
        {{.curl_code = CURLE_OPERATION_TIMEDOUT, .text = "Operation timed out after 60000 ms",
          .connected = 1, .addr = "10.0.0.1:6443"},
         {"Operation timed out after 60000 ms", "answered too slowly", NULL}, "firewall"},
        /* https:// to a plain HTTP port (OpenSSL's and GnuTLS's words). */
        {{.curl_code = CURLE_SSL_CONNECT_ERROR, .tls = 1, .addr = "127.0.0.1:8080",
          .text = "OpenSSL/3.0.19: error:0A00010B:SSL routines::wrong version number"},
         {"TLS handshake with 127.0.0.1:8080 failed", "plain HTTP port", check}, NULL},
        {{.curl_code = CURLE_SSL_CONNECT_ERROR, .tls = 1, .addr = "h:1",
          .text = "gnutls_handshake() failed: An unexpected TLS packet was received."},
         {"plain HTTP port", NULL, NULL}, NULL},
        {{.curl_code = CURLE_SSL_CONNECT_ERROR, .tls = 1, .addr = "h:1", .text = "alert 42"},
         {"TLS handshake with h:1 failed: alert 42", NULL, NULL}, "plain HTTP"},
        {{.curl_code = CURLE_PEER_FAILED_VERIFICATION, .tls = 1, .addr = "h:1",
          .text = "SSL certificate problem: unable to get local issuer certificate"},
         {"the certificate of h:1 is not trusted", "certificate-authority", "ca.crt"}, NULL},
        {{.curl_code = CURLE_SSL_CERTPROBLEM, .tls = 1, .addr = "h:1", .text = "bad cert"},
         {"client-certificate and client-key", "bad cert", NULL}, NULL},
        /* http:// to a TLS port: the server resets or closes without an answer. */
        {{.curl_code = CURLE_RECV_ERROR, .os_errno = ECONNRESET, .addr = "127.0.0.1:6443",
          .text = "Recv failure: Connection reset by peer"},
         {"127.0.0.1:6443 closed the connection without an HTTP answer (Connection reset",
          "must start with https://", check},
         NULL},
        {{.curl_code = CURLE_RECV_ERROR, .addr = "h:1", .text = "select/poll returned error"},
         {"h:1 closed the connection without an HTTP answer: if it serves HTTPS", NULL, NULL},
         "select/poll"},
        {{.curl_code = CURLE_GOT_NOTHING, .addr = "h:1"},
         {"h:1 closed the connection without an HTTP answer (Server returned nothing", NULL,
          NULL},
         NULL},
        /* Over TLS, or after an answer began, a reset is only a reset. */
        {{.curl_code = CURLE_RECV_ERROR, .tls = 1, .addr = "h:1", .text = "Recv failure: x"},
         {"Recv failure: x", NULL, NULL}, "https://"},
        {{.curl_code = CURLE_RECV_ERROR, .http_code = 200, .addr = "h:1", .text = "Recv: y"},
         {"Recv: y", NULL, NULL}, "https://"},
        {{.curl_code = CURLE_UNSUPPORTED_PROTOCOL, .addr = "h:1", .text = "ftp not supported"},
         {"ftp not supported", "must start with https://", check}, NULL},
        /* Anything else: curl's own words (its error buffer, else curl_easy_strerror). */
        {{.curl_code = CURLE_HTTP2, .addr = "h:1", .text = ""},
         {"Error in the HTTP2 framing layer", NULL, NULL}, NULL},
    };
    char out[1024];
    (void)state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        hp__kube_explain(out, sizeof(out), &cases[i].f);
        for (size_t k = 0; k < 3 && cases[i].want[k]; k++)
            if (!strstr(out, cases[i].want[k]))
                fail_msg("case %zu: \"%s\" lacks \"%s\"", i, out, cases[i].want[k]);
        if (cases[i].not && strstr(out, cases[i].not))
            fail_msg("case %zu: \"%s\" has \"%s\"", i, out, cases[i].not);
    }
}

/* A raw TCP server on 127.0.0.1 for what fake_http cannot be: it answers whatever arrives with
 * fixed bytes (a plain HTTP server meeting a TLS handshake), or resets the connection (a TLS
 * server meeting plain HTTP, as Python's ssl does). */
struct raw_srv {
    uv_tcp_t listener;
    uv_tcp_t conn;
    uv_write_t wr;
    int port;
    int reset;       /* reset instead of answering */
    int conn_open;   /* conn initialised and not closed */
    int open_handles;
};

static void raw_closed(uv_handle_t *h)
{
    struct raw_srv *s = h->data;
    s->open_handles--;
}

static void raw_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
    static char space[4096];
    (void)h;
    (void)size;
    *buf = uv_buf_init(space, sizeof(space));
}

static void raw_written(uv_write_t *w, int status)
{
    struct raw_srv *s = w->data;
    (void)status;
    if (s->conn_open) {
        s->conn_open = 0;
        uv_close((uv_handle_t *)&s->conn, raw_closed);
    }
}

static void raw_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    struct raw_srv *s = st->data;
    (void)buf;
    if (!s->conn_open)
        return;
    (void)uv_read_stop(st);
    if (n > 0 && s->reset) {
        s->conn_open = 0;
        assert_int_equal(uv_tcp_close_reset(&s->conn, raw_closed), 0);
        return;
    }
    if (n > 0) {
        uv_buf_t b = uv_buf_init((char *)answer, sizeof(answer) - 1);
        s->wr.data = s;
        assert_int_equal(uv_write(&s->wr, st, &b, 1, raw_written), 0);
        return;
    }
    s->conn_open = 0;
    uv_close((uv_handle_t *)&s->conn, raw_closed);
}

static void raw_accept(uv_stream_t *l, int status)
{
    struct raw_srv *s = l->data;
    assert_int_equal(status, 0);
    assert_false(s->conn_open); /* one connection at a time is all these tests make */
    assert_int_equal(uv_tcp_init(l->loop, &s->conn), 0);
    s->conn.data = s;
    s->open_handles++;
    s->conn_open = 1;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&s->conn), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&s->conn, raw_alloc, raw_read), 0);
}

static void raw_start(struct raw_srv *s, uv_loop_t *loop, int reset)
{
    struct sockaddr_in addr;
    struct sockaddr_storage name;
    int namelen = sizeof(name);

    memset(s, 0, sizeof(*s));
    s->reset = reset;
    assert_int_equal(uv_tcp_init(loop, &s->listener), 0);
    s->listener.data = s;
    s->open_handles = 1;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
    assert_int_equal(uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 8, raw_accept), 0);
    assert_int_equal(uv_tcp_getsockname(&s->listener, (struct sockaddr *)&name, &namelen), 0);
    s->port = ntohs(((struct sockaddr_in *)&name)->sin_port);
}

static int raw_all_closed(void *p)
{
    return ((struct raw_srv *)p)->open_handles == 0;
}

static void raw_stop(struct raw_srv *s, uv_loop_t *loop)
{
    if (s->conn_open) {
        s->conn_open = 0;
        uv_close((uv_handle_t *)&s->conn, raw_closed);
    }
    uv_close((uv_handle_t *)&s->listener, raw_closed);
    assert_true(fh_run_until_cb(loop, 5000, raw_all_closed, s));
}

/* One request to url+path with a client of its own; fills cap. */
static void request_once(uv_loop_t *loop, const char *server, const char *path, struct cap *cap)
{
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    int closed = 0;

    memset(&creds, 0, sizeof(creds));
    creds.server = hp_xstrdup(server);
    creds.insecure = 1;
    memset(cap, 0, sizeof(*cap));
    assert_int_equal(hp_kube_client_new(&client, loop, &creds, NULL), 0);
    hp_kube_request(client, "GET", path, NULL, NULL, on_resp, cap);
    assert_true(fh_run_until_cb(loop, 10000, cap_done, cap));
    hp_kube_client_close(client, on_client_closed, &closed);
    assert_true(fh_run_until(loop, &closed, 5000));
    hp_kube_creds_free(&creds);
}

static void test_wrong_scheme_hints(void **state)
{
    uv_loop_t loop;
    struct raw_srv srv;
    struct cap cap;
    char url[64], want[128];
    (void)state;

    assert_int_equal(uv_loop_init(&loop), 0);

    /* https:// to a plain HTTP port: the handshake meets "HTTP/1.1 400". */
    raw_start(&srv, &loop, 0);
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", srv.port);
    request_once(&loop, url, "/api", &cap);
    assert_true(cap.status < 0);
    snprintf(want, sizeof(want), "TLS handshake with 127.0.0.1:%d failed", srv.port);
    if (!strstr(cap.error, want) || !strstr(cap.error, "plain HTTP port"))
        fail_msg("error \"%s\"", cap.error);
    cap_free(&cap);
    raw_stop(&srv, &loop);

    /* http:// to a TLS port that resets on plain HTTP. */
    raw_start(&srv, &loop, 1);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", srv.port);
    request_once(&loop, url, "/api", &cap);
    assert_true(cap.status < 0);
    assert_int_equal(cap.code, 0);
    snprintf(want, sizeof(want), "127.0.0.1:%d closed the connection without an HTTP answer",
             srv.port);
    if (!strstr(cap.error, want) || !strstr(cap.error, "must start with https://"))
        fail_msg("error \"%s\"", cap.error);
    cap_free(&cap);
    raw_stop(&srv, &loop);

    assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- --v 4: every request, watches when they open and when they end ---- */

static void h_v4(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    if (strcmp(r->path, "/w?watch=1&rv=5") == 0) {
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, "{\"type\":\"ADDED\"}\n");
        fh_stream_end(c, 30);
    } else if (strcmp(r->path, "/held?watch=1") == 0) {
        fh_stream_begin(c, 200);
        fh_chunk_str(c, 0, "{}\n");
    } else if (strcmp(r->path, "/gone?watch=1") == 0) {
        fh_reply(c, 410, NULL, "{\"kind\":\"Status\",\"code\":410}");
    } else {
        fh_reply(c, 200, NULL, "{}");
    }
}

static int stream_chunks(void *p)
{
    return ((struct stream_cap *)p)->chunks > 0;
}

static void test_v4_request_lines(void **state)
{
    struct fx f;
    struct cap cap;
    struct stream_cap s;
    (void)state;

    log_capture(4, HP_LOG_TEXT);
    fx_setup(&f, h_v4, NULL);
    do_request(&f, "GET", "/list?limit=1", NULL, NULL, &cap);
    cap_free(&cap);
    do_request(&f, "POST", "/objs", "{}", NULL, &cap);
    cap_free(&cap);
    stream_init(&s, &f);
    hp_kube_stream(f.client, "/w?watch=1&rv=5", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, cap_done, &s.done));
    stream_free(&s);
    stream_init(&s, &f);
    hp_kube_stream(f.client, "/gone?watch=1", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, cap_done, &s.done));
    stream_free(&s);
    stream_init(&s, &f);
    s.self = hp_kube_stream(f.client, "/held?watch=1", on_stream_data, on_stream_done, &s);
    assert_true(fh_run_until_cb(&f.loop, 5000, stream_chunks, &s));
    hp_kube_cancel(s.self);
    stream_free(&s);
    fx_teardown(&f);

    const char *log = log_read();
    static const char *const want[] = {
        "] kube_client: request method=GET path=/list?limit=1 status=200 ms=",
        "] kube_client: request method=POST path=/objs status=200 ms=",
        "] kube_client: watch opened method=GET path=/w?watch=1&rv=5 status=200 ms=",
        "] kube_client: watch ended method=GET path=/w?watch=1&rv=5 status=200 ms=",
        "] kube_client: watch ended method=GET path=/gone?watch=1 status=410 ms=",
        "] kube_client: watch opened method=GET path=/held?watch=1 status=200 ms=",
        "] kube_client: watch cancelled method=GET path=/held?watch=1 status=200 ms=",
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(want); i++)
        if (count_of(log, want[i]) != 1)
            fail_msg("%d times \"%s\" in:\n%s", count_of(log, want[i]), want[i], log);
    assert_int_equal(count_of(log, "watch opened method=GET path=/gone"), 0);
    assert_null(strstr(log, "status=0"));
    assert_null(strstr(log, "secret"));
    log_release();

    /* A request without an HTTP answer: its status is named, with the error. */
    uv_loop_t loop;
    struct raw_srv srv;
    char url[64];
    static const char *const want_err =
        "] kube_client: request method=GET path=/api/v1/x?y=1 status=error ms=";
    log_capture(4, HP_LOG_TEXT);
    assert_int_equal(uv_loop_init(&loop), 0);
    raw_start(&srv, &loop, 1);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", srv.port);
    request_once(&loop, url, "/api/v1/x?y=1", &cap);
    cap_free(&cap);
    raw_stop(&srv, &loop);
    assert_int_equal(uv_loop_close(&loop), 0);
    log = log_read();
    if (count_of(log, want_err) != 1 || count_of(log, "err=\"127.0.0.1:") != 1)
        fail_msg("no error line in:\n%s", log);
    log_release();

    /* Below --v 4: none of it. */
    log_capture(3, HP_LOG_TEXT);
    fx_setup(&f, h_v4, NULL);
    do_request(&f, "GET", "/list?limit=1", NULL, NULL, &cap);
    cap_free(&cap);
    fx_teardown(&f);
    assert_int_equal(count_of(log_read(), "kube_client: request"), 0);
    log_release();
}

/* In JSON, the line's pairs are fields: method, path (with its query), status, ms. */
static void test_v4_request_json(void **state)
{
    struct fx f;
    struct cap cap;
    (void)state;

    log_capture(4, HP_LOG_JSON);
    fx_setup(&f, h_v4, NULL);
    do_request(&f, "GET", "/list?limit=1&continue=a%20b", NULL, NULL, &cap);
    cap_free(&cap);
    fx_teardown(&f);
    const char *log = log_read();
    const char *line = strstr(log, "{\"ts\"");
    assert_non_null(line);
    json_error_t err;
    json_t *j = json_loadb(line, (size_t)(strchr(line, '\n') - line), 0, &err);
    if (!j)
        fail_msg("not JSON: %s: %s", err.text, line);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "kube_client: request");
    assert_string_equal(json_string_value(json_object_get(j, "method")), "GET");
    assert_string_equal(json_string_value(json_object_get(j, "path")),
                        "/list?limit=1&continue=a%20b");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "200");
    assert_non_null(json_string_value(json_object_get(j, "ms")));
    json_decref(j);
    log_release();
}

/* ---- 401 and 403: what to check, once ---- */

static void h_auth(struct fh_conn *c, const struct fh_request *r, void *data)
{
    (void)data;
    if (strncmp(r->path, "/unauth", 7) == 0)
        fh_reply(c, 401, NULL,
                 "{\"kind\":\"Status\",\"reason\":\"Unauthorized\",\"code\":401}");
    else if (strncmp(r->path, "/forbidden/", 11) == 0)
        fh_reply(c, 403, NULL,
                 "{\"kind\":\"Status\",\"reason\":\"Forbidden\",\"code\":403,\"message\":"
                 "\"leases is forbidden: User \\\"system:serviceaccount:x:y\\\" cannot get "
                 "resource \\\"leases\\\"\"}");
    else if (strcmp(r->path, "/go-tls") == 0)
        fh_reply(c, 400, NULL, "Client sent an HTTP request to an HTTPS server.\n");
    else
        fh_reply(c, 200, NULL, "{}");
}

static void test_auth_hint_once(void **state)
{
    static const char *const unauth = "check the token / kubeconfig user (said once";
    static const char *const forbidden = "HTTP 403 Forbidden): check the token / kubeconfig "
                                         "user and its RBAC permissions";
    struct fx f;
    struct cap cap;
    (void)state;

    log_capture(0, HP_LOG_TEXT);
    fx_setup(&f, h_auth, NULL);
    for (int i = 0; i < 3; i++) {
        do_request(&f, "GET", "/unauth/pvs?limit=500", NULL, NULL, &cap);
        assert_int_equal(cap.code, 401);
        cap_free(&cap);
    }
    const char *log = log_read();
    assert_int_equal(count_of(log, unauth), 1);
    assert_non_null(
        strstr(log, "credentials=(none) auth=token request=\"GET /unauth/pvs?limit=500\""));
    /* A success ends the episode: the next 401 is said again. */
    do_request(&f, "GET", "/ok", NULL, NULL, &cap);
    cap_free(&cap);
    do_request(&f, "POST", "/unauth/x", "{}", NULL, &cap);
    cap_free(&cap);
    assert_int_equal(count_of(log_read(), unauth), 2);

    /* 403: once per request kind (RBAC is per resource and verb), with the server's words. */
    for (int i = 0; i < 3; i++) {
        do_request(&f, "GET", "/forbidden/a?x=1", NULL, NULL, &cap);
        cap_free(&cap);
    }
    do_request(&f, "PUT", "/forbidden/a", "{}", NULL, &cap);
    cap_free(&cap);
    do_request(&f, "GET", "/forbidden/b", NULL, NULL, &cap);
    cap_free(&cap);
    log = log_read();
    assert_int_equal(count_of(log, forbidden), 3);
    assert_int_equal(count_of(log, "message=\"leases is forbidden: User \"system:serviceaccount:x:y"
                                   "\" cannot get resource \"leases\"\""),
                     3);

    /* A TLS server's answer to plain HTTP (Go's): said once. */
    for (int i = 0; i < 2; i++) {
        do_request(&f, "GET", "/go-tls", NULL, NULL, &cap);
        assert_int_equal(cap.code, 400);
        cap_free(&cap);
    }
    fx_teardown(&f);
    log = log_read();
    assert_int_equal(count_of(log, "serves HTTPS but the server URL starts with http://"), 1);
    assert_null(strstr(log, "secret")); /* the token */
    log_release();
}

/* ---- the request log line: HTTP version, API Priority and Fairness seen once ---- */

static void h_apf_log(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    fx_record(f, r);
    fh_reply(c, 200,
             "X-Kubernetes-PF-FlowSchema-UID: 0c4a57e1-exempt\r\n"
             "X-Kubernetes-PF-PriorityLevel-UID: 9e1d-exempt\r\n",
             "{}");
}

static void test_log_line_http_version_and_apf(void **state)
{
    struct fx f;
    struct cap cap;
    char path[] = "/tmp/hp-test-kube-client-log.XXXXXX";
    int fd = mkstemp(path);
    (void)state;

    assert_true(fd >= 0);
    hp_log_init(4, HP_LOG_TEXT);
    hp_log_set_fd(fd);
    fx_setup(&f, h_apf_log, NULL);
    do_request(&f, "GET", "/api/v1/persistentvolumes", NULL, NULL, &cap);
    cap_free(&cap);
    do_request(&f, "GET", "/api/v1/persistentvolumeclaims", NULL, NULL, &cap);
    cap_free(&cap);
    fx_teardown(&f);
    hp_log_set_fd(-1);
    hp_log_init(0, HP_LOG_TEXT);

    char text[8192];
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    assert_true(n > 0);
    text[n] = '\0';
    assert_int_equal(close(fd), 0);
    assert_int_equal(unlink(path), 0);
    /* Plain http here: HTTP/1.1 (the realcluster tier sees http=2 over TLS). */
    assert_non_null(strstr(text, "method=GET path=/api/v1/persistentvolumes status=200 ms="));
    const char *l1 = strstr(text, "http=1.1");
    assert_non_null(l1);
    assert_non_null(strstr(l1 + 1, "http=1.1"));
    const char *apf = strstr(text, "API Priority and Fairness flowschema-uid=0c4a57e1-exempt\n");
    assert_non_null(apf);
    assert_null(strstr(apf + 1, "API Priority and Fairness"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),           cmocka_unit_test(test_error_status),
        cmocka_unit_test(test_status_parse),        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_cancel_in_on_data),   cmocka_unit_test(test_cancel_before_completion),
        cmocka_unit_test(test_connection_refused),  cmocka_unit_test(test_bad_url),
        cmocka_unit_test(test_rate_limit),          cmocka_unit_test(test_body_cap),
        cmocka_unit_test(test_rate_limit_batches),
        cmocka_unit_test(test_apf_lifts_default_limit),
        cmocka_unit_test(test_apf_keeps_explicit_limit),
        cmocka_unit_test(test_no_apf_keeps_default_limit),
        cmocka_unit_test(test_429_pauses_all_writes),
        cmocka_unit_test(test_429_pause_doubles),
        cmocka_unit_test(test_events_after_other_writes),
        cmocka_unit_test(test_writes_in_flight_bounded),
        cmocka_unit_test(test_close_inflight),      cmocka_unit_test(test_close_from_callbacks),
        cmocka_unit_test(test_token_reread_on_401),
        cmocka_unit_test(test_retry_after_cap),
        cmocka_unit_test(test_explain_transport_errors),
        cmocka_unit_test(test_wrong_scheme_hints),
        cmocka_unit_test(test_v4_request_lines),
        cmocka_unit_test(test_v4_request_json),
        cmocka_unit_test(test_auth_hint_once),
        cmocka_unit_test(test_log_line_http_version_and_apf),
    };
    hp_metrics_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hp_metrics_free();
    return rc;
}
