/* kubeconfig: API server URL and credentials from a kubeconfig file or the pod's service account.
 *
 * Loop thread, at start-up and when the token file rotates. Kubeconfig files are YAML (or JSON),
 * read with libyaml's document loader. The rules follow client-go's clientcmd where it matters to
 * an operator: relative file references are relative to the kubeconfig's directory, *-data fields
 * take precedence over their file counterparts, tokenFile over token, and errors name the file,
 * the entry and the field. No message ever contains a token, key or certificate value.
 */
#include "hostpath/kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <curl/curl.h>
#include <yaml.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/config.h"
#include "hostpath/log.h"

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define SMALL_FILE_MAX (1u << 20)  /* tokens, namespace: 1 MiB */
#define KUBECONFIG_MAX (16u << 20) /* kubeconfigs with many embedded CAs grow large */

/* Frees memory that held a secret after overwriting it. */
static void free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* ---- files ------------------------------------------------------------------------------- */

/* Opens a file the user named (a kubeconfig, a token, a certificate or key) for reading, without
 * blocking: a FIFO opened for reading waits for a writer, which would hang the start with nothing
 * said, and a token re-read would stop the loop. O_NONBLOCK returns at once, then fstat refuses
 * anything but a regular file. The descriptor, or -EISDIR (a directory), -ESPIPE (a FIFO),
 * -ENODEV (a socket or device: open says ENXIO for a socket) or the negative errno of open. */
static int open_regular(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), rc;

    if (fd < 0)
        return errno == ENXIO ? -ENODEV : -errno;
    if (fstat(fd, &st) < 0)
        rc = -errno;
    else if (S_ISREG(st.st_mode))
        return fd; /* O_NONBLOCK has no effect on a regular file */
    else if (S_ISDIR(st.st_mode))
        rc = -EISDIR;
    else if (S_ISFIFO(st.st_mode))
        rc = -ESPIPE;
    else
        rc = -ENODEV;
    (void)close(fd); /* read-only descriptor: nothing to lose */
    return rc;
}

/* Reads a whole file of at most max bytes. *data is NUL-terminated; caller frees.
 * 0, -EFBIG when larger than max, or an open_regular or read error. */
static int read_file(const char *path, size_t max, char **data, size_t *len)
{
    struct hp_buf b;
    char chunk[8192];
    int fd, rc = 0;

    fd = open_regular(path);
    if (fd < 0)
        return fd;
    hp_buf_init(&b, max);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        if (hp_buf_append(&b, chunk, (size_t)n) < 0) {
            rc = -EFBIG;
            break;
        }
    }
    (void)close(fd); /* read-only descriptor: nothing to lose */
    explicit_bzero(chunk, sizeof(chunk));
    if (rc < 0) {
        if (b.data)
            explicit_bzero(b.data, b.len);
        hp_buf_free(&b);
        return rc;
    }
    *len = b.len;
    *data = hp_buf_steal(&b);
    return 0;
}

