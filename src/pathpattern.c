/* pathpattern: render a StorageClass pathPattern into a relative path under --pv-dir (the
 * result is checked by volpath, as every volume path is).
 *
 * Any thread: pure functions over their arguments. The template language is the subset of Go's
 * text/template that local-path-provisioner-style patterns use: field actions {{.PVName}},
 * {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.Annotations.<key>}}, {{.PVC.Labels.<key>}}, the
 * equivalent {{index .PVC.Annotations "<key>"}} form (Go needs it for keys with '.' or '/'), and
 * the whitespace-trim markers "{{- " and " -}}". Everything else inside {{ }} is refused rather
 * than guessed at, because the result decides which directory on the host we create and later
 * remove.
 */
#include "hostpath/pathpattern.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/objects.h"
#include "hostpath/volpath.h"

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Value for key in a packed "k\0v\0k\0v\0\0" map, or NULL. Local so that this module stays a leaf
 * that needs only buf.c and volpath.c. */
static const char *packed_lookup(const char *packed, const char *key, size_t keylen)
{
    const char *p = packed;

    if (!p)
        return NULL;
    while (*p) {
        const char *k = p;
        size_t kl = strlen(k);
        const char *v = k + kl + 1;
        if (kl == keylen && memcmp(k, key, keylen) == 0)
            return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

/* Characters of an annotation or label key: an optional DNS-subdomain prefix, '/', a name. */
static int valid_key(const char *k, size_t n)
{
    size_t i;

    if (n == 0 || n > 253 + 1 + 63)
        return 0;
    for (i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == '/'))
            return 0;
    }
    return 1;
}

/* Rendering state: out is always NUL-terminated; a value that does not fit fails the render. */
struct render {
    char *out;
    size_t outlen;
    size_t len;
    size_t literal_start; /* where the literal text since the last action starts */
    const struct hp_claim *claim;
    const char *pv_name;
    char *err;
    size_t errlen;
    /* Key collection (hp_pathpattern_keys): each map key used is appended, packed; its value is
     * taken to be "x". */
    struct hp_buf *keys[2]; /* annotations, labels */
};

static int emit(struct render *r, const char *s, size_t n)
{
    size_t limit = r->outlen - 1 < HP_VOLPATH_MAX ? r->outlen - 1 : HP_VOLPATH_MAX;

    if (n > limit - r->len) {
        hp_seterr(r->err, r->errlen, "rendered path is longer than %zu bytes", limit);
        return -ENAMETOOLONG;
    }
    memcpy(r->out + r->len, s, n);
    r->len += n;
    r->out[r->len] = '\0';
    return 0;
}

/* Emits one looked-up value. what names it for messages ("annotation \"k\"", "PVName"). */
static int emit_value(struct render *r, const char *value, const char *what)
{
    char q[HP_QUOTE_LEN];
    size_t n = strlen(value);

    if (memchr(value, '/', n)) {
        hp_seterr(r->err, r->errlen, "%s value \"%s\" contains '/'", what,
                  hp_quote(q, sizeof(q), value, n));
        return -EINVAL;
    }
    return emit(r, value, n);
}

static int need_claim(struct render *r, const char *a, size_t n)
{
    char q[HP_QUOTE_LEN];

    if (r->claim)
        return 0;
    hp_seterr(r->err, r->errlen, "{{%s}} needs a claim", hp_quote(q, sizeof(q), a, n));
    return -EINVAL;
}

