/* kube_client: requests to the Kubernetes API server through libcurl's multi interface, driven
 * by the libuv loop.
 *
 * Loop thread only. curl asks for sockets to watch (CURLMOPT_SOCKETFUNCTION: one context per
 * socket embedding a uv_poll_t) and for one timeout (CURLMOPT_TIMERFUNCTION: one uv_timer_t);
 * both callbacks only arm libuv handles, curl itself is driven from the libuv callbacks.
 * Completed transfers are collected with curl_multi_info_read after every
 * curl_multi_socket_action.
 *
 * New requests never enter curl directly: they wait in a queue (reads) or a FIFO paced by a token
 * bucket (writes) and are handed to the multi from a queue timer. That keeps every curl call out
 * of curl's own call stack (a watch handler may start a request from inside a write callback)
 * and gives the rate limiter a single place to live.
 *
 * Writes: Events wait in their own FIFO behind every other write (a PV create or delete never
 * waits for an Event), at most HP_KUBE_MAX_WRITES_IN_FLIGHT are in flight, a 429 pauses all of
 * them (Retry-After, else a doubling pause), and the token bucket applies unless it was only a
 * default and the server showed API Priority and Fairness.
 */
#include "hostpath/kube_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/json.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/list.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

#define FREE_EASY_MAX 4
#define TOKEN_REREAD_MS 60000
#define KEEPALIVE_IDLE_S 30L
#define KEEPALIVE_INTVL_S 10L
/* 403 answers already explained (per method and path), until that request succeeds. */
#define FORBIDDEN_SAID_MAX 16
/* After a 429 without Retry-After every write waits this long, doubling per 429 in a row. A
 * longer Retry-After holds all writes at most SLOWDOWN_MAX_MS (the answered request itself
 * still waits the whole Retry-After, in the work queue). */
#define SLOWDOWN_FIRST_MS 250
#define SLOWDOWN_MAX_MS 30000

enum req_state {
    REQ_QUEUED,    /* in pending_reads / _writes / _events, not yet known to curl */
    REQ_ACTIVE,    /* added to the multi */
    REQ_CANCELLED, /* cancelled while curl was on the stack: removed from the queue timer */
    REQ_DONE,      /* completion callback running */
};

struct hp_kube_req {
    struct hp_list link;
    struct hp_kube_client *c;
    enum req_state state;
    CURL *easy;
    struct curl_slist *headers;
    char *method;
    char *path;
    char *body; /* owned copy or NULL */
    size_t body_len;
    char *content_type;
    int is_write;
    int is_event;   /* a write of an Event: waits behind every other write */
    int write_slot; /* counted in the client's writes_active */
    int stream;
    hp_kube_response_cb cb;
    hp_kube_data_cb on_data;
    void *data;

    /* Per attempt. */
    struct hp_buf resp;
    long code;
    int headers_done;
    int deliver; /* 2xx stream: body bytes go to on_data */
    int local_err;
    int auth_retried;
    unsigned token_gen; /* the client's token generation this attempt was sent with */
    uint64_t retry_after_ms;
    uint64_t start_ns; /* uv_hrtime when the attempt started, for --v 4 */
    const char *http;  /* the HTTP version the finished attempt used, for --v 4 */
    char errbuf[CURL_ERROR_SIZE];
    char errtext[CURL_ERROR_SIZE + 768]; /* errbuf with what was tried and the likely cause */
};

struct sock_ctx {
    uv_poll_t poll;
    struct hp_list link;
    struct hp_kube_client *c;
    curl_socket_t fd;
};

struct hp_kube_client {
    uv_loop_t *loop;
    struct hp_kube_creds *creds;
    CURLM *multi;
    CURLSH *share;
    uv_timer_t curl_timer;
    uv_timer_t queue_timer;
    struct hp_list pending_reads;
    struct hp_list pending_writes;
    struct hp_list pending_events;
    struct hp_list active;
    struct hp_list cancelled;
    struct hp_list sockets;
    CURL *free_easy[FREE_EASY_MAX];
    size_t n_free_easy;

    double qps;
    double burst;
    double tokens;
    uint64_t tokens_ms;
    int limit_until_apf; /* the bucket is a default: lifted once the server shows APF */
    int apf_seen;
    size_t writes_active;
    uint64_t writes_paused_until; /* uv_now ms; after a 429 */
    uint64_t slowdown_ms;         /* the last pause without Retry-After; 0 after a success */

    int tls; /* server is https:// */
    char *host;     /* the server's host name, for error hints */
    char *hostport; /* host:port */
    long connect_timeout_ms;
    long request_timeout_ms;
    uint64_t max_retry_after_ms;
    char *user_agent;
    uint64_t token_read_ms;
    unsigned token_gen; /* bumped whenever a re-read finds a new token */

    /* Hints logged once, until a request succeeds again (see explain_answer). */
    int unauthorized_said;
    int plain_to_tls_said;
    uint64_t forbidden_said[FORBIDDEN_SAID_MAX]; /* hashes of "METHOD path"; 0 = free */
    size_t forbidden_next;

    size_t inflight;
    int in_curl;   /* depth of curl_multi_socket_action on the stack */
    int closing;   /* hp_kube_client_close was called */
    int finalized; /* curl is cleaned up, handles are closing */
    size_t open_handles;
    hp_close_cb close_cb;
    void *close_data;
};

static void kick(struct hp_kube_client *c);
static void finalize_close(struct hp_kube_client *c);
static void free_client(struct hp_kube_client *c);

/* ---- small helpers ---- */

#define APF_HEADER "X-Kubernetes-PF-FlowSchema-UID:"
#define APF_HEADER_LEN (sizeof(APF_HEADER) - 1)

/* The HTTP version a transfer used, for the request log line ("-" before any response). */
static const char *easy_http_version(CURL *e)
{
    long v = 0;

    (void)curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &v); /* 0 when unknown */
    switch (v) {
    case CURL_HTTP_VERSION_1_0:
        return "1.0";
    case CURL_HTTP_VERSION_1_1:
        return "1.1";
    case CURL_HTTP_VERSION_2_0:
        return "2";
#ifdef CURL_HTTP_VERSION_3
    case CURL_HTTP_VERSION_3:
        return "3";
#endif
    default:
        return "-";
    }
}

static struct hp_kube_req *req_of(struct hp_list *l)
{
    return hp_list_entry(l, struct hp_kube_req, link);
}

static int method_is_write(const char *m)
{
    return strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0;
}

