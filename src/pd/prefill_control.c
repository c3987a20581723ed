/*
 * The prefill side's control thread (pd/prefill.h has the structures and
 * the locking): D's registrations, transfer infos and cancels come in; the
 * statuses and layer updates the engine queued go out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/topology.h"
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

static lc__dsess_t *session_find(lc_prefill_t *p, const char *name)
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

static int send_msg(lc_prefill_t *p, lc__push_t *push, const lc__msg_t *m)
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

/* To an endpoint that has no session (a refused or unknown D); key: D's
 * CURVE key if it sent one, else NULL (this P's own). */
static void send_oneshot(lc_prefill_t *p, const char *ep, const char *key, const lc__msg_t *m)
{
	lc__push_t *push;
	if (lc__push_connect(p->z, ep, key, &push))
		return;
	send_msg(p, push, m);
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
		lc__dsess_t *s = session_find(p, o->session);
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
		send_msg(p, s->push, m);
	}
	for (size_t i = 0; i < n; i++)
		free(q[i].metadata);
	free(q);
	free(m);
}

/* ---- intake (control thread) ---- */

static const char *kind_name(uint32_t k)
{
	static const char *const names[] = {"K", "V", "latent", "quant", "index", "state", "other"};
	return k < LC__ARRAY_SIZE(names) ? names[k] : "?";
}

/* The first difference between P's layout and D's registration, or 0.
 * With D's TP size (heterogeneous TP) page sizes may differ: tp_fragments
 * pairs them instead. */
static int geometry_diff(const lc_prefill_t *p, const lc__msg_register_t *g, char *why,
			 size_t cap)
{
	const lc_layout_t *l = p->layout;
	bool split = g->flags & LC__REG_HAS_TP;
	if (g->nbuffers != l->nbuf) {
		snprintf(why, cap, "buffer count differs: P has %u buffers, D has %u", l->nbuf,
			 g->nbuffers);
		return LC_ERR_GEOMETRY;
	}
	for (uint32_t i = 0; i < l->nbuf; i++) {
		const lc_buffer_t *a = &l->bufs[i];
		const lc__msg_buffer_t *b = &g->buffers[i];
		if (a->item_len != b->item_len && !split) {
			snprintf(why, cap, "buffer %u (layer %d %s) item_len differs: P %llu bytes, "
					   "D %llu bytes",
				 i, a->layer, kind_name(a->kind), (unsigned long long)a->item_len,
				 (unsigned long long)b->item_len);
			return LC_ERR_GEOMETRY;
		}
		if (a->layer != b->layer || a->kind != b->kind || a->flags != b->flags) {
			snprintf(why, cap, "buffer %u differs: P layer %d %s flags %u, D layer %d %s "
					   "flags %u",
				 i, a->layer, kind_name(a->kind), a->flags, b->layer,
				 kind_name(b->kind), b->flags);
			return LC_ERR_GEOMETRY;
		}
	}
	if (g->fingerprint != l->fingerprint && !split) {
		snprintf(why, cap, "layout fingerprint differs: P %016llx, D %016llx",
			 (unsigned long long)l->fingerprint, (unsigned long long)g->fingerprint);
		return LC_ERR_GEOMETRY;
	}
	return 0;
}

/* Heterogeneous TP: what this rank sends of each buffer to the D rank that
 * registers (core/topology.c). Returns the fragment count (0: this rank is
 * a replica and sends that D nothing), or LC_ERR_GEOMETRY. */
static int tp_fragments(const lc_prefill_t *p, const lc__msg_register_t *g, lc_fragment_t *out,
			char *why, size_t cap)
{
	uint64_t *d_lens = calloc(g->nbuffers ? g->nbuffers : 1, sizeof *d_lens);
	if (!d_lens)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nbuffers; i++)
		d_lens[i] = g->buffers[i].item_len;
	lc__topology_t t = {.p_world = p->world, .p_dp = p->dp, .d_tp = (int)g->d_tp,
			    .d_rank = (int)g->d_rank, .p_lens = p->item_lens, .d_lens = d_lens,
			    .nbuf = p->layout->nbuf};
	int n = lc__tp_fragments(&t, p->rank % lc__tp_p_size(&t), t.d_rank, out, why, cap);
	free(d_lens);
	return n;
}

/* A D that declares a CURVE key other than the one it authenticated with
 * (peer; "" without CURVE): P must not talk to a key the D does not hold. */
static bool key_lie(const lc__msg_register_t *g, const char *peer)
{
	return (g->flags & LC__REG_HAS_CURVE_KEY) && peer[0] && strcmp(peer, g->curve_key);
}

/* Why P refuses this registration before touching the engine, or 0. */
static int check_register(const lc_prefill_t *p, const lc__msg_register_t *g, const char *peer,
			  char *why, size_t cap)
{
	if (key_lie(g, peer)) {
		snprintf(why, cap, "declared CURVE key %.8s... is not the key %.8s... the session "
				   "authenticated with", g->curve_key, peer);
		return LC_ERR_AUTH;
	}
	return geometry_diff(p, g, why, cap);
}

