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
 * region are read into host bounce slots of the listener and landed by the
 * region's copy engine asynchronously (lc__land_copy_async), so that the
 * copy of slot k runs while slot k+1 is read from the wire. A write whose
 * copies are still in flight when its last byte arrived waits in its
 * lane's queue of pending writes; acknowledgements are cumulative, so the
 * lane acknowledges nothing at or past the oldest pending write until its
 * copies completed (and a REJECT, which acknowledges what precedes it,
 * waits in that queue too). Each copy holds the room's grant bracket, so
 * lc_grant_revoke waits for the room's copies in flight.
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

#include "transport/stage.h"
#include "transport/tcp/tcp_int.h"

/* How much one read may put in the staging buffer (which also holds a
 * partial header and table): small, so that payload bytes that land there
 * and are copied again cost little; large enough to carry a frame's table
 * and dozens of tiny writes per syscall. */
#define STAGE_READ (4u << 10)
#define STAGE_CAP (STAGE_READ + LC__TCP_HDR_LEN + LC__TCP_MAX_RUN * LC__TCP_DESC_LEN)
#define SCRATCH_LEN (64u << 10)
/* Device-kind payloads are read into host bounce slots, each landed by the
 * seam's copy engine with one copy when full or at the write's end: large,
 * so that the hand-off to the engine is paid per MiB, not per 64 KiB; a
 * few of them, so that copies overlap the reads of the next slots. */
#define BOUNCE_LEN (1u << 20)
#define NSLOTS 8
/* Pending writes per lane (copies in flight, or queued behind such); a
 * lane reads on only while a whole run more would fit. */
#define PEND_CAP (2 * LC__TCP_MAX_RUN + NSLOTS)
/* Bound on waiting for a closing lane's copies in flight. */
#define CLOSE_WAIT_NS 5000000000ull
/* Acknowledge at least every ACK_BYTES applied, and whenever the socket
 * runs dry; bytes one lane may read before others get a turn. */
#define ACK_BYTES (1u << 20)
#define PUMP_BUDGET (16u << 20)
#define OUT_FRAMES (LC__TCP_MAX_RUN + 16u)
#define OUT_CAP (OUT_FRAMES * LC__TCP_CTRL_LEN)
#define MAX_ACCEPTED 1024
/* Connections accepted per event on the listening socket (level-triggered:
 * the rest come next round), well under tcp_pending_per_addr's default, so
 * that a real peer's HELLO is read before newer connections can make it
 * the oldest pending one. */
#define ACCEPT_BURST 16
/* What an fd of a listener task is. */
#define LISTEN_TAG 0
#define LANE_TAG 1
/* iovecs per readv: a run's payloads, a strided write's blocks one each. */
#define READ_IOV 1024

/* ====================================================================
 * Receiver state.
 *
 * Threading: the listener's I/O thread owns every rlane and the scratch
 * buffer; listen() and listener_close() touch them only before the thread
 * starts and after it is joined. Shared state is reached only through the
 * context's thread-safe helpers (the memory seam, counters, tokens). The
 * one exception is a bounce slot's copy completion, on the copy engine's
 * thread: it writes only the slot's status, state and in_cb (atomics),
 * then kicks the task; the I/O thread reaps DONE slots (slots_reap).
 * ==================================================================== */

enum rphase { R_HELLO, R_HDR, R_RUN };

/* One write of the run being received. */
typedef struct rwrite {
	uint8_t *dst;      /* NULL: rejected, the payload is discarded */
	lc__land_t land;   /* the seam's landing, until the payload is in place */
	bool dev;          /* device memory: dst is land.dev, never read into; the
			  * payload bounces through a slot and lc__land_copy_async */
	uint32_t inflight; /* its copies queued and not reaped */
	uint32_t region;
	uint64_t offset, len; /* len: payload bytes on the wire */
	/* A strided write (count > 1): count blocks of blen bytes, stride
	 * apart from offset at D; its landing spans them all. Into device
	 * memory it is landed block by block synchronously (sdev): its bytes
	 * are read into scratch and copied by lc__land_copy, no bounce slot. */
	uint32_t count;
	uint64_t blen, stride;
	bool sdev;
	int code, detail; /* the rejection, when dst is NULL */
} rwrite_t;

/* A bounce slot: FREE -> FILLING (a lane reads a dev write's bytes into
 * it) -> COPYING (lc__land_copy_async queued) -> DONE (the copy engine's
 * thread: status set) -> FREE (reaped by the I/O thread). */
