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
#include "hostpath/volpath.h"

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
        {"{{ .PVC.Namespace }}/{{ .PVC.Name }}/{{ .PVC.UID }}", "ns-a/data/1234", 0, NULL},
        {"{{.PVC.Annotations.dotted}}", "a..b", 0, NULL},
        {"static/dir", "static/dir", 0, NULL},
        {"a {{- .PVName}}", "apvc-1234", 0, NULL},
        {"{{.PVName -}}   b", "pvc-1234b", 0, NULL},
        {"x-{{.PVC.Annotations.empty}}-y", "x--y", 0, NULL},
        {"{ {.PVName} }", "{ {.PVName} }", 0, NULL},
        /* local-path-provisioner's recommended pattern: its trailing '/' is dropped, as its
         * filepath.Join drops it (the directory is <root>/ns-a/data there too). */
        {"{{ .PVC.Namespace }}/{{ .PVC.Name }}/", "ns-a/data", 0, NULL},
        {"{{.PVName}}/", "pvc-1234", 0, NULL},
        {"a/", "a", 0, NULL},
        {"a//", "a", 0, NULL},
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
        /* Only the pattern's own trailing '/' is dropped: an empty value before it is still an
         * empty component (else every such claim would share "x"). */
        {"x/{{.PVC.Annotations.empty}}/", NULL, -EINVAL, "empty component"},
        {"x/{{.PVC.Annotations.empty}}//", NULL, -EINVAL, "empty component"},
        {"/", NULL, -EINVAL, "absolute"},
        {"//", NULL, -EINVAL, "absolute"},
        {"{{.PVC.Annotations.empty}}/", NULL, -EINVAL, "absolute"},
        /* local-path-provisioner's own hostile fixtures, without allowUnsafePathPattern. */
        {"{{ .PVC.Name }}/../../../etc/passwd", NULL, -EINVAL, "\"..\" component"},
        {"/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/", NULL, -EINVAL, "absolute"},
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

/* allowUnsafePathPattern: cleaned like local-path-provisioner's filepath.Join, but never out
 * of the root, never the root itself, and every other check still applies. */
