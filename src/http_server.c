/* http_server: /healthz, /readyz and /metrics over HTTP/1.1 on libuv, parsed with llhttp.
 *
 * Loop thread only. Each connection embeds its uv_tcp_t, a deadline uv_timer_t and a "session"
 * (the llhttp parser plus the little request state we keep). The session is I/O-free: it turns
 * bytes into responses and hands each response to emit(), which either queues a uv_write (a
 * real connection) or appends to a buffer (hp__http_server_parse, used by the fuzzer), so both
 * run the same request path, pauses included.
 *
 * Bounds: method + URL + version + header bytes of one request <= 8 KiB (else 431); any body is
 * refused (413); a parse error answers 400; after those, or "Connection: close", the connection
 * writes what it owes, shuts down its write side, discards input until EOF and closes (a
 * lingering close, so the peer reads the answer rather than a reset).
 *
 * The port must keep answering kubelet's probes whatever other clients do:
 * - Slots: at most 64 connections. When a new one arrives and all are taken, the one idle the
 *   longest (nothing owed, no request under way) is closed to make room, as nginx reuses idle
 *   keep-alive connections; with none idle, the one longest without progress goes. A new
 *   connection is never refused, so keep-alive pollers cannot lock a probe out.
 * - Backpressure: once a connection owes OUTPUT_HIGH_WATER unsent bytes, its parser pauses after
 *   the current request and the socket is not read (uv_read_stop) until the client has taken
 *   the output down to OUTPUT_LOW_WATER. A client pipelining /metrics without reading holds at
 *   most that, one response and one read's bytes, however much it sends; the kernel holds at
 *   most the fixed socket buffers set at accept.
 * - Deadline: one timer per connection, armed at accept and each time a response has been
 *   handed to the kernel in full (progress), never by incoming bytes nor by requests whose
 *   answers are not taken. A request's head must arrive within it of the last answer, an idle
 *   connection lives that long, and a client that stops reading is closed that long after its
 *   last answer went out.
 * Pipelined requests are answered in order: uv_write keeps its queue in order, and a paused
 * parser resumes exactly where it stopped (llhttp_get_error_pos).
 */
#include "hostpath/http_server.h"

#include <errno.h>
#include <llhttp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/common.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

#define MAX_CONNS 64
#define MAX_HEAD_BYTES 8192
/* Unsent bytes at which a connection stops being parsed and read, and at which it resumes. */
#define OUTPUT_HIGH_WATER (64u << 10)
#define OUTPUT_LOW_WATER (16u << 10)
#define DEFAULT_TIMEOUT_MS 10000
#define LINGER_MAX_MS 2000
#define LISTEN_BACKLOG 511 /* nginx's: a burst of connects must not wait for SYN retries */
#define URL_KEEP 256       /* longer URLs match no route */
/* Requests are small (8 KiB head at most), and a paused connection keeps up to one read. */
#define READ_BUF_SIZE 16384
/* Socket buffers asked of the kernel for each connection (Linux doubles them). */
#define SOCKET_SNDBUF (64 << 10)
#define SOCKET_RCVBUF (16 << 10)
#define READY_REASON_MAX 1024

struct conn;

struct session {
    llhttp_t parser;
    hp_http_server_ready_cb ready;
    void *ready_data;
    struct conn *conn; /* NULL: responses go to sink */
    struct hp_buf *sink;
    uint64_t fed;        /* bytes parsed before the current chunk */
    const char *chunk;   /* the chunk being parsed */
    uint64_t head_start; /* stream offset of the current request's first byte */
    int in_head;         /* head_start is set */
    size_t url_len;
    int url_long;
    int reject;     /* status to answer when the parser stops with an error; 0 = 400 */
    int in_message; /* a request has begun and is not yet answered */
    int paused;     /* the parser stopped after a request: too much output is owed */
    int done;       /* no further requests: answer what is owed, then close */
    int abort;      /* the connection is going away: answer nothing more */
    size_t sink_owed; /* bytes appended to sink since the last pause (no conn) */
    char url[URL_KEEP];
};

