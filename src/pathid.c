/* pathid: what a path names on disk (see pathid.h).
 *
 * Resolution walks the path one component at a time from "/", as the kernel does: lstat each
 * component; a symlink's target is spliced in front of what is left (at most 40 of them, the
 * kernel's limit), ".." goes up from what was resolved so far; the first missing component ends
 * the walk, the rest being kept as written (normalised). The resolved, symlink-free path is then
 * mapped to the filesystem through the mount table.
 */
#include "hostpath/pathid.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/policy.h"

#define MAX_LINKS 40
#define MOUNTINFO_MAX (16u << 20) /* a table larger than this is not a real one */

struct mount {
    unsigned major, minor;
    char *root;  /* inside the filesystem: "/" or "/a/b" */
    char *point; /* in this namespace: "/" or "/x/y" */
};

struct hp_mounts {
    struct mount *v;
    size_t n;
};

void hp_mounts_free(struct hp_mounts *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].root);
        free(m->v[i].point);
    }
    free(m->v);
    free(m);
}

size_t hp_mounts_count(const struct hp_mounts *m)
{
    return m ? m->n : 0;
}

/* A mountinfo field with its octal escapes (\040 space, \011 tab, \012 newline, \134
 * backslash) decoded. Caller frees. */
static char *unescape(const char *s, size_t n)
{
    char *out = hp_xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' &&
            s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            out[o++] = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

/* The next space-separated field of [*p, end): its start and length, *p moved past it. */
static int field(const char **p, const char *end, const char **f, size_t *n)
{
    const char *s = *p;
    while (s < end && *s == ' ')
        s++;
    if (s >= end)
        return 0;
    const char *e = s;
    while (e < end && *e != ' ')
        e++;
    *f = s;
    *n = (size_t)(e - s);
    *p = e;
    return 1;
}

/* One line: "id parent major:minor root point options ... - fstype source superopts". */
static int parse_line(const char *s, const char *end, struct mount *out)
{
    const char *f[5];
    size_t n[5];
    char num[32];
    unsigned maj, min;

    for (int i = 0; i < 5; i++)
        if (!field(&s, end, &f[i], &n[i]))
            return -1;
    if (n[2] >= sizeof(num))
        return -1;
    memcpy(num, f[2], n[2]);
    num[n[2]] = '\0';
    char tail;
    if (sscanf(num, "%u:%u%c", &maj, &min, &tail) != 2 || f[3][0] != '/' || f[4][0] != '/')
        return -1;
    out->major = maj;
    out->minor = min;
    out->root = unescape(f[3], n[3]);
    out->point = unescape(f[4], n[4]);
    return 0;
}

int hp_mounts_parse(const char *text, size_t len, struct hp_mounts **out)
{
    struct hp_mounts *m = hp_xcalloc(1, sizeof(*m));
    size_t cap = 0;
    const char *p = text, *end = text + len;

    *out = NULL;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        struct mount mt;
        if (parse_line(p, le, &mt) == 0) {
            if (m->n == cap) {
                cap = cap ? 2 * cap : 32;
                m->v = hp_xrealloc(m->v, cap * sizeof(*m->v));
            }
            m->v[m->n++] = mt;
        }
        p = nl ? nl + 1 : end;
    }
    if (m->n == 0) {
        hp_mounts_free(m);
        return -EINVAL;
    }
    *out = m;
    return 0;
}

int hp_mounts_load(struct hp_mounts **out)
{
    struct hp_buf b;
    char chunk[8192];
    FILE *f = fopen("/proc/self/mountinfo", "re");
    int rc;

    *out = NULL;
    if (!f)
        return -errno;
    hp_buf_init(&b, MOUNTINFO_MAX);
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n && hp_buf_append(&b, chunk, n) < 0) {
            rc = -EFBIG;
            goto done;
        }
        if (n < sizeof(chunk))
            break;
    }
    rc = ferror(f) ? -EIO : hp_mounts_parse(b.data ? b.data : "", b.len, out);
done:
    (void)fclose(f);
    hp_buf_free(&b);
    return rc;
}

/* Length of the prefix `point` covers in path, component-wise: "/" covers everything (0 is
 * returned for it, the whole path being its rest), "/a" covers "/a" and "/a/b", not "/ab".
 * -1 when it does not cover path. */
static long covers(const char *point, const char *path)
{
    size_t n = strlen(point);
    if (n == 1 && point[0] == '/')
        return 0;
    if (strncmp(point, path, n) != 0 || (path[n] != '\0' && path[n] != '/'))
        return -1;
    return (long)n;
}

