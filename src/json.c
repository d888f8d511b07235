/* json: single-pass validating tokenizer and the lookups the decoders use (see json.h).
 *
 * Any thread; no shared state. The parser is an explicit state machine (no recursion): a fixed
 * stack of open containers bounds the depth, and each container learns its end and the index
 * after its subtree when it closes. Strings are scanned eight bytes at a time until a quote, a
 * backslash, a control byte or a non-ASCII byte shows up; only then does it go byte by byte.
 * Unescaping happens on demand (hp_json_str_copy / _eq / _len), never during the parse.
 */
#include "hostpath/json.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "hostpath/buf.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FAST_SCAN 1 /* word-at-a-time scanning: the first flagged byte is the lowest bit */
#else
#define FAST_SCAN 0
#endif

/* Rare paths stay out of line so the hot loops keep their registers. */
#define COLD __attribute__((noinline, cold))

/* ---- character classes ---- */

static inline int is_ws(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int hex_val(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Four hex digits at p (caller checked they exist): the code unit, or -1. */
static long hex4(const unsigned char *p)
{
    int a = hex_val(p[0]), b = hex_val(p[1]), c = hex_val(p[2]), d = hex_val(p[3]);

    if ((a | b | c | d) < 0)
        return -1;
    return (long)a << 12 | b << 8 | c << 4 | d;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when any of the 8 bytes is '"', '\\', < 0x20 or >= 0x80 (false positives only after a
 * true hit, which is all the scanner needs: it then goes byte by byte). */
static inline uint64_t special8(uint64_t v)
{
    uint64_t q = v ^ (ONES * '"'), b = v ^ (ONES * '\\');

    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((v - ONES * 0x20) & ~v) | v) & HIGHS;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0 when invalid: overlong
 * forms, encoded surrogates and code points above U+10FFFF are refused, as jansson does. */
static COLD size_t utf8_seq(const unsigned char *p, const unsigned char *e)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    size_t n, i;

    if (c < 0xC2)
        return 0;
    if (c < 0xE0)
        n = 2;
    else if (c < 0xF0) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c < 0xF5) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(e - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    }
    return n;
}

/* ---- token array ---- */

void hp_json_init(struct hp_json *j)
{
    memset(j, 0, sizeof(*j));
}

void hp_json_free(struct hp_json *j)
{
    free(j->toks);
    hp_json_init(j);
}

void hp_json_trim(struct hp_json *j, int max_tokens)
{
    if (j->cap > max_tokens)
        hp_json_free(j);
}

static COLD void grow(struct hp_json *j, int need)
{
    int cap = j->cap ? j->cap : 64;

    while (cap < need)
        cap = cap > INT_MAX / 2 ? INT_MAX : cap * 2;
    j->toks = hp_xrealloc(j->toks, (size_t)cap * sizeof(*j->toks));
    j->cap = cap;
}

/* ---- parser ---- */

struct parser {
    struct hp_json *j;
    const unsigned char *s, *p, *e;
    const char *err;
};

static COLD int fail(struct parser *ps, const unsigned char *at, const char *why)
{
    ps->p = at;
    ps->err = why;
    return -1;
}

static inline int new_tok(struct parser *ps, enum hp_json_type type, const unsigned char *at)
{
    struct hp_json *j = ps->j;
    struct hp_json_tok *t;
    int i = j->ntoks;

    if (i == j->cap) {
        if (i == INT_MAX)
            return fail(ps, at, "too many tokens");
        grow(j, i + 1);
    }
    j->ntoks = i + 1;
    t = &j->toks[i];
    t->start = (uint32_t)(at - ps->s);
    t->end = t->start;
    t->next = (uint32_t)i + 1;
    t->count = 0;
    t->type = (uint8_t)type;
    t->escaped = 0;
    return i;
}

/* One escape at p (p[0] == '\\'); returns the bytes it spans, or 0 when invalid. A \u0000
 * sets *nul. */
static COLD size_t scan_escape(struct parser *ps, const unsigned char *p, int *nul)
{
    const unsigned char *e = ps->e;
    long cp, lo;

    if (e - p < 2) {
        fail(ps, p, "unterminated string");
        return 0;
    }
    switch (p[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return 2;
    case 'u':
        break;
    default:
        fail(ps, p, "invalid escape");
        return 0;
    }
    if (e - p < 6 || (cp = hex4(p + 2)) < 0) {
        fail(ps, p, "invalid \\u escape");
        return 0;
    }
    if (cp == 0) {
        *nul = 1;
        return 6;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail(ps, p, "lone low surrogate");
        return 0;
    }
    if (cp < 0xD800 || cp > 0xDBFF)
        return 6;
    if (e - p < 12 || p[6] != '\\' || p[7] != 'u' || (lo = hex4(p + 8)) < 0xDC00 || lo > 0xDFFF) {
        fail(ps, p, "high surrogate without a low surrogate");
        return 0;
    }
    return 12;
}

/* Bytes that end the plain run of a string: '"', '\\', controls, and non-ASCII (checked as
 * UTF-8). */
static inline int special_byte(unsigned char c)
{
    return c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
}

/* A string starting at the opening quote ps->p. Returns its token index, or -1. */
static inline __attribute__((always_inline)) int scan_string(struct parser *ps)
{
    const unsigned char *start = ps->p + 1, *p = start, *e = ps->e;
    int escaped = 0, nul = 0, t;
    size_t n;

    for (;;) {
#if FAST_SCAN && defined(__SSE2__)
        /* Sixteen bytes at a time. With signed byte compares, c < 0x20 is
         * (int8)(c ^ 0x80) < (int8)0xA0 and c >= 0x80 is (int8)c < 0. */
        while (e - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                _mm_or_si128(_mm_cmplt_epi8(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)),
                                            _mm_set1_epi8((char)0xA0)),
                             _mm_cmplt_epi8(v, _mm_setzero_si128())));
            unsigned m = (unsigned)_mm_movemask_epi8(hit);
            if (m) {
                p += __builtin_ctz(m);
                goto special;
            }
            p += 16;
        }
#endif
#if FAST_SCAN
        /* Eight bytes at a time; the lowest flagged byte is exactly the first special one
         * (false positives only ever sit above a true hit). */
        while (e - p >= 8) {
            uint64_t v, m;
            memcpy(&v, p, 8);
            if ((m = special8(v)) != 0) {
                p += __builtin_ctzll(m) >> 3;
                goto special;
            }
            p += 8;
        }
#endif
        while (p < e && !special_byte(*p))
            p++;
        if (p == e)
            return fail(ps, ps->p, "unterminated string");
#if FAST_SCAN
    special:
#endif
        if (*p == '"')
            break;
        if (*p == '\\') {
            if (!(n = scan_escape(ps, p, &nul)))
                return -1;
            escaped = 1;
            p += n;
        } else if (*p < 0x20) {
            return fail(ps, p, "control character in string");
        } else {
            if (!(n = utf8_seq(p, e)))
                return fail(ps, p, "invalid UTF-8");
            p += n;
        }
    }
    if ((t = new_tok(ps, HP_JSON_STRING, start)) < 0)
        return -1;
    ps->j->toks[t].end = (uint32_t)(p - ps->s);
    ps->j->toks[t].escaped = (uint8_t)(escaped | (nul << 1));
    ps->p = p + 1;
    return t;
}

