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
	if (s && (!s->peer[0] || !strcmp(s->peer, peer)))
		return s;
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

void lc__prefill_on_final(void *arg, const lc_room_final_t *f)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	lc__outmsg_t *m = out_new(p);
	if (m) {
		m->type = LC__MSG_STATUS;
		m->room = f->room;
		snprintf(m->session, sizeof m->session, "%s", f->session);
		m->status = f->status;
		m->fail_reason = f->fail_reason;
		lc__reason(m->reason, sizeof m->reason, "%s", f->reason_text ? f->reason_text : "");
		if (f->status == LC_ROOM_SUCCESS && f->metadata_len &&
		    f->metadata_len <= LC_METADATA_MAX && (m->metadata = malloc(f->metadata_len))) {
			memcpy(m->metadata, f->metadata, f->metadata_len);
			m->metadata_len = f->metadata_len;
		}
		if (f->status == LC_ROOM_SUCCESS && (f->flags & LC_FINAL_HAS_CHECKSUM)) {
			m->status_flags = LC__STATUS_HAS_CHECKSUM;
			m->checksum = f->checksum;
		}
	} else {
		LC__ERROR("prefill %s: out of memory queueing the status of room %llu", p->name,
			  (unsigned long long)f->room);
	}
	pthread_mutex_unlock(&p->lock);
	lc__prefill_wake(p);
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
	pthread_mutex_unlock(&p->lock);
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

void lc__prefill_send_oneshot(lc_prefill_t *p, const char *ep, const char *key, const lc__msg_t *m)
{
	lc__push_t *push;
	if (lc__push_connect(p->z, ep, key, &push))
		return;
	lc__prefill_send(p, push, m);
	lc__push_close(push);
}

void lc__prefill_flush(lc_prefill_t *p)
{
	pthread_mutex_lock(&p->lock);
	lc__outmsg_t *q = p->outq;
	size_t n = p->nout;
	p->outq = NULL;
	p->nout = p->outcap = 0;
	pthread_mutex_unlock(&p->lock);
	lc__msg_t *m = calloc(1, sizeof *m);
	for (size_t i = 0; m && i < n; i++) {
		lc__outmsg_t *o = &q[i];
		/* Sessions are only added or replaced by this thread, so the
		 * entry stays valid after the lock is dropped. */
		pthread_mutex_lock(&p->lock);
		lc__dsess_t *s = lc__prefill_session_by_ename(p, o->session);
		pthread_mutex_unlock(&p->lock);
		if (!s || !s->push) {
			LC__DEBUG("prefill %s: no session %s for a %s of room %llu", p->name,
				  o->session, lc__msg_type_name(o->type),
				  (unsigned long long)o->room);
			continue;
		}
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
		} else {
			if (!o->layers)
				continue;
			m->layers.room = o->room;
			m->layers.p_rank = (uint32_t)p->rank;
			m->layers.layers = o->layers;
			LC__P_CTL_ADD(p, layer_updates);
		}
		lc__prefill_send(p, s->push, m);
	}
	for (size_t i = 0; i < n; i++)
		free(q[i].metadata);
	free(q);
	free(m);
}
