/* Regions, their packed descriptors, and grants. */
#include <errno.h>
#include <string.h>

#include "api/mem.h"
#include "transport/transport.h"

/* Descriptor layout (little-endian), version 1:
 *   0 u32 magic "LCRD"   4 u16 version   6 u16 key bytes that follow
 *   8 u64 owner         16 u32 region id 20 u32 flags   24 u64 length
 *  32 transport keys (opaque, e.g. UCX rkeys) */
#define DESC_MAGIC 0x4452434cu
#define DESC_VERSION 1
#define DESC_HEADER 32
#define DESC_FLAG_MEMFD 1u

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
	if (cap < DESC_HEADER)
		return -ENOSPC;
	/* Transport keys: only transports with one-sided writes need any. */
	const lc__transport_ops_t *ucx = lc__transport_find("ucx://");
	if (ucx && ucx->pack_region) {
		keys = ucx->pack_region(r->ctx, r, p + DESC_HEADER, cap - DESC_HEADER);
		if (keys < 0)
			return keys;
	}
	if (keys > 0xffff)
		return -EMSGSIZE;
	lc__put_u32(p, DESC_MAGIC);
	lc__put_u16(p + 4, DESC_VERSION);
	lc__put_u16(p + 6, (uint16_t)keys);
	lc__put_u64(p + 8, r->ctx->uid);
	lc__put_u32(p + 16, r->id);
	lc__put_u32(p + 20, r->memfd >= 0 ? DESC_FLAG_MEMFD : 0);
	lc__put_u64(p + 24, r->len);
	return DESC_HEADER + keys;
}

int lc_region_unpack(const void *buf, size_t len, lc_region_desc_t *out)
{
	const uint8_t *p = buf;
	if (!buf || !out)
		return -EINVAL;
	if (len < DESC_HEADER || lc__get_u32(p) != DESC_MAGIC ||
	    lc__get_u16(p + 4) != DESC_VERSION || DESC_HEADER + (size_t)lc__get_u16(p + 6) != len)
		return LC_ERR_PROTO;
	out->owner = lc__get_u64(p + 8);
	out->region_id = lc__get_u32(p + 16);
	out->flags = lc__get_u32(p + 20);
	out->length = lc__get_u64(p + 24);
	if (out->region_id == 0)
		return LC_ERR_PROTO;
	return 0;
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
