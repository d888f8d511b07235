/* Unit tests for policy: every decision the controller delegates, as tables of small cases.
 *
 * policy.c is pure, so each rule is one row: StorageClass parameters, which claims are served,
 * the on-delete decision and its source, path relations, whether a record may be acted on,
 * reuse of retained directories, the orphan sweep and the names archived directories get.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/policy.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

/* A reason is shown in one event and one log line: it must not break either. Returns the
 * first control character, or 0. */
static int control_char(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return (unsigned char)*s;
    return 0;
}

/* ---- StorageClass parameters ---- */

/* Packed maps are "k\0v\0...\0": the literal's own NUL ends the map. A "\0" is always followed
 * by a new literal so that no value digit is read as part of an octal escape. */
struct params_case {
    const char *packed;
    int rc;
    /* Expected fields when rc == 0. */
    const char *path_pattern;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    int set_owner;
    enum hp_on_delete on_delete;
    int reuse_retained;
    const char *err_has; /* when rc != 0: the reason names the parameter and value */
};

#define DEF HP_DEFAULT_PATH_PATTERN
#define NOID ((uid_t)-1)
#define NOGID ((gid_t)-1)
#define OD_DEL HP_ON_DELETE_DELETE
#define OD_RET HP_ON_DELETE_RETAIN
#define OD_ARC HP_ON_DELETE_ARCHIVE

static void run_params_cases(const struct params_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct params_case *c = &cases[i];
        struct hp_class_params p;
        char err[512] = "";

        memset(&p, 0xa5, sizeof(p)); /* every field must be set, not left over */
        int rc = hp_policy_class_params(c->packed, &p, err, sizeof(err));
        if (rc != c->rc)
            fail_msg("case %zu (%s): rc=%d want %d err=\"%s\"", i,
                     c->packed ? c->packed : "NULL", rc, c->rc, err);
        if (rc != 0) {
            if (!strstr(err, c->err_has))
                fail_msg("case %zu: err \"%s\" lacks \"%s\"", i, err, c->err_has);
            if (control_char(err))
                fail_msg("case %zu: control character 0x%02x in the reason \"%s\" (not one line)",
                         i, control_char(err), err);
            continue;
        }
        if (strcmp(p.path_pattern, c->path_pattern) != 0 || p.mode != c->mode ||
            p.uid != c->uid || p.gid != c->gid || p.set_owner != c->set_owner ||
            p.on_delete != c->on_delete || p.reuse_retained != c->reuse_retained)
            fail_msg("case %zu (%s): got pattern=%s mode=%o uid=%d gid=%d set_owner=%d "
                     "on_delete=%d reuse=%d",
                     i, c->packed ? c->packed : "NULL", p.path_pattern, (unsigned)p.mode,
                     (int)p.uid, (int)p.gid, p.set_owner, (int)p.on_delete, p.reuse_retained);
    }
}

static void test_params_valid(void **state)
{
    static const struct params_case cases[] = {
        /* Defaults: the documented pattern, 0777, no chown, delete, no reuse. */
        {NULL, 0, DEF, 0777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"", 0, DEF, 0777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"pathPattern\0" "{{.PVName}}\0", 0, "{{.PVName}}", 0777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"mode\0" "0750\0", 0, DEF, 0750, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"mode\0" "750\0", 0, DEF, 0750, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"mode\0" "0\0", 0, DEF, 0, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"mode\0" "07777\0", 0, DEF, 07777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"mode\0" "2770\0", 0, DEF, 02770, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"uid\0" "1000\0", 0, DEF, 0777, 1000, NOGID, 1, OD_DEL, 0, NULL},
        {"gid\0" "2000\0", 0, DEF, 0777, NOID, 2000, 1, OD_DEL, 0, NULL},
        {"uid\0" "0\0", 0, DEF, 0777, 0, NOGID, 1, OD_DEL, 0, NULL},
        {"uid\0" "2147483647\0", 0, DEF, 0777, 2147483647, NOGID, 1, OD_DEL, 0, NULL},
        {"uid\0" "10\0" "gid\0" "20\0", 0, DEF, 0777, 10, 20, 1, OD_DEL, 0, NULL},
        {"onDelete\0" "delete\0", 0, DEF, 0777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"onDelete\0" "retain\0", 0, DEF, 0777, NOID, NOGID, 0, OD_RET, 0, NULL},
        {"onDelete\0" "archive\0", 0, DEF, 0777, NOID, NOGID, 0, OD_ARC, 0, NULL},
        {"reuseRetained\0" "true\0", 0, DEF, 0777, NOID, NOGID, 0, OD_DEL, 1, NULL},
        {"reuseRetained\0" "false\0", 0, DEF, 0777, NOID, NOGID, 0, OD_DEL, 0, NULL},
        {"pathPattern\0" "x/{{.PVName}}\0" "mode\0" "0700\0" "uid\0" "1\0" "gid\0" "2\0"
         "onDelete\0" "archive\0" "reuseRetained\0" "true\0",
         0, "x/{{.PVName}}", 0700, 1, 2, 1, OD_ARC, 1, NULL},
    };
    (void)state;
    run_params_cases(cases, N_CASES(cases));
}

static void test_params_invalid(void **state)
{
    static const struct params_case cases[] = {
        {"mode\0" "0778\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"0778\""},
        {"mode\0" "8\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"8\""},
        {"mode\0" "010000\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"010000\""},
        {"mode\0" "-1\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"-1\""},
        {"mode\0" "+755\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"+755\""},
        {"mode\0" "\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"\""},
        {"mode\0" "rwx\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "octal file mode"},
        {"mode\0" "0o755\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode=\"0o755\""},
        {"mode\0" "99999999999999999999999\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode="},
        {"uid\0" "-1\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid=\"-1\" is not a numeric id"},
        {"uid\0" "abc\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid=\"abc\""},
        {"uid\0" "\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid=\"\""},
        {"uid\0" "12a\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid=\"12a\""},
        {"uid\0" "2147483648\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid=\"2147483648\""},
        {"gid\0" "+5\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "gid=\"+5\""},
        {"gid\0" "x\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "gid=\"x\" is not a numeric id"},
        {"onDelete\0" "Delete\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0,
         "onDelete=\"Delete\" is not one of delete, retain, archive"},
        {"onDelete\0" "\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "onDelete=\"\""},
        {"onDelete\0" "recycle\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "onDelete=\"recycle\""},
        {"reuseRetained\0" "True\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0,
         "reuseRetained=\"True\" is not true or false"},
        {"reuseRetained\0" "yes\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "reuseRetained=\"yes\""},
        {"reuseRetained\0" "\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "reuseRetained=\"\""},
        {"hardLimits\0" "true\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0,
         "parameter hardLimits=\"true\" is not required or optional"},
        {"hardLimits\0" "Required\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "hardLimits=\"Required\""},
        {"hardLimits\0" "\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "hardLimits=\"\""},
        /* Unknown parameters are refused by name, also after valid ones. */
        {"foo\0" "bar\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0,
         "unknown StorageClass parameter \"foo\""},
        {"mode\0" "0700\0" "pathpattern\0" "x\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0,
         "parameter \"pathpattern\""},
        {"mode\0" "0700\0" "UID\0" "1\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "parameter \"UID\""},
    };
    (void)state;
    run_params_cases(cases, N_CASES(cases));
}

static void test_params_hard_limits(void **state)
{
    static const struct {
        const char *packed;
        enum hp_hard_limits want;
    } cases[] = {
        {NULL, HP_HARD_LIMITS_OPTIONAL},
        {"hardLimits\0" "optional\0", HP_HARD_LIMITS_OPTIONAL},
        {"hardLimits\0" "required\0", HP_HARD_LIMITS_REQUIRED},
        {"mode\0" "0700\0" "hardLimits\0" "required\0" "onDelete\0" "retain\0",
         HP_HARD_LIMITS_REQUIRED},
    };
    char err[512];
    (void)state;
    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct hp_class_params p;
        memset(&p, 0xa5, sizeof(p));
        assert_int_equal(hp_policy_class_params(cases[i].packed, &p, err, sizeof(err)), 0);
        assert_int_equal(p.hard_limits, cases[i].want);
    }
    /* The list of what is supported names it. */
    struct hp_class_params q;
    assert_int_equal(hp_policy_class_params("hardlimits\0" "required\0", &q, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "hardLimits"));
}

