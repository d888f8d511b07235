/* Unit tests for hostpath: real directories under a mkdtemp root, a real loop and threadpool.
 *
 * Mount-based cases (ENOSPC, EROFS, mount points below a volume) need root and mount(2); they
 * skip cleanly otherwise and always unmount what they mounted.
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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "hostpath/hostpath.h"

/* ------------------------------------------------------------------------------------------ */
/* mkdirat interposer: the module calls mkdirat for every component it creates, on the worker
 * threads. When slow_ms is set, each call sleeps, counting how many run at once, so that the
 * tests can observe the max_inflight cap and keep a job "running" while the loop closes. */

static atomic_int slow_ms, in_mkdirat, max_in_mkdirat, mkdirat_started;

int mkdirat(int fd, const char *path, mode_t mode)
{
    int ms = atomic_load(&slow_ms);

    if (ms > 0) {
        int now = atomic_fetch_add(&in_mkdirat, 1) + 1;
        int seen = atomic_load(&max_in_mkdirat);
        while (now > seen && !atomic_compare_exchange_weak(&max_in_mkdirat, &seen, now))
            ;
        atomic_store(&mkdirat_started, 1);
        usleep((useconds_t)ms * 1000);
        atomic_fetch_sub(&in_mkdirat, 1);
    }
    return (int)syscall(SYS_mkdirat, fd, path, mode);
}

/* syscall interposer: the module reaches openat2 through syscall(2). The whole suite runs twice,
 * the second time with openat2 answering ENOSYS as on kernels before 5.6 (or behind a seccomp
 * filter), so that the openat(O_NOFOLLOW) + statx mount-id fallback is held to the same cases. */

static atomic_int deny_openat2, openat2_denied, openat2_calls;

long syscall(long n, ...)
{
    static long (*real)(long, ...);
    va_list ap;
    long a, b, c, d, e, g;

    if (n == SYS_openat2)
        atomic_fetch_add(&openat2_calls, 1);
    if (n == SYS_openat2 && atomic_load(&deny_openat2)) {
        atomic_fetch_add(&openat2_denied, 1);
        errno = ENOSYS;
        return -1;
    }
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "syscall");
    /* Like glibc's own syscall(): six argument registers, whether or not all were passed. */
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

/* ------------------------------------------------------------------------------------------ */

static char base_dir[PATH_MAX];
static int test_seq;

struct result {
    int called;
    int status;
    int order; /* completion order */
    char msg[1024];
    char path[PATH_MAX];
};

struct fx {
    uv_loop_t loop;
    struct hp_hostpath *hp;
    char dir[PATH_MAX]; /* this test's scratch directory */
    char pv[PATH_MAX];  /* pv_dir (not created up front) */
    char out[PATH_MAX]; /* a directory outside pv_dir that must survive */
    int idle;
    int completed;
};

static struct fx *cur_fx;

static void on_done(void *data, int status, const char *message, const char *path)
{
    struct result *r = data;

    r->called++;
    r->status = status;
    r->order = cur_fx ? cur_fx->completed++ : 0;
    (void)snprintf(r->msg, sizeof(r->msg), "%s", message ? message : "");
    (void)snprintf(r->path, sizeof(r->path), "%s", path ? path : "");
    if (status == 0)
        assert_null(message);
    else
        assert_non_null(message);
}

static void on_idle(void *data)
{
    struct fx *f = data;
    f->idle++;
}

/* Runs the loop until *counter >= want, bounded by 20 s. */
static void run_until(uv_loop_t *loop, int *counter, int want)
{
    uint64_t deadline = uv_hrtime() + 20ull * 1000 * 1000 * 1000;

    while (*counter < want && uv_hrtime() < deadline) {
        (void)uv_run(loop, UV_RUN_NOWAIT);
        if (*counter < want)
            usleep(200);
    }
    if (*counter < want)
        fail_msg("timed out: %d of %d callbacks", *counter, want);
}

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

static void fx_open(struct fx *f, unsigned max_inflight)
{
    memset(f, 0, sizeof(*f));
    assert_true(snprintf(f->dir, sizeof(f->dir), "%s/t%d", base_dir, ++test_seq) <
                (int)sizeof(f->dir));
    assert_int_equal(mkdir(f->dir, 0755), 0);
    path_join(f->pv, f->dir, "pv");
    path_join(f->out, f->dir, "outside");
    assert_int_equal(mkdir(f->out, 0755), 0);
    mkfile(f->out, "keep", "precious");
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->hp = hp_hostpath_new(&f->loop, f->pv, max_inflight);
    assert_non_null(f->hp);
    cur_fx = f;
}