/* map is 'A' (annotations) or 'L' (labels). */
static int emit_map_value(struct render *r, char map, const char *key, size_t keylen)
{
    char q[HP_QUOTE_LEN], what[HP_QUOTE_MAX + 32];
    const char *kind = map == 'A' ? "annotation" : "label";
    const char *v;

    if (!valid_key(key, keylen)) {
        hp_seterr(r->err, r->errlen, "invalid %s key \"%s\" in pathPattern", kind,
                  hp_quote(q, sizeof(q), key, keylen));
        return -EINVAL;
    }
    if (r->keys[0]) {
        struct hp_buf *b = r->keys[map == 'A' ? 0 : 1];
        (void)hp_buf_append(b, key, keylen);
        (void)hp_buf_append(b, "", 1);
        return emit(r, "x", 1);
    }
    v = packed_lookup(map == 'A' ? r->claim->annotations : r->claim->labels, key, keylen);
    if (!v) {
        /* A value holding a NUL is not kept (objects.c): it reads as absent here. */
        hp_seterr(r->err, r->errlen,
                  "claim %s/%s has no %s \"%.*s\" used by pathPattern (or its value holds a NUL "
                  "character, which no path can)",
                  r->claim->namespace_ ? r->claim->namespace_ : "",
                  r->claim->name ? r->claim->name : "", kind, (int)keylen, key);
        return -EINVAL;
    }
    (void)snprintf(what, sizeof(what), "%s \"%.*s\"", kind, (int)keylen, key);
    return emit_value(r, v, what);
}

static int prefix_is(const char *a, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && memcmp(a, lit, l) == 0;
}

static int equals(const char *a, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(a, lit, n) == 0;
}

/* {{index .PVC.Annotations "key"}}: a (n bytes) starts after "index" and its whitespace. */
static int eval_index(struct render *r, const char *a, size_t n)
{
    char q[HP_QUOTE_LEN];
    const char *p = a, *end = a + n, *key;
    char map, close;
    size_t keylen;

    if (prefix_is(p, (size_t)(end - p), ".PVC.Annotations")) {
        map = 'A';
        p += strlen(".PVC.Annotations");
    } else if (prefix_is(p, (size_t)(end - p), ".PVC.Labels")) {
        map = 'L';
        p += strlen(".PVC.Labels");
    } else {
        goto bad;
    }
    if (p == end || !is_space(*p))
        goto bad;
    while (p < end && is_space(*p))
        p++;
    if (p == end || (*p != '"' && *p != '`'))
        goto bad;
    close = *p++;
    key = p;
    while (p < end && *p != close && *p != '\\')
        p++;
    if (p == end || *p != close) /* unterminated, or an escape we do not interpret */
        goto bad;
    keylen = (size_t)(p - key);
    p++;
    if (p != end) /* already trimmed: anything left is another argument or a pipe */
        goto bad;
    if (need_claim(r, a, n))
        return -EINVAL;
    return emit_map_value(r, map, key, keylen);
bad:
    hp_seterr(r->err, r->errlen,
              "unsupported index expression {{index %s}}; use {{index .PVC.Annotations \"key\"}} "
              "or {{index .PVC.Labels \"key\"}}",
              hp_quote(q, sizeof(q), a, n));
    return -EINVAL;
}

/* One action, whitespace-trimmed, without braces. */
static int eval_action(struct render *r, const char *a, size_t n, size_t offset)
{
    char q[HP_QUOTE_LEN];

    if (n == 0) {
        hp_seterr(r->err, r->errlen, "empty action {{}} at offset %zu in pathPattern", offset);
        return -EINVAL;
    }
    if (n > 5 && memcmp(a, "index", 5) == 0 && is_space(a[5])) {
        size_t skip = 5;
        while (skip < n && is_space(a[skip]))
            skip++;
        return eval_index(r, a + skip, n - skip);
    }
    if (equals(a, n, ".PVName")) {
        if (!r->pv_name) {
            hp_seterr(r->err, r->errlen, "{{.PVName}} used but no volume name is known");
            return -EINVAL;
        }
        return emit_value(r, r->pv_name, "PVName");
    }
    if (equals(a, n, ".PVC.Namespace") || equals(a, n, ".PVC.Name")) {
        if (need_claim(r, a, n))
            return -EINVAL;
        if (equals(a, n, ".PVC.Name"))
            return emit_value(r, r->claim->name ? r->claim->name : "", "claim name");
        return emit_value(r, r->claim->namespace_ ? r->claim->namespace_ : "", "claim namespace");
    }
    if (prefix_is(a, n, ".PVC.Annotations.") || prefix_is(a, n, ".PVC.Labels.")) {
        char map = a[5] == 'A' ? 'A' : 'L';
        size_t skip = map == 'A' ? strlen(".PVC.Annotations.") : strlen(".PVC.Labels.");
        if (need_claim(r, a, n))
            return -EINVAL;
        return emit_map_value(r, map, a + skip, n - skip);
    }
    hp_seterr(r->err, r->errlen,
              "unknown field {{%s}} at offset %zu in pathPattern (known: .PVName, .PVC.Namespace, "
              ".PVC.Name, .PVC.Annotations.<key>, .PVC.Labels.<key>)",
              hp_quote(q, sizeof(q), a, n), offset);
    return -EINVAL;
}