enum { SLOT_FREE, SLOT_FILLING, SLOT_COPYING, SLOT_DONE };
typedef struct bslot {
	struct tcp_listener *tl;
	uint8_t *buf;    /* BOUNCE_LEN */
	struct rlane *r; /* the lane, NULL once it closed (I/O thread) */
	uint64_t seq;    /* the write it lands (the lane's numbering) */
	uint64_t at;     /* byte of the write at buf[0] */
	size_t fill;
	_Atomic int state;
	_Atomic int in_cb; /* the copy's callback is running */
	int status;        /* set before DONE */
	lc__land_async_t a;
} bslot_t;

/* A write fully received whose completion waits: for its device copies,
 * or behind an older one that does. In lane order (seq). */
typedef struct pend {
	uint64_t seq, len;
	lc__land_t land; /* land.g NULL: nothing left to finish */
	uint32_t inflight;
	bool failed;      /* a copy failed */
	int code, detail; /* a rejection to send, when code */
} pend_t;

typedef struct rlane {
	struct tcp_listener *tl;
	int fd;
	struct rlane *next, *prev;
	enum rphase phase;
	bool readable, writable, paused, dead;
	uint64_t hello_deadline_ns;
	uint8_t peer[16]; /* source address (4 or 16 bytes), for the pending caps */
	uint8_t peer_len;
	/* the WRITES frame being received: write run_i has `done` bytes */
	uint64_t room;
	uint32_t run_n, run_i;
	uint64_t done;
	rwrite_t run[LC__TCP_MAX_RUN];
	/* acknowledgement state */
	uint64_t seq;   /* writes processed */
	uint64_t acked; /* writes acknowledged (queued in out) */
	uint64_t unacked_bytes;
	uint8_t stage[STAGE_CAP];
	size_t st_pos, st_len;
	uint8_t out[OUT_CAP];
	size_t out_len;
	lc__io_fd_t iofd;
	/* device landings */
	struct bslot *fill; /* the slot run_i's bytes are read into, or NULL */
	bool slot_wait;     /* stopped: every slot busy */
	pend_t *pend;       /* PEND_CAP, made at the lane's first device write */
	uint32_t pend_head, pend_n;
} rlane_t;

typedef struct tcp_listener {
	lc_listener_t *l;
	lc_ctx_t *ctx;
	int fd;
	lc__io_task_t task; /* on the context's I/O core */
	lc__io_fd_t lfd;    /* the listening socket (tag LISTEN_TAG) */
	rlane_t *lanes;     /* doubly linked */
	size_t nlanes;
	uint64_t hello_ns;
	size_t pending_max, pending_per_addr; /* lanes before their HELLO */
	uint64_t evicted;
	int sockbuf;
	uint8_t scratch[SCRATCH_LEN];
	bslot_t slots[NSLOTS]; /* device-kind payloads; buffers made at first use */
	bool slots_made;
} tcp_listener_t;

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

