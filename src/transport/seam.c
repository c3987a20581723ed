/* The memory seam (seam.h): where bytes leave sources and land. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/copier.h"
#include "core/stream.h"
#include "transport/seam.h"

int lc__land_open(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		  uint64_t length, lc__land_t *l)
{
	lc__region_info_t r;
	if (lc__regions_get(&ctx->regions, region, &r)) {
		LC__COUNT(ctx, writes_rejected_region);
		LC__WARN_PEER("rejected write for room %llu: unknown region %u",
			      (unsigned long long)room, region);
		return LC_ERR_REGION;
	}
	if (offset > r.len || length > r.len - offset) {
		LC__COUNT(ctx, writes_rejected_range);
		LC__WARN_PEER(
			"rejected write for room %llu: [%llu, +%llu) outside region %u of %zu bytes",
			(unsigned long long)room, (unsigned long long)offset,
			(unsigned long long)length, region, r.len);
		return LC_ERR_OUT_OF_REGION;
	}
	lc__grant_room_t *g;
	int rc = lc__grant_lookup(ctx->grants, room, who, region, offset, length, &g);
	if (rc == LC_ERR_AUTH) {
		/* A token holder writing a room given to other writers: an
		 * impostor D registered with, aiming at a room of a real P. */
		LC__COUNT(ctx, writes_rejected_token);
		LC__WARN_PEER("rejected write for room %llu: region %u [%llu, +%llu) from a "
			      "connection whose token the room was not given to (%s)",
			      (unsigned long long)room, region, (unsigned long long)offset,
			      (unsigned long long)length,
			      who ? "another session's token" : "no token of this context");
		return LC_ERR_GRANT;
	}
	if (rc) {
		LC__COUNT(ctx, writes_rejected_grant);
		LC__WARN_PEER("rejected write for room %llu: region %u [%llu, +%llu) not granted",
			      (unsigned long long)room, region, (unsigned long long)offset,
			      (unsigned long long)length);
		return LC_ERR_GRANT;
	}
	lc__copier_t *cp = NULL;
	if (!LC__KIND_IS_HOST(r.kind) && (rc = lc__copier_get(ctx, r.kind, r.device, &cp))) {
		lc__grant_put(g);
		LC__COUNT(ctx, device_copy_errors);
		LC__WARN_PEER("rejected write for room %llu: region %u has no copy engine (%s)",
			      (unsigned long long)room, region, lc_strerror(rc));
		return rc;
	}
	bool host = cp == NULL;
	*l = (lc__land_t){.ctx = ctx,
			  .g = g,
			  .dst = host ? r.addr + offset : NULL,
			  .dev = host ? NULL : r.addr + offset,
			  .cp = cp,
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

/* Device destinations: through the copy engine, waited for inside the
 * bracket, so that a revoke waits for it. */
static int land_dev(const lc__land_t *l, uint64_t at, const void *src, uint64_t n)
{
	for (uint64_t done = 0; done < n;) {
		uint64_t k = LC__MIN(n - done, (uint64_t)LC__LAND_SLICE);
		if (!lc__grant_enter(l->g))
			return LC_ERR_GRANT;
		int rc = lc__copy_to_dev_sync(l->cp, l->dev + at + done,
					      (const uint8_t *)src + done, k);
		lc__grant_exit(l->g);
		if (rc) {
			LC__WARN("room %llu: device copy into region %u failed: %s",
				 (unsigned long long)l->room, l->region, lc_strerror(rc));
			return LC_ERR_IO;
		}
		done += k;
	}
	return 0;
}

int lc__land_copy(const lc__land_t *l, uint64_t at, const void *src, uint64_t n)
{
	if (l->dev)
		return land_dev(l, at, src, n);
	/* Large writes stream into place (core/stream.h); each slice's stores
	 * are fenced before its bracket closes, so a revoke that waited for
	 * the bracket sees every byte that will ever land. */
	size_t stream_min =
		n >= 4096 ? (size_t)lc__ctx_cfg(l->ctx, LC__CFG_land_stream_min_kib) << 10 : 0;
	for (uint64_t done = 0; done < n;) {
		uint64_t k = LC__MIN(n - done, (uint64_t)LC__LAND_SLICE);
		if (!lc__grant_enter(l->g))
			return LC_ERR_GRANT;
		lc__copy_landing(l->dst + at + done, (const uint8_t *)src + done, (size_t)k,
				 stream_min);
		lc__grant_exit(l->g);
		done += k;
	}
	return 0;
}

bool lc__land_is_revoked(const lc__land_t *l)
{
	return lc__grant_revoked(l->g);
}

/* Host destination: the producer writes straight into place, bracketed. */
static int fill_host(const lc__land_t *l, uint64_t at, uint64_t n, lc__land_fill_fn fill, void *arg)
{
	for (uint64_t done = 0; done < n;) {
		uint64_t k = LC__MIN(n - done, (uint64_t)LC__LAND_SLICE);
		if (!lc__grant_enter(l->g))
			return LC_ERR_GRANT;
		int64_t got = fill(arg, l->dst + at + done, done, k);
		lc__grant_exit(l->g);
		if (got <= 0)
			return got < 0 ? (int)got : LC_ERR_IO;
		done += (uint64_t)got;
	}
	return 0;
}

int lc__land_fill(const lc__land_t *l, uint64_t at, uint64_t n, lc__land_fill_fn fill, void *arg)
{
	if (!l->dev)
		return fill_host(l, at, n, fill, arg);
	uint8_t *bounce = malloc(LC__MIN(n, (uint64_t)LC__LAND_SLICE));
	int rc = bounce ? 0 : -ENOMEM;
	for (uint64_t done = 0; done < n && !rc;) {
		int64_t got = fill(arg, bounce, done, LC__MIN(n - done, (uint64_t)LC__LAND_SLICE));
		if (got <= 0) {
			rc = got < 0 ? (int)got : LC_ERR_IO;
			break;
		}
		rc = land_dev(l, at + done, bounce, (uint64_t)got);
		done += (uint64_t)got;
	}
	free(bounce);
	return rc;
}

/* One pipelined landing's slices in flight: the last one to complete (or
 * the caller's hold, released once every slice is queued) reports. */
typedef struct land_job {
	lc__grant_room_t *g;
	lc__copy_done_fn done;
	void *arg;
	_Atomic uint32_t left;
	_Atomic int status;
} land_job_t;

static void job_slice_done(void *arg, int status)
{
	land_job_t *j = arg;
	if (status) {
		int zero = 0;
		atomic_compare_exchange_strong(&j->status, &zero, status);
	}
	if (atomic_fetch_sub(&j->left, 1) != 1)
		return;
	int st = atomic_load(&j->status);
	j->done(j->arg, st == LC_ERR_GRANT ? st : st ? LC_ERR_IO : 0);
	free(j);
}

/* The engine's thread: one slice's copy completed; leave its bracket. */
static void job_copied(void *arg, int status)
{
	land_job_t *j = arg;
	lc__grant_exit(j->g);
	job_slice_done(j, status ? LC_ERR_IO : 0);
}

/* Queue one slice inside its own bracket: 0, LC_ERR_GRANT or LC_ERR_IO. */
static int job_queue(const lc__land_t *l, land_job_t *j, uint64_t at, const uint8_t *src,
		     uint64_t k)
{
	if (!lc__grant_enter(l->g))
		return LC_ERR_GRANT;
	int rc = l->cp->ops->from_host(l->cp, l->dev + at, src, (size_t)k, job_copied, j);
	if (!rc)
		return 0;
	lc__grant_exit(l->g);
	LC__COUNT(l->ctx, device_copy_errors);
	LC__WARN("room %llu: queueing a device copy into region %u failed: %s",
		 (unsigned long long)l->room, l->region, lc_strerror(rc));
	return LC_ERR_IO;
}

int lc__land_copy_async(const lc__land_t *l, uint64_t at, const void *src, uint64_t n,
			lc__copy_done_fn done, void *arg)
{
	/* Every slice is counted before the first is queued, so the report
	 * comes from the engine's thread, never from the caller's (which
	 * may be an I/O thread whose own kick would be lost): a receiver
	 * learns of its copies from its loop, not from inside this call. */
	uint64_t slices = n ? (n + LC__LAND_SLICE - 1) / LC__LAND_SLICE : 0;
	land_job_t *j = slices ? malloc(sizeof *j) : NULL;
	if (!j) {
		LC__COUNT(l->ctx, device_copy_errors);
		return LC_ERR_IO;
	}
	*j = (land_job_t){.g = l->g, .done = done, .arg = arg};
	atomic_init(&j->left, (uint32_t)slices);
	atomic_init(&j->status, 0);
	for (uint64_t i = 0; i < slices; i++) {
		uint64_t off = i * LC__LAND_SLICE, k = LC__MIN(n - off, (uint64_t)LC__LAND_SLICE);
		int rc = job_queue(l, j, at + off, (const uint8_t *)src + off, k);
		if (!rc)
			continue;
		if (i == 0) {
			free(j); /* nothing queued: done never runs */
			return rc;
		}
		/* The slices never queued; the last of the others reports. */
		atomic_fetch_sub(&j->left, (uint32_t)(slices - i - 1));
		job_slice_done(j, rc);
		break;
	}
	return 0;
}

/* Decode-side accounting: the room's own count of what landed, each
 * granted byte once. */
static void land_count_range(lc__land_t *l, uint64_t offset, uint64_t length)
{
	lc__grant_landing_t o;
	int rc = lc__grant_landed(l->g, l->region, offset, length, &o);
	if (o.broke) {
		LC__COUNT(l->ctx, grant_intervals_capped);
		LC__WARN_PEER(
			"room %llu: its writes leave more gaps than grant_intervals_max allows "
			"(%s): D stops counting the room and fails it",
			(unsigned long long)l->room, lc_strerror(rc));
	}
	if (!o.twice)
		return;
	LC__COUNT_ADD(l->ctx, bytes_landed_twice, o.twice);
	if (o.first_twice)
		LC__WARN_PEER("room %llu: %llu bytes of region %u landed twice (a duplicate or "
			      "replayed write)",
			      (unsigned long long)l->room, (unsigned long long)o.twice, l->region);
}

void lc__land_block_done(lc__land_t *l, uint64_t at, uint64_t n)
{
	LC__COUNT_ADD(l->ctx, bytes_applied, n);
	if (l->g && n)
		land_count_range(l, l->offset + at, n);
}

void lc__land_done(lc__land_t *l, bool landed)
{
	if (landed) {
		LC__COUNT(l->ctx, writes_applied);
		LC__COUNT_ADD(l->ctx, bytes_applied, l->length);
		if (l->g && l->length)
			land_count_range(l, l->offset, l->length);
	}
	if (l->g)
		lc__grant_put(l->g);
	l->g = NULL;
}

void lc__land_release(lc__land_t *l)
{
	lc__land_done(l, false);
}

void lc__land_revoked(lc__land_t *l)
{
	LC__COUNT(l->ctx, writes_rejected_grant);
}

int lc__land_write(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		   const void *src, uint64_t length)
{
	lc__land_t l;
	int rc = lc__land_open(ctx, who, room, region, offset, length, &l);
	if (rc)
		return rc;
	rc = lc__land_copy(&l, 0, src, length);
	if (rc == LC_ERR_GRANT)
		lc__land_revoked(&l);
	lc__land_done(&l, rc == 0);
	return rc;
}

int lc__land_strided_span(lc_ctx_t *ctx, uint64_t room, uint64_t offset, uint64_t length,
			  uint32_t count, uint64_t dst_stride, uint64_t *span)
{
	uint64_t k = count > 1 ? count - 1 : 0;
	if (count > LC_WRITE_MAX_COUNT || (k && dst_stride < length) ||
	    (k && dst_stride > (UINT64_MAX - length) / k) ||
	    k * dst_stride + length > UINT64_MAX - offset) {
		LC__COUNT(ctx, writes_rejected_range);
		LC__WARN_PEER("rejected strided write for room %llu: %u blocks of %llu bytes %llu "
			      "apart at %llu (overlapping, overflowing or more than %u)",
			      (unsigned long long)room, count, (unsigned long long)length,
			      (unsigned long long)dst_stride, (unsigned long long)offset,
			      LC_WRITE_MAX_COUNT);
		return LC_ERR_OUT_OF_REGION;
	}
	*span = k * dst_stride + length;
	return 0;
}

int lc__land_strided(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		     const void *src, uint64_t length, uint32_t count, uint64_t src_stride,
		     uint64_t dst_stride)
{
	uint64_t span;
	if (count <= 1)
		return lc__land_write(ctx, who, room, region, offset, src, length);
	int rc = lc__land_strided_span(ctx, room, offset, length, count, dst_stride, &span);
	if (rc)
		return rc;
	lc__land_t l;
	if ((rc = lc__land_open(ctx, who, room, region, offset, span, &l)))
		return rc;
	for (uint32_t i = 0; i < count && !rc; i++) {
		rc = lc__land_copy(&l, (uint64_t)i * dst_stride,
				   (const uint8_t *)src + (uint64_t)i * src_stride, length);
		if (!rc)
			lc__land_block_done(&l, (uint64_t)i * dst_stride, length);
	}
	if (rc == LC_ERR_GRANT)
		lc__land_revoked(&l);
	if (!rc)
		LC__COUNT(ctx, writes_applied);
	lc__land_release(&l); /* the blocks were counted one by one */
	return rc;
}

int lc__source_find(lc_ctx_t *ctx, const void *addr, size_t len, lc__region_info_t *out)
{
	return lc__regions_find(&ctx->regions, addr, len, out);
}
