/*
 * Whether this P rank takes a D's registration (pd/prefill_int.h has the
 * structures): the declared CURVE key must be the authenticated one, the
 * session secret must be set, the page geometry must match (or, with D's TP
 * size, pair across TP through core/topology.c), and the session table has
 * room (p_sessions_max; idle sessions are evicted to make it). An accepted
 * session goes to the engine and is answered; a refused one is answered
 * with the first difference found. Control thread.
 *
 * Sessions are owned (docs/security.md): P keys them by (session id,
 * secret). The same secret refreshes the incarnation that holds it (and,
 * with CURVE, only from the key that registered it); another secret makes a
 * new incarnation beside the old one, under its own engine name, so that a
 * restarted D works at once and a REGISTER that copies D's id gets nothing
 * of D's rooms. An old incarnation goes when the table needs room and it
 * has no live room (evict_idle).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/topology.h"
#include "engine/engine.h"
#include "pd/prefill_int.h"

static const char *kind_name(uint32_t k)
{
	static const char *const names[] = {"K", "V", "latent", "quant", "index", "state", "other"};
	return k < LC__ARRAY_SIZE(names) ? names[k] : "?";
}

/* The first difference between P's layout and D's registration, or 0.
 * With D's TP size (heterogeneous TP) page sizes may differ: tp_fragments
 * pairs them instead. */
static int geometry_diff(const lc_prefill_t *p, const lc__msg_register_t *g, char *why, size_t cap)
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
			snprintf(why, cap,
				 "buffer %u (layer %d %s) item_len differs: P %llu bytes, "
				 "D %llu bytes",
				 i, a->layer, kind_name(a->kind), (unsigned long long)a->item_len,
				 (unsigned long long)b->item_len);
			return LC_ERR_GEOMETRY;
		}
		if (a->layer != b->layer || a->kind != b->kind || a->flags != b->flags) {
			snprintf(why, cap,
				 "buffer %u differs: P layer %d %s flags %u, D layer %d %s "
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
	uint32_t *d_rows = calloc(g->nbuffers ? g->nbuffers : 1, sizeof *d_rows);
	if (!d_lens || !d_rows) {
		free(d_lens);
		free(d_rows);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < g->nbuffers; i++) {
		d_lens[i] = g->buffers[i].item_len;
		d_rows[i] = g->buffers[i].rows;
	}
	lc__topology_t t = {.p_world = p->world,
			    .p_dp = p->dp,
			    .d_tp = (int)g->d_tp,
			    .d_rank = (int)g->d_rank,
			    .p_lens = p->item_lens,
			    .d_lens = d_lens,
			    .p_rows = p->layout->rows,
			    .d_rows = d_rows,
			    .nbuf = p->layout->nbuf};
	int n = lc__tp_fragments(&t, p->rank % lc__tp_p_size(&t), t.d_rank, out, why, cap);
	free(d_lens);
	free(d_rows);
	return n;
}

/* A D that declares a CURVE key other than the one it authenticated with
 * (peer; "" without CURVE): P must not talk to a key the D does not hold. */
static bool key_lie(const lc__msg_register_t *g, const char *peer)
{
	return (g->flags & LC__REG_HAS_CURVE_KEY) && peer[0] && strcmp(peer, g->curve_key);
}

static bool secret_unset(const uint8_t *secret)
{
	static const uint8_t zero[LC__MSG_SECRET_LEN];
	return lc__ct_equal(secret, zero, LC__MSG_SECRET_LEN);
}

/* Why P refuses this registration before touching the engine, or 0. */
static int check_register(const lc_prefill_t *p, const lc__msg_t *m, const char *peer, char *why,
			  size_t cap)
{
	const lc__msg_register_t *g = &m->reg;
	if (secret_unset(m->secret)) {
		snprintf(why, cap, "no session secret (all zero)");
		return LC_ERR_AUTH;
	}
	if (!lc__prefill_scheme_ok(g->status_ep)) {
		snprintf(why, cap, "status endpoint %.200s: transport not in status_schemes",
			 g->status_ep);
		return LC_ERR_AUTH;
	}
	if (key_lie(g, peer)) {
		snprintf(why, cap,
			 "declared CURVE key %.8s... is not the key %.8s... the session "
			 "authenticated with",
			 g->curve_key, peer);
		return LC_ERR_AUTH;
	}
	return geometry_diff(p, g, why, cap);
}

static int engine_session(lc_prefill_t *p, const lc__msg_register_t *g, const char *ename,
			  uint32_t *bregion, uint64_t *boffset, const lc_fragment_t *frags,
			  int nfrags, char *why, size_t cap)
{
	for (uint32_t i = 0; i < g->nbuffers; i++) {
		bregion[i] = g->buffers[i].region;
		boffset[i] = g->buffers[i].offset;
	}
	lc_session_params_t sp = {.size = sizeof sp,
				  .name = ename,
				  .url = g->data_url,
				  .has_token = !!(g->flags & LC__REG_HAS_TOKEN),
				  .region_descs = g->region_descs,
				  .region_desc_lens = g->region_desc_lens,
				  .region_count = g->nregions,
				  .buffer_region = bregion,
				  .buffer_offset = boffset,
				  .fragments = frags,
				  .fragment_count = (size_t)nfrags};
	memcpy(sp.token.bytes, g->token, LC_TOKEN_LEN);
	int rc = lc_engine_session_add(p->engine, &sp);
	if (rc)
		snprintf(why, cap, "session refused by the engine: %s", lc_strerror(rc));
	return rc;
}

/* Forget session s: at the engine (it has no live room), then
 * here. Control thread, which alone adds and removes sessions. */
static void evict(lc_prefill_t *p, lc__dsess_t *s)
{
	lc_engine_session_remove(p->engine, s->ename); /* -ENOENT: a replica's */
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nsessions; i++)
		if (p->sessions[i] == s) {
			p->sessions[i] = p->sessions[--p->nsessions];
			break;
		}
	pthread_mutex_unlock(&p->lock);
	lc__ptomb_t *t = &p->tombs[p->tomb_next];
	p->tomb_next = (p->tomb_next + 1) % LC__P_TOMBS;
	snprintf(t->name, sizeof t->name, "%s", s->name);
	memcpy(t->secret, s->secret, LC__MSG_SECRET_LEN);
	snprintf(t->status_ep, sizeof t->status_ep, "%s", s->status_ep);
	snprintf(t->key, sizeof t->key, "%s", s->key);
	uint64_t n = LC__COUNT(p->ctx, sessions_evicted) + 1;
	LC__LOG_PEER(LC_LOG_INFO, "prefill %s: evicted idle D session %.200s (%llu so far)",
		     p->name, s->ename, (unsigned long long)n);
	lc__push_close(s->push);
	free(s);
}

