/*
 * The prefill side's control thread (pd/prefill.h has the structures and
 * the locking): D's messages come in (registrations are decided in
 * prefill_register.c; transfer infos and cancels go to the engine here);
 * the statuses and layer updates the engine queued go out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd/prefill.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#endif

#define SEND_TIMEOUT_MS 200

void lc__prefill_wake(lc_prefill_t *p)
{
	uint64_t one = 1;
	ssize_t rc = write(p->evfd, &one, sizeof one);
	LC__UNUSED(rc);
}

lc__dsess_t *lc__prefill_session_find(lc_prefill_t *p, const char *name)
{
	for (size_t i = 0; i < p->nsessions; i++)
		if (!strcmp(p->sessions[i]->name, name))
			return p->sessions[i];
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

void lc__prefill_on_status(void *arg, uint64_t room, const char *session, int status,
			   int fail_reason, const char *reason_text, const void *metadata,
			   size_t metadata_len)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	lc__outmsg_t *m = out_new(p);
	if (m) {
		m->type = LC__MSG_STATUS;
		m->room = room;
		snprintf(m->session, sizeof m->session, "%s", session);
		m->status = status;
		m->fail_reason = fail_reason;
		snprintf(m->reason, sizeof m->reason, "%s", reason_text ? reason_text : "");
		if (status == LC_ROOM_SUCCESS && metadata_len && metadata_len <= LC_METADATA_MAX &&
		    (m->metadata = malloc(metadata_len))) {
			memcpy(m->metadata, metadata, metadata_len);
			m->metadata_len = metadata_len;
		}
	} else {
		LC_ERROR("prefill %s: out of memory queueing the status of room %llu", p->name,
			 (unsigned long long)room);
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
		LC_ERROR("prefill %s: cannot encode %s: %s", p->name, lc__msg_type_name(m->type),
			 lc_strerror(rc));
		return rc;
	}
	rc = lc__push_send(push, buf, len, SEND_TIMEOUT_MS);
	free(buf);
	if (rc) {
		LC__P_CTL_ADD(p, send_failures);
		LC_WARN("prefill %s: sending %s: %s", p->name, lc__msg_type_name(m->type),
			lc_strerror(rc));
	} else {
		LC__P_CTL_ADD(p, msgs_sent);
	}
	return rc;
}

void lc__prefill_send_oneshot(lc_prefill_t *p, const char *ep, const char *key,
			      const lc__msg_t *m)
{
	lc__push_t *push;
	if (lc__push_connect(p->z, ep, key, &push))
		return;
	lc__prefill_send(p, push, m);
	lc__push_close(push);
}

static void flush_outq(lc_prefill_t *p)
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
		lc__dsess_t *s = lc__prefill_session_find(p, o->session);
		pthread_mutex_unlock(&p->lock);
		if (!s || !s->push) {
			LC_DEBUG("prefill %s: no session %s for a %s of room %llu", p->name,
				 o->session, lc__msg_type_name(o->type), (unsigned long long)o->room);
			continue;
		}
		memset(m, 0, sizeof *m);
		m->type = o->type;
		if (o->type == LC__MSG_STATUS) {
			m->status.room = o->room;
			m->status.p_rank = (uint32_t)p->rank;
			m->status.status = (uint8_t)o->status;
			m->status.fail_reason = (uint32_t)o->fail_reason;
			snprintf(m->status.reason, sizeof m->status.reason, "%s", o->reason);
			m->status.metadata = o->metadata;
			m->status.metadata_len = (uint32_t)o->metadata_len;
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

/* ---- intake (control thread) ---- */

static void note_prefix(lc_prefill_t *p, uint64_t room, uint64_t prefix_len)
{
	pthread_mutex_lock(&p->lock);
	lc_sender_t *s = p->senders;
	while (s && s->room != room)
		s = s->next;
	if (s) {
		s->prefix_len = prefix_len;
		s->has_prefix = true;
	} else {
		p->early[p->early_next] = (struct early){room, prefix_len, true};
		p->early_next = (p->early_next + 1) % LC__ARRAY_SIZE(p->early);
	}
	pthread_mutex_unlock(&p->lock);
}

