/* fuzz_http: libFuzzer target for the health/metrics server's request path.
 *
 * The input is fed to hp__http_server_parse, the same session code a real connection runs
 * (llhttp callbacks, limits, routing, response building), split into up to four chunks so that
 * spans crossing reads are exercised too. The first byte is a control byte: bits 0-1 pick the
 * number of chunks, bit 2 the readiness answer, the rest seed the cut points.
 *
 * Checked invariants (abort on violation): every answer starts with an HTTP/1.1 status line and
 * carries a Content-Length; after a refusal the connection is never kept.
 *
 * Build (clang): clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude
 *   -I/usr/share/include/llhttp fuzz/fuzz_http.c src/http_server.c src/metrics.c src/buf.c
 *   src/log.c /usr/share/llhttp/{llhttp,api,http}.c -luv -lm
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/http_server.h"
#include "hostpath/log.h"
#include "hostpath/metrics.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ready_answer;

static int ready(struct hp_http_server *s, struct hp_buf *why, void *data)
{
    if (ready_answer)
        return 1;
    (void)hp_buf_appends(why, "fuzz: not ready");
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    hp_log_init(0, HP_LOG_TEXT);
    hp_metrics_init();
    hp_metrics_workqueue_add("claims");
    hp_metrics_event("Warning", "Fuzz\"y\\reason\n", 1);
    return 0;
}

/* Each answer must look like one of ours: "HTTP/1.1 NNN ...\r\n" with a Content-Length. */
static void check_answers(const char *out, size_t len)
{
    const char *p = out;
    const char *end = out + len;
    while (p < end) {
        if ((size_t)(end - p) < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0)
            abort();
        const char *head_end = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!head_end)
            abort();
        const char *cl = memmem(p, (size_t)(head_end - p), "\r\nContent-Length: ", 18);
        if (!cl)
            abort();
        /* HEAD answers have no body: find the next status line instead of trusting the length. */
        const char *next = memmem(head_end, (size_t)(end - head_end), "HTTP/1.1 ", 9);
        p = next ? next : end;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t ctl = data[0];
    data++;
    size--;
    size_t nchunks = 1 + (ctl & 3);
    ready_answer = (ctl >> 2) & 1;

    const char *chunks[4];
    size_t lens[4];
    size_t pos = 0;
    uint32_t seed = ctl >> 3;
    for (size_t i = 0; i < nchunks; i++) {
        size_t left = size - pos;
        size_t take = left;
        if (i + 1 < nchunks && left) {
            seed = seed * 1103515245u + 12345u;
            take = (seed >> 8) % (left + 1);
        }
        chunks[i] = (const char *)data + pos;
        lens[i] = take;
        pos += take;
    }

    struct hp_buf out;
    hp_buf_init(&out, 0);
    int keep = hp__http_server_parse(chunks, lens, nchunks, ready, NULL, &out);
    check_answers(out.data ? out.data : "", out.len);
    /* A refusal (4xx other than 404/405) always ends the connection. */
    if (keep && out.len &&
        (strstr(out.data, "HTTP/1.1 400 ") || strstr(out.data, "HTTP/1.1 413 ") ||
         strstr(out.data, "HTTP/1.1 431 ")))
        abort();
    hp_buf_free(&out);
    return 0;
}
