/* quota_show: what the kernel says about project quotas, for the VM tests of the provisioner
 * (tests/vm/test_vm_hardlimits.py), which look at the volumes the real binary made:
 *
 *   quota_show dir PATH            project=ID inherit=0|1            (the directory's tag)
 *   quota_show project ROOT ID     bytes=N inodes=N hard=N in_use=0|1 (one project, on ROOT's
 *                                                                     filesystem)
 *   quota_show list ROOT           ID bytes inodes hard               (every project in use)
 *   quota_show fill FILE MAX       wrote=N error=NAME                 (appends up to MAX bytes
 *                                                                     as uid/gid 65534, without
 *                                                                     CAP_SYS_RESOURCE, as a pod
 *                                                                     writes; error=none if all)
 *
 * Exits 0, or 1 with the reason on stderr. Runs as root inside the VM; reads quotas only (fill
 * writes FILE).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hostpath/quota.h"

static int usage(void)
{
    fprintf(stderr, "usage: quota_show dir PATH | project ROOT ID | list ROOT | fill FILE MAX\n");
    return 1;
}

static int open_fs(const char *root, struct hp_quota_fs *fs, int *fd)
{
    char err[1024];

    if (hp_quota_probe_path(root, fs, err, sizeof(err)) < 0) {
        fprintf(stderr, "quota_show: %s\n", err);
        return -1;
    }
    *fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0) {
        fprintf(stderr, "quota_show: %s: %s\n", root, strerror(errno));
        return -1;
    }
    return 0;
}

static int show_dir(const char *path)
{
    char err[1024];
    uint32_t id = 0;
    int inherit = 0, fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0) {
        fprintf(stderr, "quota_show: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (hp_quota_get_project(fd, &id, &inherit, err, sizeof(err)) < 0) {
        fprintf(stderr, "quota_show: %s\n", err);
        close(fd);
        return 1;
    }
    close(fd);
    printf("project=%u inherit=%d\n", id, inherit);
    return 0;
}

static int show_project(const char *root, const char *ids)
{
    static struct hp_quota_fs fs;
    struct hp_quota_usage u;
    char err[1024], *end;
    unsigned long id = strtoul(ids, &end, 10);
    int fd, in_use = 0, rc;

    if (*end || !*ids || id > HP_QUOTA_ID_MAX)
        return usage();
    if (open_fs(root, &fs, &fd) < 0)
        return 1;
    rc = hp_quota_get(&fs, fd, (uint32_t)id, &u, err, sizeof(err));
    if (rc == 0)
        rc = hp_quota_id_in_use(&fs, fd, (uint32_t)id, &in_use, err, sizeof(err));
    close(fd);
    if (rc < 0) {
        fprintf(stderr, "quota_show: %s\n", err);
        return 1;
    }
    printf("bytes=%llu inodes=%llu hard=%llu in_use=%d\n", (unsigned long long)u.bytes,
           (unsigned long long)u.inodes, (unsigned long long)u.bytes_hard, in_use);
    return 0;
}

static int list(const char *root)
{
    static struct hp_quota_fs fs;
    struct hp_quota_usage u;
    char err[1024];
    uint32_t id = 0, from = 0;
    int fd, rc;

    if (open_fs(root, &fs, &fd) < 0)
        return 1;
    while ((rc = hp_quota_next(&fs, fd, from, &id, &u, err, sizeof(err))) == 0) {
        printf("%u %llu %llu %llu\n", id, (unsigned long long)u.bytes,
               (unsigned long long)u.inodes, (unsigned long long)u.bytes_hard);
        if (id >= HP_QUOTA_ID_MAX)
            break;
        from = id + 1;
    }
    close(fd);
    if (rc < 0 && rc != -ENOENT) {
        fprintf(stderr, "quota_show: %s\n", err);
        return 1;
    }
    return 0;
}

static int fill(const char *file, const char *maxs)
{
    static char chunk[64 * 1024];
    char *end;
    unsigned long long max = strtoull(maxs, &end, 10), wrote = 0;
    int fd, err = 0;

    if (*end || !*maxs)
        return usage();
    /* A pod's process: not root, no capabilities (CAP_SYS_RESOURCE lets ext4 writes past a
     * hard limit). */
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
        fprintf(stderr, "quota_show: dropping to uid 65534: %s\n", strerror(errno));
        return 1;
    }
    fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "quota_show: %s: %s\n", file, strerror(errno));
        return 1;
    }
    memset(chunk, 'q', sizeof(chunk));
    while (wrote < max) {
        size_t n = max - wrote < sizeof(chunk) ? (size_t)(max - wrote) : sizeof(chunk);
        ssize_t w = write(fd, chunk, n);
        if (w < 0) {
            err = errno;
            break;
        }
        wrote += (unsigned long long)w;
    }
    if (!err && fsync(fd) != 0)
        err = errno;
    close(fd);
    printf("wrote=%llu error=%s\n", wrote,
           !err ? "none" : err == EDQUOT ? "EDQUOT" : err == ENOSPC ? "ENOSPC" : strerror(err));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "dir") == 0)
        return show_dir(argv[2]);
    if (argc == 4 && strcmp(argv[1], "project") == 0)
        return show_project(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "list") == 0)
        return list(argv[2]);
    if (argc == 4 && strcmp(argv[1], "fill") == 0)
        return fill(argv[2], argv[3]);
    return usage();
}
