/*
 * Whether a D's transfer info is taken (pd/prefill_int.h has the
 * structures and the locking), and what waits for a sender. A transfer
 * info is checked against its room's sender before anything of the room
 * or the sender changes: the request's pairing value, whether the sender
 * ended; only then does the engine take it (a room with every destination
 * refuses one more). D may be faster than P: an info for a room without a
 * sender yet is held (parked) until the sender comes, then taken as if it
 * had just arrived; a sender that never comes has it refused after
 * p_park_ms, so D hears "P has no such room" instead of waiting for its
 * room's transfer deadline. The park is bounded (p_parked_max,
 * p_session_parked_max, the descriptor caps): a D, honest or not, cannot
 * make P hold more. A destroyed sender is remembered a while (a ring), so
 * that a transfer info for its room is refused at once with the reason.
 * Control thread, but for the sender tombs and the touched rooms, which
 * the callers' threads write under `lock`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "engine/engine.h"
#include "pd/prefill_int.h"

bool lc__pair_equal(const uint8_t *a, size_t la, const uint8_t *b, size_t lb)
{
	/* Both arrays are LC_PAIR_MAX bytes, zero past their length: every
	 * byte is compared whatever the lengths. */
	return (la == lb) & lc__ct_equal(a, b, LC_PAIR_MAX);
}

/* ---- taking a transfer info (control thread, send_lock held) ---- */

/* A STATUS about t's room to session s (Failed with a reason, or the
 * confirmation Bootstrapped), with s's secret. */
static void tell(lc_prefill_t *p, lc__dsess_t *s, uint64_t room, int status, int fail_reason,
		 const char *why)
{
	if (!s || !s->push)
		return;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m)
		return;
	m->type = LC__MSG_STATUS;
	m->status.room = room;
	m->status.p_rank = (uint32_t)p->rank;
	m->status.status = (uint8_t)status;
	m->status.fail_reason = (uint32_t)fail_reason;
	if (why)
		lc__reason(m->status.reason, sizeof m->status.reason, "%s", why);
	memcpy(m->secret, s->secret, LC__MSG_SECRET_LEN);
	lc__prefill_send(p, s->push, m);
	free(m);
}

void lc__prefill_refuse_info(lc_prefill_t *p, lc__dsess_t *s, const lc__msg_transfer_info_t *t,
			     int fail_reason, const char *why)
{
	if (t->flags & LC__INFO_DUMMY) { /* D is told nothing of a dummy */
		LC__DEBUG("prefill %s: dummy for room %llu from %s: %s", p->name,
			  (unsigned long long)t->room, t->session, why);
		return;
	}
	LC__WARN_PEER("prefill %s: room %llu from %.200s: %s", p->name, (unsigned long long)t->room,
		      t->session, why);
	tell(p, s, t->room, LC_ROOM_FAILED, fail_reason, why);
}

/* What the control thread needs of a room's sender, copied under `lock`. */
typedef struct sender_view {
	bool exists, ended;
	int end_fail;
	uint8_t pair_len;
	uint8_t pair[LC_PAIR_MAX];
	char end_reason[LC_REASON_MAX];
} sender_view_t;

static void view_sender(lc_prefill_t *p, uint64_t room, sender_view_t *v)
{
	memset(v, 0, sizeof *v);
	pthread_mutex_lock(&p->lock);
	lc_sender_t *s = p->senders;
	while (s && s->room != room)
		s = s->next;
	if (s) {
		v->exists = true;
		v->ended = s->ended;
		v->end_fail = s->end_fail;
		v->pair_len = s->pair_len;
		memcpy(v->pair, s->pair, sizeof v->pair);
		snprintf(v->end_reason, sizeof v->end_reason, "%s", s->end_reason);
	}
	pthread_mutex_unlock(&p->lock);
}

/* The engine took t, or why not (a refusal D hears, or a repeat it must
 * not: the room goes on for its first info from that session). */