struct hp_http_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    hp_http_server_ready_cb ready;
    void *ready_data;
    struct hp_list conns; /* open connections, longest without progress first */
    struct hp_list idle;  /* idle connections, longest idle first: eviction order */
    int nconns;
    int handles; /* handles not yet closed: listener, connections' */
    int port;
    int closing;
    int rbuf_busy;
    uint64_t timeout_ms;
    uint64_t evicted;
    uint64_t pauses;
    size_t max_unsent;
    hp_close_cb close_cb;
    void *close_data;
    char rbuf[READ_BUF_SIZE]; /* one read at a time on the loop thread: shared by connections */
};

struct conn {
    struct hp_http_server *srv;
    struct hp_list all; /* in srv->conns */
    struct hp_list lru; /* in srv->idle while conn_is_idle() */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shutdown_req;
    struct session sess;
    struct hp_buf held; /* bytes read but not parsed: the parser paused in their read */
    size_t pending;     /* bytes queued with uv_write and not yet completed */
    int open_handles;
    int closing;
    int reading;  /* uv_read_start is in effect */
    int draining; /* write side shut (or shutting); input is discarded */
    int shut;     /* the shutdown completed */
    int eof;      /* the peer finished sending */
};

struct wreq {
    uv_write_t req;
    struct conn *conn;
    size_t len;
    char *body_owned; /* freed after the write; NULL when the body is static */
    char head[];
};

/* ---- session: bytes in, responses out ---- */

static const char *status_text(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Content Too Large";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    default:
        return "Internal Server Error";
    }
}

static void conn_close(struct conn *c);
static void conn_emit(struct conn *c, const char *head, size_t hlen, const char *body, size_t blen,
                      char *body_owned);

/* Answers one request. body_owned, when not NULL, is the heap copy of body and is consumed.
 * send_body is 0 for HEAD (Content-Length still describes the GET body). */
static void respond(struct session *s, int status, const char *ctype, const char *body, size_t blen,
                    char *body_owned, int send_body, int keep)
{
    char head[512];
    int http10 = s->parser.http_major == 1 && s->parser.http_minor == 0;
    int n = snprintf(
        head, sizeof(head),
        "HTTP/1.1 %d %s\r\n"
        "Content-Type: %s\r\n"
        "Content-Length: %zu\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "%s%s\r\n",
        status, status_text(status), ctype, blen, status == 405 ? "Allow: GET, HEAD\r\n" : "",
        !keep ? "Connection: close\r\n" : (http10 ? "Connection: keep-alive\r\n" : ""));
    if (n < 0 || (size_t)n >= sizeof(head) || s->abort) {
        free(body_owned);
        return;
    }
    if (!send_body)
        blen = 0;
    if (s->conn) {
        conn_emit(s->conn, head, (size_t)n, body, blen, body_owned);
        return;
    }
    (void)hp_buf_append(s->sink, head, (size_t)n);
    (void)hp_buf_append(s->sink, body, blen);
    s->sink_owed += (size_t)n + blen;
    free(body_owned);
}

static void respond_text(struct session *s, int status, const char *text, int send_body, int keep)
{
    respond(s, status, "text/plain; charset=utf-8", text, strlen(text), NULL, send_body, keep);
}

/* Called with every span of the request line and headers: the head spans from the method's
 * first byte to the end of this span, however the bytes were split into reads. */
static int add_head_bytes(struct session *s, const char *at, size_t n)
{
    uint64_t end = s->fed + (uint64_t)(at - s->chunk) + n;
    if (!s->in_head) {
        s->in_head = 1;
        s->head_start = end - n;
    }
    if (end - s->head_start > MAX_HEAD_BYTES) {
        s->reject = 431;
        return HPE_USER;
    }
    return 0;
}

static struct session *sess_of(llhttp_t *p)
{
    return p->data;
}

static int on_message_begin(llhttp_t *p)
{
    struct session *s = sess_of(p);
    s->in_message = 1;
    s->in_head = 0;
    s->url_len = 0;
    s->url_long = 0;
    s->reject = 0;
    return 0;
}

static int on_span(llhttp_t *p, const char *at, size_t len)
{
    return add_head_bytes(sess_of(p), at, len);
}

/* RFC 9110 token characters. llhttp 8 lets a space or other separators into a header name;
 * such a request is malformed and refused. */
static int is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
        return 1;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (!is_tchar((unsigned char)at[i]))
            return HPE_USER; /* reject stays 0: answered with 400 */
    }
    return add_head_bytes(sess_of(p), at, len);
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
    struct session *s = sess_of(p);
    size_t room = sizeof(s->url) - s->url_len;
    size_t take = len < room ? len : room;
    memcpy(s->url + s->url_len, at, take);
    s->url_len += take;
    if (take < len)
        s->url_long = 1; /* the path still routes if its '?' was kept */
    return add_head_bytes(s, at, len);
}