int hp_mounts_key(const struct hp_mounts *m, const char *canon, char *out, size_t len)
{
    const struct mount *best = NULL;
    long best_n = -1;

    /* The last mount in table order whose point covers the path: a later mount on a shorter
     * point was mounted over an ancestor and hides the earlier one. */
    for (size_t i = 0; m && i < m->n; i++) {
        long k = covers(m->v[i].point, canon);
        if (k >= 0) {
            best = &m->v[i];
            best_n = k;
        }
    }
    if (!best) {
        /* A chroot whose root is not a mount point: the mount holding "/" lies outside this
         * process's root and is not listed. Identity by path alone, under a device no real
         * filesystem has (0:0): the paths the table does not cover compare with one another;
         * a bind mount inside such a root of a directory in its uncovered part is not seen as
         * the same directory (docs/design.md, "Identity"). */
        int w = snprintf(out, len, "0:0:%s", canon);
        return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
    }
    const char *rest = canon + best_n; /* "" or "/..." */
    const char *root = strcmp(best->root, "/") == 0 ? "" : best->root;
    int w = snprintf(out, len, "%u:%u:%s%s", best->major, best->minor, root,
                     rest[0] ? rest : (root[0] ? "" : "/"));
    if (w < 0 || (size_t)w >= len)
        return -ENAMETOOLONG;
    return 0;
}

/* ---- resolution ---------------------------------------------------------------------------- */

struct walk {
    char path[PATH_MAX]; /* resolved so far: "/" or "/a/b", symlink-free and existing */
    size_t len;
};

/* Drops the last component of w (".." from "/" stays "/"). */
static void walk_up(struct walk *w)
{
    while (w->len > 1 && w->path[w->len - 1] != '/')
        w->len--;
    if (w->len > 1)
        w->len--;
    w->path[w->len] = '\0';
}

static int walk_down(struct walk *w, const char *name, size_t n)
{
    size_t sep = w->len > 1 ? 1 : 0;
    if (w->len + sep + n >= sizeof(w->path))
        return -ENAMETOOLONG;
    if (sep)
        w->path[w->len++] = '/';
    memcpy(w->path + w->len, name, n);
    w->len += n;
    w->path[w->len] = '\0';
    return 0;
}

/* The components still to walk, a path text whose front is consumed; a symlink's target is put
 * in front of what is left. */
struct todo {
    char buf[2 * PATH_MAX];
    size_t off;
};

static int todo_push_front(struct todo *t, const char *s, size_t n)
{
    size_t rest = strlen(t->buf + t->off);
    if (n + 1 + rest >= sizeof(t->buf))
        return -ENAMETOOLONG;
    memmove(t->buf + n + 1, t->buf + t->off, rest + 1);
    memcpy(t->buf, s, n);
    t->buf[n] = '/';
    t->off = 0;
    return 0;
}

/* The next component (not empty, not "."): its start and length; 0 at the end. */
static int todo_next(struct todo *t, const char **c, size_t *n)
{
    for (;;) {
        char *s = t->buf + t->off;
        while (*s == '/')
            s++;
        if (!*s) {
            t->off = (size_t)(s - t->buf);
            return 0;
        }
        char *e = strchr(s, '/');
        size_t k = e ? (size_t)(e - s) : strlen(s);
        t->off = (size_t)(s - t->buf) + k;
        if (k == 1 && s[0] == '.')
            continue;
        *c = s;
        *n = k;
        return 1;
    }
}

static int key_of(const struct hp_mounts *m, const char *canon, char *out, size_t len, char *err,
                  size_t errlen)
{
    int rc = hp_mounts_key(m, canon, out, len);
    if (rc == -ENOENT)
        hp_seterr(err, errlen, "no mount of this process covers %s", canon);
    else if (rc < 0)
        hp_seterr(err, errlen, "the identity of %s is too long", canon);
    return rc;
}

