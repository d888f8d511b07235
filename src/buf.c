/* buf: capped growable buffer and allocation helpers. Any thread. */
#include "hostpath/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n, const char *file, int line)
{
    fprintf(stderr, "hostpath-provisioner: out of memory allocating %zu bytes at %s:%d\n", n,
            file, line);
    abort();
}

void *hp__xmalloc(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n, file, line);
    return p;
}

void *hp__xcalloc(size_t n, size_t size, const char *file, int line)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size, file, line);
    return p;
}

void *hp__xrealloc(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n, file, line);
    return q;
}

char *hp__xstrdup(const char *s, const char *file, int line)
{
    return hp__xstrndup(s, strlen(s), file, line);
}

char *hp__xstrndup(const char *s, size_t n, const char *file, int line)
{
    char *p = hp__xmalloc(n + 1, file, line);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *hp_xasprintf(const char *fmt, ...)
{
    struct hp_buf b;
    va_list ap;

    hp_buf_init(&b, 0);
    va_start(ap, fmt);
    (void)hp_buf_vprintf(&b, fmt, ap); /* unlimited buffer: cannot fail */
    va_end(ap);
    return hp_buf_steal(&b);
}

void hp_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(err, errlen, fmt, ap); /* truncation is fine for a reason string */
    va_end(ap);
}

const char *hp_quote(char *dst, size_t dstlen, const char *s, size_t n)
{
    size_t i, o = 0;

    for (i = 0; i < n && o + 4 < dstlen; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == HP_QUOTE_MAX) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        dst[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    dst[o] = '\0';
    return dst;
}

void hp_buf_init(struct hp_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void hp_buf_free(struct hp_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void hp_buf_reset(struct hp_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static int reserve(struct hp_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;

    if (b->max && b->len + extra > b->max)
        return -E2BIG;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->data = hp_xrealloc(b->data, cap);
    b->cap = cap;
    return 0;
}

int hp_buf_append(struct hp_buf *b, const void *data, size_t n)
{
    int rc = reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int hp_buf_appends(struct hp_buf *b, const char *s)
{
    return hp_buf_append(b, s, strlen(s));
}

int hp_buf_vprintf(struct hp_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -EINVAL;
    int rc = reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int hp_buf_printf(struct hp_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = hp_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void hp_buf_consume(struct hp_buf *b, size_t n)
{
    if (n >= b->len) {
        hp_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *hp_buf_steal(struct hp_buf *b)
{
    char *p = b->data ? b->data : hp_xstrdup("");
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

int hp_buf_append_urlenc(struct hp_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t len = b->len;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int rc;
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            rc = hp_buf_append(b, p, 1);
        } else {
            char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = hp_buf_append(b, enc, 3);
        }
        if (rc) { /* all or nothing, like every other append */
            b->len = len;
            if (b->data)
                b->data[len] = '\0';
            return rc;
        }
    }
    return 0;
}