static void engine_take(lc_prefill_t *p, lc__dsess_t *s, const lc__msg_transfer_info_t *t)
{
	bool dummy = t->flags & LC__INFO_DUMMY;
	char why[LC_REASON_MAX];
	lc_dst_params_t d = {.size = sizeof d,
			     /* A dummy keeps the name of a registered session, so
			      * that it may cancel. */
			     .session = s ? s->ename : NULL,
			     .pages = t->pages,
			     .page_count = t->page_count,
			     .prefix_len = t->prefix_len,
			     .aux_index = t->aux_index,
			     .required_dst_count = t->required_dst,
			     .is_dummy = dummy,
			     .state_slots = t->slots,
			     .state_slot_count = t->slot_count};
	int rc = lc__engine_room_dst_join(p->engine, t->room, &d);
	if (!rc) {
		if (!dummy && (t->flags & LC__INFO_WANTS_ACK))
			tell(p, s, t->room, LC_ROOM_BOOTSTRAPPED, LC_FAIL_NONE, NULL);
		return;
	}
	int fail = rc == -ENOMEM ? LC_FAIL_NO_MEMORY : LC_FAIL_BAD_INPUT;
	if (rc == -EEXIST) {
		/* This session is a destination of the room already: a STATUS
		 * Failed would fail at D the room P goes on serving. */
		uint64_t n = LC__COUNT(p->ctx, infos_refused_claimed) + 1;
		LC__WARN_PEER("prefill %s: room %llu: a repeated transfer info from %.200s, which "
			      "the room holds already: dropped (%llu so far)",
			      p->name, (unsigned long long)t->room, t->session,
			      (unsigned long long)n);
		return;
	}
	if (rc == -EBUSY) {
		LC__COUNT(p->ctx, infos_refused_claimed);
		snprintf(why, sizeof why,
			 "transfer info refused by P rank %d: room %llu is claimed (every "
			 "destination it needs is there already)",
			 p->rank, (unsigned long long)t->room);
	} else if (rc == -ENOENT || rc == LC_ERR_STATE) {
		/* The room ended after the caller's view of its sender: the
		 * sender's reason, when it has one by now. */
		sender_view_t v;
		view_sender(p, t->room, &v);
		LC__COUNT(p->ctx, infos_refused_ended);
		fail = v.ended ? v.end_fail : LC_FAIL_CANCELLED;
		if (v.ended)
			lc__reason(why, sizeof why,
				   "transfer info refused by P rank %d: P's sender %s", p->rank,
				   v.end_reason);
		else
			snprintf(why, sizeof why,
				 "transfer info refused by P rank %d: room %llu already ended",
				 p->rank, (unsigned long long)t->room);
	} else if (rc == -ENOBUFS) {
		snprintf(why, sizeof why,
			 "transfer info refused by P rank %d: %u pages, %u state slots: "
			 "over p_session_descs_max or p_descs_max",
			 p->rank, t->page_count, t->slot_count);
	} else {
		snprintf(why, sizeof why, "transfer info refused by P rank %d: %s", p->rank,
			 lc_strerror(rc));
	}
	lc__prefill_refuse_info(p, s, t, fail, why);
}

void lc__prefill_take_info(lc_prefill_t *p, lc__dsess_t *s, lc__msg_transfer_info_t *t,
			   const uint8_t *secret, const char *peer)
{
	sender_view_t v;
	char why[LC_REASON_MAX];
	int fail;
	view_sender(p, t->room, &v);
	if (!v.exists) {
		if (lc__prefill_stomb_refuses(p, t, lc__now_ns(), &fail, why, sizeof why)) {
			LC__COUNT(p->ctx, infos_refused_ended);
			lc__prefill_refuse_info(p, s, t, fail, why);
		} else if (s) {
			lc__prefill_park(p, s, t, secret, peer);
		}
		return;
	}
	/* Nothing of the room or the sender changes before these. */
	if (v.pair_len && !lc__pair_equal(v.pair, v.pair_len, t->pair, t->pair_len)) {
		uint64_t n = LC__COUNT(p->ctx, infos_refused_pair) + 1;
		LC__WARN_PEER("prefill %s: room %llu: a transfer info from %.200s %s: refused, "
			      "pairing value mismatch (%llu so far)",
			      p->name, (unsigned long long)t->room, t->session,
			      t->pair_len ? "with another pairing value than the room's"
					  : "without the room's pairing value",
			      (unsigned long long)n);
		snprintf(why, sizeof why,
			 "transfer info refused by P rank %d: pairing value mismatch (%s)", p->rank,
			 t->pair_len ? "not the one P's request has"
				     : "D sent none, P's request has one");
		if (!(t->flags & LC__INFO_DUMMY)) /* logged above, once */
			tell(p, s, t->room, LC_ROOM_FAILED, LC_FAIL_BAD_INPUT, why);
		return;
	}
	if (v.ended) {
		LC__COUNT(p->ctx, infos_refused_ended);
		lc__reason(why, sizeof why, "transfer info refused by P rank %d: P's sender %s",
			   p->rank, v.end_reason);
		lc__prefill_refuse_info(p, s, t, v.end_fail, why);
		return;
	}
	engine_take(p, s, t);
}

/* ---- destroyed senders (under `lock`) ---- */

