/* nodemap: the --config file in local-path-provisioner's config.json shape (see nodemap.h).
 *
 * Any thread. Parsed with hp_json; every refusal names the key or path at fault.
 */
#include "hostpath/nodemap.h"

#include <errno.h>
#include <stddef.h>
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
static const char *const unsupported[] = {"setupCommand",  "teardownCommand", "helperPod",
                                          "helperPodFile", "helperImage",     "cmdTimeoutSeconds"};

/* ASCII case-insensitive equality: Go's encoding/json matches a member to a field that way (its
 * Unicode folds of 's' and 'k' aside: such a key is refused here, never misread). */
static int fold_eq(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y - 'A' + 'a');
        if (x != y)
            return 0;
        if (!x)
            return 1;
    }
}

/* The key at token k is name, matched as local-path-provisioner's Go decoder matches it
 * ("sharedFilesystemPath", as its multiple-storage-classes fixture spells it, is
 * sharedFileSystemPath). A key holding a NUL is no name. */
static int key_is(const struct hp_json *j, int k, const char *name)
{
    char buf[64];
    if (hp_json_str_len(j, k) != (int)strlen(name) || hp_json_str_has_nul(j, k))
        return 0;
    (void)hp_json_str_copy(j, k, buf, sizeof(buf));
    return fold_eq(buf, name);
}

/* A string token for a message: cut, control characters replaced. */
static const char *text_of(const struct hp_json *j, int tok, char *buf, size_t len)
{
    if (hp_json_str_copy(j, tok, buf, len) < 0)
        (void)snprintf(buf, len, "(not a string)");
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    return buf;
}

static void entries_free(struct hp_node_entry *entries, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hp_node_entry_free(&entries[i]);
    free(entries);
}

void hp_node_entry_free(struct hp_node_entry *e)
{
    for (size_t k = 0; k < e->npaths; k++)
        free(e->paths[k].path);
    free(e->paths);
    free(e->node);
    memset(e, 0, sizeof(*e));
}

static void shared_free(struct hp_node_path *p)
{
    if (p)
        free(p->path);
    free(p);
}

void hp_nodemap_free(struct hp_nodemap *m)
{
    entries_free(m->entries, m->n);
    shared_free(m->shared);
    for (size_t i = 0; i < m->nclasses; i++) {
        struct hp_class_config *c = &m->classes[i];
        entries_free(c->entries, c->n);
        shared_free(c->shared);
        free(c->name);
    }
    free(m->classes);
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

/* An overcommit ratio: a JSON number from 1 to 1000. 0, or -1. */
static int ratio_of(const struct hp_json *j, int tok, double *out)
{
    char buf[64], *end;
    size_t len;
    const char *raw = hp_json_is(j, tok, HP_JSON_NUMBER) ? hp_json_raw(j, tok, &len) : NULL;
    if (!raw || len >= sizeof(buf))
        return -1;
    memcpy(buf, raw, len);
    buf[len] = '\0';
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || *end || !(v >= 1.0 && v <= 1000.0))
        return -1;
    *out = v;
    return 0;
}

/* "overcommit" (ours): how many times its capacity a path may promise to claims -- one ratio for
 * every path of the entry, or {"/path": ratio}. */
static int parse_overcommit(const struct hp_json *j, int over, struct hp_node_entry *e, char *err,
                            size_t errlen)
{
    double v;
    if (hp_json_is(j, over, HP_JSON_NUMBER)) {
        if (ratio_of(j, over, &v) < 0)
            goto bad;
        for (size_t i = 0; i < e->npaths; i++)
            e->paths[i].overcommit = v;
        return 0;
    }
    if (!hp_json_is(j, over, HP_JSON_OBJECT))
        goto bad;
    for (int k = hp_json_first(j, over); k >= 0; k = hp_json_next(j, over, k)) {
        char *key = hp_json_str_dup(j, k);
        int i = key ? entry_path(e, key) : -1;
        if (i < 0 || ratio_of(j, k + 1, &v) < 0) {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\": overcommit for \"%s\": %s", e->node,
                      key ? key : "",
                      i < 0 ? "not one of its paths" : "must be a number from 1 to 1000");
            free(key);
            return -1;
        }
        e->paths[i].overcommit = v;
        free(key);
    }
    return 0;
