/*
 * tcp:// receiver (D). A listener is one task on the context's I/O core,
 * over the listening socket and every accepted lane. It checks every write
 * of a run (region, range, room grant: the memory seam's lc__land_open) as
 * soon as the table has arrived, then reads the payloads straight into the
 * seam's destinations with one readv for the whole run, inside a grant
 * bracket; the next frame's header and table come in with the same readv
 * through a small staging buffer. So a batch of 64 writes of 64 KiB costs
 * about as many syscalls as one write of 4 MiB. Writes are acknowledged
 * only once their bytes are in place.
 *
 * Device memory (docs/gpu.md "Staging"): payloads bound for a device-kind
 * region go through the seam's pipeline (transport/land.h): read into the
 * listener's bounce slots, each landed by the region's copy engine while
 * the next is read from the wire. A write whose copies are still in flight
 * when its last byte arrived waits in its lane's in-order queue;
 * acknowledgements are cumulative, so the lane acknowledges nothing at or
 * past the oldest queued write until its copies completed (and a REJECT,
 * which acknowledges what precedes it, waits in that queue too).
 *
 * The listening socket, accepting and closing lanes and the listener task
 * are in listen.c; the state both files share in recv_int.h.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/tcp/recv_int.h"

/* ---- receiver: output (acks, rejects, hello replies) ---- */

static size_t out_free(const rlane_t *r)
{
	return (OUT_CAP - r->out_len) / LC__TCP_CTRL_LEN;
}

static void out_push(rlane_t *r, const lc__tcp_ctrl_t *f)
{
	lc__tcp_encode_ctrl(r->out + r->out_len, f);
	r->out_len += LC__TCP_CTRL_LEN;
}

void lc__tcp_rlane_flush(rlane_t *r)
{
	while (r->out_len && r->writable) {
		ssize_t n = send(r->fd, r->out, r->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r->writable = false;
			if (errno != EAGAIN) {
				r->peer_gone = errno == EPIPE || errno == ECONNRESET;
				r->dead = true;
			}
			return;
		}
		memmove(r->out, r->out + n, r->out_len - (size_t)n);
		r->out_len -= (size_t)n;
	}
	if (r->paused && out_free(r) >= LC__TCP_MAX_RUN + 2)
		r->paused = false;
}

/* Queue a cumulative ACK if anything is unacknowledged. The seam counted
 * each write as it landed, so a sender seeing its completion also sees the
 * counters. The out buffer always
 * keeps a slot for a REJECT of every write of the run still to come. */
static void rlane_ack(rlane_t *r)
{
	size_t reserve = (r->phase == R_RUN ? r->run_n - r->run_i : 0) + r->q.n;
	/* Nothing at or past the oldest queued write: its bytes are not in
	 * place yet. */
	uint64_t upto = r->q.n ? lc__landq_at(&r->q, 0)->seq : r->seq;
	r->unacked_bytes = 0;
	if (upto <= r->acked || out_free(r) < reserve + 1)
		return;
	out_push(r, &(lc__tcp_ctrl_t){.type = LC__TCP_ACK, .a = upto});
	r->acked = upto;
}

/* ---- receiver: device landings ---- */

static bool queue_room(const rlane_t *r)
{
	return r->q.n + LC__TCP_MAX_RUN + 1 <= LANDQ_CAP;
}

/* Whether the lane must not read or consume now. */
bool lc__tcp_rlane_held(const rlane_t *r)
{
	return r->slot_wait || !queue_room(r);
}

/* Finish a write that will not land (rejected, revoked, a copy failed):
 * its landing is done now, or when its last copy completed. */
static void write_drop(rwrite_t *w, int code, int detail)
{
	if (!w->inflight)
		lc__land_done(&w->land, false);
	w->dst = NULL;
	w->code = code;
	w->detail = detail;
}

static void revoked_run(rlane_t *r, lc__grant_room_t *g);

