/*
 * The prefill side (docs/control-plane.md): one lc_prefill_t per P rank
 * glues the engine to the control plane, and one lc_sender_t per room.
 *
 * Threading: the control thread owns the inbox (PULL) and sends every
 * outbound message. Engine callbacks (engine thread) only queue messages.
 * `lock` protects the session table, the outbound queue and the sender
 * list; it is never held while calling into the engine or sending, and
 * engine calls never run with it held (lock order: none needed).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "core/layout.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#endif

#define MAX_SESSIONS 4096
#define SEND_TIMEOUT_MS 200

/* One registered D session as the control plane knows it. */
typedef struct dsess {
	char name[LC__MSG_STR_MAX];
	char status_ep[LC__MSG_STR_MAX];
	char key[LC__MSG_CURVE_KEY_LEN + 1]; /* D's CURVE key; "": this P's own */
	lc__push_t *push; /* used by the control thread only */
} dsess_t;

typedef struct outmsg {
	int type; /* LC__MSG_STATUS or LC__MSG_LAYERS */
	uint64_t room;
	char session[LC__MSG_STR_MAX];
	int status, fail_reason;
	char reason[LC_REASON_MAX];
	uint8_t *metadata;
	size_t metadata_len;
	uint32_t layers;
} outmsg_t;

struct lc_sender {
	lc_prefill_t *p;
	uint64_t room;
	bool final;
	bool has_prefix;
	uint64_t prefix_len;
	lc_room_info_t last;
	struct lc_sender *next;
};

struct lc_prefill {
	lc_ctx_t *ctx;
	lc_engine_t *engine;
	lc_layout_t *layout;
	char name[64];
	int rank, world, dp;
	char host[LC__BS_HOST_MAX];
	char endpoint[300];
	char bootstrap[LC__BS_HOST_MAX];
	lc__zctx_t *z;
	lc__pull_t *pull;
	int evfd;
	pthread_t thread;
	bool started;
	_Atomic bool stop;
	_Atomic uint64_t ctl[LC__CTL_COUNT];
	lc_bootstrap_t *metrics_server;
	int source_id;

	pthread_mutex_t lock;
	dsess_t *sessions[MAX_SESSIONS];
	size_t nsessions;
	outmsg_t *outq;
	size_t nout, outcap;
	lc_sender_t *senders;
	/* Prefix lengths of transfer infos that arrived before their sender
	 * (a bounded ring: the oldest is forgotten). */
	struct early {
		uint64_t room, prefix_len;
		bool used;
	} early[1024];
	size_t early_next;
};

#define CTL_ADD(p, name) atomic_fetch_add(&(p)->ctl[LC__CTL_##name], 1)

static void wake(lc_prefill_t *p)
{
	uint64_t one = 1;
	ssize_t rc = write(p->evfd, &one, sizeof one);
	LC__UNUSED(rc);
}

static dsess_t *session_find(lc_prefill_t *p, const char *name)
{
	for (size_t i = 0; i < p->nsessions; i++)
		if (!strcmp(p->sessions[i]->name, name))
			return p->sessions[i];
	return NULL;
}

/* ---- engine callbacks: queue, never send ---- */

static outmsg_t *out_new(lc_prefill_t *p)
{
	if (p->nout == p->outcap) {
		size_t cap = p->outcap ? p->outcap * 2 : 64;
		outmsg_t *n = realloc(p->outq, cap * sizeof *n);
		if (!n)
			return NULL;
		p->outq = n;
		p->outcap = cap;
	}
	outmsg_t *m = &p->outq[p->nout++];
	memset(m, 0, sizeof *m);
	return m;
}

static void on_status(void *arg, uint64_t room, const char *session, int status, int fail_reason,
		      const char *reason_text, const void *metadata, size_t metadata_len)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	outmsg_t *m = out_new(p);
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
	wake(p);
}

