/* Unit tests for volindex: holding and releasing paths, conflict detection (equal, contains,
 * inside; component-wise), the record copies and their merge with a fresh journal read, the
 * retained-directory lookup, and a 10,000-volume churn checked against a brute-force model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hostpath/buf.h"
#include "hostpath/volindex.h"

#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))

static struct hp_volindex *x;

static int setup(void **state)
{
    (void)state;
    x = hp_volindex_new();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    /* Every test leaves a consistent index; freeing it must release everything (ASan). */
    int rc = hp_volindex_validate(x);
    hp_volindex_free(x);
    x = NULL;
    return rc;
}

static void valid(void)
{
    assert_int_equal(hp_volindex_validate(x), 0);
}

/* One expected answer of hp_volindex_conflict. */
struct q_case {
    const char *rel, *owner, *also;
    int want;
    enum hp_path_relation relation;
    const char *other_path, *other_owner;
    unsigned sources;
};

static void run_queries(const struct q_case *cases, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        const struct q_case *c = &cases[i];
        struct hp_volindex_conflict got;
        memset(&got, 0, sizeof(got));
        int rc = hp_volindex_conflict(x, c->rel, c->owner, c->also, &got);
        if (rc != c->want)
            fail_msg("%s case %zu: %s for %s: conflict=%d want %d (other %s of %s)", what, i,
                     c->rel, c->owner, rc, c->want, got.other_path, got.other_owner);
        /* Without a details buffer the answer is the same. */
        assert_int_equal(hp_volindex_conflict(x, c->rel, c->owner, c->also, NULL), c->want);
        if (!rc)
            continue;
        if (got.relation != c->relation || strcmp(got.other_path, c->other_path) != 0 ||
            strcmp(got.other_owner, c->other_owner) != 0 || got.sources != c->sources)
            fail_msg("%s case %zu: %s: got %d %s of %s src %u, want %d %s of %s src %u", what, i,
                     c->rel, (int)got.relation, got.other_path, got.other_owner, got.sources,
                     (int)c->relation, c->other_path, c->other_owner, c->sources);
    }
}

#define VOL HP_SRC_VOLUME
#define RES HP_SRC_RESERVED
#define REC HP_SRC_RECORD

