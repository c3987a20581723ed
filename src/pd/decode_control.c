/*
 * The decode side's control thread: P's statuses, layer updates and
 * registration replies; the deadlines of every state; and the receiver's
 * status, which changes only here, through core/room.c's legal table.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "pd/decode_int.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#else
/* Built without ZeroMQ (LC_WITH_ZMQ=OFF): no control thread calls the
 * handlers below. */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

lc_receiver_t *lc__decode_find(lc_decode_t *d, uint64_t room)
{
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->room == room)
			return r;
	return NULL;
}

static void apply(lc_decode_t *d, lc_receiver_t *r, int status, int fail_reason, const char *reason)
{
	lc__room_view_t v = {.id = r->room,
			     .side = "receiver room",
			     .status = &r->status,
			     .fail_reason = &r->fail_reason,
			     .reason = r->reason,
			     .reason_cap = sizeof r->reason,
			     .opened_ns = r->created_ns,
			     .bootstrapped_ns = &r->bootstrapped_ns,
			     .final_ns = &r->final_ns};
	lc__room_state_apply(&d->rooms, &v, status, fail_reason, reason, lc__now_ns());
}

void lc__decode_set_state(lc_decode_t *d, lc_receiver_t *r, int status)
{
	apply(d, r, status, LC_FAIL_NONE, NULL);
}

static void send_cancel(lc_decode_t *d, lc_receiver_t *r, const char *reason)
{
	lc__ppeer_t *pe = r->peer;
	if (!pe->info)
		return;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m)
		return;
	m->type = LC__MSG_CANCEL;
	m->cancel.room = r->room;
	snprintf(m->cancel.session, sizeof m->cancel.session, "%s", d->session);
	snprintf(m->cancel.reason, sizeof m->cancel.reason, "%s", reason);
	uint8_t *buf;
	size_t len;
	if (!lc__msg_encode(m, &buf, &len)) {
		for (int i = 0; i < r->plan.ntargets; i++) {
			lc__prank_t *pr = &pe->ranks[r->plan.targets[i].rank];
			if (pr->push && !lc__push_send(pr->push, buf, len, 0))
				LC__D_CTL_ADD(d, msgs_sent);
		}
		free(buf);
	}
	free(m);
}

void lc__decode_fail(lc_decode_t *d, lc_receiver_t *r, int reason, bool tell_p, const char *fmt,
		     ...)
{
	char text[LC_REASON_MAX];
	if (lc__decode_final(r))
		return;
	if (r->granted) {
		lc_grant_revoke(d->ctx, r->room);
		r->granted = false;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	apply(d, r, LC_ROOM_FAILED, reason, text);
	/* Also before the transfer info went out: P may already hold the room
	 * open (its sender exists) and would otherwise wait for its bootstrap
	 * deadline. Targets not yet discovered cannot be told. */
	if (tell_p)
		send_cancel(d, r, r->reason);
}

/* The index of P rank p_rank among the room's targets, or -1. */
static int target_of(const lc_receiver_t *r, uint32_t p_rank)
{
	for (int i = 0; i < r->plan.ntargets; i++)
		if (r->plan.targets[i].rank == (int)p_rank)
			return i;
	return -1;
}

static void keep_metadata(lc_receiver_t *r, const lc__msg_status_t *s)
{
	if (r->has_metadata || !s->metadata_len) /* the first wins */
		return;
	r->metadata = malloc(s->metadata_len);
	if (r->metadata) {
		memcpy(r->metadata, s->metadata, s->metadata_len);
		r->metadata_len = s->metadata_len;
		r->has_metadata = true;
	}
}

/* Every target said Success (r->claimed_ns): D's own count decides. The
 * room succeeds once every byte D granted for it has landed, across all P
 * ranks (fan-in); bytes beyond the grant (duplicates) never make up for
 * missing ones in the check, since landed only has to reach granted. A
 * write still landing on another lane gets landed_wait_ns; after that the
 * room fails, and the grant is revoked so that nothing lands later. */
static void settle(lc_decode_t *d, lc_receiver_t *r, uint64_t now)
{
	uint64_t granted = r->grant_bytes, landed = 0;
	if (r->granted && lc__grant_room_bytes(d->ctx->grants, r->room, &granted, &landed))
		landed = 0; /* the grant went away under the room (region withdrawn) */
	if (landed < granted) {
		if (now < r->claimed_ns + d->landed_wait_ns)
			return; /* check_deadlines asks again */
		LC__COUNT(d->ctx, rooms_short_landed);
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, true,
				"peer claimed success: %llu of %llu bytes landed",
				(unsigned long long)landed, (unsigned long long)granted);
		return;
	}
	for (int i = 0; i < r->plan.ntargets; i++)
		r->got[i].layers = d->layout->layers;
	if (r->granted) { /* every byte landed: nothing more may */
		lc_grant_revoke(d->ctx, r->room);
		r->granted = false;
	}
	lc__decode_set_state(d, r, LC_ROOM_SUCCESS);
}