static void fx_close(struct fx *f)
{
    hp_hostpath_close(f->hp, on_idle, f);
    assert_int_equal(f->idle, 0); /* never from inside close */
    run_until(&f->loop, &f->idle, 1);
    assert_int_equal(f->idle, 1);
    assert_int_equal(uv_run(&f->loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    cur_fx = NULL;
}

/* Replaces the hostpath object with one for another pv_dir. */
static void fx_reopen(struct fx *f, const char *pv, unsigned max_inflight)
{
    int idle_before = f->idle;

    hp_hostpath_close(f->hp, on_idle, f);
    run_until(&f->loop, &f->idle, idle_before + 1);
    f->idle = idle_before;
    (void)snprintf(f->pv, sizeof(f->pv), "%s", pv);
    f->hp = hp_hostpath_new(&f->loop, f->pv, max_inflight);
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

static int create_sync(struct fx *f, const char *rel, mode_t mode, uid_t uid, gid_t gid,
                       int set_owner, struct result *r)
{
    memset(r, 0, sizeof(*r));
    hp_hostpath_create(f->hp, rel, mode, uid, gid, set_owner, on_done, r);
    assert_int_equal(r->called, 0); /* callbacks never fire before return */
    run_until(&f->loop, &r->called, 1);
    assert_int_equal(r->called, 1);
    return r->status;
}

static int remove_sync(struct fx *f, const char *abs, enum hp_on_delete action, struct result *r)
{
    memset(r, 0, sizeof(*r));
    hp_hostpath_remove(f->hp, abs, action, on_done, r);
    assert_int_equal(r->called, 0);
    run_until(&f->loop, &r->called, 1);
    assert_int_equal(r->called, 1);
    return r->status;
}

/* ------------------------------------------------------------------------------------------ */

static void test_new_normalizes_dir(void **state)
{
    uv_loop_t loop;
    struct hp_hostpath *hp;
    struct fx f;
    char cwd[PATH_MAX], want[PATH_MAX];

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    hp = hp_hostpath_new(&loop, "/srv/volumes///", 4);
    assert_string_equal(hp_hostpath_dir(hp), "/srv/volumes");
    assert_int_equal(hp_hostpath_pending(hp), 0);
    memset(&f, 0, sizeof(f));
    hp_hostpath_close(hp, on_idle, &f);
    run_until(&loop, &f.idle, 1);
    assert_int_equal(uv_loop_close(&loop), 0);

    assert_int_equal(uv_loop_init(&loop), 0);
    hp = hp_hostpath_new(&loop, "rel/dir", 0);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    path_join(want, cwd, "rel/dir");
    assert_string_equal(hp_hostpath_dir(hp), want);
    f.idle = 0;
    hp_hostpath_close(hp, on_idle, &f);
    run_until(&loop, &f.idle, 1);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_create_mode_ignores_umask(void **state)
{
    struct fx f;
    struct result r;
    char want[PATH_MAX];
    mode_t old = umask(022);

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "vol", 0750, 0, 0, 0, &r), 0);
    path_join(want, f.pv, "vol");
    assert_string_equal(r.path, want);
    assert_int_equal(mode_of(f.pv, "vol"), 0750);
    assert_int_equal(create_sync(&f, "open", 0777, 0, 0, 0, &r), 0);
    assert_int_equal(mode_of(f.pv, "open"), 0777);
    assert_int_equal(create_sync(&f, "shared", 02775, 0, 0, 0, &r), 0);
    assert_int_equal(mode_of(f.pv, "shared"), 02775);
    /* pv_dir was missing: created 0755. */
    assert_int_equal(mode_of(f.dir, "pv"), 0755);
    fx_close(&f);
    umask(old);
}

static void test_create_nested(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];
    mode_t old = umask(077);

    (void)state;
    fx_open(&f, 4);
    /* pv_dir several levels deep and missing. */
    path_join(p, f.dir, "a/b/pv");
    fx_reopen(&f, p, 4);
    assert_int_equal(create_sync(&f, "ns/team/vol", 0700, 0, 0, 0, &r), 0);
    assert_int_equal(mode_of(f.dir, "a"), 0755);
    assert_int_equal(mode_of(f.dir, "a/b"), 0755);
    assert_int_equal(mode_of(f.dir, "a/b/pv"), 0755);
    assert_int_equal(mode_of(f.pv, "ns"), 0755);
    assert_int_equal(mode_of(f.pv, "ns/team"), 0755);
    assert_int_equal(mode_of(f.pv, "ns/team/vol"), 0700);
    /* A sibling reuses the existing parents and leaves their mode alone. */
    path_join(p, f.pv, "ns");
    assert_int_equal(chmod(p, 0711), 0);
    assert_int_equal(create_sync(&f, "ns/other", 0755, 0, 0, 0, &r), 0);
    assert_int_equal(mode_of(f.pv, "ns"), 0711);
    assert_int_equal(mode_of(f.pv, "ns/other"), 0755);
    fx_close(&f);
    umask(old);
}

static void test_create_reuses_existing(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "vol", 0755, 0, 0, 0, &r), 0);
    path_join(p, f.pv, "vol");
    mkfile(p, "data", "x");
    assert_int_equal(chmod(p, 0700), 0);
    assert_int_equal(create_sync(&f, "vol", 0770, 0, 0, 0, &r), 0);
    assert_int_equal(mode_of(f.pv, "vol"), 0770);
    assert_true(lexists(p, "data"));
    fx_close(&f);
}

