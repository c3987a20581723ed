/*
 * D's count of what landed in one room (decode side): the granted bytes
 * that some finished write covered, each byte at most once, kept as a
 * sorted list of merged intervals; and, once D says which byte spans make
 * each layer (lc__landed_watch), how many leading layers are complete,
 * kept current as bytes land so that reading it is O(1).
 *
 * A write that lands twice (a replay, a duplicate standing in for a missing
 * write) adds nothing and is reported back as bytes landed twice. Honest
 * streaming keeps the list short: a fully covered range is one interval,
 * and only writes landing out of order leave gaps for a while. The caller
 * caps the intervals (max_ivals): a write that would pass the cap breaks
 * the count, and from then on nothing more is counted.
 *
 * Layers: each watched span (region, [lo, hi), layer) carries the granted
 * bytes inside it; a layer's `left` is those of its spans not yet covered.
 * A write adds only bytes not covered before, so each of them takes its
 * overlap off the layers of the spans it falls in; `ready` then moves past
 * every leading layer whose `left` is 0. It never goes back: bytes granted
 * later to a layer below it (lc__landed_granted) do not lower it.
 *
 * Not thread-safe: the owner serialises every call (grant.c: the room
 * entry's lock), except lc__landed_ready, an atomic read from any thread.
 */
#ifndef LC_CORE_LANDED_H
#define LC_CORE_LANDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Covered bytes [lo, hi) of a region: sorted by (region, lo), disjoint and
 * never touching (touching intervals are merged). */
typedef struct lc__landed_ival {
	uint64_t lo, hi;
	uint32_t region;
} lc__landed_ival_t;

/* Bytes [lo, hi) of region that belong to a layer. */
typedef struct lc__landed_span {
	uint32_t region;
	uint32_t layer;
	uint64_t lo, hi;
} lc__landed_span_t;

typedef struct lc__landed {
	lc__landed_ival_t *iv;
	size_t niv, civ;
	uint64_t covered, twice;
	int broken; /* 0, or why counting stopped (-ENOSPC: the cap, -ENOMEM) */
	/* The layer watch (lc__landed_watch); nspans 0 before. */
	lc__landed_span_t *spans; /* sorted by (region, lo) */
	uint64_t *reach;          /* per span: the highest hi of its region so far */
	size_t nspans;
	uint64_t *left; /* per layer: granted bytes of its spans not covered */
	uint32_t layers;
	_Atomic uint32_t ready; /* leading layers with left == 0 */
} lc__landed_t;

void lc__landed_init(lc__landed_t *l);
void lc__landed_fini(lc__landed_t *l);

/* Count [lo, hi) of region as landed, within max_ivals intervals in all.
 * *twice: the bytes of it that had landed before. Returns 0; -ENOSPC (the
 * cap) or -ENOMEM when the count breaks now (*broke) or was broken before
 * (nothing counted). */
int lc__landed_add(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi, size_t max_ivals,
		   uint64_t *twice, bool *broke);
/* Covered bytes inside [lo, hi) of region. */
uint64_t lc__landed_in(const lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi);

/* Watch n spans of `layers` layers; need[i] is the granted bytes inside
 * spans[i]. Bytes covered already are taken off at once. Replaces an
 * earlier watch. 0 or -ENOMEM (no watch then), -EINVAL for a span's layer
 * >= layers. */
int lc__landed_watch(lc__landed_t *l, const lc__landed_span_t *spans, const uint64_t *need,
		     size_t n, uint32_t layers);
/* [lo, hi) of region was just granted (none of it granted before): the
 * watched layers it falls in have that much more to land. */
void lc__landed_granted(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi);
/* The leading layers complete; 0 without a watch. Any thread. */
uint32_t lc__landed_ready(const lc__landed_t *l);

#endif
