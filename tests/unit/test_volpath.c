/* Unit tests for volpath: the check of a relative volume path, root + rel, and an absolute path
 * made relative to a root. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/volpath.h"

static void test_validate(void **state)
{
    static const struct {
        const char *rel;
        int ok;
    } cases[] = {
        {"a", 1},     {"a/b/c", 1},    {"a.b", 1},   {"..a", 1},       {"a..", 1},  {"...", 1},
        {".a/b.", 1}, {"\xc3\xa9", 1}, {"", 0},      {"/a", 0},        {"/", 0},    {"a//b", 0},
        {"a/", 0},    {".", 0},        {"..", 0},    {"a/./b", 0},     {"a/..", 0}, {"../a", 0},
        {"\n", 0},    {"a\tb", 0},     {"a\x7f", 0}, {"a\x1b[31m", 0}, {"//", 0},
    };
    static char buf[5000];
    char err[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        int rc = hp_volpath_validate(cases[i].rel, err, sizeof(err));
        if ((rc == 0) != cases[i].ok || (rc != 0 && rc != -EINVAL) || (rc != 0 && !err[0]))
            fail_msg("case %zu \"%s\": rc=%d", i, cases[i].rel, rc);
    }
    assert_int_equal(hp_volpath_validate(NULL, err, sizeof(err)), -EINVAL);
    /* Component and total length limits: -ENAMETOOLONG. */
    memset(buf, 'x', 256);
    buf[255] = '\0';
    assert_int_equal(hp_volpath_validate(buf, err, sizeof(err)), 0);
    buf[255] = 'x';
    buf[256] = '\0';
    assert_int_equal(hp_volpath_validate(buf, err, sizeof(err)), -ENAMETOOLONG);
    assert_non_null(strstr(err, "256 bytes long; at most 255"));
    for (i = 0; i < 4096; i++)
        buf[i] = (i % 200 == 199) ? '/' : 'x';
    buf[4096] = '\0';
    assert_int_equal(hp_volpath_validate(buf, err, sizeof(err)), 0);
    buf[4096] = 'x';
    buf[4097] = '\0';
    assert_int_equal(hp_volpath_validate(buf, err, sizeof(err)), -ENAMETOOLONG);
    assert_non_null(strstr(err, "4097 bytes long; at most 4096"));
}

/* A reason quotes the path, cut and with its control characters replaced: one line. */
static void test_validate_messages(void **state)
{
    static char buf[300];
    char err[256];

    (void)state;
    assert_int_equal(hp_volpath_validate("", err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "path is empty");
    assert_int_equal(hp_volpath_validate("/etc", err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "path \"/etc\" is absolute; it must be relative to the volume root");
    assert_int_equal(hp_volpath_validate("a/../b", err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "path \"a/../b\" has a \"..\" component");
    assert_int_equal(hp_volpath_validate("a\nb", err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "path \"a?b\" contains control character 0x0a at offset 1");
    memset(buf, 'y', 100);
    buf[100] = '\n';
    buf[101] = '\0';
    assert_int_equal(hp_volpath_validate(buf, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "yyy...\" contains control character 0x0a at offset 100"));
    /* No buffer: the answer alone. */
    assert_int_equal(hp_volpath_validate("a//b", NULL, 0), -EINVAL);
    assert_int_equal(hp_volpath_validate("a/b", NULL, 0), 0);
}

static void test_join_and_relative(void **state)
{
    static const struct {
        const char *base, *abs, *want; /* want NULL: -EINVAL */
    } cases[] = {
        {"/srv/v", "/srv/v/x", "x"},
        {"/srv/v", "/srv/v/x/y", "x/y"},
        {"/srv/v/", "/srv/v/x", "x"},
        {"/srv/v//", "/srv//v/x", "x"},
        {"/srv/v", "/srv/v/x/", "x"},
        {"/srv/v", "/srv/v//x", "x"},
        {"/", "/x", "x"},
        {"/", "/x/y", "x/y"},
        {"/srv/v", "/srv/v2/x", NULL},
        {"/srv/v2", "/srv/v/x", NULL},
        {"/srv/v", "/srv/vx", NULL},
        {"/srv/v", "/srv/v", NULL},
        {"/srv/v", "/srv/v/", NULL},
        {"/srv/v", "/srv", NULL},
        {"/srv/v", "/", NULL},
        {"/", "/", NULL},
        {"/srv/v", "/srv/v/../x", NULL},
        {"/srv/v", "/srv/v/x/..", NULL},
        {"/srv/v", "/srv/v/x/../../etc", NULL},
        /* "." is the same directory (a PV may be written so: it must be seen where it is). */
        {"/srv/v", "/srv/v/./x", "x"},
        {"/srv/v", "/srv/./v/x", "x"},
        {"/srv/v", "/srv/v/x/./y/.", "x/y"},
        {"/", "/./x", "x"},
        {"/srv/v", "/srv/v/.", NULL},
        {"/srv/v", "/srv/v/./../x", NULL},
        {"/srv/../srv/v", "/srv/../srv/v/x", NULL},
        {"/srv/v", "srv/v/x", NULL},
        {"srv/v", "/srv/v/x", NULL},
        {"", "/x", NULL},
        {"/srv/v", "", NULL},
        {"/srv/v", "/other/x", NULL},
        /* Inside, but not a valid volume path (hp_volpath_validate). */
        {"/srv/v", "/srv/v/a\x01b", NULL},
        {"/srv/v", "/srv/v/a\nb", NULL},
    };
    char out[64];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc;
        memset(out, 'X', sizeof(out));
        rc = hp_volpath_relative(cases[i].base, cases[i].abs, out, sizeof(out));
        if (cases[i].want ? (rc != 0 || strcmp(out, cases[i].want) != 0) : rc != -EINVAL)
            fail_msg("case %zu base=\"%s\" abs=\"%s\": rc=%d out=\"%.20s\"", i, cases[i].base,
                     cases[i].abs, rc, out);
    }
    assert_int_equal(hp_volpath_relative(NULL, "/x", out, sizeof(out)), -EINVAL);
    assert_int_equal(hp_volpath_relative("/srv/v", "/srv/v/abcdefgh", out, 5), -ENAMETOOLONG);
    assert_int_equal(hp_volpath_relative("/srv/v", "/srv/v/abcd", out, 5), 0);
    assert_string_equal(out, "abcd");

    char *p = hp_volpath_join("/srv/v", "a/b");
    assert_string_equal(p, "/srv/v/a/b");
    free(p);
    p = hp_volpath_join("/", "a");
    assert_string_equal(p, "/a");
    free(p);
    /* Round trip. */
    p = hp_volpath_join("/srv/v", "ns-claim-pvc-1/data");
    assert_int_equal(hp_volpath_relative("/srv/v", p, out, sizeof(out)), 0);
    assert_string_equal(out, "ns-claim-pvc-1/data");
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_validate_messages),
        cmocka_unit_test(test_join_and_relative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
