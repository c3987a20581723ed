/* Public entry points for regions, their packed descriptors (the format
 * is src/core/region.c's) and grants. */
#include <errno.h>
#include <string.h>

#include "api/mem.h"
#include "transport/transport.h"

int lc_region_register(lc_ctx_t *ctx, void *addr, size_t len, lc_region_t **out)
{
	uint64_t off = 0;
	if (!ctx || !out)
		return -EINVAL;
	int fd = lc__mem_memfd(addr, len, &off);
	int rc = lc__regions_add(&ctx->regions, ctx, addr, len, fd, off, out);
	if (rc)
		LC_WARN("register %p+%zu: %s", addr, len, lc_strerror(rc));
	else
		LC_DEBUG("region %u = %p+%zu%s", (*out)->id, addr, len, fd >= 0 ? " (memfd)" : "");
	return rc;
}

int lc_region_deregister(lc_region_t *r)
{
	if (!r)
		return -EINVAL;
	lc_ctx_t *ctx = r->ctx;
	int revoked = lc__grant_revoke_region(ctx->grants, r->id);
	if (revoked)
		LC_INFO("region %u deregistered with %d granted rooms; revoked them", r->id, revoked);
	return lc__regions_remove(&ctx->regions, r);
}

uint32_t lc_region_id(const lc_region_t *r)
{
	return r ? r->id : 0;
}

void *lc_region_addr(const lc_region_t *r)
{
	return r ? r->addr : NULL;
}

size_t lc_region_length(const lc_region_t *r)
{
	return r ? r->len : 0;
}

int lc_region_pack(const lc_region_t *r, void *buf, size_t cap)
{
	uint8_t *p = buf;
	int keys = 0;
	if (!r || !buf)
		return -EINVAL;
	if (cap < LC__DESC_HEADER)
		return -ENOSPC;
	/* Transport keys: only transports with one-sided writes add any. */
	keys = lc__transports_pack_region(r->ctx, r, p + LC__DESC_HEADER, cap - LC__DESC_HEADER);
	if (keys < 0)
		return keys;
	if (keys > 0xffff)
		return -EMSGSIZE;
	lc__region_desc_header(r, (uint16_t)keys, p);
	return LC__DESC_HEADER + keys;
}

int lc_grant_add(lc_ctx_t *ctx, uint64_t room, const lc_region_t *r, uint64_t offset,
		 uint64_t length)
{
	if (!ctx || !r || r->ctx != ctx)
		return -EINVAL;
	if (length == 0 || offset > r->len || length > r->len - offset)
		return LC_ERR_RANGE;
	int rc = lc__grant_add(ctx->grants, room, r->id, offset, length);
	if (!rc)
		LC__COUNT(ctx, grants_added);
	return rc;
}

int lc_grant_revoke(lc_ctx_t *ctx, uint64_t room)
{
	if (!ctx)
		return -EINVAL;
	int n = lc__grant_revoke(ctx->grants, room);
	if (n > 0)
		LC__COUNT(ctx, grants_revoked);
	return n;
}
