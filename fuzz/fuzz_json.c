/* libFuzzer target for json: the input is one document, parsed by hp_json and by jansson
 * (JSON_DECODE_ANY). Checks:
 * - never a crash, leak or out-of-bounds read (the input buffer is exactly size bytes);
 * - when both accept, the document rebuilt from hp_json's tokens re-serialises byte for byte as
 *   jansson's parse of it (sorted keys, compact), so structure, unescaping and the last-wins
 *   rule for repeated keys agree;
 * - when only one accepts, it is one of the documented differences: hp_json refuses nesting
 *   deeper than HP_JSON_MAX_DEPTH (jansson allows 2048); jansson refuses numbers beyond
 *   int64/double range (RFC 8259 leaves range to the reader, and hp_json accepts them); jansson
 *   (2.14) skips a NUL byte right after a number or literal ("[1\0]" reads as [1]), which
 *   hp_json refuses like any other NUL outside a string;
 * - every string reads back as valid UTF-8, its length agrees with its copy, it equals its own
 *   copy, and every truncated copy is a prefix made of whole characters; a string holding a
 *   \u0000 is marked and equals no C string (jansson reads it with JSON_ALLOW_NUL, and refuses
 *   it only in an object key);
 * - iteration visits exactly count children, and hp_json_get finds each object key's last value;
 * - the claim, volume and class decoders, run on every object of an accepted document, stay
 *   inside their exact-size block (ASan) and produce only valid UTF-8: hp_pv_build, which
 *   refuses any string that is not, succeeds on every decoded claim.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false
 *   build-fuzz/fuzz/fuzz_json -max_total_time=60
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/json.h"
#include "hostpath/objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

/* jansson 2.14 loses a NUL byte that ends a number or literal (its lexer's look-ahead reads
 * the NUL as "buffer exhausted"), so it accepts "[1\0]"; hp_json stops at that NUL. */
static int jansson_nul_quirk(const char *buf, const struct hp_json *j)
{
    size_t at = j->err_pos;
    unsigned char prev = at ? (unsigned char)buf[at - 1] : 0;

    return at > 0 && buf[at] == '\0' &&
           ((prev >= '0' && prev <= '9') || (prev >= 'a' && prev <= 'z'));
}

static char *str_dup(const struct hp_json *j, int tok)
{
    int n = hp_json_str_len(j, tok), cap;
    char *s, *cut;
    json_t *v;

    CHECK(n >= 0);
    s = hp_xmalloc((size_t)n + 1);
    CHECK(hp_json_str_copy(j, tok, s, (size_t)n + 1) == n);
    if (hp_json_str_has_nul(j, tok)) {
        /* A \u0000 is a byte of the value: a C string cannot hold it, so it never equals one. */
        CHECK(strlen(s) < (size_t)n && !hp_json_str_eq(j, tok, s));
        v = json_stringn(s, (size_t)n);
        CHECK(v);
        json_decref(v);
        return s;
    }
    CHECK(strlen(s) == (size_t)n);
    CHECK(hp_json_str_eq(j, tok, s));
    v = json_stringn(s, (size_t)n); /* jansson validates UTF-8 */
    CHECK(v);
    json_decref(v);
    /* truncated copies: whole characters only, a prefix of the full value */
    cut = hp_xmalloc((size_t)n + 1);
    for (cap = 1; cap <= n && cap <= 8; cap++) {
        size_t got;
        CHECK(hp_json_str_copy(j, tok, cut, (size_t)cap) == n);
        got = strlen(cut);
        CHECK(got < (size_t)cap && memcmp(cut, s, got) == 0);
        CHECK(got == 0 || (unsigned char)s[got] < 0x80 || ((unsigned char)s[got] & 0xC0) == 0xC0);
        v = json_stringn(cut, got);
        CHECK(v);
        json_decref(v);
    }
    free(cut);
    return s;
}

