/* Unit tests for the controller: the real controller, kube client, events and hostpath queue on
 * one loop, against a scripted HTTP/1.1 API server (fake_http) that answers the three LISTs from
 * fixture JSON, holds the WATCH streams open, and records every write. The volume root is a
 * mkdtemp directory. Covers the decisions the ownership journal adds: a new volume is recorded
 * and its PV carries the on-delete decision; two claims rendering one path get one volume; a
 * released volume is removed only with its record; a volume of an earlier version is recorded
 * and kept when its class is gone; a controller stopped before it started.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <uv.h>

#include "fake_http.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/controller.h"
#include "hostpath/events.h"
#include "hostpath/fsops.h"
#include "hostpath/hostpath.h"
#include "hostpath/journal.h"
#include "hostpath/json.h"
#include "hostpath/kube_client.h"
#include "hostpath/kubeconfig.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

#define PROV "hostpath-provisioner.io"
#define MAX_SEEN 4096

struct seen {
    char method[16];
    char *path;
    char *body;
};

struct fx {
    uv_loop_t loop;
    struct fh_server srv;
    struct hp_config cfg;
    struct hp_kube_creds creds;
    struct hp_kube_client *client;
    struct hp_events *events;
    struct hp_hostpath *hostpath;
    struct hp_controller *ctl;
    char root[512];
    const char *claims, *volumes, *classes; /* LIST items (JSON array contents) */
    int closed, ctl_closed, hp_idle;
    uint64_t pv_create_delay_ms; /* the PV POST is answered this late */
    const char *pv_get_body;     /* answer to GET /api/v1/persistentvolumes/<name>, else 404 */
    int pv_get_fails;            /* ... or, when set, 500 */
    struct fh_conn *pv_watch;    /* the PV watch stream, held open: a test may send events */
    int ctl_closing;             /* the test closed the controller itself */
    int nseen;
    struct seen seen[MAX_SEEN];
};

static char base_dir[256];
static int test_seq;

static const char *list_kind(const char *path)
{
    if (strncmp(path, "/api/v1/persistentvolumeclaims", 30) == 0)
        return "PersistentVolumeClaimList";
    if (strncmp(path, "/api/v1/persistentvolumes?", 26) == 0)
        return "PersistentVolumeList";
    if (strncmp(path, "/apis/storage.k8s.io/v1/storageclasses", 38) == 0)
        return "StorageClassList";
    return NULL;
}

/* A streaming list's initial events: each item ADDED, then the bookmark that ends them. */
static void stream_items(struct fh_conn *c, const char *items)
{
    struct hp_json j;
    char *doc = hp_xasprintf("[%s]", items ? items : "");
    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    for (int it = hp_json_first(&j, 0); it >= 0; it = hp_json_next(&j, 0, it)) {
        size_t n;
        const char *raw = hp_json_raw(&j, it, &n);
        char *ev = hp_xasprintf("{\"type\":\"ADDED\",\"object\":%.*s}\n", (int)n, raw);
        fh_chunk_str(c, 0, ev);
        free(ev);
    }
    fh_chunk_str(c, 0,
                 "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"10\","
                 "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n");
    hp_json_free(&j);
    free(doc);
}

static const char *items_of(const struct fx *f, const char *kind)
{
    return kind[0] == 'P' && kind[16] == 'C' ? f->claims
           : kind[0] == 'P'                 ? f->volumes
                                            : f->classes;
}

