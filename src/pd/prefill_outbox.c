/*
 * The prefill side's outbox (pd/prefill_int.h has the structures and the
 * locking): engine callbacks queue statuses and "layers landed" updates
 * (engine thread, never sending), the control thread sends them to each D
 * session, and every message P sends goes through lc__prefill_send. The
 * engine names a session by its incarnation (lc__dsess_t.ename), and each
 * message carries that incarnation's secret.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/ctx.h"
#include "pd/prefill_int.h"

#define SEND_TIMEOUT_MS 200

void lc__prefill_wake(lc_prefill_t *p)
{
	uint64_t one = 1;
	ssize_t rc = write(p->evfd, &one, sizeof one);
	LC__UNUSED(rc);
}

lc__dsess_t *lc__prefill_session_find(lc_prefill_t *p, const char *name, const uint8_t *secret)
{
	lc__dsess_t *hit = NULL;
	for (size_t i = 0; i < p->nsessions; i++)
		if (!strcmp(p->sessions[i]->name, name) &&
		    lc__ct_equal(p->sessions[i]->secret, secret, LC__MSG_SECRET_LEN))
			hit = p->sessions[i];
	return hit;
}

lc__dsess_t *lc__prefill_session_by_ename(lc_prefill_t *p, const char *ename)
{
	for (size_t i = 0; i < p->nsessions; i++)
		if (!strcmp(p->sessions[i]->ename, ename))
			return p->sessions[i];
	return NULL;
}

lc__dsess_t *lc__prefill_session_any(lc_prefill_t *p, const char *name)
{
	for (size_t i = 0; i < p->nsessions; i++)
		if (!strcmp(p->sessions[i]->name, name))
			return p->sessions[i];
	return NULL;
}

lc__dsess_t *lc__prefill_session_owned(lc_prefill_t *p, const char *name, const uint8_t *secret,
				       const char *peer, const char *what)
{
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_find(p, name, secret);
	bool known = s || lc__prefill_session_any(p, name);
	pthread_mutex_unlock(&p->lock);
	if (s && (!s->peer[0] || !strcmp(s->peer, peer))) {
		lc__pull_vouch(p->pull); /* its connection keeps its place (inbox_guard.h) */
		return s;
	}
	if (!known)
		return NULL;
	uint64_t n = LC__P_CTL_ADD(p, session_mismatches) + 1;
	LC__WARN_PEER("prefill %s: a %s for session %s proves no incarnation of it (%s); "
		      "dropped (%llu so far)",
		      p->name, what, name, s ? "sent with another CURVE key" : "wrong secret",
		      (unsigned long long)n);
	return NULL;
}

/* ---- engine callbacks: queue, never send ---- */

static lc__outmsg_t *out_new(lc_prefill_t *p)
{
	if (p->nout == p->outcap) {
		size_t cap = p->outcap ? p->outcap * 2 : 64;
		lc__outmsg_t *n = realloc(p->outq, cap * sizeof *n);
		if (!n)
			return NULL;
		p->outq = n;
		p->outcap = cap;
	}
	lc__outmsg_t *m = &p->outq[p->nout++];
	memset(m, 0, sizeof *m);
	return m;
}

static bool send_now(lc_prefill_t *p, const lc__outmsg_t *o);

/* Whether a message for the same room and session as the last queued one
 * (the final status just queued) is queued before it. Lock held. */
static bool room_queued(const lc_prefill_t *p)
{
	const lc__outmsg_t *f = &p->outq[p->nout - 1];
	for (size_t i = 0; i + 1 < p->nout; i++)
		if (p->outq[i].room == f->room && !strcmp(p->outq[i].session, f->session))
			return true;
	return false;
}

/* The final status just queued (the last entry), sent at once from the
 * engine's thread: when nothing of its room is queued before it (a room's
 * messages keep their order; other rooms' may pass, D takes each room on
 * its own) and the control thread is not using the session sockets
 * (send_lock free). It saves the control thread's wake-up on the last hop
 * of every room. Lock held; unlocks it. False: left queued for the control
 * thread. */
static bool final_now(lc_prefill_t *p)
{
	if (room_queued(p) || pthread_mutex_trylock(&p->send_lock)) {
		pthread_mutex_unlock(&p->lock);
		return false;
	}
	lc__outmsg_t o = p->outq[--p->nout];
	pthread_mutex_unlock(&p->lock);
	bool sent = send_now(p, &o);
	pthread_mutex_unlock(&p->send_lock);
	if (sent) {
		free(o.metadata);
		return true;
	}
	/* The socket would block (D not reading, high-water mark): the
	 * control thread sends it, with its timeout. */
	pthread_mutex_lock(&p->lock);
	lc__outmsg_t *m = out_new(p);
	if (m)
		*m = o;
	pthread_mutex_unlock(&p->lock);
	if (!m) {
		LC__ERROR("prefill %s: out of memory queueing the status of room %llu", p->name,
			  (unsigned long long)o.room);
		free(o.metadata);
	}
	return false;
}

