/*
 * The prefill side's control thread (pd/prefill_int.h has the structures and
 * the locking): D's messages come in (registrations are decided in
 * prefill_register.c, whether a transfer info is taken in prefill_admit.c;
 * cancels go to the engine here), and each round flushes what the engine
 * queued (prefill_outbox.c) and settles the parked transfer infos.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ctx.h"
#include "engine/engine.h"
#include "pd/prefill_int.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#else
/* Built without ZeroMQ (LC_WITH_ZMQ=OFF): no control thread calls the
 * handlers below. */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#define IDLE_POLL_MS 2000

/* ---- intake (control thread) ---- */

/* Whether this P rank has a sender for the room (lock held). */
static bool room_known(lc_prefill_t *p, uint64_t room)
{
	lc_sender_t *s = p->senders;
	while (s && s->room != room)
		s = s->next;
	return s != NULL;
}

/* A dummy from no registered session opens a room only where P already has
 * a sender for it: anyone could name a fresh room id, and each would cost P
 * an engine room. Counted, logged rate-limited (LC__LOG_PEER). */
static bool dummy_refused(lc_prefill_t *p, const lc__msg_transfer_info_t *t)
{
	pthread_mutex_lock(&p->lock);
	bool known = room_known(p, t->room);
	pthread_mutex_unlock(&p->lock);
	if (known)
		return false;
	uint64_t n = LC__COUNT(p->ctx, infos_refused_unknown) + 1;
	LC__WARN_PEER("prefill %s: refused a dummy transfer info for unknown room %llu from "
		      "unregistered %s (%llu so far)",
		      p->name, (unsigned long long)t->room, t->session, (unsigned long long)n);
	return true;
}

/* The evicted session a transfer info proves (its id and secret), or NULL:
 * it is told "register again" at the endpoint it registered. */
static const lc__ptomb_t *tomb_of(const lc_prefill_t *p, const char *session, const uint8_t *secret)
{
	for (size_t i = 0; i < LC__P_TOMBS; i++) {
		const lc__ptomb_t *t = &p->tombs[i];
		if (t->name[0] && !strcmp(t->name, session) &&
		    lc__ct_equal(t->secret, secret, LC__MSG_SECRET_LEN))
			return t;
	}
	return NULL;
}

/* A transfer info from no registered session: dropped without a word
 * (P opens no connection to an endpoint an unregistered sender names),
 * counted, logged rate-limited. False when it proves an evicted session,
 * which is answered. */
static bool unregistered_dropped(lc_prefill_t *p, const lc__msg_t *msg)
{
	if (tomb_of(p, msg->info.session, msg->secret))
		return false;
	uint64_t n = LC__COUNT(p->ctx, infos_refused_unregistered) + 1;
	LC__LOG_PEER(LC_LOG_WARN,
		     "prefill %s: dropped a transfer info for room %llu from unregistered %.200s "
		     "(%llu so far)",
		     p->name, (unsigned long long)msg->info.room, msg->info.session,
		     (unsigned long long)n);
	return true;
}

/* A transfer info binds the room to the incarnation whose secret it carries
 * (lc__prefill_session_owned); one that proves none is treated as from no
 * registered session. */
static void handle_info(lc_prefill_t *p, lc__msg_t *msg, const char *peer)
{
	lc__msg_transfer_info_t *t = &msg->info;
	LC__P_CTL_ADD(p, transfer_infos);
	bool dummy = t->flags & LC__INFO_DUMMY;
	lc__dsess_t *s =
		lc__prefill_session_owned(p, t->session, msg->secret, peer, "transfer info");
	if (s) {
		s->active_ns = lc__now_ns();
		lc__prefill_take_info(p, s, t, msg->secret, peer);
		return;
	}
	if (dummy) {
		if (!dummy_refused(p, t))
			lc__prefill_take_info(p, NULL, t, msg->secret, peer);
		return;
	}
	if (unregistered_dropped(p, msg))
		return;
	/* An evicted session: tell D instead of letting it wait, at the
	 * endpoint it registered. */
	const char *fail = "session not registered with this P rank (evicted while idle); "
			   "register again";
	LC__WARN_PEER("prefill %s: room %llu from %.200s: %s", p->name, (unsigned long long)t->room,
		      t->session, fail);
	lc__msg_t *m = calloc(1, sizeof *m);
	const lc__ptomb_t *tomb = tomb_of(p, t->session, msg->secret);
	if (!m || !tomb) {
		free(m);
		return;
	}
	m->type = LC__MSG_STATUS;
	m->status.room = t->room;
	m->status.p_rank = (uint32_t)p->rank;
	m->status.status = LC_ROOM_FAILED;
	m->status.fail_reason = LC_FAIL_SESSION_GONE;
	lc__reason(m->status.reason, sizeof m->status.reason, "%s", fail);
	memcpy(m->secret, msg->secret, LC__MSG_SECRET_LEN);
	lc__prefill_reply(p, tomb->status_ep, tomb->key[0] ? tomb->key : NULL, m);
	free(m);
}