static int on_headers_complete(llhttp_t *p)
{
    struct session *s = sess_of(p);
    int body = (p->flags & (F_CHUNKED | F_TRANSFER_ENCODING)) ||
               ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
    if (body) {
        /* We never read a body: refuse it and close rather than skip it. */
        int m = p->method;
        s->reject = (m == HTTP_GET || m == HTTP_HEAD) ? 413 : 405;
        return -1;
    }
    return 0;
}

static void answer_ready(struct session *s, int send_body, int keep)
{
    if (!s->ready) {
        respond_text(s, 200, "ok", send_body, keep);
        return;
    }
    struct hp_buf why;
    hp_buf_init(&why, READY_REASON_MAX);
    if (s->ready(s->conn ? s->conn->srv : NULL, &why, s->ready_data)) {
        respond_text(s, 200, "ok", send_body, keep);
    } else {
        if (why.len == 0)
            (void)hp_buf_appends(&why, "not ready");
        if (why.data[why.len - 1] != '\n' && hp_buf_append(&why, "\n", 1) != 0)
            why.data[why.len - 1] = '\n';
        size_t len = why.len;
        char *body = hp_buf_steal(&why);
        respond(s, 503, "text/plain; charset=utf-8", body, len, body, send_body, keep);
    }
    hp_buf_free(&why);
}

static void route(struct session *s, int keep)
{
    size_t plen = s->url_len;
    const char *q = memchr(s->url, '?', s->url_len);
    if (q)
        plen = (size_t)(q - s->url);
    int which = 0;
    if (!s->url_long || q) {
        static const char *const paths[] = {"/healthz", "/readyz", "/metrics"};
        for (size_t i = 0; i < HP_ARRAY_SIZE(paths); i++) {
            if (plen == strlen(paths[i]) && memcmp(s->url, paths[i], plen) == 0)
                which = (int)i + 1;
        }
    }
    int m = s->parser.method;
    int send_body = m != HTTP_HEAD;
    if (!which) {
        respond_text(s, 404, "404 page not found\n", send_body, keep);
        return;
    }
    if (m != HTTP_GET && m != HTTP_HEAD) {
        respond_text(s, 405, "method not allowed\n", 1, keep);
        return;
    }
    if (which == 1) {
        respond_text(s, 200, "ok", send_body, keep);
    } else if (which == 2) {
        answer_ready(s, send_body, keep);
    } else {
        struct hp_buf b;
        hp_buf_init(&b, 0);
        hp_metrics_render(&b);
        size_t len = b.len;
        char *body = hp_buf_steal(&b);
        respond(s, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, body, send_body,
                keep);
    }
}

/* Output owed and not yet taken: a connection's unsent bytes; for the sink, what was appended
 * since the last pause, with a high-water mark of one byte so that hp__http_server_parse
 * pauses after every answer and the fuzzer and parse tests run the pause/resume path. */
static int session_backed_up(const struct session *s)
{
    if (!s->conn)
        return s->sink_owed > 0;
    return s->conn->pending >= OUTPUT_HIGH_WATER;
}