static void handler(struct fh_conn *c, const struct fh_request *r, void *data)
{
    struct fx *f = data;
    const char *kind = list_kind(r->path);

    if (kind && strstr(r->path, "watch=1")) {
        fh_stream_begin(c, 200); /* held open: nothing changes unless a test says so */
        if (strstr(r->path, "sendInitialEvents=true"))
            stream_items(c, items_of(f, kind));
        if (strcmp(kind, "PersistentVolumeList") == 0)
            f->pv_watch = c;
        return;
    }
    if (kind && strcmp(r->method, "GET") == 0) {
        const char *items = items_of(f, kind);
        char *body = hp_xasprintf("{\"kind\":\"%s\",\"apiVersion\":\"v1\",\"metadata\":"
                                  "{\"resourceVersion\":\"10\"},\"items\":[%s]}",
                                  kind, items ? items : "");
        fh_reply(c, 200, NULL, body);
        free(body);
        return;
    }
    assert_true(f->nseen < MAX_SEEN);
    struct seen *s = &f->seen[f->nseen++];
    snprintf(s->method, sizeof(s->method), "%s", r->method);
    s->path = hp_xstrdup(r->path);
    s->body = hp_xstrndup(r->body, r->body_len);
    if (strcmp(r->method, "POST") == 0 && f->pv_create_delay_ms &&
        strcmp(r->path, "/api/v1/persistentvolumes") == 0) {
        char *resp = hp_xasprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                  "Content-Length: %zu\r\n\r\n%s",
                                  r->body_len, r->body);
        fh_write(c, resp, strlen(resp), 1, f->pv_create_delay_ms);
        fh_done(c);
        free(resp);
    } else if (strcmp(r->method, "POST") == 0)
        fh_reply(c, 201, NULL, r->body);
    else if (strcmp(r->method, "GET") == 0 && f->pv_get_fails &&
             strncmp(r->path, "/api/v1/persistentvolumes/", 26) == 0)
        fh_reply(c, 500, NULL,
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                 "\"reason\":\"InternalError\",\"code\":500}");
    else if (strcmp(r->method, "GET") == 0 && f->pv_get_body &&
             strncmp(r->path, "/api/v1/persistentvolumes/", 26) == 0)
        fh_reply(c, 200, NULL, f->pv_get_body);
    else if (strcmp(r->method, "GET") == 0)
        fh_reply(c, 404, NULL,
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                 "\"reason\":\"NotFound\",\"code\":404}");
    else
        fh_reply(c, 200, NULL, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Success\"}");
}

static void fx_setup(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    assert_true(snprintf(f->root, sizeof(f->root), "%s/t%d", base_dir, ++test_seq) <
                (int)sizeof(f->root));
    assert_int_equal(mkdir(f->root, 0755), 0);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    fh_server_start(&f->srv, &f->loop, handler, f);
    f->creds.server = hp_xasprintf("http://127.0.0.1:%d", f->srv.port);
    f->creds.token = hp_xstrdup("secret");
    struct hp_kube_client_opts opts = {.qps = 0, .burst = 0};
    assert_int_equal(hp_kube_client_new(&f->client, &f->loop, &f->creds, &opts), 0);
    f->events = hp_events_new(f->client, PROV, NULL);
    f->hostpath = hp_hostpath_new(&f->loop, 2);
    f->cfg.provisioner_name = (char *)PROV;
    f->cfg.pv_dir = f->root;
    f->cfg.identity = (char *)"me";
    f->cfg.default_reclaim_policy = HP_RECLAIM_DELETE;
    f->cfg.workers = 2;
    f->cfg.retry_base_delay_ms = 5;
    f->cfg.retry_max_delay_ms = 50;
    f->cfg.failed_retry_threshold = 0;
    f->ctl = hp_controller_new(&f->loop, &f->cfg, f->client, f->events, f->hostpath);
}

static void on_flag(void *data)
{
    (*(int *)data)++;
}

static void fx_teardown(struct fx *f)
{
    hp_hostpath_close(f->hostpath, on_flag, &f->hp_idle);
    if (!f->ctl_closing)
        hp_controller_close(f->ctl, on_flag, &f->ctl_closed);
    assert_true(fh_run_until(&f->loop, &f->ctl_closed, 5000));
    assert_true(fh_run_until(&f->loop, &f->hp_idle, 5000));
    hp_events_free(f->events);
    hp_kube_client_close(f->client, on_flag, &f->closed);
    assert_true(fh_run_until(&f->loop, &f->closed, 5000));
    fh_server_close(&f->srv);
    assert_true(fh_run_until_cb(&f->loop, 5000, fh_server_closed, &f->srv));
    assert_int_equal(uv_loop_close(&f->loop), 0);
    hp_kube_creds_free(&f->creds);
    for (int i = 0; i < f->nseen; i++) {
        free(f->seen[i].body);
        free(f->seen[i].path);
    }
}

