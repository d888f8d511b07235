/* Unit tests for kubeconfig: kubeconfig files, in-cluster credentials, token reload, errors.
 * Every test writes its files to a fresh mkdtemp directory and clears the environment it reads. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/config.h"
#include "hostpath/kubeconfig.h"

#define SECRET_TOKEN "s3cr3t-bearer-TOKEN-value"
#define SECRET_FILE_TOKEN "file-s3cr3t-TOKEN-1"
#define PEM_CA "-----BEGIN CERTIFICATE-----\nMIIBcaFAKE\n-----END CERTIFICATE-----\n"
#define PEM_CERT "-----BEGIN CERTIFICATE-----\nMIIBclientFAKE\n-----END CERTIFICATE-----\n"
#define PEM_KEY "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKEYs3cr3t\n-----END EC PRIVATE KEY-----\n"

static const char *const env_names[] = {"KUBECONFIG", "KUBERNETES_SERVICE_HOST",
                                        "KUBERNETES_SERVICE_PORT", "HOME"};

struct fixture {
    char dir[PATH_MAX]; /* real path of the temporary directory */
    char *saved_env[HP_ARRAY_SIZE(env_names)];
    char *ca_b64, *cert_b64, *key_b64;
};

/* ---- helpers ----------------------------------------------------------------------------- */