void lc__prefill_on_final(void *arg, const lc_room_final_t *f)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	/* A final status supersedes the room's pending "layers landed" update
	 * to that session (advisory at D, which counts its own). */
	const char *fs = f->session ? f->session : "";
	size_t kept = 0;
	for (size_t i = 0; i < p->nout; i++)
		if (p->outq[i].type != LC__MSG_LAYERS || p->outq[i].room != f->room ||
		    strcmp(p->outq[i].session, fs))
			p->outq[kept++] = p->outq[i];
	p->nout = kept;
	lc__dsess_t *s = f->status == LC_ROOM_SUCCESS && f->session
				 ? lc__prefill_session_by_ename(p, f->session)
				 : NULL;
	if (s)
		s->proven = true; /* evicted last (prefill_register.c) */
	lc__outmsg_t *m = out_new(p);
	if (m) {
		m->type = LC__MSG_STATUS;
		m->room = f->room;
		snprintf(m->session, sizeof m->session, "%s", f->session);
		m->status = f->status;
		m->fail_reason = f->fail_reason;
		lc__reason(m->reason, sizeof m->reason, "%s", f->reason_text ? f->reason_text : "");
		if (f->status == LC_ROOM_SUCCESS && f->metadata_len &&
		    f->metadata_len <= LC_METADATA_MAX) {
			if ((m->metadata = malloc(f->metadata_len))) {
				memcpy(m->metadata, f->metadata, f->metadata_len);
				m->metadata_len = f->metadata_len;
			} else {
				/* Success without the metadata would be silently
				 * wrong at D (no first token): tell D Failed. */
				LC__ERROR("prefill %s: out of memory copying the metadata of "
					  "room %llu",
					  p->name, (unsigned long long)f->room);
				m->status = LC_ROOM_FAILED;
				m->fail_reason = LC_FAIL_TRANSFER;
				lc__reason(m->reason, sizeof m->reason,
					   "P ran out of memory copying the room's metadata");
			}
		}
		if (m->status == LC_ROOM_SUCCESS && (f->flags & LC_FINAL_HAS_CHECKSUM)) {
			m->status_flags = LC__STATUS_HAS_CHECKSUM;
			m->checksum = f->checksum;
		}
	} else {
		LC__ERROR("prefill %s: out of memory queueing the status of room %llu", p->name,
			  (unsigned long long)f->room);
	}
	if (!m) {
		pthread_mutex_unlock(&p->lock);
		lc__prefill_wake(p);
	} else if (!final_now(p)) {
		lc__prefill_wake(p);
	}
}

void lc__prefill_on_landed(void *arg, uint64_t room, const char *session, uint32_t layers)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	/* Coalesce: one pending update per (room, session). */
	lc__outmsg_t *m = NULL;
	for (size_t i = 0; i < p->nout; i++)
		if (p->outq[i].type == LC__MSG_LAYERS && p->outq[i].room == room &&
		    !strcmp(p->outq[i].session, session)) {
			m = &p->outq[i];
			break;
		}
	if (!m && (m = out_new(p))) {
		m->type = LC__MSG_LAYERS;
		m->room = room;
		snprintf(m->session, sizeof m->session, "%s", session);
	}
	if (m && layers > m->layers)
		m->layers = layers;
	/* Woken at the end of the engine's run of callbacks: a room that
	 * ended in the same run sends its final status at once and drops
	 * this update, and the control thread has nothing to do. */
	p->wake_owed = true;
	pthread_mutex_unlock(&p->lock);
}

void lc__prefill_on_notes(void *arg)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	bool wake = p->wake_owed && p->nout;
	p->wake_owed = false;
	pthread_mutex_unlock(&p->lock);
	if (wake)
		lc__prefill_wake(p);
}

/* ---- sending (control thread) ---- */

int lc__prefill_send(lc_prefill_t *p, lc__push_t *push, const lc__msg_t *m)
{
	uint8_t *buf;
	size_t len;
	int rc = lc__msg_encode(m, &buf, &len);
	if (rc) {
		LC__ERROR("prefill %s: cannot encode %s: %s", p->name, lc__msg_type_name(m->type),
			  lc_strerror(rc));
		return rc;
	}
	rc = lc__push_send(push, buf, len, SEND_TIMEOUT_MS);
	free(buf);
	if (rc) {
		LC__P_CTL_ADD(p, send_failures);
		LC__WARN_PEER("prefill %s: sending %s: %s", p->name, lc__msg_type_name(m->type),
			      lc_strerror(rc));
	} else {
		LC__P_CTL_ADD(p, msgs_sent);
	}
	return rc;
}

