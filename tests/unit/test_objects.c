/* Unit tests for objects.c: claim/volume/class decoding, packed maps and the PV builder. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h> /* an independent reader of what hp_pv_build writes */

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/json.h"
#include "hostpath/objects.h"

/* One reader for every case, as the watch keeps one: decoders must not depend on fresh tokens. */
static struct hp_json reader;

static const struct hp_json *parse(const char *text)
{
    if (hp_json_parse(&reader, text, strlen(text)) != 0)
        fail_msg("bad test JSON: %s at %zu", reader.err, reader.err_pos);
    return &reader;
}

static struct hp_claim *claim_from(const char *text)
{
    return hp_claim_decode(parse(text), 0);
}

static struct hp_volume *volume_from(const char *text)
{
    return hp_volume_decode(parse(text), 0);
}

static struct hp_class *class_from(const char *text)
{
    return hp_class_decode(parse(text), 0);
}

/* A claim as the API server sends it in a watch event (kubectl apply, WaitForFirstConsumer). */
static const char full_claim[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
    "\"annotations\":{"
    "\"kubectl.kubernetes.io/last-applied-configuration\":\"{\\\"apiVersion\\\":\\\"v1\\\"}\\n\","
    "\"volume.beta.kubernetes.io/storage-provisioner\":\"beta.example/hostpath\","
    "\"volume.kubernetes.io/storage-provisioner\":\"hostpath-provisioner.io\","
    "\"volume.kubernetes.io/selected-node\":\"node-a\","
    "\"volume.alpha.kubernetes.io/selected-node\":\"node-old\","
    "\"example.com/dir\":\"data\"},"
    "\"creationTimestamp\":\"2024-05-01T10:00:00Z\","
    "\"finalizers\":[\"kubernetes.io/pvc-protection\"],"
    "\"labels\":{\"app\":\"web\",\"tier\":\"db\"},"
    "\"name\":\"data-web-0\",\"namespace\":\"shop\","
    "\"resourceVersion\":\"123456\",\"uid\":\"0c5e2d4a-1b1f-4c9e-9a8e-7d1f2e3a4b5c\"},"
    "\"spec\":{\"accessModes\":[\"ReadWriteMany\",\"ReadWriteOnce\"],"
    "\"resources\":{\"requests\":{\"storage\":\"2Gi\"}},"
    "\"storageClassName\":\"hostpath\",\"volumeMode\":\"Filesystem\"},"
    "\"status\":{\"phase\":\"Pending\"}}";

static void test_claim_full(void **state)
{
    struct hp_claim *c = claim_from(full_claim);
    (void)state;

    assert_non_null(c);
    assert_string_equal(c->key, "shop/data-web-0");
    assert_string_equal(c->namespace_, "shop");
    assert_string_equal(c->name, "data-web-0");
    assert_string_equal(c->uid, "0c5e2d4a-1b1f-4c9e-9a8e-7d1f2e3a4b5c");
    assert_string_equal(c->resource_version, "123456");
    assert_string_equal(c->volume_name, "");
    assert_string_equal(c->class_name, "hostpath");
    assert_string_equal(c->provisioner, "hostpath-provisioner.io");
    assert_string_equal(c->selected_node, "node-a");
    assert_string_equal(c->request, "2Gi");
    assert_int_equal(c->access_modes, HP_ACCESS_RWO | HP_ACCESS_RWX);
    assert_int_equal(c->block, 0);
    assert_int_equal(c->deleting, 0);
    assert_string_equal(hp_packed_get(c->annotations, "example.com/dir"), "data");
    assert_string_equal(hp_packed_get(c->annotations, HP_ANN_ALPHA_SELECTED_NODE), "node-old");
    assert_null(hp_packed_get(c->annotations, "kubectl.kubernetes.io/last-applied-configuration"));
    assert_string_equal(hp_packed_get(c->labels, "app"), "web");
    assert_string_equal(hp_packed_get(c->labels, "tier"), "db");
    assert_null(hp_packed_get(c->labels, "web"));
    free(c);
}

static void test_claim_absent_fields(void **state)
{
    struct hp_claim *c = claim_from("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\"}}");
    (void)state;

    assert_non_null(c);
    assert_string_equal(c->key, "ns/n");
    assert_string_equal(c->uid, "");
    assert_string_equal(c->resource_version, "");
    assert_string_equal(c->volume_name, "");
    assert_null(c->class_name);
    assert_null(c->provisioner);
    assert_null(c->selected_node);
    assert_string_equal(c->request, "");
    assert_string_equal(c->annotations, "");
    assert_string_equal(c->labels, "");
    assert_int_equal(c->access_modes, 0);
    assert_int_equal(c->block, 0);
    assert_int_equal(c->deleting, 0);
    free(c);
}

static void test_claim_bound_block_deleting(void **state)
{
    struct hp_claim *c = claim_from(
        "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\","
        "\"deletionTimestamp\":\"2024-05-01T10:00:00Z\",\"deletionGracePeriodSeconds\":0},"
        "\"spec\":{\"volumeName\":\"pvc-1\",\"volumeMode\":\"Block\","
        "\"accessModes\":[\"ReadOnlyMany\",\"ReadWriteOncePod\",\"Bogus\"]}}");
    (void)state;

    assert_non_null(c);
    assert_string_equal(c->volume_name, "pvc-1");
    assert_int_equal(c->block, 1);
    assert_int_equal(c->deleting, 1);
    assert_int_equal(c->access_modes, HP_ACCESS_ROX | HP_ACCESS_RWOP);
    free(c);
}

/* class_name: beta annotation (even empty) wins, then spec.storageClassName, else NULL. */
static void test_claim_class_precedence(void **state)
{
    static const struct {
        const char *ann; /* JSON fragment inside "annotations":{...} */
        const char *spec;
        const char *want; /* NULL = NULL */
    } cases[] = {
        {"\"volume.beta.kubernetes.io/storage-class\":\"old\"", "\"storageClassName\":\"new\"",
         "old"},
        {"\"volume.beta.kubernetes.io/storage-class\":\"\"", "\"storageClassName\":\"new\"", ""},
        {"", "\"storageClassName\":\"new\"", "new"},
        {"", "\"storageClassName\":\"\"", ""},
        {"", "\"storageClassName\":null", NULL},
        {"", "\"storageClassName\":7", NULL},
        {"", "", NULL},
        {"\"volume.beta.kubernetes.io/storage-class\":\"old\"", "", "old"},
    };
    size_t i;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        char *text = hp_xasprintf("{\"metadata\":{\"namespace\":\"a\",\"name\":\"b\","
                                  "\"annotations\":{%s}},\"spec\":{%s}}",
                                  cases[i].ann, cases[i].spec);
        struct hp_claim *c = claim_from(text);

        assert_non_null(c);
        if (cases[i].want)
            assert_string_equal(c->class_name, cases[i].want);
        else
            assert_null(c->class_name);
        free(c);
        free(text);
    }
}

static void test_claim_annotation_precedence(void **state)
{
    static const struct {
        const char *ann;
        const char *provisioner;
        const char *node;
    } cases[] = {
        {"\"volume.kubernetes.io/storage-provisioner\":\"ga\","
         "\"volume.beta.kubernetes.io/storage-provisioner\":\"beta\"",
         "ga", NULL},
        {"\"volume.beta.kubernetes.io/storage-provisioner\":\"beta\"", "beta", NULL},
        {"\"volume.kubernetes.io/storage-provisioner\":\"\","
         "\"volume.beta.kubernetes.io/storage-provisioner\":\"beta\"",
         "", NULL},
        {"\"volume.kubernetes.io/selected-node\":\"n1\","
         "\"volume.alpha.kubernetes.io/selected-node\":\"n0\"",
         NULL, "n1"},
        {"\"volume.alpha.kubernetes.io/selected-node\":\"n0\"", NULL, "n0"},
        {"\"volume.kubernetes.io/selected-node\":\"\"", NULL, ""},
        {"\"volume.kubernetes.io/selected-node\":5", NULL, NULL},
    };
    size_t i;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        char *text =
            hp_xasprintf("{\"metadata\":{\"namespace\":\"a\",\"name\":\"b\",\"annotations\":{%s}}}",
                         cases[i].ann);
        struct hp_claim *c = claim_from(text);

        assert_non_null(c);
        if (cases[i].provisioner)
            assert_string_equal(c->provisioner, cases[i].provisioner);
        else
            assert_null(c->provisioner);
        if (cases[i].node)
            assert_string_equal(c->selected_node, cases[i].node);
        else
            assert_null(c->selected_node);
        free(c);
        free(text);
    }
}

static void test_claim_malformed(void **state)
{
    static const char *const bad[] = {
        "[]",
        "\"claim\"",
        "{}",
        "{\"metadata\":[]}",
        "{\"metadata\":{\"name\":\"n\"}}",
        "{\"metadata\":{\"namespace\":\"ns\"}}",
        "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"\"}}",
        "{\"metadata\":{\"namespace\":\"\",\"name\":\"n\"}}",
        "{\"metadata\":{\"namespace\":\"ns\",\"name\":5}}",
        "{\"metadata\":{\"namespace\":null,\"name\":\"n\"}}",
    };
    size_t i;
    (void)state;

    assert_null(hp_claim_decode(NULL, 0));
    assert_null(hp_claim_decode(parse(full_claim), -1));
    assert_null(hp_claim_decode(parse(full_claim), 2)); /* a string token, not an object */
    assert_null(hp_volume_decode(NULL, 0));
    assert_null(hp_class_decode(parse("[]"), 0));
    for (i = 0; i < HP_ARRAY_SIZE(bad); i++)
        assert_null(claim_from(bad[i]));
}

