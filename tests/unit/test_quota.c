/* Unit tests for quota: mountinfo parsing, the probe's decisions and their messages for every
 * answer a kernel can give (the system calls replaced by a scripted fake), how limits and usage
 * are encoded for XFS and ext4, argument checks, and the refusals this host's real kernel gives
 * (tmpfs has no project quotas nor project IDs).
 *
 * The real behaviour -- EDQUOT past a limit, raising it online, usage read back -- needs a
 * kernel and filesystems with project quotas: tests/vm/quota_vm_test.c, in a virtual machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/dqblk_xfs.h>
#include <linux/fs.h>

#include <cmocka.h>

#include "hostpath/quota.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))
#define XFS_MAGIC 0x58465342L
#define EXT4_MAGIC 0xEF53L
#define TMPFS_MAGIC 0x01021994L

/* A reason is one line: no control character. */
static void assert_one_line(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20)
            fail_msg("control character 0x%02x in \"%s\"", (unsigned char)*s, s);
}

static void assert_has(const char *s, const char *want)
{
    if (!strstr(s, want))
        fail_msg("\"%s\" lacks \"%s\"", s, want);
}

/* ---- mountinfo ---- */

static const char MOUNTINFO[] =
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard\n"
    "40 27 8:16 / /mnt/disk\\040one rw,relatime shared:7 master:3 - xfs /dev/sdb "
    "rw,attr2,inode64,prjquota\n"
    "41 40 8:16 /vols /mnt/disk\\040one/vols rw - xfs /dev/sdb rw,prjquota\n"
    "42 27 8:16 /vols /srv/bind rw - xfs /dev/sdb rw,prjquota\n"
    "50 27 0:45 / /dev/shm rw - tmpfs none rw\n"
    "\n";

struct mi_case {
    const char *text;
    unsigned major, minor;
    const char *path;
    int rc;
    const char *mountpoint, *fstype, *source, *superopts;
    const char *err_has;
};

static const struct mi_case mi_cases[] = {
    {MOUNTINFO, 254, 0, "/work/x", 0, "/", "ext4", "/dev/vda", "rw,discard", NULL},
    /* the escaped space decoded; no path: the first line of the device */
    {MOUNTINFO, 8, 16, NULL, 0, "/mnt/disk one", "xfs", "/dev/sdb", "rw,attr2,inode64,prjquota",
     NULL},
    /* the longest mount point holding the path wins */
    {MOUNTINFO, 8, 16, "/mnt/disk one/vols/pvc-1", 0, "/mnt/disk one/vols", "xfs", "/dev/sdb",
     "rw,prjquota", NULL},
    {MOUNTINFO, 8, 16, "/srv/bind/pvc-2", 0, "/srv/bind", "xfs", "/dev/sdb", "rw,prjquota", NULL},
    /* a prefix that is not a whole component does not hold the path */
    {MOUNTINFO, 8, 16, "/srv/binder", 0, "/mnt/disk one", "xfs", "/dev/sdb",
     "rw,attr2,inode64,prjquota", NULL},
    /* a path that no mount of the device holds: the first */
    {MOUNTINFO, 8, 16, "/elsewhere", 0, "/mnt/disk one", "xfs", "/dev/sdb",
     "rw,attr2,inode64,prjquota", NULL},
    {MOUNTINFO, 0, 45, "/dev/shm/x", 0, "/dev/shm", "tmpfs", "none", "rw", NULL},
    {MOUNTINFO, 9, 9, "/", -ENOENT, NULL, NULL, NULL, NULL, "no mount of device 9:9"},
    {"", 8, 16, NULL, -ENOENT, NULL, NULL, NULL, NULL, "no mount of device 8:16"},
    /* no "-" separator */
    {"22 27 0:21 / /proc rw,relatime proc proc rw\n", 0, 21, NULL, -EINVAL, NULL, NULL, NULL,
     NULL, "mountinfo line 1 cannot be read"},
    /* a device number that is not one */
    {"1 1 254:0 / / rw - ext4 /dev/vda rw\n22 27 x:21 / /proc rw - proc proc rw\n", 0, 21, NULL,
     -EINVAL, NULL, NULL, NULL, NULL, "mountinfo line 2 cannot be read: \"22 27 x:21"},
    /* truncated after the fstype */
    {"22 27 0:21 / /proc rw - proc\n", 0, 21, NULL, -EINVAL, NULL, NULL, NULL, NULL,
     "line 1 cannot be read"},
    /* no trailing newline; no super options */
    {"22 27 0:21 / /proc rw - proc proc", 0, 21, NULL, 0, "/proc", "proc", "proc", "", NULL},
};

static void test_mountinfo(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES(mi_cases); i++) {
        const struct mi_case *c = &mi_cases[i];
        struct hp__mountinfo m;
        char err[512] = "";
        int rc = hp__quota_mountinfo_find(c->text, c->major, c->minor, c->path, &m, err,
                                          sizeof(err));

        if (rc != c->rc)
            fail_msg("case %zu: rc %d want %d (%s)", i, rc, c->rc, err);
        if (rc != 0) {
            assert_has(err, c->err_has);
            assert_one_line(err);
            continue;
        }
        if (strcmp(m.mountpoint, c->mountpoint) || strcmp(m.fstype, c->fstype) ||
            strcmp(m.source, c->source) || strcmp(m.superopts, c->superopts))
            fail_msg("case %zu: got mp=\"%s\" fs=\"%s\" src=\"%s\" opts=\"%s\"", i, m.mountpoint,
                     m.fstype, m.source, m.superopts);
        assert_int_equal(m.major, c->major);
        assert_int_equal(m.minor, c->minor);
    }
}

