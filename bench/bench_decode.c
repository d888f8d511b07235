/* bench_decode: cost of turning one claim watch event into a cached hp_claim, and the memory a
 * cached claim costs.
 *
 * Standalone program linked against hpcore. Measures, for a realistic ~1.2 KB
 * PersistentVolumeClaim watch event line (as the API server streams it, managedFields included):
 *   1. parse + decode: what the watch does per line — hp_json_parse of the whole line into a
 *      reused reader, the "type" check, hp_claim_decode of "object", free the claim;
 *   2. parse only: hp_json_parse;
 *   3. decode only: hp_claim_decode of an already parsed line;
 *   4. for reference, jansson's json_loadb of the line (the read path before hp_json);
 * each over N iterations (default 200000, or argv[1]), printed as ns/op. Then it decodes 20,000
 * distinct claims into an hp_store and prints the heap bytes per stored claim (mallinfo2 delta,
 * which includes the store's slot arrays) and the resident-set growth per claim.
 * docs/design.md targets: <= 10 us per decoded event; <= 16 MiB RSS with 20,000 claims cached.
 */
#include <jansson.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hostpath/json.h"
#include "hostpath/objects.h"
#include "hostpath/store.h"

#define CLAIMS 20000

static const char event_line[] =
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\","
    "\"metadata\":{\"name\":\"data-postgres-0\",\"namespace\":\"shop-production\","
    "\"uid\":\"6f1c2a9e-3d4b-4e8f-9a1b-2c3d4e5f6a7b\",\"resourceVersion\":\"184467\","
    "\"creationTimestamp\":\"2024-05-01T10:00:00Z\","
    "\"labels\":{\"app.kubernetes.io/name\":\"postgres\",\"app.kubernetes.io/instance\":\"shop\","
    "\"app.kubernetes.io/component\":\"primary\"},"
    "\"annotations\":{\"volume.beta.kubernetes.io/storage-provisioner\":\"hostpath-provisioner.io\","
    "\"volume.kubernetes.io/storage-provisioner\":\"hostpath-provisioner.io\","
    "\"volume.kubernetes.io/selected-node\":\"worker-node-03\"},"
    "\"finalizers\":[\"kubernetes.io/pvc-protection\"],"
    "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\","
    "\"apiVersion\":\"v1\",\"time\":\"2024-05-01T10:00:00Z\",\"fieldsType\":\"FieldsV1\","
    "\"fieldsV1\":{\"f:metadata\":{\"f:labels\":{\".\":{},\"f:app.kubernetes.io/component\":{},"
    "\"f:app.kubernetes.io/instance\":{},\"f:app.kubernetes.io/name\":{}}},"
    "\"f:spec\":{\"f:accessModes\":{},\"f:resources\":{\"f:requests\":{\".\":{},"
    "\"f:storage\":{}}},\"f:storageClassName\":{},\"f:volumeMode\":{}}}}]},"
    "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":"
    "{\"storage\":\"20Gi\"}},\"storageClassName\":\"hostpath\",\"volumeMode\":\"Filesystem\"},"
    "\"status\":{\"phase\":\"Pending\"}}}\n";

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* The reader the watch keeps: tokens reused from one line to the next. */
static struct hp_json reader;

/* Parses a line and returns the token of its "object" (exits on failure). */
static int parse_event(const char *line, size_t len)
{
    int obj;

    if (hp_json_parse(&reader, line, len) != 0) {
        fprintf(stderr, "bench_decode: bad event JSON: %s at %zu\n", reader.err, reader.err_pos);
        exit(1);
    }
    if (!hp_json_str_eq(&reader, hp_json_get(&reader, 0, "type"), "MODIFIED") ||
        (obj = hp_json_get(&reader, 0, "object")) < 0) {
        fprintf(stderr, "bench_decode: not a MODIFIED event\n");
        exit(1);
    }
    return obj;
}

static struct hp_claim *decode(int obj)
{
    struct hp_claim *c = hp_claim_decode(&reader, obj);

    if (!c) {
        fprintf(stderr, "bench_decode: decode failed\n");
        exit(1);
    }
    return c;
}

static double bench_parse_decode(size_t n, size_t len)
{
    uint64_t t0 = now_ns();
    size_t i;

    for (i = 0; i < n; i++)
        free(decode(parse_event(event_line, len)));
    return (double)(now_ns() - t0) / (double)n;
}

static double bench_parse_only(size_t n, size_t len)
{
    uint64_t t0 = now_ns();
    size_t i;

    for (i = 0; i < n; i++)
        (void)parse_event(event_line, len);
    return (double)(now_ns() - t0) / (double)n;
}