static int on_message_complete(llhttp_t *p)
{
    struct session *s = sess_of(p);
    int keep = llhttp_should_keep_alive(p) && !p->upgrade;
    s->in_message = 0;
    route(s, keep);
    if (!keep || s->abort) {
        s->done = 1;
        return HPE_PAUSED; /* parse nothing after this request */
    }
    if (session_backed_up(s)) {
        /* The client has not taken what it asked for: parse its next request only once it
         * has (pipelined requests would otherwise queue one answer each, without bound). */
        s->paused = 1;
        return HPE_PAUSED;
    }
    return 0;
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_method = on_span,
    .on_version = on_span,
    .on_header_field = on_header_field,
    .on_header_value = on_span,
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

static void session_init(struct session *s, hp_http_server_ready_cb ready, void *data)
{
    memset(s, 0, sizeof(*s));
    s->ready = ready;
    s->ready_data = data;
    llhttp_init(&s->parser, HTTP_REQUEST, &settings);
    s->parser.data = s;
}

/* Parses up to len bytes and returns how many it took: all of them, unless the session paused
 * for backpressure (s->paused), in which case the rest must be fed again, in order, once the
 * output has drained. Afterwards s->done says whether the connection must wind down. */
static size_t session_feed(struct session *s, const char *data, size_t len)
{
    if (s->done || s->abort)
        return len;
    s->chunk = data;
    llhttp_errno_t err = llhttp_execute(&s->parser, data, len);
    if (err == HPE_PAUSED && s->paused && !s->done && !s->abort) {
        /* Stopped right after a request; the parser continues from here when fed again. */
        size_t used = (size_t)(llhttp_get_error_pos(&s->parser) - data);
        s->fed += used;
        llhttp_resume(&s->parser);
        return used;
    }
    s->fed += len;
    if (err == HPE_OK)
        return len;
    s->done = 1;
    if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE || s->abort)
        return len;
    int status = s->reject ? s->reject : 400;
    hp_log_v(2, "http_server: refusing request status=%d error=%s reason=\"%s\"", status,
             llhttp_errno_name(err), llhttp_get_error_reason(&s->parser));
    const char *text = status == 431   ? "request header fields too large\n"
                       : status == 413 ? "request body not accepted\n"
                       : status == 405 ? "method not allowed\n"
                                       : "bad request\n";
    respond_text(s, status, text, 1, 0);
    return len;
}

int hp__http_server_parse(const char *const *chunks, const size_t *lens, size_t n,
                          hp_http_server_ready_cb ready, void *data, struct hp_buf *out)
{
    struct session s;
    session_init(&s, ready, data);
    s.sink = out;
    for (size_t i = 0; i < n && !s.done; i++) {
        const char *p = chunks[i];
        size_t left = lens[i];
        /* Each pause takes at least one whole request, so this ends. */
        for (;;) {
            size_t used = session_feed(&s, p, left);
            p += used;
            left -= used;
            if (!s.paused)
                break;
            s.paused = 0; /* the sink drains at once */
            s.sink_owed = 0;
        }
    }
    return !s.done;
}

/* ---- connections ---- */