static char *b64_encode(const char *s)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(s), o = 0;
    char *out = hp_xmalloc((n + 2) / 3 * 4 + 1);

    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)s[i + 2];
        out[o++] = tbl[v >> 18 & 63];
        out[o++] = tbl[v >> 12 & 63];
        out[o++] = i + 1 < n ? tbl[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static char *path_in(struct fixture *f, const char *name)
{
    return hp_xasprintf("%s/%s", f->dir, name);
}

/* Writes content to dir/name (creating one level of subdirectory if name has one). */
static char *write_file(struct fixture *f, const char *name, const char *content)
{
    char *path = path_in(f, name);
    const char *slash = strchr(name, '/');
    FILE *fp;

    if (slash) {
        char *sub = hp_xasprintf("%s/%.*s", f->dir, (int)(slash - name), name);
        if (mkdir(sub, 0700) < 0 && errno != EEXIST)
            fail_msg("mkdir %s: %s", sub, strerror(errno));
        free(sub);
    }
    fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(content, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
    return path;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    struct fixture *f = hp_xcalloc(1, sizeof(*f));
    char tmpl[] = "/tmp/hp-kubeconfig-XXXXXX";

    assert_non_null(mkdtemp(tmpl));
    assert_non_null(realpath(tmpl, f->dir));
    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++) {
        const char *v = getenv(env_names[i]);
        f->saved_env[i] = v ? hp_xstrdup(v) : NULL;
        unsetenv(env_names[i]);
    }
    /* A HOME without .kube/config, so nothing from the real user leaks in. */
    setenv("HOME", f->dir, 1);
    f->ca_b64 = b64_encode(PEM_CA);
    f->cert_b64 = b64_encode(PEM_CERT);
    f->key_b64 = b64_encode(PEM_KEY);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(env_names); i++) {
        if (f->saved_env[i])
            setenv(env_names[i], f->saved_env[i], 1);
        else
            unsetenv(env_names[i]);
        free(f->saved_env[i]);
    }
    assert_int_equal(nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(f->ca_b64);
    free(f->cert_b64);
    free(f->key_b64);
    free(f);
    return 0;
}

static void assert_no_secret(const char *err)
{
    static const char *const secrets[] = {SECRET_TOKEN, SECRET_FILE_TOKEN, "s3cr3t", "MIIB",
                                          "LS0tLS1CRUdJTi"};
    for (size_t i = 0; i < HP_ARRAY_SIZE(secrets); i++)
        if (strstr(err, secrets[i]))
            fail_msg("secret '%s' in message: %s", secrets[i], err);
}

/* Parses yaml as if read from dir/kubeconfig. */
static int parse(struct fixture *f, const char *yaml, const char *context, struct hp_kube_creds *c,
                 char *err, size_t errlen)
{
    char *path = path_in(f, "kubeconfig");
    int rc;

    err[0] = '\0';
    rc = hp_kubeconfig_parse(yaml, strlen(yaml), path, context, c, err, errlen);
    free(path);
    return rc;
}

static void parse_ok(struct fixture *f, const char *yaml, const char *context,
                     struct hp_kube_creds *c)
{
    char err[512];

    if (parse(f, yaml, context, c, err, sizeof(err)) != 0)
        fail_msg("kubeconfig refused: %s", err);
}

#define KC_HEAD "apiVersion: v1\nkind: Config\n"

/* ---- fields ------------------------------------------------------------------------------ */

static void test_server_ca_file_token_namespace(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char *ca = write_file(f, "certs/ca.crt", PEM_CA);
    char *kc = path_in(f, "kubeconfig");
    static const char yaml[] = KC_HEAD "clusters:\n"
                                       "- name: c1\n"
                                       "  cluster:\n"
                                       "    server: https://127.0.0.1:6443/\n"
                                       "    certificate-authority: certs/ca.crt\n"
                                       "contexts:\n"
                                       "- name: ctx\n"
                                       "  context: {cluster: c1, user: u1, namespace: team-a}\n"
                                       "current-context: ctx\n"
                                       "users:\n"
                                       "- name: u1\n"
                                       "  user:\n"
                                       "    token: " SECRET_TOKEN "\n"
                                       "preferences: {}\n";

    parse_ok(f, yaml, NULL, &c);
    assert_string_equal(c.server, "https://127.0.0.1:6443");
    assert_string_equal(c.ca_file, ca); /* relative to the kubeconfig's directory */
    assert_null(c.ca_data);
    assert_int_equal(c.insecure, 0);
    assert_string_equal(c.token, SECRET_TOKEN);
    assert_null(c.token_file);
    assert_null(c.client_cert_file);
    assert_null(c.client_key_data);
    assert_string_equal(c.namespace_, "team-a");
    assert_string_equal(c.source, kc);
    hp_kube_creds_free(&c);
    hp_kube_creds_free(&c); /* zeroed: safe again */
    assert_null(c.server);
    free(ca);
    free(kc);
}

static void test_ca_data_and_insecure(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char *yaml;
    char *ca = write_file(f, "ca.crt", PEM_CA);

    /* certificate-authority-data wins over certificate-authority, as in client-go. */
    yaml =
        hp_xasprintf(KC_HEAD "clusters:\n- name: c\n  cluster:\n    server: HTTPS://k.example:443\n"
                             "    certificate-authority: %s\n"
                             "    certificate-authority-data: %s\n"
                             "contexts:\n- name: x\n  context:\n    cluster: c\n"
                             "current-context: x\n",
                     ca, f->ca_b64);
    parse_ok(f, yaml, NULL, &c);
    assert_string_equal(c.server, "https://k.example:443");
    assert_string_equal(c.ca_data, PEM_CA);
    assert_null(c.ca_file);
    assert_null(c.token);
    assert_null(c.namespace_);
    hp_kube_creds_free(&c);
    free(yaml);

    /* Line-wrapped base64 (as in folded YAML) decodes too. */
    {
        struct hp_buf b;
        size_t n = strlen(f->ca_b64);
        hp_buf_init(&b, 0);
        assert_int_equal(hp_buf_appends(&b, KC_HEAD "clusters:\n- name: c\n  cluster:\n"
                                                    "    server: http://127.0.0.1:8080\n"
                                                    "    certificate-authority-data: |\n"),
                         0);
        for (size_t i = 0; i < n; i += 20)
            assert_int_equal(hp_buf_printf(&b, "      %.20s\n", f->ca_b64 + i), 0);
        assert_int_equal(hp_buf_appends(&b, "contexts:\n- name: x\n  context: {cluster: c}\n"
                                            "current-context: x\n"),
                         0);
        parse_ok(f, b.data, NULL, &c);
        assert_string_equal(c.ca_data, PEM_CA);
        assert_string_equal(c.server, "http://127.0.0.1:8080");
        hp_kube_creds_free(&c);
        hp_buf_free(&b);
    }

    parse_ok(f,
             KC_HEAD "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
                     "    insecure-skip-tls-verify: true\n"
                     "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
             NULL, &c);
    assert_int_equal(c.insecure, 1);
    assert_null(c.ca_file);
    assert_null(c.ca_data);
    hp_kube_creds_free(&c);
    parse_ok(f,
             KC_HEAD "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n"
                     "    insecure-skip-tls-verify: false\n"
                     "contexts:\n- name: x\n  context: {cluster: c}\ncurrent-context: x\n",
             NULL, &c);
    assert_int_equal(c.insecure, 0);
    hp_kube_creds_free(&c);
    free(ca);
}

static void test_token_file_and_reload(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char *tok = write_file(f, "tokens/sa-token", SECRET_FILE_TOKEN "\n");

    parse_ok(f,
             KC_HEAD "clusters:\n- name: c\n  cluster: {server: 'https://h:6443'}\n"
                     "users:\n- name: u\n  user:\n    token: " SECRET_TOKEN "\n"
                     "    tokenFile: tokens/sa-token\n"
                     "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"
                     "current-context: x\n",
             NULL, &c);
    /* The file wins over the inline token and its trailing newline is trimmed. */
    assert_string_equal(c.token, SECRET_FILE_TOKEN);
    assert_string_equal(c.token_file, tok);

    assert_int_equal(hp_kube_creds_reload_token(&c), 0); /* unchanged */
    assert_string_equal(c.token, SECRET_FILE_TOKEN);
    free(write_file(f, "tokens/sa-token", "  rotated-token-2\r\n\n"));
    assert_int_equal(hp_kube_creds_reload_token(&c), 1);
    assert_string_equal(c.token, "rotated-token-2");
    assert_int_equal(hp_kube_creds_reload_token(&c), 0);

    /* A vanished or empty file is an error and the previous token stays. */
    free(write_file(f, "tokens/sa-token", "\n"));
    assert_true(hp_kube_creds_reload_token(&c) < 0);
    assert_int_equal(unlink(tok), 0);
    assert_int_equal(hp_kube_creds_reload_token(&c), -ENOENT);
    assert_string_equal(c.token, "rotated-token-2");
    hp_kube_creds_free(&c);

    /* Without a token file there is nothing to reload. */
    memset(&c, 0, sizeof(c));
    assert_int_equal(hp_kube_creds_reload_token(&c), 0);
    free(tok);
}

static void test_client_cert_files_and_data(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char *cert = write_file(f, "pki/client.crt", PEM_CERT);
    char *key = write_file(f, "pki/client.key", PEM_KEY);
    char *yaml;

    parse_ok(f,
             KC_HEAD "clusters:\n- name: c\n  cluster: {server: 'https://h'}\n"
                     "users:\n- name: admin\n  user:\n"
                     "    client-certificate: pki/client.crt\n"
                     "    client-key: ./pki/client.key\n"
                     "contexts:\n- name: x\n  context: {cluster: c, user: admin}\n"
                     "current-context: x\n",
             NULL, &c);
    assert_string_equal(c.client_cert_file, cert);
    {
        char *dotted = hp_xasprintf("%s/./pki/client.key", f->dir);
        assert_string_equal(c.client_key_file, dotted);
        free(dotted);
    }
    assert_null(c.client_cert_data);
    assert_null(c.client_key_data);
    assert_null(c.token);
    hp_kube_creds_free(&c);

    yaml = hp_xasprintf(KC_HEAD "clusters:\n- name: c\n  cluster: {server: 'https://h'}\n"
                                "users:\n- name: admin\n  user:\n"
                                "    client-certificate-data: %s\n"
                                "    client-key-data: \"%s\"\n"
                                "    client-key: pki/client.key\n"
                                "contexts:\n- name: x\n  context: {cluster: c, user: admin}\n"
                                "current-context: x\n",
                        f->cert_b64, f->key_b64);
    parse_ok(f, yaml, NULL, &c);
    assert_string_equal(c.client_cert_data, PEM_CERT);
    assert_string_equal(c.client_key_data, PEM_KEY);
    assert_null(c.client_cert_file);
    assert_null(c.client_key_file); /* data wins */
    hp_kube_creds_free(&c);
    free(yaml);
    free(cert);
    free(key);
}

static const char two_contexts[] =
    KC_HEAD "clusters:\n"
            "- name: a\n  cluster: {server: 'https://a.example:6443'}\n"
            "- name: b\n  cluster: {server: 'https://b.example:6443'}\n"
            "contexts:\n"
            "- name: ctx-a\n  context: {cluster: a, namespace: ns-a}\n"
            "- name: ctx-b\n  context: {cluster: b, user: ub, namespace: ns-b}\n"
            "current-context: ctx-a\n"
            "users:\n- name: ub\n  user: {token: " SECRET_TOKEN "}\n";

static void test_current_context_vs_context(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;

    parse_ok(f, two_contexts, NULL, &c);
    assert_string_equal(c.server, "https://a.example:6443");
    assert_string_equal(c.namespace_, "ns-a");
    assert_null(c.token);
    hp_kube_creds_free(&c);

    parse_ok(f, two_contexts, "ctx-b", &c);
    assert_string_equal(c.server, "https://b.example:6443");
    assert_string_equal(c.namespace_, "ns-b");
    assert_string_equal(c.token, SECRET_TOKEN);
    hp_kube_creds_free(&c);

    /* An empty --context means current-context. */
    parse_ok(f, two_contexts, "", &c);
    assert_string_equal(c.server, "https://a.example:6443");
    hp_kube_creds_free(&c);

    /* JSON is YAML too. */
    parse_ok(f,
             "{\"kind\":\"Config\",\"clusters\":[{\"name\":\"j\",\"cluster\":{\"server\":"
             "\"https://json:1\"}}],\"contexts\":[{\"name\":\"jc\",\"context\":{\"cluster\":"
             "\"j\"}}],\"current-context\":\"jc\"}",
             NULL, &c);
    assert_string_equal(c.server, "https://json:1");
    hp_kube_creds_free(&c);
}

/* ---- hp_kube_creds_load: resolution order ------------------------------------------------ */

static void test_load_order_and_master(void **state)
{
    struct fixture *f = *state;
    struct hp_config cfg;
    struct hp_kube_creds c;
    char err[512];
    char *kc = write_file(f, "kc-a", two_contexts);
    char *list;

    memset(&cfg, 0, sizeof(cfg));
    cfg.serviceaccount_dir = f->dir; /* no token there */

    /* --kubeconfig */
    cfg.kubeconfig = kc;
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "https://a.example:6443");
    assert_string_equal(c.source, kc);
    hp_kube_creds_free(&c);

    /* --context and --master */
    cfg.context = (char *)"ctx-b";
    cfg.master = (char *)"http://127.0.0.1:18080/";
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "http://127.0.0.1:18080");
    assert_string_equal(c.token, SECRET_TOKEN); /* credentials still from ctx-b */
    assert_string_equal(c.namespace_, "ns-b");
    hp_kube_creds_free(&c);
    cfg.context = NULL;
    cfg.master = (char *)"ftp://x";
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--master"));
    assert_null(c.server);
    cfg.master = NULL;
    cfg.kubeconfig = NULL;

    /* KUBECONFIG: the first existing file of the list. */
    list = hp_xasprintf("%s/missing-1::%s:%s/missing-2", f->dir, kc, f->dir);
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_string_equal(c.source, kc);
    hp_kube_creds_free(&c);
    free(list);
    list = hp_xasprintf("%s/missing-1:%s/missing-2", f->dir, f->dir);
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "none of these files exists"));
    free(list);
    unsetenv("KUBECONFIG");

    /* Nothing at all. */
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a pod");
    /* KUBERNETES_SERVICE_HOST without a token: said in the message. */
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST is set but"));
    unsetenv("KUBERNETES_SERVICE_HOST");

    /* --master alone is enough (no credentials). */
    cfg.master = (char *)"http://127.0.0.1:1";
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "http://127.0.0.1:1");
    assert_null(c.token);
    hp_kube_creds_free(&c);
    cfg.master = NULL;

    /* ~/.kube/config */
    free(write_file(f, ".kube/config", two_contexts));
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "https://a.example:6443");
    assert_non_null(strstr(c.source, "/.kube/config"));
    hp_kube_creds_free(&c);
    free(kc);
}

