/*
 * The room checksum (knob `room_checksum`, docs/security.md): a sum over a
 * room's bytes that does not depend on how the bytes were cut into writes,
 * nor on their order, nor on which P rank wrote which part. P adds up the
 * checksum of every write it posts (the engine), D computes the same over
 * the ranges it granted once every byte landed, and the two must agree.
 *
 * The sum: every byte at position `pos` of region `region` contributes
 * byte << 8 (pos % 8) times k^(pos / 8) modulo the prime 2^61 - 1, where k
 * is a per-region key. Disjoint byte sets add, so writes of any size and
 * alignment (tcp runs, TP fragments, fan-in) sum to the value of the whole
 * range. One multiplication per 8 bytes (Horner's rule).
 *
 * What it catches: bytes that differ from what P read at post time (a page
 * reused too early, a corrupted copy, a write landing on the wrong page),
 * with probability about 1 - n/2^61 for n words. It is not a MAC: the keys
 * are fixed, so whoever can write D's memory and change the control
 * messages can make the sums agree. Host memory only (the CPU reads it).
 *
 * Threading: pure functions.
 */
#ifndef LC_CORE_CHECKSUM_H
#define LC_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define LC__SUM_PRIME ((1ull << 61) - 1)

/* The checksum of [p, p + len), placed at byte `offset` of `region`. */
uint64_t lc__sum_range(uint32_t region, uint64_t offset, const void *p, size_t len);

/* Sums of disjoint ranges add. */
static inline uint64_t lc__sum_add(uint64_t a, uint64_t b)
{
	uint64_t s = a + b; /* both < 2^61: no overflow */
	return s >= LC__SUM_PRIME ? s - LC__SUM_PRIME : s;
}

#endif