static void on_landed(void *arg, uint64_t room, const char *session, uint32_t layers)
{
	lc_prefill_t *p = arg;
	pthread_mutex_lock(&p->lock);
	/* Coalesce: one pending update per (room, session). */
	outmsg_t *m = NULL;
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
	wake(p);
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
		CTL_ADD(p, send_failures);
		LC_WARN("prefill %s: sending %s: %s", p->name, lc__msg_type_name(m->type),
			lc_strerror(rc));
	} else {
		CTL_ADD(p, msgs_sent);
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
	outmsg_t *q = p->outq;
	size_t n = p->nout;
	p->outq = NULL;
	p->nout = p->outcap = 0;
	pthread_mutex_unlock(&p->lock);
	lc__msg_t *m = calloc(1, sizeof *m);
	for (size_t i = 0; m && i < n; i++) {
		outmsg_t *o = &q[i];
		/* Sessions are only added or replaced by this thread, so the
		 * entry stays valid after the lock is dropped. */
		pthread_mutex_lock(&p->lock);
		dsess_t *s = session_find(p, o->session);
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
			CTL_ADD(p, statuses);
		} else {
			if (!o->layers)
				continue;
			m->layers.room = o->room;
			m->layers.p_rank = (uint32_t)p->rank;
			m->layers.layers = o->layers;
			CTL_ADD(p, layer_updates);
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

/* Heterogeneous TP: what this rank sends of each buffer to D rank
 * g->d_rank of g->d_tp (unit: a byte, as published in kv_unit_lens).
 * Returns the fragment count (0: nothing, this rank is a replica), or
 * LC_ERR_GEOMETRY. */
static int tp_fragments(const lc_prefill_t *p, const lc__msg_register_t *g, lc_fragment_t *out,
			char *why, size_t cap)
{
	int ptp = p->world / p->dp, n = 0;
	for (uint32_t i = 0; i < p->layout->nbuf; i++) {
		lc_tp_side_t ps = {ptp, p->rank % ptp, p->layout->bufs[i].item_len, 1};
		lc_tp_side_t ds = {(int)g->d_tp, (int)g->d_rank, g->buffers[i].item_len, 1};
		int rc = lc_tp_fragment(&ps, &ds, &out[n]);
		if (rc < 0) {
			snprintf(why, cap, "buffer %u: P TP %d with %llu bytes per page and D TP %u "
					   "with %llu cannot be paired (spec 6.7)",
				 i, ptp, (unsigned long long)ps.item_len, g->d_tp,
				 (unsigned long long)ds.item_len);
			return LC_ERR_GEOMETRY;
		}
		if (rc)
			out[n++].buffer = i;
	}
	return n;
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
	CTL_ADD(p, registrations);
	/* The key P will answer to must be the one D authenticated with: an
	 * authorized peer cannot have P talk to a key it does not hold. */
	bool has_key = g->flags & LC__REG_HAS_CURVE_KEY;
	bool key_lie = has_key && peer[0] && strcmp(peer, g->curve_key);
	int rc = 0;
	if (key_lie) {
		rc = LC_ERR_AUTH;
		snprintf(why, sizeof why, "declared CURVE key %.8s... is not the key %.8s... "
					  "the session authenticated with", g->curve_key, peer);
	} else {
		rc = geometry_diff(p, g, why, sizeof why);
	}
	uint32_t *bregion = NULL;
	uint64_t *boffset = NULL;
	lc_fragment_t *frags = NULL;
	int nfrags = 0;
	bool split = g->flags & LC__REG_HAS_TP;
	if (!rc) {
		bregion = malloc(g->nbuffers * sizeof *bregion);
		boffset = malloc(g->nbuffers * sizeof *boffset);
		frags = split ? calloc(g->nbuffers, sizeof *frags) : NULL;
		if (!bregion || !boffset || (split && !frags))
			rc = -ENOMEM;
	}
	if (!rc && split && (nfrags = tp_fragments(p, g, frags, why, sizeof why)) < 0)
		rc = nfrags;
	/* A replica rank sends this D nothing: no session (only dummy infos,
	 * which name none, come from it). */
	bool replica = split && !nfrags;
	if (!rc && !replica) {
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
		bool full = !session_find(p, g->session) && p->nsessions >= MAX_SESSIONS;
		pthread_mutex_unlock(&p->lock);
		if (full) {
			rc = -ENOSPC;
			snprintf(why, sizeof why, "P rank %d has %d sessions already", p->rank,
				 MAX_SESSIONS);
		} else if ((rc = lc_engine_session_add(p->engine, &sp))) {
			snprintf(why, sizeof why, "session refused by the engine: %s",
				 lc_strerror(rc));
		}
	}
	free(bregion);
	free(boffset);
	free(frags);
	if (rc) {
		CTL_ADD(p, registrations_refused);
		LC_ERROR("prefill %s: refused D session %s: %s", p->name, g->session, why);
		reply->reply.result = rc;
		snprintf(reply->reply.reason, sizeof reply->reply.reason, "%s", why);
		send_oneshot(p, g->status_ep, key_lie ? peer : has_key ? g->curve_key : NULL,
			     reply);
		free(reply);
		return;
	}
	/* Accepted: remember where its statuses go. */
	pthread_mutex_lock(&p->lock);
	dsess_t *s = session_find(p, g->session);
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
	CTL_ADD(p, transfer_infos);
	bool dummy = t->flags & LC__INFO_DUMMY;
	pthread_mutex_lock(&p->lock);
	dsess_t *s = session_find(p, t->session);
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
	CTL_ADD(p, msgs_received);
	int rc = lc__msg_decode(buf, len, m, why, sizeof why);
	if (rc) {
		CTL_ADD(p, msgs_malformed);
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
		CTL_ADD(p, cancels);
		rc = lc_engine_room_cancel(p->engine, m->cancel.room, m->cancel.reason);
		LC_INFO("prefill %s: D %s cancelled room %llu (%s): %s", p->name, m->cancel.session,
			(unsigned long long)m->cancel.room, m->cancel.reason,
			rc ? lc_strerror(rc) : "ok");
		break;
	default:
		CTL_ADD(p, msgs_unexpected);
		LC_WARN("prefill %s: unexpected %s message dropped", p->name,
			lc__msg_type_name(m->type));
	}
	lc__msg_free(m);
	free(m);
}

#ifdef LC_HAVE_ZMQ
static void *control_main(void *arg)
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

static int metrics_source(void *arg, lc__metrics_snapshot_t *out)
{
	lc_prefill_t *p = arg;
	snprintf(out->label, sizeof out->label, "%d", p->rank);
	out->ctx = p->ctx;
	out->engine.size = sizeof out->engine;
	out->has_engine = lc_engine_metrics(p->engine, &out->engine) == 0;
	for (int i = 0; i < LC__CTL_COUNT; i++)
		out->ctl[i] = atomic_load(&p->ctl[i]);
	return 0;
}

int lc_prefill_create(lc_ctx_t *ctx, const lc_prefill_params_t *params, lc_prefill_t **out)
{
#ifndef LC_HAVE_ZMQ
	return LC_ENOTSUP;
#else
	lc_prefill_params_t pp = {0};
	char why[300] = "";
	int rc;
	if (!ctx || !params || !out || params->size < offsetof(lc_prefill_params_t, reserved))
		return -EINVAL;
	memcpy(&pp, params, LC__MIN(params->size, sizeof pp));
	if (!pp.layout || !pp.bootstrap || pp.world_size < 1 || pp.dp_size < 1 ||
	    pp.world_size % pp.dp_size || pp.engine_rank < 0 || pp.engine_rank >= pp.world_size)
		return -EINVAL;
	lc_prefill_t *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->ctx = ctx;
	p->rank = pp.engine_rank;
	p->world = pp.world_size;
	p->dp = pp.dp_size;
	p->evfd = -1;
	snprintf(p->name, sizeof p->name, "%s", pp.name ? pp.name : "p");
	snprintf(p->host, sizeof p->host, "%s", pp.host ? pp.host : "127.0.0.1");
	snprintf(p->bootstrap, sizeof p->bootstrap, "%s", pp.bootstrap);
	pthread_mutex_init(&p->lock, NULL);
	if ((rc = lc__layout_clone(pp.layout, &p->layout)))
		goto fail;
	p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->evfd < 0) {
		rc = -errno;
		goto fail;
	}
	lc_engine_params_t ep = {.size = sizeof ep, .layout = pp.layout, .name = p->name,
				 .status_cb = on_status, .status_arg = p, .landed_cb = on_landed,
				 .landed_arg = p, .external_counter = pp.external_counter,
				 .cache_word = pp.cache_word, .aux_word = pp.aux_word};
	if ((rc = lc_engine_create(ctx, &ep, &p->engine)))
		goto fail;
	if ((rc = lc__zctx_create(&p->z)))
		goto fail;
	if ((rc = lc__pull_bind(p->z, p->host, &p->pull, p->endpoint, sizeof p->endpoint)))
		goto fail;
	if (pthread_create(&p->thread, NULL, control_main, p)) {
		rc = -EAGAIN;
		goto fail;
	}
	p->started = true;

	/* Register with the bootstrap server. */
	const char *colon = strrchr(p->endpoint, ':');
	lc__prefill_info_t info = {.world_size = p->world, .dp_size = p->dp,
				   .engine_rank = p->rank,
				   .rank_port = colon ? atoi(colon + 1) : 0,
				   .fingerprint = p->layout->fingerprint,
				   .layers = p->layout->layers, .nlens = p->layout->nbuf};
	snprintf(info.rank_ip, sizeof info.rank_ip, "%s", p->host);
	snprintf(info.curve_key, sizeof info.curve_key, "%s", lc__zctx_public_key(p->z));
	info.kv_item_lens = calloc(p->layout->nbuf, sizeof *info.kv_item_lens);
	if (!info.kv_item_lens) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < p->layout->nbuf; i++)
		info.kv_item_lens[i] = p->layout->bufs[i].item_len;
	char secret[LC__BS_SECRET_MAX];
	int has_secret = lc__bootstrap_secret(pp.size > offsetof(lc_prefill_params_t,
								 bootstrap_secret)
						      ? pp.bootstrap_secret
						      : NULL,
					      secret, sizeof secret);
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 5,
			     .secret = has_secret == 1 ? secret : NULL};
	rc = lc__bootstrap_register(p->bootstrap, &info, &o, why, sizeof why);
	free(info.kv_item_lens);
	if (rc) {
		LC_ERROR("prefill %s: registering with bootstrap %s failed: %s", p->name,
			 p->bootstrap, why);
		goto fail;
	}
	if (pp.metrics_server) {
		p->metrics_server = pp.metrics_server;
		p->source_id = lc__bootstrap_source_add(pp.metrics_server, metrics_source, p);
		if (p->source_id < 0)
			p->metrics_server = NULL;
	}
	LC_INFO("prefill %s: rank %d/%d (dp %d) serving %s", p->name, p->rank, p->world, p->dp,
		p->endpoint);
	*out = p;
	return 0;