/* ---- a scripted kernel ---- */

static struct fake {
    long magic;
    int has_quotactl; /* quotactl(Q_GETINFO, ""): -ENOENT when it exists, -ENOSYS if not */
    int has_fd;       /* quotactl_fd(-1): -EBADF when it exists, -ENOSYS if not */
    int xsync;        /* Q_XQUOTASYNC */
    int statv_rc;     /* Q_XGETQSTATV */
    unsigned statv_flags;
    int stat_rc; /* Q_XGETQSTAT */
    unsigned stat_flags;
    int op_rc; /* set/get/next */
    struct fs_disk_quota xq;
    struct if_dqblk vq;
    uint32_t next_id;
    /* when list_n > 0, NEXT answers from this list: the first ID >= the one asked */
    size_t list_n;
    struct {
        uint32_t id;
        uint64_t inodes;
    } list[4];
    int next_calls;
    /* recorded */
    int fd_calls, dev_calls, last_cmd, last_fd;
    uint32_t last_id;
    char last_special[PATH_MAX];
    struct fs_disk_quota set_xq;
    struct if_dqblk set_vq;
} F;

static int fake_op(int cmd, uint32_t id, void *addr)
{
    int sub = (int)((unsigned)cmd >> SUBCMDSHIFT);

    assert_int_equal(cmd & SUBCMDMASK, PRJQUOTA);
    F.last_cmd = sub;
    F.last_id = id;
    switch (sub) {
    case Q_XQUOTASYNC:
        return F.xsync;
    case Q_XGETQSTATV: {
        struct fs_quota_statv *sv = addr;

        assert_int_equal(sv->qs_version, FS_QSTATV_VERSION1);
        if (F.statv_rc == 0)
            sv->qs_flags = (uint16_t)F.statv_flags;
        return F.statv_rc;
    }
    case Q_XGETQSTAT:
        if (F.stat_rc == 0)
            ((struct fs_quota_stat *)addr)->qs_flags = (uint16_t)F.stat_flags;
        return F.stat_rc;
    case Q_XSETQLIM:
        F.set_xq = *(struct fs_disk_quota *)addr;
        return F.op_rc;
    case Q_SETQUOTA:
        F.set_vq = *(struct if_dqblk *)addr;
        return F.op_rc;
    case Q_XGETQUOTA:
    case Q_XGETNEXTQUOTA:
        if (F.op_rc == 0) {
            *(struct fs_disk_quota *)addr = F.xq;
            if (sub == Q_XGETNEXTQUOTA)
                ((struct fs_disk_quota *)addr)->d_id = F.next_id;
        }
        return F.op_rc;
    case Q_GETQUOTA:
        if (F.op_rc == 0)
            *(struct if_dqblk *)addr = F.vq;
        return F.op_rc;
    case Q_GETNEXTQUOTA:
        F.next_calls++;
        if (F.list_n) {
            struct if_nextdqblk *n = addr;

            for (size_t i = 0; i < F.list_n; i++) {
                if (F.list[i].id >= id) {
                    memset(n, 0, sizeof(*n));
                    n->dqb_id = F.list[i].id;
                    n->dqb_curinodes = F.list[i].inodes;
                    return 0;
                }
            }
            return -ENOENT;
        }
        if (F.op_rc == 0) {
            struct if_nextdqblk *n = addr;

            n->dqb_bhardlimit = F.vq.dqb_bhardlimit;
            n->dqb_bsoftlimit = F.vq.dqb_bsoftlimit;
            n->dqb_curspace = F.vq.dqb_curspace;
            n->dqb_ihardlimit = F.vq.dqb_ihardlimit;
            n->dqb_isoftlimit = F.vq.dqb_isoftlimit;
            n->dqb_curinodes = F.vq.dqb_curinodes;
            n->dqb_id = F.next_id;
        }
        return F.op_rc;
    }
    fail_msg("unexpected quotactl command 0x%x", sub);
    return -EINVAL;
}

static int fake_quotactl(int cmd, const char *special, int id, void *addr)
{
    assert_non_null(special);
    if (!special[0]) {
        assert_int_equal((unsigned)cmd >> SUBCMDSHIFT, Q_GETINFO);
        return F.has_quotactl;
    }
    if (F.has_quotactl == -ENOSYS)
        return -ENOSYS;
    F.dev_calls++;
    snprintf(F.last_special, sizeof(F.last_special), "%s", special);
    return fake_op(cmd, (uint32_t)id, addr);
}

static int fake_quotactl_fd(int fd, int cmd, int id, void *addr)
{
    if (F.has_fd == -ENOSYS)
        return -ENOSYS;
    if (fd < 0)
        return -EBADF;
    F.fd_calls++;
    F.last_fd = fd;
    return fake_op(cmd, (uint32_t)id, addr);
}

static int fake_fstatfs_type(int fd, long *f_type)
{
    (void)fd;
    *f_type = F.magic;
    return 0;
}

struct fixture {
    char dir[PATH_MAX / 2];   /* a real directory: its st_dev is the "disk" */
    char mountinfo[PATH_MAX]; /* the scripted mountinfo */
    int fd;
    dev_t dev;
    struct hp__quota_sys sys;
};

