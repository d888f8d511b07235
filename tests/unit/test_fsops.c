/* Unit tests for fsops: the filesystem steps run synchronously on real directories under a
 * mkdtemp root, with the ownership journal they keep.
 *
 * The suite runs twice: the second time with openat2 answering ENOSYS (kernels before 5.6, or a
 * seccomp filter), so the openat(O_NOFOLLOW) + statx fallback is held to the same cases.
 * Mount-based cases (ENOSPC, EROFS, mount points below a volume, an unmounted disk) need root
 * and mount(2); they skip cleanly otherwise and always unmount what they mounted.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/dqblk_xfs.h>
#include <linux/fs.h>

#include <cmocka.h>

#include "hostpath/common.h"
#include "hostpath/fsops.h"
#include "hostpath/journal.h"
#include "hostpath/quota.h"

/* syscall interposer: the module reaches openat2 through syscall(2). */
static atomic_int deny_openat2, openat2_denied;

long syscall(long n, ...)
{
    static long (*real)(long, ...);
    va_list ap;
    long a, b, c, d, e, g;

    if (n == SYS_openat2 && atomic_load(&deny_openat2)) {
        atomic_fetch_add(&openat2_denied, 1);
        errno = ENOSYS;
        return -1;
    }
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "syscall");
    va_start(ap, n);
    a = va_arg(ap, long);
    b = va_arg(ap, long);
    c = va_arg(ap, long);
    d = va_arg(ap, long);
    e = va_arg(ap, long);
    g = va_arg(ap, long);
    va_end(ap);
    return real(n, a, b, c, d, e, g);
}

/* ---- fixture ------------------------------------------------------------------------------ */

#define HP_QUOTA_ID_FIRST_FOR_TESTS 1000000u /* fs_quota.c's HP_QUOTA_ID_FIRST */

static char base_dir[PATH_MAX];
static int test_seq;

struct fx {
    char dir[PATH_MAX]; /* this test's scratch directory */
    char pv[PATH_MAX];  /* the volume root (not created up front) */
    char out[PATH_MAX]; /* a directory outside the root that must survive */
};

static void path_join(char *dst, const char *a, const char *b)
{
    int n = snprintf(dst, PATH_MAX, "%s/%s", a, b);
    assert_true(n > 0 && n < PATH_MAX);
}

static void mkfile(const char *dir, const char *name, const char *content)
{
    char p[PATH_MAX];
    int fd;

    path_join(p, dir, name);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    assert_int_equal(close(fd), 0);
}

static void mkdir_in(const char *dir, const char *name)
{
    char p[PATH_MAX];
    path_join(p, dir, name);
    assert_int_equal(mkdir(p, 0755), 0);
}

static int lexists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    path_join(p, dir, name);
    return lstat(p, &st) == 0;
}

static mode_t mode_of(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    path_join(p, dir, name);
    assert_int_equal(lstat(p, &st), 0);
    return st.st_mode & 07777;
}

static uint64_t inode_of(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    path_join(p, dir, name);
    assert_int_equal(lstat(p, &st), 0);
    return (uint64_t)st.st_ino;
}

static void fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    assert_true(snprintf(f->dir, sizeof(f->dir), "%s/t%d", base_dir, ++test_seq) <
                (int)sizeof(f->dir));
    assert_int_equal(mkdir(f->dir, 0755), 0);
    path_join(f->pv, f->dir, "pv");
    path_join(f->out, f->dir, "outside");
    assert_int_equal(mkdir(f->out, 0755), 0);
    mkfile(f->out, "keep", "precious");
}

static void outside_intact(struct fx *f)
{
    char p[PATH_MAX], buf[32];
    ssize_t n;
    int fd;

    path_join(p, f->out, "keep");
    fd = open(p, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    n = read(fd, buf, sizeof(buf));
    assert_int_equal(close(fd), 0);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "precious", 8);
}

/* The record files of the root's journal. */
static int nrecords(const char *root)
{
    char p[PATH_MAX];
    DIR *d;
    struct dirent *de;
    int n = 0;

    path_join(p, root, HP_JOURNAL_DIR "/records");
    d = opendir(p);
    if (!d)
        return 0;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    assert_int_equal(closedir(d), 0);
    return n;
}

static int read_rec(const char *root, const char *pv, struct hp_record *r)
{
    char p[PATH_MAX], err[256];
    int rootfd, jfd, rc;

    rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return -errno;
    jfd = hp_journal_open(rootfd, 0);
    (void)close(rootfd);
    if (jfd < 0)
        return jfd;
    rc = hp_journal_read(jfd, pv, r, err, sizeof(err));
    (void)close(jfd);
    (void)p;
    return rc;
}

/* Rewrites a record as a test wants it (state, parents...). */
static void write_rec(const char *root, struct hp_record *r)
{
    char err[256];
    int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), jfd;
    assert_true(rootfd >= 0);
    jfd = hp_journal_open(rootfd, 1);
    (void)close(rootfd);
    assert_true(jfd >= 0);
    assert_int_equal(hp_journal_write(jfd, r, err, sizeof(err)), 0);
    (void)close(jfd);
}

/* The PV name of volume n of a test. */
static const char *pvn(int n)
{
    static char names[8][32];
    char *s = names[n & 7];
    (void)snprintf(s, 32, "pvc-%04d", n);
    return s;
}

static struct hp_fsop *new_op(enum hp_fsop_kind kind, const char *root, const char *pv,
                              const char *rel)
{
    struct hp_fsop *op = hp_fsop_new(kind, root);
    if (pv)
        op->rec.pv = strdup(pv);
    if (rel)
        op->rec.path = strdup(rel);
    return op;
}

/* Provisions rel for pv (claim uid "uid-<pv>", claim default/<pv>, class c, identity me) with
 * mode; the result is freed unless out is given. Returns the status. */
static int provision_ex(const char *root, const char *rel, const char *pv, mode_t mode,
                        uid_t uid, gid_t gid, int set_owner, const char *adopt,
                        struct hp_fsop **out)
{
    char u[64];
    struct hp_fsop *op = new_op(HP_FSOP_PROVISION, root, pv, rel);
    int rc;

    (void)snprintf(u, sizeof(u), "uid-%s", pv ? pv : ""); /* never NULL: for -Wformat */
    op->rec.claim_uid = strdup(u);
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup(pv);
    op->rec.class_name = strdup("c");
    op->rec.identity = strdup("me");
    op->rec.on_delete = HP_ON_DELETE_DELETE;
    op->mode = mode;
    op->uid = uid;
    op->gid = gid;
    op->set_owner = set_owner;
    op->create_root = 1;
    op->adopt = adopt ? strdup(adopt) : NULL;
    hp_fsop_run(op);
    rc = op->status;
    if (rc == 0) {
        assert_int_equal(op->have_out, 1);
        assert_int_equal(op->out.state, HP_REC_CREATED);
    } else {
        assert_true(op->msg[0] != '\0');
    }
    if (out)
        *out = op;
    else
        hp_fsop_free(op);
    return rc;
}

static int provision(const char *root, const char *rel, const char *pv, mode_t mode)
{
    return provision_ex(root, rel, pv, mode, (uid_t)-1, (gid_t)-1, 0, NULL, NULL);
}

/* Runs a release; msg (may be NULL) receives the message. */
static int release(const char *root, const char *pv, const char *rel, enum hp_on_delete action,
                   char *msg, size_t msglen)
{
    struct hp_fsop *op = new_op(HP_FSOP_RELEASE, root, pv, rel);
    int rc;
    op->action = action;
    hp_fsop_run(op);
    rc = op->status;
    if (msg)
        (void)snprintf(msg, msglen, "%s", op->msg);
    hp_fsop_free(op);
    return rc;
}

static int run_simple(enum hp_fsop_kind kind, const char *root, const char *pv, char *msg,
                      size_t msglen)
{
    struct hp_fsop *op = new_op(kind, root, pv, NULL);
    int rc;
    if (kind == HP_FSOP_CLEANUP) {
        char u[300];
        (void)snprintf(u, sizeof(u), "uid-%s", pv);
        op->rec.claim_uid = strdup(u);
    }
    hp_fsop_run(op);
    rc = op->status;
    if (msg)
        (void)snprintf(msg, msglen, "%s", op->msg);
    hp_fsop_free(op);
    return rc;
}

/* ---- provisioning ------------------------------------------------------------------------- */

static void test_create_mode_ignores_umask(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    char want[PATH_MAX];
    mode_t old = umask(022);

    (void)state;
    fx_open(&f);
    assert_int_equal(provision_ex(f.pv, "vol", pvn(1), 0750, -1, -1, 0, NULL, &op), 0);
    path_join(want, f.pv, "vol");
    assert_string_equal(op->abs, want);
    assert_string_equal(op->out.path, "vol");
    assert_int_equal(op->out.inode, inode_of(f.pv, "vol"));
    hp_fsop_free(op);
    assert_int_equal(mode_of(f.pv, "vol"), 0750);
    assert_int_equal(provision(f.pv, "open", pvn(2), 0777), 0);
    assert_int_equal(mode_of(f.pv, "open"), 0777);
    assert_int_equal(provision(f.pv, "shared", pvn(3), 02775), 0);
    assert_int_equal(mode_of(f.pv, "shared"), 02775);
    /* The root was missing: created 0755; the journal is private. */
    assert_int_equal(mode_of(f.dir, "pv"), 0755);
    assert_int_equal(mode_of(f.pv, HP_JOURNAL_DIR), 0700);
    assert_int_equal(nrecords(f.pv), 3);
    umask(old);
}

static void test_create_records_everything(void **state)
{
    struct fx f;
    struct hp_record r;
    struct stat st;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "ns/team/vol", pvn(1), 0700), 0);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_string_equal(r.path, "ns/team/vol");
    assert_string_equal(r.pv, pvn(1));
    assert_string_equal(r.claim_uid, "uid-pvc-0001");
    assert_string_equal(r.claim_namespace, "default");
    assert_string_equal(r.class_name, "c");
    assert_string_equal(r.identity, "me");
    assert_int_equal(r.state, HP_REC_CREATED);
    assert_int_equal(r.on_delete, HP_ON_DELETE_DELETE);
    assert_int_equal(stat(f.pv, &st), 0);
    assert_int_equal(r.dev, (uint64_t)st.st_dev);
    assert_int_equal(r.inode, inode_of(f.pv, "ns/team/vol"));
    /* The parents it made are recorded, in order, so that deletion can take them away. */
    assert_non_null(r.parents);
    assert_string_equal(r.parents, "ns");
    assert_string_equal(r.parents + 3, "ns/team");
    assert_int_equal(r.parents[3 + 8], '\0');
    hp_record_free(&r);
    assert_int_equal(mode_of(f.pv, "ns"), 0755);
    assert_int_equal(mode_of(f.pv, "ns/team"), 0755);
    /* A sibling made later does not claim the existing parents. */
    assert_int_equal(provision(f.pv, "ns/team/other", pvn(2), 0755), 0);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    assert_null(r.parents);
    hp_record_free(&r);
    /* Nothing is left in staging. */
    char p[PATH_MAX];
    path_join(p, f.pv, HP_JOURNAL_DIR "/staging");
    DIR *d = opendir(p);
    struct dirent *de;
    int n = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 0);
}