static void test_create_chown(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];
    struct stat st;

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "mine", 0750, getuid(), getgid(), 1, &r), 0);
    path_join(p, f.pv, "mine");
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_uid, getuid());
    assert_int_equal(st.st_gid, getgid());
    if (geteuid() == 0) {
        assert_int_equal(create_sync(&f, "theirs", 02750, 12345, 23456, 1, &r), 0);
        path_join(p, f.pv, "theirs");
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, 12345);
        assert_int_equal(st.st_gid, 23456);
        assert_int_equal(st.st_mode & 07777, 02750); /* mode after owner: bits kept */
        /* set_owner off: the owner stays as it is on reuse. */
        assert_int_equal(create_sync(&f, "theirs", 0700, 0, 0, 0, &r), 0);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_uid, 12345);
        assert_int_equal(st.st_mode & 07777, 0700);
    } else {
        assert_int_equal(create_sync(&f, "theirs", 0750, 12345, 23456, 1, &r), -EPERM);
        assert_non_null(strstr(r.msg, "chown "));
    }
    fx_close(&f);
}

static void test_create_refuses_symlinks(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "ns", 0755, 0, 0, 0, &r), 0);
    assert_int_equal(chmod(f.out, 0700), 0);
    /* An intermediate component that is a symlink to outside. */
    path_join(p, f.pv, "link");
    assert_int_equal(symlink(f.out, p), 0);
    assert_int_equal(create_sync(&f, "link/vol", 0777, 0, 0, 0, &r), -ELOOP);
    assert_non_null(strstr(r.msg, "symlink"));
    assert_non_null(strstr(r.msg, "link"));
    assert_false(lexists(f.out, "vol"));
    /* The leaf itself a symlink: not followed, the target's mode untouched. */
    assert_int_equal(create_sync(&f, "link", 0777, 0, 0, 0, &r), -ELOOP);
    assert_int_equal(mode_of(f.dir, "outside"), 0700);
    /* A symlink deeper down, inside an existing directory. */
    path_join(p, f.pv, "ns/deep");
    assert_int_equal(symlink(f.out, p), 0);
    assert_int_equal(create_sync(&f, "ns/deep/x/y", 0777, 0, 0, 0, &r), -ELOOP);
    assert_false(lexists(f.out, "x"));
    /* A dangling symlink is not followed to create its target either. */
    path_join(p, f.pv, "dangling");
    {
        char target[PATH_MAX];
        path_join(target, f.out, "created-through-link");
        assert_int_equal(symlink(target, p), 0);
    }
    assert_int_equal(create_sync(&f, "dangling", 0777, 0, 0, 0, &r), -ELOOP);
    assert_false(lexists(f.out, "created-through-link"));
    /* A regular file on the way. */
    mkfile(f.pv, "file", "x");
    assert_int_equal(create_sync(&f, "file/x", 0777, 0, 0, 0, &r), -ENOTDIR);
    assert_non_null(strstr(r.msg, "not a directory"));
    outside_intact(&f);
    fx_close(&f);
}