void lc__prefill_stomb_add(lc_prefill_t *p, const lc_sender_t *s, int fail, const char *reason)
{
	lc__stomb_t *t = &p->stombs[p->stomb_next];
	p->stomb_next = (p->stomb_next + 1) % LC__P_STOMBS;
	memset(t, 0, sizeof *t);
	t->room = s->room;
	t->at_ns = lc__now_ns();
	t->pair_len = s->pair_len;
	memcpy(t->pair, s->pair, sizeof t->pair);
	t->fail_reason = fail;
	snprintf(t->reason, sizeof t->reason, "%s", reason);
}

bool lc__prefill_stomb_refuses(lc_prefill_t *p, const lc__msg_transfer_info_t *t, uint64_t at_ns,
			       int *fail, char *why, size_t cap)
{
	bool hit = false;
	pthread_mutex_lock(&p->lock);
	/* The newest first: a room id used again is judged by its last sender. */
	for (size_t k = 1; k <= LC__P_STOMBS && !hit; k++) {
		const lc__stomb_t *s =
			&p->stombs[(p->stomb_next + LC__P_STOMBS - k) % LC__P_STOMBS];
		if (!s->at_ns || s->room != t->room)
			continue;
		bool same = s->pair_len &&
			    lc__pair_equal(s->pair, s->pair_len, t->pair, t->pair_len);
		/* An info that came before the destroy was for that sender (or
		 * it would have been refused by it); a later one, when it has
		 * the sender's pairing value, or the sender had none and it
		 * comes within LC__P_STOMB_UNPAIRED_NS (an unpaired room id may
		 * be used again by another request). */
		if (s->pair_len && !same)
			break; /* another request's; its own sender may still come */
		if (!s->pair_len && at_ns > s->at_ns + LC__P_STOMB_UNPAIRED_NS)
			break;
		hit = true;
		*fail = s->fail_reason;
		snprintf(why, cap, "transfer info refused by P rank %d: P's sender of room %llu %s",
			 p->rank, (unsigned long long)t->room, s->reason);
	}
	pthread_mutex_unlock(&p->lock);
	return hit;
}

void lc__prefill_touch(lc_prefill_t *p, uint64_t room)
{
	if (p->ntouched < LC__P_TOUCHED)
		p->touched[p->ntouched++] = room;
	else
		p->touched_all = true;
}

/* ---- the park (control thread) ---- */

static lc__dsess_t *owner_of(lc_prefill_t *p, const lc__parked_t *k)
{
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_by_ename(p, k->ename);
	if (s && !lc__ct_equal(s->secret, k->secret, LC__MSG_SECRET_LEN))
		s = NULL; /* another incarnation under that name since */
	pthread_mutex_unlock(&p->lock);
	return s;
}

/* Take entry i out of the park (its session's counts back); the caller
 * owns it. */
static lc__parked_t *unpark(lc_prefill_t *p, size_t i)
{
	lc__parked_t *k = p->parked[i];
	p->parked[i] = p->parked[--p->nparked];
	p->parked_descs -= k->descs;
	lc__dsess_t *s = owner_of(p, k);
	if (s) {
		s->parked--;
		s->parked_descs -= k->descs;
	}
	return k;
}

static void parked_free(lc__parked_t *k)
{
	free(k->info.pages);
	free(k->info.slots);
	free(k);
}