static void start(struct fx *f)
{
    hp_controller_start(f->ctl);
    hp_controller_set_leader(f->ctl, 1);
    assert_true(fh_run_until_cb(&f->loop, 5000, (int (*)(void *))hp_controller_synced, f->ctl));
}

/* The index of the first write matching method and a path prefix (and, when given, a body
 * fragment), or -1. */
static int find(const struct fx *f, const char *method, const char *prefix, const char *frag)
{
    for (int i = 0; i < f->nseen; i++) {
        const struct seen *s = &f->seen[i];
        if (strcmp(s->method, method) == 0 && strncmp(s->path, prefix, strlen(prefix)) == 0 &&
            (!frag || strstr(s->body, frag)))
            return i;
    }
    return -1;
}

static int count(const struct fx *f, const char *method, const char *prefix)
{
    int n = 0;
    for (int i = 0; i < f->nseen; i++)
        n += strcmp(f->seen[i].method, method) == 0 &&
             strncmp(f->seen[i].path, prefix, strlen(prefix)) == 0;
    return n;
}

struct want {
    struct fx *f;
    const char *method, *prefix, *frag;
};

static int seen_cond(void *p)
{
    struct want *w = p;
    return find(w->f, w->method, w->prefix, w->frag) >= 0;
}

static int wait_seen(struct fx *f, const char *method, const char *prefix, const char *frag)
{
    struct want w = {f, method, prefix, frag};
    assert_true(fh_run_until_cb(&f->loop, 5000, seen_cond, &w));
    return find(f, method, prefix, frag);
}

static int exists(const char *root, const char *rel)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    return lstat(p, &st) == 0;
}

#define CLASS(name, params)                                                                        \
    "{\"metadata\":{\"name\":\"" name "\"},\"provisioner\":\"" PROV "\","                          \
    "\"reclaimPolicy\":\"Delete\",\"volumeBindingMode\":\"Immediate\",\"parameters\":" params "}"
#define CLAIM(ns, name, uid, cls)                                                                  \
    "{\"metadata\":{\"namespace\":\"" ns "\",\"name\":\"" name "\",\"uid\":\"" uid "\","           \
    "\"resourceVersion\":\"5\"},\"spec\":{\"storageClassName\":\"" cls "\",\"accessModes\":"       \
    "[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}}"

/* ---- provisioning ---- */

static void test_provisions_and_records(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.classes = CLASS("hp", "{}");
    f.claims = CLAIM("default", "c1", "u1", "hp");
    start(&f);
    int i = wait_seen(&f, "POST", "/api/v1/persistentvolumes", NULL);
    json_t *pv = json_loads(f.seen[i].body, 0, NULL);
    assert_non_null(pv);
    char want[PATH_MAX];
    snprintf(want, sizeof(want), "%s/default-c1-pvc-u1", f.root);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(pv, "spec"), "hostPath"), "path")),
                        want);
    json_t *ann = json_object_get(json_object_get(pv, "metadata"), "annotations");
    assert_string_equal(json_string_value(json_object_get(ann, "hostpath.provisioner/on-delete")),
                        "delete");
    json_decref(pv);
    assert_true(exists(f.root, "default-c1-pvc-u1"));
    assert_true(exists(f.root, HP_JOURNAL_DIR "/records/pvc-u1"));
    fx_teardown(&f);
}

/* The Event POSTs with this reason. */
static int events_with(const struct fx *f, const char *reason)
{
    char frag[96];
    int n = 0;
    snprintf(frag, sizeof(frag), "\"reason\":\"%s\"", reason);
    for (int i = 0; i < f->nseen; i++)
        n += strcmp(f->seen[i].method, "POST") == 0 && strstr(f->seen[i].path, "/events") &&
             strstr(f->seen[i].body, frag);
    return n;
}

