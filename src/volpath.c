/* volpath: check a relative volume path, join it to its root, make an absolute one relative
 * (see volpath.h).
 *
 * Any thread: pure functions over their arguments. The check is lexical and strict because the
 * path decides which directory on the host is created and later removed.
 */
#include "hostpath/volpath.h"

#include <errno.h>
#include <string.h>

#include "hostpath/buf.h"

int hp_volpath_validate(const char *rel, char *err, size_t errlen)
{
    const char *p, *comp;
    size_t total;
    char q[HP_QUOTE_LEN];

    if (!rel || !*rel) {
        hp_seterr(err, errlen, "path is empty");
        return -EINVAL;
    }
    total = strlen(rel);
    if (rel[0] == '/') {
        hp_seterr(err, errlen, "path \"%s\" is absolute; it must be relative to the volume root",
                  hp_quote(q, sizeof(q), rel, total));
        return -EINVAL;
    }
    if (total > HP_VOLPATH_MAX) {
        hp_seterr(err, errlen, "path is %zu bytes long; at most %d are allowed", total,
                  HP_VOLPATH_MAX);
        return -ENAMETOOLONG;
    }
    for (p = rel; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) {
            hp_seterr(err, errlen, "path \"%s\" contains control character 0x%02x at offset %zu",
                      hp_quote(q, sizeof(q), rel, total), c, (size_t)(p - rel));
            return -EINVAL;
        }
    }
    comp = rel;
    for (;;) {
        const char *end = strchr(comp, '/');
        size_t n = end ? (size_t)(end - comp) : strlen(comp);
        if (n == 0) {
            hp_seterr(err, errlen, "path \"%s\" has an empty component (\"//\" or a trailing '/')",
                      hp_quote(q, sizeof(q), rel, total));
            return -EINVAL;
        }
        if ((n == 1 && comp[0] == '.') || (n == 2 && comp[0] == '.' && comp[1] == '.')) {
            hp_seterr(err, errlen, "path \"%s\" has a \"%.*s\" component",
                      hp_quote(q, sizeof(q), rel, total), (int)n, comp);
            return -EINVAL;
        }
        if (n > HP_VOLPATH_NAME_MAX) {
            hp_seterr(err, errlen,
                      "path component \"%s\" is %zu bytes long; at most %d are allowed",
                      hp_quote(q, sizeof(q), comp, n), n, HP_VOLPATH_NAME_MAX);
            return -ENAMETOOLONG;
        }
        if (!end)
            break;
        comp = end + 1;
    }
    return 0;
}

char *hp_volpath_join(const char *root, const char *rel)
{
    return hp_xasprintf("%s/%s", strcmp(root, "/") == 0 ? "" : root, rel);
}

/* Next component of an absolute path: skips slashes, returns its length (0 at the end). */
static size_t next_comp(const char **p)
{
    const char *s = *p;
    size_t n = 0;

    while (*s == '/')
        s++;
    while (s[n] && s[n] != '/')
        n++;
    *p = s;
    return n;
}

static int dot_comp(const char *s, size_t n)
{
    return (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.');
}

/* The next component of abs that is not "." (the same directory: "/srv/./v" is "/srv/v", and
 * a PersistentVolume may be written so); its length, 0 at the end. */
static size_t next_real_comp(const char **p)
{
    size_t n;
    while ((n = next_comp(p)) == 1 && (*p)[0] == '.')
        *p += 1;
    return n;
}

static int relative_to(const char *base, const char *abs, char *out, size_t outlen)
{
    const char *b = base, *a = abs;
    size_t bn, an, len = 0;

    if (!base || !abs || base[0] != '/' || abs[0] != '/' || !out || outlen == 0)
        return -EINVAL;
    out[0] = '\0';
    /* Every component of base must equal the corresponding one of abs. */
    while ((bn = next_comp(&b)) != 0) {
        an = next_real_comp(&a);
        if (dot_comp(b, bn) || an != bn || memcmp(a, b, bn) != 0)
            return -EINVAL;
        a += an;
        b += bn;
    }
    /* At least one more component in abs; "." ones are skipped, ".." is refused (it cannot be
     * resolved without the filesystem, and the API server refuses it in a hostPath). */
    while ((an = next_real_comp(&a)) != 0) {
        if (dot_comp(a, an))
            return -EINVAL;
        if (len + (len ? 1 : 0) + an >= outlen) {
            out[0] = '\0';
            return -ENAMETOOLONG;
        }
        if (len)
            out[len++] = '/';
        memcpy(out + len, a, an);
        len += an;
        out[len] = '\0';
        a += an;
    }
    return len ? 0 : -EINVAL;
}

int hp_volpath_relative(const char *root, const char *abs, char *rel, size_t len)
{
    int rc = relative_to(root, abs, rel, len);

    if (rc == 0 && hp_volpath_validate(rel, NULL, 0) < 0) {
        rel[0] = '\0';
        rc = -EINVAL;
    }
    return rc;
}