static void test_existing_directory_is_never_taken_over(void **state)
{
    struct fx f;
    char msg[1024], p[PATH_MAX];
    struct hp_record r;

    (void)state;
    fx_open(&f);
    assert_int_equal(mkdir(f.pv, 0755), 0);
    /* An administrator's directory with data and a restrictive mode. */
    mkdir_in(f.pv, "admin");
    path_join(p, f.pv, "admin");
    mkfile(p, "data", "theirs");
    assert_int_equal(chmod(p, 0700), 0);
    struct hp_fsop *op;
    assert_int_equal(provision_ex(f.pv, "admin", pvn(1), 0777, -1, -1, 0, NULL, &op), -EEXIST);
    (void)snprintf(msg, sizeof(msg), "%s", op->msg);
    hp_fsop_free(op);
    assert_non_null(strstr(msg, "already exists"));
    assert_non_null(strstr(msg, "admin"));
    assert_int_equal(mode_of(f.pv, "admin"), 0700); /* not chmod'ed */
    assert_true(lexists(p, "data"));
    /* Nothing of the attempt is left: no record, no staging directory. */
    assert_int_equal(read_rec(f.pv, pvn(1), &r), -ENOENT);
    assert_false(lexists(f.pv, HP_JOURNAL_DIR "/staging/pvc-0001"));
    /* Another volume's directory: the same. */
    assert_int_equal(provision(f.pv, "vol", pvn(2), 0755), 0);
    path_join(p, f.pv, "vol");
    mkfile(p, "mine", "2");
    assert_int_equal(provision(f.pv, "vol", pvn(3), 0777), -EEXIST);
    assert_int_equal(mode_of(f.pv, "vol"), 0755);
    assert_true(lexists(p, "mine"));
    /* A path that contains another volume (its parent exists as a directory): refused too. */
    assert_int_equal(provision(f.pv, "a/b", pvn(4), 0755), 0);
    assert_int_equal(provision(f.pv, "a", pvn(5), 0777), -EEXIST);
    assert_int_equal(mode_of(f.pv, "a"), 0755);
    assert_int_equal(nrecords(f.pv), 2);
}

static void test_retry_is_idempotent(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    char p[PATH_MAX];
    uint64_t ino;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0750), 0);
    ino = inode_of(f.pv, "vol");
    path_join(p, f.pv, "vol");
    mkfile(p, "data", "x");
    assert_int_equal(chmod(p, 0700), 0);
    /* The same PV again (a retry after a crash after "created"): accepted, untouched. */
    assert_int_equal(provision_ex(f.pv, "vol", pvn(1), 0777, -1, -1, 0, NULL, &op), 0);
    assert_int_equal(op->already_done, 1);
    hp_fsop_free(op);
    assert_int_equal(inode_of(f.pv, "vol"), ino);
    assert_int_equal(mode_of(f.pv, "vol"), 0700); /* never chmod'ed again */
    assert_true(lexists(p, "data"));
    /* Another claim with a record of this PV name: refused. */
    struct hp_fsop *o2 = new_op(HP_FSOP_PROVISION, f.pv, pvn(1), "vol");
    o2->rec.claim_uid = strdup("someone-else");
    o2->rec.identity = strdup("me");
    hp_fsop_run(o2);
    assert_int_equal(o2->status, -EEXIST);
    hp_fsop_free(o2);
}

/* The record of an earlier attempt names another path than the one asked for (the class was
 * re-created with another pathPattern between the attempts): refused, naming both, and nothing
 * is made, moved or changed -- whether the earlier attempt finished or was cut short. */
static void test_other_path_than_begun_is_refused(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;
    char want[2 * PATH_MAX + 128];
    uint64_t ino;

    (void)state;
    fx_open(&f);
    for (int creating = 0; creating <= 1; creating++) {
        const char *pv = pvn(1 + creating), *rel = creating ? "half" : "vol";
        assert_int_equal(provision(f.pv, rel, pv, 0750), 0);
        ino = inode_of(f.pv, rel);
        if (creating) { /* cut short after the rename, before "created" */
            assert_int_equal(read_rec(f.pv, pv, &r), 0);
            r.state = HP_REC_CREATING;
            write_rec(f.pv, &r);
            hp_record_free(&r);
        }
        assert_int_equal(provision_ex(f.pv, "elsewhere/x", pv, 0777, -1, -1, 0, NULL, &op),
                         -EEXIST);
        (void)snprintf(want, sizeof(want),
                       "volume %s was begun at %s/%s by an earlier attempt; not making "
                       "%s/elsewhere/x",
                       pv, f.pv, rel, f.pv);
        assert_string_equal(op->msg, want);
        assert_int_equal(op->have_out, 0);
        hp_fsop_free(op);
        assert_false(lexists(f.pv, "elsewhere"));
        assert_int_equal(inode_of(f.pv, rel), ino);
        assert_int_equal(mode_of(f.pv, rel), 0750);
        assert_int_equal(read_rec(f.pv, pv, &r), 0);
        assert_string_equal(r.path, rel);
        assert_int_equal(r.state, creating ? HP_REC_CREATING : HP_REC_CREATED);
        assert_int_equal(r.inode, ino);
        hp_record_free(&r);
        /* Asked again with the path it was begun at: completed (or accepted) as before. */
        assert_int_equal(provision_ex(f.pv, rel, pv, 0777, -1, -1, 0, NULL, &op), 0);
        assert_int_equal(op->already_done, !creating);
        hp_fsop_free(op);
        assert_int_equal(inode_of(f.pv, rel), ino);
    }
    assert_int_equal(nrecords(f.pv), 2);
    outside_intact(&f);
}

/* Simulates a crash between each step of provisioning by building the state it leaves, then
 * checks the retry completes it without taking over anything else. */
static void test_resume_after_crash(void **state)
{
    struct fx f;
    struct hp_record r;
    struct hp_fsop *op;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    /* 1. Staging made, nothing recorded: the staging directory is reused. */
    assert_int_equal(provision(f.pv, "warm", pvn(9), 0755), 0);
    path_join(p, f.pv, HP_JOURNAL_DIR "/staging/pvc-0001");
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(provision(f.pv, "v1", pvn(1), 0750), 0);
    assert_int_equal(mode_of(f.pv, "v1"), 0750);
    assert_false(lexists(f.pv, HP_JOURNAL_DIR "/staging/pvc-0001"));

    /* 2. Recorded "creating", renamed into place, crash before "created": accepted by inode. */
    assert_int_equal(provision(f.pv, "v2", pvn(2), 0750), 0);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    r.state = HP_REC_CREATING;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    assert_int_equal(provision_ex(f.pv, "v2", pvn(2), 0750, -1, -1, 0, NULL, &op), 0);
    assert_int_equal(op->out.state, HP_REC_CREATED);
    hp_fsop_free(op);

    /* 3. "creating" recorded, the directory replaced by someone else's meanwhile: refused, and
     * what was ours (record, staging) goes. */
    assert_int_equal(provision(f.pv, "v3", pvn(3), 0750), 0);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), 0);
    r.state = HP_REC_CREATING;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    path_join(p, f.pv, "v3");
    {
        char aside[PATH_MAX];
        path_join(aside, f.dir, "v3-aside"); /* keeps the old inode busy */
        assert_int_equal(rename(p, aside), 0);
    }
    assert_int_equal(mkdir(p, 0711), 0); /* another inode */
    assert_int_equal(provision(f.pv, "v3", pvn(3), 0777), -EEXIST);
    assert_int_equal(mode_of(f.pv, "v3"), 0711);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), -ENOENT);

    /* 4. "created" but the directory vanished (removed by hand before the PV existed): made
     * again. */
    assert_int_equal(provision(f.pv, "v4", pvn(4), 0750), 0);
    path_join(p, f.pv, "v4");
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(provision(f.pv, "v4", pvn(4), 0750), 0);
    assert_true(lexists(f.pv, "v4"));
    assert_int_equal(read_rec(f.pv, pvn(4), &r), 0);
    assert_int_equal(r.inode, inode_of(f.pv, "v4"));
    hp_record_free(&r);
}

static void test_create_chown(void **state)
{
    struct fx f;
    char p[PATH_MAX];
    struct stat st;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision_ex(f.pv, "mine", pvn(1), 0750, getuid(), getgid(), 1, NULL, NULL),
                     0);
    path_join(p, f.pv, "mine");
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_uid, getuid());
    assert_int_equal(st.st_gid, getgid());
    if (geteuid() == 0) {
        assert_int_equal(provision_ex(f.pv, "theirs", pvn(2), 02750, 12345, 23456, 1, NULL, NULL),
                         0);
        path_join(p, f.pv, "theirs");
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, 12345);
        assert_int_equal(st.st_gid, 23456);
        assert_int_equal(st.st_mode & 07777, 02750); /* mode after owner: bits kept */
    } else {
        assert_int_equal(provision_ex(f.pv, "theirs", pvn(2), 0750, 12345, 23456, 1, NULL, NULL),
                         -EPERM);
    }
}

static void test_create_refuses_symlinks(void **state)
{
    struct fx f;
    char p[PATH_MAX], target[PATH_MAX], msg[1024];
    struct hp_fsop *op;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "ns/x", pvn(1), 0755), 0);
    assert_int_equal(chmod(f.out, 0700), 0);
    /* An intermediate component that is a symlink to outside. */
    path_join(p, f.pv, "link");
    assert_int_equal(symlink(f.out, p), 0);
    assert_int_equal(provision_ex(f.pv, "link/vol", pvn(2), 0777, -1, -1, 0, NULL, &op), -ELOOP);
    (void)snprintf(msg, sizeof(msg), "%s", op->msg);
    hp_fsop_free(op);
    assert_non_null(strstr(msg, "symlink"));
    assert_false(lexists(f.out, "vol"));
    /* The leaf itself a symlink: not replaced, not followed, the target's mode untouched. */
    assert_int_equal(provision(f.pv, "link", pvn(3), 0777), -EEXIST);
    assert_true(lexists(f.pv, "link"));
    assert_int_equal(mode_of(f.dir, "outside"), 0700);
    /* A symlink deeper down, inside an existing directory. */
    path_join(p, f.pv, "ns/deep");
    assert_int_equal(symlink(f.out, p), 0);
    assert_int_equal(provision(f.pv, "ns/deep/x/y", pvn(4), 0777), -ELOOP);
    assert_false(lexists(f.out, "x"));
    /* A dangling symlink is not followed to create its target either. */
    path_join(p, f.pv, "dangling");
    path_join(target, f.out, "created-through-link");
    assert_int_equal(symlink(target, p), 0);
    assert_int_equal(provision(f.pv, "dangling", pvn(5), 0777), -EEXIST);
    assert_false(lexists(f.out, "created-through-link"));
    /* A regular file on the way. */
    mkfile(f.pv, "file", "x");
    assert_int_equal(provision(f.pv, "file/x", pvn(6), 0777), -ENOTDIR);
    outside_intact(&f);
    /* None of the refusals left a record behind. */
    assert_int_equal(nrecords(f.pv), 1);
}

static void test_create_invalid_rel(void **state)
{
    static const char *bad[] = {"../x", "/abs", "a/../b", "a//b", "a/", "", ".", "a\nb",
                                HP_JOURNAL_DIR, HP_JOURNAL_DIR "/records/x"};
    struct fx f;
    size_t i;

    (void)state;
    fx_open(&f);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(provision(f.pv, bad[i], pvn((int)i), 0777), -EINVAL);
    assert_false(lexists(f.dir, "x"));
    assert_false(lexists(f.dir, "pv")); /* nothing even created the root */
    /* A PV name that could not be a file name. */
    assert_int_equal(provision(f.pv, "ok", "../evil", 0777), -EINVAL);
    assert_int_equal(provision(f.pv, "ok", ".hidden", 0777), -EINVAL);
    assert_false(lexists(f.dir, "pv"));
}