static int scan_number(struct parser *ps)
{
    const unsigned char *p = ps->p, *e = ps->e;
    int t = new_tok(ps, HP_JSON_NUMBER, p);

    if (t < 0)
        return -1;
    if (*p == '-')
        p++;
    if (p < e && *p == '0')
        p++;
    else if (p < e && *p >= '1' && *p <= '9') {
        while (p < e && is_digit(*p))
            p++;
    } else
        return fail(ps, p, "invalid number");
    if (p < e && *p == '.') {
        if (++p == e || !is_digit(*p))
            return fail(ps, p, "invalid number: digit expected after '.'");
        while (p < e && is_digit(*p))
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (p == e || !is_digit(*p))
            return fail(ps, p, "invalid number: digit expected in exponent");
        while (p < e && is_digit(*p))
            p++;
    }
    ps->j->toks[t].end = (uint32_t)(p - ps->s);
    ps->p = p;
    return t;
}

static int scan_literal(struct parser *ps, const char *word, size_t n, enum hp_json_type type)
{
    const unsigned char *p = ps->p;
    int t;

    if ((size_t)(ps->e - p) < n || memcmp(p, word, n) != 0)
        return fail(ps, p, "invalid literal");
    if ((t = new_tok(ps, type, p)) < 0)
        return -1;
    ps->j->toks[t].end = (uint32_t)(p - ps->s + n);
    ps->p = p + n;
    return t;
}

