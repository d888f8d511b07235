/* Unit tests for metrics: exact exposition lines after a sequence of updates. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>

#include "hostpath/common.h"
#include "hostpath/metrics.h"

static char *render(void)
{
    struct hp_buf b;
    hp_buf_init(&b, 0);
    hp_metrics_render(&b);
    return hp_buf_steal(&b);
}

/* True when text holds line as a whole line. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    }
    return 0;
}

#define assert_line(text, line)                                                                    \
    do {                                                                                           \
        if (!has_line((text), (line)))                                                             \
            fail_msg("missing line: %s\n--- output ---\n%s", (line), (text));                      \
    } while (0)

#define assert_no_line(text, line)                                                                 \
    do {                                                                                           \
        if (has_line((text), (line)))                                                              \
            fail_msg("unexpected line: %s", (line));                                               \
    } while (0)

/* Value of the sample line that starts with "prefix " (name plus labels); fails when absent. */
static double sample_value(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') {
            char *end;
            double v = strtod(p + n + 1, &end);
            if (end == p + n + 1 || (*end != '\n' && *end != '\0'))
                fail_msg("unparsable value for %s", prefix);
            return v;
        }
    }
    fail_msg("missing sample %s", prefix);
    return 0;
}

static int count_occurrences(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

static int setup(void **state)
{
    hp_metrics_init();
    return 0;
}

static int teardown(void **state)
{
    hp_metrics_free();
    return 0;
}

static const char *const families[][2] = {
    {"controller_persistentvolumeclaim_provision_total", "counter"},
    {"controller_persistentvolumeclaim_provision_failed_total", "counter"},
    {"controller_persistentvolumeclaim_provision_duration_seconds", "histogram"},
    {"controller_persistentvolume_delete_total", "counter"},
    {"controller_persistentvolume_delete_failed_total", "counter"},
    {"controller_persistentvolume_delete_duration_seconds", "histogram"},
    {"workqueue_depth", "gauge"},
    {"workqueue_adds_total", "counter"},
    {"workqueue_retries_total", "counter"},
    {"hostpath_watch_restarts_total", "counter"},
    {"hostpath_watch_relists_total", "counter"},
    {"hostpath_watch_malformed_events_total", "counter"},
    {"rest_client_requests_total", "counter"},
    {"leader_election_master_status", "gauge"},
    {"hostpath_filesystem_errors_total", "counter"},
    {"hostpath_events_total", "counter"},
    {"hostpath_event_write_failures_total", "counter"},
    {"hostpath_build_info", "gauge"},
    {"process_cpu_seconds_total", "counter"},
    {"process_max_fds", "gauge"},
    {"process_open_fds", "gauge"},
    {"process_resident_memory_bytes", "gauge"},
    {"process_virtual_memory_bytes", "gauge"},
    {"process_start_time_seconds", "gauge"},
};

static void test_empty_has_every_family(void **state)
{
    char *t = render();
    char line[256];

    for (size_t i = 0; i < HP_ARRAY_SIZE(families); i++) {
        snprintf(line, sizeof(line), "# TYPE %s %s", families[i][0], families[i][1]);
        assert_line(t, line);
        snprintf(line, sizeof(line), "# HELP %s ", families[i][0]);
        assert_int_equal(count_occurrences(t, line), 1);
    }
    /* A counter without labels reads 0; labelled families have no samples yet. */
    assert_line(t, "hostpath_event_write_failures_total 0");
    assert_null(strstr(t, "workqueue_depth{"));
    assert_null(strstr(t, "_bucket{"));
    /* Every line is a comment or a sample "name[{...}] value". */
    for (char *p = t; *p;) {
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        assert_true(nl > p);
        if (*p != '#')
            assert_non_null(memchr(p, ' ', (size_t)(nl - p)));
        p = nl + 1;
    }
    free(t);
}

static void test_counters_and_gauges(void **state)
{
    hp_metrics_workqueue_add("claims");
    hp_metrics_workqueue_add("claims");
    hp_metrics_workqueue_add("volumes");
    hp_metrics_workqueue_retry("claims");
    hp_metrics_watch_restart("persistentvolumeclaims");
    hp_metrics_watch_relist("persistentvolumes");
    hp_metrics_watch_relist("persistentvolumes");
    hp_metrics_watch_malformed("storageclasses");
    hp_metrics_api_request("POST", 201);
    hp_metrics_api_request("POST", 201);
    hp_metrics_api_request("GET", 0);
    hp_metrics_api_request("PUT", 409);
    hp_metrics_leader("hostpath-provisioner.io", 1);
    hp_metrics_leader("hostpath-provisioner.io", 0);
    hp_metrics_fs_error("mkdir", -ENOSPC);
    hp_metrics_fs_error("mkdir", ENOSPC);
    hp_metrics_fs_error("remove", -EACCES);
    hp_metrics_event("Normal", "ProvisioningSucceeded", 1);
    hp_metrics_event("Warning", "ProvisioningFailed", 1);
    hp_metrics_event("Warning", "ProvisioningFailed", 1);
    hp_metrics_event("Warning", "ProvisioningFailed", 0);
    hp_metrics_delete("fast", 0, 0.5);

    char *t = render();
    assert_line(t, "workqueue_adds_total{name=\"claims\"} 2");
    assert_line(t, "workqueue_adds_total{name=\"volumes\"} 1");
    assert_line(t, "workqueue_retries_total{name=\"claims\"} 1");
    assert_no_line(t, "workqueue_retries_total{name=\"volumes\"} 0");
    assert_line(t, "hostpath_watch_restarts_total{resource=\"persistentvolumeclaims\"} 1");
    assert_line(t, "hostpath_watch_relists_total{resource=\"persistentvolumes\"} 2");
    assert_line(t, "hostpath_watch_malformed_events_total{resource=\"storageclasses\"} 1");
    assert_line(t, "rest_client_requests_total{code=\"201\",method=\"POST\"} 2");
    assert_line(t, "rest_client_requests_total{code=\"<error>\",method=\"GET\"} 1");
    assert_line(t, "rest_client_requests_total{code=\"409\",method=\"PUT\"} 1");
    assert_line(t, "leader_election_master_status{name=\"hostpath-provisioner.io\"} 0");
    assert_line(t, "hostpath_filesystem_errors_total{operation=\"mkdir\",errno=\"ENOSPC\"} 2");
    assert_line(t, "hostpath_filesystem_errors_total{operation=\"remove\",errno=\"EACCES\"} 1");
    assert_line(t, "hostpath_events_total{type=\"Normal\",reason=\"ProvisioningSucceeded\"} 1");
    assert_line(t, "hostpath_events_total{type=\"Warning\",reason=\"ProvisioningFailed\"} 2");
    assert_line(t, "hostpath_event_write_failures_total 1");
    assert_line(t, "controller_persistentvolume_delete_failed_total{class=\"fast\"} 1");
    /* A failed delete is not timed (as in the sig-storage library). */
    assert_null(strstr(t, "controller_persistentvolume_delete_duration_seconds_count{"));
    assert_null(strstr(t, "controller_persistentvolume_delete_total{"));
    /* Series are sorted by label values: claims before volumes. */
    assert_true(strstr(t, "workqueue_adds_total{name=\"claims\"}") <
                strstr(t, "workqueue_adds_total{name=\"volumes\"}"));
    free(t);
}

/* Collectors: samples of a registry family under its header (several share it, in the order
 * they were added), whole families after the registry's, removal, and an unknown family. */
static void depth_a(struct hp_buf *out, void *data)
{
    (void)hp_buf_printf(out, "workqueue_depth{name=\"a\"} %d\n", *(int *)data);
}

static void depth_b(struct hp_buf *out, void *data)
{
    (void)hp_buf_appends(out, "workqueue_depth{name=\"b\"} 1\n");
}

static void own_family(struct hp_buf *out, void *data)
{
    (void)hp_buf_appends(out, "# HELP x_total X.\n# TYPE x_total counter\nx_total 5\n");
}

static void test_collectors(void **state)
{
    int depth = 7;

    assert_int_equal(hp_metrics_add_collector("no_such_family", depth_a, &depth), -ENOENT);
    assert_int_equal(hp_metrics_add_collector("workqueue_depth", depth_a, &depth), 0);
    assert_int_equal(hp_metrics_add_collector("workqueue_depth", depth_b, NULL), 0);
    assert_int_equal(hp_metrics_add_collector(NULL, own_family, NULL), 0);
    char *t = render();
    const char *type = strstr(t, "# TYPE workqueue_depth gauge\n");
    assert_non_null(type);
    const char *a = strstr(t, "\nworkqueue_depth{name=\"a\"} 7\n");
    const char *b = strstr(t, "\nworkqueue_depth{name=\"b\"} 1\n");
    const char *next = strstr(type, "# HELP workqueue_adds_total");
    assert_true(a && b && next);
    assert_true(type < a && a < b && b < next); /* under its header, in order */
    assert_int_equal(count_occurrences(t, "# HELP workqueue_depth "), 1);
    assert_true(strstr(t, "\nx_total 5\n") < strstr(t, "# HELP hostpath_build_info"));
    assert_true(strstr(t, "\nx_total 5\n") > strstr(t, "# HELP hostpath_path_on_root"));
    free(t);

    depth = 3; /* read at scrape time */
    hp_metrics_remove_collector(depth_b, NULL);
    hp_metrics_remove_collector(own_family, NULL);
    t = render();
    assert_line(t, "workqueue_depth{name=\"a\"} 3");
    assert_null(strstr(t, "workqueue_depth{name=\"b\"}"));
    assert_null(strstr(t, "x_total"));
    free(t);
    /* hp_metrics_free (teardown) drops depth_a. */
}

static void test_histogram(void **state)
{
    hp_metrics_provision("fast", "ext", 1, 0.003); /* le 0.005 */
    hp_metrics_provision("fast", "ext", 1, 0.005); /* le 0.005 (inclusive) */
    hp_metrics_provision("fast", "ext", 1, 0.2);   /* le 0.25 */
    hp_metrics_provision("fast", "ext", 1, 42);    /* only +Inf */
    hp_metrics_provision("fast", "ext", 0, 99);    /* failure: counted, not timed */
    hp_metrics_provision("slow", "ext", 0, 1);
    hp_metrics_delete("fast", 1, 1.5);

    char *t = render();
    const char *p = "controller_persistentvolumeclaim_provision_duration_seconds";
    char line[512];
    static const struct {
        const char *le;
        int n;
    } want[] = {{"0.005", 2}, {"0.01", 2}, {"0.025", 2}, {"0.05", 2}, {"0.1", 2}, {"0.25", 3},
                {"0.5", 3},   {"1", 3},    {"2.5", 3},   {"5", 3},    {"10", 3},  {"+Inf", 4}};
    for (size_t i = 0; i < HP_ARRAY_SIZE(want); i++) {
        snprintf(line, sizeof(line), "%s_bucket{class=\"fast\",source=\"ext\",le=\"%s\"} %d", p,
                 want[i].le, want[i].n);
        assert_line(t, line);
    }
    snprintf(line, sizeof(line), "%s_bucket{class=\"fast\",source=\"ext\",le=", p);
    assert_int_equal(count_occurrences(t, line), 12);
    snprintf(line, sizeof(line), "%s_count{class=\"fast\",source=\"ext\"} 4", p);
    assert_line(t, line);
    snprintf(line, sizeof(line), "%s_sum{class=\"fast\",source=\"ext\"}", p);
    assert_float_equal(sample_value(t, line), 0.003 + 0.005 + 0.2 + 42, 1e-9);
    assert_line(
        t, "controller_persistentvolumeclaim_provision_total{class=\"fast\",source=\"ext\"} 4");
    assert_line(t, "controller_persistentvolumeclaim_provision_failed_total{class=\"fast\","
                   "source=\"ext\"} 1");
    assert_line(t, "controller_persistentvolumeclaim_provision_failed_total{class=\"slow\","
                   "source=\"ext\"} 1");
    /* No histogram series for a class that only failed. */
    assert_null(strstr(t, "provision_duration_seconds_count{class=\"slow\""));

    assert_line(t, "controller_persistentvolume_delete_duration_seconds_bucket{class=\"fast\","
                   "le=\"1\"} 0");
    assert_line(t, "controller_persistentvolume_delete_duration_seconds_bucket{class=\"fast\","
                   "le=\"2.5\"} 1");
    assert_line(t, "controller_persistentvolume_delete_duration_seconds_sum{class=\"fast\"} 1.5");
    assert_line(t, "controller_persistentvolume_delete_duration_seconds_count{class=\"fast\"} 1");
    assert_line(t, "controller_persistentvolume_delete_total{class=\"fast\"} 1");
    free(t);
}

static void test_label_escaping(void **state)
{
    hp_metrics_workqueue_add("a\\b\"c\nd");
    hp_metrics_workqueue_add("a\\b\"c\nd");
    hp_metrics_event("Warning", "", 1);
    hp_metrics_provision(NULL, NULL, 0, 0);
    hp_metrics_leader("x", 7);

    char *t = render();
    assert_line(t, "workqueue_adds_total{name=\"a\\\\b\\\"c\\nd\"} 2");
    assert_line(t, "hostpath_events_total{type=\"Warning\",reason=\"\"} 1");
    assert_line(t, "controller_persistentvolumeclaim_provision_failed_total{class=\"\","
                   "source=\"\"} 1");
    assert_line(t, "leader_election_master_status{name=\"x\"} 1");
    free(t);
}

/* Label values that share a concatenation must stay separate series. */
static void test_distinct_label_sets(void **state)
{
    hp_metrics_event("ab", "c", 1);
    hp_metrics_event("a", "bc", 1);
    hp_metrics_event("a", "bc", 1);
    char *t = render();
    assert_line(t, "hostpath_events_total{type=\"ab\",reason=\"c\"} 1");
    assert_line(t, "hostpath_events_total{type=\"a\",reason=\"bc\"} 2");
    free(t);
}

/* Many label sets and many updates: all counted, and large counts print exactly. */
static void test_many_series(void **state)
{
    char name[32];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 200; i++) {
            snprintf(name, sizeof(name), "q%03d", i);
            hp_metrics_workqueue_add(name);
        }
    }
    for (int i = 0; i < 100000; i++)
        hp_metrics_api_request("GET", 200);
    char *t = render();
    assert_int_equal(count_occurrences(t, "workqueue_adds_total{name=\"q"), 200);
    assert_line(t, "workqueue_adds_total{name=\"q000\"} 3");
    assert_line(t, "workqueue_adds_total{name=\"q199\"} 3");
    assert_line(t, "rest_client_requests_total{code=\"200\",method=\"GET\"} 100000");
    free(t);
}