static void handle_info(lc_prefill_t *p, const lc__msg_transfer_info_t *t)
{
	LC__P_CTL_ADD(p, transfer_infos);
	bool dummy = t->flags & LC__INFO_DUMMY;
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_find(p, t->session);
	pthread_mutex_unlock(&p->lock);
	const char *fail = NULL;
	char why[LC_REASON_MAX];
	int rc = 0;
	if (!s && !dummy) {
		/* A missed registration (P restarted): tell D instead of dying. */
		fail = "session not registered with this P rank (P restarted?); register again";
		rc = -ENOENT;
	} else {
		lc_dst_params_t d = {.size = sizeof d, .session = dummy ? NULL : t->session,
				     .pages = t->pages, .page_count = t->page_count,
				     .prefix_len = t->prefix_len, .aux_index = t->aux_index,
				     .required_dst_count = t->required_dst, .is_dummy = dummy,
				     .state_slots = t->slots, .state_slot_count = t->slot_count};
		/* The prefix first: a sender that sees the room leave
		 * Bootstrapping can read it at once. */
		if (!dummy)
			note_prefix(p, t->room, t->prefix_len);
		rc = lc_engine_room_dst_add(p->engine, t->room, &d);
		if (rc) {
			snprintf(why, sizeof why, "transfer info refused by P rank %d: %s", p->rank,
				 lc_strerror(rc));
			fail = why;
		}
	}
	if (!fail)
		return;
	LC_WARN("prefill %s: room %llu from %s: %s", p->name, (unsigned long long)t->room,
		t->session, fail);
	if (dummy)
		return;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m)
		return;
	m->type = LC__MSG_STATUS;
	m->status.room = t->room;
	m->status.p_rank = (uint32_t)p->rank;
	m->status.status = LC_ROOM_FAILED;
	m->status.fail_reason = rc == -ENOENT ? LC_FAIL_SESSION_GONE : LC_FAIL_BAD_INPUT;
	snprintf(m->status.reason, sizeof m->status.reason, "%s", fail);
	if (s && s->push)
		lc__prefill_send(p, s->push, m);
	else
		lc__prefill_send_oneshot(p, t->status_ep, s && s->key[0] ? s->key : NULL, m);
	free(m);
}

static void handle_message(lc_prefill_t *p, const void *buf, size_t len, const char *peer)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	char why[200];
	if (!m)
		return;
	LC__P_CTL_ADD(p, msgs_received);
	int rc = lc__msg_decode(buf, len, m, why, sizeof why);
	if (rc) {
		LC__P_CTL_ADD(p, msgs_malformed);
		LC_WARN("prefill %s: dropped a malformed message (%zu bytes): %s", p->name, len, why);
		free(m);
		return;
	}
	switch (m->type) {
	case LC__MSG_REGISTER:
		lc__prefill_handle_register(p, &m->reg, peer);
		break;
	case LC__MSG_TRANSFER_INFO:
		handle_info(p, &m->info);
		break;
	case LC__MSG_CANCEL:
		LC__P_CTL_ADD(p, cancels);
		rc = lc_engine_room_cancel(p->engine, m->cancel.room, m->cancel.reason);
		LC_INFO("prefill %s: D %s cancelled room %llu (%s): %s", p->name, m->cancel.session,
			(unsigned long long)m->cancel.room, m->cancel.reason,
			rc ? lc_strerror(rc) : "ok");
		break;
	default:
		LC__P_CTL_ADD(p, msgs_unexpected);
		LC_WARN("prefill %s: unexpected %s message dropped", p->name,
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
	while (!atomic_load(&p->stop)) {
		zmq_pollitem_t it[2] = {
			{.socket = lc__pull_socket(p->pull), .events = ZMQ_POLLIN},
			{.fd = p->evfd, .events = ZMQ_POLLIN},
		};
		int n = zmq_poll(it, 2, 200);
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
			handle_message(p, buf, len, peer);
			free(buf);
		}
		flush_outq(p);
	}
	flush_outq(p);
	return NULL;
}
#endif
