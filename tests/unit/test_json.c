/* Unit tests for json.c: a conformance table (valid and invalid documents, checked against
 * jansson too), escapes and surrogates, truncating copies, lookups with escaped and repeated keys,
 * iteration, integers, depth, token reuse, and a corpus of realistic Kubernetes documents whose
 * every value must read back exactly as jansson reads it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/json.h"

/* ---- rebuilding a jansson value from tokens: the cross-check ---- */

static json_t *to_jansson(const struct hp_json *j, int tok);

/* A copy of a string token and its length (a \u0000 is a byte of it, flagged by has_nul). */
static char *str_dup_n(const struct hp_json *j, int tok, size_t *len)
{
    int n = hp_json_str_len(j, tok);
    char *s;

    assert_true(n >= 0);
    s = hp_xmalloc((size_t)n + 1);
    assert_int_equal(hp_json_str_copy(j, tok, s, (size_t)n + 1), n);
    if (hp_json_str_has_nul(j, tok))
        assert_true(strlen(s) < (size_t)n);
    else
        assert_int_equal(strlen(s), n); /* no NUL inside */
    *len = (size_t)n;
    return s;
}

static json_t *to_jansson(const struct hp_json *j, int tok)
{
    json_t *v = NULL;
    size_t len;
    const char *raw;
    int k;

    switch (hp_json_type(j, tok)) {
    case HP_JSON_OBJECT:
        v = json_object();
        for (k = hp_json_first(j, tok); k >= 0; k = hp_json_next(j, tok, k)) {
            size_t kn;
            char *key = str_dup_n(j, k, &kn);
            json_t *m = to_jansson(j, k + 1);
            if (!m) {
                free(key);
                json_decref(v);
                return NULL;
            }
            assert_int_equal(json_object_setn_new(v, key, kn, m), 0);
            free(key);
        }
        assert_true(json_object_size(v) <= (size_t)hp_json_count(j, tok));
        return v;
    case HP_JSON_ARRAY:
        v = json_array();
        for (k = hp_json_first(j, tok); k >= 0; k = hp_json_next(j, tok, k)) {
            json_t *m = to_jansson(j, k);
            if (!m) {
                json_decref(v);
                return NULL;
            }
            assert_int_equal(json_array_append_new(v, m), 0);
        }
        assert_int_equal(json_array_size(v), hp_json_count(j, tok));
        return v;
    case HP_JSON_STRING: {
        size_t n;
        char *s = str_dup_n(j, tok, &n);
        v = json_stringn(s, n); /* NULL if not UTF-8: the cross-check then fails */
        assert_non_null(v);
        free(s);
        return v;
    }
    case HP_JSON_NUMBER:
        raw = hp_json_raw(j, tok, &len);
        /* NULL: out of jansson's range */
        return json_loadb(raw, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    case HP_JSON_TRUE:
        return json_true();
    case HP_JSON_FALSE:
        return json_false();
    case HP_JSON_NULL:
        return json_null();
    case HP_JSON_NONE:
        break;
    }
    fail_msg("bad token %d", tok);
    return NULL;
}

static char *dump(json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
    assert_non_null(s);
    return s;
}

/* Both values serialise (sorted keys, compact) to the same text. */
static void assert_same_dump(json_t *theirs, json_t *mine)
{
    char *a = dump(theirs), *b = dump(mine);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

/* The document parsed by hp_json must re-serialise exactly as jansson's own parse of it. */
static void assert_same_as_jansson(const char *text, size_t len)
{
    struct hp_json j;
    json_error_t err;
    json_t *theirs = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err), *mine;

    if (!theirs)
        fail_msg("jansson refused a test document: %s at %d", err.text, err.position);
    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, text, len), 0);
    mine = to_jansson(&j, 0);
    assert_non_null(mine);
    assert_same_dump(theirs, mine);
    json_decref(theirs);
    json_decref(mine);
    hp_json_free(&j);
}

/* ---- conformance ---- */

enum { BAD = 0, OK = 1 };
/* What jansson (JSON_DECODE_ANY) says about the same text, when it differs from RFC 8259. */
enum { SAME = 0, JANSSON_REFUSES, JANSSON_ACCEPTS };

