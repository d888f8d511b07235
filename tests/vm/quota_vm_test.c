/* quota_vm_test: the quota module against a real kernel with project quotas, on XFS and ext4.
 * Runs as root inside the test VM (tests/vm/README.md); tests/meson.build runs it there as
 * the test "quota_vm" (suite vm).
 *
 *   quota_vm_test [--refused PATH:TEXT]... MOUNTPOINT...
 *
 * Each MOUNTPOINT is a filesystem made and mounted for project quotas (XFS -o prjquota; ext4
 * -O quota,project, -o prjquota). On each: the probe accepts it (and through quotactl(2) on the
 * device node as well as quotactl_fd); a volume directory gets a project ID that what is made
 * inside inherits; a hard limit of 8 MiB stops a writer at 8 MiB (EDQUOT on ext4; ENOSPC on XFS,
 * which reports a project's limit as a full disk) while the filesystem has room; statvfs of the
 * volume shows the limit as its size; raising it to
 * 16 MiB online lets the same writer go on to 16 MiB; the usage read back equals what the
 * files hold (st_blocks) without a walk; a second project on the same filesystem is limited on
 * its own; clearing the limit lets the writer past 16 MiB; after the directories are gone or
 * untagged and the limits cleared, no ID is in use any more. The writer runs without
 * CAP_SYS_RESOURCE, as a pod does: ext4 lets a holder of it past a hard limit (checked too).
 *
 * Each --refused PATH:TEXT is a filesystem the probe must refuse with TEXT in its reason (XFS
 * without prjquota, ext4 without the project feature, ...).
 *
 * Prints what it measured; exits 0 when every check held. Without HP_VM in the environment it
 * refuses to run (it formats nothing, but it changes quotas of the filesystems it is given).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/dqblk_xfs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "hostpath/quota.h"

#define MiB (1024ull * 1024)
#define LIMIT (8 * MiB)
#define SLACK (2 * MiB) /* how far below a limit EDQUOT may come (metadata, allocation units) */

static int failures;
static int checks;

/* Counts a check; prints it when it failed. cond is evaluated once; returns it. */
static int check(int ok, const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int check(int ok, const char *file, int line, const char *what, const char *fmt, ...)
{
    va_list ap;

    checks++;
    if (ok)
        return 1;
    failures++;
    printf("FAIL %s:%d: %s: ", file, line, what);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    return 0;
}

#define CHECK(cond, ...) ((void)check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__))

/* A check whose failure makes the rest of a filesystem's steps meaningless. */
#define REQUIRE(cond, ...)                                                                       \
    do {                                                                                         \
        if (!check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__))                            \
            return;                                                                              \
    } while (0)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- CAP_SYS_RESOURCE in the effective set (kept in the permitted one) ---- */

static void cap_resource(int on)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];

    if (syscall(SYS_capget, &h, d) != 0) {
        perror("capget");
        exit(2);
    }
    if (on)
        d[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective |= CAP_TO_MASK(CAP_SYS_RESOURCE);
    else
        d[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective &= ~CAP_TO_MASK(CAP_SYS_RESOURCE);
    if (syscall(SYS_capset, &h, d) != 0) {
        perror("capset");
        exit(2);
    }
}

/* ---- a writer ---- */

/* Appends 1 MiB chunks to path (fsync after each) until total reaches max bytes or a write
 * fails. Returns the bytes written; *err is the errno that stopped it (0: reached max). */
static uint64_t write_until(const char *path, uint64_t max, int *err)
{
    static char chunk[1 << 20];
    uint64_t total = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    *err = 0;
    if (fd < 0) {
        *err = errno;
        return 0;
    }
    memset(chunk, 0xab, sizeof(chunk));
    while (total < max) {
        size_t want = max - total < sizeof(chunk) ? (size_t)(max - total) : sizeof(chunk);
        ssize_t n = write(fd, chunk, want);

        if (n < 0) {
            *err = errno;
            break;
        }
        total += (uint64_t)n;
        if ((size_t)n < want) {
            continue; /* a short write: the next one says why */
        }
        if (fsync(fd) != 0) {
            *err = errno;
            break;
        }
    }
    if (close(fd) != 0 && !*err)
        *err = errno;
    return total;
}

/* st_blocks * 512 and inodes of dir and everything in it (one level: the test makes no
 * subdirectories). */
static void walk(const char *dir, uint64_t *bytes, uint64_t *inodes)
{
    struct stat st;
    DIR *d = opendir(dir);
    struct dirent *e;

    *bytes = 0;
    *inodes = 0;
    if (stat(dir, &st) == 0) {
        *bytes += (uint64_t)st.st_blocks * 512;
        *inodes += 1;
    }
    while (d && (e = readdir(d))) {
        char p[4096];

        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0) {
            *bytes += (uint64_t)st.st_blocks * 512;
            *inodes += 1;
        }
    }
    if (d)
        closedir(d);
}

