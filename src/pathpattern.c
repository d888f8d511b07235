/* pathpattern: render a StorageClass pathPattern into a relative path under --pv-dir (checked by
 * volpath, as every volume path is); render local-path-provisioner's value patterns
 * (userPattern, groupPattern, permPattern) into an owner and a mode.
 *
 * Any thread: pure functions over their arguments. The template language is the subset of Go's
 * text/template that local-path-provisioner-style patterns use: field actions {{.PVName}},
 * {{.PVC.Namespace}}, {{.PVC.Name}}, {{.PVC.UID}}, {{.PVC.Annotations.<key>}},
 * {{.PVC.Labels.<key>}}, the
 * equivalent {{index .PVC.Annotations "<key>"}} form (Go needs it for keys with '.' or '/'), and
 * the whitespace-trim markers "{{- " and " -}}". Everything else inside {{ }} is refused rather
 * than guessed at, because the result decides which directory on the host we create and later
 * remove.
 */
#include "hostpath/pathpattern.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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
    const char *what; /* the pattern's name in messages: "pathPattern", "userPattern", ... */
    int data;         /* a value pattern (userPattern ...): a value may hold '/' */
    /* Key collection (hp_pathpattern_keys): each map key used is appended, packed; its value is
     * taken to be "x". */
    struct hp_buf *keys[2]; /* annotations, labels */
};

static int emit(struct render *r, const char *s, size_t n)
{
    size_t limit = r->outlen - 1 < HP_VOLPATH_MAX ? r->outlen - 1 : HP_VOLPATH_MAX;

    if (n > limit - r->len) {
        hp_seterr(r->err, r->errlen, "rendered %s is longer than %zu bytes", r->what, limit);
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

    if (!r->data && memchr(value, '/', n)) {
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
        hp_seterr(r->err, r->errlen, "invalid %s key \"%s\" in %s", kind,
                  hp_quote(q, sizeof(q), key, keylen), r->what);
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
                  "claim %s/%s has no %s \"%.*s\" used by %s (or its value holds a NUL "
                  "character, which no path or value can)",
                  r->claim->namespace_ ? r->claim->namespace_ : "",
                  r->claim->name ? r->claim->name : "", kind, (int)keylen, key, r->what);
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
        hp_seterr(r->err, r->errlen, "empty action {{}} at offset %zu in %s", offset, r->what);
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
    if (equals(a, n, ".PVC.UID")) { /* the claim's metadata object has it: theirs does too */
        if (need_claim(r, a, n))
            return -EINVAL;
        return emit_value(r, r->claim->uid ? r->claim->uid : "", "claim UID");
    }
    if (prefix_is(a, n, ".PVC.Annotations.") || prefix_is(a, n, ".PVC.Labels.")) {
        char map = a[5] == 'A' ? 'A' : 'L';
        size_t skip = map == 'A' ? strlen(".PVC.Annotations.") : strlen(".PVC.Labels.");
        if (need_claim(r, a, n))
            return -EINVAL;
        return emit_map_value(r, map, a + skip, n - skip);
    }
    hp_seterr(r->err, r->errlen,
              "unknown field {{%s}} at offset %zu in %s (known: .PVName, .PVC.Namespace, "
              ".PVC.Name, .PVC.UID, .PVC.Annotations.<key>, .PVC.Labels.<key>)",
              hp_quote(q, sizeof(q), a, n), offset, r->what);
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
        hp_seterr(r->err, r->errlen, "unclosed '{{' at offset %zu in %s", open, r->what);
        return -EINVAL;
    }
    close = (size_t)(c - pattern);
    c = strstr(pattern + start, "{{");
    if (c && (size_t)(c - pattern) < close) {
        hp_seterr(r->err, r->errlen, "unclosed '{{' at offset %zu in %s", open, r->what);
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

/* Renders pattern into r->out as text: no check of the result as a path or a value. */
static int render_raw(struct render *r, const char *pattern)
{
    size_t i = 0;
    int rc;

    if (!r->out || r->outlen == 0) {
        hp_seterr(r->err, r->errlen, "no room for the rendered %s", r->what);
        return -EINVAL;
    }
    r->out[0] = '\0';
    if (!pattern) {
        hp_seterr(r->err, r->errlen, "%s is missing", r->what);
        return -EINVAL;
    }
    while (pattern[i]) {
        if (pattern[i] == '{' && pattern[i + 1] == '{') {
            rc = render_action(r, pattern, &i);
        } else if (pattern[i] == '}' && pattern[i + 1] == '}') {
            hp_seterr(r->err, r->errlen, "stray '}}' at offset %zu in %s", i, r->what);
            rc = -EINVAL;
        } else {
            rc = emit(r, pattern + i, 1);
            i++;
        }
        if (rc) {
            r->out[0] = '\0';
            return rc;
        }
    }
    return 0;
}

/* A trailing '/' (or several) of the pattern's text is dropped: local-path-provisioner's
 * recommended pattern, "{{ .PVC.Namespace }}/{{ .PVC.Name }}/", ends with one, and its
 * filepath.Join gives the directory without it. Only the literal text after the last action is
 * trimmed, so "x/{{.PVC.Annotations.a}}/" with an empty annotation still has an empty component
 * (refused) rather than becoming "x", a directory every such claim would share. A text of
 * slashes only is left as it is (hp_volpath_validate: absolute). */
static void drop_trailing_slashes(char *out, size_t literal_start)
{
    size_t n = strlen(out);

    while (n > literal_start && out[n - 1] == '/')
        n--;
    if (n > 0)
        out[n] = '\0';
}

/* allowUnsafePathPattern: the rendered text is cleaned lexically the way local-path-provisioner's
 * filepath.Join(root, text) cleans it -- a leading '/', "//" and "." components vanish, ".." takes
 * back the component before it -- but the result must still name a directory strictly inside the
 * root: a ".." with nothing left to take back (Join would climb out of the root) and a text that
 * cleans to the root itself are refused. Lexical is exact here: the components are names that
 * fsops later resolves one by one without following a symlink. */
static int clean_unsafe(char *out, const char *what, char *err, size_t errlen)
{
    char buf[HP_VOLPATH_MAX + 1], q[HP_QUOTE_LEN];
    size_t len = 0, total = strlen(out);
    const char *p = out;

    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, "/");
        if (n == 1 && p[0] == '.') {
            p += n;
            continue;
        }
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (len == 0) {
                hp_seterr(err, errlen,
                          "%s renders to \"%s\", whose \"..\" climbs out of the volume root "
                          "(allowUnsafePathPattern lets \"..\" only take back a component of "
                          "the path itself)",
                          what, hp_quote(q, sizeof(q), out, total));
                return -EINVAL;
            }
            while (len > 0 && buf[len - 1] != '/')
                len--;
            if (len > 0)
                len--; /* the separator before the component taken back */
            p += n;
            continue;
        }
        if (len + (len ? 1 : 0) + n > HP_VOLPATH_MAX) { /* cleaning only shortens: never */
            hp_seterr(err, errlen, "rendered %s is longer than %d bytes", what, HP_VOLPATH_MAX);
            return -ENAMETOOLONG;
        }
        if (len)
            buf[len++] = '/';
        memcpy(buf + len, p, n);
        len += n;
        p += n;
    }
    buf[len] = '\0';
    if (len == 0) {
        hp_seterr(err, errlen,
                  "%s renders to \"%s\", which names the volume root itself, not a directory "
                  "inside it",
                  what, hp_quote(q, sizeof(q), out, total));
        return -EINVAL;
    }
    memcpy(out, buf, len + 1);
    return 0;
}

