/* journal: the ownership journal's record format and its crash-consistent files.
 *
 * Any thread; the file functions block and belong on the threadpool. A record is plain text an
 * operator can read with cat:
 *
 *     # hostpath-provisioner ownership record
 *     version=1
 *     state=created
 *
 *     pv=pvc-0c6b...
 *     path=default-data-pvc-0c6b...
 *     ...
 *
 * Values are percent-encoded where they hold '%', control bytes or DEL, so a value can never
 * span lines. A record is written whole to records/.tmp-<hash of pv>-<pid>-<n>, fsync'ed and
 * renamed over records/<pv> (the directory fsync'ed unless the caller's next fsync on the
 * filesystem commits the rename: HP_JOURNAL_NO_DIR_SYNC): after a crash at any instruction the
 * record is either the old or the new one, never a mix.
 *
 * A change of state alone is made in place (hp_journal_set_state): the state line comes right
 * after the header, always 15 bytes ("state=created" is followed by an empty line, the other
 * names have 8 letters), inside the file's first 512-byte sector, and "updated=" has a fixed
 * width; both are overwritten with one pwrite of unchanged length. A sector is written whole or
 * not at all (the assumption PostgreSQL makes for pg_control, which it keeps under 512 bytes for
 * this), so after a crash every byte is the old or the new one and each of the two lines is the
 * old or the new line: the record parses either way. No new inode, no rename, and an fsync only
 * when the caller needs the new state on disk before its next step.
 */
#include "hostpath/journal.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hostpath/common.h"
#include "hostpath/volpath.h"

#define RECORDS "records"
#define STAGING "staging"
#define PARENTS "parents"
#define TMP_PREFIX ".tmp-"
#define MAX_RECORD (64 * 1024)
/* The bytes a disk writes whole: a state change stays inside one such sector. */
#define ATOMIC_SECTOR 512
/* "state=" + 8 letters + "\n", or "state=created\n\n". */
#define STATE_SLOT 15
#define UPDATED_KEY "updated="
#define UPDATED_WIDTH 20 /* 2026-11-28T07:35:52Z */

static const char *const on_delete_names[] = {"delete", "retain", "archive"};
static const char *const state_names[] = {"creating", "created", "deleting", "retained",
                                          "archived"};

const char *hp_on_delete_name(enum hp_on_delete d)
{
    return (unsigned)d < HP_ARRAY_SIZE(on_delete_names) ? on_delete_names[d] : "unknown";
}

