/* Unit tests for journal: the record format (round trip, escaping, every parse error) and the
 * crash-consistent record files in a temporary volume root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/journal.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

/* A record with every field set, optional ones included. */
static void full_record(struct hp_record *r)
{
    static const char parents[] = "a\0" "a/b\0";
    memset(r, 0, sizeof(*r));
    r->path = hp_xstrdup("a/b/ns-data-pvc-1");
    r->pv = hp_xstrdup("pvc-1");
    r->claim_uid = hp_xstrdup("0c6b1f2e-uid");
    r->claim_namespace = hp_xstrdup("ns");
    r->claim_name = hp_xstrdup("data");
    r->class_name = hp_xstrdup("fast");
    r->identity = hp_xstrdup("node-a");
    r->on_delete = HP_ON_DELETE_ARCHIVE;
    r->state = HP_REC_ARCHIVED;
    r->dev = 2049;
    r->fsid = 0xdeadbeef12345678ULL;
    r->inode = 123456789;
    r->parents = hp_xmalloc(sizeof(parents));
    memcpy(r->parents, parents, sizeof(parents)); /* "a\0a/b\0\0" */
    r->archived_as = hp_xstrdup("archived/archived-ns-data-pvc-1-20260101T000000Z");
    r->adopted_from = hp_xstrdup("pvc-0");
    r->migrated = 1;
    r->project_id = 1000007;
    r->updated = 1764000000; /* 2025-11-24T16:00:00Z */
}

static int str_eq_null(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static size_t packed_len(const char *p)
{
    const char *s = p;
    if (!p)
        return 0;
    while (*s)
        s += strlen(s) + 1;
    return (size_t)(s - p) + 1;
}

static void assert_record_equal(const struct hp_record *a, const struct hp_record *b)
{
    assert_true(str_eq_null(a->path, b->path));
    assert_true(str_eq_null(a->pv, b->pv));
    assert_true(str_eq_null(a->claim_uid, b->claim_uid));
    assert_true(str_eq_null(a->claim_namespace, b->claim_namespace));
    assert_true(str_eq_null(a->claim_name, b->claim_name));
    assert_true(str_eq_null(a->class_name, b->class_name));
    assert_true(str_eq_null(a->identity, b->identity));
    assert_int_equal(a->on_delete, b->on_delete);
    assert_int_equal(a->state, b->state);
    assert_true(a->dev == b->dev);
    assert_true(a->fsid == b->fsid);
    assert_true(a->inode == b->inode);
    assert_int_equal(packed_len(a->parents), packed_len(b->parents));
    if (a->parents)
        assert_memory_equal(a->parents, b->parents, packed_len(a->parents));
    assert_true(str_eq_null(a->archived_as, b->archived_as));
    assert_true(str_eq_null(a->adopted_from, b->adopted_from));
    assert_int_equal(a->migrated, b->migrated);
    assert_int_equal(a->project_id, b->project_id);
    assert_true(a->updated == b->updated);
}

/* ---- names ---- */

static void test_names(void **state)
{
    static const char *const od[] = {"delete", "retain", "archive"};
    static const char *const st[] = {"creating", "created", "deleting", "retained", "archived"};
    enum hp_on_delete d;
    (void)state;

    for (size_t i = 0; i < N_CASES(od); i++) {
        assert_string_equal(hp_on_delete_name((enum hp_on_delete)i), od[i]);
        assert_int_equal(hp_on_delete_parse(od[i], &d), 0);
        assert_int_equal(d, (enum hp_on_delete)i);
    }
    for (size_t i = 0; i < N_CASES(st); i++)
        assert_string_equal(hp_record_state_name((enum hp_record_state)i), st[i]);
    assert_string_equal(hp_on_delete_name((enum hp_on_delete)7), "unknown");
    assert_string_equal(hp_record_state_name((enum hp_record_state)7), "unknown");
    d = HP_ON_DELETE_RETAIN;
    assert_int_equal(hp_on_delete_parse("Delete", &d), -EINVAL);
    assert_int_equal(hp_on_delete_parse("", &d), -EINVAL);
    assert_int_equal(hp_on_delete_parse(NULL, &d), -EINVAL);
    assert_int_equal(d, HP_ON_DELETE_RETAIN); /* untouched on failure */
}

struct name_case {
    const char *name;
    int want;
};

static void test_valid_name(void **state)
{
    static char max[254], over[255];
    memset(max, 'a', 253);
    memset(over, 'a', 254);
    const struct name_case cases[] = {
        {"pvc-0c6b1f2e-1111-2222-3333-444455556666", 1},
        {"a", 1},
        {"0", 1},
        {"a.b-c", 1},
        {"x.", 1},
        {max, 1},
        {over, 0},
        {"", 0},
        {NULL, 0},
        {".x", 0},
        {".", 0},
        {"..", 0},
        {".tmp-pvc-1", 0}, /* a temporary file's name is never a record's */
        {"A", 0},
        {"pvc_1", 0},
        {"a/b", 0},
        {"a b", 0},
        {"a\n", 0},
        {"caf\xc3\xa9", 0},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++)
        if (hp_journal_valid_name(cases[i].name) != cases[i].want)
            fail_msg("case %zu (%.40s): want %d", i, cases[i].name ? cases[i].name : "NULL",
                     cases[i].want);
}

/* ---- format and parse ---- */

static void test_round_trip(void **state)
{
    struct hp_record r, back;
    struct hp_buf b, b2;
    char err[256] = "";
    (void)state;

    full_record(&r);
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&r, &b), 0);
    assert_non_null(strstr(b.data, "\nversion=1\n"));
    assert_non_null(strstr(b.data, "\npv=pvc-1\n"));
    assert_non_null(strstr(b.data, "\nstate=archived\n"));
    assert_non_null(strstr(b.data, "\nonDelete=archive\n"));
    assert_non_null(strstr(b.data, "\nparent=a\nparent=a/b\n"));
    assert_non_null(strstr(b.data, "\nfsid=deadbeef12345678\n"));
    assert_non_null(strstr(b.data, "\nmigrated=true\n"));
    assert_non_null(strstr(b.data, "\nprojectID=1000007\n"));
    assert_non_null(strstr(b.data, "\nupdated=2025-11-24T16:00:00Z\n"));
    assert_int_equal(b.data[0], '#'); /* an operator's cat shows what the file is */
    assert_int_equal(b.data[b.len - 1], '\n');

    assert_int_equal(hp_record_parse(b.data, b.len, &back, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_record_equal(&r, &back);

    /* Formatting what was parsed gives the same text. */
    hp_buf_init(&b2, 0);
    assert_int_equal(hp_record_format(&back, &b2), 0);
    assert_string_equal(b.data, b2.data);

    hp_buf_free(&b);
    hp_buf_free(&b2);
    hp_record_free(&back);
    hp_record_free(&r);
}

static void test_round_trip_minimal(void **state)
{
    struct hp_record r, back;
    struct hp_buf b;
    (void)state;

    /* Optional fields absent: no parent, archivedAs, adoptedFrom or migrated line. */
    memset(&r, 0, sizeof(r));
    r.path = "p";
    r.pv = "pvc-2";
    r.claim_uid = "u";
    r.state = HP_REC_CREATING;
    r.on_delete = HP_ON_DELETE_RETAIN;
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&r, &b), 0);
    assert_null(strstr(b.data, "parent="));
    assert_null(strstr(b.data, "archivedAs="));
    assert_null(strstr(b.data, "adoptedFrom="));
    assert_null(strstr(b.data, "migrated="));
    assert_null(strstr(b.data, "projectID="));
    assert_int_equal(hp_record_parse(b.data, b.len, &back, NULL, 0), 0);
    assert_string_equal(back.path, "p");
    assert_string_equal(back.pv, "pvc-2");
    assert_int_equal(back.state, HP_REC_CREATING);
    assert_int_equal(back.on_delete, HP_ON_DELETE_RETAIN);
    assert_null(back.parents);
    assert_null(back.archived_as);
    assert_null(back.adopted_from);
    assert_int_equal(back.migrated, 0);
    assert_int_equal(back.project_id, 0);
    assert_true(back.updated == 0);
    hp_record_free(&back);
    hp_buf_free(&b);
}