static void test_claim_wrong_types_tolerated(void **state)
{
    struct hp_claim *c = claim_from(
        "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\",\"uid\":17,"
        "\"annotations\":[\"x\"],\"labels\":{\"a\":\"1\",\"b\":2,\"\":\"empty\",\"c\":null},"
        "\"deletionTimestamp\":null},"
        "\"spec\":{\"accessModes\":\"ReadWriteOnce\",\"resources\":{\"requests\":{\"storage\":1}},"
        "\"volumeName\":{},\"volumeMode\":true}}");
    (void)state;

    assert_non_null(c);
    assert_string_equal(c->uid, "");
    assert_string_equal(c->annotations, "");
    assert_string_equal(hp_packed_get(c->labels, "a"), "1");
    assert_null(hp_packed_get(c->labels, "b"));
    assert_null(hp_packed_get(c->labels, "c"));
    /* only "a" survived: the map ends right after it */
    assert_string_equal(hp_packed_next(hp_packed_next(c->labels)), "");
    assert_int_equal(c->access_modes, 0);
    assert_string_equal(c->request, "");
    assert_string_equal(c->volume_name, "");
    assert_int_equal(c->block, 0);
    assert_int_equal(c->deleting, 0);
    free(c);

    c = claim_from("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\"},\"spec\":[1,2]}");
    assert_non_null(c);
    assert_null(c->class_name);
    free(c);
}

/* A huge last-applied annotation must not be copied into the block. */
static void test_claim_last_applied_skipped(void **state)
{
    struct hp_buf big;
    struct hp_claim *c;
    char *text;
    size_t i;
    (void)state;

    hp_buf_init(&big, 0);
    for (i = 0; i < 4096; i++)
        assert_int_equal(hp_buf_appends(&big, "xxxxxxxxxxxxxxxx"), 0);
    text = hp_xasprintf("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\",\"annotations\":{"
                        "\"kubectl.kubernetes.io/last-applied-configuration\":\"%s\","
                        "\"keep\":\"me\"}}}",
                        big.data);
    c = claim_from(text);
    assert_non_null(c);
    assert_null(hp_packed_get(c->annotations, "kubectl.kubernetes.io/last-applied-configuration"));
    assert_string_equal(hp_packed_get(c->annotations, "keep"), "me");
    /* Everything the claim holds lives within a few hundred bytes of the struct. */
    assert_true(c->annotations > (const char *)c &&
                c->annotations < (const char *)c + sizeof(*c) + 256);
    free(c);
    free(text);
    hp_buf_free(&big);
}