static void test_fast_volume_costs_two_writes(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.classes = CLASS("hp", "{}");
    f.claims = CLAIM("default", "c1", "u1", "hp");
    start(&f);
    wait_seen(&f, "POST", "/api/v1/namespaces/default/events", "ProvisioningSucceeded");
    fh_run_for(&f.loop, 700); /* past the Provisioning event's delay */
    /* The PV and one event: no Provisioning event for a volume made at once. */
    assert_int_equal(events_with(&f, "Provisioning"), 0);
    assert_int_equal(events_with(&f, "ProvisioningSucceeded"), 1);
    assert_int_equal(f.nseen, 2);
    fx_teardown(&f);
}

static void test_slow_volume_is_announced(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.pv_create_delay_ms = 1200;
    f.classes = CLASS("hp", "{}");
    f.claims = CLAIM("default", "c1", "u1", "hp");
    start(&f);
    int ann = wait_seen(&f, "POST", "/api/v1/namespaces/default/events", "\"Provisioning\"");
    int ok = wait_seen(&f, "POST", "/api/v1/namespaces/default/events", "ProvisioningSucceeded");
    assert_true(ann < ok);
    assert_true(strstr(f.seen[ann].body,
                       "External provisioner is provisioning volume for claim \\\"default/c1\\\""));
    assert_int_equal(events_with(&f, "Provisioning"), 1);
    fx_teardown(&f);
}

static void test_colliding_paths_get_one_volume(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    /* team-b/c-data and team/b-c-data render the same directory. */
    f.classes = CLASS("hp", "{\"pathPattern\":\"{{.PVC.Namespace}}-{{.PVC.Name}}\"}");
    f.claims = CLAIM("team-b", "c-data", "u1", "hp") "," CLAIM("team", "b-c-data", "u2", "hp");
    start(&f);
    wait_seen(&f, "POST", "/api/v1/persistentvolumes", NULL);
    wait_seen(&f, "POST", "/api/v1/namespaces/", "one directory, one owner");
    fh_run_for(&f.loop, 100);
    assert_int_equal(count(&f, "POST", "/api/v1/persistentvolumes"), 1);
    assert_true(exists(f.root, "team-b-c-data"));
    fx_teardown(&f);
}

/* ---- deletion ---- */

#define RELEASED_PV(name, path, extra_ann)                                                         \
    "{\"metadata\":{\"name\":\"" name "\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"  \
    "\"" PROV "\",\"hostPathProvisionerIdentity\":\"me\"" extra_ann "}},"                         \
    "\"spec\":{\"storageClassName\":\"hp\",\"persistentVolumeReclaimPolicy\":\"Delete\","        \
    "\"claimRef\":{\"namespace\":\"default\",\"name\":\"gone\",\"uid\":\"ug\"},"                   \
    "\"hostPath\":{\"path\":\"" path "\"}},\"status\":{\"phase\":\"Released\"}}"

static void provision_directly(const char *root, const char *rel, const char *pv)
{
    struct hp_fsop *op = hp_fsop_new(HP_FSOP_PROVISION, root);
    op->rec.pv = hp_xstrdup(pv);
    op->rec.path = hp_xstrdup(rel);
    op->rec.claim_uid = hp_xstrdup("ug");
    op->rec.identity = hp_xstrdup("me");
    op->create_root = 1;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    hp_fsop_free(op);
}

static void test_released_volume_with_record_is_deleted(void **state)
{
    struct fx f;
    char *vols;
    (void)state;
    fx_setup(&f);
    provision_directly(f.root, "vol", "pvc-ug");
    vols = hp_xasprintf("%s", RELEASED_PV("pvc-ug", "ROOT/vol", ",\"hostpath.provisioner/on-delete\":\"delete\""));
    /* the fixture's root, in place of ROOT */
    char *at = strstr(vols, "ROOT");
    char *full = hp_xasprintf("%.*s%s%s", (int)(at - vols), vols, f.root, at + 4);
    free(vols);
    f.volumes = full;
    f.classes = CLASS("hp", "{}");
    start(&f);
    wait_seen(&f, "DELETE", "/api/v1/persistentvolumes/pvc-ug", NULL);
    struct hp_record r;
    int rootfd = open(f.root, O_RDONLY | O_DIRECTORY);
    int jfd = hp_journal_open(rootfd, 0);
    char err[256];
    for (int i = 0; i < 200 && hp_journal_read(jfd, "pvc-ug", &r, err, sizeof(err)) == 0; i++) {
        hp_record_free(&r);
        fh_run_for(&f.loop, 10);
    }
    assert_int_equal(hp_journal_read(jfd, "pvc-ug", &r, err, sizeof(err)), -ENOENT);
    close(jfd);
    close(rootfd);
    assert_false(exists(f.root, "vol"));
    fx_teardown(&f);
    free(full);
}

