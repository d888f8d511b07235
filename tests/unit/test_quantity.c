/* Unit tests for quantity: every suffix, fractions rounding up, exponents, limits, bad input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/common.h"
#include "hostpath/quantity.h"

#define KI 1024ULL
#define MI (KI * KI)
#define GI (MI * KI)
#define TI (GI * KI)
#define PI (TI * KI)
#define EI (PI * KI)

static void test_parse(void **state)
{
    static const struct {
        const char *s;
        uint64_t want;
    } ok[] = {
        {"0", 0},          {"1", 1},           {"+5", 5},          {"1Ki", KI},
        {"1Mi", MI},       {"1Gi", GI},        {"1Ti", TI},        {"1Pi", PI},
        {"1Ei", EI},       {"7Ei", 7 * EI},    {"1k", 1000},       {"1M", 1000000},
        {"1G", 1000000000}, {"1T", 1000000000000ULL}, {"1P", 1000000000000000ULL},
        {"1E", 1000000000000000000ULL},        {"1.5Gi", GI + GI / 2},
        {"0.5", 1},        {"0.1", 1},         {"1.000", 1},       {"100m", 1},
        {"1000m", 1},      {"1001m", 2},       {"1500m", 2},       {"1u", 1},
        {"1n", 1},         {"0m", 0},          {"1e3", 1000},      {"1E3", 1000},
        {"1e+3", 1000},    {"1.5e3", 1500},    {"15e-1", 2},       {"1e-9", 1},
        {"2.5Ki", 2560},   {"0.001Ki", 2},     {"123456789", 123456789},
        {".5Ki", 512},     {"5.", 5},          {"9223372036854775807", INT64_MAX},
        {"000001Gi", GI},  {"1.0000000000000000000000000000000000000001Gi", GI + 1},
    };
    static const char *const bad[] = {
        "", "-1", "-0", "Gi", "1Gb", "1 Gi", "1gi", "1KI", "1Gi ", " 1", "1..2", "1.2.3", "e3",
        "1e", "1e+", "1x", "0x10", "1,5Gi", "Infinity", "NaN", "1Ki1", "1e3Gi",
    };
    static const char *const big[] = {"8Ei", "9223372036854775808", "1e19", "100000P",
                                      "99999999999999999999999999999999999999999"};
    char err[128];
    uint64_t v;
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(ok); i++) {
        v = 12345;
        if (hp_quantity_parse(ok[i].s, &v, err, sizeof(err)) != 0 || v != ok[i].want)
            fail_msg("\"%s\": got %llu want %llu (%s)", ok[i].s, (unsigned long long)v,
                     (unsigned long long)ok[i].want, err);
    }
    for (size_t i = 0; i < HP_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (hp_quantity_parse(bad[i], &v, err, sizeof(err)) != -EINVAL)
            fail_msg("\"%s\" accepted", bad[i]);
        assert_non_null(strstr(err, "not a quantity"));
    }
    for (size_t i = 0; i < HP_ARRAY_SIZE(big); i++) {
        if (hp_quantity_parse(big[i], &v, err, sizeof(err)) != -ERANGE)
            fail_msg("\"%s\" not -ERANGE", big[i]);
    }
    assert_int_equal(hp_quantity_parse(NULL, &v, NULL, 0), -EINVAL);
}

static void test_format(void **state)
{
    static const struct {
        uint64_t b;
        const char *want;
    } cases[] = {
        {0, "0"},          {512, "512"},       {1023, "1023"},    {1024, "1Ki"},
        {1536, "1.5Ki"},   {GI, "1Gi"},        {GI + GI / 5 + 2, "1.2Gi"}, {GI + GI / 5, "1.1Gi"}, {900 * GI, "900Gi"},
        {4 * TI, "4Ti"},   {EI * 7, "7Ei"},    {UINT64_MAX, "15.9Ei"},
    };
    char out[32];
    (void)state;
    for (size_t i = 0; i < HP_ARRAY_SIZE(cases); i++)
        assert_string_equal(hp_quantity_format(cases[i].b, out, sizeof(out)), cases[i].want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests_name("quantity", tests, NULL, NULL);
}
