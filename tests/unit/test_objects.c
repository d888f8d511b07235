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

#include "hostpath/buf.h"
#include "hostpath/objects.h"

static json_t *parse(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);

    if (!j)
        fail_msg("bad test JSON line %d: %s", err.line, err.text);
    return j;
}

static struct hp_claim *claim_from(const char *text)
{
    json_t *j = parse(text);
    struct hp_claim *c = hp_claim_decode(j);

    json_decref(j);
    return c;
}

static struct hp_volume *volume_from(const char *text)
{
    json_t *j = parse(text);
    struct hp_volume *v = hp_volume_decode(j);

    json_decref(j);
    return v;
}

static struct hp_class *class_from(const char *text)
{
    json_t *j = parse(text);
    struct hp_class *k = hp_class_decode(j);

    json_decref(j);
    return k;
}

/* A claim as the API server sends it in a watch event (kubectl apply, WaitForFirstConsumer). */
static const char full_claim[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
    "\"annotations\":{"
    "\"kubectl.kubernetes.io/last-applied-configuration\":\"{\\\"apiVersion\\\":\\\"v1\\\"}\\n\","
    "\"volume.beta.kubernetes.io/storage-provisioner\":\"beta.example/hostpath\","
    "\"volume.kubernetes.io/storage-provisioner\":\"example.com/hostpath\","
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
    assert_string_equal(c->provisioner, "example.com/hostpath");
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

    assert_null(hp_claim_decode(NULL));
    for (i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        json_t *j = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        assert_non_null(j);
        assert_null(hp_claim_decode(j));
        json_decref(j);
    }
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
    "\"pv.kubernetes.io/provisioned-by\":\"example.com/hostpath\"},"
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
    assert_string_equal(v->provisioned_by, "example.com/hostpath");
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
        "\"provisioner\":\"example.com/hostpath\",\"reclaimPolicy\":\"Retain\","
        "\"volumeBindingMode\":\"WaitForFirstConsumer\","
        "\"parameters\":{\"pathPattern\":\"{{.PVC.Namespace}}/{{.PVC.Name}}\",\"mode\":\"0750\"},"
        "\"mountOptions\":[\"noatime\",\"\",5,\"nodev\"]}");
    const char *p;
    (void)state;

    assert_non_null(k);
    assert_string_equal(k->key, "hostpath");
    assert_string_equal(k->name, "hostpath");
    assert_string_equal(k->resource_version, "42");
    assert_string_equal(k->provisioner, "example.com/hostpath");
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
            .class_ = cases[i].mount_options ? with_opts : no_opts,
            .provisioner = "example.com/hostpath",
            .identity = "node-a",
            .path = "/var/lib/hp/shop-data-pvc-u-1",
            .node = cases[i].node,
            .reclaim = cases[i].reclaim,
            .add_finalizer = cases[i].add_finalizer,
        };
        json_t *pv = hp_pv_build(&sp), *spec, *modes, *ref, *fin, *opts, *aff;

        assert_non_null(pv);
        assert_string_equal(sget(pv, "apiVersion"), "v1");
        assert_string_equal(sget(pv, "kind"), "PersistentVolume");
        assert_string_equal(sget(pv, "metadata.name"), "pvc-u-1");
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(json_object_get(pv, "metadata"), "annotations"),
                                HP_ANN_PROVISIONED_BY)),
                            "example.com/hostpath");
        assert_string_equal(sget(pv, "metadata.annotations.hostPathProvisionerIdentity"), "node-a");
        assert_int_equal(json_object_size(json_object_get(pv, "metadata")),
                         cases[i].want_finalizer ? 3 : 2);
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
                            .class_ = k,
                            .provisioner = "p",
                            .identity = "i",
                            .path = "/x",
                            .reclaim = HP_RECLAIM_DELETE};
    json_t *pv;
    (void)state;

    /* no resourceVersion on the claim: claimRef omits it; class name from the class object */
    pv = hp_pv_build(&sp);
    assert_non_null(pv);
    assert_null(json_object_get(json_object_get(json_object_get(pv, "spec"), "claimRef"),
                                "resourceVersion"));
    assert_string_equal(sget(pv, "spec.storageClassName"), "from-class");
    json_decref(pv);

    sp.class_ = NULL; /* neither: no storageClassName at all */
    pv = hp_pv_build(&sp);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
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
        cmocka_unit_test(test_pv_build_edges),
        cmocka_unit_test(test_pv_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