/* Parses the action starting at pattern[*i] == "{{"; advances *i past "}}". */
static int render_action(struct render *r, const char *pattern, size_t *i)
{
    size_t open = *i, start = open + 2, close, end;
    int trim_left = 0, trim_right = 0, rc;
    const char *c;

    if (pattern[start] == '-' && is_space(pattern[start + 1])) {
        trim_left = 1;
        start++;
    }
    c = strstr(pattern + start, "}}");
    if (!c) {
        hp_seterr(r->err, r->errlen, "unclosed '{{' at offset %zu in pathPattern", open);
        return -EINVAL;
    }
    close = (size_t)(c - pattern);
    c = strstr(pattern + start, "{{");
    if (c && (size_t)(c - pattern) < close) {
        hp_seterr(r->err, r->errlen, "unclosed '{{' at offset %zu in pathPattern", open);
        return -EINVAL;
    }
    end = close;
    if (end > start + 1 && pattern[end - 1] == '-' && is_space(pattern[end - 2])) {
        trim_right = 1;
        end--;
    }
    if (trim_left) { /* Go drops the white space of the preceding text */
        while (r->len > r->literal_start && is_space(r->out[r->len - 1]))
            r->out[--r->len] = '\0';
    }
    while (start < end && is_space(pattern[start]))
        start++;
    while (end > start && is_space(pattern[end - 1]))
        end--;
    rc = eval_action(r, pattern + start, end - start, open);
    if (rc)
        return rc;
    *i = close + 2;
    if (trim_right) {
        while (is_space(pattern[*i]))
            (*i)++;
    }
    r->literal_start = r->len;
    return 0;
}

static int render(struct render *rp, const char *pattern);

int hp_pathpattern_render(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                          char *out, size_t outlen, char *err, size_t errlen)
{
    struct render r = {out, outlen, 0, 0, claim, pv_name, err, errlen, {NULL, NULL}};
    return render(&r, pattern);
}

int hp_pathpattern_keys(const char *pattern, struct hp_buf *ann_keys, struct hp_buf *label_keys)
{
    static const struct hp_claim dummy = {.namespace_ = "n", .name = "n", .annotations = "",
                                          .labels = ""};
    char out[HP_VOLPATH_MAX + 1];
    struct render r = {out, sizeof(out), 0, 0, &dummy, "pv", NULL, 0, {ann_keys, label_keys}};
    int rc = render(&r, pattern);
    (void)hp_buf_append(ann_keys, "", 1);
    (void)hp_buf_append(label_keys, "", 1);
    return rc;
}

static int render(struct render *rp, const char *pattern)
{
    struct render r = *rp;
    char *out = r.out, *err = r.err;
    size_t outlen = r.outlen, errlen = r.errlen;
    size_t i = 0;
    int rc;

    if (!out || outlen == 0) {
        hp_seterr(err, errlen, "no room for the rendered path");
        return -EINVAL;
    }
    out[0] = '\0';
    if (!pattern) {
        hp_seterr(err, errlen, "pathPattern is missing");
        return -EINVAL;
    }
    while (pattern[i]) {
        if (pattern[i] == '{' && pattern[i + 1] == '{') {
            rc = render_action(&r, pattern, &i);
        } else if (pattern[i] == '}' && pattern[i + 1] == '}') {
            hp_seterr(err, errlen, "stray '}}' at offset %zu in pathPattern", i);
            rc = -EINVAL;
        } else {
            rc = emit(&r, pattern + i, 1);
            i++;
        }
        if (rc) {
            out[0] = '\0';
            return rc;
        }
    }
    rc = hp_volpath_validate(out, err, errlen);
    if (rc)
        out[0] = '\0';
    return rc;
}
