/* Index resolution, run coalescing and descriptor emission. */
#include <errno.h>
#include <sys/types.h>

#include "core/planner.h"

void lc__xfer_whole_page(lc__xfer_t *x, const lc_buffer_t *b, uint32_t dst_region,
			 uint64_t dst_offset)
{
	x->src_base = b->base;
	x->src_stride = b->item_len;
	x->dst_base = dst_offset;
	x->dst_stride = b->item_len;
	x->bytes = b->item_len;
	x->dst_region = dst_region;
	x->skip = 0;
	x->count = 0;
	x->reserved = 0;
	x->block_src = x->block_dst = 0;
}

ssize_t lc__resolve(const lc__resolve_in_t *in, int64_t *out_src, int64_t *out_dst)
{
	size_t n = 0, src_rank = 0, dst_rank = 0;
	if (in->dst_begin > in->dst_count || in->positions > in->dst_count - in->dst_begin)
		return -ERANGE;
	/* The rank of dst_begin among D's masked positions. */
	if (in->dst_mask)
		for (size_t k = 0; k < in->dst_begin; k++)
			dst_rank += in->dst_mask[k] != 0;
	for (size_t j = 0; j < in->positions; j++) {
		size_t d = in->dst_begin + j;
		int src_ok = !in->src_mask || in->src_mask[j];
		int dst_ok = !in->dst_mask || in->dst_mask[d];
		int64_t s = 0, t = 0;
		if (src_ok) {
			if (in->src_mask) {
				if (src_rank >= in->src_local_count)
					return -EINVAL;
				s = in->src_local[src_rank];
			} else {
				s = in->src[j];
			}
		}
		if (dst_ok) {
			if (in->dst_mask) {
				if (dst_rank >= in->dst_local_count)
					return -EINVAL;
				t = in->dst_local[dst_rank];
			} else {
				t = in->dst[d];
			}
		}
		src_rank += in->src_mask && in->src_mask[j];
		dst_rank += in->dst_mask && in->dst_mask[d];
		if (!src_ok || !dst_ok)
			continue;
		if (s < 0 || t < 0)
			return -EINVAL;
		out_src[n] = s;
		out_dst[n] = t;
		n++;
	}
	return (ssize_t)n;
}

size_t lc__coalesce(const int64_t *src, const int64_t *dst, size_t n, lc__run_t *runs)
{
	size_t r = 0;
	if (!n)
		return 0;
	runs[0] = (lc__run_t){src[0], dst[0], 1};
	for (size_t i = 1; i < n; i++) {
		if (src[i] == src[i - 1] + 1 && dst[i] == dst[i - 1] + 1) {
			runs[r].n++;
		} else {
			r++;
			runs[r] = (lc__run_t){src[i], dst[i], 1};
		}
	}
	return r + 1;
}

static int whole_page(const lc__xfer_t *x)
{
	return x->count <= 1 && x->bytes == x->src_stride && x->bytes == x->dst_stride;
}

size_t lc__plan_count(const lc__plan_t *p, uint32_t begin, uint32_t end)
{
	const lc_layout_t *l = p->layout;
	size_t n = 0;
	end = LC__MIN(end, l->layers);
	for (uint32_t i = l->layer_start[begin]; i < l->layer_start[end]; i++) {
		uint32_t b = l->layer_buf[i];
		const lc__xfer_t *x = &p->xfer[b];
		int state = l->bufs[b].kind == LC_BUFFER_STATE;
		if (x->skip)
			continue;
		if (whole_page(x))
			n += state ? p->nstate_runs : p->nruns;
		else
			n += (size_t)(state ? p->slots : p->pages);
	}
	return n;
}

/* The hot loop: one descriptor per run. */
static size_t emit_runs(const lc__xfer_t *x, const lc__run_t *runs, size_t nruns, lc_write_t *out,
			uint64_t *bytes)
{
	const uint8_t *src = x->src_base;
	const uint64_t stride = x->src_stride, dst = x->dst_base;
	const uint32_t region = x->dst_region;
	uint64_t total = 0;
	for (size_t r = 0; r < nruns; r++) {
		uint64_t len = (uint64_t)runs[r].n * stride;
		out[r].local = src + (uint64_t)runs[r].src * stride;
		out[r].remote_offset = dst + (uint64_t)runs[r].dst * stride;
		out[r].length = len;
		out[r].remote_region = region;
		out[r].count = 0;
		out[r].local_stride = out[r].remote_stride = 0;
		total += len;
	}
	*bytes += total;
	return nruns;
}

static size_t emit_pages(const lc__xfer_t *x, const lc__run_t *runs, size_t nruns, lc_write_t *out,
			 uint64_t *bytes)
{
	size_t n = 0;
	for (size_t r = 0; r < nruns; r++)
		for (int64_t j = 0; j < runs[r].n; j++, n++) {
			out[n].local = x->src_base + (uint64_t)(runs[r].src + j) * x->src_stride;
			out[n].remote_offset =
				x->dst_base + (uint64_t)(runs[r].dst + j) * x->dst_stride;
			out[n].length = x->bytes;
			out[n].remote_region = x->dst_region;
			out[n].count = x->count;
			out[n].local_stride = x->block_src;
			out[n].remote_stride = x->block_dst;
		}
	*bytes += n * x->bytes * (x->count > 1 ? x->count : 1);
	return n;
}

