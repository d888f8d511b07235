/* Unit tests for config: flags, defaults, environment fallbacks, --help/--version, errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/config.h"

#define MAX_ARGS 16

/* Environment variables the parser reads: cleared around every test, then restored. */
static const char *const env_names[] = {
    "KUBECONFIG",        "PV_DIR",        "NODE_NAME",
    "PV_RECLAIM_POLICY", "POD_NAMESPACE", "HOSTPATH_SERVICEACCOUNT_DIR",
};
static char *saved_env[HP_ARRAY_SIZE(env_names)];

static int env_setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++) {
        const char *v = getenv(env_names[i]);
        saved_env[i] = v ? hp_xstrdup(v) : NULL;
        unsetenv(env_names[i]);
    }
    return 0;
}

static int env_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++) {
        if (saved_env[i])
            setenv(env_names[i], saved_env[i], 1);
        else
            unsetenv(env_names[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    return 0;
}

/* Parses argv (NULL-terminated list after argv[0]) with output to a memory stream. *out receives
 * what was printed (caller frees). */
static enum hp_config_result parse_argv(struct hp_config *cfg, char *err, size_t errlen, char **out,
                                        const char *const *args)
{
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    size_t outlen = 0;
    char *buf = NULL;
    FILE *f = open_memstream(&buf, &outlen);
    enum hp_config_result r;

    assert_non_null(f);
    argv[argc++] = (char *)"hostpath-provisioner";
    for (; *args; args++) {
        assert_true(argc <= MAX_ARGS);
        argv[argc++] = (char *)*args;
    }
    argv[argc] = NULL;
    r = hp_config_parse(cfg, argc, argv, f, err, errlen);
    assert_int_equal(fclose(f), 0);
    if (out)
        *out = buf;
    else
        free(buf);
    return r;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NOARGS ((const char *const[]){NULL})

/* Parses and requires success with nothing printed. */
static void parse_ok(struct hp_config *cfg, const char *const *args)
{
    char err[512] = "";
    char *out;
    enum hp_config_result r = parse_argv(cfg, err, sizeof(err), &out, args);

    if (r != HP_CONFIG_OK)
        fail_msg("unexpected error: %s", err);
    assert_string_equal(out, "");
    free(out);
}

/* Parses and requires an error whose one-line message contains want. */
static void parse_err(const char *const *args, const char *want)
{
    struct hp_config cfg;
    char err[512] = "";
    enum hp_config_result r = parse_argv(&cfg, err, sizeof(err), NULL, args);

    if (r != HP_CONFIG_ERROR) {
        hp_config_free(&cfg);
        fail_msg("expected an error containing '%s' for %s", want, args[0] ? args[0] : "()");
    }
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
    assert_null(strchr(err, '\n'));
    /* On error the struct is already released and zeroed; freeing again is harmless. */
    assert_null(cfg.provisioner_name);
    assert_null(cfg.pv_dir);
    hp_config_free(&cfg);
}

/* The value of the field a flag sets, rendered as text for table comparisons. */
static void render(const struct hp_config *c, const char *flag, char *buf, size_t n)
{
#define S(field) snprintf(buf, n, "%s", c->field ? c->field : "(null)")
#define I(field) snprintf(buf, n, "%d", (int)c->field)
#define U(field) snprintf(buf, n, "%llu", (unsigned long long)c->field)
    if (!strcmp(flag, "kubeconfig"))
        S(kubeconfig);
    else if (!strcmp(flag, "master"))
        S(master);
    else if (!strcmp(flag, "context"))
        S(context);
    else if (!strcmp(flag, "provisioner-name"))
        S(provisioner_name);
    else if (!strcmp(flag, "pv-dir"))
        S(pv_dir);
    else if (!strcmp(flag, "node-name"))
        S(node_name);
    else if (!strcmp(flag, "identity"))
        S(identity);
    else if (!strcmp(flag, "default-reclaim-policy"))
        snprintf(buf, n, "%s", hp_reclaim_name(c->default_reclaim_policy));
    else if (!strcmp(flag, "workers"))
        I(workers);
    else if (!strcmp(flag, "resync-period"))
        U(resync_period_ms);
    else if (!strcmp(flag, "retry-base-delay"))
        U(retry_base_delay_ms);
    else if (!strcmp(flag, "retry-max-delay"))
        U(retry_max_delay_ms);
    else if (!strcmp(flag, "failed-retry-threshold"))
        I(failed_retry_threshold);
    else if (!strcmp(flag, "leader-elect"))
        I(leader_elect);
    else if (!strcmp(flag, "leader-elect-namespace"))
        S(leader_elect_namespace);
    else if (!strcmp(flag, "leader-elect-lease-duration"))
        U(lease_duration_ms);
    else if (!strcmp(flag, "leader-elect-renew-deadline"))
        U(renew_deadline_ms);
    else if (!strcmp(flag, "leader-elect-retry-period"))
        U(retry_period_ms);
    else if (!strcmp(flag, "metrics-address"))
        snprintf(buf, n, "%s|%d", c->metrics_host ? c->metrics_host : "(null)", c->metrics_port);
    else if (!strcmp(flag, "kube-api-qps"))
        snprintf(buf, n, "%g", c->kube_api_qps);
    else if (!strcmp(flag, "kube-api-burst"))
        I(kube_api_burst);
    else if (!strcmp(flag, "add-finalizer"))
        I(add_finalizer);
    else if (!strcmp(flag, "take-over"))
        I(take_over);
    else if (!strcmp(flag, "v"))
        I(verbosity);
    else if (!strcmp(flag, "log-format"))
        snprintf(buf, n, "%s", c->log_format == HP_LOG_JSON ? "json" : "text");
    else
        fail_msg("render: unknown flag %s", flag);
#undef S
#undef I
#undef U
}

static void assert_field(const struct hp_config *c, const char *flag, const char *want)
{
    char got[512];

    render(c, flag, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("--%s: got '%s', want '%s'", flag, got, want);
}

/* ---- defaults ---------------------------------------------------------------------------- */

static void test_defaults(void **state)
{
    struct hp_config cfg;
    char host[256] = "";
    static const struct {
        const char *flag, *want;
    } defaults[] = {
        {"kubeconfig", "(null)"},
        {"master", "(null)"},
        {"context", "(null)"},
        {"provisioner-name", "hostpath-provisioner.io"},
        {"pv-dir", "/var/lib/hostpath-provisioner"},
        {"node-name", "(null)"},
        {"default-reclaim-policy", "Delete"},
        {"workers", "4"},
        {"resync-period", "900000"},
        {"retry-base-delay", "5"},
        {"retry-max-delay", "300000"},
        {"failed-retry-threshold", "15"},
        {"leader-elect", "0"},
        {"leader-elect-namespace", "(null)"},
        {"leader-elect-lease-duration", "15000"},
        {"leader-elect-renew-deadline", "10000"},
        {"leader-elect-retry-period", "2000"},
        {"metrics-address", "|8080"},
        {"kube-api-qps", "50"},
        {"kube-api-burst", "100"},
        {"add-finalizer", "0"},
        {"take-over", "0"},
        {"v", "0"},
        {"log-format", "text"},
    };
    (void)state;

    parse_ok(&cfg, NOARGS);
    for (size_t i = 0; i < HP_ARRAY_SIZE(defaults); i++)
        assert_field(&cfg, defaults[i].flag, defaults[i].want);
    assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
    assert_string_equal(cfg.identity, host);
    assert_string_equal(cfg.serviceaccount_dir, "/var/run/secrets/kubernetes.io/serviceaccount");
    hp_config_free(&cfg);
    /* Safe twice, and on a zeroed struct. */
    hp_config_free(&cfg);
    assert_null(cfg.identity);
}

/* ---- every flag, both syntaxes ----------------------------------------------------------- */

struct flag_case {
    const char *flag;  /* with dashes */
    const char *value; /* NULL: a bare boolean */
    const char *field; /* render() name */
    const char *want;
};

static const struct flag_case flag_cases[] = {
    {"--kubeconfig", "/etc/kube/admin.conf", "kubeconfig", "/etc/kube/admin.conf"},
    {"--kubeconfig", "", "kubeconfig", "(null)"},
    {"--master", "https://10.0.0.1:6443", "master", "https://10.0.0.1:6443"},
    {"--master", "http://127.0.0.1:8001", "master", "http://127.0.0.1:8001"},
    {"--context", "kind-kind", "context", "kind-kind"},
    {"--provisioner-name", "rancher.io/local-path", "provisioner-name", "rancher.io/local-path"},
    {"--provisioner-name", "hostpath", "provisioner-name", "hostpath"},
    {"--provisioner-name", "Example.COM/Host_Path.v2", "provisioner-name",
     "Example.COM/Host_Path.v2"},
    {"--pv-dir", "/srv/volumes", "pv-dir", "/srv/volumes"},
    {"--pv-dir", "/srv//volumes///", "pv-dir", "/srv/volumes"},
    {"--node-name", "worker-1", "node-name", "worker-1"},
    {"--identity", "owner-a", "identity", "owner-a"},
    {"--default-reclaim-policy", "Retain", "default-reclaim-policy", "Retain"},
    {"--default-reclaim-policy", "Delete", "default-reclaim-policy", "Delete"},
    {"--workers", "1", "workers", "1"},
    {"--workers", "1024", "workers", "1024"},
    {"--resync-period", "0", "resync-period", "0"},
    {"--resync-period", "1h30m", "resync-period", "5400000"},
    {"--retry-base-delay", "250ms", "retry-base-delay", "250"},
    {"--retry-max-delay", "10m", "retry-max-delay", "600000"},
    {"--failed-retry-threshold", "0", "failed-retry-threshold", "0"},
    {"--failed-retry-threshold", "3", "failed-retry-threshold", "3"},
    {"--leader-elect-namespace", "kube-system", "leader-elect-namespace", "kube-system"},
    {"--leader-elect-lease-duration", "60s", "leader-elect-lease-duration", "60000"},
    {"--leader-elect-renew-deadline", "5s", "leader-elect-renew-deadline", "5000"},
    {"--leader-elect-retry-period", "500ms", "leader-elect-retry-period", "500"},
    {"--metrics-address", "127.0.0.1:9090", "metrics-address", "127.0.0.1|9090"},
    {"--metrics-address", ":0", "metrics-address", "|0"},
    {"--metrics-address", "[::1]:8081", "metrics-address", "::1|8081"},
    {"--metrics-address", "localhost:65535", "metrics-address", "localhost|65535"},
    {"--metrics-address", "", "metrics-address", "|-1"},
    {"--kube-api-qps", "0", "kube-api-qps", "0"},
    {"--kube-api-qps", "12.5", "kube-api-qps", "12.5"},
    {"--kube-api-burst", "7", "kube-api-burst", "7"},
    {"--v", "4", "v", "4"},
    {"-v", "10", "v", "10"},
    {"--log-format", "json", "log-format", "json"},
    {"--log-format", "text", "log-format", "text"},
};

static void test_every_flag_both_syntaxes(void **state)
{
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(flag_cases); i++) {
        const struct flag_case *fc = &flag_cases[i];
        struct hp_config cfg;
        char joined[256];

        /* --flag=value */
        snprintf(joined, sizeof(joined), "%s=%s", fc->flag, fc->value);
        parse_ok(&cfg, ARGS(joined));
        assert_field(&cfg, fc->field, fc->want);
        hp_config_free(&cfg);
        /* --flag value */
        parse_ok(&cfg, ARGS(fc->flag, fc->value));
        assert_field(&cfg, fc->field, fc->want);
        hp_config_free(&cfg);
        /* -Xvalue: a shorthand's value may be attached, as pflag allows */
        if (fc->flag[1] != '-') {
            snprintf(joined, sizeof(joined), "%s%s", fc->flag, fc->value);
            parse_ok(&cfg, ARGS(joined));
            assert_field(&cfg, fc->field, fc->want);
            hp_config_free(&cfg);
        }
    }
}

static void test_boolean_flags(void **state)
{
    static const struct {
        const char *arg, *field, *want;
    } cases[] = {
        {"--leader-elect", "leader-elect", "1"},
        {"--leader-elect=true", "leader-elect", "1"},
        {"--leader-elect=false", "leader-elect", "0"},
        {"--leader-elect=1", "leader-elect", "1"},
        {"--leader-elect=False", "leader-elect", "0"},
        {"--add-finalizer", "add-finalizer", "1"},
        {"--add-finalizer=true", "add-finalizer", "1"},
        {"--add-finalizer=false", "add-finalizer", "0"},
        {"--add-finalizer=t", "add-finalizer", "1"},
        {"--take-over", "take-over", "1"},
        {"--take-over=false", "take-over", "0"},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        struct hp_config cfg;
        parse_ok(&cfg, ARGS(cases[i].arg));
        assert_field(&cfg, cases[i].field, cases[i].want);
        hp_config_free(&cfg);
    }
    /* A bare boolean does not consume the next argument. */
    {
        struct hp_config cfg;
        parse_ok(&cfg, ARGS("--leader-elect", "--workers", "2"));
        assert_int_equal(cfg.leader_elect, 1);
        assert_int_equal(cfg.workers, 2);
        hp_config_free(&cfg);
    }
    /* "--leader-elect false" leaves a positional "false", as pflag does. */
    parse_err(ARGS("--leader-elect", "false"), "unexpected argument \"false\"");
}

static void test_verbosity_spellings(void **state)
{
    static const char *const spellings[][2] = {
        {"--v=3", NULL},
        {"-v=3", NULL},
        {"--v", "3"},
        {"-v", "3"},
        {"-v3", NULL}, /* pflag: a shorthand's value may be attached */
        {"-v03", NULL},
        {"-v=03", NULL},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(spellings); i++) {
        struct hp_config cfg;
        if (spellings[i][1])
            parse_ok(&cfg, ARGS(spellings[i][0], spellings[i][1]));
        else
            parse_ok(&cfg, ARGS(spellings[i][0]));
        assert_int_equal(cfg.verbosity, 3);
        hp_config_free(&cfg);
    }
}

/* The default write limit gives way to API Priority and Fairness; a given one never does. */
static void test_kube_api_limits_given(void **state)
{
    const struct {
        const char *const *args;
        int set;
        double qps;
        int burst;
    } cases[] = {
        {NOARGS, 0, 50, 100},
        {ARGS("--kube-api-qps", "50"), 1, 50, 100}, /* the default value, but given */
        {ARGS("--kube-api-qps=20"), 1, 20, 100},
        {ARGS("--kube-api-burst", "7"), 1, 50, 7},
        {ARGS("--kube-api-qps", "0"), 1, 0, 100},
        {ARGS("--workers", "2"), 0, 50, 100},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        struct hp_config cfg;
        parse_ok(&cfg, cases[i].args);
        assert_int_equal(cfg.kube_api_limits_set, cases[i].set);
        assert_true(cfg.kube_api_qps == cases[i].qps);
        assert_int_equal(cfg.kube_api_burst, cases[i].burst);
        hp_config_free(&cfg);
    }
}

static void test_later_flag_wins_and_combinations(void **state)
{
    struct hp_config cfg;
    (void)state;

    parse_ok(&cfg,
             ARGS("--workers=2", "--workers", "8", "--pv-dir=/a", "--pv-dir=/b", "--leader-elect",
                  "--leader-elect-renew-deadline=2401ms", "--leader-elect-retry-period=2s",
                  "--kube-api-qps=0", "--kube-api-burst=0"));
    assert_int_equal(cfg.workers, 8);
    assert_string_equal(cfg.pv_dir, "/b");
    assert_int_equal(cfg.leader_elect, 1);
    assert_int_equal(cfg.renew_deadline_ms, 2401);
    assert_int_equal(cfg.kube_api_burst, 0); /* allowed: qps 0 = no limit */
    hp_config_free(&cfg);

    /* Identity: explicit beats node name; node name beats host name. */
    parse_ok(&cfg, ARGS("--node-name=n1"));
    assert_string_equal(cfg.identity, "n1");
    hp_config_free(&cfg);
    parse_ok(&cfg, ARGS("--node-name=n1", "--identity=x"));
    assert_string_equal(cfg.identity, "x");
    assert_string_equal(cfg.node_name, "n1");
    hp_config_free(&cfg);

    /* Relationship checks apply only with --leader-elect, as in component-base. */
    parse_ok(&cfg, ARGS("--leader-elect-lease-duration=5s"));
    assert_int_equal(cfg.lease_duration_ms, 5000);
    hp_config_free(&cfg);
    parse_ok(&cfg, ARGS("--retry-base-delay=1s", "--retry-max-delay=1s"));
    hp_config_free(&cfg);
    parse_ok(&cfg, ARGS("--"));
    hp_config_free(&cfg);
}

/* ---- environment ------------------------------------------------------------------------- */

struct env_case {
    const char *env, *env_value;
    const char *field, *want;         /* from the environment */
    const char *flag_arg, *flag_want; /* the flag beats it */
};

static const struct env_case env_cases[] = {
    {"KUBECONFIG", "/home/u/.kube/a:/home/u/.kube/b", "kubeconfig",
     "/home/u/.kube/a:/home/u/.kube/b", "--kubeconfig=/x", "/x"},
    {"PV_DIR", "/data/pv/", "pv-dir", "/data/pv", "--pv-dir=/other", "/other"},
    {"NODE_NAME", "node-7", "node-name", "node-7", "--node-name=node-8", "node-8"},
    {"NODE_NAME", "node-7", "identity", "node-7", "--identity=me", "me"},
    {"PV_RECLAIM_POLICY", "Retain", "default-reclaim-policy", "Retain",
     "--default-reclaim-policy=Delete", "Delete"},
    {"POD_NAMESPACE", "storage", "leader-elect-namespace", "storage",
     "--leader-elect-namespace=kube-system", "kube-system"},
    /* Invalid environment values do not matter when the flag is given. */
    {"PV_DIR", "relative", NULL, NULL, "--pv-dir=/ok", "/ok"},
    {"PV_RECLAIM_POLICY", "Recycle", NULL, NULL, "--default-reclaim-policy=Retain", "Retain"},
};

static void test_env_fallbacks_and_precedence(void **state)
{
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_cases); i++) {
        const struct env_case *ec = &env_cases[i];
        struct hp_config cfg;
        const char *flagname = ec->flag_arg + 2;
        char field[64];
        size_t n = strcspn(flagname, "=");

        snprintf(field, sizeof(field), "%.*s", (int)n, flagname);
        assert_int_equal(setenv(ec->env, ec->env_value, 1), 0);
        if (ec->field) {
            parse_ok(&cfg, NOARGS);
            assert_field(&cfg, ec->field, ec->want);
            hp_config_free(&cfg);
        }
        parse_ok(&cfg, ARGS(ec->flag_arg));
        assert_field(&cfg, field, ec->flag_want);
        hp_config_free(&cfg);
        unsetenv(ec->env);
    }
}

static void test_env_serviceaccount_dir_and_empty(void **state)
{
    struct hp_config cfg;
    (void)state;

    setenv("HOSTPATH_SERVICEACCOUNT_DIR", "/tmp/fake-sa", 1);
    parse_ok(&cfg, NOARGS);
    assert_string_equal(cfg.serviceaccount_dir, "/tmp/fake-sa");
    hp_config_free(&cfg);
    unsetenv("HOSTPATH_SERVICEACCOUNT_DIR");

    /* Empty variables count as unset (downward API fields can be empty). */
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++)
        setenv(env_names[i], "", 1);
    parse_ok(&cfg, NOARGS);
    assert_null(cfg.kubeconfig);
    assert_string_equal(cfg.pv_dir, "/var/lib/hostpath-provisioner");
    assert_null(cfg.node_name);
    assert_int_equal(cfg.default_reclaim_policy, HP_RECLAIM_DELETE);
    assert_null(cfg.leader_elect_namespace);
    assert_string_equal(cfg.serviceaccount_dir, "/var/run/secrets/kubernetes.io/serviceaccount");
    hp_config_free(&cfg);
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++)
        unsetenv(env_names[i]);
}

