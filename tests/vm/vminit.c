/* vminit: PID 1 of the test VM (tests/vm/vm.py builds it statically into the initramfs).
 *
 * It loads the few modules needed to reach the host (virtio PCI, 9p, overlay: listed in
 * /modules/order, dependencies first), mounts the host's root directory read-only over 9p
 * (tag "hostroot") under a tmpfs overlay so the guest may write anywhere (nothing reaches the
 * host), mounts the run directory read-write over 9p (tag "hprun") at /hp-vm, switches to that
 * root, brings up the loopback interface (the VM has no other), runs
 *     /bin/bash <hp.guest=PATH from the kernel command line> /hp-vm
 * and powers the machine off when it ends, writing "exit N" or "signal N" to /hp-vm/init.status.
 * Anything that goes wrong is printed on the console (ttyS0, the host's console.log) and the
 * machine powers off: the host sees no exit code and reports the console.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NINEP_OPTS "trans=virtio,version=9p2000.L,msize=262144"

static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    (void)!write(2, "vminit: ", 8);
    (void)!write(2, line, (size_t)n);
}

static void poweroff(void)
{
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}

static void die(const char *what)
{
    say("%s: %s; powering off", what, strerror(errno));
    poweroff();
}

static void xmount(const char *src, const char *dst, const char *type, unsigned long flags,
                   const char *opts)
{
    char what[512];

    if (mount(src, dst, type, flags, opts) == 0)
        return;
    snprintf(what, sizeof(what), "mount %s on %s (%s, %s)", src ? src : "-", dst,
             type ? type : "-", opts ? opts : "");
    die(what);
}

/* Loads /modules/<name>.ko for each line of /modules/order. */
static void load_modules(void)
{
    FILE *f = fopen("/modules/order", "r");
    char name[256], path[512];

    if (!f)
        return;
    while (fgets(name, sizeof(name), f)) {
        int fd;

        name[strcspn(name, "\n")] = '\0';
        if (!name[0])
            continue;
        snprintf(path, sizeof(path), "/modules/%s", name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            say("open %s: %s", path, strerror(errno));
            continue;
        }
        if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
            say("loading %s: %s", name, strerror(errno));
        close(fd);
    }
    fclose(f);
}

/* The value of hp.<key>= on the kernel command line, copied into out; "" when absent. */
static void cmdline_arg(const char *key, char *out, size_t outlen)
{
    char buf[4096], want[64];
    ssize_t n;
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);

    out[0] = '\0';
    if (fd < 0)
        return;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    snprintf(want, sizeof(want), "hp.%s=", key);
    for (char *tok = buf; *tok;) {
        size_t len = strcspn(tok, " \n");

        if (strncmp(tok, want, strlen(want)) == 0 && len > strlen(want)) {
            size_t vlen = len - strlen(want);

            if (vlen >= outlen)
                vlen = outlen - 1;
            memcpy(out, tok + strlen(want), vlen);
            out[vlen] = '\0';
            return;
        }
        tok += len;
        while (*tok == ' ' || *tok == '\n')
            tok++;
    }
}

static void loopback_up(void)
{
    struct ifreq ifr;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (s < 0) {
        say("socket: %s", strerror(errno));
        return;
    }
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
            say("lo up: %s", strerror(errno));
    }
    close(s);
}

/* Mounts the host's root (read-only 9p) under a tmpfs overlay at /newroot. */
static void mount_root(void)
{
    mkdir("/lower", 0755);
    mkdir("/upper", 0755);
    mkdir("/newroot", 0755);
    xmount("hostroot", "/lower", "9p", MS_RDONLY, NINEP_OPTS ",cache=loose");
    xmount("upper", "/upper", "tmpfs", 0, "mode=0755");
    mkdir("/upper/u", 0755);
    mkdir("/upper/w", 0755);
    if (mount("overlay", "/newroot", "overlay", 0,
              "lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w") != 0) {
        /* Without overlay the root stays read-only; tmpfs mounts below cover the usual
         * writable places. */
        say("overlay: %s; the root is read-only", strerror(errno));
        xmount("/lower", "/newroot", NULL, MS_BIND | MS_REC, NULL);
    }
}

static void write_status(int status)
{
    char line[64];
    int fd = open("/hp-vm/init.status", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    if (fd < 0)
        return;
    if (WIFEXITED(status))
        snprintf(line, sizeof(line), "exit %d\n", WEXITSTATUS(status));
    else
        snprintf(line, sizeof(line), "signal %d\n", WTERMSIG(status));
    (void)!write(fd, line, strlen(line));
    close(fd);
}

int main(void)
{
    char guest[1024];
    pid_t child;
    int status = 0;

    mkdir("/dev", 0755);
    mkdir("/proc", 0555);
    mkdir("/sys", 0555);
    xmount("devtmpfs", "/dev", "devtmpfs", 0, "mode=0755");
    xmount("proc", "/proc", "proc", 0, NULL);
    xmount("sysfs", "/sys", "sysfs", 0, NULL);
    cmdline_arg("guest", guest, sizeof(guest));
    if (!guest[0]) {
        errno = EINVAL;
        die("no hp.guest= on the kernel command line");
    }
    load_modules();
    mount_root();
    mkdir("/newroot/hp-vm", 0755);
    xmount("hprun", "/newroot/hp-vm", "9p", 0, NINEP_OPTS ",cache=none");
    xmount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL);
    xmount("/proc", "/newroot/proc", NULL, MS_MOVE, NULL);
    xmount("/sys", "/newroot/sys", NULL, MS_MOVE, NULL);
    xmount("tmp", "/newroot/tmp", "tmpfs", 0, "mode=1777");
    xmount("run", "/newroot/run", "tmpfs", 0, "mode=0755");
    mkdir("/newroot/dev/pts", 0755);
    mkdir("/newroot/dev/shm", 01777);
    xmount("devpts", "/newroot/dev/pts", "devpts", 0, "ptmxmode=0666");
    xmount("shm", "/newroot/dev/shm", "tmpfs", 0, "mode=1777");
    loopback_up();
    if (chdir("/newroot") != 0)
        die("chdir /newroot");
    xmount(".", "/", NULL, MS_MOVE, NULL);
    if (chroot(".") != 0 || chdir("/") != 0)
        die("chroot");

    child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        char *argv[] = {"/bin/bash", guest, "/hp-vm", NULL};
        char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "HOME=/root", "TERM=dumb", "LANG=C.UTF-8", NULL};

        setsid();
        execve(argv[0], argv, envp);
        say("exec %s: %s", argv[0], strerror(errno));
        _exit(127);
    }
    /* PID 1 reaps every orphan until the guest script ends. */
    for (;;) {
        int st;
        pid_t p = waitpid(-1, &st, 0);

        if (p == child) {
            status = st;
            break;
        }
        if (p < 0 && errno != EINTR)
            die("waitpid");
    }
    write_status(status);
    poweroff();
    return 0;
}
