/* fake_http: the scripted HTTP/1.1 test server and the bounded loop helpers (see fake_http.h).
 * Loop thread only. */
#include "fake_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "hostpath/buf.h"

enum fh_step_kind { FH_WRITE, FH_DONE, FH_CLOSE };

struct fh_step {
    enum fh_step_kind kind;
    char *data; /* FH_WRITE */
    size_t len;
    int owned;
    uint64_t delay_ms;
};

struct fh_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct fh_server *srv;
    struct fh_conn *next;
    struct hp_buf in;
    int busy;
    int closing; /* handles still to close; the conn is freed when the last one is */
    int waited;  /* the current step's delay has passed */
    struct fh_step steps[FH_MAX_STEPS];
    size_t nsteps, cur;
};

double fh_now_ms(void)
{
    return (double)uv_hrtime() / 1e6;
}

static void on_listener_closed(uv_handle_t *h)
{
    struct fh_server *srv = h->data;
    srv->open_handles--;
}

static void on_conn_closed(uv_handle_t *h)
{
    struct fh_conn *c = h->data;
    struct fh_server *srv = c->srv;
    if (--c->closing == 0) {
        for (size_t i = c->cur; i < c->nsteps; i++)
            if (c->steps[i].owned)
                free(c->steps[i].data);
        hp_buf_free(&c->in);
        free(c);
    }
    srv->open_handles--;
}

static void conn_close(struct fh_conn *c)
{
    struct fh_conn **pp;
    if (c->closing)
        return;
    for (pp = &c->srv->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    c->closing = 2;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void add_step(struct fh_conn *c, enum fh_step_kind kind, const void *data, size_t len,
                     int copy, uint64_t delay_ms)
{
    assert_true(c->nsteps < FH_MAX_STEPS);
    struct fh_step *s = &c->steps[c->nsteps++];
    s->kind = kind;
    s->len = len;
    s->delay_ms = delay_ms;
    s->owned = copy;
    s->data = copy ? hp_xstrndup(data, len) : (char *)data;
}

static void on_written(uv_write_t *w, int status)
{
    (void)status; /* the peer may have gone: nothing to do */
    free(w->data);
    free(w);
}

static void conn_write(struct fh_conn *c, char *data, size_t len, int owned)
{
    uv_write_t *w = hp_xcalloc(1, sizeof(*w));
    uv_buf_t b = uv_buf_init(data, (unsigned)len);
    w->data = owned ? data : NULL;
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
        free(w->data);
        free(w);
    }
}

static void conn_parse(struct fh_conn *c);
static void conn_run(struct fh_conn *c);

static void on_step_timer(uv_timer_t *t)
{
    struct fh_conn *c = t->data;
    conn_run(c);
}

/* Runs queued steps until one has a delay still to wait, the response ends or the conn closes. */
static void conn_run(struct fh_conn *c)
{
    while (!c->closing && c->cur < c->nsteps) {
        struct fh_step *s = &c->steps[c->cur];
        if (s->delay_ms && !c->waited) {
            c->waited = 1;
            assert_int_equal(uv_timer_start(&c->timer, on_step_timer, s->delay_ms, 0), 0);
            return;
        }
        c->waited = 0;
        c->cur++;
        switch (s->kind) {
        case FH_WRITE:
            conn_write(c, s->data, s->len, s->owned);
            break;
        case FH_DONE:
            c->busy = 0;
            c->nsteps = c->cur = 0;
            conn_parse(c);
            return;
        case FH_CLOSE:
            conn_close(c);
            return;
        }
    }
}

void fh_flush(struct fh_conn *c)
{
    conn_run(c);
}

int fh_header(const struct fh_request *r, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    const char *p = r->headers;
    while (*p) {
        const char *eol = strstr(p, "\r\n");
        if (!eol)
            break;
        if ((size_t)(eol - p) > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            snprintf(out, outlen, "%.*s", (int)(eol - v), v);
            return 1;
        }
        p = eol + 2;
    }
    return 0;
}

/* Hands the next complete request, if any, to the handler (one at a time per connection). */
static void conn_parse(struct fh_conn *c)
{
    if (c->busy || c->closing || !c->in.len)
        return;
    char *end = strstr(c->in.data, "\r\n\r\n");
    if (!end)
        return;
    struct fh_request *r = hp_xcalloc(1, sizeof(*r));
    size_t hlen = (size_t)(end - c->in.data) + 4;
    char *sp1 = memchr(c->in.data, ' ', hlen);
    char *sp2 = sp1 ? memchr(sp1 + 1, ' ', hlen - (size_t)(sp1 + 1 - c->in.data)) : NULL;
    char *eol = strstr(c->in.data, "\r\n");
    assert_non_null(sp2);
    snprintf(r->method, sizeof(r->method), "%.*s", (int)(sp1 - c->in.data), c->in.data);
    snprintf(r->path, sizeof(r->path), "%.*s", (int)(sp2 - sp1 - 1), sp1 + 1);
    snprintf(r->headers, sizeof(r->headers), "%.*s", (int)(end + 2 - (eol + 2)), eol + 2);
    char cl[32];
    size_t blen = 0;
    if (fh_header(r, "Content-Length", cl, sizeof(cl)))
        blen = strtoul(cl, NULL, 10);
    if (c->in.len < hlen + blen) {
        free(r);
        return;
    }
    r->body = hp_xstrndup(c->in.data + hlen, blen);
    r->body_len = blen;
    r->at_ms = fh_now_ms();
    hp_buf_consume(&c->in, hlen + blen);
    c->busy = 1;
    c->srv->nreq++;
    c->srv->handler(c, r, c->srv->data);
    free(r->body);
    free(r);
    conn_run(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    buf->base = hp_xmalloc(suggested);
    buf->len = suggested;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct fh_conn *c = s->data;
    if (nread < 0) {
        free(buf->base);
        conn_close(c);
        return;
    }
    if (nread > 0)
        assert_int_equal(hp_buf_append(&c->in, buf->base, (size_t)nread), 0);
    free(buf->base);
    conn_parse(c);
}

static void on_connection(uv_stream_t *l, int status)
{
    struct fh_server *srv = l->data;
    assert_int_equal(status, 0);
    struct fh_conn *c = hp_xcalloc(1, sizeof(*c));
    c->srv = srv;
    hp_buf_init(&c->in, 0);
    assert_int_equal(uv_tcp_init(srv->loop, &c->tcp), 0);
    assert_int_equal(uv_timer_init(srv->loop, &c->timer), 0);
    c->tcp.data = c;
    c->timer.data = c;
    srv->open_handles += 2;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    assert_int_equal(uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read), 0);
    c->next = srv->conns;
    srv->conns = c;
    srv->nconn++;
}

void fh_server_start(struct fh_server *srv, uv_loop_t *loop, fh_handler handler, void *data)
{
    struct sockaddr_in addr;
    struct sockaddr_storage name;
    int namelen = sizeof(name);

    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->handler = handler;
    srv->data = data;
    assert_int_equal(uv_tcp_init(loop, &srv->listener), 0);
    srv->listener.data = srv;
    srv->open_handles = 1;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
    assert_int_equal(uv_tcp_bind(&srv->listener, (struct sockaddr *)&addr, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&srv->listener, 64, on_connection), 0);
    assert_int_equal(uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&name, &namelen), 0);
    srv->port = ntohs(((struct sockaddr_in *)&name)->sin_port);
}