static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *e)
{
    while (p < e && is_ws(*p))
        p++;
    return p;
}

/* Open a container at ps->p. */
static int open_container(struct parser *ps, enum hp_json_type type, int *stack, int *depth)
{
    int t;

    if (*depth == HP_JSON_MAX_DEPTH)
        return fail(ps, ps->p, "nesting too deep");
    if ((t = new_tok(ps, type, ps->p)) < 0)
        return -1;
    stack[(*depth)++] = t;
    ps->p++;
    return t;
}

static void close_container(struct parser *ps, int t)
{
    struct hp_json_tok *tok = &ps->j->toks[t];

    tok->end = (uint32_t)(ps->p - ps->s + 1);
    tok->next = (uint32_t)ps->j->ntoks;
    ps->p++;
}

static int parse(struct parser *ps)
{
    int stack[HP_JSON_MAX_DEPTH];
    int depth = 0, top, t;
    const unsigned char *e = ps->e;

value:
    ps->p = skip_ws(ps->p, e);
    if (ps->p == e)
        return fail(ps, ps->p, "unexpected end of input");
    switch (*ps->p) {
    case '{':
        if ((t = open_container(ps, HP_JSON_OBJECT, stack, &depth)) < 0)
            return -1;
        ps->p = skip_ws(ps->p, e);
        if (ps->p < e && *ps->p == '}') {
            close_container(ps, t);
            depth--;
            goto after;
        }
        ps->j->toks[t].count = 1;
        goto key;
    case '[':
        if ((t = open_container(ps, HP_JSON_ARRAY, stack, &depth)) < 0)
            return -1;
        ps->p = skip_ws(ps->p, e);
        if (ps->p < e && *ps->p == ']') {
            close_container(ps, t);
            depth--;
            goto after;
        }
        ps->j->toks[t].count = 1;
        goto value;
    case '"':
        if (scan_string(ps) < 0)
            return -1;
        goto after;
    case 't':
        if (scan_literal(ps, "true", 4, HP_JSON_TRUE) < 0)
            return -1;
        goto after;
    case 'f':
        if (scan_literal(ps, "false", 5, HP_JSON_FALSE) < 0)
            return -1;
        goto after;
    case 'n':
        if (scan_literal(ps, "null", 4, HP_JSON_NULL) < 0)
            return -1;
        goto after;
    default:
        if (*ps->p == '-' || is_digit(*ps->p)) {
            if (scan_number(ps) < 0)
                return -1;
            goto after;
        }
        return fail(ps, ps->p, "unexpected character");
    }

key:
    /* ps->p is past whitespace. */
    if (ps->p == e || *ps->p != '"')
        return fail(ps, ps->p, "string key expected");
    if (scan_string(ps) < 0)
        return -1;
    ps->p = skip_ws(ps->p, e);
    if (ps->p == e || *ps->p != ':')
        return fail(ps, ps->p, "':' expected");
    ps->p++;
    goto value;

after:
    ps->p = skip_ws(ps->p, e);
    if (depth == 0) {
        if (ps->p != e)
            return fail(ps, ps->p, "trailing data after the value");
        return 0;
    }
    if (ps->p == e)
        return fail(ps, ps->p, "unexpected end of input");
    top = stack[depth - 1];
    if (*ps->p == ',') {
        ps->p = skip_ws(ps->p + 1, e);
        ps->j->toks[top].count++;
        if (ps->j->toks[top].type == HP_JSON_OBJECT)
            goto key;
        goto value;
    }
    if (*ps->p == (ps->j->toks[top].type == HP_JSON_OBJECT ? '}' : ']')) {
        close_container(ps, top);
        depth--;
        goto after;
    }
    return fail(ps, ps->p,
                ps->j->toks[top].type == HP_JSON_OBJECT ? "',' or '}' expected"
                                                        : "',' or ']' expected");
}