/* Cardinality is capped: past the cap new label sets are dropped, old ones still count. */
static void test_cardinality_cap(void **state)
{
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof(name), "c%05d", i);
        hp_metrics_delete(name, 0, 0);
    }
    hp_metrics_delete("c00000", 0, 0);
    char *t = render();
    int n = count_occurrences(t, "controller_persistentvolume_delete_failed_total{class=");
    assert_true(n >= 100 && n < 3000);
    assert_line(t, "controller_persistentvolume_delete_failed_total{class=\"c00000\"} 2");
    free(t);
}

static void test_process_metrics(void **state)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    char *t = render();
    double rss = sample_value(t, "process_resident_memory_bytes");
    double vsz = sample_value(t, "process_virtual_memory_bytes");
    double cpu = sample_value(t, "process_cpu_seconds_total");
    double start = sample_value(t, "process_start_time_seconds");
    double fds = sample_value(t, "process_open_fds");
    double maxfds = sample_value(t, "process_max_fds");
    assert_true(rss > 64 * 1024 && rss < 4.0 * 1024 * 1024 * 1024);
    assert_true(vsz >= rss);
    assert_true(cpu >= 0 && cpu < 3600);
    /* Started within the last hour, not in the future (1 s slack for clock-tick rounding). */
    assert_true(start <= (double)tv.tv_sec + 1 && start > (double)tv.tv_sec - 3600);
    assert_true(fds >= 3 && fds <= maxfds);
    free(t);
}

