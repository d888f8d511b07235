/* fake_http: a scripted HTTP/1.1 server on 127.0.0.1 for unit tests, on the test's own loop,
 * plus bounded helpers that run that loop.
 *
 * Loop thread only (the test's). The server accepts any number of connections on an ephemeral
 * port. Each complete request (headers, then Content-Length bytes of body) is handed to the
 * handler, which queues response steps on the connection: bytes to write (optionally after a
 * delay), the end of a response, or an abrupt close. The steps run in order after the handler
 * returns, from a per-connection timer; a keep-alive connection takes its next request once a
 * response ends. Broken invariants (more than FH_MAX_STEPS steps, a malformed request line, a
 * failing uv call) fail the test through cmocka's assertions.
 *
 * Typical use:
 *
 *     static void h(struct fh_conn *c, const struct fh_request *r, void *data)
 *     {
 *         fh_reply(c, 200, NULL, "{}");
 *     }
 *     ...
 *     fh_server_start(&srv, &loop, h, fixture);      // srv.port is now bound
 *     ...                                             // run requests against it
 *     fh_server_close(&srv);
 *     assert_true(fh_run_until_cb(&loop, 5000, fh_server_closed, &srv));
 *     assert_int_equal(uv_loop_close(&loop), 0);
 */
#ifndef HOSTPATH_TESTS_FAKE_HTTP_H
#define HOSTPATH_TESTS_FAKE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/* Most response steps one connection can hold for one request. */
#define FH_MAX_STEPS 128

/* One parsed request. Borrowed by the handler for the duration of the call only. */
struct fh_request {
    char method[16];
    char path[4096];
    char headers[8192]; /* raw header lines, each ending in CRLF */
    char *body;         /* NUL-terminated */
    size_t body_len;
    double at_ms; /* arrival time, fh_now_ms() clock */
};

/* One accepted connection (opaque): owned by the server, valid during the handler call. */
struct fh_conn;

typedef void (*fh_handler)(struct fh_conn *conn, const struct fh_request *req, void *data);

/* Embed in the test fixture; read the public counters, do not write them. */
struct fh_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port; /* bound port, set by fh_server_start */
    fh_handler handler;
    void *data;
    struct fh_conn *conns; /* open connections; NULL when none */
    int open_handles;      /* uv handles not yet closed; 0 once fully closed */
    int nreq;              /* requests handed to the handler */
    int nconn;             /* connections accepted */
};

/* Binds 127.0.0.1:0 and listens. data is passed to every handler call. */
void fh_server_start(struct fh_server *srv, uv_loop_t *loop, fh_handler handler, void *data);
/* Closes the listener and every connection (queued steps are dropped). Completes on the loop:
 * run it until fh_server_closed(srv). */
void fh_server_close(struct fh_server *srv);
/* Condition for fh_run_until_cb: nonzero once every handle of the server is closed. */
int fh_server_closed(void *srv);

/* Value of a request header (case-insensitive name) copied into out; 1 if present, else 0. */
int fh_header(const struct fh_request *r, const char *name, char *out, size_t outlen);

/* Response steps (they run after the handler returns, in the order queued). */

/* Queues len bytes of data to be written delay_ms after the previous step. With copy the data is
 * copied now; without, it is borrowed and must outlive the write. */
void fh_write(struct fh_conn *c, const void *data, size_t len, int copy, uint64_t delay_ms);
/* Marks the end of the response: the connection then reads its next request. */
void fh_done(struct fh_conn *c);
/* Closes the connection delay_ms after the previous step. */
void fh_close_after(struct fh_conn *c, uint64_t delay_ms);
/* A whole response with Content-Type application/json and Content-Length; extra_headers (may be
 * NULL) is inserted verbatim and must end each line with CRLF. */
void fh_reply(struct fh_conn *c, int code, const char *extra_headers, const char *body);
/* The head of a chunked (Transfer-Encoding) JSON response. */
void fh_stream_begin(struct fh_conn *c, int code);
/* One HTTP chunk carrying data (copied), written delay_ms after the previous step. */
void fh_chunk(struct fh_conn *c, uint64_t delay_ms, const char *data, size_t len);
void fh_chunk_str(struct fh_conn *c, uint64_t delay_ms, const char *data);
/* The last chunk, delay_ms after the previous step, then fh_done. */
void fh_stream_end(struct fh_conn *c, uint64_t delay_ms);

/* Runs steps queued outside a handler call (a test that streams on an open watch later). */
void fh_flush(struct fh_conn *c);

/* Loop helpers: each runs the loop at most timeout_ms (wall clock), with a 5 ms tick so that a
 * condition changed outside any callback is still seen. */

/* Milliseconds from uv_hrtime. */
double fh_now_ms(void);
/* Runs loop until *flag becomes nonzero or timeout_ms pass; returns *flag. */
int fh_run_until(uv_loop_t *loop, const int *flag, uint64_t timeout_ms);
/* Runs loop until cond(arg) is nonzero or timeout_ms pass; returns cond(arg). */
int fh_run_until_cb(uv_loop_t *loop, uint64_t timeout_ms, int (*cond)(void *), void *arg);
/* Runs loop for ms milliseconds. */
void fh_run_for(uv_loop_t *loop, uint64_t ms);

#endif