/* ---- answers to endpoints without a session (control thread) ---- */

bool lc__prefill_scheme_ok(const char *ep)
{
	const char *sep = strstr(ep, "://");
	const char *list = lc__config_env_str(LC__CFGS_status_schemes);
	size_t n = sep ? (size_t)(sep - ep) : 0;
	if (!n || !list)
		return false;
	for (const char *q = list; *q;) {
		size_t k = strcspn(q, ", ");
		if (k == n && !strncmp(q, ep, n))
			return true;
		q += k;
		q += strspn(q, ", ");
	}
	return false;
}

/* The reply socket to (ep, key): the one already open, else a new one, for
 * which the oldest goes when p_replies_max are open (a burst towards
 * endpoints that never answer cannot hold back a later answer). NULL when
 * none can be connected. */
static lc__preply_t *reply_socket(lc_prefill_t *p, const char *ep, const char *key)
{
	const char *k = key ? key : "";
	for (size_t i = 0; i < p->nreplies; i++)
		if (!strcmp(p->replies[i].ep, ep) && !strcmp(p->replies[i].key, k))
			return &p->replies[i];
	size_t max = (size_t)lc__ctx_cfg(p->ctx, LC__CFG_p_replies_max);
	max = LC__MIN(max, (size_t)LC__P_REPLIES_CAP);
	while (p->nreplies >= max) {
		size_t old = 0;
		for (size_t i = 1; i < p->nreplies; i++)
			if (p->replies[i].until_ns < p->replies[old].until_ns)
				old = i;
		lc__push_close_now(p->replies[old].push);
		p->replies[old] = p->replies[--p->nreplies];
		uint64_t n = LC__COUNT(p->ctx, replies_dropped) + 1;
		LC__LOG_PEER(LC_LOG_WARN,
			     "prefill %s: %zu answers to D endpoints pending (p_replies_max): "
			     "dropped the oldest (%llu so far)",
			     p->name, max, (unsigned long long)n);
	}
	lc__preply_t *r = &p->replies[p->nreplies];
	memset(r, 0, sizeof *r);
	int rc = lc__push_connect(p->z, ep, key, &r->push);
	if (rc) {
		LC__P_CTL_ADD(p, send_failures);
		LC__LOG_PEER(LC_LOG_WARN, "prefill %s: cannot connect to %.200s: %s", p->name, ep,
			     lc_strerror(rc));
		return NULL;
	}
	snprintf(r->ep, sizeof r->ep, "%s", ep);
	snprintf(r->key, sizeof r->key, "%s", k);
	r->until_ns = lc__now_ns() + (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_reply_ms) * 1000000ull;
	p->nreplies++;
	return r;
}

void lc__prefill_reply_raw(lc_prefill_t *p, const char *ep, const char *key, const void *buf,
			   size_t len)
{
	if (!lc__prefill_scheme_ok(ep)) {
		uint64_t n = LC__COUNT(p->ctx, replies_refused_scheme) + 1;
		LC__LOG_PEER(LC_LOG_WARN,
			     "prefill %s: not answering %.200s: its transport is not in "
			     "status_schemes (%llu so far)",
			     p->name, ep, (unsigned long long)n);
		return;
	}
	lc__preply_t *r = reply_socket(p, ep, key);
	if (!r)
		return;
	if (r->sent == LC__P_REPLY_MSGS) {
		uint64_t n = LC__COUNT(p->ctx, replies_dropped) + 1;
		LC__LOG_PEER(LC_LOG_WARN,
			     "prefill %s: %d answers to %.200s pending: dropped one (%llu so far)",
			     p->name, LC__P_REPLY_MSGS, ep, (unsigned long long)n);
		return;
	}
	r->sent++;
	/* Never waits: unconnected, the socket queues (LC__CHAN_SNDHWM). */
	int rc = lc__push_send(r->push, buf, len, 0);
	if (rc) {
		LC__P_CTL_ADD(p, send_failures);
		LC__LOG_PEER(LC_LOG_WARN, "prefill %s: answering %.200s: %s", p->name, ep,
			     lc_strerror(rc));
	} else {
		LC__P_CTL_ADD(p, msgs_sent);
	}
}