/* The rendered text as a volume path: cleaned (HP_PATTERN_UNSAFE) or without its trailing '/',
 * then checked as every volume path is. */
static int finish_path(struct render *r, unsigned flags)
{
    int rc = 0;

    if (flags & HP_PATTERN_UNSAFE)
        rc = clean_unsafe(r->out, r->what, r->err, r->errlen);
    else
        drop_trailing_slashes(r->out, r->literal_start);
    if (rc == 0)
        rc = hp_volpath_validate(r->out, r->err, r->errlen);
    if (rc)
        r->out[0] = '\0';
    return rc;
}

int hp_pathpattern_render_path(const char *pattern, const struct hp_claim *claim,
                               const char *pv_name, unsigned flags, char *out, size_t outlen,
                               char *err, size_t errlen)
{
    struct render r = {.out = out, .outlen = outlen, .claim = claim, .pv_name = pv_name,
                       .err = err, .errlen = errlen, .what = "pathPattern"};
    int rc = render_raw(&r, pattern);
    return rc ? rc : finish_path(&r, flags);
}

int hp_pathpattern_render(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                          char *out, size_t outlen, char *err, size_t errlen)
{
    return hp_pathpattern_render_path(pattern, claim, pv_name, 0, out, outlen, err, errlen);
}

int hp_pathpattern_keys(const char *pattern, struct hp_buf *ann_keys, struct hp_buf *label_keys)
{
    static const struct hp_claim dummy = {.namespace_ = "n", .name = "n", .annotations = "",
                                          .labels = ""};
    char out[HP_VOLPATH_MAX + 1];
    struct render r = {.out = out, .outlen = sizeof(out), .claim = &dummy, .pv_name = "pv",
                       .what = "pathPattern", .keys = {ann_keys, label_keys}};
    int rc = render_raw(&r, pattern);
    if (rc == 0)
        rc = finish_path(&r, 0);
    (void)hp_buf_append(ann_keys, "", 1);
    (void)hp_buf_append(label_keys, "", 1);
    return rc;
}