static void test_hold_release(void **state)
{
    static const struct q_case held[] = {
        {"a/b", "pv-x", NULL, 1, HP_PATH_EQUAL, "a/b", "pv-a", VOL},
        {"a", "pv-x", NULL, 1, HP_PATH_CONTAINS, "a/b", "pv-a", VOL},
        {"a/b/c", "pv-x", NULL, 1, HP_PATH_INSIDE, "a/b", "pv-a", VOL},
        {"a/b/c/d", "pv-x", NULL, 1, HP_PATH_INSIDE, "a/b", "pv-a", VOL},
        /* Not by string prefix. */
        {"ab", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"a/bc", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"a/c", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"b", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"x/a/b", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        /* The owner's own path, and the `also` owner (a retained volume taken over). */
        {"a/b", "pv-a", NULL, 0, 0, NULL, NULL, 0},
        {"a", "pv-a", NULL, 0, 0, NULL, NULL, 0},
        {"a/b/c", "pv-a", NULL, 0, 0, NULL, NULL, 0},
        {"a/b", "pv-x", "pv-a", 0, 0, NULL, NULL, 0},
        {"a/b/c", "pv-x", "pv-a", 0, 0, NULL, NULL, 0},
        {"a", "pv-x", "pv-a", 0, 0, NULL, NULL, 0},
    };
    static const struct q_case free_[] = {
        {"a/b", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"a", "pv-x", NULL, 0, 0, NULL, NULL, 0},
        {"a/b/c", "pv-x", NULL, 0, 0, NULL, NULL, 0},
    };
    (void)state;

    run_queries(free_, N_CASES(free_), "empty");
    hp_volindex_hold(x, VOL, "pv-a", "a/b");
    valid();
    run_queries(held, N_CASES(held), "volume");
    hp_volindex_hold(x, VOL, "pv-a", "a/b"); /* again: no change */
    valid();
    run_queries(held, N_CASES(held), "volume again");
    hp_volindex_release(x, VOL, "pv-a");
    valid();
    run_queries(free_, N_CASES(free_), "released");
    hp_volindex_release(x, VOL, "pv-a"); /* releasing nothing is fine */
    hp_volindex_release(x, RES, "pv-nobody");
    valid();

    /* A reservation holds the same way; hold with rel NULL drops it. */
    hp_volindex_hold(x, RES, "pv-a", "a/b");
    valid();
    struct hp_volindex_conflict c;
    assert_int_equal(hp_volindex_conflict(x, "a", "pv-x", NULL, &c), 1);
    assert_int_equal(c.sources, RES);
    hp_volindex_hold(x, RES, "pv-a", NULL);
    valid();
    run_queries(free_, N_CASES(free_), "reservation dropped");
}

static void test_sources_and_moves(void **state)
{
    struct hp_volindex_conflict c;
    (void)state;

    /* One owner, one path, two sources: released one at a time. */
    hp_volindex_hold(x, RES, "pv-a", "p");
    hp_volindex_hold(x, VOL, "pv-a", "p");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-x", NULL, &c), 1);
    assert_int_equal(c.sources, VOL | RES);
    hp_volindex_release(x, RES, "pv-a");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-x", NULL, &c), 1);
    assert_int_equal(c.sources, VOL);
    hp_volindex_release(x, VOL, "pv-a");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-x", NULL, &c), 0);

    /* A new path for the same owner and source replaces the old one. */
    hp_volindex_hold(x, VOL, "pv-a", "old/dir");
    hp_volindex_hold(x, VOL, "pv-a", "new/dir");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "old/dir", "pv-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "old", "pv-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "new", "pv-x", NULL, &c), 1);
    hp_volindex_release(x, VOL, "pv-a");

    /* Two owners on one path (a collision the controller reports): either keeps it held. */
    hp_volindex_hold(x, VOL, "pv-a", "p");
    hp_volindex_hold(x, VOL, "pv-b", "p");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-a", NULL, &c), 1);
    assert_string_equal(c.other_owner, "pv-b");
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-b", NULL, &c), 1);
    assert_string_equal(c.other_owner, "pv-a");
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-a", "pv-b", &c), 0);
    hp_volindex_release(x, VOL, "pv-a");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-x", NULL, &c), 1);
    assert_string_equal(c.other_owner, "pv-b");
    hp_volindex_release(x, VOL, "pv-b");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p", "pv-x", NULL, &c), 0);
}

static void test_nested_owners(void **state)
{
    static const struct q_case cases[] = {
        /* Below "a": pv-a's "a/1" and pv-b's "a/2/deep". */
        {"a", "pv-a", NULL, 1, HP_PATH_CONTAINS, "a/2/deep", "pv-b", VOL},
        {"a", "pv-b", NULL, 1, HP_PATH_CONTAINS, "a/1", "pv-a", VOL},
        {"a", "pv-a", "pv-b", 0, 0, NULL, NULL, 0},
        {"a/2", "pv-a", NULL, 1, HP_PATH_CONTAINS, "a/2/deep", "pv-b", VOL},
        {"a/2", "pv-b", NULL, 0, 0, NULL, NULL, 0},
        {"a/1/x", "pv-b", NULL, 1, HP_PATH_INSIDE, "a/1", "pv-a", VOL},
        {"a/2/deep/x/y", "pv-a", NULL, 1, HP_PATH_INSIDE, "a/2/deep", "pv-b", VOL},
        {"a/2/dee", "pv-a", NULL, 0, 0, NULL, NULL, 0},
        {"a/3", "pv-a", NULL, 0, 0, NULL, NULL, 0},
        {"a1", "pv-x", NULL, 0, 0, NULL, NULL, 0},
    };
    (void)state;

    hp_volindex_hold(x, VOL, "pv-a", "a/1");
    hp_volindex_hold(x, VOL, "pv-b", "a/2/deep");
    valid();
    run_queries(cases, N_CASES(cases), "nested");
    hp_volindex_release(x, VOL, "pv-a");
    hp_volindex_release(x, VOL, "pv-b");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "a", "pv-x", NULL, NULL), 0);
    assert_int_equal(hp_volindex_conflict(x, "a/2", "pv-x", NULL, NULL), 0);
}