static void test_relative_kubeconfig_path(void **state)
{
    struct fixture *f = *state;
    struct hp_config cfg;
    struct hp_kube_creds c;
    char err[512], cwd[PATH_MAX];
    char *ca = write_file(f, "sub/ca.pem", PEM_CA);
    char *tok = write_file(f, "sub/tok", "abc\n");

    free(write_file(f, "sub/config",
                    KC_HEAD "clusters:\n- name: c\n  cluster:\n    server: https://h\n"
                            "    certificate-authority: ca.pem\n"
                            "users:\n- name: u\n  user: {tokenFile: tok}\n"
                            "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"
                            "current-context: x\n"));
    memset(&cfg, 0, sizeof(cfg));
    cfg.kubeconfig = (char *)"sub/config";
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(f->dir), 0);
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
    assert_int_equal(chdir(cwd), 0);
    /* References become absolute, so a later chdir cannot break a token re-read. */
    assert_string_equal(c.ca_file, ca);
    assert_string_equal(c.token_file, tok);
    assert_string_equal(c.token, "abc");
    hp_kube_creds_free(&c);
    free(ca);
    free(tok);
}

/* ---- errors ------------------------------------------------------------------------------ */

struct err_case {
    const char *name;
    const char *yaml;
    const char *context;
    const char *want; /* substring of the message, after "kubeconfig <path>: " */
};