void lc__prefill_park(lc_prefill_t *p, lc__dsess_t *s, lc__msg_transfer_info_t *t,
		      const uint8_t *secret, const char *peer)
{
	char why[LC_REASON_MAX];
	uint64_t park_ms = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_park_ms);
	size_t max = (size_t)lc__ctx_cfg(p->ctx, LC__CFG_p_parked_max);
	uint32_t smax = (uint32_t)lc__ctx_cfg(p->ctx, LC__CFG_p_session_parked_max);
	uint64_t sdescs = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_session_descs_max);
	uint64_t descs_max = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_descs_max);
	uint64_t descs = (uint64_t)t->page_count + t->slot_count;
	for (size_t i = 0; i < p->nparked; i++)
		if (p->parked[i]->info.room == t->room && !strcmp(p->parked[i]->ename, s->ename)) {
			/* A repeat: the first stays, D hears nothing that would
			 * fail the room it holds. */
			LC__COUNT(p->ctx, infos_refused_claimed);
			LC__DEBUG("prefill %s: room %llu: a repeated transfer info from %s while "
				  "parked: dropped",
				  p->name, (unsigned long long)t->room, s->ename);
			return;
		}
	if (!park_ms) {
		LC__COUNT(p->ctx, infos_refused_no_room);
		snprintf(why, sizeof why,
			 "P has no such room: P rank %d has no sender for room %llu (p_park_ms 0)",
			 p->rank, (unsigned long long)t->room);
		lc__prefill_refuse_info(p, s, t, LC_FAIL_BOOTSTRAP_TIMEOUT, why);
		return;
	}
	if (s->parked_descs + descs > sdescs || p->parked_descs + descs > descs_max) {
		uint64_t n = LC__COUNT(p->ctx, infos_refused_descs) + 1;
		if (n % 1024 == 1)
			LC__WARN("prefill %s: room %llu refused before its sender came: %llu more "
				 "page and slot ids would exceed %s; %llu refused so far",
				 p->name, (unsigned long long)t->room, (unsigned long long)descs,
				 s->parked_descs + descs > sdescs ? "p_session_descs_max"
								  : "p_descs_max",
				 (unsigned long long)n);
		snprintf(why, sizeof why,
			 "transfer info refused by P rank %d before its sender came: %u pages, %u "
			 "state slots: over p_session_descs_max or p_descs_max",
			 p->rank, t->page_count, t->slot_count);
		lc__prefill_refuse_info(p, s, t, LC_FAIL_BAD_INPUT, why);
		return;
	}
	lc__parked_t *k = NULL;
	bool fits = p->nparked < max && s->parked < smax;
	if (fits && p->nparked == p->parked_cap) {
		size_t cap = p->parked_cap ? p->parked_cap * 2 : 64;
		lc__parked_t **n = realloc(p->parked, cap * sizeof *n);
		if (n) {
			p->parked = n;
			p->parked_cap = cap;
		}
	}
	if (fits && p->nparked < p->parked_cap)
		k = calloc(1, sizeof *k);
	if (!k) {
		uint64_t n = LC__COUNT(p->ctx, infos_refused_park_full) + 1;
		bool mine = s->parked >= smax && p->nparked < max;
		LC__WARN_PEER("prefill %s: room %llu from %.200s refused: %s (%llu so far)",
			      p->name, (unsigned long long)t->room, t->session,
			      mine ? "the session holds p_session_parked_max transfer infos for "
				     "rooms without a sender"
				   : "p_parked_max transfer infos wait for their sender",
			      (unsigned long long)n);
		snprintf(why, sizeof why,
			 "transfer info refused by P rank %d: %s transfer infos wait for rooms "
			 "without a sender (%s)",
			 p->rank, mine ? "this D session's" : "too many",
			 mine ? "p_session_parked_max" : "p_parked_max");
		lc__prefill_refuse_info(p, s, t, LC_FAIL_BAD_INPUT, why);
		return;
	}
	k->at_ns = lc__now_ns();
	k->descs = descs;
	snprintf(k->ename, sizeof k->ename, "%s", s->ename);
	memcpy(k->secret, secret, LC__MSG_SECRET_LEN);
	snprintf(k->peer, sizeof k->peer, "%s", peer);
	k->info = *t;
	t->pages = t->slots = NULL; /* the park owns them now */
	p->parked[p->nparked++] = k;
	p->parked_descs += descs;
	s->parked++;
	s->parked_descs += descs;
	LC__COUNT(p->ctx, infos_parked);
	LC__DEBUG("prefill %s: room %llu from %s parked until its sender comes", p->name,
		  (unsigned long long)t->room, s->ename);
}

/* Whether room is among those touched (the list taken from under `lock`). */
static bool touched(const uint64_t *rooms, size_t n, bool all, uint64_t room)
{
	if (all)
		return true;
	for (size_t i = 0; i < n; i++)
		if (rooms[i] == room)
			return true;
	return false;
}

/* A cancelled info's sender has come: its room fails with D's reason when
 * the info could have claimed it (the sender's pairing value, or none),
 * else the cancel is nobody's. Control thread. */
static void cancel_parked(lc_prefill_t *p, const lc__parked_t *k)
{
	bool ours = false;
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t *s = p->senders; s; s = s->next)
		if (s->room == k->info.room)
			ours = !s->pair_len || lc__pair_equal(s->pair, s->pair_len, k->info.pair,
							      k->info.pair_len);
	pthread_mutex_unlock(&p->lock);
	if (!ours) {
		LC__DEBUG("prefill %s: room %llu: a cancelled transfer info without the sender's "
			  "pairing value: dropped",
			  p->name, (unsigned long long)k->info.room);
		return;
	}
	LC__COUNT(p->ctx, infos_cancelled_parked);
	if (lc_engine_room_cancel(p->engine, k->info.room, k->reason) == 0)
		LC__INFO("prefill %s: room %llu failed: %s", p->name,
			 (unsigned long long)k->info.room, k->reason);
}