/* ---- records ---- */

static struct hp_record mkrec(const char *pv, const char *path, enum hp_record_state st,
                              int64_t updated)
{
    struct hp_record r;
    memset(&r, 0, sizeof(r));
    r.pv = (char *)pv;
    r.path = (char *)path;
    r.claim_uid = "u";
    r.claim_namespace = "ns";
    r.claim_name = "data";
    r.class_name = "fast";
    r.identity = "node-a";
    r.state = st;
    r.updated = updated;
    return r;
}

static void test_records(void **state)
{
    struct hp_volindex_conflict c;
    (void)state;

    assert_null(hp_volindex_record(x, "pvc-1"));
    struct hp_record r = mkrec("pvc-1", "p1", HP_REC_CREATED, 100);
    hp_volindex_put_record(x, &r);
    valid();
    const struct hp_record *got = hp_volindex_record(x, "pvc-1");
    assert_non_null(got);
    assert_ptr_not_equal(got->path, r.path); /* a copy */
    assert_string_equal(got->path, "p1");
    assert_string_equal(got->claim_name, "data");
    assert_int_equal(hp_volindex_nrecords(x), 1);
    assert_int_equal(hp_volindex_conflict(x, "p1", "pvc-x", NULL, &c), 1);
    assert_int_equal(c.sources, REC);
    assert_string_equal(c.other_owner, "pvc-1");

    /* Replaced: the new path is held, the old one free. */
    r.path = "p2";
    hp_volindex_put_record(x, &r);
    valid();
    assert_int_equal(hp_volindex_nrecords(x), 1);
    assert_int_equal(hp_volindex_conflict(x, "p1", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "p2", "pvc-x", NULL, &c), 1);

    /* Archived: the directory is where archivedAs says, no longer at path. */
    r.state = HP_REC_ARCHIVED;
    r.archived_as = "archive/p2-x";
    hp_volindex_put_record(x, &r);
    valid();
    assert_int_equal(hp_volindex_conflict(x, "p2", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "archive", "pvc-x", NULL, &c), 1);
    assert_string_equal(c.other_path, "archive/p2-x");
    assert_string_equal(hp_volindex_record(x, "pvc-1")->archived_as, "archive/p2-x");

    /* A live volume of the same name on the same path: both sources, released apart. */
    hp_volindex_hold(x, VOL, "pvc-1", "archive/p2-x");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "archive/p2-x", "pvc-x", NULL, &c), 1);
    assert_int_equal(c.sources, REC | VOL);
    hp_volindex_remove_record(x, "pvc-1");
    valid();
    assert_null(hp_volindex_record(x, "pvc-1"));
    assert_int_equal(hp_volindex_nrecords(x), 0);
    assert_int_equal(hp_volindex_conflict(x, "archive/p2-x", "pvc-x", NULL, &c), 1);
    assert_int_equal(c.sources, VOL);
    hp_volindex_release(x, VOL, "pvc-1");
    valid();
    assert_int_equal(hp_volindex_conflict(x, "archive/p2-x", "pvc-x", NULL, &c), 0);

    /* Removing by the name stored in the record itself (it is freed on the way). */
    r = mkrec("pvc-2", "q", HP_REC_CREATED, 1);
    hp_volindex_put_record(x, &r);
    hp_volindex_remove_record(x, hp_volindex_record(x, "pvc-2")->pv);
    valid();
    assert_int_equal(hp_volindex_nrecords(x), 0);
    assert_int_equal(hp_volindex_conflict(x, "q", "pvc-x", NULL, &c), 0);
    hp_volindex_remove_record(x, "pvc-2"); /* absent: nothing happens */
    valid();
}

