/* quantity: Kubernetes resource quantities ("1Gi", "500M", "1.5e3", "100m") as byte counts.
 *
 * Any thread (pure). The grammar is apimachinery's resource.Quantity: a decimal number (sign,
 * digits, optional fraction) and one suffix: binary (Ki Mi Gi Ti Pi Ei), decimal (n u m "" k M
 * G T P E) or a decimal exponent (e3, E-2). A storage size is a whole number of bytes, so a
 * fraction of a byte rounds up, as Quantity.Value() does.
 *
 * Lifetime: pure functions, no objects.
 */
#ifndef HOSTPATH_QUANTITY_H
#define HOSTPATH_QUANTITY_H

#include <stddef.h>
#include <stdint.h>

/* Parses s into *bytes. 0, or -EINVAL (not a quantity, or negative) / -ERANGE (above
 * 2^63 - 1 bytes), with a one-line reason in err (may be NULL). */
int hp_quantity_parse(const char *s, uint64_t *bytes, char *err, size_t errlen);

/* A byte count for people: the largest binary unit that keeps it at or above 1 with at most one
 * decimal ("1.5Gi", "900Gi", "512", "1023Ki" ...). Returns out. */
const char *hp_quantity_format(uint64_t bytes, char *out, size_t outlen);

#endif