/* Queue the copy of the lane's filling slot (full, or its write is all
 * read). */
static void fill_flush(rlane_t *r)
{
	rwrite_t *w = &r->run[r->run_i];
	int rc = lc__bounce_flush(r->fill, w->dst ? &w->land : NULL);
	r->fill = NULL;
	if (rc > 0)
		w->inflight++;
	else if (rc == LC_ERR_GRANT)
		revoked_run(r, w->land.g);
	else if (rc)
		write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
}

/* Complete the queued writes at the head whose copies are all done, in
 * order (the seam counted them): send their REJECTs, then acknowledge. */
static void queue_complete(rlane_t *r)
{
	bool any = false;
	lc__landq_ent_t e;
	while (lc__landq_pop(&r->q, &e)) {
		any = true;
		if (!e.failed && !e.code)
			continue;
		/* Room was reserved for it (rlane_ack, frame_from_stage). */
		out_push(r, &(lc__tcp_ctrl_t){
				    .type = LC__TCP_REJECT,
				    .status = e.code ? e.code : LC_ERR_IO,
				    .a = e.seq,
				    .b = (uint64_t)(e.code ? e.detail : LC__TCP_REJECT_CHECK)});
		r->acked = e.seq + 1;
	}
	if (any) {
		rlane_ack(r);
		lc__tcp_rlane_flush(r);
	}
}

/* One completed copy of lane r's write seq: the write being received, or
 * one in the queue. */
static void copy_reaped(void *lane, uint64_t seq, int status)
{
	rlane_t *r = lane;
	if (!(r->phase == R_RUN && r->run_i < r->run_n && seq == r->seq)) {
		lc__landq_reaped(&r->q, seq, status);
		return;
	}
	rwrite_t *w = &r->run[r->run_i];
	w->inflight--;
	if (status && w->dst) {
		LC__WARN("tcp: room %llu: device copy into region %u failed: %s",
			 (unsigned long long)r->room, w->region, lc_strerror(status));
		write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
	} else if (!w->dst && !w->inflight && w->land.g) {
		lc__land_done(&w->land, false); /* deferred by write_drop */
	}
}

/* I/O thread: reap completed copies; lanes stopped for a slot go on. */
void lc__tcp_slots_reap(tcp_listener_t *tl)
{
	bool free_slot;
	bool freed = lc__bounces_reap(&tl->bounces, copy_reaped, &free_slot);
	if (!freed && !free_slot)
		return;
	for (rlane_t *r = tl->lanes; r; r = r->next) {
		if (freed)
			queue_complete(r);
		if (r->slot_wait) {
			r->slot_wait = false;
			r->readable = true; /* its staged bytes too; a readv says EAGAIN */
		}
	}
}

/* The slot the run's head write (from byte skip of it) is read into: the
 * lane's filling one, or a free one; NULL when every slot is busy
 * (slot_wait: a completion wakes the lane) or *nomem. */
static lc__bounce_t *lane_bounce(rlane_t *r, uint64_t skip, bool *nomem)
{
	*nomem = false;
	if (r->fill)
		return r->fill;
	*nomem = lc__landq_make(&r->q, LANDQ_CAP) != 0;
	if (!*nomem)
		r->fill = lc__bounce_get(&r->tl->bounces, r, r->seq, skip, nomem);
	r->slot_wait = !r->fill && !*nomem;
	return r->fill;
}

/* ---- receiver: writes ---- */

/* Land n payload bytes at byte `at` of w's payload on the wire (a strided
 * write's bytes go to their blocks). */
static int land_stream(rwrite_t *w, uint64_t at, const uint8_t *src, uint64_t n)
{
	if (w->count <= 1)
		return lc__land_copy(&w->land, at, src, n);
	while (n) {
		uint64_t blk = at / w->blen, in = at % w->blen;
		uint64_t k = LC__MIN(n, w->blen - in);
		int rc = lc__land_copy(&w->land, blk * w->stride + in, src, k);
		if (rc)
			return rc;
		at += k;
		src += k;
		n -= k;
	}
	return 0;
}