static void count_rec(const struct hp_record *r, void *data)
{
    (void)r;
    (*(size_t *)data)++;
}

/* The index's records as "pv:path:updated" in name order, to compare with a table. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct dump {
    char *v[32];
    size_t n;
};

static void dump_rec(const struct hp_record *r, void *data)
{
    struct dump *d = data;
    assert_true(d->n < N_CASES(d->v));
    d->v[d->n++] = hp_xasprintf("%s:%s:%lld", r->pv, r->path, (long long)r->updated);
}

static void assert_records(const char *want)
{
    struct dump d = {{0}, 0};
    struct hp_buf b;
    hp_volindex_foreach_record(x, dump_rec, &d);
    qsort(d.v, d.n, sizeof(d.v[0]), cmp_str);
    hp_buf_init(&b, 0);
    for (size_t i = 0; i < d.n; i++) {
        (void)hp_buf_printf(&b, "%s%s", i ? " " : "", d.v[i]);
        free(d.v[i]);
    }
    if (strcmp(b.data ? b.data : "", want) != 0)
        fail_msg("records \"%s\", want \"%s\"", b.data ? b.data : "", want);
    hp_buf_free(&b);
}

static void test_merge(void **state)
{
    struct hp_volindex_conflict c;
    (void)state;

    struct hp_record idx[] = {
        mkrec("pvc-a", "a-old", HP_REC_CREATED, 100),  /* read again, changed */
        mkrec("pvc-b", "b", HP_REC_CREATED, 100),      /* gone from the journal: stale */
        mkrec("pvc-c", "c", HP_REC_CREATED, 300),      /* written after the read began */
        mkrec("pvc-d", "d-new", HP_REC_CREATED, 500),  /* newer than what the read saw */
        mkrec("pvc-f", "f-old", HP_REC_CREATED, 200),  /* as new as what the read saw */
        mkrec("pvc-g", "g", HP_REC_CREATED, 200),      /* written exactly when the read began */
    };
    for (size_t i = 0; i < N_CASES(idx); i++)
        hp_volindex_put_record(x, &idx[i]);
    valid();

    const struct hp_record read[] = {
        mkrec("pvc-a", "a-new", HP_REC_CREATED, 150),
        mkrec("pvc-d", "d-old", HP_REC_CREATED, 400),
        mkrec("pvc-e", "e", HP_REC_CREATED, 120), /* new to the index */
        mkrec("pvc-f", "f-new", HP_REC_CREATED, 200),
    };
    hp_volindex_merge_records(x, NULL, read, N_CASES(read), 200);
    valid();
    assert_records("pvc-a:a-new:150 pvc-c:c:300 pvc-d:d-new:500 pvc-e:e:120 pvc-f:f-new:200 "
                   "pvc-g:g:200");
    size_t n = 0;
    hp_volindex_foreach_record(x, count_rec, &n);
    assert_int_equal(n, 6);
    assert_int_equal(hp_volindex_nrecords(x), 6);
    /* The path index follows. */
    assert_int_equal(hp_volindex_conflict(x, "a-old", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "a-new", "pvc-x", NULL, &c), 1);
    assert_int_equal(hp_volindex_conflict(x, "b", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "d-new", "pvc-x", NULL, &c), 1);
    assert_int_equal(hp_volindex_conflict(x, "d-old", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "f-old", "pvc-x", NULL, &c), 0);
    assert_int_equal(hp_volindex_conflict(x, "e", "pvc-x", NULL, &c), 1);

    /* An empty read drops everything older than its start. */
    hp_volindex_merge_records(x, NULL, NULL, 0, 301);
    valid();
    assert_records("pvc-d:d-new:500");
    hp_volindex_merge_records(x, NULL, NULL, 0, 10000);
    valid();
    assert_records("");
    assert_int_equal(hp_volindex_conflict(x, "d-new", "pvc-x", NULL, &c), 0);
}