static void test_format_requires(void **state)
{
    struct hp_record r;
    struct hp_buf b;
    (void)state;

    memset(&r, 0, sizeof(r));
    r.path = "p";
    r.pv = "pvc-1";
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&r, &b), -EINVAL); /* no claim uid */
    r.claim_uid = "u";
    r.path = NULL;
    assert_int_equal(hp_record_format(&r, &b), -EINVAL);
    r.path = "p";
    r.pv = NULL;
    assert_int_equal(hp_record_format(&r, &b), -EINVAL);
    hp_buf_free(&b);
}

static void test_escaping(void **state)
{
    struct hp_record r, back;
    struct hp_buf b;
    char err[256];
    (void)state;

    full_record(&r);
    free(r.claim_name);
    free(r.class_name);
    free(r.identity);
    /* A value can never span lines or be misread: '%', control bytes and DEL are escaped;
     * '=', '#' and UTF-8 are kept as they are. */
    r.claim_name = hp_xstrdup("a\nb%c\x01" "d\x7f" "e=f\r");
    r.class_name = hp_xstrdup("#not-a-comment");
    r.identity = hp_xstrdup("n\xc3\xb6" "de\t%41");
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&r, &b), 0);
    assert_non_null(strstr(b.data, "\nclaimName=a%0Ab%25c%01d%7Fe=f%0D\n"));
    assert_non_null(strstr(b.data, "\nclass=#not-a-comment\n"));
    assert_non_null(strstr(b.data, "\nidentity=n\xc3\xb6" "de%09%2541\n"));
    assert_int_equal(hp_record_parse(b.data, b.len, &back, err, sizeof(err)), 0);
    assert_record_equal(&r, &back);
    hp_record_free(&back);
    hp_record_free(&r);
    hp_buf_free(&b);
}