static void release_easy(struct hp_kube_client *c, CURL *easy)
{
    if (!easy)
        return;
    if (!c->finalized && c->n_free_easy < FREE_EASY_MAX)
        c->free_easy[c->n_free_easy++] = easy;
    else
        curl_easy_cleanup(easy);
}

/* The request no longer counts against the writes in flight. */
static void release_write_slot(struct hp_kube_req *r)
{
    if (!r->write_slot)
        return;
    r->write_slot = 0;
    r->c->writes_active--;
    if (!r->c->finalized)
        kick(r->c);
}

static struct hp_list *queue_of(struct hp_kube_client *c, const struct hp_kube_req *r)
{
    if (!r->is_write)
        return &c->pending_reads;
    return r->is_event ? &c->pending_events : &c->pending_writes;
}

static void req_free(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;

    release_write_slot(r);
    release_easy(c, r->easy);
    curl_slist_free_all(r->headers);
    hp_buf_free(&r->resp);
    free(r->method);
    free(r->path);
    free(r->body);
    free(r->content_type);
    free(r);
    c->inflight--;
}

/* Translates a curl result into a negative errno at the module boundary. */
static int map_curl_code(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
        return -EPROTO;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_BAD_FUNCTION_ARGUMENT:
        return -EINVAL;
    case CURLE_FILESIZE_EXCEEDED:
        return -E2BIG;
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_WRITE_ERROR:
        return -ECANCELED;
    default:
        return -EIO;
    }
}

/* Retry-After is delta-seconds or an HTTP-date (RFC 9110 10.2.3). The answer is capped at
 * max_ms (the client's max_retry_after_ms): a server or proxy asking for hours, or a year, must
 * not park a claim longer than our own backoff would. A number too large for 64 bits is just a
 * very long wait, so it gets the cap too; seconds are compared before they are multiplied, so
 * nothing overflows. Unparsable values and dates in the past mean "no advice" (0). */
static uint64_t parse_retry_after(const char *v, size_t len, uint64_t max_ms)
{
    char tmp[64];
    uint64_t secs;

    while (len && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    if (!len || len >= sizeof(tmp))
        return 0;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    if (tmp[0] >= '0' && tmp[0] <= '9') {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(tmp, &end, 10);
        if (*end || (errno && errno != ERANGE))
            return 0;
        secs = errno == ERANGE ? UINT64_MAX : (uint64_t)n;
    } else {
        time_t t = curl_getdate(tmp, NULL);
        time_t now = time(NULL);
        if (t == (time_t)-1 || t <= now)
            return 0;
        secs = (uint64_t)(t - now);
    }
    if (secs > max_ms / 1000)
        return max_ms;
    return secs * 1000;
}

/* ---- what an operator reads ---- */

/* The address a failed transfer tried (curl knows it once it connected or tried to; through a
 * proxy that is the proxy), else the server's host:port. */
static void address_tried(const struct hp_kube_req *r, char *out, size_t len)
{
    char *ip = NULL;
    long port = 0;

    if (curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_IP, &ip) == CURLE_OK && ip && ip[0] &&
        curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_PORT, &port) == CURLE_OK && port > 0) {
        int v6 = strchr(ip, ':') != NULL;
        snprintf(out, len, "%s%s%s:%ld", v6 ? "[" : "", ip, v6 ? "]" : "", port);
        return;
    }
    snprintf(out, len, "%s", r->c->hostport);
}

static int mentions(const char *s, const char *a, const char *b)
{
    return strstr(s, a) != NULL || (b && strstr(s, b) != NULL);
}

void hp__kube_explain(char *out, size_t len, const struct hp__kube_failure *f)
{
    static const char *const check = "check --master / the kubeconfig server";
    const char *what = f->text && f->text[0] ? f->text : curl_easy_strerror((CURLcode)f->curl_code);

    switch ((CURLcode)f->curl_code) {
    case CURLE_COULDNT_RESOLVE_HOST:
        snprintf(out, len, "could not resolve host %s: %s, and DNS", f->host, check);
        return;
    case CURLE_COULDNT_RESOLVE_PROXY:
        snprintf(out, len, "%s: check the proxy variables (https_proxy, HTTPS_PROXY, NO_PROXY)",
                 what);
        return;
    case CURLE_COULDNT_CONNECT:
        if (f->os_errno == ECONNREFUSED)
            snprintf(out, len,
                     "connection refused: nothing listens on %s (%s, and that the API server "
                     "runs)",
                     f->addr, check);
        else
            snprintf(out, len,
                     "cannot connect to %s: %s (a wrong address, a firewall, or the API server "
                     "is down: %s)",
                     f->addr, f->os_errno ? strerror(f->os_errno) : what, check);
        return;
    case CURLE_OPERATION_TIMEDOUT:
        if (!f->connected)
            snprintf(out, len,
                     "no connection to %s within %ld ms (a wrong address, or a firewall that "
                     "drops packets: %s)",
                     f->addr, f->connect_timeout_ms, check);
        else
            snprintf(out, len, "%s (the API server at %s answered too slowly)", what, f->addr);
        return;
    case CURLE_SSL_CONNECT_ERROR:
        if (mentions(what, "wrong version number", "unexpected TLS packet"))
            snprintf(out, len,
                     "TLS handshake with %s failed (%s): it does not speak TLS, is it a plain "
                     "HTTP port? (%s)",
                     f->addr, what, check);
        else
            snprintf(out, len, "TLS handshake with %s failed: %s", f->addr, what);
        return;
    case CURLE_PEER_FAILED_VERIFICATION:
        snprintf(out, len,
                 "the certificate of %s is not trusted (%s): check the kubeconfig's "
                 "certificate-authority / certificate-authority-data (in a pod: the service "
                 "account's ca.crt) and the server name",
                 f->addr, what);
        return;
    case CURLE_SSL_CACERT_BADFILE:
        snprintf(out, len,
                 "%s: check the kubeconfig's certificate-authority / "
                 "certificate-authority-data",
                 what);
        return;
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CLIENTCERT:
        snprintf(out, len,
                 "the client certificate cannot be used (%s): check the kubeconfig user's "
                 "client-certificate and client-key",
                 what);
        return;
    case CURLE_UNSUPPORTED_PROTOCOL:
        snprintf(out, len, "%s: the server URL must start with https:// (%s)", what, check);
        return;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
        if (!f->tls && f->http_code == 0) {
            /* Our poll's error (POLLERR) reaches curl without an errno: its text then says
             * nothing more than "closed". */
            if (f->os_errno)
                what = strerror(f->os_errno);
            int bare = !f->os_errno && strstr(what, "select/poll") != NULL;
            snprintf(out, len,
                     "%s closed the connection without an HTTP answer%s%s%s: if it serves "
                     "HTTPS, the server URL must start with https:// (%s)",
                     f->addr, bare ? "" : " (", bare ? "" : what, bare ? "" : ")", check);
            return;
        }
        break;
    default:
        break;
    }
    snprintf(out, len, "%s", what);
}