fail:
	lc_prefill_destroy(p);
	return rc;
#endif
}

void lc_prefill_destroy(lc_prefill_t *p)
{
	if (!p)
		return;
	if (p->metrics_server)
		lc__bootstrap_source_remove(p->metrics_server, p->source_id);
	/* The engine first: its final statuses are queued, then flushed by the
	 * control thread before it stops. */
	lc_engine_destroy(p->engine);
	p->engine = NULL;
	if (p->started) {
		atomic_store(&p->stop, true);
		wake(p);
		pthread_join(p->thread, NULL);
	}
	for (size_t i = 0; i < p->nsessions; i++) {
		lc__push_close(p->sessions[i]->push);
		free(p->sessions[i]);
	}
	for (size_t i = 0; i < p->nout; i++)
		free(p->outq[i].metadata);
	free(p->outq);
	lc__pull_close(p->pull);
	lc__zctx_destroy(p->z);
	if (p->evfd >= 0)
		close(p->evfd);
	lc_layout_destroy(p->layout);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int lc_prefill_engine(lc_prefill_t *p, lc_engine_t **out)
{
	if (!p || !out)
		return -EINVAL;
	*out = p->engine;
	return 0;
}

int lc_prefill_endpoint(const lc_prefill_t *p, char *buf, size_t cap)
{
	if (!p || !buf)
		return -EINVAL;
	int n = snprintf(buf, cap, "%s", p->endpoint);
	return (size_t)n >= cap ? -ENOSPC : n;
}

int lc_prefill_counter(lc_prefill_t *p, const char *name, uint64_t *out)
{
	if (!p || !name || !out)
		return -EINVAL;
	for (int i = 0; i < LC__CTL_COUNT; i++)
		if (!strcmp(lc__ctl_counter_name(i), name)) {
			*out = atomic_load(&p->ctl[i]);
			return 0;
		}
	return -ENOENT;
}

/* ---- senders ---- */

int lc_sender_create(lc_prefill_t *p, uint64_t room, lc_sender_t **out)
{
	if (!p || !out)
		return -EINVAL;
	lc_sender_t *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->p = p;
	s->room = room;
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t *x = p->senders; x; x = x->next)
		if (x->room == room) {
			pthread_mutex_unlock(&p->lock);
			free(s);
			return -EEXIST;
		}
	s->next = p->senders;
	p->senders = s;
	for (size_t i = 0; i < LC__ARRAY_SIZE(p->early); i++)
		if (p->early[i].used && p->early[i].room == room) {
			s->prefix_len = p->early[i].prefix_len;
			s->has_prefix = true;
			p->early[i].used = false;
		}
	pthread_mutex_unlock(&p->lock);
	int rc = lc_engine_room_open(p->engine, room);
	if (rc && rc != -EEXIST) { /* -EEXIST: D announced the room first */
		lc_sender_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}

int lc_sender_metadata_set(lc_sender_t *s, const void *data, size_t len)
{
	if (!s)
		return -EINVAL;
	return lc_engine_room_metadata_set(s->p->engine, s->room, data, len);
}

int lc_sender_poll(lc_sender_t *s, lc_room_info_t *out)
{
	if (!s)
		return -EINVAL;
	if (!s->final) {
		lc_room_info_t info = {.size = sizeof info};
		int rc = lc_engine_room_status(s->p->engine, s->room, &info);
		if (rc == -ENOENT) {
			memset(&info, 0, sizeof info);
			info.size = sizeof info;
			info.status = LC_ROOM_FAILED;
			info.fail_reason = LC_FAIL_STOPPED;
			snprintf(info.reason, sizeof info.reason, "room unknown to the engine");
		} else if (rc) {
			return rc;
		}
		s->last = info;
		s->final = info.status == LC_ROOM_SUCCESS || info.status == LC_ROOM_FAILED;
	}
	if (out) {
		size_t n = out->size ? LC__MIN(out->size, sizeof *out) : sizeof *out;
		memcpy(out, &s->last, n);
		out->size = n;
	}
	return s->last.status;
}

int lc_sender_prefix_len(lc_sender_t *s, uint64_t *tokens)
{
	if (!s || !tokens)
		return -EINVAL;
	pthread_mutex_lock(&s->p->lock);
	int rc = s->has_prefix ? 0 : -EAGAIN;
	if (!rc)
		*tokens = s->prefix_len;
	pthread_mutex_unlock(&s->p->lock);
	return rc;
}

int lc_sender_abort(lc_sender_t *s, const char *reason)
{
	if (!s)
		return -EINVAL;
	if (s->final)
		return LC_ERR_STATE;
	return lc_engine_room_cancel(s->p->engine, s->room, reason ? reason : "aborted by P");
}

void lc_sender_destroy(lc_sender_t *s)
{
	if (!s)
		return;
	lc_prefill_t *p = s->p;
	/* Cancels an unfinished room; -ENOENT once a final status was read. */
	lc_engine_room_release(p->engine, s->room);
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t **pp = &p->senders; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	free(s);
}