#define GOOD_CLUSTER "clusters:\n- name: c\n  cluster: {server: 'https://h:6443'}\n"
#define CTX_CU "contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"

static const struct err_case err_cases[] = {
    {"invalid yaml", "clusters: [\n  - name: c\n  server: : :\n", NULL, "invalid YAML at line"},
    {"tab yaml", "clusters:\n\t- x\n", NULL, "invalid YAML"},
    {"empty", "", NULL, "file is empty"},
    {"comment only", "# nothing\n", NULL, "file is empty"},
    {"not a mapping", "- a\n- b\n", NULL, "not a kubeconfig"},
    {"no current context", GOOD_CLUSTER "contexts: []\n", NULL,
     "current-context is not set; use --context"},
    {"unknown context", GOOD_CLUSTER CTX_CU, "foo", "context \"foo\" not found"},
    {"unknown current context",
     GOOD_CLUSTER "current-context: gone\nusers:\n- name: u\n  user: {token: " SECRET_TOKEN "}\n",
     NULL, "context \"gone\" not found"},
    {"context without cluster", "contexts:\n- name: x\n  context: {user: u}\ncurrent-context: x\n",
     NULL, "context \"x\": cluster is not set"},
    {"missing cluster entry", "clusters:\n- name: other\n  cluster: {server: 'https://h'}\n" CTX_CU,
     NULL, "cluster \"c\" not found (used by context \"x\")"},
    {"missing user entry",
     GOOD_CLUSTER CTX_CU "users:\n- name: someone\n  user: {token: " SECRET_TOKEN "}\n", NULL,
     "user \"u\" not found (used by context \"x\")"},
    {"missing server",
     "clusters:\n- name: c\n  cluster: {certificate-authority-data: ''}\n" CTX_CU
     "users:\n- name: u\n  user: {token: " SECRET_TOKEN "}\n",
     NULL, "cluster \"c\": server is not set"},
    {"cluster without body", "clusters:\n- name: c\n" CTX_CU, NULL,
     "cluster \"c\": server is not set"},
    {"bad scheme", "clusters:\n- name: c\n  cluster: {server: 'ftp://h'}\n" CTX_CU, NULL,
     "server \"ftp://h\" must start with https:// or http://"},
    {"no scheme", "clusters:\n- name: c\n  cluster: {server: 'h:6443'}\n" CTX_CU, NULL,
     "must start with https:// or http://"},
    {"no host", "clusters:\n- name: c\n  cluster: {server: 'https:///api'}\n" CTX_CU, NULL,
     "has no host"},
    {"userinfo in server",
     "clusters:\n- name: c\n  cluster: {server: 'https://admin:s3cr3t@h'}\n" CTX_CU, NULL,
     "server must not contain user credentials"},
    {"unreadable tokenFile",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    tokenFile: /nonexistent/token\n", NULL,
     "user \"u\": cannot read tokenFile /nonexistent/token: No such file or directory"},
    {"unreadable CA file",
     "clusters:\n- name: c\n  cluster: {server: 'https://h', certificate-authority: "
     "/no/ca}\n" CTX_CU,
     NULL, "cluster \"c\": cannot read certificate-authority /no/ca: No such file or directory"},
    {"unreadable client cert",
     GOOD_CLUSTER CTX_CU
     "users:\n- name: u\n  user: {client-certificate: /no/crt, client-key: /no/key}\n",
     NULL, "user \"u\": cannot read client-certificate /no/crt"},
    {"bad base64 CA",
     "clusters:\n- name: c\n  cluster:\n    server: https://h\n"
     "    certificate-authority-data: LS0tLS1CRUdJTi!!notbase64\n" CTX_CU,
     NULL, "cluster \"c\": certificate-authority-data is not valid base64"},
    {"bad base64 length",
     "clusters:\n- name: c\n  cluster:\n    server: https://h\n"
     "    certificate-authority-data: LS0tLS1CRUdJTi\n" CTX_CU,
     NULL, "certificate-authority-data is not valid base64"},
    {"bad base64 padding",
     "clusters:\n- name: c\n  cluster:\n    server: https://h\n"
     "    certificate-authority-data: LS0t=S1C\n" CTX_CU,
     NULL, "certificate-authority-data is not valid base64"},
    {"bad base64 key",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    client-certificate-data: TUlJQg==\n"
                         "    client-key-data: s3cr3t*key\n",
     NULL, "user \"u\": client-key-data is not valid base64"},
    {"binary CA data",
     "clusters:\n- name: c\n  cluster:\n    server: https://h\n"
     "    certificate-authority-data: AAEC\n" CTX_CU,
     NULL, "certificate-authority-data is not PEM text"},
    {"exec plugin",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    exec:\n"
                         "      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"
                         "      args: [eks, get-token, --token, " SECRET_TOKEN "]\n",
     NULL, "user \"u\": exec credential plugins are not supported; use a token"},
    {"auth provider",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    auth-provider:\n      name: oidc\n"
                         "      config: {id-token: " SECRET_TOKEN "}\n",
     NULL, "auth-provider plugins are not supported; use a token"},
    {"basic auth",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {username: admin, password: " SECRET_TOKEN
                         "}\n",
     NULL, "user \"u\": basic auth is not supported"},
    {"impersonation", GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {as: admin}\n", NULL,
     "impersonation (as) is not supported"},
    {"cert without key",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n"
                         "    client-certificate-data: TUlJQg==\n",
     NULL, "client-certificate and client-key must be given together"},
    {"insecure with CA",
     "clusters:\n- name: c\n  cluster:\n    server: https://h\n    insecure-skip-tls-verify: true\n"
     "    certificate-authority-data: TUlJQg==\n" CTX_CU,
     NULL, "insecure-skip-tls-verify cannot be combined with certificate-authority"},
    {"insecure not a bool",
     "clusters:\n- name: c\n  cluster: {server: 'https://h', insecure-skip-tls-verify: "
     "maybe}\n" CTX_CU,
     NULL, "cluster \"c\": insecure-skip-tls-verify: expected true or false"},
    {"duplicate cluster", GOOD_CLUSTER "- name: c\n  cluster: {server: 'https://other'}\n" CTX_CU,
     NULL, "clusters: duplicate name \"c\""},
    {"clusters not a list", "clusters: {c: 1}\n" CTX_CU, NULL, "clusters: expected a list"},
    {"cluster not a mapping", "clusters:\n- name: c\n  cluster: [1]\n" CTX_CU, NULL,
     "cluster \"c\": cluster: expected a mapping"},
    {"entry not a mapping", "clusters:\n- c\n" CTX_CU, NULL,
     "clusters: every entry must be a mapping"},
    {"token not a string",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    token: [" SECRET_TOKEN "]\n", NULL,
     "user \"u\": token: expected a string"},
    {"token with newline",
     GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user:\n    token: \"" SECRET_TOKEN "\\r\\nX: y\"\n",
     NULL, "user \"u\": token contains control characters"},
    {"server with NUL", "clusters:\n- name: c\n  cluster: {server: \"https://h\\0x\"}\n" CTX_CU,
     NULL, "server: contains a NUL character"},
};

static void test_errors(void **state)
{
    struct fixture *f = *state;

    for (size_t i = 0; i < HP_ARRAY_SIZE(err_cases); i++) {
        const struct err_case *ec = &err_cases[i];
        struct hp_kube_creds c;
        char err[512], *prefix = hp_xasprintf("kubeconfig %s/kubeconfig: ", f->dir);
        int rc = parse(f, ec->yaml, ec->context, &c, err, sizeof(err));

        if (rc >= 0) {
            hp_kube_creds_free(&c);
            fail_msg("case '%s': accepted", ec->name);
        }
        if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, ec->want))
            fail_msg("case '%s': message '%s' lacks '%s%s'", ec->name, err, prefix, ec->want);
        assert_null(strchr(err, '\n'));
        assert_no_secret(err);
        /* Nothing is left allocated in creds on error. */
        assert_null(c.server);
        assert_null(c.token);
        assert_null(c.source);
        free(prefix);
    }
}

