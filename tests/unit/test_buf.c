/* Unit tests for buf: the capped growable buffer (append, printf, consume, steal, reset, URL
 * encoding, the cap leaving the buffer unchanged, NUL termination) and the helpers hp_seterr,
 * hp_quote, hp_xasprintf and the hp_x* allocators.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/buf.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

/* The invariants every operation keeps: data NUL-terminated at len, len within cap and max. */
static void assert_sane(const struct hp_buf *b)
{
    if (!b->data) {
        assert_int_equal(b->len, 0);
        return;
    }
    assert_true(b->len < b->cap);
    assert_int_equal(b->data[b->len], '\0');
    if (b->max)
        assert_true(b->len <= b->max);
}

static void assert_content(const struct hp_buf *b, const char *want)
{
    assert_sane(b);
    assert_int_equal(b->len, strlen(want));
    assert_non_null(b->data);
    assert_memory_equal(b->data, want, b->len + 1);
}

static void test_init_append(void **state)
{
    struct hp_buf b;
    (void)state;

    hp_buf_init(&b, 0);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(b.max, 0);

    assert_int_equal(hp_buf_append(&b, "abc", 3), 0);
    assert_content(&b, "abc");
    assert_int_equal(hp_buf_append(&b, "", 0), 0);
    assert_content(&b, "abc");
    assert_int_equal(hp_buf_appends(&b, "def"), 0);
    assert_content(&b, "abcdef");
    /* Binary data, NUL included, is kept byte for byte; len counts it. */
    assert_int_equal(hp_buf_append(&b, "g\0h", 3), 0);
    assert_int_equal(b.len, 9);
    assert_memory_equal(b.data, "abcdefg\0h", 10);
    assert_sane(&b);
    hp_buf_free(&b);
    assert_null(b.data);
    hp_buf_free(&b); /* twice is harmless */

    /* An empty append on a fresh buffer still gives readable text. */
    hp_buf_init(&b, 0);
    assert_int_equal(hp_buf_append(&b, NULL, 0), 0);
    assert_content(&b, "");
    hp_buf_free(&b);
}

static void test_growth(void **state)
{
    struct hp_buf b;
    char want[10001];
    (void)state;

    /* Many small appends across several reallocations keep every byte. */
    hp_buf_init(&b, 0);
    for (int i = 0; i < 10000; i++) {
        char c = (char)('a' + i % 26);
        want[i] = c;
        assert_int_equal(hp_buf_append(&b, &c, 1), 0);
        assert_sane(&b);
    }
    want[10000] = '\0';
    assert_content(&b, want);
    hp_buf_free(&b);

    /* One large append. */
    hp_buf_init(&b, 0);
    assert_int_equal(hp_buf_appends(&b, "x"), 0);
    assert_int_equal(hp_buf_append(&b, want, 10000), 0);
    assert_int_equal(b.len, 10001);
    assert_int_equal(memcmp(b.data + 1, want, 10000), 0);
    assert_sane(&b);
    hp_buf_free(&b);
}