static void rlane_flush(rlane_t *r)
{
	while (r->out_len && r->writable) {
		ssize_t n = send(r->fd, r->out, r->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r->writable = false;
			if (errno != EAGAIN)
				r->dead = true;
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
	size_t reserve = (r->phase == R_RUN ? r->run_n - r->run_i : 0) + r->pend_n;
	/* Nothing at or past the oldest pending write: its bytes are not in
	 * place yet. */
	uint64_t upto = r->pend_n ? r->pend[r->pend_head].seq : r->seq;
	r->unacked_bytes = 0;
	if (upto <= r->acked || out_free(r) < reserve + 1)
		return;
	out_push(r, &(lc__tcp_ctrl_t){.type = LC__TCP_ACK, .a = upto});
	r->acked = upto;
}

/* ---- receiver: device landings ---- */

static bool pend_room(const rlane_t *r)
{
	return r->pend_n + LC__TCP_MAX_RUN + 1 <= PEND_CAP;
}

/* Whether the lane must not read or consume now. */
static bool rlane_held(const rlane_t *r)
{
	return r->slot_wait || !pend_room(r);
}

static pend_t *pend_at(rlane_t *r, uint32_t k)
{
	return &r->pend[(r->pend_head + k) % PEND_CAP];
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

/* The copy engine's thread: a slot's copy completed. */
static void slot_copied(void *arg, int status)
{
	bslot_t *s = arg;
	atomic_store(&s->in_cb, 1);
	s->status = status;
	atomic_store(&s->state, SLOT_DONE);
	lc__io_kick(&s->tl->task);
	atomic_store(&s->in_cb, 0);
}

/* A free slot (buffers made at first use), or NULL. */
static bslot_t *slot_get(tcp_listener_t *tl)
{
	if (!tl->slots_made) {
		for (int i = 0; i < NSLOTS; i++) {
			tl->slots[i].tl = tl;
			if (!tl->slots[i].buf && !(tl->slots[i].buf = malloc(BOUNCE_LEN)))
				return NULL;
		}
		tl->slots_made = true;
	}
	for (int i = 0; i < NSLOTS; i++)
		if (atomic_load(&tl->slots[i].state) == SLOT_FREE)
			return &tl->slots[i];
	return NULL;
}

static void revoked_run(rlane_t *r, lc__grant_room_t *g);

/* Queue the copy of the lane's filling slot (full, or its write is all
 * read). */
static void slot_flush(rlane_t *r)
{
	bslot_t *s = r->fill;
	rwrite_t *w = &r->run[r->run_i];
	r->fill = NULL;
	if (!w->dst || !s->fill) {
		atomic_store(&s->state, SLOT_FREE);
		s->r = NULL;
		return;
	}
	atomic_store(&s->state, SLOT_COPYING);
	int rc = lc__land_copy_async(&w->land, s->at, s->buf, s->fill, &s->a, slot_copied, s);
	if (!rc) {
		w->inflight++;
		return;
	}
	atomic_store(&s->state, SLOT_FREE);
	s->r = NULL;
	if (rc == LC_ERR_GRANT)
		revoked_run(r, w->land.g);
	else
		write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
}

/* Complete the pending writes at the head whose copies are all done, in
 * order: count them (or send their REJECT), then acknowledge. */
static void pend_complete(rlane_t *r)
{
	bool any = false;
	while (r->pend_n && !pend_at(r, 0)->inflight) {
		pend_t *e = pend_at(r, 0);
		bool ok = !e->failed && !e->code;
		if (e->land.g)
			lc__land_done(&e->land, ok);
		if (!ok) {
			/* Room was reserved for it (rlane_ack, frame_from_stage). */
			out_push(r, &(lc__tcp_ctrl_t){
					    .type = LC__TCP_REJECT,
					    .status = e->code ? e->code : LC_ERR_IO,
					    .a = e->seq,
					    .b = (uint64_t)(e->code ? e->detail
								    : LC__TCP_REJECT_CHECK)});
			r->acked = e->seq + 1;
		}
		r->pend_head = (r->pend_head + 1) % PEND_CAP;
		r->pend_n--;
		any = true;
	}
	if (any) {
		rlane_ack(r);
		rlane_flush(r);
	}
}

/* One completed copy of lane r's write seq. */
static void copy_reaped(rlane_t *r, uint64_t seq, int status)
{
	if (r->phase == R_RUN && r->run_i < r->run_n && seq == r->seq) {
		rwrite_t *w = &r->run[r->run_i];
		w->inflight--;
		if (status && w->dst) {
			LC__WARN("tcp: room %llu: device copy into region %u failed: %s",
				 (unsigned long long)r->room, w->region, lc_strerror(status));
			write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
		} else if (!w->dst && !w->inflight && w->land.g) {
			lc__land_done(&w->land, false); /* deferred by write_drop */
		}
		return;
	}
	for (uint32_t k = 0; k < r->pend_n; k++) {
		pend_t *e = pend_at(r, k);
		if (e->seq != seq)
			continue;
		e->inflight--;
		if (status && !e->failed) {
			LC__WARN("tcp: room %llu: device copy failed: %s",
				 (unsigned long long)e->land.room, lc_strerror(status));
			e->failed = true;
		}
		return;
	}
}

/* I/O thread: reap completed copies; lanes stopped for a slot go on. */
static void slots_reap(tcp_listener_t *tl)
{
	bool freed = false, free_slot = false;
	for (int i = 0; tl->slots_made && i < NSLOTS; i++) {
		bslot_t *s = &tl->slots[i];
		int st = atomic_load(&s->state);
		free_slot |= st == SLOT_FREE;
		if (st != SLOT_DONE)
			continue;
		rlane_t *r = s->r;
		int status = s->status;
		uint64_t seq = s->seq;
		s->r = NULL;
		atomic_store(&s->state, SLOT_FREE);
		freed = true;
		if (r)
			copy_reaped(r, seq, status);
	}
	if (!freed && !free_slot)
		return;
	for (rlane_t *r = tl->lanes; r; r = r->next) {
		if (freed)
			pend_complete(r);
		if (r->slot_wait) {
			r->slot_wait = false;
			r->readable = true; /* its staged bytes too; a readv says EAGAIN */
		}
	}
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
	lc__land_done(&w->land, false);
}

/* Write run_i is complete (in place, or discarded). */
static void write_done(rlane_t *r)
{
	rwrite_t *w = &r->run[r->run_i];
	if (r->fill) /* a slot the write's last bytes did not reach (dropped) */
		slot_flush(r);
	if (w->inflight || (r->pend_n && !w->dst)) {
		/* Its copies are in flight, or its REJECT would acknowledge a
		 * write whose copies are: completed in order by pend_complete.
		 * A dropped write's landing is done already (g NULL) unless
		 * copies are in flight. */
		*pend_at(r, r->pend_n++) = (pend_t){.seq = r->seq,
						    .len = w->len,
						    .land = w->land,
						    .inflight = w->inflight,
						    .code = w->dst ? 0 : w->code,
						    .detail = w->detail};
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
		rlane_flush(r);
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
	LC__WARN("tcp: grant of room %llu revoked during a write to region %u [%llu, +%llu); "
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
		w->code = lc__land_open(r->tl->ctx, h.room, w->region, w->offset, span[i], &w->land);
		w->detail = LC__TCP_REJECT_CHECK;
		w->sdev = !w->code && w->land.dev && w->count > 1;
		w->dev = !w->code && w->land.dev && !w->sdev;
		w->dst = w->code ? NULL : w->land.dev ? w->land.dev : w->land.dst;
	}
	r->room = h.room;
	r->run_n = h.n;
	r->run_i = 0;
	r->done = 0;
	r->phase = R_RUN;
	run_advance(r);
	return 0;
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
	bool ok = lc__ctx_token_accepted(r->tl->ctx, has ? token : NULL, has);
	out_push(r, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO_REPLY, .status = ok ? 0 : LC_ERR_AUTH});
	rlane_flush(r);
	if (!ok) {
		LC__COUNT(r->tl->ctx, conns_rejected_auth);
		LC__WARN("tcp: rejected a connection: %s",
			 has ? "unknown or revoked session token" : "no session token");
		return LC_ERR_AUTH;
	}
	r->phase = R_HDR;
	return 0;
}

/* ---- receiver: reading ---- */

/* Payload bytes of write run_i that arrived in the staging buffer. */
static void payload_from_stage(rlane_t *r, size_t n)
{
	rwrite_t *w = &r->run[r->run_i];
	int rc = w->dst ? land_stream(w, r->done, r->stage + r->st_pos, n) : 0;
	if (rc == LC_ERR_GRANT || (rc && !w->sdev))
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
	if (out_free(r) < n + 2 + r->pend_n)
		rlane_flush(r);
	if (out_free(r) < n + 2 + r->pend_n) {
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
	while (rc > 0 && !rlane_held(r)) {
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
			bslot_t *s = r->fill;
			whole = false;
			if (!r->pend)
				r->pend = malloc(PEND_CAP * sizeof *r->pend);
			if (!s && (!r->pend || !(s = slot_get(r->tl)))) {
				if (!r->tl->slots_made || !r->pend) { /* no memory for them */
					write_drop(w, LC_ERR_IO, LC__TCP_REJECT_CHECK);
					iov[n++] = (struct iovec){
						r->tl->scratch,
						LC__MIN(left, (uint64_t)SCRATCH_LEN)};
				} else {
					r->slot_wait = true; /* a copy's completion wakes us */
				}
				break;
			}
			if (!r->fill) {
				*s = (bslot_t){.tl = r->tl,
					       .buf = s->buf,
					       .r = r,
					       .seq = r->seq + (i - r->run_i),
					       .at = skip};
				atomic_store(&s->state, SLOT_FILLING);
				r->fill = s;
			}
			iov[n++] = (struct iovec){s->buf + s->fill,
						  LC__MIN(left, (uint64_t)(BOUNCE_LEN - s->fill))};
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
				iov[n++] = (struct iovec){w->dst + blk * w->stride + in,
							  w->blen - in};
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
			if (r->fill->fill == BOUNCE_LEN || r->done == w->len)
				slot_flush(r);
		}
		got -= t;
		run_advance(r);
	}
}

/* One readv: the rest of the run straight into place, plus the next
 * frame(s) into staging. Outside a run: staging only. */
static ssize_t rlane_read(rlane_t *r)
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
		return; /* LC_ERR_AUTH: counted and logged by on_hello */
	LC__COUNT(r->tl->ctx, frames_malformed);
	LC__WARN("tcp: malformed frame after %llu writes on a lane; closing it",
		 (unsigned long long)r->seq);
}

static void rlane_pump(rlane_t *r)
{
	size_t budget = PUMP_BUDGET;
	int rc = 0;
	while (r->readable && !r->paused && !rlane_held(r) && budget) {
		rc = consume_stage(r);
		if (rc < 0 || r->paused || rlane_held(r))
			break;
		ssize_t got = rlane_read(r);
		if (got == -2)
			break; /* stays readable: slots_reap pumps it again */
		if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
			r->dead = true;
			break;
		}
		if (got < 0)
			r->readable = errno == EINTR;
		else
			budget -= LC__MIN(budget, (size_t)got);
	}
	if (!r->dead && rc >= 0)
		rc = consume_stage(r);
	if (rc < 0)
		rlane_bad(r, rc);
	rlane_ack(r);
	rlane_flush(r);
}

/* ---- receiver: lanes ---- */

/* Wait (bounded) until no copy of lane r (NULL: any) is in flight; false
 * if some still is. Their slots are freed; the landings stay open. */
static bool slots_quiesce(tcp_listener_t *tl, rlane_t *r)
{
	uint64_t until = lc__now_ns() + CLOSE_WAIT_NS;
	bool busy = true;
	while (busy) {
		busy = false;
		for (int i = 0; tl->slots_made && i < NSLOTS; i++) {
			bslot_t *s = &tl->slots[i];
			int st = atomic_load(&s->state);
			if (r && s->r != r)
				continue;
			if (st == SLOT_COPYING || atomic_load(&s->in_cb)) {
				busy = true;
				continue;
			}
			if (st != SLOT_FREE) { /* FILLING or DONE */
				s->r = NULL;
				atomic_store(&s->state, SLOT_FREE);
			}
		}
		if (busy && lc__now_ns() >= until)
			return false;
		if (busy)
			usleep(100);
	}
	return true;
}

static void rlane_close(tcp_listener_t *tl, rlane_t *r)
{
	/* Copies in flight land granted bytes and name this lane: wait for
	 * them; past the bound, their landings are left open (a leak, logged)
	 * rather than finished under a copy still holding their bracket. */
	bool quiet = slots_quiesce(tl, r);
	if (!quiet) {
		LC__WARN("tcp: a closing lane's device copies did not complete within %llu ms",
			 (unsigned long long)(CLOSE_WAIT_NS / 1000000));
		for (int i = 0; i < NSLOTS; i++)
			if (tl->slots[i].r == r)
				tl->slots[i].r = NULL;
	}
	r->fill = NULL;
	for (uint32_t i = r->run_i; r->phase == R_RUN && i < r->run_n; i++)
		if (r->run[i].land.g && (quiet || !r->run[i].inflight))
			lc__land_done(&r->run[i].land, false);
	for (uint32_t k = 0; k < r->pend_n; k++)
		if (pend_at(r, k)->land.g && (quiet || !pend_at(r, k)->inflight))
			lc__land_done(&pend_at(r, k)->land, false);
	if (r->prev)
		r->prev->next = r->next;
	else
		tl->lanes = r->next;
	if (r->next)
		r->next->prev = r->prev;
	tl->nlanes--;
	lc__io_fd_del(&tl->task, &r->iofd);
	close(r->fd);
	free(r->pend);
	free(r);
}

/* The source address of an accepted connection, as the pending caps key it. */
static void peer_key(const struct sockaddr_storage *a, uint8_t key[16], uint8_t *len)
{
	*len = 0;
	if (a->ss_family == AF_INET) {
		memcpy(key, &((const struct sockaddr_in *)a)->sin_addr, 4);
		*len = 4;
	} else if (a->ss_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
		*len = 16;
	}
}

static bool same_peer(const rlane_t *r, const uint8_t *key, uint8_t len)
{
	return r->peer_len == len && !memcmp(r->peer, key, len);
}

/* Room for one more connection before its handshake: past a cap the
 * oldest lane still waiting for its HELLO is closed (that address's own
 * when the address has its share), so that idle connections cannot keep a
 * real peer out. Lanes that authenticated are never closed here. */
static void make_room(tcp_listener_t *tl, const uint8_t *key, uint8_t len)
{
	size_t all = 0, same = 0;
	rlane_t *old_all = NULL, *old_same = NULL;
	/* Newest first: the last one found is the oldest. */
	for (rlane_t *r = tl->lanes; r; r = r->next) {
		if (r->phase != R_HELLO || r->dead)
			continue;
		all++;
		old_all = r;
		if (same_peer(r, key, len)) {
			same++;
			old_same = r;
		}
	}
	rlane_t *v = same >= tl->pending_per_addr                           ? old_same
		     : all >= tl->pending_max || tl->nlanes >= MAX_ACCEPTED ? old_all
									    : NULL;
	if (!v)
		return;
	LC__COUNT(tl->ctx, conns_evicted_pending);
	if (tl->evicted++ % 1024 == 0)
		LC__WARN("tcp: closing the oldest connection without a handshake to take a new "
			 "one (%s cap; %llu closed so far)",
			 v == old_same && same >= tl->pending_per_addr ? "per-address" : "listener",
			 (unsigned long long)tl->evicted);
	rlane_close(tl, v);
}

static void rlane_add(tcp_listener_t *tl, int fd, const struct sockaddr_storage *a)
{
	rlane_t *r = NULL;
	uint8_t key[16], len;
	peer_key(a, key, &len);
	make_room(tl, key, len);
	if (tl->nlanes >= MAX_ACCEPTED || !(r = calloc(1, sizeof *r))) {
		LC__WARN("tcp: refusing a connection (%zu open)", tl->nlanes);
		close(fd);
		return;
	}
	/* Readable at once: a peer's HELLO usually came with the connection. */
	*r = (rlane_t){.tl = tl, .fd = fd, .phase = R_HELLO, .readable = true, .writable = true};
	r->hello_deadline_ns = lc__now_ns() + tl->hello_ns;
	memcpy(r->peer, key, len);
	r->peer_len = len;
	lc__tcp_sockopts(fd, 0); /* buffers are inherited from the listening socket */
	if (lc__io_fd_add(&tl->task, &r->iofd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			  LANE_TAG)) {
		close(fd);
		free(r);
		return;
	}
	r->next = tl->lanes;
	if (tl->lanes)
		tl->lanes->prev = r;
	tl->lanes = r;
	tl->nlanes++;
}

static void accept_burst(tcp_listener_t *tl)
{
	for (int k = 0; k < ACCEPT_BURST; k++) {
		struct sockaddr_storage a = {0};
		socklen_t alen = sizeof a;
		int fd =
			accept4(tl->fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				LC__WARN("tcp: accept: %s", strerror(errno));
			if (errno != EINTR && errno != ECONNABORTED)
				return;
			continue;
		}
		rlane_add(tl, fd, &a);
	}
}

/* Pump ready lanes, close dead ones, expire handshakes. Returns the next
 * deadline: now when a lane still has bytes (its budget ran out), 0 for
 * none. */
static uint64_t listener_service(lc__io_task_t *t, uint64_t now)
{
	tcp_listener_t *tl = LC__CONTAINER_OF(t, tcp_listener_t, task);
	uint64_t next = UINT64_MAX;
	bool again = false;
	slots_reap(tl);
	for (rlane_t *r = tl->lanes, *nx; r; r = nx) {
		nx = r->next;
		rlane_flush(r);
		if (r->readable && !r->paused && !rlane_held(r))
			rlane_pump(r);
		if (r->phase == R_HELLO && !r->dead && now >= r->hello_deadline_ns) {
			LC__WARN("tcp: no handshake within %llu ms; closing",
				 (unsigned long long)(tl->hello_ns / 1000000));
			r->dead = true;
		}
		if (r->dead) {
			rlane_close(tl, r);
			continue;
		}
		if (r->phase == R_HELLO)
			next = LC__MIN(next, r->hello_deadline_ns);
		again |= r->readable && !r->paused && !rlane_held(r);
	}
	return again ? now : next == UINT64_MAX ? 0 : next;
}

static void listener_on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	tcp_listener_t *tl = LC__CONTAINER_OF(t, tcp_listener_t, task);
	if (f->tag == LISTEN_TAG) {
		accept_burst(tl);
		return;
	}
	rlane_t *r = LC__CONTAINER_OF(f, rlane_t, iofd);
	r->readable |= (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	r->writable |= (events & EPOLLOUT) != 0;
}

static const lc__io_task_ops_t listener_task_ops = {
	.name = "tcp-listen",
	.on_event = listener_on_event,
	.service = listener_service,
};

/* ---- ops: receiver ---- */

static int listen_socket(tcp_listener_t *tl, const char *host, int port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char ports[16];
	int one = 1;
	snprintf(ports, sizeof ports, "%d", port);
	int rc = getaddrinfo(host[0] ? host : NULL, ports, &hints, &res);
	if (rc || !res) {
		LC__WARN("tcp: cannot resolve %s: %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	tl->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tl->fd < 0) {
		rc = -errno;
		goto out;
	}
	setsockopt(tl->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	lc__tcp_sockopts(tl->fd, tl->sockbuf); /* accepted sockets inherit the buffers */
	if (bind(tl->fd, res->ai_addr, res->ai_addrlen) || listen(tl->fd, 128))
		rc = -errno;
out:
	freeaddrinfo(res);
	return rc;
}

/* The URL peers should use: the bound address and the actual port. */
static int resolved_url(tcp_listener_t *tl, char *url, size_t cap)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof a;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	if (getsockname(tl->fd, (struct sockaddr *)&a, &alen) ||
	    getnameinfo((struct sockaddr *)&a, alen, host, sizeof host, port, sizeof port,
			NI_NUMERICHOST | NI_NUMERICSERV))
		return -errno ? -errno : -EINVAL;
	bool v6 = a.ss_family == AF_INET6;
	snprintf(url, cap, "tcp://%s%.200s%s:%.8s", v6 ? "[" : "", host, v6 ? "]" : "", port);
	return 0;
}

/* On the loop thread, as the task detaches: close every lane. */
static void listener_release(lc__io_task_t *t, void *arg)
{
	tcp_listener_t *tl = arg;
	while (tl->lanes)
		rlane_close(tl, tl->lanes);
	lc__io_fd_del(t, &tl->lfd);
}

static void tcp_listener_free(tcp_listener_t *tl)
{
	if (tl->fd >= 0)
		close(tl->fd);
	if (!slots_quiesce(tl, NULL)) {
		LC__WARN("tcp: device copies still in flight at listener close; leaking it");
		return;
	}
	for (int i = 0; i < NSLOTS; i++)
		free(tl->slots[i].buf);
	free(tl);
}

int lc__tcp_listen(lc_listener_t *l, const char *url)
{
	char host[256];
	int port, rc;
	rc = lc__url_host_port(url, "tcp", host, sizeof host, &port);
	if (rc)
		return -EINVAL;
	tcp_listener_t *tl = calloc(1, sizeof *tl);
	if (!tl)
		return -ENOMEM;
	tl->fd = -1;
	tl->l = l;
	tl->ctx = l->ctx;
	tl->hello_ns = (uint64_t)lc__ctx_cfg(l->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	tl->pending_max = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_pending_max);
	tl->pending_per_addr = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_pending_per_addr);
	tl->sockbuf = lc__tcp_sockbuf(l->ctx);
	rc = listen_socket(tl, host, port);
	if (rc)
		goto fail;
	rc = resolved_url(tl, l->url, sizeof l->url);
	if (rc)
		goto fail;
	rc = lc__io_attach(l->ctx, &tl->task, &listener_task_ops);
	if (rc)
		goto fail;
	rc = lc__io_fd_add(&tl->task, &tl->lfd, tl->fd, EPOLLIN, LISTEN_TAG);
	if (rc) {
		lc__io_detach(&tl->task, NULL, NULL);
		goto fail;
	}
	l->tp = tl;
	return 0;
fail:
	tcp_listener_free(tl);
	return rc;
}

void lc__tcp_listener_close(lc_listener_t *l)
{
	tcp_listener_t *tl = l->tp;
	lc__io_detach(&tl->task, listener_release, tl);
	tcp_listener_free(tl);
	l->tp = NULL;
}