/* Server URLs, from a kubeconfig and from --master alike: what is accepted (and stored), and
 * what is refused at load with its reason, rather than by curl at every request. */
static const struct {
    const char *url;
    const char *server; /* stored; NULL = refused */
    const char *why;    /* refused: substring of the reason */
} server_cases[] = {
    {"https://127.0.0.1:6443", "https://127.0.0.1:6443", NULL},
    {"https://127.0.0.1:6443/", "https://127.0.0.1:6443", NULL},
    {"HTTPS://h:1", "https://h:1", NULL},
    {"http://h:65535", "http://h:65535", NULL},
    {"https://h", "https://h", NULL},
    {"https://h:", "https://h:", NULL}, /* empty port: the default, as curl and Go read it */
    {"https://[::1]:6443", "https://[::1]:6443", NULL},
    {"https://[fd00:10:96::1]/", "https://[fd00:10:96::1]", NULL},
    {"https://h:6443/k8s", "https://h:6443/k8s", NULL}, /* a path prefix: requests go under it */
    {"https://h:6443/k8s//", "https://h:6443/k8s", NULL},
    {"https://127.0.0.1:99999", NULL, "has port 99999, outside 1..65535"},
    {"https://127.0.0.1:0", NULL, "has port 0, outside 1..65535"},
    {"https://127.0.0.1:99999999999999999999", NULL, "outside 1..65535"},
    {"https://127.0.0.1:abc", NULL, "has port \"abc\", which is not a number"},
    {"https://h:-1", NULL, "which is not a number"},
    {"https://fd00::1:6443", NULL, "an IPv6 address goes in brackets"},
    {"https://:443", NULL, "has no host"},
    {"https://[]:443", NULL, "has no host"},
    {"https://[::1:6443", NULL, "IPv6 address without its closing ']'"},
    {"https://[::1]x:6443", NULL, "after the IPv6 address"},
    {"https://[zz]:6443", NULL, "is not a valid URL"},
    {"https://h!x:6443", NULL, "is not a valid URL"},
    {"https://127.0.0.1:6443?x=1", NULL, "must not have a query (?) or fragment (#)"},
    {"https://127.0.0.1:6443/?x=1", NULL, "must not have a query"},
    {"https://h:6443/k8s#top", NULL, "must not have a query (?) or fragment (#)"},
    {"https://h?x", NULL, "must not have a query"},
};