/* Writes a mountinfo where the fixture's directory is on fstype from source, mounted at the
 * directory itself. */
static void write_mountinfo(struct fixture *fx, const char *fstype, const char *source)
{
    FILE *f = fopen(fx->mountinfo, "w");

    assert_non_null(f);
    fprintf(f, "1 0 254:99 / / rw - ext4 /dev/other rw\n");
    fprintf(f, "7 1 %u:%u / %s rw shared:3 - %s %s rw\n", major(fx->dev), minor(fx->dev),
            fx->dir, fstype, source);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    struct stat st;

    assert_non_null(fx);
    snprintf(fx->dir, sizeof(fx->dir), "%s/test_quota.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->mountinfo, sizeof(fx->mountinfo), "%s/mountinfo", fx->dir);
    fx->fd = open(fx->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fx->fd >= 0);
    assert_int_equal(fstat(fx->fd, &st), 0);
    fx->dev = st.st_dev;
    memset(&F, 0, sizeof(F));
    F.has_quotactl = -ENOENT;
    F.has_fd = -EBADF;
    fx->sys = (struct hp__quota_sys){.quotactl = fake_quotactl,
                                     .quotactl_fd = fake_quotactl_fd,
                                     .fstatfs_type = fake_fstatfs_type,
                                     .mountinfo_path = fx->mountinfo,
                                     .dev_block_dir = "/nonexistent/hp-test/dev/block"};
    hp__quota_set_sys(&fx->sys);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    hp__quota_set_sys(NULL);
    close(fx->fd);
    unlink(fx->mountinfo);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* ---- the probe, against every answer ---- */

struct probe_case {
    const char *name;
    long magic;
    const char *fstype, *source;
    int has_quotactl, has_fd, xsync, statv_rc;
    unsigned statv_flags;
    int stat_rc;
    unsigned stat_flags;
    int rc;
    enum hp_quota_kind kind;
    const char *err_has[3];
};

#define ACCT FS_QUOTA_PDQ_ACCT
#define ENFD FS_QUOTA_PDQ_ENFD
#define UQ (FS_QUOTA_UDQ_ACCT | FS_QUOTA_UDQ_ENFD)

static const struct probe_case probe_cases[] = {
    {"tmpfs", TMPFS_MAGIC, "tmpfs", "tmpfs", -ENOENT, -EBADF, 0, 0, 0, 0, 0, -EOPNOTSUPP,
     HP_QUOTA_OTHER, {"filesystem tmpfs has no project quotas", "XFS", "-O quota,project"}},
    {"btrfs", 0x9123683eL, "btrfs", "/dev/sdc", -ENOENT, -EBADF, 0, 0, 0, 0, 0, -EOPNOTSUPP,
     HP_QUOTA_OTHER, {"filesystem btrfs has no project quotas", NULL, NULL}},
    {"no quotactl in the kernel", XFS_MAGIC, "xfs", "/dev/sdb", -ENOSYS, -ENOSYS, 0, 0, 0, 0, 0,
     -ENOSYS, HP_QUOTA_XFS, {"xfs at ", "(/dev/sdb)", "kernel has no quota support (built "
                                                       "without CONFIG_QUOTA"}},
    {"no quotactl, ext4", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOSYS, -ENOSYS, 0, 0, 0, 0, 0,
     -ENOSYS, HP_QUOTA_EXT4, {"ext4 at ", "CONFIG_QUOTACTL", "cannot be enforced on this node"}},
    {"XFS without quota in the kernel", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, -ENOSYS, 0,
     0, 0, 0, -ENOSYS, HP_QUOTA_XFS, {"XFS has no quota support", "CONFIG_XFS_QUOTA", NULL}},
    {"XFS without prjquota", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, -ENOSYS, 0, 0, 0,
     -ESRCH, HP_QUOTA_XFS,
     {"is not mounted with project quotas", "mount it with -o prjquota (pquota)",
      "a remount cannot turn XFS quotas on"}},
    {"XFS with user quotas only", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, 0, UQ, 0, 0,
     -ESRCH, HP_QUOTA_XFS, {"is not mounted with project quotas", "-o prjquota", NULL}},
    {"XFS pqnoenforce", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, 0, ACCT, 0, 0, -ESRCH,
     HP_QUOTA_XFS, {"does not enforce them (pqnoenforce)", "-o prjquota", NULL}},
    {"XFS ready", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, 0, ACCT | ENFD, 0, 0, 0,
     HP_QUOTA_XFS, {NULL, NULL, NULL}},
    {"ext4 without quota features", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOENT, -EBADF, 0, -ENOSYS,
     0, 0, 0, -ESRCH, HP_QUOTA_EXT4,
     {"has no project quota accounting", "tune2fs -O quota,project /dev/sdb",
      "mkfs.ext4 -O quota,project"}},
    {"ext4 with user quota only", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOENT, -EBADF, 0, 0, UQ, 0, 0,
     -ESRCH, HP_QUOTA_EXT4, {"tune2fs -O quota,project", "then mount it with -o prjquota", NULL}},
    {"ext4 without a device name", EXT4_MAGIC, "ext4", "overlay", -ENOENT, -EBADF, 0, -ENOSYS, 0,
     0, 0, -ESRCH, HP_QUOTA_EXT4, {"tune2fs -O quota,project DEVICE", "(overlay)", NULL}},
    {"ext4 without prjquota", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOENT, -EBADF, 0, 0, ACCT, 0, 0,
     -ESRCH, HP_QUOTA_EXT4, {"counts project quotas but does not enforce them",
                             "unmount it and mount it with -o prjquota",
                             "remount,prjquota does not turn enforcement on"}},
    {"ext4 ready", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOENT, -EBADF, 0, 0, ACCT | ENFD | UQ, 0, 0,
     0, HP_QUOTA_EXT4, {NULL, NULL, NULL}},
    {"ext3 by name", EXT4_MAGIC, "ext3", "/dev/sdb", -ENOENT, -EBADF, 0, -ENOSYS, 0, 0, 0, -ESRCH,
     HP_QUOTA_EXT4, {"ext3 at ", "tune2fs", NULL}},
    {"a kernel before Q_XGETQSTATV", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, -EINVAL, 0,
     0, ACCT | ENFD, 0, HP_QUOTA_XFS, {NULL, NULL, NULL}},
    {"read-only", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, -EROFS, 0, 0, 0, 0, -EROFS,
     HP_QUOTA_XFS, {"is mounted read-only", NULL, NULL}},
    {"no project type", EXT4_MAGIC, "ext4", "/dev/sdb", -ENOENT, -EBADF, -EINVAL, 0, 0, 0, 0,
     -EOPNOTSUPP, HP_QUOTA_EXT4, {"has no project quotas", NULL, NULL}},
    {"state not readable", XFS_MAGIC, "xfs", "/dev/sdb", -ENOENT, -EBADF, 0, -EIO, 0, 0, 0, -EIO,
     HP_QUOTA_XFS, {"reading its quota state failed", NULL, NULL}},
    /* no quotactl_fd, and the device node mountinfo names is not there */
    {"old kernel, no device node", XFS_MAGIC, "xfs", "/dev/hp-test-no-such-disk", -ENOENT,
     -ENOSYS, 0, 0, ACCT | ENFD, 0, 0, -ENODEV, HP_QUOTA_XFS,
     {"no quotactl_fd (Linux 5.14+)", "no device node", "in /dev"}},
};

static void test_probe_answers(void **state)
{
    struct fixture *fx = *state;

    for (size_t i = 0; i < N_CASES(probe_cases); i++) {
        const struct probe_case *c = &probe_cases[i];
        struct hp_quota_fs fs;
        char err[1024] = "";
        int rc;

        memset(&F, 0, sizeof(F));
        F.magic = c->magic;
        F.has_quotactl = c->has_quotactl;
        F.has_fd = c->has_fd;
        F.xsync = c->xsync;
        F.statv_rc = c->statv_rc;
        F.statv_flags = c->statv_flags;
        F.stat_rc = c->stat_rc;
        F.stat_flags = c->stat_flags;
        write_mountinfo(fx, c->fstype, c->source);
        rc = hp_quota_probe(fx->fd, "/volumes", &fs, err, sizeof(err));
        if (rc != c->rc)
            fail_msg("%s: rc %d want %d (%s)", c->name, rc, c->rc, err);
        if (fs.kind != c->kind)
            fail_msg("%s: kind %d want %d", c->name, fs.kind, c->kind);
        assert_string_equal(fs.fstype, c->fstype);
        assert_true(fs.dev == fx->dev);
        assert_string_equal(fs.mountpoint, fx->dir);
        if (rc == 0) {
            assert_string_equal(err, "");
            assert_true(fs.via_fd);
            assert_true(fs.flags & FS_QUOTA_PDQ_ACCT);
            assert_true(fs.flags & FS_QUOTA_PDQ_ENFD);
            /* every quotactl went through the descriptor probed */
            assert_true(F.fd_calls > 0);
            assert_int_equal(F.dev_calls, 0);
            assert_int_equal(F.last_fd, fx->fd);
            continue;
        }
        for (size_t k = 0; k < 3; k++)
            if (c->err_has[k] && !strstr(err, c->err_has[k]))
                fail_msg("%s: \"%s\" lacks \"%s\"", c->name, err, c->err_has[k]);
        assert_one_line(err);
        /* Reasons name the filesystem where mountinfo says it is mounted, or the path. */
        if (c->kind == HP_QUOTA_OTHER)
            assert_has(err, "/volumes");
        else
            assert_has(err, fx->dir);
    }
}

/* Without mountinfo the statfs magic names the filesystem and the path stands in. */
static void test_probe_without_mountinfo(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[1024] = "";

    F.magic = XFS_MAGIC;
    F.statv_rc = -ENOSYS;
    unlink(fx->mountinfo);
    assert_int_equal(hp_quota_probe(fx->fd, "/volumes", &fs, err, sizeof(err)), -ESRCH);
    assert_string_equal(fs.fstype, "xfs");
    assert_string_equal(fs.mountpoint, "");
    assert_has(err, "xfs at /volumes is not mounted with project quotas");

    F.magic = 0x1234;
    assert_int_equal(hp_quota_probe(fx->fd, NULL, &fs, err, sizeof(err)), -EOPNOTSUPP);
    assert_string_equal(fs.fstype, "0x1234");
    assert_has(err, fx->dir); /* the descriptor's own path when no label is given */
    assert_has(err, "filesystem 0x1234 has no project quotas");
}

static void test_probe_path(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[1024] = "", path[PATH_MAX + 16];

    F.magic = EXT4_MAGIC;
    F.statv_flags = ACCT | ENFD;
    write_mountinfo(fx, "ext4", "/dev/sdb");
    assert_int_equal(hp_quota_probe_path(fx->dir, &fs, err, sizeof(err)), 0);
    assert_int_equal(fs.kind, HP_QUOTA_EXT4);
    assert_string_equal(fs.source, "/dev/sdb");

    snprintf(path, sizeof(path), "%s/missing", fx->dir);
    assert_int_equal(hp_quota_probe_path(path, &fs, err, sizeof(err)), -ENOENT);
    assert_has(err, path);
    assert_int_equal(hp_quota_probe_path(fx->mountinfo, &fs, err, sizeof(err)), -ENOTDIR);
    assert_int_equal(hp_quota_probe_path("", &fs, err, sizeof(err)), -EINVAL);
    assert_int_equal(hp_quota_probe_path(NULL, &fs, err, sizeof(err)), -EINVAL);
    assert_int_equal(hp_quota_probe(-1, "x", &fs, err, sizeof(err)), -EBADF);
    /* err may be NULL */
    assert_int_equal(hp_quota_probe_path(path, &fs, NULL, 0), -ENOENT);
}

/* ---- limits and usage, as encoded for each filesystem ---- */

/* A probed filesystem of kind on the fixture's directory. */
static void probed(struct fixture *fx, long magic, struct hp_quota_fs *fs)
{
    char err[512];

    F.magic = magic;
    F.statv_flags = ACCT | ENFD;
    write_mountinfo(fx, magic == XFS_MAGIC ? "xfs" : "ext4", "/dev/sdb");
    assert_int_equal(hp_quota_probe(fx->fd, NULL, fs, err, sizeof(err)), 0);
    F.fd_calls = 0;
    F.op_rc = 0;
}

static void test_set_limit_xfs(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[512] = "";

    probed(fx, XFS_MAGIC, &fs);
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 77, 10u << 20, 1000, err, sizeof(err)), 0);
    assert_int_equal(F.last_cmd, Q_XSETQLIM);
    assert_int_equal(F.last_id, 77);
    assert_int_equal(F.set_xq.d_version, FS_DQUOT_VERSION);
    assert_int_equal(F.set_xq.d_flags, FS_PROJ_QUOTA);
    assert_int_equal(F.set_xq.d_id, 77);
    assert_int_equal(F.set_xq.d_fieldmask, FS_DQ_BHARD | FS_DQ_BSOFT | FS_DQ_IHARD | FS_DQ_ISOFT);
    assert_int_equal(F.set_xq.d_blk_hardlimit, (10u << 20) / 512);
    assert_int_equal(F.set_xq.d_blk_softlimit, 0);
    assert_int_equal(F.set_xq.d_ino_hardlimit, 1000);
    /* a byte count that is not a whole unit rounds up, never down */
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 77, 1025, 0, err, sizeof(err)), 0);
    assert_int_equal(F.set_xq.d_blk_hardlimit, 3);
    assert_int_equal(F.set_xq.d_ino_hardlimit, 0);
    /* clearing: every limit 0, the same fields */
    assert_int_equal(hp_quota_clear_limit(&fs, fx->fd, 77, err, sizeof(err)), 0);
    assert_int_equal(F.set_xq.d_blk_hardlimit, 0);
    assert_int_equal(F.set_xq.d_fieldmask, FS_DQ_BHARD | FS_DQ_BSOFT | FS_DQ_IHARD | FS_DQ_ISOFT);
    assert_int_equal(F.fd_calls, 3);
    assert_int_equal(F.dev_calls, 0);
}

