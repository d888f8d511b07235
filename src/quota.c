/* quota: project quotas through the kernel (see quota.h).
 *
 * Any thread; blocking. The module keeps no state but the table of system calls, which only
 * tests replace (hp__quota_set_sys).
 *
 * How the probe tells the cases apart, from the kernel's own answers (fs/quota/quota.c):
 *  - quotactl(Q_GETINFO) on the device "" is -ENOENT when the quotactl system call exists and
 *    -ENOSYS when the kernel was built without it (CONFIG_QUOTACTL);
 *  - quotactl_fd(-1, ...) is -EBADF when the system call exists (Linux 5.14+), -ENOSYS before;
 *  - Q_XQUOTASYNC does nothing and answers 0 on any filesystem with quota operations, -ENOSYS on
 *    one without (tmpfs, or XFS built without CONFIG_XFS_QUOTA);
 *  - Q_XGETQSTATV reports accounting and enforcement per quota type for XFS and ext4 alike, and
 *    is -ENOSYS when no quota of any type is on for the filesystem.
 */
#include "hostpath/quota.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/dqblk_xfs.h>
#include <linux/fs.h>

#include "hostpath/buf.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443 /* the same number on every architecture */
#endif

/* glibc's QCMD shifts a signed int past its range (undefined behaviour, which UBSan reports):
 * the same bits, computed unsigned. */
#define HP_QCMD(cmd, type)                                                                       \
    ((int)(((unsigned)(cmd) << SUBCMDSHIFT) | ((unsigned)(type) & SUBCMDMASK)))

#define XFS_MAGIC 0x58465342L
#define EXT4_MAGIC 0xEF53L
#define MOUNTINFO_MAX (16u << 20)

/* ---- system calls ---- */

static int real_quotactl(int cmd, const char *special, int id, void *addr)
{
    return quotactl(cmd, special, id, (caddr_t)addr) == 0 ? 0 : -errno;
}

static int real_quotactl_fd(int fd, int cmd, int id, void *addr)
{
    return syscall(SYS_quotactl_fd, fd, cmd, id, addr) == 0 ? 0 : -errno;
}

static int real_fstatfs_type(int fd, long *f_type)
{
    struct statfs sf;

    if (fstatfs(fd, &sf) != 0)
        return -errno;
    *f_type = (long)sf.f_type;
    return 0;
}

static int real_fsgetxattr(int fd, void *fa)
{
    return ioctl(fd, FS_IOC_FSGETXATTR, fa) == 0 ? 0 : -errno;
}

static int real_fssetxattr(int fd, const void *fa)
{
    return ioctl(fd, FS_IOC_FSSETXATTR, fa) == 0 ? 0 : -errno;
}

static const struct hp__quota_sys real_sys = {
    .quotactl = real_quotactl,
    .quotactl_fd = real_quotactl_fd,
    .fstatfs_type = real_fstatfs_type,
    .mountinfo_path = "/proc/self/mountinfo",
    .dev_block_dir = "/dev/block",
    .fsgetxattr = real_fsgetxattr,
    .fssetxattr = real_fssetxattr,
};

static const struct hp__quota_sys *sys = &real_sys;

void hp__quota_set_sys(const struct hp__quota_sys *s)
{
    sys = s ? s : &real_sys;
}

static int fsgetxattr(int fd, struct fsxattr *fa)
{
    return (sys->fsgetxattr ? sys->fsgetxattr : real_fsgetxattr)(fd, fa);
}

static int fssetxattr(int fd, const struct fsxattr *fa)
{
    return (sys->fssetxattr ? sys->fssetxattr : real_fssetxattr)(fd, fa);
}

/* ---- names for messages ---- */

const char *hp_quota_kind_name(enum hp_quota_kind kind)
{
    switch (kind) {
    case HP_QUOTA_XFS:
        return "xfs";
    case HP_QUOTA_EXT4:
        return "ext4";
    case HP_QUOTA_OTHER:
        break;
    }
    return "other";
}