int hp_on_delete_parse(const char *s, enum hp_on_delete *out)
{
    for (size_t i = 0; s && i < HP_ARRAY_SIZE(on_delete_names); i++) {
        if (strcmp(s, on_delete_names[i]) == 0) {
            *out = (enum hp_on_delete)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *hp_record_state_name(enum hp_record_state s)
{
    return (unsigned)s < HP_ARRAY_SIZE(state_names) ? state_names[s] : "unknown";
}

static int parse_state(const char *s, enum hp_record_state *out)
{
    for (size_t i = 0; i < HP_ARRAY_SIZE(state_names); i++) {
        if (strcmp(s, state_names[i]) == 0) {
            *out = (enum hp_record_state)i;
            return 0;
        }
    }
    return -EINVAL;
}

static size_t packed_size(const char *p)
{
    const char *s = p;
    if (!p)
        return 0;
    while (*s)
        s += strlen(s) + 1;
    return (size_t)(s - p) + 1;
}

static char *dup_or_null(const char *s)
{
    return s ? hp_xstrdup(s) : NULL;
}

void hp_record_free(struct hp_record *r)
{
    free(r->path);
    free(r->pv);
    free(r->claim_uid);
    free(r->claim_namespace);
    free(r->claim_name);
    free(r->class_name);
    free(r->identity);
    free(r->parents);
    free(r->archived_as);
    free(r->adopted_from);
    free(r->root);
    memset(r, 0, sizeof(*r));
}

void hp_record_copy(struct hp_record *dst, const struct hp_record *src)
{
    *dst = *src;
    dst->path = dup_or_null(src->path);
    dst->pv = dup_or_null(src->pv);
    dst->claim_uid = dup_or_null(src->claim_uid);
    dst->claim_namespace = dup_or_null(src->claim_namespace);
    dst->claim_name = dup_or_null(src->claim_name);
    dst->class_name = dup_or_null(src->class_name);
    dst->identity = dup_or_null(src->identity);
    dst->archived_as = dup_or_null(src->archived_as);
    dst->adopted_from = dup_or_null(src->adopted_from);
    dst->root = dup_or_null(src->root);
    dst->parents = NULL;
    if (src->parents) {
        size_t n = packed_size(src->parents);
        dst->parents = hp_xmalloc(n);
        memcpy(dst->parents, src->parents, n);
    }
}

int hp_journal_valid_name(const char *pv)
{
    size_t n = pv ? strlen(pv) : 0;
    if (n == 0 || n > 253 || pv[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = pv[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

/* ---- format ---- */

static void put_value(struct hp_buf *b, const char *key, const char *v)
{
    (void)hp_buf_printf(b, "%s=", key);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p < 0x20 || *p == 0x7f || *p == '%')
            (void)hp_buf_printf(b, "%%%02X", *p);
        else
            (void)hp_buf_append(b, p, 1);
    }
    (void)hp_buf_append(b, "\n", 1);
}

/* The state line, STATE_SLOT bytes whatever the state (the file header says why). */
static void put_state(struct hp_buf *b, enum hp_record_state st)
{
    const char *name = hp_record_state_name(st);
    (void)hp_buf_printf(b, "state=%s\n%s", name, strlen(name) == 7 ? "\n" : "");
}

int hp_record_format(const struct hp_record *r, struct hp_buf *b)
{
    char t[32];
    struct tm tm;
    time_t secs = (time_t)r->updated;

    if (!r->path || !r->pv || !r->claim_uid)
        return -EINVAL;
    (void)hp_buf_appends(b, "# hostpath-provisioner ownership record: the directory at 'path' "
                            "(relative to this volume root)\n# belongs to PersistentVolume 'pv'. "
                            "Do not edit while the provisioner runs.\n");
    (void)hp_buf_printf(b, "version=%d\n", HP_JOURNAL_VERSION);
    put_state(b, r->state);
    put_value(b, "pv", r->pv);
    put_value(b, "path", r->path);
    (void)hp_buf_printf(b, "onDelete=%s\n", hp_on_delete_name(r->on_delete));
    put_value(b, "claimUID", r->claim_uid);
    put_value(b, "claimNamespace", r->claim_namespace ? r->claim_namespace : "");
    put_value(b, "claimName", r->claim_name ? r->claim_name : "");
    put_value(b, "class", r->class_name ? r->class_name : "");
    put_value(b, "identity", r->identity ? r->identity : "");
    (void)hp_buf_printf(b, "device=%" PRIu64 "\nfsid=%016" PRIx64 "\ninode=%" PRIu64 "\n", r->dev,
                        r->fsid, r->inode);
    for (const char *p = r->parents; p && *p; p += strlen(p) + 1)
        put_value(b, "parent", p);
    if (r->archived_as)
        put_value(b, "archivedAs", r->archived_as);
    if (r->adopted_from)
        put_value(b, "adoptedFrom", r->adopted_from);
    if (r->migrated)
        (void)hp_buf_appends(b, "migrated=true\n");
    if (r->project_id)
        (void)hp_buf_printf(b, "projectID=%" PRIu32 "\n", r->project_id);
    if (gmtime_r(&secs, &tm) && strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%SZ", &tm))
        (void)hp_buf_printf(b, "updated=%s\n", t);
    else
        (void)hp_buf_printf(b, "updated=%" PRId64 "\n", r->updated);
    return 0;
}

/* ---- parse ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes a percent-encoded value; NULL when an escape is malformed or decodes to NUL. */
static char *decode_value(const char *v, size_t n)
{
    char *out = hp_xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (v[i] != '%') {
            *o++ = v[i];
            continue;
        }
        if (i + 2 >= n || hexval(v[i + 1]) < 0 || hexval(v[i + 2]) < 0) {
            free(out);
            return NULL;
        }
        int c = hexval(v[i + 1]) * 16 + hexval(v[i + 2]);
        if (c == 0) {
            free(out);
            return NULL;
        }
        *o++ = (char)c;
        i += 2;
    }
    *o = '\0';
    return out;
}

static int parse_u64(const char *s, int base, uint64_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

/* "2026-11-24T10:00:00Z" or plain seconds. */
static int parse_time(const char *s, int64_t *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (end && !*end) {
        *out = (int64_t)timegm(&tm);
        return 0;
    }
    uint64_t v;
    if (parse_u64(s, 10, &v) == 0 && v <= INT64_MAX) {
        *out = (int64_t)v;
        return 0;
    }
    return -EINVAL;
}

static void append_packed(char **list, const char *v)
{
    size_t have = packed_size(*list), n = strlen(v) + 1;
    size_t keep = have ? have - 1 : 0;
    char *p = hp_xrealloc(*list, keep + n + 1);
    memcpy(p + keep, v, n);
    p[keep + n] = '\0';
    *list = p;
}

enum { F_PV, F_PATH, F_STATE, F_ONDELETE, F_UID, F_NS, F_NAME, F_CLASS, F_IDENTITY, F_DEVICE,
       F_FSID, F_INODE, F_ARCHIVED, F_ADOPTED, F_MIGRATED, F_UPDATED, F_VERSION, F_PROJECT,
       F_COUNT };

static const char *const field_names[F_COUNT] = {
    "pv",    "path",     "state",  "onDelete", "claimUID",  "claimNamespace",
    "claimName", "class", "identity", "device", "fsid", "inode",
    "archivedAs", "adoptedFrom", "migrated", "updated", "version", "projectID"};

static int field_of(const char *k, size_t n)
{
    for (int i = 0; i < F_COUNT; i++)
        if (strlen(field_names[i]) == n && memcmp(field_names[i], k, n) == 0)
            return i;
    return -1;
}

static int set_field(struct hp_record *r, int f, char *v, char *err, size_t errlen)
{
    uint64_t u;
    int rc = 0;
    switch (f) {
    case F_PV: r->pv = v; return 0;
    case F_PATH: r->path = v; return 0;
    case F_UID: r->claim_uid = v; return 0;
    case F_NS: r->claim_namespace = v; return 0;
    case F_NAME: r->claim_name = v; return 0;
    case F_CLASS: r->class_name = v; return 0;
    case F_IDENTITY: r->identity = v; return 0;
    case F_ARCHIVED: r->archived_as = v; return 0;
    case F_ADOPTED: r->adopted_from = v; return 0;
    case F_STATE: rc = parse_state(v, &r->state); break;
    case F_ONDELETE: rc = hp_on_delete_parse(v, &r->on_delete); break;
    case F_DEVICE: rc = parse_u64(v, 10, &r->dev); break;
    case F_FSID: rc = parse_u64(v, 16, &r->fsid); break;
    case F_INODE: rc = parse_u64(v, 10, &r->inode); break;
    case F_MIGRATED:
        rc = strcmp(v, "true") == 0 ? 0 : strcmp(v, "false") == 0 ? 0 : -EINVAL;
        r->migrated = strcmp(v, "true") == 0;
        break;
    case F_UPDATED: rc = parse_time(v, &r->updated); break;
    case F_PROJECT:
        /* 1..4294967294: 0 is "no project", written as no line at all */
        rc = parse_u64(v, 10, &u);
        if (rc == 0 && (u == 0 || u > 0xfffffffeULL))
            rc = -EINVAL;
        r->project_id = rc == 0 ? (uint32_t)u : 0;
        break;
    case F_VERSION:
        rc = parse_u64(v, 10, &u);
        if (rc == 0 && u > HP_JOURNAL_VERSION) {
            hp_seterr(err, errlen, "record version %s is newer than this provisioner's (%d)", v,
                      HP_JOURNAL_VERSION);
            free(v);
            return -EBADMSG;
        }
        break;
    }
    if (rc < 0) {
        for (char *q = v; *q; q++) /* the reason stays one line */
            if ((unsigned char)*q < 0x20 || *q == 0x7f)
                *q = '?';
        hp_seterr(err, errlen, "bad value \"%s\" for %s", v, field_names[f]);
    }
    free(v);
    return rc < 0 ? -EBADMSG : 0;
}

int hp_record_parse(const char *text, size_t len, struct hp_record *out, char *err,
                    size_t errlen)
{
    unsigned seen = 0;
    const char *p = text, *end = text + len;
    char pe[256];

    memset(out, 0, sizeof(*out));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *eq = memchr(p, '=', (size_t)(le - p));
        if (le == p || *p == '#') {
            p = le + 1;
            continue;
        }
        if (!eq || eq == p) {
            hp_seterr(err, errlen, "line without key=value: \"%.*s\"", (int)(le - p > 80 ? 80 : le - p), p);
            goto bad;
        }
        if (memchr(p, '\0', (size_t)(le - p))) {
            hp_seterr(err, errlen, "NUL byte in record");
            goto bad;
        }
        char *v = decode_value(eq + 1, (size_t)(le - eq - 1));
        if (!v) {
            hp_seterr(err, errlen, "bad escape in the value of %.*s", (int)(eq - p), p);
            goto bad;
        }
        if ((size_t)(eq - p) == 6 && memcmp(p, "parent", 6) == 0) {
            if (!*v) {
                hp_seterr(err, errlen, "unsafe parent path: empty");
                free(v);
                goto bad;
            }
            append_packed(&out->parents, v);
            free(v);
        } else {
            int f = field_of(p, (size_t)(eq - p));
            if (f < 0) {
                free(v); /* a key of a newer version: ignored */
            } else if (seen & (1u << f)) {
                hp_seterr(err, errlen, "key %s repeated", field_names[f]);
                free(v);
                goto bad;
            } else {
                seen |= 1u << f;
                if (set_field(out, f, v, err, errlen) < 0)
                    goto bad;
            }
        }
        p = le + 1;
    }
    static const int required[] = {F_VERSION, F_PV, F_PATH, F_STATE, F_ONDELETE, F_UID, F_DEVICE};
    for (size_t i = 0; i < HP_ARRAY_SIZE(required); i++) {
        if (!(seen & (1u << required[i]))) {
            hp_seterr(err, errlen, "missing key %s", field_names[required[i]]);
            goto bad;
        }
    }
    if (!hp_journal_valid_name(out->pv)) {
        hp_seterr(err, errlen, "pv \"%s\" is not a PersistentVolume name", out->pv);
        goto bad;
    }
    if (hp_volpath_validate(out->path, pe, sizeof(pe)) < 0 ||
        (out->archived_as && hp_volpath_validate(out->archived_as, pe, sizeof(pe)) < 0)) {
        hp_seterr(err, errlen, "unsafe path: %s", pe);
        goto bad;
    }
    for (const char *q = out->parents; q && *q; q += strlen(q) + 1) {
        if (hp_volpath_validate(q, pe, sizeof(pe)) < 0) {
            hp_seterr(err, errlen, "unsafe parent path: %s", pe);
            goto bad;
        }
    }
    if (out->state == HP_REC_ARCHIVED && !out->archived_as) {
        hp_seterr(err, errlen, "state archived without archivedAs");
        goto bad;
    }
    return 0;
bad:
    hp_record_free(out);
    return -EBADMSG;
}

/* ---- files ---- */

/* Opens the directory name below dirfd, without following a symlink; made first (mode 0700)
 * when it is missing and create is set (opened first: it exists nearly always). */
static int open_dir_at(int dirfd, const char *name, int create)
{
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(dirfd, name, flags);

    if (fd >= 0 || errno != ENOENT || !create)
        return fd >= 0 ? fd : -errno;
    if (mkdirat(dirfd, name, 0700) != 0 && errno != EEXIST)
        return -errno;
    fd = openat(dirfd, name, flags);
    return fd >= 0 ? fd : -errno;
}

int hp_journal_open(int rootfd, int create)
{
    int jfd = open_dir_at(rootfd, HP_JOURNAL_DIR, create);
    if (jfd < 0)
        return jfd;
    if (create) {
        /* Each is made when missing; an existing one is checked by opening it. */
        static const char *const subs[] = {RECORDS, STAGING, PARENTS};
        for (size_t i = 0; i < HP_ARRAY_SIZE(subs); i++) {
            int fd = open_dir_at(jfd, subs[i], 1);
            if (fd < 0) {
                (void)close(jfd);
                return fd;
            }
            (void)close(fd);
        }
    }
    return jfd;
}

static int read_all(int fd, struct hp_buf *b)
{
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return 0;
        if (hp_buf_append(b, chunk, (size_t)n) < 0)
            return -EFBIG;
    }
}

static int read_record_at(int dirfd, const char *name, struct hp_record *out, char *err,
                          size_t errlen)
{
    struct hp_buf b;
    char reason[256];
    struct stat st;
    /* O_NONBLOCK: a FIFO planted among the records must not block the reader (and with it
     * every start and SIGTERM); anything but a regular file is refused below. */
    int rc, fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        rc = -errno;
        if (rc != -ENOENT)
            hp_seterr(err, errlen, "open record %s: %s", name, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)close(fd);
        hp_seterr(err, errlen, "record %s is not a regular file", name);
        return -EBADMSG;
    }
    hp_buf_init(&b, MAX_RECORD);
    rc = read_all(fd, &b);
    (void)close(fd);
    if (rc < 0) {
        hp_seterr(err, errlen, "read record %s: %s", name,
                  rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
    } else if (hp_record_parse(b.data ? b.data : "", b.len, out, reason, sizeof(reason)) < 0) {
        hp_seterr(err, errlen, "record %s is not valid: %s", name, reason);
        rc = -EBADMSG;
    }
    hp_buf_free(&b);
    return rc;
}

int hp_journal_read(int jfd, const char *pv, struct hp_record *out, char *err, size_t errlen)
{
    int rfd, rc;
    if (!hp_journal_valid_name(pv)) {
        hp_seterr(err, errlen, "\"%s\" is not a PersistentVolume name", pv ? pv : "");
        return -EINVAL;
    }
    rfd = open_dir_at(jfd, RECORDS, 0);
    if (rfd < 0) {
        if (rfd != -ENOENT)
            hp_seterr(err, errlen, "open %s/%s: %s", HP_JOURNAL_DIR, RECORDS, strerror(-rfd));
        return rfd;
    }
    rc = read_record_at(rfd, pv, out, err, errlen);
    if (rc == 0 && strcmp(out->pv, pv) != 0) {
        hp_seterr(err, errlen, "record file %s names pv %s", pv, out->pv);
        hp_record_free(out);
        rc = -EBADMSG;
    }
    (void)close(rfd);
    return rc;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* This process's id, for temporary names (read once: getpid is a system call). */
static long own_pid(void)
{
    static atomic_long pid;
    long p = atomic_load_explicit(&pid, memory_order_relaxed);
    if (!p) {
        p = (long)getpid();
        atomic_store_explicit(&pid, p, memory_order_relaxed);
    }
    return p;
}

/* Writes name below dirfd crash-consistently: a temporary file, fsync, rename over the old
 * one, fsync of the directory (left to the caller with HP_JOURNAL_NO_DIR_SYNC). 0 or -errno
 * (nothing left behind). */
static int replace_file(int dirfd, const char *name, const char *data, size_t len,
                        unsigned flags)
{
    char tmp[300];
    /* A name that fits NAME_MAX whatever name's length (up to 253), unique per name, per
     * process and per write: two writers of one file (processes sharing a disk, in the
     * moment one hands over to the other) must never write into one temporary file. */
    static atomic_uint seq;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *q = name; *q; q++)
        h = (h ^ (unsigned char)*q) * 0x100000001b3ULL;
    (void)snprintf(tmp, sizeof(tmp), TMP_PREFIX "%016llx-%ld-%u", (unsigned long long)h,
                   own_pid(), atomic_fetch_add(&seq, 1));
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int rc = fd < 0 ? -errno : write_all(fd, data ? data : "", len), renamed = 0;
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (fd >= 0 && close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
        rc = -errno;
    else if (rc == 0)
        renamed = 1;
    if (rc == 0 && !(flags & HP_JOURNAL_NO_DIR_SYNC) && fsync(dirfd) != 0)
        rc = -errno;
    /* Only our own file: when the open failed (EEXIST), the name is another writer's (two
     * processes of one pid in different pid namespaces). */
    if (rc < 0 && fd >= 0 && !renamed)
        (void)unlinkat(dirfd, tmp, 0);
    return rc;
}

int hp_journal_write(int jfd, struct hp_record *r, char *err, size_t errlen)
{
    return hp_journal_write_flags(jfd, r, 0, err, errlen);
}

int hp_journal_write_flags(int jfd, struct hp_record *r, unsigned flags, char *err,
                           size_t errlen)
{
    struct hp_buf b;
    int rfd, rc;

    if (!hp_journal_valid_name(r->pv)) {
        hp_seterr(err, errlen, "\"%s\" is not a PersistentVolume name", r->pv ? r->pv : "");
        return -EINVAL;
    }
    r->updated = (int64_t)time(NULL);
    hp_buf_init(&b, MAX_RECORD);
    if (hp_record_format(r, &b) < 0) {
        hp_buf_free(&b);
        hp_seterr(err, errlen, "record of %s lacks a required field", r->pv);
        return -EINVAL;
    }
    rfd = open_dir_at(jfd, RECORDS, 1);
    if (rfd < 0) {
        hp_buf_free(&b);
        hp_seterr(err, errlen, "open %s/%s: %s", HP_JOURNAL_DIR, RECORDS, strerror(-rfd));
        return rfd;
    }
    rc = replace_file(rfd, r->pv, b.data, b.len, flags);
    if (rc < 0)
        hp_seterr(err, errlen, "write ownership record %s/%s/%s: %s", HP_JOURNAL_DIR, RECORDS,
                  r->pv, strerror(-rc));
    (void)close(rfd);
    hp_buf_free(&b);
    return rc;
}

/* Offset of the line of text that starts with key, or -1. */
static long line_of(const char *text, size_t len, const char *key)
{
    size_t k = strlen(key);
    for (size_t i = 0; i + k <= len;) {
        if (memcmp(text + i, key, k) == 0)
            return (long)i;
        const char *nl = memchr(text + i, '\n', len - i);
        if (!nl)
            break;
        i = (size_t)(nl - text) + 1;
    }
    return -1;
}

static int in_one_sector(long off, size_t n)
{
    return off >= 0 && (size_t)off / ATOMIC_SECTOR == ((size_t)off + n - 1) / ATOMIC_SECTOR;
}

/* The in-place change of hp_journal_set_state: 0 when made, 1 when the file is not the one r
 * formats to or the change would not stay inside its two sectors (the caller writes it whole),
 * -errno when a system call failed. */
static int set_state_in_place(int rfd, struct hp_record *r, enum hp_record_state state,
                              unsigned flags)
{
    struct hp_buf have, was, now;
    struct stat st;
    struct hp_record next = *r;
    int rc = 1, fd = openat(rfd, r->pv, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return errno == ENOENT ? 1 : -errno;
    hp_buf_init(&have, MAX_RECORD);
    hp_buf_init(&was, MAX_RECORD);
    hp_buf_init(&now, MAX_RECORD);
    next.state = state;
    next.updated = (int64_t)time(NULL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || read_all(fd, &have) < 0 ||
        hp_record_format(r, &was) < 0 || hp_record_format(&next, &now) < 0)
        goto out;
    long s = line_of(now.data, now.len, "state="), u = line_of(now.data, now.len, UPDATED_KEY);
    if (have.len != was.len || memcmp(have.data, was.data, was.len) != 0 ||
        now.len != was.len || !in_one_sector(s, STATE_SLOT) ||
        !in_one_sector(u, strlen(UPDATED_KEY) + UPDATED_WIDTH + 1))
        goto out;
    size_t lo = 0, hi = now.len;
    while (lo < hi && now.data[lo] == was.data[lo])
        lo++;
    while (hi > lo && now.data[hi - 1] == was.data[hi - 1])
        hi--;
    /* Only the state and updated lines differ (the rest formats alike): both checked above. */
    rc = 0;
    if (hi > lo) {
        ssize_t w = pwrite(fd, now.data + lo, hi - lo, (off_t)lo);
        rc = w < 0 ? -errno : (size_t)w != hi - lo ? -EIO : 0;
    }
    if (rc == 0 && (flags & HP_JOURNAL_SYNC) && fdatasync(fd) != 0)
        rc = -errno;
    if (rc == 0) {
        r->state = state;
        r->updated = next.updated;
    }
out:
    (void)close(fd);
    hp_buf_free(&have);
    hp_buf_free(&was);
    hp_buf_free(&now);
    return rc;
}

int hp_journal_set_state(int jfd, struct hp_record *r, enum hp_record_state state,
                         unsigned flags, char *err, size_t errlen)
{
    int rc = 1, rfd;

    if (!hp_journal_valid_name(r->pv)) {
        hp_seterr(err, errlen, "\"%s\" is not a PersistentVolume name", r->pv ? r->pv : "");
        return -EINVAL;
    }
    rfd = open_dir_at(jfd, RECORDS, 0);
    if (rfd >= 0) {
        rc = set_state_in_place(rfd, r, state, flags);
        (void)close(rfd);
    }
    if (rc < 0) {
        hp_seterr(err, errlen, "update ownership record %s/%s/%s: %s", HP_JOURNAL_DIR, RECORDS,
                  r->pv, strerror(-rc));
        return rc;
    }
    if (rc == 0)
        return 0;
    /* Written whole: the file is another version's, or not what r says, or gone. */
    r->state = state;
    return hp_journal_write_flags(jfd, r, (flags & HP_JOURNAL_SYNC) ? 0 : HP_JOURNAL_NO_DIR_SYNC,
                                  err, errlen);
}

int hp_journal_remove(int jfd, const char *pv, unsigned flags)
{
    int rfd, rc = 0;
    if (!hp_journal_valid_name(pv))
        return -EINVAL;
    rfd = open_dir_at(jfd, RECORDS, 0);
    if (rfd == -ENOENT)
        return 0;
    if (rfd < 0)
        return rfd;
    if (unlinkat(rfd, pv, 0) != 0 && errno != ENOENT)
        rc = -errno;
    else if (!(flags & HP_JOURNAL_NO_DIR_SYNC) && fsync(rfd) != 0)
        rc = -errno;
    (void)close(rfd);
    return rc;
}

int hp_journal_list(int jfd, int clean_tmp,
                    void (*fn)(const char *name, int status, const struct hp_record *r,
                               const char *reason, void *data),
                    void *data)
{
    int rfd = open_dir_at(jfd, RECORDS, 0);
    DIR *d;
    struct dirent *de;

    if (rfd == -ENOENT)
        return 0;
    if (rfd < 0)
        return rfd;
    d = fdopendir(rfd);
    if (!d) {
        int e = errno;
        (void)close(rfd);
        return -e;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        char reason[512] = "";
        struct hp_record r;
        if (de->d_name[0] == '.') {
            struct stat st;
            /* Not one being written now: the soak on a real node saw a scan remove a release's
             * temporary record between its write and its rename (ENOENT, retried). */
            if (clean_tmp && strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0 &&
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                (int64_t)time(NULL) - (int64_t)st.st_mtime >= HP_JOURNAL_TMP_STALE_S)
                (void)unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        int rc = read_record_at(dirfd(d), de->d_name, &r, reason, sizeof(reason));
        if (rc == 0 && strcmp(r.pv, de->d_name) != 0) {
            snprintf(reason, sizeof(reason), "record file %s names pv %s", de->d_name, r.pv);
            hp_record_free(&r);
            rc = -EBADMSG;
        }
        if (rc == -ENOENT)
            continue; /* removed meanwhile */
        fn(de->d_name, rc, rc == 0 ? &r : NULL, reason, data);
        if (rc == 0)
            hp_record_free(&r);
    }
    int rc = errno ? -errno : 0;
    (void)closedir(d);
    return rc;
}

/* ---- the roots this node has used, and those whose journal was seen ---- */

#define ROOTS_FILE "roots"
#define SEEN_FILE "journals"
#define MAX_ROOTS_FILE (256 * 1024)

static int valid_root_line(const char *p, size_t n)
{
    return n > 0 && n < 4096 && p[0] == '/' && !memchr(p, '\0', n);
}

/* A list of absolute paths, one per line ('#' starts a comment), read into *packed. A line
 * that is not one fails the read, or with skip_bad is left out. */
static int path_list_read(int jfd, const char *file, int skip_bad, char **packed, char *err,
                          size_t errlen)
{
    struct hp_buf b, out;
    struct stat st;
    int rc, fd = openat(jfd, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    *packed = NULL;
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        rc = -errno;
        hp_seterr(err, errlen, "open %s/%s: %s", HP_JOURNAL_DIR, file, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        (void)close(fd);
        hp_seterr(err, errlen, "%s/%s is not a regular file", HP_JOURNAL_DIR, file);
        return -EBADMSG;
    }
    hp_buf_init(&b, MAX_ROOTS_FILE);
    rc = read_all(fd, &b);
    (void)close(fd);
    if (rc < 0) {
        hp_seterr(err, errlen, "read %s/%s: %s", HP_JOURNAL_DIR, file, strerror(-rc));
        hp_buf_free(&b);
        return rc;
    }
    hp_buf_init(&out, 0);
    for (const char *p = b.data, *end = b.data + b.len; p && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n && p[0] != '#' && (valid_root_line(p, n) || !skip_bad)) {
            if (!valid_root_line(p, n)) {
                hp_seterr(err, errlen, "%s/%s: \"%.*s\" is not an absolute path",
                          HP_JOURNAL_DIR, file, (int)(n > 200 ? 200 : n), p);
                hp_buf_free(&b);
                hp_buf_free(&out);
                return -EBADMSG;
            }
            (void)hp_buf_append(&out, p, n);
            (void)hp_buf_append(&out, "", 1);
        }
        p += n + 1;
    }
    hp_buf_free(&b);
    if (out.len) {
        (void)hp_buf_append(&out, "", 1);
        *packed = hp_buf_steal(&out);
    }
    hp_buf_free(&out);
    return 0;
}

static int path_list_write(int jfd, const char *file, const char *header, const char *packed,
                           char *err, size_t errlen)
{
    struct hp_buf b;
    int rc;

    hp_buf_init(&b, 0);
    (void)hp_buf_appends(&b, header);
    for (const char *p = packed; p && *p; p += strlen(p) + 1) {
        if (!valid_root_line(p, strlen(p)) || strchr(p, '\n'))
            continue;
        (void)hp_buf_printf(&b, "%s\n", p);
    }
    rc = replace_file(jfd, file, b.data, b.len, 0);
    if (rc < 0)
        hp_seterr(err, errlen, "write %s/%s: %s", HP_JOURNAL_DIR, file, strerror(-rc));
    hp_buf_free(&b);
    return rc;
}

int hp_journal_lists_equal(const char *a, const char *b)
{
    for (; a && *a && b && *b; a += strlen(a) + 1, b += strlen(b) + 1)
        if (strcmp(a, b) != 0)
            return 0;
    return !(a && *a) && !(b && *b);
}

int hp_journal_roots_read(int jfd, char **packed, char *err, size_t errlen)
{
    return path_list_read(jfd, ROOTS_FILE, 0, packed, err, errlen);
}

int hp_journal_roots_write(int jfd, const char *packed, char *err, size_t errlen)
{
    return path_list_write(
        jfd, ROOTS_FILE,
        "# The volume paths this node's hostpath-provisioner uses, and those it no longer\n"
        "# uses that still hold volumes (retired): read at start so that their volumes\n"
        "# are still released as recorded. Remove a line to forget a path for good.\n",
        packed, err, errlen);
}

int hp_journal_seen_read(int jfd, char **packed, char *err, size_t errlen)
{
    /* Hand-edited, as its header invites: a bad line must not make the path unreadable. */
    return path_list_read(jfd, SEEN_FILE, 1, packed, err, errlen);
}

int hp_journal_seen_write(int jfd, const char *packed, char *err, size_t errlen)
{
    return path_list_write(
        jfd, SEEN_FILE,
        "# The volume paths of this node whose ownership journal hostpath-provisioner has\n"
        "# seen. A path listed here that shows no journal is a disk that is not mounted:\n"
        "# it takes no new volume until its journal is back. If its disk was replaced on\n"
        "# purpose, remove its line from this file under every volume path.\n",
        packed, err, errlen);
}