static void test_env_bad_values(void **state)
{
    static const struct {
        const char *env, *value, *want;
    } cases[] = {
        {"PV_DIR", "relative/dir", "PV_DIR: invalid directory \"relative/dir\""},
        {"PV_DIR", "/", "PV_DIR: invalid directory"},
        {"PV_RECLAIM_POLICY", "Recycle", "PV_RECLAIM_POLICY: invalid reclaim policy \"Recycle\""},
        {"PV_RECLAIM_POLICY", "delete", "PV_RECLAIM_POLICY: invalid reclaim policy"},
        {"POD_NAMESPACE", "Not_A_Namespace", "POD_NAMESPACE: invalid namespace"},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        setenv(cases[i].env, cases[i].value, 1);
        parse_err(NOARGS, cases[i].want);
        unsetenv(cases[i].env);
    }
}

/* ---- --help and --version ---------------------------------------------------------------- */

/* What hp_config_usage prints. Caller frees. */
static char *usage_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    hp_config_usage(f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void test_help_lists_every_flag(void **state)
{
    static const char *const flags[] = {
        "--kubeconfig",
        "--master",
        "--context",
        "--provisioner-name",
        "--pv-dir",
        "--node-name",
        "--identity",
        "--default-reclaim-policy",
        "--workers",
        "--resync-period",
        "--retry-base-delay",
        "--retry-max-delay",
        "--failed-retry-threshold",
        "--leader-elect ",
        "--leader-elect-namespace",
        "--leader-elect-lease-duration",
        "--leader-elect-renew-deadline",
        "--leader-elect-retry-period",
        "--metrics-address",
        "--kube-api-qps",
        "--kube-api-burst",
        "--add-finalizer",
        "--v ",
        "-v, ",
        "--log-format",
        "--help",
        "--version",
        /* defaults and environment variables */
        "hostpath-provisioner.io",
        "/var/lib/hostpath-provisioner",
        "(default 15m)",
        "(default 5ms)",
        "(default 5m)",
        "(default 15s)",
        "(default 10s)",
        "(default 2s)",
        "(default 15)",
        "(default 4)",
        "(default 50)",
        "(default 100)",
        "\":8080\"",
        "(default Delete)",
        "[env KUBECONFIG]",
        "[env PV_DIR]",
        "[env NODE_NAME]",
        "[env PV_RECLAIM_POLICY]",
        "[env POD_NAMESPACE]",
        "HOSTPATH_SERVICEACCOUNT_DIR",
        "Usage:",
    };
    static const char *const spellings[] = {"--help", "-h"};
    (void)state;

    for (size_t s = 0; s < HP_ARRAY_SIZE(spellings); s++) {
        struct hp_config cfg;
        char err[256] = "";
        char *out;

        assert_int_equal(parse_argv(&cfg, err, sizeof(err), &out, ARGS(spellings[s])),
                         HP_CONFIG_EXIT);
        for (size_t i = 0; i < HP_ARRAY_SIZE(flags); i++)
            if (!strstr(out, flags[i]))
                fail_msg("--help output lacks '%s'", flags[i]);
        free(out);
        hp_config_free(&cfg);
    }
    /* hp_config_usage on its own prints the same text. */
    char *buf = usage_text();
    assert_non_null(strstr(buf, "--leader-elect-retry-period"));
    free(buf);
}

/* ---- README.md's flag table matches the option table ---------------------------------- */

#define MAX_FLAGS 64

struct flag_set {
    char names[MAX_FLAGS][48];
    int n;
};

static void flag_add(struct flag_set *s, const char *name, size_t len)
{
    assert_true(s->n < MAX_FLAGS && len < sizeof(s->names[0]));
    memcpy(s->names[s->n], name, len);
    s->names[s->n][len] = '\0';
    s->n++;
}

static int flag_has(const struct flag_set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return 1;
    return 0;
}

/* The long flags --help lists: "  -v, --v int ..." and "      --pv-dir string ...". */
static void help_flags(const char *help, struct flag_set *s)
{
    for (const char *line = help; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = NULL;
        if (strncmp(line, "      --", 8) == 0)
            p = line + 8;
        else if (strncmp(line, "  -", 3) == 0 && strncmp(line + 4, ", --", 4) == 0)
            p = line + 8;
        if (p)
            flag_add(s, p, strcspn(p, " \n"));
    }
}

/* The flags of the first column of the table under "## Command line": every `--name` in it. */
static int readme_flags(const char *readme, struct flag_set *s)
{
    const char *sec = strstr(readme, "\n## Command line\n"), *line;
    if (!sec)
        return -1;
    line = strstr(sec, "\n|");
    for (; line && line[1] == '|'; line = strchr(line + 1, '\n')) {
        const char *cell = line + 2, *end = strchr(cell, '|'), *p = cell;
        if (!end)
            return -1;
        while ((p = strstr(p, "`--")) != NULL && p < end) {
            size_t n = strcspn(p + 3, "`");
            flag_add(s, p + 3, n);
            p += 3 + n;
        }
    }
    return 0;
}

/* Every flag of --help in README.md's table and every flag of the table in --help; else 0 and
 * the first difference in why. */
static int tables_agree(const char *readme, const char *help, char *why, size_t len)
{
    struct flag_set h = {.n = 0}, r = {.n = 0};
    help_flags(help, &h);
    if (readme_flags(readme, &r) < 0 || r.n == 0) {
        snprintf(why, len, "README.md has no flag table under \"## Command line\"");
        return 0;
    }
    for (int i = 0; i < h.n; i++)
        if (!flag_has(&r, h.names[i])) {
            snprintf(why, len, "--%s is in --help but not in README.md's flag table", h.names[i]);
            return 0;
        }
    for (int i = 0; i < r.n; i++)
        if (!flag_has(&h, r.names[i])) {
            snprintf(why, len, "--%s is in README.md's flag table but not in --help", r.names[i]);
            return 0;
        }
    return 1;
}

static void test_readme_flag_table(void **state)
{
    const char *root = getenv("HP_SOURCE_ROOT"); /* set by tests/meson.build */
    char path[4096], why[256];
    struct hp_buf readme;
    FILE *f;
    size_t n;
    (void)state;

    assert_non_null(root);
    snprintf(path, sizeof(path), "%s/README.md", root);
    f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s", path);
    hp_buf_init(&readme, 0);
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        assert_int_equal(hp_buf_append(&readme, chunk, n), 0);
    fclose(f);
    char *help = usage_text();
    struct flag_set h = {.n = 0};
    help_flags(help, &h);
    assert_true(h.n >= 28); /* the parser of --help finds them all (28 today) */
    if (!tables_agree(readme.data, help, why, sizeof(why)))
        fail_msg("%s", why);

    /* The check fails when the tables differ, either way. */
    const char *table = "x\n## Command line\n\n| flag | default |\n|---|---|\n"
                        "| `--kubeconfig` / `--master` | x |\n\nafter\n";
    assert_false(tables_agree(table, help, why, sizeof(why)));
    assert_non_null(strstr(why, "in --help but not in README.md"));
    assert_false(tables_agree("no table", help, why, sizeof(why)));
    char *extra = hp_xasprintf("%.*s| `--no-such-flag` | | |\n%s",
                               (int)(strstr(readme.data, "| `--kubeconfig`") - readme.data),
                               readme.data, strstr(readme.data, "| `--kubeconfig`"));
    assert_false(tables_agree(extra, help, why, sizeof(why)));
    assert_string_equal(why, "--no-such-flag is in README.md's flag table but not in --help");
    free(extra);
    free(help);
    hp_buf_free(&readme);
}

static void test_version(void **state)
{
    struct hp_config cfg;
    char err[256] = "";
    char *out;
    (void)state;

    assert_int_equal(parse_argv(&cfg, err, sizeof(err), &out, ARGS("--version")), HP_CONFIG_EXIT);
    assert_string_equal(out, "hostpath-provisioner " HP_VERSION "\n");
    free(out);
    hp_config_free(&cfg);
    /* --help stops parsing: a later bad flag is not reached. */
    assert_int_equal(parse_argv(&cfg, err, sizeof(err), &out, ARGS("--help", "--bogus")),
                     HP_CONFIG_EXIT);
    free(out);
    hp_config_free(&cfg);
}

/* ---- errors ------------------------------------------------------------------------------ */

struct err_case {
    const char *args[4];
    const char *want;
};

static const struct err_case err_cases[] = {
    /* flags and arguments */
    {{"--nope"}, "unknown flag: --nope"},
    {{"--nope=1"}, "unknown flag: --nope"},
    {{"-x"}, "unknown flag: -x"},
    {{"-kubeconfig", "/x"}, "unknown flag: -kubeconfig"},
    {{"---v=1"}, "unknown flag"},
    {{"--=x"}, "unknown flag"},
    {{"--workers"}, "--workers: flag needs an argument"},
    {{"-v"}, "-v: flag needs an argument"},
    {{"-v="}, "-v: invalid integer \"\""},
    {{"-v11"}, "-v: 11 is out of range (0..10)"},
    {{"-v-1"}, "-v: -1 is out of range (0..10)"},
    {{"-v3=4"}, "-v: invalid integer \"3=4\""},
    {{"-vv"}, "-v: invalid integer \"v\""},
    {{"-h3"}, "unknown flag: -h3"},
    {{"-hv3"}, "unknown flag: -hv3"},
    {{"-x3"}, "unknown flag: -x3"},
    {{"extra"}, "unexpected argument \"extra\""},
    {{"--workers=2", "extra"}, "unexpected argument \"extra\""},
    {{"--", "x"}, "unexpected argument \"x\""},
    {{"-"}, "unexpected argument \"-\""},
    {{"--help=1"}, "--help: takes no value"},
    {{"--leader-elect=maybe"}, "--leader-elect: invalid boolean \"maybe\""},
    {{"--add-finalizer="}, "--add-finalizer: invalid boolean \"\""},
    /* durations */
    {{"--resync-period="}, "--resync-period: invalid duration \"\" (use e.g. 30s, 5m, 1h)"},
    {{"--resync-period", "5"}, "--resync-period: invalid duration \"5\""},
    {{"--resync-period=5x"}, "--resync-period: invalid duration \"5x\""},
    {{"--retry-max-delay=-1s"},
     "--retry-max-delay: -1s is out of range (0..2562047h47m16.854775807s)"},
    {{"--retry-max-delay=2562048h"},
     "--retry-max-delay: 2562048h is out of range (0..2562047h47m16.854775807s)"},
    {{"--leader-elect-retry-period=99999999999999999999s"},
     "--leader-elect-retry-period: 99999999999999999999s is out of range (0..2562047h"},
    {{"--resync-period=99999999999999999999x"}, "--resync-period: invalid duration"},
    {{"--leader-elect-lease-duration=1h-5m"}, "invalid duration"},
    /* addresses */
    {{"--metrics-address=nohostport"}, "--metrics-address: invalid address \"nohostport\""},
    {{"--metrics-address=host:99999"}, "invalid address \"host:99999\""},
    {{"--metrics-address=[::1"}, "invalid address \"[::1\""},
    {{"--metrics-address=:"}, "invalid address \":\""},
    {{"--metrics-address=::1:80"}, "invalid address"},
    {{"--metrics-address=host:-1"}, "invalid address"},
    {{"--metrics-address=host:http"}, "invalid address"},
    {{"--metrics-address=[::1]"}, "invalid address"},
    /* integers and numbers */
    {{"--workers=abc"}, "--workers: invalid integer \"abc\""},
    {{"--workers=1e3"}, "--workers: invalid integer \"1e3\""},
    {{"--workers= 4"}, "invalid integer"},
    {{"--workers=0"}, "--workers: 0 is out of range (1..1024)"},
    {{"--workers=1025"}, "--workers: 1025 is out of range (1..1024)"},
    {{"--workers=99999999999999999999"}, "--workers: 99999999999999999999 is out of range"},
    {{"--kube-api-burst=-1"}, "--kube-api-burst: -1 is out of range (0..2147483647)"},
    {{"--kube-api-burst", "99999999999"},
     "--kube-api-burst: 99999999999 is out of range (0..2147483647)"},
    {{"--kube-api-burst=2147483648"},
     "--kube-api-burst: 2147483648 is out of range (0..2147483647)"},
    {{"--failed-retry-threshold=-1"},
     "--failed-retry-threshold: -1 is out of range (0..2147483647)"},
    {{"--failed-retry-threshold", "99999999999"},
     "--failed-retry-threshold: 99999999999 is out of range (0..2147483647)"},
    {{"--failed-retry-threshold=99999999999999999999999"},
     "--failed-retry-threshold: 99999999999999999999999 is out of range (0..2147483647)"},
    {{"--workers=-99999999999999999999"}, "is out of range (1..1024)"},
    {{"--failed-retry-threshold=x"}, "invalid integer"},
    {{"--v=11"}, "--v: 11 is out of range (0..10)"},
    {{"-v=-1"}, "-v: -1 is out of range"},
    {{"--kube-api-qps=abc"}, "--kube-api-qps: invalid number \"abc\""},
    {{"--kube-api-qps=-1"}, "--kube-api-qps: -1 is out of range (0..1.79769e+308)"},
    {{"--kube-api-qps=nan"}, "invalid number"},
    {{"--kube-api-qps=inf"}, "invalid number"},
    {{"--kube-api-qps=-inf"}, "invalid number"},
    {{"--kube-api-qps=1e999"}, "--kube-api-qps: 1e999 is out of range (0..1.79769e+308)"},
    {{"--kube-api-qps=-1e999"}, "--kube-api-qps: -1e999 is out of range (0..1.79769e+308)"},
    {{"--kube-api-qps=1e-999"}, "invalid number"},
    {{"--kube-api-qps=5", "--kube-api-burst=0"}, "--kube-api-burst: must be at least 1"},
    /* enumerations and names */
    {{"--default-reclaim-policy=Recycle"}, "invalid reclaim policy \"Recycle\""},
    {{"--default-reclaim-policy=delete"}, "invalid reclaim policy \"delete\""},
    {{"--default-reclaim-policy="}, "invalid reclaim policy"},
    {{"--log-format=yaml"}, "--log-format: invalid log format \"yaml\" (use text or json)"},
    {{"--pv-dir=relative/dir"}, "--pv-dir: invalid directory \"relative/dir\""},
    {{"--pv-dir=/"}, "--pv-dir: invalid directory"},
    {{"--pv-dir=///"}, "--pv-dir: invalid directory"},
    {{"--pv-dir="}, "--pv-dir: invalid directory"},
    {{"--pv-dir=/a/../b"}, "--pv-dir: invalid directory"},
    {{"--pv-dir=/a/./b"}, "--pv-dir: invalid directory"},
    {{"--provisioner-name="}, "--provisioner-name: invalid provisioner name"},
    {{"--provisioner-name=a/b/c"}, "invalid provisioner name \"a/b/c\""},
    {{"--provisioner-name=example.com/"}, "invalid provisioner name"},
    {{"--provisioner-name=/hostpath"}, "invalid provisioner name"},
    {{"--provisioner-name=-bad"}, "invalid provisioner name"},
    {{"--provisioner-name=bad_prefix.com/x"}, "invalid provisioner name"},
    {{"--provisioner-name=has space"}, "invalid provisioner name"},
    {{"--provisioner-name=x.com/"
      "a234567890123456789012345678901234567890123456789012345678901234"},
     "invalid provisioner name"},
    {{"--master=ftp://x"}, "--master: invalid URL \"ftp://x\""},
    {{"--master=10.0.0.1:6443"}, "--master: invalid URL"},
    {{"--leader-elect-namespace=Bad_NS"}, "--leader-elect-namespace: invalid namespace"},
    {{"--identity="}, "--identity: must not be empty"},
    /* relationships */
    {{"--retry-base-delay=0"}, "--retry-base-delay: must be greater than 0"},
    {{"--retry-base-delay=10m"}, "--retry-base-delay (600000ms) must not exceed --retry-max-delay"},
    {{"--retry-base-delay=2s", "--retry-max-delay=1s"}, "must not exceed --retry-max-delay"},
    {{"--leader-elect", "--leader-elect-lease-duration=10s"},
     "--leader-elect-lease-duration (10000ms) must be greater than --leader-elect-renew-deadline"},
    {{"--leader-elect", "--leader-elect-renew-deadline=20s"},
     "must be greater than --leader-elect-renew-deadline (20000ms)"},
    {{"--leader-elect", "--leader-elect-renew-deadline=2400ms"},
     "--leader-elect-renew-deadline (2400ms) must be greater than --leader-elect-retry-period"},
    {{"--leader-elect", "--leader-elect-retry-period=9s"}, "--leader-elect-retry-period (9000ms)"},
    {{"--leader-elect", "--leader-elect-retry-period=0"}, "must be greater than 0"},
};

static void test_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(err_cases); i++) {
        const char *args[5] = {NULL};
        memcpy(args, err_cases[i].args, sizeof(err_cases[i].args));
        parse_err(args, err_cases[i].want);
    }
}