static void test_pv_dir_symlink_allowed(void **state)
{
    struct fx f;
    char real[PATH_MAX], link[PATH_MAX];

    (void)state;
    fx_open(&f);
    path_join(real, f.dir, "real");
    path_join(link, f.dir, "pvlink");
    assert_int_equal(mkdir(real, 0755), 0);
    assert_int_equal(symlink(real, link), 0);
    assert_int_equal(provision(link, "v", pvn(1), 0755), 0);
    assert_true(lexists(real, "v"));
    assert_int_equal(release(link, pvn(1), "v", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_false(lexists(real, "v"));
}

/* ---- adoption (reuseRetained) and migration ------------------------------------------------ */

static void test_adopt_retained(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "default/data", pvn(1), 0750), 0);
    path_join(p, f.pv, "default/data");
    mkfile(p, "keep", "old data");
    assert_int_equal(chmod(p, 0700), 0);
    assert_int_equal(release(f.pv, pvn(1), "default/data", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    /* Not retained for another claim name, nor for another class. */
    op = new_op(HP_FSOP_PROVISION, f.pv, pvn(2), "default/data");
    op->rec.claim_uid = strdup("u2");
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup("other");
    op->rec.class_name = strdup("c");
    op->adopt = strdup(pvn(1));
    hp_fsop_run(op);
    assert_int_equal(op->status, -EPERM);
    hp_fsop_free(op);
    /* The same namespace/name/class takes it over: untouched, recorded, old record gone. */
    op = new_op(HP_FSOP_PROVISION, f.pv, pvn(3), "ignored");
    op->rec.claim_uid = strdup("u3");
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup(pvn(1)); /* provision_ex names the claim after its PV */
    op->rec.class_name = strdup("c");
    op->rec.identity = strdup("me");
    op->adopt = strdup(pvn(1));
    op->mode = 0777;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->adopted, 1);
    assert_string_equal(op->out.path, "default/data");
    assert_string_equal(op->out.adopted_from, pvn(1));
    hp_fsop_free(op);
    assert_int_equal(mode_of(f.pv, "default/data"), 0700);
    assert_true(lexists(p, "keep"));
    assert_int_equal(read_rec(f.pv, pvn(1), &r), -ENOENT);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), 0);
    assert_int_equal(r.state, HP_REC_CREATED);
    hp_record_free(&r);
    /* Its PV refused: the directory goes back to retained, never removed. */
    assert_int_equal(run_simple(HP_FSOP_CLEANUP, f.pv, pvn(3), NULL, 0), -EPERM); /* uid-... */
    op = new_op(HP_FSOP_CLEANUP, f.pv, pvn(3), NULL);
    op->rec.claim_uid = strdup("u3");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    hp_fsop_free(op);
    assert_true(lexists(p, "keep"));
    assert_int_equal(read_rec(f.pv, pvn(3), &r), 0);
    assert_int_equal(r.state, HP_REC_RETAINED);
    hp_record_free(&r);
}

static void test_migrate(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    assert_int_equal(mkdir(f.pv, 0755), 0);
    mkdir_in(f.pv, "old");
    path_join(p, f.pv, "old");
    mkfile(p, "data", "legacy");
    op = new_op(HP_FSOP_MIGRATE, f.pv, pvn(1), "old");
    op->rec.claim_uid = strdup("u1");
    op->rec.on_delete = HP_ON_DELETE_RETAIN;
    op->rec.state = HP_REC_CREATED;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    hp_fsop_free(op);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.migrated, 1);
    assert_int_equal(r.inode, inode_of(f.pv, "old"));
    assert_int_equal(r.on_delete, HP_ON_DELETE_RETAIN);
    hp_record_free(&r);
    /* Twice: nothing changes. */
    op = new_op(HP_FSOP_MIGRATE, f.pv, pvn(1), "old");
    op->rec.claim_uid = strdup("u1");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->already_done, 1);
    hp_fsop_free(op);
    /* A missing directory is recorded without an inode; a symlink is refused. */
    op = new_op(HP_FSOP_MIGRATE, f.pv, pvn(2), "gone");
    op->rec.claim_uid = strdup("u2");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->out.inode, 0);
    hp_fsop_free(op);
    path_join(p, f.pv, "sym");
    assert_int_equal(symlink(f.out, p), 0);
    op = new_op(HP_FSOP_MIGRATE, f.pv, pvn(3), "sym");
    op->rec.claim_uid = strdup("u3");
    hp_fsop_run(op);
    assert_int_equal(op->status, -ELOOP);
    hp_fsop_free(op);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), -ENOENT);
}

/* ---- release ------------------------------------------------------------------------------ */

static void populate(struct fx *f, const char *vol)
{
    char p[PATH_MAX], q[PATH_MAX];
    int i;

    mkfile(vol, "a.txt", "a");
    mkdir_in(vol, "d1");
    path_join(p, vol, "d1");
    mkdir_in(p, "d2");
    path_join(p, vol, "d1/d2");
    mkdir_in(p, "d3");
    path_join(p, vol, "d1/d2/d3");
    mkfile(p, "deep.txt", "deep");
    mkdir_in(vol, "empty");
    mkdir_in(vol, "many");
    path_join(p, vol, "many");
    for (i = 0; i < 300; i++) {
        char name[32];
        (void)snprintf(name, sizeof(name), "f%03d", i);
        mkfile(p, name, "m");
    }
    /* A symlink to the outside directory and one to a file there: unlinked, not followed. */
    path_join(p, vol, "to-outside");
    assert_int_equal(symlink(f->out, p), 0);
    path_join(p, vol, "d1/to-keep");
    path_join(q, f->out, "keep");
    assert_int_equal(symlink(q, p), 0);
    /* A hard link to an outside file: the link goes, the file stays. */
    path_join(q, f->out, "hard");
    mkfile(f->out, "hard", "hard");
    path_join(p, vol, "hardlink");
    assert_int_equal(link(q, p), 0);
    /* A fifo (opening it would block) and a read-only directory. */
    path_join(p, vol, "fifo");
    assert_int_equal(mkfifo(p, 0644), 0);
    mkdir_in(vol, "ro");
    path_join(p, vol, "ro");
    mkfile(p, "inner", "i");
    assert_int_equal(chmod(p, 0555), 0);
}

static void test_delete_tree_and_parents(void **state)
{
    struct fx f;
    char vol[PATH_MAX];
    struct hp_record r;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "ns/team/vol", pvn(1), 0777), 0);
    assert_int_equal(provision(f.pv, "ns/other", pvn(2), 0777), 0);
    path_join(vol, f.pv, "ns/team/vol");
    populate(&f, vol);
    if (geteuid() != 0) { /* removing inside a 0555 directory needs CAP_DAC_OVERRIDE */
        char p[PATH_MAX];
        path_join(p, vol, "ro");
        assert_int_equal(chmod(p, 0755), 0);
    }
    assert_int_equal(release(f.pv, pvn(1), "ns/team/vol", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_false(lexists(f.pv, "ns/team/vol"));
    /* The parent only this volume used went; the one another volume uses stays. */
    assert_false(lexists(f.pv, "ns/team"));
    assert_true(lexists(f.pv, "ns/other"));
    outside_intact(&f);
    assert_true(lexists(f.out, "hard"));
    /* The record says "deleting" until the PV object is gone, then forget drops it. */
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.state, HP_REC_DELETING);
    hp_record_free(&r);
    assert_int_equal(release(f.pv, pvn(1), "ns/team/vol", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_int_equal(run_simple(HP_FSOP_FORGET, f.pv, pvn(1), NULL, 0), 0);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), -ENOENT);
    /* The last volume of ns takes ns with it, never the root. */
    assert_int_equal(release(f.pv, pvn(2), "ns/other", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_false(lexists(f.pv, "ns"));
    assert_true(lexists(f.dir, "pv"));
}

static void test_parent_someone_uses_stays(void **state)
{
    struct fx f;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "ns/vol", pvn(1), 0777), 0);
    /* A person's file next to the volume. */
    path_join(p, f.pv, "ns");
    mkfile(p, "notes.txt", "mine");
    assert_int_equal(release(f.pv, pvn(1), "ns/vol", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_true(lexists(p, "notes.txt"));
}

static void test_release_refusals(void **state)
{
    struct fx f;
    char p[PATH_MAX], msg[1024];

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    assert_int_equal(provision(f.pv, "v2", pvn(2), 0755), 0);
    mkdir_in(f.out, "vol");
    mkfile(f.out, "vol/inside", "x");

    /* No record for the PV: nothing removed, whatever the path. */
    assert_int_equal(release(f.pv, pvn(7), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                     -ENOENT);
    assert_non_null(strstr(msg, "no ownership record"));
    assert_true(lexists(f.pv, "vol"));
    /* The PV's path is not the recorded one (pv 2 pointing at pv 1's directory). */
    assert_int_equal(release(f.pv, pvn(2), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                     -EPERM);
    assert_non_null(strstr(msg, "not the directory recorded"));
    assert_true(lexists(f.pv, "vol"));
    /* The volume directory replaced by a symlink to outside: refused, the link left. */
    path_join(p, f.pv, "vol");
    {
        char moved[PATH_MAX];
        path_join(moved, f.dir, "moved-vol");
        assert_int_equal(rename(p, moved), 0);
        assert_int_equal(symlink(f.out, p), 0);
        assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                         -ELOOP);
        assert_non_null(strstr(msg, "symlink"));
        assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_ARCHIVE, NULL, 0), -ELOOP);
        assert_true(lexists(f.pv, "vol"));
        assert_true(lexists(f.out, "vol/inside"));
        /* Another directory in its place (another inode): not ours, left alone. */
        assert_int_equal(unlink(p), 0);
        assert_int_equal(mkdir(p, 0755), 0);
        mkfile(p, "newcomer", "n");
        assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                         -EPERM);
        assert_non_null(strstr(msg, "inode"));
        assert_true(lexists(p, "newcomer"));
    }
    /* Not a directory. */
    assert_int_equal(provision(f.pv, "v3", pvn(3), 0755), 0);
    path_join(p, f.pv, "v3");
    assert_int_equal(rmdir(p), 0);
    mkfile(f.pv, "v3", "x");
    assert_int_equal(release(f.pv, pvn(3), "v3", HP_ON_DELETE_DELETE, NULL, 0), -ENOTDIR);
    assert_true(lexists(f.pv, "v3"));
    outside_intact(&f);
}

static void test_release_missing_root_or_journal(void **state)
{
    struct fx f;
    char msg[1024], p[PATH_MAX];

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    /* The root gone (a disk that is not mounted): refused, never "already deleted". */
    path_join(p, f.dir, "pv-away");
    assert_int_equal(rename(f.pv, p), 0);
    assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                     -ENOENT);
    assert_non_null(strstr(msg, "does not exist"));
    assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_RETAIN, NULL, 0), -ENOENT);
    /* The root there but empty (the mount point of an unmounted disk). */
    assert_int_equal(mkdir(f.pv, 0755), 0);
    assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)),
                     -ENOENT);
    assert_non_null(strstr(msg, "journal"));
    assert_false(lexists(f.pv, HP_JOURNAL_DIR)); /* a release never creates it */
    assert_int_equal(rmdir(f.pv), 0);
    assert_int_equal(rename(p, f.pv), 0);
    /* What the loop knew: another filesystem than the one the volume was made on. */
    struct hp_fsop *op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
    op->action = HP_ON_DELETE_DELETE;
    op->have_expect_fs = 1;
    op->expect_fs.dev = 12345;
    op->expect_fs.fsid = 0;
    hp_fsop_run(op);
    assert_int_equal(op->status, -EPERM);
    assert_non_null(strstr(op->msg, "mounted"));
    hp_fsop_free(op);
    assert_true(lexists(f.pv, "vol"));
    /* A record made on another device: the same. */
    struct hp_record r;
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    r.dev = 4242;
    r.fsid = 0;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg)), -EPERM);
    assert_non_null(strstr(msg, "device"));
    assert_true(lexists(f.pv, "vol"));
}

/* Descriptors this process has open. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    assert_int_equal(closedir(d), 0);
    return n - 1; /* the one opendir holds */
}

/* A volume whose directory is already gone (a person removed it, or a retry after the removal)
 * is released all the same, and no descriptor is left open behind it. */
static void test_release_gone_directory(void **state)
{
    static const enum hp_on_delete actions[] = {HP_ON_DELETE_DELETE, HP_ON_DELETE_ARCHIVE};
    struct fx f;
    struct hp_record r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    for (size_t i = 0; i < HP_ARRAY_SIZE(actions); i++) {
        assert_int_equal(provision(f.pv, i ? "ns/b" : "ns/a", pvn((int)i + 1), 0755), 0);
        path_join(p, f.pv, i ? "ns/b" : "ns/a");
        assert_int_equal(rmdir(p), 0);
        int before = open_fds();
        assert_int_equal(release(f.pv, pvn((int)i + 1), i ? "ns/b" : "ns/a", actions[i], NULL, 0),
                         0);
        assert_int_equal(open_fds(), before);
        assert_int_equal(read_rec(f.pv, pvn((int)i + 1), &r), 0);
        assert_int_equal(r.state, i ? HP_REC_ARCHIVED : HP_REC_DELETING);
        hp_record_free(&r);
    }
}

