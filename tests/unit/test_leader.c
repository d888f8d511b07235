/* Unit tests for leader: Lease election against a scripted HTTP/1.1 server on 127.0.0.1 running
 * on the same loop, which keeps one Lease with a resourceVersion and answers GET/POST/PUT like
 * the API server (409 on a stale resourceVersion or an existing Lease). Short timings: lease
 * 600 ms (written as 1 s), renew deadline 400 ms, retry period 100 ms. Expiry and the renew
 * deadline are judged by the leader's injected clock: those tests run on a fake clock (lease 15 s,
 * renew deadline 10 s) that they move by hand, so only retry periods pass. Covers creation,
 * renewals with the resourceVersion read, standing by for a live holder, take-over of an expired
 * lease, a holder's absurd leaseDurationSeconds (held, never expired), 409 retries, stepping
 * down after the renew deadline and both kinds of stop; a standby logs the holder once per
 * change. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "fake_http.h"
#include "hostpath/buf.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/leader.h"
#include "hostpath/log.h"

#define NS "kube-system"
#define NAME "hostpath-provisioner.io"
#define ME "node1_abc"
#define LEASE_PATH "/apis/coordination.k8s.io/v1/namespaces/" NS "/leases/" NAME
#define LEASES_PATH "/apis/coordination.k8s.io/v1/namespaces/" NS "/leases"
#define MAX_SEEN 512
#define MAX_CB 16

struct seen {
    char method[16];
    char path[4096];
    char *body;
    double at_ms;
    int code;       /* what the server answered */
    int leading_at; /* hp_leader_is_leader when the request arrived */
};

struct fx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_leader *leader;
    int client_closed;
    int leader_closed;
    /* the server's Lease */
    json_t *lease; /* NULL = absent */
    long rv;
    /* script */
    int other_renews;  /* on each GET, "other" renews (renewTime changes) */
    int fail_code;     /* answer every request with this code */
    int hold;          /* answer nothing (the server is closed at teardown) */
    int put_conflicts; /* answer this many PUTs with 409 */
    int renew_counter;
    /* what happened */
    int nseen;
    struct seen seen[MAX_SEEN];
    int ncb;
    int cb_vals[MAX_CB];
    double cb_at[MAX_CB];
    /* the leader's clock: real unless fake is set before fx_start */
    int fake;
    uint64_t clock;
};

static uint64_t fake_now(void *data)
{
    return ((struct fx *)data)->clock;
}

/* When a test event happened: the fake clock, else real milliseconds. */
static double fx_now(const struct fx *f)
{
    return f->fake ? (double)f->clock : fh_now_ms();
}

static void reply_json(struct fh_conn *c, int code, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    fh_reply(c, code, NULL, s);
    free(s);
}

static void reply_status(struct fh_conn *c, int code, const char *reason)
{
    char body[256];
    snprintf(body, sizeof(body),
             "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
             "\"reason\":\"%s\",\"code\":%d}",
             reason, code);
    fh_reply(c, code, NULL, body);
}

static void set_rv(struct fx *f, long rv)
{
    char buf[32];
    f->rv = rv;
    snprintf(buf, sizeof(buf), "%ld", rv);
    json_t *meta = json_object_get(f->lease, "metadata");
    json_object_set_new(meta, "resourceVersion", json_string(buf));
}

static int serve(struct fx *f, struct fh_conn *c, const struct fh_request *r)
{
    if (f->hold)
        return 0;
    if (f->fail_code) {
        reply_status(c, f->fail_code, "InternalError");
        return f->fail_code;
    }
    if (strcmp(r->method, "GET") == 0) {
        assert_string_equal(r->path, LEASE_PATH);
        if (!f->lease) {
            reply_status(c, 404, "NotFound");
            return 404;
        }
        if (f->other_renews) {
            char ts[64];
            snprintf(ts, sizeof(ts), "2020-01-01T00:00:%02d.%06dZ", f->renew_counter % 60,
                     f->renew_counter);
            f->renew_counter++;
            json_object_set_new(json_object_get(f->lease, "spec"), "renewTime", json_string(ts));
            set_rv(f, f->rv + 1);
        }
        reply_json(c, 200, f->lease);
        return 200;
    }
    json_error_t err;
    json_t *body = json_loadb(r->body, r->body_len, JSON_ALLOW_NUL, &err);
    if (!body)
        fail_msg("body is not JSON: %s", err.text);
    int code;
    if (strcmp(r->method, "POST") == 0) {
        assert_string_equal(r->path, LEASES_PATH);
        if (f->lease) {
            json_decref(body);
            reply_status(c, 409, "AlreadyExists");
            return 409;
        }
        f->lease = body;
        set_rv(f, 1);
        code = 201;
    } else if (strcmp(r->method, "PUT") == 0) {
        assert_string_equal(r->path, LEASE_PATH);
        char want[32];
        snprintf(want, sizeof(want), "%ld", f->rv);
        const char *got = json_string_value(
            json_object_get(json_object_get(body, "metadata"), "resourceVersion"));
        if (f->put_conflicts > 0 || !f->lease || !got || strcmp(got, want) != 0) {
            if (f->put_conflicts > 0)
                f->put_conflicts--;
            json_decref(body);
            reply_status(c, 409, "Conflict");
            return 409;
        }
        json_decref(f->lease);
        f->lease = body;
        set_rv(f, f->rv + 1);
        code = 200;
    } else {
        fail_msg("unexpected method %s", r->method);
        return 0;
    }
    reply_json(c, code, f->lease);
    return code;
}