/* A filesystem's name from its statfs magic, for messages where mountinfo was not read. */
static void magic_name(long magic, char *out, size_t outlen)
{
    static const struct {
        long magic;
        const char *name;
    } names[] = {
        {XFS_MAGIC, "xfs"},           {EXT4_MAGIC, "ext4"},       {0x01021994L, "tmpfs"},
        {0x858458f6L, "ramfs"},       {0x9123683eL, "btrfs"},     {0x794c7630L, "overlay"},
        {0x6969L, "nfs"},             {0x01021997L, "9p"},        {0x65735546L, "fuse"},
        {0x73717368L, "squashfs"},    {0x2fc12fc1L, "zfs"},       {0xf2f52010L, "f2fs"},
        {0x6a656a63L, "virtiofs"},
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (names[i].magic == magic) {
            snprintf(out, outlen, "%s", names[i].name);
            return;
        }
    }
    snprintf(out, outlen, "0x%lx", (unsigned long)magic);
}

/* What a descriptor names, for messages: its /proc/self/fd link, else "fd N". */
static void fd_name(int fd, char *out, size_t outlen)
{
    char link[64];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, out, outlen - 1);
    if (n <= 0) {
        snprintf(out, outlen, "fd %d", fd);
        return;
    }
    out[n] = '\0';
}

/* ---- mountinfo ---- */

/* Copies the next space-separated field of *p into out (decoding \NNN octal escapes), moving *p
 * past it. 0, or -EINVAL when there is none. */
