/* Unit tests for the controller's rooms, through their shared private header: the decisions
 * that need no API server -- placement (hp__place: the roomiest path that fits, every path's
 * numbers when none does, exclusions, a nodePath the node lacks, hard limits required or not
 * enforceable now, and what ctl_quota.c hands requests), which root a path lies under
 * (hp__root_of: the innermost), who works on the disks (hp__works_on_disks), the op types
 * (what a give-up says, and where), and capacity publishing's numbers and names
 * (hp__place_room, hp__capacity_*). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "controller_internal.h"
#include "hostpath/buf.h"
#include "hostpath/config.h"
#include "hostpath/nodemap.h"

#define GI (1024ULL * 1024 * 1024)

/* A controller holding only roots (what the pure functions read). */
struct fx {
    struct hp_controller c;
    struct hp_config cfg;
    struct root r[4];
    struct root *rp[4];
};

static void add(struct fx *f, const char *path, uint64_t budget, uint64_t reserved,
                uint64_t fs_size, uint64_t fs_free)
{
    struct root *r = &f->r[f->c.nroots];
    memset(r, 0, sizeof(*r));
    r->c = &f->c;
    r->path = (char *)path;
    r->budget = budget;
    r->reserved = reserved;
    r->allow_rootfs = 1;
    r->journal_loaded = 1;
    r->stats.ok = 1;
    r->stats.size = fs_size;
    r->stats.free = fs_free;
    f->rp[f->c.nroots++] = r;
}

static void fx_init(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    f->c.cfg = &f->cfg;
    f->c.roots = f->rp;
}

static void test_place(void **state)
{
    struct fx f;
    struct root *out;
    char why[2048];
    struct hp_class_params p;
    (void)state;
    fx_init(&f);
    memset(&p, 0, sizeof(p));
    add(&f, "/mnt/a", 10 * GI, 8 * GI, 100 * GI, 90 * GI); /* 2 Gi left of its budget */
    add(&f, "/mnt/b", 0, 0, 50 * GI, 5 * GI);              /* 5 Gi free on its disk */
    add(&f, "/mnt/c", 0, 0, 500 * GI, 400 * GI);
    f.r[2].retired = 1;                                     /* roomy, but retired */
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[1]); /* the roomiest that fits */
    assert_int_equal(hp__place(&f.c, "fast", &p, 3 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[1]);
    assert_int_equal(hp__place(&f.c, "fast", &p, 6 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_null(out);
    assert_non_null(strstr(why, "/mnt/a"));
    assert_non_null(strstr(why, "/mnt/b"));
    assert_null(strstr(why, "/mnt/c")); /* a retired path is not a candidate */
    /* Exclusions are reasons, not room. */
    f.r[1].fs_moved = 1;
    f.r[0].journal_loaded = 0;
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "is its disk mounted?"));
    assert_non_null(strstr(why, "is being read"));
    f.r[1].fs_moved = 0;
    f.r[0].journal_loaded = 1;
    /* nodePath: that path only, even a retired one; one the node lacks is -ENOENT. */
    p.node_path = "/mnt/c";
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "no longer in --config"));
    p.node_path = "/mnt/a/";
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[0]);
    p.node_path = "/mnt/z";
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), -ENOENT);
    assert_non_null(strstr(why, "nodePath=\"/mnt/z\" is not one of this node's paths "
                                "(/mnt/a, /mnt/b)"));
    /* No path at all. */
    f.c.nroots = 0;
    p.node_path = NULL;
    assert_int_equal(hp__place(&f.c, "fast", &p, 1, &out, why, sizeof(why)), -ENOSPC);
}

/* Hard limits: a class that requires them goes only to a path that has them; a path that has
 * them but cannot enforce them now (its scan's probe said so) takes nothing, whatever the class;
 * the lowest new project ID is above every one a record names; a probe that can enforce is kept
 * for later requests, one that cannot is not. */
