/* json: a validating, allocation-free (in steady state) JSON reader for the watch path.
 *
 * Any thread; a struct hp_json is used by one thread at a time. hp_json_parse makes one pass
 * over a buffer and fills a flat array of tokens in document order, jsmn style: a container's
 * token is followed by its children, an object's children alternate key (a string token) and
 * value. Each token knows the index of the token after its subtree (next), so skipping a value
 * is O(1). The token array belongs to the struct hp_json and is reused by the next parse; it
 * grows geometrically, so a reader kept across watch lines stops allocating once it has seen the
 * largest line.
 *
 * Validation is RFC 8259 with jansson's extra strictness, so the decoders never produce text
 * jansson would have refused: the whole input must be one value (any type) plus whitespace;
 * strings must be UTF-8 (no overlong forms, no encoded surrogates, nothing above U+10FFFF) with
 * no raw control characters; escapes are the RFC's eight plus \uXXXX, where a high surrogate
 * must be followed by a low one and a lone low surrogate is refused; \u0000 is valid JSON and
 * accepted (the real API server stores it in annotation values), but a string holding one is
 * marked (hp_json_str_has_nul): copied out it would be cut short, so readers that copy strings
 * check it and refuse the value; numbers follow the
 * RFC grammar (any magnitude is accepted: range is the reader of the number's business);
 * nesting deeper than HP_JSON_MAX_DEPTH containers is refused.
 *
 * Token indices are ints; the root is token 0; -1 means "none". Every function taking a token
 * accepts -1 (or an index of the wrong type) and answers "absent", so lookups chain:
 *     hp_json_str_eq(j, hp_json_path(j, 0, "object", "metadata", "name", NULL), "x")
 * Objects with a repeated key answer with the LAST occurrence, as jansson and Go do.
 *
 * The reader borrows the parsed text: it must stay unchanged while tokens are read.
 *
 * Lifetime: a struct hp_json is embedded by its owner: hp_json_init, hp_json_free.
 */
#ifndef HOSTPATH_JSON_H
#define HOSTPATH_JSON_H

#include <stddef.h>
#include <stdint.h>

#define HP_JSON_MAX_DEPTH 512
/* Largest input hp_json_parse accepts (offsets are 32-bit, indices are ints). */
#define HP_JSON_MAX_INPUT ((size_t)0x7ffffffe)

enum hp_json_type {
    HP_JSON_NONE = 0, /* what hp_json_type answers for -1 */
    HP_JSON_OBJECT,
    HP_JSON_ARRAY,
    HP_JSON_STRING,
    HP_JSON_NUMBER,
    HP_JSON_TRUE,
    HP_JSON_FALSE,
    HP_JSON_NULL,
};

#define HP_JSON_ESC 1
#define HP_JSON_ESC_NUL 2

struct hp_json_tok {
    uint32_t start;  /* first byte: '{', '[', a number's first char; a string's first byte after
                        the opening quote */
    uint32_t end;    /* one past the last byte ('}', ']'); a string's closing quote */
    uint32_t next;   /* index of the first token after this value's subtree */
    uint32_t count;  /* members of an object (key/value pairs), elements of an array, else 0 */
    uint8_t type;    /* enum hp_json_type */
    uint8_t escaped; /* string holds a backslash escape (HP_JSON_ESC): its raw bytes are not its
                        value; HP_JSON_ESC_NUL too when one of them is \u0000 */
};

struct hp_json {
    const char *text; /* borrowed: the buffer of the last successful parse */
    size_t len;
    struct hp_json_tok *toks; /* owned */
    int ntoks;
    int cap;
    /* After a failed parse: a static description and the byte offset where it was found. */
    const char *err;
    size_t err_pos;
};

void hp_json_init(struct hp_json *j);
/* Releases the token array; the struct may be parsed into again after hp_json_init. */
void hp_json_free(struct hp_json *j);
/* Releases the token array when it holds more than max_tokens (after an unusually large
 * document), so a long-lived reader does not keep its high-water mark forever. */
void hp_json_trim(struct hp_json *j, int max_tokens);

/* Parses text[0..len) (need not be NUL-terminated; borrowed until the next parse or free).
 * Returns 0 (root is token 0), -EBADMSG for invalid JSON (j->err, j->err_pos say why and where;
 * no tokens are readable), or -E2BIG when len exceeds HP_JSON_MAX_INPUT. */