static double bench_decode_only(size_t n, size_t len)
{
    int obj = parse_event(event_line, len);
    uint64_t t0 = now_ns();
    size_t i;

    for (i = 0; i < n; i++)
        free(decode(obj));
    return (double)(now_ns() - t0) / (double)n;
}

static double bench_jansson(size_t n, size_t len)
{
    uint64_t t0 = now_ns();
    size_t i;

    for (i = 0; i < n; i++) {
        json_t *ev = json_loadb(event_line, len, 0, NULL);
        if (!ev) {
            fprintf(stderr, "bench_decode: jansson refused the event\n");
            exit(1);
        }
        json_decref(ev);
    }
    return (double)(now_ns() - t0) / (double)n;
}

/* Heap in use: arena chunks plus mmap'ed blocks (the store's slot arrays grow past the mmap
 * threshold). */
static double heap_delta(const struct mallinfo2 *a, const struct mallinfo2 *b)
{
    return (double)(b->uordblks + b->hblkhd) - (double)(a->uordblks + a->hblkhd);
}

static const char *claim_key(const void *obj)
{
    return ((const struct hp_claim *)obj)->key;
}

static void claim_free(void *obj)
{
    free(obj);
}

static void bench_store(size_t len)
{
    static const struct hp_store_ops ops = {claim_key, claim_free};
    const char *name_at = strstr(event_line, "data-postgres-0\"");
    const char *uid_at = strstr(event_line, "-2c3d4e5f6a7b\"");
    char line[2048];
    struct mallinfo2 before, after;
    struct hp_store *store;
    long rss0, rss1;
    size_t i, block = 0;

    /* The event is a template: only the name and uid change per claim. */
    if (!name_at || !uid_at || uid_at < name_at) {
        fprintf(stderr, "bench_decode: template changed\n");
        exit(1);
    }
    (void)len;
    before = mallinfo2();
    rss0 = rss_bytes();
    store = hp_store_new(&ops);
    for (i = 0; i < CLAIMS; i++) {
        struct hp_claim *c;
        int n = snprintf(line, sizeof(line), "%.*sdata-postgres-%zu%.*s-%012zx%s",
                         (int)(name_at - event_line), event_line, i, (int)(uid_at - (name_at + 15)),
                         name_at + 15, i, uid_at + 13);
        if (n < 0 || (size_t)n >= sizeof(line)) {
            fprintf(stderr, "bench_decode: line too long\n");
            exit(1);
        }
        c = decode(parse_event(line, (size_t)n));
        if (hp_store_put(store, c) != NULL) {
            fprintf(stderr, "bench_decode: store insert failed\n");
            exit(1);
        }
        block += malloc_usable_size(c);
    }
    after = mallinfo2();
    rss1 = rss_bytes();
    if (hp_store_len(store) != CLAIMS || hp_store_validate(store) != 0) {
        fprintf(stderr, "bench_decode: store inconsistent\n");
        exit(1);
    }
    printf("store: %d claims, %.0f bytes/claim on the heap (claim block %.0f + table), "
           "RSS +%.2f MiB (%.0f bytes/claim)\n",
           CLAIMS, heap_delta(&before, &after) / CLAIMS, (double)block / CLAIMS,
           (double)(rss1 - rss0) / (1024.0 * 1024.0), (double)(rss1 - rss0) / CLAIMS);
    hp_store_free(store);
}

int main(int argc, char **argv)
{
    size_t n = 200000, len = strlen(event_line);
    char *end;

    if (argc > 1) {
        unsigned long v = strtoul(argv[1], &end, 10);
        if (*end || v == 0) {
            fprintf(stderr, "usage: %s [iterations]\n", argv[0]);
            return 2;
        }
        n = v;
    }
    printf("event: %zu bytes, %zu iterations\n", len, n);
    bench_decode_only(n / 10 + 1, len); /* warm up */
    printf("parse+decode: %.0f ns/op\n", bench_parse_decode(n, len));
    printf("parse only:   %.0f ns/op\n", bench_parse_only(n, len));
    printf("decode only:  %.0f ns/op\n", bench_decode_only(n, len));
    printf("jansson json_loadb (before hp_json, reference): %.0f ns/op\n",
           bench_jansson(n / 10 + 1, len));
    printf("reader: %d tokens for the event, %d allocated\n", reader.ntoks, reader.cap);
    bench_store(len);
    hp_json_free(&reader);
    return 0;
}