static void test_params_reason_one_line(void **state)
{
    /* policy.h promises "a one-line reason": it reaches an event and a log line, so a value or
     * key holding a line break must not split it. */
    static const struct params_case cases[] = {
        {"mode\0" "07\n55\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "mode="},
        {"uid\0" "1\r\n2\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "uid="},
        {"onDelete\0" "delete\n\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "onDelete="},
        {"evil\nkey\0" "v\0", -EINVAL, NULL, 0, 0, 0, 0, 0, 0, "unknown StorageClass parameter"},
    };
    (void)state;
    run_params_cases(cases, N_CASES(cases));
}

static void test_params_err_optional(void **state)
{
    struct hp_class_params p;
    char err[16];
    (void)state;

    /* No buffer, or a short one: still the answer, the reason truncated. */
    assert_int_equal(hp_policy_class_params("foo\0" "bar\0", &p, NULL, 0), -EINVAL);
    memset(err, 'X', sizeof(err));
    assert_int_equal(hp_policy_class_params("foo\0" "bar\0", &p, err, sizeof(err)), -EINVAL);
    assert_int_equal(strlen(err), sizeof(err) - 1);
}

/* ---- local-path-provisioner's parameters and annotation fallbacks ---- */

struct lpp_case {
    const char *params; /* packed */
    const char *ann;    /* packed class annotations */
    int rc;
    const char *key;    /* node_affinity_key */
    const char *user, *group, *perm; /* NULL: none */
    int unsafe;
    const char *err_has;
};

#define HOST HP_LABEL_HOSTNAME

static int same_or_null(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void run_lpp_cases(const struct lpp_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct lpp_case *c = &cases[i];
        struct hp_class cls = {.name = "local-path", .provisioner = "rancher.io/local-path",
                               .parameters = c->params, .annotations = c->ann};
        struct hp_class_params p;
        char err[512] = "";
        memset(&p, 0xa5, sizeof(p));
        int rc = hp_policy_class_params_of(&cls, &p, err, sizeof(err));
        if (rc != c->rc)
            fail_msg("case %zu: rc=%d want %d err=\"%s\"", i, rc, c->rc, err);
        if (rc) {
            if (!strstr(err, c->err_has))
                fail_msg("case %zu: err \"%s\" lacks \"%s\"", i, err, c->err_has);
            if (control_char(err))
                fail_msg("case %zu: control character in \"%s\"", i, err);
            continue;
        }
        if (strcmp(p.node_affinity_key, c->key) != 0 || !same_or_null(p.user_pattern, c->user) ||
            !same_or_null(p.group_pattern, c->group) || !same_or_null(p.perm_pattern, c->perm) ||
            p.allow_unsafe_path != c->unsafe)
            fail_msg("case %zu: key=%s user=%s group=%s perm=%s unsafe=%d", i,
                     p.node_affinity_key, p.user_pattern ? p.user_pattern : "NULL",
                     p.group_pattern ? p.group_pattern : "NULL",
                     p.perm_pattern ? p.perm_pattern : "NULL", p.allow_unsafe_path);
    }
}

static void test_lpp_params(void **state)
{
    static const struct lpp_case cases[] = {
        /* Nothing: kubernetes.io/hostname, no patterns, safe. */
        {NULL, NULL, 0, HOST, NULL, NULL, NULL, 0, NULL},
        {"", "", 0, HOST, NULL, NULL, NULL, 0, NULL},
        /* Its fixtures: pod-with-perm-pattern, pod-with-custom-node-affinity-key,
         * skip-path-pattern-check (and -by-annotation), custom-path-pattern. */
        {"nodePath\0" "/opt/local-path-provisioner\0" "pathPattern\0"
         "{{ .PVC.Namespace }}/{{ .PVC.Name }}/\0" "userPattern\0" "1000\0"
         "groupPattern\0" "2000\0" "permPattern\0" "0700\0",
         NULL, 0, HOST, "1000", "2000", "0700", 0, NULL},
        {"nodeAffinityKey\0" "test.example.com/stable-id\0", NULL, 0,
         "test.example.com/stable-id", NULL, NULL, NULL, 0, NULL},
        {"nodePath\0" "/opt/local-path-provisioner\0" "allowUnsafePathPattern\0" "true\0"
         "pathPattern\0" "/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/\0",
         NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"pathPattern\0" "/opt/../{{ .PVC.Namespace }}_{{ .PVC.Name }}/../etc/\0",
         "allowUnsafePathPattern\0" "true\0", 0, HOST, NULL, NULL, NULL, 1, NULL},
        /* nodeAffinityKey: "" is the default (provisioner.go 528); label keys. */
        {"nodeAffinityKey\0" "\0", NULL, 0, HOST, NULL, NULL, NULL, 0, NULL},
        {"nodeAffinityKey\0" "zone\0", NULL, 0, "zone", NULL, NULL, NULL, 0, NULL},
        {"nodeAffinityKey\0" "kubernetes.io/hostname\0", NULL, 0, HOST, NULL, NULL, NULL, 0, NULL},
        {"nodeAffinityKey\0" "topology.kubernetes.io/zone\0", NULL, 0,
         "topology.kubernetes.io/zone", NULL, NULL, NULL, 0, NULL},
        {"nodeAffinityKey\0" "a-b.c-d/A_b.C-9\0", NULL, 0, "a-b.c-d/A_b.C-9", NULL, NULL, NULL,
         0, NULL},
        /* Patterns: the parameter, else the annotation; a parameter present but empty still
         * wins (as its Parameters[...] lookup does). */
        {NULL, "userPattern\0" "{{ .PVC.Annotations.uid }}\0" "groupPattern\0" "7\0"
               "permPattern\0" "0750\0",
         0, HOST, "{{ .PVC.Annotations.uid }}", "7", "0750", 0, NULL},
        {"userPattern\0" "1\0", "userPattern\0" "2\0", 0, HOST, "1", NULL, NULL, 0, NULL},
        {"userPattern\0" "\0", "userPattern\0" "2\0", 0, HOST, "", NULL, NULL, 0, NULL},
        {"permPattern\0" "0700\0", "groupPattern\0" "5\0", 0, HOST, NULL, "5", "0700", 0, NULL},
        /* allowUnsafePathPattern: Go's ParseBool; the parameter wins over the annotation. */
        {"allowUnsafePathPattern\0" "1\0", NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"allowUnsafePathPattern\0" "t\0", NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"allowUnsafePathPattern\0" "T\0", NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"allowUnsafePathPattern\0" "TRUE\0", NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"allowUnsafePathPattern\0" "True\0", NULL, 0, HOST, NULL, NULL, NULL, 1, NULL},
        {"allowUnsafePathPattern\0" "false\0", NULL, 0, HOST, NULL, NULL, NULL, 0, NULL},
        {"allowUnsafePathPattern\0" "F\0", NULL, 0, HOST, NULL, NULL, NULL, 0, NULL},
        {"allowUnsafePathPattern\0" "False\0", "allowUnsafePathPattern\0" "true\0", 0, HOST, NULL,
         NULL, NULL, 0, NULL},
        {"allowUnsafePathPattern\0" "true\0", "allowUnsafePathPattern\0" "yes\0", 0, HOST, NULL,
         NULL, NULL, 1, NULL},
        {NULL, "allowUnsafePathPattern\0" "FALSE\0", 0, HOST, NULL, NULL, NULL, 0, NULL},
        /* Annotations that are parameters only there: not read. */
        {NULL, "pathPattern\0" "x\0" "nodeAffinityKey\0" "zone\0", 0, HOST, NULL, NULL, NULL, 0,
         NULL},
        /* Ours and its together: uid and gid with another pattern are fine. */
        {"uid\0" "5\0" "groupPattern\0" "6\0" "mode\0" "0700\0", NULL, 0, HOST, NULL, "6", NULL,
         0, NULL},
    };
    (void)state;
    run_lpp_cases(cases, N_CASES(cases));
}

static void test_lpp_params_invalid(void **state)
{
    static const struct lpp_case cases[] = {
        {"nodeAffinityKey\0" "Example.com/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "nodeAffinityKey=\"Example.com/x\" is not a node label key"},
        {"nodeAffinityKey\0" "/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "x/\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "a/b/c\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "-x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "x_\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "a b\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"nodeAffinityKey\0" "ex..ample/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "label key"},
        {"nodeAffinityKey\0" "ex-.ample/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "label key"},
        {"nodeAffinityKey\0" ".example/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "label key"},
        {"nodeAffinityKey\0" "example-/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "label key"},
        {"nodeAffinityKey\0" "x\ny\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "nodeAffinityKey=\"x?y\""},
        {"nodeAffinityKey\0"
         "a1234567890123456789012345678901234567890123456789012345678901234\0",
         NULL, -EINVAL, NULL, NULL, NULL, NULL, 0, "label key"},
        {"allowUnsafePathPattern\0" "yes\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "parameter allowUnsafePathPattern=\"yes\" is not true or false"},
        {"allowUnsafePathPattern\0" "\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "allowUnsafePathPattern=\"\""},
        {"allowUnsafePathPattern\0" "tRUE\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "allowUnsafePathPattern=\"tRUE\""},
        {NULL, "allowUnsafePathPattern\0" "on\0", -EINVAL, NULL, NULL, NULL, NULL, 0,
         "StorageClass annotation allowUnsafePathPattern=\"on\" is not true or false"},
        /* Two answers to one question. */
        {"uid\0" "5\0" "userPattern\0" "6\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "parameter uid and the parameter userPattern both set the directory's owner"},
        {"gid\0" "5\0", "groupPattern\0" "6\0", -EINVAL, NULL, NULL, NULL, NULL, 0,
         "parameter gid and the StorageClass annotation groupPattern both set the directory's "
         "group"},
        {"permPattern\0" "0700\0" "mode\0" "0770\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "parameter mode and the parameter permPattern both set the directory's mode"},
        {"mode\0" "0770\0", "permPattern\0" "\0", -EINVAL, NULL, NULL, NULL, NULL, 0,
         "StorageClass annotation permPattern"},
        /* The annotations are not parameters. */
        {"volumeType\0" "local\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "volumeType is an annotation of the claim"},
        {"defaultVolumeType\0" "local\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "defaultVolumeType one of the StorageClass"},
        {"sharedFileSystemPath\0" "/x\0", NULL, -EINVAL, NULL, NULL, NULL, NULL, 0,
         "unknown StorageClass parameter \"sharedFileSystemPath\" (supported: pathPattern"},
    };
    (void)state;
    run_lpp_cases(cases, N_CASES(cases));
    /* Without the class: the parameters alone, no fallbacks. */
    struct hp_class_params p;
    char err[256];
    assert_int_equal(hp_policy_class_params("userPattern\0" "1\0", &p, err, sizeof(err)), 0);
    assert_string_equal(p.user_pattern, "1");
    assert_null(p.group_pattern);
    assert_int_equal(hp_policy_class_params_of(NULL, &p, err, sizeof(err)), 0);
    assert_string_equal(p.path_pattern, HP_DEFAULT_PATH_PATTERN);
    assert_null(p.user_pattern);
}

/* The owner and mode of one claim's directory. */
static void test_dir_attrs(void **state)
{
    static const char claim_ann[] = "uid\0" "1001\0"
                                    "gid\0" "2002\0"
                                    "perm\0" "0750\0"
                                    "bad\0" "x\0";
    static const struct {
        const char *params, *ann;
        int rc;
        mode_t mode;
        uid_t uid;
        gid_t gid;
        int set_owner;
        const char *err_has;
    } cases[] = {
        {NULL, NULL, 0, 0777, NOID, NOGID, 0, NULL},
        {"mode\0" "0700\0" "uid\0" "5\0", NULL, 0, 0700, 5, NOGID, 1, NULL},
        /* its pod-with-perm-pattern fixture: stat says "700 1000 2000" there */
        {"userPattern\0" "1000\0" "groupPattern\0" "2000\0" "permPattern\0" "0700\0", NULL, 0,
         0700, 1000, 2000, 1, NULL},
        {"permPattern\0" "{{ .PVC.Annotations.perm }}\0", NULL, 0, 0750, NOID, NOGID, 0, NULL},
        {NULL, "userPattern\0" "{{ .PVC.Annotations.uid }}\0", 0, 0777, 1001, NOGID, 1, NULL},
        {"uid\0" "7\0", "groupPattern\0" "{{index .PVC.Annotations \"gid\"}}\0", 0, 0777, 7, 2002,
         1, NULL},
        {"mode\0" "0770\0" "groupPattern\0" " 3 \0", NULL, 0, 0770, NOID, 3, 1, NULL},
        /* Refusals name the pattern and the value. */
        {"userPattern\0" "{{ .PVC.Annotations.missing }}\0", NULL, -EINVAL, 0, 0, 0, 0,
         "has no annotation \"missing\" used by userPattern"},
        {"groupPattern\0" "{{ .PVC.Annotations.bad }}\0", NULL, -EINVAL, 0, 0, 0, 0,
         "groupPattern \"{{ .PVC.Annotations.bad }}\" renders to \"x\", which is not a numeric "
         "id"},
        {"permPattern\0" "17777\0", NULL, -EINVAL, 0, 0, 0, 0,
         "permPattern \"17777\" renders to \"17777\", which is not an octal mode from 0 to 7777"},
        {NULL, "permPattern\0" "\0", -EINVAL, 0, 0, 0, 0, "renders to an empty string"},
        {"userPattern\0" "root\0", NULL, -EINVAL, 0, 0, 0, 0, "names are not looked up"},
        {"userPattern\0" "{{ .PVC.Labels.x }}\0", NULL, -EINVAL, 0, 0, 0, 0,
         "has no label \"x\" used by userPattern"},
    };
    struct hp_claim cl = {.namespace_ = "ns", .name = "c", .uid = "u", .annotations = claim_ann,
                          .labels = ""};
    (void)state;
    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct hp_class cls = {.name = "k", .parameters = cases[i].params,
                               .annotations = cases[i].ann};
        struct hp_class_params p;
        struct hp_dir_attrs a;
        char err[512] = "";
        assert_int_equal(hp_policy_class_params_of(&cls, &p, err, sizeof(err)), 0);
        memset(&a, 0x5a, sizeof(a));
        int rc = hp_policy_dir_attrs(&p, &cl, "pvc-u", &a, err, sizeof(err));
        if (rc != cases[i].rc)
            fail_msg("case %zu: rc=%d err=\"%s\"", i, rc, err);
        if (rc) {
            if (!strstr(err, cases[i].err_has))
                fail_msg("case %zu: err \"%s\" lacks \"%s\"", i, err, cases[i].err_has);
            assert_int_equal(control_char(err), 0);
            continue;
        }
        if (a.mode != cases[i].mode || a.uid != cases[i].uid || a.gid != cases[i].gid ||
            a.set_owner != cases[i].set_owner)
            fail_msg("case %zu: mode=%o uid=%d gid=%d set_owner=%d", i, (unsigned)a.mode,
                     (int)a.uid, (int)a.gid, a.set_owner);
    }
}

static void test_volume_type(void **state)
{
    static const struct {
        const char *claim_ann, *class_ann; /* packed */
        int has_class;
        int rc;
        enum hp_volume_type want;
        const char *err_has;
    } cases[] = {
        {"", "", 1, 0, HP_VOLUME_HOSTPATH, NULL},
        {"", "", 0, 0, HP_VOLUME_HOSTPATH, NULL},
        /* its pvc-with-local-volume example, pod-with-default-local-volume fixture */
        {"volumeType\0" "local\0", "", 1, 0, HP_VOLUME_LOCAL, NULL},
        {"", "defaultVolumeType\0" "local\0", 1, 0, HP_VOLUME_LOCAL, NULL},
        /* any case, as strings.ToLower */
        {"volumeType\0" "LOCAL\0", "", 1, 0, HP_VOLUME_LOCAL, NULL},
        {"volumeType\0" "Local\0", "", 1, 0, HP_VOLUME_LOCAL, NULL},
        {"volumeType\0" "hostPath\0", "", 1, 0, HP_VOLUME_HOSTPATH, NULL},
        {"volumeType\0" "HOSTPATH\0", "", 1, 0, HP_VOLUME_HOSTPATH, NULL},
        {"volumeType\0" "hostpath\0", "defaultVolumeType\0" "local\0", 1, 0, HP_VOLUME_HOSTPATH,
         NULL},
        {"", "defaultVolumeType\0" "HostPath\0", 1, 0, HP_VOLUME_HOSTPATH, NULL},
        /* the claim's word wins; the class's is then not read at all */
        {"volumeType\0" "local\0", "defaultVolumeType\0" "bogus\0", 1, 0, HP_VOLUME_LOCAL, NULL},
        {"volumeType\0" "local\0", "", 0, 0, HP_VOLUME_LOCAL, NULL},
        /* anything else is refused by value and place, "" included */
        {"volumeType\0" "\0", "defaultVolumeType\0" "local\0", 1, -EINVAL, 0,
         "claim annotation volumeType=\"\" is not a volume type: local or hostPath"},
        {"volumeType\0" "nfs\0", "", 1, -EINVAL, 0, "volumeType=\"nfs\""},
        {"volumeType\0" " local\0", "", 1, -EINVAL, 0, "volumeType=\" local\""},
        {"volumeType\0" "local\n\0", "", 1, -EINVAL, 0, "volumeType=\"local?\""},
        {"volumeType\0" "host-path\0", "", 1, -EINVAL, 0, "volumeType=\"host-path\""},
        {"volumeType\0" "l\xc3\xb3" "cal\0", "", 1, -EINVAL, 0, "volumeType="},
        {"", "defaultVolumeType\0" "block\0", 1, -EINVAL, 0,
         "StorageClass annotation defaultVolumeType=\"block\" is not a volume type"},
        {"", "defaultVolumeType\0" "\0", 1, -EINVAL, 0, "defaultVolumeType=\"\""},
    };
    (void)state;
    assert_string_equal(hp_volume_type_name(HP_VOLUME_LOCAL), "local");
    assert_string_equal(hp_volume_type_name(HP_VOLUME_HOSTPATH), "hostPath");
    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct hp_claim cl = {.namespace_ = "ns", .name = "c", .annotations = cases[i].claim_ann,
                              .labels = ""};
        struct hp_class cls = {.name = "k", .parameters = "", .annotations = cases[i].class_ann};
        enum hp_volume_type t = (enum hp_volume_type)42;
        char err[256] = "";
        int rc = hp_policy_volume_type(&cl, cases[i].has_class ? &cls : NULL, &t, err,
                                       sizeof(err));
        if (rc != cases[i].rc || (rc == 0 && t != cases[i].want) ||
            (rc && !strstr(err, cases[i].err_has)))
            fail_msg("case %zu: rc=%d type=%d err=\"%s\"", i, rc, (int)t, err);
        if (rc)
            assert_int_equal(control_char(err), 0);
    }
}

static void test_node_affinity(void **state)
{
    static const struct {
        const char *params;
        enum hp_volume_type type;
        int shared;
        const char *node, *label;
        int rc;
        const char *key, *value; /* NULL: no affinity */
        const char *err_has;
    } cases[] = {
        {NULL, HP_VOLUME_HOSTPATH, 0, "n1", NULL, 0, HOST, "n1", NULL},
        {NULL, HP_VOLUME_LOCAL, 0, "n1", NULL, 0, HOST, "n1", NULL},
        /* the hostname label, read from the Node, wins over the name (as there) */
        {NULL, HP_VOLUME_HOSTPATH, 0, "n1", "host-1", 0, HOST, "host-1", NULL},
        /* its pod-with-custom-node-affinity-key fixture */
        {"nodeAffinityKey\0" "test.example.com/stable-id\0", HP_VOLUME_HOSTPATH, 0, "kind-worker",
         "my-stable-node", 0, "test.example.com/stable-id", "my-stable-node", NULL},
        {"nodeAffinityKey\0" "zone\0", HP_VOLUME_LOCAL, 0, "n1", "z1", 0, "zone", "z1", NULL},
        /* no node known: no affinity for hostPath as before; local and a key need one */
        {NULL, HP_VOLUME_HOSTPATH, 0, NULL, NULL, 0, NULL, NULL, NULL},
        {NULL, HP_VOLUME_HOSTPATH, 0, "", NULL, 0, NULL, NULL, NULL},
        {NULL, HP_VOLUME_LOCAL, 0, NULL, NULL, -EINVAL, NULL, NULL,
         "a local volume needs the node the volume is on, and none is known"},
        {"nodeAffinityKey\0" "zone\0", HP_VOLUME_HOSTPATH, 0, NULL, "z", -EINVAL, NULL, NULL,
         "nodeAffinityKey needs the node"},
        /* the node lacks the label: refused, not the node's name under that key */
        {"nodeAffinityKey\0" "zone\0", HP_VOLUME_HOSTPATH, 0, "n1", NULL, -ENOENT, NULL, NULL,
         "node n1 has no label zone"},
        {"nodeAffinityKey\0" "zone\0", HP_VOLUME_HOSTPATH, 0, "n1", "", -EINVAL, NULL, NULL,
         "node n1's label zone is empty"},
        /* a shared path: no affinity, whatever the key; no local volume */
        {NULL, HP_VOLUME_HOSTPATH, 1, "n1", NULL, 0, NULL, NULL, NULL},
        {"nodeAffinityKey\0" "zone\0", HP_VOLUME_HOSTPATH, 1, "n1", NULL, 0, NULL, NULL, NULL},
        {NULL, HP_VOLUME_LOCAL, 1, "n1", NULL, -EINVAL, NULL, NULL,
         "a local volume must have node affinity"},
        {NULL, HP_VOLUME_HOSTPATH, 0, "n\n1", "", -EINVAL, NULL, NULL, "node n?1's label"},
    };
    (void)state;
    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct hp_class_params p;
        char err[512] = "";
        const char *key = "junk", *value = "junk";
        assert_int_equal(hp_policy_class_params(cases[i].params, &p, err, sizeof(err)), 0);
        int rc = hp_policy_node_affinity(&p, cases[i].type, cases[i].shared, cases[i].node,
                                         cases[i].label, &key, &value, err, sizeof(err));
        if (rc != cases[i].rc || !same_or_null(key, cases[i].key) ||
            !same_or_null(value, cases[i].value) || (rc && !strstr(err, cases[i].err_has)))
            fail_msg("case %zu: rc=%d key=%s value=%s err=\"%s\"", i, rc, key ? key : "NULL",
                     value ? value : "NULL", err);
        if (rc)
            assert_int_equal(control_char(err), 0);
    }
}

/* Claims keep the annotations and labels every pattern of their class reads. */
static void test_class_keys(void **state)
{
    struct hp_class cls = {.name = "k",
                           .parameters = "pathPattern\0" "{{.PVC.Annotations.dir}}/{{.PVName}}\0"
                                         "userPattern\0" "{{ .PVC.Labels.uid }}\0",
                           .annotations = "permPattern\0" "{{index .PVC.Annotations \"a/p\"}}\0"
                                          "groupPattern\0" "{{.Nope}}\0"};
    struct hp_class_params p;
    struct hp_buf ann, labels;
    char err[256];
    (void)state;
    assert_int_equal(hp_policy_class_params_of(&cls, &p, err, sizeof(err)), 0);
    hp_buf_init(&ann, 0);
    hp_buf_init(&labels, 0);
    hp_policy_class_keys(&p, &ann, &labels);
    assert_int_equal(ann.len, sizeof("dir\0a/p\0"));
    assert_memory_equal(ann.data, "dir\0a/p\0", ann.len);
    assert_int_equal(labels.len, sizeof("uid\0"));
    assert_memory_equal(labels.data, "uid\0", labels.len);
    hp_buf_free(&ann);
    hp_buf_free(&labels);
    /* The defaults read nothing. */
    assert_int_equal(hp_policy_class_params(NULL, &p, err, sizeof(err)), 0);
    hp_buf_init(&ann, 0);
    hp_buf_init(&labels, 0);
    hp_policy_class_keys(&p, &ann, &labels);
    assert_int_equal(ann.len, 1);
    assert_int_equal(labels.len, 1);
    hp_buf_free(&ann);
    hp_buf_free(&labels);
}

/* ---- serving claims ---- */

struct skip_case {
    const char *volume_name;
    int deleting;
    const char *class_name;
    const char *claim_provisioner;
    const char *selected_node;
    int class_found;
    const char *class_provisioner;
    int wffc;
    const char *node_name;
    int leading;
    const char *want; /* NULL: serve */
};

#define ME "hostpath-provisioner.io"

static void test_skip_claim(void **state)
{
    static const struct skip_case cases[] = {
        /* vol    del cls    annot   selnode   found clsprov wffc node lead want */
        {"pv-x", 0, "fast", NULL, NULL, 1, ME, 0, NULL, 1, "bound"},
        {"pv-x", 1, NULL, NULL, NULL, 0, ME, 0, NULL, 0, "bound"},
        {"", 1, "fast", NULL, NULL, 1, ME, 0, NULL, 1, "being deleted"},
        {"", 0, NULL, NULL, NULL, 1, ME, 0, NULL, 1, "no class"},
        {"", 0, "", NULL, NULL, 1, ME, 0, NULL, 1, "no class"},
        {"", 0, "fast", NULL, NULL, 0, ME, 0, NULL, 1, "class not found"},
        {"", 0, "fast", NULL, NULL, 1, "other.io/x", 0, NULL, 1, "class of another provisioner"},
        {"", 0, "fast", "other.io/x", NULL, 1, ME, 0, NULL, 1,
         "annotated for another provisioner"},
        {"", 0, "fast", NULL, NULL, 1, ME, 1, NULL, 1, "waiting for first consumer"},
        {"", 0, "fast", NULL, "", 1, ME, 1, "node-a", 1, "waiting for first consumer"},
        {"", 0, "fast", ME, "node-b", 1, ME, 1, "node-a", 1, "selected node is another node"},
        {"", 0, "fast", NULL, "node-b", 1, ME, 0, "node-a", 1, "selected node is another node"},
        {"", 0, "fast", NULL, NULL, 1, ME, 0, NULL, 0, "not leader"},
        {"", 0, "fast", NULL, NULL, 1, ME, 0, "node-a", 0, "not leader"},
        {"", 0, "fast", NULL, "", 1, ME, 0, "node-a", 0, "not leader"},
        /* Served: the leader (or single instance) without a selected node ... */
        {"", 0, "fast", NULL, NULL, 1, ME, 0, NULL, 1, NULL},
        {"", 0, "fast", ME, NULL, 1, ME, 0, "node-a", 1, NULL},
        /* ... and, per node, a claim whose selected node is ours, leader or not. */
        {"", 0, "fast", ME, "node-a", 1, ME, 1, "node-a", 0, NULL},
        {"", 0, "fast", NULL, "node-a", 1, ME, 0, "node-a", 0, NULL},
        {"", 0, "fast", NULL, "node-b", 1, ME, 1, NULL, 1, NULL},
        /* Without --node-name every claim is the leader's, a selected node or not: replicas
         * must not all provision one WaitForFirstConsumer claim. */
        {"", 0, "fast", NULL, "node-b", 1, ME, 1, NULL, 0, "not leader"},
        {"", 0, "fast", ME, "node-a", 1, ME, 0, NULL, 0, "not leader"},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct skip_case *c = &cases[i];
        struct hp_claim cl;
        struct hp_class cls;
        struct hp_serve_env env = {ME, c->node_name, c->leading, 0};

        memset(&cl, 0, sizeof(cl));
        memset(&cls, 0, sizeof(cls));
        cl.namespace_ = "ns";
        cl.name = "data";
        cl.uid = "u1";
        cl.resource_version = "1";
        cl.volume_name = c->volume_name;
        cl.class_name = c->class_name;
        cl.provisioner = c->claim_provisioner;
        cl.selected_node = c->selected_node;
        cl.request = "1Gi";
        cl.annotations = "";
        cl.labels = "";
        cl.deleting = (uint8_t)c->deleting;
        cls.name = "fast";
        cls.provisioner = c->class_provisioner;
        cls.resource_version = "1";
        cls.parameters = "";
        cls.mount_options = "";
        cls.wait_for_first_consumer = (uint8_t)c->wffc;

        const char *got = hp_policy_skip_claim(&cl, c->class_found ? &cls : NULL, &env);
        if ((got == NULL) != (c->want == NULL) || (got && strcmp(got, c->want) != 0))
            fail_msg("case %zu: got \"%s\" want \"%s\"", i, got ? got : "(serve)",
                     c->want ? c->want : "(serve)");
    }
}

/* A class on a shared path (sharedFileSystemPath) is the leader's alone, per node too, whatever
 * node the scheduler selected: one instance makes and removes directories there. */
static void test_skip_claim_shared(void **state)
{
    struct hp_claim cl;
    struct hp_class cls;
    (void)state;
    memset(&cl, 0, sizeof(cl));
    memset(&cls, 0, sizeof(cls));
    cl.namespace_ = "ns";
    cl.name = "data";
    cl.uid = "u1";
    cl.volume_name = "";
    cl.class_name = "shared";
    cl.selected_node = "node-a";
    cls.name = "shared";
    cls.provisioner = ME;
    cls.wait_for_first_consumer = 1;
    struct hp_serve_env node_a = {ME, "node-a", 0, 1}, leader_b = {ME, "node-b", 1, 1};
    assert_string_equal(hp_policy_skip_claim(&cl, &cls, &node_a), "not leader");
    assert_null(hp_policy_skip_claim(&cl, &cls, &leader_b));
    node_a.shared = 0; /* a node path: node-a's instance, leader or not */
    assert_null(hp_policy_skip_claim(&cl, &cls, &node_a));
}

/* ---- on-delete ---- */

struct on_delete_case {
    const char *annotation;
    int with_record; /* record says archive */
    int with_class;  /* class says delete */
    enum hp_on_delete want;
    enum hp_policy_source source;
};

static void test_on_delete(void **state)
{
    static const struct on_delete_case cases[] = {
        /* The annotation wins over everything else. */
        {"delete", 1, 1, OD_DEL, HP_POLICY_FROM_ANNOTATION},
        {"retain", 1, 1, OD_RET, HP_POLICY_FROM_ANNOTATION},
        {"archive", 0, 1, OD_ARC, HP_POLICY_FROM_ANNOTATION},
        {"delete", 0, 0, OD_DEL, HP_POLICY_FROM_ANNOTATION},
        {"retain", 0, 0, OD_RET, HP_POLICY_FROM_ANNOTATION},
        /* An unreadable annotation is not trusted, and not overridden: keep the data. */
        {"bogus", 1, 1, OD_RET, HP_POLICY_FROM_INVALID},
        {"", 1, 1, OD_RET, HP_POLICY_FROM_INVALID},
        {"Delete", 0, 1, OD_RET, HP_POLICY_FROM_INVALID},
        {"bogus", 0, 0, OD_RET, HP_POLICY_FROM_INVALID},
        /* No annotation: the journal, then the class, then retain. */
        {NULL, 1, 1, OD_ARC, HP_POLICY_FROM_JOURNAL},
        {NULL, 1, 0, OD_ARC, HP_POLICY_FROM_JOURNAL},
        {NULL, 0, 1, OD_DEL, HP_POLICY_FROM_CLASS},
        {NULL, 0, 0, OD_RET, HP_POLICY_FROM_DEFAULT},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct on_delete_case *c = &cases[i];
        struct hp_record rec;
        struct hp_class_params cls;
        enum hp_policy_source src = (enum hp_policy_source)99;

        memset(&rec, 0, sizeof(rec));
        rec.on_delete = HP_ON_DELETE_ARCHIVE;
        memset(&cls, 0, sizeof(cls));
        cls.on_delete = HP_ON_DELETE_DELETE;
        enum hp_on_delete got = hp_policy_on_delete(c->annotation, c->with_record ? &rec : NULL,
                                                    c->with_class ? &cls : NULL, &src);
        if (got != c->want || src != c->source)
            fail_msg("case %zu: got %d from %d, want %d from %d", i, (int)got, (int)src,
                     (int)c->want, (int)c->source);
    }
}

static void test_source_names(void **state)
{
    (void)state;
    assert_non_null(strstr(hp_policy_source_name(HP_POLICY_FROM_ANNOTATION), HP_ANN_ON_DELETE));
    assert_non_null(strstr(hp_policy_source_name(HP_POLICY_FROM_JOURNAL), "journal"));
    assert_non_null(strstr(hp_policy_source_name(HP_POLICY_FROM_CLASS), "StorageClass"));
    assert_non_null(strstr(hp_policy_source_name(HP_POLICY_FROM_DEFAULT), "keeping the data"));
    assert_non_null(strstr(hp_policy_source_name(HP_POLICY_FROM_INVALID), "is not delete, retain"));
}

/* ---- paths ---- */

struct relation_case {
    const char *a, *b;
    enum hp_path_relation want;
    const char *words;
};

static void test_path_relation(void **state)
{
    static const struct relation_case cases[] = {
        {"a", "a", HP_PATH_EQUAL, "is"},
        {"a/b", "a/b", HP_PATH_EQUAL, "is"},
        {"a", "a/b", HP_PATH_CONTAINS, "contains"},
        {"a", "a/b/c", HP_PATH_CONTAINS, "contains"},
        {"a/b", "a/b/c", HP_PATH_CONTAINS, "contains"},
        {"a/b", "a", HP_PATH_INSIDE, "lies inside"},
        {"a/b/c", "a", HP_PATH_INSIDE, "lies inside"},
        /* Component-wise, not by string prefix. */
        {"a", "ab", HP_PATH_DISJOINT, "is apart from"},
        {"ab", "a", HP_PATH_DISJOINT, "is apart from"},
        {"a", "ab/c", HP_PATH_DISJOINT, "is apart from"},
        {"a/b", "a/bc", HP_PATH_DISJOINT, "is apart from"},
        {"a/bc", "a/b", HP_PATH_DISJOINT, "is apart from"},
        {"a-b", "a", HP_PATH_DISJOINT, "is apart from"},
        {"a/b", "a/c", HP_PATH_DISJOINT, "is apart from"},
        {"x/a", "a", HP_PATH_DISJOINT, "is apart from"},
        {"a", "x/a", HP_PATH_DISJOINT, "is apart from"},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct relation_case *c = &cases[i];
        enum hp_path_relation got = hp_policy_path_relation(c->a, c->b);
        if (got != c->want || strcmp(hp_policy_relation_words(got), c->words) != 0)
            fail_msg("case %zu: \"%s\" vs \"%s\": got %d (%s), want %d", i, c->a, c->b, (int)got,
                     hp_policy_relation_words(got), (int)c->want);
    }
}

/* ---- records ---- */

struct same_fs_case {
    uint64_t made_dev, made_fsid, now_dev, now_fsid;
    int want;
};

static void test_same_fs(void **state)
{
    static const struct same_fs_case cases[] = {
        {10, 0, 10, 0, 1},
        {10, 7, 10, 9, 1}, /* the device decides when it matches */
        {10, 7, 11, 7, 1}, /* renumbered device, same filesystem */
        {10, 7, 11, 9, 0},
        {10, 0, 11, 0, 0}, /* no filesystem id is no proof */
        {10, 0, 11, 7, 0},
        {10, 7, 11, 0, 0},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct same_fs_case *c = &cases[i];
        struct hp_record rec;
        struct hp_fs_ident now = {c->now_dev, c->now_fsid};
        memset(&rec, 0, sizeof(rec));
        rec.dev = c->made_dev;
        rec.fsid = c->made_fsid;
        if (hp_policy_same_fs(&rec, &now) != c->want)
            fail_msg("case %zu: want %d", i, c->want);
    }
}

struct check_case {
    const char *pv, *rel;
    uint64_t now_dev, now_fsid;
    uint64_t rec_fsid;
    int rc;
    const char *err_has;
};

static void test_check_record(void **state)
{
    const uint64_t d81 = makedev(8, 1), d82 = makedev(8, 2);
    const struct check_case cases[] = {
        {"pvc-1", "ns-data-pvc-1", d81, 0x77, 0x77, 0, NULL},
        {"pvc-1", "ns-data-pvc-1", d81, 0, 0, 0, NULL},
        {"pvc-1", "ns-data-pvc-1", d82, 0x77, 0x77, 0, NULL},
        {"pvc-2", "ns-data-pvc-1", d81, 0x77, 0x77, -EPERM, "names volume pvc-1, not pvc-2"},
        {"pvc-1", "ns-data-pvc-9", d81, 0x77, 0x77, -EPERM,
         "path ns-data-pvc-9 is not the directory recorded for it (ns-data-pvc-1)"},
        {"pvc-1", "ns-data-pvc-1/x", d81, 0x77, 0x77, -EPERM, "not the directory recorded"},
        {"pvc-1", "ns-data-pvc-1", d82, 0, 0, -EPERM, "device 8:2 now"},
        {"pvc-1", "ns-data-pvc-1", d82, 0x88, 0x77, -EPERM, "made on device 8:1"},
        {"pvc-1", "ns-data-pvc-1", d82, 0, 0x77, -EPERM, "right disk mounted"},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct check_case *c = &cases[i];
        struct hp_record rec;
        struct hp_fs_ident now = {c->now_dev, c->now_fsid};
        char err[512] = "";

        memset(&rec, 0, sizeof(rec));
        rec.pv = "pvc-1";
        rec.path = "ns-data-pvc-1";
        rec.dev = d81;
        rec.fsid = c->rec_fsid;
        int rc = hp_policy_check_record(&rec, c->pv, c->rel, &now, err, sizeof(err));
        if (rc != c->rc || (c->err_has && !strstr(err, c->err_has)) || (!c->err_has && err[0]))
            fail_msg("case %zu: rc=%d want %d err=\"%s\" want \"%s\"", i, rc, c->rc, err,
                     c->err_has ? c->err_has : "");
        /* Without an error buffer the answer is the same. */
        assert_int_equal(hp_policy_check_record(&rec, c->pv, c->rel, &now, NULL, 0), c->rc);
    }
}

struct reuse_case {
    enum hp_record_state state;
    const char *rec_ns, *rec_name, *rec_class;
    const char *ns, *name, *cls;
    int want;
};

static void test_reuse_match(void **state)
{
    static const struct reuse_case cases[] = {
        {HP_REC_RETAINED, "ns", "data", "fast", "ns", "data", "fast", 1},
        {HP_REC_CREATED, "ns", "data", "fast", "ns", "data", "fast", 0},
        {HP_REC_CREATING, "ns", "data", "fast", "ns", "data", "fast", 0},
        {HP_REC_DELETING, "ns", "data", "fast", "ns", "data", "fast", 0},
        {HP_REC_ARCHIVED, "ns", "data", "fast", "ns", "data", "fast", 0},
        {HP_REC_RETAINED, "ns", "data", "fast", "other", "data", "fast", 0},
        {HP_REC_RETAINED, "ns", "data", "fast", "ns", "data2", "fast", 0},
        {HP_REC_RETAINED, "ns", "data", "fast", "ns", "data", "slow", 0},
        {HP_REC_RETAINED, NULL, "data", "fast", "ns", "data", "fast", 0},
        {HP_REC_RETAINED, "ns", NULL, "fast", "ns", "data", "fast", 0},
        {HP_REC_RETAINED, "ns", "data", NULL, "ns", "data", "fast", 0},
        {HP_REC_RETAINED, "", "", "", "ns", "data", "fast", 0},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct reuse_case *c = &cases[i];
        struct hp_record rec;
        memset(&rec, 0, sizeof(rec));
        rec.state = c->state;
        rec.claim_namespace = (char *)c->rec_ns;
        rec.claim_name = (char *)c->rec_name;
        rec.class_name = (char *)c->rec_class;
        if (hp_policy_reuse_match(&rec, c->ns, c->name, c->cls) != c->want)
            fail_msg("case %zu: want %d", i, c->want);
    }
}

/* ---- the orphan sweep ---- */

struct sweep_case {
    const char *what;
    const char *rec_identity;
    enum hp_record_state state;
    enum hp_on_delete on_delete;
    int64_t age; /* now - updated */
    int pv_exists, claim_exists, in_flight;
    enum hp_sweep_action want;
    int in_use;  /* another live PV's directory overlaps */
    int adopted; /* the record took over a retained directory */
};

#define GRACE 600

static void test_sweep(void **state)
{
    static const struct sweep_case cases[] = {
        {"another identity's record", "node-b", HP_REC_DELETING, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"another identity, old", "node-b", HP_REC_CREATED, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"record without identity", NULL, HP_REC_CREATED, OD_DEL, 9999, 0, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"in flight", "node-a", HP_REC_DELETING, OD_DEL, 9999, 0, 0, 1, HP_SWEEP_KEEP, 0, 0},
        {"pv exists", "node-a", HP_REC_DELETING, OD_DEL, 9999, 1, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"pv exists, created", "node-a", HP_REC_CREATED, OD_DEL, 9999, 1, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"retained", "node-a", HP_REC_RETAINED, OD_DEL, 9999, 0, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"archived", "node-a", HP_REC_ARCHIVED, OD_DEL, 9999, 0, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"deleting, old", "node-a", HP_REC_DELETING, OD_RET, 9999, 0, 0, 0, HP_SWEEP_DELETE, 0, 0},
        {"deleting, young", "node-a", HP_REC_DELETING, OD_RET, 1, 0, 0, 0, HP_SWEEP_DELETE, 0, 0},
        {"deleting, claim exists", "node-a", HP_REC_DELETING, OD_RET, 1, 0, 1, 0,
         HP_SWEEP_DELETE, 0, 0},
        {"creating, claim exists", "node-a", HP_REC_CREATING, OD_DEL, 9999, 0, 1, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"created, claim exists", "node-a", HP_REC_CREATED, OD_DEL, 9999, 0, 1, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"creating, young", "node-a", HP_REC_CREATING, OD_DEL, 10, 0, 0, 0, HP_SWEEP_KEEP, 0, 0},
        {"created, just young", "node-a", HP_REC_CREATED, OD_DEL, GRACE - 1, 0, 0, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"created, from the future", "node-a", HP_REC_CREATED, OD_DEL, -100, 0, 0, 0,
         HP_SWEEP_KEEP, 0, 0},
        {"created, grace reached", "node-a", HP_REC_CREATED, OD_DEL, GRACE, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 0},
        {"creating, old, delete", "node-a", HP_REC_CREATING, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 0},
        {"created, old, delete", "node-a", HP_REC_CREATED, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 0},
        {"created, old, retain", "node-a", HP_REC_CREATED, OD_RET, 9999, 0, 0, 0,
         HP_SWEEP_RETAIN, 0, 0},
        {"created, old, archive", "node-a", HP_REC_CREATED, OD_ARC, 9999, 0, 0, 0,
         HP_SWEEP_ARCHIVE, 0, 0},
        /* Never completed: no PV ever, nothing to keep whatever the policy. */
        {"creating, old, archive", "node-a", HP_REC_CREATING, OD_ARC, 9999, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 0},
        {"creating, old, retain", "node-a", HP_REC_CREATING, OD_RET, 9999, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 0},
        /* Another live PV mounts the directory (or one around it): it is that PV's now. */
        {"created, path in use", "node-a", HP_REC_CREATED, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_KEEP, 1, 0},
        {"creating, path in use", "node-a", HP_REC_CREATING, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_KEEP, 1, 0},
        {"deleting, path in use", "node-a", HP_REC_DELETING, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_KEEP, 1, 0},
        /* A takeover whose claim went before its PV was made: the data is retained again. */
        {"created, adopted, delete", "node-a", HP_REC_CREATED, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_RETAIN, 0, 1},
        {"created, adopted, archive", "node-a", HP_REC_CREATED, OD_ARC, 9999, 0, 0, 0,
         HP_SWEEP_RETAIN, 0, 1},
        {"created, adopted, claim exists", "node-a", HP_REC_CREATED, OD_DEL, 9999, 0, 1, 0,
         HP_SWEEP_KEEP, 0, 1},
        {"deleting, adopted", "node-a", HP_REC_DELETING, OD_DEL, 9999, 0, 0, 0,
         HP_SWEEP_DELETE, 0, 1},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct sweep_case *c = &cases[i];
        const int64_t now = 1800000000;
        struct hp_record rec;
        struct hp_sweep_facts f = {.identity = "node-a",
                                   .pv_exists = c->pv_exists,
                                   .claim_exists = c->claim_exists,
                                   .in_flight = c->in_flight,
                                   .path_in_use = c->in_use,
                                   .now = now,
                                   .grace_s = GRACE};

        memset(&rec, 0, sizeof(rec));
        rec.pv = "pvc-1";
        rec.path = "p";
        rec.identity = (char *)c->rec_identity;
        rec.state = c->state;
        rec.on_delete = c->on_delete;
        rec.updated = now - c->age;
        rec.adopted_from = c->adopted ? (char *)"pvc-0" : NULL;
        enum hp_sweep_action got = hp_policy_sweep(&rec, &f);
        if (got != c->want)
            fail_msg("case %zu (%s): got %d want %d", i, c->what, (int)got, (int)c->want);
    }
}

static void test_sweep_without_identity(void **state)
{
    struct hp_record rec;
    struct hp_sweep_facts f = {.identity = NULL, .now = 100000, .grace_s = 1};
    (void)state;

    /* Without an identity of our own nothing is provably ours. */
    memset(&rec, 0, sizeof(rec));
    rec.identity = "node-a";
    rec.state = HP_REC_DELETING;
    assert_int_equal(hp_policy_sweep(&rec, &f), HP_SWEEP_KEEP);
}

/* ---- archiving ---- */

/* 1 when s is well-formed UTF-8 (no split or stray sequence). */
static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                                                   : (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0)
            return 0;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return 0;
    }
    return 1;
}

static char *repeat(char *out, size_t outlen, const char *unit, size_t times)
{
    size_t u = strlen(unit), len = 0;
    for (size_t i = 0; i < times && len + u < outlen; i++, len += u)
        memcpy(out + len, unit, u);
    out[len] = '\0';
    return out;
}

/* Checks the shortened form: "archived-" + a head of leaf + "-" + 16 hex digits + suffix,
 * within max bytes, UTF-8 intact. */
static void assert_short_form(const char *out, const char *leaf, const char *suffix, size_t max)
{
    size_t len = strlen(out), slen = strlen(suffix);

    if (len > max || len > NAME_MAX)
        fail_msg("\"%s\" is %zu bytes, more than %zu", out, len, max);
    assert_true(strncmp(out, "archived-", 9) == 0);
    assert_true(len >= 9 + 17 + slen);
    assert_string_equal(out + len - slen, suffix);
    const char *hash = out + len - slen - 16;
    for (int i = 0; i < 16; i++)
        assert_non_null(strchr("0123456789abcdef", hash[i]));
    assert_int_equal(hash[-1], '-');
    size_t head = (size_t)(hash - 1 - (out + 9));
    assert_true(strncmp(out + 9, leaf, head) == 0);
    assert_true(utf8_valid(out));
}

struct archive_case {
    const char *leaf, *suffix;
    size_t outlen;
    const char *want; /* exact result, or NULL: check the short form */
    int rc;
};

static void test_archive_name_table(void **state)
{
    static char long_leaf[400], leaf246[247], leaf247[248], big_suffix[300], mid_suffix[240];
    repeat(long_leaf, sizeof(long_leaf), "x", 300);
    repeat(leaf246, sizeof(leaf246), "y", 246);
    repeat(leaf247, sizeof(leaf247), "y", 247);
    /* "archived-" (9) + "-" + 16 hex (17) + suffix must leave room under NAME_MAX. */
    repeat(big_suffix, sizeof(big_suffix), "s", 255 - 26);
    repeat(mid_suffix, sizeof(mid_suffix), "s", 255 - 27);
    static char want246[300];
    snprintf(want246, sizeof(want246), "archived-%s", leaf246);

    const struct archive_case cases[] = {
        {"data", "", 256, "archived-data", 0},
        {"ns-data-pvc-1", "-20260101T000000Z", 256, "archived-ns-data-pvc-1-20260101T000000Z", 0},
        {"ns-data-pvc-1", "-20260101T000000Z-2", 256, "archived-ns-data-pvc-1-20260101T000000Z-2",
         0},
        {"données", "", 256, "archived-données", 0},
        {leaf246, "", 256, want246, 0}, /* exactly NAME_MAX */
        {leaf247, "", 256, NULL, 0},    /* one byte over: shortened */
        {long_leaf, "", 256, NULL, 0},
        {long_leaf, "-20260101T000000Z-12", 256, NULL, 0},
        {long_leaf, "", 4096, NULL, 0}, /* a big buffer does not lift NAME_MAX */
        {long_leaf, "", 40, NULL, 0},   /* a small buffer bounds the result */
        {"data", "", 14, "archived-data", 0},
        {long_leaf, mid_suffix, 256, NULL, 0}, /* one byte of head is left */
        {long_leaf, big_suffix, 256, NULL, -ENAMETOOLONG},
        {long_leaf, "", 26, NULL, -ENAMETOOLONG},
        {long_leaf, "", 20, NULL, -ENAMETOOLONG},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct archive_case *c = &cases[i];
        char out[4096];
        int rc = hp_policy_archive_name(c->leaf, c->suffix, out, c->outlen);
        if (rc != c->rc)
            fail_msg("case %zu: rc=%d want %d", i, rc, c->rc);
        if (rc != 0)
            continue;
        if (c->want)
            assert_string_equal(out, c->want);
        else
            assert_short_form(out, c->leaf, c->suffix, c->outlen - 1);
    }
}

static void test_archive_name_deterministic(void **state)
{
    char a[400], b[400], out1[256], out2[256], out3[256];
    (void)state;

    repeat(a, sizeof(a), "x", 300);
    memcpy(b, a, sizeof(b));
    b[299] = 'z'; /* same head, different leaf */
    assert_int_equal(hp_policy_archive_name(a, "-s", out1, sizeof(out1)), 0);
    assert_int_equal(hp_policy_archive_name(a, "-s", out2, sizeof(out2)), 0);
    assert_string_equal(out1, out2); /* a retry picks the same name */
    assert_int_equal(strlen(out1), NAME_MAX);
    assert_int_equal(hp_policy_archive_name(b, "-s", out3, sizeof(out3)), 0);
    assert_string_not_equal(out1, out3); /* the hash tells them apart */
    assert_int_equal(strlen(out3), NAME_MAX);
}

static void test_archive_name_utf8(void **state)
{
    /* Multi-byte characters of 2, 3 and 4 bytes, with suffixes that move the cut across every
     * byte position: the head never ends inside a character. */
    static const char *const units[] = {"é", "€", "😀", "a€"};
    static const char *const suffixes[] = {"", "-", "-1", "-12", "-123"};
    (void)state;

    for (size_t u = 0; u < N_CASES(units); u++) {
        for (size_t s = 0; s < N_CASES(suffixes); s++) {
            char leaf[1024], out[256];
            repeat(leaf, sizeof(leaf), units[u], 150); /* 300 to 600 bytes: too long */
            assert_int_equal(hp_policy_archive_name(leaf, suffixes[s], out, sizeof(out)), 0);
            assert_short_form(out, leaf, suffixes[s], NAME_MAX);
        }
    }
}

/* ---- placement ---- */

#define MB (1024ULL * 1024)

static void test_place(void **state)
{
    struct hp_place_path two[] = {
        {"/a", 0, 0, 1, 100 * MB, 40 * MB, NULL},        /* 40 free */
        {"/b", 50 * MB, 20 * MB, 1, 1000 * MB, 900 * MB, NULL}, /* 30 of budget left */
    };
    char why[512];
    (void)state;
    assert_int_equal(hp_policy_room(&two[0]), 40 * MB);
    assert_int_equal(hp_policy_room(&two[1]), 30 * MB);
    /* The most room that fits. */
    assert_int_equal(hp_policy_place(two, 2, 10 * MB, why, sizeof(why)), 0);
    assert_int_equal(hp_policy_place(two, 2, 40 * MB, why, sizeof(why)), 0);
    /* Excluded paths are never chosen, and say why. */
    two[0].excluded = "is on the root filesystem and allowRootFilesystem is false";
    assert_int_equal(hp_policy_place(two, 2, 10 * MB, why, sizeof(why)), 1);
    assert_int_equal(hp_policy_place(two, 2, 35 * MB, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "needs 35Mi"));
    assert_non_null(strstr(why, "/a is on the root filesystem"));
    assert_non_null(strstr(why, "/b has 30Mi left of its 50Mi budget"));
    two[0].excluded = NULL;
    /* Too big for both: every path's numbers. */
    assert_int_equal(hp_policy_place(two, 2, 41 * MB, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "/a has 40Mi free on its disk"));
    /* Unknown sizes do not limit; the budget still does; reserved beyond the budget is 0. */
    struct hp_place_path unknown[] = {
        {"/u", 0, 5 * MB, 0, 0, 0, NULL},
        {"/v", 10 * MB, 12 * MB, 0, 0, 0, NULL},
    };
    assert_int_equal(hp_policy_room(&unknown[1]), 0);
    assert_int_equal(hp_policy_place(unknown, 2, 1ULL << 50, why, sizeof(why)), 0);
    assert_int_equal(hp_policy_place(&unknown[1], 1, 1, why, sizeof(why)), -ENOSPC);
    assert_non_null(strstr(why, "/v has 0 left of its 10Mi budget"));
    /* Nothing to choose from. */
    assert_int_equal(hp_policy_place(two, 0, 1, why, sizeof(why)), -ENOENT);
    /* Ties: the first. */
    struct hp_place_path tie[] = {{"/x", 10 * MB, 0, 0, 0, 0, NULL},
                                  {"/y", 10 * MB, 0, 0, 0, 0, NULL}};
    assert_int_equal(hp_policy_place(tie, 2, MB, why, sizeof(why)), 0);
    /* Zero-byte requests fit anywhere with no room left too. */
    assert_int_equal(hp_policy_place(&unknown[1], 1, 0, why, sizeof(why)), 0);
}

static void test_same_path(void **state)
{
    static const struct {
        const char *a, *b;
        int same;
    } cases[] = {
        {"/mnt/ssd1", "/mnt/ssd1", 1},  {"/mnt/ssd1", "/mnt/ssd1/", 1},
        {"/mnt/ssd1", "//mnt//ssd1", 1}, {"/mnt/ssd1", "/mnt/./ssd1/.", 1},
        {"/", "//", 1},                  {"/mnt/ssd1", "/mnt/ssd10", 0},
        {"/mnt/ssd1", "/mnt", 0},        {"/mnt/ssd1", "mnt/ssd1", 0},
        {"/mnt/ssd1", "/mnt/x/../ssd1", 0}, {"/a", NULL, 0},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (hp_policy_same_path(cases[i].a, cases[i].b) != cases[i].same)
            fail_msg("case %zu: %s vs %s", i, cases[i].a, cases[i].b ? cases[i].b : "(null)");
        if (cases[i].b && hp_policy_same_path(cases[i].b, cases[i].a) != cases[i].same)
            fail_msg("case %zu reversed", i);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_path),
        cmocka_unit_test(test_place),
        cmocka_unit_test(test_params_valid),
        cmocka_unit_test(test_params_invalid),
        cmocka_unit_test(test_params_hard_limits),
        cmocka_unit_test(test_params_reason_one_line),
        cmocka_unit_test(test_params_err_optional),
        cmocka_unit_test(test_lpp_params),
        cmocka_unit_test(test_lpp_params_invalid),
        cmocka_unit_test(test_dir_attrs),
        cmocka_unit_test(test_volume_type),
        cmocka_unit_test(test_node_affinity),
        cmocka_unit_test(test_class_keys),
        cmocka_unit_test(test_skip_claim),
        cmocka_unit_test(test_skip_claim_shared),
        cmocka_unit_test(test_on_delete),
        cmocka_unit_test(test_source_names),
        cmocka_unit_test(test_path_relation),
        cmocka_unit_test(test_same_fs),
        cmocka_unit_test(test_check_record),
        cmocka_unit_test(test_reuse_match),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_sweep_without_identity),
        cmocka_unit_test(test_archive_name_table),
        cmocka_unit_test(test_archive_name_deterministic),
        cmocka_unit_test(test_archive_name_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