static void test_set_limit_ext4(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[512] = "";

    probed(fx, EXT4_MAGIC, &fs);
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, HP_QUOTA_ID_MAX, 3u << 30, 0, err,
                                        sizeof(err)),
                     0);
    assert_int_equal(F.last_cmd, Q_SETQUOTA);
    assert_int_equal(F.last_id, HP_QUOTA_ID_MAX);
    assert_int_equal(F.set_vq.dqb_valid, QIF_LIMITS);
    assert_int_equal(F.set_vq.dqb_bhardlimit, (3u << 30) / 1024);
    assert_int_equal(F.set_vq.dqb_bsoftlimit, 0);
    assert_int_equal(F.set_vq.dqb_ihardlimit, 0);
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 5, 1, 9, err, sizeof(err)), 0);
    assert_int_equal(F.set_vq.dqb_bhardlimit, 1);
    assert_int_equal(F.set_vq.dqb_ihardlimit, 9);
    /* the kernel's refusal, with its reason */
    F.op_rc = -EPERM;
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 5, 1, 0, err, sizeof(err)), -EPERM);
    assert_has(err, "setting the limits of project 5");
    assert_has(err, "CAP_SYS_ADMIN");
    assert_one_line(err);
}

static void test_get_and_next(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    struct hp_quota_usage u;
    char err[512] = "";
    uint32_t id = 0;
    int used = -1;

    probed(fx, XFS_MAGIC, &fs);
    F.xq.d_bcount = 2048; /* basic blocks of 512 bytes */
    F.xq.d_icount = 3;
    F.xq.d_blk_hardlimit = 4096;
    F.xq.d_ino_softlimit = 8;
    assert_int_equal(hp_quota_get(&fs, fx->fd, 9, &u, err, sizeof(err)), 0);
    assert_int_equal(F.last_cmd, Q_XGETQUOTA);
    assert_int_equal(u.bytes, 1u << 20);
    assert_int_equal(u.inodes, 3);
    assert_int_equal(u.bytes_hard, 2u << 20);
    assert_int_equal(u.inodes_soft, 8);
    F.next_id = 12;
    assert_int_equal(hp_quota_next(&fs, fx->fd, 10, &id, &u, err, sizeof(err)), 0);
    assert_int_equal(F.last_cmd, Q_XGETNEXTQUOTA);
    assert_int_equal(F.last_id, 10);
    assert_int_equal(id, 12);
    assert_int_equal(u.bytes, 1u << 20);
    /* XFS has no dquot for a project it never saw: nothing used */
    F.op_rc = -ENOENT;
    memset(&u, 0xa5, sizeof(u));
    assert_int_equal(hp_quota_get(&fs, fx->fd, 9, &u, err, sizeof(err)), 0);
    assert_int_equal(u.bytes, 0);
    assert_int_equal(u.bytes_hard, 0);
    assert_int_equal(hp_quota_id_in_use(&fs, fx->fd, 9, &used, err, sizeof(err)), 0);
    assert_int_equal(used, 0);
    assert_int_equal(hp_quota_next(&fs, fx->fd, 13, &id, &u, err, sizeof(err)), -ENOENT);

    probed(fx, EXT4_MAGIC, &fs);
    F.vq.dqb_curspace = 12345;
    F.vq.dqb_curinodes = 1;
    F.vq.dqb_bhardlimit = 100; /* KiB */
    assert_int_equal(hp_quota_get(&fs, fx->fd, 9, &u, err, sizeof(err)), 0);
    assert_int_equal(F.last_cmd, Q_GETQUOTA);
    assert_int_equal(u.bytes, 12345);
    assert_int_equal(u.inodes, 1);
    assert_int_equal(u.bytes_hard, 102400);
    F.next_id = 40;
    assert_int_equal(hp_quota_next(&fs, fx->fd, 0, &id, &u, err, sizeof(err)), 0);
    assert_int_equal(F.last_cmd, Q_GETNEXTQUOTA);
    assert_int_equal(id, 40);
    assert_int_equal(u.bytes_hard, 102400);
    F.op_rc = -EIO;
    assert_int_equal(hp_quota_get(&fs, fx->fd, 9, &u, err, sizeof(err)), -EIO);
    assert_has(err, "reading project 9");
    assert_int_equal(hp_quota_next(&fs, fx->fd, 0, &id, &u, err, sizeof(err)), -EIO);
    assert_has(err, "listing from project 0");
}