/* The document rebuilt from tokens; NULL when a number is beyond jansson's range. */
static json_t *rebuild(const struct hp_json *j, int tok)
{
    json_t *v, *m;
    const char *raw;
    size_t len;
    int k, n = 0;

    switch (hp_json_type(j, tok)) {
    case HP_JSON_OBJECT:
        v = json_object();
        for (k = hp_json_first(j, tok); k >= 0; k = hp_json_next(j, tok, k), n++) {
            if (hp_json_str_has_nul(j, k)) { /* jansson cannot hold such a key at all */
                free(str_dup(j, k));
                json_decref(v);
                return NULL;
            }
            char *key = str_dup(j, k);
            int last = hp_json_get(j, tok, key);
            CHECK(last >= k + 1);
            CHECK(hp_json_str_eq(j, last - 1, key));
            CHECK(hp_json_str_eq_tok(j, k, last - 1) && hp_json_str_eq_tok(j, last - 1, k));
            CHECK(hp_json_str_hash(j, k) == hp_json_str_hash(j, last - 1));
            CHECK(!hp_json_str_eq_tok(j, k, k + 1) || hp_json_str_eq(j, k + 1, key));
            m = rebuild(j, k + 1);
            if (!m) {
                free(key);
                json_decref(v);
                return NULL;
            }
            CHECK(json_object_set_new(v, key, m) == 0);
            free(key);
        }
        CHECK(n == hp_json_count(j, tok));
        return v;
    case HP_JSON_ARRAY:
        v = json_array();
        for (k = hp_json_first(j, tok); k >= 0; k = hp_json_next(j, tok, k), n++) {
            m = rebuild(j, k);
            if (!m) {
                json_decref(v);
                return NULL;
            }
            CHECK(json_array_append_new(v, m) == 0);
        }
        CHECK(n == hp_json_count(j, tok));
        return v;
    case HP_JSON_STRING: {
        char *s = str_dup(j, tok);
        v = json_stringn(s, (size_t)hp_json_str_len(j, tok));
        free(s);
        CHECK(v);
        return v;
    }
    case HP_JSON_NUMBER: {
        int64_t iv;
        raw = hp_json_raw(j, tok, &len);
        v = json_loadb(raw, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (v && json_is_integer(v))
            CHECK(hp_json_int(j, tok, &iv) == 0 && iv == json_integer_value(v));
        else
            CHECK(hp_json_int(j, tok, &iv) != 0);
        return v;
    }
    case HP_JSON_TRUE:
        return json_true();
    case HP_JSON_FALSE:
        return json_false();
    case HP_JSON_NULL:
        return json_null();
    case HP_JSON_NONE:
        break;
    }
    abort();
}

static void check_text(const char *s)
{
    json_t *v = json_string(s); /* NULL when not UTF-8 */
    CHECK(v);
    json_decref(v);
}

static void check_packed(const char *p)
{
    for (; *p; p = hp_packed_next(p))
        check_text(p);
}

/* Every object in the document, decoded as each kind. */
static void decode_all(const struct hp_json *j)
{
    int t;

    for (t = 0; t < j->ntoks; t++) {
        struct hp_claim *c;
        struct hp_volume *v;
        struct hp_class *k;
        if (!hp_json_is(j, t, HP_JSON_OBJECT))
            continue;
        if ((c = hp_claim_decode(j, t)) != NULL) {
            struct hp_pv_spec sp = {.name = "pvc-x",
                                    .claim = c,
                                    .provisioner = "p",
                                    .identity = "i",
                                    .path = "/x",
                                    .node = c->selected_node};
            char *pv = hp_pv_build(&sp);
            CHECK(pv);
            free(pv);
            CHECK((size_t)(c->name - c->key) == strlen(c->namespace_) + 1 && c->name[-1] == '/');
            check_packed(c->annotations);
            check_packed(c->labels);
            if (c->provisioner)
                check_text(c->provisioner);
            free(c);
        }
        if ((v = hp_volume_decode(j, t)) != NULL) {
            const char *f[] = {
                v->name,       v->resource_version, v->phase,      v->provisioned_by, v->identity,
                v->class_name, v->claim_namespace,  v->claim_name, v->claim_uid,      v->path};
            size_t i;
            for (i = 0; i < sizeof(f) / sizeof(f[0]); i++)
                check_text(f[i]);
            free(v);
        }
        if ((k = hp_class_decode(j, t)) != NULL) {
            check_text(k->name);
            check_text(k->provisioner);
            check_text(k->resource_version);
            check_packed(k->parameters);
            check_packed(k->mount_options);
            free(k);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hp_json j; /* reused across inputs, as the watch reuses its reader */
    char *buf = hp_xmalloc(size ? size : 1);
    json_t *theirs, *mine;
    int rc;

    memcpy(buf, data, size);
    rc = hp_json_parse(&j, buf, size);
    theirs = json_loadb(buf, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (rc != 0) {
        CHECK(rc == -EBADMSG && j.ntoks == 0 && j.err && j.err_pos <= size);
        CHECK(!theirs || strcmp(j.err, "nesting too deep") == 0 || jansson_nul_quirk(buf, &j));
    } else {
        CHECK(j.toks[0].next == (uint32_t)j.ntoks);
        decode_all(&j);
        mine = rebuild(&j, 0);
        if (theirs) {
            char *a = json_dumps(theirs, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
            char *b;
            CHECK(mine);
            b = json_dumps(mine, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
            CHECK(a && b && strcmp(a, b) == 0);
            free(a);
            free(b);
        } else {
            CHECK(!mine); /* only a number out of jansson's range, or a NUL in a key */
        }
        json_decref(mine);
    }
    json_decref(theirs);
    hp_json_trim(&j, 1 << 16);
    free(buf);
    return 0;
}
