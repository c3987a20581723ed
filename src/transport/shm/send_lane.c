/*
 * shm's sender, its side of the lane (lane.h, docs/transport-shm.md "The
 * lane"): putting whole plain batches in the writes ring, ringing a parked
 * D, and the loop's look at the acks ring. The records are built as for
 * the socket (the helpers here serve both). Locks as send.c says.
 */
#include <string.h>

#include "transport/shm/send_int.h"

bool lc__shm_src_known(const shm_conn_t *sc, uint32_t id)
{
	for (size_t i = 0; i < sc->nsrcs; i++)
		if (sc->srcs[i] == id)
			return true;
	return false;
}

bool lc__shm_write_source(shm_conn_t *sc, const lc_write_t *w, lc__region_info_t *ri, bool *have)
{
	const uint8_t *local = w->local;
	/* A strided write's blocks span this much of its source (checked at
	 * post not to overflow). */
	uint64_t span = w->count > 1 ? (uint64_t)(w->count - 1) * w->local_stride + w->length
				     : w->length;
	if (*have && local >= ri->addr && span <= ri->len &&
	    (size_t)(local - ri->addr) <= ri->len - span)
		return true;
	*have = lc__source_find(sc->ctx, local, span, ri) == 0;
	return *have;
}

void lc__shm_write_record(const lc__batch_t *b, const lc_write_t *w, const lc__region_info_t *ri,
			  lc__shm_write_t *rec)
{
	*rec = (lc__shm_write_t){.batch = b->id,
				 .room = b->room,
				 .src = ri->id,
				 .dst = w->remote_region,
				 .src_off = (uint64_t)((const uint8_t *)w->local - ri->addr),
				 .dst_off = w->remote_offset,
				 .length = w->length,
				 .count = w->count,
				 .src_stride = w->local_stride,
				 .dst_stride = w->remote_stride};
}

/* Under both locks, with no message built (a REGION built is counted in
 * sc->srcs before it is sent). Put whole batches from the cursor on into
 * the lane while each is plain (host sources D maps) and fits the writes
 * D may have unacknowledged there; publish the head. Returns the records
 * put; *ring: D's loop parked and must be rung. */
uint32_t lc__shm_lane_put(shm_conn_t *sc, bool *ring)
{
	uint32_t put = 0;
	lc__region_info_t ri = {0};
	bool have_ri = false;
	pbatch_t *pb = sc->cursor;
	*ring = false;
	while (pb) {
		lc__batch_t *b = pb->b;
		if (lc__batch_is_completed(b) || pb->sent == b->nwrites) {
			pb = pb->next;
			if (!put)
				sc->cursor = pb;
			continue;
		}
		if (pb->sent || pb->ipc || pb->undecided ||
		    sc->lane_unacked + b->nwrites > LC__SHM_LANE_SLOTS)
			break;
		size_t i = 0;
		for (; i < b->nwrites; i++) {
			const lc_write_t *w = &b->writes[i];
			if (!lc__shm_write_source(sc, w, &ri, &have_ri) ||
			    !LC__KIND_IS_HOST(ri.kind) || !lc__shm_src_known(sc, ri.id))
				break;
			/* Past the head: D reads nothing of it until it moves. */
			uint8_t *slot = lc__shm_lane_wslot(&sc->lane, sc->w_head + put + i);
			uint8_t m[LC__SHM_HDR + LC__SHM_WRITE_REC];
			lc__shm_write_t rec;
			lc__shm_write_record(b, w, &ri, &rec);
			lc__shm_put_write(m, 0, &rec);
			memcpy(slot, m + LC__SHM_HDR, LC__SHM_WRITE_REC);
			lc__put_u64(slot + LC__SHM_WRITE_REC, sc->sock_sent);
		}
		if (i < b->nwrites)
			break; /* the socket's, once the lane is acknowledged */
		pb->sent = b->nwrites;
		pb->lane = true;
		put += (uint32_t)b->nwrites;
		sc->unacked += b->nwrites;
		sc->lane_unacked += b->nwrites;
		pb = pb->next;
	}
	if (put) {
		sc->w_head += put;
		*ring = lc__shm_lane_publish(&sc->lane, sc->lane.w_head, sc->w_head, sc->lane.d_parked,
					      NULL);
	}
	return put;
}

/* Under lock: whether a batch from the cursor on has writes to send. */
bool lc__shm_unsent(const shm_conn_t *sc)
{
	for (const pbatch_t *pb = sc->cursor; pb; pb = pb->next)
		if (!lc__batch_is_completed(pb->b) && pb->sent < pb->b->nwrites)
			return true;
	return false;
}

/* Tell a parked D that the lane has records. A full socket needs no ring:
 * D reads it and looks at the lane after. */
void lc__shm_lane_ring(shm_conn_t *sc)
{
	uint8_t m[LC__SHM_HDR];
	lc__shm_put_hdr(m, LC__SHM_LANE_RING, 0);
	if (lc__shm_send(sc->fd, m, sizeof m, -1) == 0)
		LC__COUNT(sc->ctx, lane_rings);
}

/* The I/O core's look at the acks ring (io.h, ops->poll), without
 * send_mu: the loop thread alone maps and unmaps the lane, and a_seen is
 * a copy of the tail that a caller's spin (cq_poll) may move. */
bool lc__shm_conn_poll(lc__io_task_t *t, int how)
{
	shm_conn_t *sc = LC__CONTAINER_OF(t, shm_conn_t, task);
	if (!sc->lane.base)
		return false;
	if (how == LC__IO_WAKE) {
		lc__shm_lane_unpark(sc->lane.p_parked);
		return false;
	}
	if (how == LC__IO_PARK)
		lc__shm_lane_park(sc->lane.p_parked);
	uint64_t tail = atomic_load_explicit(&sc->a_seen, memory_order_relaxed);
	return lc__shm_lane_avail(&sc->lane, sc->lane.a_head, tail) != 0;
}