/* Unproven sessions first (none of their rooms succeeded: a forged
 * REGISTER's are), then oldest activity first. */
static int by_activity(const void *a, const void *b)
{
	const lc__dsess_t *x = *(lc__dsess_t *const *)a, *y = *(lc__dsess_t *const *)b;
	if (x->proven != y->proven)
		return x->proven ? 1 : -1;
	return (x->active_ns > y->active_ns) - (x->active_ns < y->active_ns);
}

/* Whether s may go for a newcomer, which has proved nothing: never with a
 * live room, nor within grace_ns of its last activity (unproven) or keep_ns
 * (a room of it succeeded). Lock held. */
static bool evictable(const lc__dsess_t *s, bool live, uint64_t now, uint64_t grace_ns,
		      uint64_t keep_ns)
{
	return !live && now - s->active_ns >= (s->proven ? keep_ns : grace_ns);
}

/* Evict up to want evictable sessions, unproven and oldest first. Returns
 * how many went. */
static size_t evict_idle(lc_prefill_t *p, size_t want)
{
	size_t n = p->nsessions, idle = 0, gone = 0;
	lc__dsess_t **list = calloc(n, sizeof *list);
	const char **names = calloc(n, sizeof *names);
	bool *live = calloc(n, sizeof *live);
	uint64_t now = lc__now_ns();
	uint64_t grace = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_session_grace_ms) * 1000000ull;
	uint64_t keep = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_p_session_keep_ms) * 1000000ull;
	if (!list || !names || !live)
		goto out;
	pthread_mutex_lock(&p->lock);
	memcpy(list, p->sessions, n * sizeof *list);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < n; i++)
		names[i] = list[i]->ename;
	if (lc__engine_sessions_live(p->engine, names, n, live))
		goto out;
	pthread_mutex_lock(&p->lock);  /* proven is set by the engine's callbacks */
	for (size_t i = 0; i < n; i++) /* parked infos count as live rooms */
		if (evictable(list[i], live[i] || list[i]->parked, now, grace, keep))
			list[idle++] = list[i];
	qsort(list, idle, sizeof *list, by_activity);
	pthread_mutex_unlock(&p->lock);
	for (; gone < want && gone < idle; gone++)
		evict(p, list[gone]);
	if (gone)
		malloc_trim(0); /* a flood's freed sessions go back to the system */
