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
#include <unistd.h>

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
			     .final_ns = &r->final_ns,
			     .notify = &d->notify};
	lc__room_state_apply(&d->rooms, &v, status, fail_reason, reason, lc__now_ns());
}

void lc__decode_set_state(lc_decode_t *d, lc_receiver_t *r, int status)
{
	apply(d, r, status, LC_FAIL_NONE, NULL);
}

static void send_cancel(lc_decode_t *d, lc_receiver_t *r, const char *reason)
{
	lc__ppeer_t *pe = r->peer;
	char why[LC_REASON_MAX];
	if (!pe || !pe->info)
		return;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m)
		return;
	m->type = LC__MSG_CANCEL;
	m->cancel.room = r->room;
	snprintf(m->cancel.session, sizeof m->cancel.session, "%s", d->session);
	snprintf(m->cancel.reason, sizeof m->cancel.reason, "%s", reason);
	for (int i = 0; i < r->plan.ntargets; i++) {
		lc__prank_t *pr = &pe->ranks[r->plan.targets[i].rank];
		uint8_t *buf;
		size_t len;
		/* A rank never registered with may still hold the room open,
		 * claimed by no one: it fails it at once (prefill_control.c).
		 * With every channel in use, P's own deadline does it. */
		if (!pr->resolved ||
		    lc__decode_chan_open(d, pe, r->plan.targets[i].rank, why, sizeof why))
			continue;
		if (!pr->has_secret && lc__random_bytes(pr->secret, LC__MSG_SECRET_LEN))
			continue;
		pr->has_secret = true;
		memcpy(m->secret, pr->secret, LC__MSG_SECRET_LEN); /* each rank its own */
		if (lc__msg_encode(m, &buf, &len))
			continue;
		if (!lc__push_send(pr->push, buf, len, 0))
			LC__D_CTL_ADD(d, msgs_sent);
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
	lc__vreason(text, sizeof text, fmt, ap);
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

/* false: out of memory (the room must not succeed without it). */
static bool keep_metadata(lc_receiver_t *r, const lc__msg_status_t *s)
{
	if (r->has_metadata || !s->metadata_len) /* the first wins */
		return true;
	r->metadata = malloc(s->metadata_len);
	if (!r->metadata)
		return false;
	memcpy(r->metadata, s->metadata, s->metadata_len);
	r->metadata_len = s->metadata_len;
	r->has_metadata = true;
	return true;
}

/* The room's accounting broke (grant_intervals_max): its count can no
 * longer prove anything, so the room fails. */
static void fail_broken(lc_decode_t *d, lc_receiver_t *r, const lc__grant_count_t *c)
{
	lc__decode_fail(d, r, LC_FAIL_TRANSFER, true,
			"D stopped counting the room: its writes left more than "
			"grant_intervals_max gaps (%llu of %llu bytes landed, %llu intervals)",
			(unsigned long long)c->covered, (unsigned long long)c->granted,
			(unsigned long long)c->intervals);
}

/* Every target said Success (r->claimed_ns): D's own count decides. The
 * room succeeds once every byte D granted for it is covered, across all P
 * ranks (fan-in): each granted byte counts once, so a duplicate never
 * stands in for a missing write. A write still landing on another lane
 * gets landed_wait_ns; after that the room fails, and the grant is revoked
 * so that nothing lands later. */
static void settle(lc_decode_t *d, lc_receiver_t *r, uint64_t now)
{
	lc__grant_count_t c = {.granted = r->grant_bytes};
	if (r->granted && lc__grant_room_count(d->ctx->grants, r->room, &c))
		c.covered = 0; /* the grant went away under the room (region withdrawn) */
	if (c.broken) {
		fail_broken(d, r, &c);
		return;
	}
	if (c.covered < c.granted) {
		if (now < r->claimed_ns + d->landed_wait_ns)
			return; /* check_deadlines asks again */
		LC__COUNT(d->ctx, rooms_short_landed);
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, true,
				"peer claimed success: %llu of %llu bytes landed",
				(unsigned long long)c.covered, (unsigned long long)c.granted);
		return;
	}
	if (r->granted) { /* every byte landed: nothing more may */
		lc_grant_revoke(d->ctx, r->room);
		r->granted = false;
	}
	char why[LC_REASON_MAX];
	if (d->checksum && lc__decode_check_sum(d, r, why, sizeof why)) {
		LC__COUNT(d->ctx, rooms_checksum_failed);
		LC__WARN_PEER("decode %s: room %llu: %s", d->session, (unsigned long long)r->room,
			      why);
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, true, "%s", why);
		return;
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
	    s->fail_reason != LC_FAIL_TRANSFER_TIMEOUT && s->fail_reason != LC_FAIL_TRANSFER)
		return;
	if (!r->peer->ranks || (int)s->p_rank >= r->peer->info->world_size)
		return;
	lc__prank_t *pr = &r->peer->ranks[s->p_rank];
	if (r->got[t].reg_epoch == pr->reg_epoch)
		pr->registered = false;
}