void fh_server_close(struct fh_server *srv)
{
    uv_close((uv_handle_t *)&srv->listener, on_listener_closed);
    while (srv->conns)
        conn_close(srv->conns);
}

int fh_server_closed(void *srv)
{
    return ((struct fh_server *)srv)->open_handles == 0;
}

/* ---- response steps ---- */

static const char *reason(int code)
{
    switch (code) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 410:
        return "Gone";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    default:
        return "Status";
    }
}

void fh_write(struct fh_conn *c, const void *data, size_t len, int copy, uint64_t delay_ms)
{
    add_step(c, FH_WRITE, data, len, copy, delay_ms);
}

void fh_done(struct fh_conn *c)
{
    add_step(c, FH_DONE, NULL, 0, 0, 0);
}

void fh_close_after(struct fh_conn *c, uint64_t delay_ms)
{
    add_step(c, FH_CLOSE, NULL, 0, 0, delay_ms);
}

void fh_reply(struct fh_conn *c, int code, const char *extra_headers, const char *body)
{
    char *s =
        hp_xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s\r\n%s",
                     code, reason(code), strlen(body), extra_headers ? extra_headers : "", body);
    fh_write(c, s, strlen(s), 1, 0);
    free(s);
    fh_done(c);
}

void fh_stream_begin(struct fh_conn *c, int code)
{
    char *s = hp_xasprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n",
                           code, reason(code));
    fh_write(c, s, strlen(s), 1, 0);
    free(s);
}

void fh_chunk(struct fh_conn *c, uint64_t delay_ms, const char *data, size_t len)
{
    char *s = hp_xasprintf("%zx\r\n%.*s\r\n", len, (int)len, data);
    fh_write(c, s, strlen(s), 1, delay_ms);
    free(s);
}

void fh_chunk_str(struct fh_conn *c, uint64_t delay_ms, const char *data)
{
    fh_chunk(c, delay_ms, data, strlen(data));
}

void fh_stream_end(struct fh_conn *c, uint64_t delay_ms)
{
    fh_write(c, "0\r\n\r\n", 5, 1, delay_ms);
    fh_done(c);
}

/* ---- loop helpers ---- */

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

int fh_run_until_cb(uv_loop_t *loop, uint64_t timeout_ms, int (*cond)(void *), void *arg)
{
    uv_timer_t tick;
    double deadline = fh_now_ms() + (double)timeout_ms;
    assert_int_equal(uv_timer_init(loop, &tick), 0);
    assert_int_equal(uv_timer_start(&tick, on_tick, 5, 5), 0);
    while (!cond(arg) && fh_now_ms() < deadline)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&tick, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return cond(arg);
}

static int flag_set(void *flag)
{
    return *(const int *)flag;
}

int fh_run_until(uv_loop_t *loop, const int *flag, uint64_t timeout_ms)
{
    return fh_run_until_cb(loop, timeout_ms, flag_set, (void *)flag);
}

void fh_run_for(uv_loop_t *loop, uint64_t ms)
{
    int never = 0;
    fh_run_until(loop, &never, ms);
}