/* All of w's bytes are in place: count it (a strided write once, its
 * blocks' bytes and ranges each) and release its grant. */
static void land_finish(rwrite_t *w)
{
	if (w->count <= 1) {
		lc__land_done(&w->land, true);
		return;
	}
	for (uint32_t k = 0; k < w->count; k++)
		lc__land_block_done(&w->land, (uint64_t)k * w->stride, w->blen);
	LC__COUNT(w->land.ctx, writes_applied);
	lc__land_release(&w->land);
}

/* Write run_i is complete (in place, or discarded). */
static void write_done(rlane_t *r)
{
	rwrite_t *w = &r->run[r->run_i];
	if (r->fill) /* a slot the write's last bytes did not reach (dropped) */
		fill_flush(r);
	if (w->inflight || (r->q.n && !w->dst)) {
		/* Its copies are in flight, or its REJECT would acknowledge a
		 * write whose copies are: completed in order by queue_complete.
		 * A dropped write's landing is done already (g NULL) unless
		 * copies are in flight. */
		lc__landq_push(&r->q, &(lc__landq_ent_t){.seq = r->seq,
							 .len = w->len,
							 .land = w->land,
							 .inflight = w->inflight,
							 .code = w->dst ? 0 : w->code,
							 .detail = w->detail});
	} else if (w->dst) {
		land_finish(w);
		r->unacked_bytes += w->len;
	} else {
		out_push(r, &(lc__tcp_ctrl_t){.type = LC__TCP_REJECT,
					      .status = w->code,
					      .a = r->seq,
					      .b = (uint64_t)w->detail});
		r->acked = r->seq + 1; /* a REJECT acknowledges everything before it */
	}
	r->seq++;
	r->run_i++;
	r->done = 0;
	if (r->unacked_bytes >= ACK_BYTES) {
		rlane_ack(r);
		lc__tcp_rlane_flush(r);
	}
}

/* Complete every finished write at the head of the run. */
static void run_advance(rlane_t *r)
{
	while (r->phase == R_RUN && r->run_i < r->run_n && r->done == r->run[r->run_i].len)
		write_done(r);
	if (r->phase == R_RUN && r->run_i == r->run_n)
		r->phase = R_HDR;
}

/* The grant was revoked while the payload arrived: land nothing more. */
static void revoked_midway(rlane_t *r, rwrite_t *w)
{
	(void)r;
	lc__land_revoked(&w->land);
	write_drop(w, LC_ERR_GRANT, LC__TCP_REJECT_REVOKED);
}

/* Every write of the run still to land under grant entry g is revoked. */
static void revoked_run(rlane_t *r, lc__grant_room_t *g)
{
	const rwrite_t *first = &r->run[r->run_i];
	uint32_t n = 0;
	LC__WARN_PEER("tcp: grant of room %llu revoked during a write to region %u [%llu, +%llu); "
		      "discarding the rest of the run",
		      (unsigned long long)r->room, first->region, (unsigned long long)first->offset,
		      (unsigned long long)first->len);
	for (uint32_t i = r->run_i; i < r->run_n; i++, n++)
		if (r->run[i].dst && r->run[i].land.g == g)
			revoked_midway(r, &r->run[i]);
	LC__DEBUG("tcp: %u writes of the run discarded", n);
}

/* A WRITES header and its table, complete in the stage: validate it all,
 * then check every write against regions and grants. */