int hp_json_parse(struct hp_json *j, const char *text, size_t len)
{
    struct parser ps;

    j->ntoks = 0;
    j->text = NULL;
    j->len = 0;
    j->err = NULL;
    j->err_pos = 0;
    if (len > HP_JSON_MAX_INPUT) {
        j->err = "document too large";
        return -E2BIG;
    }
    /* A first guess that covers typical Kubernetes objects (about one token per 12 bytes)
     * without a regrow; the array only ever grows, so this costs nothing in steady state. */
    if (j->cap < 64 || (size_t)j->cap < len / 12)
        grow(j, (int)(len / 12 < 64 ? 64 : len / 12));
    if (!text)
        text = ""; /* an empty body: invalid, but no arithmetic on a null pointer */
    ps.j = j;
    ps.s = ps.p = (const unsigned char *)text;
    ps.e = ps.s + len;
    ps.err = NULL;
    if (parse(&ps) != 0) {
        j->ntoks = 0;
        j->err = ps.err;
        j->err_pos = (size_t)(ps.p - ps.s);
        return -EBADMSG;
    }
    j->text = text;
    j->len = len;
    return 0;
}

/* ---- strings ---- */

static inline const struct hp_json_tok *string_tok(const struct hp_json *j, int tok)
{
    return hp_json_type(j, tok) == HP_JSON_STRING ? &j->toks[tok] : NULL;
}

/* Decodes the (validated) escape at *pp into out (1-4 UTF-8 bytes); returns the byte count. */
static size_t unescape(const unsigned char **pp, unsigned char out[4])
{
    const unsigned char *p = *pp;
    long cp;

    *pp = p + 2;
    switch (p[1]) {
    case 'b':
        out[0] = '\b';
        return 1;
    case 'f':
        out[0] = '\f';
        return 1;
    case 'n':
        out[0] = '\n';
        return 1;
    case 'r':
        out[0] = '\r';
        return 1;
    case 't':
        out[0] = '\t';
        return 1;
    case 'u':
        break;
    default: /* '"', '\\', '/' */
        out[0] = p[1];
        return 1;
    }
    cp = hex4(p + 2);
    *pp = p + 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(p + 8) - 0xDC00);
        *pp = p + 12;
    }
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The next character of a string's value: its UTF-8 bytes in out[0..return), advancing *pp.
 * Raw multi-byte characters are returned whole so a copy can stop between characters. */
static size_t next_char(const unsigned char **pp, unsigned char out[4])
{
    const unsigned char *p = *pp;
    size_t n;

    if (*p == '\\')
        return unescape(pp, out);
    n = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
    memcpy(out, p, n);
    *pp = p + n;
    return n;
}

/* hp_json_str_len's slow path (json.h has the fast one): decode to count. */
int hp__json_str_len_escaped(const struct hp_json *j, int tok)
{
    const struct hp_json_tok *t = string_tok(j, tok);
    const unsigned char *p, *e;
    unsigned char tmp[4];
    size_t n = 0;

    if (!t)
        return -1;
    if (!t->escaped)
        return (int)(t->end - t->start);
    p = (const unsigned char *)j->text + t->start;
    e = (const unsigned char *)j->text + t->end;
    while (p < e) {
        const unsigned char *bs = memchr(p, '\\', (size_t)(e - p));
        if (!bs) {
            n += (size_t)(e - p);
            break;
        }
        n += (size_t)(bs - p);
        p = bs;
        n += unescape(&p, tmp);
    }
    return (int)n;
}

