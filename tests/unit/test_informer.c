/* Unit tests for informer: a scripted API server (fake_http) answers LISTs from a table and
 * streams watch events the test queues; a test type ("things", cluster-scoped or namespaced)
 * decodes metadata.name and spec.v, and refuses an object whose spec.v holds a NUL. Covers
 * per-object skipping in LIST pages and watch events (counted once per object in the log), a
 * skipped update keeping the cached object, a DELETED event applied by key when undecodable,
 * relists and close.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "fake_http.h"
#include "hostpath/buf.h"
#include "hostpath/informer.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/metrics.h"

struct thing {
    char *v;
    char key[];
};

static void *decode_thing(const struct hp_json *j, int obj, void *ctx)
{
    int *decodes = ctx;
    int meta = hp_json_get(j, obj, "metadata");
    int name = hp_json_get(j, meta, "name"), ns = hp_json_get(j, meta, "namespace");
    int v = hp_json_path(j, obj, "spec", "v", NULL);
    char key[256] = "", val[256] = "";

    if (decodes)
        (*decodes)++;
    if (hp_json_str_len(j, name) <= 0 || hp_json_str_has_nul(j, v) ||
        hp_json_str_has_nul(j, name))
        return NULL;
    if (hp_json_str_len(j, ns) > 0) {
        char n[128];
        (void)hp_json_str_copy(j, ns, key, sizeof(key) / 2);
        (void)hp_json_str_copy(j, name, n, sizeof(n));
        strcat(key, "/");
        strncat(key, n, sizeof(key) - strlen(key) - 1);
    } else {
        (void)hp_json_str_copy(j, name, key, sizeof(key));
    }
    (void)hp_json_str_copy(j, v, val, sizeof(val));
    struct thing *t = hp_xmalloc(sizeof(*t) + strlen(key) + 1);
    strcpy(t->key, key);
    t->v = hp_xstrdup(val);
    return t;
}

static const char *thing_key(const void *obj)
{
    return ((const struct thing *)obj)->key;
}

static void thing_free(void *obj)
{
    struct thing *t = obj;
    free(t->v);
    free(t);
}

static const struct hp_informer_type things = {"things", "/apis/x/v1/things", 0, decode_thing,
                                               thing_key, thing_free};
static const struct hp_informer_type ns_things = {"nsthings", "/apis/x/v1/nsthings", 1,
                                                  decode_thing, thing_key, thing_free};

#define MAX_EVENTS 64

struct fx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_informer *inf;
    const char *lists[4]; /* items of the n-th LIST (the last one repeats) */
    int nlist;
    struct fh_conn *watch; /* the open watch stream */
    int decodes;
    int synced;
    int changes;
    char changed[MAX_EVENTS][64]; /* "key=v" or "key=-" */
    int closed, client_closed;
};

static void handler(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    if (strstr(r->path, "watch=1")) {
        f->watch = c;
        fh_stream_begin(c, 200);
        return;
    }
    int i = f->nlist < 3 ? f->nlist : 3;
    const char *items = f->lists[i] ? f->lists[i] : f->lists[f->nlist ? f->nlist - 1 : 0];
    f->nlist++;
    char *body = hp_xasprintf("{\"kind\":\"List\",\"apiVersion\":\"v1\",\"metadata\":"
                              "{\"resourceVersion\":\"%d\"},\"items\":[%s]}",
                              10 * f->nlist, items ? items : "");
    fh_reply(c, 200, NULL, body);
    free(body);
}

static void on_change(struct hp_informer *inf, const char *key, const void *obj, void *data)
{
    struct fx *f = data;
    (void)inf;
    assert_true(f->changes < MAX_EVENTS);
    snprintf(f->changed[f->changes++], 64, "%s=%s", key,
             obj ? ((const struct thing *)obj)->v : "-");
}

static void on_synced(struct hp_informer *inf, void *data)
{
    struct fx *f = data;
    (void)inf;
    f->synced++;
}

/* The keep filter of the tests: things whose spec.v starts with "drop" are not kept. */
static int keep_thing(const struct hp_json *j, int obj, void *ctx)
{
    int *calls = ctx;
    char v[16] = "";
    (*calls)++;
    (void)hp_json_str_copy(j, hp_json_path(j, obj, "spec", "v", NULL), v, sizeof(v));
    return strncmp(v, "drop", 4) != 0;
}

static int keep_calls;

static void fx_setup_opts(struct fx *f, const struct hp_informer_type *type, const char *list0,
                          hp_informer_keep_fn keep);

static void fx_setup(struct fx *f, const struct hp_informer_type *type, const char *list0)
{
    fx_setup_opts(f, type, list0, NULL);
}

