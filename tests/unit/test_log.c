/* Unit tests for log: klog-style text and JSON lines written to a pipe (hp_log_set_fd), one line
 * per call, verbosity filtering, escaping, and over-long messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hostpath/log.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))
#define OUT_MAX 65536

static int pipe_fds[2] = {-1, -1};
static char out[OUT_MAX + 1];
static char ctx[64]; /* which case a failure message is about */

static int setup(void **state)
{
    (void)state;
    snprintf(ctx, sizeof(ctx), "line");
    if (pipe(pipe_fds) != 0)
        return -1;
    /* The reader never blocks: what one call wrote is all there is to read. */
    if (fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK) != 0)
        return -1;
    hp_log_set_fd(pipe_fds[1]);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hp_log_set_fd(-1);
    hp_log_init(0, HP_LOG_TEXT);
    (void)close(pipe_fds[0]);
    (void)close(pipe_fds[1]);
    return 0;
}

/* Everything written since the last call, NUL-terminated in `out`; returns its length. */
static size_t drain(void)
{
    size_t len = 0;
    for (;;) {
        ssize_t n = read(pipe_fds[0], out + len, OUT_MAX - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
    return len;
}

/* Exactly one line: ends with the only '\n', and no other control character. */
static void assert_one_line(const char *s, size_t len)
{
    assert_true(len > 0);
    assert_int_equal(s[len - 1], '\n');
    for (size_t i = 0; i + 1 < len; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
            fail_msg("control character 0x%02x at %zu of a %zu-byte line", (unsigned char)s[i],
                     i, len);
}

/* ---- text ---- */

/* Matches one text line; fills the pid, caller line and message. */
static void parse_text(const char *line, char level, long *pid, int *lineno, char *msg,
                       size_t msglen)
{
    regex_t re;
    regmatch_t m[5];
    assert_int_equal(regcomp(&re,
                             "^([EWI])[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} +([0-9]+) "
                             "test_log\\.c:([0-9]+)\\] (.*)\n$",
                             REG_EXTENDED),
                     0);
    int rc = regexec(&re, line, N_CASES(m), m, 0);
    regfree(&re);
    if (rc != 0)
        fail_msg("not a klog line: \"%.200s\"", line);
    assert_int_equal(line[0], level);
    *pid = strtol(line + m[2].rm_so, NULL, 10);
    *lineno = (int)strtol(line + m[3].rm_so, NULL, 10);
    snprintf(msg, msglen, "%.*s", (int)(m[4].rm_eo - m[4].rm_so), line + m[4].rm_so);
}

static void test_text_levels(void **state)
{
    long pid;
    int lineno, want_line;
    char msg[256];
    (void)state;

    hp_log_init(0, HP_LOG_TEXT);
    want_line = __LINE__ + 1;
    hp_log_info("mod: hello %d key=%s", 42, "v");
    assert_one_line(out, drain());
    parse_text(out, 'I', &pid, &lineno, msg, sizeof(msg));
    assert_int_equal(pid, (long)getpid());
    assert_int_equal(lineno, want_line);
    assert_string_equal(msg, "mod: hello 42 key=v");

    want_line = __LINE__ + 1;
    hp_log_warn("mod: careful");
    assert_one_line(out, drain());
    parse_text(out, 'W', &pid, &lineno, msg, sizeof(msg));
    assert_int_equal(lineno, want_line);
    assert_string_equal(msg, "mod: careful");

    hp_log_error("mod: failed: %s", "boom");
    assert_one_line(out, drain());
    parse_text(out, 'E', &pid, &lineno, msg, sizeof(msg));
    assert_string_equal(msg, "mod: failed: boom");
}

static void test_text_one_line_per_call(void **state)
{
    long pid;
    int lineno;
    char msg[256];
    (void)state;

    hp_log_init(0, HP_LOG_TEXT);
    /* Embedded line breaks are folded: a message can never forge a second line. */
    hp_log_info("a\nb\rc\r\n");
    assert_one_line(out, drain());
    parse_text(out, 'I', &pid, &lineno, msg, sizeof(msg));
    assert_string_equal(msg, "a b c  ");

    /* Three calls, three lines, in order. */
    hp_log_info("one");
    hp_log_warn("two");
    hp_log_error("three");
    drain();
    static const char levels[] = "IWE";
    const char *l = out;
    for (size_t i = 0; i < 3; i++) {
        const char *nl = strchr(l, '\n');
        assert_non_null(nl);
        assert_int_equal(l[0], levels[i]);
        l = nl + 1;
    }
    assert_int_equal(*l, '\0');
}

struct verb_case {
    int verbosity;
    int v;
    int printed;
};

static void test_verbosity(void **state)
{
    static const struct verb_case cases[] = {
        {0, 0, 1}, {0, 1, 0}, {0, 4, 0}, {2, 1, 1}, {2, 2, 1},
        {2, 3, 0}, {4, 4, 1}, {4, 5, 0}, {9, 9, 1},
    };
    (void)state;

    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct verb_case *c = &cases[i];
        hp_log_init(c->verbosity, HP_LOG_TEXT);
        assert_int_equal(hp_log_verbosity(), c->verbosity);
        hp_log_v(c->v, "verbose %d", c->v);
        size_t len = drain();
        if ((len > 0) != c->printed)
            fail_msg("case %zu: --v=%d, hp_log_v(%d): printed %zu bytes, want %s", i,
                     c->verbosity, c->v, len, c->printed ? "a line" : "nothing");
    }

    /* Debug is verbosity 4; errors, warnings and info always print. */
    hp_log_init(3, HP_LOG_TEXT);
    hp_log_debug("hidden");
    assert_int_equal(drain(), 0);
    hp_log_init(4, HP_LOG_TEXT);
    hp_log_debug("shown");
    drain();
    assert_non_null(strstr(out, "] shown\n"));
    hp_log_init(0, HP_LOG_TEXT);
    hp_log_error("e");
    hp_log_warn("w");
    hp_log_info("i");
    size_t len = drain();
    assert_int_equal(out[0], 'E');
    assert_true(len > 0 && strstr(out, "] i\n") != NULL);
}

/* ---- JSON ---- */

/* Parses one JSON line and checks its fields; returns the decoded message (caller frees). */
static char *parse_json(const char *line, size_t len, const char *level, int v, int want_line)
{
    json_error_t jerr;
    char caller[64];

    assert_one_line(line, len);
    json_t *j = json_loadb(line, len, 0, &jerr);
    if (!j)
        fail_msg("%s: not JSON (%s at byte %d of %zu): \"%.100s...%s\"", ctx, jerr.text,
                 jerr.position, len, line, len > 40 ? line + len - 40 : line);
    const char *ts = json_string_value(json_object_get(j, "ts"));
    assert_non_null(ts);
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    int rc = regexec(&re, ts, 0, NULL, 0);
    regfree(&re);
    assert_int_equal(rc, 0);
    assert_string_equal(json_string_value(json_object_get(j, "level")), level);
    assert_true(json_is_integer(json_object_get(j, "v")));
    assert_int_equal(json_integer_value(json_object_get(j, "v")), v);
    if (want_line > 0) {
        snprintf(caller, sizeof(caller), "test_log.c:%d", want_line);
        assert_string_equal(json_string_value(json_object_get(j, "caller")), caller);
    }
    const char *msg = json_string_value(json_object_get(j, "msg"));
    assert_non_null(msg);
    char *copy = strdup(msg);
    json_decref(j);
    return copy;
}

/* Parses one JSON line (checked as parse_json does) and returns the object (caller decrefs). */
static json_t *parse_json_obj(const char *line, size_t len)
{
    json_error_t jerr;

    free(parse_json(line, len, "info", 0, 0));
    json_t *j = json_loadb(line, len, 0, &jerr);
    assert_non_null(j);
    return j;
}

/* The members of a line beyond ts, level, v, caller and msg. */
static size_t extra_members(json_t *j)
{
    size_t n = json_object_size(j);
    assert_true(n >= 5);
    return n - 5;
}

struct field_case {
    const char *msg;        /* logged as "%s" */
    const char *want_msg;   /* decoded "msg" */
    const char *fields[12]; /* key, value, key, value, ..., NULL: every extra member */
};

static void test_json_fields(void **state)
{
    static const struct field_case cases[] = {
        /* The provisioning line: the pairs at the end become fields. */
        {"controller: provisioned volume claim=default/c1 pv=pvc-1 path=/v/default-c1",
         "controller: provisioned volume",
         {"claim", "default/c1", "pv", "pvc-1", "path", "/v/default-c1", NULL}},
        /* Quoted values hold spaces; the quotes are not part of the value. */
        {"watch: list failed resource=pvs err=\"Connection refused (nothing listens)\"",
         "watch: list failed",
         {"resource", "pvs", "err", "Connection refused (nothing listens)", NULL}},
        /* Unescaped quotes inside a quoted value: it ends before the next key=. */
        {"kube_client: forbidden request=\"GET /x\" message=\"User \"sa\" cannot list\" code=403",
         "kube_client: forbidden",
         {"request", "GET /x", "message", "User \"sa\" cannot list", "code", "403", NULL}},
        {"mod: err=\"a \"b\" c\"", "mod:", {"err", "a \"b\" c", NULL}},
        /* claim, pv, node and err are fields wherever they are; text after them stays. */
        {"controller: failed claim=ns/c because node=n1 is full",
         "controller: failed claim=ns/c because node=n1 is full",
         {"claim", "ns/c", "node", "n1", NULL}},
        {"controller: x pv=pv1 happened pv=pv2", "controller: x pv=pv1 happened",
         {"pv", "pv2", NULL}},
        /* Other pairs count only at the end. */
        {"watch: retrying resource=pvs in 5ms failures=3", "watch: retrying resource=pvs in 5ms",
         {"failures", "3", NULL}},
        /* The line's own member names and repeated keys stay in msg. */
        {"mod: a v=3 msg=hi level=x", "mod: a v=3 msg=hi level=x", {NULL}},
        {"mod: a v=3 b=4", "mod: a v=3", {"b", "4", NULL}},
        {"mod: a k=1 k=2", "mod: a k=1", {"k", "2", NULL}},
        /* Empty values, key characters, only pairs. */
        {"mod: node= x=1", "mod:", {"node", "", "x", "1", NULL}},
        {"mod: pv-dir=/x a.b=1 _c=2", "mod:", {"pv-dir", "/x", "a.b", "1", "_c", "2", NULL}},
        {"a=1 b=2", "", {"a", "1", "b", "2", NULL}},
        {"mod: trailing spaces k=v   ", "mod: trailing spaces", {"k", "v", NULL}},
        /* Not pairs: no key, a key that is not one, an unterminated quote, no '='. */
        {"mod: =x 1a=2 https://h:1/p?x=y", "mod: =x 1a=2 https://h:1/p?x=y", {NULL}},
        {"mod: err=\"abc", "mod: err=\"abc", {NULL}},
        {"plain text", "plain text", {NULL}},
        {"", "", {NULL}},
        /* A quoted value followed by plain text: the first quote that ends a word closes it. */
        {"mod: err=\"boom\" while x", "mod: err=\"boom\" while x", {"err", "boom", NULL}},
        /* Values keep control characters (escaped) and lose bytes that are not UTF-8. */
        {"mod: err=\"bad \x01\t \xff\xfe\" pv=\xc3\xa9x", "mod:",
         {"err", "bad \x01\t \xef\xbf\xbd\xef\xbf\xbd", "pv", "\xc3\xa9x", NULL}},
    };
    (void)state;

    hp_log_init(0, HP_LOG_JSON);
    for (size_t i = 0; i < N_CASES(cases); i++) {
        const struct field_case *c = &cases[i];
        snprintf(ctx, sizeof(ctx), "field case %zu", i);
        hp_log_info("%s", c->msg);
        json_t *j = parse_json_obj(out, drain());
        const char *msg = json_string_value(json_object_get(j, "msg"));
        if (strcmp(msg, c->want_msg) != 0)
            fail_msg("case %zu: msg \"%s\" want \"%s\"", i, msg, c->want_msg);
        size_t nf = 0;
        for (; c->fields[2 * nf]; nf++) {
            const char *got = json_string_value(json_object_get(j, c->fields[2 * nf]));
            if (!got || strcmp(got, c->fields[2 * nf + 1]) != 0)
                fail_msg("case %zu: field %s = \"%s\" want \"%s\"", i, c->fields[2 * nf],
                         got ? got : "(absent)", c->fields[2 * nf + 1]);
        }
        if (extra_members(j) != nf)
            fail_msg("case %zu: %zu fields, want %zu: %s", i, extra_members(j), nf, out);
        json_decref(j);
    }
}

static void test_json_fields_bounded(void **state)
{
    char msg[1024];
    size_t len = 0;
    (void)state;

    /* 40 pairs: the last 32 are fields, the earlier ones stay in msg. */
    len += (size_t)snprintf(msg + len, sizeof(msg) - len, "mod:");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(msg + len, sizeof(msg) - len, " k%d=%d", i, i);
    hp_log_init(0, HP_LOG_JSON);
    hp_log_info("%s", msg);
    json_t *j = parse_json_obj(out, drain());
    assert_int_equal(extra_members(j), 32);
    assert_null(json_object_get(j, "k7"));
    assert_string_equal(json_string_value(json_object_get(j, "k8")), "8");
    assert_string_equal(json_string_value(json_object_get(j, "k39")), "39");
    assert_non_null(strstr(json_string_value(json_object_get(j, "msg")), " k7=7"));
    json_decref(j);
}

/* Text lines are not touched by the pairs. */
static void test_text_keeps_pairs(void **state)
{
    long pid;
    int lineno;
    char msg[512];
    (void)state;

    hp_log_init(0, HP_LOG_TEXT);
    hp_log_info("controller: provisioned volume claim=%s pv=%s err=\"%s\"", "ns/c", "pvc-1",
                "a \"b\"");
    assert_one_line(out, drain());
    parse_text(out, 'I', &pid, &lineno, msg, sizeof(msg));
    assert_string_equal(msg, "controller: provisioned volume claim=ns/c pv=pvc-1 err=\"a \"b\"\"");
}

struct json_case {
    const char *msg;  /* logged as "%s" */
    const char *want; /* decoded "msg" */
};

static void test_json_fields_and_escaping(void **state)
{
    static const struct json_case cases[] = {
        {"plain", "plain"},
        {"quote \" and backslash \\", "quote \" and backslash \\"},
        {"tab\there", "tab\there"},
        {"ctl \x01\x1f end", "ctl \x01\x1f end"},
        {"nl\nx", "nl x"},
        {"cr\rx", "cr x"},
        {"{\"inner\":\"json\"}", "{\"inner\":\"json\"}"},
        {"caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac"},
        {"del \x7f", "del \x7f"},
        {"", ""},
    };
    (void)state;

    hp_log_init(0, HP_LOG_JSON);
    for (size_t i = 0; i < N_CASES(cases); i++) {
        int line = __LINE__ + 1;
        hp_log_info("%s", cases[i].msg);
        size_t len = drain();
        char *msg = parse_json(out, len, "info", 0, line);
        if (strcmp(msg, cases[i].want) != 0)
            fail_msg("case %zu: msg \"%s\" want \"%s\"", i, msg, cases[i].want);
        free(msg);
    }

    int line = __LINE__ + 1;
    hp_log_warn("w");
    free(parse_json(out, drain(), "warning", 0, line));
    line = __LINE__ + 1;
    hp_log_error("e");
    free(parse_json(out, drain(), "error", 0, line));
    hp_log_init(3, HP_LOG_JSON);
    line = __LINE__ + 1;
    hp_log_v(3, "verbose");
    free(parse_json(out, drain(), "info", 3, line));
    hp_log_v(4, "hidden");
    assert_int_equal(drain(), 0);
}

/* ---- long messages ---- */

static char *make_message(const char *prefix, const char *unit, size_t bytes)
{
    size_t p = strlen(prefix), u = strlen(unit);
    char *s = malloc(p + bytes + u + 1);
    assert_non_null(s);
    memcpy(s, prefix, p);
    size_t len = p;
    while (len < p + bytes) {
        memcpy(s + len, unit, u);
        len += u;
    }
    s[len] = '\0';
    return s;
}

static void test_long_text(void **state)
{
    long pid;
    int lineno;
    static char msg[8192];
    (void)state;

    hp_log_init(0, HP_LOG_TEXT);
    char *m = make_message("", "x", 10000);
    hp_log_info("%s", m);
    size_t len = drain();
    /* Cut, but one whole line with its prefix and a good part of the message. */
    assert_one_line(out, len);
    assert_true(len < 4608);
    parse_text(out, 'I', &pid, &lineno, msg, sizeof(msg));
    assert_true(strlen(msg) >= 2000);
    assert_int_equal(strspn(msg, "x"), strlen(msg));
    free(m);

    /* The next line is whole again. */
    hp_log_info("after");
    assert_one_line(out, drain());
    assert_non_null(strstr(out, "] after\n"));
}

static void test_long_json_ascii(void **state)
{
    (void)state;

    hp_log_init(0, HP_LOG_JSON);
    /* Plain text and text that doubles when escaped: cut, but still one JSON line. */
    static const char *const units[] = {"x", "\"", "\\"};
    for (size_t i = 0; i < N_CASES(units); i++) {
        char *m = make_message("", units[i], 10000);
        hp_log_info("%s", m);
        size_t len = drain();
        assert_true(len < 4608);
        char *msg = parse_json(out, len, "info", 0, 0);
        assert_true(strlen(msg) >= 1000);
        assert_true(strncmp(m, msg, strlen(msg)) == 0);
        free(msg);
        free(m);
    }
}

static void test_long_json_escaped(void **state)
{
    (void)state;

    /* Characters that grow six-fold (\u00XX) fill the line buffer before the message ends.
     * Whatever the alignment of the last escape (shifted by a prefix), the line must stay
     * one valid JSON object: log collectors drop lines they cannot parse. */
    hp_log_init(0, HP_LOG_JSON);
    for (size_t shift = 0; shift < 6; shift++) {
        char prefix[8] = "";
        memset(prefix, 'a', shift);
        prefix[shift] = '\0';
        char *m = make_message(prefix, "\x01", 3000);
        snprintf(ctx, sizeof(ctx), "%zu bytes of prefix, then 3000 x 0x01", shift);
        hp_log_info("%s", m);
        free(m); /* before any assertion: a failure leaks nothing */
        size_t len = drain();
        assert_true(len < 4608);
        char *msg = parse_json(out, len, "info", 0, 0);
        assert_true(strlen(msg) >= 500);
        free(msg);
    }
}

static void test_long_json_utf8(void **state)
{
    (void)state;

    /* A message cut inside a multi-byte character would make the line invalid UTF-8, which a
     * JSON parser rejects: the cut must fall between characters. */
    hp_log_init(0, HP_LOG_JSON);
    for (size_t shift = 0; shift < 4; shift++) {
        char prefix[8] = "";
        memset(prefix, 'a', shift);
        prefix[shift] = '\0';
        char *m = make_message(prefix, "\xe2\x82\xac", 3000); /* U+20AC, 3 bytes */
        snprintf(ctx, sizeof(ctx), "%zu bytes of prefix, then 1000 x U+20AC", shift);
        hp_log_info("%s", m);
        free(m); /* before any assertion: a failure leaks nothing */
        size_t len = drain();
        char *msg = parse_json(out, len, "info", 0, 0);
        assert_true(strlen(msg) >= 1000);
        free(msg);
    }
}

/* Long values in fields: cut, still one valid JSON line, the earlier fields whole. */
static void test_long_json_fields(void **state)
{
    static const char *const units[] = {"x", "\"", "\x01", "\xe2\x82\xac", "\xff"};
    (void)state;

    hp_log_init(0, HP_LOG_JSON);
    for (size_t u = 0; u < N_CASES(units); u++) {
        for (size_t shift = 0; shift < 6; shift++) {
            char prefix[64];
            snprintf(prefix, sizeof(prefix), "mod: what claim=ns/c%.*s err=", (int)shift, "aaaaaa");
            char *m = make_message(prefix, units[u], 5000);
            snprintf(ctx, sizeof(ctx), "unit %zu, shift %zu", u, shift);
            hp_log_info("%s", m);
            free(m);
            size_t len = drain();
            assert_true(len < 4608);
            json_t *j = parse_json_obj(out, len);
            assert_string_equal(json_string_value(json_object_get(j, "msg")), "mod: what");
            assert_non_null(json_string_value(json_object_get(j, "claim")));
            const char *err = json_string_value(json_object_get(j, "err"));
            assert_non_null(err);
            assert_true(strlen(err) >= 500);
            json_decref(j);
        }
    }
    /* A quoted value cut short has no closing quote: it stays in msg, valid all the same. */
    char *m = make_message("mod: claim=ns/c err=\"", "y z ", 5000);
    hp_log_info("%s", m);
    free(m);
    json_t *j = parse_json_obj(out, drain());
    assert_string_equal(json_string_value(json_object_get(j, "claim")), "ns/c");
    assert_null(json_object_get(j, "err"));
    json_decref(j);
}

/* Random bytes, pairs and quotes: every line is one JSON object (jansson checks UTF-8). */
static void test_json_random(void **state)
{
    static const char *const pieces[] = {" ", "k=", "claim=", "err=\"", "\"", " pv=", "=",
                                         "\xe2\x82\xac", "\xc3", "\\", "\x01", "v=", "a"};
    static char m[6000];
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    (void)state;

    hp_log_init(0, HP_LOG_JSON);
    for (int round = 0; round < 3000; round++) {
        size_t len = 0, want;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        want = (size_t)(x % (sizeof(m) - 8));
        while (len < want) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 3 == 0) {
                const char *p = pieces[(x >> 8) % N_CASES(pieces)];
                size_t pl = strlen(p);
                if (len + pl >= sizeof(m))
                    break;
                memcpy(m + len, p, pl);
                len += pl;
            } else {
                m[len++] = (char)(1 + (x >> 16) % 255); /* any byte but NUL */
            }
        }
        m[len] = '\0';
        snprintf(ctx, sizeof(ctx), "random round %d, %zu bytes", round, len);
        hp_log_info("%s", m);
        size_t n = drain();
        assert_true(n < 4608);
        json_decref(parse_json_obj(out, n));
    }
}

/* ---- destination ---- */

static void test_back_to_stderr(void **state)
{
    int p[2], saved;
    char buf[512];
    (void)state;

    /* fd < 0 restores stderr: catch stderr in a pipe of our own meanwhile. */
    assert_int_equal(pipe(p), 0);
    saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(p[1], STDERR_FILENO) >= 0);
    hp_log_init(0, HP_LOG_TEXT);
    hp_log_set_fd(-1);
    hp_log_info("to stderr");
    hp_log_set_fd(pipe_fds[1]);
    hp_log_info("to the pipe");
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    (void)close(saved);
    (void)close(p[1]);
    ssize_t n = read(p[0], buf, sizeof(buf) - 1);
    (void)close(p[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "] to stderr\n"));
    assert_null(strstr(buf, "to the pipe"));
    drain();
    assert_non_null(strstr(out, "] to the pipe\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_one_line_per_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verbosity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_fields_and_escaping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_json_ascii, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_json_escaped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_json_utf8, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_fields_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_keeps_pairs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_json_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_back_to_stderr, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