static void handler(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    int leading = f->leader ? hp_leader_is_leader(f->leader) : -1;
    int code = serve(f, c, r);
    if (f->nseen >= MAX_SEEN)
        return; /* keep answering; tests bound their runs well below this */
    struct seen *s = &f->seen[f->nseen++];
    snprintf(s->method, sizeof(s->method), "%s", r->method);
    snprintf(s->path, sizeof(s->path), "%s", r->path);
    s->body = hp_xstrndup(r->body, r->body_len);
    s->at_ms = f->fake ? (double)f->clock : r->at_ms;
    s->code = code;
    s->leading_at = leading;
}

static void on_leading(struct hp_leader *l, int leading, void *data)
{
    struct fx *f = data;
    assert_ptr_equal(l, f->leader);
    assert_true(f->ncb < MAX_CB);
    assert_int_equal(hp_leader_is_leader(l), leading);
    assert_true(hp_leader_state_known(l));
    f->cb_vals[f->ncb] = leading;
    f->cb_at[f->ncb] = fx_now(f);
    f->ncb++;
}

static void on_leader_closed(void *data)
{
    struct fx *f = data;
    f->leader_closed++;
}

static void on_client_closed(void *data)
{
    (*(int *)data)++;
}

static void fx_setup(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, handler, f);
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    f->creds.token = hp_xstrdup("secret");
    struct hp_kube_client_opts opts = {.qps = 0, .burst = 0};
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, &opts), 0);
}

static void fx_start(struct fx *f)
{
    struct hp_leader_opts o = {
        .namespace_ = NS,
        .name = NAME,
        .identity = ME,
        .lease_duration_ms = 600,
        .renew_deadline_ms = 400,
        .retry_period_ms = 100,
    };
    if (f->fake) {
        o.lease_duration_ms = 15000;
        o.renew_deadline_ms = 10000;
        o.clock.now_ms = fake_now;
        o.clock.data = f;
    }
    f->leader = hp_leader_new(&f->loop, f->client, &o, on_leading, f);
    assert_non_null(f->leader);
    assert_int_equal(hp_leader_state_known(f->leader), 0);
    assert_int_equal(hp_leader_is_leader(f->leader), 0);
}

static void fx_stop(struct fx *f)
{
    int ncb = f->ncb;
    hp_leader_close(f->leader, on_leader_closed, f);
    f->leader = NULL;
    assert_true(fh_run_until(&f->loop, &f->leader_closed, 5000));
    assert_int_equal(f->leader_closed, 1);
    assert_int_equal(f->ncb, ncb); /* no leadership callback after stop */
}

static void fx_teardown(struct fx *f)
{
    if (f->leader)
        fx_stop(f);
    hp_kube_client_close(f->client, on_client_closed, &f->client_closed);
    assert_true(fh_run_until(&f->loop, &f->client_closed, 5000));
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
    json_decref(f->lease);
    for (int i = 0; i < f->nseen; i++)
        free(f->seen[i].body);
}

/* A Lease held by holder, renewed at renew_time, with transitions, at resourceVersion rv. */
static void put_lease(struct fx *f, const char *holder, const char *renew_time, int transitions,
                      long rv)
{
    json_decref(f->lease);
    f->lease =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s, s:i, s:s, s:s, s:i}}", "apiVersion",
                  "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", NAME, "namespace",
                  NS, "labels", "keep", "me", "spec", "holderIdentity", holder,
                  "leaseDurationSeconds", 1, "acquireTime", "2020-01-01T00:00:00.000000Z",
                  "renewTime", renew_time, "leaseTransitions", transitions);
    assert_non_null(f->lease);
    set_rv(f, rv);
}