static const struct {
    const char *text;
    size_t len; /* 0: strlen */
    int ok;
    int jansson;
} cases[] = {
    /* values and containers */
    {"{}", 0, OK, SAME},
    {"[]", 0, OK, SAME},
    {" \t\r\n[ \t\r\n] \t\r\n", 0, OK, SAME},
    {"{ }", 0, OK, SAME},
    {"0", 0, OK, SAME},
    {"-0", 0, OK, SAME},
    {"-0.0e-0", 0, OK, SAME},
    {"1E+2", 0, OK, SAME},
    {"1e-2", 0, OK, SAME},
    {"123.456e78", 0, OK, SAME},
    {"9223372036854775807", 0, OK, SAME},
    {"-9223372036854775808", 0, OK, SAME},
    {"true", 0, OK, SAME},
    {"false", 0, OK, SAME},
    {"null", 0, OK, SAME},
    {"\"\"", 0, OK, SAME},
    {"[[],{},\"\",0,true,false,null]", 0, OK, SAME},
    {"{\"a\":{\"b\":[1,2,{\"c\":null}]},\"d\":[[[]]]}", 0, OK, SAME},
    {"{\"a\":1,\"a\":2}", 0, OK, SAME},
    {"{\"\":0}", 0, OK, SAME},
    /* big numbers: RFC 8259 leaves range to the reader; jansson refuses them */
    {"123456789012345678901234567890", 0, OK, JANSSON_REFUSES},
    {"9223372036854775808", 0, OK, JANSSON_REFUSES},
    {"1e400", 0, OK, JANSSON_REFUSES},
    {"-1e400", 0, OK, JANSSON_REFUSES},
    {"1e-400", 0, OK, SAME},
    /* strings */
    {"\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"", 0, OK, SAME},
    {"\"\\u00e9\\u20AC\\ud83d\\ude00\"", 0, OK, SAME},
    {"\"\\u0001\\u001f\\u007f\"", 0, OK, SAME},
    {"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"", 0, OK, SAME},
    {"\"\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\"", 0, OK, SAME},
    {"\"\x7f\"", 0, OK, SAME},
    {"{\"k\\u0065y\":\"v\"}", 0, OK, SAME},
    {"\"a/b\\/c\"", 0, OK, SAME},
    /* structure */
    {"", 0, BAD, SAME},
    {" ", 0, BAD, SAME},
    {"{", 0, BAD, SAME},
    {"}", 0, BAD, SAME},
    {"[", 0, BAD, SAME},
    {"[1,]", 0, BAD, SAME},
    {"[,1]", 0, BAD, SAME},
    {"[1 2]", 0, BAD, SAME},
    {"[1}", 0, BAD, SAME},
    {"{\"a\":1]", 0, BAD, SAME},
    {"{\"a\"}", 0, BAD, SAME},
    {"{\"a\":}", 0, BAD, SAME},
    {"{\"a\" 1}", 0, BAD, SAME},
    {"{a:1}", 0, BAD, SAME},
    {"{'a':1}", 0, BAD, SAME},
    {"{\"a\":1,}", 0, BAD, SAME},
    {"{1:1}", 0, BAD, SAME},
    {"[1] [2]", 0, BAD, SAME},
    {"{} x", 0, BAD, SAME},
    {"\"a\" \"b\"", 0, BAD, SAME},
    {"[1,\0]", 5, BAD, SAME},
    {"[1]\0", 4, BAD, SAME},
    /* jansson 2.14 skips a NUL that ends a number or literal */
    {"[1\0]", 4, BAD, JANSSON_ACCEPTS},
    {"false\0", 6, BAD, JANSSON_ACCEPTS},
    {"\xef\xbb\xbf{}", 0, BAD, SAME},
    {"/* c */ {}", 0, BAD, SAME},
    /* numbers */
    {"01", 0, BAD, SAME},
    {"-", 0, BAD, SAME},
    {"-a", 0, BAD, SAME},
    {"1.", 0, BAD, SAME},
    {".5", 0, BAD, SAME},
    {"1.e2", 0, BAD, SAME},
    {"1e", 0, BAD, SAME},
    {"1e+", 0, BAD, SAME},
    {"+1", 0, BAD, SAME},
    {"0x10", 0, BAD, SAME},
    {"NaN", 0, BAD, SAME},
    {"Infinity", 0, BAD, SAME},
    {"-Infinity", 0, BAD, SAME},
    {"1_000", 0, BAD, SAME},
    /* literals */
    {"tru", 0, BAD, SAME},
    {"truex", 0, BAD, SAME},
    {"nul", 0, BAD, SAME},
    {"True", 0, BAD, SAME},
    {"[true false]", 0, BAD, SAME},
    /* strings */
    {"\"abc", 0, BAD, SAME},
    {"\"abc\\", 0, BAD, SAME},
    {"\"\\x\"", 0, BAD, SAME},
    {"\"\\'\"", 0, BAD, SAME},
    {"\"\\u12\"", 0, BAD, SAME},
    {"\"\\u12G4\"", 0, BAD, SAME},
    {"\"\\U1234\"", 0, BAD, SAME},
    {"\"\\ud800\"", 0, BAD, SAME},
    {"\"\\ud800x\"", 0, BAD, SAME},
    {"\"\\ud800\\u0041\"", 0, BAD, SAME},
    {"\"\\ud800\\ud800\"", 0, BAD, SAME},
    {"\"\\udc00\"", 0, BAD, SAME},
    {"\"\\udfff\\ud800\"", 0, BAD, SAME},
    {"\"\\u0000\"", 0, OK, SAME}, /* valid JSON; marked (hp_json_str_has_nul) */
    {"{\"a\\u0000b\":\"x\\u0000\"}", 0, OK, JANSSON_REFUSES}, /* a NUL in a key */
    {"\"a\tb\"", 0, BAD, SAME},
    {"\"a\nb\"", 0, BAD, SAME},
    {"\"\x1f\"", 0, BAD, SAME},
    {"\"a\0b\"", 5, BAD, SAME},
    /* UTF-8 */
    {"\"\x80\"", 0, BAD, SAME},
    {"\"\xbf\"", 0, BAD, SAME},
    {"\"\xc3\x28\"", 0, BAD, SAME},
    {"\"\xc0\xaf\"", 0, BAD, SAME},
    {"\"\xc1\xbf\"", 0, BAD, SAME},
    {"\"\xe0\x80\xaf\"", 0, BAD, SAME},
    {"\"\xe0\x9f\xbf\"", 0, BAD, SAME},
    {"\"\xed\xa0\x80\"", 0, BAD, SAME},
    {"\"\xed\xbf\xbf\"", 0, BAD, SAME},
    {"\"\xf0\x80\x80\xaf\"", 0, BAD, SAME},
    {"\"\xf0\x8f\xbf\xbf\"", 0, BAD, SAME},
    {"\"\xf4\x90\x80\x80\"", 0, BAD, SAME},
    {"\"\xf5\x80\x80\x80\"", 0, BAD, SAME},
    {"\"\xff\"", 0, BAD, SAME},
    {"\"\xe2\x82\"", 0, BAD, SAME},
    {"\"\xe2\x82", 0, BAD, SAME},
    {"\"\xf0\x9f\x98\"", 0, BAD, SAME},
    {"\xc3\xa9", 0, BAD, SAME},
    {"[\"ok\",\"\xe2\x28\xa1\"]", 0, BAD, SAME},
};

static void test_conformance(void **state)
{
    struct hp_json j;
    size_t i;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(cases); i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        int rc = hp_json_parse(&j, cases[i].text, len);
        json_t *theirs = json_loadb(cases[i].text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        int jansson_ok = cases[i].jansson == SAME              ? cases[i].ok
                         : cases[i].jansson == JANSSON_ACCEPTS ? 1
                                                               : 0;

        if (rc != (cases[i].ok ? 0 : -EBADMSG))
            fail_msg("case %zu \"%s\": rc %d (%s at %zu)", i, cases[i].text, rc, j.err ? j.err : "",
                     j.err_pos);
        if (!cases[i].ok) {
            assert_non_null(j.err);
            assert_true(j.err_pos <= len);
            assert_int_equal(j.ntoks, 0);
            assert_int_equal(hp_json_type(&j, 0), HP_JSON_NONE);
        } else {
            assert_int_equal(j.toks[0].next, j.ntoks);
        }
        if ((theirs != NULL) != jansson_ok)
            fail_msg("case %zu \"%s\": jansson %s it", i, cases[i].text,
                     theirs ? "accepts" : "refuses");
        json_decref(theirs);
        if (cases[i].ok && jansson_ok)
            assert_same_as_jansson(cases[i].text, len);
    }
    hp_json_free(&j);
}

static void test_types_and_tokens(void **state)
{
    static const char doc[] = " {\"a\" : [1, -2.5e3, \"x\", true, false, null, {}, []], \"b\":{}}";
    struct hp_json j;
    int a, e;
    size_t len;
    const char *raw;
    (void)state;

    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    assert_int_equal(hp_json_type(&j, 0), HP_JSON_OBJECT);
    assert_int_equal(hp_json_count(&j, 0), 2);
    assert_int_equal(j.toks[0].start, 1);
    assert_int_equal(j.toks[0].end, strlen(doc));
    a = hp_json_get(&j, 0, "a");
    assert_int_equal(a, 2);
    assert_int_equal(hp_json_type(&j, a), HP_JSON_ARRAY);
    assert_int_equal(hp_json_count(&j, a), 8);
    static const enum hp_json_type want[] = {HP_JSON_NUMBER, HP_JSON_NUMBER, HP_JSON_STRING,
                                             HP_JSON_TRUE,   HP_JSON_FALSE,  HP_JSON_NULL,
                                             HP_JSON_OBJECT, HP_JSON_ARRAY};
    size_t n = 0;
    for (e = hp_json_first(&j, a); e >= 0; e = hp_json_next(&j, a, e)) {
        assert_true(n < HP_ARRAY_SIZE(want));
        assert_int_equal(hp_json_type(&j, e), want[n]);
        n++;
    }
    assert_int_equal(n, 8);
    raw = hp_json_raw(&j, a + 2, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(raw, "-2.5e3", 6);
    raw = hp_json_raw(&j, a + 3, &len);
    assert_int_equal(len, 1);
    assert_memory_equal(raw, "x", 1);
    assert_int_equal(hp_json_count(&j, a + 7), 0);
    assert_int_equal(hp_json_first(&j, a + 7), -1);
    assert_int_equal(hp_json_first(&j, hp_json_get(&j, 0, "b")), -1);
    /* the object's next skips the whole array */
    assert_int_equal(j.toks[a].next, hp_json_get(&j, 0, "b") - 1);
    assert_int_equal(j.toks[0].next, j.ntoks);
    /* absent and wrong-type tokens answer "none" */
    assert_int_equal(hp_json_type(&j, -1), HP_JSON_NONE);
    assert_int_equal(hp_json_type(&j, j.ntoks), HP_JSON_NONE);
    assert_int_equal(hp_json_count(&j, -1), 0);
    assert_int_equal(hp_json_first(&j, -1), -1);
    assert_int_equal(hp_json_first(&j, a + 1), -1);
    assert_int_equal(hp_json_next(&j, -1, 3), -1);
    assert_int_equal(hp_json_next(&j, a, -1), -1);
    assert_int_equal(hp_json_get(&j, a, "a"), -1);
    assert_int_equal(hp_json_get(&j, -1, "a"), -1);
    assert_int_equal(hp_json_get(&j, 0, "c"), -1);
    assert_null(hp_json_raw(&j, -1, &len));
    assert_int_equal(len, 0);
    assert_int_equal(hp_json_str_len(&j, a), -1);
    assert_int_equal(hp_json_str_copy(&j, a, NULL, 0), -EINVAL);
    assert_false(hp_json_str_eq(&j, a + 1, "1"));
    assert_false(hp_json_str_eq(&j, -1, ""));
    hp_json_free(&j);
}

static void test_lookup(void **state)
{
    static const char doc[] =
        "{\"metadata\":{\"name\":\"first\",\"name\":\"last\",\"na\\u006de\":\"escaped-last\","
        "\"annotations\":{\"a/b\":\"1\",\"a\\/b\":\"2\",\"\\u00e9t\\u00e9\":\"summer\"}},"
        "\"m\\u00e9ta\":{\"x\":1},\"\":{\"\":\"empty\"},\"nam\":0,\"names\":0}";
    struct hp_json j;
    int ann;
    (void)state;

    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    /* the last occurrence wins, escaped or not, as in jansson and Go */
    assert_true(hp_json_str_eq(&j, hp_json_path(&j, 0, "metadata", "name", NULL), "escaped-last"));
    ann = hp_json_path(&j, 0, "metadata", "annotations", NULL);
    assert_true(hp_json_str_eq(&j, hp_json_get(&j, ann, "a/b"), "2"));
    assert_true(hp_json_str_eq(&j, hp_json_get(&j, ann, "\xc3\xa9t\xc3\xa9"), "summer"));
    assert_int_equal(hp_json_get(&j, ann, "\xc3\xa9t"), -1);
    assert_int_equal(hp_json_get(&j, ann, "\xc3\xa9t\xc3\xa9x"), -1);
    assert_int_equal(hp_json_type(&j, hp_json_path(&j, 0, "m\xc3\xa9ta", "x", NULL)),
                     HP_JSON_NUMBER);
    assert_true(hp_json_str_eq(&j, hp_json_path(&j, 0, "", "", NULL), "empty"));
    assert_int_equal(hp_json_path(&j, 0, "metadata", "nope", "deeper", NULL), -1);
    assert_int_equal(hp_json_path(&j, 0, NULL), 0);
    assert_int_equal(hp_json_path(&j, -1, "metadata", NULL), -1);
    /* token against token, and hashes of unescaped values */
    int name1 = hp_json_path(&j, 0, "metadata", NULL) + 2, name3 = name1 + 4;
    assert_true(hp_json_str_eq(&j, name1, "first"));
    assert_true(hp_json_str_eq(&j, name1 - 1, "name"));
    assert_true(hp_json_str_eq_tok(&j, name1 - 1, name3 - 1)); /* "name" and "na\u006de" */
    assert_true(hp_json_str_hash(&j, name1 - 1) == hp_json_str_hash(&j, name3 - 1));
    assert_false(hp_json_str_eq_tok(&j, name1, name3));
    assert_false(hp_json_str_eq_tok(&j, name1 - 1, name1));
    assert_false(hp_json_str_eq_tok(&j, 0, 0)); /* not strings */
    assert_int_equal(hp_json_str_hash(&j, 0), 0);
    assert_true(hp_json_str_hash(&j, name1) != hp_json_str_hash(&j, name3));
    /* prefixes are not matches */
    assert_int_equal(hp_json_type(&j, hp_json_get(&j, 0, "nam")), HP_JSON_NUMBER);
    assert_int_equal(hp_json_get(&j, 0, "na"), -1);
    assert_int_equal(hp_json_get(&j, 0, "metadat"), -1);
    hp_json_free(&j);
}

static void test_strings(void **state)
{
    static const struct {
        const char *json;
        const char *value;
    } str[] = {
        {"\"\"", ""},
        {"\"plain ascii\"", "plain ascii"},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t"},
        {"\"\\u0041\\u00e9\\u20ac\\uFFFF\"", "A\xc3\xa9\xe2\x82\xac\xef\xbf\xbf"},
        {"\"\\ud83d\\ude00!\"", "\xf0\x9f\x98\x80!"},
        {"\"\\uD800\\uDC00\\uDBFF\\uDFFF\"", "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"},
        {"\"x\xc3\xa9\\n\xf0\x9f\x98\x80y\"", "x\xc3\xa9\n\xf0\x9f\x98\x80y"},
        {"\"{\\\"apiVersion\\\":\\\"v1\\\"}\\n\"", "{\"apiVersion\":\"v1\"}\n"},
        {"\"a long string without escapes, longer than eight bytes several times over\"",
         "a long string without escapes, longer than eight bytes several times over"},
    };
    struct hp_json j;
    char out[128];
    size_t i;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(str); i++) {
        size_t want = strlen(str[i].value);
        assert_int_equal(hp_json_parse(&j, str[i].json, strlen(str[i].json)), 0);
        assert_int_equal(hp_json_type(&j, 0), HP_JSON_STRING);
        assert_int_equal(hp_json_str_len(&j, 0), want);
        assert_int_equal(hp_json_str_copy(&j, 0, out, sizeof(out)), want);
        assert_string_equal(out, str[i].value);
        assert_true(hp_json_str_eq(&j, 0, str[i].value));
        /* one byte more or less is not equal */
        memcpy(out, str[i].value, want);
        out[want] = 'z';
        out[want + 1] = '\0';
        assert_false(hp_json_str_eq(&j, 0, out));
        if (want) {
            out[want - 1] = '\0';
            assert_false(hp_json_str_eq(&j, 0, out));
        }
        assert_int_equal(hp_json_str_copy(&j, 0, out, 0), want); /* cap 0 writes nothing */
    }
    hp_json_free(&j);
}

/* Every cut keeps the output a prefix made of whole UTF-8 characters. */
static void test_copy_truncates_on_characters(void **state)
{
    static const char *const docs[] = {
        "\"ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z\"",
        "\"ab\\u00e9\\u20ac\\ud83d\\ude00z\"",
        "\"ab\xc3\xa9\\u20ac\xf0\x9f\x98\x80z\"",
    };
    static const char full[] = "ab\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80z";
    /* bytes kept for cap = 1..13 (full is 12 bytes: a b é(2) €(3) 😀(4) z) */
    static const size_t keep[] = {0, 1, 2, 2, 4, 4, 4, 7, 7, 7, 7, 11, 12};
    struct hp_json j;
    char out[16];
    size_t d, cap;
    (void)state;

    hp_json_init(&j);
    for (d = 0; d < HP_ARRAY_SIZE(docs); d++) {
        assert_int_equal(hp_json_parse(&j, docs[d], strlen(docs[d])), 0);
        for (cap = 1; cap <= HP_ARRAY_SIZE(keep); cap++) {
            memset(out, 'Q', sizeof(out));
            assert_int_equal(hp_json_str_copy(&j, 0, out, cap), 12);
            assert_int_equal(strlen(out), keep[cap - 1]);
            assert_memory_equal(out, full, keep[cap - 1]);
            assert_int_equal(out[cap], 'Q'); /* nothing written past cap */
        }
    }
    hp_json_free(&j);
}

static void test_integers(void **state)
{
    static const struct {
        const char *text;
        int rc;
        int64_t v;
    } ints[] = {
        {"0", 0, 0},
        {"-0", 0, 0},
        {"410", 0, 410},
        {"-17", 0, -17},
        {"9223372036854775807", 0, INT64_MAX},
        {"-9223372036854775808", 0, INT64_MIN},
        {"9223372036854775808", -ERANGE, 0},
        {"-9223372036854775809", -ERANGE, 0},
        {"99999999999999999999", -ERANGE, 0},
        {"1.0", -EINVAL, 0},
        {"1e3", -EINVAL, 0},
        {"\"1\"", -EINVAL, 0},
        {"null", -EINVAL, 0},
    };
    struct hp_json j;
    int64_t v;
    size_t i;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(ints); i++) {
        assert_int_equal(hp_json_parse(&j, ints[i].text, strlen(ints[i].text)), 0);
        v = 12345;
        assert_int_equal(hp_json_int(&j, 0, &v), ints[i].rc);
        assert_true(v == (ints[i].rc ? 12345 : ints[i].v));
    }
    assert_int_equal(hp_json_int(&j, -1, &v), -EINVAL);
    hp_json_free(&j);
}

static char *nested(int depth, int objects)
{
    struct hp_buf b;
    int i;

    hp_buf_init(&b, 0);
    for (i = 0; i < depth; i++)
        assert_int_equal(hp_buf_appends(&b, objects ? "{\"k\":" : "["), 0);
    assert_int_equal(hp_buf_appends(&b, "1"), 0);
    for (i = 0; i < depth; i++)
        assert_int_equal(hp_buf_appends(&b, objects ? "}" : "]"), 0);
    return hp_buf_steal(&b);
}

static void test_depth(void **state)
{
    struct hp_json j;
    char *s;
    int objects, t, d;
    (void)state;

    hp_json_init(&j);
    for (objects = 0; objects < 2; objects++) {
        s = nested(HP_JSON_MAX_DEPTH, objects);
        assert_int_equal(hp_json_parse(&j, s, strlen(s)), 0);
        /* walk down to the number */
        for (t = 0, d = 0; hp_json_type(&j, t) != HP_JSON_NUMBER; d++)
            t = objects ? hp_json_get(&j, t, "k") : hp_json_first(&j, t);
        assert_int_equal(d, HP_JSON_MAX_DEPTH);
        assert_same_as_jansson(s, strlen(s));
        free(s);

        s = nested(HP_JSON_MAX_DEPTH + 1, objects);
        assert_int_equal(hp_json_parse(&j, s, strlen(s)), -EBADMSG);
        assert_string_equal(j.err, "nesting too deep");
        free(s);
    }
    /* far deeper than any stack would allow if the parser recursed */
    s = nested(100000, 0);
    assert_int_equal(hp_json_parse(&j, s, strlen(s)), -EBADMSG);
    free(s);
    hp_json_free(&j);
}

static void test_errors_report_position(void **state)
{
    static const struct {
        const char *text;
        size_t pos;
    } errs[] = {
        {"{\"a\":1,}", 7},  {"[1,2,x]", 5}, {"\"ab\\q\"", 3},   {"\"ab\xc3(\"", 3},
        {"{\"a\":[1] ", 9}, {"[1] 2", 4},   {"\"\\ud800\"", 1}, {"{\"a\"  :  01}", 10},
    };
    struct hp_json j;
    size_t i;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(errs); i++) {
        assert_int_equal(hp_json_parse(&j, errs[i].text, strlen(errs[i].text)), -EBADMSG);
        if (j.err_pos != errs[i].pos)
            fail_msg("case %zu: error \"%s\" at %zu, want %zu", i, j.err, j.err_pos, errs[i].pos);
    }
    hp_json_free(&j);
}

