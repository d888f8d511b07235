/* log: klog-style text ("I1122 10:00:00.000000 pid file:line] msg") or one JSON object per line.
 * Any thread: a line is built in a stack buffer and written with one write(2).
 *
 * JSON lines carry the key=value pairs of a message as fields of their own (see fields below);
 * whatever the message holds, a line is one valid JSON object in valid UTF-8, also when it is
 * cut at its size limit.
 */
#include "hostpath/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int log_verbosity;
static enum hp_log_format log_format = HP_LOG_TEXT;
static int log_fd = STDERR_FILENO;

void hp_log_init(int verbosity, enum hp_log_format format)
{
    log_verbosity = verbosity;
    log_format = format;
}

int hp_log_verbosity(void)
{
    return log_verbosity;
}

void hp_log_set_fd(int fd)
{
    log_fd = fd < 0 ? STDERR_FILENO : fd;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Drops an incomplete UTF-8 sequence at the end of s[0..len). */
static void utf8_trim(char *s, size_t len)
{
    size_t i = len, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && back + 1 < need)
        s[i - 1] = '\0';
}

/* ---- JSON output ---- */

/* Room always kept for what closes a line from inside a string: '"', '}' and '\n'. */
#define JSON_TAIL 3

/* A JSON line under construction: every write keeps JSON_TAIL bytes free, so the line can be
 * closed wherever it had to stop. Once something did not fit, nothing more is added. */
struct jline {
    char *buf;
    size_t cap;
    size_t pos;
    int full;
};

static int jraw(struct jline *j, const char *s, size_t n)
{
    if (j->full || j->pos + n + JSON_TAIL > j->cap) {
        j->full = 1;
        return -1;
    }
    memcpy(j->buf + j->pos, s, n);
    j->pos += n;
    return 0;
}

static int jraws(struct jline *j, const char *s)
{
    return jraw(j, s, strlen(s));
}

/* Length of the well-formed UTF-8 sequence at s[0..n) (n > 0, s[0] >= 0x80), or 0 when it is
 * not one (stray continuation byte, overlong form, surrogate, beyond U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;

    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* beyond U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* Appends s[0..n) as the body of a JSON string: quotes, backslashes and control characters
 * escaped, bytes that are not UTF-8 replaced by U+FFFD. A character or escape is written whole
 * or not at all. */
static void jstr(struct jline *j, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    char esc[8];

    for (size_t i = 0; i < n && !j->full;) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            if (jraw(j, esc, 2) == 0)
                i++;
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u00%c%c", hex[c >> 4], hex[c & 15]);
            if (jraw(j, esc, 6) == 0)
                i++;
        } else if (c < 0x80) {
            if (jraw(j, s + i, 1) == 0)
                i++;
        } else {
            size_t len = utf8_len(u + i, n - i);
            if (len == 0) {
                if (jraws(j, "\\ufffd") == 0)
                    i++;
            } else if (jraw(j, s + i, len) == 0) {
                i += len;
            }
        }
    }
}

/* Closes the string being written; JSON_TAIL guarantees the room. */
static void jclose_str(struct jline *j)
{
    j->buf[j->pos++] = '"';
}

/* ---- key=value pairs of a message ---- */

/* Fields of a JSON line beyond the message: the key=value pairs that end a message (after
 * "module: text"), and the pairs with one of these keys anywhere in it. */
static const char *const known_keys[] = {"claim", "pv", "node", "err"};
/* Names of the line's own members: a pair with one of these keys stays in the message. */
static const char *const reserved_keys[] = {"ts", "level", "v", "caller", "msg"};

/* The longest run of pairs kept at the end of a message (earlier ones stay in msg). */
#define MAX_TRAILING 32

struct span {
    size_t start, end; /* the token */
    size_t key, key_len;
    size_t val, val_len;
    int kv;
};