/* A record removed while a journal read was under way (an operation forgot it: the volume is
 * deleted) is not brought back by that read's merge; a read that began after the removal is
 * believed again. */
static void test_merge_after_removal(void **state)
{
    (void)state;
    int64_t now = (int64_t)time(NULL);
    struct hp_record a = mkrec("pvc-a", "a", HP_REC_CREATED, 100);
    struct hp_record b = mkrec("pvc-b", "b", HP_REC_CREATED, 100);
    hp_volindex_put_record(x, &a);
    hp_volindex_put_record(x, &b);
    hp_volindex_remove_record(x, "pvc-a"); /* while a read that began 5 s ago runs */
    struct hp_record read[] = {a, b};
    hp_volindex_merge_records(x, NULL, read, N_CASES(read), now - 5);
    valid();
    assert_records("pvc-b:b:100");
    /* A read begun after the removal that still finds the record: it is on disk after all. */
    hp_volindex_merge_records(x, NULL, read, N_CASES(read), now + 1);
    valid();
    assert_records("pvc-a:a:100 pvc-b:b:100");
    /* And the removal is forgotten: a later removal and an old read act as the first time. */
    hp_volindex_remove_record(x, "pvc-a");
    hp_volindex_merge_records(x, NULL, read, N_CASES(read), now - 5);
    assert_records("pvc-b:b:100");
}

static void collect_claim_pv(const struct hp_record *r, void *data)
{
    char *out = data;
    strcat(out, r->pv);
    strcat(out, ",");
}

/* The records of a claim are found by its namespace/name, through renames of state and
 * removal, and a record whose claim changes moves to the other list. */
static void test_claim_records(void **state)
{
    char got[256];
    (void)state;
    struct hp_record a = mkrec("pv-a", "a", HP_REC_CREATED, 1);
    struct hp_record b = mkrec("pv-b", "b", HP_REC_CREATING, 2); /* ns/data re-created */
    struct hp_record o = mkrec("pv-o", "o", HP_REC_CREATED, 3);
    o.claim_name = "other";
    struct hp_record none = mkrec("pv-n", "n", HP_REC_CREATED, 4);
    none.claim_namespace = NULL;
    hp_volindex_put_record(x, &a);
    hp_volindex_put_record(x, &b);
    hp_volindex_put_record(x, &o);
    hp_volindex_put_record(x, &none);
    assert_int_equal(hp_volindex_validate(x), 0);
    got[0] = '\0';
    hp_volindex_foreach_claim_record(x, "ns", "data", collect_claim_pv, got);
    assert_true(strcmp(got, "pv-a,pv-b,") == 0 || strcmp(got, "pv-b,pv-a,") == 0);
    got[0] = '\0';
    hp_volindex_foreach_claim_record(x, "ns", "other", collect_claim_pv, got);
    assert_string_equal(got, "pv-o,");
    b.state = HP_REC_CREATED; /* replaced: still listed once */
    b.claim_name = "other";   /* ... under its new claim */
    hp_volindex_put_record(x, &b);
    hp_volindex_remove_record(x, "pv-a");
    assert_int_equal(hp_volindex_validate(x), 0);
    got[0] = '\0';
    hp_volindex_foreach_claim_record(x, "ns", "data", collect_claim_pv, got);
    assert_string_equal(got, "");
    got[0] = '\0';
    hp_volindex_foreach_claim_record(x, "ns", "other", collect_claim_pv, got);
    assert_true(strcmp(got, "pv-o,pv-b,") == 0 || strcmp(got, "pv-b,pv-o,") == 0);
    hp_volindex_foreach_claim_record(x, "", "", collect_claim_pv, got); /* no such key */
}