/* A session P no longer knows, or one P blocked after a failure of the
 * link or of this D (an acknowledgement timeout: a D back from SIGSTOP):
 * the next room registers again, which clears P's block. Only for a room
 * that went out under the rank's current registration: a late status of
 * an older room must not undo a registration made since (that would fail
 * the rooms opened under it at P). */
static void forget_registration(lc_receiver_t *r, int t, const lc__msg_status_t *s)
{
	if (s->fail_reason != LC_FAIL_SESSION_GONE && s->fail_reason != LC_FAIL_SESSION_BLOCKED &&
	    s->fail_reason != LC_FAIL_TRANSFER_TIMEOUT)
		return;
	if (!r->peer->ranks || (int)s->p_rank >= r->peer->info->world_size)
		return;
	lc__prank_t *pr = &r->peer->ranks[s->p_rank];
	if (r->got[t].reg_epoch == pr->reg_epoch)
		pr->registered = false;
}

static void handle_status(lc_decode_t *d, const lc__msg_status_t *s)
{
	LC__D_CTL_ADD(d, statuses);
	lc_receiver_t *r = lc__decode_find(d, s->room);
	int t = r ? target_of(r, s->p_rank) : -1;
	if (t < 0 || lc__decode_final(r) || r->plan.targets[t].dummy) {
		/* Unknown rooms never create entries (bounded tables). */
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__DEBUG("decode %s: status for room %llu from P rank %u ignored", d->session,
			  (unsigned long long)s->room, s->p_rank);
		return;
	}
	if (s->status == LC_ROOM_FAILED) {
		forget_registration(r, t, s);
		lc__decode_fail(d, r, s->fail_reason ? (int)s->fail_reason : LC_FAIL_TRANSFER,
				false, "P rank %u: %s", s->p_rank, s->reason);
		return;
	}
	if (!r->sent) {
		/* Nothing granted yet: no P rank can have finished the room. */
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__WARN("decode %s: Success for room %llu from P rank %u before D sent its "
			 "pages: ignored",
			 d->session, (unsigned long long)s->room, s->p_rank);
		return;
	}
	if (!r->got[t].responded) {
		r->got[t].responded = true;
		r->responses++;
	}
	keep_metadata(r, s);
	if (r->responses >= r->plan.required_responses && !r->claimed_ns) {
		r->claimed_ns = lc__now_ns();
		settle(d, r, r->claimed_ns);
	}
}

static void handle_layers(lc_decode_t *d, const lc__msg_layers_t *m)
{
	LC__D_CTL_ADD(d, layer_updates);
	lc_receiver_t *r = lc__decode_find(d, m->room);
	int t = r ? target_of(r, m->p_rank) : -1;
	if (t >= 0 && !lc__decode_final(r) && m->layers <= d->layout->layers &&
	    m->layers > r->got[t].layers)
		r->got[t].layers = m->layers;
	else
		LC__D_CTL_ADD(d, msgs_unexpected);
}

/* A REGISTER_REPLY is believed only when it answers a REGISTER of this
 * session that is still outstanding at that P rank; anything else (a
 * forgery, a duplicate) is counted and dropped. A refusal fails the rooms
 * waiting on the rank and is tried again later (LC__D_REFUSED_RETRY_NS):
 * it never blocks this D from the P for good. */