out:
	free(list);
	free(names);
	free(live);
	return gone;
}

/* Room in the table for a newcomer (a new incarnation): at p_sessions_max,
 * evictable sessions go until an eighth of the table is free, so that a
 * churn pays for one scan of the rooms per eighth. -ENOSPC when none may
 * go: the newcomer is refused (and answered), never an active session
 * evicted for it. */
static int make_room(lc_prefill_t *p, char *why, size_t cap)
{
	size_t max = (size_t)lc__ctx_cfg(p->ctx, LC__CFG_p_sessions_max);
	max = LC__MIN(max, (size_t)LC__P_MAX_SESSIONS);
	pthread_mutex_lock(&p->lock);
	size_t n = p->nsessions;
	pthread_mutex_unlock(&p->lock);
	if (n < max)
		return 0;
	size_t keep = max - LC__MAX(max / 8, (size_t)1);
	if (evict_idle(p, n - keep))
		return 0;
	uint64_t k = LC__COUNT(p->ctx, sessions_refused_full) + 1;
	LC__LOG_PEER(LC_LOG_WARN,
		     "prefill %s: session table full of live or recent sessions: refusing "
		     "newcomers (%llu so far)",
		     p->name, (unsigned long long)k);
	snprintf(why, cap,
		 "P rank %d holds %zu sessions (p_sessions_max), each live or recent "
		 "(p_session_grace_ms, p_session_keep_ms): newcomer refused",
		 p->rank, n);
	return -ENOSPC;
}

/* Hand D's session to the engine. A replica rank (heterogeneous TP, no
 * fragment for this D) adds none: only dummy infos, which name no
 * session, come from it. */
static int add_session(lc_prefill_t *p, const lc__msg_register_t *g, const char *ename, char *why,
		       size_t cap)
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
		rc = engine_session(p, g, ename, bregion, boffset, frags, nfrags, why, cap);
	free(bregion);
	free(boffset);
	free(frags);
	return rc;
}

/* The engine name of a new incarnation of session id `name`: the id itself
 * while no session uses it, else "name#N", never one in use (a D may choose
 * an id that looks like another's incarnation). Lock held. */
static void pick_ename(lc_prefill_t *p, const char *name, char *out, size_t cap)
{
	static _Atomic uint64_t next = 1;
	snprintf(out, cap, "%s", name);
	while (lc__prefill_session_by_ename(p, out))
		snprintf(out, cap, "%s#%llu", name, (unsigned long long)atomic_fetch_add(&next, 1));
}

/* The engine name (to ename) of the incarnation this REGISTER refreshes
 * (the one with its secret), or of a new one, for which the table makes
 * room. LC_ERR_AUTH when the incarnation was registered over CURVE by
 * another key: a secret alone does not move a session to another key. */
