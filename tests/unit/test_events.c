/* Unit tests for events: Event writes against a scripted HTTP/1.1 server on 127.0.0.1 running on
 * the same loop. Covers the first POST and its body, cluster-scoped objects going to "default",
 * aggregation of repeats into a strategic-merge PATCH of the same Event, distinct events, the
 * 404 fallback from PATCH to POST, and freeing with writes in flight. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "fake_http.h"
#include "hostpath/buf.h"
#include "hostpath/events.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/metrics.h"

#define COMPONENT "hostpath-provisioner.io"
#define MAX_SEEN 64

struct seen {
    char method[16];
    char path[4096];
    char ctype[128];
    char *body;
};

struct fx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_events *events;
    int closed;
    int patch_code; /* answer to PATCH */
    int hold;       /* do not answer at all */
    int nseen;
    struct seen seen[MAX_SEEN];
};

static void handler(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    assert_true(f->nseen < MAX_SEEN);
    struct seen *s = &f->seen[f->nseen++];
    snprintf(s->method, sizeof(s->method), "%s", r->method);
    snprintf(s->path, sizeof(s->path), "%s", r->path);
    if (!fh_header(r, "Content-Type", s->ctype, sizeof(s->ctype)))
        s->ctype[0] = '\0';
    s->body = hp_xstrndup(r->body, r->body_len);
    if (f->hold)
        return; /* the request stays unanswered until the test closes the server */
    if (strcmp(r->method, "POST") == 0)
        fh_reply(c, 201, NULL, r->body);
    else if (strcmp(r->method, "PATCH") == 0 && f->patch_code == 404)
        fh_reply(c, 404, NULL,
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                 "\"reason\":\"NotFound\",\"code\":404}");
    else
        fh_reply(c, 200, NULL, "{\"kind\":\"Event\",\"apiVersion\":\"v1\"}");
}

static void fx_setup(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    f->patch_code = 200;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, handler, f);
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    f->creds.token = hp_xstrdup("secret");
    struct hp_kube_client_opts opts = {.qps = 0, .burst = 0};
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, &opts), 0);
    f->events = hp_events_new(f->client, COMPONENT, "node1");
    assert_non_null(f->events);
}

static void on_client_closed(void *data)
{
    (*(int *)data)++;
}

static void fx_teardown(struct fx *f)
{
    hp_events_free(f->events);
    hp_kube_client_close(f->client, on_client_closed, &f->closed);
    assert_true(fh_run_until(&f->loop, &f->closed, 5000));
    assert_int_equal(f->closed, 1);
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
    for (int i = 0; i < f->nseen; i++)
        free(f->seen[i].body);
}

struct wait_arg {
    struct fx *f;
    int n;
};

static int all_answered(void *p)
{
    struct wait_arg *w = p;
    return w->f->nseen >= w->n && hp_kube_client_inflight(w->f->client) == 0;
}

/* Runs the loop until the server has seen n requests and every one has completed. */
static void wait_requests(struct fx *f, int n)
{
    struct wait_arg w = {f, n};
    assert_true(fh_run_until_cb(&f->loop, 5000, all_answered, &w));
    /* Nothing more arrives afterwards. */
    fh_run_for(&f->loop, 30);
    assert_int_equal(f->nseen, n);
}

static json_t *body_json(const struct seen *s)
{
    json_error_t err;
    json_t *j = json_loads(s->body, 0, &err);
    if (!j)
        fail_msg("request body is not JSON: %s: %s", err.text, s->body);
    return j;
}

static const char *jstr(json_t *j, const char *path)
{
    /* path: dot-separated object keys */
    char key[64];
    const char *p = path;
    while (j && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof(key), "%.*s", (int)n, p);
        j = json_object_get(j, key);
        p = dot ? dot + 1 : p + n;
    }
    return json_string_value(j);
}

static void assert_rfc3339(const char *ts)
{
    assert_non_null(ts);
    /* 2006-01-02T15:04:05Z */
    assert_int_equal(strlen(ts), 20);
    assert_int_equal(ts[4], '-');
    assert_int_equal(ts[10], 'T');
    assert_int_equal(ts[19], 'Z');
}

static const struct hp_object_ref claim_ref = {
    .kind = "PersistentVolumeClaim",
    .api_version = "v1",
    .namespace_ = "ns1",
    .name = "claim1",
    .uid = "uid-claim-1",
    .resource_version = "42",
};

static const struct hp_object_ref pv_ref = {
    .kind = "PersistentVolume",
    .api_version = "v1",
    .namespace_ = NULL,
    .name = "pvc-uid-claim-1",
    .uid = "uid-pv-1",
};