static void test_released_volume_without_record_is_kept(void **state)
{
    struct fx f;
    char *vols, *at, *full, p[PATH_MAX];
    (void)state;
    fx_setup(&f);
    snprintf(p, sizeof(p), "%s/vol", f.root);
    assert_int_equal(mkdir(p, 0755), 0);
    vols = hp_xasprintf("%s", RELEASED_PV("pvc-ug", "ROOT/vol", ",\"hostpath.provisioner/on-delete\":\"delete\""));
    at = strstr(vols, "ROOT");
    full = hp_xasprintf("%.*s%s%s", (int)(at - vols), vols, f.root, at + 4);
    free(vols);
    f.volumes = full;
    f.pv_get_body = full; /* the server has it too: a missing record is the answer */
    f.classes = CLASS("hp", "{}");
    start(&f);
    wait_seen(&f, "POST", "/api/v1/namespaces/default/events", "no ownership journal");
    fh_run_for(&f.loop, 200);
    assert_int_equal(count(&f, "DELETE", "/api/v1/persistentvolumes"), 0);
    assert_true(exists(f.root, "vol"));
    fx_teardown(&f);
    free(full);
}

/* A released volume without a record that the API server no longer has (our cache lagged: a
 * replica that just became leader, another one released and deleted it a moment ago): checked
 * with the server, and no error, no event, nothing touched. Found by the full soak. */
static void test_stale_released_volume_is_no_error(void **state)
{
    struct fx f;
    char *vols, *at, *full, p[PATH_MAX];
    (void)state;
    fx_setup(&f);
    snprintf(p, sizeof(p), "%s/vol", f.root);
    assert_int_equal(mkdir(p, 0755), 0);
    vols = hp_xasprintf("%s", RELEASED_PV("pvc-ug", "ROOT/vol", ",\"hostpath.provisioner/on-delete\":\"delete\""));
    at = strstr(vols, "ROOT");
    full = hp_xasprintf("%.*s%s%s", (int)(at - vols), vols, f.root, at + 4);
    free(vols);
    f.volumes = full; /* GET answers 404 */
    f.classes = CLASS("hp", "{}");
    start(&f);
    wait_seen(&f, "GET", "/api/v1/persistentvolumes/pvc-ug", NULL);
    fh_run_for(&f.loop, 300);
    assert_int_equal(count(&f, "POST", "/api/v1/namespaces/default/events"), 0);
    assert_int_equal(count(&f, "DELETE", "/api/v1/persistentvolumes"), 0);
    assert_int_equal(count(&f, "GET", "/api/v1/persistentvolumes/pvc-ug"), 1); /* then gone */
    assert_true(exists(f.root, "vol"));
    fx_teardown(&f);
    free(full);
}

static void test_earlier_volume_kept_when_class_gone(void **state)
{
    struct fx f;
    char *vols, *at, *full, p[PATH_MAX];
    (void)state;
    fx_setup(&f);
    snprintf(p, sizeof(p), "%s/legacy", f.root);
    assert_int_equal(mkdir(f.root, 0755) == 0 || errno == EEXIST, 1);
    assert_int_equal(mkdir(p, 0755), 0);
    vols = hp_xasprintf("%s", RELEASED_PV("pvc-old", "ROOT/legacy", ""));
    at = strstr(vols, "ROOT");
    full = hp_xasprintf("%.*s%s%s", (int)(at - vols), vols, f.root, at + 4);
    free(vols);
    f.volumes = full; /* no class "hp" */
    start(&f);
    /* Recorded with retain, and said so; the PV object goes, the directory stays. */
    wait_seen(&f, "POST", "/api/v1/namespaces/default/events", "will be kept");
    wait_seen(&f, "DELETE", "/api/v1/persistentvolumes/pvc-old", NULL);
    assert_true(exists(f.root, "legacy"));
    struct hp_record r;
    int rootfd = open(f.root, O_RDONLY | O_DIRECTORY);
    int jfd = hp_journal_open(rootfd, 0);
    char err[256];
    assert_int_equal(hp_journal_read(jfd, "pvc-old", &r, err, sizeof(err)), 0);
    assert_int_equal(r.on_delete, HP_ON_DELETE_RETAIN);
    assert_int_equal(r.migrated, 1);
    hp_record_free(&r);
    close(jfd);
    close(rootfd);
    fx_teardown(&f);
    free(full);
}