static void test_parse_accepts(void **state)
{
    /* Comments, blank lines, keys of a newer version (ignored), values holding '=', plain
     * seconds for updated, lower-case escapes and a last line without its newline. */
    static const char text[] = "# comment\n"
                               "\n"
                               "version=1\n"
                               "futureKey=from a newer version\n"
                               "newer.key=x=y\n"
                               "pv=pvc-1\n"
                               "path=p/q\n"
                               "state=created\n"
                               "onDelete=delete\n"
                               "claimUID=u\n"
                               "device=7\n"
                               "fsid=0\n"
                               "class=a=b\n"
                               "updated=1700000000\n"
                               "claimName=%41%62%2f";
    struct hp_record r;
    char err[256] = "";
    (void)state;

    assert_int_equal(hp_record_parse(text, strlen(text), &r, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_string_equal(r.pv, "pvc-1");
    assert_string_equal(r.path, "p/q");
    assert_int_equal(r.state, HP_REC_CREATED);
    assert_int_equal(r.on_delete, HP_ON_DELETE_DELETE);
    assert_true(r.dev == 7);
    assert_true(r.fsid == 0);
    assert_true(r.updated == 1700000000);
    assert_string_equal(r.class_name, "a=b");
    assert_string_equal(r.claim_name, "Ab/");
    assert_null(r.claim_namespace); /* absent optional strings stay NULL */
    hp_record_free(&r);
}

struct bad_case {
    const char *text; /* appended to the base record, or replacing the line of the same key */
    const char *err_has;
};

/* A valid record, one key per line, in the order of `keys`. */
static const char *const base_lines[] = {
    "version=1",   "pv=pvc-1",   "path=a/b", "state=created", "onDelete=delete",
    "claimUID=u1", "device=5",
};

/* Builds the base record with the line of key `drop` left out (NULL: none) and `extra`
 * appended. */
static size_t build(char *out, size_t outlen, const char *drop, const char *extra)
{
    size_t len = 0;
    for (size_t i = 0; i < N_CASES(base_lines); i++) {
        size_t k = strcspn(base_lines[i], "=");
        if (drop && strlen(drop) == k && strncmp(base_lines[i], drop, k) == 0)
            continue;
        len += (size_t)snprintf(out + len, outlen - len, "%s\n", base_lines[i]);
    }
    len += (size_t)snprintf(out + len, outlen - len, "%s", extra ? extra : "");
    return len;
}

static void expect_bad(const char *text, size_t len, const char *err_has, size_t i)
{
    struct hp_record r;
    char err[512] = "";

    memset(&r, 0x5a, sizeof(r));
    int rc = hp_record_parse(text, len, &r, err, sizeof(err));
    if (rc == 0)
        hp_record_free(&r); /* wrongly accepted: free it before failing */
    if (rc != -EBADMSG || !strstr(err, err_has))
        fail_msg("case %zu: rc=%d err=\"%s\", want -EBADMSG and \"%s\"", i, rc, err, err_has);
    /* A failed parse leaves nothing to free. */
    assert_null(r.pv);
    assert_null(r.path);
    assert_null(r.parents);
}

static void test_parse_missing(void **state)
{
    static const char *const required[] = {"version", "pv",       "path",  "state",
                                           "onDelete", "claimUID", "device"};
    char text[1024], want[64];
    (void)state;

    /* Each required key, left out alone, is named. */
    for (size_t i = 0; i < N_CASES(required); i++) {
        size_t len = build(text, sizeof(text), required[i], NULL);
        snprintf(want, sizeof(want), "missing key %s", required[i]);
        expect_bad(text, len, want, i);
    }
    /* ... and the base itself parses. */
    struct hp_record r;
    size_t len = build(text, sizeof(text), NULL, NULL);
    assert_int_equal(hp_record_parse(text, len, &r, NULL, 0), 0);
    hp_record_free(&r);
}

static void test_parse_bad_values(void **state)
{
    static const struct bad_case cases[] = {
        {"state=created\n", "key state repeated"},
        {"pv=pvc-1\n", "key pv repeated"},
        {"migrated=true\nmigrated=true\n", "key migrated repeated"},
        {"claimName=a\nclaimName=b\n", "key claimName repeated"},
        {"onDelete=delete\n", "key onDelete repeated"},
        {"device=5\n", "key device repeated"},
        {"garbage\n", "line without key=value"},
        {"=value\n", "line without key=value"},
        {"inode=abc\n", "bad value \"abc\" for inode"},
        {"inode=-1\n", "for inode"},
        {"inode=+1\n", "for inode"},
        {"inode=\n", "for inode"},
        {"inode=12x\n", "for inode"},
        {"inode=99999999999999999999999\n", "for inode"},
        {"fsid=xyz\n", "for fsid"},
        {"fsid=12345678123456781\n", "for fsid"},
        {"migrated=yes\n", "bad value \"yes\" for migrated"},
        {"projectID=0\n", "bad value \"0\" for projectID"},
        {"projectID=4294967295\n", "for projectID"},
        {"projectID=-3\n", "for projectID"},
        {"projectID=12a\n", "for projectID"},
        {"projectID=7\nprojectID=7\n", "key projectID repeated"},
        {"updated=yesterday\n", "for updated"},
        {"updated=2026-13-45T99:00:00Z\n", "for updated"},
        {"updated=99999999999999999999\n", "for updated"},
        {"claimName=%4\n", "bad escape in the value of claimName"},
        {"claimName=%\n", "bad escape"},
        {"claimName=a%zzb\n", "bad escape"},
        {"claimName=a%4g\n", "bad escape"},
        {"claimName=%00\n", "bad escape"},
        {"parent=/etc\n", "unsafe parent path"},
        {"parent=a\nparent=../../x\n", "unsafe parent path"},
        {"archivedAs=../x\n", "unsafe path"},
        {"archivedAs=/abs\n", "unsafe path"},
        {"version=2\n", "key version repeated"},
    };
    char text[1024];
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        size_t len = build(text, sizeof(text), NULL, cases[i].text);
        expect_bad(text, len, cases[i].err_has, i);
    }
}

/* Cases that replace one line of the base: key to drop, then its bad line. */
struct replace_case {
    const char *key;
    const char *line;
    const char *err_has;
};

static void test_parse_bad_required(void **state)
{
    static const struct replace_case cases[] = {
        {"state", "state=gone\n", "bad value \"gone\" for state"},
        {"state", "state=Created\n", "for state"},
        {"state", "state=\n", "for state"},
        {"state", "state=archived\n", "state archived without archivedAs"},
        {"state", "state=archived\narchivedAs=../x\n", "unsafe path"},
        {"onDelete", "onDelete=Delete\n", "bad value \"Delete\" for onDelete"},
        {"onDelete", "onDelete=recycle\n", "for onDelete"},
        {"device", "device=12x\n", "bad value \"12x\" for device"},
        {"device", "device=-1\n", "for device"},
        {"device", "device=\n", "for device"},
        {"device", "device=0x10\n", "for device"},
        {"version", "version=2\n", "version 2 is newer"},
        {"version", "version=99999\n", "newer than this provisioner's (1)"},
        {"version", "version=one\n", "for version"},
        {"pv", "pv=PVC-1\n", "pv \"PVC-1\" is not a PersistentVolume name"},
        {"pv", "pv=.tmp-pvc-1\n", "is not a PersistentVolume name"},
        {"pv", "pv=a/b\n", "is not a PersistentVolume name"},
        {"pv", "pv=\n", "is not a PersistentVolume name"},
        {"pv", "pv=%2E%2E\n", "is not a PersistentVolume name"},
        {"path", "path=../x\n", "unsafe path"},
        {"path", "path=/abs\n", "unsafe path"},
        {"path", "path=a/../b\n", "unsafe path"},
        {"path", "path=a//b\n", "unsafe path"},
        {"path", "path=.\n", "unsafe path"},
        {"path", "path=\n", "unsafe path"},
        {"path", "path=a%0Ab\n", "unsafe path"},
        {"path", "path=%2E%2E/x\n", "unsafe path"},
    };
    char text[1024];
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        size_t len = build(text, sizeof(text), cases[i].key, cases[i].line);
        expect_bad(text, len, cases[i].err_has, i);
    }
}