static int has_cb(void *p)
{
    return ((struct fx *)p)->ncb > 0;
}

static int state_known(void *p)
{
    struct fx *f = p;
    return hp_leader_state_known(f->leader);
}

static json_t *body_of(const struct seen *s)
{
    json_error_t err;
    json_t *j = json_loads(s->body, JSON_ALLOW_NUL, &err);
    if (!j)
        fail_msg("body is not JSON: %s: %s", err.text, s->body);
    return j;
}

static const char *spec_str(json_t *lease, const char *key)
{
    return json_string_value(json_object_get(json_object_get(lease, "spec"), key));
}

static json_int_t spec_int(json_t *lease, const char *key)
{
    json_t *v = json_object_get(json_object_get(lease, "spec"), key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static const char *meta_str(json_t *lease, const char *key)
{
    return json_string_value(json_object_get(json_object_get(lease, "metadata"), key));
}

/* metav1.MicroTime: 2006-01-02T15:04:05.000000Z */
static void assert_micro_time(const char *ts)
{
    assert_non_null(ts);
    assert_int_equal(strlen(ts), 27);
    assert_int_equal(ts[10], 'T');
    assert_int_equal(ts[19], '.');
    assert_int_equal(ts[26], 'Z');
}

static int count_method(const struct fx *f, int from, const char *method)
{
    int n = 0;
    for (int i = from; i < f->nseen; i++)
        n += strcmp(f->seen[i].method, method) == 0;
    return n;
}

struct puts_arg {
    struct fx *f;
    int n;
};

static int puts_seen(void *p)
{
    struct puts_arg *a = p;
    return count_method(a->f, 0, "PUT") >= a->n;
}

/* ---- absent Lease: created holding it; renewals PUT with the resourceVersion read ---- */

static void test_create_and_renew(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    fx_start(&f);

    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    assert_int_equal(f.ncb, 1);
    assert_int_equal(f.cb_vals[0], 1);
    assert_true(hp_leader_is_leader(f.leader));
    assert_true(hp_leader_state_known(f.leader));

    assert_true(f.nseen >= 2);
    assert_string_equal(f.seen[0].method, "GET");
    assert_string_equal(f.seen[0].path, LEASE_PATH);
    assert_int_equal(f.seen[0].code, 404);
    assert_string_equal(f.seen[1].method, "POST");
    assert_string_equal(f.seen[1].path, LEASES_PATH);
    assert_int_equal(f.seen[1].code, 201);
    json_t *created = body_of(&f.seen[1]);
    assert_string_equal(json_string_value(json_object_get(created, "apiVersion")),
                        "coordination.k8s.io/v1");
    assert_string_equal(json_string_value(json_object_get(created, "kind")), "Lease");
    assert_string_equal(meta_str(created, "name"), NAME);
    assert_string_equal(meta_str(created, "namespace"), NS);
    assert_string_equal(spec_str(created, "holderIdentity"), ME);
    /* 600 ms is written as whole seconds, rounded up (0 is invalid for the API server). */
    assert_int_equal(spec_int(created, "leaseDurationSeconds"), 1);
    assert_int_equal(spec_int(created, "leaseTransitions"), 0);
    assert_micro_time(spec_str(created, "acquireTime"));
    assert_micro_time(spec_str(created, "renewTime"));
    char *acquired = hp_xstrdup(spec_str(created, "acquireTime"));
    char *last_renew = hp_xstrdup(spec_str(created, "renewTime"));
    json_decref(created);

    /* Renewals: each PUT carries the resourceVersion of the Lease just read. */
    struct puts_arg a = {&f, 4};
    assert_true(fh_run_until_cb(&f.loop, 3000, puts_seen, &a));
    long want_rv = 1;
    int nput = 0;
    for (int i = 2; i < f.nseen; i++) {
        if (strcmp(f.seen[i].method, "GET") == 0) {
            assert_int_equal(f.seen[i].code, 200);
            continue;
        }
        assert_string_equal(f.seen[i].method, "PUT");
        assert_string_equal(f.seen[i].path, LEASE_PATH);
        assert_string_equal(f.seen[i - 1].method, "GET"); /* read, then write */
        assert_int_equal(f.seen[i].code, 200);
        json_t *put = body_of(&f.seen[i]);
        char rv[32];
        snprintf(rv, sizeof(rv), "%ld", want_rv);
        assert_string_equal(meta_str(put, "resourceVersion"), rv);
        assert_string_equal(spec_str(put, "holderIdentity"), ME);
        assert_string_equal(spec_str(put, "acquireTime"), acquired);
        assert_int_equal(spec_int(put, "leaseTransitions"), 0);
        assert_int_equal(spec_int(put, "leaseDurationSeconds"), 1);
        const char *renew = spec_str(put, "renewTime");
        assert_micro_time(renew);
        assert_true(strcmp(renew, last_renew) > 0);
        free(last_renew);
        last_renew = hp_xstrdup(renew);
        json_decref(put);
        want_rv++;
        nput++;
    }
    assert_true(nput >= 4);
    assert_int_equal(f.ncb, 1);
    assert_true(hp_leader_is_leader(f.leader));
    free(acquired);
    free(last_renew);
    fx_teardown(&f);
}

/* ---- held by another identity that keeps renewing: stand by; stop writes nothing ---- */

static void test_standby_while_other_renews(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    put_lease(&f, "other", "2020-01-01T00:00:00.000000Z", 5, 10);
    f.other_renews = 1;
    fx_start(&f);

    assert_true(fh_run_until_cb(&f.loop, 2000, state_known, &f));
    assert_false(hp_leader_is_leader(f.leader));
    /* Well past the 1 s lease duration, several times over. */
    fh_run_for(&f.loop, 2000);
    assert_int_equal(f.ncb, 0);
    assert_false(hp_leader_is_leader(f.leader));
    assert_true(hp_leader_state_known(f.leader));
    assert_true(count_method(&f, 0, "GET") >= 5);
    assert_int_equal(count_method(&f, 0, "PUT"), 0);
    assert_int_equal(count_method(&f, 0, "POST"), 0);

    fx_stop(&f);
    fh_run_for(&f.loop, 300);
    assert_int_equal(count_method(&f, 0, "PUT"), 0);
    assert_int_equal(count_method(&f, 0, "POST"), 0);
    assert_string_equal(spec_str(f.lease, "holderIdentity"), "other");
    fx_teardown(&f);
}

/* ---- a standby says who holds the lease, once per holder ---- */

/* Lines logged since the last call, into buf (NUL-terminated); the count of needle in them. */
static int logged_count(int fd, char *buf, size_t cap, const char *needle)
{
    size_t len = 0;
    ssize_t n;
    while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    int count = 0;
    for (const char *p = buf; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        count++;
    return count;
}

static void test_standby_logs_holder(void **state)
{
    static const char *const other =
        "leader: lease held by other identity=other lease=" NS "/" NAME "\n";
    static const char *const third =
        "leader: lease held by other identity=third lease=" NS "/" NAME "\n";
    static char buf[65536];
    int p[2];
    struct fx f;
    (void)state;

    assert_int_equal(pipe(p), 0);
    assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    hp_log_set_fd(p[1]);
    hp_log_init(0, HP_LOG_TEXT);
    fx_setup(&f);
    put_lease(&f, "other", "2020-01-01T00:00:00.000000Z", 5, 10);
    f.other_renews = 1;
    fx_start(&f);

    /* Many reads of the same holder: one line, at --v 0. */
    fh_run_for(&f.loop, 800);
    assert_true(count_method(&f, 0, "GET") >= 4);
    assert_int_equal(logged_count(p[0], buf, sizeof(buf), other), 1);

    /* Another holder: one more line, naming it. */
    json_object_set_new(json_object_get(f.lease, "spec"), "holderIdentity", json_string("third"));
    fh_run_for(&f.loop, 800);
    assert_int_equal(logged_count(p[0], buf, sizeof(buf), third), 1);
    assert_int_equal(logged_count(p[0], buf, sizeof(buf), "lease held by other"), 0);

    /* Back to the first: a change again. */
    json_object_set_new(json_object_get(f.lease, "spec"), "holderIdentity", json_string("other"));
    fh_run_for(&f.loop, 500);
    assert_int_equal(logged_count(p[0], buf, sizeof(buf), other), 1);
    assert_false(hp_leader_is_leader(f.leader));

    /* The holder stops renewing: we take over; when it comes back, it is said again. */
    f.other_renews = 0;
    assert_true(fh_run_until_cb(&f.loop, 4000, has_cb, &f));
    assert_true(hp_leader_is_leader(f.leader));
    json_object_set_new(json_object_get(f.lease, "spec"), "holderIdentity", json_string("other"));
    f.other_renews = 1;
    fh_run_for(&f.loop, 1500);
    assert_false(hp_leader_is_leader(f.leader));
    assert_int_equal(logged_count(p[0], buf, sizeof(buf), other), 1);
    fx_teardown(&f);
    hp_log_set_fd(-1);
    (void)close(p[0]);
    (void)close(p[1]);
}

/* ---- held by another identity that stopped renewing: taken over after the duration ---- */

static void test_takeover_expired(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.fake = 1;
    f.clock = 5000000;
    put_lease(&f, "other", "2020-01-01T00:00:00.000000Z", 3, 20);
    json_object_set_new(json_object_get(f.lease, "spec"), "leaseDurationSeconds",
                        json_integer(15)); /* the holder's duration is the one that counts */
    double t0 = fx_now(&f); /* the record is first seen at this time, and never changes */
    fx_start(&f);

    assert_true(fh_run_until_cb(&f.loop, 2000, state_known, &f));
    assert_false(hp_leader_is_leader(f.leader));
    /* A millisecond short of leaseDurationSeconds (15 s) by our clock: a few attempts, held. */
    f.clock += 14999;
    fh_run_for(&f.loop, 350);
    assert_int_equal(f.ncb, 0);
    assert_int_equal(count_method(&f, 0, "PUT"), 0);
    f.clock += 1;
    assert_true(fh_run_until_cb(&f.loop, 2000, has_cb, &f));
    assert_int_equal(f.cb_vals[0], 1);
    assert_true(f.cb_at[0] - t0 == 15000);

    int put = -1;
    for (int i = 0; i < f.nseen; i++) {
        if (strcmp(f.seen[i].method, "GET") != 0) {
            put = i;
            break;
        }
    }
    assert_true(put > 0);
    assert_string_equal(f.seen[put].method, "PUT");
    assert_true(f.seen[put].at_ms - t0 == 15000);
    assert_int_equal(f.seen[put].code, 200);
    json_t *b = body_of(&f.seen[put]);
    assert_string_equal(meta_str(b, "resourceVersion"), "20");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(b, "metadata"), "labels"), "keep")),
                        "me");
    assert_string_equal(spec_str(b, "holderIdentity"), ME);
    assert_int_equal(spec_int(b, "leaseTransitions"), 4);
    assert_int_equal(spec_int(b, "leaseDurationSeconds"), 15);
    assert_string_not_equal(spec_str(b, "acquireTime"), "2020-01-01T00:00:00.000000Z");
    assert_micro_time(spec_str(b, "acquireTime"));
    json_decref(b);
    assert_true(hp_leader_is_leader(f.leader));

    /* Renewals keep the transition count. */
    struct puts_arg a = {&f, 2};
    assert_true(fh_run_until_cb(&f.loop, 3000, puts_seen, &a));
    assert_int_equal(spec_int(f.lease, "leaseTransitions"), 4);
    fx_teardown(&f);
}