int hp_json_str_copy(const struct hp_json *j, int tok, char *dst, size_t cap)
{
    const struct hp_json_tok *t = string_tok(j, tok);
    const unsigned char *p, *e;
    unsigned char ch[4];
    size_t o = 0, n;
    int len;

    if (!t)
        return -EINVAL;
    len = hp_json_str_len(j, tok);
    if (!cap)
        return len;
    p = (const unsigned char *)j->text + t->start;
    e = (const unsigned char *)j->text + t->end;
    if (!t->escaped) {
        n = (size_t)len;
        if (n >= cap) {
            n = cap - 1;
            while (n && (p[n] & 0xC0) == 0x80) /* cut before a whole character */
                n--;
        }
        memcpy(dst, p, n);
        dst[n] = '\0';
        return len;
    }
    while (p < e) {
        const unsigned char *stop = memchr(p, '\\', (size_t)(e - p));
        if (!stop)
            stop = e;
        /* Plain run: copy what fits in one go, then finish character by character. */
        n = (size_t)(stop - p);
        if (o + n < cap) {
            memcpy(dst + o, p, n);
            o += n;
            p = stop;
            if (p == e)
                break;
        }
        n = next_char(&p, ch);
        if (o + n >= cap)
            break;
        memcpy(dst + o, ch, n);
        o += n;
    }
    dst[o] = '\0';
    return len;
}

int hp_json_str_eq(const struct hp_json *j, int tok, const char *lit)
{
    const struct hp_json_tok *t = string_tok(j, tok);
    const unsigned char *p, *e, *l = (const unsigned char *)lit;
    unsigned char ch[4];
    size_t n;

    if (!t || (t->escaped & HP_JSON_ESC_NUL))
        return 0; /* a C string cannot hold a NUL */
    p = (const unsigned char *)j->text + t->start;
    e = (const unsigned char *)j->text + t->end;
    if (!t->escaped) {
        /* No value byte is 0, so strncmp stops at lit's end and lit[n] is in bounds. */
        n = t->end - t->start;
        return strncmp(lit, (const char *)p, n) == 0 && lit[n] == '\0';
    }
    while (p < e) {
        size_t i;
        n = next_char(&p, ch);
        for (i = 0; i < n; i++) { /* byte by byte: stops at lit's NUL, never reads past it */
            if (l[i] != ch[i])
                return 0;
        }
        l += n;
    }
    return *l == '\0';
}

int hp_json_str_eq_tok(const struct hp_json *j, int a, int b)
{
    const struct hp_json_tok *ta = string_tok(j, a), *tb = string_tok(j, b);
    const unsigned char *pa, *ea, *pb, *eb;
    unsigned char ca[4], cb[4];
    size_t na, nb;

    if (!ta || !tb)
        return 0;
    pa = (const unsigned char *)j->text + ta->start;
    ea = (const unsigned char *)j->text + ta->end;
    pb = (const unsigned char *)j->text + tb->start;
    eb = (const unsigned char *)j->text + tb->end;
    if (!ta->escaped && !tb->escaped)
        return ea - pa == eb - pb && memcmp(pa, pb, (size_t)(ea - pa)) == 0;
    /* Decoding is canonical (an escape and the raw character give the same bytes), so equal
     * values are equal character sequences. */
    while (pa < ea && pb < eb) {
        na = next_char(&pa, ca);
        nb = next_char(&pb, cb);
        if (na != nb || memcmp(ca, cb, na) != 0)
            return 0;
    }
    return pa == ea && pb == eb;
}