/* hostpath_build_info{version,commit} 1: the version of meson.build (HP_VERSION) and a short
 * commit id (hex) or "unknown", on exactly one sample line, whatever else has been recorded. */
static void test_build_info(void **state)
{
    hp_metrics_provision("c", "s", 1, 0.1);
    char *t = render();
    const char *prefix = "hostpath_build_info{version=\"" HP_VERSION "\",commit=\"";
    const char *p = strstr(t, prefix);
    if (!p)
        fail_msg("missing hostpath_build_info with version %s\n--- output ---\n%s", HP_VERSION, t);
    assert_true(p == t || p[-1] == '\n');
    assert_int_equal(count_occurrences(t, "\nhostpath_build_info{"), 1);
    const char *commit = p + strlen(prefix);
    const char *end = strstr(commit, "\"} 1\n");
    assert_non_null(end);
    size_t n = (size_t)(end - commit);
    if (!(n == 7 && strncmp(commit, "unknown", 7) == 0)) {
        assert_true(n >= 4 && n <= 40);
        assert_int_equal(strspn(commit, "0123456789abcdef"), n);
    }
    free(t);
}

/* init after use and free with series still present leave no leaks (checked by ASan). */
static void test_init_free_cycle(void **state)
{
    for (int i = 0; i < 3; i++) {
        hp_metrics_provision("c", "s", 1, 0.1);
        hp_metrics_delete("c", 1, 0.1);
        hp_metrics_fs_error("chown", -EPERM);
        hp_metrics_init();
        char *t = render();
        assert_null(strstr(t, "controller_persistentvolume_delete_total{"));
        free(t);
    }
    hp_metrics_free();
    hp_metrics_free(); /* idempotent */
    hp_metrics_workqueue_add("after-free");
    char *t = render();
    assert_line(t, "workqueue_adds_total{name=\"after-free\"} 1");
    free(t);
}

/* The render appends: existing content is kept. */
static void test_render_appends(void **state)
{
    struct hp_buf b;
    hp_buf_init(&b, 0);
    hp_buf_appends(&b, "prefix\n");
    hp_metrics_render(&b);
    assert_int_equal(strncmp(b.data, "prefix\n# HELP ", 14), 0);
    assert_int_equal(b.data[b.len - 1], '\n');
    hp_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_has_every_family, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counters_and_gauges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collectors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_histogram, setup, teardown),
        cmocka_unit_test_setup_teardown(test_label_escaping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_distinct_label_sets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_series, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cardinality_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_process_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_free_cycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_render_appends, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