/* The input need not be NUL-terminated: nothing past len is read (ASan checks the heap copy). */
static void test_exact_length(void **state)
{
    static const char *const docs[] = {"{\"a\":\"bcdefghijklmnopqrstuvwxyz\"}",
                                       "12345",
                                       "true",
                                       "\"x\"",
                                       "[1.5e7]",
                                       "\"abc\\u00e9\""};
    struct hp_json j;
    size_t i, cut;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(docs); i++) {
        size_t len = strlen(docs[i]);
        for (cut = 0; cut <= len; cut++) {
            char *copy = hp_xmalloc(cut ? cut : 1);
            int rc;
            memcpy(copy, docs[i], cut);
            rc = hp_json_parse(&j, copy, cut);
            /* whole documents parse; only a number may be cut and stay valid */
            if (cut == len)
                assert_int_equal(rc, 0);
            else if (rc == 0)
                assert_int_equal(hp_json_type(&j, 0), HP_JSON_NUMBER);
            free(copy);
        }
    }
    hp_json_free(&j);
}

/* After the first parse of a document, parsing it again allocates nothing; trim gives the
 * memory back after an unusually large one. */
static void test_reuse_and_trim(void **state)
{
    static const char line[] = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"n\"},"
                               "\"spec\":{\"a\":[1,2,3,4,5,6,7,8,9,10]}}}";
    struct hp_json j;
    struct hp_json_tok *toks;
    struct hp_buf big;
    int cap, i;
    (void)state;

    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, line, strlen(line)), 0);
    toks = j.toks;
    cap = j.cap;
    for (i = 0; i < 1000; i++) {
        assert_int_equal(hp_json_parse(&j, line, strlen(line)), 0);
        assert_ptr_equal(j.toks, toks);
        assert_int_equal(j.cap, cap);
    }
    assert_int_equal(hp_json_parse(&j, NULL, 0), -EBADMSG); /* an empty response body */
    /* a failed parse leaves nothing readable but keeps the array */
    assert_int_equal(hp_json_parse(&j, "[1,", 3), -EBADMSG);
    assert_int_equal(j.ntoks, 0);
    assert_ptr_equal(j.toks, toks);

    hp_buf_init(&big, 0);
    assert_int_equal(hp_buf_appends(&big, "["), 0);
    for (i = 0; i < 100000; i++)
        assert_int_equal(hp_buf_appends(&big, i ? ",0" : "0"), 0);
    assert_int_equal(hp_buf_appends(&big, "]"), 0);
    assert_int_equal(hp_json_parse(&j, big.data, big.len), 0);
    assert_int_equal(hp_json_count(&j, 0), 100000);
    assert_int_equal(j.ntoks, 100001);
    assert_true(j.cap >= 100001);
    hp_json_trim(&j, 4096);
    assert_int_equal(j.cap, 0);
    assert_null(j.toks);
    assert_int_equal(hp_json_parse(&j, line, strlen(line)), 0);
    assert_true(j.cap > 0 && j.cap <= 4096);
    hp_json_trim(&j, 4096); /* small: kept */
    assert_non_null(j.toks);
    hp_buf_free(&big);
    hp_json_free(&j);
    hp_json_free(&j); /* idempotent */
}