/* ---- value patterns: userPattern, groupPattern, permPattern ---- */

#define HP_VALUE_MAX 255     /* a rendered value, bytes */
#define HP_ID_MAX 0x7fffffffUL /* as the class parameters uid and gid (policy.c) */

/* White space strings.TrimSpace removes, ASCII part: a value with a Unicode space around it is
 * then not a number, and the message says what it rendered to. */
static int is_trim_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int hp_pathpattern_render_value(const char *pattern, const char *what,
                                const struct hp_claim *claim, const char *pv_name, char *out,
                                size_t outlen, char *err, size_t errlen)
{
    struct render r = {.out = out, .outlen = outlen, .claim = claim, .pv_name = pv_name,
                       .err = err, .errlen = errlen, .what = what ? what : "pattern", .data = 1};
    int rc = render_raw(&r, pattern);
    if (rc)
        return rc;
    size_t start = 0, end = r.len;
    while (start < end && is_trim_space(out[start]))
        start++;
    while (end > start && is_trim_space(out[end - 1]))
        end--;
    memmove(out, out + start, end - start);
    out[end - start] = '\0';
    return 0;
}

/* Renders a value pattern into v (HP_VALUE_MAX + 1 bytes): 0, or the error with its reason; an
 * empty result is an error too (it sets nothing, and says nothing of what was meant). */
static int render_nonempty(const char *pattern, const char *what, const struct hp_claim *claim,
                           const char *pv_name, char *v, char *err, size_t errlen)
{
    char q[HP_QUOTE_LEN];
    int rc = hp_pathpattern_render_value(pattern, what, claim, pv_name, v, HP_VALUE_MAX + 1, err,
                                         errlen);
    if (rc)
        return rc;
    if (!v[0]) {
        hp_seterr(err, errlen, "%s \"%s\" renders to an empty string", what,
                  hp_quote(q, sizeof(q), pattern, strlen(pattern)));
        return -EINVAL;
    }
    return 0;
}

/* 1 when s is a non-empty run of bytes in [lo, hi]. */
static int all_in(const char *s, char lo, char hi)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < lo || *s > hi)
            return 0;
    return 1;
}

int hp_pathpattern_id(const char *pattern, const char *what, const struct hp_claim *claim,
                      const char *pv_name, uint32_t *out, char *err, size_t errlen)
{
    char v[HP_VALUE_MAX + 1], q[HP_QUOTE_LEN], qv[HP_QUOTE_LEN], *end;
    unsigned long n = 0;

    what = what ? what : "pattern";
    int rc = render_nonempty(pattern, what, claim, pv_name, v, err, errlen);
    if (rc)
        return rc;
    errno = 0;
    if (all_in(v, '0', '9'))
        n = strtoul(v, &end, 10);
    if (!all_in(v, '0', '9') || errno || n > HP_ID_MAX) {
        hp_seterr(err, errlen,
                  "%s \"%s\" renders to \"%s\", which is not a numeric id from 0 to %lu (names "
                  "are not looked up: the provisioner's /etc/passwd is not the node's)",
                  what, hp_quote(q, sizeof(q), pattern, strlen(pattern)),
                  hp_quote(qv, sizeof(qv), v, strlen(v)), HP_ID_MAX);
        return -EINVAL;
    }
    *out = (uint32_t)n;
    return 0;
}

int hp_pathpattern_mode(const char *pattern, const struct hp_claim *claim, const char *pv_name,
                        mode_t *out, char *err, size_t errlen)
{
    char v[HP_VALUE_MAX + 1], q[HP_QUOTE_LEN], qv[HP_QUOTE_LEN], *end;
    unsigned long n = 0;

    int rc = render_nonempty(pattern, "permPattern", claim, pv_name, v, err, errlen);
    if (rc)
        return rc;
    errno = 0;
    if (all_in(v, '0', '7'))
        n = strtoul(v, &end, 8);
    if (!all_in(v, '0', '7') || errno || n > 07777) {
        hp_seterr(err, errlen,
                  "permPattern \"%s\" renders to \"%s\", which is not an octal mode from 0 to "
                  "7777 like 0770 (symbolic modes like u+rwx are not supported)",
                  hp_quote(q, sizeof(q), pattern, strlen(pattern)),
                  hp_quote(qv, sizeof(qv), v, strlen(v)));
        return -EINVAL;
    }
    *out = (mode_t)n;
    return 0;
}