/* Text of a read_file/read_token/open_regular error; buf holds it when it is not strerror's. */
static const char *file_error(int rc, size_t max, char *buf, size_t len)
{
    if (rc == -EFBIG)
        snprintf(buf, len, "file is larger than %zu KiB", max / 1024);
    else if (rc == -ENODATA)
        snprintf(buf, len, "file is empty");
    else if (rc == -EILSEQ)
        snprintf(buf, len, "file contains control characters");
    else if (rc == -ESPIPE)
        snprintf(buf, len, "not a regular file (a FIFO)");
    else if (rc == -ENODEV)
        snprintf(buf, len, "not a regular file (a socket or device)");
    else if (rc == -EISDIR)
        snprintf(buf, len, "not a regular file (a directory)");
    else
        return strerror(-rc);
    return buf;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Strips leading and trailing whitespace in place. */
static void trim(char *s)
{
    size_t n = strlen(s), i = 0;

    while (n > 0 && is_space(s[n - 1]))
        s[--n] = '\0';
    while (i < n && is_space(s[i]))
        i++;
    if (i > 0)
        memmove(s, s + i, n - i + 1);
}

/* A bearer token goes into an HTTP header: refuse anything that could split or end it. */
static bool token_ok(const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
            return false;
    return true;
}

/* Reads and trims a token file. 0, -ENODATA (empty), -EILSEQ, -EFBIG or -errno. */
static int read_token(const char *path, char **token)
{
    char *data;
    size_t len;
    int rc = read_file(path, SMALL_FILE_MAX, &data, &len);

    if (rc < 0)
        return rc;
    if (memchr(data, '\0', len)) {
        free_secret(data);
        return -EILSEQ;
    }
    trim(data);
    if (!data[0]) {
        free(data);
        return -ENODATA;
    }
    if (!token_ok(data, strlen(data))) {
        free_secret(data);
        return -EILSEQ;
    }
    *token = data;
    return 0;
}

/* Directory of a kubeconfig path, made absolute, for resolving its relative references. */
static char *config_dir(const char *path)
{
    const char *slash;
    char *dir, cwd[4096];

    if (!path)
        return getcwd(cwd, sizeof(cwd)) ? hp_xstrdup(cwd) : NULL;
    slash = strrchr(path, '/');
    if (!slash)
        dir = hp_xstrdup(".");
    else if (slash == path)
        dir = hp_xstrdup("/");
    else
        dir = hp_xstrndup(path, (size_t)(slash - path));
    if (dir[0] != '/' && getcwd(cwd, sizeof(cwd))) {
        char *abs = strcmp(dir, ".") == 0 ? hp_xstrdup(cwd) : hp_xasprintf("%s/%s", cwd, dir);
        free(dir);
        dir = abs;
    }
    return dir;
}

static char *resolve_path(const char *dir, const char *p)
{
    size_t n;

    if (p[0] == '/' || !dir)
        return hp_xstrdup(p);
    n = strlen(dir);
    return hp_xasprintf("%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", p);
}

/* ---- base64 ------------------------------------------------------------------------------ */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Standard padded base64 (Go's base64.StdEncoding, which skips line breaks; we skip any
 * whitespace). *out is NUL-terminated; caller frees. 0 or -EINVAL. */
static int b64_decode(const char *s, size_t n, char **out, size_t *outlen)
{
    char *o = hp_xmalloc(n / 4 * 3 + 4);
    size_t olen = 0;
    unsigned v = 0;
    int q = 0, pad = 0;
    bool done = false;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int d;
        if (is_space((char)c))
            continue;
        if (done)
            goto bad; /* data after the padded final group */
        if (c == '=') {
            if (q < 2)
                goto bad;
            pad++;
            d = 0;
        } else {
            d = b64_value(c);
            if (d < 0 || pad)
                goto bad;
        }
        v = v << 6 | (unsigned)d;
        if (++q == 4) {
            o[olen++] = (char)(v >> 16);
            if (pad < 2)
                o[olen++] = (char)(v >> 8 & 0xff);
            if (pad < 1)
                o[olen++] = (char)(v & 0xff);
            done = pad > 0;
            q = 0;
            v = 0;
        }
    }
    if (q != 0)
        goto bad;
    o[olen] = '\0';
    *out = o;
    *outlen = olen;
    return 0;
bad:
    explicit_bzero(o, n / 4 * 3 + 4);
    free(o);
    return -EINVAL;
}

/* ---- YAML document access ---------------------------------------------------------------- */

struct kc {
    yaml_document_t doc;
    const char *path; /* for messages */
    char *dir;        /* for relative references; NULL = as given */
    char *err;
    size_t errlen;
};

static yaml_node_t *node(struct kc *k, int index)
{
    return yaml_document_get_node(&k->doc, index);
}

static bool scalar_is(yaml_node_t *n, const char *s)
{
    size_t len = strlen(s);
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == len &&
           memcmp(n->data.scalar.value, s, len) == 0;
}

static bool is_null(yaml_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};

    if (!n)
        return true;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    for (size_t i = 0; i < HP_ARRAY_SIZE(nulls); i++)
        if (scalar_is(n, nulls[i]))
            return true;
    return false;
}

/* Value of key in a mapping node, or NULL when absent (or null, or map is not a mapping). */
static yaml_node_t *map_get(struct kc *k, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (scalar_is(node(k, p->key), key)) {
            yaml_node_t *v = node(k, p->value);
            return is_null(v) ? NULL : v;
        }
    }
    return NULL;
}

/* A string field. *out borrows the document's bytes (NULL when absent or empty).
 * 0, or -EINVAL with a message naming what (e.g. "cluster \"c\"") and the key. */