static int on_run(rlane_t *r, const uint8_t *p)
{
	lc__tcp_run_hdr_t h;
	lc__tcp_decode_run(p, &h);
	if (h.seq != r->seq)
		return LC_ERR_PROTO;
	uint64_t span[LC__TCP_MAX_RUN];
	for (uint32_t i = 0; i < h.n; i++) {
		lc__tcp_desc_t d;
		lc__tcp_decode_desc(p + LC__TCP_HDR_LEN + i * LC__TCP_DESC_LEN, &d);
		uint64_t bytes = lc__tcp_desc_bytes(&d);
		if (bytes > LC__TCP_MAX_WRITE || (d.count <= 1 && d.stride))
			return LC_ERR_PROTO;
		/* A strided shape that breaks the rules (count over the cap,
		 * overlapping blocks, a span that overflows) is a malformed
		 * frame: the span check counts and logs it, the lane closes. */
		span[i] = d.length;
		if (d.count > 1 && lc__land_strided_span(r->tl->ctx, h.room, d.offset, d.length,
							 d.count, d.stride, &span[i]))
			return LC_ERR_PROTO;
		r->run[i] = (rwrite_t){.region = d.region,
				       .offset = d.offset,
				       .len = bytes,
				       .count = d.count > 1 ? d.count : 1,
				       .blen = d.length,
				       .stride = d.count > 1 ? d.stride : 0};
	}
	for (uint32_t i = 0; i < h.n; i++) {
		rwrite_t *w = &r->run[i];
		if (w->len == 0) { /* lands nothing; the generic layer never sends one */
			w->dst = (uint8_t *)r->stage;
			w->land = (lc__land_t){.ctx = r->tl->ctx};
			continue;
		}
		/* A strided write's whole span is checked at once. */
		w->code = lc__land_open(r->tl->ctx, r->who, h.room, w->region, w->offset, span[i],
					&w->land);
		w->detail = LC__TCP_REJECT_CHECK;
		w->sdev = !w->code && w->land.dev && w->count > 1;
		w->dev = !w->code && w->land.dev && !w->sdev;
		w->dst = w->code ? NULL : w->land.dev ? w->land.dev : w->land.dst;
	}
	r->room = h.room;
	r->wrote = true;
	r->run_n = h.n;
	r->run_i = 0;
	r->done = 0;
	r->phase = R_RUN;
	run_advance(r);
	return 0;
}

/* ---- receiver: caps on authenticated lanes ---- */

/* The authenticated lane to close for a newcomer, among those of `key`
 * (NULL: all): the least recently active one that is not busy and has been
 * quiet for EVICT_QUIET_NS; NULL when none may go. *n counts them. */
static rlane_t *evictable(tcp_listener_t *tl, const rlane_t *except, const uint8_t *key,
			  uint8_t len, uint64_t now, size_t *n)
{
	rlane_t *v = NULL;
	*n = 0;
	for (rlane_t *r = tl->lanes; r; r = r->next) {
		if (r == except || r->phase == R_HELLO || r->dead ||
		    (key && !lc__tcp_same_peer(r, key, len)))
			continue;
		++*n;
		if (lc__tcp_rlane_busy(r) || now < r->active_ns + EVICT_QUIET_NS)
			continue;
		if (!v || r->active_ns < v->active_ns)
			v = r;
	}
	return v;
}

bool lc__tcp_lane_admit(rlane_t *r)
{
	tcp_listener_t *tl = r->tl;
	uint64_t now = lc__now_ns();
	size_t same, all;
	rlane_t *v_same = evictable(tl, r, r->peer, r->peer_len, now, &same);
	rlane_t *v_all = evictable(tl, r, NULL, 0, now, &all);
	bool addr_full = same >= tl->lanes_per_addr;
	if (!addr_full && all < tl->lanes_max)
		return true;
	rlane_t *v = addr_full ? v_same : v_all;
	const char *cap = addr_full ? "tcp_lanes_per_addr" : "tcp_lanes_max";
	size_t held = addr_full ? same : all;
	if (!v) {
		LC__COUNT(tl->ctx, lanes_refused_cap);
		tl->refused++;
		if (lc__tcp_log_due(&tl->refuse_log_ns, now))
			LC__WARN("tcp: refusing an authenticated lane: %s (%zu) reached and every "
				 "lane is busy or active (%llu refused so far)",
				 cap, held, (unsigned long long)tl->refused);
		return false;
	}
	LC__COUNT(tl->ctx, lanes_evicted);
	tl->lanes_evicted++;
	if (lc__tcp_log_due(&tl->evict_log_ns, now))
		LC__WARN("tcp: %s (%zu) reached: closing the least recently active lane (quiet "
			 "%llu ms, nothing in flight) for a new one (%llu closed so far)",
			 cap, held, (unsigned long long)((now - v->active_ns) / 1000000),
			 (unsigned long long)tl->lanes_evicted);
	v->dead = true; /* closed by listener_service, this round or the next */
	tl->reap = true;
	return true;
}