/* ---- the first emit POSTs a complete Event ---- */

static void test_first_emit_posts(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);

    hp_events_emit(f.events, &claim_ref, 0, "Provisioning",
                   "External provisioner is provisioning volume for claim \"%s/%s\"", "ns1",
                   "claim1");
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "failed: %s",
                   "permission denied");
    wait_requests(&f, 2);

    for (int i = 0; i < 2; i++) {
        /* The two writes may reach the server in either order. */
        json_t *ev = body_json(&f.seen[i]);
        int warning = strcmp(jstr(ev, "reason"), "ProvisioningFailed") == 0;
        assert_string_equal(f.seen[i].method, "POST");
        assert_string_equal(f.seen[i].path, "/api/v1/namespaces/ns1/events");
        assert_string_equal(f.seen[i].ctype, "application/json");
        assert_string_equal(jstr(ev, "kind"), "Event");
        assert_string_equal(jstr(ev, "apiVersion"), "v1");
        assert_string_equal(jstr(ev, "metadata.namespace"), "ns1");
        const char *name = jstr(ev, "metadata.name");
        assert_non_null(name);
        assert_true(strncmp(name, "claim1.", 7) == 0);
        assert_true(strlen(name) > 7);
        assert_string_equal(jstr(ev, "involvedObject.kind"), "PersistentVolumeClaim");
        assert_string_equal(jstr(ev, "involvedObject.apiVersion"), "v1");
        assert_string_equal(jstr(ev, "involvedObject.name"), "claim1");
        assert_string_equal(jstr(ev, "involvedObject.namespace"), "ns1");
        assert_string_equal(jstr(ev, "involvedObject.uid"), "uid-claim-1");
        assert_string_equal(jstr(ev, "involvedObject.resourceVersion"), "42");
        assert_string_equal(jstr(ev, "source.component"), COMPONENT);
        assert_string_equal(jstr(ev, "source.host"), "node1");
        assert_int_equal(json_integer_value(json_object_get(ev, "count")), 1);
        assert_true(json_is_integer(json_object_get(ev, "count")));
        const char *first = jstr(ev, "firstTimestamp");
        const char *last = jstr(ev, "lastTimestamp");
        assert_rfc3339(first);
        assert_rfc3339(last);
        assert_string_equal(first, last);
        if (warning) {
            assert_string_equal(jstr(ev, "type"), "Warning");
            assert_string_equal(jstr(ev, "message"), "failed: permission denied");
        } else {
            assert_string_equal(jstr(ev, "reason"), "Provisioning");
            assert_string_equal(jstr(ev, "type"), "Normal");
            assert_string_equal(jstr(ev, "message"),
                                "External provisioner is provisioning volume for claim "
                                "\"ns1/claim1\"");
        }
        json_decref(ev);
    }
    fx_teardown(&f);
}

/* ---- a PersistentVolume (cluster-scoped) goes to "default" ---- */

static void test_cluster_scoped_default_namespace(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);

    hp_events_emit(f.events, &pv_ref, 1, "VolumeFailedDelete", "rmdir: %s", "busy");
    wait_requests(&f, 1);
    struct hp_object_ref empty_ns = pv_ref;
    empty_ns.namespace_ = "";
    empty_ns.uid = "uid-pv-2";
    hp_events_emit(f.events, &empty_ns, 1, "VolumeFailedDelete", "rmdir: %s", "busy");
    wait_requests(&f, 2);

    for (int i = 0; i < 2; i++) {
        json_t *ev = body_json(&f.seen[i]);
        assert_string_equal(f.seen[i].method, "POST");
        assert_string_equal(f.seen[i].path, "/api/v1/namespaces/default/events");
        assert_string_equal(jstr(ev, "metadata.namespace"), "default");
        assert_string_equal(jstr(ev, "involvedObject.kind"), "PersistentVolume");
        assert_string_equal(jstr(ev, "involvedObject.name"), "pvc-uid-claim-1");
        assert_null(json_object_get(json_object_get(ev, "involvedObject"), "namespace"));
        assert_string_equal(jstr(ev, "involvedObject.uid"), i == 0 ? "uid-pv-1" : "uid-pv-2");
        assert_string_equal(jstr(ev, "type"), "Warning");
        assert_string_equal(jstr(ev, "message"), "rmdir: busy");
        json_decref(ev);
    }
    fx_teardown(&f);
}

/* ---- repeats PATCH the same Event; a different message is a new Event ---- */

