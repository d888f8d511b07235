/* http_server: /healthz, /readyz and /metrics over HTTP/1.1, parsed with llhttp, on libuv.
 *
 * Loop thread only. Requests are bounded (8 KiB of headers, no body accepted), connections are
 * bounded (64; more are accepted and closed at once), an idle or slow client is dropped after a
 * timeout, responses are written with uv_write and never block. Malformed requests get 400,
 * oversized 413/431, and the connection is closed.
 */
#ifndef HOSTPATH_HTTP_SERVER_H
#define HOSTPATH_HTTP_SERVER_H

#include <uv.h>

#include "hostpath/buf.h"

struct hp_http_server;

/* Returns 1 when ready; else 0 and a one-line reason appended to why. */
typedef int (*hp_http_ready_cb)(void *data, struct hp_buf *why);

/* host "" or NULL = all interfaces (IPv4 and IPv6 where possible); port 0 = pick one. */
int hp_http_server_start(struct hp_http_server **out, uv_loop_t *loop, const char *host,
                         int port, hp_http_ready_cb ready, void *data);
/* The bound port. */
int hp_http_server_port(const struct hp_http_server *s);
/* Closes the listener and every connection; close_cb fires once all handles are closed. */
void hp_http_server_close(struct hp_http_server *s, void (*close_cb)(void *data), void *data);

#endif
