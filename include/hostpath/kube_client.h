/* kube_client: HTTPS requests to the Kubernetes API server on the libuv loop via libcurl multi.
 *
 * Loop thread only. Sockets are driven by uv_poll handles (CURLMOPT_SOCKETFUNCTION) and one
 * uv_timer (CURLMOPT_TIMERFUNCTION); completed transfers are collected with
 * curl_multi_info_read. Connections are reused; HTTP/2 is used when the server offers it (ALPN).
 * Writes (POST, PUT, PATCH, DELETE) pass a client-side token bucket (--kube-api-qps/-burst)
 * unless it is lifted for API Priority and Fairness (limit_until_apf); Events go after every
 * other write; a 429 pauses all writes.
 * Callbacks never fire before the call that started the request returns.
 *
 * Lifetime: hp_kube_client_new (it can fail), hp_kube_client_close. A request lives until its
 * completion callback returns or hp_kube_cancel.
 */
#ifndef HOSTPATH_KUBE_CLIENT_H
#define HOSTPATH_KUBE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "hostpath/common.h"

struct hp_kube_creds;
struct hp_kube_client;
struct hp_kube_req;

/* Connections to the API server at most (HTTP/1.1; HTTP/2 multiplexes on one). */
#define HP_KUBE_MAX_CONNECTIONS 12L

/* The Retry-After cap when the options name none: --retry-max-delay's default (5m). */
#define HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS (5u * 60 * 1000)

/* Writes in flight at once when no client-side limit applies. */
#define HP_KUBE_MAX_WRITES_IN_FLIGHT 64

/* Largest buffered response body; a bigger one fails the request with -E2BIG. */
#define HP_KUBE_MAX_BODY (64u * 1024 * 1024)

/* What came back for a request. The callback's status says whether an HTTP answer arrived. */
struct hp_kube_response {
    long code;               /* HTTP status code, 0 when none */
    const char *body;        /* NUL-terminated; borrowed for the duration of the callback */
    size_t body_len;
    uint64_t retry_after_ms; /* Retry-After in ms, 0 when absent; <= max_retry_after_ms */
    const char *error;       /* transport error text when status < 0, else NULL */
};

/* Completion of req: status is 0 when an HTTP answer arrived (whatever its code), else a negative
 * errno (-ECONNREFUSED, -ETIMEDOUT, -E2BIG, -ECANCELED ...). req and resp are borrowed for the
 * duration of the call; req is freed when it returns. Fires exactly once per request unless the
 * request is cancelled. */
typedef void (*hp_kube_response_cb)(struct hp_kube_req *req, int status,
                                    const struct hp_kube_response *resp, void *data);
/* Streaming body bytes of req's 2xx response (a watch). Transient span, not NUL-terminated.
 * Return 0 to continue, nonzero to abort the stream (the completion then gets -ECANCELED). */
typedef int (*hp_kube_data_cb)(struct hp_kube_req *req, const char *chunk, size_t len, void *data);

struct hp_kube_client_opts {
    double qps; /* writes per second; 0 = unlimited */
    int burst;
    /* The limit above was not asked for: it is lifted once a response shows the server runs
     * API Priority and Fairness (X-Kubernetes-PF-FlowSchema-UID), as controller-runtime does.
     * Without the limiter, a 429 still slows every write down, and at most
     * HP_KUBE_MAX_WRITES_IN_FLIGHT writes are in flight. */
    int limit_until_apf;
    long connect_timeout_ms;  /* default 10000 */
    long request_timeout_ms;  /* non-stream requests; default 60000 */
    /* Longest Retry-After passed on in a response (main sets --retry-max-delay); 0 = default
     * HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS. */
    uint64_t max_retry_after_ms;
    const char *user_agent;   /* default "hostpath-provisioner/<version>" */
};

