/* leader: Lease-based leader election with client-go's semantics (leaderelection.go).
 *
 * Loop thread only. One attempt at a time: GET the Lease; absent -> create it holding it;
 * held by someone else and not expired -> stand by; otherwise PUT our record with the
 * resourceVersion we read (a concurrent writer gets 409 and tries again next period).
 * "Expired" is judged by our own clock (hp_leader_opts.clock, by default the loop's): the record
 * must not have changed for leaseDurationSeconds since we first observed it, as client-go does,
 * so clock skew between nodes does not matter. The leader renews every retry period and steps
 * down when it could not renew for the renew deadline (by the same clock). Close releases a held
 * lease (holderIdentity cleared). A
 * leaseDurationSeconds outside the API's 1..INT32_MAX makes the lease count as held, never as
 * expired (holder_duration_ms).
 *
 * JSON: the Lease is read with hp_json; a PUT sends the Lease as the server wrote it with only
 * our record's members of spec replaced (lease_with_record): jansson builds the record.
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
#include "hostpath/common.h"
#include "hostpath/json.h"
#include "hostpath/kube_client.h"
#include "hostpath/log.h"

struct hp_leader {
    uv_loop_t *loop;
    struct hp_kube_client *client;
    char *ns, *name, *identity;
    uint64_t lease_ms, renew_deadline_ms, retry_ms;
    struct hp_clock clock;
    hp_leader_change_cb cb;
    void *data;
    uv_timer_t timer;
    struct hp_kube_req *req;
    int leading;
    int known;
    int stopping;
    char *observed;          /* holder|renewTime|transitions of the last record seen */
    uint64_t observed_at;    /* now_ms() when it last changed */
    uint64_t last_renew;     /* now_ms() of our last successful acquire/renew */
    char *acquire_time;      /* ours, kept across renewals */
    char *holder_said;       /* the other holder last logged while standing by, or NULL */
    long transitions;
    hp_close_cb close_cb;
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