/* ---- a corpus of realistic Kubernetes documents ---- */

static const char *const corpus[] = {
    /* a claim watch event, managedFields included */
    "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\","
    "\"metadata\":{\"name\":\"data-postgres-0\",\"namespace\":\"shop-production\","
    "\"uid\":\"6f1c2a9e-3d4b-4e8f-9a1b-2c3d4e5f6a7b\",\"resourceVersion\":\"184467\","
    "\"creationTimestamp\":\"2024-05-01T10:00:00Z\",\"labels\":{\"app.kubernetes.io/name\":"
    "\"postgres\"},\"annotations\":{\"kubectl.kubernetes.io/last-applied-configuration\":"
    "\"{\\\"apiVersion\\\":\\\"v1\\\",\\\"kind\\\":\\\"PersistentVolumeClaim\\\",\\\"metadata\\\":"
    "{\\\"annotations\\\":{},\\\"name\\\":\\\"data\\\",\\\"namespace\\\":\\\"shop\\\"}}\\n\","
    "\"volume.kubernetes.io/selected-node\":\"worker-node-03\",\"description\":"
    "\"caf\\u00e9 \\u2014 \\ud83d\\udc18 <&>\"},\"finalizers\":[\"kubernetes.io/pvc-protection\"],"
    "\"managedFields\":[{\"manager\":\"kubectl-client-side-apply\",\"operation\":\"Update\","
    "\"apiVersion\":\"v1\",\"time\":\"2024-05-01T10:00:00Z\",\"fieldsType\":\"FieldsV1\","
    "\"fieldsV1\":{\"f:metadata\":{\"f:annotations\":{\".\":{},"
    "\"f:kubectl.kubernetes.io/last-applied-configuration\":{}}},\"f:spec\":{\"f:accessModes\":{},"
    "\"f:resources\":{\"f:requests\":{\".\":{},\"f:storage\":{}}},\"f:volumeMode\":{}}}}]},"
    "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":"
    "\"20Gi\"},\"limits\":{}},\"storageClassName\":\"hostpath\",\"volumeMode\":\"Filesystem\"},"
    "\"status\":{\"phase\":\"Pending\"}}}",
    /* a PV */
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"annotations\":{"
    "\"hostPathProvisionerIdentity\":\"node-a\",\"pv.kubernetes.io/provisioned-by\":"
    "\"hostpath-provisioner.io\"},\"creationTimestamp\":\"2024-05-01T10:00:01Z\",\"finalizers\":["
    "\"kubernetes.io/pv-protection\"],\"name\":\"pvc-0c5e\",\"resourceVersion\":\"777\","
    "\"uid\":\"a1b2\",\"deletionTimestamp\":\"2024-05-01T11:00:00Z\","
    "\"deletionGracePeriodSeconds\":0},\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],"
    "\"capacity\":{\"storage\":\"2Gi\"},\"claimRef\":{\"apiVersion\":\"v1\",\"kind\":"
    "\"PersistentVolumeClaim\",\"name\":\"data\",\"namespace\":\"shop\",\"resourceVersion\":\"1\","
    "\"uid\":\"0c5e\"},\"hostPath\":{\"path\":\"/var/lib/hp/shop-data-pvc-0c5e\",\"type\":"
    "\"DirectoryOrCreate\"},\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{"
    "\"matchExpressions\":[{\"key\":\"kubernetes.io/hostname\",\"operator\":\"In\",\"values\":["
    "\"node-a\"]}]}]}},\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":"
    "\"hostpath\",\"volumeMode\":\"Filesystem\"},\"status\":{\"phase\":\"Released\","
    "\"lastPhaseTransitionTime\":\"2024-05-01T10:30:00Z\"}}",
    /* a StorageClass list page with a continue token */
    "{\"kind\":\"StorageClassList\",\"apiVersion\":\"storage.k8s.io/v1\",\"metadata\":{"
    "\"resourceVersion\":\"9001\",\"continue\":\"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6OTAwMX0\","
    "\"remainingItemCount\":1},\"items\":[{\"metadata\":{\"name\":\"hostpath\",\"uid\":\"u1\","
    "\"resourceVersion\":\"12\",\"annotations\":{\"storageclass.kubernetes.io/is-default-class\":"
    "\"true\"}},\"provisioner\":\"hostpath-provisioner.io\",\"parameters\":{\"pathPattern\":"
    "\"{{.PVC.Namespace}}/{{.PVC.Name}}\",\"mode\":\"0750\",\"uid\":\"1000\"},"
    "\"reclaimPolicy\":\"Retain\",\"mountOptions\":[\"noatime\",\"nodev\"],"
    "\"allowVolumeExpansion\":true,\"volumeBindingMode\":\"WaitForFirstConsumer\"},"
    "{\"metadata\":{\"name\":\"other\"},\"provisioner\":\"kubernetes.io/no-provisioner\","
    "\"allowVolumeExpansion\":false,\"allowedTopologies\":[]}]}",
    /* a watch ERROR event and a BOOKMARK */
    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
    "\"status\":\"Failure\",\"message\":\"too old resource version: 1 (2)\",\"reason\":\"Expired\","
    "\"code\":410}}",
    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"PersistentVolumeClaim\",\"apiVersion\":\"v1\","
    "\"metadata\":{\"resourceVersion\":\"12746\",\"creationTimestamp\":null,\"annotations\":{"
    "\"k8s.io/initial-events-end\":\"true\"}},\"spec\":{},\"status\":{}}}",
    /* pretty-printed, as kubectl and client libraries write it */
    "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"PersistentVolumeClaim\",\n  \"metadata\": {\n"
    "    \"name\": \"pretty\",\n    \"namespace\": \"default\",\n    \"labels\": {\n"
    "      \"tier\": \"db\"\n    }\n  },\n  \"spec\": {\n    \"accessModes\": [\n"
    "      \"ReadWriteOnce\"\n    ],\n    \"resources\": {\n      \"requests\": {\n"
    "        \"storage\": \"1Gi\"\n      }\n    }\n  },\n  \"status\": {\n    \"capacity\": {"
    "},\n    \"conditions\": [\n      {\n        \"lastProbeTime\": null,\n"
    "        \"status\": \"True\",\n        \"type\": \"Resizing\",\n"
    "        \"observedGeneration\": 3,\n        \"ratio\": 0.75\n      }\n    ]\n  }\n}\n",
};