static void test_create_invalid_rel(void **state)
{
    static const char *bad[] = {"../x", "/abs", "a/../b", "a//b", "a/", "", ".", "a\nb"};
    struct fx f;
    struct result r;
    size_t i;

    (void)state;
    fx_open(&f, 4);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(create_sync(&f, bad[i], 0777, 0, 0, 0, &r), -EINVAL);
        assert_non_null(strstr(r.msg, "refusing"));
    }
    assert_false(lexists(f.dir, "x"));
    assert_false(lexists(f.dir, "pv")); /* no job even created pv_dir */
    fx_close(&f);
}

static void test_pv_dir_symlink_allowed(void **state)
{
    struct fx f;
    struct result r;
    char real[PATH_MAX], link[PATH_MAX], abs[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    path_join(real, f.dir, "real");
    path_join(link, f.dir, "pvlink");
    assert_int_equal(mkdir(real, 0755), 0);
    assert_int_equal(symlink(real, link), 0);
    fx_reopen(&f, link, 2);
    assert_int_equal(create_sync(&f, "v", 0755, 0, 0, 0, &r), 0);
    assert_true(lexists(real, "v"));
    path_join(abs, link, "v");
    assert_int_equal(remove_sync(&f, abs, HP_ON_DELETE_DELETE, &r), 0);
    assert_false(lexists(real, "v"));
    fx_close(&f);
}

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

static void test_remove_tree(void **state)
{
    struct fx f;
    struct result r;
    char vol[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "ns/vol", 0777, 0, 0, 0, &r), 0);
    path_join(vol, f.pv, "ns/vol");
    populate(&f, vol);
    if (geteuid() != 0) { /* removing inside a 0555 directory needs CAP_DAC_OVERRIDE */
        char p[PATH_MAX];
        path_join(p, vol, "ro");
        assert_int_equal(chmod(p, 0755), 0);
    }
    assert_int_equal(remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r), 0);
    assert_string_equal(r.path, vol);
    assert_false(lexists(f.pv, "ns/vol"));
    assert_true(lexists(f.pv, "ns")); /* only the volume directory goes */
    outside_intact(&f);
    assert_true(lexists(f.out, "hard"));
    /* Removing it again is success: already gone. */
    assert_int_equal(remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r), 0);
    fx_close(&f);
}

static void test_remove_refusals(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX], q[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "vol", 0755, 0, 0, 0, &r), 0);
    mkdir_in(f.out, "vol");
    mkfile(f.out, "vol/inside", "x");

    /* The volume path itself a symlink to outside: refused, the link left in place. */
    path_join(p, f.pv, "vlink");
    assert_int_equal(symlink(f.out, p), 0);
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -ELOOP);
    assert_non_null(strstr(r.msg, "symlink"));
    assert_non_null(strstr(r.msg, "left alone"));
    assert_true(lexists(f.pv, "vlink"));
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_ARCHIVE, &r), -ELOOP);
    assert_true(lexists(f.pv, "vlink"));
    /* A symlinked intermediate component. */
    path_join(p, f.pv, "vlink/vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -ELOOP);
    assert_non_null(strstr(r.msg, "symlink"));
    assert_true(lexists(f.out, "vol/inside"));
    /* Not a directory. */
    mkfile(f.pv, "file", "x");
    path_join(p, f.pv, "file");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -ENOTDIR);
    assert_true(lexists(f.pv, "file"));
    path_join(p, f.pv, "file/x");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -ENOTDIR);
    /* Outside pv_dir, lexically. */
    path_join(p, f.out, "vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_non_null(strstr(r.msg, "not strictly inside"));
    path_join(p, f.pv, "../outside/vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    path_join(p, f.pv, "vol/../../outside/vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_int_equal(remove_sync(&f, f.pv, HP_ON_DELETE_DELETE, &r), -EINVAL);
    path_join(p, f.pv, "");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_int_equal(remove_sync(&f, f.dir, HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_int_equal(remove_sync(&f, "/", HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_int_equal(remove_sync(&f, "relative/vol", HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_int_equal(remove_sync(&f, "", HP_ON_DELETE_DELETE, &r), -EINVAL);
    /* The prefix trick: <pv>2/x is not inside <pv>. */
    assert_true(snprintf(q, sizeof(q), "%s2", f.pv) < (int)sizeof(q));
    assert_int_equal(mkdir(q, 0755), 0);
    mkdir_in(q, "x");
    path_join(p, q, "x");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    assert_true(lexists(q, "x"));
    /* A control character in the path. */
    path_join(p, f.pv, "v\nx");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), -EINVAL);
    /* Everything still there. */
    assert_true(lexists(f.pv, "vol"));
    assert_true(lexists(f.out, "vol/inside"));
    outside_intact(&f);
    fx_close(&f);
}

static void test_remove_missing_is_success(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    /* pv_dir itself does not exist yet. */
    path_join(p, f.pv, "never");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), 0);
    assert_false(lexists(f.dir, "pv"));
    assert_int_equal(create_sync(&f, "ns", 0755, 0, 0, 0, &r), 0);
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_DELETE, &r), 0);
    path_join(p, f.pv, "no-parent/vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_ARCHIVE, &r), 0);
    fx_close(&f);
}

static void test_remove_retain(void **state)
{
    struct fx f;
    struct result r;
    char p[PATH_MAX];

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "vol", 0755, 0, 0, 0, &r), 0);
    path_join(p, f.pv, "vol");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_RETAIN, &r), 0);
    assert_true(lexists(f.pv, "vol"));
    path_join(p, f.out, "keep");
    assert_int_equal(remove_sync(&f, p, HP_ON_DELETE_RETAIN, &r), -EINVAL);
    fx_close(&f);
}

