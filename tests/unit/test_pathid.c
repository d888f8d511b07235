/* Unit tests for pathid: mount table parsing and mapping, key relations, and resolution of
 * symlinked, bind-mounted, missing and broken spellings of one directory. The bind-mount cases
 * run in a mount namespace of their own (unshare), as root; elsewhere they are skipped. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/pathid.h"
#include "hostpath/policy.h"

static const char table[] =
    "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "22 21 0:5 / /proc rw - proc proc rw\n"
    "30 21 8:17 / /data rw - xfs /dev/sdb1 rw\n"
    /* a bind mount of /data/vols/a at /srv/alias (root is the path inside sdb1) */
    "31 21 8:17 /vols/a /srv/alias rw - xfs /dev/sdb1 rw\n"
    /* escapes: a mount point with a space and a backslash */
    "32 21 0:40 / /mnt/with\\040space\\134x rw - tmpfs tmpfs rw\n"
    /* /over/inner mounted first, then /over on top of it: /over hides it */
    "33 21 0:41 / /over/inner rw - tmpfs t1 rw\n"
    "34 21 0:42 / /over rw - tmpfs t2 rw\n"
    "garbage line\n"
    "35 21 0:43 / /stack rw - tmpfs s1 rw\n"
    "36 21 0:44 / /stack rw - tmpfs s2 rw\n";

static void test_mount_keys(void **state)
{
    static const struct {
        const char *path, *key;
    } rows[] = {
        {"/", "8:1:/"},
        {"/etc/passwd", "8:1:/etc/passwd"},
        {"/data", "8:17:/"},
        {"/data/vols/a/x", "8:17:/vols/a/x"},
        {"/srv/alias", "8:17:/vols/a"},
        {"/srv/alias/x", "8:17:/vols/a/x"},
        {"/srv/aliasx", "8:1:/srv/aliasx"},
        {"/dataset", "8:1:/dataset"},
        {"/mnt/with space\\x/v", "0:40:/v"},
        {"/over/inner/v", "0:42:/inner/v"},
        {"/stack/v", "0:44:/v"},
    };
    struct hp_mounts *m;
    char key[HP_PATHID_MAX];
    (void)state;

    assert_int_equal(hp_mounts_parse(table, strlen(table), &m), 0);
    assert_int_equal(hp_mounts_count(m), 9);
    for (size_t i = 0; i < HP_ARRAY_SIZE(rows); i++) {
        assert_int_equal(hp_mounts_key(m, rows[i].path, key, sizeof(key)), 0);
        if (strcmp(key, rows[i].key) != 0)
            fail_msg("%s: got %s want %s", rows[i].path, key, rows[i].key);
    }
    assert_int_equal(hp_mounts_key(m, "/data/x", key, 7), -ENAMETOOLONG);
    hp_mounts_free(m);

    /* No "/" (a chroot): a path no mount covers is known by its path alone. */
    const char *part = "30 21 8:17 / /data rw - xfs /dev/sdb1 rw\n";
    assert_int_equal(hp_mounts_parse(part, strlen(part), &m), 0);
    assert_int_equal(hp_mounts_key(m, "/etc", key, sizeof(key)), 0);
    assert_string_equal(key, "0:0:/etc");
    assert_int_equal(hp_mounts_key(m, "/data/v", key, sizeof(key)), 0);
    assert_string_equal(key, "8:17:/v");
    hp_mounts_free(m);
    assert_int_equal(hp_mounts_parse("nothing\n", 8, &m), -EINVAL);
    assert_null(m);
}