static void test_err_buffer_small_or_absent(void **state)
{
    struct hp_config cfg;
    char err[8];
    char *argv[] = {(char *)"hp", (char *)"--workers=abc", NULL};
    (void)state;

    assert_int_equal(hp_config_parse(&cfg, 2, argv, stdout, err, sizeof(err)), HP_CONFIG_ERROR);
    assert_int_equal(strlen(err), sizeof(err) - 1); /* truncated, terminated */
    assert_int_equal(hp_config_parse(&cfg, 2, argv, stdout, NULL, 0), HP_CONFIG_ERROR);
    hp_config_free(&cfg);
}

/* ---- shared parsers ---------------------------------------------------------------------- */

static void test_parse_duration(void **state)
{
    static const struct {
        const char *s;
        uint64_t ms;
    } good[] = {
        {"0", 0},
        {"+0", 0},
        {"0s", 0},
        {"250ms", 250},
        {"15s", 15000},
        {"5m", 300000},
        {"1h", 3600000},
        {"1h30m", 5400000},
        {"1.5h", 5400000},
        {"1h0.5m", 3630000},
        {".5s", 500},
        {"1.s", 1000},
        {"+5s", 5000},
        {"10us", 1},
        {"10\xc2\xb5s", 1},
        {"10\xce\xbcs", 1},
        {"1ns", 1},
        {"1500us", 2},
        {"2ms500us", 3},
        {"1.0001s", 1001},
        {"2562047h", 9223369200000ULL},
        {"0.000000000001s", 0},
    };
    static const char *const bad[] = {
        "",
        "5",
        "5x",
        "-",
        "-5x",
        "99999999999999999999x", /* malformed, though its number is also too large */
        "s",
        ".s",
        ".",
        "1h-5m",
        "00",
        "1 s",
        " 1s",
        "1s ",
        "1S",
        "1sec",
        "1e3s",
        "+",
        "h1",
    };
    static const char *const out_of_range[] = {
        "-1s", "-0", "-1h30m", "2562048h", "9223372036855ms", "99999999999999999999s",
        "2562047h47m16.854775808s", "2562047h47m17s", "1h2562047h",
    };
    (void)state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(good); i++) {
        uint64_t ms = 12345;
        if (hp_parse_duration_ms(good[i].s, &ms) != 0)
            fail_msg("duration '%s' refused", good[i].s);
        if (ms != good[i].ms)
            fail_msg("duration '%s': got %llu ms, want %llu", good[i].s, (unsigned long long)ms,
                     (unsigned long long)good[i].ms);
    }
    for (size_t i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        uint64_t ms = 12345;
        if (hp_parse_duration_ms(bad[i], &ms) != -EINVAL)
            fail_msg("duration '%s' accepted", bad[i]);
        assert_int_equal(ms, 12345); /* untouched on error */
    }
    /* Well-formed but outside 0..2562047h47m16.854775807s: -ERANGE, said as such. */
    for (size_t i = 0; i < HP_ARRAY_SIZE(out_of_range); i++) {
        uint64_t ms = 12345;
        if (hp_parse_duration_ms(out_of_range[i], &ms) != -ERANGE)
            fail_msg("duration '%s' not out of range", out_of_range[i]);
        assert_int_equal(ms, 12345);
    }
    assert_int_equal(hp_parse_duration_ms(NULL, &(uint64_t){0}), -EINVAL);
}

