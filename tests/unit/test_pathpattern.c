/* Unit tests for pathpattern: template rendering and the keys a pattern reads (the rendered
 * path's check is volpath's: test_volpath.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/objects.h"
#include "hostpath/buf.h"
#include "hostpath/pathpattern.h"

/* Packed maps: "k\0v\0...\0". Values are chosen so that no "\0" is followed by an octal digit. */
static const char annotations[] = "example.com/dir\0fast\0"
                                  "dots\0..\0"
                                  "dot\0.\0"
                                  "up\0../x\0"
                                  "abs\0/abs\0"
                                  "mid\0a/../b\0"
                                  "empty\0\0"
                                  "nl\0line\nbreak\0"
                                  "ctl\0a\x01z\0"
                                  "del\0a\x7fz\0"
                                  "dotted\0a..b\0"
                                  "team.example/owner\0alice\0";
static const char labels[] = "app\0web\0tier\0gold\0";

static struct hp_claim claim;
static const char *pv = "pvc-1234";

static void setup_claim(void)
{
    memset(&claim, 0, sizeof(claim));
    claim.namespace_ = "ns-a";
    claim.name = "data";
    claim.uid = "1234";
    claim.annotations = annotations;
    claim.labels = labels;
}

struct render_case {
    const char *pattern;
    const char *want; /* NULL: expect failure */
    int rc;
    const char *err_has;
};

static void run_render_cases(const struct render_case *cases, size_t n)
{
    size_t i;
    char out[8192], err[512];

    setup_claim();
    for (i = 0; i < n; i++) {
        const struct render_case *c = &cases[i];
        int rc;
        const char *e;

        memset(out, 'X', sizeof(out));
        err[0] = '\0';
        rc = hp_pathpattern_render(c->pattern, &claim, pv, out, sizeof(out), err, sizeof(err));
        if (rc != c->rc || (c->want && strcmp(out, c->want) != 0) ||
            (c->err_has && !strstr(err, c->err_has)))
            fail_msg("case %zu pattern \"%.80s\": rc=%d (want %d) out=\"%.80s\" want=\"%s\" "
                     "err=\"%s\" want err containing \"%s\"",
                     i, c->pattern, rc, c->rc, out, c->want ? c->want : "(error)", err,
                     c->err_has ? c->err_has : "");
        if (rc != 0) {
            assert_int_equal(out[0], '\0');
            assert_true(err[0] != '\0');
            /* One line: hostile values never put a control character into the reason. */
            for (e = err; *e; e++)
                assert_true((unsigned char)*e >= 0x20 && (unsigned char)*e != 0x7f);
        }
    }
}