bad:
    hp_seterr(err, errlen, "nodePathMap: node \"%s\": overcommit must be a number from 1 to 1000 "
                           "(how many times its capacity a path may promise), or a map of paths "
                           "to such numbers",
              e->node);
    return -1;
}

/* A flag of ours given for every path of the entry (true / false) or per path
 * ({"/path": true}): sets the int at offset in each hp_node_path it names. 0, or -1 with the
 * reason naming key. */
static int parse_flag(const struct hp_json *j, int tok, struct hp_node_entry *e, const char *key,
                      size_t offset, char *err, size_t errlen)
{
    if (hp_json_is(j, tok, HP_JSON_TRUE) || hp_json_is(j, tok, HP_JSON_FALSE)) {
        for (size_t i = 0; i < e->npaths; i++)
            *(int *)((char *)&e->paths[i] + offset) = hp_json_is(j, tok, HP_JSON_TRUE);
        return 0;
    }
    if (!hp_json_is(j, tok, HP_JSON_OBJECT)) {
        hp_seterr(err, errlen, "nodePathMap: node \"%s\": %s must be true, false, or a map of "
                               "paths to true/false",
                  e->node, key);
        return -1;
    }
    for (int k = hp_json_first(j, tok); k >= 0; k = hp_json_next(j, tok, k)) {
        char *path = hp_json_str_dup(j, k);
        int i = path ? entry_path(e, path) : -1;
        int b = hp_json_is(j, k + 1, HP_JSON_TRUE) || hp_json_is(j, k + 1, HP_JSON_FALSE);
        if (i < 0 || !b) {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\": %s for \"%s\": %s", e->node, key,
                      path ? path : "", i < 0 ? "not one of its paths" : "must be true or false");
            free(path);
            return -1;
        }
        *(int *)((char *)&e->paths[i] + offset) = hp_json_is(j, k + 1, HP_JSON_TRUE);
        free(path);
    }
    return 0;
}

static int parse_entry(const struct hp_json *j, int obj, struct hp_node_entry *e, char *err,
                       size_t errlen)
{
    int paths = -1, cap = -1, allow = -1, over = -1, hard = -1, seen = 0;
    char q[256];
    static const char *const keys[] = {"node", "paths", "capacity", "allowRootFilesystem",
                                       "overcommit", "hardLimits"};

    for (int k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k)) {
        int which = -1;
        for (size_t i = 0; i < HP_ARRAY_SIZE(keys); i++)
            if (key_is(j, k, keys[i]))
                which = (int)i;
        if (which < 0) {
            hp_seterr(err, errlen, "nodePathMap: unknown key \"%s\" (known: node, paths, capacity, "
                                   "allowRootFilesystem, overcommit, hardLimits)",
                      text_of(j, k, q, sizeof(q)));
            return -EINVAL;
        }
        if (seen & (1 << which)) { /* JSON does not say which one wins: neither does */
            hp_seterr(err, errlen, "nodePathMap: an entry has the key \"%s\" twice", keys[which]);
            return -EINVAL;
        }
        seen |= 1 << which;
        if (which == 0) {
            if (!(e->node = hp_json_str_dup(j, k + 1)) || !*e->node) {
                hp_seterr(err, errlen, "nodePathMap: \"node\" must be a non-empty string");
                return -EINVAL;
            }
        } else if (which == 1) {
            paths = k + 1;
        } else if (which == 2) {
            cap = k + 1;
        } else if (which == 3) {
            allow = k + 1;
        } else if (which == 4) {
            over = k + 1;
        } else {
            hard = k + 1;
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
        e->paths[e->npaths].overcommit = 1.0;
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
    if (over >= 0 && parse_overcommit(j, over, e, err, errlen) < 0)
        return -EINVAL;
    if (allow >= 0 && parse_flag(j, allow, e, "allowRootFilesystem",
                                 offsetof(struct hp_node_path, allow_rootfs), err, errlen) < 0)
        return -EINVAL;
    if (hard >= 0 && parse_flag(j, hard, e, "hardLimits",
                                offsetof(struct hp_node_path, hard_limits), err, errlen) < 0)
        return -EINVAL;
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct hp_node_entry *)a)->node, ((const struct hp_node_entry *)b)->node);
}