static int next_field(const char **p, char *out, size_t outlen)
{
    const char *s = *p;
    size_t n = 0;

    while (*s == ' ')
        s++;
    if (*s == '\0' || *s == '\n')
        return -EINVAL;
    while (*s && *s != ' ' && *s != '\n') {
        char c = *s++;

        if (c == '\\' && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' &&
            s[2] >= '0' && s[2] <= '7') {
            c = (char)((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
            s += 3;
        }
        if (n + 1 < outlen)
            out[n++] = c;
    }
    if (outlen)
        out[n] = '\0';
    *p = s;
    return 0;
}

/* Parses one mountinfo line (up to its newline) into m. */
static int parse_mountinfo_line(const char *line, struct hp__mountinfo *m)
{
    char field[PATH_MAX];
    const char *p = line;
    char *end;
    unsigned long maj, min;

    memset(m, 0, sizeof(*m));
    /* mount ID, parent ID */
    if (next_field(&p, field, sizeof(field)) || next_field(&p, field, sizeof(field)))
        return -EINVAL;
    if (next_field(&p, field, sizeof(field)))
        return -EINVAL;
    errno = 0;
    maj = strtoul(field, &end, 10);
    if (errno || end == field || *end != ':')
        return -EINVAL;
    min = strtoul(end + 1, &end, 10);
    if (errno || *end != '\0' || maj > 0xfffff || min > 0xfffff)
        return -EINVAL;
    m->major = (unsigned)maj;
    m->minor = (unsigned)min;
    /* root within the filesystem, then the mount point, then the mount options */
    if (next_field(&p, field, sizeof(field)) ||
        next_field(&p, m->mountpoint, sizeof(m->mountpoint)) ||
        next_field(&p, field, sizeof(field)))
        return -EINVAL;
    /* optional fields up to "-" */
    for (;;) {
        if (next_field(&p, field, sizeof(field)))
            return -EINVAL;
        if (strcmp(field, "-") == 0)
            break;
    }
    if (next_field(&p, m->fstype, sizeof(m->fstype)) ||
        next_field(&p, m->source, sizeof(m->source)))
        return -EINVAL;
    if (next_field(&p, m->superopts, sizeof(m->superopts)))
        m->superopts[0] = '\0';
    return 0;
}

/* Whether mount point mp holds path (path is mp or lies below it). */
static int mount_holds(const char *mp, const char *path)
{
    size_t n = strlen(mp);

    if (strcmp(mp, "/") == 0)
        return path[0] == '/';
    return strncmp(mp, path, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int hp__quota_mountinfo_find(const char *text, unsigned major, unsigned minor, const char *path,
                             struct hp__mountinfo *out, char *err, size_t errlen)
{
    struct hp__mountinfo m;
    int found = 0;
    size_t best = 0;
    unsigned lineno = 0;

    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');

        lineno++;
        if (*line != '\n') {
            if (parse_mountinfo_line(line, &m) != 0) {
                size_t len = nl ? (size_t)(nl - line) : strlen(line);

                hp_seterr(err, errlen, "mountinfo line %u cannot be read: \"%.*s\"", lineno,
                          (int)(len > 200 ? 200 : len), line);
                return -EINVAL;
            }
            if (m.major == major && m.minor == minor) {
                size_t len = strlen(m.mountpoint);
                int holds = path && mount_holds(m.mountpoint, path);

                /* First match, else a longer mount point that holds the path. */
                if (!found || (holds && (best == 0 || len + 1 > best))) {
                    *out = m;
                    best = holds ? len + 1 : 0;
                    found = 1;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!found) {
        hp_seterr(err, errlen, "no mount of device %u:%u in mountinfo", major, minor);
        return -ENOENT;
    }
    return 0;
}

/* Reads the whole mountinfo file into a heap string (caller frees); NULL with errno set. */
static char *read_mountinfo(void)
{
    int fd = open(sys->mountinfo_path, O_RDONLY | O_CLOEXEC);
    size_t len = 0, cap = 16384;
    char *text;

    if (fd < 0)
        return NULL;
    text = hp_xmalloc(cap);
    for (;;) {
        ssize_t n;

        if (cap - len < 4096) {
            if (cap >= MOUNTINFO_MAX) {
                free(text);
                close(fd);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            text = hp_xrealloc(text, cap);
        }
        n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;

            free(text);
            close(fd);
            errno = e;
            return NULL;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    text[len] = '\0';
    return text;
}

/* ---- the probe ---- */

/* The block device node of dev, for quotactl(2): mountinfo's source when it is that device,
 * else /dev/block/MAJ:MIN (udev's links). 0 with out set, or -ENODEV. */
static int find_device_node(const struct hp_quota_fs *fs, char *out, size_t outlen)
{
    char alt[PATH_MAX];
    const char *cands[2];
    struct stat st;

    snprintf(alt, sizeof(alt), "%s/%u:%u", sys->dev_block_dir, major(fs->dev), minor(fs->dev));
    cands[0] = fs->source[0] == '/' ? fs->source : NULL;
    cands[1] = alt;
    for (size_t i = 0; i < 2; i++) {
        if (cands[i] && stat(cands[i], &st) == 0 && S_ISBLK(st.st_mode) &&
            st.st_rdev == fs->dev) {
            snprintf(out, outlen, "%s", cands[i]);
            return 0;
        }
    }
    return -ENODEV;
}

/* One quotactl command on fs, through quotactl_fd or the device node. */
static int qctl(const struct hp_quota_fs *fs, int fd, int cmd, uint32_t id, void *addr)
{
    if (fs->via_fd)
        return sys->quotactl_fd(fd, cmd, (int)id, addr);
    return sys->quotactl(cmd, fs->qdevice, (int)id, addr);
}

/* "ext4 at /mnt/d (/dev/sdb)": the filesystem as an operator names it. */
static void describe(const struct hp_quota_fs *fs, const char *name, char *out, size_t outlen)
{
    const char *where = fs->mountpoint[0] ? fs->mountpoint : name;

    if (fs->source[0])
        snprintf(out, outlen, "%s at %s (%s)", fs->fstype, where, fs->source);
    else
        snprintf(out, outlen, "%s at %s", fs->fstype, where);
}

/* Whether the kernel has the quotactl system call at all: with one, an empty device name is
 * -ENOENT (not NULL, which valgrind reports as an unaddressable argument). */
static int kernel_has_quotactl(void)
{
    struct if_dqinfo info;

    return sys->quotactl(HP_QCMD(Q_GETINFO, PRJQUOTA), "", 0, &info) != -ENOSYS;
}

/* Finds how to reach fs's quotas (fs->via_fd, fs->qdevice): 0, or a refusal with its reason. */
static int reach_quotas(struct hp_quota_fs *fs, int fd, const char *what, char *err,
                        size_t errlen)
{
    int has_fd = sys->quotactl_fd(-1, HP_QCMD(Q_XQUOTASYNC, PRJQUOTA), 0, NULL) != -ENOSYS;
    int rc;

    if (has_fd) {
        fs->via_fd = 1;
        rc = sys->quotactl_fd(fd, HP_QCMD(Q_XQUOTASYNC, PRJQUOTA), 0, NULL);
    } else {
        if (find_device_node(fs, fs->qdevice, sizeof(fs->qdevice)) != 0) {
            hp_seterr(err, errlen,
                      "%s: this kernel has no quotactl_fd (Linux 5.14+) and no device node of "
                      "the filesystem (%u:%u) is in /dev: run on a newer kernel, or make its "
                      "block device visible here",
                      what, major(fs->dev), minor(fs->dev));
            return -ENODEV;
        }
        rc = sys->quotactl(HP_QCMD(Q_XQUOTASYNC, PRJQUOTA), fs->qdevice, 0, NULL);
    }
    if (rc == 0 || rc == -EROFS) /* -EROFS: reachable; the read-only mount is refused below */
        return rc;
    if (rc == -ENOSYS && fs->kind == HP_QUOTA_XFS) {
        hp_seterr(err, errlen,
                  "%s: this kernel's XFS has no quota support (built without "
                  "CONFIG_XFS_QUOTA): hard limits cannot be enforced on it",
                  what);
        return -ENOSYS;
    }
    if (rc == -ENOSYS) {
        hp_seterr(err, errlen,
                  "%s: this kernel has no quota support for %s (built without CONFIG_QUOTA): "
                  "hard limits cannot be enforced on it",
                  what, fs->fstype);
        return -ENOSYS;
    }
    if (rc == -EINVAL) {
        hp_seterr(err, errlen, "%s: this kernel's %s has no project quotas", what, fs->fstype);
        return -EOPNOTSUPP;
    }
    hp_seterr(err, errlen, "%s: quotactl%s failed: %s", what, fs->via_fd ? "_fd" : "",
              strerror(-rc));
    return rc;
}

/* Reads the project quota state flags (FS_QUOTA_PDQ_*) into fs->flags. */
static int read_state(struct hp_quota_fs *fs, int fd, const char *what, char *err,
                      size_t errlen)
{
    struct fs_quota_statv sv;
    int rc;

    memset(&sv, 0, sizeof(sv));
    sv.qs_version = FS_QSTATV_VERSION1;
    rc = qctl(fs, fd, HP_QCMD(Q_XGETQSTATV, PRJQUOTA), 0, &sv);
    if (rc == -EINVAL) { /* a kernel older than 3.12: the first version of the call */
        struct fs_quota_stat st;

        memset(&st, 0, sizeof(st));
        rc = qctl(fs, fd, HP_QCMD(Q_XGETQSTAT, PRJQUOTA), 0, &st);
        sv.qs_flags = st.qs_flags;
    }
    if (rc == -ENOSYS) { /* no quota of any type is on for this filesystem */
        fs->flags = 0;
        return 0;
    }
    if (rc < 0) {
        hp_seterr(err, errlen, "%s: reading its quota state failed: %s", what, strerror(-rc));
        return rc;
    }
    fs->flags = sv.qs_flags & (FS_QUOTA_PDQ_ACCT | FS_QUOTA_PDQ_ENFD);
    return 0;
}

/* Fills kind, fstype, dev, mountpoint and source. */
static int identify(int fd, const char *name, struct hp_quota_fs *fs, char *err, size_t errlen)
{
    struct hp__mountinfo m;
    struct stat st;
    long magic = 0;
    char *text;
    int rc;

    if (fstat(fd, &st) != 0) {
        rc = -errno;
        hp_seterr(err, errlen, "%s: %s", name, strerror(-rc));
        return rc;
    }
    fs->dev = st.st_dev;
    rc = sys->fstatfs_type(fd, &magic);
    if (rc < 0) {
        hp_seterr(err, errlen, "%s: statfs: %s", name, strerror(-rc));
        return rc;
    }
    fs->kind = magic == XFS_MAGIC ? HP_QUOTA_XFS
             : magic == EXT4_MAGIC ? HP_QUOTA_EXT4
                                   : HP_QUOTA_OTHER;
    magic_name(magic, fs->fstype, sizeof(fs->fstype));
    text = read_mountinfo();
    /* Without mountinfo the statfs name stands and messages name the path instead. */
    if (text && hp__quota_mountinfo_find(text, major(st.st_dev), minor(st.st_dev), name, &m,
                                         NULL, 0) == 0) {
        snprintf(fs->fstype, sizeof(fs->fstype), "%s", m.fstype);
        snprintf(fs->mountpoint, sizeof(fs->mountpoint), "%s", m.mountpoint);
        if (strcmp(m.source, "none") != 0)
            snprintf(fs->source, sizeof(fs->source), "%s", m.source);
    }
    free(text);
    return 0;
}

int hp_quota_probe(int fd, const char *label, struct hp_quota_fs *fs, char *err, size_t errlen)
{
    char path[PATH_MAX], what[3 * PATH_MAX];
    const char *name;
    int rc;

    memset(fs, 0, sizeof(*fs));
    snprintf(fs->fstype, sizeof(fs->fstype), "unknown");
    fd_name(fd, path, sizeof(path));
    name = label ? label : path;
    if (fd < 0) {
        hp_seterr(err, errlen, "quota probe: no descriptor (%d)", fd);
        return -EBADF;
    }
    rc = identify(fd, path, fs, err, errlen);
    if (rc < 0)
        return rc;
    describe(fs, name, what, sizeof(what));
    if (fs->kind == HP_QUOTA_OTHER) {
        hp_seterr(err, errlen,
                  "%s: filesystem %s has no project quotas: hard limits need XFS (mounted with "
                  "prjquota) or ext4 (made with -O quota,project, mounted with prjquota)",
                  name, fs->fstype);
        return -EOPNOTSUPP;
    }
    if (!kernel_has_quotactl()) {
        hp_seterr(err, errlen,
                  "%s: this kernel has no quota support (built without CONFIG_QUOTA / "
                  "CONFIG_QUOTACTL): hard limits cannot be enforced on this node",
                  what);
        return -ENOSYS;
    }
    rc = reach_quotas(fs, fd, what, err, errlen);
    if (rc == -EROFS) {
        hp_seterr(err, errlen, "%s is mounted read-only: limits cannot be set on it", what);
        return -EROFS;
    }
    if (rc < 0)
        return rc;
    rc = read_state(fs, fd, what, err, errlen);
    if (rc < 0)
        return rc;
    if (fs->kind == HP_QUOTA_XFS) {
        if (!(fs->flags & FS_QUOTA_PDQ_ACCT)) {
            hp_seterr(err, errlen,
                      "%s is not mounted with project quotas: unmount it and mount it with -o "
                      "prjquota (pquota), e.g. in its fstab options; a remount cannot turn XFS "
                      "quotas on, and for the root filesystem use rootflags=prjquota",
                      what);
            return -ESRCH;
        }
        if (!(fs->flags & FS_QUOTA_PDQ_ENFD)) {
            hp_seterr(err, errlen,
                      "%s counts project quotas but does not enforce them (pqnoenforce): "
                      "unmount it and mount it with -o prjquota instead",
                      what);
            return -ESRCH;
        }
        return 0;
    }
    if (!(fs->flags & FS_QUOTA_PDQ_ACCT)) {
        const char *dev = fs->source[0] == '/' ? fs->source : "DEVICE";

        hp_seterr(err, errlen,
                  "%s has no project quota accounting (its features quota and project are not "
                  "both on): unmount it, run tune2fs -O quota,project %s (or make it with "
                  "mkfs.ext4 -O quota,project), then mount it with -o prjquota",
                  what, dev);
        return -ESRCH;
    }
    if (!(fs->flags & FS_QUOTA_PDQ_ENFD)) {
        hp_seterr(err, errlen,
                  "%s counts project quotas but does not enforce them: unmount it and mount it "
                  "with -o prjquota (add prjquota to its fstab options; mount -o "
                  "remount,prjquota does not turn enforcement on, even where the mount options "
                  "then show prjquota)",
                  what);
        return -ESRCH;
    }
    return 0;
}

int hp_quota_probe_path(const char *path, struct hp_quota_fs *fs, char *err, size_t errlen)
{
    int fd, rc;

    memset(fs, 0, sizeof(*fs));
    snprintf(fs->fstype, sizeof(fs->fstype), "unknown");
    if (!path || !*path) {
        hp_seterr(err, errlen, "quota probe: no path");
        return -EINVAL;
    }
    fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        hp_seterr(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    rc = hp_quota_probe(fd, path, fs, err, errlen);
    close(fd);
    return rc;
}

/* ---- project IDs on directories ---- */

int hp_quota_set_project(int dirfd, uint32_t id, char *err, size_t errlen)
{
    char name[PATH_MAX], fsname[32];
    struct fsxattr fa;
    struct stat st;
    long magic = 0;
    int rc;

    fd_name(dirfd, name, sizeof(name));
    if (id > HP_QUOTA_ID_MAX) {
        hp_seterr(err, errlen, "%s: project ID %u is out of range (1..%u, 0 for none)", name, id,
                  HP_QUOTA_ID_MAX);
        return -EINVAL;
    }
    if (fstat(dirfd, &st) != 0) {
        rc = -errno;
        hp_seterr(err, errlen, "%s: %s", name, strerror(-rc));
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        hp_seterr(err, errlen, "%s: not a directory: a project ID is set on a volume directory",
                  name);
        return -ENOTDIR;
    }
    (void)sys->fstatfs_type(dirfd, &magic); /* for the message only */
    magic_name(magic, fsname, sizeof(fsname));
    if ((rc = fsgetxattr(dirfd, &fa)) < 0) {
        hp_seterr(err, errlen, "%s: reading its project ID failed: %s (filesystem %s)", name,
                  strerror(-rc), fsname);
        return rc == -ENOTTY ? -EOPNOTSUPP : rc;
    }
    fa.fsx_projid = id;
    if (id)
        fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    else
        fa.fsx_xflags &= ~(uint32_t)FS_XFLAG_PROJINHERIT;
    if ((rc = fssetxattr(dirfd, &fa)) == 0)
        return 0;
    if (rc == -ENOTTY)
        rc = -EOPNOTSUPP;
    if (rc == -EOPNOTSUPP)
        hp_seterr(err, errlen,
                  "%s: cannot set project ID %u: filesystem %s has no project IDs%s", name, id,
                  fsname,
                  magic == EXT4_MAGIC ? " (ext4 needs the project feature: tune2fs -O project)"
                                      : "");
    else if (rc == -EPERM)
        hp_seterr(err, errlen,
                  "%s: cannot set project ID %u: not permitted (needs CAP_FOWNER or the "
                  "directory's owner)",
                  name, id);
    else if (rc == -EINVAL)
        hp_seterr(err, errlen,
                  "%s: cannot set project ID %u: refused (in a user namespace project IDs "
                  "cannot be changed)",
                  name, id);
    else
        hp_seterr(err, errlen, "%s: cannot set project ID %u: %s", name, id, strerror(-rc));
    return rc;
}

int hp_quota_get_project(int fd, uint32_t *id, int *inherit, char *err, size_t errlen)
{
    char name[PATH_MAX];
    struct fsxattr fa;
    int rc;

    if ((rc = fsgetxattr(fd, &fa)) < 0) {
        fd_name(fd, name, sizeof(name));
        hp_seterr(err, errlen, "%s: reading its project ID failed: %s", name, strerror(-rc));
        return rc == -ENOTTY ? -EOPNOTSUPP : rc;
    }
    *id = fa.fsx_projid;
    if (inherit)
        *inherit = (fa.fsx_xflags & FS_XFLAG_PROJINHERIT) != 0;
    return 0;
}

/* ---- limits and usage ---- */

/* Checks that fs was probed and that fd lies on it. */
static int check_target(const struct hp_quota_fs *fs, int fd, uint32_t id, int id_zero_ok,
                        char *err, size_t errlen)
{
    char name[PATH_MAX];
    struct stat st;

    if (!fs || (fs->kind != HP_QUOTA_XFS && fs->kind != HP_QUOTA_EXT4)) {
        hp_seterr(err, errlen, "quota: no XFS or ext4 filesystem was probed");
        return -EINVAL;
    }
    if ((!id_zero_ok && id == 0) || id > HP_QUOTA_ID_MAX) {
        hp_seterr(err, errlen, "quota: project ID %u is out of range (1..%u)", id,
                  HP_QUOTA_ID_MAX);
        return -EINVAL;
    }
    if (fstat(fd, &st) != 0) {
        int rc = -errno;

        hp_seterr(err, errlen, "quota: descriptor %d: %s", fd, strerror(-rc));
        return rc;
    }
    if (st.st_dev != fs->dev) {
        fd_name(fd, name, sizeof(name));
        hp_seterr(err, errlen,
                  "%s is not on the filesystem probed (%s at %s, device %u:%u): is its disk "
                  "mounted?",
                  name, fs->fstype, fs->mountpoint[0] ? fs->mountpoint : "?", major(fs->dev),
                  minor(fs->dev));
        return -EXDEV;
    }
    return 0;
}

/* The reason for a failed quotactl on project id. */
static int qerr(const struct hp_quota_fs *fs, const char *verb, uint32_t id, int rc, char *err,
                size_t errlen)
{
    const char *hint = rc == -EPERM   ? " (needs CAP_SYS_ADMIN)"
                     : rc == -EROFS   ? " (the filesystem is read-only)"
                     : rc == -ESRCH   ? " (project quotas are off: was it remounted?)"
                     : rc == -ENOSYS ? " (project quotas are off: was it remounted?)"
                                     : "";

    hp_seterr(err, errlen, "%s at %s: %s project %u: %s%s", fs->fstype,
              fs->mountpoint[0] ? fs->mountpoint : "?", verb, id, strerror(-rc), hint);
    return rc;
}

static uint64_t ceil_div(uint64_t v, uint64_t unit)
{
    return v / unit + (v % unit != 0);
}

static void from_xfs(const struct fs_disk_quota *d, struct hp_quota_usage *u)
{
    u->bytes = (uint64_t)d->d_bcount << 9;
    u->inodes = d->d_icount;
    u->bytes_hard = (uint64_t)d->d_blk_hardlimit << 9;
    u->bytes_soft = (uint64_t)d->d_blk_softlimit << 9;
    u->inodes_hard = d->d_ino_hardlimit;
    u->inodes_soft = d->d_ino_softlimit;
}

static void from_vfs(const struct if_dqblk *d, struct hp_quota_usage *u)
{
    u->bytes = d->dqb_curspace;
    u->inodes = d->dqb_curinodes;
    u->bytes_hard = d->dqb_bhardlimit << 10; /* QIF_DQBLKSIZE: 1 KiB */
    u->bytes_soft = d->dqb_bsoftlimit << 10;
    u->inodes_hard = d->dqb_ihardlimit;
    u->inodes_soft = d->dqb_isoftlimit;
}

int hp_quota_set_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, uint64_t bytes_hard,
                       uint64_t inodes_hard, char *err, size_t errlen)
{
    int rc = check_target(fs, fd, id, 0, err, errlen);

    if (rc < 0)
        return rc;
    if (bytes_hard > (UINT64_MAX >> 10)) {
        hp_seterr(err, errlen, "quota: limit of %llu bytes is out of range",
                  (unsigned long long)bytes_hard);
        return -ERANGE;
    }
    if (fs->kind == HP_QUOTA_XFS) {
        struct fs_disk_quota d;

        memset(&d, 0, sizeof(d));
        d.d_version = FS_DQUOT_VERSION;
        d.d_flags = FS_PROJ_QUOTA;
        d.d_id = id;
        d.d_fieldmask = FS_DQ_BHARD | FS_DQ_BSOFT | FS_DQ_IHARD | FS_DQ_ISOFT;
        d.d_blk_hardlimit = ceil_div(bytes_hard, 512);
        d.d_ino_hardlimit = inodes_hard;
        rc = qctl(fs, fd, HP_QCMD(Q_XSETQLIM, PRJQUOTA), id, &d);
    } else {
        struct if_dqblk d;

        memset(&d, 0, sizeof(d));
        d.dqb_bhardlimit = ceil_div(bytes_hard, 1024);
        d.dqb_ihardlimit = inodes_hard;
        d.dqb_valid = QIF_LIMITS;
        rc = qctl(fs, fd, HP_QCMD(Q_SETQUOTA, PRJQUOTA), id, &d);
    }
    if (rc < 0)
        return qerr(fs, "setting the limits of", id, rc, err, errlen);
    return 0;
}

int hp_quota_clear_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, char *err,
                         size_t errlen)
{
    return hp_quota_set_limit(fs, fd, id, 0, 0, err, errlen);
}

int hp_quota_get(const struct hp_quota_fs *fs, int fd, uint32_t id, struct hp_quota_usage *u,
                 char *err, size_t errlen)
{
    int rc = check_target(fs, fd, id, 1, err, errlen);

    if (rc < 0)
        return rc;
    memset(u, 0, sizeof(*u));
    if (fs->kind == HP_QUOTA_XFS) {
        struct fs_disk_quota d;

        memset(&d, 0, sizeof(d));
        rc = qctl(fs, fd, HP_QCMD(Q_XGETQUOTA, PRJQUOTA), id, &d);
        if (rc == -ENOENT) /* XFS keeps no dquot for a project never seen */
            return 0;
        if (rc == 0)
            from_xfs(&d, u);
    } else {
        struct if_dqblk d;

        memset(&d, 0, sizeof(d));
        rc = qctl(fs, fd, HP_QCMD(Q_GETQUOTA, PRJQUOTA), id, &d);
        if (rc == 0)
            from_vfs(&d, u);
    }
    if (rc < 0)
        return qerr(fs, "reading", id, rc, err, errlen);
    return 0;
}

/* One Q_XGETNEXTQUOTA / Q_GETNEXTQUOTA: the first ID >= from the kernel keeps, empty or not. */
static int next_raw(const struct hp_quota_fs *fs, int fd, uint32_t from, uint32_t *id,
                    struct hp_quota_usage *u)
{
    int rc;

    memset(u, 0, sizeof(*u));
    if (fs->kind == HP_QUOTA_XFS) {
        struct fs_disk_quota d;

        memset(&d, 0, sizeof(d));
        rc = qctl(fs, fd, HP_QCMD(Q_XGETNEXTQUOTA, PRJQUOTA), from, &d);
        if (rc == 0) {
            from_xfs(&d, u);
            *id = d.d_id;
        }
        return rc;
    }
    struct if_nextdqblk d;

    memset(&d, 0, sizeof(d));
    rc = qctl(fs, fd, HP_QCMD(Q_GETNEXTQUOTA, PRJQUOTA), from, &d);
    if (rc == 0) {
        struct if_dqblk b = {
            .dqb_bhardlimit = d.dqb_bhardlimit, .dqb_bsoftlimit = d.dqb_bsoftlimit,
            .dqb_curspace = d.dqb_curspace,     .dqb_ihardlimit = d.dqb_ihardlimit,
            .dqb_isoftlimit = d.dqb_isoftlimit, .dqb_curinodes = d.dqb_curinodes,
        };

        from_vfs(&b, u);
        *id = d.dqb_id;
    }
    return rc;
}

static int usage_empty(const struct hp_quota_usage *u)
{
    return !(u->bytes || u->inodes || u->bytes_hard || u->bytes_soft || u->inodes_hard ||
             u->inodes_soft);
}

int hp_quota_next(const struct hp_quota_fs *fs, int fd, uint32_t from, uint32_t *id,
                  struct hp_quota_usage *u, char *err, size_t errlen)
{
    int rc = check_target(fs, fd, from, 1, err, errlen);

    if (rc < 0)
        return rc;
    /* ext4 keeps an entry with no usage and no limits until the kernel drops it from its cache
     * (a released project, for a while): such an entry is skipped, as it would be gone. */
    for (;;) {
        uint32_t got = 0;

        rc = next_raw(fs, fd, from, &got, u);
        if (rc == -ENOENT)
            return rc; /* no project from there on: not a failure worth a reason */
        if (rc < 0)
            return qerr(fs, "listing from", from, rc, err, errlen);
        if (!usage_empty(u)) {
            *id = got;
            return 0;
        }
        if (got < from || got >= HP_QUOTA_ID_MAX) /* a kernel that went backwards: stop */
            return -ENOENT;
        from = got + 1;
    }
}

int hp_quota_id_in_use(const struct hp_quota_fs *fs, int fd, uint32_t id, int *in_use, char *err,
                       size_t errlen)
{
    struct hp_quota_usage u;
    int rc = hp_quota_get(fs, fd, id, &u, err, errlen);

    if (rc < 0)
        return rc;
    *in_use = !usage_empty(&u);
    return 0;
}
