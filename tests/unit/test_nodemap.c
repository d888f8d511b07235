/* Unit tests for nodemap: local-path-provisioner's config.json, our extensions, every refusal. */
#include <errno.h>
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

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/nodemap.h"

static void test_local_path_provisioner_config(void **state)
{
    /* The example config of local-path-provisioner's README, unchanged. */
    const char *cfg = "{\n  \"nodePathMap\":[\n  {\n    \"node\":\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\n"
                      "    \"paths\":[\"/opt/local-path-provisioner\"]\n  },\n  {\n"
                      "    \"node\":\"yasker-lp-dev1\",\n    \"paths\":[\"/opt/local-path-provisioner\", "
                      "\"/data1\"]\n  },\n  {\n    \"node\":\"yasker-lp-dev3\",\n    \"paths\":[]\n  }\n  ]\n}\n";
    struct hp_nodemap m;
    char err[256];
    (void)state;
    /* Accepted as it is, "paths": [] included: that node keeps no volumes, as there. */
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m, err, sizeof(err)), 0);
    assert_int_equal(m.n, 3);
    assert_int_equal(hp_nodemap_for(&m, "yasker-lp-dev3")->npaths, 0);
    assert_int_equal(hp_nodemap_for(&m, "yasker-lp-dev1")->npaths, 2);
    hp_nodemap_free(&m);
    /* No "paths" key, or null: the same. */
    const char *none = "{\"nodePathMap\":[{\"node\":\"a\"},{\"node\":\"b\",\"paths\":null}]}";
    assert_int_equal(hp_nodemap_parse(none, strlen(none), &m, err, sizeof(err)), 0);
    assert_int_equal(hp_nodemap_for(&m, "a")->npaths, 0);
    assert_int_equal(hp_nodemap_for(&m, "b")->npaths, 0);
    hp_nodemap_free(&m);
    const char *ok = "{\"nodePathMap\":[{\"node\":\"DEFAULT_PATH_FOR_NON_LISTED_NODES\","
                     "\"paths\":[\"/opt/lpp\"]},{\"node\":\"n1\",\"paths\":[\"/opt/lpp/\","
                     "\"//data1\"]}]}";
    assert_int_equal(hp_nodemap_parse(ok, strlen(ok), &m, err, sizeof(err)), 0);
    assert_int_equal(m.n, 2);
    const struct hp_node_entry *e = hp_nodemap_for(&m, "n1");
    assert_string_equal(e->node, "n1");
    assert_int_equal(e->npaths, 2);
    assert_string_equal(e->paths[0].path, "/opt/lpp");
    assert_string_equal(e->paths[1].path, "/data1");
    assert_int_equal(e->paths[0].budget, 0);
    assert_int_equal(e->paths[0].allow_rootfs, 1);
    assert_string_equal(hp_nodemap_for(&m, "other")->node, HP_NODEMAP_DEFAULT_NODE);
    assert_string_equal(hp_nodemap_for(&m, NULL)->node, HP_NODEMAP_DEFAULT_NODE);
    hp_nodemap_free(&m);
}