static void test_retain_and_archive(void **state)
{
    struct fx f;
    char p[PATH_MAX];
    struct hp_record r;
    struct hp_fsop *op;
    int i;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "keep", pvn(1), 0755), 0);
    assert_int_equal(release(f.pv, pvn(1), "keep", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    assert_true(lexists(f.pv, "keep"));
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.state, HP_REC_RETAINED);
    hp_record_free(&r);
    /* Retained is final: a later delete release of it is refused. */
    assert_int_equal(release(f.pv, pvn(1), "keep", HP_ON_DELETE_DELETE, NULL, 0), -EPERM);
    assert_true(lexists(f.pv, "keep"));

    /* Archive three generations of one path: distinct names, records say where. */
    for (i = 0; i < 3; i++) {
        char name[16];
        assert_int_equal(provision(f.pv, "ns/vol", pvn(10 + i), 0755), 0);
        (void)snprintf(name, sizeof(name), "gen%d", i);
        path_join(p, f.pv, "ns/vol");
        mkfile(p, name, "g");
        op = new_op(HP_FSOP_RELEASE, f.pv, pvn(10 + i), "ns/vol");
        op->action = HP_ON_DELETE_ARCHIVE;
        hp_fsop_run(op);
        assert_int_equal(op->status, 0);
        assert_non_null(op->archived_abs);
        assert_non_null(strstr(op->archived_abs, "/ns/archived-vol"));
        assert_string_equal(op->out.archived_as + strlen("ns/"),
                            strrchr(op->archived_abs, '/') + 1);
        hp_fsop_free(op);
        assert_false(lexists(f.pv, "ns/vol"));
    }
    assert_true(lexists(f.pv, "ns/archived-vol/gen0"));
    assert_int_equal(read_rec(f.pv, pvn(10), &r), 0);
    assert_int_equal(r.state, HP_REC_ARCHIVED);
    assert_string_equal(r.archived_as, "ns/archived-vol");
    hp_record_free(&r);
    /* A second archive release is a no-op. */
    assert_int_equal(release(f.pv, pvn(10), "ns/vol", HP_ON_DELETE_ARCHIVE, NULL, 0), 0);
}

static void test_archive_long_name(void **state)
{
    struct fx f;
    char leaf[NAME_MAX + 1];
    struct hp_record r;

    (void)state;
    fx_open(&f);
    memset(leaf, 'x', 250);
    leaf[250] = '\0';
    assert_int_equal(provision(f.pv, leaf, pvn(1), 0755), 0);
    assert_int_equal(release(f.pv, pvn(1), leaf, HP_ON_DELETE_ARCHIVE, NULL, 0), 0);
    assert_false(lexists(f.pv, leaf));
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_true(strlen(r.archived_as) <= NAME_MAX);
    assert_int_equal(strncmp(r.archived_as, "archived-xxx", 12), 0);
    assert_true(lexists(f.pv, r.archived_as));
    hp_record_free(&r);

    /* A path near the longest a record holds (4096): the archived name fits in it too, so the
     * record can still be read (it was 4097 bytes, and the archive was lost to the journal). */
    char rel[4200];
    size_t n = 0;
    for (int d = 0; d < 16; d++) {
        memset(rel + n, 'd', 250);
        n += 250;
        rel[n++] = '/';
    }
    memset(rel + n, 'l', 4088 - n);
    rel[4088] = '\0';
    assert_int_equal(provision(f.pv, rel, pvn(2), 0755), 0);
    assert_int_equal(release(f.pv, pvn(2), rel, HP_ON_DELETE_ARCHIVE, NULL, 0), 0);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    assert_int_equal(r.state, HP_REC_ARCHIVED);
    assert_true(strlen(r.archived_as) <= 4096);
    assert_int_equal(strncmp(r.archived_as, rel, n), 0);
    assert_non_null(strstr(r.archived_as + n, "archived-"));
    hp_record_free(&r);
}

/* The orphan sweep's release (only_unused): a "created" volume that holds anything is retained
 * in place whatever the action; an empty one goes as the action says; a "deleting" one is
 * removed whatever it holds (its own release had decided). */
static int sweep_release(const char *root, const char *pv, const char *rel,
                         enum hp_on_delete action, int *kept)
{
    struct hp_fsop *op = new_op(HP_FSOP_RELEASE, root, pv, rel);
    op->action = action;
    op->only_unused = 1;
    hp_fsop_run(op);
    int rc = op->status;
    *kept = op->kept_in_use;
    hp_fsop_free(op);
    return rc;
}

static void test_sweep_release_keeps_used(void **state)
{
    struct fx f;
    struct hp_record r;
    char p[PATH_MAX];
    int kept;
    (void)state;
    fx_open(&f);
    for (int i = 1; i <= 4; i++) {
        char rel[32];
        (void)snprintf(rel, sizeof(rel), "v%d", i);
        assert_int_equal(provision(f.pv, rel, pvn(i), 0755), 0);
    }
    path_join(p, f.pv, "v1");
    mkfile(p, "data", "keep me");
    path_join(p, f.pv, "v2");
    mkdir_in(p, "empty-dir"); /* a directory is data too */
    /* Used: retained in place, for delete and archive alike. */
    assert_int_equal(sweep_release(f.pv, pvn(1), "v1", HP_ON_DELETE_DELETE, &kept), 0);
    assert_true(kept);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.state, HP_REC_RETAINED);
    hp_record_free(&r);
    assert_true(lexists(f.pv, "v1/data"));
    assert_int_equal(sweep_release(f.pv, pvn(2), "v2", HP_ON_DELETE_ARCHIVE, &kept), 0);
    assert_true(kept);
    assert_true(lexists(f.pv, "v2/empty-dir"));
    assert_false(lexists(f.pv, "archived-v2"));
    /* Empty: removed as asked. */
    assert_int_equal(sweep_release(f.pv, pvn(3), "v3", HP_ON_DELETE_DELETE, &kept), 0);
    assert_false(kept);
    assert_false(lexists(f.pv, "v3"));
    /* "deleting" (a release of its own began): removed with what it holds. */
    path_join(p, f.pv, "v4");
    mkfile(p, "data", "going");
    assert_int_equal(read_rec(f.pv, pvn(4), &r), 0);
    r.state = HP_REC_DELETING;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    assert_int_equal(sweep_release(f.pv, pvn(4), "v4", HP_ON_DELETE_DELETE, &kept), 0);
    assert_false(kept);
    assert_false(lexists(f.pv, "v4"));
    /* Retained now: a later delete of it is refused, data kept. */
    assert_int_equal(release(f.pv, pvn(1), "v1", HP_ON_DELETE_DELETE, NULL, 0), -EPERM);
    outside_intact(&f);
}

