/* quota: project quotas through the kernel -- probe a volume root, tag a directory with a
 * project ID, set and read a project's limits and usage. XFS (mounted with prjquota) and ext4
 * (features quota and project, mounted with prjquota).
 *
 * Any thread; every function blocks (the libuv threadpool, or a test). No state but what the
 * caller holds: struct hp_quota_fs is plain data, filled by hp_quota_probe and then passed, with
 * a descriptor on the same filesystem, to every other call.
 *
 * The kernel is called directly (the image has no shell and no xfs_quota): quotactl_fd(2)
 * (Linux 5.14+) on a descriptor, which needs no device node (a container has none), else
 * quotactl(2) on the block device that /proc/self/mountinfo names; FS_IOC_FSGETXATTR and
 * FS_IOC_FSSETXATTR for a directory's project ID and FS_XFLAG_PROJINHERIT. XFS is driven with
 * its own commands (Q_XSETQLIM, Q_XGETQUOTA, Q_XGETNEXTQUOTA), ext4 with the generic ones
 * (Q_SETQUOTA, Q_GETQUOTA, Q_GETNEXTQUOTA).
 *
 * What is enforced: a project's hard block limit (bytes, rounded up to the filesystem's unit)
 * and optionally its inode limit, for every process without CAP_SYS_RESOURCE (ext4 lets a
 * process with it write past a hard limit; XFS does not). Project ID 0 is "no project" and is
 * never limited.
 *
 * Errors: 0 or a negative errno, with a one-line reason for a person in the caller's err
 * buffer (hp_seterr; err may be NULL). Probe reasons say what to run or mount.
 *
 * Lifetime: no objects; struct hp_quota_fs and struct hp_quota_usage are plain memory the
 * caller owns (copy them freely).
 */
#ifndef HOSTPATH_QUOTA_H
#define HOSTPATH_QUOTA_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The largest project ID the kernel takes ((qid_t)-1 means "none"). */
#define HP_QUOTA_ID_MAX 0xfffffffeu

enum hp_quota_kind {
    HP_QUOTA_OTHER, /* a filesystem without project quotas here (tmpfs, btrfs, overlay, ...) */
    HP_QUOTA_XFS,
    HP_QUOTA_EXT4, /* the ext2/3/4 family (one driver, one magic number) */
};

/* A volume root's filesystem, as hp_quota_probe found it. */
struct hp_quota_fs {
    enum hp_quota_kind kind;
    char fstype[32];           /* as mountinfo names it ("xfs", "ext4", "tmpfs"), or "0x<magic>" */
    dev_t dev;                 /* st_dev of the probed root: every later call checks its fd */
    char mountpoint[PATH_MAX]; /* where it is mounted ("" when mountinfo does not say) */
    char source[PATH_MAX];     /* mountinfo's source ("/dev/sdb"), "" when unknown */
    int via_fd;                /* quotactl_fd answers; else quotactl(2) on qdevice */
    char qdevice[PATH_MAX];    /* the block device node quotactl(2) is given (when !via_fd) */
    unsigned flags;            /* FS_QUOTA_PDQ_ACCT / FS_QUOTA_PDQ_ENFD as the kernel said */
};

/* A project's counters and limits. Limits of 0 mean none. */
struct hp_quota_usage {
    uint64_t bytes;       /* space charged to the project now (ext4 includes reservations) */
    uint64_t inodes;
    uint64_t bytes_hard;  /* hard block limit, in bytes */
    uint64_t bytes_soft;
    uint64_t inodes_hard;
    uint64_t inodes_soft;
};

/* Probes the filesystem of fd (any descriptor on it; O_PATH will do): which filesystem, where
 * it is mounted, how to reach its quotas (quotactl_fd, else a device node), and whether project
 * quota accounting AND enforcement are on. label names it in reasons (the root's path; NULL: the
 * descriptor's /proc/self/fd link). 0 when project quotas can be enforced, else:
 *   -EOPNOTSUPP  the filesystem has no project quotas here (tmpfs, btrfs, ...);
 *   -ENOSYS      the kernel has no quota support (CONFIG_QUOTA / CONFIG_QUOTACTL, or
 *                CONFIG_XFS_QUOTA for XFS);
 *   -ESRCH       supported but not on: the filesystem is not made or mounted for project quotas
 *                (the reason says which mkfs/tune2fs/mount options);
 *   -ENODEV      quotactl_fd is missing (Linux < 5.14) and no device node of the filesystem
 *                can be opened;
 *   another      what a system call answered (-EPERM without CAP_SYS_ADMIN, ...).
 * fs is filled as far as the probe got (kind and fstype always) whatever it returns. */
int hp_quota_probe(int fd, const char *label, struct hp_quota_fs *fs, char *err, size_t errlen);

/* hp_quota_probe on the directory at path (opened O_PATH|O_DIRECTORY, closed again); -errno
 * of the open with a reason when it cannot be opened. */
int hp_quota_probe_path(const char *path, struct hp_quota_fs *fs, char *err, size_t errlen);

