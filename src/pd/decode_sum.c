/*
 * The room checksum at D (knob room_checksum, core/checksum.h): the ranges
 * D granted are kept as it grants them, and once every granted byte landed
 * and the grant is revoked, D sums its own memory over them and compares
 * with what the room's P ranks said they wrote.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/checksum.h"
#include "core/region.h"
#include "pd/decode_int.h"

int lc__decode_keep_range(lc_receiver_t *r, const lc__sum_range_t *g)
{
	if (r->nsum_ranges == r->sum_cap) {
		size_t cap = r->sum_cap ? 2 * r->sum_cap : 16;
		lc__sum_range_t *n = realloc(r->sum_ranges, cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		r->sum_ranges = n;
		r->sum_cap = cap;
	}
	r->sum_ranges[r->nsum_ranges++] = *g;
	return 0;
}

int lc__decode_check_sum(lc_decode_t *d, lc_receiver_t *r, char *why, size_t cap)
{
	uint64_t claimed = 0, mine = 0;
	for (int i = 0; i < r->plan.ntargets; i++) {
		if (r->plan.targets[i].dummy)
			continue;
		if (!r->got[i].has_sum) {
			snprintf(why, cap,
				 "P rank %d sent no room checksum (room_checksum is on at D only?)",
				 r->plan.targets[i].rank);
			return LC_ERR_PROTO;
		}
		claimed = lc__sum_add(claimed, r->got[i].sum);
	}
	/* Ranges granted twice (overlapping pages) would count twice: D grants
	 * each page once per buffer, and buffers do not overlap. */
	for (size_t i = 0; i < r->nsum_ranges; i++) {
		const lc__sum_range_t *g = &r->sum_ranges[i];
		mine = lc__sum_add(mine, lc__sum_range(g->region->id, g->offset,
						       g->region->addr + g->offset, g->length));
	}
	(void)d;
	if (claimed == mine)
		return 0;
	snprintf(why, cap, "room checksum mismatch: P ranks sent %#llx, D's memory holds %#llx",
		 (unsigned long long)claimed, (unsigned long long)mine);
	return LC_ERR_PROTO;
}