static void test_server_urls(void **state)
{
    struct fixture *f = *state;
    struct hp_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.serviceaccount_dir = f->dir; /* no token there: --master alone */
    for (size_t i = 0; i < HP_ARRAY_SIZE(server_cases); i++) {
        const char *url = server_cases[i].url;
        struct hp_kube_creds c;
        char err[512], *want;
        char *yaml = hp_xasprintf("clusters:\n- name: c\n  cluster: {server: '%s'}\n" CTX_CU
                                  "users:\n- name: u\n  user: {token: t}\n",
                                  url);
        int rc = parse(f, yaml, NULL, &c, err, sizeof(err));

        if (server_cases[i].server) {
            if (rc != 0)
                fail_msg("kubeconfig server '%s' refused: %s", url, err);
            assert_string_equal(c.server, server_cases[i].server);
            hp_kube_creds_free(&c);
        } else {
            if (rc != -EINVAL) {
                hp_kube_creds_free(&c);
                fail_msg("kubeconfig server '%s' accepted", url);
            }
            want = hp_xasprintf("kubeconfig %s/kubeconfig: cluster \"c\": server \"%s\" ", f->dir,
                                url);
            if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, server_cases[i].why))
                fail_msg("kubeconfig server '%s': message '%s' lacks '%s...%s'", url, err, want,
                         server_cases[i].why);
            assert_null(c.server);
            free(want);
        }
        free(yaml);

        cfg.master = (char *)url;
        rc = hp_kube_creds_load(&cfg, &c, err, sizeof(err));
        if (server_cases[i].server) {
            if (rc != 0)
                fail_msg("--master '%s' refused: %s", url, err);
            assert_string_equal(c.server, server_cases[i].server);
            assert_string_equal(c.source, "--master");
            hp_kube_creds_free(&c);
        } else {
            if (rc != -EINVAL) {
                hp_kube_creds_free(&c);
                fail_msg("--master '%s' accepted", url);
            }
            want = hp_xasprintf("--master: URL \"%s\" ", url);
            if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, server_cases[i].why))
                fail_msg("--master '%s': message '%s' lacks '%s...%s'", url, err, want,
                         server_cases[i].why);
            assert_null(strchr(err, '\n'));
            assert_null(c.server);
            free(want);
        }
    }
}

static void test_file_errors(void **state)
{
    struct fixture *f = *state;
    struct hp_config cfg;
    struct hp_kube_creds c;
    char err[512], *want, *big;
    FILE *fp;

    memset(&cfg, 0, sizeof(cfg));
    cfg.kubeconfig = path_in(f, "does-not-exist");
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ENOENT);
    want = hp_xasprintf("kubeconfig %s: cannot read: No such file or directory", cfg.kubeconfig);
    assert_string_equal(err, want);
    free(want);
    free(cfg.kubeconfig);

    /* A directory is not a kubeconfig. */
    cfg.kubeconfig = f->dir;
    assert_true(hp_kube_creds_load(&cfg, &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "cannot read"));

    /* Over the size cap. */
    big = path_in(f, "big");
    fp = fopen(big, "w");
    assert_non_null(fp);
    assert_int_equal(ftruncate(fileno(fp), 17 << 20), 0);
    assert_int_equal(fclose(fp), 0);
    cfg.kubeconfig = big;
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -EFBIG);
    assert_non_null(strstr(err, "file is larger than"));
    free(big);

    /* Empty token file. */
    free(write_file(f, "empty-token", "\n\n"));
    assert_int_equal(
        parse(f, GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {tokenFile: empty-token}\n", NULL,
              &c, err, sizeof(err)),
        -EINVAL);
    assert_non_null(strstr(err, "cannot read tokenFile"));
    assert_non_null(strstr(err, "file is empty"));
}