static void test_cleanup_only_own(void **state)
{
    struct fx f;
    char p[PATH_MAX];
    struct hp_record r;

    (void)state;
    fx_open(&f);
    /* A retained volume's directory at the path a new claim renders. */
    assert_int_equal(provision(f.pv, "ns/data", pvn(1), 0755), 0);
    path_join(p, f.pv, "ns/data");
    mkfile(p, "precious", "keep");
    assert_int_equal(release(f.pv, pvn(1), "ns/data", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    /* The new claim is refused the path and a cleanup for it removes nothing. */
    assert_int_equal(provision(f.pv, "ns/data", pvn(2), 0755), -EEXIST);
    assert_int_equal(run_simple(HP_FSOP_CLEANUP, f.pv, pvn(2), NULL, 0), 0);
    assert_true(lexists(p, "precious"));
    /* A cleanup under another claim's uid for a recorded volume: refused. */
    assert_int_equal(provision(f.pv, "fresh", pvn(3), 0755), 0);
    struct hp_fsop *op = new_op(HP_FSOP_CLEANUP, f.pv, pvn(3), NULL);
    op->rec.claim_uid = strdup("not-the-claim");
    hp_fsop_run(op);
    assert_int_equal(op->status, -EPERM);
    hp_fsop_free(op);
    assert_true(lexists(f.pv, "fresh"));
    /* Its own claim: the fresh directory and its record go. */
    assert_int_equal(run_simple(HP_FSOP_CLEANUP, f.pv, pvn(3), NULL, 0), 0);
    assert_false(lexists(f.pv, "fresh"));
    assert_int_equal(read_rec(f.pv, pvn(3), &r), -ENOENT);
    /* A retained record is not a provisioning (any more): cleanup leaves it, and says how it
     * stands. */
    op = new_op(HP_FSOP_CLEANUP, f.pv, pvn(1), NULL);
    op->rec.claim_uid = strdup("uid-pvc-0001");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_true(op->already_done && op->have_out);
    assert_int_equal(op->out.state, HP_REC_RETAINED);
    hp_fsop_free(op);
    assert_true(lexists(p, "precious"));
    /* A half-made volume that holds anything is not removed: retained. */
    assert_int_equal(provision(f.pv, "written", pvn(4), 0755), 0);
    path_join(p, f.pv, "written");
    mkfile(p, "file", "somebody wrote this");
    op = new_op(HP_FSOP_CLEANUP, f.pv, pvn(4), NULL);
    op->rec.claim_uid = strdup("uid-pvc-0004");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_true(op->kept_in_use);
    assert_int_equal(op->out.state, HP_REC_RETAINED);
    hp_fsop_free(op);
    assert_true(lexists(p, "file"));
}

/* Removal has no depth limit: a pod's 3,000 nested directories (streams are kept open for the
 * first 128 levels only, the rest walked with two descriptors), with files, symlinks to the
 * outside and several subdirectories at some levels, all go; a symlink's target stays. */
static void test_remove_deep_tree(void **state)
{
    struct fx f;
    char vol[PATH_MAX], outfile[PATH_MAX], msg[1024];
    int i, fd, next;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "deep", pvn(1), 0755), 0);
    path_join(vol, f.pv, "deep");
    path_join(outfile, f.out, "keep");
    fd = open(vol, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    for (i = 0; i < 3000; i++) {
        if (i % 97 == 0) { /* a file, a symlink out of the volume */
            int ff = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            assert_true(ff >= 0);
            assert_int_equal(close(ff), 0);
            assert_int_equal(symlinkat(outfile, fd, "out"), 0);
        }
        if (i == 5 || i == 140 || i == 1500) { /* a wide level, each branch a little deep */
            for (int k = 0; k < 4; k++) {
                char name[8];
                (void)snprintf(name, sizeof(name), "w%d", k);
                assert_int_equal(mkdirat(fd, name, 0755), 0);
                int w = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(w >= 0);
                assert_int_equal(mkdirat(w, "x", 0755), 0);
                assert_int_equal(close(w), 0);
            }
        }
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(next >= 0);
        assert_int_equal(close(fd), 0);
        fd = next;
    }
    assert_int_equal(close(fd), 0);
    int rc = release(f.pv, pvn(1), "deep", HP_ON_DELETE_DELETE, msg, sizeof(msg));
    if (rc != 0)
        fail_msg("release: %d %s", rc, msg);
    assert_false(lexists(f.pv, "deep"));
    outside_intact(&f);
}

/* Other live volumes are compared by what their paths are on disk: a hand-made PV reaching a
 * volume's directory through a symlink (to the directory, to a parent, to the root) holds it
 * as surely as one naming it; one whose path cannot be resolved holds everything around where
 * it stops; one on the root itself or above it holds none. */
static void test_others_by_identity(void **state)
{
    struct fx f;
    char p[PATH_MAX], link[PATH_MAX], msg[1024];
    struct hp_fsop *op;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    assert_int_equal(provision(f.pv, "keep", pvn(2), 0755), 0);
    path_join(p, f.pv, "vol");
    path_join(link, f.dir, "alias-vol");
    assert_int_equal(symlink(p, link), 0);              /* -> the volume itself */
    path_join(link, f.dir, "alias-root");
    assert_int_equal(symlink(f.pv, link), 0);           /* -> the root */
    path_join(link, f.dir, "loop");
    assert_int_equal(symlink(link, link), 0);           /* a loop */

    static const struct {
        const char *path; /* relative to the scratch dir */
        int busy;
    } rows[] = {
        {"alias-vol", 1},          /* the directory, through a symlink */
        {"alias-root/vol", 1},     /* through a symlinked parent */
        {"alias-root/vol/sub", 1}, /* inside it (not made yet: DirectoryOrCreate) */
        {"alias-root/./vol/", 1},
        {"pv/vol", 1},             /* as written */
        {"alias-root", 0},         /* the root: a view of every volume */
        {"", 0},                   /* above the root */
        {"alias-root/keep", 0},    /* a sibling */
        {"alias-root/volume", 0},
        {"loop/x", 1},             /* cannot be resolved: in use around where it stops */
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(rows); i++) {
        char other[PATH_MAX];
        if (rows[i].path[0])
            path_join(other, f.dir, rows[i].path);
        else
            (void)snprintf(other, sizeof(other), "%s", f.dir);
        op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
        op->action = HP_ON_DELETE_DELETE;
        hp_fsop_add_other(op, "hand-made", other);
        hp_fsop_run(op);
        if (rows[i].busy) {
            if (op->status != -EBUSY)
                fail_msg("%s: status %d (%s)", rows[i].path, op->status, op->msg);
            assert_non_null(strstr(op->msg, "PersistentVolume hand-made"));
            assert_true(lexists(f.pv, "vol"));
        } else if (op->status != 0 || op->already_done) {
            fail_msg("%s: status %d (%s)", rows[i].path, op->status, op->msg);
        }
        hp_fsop_free(op);
        if (!rows[i].busy) { /* it went: make it again for the next row */
            assert_int_equal(run_simple(HP_FSOP_FORGET, f.pv, pvn(1), NULL, 0), 0);
            assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
        }
    }
    /* A path that cannot be resolved counts as in use around where it stops: inside the root. */
    path_join(link, f.pv, "loop2");
    assert_int_equal(symlink(link, link), 0);
    op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
    op->action = HP_ON_DELETE_ARCHIVE;
    path_join(p, f.pv, "loop2/x");
    hp_fsop_add_other(op, "broken", p);
    hp_fsop_run(op);
    assert_int_equal(op->status, -EBUSY);
    assert_non_null(strstr(op->msg, "cannot be resolved"));
    hp_fsop_free(op);
    assert_int_equal(unlink(link), 0);
    /* Making a directory inside another volume, or taking over one it mounts. */
    op = new_op(HP_FSOP_PROVISION, f.pv, pvn(3), "keep/inner");
    op->rec.claim_uid = strdup("uid-3");
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup("c3");
    op->rec.class_name = strdup("c");
    op->rec.identity = strdup("me");
    path_join(p, f.dir, "alias-root/keep");
    hp_fsop_add_other(op, "admins", p);
    hp_fsop_run(op);
    assert_int_equal(op->status, -EBUSY);
    assert_non_null(strstr(op->msg, "lies inside the directory of PersistentVolume admins"));
    assert_false(lexists(f.pv, "keep/inner"));
    hp_fsop_free(op);
    /* Cleanup of a half-made directory another volume mounts meanwhile: kept. */
    op = new_op(HP_FSOP_CLEANUP, f.pv, pvn(2), NULL);
    op->rec.claim_uid = strdup("uid-pvc-0002");
    path_join(p, f.dir, "alias-root/keep");
    hp_fsop_add_other(op, "admins", p);
    hp_fsop_run(op);
    assert_int_equal(op->status, -EBUSY);
    assert_true(lexists(f.pv, "keep"));
    hp_fsop_free(op);
    (void)msg;
    outside_intact(&f);
}

/* refresh_others: the list a request compares with is the one its refresh gives right before
 * the step, not the one it was queued with (a PV aliasing the directory may be made while the
 * request waits for a worker). */
struct refresh_fx {
    const char *alias; /* NULL: no other PV now */
    int calls;
};

static void refresh_to(struct hp_fsop *op, void *data)
{
    struct refresh_fx *r = data;
    r->calls++;
    hp_fsop_clear_others(op);
    if (r->alias)
        hp_fsop_add_other(op, "made-while-queued", r->alias);
}

static void test_others_refreshed_at_the_step(void **state)
{
    struct fx f;
    char p[PATH_MAX], link[PATH_MAX];
    struct hp_fsop *op;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    path_join(p, f.pv, "vol");
    path_join(link, f.dir, "alias-vol");
    assert_int_equal(symlink(p, link), 0);
    /* Queued with a stale list that names nothing; the refresh names the alias: kept. */
    struct refresh_fx r = {link, 0};
    op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
    op->action = HP_ON_DELETE_DELETE;
    hp_fsop_add_other(op, "gone-meanwhile", f.dir); /* above the root: holds nothing */
    op->refresh_others = refresh_to;
    op->refresh_data = &r;
    hp_fsop_run(op);
    assert_int_equal(op->status, -EBUSY);
    assert_non_null(strstr(op->msg, "PersistentVolume made-while-queued"));
    assert_true(r.calls >= 1);
    assert_true(lexists(f.pv, "vol"));
    hp_fsop_free(op);
    /* Queued while the alias existed, gone when the worker gets there: removed. */
    r.alias = NULL;
    r.calls = 0;
    op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
    op->action = HP_ON_DELETE_DELETE;
    hp_fsop_add_other(op, "stale", link);
    op->refresh_others = refresh_to;
    op->refresh_data = &r;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_true(r.calls >= 1);
    assert_false(lexists(f.pv, "vol"));
    hp_fsop_free(op);
    assert_int_equal(unlink(link), 0);
    outside_intact(&f);
}

/* ---- scan --------------------------------------------------------------------------------- */

/* ---- usage -------------------------------------------------------------------------------- */

static uint64_t blocks_of(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    path_join(p, dir, name);
    assert_int_equal(lstat(p, &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

/* What a volume uses: every inode once (a file with thousands of hard links too: the set of
 * linked inodes grows past its first sizes), a symlink as itself and never followed. */
static void test_usage(void **state)
{
    struct fx f;
    char vol[PATH_MAX], d[PATH_MAX], d2[PATH_MAX], a[PATH_MAX], p[PATH_MAX], q[PATH_MAX];
    char big[8192], n[32];
    const int nlinks = 3000, nfiles = 300;
    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    path_join(vol, f.pv, "vol");
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    mkfile(vol, "a", big);
    mkdir_in(vol, "d");
    mkdir_in(vol, "d2");
    path_join(d, vol, "d");
    path_join(d2, vol, "d2");
    path_join(a, vol, "a");
    for (int i = 0; i < nlinks; i++) { /* one file, thousands of names */
        (void)snprintf(n, sizeof(n), "l%d", i);
        path_join(p, d2, n);
        assert_int_equal(link(a, p), 0);
    }
    for (int i = 0; i < nfiles; i++) { /* many files, two names each */
        (void)snprintf(n, sizeof(n), "f%d", i);
        mkfile(d, n, "y");
        path_join(q, d, n);
        (void)snprintf(n, sizeof(n), "g%d", i);
        path_join(p, d, n);
        assert_int_equal(link(q, p), 0);
    }
    path_join(p, vol, "out");
    assert_int_equal(symlink(f.out, p), 0);

    struct hp_fsop *op = new_op(HP_FSOP_USAGE, f.pv, pvn(1), "vol");
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    uint64_t want_bytes = blocks_of(f.pv, "vol") + blocks_of(vol, "a") + blocks_of(vol, "d") +
                          blocks_of(vol, "d2") + blocks_of(vol, "out");
    for (int i = 0; i < nfiles; i++) {
        (void)snprintf(n, sizeof(n), "f%d", i);
        want_bytes += blocks_of(d, n);
    }
    assert_int_equal(op->used_inodes, 5 + (uint64_t)nfiles); /* vol, a, d, d2, out, f* */
    assert_int_equal(op->used_bytes, want_bytes);
    assert_int_equal(op->visited, 4 + (uint64_t)nlinks + 2 * (uint64_t)nfiles);
    hp_fsop_free(op);
    outside_intact(&f);
}

/* A measurement abandoned (the provisioner stops) ends at once with -ECANCELED. */
static void test_usage_abandoned(void **state)
{
    struct fx f;
    char vol[PATH_MAX];
    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    path_join(vol, f.pv, "vol");
    mkfile(vol, "a", "data");
    struct hp_fsop *op = new_op(HP_FSOP_USAGE, f.pv, pvn(1), "vol");
    hp_fsop_abandon(op);
    hp_fsop_run(op);
    assert_int_equal(op->status, -ECANCELED);
    assert_non_null(strstr(op->msg, "abandoned"));
    assert_int_equal(op->visited, 0);
    hp_fsop_free(op);
    assert_true(lexists(vol, "a"));
}

/* ---- hard limits, against a stand-in kernel ------------------------------------------------
 *
 * This machine's kernel has no quotas (tests/vm runs the real ones). The quota module's system
 * calls are replaced by a small model of an ext4 with project quotas on: project IDs live on
 * inodes (keyed by inode number, with the path they were set at so that a removed directory no
 * longer counts), limits in a table, and a project is in use while an inode that still exists
 * carries it or it has a limit. */

#define K_MAX 64
static struct {
    int enforcing; /* FS_QUOTA_PDQ_ACCT|ENFD, else none (mounted without prjquota) */
    struct {
        uint64_t ino;
        char path[PATH_MAX];
        uint32_t id;
        uint32_t xflags;
    } tag[K_MAX];
    size_t ntags;
    struct {
        uint32_t id;
        uint64_t hard_kib;
        uint64_t space; /* bytes charged, as the test says */
    } lim[K_MAX];
    size_t nlims;
    int set_calls;
} K;

static int k_inodes(uint32_t id)
{
    struct stat st;
    int n = 0;
    for (size_t i = 0; i < K.ntags; i++)
        n += K.tag[i].id == id && lstat(K.tag[i].path, &st) == 0 &&
             (uint64_t)st.st_ino == K.tag[i].ino;
    return n;
}

static size_t k_lim(uint32_t id)
{
    for (size_t i = 0; i < K.nlims; i++)
        if (K.lim[i].id == id)
            return i;
    assert_true(K.nlims < K_MAX);
    K.lim[K.nlims].id = id;
    K.lim[K.nlims].hard_kib = 0;
    K.lim[K.nlims].space = 0;
    return K.nlims++;
}

static int k_op(int fd, int cmd, int id, void *addr)
{
    int sub = (int)((unsigned)cmd >> SUBCMDSHIFT);
    if (fd < 0)
        return -EBADF;
    switch (sub) {
    case Q_XQUOTASYNC:
        return 0;
    case Q_XGETQSTATV:
        ((struct fs_quota_statv *)addr)->qs_flags =
            K.enforcing ? FS_QUOTA_PDQ_ACCT | FS_QUOTA_PDQ_ENFD : 0;
        return K.enforcing ? 0 : -ENOSYS;
    case Q_GETQUOTA: {
        struct if_dqblk *d = addr;
        size_t i = k_lim((uint32_t)id);
        memset(d, 0, sizeof(*d));
        d->dqb_bhardlimit = K.lim[i].hard_kib;
        d->dqb_curinodes = (uint64_t)k_inodes((uint32_t)id);
        d->dqb_curspace = K.lim[i].space;
        return 0;
    }
    case Q_SETQUOTA:
        K.lim[k_lim((uint32_t)id)].hard_kib = ((struct if_dqblk *)addr)->dqb_bhardlimit;
        K.set_calls++;
        return 0;
    }
    return -EINVAL;
}

static int k_quotactl(int cmd, const char *special, int id, void *addr)
{
    (void)cmd;
    (void)id;
    (void)addr;
    return special && !special[0] ? -ENOENT : -ENODEV; /* the call exists; no device path */
}

static int k_fstatfs_type(int fd, long *f_type)
{
    (void)fd;
    *f_type = 0xEF53L; /* ext4 */
    return 0;
}

/* The tag slot of fd's inode, or -1. */
static int k_tag_of(int fd)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    for (size_t i = 0; i < K.ntags; i++) {
        struct stat now;
        if (K.tag[i].ino == (uint64_t)st.st_ino && lstat(K.tag[i].path, &now) == 0 &&
            now.st_ino == st.st_ino)
            return (int)i;
    }
    return -1;
}

static int k_getx(int fd, void *out)
{
    struct fsxattr *fa = out;
    int i = k_tag_of(fd);
    memset(fa, 0, sizeof(*fa));
    if (i >= 0) {
        fa->fsx_projid = K.tag[i].id;
        fa->fsx_xflags = K.tag[i].xflags;
    }
    return 0;
}

static int k_setx(int fd, const void *in)
{
    const struct fsxattr *fa = in;
    char link[64];
    struct stat st;
    int i = k_tag_of(fd);
    if (i < 0) {
        assert_true(K.ntags < K_MAX);
        i = (int)K.ntags++;
        assert_int_equal(fstat(fd, &st), 0);
        K.tag[i].ino = (uint64_t)st.st_ino;
        (void)snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, K.tag[i].path, sizeof(K.tag[i].path) - 1);
        assert_true(n > 0);
        K.tag[i].path[n] = '\0';
    }
    K.tag[i].id = fa->fsx_projid;
    K.tag[i].xflags = fa->fsx_xflags;
    return 0;
}

static struct hp__quota_sys k_sys = {
    .quotactl = k_quotactl,
    .quotactl_fd = k_op,
    .fstatfs_type = k_fstatfs_type,
    .mountinfo_path = "/proc/self/mountinfo",
    .dev_block_dir = "/nonexistent/hp-test/dev/block",
    .fsgetxattr = k_getx,
    .fssetxattr = k_setx,
};

/* A fresh stand-in kernel (quotas enforced) and a fresh process's ID counter. */
static void k_start(void)
{
    memset(&K, 0, sizeof(K));
    K.enforcing = 1;
    hp__quota_set_sys(&k_sys);
    hp__quota_alloc_reset();
}

static void k_stop(void)
{
    hp__quota_set_sys(NULL);
    hp__quota_alloc_reset();
}

/* The project ID and inheritance flag of dir/name, as the stand-in kernel has them. */
static uint32_t k_project(const char *dir, const char *name, int *inherit)
{
    char p[PATH_MAX];
    uint32_t id = 0;
    path_join(p, dir, name);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(hp_quota_get_project(fd, &id, inherit, NULL, 0), 0);
    (void)close(fd);
    return id;
}

static uint64_t k_limit_bytes(uint32_t id)
{
    return K.lim[k_lim(id)].hard_kib << 10;
}

/* A provisioning with hard limits of size bytes (hint: the lowest ID). */
static int provision_hl(const char *root, const char *rel, const char *pv, uint64_t size,
                        uint32_t hint, struct hp_fsop **out)
{
    char u[64];
    struct hp_fsop *op = new_op(HP_FSOP_PROVISION, root, pv, rel);
    int rc;
    (void)snprintf(u, sizeof(u), "uid-%s", pv);
    op->rec.claim_uid = strdup(u);
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup(pv);
    op->rec.class_name = strdup("c");
    op->rec.identity = strdup("me");
    op->create_root = 1;
    op->hard_limits = 1;
    op->limit_bytes = size;
    op->quota_hint = hint;
    hp_fsop_run(op);
    rc = op->status;
    if (out)
        *out = op;
    else
        hp_fsop_free(op);
    return rc;
}

/* IDs: recorded, carried (with inheritance) and limited; one per volume, never one another
 * directory carries or a limit is set for, never below the hint; a retry changes nothing. */
static void test_quota_provision(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;
    int inherit = 0;
    (void)state;
    fx_open(&f);
    k_start();
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 10 << 20, 0, &op), 0);
    assert_int_equal(op->out.project_id, HP_QUOTA_ID_FIRST_FOR_TESTS);
    assert_non_null(op->quota_fs); /* probed, for the caller to keep */
    assert_int_equal(op->quota_fs->kind, HP_QUOTA_EXT4);
    hp_fsop_free(op);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.project_id, HP_QUOTA_ID_FIRST_FOR_TESTS);
    assert_int_equal(r.state, HP_REC_CREATED);
    hp_record_free(&r);
    assert_int_equal(k_project(f.pv, "a", &inherit), HP_QUOTA_ID_FIRST_FOR_TESTS);
    assert_int_equal(inherit, 1);
    assert_int_equal(k_limit_bytes(HP_QUOTA_ID_FIRST_FOR_TESTS), 10 << 20);
    /* The next one: another ID; an administrator's project with a limit is skipped. */
    K.lim[k_lim(HP_QUOTA_ID_FIRST_FOR_TESTS + 2)].hard_kib = 5;
    assert_int_equal(provision_hl(f.pv, "b", pvn(2), 1 << 20, 0, NULL), 0);
    assert_int_equal(k_project(f.pv, "b", NULL), HP_QUOTA_ID_FIRST_FOR_TESTS + 1);
    assert_int_equal(provision_hl(f.pv, "c", pvn(3), 1 << 20, 0, NULL), 0);
    assert_int_equal(k_project(f.pv, "c", NULL), HP_QUOTA_ID_FIRST_FOR_TESTS + 3);
    /* The hint: IDs the caller knows records of are never handed out. */
    assert_int_equal(provision_hl(f.pv, "d", pvn(4), 1 << 20, 3000000, NULL), 0);
    assert_int_equal(k_project(f.pv, "d", NULL), 3000000);
    /* A retry of a made volume: same ID, limit as asked. */
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 10 << 20, 0, &op), 0);
    assert_int_equal(op->already_done, 1);
    assert_int_equal(op->out.project_id, HP_QUOTA_ID_FIRST_FOR_TESTS);
    hp_fsop_free(op);
    /* An ID handed out is never handed out again by this process, even when freed meanwhile
     * (its record may not have reached the caller). */
    assert_int_equal(release(f.pv, pvn(4), "d", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_int_equal(run_simple(HP_FSOP_FORGET, f.pv, pvn(4), NULL, 0), 0);
    assert_int_equal(provision_hl(f.pv, "e", pvn(5), 1 << 20, 0, NULL), 0);
    assert_int_equal(k_project(f.pv, "e", NULL), 3000001);
    /* Without hard_limits: no ID, no tag. */
    assert_int_equal(provision(f.pv, "plain", pvn(6), 0777), 0);
    assert_int_equal(k_project(f.pv, "plain", NULL), 0);
    assert_int_equal(read_rec(f.pv, pvn(6), &r), 0);
    assert_int_equal(r.project_id, 0);
    hp_record_free(&r);
    k_stop();
}

/* A filesystem that cannot enforce: refused with the probe's reason, nothing left behind. */
static void test_quota_provision_refused(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    (void)state;
    fx_open(&f);
    k_start();
    K.enforcing = 0;
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 1 << 20, 0, &op), -ESRCH);
    assert_non_null(strstr(op->msg, "prjquota"));
    hp_fsop_free(op);
    assert_false(lexists(f.pv, "a"));
    assert_int_equal(nrecords(f.pv), 0);
    char p[PATH_MAX];
    path_join(p, f.pv, HP_JOURNAL_DIR "/staging");
    DIR *d = opendir(p);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        assert_true(de->d_name[0] == '.');
    (void)closedir(d);
    k_stop();
}