static int wrap_vprintf(struct hp_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int wrap_vprintf(struct hp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = hp_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

static void test_printf(void **state)
{
    struct hp_buf b;
    char big[300];
    (void)state;

    hp_buf_init(&b, 0);
    assert_int_equal(hp_buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_content(&b, "42-x");
    assert_int_equal(wrap_vprintf(&b, "/%05u/%c", 7u, 'z'), 0);
    assert_content(&b, "42-x/00007/z");
    assert_int_equal(hp_buf_printf(&b, "%s", ""), 0);
    assert_content(&b, "42-x/00007/z");
    /* Longer than the first allocation. */
    memset(big, 'q', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    hp_buf_reset(&b);
    assert_int_equal(hp_buf_printf(&b, "<%s>", big), 0);
    assert_int_equal(b.len, 301);
    assert_int_equal(b.data[0], '<');
    assert_int_equal(b.data[300], '>');
    assert_sane(&b);
    hp_buf_free(&b);
}

static void test_cap(void **state)
{
    struct hp_buf b;
    (void)state;

    hp_buf_init(&b, 8);
    assert_int_equal(hp_buf_appends(&b, "1234"), 0);
    assert_int_equal(hp_buf_appends(&b, "5678"), 0); /* exactly max */
    assert_content(&b, "12345678");
    size_t cap = b.cap;
    char *data = b.data;

    /* Every way of growing past max fails with the buffer unchanged. */
    assert_int_equal(hp_buf_append(&b, "9", 1), -E2BIG);
    assert_content(&b, "12345678");
    assert_int_equal(hp_buf_appends(&b, "9"), -E2BIG);
    assert_content(&b, "12345678");
    assert_int_equal(hp_buf_printf(&b, "%d", 9), -E2BIG);
    assert_content(&b, "12345678");
    assert_int_equal(wrap_vprintf(&b, "%s", "9"), -E2BIG);
    assert_content(&b, "12345678");
    assert_int_equal(hp_buf_append_urlenc(&b, "9"), -E2BIG);
    assert_content(&b, "12345678");
    assert_int_equal(b.cap, cap);
    assert_ptr_equal(b.data, data);
    /* Appending nothing still fits. */
    assert_int_equal(hp_buf_append(&b, "", 0), 0);
    assert_content(&b, "12345678");

    /* A too-large append on a buffer with room fails whole, not partly. */
    hp_buf_reset(&b);
    assert_int_equal(hp_buf_appends(&b, "ab"), 0);
    assert_int_equal(hp_buf_appends(&b, "cdefghi"), -E2BIG);
    assert_content(&b, "ab");
    assert_int_equal(hp_buf_printf(&b, "%s", "cdefghi"), -E2BIG);
    assert_content(&b, "ab");
    /* After consume there is room again. */
    assert_int_equal(hp_buf_appends(&b, "cdefgh"), 0);
    hp_buf_consume(&b, 4);
    assert_int_equal(hp_buf_appends(&b, "ijkl"), 0);
    assert_content(&b, "efghijkl");
    hp_buf_free(&b);

    /* A cap smaller than the first allocation. */
    hp_buf_init(&b, 1);
    assert_int_equal(hp_buf_appends(&b, "ab"), -E2BIG);
    assert_null(b.data);
    assert_int_equal(hp_buf_appends(&b, "a"), 0);
    assert_content(&b, "a");
    hp_buf_free(&b);
}

static void test_urlenc_cap_whole(void **state)
{
    struct hp_buf b;
    (void)state;

    /* Like every other append, an encoded value that does not fit leaves the buffer as it was
     * (a URL cut in the middle of a value would be sent to the API server). */
    hp_buf_init(&b, 6);
    assert_int_equal(hp_buf_appends(&b, "q="), 0);
    int rc = hp_buf_append_urlenc(&b, "ab c");
    char *got = hp_buf_steal(&b); /* freed before asserting: a failure leaks nothing */
    char copy[16];
    snprintf(copy, sizeof(copy), "%s", got);
    free(got);
    assert_int_equal(rc, -E2BIG);
    if (strcmp(copy, "q=") != 0)
        fail_msg("-E2BIG left \"%s\" in the buffer, want \"q=\"", copy);
}

struct urlenc_case {
    const char *in, *want;
};

static void test_urlenc(void **state)
{
    static const struct urlenc_case cases[] = {
        {"", ""},
        {"abcXYZ019-_.~", "abcXYZ019-_.~"},
        {" ", "%20"},
        {"/", "%2F"},
        {"a=b&c", "a%3Db%26c"},
        {"%", "%25"},
        {"+", "%2B"},
        {"labelSelector=app in (a,b)", "labelSelector%3Dapp%20in%20%28a%2Cb%29"},
        {"caf\xc3\xa9", "caf%C3%A9"},
        {"\x01\x7f\xff", "%01%7F%FF"},
        {"\n", "%0A"},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        struct hp_buf b;
        hp_buf_init(&b, 0);
        assert_int_equal(hp_buf_appends(&b, ">"), 0);
        assert_int_equal(hp_buf_append_urlenc(&b, cases[i].in), 0);
        if (strcmp(b.data + 1, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\" want \"%s\"", i, b.data + 1, cases[i].want);
        assert_sane(&b);
        hp_buf_free(&b);
    }
}

static void test_consume(void **state)
{
    struct hp_buf b;
    (void)state;

    hp_buf_init(&b, 0);
    hp_buf_consume(&b, 0); /* on a buffer that never held anything */
    hp_buf_consume(&b, 5);
    assert_null(b.data);
    assert_int_equal(b.len, 0);

    assert_int_equal(hp_buf_appends(&b, "hello world"), 0);
    hp_buf_consume(&b, 0);
    assert_content(&b, "hello world");
    hp_buf_consume(&b, 6);
    assert_content(&b, "world");
    hp_buf_consume(&b, 4);
    assert_content(&b, "d");
    hp_buf_consume(&b, 1); /* exactly all */
    assert_content(&b, "");
    assert_int_equal(hp_buf_appends(&b, "abc"), 0);
    hp_buf_consume(&b, 100); /* more than all */
    assert_content(&b, "");
    hp_buf_free(&b);
}

static void test_reset_steal(void **state)
{
    struct hp_buf b;
    (void)state;

    hp_buf_init(&b, 0);
    hp_buf_reset(&b); /* fresh: nothing to do */
    assert_null(b.data);
    assert_int_equal(hp_buf_appends(&b, "abc"), 0);
    size_t cap = b.cap;
    hp_buf_reset(&b);
    assert_content(&b, "");
    assert_int_equal(b.cap, cap); /* the memory is kept for reuse */

    assert_int_equal(hp_buf_appends(&b, "xyz"), 0);
    char *s = hp_buf_steal(&b);
    assert_string_equal(s, "xyz");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    /* The buffer is usable again and independent of what was stolen. */
    assert_int_equal(hp_buf_appends(&b, "new"), 0);
    assert_content(&b, "new");
    assert_string_equal(s, "xyz");
    free(s);
    hp_buf_free(&b);

    /* Stealing from an empty buffer gives an empty string, never NULL. */
    hp_buf_init(&b, 0);
    s = hp_buf_steal(&b);
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
    hp_buf_free(&b);
}

struct seterr_case {
    size_t errlen;
    const char *want; /* NULL: untouched */
};

static void test_seterr(void **state)
{
    static const struct seterr_case cases[] = {
        {0, NULL},
        {1, ""},
        {5, "fail"},
        {11, "failed: 42"},
        {12, "failed: 42"},
        {64, "failed: 42"},
    };
    (void)state;

    hp_seterr(NULL, 0, "failed: %d", 42);
    hp_seterr(NULL, 100, "failed: %d", 42); /* no buffer: nothing written, no crash */
    for (size_t i = 0; i < N_CASES(cases); i++) {
        char err[64];
        memset(err, 'X', sizeof(err));
        hp_seterr(err, cases[i].errlen, "failed: %d", 42);
        if (!cases[i].want) {
            assert_int_equal(err[0], 'X');
            continue;
        }
        if (strcmp(err, cases[i].want) != 0)
            fail_msg("case %zu: got \"%.64s\" want \"%s\"", i, err, cases[i].want);
        /* Nothing past errlen is written. */
        if (cases[i].errlen < sizeof(err))
            assert_int_equal(err[cases[i].errlen], 'X');
    }
}

static void test_quote(void **state)
{
    static char longer[HP_QUOTE_MAX + 10];
    char q[HP_QUOTE_LEN], small[6];

    (void)state;
    assert_string_equal(hp_quote(q, sizeof(q), "abc", 3), "abc");
    assert_string_equal(hp_quote(q, sizeof(q), "abcdef", 2), "ab"); /* n bytes, not to the NUL */
    assert_string_equal(hp_quote(q, sizeof(q), "a\nb\x1b[c\x7f", 7), "a?b?[c?");
    assert_string_equal(hp_quote(q, sizeof(q), "\xc3\xa9", 2), "\xc3\xa9"); /* UTF-8 kept */
    /* Longer than HP_QUOTE_MAX: cut, "..." after. */
    memset(longer, 'v', sizeof(longer));
    hp_quote(q, sizeof(q), longer, sizeof(longer));
    assert_int_equal(strlen(q), HP_QUOTE_MAX + 3);
    assert_string_equal(q + HP_QUOTE_MAX, "...");
    /* Exactly HP_QUOTE_MAX: whole, no "...". */
    hp_quote(q, sizeof(q), longer, HP_QUOTE_MAX);
    assert_int_equal(strlen(q), HP_QUOTE_MAX);
    /* A small buffer: never written past, always terminated. */
    memset(small, 'X', sizeof(small));
    hp_quote(small, 5, "abcdef", 6);
    assert_string_equal(small, "a");
    assert_int_equal(small[5], 'X');
}

static void test_xasprintf_and_alloc(void **state)
{
    char big[5000];
    (void)state;

    char *s = hp_xasprintf("%s-%d", "a", 1);
    assert_string_equal(s, "a-1");
    free(s);
    s = hp_xasprintf("%s", "");
    assert_string_equal(s, "");
    free(s);
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    s = hp_xasprintf("[%s]", big);
    assert_int_equal(strlen(s), sizeof(big) + 1);
    assert_int_equal(s[0], '[');
    assert_int_equal(s[sizeof(big)], ']');
    free(s);

    /* Zero-size requests still give a pointer that can be freed. */
    void *p = hp_xmalloc(0);
    assert_non_null(p);
    free(p);
    p = hp_xcalloc(0, 0);
    assert_non_null(p);
    free(p);
    int *z = hp_xcalloc(4, sizeof(int));
    assert_int_equal(z[0] | z[1] | z[2] | z[3], 0);
    z = hp_xrealloc(z, 100 * sizeof(int));
    assert_int_equal(z[3], 0); /* kept across the move */
    free(z);
    s = hp_xstrndup("abcdef", 3);
    assert_string_equal(s, "abc");
    free(s);
    s = hp_xstrdup("xyz");
    assert_string_equal(s, "xyz");
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_append),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_urlenc_cap_whole),
        cmocka_unit_test(test_urlenc),
        cmocka_unit_test(test_consume),
        cmocka_unit_test(test_reset_steal),
        cmocka_unit_test(test_seterr),
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_xasprintf_and_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