/* A transport error in words an operator can act on (hp__kube_explain), from what curl knows
 * of the transfer. Written into r->errtext; the easy handle must still be there. */
static const char *explain_error(struct hp_kube_req *r, CURLcode rc)
{
    char addr[128];
    long oserr = 0;
    curl_off_t connect_us = 0;

    address_tried(r, addr, sizeof(addr));
    (void)curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &oserr);
    (void)curl_easy_getinfo(r->easy, CURLINFO_CONNECT_TIME_T, &connect_us);
    struct hp__kube_failure f = {
        .curl_code = (int)rc,
        .text = r->errbuf,
        .os_errno = (int)oserr,
        .tls = r->c->tls,
        .http_code = r->code,
        .connected = connect_us > 0,
        .connect_timeout_ms = r->c->connect_timeout_ms,
        .addr = addr,
        .host = r->c->host,
    };
    hp__kube_explain(r->errtext, sizeof(r->errtext), &f);
    return r->errtext;
}

static uint64_t elapsed_ms(const struct hp_kube_req *r)
{
    return (uv_hrtime() - r->start_ns) / 1000000u;
}

/* --v 4: one line per request, per opened watch and per ended watch. status is the HTTP status
 * or, when there is none, a word ("error", "cancelled"); err is the transport error, or NULL. */
static void log_request(const struct hp_kube_req *r, const char *what, const char *status,
                        const char *err)
{
    char code[24];
    const char *http;

    if (hp_log_verbosity() < 4)
        return;
    if (!status) {
        snprintf(code, sizeof(code), "%ld", r->code);
        status = code;
    }
    http = r->easy ? easy_http_version(r->easy) : r->http ? r->http : "-";
    if (err)
        hp_log_v(4, "kube_client: %s method=%s path=%s status=%s ms=%llu err=\"%s\" http=%s",
                 what, r->method, r->path, status, (unsigned long long)elapsed_ms(r), err, http);
    else
        hp_log_v(4, "kube_client: %s method=%s path=%s status=%s ms=%llu http=%s", what,
                 r->method, r->path, status, (unsigned long long)elapsed_ms(r), http);
}

const char *hp_kube_auth_kind(const struct hp_kube_creds *cr)
{
    int cert = cr->client_cert_data || cr->client_cert_file;
    if (cr->token_file)
        return cert ? "client-certificate+token-file" : "token-file";
    if (cr->token && cr->token[0])
        return cert ? "client-certificate+token" : "token";
    return cert ? "client-certificate" : "none";
}

/* FNV-1a of "METHOD path" without the query: one key per request kind. Never 0. */
static uint64_t request_key(const struct hp_kube_req *r)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = r->method; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    h = (h ^ ' ') * 0x100000001b3ULL;
    for (const char *p = r->path; *p && *p != '?'; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    return h ? h : 1;
}

/* Returns 1 when key was not in the set (and adds it), 0 when it was. */
static int forbidden_first(struct hp_kube_client *c, uint64_t key)
{
    for (size_t i = 0; i < FORBIDDEN_SAID_MAX; i++)
        if (c->forbidden_said[i] == key)
            return 0;
    c->forbidden_said[c->forbidden_next] = key;
    c->forbidden_next = (c->forbidden_next + 1) % FORBIDDEN_SAID_MAX;
    return 1;
}

static void forbidden_forget(struct hp_kube_client *c, uint64_t key)
{
    for (size_t i = 0; i < FORBIDDEN_SAID_MAX; i++)
        if (c->forbidden_said[i] == key)
            c->forbidden_said[i] = 0;
}

/* HTTP answers that mean the configuration is wrong get one line that says what to check,
 * logged here once (until a request succeeds again) rather than by every caller on every
 * retry: 401 (credentials not accepted), 403 (not allowed; once per request kind, as RBAC is
 * per resource) and a TLS server's answer to plain HTTP. */
static void explain_answer(struct hp_kube_req *r, int status, const struct hp_kube_response *resp)
{
    struct hp_kube_client *c = r->c;
    char auth[1024], reason[128], message[512];

    if (status < 0)
        return;
    if (resp->code >= 200 && resp->code < 300) {
        c->unauthorized_said = 0;
        c->plain_to_tls_said = 0;
        forbidden_forget(c, request_key(r));
        return;
    }
    const struct hp_kube_creds *cr = c->creds;
    /* Which credentials: the file they came from, their kind, the token file to look at. */
    snprintf(auth, sizeof(auth), "credentials=%s auth=%s%s%s", cr->source ? cr->source : "(none)",
             hp_kube_auth_kind(cr), cr->token_file ? " token-file=" : "",
             cr->token_file ? cr->token_file : "");
    if (resp->code == 401 && !c->unauthorized_said) {
        c->unauthorized_said = 1;
        hp_log_error("kube_client: the API server does not accept our credentials (HTTP 401 "
                     "Unauthorized): check the token / kubeconfig user (said once until a "
                     "request succeeds) %s request=\"%s %s\"",
                     auth, r->method, r->path);
    } else if (resp->code == 403 && forbidden_first(c, request_key(r))) {
        hp_kube_status_parse(resp->body, reason, sizeof(reason), message, sizeof(message));
        hp_log_error("kube_client: the API server forbids this request (HTTP 403 Forbidden): "
                     "check the token / kubeconfig user and its RBAC permissions (the "
                     "ClusterRole in manifests/rbac.yaml) %s request=\"%s %s\" message=\"%s\"",
                     auth, r->method, r->path, message);
    } else if (resp->code == 400 && !c->tls && !c->plain_to_tls_said &&
               strstr(resp->body, "HTTP request to an HTTPS server")) {
        c->plain_to_tls_said = 1;
        hp_log_error("kube_client: %s serves HTTPS but the server URL starts with http:// "
                     "(check --master / the kubeconfig server)",
                     c->hostport);
    }
}

/* ---- curl callbacks: they only record data and arm libuv handles ---- */

static int response_is_deliverable(const struct hp_kube_req *r)
{
    return r->on_data && r->code >= 200 && r->code < 300;
}

/* Every answer of a server running API Priority and Fairness names the flow schema that
 * admitted it (KEP-1040; controller-runtime looks for the same header). The first one is logged
 * at --v 2, so an operator can tell the server protects itself. */
