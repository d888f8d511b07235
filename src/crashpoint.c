/* crashpoint: die like kill -9 at a named step, for crash-consistency tests (crashpoint.h).
 *
 * Any thread. The configuration is read once (pthread_once) from the environment; the hit
 * counter is atomic, so exactly one thread reaches the n-th hit.
 */
#include "hostpath/crashpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int armed;
static char point[128];
static unsigned long target;
static atomic_ulong hits;

static void configure(void)
{
    const char *v = getenv(HP_CRASH_ENV);
    const char *colon = v ? strrchr(v, ':') : NULL;
    char *end;

    atomic_store(&armed, 0);
    atomic_store(&hits, 0);
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof(point))
        return;
    if (colon[1] < '0' || colon[1] > '9') /* no sign, no space: "x:-1" disarms */
        return;
    unsigned long n = strtoul(colon + 1, &end, 10);
    if (*end || n == 0)
        return;
    memcpy(point, v, (size_t)(colon - v));
    point[colon - v] = '\0';
    target = n;
    atomic_store(&armed, 1);
}

void hp_crashpoint(const char *name)
{
    (void)pthread_once(&once, configure);
    if (!atomic_load_explicit(&armed, memory_order_relaxed) || strcmp(name, point) != 0)
        return;
    if (atomic_fetch_add(&hits, 1) + 1 != target)
        return;
    char line[256];
    int n = snprintf(line, sizeof(line), "crashpoint: %s reached %lu time(s); SIGKILL\n", name,
                     target);
    if (n > 0)
        (void)!write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    (void)kill(getpid(), SIGKILL);
    _exit(137); /* not reached */
}

void hp_crashpoint_reset(void)
{
    (void)pthread_once(&once, configure);
    configure();
}

unsigned long hp_crashpoint_hits(void)
{
    return atomic_load(&hits);
}