int hp_pathid_resolve(const struct hp_mounts *m, const char *abs, char *out, size_t len,
                      char *err, size_t errlen)
{
    struct hp_mounts *own = NULL;
    struct walk *w = hp_xcalloc(1, sizeof(*w));
    struct todo *t = hp_xcalloc(1, sizeof(*t));
    char link[PATH_MAX];
    int links = 0, rc = 0, stopped = 0;
    const char *c;
    size_t n;

    if (abs[0] != '/') {
        hp_seterr(err, errlen, "\"%s\" is not an absolute path", abs);
        rc = -EINVAL;
        goto out;
    }
    if (strlen(abs) >= PATH_MAX) {
        hp_seterr(err, errlen, "path is longer than %d bytes", PATH_MAX - 1);
        rc = -ENAMETOOLONG;
        goto out;
    }
    if (!m) {
        if ((rc = hp_mounts_load(&own)) < 0) {
            hp_seterr(err, errlen, "read /proc/self/mountinfo: %s", strerror(-rc));
            goto out;
        }
        m = own;
    }
    snprintf(t->buf, sizeof(t->buf), "%s", abs);
    w->path[0] = '/';
    w->len = 1;
    while (todo_next(t, &c, &n)) {
        struct stat st;
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            walk_up(w);
            continue;
        }
        size_t keep = w->len;
        if ((rc = walk_down(w, c, n)) < 0) {
            hp_seterr(err, errlen, "path is longer than %d bytes once resolved", PATH_MAX - 1);
            goto out;
        }
        if (lstat(w->path, &st) != 0) {
            int e = errno;
            if (e == ENOENT) {
                /* Not there (yet): the rest is where it will be made, as written. */
                while (todo_next(t, &c, &n)) {
                    if (n == 2 && c[0] == '.' && c[1] == '.') {
                        walk_up(w);
                    } else if ((rc = walk_down(w, c, n)) < 0) {
                        hp_seterr(err, errlen, "path is longer than %d bytes", PATH_MAX - 1);
                        goto out;
                    }
                }
                break;
            }
            w->len = keep;
            w->path[keep] = '\0';
            hp_seterr(err, errlen, "%.*s/%.*s: %s", (int)keep, w->path, (int)n, c, strerror(e));
            stopped = 1;
            break;
        }
        if (S_ISLNK(st.st_mode)) {
            ssize_t k = readlink(w->path, link, sizeof(link));
            const char *why = NULL;
            if (++links > MAX_LINKS)
                why = "too many levels of symbolic links";
            else if (k < 0)
                why = strerror(errno);
            else if ((size_t)k >= sizeof(link) || todo_push_front(t, link, (size_t)k) < 0)
                why = "symbolic link target too long";
            if (why) {
                hp_seterr(err, errlen, "%s: %s", w->path, why);
                w->len = keep;
                w->path[keep] = '\0';
                stopped = 1;
                break;
            }
            w->len = keep;
            w->path[keep] = '\0';
            if (link[0] == '/') {
                w->path[0] = '/';
                w->path[1] = '\0';
                w->len = 1;
            }
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            /* A file (a hostPath of type File) ends the path; one with more after it cannot
             * be walked through. */
            const char *more;
            size_t mn;
            size_t save = t->off;
            if (todo_next(t, &more, &mn)) {
                t->off = save;
                hp_seterr(err, errlen, "%s is not a directory", w->path);
                w->len = keep;
                w->path[keep] = '\0';
                stopped = 1;
                break;
            }
        }
    }
    rc = key_of(m, w->path, out, len, err, errlen);
    if (rc == 0 && stopped)
        rc = 1;
out:
    hp_mounts_free(own);
    free(w);
    free(t);
    return rc;
}

/* "major:minor:" of a key: its length, or 0 when the key has none. */
static size_t dev_len(const char *k)
{
    const char *a = strchr(k, ':');
    const char *b = a ? strchr(a + 1, ':') : NULL;
    return b ? (size_t)(b - k) + 1 : 0;
}

int hp_pathid_relation(const char *a, const char *b)
{
    size_t da = dev_len(a), db = dev_len(b);
    if (!da || da != db || strncmp(a, b, da) != 0)
        return HP_PATH_DISJOINT;
    const char *pa = a + da, *pb = b + db;
    size_t la = strlen(pa), lb = strlen(pb);
    if (la == lb && memcmp(pa, pb, la) == 0)
        return HP_PATH_EQUAL;
    /* "/" is the filesystem's root: it contains everything on it. */
    if (la == 1 && pa[0] == '/')
        return HP_PATH_CONTAINS;
    if (lb == 1 && pb[0] == '/')
        return HP_PATH_INSIDE;
    if (lb > la && memcmp(pa, pb, la) == 0 && pb[la] == '/')
        return HP_PATH_CONTAINS;
    if (la > lb && memcmp(pa, pb, lb) == 0 && pa[lb] == '/')
        return HP_PATH_INSIDE;
    return HP_PATH_DISJOINT;
}

int hp_pathid_overlap(const char *const *paths, size_t n, size_t *a, size_t *b, int *rel,
                      char *err, size_t errlen)
{
    struct hp_mounts *m = NULL;
    char **keys = hp_xcalloc(n + 1, sizeof(*keys));
    int rc = hp_mounts_load(&m);

    if (rc < 0)
        hp_seterr(err, errlen, "read /proc/self/mountinfo: %s", strerror(-rc));
    for (size_t i = 0; rc >= 0 && i < n; i++) {
        keys[i] = hp_xmalloc(HP_PATHID_MAX);
        rc = hp_pathid_resolve(m, paths[i], keys[i], HP_PATHID_MAX, err, errlen);
        if (rc > 0)
            rc = 0; /* compared by what resolved */
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        for (size_t k = i + 1; k < n; k++) {
            int r = hp_pathid_relation(keys[i], keys[k]);
            if (r != HP_PATH_DISJOINT) {
                *a = i;
                *b = k;
                *rel = r;
                rc = 1;
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    hp_mounts_free(m);
    return rc;
}
