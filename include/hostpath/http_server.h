/* http_server: /healthz, /readyz and /metrics over HTTP/1.1, parsed with llhttp, on libuv.
 *
 * Loop thread only. Requests are bounded (8 KiB of headers, no body accepted). At most 64
 * connections: a new one beyond that closes the longest-idle one (else the one longest without
 * progress) instead of being refused, so probes get in however many clients keep connections
 * open. A client that does not read its answers stops being read (backpressure), so pipelining
 * cannot grow memory; a slow or silent client is dropped after a deadline that only answers
 * going out extend. Responses are written with uv_write and never block. Malformed requests
 * get 400, oversized 413/431, and the connection is closed.
 *
 * Lifetime: hp_http_server_new (binds and listens; it can fail), hp_http_server_close.
 */
#ifndef HOSTPATH_HTTP_SERVER_H
#define HOSTPATH_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"

struct hp_http_server;

/* /readyz asks server s (NULL when hp__http_server_parse runs without one): returns 1 when
 * ready; else 0 and a one-line reason appended to why. */
typedef int (*hp_http_server_ready_cb)(struct hp_http_server *s, struct hp_buf *why, void *data);

/* Binds and listens. host "" or NULL = all interfaces (IPv4 and IPv6 where possible); port 0 = pick one.
 * Returns 0 or a negative libuv code (UV_EADDRINUSE, UV_EADDRNOTAVAIL, UV_EINVAL, or a UV_EAI_*
 * code for a host name that does not resolve; uv_strerror() describes each). Nothing is logged
 * on failure: the caller names its flag. On failure *out is NULL and the half-made listener is
 * released by a close callback, so run the loop before uv_loop_close. */
int hp_http_server_new(struct hp_http_server **out, uv_loop_t *loop, const char *host, int port,
                       hp_http_server_ready_cb ready, void *data);
/* The bound port. */
int hp_http_server_port(const struct hp_http_server *s);
/* Per-connection deadline in milliseconds (default 10000), re-armed only when the connection
 * opens and when an answer has gone out in full: a request's line and headers must arrive
 * within it, an idle keep-alive connection is closed after it, and so is a client that stopped
 * taking its answers. Takes effect at the next arming (tests). */
void hp_http_server_set_timeout_ms(struct hp_http_server *s, uint64_t ms);

struct hp_http_server_stats {
    int connections;   /* open now */
    uint64_t evicted;  /* closed to make room for a newcomer (the limit is 64) */
    uint64_t pauses;   /* times a connection stopped being read: too much output owed */
    size_t max_unsent; /* most response bytes one connection has had queued, since start */
};
/* Counters for tests and diagnostics. */
void hp_http_server_stats(const struct hp_http_server *s, struct hp_http_server_stats *out);
/* Ends the server's lifetime: closes the listener and every connection; close_cb fires once all
 * handles are closed and the server is freed, on a later loop turn. */
void hp_http_server_close(struct hp_http_server *s, hp_close_cb close_cb, void *data);

/* Internal, for fuzz/fuzz_http.c and tests: feeds the chunks, in order, to the same request
 * path a connection uses and appends every response it would write to out. Returns 1 when the
 * connection would stay open for another request, 0 when it would be closed. */
int hp__http_server_parse(const char *const *chunks, const size_t *lens, size_t n,
                          hp_http_server_ready_cb ready, void *data, struct hp_buf *out);

#endif