static void test_find_retained(void **state)
{
    (void)state;

    struct hp_record recs[] = {
        mkrec("pvc-1", "r1", HP_REC_RETAINED, 100),
        mkrec("pvc-2", "r2", HP_REC_RETAINED, 200),
        mkrec("pvc-3", "r3", HP_REC_RETAINED, 300), /* another class */
        mkrec("pvc-4", "r4", HP_REC_CREATED, 400),  /* not retained */
        mkrec("pvc-5", "r5", HP_REC_RETAINED, 500), /* another claim */
        mkrec("pvc-6", "r6", HP_REC_ARCHIVED, 600), /* archived is not reusable */
        mkrec("pvc-7", "r7", HP_REC_RETAINED, 700), /* another namespace */
    };
    recs[2].class_name = "slow";
    recs[4].claim_name = "other";
    recs[5].archived_as = "arch/r6";
    recs[6].claim_namespace = "ns2";
    for (size_t i = 0; i < N_CASES(recs); i++)
        hp_volindex_put_record(x, &recs[i]);
    valid();

    const struct hp_record *r = hp_volindex_find_retained(x, "ns", "data", "fast");
    assert_non_null(r);
    assert_string_equal(r->pv, "pvc-2");
    assert_null(hp_volindex_find_retained(x, "ns", "nobody", "fast"));
    assert_string_equal(hp_volindex_find_retained(x, "ns", "data", "slow")->pv, "pvc-3");

    /* Equal times: decided by name, whatever the table order. */
    struct hp_record tie = mkrec("pvc-9", "r9", HP_REC_RETAINED, 200);
    hp_volindex_put_record(x, &tie);
    assert_string_equal(hp_volindex_find_retained(x, "ns", "data", "fast")->pv, "pvc-9");
    hp_volindex_remove_record(x, "pvc-9");
    hp_volindex_remove_record(x, "pvc-2");
    valid();
    assert_string_equal(hp_volindex_find_retained(x, "ns", "data", "fast")->pv, "pvc-1");
    hp_volindex_remove_record(x, "pvc-1");
    assert_null(hp_volindex_find_retained(x, "ns", "data", "fast"));
    valid();
}

/* ---- 10,000 volumes against a brute-force model ---- */

#define N_OWNERS 10000
#define N_STEPS 60000
#define QUERY_EVERY 40
#define VALIDATE_EVERY 5000

/* A tiny deterministic generator: the same run every time. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Mostly leaves under 1,000 groups of 20, with a few group directories (which contain a whole
 * group), deeper paths, and names that share a string prefix but not a component ("g1" and
 * "g1x", "v1" and "v1x"). */
static void random_path(char *out, size_t outlen)
{
    unsigned g = rnd(1000), v = rnd(20), k = rnd(1000);
    if (k < 880)
        snprintf(out, outlen, "g%u/v%u", g, v);
    else if (k < 882)
        snprintf(out, outlen, "g%u", g);
    else if (k < 940)
        snprintf(out, outlen, "g%u/v%u/s", g, v);
    else if (k < 970)
        snprintf(out, outlen, "g%ux/v%u", g, v);
    else
        snprintf(out, outlen, "g%u/v%ux", g, v);
}

/* The model: per owner and source (record, volume, reserved), the path held or "". */
static char (*model)[3][24];

static int related(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la == lb)
        return strcmp(a, b) == 0;
    if (la < lb)
        return strncmp(a, b, la) == 0 && b[la] == '/';
    return strncmp(a, b, lb) == 0 && a[lb] == '/';
}

static void owner_name(char *out, size_t outlen, unsigned i)
{
    snprintf(out, outlen, "pvc-%05u", i);
}