static uint64_t now_ms(const struct hp_leader *l)
{
    return hp_clock_now(&l->clock, uv_now(l->loop));
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
    uint64_t now = now_ms(l);
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

static void on_written(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                       void *data)
{
    struct hp_leader *l = data;
    l->req = NULL;
    if (status == 0 && (resp->code == 200 || resp->code == 201)) {
        /* Ours now: whoever holds it after us is news again. */
        free(l->holder_said);
        l->holder_said = NULL;
        l->last_renew = now_ms(l);
        set_leading(l, 1);
        schedule(l, l->retry_ms);
        return;
    }
    char why[128];
    if (status < 0)
        snprintf(why, sizeof(why), "%s", resp->error ? resp->error : strerror(-status));
    else
        snprintf(why, sizeof(why), "HTTP %ld", resp->code);
    attempt_failed(l, why);
}

/* Sends body (borrowed): POST of a new Lease, or PUT of the one read. */
static void write_lease(struct hp_leader *l, const char *body, int create, hp_kube_response_cb cb)
{
    char *path = lease_path(l, !create);
    l->req = hp_kube_request(l->client, create ? "POST" : "PUT", path, body, NULL, cb, l);
    free(path);
}

/* Our record's members of spec: everything else in the Lease is the server's. */
static int record_key(const struct hp_json *j, int key)
{
    static const char *const keys[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime",
                                       "renewTime", "leaseTransitions"};
    for (size_t i = 0; i < HP_ARRAY_SIZE(keys); i++)
        if (hp_json_str_eq(j, key, keys[i]))
            return 1;
    return 0;
}

/* The Lease of reader j (its root object, spec at token spec or -1) with our record in its spec,
 * as JSON text (caller frees): every other member of the Lease and of spec is copied as the
 * server wrote it, its resourceVersion included (optimistic concurrency), as client-go updates
 * the object it read. NULL when the record cannot be written (a holder that is not UTF-8). */
static char *lease_with_record(struct hp_leader *l, const struct hp_json *j, int spec,
                               const char *holder, long duration_s)
{
    json_t *rec = record(l, holder, duration_s);
    char *members = rec ? json_dumps(rec, JSON_COMPACT) : NULL; /* "{...}" */
    size_t rlen, slen;
    const char *root = hp_json_text(j, 0, &rlen), *s;
    struct hp_buf b;

    json_decref(rec);
    if (!members)
        return NULL;
    hp_buf_init(&b, 0);
    if (spec < 0) { /* no spec: add one before the root's closing brace */
        (void)hp_buf_append(&b, root, rlen - 1);
        (void)hp_buf_printf(&b, "%s\"spec\":%s}", hp_json_count(j, 0) ? "," : "", members);
    } else {
        s = hp_json_text(j, spec, &slen);
        (void)hp_buf_append(&b, root, (size_t)(s - root));
        (void)hp_buf_append(&b, "{", 1);
        for (int k = hp_json_first(j, spec); k >= 0; k = hp_json_next(j, spec, k)) {
            size_t kl, vl;
            const char *kt = hp_json_text(j, k, &kl), *vt = hp_json_text(j, k + 1, &vl);
            if (record_key(j, k))
                continue;
            (void)hp_buf_append(&b, kt, kl);
            (void)hp_buf_append(&b, ":", 1);
            (void)hp_buf_append(&b, vt, vl);
            (void)hp_buf_append(&b, ",", 1);
        }
        (void)hp_buf_appends(&b, members + 1); /* the record's members and the closing brace */
        (void)hp_buf_append(&b, s + slen, rlen - (size_t)(s + slen - root));
    }
    free(members);
    return hp_buf_steal(&b);
}

/* Reads a Lease body into j: 0 and its spec token (or -1 when it has none), or -EBADMSG when it
 * is not a Lease we can read: not a JSON object, a spec that is not an object, a string holding
 * \u0000 (refused as jansson refused it) or a leaseTransitions beyond 64 bits. */
static int read_lease(struct hp_json *j, const struct hp_kube_response *resp, int *spec)
{
    int64_t v;

    /* A "\u0000" somewhere (an annotation: the API server stores it) is no reason to refuse the
     * Lease: that would stop every election for good. The members we do not read are written
     * back as they were. */
    if (hp_json_parse(j, resp->body, resp->body_len) < 0 || !hp_json_is(j, 0, HP_JSON_OBJECT))
        return -EBADMSG;
    *spec = hp_json_get(j, 0, "spec");
    if (*spec >= 0 && !hp_json_is(j, *spec, HP_JSON_OBJECT))
        return -EBADMSG;
    if (hp_json_int(j, hp_json_get(j, *spec, "leaseTransitions"), &v) == -ERANGE)
        return -EBADMSG;
    return 0;
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
static int holder_duration_ms(const struct hp_json *j, int spec, uint64_t *ms)
{
    int v = hp_json_get(j, spec, "leaseDurationSeconds");
    int64_t s;
    if (v < 0 || hp_json_is(j, v, HP_JSON_NULL))
        return 0;
    if (hp_json_int(j, v, &s) < 0 || s < 1 || s > INT32_MAX)
        return -EINVAL;
    *ms = (uint64_t)s * 1000;
    return 1;
}

static void on_read(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                    void *data)
{
    struct hp_leader *l = data;
    uint64_t now = now_ms(l);
    l->req = NULL;
    if (status == 0 && resp->code == 404) {
        free(l->acquire_time);
        l->acquire_time = NULL;
        l->transitions = 0;
        json_t *spec = record(l, l->identity, lease_seconds(l));
        json_t *lease = json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion",
                                  "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name",
                                  l->name, "namespace", l->ns, "spec", spec);
        char *body = json_dumps(lease, JSON_COMPACT);
        write_lease(l, body, 1, on_written);
        free(body);
        json_decref(lease);
        return;
    }
    if (status < 0 || resp->code != 200) {
        char why[128];
        snprintf(why, sizeof(why), "read lease: %s",
                 status < 0 ? (resp->error ? resp->error : "transport error") : "HTTP error");
        attempt_failed(l, why);
        return;
    }
    struct hp_json j;
    int spec;
    hp_json_init(&j);
    if (read_lease(&j, resp, &spec) < 0) {
        hp_json_free(&j);
        attempt_failed(l, "lease is not valid JSON");
        return;
    }
    int htok = hp_json_get(&j, spec, "holderIdentity");
    char *holder = hp_json_str_dup(&j, htok);
    if (!holder && hp_json_str_has_nul(&j, htok)) /* never one of ours: someone else holds it */
        holder = hp_xstrdup("(an identity holding \\u0000)");
    char *renew = hp_json_str_dup(&j, hp_json_get(&j, spec, "renewTime"));
    int64_t trans = 0;
    if (hp_json_int(&j, hp_json_get(&j, spec, "leaseTransitions"), &trans) < 0)
        trans = 0; /* absent or not an integer counts as 0, as before */
    char *seen = hp_xasprintf("%s|%s|%lld", holder ? holder : "", renew ? renew : "",
                              (long long)trans);
    free(renew);
    int changed = !l->observed || strcmp(seen, l->observed) != 0;
    if (changed) {
        free(l->observed);
        l->observed = seen;
        l->observed_at = now;
    } else {
        free(seen);
    }
    int ours = hp_json_str_eq(&j, htok, l->identity);
    uint64_t dur_ms = l->lease_ms;
    int valid = holder_duration_ms(&j, spec, &dur_ms) >= 0;
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
        free(holder);
        hp_json_free(&j);
        if (l->leading)
            set_leading(l, 0);
        l->known = 1;
        schedule(l, l->retry_ms);
        return;
    }
    free(holder);
    if (!ours) {
        free(l->acquire_time);
        l->acquire_time = NULL;
        l->transitions = (long)trans + 1;
    } else {
        l->transitions = (long)trans;
    }
    char *body = lease_with_record(l, &j, spec, l->identity, lease_seconds(l));
    hp_json_free(&j);
    if (!body) {
        attempt_failed(l, "our identity is not valid UTF-8");
        return;
    }
    write_lease(l, body, 0, on_written);
    free(body);
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

struct hp_leader *hp_leader_new(uv_loop_t *loop, struct hp_kube_client *client,
                                const struct hp_leader_opts *opts, hp_leader_change_cb cb,
                                void *data)
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
    l->clock = opts->clock;
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
    hp_close_cb cb = l->close_cb;
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

static void finish_close(struct hp_leader *l)
{
    uv_close((uv_handle_t *)&l->timer, on_timer_closed);
}

static void on_released(struct hp_kube_req *req, int status, const struct hp_kube_response *resp,
                        void *data)
{
    struct hp_leader *l = data;
    l->req = NULL;
    if (status == 0 && resp->code == 200)
        hp_log_info("leader: released lease %s/%s", l->ns, l->name);
    else
        hp_log_warn("leader: could not release lease %s/%s (code=%ld); it expires by itself",
                    l->ns, l->name, resp->code);
    (void)uv_timer_stop(&l->timer);
    finish_close(l);
}

static void on_release_read(struct hp_kube_req *req, int status,
                            const struct hp_kube_response *resp, void *data)
{
    struct hp_leader *l = data;
    struct hp_json j;
    int spec = -1;
    char *body = NULL;
    l->req = NULL;
    hp_json_init(&j);
    if (status == 0 && resp->code == 200 && read_lease(&j, resp, &spec) == 0 &&
        hp_json_str_eq(&j, hp_json_get(&j, spec, "holderIdentity"), l->identity))
        /* As client-go's release(): empty holder, 1 s duration, transitions kept. */
        body = lease_with_record(l, &j, spec, "", 1);
    hp_json_free(&j);
    if (!body) { /* not ours (any more), or unreadable: nothing to release */
        (void)uv_timer_stop(&l->timer);
        finish_close(l);
        return;
    }
    write_lease(l, body, 0, on_released);
    free(body);
}

static void on_release_timeout(uv_timer_t *t)
{
    struct hp_leader *l = hp_container_of(t, struct hp_leader, timer);
    hp_log_warn("leader: releasing lease %s/%s timed out; it expires by itself", l->ns, l->name);
    if (l->req) {
        hp_kube_cancel(l->req);
        l->req = NULL;
    }
    finish_close(l);
}

void hp_leader_close(struct hp_leader *l, hp_close_cb close_cb, void *data)
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
        finish_close(l);
        return;
    }
    (void)uv_timer_start(&l->timer, on_release_timeout, 3000, 0);
    char *path = lease_path(l, 1);
    l->req = hp_kube_request(l->client, "GET", path, NULL, NULL, on_release_read, l);
    free(path);
}