/* ---- a PUT carries the Lease as the server wrote it, with only our record changed ---- */

static int first_put(const struct fx *f)
{
    for (int i = 0; i < f->nseen; i++)
        if (strcmp(f->seen[i].method, "PUT") == 0)
            return i;
    return -1;
}

static void test_put_keeps_what_it_read(void **state)
{
    struct fx f;
    (void)state;

    /* Released (empty holder), with spec members this version does not know about. */
    fx_setup(&f);
    put_lease(&f, "", "2020-01-01T00:00:00.000000Z", 7, 40);
    json_t *spec = json_object_get(f.lease, "spec");
    json_object_set_new(spec, "preferredHolder", json_string("node9_x"));
    json_object_set_new(spec, "strategy", json_string("OldestEmulationVersion"));
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 2000, has_cb, &f));
    int put = first_put(&f);
    assert_true(put >= 0);
    json_t *b = body_of(&f.seen[put]);
    assert_string_equal(meta_str(b, "resourceVersion"), "40");
    assert_string_equal(spec_str(b, "preferredHolder"), "node9_x");
    assert_string_equal(spec_str(b, "strategy"), "OldestEmulationVersion");
    assert_string_equal(spec_str(b, "holderIdentity"), ME);
    assert_int_equal(spec_int(b, "leaseTransitions"), 8);
    assert_int_equal(json_object_size(json_object_get(b, "spec")), 7); /* 5 ours + 2 kept */
    json_decref(b);
    fx_teardown(&f);

    /* No spec at all: one is added, holding our record. */
    fx_setup(&f);
    f.lease = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "coordination.k8s.io/v1", "kind",
                        "Lease", "metadata", "name", NAME, "namespace", NS);
    set_rv(&f, 5);
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 2000, has_cb, &f));
    put = first_put(&f);
    assert_true(put >= 0);
    b = body_of(&f.seen[put]);
    assert_string_equal(meta_str(b, "resourceVersion"), "5");
    assert_string_equal(spec_str(b, "holderIdentity"), ME);
    assert_int_equal(spec_int(b, "leaseTransitions"), 1);
    json_decref(b);
    fx_teardown(&f);

    /* An annotation holding \u0000 (the API server stores it; jansson refused it, and no
     * replica ever led): the free Lease is taken, and the annotation written back as it was. */
    fx_setup(&f);
    put_lease(&f, "", "2020-01-01T00:00:00.000000Z", 1, 9);
    json_object_set_new(json_object_get(f.lease, "metadata"), "annotations",
                        json_pack("{s:s%}", "note", "a\0b", (size_t)3));
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 2000, has_cb, &f));
    put = first_put(&f);
    assert_true(put >= 0);
    assert_non_null(strstr(f.seen[put].body, "\"note\":\"a\\u0000b\""));
    b = body_of(&f.seen[put]);
    assert_string_equal(spec_str(b, "holderIdentity"), ME);
    json_decref(b);
    fx_teardown(&f);
}