static int get_str(struct kc *k, yaml_node_t *map, const char *what, const char *key,
                   const char **out)
{
    yaml_node_t *n = map_get(k, map, key);

    *out = NULL;
    if (!n)
        return 0;
    if (n->type != YAML_SCALAR_NODE) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s%s%s: expected a string", k->path, what,
                  *what ? ": " : "", key);
        return -EINVAL;
    }
    if (memchr(n->data.scalar.value, '\0', n->data.scalar.length)) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s%s%s: contains a NUL character", k->path,
                  what, *what ? ": " : "", key);
        return -EINVAL;
    }
    if (n->data.scalar.length > 0)
        *out = (const char *)n->data.scalar.value;
    return 0;
}

static int get_bool(struct kc *k, yaml_node_t *map, const char *what, const char *key, int *out)
{
    /* YAML 1.1 booleans, as go-yaml (behind sigs.k8s.io/yaml) reads them. */
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No",
                                     "NO",    "off",   "Off",   "OFF"};
    yaml_node_t *n = map_get(k, map, key);

    *out = 0;
    if (!n)
        return 0;
    for (size_t i = 0; i < HP_ARRAY_SIZE(yes); i++) {
        if (scalar_is(n, yes[i])) {
            *out = 1;
            return 0;
        }
        if (scalar_is(n, no[i]))
            return 0;
    }
    hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: %s: expected true or false", k->path, what,
              key);
    return -EINVAL;
}

/* Finds the entry called name in list (clusters, users or contexts) and returns its inner
 * mapping (the value of field, e.g. "cluster"; NULL when the entry has none).
 * 0, -ENOENT when no entry has that name, -EINVAL (message set) on a malformed list. */
static int find_named(struct kc *k, yaml_node_t *root, const char *list, const char *field,
                      const char *name, yaml_node_t **out)
{
    yaml_node_t *seq = map_get(k, root, list), *found = NULL;
    bool seen = false;

    *out = NULL;
    if (!seq)
        return -ENOENT;
    if (seq->type != YAML_SEQUENCE_NODE) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: expected a list", k->path, list);
        return -EINVAL;
    }
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *entry = node(k, *it);
        if (!entry || entry->type != YAML_MAPPING_NODE) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: every entry must be a mapping",
                      k->path, list);
            return -EINVAL;
        }
        if (!scalar_is(map_get(k, entry, "name"), name))
            continue;
        if (seen) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: duplicate name \"%s\"", k->path, list,
                      name);
            return -EINVAL;
        }
        seen = true;
        found = map_get(k, entry, field);
        if (found && found->type != YAML_MAPPING_NODE) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s \"%s\": %s: expected a mapping",
                      k->path, field, name, field);
            return -EINVAL;
        }
    }
    if (!seen)
        return -ENOENT;
    *out = found;
    return 0;
}

/* ---- fields ------------------------------------------------------------------------------ */

/* Checks the port of a server URL (the text after the host's ':', up to the path): digits,
 * 1..65535. Empty is accepted, as curl and Go do: the scheme's default port. */
static bool check_port(const char *p, size_t n, char *why, size_t whylen)
{
    unsigned long v = 0;

    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') {
            hp_seterr(why, whylen, "has port \"%.*s\", which is not a number%s", (int)n, p,
                      memchr(p, ':', n) ? " (an IPv6 address goes in brackets: "
                                          "https://[fd00::1]:6443)"
                                        : "");
            return false;
        }
        if (v <= 65535)
            v = v * 10 + (unsigned long)(p[i] - '0');
    }
    if (n > 0 && (v < 1 || v > 65535)) {
        hp_seterr(why, whylen, "has port %.*s, outside 1..65535", (int)n, p);
        return false;
    }
    return true;
}

/* Checks an API server URL and returns a copy without trailing slashes (scheme lower-cased).
 * The client requests <server><path> (e.g. https://h:6443/k8s + /api/v1/...), so the URL may have
 * a path prefix but no query or fragment, and must parse as curl will parse it: a mistake found
 * here stops the start with its reason, where curl would only say "URL using bad/illegal format"
 * at every request, retried forever. NULL when it is not http(s)://host[:port][/path]; why then
 * says what is wrong (never the user credentials a URL may hold). */