static void check_query(const char *rel, unsigned owner, int also)
{
    char oname[32], aname[32];
    struct hp_volindex_conflict c;
    int want = 0;

    owner_name(oname, sizeof(oname), owner);
    owner_name(aname, sizeof(aname), (unsigned)also);
    for (unsigned i = 0; i < N_OWNERS && !want; i++) {
        if (i == owner || (int)i == also)
            continue;
        for (int s = 0; s < 3; s++)
            want |= model[i][s][0] && related(rel, model[i][s]);
    }
    memset(&c, 0, sizeof(c));
    int got = hp_volindex_conflict(x, rel, oname, also >= 0 ? aname : NULL, &c);
    if (got != want)
        fail_msg("%s for %s (also %d): conflict=%d, the model says %d", rel, oname, also, got,
                 want);
    if (!got)
        return;
    /* The details name a real holder of a related path, neither owner nor also. */
    unsigned o;
    assert_int_equal(sscanf(c.other_owner, "pvc-%u", &o), 1);
    assert_true(o < N_OWNERS && o != owner && (int)o != also);
    unsigned src = 0;
    for (int s = 0; s < 3; s++)
        if (strcmp(model[o][s], c.other_path) == 0)
            src |= 1u << s;
    assert_int_equal(c.sources, src);
    assert_true(related(rel, c.other_path));
    assert_int_equal(c.relation, hp_policy_path_relation(rel, c.other_path));
}

static void apply(unsigned owner, int s, const char *path)
{
    char oname[32];
    owner_name(oname, sizeof(oname), owner);
    if (s == 0) {
        if (path) {
            struct hp_record r = mkrec(oname, path, HP_REC_CREATED, 1);
            hp_volindex_put_record(x, &r);
        } else {
            hp_volindex_remove_record(x, oname);
        }
    } else {
        hp_volindex_hold(x, s == 1 ? VOL : RES, oname, path);
    }
    snprintf(model[owner][s], sizeof(model[owner][s]), "%s", path ? path : "");
}

static void test_bulk_model(void **state)
{
    char path[24];
    size_t conflicts = 0, queries = 0;
    (void)state;

    model = hp_xcalloc(N_OWNERS, sizeof(*model));
    /* 10,000 live volumes, then churn over all three sources. */
    for (unsigned i = 0; i < N_OWNERS; i++) {
        random_path(path, sizeof(path));
        apply(i, 1, path);
    }
    valid();
    for (unsigned step = 0; step < N_STEPS; step++) {
        unsigned owner = rnd(N_OWNERS);
        int s = (int)rnd(3);
        if (rnd(10) < 6) {
            random_path(path, sizeof(path));
            apply(owner, s, path);
        } else {
            apply(owner, s, NULL);
        }
        if (step % QUERY_EVERY == 0) {
            random_path(path, sizeof(path));
            int also = rnd(4) == 0 ? (int)rnd(N_OWNERS) : -1;
            unsigned who = rnd(N_OWNERS);
            /* Half of the queries ask about a path the asker holds. */
            if (rnd(2) == 0 && model[who][1][0])
                snprintf(path, sizeof(path), "%s", model[who][1]);
            check_query(path, who, also);
            conflicts += (size_t)hp_volindex_conflict(x, path, "pvc-none", NULL, NULL);
            queries++;
        }
        if (step % VALIDATE_EVERY == 0)
            valid();
    }
    valid();
    /* The mix exercised both answers. */
    assert_true(conflicts > queries / 10 && conflicts < queries);

    /* Release everything: nothing is held any more, whatever the path. */
    for (unsigned i = 0; i < N_OWNERS; i++)
        for (int s = 0; s < 3; s++)
            apply(i, s, NULL);
    valid();
    assert_int_equal(hp_volindex_nrecords(x), 0);
    for (unsigned i = 0; i < 2000; i++) {
        random_path(path, sizeof(path));
        assert_int_equal(hp_volindex_conflict(x, path, "pvc-none", NULL, NULL), 0);
        path[strcspn(path, "/")] = '\0'; /* the group: once an ancestor of many paths */
        assert_int_equal(hp_volindex_conflict(x, path, "pvc-none", NULL, NULL), 0);
    }
    free(model);
    model = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hold_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sources_and_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_after_removal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_retained, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bulk_model, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