/* A crash between the record and the tag: the restart tags the recorded ID; one that something
 * else took meanwhile is replaced by a new one, recorded first. */
static void test_quota_resume(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;
    (void)state;
    fx_open(&f);
    k_start();
    assert_int_equal(provision(f.pv, "a", pvn(1), 0777), 0);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    r.state = HP_REC_CREATING; /* as kill -9 after provision-renamed leaves it */
    r.project_id = 1234567;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    hp__quota_alloc_reset(); /* a new process */
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 2 << 20, 0, NULL), 0);
    assert_int_equal(k_project(f.pv, "a", NULL), 1234567);
    assert_int_equal(k_limit_bytes(1234567), 2 << 20);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    assert_int_equal(r.state, HP_REC_CREATED);
    assert_int_equal(r.project_id, 1234567);
    hp_record_free(&r);
    /* Recorded ID 1234567 again for another volume, whose directory does not carry it, while
     * "a" does: a new ID for it, recorded. */
    assert_int_equal(provision(f.pv, "b", pvn(2), 0777), 0);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    r.state = HP_REC_CREATING;
    r.project_id = 1234567;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    assert_int_equal(provision_hl(f.pv, "b", pvn(2), 1 << 20, 2000000, &op), 0);
    assert_int_equal(op->out.project_id, 2000000);
    hp_fsop_free(op);
    assert_int_equal(k_project(f.pv, "b", NULL), 2000000);
    assert_int_equal(k_project(f.pv, "a", NULL), 1234567);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    assert_int_equal(r.project_id, 2000000);
    hp_record_free(&r);
    /* A record that names an ID is finished with it even when the path asks for no limits. */
    assert_int_equal(provision(f.pv, "c", pvn(3), 0777), 0);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), 0);
    r.state = HP_REC_CREATING;
    r.project_id = 2500000;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    assert_int_equal(provision(f.pv, "c", pvn(3), 0777), 0);
    assert_int_equal(k_project(f.pv, "c", NULL), 2500000);
    k_stop();
}

/* Releases clear the limit; a kept directory keeps its ID (its files carry it), a removed one
 * frees it; the undo of a half-made volume too. */