static void test_render_unsafe(void **state)
{
    static const struct render_case cases[] = {
        /* Its skip-path-pattern-check fixtures: Join(root, text) is <root>/etc there too. */
        {"/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/", "etc", 0, NULL},
        {"{{ .PVC.Namespace }}/{{ .PVC.Name }}/", "ns-a/data", 0, NULL},
        {HP_DEFAULT_PATH_PATTERN, "ns-a-data-pvc-1234", 0, NULL},
        {"a/./b//c/", "a/b/c", 0, NULL},
        {"a/../b", "b", 0, NULL},
        {"/a/b/../../c", "c", 0, NULL},
        {"./{{.PVName}}", "pvc-1234", 0, NULL},
        {"x/{{.PVC.Annotations.dots}}/y", "y", 0, NULL},
        {"x/{{.PVC.Annotations.empty}}", "x", 0, NULL},
        {"..a/b..", "..a/b..", 0, NULL},
        /* Out of the root: its security-basic-traversal-path fixture, and friends. */
        {"{{ .PVC.Name }}/../../../etc/passwd", NULL, -EINVAL, "climbs out of the volume root"},
        {"../x", NULL, -EINVAL, "climbs out"},
        {"/..", NULL, -EINVAL, "climbs out"},
        {"a/../..", NULL, -EINVAL, "climbs out"},
        {"a/../../b", NULL, -EINVAL, "climbs out"},
        {"{{.PVC.Annotations.dots}}", NULL, -EINVAL, "climbs out"},
        /* The root itself. */
        {".", NULL, -EINVAL, "the volume root itself"},
        {"/", NULL, -EINVAL, "the volume root itself"},
        {"a/..", NULL, -EINVAL, "the volume root itself"},
        {"", NULL, -EINVAL, "the volume root itself"},
        {"{{.PVC.Annotations.empty}}", NULL, -EINVAL, "the volume root itself"},
        /* The rest of the guard stays. */
        {"{{.PVC.Annotations.up}}", NULL, -EINVAL, "contains '/'"},
        {"{{.PVC.Annotations.abs}}", NULL, -EINVAL, "contains '/'"},
        {"a/{{.PVC.Annotations.ctl}}", NULL, -EINVAL, "control character 0x01"},
        {"../{{.PVC.Annotations.nl}}", NULL, -EINVAL, "climbs out"},
        {"{{.PVC.Annotations.nope}}", NULL, -EINVAL, "has no annotation"},
        {"{{.Nope}}", NULL, -EINVAL, "unknown field"},
    };
    char out[8192], err[512];
    static char pattern[6000];
    (void)state;
    setup_claim();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct render_case *c = &cases[i];
        memset(out, 'X', sizeof(out));
        err[0] = '\0';
        int rc = hp_pathpattern_render_path(c->pattern, &claim, pv, HP_PATTERN_UNSAFE, out,
                                            sizeof(out), err, sizeof(err));
        if (rc != c->rc || (c->want && strcmp(out, c->want) != 0) ||
            (c->err_has && !strstr(err, c->err_has)))
            fail_msg("case %zu pattern \"%s\": rc=%d (want %d) out=\"%.80s\" err=\"%s\"", i,
                     c->pattern, rc, c->rc, out, err);
        if (rc) {
            assert_string_equal(out, "");
            for (const char *e = err; *e; e++)
                assert_true((unsigned char)*e >= 0x20 && (unsigned char)*e != 0x7f);
        } else {
            assert_int_equal(hp_volpath_validate(out, err, sizeof(err)), 0);
        }
    }
    /* A component longer than 255 bytes is refused after cleaning too. */
    memset(pattern, 'a', 256);
    memcpy(pattern + 256, "/../b", 6);
    assert_int_equal(hp_pathpattern_render_path(pattern, &claim, pv, HP_PATTERN_UNSAFE, out,
                                                sizeof(out), err, sizeof(err)),
                     0); /* taken back by the ".." */
    assert_string_equal(out, "b");
    pattern[256] = '\0';
    assert_int_equal(hp_pathpattern_render_path(pattern, &claim, pv, HP_PATTERN_UNSAFE, out,
                                                sizeof(out), err, sizeof(err)),
                     -ENAMETOOLONG);
}

/* ---- value patterns ---- */

/* Values chosen so that no "\0" is followed by a digit (octal escapes). */
static const char value_annotations[] = "uid\0" "1000\0"
                                        "perm\0" "0750\0"
                                        "spaced\0" " \t42\n\0"
                                        "name\0" "nobody\0"
                                        "neg\0" "-1\0"
                                        "ctl\0" "1\x01" "2\0"
                                        "slash\0" "1/2\0"
                                        "empty\0\0";

struct value_case {
    const char *pattern;
    int rc;
    unsigned long want;
    const char *err_has;
};

static void setup_value_claim(void)
{
    setup_claim();
    claim.annotations = value_annotations;
}

static void check_reason(const char *err)
{
    assert_true(err[0] != '\0');
    for (const char *e = err; *e; e++)
        assert_true((unsigned char)*e >= 0x20 && (unsigned char)*e != 0x7f);
}