static int count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    assert_int_equal(closedir(d), 0);
    return n;
}

static void test_archive(void **state)
{
    struct fx f;
    struct result r;
    char vol[PATH_MAX], p[PATH_MAX];
    int i;

    (void)state;
    fx_open(&f, 4);
    path_join(vol, f.pv, "ns/vol");
    for (i = 0; i < 3; i++) {
        char name[16];
        assert_int_equal(create_sync(&f, "ns/vol", 0755, 0, 0, 0, &r), 0);
        (void)snprintf(name, sizeof(name), "gen%d", i);
        mkfile(vol, name, "g");
        assert_int_equal(remove_sync(&f, vol, HP_ON_DELETE_ARCHIVE, &r), 0);
        assert_false(lexists(f.pv, "ns/vol"));
    }
    path_join(p, f.pv, "ns");
    /* The first kept its plain name and content; the others got distinct suffixed names. */
    assert_true(lexists(p, "archived-vol/gen0"));
    assert_int_equal(count_prefix(p, "archived-vol"), 3);
    assert_int_equal(count_prefix(p, "archived-vol-"), 2);
    fx_close(&f);
}

static void test_max_inflight(void **state)
{
    struct fx f;
    struct result r[20];
    char rel[32];
    int i, done = 0;

    (void)state;
    fx_open(&f, 2);
    atomic_store(&max_in_mkdirat, 0);
    atomic_store(&slow_ms, 20);
    /* Create pv_dir first so that each job below makes exactly one directory. */
    assert_int_equal(create_sync(&f, "warm", 0755, 0, 0, 0, &r[0]), 0);
    atomic_store(&max_in_mkdirat, 0);
    memset(r, 0, sizeof(r));
    for (i = 0; i < 20; i++) {
        (void)snprintf(rel, sizeof(rel), "mi-%02d", i);
        hp_hostpath_create(f.hp, rel, 0755, 0, 0, 0, on_done, &r[i]);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 20);
    while (done < 20) {
        int before = done;
        run_until(&f.loop, &f.completed, f.completed + 1);
        done = 0;
        for (i = 0; i < 20; i++)
            done += r[i].called;
        assert_true(done > before);
        assert_int_equal(hp_hostpath_pending(f.hp), (size_t)(20 - done));
    }
    atomic_store(&slow_ms, 0);
    for (i = 0; i < 20; i++)
        assert_int_equal(r[i].status, 0);
    /* The pool has 4 threads; at most 2 of our jobs ever ran at once, and 2 did. */
    assert_int_equal(atomic_load(&max_in_mkdirat), 2);
    fx_close(&f);
}

