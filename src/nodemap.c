/* nodemap: the --config file in local-path-provisioner's config.json shape (see nodemap.h).
 *
 * Any thread. Parsed with hp_json; every refusal names the key or path at fault.
 */
#include "hostpath/nodemap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/json.h"
#include "hostpath/quantity.h"

#define MAX_CONFIG (1024 * 1024)

/* Keys of local-path-provisioner's config this provisioner does not implement. */
static const char *const unsupported[] = {"sharedFileSystemPath", "setupCommand",
                                          "teardownCommand", "helperPod", "helperPodFile",
                                          "storageClassConfigs", "helperImage"};

void hp_nodemap_free(struct hp_nodemap *m)
{
    for (size_t i = 0; i < m->n; i++) {
        struct hp_node_entry *e = &m->entries[i];
        for (size_t k = 0; k < e->npaths; k++)
            free(e->paths[k].path);
        free(e->paths);
        free(e->node);
    }
    free(m->entries);
    memset(m, 0, sizeof(*m));
}

/* Normalises an absolute path in place (collapses '/', refuses "." and ".."): 0 or -EINVAL. */
static int normalise(char *p)
{
    char *o = p;
    const char *s = p;
    if (*s != '/')
        return -EINVAL;
    while (*s) {
        while (*s == '/')
            s++;
        if (!*s)
            break;
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return -EINVAL;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20)
                return -EINVAL;
        *o++ = '/';
        memmove(o, s, n);
        o += n;
        s += n;
    }
    if (o == p)
        *o++ = '/';
    *o = '\0';
    return 0;
}