/* The size statvfs reports for path: XFS and ext4 report a project's limit for a directory that
 * carries it with FS_XFLAG_PROJINHERIT (so kubelet's volume stats and df inside a pod show the
 * volume's size), the filesystem's size elsewhere. */
static uint64_t statvfs_size(const char *path, uint64_t *avail)
{
    struct statvfs sv;

    if (statvfs(path, &sv) != 0)
        return 0;
    if (avail)
        *avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    return (uint64_t)sv.f_blocks * sv.f_frsize;
}

static uint64_t file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- quotactl(2) on the device node only: the fallback for kernels before 5.14 ---- */

static int no_quotactl_fd(int fd, int cmd, int id, void *addr)
{
    (void)fd, (void)cmd, (void)id, (void)addr;
    return -ENOSYS;
}

static int dev_quotactl(int cmd, const char *special, int id, void *addr)
{
    return quotactl(cmd, special, id, (caddr_t)addr) == 0 ? 0 : -errno;
}

static int dev_fstatfs_type(int fd, long *f_type)
{
    struct statfs sf;

    if (fstatfs(fd, &sf) != 0)
        return -errno;
    *f_type = (long)sf.f_type;
    return 0;
}

static const struct hp__quota_sys device_only = {
    .quotactl = dev_quotactl,
    .quotactl_fd = no_quotactl_fd,
    .fstatfs_type = dev_fstatfs_type,
    .mountinfo_path = "/proc/self/mountinfo",
    .dev_block_dir = "/dev/block",
};

/* ---- one filesystem ---- */

static void test_device_path(const char *mnt, int rootfd, uint32_t id)
{
    struct hp_quota_fs fs;
    struct hp_quota_usage u;
    char err[1024] = "";
    int rc;

    hp__quota_set_sys(&device_only);
    rc = hp_quota_probe(rootfd, mnt, &fs, err, sizeof(err));
    CHECK(rc == 0, "probe through the device node: %d %s", rc, err);
    if (rc == 0) {
        CHECK(!fs.via_fd, "via_fd set without quotactl_fd");
        CHECK(strncmp(fs.qdevice, "/dev/", 5) == 0, "device node \"%s\"", fs.qdevice);
        rc = hp_quota_set_limit(&fs, rootfd, id, 3 * MiB, 7, err, sizeof(err));
        CHECK(rc == 0, "set through %s: %d %s", fs.qdevice, rc, err);
        rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
        CHECK(rc == 0 && u.bytes_hard == 3 * MiB && u.inodes_hard == 7,
              "read through %s: %d hard %llu inodes %llu %s", fs.qdevice, rc,
              (unsigned long long)u.bytes_hard, (unsigned long long)u.inodes_hard, err);
        rc = hp_quota_clear_limit(&fs, rootfd, id, err, sizeof(err));
        CHECK(rc == 0, "clear through %s: %d %s", fs.qdevice, rc, err);
        printf("  device path: probe, set, read, clear through quotactl(2) on %s\n",
               fs.qdevice);
    }
    hp__quota_set_sys(NULL);
}