/* An orphan record that does not name its claim (provision_directly writes none) is judged by
 * its PV alone: no request for a claim with an empty namespace and name. */
static void test_orphan_without_claim_name(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    provision_directly(f.root, "lost", "pvc-o");
    f.classes = CLASS("hp", "{}");
    start(&f);
    wait_seen(&f, "GET", "/api/v1/persistentvolumes/pvc-o", NULL);
    fh_run_for(&f.loop, 100);
    assert_int_equal(count(&f, "GET", "/api/v1/namespaces/"), 0);
    fx_teardown(&f);
}

/* --add-finalizer on a bound volume: the PV is read back and patched with its resourceVersion
 * and every finalizer it had, in order and as the server wrote them, plus ours. */
static void test_finalizer_patch_keeps_what_it_read(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    f.cfg.add_finalizer = 1;
    f.classes = CLASS("hp", "{}");
    f.volumes = "{\"metadata\":{\"name\":\"pvc-b\",\"annotations\":{"
                "\"pv.kubernetes.io/provisioned-by\":\"" PROV "\",\"hostPathProvisionerIdentity\":"
                "\"me\",\"hostpath.provisioner/on-delete\":\"delete\"}},\"spec\":{"
                "\"storageClassName\":\"hp\",\"persistentVolumeReclaimPolicy\":\"Delete\","
                "\"hostPath\":{\"path\":\"/elsewhere/b\"}},\"status\":{\"phase\":\"Bound\"}}";
    f.pv_get_body = "{\"metadata\":{\"name\":\"pvc-b\",\"resourceVersion\":\"77\","
                    "\"finalizers\":[\"kubernetes.io/pv-protection\",{\"odd\":1},\"x\\u00e9y\"]}}";
    start(&f);
    int i = wait_seen(&f, "PATCH", "/api/v1/persistentvolumes/pvc-b", NULL);
    const char *body = f.seen[i].body;
    assert_non_null(strstr(body, "\"x\\u00e9y\"")); /* copied as written */
    json_t *p = json_loads(body, 0, NULL);
    assert_non_null(p);
    json_t *meta = json_object_get(p, "metadata"), *fins = json_object_get(meta, "finalizers");
    assert_int_equal(json_object_size(p), 1);
    assert_int_equal(json_object_size(meta), 2);
    assert_string_equal(json_string_value(json_object_get(meta, "resourceVersion")), "77");
    assert_int_equal(json_array_size(fins), 4);
    assert_string_equal(json_string_value(json_array_get(fins, 0)), "kubernetes.io/pv-protection");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(fins, 1), "odd")), 1);
    assert_string_equal(json_string_value(json_array_get(fins, 2)), "x\xc3\xa9y");
    assert_string_equal(json_string_value(json_array_get(fins, 3)),
                        "external-provisioner.volume.kubernetes.io/finalizer");
    json_decref(p);
    fx_teardown(&f);
}

/* ---- lifecycle ---- */

/* The threadpool's threads, all held by jobs that wait for a semaphore: a filesystem request
 * queued meanwhile waits (it is neither started nor cancelled) for as long as a test needs. */
#define POOL_THREADS 4 /* UV_THREADPOOL_SIZE, set in main */