static int is_key_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_key_char(char c)
{
    return is_key_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

/* Length of "key=" at s[i..n), or 0 when there is none. */
static size_t key_eq_len(const char *s, size_t i, size_t n)
{
    size_t k = i;
    if (k >= n || !is_key_start(s[k]))
        return 0;
    while (k < n && is_key_char(s[k]))
        k++;
    return k < n && s[k] == '=' ? k + 1 - i : 0;
}

/* Reads the token at s[i..n) (i on a non-space). A pair is key=value, the value either up to the
 * next space or quoted. Quotes inside a quoted value are not escaped by the callers, so the
 * closing quote is the first one followed by the end of the message or by spaces and the next
 * "key=" (`message="User "x" cannot list" code=403` reads as message and code), else the first
 * one followed by a space. A quote that closes nothing makes the token plain text. */
static struct span read_token(const char *s, size_t i, size_t n)
{
    struct span t = {.start = i};
    size_t kl = key_eq_len(s, i, n);
    if (kl) {
        size_t v = i + kl;
        if (v < n && s[v] == '"') {
            size_t close = 0; /* 0: none; else the closing quote's index */
            for (size_t q = v + 1; q < n; q++) {
                if (s[q] != '"')
                    continue;
                size_t after = q + 1;
                while (after < n && s[after] == ' ')
                    after++;
                if (after == n || (after > q + 1 && key_eq_len(s, after, n))) {
                    close = q;
                    break;
                }
                if (!close && after > q + 1)
                    close = q; /* the first quote that ends a word, unless a better one */
            }
            if (close) {
                t.end = close + 1;
                t.key = i;
                t.key_len = kl - 1;
                t.val = v + 1;
                t.val_len = close - v - 1;
                t.kv = 1;
                return t;
            }
        } else {
            size_t e = v;
            while (e < n && s[e] != ' ')
                e++;
            t.end = e;
            t.key = i;
            t.key_len = kl - 1;
            t.val = v;
            t.val_len = e - v;
            t.kv = 1;
            return t;
        }
    }
    t.end = i;
    while (t.end < n && s[t.end] != ' ')
        t.end++;
    return t;
}

static int key_in(const char *s, const struct span *t, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(set[i]) == t->key_len && memcmp(set[i], s + t->key, t->key_len) == 0)
            return 1;
    return 0;
}

static int same_key(const char *s, const struct span *a, const struct span *b)
{
    return a->key_len == b->key_len && memcmp(s + a->key, s + b->key, a->key_len) == 0;
}

struct fields {
    struct span tail[MAX_TRAILING]; /* the trailing pairs, in order */
    size_t ntail;
    struct span known[sizeof(known_keys) / sizeof(known_keys[0])]; /* first earlier ones */
    size_t nknown;
    size_t msg_len; /* what stays in msg */
};

static void add_known(const char *s, struct fields *f, const struct span *t)
{
    if (!key_in(s, t, known_keys, sizeof(known_keys) / sizeof(known_keys[0])))
        return;
    for (size_t i = 0; i < f->nknown; i++)
        if (same_key(s, &f->known[i], t))
            return;
    for (size_t i = 0; i < f->ntail; i++)
        if (same_key(s, &f->tail[i], t))
            return;
    f->known[f->nknown++] = *t;
}

/* Splits msg[0..n) into the text kept in msg and its fields. Memory is bounded whatever the
 * message: only the last MAX_TRAILING tokens and the first pair of each known key are kept. */