/* ---- held by another identity with an absurd leaseDurationSeconds: never taken over ---- */

/* Values the API server would refuse (its type is int32, > 0). 18446744073709552 s is
 * 2^64 ms + 384 ms: multiplied by 1000 without a check it wraps to 384 ms, and the live holder's
 * lease would look expired well within the wait below. */
static json_t *absurd_duration(int i)
{
    switch (i) {
    case 0:
        return json_integer(18446744073709552LL);
    case 1:
        return json_integer(INT64_MAX);
    case 2:
        return json_integer((json_int_t)INT32_MAX + 1);
    case 3:
        return json_integer(0);
    case 4:
        return json_integer(-1);
    case 5:
        return json_real(1.5);
    case 6:
        return json_string("15");
    default:
        return NULL;
    }
}

static void test_absurd_duration_not_taken_over(void **state)
{
    (void)state;
    json_t *v;
    for (int i = 0; (v = absurd_duration(i)) != NULL; i++) {
        struct fx f;
        fx_setup(&f);
        put_lease(&f, "other", "2020-01-01T00:00:00.000000Z", 2, 30);
        json_object_set_new(json_object_get(f.lease, "spec"), "leaseDurationSeconds", v);
        f.fake = 1;
        f.clock = 5000000;
        fx_start(&f);
        assert_true(fh_run_until_cb(&f.loop, 2000, state_known, &f));
        /* A year by our clock, far past our own 15 s and past 384 ms, with the holder silent:
         * five attempts or so. */
        f.clock += (uint64_t)366 * 24 * 3600 * 1000;
        fh_run_for(&f.loop, 550);
        if (f.ncb || count_method(&f, 0, "PUT") || count_method(&f, 0, "POST"))
            fail_msg("case %d: lease taken over (callbacks %d, PUTs %d)", i, f.ncb,
                     count_method(&f, 0, "PUT"));
        assert_false(hp_leader_is_leader(f.leader));
        assert_true(hp_leader_state_known(f.leader));
        assert_true(count_method(&f, 0, "GET") >= 5);
        if (i == 0) {
            /* Released by its holder: free, so taken at once whatever the duration says. */
            json_object_set_new(json_object_get(f.lease, "spec"), "holderIdentity",
                                json_string(""));
            assert_true(fh_run_until_cb(&f.loop, 2000, has_cb, &f));
            assert_int_equal(f.cb_vals[0], 1);
            assert_string_equal(spec_str(f.lease, "holderIdentity"), ME);
            assert_int_equal(spec_int(f.lease, "leaseDurationSeconds"), 15);
        }
        fx_teardown(&f);
    }
}