static char *check_server(const char *s, char *why, size_t whylen)
{
    size_t skip, n, alen, hlen;
    const char *auth, *port;
    CURLU *u;
    CURLUcode uc;
    char *out;

    if (strncasecmp(s, "https://", 8) == 0)
        skip = 8;
    else if (strncasecmp(s, "http://", 7) == 0)
        skip = 7;
    else {
        hp_seterr(why, whylen, "must start with https:// or http://");
        return NULL;
    }
    auth = s + skip;
    alen = strcspn(auth, "/?#");
    if (memchr(auth, '@', alen)) {
        hp_seterr(why, whylen, "must not contain user credentials");
        return NULL;
    }
    for (const char *c = s; *c; c++) {
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) {
            hp_seterr(why, whylen, "contains spaces or control characters");
            return NULL;
        }
    }
    if (auth[0] == '[') {
        const char *close = memchr(auth, ']', alen);
        if (!close) {
            hp_seterr(why, whylen, "has an IPv6 address without its closing ']'");
            return NULL;
        }
        hlen = (size_t)(close - auth) + 1;
        if (hlen == 2) {
            hp_seterr(why, whylen, "has no host");
            return NULL;
        }
        if (hlen < alen && auth[hlen] != ':') {
            hp_seterr(why, whylen, "has \"%.*s\" after the IPv6 address (expected :port)",
                      (int)(alen - hlen), auth + hlen);
            return NULL;
        }
    } else {
        hlen = strcspn(auth, ":/?#");
    }
    if (hlen == 0) {
        hp_seterr(why, whylen, "has no host");
        return NULL;
    }
    port = auth + hlen + 1;
    if (hlen < alen && !check_port(port, alen - hlen - 1, why, whylen))
        return NULL;
    if (strpbrk(s, "?#")) {
        hp_seterr(why, whylen,
                  "must not have a query (?) or fragment (#): API paths are appended to it");
        return NULL;
    }
    /* What is left (a host name with characters curl refuses, a malformed IPv6 address) is
     * judged by curl's own parser, the one each request goes through. */
    u = curl_url(); /* NULL only when out of memory: then the first request says so */
    uc = u ? curl_url_set(u, CURLUPART_URL, s, 0) : CURLUE_OK;
    curl_url_cleanup(u);
    if (uc != CURLUE_OK) {
#if LIBCURL_VERSION_NUM >= 0x075000 /* curl_url_strerror: 7.80.0 */
        hp_seterr(why, whylen, "is not a valid URL: %s", curl_url_strerror(uc));
#else
        hp_seterr(why, whylen, "is not a valid URL (libcurl URL error %d)", (int)uc);
#endif
        return NULL;
    }
    out = hp_xstrdup(s);
    for (size_t i = 0; i < skip - 3; i++)
        out[i] = (char)(out[i] | 0x20); /* "HTTPS" -> "https" */
    n = strlen(out);
    while (n > skip + alen && out[n - 1] == '/')
        out[--n] = '\0';
    return out;
}

/* Decodes a *-data field into PEM text; 0 or -EINVAL (message set, value never shown). */
static int get_pem(struct kc *k, yaml_node_t *map, const char *what, const char *key, char **out)
{
    const char *v;
    size_t len;
    int rc = get_str(k, map, what, key, &v);

    *out = NULL;
    if (rc < 0 || !v)
        return rc;
    if (b64_decode(v, strlen(v), out, &len) < 0) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: %s is not valid base64", k->path, what,
                  key);
        return -EINVAL;
    }
    if (memchr(*out, '\0', len)) {
        free_secret(*out);
        *out = NULL;
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: %s is not PEM text", k->path, what, key);
        return -EINVAL;
    }
    if (len == 0) {
        free(*out);
        *out = NULL;
    }
    return 0;
}

/* 0 when path is a regular file we can open for reading, else an open_regular error. curl
 * opens the certificate and key files itself, at each connection: a FIFO there would block the
 * loop, so it is refused here. */
static int check_regular(const char *path)
{
    int fd = open_regular(path);

    if (fd < 0)
        return fd;
    (void)close(fd); /* read-only descriptor: nothing to lose */
    return 0;
}