static void test_corpus_matches_jansson(void **state)
{
    struct hp_json j;
    size_t i;
    (void)state;

    for (i = 0; i < HP_ARRAY_SIZE(corpus); i++)
        assert_same_as_jansson(corpus[i], strlen(corpus[i]));

    /* spot checks of the fields the watch and the decoders read */
    hp_json_init(&j);
    assert_int_equal(hp_json_parse(&j, corpus[0], strlen(corpus[0])), 0);
    int obj = hp_json_get(&j, 0, "object"), ann, k, n = 0;
    char buf[256];
    assert_true(hp_json_str_eq(&j, hp_json_get(&j, 0, "type"), "MODIFIED"));
    assert_true(
        hp_json_str_eq(&j, hp_json_path(&j, obj, "metadata", "resourceVersion", NULL), "184467"));
    assert_true(hp_json_str_eq(
        &j, hp_json_path(&j, obj, "spec", "resources", "requests", "storage", NULL), "20Gi"));
    ann = hp_json_path(&j, obj, "metadata", "annotations", NULL);
    hp_json_str_copy(&j, hp_json_get(&j, ann, "description"), buf, sizeof(buf));
    assert_string_equal(buf, "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x90\x98 <&>");
    for (k = hp_json_first(&j, ann); k >= 0; k = hp_json_next(&j, ann, k))
        n++;
    assert_int_equal(n, 3);

    assert_int_equal(hp_json_parse(&j, corpus[3], strlen(corpus[3])), 0);
    int64_t code = 0;
    assert_int_equal(hp_json_int(&j, hp_json_path(&j, 0, "object", "code", NULL), &code), 0);
    assert_int_equal(code, 410);
    assert_true(hp_json_str_eq(&j, hp_json_path(&j, 0, "object", "reason", NULL), "Expired"));

    assert_int_equal(hp_json_parse(&j, corpus[2], strlen(corpus[2])), 0);
    int items = hp_json_get(&j, 0, "items");
    assert_int_equal(hp_json_count(&j, items), 2);
    int second = hp_json_next(&j, items, hp_json_first(&j, items));
    assert_true(hp_json_str_eq(&j, hp_json_path(&j, second, "metadata", "name", NULL), "other"));
    assert_int_equal(hp_json_next(&j, items, second), -1);
    hp_json_free(&j);
}