struct pool_block {
    uv_work_t w[POOL_THREADS];
    uv_sem_t go;
    int started, ended; /* started: by the workers, under mu; ended: on the loop */
    uv_mutex_t mu;
};

static void blocker_work(uv_work_t *w)
{
    struct pool_block *b = w->data;
    uv_mutex_lock(&b->mu);
    b->started++;
    uv_mutex_unlock(&b->mu);
    uv_sem_wait(&b->go);
}

static void blocker_after(uv_work_t *w, int status)
{
    struct pool_block *b = w->data;
    assert_int_equal(status, 0);
    b->ended++;
}

static void pool_block(struct pool_block *b, uv_loop_t *loop)
{
    memset(b, 0, sizeof(*b));
    assert_int_equal(uv_sem_init(&b->go, 0), 0);
    assert_int_equal(uv_mutex_init(&b->mu), 0);
    for (int i = 0; i < POOL_THREADS; i++) {
        b->w[i].data = b;
        assert_int_equal(uv_queue_work(loop, &b->w[i], blocker_work, blocker_after), 0);
    }
    int started = 0;
    for (int i = 0; i < 5000 && started < POOL_THREADS; i++) {
        uv_mutex_lock(&b->mu);
        started = b->started;
        uv_mutex_unlock(&b->mu);
        if (started < POOL_THREADS)
            usleep(1000);
    }
    assert_int_equal(started, POOL_THREADS);
}

static int pool_ended(void *p)
{
    return ((struct pool_block *)p)->ended == POOL_THREADS;
}

static void pool_release(struct pool_block *b, uv_loop_t *loop)
{
    for (int i = 0; i < POOL_THREADS; i++)
        uv_sem_post(&b->go);
    assert_true(fh_run_until_cb(loop, 5000, pool_ended, b));
    uv_sem_destroy(&b->go);
    uv_mutex_destroy(&b->mu);
}

static int fs_queued(void *p)
{
    return hp_hostpath_pending(((struct fx *)p)->hostpath) > 0;
}

static int fs_idle(void *p)
{
    return !fs_queued(p);
}

/* Stopped while a filesystem request of a volume's deletion still has to run (it finishes, as a
 * SIGTERM promises) and another volume's key waits for its retry: nothing is reconciled after the
 * stop, neither that key when its time comes nor anything else (the caches are closed by then: a
 * reconcile would read freed or missing objects). Found by CI: test_restart's SIGTERM during
 * removals crashed in the plain build and failed under ASan. */
/* The reflectors were never started. */
static void test_stop_before_start(void **state)
{
    struct fx f;
    (void)state;
    fx_setup(&f);
    fx_teardown(&f);
}

/* Stopped while a filesystem request of a volume's deletion still has to run (it finishes, as a
 * SIGTERM promises) and other volumes' keys wait for their retries: nothing is reconciled after
 * the stop, neither those keys when their time comes nor anything else (the caches are closed by
 * then: a reconcile would read freed or missing objects). Found by CI: test_restart's SIGTERM
 * during removals crashed the plain build and failed under ASan. */
#define OUR_PV(name, rv, path, phase)                                                              \
    "{\"metadata\":{\"name\":\"" name "\",\"resourceVersion\":\"" rv "\",\"annotations\":{"         \
    "\"pv.kubernetes.io/provisioned-by\":\"" PROV "\",\"hostPathProvisionerIdentity\":\"me\","       \
    "\"hostpath.provisioner/on-delete\":\"delete\"}},\"spec\":{\"storageClassName\":\"hp\","         \
    "\"persistentVolumeReclaimPolicy\":\"Delete\",\"claimRef\":{\"namespace\":\"default\","          \
    "\"name\":\"gone\",\"uid\":\"ug\"},\"hostPath\":{\"path\":\"" path "\"}},"                        \
    "\"status\":{\"phase\":\"" phase "\"}}"

