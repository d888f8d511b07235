/* crashpoint: named points where a test can make the process die as if by kill -9.
 *
 * Any thread. With HOSTPATH_TEST_CRASH_AT="<name>:<n>" in the environment, the n-th time
 * (counting from 1) the process passes hp_crashpoint("<name>") it writes one line to stderr and
 * sends itself SIGKILL: no handler, no flush, no cleanup, exactly what a crash or an OOM kill
 * leaves behind. Without the variable a crash point costs one relaxed atomic load. Tests use
 * it to prove that every step of provisioning and deletion is crash-consistent.
 *
 * Lifetime: process-wide state only, nothing to end.
 */
#ifndef HOSTPATH_CRASHPOINT_H
#define HOSTPATH_CRASHPOINT_H

#define HP_CRASH_ENV "HOSTPATH_TEST_CRASH_AT"

void hp_crashpoint(const char *name);

/* For tests: re-reads the environment variable (and resets the count). */
void hp_crashpoint_reset(void);
/* How often the configured point was passed since the last reset. */
unsigned long hp_crashpoint_hits(void);

#endif