static const char full_volume[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{"
    "\"annotations\":{\"hostPathProvisionerIdentity\":\"node-a\","
    "\"pv.kubernetes.io/provisioned-by\":\"hostpath-provisioner.io\"},"
    "\"finalizers\":[\"kubernetes.io/pv-protection\","
    "\"external-provisioner.volume.kubernetes.io/finalizer\"],"
    "\"name\":\"pvc-0c5e\",\"resourceVersion\":\"777\",\"uid\":\"x\","
    "\"deletionTimestamp\":\"2024-05-01T10:00:00Z\"},"
    "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"capacity\":{\"storage\":\"2Gi\"},"
    "\"claimRef\":{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"name\":\"data\","
    "\"namespace\":\"shop\",\"resourceVersion\":\"1\",\"uid\":\"0c5e\"},"
    "\"hostPath\":{\"path\":\"/var/lib/hp/shop-data-pvc-0c5e\",\"type\":\"DirectoryOrCreate\"},"
    "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"hostpath\","
    "\"volumeMode\":\"Filesystem\"},"
    "\"status\":{\"phase\":\"Released\"}}";

static void test_volume_full(void **state)
{
    struct hp_volume *v = volume_from(full_volume);
    (void)state;

    assert_non_null(v);
    assert_string_equal(v->key, "pvc-0c5e");
    assert_string_equal(v->name, "pvc-0c5e");
    assert_string_equal(v->resource_version, "777");
    assert_string_equal(v->phase, "Released");
    assert_string_equal(v->provisioned_by, "hostpath-provisioner.io");
    assert_string_equal(v->identity, "node-a");
    assert_string_equal(v->class_name, "hostpath");
    assert_string_equal(v->claim_namespace, "shop");
    assert_string_equal(v->claim_name, "data");
    assert_string_equal(v->claim_uid, "0c5e");
    assert_string_equal(v->path, "/var/lib/hp/shop-data-pvc-0c5e");
    assert_int_equal(v->reclaim, HP_RECLAIM_DELETE);
    assert_int_equal(v->our_finalizer, 1);
    assert_int_equal(v->deleting, 1);
    free(v);
}

static void test_volume_absent_and_malformed(void **state)
{
    static const struct {
        const char *reclaim;
        enum hp_reclaim want;
    } reclaims[] = {
        {"\"Retain\"", HP_RECLAIM_RETAIN}, {"\"Recycle\"", HP_RECLAIM_RECYCLE},
        {"\"delete\"", HP_RECLAIM_UNSET},  {"3", HP_RECLAIM_UNSET},
        {"\"\"", HP_RECLAIM_UNSET},
    };
    struct hp_volume *v = volume_from("{\"metadata\":{\"name\":\"pv1\","
                                      "\"finalizers\":[\"kubernetes.io/pv-protection\",4]}}");
    size_t i;
    (void)state;

    assert_non_null(v);
    assert_string_equal(v->key, "pv1");
    assert_string_equal(v->phase, "");
    assert_string_equal(v->provisioned_by, "");
    assert_string_equal(v->identity, "");
    assert_string_equal(v->class_name, "");
    assert_string_equal(v->claim_namespace, "");
    assert_string_equal(v->claim_name, "");
    assert_string_equal(v->claim_uid, "");
    assert_string_equal(v->path, "");
    assert_int_equal(v->reclaim, HP_RECLAIM_UNSET);
    assert_int_equal(v->our_finalizer, 0);
    assert_int_equal(v->deleting, 0);
    free(v);

    for (i = 0; i < HP_ARRAY_SIZE(reclaims); i++) {
        char *text = hp_xasprintf("{\"metadata\":{\"name\":\"pv\"},"
                                  "\"spec\":{\"persistentVolumeReclaimPolicy\":%s}}",
                                  reclaims[i].reclaim);
        v = volume_from(text);
        assert_non_null(v);
        assert_int_equal(v->reclaim, reclaims[i].want);
        free(v);
        free(text);
    }

    assert_null(volume_from("{\"metadata\":{\"namespace\":\"x\"}}"));
    assert_null(volume_from("{\"metadata\":{\"name\":\"\"}}"));
    assert_null(volume_from("{\"spec\":{}}"));
    v = volume_from("{\"metadata\":{\"name\":\"pv\",\"annotations\":7},\"spec\":{\"claimRef\":[],"
                    "\"hostPath\":\"/x\"},\"status\":\"Bound\"}");
    assert_non_null(v);
    assert_string_equal(v->path, "");
    assert_string_equal(v->phase, "");
    assert_string_equal(v->claim_name, "");
    free(v);
}

static void test_class(void **state)
{
    struct hp_class *k = class_from(
        "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"StorageClass\","
        "\"metadata\":{\"name\":\"hostpath\",\"resourceVersion\":\"42\"},"
        "\"provisioner\":\"hostpath-provisioner.io\",\"reclaimPolicy\":\"Retain\","
        "\"volumeBindingMode\":\"WaitForFirstConsumer\","
        "\"parameters\":{\"pathPattern\":\"{{.PVC.Namespace}}/{{.PVC.Name}}\",\"mode\":\"0750\"},"
        "\"mountOptions\":[\"noatime\",\"\",5,\"nodev\"]}");
    const char *p;
    (void)state;

    assert_non_null(k);
    assert_string_equal(k->key, "hostpath");
    assert_string_equal(k->name, "hostpath");
    assert_string_equal(k->resource_version, "42");
    assert_string_equal(k->provisioner, "hostpath-provisioner.io");
    assert_int_equal(k->reclaim, HP_RECLAIM_RETAIN);
    assert_int_equal(k->wait_for_first_consumer, 1);
    assert_string_equal(hp_packed_get(k->parameters, "pathPattern"),
                        "{{.PVC.Namespace}}/{{.PVC.Name}}");
    assert_string_equal(hp_packed_get(k->parameters, "mode"), "0750");
    p = k->mount_options;
    assert_string_equal(p, "noatime");
    p = hp_packed_next(p);
    assert_string_equal(p, "nodev");
    p = hp_packed_next(p);
    assert_string_equal(p, "");
    free(k);

    k = class_from("{\"metadata\":{\"name\":\"plain\"},\"volumeBindingMode\":\"Immediate\"}");
    assert_non_null(k);
    assert_string_equal(k->provisioner, "");
    assert_string_equal(k->resource_version, "");
    assert_int_equal(k->reclaim, HP_RECLAIM_UNSET);
    assert_int_equal(k->wait_for_first_consumer, 0);
    assert_string_equal(k->parameters, "");
    assert_string_equal(k->mount_options, "");
    free(k);

    assert_null(class_from("{\"metadata\":{}}"));
    assert_null(class_from("{\"provisioner\":\"x\"}"));
}

static void test_packed(void **state)
{
    static const char map[] = "a\0b\0b\0c\0empty\0\0last\0z\0";
    static const struct {
        const char *key;
        const char *want;
    } cases[] = {
        {"a", "b"}, {"b", "c"}, {"empty", ""}, {"last", "z"}, {"c", NULL}, {"", NULL}, {"z", NULL},
    };
    static const char list[] = "x\0yy\0\0";
    const char *p;
    size_t i, n = 0;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        const char *got = hp_packed_get(map, cases[i].key);
        if (cases[i].want)
            assert_string_equal(got, cases[i].want);
        else
            assert_null(got);
    }
    assert_null(hp_packed_get(NULL, "a"));
    assert_null(hp_packed_get("", "a"));
    for (p = list; *p; p = hp_packed_next(p))
        n++;
    assert_int_equal(n, 2);
}

static struct hp_claim *pv_claim(void)
{
    struct hp_claim *c =
        claim_from("{\"metadata\":{\"namespace\":\"shop\",\"name\":\"data\",\"uid\":\"u-1\","
                   "\"resourceVersion\":\"99\"},\"spec\":{\"storageClassName\":\"hostpath\","
                   "\"accessModes\":[\"ReadWriteOncePod\",\"ReadWriteMany\",\"ReadOnlyMany\","
                   "\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"5Gi\"}}}}");

    assert_non_null(c);
    return c;
}

static const char *sget(json_t *obj, const char *path)
{
    /* dotted path lookup of a string, e.g. "spec.hostPath.path" */
    char buf[128];
    const char *dot;
    json_t *cur = obj;

    for (;;) {
        dot = strchr(path, '.');
        if (!dot)
            break;
        snprintf(buf, sizeof(buf), "%.*s", (int)(dot - path), path);
        cur = json_object_get(cur, buf);
        path = dot + 1;
    }
    return json_string_value(json_object_get(cur, path));
}

/* hp_pv_build's text, read back with jansson (a failure if it is not JSON). */
static json_t *build_read(const struct hp_pv_spec *sp)
{
    char *text = hp_pv_build(sp);
    json_error_t err;
    json_t *pv;

    if (!text)
        return NULL;
    pv = json_loads(text, 0, &err);
    if (!pv)
        fail_msg("hp_pv_build wrote invalid JSON: %s: %s", err.text, text);
    assert_null(strchr(text, '\n')); /* compact */
    free(text);
    return pv;
}

static void test_pv_build(void **state)
{
    static const struct {
        const char *node;
        enum hp_reclaim reclaim;
        int add_finalizer;
        int mount_options;
        int want_finalizer;
        const char *want_reclaim;
    } cases[] = {
        {"node-a", HP_RECLAIM_DELETE, 1, 1, 1, "Delete"},
        {NULL, HP_RECLAIM_DELETE, 0, 0, 0, "Delete"},
        {"", HP_RECLAIM_RETAIN, 1, 0, 0, "Retain"},
        {NULL, HP_RECLAIM_UNSET, 1, 1, 1, "Delete"},
    };
    struct hp_claim *c = pv_claim();
    struct hp_class *with_opts = class_from(
        "{\"metadata\":{\"name\":\"hostpath\"},\"mountOptions\":[\"noatime\",\"nodev\"]}");
    struct hp_class *no_opts = class_from("{\"metadata\":{\"name\":\"hostpath\"}}");
    size_t i;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        struct hp_pv_spec sp = {
            .name = "pvc-u-1",
            .claim = c,
            .class_name = "hostpath",
            .mount_options = (cases[i].mount_options ? with_opts : no_opts)->mount_options,
            .provisioner = "hostpath-provisioner.io",
            .identity = "node-a",
            .path = "/var/lib/hp/shop-data-pvc-u-1",
            .node = cases[i].node,
            .reclaim = cases[i].reclaim,
            .add_finalizer = cases[i].add_finalizer,
        };
        json_t *pv = build_read(&sp), *spec, *modes, *ref, *fin, *opts, *aff;

        assert_non_null(pv);
        assert_string_equal(sget(pv, "apiVersion"), "v1");
        assert_string_equal(sget(pv, "kind"), "PersistentVolume");
        assert_string_equal(sget(pv, "metadata.name"), "pvc-u-1");
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(json_object_get(pv, "metadata"), "annotations"),
                                HP_ANN_PROVISIONED_BY)),
                            "hostpath-provisioner.io");
        assert_string_equal(sget(pv, "metadata.annotations.hostPathProvisionerIdentity"), "node-a");
        assert_int_equal(json_object_size(json_object_get(pv, "metadata")),
                         cases[i].want_finalizer ? 4 : 3);
        /* Labelled with the provisioner, and with the node when there is one (the selector a
         * node instance watches its PVs by). */
        json_t *labels = json_object_get(json_object_get(pv, "metadata"), "labels");
        assert_string_equal(json_string_value(json_object_get(labels, HP_LABEL_PROVISIONER)),
                            "hostpath-provisioner.io");
        if (cases[i].node && *cases[i].node) {
            assert_int_equal(json_object_size(labels), 2);
            assert_string_equal(json_string_value(json_object_get(labels, HP_LABEL_NODE)),
                                cases[i].node);
        } else {
            assert_int_equal(json_object_size(labels), 1);
        }
        fin = json_object_get(json_object_get(pv, "metadata"), "finalizers");
        if (cases[i].want_finalizer) {
            assert_int_equal(json_array_size(fin), 1);
            assert_string_equal(json_string_value(json_array_get(fin, 0)), HP_FINALIZER);
        } else {
            assert_null(fin);
        }

        spec = json_object_get(pv, "spec");
        ref = json_object_get(spec, "claimRef");
        assert_int_equal(json_object_size(ref), 6);
        assert_string_equal(sget(ref, "kind"), "PersistentVolumeClaim");
        assert_string_equal(sget(ref, "apiVersion"), "v1");
        assert_string_equal(sget(ref, "namespace"), "shop");
        assert_string_equal(sget(ref, "name"), "data");
        assert_string_equal(sget(ref, "uid"), "u-1");
        assert_string_equal(sget(ref, "resourceVersion"), "99");
        assert_string_equal(sget(spec, "capacity.storage"), "5Gi");
        modes = json_object_get(spec, "accessModes");
        assert_int_equal(json_array_size(modes), 4);
        assert_string_equal(json_string_value(json_array_get(modes, 0)), "ReadWriteOnce");
        assert_string_equal(json_string_value(json_array_get(modes, 1)), "ReadOnlyMany");
        assert_string_equal(json_string_value(json_array_get(modes, 2)), "ReadWriteMany");
        assert_string_equal(json_string_value(json_array_get(modes, 3)), "ReadWriteOncePod");
        assert_string_equal(sget(spec, "storageClassName"), "hostpath");
        assert_string_equal(sget(spec, "persistentVolumeReclaimPolicy"), cases[i].want_reclaim);
        assert_string_equal(sget(spec, "volumeMode"), "Filesystem");
        assert_string_equal(sget(spec, "hostPath.path"), "/var/lib/hp/shop-data-pvc-u-1");
        assert_string_equal(sget(spec, "hostPath.type"), "DirectoryOrCreate");
        opts = json_object_get(spec, "mountOptions");
        if (cases[i].mount_options) {
            assert_int_equal(json_array_size(opts), 2);
            assert_string_equal(json_string_value(json_array_get(opts, 0)), "noatime");
            assert_string_equal(json_string_value(json_array_get(opts, 1)), "nodev");
        } else {
            assert_null(opts);
        }
        aff = json_object_get(spec, "nodeAffinity");
        if (cases[i].node && *cases[i].node) {
            json_t *terms = json_object_get(json_object_get(aff, "required"), "nodeSelectorTerms");
            json_t *exprs, *expr, *values;
            assert_int_equal(json_array_size(terms), 1);
            exprs = json_object_get(json_array_get(terms, 0), "matchExpressions");
            assert_int_equal(json_array_size(exprs), 1);
            expr = json_array_get(exprs, 0);
            assert_string_equal(sget(expr, "key"), "kubernetes.io/hostname");
            assert_string_equal(sget(expr, "operator"), "In");
            values = json_object_get(expr, "values");
            assert_int_equal(json_array_size(values), 1);
            assert_string_equal(json_string_value(json_array_get(values, 0)), cases[i].node);
        } else {
            assert_null(aff);
        }
        json_decref(pv);
    }
    free(with_opts);
    free(no_opts);
    free(c);
}

static void test_pv_build_edges(void **state)
{
    struct hp_claim *c =
        claim_from("{\"metadata\":{\"namespace\":\"shop\",\"name\":\"data\",\"uid\":\"u-1\"},"
                   "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"]}}");
    struct hp_class *k = class_from("{\"metadata\":{\"name\":\"from-class\"}}");
    struct hp_pv_spec sp = {.name = "pvc-u-1",
                            .claim = c,
                            .class_name = k->name,
                            .provisioner = "p",
                            .identity = "i",
                            .path = "/x",
                            .reclaim = HP_RECLAIM_DELETE};
    json_t *pv;
    (void)state;

    /* no resourceVersion on the claim: claimRef omits it; class name from the class */
    pv = build_read(&sp);
    assert_non_null(pv);
    assert_null(json_object_get(json_object_get(json_object_get(pv, "spec"), "claimRef"),
                                "resourceVersion"));
    assert_string_equal(sget(pv, "spec.storageClassName"), "from-class");
    json_decref(pv);

    sp.class_name = NULL; /* neither: no storageClassName at all */
    pv = build_read(&sp);
    assert_non_null(pv);
    assert_null(json_object_get(json_object_get(pv, "spec"), "storageClassName"));
    json_decref(pv);

    sp.path = "/bad/\xff\xfe"; /* not UTF-8 */
    assert_null(hp_pv_build(&sp));
    sp.path = NULL;
    assert_null(hp_pv_build(&sp));
    sp.path = "/x";
    sp.claim = NULL;
    assert_null(hp_pv_build(&sp));
    free(k);
    free(c);
}

/* The kinds of PV: hostPath or local, node affinity on kubernetes.io/hostname or on a class's
 * nodeAffinityKey; read back by hp_volume_decode, which must still know the node. */