static int engine_session(lc_prefill_t *p, const lc__msg_register_t *g, uint32_t *bregion,
			  uint64_t *boffset, const lc_fragment_t *frags, int nfrags, char *why,
			  size_t cap)
{
	for (uint32_t i = 0; i < g->nbuffers; i++) {
		bregion[i] = g->buffers[i].region;
		boffset[i] = g->buffers[i].offset;
	}
	lc_session_params_t sp = {.size = sizeof sp, .name = g->session, .url = g->data_url,
				  .has_token = !!(g->flags & LC__REG_HAS_TOKEN),
				  .region_descs = g->region_descs,
				  .region_desc_lens = g->region_desc_lens,
				  .region_count = g->nregions, .buffer_region = bregion,
				  .buffer_offset = boffset, .fragments = frags,
				  .fragment_count = (size_t)nfrags};
	memcpy(sp.token.bytes, g->token, LC_TOKEN_LEN);
	pthread_mutex_lock(&p->lock);
	bool full = !session_find(p, g->session) && p->nsessions >= LC__P_MAX_SESSIONS;
	pthread_mutex_unlock(&p->lock);
	int rc = 0;
	if (full) {
		rc = -ENOSPC;
		snprintf(why, cap, "P rank %d has %d sessions already", p->rank, LC__P_MAX_SESSIONS);
	} else if ((rc = lc_engine_session_add(p->engine, &sp))) {
		snprintf(why, cap, "session refused by the engine: %s", lc_strerror(rc));
	}
	return rc;
}

/* Hand D's session to the engine. A replica rank (heterogeneous TP, no
 * fragment for this D) adds none: only dummy infos, which name no
 * session, come from it. */
static int add_session(lc_prefill_t *p, const lc__msg_register_t *g, char *why, size_t cap)
{
	bool split = g->flags & LC__REG_HAS_TP;
	uint32_t *bregion = malloc(g->nbuffers * sizeof *bregion);
	uint64_t *boffset = malloc(g->nbuffers * sizeof *boffset);
	lc_fragment_t *frags = split ? calloc(g->nbuffers, sizeof *frags) : NULL;
	int nfrags = 0, rc = 0;
	if (!bregion || !boffset || (split && !frags))
		rc = -ENOMEM;
	if (!rc && split && (nfrags = tp_fragments(p, g, frags, why, cap)) < 0)
		rc = nfrags;
	if (!rc && !(split && !nfrags))
		rc = engine_session(p, g, bregion, boffset, frags, nfrags, why, cap);
	free(bregion);
	free(boffset);
	free(frags);
	return rc;
}

/* Accepted: remember where the session's statuses go. */
static lc__dsess_t *remember_session(lc_prefill_t *p, const lc__msg_register_t *g)
{
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = session_find(p, g->session);
	const char *key = g->flags & LC__REG_HAS_CURVE_KEY ? g->curve_key : "";
	bool reconnect = !s || strcmp(s->status_ep, g->status_ep) || strcmp(s->key, key);
	if (!s && (s = calloc(1, sizeof *s))) {
		snprintf(s->name, sizeof s->name, "%s", g->session);
		p->sessions[p->nsessions++] = s;
	}
	pthread_mutex_unlock(&p->lock);
	if (s && reconnect) {
		lc__push_close(s->push);
		s->push = NULL;
		snprintf(s->status_ep, sizeof s->status_ep, "%s", g->status_ep);
		snprintf(s->key, sizeof s->key, "%s", key);
		lc__push_connect(p->z, s->status_ep, s->key, &s->push);
	}
	return s;
}

/* peer: the CURVE key the sender authenticated with ("" without CURVE). */
static void handle_register(lc_prefill_t *p, const lc__msg_register_t *g, const char *peer)
{
	char why[LC__MSG_STR_MAX] = "";
	lc__msg_t *reply = calloc(1, sizeof *reply);
	if (!reply)
		return;
	reply->type = LC__MSG_REGISTER_REPLY;
	snprintf(reply->reply.session, sizeof reply->reply.session, "%s", g->session);
	reply->reply.p_rank = (uint32_t)p->rank;
	LC__P_CTL_ADD(p, registrations);
	int rc = check_register(p, g, peer, why, sizeof why);
	if (!rc)
		rc = add_session(p, g, why, sizeof why);
	if (rc) {
		LC__P_CTL_ADD(p, registrations_refused);
		LC_ERROR("prefill %s: refused D session %s: %s", p->name, g->session, why);
		reply->reply.result = rc;
		snprintf(reply->reply.reason, sizeof reply->reply.reason, "%s", why);
		bool has_key = g->flags & LC__REG_HAS_CURVE_KEY;
		send_oneshot(p, g->status_ep, key_lie(g, peer) ? peer : has_key ? g->curve_key : NULL,
			     reply);
		free(reply);
		return;
	}
	lc__dsess_t *s = remember_session(p, g);
	LC_INFO("prefill %s: D session %s registered (data %s, status %s)", p->name, g->session,
		g->data_url, g->status_ep);
	if (s && s->push)
		send_msg(p, s->push, reply);
	free(reply);
}

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
	lc__dsess_t *s = session_find(p, t->session);
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
		send_msg(p, s->push, m);
	else
		send_oneshot(p, t->status_ep, s && s->key[0] ? s->key : NULL, m);
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
		handle_register(p, &m->reg, peer);
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