/* 1 when a is b or lies inside it, component-wise. */
static int within(const char *a, const char *b)
{
    size_t n = strlen(b);
    if (strcmp(b, "/") == 0)
        return 1;
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

static int entry_path(const struct hp_node_entry *e, const char *key)
{
    char *k = hp_xstrdup(key);
    int found = -1;
    if (normalise(k) == 0) {
        for (size_t i = 0; i < e->npaths; i++)
            if (strcmp(e->paths[i].path, k) == 0)
                found = (int)i;
    }
    free(k);
    return found;
}

static int parse_entry(const struct hp_json *j, int obj, struct hp_node_entry *e, char *err,
                       size_t errlen)
{
    int paths = -1, cap = -1, allow = -1, seen = 0;
    char q[256];
    static const char *const keys[] = {"node", "paths", "capacity", "allowRootFilesystem"};

    for (int k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k)) {
        for (size_t i = 0; i < HP_ARRAY_SIZE(keys); i++) {
            if (!hp_json_str_eq(j, k, keys[i]))
                continue;
            if (seen & (1 << i)) { /* JSON does not say which one wins: neither does */
                hp_seterr(err, errlen, "nodePathMap: an entry has the key \"%s\" twice",
                          keys[i]);
                return -EINVAL;
            }
            seen |= 1 << i;
        }
        if (hp_json_str_eq(j, k, "node")) {
            free(e->node);
            if (!(e->node = hp_json_str_dup(j, k + 1)) || !*e->node) {
                hp_seterr(err, errlen, "nodePathMap: \"node\" must be a non-empty string");
                return -EINVAL;
            }
        } else if (hp_json_str_eq(j, k, "paths")) {
            paths = k + 1;
        } else if (hp_json_str_eq(j, k, "capacity")) {
            cap = k + 1;
        } else if (hp_json_str_eq(j, k, "allowRootFilesystem")) {
            allow = k + 1;
        } else {
            (void)hp_json_str_copy(j, k, q, sizeof(q));
            hp_seterr(err, errlen, "nodePathMap: unknown key \"%s\" (known: node, paths, capacity, "
                                   "allowRootFilesystem)",
                      q);
            return -EINVAL;
        }
    }
    if (!e->node) {
        hp_seterr(err, errlen, "nodePathMap: an entry has no \"node\"");
        return -EINVAL;
    }
    /* No "paths", null or []: local-path-provisioner's way of keeping volumes off a node. */
    if (paths >= 0 && !hp_json_is(j, paths, HP_JSON_ARRAY) && !hp_json_is(j, paths, HP_JSON_NULL)) {
        hp_seterr(err, errlen, "nodePathMap: node \"%s\": \"paths\" must be a list of paths",
                  e->node);
        return -EINVAL;
    }
    int n = hp_json_is(j, paths, HP_JSON_ARRAY) ? hp_json_count(j, paths) : 0;
    e->paths = hp_xcalloc((size_t)n + 1, sizeof(*e->paths));
    for (int t = n ? hp_json_first(j, paths) : -1; t >= 0; t = hp_json_next(j, paths, t)) {
        char *p = hp_json_str_dup(j, t);
        if (!p || normalise(p) < 0 || strcmp(p, "/") == 0) {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\": path \"%s\" is not an absolute "
                                   "directory path below /",
                      e->node, p ? p : "(not a string)");
            free(p);
            return -EINVAL;
        }
        for (size_t i = 0; i < e->npaths; i++) {
            if (within(p, e->paths[i].path) || within(e->paths[i].path, p)) {
                hp_seterr(err, errlen, "nodePathMap: node \"%s\": paths %s and %s overlap (each "
                                       "path is its own volume root)",
                          e->node, e->paths[i].path, p);
                free(p);
                return -EINVAL;
            }
        }
        e->paths[e->npaths].path = p;
        e->paths[e->npaths].allow_rootfs = 1;
        e->npaths++;
    }
    if (cap >= 0) {
        if (!hp_json_is(j, cap, HP_JSON_OBJECT)) {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\": \"capacity\" must map paths to "
                                   "sizes, e.g. {\"/mnt/ssd1\": \"900Gi\"}",
                      e->node);
            return -EINVAL;
        }
        for (int k = hp_json_first(j, cap); k >= 0; k = hp_json_next(j, cap, k)) {
            char *key = hp_json_str_dup(j, k), *val = hp_json_str_dup(j, k + 1), why[160] = "";
            int i = key ? entry_path(e, key) : -1;
            int rc = 0;
            const char *bad = NULL;
            if (i < 0) {
                hp_seterr(err, errlen, "nodePathMap: node \"%s\": capacity for \"%s\", which is "
                                       "not one of its paths",
                          e->node, key ? key : "");
                rc = -EINVAL;
            } else if (!val) {
                bad = "not a string";
            } else if (hp_quantity_parse(val, &e->paths[i].budget, why, sizeof(why)) < 0) {
                bad = why;
            } else if (e->paths[i].budget == 0) {
                bad = "must be more than 0";
            }
            if (bad) {
                hp_seterr(err, errlen, "nodePathMap: node \"%s\": capacity of %s: %s", e->node,
                          key, bad);
                rc = -EINVAL;
            }
            free(key);
            free(val);
            if (rc)
                return rc;
        }
    }
    if (allow >= 0) {
        if (hp_json_is(j, allow, HP_JSON_TRUE) || hp_json_is(j, allow, HP_JSON_FALSE)) {
            for (size_t i = 0; i < e->npaths; i++)
                e->paths[i].allow_rootfs = hp_json_is(j, allow, HP_JSON_TRUE);
        } else if (hp_json_is(j, allow, HP_JSON_OBJECT)) {
            for (int k = hp_json_first(j, allow); k >= 0; k = hp_json_next(j, allow, k)) {
                char *key = hp_json_str_dup(j, k);
                int i = key ? entry_path(e, key) : -1;
                int b = hp_json_is(j, k + 1, HP_JSON_TRUE) || hp_json_is(j, k + 1, HP_JSON_FALSE);
                if (i < 0 || !b) {
                    hp_seterr(err, errlen, "nodePathMap: node \"%s\": allowRootFilesystem for "
                                           "\"%s\": %s",
                              e->node, key ? key : "",
                              i < 0 ? "not one of its paths" : "must be true or false");
                    free(key);
                    return -EINVAL;
                }
                e->paths[i].allow_rootfs = hp_json_is(j, k + 1, HP_JSON_TRUE);
                free(key);
            }
        } else {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\": allowRootFilesystem must be true, "
                                   "false, or a map of paths to true/false",
                      e->node);
            return -EINVAL;
        }
    }
    return 0;
}

