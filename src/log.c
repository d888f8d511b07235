/* log: klog-style text ("I1122 10:00:00.000000 pid file:line] msg") or one JSON object per line.
 * Any thread: a line is built in a stack buffer and written with one write(2).
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

/* Appends s as a JSON string body (without quotes) into out, escaping as needed. */
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

static size_t json_escape(char *out, size_t cap, size_t pos, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    /* Room for the longest escape (6 bytes) and the closing "}\n, so the line stays JSON. */
    for (; *s && pos + 10 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[pos++] = '\\';
            out[pos++] = (char)c;
        } else if (c == '\n') {
            out[pos++] = '\\';
            out[pos++] = 'n';
        } else if (c < 0x20) {
            pos += (size_t)snprintf(out + pos, cap - pos, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
        } else {
            out[pos++] = (char)c;
        }
    }
    return pos;
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
        static const char *names[] = {"error", "warning", "info"};
        char ts[40];
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
        n = (size_t)snprintf(out, sizeof(out),
                             "{\"ts\":\"%s.%06ldZ\",\"level\":\"%s\",\"v\":%d,\"caller\":\"%s:%d\","
                             "\"msg\":\"",
                             ts, (long)tv.tv_usec, names[level], v, base_name(file), line);
        n = json_escape(out, sizeof(out), n, msg);
        n += (size_t)snprintf(out + n, sizeof(out) - n, "\"}\n");
    } else {
        static const char letters[] = {'E', 'W', 'I'};
        n = (size_t)snprintf(out, sizeof(out), "%c%02d%02d %02d:%02d:%02d.%06ld %7d %s:%d] %s\n",
                             letters[level], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                             tm.tm_sec, (long)tv.tv_usec, (int)getpid(), base_name(file), line,
                             msg);
    }
    if (n >= sizeof(out)) {
        n = sizeof(out) - 1;
        out[n - 1] = '\n';
    }
    ssize_t w = write(log_fd, out, n);
    (void)w; /* nowhere to report a failed log write */
}
