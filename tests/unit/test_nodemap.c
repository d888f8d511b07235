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
         "\"sharedFileSystemPath\" (a local-path-provisioner setting) is not supported"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"setupCommand\":\"/s\"}",
         "setupCommand"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"teardownCommand\":\"/s\"}",
         "teardownCommand"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"]}],\"storageClassConfigs\":{}}",
         "storageClassConfigs"},
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
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":{\"/x\":5}}]}",
         "not a string"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"capacity\":[]}]}", "map paths"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"allowRootFilesystem\":\"no\"}]}",
         "true, false"},
        {"{\"nodePathMap\":[{\"node\":\"a\",\"paths\":[\"/x\"],\"allowRootFilesystem\":{\"/x\":0}}]}",
         "true or false"},
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_refuses_fifo),
        cmocka_unit_test(test_local_path_provisioner_config),
        cmocka_unit_test(test_extensions),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests_name("nodemap", tests, NULL, NULL);
}