static void test_fifo_order(void **state)
{
    struct fx f;
    struct result r[8];
    char rel[32];
    int i;

    (void)state;
    fx_open(&f, 1);
    memset(r, 0, sizeof(r));
    for (i = 0; i < 8; i++) {
        (void)snprintf(rel, sizeof(rel), "o/%d", i);
        hp_hostpath_create(f.hp, rel, 0755, 0, 0, 0, on_done, &r[i]);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 8);
    run_until(&f.loop, &f.completed, 8);
    for (i = 0; i < 8; i++) {
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, 0);
        assert_int_equal(r[i].order, i);
    }
    assert_int_equal(hp_hostpath_pending(f.hp), 0);
    fx_close(&f);
}

static void test_close_cancels_queued(void **state)
{
    struct fx f;
    struct result r[5], late;
    char rel[32];
    uint64_t deadline;
    int i;

    (void)state;
    fx_open(&f, 1);
    assert_int_equal(create_sync(&f, "warm", 0755, 0, 0, 0, &r[0]), 0);
    f.completed = 0;
    memset(r, 0, sizeof(r));
    memset(&late, 0, sizeof(late));
    atomic_store(&mkdirat_started, 0);
    atomic_store(&slow_ms, 150);
    for (i = 0; i < 5; i++) {
        (void)snprintf(rel, sizeof(rel), "c%d", i);
        hp_hostpath_create(f.hp, rel, 0755, 0, 0, 0, on_done, &r[i]);
    }
    /* Wait (bounded) until the first job is inside mkdirat on a worker. */
    deadline = uv_hrtime() + 10ull * 1000 * 1000 * 1000;
    while (!atomic_load(&mkdirat_started) && uv_hrtime() < deadline)
        usleep(200);
    assert_true(atomic_load(&mkdirat_started));
    hp_hostpath_close(f.hp, on_idle, &f);
    for (i = 0; i < 5; i++)
        assert_int_equal(r[i].called, 0); /* nothing completes inside close */
    /* Work submitted while closing is cancelled too. */
    hp_hostpath_create(f.hp, "late", 0755, 0, 0, 0, on_done, &late);
    run_until(&f.loop, &f.idle, 1);
    atomic_store(&slow_ms, 0);
    assert_int_equal(r[0].called, 1);
    assert_int_equal(r[0].status, 0); /* running: finished normally */
    assert_true(lexists(f.pv, "c0"));
    for (i = 1; i < 5; i++) {
        char name[8];
        assert_int_equal(r[i].called, 1);
        assert_int_equal(r[i].status, -ECANCELED);
        assert_non_null(strstr(r[i].msg, "cancel"));
        (void)snprintf(name, sizeof(name), "c%d", i);
        assert_false(lexists(f.pv, name));
    }
    assert_int_equal(late.called, 1);
    assert_int_equal(late.status, -ECANCELED);
    assert_false(lexists(f.pv, "late"));
    assert_int_equal(f.idle, 1);
    assert_int_equal(f.completed, 6); /* every callback ran before on_idle */
    assert_int_equal(uv_run(&f.loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&f.loop), 0);
    cur_fx = NULL;
}

/* Closing from inside a completion callback. */
static struct fx *close_fx;

static void on_done_then_close(void *data, int status, const char *message, const char *path)
{
    on_done(data, status, message, path);
    hp_hostpath_close(close_fx->hp, on_idle, close_fx);
    assert_int_equal(close_fx->idle, 0);
}

static void test_close_from_callback(void **state)
{
    struct fx f;
    struct result r[3];

    (void)state;
    fx_open(&f, 1);
    close_fx = &f;
    memset(r, 0, sizeof(r));
    hp_hostpath_create(f.hp, "a", 0755, 0, 0, 0, on_done_then_close, &r[0]);
    hp_hostpath_create(f.hp, "b", 0755, 0, 0, 0, on_done, &r[1]);
    hp_hostpath_create(f.hp, "c", 0755, 0, 0, 0, on_done, &r[2]);
    run_until(&f.loop, &f.idle, 1);
    assert_int_equal(r[0].status, 0);
    assert_int_equal(r[1].status, -ECANCELED);
    assert_int_equal(r[2].status, -ECANCELED);
    assert_int_equal(f.completed, 3);
    assert_int_equal(uv_loop_close(&f.loop), 0);
    cur_fx = NULL;
}