static void test_pv_build_kinds(void **state)
{
    static const struct {
        const char *node, *key, *value;
        int local;
        int ok;
        const char *want_key, *want_value; /* NULL: no node affinity */
        const char *want_ann;              /* local.path.provisioner/selected-node, or NULL */
    } cases[] = {
        {"node-a", NULL, NULL, 0, 1, "kubernetes.io/hostname", "node-a", NULL},
        {"node-a", NULL, NULL, 1, 1, "kubernetes.io/hostname", "node-a", NULL},
        {NULL, NULL, NULL, 0, 1, NULL, NULL, NULL},
        /* nodeAffinityKey: its pod-with-custom-node-affinity-key fixture */
        {"node-a", "test.example.com/stable-id", "my-stable-node", 0, 1,
         "test.example.com/stable-id", "my-stable-node", "node-a"},
        {"node-a", "test.example.com/stable-id", "my-stable-node", 1, 1,
         "test.example.com/stable-id", "my-stable-node", "node-a"},
        /* the hostname label, when it is not the node's name */
        {"node-a", "kubernetes.io/hostname", "host-a.example", 0, 1, "kubernetes.io/hostname",
         "host-a.example", "node-a"},
        {"node-a", "kubernetes.io/hostname", "node-a", 0, 1, "kubernetes.io/hostname", "node-a",
         NULL},
        {"node-a", "zone", NULL, 0, 1, "zone", "node-a", "node-a"},
        /* refused: a local PV needs node affinity; an affinity needs a node; empty strings */
        {NULL, NULL, NULL, 1, 0, NULL, NULL, NULL},
        {"", NULL, NULL, 1, 0, NULL, NULL, NULL},
        {NULL, "zone", "z1", 0, 0, NULL, NULL, NULL},
        {NULL, NULL, "z1", 0, 0, NULL, NULL, NULL},
        {"node-a", "", "z1", 0, 0, NULL, NULL, NULL},
        {"node-a", "zone", "", 0, 0, NULL, NULL, NULL},
        {"node-a", "zone", "\xff", 0, 0, NULL, NULL, NULL},
        {"node-a", "\xc3", "z1", 0, 0, NULL, NULL, NULL},
    };
    struct hp_claim *c = pv_claim();
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        struct hp_pv_spec sp = {.name = "pvc-u-1", .claim = c, .class_name = "local-path",
                                .provisioner = "rancher.io/local-path", .identity = "node-a",
                                .path = "/opt/lpp/shop/data", .node = cases[i].node,
                                .affinity_key = cases[i].key, .affinity_value = cases[i].value,
                                .local = cases[i].local, .reclaim = HP_RECLAIM_DELETE};
        char *text = hp_pv_build(&sp);
        if (!cases[i].ok) {
            if (text)
                fail_msg("case %zu: built %s", i, text);
            continue;
        }
        if (!text)
            fail_msg("case %zu: not built", i);
        json_t *pv = json_loads(text, 0, NULL), *spec = json_object_get(pv, "spec");
        assert_non_null(pv);
        if (cases[i].local) {
            assert_null(json_object_get(spec, "hostPath"));
            assert_int_equal(json_object_size(json_object_get(spec, "local")), 1);
            assert_string_equal(sget(spec, "local.path"), "/opt/lpp/shop/data");
        } else {
            assert_null(json_object_get(spec, "local"));
            assert_string_equal(sget(spec, "hostPath.path"), "/opt/lpp/shop/data");
            assert_string_equal(sget(spec, "hostPath.type"), "DirectoryOrCreate");
        }
        json_t *aff = json_object_get(spec, "nodeAffinity");
        if (cases[i].want_key) {
            json_t *terms = json_object_get(json_object_get(aff, "required"), "nodeSelectorTerms");
            assert_int_equal(json_array_size(terms), 1);
            json_t *exprs = json_object_get(json_array_get(terms, 0), "matchExpressions");
            assert_int_equal(json_array_size(exprs), 1);
            json_t *e = json_array_get(exprs, 0), *values = json_object_get(e, "values");
            assert_string_equal(sget(e, "key"), cases[i].want_key);
            assert_string_equal(sget(e, "operator"), "In");
            assert_int_equal(json_array_size(values), 1);
            assert_string_equal(json_string_value(json_array_get(values, 0)), cases[i].want_value);
        } else {
            assert_null(aff);
        }
        json_t *ann = json_object_get(json_object_get(pv, "metadata"), "annotations");
        json_t *sel = json_object_get(ann, HP_ANN_LPP_SELECTED_NODE);
        if (cases[i].want_ann)
            assert_string_equal(json_string_value(sel), cases[i].want_ann);
        else
            assert_null(sel);
        /* Read back: the same path, kind and node. */
        struct hp_volume *v = volume_from(text);
        assert_non_null(v);
        assert_string_equal(v->path, "/opt/lpp/shop/data");
        assert_int_equal(v->local, cases[i].local);
        if (cases[i].node && *cases[i].node)
            assert_string_equal(v->node, cases[i].node);
        else
            assert_null(v->node);
        free(v);
        json_decref(pv);
        free(text);
    }
    free(c);
}

/* Which node a PV's directory is on, from its affinity and local-path-provisioner's
 * annotation. */
static void test_volume_node(void **state)
{
    static const struct {
        const char *ann; /* annotations members, JSON */
        const char *aff; /* spec.nodeAffinity, JSON, or NULL */
        const char *want;
        int only; /* node_only */
    } cases[] = {
        {"", NULL, NULL, 0},
        {"", "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
             "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n1\"]}]}]}}", "n1", 1},
        /* its PVs: the annotation is the node, the affinity a label's value */
        {"\"local.path.provisioner/selected-node\":\"n1\"",
         "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
         "\"example.com/stable-id\",\"operator\":\"In\",\"values\":[\"s1\"]}]}]}}", "n1", 1},
        {"\"local.path.provisioner/selected-node\":\"n1\"",
         "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
         "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"host1\"]}]}]}}", "n1", 1},
        /* no affinity: no node, whatever the annotation says (a shared path: any node) */
        {"\"local.path.provisioner/selected-node\":\"n1\"", NULL, NULL, 0},
        {"\"local.path.provisioner/selected-node\":\"n1\"", "{}", NULL, 0},
        {"\"local.path.provisioner/selected-node\":\"n1\"", "{\"required\":null}", NULL, 0},
        /* an empty annotation says nothing */
        {"\"local.path.provisioner/selected-node\":\"\"",
         "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
         "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n2\"]}]}]}}", "n2", 1},
        /* another key and no annotation: unknown */
        {"", "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
             "\"zone\",\"operator\":\"In\",\"values\":[\"z\"]}]}]}}", NULL, 0},
        {"\"local.path.provisioner/selected-node\":5",
         "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
         "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n3\"]}]}]}}", "n3", 1},
        /* another node may mount it too: several values, several terms, NotIn */
        {"", "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
             "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n4\",\"n5\"]}]}]}}",
         "n4", 0},
        {"", "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
             "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n4\"]}]},"
             "{\"matchExpressions\":[{\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\","
             "\"values\":[\"n5\"]}]}]}}",
         "n4", 0},
        {"", "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
             "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n4\"]},{\"key\":"
             "\"kubernetes.io/hostname\",\"operator\":\"NotIn\",\"values\":[\"n5\"]}]}]}}",
         "n4", 0},
        {"\"local.path.provisioner/selected-node\":\"n1\"",
         "{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
         "\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n1\",\"n2\"]}]}]}}",
         "n1", 0},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        char *text = hp_xasprintf("{\"metadata\":{\"name\":\"pv\",\"annotations\":{%s}},"
                                  "\"spec\":{\"local\":{\"path\":\"/p\"}%s%s}}",
                                  cases[i].ann, cases[i].aff ? ",\"nodeAffinity\":" : "",
                                  cases[i].aff ? cases[i].aff : "");
        struct hp_volume *v = volume_from(text);
        assert_non_null(v);
        assert_int_equal(v->local, 1);
        assert_string_equal(v->path, "/p");
        if (cases[i].want)
            assert_string_equal(v->node, cases[i].want);
        else if (v->node)
            fail_msg("case %zu: node \"%s\", want none", i, v->node);
        if (v->node_only != cases[i].only)
            fail_msg("case %zu: node_only %d, want %d", i, v->node_only, cases[i].only);
        free(v);
        free(text);
    }
    /* A NUL in the annotation it would read: the PV cannot be represented. */
    assert_null(volume_from("{\"metadata\":{\"name\":\"pv\",\"annotations\":{"
                            "\"local.path.provisioner/selected-node\":\"n\\u0000\"}},"
                            "\"spec\":{\"nodeAffinity\":{\"required\":{}}}}"));
}

/* A class keeps the annotations local-path-provisioner reads on it, and no other. */
static void test_class_annotations(void **state)
{
    struct hp_class *k = class_from(
        "{\"metadata\":{\"name\":\"local-path\",\"annotations\":{"
        "\"defaultVolumeType\":\"local\",\"userPattern\":\"1000\",\"groupPattern\":\"\","
        "\"permPattern\":\"0700\",\"allowUnsafePathPattern\":\"true\","
        "\"storageclass.kubernetes.io/is-default-class\":\"true\","
        "\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\",\"pathPattern\":\"x\","
        "\"nodeAffinityKey\":\"zone\",\"other\":\"o\\u0000\"}},"
        "\"provisioner\":\"rancher.io/local-path\"}");
    (void)state;
    assert_non_null(k);
    assert_string_equal(hp_packed_get(k->annotations, "defaultVolumeType"), "local");
    assert_string_equal(hp_packed_get(k->annotations, "userPattern"), "1000");
    assert_string_equal(hp_packed_get(k->annotations, "groupPattern"), "");
    assert_string_equal(hp_packed_get(k->annotations, "permPattern"), "0700");
    assert_string_equal(hp_packed_get(k->annotations, "allowUnsafePathPattern"), "true");
    /* pathPattern and nodeAffinityKey are parameters only, there as here */
    assert_null(hp_packed_get(k->annotations, "pathPattern"));
    assert_null(hp_packed_get(k->annotations, "nodeAffinityKey"));
    assert_null(hp_packed_get(k->annotations, "storageclass.kubernetes.io/is-default-class"));
    assert_null(hp_packed_get(k->annotations, "other"));
    free(k);
    k = class_from("{\"metadata\":{\"name\":\"plain\",\"annotations\":{\"a\":\"b\"}}}");
    assert_non_null(k);
    assert_string_equal(k->annotations, "");
    free(k);
    /* A kept annotation that a C string cannot hold: the class cannot be represented, as with
     * a parameter (a NUL in one nothing reads does not matter: "other" above). */
    assert_null(class_from("{\"metadata\":{\"name\":\"c\",\"annotations\":{"
                           "\"userPattern\":\"1\\u00000\"}}}"));
    /* A repeated key keeps its last value. */
    k = class_from("{\"metadata\":{\"name\":\"c\",\"annotations\":{\"defaultVolumeType\":\"a\","
                   "\"defaultVolumeType\":\"local\"}}}");
    assert_non_null(k);
    assert_string_equal(hp_packed_get(k->annotations, "defaultVolumeType"), "local");
    free(k);
}