static void test_place_hard_limits(void **state)
{
    struct fx f;
    struct root *out;
    char why[2048];
    struct hp_class_params p;
    (void)state;
    fx_init(&f);
    memset(&p, 0, sizeof(p));
    add(&f, "/mnt/plain", 0, 0, 500 * GI, 400 * GI); /* the roomiest */
    add(&f, "/mnt/quota", 0, 0, 50 * GI, 40 * GI);
    f.r[1].hard_limits = 1;
    assert_int_equal(hp__place(&f.c, "c", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[0]);
    p.hard_limits = HP_HARD_LIMITS_REQUIRED;
    assert_int_equal(hp__place(&f.c, "c", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[1]);
    assert_int_equal(hp__place(&f.c, "c", &p, 45 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "/mnt/plain has no hard limits (\"hardLimits\" in --config), "
                                "which the StorageClass requires"));
    assert_non_null(strstr(why, "/mnt/quota has 40Gi free"));

    /* A scan whose probe failed: excluded for every class, with the probe's words. */
    struct hp_fsop *scan = hp_fsop_new(HP_FSOP_SCAN, "/mnt/quota");
    hp__quota_request(&f.c, &f.r[1], scan, NULL);
    assert_int_equal(scan->hard_limits, 1);
    assert_null(scan->quota_fs); /* nothing probed yet to copy */
    scan->quota_status = -ESRCH;
    scan->quota_msg = strdup("xfs at /mnt/quota (/dev/vdb) is not mounted with project quotas");
    hp__quota_seen(&f.c, &f.r[1], scan);
    hp_fsop_free(scan);
    assert_int_equal(hp__place(&f.c, "c", &p, 1 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "/mnt/quota cannot enforce its hard limits now: xfs at "
                                "/mnt/quota (/dev/vdb) is not mounted with project quotas"));
    p.hard_limits = HP_HARD_LIMITS_OPTIONAL;
    assert_int_equal(hp__place(&f.c, "c", &p, 450 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "/mnt/quota cannot enforce"));
    /* A later scan that can: placed again; its probe kept, and copied into requests. */
    scan = hp_fsop_new(HP_FSOP_SCAN, "/mnt/quota");
    hp__quota_request(&f.c, &f.r[1], scan, NULL);
    scan->quota_fs = calloc(1, sizeof(*scan->quota_fs));
    scan->quota_fs->kind = HP_QUOTA_XFS;
    scan->quota_fs->flags = 0x30; /* accounting and enforcement */
    scan->quota_fs->dev = 42;
    scan->records = calloc(2, sizeof(*scan->records));
    scan->nrecords = 2;
    scan->records[0].project_id = 1000007;
    scan->records[1].project_id = 1000003;
    hp__quota_seen(&f.c, &f.r[1], scan);
    hp_fsop_free(scan);
    assert_null(f.r[1].quota_err);
    assert_non_null(f.r[1].quota_fs);
    assert_int_equal(f.r[1].quota_fs->dev, 42);
    assert_int_equal(f.c.quota_id_max, 1000007);
    p.hard_limits = HP_HARD_LIMITS_REQUIRED;
    assert_int_equal(hp__place(&f.c, "c", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[1]);
    f.c.index = hp_volindex_new(); /* no record of pvc-x: a new volume */
    struct hp_fsop *prov = hp_fsop_new(HP_FSOP_PROVISION, "/mnt/quota");
    hp__quota_request(&f.c, &f.r[1], prov, "pvc-x");
    assert_int_equal(prov->hard_limits, 1);
    assert_int_equal(prov->quota_hint, 1000008);
    assert_non_null(prov->quota_fs);
    assert_int_equal(prov->quota_fs->dev, 42);
    hp_fsop_free(prov);
    /* A request on the plain path touches no project: no copy. */
    prov = hp_fsop_new(HP_FSOP_PROVISION, "/mnt/plain");
    hp__quota_request(&f.c, &f.r[0], prov, "pvc-y");
    assert_int_equal(prov->hard_limits, 0);
    assert_null(prov->quota_fs);
    hp_fsop_free(prov);
    /* ... unless its record names a project (a volume made while the path had them). */
    struct hp_record rec = {.path = "y", .pv = "pvc-y", .claim_uid = "u", .project_id = 5};
    hp_volindex_put_record(f.c.index, &rec);
    prov = hp_fsop_new(HP_FSOP_RELEASE, "/mnt/quota");
    hp__quota_request(&f.c, &f.r[1], prov, "pvc-y");
    assert_non_null(prov->quota_fs);
    hp_fsop_free(prov);
    hp_volindex_free(f.c.index);
    hp__quota_root_free(&f.r[1]);
}

/* With storageClassConfigs, a class is placed on its own paths only; a class --config does not
 * list has none. */
static void test_place_class_paths(void **state)
{
    static const char cfg[] =
        "{\"storageClassConfigs\": {"
        " \"fast\": {\"nodePathMap\": [{\"node\": \"DEFAULT_PATH_FOR_NON_LISTED_NODES\","
        "                              \"paths\": [\"/mnt/b\"]}]},"
        " \"slow\": {\"nodePathMap\": [{\"node\": \"DEFAULT_PATH_FOR_NON_LISTED_NODES\","
        "                              \"paths\": [\"/mnt/a\"]}]}}}";
    struct fx f;
    struct hp_nodemap m;
    struct hp_class_params p;
    struct root *out;
    char why[2048];
    (void)state;
    fx_init(&f);
    memset(&p, 0, sizeof(p));
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m, why, sizeof(why)), 0);
    f.c.map = &m;
    add(&f, "/mnt/a", 0, 0, 100 * GI, 90 * GI); /* the roomiest, but slow's */
    add(&f, "/mnt/b", 0, 0, 50 * GI, 5 * GI);
    assert_int_equal(hp__place(&f.c, "fast", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[1]);
    assert_int_equal(hp__place(&f.c, "slow", &p, 1 * GI, &out, why, sizeof(why)), 0);
    assert_ptr_equal(out, &f.r[0]);
    assert_int_equal(hp__place(&f.c, "fast", &p, 6 * GI, &out, why, sizeof(why)), -ENOSPC);
    assert_null(strstr(why, "/mnt/a"));
    assert_int_equal(hp__place(&f.c, "other", &p, 1, &out, why, sizeof(why)), -ENOENT);
    /* What capacity publishing says follows the same paths. */
    uint64_t total, largest, sig;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 5 * GI);
    assert_int_equal(largest, 5 * GI);
    hp__place_room(&f.c, "slow", &p, &total, &largest, &sig);
    assert_int_equal(largest, 90 * GI);
    hp__place_room(&f.c, "other", &p, &total, &largest, &sig);
    assert_int_equal(total, 0);
    assert_int_equal(largest, 0);
    assert_int_equal(hp__class_shared(&f.c, "fast"), 0);
    assert_int_equal(hp__class_shared(&f.c, "other"), -ENOENT);
    hp_nodemap_free(&m);
}

static void test_root_of_innermost(void **state)
{
    struct fx f;
    char rel[256];
    (void)state;
    fx_init(&f);
    add(&f, "/data", 0, 0, GI, GI);
    add(&f, "/data/inner", 0, 0, GI, GI); /* a retired root holding a current one */
    add(&f, "/other", 0, 0, GI, GI);
    assert_ptr_equal(hp__root_of(&f.c, "/data/inner/vol", rel, sizeof(rel)), &f.r[1]);
    assert_string_equal(rel, "vol");
    assert_ptr_equal(hp__root_of(&f.c, "/data/vol", rel, sizeof(rel)), &f.r[0]);
    assert_string_equal(rel, "vol");
    assert_ptr_equal(hp__root_of(&f.c, "/data/innerx/v", rel, sizeof(rel)), &f.r[0]);
    assert_string_equal(rel, "innerx/v");
    assert_null(hp__root_of(&f.c, "/data", rel, sizeof(rel))); /* strictly inside */
    assert_null(hp__root_of(&f.c, "/elsewhere/v", rel, sizeof(rel)));
    assert_ptr_equal(hp__root_named(&f.c, "/other"), &f.r[2]);
    assert_null(hp__root_named(&f.c, "/other/"));
}

static void test_works_on_disks(void **state)
{
    struct fx f;
    (void)state;
    fx_init(&f);
    f.c.node_held = 1;
    /* One disk shared by replicas (no --node-name): the leader only. */
    assert_false(hp__works_on_disks(&f.c, NULL));
    f.c.leading = 1;
    assert_true(hp__works_on_disks(&f.c, NULL));
    /* Per node: its own node's volumes, leader or not; the node lease decides between
     * replicas of one node. */
    f.c.leading = 0;
    f.cfg.node_name = "node-a";
    assert_true(hp__works_on_disks(&f.c, "node-a"));
    assert_false(hp__works_on_disks(&f.c, NULL));
    /* A shared root is the leader's only, per node too. */
    struct root shared = {.shared = 1};
    assert_false(hp__works_on_root(&f.c, &shared, "node-a"));
    f.c.leading = 1;
    assert_true(hp__works_on_root(&f.c, &shared, "node-a"));
    f.c.node_held = 0;
    assert_false(hp__works_on_disks(&f.c, "node-a"));
    assert_false(hp__works_on_root(&f.c, &shared, "node-a"));
}

static void test_op_types(void **state)
{
    static const struct op_type *const types[] = {&hp__op_provision, &hp__op_cleanup,
                                                  &hp__op_delete,    &hp__op_finalize,
                                                  &hp__op_migrate,   &hp__op_orphan,
                                                  &hp__op_expand};
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(types); i++) {
        assert_non_null(types[i]->name);
        assert_non_null(types[i]->give_up_reason);
        /* Only a provisioning speaks to its claim; the rest to their PV. */
        assert_int_equal(types[i]->give_up_on_claim, types[i] == &hp__op_provision);
        assert_int_equal(types[i]->settles_record, types[i] == &hp__op_orphan);
    }
    assert_string_equal(hp__op_provision.give_up_reason, "ProvisioningFailed");
    assert_string_equal(hp__op_delete.give_up_reason, "VolumeFailedDelete");
    assert_non_null(hp__op_provision.metrics);
    assert_non_null(hp__op_delete.metrics);
}

