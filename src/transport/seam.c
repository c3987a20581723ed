/* The memory seam (seam.h): where bytes leave sources and land. */
#include <string.h>

#include "transport/seam.h"

/* Copies into granted memory are cut in slices, so that a revoke never
 * waits long for a bracket to close. */
#define LAND_SLICE (4u << 20)

int lc__land_open(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset, uint64_t length,
		  lc__land_t *l)
{
	lc__region_info_t r;
	if (lc__regions_get(&ctx->regions, region, &r)) {
		LC__COUNT(ctx, writes_rejected_region);
		LC__WARN("rejected write for room %llu: unknown region %u",
			 (unsigned long long)room, region);
		return LC_ERR_REGION;
	}
	if (offset > r.len || length > r.len - offset) {
		LC__COUNT(ctx, writes_rejected_range);
		LC__WARN(
			"rejected write for room %llu: [%llu, +%llu) outside region %u of %zu bytes",
			(unsigned long long)room, (unsigned long long)offset,
			(unsigned long long)length, region, r.len);
		return LC_ERR_OUT_OF_REGION;
	}
	lc__grant_room_t *g;
	if (lc__grant_lookup(ctx->grants, room, region, offset, length, &g)) {
		LC__COUNT(ctx, writes_rejected_grant);
		LC__WARN("rejected write for room %llu: region %u [%llu, +%llu) not granted",
			 (unsigned long long)room, region, (unsigned long long)offset,
			 (unsigned long long)length);
		return LC_ERR_GRANT;
	}
	*l = (lc__land_t){.ctx = ctx,
			  .g = g,
			  .dst = r.addr + offset,
			  .room = room,
			  .offset = offset,
			  .length = length,
			  .region = region};
	return 0;
}

bool lc__land_enter(const lc__land_t *l)
{
	return lc__grant_enter(l->g);
}

void lc__land_exit(const lc__land_t *l)
{
	lc__grant_exit(l->g);
}

int lc__land_copy(const lc__land_t *l, uint64_t at, const void *src, uint64_t n)
{
	for (uint64_t done = 0; done < n;) {
		uint64_t k = LC__MIN(n - done, (uint64_t)LAND_SLICE);
		if (!lc__grant_enter(l->g))
			return LC_ERR_GRANT;
		memcpy(l->dst + at + done, (const uint8_t *)src + done, k);
		lc__grant_exit(l->g);
		done += k;
	}
	return 0;
}

/* Decode-side accounting: the room's own count of what landed, each
 * granted byte once. */
static void land_count(lc__land_t *l)
{
	lc__grant_landing_t o;
	int rc = lc__grant_landed(l->g, l->region, l->offset, l->length, &o);
	if (o.broke) {
		LC__COUNT(l->ctx, grant_intervals_capped);
		LC__WARN("room %llu: its writes leave more gaps than grant_intervals_max allows "
			 "(%s): D stops counting the room and fails it",
			 (unsigned long long)l->room, lc_strerror(rc));
	}
	if (!o.twice)
		return;
	LC__COUNT_ADD(l->ctx, bytes_landed_twice, o.twice);
	if (o.first_twice)
		LC__WARN("room %llu: %llu bytes of region %u landed twice (a duplicate or "
			 "replayed write)",
			 (unsigned long long)l->room, (unsigned long long)o.twice, l->region);
}

void lc__land_done(lc__land_t *l, bool landed)
{
	if (landed) {
		LC__COUNT(l->ctx, writes_applied);
		LC__COUNT_ADD(l->ctx, bytes_applied, l->length);
		if (l->g && l->length)
			land_count(l);
	}
	if (l->g)
		lc__grant_put(l->g);
	l->g = NULL;
}

void lc__land_revoked(lc__land_t *l)
{
	LC__COUNT(l->ctx, writes_rejected_grant);
}

int lc__land_write(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset, const void *src,
		   uint64_t length)
{
	lc__land_t l;
	int rc = lc__land_open(ctx, room, region, offset, length, &l);
	if (rc)
		return rc;
	rc = lc__land_copy(&l, 0, src, length);
	if (rc)
		lc__land_revoked(&l);
	lc__land_done(&l, rc == 0);
	return rc;
}

int lc__source_find(lc_ctx_t *ctx, const void *addr, size_t len, lc__region_info_t *out)
{
	return lc__regions_find(&ctx->regions, addr, len, out);
}