size_t lc__plan_emit(const lc__plan_t *p, uint32_t begin, uint32_t end, lc_write_t *out,
		     uint64_t *bytes)
{
	const lc_layout_t *l = p->layout;
	size_t n = 0;
	*bytes = 0;
	end = LC__MIN(end, l->layers);
	for (uint32_t i = l->layer_start[begin]; i < l->layer_start[end]; i++) {
		uint32_t b = l->layer_buf[i];
		const lc__xfer_t *x = &p->xfer[b];
		int state = l->bufs[b].kind == LC_BUFFER_STATE;
		const lc__run_t *runs = state ? p->state_runs : p->runs;
		size_t nruns = state ? p->nstate_runs : p->nruns;
		if (x->skip || !nruns)
			continue;
		n += whole_page(x) ? emit_runs(x, runs, nruns, out + n, bytes)
				   : emit_pages(x, runs, nruns, out + n, bytes);
	}
	return n;
}

ssize_t lc__pair_slots(const int64_t *p, size_t np, const int64_t *d, size_t nd, int64_t *out_src,
		       int64_t *out_dst)
{
	size_t n = 0;
	if (!np || !nd)
		return 0;
	if (np != nd && np != 1)
		return -EINVAL;
	for (size_t i = 0; i < nd; i++) {
		int64_t s = np == 1 ? p[0] : p[i];
		if (s < 0 || d[i] < 0)
			continue;
		out_src[n] = s;
		out_dst[n] = d[i];
		n++;
	}
	return (ssize_t)n;
}

/* ---- heterogeneous TP (spec 6.7) ---- */

/* Units per rank, and the replica group size, of one side given the
 * distinct unit count h; row is the side's bytes per token row. */
static int tp_side(const lc_tp_side_t *s, uint64_t row, uint64_t h, uint64_t *local, uint64_t *rep)
{
	*local = row / s->unit_len;
	uint64_t global = *local * (uint64_t)s->tp_size;
	if (global % h || h % *local)
		return LC_ERR_GEOMETRY;
	*rep = global / h;
	return 0;
}

int lc_tp_fragment(const lc_tp_side_t *p, const lc_tp_side_t *d, lc_fragment_t *out)
{
	if (!p || !d || !out || p->tp_size < 1 || d->tp_size < 1 || p->tp_rank < 0 ||
	    d->tp_rank < 0 || p->tp_rank >= p->tp_size || d->tp_rank >= d->tp_size ||
	    !p->unit_len || !d->unit_len || !p->item_len || !d->item_len) {
		/* Recorded, not logged: P computes this from a REGISTER too. */
		lc__error_set(-EINVAL, "lc_tp_fragment: %s",
			      !p || !d || !out ? "a pointer is NULL"
			      : p->tp_size < 1 || d->tp_size < 1 || p->tp_rank < 0 ||
					      d->tp_rank < 0 || p->tp_rank >= p->tp_size ||
					      d->tp_rank >= d->tp_size
				      ? "tp_rank outside [0, tp_size) on one side"
				      : "unit_len and item_len must be set on both sides");
		return -EINVAL;
	}
	/* Token-major pages: the head-major split below applies to each of
	 * the page's token rows. */
	uint64_t rows = p->rows > 1 ? p->rows : 1, d_rows = d->rows > 1 ? d->rows : 1;
	if (rows != d_rows || rows > LC_WRITE_MAX_COUNT || p->item_len % rows || d->item_len % rows)
		return LC_ERR_GEOMETRY;
	uint64_t prow = p->item_len / rows, drow = d->item_len / rows;
	if (p->unit_len != d->unit_len || prow % p->unit_len || drow % d->unit_len)
		return LC_ERR_GEOMETRY;
	uint64_t gp = prow / p->unit_len * (uint64_t)p->tp_size;
	uint64_t gd = drow / d->unit_len * (uint64_t)d->tp_size;
	uint64_t h = LC__MIN(gp, gd), lp, ld, rp, rd;
	if (tp_side(p, prow, h, &lp, &rp) || tp_side(d, drow, h, &ld, &rd))
		return LC_ERR_GEOMETRY;
	if ((uint64_t)p->tp_rank % rp)
		return 0; /* another rank of its replica group sends */
	uint64_t p0 = (uint64_t)p->tp_rank / rp * lp, d0 = (uint64_t)d->tp_rank / rd * ld;
	uint64_t i0 = LC__MAX(p0, d0), i1 = LC__MIN(p0 + lp, d0 + ld);
	if (i0 >= i1)
		return 0;
	out->src_offset = (i0 - p0) * p->unit_len;
	out->dst_offset = (i0 - d0) * d->unit_len;
	out->bytes = (i1 - i0) * p->unit_len;
	out->dst_item_len = d->item_len;
	out->count = 1;
	out->reserved2 = 0;
	out->src_stride = out->dst_stride = 0;
	if (rows > 1 && (out->bytes != prow || out->bytes != drow)) {
		out->count = (uint32_t)rows;
		out->src_stride = prow;
		out->dst_stride = drow;
	} else if (rows > 1) {
		out->bytes *= rows; /* whole rows on both sides: one block */
	}
	return 1;
}
