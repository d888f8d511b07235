/* libFuzzer target for pathpattern: the input is "<pattern>\0<value>" (the value is optional).
 * The pattern is rendered as a pathPattern (plain and with HP_PATTERN_UNSAFE) and as the value
 * patterns (hp_pathpattern_id, hp_pathpattern_mode).
 * The value becomes the claim's annotations "k", "example.com/dir" and label "app", so hostile
 * annotation values meet hostile patterns. Any success must be a safe relative path: it passes
 * hp_volpath_validate, is not absolute, has no "", "." or ".." component and no control
 * character, fits 4096 bytes, and the volume-path round trip (hp_volpath_join and
 * hp_volpath_relative of "/base") gives it back.
 * A failure must leave out empty and give a one-line reason.
 *
 * Built by fuzz/meson.build: CC=clang meson setup build-fuzz -Dfuzz=true
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/objects.h"
#include "hostpath/pathpattern.h"
#include "hostpath/volpath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

static void check_safe(const char *out)
{
    static char back[8192];
    const char *comp = out;
    size_t len = strlen(out);
    char err[256];

    CHECK(len > 0 && len <= 4096);
    CHECK(out[0] != '/');
    CHECK(hp_volpath_validate(out, err, sizeof(err)) == 0);
    for (;;) {
        const char *end = strchr(comp, '/');
        size_t n = end ? (size_t)(end - comp) : strlen(comp);
        size_t i;
        CHECK(n > 0 && n <= 255);
        CHECK(!(n == 1 && comp[0] == '.'));
        CHECK(!(n == 2 && comp[0] == '.' && comp[1] == '.'));
        for (i = 0; i < n; i++)
            CHECK((unsigned char)comp[i] >= 0x20 && (unsigned char)comp[i] != 0x7f);
        if (!end)
            break;
        comp = end + 1;
    }
    char *abs = hp_volpath_join("/base", out);
    CHECK(strlen(abs) == len + 6 && memcmp(abs, "/base/", 6) == 0);
    CHECK(hp_volpath_relative("/base", abs, back, sizeof(back)) == 0);
    CHECK(strcmp(back, out) == 0);
    free(abs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char out[8192], err[512];
    struct hp_claim claim;
    char *buf, *pattern, *value, *annotations, *labels, *p;
    size_t plen, vlen, i;
    int rc;

    /* Split the input; a NUL inside the value ends it (C strings). */
    buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    pattern = buf;
    plen = strlen(pattern);
    value = plen < size ? buf + plen + 1 : buf + size;
    vlen = strlen(value);

    /* annotations: k=value, example.com/dir=value; labels: app=value. */
    annotations = malloc(2 * vlen + 64);
    labels = malloc(vlen + 16);
    if (!annotations || !labels) {
        free(annotations);
        free(labels);
        free(buf);
        return 0;
    }
    p = annotations;
    memcpy(p, "k", 2);
    p += 2;
    memcpy(p, value, vlen + 1);
    p += vlen + 1;
    memcpy(p, "example.com/dir", 16);
    p += 16;
    memcpy(p, value, vlen + 1);
    p += vlen + 1;
    *p = '\0';
    p = labels;
    memcpy(p, "app", 4);
    p += 4;
    memcpy(p, value, vlen + 1);
    p += vlen + 1;
    *p = '\0';

    memset(&claim, 0, sizeof(claim));
    claim.namespace_ = "ns";
    claim.name = "claim";
    claim.uid = "0b9c4c2e";
    claim.annotations = annotations;
    claim.labels = labels;

    memset(out, 'X', sizeof(out));
    err[0] = '\0';
    rc = hp_pathpattern_render(pattern, &claim, "pvc-0b9c4c2e", out, sizeof(out), err, sizeof(err));
    if (rc == 0) {
        check_safe(out);
    } else {
        CHECK(rc < 0);
        CHECK(out[0] == '\0');
        CHECK(err[0] != '\0');
        for (i = 0; err[i]; i++)
            CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] != 0x7f);
    }
    /* allowUnsafePathPattern: cleaned, but a success is just as safe; a failure is one line. */
    memset(out, 'X', sizeof(out));
    err[0] = '\0';
    rc = hp_pathpattern_render_path(pattern, &claim, "pvc-0b9c4c2e", HP_PATTERN_UNSAFE, out,
                                    sizeof(out), err, sizeof(err));
    if (rc == 0) {
        check_safe(out);
    } else {
        CHECK(rc < 0);
        CHECK(out[0] == '\0');
        CHECK(err[0] != '\0');
        for (i = 0; err[i]; i++)
            CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] != 0x7f);
    }
    /* Value patterns: an id or a mode in range, or a one-line reason. */
    {
        uint32_t id = 0xfffffffe;
        mode_t mode = 0xfffff;
        err[0] = '\0';
        rc = hp_pathpattern_id(pattern, "userPattern", &claim, "pvc-0b9c4c2e", &id, err,
                               sizeof(err));
        CHECK(rc == 0 ? id <= 0x7fffffffU : (rc < 0 && err[0] && id == 0xfffffffe));
        for (i = 0; err[i]; i++)
            CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] != 0x7f);
        err[0] = '\0';
        rc = hp_pathpattern_mode(pattern, &claim, "pvc-0b9c4c2e", &mode, err, sizeof(err));
        CHECK(rc == 0 ? mode <= 07777 : (rc < 0 && err[0] && mode == 0xfffff));
        for (i = 0; err[i]; i++)
            CHECK((unsigned char)err[i] >= 0x20 && (unsigned char)err[i] != 0x7f);
    }
    /* The validator alone on the raw value and pattern must agree with its own contract. */
    if (hp_volpath_validate(value, err, sizeof(err)) == 0)
        check_safe(value);
    if (hp_volpath_validate(pattern, err, sizeof(err)) == 0)
        check_safe(pattern);

    free(labels);
    free(annotations);
    free(buf);
    return 0;
}