static void note_apf(struct hp_kube_client *c, const char *v, size_t len)
{
    if (c->apf_seen)
        return;
    c->apf_seen = 1;
    while (len > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        len--;
    }
    while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
        len--;
    hp_log_v(2, "kube_client: server has API Priority and Fairness flowschema-uid=%.*s",
             (int)(len > 64 ? 64 : len), v);
    if (!c->limit_until_apf || c->qps <= 0)
        return;
    c->qps = 0;
    hp_log_info("kube_client: the API server runs API Priority and Fairness, which protects it: "
                "the default client-side write limit is off (give --kube-api-qps or "
                "--kube-api-burst to keep one)");
    kick(c); /* writes waiting for a token go now */
}

static size_t on_curl_header(char *buf, size_t size, size_t nitems, void *userdata)
{
    struct hp_kube_req *r = userdata;
    size_t n = size * nitems;

    if (r->state != REQ_ACTIVE || r->c->closing)
        return CURL_WRITEFUNC_ERROR;
    if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
        /* A new response (after 1xx, or a retried attempt) starts over. */
        r->retry_after_ms = 0;
        r->headers_done = 0;
        return n;
    }
    if (n >= 12 && strncasecmp(buf, "Retry-After:", 12) == 0) {
        r->retry_after_ms = parse_retry_after(buf + 12, n - 12, r->c->max_retry_after_ms);
        return n;
    }
    if (n > APF_HEADER_LEN && strncasecmp(buf, APF_HEADER, APF_HEADER_LEN) == 0) {
        note_apf(r->c, buf + APF_HEADER_LEN, n - APF_HEADER_LEN);
        return n;
    }
    if ((n == 2 && buf[0] == '\r' && buf[1] == '\n') || (n == 1 && buf[0] == '\n')) {
        long code = 0;
        curl_off_t clen = -1;
        (void)curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= 100 && code < 200)
            return n;
        r->code = code;
        r->headers_done = 1;
        r->deliver = response_is_deliverable(r);
        if (r->deliver)
            log_request(r, "watch opened", NULL, NULL);
        (void)curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
        if (!r->deliver && r->resp.max && clen > (curl_off_t)r->resp.max) {
            r->local_err = -E2BIG;
            return CURL_WRITEFUNC_ERROR;
        }
    }
    return n;
}

static size_t on_curl_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct hp_kube_req *r = userdata;
    size_t n = size * nmemb;

    if (r->state != REQ_ACTIVE || r->c->closing)
        return CURL_WRITEFUNC_ERROR;
    if (!r->headers_done) {
        (void)curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->code);
        r->headers_done = 1;
        r->deliver = response_is_deliverable(r);
    }
    if (r->deliver) {
        int rc = r->on_data(r, ptr, n, r->data);
        /* The handler may have cancelled this request or closed the client. */
        if (r->state != REQ_ACTIVE || r->c->closing)
            return CURL_WRITEFUNC_ERROR;
        if (rc) {
            r->local_err = -ECANCELED;
            return CURL_WRITEFUNC_ERROR;
        }
        return n;
    }
    if (hp_buf_append(&r->resp, ptr, n)) {
        r->local_err = -E2BIG;
        return CURL_WRITEFUNC_ERROR;
    }
    return n;
}

static void on_sock_closed(uv_handle_t *h)
{
    struct sock_ctx *sk = h->data;
    struct hp_kube_client *c = sk->c;

    free(sk);
    if (--c->open_handles == 0 && c->finalized)
        free_client(c);
}

static void sock_close(struct sock_ctx *sk)
{
    hp_list_remove(&sk->link);
    (void)uv_poll_stop(&sk->poll); /* cannot fail for an initialised poll */
    uv_close((uv_handle_t *)&sk->poll, on_sock_closed);
}

static void on_poll(uv_poll_t *h, int status, int events);

static void drop_stale_socket(struct hp_kube_client *c, curl_socket_t s)
{
    struct hp_list *l;
    hp_list_foreach(l, &c->sockets) {
        struct sock_ctx *old = hp_list_entry(l, struct sock_ctx, link);
        if (old->fd == s) {
            hp_log_v(4, "kube_client: dropping stale poll fd=%d", (int)s);
            sock_close(old);
            return;
        }
    }
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct hp_kube_client *c = userp;
    struct sock_ctx *sk = socketp;
    int ev = 0;

    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (sk)
            sock_close(sk);
        return 0;
    }
    if (c->finalized) {
        /* curl_multi_cleanup shutting connections down: nobody will drive them any more. */
        return 0;
    }
    if (!sk) {
        sk = hp_xcalloc(1, sizeof(*sk));
        int rc = uv_poll_init_socket(c->loop, &sk->poll, s);
        if (rc == UV_EEXIST) {
            /* curl closed a socket without CURL_POLL_REMOVE and the number came back: the old
             * poll is stale. Closing it unregisters the descriptor synchronously. */
            drop_stale_socket(c, s);
            rc = uv_poll_init_socket(c->loop, &sk->poll, s);
        }
        if (rc) {
            hp_log_error("kube_client: cannot poll socket fd=%d: %s", (int)s, uv_strerror(rc));
            free(sk);
            return -1;
        }
        sk->poll.data = sk;
        sk->c = c;
        sk->fd = s;
        c->open_handles++;
        hp_list_insert_tail(&c->sockets, &sk->link);
        (void)curl_multi_assign(c->multi, s, sk); /* cannot fail: s is in curl's hash */
    }
    if (what & CURL_POLL_IN)
        ev |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        ev |= UV_WRITABLE;
    int rc = uv_poll_start(&sk->poll, ev, on_poll);
    if (rc) {
        hp_log_error("kube_client: cannot poll socket fd=%d: %s", (int)s, uv_strerror(rc));
        return -1;
    }
    return 0;
}

