/* Public entry points for registering regions and packing their
 * descriptors: the data plane's, since a descriptor carries the
 * transports' keys (the format is src/core/region.c's). */
#include <errno.h>
#include <string.h>

#include "core/copier.h"
#include "core/cuda.h"
#include "core/mem.h"
#include "core/params.h"
#include "transport/stage.h"
#include "transport/transport.h"

/* A kind refused at registration: logged and counted. */
static int refuse_kind(lc_ctx_t *ctx, void *addr, size_t len, int kind, int rc, const char *why)
{
	LC__COUNT(ctx, regions_rejected_kind);
	return LC__FAIL(rc, "register %p+%zu as memory kind %d: %s (%s)", addr, len, kind, why,
			lc_strerror(rc));
}

/* CUDA memory: what the driver says the range is must be what the caller
 * says (LC_ENOTSUP where libcuda cannot be loaded). Pinned memory is host
 * memory to every path here and is taken as given. */
static int check_cuda(lc_ctx_t *ctx, void *addr, size_t len, int kind, int device)
{
	int k, dev, rc = lc__cuda_pointer_kind(addr, &k, &dev);
	if (rc)
		return refuse_kind(ctx, addr, len, kind, rc, "CUDA cannot say what the range is");
	if (kind == LC_MEM_KIND_CUDA && (k != LC_CUDA_PTR_DEVICE || dev != device))
		return refuse_kind(ctx, addr, len, kind, LC_ERR_MEM_KIND,
				   "the range is not device memory of that device");
	return 0;
}

/* Check `kind` against what [addr, addr+len) is; device kinds need their
 * copy engine, made here so that a landing never waits for one. */
static int check_kind(lc_ctx_t *ctx, void *addr, size_t len, int kind, int device)
{
	bool sim = lc_sim_is(addr, len);
	lc__copier_t *cp;
	if (kind < LC_MEM_KIND_HOST || kind > LC_MEM_KIND_SIM)
		return refuse_kind(ctx, addr, len, kind, -EINVAL, "unknown memory kind");
	if (kind != LC_MEM_KIND_SIM && sim)
		return refuse_kind(ctx, addr, len, kind, LC_ERR_MEM_KIND,
				   "the range is simulated device memory (lc_sim_alloc)");
	if (kind == LC_MEM_KIND_SIM && !sim)
		return refuse_kind(ctx, addr, len, kind, LC_ERR_MEM_KIND,
				   "the range is not one lc_sim_alloc range");
	int rc = kind == LC_MEM_KIND_CUDA ? check_cuda(ctx, addr, len, kind, device) : 0;
	if (rc || LC__KIND_IS_HOST(kind))
		return rc;
	rc = lc__copier_get(ctx, kind, device, &cp);
	if (rc)
		return refuse_kind(ctx, addr, len, kind, rc, "no copy engine for this kind");
	rc = lc__stage_ready(ctx);
	if (rc)
		LC__WARN("register %p+%zu: no staging ring: %s", addr, len, lc_strerror(rc));
	return rc;
}

int lc_region_register_ex(lc_ctx_t *ctx, void *addr, size_t len, const lc_region_params_t *params,
			  lc_region_t **out)
{
	lc_region_params_t p;
	uint64_t off = 0;
	lc_last_error_clear();
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_region_register: %s is NULL", ctx ? "out" : "ctx");
	LC__PARAMS_COPY(&p, params);
	if (!params && lc_sim_is(addr, len))
		p.kind = LC_MEM_KIND_SIM; /* plain registration detects sim ranges */
	int rc = check_kind(ctx, addr, len, p.kind, p.device);
	if (rc)
		return rc;
	int fd = LC__KIND_IS_HOST(p.kind) ? lc__mem_memfd(addr, len, &off) : -1;
	rc = lc__regions_add_kind(&ctx->regions, ctx, addr, len, fd, off, p.kind, p.device, out);
	if (rc)
		return LC__FAIL(rc, "register %p+%zu: %s", addr, len, lc__why(rc));
	else
		LC__DEBUG("region %u = %p+%zu kind %d%s", (*out)->id, addr, len, p.kind,
			  fd >= 0 ? " (memfd)" : "");
	return rc;
}

int lc_region_register(lc_ctx_t *ctx, void *addr, size_t len, lc_region_t **out)
{
	return lc_region_register_ex(ctx, addr, len, NULL, out);
}

int lc_region_deregister(lc_region_t *r)
{
	if (!r)
		return LC__FAIL(-EINVAL, "lc_region_deregister: region is NULL");
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
		return LC__FAIL(-EINVAL, "lc_region_pack: %s is NULL", r ? "buf" : "region");
	if (cap < LC__DESC_HEADER)
		return LC__FAIL(-ENOSPC, "lc_region_pack: %zu bytes given, at least %d needed", cap,
				LC__DESC_HEADER);
	/* Transport keys: only transports with one-sided writes add any. */
	keys = lc__transports_pack_region(r->ctx, r, p + LC__DESC_HEADER, cap - LC__DESC_HEADER);
	if (keys < 0)
		return keys;
	if (keys > 0xffff)
		return -EMSGSIZE;
	lc__region_desc_header(r, (uint16_t)keys, p);
	return LC__DESC_HEADER + keys;
}