static void test_pv_name(void **state)
{
    struct hp_claim *c = claim_from("{\"metadata\":{\"namespace\":\"a\",\"name\":\"b\","
                                    "\"uid\":\"0c5e2d4a-1b1f-4c9e-9a8e-7d1f2e3a4b5c\"}}");
    struct hp_claim *nouid = claim_from("{\"metadata\":{\"namespace\":\"a\",\"name\":\"b\"}}");
    char out[64], small[10];
    (void)state;

    assert_int_equal(hp_pv_name(c, out, sizeof(out)), 0);
    assert_string_equal(out, "pvc-0c5e2d4a-1b1f-4c9e-9a8e-7d1f2e3a4b5c");
    assert_int_equal(hp_pv_name(c, small, sizeof(small)), -ENAMETOOLONG);
    assert_int_equal(hp_pv_name(c, out, 41), 0); /* exactly fits: 40 chars + NUL */
    assert_int_equal(hp_pv_name(c, out, 40), -ENAMETOOLONG);
    assert_int_equal(hp_pv_name(nouid, out, sizeof(out)), -EINVAL);
    free(c);
    free(nouid);
}

/* ---- cross-check against jansson: the decoders read what jansson reads ---- */

static json_t *jget(json_t *v, const char *key)
{
    return json_is_object(v) ? json_object_get(v, key) : NULL;
}

/* jansson's string at key, or dflt when absent or not a string. */
static const char *jstr(json_t *v, const char *key, const char *dflt)
{
    json_t *s = jget(v, key);
    return json_is_string(s) ? json_string_value(s) : dflt;
}

static void assert_str_or_null(const char *got, const char *want)
{
    if (want)
        assert_string_equal(got, want);
    else
        assert_null(got);
}

/* The packed map holds exactly the string members of map jansson sees, minus empty keys and
 * last-applied. */
static void assert_map_like_jansson(const char *packed, json_t *map)
{
    const char *k, *p;
    json_t *v;
    size_t want = 0, got = 0;

    if (json_is_object(map)) {
        json_object_foreach(map, k, v)
        {
            if (!*k || !json_is_string(v) ||
                strcmp(k, "kubectl.kubernetes.io/last-applied-configuration") == 0) {
                assert_null(hp_packed_get(packed, k));
                continue;
            }
            assert_string_equal(hp_packed_get(packed, k), json_string_value(v));
            want++;
        }
    }
    for (p = packed; *p; p = hp_packed_next(hp_packed_next(p)))
        got++;
    assert_int_equal(got, want);
}

static void check_claim(const char *text)
{
    json_t *o = json_loads(text, 0, NULL), *meta, *spec, *ann, *modes, *m;
    struct hp_claim *c = claim_from(text);
    const char *ns, *name, *want;
    uint8_t bits = 0;
    size_t i;
    char key[512];

    assert_non_null(o);
    meta = jget(o, "metadata");
    spec = jget(o, "spec");
    ann = jget(meta, "annotations");
    ns = jstr(meta, "namespace", "");
    name = jstr(meta, "name", "");
    if (!*ns || !*name) {
        assert_null(c);
        json_decref(o);
        return;
    }
    assert_non_null(c);
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    assert_string_equal(c->key, key);
    assert_string_equal(c->namespace_, ns);
    assert_string_equal(c->name, name);
    assert_string_equal(c->uid, jstr(meta, "uid", ""));
    assert_string_equal(c->resource_version, jstr(meta, "resourceVersion", ""));
    assert_string_equal(c->volume_name, jstr(spec, "volumeName", ""));
    assert_string_equal(c->request, jstr(jget(jget(spec, "resources"), "requests"), "storage", ""));
    want = jstr(ann, HP_ANN_BETA_STORAGE_CLASS, NULL);
    assert_str_or_null(c->class_name, want ? want : jstr(spec, "storageClassName", NULL));
    want = jstr(ann, HP_ANN_STORAGE_PROVISIONER, NULL);
    assert_str_or_null(c->provisioner,
                       want ? want : jstr(ann, HP_ANN_BETA_STORAGE_PROVISIONER, NULL));
    want = jstr(ann, HP_ANN_SELECTED_NODE, NULL);
    assert_str_or_null(c->selected_node, want ? want : jstr(ann, HP_ANN_ALPHA_SELECTED_NODE, NULL));
    assert_map_like_jansson(c->annotations, ann);
    assert_map_like_jansson(c->labels, jget(meta, "labels"));
    modes = jget(spec, "accessModes");
    json_array_foreach(modes, i, m)
    {
        const char *s = json_string_value(m);
        if (!s)
            continue;
        bits |= strcmp(s, "ReadWriteOnce") == 0      ? HP_ACCESS_RWO
                : strcmp(s, "ReadOnlyMany") == 0     ? HP_ACCESS_ROX
                : strcmp(s, "ReadWriteMany") == 0    ? HP_ACCESS_RWX
                : strcmp(s, "ReadWriteOncePod") == 0 ? HP_ACCESS_RWOP
                                                     : 0;
    }
    assert_int_equal(c->access_modes, bits);
    assert_int_equal(c->block, strcmp(jstr(spec, "volumeMode", ""), "Block") == 0);
    m = jget(meta, "deletionTimestamp");
    assert_int_equal(c->deleting, m && !json_is_null(m));
    free(c);
    json_decref(o);
}

static enum hp_reclaim jreclaim(const char *s)
{
    return !s                          ? HP_RECLAIM_UNSET
           : strcmp(s, "Delete") == 0  ? HP_RECLAIM_DELETE
           : strcmp(s, "Retain") == 0  ? HP_RECLAIM_RETAIN
           : strcmp(s, "Recycle") == 0 ? HP_RECLAIM_RECYCLE
                                       : HP_RECLAIM_UNSET;
}

static void check_volume(const char *text)
{
    json_t *o = json_loads(text, 0, NULL), *meta, *spec, *ann, *ref, *fins, *f, *ts;
    struct hp_volume *v = volume_from(text);
    size_t i;
    int fin = 0;

    assert_non_null(o);
    meta = jget(o, "metadata");
    spec = jget(o, "spec");
    ann = jget(meta, "annotations");
    ref = jget(spec, "claimRef");
    if (!*jstr(meta, "name", "")) {
        assert_null(v);
        json_decref(o);
        return;
    }
    assert_non_null(v);
    assert_string_equal(v->key, jstr(meta, "name", ""));
    assert_string_equal(v->name, jstr(meta, "name", ""));
    assert_string_equal(v->resource_version, jstr(meta, "resourceVersion", ""));
    assert_string_equal(v->phase, jstr(jget(o, "status"), "phase", ""));
    assert_string_equal(v->provisioned_by, jstr(ann, HP_ANN_PROVISIONED_BY, ""));
    assert_string_equal(v->identity, jstr(ann, HP_ANN_IDENTITY, ""));
    assert_string_equal(v->class_name, jstr(spec, "storageClassName", ""));
    assert_string_equal(v->claim_namespace, jstr(ref, "namespace", ""));
    assert_string_equal(v->claim_name, jstr(ref, "name", ""));
    assert_string_equal(v->claim_uid, jstr(ref, "uid", ""));
    assert_string_equal(v->path, jstr(jget(spec, "hostPath"), "path", ""));
    assert_int_equal(v->reclaim, jreclaim(jstr(spec, "persistentVolumeReclaimPolicy", NULL)));
    fins = jget(meta, "finalizers");
    json_array_foreach(fins, i, f)
    {
        fin |= json_is_string(f) && strcmp(json_string_value(f), HP_FINALIZER) == 0;
    }
    assert_int_equal(v->our_finalizer, fin);
    ts = jget(meta, "deletionTimestamp");
    assert_int_equal(v->deleting, ts && !json_is_null(ts));
    free(v);
    json_decref(o);
}