static void test_fs(const char *mnt)
{
    char err[1024] = "", vol[512], volb[512], data[600], datab[600], over[600];
    struct hp_quota_fs fs;
    struct hp_quota_usage u;
    uint64_t w1, w2, w3, wb, wbytes, winodes, free_bytes = 0;
    uint32_t id = 1000, idb = 1001, got = 0, nid = 0; /* a fresh filesystem: any IDs */
    int rootfd, volfd, volbfd, filefd, e, rc, inherit = -1, used = -1, full;
    double t0 = now_s();

    printf("%s:\n", mnt);
    rootfd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(rootfd >= 0, "open %s: %s", mnt, strerror(errno));
    rc = hp_quota_probe(rootfd, mnt, &fs, err, sizeof(err));
    REQUIRE(rc == 0, "probe: %d %s", rc, err);
    printf("  probe: %s at %s (%s), quotactl_fd %d, flags 0x%x\n", fs.fstype, fs.mountpoint,
           fs.source, fs.via_fd, fs.flags);
    CHECK(fs.via_fd, "a 5.14+ kernel answers quotactl_fd");
    CHECK(fs.kind == HP_QUOTA_XFS || fs.kind == HP_QUOTA_EXT4, "kind %d", fs.kind);
    /* What a writer gets at a project's hard limit: XFS says ENOSPC for project quotas (the
     * project is the volume, and it is full), ext4 EDQUOT. */
    full = fs.kind == HP_QUOTA_XFS ? ENOSPC : EDQUOT;

    /* fresh IDs: nothing carries them */
    rc = hp_quota_id_in_use(&fs, rootfd, id, &used, err, sizeof(err));
    CHECK(rc == 0 && used == 0, "id %u before use: rc %d used %d %s", id, rc, used, err);

    /* a volume directory with its project */
    snprintf(vol, sizeof(vol), "%s/pvc-a", mnt);
    snprintf(volb, sizeof(volb), "%s/pvc-b", mnt);
    REQUIRE(mkdir(vol, 0777) == 0 && mkdir(volb, 0777) == 0, "mkdir: %s", strerror(errno));
    volfd = open(vol, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    volbfd = open(volb, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(volfd >= 0 && volbfd >= 0, "open volumes: %s", strerror(errno));
    rc = hp_quota_set_project(volfd, id, err, sizeof(err));
    REQUIRE(rc == 0, "set_project: %d %s", rc, err);
    rc = hp_quota_set_project(volbfd, idb, err, sizeof(err));
    REQUIRE(rc == 0, "set_project b: %d %s", rc, err);
    rc = hp_quota_get_project(volfd, &got, &inherit, err, sizeof(err));
    CHECK(rc == 0 && got == id && inherit == 1, "get_project: %d id %u inherit %d %s", rc, got,
          inherit, err);
    snprintf(data, sizeof(data), "%s/data", vol);
    filefd = open(data, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(filefd >= 0, "create %s: %s", data, strerror(errno));
    rc = hp_quota_get_project(filefd, &got, &inherit, err, sizeof(err));
    CHECK(rc == 0 && got == id && inherit == 0, "a new file inherits: %d id %u inherit %d", rc,
          got, inherit);
    close(filefd);
    rc = hp_quota_id_in_use(&fs, rootfd, id, &used, err, sizeof(err));
    CHECK(rc == 0 && used == 1, "id %u carried by a directory, no limit: used %d %s", id, used,
          err);

    /* the hard limit */
    rc = hp_quota_set_limit(&fs, rootfd, id, LIMIT, 0, err, sizeof(err));
    REQUIRE(rc == 0, "set_limit: %d %s", rc, err);
    rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
    CHECK(rc == 0 && u.bytes_hard == LIMIT && u.inodes_hard == 0, "limit read back: %llu",
          (unsigned long long)u.bytes_hard);
    rc = hp_quota_set_limit(&fs, rootfd, idb, 4 * MiB, 0, err, sizeof(err));
    REQUIRE(rc == 0, "set_limit b: %d %s", rc, err);

    CHECK(statvfs_size(vol, NULL) == LIMIT, "statvfs of the volume: %llu for a limit of %llu",
          (unsigned long long)statvfs_size(vol, NULL), LIMIT);

    cap_resource(0); /* a pod's writer */
    w1 = write_until(data, 64 * MiB, &e);
    printf("  limit %llu MiB: wrote %.2f MiB, then %s\n", LIMIT / MiB, (double)w1 / MiB,
           e ? strerror(e) : "no error");
    CHECK(e == full, "writing past the limit fails with %s, got %s", strerror(full),
          strerror(e));
    statvfs_size(mnt, &free_bytes);
    CHECK(free_bytes > 32 * MiB, "the filesystem itself has room: %llu bytes free",
          (unsigned long long)free_bytes);
    CHECK(w1 <= LIMIT && w1 + SLACK >= LIMIT, "stopped at %llu bytes for a %llu limit",
          (unsigned long long)w1, LIMIT);
    CHECK(file_size(data) == w1, "file size %llu", (unsigned long long)file_size(data));

    /* usage from the counters equals what a walk finds */
    sync();
    rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
    walk(vol, &wbytes, &winodes);
    printf("  usage: quota %llu bytes %llu inodes; walk %llu bytes %llu inodes\n",
           (unsigned long long)u.bytes, (unsigned long long)u.inodes,
           (unsigned long long)wbytes, (unsigned long long)winodes);
    CHECK(rc == 0 && u.bytes == wbytes && u.inodes == winodes, "quota usage != walk (%s)", err);
    CHECK(u.bytes <= LIMIT && u.bytes >= w1, "usage %llu within [%llu, limit]",
          (unsigned long long)u.bytes, (unsigned long long)w1);

    /* the other project is limited on its own: its room is untouched by the full one */
    snprintf(datab, sizeof(datab), "%s/data", volb);
    wb = write_until(datab, 3 * MiB, &e);
    CHECK(e == 0 && wb == 3 * MiB, "project b wrote %llu (%s) while a is full",
          (unsigned long long)wb, strerror(e));
    wb += write_until(datab, 64 * MiB, &e);
    CHECK(e == full && wb <= 4 * MiB && wb + SLACK >= 4 * MiB, "project b stopped at %llu (%s)",
          (unsigned long long)wb, strerror(e));

    /* raised online: the same writer goes on */
    rc = hp_quota_set_limit(&fs, rootfd, id, 2 * LIMIT, 0, err, sizeof(err));
    REQUIRE(rc == 0, "raise: %d %s", rc, err);
    w2 = write_until(data, 64 * MiB, &e);
    printf("  raised to %llu MiB online: wrote %.2f MiB more (%.2f MiB in all), then %s\n",
           2 * LIMIT / MiB, (double)w2 / MiB, (double)(w1 + w2) / MiB,
           e ? strerror(e) : "no error");
    CHECK(e == full, "past the raised limit: %s", strerror(e));
    CHECK(statvfs_size(vol, NULL) == 2 * LIMIT, "statvfs after raising: %llu",
          (unsigned long long)statvfs_size(vol, NULL));
    CHECK(w1 + w2 <= 2 * LIMIT && w1 + w2 + SLACK >= 2 * LIMIT, "stopped at %llu for %llu",
          (unsigned long long)(w1 + w2), 2 * LIMIT);
    sync();
    rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
    walk(vol, &wbytes, &winodes);
    CHECK(rc == 0 && u.bytes == wbytes && u.inodes == winodes,
          "after raising: quota %llu/%llu walk %llu/%llu", (unsigned long long)u.bytes,
          (unsigned long long)u.inodes, (unsigned long long)wbytes,
          (unsigned long long)winodes);

    /* ext4 lets CAP_SYS_RESOURCE past a hard limit; XFS does not */
    snprintf(over, sizeof(over), "%s/over", vol);
    cap_resource(1);
    w3 = write_until(over, 2 * MiB, &e);
    cap_resource(0);
    printf("  with CAP_SYS_RESOURCE at the limit: wrote %.2f MiB (%s)\n", (double)w3 / MiB,
           e ? strerror(e) : "no error");
    if (fs.kind == HP_QUOTA_EXT4)
        CHECK(e == 0 && w3 == 2 * MiB, "ext4 exempts CAP_SYS_RESOURCE: %s", strerror(e));
    else
        CHECK(e == full, "XFS limits CAP_SYS_RESOURCE too: %s", strerror(e));
    unlink(over);

    /* cleared: no limit any more */
    rc = hp_quota_clear_limit(&fs, rootfd, id, err, sizeof(err));
    REQUIRE(rc == 0, "clear: %d %s", rc, err);
    w3 = write_until(data, 4 * MiB, &e);
    CHECK(e == 0 && w3 == 4 * MiB, "after clearing: wrote %llu (%s)", (unsigned long long)w3,
          strerror(e));
    rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
    CHECK(rc == 0 && u.bytes_hard == 0 && u.bytes > 2 * LIMIT, "cleared: hard %llu usage %llu",
          (unsigned long long)u.bytes_hard, (unsigned long long)u.bytes);

    /* listing finds both projects */
    rc = hp_quota_next(&fs, rootfd, id, &nid, &u, err, sizeof(err));
    CHECK(rc == 0 && nid == id, "next from %u: %d id %u %s", id, rc, nid, err);
    rc = hp_quota_next(&fs, rootfd, id + 1, &nid, &u, err, sizeof(err));
    CHECK(rc == 0 && nid == idb && u.bytes_hard == 4 * MiB, "next from %u: %d id %u", id + 1,
          rc, nid);

    /* the device-node path, on a third ID */
    test_device_path(mnt, rootfd, idb + 1);

    /* release: the directory goes (a), or is untagged and kept (b); limits cleared */
    unlink(data);
    close(volfd);
    CHECK(rmdir(vol) == 0, "rmdir %s: %s", vol, strerror(errno));
    unlink(datab);
    rc = hp_quota_set_project(volbfd, 0, err, sizeof(err));
    CHECK(rc == 0, "untag b: %d %s", rc, err);
    rc = hp_quota_get_project(volbfd, &got, &inherit, err, sizeof(err));
    CHECK(rc == 0 && got == 0 && inherit == 0, "untagged: id %u inherit %d", got, inherit);
    rc = hp_quota_id_in_use(&fs, rootfd, idb, &used, err, sizeof(err));
    CHECK(rc == 0 && used == 1, "b's limit still set: in use %d", used);
    rc = hp_quota_clear_limit(&fs, rootfd, idb, err, sizeof(err));
    CHECK(rc == 0, "clear b: %d %s", rc, err);
    /* At once, before any sync: reported, not required (XFS frees inodes in the background). */
    rc = hp_quota_id_in_use(&fs, rootfd, id, &used, err, sizeof(err));
    printf("  id %u right after its directory's removal, before a sync: in use %d\n", id,
           rc == 0 ? used : rc);
    sync();
    rc = hp_quota_id_in_use(&fs, rootfd, id, &used, err, sizeof(err));
    CHECK(rc == 0 && used == 0, "id %u after release: in use %d %s", id, used, err);
    rc = hp_quota_id_in_use(&fs, rootfd, idb, &used, err, sizeof(err));
    CHECK(rc == 0 && used == 0, "id %u after release: in use %d %s", idb, used, err);
    rc = hp_quota_get(&fs, rootfd, id, &u, err, sizeof(err));
    CHECK(rc == 0 && u.bytes == 0 && u.inodes == 0, "a's counters: %llu bytes %llu inodes",
          (unsigned long long)u.bytes, (unsigned long long)u.inodes);
    rc = hp_quota_next(&fs, rootfd, id, &nid, &u, err, sizeof(err));
    CHECK(rc == -ENOENT || nid > idb + 1, "nothing listed from %u after release: %d id %u", id,
          rc, nid);
    close(volbfd);
    rmdir(volb);
    close(rootfd);
    cap_resource(1);
    printf("  %s done in %.1fs\n", mnt, now_s() - t0);
}

/* A filesystem the probe must refuse, with text in its reason. */
static void test_refused(const char *spec)
{
    char path[512], err[1024] = "";
    const char *colon = strchr(spec, ':');
    struct hp_quota_fs fs;
    int rc;

    if (!colon || (size_t)(colon - spec) >= sizeof(path)) {
        CHECK(0, "--refused %s: use PATH:TEXT", spec);
        return;
    }
    memcpy(path, spec, (size_t)(colon - spec));
    path[colon - spec] = '\0';
    rc = hp_quota_probe_path(path, &fs, err, sizeof(err));
    printf("%s: refused %d: %s\n", path, rc, err);
    CHECK(rc < 0, "%s was accepted", path);
    CHECK(strstr(err, colon + 1) != NULL, "reason lacks \"%s\"", colon + 1);
}

int main(int argc, char **argv)
{
    double t0 = now_s();
    int n = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!getenv("HP_VM")) {
        fprintf(stderr, "quota_vm_test: runs inside the test VM (tests/vm/vm.py), which sets "
                        "HP_VM\n");
        return 77;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--refused") == 0 && i + 1 < argc) {
            test_refused(argv[++i]);
            continue;
        }
        test_fs(argv[i]);
        n++;
    }
    if (n == 0)
        CHECK(0, "no filesystem given");
    printf("%d checks, %d failed, %.1fs\n", checks, failures, now_s() - t0);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