/* Listing skips entries the kernel keeps with nothing in them (ext4 after a release). */
static void test_next_skips_empty(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    struct hp_quota_usage u;
    char err[512] = "";
    uint32_t id = 0;

    probed(fx, EXT4_MAGIC, &fs);
    F.list_n = 4;
    F.list[0].id = 5;
    F.list[1].id = 9;
    F.list[2].id = 12;
    F.list[2].inodes = 1;
    F.list[3].id = 20;
    assert_int_equal(hp_quota_next(&fs, fx->fd, 0, &id, &u, err, sizeof(err)), 0);
    assert_int_equal(id, 12);
    assert_int_equal(u.inodes, 1);
    assert_int_equal(F.next_calls, 3);
    assert_int_equal(hp_quota_next(&fs, fx->fd, 13, &id, &u, err, sizeof(err)), -ENOENT);
    F.list_n = 1;
    F.list[0].id = HP_QUOTA_ID_MAX; /* an empty last entry ends the walk */
    assert_int_equal(hp_quota_next(&fs, fx->fd, 0, &id, &u, err, sizeof(err)), -ENOENT);
}

/* In use: anything charged, or any limit. */
static void test_id_in_use(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[512] = "";
    static const struct {
        uint64_t curspace, curinodes, bhard, bsoft, ihard, isoft;
        int used;
    } cases[] = {
        {0, 0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 1}, {4096, 0, 0, 0, 0, 0, 1},
        {0, 0, 1, 0, 0, 0, 1}, {0, 0, 0, 1, 0, 0, 1}, {0, 0, 0, 0, 1, 0, 1},
        {0, 0, 0, 0, 0, 1, 1},
    };

    probed(fx, EXT4_MAGIC, &fs);
    for (size_t i = 0; i < N_CASES(cases); i++) {
        int used = -1;

        F.vq = (struct if_dqblk){.dqb_curspace = cases[i].curspace,
                                 .dqb_curinodes = cases[i].curinodes,
                                 .dqb_bhardlimit = cases[i].bhard,
                                 .dqb_bsoftlimit = cases[i].bsoft,
                                 .dqb_ihardlimit = cases[i].ihard,
                                 .dqb_isoftlimit = cases[i].isoft};
        assert_int_equal(hp_quota_id_in_use(&fs, fx->fd, 3, &used, err, sizeof(err)), 0);
        if (used != cases[i].used)
            fail_msg("case %zu: in use %d want %d", i, used, cases[i].used);
    }
}

