/*
 * shm's receiver, its side of the lanes (lane.h, docs/transport-shm.md
 * "The lane"): taking P's records, putting acks, parking. Loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/shm/recv_int.h"

/* Whether the lane holds a record D may take now: no message is being
 * applied, no acks wait for the socket (EPOLLOUT brings the connection
 * back; a look that said yes meanwhile would spin the loop), and its
 * socket messages are handled (a record published with a socket message
 * before it waits for that message). True too for a malformed head, which
 * the next pass reports. */
bool lc__shm_lane_ready(const dconn_t *dc)
{
	if (!dc->lane.base || dc->in_n || dc->nacks)
		return false;
	uint64_t n = lc__shm_lane_avail(&dc->lane, dc->lane.w_head, dc->w_tail);
	if (n == UINT64_MAX)
		return true;
	return n && lc__get_u64(lc__shm_lane_wslot(&dc->lane, dc->w_tail) + LC__SHM_WRITE_REC) <=
			    dc->sock_msgs;
}

/* Take what lc__shm_lane_ready allows into dc->in as one WRITES message: 1, 0 for
 * nothing, -1 for a malformed head. Each record is copied out of the shared
 * page first and then checked like a socket's. */
int lc__shm_lane_take(shm_listener_t *sl, dconn_t *dc)
{
	lc__shm_lane_t *ln = &dc->lane;
	uint64_t avail = lc__shm_lane_avail(ln, ln->w_head, dc->w_tail);
	if (avail == UINT64_MAX)
		return -1;
	uint32_t n = 0;
	while (n < avail && n < LC__SHM_MAX_WRITES) {
		const uint8_t *slot = lc__shm_lane_wslot(ln, dc->w_tail + n);
		uint8_t *rec = dc->in + LC__SHM_HDR + (size_t)n * LC__SHM_WRITE_REC;
		memcpy(rec, slot, LC__SHM_WRITE_REC);
		if (lc__get_u64(slot + LC__SHM_WRITE_REC) > dc->sock_msgs)
			break; /* after a socket message still to handle */
		n++;
	}
	if (!n)
		return 0;
	dc->w_tail += n;
	lc__shm_lane_release(ln, ln->w_tail, dc->w_tail);
	lc__shm_put_hdr(dc->in, LC__SHM_WRITES, n);
	dc->in_n = n;
	dc->in_next = 0;
	dc->in_lane = true;
	LC__COUNT_ADD(sl->ctx, lane_writes, n);
	return 1;
}

/* A lane for a P that offered to use one, unless shm_lane is 0; none
 * (and a debug line) when it cannot be made. */
int lc__shm_lane_offer(shm_listener_t *sl, dconn_t *dc, const lc__shm_hello_t *h)
{
	int fd = -1;
	if (!(h->flags & LC__SHM_HELLO_LANE) || !lc__ctx_cfg(sl->ctx, LC__CFG_shm_lane))
		return -1;
	int rc = lc__shm_lane_create(&dc->lane, &fd);
	if (rc) {
		LC__DEBUG("shm://%s: no lane for pid %ld: %s", sl->name, (long)dc->pid,
			  strerror(-rc));
		return -1;
	}
	return fd;
}

/* How long D holds back a ring to a parked P whose callers poll (cq.h):
 * the caller that posted the write is usually about to spin on its
 * completion queue and take the acks itself, and a ring would wake P's
 * loop for nothing, a wake-up that takes a core from the two threads
 * doing the work (a quarter of the 4 KiB round trips here rang when D rang
 * at once, 8% with 5 us of grace, and each such wake made the next round
 * trips later still). A P whose callers do not spin (the engine sleeps on
 * its own queue) is rung at once, as before the lane had pollers. */
#define RING_GRACE_NS 20000ull
#define RING_HOLD_MAX_NS 50000ull
#define POLLED_RECENTLY_NS 1000000ull

/* Put pending acks of lane writes in the acks ring, and ring P's loop if
 * it parked and no caller polls: at once, or after the grace where P's
 * callers polled lately. P keeps no more lane writes unacknowledged than
 * the ring has slots, so a ring without room for them means a P that lied
 * about its tail: -EPROTO. P's tail is read only when the copy of it says
 * the ring is full (dc->a_tail_seen). */