static void test_render_ok(void **state)
{
    static const struct render_case cases[] = {
        {HP_DEFAULT_PATH_PATTERN, "ns-a-data-pvc-1234", 0, NULL},
        {"{{.PVName}}", "pvc-1234", 0, NULL},
        {"{{ .PVName }}", "pvc-1234", 0, NULL},
        {"{{\t.PVName\t}}", "pvc-1234", 0, NULL},
        {"{{.PVC.Namespace}}/{{.PVC.Name}}", "ns-a/data", 0, NULL},
        {"{{ .PVC.Namespace }}/{{ .PVC.Name }}", "ns-a/data", 0, NULL},
        {"{{.PVC.Annotations.example.com/dir}}/{{.PVName}}", "fast/pvc-1234", 0, NULL},
        {"{{ .PVC.Annotations.example.com/dir }}", "fast", 0, NULL},
        {"{{index .PVC.Annotations \"example.com/dir\"}}", "fast", 0, NULL},
        {"{{ index  .PVC.Annotations   \"team.example/owner\" }}-{{.PVName}}", "alice-pvc-1234", 0,
         NULL},
        {"{{ index .PVC.Labels `app` }}", "web", 0, NULL},
        {"{{.PVC.Labels.app}}-{{.PVC.Labels.tier}}", "web-gold", 0, NULL},
        {"{{.PVC.Annotations.dotted}}", "a..b", 0, NULL},
        {"static/dir", "static/dir", 0, NULL},
        {"a {{- .PVName}}", "apvc-1234", 0, NULL},
        {"{{.PVName -}}   b", "pvc-1234b", 0, NULL},
        {"x-{{.PVC.Annotations.empty}}-y", "x--y", 0, NULL},
        {"{ {.PVName} }", "{ {.PVName} }", 0, NULL},
    };
    (void)state;
    run_render_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_render_hostile_values(void **state)
{
    static const struct render_case cases[] = {
        {"{{.PVC.Annotations.dots}}", NULL, -EINVAL, "\"..\" component"},
        {"x/{{.PVC.Annotations.dots}}/y", NULL, -EINVAL, "\"..\" component"},
        {"{{.PVC.Annotations.dot}}", NULL, -EINVAL, "\".\" component"},
        {"{{.PVC.Annotations.up}}", NULL, -EINVAL, "contains '/'"},
        {"{{.PVC.Annotations.abs}}", NULL, -EINVAL, "contains '/'"},
        {"{{.PVC.Annotations.mid}}", NULL, -EINVAL, "contains '/'"},
        {"{{index .PVC.Annotations \"up\"}}", NULL, -EINVAL, "contains '/'"},
        {"{{.PVC.Annotations.empty}}", NULL, -EINVAL, "empty"},
        {"x/{{.PVC.Annotations.empty}}", NULL, -EINVAL, "empty component"},
        {"{{.PVC.Annotations.nl}}", NULL, -EINVAL, "control character"},
        {"{{.PVC.Annotations.ctl}}", NULL, -EINVAL, "control character 0x01"},
        {"{{.PVC.Annotations.del}}", NULL, -EINVAL, "control character 0x7f"},
        {"", NULL, -EINVAL, "empty"},
        {"/abs/{{.PVName}}", NULL, -EINVAL, "absolute"},
        {"../{{.PVName}}", NULL, -EINVAL, "\"..\" component"},
        {"a/../b", NULL, -EINVAL, "\"..\" component"},
        {"a/./b", NULL, -EINVAL, "\".\" component"},
        {"a//b", NULL, -EINVAL, "empty component"},
        {"a/", NULL, -EINVAL, "empty component"},
        {"tab\there", NULL, -EINVAL, "control character 0x09"},
    };
    (void)state;
    run_render_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_render_syntax_errors(void **state)
{
    static const struct render_case cases[] = {
        {"{{.PVC.Spec.Foo}}", NULL, -EINVAL, "unknown field"},
        {"{{.pvname}}", NULL, -EINVAL, "unknown field"},
        {"{{PVName}}", NULL, -EINVAL, "unknown field"},
        {"{{.PVC}}", NULL, -EINVAL, "unknown field"},
        {"{{.PVC.Annotations}}", NULL, -EINVAL, "unknown field"},
        {"{{ .PVName | lower }}", NULL, -EINVAL, "unknown field"},
        {"{{.PVName}}{{printf \"%s\" .PVName}}", NULL, -EINVAL, "unknown field"},
        {"{{.PVName", NULL, -EINVAL, "unclosed '{{' at offset 0"},
        {"a-{{.PVName}", NULL, -EINVAL, "unclosed '{{' at offset 2"},
        {"{{ {{.PVName}} }}", NULL, -EINVAL, "unclosed"},
        {"a}}b", NULL, -EINVAL, "stray '}}' at offset 1"},
        {"{{.PVName}}}}", NULL, -EINVAL, "stray"},
        {"{{}}", NULL, -EINVAL, "empty action"},
        {"{{   }}", NULL, -EINVAL, "empty action"},
        {"{{.PVC.Annotations.nope}}", NULL, -EINVAL, "has no annotation \"nope\""},
        {"{{.PVC.Labels.nope}}", NULL, -EINVAL, "has no label \"nope\""},
        {"{{index .PVC.Annotations \"nope\"}}", NULL, -EINVAL, "no annotation"},
        {"{{.PVC.Labels.a b}}", NULL, -EINVAL, "invalid label key"},
        {"{{.PVC.Annotations.}}", NULL, -EINVAL, "invalid annotation key"},
        {"{{index .PVC.Annotations \"x}}", NULL, -EINVAL, "unsupported index"},
        {"{{index .PVC.Spec \"x\"}}", NULL, -EINVAL, "unsupported index"},
        {"{{index .PVC.Annotations \"a\" \"b\"}}", NULL, -EINVAL, "unsupported index"},
        {"{{index .PVC.Annotations \"a\\\"b\"}}", NULL, -EINVAL, "unsupported index"},
        {"{{index .PVC.Annotations}}", NULL, -EINVAL, "unsupported index"},
        {"{{index .PVC.Annotations \"\"}}", NULL, -EINVAL, "invalid annotation key"},
        {"{{-.PVName}}", NULL, -EINVAL, "unknown field"},
    };
    (void)state;
    run_render_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_render_lengths(void **state)
{
    static char pattern[6000], out[8192], err[256];
    char small[8];
    size_t i;
    int rc;

    (void)state;
    setup_claim();
    /* One component of 255 bytes is fine, 256 is not. */
    memset(pattern, 'a', 255);
    pattern[255] = '\0';
    assert_int_equal(hp_pathpattern_render(pattern, &claim, pv, out, sizeof(out), err, sizeof(err)),
                     0);
    assert_int_equal(strlen(out), 255);
    pattern[255] = 'a';
    pattern[256] = '\0';
    assert_int_equal(hp_pathpattern_render(pattern, &claim, pv, out, sizeof(out), err, sizeof(err)),
                     -ENAMETOOLONG);
    assert_non_null(strstr(err, "at most 255"));
    /* 4096 bytes in total are fine, more are not. */
    for (i = 0; i < 4096; i++)
        pattern[i] = (i % 2) ? '/' : 'a';
    pattern[4095] = 'b';
    pattern[4096] = '\0';
    assert_int_equal(hp_pathpattern_render(pattern, &claim, pv, out, sizeof(out), err, sizeof(err)),
                     0);
    pattern[4096] = 'c';
    pattern[4097] = '\0';
    rc = hp_pathpattern_render(pattern, &claim, pv, out, sizeof(out), err, sizeof(err));
    assert_int_equal(rc, -ENAMETOOLONG);
    assert_string_equal(out, "");
    /* The caller's buffer bounds the result too. */
    rc = hp_pathpattern_render(HP_DEFAULT_PATH_PATTERN, &claim, pv, small, sizeof(small), err,
                               sizeof(err));
    assert_int_equal(rc, -ENAMETOOLONG);
    assert_string_equal(small, "");
    /* A long hostile value is quoted shortened, and the error buffer may be tiny or absent. */
    rc = hp_pathpattern_render("{{.Nope}}", &claim, pv, out, sizeof(out), err, 4);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(strlen(err), 3);
    rc = hp_pathpattern_render("{{.Nope}}", &claim, pv, out, sizeof(out), NULL, 0);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(hp_pathpattern_render("x", &claim, pv, out, 0, err, sizeof(err)), -EINVAL);
}

static void test_render_missing_inputs(void **state)
{
    char out[256], err[256];

    (void)state;
    setup_claim();
    assert_int_equal(
        hp_pathpattern_render("{{.PVC.Name}}", NULL, pv, out, sizeof(out), err, sizeof(err)),
        -EINVAL);
    assert_non_null(strstr(err, "needs a claim"));
    assert_int_equal(
        hp_pathpattern_render("{{.PVName}}", &claim, NULL, out, sizeof(out), err, sizeof(err)),
        -EINVAL);
    assert_int_equal(hp_pathpattern_render(NULL, &claim, pv, out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    /* Only the PV name: no claim needed. */
    assert_int_equal(
        hp_pathpattern_render("v/{{.PVName}}", NULL, pv, out, sizeof(out), err, sizeof(err)), 0);
    assert_string_equal(out, "v/pvc-1234");
    /* A claim without annotations at all. */
    claim.annotations = "";
    assert_int_equal(hp_pathpattern_render("{{.PVC.Annotations.a}}", &claim, pv, out, sizeof(out),
                                           err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "claim ns-a/data has no annotation \"a\""));
}

static void test_keys(void **state)
{
    static const struct {
        const char *pattern;
        const char *ann; /* packed, as bytes */
        size_t ann_len;
        const char *labels;
        size_t labels_len;
        int rc;
    } cases[] = {
        {"{{.PVC.Namespace}}-{{.PVName}}", "\0", 1, "\0", 1, 0},
        {"{{.PVC.Annotations.dir}}/{{ .PVC.Labels.app }}", "dir\0\0", 5, "app\0\0", 5, 0},
        {"{{index .PVC.Annotations \"example.com/x\"}}-{{.PVC.Annotations.y}}",
         "example.com/x\0y\0\0", 17, "\0", 1, 0},
        {"{{.Nope}}", "\0", 1, "\0", 1, -EINVAL},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct hp_buf a, l;
        hp_buf_init(&a, 0);
        hp_buf_init(&l, 0);
        assert_int_equal(hp_pathpattern_keys(cases[i].pattern, &a, &l), cases[i].rc);
        if (cases[i].rc == 0) {
            assert_int_equal(a.len, cases[i].ann_len);
            assert_memory_equal(a.data, cases[i].ann, a.len);
            assert_int_equal(l.len, cases[i].labels_len);
            assert_memory_equal(l.data, cases[i].labels, l.len);
        }
        hp_buf_free(&a);
        hp_buf_free(&l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_ok),
        cmocka_unit_test(test_render_hostile_values),
        cmocka_unit_test(test_render_syntax_errors),
        cmocka_unit_test(test_render_lengths),
        cmocka_unit_test(test_render_missing_inputs),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