/* The entry of exactly this node in entries[0..n) (sorted by node), or NULL. */
static const struct hp_node_entry *lookup(const struct hp_node_entry *entries, size_t n,
                                          const char *node)
{
    struct hp_node_entry key = {.node = (char *)node};
    return n ? bsearch(&key, entries, n, sizeof(*entries), entry_cmp) : NULL;
}

/* The entry for node (its own, else the default one), or NULL. */
static const struct hp_node_entry *entry_for(const struct hp_node_entry *entries, size_t n,
                                             const char *node)
{
    const struct hp_node_entry *e = node ? lookup(entries, n, node) : NULL;
    return e ? e : lookup(entries, n, HP_NODEMAP_DEFAULT_NODE);
}

/* A nodePathMap (an array, non-empty): its entries, sorted by node name. 0, or -EINVAL with the
 * reason (*out holds what was parsed, for the caller to free). */
static int parse_path_map(const struct hp_json *j, int map, struct hp_node_entry **out, size_t *n,
                          char *err, size_t errlen)
{
    *out = hp_xcalloc((size_t)hp_json_count(j, map), sizeof(**out));
    *n = 0;
    for (int e = hp_json_first(j, map); e >= 0; e = hp_json_next(j, map, e)) {
        struct hp_node_entry *ne = &(*out)[(*n)++];
        if (!hp_json_is(j, e, HP_JSON_OBJECT)) {
            hp_seterr(err, errlen, "nodePathMap: every entry must be an object");
            return -EINVAL;
        }
        if (parse_entry(j, e, ne, err, errlen) < 0)
            return -EINVAL;
    }
    /* Sorted, a node listed twice is next to itself (n log n for a large map). */
    qsort(*out, *n, sizeof(**out), entry_cmp);
    for (size_t i = 1; i < *n; i++) {
        if (strcmp((*out)[i - 1].node, (*out)[i].node) == 0) {
            hp_seterr(err, errlen, "nodePathMap: node \"%s\" is listed twice", (*out)[i].node);
            return -EINVAL;
        }
    }
    return 0;
}

/* A sharedFileSystemPath (a non-empty string): one path, the same on every node. */
static int parse_shared(const struct hp_json *j, int tok, struct hp_node_path **out, char *err,
                        size_t errlen)
{
    char q[256], *p = hp_json_str_dup(j, tok);
    if (!p || normalise(p) < 0 || strcmp(p, "/") == 0) {
        hp_seterr(err, errlen, "sharedFileSystemPath \"%s\" is not an absolute directory path "
                               "below /",
                  text_of(j, tok, q, sizeof(q)));
        free(p);
        return -EINVAL;
    }
    *out = hp_xcalloc(1, sizeof(**out));
    (*out)->path = p;
    (*out)->allow_rootfs = 1;
    (*out)->overcommit = 1.0;
    (*out)->shared = 1;
    return 0;
}

/* How a member of a config object is set: 1 set (a non-empty list, string or map), 0 not set
 * (absent, null, [], "" or {}: local-path-provisioner's len() == 0), -1 of the wrong type. */
static int how_set(const struct hp_json *j, int tok, enum hp_json_type want)
{
    if (tok < 0 || hp_json_is(j, tok, HP_JSON_NULL))
        return 0;
    if (!hp_json_is(j, tok, want))
        return -1;
    if (want == HP_JSON_STRING)
        return hp_json_str_len(j, tok) > 0;
    return hp_json_count(j, tok) > 0;
}

/* The paths of one config object: the top level, or one class of storageClassConfigs (where
 * names the class for messages, "" at the top). Exactly one of nodePathMap and
 * sharedFileSystemPath is set: local-path-provisioner refuses both when provisioning ("both
 * nodePathMap and sharedFileSystemPath are defined", "... are unconfigured"); here the config is
 * refused when it is read. */