static void check_class(const char *text)
{
    json_t *o = json_loads(text, 0, NULL), *meta, *opts, *e;
    struct hp_class *k = class_from(text);
    const char *p;
    size_t i;

    assert_non_null(o);
    meta = jget(o, "metadata");
    if (!*jstr(meta, "name", "")) {
        assert_null(k);
        json_decref(o);
        return;
    }
    assert_non_null(k);
    assert_string_equal(k->name, jstr(meta, "name", ""));
    assert_string_equal(k->resource_version, jstr(meta, "resourceVersion", ""));
    assert_string_equal(k->provisioner, jstr(o, "provisioner", ""));
    assert_map_like_jansson(k->parameters, jget(o, "parameters"));
    {
        /* annotations: the five local-path-provisioner reads, as jansson reads them */
        static const char *const keys[] = {"defaultVolumeType", "userPattern", "groupPattern",
                                           "permPattern", "allowUnsafePathPattern"};
        json_t *ann = jget(meta, "annotations");
        size_t want = 0, got = 0;
        for (size_t n = 0; n < HP_ARRAY_SIZE(keys); n++) {
            const char *v = jstr(ann, keys[n], NULL);
            assert_str_or_null(hp_packed_get(k->annotations, keys[n]), v);
            want += v != NULL;
        }
        for (p = k->annotations; *p; p = hp_packed_next(hp_packed_next(p)))
            got++;
        assert_int_equal(got, want);
    }
    p = k->mount_options;
    opts = jget(o, "mountOptions");
    json_array_foreach(opts, i, e)
    {
        if (!json_is_string(e) || !*json_string_value(e))
            continue;
        assert_string_equal(p, json_string_value(e));
        p = hp_packed_next(p);
    }
    assert_string_equal(p, "");
    assert_int_equal(k->reclaim, jreclaim(jstr(o, "reclaimPolicy", NULL)));
    assert_int_equal(k->wait_for_first_consumer,
                     strcmp(jstr(o, "volumeBindingMode", ""), "WaitForFirstConsumer") == 0);
    free(k);
    json_decref(o);
}

/* Escapes, repeated keys, unusual types: what a hand-written client or an old server may send. */
static const char *const odd_claims[] = {
    "{\"metadata\":{\"namespace\":\"n\\u0073\",\"name\":\"caf\\u00e9\\ud83d\\ude00\","
    "\"annotations\":{\"example.com/\\u0064ir\":\"a\\\"b\\\\c\\/d\\n\","
    "\"volume.beta.kubernetes.io/storage-cl\\u0061ss\":\"\\u0068ostpath\","
    "\"volume.kubernetes.io/selected-node\":\"\"},\"labels\":{\"\\u00e9t\\u00e9\":\"\\t\"}},"
    "\"spec\":{\"storageClassName\":\"ignored\",\"volumeMode\":\"Bl\\u006fck\","
    "\"accessModes\":[\"ReadWrite\\u004fnce\",\"ReadWriteOnce\"]}}",
    /* repeated keys at every level: the last occurrence wins, as in jansson */
    "{\"metadata\":{\"name\":\"first\",\"namespace\":\"ns\",\"name\":\"last\","
    "\"annotations\":{\"k\":\"1\",\"x\":\"y\",\"k\":\"2\",\"\\u006b\":\"3\",\"gone\":\"a\","
    "\"gone\":5,\"volume.kubernetes.io/storage-provisioner\":\"a\","
    "\"volume.kubernetes.io/"
    "storage-provisioner\":\"b\"},\"annotations\":{\"k\":\"4\",\"k\":\"5\"}},"
    "\"spec\":{\"volumeName\":\"v1\",\"spec\":1,\"volumeName\":\"v2\"},\"spec\":{\"volumeName\":"
    "\"v3\"}}",
    "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\",\"deletionTimestamp\":0,"
    "\"annotations\":{\"volume.beta.kubernetes.io/storage-class\":7},"
    "\"labels\":{\"a\":\"\",\"\":\"\",\"b\":{\"c\":\"d\"}}},"
    "\"spec\":{\"storageClassName\":\"\",\"resources\":{\"requests\":{\"storage\":\"1Gi\","
    "\"storage\":null}}}}",
};

static void test_decoders_match_jansson(void **state)
{
    static const char *const volumes[] = {
        "{\"metadata\":{\"name\":\"pv\",\"finalizers\":[\"external-provisioner.volume.kubernetes"
        ".io\\/finalizer\"],\"annotations\":{\"hostPathProvisionerIdentity\":\"a\","
        "\"hostPathProvisionerIdentity\":\"b\"}},\"spec\":{\"claimRef\":{\"uid\":\"\\u0031\"},"
        "\"persistentVolumeReclaimPolicy\":\"Recycle\",\"hostPath\":{\"path\":\"/"
        "d\\u00e9j\\u00e0\"}},"
        "\"status\":{\"phase\":\"Bound\",\"phase\":\"Released\"}}",
        "{\"metadata\":{\"name\":\"pv\",\"deletionTimestamp\":null,\"finalizers\":{}},"
        "\"spec\":{\"claimRef\":null,\"hostPath\":[]}}",
    };
    static const char *const classes[] = {
        "{\"metadata\":{\"name\":\"c\\u0031\"},\"parameters\":{\"mode\":\"0700\",\"mode\":\"0750\","
        "\"uid\":1000,\"\":\"x\"},\"mountOptions\":[\"n\\u006fatime\",null,\"\",\"ro\"],"
        "\"reclaimPolicy\":\"Retain\",\"volumeBindingMode\":\"WaitForFirstConsumer\"}",
        "{\"metadata\":{\"name\":\"c\"},\"parameters\":[],\"mountOptions\":{}}",
    };
    size_t i;
    (void)state;

    check_claim(full_claim);
    for (i = 0; i < HP_ARRAY_SIZE(odd_claims); i++)
        check_claim(odd_claims[i]);
    check_claim("{\"metadata\":{\"namespace\":\"ns\"}}");
    check_volume(full_volume);
    for (i = 0; i < HP_ARRAY_SIZE(volumes); i++)
        check_volume(volumes[i]);
    for (i = 0; i < HP_ARRAY_SIZE(classes); i++)
        check_class(classes[i]);
}

static void test_escapes_decoded(void **state)
{
    struct hp_claim *c = claim_from(odd_claims[0]);
    (void)state;

    assert_non_null(c);
    assert_string_equal(c->key, "ns/caf\xc3\xa9\xf0\x9f\x98\x80");
    assert_string_equal(c->name, "caf\xc3\xa9\xf0\x9f\x98\x80");
    assert_string_equal(hp_packed_get(c->annotations, "example.com/dir"), "a\"b\\c/d\n");
    assert_string_equal(c->class_name, "hostpath"); /* the (escaped) beta annotation wins */
    assert_string_equal(c->selected_node, "");
    assert_string_equal(hp_packed_get(c->labels, "\xc3\xa9t\xc3\xa9"), "\t");
    assert_int_equal(c->block, 1);
    assert_int_equal(c->access_modes, HP_ACCESS_RWO);
    free(c);

    c = claim_from(odd_claims[1]);
    assert_non_null(c);
    assert_string_equal(c->key, "ns/last");
    assert_string_equal(c->volume_name, "v3");
    assert_string_equal(hp_packed_get(c->annotations, "k"), "5");
    assert_string_equal(hp_packed_next(hp_packed_next(c->annotations)), ""); /* one entry */
    free(c);
}

/* Maps bigger than the pairwise check: the hash path must agree, and stay fast. */
static void test_large_maps(void **state)
{
    struct hp_buf b;
    struct hp_claim *c;
    const char *p;
    size_t i, n = 0;
    (void)state;

    hp_buf_init(&b, 0);
    /* 40 keys (past the pairwise check) with repeats: the same as jansson, entry for entry */
    assert_int_equal(hp_buf_appends(&b, "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\","
                                        "\"labels\":{\"dup\":\"first\",\"num\":\"x\""),
                     0);
    for (i = 0; i < 40; i++)
        assert_int_equal(hp_buf_printf(&b, ",\"k%zu\":\"v%zu\",\"k%zu\":\"w\"", i % 30, i, i % 7),
                         0);
    assert_int_equal(hp_buf_appends(&b, ",\"d\\u0075p\":\"last\",\"num\":1}}}"), 0);
    check_claim(b.data);

    hp_buf_reset(&b);
    assert_int_equal(hp_buf_appends(&b, "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\","
                                        "\"labels\":{\"dup\":\"first\",\"num\":\"x\""),
                     0);
    for (i = 0; i < 100000; i++)
        assert_int_equal(hp_buf_printf(&b, ",\"k%zu\":\"v%zu\"", i, i), 0);
    assert_int_equal(hp_buf_appends(&b, ",\"d\\u0075p\":\"last\",\"num\":1}}}"), 0);
    c = claim_from(b.data);
    assert_non_null(c);
    assert_string_equal(hp_packed_get(c->labels, "dup"), "last");
    assert_null(hp_packed_get(c->labels, "num"));
    assert_string_equal(hp_packed_get(c->labels, "k99999"), "v99999");
    for (p = c->labels; *p; p = hp_packed_next(hp_packed_next(p)))
        n++;
    assert_int_equal(n, 100001);
    free(c);

    /* a map of 100,000 copies of one key: linear, and only the last copy is kept */
    hp_buf_reset(&b);
    assert_int_equal(hp_buf_appends(&b, "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"n\","
                                        "\"labels\":{\"a\":\"0\""),
                     0);
    for (i = 1; i < 100000; i++)
        assert_int_equal(hp_buf_printf(&b, ",\"a\":\"%zu\"", i), 0);
    assert_int_equal(hp_buf_appends(&b, "}}}"), 0);
    c = claim_from(b.data);
    assert_non_null(c);
    assert_string_equal(hp_packed_get(c->labels, "a"), "99999");
    assert_string_equal(hp_packed_next(hp_packed_next(c->labels)), "");
    free(c);
    hp_buf_free(&b);
}

static int free_reader(void **state)
{
    (void)state;
    hp_json_free(&reader);
    return 0;
}

/* ---- NULs, the keep filter, and the claims dynamic provisioning cannot serve ---- */

static struct hp_claim *claim_with(const char *annotations, const char *spec_extra)
{
    char *text = hp_xasprintf(
        "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"uid\":\"u\",\"annotations\":{%s},"
        "\"labels\":{\"app\":\"web\",\"tier\":\"db\"}},\"spec\":{\"storageClassName\":\"hp\","
        "\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}%s}}",
        annotations, spec_extra);
    struct hp_claim *c = hp_claim_decode(parse(text), 0);
    free(text);
    return c;
}