static void test_relation(void **state)
{
    static const struct {
        const char *a, *b;
        int want;
    } rows[] = {
        {"8:1:/a", "8:1:/a", HP_PATH_EQUAL},
        {"8:1:/a", "8:1:/a/b", HP_PATH_CONTAINS},
        {"8:1:/a/b", "8:1:/a", HP_PATH_INSIDE},
        {"8:1:/a", "8:1:/ab", HP_PATH_DISJOINT},
        {"8:1:/ab", "8:1:/a", HP_PATH_DISJOINT},
        {"8:1:/a", "8:2:/a", HP_PATH_DISJOINT},
        {"8:1:/a", "18:1:/a", HP_PATH_DISJOINT},
        {"8:1:/", "8:1:/a", HP_PATH_CONTAINS},
        {"8:1:/a", "8:1:/", HP_PATH_INSIDE},
        {"8:1:/", "8:1:/", HP_PATH_EQUAL},
        {"8:1:/a/b", "8:1:/a/c", HP_PATH_DISJOINT},
        {"bad", "8:1:/a", HP_PATH_DISJOINT},
    };
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(rows); i++)
        if (hp_pathid_relation(rows[i].a, rows[i].b) != rows[i].want)
            fail_msg("%s vs %s: got %d want %d", rows[i].a, rows[i].b,
                     hp_pathid_relation(rows[i].a, rows[i].b), rows[i].want);
}

static char tmp[256];

static void mkdirs(const char *rel)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmp, rel);
    for (char *s = p + strlen(tmp) + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            (void)mkdir(p, 0755);
            *s = '/';
        }
    }
    assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
}

static void link_at(const char *target, const char *rel)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", tmp, rel);
    assert_int_equal(symlink(target, p), 0);
}

/* The key of tmp/rel; rc is what resolve returned. */
static int key_of(const char *rel, char *key, char *err)
{
    char p[512];
    snprintf(p, sizeof(p), "%s%s%s", tmp, rel[0] ? "/" : "", rel);
    return hp_pathid_resolve(NULL, p, key, HP_PATHID_MAX, err, 256);
}