static void test_quota_release(void **state)
{
    struct fx f;
    struct hp_record r;
    int in_use = -1;
    struct hp_quota_fs fs;
    (void)state;
    fx_open(&f);
    k_start();
    const uint32_t a = HP_QUOTA_ID_FIRST_FOR_TESTS;
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 1 << 20, 0, NULL), 0);
    assert_int_equal(provision_hl(f.pv, "b", pvn(2), 1 << 20, 0, NULL), 0);
    assert_int_equal(provision_hl(f.pv, "c", pvn(3), 1 << 20, 0, NULL), 0);
    assert_int_equal(provision_hl(f.pv, "d", pvn(4), 1 << 20, 0, NULL), 0);
    char p[PATH_MAX];
    path_join(p, f.pv, "a");
    mkfile(p, "data", "x");
    assert_int_equal(hp_quota_probe_path(f.pv, &fs, NULL, 0), 0);
    int rootfd = open(f.pv, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    /* delete: the directory and its limit go; the record names the ID until it is forgotten */
    assert_int_equal(release(f.pv, pvn(1), "a", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_false(lexists(f.pv, "a"));
    assert_int_equal(k_limit_bytes(a), 0);
    assert_int_equal(hp_quota_id_in_use(&fs, rootfd, a, &in_use, NULL, 0), 0);
    assert_int_equal(in_use, 0);
    /* retain: no limit, the directory still carries its ID and the record names it */
    assert_int_equal(release(f.pv, pvn(2), "b", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    assert_int_equal(k_limit_bytes(a + 1), 0);
    assert_int_equal(k_project(f.pv, "b", NULL), a + 1);
    assert_int_equal(read_rec(f.pv, pvn(2), &r), 0);
    assert_int_equal(r.state, HP_REC_RETAINED);
    assert_int_equal(r.project_id, a + 1);
    hp_record_free(&r);
    assert_int_equal(hp_quota_id_in_use(&fs, rootfd, a + 1, &in_use, NULL, 0), 0);
    assert_int_equal(in_use, 1); /* never handed out while it carries it */
    /* archive: the same */
    assert_int_equal(release(f.pv, pvn(3), "c", HP_ON_DELETE_ARCHIVE, NULL, 0), 0);
    assert_int_equal(k_limit_bytes(a + 2), 0);
    assert_int_equal(read_rec(f.pv, pvn(3), &r), 0);
    assert_int_equal(r.state, HP_REC_ARCHIVED);
    assert_int_equal(r.project_id, a + 2);
    hp_record_free(&r);
    /* the undo of a half-made volume: directory, limit and record gone */
    assert_int_equal(run_simple(HP_FSOP_CLEANUP, f.pv, pvn(4), NULL, 0), 0);
    assert_false(lexists(f.pv, "d"));
    assert_int_equal(k_limit_bytes(a + 3), 0);
    assert_int_equal(read_rec(f.pv, pvn(4), &r), -ENOENT);
    assert_int_equal(hp_quota_id_in_use(&fs, rootfd, a + 3, &in_use, NULL, 0), 0);
    assert_int_equal(in_use, 0);
    (void)close(rootfd);
    /* The retained one taken over (reuseRetained): its ID, the new claim's limit. */
    struct hp_fsop *op = new_op(HP_FSOP_PROVISION, f.pv, pvn(5), "ignored");
    op->rec.claim_uid = strdup("u5");
    op->rec.claim_namespace = strdup("default");
    op->rec.claim_name = strdup(pvn(2));
    op->rec.class_name = strdup("c");
    op->rec.identity = strdup("me");
    op->adopt = strdup(pvn(2));
    op->hard_limits = 1;
    op->limit_bytes = 3 << 20;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->out.project_id, a + 1);
    hp_fsop_free(op);
    assert_int_equal(k_limit_bytes(a + 1), 3 << 20);
    k_stop();
}

/* LIMIT: expansion raises a volume's limit online; a volume without an ID has none to change;
 * a released one is refused. */
static void test_quota_limit(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    (void)state;
    fx_open(&f);
    k_start();
    const uint32_t a = HP_QUOTA_ID_FIRST_FOR_TESTS;
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 1 << 20, 0, NULL), 0);
    assert_int_equal(provision(f.pv, "plain", pvn(2), 0777), 0);
    op = new_op(HP_FSOP_LIMIT, f.pv, pvn(1), "a");
    op->limit_bytes = 5 << 20;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->already_done, 0);
    hp_fsop_free(op);
    assert_int_equal(k_limit_bytes(a), 5 << 20);
    op = new_op(HP_FSOP_LIMIT, f.pv, pvn(2), "plain");
    op->limit_bytes = 5 << 20;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->already_done, 1);
    hp_fsop_free(op);
    op = new_op(HP_FSOP_LIMIT, f.pv, pvn(1), "elsewhere");
    op->limit_bytes = 6 << 20;
    hp_fsop_run(op);
    assert_int_equal(op->status, -EPERM);
    hp_fsop_free(op);
    assert_int_equal(release(f.pv, pvn(1), "a", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    op = new_op(HP_FSOP_LIMIT, f.pv, pvn(1), "a");
    op->limit_bytes = 6 << 20;
    hp_fsop_run(op);
    assert_int_equal(op->status, -EPERM);
    assert_non_null(strstr(op->msg, "retained"));
    hp_fsop_free(op);
    assert_int_equal(k_limit_bytes(a), 0);
    k_stop();
}

/* USAGE of a volume with an ID: the quota's counters, no walk; one whose directory does not
 * carry the recorded ID is walked. SCAN probes when asked. */
static void test_quota_usage_and_scan(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    (void)state;
    fx_open(&f);
    k_start();
    const uint32_t a = HP_QUOTA_ID_FIRST_FOR_TESTS;
    assert_int_equal(provision_hl(f.pv, "a", pvn(1), 8 << 20, 0, NULL), 0);
    char p[PATH_MAX];
    path_join(p, f.pv, "a");
    mkfile(p, "f", "data");
    K.lim[k_lim(a)].space = 4096 * 3;
    op = new_op(HP_FSOP_USAGE, f.pv, pvn(1), "a");
    op->rec.project_id = a;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->by_quota, 1);
    assert_int_equal(op->used_bytes, 4096 * 3);
    assert_int_equal(op->used_inodes, 1); /* the model counts tagged inodes: the directory */
    assert_int_equal(op->limit_hard, 8 << 20);
    assert_int_equal(op->visited, 0);
    hp_fsop_free(op);
    op = new_op(HP_FSOP_USAGE, f.pv, pvn(1), "a");
    op->rec.project_id = a + 7; /* not what the directory carries: walked */
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->by_quota, 0);
    assert_int_equal(op->used_inodes, 2);
    hp_fsop_free(op);
    op = new_op(HP_FSOP_SCAN, f.pv, NULL, NULL);
    op->hard_limits = 1;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->quota_status, 0);
    assert_non_null(op->quota_fs);
    assert_int_equal(op->nrecords, 1);
    assert_int_equal(op->records[0].project_id, a);
    hp_fsop_free(op);
    K.enforcing = 0;
    op = new_op(HP_FSOP_SCAN, f.pv, NULL, NULL);
    op->hard_limits = 1;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0); /* the journal is read all the same */
    assert_int_equal(op->quota_status, -ESRCH);
    assert_non_null(op->quota_msg);
    assert_non_null(strstr(op->quota_msg, "prjquota"));
    hp_fsop_free(op);
    k_stop();
}

static void test_scan(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    /* A root that does not exist: -ENOENT, no records. */
    op = hp_fsop_new(HP_FSOP_SCAN, f.pv);
    hp_fsop_run(op);
    assert_int_equal(op->status, -ENOENT);
    assert_int_equal(op->nrecords, 0);
    hp_fsop_free(op);

    assert_int_equal(provision(f.pv, "a/v1", pvn(1), 0755), 0);
    assert_int_equal(provision(f.pv, "v2", pvn(2), 0755), 0);
    assert_int_equal(provision(f.pv, "v3", pvn(3), 0755), 0);
    assert_int_equal(release(f.pv, pvn(3), "v3", HP_ON_DELETE_ARCHIVE, NULL, 0), 0);
    mkdir_in(f.pv, "stray");            /* unrecorded */
    mkdir_in(f.pv, "a/stray2");         /* unrecorded, below a recorded volume's parent */
    mkdir_in(f.pv, "live");             /* a live PV's directory (passed in) */
    mkfile(f.pv, "file-not-a-dir", "");  /* files are not directories: not counted */
    /* Crash leftovers: a temporary record and a staging directory without a record. */
    path_join(p, f.pv, HP_JOURNAL_DIR "/records");
    mkfile(p, ".tmp-pvc-0009", "partial");
    {   /* old enough not to be a write in flight (HP_JOURNAL_TMP_STALE_S) */
        char t[PATH_MAX];
        struct timespec old[2] = {{.tv_sec = time(NULL) - HP_JOURNAL_TMP_STALE_S - 5},
                                  {.tv_sec = time(NULL) - HP_JOURNAL_TMP_STALE_S - 5}};
        path_join(t, p, ".tmp-pvc-0009");
        assert_int_equal(utimensat(AT_FDCWD, t, old, 0), 0);
    }
    path_join(p, f.pv, HP_JOURNAL_DIR "/staging/pvc-0008");
    assert_int_equal(mkdir(p, 0700), 0);
    /* A corrupt record: reported, counted, ignored. */
    path_join(p, f.pv, HP_JOURNAL_DIR "/records");
    mkfile(p, "pvc-0007", "garbage\n");

    op = hp_fsop_new(HP_FSOP_SCAN, f.pv);
    op->clean_leftovers = 1;
    op->live = calloc(1, sizeof(char *));
    op->live[0] = strdup("live");
    op->nlive = 1;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->nrecords, 3);
    assert_int_equal(op->invalid_records, 1);
    assert_non_null(strstr(op->msg, "pvc-0007"));
    assert_int_equal(op->unrecorded, 2);
    assert_int_equal(op->n_unrecorded_names, 2);
    int seen_stray = 0, seen_stray2 = 0;
    for (size_t i = 0; i < op->n_unrecorded_names; i++) {
        seen_stray |= strcmp(op->unrecorded_names[i], "stray") == 0;
        seen_stray2 |= strcmp(op->unrecorded_names[i], "a/stray2") == 0;
    }
    assert_true(seen_stray && seen_stray2);
    hp_fsop_free(op);
    assert_false(lexists(f.pv, HP_JOURNAL_DIR "/records/.tmp-pvc-0009"));
    assert_false(lexists(f.pv, HP_JOURNAL_DIR "/staging/pvc-0008"));
    /* Nothing outside the journal was touched. */
    assert_true(lexists(f.pv, "stray"));
    assert_true(lexists(f.pv, "a/stray2"));
}

static void test_scan_settles_takeover(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    struct hp_record r;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "d", pvn(1), 0755), 0);
    assert_int_equal(release(f.pv, pvn(1), "d", HP_ON_DELETE_RETAIN, NULL, 0), 0);
    /* A takeover cut short: the new record is written, the old one not yet removed. */
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    free(r.pv);
    r.pv = strdup(pvn(2));
    r.adopted_from = strdup(pvn(1));
    r.state = HP_REC_CREATED;
    write_rec(f.pv, &r);
    hp_record_free(&r);
    op = hp_fsop_new(HP_FSOP_SCAN, f.pv);
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->nrecords, 1);
    assert_string_equal(op->records[0].pv, pvn(2));
    hp_fsop_free(op);
    assert_int_equal(read_rec(f.pv, pvn(1), &r), -ENOENT);
}

static void test_scan_marked_parents(void **state)
{
    struct fx f;
    struct hp_fsop *op;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "p/q/v", pvn(1), 0755), 0);
    /* A crash after the volume and its record went, before its parents did. */
    path_join(p, f.pv, "p/q/v");
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(run_simple(HP_FSOP_FORGET, f.pv, pvn(1), NULL, 0), 0);
    /* A later scan: the empty parents are ours (marked), not unrecorded... */
    op = hp_fsop_new(HP_FSOP_SCAN, f.pv);
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->unrecorded, 0);
    hp_fsop_free(op);
    assert_true(lexists(f.pv, "p/q"));
    /* ... and the start-up scan takes them away. A person's directory inside one of ours is
     * unrecorded, and keeps its parent. */
    assert_int_equal(provision(f.pv, "x/y/v", pvn(2), 0755), 0);
    path_join(p, f.pv, "x/y/v");
    assert_int_equal(rmdir(p), 0);
    assert_int_equal(run_simple(HP_FSOP_FORGET, f.pv, pvn(2), NULL, 0), 0);
    mkdir_in(f.pv, "x/person");
    op = hp_fsop_new(HP_FSOP_SCAN, f.pv);
    op->clean_leftovers = 1;
    hp_fsop_run(op);
    assert_int_equal(op->status, 0);
    assert_int_equal(op->unrecorded, 1);
    assert_string_equal(op->unrecorded_names[0], "x/person");
    hp_fsop_free(op);
    assert_false(lexists(f.pv, "p"));
    assert_false(lexists(f.pv, "x/y"));
    assert_true(lexists(f.pv, "x/person"));
}

/* ---- mounts (root only) ------------------------------------------------------------------- */

static char mounted[8][PATH_MAX];

static void note_mount(const char *dir)
{
    for (size_t i = 0; i < 8; i++) {
        if (!mounted[i][0]) {
            (void)snprintf(mounted[i], PATH_MAX, "%s", dir);
            return;
        }
    }
}

static void must_umount(const char *dir)
{
    if (umount2(dir, 0) != 0 && umount2(dir, MNT_DETACH) != 0)
        fail_msg("umount %s: %s", dir, strerror(errno));
    for (size_t i = 0; i < 8; i++)
        if (strcmp(mounted[i], dir) == 0)
            mounted[i][0] = '\0';
}

static void umount_leftovers(void)
{
    for (size_t i = 0; i < 8; i++)
        if (mounted[i][0])
            (void)umount2(mounted[i], MNT_DETACH);
}

static int try_mount_tmpfs(const char *dir, const char *opts)
{
    if (geteuid() != 0)
        return -EPERM;
    if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
        return -errno;
    note_mount(dir);
    return 0;
}