int hp_json_parse(struct hp_json *j, const char *text, size_t len);

static inline enum hp_json_type hp_json_type(const struct hp_json *j, int tok)
{
    return tok >= 0 && tok < j->ntoks ? (enum hp_json_type)j->toks[tok].type : HP_JSON_NONE;
}

static inline int hp_json_is(const struct hp_json *j, int tok, enum hp_json_type t)
{
    return hp_json_type(j, tok) == t;
}

/* Members of an object or elements of an array; 0 for anything else. */
static inline int hp_json_count(const struct hp_json *j, int tok)
{
    return tok >= 0 && tok < j->ntoks ? (int)j->toks[tok].count : 0;
}

/* Iteration. An object's first key, or an array's first element; -1 when empty or not a
 * container. For an object the value is key + 1.
 *     for (k = hp_json_first(j, obj); k >= 0; k = hp_json_next(j, obj, k)) { v = k + 1; ... }
 *     for (e = hp_json_first(j, arr); e >= 0; e = hp_json_next(j, arr, e)) { ... }
 * hp_json_next: the child after child (a key for objects), or -1 after the last. */
int hp_json_first(const struct hp_json *j, int container);
int hp_json_next(const struct hp_json *j, int container, int child);

/* The value of key in object obj (last occurrence), or -1. Keys are compared unescaped. */
int hp_json_get(const struct hp_json *j, int obj, const char *key);
/* hp_json_get along a path of keys ending with NULL: hp_json_path(j, 0, "a", "b", NULL). */
int hp_json_path(const struct hp_json *j, int tok, ...) __attribute__((sentinel));

/* True when tok is a string whose value holds a NUL (an escaped \u0000). */
static inline int hp_json_str_has_nul(const struct hp_json *j, int tok)
{
    return hp_json_type(j, tok) == HP_JSON_STRING && (j->toks[tok].escaped & HP_JSON_ESC_NUL);
}

/* Unescaped length in bytes of a string token; -1 when tok is not a string. */
int hp__json_str_len_escaped(const struct hp_json *j, int tok);
static inline int hp_json_str_len(const struct hp_json *j, int tok)
{
    if (hp_json_type(j, tok) != HP_JSON_STRING)
        return -1;
    if (j->toks[tok].escaped)
        return hp__json_str_len_escaped(j, tok);
    return (int)(j->toks[tok].end - j->toks[tok].start);
}
/* Copies the unescaped string into dst and NUL-terminates it, like snprintf: writes at most
 * cap - 1 bytes (cutting only between UTF-8 characters) and returns the full unescaped length,
 * so a return >= cap means it was cut. -EINVAL when tok is not a string. */
int hp_json_str_copy(const struct hp_json *j, int tok, char *dst, size_t cap);
/* True when tok is a string whose unescaped value equals the C string lit. */
int hp_json_str_eq(const struct hp_json *j, int tok, const char *lit);
/* True when a and b are strings with the same unescaped value. */
int hp_json_str_eq_tok(const struct hp_json *j, int a, int b);
/* 64-bit FNV-1a of a string's unescaped value (equal values hash equal); 0 for non-strings. */
uint64_t hp_json_str_hash(const struct hp_json *j, int tok);
/* Raw bytes of a token (a string's without its quotes, escapes left as written); NULL for -1. */
const char *hp_json_raw(const struct hp_json *j, int tok, size_t *len);
/* The value at tok as JSON text, exactly as written (a string with its quotes, a container with
 * everything in it); NULL for -1. It is valid JSON: a body can carry what the server sent
 * unchanged by copying it (no writer needed). */
const char *hp_json_text(const struct hp_json *j, int tok, size_t *len);
/* A heap copy of a string's unescaped value (caller frees), or NULL when tok is not a string or
 * the string holds a NUL. */
char *hp_json_str_dup(const struct hp_json *j, int tok);
/* 1 when some string of the parsed document holds a NUL (\u0000), which jansson refuses
 * without JSON_ALLOW_NUL: a reader that must refuse what jansson refused checks this. */
int hp_json_has_nul(const struct hp_json *j);
/* A number without fraction or exponent that fits int64_t (jansson's json_is_integer): 0, or
 * -EINVAL (not an integer token) or -ERANGE. */
int hp_json_int(const struct hp_json *j, int tok, int64_t *out);

#endif