static void fx_setup_opts(struct fx *f, const struct hp_informer_type *type, const char *list0,
                          hp_informer_keep_fn keep)
{
    memset(f, 0, sizeof(*f));
    f->lists[0] = list0;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, handler, f);
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    f->creds.token = hp_xstrdup("t");
    struct hp_kube_client_opts opts = {.qps = 0, .burst = 0};
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, &opts), 0);
    struct hp_informer_opts io = {.decode_ctx = &f->decodes,
                                  .on_change = on_change,
                                  .on_synced = on_synced,
                                  .data = f,
                                  .keep = keep,
                                  .keep_ctx = &keep_calls};
    f->inf = hp_informer_new(&f->loop, f->client, type, &io);
    assert_true(fh_run_until(&f->loop, &f->synced, 5000));
}

static void on_flag(void *data)
{
    (*(int *)data)++;
}

static void fx_teardown(struct fx *f)
{
    hp_informer_close(f->inf, on_flag, &f->closed);
    assert_int_equal(f->closed, 0); /* never from inside close */
    assert_true(fh_run_until(&f->loop, &f->closed, 5000));
    hp_kube_client_close(f->client, on_flag, &f->client_closed);
    assert_true(fh_run_until(&f->loop, &f->client_closed, 5000));
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
}

static int has_change(const struct fx *f, const char *what)
{
    for (int i = 0; i < f->changes; i++)
        if (strcmp(f->changed[i], what) == 0)
            return 1;
    return 0;
}

static const char *value_of(const struct fx *f, const char *key)
{
    const struct thing *t = hp_informer_get(f->inf, key);
    return t ? t->v : NULL;
}

#define THING(name, v) "{\"metadata\":{\"name\":\"" name "\",\"resourceVersion\":\"1\"},\"spec\":{\"v\":\"" v "\"}}"

/* Sends one watch event line on the open stream. */
static void event(struct fx *f, const char *type, const char *obj)
{
    char *line = hp_xasprintf("{\"type\":\"%s\",\"object\":%s}\n", type, obj);
    fh_chunk_str(f->watch, 0, line);
    fh_flush(f->watch);
    free(line);
}

static int watch_open(void *p)
{
    return ((struct fx *)p)->watch != NULL;
}

struct count_wait {
    struct fx *f;
    int n;
    size_t undecodable;
};

static int changes_reached(void *p)
{
    struct count_wait *w = p;
    return w->f->changes >= w->n && hp_informer_undecodable(w->f->inf) >= w->undecodable;
}

static void wait_for(struct fx *f, int changes, size_t undecodable)
{
    struct count_wait w = {f, changes, undecodable};
    assert_true(fh_run_until_cb(&f->loop, 5000, changes_reached, &w));
    fh_run_for(&f->loop, 20);
}

/* ---- cases ---- */

static void test_list_skips_one_object(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f, &things, THING("a", "1") "," THING("bad", "x\\u0000y") "," THING("c", "3")
                              ",{\"metadata\":{}}");
    assert_int_equal(f.synced, 1);
    assert_true(hp_informer_synced(f.inf));
    assert_int_equal(hp_informer_len(f.inf), 2);
    assert_string_equal(value_of(&f, "a"), "1");
    assert_string_equal(value_of(&f, "c"), "3");
    assert_null(value_of(&f, "bad"));
    assert_int_equal(hp_informer_undecodable(f.inf), 2); /* "bad" and the nameless one */
    assert_true(has_change(&f, "a=1") && has_change(&f, "c=3"));
    assert_int_equal(f.changes, 2);
    fx_teardown(&f);
}

static void test_watch_events(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f, &things, THING("a", "1"));
    assert_true(fh_run_until_cb(&f.loop, 5000, watch_open, &f));
    int base = f.changes;
    event(&f, "ADDED", THING("b", "2"));
    wait_for(&f, base + 1, 0);
    assert_string_equal(value_of(&f, "b"), "2");
    /* An update that cannot be decoded: skipped, counted, the cached object stays. */
    event(&f, "MODIFIED", THING("b", "bad\\u0000"));
    wait_for(&f, base + 1, 1);
    assert_string_equal(value_of(&f, "b"), "2");
    /* Its DELETED event cannot be decoded either: applied by name. */
    event(&f, "DELETED", THING("b", "bad\\u0000"));
    wait_for(&f, base + 2, 2);
    assert_null(value_of(&f, "b"));
    assert_true(has_change(&f, "b=-"));
    /* A decodable delete, and a delete of something never cached: no change. */
    event(&f, "DELETED", THING("a", "1"));
    event(&f, "DELETED", THING("zz", "1"));
    wait_for(&f, base + 3, 2);
    assert_int_equal(f.changes, base + 3);
    assert_int_equal(hp_informer_len(f.inf), 0);
    fx_teardown(&f);
}