static void handle_reply(lc_decode_t *d, const lc__msg_register_reply_t *m)
{
	bool matched = false;
	uint64_t now = lc__now_ns();
	for (int i = 0; strcmp(m->session, d->session) == 0 && i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		if (!pe->info || (int)m->p_rank >= pe->info->world_size ||
		    !pe->ranks[m->p_rank].reg_pending)
			continue;
		if (now - pe->ranks[m->p_rank].reg_sent_ns > LC__D_REPLY_WAIT_NS) {
			pe->ranks[m->p_rank].reg_pending = false; /* never answered */
			continue;
		}
		lc__prank_t *pr = &pe->ranks[m->p_rank];
		matched = true;
		pr->reg_pending = false;
		if (!m->result) {
			pr->refused = 0;
			continue;
		}
		pr->registered = false;
		pr->refused = m->result;
		pr->retry_ns = now + LC__D_REFUSED_RETRY_NS;
		snprintf(pr->refuse_reason, sizeof pr->refuse_reason, "%s", m->reason);
		for (lc_receiver_t *r = d->receivers; r; r = r->next)
			if (r->peer == pe && target_of(r, m->p_rank) >= 0)
				lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false,
						"P rank %u refused this D: %s", m->p_rank,
						m->reason);
	}
	if (!matched) {
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__WARN("decode %s: registration reply from P rank %u answers no outstanding "
			 "registration: dropped",
			 d->session, m->p_rank);
		return;
	}
	if (m->result) {
		LC__D_CTL_ADD(d, registrations_refused);
		LC__ERROR("decode %s: P rank %u refused the registration: %s", d->session,
			  m->p_rank, m->reason);
	}
}

static void handle_message(lc_decode_t *d, const void *buf, size_t len)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	char why[200];
	if (!m)
		return;
	LC__D_CTL_ADD(d, msgs_received);
	if (lc__msg_decode(buf, len, m, why, sizeof why)) {
		LC__D_CTL_ADD(d, msgs_malformed);
		LC__WARN("decode %s: dropped a malformed message (%zu bytes): %s", d->session, len,
			 why);
		free(m);
		return;
	}
	pthread_mutex_lock(&d->lock);
	switch (m->type) {
	case LC__MSG_STATUS:
		handle_status(d, &m->status);
		break;
	case LC__MSG_LAYERS:
		handle_layers(d, &m->layers);
		break;
	case LC__MSG_REGISTER_REPLY:
		handle_reply(d, &m->reply);
		break;
	default:
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__WARN("decode %s: unexpected %s message dropped", d->session,
			 lc__msg_type_name(m->type));
	}
	pthread_mutex_unlock(&d->lock);
	lc__msg_free(m);
	free(m);
}

/* A room whose bytes are still landing is looked at this often. */
#define LANDED_POLL_NS (2ull * 1000000)

/* Deadlines of every state; returns ms until the next one (capped). */
static int check_deadlines(lc_decode_t *d, uint64_t now)
{
	uint64_t next = now + 200ull * 1000000;
	pthread_mutex_lock(&d->lock);
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (lc__decode_final(r))
			continue;
		if (r->claimed_ns) {
			settle(d, r, now);
			if (lc__decode_final(r))
				continue;
			/* Bytes still landing: look again soon, up to the wait's end. */
			uint64_t dl =
				LC__MIN(now + LANDED_POLL_NS, r->claimed_ns + d->landed_wait_ns);
			if (dl < next)
				next = dl;
			continue;
		}
		if (r->status == LC_ROOM_BOOTSTRAPPING) {
			uint64_t dl = r->created_ns + d->bootstrap_ns;
			if (now >= dl)
				lc__decode_fail(d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, false,
						"not bootstrapped within %llu ms%s%s",
						(unsigned long long)(d->bootstrap_ns / 1000000),
						r->reason[0] ? ": " : "", r->reason);
			else if (dl < next)
				next = dl;
		} else {
			uint64_t dl = r->bootstrapped_ns + d->waiting_ns;
			if (now >= dl)
				lc__decode_fail(d, r, LC_FAIL_WAITING_TIMEOUT, true,
						"no final status within %llu ms of bootstrap",
						(unsigned long long)(d->waiting_ns / 1000000));
			else if (dl < next)
				next = dl;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return (int)((next - now) / 1000000) + 1;
}

#ifdef LC_HAVE_ZMQ
void *lc__decode_ctl_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-decode-ctl");
	lc_decode_t *d = arg;
	while (!atomic_load(&d->stop)) {
		int wait_ms = check_deadlines(d, lc__now_ns());
		zmq_pollitem_t it = {.socket = lc__pull_socket(d->pull), .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, LC__MIN(wait_ms, 100)) < 0 && zmq_errno() != EINTR)
			break;
		for (int k = 0; k < 256; k++) {
			void *buf;
			size_t len;
			if (lc__pull_recv(d->pull, &buf, &len) <= 0)
				break;
			handle_message(d, buf, len);
			free(buf);
		}
	}
	return NULL;
}
#endif