int lc__shm_ack_lane(dconn_t *dc)
{
	lc__shm_lane_t *ln = &dc->lane;
	if (dc->a_head - dc->a_tail_seen + dc->nacks > LC__SHM_LANE_SLOTS) {
		uint64_t used = lc__shm_lane_used(ln, ln->a_tail, dc->a_head);
		if (used == UINT64_MAX || used + dc->nacks > LC__SHM_LANE_SLOTS)
			return -EPROTO;
		dc->a_tail_seen = dc->a_head - used;
	}
	for (size_t i = 0; i < dc->nacks; i++)
		memcpy(lc__shm_lane_aslot(ln, dc->a_head + i),
		       dc->acks + LC__SHM_HDR + i * LC__SHM_ACK_REC, LC__SHM_ACK_REC);
	dc->a_head += dc->nacks;
	dc->nacks = 0;
	bool ring = lc__shm_lane_publish(ln, ln->a_head, dc->a_head, ln->p_parked, ln->p_polling);
	uint64_t now = lc__now_ns();
	if (atomic_load_explicit(ln->p_polling, memory_order_relaxed))
		dc->polled_ns = now;
	if (!ring)
		return 0;
	if (now - dc->polled_ns >= POLLED_RECENTLY_NS) {
		dc->ring_due_ns = now; /* sent by lc__shm_lane_ring_due, this pass */
		return 0;
	}
	/* The grace runs from the newest acks, but a ring owed is never held
	 * back longer than RING_HOLD_MAX_NS in all. */
	if (!dc->ring_due_ns)
		dc->ring_owed_ns = now;
	dc->ring_due_ns = LC__MIN(now + RING_GRACE_NS, dc->ring_owed_ns + RING_HOLD_MAX_NS);
	return 0;
}

/* Whether a ring owed is still owed: not when P took the acks, a caller
 * polls, or P's loop woke. Read after our publish (its fence): a caller
 * that polls looks once more after it stops, and a loop awake looks
 * before it parks. */
static bool ring_owed(dconn_t *dc)
{
	lc__shm_lane_t *ln = &dc->lane;
	if (!dc->ring_due_ns)
		return false;
	bool polling = atomic_load_explicit(ln->p_polling, memory_order_relaxed);
	if (polling)
		dc->polled_ns = lc__now_ns();
	if (lc__shm_lane_used(ln, ln->a_tail, dc->a_head) == 0 || polling ||
	    !atomic_load_explicit(ln->p_parked, memory_order_relaxed))
		dc->ring_due_ns = 0;
	return dc->ring_due_ns != 0;
}

uint64_t lc__shm_lane_ring_due(shm_listener_t *sl, dconn_t *dc, uint64_t now)
{
	if (!ring_owed(dc))
		return 0;
	if (now < dc->ring_due_ns && (now = lc__now_ns()) < dc->ring_due_ns)
		return dc->ring_due_ns;
	dc->ring_due_ns = 0;
	uint8_t m[LC__SHM_HDR];
	lc__shm_put_hdr(m, LC__SHM_LANE_RING, 0);
	/* A full socket: P has messages to read and looks at the lane after
	 * them. Another error: the connection's reads find it. */
	if (lc__shm_send(dc->fd, m, sizeof m, -1) == 0)
		LC__COUNT(sl->ctx, lane_rings);
	return 0;
}

/* The I/O core's look at the connections' lanes (io.h, ops->poll). */
bool lc__shm_listener_poll(lc__io_task_t *t, int how)
{
	shm_listener_t *sl = LC__CONTAINER_OF(t, shm_listener_t, task);
	bool work = false;
	for (dconn_t *dc = sl->conns.next; dc != &sl->conns; dc = dc->next) {
		if (!dc->lane.base)
			continue;
		if (how == LC__IO_WAKE) {
			lc__shm_lane_unpark(dc->lane.d_parked);
			continue;
		}
		if (how == LC__IO_PARK) {
			lc__shm_lane_park(dc->lane.d_parked);
			if (lc__shm_lane_used(&dc->lane, dc->lane.a_tail, dc->a_head) == UINT64_MAX)
				dc->lane_tail_bad = true; /* dconn_serve closes it */
		}
		/* A ring owed is sent once due; the loop does not sleep on one
		 * (its sleeps are whole milliseconds). */
		work |= dc->lane_tail_bad || lc__shm_lane_ready(dc) ||
			(ring_owed(dc) && (how == LC__IO_PARK || lc__now_ns() >= dc->ring_due_ns));
	}
	return work;
}
