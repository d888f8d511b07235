/* policy: the provisioner's decisions, as pure functions (see policy.h).
 *
 * Any thread. Nothing here allocates, logs or touches the filesystem or the network, so every
 * rule is a row in tests/unit/test_policy.c.
 */
#include "hostpath/policy.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysmacros.h>

#include "hostpath/buf.h"
#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/quantity.h"

/* ---- StorageClass parameters ---- */

static int parse_id(const char *s, unsigned long *out)
{
    char *end;
    if (*s < '0' || *s > '9') /* no sign, no leading space */
        return -EINVAL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 0x7fffffffUL)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_mode(const char *v, mode_t *out)
{
    char *end;
    if (*v < '0' || *v > '7')
        return -EINVAL;
    errno = 0;
    unsigned long n = strtoul(v, &end, 8);
    if (*end || errno || n > 07777)
        return -EINVAL;
    *out = (mode_t)n;
    return 0;
}

/* v for a message: control characters become '?' so that a reason stays one line. */
static const char *one_line(const char *v, char *buf, size_t len)
{
    size_t i = 0;
    for (; v[i] && i + 1 < len; i++)
        buf[i] = (unsigned char)v[i] < 0x20 || v[i] == 0x7f ? '?' : v[i];
    buf[i] = '\0';
    return buf;
}