static void test_repeat_patches_count(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);

    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "no space left");
    wait_requests(&f, 1);
    json_t *first = body_json(&f.seen[0]);
    char *name = hp_xstrdup(jstr(first, "metadata.name"));
    json_decref(first);
    char *event_path = hp_xasprintf("/api/v1/namespaces/ns1/events/%s", name);

    for (int n = 2; n <= 3; n++) {
        hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "no space %s", "left");
        wait_requests(&f, n);
        struct seen *s = &f.seen[n - 1];
        assert_string_equal(s->method, "PATCH");
        assert_string_equal(s->path, event_path);
        assert_string_equal(s->ctype, "application/strategic-merge-patch+json");
        json_t *patch = body_json(s);
        assert_int_equal(json_integer_value(json_object_get(patch, "count")), n);
        assert_rfc3339(jstr(patch, "lastTimestamp"));
        /* A patch touches count and lastTimestamp only. */
        assert_int_equal(json_object_size(patch), 2);
        json_decref(patch);
    }

    /* A different message, reason, type or object is a different Event. */
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "no space right");
    hp_events_emit(f.events, &claim_ref, 0, "ProvisioningFailed", "no space left");
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningCleanupFailed", "no space left");
    struct hp_object_ref other = claim_ref;
    other.uid = "uid-claim-2";
    hp_events_emit(f.events, &other, 1, "ProvisioningFailed", "no space left");
    wait_requests(&f, 7);
    for (int i = 3; i < 7; i++) {
        assert_string_equal(f.seen[i].method, "POST");
        assert_string_equal(f.seen[i].path, "/api/v1/namespaces/ns1/events");
        json_t *ev = body_json(&f.seen[i]);
        assert_int_equal(json_integer_value(json_object_get(ev, "count")), 1);
        json_decref(ev);
    }

    /* The original is still aggregated. */
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "no space left");
    wait_requests(&f, 8);
    assert_string_equal(f.seen[7].method, "PATCH");
    assert_string_equal(f.seen[7].path, event_path);
    json_t *patch = body_json(&f.seen[7]);
    assert_int_equal(json_integer_value(json_object_get(patch, "count")), 4);
    json_decref(patch);

    free(event_path);
    free(name);
    fx_teardown(&f);
}

/* ---- a PATCH answered 404 falls back to POSTing the Event anew ---- */

static void test_patch_404_falls_back_to_post(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.patch_code = 404;

    hp_events_emit(f.events, &pv_ref, 0, "ProvisioningSucceeded", "volume %s ok", "pv1");
    wait_requests(&f, 1);
    json_t *first = body_json(&f.seen[0]);
    char *name = hp_xstrdup(jstr(first, "metadata.name"));
    json_decref(first);

    hp_events_emit(f.events, &pv_ref, 0, "ProvisioningSucceeded", "volume %s ok", "pv1");
    wait_requests(&f, 3);
    assert_string_equal(f.seen[1].method, "PATCH");
    char *event_path = hp_xasprintf("/api/v1/namespaces/default/events/%s", name);
    assert_string_equal(f.seen[1].path, event_path);
    assert_string_equal(f.seen[2].method, "POST");
    assert_string_equal(f.seen[2].path, "/api/v1/namespaces/default/events");
    assert_string_equal(f.seen[2].ctype, "application/json");
    json_t *ev = body_json(&f.seen[2]);
    assert_string_equal(jstr(ev, "kind"), "Event");
    assert_string_equal(jstr(ev, "metadata.namespace"), "default");
    assert_string_equal(jstr(ev, "reason"), "ProvisioningSucceeded");
    assert_string_equal(jstr(ev, "message"), "volume pv1 ok");
    assert_string_equal(jstr(ev, "type"), "Normal");
    assert_string_equal(jstr(ev, "involvedObject.name"), "pvc-uid-claim-1");
    assert_string_equal(jstr(ev, "involvedObject.uid"), "uid-pv-1");
    assert_non_null(jstr(ev, "metadata.name"));
    assert_true(json_is_integer(json_object_get(ev, "count")));

    /* The Event is created again under the name the cache keeps for later PATCHes. */
    assert_string_equal(jstr(ev, "metadata.name"), name);
    json_decref(ev);
    fh_run_for(&f.loop, 50);
    assert_int_equal(f.nseen, 3);

    /* The re-created Event counts from 1 again: the next repeat PATCHes count 2. */
    f.patch_code = 200;
    hp_events_emit(f.events, &pv_ref, 0, "ProvisioningSucceeded", "volume %s ok", "pv1");
    wait_requests(&f, 4);
    assert_string_equal(f.seen[3].method, "PATCH");
    json_t *patch = body_json(&f.seen[3]);
    assert_int_equal(json_integer_value(json_object_get(patch, "count")), 2);
    json_decref(patch);
    free(event_path);
    free(name);
    fx_teardown(&f);
}

