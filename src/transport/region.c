/* Public entry points for registering regions and packing their
 * descriptors: the data plane's, since a descriptor carries the
 * transports' keys (the format is src/core/region.c's). */
#include <errno.h>
#include <string.h>

#include "core/mem.h"
#include "transport/transport.h"

int lc_region_register(lc_ctx_t *ctx, void *addr, size_t len, lc_region_t **out)
{
	uint64_t off = 0;
	if (!ctx || !out)
		return -EINVAL;
	int fd = lc__mem_memfd(addr, len, &off);
	int rc = lc__regions_add(&ctx->regions, ctx, addr, len, fd, off, out);
	if (rc)
		LC__WARN("register %p+%zu: %s", addr, len, lc_strerror(rc));
	else
		LC__DEBUG("region %u = %p+%zu%s", (*out)->id, addr, len, fd >= 0 ? " (memfd)" : "");
	return rc;
}

int lc_region_deregister(lc_region_t *r)
{
	if (!r)
		return -EINVAL;
	lc_ctx_t *ctx = r->ctx;
	int revoked = lc__grant_revoke_region(ctx->grants, r->id);
	if (revoked)
		LC__INFO("region %u deregistered with %d granted rooms; revoked them", r->id,
			 revoked);
	return lc__regions_remove(&ctx->regions, r);
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
