/* leader: Lease-based leader election with client-go's semantics (leaderelection.go).
 *
 * Loop thread only. One attempt at a time: GET the Lease; absent -> create it holding it;
 * held by someone else and not expired -> stand by; otherwise PUT our record with the
 * resourceVersion we read (a concurrent writer gets 409 and tries again next period).
 * "Expired" is judged by our own clock: the record must not have changed for
 * leaseDurationSeconds since we first observed it, as client-go does, so clock skew between
 * nodes does not matter. The leader renews every retry period and steps down when it could not
 * renew for the renew deadline. Stop releases a held lease (holderIdentity cleared). A
 * leaseDurationSeconds outside the API's 1..INT32_MAX makes the lease count as held, never as
 * expired (holder_duration_ms).
 */
#include "hostpath/leader.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "hostpath/buf.h"
#include "hostpath/kube_client.h"
#include "hostpath/log.h"

struct hp_leader {
    uv_loop_t *loop;
    struct hp_kube_client *client;
    char *ns, *name, *identity;
    uint64_t lease_ms, renew_deadline_ms, retry_ms;
    hp_leader_cb cb;
    void *data;
    uv_timer_t timer;
    struct hp_kube_req *req;
    int leading;
    int known;
    int stopping;
    char *observed;          /* holder|renewTime|transitions of the last record seen */
    uint64_t observed_at;    /* uv_now when it last changed */
    uint64_t last_renew;     /* uv_now of our last successful acquire/renew */
    char *acquire_time;      /* ours, kept across renewals */
    char *holder_said;       /* the other holder last logged while standing by, or NULL */
    long transitions;
    void (*close_cb)(void *data);
    void *close_data;
};

static void micro_time(char *out, size_t len)
{
    struct timeval tv;
    struct tm tm;
    char base[32];
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%06ldZ", base, (long)tv.tv_usec);
}

static char *lease_path(const struct hp_leader *l, int with_name)
{
    if (with_name)
        return hp_xasprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", l->ns,
                            l->name);
    return hp_xasprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
}

static void set_leading(struct hp_leader *l, int leading)
{
    l->known = 1;
    if (l->leading == leading)
        return;
    l->leading = leading;
    if (!l->stopping)
        l->cb(l, leading, l->data);
}

static void schedule(struct hp_leader *l, uint64_t delay_ms);

/* leaseDurationSeconds, rounded up: the API server rejects 0, and others must not take over
 * before our own duration has passed (a sub-second or fractional --leader-elect-lease-duration
 * would otherwise be truncated). */
static long lease_seconds(const struct hp_leader *l)
{
    return (long)((l->lease_ms + 999) / 1000);
}

/* The record we write: holder, duration, times and transitions. */
/* Whether a Lease's holderIdentity (a JSON string, or NULL) is this process: compared with
 * its length, so a holder with an embedded NUL is never mistaken for ours. */
static int is_identity(const struct hp_leader *l, json_t *holder)
{
    const char *h = json_string_value(holder);
    return h && json_string_length(holder) == strlen(l->identity) && strcmp(h, l->identity) == 0;
}

static json_t *record(struct hp_leader *l, const char *holder, long duration_s)
{
    char now[40];
    micro_time(now, sizeof(now));
    if (!l->acquire_time)
        l->acquire_time = hp_xstrdup(now);
    return json_pack("{s:s, s:I, s:s, s:s, s:I}", "holderIdentity", holder,
                     "leaseDurationSeconds", (json_int_t)duration_s, "acquireTime",
                     l->acquire_time, "renewTime", now, "leaseTransitions",
                     (json_int_t)l->transitions);
}

static void attempt_failed(struct hp_leader *l, const char *why)
{
    uint64_t now = uv_now(l->loop);
    if (l->leading && now - l->last_renew >= l->renew_deadline_ms) {
        hp_log_warn("leader: could not renew lease %s/%s within the renew deadline (%s); "
                    "stepping down",
                    l->ns, l->name, why);
        set_leading(l, 0);
    } else {
        hp_log_v(2, "leader: attempt failed lease=%s/%s: %s", l->ns, l->name, why);
    }
    if (!l->leading)
        l->known = 1;
    schedule(l, l->retry_ms);
}

static void on_written(struct hp_kube_response *resp, void *data)
{
    struct hp_leader *l = data;
    l->req = NULL;
    if (resp->status == 0 && (resp->code == 200 || resp->code == 201)) {
        /* Ours now: whoever holds it after us is news again. */
        free(l->holder_said);
        l->holder_said = NULL;
        l->last_renew = uv_now(l->loop);
        set_leading(l, 1);
        schedule(l, l->retry_ms);
        return;
    }
    char why[128];
    if (resp->status < 0)
        snprintf(why, sizeof(why), "%s", resp->error ? resp->error : strerror(-resp->status));
    else
        snprintf(why, sizeof(why), "HTTP %ld", resp->code);
    attempt_failed(l, why);
}