static void test_namespaced_delete_by_key(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f, &ns_things,
             "{\"metadata\":{\"namespace\":\"n1\",\"name\":\"x\"},\"spec\":{\"v\":\"1\"}}");
    assert_string_equal(value_of(&f, "n1/x"), "1");
    assert_true(fh_run_until_cb(&f.loop, 5000, watch_open, &f));
    int base = f.changes;
    event(&f, "DELETED",
          "{\"metadata\":{\"namespace\":\"n1\",\"name\":\"x\"},\"spec\":{\"v\":\"\\u0000\"}}");
    wait_for(&f, base + 1, 1);
    assert_null(value_of(&f, "n1/x"));
    fx_teardown(&f);
}

static void test_relist_keeps_undecodable_and_drops_gone(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f, &things, THING("a", "1") "," THING("b", "2") "," THING("c", "3"));
    assert_int_equal(hp_informer_len(f.inf), 3);
    /* The next LIST: a gone, b now undecodable (its cached copy stays), c changed. */
    f.lists[1] = THING("b", "\\u0000") "," THING("c", "33");
    int base = f.changes;
    hp_informer_relist(f.inf);
    assert_true(fh_run_until(&f.loop, &f.synced, 5000) && fh_run_until_cb(&f.loop, 5000,
                                                                          watch_open, &f));
    struct count_wait w = {&f, base + 2, 1};
    assert_true(fh_run_until_cb(&f.loop, 5000, changes_reached, &w));
    assert_null(value_of(&f, "a"));
    assert_string_equal(value_of(&f, "b"), "2");
    assert_string_equal(value_of(&f, "c"), "33");
    assert_true(has_change(&f, "a=-") && has_change(&f, "c=33"));
    assert_int_equal(f.nlist, 2);
    fx_teardown(&f);
}

/* The keep filter: what it refuses is neither decoded nor stored; a stored object it refuses
 * later goes (a change to NULL), in a watch event as in a relist; a DELETED event never asks. */
static void test_keep_filter(void **state)
{
    struct fx f;
    (void)state;
    keep_calls = 0;
    fx_setup_opts(&f, &things, THING("a", "1") "," THING("b", "drop") "," THING("c", "3"),
                  keep_thing);
    assert_int_equal(hp_informer_len(f.inf), 2);
    assert_null(value_of(&f, "b"));
    assert_int_equal(f.decodes, 2); /* b was never decoded */
    assert_int_equal(hp_informer_dropped(f.inf), 1);
    assert_int_equal(hp_informer_undecodable(f.inf), 0);
    assert_int_equal(f.changes, 2);
    assert_true(fh_run_until_cb(&f.loop, 5000, watch_open, &f));

    /* Kept, then refused: removed, as if deleted. */
    int base = f.changes;
    event(&f, "MODIFIED", THING("a", "drop-now"));
    wait_for(&f, base + 1, 0);
    assert_null(value_of(&f, "a"));
    assert_true(has_change(&f, "a=-"));
    assert_int_equal(hp_informer_dropped(f.inf), 2);
    /* Refused and not stored: no change at all. */
    event(&f, "ADDED", THING("d", "drop"));
    event(&f, "MODIFIED", THING("b", "drop2"));
    /* Refused before, kept now: added. */
    event(&f, "MODIFIED", THING("b", "2"));
    wait_for(&f, base + 2, 0);
    assert_string_equal(value_of(&f, "b"), "2");
    assert_int_equal(f.changes, base + 2);
    assert_int_equal(hp_informer_dropped(f.inf), 4);
    /* DELETED is applied by key, without asking the filter. */
    int calls = keep_calls;
    event(&f, "DELETED", THING("b", "drop"));
    wait_for(&f, base + 3, 0);
    assert_null(value_of(&f, "b"));
    assert_int_equal(keep_calls, calls);

    /* A relist: c is refused now, e is new and kept. */
    f.lists[1] = THING("c", "drop") "," THING("e", "5");
    hp_informer_relist(f.inf);
    struct count_wait w = {&f, base + 5, 0};
    assert_true(fh_run_until_cb(&f.loop, 5000, changes_reached, &w));
    assert_null(value_of(&f, "c"));
    assert_string_equal(value_of(&f, "e"), "5");
    assert_int_equal(hp_informer_len(f.inf), 1);
    assert_true(has_change(&f, "c=-") && has_change(&f, "e=5"));
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_filter),
        cmocka_unit_test(test_list_skips_one_object),
        cmocka_unit_test(test_watch_events),
        cmocka_unit_test(test_namespaced_delete_by_key),
        cmocka_unit_test(test_relist_keeps_undecodable_and_drops_gone),
    };
    hp_metrics_init();
    int rc = cmocka_run_group_tests_name("informer", tests, NULL, NULL);
    hp_metrics_free();
    return rc;
}