/* Random mutations of the corpus: never a crash or an out-of-bounds read, and whenever both
 * readers accept, they agree. Deterministic (fixed seed), bounded by count. */
/* \u0000: accepted, marked, never equal to a C string, copied with the byte in place. */
static void test_nul(void **state)
{
    struct hp_json j;
    char buf[16];
    (void)state;

    hp_json_init(&j);
    const char *doc = "{\"k\":\"ab\\u0000c\",\"plain\":\"ab\",\"esc\":\"a\\u0062\"}";
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    int v = hp_json_get(&j, 0, "k");
    assert_true(hp_json_str_has_nul(&j, v));
    assert_false(hp_json_str_has_nul(&j, hp_json_get(&j, 0, "plain")));
    assert_false(hp_json_str_has_nul(&j, hp_json_get(&j, 0, "esc"))); /* escaped, no NUL */
    assert_false(hp_json_str_has_nul(&j, 0));                          /* not a string */
    assert_int_equal(hp_json_str_len(&j, v), 4);
    assert_int_equal(hp_json_str_copy(&j, v, buf, sizeof(buf)), 4);
    assert_memory_equal(buf, "ab\0c", 5);
    /* A C string cannot hold it: never equal, whatever the prefix. */
    assert_false(hp_json_str_eq(&j, v, "ab"));
    assert_false(hp_json_str_eq(&j, v, "abc"));
    assert_false(hp_json_str_eq(&j, v, ""));
    assert_true(hp_json_str_eq(&j, hp_json_get(&j, 0, "esc"), "ab"));
    /* A raw NUL byte inside a string is still a control character: refused. */
    assert_int_equal(hp_json_parse(&j, "\"a\0b\"", 5), -EBADMSG);
    hp_json_free(&j);
}