static void on_curl_timeout(uv_timer_t *t);

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct hp_kube_client *c = userp;

    (void)multi;
    if (timeout_ms < 0 || c->finalized) {
        (void)uv_timer_stop(&c->curl_timer); /* cannot fail */
        return 0;
    }
    /* 0 arms a zero-delay timer: curl is driven from the next loop iteration, never from
     * inside this callback. */
    (void)uv_timer_start(&c->curl_timer, on_curl_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- completion ---- */

/* Fills resp and returns the completion's status: 0 (an HTTP answer) or a negative errno. */
static int build_response(struct hp_kube_req *r, CURLcode rc, struct hp_kube_response *resp)
{
    memset(resp, 0, sizeof(*resp));
    resp->code = r->code;
    resp->retry_after_ms = r->retry_after_ms;
    resp->body = r->resp.data ? r->resp.data : "";
    resp->body_len = r->resp.len;
    if (rc == CURLE_OK && !r->local_err)
        return 0;
    if (r->local_err == -E2BIG)
        resp->error = "response body too large";
    else if (r->local_err == -ECANCELED)
        resp->error = "stream aborted by its handler";
    else
        resp->error = explain_error(r, rc);
    return r->local_err ? r->local_err : map_curl_code(rc);
}

static void reset_attempt(struct hp_kube_req *r)
{
    hp_buf_reset(&r->resp);
    r->code = 0;
    r->headers_done = 0;
    r->deliver = 0;
    r->local_err = 0;
    r->retry_after_ms = 0;
    r->errbuf[0] = '\0';
    r->errtext[0] = '\0';
}

/* A 401 may mean the projected service-account token rotated: re-read it, and when the token
 * differs from the one this request was sent with (changed now, or already re-read for another
 * request that got its 401 first) repeat the request once with the new token. Returns 1 when
 * the request was re-queued. */
static int retry_after_401(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;
    int rc = hp_kube_creds_reload_token(c->creds);

    c->token_read_ms = uv_now(c->loop);
    if (rc < 0) {
        char ebuf[64];
        hp_log_warn("kube_client: cannot re-read token after 401: %s path=%s",
                    hp_kube_creds_strerror(rc, ebuf, sizeof(ebuf)), c->creds->token_file);
    }
    if (rc == 1)
        c->token_gen++;
    if (r->token_gen == c->token_gen || r->auth_retried)
        return 0;
    hp_log_info("kube_client: token changed after 401, retrying method=%s path=%s", r->method,
                r->path);
    log_request(r, r->stream ? "watch ended" : "request", NULL, NULL);
    r->auth_retried = 1;
    release_easy(c, r->easy);
    r->easy = NULL;
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    reset_attempt(r);
    release_write_slot(r);
    r->state = REQ_QUEUED;
    hp_list_insert_tail(queue_of(c, r), &r->link);
    kick(c);
    return 1;
}

/* A 429 (Too Many Requests) pauses every write, not just the one answered: for its Retry-After,
 * else for a pause that doubles with each 429 in a row. Any other answer ends the doubling. */
static void note_answer(struct hp_kube_client *c, const struct hp_kube_response *resp)
{
    uint64_t now = uv_now(c->loop), pause;

    if (resp->code != 429) {
        if (resp->code)
            c->slowdown_ms = 0;
        return;
    }
    if (resp->retry_after_ms) {
        pause = resp->retry_after_ms < SLOWDOWN_MAX_MS ? resp->retry_after_ms : SLOWDOWN_MAX_MS;
    } else {
        pause = c->slowdown_ms ? c->slowdown_ms * 2 : SLOWDOWN_FIRST_MS;
        if (pause > SLOWDOWN_MAX_MS)
            pause = SLOWDOWN_MAX_MS;
        c->slowdown_ms = pause;
    }
    if (now + pause <= c->writes_paused_until)
        return;
    if (c->writes_paused_until <= now)
        hp_log_warn("kube_client: the API server is overloaded (429 Too Many Requests): all "
                    "writes wait %llu ms",
                    (unsigned long long)pause);
    c->writes_paused_until = now + pause;
}

/* The transfer is finished in curl (or abandoned): take it out and report it. */
static void finish(struct hp_kube_req *r, CURLcode rc)
{
    struct hp_kube_client *c = r->c;
    struct hp_kube_response resp;
    CURLMcode mrc = curl_multi_remove_handle(c->multi, r->easy);

    if (mrc != CURLM_OK)
        hp_log_warn("kube_client: curl_multi_remove_handle: %s", curl_multi_strerror(mrc));
    hp_list_remove(&r->link);
    if (r->state == REQ_CANCELLED) {
        req_free(r);
        return;
    }
    if (!r->headers_done)
        (void)curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->code);
    if (rc == CURLE_OK && r->code == 401 && retry_after_401(r))
        return;
    int status = build_response(r, rc, &resp);
    note_answer(c, &resp);
    r->http = easy_http_version(r->easy);
    /* The callback may close the client: the easy handle must not outlive the share. */
    release_easy(c, r->easy);
    r->easy = NULL;
    hp_metrics_api_request(r->method, resp.code);
    log_request(r, r->stream ? "watch ended" : "request", resp.code ? NULL : "error",
                status < 0 ? resp.error : NULL);
    explain_answer(r, status, &resp);
    r->state = REQ_DONE;
    if (r->cb)
        r->cb(r, status, &resp, r->data);
    req_free(r);
}