/* What placement could grant: the roomiest path for the largest volume, the sum of all for the
 * total, a filesystem shared by paths counted once, exclusions and nodePath as hp__place. */
static void test_place_room(void **state)
{
    struct fx f;
    struct hp_class_params p;
    uint64_t total, largest, sig, sig2;
    struct root *out;
    char why[1024];
    (void)state;
    fx_init(&f);
    memset(&p, 0, sizeof(p));
    add(&f, "/mnt/a", 1 * GI, 0, 100 * GI, 90 * GI);  /* budget 1 Gi */
    add(&f, "/mnt/b", 3 * GI, 1 * GI, 100 * GI, 90 * GI); /* 2 Gi left */
    add(&f, "/mnt/c", 10 * GI, 0, 100 * GI, 90 * GI); /* 10 Gi */
    f.r[2].retired = 1;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 3 * GI); /* a retired path takes nothing */
    assert_int_equal(largest, 2 * GI);
    /* The largest is what hp__place accepts, and no more. */
    assert_int_equal(hp__place(&f.c, "fast", &p, largest, &out, why, sizeof(why)), 0);
    assert_int_equal(hp__place(&f.c, "fast", &p, largest + 1, &out, why, sizeof(why)), -ENOSPC);
    /* Accounting moves the signature; free bytes alone do not. */
    f.r[1].reserved += GI;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig2);
    assert_int_not_equal(sig, sig2);
    assert_int_equal(total, 2 * GI);
    assert_int_equal(largest, 1 * GI);
    f.r[0].stats.free = 89 * GI;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(sig, sig2);
    /* An excluded path (its journal not read yet) counts for nothing. */
    f.r[0].journal_loaded = 0;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 1 * GI);
    assert_int_not_equal(sig, sig2);
    f.r[0].journal_loaded = 1;
    /* nodePath: that path only (a retired one offers nothing; an unknown one neither). */
    p.node_path = "/mnt/a";
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 1 * GI);
    assert_int_equal(largest, 1 * GI);
    p.node_path = "/mnt/c";
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 0);
    assert_int_equal(largest, 0);
    p.node_path = "/mnt/z";
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 0);
    p.node_path = NULL;

    /* Two paths on one disk without budgets: the disk's free bytes once, not twice; with
     * budgets, their sum bounded by the free bytes. */
    fx_init(&f);
    add(&f, "/disk/x", 0, 0, 10 * GI, 6 * GI);
    add(&f, "/disk/y", 0, 0, 10 * GI, 6 * GI);
    add(&f, "/other", 0, 0, 4 * GI, 3 * GI);
    for (int i = 0; i < 3; i++) {
        f.r[i].fs_known = 1;
        f.r[i].fs.dev = i < 2 ? 7 : 8;
    }
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 6 * GI + 3 * GI);
    assert_int_equal(largest, 6 * GI);
    f.r[0].budget = 2 * GI;
    f.r[1].budget = 1 * GI;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 3 * GI + 3 * GI);
    assert_int_equal(largest, 3 * GI); /* /other, 3 Gi free */
    /* Unknown filesystems are not merged. */
    f.r[0].fs_known = f.r[1].fs_known = 0;
    f.r[0].budget = f.r[1].budget = 0;
    hp__place_room(&f.c, "fast", &p, &total, &largest, &sig);
    assert_int_equal(total, 6 * GI + 6 * GI + 3 * GI);
}