static int on_hello(rlane_t *r, const uint8_t *p)
{
	lc__tcp_ctrl_t f;
	lc__tcp_decode_ctrl(p, &f);
	if (f.type != LC__TCP_HELLO || (f.status & ~LC__TCP_HELLO_TOKEN))
		return LC_ERR_PROTO;
	bool has = f.status & LC__TCP_HELLO_TOKEN;
	uint8_t token[LC_TOKEN_LEN];
	lc__put_u64(token, f.a);
	lc__put_u64(token + 8, f.b);
	bool ok = lc__ctx_token_accepted(r->tl->ctx, has ? token : NULL, has, &r->who);
	bool admitted = ok && lc__tcp_lane_admit(r);
	int status = !ok ? LC_ERR_AUTH : admitted ? 0 : -EBUSY;
	out_push(r, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO_REPLY, .status = status});
	lc__tcp_rlane_flush(r);
	if (!ok) {
		LC__COUNT(r->tl->ctx, conns_rejected_auth);
		LC__WARN_PEER("tcp: rejected a connection: %s",
			      has ? "unknown or revoked session token" : "no session token");
		return LC_ERR_AUTH;
	}
	if (!admitted)
		return -EBUSY; /* counted and logged by lc__tcp_lane_admit */
	r->phase = R_HDR;
	r->active_ns = lc__now_ns();
	return 0;
}

/* ---- receiver: reading ---- */

/* Payload bytes of write run_i that arrived in the staging buffer. */
static void payload_from_stage(rlane_t *r, size_t n)
{
	rwrite_t *w = &r->run[r->run_i];
	int rc = w->dst ? land_stream(w, r->done, r->stage + r->st_pos, n) : 0;
	/* A device copy that failed is LC_ERR_IO, not a revoke: the write
	 * is refused with its own cause and the run goes on. */
	if (rc == LC_ERR_GRANT)
		revoked_run(r, w->land.g);
	else if (rc)
		write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
	r->done += n;
	r->st_pos += n;
	run_advance(r);
}

/* Handle one frame at st_pos if it is complete. Returns 1 if consumed,
 * 0 if more bytes are needed (or the lane must wait for its output), <0 to
 * close the lane. */
static int frame_from_stage(rlane_t *r)
{
	size_t avail = r->st_len - r->st_pos, need = LC__TCP_HDR_LEN;
	const uint8_t *p = r->stage + r->st_pos;
	if (avail >= 4 && !lc__tcp_prefix_ok(p))
		return LC_ERR_PROTO;
	if (avail < LC__TCP_HDR_LEN)
		return 0;
	bool hello = r->phase == R_HELLO;
	if (hello != (p[2] == LC__TCP_HELLO) || (!hello && p[2] != LC__TCP_WRITES))
		return LC_ERR_PROTO;
	uint32_t n = hello ? 0 : lc__get_u32(p + 4);
	if (!hello && (n == 0 || n > LC__TCP_MAX_RUN))
		return LC_ERR_PROTO;
	need += (size_t)n * LC__TCP_DESC_LEN;
	if (avail < need)
		return 0;
	if (out_free(r) < n + 2 + r->q.n)
		lc__tcp_rlane_flush(r);
	if (out_free(r) < n + 2 + r->q.n) {
		r->paused = true; /* the sender is not reading: stop reading too */
		return 0;
	}
	int rc = hello ? on_hello(r, p) : on_run(r, p);
	r->st_pos += need;
	return rc < 0 ? rc : 1;
}