static int parse_paths(const struct hp_json *j, int map, int shared,
                       struct hp_node_entry **entries, size_t *n, struct hp_node_path **sh,
                       const char *where, char *err, size_t errlen)
{
    char why[768];
    int m = how_set(j, map, HP_JSON_ARRAY), s = how_set(j, shared, HP_JSON_STRING), rc = 0;
    if (m < 0) {
        hp_seterr(err, errlen, "%s\"nodePathMap\" must be a non-empty list of {node, paths}",
                  where);
        return -EINVAL;
    }
    if (s < 0) {
        hp_seterr(err, errlen, "%s\"sharedFileSystemPath\" must be a path", where);
        return -EINVAL;
    }
    if (m && s) {
        hp_seterr(err, errlen, "%sboth \"nodePathMap\" and \"sharedFileSystemPath\" are set; only "
                               "one may be (set \"nodePathMap\" to [] for a shared path)",
                  where);
        return -EINVAL;
    }
    if (!m && !s) {
        hp_seterr(err, errlen, "%sneither \"nodePathMap\" (a non-empty list of {node, paths}) nor "
                               "\"sharedFileSystemPath\" is set",
                  where);
        return -EINVAL;
    }
    if (m)
        rc = parse_path_map(j, map, entries, n, why, sizeof(why));
    else
        rc = parse_shared(j, shared, sh, why, sizeof(why));
    if (rc)
        hp_seterr(err, errlen, "%s%s", where, why);
    return rc;
}

/* One class of storageClassConfigs: key token k, its object at k + 1. */
static int parse_class(const struct hp_json *j, int k, struct hp_class_config *c, char *err,
                       size_t errlen)
{
    char q[256], where[320];
    int obj = k + 1, map = -1, shared = -1;
    if (!(c->name = hp_json_str_dup(j, k)) || !*c->name) {
        hp_seterr(err, errlen, "storageClassConfigs: a class name must be a non-empty string");
        return -EINVAL;
    }
    (void)snprintf(where, sizeof(where), "storageClassConfigs: class \"%s\": ",
                   text_of(j, k, q, sizeof(q)));
    if (!hp_json_is(j, obj, HP_JSON_OBJECT)) {
        hp_seterr(err, errlen, "%smust be an object with \"nodePathMap\" or "
                               "\"sharedFileSystemPath\"",
                  where);
        return -EINVAL;
    }
    for (int m = hp_json_first(j, obj); m >= 0; m = hp_json_next(j, obj, m)) {
        int *slot = key_is(j, m, "nodePathMap")            ? &map
                    : key_is(j, m, "sharedFileSystemPath") ? &shared
                                                            : NULL;
        if (!slot) {
            hp_seterr(err, errlen, "%sunknown key \"%s\" (known: nodePathMap, "
                                   "sharedFileSystemPath)",
                      where, text_of(j, m, q, sizeof(q)));
            return -EINVAL;
        }
        if (*slot >= 0) {
            hp_seterr(err, errlen, "%sthe key \"%s\" appears twice", where,
                      text_of(j, m, q, sizeof(q)));
            return -EINVAL;
        }
        *slot = m + 1;
    }
    return parse_paths(j, map, shared, &c->entries, &c->n, &c->shared, where, err, errlen);
}

static int class_cmp(const void *a, const void *b)
{
    return strcmp(((const struct hp_class_config *)a)->name,
                  ((const struct hp_class_config *)b)->name);
}

static const struct hp_class_config *class_config(const struct hp_nodemap *m, const char *name)
{
    struct hp_class_config key = {.name = (char *)name};
    return m->nclasses && name ? bsearch(&key, m->classes, m->nclasses, sizeof(key), class_cmp)
                               : NULL;
}

/* One root of one class on one node, for the check across classes. */
struct root_ref {
    const struct hp_node_path *p;
    const char *cls;
};

/* The roots the classes give node (NULL: a node no class lists), checked against each other:
 * one directory is one root (same budget and options, shared or not), never one inside
 * another. */