static int incarnation(lc_prefill_t *p, const lc__msg_t *m, const char *peer, char *ename,
		       size_t cap, char *why, size_t why_cap)
{
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_find(p, m->reg.session, m->secret);
	if (s)
		snprintf(ename, cap, "%s", s->ename);
	else
		pick_ename(p, m->reg.session, ename, cap);
	bool other_key = s && s->peer[0] && strcmp(s->peer, peer);
	char bound[9] = "";
	if (other_key) /* copied under the lock: s may go once it is dropped */
		snprintf(bound, sizeof bound, "%.8s", s->peer);
	pthread_mutex_unlock(&p->lock);
	if (other_key) {
		LC__P_CTL_ADD(p, session_mismatches);
		snprintf(why, why_cap,
			 "session %.200s is bound to the CURVE key %s..., not %.8s...",
			 m->reg.session, bound, peer);
		return LC_ERR_AUTH;
	}
	return s ? 0 : make_room(p, why, why_cap);
}

/* Accepted: remember where the incarnation's statuses go. */
static lc__dsess_t *remember_session(lc_prefill_t *p, const lc__msg_t *m, const char *ename,
				     const char *peer)
{
	const lc__msg_register_t *g = &m->reg;
	pthread_mutex_lock(&p->lock);
	lc__dsess_t *s = lc__prefill_session_by_ename(p, ename);
	bool twin = !s && lc__prefill_session_any(p, g->session);
	const char *key = g->flags & LC__REG_HAS_CURVE_KEY ? g->curve_key : "";
	bool reconnect = !s || strcmp(s->status_ep, g->status_ep) || strcmp(s->key, key);
	if (!s && p->nsessions < LC__P_MAX_SESSIONS && (s = calloc(1, sizeof *s))) {
		snprintf(s->name, sizeof s->name, "%s", g->session);
		snprintf(s->ename, sizeof s->ename, "%s", ename);
		memcpy(s->secret, m->secret, LC__MSG_SECRET_LEN);
		snprintf(s->peer, sizeof s->peer, "%s", peer);
		p->sessions[p->nsessions++] = s;
	}
	pthread_mutex_unlock(&p->lock);
	if (twin) {
		LC__P_CTL_ADD(p, session_incarnations);
		LC__INFO("prefill %s: D session %s registered with another secret: a new "
			 "incarnation (%s) beside the earlier one, which keeps its rooms",
			 p->name, g->session, ename);
	}
	if (s)
		s->active_ns = lc__now_ns();
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
void lc__prefill_handle_register(lc_prefill_t *p, const lc__msg_t *m, const char *peer)
{
	const lc__msg_register_t *g = &m->reg;
	char why[LC__MSG_STR_MAX] = "", ename[LC__P_ENAME_MAX];
	lc__msg_t *reply = calloc(1, sizeof *reply);
	if (!reply)
		return;
	reply->type = LC__MSG_REGISTER_REPLY;
	snprintf(reply->reply.session, sizeof reply->reply.session, "%s", g->session);
	reply->reply.p_rank = (uint32_t)p->rank;
	memcpy(reply->secret, m->secret, LC__MSG_SECRET_LEN); /* the registrant's own */
	LC__P_CTL_ADD(p, registrations);
	int rc = check_register(p, m, peer, why, sizeof why);
	if (!rc)
		rc = incarnation(p, m, peer, ename, sizeof ename, why, sizeof why);
	if (!rc)
		rc = add_session(p, g, ename, why, sizeof why);
	if (rc) {
		LC__P_CTL_ADD(p, registrations_refused);
		LC__ERROR_PEER("prefill %s: refused D session %.200s: %s", p->name, g->session,
			       why);
		reply->reply.result = rc;
		lc__reason(reply->reply.reason, sizeof reply->reply.reason, "%s", why);
		bool has_key = g->flags & LC__REG_HAS_CURVE_KEY;
		lc__prefill_reply(p, g->status_ep,
				  key_lie(g, peer) ? peer
				  : has_key        ? g->curve_key
						   : NULL,
				  reply);
		free(reply);
		return;
	}
	lc__dsess_t *s = remember_session(p, m, ename, peer);
	if (s) /* a registered D's connection keeps its place (inbox_guard.h) */
		lc__pull_vouch(p->pull);
	LC__LOG_PEER(LC_LOG_INFO,
		     "prefill %s: D session %.200s registered (data %.200s, status %.200s)",
		     p->name, g->session, g->data_url, g->status_ep);
	if (s && s->push)
		lc__prefill_send(p, s->push, reply);
	free(reply);
}