static void test_parse_empty_parent(void **state)
{
    /* An empty parent is an unsafe path like any other ("" is not a directory below the root),
     * not a value to drop silently. */
    static const struct bad_case cases[] = {
        {"parent=\n", "unsafe parent path"},
        {"parent=a\nparent=\n", "unsafe parent path"},
    };
    char text[1024];
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        size_t len = build(text, sizeof(text), NULL, cases[i].text);
        expect_bad(text, len, cases[i].err_has, i);
    }
}

static void test_parse_nul(void **state)
{
    char text[1024];
    (void)state;

    /* A NUL byte inside a line (a torn or binary file) is refused, wherever it is. */
    size_t len = build(text, sizeof(text), "claimUID", "claimUID=u");
    text[len++] = '\0';
    text[len++] = 'x';
    text[len++] = '\n';
    expect_bad(text, len, "NUL byte", 0);

    len = build(text, sizeof(text), NULL, "claimName=");
    text[len++] = '\0';
    text[len++] = '\n';
    expect_bad(text, len, "NUL byte", 1);

    /* Empty input: every required key is missing. */
    expect_bad("", 0, "missing key", 2);
}

static void test_copy(void **state)
{
    struct hp_record r, c;
    (void)state;

    full_record(&r);
    hp_record_copy(&c, &r);
    /* A deep copy: nothing shared with the source, which is then gone. */
    assert_ptr_not_equal(c.path, r.path);
    assert_ptr_not_equal(c.parents, r.parents);
    assert_ptr_not_equal(c.archived_as, r.archived_as);
    struct hp_record keep;
    full_record(&keep);
    hp_record_free(&r);
    assert_null(r.pv);
    assert_record_equal(&keep, &c);
    hp_record_free(&keep);
    hp_record_free(&c);
}

/* ---- files ---- */

struct root {
    char dir[64];
    int fd;
};