int hp_nodemap_parse(const char *text, size_t len, struct hp_nodemap *out, char *err,
                     size_t errlen)
{
    struct hp_json j;
    int rc = -EINVAL, map = -1;
    char q[256];

    memset(out, 0, sizeof(*out));
    hp_json_init(&j);
    if (hp_json_parse(&j, text, len) != 0) {
        hp_seterr(err, errlen, "not JSON: %s at byte %zu", j.err, j.err_pos);
        goto done;
    }
    if (!hp_json_is(&j, 0, HP_JSON_OBJECT)) {
        hp_seterr(err, errlen, "the config must be a JSON object with \"nodePathMap\"");
        goto done;
    }
    for (int k = hp_json_first(&j, 0); k >= 0; k = hp_json_next(&j, 0, k)) {
        if (hp_json_str_eq(&j, k, "nodePathMap")) {
            if (map >= 0) {
                hp_seterr(err, errlen, "the key \"nodePathMap\" appears twice");
                goto done;
            }
            map = k + 1;
            continue;
        }
        (void)hp_json_str_copy(&j, k, q, sizeof(q));
        for (size_t i = 0; i < HP_ARRAY_SIZE(unsupported); i++) {
            if (strcmp(q, unsupported[i]) == 0) {
                hp_seterr(err, errlen, "\"%s\" (a local-path-provisioner setting) is not "
                                       "supported: this provisioner makes directories itself, "
                                       "without helper pods or scripts; remove the key",
                          q);
                goto done;
            }
        }
        hp_seterr(err, errlen, "unknown key \"%s\" (known: nodePathMap)", q);
        goto done;
    }
    if (!hp_json_is(&j, map, HP_JSON_ARRAY) || hp_json_count(&j, map) == 0) {
        hp_seterr(err, errlen, "\"nodePathMap\" must be a non-empty list of {node, paths}");
        goto done;
    }
    out->entries = hp_xcalloc((size_t)hp_json_count(&j, map), sizeof(*out->entries));
    for (int e = hp_json_first(&j, map); e >= 0; e = hp_json_next(&j, map, e)) {
        struct hp_node_entry *ne = &out->entries[out->n++];
        if (!hp_json_is(&j, e, HP_JSON_OBJECT)) {
            hp_seterr(err, errlen, "nodePathMap: every entry must be an object");
            goto done;
        }
        if (parse_entry(&j, e, ne, err, errlen) < 0)
            goto done;
        for (size_t i = 0; i + 1 < out->n; i++) {
            if (strcmp(out->entries[i].node, ne->node) == 0) {
                hp_seterr(err, errlen, "nodePathMap: node \"%s\" is listed twice", ne->node);
                goto done;
            }
        }
    }
    rc = 0;
done:
    hp_json_free(&j);
    if (rc)
        hp_nodemap_free(out);
    return rc;
}

int hp_nodemap_load(const char *file, struct hp_nodemap *out, char *err, size_t errlen)
{
    struct hp_buf b;
    char chunk[4096];
    struct stat st;
    /* O_NONBLOCK: a FIFO must not hang the start (or a reload); only a file is read. */
    int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC), rc = 0;

    memset(out, 0, sizeof(*out));
    if (fd < 0) {
        rc = -errno;
        hp_seterr(err, errlen, "cannot read %s: %s", file, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)close(fd);
        hp_seterr(err, errlen, "cannot read %s: not a regular file", file);
        return -EINVAL;
    }
    hp_buf_init(&b, MAX_CONFIG);
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            rc = -errno;
            hp_seterr(err, errlen, "cannot read %s: %s", file, strerror(-rc));
            break;
        }
        if (n == 0)
            break;
        if (hp_buf_append(&b, chunk, (size_t)n) < 0) {
            rc = -EFBIG;
            hp_seterr(err, errlen, "%s is larger than 1 MiB", file);
            break;
        }
    }
    (void)close(fd);
    if (rc == 0) {
        char why[512];
        rc = hp_nodemap_parse(b.data ? b.data : "", b.len, out, why, sizeof(why));
        if (rc < 0)
            hp_seterr(err, errlen, "%s: %s", file, why);
    }
    hp_buf_free(&b);
    return rc;
}

const struct hp_node_entry *hp_nodemap_for(const struct hp_nodemap *m, const char *node)
{
    const struct hp_node_entry *def = NULL;
    for (size_t i = 0; i < m->n; i++) {
        if (node && strcmp(m->entries[i].node, node) == 0)
            return &m->entries[i];
        if (strcmp(m->entries[i].node, HP_NODEMAP_DEFAULT_NODE) == 0)
            def = &m->entries[i];
    }
    return def;
}

void hp_nodemap_single(struct hp_nodemap *m, const char *pv_dir)
{
    memset(m, 0, sizeof(*m));
    m->entries = hp_xcalloc(1, sizeof(*m->entries));
    m->n = 1;
    m->entries[0].node = hp_xstrdup(HP_NODEMAP_DEFAULT_NODE);
    m->entries[0].paths = hp_xcalloc(1, sizeof(*m->entries[0].paths));
    m->entries[0].npaths = 1;
    m->entries[0].paths[0].path = hp_xstrdup(pv_dir);
    m->entries[0].paths[0].allow_rootfs = 1;
}

int hp_nodemap_same_for(const struct hp_nodemap *a, const struct hp_nodemap *b, const char *node)
{
    const struct hp_node_entry *x = hp_nodemap_for(a, node), *y = hp_nodemap_for(b, node);
    if (!x || !y)
        return x == y;
    if (x->npaths != y->npaths)
        return 0;
    for (size_t i = 0; i < x->npaths; i++) {
        if (strcmp(x->paths[i].path, y->paths[i].path) != 0 ||
            x->paths[i].budget != y->paths[i].budget ||
            x->paths[i].allow_rootfs != y->paths[i].allow_rootfs)
            return 0;
    }
    return 1;
}