/* ---- lease names ---- */

#define NAME_MAX_DNS 253

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static int is_alnum_lower(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* prefix cut to at most max characters and to an alphanumeric last one (a DNS name cannot end
 * a label with '-' or '.'), then tail. */
static char *fit(const char *prefix, size_t max, const char *tail)
{
    size_t n = strlen(prefix);
    if (n > max)
        n = max;
    while (n > 0 && !is_alnum_lower(prefix[n - 1]))
        n--;
    return hp_xasprintf("%.*s%s", (int)n, prefix, tail);
}

char *hp_leader_lease_name(const char *provisioner)
{
    size_t n = strlen(provisioner);
    char *name = hp_xmalloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        char c = provisioner[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        else if (c == '/' || c == '_')
            c = '-';
        name[i] = c;
    }
    name[n] = '\0';
    /* A '.' must sit between two alphanumerics ("a_.b" is a valid provisioner name). */
    for (size_t i = 0; i < n; i++)
        if (name[i] == '.' && (i == 0 || !is_alnum_lower(name[i - 1]) || i + 1 == n ||
                               !is_alnum_lower(name[i + 1])))
            name[i] = '-';
    if (n <= NAME_MAX_DNS)
        return name;
    char tail[24];
    snprintf(tail, sizeof(tail), "-%016llx", (unsigned long long)fnv1a64(provisioner));
    char *fitted = fit(name, NAME_MAX_DNS - strlen(tail), tail);
    free(name);
    return fitted;
}

char *hp_leader_node_lease_name(const char *lease, const char *node)
{
    char *name = hp_xasprintf("%s-node-%s", lease, node);
    if (strlen(name) <= NAME_MAX_DNS)
        return name;
    free(name);
    char tail[40];
    snprintf(tail, sizeof(tail), "-node-%016llx", (unsigned long long)fnv1a64(node));
    return fit(lease, NAME_MAX_DNS - strlen(tail), tail);
}