static void test_nul_values(void **state)
{
    struct hp_claim *c;
    (void)state;
    /* Where nothing reads it: only that entry goes. */
    c = claim_with("\"note\":\"a\\u0000b\",\"keep\":\"yes\"", "");
    assert_non_null(c);
    assert_null(hp_packed_get(c->annotations, "note"));
    assert_string_equal(hp_packed_get(c->annotations, "keep"), "yes");
    free(c);
    /* A NUL in a key is never kept either. */
    c = claim_with("\"k\\u0000\":\"v\"", "");
    assert_non_null(c);
    assert_string_equal(c->annotations, "");
    free(c);
    /* Where a decision reads it: the object cannot be represented. */
    static const char *const must[] = {
        "\"volume.kubernetes.io/selected-node\":\"n\\u0000x\"",
        "\"volume.alpha.kubernetes.io/selected-node\":\"\\u0000\"",
        "\"volume.kubernetes.io/storage-provisioner\":\"p\\u0000\"",
        "\"volume.beta.kubernetes.io/storage-provisioner\":\"p\\u0000\"",
        "\"volume.beta.kubernetes.io/storage-class\":\"hp\\u0000\"",
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(must); i++)
        assert_null(claim_with(must[i], ""));
    assert_null(claim_from("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\\u0000\"}}"));
    assert_null(claim_from("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\"},"
                           "\"spec\":{\"storageClassName\":\"x\\u0000\"}}"));
    assert_null(claim_from("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"uid\":"
                           "\"\\u0000\"}}"));
    /* Volumes: any field a decision reads. */
    struct hp_volume *v = volume_from("{\"metadata\":{\"name\":\"v\",\"annotations\":{\"x\":"
                                      "\"\\u0000\"}}}");
    assert_non_null(v);
    free(v);
    assert_null(volume_from("{\"metadata\":{\"name\":\"v\",\"annotations\":"
                            "{\"hostPathProvisionerIdentity\":\"a\\u0000\"}}}"));
    assert_null(volume_from("{\"metadata\":{\"name\":\"v\"},\"spec\":{\"hostPath\":"
                            "{\"path\":\"/x\\u0000\"}}}"));
    /* Classes: every parameter decides something. */
    assert_null(class_from("{\"metadata\":{\"name\":\"k\"},\"provisioner\":\"p\","
                           "\"parameters\":{\"onDelete\":\"retain\\u0000\"}}"));
    assert_null(class_from("{\"metadata\":{\"name\":\"k\"},\"provisioner\":\"p\","
                           "\"mountOptions\":[\"ro\\u0000\"]}"));
}

static int wanted_calls;
static int wanted_hp(const char *cls, const char **ann, const char **labels, void *ctx)
{
    (void)ctx;
    wanted_calls++;
    if (strcmp(cls, "hp") != 0)
        return 0;
    *ann = "dir\0";
    *labels = "tier\0";
    return 1;
}

static void test_keep_filter(void **state)
{
    struct hp_claim_filter f = {wanted_hp, NULL};
    const char *ann = "\"dir\":\"d\",\"other\":\"o\",\"volume.kubernetes.io/selected-node\":\"n\"";
    char *text;
    struct hp_claim *c;
    (void)state;

    /* Our class, unbound: what its pattern reads, plus what decisions read. */
    text = hp_xasprintf("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"annotations\":{%s},"
                        "\"labels\":{\"app\":\"web\",\"tier\":\"db\"}},\"spec\":"
                        "{\"storageClassName\":\"hp\"}}",
                        ann);
    c = hp_claim_decode_filtered(parse(text), 0, &f);
    free(text);
    assert_non_null(c);
    assert_int_equal(c->maps_kept, 1);
    assert_string_equal(hp_packed_get(c->annotations, "dir"), "d");
    assert_null(hp_packed_get(c->annotations, "other"));
    assert_string_equal(c->selected_node, "n");
    assert_string_equal(hp_packed_get(c->labels, "tier"), "db");
    assert_null(hp_packed_get(c->labels, "app"));
    free(c);
    /* A foreign class: decisions only. */
    text = hp_xasprintf("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"annotations\":{%s},"
                        "\"labels\":{\"tier\":\"db\"}},\"spec\":{\"storageClassName\":\"x\"}}",
                        ann);
    c = hp_claim_decode_filtered(parse(text), 0, &f);
    free(text);
    assert_int_equal(c->maps_kept, 0);
    assert_null(hp_packed_get(c->annotations, "dir"));
    assert_string_equal(c->selected_node, "n");
    assert_string_equal(c->labels, "");
    free(c);
    /* Ours but bound: decisions only, and the class is not even asked. */
    wanted_calls = 0;
    text = hp_xasprintf("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"annotations\":{%s}},"
                        "\"spec\":{\"storageClassName\":\"hp\",\"volumeName\":\"pv\"}}",
                        ann);
    c = hp_claim_decode_filtered(parse(text), 0, &f);
    free(text);
    assert_int_equal(wanted_calls, 0);
    assert_null(hp_packed_get(c->annotations, "dir"));
    free(c);
    /* The beta class annotation names the class the filter is asked about. */
    c = hp_claim_decode_filtered(
        parse("{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"annotations\":{\"dir\":\"d\","
              "\"volume.beta.kubernetes.io/storage-class\":\"hp\"}},\"spec\":"
              "{\"storageClassName\":\"x\"}}"),
        0, &f);
    assert_string_equal(c->class_name, "hp");
    assert_string_equal(hp_packed_get(c->annotations, "dir"), "d");
    free(c);
}

/* volumeType is kept on every claim, as the other annotations decisions read. */
static void test_claim_volume_type_kept(void **state)
{
    struct hp_claim_filter none = {wanted_hp, NULL};
    const char *text = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"annotations\":{"
                       "\"volumeType\":\"local\",\"other\":\"x\"}},"
                       "\"spec\":{\"storageClassName\":\"other\"}}";
    (void)state;
    struct hp_claim *c = hp_claim_decode_filtered(parse(text), 0, &none);
    assert_non_null(c);
    assert_string_equal(hp_packed_get(c->annotations, HP_ANN_VOLUME_TYPE), "local");
    assert_null(hp_packed_get(c->annotations, "other"));
    free(c);
    text = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"annotations\":{"
           "\"volumeType\":\"lo\\u0000cal\"}},\"spec\":{\"storageClassName\":\"other\"}}";
    assert_null(hp_claim_decode_filtered(parse(text), 0, &none));
}

static void test_selector_and_data_source(void **state)
{
    struct hp_claim *c;
    (void)state;
    c = claim_with("", "");
    assert_false(c->selector || c->data_source);
    free(c);
    c = claim_with("", ",\"selector\":{\"matchLabels\":{\"a\":\"b\"}}");
    assert_true(c->selector);
    free(c);
    c = claim_with("", ",\"selector\":{}"); /* set, if empty: Kubernetes tests != nil */
    assert_true(c->selector);
    free(c);
    c = claim_with("", ",\"selector\":null");
    assert_false(c->selector);
    free(c);
    c = claim_with("", ",\"dataSource\":{\"kind\":\"PersistentVolumeClaim\",\"name\":\"x\"}");
    assert_true(c->data_source);
    free(c);
    c = claim_with("", ",\"dataSourceRef\":{\"kind\":\"VolumeSnapshot\",\"name\":\"x\"}");
    assert_true(c->data_source);
    free(c);
}

static struct hp_claim *claim_with_status(const char *request, const char *status)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"metadata\":{\"namespace\":\"ns\",\"name\":\"c\",\"uid\":\"u\"},"
             "\"spec\":{\"resources\":{\"requests\":{\"storage\":\"%s\"}}},"
             "\"status\":%s}",
             request, status);
    return claim_from(text);
}

/* An expansion marks the claim first: all three of a Resizing condition (status True),
 * allocatedResourceStatuses ControllerResizeInProgress and allocatedResources the request as
 * written; any one missing or different is not this process's mark for this size. */