/* hp_json_text gives a value's JSON as written, so a body can carry it unchanged; str_dup and
 * has_nul are what readers that replaced jansson use. */
static void test_text_dup_has_nul(void **state)
{
    struct hp_json j;
    size_t len;
    const char *t;
    char *d;
    (void)state;

    hp_json_init(&j);
    const char *doc = " {\"s\":\"a\\\"b\\u00e9\",\"n\":-1.5e3,\"o\":{\"x\":[1, {}]},\"l\":null} ";
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    t = hp_json_text(&j, 0, &len);
    assert_int_equal(len, strlen(doc) - 2); /* the value, without the surrounding spaces */
    assert_memory_equal(t, doc + 1, len);
    t = hp_json_text(&j, hp_json_get(&j, 0, "s"), &len);
    assert_int_equal(len, strlen("\"a\\\"b\\u00e9\""));
    assert_memory_equal(t, "\"a\\\"b\\u00e9\"", len); /* quotes and escapes as written */
    t = hp_json_text(&j, hp_json_get(&j, 0, "n"), &len);
    assert_memory_equal(t, "-1.5e3", len);
    assert_int_equal(len, 6);
    t = hp_json_text(&j, hp_json_get(&j, 0, "o"), &len);
    assert_memory_equal(t, "{\"x\":[1, {}]}", len);
    assert_int_equal(len, 13);
    t = hp_json_text(&j, hp_json_get(&j, 0, "l"), &len);
    assert_memory_equal(t, "null", len);
    assert_null(hp_json_text(&j, -1, &len));
    assert_int_equal(len, 0);
    /* A key's text is the quoted key. */
    t = hp_json_text(&j, hp_json_first(&j, 0), &len);
    assert_memory_equal(t, "\"s\"", len);

    d = hp_json_str_dup(&j, hp_json_get(&j, 0, "s"));
    assert_string_equal(d, "a\"b\xc3\xa9");
    free(d);
    assert_null(hp_json_str_dup(&j, hp_json_get(&j, 0, "n")));
    assert_null(hp_json_str_dup(&j, -1));
    assert_false(hp_json_has_nul(&j));

    doc = "[\"ok\",{\"deep\":[\"x\\u0000\"]}]";
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    assert_true(hp_json_has_nul(&j));
    assert_null(hp_json_str_dup(
        &j, hp_json_first(&j, hp_json_get(&j, hp_json_next(&j, 0, hp_json_first(&j, 0)), "deep"))));
    doc = "{\"k\\u0000\":1}"; /* in a key too */
    assert_int_equal(hp_json_parse(&j, doc, strlen(doc)), 0);
    assert_true(hp_json_has_nul(&j));
    hp_json_free(&j);
}