/* Consume the staging buffer. <0: close the lane. */
static int consume_stage(rlane_t *r)
{
	int rc = 1;
	while (rc > 0 && !lc__tcp_rlane_held(r)) {
		size_t avail = r->st_len - r->st_pos;
		if (r->phase == R_RUN) {
			if (!avail)
				break;
			payload_from_stage(r, LC__MIN(avail, r->run[r->run_i].len - r->done));
		} else {
			rc = frame_from_stage(r);
		}
	}
	memmove(r->stage, r->stage + r->st_pos, r->st_len - r->st_pos);
	r->st_len -= r->st_pos;
	r->st_pos = 0;
	return rc < 0 ? rc : 0;
}

/* iovecs for the rest of the run: payloads straight into place (the seam's
 * direct destinations) under one grant bracket, rejected ones into scratch,
 * then (if the run ends within them) the staging buffer for the next
 * frames. Returns the count; *g is the landing whose bracket covers them
 * all, or NULL. */
static int run_iov(rlane_t *r, struct iovec *iov, const lc__land_t **g)
{
	int n = 0;
	bool whole = true;
	*g = NULL;
	for (uint32_t i = r->run_i; i < r->run_n && whole; i++) {
		if (n >= READ_IOV - 2) { /* out of iovecs: next readv */
			whole = false;
			break;
		}
		rwrite_t *w = &r->run[i];
		uint64_t skip = i == r->run_i ? r->done : 0, left = w->len - skip;
		if (!left)
			continue;
		if (w->dev && w->dst) { /* bounced, landed by run_distribute */
			bool nomem;
			whole = false;
			if (i != r->run_i)
				break; /* its slot is taken once it heads the run */
			lc__bounce_t *s = lane_bounce(r, skip, &nomem);
			if (nomem) { /* no memory for the pipeline */
				write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
				iov[n++] = (struct iovec){r->tl->scratch,
							  LC__MIN(left, (uint64_t)SCRATCH_LEN)};
			} else if (s) {
				iov[n++] = (struct iovec){
					s->buf + s->fill,
					LC__MIN(left, (uint64_t)(LC__BOUNCE_LEN - s->fill))};
			}
			break;
		}
		if (w->sdev && w->dst) { /* into scratch, landed by run_distribute */
			whole = false;
			iov[n++] = (struct iovec){r->tl->scratch,
						  LC__MIN(left, (uint64_t)SCRATCH_LEN)};
			break;
		}
		if (w->dst && *g && w->land.g != (*g)->g) {
			whole = false; /* another grant entry: next readv */
			break;
		}
		if (w->dst && w->count > 1) { /* each block straight into place */
			*g = &w->land;
			for (uint64_t at = skip; at < w->len;) {
				if (n == READ_IOV - 1) {
					whole = false;
					break;
				}
				uint64_t blk = at / w->blen, in = at % w->blen;
				iov[n++] =
					(struct iovec){w->dst + blk * w->stride + in, w->blen - in};
				at += w->blen - in;
			}
			continue;
		}
		if (w->dst) {
			*g = &w->land;
			iov[n++] = (struct iovec){w->dst + skip, left};
			continue;
		}
		iov[n++] = (struct iovec){r->tl->scratch, LC__MIN(left, (uint64_t)SCRATCH_LEN)};
		whole = left <= SCRATCH_LEN;
	}
	if (whole)
		iov[n++] = (struct iovec){r->stage + r->st_len, STAGE_READ};
	return n;
}