/* ---- the largest valid duration does not overflow either: held, not expired ---- */

static void test_max_valid_duration_held(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    put_lease(&f, "other", "2020-01-01T00:00:00.000000Z", 2, 30);
    json_object_set_new(json_object_get(f.lease, "spec"), "leaseDurationSeconds",
                        json_integer(INT32_MAX));
    f.fake = 1;
    f.clock = 5000000;
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 2000, state_known, &f));
    f.clock += (uint64_t)INT32_MAX * 1000 - 1; /* a millisecond short of 68 years */
    fh_run_for(&f.loop, 350);
    assert_int_equal(f.ncb, 0);
    assert_int_equal(count_method(&f, 0, "PUT"), 0);
    fx_teardown(&f);
}

/* ---- PUT answered 409: not leader, retried next period ---- */

static void test_conflict_retries(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    put_lease(&f, "", "2020-01-01T00:00:00.000000Z", 2, 7); /* released: free to take */
    f.put_conflicts = 2;
    fx_start(&f);

    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    assert_int_equal(f.ncb, 1);
    assert_int_equal(f.cb_vals[0], 1);
    assert_true(f.nseen >= 6);
    const char *want[] = {"GET", "PUT", "GET", "PUT", "GET", "PUT"};
    const int codes[] = {200, 409, 200, 409, 200, 200};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(f.seen[i].method, want[i]);
        assert_int_equal(f.seen[i].code, codes[i]);
        assert_int_equal(f.seen[i].leading_at, 0); /* a conflict never made us leader */
        if (codes[i] == 409)
            assert_true(f.seen[i + 1].at_ms - f.seen[i].at_ms >= 90); /* retry period */
        if (strcmp(want[i], "PUT") == 0) {
            json_t *b = body_of(&f.seen[i]);
            assert_string_equal(meta_str(b, "resourceVersion"), "7");
            assert_string_equal(spec_str(b, "holderIdentity"), ME);
            assert_int_equal(spec_int(b, "leaseTransitions"), 3);
            json_decref(b);
        }
    }
    assert_string_equal(spec_str(f.lease, "holderIdentity"), ME);
    assert_true(hp_leader_is_leader(f.leader));
    fx_teardown(&f);
}