static void test_parse_host_port(void **state)
{
    static const struct {
        const char *s, *host;
        int port;
    } good[] = {
        {":8080", "", 8080},
        {"127.0.0.1:9", "127.0.0.1", 9},
        {"[::1]:9", "::1", 9},
        {"[::]:0", "::", 0},
        {"localhost:65535", "localhost", 65535},
        {"0.0.0.0:00080", "0.0.0.0", 80},
    };
    static const char *const bad[] = {
        "",          "nohostport", "host:99999",  "[::1",      ":",       "::1:80",
        "host:",     "[::1]",      "[::1]x:80",   "[]:80",     "host:-1", "host:+1",
        "host:http", "a[b:80",     "host:123456", "[::1]:8[0",
    };
    (void)state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(good); i++) {
        char *host = NULL;
        int port = -2;
        if (hp_parse_host_port(good[i].s, &host, &port) != 0)
            fail_msg("address '%s' refused", good[i].s);
        assert_string_equal(host, good[i].host);
        assert_int_equal(port, good[i].port);
        free(host);
    }
    for (size_t i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        char *host = NULL;
        int port = -2;
        if (hp_parse_host_port(bad[i], &host, &port) != -EINVAL)
            fail_msg("address '%s' accepted", bad[i]);
        assert_null(host);
        assert_int_equal(port, -2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_every_flag_both_syntaxes, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_boolean_flags, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_verbosity_spellings, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_kube_api_limits_given, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_later_flag_wins_and_combinations, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_env_fallbacks_and_precedence, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_env_serviceaccount_dir_and_empty, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_env_bad_values, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_help_lists_every_flag, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_version, env_setup, env_teardown),
        cmocka_unit_test(test_readme_flag_table),
        cmocka_unit_test_setup_teardown(test_errors, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_err_buffer_small_or_absent, env_setup, env_teardown),
        cmocka_unit_test(test_parse_duration),
        cmocka_unit_test(test_parse_host_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
