/* Unit tests for kube_client: requests against a scripted HTTP/1.1 server on 127.0.0.1 running on
 * the same loop (plain http), covering bodies and headers, Status parsing, Retry-After, streams,
 * cancellation, transport errors, the write rate limiter, the body cap, close with requests in
 * flight and token re-reading on 401. */
#include <arpa/inet.h>
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

static void on_resp(struct hp_kube_response *r, void *data)
{
    struct cap *c = data;
    c->calls++;
    c->status = r->status;
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
    if (r->status < 0)
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

static int on_stream_data(const char *chunk, size_t len, void *data)
{
    struct stream_cap *s = data;
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

static void on_stream_done(struct hp_kube_response *r, void *data)
{
    struct stream_cap *s = data;
    on_resp(r, &s->done);
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
    assert_true(strlen(cap.error) > 0);
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

static void on_resp_close(struct hp_kube_response *r, void *data)
{
    struct close_in_cb *x = data;
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

/* ---- the request log line: HTTP version, API Priority and Fairness seen once ---- */

static void h_apf(struct fh_conn *c, const struct fh_request *r, void *data)
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
    fx_setup(&f, h_apf, NULL);
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
    assert_non_null(strstr(text, "GET /api/v1/persistentvolumes code=200 status=0"));
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
        cmocka_unit_test(test_close_inflight),      cmocka_unit_test(test_close_from_callbacks),
        cmocka_unit_test(test_token_reread_on_401),
        cmocka_unit_test(test_log_line_http_version_and_apf),
    };
    hp_metrics_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hp_metrics_free();
    return rc;
}