static void test_remove_deep_tree(void **state)
{
    struct fx f;
    struct result r;
    char vol[PATH_MAX];
    int i, fd, next;

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "deep", 0755, 0, 0, 0, &r), 0);
    path_join(vol, f.pv, "deep");
    fd = open(vol, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    for (i = 0; i < 300; i++) {
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(next >= 0);
        assert_int_equal(close(fd), 0);
        fd = next;
    }
    assert_int_equal(close(fd), 0);
    assert_int_equal(remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r), -ELOOP);
    assert_non_null(strstr(r.msg, "deep"));
    assert_true(lexists(f.pv, "deep/d/d"));
    fx_close(&f);
}

/* ------------------------------------------------------------------------------------------ */
/* Root-only cases with real mounts. */

/* Mounts still in place, so that a failed assertion cannot leak one past the test run. */
static char mounted[8][PATH_MAX];

static void note_mount(const char *dir)
{
    size_t i;
    for (i = 0; i < 8; i++) {
        if (!mounted[i][0]) {
            (void)snprintf(mounted[i], PATH_MAX, "%s", dir);
            return;
        }
    }
}

static void must_umount(const char *dir)
{
    size_t i;
    if (umount2(dir, 0) != 0 && umount2(dir, MNT_DETACH) != 0)
        fail_msg("umount %s: %s", dir, strerror(errno));
    for (i = 0; i < 8; i++)
        if (strcmp(mounted[i], dir) == 0)
            mounted[i][0] = '\0';
}

static void umount_leftovers(void)
{
    size_t i;
    for (i = 0; i < 8; i++)
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
    struct result r;
    char mnt[PATH_MAX], vol[PATH_MAX], rel[16];
    int i, rc = 0;

    (void)state;
    fx_open(&f, 4);
    path_join(mnt, f.dir, "small");
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (try_mount_tmpfs(mnt, "size=64k,nr_inodes=4") != 0) {
        fx_close(&f);
        skip();
    }
    path_join(vol, mnt, "pv");
    fx_reopen(&f, vol, 4);
    for (i = 0; i < 10 && rc == 0; i++) {
        (void)snprintf(rel, sizeof(rel), "v%d", i);
        rc = create_sync(&f, rel, 0755, 0, 0, 0, &r);
    }
    fx_close(&f);
    must_umount(mnt);
    assert_int_equal(rc, -ENOSPC);
    assert_non_null(strstr(r.msg, "mkdir "));
    assert_non_null(strstr(r.msg, "No space left on device"));
}

static void test_erofs(void **state)
{
    struct fx f;
    struct result r;
    char mnt[PATH_MAX], vol[PATH_MAX];
    int rc_reuse, rc_new, rc_rm;

    (void)state;
    fx_open(&f, 4);
    path_join(mnt, f.dir, "ro");
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (try_mount_tmpfs(mnt, "size=1m") != 0) {
        fx_close(&f);
        skip();
    }
    path_join(vol, mnt, "pv");
    fx_reopen(&f, vol, 4);
    assert_int_equal(create_sync(&f, "vol", 0750, 0, 0, 0, &r), 0);
    assert_int_equal(mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
    rc_reuse = create_sync(&f, "vol", 0750, 0, 0, 0, &r);
    rc_new = create_sync(&f, "new", 0750, 0, 0, 0, &r);
    path_join(vol, f.pv, "vol");
    rc_rm = remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r);
    fx_close(&f);
    must_umount(mnt);
    assert_int_equal(rc_reuse, 0); /* nothing to change: reusable on a read-only mount */
    assert_int_equal(rc_new, -EROFS);
    assert_int_equal(rc_rm, -EROFS);
    assert_non_null(strstr(r.msg, "Read-only file system"));
}

