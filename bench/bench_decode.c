/* bench_decode: cost of turning one claim watch event into a cached hp_claim, and the memory a
 * cached claim costs.
 *
 * Standalone program linked against hpcore. Measures, for a realistic ~1.2 KB
 * PersistentVolumeClaim watch event line (as the API server streams it, managedFields included):
 *   1. parse + decode: json_loads of the whole line, hp_claim_decode of "object", free both;
 *   2. decode only: hp_claim_decode of an already parsed object;
 * each over N iterations (default 200000, or argv[1]), printed as ns/op. Then it decodes 20,000
 * distinct claims into an hp_store and prints the heap bytes per stored claim (mallinfo2 delta,
 * which includes the store's slot arrays) and the resident-set growth per claim.
 * DESIGN.md targets: <= 10 us per decoded event; <= 16 MiB RSS with 20,000 claims cached.
 */
#include <jansson.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    "\"annotations\":{\"volume.beta.kubernetes.io/storage-provisioner\":\"example.com/hostpath\","
    "\"volume.kubernetes.io/storage-provisioner\":\"example.com/hostpath\","
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

static json_t *parse_event(const char *line, size_t len)
{
    json_error_t err;
    json_t *ev = json_loadb(line, len, 0, &err);

    if (!ev) {
        fprintf(stderr, "bench_decode: bad event JSON: %s\n", err.text);
        exit(1);
    }
    return ev;
}

static double bench_parse_decode(size_t n, size_t len)
{
    uint64_t t0 = now_ns();
    size_t i;

    for (i = 0; i < n; i++) {
        json_t *ev = parse_event(event_line, len);
        struct hp_claim *c = hp_claim_decode(json_object_get(ev, "object"));

        if (!c) {
            fprintf(stderr, "bench_decode: decode failed\n");
            exit(1);
        }
        free(c);
        json_decref(ev);
    }
    return (double)(now_ns() - t0) / (double)n;
}

static double bench_decode_only(size_t n, size_t len)
{
    json_t *ev = parse_event(event_line, len), *obj = json_object_get(ev, "object");
    uint64_t t0 = now_ns();
    size_t i;
    double ns;

    for (i = 0; i < n; i++) {
        struct hp_claim *c = hp_claim_decode(obj);
        if (!c) {
            fprintf(stderr, "bench_decode: decode failed\n");
            exit(1);
        }
        free(c);
    }
    ns = (double)(now_ns() - t0) / (double)n;
    json_decref(ev);
    return ns;
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
    json_t *ev = parse_event(event_line, len), *obj = json_object_get(ev, "object");
    json_t *meta = json_object_get(obj, "metadata");
    struct mallinfo2 before, after;
    struct hp_store *store;
    long rss0, rss1;
    char name[64], uid[64];
    size_t i, block = 0;

    /* The parsed event is a template: only the name and uid change per claim. */
    before = mallinfo2();
    rss0 = rss_bytes();
    store = hp_store_new(&ops);
    for (i = 0; i < CLAIMS; i++) {
        struct hp_claim *c;
        snprintf(name, sizeof(name), "data-postgres-%zu", i);
        snprintf(uid, sizeof(uid), "6f1c2a9e-3d4b-4e8f-9a1b-%012zx", i);
        json_object_set_new(meta, "name", json_string(name));
        json_object_set_new(meta, "uid", json_string(uid));
        c = hp_claim_decode(obj);
        if (!c || hp_store_put(store, c) != NULL) {
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
    json_decref(ev);
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
    printf("decode only:  %.0f ns/op\n", bench_decode_only(n, len));
    bench_store(len);
    return 0;
}