/* Account `got` bytes read into iov[0..n) in run order. */
static void run_distribute(rlane_t *r, const struct iovec *iov, int n, size_t got)
{
	for (int k = 0; k < n && got; k++) {
		if (iov[k].iov_base == r->stage + r->st_len) {
			r->st_len += got; /* the next frames, past the run's end */
			return;
		}
		size_t t = LC__MIN(got, iov[k].iov_len);
		rwrite_t *w = &r->run[r->run_i];
		if (w->sdev && w->dst && iov[k].iov_base == (void *)r->tl->scratch) {
			int rc = land_stream(w, r->done, r->tl->scratch, t);
			if (rc == LC_ERR_GRANT)
				revoked_run(r, w->land.g);
			else if (rc)
				write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
		}
		r->done += t;
		if (r->fill && iov[k].iov_base == r->fill->buf + r->fill->fill) {
			r->fill->fill += t;
			if (r->fill->fill == LC__BOUNCE_LEN || r->done == w->len)
				fill_flush(r);
		}
		got -= t;
		run_advance(r);
	}
}

/* One readv: the rest of the run straight into place, plus the next
 * frame(s) into staging. Outside a run: staging only. *asked: the bytes
 * the readv could have taken. */
static ssize_t rlane_read(rlane_t *r, size_t *asked)
{
	struct iovec iov[READ_IOV];
	const lc__land_t *g = NULL;
	int n = 1;
	iov[0] = (struct iovec){r->stage + r->st_len, STAGE_READ};
	if (r->phase == R_RUN) {
		n = run_iov(r, iov, &g);
		while (g && !lc__land_enter(g)) {
			revoked_run(r, g->g);
			n = run_iov(r, iov, &g);
		}
	}
	if (!n) { /* waits for a bounce slot */
		errno = EAGAIN;
		return -2;
	}
	*asked = 0;
	for (int i = 0; i < n; i++)
		*asked += iov[i].iov_len;
	ssize_t got = readv(r->fd, iov, n);
	if (g)
		lc__land_exit(g);
	if (got > 0)
		run_distribute(r, iov, n, (size_t)got);
	return got;
}

/* A lane breaking the protocol is counted, logged and closed. */
static void rlane_bad(rlane_t *r, int rc)
{
	r->dead = true;
	if (rc != LC_ERR_PROTO)
		return; /* LC_ERR_AUTH, -EBUSY: counted and logged by on_hello */
	LC__COUNT(r->tl->ctx, frames_malformed);
	LC__WARN_PEER("tcp: malformed frame after %llu writes on a lane; closing it",
		      (unsigned long long)r->seq);
}

void lc__tcp_rlane_pump(rlane_t *r)
{
	size_t budget = PUMP_BUDGET;
	int rc = 0;
	bool read_some = false;
	while (r->readable && !r->paused && !lc__tcp_rlane_held(r) && budget) {
		rc = consume_stage(r);
		if (rc < 0 || r->paused || lc__tcp_rlane_held(r))
			break;
		size_t asked;
		ssize_t got = rlane_read(r, &asked);
		if (got == -2)
			break; /* stays readable: slots_reap pumps it again */
		if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
			r->peer_gone = got == 0 || errno == ECONNRESET;
			r->dead = true;
			break;
		}
		if (got < 0) {
			r->readable = errno == EINTR;
		} else {
			budget -= LC__MIN(budget, (size_t)got);
			read_some = true;
			/* A short read drained the socket (DRAINED_MAX); bytes
			 * arriving later raise a new edge. But a close that was
			 * on this edge raises none: read on to the 0. */
			if ((size_t)got < asked && (size_t)got <= DRAINED_MAX && !r->hup)
				r->readable = false;
		}
	}
	if (read_some) /* the idle deadline and eviction order (listen.c) */
		r->active_ns = lc__now_ns();
	if (!r->dead && rc >= 0)
		rc = consume_stage(r);
	if (rc < 0)
		rlane_bad(r, rc);
	rlane_ack(r);
	lc__tcp_rlane_flush(r);
}