/* A file reference: resolved against the kubeconfig's directory and checked for reading. */
static int get_file(struct kc *k, yaml_node_t *map, const char *what, const char *key, char **out)
{
    const char *v;
    char ebuf[64];
    int rc = get_str(k, map, what, key, &v);

    *out = NULL;
    if (rc < 0 || !v)
        return rc;
    *out = resolve_path(k->dir, v);
    if ((rc = check_regular(*out)) < 0) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: cannot read %s %s: %s", k->path, what, key,
                  *out, file_error(rc, 0, ebuf, sizeof(ebuf)));
        free(*out);
        *out = NULL;
        return -EINVAL;
    }
    return 0;
}

static int load_cluster(struct kc *k, yaml_node_t *cluster, const char *name, const char *master,
                        struct hp_kube_creds *c)
{
    char what[300], why[160];
    const char *server;
    int rc;

    snprintf(what, sizeof(what), "cluster \"%s\"", name);
    if ((rc = get_str(k, cluster, what, "server", &server)) < 0)
        return rc;
    if (!server && !master) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: server is not set", k->path, what);
        return -EINVAL;
    }
    if (server && !(c->server = check_server(server, why, sizeof(why)))) {
        if (strchr(server, '@'))
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: server %s", k->path, what, why);
        else
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: server \"%s\" %s", k->path, what,
                      server, why);
        return -EINVAL;
    }
    if ((rc = get_pem(k, cluster, what, "certificate-authority-data", &c->ca_data)) < 0 ||
        (!c->ca_data &&
         (rc = get_file(k, cluster, what, "certificate-authority", &c->ca_file)) < 0))
        return rc;
    if ((rc = get_bool(k, cluster, what, "insecure-skip-tls-verify", &c->insecure)) < 0)
        return rc;
    if (c->insecure && (c->ca_data || c->ca_file)) {
        /* client-go refuses this combination too: a CA with verification off is a mistake. */
        hp_seterr(k->err, k->errlen,
                  "kubeconfig %s: %s: insecure-skip-tls-verify cannot be combined with "
                  "certificate-authority",
                  k->path, what);
        return -EINVAL;
    }
    return 0;
}

/* Fails on the authentication methods this client does not implement. */
static int refuse_unsupported(struct kc *k, yaml_node_t *user, const char *what)
{
    const char *u, *p, *as;
    int rc;

    if ((rc = get_str(k, user, what, "username", &u)) < 0 ||
        (rc = get_str(k, user, what, "password", &p)) < 0 ||
        (rc = get_str(k, user, what, "as", &as)) < 0)
        return rc;
    if (u || p) {
        hp_seterr(k->err, k->errlen,
                  "kubeconfig %s: %s: basic auth is not supported; use a token or a client "
                  "certificate",
                  k->path, what);
        return -EINVAL;
    }
    if (map_get(k, user, "exec")) {
        hp_seterr(k->err, k->errlen,
                  "kubeconfig %s: %s: exec credential plugins are not supported; use a token",
                  k->path, what);
        return -EINVAL;
    }
    if (map_get(k, user, "auth-provider")) {
        hp_seterr(k->err, k->errlen,
                  "kubeconfig %s: %s: auth-provider plugins are not supported; use a token",
                  k->path, what);
        return -EINVAL;
    }
    if (as) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: impersonation (as) is not supported",
                  k->path, what);
        return -EINVAL;
    }
    return 0;
}

static int load_user(struct kc *k, yaml_node_t *user, const char *name, struct hp_kube_creds *c)
{
    char what[300], ebuf[64];
    const char *token, *token_file;
    int rc;

    snprintf(what, sizeof(what), "user \"%s\"", name);
    if ((rc = refuse_unsupported(k, user, what)) < 0)
        return rc;
    if ((rc = get_str(k, user, what, "token", &token)) < 0 ||
        (rc = get_str(k, user, what, "tokenFile", &token_file)) < 0)
        return rc;
    if (token_file) {
        /* Like client-go, the file wins over an inline token and is re-read on rotation. */
        c->token_file = resolve_path(k->dir, token_file);
        rc = read_token(c->token_file, &c->token);
        if (rc < 0) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: cannot read tokenFile %s: %s", k->path,
                      what, c->token_file, file_error(rc, SMALL_FILE_MAX, ebuf, sizeof(ebuf)));
            return -EINVAL;
        }
    } else if (token) {
        if (!token_ok(token, strlen(token))) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: token contains control characters",
                      k->path, what);
            return -EINVAL;
        }
        c->token = hp_xstrdup(token);
    }
    if ((rc = get_pem(k, user, what, "client-certificate-data", &c->client_cert_data)) < 0 ||
        (!c->client_cert_data &&
         (rc = get_file(k, user, what, "client-certificate", &c->client_cert_file)) < 0) ||
        (rc = get_pem(k, user, what, "client-key-data", &c->client_key_data)) < 0 ||
        (!c->client_key_data &&
         (rc = get_file(k, user, what, "client-key", &c->client_key_file)) < 0))
        return rc;
    if (!(c->client_cert_data || c->client_cert_file) !=
        !(c->client_key_data || c->client_key_file)) {
        hp_seterr(k->err, k->errlen,
                  "kubeconfig %s: %s: client-certificate and client-key must be given together",
                  k->path, what);
        return -EINVAL;
    }
    return 0;
}