void lc__prefill_reply(lc_prefill_t *p, const char *ep, const char *key, const lc__msg_t *m)
{
	uint8_t *buf;
	size_t len;
	int rc = lc__msg_encode(m, &buf, &len);
	if (rc) {
		LC__ERROR("prefill %s: cannot encode %s: %s", p->name, lc__msg_type_name(m->type),
			  lc_strerror(rc));
		return;
	}
	lc__prefill_reply_raw(p, ep, key, buf, len);
	free(buf);
}

uint64_t lc__prefill_replies_expire(lc_prefill_t *p, bool all)
{
	uint64_t now = lc__now_ns(), next = UINT64_MAX;
	for (size_t i = 0; i < p->nreplies;) {
		if (!all && p->replies[i].until_ns > now) {
			next = LC__MIN(next, p->replies[i].until_ns);
			i++;
			continue;
		}
		lc__push_close(p->replies[i].push); /* LINGER: a last chance to go out */
		p->replies[i] = p->replies[--p->nreplies];
	}
	return next;
}

/* The session a queued message goes to, with a socket (send_lock held:
 * sessions are only added, replaced or freed by the control thread while
 * it holds it, so the entry stays valid after `lock` is dropped), or NULL,
 * said at debug level: the session went meanwhile. */
static lc__dsess_t *out_session(lc_prefill_t *p, const lc__outmsg_t *o)
{
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_by_ename(p, o->session);
	pthread_mutex_unlock(&p->lock);
	if (s && s->push)
		return s;
	LC__DEBUG("prefill %s: no session %s for a %s of room %llu", p->name, o->session,
		  lc__msg_type_name(o->type), (unsigned long long)o->room);
	return NULL;
}

/* The message for queued o to session s; false: nothing to send (a layers
 * update with no layers). Counts it. */
static bool out_msg(lc_prefill_t *p, const lc__dsess_t *s, const lc__outmsg_t *o, lc__msg_t *m)
{
	memset(m, 0, sizeof *m);
	m->type = o->type;
	memcpy(m->secret, s->secret, LC__MSG_SECRET_LEN);
	if (o->type == LC__MSG_STATUS) {
		m->status.room = o->room;
		m->status.p_rank = (uint32_t)p->rank;
		m->status.status = (uint8_t)o->status;
		m->status.fail_reason = (uint32_t)o->fail_reason;
		lc__reason(m->status.reason, sizeof m->status.reason, "%s", o->reason);
		m->status.metadata = o->metadata;
		m->status.metadata_len = (uint32_t)o->metadata_len;
		m->status.flags = o->status_flags;
		m->status.checksum = o->checksum;
		LC__P_CTL_ADD(p, statuses);
		return true;
	}
	if (!o->layers)
		return false;
	m->layers.room = o->room;
	m->layers.p_rank = (uint32_t)p->rank;
	m->layers.layers = o->layers;
	LC__P_CTL_ADD(p, layer_updates);
	return true;
}

/* o sent without waiting (send_lock held). False only when the socket
 * would block, with nothing counted: the caller queues it again. A
 * message that cannot go at all (its session gone, no memory to encode
 * it) is dropped as the control thread drops it, and true. */
static bool send_now(lc_prefill_t *p, const lc__outmsg_t *o)
{
	lc__dsess_t *s = out_session(p, o);
	lc__msg_t m;
	uint8_t *buf;
	size_t len;
	if (!s || !out_msg(p, s, o, &m))
		return true;
	int rc = lc__msg_encode(&m, &buf, &len);
	if (rc) {
		LC__ERROR("prefill %s: cannot encode %s: %s", p->name, lc__msg_type_name(m.type),
			  lc_strerror(rc));
		return true;
	}
	rc = lc__push_send(s->push, buf, len, 0);
	free(buf);
	if (rc)
		return false;
	LC__P_CTL_ADD(p, msgs_sent);
	LC__P_CTL_ADD(p, statuses_at_once);
	return true;
}

void lc__prefill_flush(lc_prefill_t *p)
{
	pthread_mutex_lock(&p->send_lock);
	pthread_mutex_lock(&p->lock);
	lc__outmsg_t *q = p->outq;
	size_t n = p->nout;
	p->outq = NULL;
	p->nout = p->outcap = 0;
	pthread_mutex_unlock(&p->lock);
	if (!n) {
		pthread_mutex_unlock(&p->send_lock);
		free(q);
		return;
	}
	lc__msg_t *m = calloc(1, sizeof *m);
	for (size_t i = 0; m && i < n; i++) {
		lc__dsess_t *s = out_session(p, &q[i]);
		if (s && out_msg(p, s, &q[i], m))
			lc__prefill_send(p, s->push, m);
	}
	pthread_mutex_unlock(&p->send_lock);
	for (size_t i = 0; i < n; i++)
		free(q[i].metadata);
	free(q);
	free(m);
}