static int root_setup(void **state)
{
    struct root *rt = hp_xcalloc(1, sizeof(*rt));
    snprintf(rt->dir, sizeof(rt->dir), "/tmp/hp-test-journal-XXXXXX");
    assert_non_null(mkdtemp(rt->dir));
    rt->fd = open(rt->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rt->fd >= 0);
    *state = rt;
    return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

static int root_teardown(void **state)
{
    struct root *rt = *state;
    (void)close(rt->fd);
    /* The directory is ours (mkdtemp) and holds only what the test made; symlinks in it are
     * removed, not followed (FTW_PHYS). */
    int rc = nftw(rt->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    free(rt);
    return rc;
}

static mode_t mode_at(int dirfd, const char *name)
{
    struct stat st;
    assert_int_equal(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
    return st.st_mode;
}

static void test_open(void **state)
{
    struct root *rt = *state;
    mode_t old = umask(022);

    assert_int_equal(hp_journal_open(rt->fd, 0), -ENOENT);
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);
    /* Private: the records and staged volumes are nobody else's business. */
    assert_int_equal(mode_at(rt->fd, HP_JOURNAL_DIR), S_IFDIR | 0700);
    assert_int_equal(mode_at(jfd, "records"), S_IFDIR | 0700);
    assert_int_equal(mode_at(jfd, "staging"), S_IFDIR | 0700);
    (void)close(jfd);

    /* Opening again, with or without create, finds the same journal. */
    jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);
    (void)close(jfd);
    jfd = hp_journal_open(rt->fd, 0);
    assert_true(jfd >= 0);
    (void)close(jfd);
    umask(old);
}

/* The roots and journals files: absolute paths one per line, comments skipped, read back as
 * written; a line that is not an absolute path makes the roots file unreadable (never
 * half-read), and is left out of the journals file (hand-edited: a path must stay readable). */
static void test_path_lists(void **state)
{
    struct root *rt = *state;
    char err[256], *packed = NULL;
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    assert_int_equal(hp_journal_roots_read(jfd, &packed, err, sizeof(err)), 0);
    assert_null(packed); /* absent */
    assert_int_equal(hp_journal_seen_read(jfd, &packed, err, sizeof(err)), 0);
    assert_null(packed);
    assert_int_equal(hp_journal_seen_write(jfd, "/a\0/b c\0relative\0", err, sizeof(err)), 0);
    assert_int_equal(hp_journal_roots_write(jfd, "/r\0", err, sizeof(err)), 0);
    assert_int_equal(hp_journal_seen_read(jfd, &packed, err, sizeof(err)), 0);
    assert_non_null(packed);
    assert_memory_equal(packed, "/a\0/b c\0\0", 9); /* the relative one was never written */
    free(packed);
    assert_int_equal(hp_journal_roots_read(jfd, &packed, err, sizeof(err)), 0);
    assert_memory_equal(packed, "/r\0\0", 4); /* each file its own list */
    free(packed);

    const char *bad = "# a comment\n/ok\nnot/absolute\n";
    for (int i = 0; i < 2; i++) {
        int fd = openat(jfd, i ? "journals" : "roots", O_WRONLY | O_TRUNC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
        (void)close(fd);
    }
    packed = NULL;
    assert_int_equal(hp_journal_roots_read(jfd, &packed, err, sizeof(err)), -EBADMSG);
    assert_null(packed);
    assert_non_null(strstr(err, "roots: \"not/absolute\" is not an absolute path"));
    assert_int_equal(hp_journal_seen_read(jfd, &packed, err, sizeof(err)), 0);
    assert_non_null(packed);
    assert_memory_equal(packed, "/ok\0\0", 5);
    free(packed);
    (void)close(jfd);
}

static void test_open_refuses_impostors(void **state)
{
    struct root *rt = *state;
    (void)state;

    /* A symlink in place of the journal is never followed, with or without create. */
    assert_int_equal(mkdirat(rt->fd, "elsewhere", 0700), 0);
    assert_int_equal(symlinkat("elsewhere", rt->fd, HP_JOURNAL_DIR), 0);
    int rc = hp_journal_open(rt->fd, 1);
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    rc = hp_journal_open(rt->fd, 0);
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    assert_int_equal(faccessat(rt->fd, "elsewhere/records", F_OK, 0), -1); /* nothing made */

    /* A regular file in its place. */
    assert_int_equal(unlinkat(rt->fd, HP_JOURNAL_DIR, 0), 0);
    int fd = openat(rt->fd, HP_JOURNAL_DIR, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    (void)close(fd);
    assert_int_equal(hp_journal_open(rt->fd, 1), -ENOTDIR);
    assert_int_equal(hp_journal_open(rt->fd, 0), -ENOTDIR);

    /* A symlink in place of records: the journal opens without create, but nothing reads or
     * writes through it. */
    assert_int_equal(unlinkat(rt->fd, HP_JOURNAL_DIR, 0), 0);
    assert_int_equal(mkdirat(rt->fd, HP_JOURNAL_DIR, 0700), 0);
    assert_int_equal(symlinkat("../elsewhere", rt->fd, HP_JOURNAL_DIR "/records"), 0);
    rc = hp_journal_open(rt->fd, 1);
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    int jfd = hp_journal_open(rt->fd, 0);
    assert_true(jfd >= 0);
    struct hp_record r;
    memset(&r, 0, sizeof(r));
    r.pv = "pvc-1";
    r.path = "p";
    r.claim_uid = "u";
    char err[256] = "";
    rc = hp_journal_write(jfd, &r, err, sizeof(err));
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    assert_true(err[0] != '\0');
    struct hp_record back;
    memset(&back, 0, sizeof(back));
    rc = hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err));
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    assert_null(back.pv);
    rc = hp_journal_remove(jfd, "pvc-1", 0);
    assert_true(rc == -ELOOP || rc == -ENOTDIR);
    assert_int_equal(faccessat(rt->fd, "elsewhere/pvc-1", F_OK, 0), -1);
    assert_int_equal(faccessat(rt->fd, "elsewhere/.tmp-pvc-1", F_OK, 0), -1);
    (void)close(jfd);
}

/* Names in records/, sorted into one string "a,b,c". */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_dir(int jfd, char *out, size_t outlen)
{
    char *names[64];
    size_t n = 0, len = 0;
    int fd = openat(jfd, "records", O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    DIR *d = fdopendir(fd);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d)) != NULL && n < N_CASES(names);)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            names[n++] = hp_xstrdup(de->d_name);
    (void)closedir(d);
    qsort(names, n, sizeof(names[0]), cmp_str);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(out + len, outlen - len, "%s%s", i ? "," : "", names[i]);
        free(names[i]);
    }
}