static void test_stop_while_filesystem_work_runs(void **state)
{
    struct fx f;
    struct pool_block pool;
    (void)state;
    fx_setup(&f);
    /* Two bound volumes of ours whose finalizer cannot be added: their GETs fail and are
     * retried every few milliseconds. */
    f.cfg.add_finalizer = 1;
    f.pv_get_fails = 1;
    f.classes = CLASS("hp", "{}");
    provision_directly(f.root, "vol", "pvc-r");
    char *vols = hp_xasprintf(OUR_PV("pvc-b", "5", "%s/b", "Bound") "," OUR_PV("pvc-r", "6", "%s/vol",
                                                                                     "Bound"),
                              f.root, f.root);
    f.volumes = vols;
    start(&f);
    wait_seen(&f, "GET", "/api/v1/persistentvolumes/pvc-r", NULL);
    assert_non_null(f.pv_watch);
    /* The journal's lists written after the first read (ctl_scan.c) are done: what is queued
     * below is the removal. */
    assert_true(fh_run_until_cb(&f.loop, 5000, fs_idle, &f));

    /* pvc-r is released while the threadpool is busy: its removal is queued. */
    pool_block(&pool, &f.loop);
    char *ev = hp_xasprintf("{\"type\":\"MODIFIED\",\"object\":" OUR_PV("pvc-r", "11", "%s/vol",
                                                                         "Released") "}\n",
                            f.root);
    fh_chunk_str(f.pv_watch, 0, ev);
    fh_flush(f.pv_watch);
    free(ev);
    assert_true(fh_run_until_cb(&f.loop, 5000, fs_queued, &f));

    /* Stop now. The removal is still queued; pvc-b's retry comes due within milliseconds. */
    int gets = count(&f, "GET", "/api/v1/persistentvolumes/");
    hp_controller_close(f.ctl, on_flag, &f.ctl_closed);
    f.ctl_closing = 1;
    /* Leases lost and won again meanwhile (main forwards them until the close completes). */
    hp_controller_set_leader(f.ctl, 0);
    hp_controller_set_leader(f.ctl, 1);
    hp_controller_set_node_lease(f.ctl, 0);
    hp_controller_set_node_lease(f.ctl, 1);
    fh_run_for(&f.loop, 300);
    assert_int_equal(f.ctl_closed, 0); /* waits for the removal */
    assert_int_equal(count(&f, "GET", "/api/v1/persistentvolumes/"), gets);

    /* The removal runs to its end, then the controller closes; nothing else was started. */
    pool_release(&pool, &f.loop);
    assert_true(fh_run_until(&f.loop, &f.ctl_closed, 5000));
    assert_false(exists(f.root, "vol"));
    assert_int_equal(count(&f, "GET", "/api/v1/persistentvolumes/"), gets);
    assert_int_equal(count(&f, "DELETE", "/api/v1/persistentvolumes/"), 0);
    fx_teardown(&f);
    free(vols);
}

/* ------------------------------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_provisions_and_records),
        cmocka_unit_test(test_fast_volume_costs_two_writes),
        cmocka_unit_test(test_slow_volume_is_announced),
        cmocka_unit_test(test_colliding_paths_get_one_volume),
        cmocka_unit_test(test_released_volume_with_record_is_deleted),
        cmocka_unit_test(test_released_volume_without_record_is_kept),
        cmocka_unit_test(test_stale_released_volume_is_no_error),
        cmocka_unit_test(test_earlier_volume_kept_when_class_gone),
        cmocka_unit_test(test_orphan_without_claim_name),
        cmocka_unit_test(test_finalizer_patch_keeps_what_it_read),
        cmocka_unit_test(test_stop_before_start),
        cmocka_unit_test(test_stop_while_filesystem_work_runs),
    };
    int rc;

    /* Before the threadpool starts: test_stop_while_filesystem_work_runs holds every thread. */
    (void)setenv("UV_THREADPOOL_SIZE", "4", 1);
    if (getenv("HP_TEST_V"))
        hp_log_init(atoi(getenv("HP_TEST_V")), HP_LOG_TEXT);
    hp_metrics_init();
    (void)snprintf(base_dir, sizeof(base_dir), "/tmp/hp-unit-controller-XXXXXX");
    if (!mkdtemp(base_dir)) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests_name("controller", tests, NULL, NULL);
    (void)nftw(base_dir, rm_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    hp_metrics_free();
    return rc;
}