static int check_node_roots(const struct hp_nodemap *m, const char *node, char *err,
                            size_t errlen)
{
    size_t n = 0, cap = 0;
    struct root_ref *r = NULL;
    int rc = 0;
    for (size_t c = 0; c < m->nclasses; c++) {
        const struct hp_class_config *k = &m->classes[c];
        const struct hp_node_entry *e = k->shared ? NULL : entry_for(k->entries, k->n, node);
        size_t add = k->shared ? 1 : e ? e->npaths : 0;
        if (n + add > cap) {
            cap = 2 * (n + add);
            r = hp_xrealloc(r, cap * sizeof(*r));
        }
        for (size_t i = 0; i < add; i++)
            r[n++] = (struct root_ref){k->shared ? k->shared : &e->paths[i], k->name};
    }
    for (size_t a = 0; a < n && !rc; a++) {
        for (size_t b = a + 1; b < n && !rc; b++) {
            const struct hp_node_path *x = r[a].p, *y = r[b].p;
            const char *on = node ? node : "the nodes no class lists";
            if (strcmp(x->path, y->path) == 0) {
                if (x->shared != y->shared || x->budget != y->budget ||
                    x->allow_rootfs != y->allow_rootfs || x->overcommit != y->overcommit ||
                    x->hard_limits != y->hard_limits) {
                    hp_seterr(err, errlen,
                              "storageClassConfigs: classes \"%s\" and \"%s\" both use %s on %s "
                              "but %s: one directory is one volume root",
                              r[a].cls, r[b].cls, x->path, on,
                              x->shared != y->shared ? "one as a shared path, one as a node's"
                                                     : "with another capacity, "
                                                       "allowRootFilesystem, overcommit or "
                                                       "hardLimits");
                    rc = -EINVAL;
                }
            } else if (within(x->path, y->path) || within(y->path, x->path)) {
                hp_seterr(err, errlen,
                          "storageClassConfigs: %s (class \"%s\") and %s (class \"%s\") overlap "
                          "on %s: a volume root must not lie inside another",
                          x->path, r[a].cls, y->path, r[b].cls, on);
                rc = -EINVAL;
            }
        }
    }
    free(r);
    return rc;
}

/* Every node named by some class, and the nodes none names, get roots that fit together. */
static int check_roots(const struct hp_nodemap *m, char *err, size_t errlen)
{
    if (m->nclasses < 2) /* one map: parse_entry checked each node's paths */
        return 0;
    if (check_node_roots(m, NULL, err, errlen) < 0)
        return -EINVAL;
    for (size_t c = 0; c < m->nclasses; c++) {
        const struct hp_class_config *k = &m->classes[c];
        for (size_t i = 0; i < k->n; i++) {
            const char *node = k->entries[i].node;
            int seen = strcmp(node, HP_NODEMAP_DEFAULT_NODE) == 0; /* checked as NULL */
            for (size_t d = 0; d < c && !seen; d++)
                seen = lookup(m->classes[d].entries, m->classes[d].n, node) != NULL;
            if (!seen && check_node_roots(m, node, err, errlen) < 0)
                return -EINVAL;
        }
    }
    return 0;
}

static int parse_classes(const struct hp_json *j, int obj, struct hp_nodemap *out, char *err,
                         size_t errlen)
{
    out->classes = hp_xcalloc((size_t)hp_json_count(j, obj), sizeof(*out->classes));
    for (int k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k))
        if (parse_class(j, k, &out->classes[out->nclasses++], err, errlen) < 0)
            return -EINVAL;
    qsort(out->classes, out->nclasses, sizeof(*out->classes), class_cmp);
    for (size_t i = 1; i < out->nclasses; i++) {
        if (strcmp(out->classes[i - 1].name, out->classes[i].name) == 0) {
            hp_seterr(err, errlen, "storageClassConfigs: class \"%s\" is listed twice",
                      out->classes[i].name);
            return -EINVAL;
        }
    }
    return check_roots(out, err, errlen);
}