/* Arguments the kernel is never asked about. */
static void test_argument_checks(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs, other;
    struct hp_quota_usage u;
    char err[512] = "";
    uint32_t id;
    int used;

    probed(fx, XFS_MAGIC, &fs);
    /* project 0 can be read (what lies outside every project), never limited */
    assert_int_equal(hp_quota_id_in_use(&fs, fx->fd, 0, &used, err, sizeof(err)), 0);
    F.fd_calls = 0;
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 0, 1 << 20, 0, err, sizeof(err)), -EINVAL);
    assert_has(err, "project ID 0 is out of range");
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 0xffffffffu, 1, 0, err, sizeof(err)),
                     -EINVAL);
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 1, UINT64_MAX, 0, err, sizeof(err)),
                     -ERANGE);
    /* a descriptor on another filesystem than the one probed */
    other = fs;
    other.dev = makedev(major(fs.dev) + 1, 7);
    snprintf(other.mountpoint, sizeof(other.mountpoint), "/mnt/ssd1");
    assert_int_equal(hp_quota_set_limit(&other, fx->fd, 5, 1 << 20, 0, err, sizeof(err)),
                     -EXDEV);
    assert_has(err, "is not on the filesystem probed (xfs at /mnt/ssd1");
    assert_has(err, "is its disk mounted?");
    assert_int_equal(hp_quota_get(&other, fx->fd, 5, &u, err, sizeof(err)), -EXDEV);
    assert_int_equal(hp_quota_next(&other, fx->fd, 5, &id, &u, err, sizeof(err)), -EXDEV);
    /* a filesystem that was not probed (or was refused) */
    memset(&other, 0, sizeof(other));
    assert_int_equal(hp_quota_set_limit(&other, fx->fd, 5, 1, 0, err, sizeof(err)), -EINVAL);
    assert_has(err, "no XFS or ext4 filesystem was probed");
    assert_int_equal(hp_quota_set_limit(NULL, fx->fd, 5, 1, 0, err, sizeof(err)), -EINVAL);
    assert_int_equal(hp_quota_get(&fs, -1, 5, &u, err, sizeof(err)), -EBADF);
    assert_int_equal(F.fd_calls, 0); /* nothing reached the kernel */
}