/* 0 and the client in *out, or a negative errno (-EINVAL: creds name no server; -ENOMEM: curl
 * could not be set up) and *out NULL. creds is borrowed and must outlive the client (its token
 * may be re-read on 401); opts (may be NULL) is copied. */
int hp_kube_client_new(struct hp_kube_client **out, uv_loop_t *loop,
                       struct hp_kube_creds *creds, const struct hp_kube_client_opts *opts);

/* Starts a request. path includes the query ("/api/v1/persistentvolumes?limit=500").
 * body (may be NULL) is copied; content_type defaults to application/json.
 * Returns a handle usable with hp_kube_cancel until the callback fires. Never NULL. */
struct hp_kube_req *hp_kube_request(struct hp_kube_client *c, const char *method,
                                    const char *path, const char *body,
                                    const char *content_type, hp_kube_response_cb cb,
                                    void *data);

/* Starts a streaming GET (watch): no overall timeout; on_data receives a 2xx body as it arrives;
 * a non-2xx body is buffered and passed to on_done instead. */
struct hp_kube_req *hp_kube_stream(struct hp_kube_client *c, const char *path,
                                   hp_kube_data_cb on_data, hp_kube_response_cb on_done,
                                   void *data);

/* Lowers the largest body this request buffers (at most HP_KUBE_MAX_BODY): a bigger one fails
 * it with -E2BIG as soon as its Content-Length, or its bytes so far, say so. Call right after
 * starting the request. */
void hp_kube_req_set_max_body(struct hp_kube_req *req, size_t max);

/* Cancels a pending request: no callback of it fires afterwards. Safe from within its own
 * on_data callback. */
void hp_kube_cancel(struct hp_kube_req *req);

/* 1 once a response showed API Priority and Fairness; then whether the client-side write limit
 * applies (tests, metrics). */
int hp_kube_client_apf_seen(const struct hp_kube_client *c);
int hp_kube_client_limited(const struct hp_kube_client *c);
/* 1 while the request waits in the client's own queue (the write limit, a 429 pause, the
 * in-flight bound), not yet sent. */
int hp_kube_req_queued(const struct hp_kube_req *req);
/* Writes handed to curl and not yet answered (at most HP_KUBE_MAX_WRITES_IN_FLIGHT). */
size_t hp_kube_client_writes_in_flight(const struct hp_kube_client *c);

/* Requests started and not yet completed (tests, shutdown). */
size_t hp_kube_client_inflight(const struct hp_kube_client *c);

/* Ends the client's lifetime: cancels everything (no request callback fires after this call),
 * cleans up curl and closes all handles; close_cb fires (from the loop, on a later loop turn)
 * once the last handle is closed and the client is freed. */
void hp_kube_client_close(struct hp_kube_client *c, hp_close_cb close_cb, void *data);

/* How creds authenticate, for logs (never the secret itself): "token", "token-file",
 * "client-certificate", "client-certificate+token", "client-certificate+token-file" or "none". */
const char *hp_kube_auth_kind(const struct hp_kube_creds *creds);

/* Parses a Kubernetes Status body: copies reason and message (may be empty) for error reports.
 * Returns the Status "code" or 0. */
long hp_kube_status_parse(const char *body, char *reason, size_t reason_len, char *message,
                          size_t message_len);

/* Internal, for tests: a transport failure and the words kube_client puts in
 * hp_kube_response.error for it (what was tried and the likely cause). */
struct hp__kube_failure {
    int curl_code;      /* CURLcode */
    const char *text;   /* curl's error buffer ("" or NULL: curl_easy_strerror) */
    int os_errno;       /* CURLINFO_OS_ERRNO, 0 when none */
    int tls;            /* the server URL is https:// */
    long http_code;     /* 0 when no HTTP answer arrived */
    int connected;      /* the TCP connection was made */
    long connect_timeout_ms;
    const char *addr;   /* host:port tried */
    const char *host;   /* the server URL's host */
};
void hp__kube_explain(char *out, size_t len, const struct hp__kube_failure *f);

#endif