static void rm_rf(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_resolve_spellings(void **state)
{
    char real[HP_PATHID_MAX], key[HP_PATHID_MAX], err[256], abs[600];
    (void)state;

    snprintf(tmp, sizeof(tmp), "/tmp/test_pathid.XXXXXX");
    assert_non_null(mkdtemp(tmp));
    mkdirs("real/vol/sub");
    mkdirs("other");
    link_at("real", "rel-link");                  /* relative */
    snprintf(abs, sizeof(abs), "%s/real/vol", tmp);
    link_at(abs, "abs-link");                     /* absolute, to the volume itself */
    link_at("../real", "other/up");               /* through ".." */
    link_at("rel-link", "chain");                 /* a link to a link */
    link_at("nowhere/deeper", "dangling");        /* its target is missing */
    link_at("loop2", "loop1");
    link_at("loop1", "loop2");
    int fd = open(strcat(strcpy(abs, tmp), "/real/file"), O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);

    assert_int_equal(key_of("real/vol", real, err), 0);
    static const char *const same[] = {
        "rel-link/vol", "abs-link", "other/up/vol", "chain/vol", "real/./vol",
        "real/vol/sub/..", "real//vol/", "other/../real/vol", "abs-link/sub/..",
    };
    for (size_t i = 0; i < HP_ARRAY_SIZE(same); i++) {
        assert_int_equal(key_of(same[i], key, err), 0);
        if (strcmp(key, real) != 0)
            fail_msg("%s: %s, not %s", same[i], key, real);
    }
    /* Inside and missing: the missing part is kept as written. */
    assert_int_equal(key_of("abs-link/sub", key, err), 0);
    assert_int_equal(hp_pathid_relation(key, real), HP_PATH_INSIDE);
    assert_int_equal(key_of("abs-link/not/yet", key, err), 0);
    assert_int_equal(hp_pathid_relation(key, real), HP_PATH_INSIDE);
    assert_int_equal(key_of("real", key, err), 0);
    assert_int_equal(hp_pathid_relation(key, real), HP_PATH_CONTAINS);
    /* A dangling link resolves to where its target would be made. */
    char made[HP_PATHID_MAX];
    assert_int_equal(key_of("dangling", key, err), 0);
    assert_int_equal(key_of("nowhere/deeper", made, err), 0);
    assert_string_equal(key, made);
    /* A file: the path of a hostPath File is fine; walking through it is not. */
    assert_int_equal(key_of("real/file", key, err), 0);
    assert_int_equal(key_of("real/file/x", key, err), 1);
    assert_non_null(strstr(err, "not a directory"));
    assert_int_equal(key_of("real", made, err), 0);
    assert_string_equal(key, made); /* stopped at the deepest directory reached */
    /* A loop stops at the directory that holds it. */
    assert_int_equal(key_of("loop1/x", key, err), 1);
    assert_non_null(strstr(err, "symbolic links"));
    assert_int_equal(key_of("", made, err), 0);
    assert_string_equal(key, made);
    /* Refusals. */
    assert_int_equal(hp_pathid_resolve(NULL, "relative/path", key, sizeof(key), err, 256),
                     -EINVAL);
    assert_non_null(strstr(err, "not an absolute path"));
    assert_int_equal(hp_pathid_resolve(NULL, "/", key, 4, err, 256), -ENAMETOOLONG);
    rm_rf(tmp);
}

/* Bind mounts (and --pv-dir through one) give the same keys: needs a mount namespace. */
static void test_resolve_bind_mounts(void **state)
{
    char real[HP_PATHID_MAX], key[HP_PATHID_MAX], err[256], src[512], dst[512];
    (void)state;
    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0) {
        print_message("SKIPPED bind mounts: needs root and unshare(CLONE_NEWNS)\n");
        skip();
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        /* A chroot whose root is not a mount point. */
        print_message("SKIPPED bind mounts: / is not a mount point here (%s)\n", strerror(errno));
        skip();
    }
    snprintf(tmp, sizeof(tmp), "/tmp/test_pathid.XXXXXX");
    assert_non_null(mkdtemp(tmp));
    assert_int_equal(mount("t", tmp, "tmpfs", 0, "size=1m"), 0);
    mkdirs("pv-dir/vol/data");
    mkdirs("alias");
    mkdirs("sub-alias");
    snprintf(src, sizeof(src), "%s/pv-dir", tmp);
    snprintf(dst, sizeof(dst), "%s/alias", tmp);
    assert_int_equal(mount(src, dst, NULL, MS_BIND, NULL), 0);
    snprintf(src, sizeof(src), "%s/pv-dir/vol/data", tmp);
    snprintf(dst, sizeof(dst), "%s/sub-alias", tmp);
    assert_int_equal(mount(src, dst, NULL, MS_BIND, NULL), 0);

    assert_int_equal(key_of("pv-dir/vol", real, err), 0);
    assert_int_equal(key_of("alias/vol", key, err), 0);
    assert_string_equal(key, real);
    assert_int_equal(key_of("sub-alias", key, err), 0);
    assert_int_equal(hp_pathid_relation(key, real), HP_PATH_INSIDE);
    assert_int_equal(key_of("alias", key, err), 0);
    assert_int_equal(hp_pathid_relation(key, real), HP_PATH_CONTAINS);
    /* A table read once serves several calls. */
    struct hp_mounts *m;
    assert_int_equal(hp_mounts_load(&m), 0);
    snprintf(src, sizeof(src), "%s/alias/vol", tmp);
    assert_int_equal(hp_pathid_resolve(m, src, key, sizeof(key), err, sizeof(err)), 0);
    assert_string_equal(key, real);
    hp_mounts_free(m);

    snprintf(dst, sizeof(dst), "%s/sub-alias", tmp);
    assert_int_equal(umount(dst), 0);
    snprintf(dst, sizeof(dst), "%s/alias", tmp);
    assert_int_equal(umount(dst), 0);
    assert_int_equal(umount(tmp), 0);
    assert_int_equal(rmdir(tmp), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mount_keys),
        cmocka_unit_test(test_relation),
        cmocka_unit_test(test_resolve_spellings),
        cmocka_unit_test(test_resolve_bind_mounts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