static void server_handle_closed(struct hp_http_server *srv)
{
    if (--srv->handles > 0 || !srv->closing)
        return;
    hp_close_cb cb = srv->close_cb;
    void *data = srv->close_data;
    free(srv);
    if (cb)
        cb(data);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct hp_http_server *srv = c->srv;
    if (--c->open_handles == 0) {
        hp_buf_free(&c->held);
        free(c);
    }
    server_handle_closed(srv);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->sess.abort = 1;
    hp_list_remove(&c->all);
    hp_list_remove(&c->lru); /* if it is in the idle list */
    c->srv->nconns--;
    /* Queued writes complete with UV_ECANCELED before the close callbacks run. */
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

/* Idle: between requests with nothing owed and nothing held, i.e. what a kept-alive (or a
 * fresh) connection looks like while its client thinks. Only idle connections are reused for
 * newcomers first. */
static int conn_is_idle(const struct conn *c)
{
    return !c->closing && !c->draining && c->pending == 0 && !c->sess.in_message &&
           !c->sess.paused && c->held.len == 0;
}

/* Keeps c's place in the idle list in step with its state. A connection joins at the tail when
 * it becomes idle and stays put while it remains idle, so the head is the one idle longest. */
static void conn_update_idle(struct conn *c)
{
    int idle = conn_is_idle(c);
    if (idle && !hp_list_linked(&c->lru))
        hp_list_insert_tail(&c->srv->idle, &c->lru);
    else if (!idle && hp_list_linked(&c->lru))
        hp_list_remove(&c->lru);
}

static void on_deadline(uv_timer_t *t)
{
    struct conn *c = t->data;
    hp_log_v(4, "http_server: closing connection at deadline draining=%d pending=%zu",
             c->draining, c->pending);
    conn_close(c);
}

static void arm_timer(struct conn *c, uint64_t ms)
{
    int rc = uv_timer_start(&c->timer, on_deadline, ms, 0);
    if (rc < 0) { /* only fails on a closing handle */
        hp_log_error("http_server: uv_timer_start failed: %s", uv_strerror(rc));
        conn_close(c);
    }
}

/* The connection moved forward (accepted, or an answer went out in full): a new deadline, and
 * the tail of the list that names the connection longest without progress. */
static void conn_progress(struct conn *c)
{
    hp_list_move_tail(&c->srv->conns, &c->all);
    arm_timer(c, c->srv->timeout_ms);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void conn_start_reading(struct conn *c)
{
    if (c->reading || c->eof || c->closing)
        return;
    int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc < 0) {
        hp_log_v(4, "http_server: uv_read_start failed: %s", uv_strerror(rc));
        conn_close(c);
        return;
    }
    c->reading = 1;
}

static void conn_stop_reading(struct conn *c)
{
    if (!c->reading)
        return;
    (void)uv_read_stop((uv_stream_t *)&c->tcp); /* cannot fail for a TCP stream */
    c->reading = 0;
}

static void conn_finish(struct conn *c);

/* The output drained below the low-water mark: parse what was held back, then read again unless
 * the parser paused once more. */
static void conn_resume(struct conn *c)
{
    c->sess.paused = 0;
    if (c->held.len) {
        size_t used = session_feed(&c->sess, c->held.data, c->held.len);
        hp_buf_consume(&c->held, used);
    }
    if (c->sess.done)
        conn_finish(c);
    else if (!c->sess.paused)
        conn_start_reading(c);
}

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = hp_container_of(req, struct wreq, req);
    struct conn *c = w->conn;
    c->pending -= w->len;
    free(w->body_owned);
    free(w);
    if (c->closing)
        return; /* UV_ECANCELED from uv_close, or after an earlier failure */
    if (status < 0) {
        hp_log_v(4, "http_server: write failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    if (!c->draining)
        conn_progress(c);
    if (c->sess.paused && c->pending <= OUTPUT_LOW_WATER)
        conn_resume(c);
    conn_update_idle(c);
}

static void conn_emit(struct conn *c, const char *head, size_t hlen, const char *body, size_t blen,
                      char *body_owned)
{
    if (c->closing) {
        free(body_owned);
        return;
    }
    struct wreq *w = hp_xmalloc(sizeof(*w) + hlen);
    memcpy(w->head, head, hlen);
    w->conn = c;
    w->len = hlen + blen;
    w->body_owned = body_owned;
    uv_buf_t bufs[2] = {uv_buf_init(w->head, (unsigned)hlen),
                        uv_buf_init((char *)body, (unsigned)blen)};
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, blen ? 2 : 1, on_write);
    if (rc < 0) {
        hp_log_v(4, "http_server: uv_write failed: %s", uv_strerror(rc));
        free(body_owned);
        free(w);
        conn_close(c);
        return;
    }
    /* No cap here: the parser pauses at OUTPUT_HIGH_WATER, so this exceeds it by one answer. */
    c->pending += w->len;
    if (c->pending > c->srv->max_unsent)
        c->srv->max_unsent = c->pending;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct conn *c = hp_container_of(req, struct conn, shutdown_req);
    c->shut = 1;
    if (status < 0 || c->eof)
        conn_close(c);
}

/* Owes no more answers: flush what is queued, send FIN, discard input until EOF (bounded by a
 * short linger deadline), then close. */
static void conn_finish(struct conn *c)
{
    if (c->closing || c->draining)
        return;
    c->draining = 1;
    c->sess.done = 1;
    c->sess.paused = 0;
    hp_buf_reset(&c->held);
    conn_update_idle(c);
    uint64_t linger = c->srv->timeout_ms < LINGER_MAX_MS ? c->srv->timeout_ms : LINGER_MAX_MS;
    arm_timer(c, linger);
    if (c->closing)
        return;
    int rc = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown);
    if (rc < 0) {
        conn_close(c);
        return;
    }
    conn_start_reading(c); /* to see the EOF, if a pause had stopped reading */
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    struct hp_http_server *srv = c->srv;
    (void)suggested;
    if (!srv->rbuf_busy) {
        srv->rbuf_busy = 1;
        *buf = uv_buf_init(srv->rbuf, sizeof(srv->rbuf));
    } else {
        *buf = uv_buf_init(hp_xmalloc(4096), 4096);
    }
}