static void check_multi_info(struct hp_kube_client *c)
{
    CURLMsg *msg;
    int left;

    while (!c->closing && (msg = curl_multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        /* Copy what we need before the handle leaves the multi (msg dies with it). */
        CURL *easy = msg->easy_handle;
        CURLcode rc = msg->data.result;
        char *priv = NULL;
        (void)curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
        if (!priv) {
            (void)curl_multi_remove_handle(c->multi, easy);
            continue;
        }
        finish((struct hp_kube_req *)priv, rc);
    }
}

static void socket_action(struct hp_kube_client *c, curl_socket_t s, int flags)
{
    int running;

    c->in_curl++;
    CURLMcode mrc = curl_multi_socket_action(c->multi, s, flags, &running);
    c->in_curl--;
    if (mrc != CURLM_OK)
        hp_log_warn("kube_client: curl_multi_socket_action: %s", curl_multi_strerror(mrc));
    check_multi_info(c);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct sock_ctx *sk = h->data;
    struct hp_kube_client *c = sk->c;
    int flags = 0;

    if (c->closing) {
        (void)uv_poll_stop(h);
        return;
    }
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    socket_action(c, sk->fd, flags); /* sk may be freed from here on */
}

static void on_curl_timeout(uv_timer_t *t)
{
    struct hp_kube_client *c = hp_container_of(t, struct hp_kube_client, curl_timer);

    if (c->closing)
        return;
    socket_action(c, CURL_SOCKET_TIMEOUT, 0);
}

/* ---- starting transfers ---- */

static int build_headers(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;
    struct curl_slist *h = NULL, *n;
    char *auth = NULL, *ct = NULL;

#define ADD(s)                                                                                     \
    do {                                                                                           \
        n = curl_slist_append(h, (s));                                                             \
        if (!n)                                                                                    \
            goto oom;                                                                              \
        h = n;                                                                                     \
    } while (0)
    ADD("Accept: application/json");
    /* Disable "Expect: 100-continue": the API server answers directly. */
    ADD("Expect:");
    if (c->creds->token && c->creds->token[0]) {
        auth = hp_xasprintf("Authorization: Bearer %s", c->creds->token);
        ADD(auth);
    }
    if (r->body) {
        ct = hp_xasprintf("Content-Type: %s",
                          r->content_type ? r->content_type : "application/json");
        ADD(ct);
    }
#undef ADD
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    free(ct);
    r->headers = h;
    return 0;
oom:
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    free(ct);
    curl_slist_free_all(h);
    return -ENOMEM;
}

static void set_blob(CURL *e, CURLoption opt, const char *pem)
{
    struct curl_blob blob = {.data = (void *)pem, .len = strlen(pem), .flags = CURL_BLOB_COPY};
    (void)curl_easy_setopt(e, opt, &blob);
}

static void set_tls(struct hp_kube_client *c, CURL *e)
{
    const struct hp_kube_creds *cr = c->creds;

    if (cr->insecure) {
        (void)curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        (void)curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        (void)curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
        (void)curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    }
    /* A cluster CA replaces the system trust store, as in client-go. */
    if (cr->ca_data) {
        set_blob(e, CURLOPT_CAINFO_BLOB, cr->ca_data);
        (void)curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    } else if (cr->ca_file) {
        (void)curl_easy_setopt(e, CURLOPT_CAINFO, cr->ca_file);
        (void)curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    }
    if (cr->client_cert_data)
        set_blob(e, CURLOPT_SSLCERT_BLOB, cr->client_cert_data);
    else if (cr->client_cert_file)
        (void)curl_easy_setopt(e, CURLOPT_SSLCERT, cr->client_cert_file);
    if (cr->client_key_data)
        set_blob(e, CURLOPT_SSLKEY_BLOB, cr->client_key_data);
    else if (cr->client_key_file)
        (void)curl_easy_setopt(e, CURLOPT_SSLKEY, cr->client_key_file);
}

/* Options are set on a fresh or reset handle; curl_easy_setopt only fails for unknown options
 * or out of memory, and every option below exists in the minimum libcurl (7.68 + blobs 7.77). */
static int setup_easy(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;
    CURL *e;

    if (c->n_free_easy) {
        e = c->free_easy[--c->n_free_easy];
        curl_easy_reset(e);
    } else {
        e = curl_easy_init();
        if (!e)
            return -ENOMEM;
    }
    r->easy = e;
    r->token_gen = c->token_gen;
    if (build_headers(r))
        return -ENOMEM;
    char *url = hp_xasprintf("%s%s", c->creds->server, r->path);
    CURLcode rc = curl_easy_setopt(e, CURLOPT_URL, url);
    free(url);
    if (rc != CURLE_OK)
        return -ENOMEM;
#if LIBCURL_VERSION_NUM >= 0x075500
    (void)curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    (void)curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    (void)curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    (void)curl_easy_setopt(e, CURLOPT_SHARE, c->share);
    (void)curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    (void)curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    (void)curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /* Waiting for a multiplexed connection only makes sense over TLS, where ALPN settles the
     * protocol at the handshake; over cleartext (HTTP/1.1 only) curl would not learn it before
     * the first response, and a held request (a watch) would stall everyone behind it. */
    if (c->tls)
        (void)curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    (void)curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->connect_timeout_ms);
    if (!r->stream)
        (void)curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->request_timeout_ms);
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, KEEPALIVE_IDLE_S);
    (void)curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, KEEPALIVE_INTVL_S);
    (void)curl_easy_setopt(e, CURLOPT_USERAGENT, c->user_agent);
    (void)curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    (void)curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
    (void)curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    (void)curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_write);
    (void)curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    set_tls(c, e);
    if (strcmp(r->method, "GET") == 0) {
        (void)curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
        if (strcmp(r->method, "POST") != 0)
            (void)curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
        if (r->body || strcmp(r->method, "DELETE") != 0) {
            (void)curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
            (void)curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
        }
    }
    return 0;
}

static void fail_locally(struct hp_kube_req *r, int status, const char *what)
{
    struct hp_kube_response resp = {.body = "", .error = what};

    hp_metrics_api_request(r->method, 0);
    log_request(r, r->stream ? "watch ended" : "request", "error", what);
    release_easy(r->c, r->easy);
    r->easy = NULL;
    r->state = REQ_DONE;
    if (r->cb)
        r->cb(r, status, &resp, r->data);
    req_free(r);
}

static void start_transfer(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;
    uint64_t now = uv_now(c->loop);

    hp_list_remove(&r->link);
    if (c->creds->token_file && now - c->token_read_ms >= TOKEN_REREAD_MS) {
        int rc = hp_kube_creds_reload_token(c->creds);
        if (rc < 0) {
            char ebuf[64];
            hp_log_warn("kube_client: cannot re-read token file: %s path=%s",
                        hp_kube_creds_strerror(rc, ebuf, sizeof(ebuf)), c->creds->token_file);
        }
        if (rc == 1)
            c->token_gen++;
        c->token_read_ms = now;
    }
    r->start_ns = uv_hrtime();
    if (setup_easy(r)) {
        fail_locally(r, -ENOMEM, "cannot set up the request");
        return;
    }
    r->state = REQ_ACTIVE;
    if (r->is_write) {
        r->write_slot = 1;
        c->writes_active++;
    }
    hp_list_insert_tail(&c->active, &r->link);
    CURLMcode mrc = curl_multi_add_handle(c->multi, r->easy);
    if (mrc != CURLM_OK) {
        hp_list_remove(&r->link);
        hp_log_error("kube_client: curl_multi_add_handle: %s", curl_multi_strerror(mrc));
        fail_locally(r, -ENOMEM, curl_multi_strerror(mrc));
    }
}

/* Token bucket: returns 0 when a write may start now, else the ms until one may. */
static uint64_t take_token(struct hp_kube_client *c, uint64_t now)
{
    if (c->qps <= 0)
        return 0;
    if (now > c->tokens_ms) {
        c->tokens += (double)(now - c->tokens_ms) * c->qps / 1000.0;
        if (c->tokens > c->burst)
            c->tokens = c->burst;
    }
    c->tokens_ms = now;
    if (c->tokens >= 1.0) {
        c->tokens -= 1.0;
        return 0;
    }
    /* Wait for a batch of tokens, not one: at most ten wakeups a second, each sending several
     * writes. One write per wakeup (every 20 ms at 50/s) cost twice the CPU per volume of an
     * unlimited run: a timer, an epoll round and a context switch for each write, with nothing
     * to share them (bench/README.md). */
    double batch = c->qps / 10.0;
    if (batch > c->burst)
        batch = c->burst;
    if (batch < 1.0)
        batch = 1.0;
    return (uint64_t)((batch - c->tokens) * 1000.0 / c->qps) + 1;
}