uint64_t hp_json_str_hash(const struct hp_json *j, int tok)
{
    const struct hp_json_tok *t = string_tok(j, tok);
    const unsigned char *p, *e;
    unsigned char ch[4];
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t n, i;

    if (!t)
        return 0;
    p = (const unsigned char *)j->text + t->start;
    e = (const unsigned char *)j->text + t->end;
    while (p < e) {
        if (*p != '\\') {
            h = (h ^ *p++) * 0x100000001b3ULL;
            continue;
        }
        n = next_char(&p, ch);
        for (i = 0; i < n; i++)
            h = (h ^ ch[i]) * 0x100000001b3ULL;
    }
    return h;
}

const char *hp_json_raw(const struct hp_json *j, int tok, size_t *len)
{
    if (hp_json_type(j, tok) == HP_JSON_NONE) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = j->toks[tok].end - j->toks[tok].start;
    return j->text + j->toks[tok].start;
}

const char *hp_json_text(const struct hp_json *j, int tok, size_t *len)
{
    const char *raw = hp_json_raw(j, tok, len);

    if (raw && hp_json_type(j, tok) == HP_JSON_STRING) {
        raw--; /* the opening quote; end points at the closing one */
        if (len)
            *len += 2;
    }
    return raw;
}

char *hp_json_str_dup(const struct hp_json *j, int tok)
{
    int n = hp_json_str_len(j, tok);
    char *s;

    if (n < 0 || hp_json_str_has_nul(j, tok))
        return NULL;
    s = hp_xmalloc((size_t)n + 1);
    (void)hp_json_str_copy(j, tok, s, (size_t)n + 1);
    return s;
}

int hp_json_has_nul(const struct hp_json *j)
{
    for (int i = 0; i < j->ntoks; i++)
        if (j->toks[i].escaped & HP_JSON_ESC_NUL)
            return 1;
    return 0;
}

int hp_json_int(const struct hp_json *j, int tok, int64_t *out)
{
    size_t len, i = 0;
    const char *s = hp_json_raw(j, tok, &len);
    int neg = 0;
    uint64_t v = 0, limit;

    if (hp_json_type(j, tok) != HP_JSON_NUMBER)
        return -EINVAL;
    if (s[0] == '-') {
        neg = 1;
        i = 1;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        unsigned d;
        if (!is_digit((unsigned char)s[i]))
            return -EINVAL; /* fraction or exponent: a real, not an integer */
        d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

/* ---- lookup and iteration ---- */

int hp_json_first(const struct hp_json *j, int container)
{
    enum hp_json_type t = hp_json_type(j, container);

    if ((t != HP_JSON_OBJECT && t != HP_JSON_ARRAY) || !j->toks[container].count)
        return -1;
    return container + 1;
}

int hp_json_next(const struct hp_json *j, int container, int child)
{
    enum hp_json_type t = hp_json_type(j, container);
    uint32_t n;

    if ((t != HP_JSON_OBJECT && t != HP_JSON_ARRAY) || child <= container ||
        (uint32_t)child >= j->toks[container].next)
        return -1;
    n = t == HP_JSON_OBJECT ? j->toks[child + 1].next : j->toks[child].next;
    return n < j->toks[container].next ? (int)n : -1;
}

int hp_json_get(const struct hp_json *j, int obj, const char *key)
{
    const struct hp_json_tok *toks = j->toks;
    size_t kl;
    uint32_t k, end;
    int found = -1;

    if (hp_json_type(j, obj) != HP_JSON_OBJECT)
        return -1;
    kl = strlen(key);
    end = toks[obj].next;
    for (k = (uint32_t)obj + 1; k < end; k = toks[k + 1].next) {
        const struct hp_json_tok *t = &toks[k];
        if (t->escaped ? hp_json_str_eq(j, (int)k, key)
                       : t->end - t->start == kl && memcmp(j->text + t->start, key, kl) == 0)
            found = (int)k + 1; /* keep looking: the last occurrence wins */
    }
    return found;
}

int hp_json_path(const struct hp_json *j, int tok, ...)
{
    va_list ap;
    const char *key;

    va_start(ap, tok);
    while (tok >= 0 && (key = va_arg(ap, const char *)) != NULL)
        tok = hp_json_get(j, tok, key);
    va_end(ap);
    return tok;
}