static void split_fields(const char *s, size_t n, struct fields *f)
{
    struct span ring[MAX_TRAILING];
    struct span first_known[sizeof(known_keys) / sizeof(known_keys[0])];
    size_t ntok = 0, nfirst = 0;

    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < n;) {
        if (s[i] == ' ') {
            i++;
            continue;
        }
        struct span t = read_token(s, i, n);
        ring[ntok % MAX_TRAILING] = t;
        ntok++;
        if (t.kv && nfirst < sizeof(first_known) / sizeof(first_known[0]) &&
            key_in(s, &t, known_keys, sizeof(known_keys) / sizeof(known_keys[0]))) {
            int dup = 0;
            for (size_t k = 0; k < nfirst; k++)
                dup |= same_key(s, &first_known[k], &t);
            if (!dup)
                first_known[nfirst++] = t;
        }
        i = t.end;
    }
    /* The trailing run: pairs with distinct keys of their own, from the end backwards. */
    size_t lo = ntok > MAX_TRAILING ? ntok - MAX_TRAILING : 0, first = ntok;
    while (first > lo) {
        const struct span *t = &ring[(first - 1) % MAX_TRAILING];
        int ok = t->kv && !key_in(s, t, reserved_keys,
                                  sizeof(reserved_keys) / sizeof(reserved_keys[0]));
        for (size_t k = first; ok && k < ntok; k++)
            ok = !same_key(s, t, &ring[k % MAX_TRAILING]);
        if (!ok)
            break;
        first--;
    }
    for (size_t k = first; k < ntok; k++)
        f->tail[f->ntail++] = ring[k % MAX_TRAILING];
    f->msg_len = first < ntok ? ring[first % MAX_TRAILING].start : n;
    while (f->msg_len > 0 && s[f->msg_len - 1] == ' ')
        f->msg_len--;
    /* Known keys earlier in the message: fields too, and left in msg. */
    for (size_t k = 0; k < nfirst; k++)
        if (first_known[k].start < f->msg_len)
            add_known(s, f, &first_known[k]);
}

static void jfield(struct jline *j, const char *s, const struct span *t)
{
    if (jraw(j, ",\"", 2) || jraw(j, s + t->key, t->key_len) || jraw(j, "\":\"", 3))
        return;
    jstr(j, s + t->val, t->val_len);
    jclose_str(j);
}

static size_t format_json(char *out, size_t cap, const struct tm *tm, long usec,
                          enum hp_log_level level, int v, const char *file, int line,
                          const char *msg)
{
    static const char *names[] = {"error", "warning", "info"};
    struct jline j = {.buf = out, .cap = cap};
    struct fields f;
    char head[256], ts[40];
    size_t n = strlen(msg);

    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", tm);
    int hl = snprintf(head, sizeof(head),
                      "{\"ts\":\"%s.%06ldZ\",\"level\":\"%s\",\"v\":%d,\"caller\":\"", ts, usec,
                      names[level], v);
    (void)jraw(&j, head, (size_t)hl < sizeof(head) ? (size_t)hl : sizeof(head) - 1);
    snprintf(head, sizeof(head), "%s:%d", base_name(file), line);
    jstr(&j, head, strlen(head));
    jclose_str(&j);
    split_fields(msg, n, &f);
    if (jraws(&j, ",\"msg\":\"") == 0) {
        jstr(&j, msg, f.msg_len);
        jclose_str(&j);
    }
    for (size_t i = 0; i < f.nknown; i++)
        jfield(&j, msg, &f.known[i]);
    for (size_t i = 0; i < f.ntail; i++)
        jfield(&j, msg, &f.tail[i]);
    out[j.pos++] = '}';
    out[j.pos++] = '\n';
    return j.pos;
}

void hp__log(enum hp_log_level level, int v, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    char out[4608];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    int full = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (full >= (int)sizeof(msg))
        utf8_trim(msg, sizeof(msg) - 1); /* cut short: never in the middle of a character */
    va_end(ap);
    /* One message is one line: fold embedded newlines. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    if (log_format == HP_LOG_JSON) {
        n = format_json(out, sizeof(out) - 1, &tm, (long)tv.tv_usec, level, v, file, line, msg);
    } else {
        static const char letters[] = {'E', 'W', 'I'};
        n = (size_t)snprintf(out, sizeof(out), "%c%02d%02d %02d:%02d:%02d.%06ld %7d %s:%d] %s\n",
                             letters[level], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                             tm.tm_sec, (long)tv.tv_usec, (int)getpid(), base_name(file), line,
                             msg);
        if (n >= sizeof(out)) {
            n = sizeof(out) - 1;
            out[n - 1] = '\n';
        }
    }
    ssize_t w = write(log_fd, out, n);
    (void)w; /* nowhere to report a failed log write */
}