/* A STATUS, LAYERS or REGISTER_REPLY of P rank p_rank of peer pe must carry
 * the secret this D registered with at that rank (constant-time compare).
 * False (counted in session_mismatches, logged rate-limited) when it does
 * not: the message is dropped. True vouches for the connection that
 * brought it (the message being handled). */
static bool proven(lc_decode_t *d, const lc__ppeer_t *pe, uint32_t p_rank, const uint8_t *secret,
		   const char *what)
{
	if (pe && pe->info && pe->ranks && p_rank < (uint32_t)pe->info->world_size &&
	    pe->ranks[p_rank].has_secret &&
	    lc__ct_equal(pe->ranks[p_rank].secret, secret, LC__MSG_SECRET_LEN)) {
		lc__pull_vouch(d->pull); /* its connection keeps its place (inbox_guard.h) */
		return true;
	}
	uint64_t n = LC__D_CTL_ADD(d, session_mismatches) + 1;
	LC__WARN_PEER("decode %s: a %s from P rank %u without this session's secret at that "
		      "rank: dropped (%llu so far)",
		      d->session, what, p_rank, (unsigned long long)n);
	return false;
}

/* The proof of a message about room (an unknown room passes: dropped below). */
static bool room_proven(lc_decode_t *d, uint64_t room, uint32_t p_rank, const uint8_t *secret,
			const char *what)
{
	lc_receiver_t *r = lc__decode_find(d, room);
	/* A final room's peer may be forgotten: whatever comes is dropped. */
	return !r || !r->peer || proven(d, r->peer, p_rank, secret, what);
}

static void handle_status(lc_decode_t *d, const lc__msg_status_t *s, const uint8_t *secret)
{
	if (!room_proven(d, s->room, s->p_rank, secret, "status"))
		return;
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
	if (s->status == LC_ROOM_BOOTSTRAPPED) {
		/* P has a sender for the room and took D's transfer info. */
		if (r->sent)
			r->got[t].acked = true;
		else
			LC__D_CTL_ADD(d, msgs_unexpected);
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
		LC__WARN_PEER("decode %s: Success for room %llu from P rank %u before D sent its "
			      "pages: ignored",
			      d->session, (unsigned long long)s->room, s->p_rank);
		return;
	}
	if (!r->got[t].responded) {
		r->got[t].responded = true;
		r->got[t].acked = true;
		r->got[t].has_sum = s->flags & LC__STATUS_HAS_CHECKSUM;
		r->got[t].sum = s->checksum;
		r->responses++;
	}
	if (!keep_metadata(r, s)) {
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, true,
				"D ran out of memory keeping the room's metadata (%u bytes)",
				(unsigned)s->metadata_len);
		return;
	}
	if (r->responses >= r->plan.required_responses && !r->claimed_ns) {
		r->claimed_ns = lc__now_ns();
		settle(d, r, r->claimed_ns);
	}
}

/* P's "layers landed" is advisory: it is counted and kept, but D's
 * layers_ready comes from its own count of what landed (decode.c), so a
 * forged or wrong LAYERS moves nothing. */