static void test_value_ids(void **state)
{
    static const struct value_case cases[] = {
        /* local-path-provisioner's pod-with-perm-pattern fixture. */
        {"1000", 0, 1000, NULL},
        {"2000", 0, 2000, NULL},
        {"0", 0, 0, NULL},
        {"007", 0, 7, NULL},
        {"2147483647", 0, 2147483647UL, NULL},
        {" 1000\n", 0, 1000, NULL}, /* strings.TrimSpace */
        {"{{ .PVC.Annotations.uid }}", 0, 1000, NULL},
        {"{{index .PVC.Annotations \"uid\"}}", 0, 1000, NULL},
        {"{{ .PVC.Annotations.spaced }}", 0, 42, NULL},
        {"1{{ .PVC.Annotations.uid }}", 0, 11000, NULL},
        /* Not a number. */
        {"2147483648", -EINVAL, 0, "not a numeric id from 0 to 2147483647"},
        {"99999999999999999999999", -EINVAL, 0, "renders to \"99999999999999999999999\""},
        {"-1", -EINVAL, 0, "renders to \"-1\""},
        {"+5", -EINVAL, 0, "renders to \"+5\""},
        {"0x10", -EINVAL, 0, "renders to \"0x10\""},
        {"1e3", -EINVAL, 0, "renders to \"1e3\""},
        {"1 000", -EINVAL, 0, "renders to \"1 000\""},
        {"nobody", -EINVAL, 0, "names are not looked up"},
        {"{{ .PVC.Annotations.name }}", -EINVAL, 0, "renders to \"nobody\""},
        {"{{ .PVC.Annotations.neg }}", -EINVAL, 0, "renders to \"-1\""},
        {"{{ .PVC.Annotations.slash }}", -EINVAL, 0, "renders to \"1/2\""},
        {"{{ .PVC.Annotations.ctl }}", -EINVAL, 0, "renders to \"1?2\""},
        {"{{ .PVName }}", -EINVAL, 0, "renders to \"pvc-1234\""},
        {"{{ .PVC.Labels.app }}", -EINVAL, 0, "renders to \"web\""},
        /* Empty, missing, malformed. */
        {"", -EINVAL, 0, "renders to an empty string"},
        {"   ", -EINVAL, 0, "renders to an empty string"},
        {"{{ .PVC.Annotations.empty }}", -EINVAL, 0, "renders to an empty string"},
        {"{{ .PVC.Annotations.nope }}", -EINVAL, 0,
         "has no annotation \"nope\" used by userPattern"},
        {"{{ .PVC.Labels.nope }}", -EINVAL, 0, "has no label \"nope\" used by userPattern"},
        {"{{ .PVC.Spec }}", -EINVAL, 0, "unknown field {{.PVC.Spec}} at offset 0 in userPattern"},
        {"{{ .PVName", -EINVAL, 0, "unclosed '{{' at offset 0 in userPattern"},
        {"1}}", -EINVAL, 0, "stray '}}' at offset 1 in userPattern"},
    };
    char err[512];
    (void)state;
    setup_value_claim();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct value_case *c = &cases[i];
        uint32_t id = 0xdeadbeef;
        err[0] = '\0';
        int rc = hp_pathpattern_id(c->pattern, "userPattern", &claim, pv, &id, err, sizeof(err));
        if (rc != c->rc || (rc == 0 && id != c->want) || (c->err_has && !strstr(err, c->err_has)))
            fail_msg("case %zu \"%s\": rc=%d (want %d) id=%u (want %lu) err=\"%s\"", i,
                     c->pattern, rc, c->rc, id, c->want, err);
        if (rc) {
            assert_int_equal(id, 0xdeadbeef); /* untouched */
            check_reason(err);
        }
    }
    /* The name in messages is the caller's. */
    uint32_t id;
    assert_int_equal(hp_pathpattern_id("x", "groupPattern", &claim, pv, &id, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "groupPattern \"x\""));
    /* A claim is needed only when the pattern reads it. */
    assert_int_equal(hp_pathpattern_id("5", "groupPattern", NULL, NULL, &id, err, sizeof(err)), 0);
    assert_int_equal(id, 5);
    assert_int_equal(hp_pathpattern_id("{{.PVC.Name}}", "groupPattern", NULL, NULL, &id, err,
                                       sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "needs a claim"));
    assert_int_equal(hp_pathpattern_id(NULL, "groupPattern", &claim, pv, &id, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "groupPattern is missing"));
    /* A value longer than 255 bytes. */
    char big[400];
    memset(big, '1', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(hp_pathpattern_id(big, "userPattern", &claim, pv, &id, err, sizeof(err)),
                     -ENAMETOOLONG);
    assert_non_null(strstr(err, "rendered userPattern is longer than 255 bytes"));
}