/* A D that refused a room before any transfer info went out (its
 * registration refused, its pages unable to pair with P's): the room is
 * claimed by no destination yet, and whoever may talk to this socket could
 * claim it with a transfer info and cancel it, so its cancel is taken and
 * P fails the room at once with D's reason instead of at bootstrap_timeout_ms.
 * True when it did. Control thread, as every transfer info: nothing claims
 * the room in between. */
static bool cancel_unclaimed(lc_prefill_t *p, const lc__msg_cancel_t *c)
{
	lc_room_info_t info = {.size = sizeof info};
	if (lc_engine_room_status(p->engine, c->room, &info) ||
	    info.status != LC_ROOM_BOOTSTRAPPING || info.dst_count)
		return false;
	char why[LC_REASON_MAX];
	lc__reason(why, sizeof why, "D %.100s refused the room: %.300s", c->session, c->reason);
	if (lc_engine_room_cancel(p->engine, c->room, why))
		return false;
	LC__INFO("prefill %s: room %llu failed: %s", p->name, (unsigned long long)c->room, why);
	return true;
}

/* A CANCEL is taken only from a registered session that proves it (its
 * secret), for a room that incarnation is a destination of (anyone can name
 * a room id). */
static void handle_cancel(lc_prefill_t *p, const lc__msg_t *msg, const char *peer)
{
	const lc__msg_cancel_t *c = &msg->cancel;
	LC__P_CTL_ADD(p, cancels);
	lc__dsess_t *s = lc__prefill_session_owned(p, c->session, msg->secret, peer, "cancel");
	bool known = s != NULL;
	int rc = known ? lc__engine_room_cancel_from(p->engine, c->room, s->ename, c->reason)
		       : -ENOENT;
	if (rc == -ENOENT && known && lc__prefill_park_cancel(p, s, c->room, c->reason)) {
		LC__INFO("prefill %s: D %s cancelled room %llu before its sender came (%s)",
			 p->name, c->session, (unsigned long long)c->room, c->reason);
		return;
	}
	if ((rc == -ENOENT || rc == -EPERM) && cancel_unclaimed(p, c))
		return;
	if (!known || rc == -EPERM) {
		atomic_fetch_add(&p->cancels_refused, 1);
		LC__WARN_PEER("prefill %s: refused a cancel of room %llu from %.200s: %s", p->name,
			      (unsigned long long)c->room, c->session,
			      known ? "not a destination of the room"
				    : "no registered session with that secret");
		return;
	}
	LC__INFO("prefill %s: D %s cancelled room %llu (%s): %s", p->name, c->session,
		 (unsigned long long)c->room, c->reason, rc ? lc_strerror(rc) : "ok");
}

/* A message of another protocol version: counted and logged (rate-limited),
 * naming both versions; an old D's REGISTER is answered with a
 * refusal in its own version, so that its rooms fail with the reason. */