static void handle_layers(lc_decode_t *d, const lc__msg_layers_t *m, const uint8_t *secret)
{
	if (!room_proven(d, m->room, m->p_rank, secret, "layer update"))
		return;
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
static void handle_reply(lc_decode_t *d, const lc__msg_register_reply_t *m, const uint8_t *secret)
{
	bool matched = false;
	uint64_t now = lc__now_ns();
	for (int i = 0; strcmp(m->session, d->session) == 0 && i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		if (!pe->info || (int)m->p_rank >= pe->info->world_size ||
		    !pe->ranks[m->p_rank].reg_pending ||
		    !proven(d, pe, m->p_rank, secret, "registration reply"))
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
			/* Rooms waiting on the reply go on (decode_discover.c). */
			for (lc_receiver_t *r = d->receivers; r; r = r->next)
				if (r->peer == pe && r->status == LC_ROOM_BOOTSTRAPPING)
					r->next_try_ns = 0;
			pthread_cond_broadcast(&d->cond);
			continue;
		}
		pr->registered = false;
		pr->refused = m->result;
		pr->retry_ns = now + LC__D_REFUSED_RETRY_NS;
		snprintf(pr->refuse_reason, sizeof pr->refuse_reason, "%s", m->reason);
		for (lc_receiver_t *r = d->receivers; r; r = r->next)
			if (r->peer == pe && target_of(r, m->p_rank) >= 0)
				lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, true,
						"P rank %u refused this D: %s", m->p_rank,
						m->reason);
	}
	if (!matched) {
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__WARN_PEER("decode %s: registration reply from P rank %u answers no outstanding "
			      "registration: dropped",
			      d->session, m->p_rank);
		return;
	}
	if (m->result) {
		LC__D_CTL_ADD(d, registrations_refused);
		LC__ERROR_PEER("decode %s: P rank %u refused the registration: %s", d->session,
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
		int version = lc__msg_peek_version(buf, len);
		if (version >= 0 && version != LC__MSG_VERSION) {
			LC__D_CTL_ADD(d, msgs_old_version);
			LC__ERROR_PEER(
				"decode %s: a P speaks control message version %d, this D speaks "
				"%d: dropped; run one library version on both sides",
				d->session, version, LC__MSG_VERSION);
			free(m);
			return;
		}
		LC__D_CTL_ADD(d, msgs_malformed);
		LC__WARN_PEER("decode %s: dropped a malformed message (%zu bytes): %s", d->session,
			      len, why);
		free(m);
		return;
	}
	pthread_mutex_lock(&d->lock);
	switch (m->type) {
	case LC__MSG_STATUS:
		handle_status(d, &m->status, m->secret);
		break;
	case LC__MSG_LAYERS:
		handle_layers(d, &m->layers, m->secret);
		break;
	case LC__MSG_REGISTER_REPLY:
		handle_reply(d, &m->reply, m->secret);
		break;
	default:
		LC__D_CTL_ADD(d, msgs_unexpected);
		LC__WARN_PEER("decode %s: unexpected %s message dropped", d->session,
			      lc__msg_type_name(m->type));
	}
	pthread_mutex_unlock(&d->lock);
	lc__msg_free(m);
	free(m);
}

/* REGISTER is always answered (accepted or refused): a rank silent for
 * connect_timeout_ms after one cannot reach this D, or this D cannot reach
 * it. Its rooms fail with a reason that names both addresses and the
 * setting to change; the next room registers again. Lock held. */
static void replies_overdue(lc_decode_t *d, uint64_t now, uint64_t *next)
{
	for (int i = 0; i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		for (int k = 0; pe->info && pe->ranks && k < pe->info->world_size; k++) {
			lc__prank_t *pr = &pe->ranks[k];
			if (!pr->reg_pending)
				continue;
			uint64_t dl = pr->reg_sent_ns + d->reply_wait_ns;
			if (now < dl) {
				*next = LC__MIN(*next, dl);
				continue;
			}
			pr->reg_pending = false;
			pr->registered = false;
			LC__D_CTL_ADD(d, registrations_unanswered);
			char why[LC_REASON_MAX];
			bool unreachable = pr->push && !lc__push_up(pr->push);
			if (unreachable)
				lc__reason(why, sizeof why,
					   "set P's host or LAYERCAKE_ADVERTISE_HOST on P: this D "
					   "cannot reach P rank %d at %s, the address P advertised",
					   k, pr->endpoint);
			else
				lc__reason(
					why, sizeof why,
					"set D's host or LAYERCAKE_ADVERTISE_HOST on D: P rank %d "
					"at %s cannot reach this D at %s (data %s)",
					k, pr->endpoint, pr->adv_status, pr->adv_data);
			/* A CURVE handshake that fails reads as unreachable too. */
			LC__ERROR("decode %s: no registration reply within connect_timeout_ms "
				  "(%llu ms): %s%s",
				  d->session, (unsigned long long)(d->reply_wait_ns / 1000000), why,
				  !unreachable ? ""
				  : lc__zctx_public_key(d->z)[0]
					  ? " (or the CURVE handshake failed: "
					    "does P hold the same shared "
					    "secret or keys?)"
					  : " (or P requires the shared "
					    "secret, which this D lacks)");
			for (lc_receiver_t *r = d->receivers; r; r = r->next)
				if (r->peer == pe && r->planned && target_of(r, (uint32_t)k) >= 0)
					lc__decode_fail(
						d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, true,
						"%s (no REGISTER reply in %llu ms, "
						"connect_timeout_ms)",
						why,
						(unsigned long long)(d->reply_wait_ns / 1000000));
			if (unreachable) {
				/* Nothing there: the next room looks the route up
				 * again (a P restarted elsewhere, looked up once
				 * before it registered again, is found then). */
				lc__decode_chan_close(d, pr);
				pr->resolved = false;
			}
		}
	}
}

/* A room whose bytes are still landing is looked at this often. */
#define LANDED_POLL_NS (2ull * 1000000)

/* A live room's states are looked at at least this often (a broken grant
 * is found by looking), and so is a D that had one within it; a D with
 * none for longer sleeps until woken (lc__decode_ctl_wake), IDLE_POLL_MS
 * bounding a wake-up lost to a bug. */