static void write_lease(struct hp_leader *l, json_t *lease, int create)
{
    char *body = json_dumps(lease, JSON_COMPACT);
    char *path = lease_path(l, !create);
    l->req = hp_kube_request(l->client, create ? "POST" : "PUT", path, body, NULL, on_written, l);
    free(path);
    free(body);
}

/* The holder's lease duration, from the Lease's spec.leaseDurationSeconds: 1 and *ms when it is
 * usable, 0 when absent or null (then our own duration stands in, as before), -EINVAL when it is
 * present but not a whole number of seconds in 1..INT32_MAX.
 *
 * Decision: the API type is int32 and the API server refuses anything <= 0, so any other value
 * came from a writer that does not follow the API, and we cannot know what it meant. Treating
 * it as expired would hand us a lease that another replica may hold and renew (a multiplication
 * that wraps, such as 18446744073709552 s * 1000, would do exactly that after 384 ms). So an
 * invalid duration makes the lease count as held by its holder, for as long as the record says
 * so: we stand by, and it becomes ours only when the holder releases it (empty holder), writes
 * a valid duration and then stops renewing, or someone deletes the Lease. Within 1..INT32_MAX
 * seconds the product fits in 64 bits with room to spare. */
static int holder_duration_ms(json_t *spec, uint64_t *ms)
{
    json_t *v = json_object_get(spec, "leaseDurationSeconds");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return -EINVAL;
    json_int_t s = json_integer_value(v);
    if (s < 1 || s > INT32_MAX)
        return -EINVAL;
    *ms = (uint64_t)s * 1000;
    return 1;
}

static void on_read(struct hp_kube_response *resp, void *data)
{
    struct hp_leader *l = data;
    uint64_t now = uv_now(l->loop);
    l->req = NULL;
    if (resp->status == 0 && resp->code == 404) {
        free(l->acquire_time);
        l->acquire_time = NULL;
        l->transitions = 0;
        json_t *spec = record(l, l->identity, lease_seconds(l));
        json_t *lease = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion",
                                  "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name",
                                  l->name, "namespace", l->ns, "spec", spec);
        write_lease(l, lease, 1);
        json_decref(lease);
        return;
    }
    if (resp->status < 0 || resp->code != 200) {
        char why[128];
        snprintf(why, sizeof(why), "read lease: %s",
                 resp->status < 0 ? (resp->error ? resp->error : "transport error") : "HTTP error");
        attempt_failed(l, why);
        return;
    }
    /* JSON_ALLOW_NUL: the API server stores "\u0000" in strings (an annotation someone put
     * on the Lease); refusing the whole Lease for it would stop every election for good. */
    json_t *lease = json_loadb(resp->body, resp->body_len, JSON_ALLOW_NUL, NULL);
    json_t *spec = json_object_get(lease, "spec");
    if (!lease || !json_is_object(spec)) {
        if (lease && !spec) {
            spec = json_object();
            json_object_set_new(lease, "spec", spec);
        } else {
            json_decref(lease);
            attempt_failed(l, "lease is not valid JSON");
            return;
        }
    }
    json_t *holder_json = json_object_get(spec, "holderIdentity");
    const char *holder = json_string_value(holder_json);
    const char *renew = json_string_value(json_object_get(spec, "renewTime"));
    json_int_t trans = json_integer_value(json_object_get(spec, "leaseTransitions"));
    char *seen = hp_xasprintf("%s|%s|%lld", holder ? holder : "", renew ? renew : "",
                              (long long)trans);
    int changed = !l->observed || strcmp(seen, l->observed) != 0;
    if (changed) {
        free(l->observed);
        l->observed = seen;
        l->observed_at = now;
    } else {
        free(seen);
    }
    int ours = is_identity(l, holder_json);
    uint64_t dur_ms = l->lease_ms;
    int valid = holder_duration_ms(spec, &dur_ms) >= 0;
    if (!valid && holder && *holder && !ours && changed)
        hp_log_warn("leader: lease %s/%s held by %s has an invalid leaseDurationSeconds; "
                    "treating it as held until it is released, corrected or deleted",
                    l->ns, l->name, holder);
    /* now >= observed_at (one monotonic clock): the subtraction cannot wrap. */
    if (holder && *holder && !ours && (!valid || now - l->observed_at < dur_ms)) {
        /* Someone else holds a live lease (or one we cannot judge: see holder_duration_ms).
         * A standby says who, once per holder: "who is the leader?" is the first question. */
        if (!l->holder_said || strcmp(l->holder_said, holder) != 0) {
            hp_log_info("leader: lease held by other identity=%s lease=%s/%s", holder, l->ns,
                        l->name);
            free(l->holder_said);
            l->holder_said = hp_xstrdup(holder);
        }
        json_decref(lease);
        if (l->leading)
            set_leading(l, 0);
        l->known = 1;
        schedule(l, l->retry_ms);
        return;
    }
    if (!ours) {
        free(l->acquire_time);
        l->acquire_time = NULL;
        l->transitions = (long)trans + 1;
    } else {
        l->transitions = (long)trans;
    }
    json_t *rec = record(l, l->identity, lease_seconds(l));
    json_object_update(spec, rec);
    json_decref(rec);
    write_lease(l, lease, 0);
    json_decref(lease);
}