/* Resolves the context, its cluster and its user into c. */
static int load_context(struct kc *k, yaml_node_t *root, const char *context, const char *master,
                        struct hp_kube_creds *c)
{
    yaml_node_t *ctx, *cluster, *user;
    const char *name = context, *cluster_name, *user_name, *ns;
    char what[300];
    int rc;

    if (!name || !*name) {
        if ((rc = get_str(k, root, "", "current-context", &name)) < 0)
            return rc;
        if (!name) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: current-context is not set; use --context",
                      k->path);
            return -EINVAL;
        }
    }
    rc = find_named(k, root, "contexts", "context", name, &ctx);
    if (rc == -ENOENT) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: context \"%s\" not found", k->path, name);
        return -EINVAL;
    }
    if (rc < 0)
        return rc;
    snprintf(what, sizeof(what), "context \"%s\"", name);
    if ((rc = get_str(k, ctx, what, "cluster", &cluster_name)) < 0 ||
        (rc = get_str(k, ctx, what, "user", &user_name)) < 0 ||
        (rc = get_str(k, ctx, what, "namespace", &ns)) < 0)
        return rc;
    if (!cluster_name) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: %s: cluster is not set", k->path, what);
        return -EINVAL;
    }
    rc = find_named(k, root, "clusters", "cluster", cluster_name, &cluster);
    if (rc == -ENOENT) {
        hp_seterr(k->err, k->errlen, "kubeconfig %s: cluster \"%s\" not found (used by %s)",
                  k->path, cluster_name, what);
        return -EINVAL;
    }
    if (rc < 0 || (rc = load_cluster(k, cluster, cluster_name, master, c)) < 0)
        return rc;
    if (user_name) {
        rc = find_named(k, root, "users", "user", user_name, &user);
        if (rc == -ENOENT) {
            hp_seterr(k->err, k->errlen, "kubeconfig %s: user \"%s\" not found (used by %s)",
                      k->path, user_name, what);
            return -EINVAL;
        }
        if (rc < 0 || (rc = load_user(k, user, user_name, c)) < 0)
            return rc;
    }
    if (ns)
        c->namespace_ = hp_xstrdup(ns);
    return 0;
}

static int parse_kubeconfig(const char *yaml, size_t len, const char *path, const char *context,
                            const char *master, struct hp_kube_creds *creds, char *err,
                            size_t errlen)
{
    struct kc k = {.path = path ? path : "<input>", .err = err, .errlen = errlen};
    yaml_parser_t parser;
    yaml_node_t *root;
    int rc;

    memset(creds, 0, sizeof(*creds));
    if (!yaml_parser_initialize(&parser)) {
        hp_seterr(err, errlen, "kubeconfig %s: cannot initialise the YAML parser", k.path);
        return -ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &k.doc)) {
        /* libyaml's problem strings describe the syntax, never the content. */
        hp_seterr(err, errlen, "kubeconfig %s: invalid YAML at line %zu column %zu: %s", k.path,
                  parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                  parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        return -EINVAL;
    }
    k.dir = config_dir(path);
    root = yaml_document_get_root_node(&k.doc);
    if (!root) {
        hp_seterr(err, errlen, "kubeconfig %s: file is empty", k.path);
        rc = -EINVAL;
    } else if (root->type != YAML_MAPPING_NODE) {
        hp_seterr(err, errlen, "kubeconfig %s: not a kubeconfig (the top level is not a mapping)",
                  k.path);
        rc = -EINVAL;
    } else {
        rc = load_context(&k, root, context, master, creds);
    }
    yaml_document_delete(&k.doc);
    yaml_parser_delete(&parser);
    free(k.dir);
    if (rc < 0) {
        hp_kube_creds_free(creds);
        return rc;
    }
    creds->source = hp_xstrdup(k.path);
    return 0;
}