static void test_extensions(void **state)
{
    const char *cfg = "{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/m/1\",\"/m/2\"],"
                      "\"capacity\":{\"/m/1\":\"900Gi\",\"/m/2/\":\"1.5Ti\"},"
                      "\"allowRootFilesystem\":{\"/m/2\":false}},"
                      "{\"node\":\"b\",\"paths\":[\"/x\"],\"allowRootFilesystem\":false}]}";
    struct hp_nodemap m, m2;
    char err[256];
    (void)state;
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m, err, sizeof(err)), 0);
    const struct hp_node_entry *a = hp_nodemap_for(&m, "a");
    assert_int_equal(a->paths[0].budget, 900ULL << 30);
    assert_int_equal(a->paths[1].budget, 3ULL << 39);
    assert_int_equal(a->paths[0].allow_rootfs, 1);
    assert_int_equal(a->paths[1].allow_rootfs, 0);
    assert_int_equal(hp_nodemap_for(&m, "b")->paths[0].allow_rootfs, 0);
    assert_null(hp_nodemap_for(&m, "c")); /* no default entry */
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m2, err, sizeof(err)), 0);
    assert_true(hp_nodemap_same_for(&m, &m2, "a"));
    m2.entries[0].paths[0].budget++;
    assert_false(hp_nodemap_same_for(&m, &m2, "a"));
    assert_true(hp_nodemap_same_for(&m, &m2, "b"));
    hp_nodemap_free(&m);
    hp_nodemap_free(&m2);
    hp_nodemap_single(&m, "/var/lib/hp");
    assert_string_equal(hp_nodemap_for(&m, "any")->paths[0].path, "/var/lib/hp");
    assert_true(hp_nodemap_for(&m, "any")->paths[0].overcommit == 1.0);
    hp_nodemap_free(&m);
    /* overcommit: one ratio for the entry, or per path; 1 by default; a change is a change. */
    const char *oc = "{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/m/1\",\"/m/2\"],"
                     "\"overcommit\":{\"/m/2\":2.5}},"
                     "{\"node\":\"b\",\"paths\":[\"/x\",\"/y\"],\"overcommit\":4}]}";
    assert_int_equal(hp_nodemap_parse(oc, strlen(oc), &m, err, sizeof(err)), 0);
    assert_true(hp_nodemap_for(&m, "a")->paths[0].overcommit == 1.0);
    assert_true(hp_nodemap_for(&m, "a")->paths[1].overcommit == 2.5);
    assert_true(hp_nodemap_for(&m, "b")->paths[0].overcommit == 4.0);
    assert_true(hp_nodemap_for(&m, "b")->paths[1].overcommit == 4.0);
    assert_int_equal(hp_nodemap_parse(oc, strlen(oc), &m2, err, sizeof(err)), 0);
    m2.entries[1].paths[1].overcommit = 3;
    assert_false(hp_nodemap_same_for(&m, &m2, "b"));
    hp_nodemap_free(&m);
    hp_nodemap_free(&m2);
    /* hardLimits: for every path of the entry, or per path; off by default (and with
     * --pv-dir alone); turning it on or off is a change of the map. */
    const char *hl = "{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/m/1\",\"/m/2\"],"
                     "\"hardLimits\":{\"/m/2/\":true}},"
                     "{\"node\":\"b\",\"paths\":[\"/x\",\"/y\"],\"hardLimits\":true},"
                     "{\"node\":\"c\",\"paths\":[\"/z\"],\"hardLimits\":false}]}";
    assert_int_equal(hp_nodemap_parse(hl, strlen(hl), &m, err, sizeof(err)), 0);
    assert_int_equal(hp_nodemap_for(&m, "a")->paths[0].hard_limits, 0);
    assert_int_equal(hp_nodemap_for(&m, "a")->paths[1].hard_limits, 1);
    assert_int_equal(hp_nodemap_for(&m, "b")->paths[0].hard_limits, 1);
    assert_int_equal(hp_nodemap_for(&m, "b")->paths[1].hard_limits, 1);
    assert_int_equal(hp_nodemap_for(&m, "c")->paths[0].hard_limits, 0);
    struct hp_node_entry roots;
    assert_int_equal(hp_nodemap_roots_for(&m, "a", &roots), 0);
    assert_int_equal(roots.paths[1].hard_limits, 1); /* what main probes and the roots get */
    hp_node_entry_free(&roots);
    assert_int_equal(hp_nodemap_parse(hl, strlen(hl), &m2, err, sizeof(err)), 0);
    assert_true(hp_nodemap_same_for(&m, &m2, "a"));
    m2.entries[0].paths[0].hard_limits = 1;
    assert_false(hp_nodemap_same_for(&m, &m2, "a"));
    hp_nodemap_free(&m);
    hp_nodemap_free(&m2);
    hp_nodemap_single(&m, "/var/lib/hp");
    assert_int_equal(hp_nodemap_for(&m, "any")->paths[0].hard_limits, 0);
    hp_nodemap_free(&m);
}