static void test_remove_does_not_cross_mounts(void **state)
{
    struct fx f;
    struct result r;
    char vol[PATH_MAX], mnt[PATH_MAX], bind[PATH_MAX];
    int rc, rc_leaf, tmpfs_survived, bind_survived;

    (void)state;
    fx_open(&f, 4);
    assert_int_equal(create_sync(&f, "vol/sub/mnt", 0755, 0, 0, 0, &r), 0);
    assert_int_equal(create_sync(&f, "vol/bind", 0755, 0, 0, 0, &r), 0);
    path_join(vol, f.pv, "vol");
    path_join(mnt, vol, "sub/mnt");
    path_join(bind, vol, "bind");
    if (try_mount_tmpfs(mnt, "size=1m") != 0) {
        fx_close(&f);
        skip();
    }
    mkfile(mnt, "mounted", "m");
    /* A bind mount of the outside directory: same filesystem, different mount. */
    if (try_bind(f.out, bind) != 0) {
        must_umount(mnt);
        fail_msg("bind mount %s: %s", bind, strerror(errno));
    }
    mkfile(vol, "plain", "p");
    rc = remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r);
    tmpfs_survived = lexists(mnt, "mounted");
    bind_survived = lexists(f.out, "keep");
    must_umount(bind);
    must_umount(mnt);
    assert_int_equal(rc, -EXDEV);
    assert_non_null(strstr(r.msg, "mount point"));
    assert_true(tmpfs_survived);
    assert_true(bind_survived);
    outside_intact(&f);
    assert_false(lexists(vol, "plain")); /* the rest of the volume went */
    /* Unmounted, the leftovers are ordinary content and go. */
    assert_int_equal(remove_sync(&f, vol, HP_ON_DELETE_DELETE, &r), 0);
    assert_false(lexists(f.pv, "vol"));

    /* The volume directory itself a mount point: left alone. */
    assert_int_equal(create_sync(&f, "leaf", 0755, 0, 0, 0, &r), 0);
    path_join(mnt, f.pv, "leaf");
    assert_int_equal(try_mount_tmpfs(mnt, "size=1m"), 0);
    mkfile(mnt, "mounted", "m");
    rc_leaf = remove_sync(&f, mnt, HP_ON_DELETE_DELETE, &r);
    tmpfs_survived = lexists(mnt, "mounted");
    must_umount(mnt);
    assert_int_equal(rc_leaf, -EXDEV);
    assert_true(tmpfs_survived);
    fx_close(&f);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_normalizes_dir),
        cmocka_unit_test(test_create_mode_ignores_umask),
        cmocka_unit_test(test_create_nested),
        cmocka_unit_test(test_create_reuses_existing),
        cmocka_unit_test(test_create_chown),
        cmocka_unit_test(test_create_refuses_symlinks),
        cmocka_unit_test(test_create_invalid_rel),
        cmocka_unit_test(test_pv_dir_symlink_allowed),
        cmocka_unit_test(test_remove_tree),
        cmocka_unit_test(test_remove_refusals),
        cmocka_unit_test(test_remove_missing_is_success),
        cmocka_unit_test(test_remove_retain),
        cmocka_unit_test(test_archive),
        cmocka_unit_test(test_max_inflight),
        cmocka_unit_test(test_fifo_order),
        cmocka_unit_test(test_close_cancels_queued),
        cmocka_unit_test(test_close_from_callback),
        cmocka_unit_test(test_remove_deep_tree),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_erofs),
        cmocka_unit_test(test_remove_does_not_cross_mounts),
    };
    int rc;

    umask(022);
    (void)snprintf(base_dir, sizeof(base_dir), "/tmp/hp-unit-hostpath-XXXXXX");
    if (!mkdtemp(base_dir)) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests_name("hostpath (openat2 where the kernel has it)", tests, NULL,
                                     NULL);
    if (atomic_load(&openat2_calls) == 0) { /* 5.6+ kernels: the first run used openat2 */
        struct utsname u;
        fprintf(stderr, "note: openat2 never called (kernel %s)\n",
                uname(&u) == 0 ? u.release : "?");
    }
    atomic_store(&deny_openat2, 1);
    rc |= cmocka_run_group_tests_name("hostpath (openat fallback)", tests, NULL, NULL);
    if (atomic_load(&openat2_denied) != 1) { /* the module must stop asking after one ENOSYS */
        fprintf(stderr, "openat2 was tried %d times after ENOSYS\n", atomic_load(&openat2_denied));
        rc = 1;
    }
    umount_leftovers();
    /* Every mount was unmounted by its test; FTW_MOUNT keeps the cleanup on this filesystem. */
    (void)nftw(base_dir, rm_chmod, 64, FTW_PHYS | FTW_MOUNT);
    (void)nftw(base_dir, rm_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    return rc;
}