int hp_kubeconfig_parse(const char *yaml, size_t len, const char *path, const char *context,
                        struct hp_kube_creds *creds, char *err, size_t errlen)
{
    return parse_kubeconfig(yaml, len, path, context, NULL, creds, err, errlen);
}

static int load_file(const char *path, const char *context, const char *master,
                     struct hp_kube_creds *creds, char *err, size_t errlen)
{
    char *data, ebuf[64];
    size_t len;
    int rc = read_file(path, KUBECONFIG_MAX, &data, &len);

    if (rc < 0) {
        memset(creds, 0, sizeof(*creds));
        hp_seterr(err, errlen, "kubeconfig %s: cannot read: %s", path,
                  file_error(rc, KUBECONFIG_MAX, ebuf, sizeof(ebuf)));
        return rc;
    }
    rc = parse_kubeconfig(data, len, path, context, master, creds, err, errlen);
    explicit_bzero(data, len);
    free(data);
    return rc;
}

/* ---- in-cluster -------------------------------------------------------------------------- */

static bool valid_port(const char *p)
{
    long v = 0;

    if (!*p || strlen(p) > 5)
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
    }
    return v >= 1 && v <= 65535;
}

int hp_kube_creds_in_cluster(const char *dir, struct hp_kube_creds *creds, char *err, size_t errlen)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    char *path, *ns, ebuf[64];
    size_t len;
    int rc;

    memset(creds, 0, sizeof(*creds));
    if (!dir || !*dir)
        dir = DEFAULT_SA_DIR;
    if (!host || !*host) {
        hp_seterr(err, errlen, "in-cluster: KUBERNETES_SERVICE_HOST is not set");
        return -EINVAL;
    }
    if (strpbrk(host, "/@?# []\t\r\n")) {
        hp_seterr(err, errlen, "in-cluster: invalid KUBERNETES_SERVICE_HOST \"%s\"", host);
        return -EINVAL;
    }
    if (!port || !*port)
        port = "443";
    if (!valid_port(port)) {
        hp_seterr(err, errlen, "in-cluster: invalid KUBERNETES_SERVICE_PORT \"%s\"", port);
        return -EINVAL;
    }
    creds->server = strchr(host, ':') ? hp_xasprintf("https://[%s]:%s", host, port)
                                      : hp_xasprintf("https://%s:%s", host, port);

    creds->token_file = hp_xasprintf("%s/token", dir);
    rc = read_token(creds->token_file, &creds->token);
    if (rc < 0) {
        hp_seterr(err, errlen, "in-cluster: cannot read token %s: %s", creds->token_file,
                  file_error(rc, SMALL_FILE_MAX, ebuf, sizeof(ebuf)));
        hp_kube_creds_free(creds);
        return rc;
    }

    path = hp_xasprintf("%s/ca.crt", dir);
    if ((rc = check_regular(path)) == 0) {
        creds->ca_file = path;
    } else {
        /* client-go goes on with the system roots too; say why TLS may fail later. */
        hp_log_warn("kubeconfig: in-cluster CA not readable, using system CAs path=%s error=\"%s\"",
                    path, file_error(rc, 0, ebuf, sizeof(ebuf)));
        free(path);
    }

    path = hp_xasprintf("%s/namespace", dir);
    if (read_file(path, SMALL_FILE_MAX, &ns, &len) == 0) {
        bool binary = memchr(ns, '\0', len) != NULL;
        trim(ns);
        if (ns[0] && !binary)
            creds->namespace_ = ns;
        else
            free(ns);
    }
    free(path);
    creds->source = hp_xstrdup("in-cluster");
    return 0;
}

/* ---- resolution order -------------------------------------------------------------------- */

/* A KUBECONFIG-style value: one path, or a ':' list of which the first existing file is used.
 * *path is a fresh string. 0 or -ENOENT (message set). */