static ino_t ino_at(int dirfd, const char *name)
{
    struct stat st;
    assert_int_equal(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
    return st.st_ino;
}

/* The file's bytes (at most len - 1), NUL-terminated; their count. */
static size_t bytes_at(int dirfd, const char *name, char *out, size_t len)
{
    int fd = openat(dirfd, name, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, out, len - 1);
    assert_true(n >= 0);
    out[n] = '\0';
    (void)close(fd);
    return (size_t)n;
}

/* A change of state alone is made in place (same inode, same length), with or without the
 * fdatasync; every mix of old and new 512-byte sectors (a crash in the middle of the write
 * back) parses, with the old or the new state. */
static void test_set_state_in_place(void **state)
{
    struct root *rt = *state;
    struct hp_record r, back;
    char err[512] = "", was[8192], now[8192], mix[8192];
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    full_record(&r);
    free(r.archived_as);
    r.archived_as = NULL;
    /* Long enough that "updated=" lies in the second sector, so that mixes are exercised. */
    free(r.path);
    r.path = hp_xstrdup("a/b/ns-data-pvc-1-with-a-name-long-enough-to-push-the-updated-line-of-"
                        "the-record-past-the-first-five-hundred-and-twelve-bytes-of-the-file");
    r.state = HP_REC_CREATING;
    assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), 0);
    ino_t ino = ino_at(jfd, "records/pvc-1");
    size_t n0 = bytes_at(jfd, "records/pvc-1", was, sizeof(was));
    assert_true(n0 > 512);

    assert_int_equal(hp_journal_set_state(jfd, &r, HP_REC_CREATED, 0, err, sizeof(err)), 0);
    assert_int_equal(r.state, HP_REC_CREATED);
    assert_int_equal(ino_at(jfd, "records/pvc-1"), ino);
    size_t n1 = bytes_at(jfd, "records/pvc-1", now, sizeof(now));
    assert_int_equal(n1, n0);
    assert_non_null(strstr(now, "\nstate=created\n\n"));
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_record_equal(&r, &back);
    hp_record_free(&back);

    for (unsigned m = 0; m < 4; m++) {
        memcpy(mix, was, n0);
        for (unsigned sec = 0; sec < 2; sec++)
            if (m & (1u << sec)) {
                size_t off = sec * 512, k = n0 - off < 512 ? n0 - off : 512;
                memcpy(mix + off, now + off, k);
            }
        struct hp_record p;
        assert_int_equal(hp_record_parse(mix, n0, &p, err, sizeof(err)), 0);
        assert_true(p.state == HP_REC_CREATING || p.state == HP_REC_CREATED);
        assert_int_equal(p.state, (m & 1) ? HP_REC_CREATED : HP_REC_CREATING);
        hp_record_free(&p);
    }

    assert_int_equal(hp_journal_set_state(jfd, &r, HP_REC_DELETING, HP_JOURNAL_SYNC, err,
                                          sizeof(err)),
                     0);
    assert_int_equal(ino_at(jfd, "records/pvc-1"), ino);
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_int_equal(back.state, HP_REC_DELETING);
    hp_record_free(&back);

    /* A file that is not what r formats to (another version's layout: state after path) is
     * written whole: a new inode, the new state, nothing else lost. */
    int rfd = openat(jfd, "records", O_RDONLY | O_DIRECTORY);
    assert_true(rfd >= 0);
    struct hp_buf b;
    hp_buf_init(&b, 0);
    r.state = HP_REC_CREATED;
    assert_int_equal(hp_record_format(&r, &b), 0);
    char *st = strstr(b.data, "state=created\n\n"), *path = strstr(b.data, "\npath=");
    assert_non_null(st);
    assert_non_null(path);
    char *path_end = strchr(path + 1, '\n') + 1;
    int fd = openat(rfd, "pvc-1", O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    /* header..version, pv, path, state (one line), the rest */
    assert_true(write(fd, b.data, (size_t)(st - b.data)) >= 0);
    assert_true(write(fd, st + 15, (size_t)(path_end - (st + 15))) >= 0);
    assert_true(write(fd, "state=created\n", 14) == 14);
    assert_true(write(fd, path_end, strlen(path_end)) >= 0);
    (void)close(fd);
    hp_buf_free(&b);
    hp_record_free(&r);
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &r, err, sizeof(err)), 0);
    ino = ino_at(jfd, "records/pvc-1");
    assert_int_equal(hp_journal_set_state(jfd, &r, HP_REC_DELETING, HP_JOURNAL_SYNC, err,
                                          sizeof(err)),
                     0);
    assert_true(ino_at(jfd, "records/pvc-1") != ino);
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_int_equal(back.state, HP_REC_DELETING);
    assert_string_equal(back.path, r.path);
    assert_int_equal(back.inode, 123456789);
    hp_record_free(&back);

    /* Gone meanwhile: written whole again. */
    assert_int_equal(unlinkat(rfd, "pvc-1", 0), 0);
    assert_int_equal(hp_journal_set_state(jfd, &r, HP_REC_CREATED, 0, err, sizeof(err)), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_int_equal(back.state, HP_REC_CREATED);
    hp_record_free(&back);
    (void)close(rfd);
    hp_record_free(&r);
    (void)close(jfd);
}

static void test_write_read_remove(void **state)
{
    struct root *rt = *state;
    struct hp_record r, back;
    char err[512] = "", names[512];
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    full_record(&r);
    r.updated = 0;
    time_t before = time(NULL);
    assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), 0);
    assert_true(r.updated >= before && r.updated <= time(NULL)); /* stamped by the write */
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_record_equal(&r, &back);
    hp_record_free(&back);
    assert_int_equal(mode_at(jfd, "records/pvc-1"), S_IFREG | 0600);

    /* Replace: the new content, and no temporary file left behind. */
    r.state = HP_REC_RETAINED;
    free(r.claim_name);
    r.claim_name = hp_xstrdup("renamed");
    assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), 0);
    assert_int_equal(back.state, HP_REC_RETAINED);
    assert_string_equal(back.claim_name, "renamed");
    hp_record_free(&back);
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, "pvc-1");

    /* Remove; again is fine; reading then finds nothing. */
    assert_int_equal(hp_journal_remove(jfd, "pvc-1", 0), 0);
    assert_int_equal(hp_journal_remove(jfd, "pvc-1", 0), 0);
    memset(&back, 0, sizeof(back));
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &back, err, sizeof(err)), -ENOENT);
    assert_null(back.pv);
    assert_int_equal(hp_journal_read(jfd, "pvc-never", &back, NULL, 0), -ENOENT);
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, "");

    hp_record_free(&r);
    (void)close(jfd);
}

