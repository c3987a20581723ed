/*
 * tcp sender's WRITES frames: a header, a table of the run's descriptors,
 * then the payloads straight from the caller's registered memory, described
 * as iovecs (up to MAX_IOV per sendmsg) from a lane's send cursor, and the
 * cursor moved by what a sendmsg took.
 */
#include <stdint.h>
#include <string.h>

#include "transport/tcp/send_int.h"

uint64_t lc__tcp_wire_bytes(const lc_write_t *w)
{
	return w->count > 1 ? (uint64_t)w->count * w->length : w->length;
}

/* Header and descriptor table of a frame carrying writes [idx, idx+n). */
static size_t encode_frame(uint8_t *p, const seg_t *s, size_t idx, size_t n, uint64_t seq)
{
	lc__tcp_encode_run(p, &(lc__tcp_run_hdr_t){(uint32_t)n, s->b->room, seq});
	for (size_t i = 0; i < n; i++) {
		const lc_write_t *w = &s->b->writes[idx + i];
		lc__tcp_desc_t d = {w->remote_region, w->count > 1 ? w->count : 0, w->remote_offset,
				    w->length, w->count > 1 ? w->remote_stride : 0};
		lc__tcp_encode_desc(p + LC__TCP_HDR_LEN + i * LC__TCP_DESC_LEN, &d);
	}
	return LC__TCP_HDR_LEN + n * LC__TCP_DESC_LEN;
}

/* Describe [p, p+len) of the frame being built, past its first st->skip
 * bytes, in tc->iov. */
static void build_piece(tcp_conn_t *tc, build_state_t *st, const void *p, size_t len)
{
	if (st->full || !len)
		return;
	if (st->skip >= len) {
		st->skip -= len;
		return;
	}
	p = (const uint8_t *)p + st->skip;
	len -= st->skip;
	st->skip = 0;
	if (st->niov == MAX_IOV) {
		st->full = true;
		return;
	}
	tc->iov[st->niov++] = (struct iovec){(void *)(uintptr_t)p, len};
	st->bytes += len;
}

/* Describe one frame (writes [idx, idx+n) of s, `off` bytes already sent)
 * in tc->iov, as far as the iovecs go (a strided write's blocks are one
 * iovec each, up to LC_WRITE_MAX_COUNT of them: such a frame may take
 * several sendmsgs). 0: nothing described (no room); 1: all of it; 2:
 * part of it, the sendmsg is full. */
static int build_frame(lane_t *ln, build_state_t *st, seg_t *s, size_t idx, size_t n, size_t off,
		       uint64_t seq)
{
	tcp_conn_t *tc = ln->tc;
	size_t tlen = LC__TCP_HDR_LEN + n * LC__TCP_DESC_LEN;
	if (st->niov + 2 > MAX_IOV || st->hused + tlen > HBUF_LEN ||
	    st->nf == LC__ARRAY_SIZE(tc->built))
		return 0;
	uint8_t *h = tc->hbuf + st->hused;
	encode_frame(h, s, idx, n, seq);
	st->skip = off;
	st->bytes = 0;
	build_piece(tc, st, h, tlen);
	for (size_t i = 0; i < n && !st->full; i++) {
		const lc_write_t *w = &s->b->writes[idx + i];
		const uint8_t *src = (const uint8_t *)(uintptr_t)w->local;
		if (w->count <= 1 || w->local_stride == w->length) { /* contiguous */
			build_piece(tc, st, src, lc__tcp_wire_bytes(w));
			continue;
		}
		for (uint32_t k = 0; k < w->count && !st->full; k++)
			build_piece(tc, st, src + (uint64_t)k * w->local_stride, w->length);
	}
	st->hused += tlen;
	st->total += st->bytes;
	tc->built[st->nf++] = (built_t){s, idx, n, off, st->bytes, !st->full};
	return st->full ? 2 : 1;
}

/* Describe the frames at the cursor in tc->iov; returns the frame count. */
size_t lc__tcp_lane_build(lane_t *ln, build_state_t *st)
{
	seg_t *s = ln->cur;
	size_t idx = ln->cur_idx, off = ln->cur_off;
	uint64_t seq = ln->seq_next;
	*st = (build_state_t){0};
	while (s) {
		if (off == 0 && lc__tcp_skip_frame(s, idx)) {
			s->end = idx; /* drop unsent writes of a completed batch */
			s = s->next;
			idx = s ? s->first : 0;
			continue;
		}
		size_t n = off ? ln->run_n : LC__MIN(s->end - idx, (size_t)LC__TCP_MAX_RUN);
		int built = build_frame(ln, st, s, idx, n, off, seq);
		if (built != 1)
			break;
		seq += n;
		idx += n;
		off = 0;
	}
	return st->nf;
}

/* w bytes of the built frames went out: move the cursor. */
void lc__tcp_lane_advance(lane_t *ln, size_t nf, size_t w)
{
	for (size_t i = 0; i < nf; i++) {
		built_t *f = &ln->tc->built[i];
		ln->cur = f->s;
		if (w < f->left || !f->whole) {
			ln->cur_idx = f->idx;
			ln->cur_off = f->off0 + LC__MIN(w, f->left);
			ln->run_n = f->n;
			return;
		}
		w -= f->left;
		ln->cur_idx = f->idx + f->n;
		ln->cur_off = 0;
		ln->seq_next += f->n;
	}
}