int hp_nodemap_parse(const char *text, size_t len, struct hp_nodemap *out, char *err,
                     size_t errlen)
{
    struct hp_json j;
    int rc = -EINVAL, tok[3] = {-1, -1, -1};
    static const char *const known[3] = {"nodePathMap", "sharedFileSystemPath",
                                         "storageClassConfigs"};
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
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (key_is(&j, k, known[i]))
                which = i;
        if (which >= 0) {
            if (tok[which] >= 0) {
                hp_seterr(err, errlen, "the key \"%s\" appears twice", known[which]);
                goto done;
            }
            tok[which] = k + 1;
            continue;
        }
        (void)text_of(&j, k, q, sizeof(q));
        for (size_t i = 0; i < HP_ARRAY_SIZE(unsupported); i++) {
            if (fold_eq(q, unsupported[i])) {
                hp_seterr(err, errlen, "\"%s\" (a local-path-provisioner setting) is not "
                                       "supported: this provisioner makes directories itself, "
                                       "without helper pods or scripts; remove the key",
                          q);
                goto done;
            }
        }
        hp_seterr(err, errlen, "unknown key \"%s\" (known: nodePathMap, sharedFileSystemPath, "
                               "storageClassConfigs)",
                  q);
        goto done;
    }
    /* storageClassConfigs, else the top level's nodePathMap or sharedFileSystemPath. With
     * storageClassConfigs, local-path-provisioner ignores the top level (pickConfig), and its own
     * Helm chart renders both: its values.yaml has a nodePathMap by default, kept beside the
     * storageClassConfigs a user sets. So the top level is ignored here too, and said (ignored);
     * only a value of the wrong type is refused, as its JSON decoder refuses it. */
    int m0 = how_set(&j, tok[0], HP_JSON_ARRAY), s0 = how_set(&j, tok[1], HP_JSON_STRING);
    int scc = how_set(&j, tok[2], HP_JSON_OBJECT);
    if (scc < 0) {
        hp_seterr(err, errlen, "\"storageClassConfigs\" must map StorageClass names to "
                               "{\"nodePathMap\": [...]} or {\"sharedFileSystemPath\": \"/path\"}");
        goto done;
    }
    if (scc && (m0 < 0 || s0 < 0)) {
        hp_seterr(err, errlen, "\"%s\" at the top must be %s (it is ignored beside "
                               "\"storageClassConfigs\", but must still be valid JSON for it)",
                  m0 < 0 ? "nodePathMap" : "sharedFileSystemPath",
                  m0 < 0 ? "a list of {node, paths}" : "a path");
        goto done;
    }
    if (scc) {
        if (parse_classes(&j, tok[2], out, err, errlen) < 0)
            goto done;
        out->ignored = m0 && s0 ? "nodePathMap and sharedFileSystemPath"
                       : m0     ? "nodePathMap"
                       : s0     ? "sharedFileSystemPath"
                                : NULL;
    } else if (!m0 && !s0) {
        hp_seterr(err, errlen, "the config must set \"nodePathMap\" (a non-empty list of {node, "
                               "paths}), \"sharedFileSystemPath\" or \"storageClassConfigs\"");
        goto done;
    } else if (parse_paths(&j, tok[0], tok[1], &out->entries, &out->n, &out->shared, "", err,
                           errlen) < 0) {
        goto done;
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
    return entry_for(m->entries, m->n, node);
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
    m->entries[0].paths[0].overcommit = 1.0;
}

int hp_nodemap_class_shared(const struct hp_nodemap *m, const char *class_name)
{
    if (!m->nclasses)
        return m->shared != NULL;
    const struct hp_class_config *c = class_config(m, class_name);
    return c ? c->shared != NULL : -ENOENT;
}

int hp_nodemap_class_paths(const struct hp_nodemap *m, const char *class_name, const char *node,
                           const struct hp_node_path **paths, size_t *npaths, char *err,
                           size_t errlen)
{
    const struct hp_node_entry *entries = m->entries;
    const struct hp_node_path *shared = m->shared;
    size_t n = m->n;
    char q[256] = "", qn[256] = "";

    *paths = NULL;
    *npaths = 0;
    if (m->nclasses) {
        const struct hp_class_config *c = class_config(m, class_name);
        if (!c) {
            struct hp_buf names;
            hp_buf_init(&names, 512);
            for (size_t i = 0; i < m->nclasses; i++)
                if (hp_buf_printf(&names, "%s%s", i ? ", " : "", m->classes[i].name) < 0)
                    break;
            hp_seterr(err, errlen, "StorageClass \"%s\" has no entry in storageClassConfigs of "
                                   "--config (it has: %s)",
                      class_name ? class_name : "", names.data ? names.data : "");
            hp_buf_free(&names);
            return -ENOENT;
        }
        entries = c->entries;
        n = c->n;
        shared = c->shared;
    }
    if (shared) {
        *paths = shared;
        *npaths = 1;
        return 0;
    }
    const struct hp_node_entry *e = entry_for(entries, n, node);
    if (!e) {
        (void)snprintf(q, sizeof(q), "%s", node ? node : "");
        if (m->nclasses)
            (void)snprintf(qn, sizeof(qn), " of StorageClass \"%s\"", class_name);
        hp_seterr(err, errlen, "the nodePathMap%s in --config has no entry for node \"%s\" and "
                               "no \"%s\" entry",
                  qn, q, HP_NODEMAP_DEFAULT_NODE);
        return -ENOENT;
    }
    *paths = e->paths;
    *npaths = e->npaths;
    return 0;
}