/* The fallback to quotactl(2) on the device node: used when quotactl_fd is missing. */
static void test_device_fallback(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    char err[512] = "";

    /* With no node for the fixture's device the probe refuses (see probe_cases); here mountinfo
     * names the node of the disk the fixture is on, when this host has it in /dev. */
    char node[PATH_MAX];
    struct stat st;

    snprintf(node, sizeof(node), "/dev/block/%u:%u", major(fx->dev), minor(fx->dev));
    if (stat(node, &st) != 0 || !S_ISBLK(st.st_mode) || st.st_rdev != fx->dev) {
        /* try mountinfo's own source for this device */
        FILE *f = fopen("/proc/self/mountinfo", "r");
        char line[4096];

        node[0] = '\0';
        while (f && fgets(line, sizeof(line), f)) {
            struct hp__mountinfo m;

            if (hp__quota_mountinfo_find(line, major(fx->dev), minor(fx->dev), NULL, &m, NULL,
                                         0) == 0 &&
                stat(m.source, &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == fx->dev) {
                snprintf(node, sizeof(node), "%s", m.source);
                break;
            }
        }
        if (f)
            fclose(f);
    }
    if (!node[0])
        skip(); /* the temp directory's disk has no node here (a container, tmpfs) */
    F.magic = XFS_MAGIC;
    F.has_fd = -ENOSYS;
    F.statv_flags = ACCT | ENFD;
    write_mountinfo(fx, "xfs", node);
    assert_int_equal(hp_quota_probe(fx->fd, NULL, &fs, err, sizeof(err)), 0);
    assert_false(fs.via_fd);
    assert_string_equal(fs.qdevice, node);
    assert_int_equal(F.fd_calls, 0);
    assert_true(F.dev_calls > 0);
    assert_int_equal(hp_quota_set_limit(&fs, fx->fd, 8, 4096, 0, err, sizeof(err)), 0);
    assert_string_equal(F.last_special, node);
    assert_int_equal(F.last_cmd, Q_XSETQLIM);
}

/* ---- the real kernel of this host ---- */

/* A fresh directory on tmpfs (/dev/shm), or NULL when there is none. */
static int shm_dir(char *out, size_t outlen)
{
    struct statfs sf;

    if (statfs("/dev/shm", &sf) != 0 || (long)sf.f_type != TMPFS_MAGIC)
        return -1;
    snprintf(out, outlen, "/dev/shm/test_quota.XXXXXX");
    return mkdtemp(out) ? 0 : -1;
}

static void test_real_tmpfs(void **state)
{
    struct hp_quota_fs fs;
    char dir[64], err[1024] = "", file[128];
    uint32_t id = 1;
    int fd, inherit = -1, rc;

    (void)state;
    if (shm_dir(dir, sizeof(dir)) != 0)
        skip();
    assert_int_equal(hp_quota_probe_path(dir, &fs, err, sizeof(err)), -EOPNOTSUPP);
    assert_int_equal(fs.kind, HP_QUOTA_OTHER);
    assert_string_equal(fs.fstype, "tmpfs");
    assert_string_equal(fs.mountpoint, "/dev/shm");
    assert_has(err, dir);
    assert_has(err, "filesystem tmpfs has no project quotas");
    assert_one_line(err);

    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    rc = hp_quota_set_project(fd, 42, err, sizeof(err));
    assert_int_equal(rc, -EOPNOTSUPP);
    assert_has(err, "cannot set project ID 42");
    assert_has(err, "filesystem tmpfs has no project IDs");
    assert_has(err, dir);
    /* reading works where the kernel reports attributes (0, no inheritance) or is refused */
    rc = hp_quota_get_project(fd, &id, &inherit, err, sizeof(err));
    if (rc == 0) {
        assert_int_equal(id, 0);
        assert_int_equal(inherit, 0);
    } else {
        assert_int_equal(rc, -EOPNOTSUPP);
    }
    /* out of range, and not a directory */
    assert_int_equal(hp_quota_set_project(fd, 0xffffffffu, err, sizeof(err)), -EINVAL);
    assert_has(err, "out of range");
    snprintf(file, sizeof(file), "%s/f", dir);
    int ffd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(ffd >= 0);
    assert_int_equal(hp_quota_set_project(ffd, 5, err, sizeof(err)), -ENOTDIR);
    assert_has(err, "not a directory");
    close(ffd);
    unlink(file);
    close(fd);
    rmdir(dir);
}

/* The project ID ioctls through the replaceable table: what set_project asks of the kernel
 * (the ID, FS_XFLAG_PROJINHERIT set or cleared, the other flags kept) and how its refusals
 * read. */
static struct fsxattr xattr_fake;
static int xattr_set_rc;

static int fake_fsgetxattr(int fd, void *fa)
{
    (void)fd;
    memcpy(fa, &xattr_fake, sizeof(xattr_fake));
    return 0;
}

static int fake_fssetxattr(int fd, const void *fa)
{
    (void)fd;
    if (xattr_set_rc)
        return xattr_set_rc;
    memcpy(&xattr_fake, fa, sizeof(xattr_fake));
    return 0;
}

static void test_project_ioctls(void **state)
{
    struct fixture *fx = *state;
    char err[1024];
    uint32_t id = 0;
    int inherit = -1;

    fx->sys.fsgetxattr = fake_fsgetxattr;
    fx->sys.fssetxattr = fake_fssetxattr;
    F.magic = 0xEF53L;
    memset(&xattr_fake, 0, sizeof(xattr_fake));
    xattr_fake.fsx_xflags = FS_XFLAG_NOATIME;
    xattr_set_rc = 0;
    assert_int_equal(hp_quota_set_project(fx->fd, 1000123, err, sizeof(err)), 0);
    assert_int_equal(xattr_fake.fsx_projid, 1000123);
    assert_int_equal(xattr_fake.fsx_xflags, FS_XFLAG_NOATIME | FS_XFLAG_PROJINHERIT);
    assert_int_equal(hp_quota_get_project(fx->fd, &id, &inherit, err, sizeof(err)), 0);
    assert_int_equal(id, 1000123);
    assert_int_equal(inherit, 1);
    assert_int_equal(hp_quota_set_project(fx->fd, 0, err, sizeof(err)), 0);
    assert_int_equal(xattr_fake.fsx_projid, 0);
    assert_int_equal(xattr_fake.fsx_xflags, FS_XFLAG_NOATIME);
    /* ext4 without the project feature, and no permission */
    xattr_set_rc = -ENOTTY;
    assert_int_equal(hp_quota_set_project(fx->fd, 5, err, sizeof(err)), -EOPNOTSUPP);
    assert_has(err, "tune2fs -O project");
    xattr_set_rc = -EPERM;
    assert_int_equal(hp_quota_set_project(fx->fd, 5, err, sizeof(err)), -EPERM);
    assert_has(err, "CAP_FOWNER");
    assert_one_line(err);
}

/* The probe of this test's own temp directory on the real kernel: whatever it is, the answer is
 * one of the documented ones, consistent with the filesystem, with a one-line reason. */
static void test_real_probe(void **state)
{
    struct fixture *fx = *state;
    struct hp_quota_fs fs;
    struct statfs sf;
    char err[1024] = "";
    int rc;

    hp__quota_set_sys(NULL);
    assert_int_equal(fstatfs(fx->fd, &sf), 0);
    rc = hp_quota_probe(fx->fd, NULL, &fs, err, sizeof(err));
    print_message("probe of %s (%s): %d %s\n", fx->dir, fs.fstype, rc, err);
    if ((long)sf.f_type == XFS_MAGIC)
        assert_int_equal(fs.kind, HP_QUOTA_XFS);
    else if ((long)sf.f_type == EXT4_MAGIC)
        assert_int_equal(fs.kind, HP_QUOTA_EXT4);
    else
        assert_int_equal(rc, -EOPNOTSUPP);
    if (rc == 0) {
        assert_true(fs.flags & FS_QUOTA_PDQ_ENFD);
        return;
    }
    assert_true(rc == -EOPNOTSUPP || rc == -ENOSYS || rc == -ESRCH || rc == -ENODEV ||
                rc == -EPERM || rc == -EROFS);
    assert_true(err[0] != '\0');
    assert_one_line(err);
    if (fs.kind == HP_QUOTA_EXT4) {
        /* ext4 takes a project ID only with its project feature: else the reason says so */
        err[0] = '\0';
        rc = hp_quota_set_project(fx->fd, 7, err, sizeof(err));
        print_message("set_project on %s: %d %s\n", fx->dir, rc, err);
        if (rc == -EOPNOTSUPP)
            assert_has(err, "(ext4 needs the project feature: tune2fs -O project)");
        else if (rc != -EPERM)
            assert_int_equal(rc, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mountinfo),
        cmocka_unit_test_setup_teardown(test_probe_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_without_mountinfo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_limit_xfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_limit_ext4, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_and_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_skips_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_id_in_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argument_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_project_ioctls, setup, teardown),
        cmocka_unit_test(test_real_tmpfs),
        cmocka_unit_test_setup_teardown(test_real_probe, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