static void test_claim_resize_marked(void **state)
{
    static const char *const cond =
        "\"conditions\":[{\"type\":\"Other\",\"status\":\"True\"},"
        "{\"type\":\"Resizing\",\"status\":\"True\"}]";
    static const char *const statuses =
        "\"allocatedResourceStatuses\":{\"storage\":\"ControllerResizeInProgress\"}";
    static const struct {
        const char *request, *status;
        int marked;
    } cases[] = {
        {"4Mi", "{\"allocatedResources\":{\"storage\":\"4Mi\"},%s,%s}", 1},
        {"8Mi", "{\"allocatedResources\":{\"storage\":\"4Mi\"},%s,%s}", 0}, /* grown since */
        {"4Mi", "{%s,%s}", 0},                                               /* no size */
        {"4Mi", "{\"allocatedResources\":{\"storage\":\"4Mi\"},%s}", 0},     /* one of two */
        {"4Mi", "{\"allocatedResources\":{\"storage\":4},%s,%s}", 0},      /* not a string */
        {"4Mi", "null", 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char status[512];
        snprintf(status, sizeof(status), cases[i].status, statuses, cond);
        struct hp_claim *c = claim_with_status(cases[i].request, status);
        assert_non_null(c);
        if (c->resize_marked != cases[i].marked)
            fail_msg("case %zu (%s): resize_marked %d", i, status, c->resize_marked);
        free(c);
    }
    /* The condition False, or another status value: not marked. */
    struct hp_claim *c = claim_with_status(
        "4Mi", "{\"allocatedResources\":{\"storage\":\"4Mi\"},"
               "\"allocatedResourceStatuses\":{\"storage\":\"ControllerResizeInProgress\"},"
               "\"conditions\":[{\"type\":\"Resizing\",\"status\":\"False\"}]}");
    assert_false(c->resize_marked);
    free(c);
    c = claim_with_status(
        "4Mi", "{\"allocatedResources\":{\"storage\":\"4Mi\"},"
               "\"allocatedResourceStatuses\":{\"storage\":\"ControllerResizeInfeasible\"},"
               "\"conditions\":[{\"type\":\"Resizing\",\"status\":\"True\"}]}");
    assert_false(c->resize_marked);
    free(c);
}

static void test_parse_reclaim(void **state)
{
    enum hp_reclaim r = HP_RECLAIM_UNSET;
    (void)state;

    assert_int_equal(hp_parse_reclaim("Delete", &r), 0);
    assert_int_equal(r, HP_RECLAIM_DELETE);
    assert_int_equal(hp_parse_reclaim("Retain", &r), 0);
    assert_int_equal(r, HP_RECLAIM_RETAIN);
    assert_int_equal(hp_parse_reclaim("Recycle", &r), 0);
    assert_int_equal(r, HP_RECLAIM_RECYCLE);
    assert_int_equal(hp_parse_reclaim("retain", &r), -EINVAL);
    assert_int_equal(hp_parse_reclaim("", &r), -EINVAL);
    assert_int_equal(hp_parse_reclaim(NULL, &r), -EINVAL);
    assert_int_equal(r, HP_RECLAIM_RECYCLE);
    assert_string_equal(hp_reclaim_name(HP_RECLAIM_DELETE), "Delete");
    assert_string_equal(hp_reclaim_name(HP_RECLAIM_RETAIN), "Retain");
    assert_string_equal(hp_reclaim_name(HP_RECLAIM_RECYCLE), "Recycle");
    assert_string_equal(hp_reclaim_name(HP_RECLAIM_UNSET), "");
}

/* Label values: a valid one as it is; anything else a readable prefix and a hash. */
static void test_label_value(void **state)
{
    static const struct {
        const char *in, *want; /* want NULL: the hashed form, checked below */
    } cases[] = {
        {"node-a", "node-a"},
        {"worker-03.example.com", "worker-03.example.com"},
        {"hostpath-provisioner.io", "hostpath-provisioner.io"},
        {"A_b.c-9", "A_b.c-9"},
        {"example.com/hostpath", NULL},
        {"-leading", NULL},
        {"trailing.", NULL},
        {"/", NULL},
        {"a23456789012345678901234567890123456789012345678901234567890123", NULL}, /* 63 */
        {"ip-10-0-0-1.eu-west-1.compute.internal.this-is-a-long-node-name-over-63", NULL},
    };
    char out[HP_LABEL_VALUE_MAX], again[HP_LABEL_VALUE_MAX];
    (void)state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        assert_int_equal(hp_label_value(cases[i].in, out, sizeof(out)), 0);
        size_t n = strlen(out);
        assert_true(n >= 1 && n <= 63);
        /* Always a valid label value: [A-Za-z0-9._-], alphanumeric at both ends. */
        for (size_t k = 0; k < n; k++)
            assert_non_null(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789._-", out[k]));
        assert_non_null(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                               out[0]));
        assert_non_null(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                               out[n - 1]));
        if (cases[i].want) {
            assert_string_equal(out, cases[i].want);
            continue;
        }
        if (strlen(cases[i].in) == 63) { /* exactly 63 valid characters: itself */
            assert_string_equal(out, cases[i].in);
            continue;
        }
        assert_true(n > 17 && out[n - 17] == '-'); /* ...-<16 hex digits> */
        assert_int_equal(hp_label_value(cases[i].in, again, sizeof(again)), 0);
        assert_string_equal(out, again); /* deterministic */
    }
    assert_int_equal(hp_label_value("example.com/hostpath", out, sizeof(out)), 0);
    assert_true(strncmp(out, "example.com_hostpath-", 21) == 0);
    assert_int_equal(hp_label_value("/", out, sizeof(out)), 0);
    assert_true(strncmp(out, "x-", 2) == 0);
    /* Distinct names, distinct values (the hash), even when their prefixes agree. */
    assert_int_equal(hp_label_value("a/b", out, sizeof(out)), 0);
    assert_int_equal(hp_label_value("a_b/", again, sizeof(again)), 0);
    assert_string_not_equal(out, again);
    assert_int_equal(hp_label_value("", out, sizeof(out)), -EINVAL);
    assert_int_equal(hp_label_value("a", out, 10), -EINVAL);
}

/* What the watch filter reads of a PV before decoding it, and the labels decode keeps. */
static void test_volume_peek_and_labels(void **state)
{
    static const struct {
        const char *json;
        int want;
        const char *node;
    } cases[] = {
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"csi\":{\"driver\":\"x\"}}}", -1, ""},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"hostPath\":{\"path\":\"\"}}}", -1, ""},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"hostPath\":{\"path\":\"/d\"}}}", 0, ""},
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"local\":{\"path\":\"/d\"},"
         "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{"
         "\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n1\"]}]}]}}}}",
         1, "n1"},
        /* nodeAffinityKey: the node is local-path-provisioner's annotation */
        {"{\"metadata\":{\"name\":\"a\",\"annotations\":{\"local.path.provisioner/"
         "selected-node\":\"n2\"}},\"spec\":{\"hostPath\":{\"path\":\"/d\"},"
         "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{"
         "\"key\":\"zone\",\"operator\":\"In\",\"values\":[\"z\"]}]}]}}}}",
         1, "n2"},
        /* several nodes may mount it: no single node (kept by a node's watch filter) */
        {"{\"metadata\":{\"name\":\"a\"},\"spec\":{\"local\":{\"path\":\"/d\"},"
         "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{"
         "\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":[\"n1\",\"n3\"]}]}]}}}}",
         0, ""},
    };
    struct hp_json j;
    char node[64], path[64];
    (void)state;

    hp_json_init(&j);
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        assert_int_equal(hp_json_parse(&j, cases[i].json, strlen(cases[i].json)), 0);
        node[0] = '\0';
        assert_int_equal(hp_volume_peek(&j, 0, node, sizeof(node), path, sizeof(path)),
                         cases[i].want);
        if (cases[i].want >= 0)
            assert_string_equal(path, "/d");
        if (cases[i].want == 1)
            assert_string_equal(node, cases[i].node);
        /* peek and decode agree on the node */
        struct hp_volume *v = hp_volume_decode(&j, 0);
        assert_non_null(v);
        if (cases[i].want == 1) {
            assert_string_equal(v->node, cases[i].node);
            assert_true(v->node_only);
        } else {
            assert_true(!v->node || !v->node_only);
        }
        assert_null(v->label_node);
        assert_null(v->label_provisioner);
        free(v);
    }
    static const char labelled[] =
        "{\"metadata\":{\"name\":\"a\",\"labels\":{\"hostpath-provisioner.io/node\":\"n1\","
        "\"hostpath-provisioner.io/provisioner\":\"p\",\"other\":\"x\"}},"
        "\"spec\":{\"hostPath\":{\"path\":\"/d\"}}}";
    assert_int_equal(hp_json_parse(&j, labelled, strlen(labelled)), 0);
    struct hp_volume *v = hp_volume_decode(&j, 0);
    assert_non_null(v);
    assert_string_equal(v->label_node, "n1");
    assert_string_equal(v->label_provisioner, "p");
    free(v);
    hp_json_free(&j);

    /* The migration's patch, read back. */
    json_error_t err;
    char *text = hp_pv_labels_patch("n1", "p");
    json_t *patch = json_loads(text, 0, &err);
    assert_non_null(patch);
    json_t *labels = json_object_get(json_object_get(patch, "metadata"), "labels");
    assert_string_equal(json_string_value(json_object_get(labels, HP_LABEL_NODE)), "n1");
    assert_string_equal(json_string_value(json_object_get(labels, HP_LABEL_PROVISIONER)), "p");
    json_decref(patch);
    free(text);
    text = hp_pv_labels_patch(NULL, "p"); /* no node: the node label is removed */
    patch = json_loads(text, 0, &err);
    assert_non_null(patch);
    labels = json_object_get(json_object_get(patch, "metadata"), "labels");
    assert_true(json_is_null(json_object_get(labels, HP_LABEL_NODE)));
    json_decref(patch);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_reclaim),
        cmocka_unit_test(test_claim_resize_marked),
        cmocka_unit_test(test_claim_full),
        cmocka_unit_test(test_claim_absent_fields),
        cmocka_unit_test(test_claim_bound_block_deleting),
        cmocka_unit_test(test_claim_class_precedence),
        cmocka_unit_test(test_claim_annotation_precedence),
        cmocka_unit_test(test_claim_malformed),
        cmocka_unit_test(test_claim_wrong_types_tolerated),
        cmocka_unit_test(test_claim_last_applied_skipped),
        cmocka_unit_test(test_volume_full),
        cmocka_unit_test(test_volume_absent_and_malformed),
        cmocka_unit_test(test_class),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_pv_build),
        cmocka_unit_test(test_label_value),
        cmocka_unit_test(test_volume_peek_and_labels),
        cmocka_unit_test(test_pv_build_edges),
        cmocka_unit_test(test_pv_name),
        cmocka_unit_test(test_pv_build_kinds),
        cmocka_unit_test(test_volume_node),
        cmocka_unit_test(test_class_annotations),
        cmocka_unit_test(test_claim_volume_type_kept),
        cmocka_unit_test(test_decoders_match_jansson),
        cmocka_unit_test(test_escapes_decoded),
        cmocka_unit_test(test_large_maps),
        cmocka_unit_test(test_nul_values),
        cmocka_unit_test(test_keep_filter),
        cmocka_unit_test(test_selector_and_data_source),
    };
    return cmocka_run_group_tests(tests, NULL, free_reader);
}