static void on_queue_timer(uv_timer_t *t)
{
    struct hp_kube_client *c = hp_container_of(t, struct hp_kube_client, queue_timer);

    if (c->closing) {
        if (!c->finalized)
            finalize_close(c);
        return;
    }
    /* Requests cancelled while curl was on the stack leave the multi here. */
    while (!hp_list_empty(&c->cancelled)) {
        struct hp_kube_req *r = req_of(c->cancelled.next);
        if (r->easy)
            (void)curl_multi_remove_handle(c->multi, r->easy);
        hp_list_remove(&r->link);
        req_free(r);
    }
    while (!c->closing && !hp_list_empty(&c->pending_reads))
        start_transfer(req_of(c->pending_reads.next));
    while (!c->closing &&
           (!hp_list_empty(&c->pending_writes) || !hp_list_empty(&c->pending_events))) {
        uint64_t now = uv_now(c->loop), wait;
        if (c->writes_active >= HP_KUBE_MAX_WRITES_IN_FLIGHT)
            break; /* a completion kicks the queue again */
        wait = c->writes_paused_until > now ? c->writes_paused_until - now : take_token(c, now);
        if (wait) {
            (void)uv_timer_start(&c->queue_timer, on_queue_timer, wait, 0);
            break;
        }
        start_transfer(req_of(!hp_list_empty(&c->pending_writes) ? c->pending_writes.next
                                                                 : c->pending_events.next));
    }
}

static void kick(struct hp_kube_client *c)
{
    (void)uv_timer_start(&c->queue_timer, on_queue_timer, 0, 0); /* cannot fail */
}

/* ---- public API ---- */

/* The host and host:port of the server URL, for error hints (the URL itself when curl cannot
 * parse it). */
static void server_address(const char *server, char **host, char **hostport)
{
    CURLU *u = curl_url();
    char *h = NULL, *port = NULL;

    if (u && curl_url_set(u, CURLUPART_URL, server, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        *host = hp_xstrdup(h);
        *hostport = hp_xasprintf("%s:%s", h, port);
    } else {
        *host = hp_xstrdup(server);
        *hostport = hp_xstrdup(server);
    }
    curl_free(h);
    curl_free(port);
    curl_url_cleanup(u);
}

int hp_kube_client_new(struct hp_kube_client **out, uv_loop_t *loop, struct hp_kube_creds *creds,
                       const struct hp_kube_client_opts *opts)
{
    struct hp_kube_client *c;
    int rc = -ENOMEM;

    *out = NULL;
    if (!creds || !creds->server)
        return -EINVAL;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -ENOMEM;
    c = hp_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->creds = creds;
    hp_list_init(&c->pending_reads);
    hp_list_init(&c->pending_writes);
    hp_list_init(&c->pending_events);
    hp_list_init(&c->active);
    hp_list_init(&c->cancelled);
    hp_list_init(&c->sockets);
    c->qps = opts && opts->qps > 0 ? opts->qps : 0;
    c->burst = opts && opts->burst > 0 ? opts->burst : 1;
    c->tokens = c->burst;
    c->tokens_ms = uv_now(loop);
    c->limit_until_apf = opts && opts->limit_until_apf;
    c->connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 10000;
    c->request_timeout_ms = opts && opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 60000;
    c->max_retry_after_ms = opts && opts->max_retry_after_ms ? opts->max_retry_after_ms
                                                             : HP_KUBE_DEFAULT_MAX_RETRY_AFTER_MS;
    c->user_agent = hp_xstrdup(opts && opts->user_agent ? opts->user_agent
                                                        : "hostpath-provisioner/" HP_VERSION);
    c->token_read_ms = uv_now(loop);
    c->tls = strncasecmp(creds->server, "https://", 8) == 0;
    server_address(creds->server, &c->host, &c->hostport);

    c->multi = curl_multi_init();
    c->share = curl_share_init();
    if (!c->multi || !c->share)
        goto fail;
    /* One thread: the share needs no lock callbacks. TLS sessions and DNS are shared so a
     * recycled or fresh easy handle resumes sessions. */
    (void)curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    (void)curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    (void)curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    (void)curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    (void)curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    (void)curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    (void)curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    /* Over HTTP/2 everything shares one connection. Over HTTP/1.1 each request in flight needs
     * its own: bound them (the three watch streams hold three for good, the rest carry
     * requests; more requests wait inside curl) so a burst of claims cannot open hundreds of
     * TLS connections, each costing memory here and on the server. */
    (void)curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, HP_KUBE_MAX_CONNECTIONS);
    (void)curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, HP_KUBE_MAX_CONNECTIONS);
    /* uv_timer_init cannot fail (it only initialises the struct). */
    (void)uv_timer_init(loop, &c->curl_timer);
    (void)uv_timer_init(loop, &c->queue_timer);
    *out = c;
    return 0;

fail:
    if (c->multi)
        curl_multi_cleanup(c->multi);
    if (c->share)
        curl_share_cleanup(c->share);
    free(c->user_agent);
    free(c->host);
    free(c->hostport);
    free(c);
    curl_global_cleanup();
    return rc;
}

/* core/v1 or events.k8s.io/v1 Events ("/api/v1/namespaces/ns/events[/name]"). */
static int is_event_path(const char *path)
{
    const char *q = strstr(path, "/events");
    return q && (q[7] == '\0' || q[7] == '/' || q[7] == '?');
}

static struct hp_kube_req *new_req(struct hp_kube_client *c, const char *method, const char *path,
                                   hp_kube_response_cb cb, void *data)
{
    struct hp_kube_req *r = hp_xcalloc(1, sizeof(*r));

    hp_list_init(&r->link);
    r->c = c;
    r->method = hp_xstrdup(method);
    r->path = hp_xstrdup(path);
    r->cb = cb;
    r->data = data;
    r->is_write = method_is_write(method);
    r->is_event = r->is_write && is_event_path(path);
    hp_buf_init(&r->resp, HP_KUBE_MAX_BODY);
    c->inflight++;
    return r;
}

