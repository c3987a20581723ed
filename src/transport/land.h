/*
 * The seam's pipeline for device destinations (docs/gpu.md "Staging"), for
 * a receiver that reads a stream of writes and must acknowledge them in
 * order (tcp's lanes). Two parts, both owned by the receiver's thread:
 *
 * - Bounce slots (lc__bounces_t): host buffers a receiver reads a device
 *   write's bytes into; a full slot (or the write's last bytes) is landed
 *   by the region's copy engine asynchronously (lc__land_copy_async), so
 *   that the copy of slot k runs while slot k+1 is read. Each copy holds
 *   the room's grant bracket until it completed: lc_grant_revoke waits for
 *   the copies in flight.
 * - An in-order queue (lc__landq_t): writes fully received whose copies
 *   are still in flight, or that wait behind such a write, in stream order.
 *   A write leaves it (lc__landq_pop) only once its own copies and those
 *   of every older write completed, with its landing finished (counted if
 *   nothing failed), so a receiver that acknowledges cumulatively never
 *   acknowledges bytes not in place.
 *
 * Threading: every function runs on the owner's thread, except that a
 * slot's copy completes on the copy engine's thread, which writes only the
 * slot's status, state and in_cb (atomics) and then calls the pool's kick
 * (say, lc__io_kick of the owner's task); the owner then reaps DONE slots
 * (lc__bounces_reap).
 */
#ifndef LC_TRANSPORT_LAND_H
#define LC_TRANSPORT_LAND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/seam.h"

/* A bounce slot: large, so that the hand-off to the engine is paid per
 * MiB, not per 64 KiB; a few of them, so that copies overlap the reads of
 * the next slots. At most LC__LAND_SLICE, so one copy is one bracket. */
#define LC__BOUNCE_LEN (1u << 20)
#define LC__BOUNCE_N 8

/* FREE -> FILLING (the owner reads into it) -> COPYING (queued) -> DONE
 * (the engine's thread: status set) -> FREE (reaped by the owner). */
enum { LC__BOUNCE_FREE, LC__BOUNCE_FILLING, LC__BOUNCE_COPYING, LC__BOUNCE_DONE };

typedef struct lc__bounce {
	struct lc__bounces *pool;
	uint8_t *buf; /* LC__BOUNCE_LEN */
	void *stream; /* the stream it lands for; NULL once that closed */
	uint64_t seq; /* the write it lands (the stream's numbering) */
	uint64_t at;  /* byte of the write at buf[0] */
	size_t fill;
	_Atomic int state;
	_Atomic int in_cb; /* the copy's callback is running */
	int status;        /* set before DONE */
} lc__bounce_t;

typedef struct lc__bounces {
	void (*kick)(void *arg); /* the engine's thread: a slot is DONE */
	void *kick_arg;
	lc__bounce_t b[LC__BOUNCE_N];
	bool made; /* buffers are made at the first device write */
} lc__bounces_t;

void lc__bounces_init(lc__bounces_t *p, void (*kick)(void *), void *kick_arg);
/* A free slot, FILLING, for stream's write seq from its byte `at`; NULL
 * when every slot is busy (a completion kicks the owner), or with *nomem
 * set when the buffers could not be made. */
lc__bounce_t *lc__bounce_get(lc__bounces_t *p, void *stream, uint64_t seq, uint64_t at,
			     bool *nomem);
/* The slot is full, or its write is all read: queue its bytes into l at
 * byte s->at (1: one copy to reap), or free it when l is NULL or it is
 * empty (0). A failure frees it: LC_ERR_GRANT (revoked) or LC_ERR_IO. */
int lc__bounce_flush(lc__bounce_t *s, const lc__land_t *l);
/* Reap DONE slots: reaped(stream, seq, status) for each that still has a
 * stream. Returns whether any was reaped; *free_slot: whether a slot is
 * free now. */
bool lc__bounces_reap(lc__bounces_t *p, void (*reaped)(void *stream, uint64_t seq, int status),
		      bool *free_slot);
/* Wait until no copy of stream (NULL: any) is in flight, at most until
 * until_ns; false if some still is. Their slots are freed. */
bool lc__bounces_quiesce(lc__bounces_t *p, void *stream, uint64_t until_ns);
/* Slots of a closed stream complete without it. */
void lc__bounces_forget(lc__bounces_t *p, void *stream);
/* Free the buffers: only once lc__bounces_quiesce(p, NULL, ..) held. */
void lc__bounces_fini(lc__bounces_t *p);

/* A write waiting in the in-order queue. */
typedef struct lc__landq_ent {
	uint64_t seq, len;
	lc__land_t land;   /* land.g NULL: nothing left to finish */
	uint32_t inflight; /* its copies not reaped */
	bool failed;       /* a copy failed */
	int code, detail;  /* the receiver's rejection, when code */
} lc__landq_ent_t;

typedef struct lc__landq {
	lc__landq_ent_t *e;
	uint32_t cap, head, n;
} lc__landq_t;

/* Make room for cap entries (once; at the stream's first device write):
 * 0 or -ENOMEM. */
int lc__landq_make(lc__landq_t *q, uint32_t cap);
static inline lc__landq_ent_t *lc__landq_at(lc__landq_t *q, uint32_t k)
{
	return &q->e[(q->head + k) % q->cap];
}
/* Append (the caller checked n < cap). */
void lc__landq_push(lc__landq_t *q, const lc__landq_ent_t *e);
/* One copy of queued write seq was reaped (a failure is logged); false
 * when seq is not queued. */
bool lc__landq_reaped(lc__landq_t *q, uint64_t seq, int status);
/* The oldest write, once its copies completed: its landing finished
 * (counted unless a copy failed or it carries a code), *out a copy of it,
 * true. false while it waits, or when the queue is empty. */
bool lc__landq_pop(lc__landq_t *q, lc__landq_ent_t *out);
/* The stream closes: finish every landing, uncounted; those with copies in
 * flight only when `quiet` (else they leak: a copy still holds their
 * bracket). Frees the queue. */
void lc__landq_fini(lc__landq_t *q, bool quiet);

#endif