/* ---- other failures are not retried hot ---- */

static void h_fail(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    assert_true(f->nseen < MAX_SEEN);
    struct seen *s = &f->seen[f->nseen++];
    snprintf(s->method, sizeof(s->method), "%s", r->method);
    snprintf(s->path, sizeof(s->path), "%s", r->path);
    s->body = hp_xstrndup(r->body, r->body_len);
    fh_reply(c, 403, NULL,
             "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Forbidden\","
             "\"message\":\"events is forbidden\",\"code\":403}");
}

static void test_failure_not_retried(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.srv.handler = h_fail;

    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "x");
    wait_requests(&f, 1);
    fh_run_for(&f.loop, 100);
    assert_int_equal(f.nseen, 1);
    /* A repeat PATCHes (403 is no reason to POST again). */
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "x");
    wait_requests(&f, 2);
    assert_string_equal(f.seen[1].method, "PATCH");
    fh_run_for(&f.loop, 100);
    assert_int_equal(f.nseen, 2);
    fx_teardown(&f);
}

/* ---- free with writes in flight cancels them ---- */

static int server_saw(void *p)
{
    struct wait_arg *w = p;
    return w->f->nseen >= w->n;
}

static void test_free_in_flight(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.hold = 1;

    hp_events_emit(f.events, &claim_ref, 0, "Provisioning", "one");
    hp_events_emit(f.events, &claim_ref, 0, "Provisioning", "two");
    hp_events_emit(f.events, &pv_ref, 1, "VolumeFailedDelete", "three");
    hp_events_emit(f.events, &claim_ref, 0, "Provisioning", "one"); /* pending on its POST */
    struct wait_arg w = {&f, 3};
    assert_true(fh_run_until_cb(&f.loop, 5000, server_saw, &w));
    assert_int_equal(hp_kube_client_inflight(f.client), 3);
    /* One more that has not even reached the server yet. */
    hp_events_emit(f.events, &claim_ref, 0, "Provisioning", "five");

    hp_events_free(f.events);
    f.events = NULL;
    assert_int_equal(hp_kube_client_inflight(f.client), 0);
    fh_run_for(&f.loop, 50);
    fx_teardown(&f);
}

/* ---- one write per Event at a time: repeats meanwhile are counted, then one PATCH ---- */

static void test_repeats_wait_for_the_write_in_flight(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.hold = 1;

    /* The POST is held: repeats are only counted (a PATCH now could reach the server before
     * the Event exists, or, over HTTP/2, be applied after a later one). */
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    struct wait_arg w = {&f, 1};
    assert_true(fh_run_until_cb(&f.loop, 5000, server_saw, &w));
    for (int i = 0; i < 3; i++)
        hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    fh_run_for(&f.loop, 50);
    assert_int_equal(f.nseen, 1);
    assert_int_equal(hp_kube_client_inflight(f.client), 1);
    hp_events_free(f.events);

    /* Answered: the three repeats become one PATCH with count 4, then the next is immediate;
     * two repeats during that PATCH become one more PATCH with count 7. */
    f.hold = 0;
    f.events = hp_events_new(f.client, COMPONENT, "node1");
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    for (int i = 0; i < 3; i++)
        hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    wait_requests(&f, 3);
    assert_string_equal(f.seen[1].method, "POST");
    assert_string_equal(f.seen[2].method, "PATCH");
    json_t *patch = body_json(&f.seen[2]);
    assert_int_equal(json_integer_value(json_object_get(patch, "count")), 4);
    json_decref(patch);
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    hp_events_emit(f.events, &claim_ref, 1, "ProvisioningFailed", "full");
    wait_requests(&f, 5);
    for (int i = 3; i < 5; i++)
        assert_string_equal(f.seen[i].method, "PATCH");
    patch = body_json(&f.seen[3]);
    assert_int_equal(json_integer_value(json_object_get(patch, "count")), 5);
    json_decref(patch);
    patch = body_json(&f.seen[4]);
    assert_int_equal(json_integer_value(json_object_get(patch, "count")), 7);
    json_decref(patch);
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_emit_posts),
        cmocka_unit_test(test_cluster_scoped_default_namespace),
        cmocka_unit_test(test_repeat_patches_count),
        cmocka_unit_test(test_patch_404_falls_back_to_post),
        cmocka_unit_test(test_failure_not_retried),
        cmocka_unit_test(test_free_in_flight),
        cmocka_unit_test(test_repeats_wait_for_the_write_in_flight),
    };
    hp_metrics_init();
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hp_metrics_free();
    return rc;
}