static void enqueue(struct hp_kube_req *r)
{
    struct hp_kube_client *c = r->c;

    r->state = REQ_QUEUED;
    if (c->closing) {
        /* Too late: the request is parked and freed with the client, silently. */
        hp_list_insert_tail(&c->cancelled, &r->link);
        r->state = REQ_CANCELLED;
        return;
    }
    hp_list_insert_tail(queue_of(c, r), &r->link);
    kick(c);
}

struct hp_kube_req *hp_kube_request(struct hp_kube_client *c, const char *method, const char *path,
                                    const char *body, const char *content_type,
                                    hp_kube_response_cb cb, void *data)
{
    struct hp_kube_req *r = new_req(c, method, path, cb, data);

    if (body) {
        r->body_len = strlen(body);
        r->body = hp_xstrndup(body, r->body_len);
        if (content_type)
            r->content_type = hp_xstrdup(content_type);
    }
    enqueue(r);
    return r;
}

struct hp_kube_req *hp_kube_stream(struct hp_kube_client *c, const char *path,
                                   hp_kube_data_cb on_data, hp_kube_response_cb on_done, void *data)
{
    struct hp_kube_req *r = new_req(c, "GET", path, on_done, data);

    r->stream = 1;
    r->on_data = on_data;
    enqueue(r);
    return r;
}

void hp_kube_req_set_max_body(struct hp_kube_req *r, size_t max)
{
    r->resp.max = max && max < HP_KUBE_MAX_BODY ? max : HP_KUBE_MAX_BODY;
}

void hp_kube_cancel(struct hp_kube_req *r)
{
    struct hp_kube_client *c;

    if (!r)
        return;
    c = r->c;
    switch (r->state) {
    case REQ_QUEUED:
        hp_list_remove(&r->link);
        req_free(r);
        return;
    case REQ_ACTIVE:
        log_request(r, r->stream ? "watch cancelled" : "request cancelled",
                    r->code ? NULL : "none", NULL);
        if (!c->in_curl && !c->closing) {
            hp_list_remove(&r->link);
            (void)curl_multi_remove_handle(c->multi, r->easy);
            req_free(r);
            return;
        }
        /* curl is on the stack (possibly inside this request's own write callback): the
         * callbacks now refuse data and the queue timer removes the handle. */
        hp_list_move_tail(&c->cancelled, &r->link);
        r->state = REQ_CANCELLED;
        kick(c);
        return;
    case REQ_CANCELLED:
    case REQ_DONE:
        return;
    }
}

int hp_kube_client_apf_seen(const struct hp_kube_client *c)
{
    return c->apf_seen;
}

int hp_kube_client_limited(const struct hp_kube_client *c)
{
    return c->qps > 0;
}

int hp_kube_req_queued(const struct hp_kube_req *r)
{
    return r->state == REQ_QUEUED;
}

size_t hp_kube_client_writes_in_flight(const struct hp_kube_client *c)
{
    return c->writes_active;
}

size_t hp_kube_client_inflight(const struct hp_kube_client *c)
{
    return c->inflight;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct hp_kube_client *c = h->data;

    if (--c->open_handles == 0)
        free_client(c);
}

static void drop_list(struct hp_kube_client *c, struct hp_list *head, int in_multi)
{
    while (!hp_list_empty(head)) {
        struct hp_kube_req *r = req_of(head->next);
        hp_list_remove(&r->link);
        if (in_multi && r->easy)
            (void)curl_multi_remove_handle(c->multi, r->easy);
        req_free(r);
    }
}

/* Outside curl: drops every request silently, tears curl down and closes all handles; the
 * client is freed when the last one has closed. */
static void finalize_close(struct hp_kube_client *c)
{
    c->finalized = 1;
    drop_list(c, &c->pending_reads, 0);
    drop_list(c, &c->pending_writes, 0);
    drop_list(c, &c->pending_events, 0);
    drop_list(c, &c->active, 1);
    drop_list(c, &c->cancelled, 1);
    while (c->n_free_easy)
        curl_easy_cleanup(c->free_easy[--c->n_free_easy]);
    /* Cleanup may still report sockets (CURL_POLL_REMOVE) while the polls can close. */
    curl_multi_cleanup(c->multi);
    c->multi = NULL;
    if (curl_share_cleanup(c->share) != CURLSHE_OK)
        hp_log_warn("kube_client: curl share still in use at close");
    c->share = NULL;
    while (!hp_list_empty(&c->sockets))
        sock_close(hp_list_first_entry(&c->sockets, struct sock_ctx, link));
    c->curl_timer.data = c;
    c->queue_timer.data = c;
    c->open_handles += 2;
    uv_close((uv_handle_t *)&c->curl_timer, on_timer_closed);
    uv_close((uv_handle_t *)&c->queue_timer, on_timer_closed);
}

static void free_client(struct hp_kube_client *c)
{
    hp_close_cb cb = c->close_cb;
    void *data = c->close_data;

    free(c->user_agent);
    free(c->host);
    free(c->hostport);
    free(c);
    curl_global_cleanup();
    if (cb)
        cb(data);
}

void hp_kube_client_close(struct hp_kube_client *c, hp_close_cb close_cb, void *data)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->close_cb = close_cb;
    c->close_data = data;
    if (c->in_curl) {
        /* Called from inside a write callback: curl is on the stack, finish from the loop. */
        kick(c);
        return;
    }
    finalize_close(c);
}

/* Read with hp_json (CONTRIBUTING.md: one JSON reader). A body jansson would have refused
 * (a string holding \u0000) says nothing, as before. */
long hp_kube_status_parse(const char *body, char *reason, size_t reason_len, char *message,
                          size_t message_len)
{
    struct hp_json j;
    int64_t code = 0;

    if (reason && reason_len)
        reason[0] = '\0';
    if (message && message_len)
        message[0] = '\0';
    if (!body || !body[0])
        return 0;
    hp_json_init(&j);
    /* A Status may quote user data holding a NUL: its words are then cut there. */
    if (hp_json_parse(&j, body, strlen(body)) == 0 && hp_json_is(&j, 0, HP_JSON_OBJECT)) {
        if (reason && reason_len)
            (void)hp_json_str_copy(&j, hp_json_get(&j, 0, "reason"), reason, reason_len);
        if (message && message_len)
            (void)hp_json_str_copy(&j, hp_json_get(&j, 0, "message"), message, message_len);
        if (hp_json_int(&j, hp_json_get(&j, 0, "code"), &code) < 0 || code < LONG_MIN ||
            code > LONG_MAX)
            code = 0;
    }
    hp_json_free(&j);
    return (long)code;
}