static int try_bind(const char *from, const char *dir)
{
    if (mount(from, dir, NULL, MS_BIND, NULL) != 0)
        return -errno;
    note_mount(dir);
    return 0;
}

static void test_enospc(void **state)
{
    struct fx f;
    char mnt[PATH_MAX], root[PATH_MAX], rel[16], msg[1024] = "";
    struct hp_fsop *op;
    int i, rc = 0;

    (void)state;
    fx_open(&f);
    path_join(mnt, f.dir, "small");
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (try_mount_tmpfs(mnt, "size=64k,nr_inodes=12") != 0)
        skip();
    path_join(root, mnt, "pv");
    for (i = 0; i < 20 && rc == 0; i++) {
        (void)snprintf(rel, sizeof(rel), "v%d", i);
        rc = provision_ex(root, rel, pvn(i), 0755, -1, -1, 0, NULL, &op);
        (void)snprintf(msg, sizeof(msg), "%s", op->msg);
        hp_fsop_free(op);
    }
    /* The failed attempt left no staging directory behind; its directory exists only if its
     * record does (the "created" update was what failed: a retry completes it). */
    char staged[PATH_MAX], recorded[PATH_MAX];
    (void)snprintf(staged, sizeof(staged), "%s/staging/%s", HP_JOURNAL_DIR, pvn(i - 1));
    (void)snprintf(recorded, sizeof(recorded), "%s/records/%s", HP_JOURNAL_DIR, pvn(i - 1));
    int staged_left = lexists(root, staged);
    int consistent = lexists(root, recorded) == lexists(root, rel);
    /* Deleting a volume still works on the full disk: that is how space comes back. */
    int rc_del = release(root, pvn(0), "v0", HP_ON_DELETE_DELETE, NULL, 0);
    int gone = !lexists(root, "v0");
    must_umount(mnt);
    assert_int_equal(staged_left, 0);
    assert_true(consistent);
    assert_int_equal(rc, -ENOSPC);
    assert_non_null(strstr(msg, "No space left on device"));
    assert_int_equal(rc_del, 0);
    assert_true(gone);
}

/* A disk too full for the record (on tmpfs a directory needs no data page, a file does) fails
 * the provisioning after its staging directory was made: the attempt leaves nothing behind. */
static void test_failed_record_write_leaves_nothing(void **state)
{
    struct fx f;
    char mnt[PATH_MAX], root[PATH_MAX], fill[PATH_MAX], staged[PATH_MAX], chunk[4096];
    int rc, staged_left, vol_left;

    (void)state;
    fx_open(&f);
    path_join(mnt, f.dir, "full");
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (try_mount_tmpfs(mnt, "size=256k") != 0)
        skip();
    path_join(root, mnt, "pv");
    assert_int_equal(provision(root, "first", pvn(0), 0750), 0); /* the journal exists */
    path_join(fill, mnt, "fill");
    int fd = open(fill, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 1024 && write(fd, chunk, sizeof(chunk)) == (ssize_t)sizeof(chunk); i++)
        ;
    (void)close(fd);
    rc = provision(root, "vol", pvn(1), 0750);
    (void)snprintf(staged, sizeof(staged), "%s/staging/%s", HP_JOURNAL_DIR, pvn(1));
    staged_left = lexists(root, staged);
    vol_left = lexists(root, "vol");
    must_umount(mnt);
    assert_int_equal(rc, -ENOSPC);
    assert_false(staged_left);
    assert_false(vol_left);
}

static void test_erofs(void **state)
{
    struct fx f;
    char mnt[PATH_MAX], root[PATH_MAX], msg[1024];
    int rc_reuse, rc_new, rc_rm;

    (void)state;
    fx_open(&f);
    path_join(mnt, f.dir, "ro");
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (try_mount_tmpfs(mnt, "size=1m") != 0)
        skip();
    path_join(root, mnt, "pv");
    assert_int_equal(provision(root, "vol", pvn(1), 0750), 0);
    assert_int_equal(mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
    rc_reuse = provision(root, "vol", pvn(1), 0750);
    rc_new = provision(root, "new", pvn(2), 0750);
    rc_rm = release(root, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg));
    must_umount(mnt);
    assert_int_equal(rc_reuse, 0); /* already made: nothing to write on a read-only mount */
    assert_int_equal(rc_new, -EROFS);
    assert_int_equal(rc_rm, -EROFS);
    assert_non_null(strstr(msg, "Read-only file system"));
}

static void test_remove_does_not_cross_mounts(void **state)
{
    struct fx f;
    char vol[PATH_MAX], mnt[PATH_MAX], bind[PATH_MAX], msg[1024];
    int rc, rc_leaf, tmpfs_survived, bind_survived;

    (void)state;
    fx_open(&f);
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    path_join(vol, f.pv, "vol");
    mkdir_in(vol, "sub");
    path_join(mnt, vol, "sub");
    mkdir_in(mnt, "mnt");
    path_join(mnt, vol, "sub/mnt");
    mkdir_in(vol, "bind");
    path_join(bind, vol, "bind");
    if (try_mount_tmpfs(mnt, "size=1m") != 0)
        skip();
    mkfile(mnt, "mounted", "m");
    /* A bind mount of the outside directory: same filesystem, different mount. */
    if (try_bind(f.out, bind) != 0) {
        must_umount(mnt);
        fail_msg("bind mount %s: %s", bind, strerror(errno));
    }
    mkfile(vol, "plain", "p");
    rc = release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, msg, sizeof(msg));
    tmpfs_survived = lexists(mnt, "mounted");
    bind_survived = lexists(f.out, "keep");
    must_umount(bind);
    must_umount(mnt);
    assert_int_equal(rc, -EXDEV);
    assert_non_null(strstr(msg, "mount point"));
    assert_true(tmpfs_survived);
    assert_true(bind_survived);
    outside_intact(&f);
    assert_false(lexists(vol, "plain")); /* the rest of the volume went */
    /* Unmounted, the leftovers are ordinary content and go. */
    assert_int_equal(release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, NULL, 0), 0);
    assert_false(lexists(f.pv, "vol"));

    /* The volume directory itself a mount point: left alone. */
    assert_int_equal(provision(f.pv, "leaf", pvn(2), 0755), 0);
    path_join(mnt, f.pv, "leaf");
    assert_int_equal(try_mount_tmpfs(mnt, "size=1m"), 0);
    mkfile(mnt, "mounted", "m");
    rc_leaf = release(f.pv, pvn(2), "leaf", HP_ON_DELETE_DELETE, NULL, 0);
    tmpfs_survived = lexists(mnt, "mounted");
    must_umount(mnt);
    assert_int_equal(rc_leaf, -EPERM); /* the mount's root is another inode than recorded */
    assert_true(tmpfs_survived);
}

/* The disk under the root unmounted while a volume exists: the root is an empty directory of
 * the parent filesystem. Nothing is removed, and after re-mounting the release completes. */
static void test_unmounted_disk(void **state)
{
    struct fx f;
    char disk[PATH_MAX], msg[1024];
    int rc_away, rc_back, kept;

    (void)state;
    fx_open(&f);
    path_join(disk, f.dir, "disk");
    assert_int_equal(mkdir(disk, 0755), 0);
    if (try_mount_tmpfs(disk, "size=1m") != 0)
        skip();
    assert_int_equal(mkdir(f.pv, 0755), 0);
    if (try_bind(disk, f.pv) != 0) {
        must_umount(disk);
        fail_msg("bind mount: %s", strerror(errno));
    }
    assert_int_equal(provision(f.pv, "vol", pvn(1), 0755), 0);
    struct hp_record r;
    assert_int_equal(read_rec(f.pv, pvn(1), &r), 0);
    must_umount(f.pv);
    /* As the loop does: it knows the filesystem from the record it holds. */
    struct hp_fsop *op = new_op(HP_FSOP_RELEASE, f.pv, pvn(1), "vol");
    op->action = HP_ON_DELETE_DELETE;
    op->have_expect_fs = 1;
    op->expect_fs.dev = r.dev;
    op->expect_fs.fsid = r.fsid;
    hp_fsop_run(op);
    rc_away = op->status;
    (void)snprintf(msg, sizeof(msg), "%s", op->msg);
    hp_fsop_free(op);
    kept = lexists(disk, "vol");
    (void)try_bind(disk, f.pv);
    rc_back = release(f.pv, pvn(1), "vol", HP_ON_DELETE_DELETE, NULL, 0);
    int gone = !lexists(disk, "vol");
    must_umount(f.pv);
    must_umount(disk);
    hp_record_free(&r);
    assert_true(rc_away == -ENOENT || rc_away == -EPERM);
    assert_true(kept);
    assert_int_equal(rc_back, 0);
    assert_true(gone);
    (void)msg;
}

/* ------------------------------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    if (S_ISDIR(st->st_mode))
        (void)chmod(path, 0755);
    (void)remove(path);
    return 0;
}

static int rm_chmod(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    if (S_ISDIR(st->st_mode))
        (void)chmod(path, 0755);
    return 0;
}

/* The one place a volume's absolute and relative paths are converted (fsops.h). */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_mode_ignores_umask),
        cmocka_unit_test(test_create_records_everything),
        cmocka_unit_test(test_existing_directory_is_never_taken_over),
        cmocka_unit_test(test_retry_is_idempotent),
        cmocka_unit_test(test_other_path_than_begun_is_refused),
        cmocka_unit_test(test_resume_after_crash),
        cmocka_unit_test(test_create_chown),
        cmocka_unit_test(test_create_refuses_symlinks),
        cmocka_unit_test(test_create_invalid_rel),
        cmocka_unit_test(test_pv_dir_symlink_allowed),
        cmocka_unit_test(test_adopt_retained),
        cmocka_unit_test(test_migrate),
        cmocka_unit_test(test_delete_tree_and_parents),
        cmocka_unit_test(test_parent_someone_uses_stays),
        cmocka_unit_test(test_release_refusals),
        cmocka_unit_test(test_release_missing_root_or_journal),
        cmocka_unit_test(test_release_gone_directory),
        cmocka_unit_test(test_retain_and_archive),
        cmocka_unit_test(test_archive_long_name),
        cmocka_unit_test(test_sweep_release_keeps_used),
        cmocka_unit_test(test_cleanup_only_own),
        cmocka_unit_test(test_remove_deep_tree),
        cmocka_unit_test(test_others_by_identity),
        cmocka_unit_test(test_others_refreshed_at_the_step),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_usage_abandoned),
        cmocka_unit_test(test_quota_provision),
        cmocka_unit_test(test_quota_provision_refused),
        cmocka_unit_test(test_quota_resume),
        cmocka_unit_test(test_quota_release),
        cmocka_unit_test(test_quota_limit),
        cmocka_unit_test(test_quota_usage_and_scan),
        cmocka_unit_test(test_scan),
        cmocka_unit_test(test_scan_settles_takeover),
        cmocka_unit_test(test_scan_marked_parents),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_failed_record_write_leaves_nothing),
        cmocka_unit_test(test_erofs),
        cmocka_unit_test(test_remove_does_not_cross_mounts),
        cmocka_unit_test(test_unmounted_disk),
    };
    int rc;

    umask(022);
    (void)snprintf(base_dir, sizeof(base_dir), "/tmp/hp-unit-fsops-XXXXXX");
    if (!mkdtemp(base_dir)) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests_name("fsops (openat2 where the kernel has it)", tests, NULL,
                                     NULL);
    atomic_store(&deny_openat2, 1);
    rc |= cmocka_run_group_tests_name("fsops (openat fallback)", tests, NULL, NULL);
    if (atomic_load(&openat2_denied) != 1) { /* the module must stop asking after one ENOSYS */
        fprintf(stderr, "openat2 was tried %d times after ENOSYS\n", atomic_load(&openat2_denied));
        rc = 1;
    }
    umount_leftovers();
    (void)nftw(base_dir, rm_chmod, 64, FTW_PHYS | FTW_MOUNT);
    (void)nftw(base_dir, rm_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return rc;
}