static void test_capacity_names(void **state)
{
    char why[512], out[300];
    (void)state;
    /* The provisioner-name rule: a lower-case DNS subdomain of at most 63 characters. */
    assert_int_equal(hp__capacity_driver_name_ok("hostpath-provisioner.io", why, sizeof(why)), 0);
    assert_int_equal(hp__capacity_driver_name_ok("a", why, sizeof(why)), 0);
    assert_int_equal(hp__capacity_driver_name_ok("x.y-z.example.com", why, sizeof(why)), 0);
    assert_int_equal(hp__capacity_driver_name_ok("rancher.io/local-path", why, sizeof(why)),
                     -EINVAL);
    assert_non_null(strstr(why, "'/' at position 11"));
    assert_int_equal(hp__capacity_driver_name_ok("example.com/hostpath", why, sizeof(why)),
                     -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("Upper.io", why, sizeof(why)), -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("-a.io", why, sizeof(why)), -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("a-.io", why, sizeof(why)), -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("a..io", why, sizeof(why)), -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("a.io.", why, sizeof(why)), -EINVAL);
    assert_int_equal(hp__capacity_driver_name_ok("", why, sizeof(why)), -EINVAL);
    char long_name[80];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    assert_int_equal(hp__capacity_driver_name_ok(long_name, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "64 characters"));
    long_name[63] = '\0';
    assert_int_equal(hp__capacity_driver_name_ok(long_name, why, sizeof(why)), 0);

    /* Object names: readable, a DNS subdomain, apart for every (node, class). */
    char other[300];
    hp__capacity_object_name("node-a", "local", out, sizeof(out));
    assert_int_equal(strncmp(out, "node-a-local-", 13), 0);
    assert_int_equal(strlen(out), 13 + 8);
    hp__capacity_object_name("node-a-local", "", other, sizeof(other));
    assert_string_not_equal(out, other);
    hp__capacity_object_name("node", "a-local", other, sizeof(other));
    assert_string_not_equal(out, other);
    hp__capacity_object_name("Node_X.example.com", "Fast.Class", out, sizeof(out));
    assert_int_equal(strncmp(out, "node-x-example-com-fast-class-", 30), 0);
    memset(long_name, 'n', 79);
    long_name[79] = '\0';
    hp__capacity_object_name(long_name, long_name, out, sizeof(out));
    assert_true(strlen(out) <= 253);
    for (const char *s = out; *s; s++)
        assert_true((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-');

    /* managed-by: external-provisioner's shape, a label value even for a long node name. */
    hp__capacity_managed_by("node-a", out, sizeof(out));
    assert_string_equal(out, "hostpath-provisioner-node-a");
    hp__capacity_managed_by(long_name, out, sizeof(out));
    assert_int_equal(strlen(out), 63);
    assert_int_equal(strncmp(out, "hostpath-provisioner-nnn", 24), 0);
    hp__capacity_managed_by("nnnn", other, sizeof(other));
    assert_string_not_equal(out, other);
}

static void test_capacity_differs(void **state)
{
    (void)state;
    /* The accounting changed: any difference is written. */
    assert_false(hp__capacity_differs(5 * GI, 5 * GI, 1));
    assert_true(hp__capacity_differs(5 * GI, 5 * GI - 1, 1));
    /* Only free bytes moved: 1 % or 1 GiB. */
    assert_false(hp__capacity_differs(100 * GI, 100 * GI - 512 * 1024 * 1024ULL, 0));
    assert_true(hp__capacity_differs(500 * GI, 499 * GI, 0));
    assert_false(hp__capacity_differs(10 * GI, 10 * GI + 100 * 1024 * 1024ULL, 0));
    assert_true(hp__capacity_differs(10 * GI, 10 * GI + 110 * 1024 * 1024ULL, 0));
    assert_true(hp__capacity_differs(1024, 0, 0)); /* full */
    assert_true(hp__capacity_differs(0, 1024, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_place_class_paths),
        cmocka_unit_test(test_place_hard_limits),
        cmocka_unit_test(test_root_of_innermost),
        cmocka_unit_test(test_works_on_disks),
        cmocka_unit_test(test_op_types),
        cmocka_unit_test(test_place_room),
        cmocka_unit_test(test_capacity_names),
        cmocka_unit_test(test_capacity_differs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