static void test_write_refuses(void **state)
{
    struct root *rt = *state;
    struct hp_record r;
    char err[512] = "", names[512];
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    memset(&r, 0, sizeof(r));
    r.path = "p";
    r.claim_uid = "u";
    static const char *const bad[] = {NULL, "", "../x", ".tmp-x", "PVC", "a/b"};
    for (size_t i = 0; i < N_CASES(bad); i++) {
        r.pv = (char *)bad[i];
        err[0] = '\0';
        assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "is not a PersistentVolume name"));
        assert_int_equal(hp_journal_read(jfd, bad[i], &r, NULL, 0), -EINVAL);
        assert_int_equal(hp_journal_remove(jfd, bad[i], 0), -EINVAL);
    }
    r.pv = "pvc-1";
    r.claim_uid = NULL;
    assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "lacks a required field"));
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, "");
    (void)close(jfd);
}

static void test_write_longest_name(void **state)
{
    struct root *rt = *state;
    struct hp_record r, back;
    char name[254], err[512] = "";
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    /* hp_journal_valid_name accepts up to 253 bytes (a Kubernetes object name): such a record
     * can be written and read back like any other, whatever its temporary file is called. */
    static const size_t lengths[] = {250, 251, 253};
    for (size_t i = 0; i < N_CASES(lengths); i++) {
        memset(name, 'a', lengths[i]);
        name[lengths[i]] = '\0';
        assert_true(hp_journal_valid_name(name));
        memset(&r, 0, sizeof(r));
        r.pv = name;
        r.path = "p";
        r.claim_uid = "u";
        int rc = hp_journal_write(jfd, &r, err, sizeof(err));
        if (rc != 0)
            fail_msg("write of a %zu-byte pv name: rc=%d (%s)", lengths[i], rc, strerror(-rc));
        assert_int_equal(hp_journal_read(jfd, name, &back, err, sizeof(err)), 0);
        assert_string_equal(back.pv, name);
        hp_record_free(&back);
    }
    (void)close(jfd);
}

static int write_file(int jfd, const char *name, const char *data, size_t len)
{
    char path[300];
    snprintf(path, sizeof(path), "records/%s", name);
    int fd = openat(jfd, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, data, len);
    (void)close(fd);
    return w == (ssize_t)len ? 0 : -1;
}

static void test_read_bad_files(void **state)
{
    struct root *rt = *state;
    struct hp_record r, other;
    struct hp_buf b;
    char err[512] = "";
    int jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);

    /* A record file whose content names another PV is not that PV's record. */
    memset(&other, 0, sizeof(other));
    other.pv = "pvc-other";
    other.path = "p";
    other.claim_uid = "u";
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&other, &b), 0);
    assert_int_equal(write_file(jfd, "pvc-1", b.data, b.len), 0);
    memset(&r, 0, sizeof(r));
    assert_int_equal(hp_journal_read(jfd, "pvc-1", &r, err, sizeof(err)), -EBADMSG);
    assert_non_null(strstr(err, "names pv pvc-other"));
    assert_null(r.pv);

    /* Garbage. */
    assert_int_equal(write_file(jfd, "pvc-2", "hello\n", 6), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-2", &r, err, sizeof(err)), -EBADMSG);
    assert_non_null(strstr(err, "record pvc-2 is not valid"));

    /* Larger than any record can be: refused before parsing. */
    char *big = hp_xmalloc(70000);
    memset(big, '#', 70000);
    assert_int_equal(write_file(jfd, "pvc-3", big, 70000), 0);
    free(big);
    assert_int_equal(hp_journal_read(jfd, "pvc-3", &r, err, sizeof(err)), -EFBIG);
    assert_non_null(strstr(err, "larger than 64 KiB"));

    /* A symlink named like a record is not followed. */
    assert_int_equal(symlinkat("pvc-1", jfd, "records/pvc-4"), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-4", &r, err, sizeof(err)), -ELOOP);

    /* A FIFO named like a record (no writer: a blocking open would wait for ever, and every
     * start and SIGTERM with it) is refused at once, and so is a directory. */
    assert_int_equal(mkfifoat(jfd, "records/pvc-5", 0600), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-5", &r, err, sizeof(err)), -EBADMSG);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(mkdirat(jfd, "records/pvc-6", 0700), 0);
    assert_int_equal(hp_journal_read(jfd, "pvc-6", &r, err, sizeof(err)), -EBADMSG);

    hp_buf_free(&b);
    (void)close(jfd);
}

/* ---- list ---- */

struct seen {
    char name[64];
    int status;
    char pv[64];
    char reason[256];
};

struct list_result {
    struct seen s[32];
    size_t n;
};

static void on_record(const char *name, int status, const struct hp_record *r, const char *reason,
                      void *data)
{
    struct list_result *l = data;
    assert_true(l->n < N_CASES(l->s));
    struct seen *s = &l->s[l->n++];
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->status = status;
    /* A record comes with status 0, a reason with a failure: never both, never neither. */
    assert_true((status == 0) == (r != NULL));
    snprintf(s->pv, sizeof(s->pv), "%s", r ? r->pv : "");
    snprintf(s->reason, sizeof(s->reason), "%s", reason ? reason : "");
    if (status != 0)
        assert_true(reason && reason[0]);
}

static const struct seen *find_seen(const struct list_result *l, const char *name)
{
    const struct seen *found = NULL;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->s[i].name, name) == 0) {
            assert_null(found); /* each file once */
            found = &l->s[i];
        }
    }
    return found;
}