/* ---- renewals failing past the renew deadline: step down; recover afterwards ---- */

static int stepped(void *p)
{
    struct fx *f = p;
    return f->ncb >= 2;
}

static int releaded(void *p)
{
    struct fx *f = p;
    return f->ncb >= 3;
}

static void test_step_down_after_renew_deadline(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.fake = 1;
    f.clock = 5000000;
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    struct puts_arg a = {&f, 2};
    assert_true(fh_run_until_cb(&f.loop, 3000, puts_seen, &a));
    double last_ok = fx_now(&f); /* every successful write so far was at this time */

    /* Failing for a millisecond less than the renew deadline (10 s) does not cost leadership. */
    int from = f.nseen;
    f.fail_code = 500;
    f.clock += 9999;
    fh_run_for(&f.loop, 350);
    assert_int_equal(f.ncb, 1);
    assert_true(hp_leader_is_leader(f.leader));
    assert_true(f.nseen - from >= 2); /* it kept trying meanwhile */

    /* The deadline itself does. */
    f.clock += 1;
    assert_true(fh_run_until_cb(&f.loop, 3000, stepped, &f));
    assert_int_equal(f.ncb, 2);
    assert_int_equal(f.cb_vals[1], 0);
    assert_false(hp_leader_is_leader(f.leader));
    assert_true(hp_leader_state_known(f.leader));
    assert_true(f.cb_at[1] - last_ok == 10000);

    /* Once the server answers again, the lease (still ours) is taken back. */
    f.fail_code = 0;
    assert_true(fh_run_until_cb(&f.loop, 3000, releaded, &f));
    assert_int_equal(f.cb_vals[2], 1);
    fx_teardown(&f);
}

/* ---- stop while leading: release with an empty holder, then close_cb ---- */

static void test_stop_while_leading_releases(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    assert_true(hp_leader_is_leader(f.leader));
    long rv_before = f.rv;

    int from = f.nseen;
    fx_stop(&f);
    assert_int_equal(f.ncb, 1);
    assert_int_equal(count_method(&f, from, "POST"), 0);
    assert_int_equal(count_method(&f, from, "PUT"), 1);
    int put = -1;
    for (int i = from; i < f.nseen; i++)
        if (strcmp(f.seen[i].method, "PUT") == 0)
            put = i;
    assert_true(put > from);
    assert_string_equal(f.seen[put - 1].method, "GET");
    assert_int_equal(f.seen[put].code, 200);
    json_t *b = body_of(&f.seen[put]);
    assert_string_equal(spec_str(b, "holderIdentity"), "");
    assert_int_equal(spec_int(b, "leaseDurationSeconds"), 1);
    assert_int_equal(spec_int(b, "leaseTransitions"), 0);
    json_decref(b);
    assert_string_equal(spec_str(f.lease, "holderIdentity"), "");
    assert_true(f.rv >= rv_before + 1);
    /* Nothing after the close. */
    int n = f.nseen;
    fh_run_for(&f.loop, 300);
    assert_int_equal(f.nseen, n);
    fx_teardown(&f);
}

/* ---- stop while the release cannot be read: close_cb without a write ---- */