/* Sets the project ID of the directory dirfd to id, with FS_XFLAG_PROJINHERIT, so that what is
 * made inside inherits it; id 0 takes the directory out of every project (and clears the
 * flag). Only the directory itself changes (what it already holds keeps its ID: tag a new,
 * empty directory). dirfd is an open directory (not O_PATH: this is an ioctl). -EINVAL for
 * an id above HP_QUOTA_ID_MAX; -ENOTDIR for a descriptor that is not a directory; -EOPNOTSUPP
 * where the filesystem has no project IDs (tmpfs; ext4 without the project feature). Needs
 * CAP_FOWNER or the directory's ownership, in the initial user namespace. */
int hp_quota_set_project(int dirfd, uint32_t id, char *err, size_t errlen);

/* Reads the project ID of fd (a directory or file, not O_PATH) and whether it has
 * FS_XFLAG_PROJINHERIT (inherit may be NULL). */
int hp_quota_get_project(int fd, uint32_t *id, int *inherit, char *err, size_t errlen);

/* Sets project id's hard limits on fs (fd: any descriptor on it, O_PATH will do; its volume
 * root for one):
 * bytes_hard (rounded up to 1 KiB on ext4, 512 bytes on XFS) and inodes_hard, soft limits none;
 * 0 means no limit. Raising or lowering takes effect at once, online. id 1..HP_QUOTA_ID_MAX;
 * -EXDEV when fd is not on the filesystem fs describes. Needs CAP_SYS_ADMIN. */
int hp_quota_set_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, uint64_t bytes_hard,
                       uint64_t inodes_hard, char *err, size_t errlen);

/* hp_quota_set_limit(fs, fd, id, 0, 0): the project is no longer limited. */
int hp_quota_clear_limit(const struct hp_quota_fs *fs, int fd, uint32_t id, char *err,
                         size_t errlen);

/* Reads project id's usage and limits into *u (all zero for a project the filesystem has never
 * seen). Usage counts what carries the ID, without walking a directory. */
int hp_quota_get(const struct hp_quota_fs *fs, int fd, uint32_t id, struct hp_quota_usage *u,
                 char *err, size_t errlen);

/* The first project with an ID >= from that has usage or a limit: 0 with *id and *u set,
 * -ENOENT when there is none. Walk them all with from = previous id + 1 (stop after
 * HP_QUOTA_ID_MAX). Project 0 is listed when it has usage (files outside any project). Entries
 * the kernel still keeps with nothing in them (ext4, for a while after a release) are skipped. */
int hp_quota_next(const struct hp_quota_fs *fs, int fd, uint32_t from, uint32_t *id,
                  struct hp_quota_usage *u, char *err, size_t errlen);

/* Whether project id is still in use on fs: something carries it (inodes or bytes charged) or
 * it has a limit. *in_use 1 or 0. An ID is free for reuse only when this says 0 after every
 * directory tagged with it is gone or retagged (hp_quota_set_project(dirfd, 0)) and its limit
 * cleared. A removed file still counts while a process holds it open, and XFS frees inodes in
 * the background: right after a removal the answer may still be 1 (syncfs(fd) waits for XFS);
 * either way it errs toward "in use", never toward reuse. */
int hp_quota_id_in_use(const struct hp_quota_fs *fs, int fd, uint32_t id, int *in_use, char *err,
                       size_t errlen);

/* The family name of a kind: "xfs", "ext4", "other". */
const char *hp_quota_kind_name(enum hp_quota_kind kind);

/* ---- for tests (tests/unit/test_quota.c) ---- */

/* One line of /proc/self/mountinfo, as far as the probe needs it. */
struct hp__mountinfo {
    unsigned major, minor;
    char mountpoint[PATH_MAX];
    char fstype[32];
    char source[PATH_MAX];
    char superopts[512];
};

/* Finds in mountinfo text (NUL-terminated) the mount of device major:minor that holds path: of
 * the lines with that device, the one whose mount point is the longest prefix of path (whole
 * components); when path is NULL or none is a prefix, the first. Octal escapes (\040) are
 * decoded. 0, -ENOENT when no line has the device, -EINVAL for a line that cannot be read (it
 * says which in err). */
int hp__quota_mountinfo_find(const char *text, unsigned major, unsigned minor, const char *path,
                             struct hp__mountinfo *out, char *err, size_t errlen);

/* The system calls the module makes, replaceable in tests. Each returns 0 or a negative
 * errno. */
struct hp__quota_sys {
    int (*quotactl)(int cmd, const char *special, int id, void *addr);
    int (*quotactl_fd)(int fd, int cmd, int id, void *addr);
    int (*fstatfs_type)(int fd, long *f_type); /* statfs f_type */
    const char *mountinfo_path;                /* "/proc/self/mountinfo" */
    const char *dev_block_dir;                 /* "/dev/block" (udev's MAJ:MIN links) */
    /* FS_IOC_FSGETXATTR / FS_IOC_FSSETXATTR on fd (struct fsxattr *); NULL: the real ioctl. A
     * kernel without project IDs on its test filesystem is stood in for by these. */
    int (*fsgetxattr)(int fd, void *fsxattr);
    int (*fssetxattr)(int fd, const void *fsxattr);
};

/* Replaces the system calls (tests only; not thread-safe); NULL restores the real ones. */
void hp__quota_set_sys(const struct hp__quota_sys *sys);

#endif