static void other_version(lc_prefill_t *p, const void *buf, size_t len, int version,
			  const char *peer)
{
	char ep[LC__MSG_STR_MAX], reason[160];
	uint8_t *out;
	size_t out_len;
	uint64_t n = LC__P_CTL_ADD(p, msgs_old_version) + 1;
	LC__ERROR_PEER("prefill %s: a peer speaks control message version %d, this P speaks "
		       "%d: dropped (%llu so far); run one library version on both sides",
		       p->name, version, LC__MSG_VERSION, (unsigned long long)n);
	snprintf(reason, sizeof reason,
		 "P speaks control message version %d, this D version %d: upgrade D",
		 LC__MSG_VERSION, version);
	if (lc__msg_refuse_v1_register(buf, len, (uint32_t)p->rank, LC_ERR_PROTO, reason, ep,
				       sizeof ep, &out, &out_len))
		return;
	lc__prefill_reply_raw(p, ep, peer[0] ? peer : NULL, out, out_len);
	free(out);
}

static void handle_message(lc_prefill_t *p, const void *buf, size_t len, const char *peer)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	char why[200];
	if (!m)
		return;
	LC__P_CTL_ADD(p, msgs_received);
	int rc = lc__msg_decode(buf, len, m, why, sizeof why);
	int version = lc__msg_peek_version(buf, len);
	if (rc && version >= 0 && version != LC__MSG_VERSION) {
		other_version(p, buf, len, version, peer);
		free(m);
		return;
	}
	if (rc) {
		LC__P_CTL_ADD(p, msgs_malformed);
		LC__WARN_PEER("prefill %s: dropped a malformed message (%zu bytes): %s", p->name,
			      len, why);
		free(m);
		return;
	}
	switch (m->type) {
	case LC__MSG_REGISTER:
		lc__prefill_handle_register(p, m, peer);
		break;
	case LC__MSG_TRANSFER_INFO:
		handle_info(p, m, peer);
		break;
	case LC__MSG_CANCEL:
		handle_cancel(p, m, peer);
		break;
	default:
		LC__P_CTL_ADD(p, msgs_unexpected);
		LC__WARN_PEER("prefill %s: unexpected %s message dropped", p->name,
			      lc__msg_type_name(m->type));
	}
	lc__msg_free(m);
	free(m);
}

#ifdef LC_HAVE_ZMQ
void *lc__prefill_control_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-prefill-ctl");
	lc_prefill_t *p = arg;
	uint64_t next = UINT64_MAX; /* the earliest reply socket's expiry */
	while (!atomic_load(&p->stop)) {
		zmq_pollitem_t it[2] = {
			{.socket = lc__pull_socket(p->pull), .events = ZMQ_POLLIN},
			{.fd = p->evfd, .events = ZMQ_POLLIN},
		};
		/* Work arrives on the socket or the eventfd (queued messages,
		 * stop); the one deadline of its own is the reply sockets'. An
		 * idle P sleeps: IDLE_POLL_MS bounds a wait only in case of a
		 * wake-up lost to a bug. */
		uint64_t now = lc__now_ns();
		long ms = next <= now ? 0 : (long)LC__MIN((next - now) / 1000000 + 1, IDLE_POLL_MS);
		int n = zmq_poll(it, 2, ms);
		if (n < 0 && zmq_errno() != EINTR)
			break;
		if (it[1].revents & ZMQ_POLLIN) {
			uint64_t v;
			ssize_t rc = read(p->evfd, &v, sizeof v);
			LC__UNUSED(rc);
		}
		/* A bounded number per round so that statuses keep flowing. */
		for (int k = 0; k < 256; k++) {
			void *buf;
			size_t len;
			char peer[LC__MSG_CURVE_KEY_LEN + 1];
			if (lc__pull_recv_from(p->pull, &buf, &len, peer, sizeof peer) <= 0)
				break;
			pthread_mutex_lock(&p->send_lock);
			handle_message(p, buf, len, peer);
			pthread_mutex_unlock(&p->send_lock);
			free(buf);
		}
		pthread_mutex_lock(&p->send_lock);
		uint64_t park_next = lc__prefill_park_run(p);
		pthread_mutex_unlock(&p->send_lock);
		lc__prefill_flush(p);
		next = LC__MIN(lc__prefill_replies_expire(p, false), park_next);
	}
	lc__prefill_flush(p);
	lc__prefill_replies_expire(p, true);
	return NULL;
}
#endif