static void test_refusals(void **state)
{
    static const struct {
        const char *cfg;
        const char *words;
    } bad[] = {
        {"", "not JSON"},
        {"[]", "JSON object"},
        {"{}", "nodePathMap"},
        {"{\"nodePathMap\":[]}", "non-empty"},
        {"{\"nodePathMap\":{}}", "non-empty"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"sharedFileSystemPath\":\"/s\"}",
         "both \"nodePathMap\" and \"sharedFileSystemPath\" are set"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"setupCommand\":\"/s\"}",
         "setupCommand"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"teardownCommand\":\"/s\"}",
         "teardownCommand"},
        {"{\"nodePathMap\":5,\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\"}}}",
         "\"nodePathMap\" at the top must be a list of {node, paths} (it is ignored beside"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"whatever\":1}",
         "unknown key \"whatever\""},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"extra\":1}]}",
         "unknown key \"extra\""},
        {"{\"nodePathMap\":[{\"paths\":[\"/x\"]}]}", "no \"node\""},
        {"{\"nodePathMap\":[{\"node\":\"\",\"paths\":[\"/x\"]}]}", "non-empty string"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":\"/x\"}]}", "\"paths\" must be a list"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":{}}]}", "\"paths\" must be a list"},
        /* A key twice: JSON does not say which one wins, so neither does. */
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"nodePathMap\":[{\"node\":\"b\","
         "\"paths\":[\"/y\"]}]}", "\"nodePathMap\" appears twice"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"paths\":[\"/y\"]}]}",
         "key \"paths\" twice"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"node\":\"b\",\"paths\":[\"/x\"]}]}",
         "key \"node\" twice"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"rel\"]}]}", "\"rel\" is not an absolute"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/a/../b\"]}]}", "not an absolute"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/\"]}]}", "not an absolute"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[1]}]}", "not a string"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/a\",\"/a/b\"]}]}", "overlap"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/a\",\"/a/\"]}]}", "overlap"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]},{\"node\":\"a\",\"paths\":[\"/y\"]}]}",
         "listed twice"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":{\"/y\":\"1Gi\"}}]}",
         "not one of its paths"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":{\"/x\":\"lots\"}}]}",
         "not a quantity"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":{\"/x\":\"0\"}}]}",
         "more than 0"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"overcommit\":0.5}]}",
         "overcommit must be a number from 1 to 1000"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"overcommit\":\"3\"}]}",
         "overcommit must be a number"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"overcommit\":1e9}]}",
         "overcommit must be"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"overcommit\":{\"/y\":2}}]}",
         "overcommit for \"/y\": not one of its paths"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"overcommit\":{\"/x\":true}}]}",
         "overcommit for \"/x\": must be a number from 1 to 1000"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":{\"/x\":5}}]}",
         "not a string"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":[]}]}", "map paths"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"allowRootFilesystem\":\"no\"}]}",
         "true, false"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"allowRootFilesystem\":{\"/x\":0}}]}",
         "true or false"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"hardLimits\":\"yes\"}]}",
         "hardLimits must be true, false, or a map of paths to true/false"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"hardLimits\":{\"/x\":1}}]}",
         "hardLimits for \"/x\": must be true or false"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"hardLimits\":{\"/y\":true}}]}",
         "hardLimits for \"/y\": not one of its paths"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"hardLimits\":true,"
         "\"hardLimits\":true}]}",
         "key \"hardLimits\" twice"},
        {"{\"nodePathMap\":[{\"node\":\"a\\u0000\",\"paths\":[\"/x\"]}]}", "non-empty string"},
    };
    struct hp_nodemap m;
    char err[512];
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (hp_nodemap_parse(bad[i].cfg, strlen(bad[i].cfg), &m, err, sizeof(err)) != -EINVAL ||
            !strstr(err, bad[i].words))
            fail_msg("case %zu: err \"%s\", want \"%s\"", i, err, bad[i].words);
        assert_int_equal(m.n, 0);
        assert_null(m.entries);
    }
}

static void test_load(void **state)
{
    char path[] = "/tmp/hp-nodemap-XXXXXX", err[512];
    struct hp_nodemap m;
    (void)state;
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *cfg = "{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}]}";
    assert_int_equal(write(fd, cfg, strlen(cfg)), (ssize_t)strlen(cfg));
    close(fd);
    assert_int_equal(hp_nodemap_load(path, &m, err, sizeof(err)), 0);
    assert_int_equal(m.n, 1);
    hp_nodemap_free(&m);
    unlink(path);
    assert_int_equal(hp_nodemap_load(path, &m, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, path));
}

/* A FIFO (or anything but a file) as --config is refused at once: a blocking open would hang
 * the start with no word. */