static int pick_kubeconfig(const char *list, char **path, char *err, size_t errlen)
{
    const char *s = list;

    if (!strchr(list, ':') || access(list, F_OK) == 0) {
        *path = hp_xstrdup(list);
        return 0;
    }
    while (*s) {
        size_t n = strcspn(s, ":");
        if (n > 0) {
            char *p = hp_xstrndup(s, n);
            if (access(p, F_OK) == 0) {
                *path = p;
                return 0;
            }
            free(p);
        }
        s += n;
        if (*s == ':')
            s++;
    }
    hp_seterr(err, errlen, "kubeconfig %s: none of these files exists", list);
    return -ENOENT;
}

static int apply_master(const char *master, struct hp_kube_creds *creds, char *err, size_t errlen)
{
    char why[160];
    char *server = check_server(master, why, sizeof(why));

    if (!server) {
        if (strchr(master, '@'))
            hp_seterr(err, errlen, "--master: URL %s", why);
        else
            hp_seterr(err, errlen, "--master: URL \"%s\" %s", master, why);
        return -EINVAL;
    }
    free(creds->server);
    creds->server = server;
    return 0;
}

int hp_kube_creds_load(const struct hp_config *cfg, struct hp_kube_creds *creds, char *err,
                       size_t errlen)
{
    const char *list = cfg->kubeconfig, *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *sadir = cfg->serviceaccount_dir && *cfg->serviceaccount_dir
                            ? cfg->serviceaccount_dir
                            : DEFAULT_SA_DIR;
    const char *master = cfg->master && *cfg->master ? cfg->master : NULL;
    const char *home = getenv("HOME");
    char *path = NULL, *token_path = hp_xasprintf("%s/token", sadir);
    int rc;

    memset(creds, 0, sizeof(*creds));
    if (err && errlen)
        err[0] = '\0';
    if (!list || !*list)
        list = getenv("KUBECONFIG");
    if (list && *list) {
        rc = pick_kubeconfig(list, &path, err, errlen);
        if (rc == 0)
            rc = load_file(path, cfg->context, master, creds, err, errlen);
    } else if (host && *host && access(token_path, F_OK) == 0) {
        rc = hp_kube_creds_in_cluster(sadir, creds, err, errlen);
    } else if (home && *home && (path = hp_xasprintf("%s/.kube/config", home)) &&
               access(path, F_OK) == 0) {
        rc = load_file(path, cfg->context, master, creds, err, errlen);
    } else if (master) {
        creds->source = hp_xstrdup("--master");
        rc = 0;
    } else {
        if (host && *host)
            hp_seterr(err, errlen,
                      "no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a pod "
                      "(KUBERNETES_SERVICE_HOST is set but %s does not exist)",
                      token_path);
        else
            hp_seterr(err, errlen,
                      "no kubeconfig: set --kubeconfig or KUBECONFIG, or run in a pod");
        rc = -ENOENT;
    }
    free(token_path);
    free(path);
    if (rc == 0 && master)
        rc = apply_master(master, creds, err, errlen);
    if (rc < 0)
        hp_kube_creds_free(creds);
    return rc;
}

int hp_kube_creds_reload_token(struct hp_kube_creds *creds)
{
    char *token;
    int rc;

    if (!creds->token_file)
        return 0;
    rc = read_token(creds->token_file, &token);
    if (rc < 0)
        return rc; /* keep the old token: it may still be valid */
    if (creds->token && strcmp(creds->token, token) == 0) {
        free_secret(token);
        return 0;
    }
    free_secret(creds->token);
    creds->token = token;
    return 1;
}

const char *hp_kube_creds_strerror(int rc, char *buf, size_t len)
{
    return file_error(rc, SMALL_FILE_MAX, buf, len);
}

void hp_kube_creds_free(struct hp_kube_creds *creds)
{
    if (!creds)
        return;
    free(creds->server);
    free(creds->ca_file);
    free(creds->ca_data);
    free_secret(creds->token);
    free(creds->token_file);
    free(creds->client_cert_file);
    free(creds->client_cert_data);
    free(creds->client_key_file);
    free_secret(creds->client_key_data);
    free(creds->namespace_);
    free(creds->source);
    memset(creds, 0, sizeof(*creds));
}