/* New bytes from the peer while serving requests. */
static void conn_input(struct conn *c, const char *data, size_t len)
{
    if (c->sess.paused || c->held.len) {
        /* Reading stops with the pause, so this is not expected; keep the order regardless. */
        if (hp_buf_append(&c->held, data, len) < 0)
            conn_close(c);
        return;
    }
    size_t used = session_feed(&c->sess, data, len);
    if (c->sess.done) {
        conn_finish(c);
    } else if (c->sess.paused) {
        /* held is empty here and len <= READ_BUF_SIZE, within its cap. */
        (void)hp_buf_append(&c->held, data + used, len - used);
        conn_stop_reading(c);
        c->srv->pauses++;
        hp_log_v(4, "http_server: client not reading its answers; pausing pending=%zu held=%zu",
                 c->pending, c->held.len);
    }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = stream->data;
    struct hp_http_server *srv = c->srv;

    if (nread > 0 && !c->closing && !c->draining) {
        conn_input(c, buf->base, (size_t)nread);
    } else if (nread < 0 && !c->closing) {
        if (nread == UV_EOF) {
            c->eof = 1;
            conn_stop_reading(c);
            if (!c->draining)
                conn_finish(c);
            else if (c->shut)
                conn_close(c);
        } else {
            hp_log_v(4, "http_server: read failed: %s", uv_strerror((int)nread));
            conn_close(c);
        }
    }
    if (!c->closing) /* c is freed only by close callbacks, never during this call */
        conn_update_idle(c);
    if (buf->base == srv->rbuf)
        srv->rbuf_busy = 0;
    else
        free(buf->base);
}

/* All slots are taken: close the connection idle the longest, else the one longest without
 * progress (a slow header, a client not reading), so that the newcomer - perhaps kubelet's
 * probe - is served. nginx does the same with its idle keep-alive connections. */
static void evict_one(struct hp_http_server *srv)
{
    int idle = !hp_list_empty(&srv->idle);
    struct conn *victim = idle ? hp_list_first_entry(&srv->idle, struct conn, lru)
                               : hp_list_first_entry(&srv->conns, struct conn, all);
    srv->evicted++;
    if ((srv->evicted & (srv->evicted - 1)) == 0) /* 1, 2, 4, ...: a flood logs little */
        hp_log_warn("http_server: connection limit reached; closing the %s connection to make "
                    "room max=%d evicted=%llu",
                    idle ? "longest-idle" : "slowest", MAX_CONNS,
                    (unsigned long long)srv->evicted);
    conn_close(victim);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct hp_http_server *srv = hp_container_of(listener, struct hp_http_server, listener);
    if (status < 0) {
        hp_log_warn("http_server: accept failed: %s", uv_strerror(status));
        return;
    }
    if (srv->nconns >= MAX_CONNS)
        evict_one(srv);
    struct conn *c = hp_xcalloc(1, sizeof(*c));
    c->srv = srv;
    int rc = uv_tcp_init(srv->loop, &c->tcp);
    if (rc < 0) {
        hp_log_error("http_server: uv_tcp_init failed: %s", uv_strerror(rc));
        free(c);
        return;
    }
    c->tcp.data = c;
    c->timer.data = c;
    (void)uv_timer_init(srv->loop, &c->timer); /* cannot fail */
    c->open_handles = 2;
    srv->handles += 2;
    srv->nconns++;
    hp_list_init(&c->all);
    hp_list_init(&c->lru);
    hp_buf_init(&c->held, 2 * READ_BUF_SIZE);
    session_init(&c->sess, srv->ready, srv->ready_data);
    c->sess.conn = c;
    conn_progress(c);

    rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (rc < 0) {
        hp_log_warn("http_server: accept failed: %s", uv_strerror(rc));
        conn_close(c);
        return;
    }
    conn_start_reading(c);
    if (c->closing)
        return;
    (void)uv_tcp_nodelay(&c->tcp, 1); /* small answers: do not wait for Nagle */
    /* The kernel's socket buffers are charged to our memory cgroup too, and autotuning can
     * grow a send buffer to megabytes for a client that stops reading: fixed, small sizes
     * keep what 64 such clients cost bounded (a /metrics page still flows at 128 KiB per
     * round trip). Best effort: the defaults are only less frugal. */
    int sndbuf = SOCKET_SNDBUF, rcvbuf = SOCKET_RCVBUF;
    (void)uv_send_buffer_size((uv_handle_t *)&c->tcp, &sndbuf);
    (void)uv_recv_buffer_size((uv_handle_t *)&c->tcp, &rcvbuf);
    conn_update_idle(c);
}

/* ---- listener ---- */