#define LIVE_POLL_MS 100
#define IDLE_POLL_MS 2000

/* The first real target of a room sent out that has not confirmed it has
 * the room (a sender there took D's transfer info), or -1. */
static int unconfirmed(const lc_receiver_t *r)
{
	for (int i = 0; r->sent && i < r->plan.ntargets; i++)
		if (!r->plan.targets[i].dummy && !r->got[i].acked)
			return i;
	return -1;
}

/* D counts its room as bootstrapped once every P rank it sent pages to has
 * a sender for it: within bootstrap_timeout_ms of the receiver's creation,
 * and never sooner than connect_timeout_ms after the send (an answer's
 * round trip). Else the room fails: P has no such room (a request P never
 * got, or got and dropped), and waiting for the transfer deadline would
 * hold D's pages for nothing. True when it failed. */
static bool check_confirmed(lc_decode_t *d, lc_receiver_t *r, uint64_t now, uint64_t *next)
{
	int t = unconfirmed(r);
	if (t < 0 || r->claimed_ns)
		return false;
	uint64_t dl = LC__MAX(r->created_ns + d->bootstrap_ns, r->sent_ns + d->reply_wait_ns);
	if (now < dl) {
		*next = LC__MIN(*next, dl);
		return false;
	}
	lc__decode_fail(d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, true,
			"P has no such room: P rank %d did not confirm a sender for room %llu "
			"within bootstrap_timeout_ms (%llu ms)",
			r->plan.targets[t].rank, (unsigned long long)r->room,
			(unsigned long long)(d->bootstrap_ns / 1000000));
	return true;
}

/* Deadlines of every state; returns ms until the next one (capped). */
static int check_deadlines(lc_decode_t *d, uint64_t now)
{
	uint64_t next = now + IDLE_POLL_MS * 1000000ull;
	bool live = false;
	pthread_mutex_lock(&d->lock);
	replies_overdue(d, now, &next);
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (lc__decode_final(r))
			continue;
		live = true;
		lc__grant_count_t c;
		if (r->granted && !lc__grant_room_count(d->ctx->grants, r->room, &c) && c.broken) {
			fail_broken(d, r, &c);
			continue;
		}
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
		if (r->status == LC_ROOM_BOOTSTRAPPING && r->default_bootstrap && !r->peer->info &&
		    now >= r->created_ns + d->reply_wait_ns) {
			/* Nobody at the default address: a D on another host than its
			 * P's bootstrap server was given none. */
			lc__decode_fail(
				d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, false,
				"give D the bootstrap server's host:port: none answers at "
				"%s, the default (bootstrap NULL; bootstrap_port) in %llu ms%s%s",
				r->peer->addr, (unsigned long long)(d->reply_wait_ns / 1000000),
				r->reason[0] ? ": " : "", r->reason);
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
		} else if (!check_confirmed(d, r, now, &next)) {
			uint64_t dl = r->bootstrapped_ns + d->waiting_ns;
			if (now >= dl)
				lc__decode_fail(d, r, LC_FAIL_WAITING_TIMEOUT, true,
						"no final status within %llu ms of bootstrap",
						(unsigned long long)(d->waiting_ns / 1000000));
			else if (dl < next)
				next = dl;
		}
	}
	if (live)
		d->ctl_live_ns = now;
	bool idle = now - d->ctl_live_ns >= LIVE_POLL_MS * 1000000ull;
	if (!idle)
		next = LC__MIN(next, now + LIVE_POLL_MS * 1000000ull);
	atomic_store(&d->ctl_idle, idle);
	pthread_mutex_unlock(&d->lock);
	return (int)((next - now) / 1000000) + 1;
}

void lc__decode_ctl_wake(lc_decode_t *d)
{
	uint64_t one = 1;
	if (d->evfd >= 0) {
		ssize_t rc = write(d->evfd, &one, sizeof one); /* full: already due */
		LC__UNUSED(rc);
	}
}

#ifdef LC_HAVE_ZMQ
void *lc__decode_ctl_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-decode-ctl");
	lc_decode_t *d = arg;
	while (!atomic_load(&d->stop)) {
		int wait_ms = check_deadlines(d, lc__now_ns());
		zmq_pollitem_t it[2] = {
			{.socket = lc__pull_socket(d->pull), .events = ZMQ_POLLIN},
			{.fd = d->evfd, .events = ZMQ_POLLIN},
		};
		if (zmq_poll(it, 2, wait_ms) < 0 && zmq_errno() != EINTR)
			break;
		if (it[1].revents & ZMQ_POLLIN) {
			uint64_t v;
			ssize_t rc = read(d->evfd, &v, sizeof v);
			LC__UNUSED(rc);
		}
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