static void test_value_modes(void **state)
{
    static const struct value_case cases[] = {
        {"0700", 0, 0700, NULL}, /* its pod-with-perm-pattern fixture */
        {"700", 0, 0700, NULL},
        {"0", 0, 0, NULL},
        {"7777", 0, 07777, NULL},
        {"07777", 0, 07777, NULL},
        {"2770", 0, 02770, NULL},
        {"00000755", 0, 0755, NULL},
        {"\t0755 ", 0, 0755, NULL},
        {"{{ .PVC.Annotations.perm }}", 0, 0750, NULL},
        {"0{{ .PVC.Annotations.spaced }}0", -EINVAL, 0, "renders to \"0 ?42?0\""},
        {"10000", -EINVAL, 0, "not an octal mode from 0 to 7777"},
        {"0800", -EINVAL, 0, "renders to \"0800\""},
        {"8", -EINVAL, 0, "renders to \"8\""},
        {"-755", -EINVAL, 0, "renders to \"-755\""},
        {"0o755", -EINVAL, 0, "renders to \"0o755\""},
        {"u+rwx", -EINVAL, 0, "symbolic modes like u+rwx are not supported"},
        {"a=rx", -EINVAL, 0, "renders to \"a=rx\""},
        {"99999999999999999999999", -EINVAL, 0, "renders to"},
        {"", -EINVAL, 0, "permPattern \"\" renders to an empty string"},
        {"{{ .PVC.Annotations.empty }}", -EINVAL, 0, "empty string"},
        {"{{ .PVC.Annotations.nope }}", -EINVAL, 0,
         "has no annotation \"nope\" used by permPattern"},
        {"{{ .PVC.Annotations.ctl }}", -EINVAL, 0, "renders to \"1?2\""},
    };
    char err[512];
    (void)state;
    setup_value_claim();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct value_case *c = &cases[i];
        mode_t m = 0xabcd;
        err[0] = '\0';
        int rc = hp_pathpattern_mode(c->pattern, &claim, pv, &m, err, sizeof(err));
        if (rc != c->rc || (rc == 0 && m != c->want) || (c->err_has && !strstr(err, c->err_has)))
            fail_msg("case %zu \"%s\": rc=%d (want %d) mode=%o (want %lo) err=\"%s\"", i,
                     c->pattern, rc, c->rc, (unsigned)m, c->want, err);
        if (rc) {
            assert_int_equal(m, 0xabcd);
            check_reason(err);
        }
    }
}

static void test_value_render(void **state)
{
    char out[64], err[256];
    (void)state;
    setup_value_claim();
    /* Any character may be in a value ('/' included): the caller parses it. */
    assert_int_equal(hp_pathpattern_render_value("a/{{.PVC.Annotations.slash}} ", "userPattern",
                                                 &claim, pv, out, sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "a/1/2");
    assert_int_equal(hp_pathpattern_render_value(" \n ", "userPattern", &claim, pv, out,
                                                 sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "");
    assert_int_equal(hp_pathpattern_render_value("{{.PVC.Namespace}}", NULL, &claim, pv, out,
                                                 sizeof(out), err, sizeof(err)),
                     0);
    assert_string_equal(out, "ns-a");
    assert_int_equal(hp_pathpattern_render_value("{{.X}}", NULL, &claim, pv, out, sizeof(out),
                                                 err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "in pattern"));
    assert_string_equal(out, "");
    assert_int_equal(hp_pathpattern_render_value("x", "p", &claim, pv, out, 0, err, sizeof(err)),
                     -EINVAL);
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
        cmocka_unit_test(test_render_unsafe),
        cmocka_unit_test(test_value_ids),
        cmocka_unit_test(test_value_modes),
        cmocka_unit_test(test_value_render),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