/* Parked infos of a touched room: taken where the room has a sender now,
 * refused where a destroyed one refuses them, else left parked. */
static void settle_touched(lc_prefill_t *p)
{
	uint64_t rooms[LC__P_TOUCHED];
	pthread_mutex_lock(&p->lock);
	size_t n = p->ntouched;
	bool all = p->touched_all;
	memcpy(rooms, p->touched, n * sizeof *rooms);
	p->ntouched = 0;
	p->touched_all = false;
	pthread_mutex_unlock(&p->lock);
	if (!n && !all)
		return;
	for (size_t i = 0; i < p->nparked;) {
		lc__parked_t *k = p->parked[i];
		uint64_t room = k->info.room;
		pthread_mutex_lock(&p->lock);
		bool sender = false;
		for (lc_sender_t *s = p->senders; s && !sender; s = s->next)
			sender = s->room == room;
		pthread_mutex_unlock(&p->lock);
		int fail;
		char why[LC_REASON_MAX];
		bool gone =
			!sender && touched(rooms, n, all, room) &&
			lc__prefill_stomb_refuses(p, &k->info, k->at_ns, &fail, why, sizeof why);
		if (!touched(rooms, n, all, room) || (!sender && !gone)) {
			i++;
			continue;
		}
		k = unpark(p, i); /* the entry at i is another one now */
		lc__dsess_t *s = owner_of(p, k);
		if (k->cancelled) {
			if (!gone)
				cancel_parked(p, k);
		} else if (!s) {
			LC__DEBUG("prefill %s: room %llu: the session of a parked transfer info "
				  "is gone: dropped",
				  p->name, (unsigned long long)room);
		} else if (gone) {
			LC__COUNT(p->ctx, infos_refused_ended);
			lc__prefill_refuse_info(p, s, &k->info, fail, why);
		} else {
			lc__prefill_take_info(p, s, &k->info, k->secret, k->peer);
		}
		parked_free(k);
	}
}

uint64_t lc__prefill_park_run(lc_prefill_t *p)
{
	settle_touched(p);
	uint64_t park_ns = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_park_ms) * 1000000ull;
	uint64_t now = lc__now_ns(), next = UINT64_MAX;
	for (size_t i = 0; i < p->nparked;) {
		lc__parked_t *k = p->parked[i];
		uint64_t dl = k->at_ns + park_ns;
		if (now < dl) {
			next = LC__MIN(next, dl);
			i++;
			continue;
		}
		k = unpark(p, i);
		if (k->cancelled) { /* D knows: it cancelled */
			parked_free(k);
			continue;
		}
		lc__dsess_t *s = owner_of(p, k);
		uint64_t c = LC__COUNT(p->ctx, infos_refused_no_room) + 1;
		char why[LC_REASON_MAX];
		snprintf(why, sizeof why,
			 "P has no such room: P rank %d had no sender for room %llu within "
			 "p_park_ms (%llu ms) of D's transfer info",
			 p->rank, (unsigned long long)k->info.room,
			 (unsigned long long)(park_ns / 1000000));
		if (c % 1024 == 1)
			LC__INFO("prefill %s: %s (%llu so far)", p->name, why,
				 (unsigned long long)c);
		if (s)
			lc__prefill_refuse_info(p, s, &k->info, LC_FAIL_BOOTSTRAP_TIMEOUT, why);
		parked_free(k);
	}
	return next;
}

bool lc__prefill_park_cancel(lc_prefill_t *p, const lc__dsess_t *s, uint64_t room,
			    const char *reason)
{
	bool hit = false;
	for (size_t i = 0; i < p->nparked; i++) {
		lc__parked_t *k = p->parked[i];
		if (k->info.room != room || strcmp(k->ename, s->ename))
			continue;
		if (!k->cancelled)
			lc__reason(k->reason, sizeof k->reason,
				   "D %.100s cancelled the room before its sender came: %.300s",
				   k->info.session, reason);
		k->cancelled = true;
		hit = true;
	}
	return hit;
}


void lc__prefill_park_clear(lc_prefill_t *p)
{
	while (p->nparked) {
		lc__parked_t *k = unpark(p, p->nparked - 1);
		lc__dsess_t *s = owner_of(p, k);
		char why[LC_REASON_MAX];
		snprintf(why, sizeof why, "P rank %d stopped before room %llu had a sender",
			 p->rank, (unsigned long long)k->info.room);
		if (s)
			lc__prefill_refuse_info(p, s, &k->info, LC_FAIL_STOPPED, why);
		parked_free(k);
	}
	free(p->parked);
	p->parked = NULL;
	p->nparked = p->parked_cap = 0;
	p->parked_descs = 0;
}