/* Go's strconv.ParseBool, which local-path-provisioner reads allowUnsafePathPattern with. */
static int parse_go_bool(const char *v, int *out)
{
    static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const f[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (strcmp(v, t[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(v, f[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static int alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label key as the API server validates one (a qualified name): an optional prefix, a DNS
 * subdomain of at most 253 bytes (lower-case labels of [a-z0-9-], each starting and ending with
 * an alphanumeric), then '/', then a name of 1 to 63 bytes of [A-Za-z0-9-_.] starting and ending
 * with an alphanumeric. */
static int valid_label_key(const char *k)
{
    const char *slash = strchr(k, '/'), *name = slash ? slash + 1 : k;
    size_t n = strlen(name);
    if (n == 0 || n > 63 || !alnum(name[0]) || !alnum(name[n - 1]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!alnum(name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
            return 0;
    if (!slash)
        return 1;
    size_t plen = (size_t)(slash - k);
    if (plen == 0 || plen > 253)
        return 0;
    for (size_t i = 0; i < plen; i++) {
        char c = k[i], prev = i ? k[i - 1] : '.', next = i + 1 < plen ? k[i + 1] : '.';
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            continue;
        /* '-' inside a label, '.' between labels */
        if (c == '-' && prev != '.' && next != '.')
            continue;
        if (c == '.' && prev != '.' && prev != '-' && next != '.' && next != '-')
            continue;
        return 0;
    }
    return 1;
}

/* Where a value came from, for messages. */
static const char *source_words(int from_annotation)
{
    return from_annotation ? "StorageClass annotation" : "parameter";
}

#define SUPPORTED_PARAMS                                                                           \
    "pathPattern, mode, uid, gid, onDelete, reuseRetained, nodePath, hardLimits, "                \
    "nodeAffinityKey, userPattern, groupPattern, permPattern, allowUnsafePathPattern"

/* One parameter of ours or local-path-provisioner's: 0, 1 when k is not one, or -EINVAL with the
 * reason. given collects which of mode/uid/gid were set (1, 2, 4) for the conflict check. */
static int parse_param(const char *k, const char *v, struct hp_class_params *p, int *given,
                       char *err, size_t errlen)
{
    char q[256];
    unsigned long n;

    if (strcmp(k, "pathPattern") == 0) {
        p->path_pattern = v;
    } else if (strcmp(k, "mode") == 0) {
        if (parse_mode(v, &p->mode) < 0) {
            hp_seterr(err, errlen, "parameter mode=\"%s\" is not an octal file mode like 0770",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        *given |= 1;
    } else if (strcmp(k, "uid") == 0 || strcmp(k, "gid") == 0) {
        if (parse_id(v, &n) < 0) {
            hp_seterr(err, errlen, "parameter %s=\"%s\" is not a numeric id", k,
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        if (k[0] == 'u')
            p->uid = (uid_t)n;
        else
            p->gid = (gid_t)n;
        p->set_owner = 1;
        *given |= k[0] == 'u' ? 2 : 4;
    } else if (strcmp(k, "onDelete") == 0) {
        if (hp_on_delete_parse(v, &p->on_delete) < 0) {
            hp_seterr(err, errlen,
                      "parameter onDelete=\"%s\" is not one of delete, retain, archive",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
    } else if (strcmp(k, "nodePath") == 0) {
        if (v[0] != '/') {
            hp_seterr(err, errlen, "parameter nodePath=\"%s\" is not an absolute path",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        p->node_path = v;
    } else if (strcmp(k, "reuseRetained") == 0) {
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
            hp_seterr(err, errlen, "parameter reuseRetained=\"%s\" is not true or false",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        p->reuse_retained = v[0] == 't';
    } else if (strcmp(k, "hardLimits") == 0) {
        if (strcmp(v, "required") != 0 && strcmp(v, "optional") != 0) {
            hp_seterr(err, errlen,
                      "parameter hardLimits=\"%s\" is not required or optional (required: only "
                      "on paths with hardLimits in --config, where each volume's size is "
                      "enforced)",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        p->hard_limits = v[0] == 'r' ? HP_HARD_LIMITS_REQUIRED : HP_HARD_LIMITS_OPTIONAL;
    } else if (strcmp(k, "nodeAffinityKey") == 0) {
        /* provisioner.go 528: an empty key means the default one. */
        if (*v && !valid_label_key(v)) {
            hp_seterr(err, errlen,
                      "parameter nodeAffinityKey=\"%s\" is not a node label key (a name of at "
                      "most 63 characters, with an optional DNS-subdomain prefix: "
                      "example.com/stable-node-id)",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
        p->node_affinity_key = *v ? v : HP_LABEL_HOSTNAME;
    } else if (strcmp(k, HP_ANN_USER_PATTERN) == 0) {
        p->user_pattern = v;
    } else if (strcmp(k, HP_ANN_GROUP_PATTERN) == 0) {
        p->group_pattern = v;
    } else if (strcmp(k, HP_ANN_PERM_PATTERN) == 0) {
        p->perm_pattern = v;
    } else if (strcmp(k, HP_ANN_ALLOW_UNSAFE_PATH) == 0) {
        if (parse_go_bool(v, &p->allow_unsafe_path) < 0) {
            hp_seterr(err, errlen, "parameter allowUnsafePathPattern=\"%s\" is not true or false",
                      one_line(v, q, sizeof(q)));
            return -EINVAL;
        }
    } else {
        return 1;
    }
    return 0;
}

static int parse_class(const char *packed, const char *annotations, struct hp_class_params *p,
                       char *err, size_t errlen)
{
    char q[256], qk[128];
    int given = 0;
    p->path_pattern = HP_DEFAULT_PATH_PATTERN;
    p->mode = 0777;
    p->uid = (uid_t)-1;
    p->gid = (gid_t)-1;
    p->set_owner = 0;
    p->on_delete = HP_ON_DELETE_DELETE;
    p->reuse_retained = 0;
    p->node_path = NULL;
    p->hard_limits = HP_HARD_LIMITS_OPTIONAL;
    p->node_affinity_key = HP_LABEL_HOSTNAME;
    p->user_pattern = p->group_pattern = p->perm_pattern = NULL;
    p->allow_unsafe_path = 0;
    int unsafe_given = 0;
    for (const char *k = packed ? packed : ""; *k; k = hp_packed_next(hp_packed_next(k))) {
        const char *v = hp_packed_next(k);
        int rc = parse_param(k, v, p, &given, err, errlen);
        if (rc < 0)
            return rc;
        unsafe_given |= strcmp(k, HP_ANN_ALLOW_UNSAFE_PATH) == 0;
        if (rc == 0)
            continue;
        if (strcmp(k, HP_ANN_VOLUME_TYPE) == 0 || strcmp(k, HP_ANN_DEFAULT_VOLUME_TYPE) == 0) {
            hp_seterr(err, errlen,
                      "unknown StorageClass parameter \"%s\": volumeType is an annotation of "
                      "the claim, defaultVolumeType one of the StorageClass (metadata.annotations)",
                      k);
            return -EINVAL;
        }
        hp_seterr(err, errlen, "unknown StorageClass parameter \"%s\" (supported: " SUPPORTED_PARAMS
                               ")",
                  one_line(k, qk, sizeof(qk)));
        return -EINVAL;
    }
    /* local-path-provisioner's annotation fallbacks, for what no parameter said. */
    int from_ann[3] = {0, 0, 0}; /* perm, user, group */
    const char **pat[3] = {&p->perm_pattern, &p->user_pattern, &p->group_pattern};
    static const char *const names[3] = {HP_ANN_PERM_PATTERN, HP_ANN_USER_PATTERN,
                                         HP_ANN_GROUP_PATTERN};
    for (int i = 0; i < 3; i++) {
        const char *v = *pat[i] ? NULL : hp_packed_get(annotations, names[i]);
        if (v) {
            *pat[i] = v;
            from_ann[i] = 1;
        }
    }
    const char *v = unsafe_given ? NULL : hp_packed_get(annotations, HP_ANN_ALLOW_UNSAFE_PATH);
    if (v && parse_go_bool(v, &p->allow_unsafe_path) < 0) {
        hp_seterr(err, errlen,
                  "StorageClass annotation allowUnsafePathPattern=\"%s\" is not true or false",
                  one_line(v, q, sizeof(q)));
        return -EINVAL;
    }
    /* Ours and its: two answers to one question are refused rather than ranked. */
    static const char *const ours[3] = {"mode", "uid", "gid"};
    static const char *const what[3] = {"mode", "owner", "group"};
    for (int i = 0; i < 3; i++) {
        if ((given & (1 << i)) && *pat[i]) {
            hp_seterr(err, errlen,
                      "parameter %s and the %s %s both set the directory's %s: keep one (%s is "
                      "this provisioner's, %s local-path-provisioner's)",
                      ours[i], source_words(from_ann[i]), names[i], what[i], ours[i], names[i]);
            return -EINVAL;
        }
    }
    return 0;
}

int hp_policy_class_params(const char *packed, struct hp_class_params *p, char *err,
                           size_t errlen)
{
    return parse_class(packed, NULL, p, err, errlen);
}

int hp_policy_class_params_of(const struct hp_class *cls, struct hp_class_params *p, char *err,
                              size_t errlen)
{
    return parse_class(cls ? cls->parameters : NULL, cls ? cls->annotations : NULL, p, err,
                       errlen);
}

void hp_policy_class_keys(const struct hp_class_params *p, struct hp_buf *ann_keys,
                          struct hp_buf *label_keys)
{
    const char *patterns[] = {p->path_pattern, p->user_pattern, p->group_pattern,
                              p->perm_pattern};
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        struct hp_buf a, l;
        if (!patterns[i])
            continue;
        hp_buf_init(&a, 0);
        hp_buf_init(&l, 0);
        /* The keys are listed whether the pattern renders or not; a pattern that does not is
         * refused with the claim, when it is rendered. */
        (void)hp_pathpattern_keys(patterns[i], &a, &l);
        (void)hp_buf_append(ann_keys, a.data, a.len - 1); /* without its final "\0" */
        (void)hp_buf_append(label_keys, l.data, l.len - 1);
        hp_buf_free(&a);
        hp_buf_free(&l);
    }
    (void)hp_buf_append(ann_keys, "", 1);
    (void)hp_buf_append(label_keys, "", 1);
}

/* ---- one claim's volume ---- */

int hp_policy_dir_attrs(const struct hp_class_params *p, const struct hp_claim *cl,
                        const char *pv_name, struct hp_dir_attrs *out, char *err, size_t errlen)
{
    uint32_t id;
    int rc;

    out->mode = p->mode;
    out->uid = p->uid;
    out->gid = p->gid;
    out->set_owner = p->set_owner;
    if (p->perm_pattern &&
        (rc = hp_pathpattern_mode(p->perm_pattern, cl, pv_name, &out->mode, err, errlen)) < 0)
        return rc;
    if (p->user_pattern) {
        if ((rc = hp_pathpattern_id(p->user_pattern, HP_ANN_USER_PATTERN, cl, pv_name, &id, err,
                                    errlen)) < 0)
            return rc;
        out->uid = (uid_t)id;
        out->set_owner = 1;
    }
    if (p->group_pattern) {
        if ((rc = hp_pathpattern_id(p->group_pattern, HP_ANN_GROUP_PATTERN, cl, pv_name, &id, err,
                                    errlen)) < 0)
            return rc;
        out->gid = (gid_t)id;
        out->set_owner = 1;
    }
    return 0;
}

const char *hp_volume_type_name(enum hp_volume_type t)
{
    return t == HP_VOLUME_LOCAL ? "local" : "hostPath";
}

int hp_policy_volume_type(const struct hp_claim *cl, const struct hp_class *cls,
                          enum hp_volume_type *out, char *err, size_t errlen)
{
    char q[256];
    const char *v = cl ? hp_packed_get(cl->annotations, HP_ANN_VOLUME_TYPE) : NULL;
    const char *where = "claim annotation " HP_ANN_VOLUME_TYPE;
    if (!v && cls) {
        v = hp_packed_get(cls->annotations, HP_ANN_DEFAULT_VOLUME_TYPE);
        where = "StorageClass annotation " HP_ANN_DEFAULT_VOLUME_TYPE;
    }
    if (!v) {
        *out = HP_VOLUME_HOSTPATH;
        return 0;
    }
    /* strings.ToLower: no other Unicode letter lowers to one of these ASCII names. */
    if (strcasecmp(v, "local") == 0) {
        *out = HP_VOLUME_LOCAL;
        return 0;
    }
    if (strcasecmp(v, "hostpath") == 0) {
        *out = HP_VOLUME_HOSTPATH;
        return 0;
    }
    hp_seterr(err, errlen, "%s=\"%s\" is not a volume type: local or hostPath", where,
              one_line(v, q, sizeof(q)));
    return -EINVAL;
}

int hp_policy_node_affinity(const struct hp_class_params *p, enum hp_volume_type type, int shared,
                            const char *node, const char *label_value, const char **key,
                            const char **value, char *err, size_t errlen)
{
    char q[256];
    int custom = strcmp(p->node_affinity_key, HP_LABEL_HOSTNAME) != 0;

    *key = *value = NULL;
    if (shared) {
        if (type == HP_VOLUME_LOCAL) {
            hp_seterr(err, errlen,
                      "a local volume must have node affinity, and a volume on the shared path "
                      "of its StorageClass (sharedFileSystemPath) has none: it is reached from "
                      "every node; use volumeType hostPath for it");
            return -EINVAL;
        }
        return 0;
    }
    if (!node || !*node) {
        if (type == HP_VOLUME_LOCAL || custom) {
            hp_seterr(err, errlen,
                      "%s needs the node the volume is on, and none is known: the claim has no "
                      "selected node and the provisioner runs without --node-name (use a "
                      "WaitForFirstConsumer StorageClass)",
                      type == HP_VOLUME_LOCAL ? "a local volume" : "nodeAffinityKey");
            return -EINVAL;
        }
        return 0;
    }
    if (!label_value && custom) {
        hp_seterr(err, errlen,
                  "node %s has no label %s (the StorageClass's nodeAffinityKey): label the node, "
                  "or the volume's node affinity would match no node",
                  one_line(node, q, sizeof(q)), p->node_affinity_key);
        return -ENOENT;
    }
    if (label_value && !*label_value) {
        hp_seterr(err, errlen, "node %s's label %s is empty: it cannot tell the node apart",
                  one_line(node, q, sizeof(q)), p->node_affinity_key);
        return -EINVAL;
    }
    *key = p->node_affinity_key;
    *value = label_value ? label_value : node;
    return 0;
}

/* ---- placement ---- */

/* The next component of path p that is not empty or "."; its length, 0 at the end. */
static size_t next_name(const char **p)
{
    for (;;) {
        while (**p == '/')
            (*p)++;
        size_t n = strcspn(*p, "/");
        if (n == 1 && (*p)[0] == '.') {
            (*p)++;
            continue;
        }
        return n;
    }
}

int hp_policy_same_path(const char *a, const char *b)
{
    if (!a || !b || (a[0] == '/') != (b[0] == '/'))
        return 0;
    for (;;) {
        size_t x = next_name(&a), y = next_name(&b);
        if (x != y || memcmp(a, b, x) != 0)
            return 0;
        if (x == 0)
            return 1;
        a += x;
        b += y;
    }
}

uint64_t hp_policy_room(const struct hp_place_path *p)
{
    uint64_t budget = p->budget ? p->budget : p->stats_known ? p->fs_size : UINT64_MAX;
    uint64_t room = budget > p->reserved ? budget - p->reserved : 0;
    if (p->stats_known && p->fs_free < room)
        room = p->fs_free;
    return room;
}

int hp_policy_place(const struct hp_place_path *paths, size_t n, uint64_t need, char *why,
                    size_t whylen)
{
    int best = -1;
    uint64_t best_room = 0;
    char a[32], b[32];

    if (n == 0) {
        hp_seterr(why, whylen, "this node has no volume paths (its --config entry lists none)");
        return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        if (paths[i].excluded)
            continue;
        uint64_t room = hp_policy_room(&paths[i]);
        if (room >= need && (best < 0 || room > best_room)) {
            best = (int)i;
            best_room = room;
        }
    }
    if (best >= 0)
        return best;
    /* Nothing fits: every path's numbers, as a person would check them. */
    struct hp_buf m;
    hp_buf_init(&m, 0);
    (void)hp_buf_printf(&m, "needs %s", hp_quantity_format(need, a, sizeof(a)));
    for (size_t i = 0; i < n; i++) {
        const struct hp_place_path *p = &paths[i];
        uint64_t budget = p->budget ? p->budget : p->fs_size;
        uint64_t left = budget > p->reserved ? budget - p->reserved : 0;
        if (p->excluded)
            (void)hp_buf_printf(&m, "; %s %s", p->path, p->excluded);
        else if (p->stats_known && p->fs_free < left)
            (void)hp_buf_printf(&m, "; %s has %s free on its disk", p->path,
                                hp_quantity_format(p->fs_free, a, sizeof(a)));
        else if (p->budget || p->stats_known)
            (void)hp_buf_printf(&m, "; %s has %s left of its %s %s", p->path,
                                hp_quantity_format(left, a, sizeof(a)),
                                hp_quantity_format(budget, b, sizeof(b)),
                                p->budget ? "budget" : "disk");
        else
            (void)hp_buf_printf(&m, "; %s has no room", p->path);
    }
    hp_seterr(why, whylen, "%s", m.data);
    hp_buf_free(&m);
    return -ENOSPC;
}

/* ---- serving claims ---- */

const char *hp_policy_skip_claim(const struct hp_claim *cl, const struct hp_class *cls,
                                 const struct hp_serve_env *env)
{
    if (cl->volume_name[0])
        return "bound";
    if (cl->deleting)
        return "being deleted";
    if (!cl->class_name || !cl->class_name[0])
        return "no class";
    if (!cls)
        return "class not found";
    if (strcmp(cls->provisioner, env->provisioner) != 0)
        return "class of another provisioner";
    if (cl->provisioner && strcmp(cl->provisioner, env->provisioner) != 0)
        return "annotated for another provisioner";
    if (cls->wait_for_first_consumer && (!cl->selected_node || !cl->selected_node[0]))
        return "waiting for first consumer";
    /* Per-node mode (--node-name): a claim with a selected node is that node's instance's to
     * serve, leader or not. Otherwise every claim is the leader's: replicas of one Deployment
     * must not all provision the same WaitForFirstConsumer claim. */
    if (cl->selected_node && cl->selected_node[0] && env->node_name && !env->shared) {
        if (strcmp(cl->selected_node, env->node_name) != 0)
            return "selected node is another node";
    } else if (!env->leading) {
        return "not leader";
    }
    return NULL;
}

/* ---- on-delete ---- */

enum hp_on_delete hp_policy_on_delete(const char *annotation, const struct hp_record *rec,
                                      const struct hp_class_params *cls,
                                      enum hp_policy_source *source)
{
    enum hp_on_delete d;
    if (annotation) {
        if (hp_on_delete_parse(annotation, &d) == 0) {
            *source = HP_POLICY_FROM_ANNOTATION;
            return d;
        }
        /* Someone wrote a value we do not know: keep the data, whatever else says. */
        *source = HP_POLICY_FROM_INVALID;
        return HP_ON_DELETE_RETAIN;
    }
    if (rec) {
        *source = HP_POLICY_FROM_JOURNAL;
        return rec->on_delete;
    }
    if (cls) {
        *source = HP_POLICY_FROM_CLASS;
        return cls->on_delete;
    }
    *source = HP_POLICY_FROM_DEFAULT;
    return HP_ON_DELETE_RETAIN;
}

const char *hp_policy_source_name(enum hp_policy_source s)
{
    switch (s) {
    case HP_POLICY_FROM_ANNOTATION:
        return "the PersistentVolume's " HP_ANN_ON_DELETE " annotation";
    case HP_POLICY_FROM_JOURNAL:
        return "the ownership journal";
    case HP_POLICY_FROM_CLASS:
        return "the StorageClass";
    case HP_POLICY_FROM_INVALID:
        return "the PersistentVolume's " HP_ANN_ON_DELETE " annotation, whose value is not "
               "delete, retain or archive: keeping the data";
    case HP_POLICY_FROM_DEFAULT:
    default:
        return "nothing (no annotation, record or StorageClass): keeping the data";
    }
}

/* ---- paths ---- */

/* 1 when p is a component-wise prefix of q ("a" of "a/b", not of "ab"), p != q. */
static int is_prefix_dir(const char *p, const char *q)
{
    size_t n = strlen(p);
    return strncmp(p, q, n) == 0 && q[n] == '/';
}

enum hp_path_relation hp_policy_path_relation(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return HP_PATH_EQUAL;
    if (is_prefix_dir(a, b))
        return HP_PATH_CONTAINS;
    if (is_prefix_dir(b, a))
        return HP_PATH_INSIDE;
    return HP_PATH_DISJOINT;
}

const char *hp_policy_relation_words(enum hp_path_relation r)
{
    switch (r) {
    case HP_PATH_EQUAL:
        return "is";
    case HP_PATH_CONTAINS:
        return "contains";
    case HP_PATH_INSIDE:
        return "lies inside";
    case HP_PATH_DISJOINT:
    default:
        return "is apart from";
    }
}

/* ---- records ---- */

int hp_policy_same_fs(const struct hp_record *made, const struct hp_fs_ident *now)
{
    if (made->dev == now->dev)
        return 1;
    return made->fsid != 0 && made->fsid == now->fsid;
}

int hp_policy_check_record(const struct hp_record *rec, const char *pv, const char *rel,
                           const struct hp_fs_ident *now, char *err, size_t errlen)
{
    if (strcmp(rec->pv, pv) != 0) {
        hp_seterr(err, errlen, "the ownership record names volume %s, not %s", rec->pv, pv);
        return -EPERM;
    }
    if (strcmp(rec->path, rel) != 0) {
        hp_seterr(err, errlen,
                  "the PersistentVolume's path %s is not the directory recorded for it (%s)", rel,
                  rec->path);
        return -EPERM;
    }
    if (!hp_policy_same_fs(rec, now)) {
        hp_seterr(err, errlen,
                  "the volume root is on device %u:%u now, but the volume was made on device "
                  "%u:%u: is the right disk mounted?",
                  major((dev_t)now->dev), minor((dev_t)now->dev), major((dev_t)rec->dev),
                  minor((dev_t)rec->dev));
        return -EPERM;
    }
    return 0;
}

int hp_policy_reuse_match(const struct hp_record *rec, const char *ns, const char *name,
                          const char *cls)
{
    return rec->state == HP_REC_RETAINED && rec->claim_namespace && rec->claim_name &&
           rec->class_name && strcmp(rec->claim_namespace, ns) == 0 &&
           strcmp(rec->claim_name, name) == 0 && strcmp(rec->class_name, cls) == 0;
}

/* ---- sweep ---- */

enum hp_sweep_action hp_policy_sweep(const struct hp_record *rec, const struct hp_sweep_facts *f)
{
    /* Another identity's record (a shared disk, a renamed node) is its owner's business. */
    if (!rec->identity || !f->identity || strcmp(rec->identity, f->identity) != 0)
        return HP_SWEEP_KEEP;
    /* A directory some live PV mounts (an administrator bound a retained directory to a PV
     * of their own, say) is that PV's now, whatever our record says. */
    if (f->in_flight || f->pv_exists || f->path_in_use)
        return HP_SWEEP_KEEP;
    switch (rec->state) {
    case HP_REC_RETAINED:
    case HP_REC_ARCHIVED:
        return HP_SWEEP_KEEP; /* kept on purpose, for an administrator */
    case HP_REC_DELETING:
        return HP_SWEEP_DELETE; /* decided before the PV went: finish it */
    case HP_REC_CREATING:
    case HP_REC_CREATED:
    default:
        break;
    }
    /* Made, but no PV: provisioning is still under way while the claim exists, and a young
     * record may belong to a provisioning another process of ours is doing right now. */
    if (f->claim_exists || f->now - rec->updated < f->grace_s)
        return HP_SWEEP_KEEP;
    /* Never completed (a crash before "created"): no PV was ever made for it, so no pod ever
     * wrote to it; whatever its policy, there is nothing to keep, and a retained or archived
     * record would name a directory that may not even exist. */
    if (rec->state == HP_REC_CREATING)
        return HP_SWEEP_DELETE;
    /* A retained directory taken over for a claim that went before its PV was made (or whose
     * PV someone else deleted): the data predates this claim; it is retained again. */
    if (rec->adopted_from)
        return HP_SWEEP_RETAIN;
    /* Otherwise the record's policy; a delete or archive then happens only when the directory
     * is empty (fsops only_unused): a PV deleted by someone else (reclaimPolicy Retain, or a
     * rebuilt cluster) was never released here, and its data is kept. */
    switch (rec->on_delete) {
    case HP_ON_DELETE_DELETE:
        return HP_SWEEP_DELETE;
    case HP_ON_DELETE_ARCHIVE:
        return HP_SWEEP_ARCHIVE;
    case HP_ON_DELETE_RETAIN:
    default:
        return HP_SWEEP_RETAIN;
    }
}

/* ---- archiving ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

int hp_policy_archive_name(const char *leaf, const char *suffix, char *out, size_t outlen)
{
    size_t max = outlen - 1 < NAME_MAX ? outlen - 1 : NAME_MAX;
    int n = snprintf(out, outlen, "archived-%s%s", leaf, suffix);
    if (n >= 0 && (size_t)n <= max)
        return 0;
    /* "archived-" + head + "-" + 16 hex + suffix, cut to fit; the head never splits a UTF-8
     * character. */
    size_t fixed = strlen("archived-") + 1 + 16 + strlen(suffix);
    if (fixed >= max)
        return -ENAMETOOLONG;
    size_t head = max - fixed;
    if (head > strlen(leaf))
        head = strlen(leaf);
    while (head > 0 && ((unsigned char)leaf[head] & 0xc0) == 0x80)
        head--;
    n = snprintf(out, outlen, "archived-%.*s-%016llx%s", (int)head, leaf,
                 (unsigned long long)fnv1a(leaf), suffix);
    return n >= 0 && (size_t)n <= max ? 0 : -ENAMETOOLONG;
}