static void test_stop_release_fails(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    f.fail_code = 500;
    int from = f.nseen;
    fx_stop(&f);
    assert_int_equal(count_method(&f, from, "GET"), 1);
    assert_int_equal(count_method(&f, from, "PUT"), 0);
    assert_string_equal(spec_str(f.lease, "holderIdentity"), ME);
    fx_teardown(&f);
}

/* ---- stop while the API server does not answer: close_cb after the bounded timeout ---- */

static void test_stop_release_times_out(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    fx_start(&f);
    assert_true(fh_run_until_cb(&f.loop, 3000, has_cb, &f));
    f.hold = 1;
    double t0 = fh_now_ms();
    fx_stop(&f);
    double took = fh_now_ms() - t0;
    assert_true(took >= 2500); /* it waited for the release (3 s)... */
    assert_true(took < 4500);  /* ...and no longer */
    assert_true(count_method(&f, 0, "PUT") + count_method(&f, 0, "POST") >= 1);
    assert_string_equal(spec_str(f.lease, "holderIdentity"), ME);
    fx_teardown(&f);
}

/* ---- lease names ---- */

/* A DNS-1123 subdomain: at most 253 characters, labels of [a-z0-9-] that start and end with an
 * alphanumeric, joined by '.'. */
static int dns_subdomain(const char *s)
{
    size_t n = strlen(s), start = 0;
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            char c = s[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
                return 0;
            continue;
        }
        if (i == start || s[start] == '-' || s[i - 1] == '-')
            return 0;
        start = i + 1;
    }
    return 1;
}

static void test_lease_names(void **state)
{
    static const struct {
        const char *provisioner, *want;
    } cases[] = {
        {"hostpath-provisioner.io", "hostpath-provisioner.io"},
        {"example.com/hostpath", "example.com-hostpath"},
        {"Example.COM/Host_Path", "example.com-host-path"},
        {"hostpath", "hostpath"},
        {"a_.b", "a--b"},    /* a valid provisioner name; "a-.b" is not a valid lease name */
        {"a..b", "a--b"},
        {"x.io/a._b", "x.io-a--b"},
    };
    char longname[400];
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = hp_leader_lease_name(cases[i].provisioner);
        assert_string_equal(got, cases[i].want);
        assert_true(dns_subdomain(got));
        free(got);
    }
    /* A 246-character DNS prefix and a 63-character name: a valid provisioner name, 310
     * characters, over a Lease name's 253: a prefix and a hash, still distinct per name. */
    memset(longname, 0, sizeof(longname));
    for (int i = 0; i < 246; i++)
        longname[i] = (i % 50 == 49) ? '.' : (char)('a' + i % 26);
    longname[246] = '/';
    for (int i = 0; i < 63; i++)
        longname[247 + i] = 'n';
    char *a = hp_leader_lease_name(longname);
    assert_true(strlen(a) <= 253);
    assert_true(dns_subdomain(a));
    longname[309] = 'm';
    char *b = hp_leader_lease_name(longname);
    assert_true(dns_subdomain(b));
    assert_string_not_equal(a, b);
    /* The node lease of a long name: valid too, whatever the cut leaves at its end. */
    char node[254];
    memset(node, 'z', 253);
    node[253] = '\0';
    char *nl = hp_leader_node_lease_name(a, node);
    assert_true(strlen(nl) <= 253);
    assert_true(dns_subdomain(nl));
    char *short_nl = hp_leader_node_lease_name("hostpath-provisioner.io", "node-a");
    assert_string_equal(short_nl, "hostpath-provisioner.io-node-node-a");
    /* A cut that would end on a '.' or '-' backs off to an alphanumeric. */
    char dotted[300];
    memset(dotted, 0, sizeof(dotted));
    for (int i = 0; i < 220; i++)
        dotted[i] = (i % 2) ? '.' : 'q';
    char *dl = hp_leader_node_lease_name(dotted, node);
    assert_true(dns_subdomain(dl));
    free(a);
    free(b);
    free(nl);
    free(short_nl);
    free(dl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_renew),
        cmocka_unit_test(test_standby_while_other_renews),
        cmocka_unit_test(test_standby_logs_holder),
        cmocka_unit_test(test_takeover_expired),
        cmocka_unit_test(test_put_keeps_what_it_read),
        cmocka_unit_test(test_absurd_duration_not_taken_over),
        cmocka_unit_test(test_max_valid_duration_held),
        cmocka_unit_test(test_conflict_retries),
        cmocka_unit_test(test_step_down_after_renew_deadline),
        cmocka_unit_test(test_stop_while_leading_releases),
        cmocka_unit_test(test_stop_release_fails),
        cmocka_unit_test(test_stop_release_times_out),
        cmocka_unit_test(test_lease_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