static int resolve(uv_loop_t *loop, const char *host, int port, struct sockaddr_storage *ss)
{
    char lit[64];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(lit)) {
        memcpy(lit, host + 1, n - 2);
        lit[n - 2] = '\0';
        host = lit;
    }
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    /* A name: resolved once at startup, synchronously (no callback). */
    uv_getaddrinfo_t req;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = uv_getaddrinfo(loop, &req, NULL, host, NULL, &hints);
    if (rc < 0)
        return rc; /* UV_EAI_NONAME: "unknown node or service" says what is wrong */
    /* The first IPv4 address, else the first IPv6 one (as Go's net.Listen): on a Debian
     * install "localhost" is 127.0.0.1 and ::1, often ::1 first, and a probe or a curl to
     * 127.0.0.1 must reach a server told to listen on "localhost". */
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = req.addrinfo; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
        if (ai->ai_family == AF_INET6 && !pick)
            pick = ai;
    }
    rc = -EINVAL;
    if (pick) {
        memcpy(ss, pick->ai_addr, pick->ai_addrlen);
        if (pick->ai_family == AF_INET)
            ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
        else
            ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
        rc = 0;
    }
    uv_freeaddrinfo(req.addrinfo);
    return rc;
}

static void on_failed_listener_closed(uv_handle_t *h)
{
    free(hp_container_of(h, struct hp_http_server, listener));
}

int hp_http_server_new(struct hp_http_server **out, uv_loop_t *loop, const char *host, int port,
                       hp_http_server_ready_cb ready, void *data)
{
    *out = NULL;
    if (port < 0 || port > 65535)
        return -EINVAL;
    int any = !host || !*host || strcmp(host, "::") == 0 || strcmp(host, "[::]") == 0;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    int rc =
        any ? uv_ip6_addr("::", port, (struct sockaddr_in6 *)&ss) : resolve(loop, host, port, &ss);
    if (rc < 0)
        return rc;

    struct hp_http_server *srv = hp_xcalloc(1, sizeof(*srv));
    srv->loop = loop;
    srv->ready = ready;
    srv->ready_data = data;
    srv->timeout_ms = DEFAULT_TIMEOUT_MS;
    hp_list_init(&srv->conns);
    hp_list_init(&srv->idle);
    rc = uv_tcp_init(loop, &srv->listener);
    if (rc < 0) {
        free(srv);
        return rc;
    }
    srv->listener.data = srv;
    /* "::" without IPV6ONLY takes IPv4 too; a kernel without IPv6 gets 0.0.0.0 instead. */
    rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
    if (any && (rc == UV_EAFNOSUPPORT || rc == UV_EADDRNOTAVAIL)) {
        (void)uv_ip4_addr("0.0.0.0", port, (struct sockaddr_in *)&ss); /* literal: cannot fail */
        rc = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, LISTEN_BACKLOG, on_connection);
    struct sockaddr_storage bound;
    int blen = sizeof(bound);
    if (rc == 0)
        rc = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &blen);
    if (rc < 0) {
        /* Not logged here: the caller knows which flag to name (one line per failure). */
        uv_close((uv_handle_t *)&srv->listener, on_failed_listener_closed);
        return rc;
    }
    srv->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
    srv->handles = 1;
    hp_log_info("http_server: listening for /healthz /readyz /metrics address=%s%s%s:%d",
                strchr(any ? "" : host, ':') ? "[" : "", any ? "" : host,
                strchr(any ? "" : host, ':') ? "]" : "", srv->port);
    *out = srv;
    return 0;
}

int hp_http_server_port(const struct hp_http_server *s)
{
    return s->port;
}

void hp_http_server_set_timeout_ms(struct hp_http_server *s, uint64_t ms)
{
    s->timeout_ms = ms ? ms : 1;
}

void hp_http_server_stats(const struct hp_http_server *s, struct hp_http_server_stats *out)
{
    out->connections = s->nconns;
    out->evicted = s->evicted;
    out->pauses = s->pauses;
    out->max_unsent = s->max_unsent;
}

static void on_listener_closed(uv_handle_t *h)
{
    server_handle_closed(h->data);
}

void hp_http_server_close(struct hp_http_server *s, hp_close_cb close_cb, void *data)
{
    if (s->closing)
        return;
    s->closing = 1;
    s->close_cb = close_cb;
    s->close_data = data;
    while (!hp_list_empty(&s->conns))
        conn_close(hp_list_first_entry(&s->conns, struct conn, all)); /* unlinks it */
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}
