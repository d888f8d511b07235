/* buf: growable byte buffer with a hard cap, and the allocation helpers every module uses.
 *
 * Any thread. A buf is owned by whoever embeds it; hp_buf_free releases its memory. The data is
 * always NUL-terminated (the terminator is not counted in len), so text can be read in place.
 *
 * Lifetime: a struct hp_buf is embedded by its owner: hp_buf_init, hp_buf_free (its memory).
 */
#ifndef HOSTPATH_BUF_H
#define HOSTPATH_BUF_H

#include <stdarg.h>
#include <stddef.h>

/* Allocation failure aborts with file and line: callers never check for NULL. */
void *hp__xmalloc(size_t n, const char *file, int line);
void *hp__xcalloc(size_t n, size_t size, const char *file, int line);
void *hp__xrealloc(void *p, size_t n, const char *file, int line);
char *hp__xstrdup(const char *s, const char *file, int line);
char *hp__xstrndup(const char *s, size_t n, const char *file, int line);
#define hp_xmalloc(n) hp__xmalloc((n), __FILE__, __LINE__)
#define hp_xcalloc(n, s) hp__xcalloc((n), (s), __FILE__, __LINE__)
#define hp_xrealloc(p, n) hp__xrealloc((p), (n), __FILE__, __LINE__)
#define hp_xstrdup(s) hp__xstrdup((s), __FILE__, __LINE__)
#define hp_xstrndup(s, n) hp__xstrndup((s), (n), __FILE__, __LINE__)

/* printf into a fresh heap string; caller frees. */
char *hp_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* printf into a caller's error buffer err[errlen], truncating a longer message; does nothing
 * when err is NULL or errlen is 0 (the caller did not ask for a reason). */
void hp_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* How much of a value hp_quote repeats, and the size of a buffer that holds it quoted. */
#define HP_QUOTE_MAX 64
#define HP_QUOTE_LEN (HP_QUOTE_MAX + 8)
/* Copies at most HP_QUOTE_MAX bytes of s[0..n) into dst[dstlen] ("..." after them when s is
 * longer), control characters replaced by '?', for use inside a one-line message: a hostile
 * value cannot break the message (or a log line) it is quoted in. Returns dst. */
const char *hp_quote(char *dst, size_t dstlen, const char *s, size_t n);

struct hp_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
    size_t max; /* hard limit on len; 0 = unlimited */
};

void hp_buf_init(struct hp_buf *b, size_t max);
void hp_buf_free(struct hp_buf *b);
void hp_buf_reset(struct hp_buf *b);
/* 0, or -E2BIG when appending would exceed max (the buffer is then unchanged). */
int hp_buf_append(struct hp_buf *b, const void *data, size_t n);
int hp_buf_appends(struct hp_buf *b, const char *s);
int hp_buf_printf(struct hp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int hp_buf_vprintf(struct hp_buf *b, const char *fmt, va_list ap);
/* Drop the first n bytes, moving the rest to the front. */
void hp_buf_consume(struct hp_buf *b, size_t n);
/* Hand the data to the caller (who frees it) and reset the buffer. Never NULL. */
char *hp_buf_steal(struct hp_buf *b);
/* Append s percent-encoded for a URL query value or path segment. */
int hp_buf_append_urlenc(struct hp_buf *b, const char *s);

#endif