/* Appends p to out's paths unless a path of that name is there already. */
static void add_root(struct hp_node_entry *out, const struct hp_node_path *p, size_t *cap)
{
    for (size_t i = 0; i < out->npaths; i++)
        if (strcmp(out->paths[i].path, p->path) == 0)
            return;
    if (out->npaths == *cap) {
        *cap = *cap ? 2 * *cap : 4;
        out->paths = hp_xrealloc(out->paths, *cap * sizeof(*out->paths));
    }
    out->paths[out->npaths] = *p;
    out->paths[out->npaths].path = hp_xstrdup(p->path);
    out->npaths++;
}

int hp_nodemap_roots_for(const struct hp_nodemap *m, const char *node, struct hp_node_entry *out)
{
    size_t cap = 0, nconfigs = m->nclasses ? m->nclasses : 1;
    int found = 0;

    memset(out, 0, sizeof(*out));
    out->node = hp_xstrdup(node ? node : HP_NODEMAP_DEFAULT_NODE);
    for (size_t c = 0; c < nconfigs; c++) {
        const struct hp_node_entry *entries = m->nclasses ? m->classes[c].entries : m->entries;
        size_t n = m->nclasses ? m->classes[c].n : m->n;
        const struct hp_node_path *shared = m->nclasses ? m->classes[c].shared : m->shared;
        if (shared) {
            add_root(out, shared, &cap);
            found = 1;
            continue;
        }
        const struct hp_node_entry *e = entry_for(entries, n, node);
        if (!e)
            continue;
        found = 1;
        for (size_t i = 0; i < e->npaths; i++)
            add_root(out, &e->paths[i], &cap);
    }
    if (!out->paths)
        out->paths = hp_xcalloc(1, sizeof(*out->paths));
    if (!found) {
        hp_node_entry_free(out);
        return -ENOENT;
    }
    return 0;
}

/* What the map means for node, as text: per class (or the top level), its shared path or the
 * node's paths, with budgets and options. Two maps with the same text serve node the same. */
static void describe(const struct hp_nodemap *m, const char *node, struct hp_buf *b)
{
    size_t nconfigs = m->nclasses ? m->nclasses : 1;
    for (size_t c = 0; c < nconfigs; c++) {
        const struct hp_node_entry *entries = m->nclasses ? m->classes[c].entries : m->entries;
        size_t n = m->nclasses ? m->classes[c].n : m->n;
        const struct hp_node_path *shared = m->nclasses ? m->classes[c].shared : m->shared;
        const struct hp_node_entry *e = shared ? NULL : entry_for(entries, n, node);
        const char *name = m->nclasses ? m->classes[c].name : "";
        (void)hp_buf_printf(b, "%zu:%s", strlen(name), name);
        if (shared)
            (void)hp_buf_printf(b, "S%zu:%s", strlen(shared->path), shared->path);
        else if (!e)
            (void)hp_buf_appends(b, "-");
        for (size_t i = 0; e && i < e->npaths; i++)
            (void)hp_buf_printf(b, "P%zu:%s %llu %d %g %d", strlen(e->paths[i].path),
                                e->paths[i].path, (unsigned long long)e->paths[i].budget,
                                e->paths[i].allow_rootfs, e->paths[i].overcommit,
                                e->paths[i].hard_limits);
        (void)hp_buf_append(b, "\n", 1);
    }
}

int hp_nodemap_same_for(const struct hp_nodemap *a, const struct hp_nodemap *b, const char *node)
{
    struct hp_buf x, y;
    hp_buf_init(&x, 0);
    hp_buf_init(&y, 0);
    describe(a, node, &x);
    describe(b, node, &y);
    int same = x.len == y.len && memcmp(x.data, y.data, x.len) == 0;
    hp_buf_free(&x);
    hp_buf_free(&y);
    return same;
}