/* A FIFO, a socket or a device where a file is expected is refused at once, naming the file and
 * the field: opening a FIFO for reading waits for a writer, and the start hung there with nothing
 * said. The alarm turns such a hang into a failure of this test. */
static void test_not_regular_files(void **state)
{
    struct fixture *f = *state;
    struct hp_config cfg;
    struct hp_kube_creds c;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char err[512], *want, *yaml;
    char *fifo = path_in(f, "fifo"), *sock = path_in(f, "sock"), *tok = path_in(f, "tok");
    int sfd;
    static const struct {
        const char *field; /* of the user or cluster */
        const char *yaml;  /* %s: the file */
        const char *want;  /* after "kubeconfig <path>: " */
    } fields[] = {
        {"tokenFile",
         GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {tokenFile: '%s'}\n",
         "user \"u\": cannot read tokenFile %s: not a regular file (%s)"},
        {"certificate-authority",
         "clusters:\n- name: c\n  cluster: {server: 'https://h', "
         "certificate-authority: '%s'}\n" CTX_CU,
         "cluster \"c\": cannot read certificate-authority %s: not a regular file (%s)"},
        {"client-certificate",
         GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {client-certificate: '%s', client-key: "
                             "/no/key}\n",
         "user \"u\": cannot read client-certificate %s: not a regular file (%s)"},
        {"client-key",
         GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {client-certificate-data: TUlJQg==, "
                             "client-key: '%s'}\n",
         "user \"u\": cannot read client-key %s: not a regular file (%s)"},
    };
    static const struct {
        const char *name, *kind;
    } kinds[] = {{"fifo", "a FIFO"},
                 {"sock", "a socket or device"},
                 {"/dev/null", "a socket or device"},
                 {".", "a directory"}};

    alarm(20);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_true(strlen(sock) < sizeof(sa.sun_path));
    strcpy(sa.sun_path, sock);
    sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(sfd >= 0);
    assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof(sa)), 0);

    for (size_t i = 0; i < HP_ARRAY_SIZE(fields); i++) {
        for (size_t j = 0; j < HP_ARRAY_SIZE(kinds); j++) {
            char *file = kinds[j].name[0] == '/' ? hp_xstrdup(kinds[j].name)
                         : strcmp(kinds[j].name, ".") == 0 ? hp_xstrdup(f->dir)
                                                            : path_in(f, kinds[j].name);
            char *tail;
            yaml = hp_xasprintf(fields[i].yaml, file);
            tail = hp_xasprintf(fields[i].want, file, kinds[j].kind);
            want = hp_xasprintf("kubeconfig %s/kubeconfig: %s", f->dir, tail);
            if (parse(f, yaml, NULL, &c, err, sizeof(err)) != -EINVAL) {
                hp_kube_creds_free(&c);
                fail_msg("%s as %s: accepted", kinds[j].name, fields[i].field);
            }
            assert_string_equal(err, want);
            free(yaml);
            free(tail);
            free(want);
            free(file);
        }
    }

    /* The kubeconfig itself. */
    memset(&cfg, 0, sizeof(cfg));
    cfg.kubeconfig = fifo;
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ESPIPE);
    want = hp_xasprintf("kubeconfig %s: cannot read: not a regular file (a FIFO)", fifo);
    assert_string_equal(err, want);
    free(want);
    cfg.kubeconfig = sock;
    assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), -ENODEV);
    want = hp_xasprintf("kubeconfig %s: cannot read: not a regular file (a socket or device)",
                        sock);
    assert_string_equal(err, want);
    free(want);

    /* A token file that becomes a FIFO: the re-read fails at once and keeps the token. */
    free(write_file(f, "tok", "first\n"));
    yaml = hp_xasprintf(GOOD_CLUSTER CTX_CU "users:\n- name: u\n  user: {tokenFile: '%s'}\n", tok);
    parse_ok(f, yaml, NULL, &c);
    free(yaml);
    assert_int_equal(unlink(tok), 0);
    assert_int_equal(mkfifo(tok, 0600), 0);
    assert_int_equal(hp_kube_creds_reload_token(&c), -ESPIPE);
    assert_string_equal(c.token, "first");
    assert_string_equal(hp_kube_creds_strerror(-ESPIPE, err, sizeof(err)),
                        "not a regular file (a FIFO)");
    hp_kube_creds_free(&c);

    assert_int_equal(close(sfd), 0);
    alarm(0);
    free(fifo);
    free(sock);
    free(tok);
}

/* In-cluster: a FIFO as the token refuses the start; a FIFO as ca.crt is skipped (system CAs,
 * as an unreadable one) rather than waited on. */