static void test_mutations_agree_with_jansson(void **state)
{
    static const char alphabet[] = "{}[]\",:\\u0aeE.-+ 19tfn\x80\xc3\xed\xf0";
    struct hp_json j;
    uint64_t rng = 0x243F6A8885A308D3ULL;
    size_t i, r, accepted = 0;
    (void)state;

    hp_json_init(&j);
    for (i = 0; i < HP_ARRAY_SIZE(corpus); i++) {
        size_t len = strlen(corpus[i]);
        char *m = hp_xmalloc(len);
        for (r = 0; r < 2000; r++) {
            size_t k, edits;
            memcpy(m, corpus[i], len);
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            edits = 1 + rng % 3;
            for (k = 0; k < edits; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                m[rng % len] = alphabet[(rng >> 32) % (sizeof(alphabet) - 1)];
            }
            int rc = hp_json_parse(&j, m, len);
            json_t *theirs = json_loadb(m, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (rc == 0 && theirs) {
                json_t *mine = to_jansson(&j, 0);
                assert_non_null(mine);
                assert_same_dump(theirs, mine);
                json_decref(mine);
                accepted++;
            } else if (rc == 0 || theirs) {
                /* the only disagreement allowed here: numbers beyond jansson's range */
                assert_int_equal(rc, 0);
                assert_null(to_jansson(&j, 0));
            }
            json_decref(theirs);
        }
        free(m);
    }
    assert_true(accepted > 0); /* the check above did run */
    hp_json_free(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance),
        cmocka_unit_test(test_types_and_tokens),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_copy_truncates_on_characters),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_errors_report_position),
        cmocka_unit_test(test_exact_length),
        cmocka_unit_test(test_reuse_and_trim),
        cmocka_unit_test(test_corpus_matches_jansson),
        cmocka_unit_test(test_nul),
        cmocka_unit_test(test_text_dup_has_nul),
        cmocka_unit_test(test_mutations_agree_with_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