static void test_load_refuses_fifo(void **state)
{
    char dir[] = "/tmp/hp-unit-nodemap-XXXXXX", fifo[64], err[256];
    struct hp_nodemap m;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/config.json", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(hp_nodemap_load(fifo, &m, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(hp_nodemap_load(dir, &m, err, sizeof(err)), -EINVAL);
    assert_int_equal(unlink(fifo), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* ---- sharedFileSystemPath and storageClassConfigs ---- */

/* local-path-provisioner's own config.json shapes, unchanged: its test/testdata fixtures and its
 * examples/shared-fs. */
static void test_lpp_shapes(void **state)
{
    /* custom-path-pattern, pod-with-perm-pattern, skip-path-pattern-check(-by-annotation) */
    const char *one = "{\n        \"storageClassConfigs\":{\n"
                      "               \"local-path-custom-path-pattern\": {\n"
                      "                      \"nodePathMap\": [\n                      {\n"
                      "                              \"node\":"
                      "\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\n"
                      "                              \"paths\":[\"/opt/local-path-provisioner\"]\n"
                      "                      }\n                      ]\n               }\n"
                      "        }\n}";
    /* multiple-storage-classes: note "sharedFilesystemPath", which Go's decoder matches */
    const char *two = "{\"storageClassConfigs\":{\"local-path\":{\"nodePathMap\":[{\"node\":"
                      "\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\"paths\":"
                      "[\"/opt/local-path-provisioner\"]}]},\"local-path-shared\":"
                      "{\"sharedFilesystemPath\":\"/opt/local-path-provisioner-shared\"}}}\n\n";
    const char *shared = "{\n  \"sharedFileSystemPath\": "
                         "\"/shared/fs/mounted/on/the/same/path/on/all/nodes\"\n}";
    struct hp_nodemap m;
    const struct hp_node_path *paths;
    size_t n;
    char err[512];
    (void)state;

    assert_int_equal(hp_nodemap_parse(one, strlen(one), &m, err, sizeof(err)), 0);
    assert_int_equal(m.nclasses, 1);
    assert_int_equal(m.n, 0);
    assert_null(m.shared);
    assert_null(hp_nodemap_for(&m, "kind-worker")); /* no top level: roots_for instead */
    assert_int_equal(hp_nodemap_class_paths(&m, "local-path-custom-path-pattern", "kind-worker",
                                            &paths, &n, err, sizeof(err)),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(paths[0].path, "/opt/local-path-provisioner");
    assert_int_equal(paths[0].shared, 0);
    assert_int_equal(hp_nodemap_class_shared(&m, "local-path-custom-path-pattern"), 0);
    /* Another class: not configured (there: "BUG: Got request for unexpected storage class"). */
    assert_int_equal(hp_nodemap_class_paths(&m, "local-path", "kind-worker", &paths, &n, err,
                                            sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "StorageClass \"local-path\" has no entry in storageClassConfigs "
                                "of --config (it has: local-path-custom-path-pattern)"));
    assert_null(paths);
    assert_int_equal(n, 0);
    assert_int_equal(hp_nodemap_class_shared(&m, "local-path"), -ENOENT);
    hp_nodemap_free(&m);

    assert_int_equal(hp_nodemap_parse(two, strlen(two), &m, err, sizeof(err)), 0);
    assert_int_equal(m.nclasses, 2);
    assert_int_equal(hp_nodemap_class_shared(&m, "local-path"), 0);
    assert_int_equal(hp_nodemap_class_shared(&m, "local-path-shared"), 1);
    assert_int_equal(hp_nodemap_class_paths(&m, "local-path-shared", "any", &paths, &n, err,
                                            sizeof(err)),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(paths[0].path, "/opt/local-path-provisioner-shared");
    assert_int_equal(paths[0].shared, 1);
    assert_int_equal(hp_nodemap_class_paths(&m, "local-path-shared", NULL, &paths, &n, err,
                                            sizeof(err)),
                     0);
    assert_int_equal(n, 1);
    struct hp_node_entry roots;
    assert_int_equal(hp_nodemap_roots_for(&m, "kind-worker", &roots), 0);
    assert_string_equal(roots.node, "kind-worker");
    assert_int_equal(roots.npaths, 2);
    assert_string_equal(roots.paths[0].path, "/opt/local-path-provisioner");
    assert_int_equal(roots.paths[0].shared, 0);
    assert_string_equal(roots.paths[1].path, "/opt/local-path-provisioner-shared");
    assert_int_equal(roots.paths[1].shared, 1);
    hp_node_entry_free(&roots);
    hp_nodemap_free(&m);

    assert_int_equal(hp_nodemap_parse(shared, strlen(shared), &m, err, sizeof(err)), 0);
    assert_int_equal(m.n, 0);
    assert_non_null(m.shared);
    assert_string_equal(m.shared->path, "/shared/fs/mounted/on/the/same/path/on/all/nodes");
    assert_int_equal(hp_nodemap_class_shared(&m, "local-path"), 1);
    assert_int_equal(hp_nodemap_class_shared(&m, NULL), 1);
    assert_int_equal(hp_nodemap_class_paths(&m, "whatever", "n1", &paths, &n, err, sizeof(err)),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(paths[0].shared, 1);
    assert_int_equal(hp_nodemap_roots_for(&m, NULL, &roots), 0);
    assert_string_equal(roots.node, HP_NODEMAP_DEFAULT_NODE);
    assert_int_equal(roots.npaths, 1);
    hp_node_entry_free(&roots);
    hp_nodemap_free(&m);

    /* The top level's nodePathMap: every class takes it (the class name is not looked at). */
    const char *top = "{\"nodePathMap\":[{\"node\":\"n1\",\"paths\":[\"/a\",\"/b\"]},"
                      "{\"node\":\"n2\",\"paths\":[]}],\"storageClassConfigs\":{},"
                      "\"sharedFileSystemPath\":\"\"}";
    assert_int_equal(hp_nodemap_parse(top, strlen(top), &m, err, sizeof(err)), 0);
    assert_int_equal(hp_nodemap_class_shared(&m, "x"), 0);
    assert_int_equal(hp_nodemap_class_paths(&m, "x", "n1", &paths, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(hp_nodemap_class_paths(&m, "x", "n2", &paths, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0); /* kept off the node */
    assert_int_equal(hp_nodemap_class_paths(&m, "x", "n3", &paths, &n, err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "the nodePathMap in --config has no entry for node \"n3\" and no "
                                "\"DEFAULT_PATH_FOR_NON_LISTED_NODES\" entry"));
    assert_int_equal(hp_nodemap_roots_for(&m, "n3", &roots), -ENOENT);
    assert_null(roots.node);
    assert_int_equal(hp_nodemap_roots_for(&m, "n2", &roots), 0);
    assert_int_equal(roots.npaths, 0);
    hp_node_entry_free(&roots);
    hp_nodemap_free(&m);
}

/* Per-class maps: our keys work in them; the roots of a node are the union; the queries. */
static void test_class_maps(void **state)
{
    const char *cfg =
        "{\"StorageClassConfigs\":{"
        "\"fast\":{\"NodePathMap\":[{\"Node\":\"n1\",\"Paths\":[\"/ssd/a\",\"/ssd/b/\"],"
        "\"capacity\":{\"/ssd/a\":\"100Gi\"},\"allowRootFilesystem\":false},"
        "{\"node\":\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\"paths\":[\"/var/lib/fast\"]}]},"
        "\"slow\":{\"nodePathMap\":[{\"node\":\"n1\",\"paths\":[\"/hdd\",\"/ssd/a\"],"
        "\"capacity\":{\"/ssd/a\":\"100Gi\"},\"allowRootFilesystem\":{\"/ssd/a\":false}},"
        "{\"node\":\"n2\",\"paths\":[]}]},"
        "\"nfs\":{\"sharedFileSystemPath\":\"//mnt//nfs/\"}}}";
    struct hp_nodemap m;
    const struct hp_node_path *paths;
    size_t n;
    char err[512];
    (void)state;
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m, err, sizeof(err)), 0);
    assert_int_equal(m.nclasses, 3);
    assert_int_equal(hp_nodemap_class_paths(&m, "fast", "n1", &paths, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_string_equal(paths[1].path, "/ssd/b");
    assert_int_equal(paths[0].budget, 100ULL << 30);
    assert_int_equal(paths[0].allow_rootfs, 0);
    assert_int_equal(hp_nodemap_class_paths(&m, "fast", "n9", &paths, &n, err, sizeof(err)), 0);
    assert_string_equal(paths[0].path, "/var/lib/fast");
    assert_int_equal(hp_nodemap_class_paths(&m, "slow", "n2", &paths, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    assert_int_equal(hp_nodemap_class_paths(&m, "slow", "n9", &paths, &n, err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "the nodePathMap of StorageClass \"slow\" in --config has no "
                                "entry for node \"n9\""));
    assert_int_equal(hp_nodemap_class_paths(&m, "nfs", "n9", &paths, &n, err, sizeof(err)), 0);
    assert_string_equal(paths[0].path, "/mnt/nfs");
    assert_int_equal(hp_nodemap_class_paths(&m, NULL, "n1", &paths, &n, err, sizeof(err)),
                     -ENOENT);

    /* n1, class by class in name order: fast's two, nfs's shared one, slow's /hdd (its /ssd/a
     * is fast's, named once). */
    struct hp_node_entry r;
    assert_int_equal(hp_nodemap_roots_for(&m, "n1", &r), 0);
    assert_int_equal(r.npaths, 4);
    assert_string_equal(r.paths[0].path, "/ssd/a");
    assert_int_equal(r.paths[0].budget, 100ULL << 30);
    assert_string_equal(r.paths[1].path, "/ssd/b");
    assert_string_equal(r.paths[2].path, "/mnt/nfs");
    assert_int_equal(r.paths[2].shared, 1);
    assert_string_equal(r.paths[3].path, "/hdd");
    assert_int_equal(r.paths[3].shared, 0);
    hp_node_entry_free(&r);
    /* n2: slow keeps off it; fast's default and the shared path remain. */
    assert_int_equal(hp_nodemap_roots_for(&m, "n2", &r), 0);
    assert_int_equal(r.npaths, 2);
    assert_string_equal(r.paths[0].path, "/var/lib/fast");
    hp_node_entry_free(&r);

    /* Reload: what changed for which node. */
    struct hp_nodemap m2;
    assert_int_equal(hp_nodemap_parse(cfg, strlen(cfg), &m2, err, sizeof(err)), 0);
    assert_true(hp_nodemap_same_for(&m, &m2, "n1"));
    m2.classes[2].entries[0].paths[0].budget = 1; /* slow (sorted: fast, nfs, slow), n1 */
    assert_false(hp_nodemap_same_for(&m, &m2, "n1"));
    assert_true(hp_nodemap_same_for(&m, &m2, "n2"));
    m2.classes[1].shared->path[1] = 'x'; /* nfs's path: every node */
    assert_false(hp_nodemap_same_for(&m, &m2, "n2"));
    hp_nodemap_free(&m2);
    const char *fewer =
        "{\"storageClassConfigs\":{\"nfs\":{\"sharedFileSystemPath\":\"/mnt/nfs\"}}}";
    assert_int_equal(hp_nodemap_parse(fewer, strlen(fewer), &m2, err, sizeof(err)), 0);
    assert_false(hp_nodemap_same_for(&m, &m2, "n9"));
    assert_null(m2.ignored);
    hp_nodemap_free(&m2);
    hp_nodemap_free(&m);

    /* local-path-provisioner's Helm chart keeps its default nodePathMap beside the
     * storageClassConfigs a user sets: the top level is ignored, there as here, and named. */
    static const struct {
        const char *cfg, *ignored;
    } top[] = {
        {"{\"nodePathMap\":[{\"node\":\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\"paths\":"
         "[\"/opt/local-path-provisioner\"]}],\"storageClassConfigs\":{\"c\":{"
         "\"sharedFileSystemPath\":\"/s\"}}}",
         "nodePathMap"},
        {"{\"sharedFileSystemPath\":\"/t\",\"storageClassConfigs\":{\"c\":{"
         "\"sharedFileSystemPath\":\"/s\"}}}",
         "sharedFileSystemPath"},
        {"{\"sharedFileSystemPath\":\"/t\",\"nodePathMap\":[{\"node\":\"x\",\"paths\":"
         "[\"rel\"]}],\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\"}}}",
         "nodePathMap and sharedFileSystemPath"},
        {"{\"nodePathMap\":[],\"sharedFileSystemPath\":\"\",\"storageClassConfigs\":{\"c\":{"
         "\"sharedFileSystemPath\":\"/s\"}}}",
         NULL},
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(top); i++) {
        assert_int_equal(hp_nodemap_parse(top[i].cfg, strlen(top[i].cfg), &m2, err, sizeof(err)),
                         0);
        assert_int_equal(m2.nclasses, 1);
        assert_int_equal(m2.n, 0);
        assert_null(m2.shared);
        if (top[i].ignored)
            assert_string_equal(m2.ignored, top[i].ignored);
        else
            assert_null(m2.ignored);
        hp_nodemap_free(&m2);
    }
}

static void test_class_refusals(void **state)
{
    static const struct {
        const char *cfg;
        const char *words;
    } bad[] = {
        {"{}", "must set \"nodePathMap\" (a non-empty list of {node, paths}), "
               "\"sharedFileSystemPath\" or \"storageClassConfigs\""},
        {"{\"nodePathMap\":[],\"sharedFileSystemPath\":\"\",\"storageClassConfigs\":null}",
         "must set"},
        {"{\"sharedFileSystemPath\":\"/s\",\"nodePathMap\":[{\"node\":\"a\",\"paths\":[]}]}",
         "both \"nodePathMap\" and \"sharedFileSystemPath\" are set; only one may be (set "
         "\"nodePathMap\" to [] for a shared path)"},
        {"{\"sharedFileSystemPath\":[],\"storageClassConfigs\":{\"c\":"
         "{\"sharedFileSystemPath\":\"/t\"}}}",
         "\"sharedFileSystemPath\" at the top must be a path"},
        {"{\"sharedFileSystemPath\":\"rel\"}", "sharedFileSystemPath \"rel\" is not an absolute"},
        {"{\"sharedFileSystemPath\":\"/\"}", "sharedFileSystemPath \"/\" is not an absolute"},
        {"{\"sharedFileSystemPath\":\"//\"}", "is not an absolute"},
        {"{\"sharedFileSystemPath\":\"/a/../b\"}", "\"/a/../b\" is not an absolute"},
        {"{\"sharedFileSystemPath\":\"/a\\nb\"}", "sharedFileSystemPath \"/a?b\""},
        {"{\"sharedFileSystemPath\":\"/a\\u0000b\"}", "is not an absolute"},
        {"{\"sharedFileSystemPath\":5}", "\"sharedFileSystemPath\" must be a path"},
        {"{\"sharedFileSystemPath\":[\"/s\"]}", "\"sharedFileSystemPath\" must be a path"},
        {"{\"sharedFileSystemPath\":\"/s\",\"SharedFileSystemPath\":\"/t\"}",
         "the key \"sharedFileSystemPath\" appears twice"},
        {"{\"storageClassConfigs\":[]}", "\"storageClassConfigs\" must map StorageClass names"},
        {"{\"storageClassConfigs\":\"x\"}", "must map StorageClass names"},
        {"{\"storageClassConfigs\":{\"c\":[]}}",
         "storageClassConfigs: class \"c\": must be an object with \"nodePathMap\" or "
         "\"sharedFileSystemPath\""},
        {"{\"storageClassConfigs\":{\"c\":{}}}",
         "storageClassConfigs: class \"c\": neither \"nodePathMap\" (a non-empty list of {node, "
         "paths}) nor \"sharedFileSystemPath\" is set"},
        {"{\"storageClassConfigs\":{\"c\":{\"nodePathMap\":[],\"sharedFileSystemPath\":\"\"}}}",
         "class \"c\": neither"},
        {"{\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\",\"nodePathMap\":"
         "[{\"node\":\"n\",\"paths\":[\"/p\"]}]}}}",
         "storageClassConfigs: class \"c\": both \"nodePathMap\" and \"sharedFileSystemPath\" are "
         "set"},
        {"{\"storageClassConfigs\":{\"c\":{\"nodePathMap\":{}}}}",
         "class \"c\": \"nodePathMap\" must be a non-empty list"},
        {"{\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\",\"capacity\":{}}}}",
         "class \"c\": unknown key \"capacity\" (known: nodePathMap, sharedFileSystemPath)"},
        {"{\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\","
         "\"sharedfilesystempath\":\"/t\"}}}",
         "class \"c\": the key \"sharedfilesystempath\" appears twice"},
        {"{\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"x\"}}}",
         "storageClassConfigs: class \"c\": sharedFileSystemPath \"x\" is not an absolute"},
        {"{\"storageClassConfigs\":{\"c\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/a\","
         "\"/a/b\"]}]}}}",
         "storageClassConfigs: class \"c\": nodePathMap: node \"n\": paths /a and /a/b overlap"},
        {"{\"storageClassConfigs\":{\"c\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/a\"]},"
         "{\"node\":\"n\",\"paths\":[\"/b\"]}]}}}",
         "class \"c\": nodePathMap: node \"n\" is listed twice"},
        {"{\"storageClassConfigs\":{\"\":{\"sharedFileSystemPath\":\"/s\"}}}",
         "a class name must be a non-empty string"},
        {"{\"storageClassConfigs\":{\"c\\u0000\":{\"sharedFileSystemPath\":\"/s\"}}}",
         "a class name must be a non-empty string"},
        {"{\"storageClassConfigs\":{\"c\":{\"sharedFileSystemPath\":\"/s\"},"
         "\"c\":{\"sharedFileSystemPath\":\"/s\"}}}",
         "storageClassConfigs: class \"c\" is listed twice"},
        {"{\"storageClassConfigs\":{\"c\\n\":{\"nodePathMap\":5}}}", "class \"c?\": "},
        /* Across classes: one directory is one root; roots never nest, on any node. */
        {"{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/x\"]}]},"
         "\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/x/y\"]}]}}}",
         "storageClassConfigs: /x (class \"a\") and /x/y (class \"b\") overlap on n: a volume "
         "root must not lie inside another"},
        {"{\"storageClassConfigs\":{\"a\":{\"sharedFileSystemPath\":\"/s\"},"
         "\"b\":{\"nodePathMap\":[{\"node\":\"DEFAULT_PATH_FOR_NON_LISTED_NODES\","
         "\"paths\":[\"/s/n\"]}]}}}",
         "/s (class \"a\") and /s/n (class \"b\") overlap on the nodes no class lists"},
        {"{\"storageClassConfigs\":{\"a\":{\"sharedFileSystemPath\":\"/s\"},"
         "\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/s\"]}]}}}",
         "classes \"a\" and \"b\" both use /s on n but one as a shared path, one as a node's"},
        {"{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/x\"],"
         "\"capacity\":{\"/x\":\"1Gi\"}}]},\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":"
         "[\"/x\"]}]}}}",
         "both use /x on n but with another capacity, allowRootFilesystem, overcommit or "
         "hardLimits"},
        {"{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/x\"],"
         "\"allowRootFilesystem\":false}]},\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":"
         "[\"/x\"]}]}}}",
         "another capacity, allowRootFilesystem, overcommit or hardLimits"},
        {"{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":[\"/x\"],"
         "\"hardLimits\":true}]},\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":"
         "[\"/x\"]}]}}}",
         "both use /x on n but with another capacity, allowRootFilesystem, overcommit or "
         "hardLimits"},
        /* only on one node: a's default and b's n1 */
        {"{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":"
         "\"DEFAULT_PATH_FOR_NON_LISTED_NODES\",\"paths\":[\"/m\"]},{\"node\":\"n2\",\"paths\":"
         "[\"/o\"]}]},\"b\":{\"nodePathMap\":[{\"node\":\"n2\",\"paths\":[\"/m/x\"]},"
         "{\"node\":\"n1\",\"paths\":[\"/m/x\"]}]}}}",
         "/m (class \"a\") and /m/x (class \"b\") overlap on n1"},
        /* Its other keys, matched ignoring case as its decoder does. */
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"SetupCommand\":\"/s\"}",
         "\"SetupCommand\" (a local-path-provisioner setting) is not supported"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"cmdTimeoutSeconds\":5}",
         "\"cmdTimeoutSeconds\" (a local-path-provisioner setting) is not supported"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"nodePathMap\\u0000\":[]}",
         "unknown key \"nodePathMap\" (known: nodePathMap, sharedFileSystemPath, "
         "storageClassConfigs)"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"Node\":\"b\",\"paths\":[\"/x\"]}]}",
         "key \"node\" twice"},
    };
    struct hp_nodemap m;
    char err[512];
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (hp_nodemap_parse(bad[i].cfg, strlen(bad[i].cfg), &m, err, sizeof(err)) != -EINVAL ||
            !strstr(err, bad[i].words))
            fail_msg("case %zu: err \"%s\", want \"%s\"", i, err, bad[i].words);
        for (const char *c = err; *c; c++)
            if ((unsigned char)*c < 0x20)
                fail_msg("case %zu: control character in \"%s\"", i, err);
        assert_int_equal(m.n, 0);
        assert_null(m.entries);
        assert_null(m.shared);
        assert_null(m.classes);
        assert_int_equal(m.nclasses, 0);
    }
    /* Fine: two classes on one path with the same options, and on disjoint paths. */
    const char *ok = "{\"storageClassConfigs\":{\"a\":{\"nodePathMap\":[{\"node\":\"n\","
                     "\"paths\":[\"/x\"]}]},\"b\":{\"nodePathMap\":[{\"node\":\"n\",\"paths\":"
                     "[\"/x/\",\"/xy\"]}]},\"c\":{\"sharedFileSystemPath\":\"/s\"},"
                     "\"d\":{\"sharedFileSystemPath\":\"/s\"}}}";
    assert_int_equal(hp_nodemap_parse(ok, strlen(ok), &m, err, sizeof(err)), 0);
    struct hp_node_entry r;
    assert_int_equal(hp_nodemap_roots_for(&m, "n", &r), 0);
    assert_int_equal(r.npaths, 3); /* /x, /xy, /s */
    hp_node_entry_free(&r);
    hp_nodemap_free(&m);
}

/* A large map (many classes and nodes) is read, checked across classes, and answered. */
static void test_large_class_map(void **state)
{
    struct hp_buf b;
    struct hp_nodemap m;
    char err[512];
    (void)state;
    hp_buf_init(&b, 0);
    (void)hp_buf_appends(&b, "{\"storageClassConfigs\":{");
    for (int c = 0; c < 100; c++) {
        (void)hp_buf_printf(&b, "%s\"class-%d\":{\"nodePathMap\":[", c ? "," : "", c);
        for (int k = 0; k < 300; k++) /* each class lists the nodes in another order */
            (void)hp_buf_printf(&b, "%s{\"node\":\"node-%d\",\"paths\":[\"/d/c%d\"]}",
                                k ? "," : "", (k * 7 + c) % 300, c);
        (void)hp_buf_appends(&b, "]}");
    }
    (void)hp_buf_appends(&b, "}}");
    assert_int_equal(hp_nodemap_parse(b.data, b.len, &m, err, sizeof(err)), 0);
    assert_int_equal(m.nclasses, 100);
    const struct hp_node_path *paths;
    size_t n;
    assert_int_equal(hp_nodemap_class_paths(&m, "class-42", "node-299", &paths, &n, err,
                                            sizeof(err)),
                     0);
    assert_string_equal(paths[0].path, "/d/c42");
    struct hp_node_entry r;
    assert_int_equal(hp_nodemap_roots_for(&m, "node-7", &r), 0);
    assert_int_equal(r.npaths, 100);
    hp_node_entry_free(&r);
    hp_nodemap_free(&m);
    /* The same, with one nested path on one node: found. */
    hp_buf_reset(&b);
    (void)hp_buf_appends(&b, "{\"storageClassConfigs\":{");
    for (int c = 0; c < 100; c++) {
        (void)hp_buf_printf(&b, "%s\"class-%d\":{\"nodePathMap\":[", c ? "," : "", c);
        for (int k = 0; k < 300; k++) {
            char path[32];
            (void)snprintf(path, sizeof(path), c == 99 && k == 150 ? "/d/c0/x" : "/d/c%d", c);
            (void)hp_buf_printf(&b, "%s{\"node\":\"node-%d\",\"paths\":[\"%s\"]}", k ? "," : "",
                                k, path);
        }
        (void)hp_buf_appends(&b, "]}");
    }
    (void)hp_buf_appends(&b, "}}");
    assert_int_equal(hp_nodemap_parse(b.data, b.len, &m, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "overlap on node-150"));
    hp_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_refuses_fifo),
        cmocka_unit_test(test_local_path_provisioner_config),
        cmocka_unit_test(test_extensions),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_lpp_shapes),
        cmocka_unit_test(test_class_maps),
        cmocka_unit_test(test_class_refusals),
        cmocka_unit_test(test_large_class_map),
    };
    return cmocka_run_group_tests_name("nodemap", tests, NULL, NULL);
}
