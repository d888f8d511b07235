/* quantity: Kubernetes resource quantities as byte counts (see quantity.h).
 *
 * Any thread, pure. Exact arithmetic: the number is read as an integer mantissa and a power of
 * ten, then scaled with 128-bit integers; a fraction of a byte rounds up.
 */
#include "hostpath/quantity.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"

typedef unsigned __int128 u128;

#define MAX_BYTES ((u128)INT64_MAX)

static const struct {
    const char *suffix;
    int binary; /* power of 1024 */
    int decimal; /* power of 10 */
} suffixes[] = {
    {"Ki", 1, 0}, {"Mi", 2, 0}, {"Gi", 3, 0}, {"Ti", 4, 0}, {"Pi", 5, 0}, {"Ei", 6, 0},
    {"n", 0, -9}, {"u", 0, -6}, {"m", 0, -3}, {"k", 0, 3},  {"M", 0, 6},  {"G", 0, 9},
    {"T", 0, 12}, {"P", 0, 15}, {"E", 0, 18}, {"", 0, 0},
};

static int bad(char *err, size_t errlen, const char *s, const char *why)
{
    hp_seterr(err, errlen, "\"%.64s\" is not a quantity: %s", s, why);
    return -EINVAL;
}

int hp_quantity_parse(const char *s, uint64_t *bytes, char *err, size_t errlen)
{
    const char *p = s;
    u128 m = 0;
    int exp10 = 0, digits = 0, sig = 0, frac = 0, sticky = 0;

    if (!s || !*s)
        return bad(err, errlen, s ? s : "", "empty");
    if (*p == '+')
        p++;
    else if (*p == '-')
        return bad(err, errlen, s, "negative");
    /* Up to 19 significant digits (m < 2^64): every value that fits in 2^63 bytes is exact, and
     * a longer fraction only rounds up (sticky). */
    for (; (*p >= '0' && *p <= '9') || (*p == '.' && !frac); p++) {
        if (*p == '.') {
            frac = 1;
            continue;
        }
        digits++;
        if (sig < 19) {
            m = m * 10 + (u128)(*p - '0');
            if (m)
                sig++;
            if (frac)
                exp10--;
        } else if (!frac) {
            exp10++; /* an integer part longer than kept: scales the value only */
        } else if (*p != '0') {
            sticky = 1;
        }
    }
    if (!digits)
        return bad(err, errlen, s, "no digits");
    const char *suf = p;
    int binary = 0;
    if (*suf == 'e' || *suf == 'E') {
        /* A decimal exponent, unless it is the suffix "E" (exa) alone. */
        const char *q = suf + 1;
        int neg = 0, e = 0, n = 0;
        if (*q == '+' || *q == '-')
            neg = *q++ == '-';
        for (; *q >= '0' && *q <= '9' && n < 6; q++, n++)
            e = e * 10 + (*q - '0');
        if (n && !*q) {
            exp10 += neg ? -e : e;
            suf = q;
        }
    }
    if (*suf) {
        size_t i;
        for (i = 0; i < HP_ARRAY_SIZE(suffixes); i++) {
            if (strcmp(suf, suffixes[i].suffix) == 0)
                break;
        }
        if (i == HP_ARRAY_SIZE(suffixes))
            return bad(err, errlen, s, "unknown suffix (Ki Mi Gi Ti Pi Ei, k M G T P E, m)");
        binary = suffixes[i].binary;
        exp10 += suffixes[i].decimal;
    }
    /* value = ceil(m * 1024^binary * 10^exp10): m < 2^64 and 1024^6 = 2^60, so the product
     * fits 128 bits. */
    u128 v = m << (10 * binary);
    if (exp10 >= 0) {
        for (; exp10 > 0 && v <= MAX_BYTES; exp10--)
            v *= 10;
    } else if (-exp10 > 38) {
        v = v || sticky ? 1 : 0; /* less than one byte: rounds up to one */
    } else {
        u128 d = 1;
        for (int i = 0; i < -exp10; i++)
            d *= 10;
        v = v / d + (v % d || sticky ? 1 : 0);
    }
    if (v > MAX_BYTES) {
        hp_seterr(err, errlen, "\"%.64s\" is too large (more than 8 EiB)", s);
        return -ERANGE;
    }
    *bytes = (uint64_t)v;
    return 0;
}

const char *hp_quantity_format(uint64_t bytes, char *out, size_t outlen)
{
    static const char *const units[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int u = 0;
    while (u < 6 && bytes >> (10 * (u + 1)))
        u++;
    /* Tenths rounded down: a size or a room is never overstated. */
    u128 t = (u128)bytes * 10 >> (10 * u);
    unsigned long long whole = (unsigned long long)(t / 10), tenth = (unsigned long long)(t % 10);
    if (u && tenth)
        snprintf(out, outlen, "%llu.%llu%s", whole, tenth, units[u]);
    else
        snprintf(out, outlen, "%llu%s", whole, units[u]);
    return out;
}
