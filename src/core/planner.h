/*
 * The planner: from a chunk's page ids and a destination's page ids to
 * write descriptors. Three steps, all pure and allocation-free:
 *   1. resolve indices (spec 6.5: partial caches ON/OFF on either side),
 *   2. coalesce contiguous (src, dst) page runs, once per task,
 *   3. per layer group [k*I, min((k+1)*I, L)), emit one lc_write_t per
 *      (buffer, run), or per (buffer, page) for per-rank fragments (a
 *      strided write per page for token-major fragments).
 */
#ifndef LC_CORE_PLANNER_H
#define LC_CORE_PLANNER_H

#include "core/common.h"
#include "core/layout.h"

#include <sys/types.h>

/* A run of n consecutive pages starting at src on P and dst on D. */
typedef struct lc__run {
	int64_t src;
	int64_t dst;
	int64_t n;
} lc__run_t;

/* Where one buffer's pages go at one destination. A whole page moves as
 * one piece when bytes == src_stride == dst_stride and runs coalesce into
 * single writes; a fragment (heterogeneous TP: a byte range of each page)
 * moves page by page. */
typedef struct lc__xfer {
	const uint8_t *src_base; /* P buffer base + src byte offset */
	uint64_t src_stride;     /* bytes between P pages (P item_len) */
	uint64_t dst_base;       /* offset of D page 0 in dst_region + dst byte offset */
	uint64_t dst_stride;     /* bytes between D pages */
	uint64_t bytes;          /* bytes per page moved (per block when count > 1) */
	uint32_t dst_region;     /* D region id (as imported on the connection) */
	uint32_t skip;           /* 1: nothing of this buffer goes to this destination */
	/* Token-major fragment: count blocks of `bytes` per page, block_src /
	 * block_dst bytes apart within the P / D page: one strided write per
	 * page. count <= 1: one block. */
	uint32_t count;
	uint32_t reserved;
	uint64_t block_src;
	uint64_t block_dst;
} lc__xfer_t;

/* Fill a whole-page transfer for buffer b of layout l. */
void lc__xfer_whole_page(lc__xfer_t *x, const lc_buffer_t *b, uint32_t dst_region,
			 uint64_t dst_offset);

/* Index resolution. Position j of the chunk (0 <= j < positions) pairs with
 * D position dst_begin + j. src side: OFF (src_mask NULL) page = src[j];
 * ON page = src_local[rank of j among the masked], skipped where unmasked.
 * dst side: OFF page = dst[dst_begin + j]; ON page = dst_local[rank of
 * dst_begin + j among dst_mask], skipped where unmasked. out_src/out_dst
 * hold at least `positions` entries. Returns the pair count, -EINVAL for an
 * out-of-range local index, -ERANGE when D's list does not cover the
 * chunk (the seed truncated silently: spec 9.3.7). */
typedef struct lc__resolve_in {
	const int64_t *src;      /* OFF: P pages, `positions` entries */
	const uint8_t *src_mask; /* ON: `positions` entries */
	const int64_t *src_local;
	size_t src_local_count;
	size_t positions;
	const int64_t *dst; /* D pages (whole list) */
	size_t dst_count;
	size_t dst_begin;
	const uint8_t *dst_mask; /* ON: dst_count entries */
	const int64_t *dst_local;
	size_t dst_local_count;
} lc__resolve_in_t;

ssize_t lc__resolve(const lc__resolve_in_t *in, int64_t *out_src, int64_t *out_dst);

/* Split aligned index arrays wherever either fails to increase by exactly
 * one. runs must hold n entries. Returns the run count (0 for n == 0). */
size_t lc__coalesce(const int64_t *src, const int64_t *dst, size_t n, lc__run_t *runs);

/* Layer groups of size interval over `layers` layers (interval <= 0: one
 * group of all layers). */
static inline uint32_t lc__group_count(uint32_t layers, int64_t interval)
{
	if (interval <= 0 || (uint64_t)interval >= layers)
		return layers ? 1 : 0;
	return (uint32_t)((layers + (uint64_t)interval - 1) / (uint64_t)interval);
}
static inline void lc__group_range(uint32_t layers, int64_t interval, uint32_t k, uint32_t *begin,
				   uint32_t *end)
{
	if (interval <= 0 || (uint64_t)interval >= layers) {
		*begin = 0;
		*end = layers;
		return;
	}
	*begin = k * (uint32_t)interval;
	*end = LC__MIN(*begin + (uint32_t)interval, layers);
}

/* What one task sends to one destination: page runs for KV buffers, slot
 * runs for state buffers (either may be empty). */
typedef struct lc__plan {
	const lc_layout_t *layout;
	const lc__xfer_t *xfer; /* layout->nbuf entries */
	const lc__run_t *runs;
	size_t nruns;
	int64_t pages; /* total pages in runs */
	const lc__run_t *state_runs;
	size_t nstate_runs;
	int64_t slots;
} lc__plan_t;

/* Upper bound of the descriptors of layers [begin, end). */
size_t lc__plan_count(const lc__plan_t *p, uint32_t begin, uint32_t end);
/* Emit the descriptors of layers [begin, end) into out (room for
 * lc__plan_count entries). Returns how many; *bytes gets their total. */
size_t lc__plan_emit(const lc__plan_t *p, uint32_t begin, uint32_t end, lc_write_t *out,
		     uint64_t *bytes);

#endif

/* State (mamba) slots (spec 6.6): pair P's slots with D's. Equal counts
 * pair in order; one P slot is broadcast over several D slots; any other
 * shape is -EINVAL. Pairs with a negative slot are dropped. out arrays hold
 * max(np, nd) entries. Returns the pair count. */
ssize_t lc__pair_slots(const int64_t *p, size_t np, const int64_t *d, size_t nd, int64_t *out_src,
		       int64_t *out_dst);