static void test_list(void **state)
{
    struct root *rt = *state;
    struct list_result l;
    struct hp_record r;
    struct hp_buf b;
    char err[512] = "", names[512];
    int jfd;

    /* A journal without its records directory lists nothing. */
    assert_int_equal(mkdirat(rt->fd, HP_JOURNAL_DIR, 0700), 0);
    jfd = hp_journal_open(rt->fd, 0);
    assert_true(jfd >= 0);
    memset(&l, 0, sizeof(l));
    assert_int_equal(hp_journal_list(jfd, 1, on_record, &l), 0);
    assert_int_equal(l.n, 0);
    (void)close(jfd);

    jfd = hp_journal_open(rt->fd, 1);
    assert_true(jfd >= 0);
    memset(&l, 0, sizeof(l));
    assert_int_equal(hp_journal_list(jfd, 0, on_record, &l), 0);
    assert_int_equal(l.n, 0);

    static const char *const good[] = {"pvc-a", "pvc-b", "pvc-c"};
    for (size_t i = 0; i < N_CASES(good); i++) {
        memset(&r, 0, sizeof(r));
        r.pv = (char *)good[i];
        r.path = (char *)good[i];
        r.claim_uid = "u";
        assert_int_equal(hp_journal_write(jfd, &r, err, sizeof(err)), 0);
    }
    assert_int_equal(write_file(jfd, "pvc-bad", "garbage\n", 8), 0);
    /* A copy of pvc-a's file under another name: it names another PV. */
    memset(&r, 0, sizeof(r));
    r.pv = "pvc-a";
    r.path = "pvc-a";
    r.claim_uid = "u";
    hp_buf_init(&b, 0);
    assert_int_equal(hp_record_format(&r, &b), 0);
    assert_int_equal(write_file(jfd, "pvc-copy", b.data, b.len), 0);
    hp_buf_free(&b);
    /* Leftovers of a crash between create and rename, and a hidden file that is not one. */
    assert_int_equal(write_file(jfd, ".tmp-pvc-d", "half", 4), 0);
    assert_int_equal(write_file(jfd, ".keep", "", 0), 0);

    memset(&l, 0, sizeof(l));
    assert_int_equal(hp_journal_list(jfd, 0, on_record, &l), 0);
    assert_int_equal(l.n, 5); /* hidden files are not records */
    for (size_t i = 0; i < N_CASES(good); i++) {
        const struct seen *s = find_seen(&l, good[i]);
        assert_non_null(s);
        assert_int_equal(s->status, 0);
        assert_string_equal(s->pv, good[i]);
    }
    const struct seen *s = find_seen(&l, "pvc-bad");
    assert_non_null(s);
    assert_int_equal(s->status, -EBADMSG);
    assert_non_null(strstr(s->reason, "pvc-bad is not valid"));
    s = find_seen(&l, "pvc-copy");
    assert_non_null(s);
    assert_int_equal(s->status, -EBADMSG);
    assert_non_null(strstr(s->reason, "record file pvc-copy names pv pvc-a"));
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, ".keep,.tmp-pvc-d,pvc-a,pvc-b,pvc-bad,pvc-c,pvc-copy");

    /* clean_tmp leaves a temporary file young enough to be a write in flight (another
     * thread's, between its write and its rename) ... */
    memset(&l, 0, sizeof(l));
    assert_int_equal(hp_journal_list(jfd, 1, on_record, &l), 0);
    assert_int_equal(l.n, 5);
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, ".keep,.tmp-pvc-d,pvc-a,pvc-b,pvc-bad,pvc-c,pvc-copy");
    /* ... and removes it once it is older: a crash's leftover, and only that. */
    struct timespec old[2] = {{.tv_sec = time(NULL) - HP_JOURNAL_TMP_STALE_S - 5},
                              {.tv_sec = time(NULL) - HP_JOURNAL_TMP_STALE_S - 5}};
    assert_int_equal(utimensat(jfd, "records/.tmp-pvc-d", old, AT_SYMLINK_NOFOLLOW), 0);
    memset(&l, 0, sizeof(l));
    assert_int_equal(hp_journal_list(jfd, 1, on_record, &l), 0);
    assert_int_equal(l.n, 5);
    list_dir(jfd, names, sizeof(names));
    assert_string_equal(names, ".keep,pvc-a,pvc-b,pvc-bad,pvc-c,pvc-copy");
    (void)close(jfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_valid_name),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_minimal),
        cmocka_unit_test(test_format_requires),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_parse_accepts),
        cmocka_unit_test(test_parse_missing),
        cmocka_unit_test(test_parse_bad_values),
        cmocka_unit_test(test_parse_bad_required),
        cmocka_unit_test(test_parse_empty_parent),
        cmocka_unit_test(test_parse_nul),
        cmocka_unit_test(test_copy),
        cmocka_unit_test_setup_teardown(test_open, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_path_lists, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_open_refuses_impostors, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_write_read_remove, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_set_state_in_place, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_write_refuses, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_write_longest_name, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_read_bad_files, root_setup, root_teardown),
        cmocka_unit_test_setup_teardown(test_list, root_setup, root_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