static void on_timer(uv_timer_t *t)
{
    struct hp_leader *l = hp_container_of(t, struct hp_leader, timer);
    char *path = lease_path(l, 1);
    l->req = hp_kube_request(l->client, "GET", path, NULL, NULL, on_read, l);
    free(path);
}

static void schedule(struct hp_leader *l, uint64_t delay_ms)
{
    if (l->stopping)
        return;
    /* client-go adds up to 20% jitter to the retry period while acquiring. */
    if (!l->leading && delay_ms) {
        unsigned char r = 0;
        (void)uv_random(NULL, NULL, &r, 1, 0, NULL); /* jitter only; zero on failure is fine */
        delay_ms += delay_ms * r / 1275;
    }
    (void)uv_timer_start(&l->timer, on_timer, delay_ms, 0); /* initialised timer: cannot fail */
}

struct hp_leader *hp_leader_start(uv_loop_t *loop, struct hp_kube_client *client,
                                  const struct hp_leader_opts *opts, hp_leader_cb cb, void *data)
{
    struct hp_leader *l = hp_xcalloc(1, sizeof(*l));
    l->loop = loop;
    l->client = client;
    l->ns = hp_xstrdup(opts->namespace_);
    l->name = hp_xstrdup(opts->name);
    l->identity = hp_xstrdup(opts->identity);
    l->lease_ms = opts->lease_duration_ms;
    l->renew_deadline_ms = opts->renew_deadline_ms;
    l->retry_ms = opts->retry_period_ms;
    l->cb = cb;
    l->data = data;
    (void)uv_timer_init(loop, &l->timer); /* cannot fail for a valid loop */
    schedule(l, 0);
    return l;
}

int hp_leader_is_leader(const struct hp_leader *l)
{
    return l->leading;
}

int hp_leader_state_known(const struct hp_leader *l)
{
    return l->known;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct hp_leader *l = hp_container_of((uv_timer_t *)h, struct hp_leader, timer);
    void (*cb)(void *) = l->close_cb;
    void *cb_data = l->close_data;
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l->observed);
    free(l->acquire_time);
    free(l->holder_said);
    free(l);
    if (cb)
        cb(cb_data);
}

static void finish_stop(struct hp_leader *l)
{
    uv_close((uv_handle_t *)&l->timer, on_timer_closed);
}

static void on_released(struct hp_kube_response *resp, void *data)
{
    struct hp_leader *l = data;
    l->req = NULL;
    if (resp->status == 0 && resp->code == 200)
        hp_log_info("leader: released lease %s/%s", l->ns, l->name);
    else
        hp_log_warn("leader: could not release lease %s/%s (code=%ld); it expires by itself",
                    l->ns, l->name, resp->code);
    (void)uv_timer_stop(&l->timer);
    finish_stop(l);
}

static void on_release_read(struct hp_kube_response *resp, void *data)
{
    struct hp_leader *l = data;
    l->req = NULL;
    json_t *lease = resp->status == 0 && resp->code == 200
                        ? json_loadb(resp->body, resp->body_len, JSON_ALLOW_NUL, NULL)
                        : NULL;
    json_t *spec = json_object_get(lease, "spec");
    if (!is_identity(l, json_object_get(spec, "holderIdentity"))) {
        json_decref(lease);
        (void)uv_timer_stop(&l->timer);
        finish_stop(l);
        return;
    }
    /* As client-go's release(): empty holder, 1 s duration, transitions kept. */
    json_t *rec = record(l, "", 1);
    json_object_update(spec, rec);
    json_decref(rec);
    char *body = json_dumps(lease, JSON_COMPACT);
    char *path = lease_path(l, 1);
    l->req = hp_kube_request(l->client, "PUT", path, body, NULL, on_released, l);
    free(path);
    free(body);
    json_decref(lease);
}

static void on_release_timeout(uv_timer_t *t)
{
    struct hp_leader *l = hp_container_of(t, struct hp_leader, timer);
    hp_log_warn("leader: releasing lease %s/%s timed out; it expires by itself", l->ns, l->name);
    if (l->req) {
        hp_kube_cancel(l->req);
        l->req = NULL;
    }
    finish_stop(l);
}

void hp_leader_stop(struct hp_leader *l, void (*close_cb)(void *data), void *data)
{
    int was_leading = l->leading;
    l->stopping = 1;
    l->close_cb = close_cb;
    l->close_data = data;
    if (l->req) {
        hp_kube_cancel(l->req);
        l->req = NULL;
    }
    if (!was_leading) {
        (void)uv_timer_stop(&l->timer);
        finish_stop(l);
        return;
    }
    (void)uv_timer_start(&l->timer, on_release_timeout, 3000, 0);
    char *path = lease_path(l, 1);
    l->req = hp_kube_request(l->client, "GET", path, NULL, NULL, on_release_read, l);
    free(path);
}