static void test_in_cluster_not_regular(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char err[512];
    char *sa = path_in(f, "sa"), *tok = path_in(f, "sa/token"), *ca = path_in(f, "sa/ca.crt");

    alarm(20);
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    assert_int_equal(mkdir(sa, 0700), 0);
    assert_int_equal(mkfifo(tok, 0600), 0);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), -ESPIPE);
    assert_non_null(strstr(err, "in-cluster: cannot read token"));
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    assert_null(c.server);

    assert_int_equal(unlink(tok), 0);
    free(write_file(f, "sa/token", SECRET_FILE_TOKEN "\n"));
    assert_int_equal(mkfifo(ca, 0600), 0);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), 0);
    assert_null(c.ca_file);
    assert_string_equal(c.token, SECRET_FILE_TOKEN);
    hp_kube_creds_free(&c);
    alarm(0);
    free(sa);
    free(tok);
    free(ca);
}

/* ---- in-cluster -------------------------------------------------------------------------- */

static char *make_sa_dir(struct fixture *f, bool with_ca)
{
    char *token = write_file(f, "sa/token", SECRET_FILE_TOKEN "\n");
    free(write_file(f, "sa/namespace", "storage-system\n"));
    if (with_ca)
        free(write_file(f, "sa/ca.crt", PEM_CA));
    free(token);
    return path_in(f, "sa");
}

static void test_in_cluster(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char err[512];
    char *sa = make_sa_dir(f, true);
    char *ca = path_in(f, "sa/ca.crt");
    char *tok = path_in(f, "sa/token");
    static const struct {
        const char *host, *port, *server;
    } servers[] = {
        {"10.96.0.1", "443", "https://10.96.0.1:443"},
        {"10.96.0.1", "6443", "https://10.96.0.1:6443"},
        {"10.96.0.1", "", "https://10.96.0.1:443"},
        {"10.96.0.1", NULL, "https://10.96.0.1:443"},
        {"fd00:10:96::1", "443", "https://[fd00:10:96::1]:443"},
        {"kubernetes.default.svc", "443", "https://kubernetes.default.svc:443"},
    };

    for (size_t i = 0; i < HP_ARRAY_SIZE(servers); i++) {
        setenv("KUBERNETES_SERVICE_HOST", servers[i].host, 1);
        if (servers[i].port)
            setenv("KUBERNETES_SERVICE_PORT", servers[i].port, 1);
        else
            unsetenv("KUBERNETES_SERVICE_PORT");
        assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), 0);
        assert_string_equal(c.server, servers[i].server);
        assert_string_equal(c.token, SECRET_FILE_TOKEN);
        assert_string_equal(c.token_file, tok);
        assert_string_equal(c.ca_file, ca);
        assert_string_equal(c.namespace_, "storage-system");
        assert_string_equal(c.source, "in-cluster");
        assert_int_equal(c.insecure, 0);
        hp_kube_creds_free(&c);
    }

    /* Rotation. */
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), 0);
    free(write_file(f, "sa/token", "rotated\n"));
    assert_int_equal(hp_kube_creds_reload_token(&c), 1);
    assert_string_equal(c.token, "rotated");
    hp_kube_creds_free(&c);

    /* Through hp_kube_creds_load: no kubeconfig, KUBERNETES_SERVICE_HOST set, token present. */
    {
        struct hp_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.serviceaccount_dir = sa;
        assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
        assert_string_equal(c.source, "in-cluster");
        assert_string_equal(c.server, "https://10.96.0.1:443");
        hp_kube_creds_free(&c);
        cfg.master = (char *)"https://override:1";
        assert_int_equal(hp_kube_creds_load(&cfg, &c, err, sizeof(err)), 0);
        assert_string_equal(c.server, "https://override:1");
        assert_string_equal(c.token, "rotated");
        hp_kube_creds_free(&c);
    }

    free(sa);
    free(ca);
    free(tok);
}

static void test_in_cluster_errors(void **state)
{
    struct fixture *f = *state;
    struct hp_kube_creds c;
    char err[512];
    char *sa = make_sa_dir(f, false), *empty = path_in(f, "empty-sa");

    /* Without ca.crt: still usable (client-go falls back to system roots too). */
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), 0);
    assert_null(c.ca_file);
    hp_kube_creds_free(&c);

    assert_int_equal(mkdir(empty, 0700), 0);
    assert_true(hp_kube_creds_in_cluster(empty, &c, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "in-cluster: cannot read token"));
    assert_non_null(strstr(err, "No such file or directory"));
    assert_null(c.server);

    setenv("KUBERNETES_SERVICE_PORT", "https", 1);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "invalid KUBERNETES_SERVICE_PORT"));
    setenv("KUBERNETES_SERVICE_PORT", "70000", 1);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), -EINVAL);
    unsetenv("KUBERNETES_SERVICE_PORT");

    setenv("KUBERNETES_SERVICE_HOST", "evil/host", 1);
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "invalid KUBERNETES_SERVICE_HOST"));

    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_int_equal(hp_kube_creds_in_cluster(sa, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "in-cluster: KUBERNETES_SERVICE_HOST is not set");
    assert_no_secret(err);
    free(sa);
    free(empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_server_ca_file_token_namespace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ca_data_and_insecure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_file_and_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_files_and_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_current_context_vs_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_order_and_master, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relative_kubeconfig_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_urls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_regular_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_cluster_not_regular, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_cluster, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_cluster_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
