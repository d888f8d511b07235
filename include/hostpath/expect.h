/* expect: the writes this process made that its watch has not shown yet -- client-go's
 * ControllerExpectations, by object name.
 *
 * A controller that reads a watch cache acts on a copy that may lag its own writes: a PV it
 * just created is not in the cache yet (a claim update arriving first would provision it
 * again), one it just deleted is still there (it would be released a second time, and its
 * claim, still cached, provisioned anew). The controller records each such write here and,
 * until the watch shows it (hp_expect_observed) or ttl_ms passes, asks hp_expect_get before
 * trusting the cache: PRESENT, GONE, or NONE (the cache is right). At most max entries are
 * kept: beyond, the oldest lapse first.
 *
 * Loop thread only; clocks are passed in (milliseconds on any monotonic scale).
 * Lifetime: hp_expect_new, hp_expect_free (plain memory).
 */
#ifndef HOSTPATH_EXPECT_H
#define HOSTPATH_EXPECT_H

#include <stddef.h>
#include <stdint.h>

enum hp_expect_state { HP_EXPECT_NONE, HP_EXPECT_PRESENT, HP_EXPECT_GONE };

struct hp_expect;

struct hp_expect *hp_expect_new(uint64_t ttl_ms, size_t max);
void hp_expect_free(struct hp_expect *x);

/* This process created (or found, by a read of the API server) the object name: present
 * until the watch says otherwise. Replaces an earlier expectation of name. name is copied. */
void hp_expect_created(struct hp_expect *x, const char *name, uint64_t now_ms);
/* This process deleted the object name (or the API server said it is gone). */
void hp_expect_deleted(struct hp_expect *x, const char *name, uint64_t now_ms);
/* The watch delivered name, present or deleted: an expectation it meets is done; one it
 * contradicts stays (the watch is behind: a deletion's expectation outlives the watch's copy
 * of the object, a creation's the copy of its absence). */
void hp_expect_observed(struct hp_expect *x, const char *name, int present);
/* What is expected of name now (NONE once lapsed). */
enum hp_expect_state hp_expect_get(const struct hp_expect *x, const char *name,
                                   uint64_t now_ms);
/* Drops the expectations that lapsed by now_ms, calling fn(name, state, data) for each (fn
 * may be NULL; name is borrowed for the call). */
void hp_expect_expire(struct hp_expect *x, uint64_t now_ms,
                      void (*fn)(const char *name, enum hp_expect_state state, void *data),
                      void *data);
size_t hp_expect_len(const struct hp_expect *x);
/* Consistency check for tests: 0 when every invariant holds. */
int hp_expect_validate(const struct hp_expect *x);

#endif
