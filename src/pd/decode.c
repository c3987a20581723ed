/*
 * The decode side (docs/control-plane.md): one lc_decode_t per D rank, one
 * lc_receiver_t per room.
 *
 * Threads: the control thread owns the inbox (P's statuses, layer updates,
 * registration replies) and enforces every deadline; the discovery thread
 * runs the blocking HTTP (bootstrap lookups, session registration, the
 * heartbeat) so that neither the caller nor the inbox waits on it.
 *
 * Locking: `lock` protects the receiver list, every receiver's fields and
 * the peer table. HTTP is never done with it held (the discovery thread
 * copies what it needs, drops the lock, and looks things up again by room
 * afterwards). lc_grant_revoke and non-blocking PUSH sends may run under it
 * (both are bounded: microseconds, and a zero send timeout).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "core/layout.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#endif

#define MAX_PEERS 256
#define MAX_TARGETS 64
#define RETRY_NS (200ull * 1000000)

typedef struct prank {
	bool resolved;   /* endpoint known */
	bool registered; /* registration sent since the last reset */
	int refused;     /* registration refused: the code */
	char refuse_reason[LC__MSG_STR_MAX];
	char endpoint[300];
	char key[LC__BS_KEY_MAX];
	lc__push_t *push;
} prank_t;

/* One P instance, by bootstrap address. */
typedef struct ppeer {
	char addr[LC__BS_HOST_MAX];
	lc__parallel_info_t *info; /* NULL until fetched */
	prank_t *ranks;            /* info->world_size */
	int misses;
	uint64_t next_probe_ns;
	uint64_t generation; /* bumped when the peer is declared dead */
} ppeer_t;

typedef struct target {
	int rank; /* global P rank */
	uint32_t required_dst; /* D ranks this P rank serves for the room, >= 1 */
	bool dummy;
	bool responded;
	uint32_t layers;
} target_t;

struct lc_receiver {
	lc_decode_t *d;
	uint64_t room;
	ppeer_t *peer;
	int status, fail_reason;
	char reason[LC_REASON_MAX];
	uint64_t created_ns, bootstrapped_ns, next_try_ns;
	int ntargets;
	target_t targets[MAX_TARGETS];
	uint32_t required_dst;
	int required_responses, responses;
	bool sent, granted;
	uint8_t *metadata;
	size_t metadata_len;
	bool has_metadata;
	struct lc_receiver *next;
};

struct lc_decode {
	lc_ctx_t *ctx;
	lc_layout_t *layout;
	lc_region_t **regions;
	size_t nregions;
	uint32_t *buf_region; /* per buffer */
	uint64_t *buf_offset;
	uint8_t **descs;
	size_t *desc_lens;
	lc_listener_t *listener;
	char data_url[LC__MSG_STR_MAX];
	lc_token_t token;
	char host[LC__BS_HOST_MAX];
	char endpoint[LC__MSG_STR_MAX];
	char session[LC__MSG_STR_MAX];
	int tp_size, tp_rank;
	uint64_t bootstrap_ns, waiting_ns, hb_interval_ns;
	int hb_misses;
	int64_t default_port;
	lc__zctx_t *z;
	lc__pull_t *pull;
	pthread_t ctl_thread, disc_thread;
	bool ctl_started, disc_started;
	_Atomic bool stop;
	_Atomic uint64_t ctl[LC__CTL_COUNT];

	pthread_mutex_t lock;
	pthread_cond_t cond; /* discovery work or stop */
	lc_receiver_t *receivers;
	ppeer_t *peers[MAX_PEERS];
	int npeers;
};

#define CTL_ADD(d, name) atomic_fetch_add(&(d)->ctl[LC__CTL_##name], 1)

static bool final(int status)
{
	return status == LC_ROOM_SUCCESS || status == LC_ROOM_FAILED;
}

static lc_receiver_t *find_room(lc_decode_t *d, uint64_t room)
{
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->room == room)
			return r;
	return NULL;
}

static void set_state(lc_receiver_t *r, int status)
{
	if (final(r->status) || status <= r->status)
		return;
	LC_DEBUG("receiver room %llu: %s -> %s", (unsigned long long)r->room,
		 lc_room_status_name(r->status), lc_room_status_name(status));
	r->status = status;
}

static void send_cancel(lc_decode_t *d, lc_receiver_t *r, const char *reason);

/* Fail a room: grants revoked first (no late write lands), then P told
 * (when `tell_p`), with `lock` held. */
static void fail_room(lc_decode_t *d, lc_receiver_t *r, int reason, bool tell_p,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void fail_room(lc_decode_t *d, lc_receiver_t *r, int reason, bool tell_p,
		      const char *fmt, ...)
{
	if (final(r->status))
		return;
	if (r->granted) {
		lc_grant_revoke(d->ctx, r->room);
		r->granted = false;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->reason, sizeof r->reason, fmt, ap);
	va_end(ap);
	LC_WARN("receiver room %llu: %s -> Failed (%s): %s", (unsigned long long)r->room,
		lc_room_status_name(r->status), lc_fail_reason_name(reason), r->reason);
	r->status = LC_ROOM_FAILED;
	r->fail_reason = reason;
	/* Also before the transfer info went out: P may already hold the room
	 * open (its sender exists) and would otherwise wait for its bootstrap
	 * deadline. Targets not yet discovered cannot be told. */
	if (tell_p)
		send_cancel(d, r, r->reason);
}

/* ---- targets (spec 5.5 / receiver route plans) ---- */

/* Whether D's page geometry differs from P's (heterogeneous TP): then P
 * sends each buffer's lc_tp_fragment, not whole pages. */
static bool tp_split(const lc_decode_t *d, const lc__parallel_info_t *pi)
{
	for (uint32_t i = 0; i < pi->nlens && i < d->layout->nbuf; i++)
		if (pi->kv_item_lens[i] != d->layout->bufs[i].item_len)
			return true;
	return false;
}

/* Whether P rank p (within its TP group of ptp) has a fragment of any
 * buffer for D rank dr of dtp: 1, 0, or LC_ERR_GEOMETRY. The unit is a
 * byte, as the bootstrap's kv_unit_lens say (spec 4.6): a page holds its
 * heads one after another. */
static int tp_serves(const lc_decode_t *d, const lc__parallel_info_t *pi, int ptp, int p, int dtp,
		     int dr, char *why, size_t cap)
{
	int any = 0;
	for (uint32_t i = 0; i < d->layout->nbuf; i++) {
		lc_tp_side_t ps = {ptp, p, pi->kv_item_lens[i], 1};
		lc_tp_side_t ds = {dtp, dr, d->layout->bufs[i].item_len, 1};
		lc_fragment_t f;
		int rc = lc_tp_fragment(&ps, &ds, &f);
		if (rc < 0) {
			snprintf(why, cap, "buffer %u item_len differs and does not split across "
					   "TP (spec 6.7): P TP %d x %llu bytes, D TP %d x %llu bytes",
				 i, ptp, (unsigned long long)ps.item_len, dtp,
				 (unsigned long long)ds.item_len);
			return LC_ERR_GEOMETRY;
		}
		any |= rc;
	}
	return any;
}

/* Heterogeneous TP: the P ranks with a fragment for this D rank are real
 * targets, each with its own fan-out; a P rank with none for any D rank
 * (a replica) is a dummy of D rank p * dtp / ptp, so its room ends too. */
static int plan_tp_targets(lc_decode_t *d, lc_receiver_t *r, const lc__parallel_info_t *pi,
			   int ptp, int base, char *why, size_t cap)
{
	int dtp = d->tp_size;
	r->required_responses = 0;
	r->required_dst = 0;
	for (int p = 0; p < ptp; p++) {
		uint32_t fan_out = 0;
		int mine = 0;
		for (int dr = 0; dr < dtp; dr++) {
			int rc = tp_serves(d, pi, ptp, p, dtp, dr, why, cap);
			if (rc < 0)
				return rc;
			fan_out += (uint32_t)rc;
			if (dr == d->tp_rank)
				mine = rc;
		}
		bool dummy = !fan_out && p * dtp / ptp == d->tp_rank;
		if (!mine && !dummy)
			continue;
		if (r->ntargets == MAX_TARGETS) {
			snprintf(why, cap, "more than %d P ranks for one D rank", MAX_TARGETS);
			return LC_ERR_GEOMETRY;
		}
		/* A dummy's P rank hears from this D rank alone. */
		r->targets[r->ntargets++] = (target_t){
			.rank = base + p, .required_dst = dummy ? 1 : fan_out, .dummy = dummy};
		if (!dummy) {
			r->required_responses++;
			r->required_dst = LC__MAX(r->required_dst, fan_out);
		}
	}
	if (!r->required_responses) {
		snprintf(why, cap, "no P rank of TP %d holds anything of D rank %d", ptp,
			 d->tp_rank);
		return LC_ERR_GEOMETRY;
	}
	return 0;
}

static int plan_targets(lc_decode_t *d, lc_receiver_t *r, const lc__parallel_info_t *pi,
			char *why, size_t cap)
{
	int ptp = pi->world_size / pi->dp_size, dtp = d->tp_size;
	int group = (int)(r->room % (uint64_t)pi->dp_size);
	int base = group * ptp;
	r->ntargets = 0;
	r->required_responses = 1;
	if (tp_split(d, pi))
		return plan_tp_targets(d, r, pi, ptp, base, why, cap);
	if (ptp == dtp) {
		r->required_dst = 1;
		r->targets[r->ntargets++] = (target_t){.rank = base + d->tp_rank, .required_dst = 1};
	} else if (dtp > ptp) {
		if (dtp % ptp) {
			snprintf(why, cap, "D tp %d is not a multiple of P tp %d", dtp, ptp);
			return LC_ERR_GEOMETRY;
		}
		r->required_dst = (uint32_t)(dtp / ptp);
		r->targets[r->ntargets++] = (target_t){.rank = base + d->tp_rank * ptp / dtp,
						       .required_dst = r->required_dst};
	} else {
		if (ptp % dtp || ptp / dtp > MAX_TARGETS) {
			snprintf(why, cap, "P tp %d is not a multiple of D tp %d (or too many)", ptp,
				 dtp);
			return LC_ERR_GEOMETRY;
		}
		int k = ptp / dtp;
		for (int i = 0; i < k; i++)
			r->targets[r->ntargets++] = (target_t){
				.rank = base + d->tp_rank * k + i, .required_dst = 1, .dummy = i > 0};
		r->required_dst = 1;
	}
	return 0;
}

/* D's own check of P's geometry from the bootstrap's parallel info. */
static int geometry_check(lc_decode_t *d, const lc__parallel_info_t *pi, char *why, size_t cap)
{
	const lc_layout_t *l = d->layout;
	if (pi->nlens && pi->nlens != l->nbuf) {
		snprintf(why, cap, "buffer count differs: P has %u buffers, D has %u", pi->nlens,
			 l->nbuf);
		return LC_ERR_GEOMETRY;
	}
	if (tp_split(d, pi))
		return 0; /* plan_tp_targets pairs the pages */
	for (uint32_t i = 0; i < pi->nlens; i++)
		if (pi->kv_item_lens[i] != l->bufs[i].item_len) {
			snprintf(why, cap, "buffer %u item_len differs: P %llu bytes, D %llu bytes", i,
				 (unsigned long long)pi->kv_item_lens[i],
				 (unsigned long long)l->bufs[i].item_len);
			return LC_ERR_GEOMETRY;
		}
	if (pi->fingerprint && pi->fingerprint != l->fingerprint) {
		snprintf(why, cap, "layout fingerprint differs: P %016llx, D %016llx",
			 (unsigned long long)pi->fingerprint, (unsigned long long)l->fingerprint);
		return LC_ERR_GEOMETRY;
	}
	return 0;
}

static void reset_peer(lc_decode_t *d, ppeer_t *pe)
{
	if (pe->info)
		for (int i = 0; i < pe->info->world_size; i++)
			lc__push_close(pe->ranks[i].push);
	free(pe->ranks);
	free(pe->info);
	pe->ranks = NULL;
	pe->info = NULL;
	pe->generation++;
}

/* ---- discovery thread ---- */

/* split: D's geometry differs from P's (heterogeneous TP): D's TP size
 * goes along, for P's lc_tp_fragment. */
static int encode_register(lc_decode_t *d, bool split, uint8_t **buf, size_t *len)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	lc__msg_buffer_t *bufs = calloc(d->layout->nbuf, sizeof *bufs);
	int rc = -ENOMEM;
	if (m && bufs) {
		m->type = LC__MSG_REGISTER;
		snprintf(m->reg.session, sizeof m->reg.session, "%s", d->session);
		snprintf(m->reg.status_ep, sizeof m->reg.status_ep, "%s", d->endpoint);
		snprintf(m->reg.data_url, sizeof m->reg.data_url, "%s", d->data_url);
		m->reg.d_rank = (uint32_t)d->tp_rank;
		m->reg.flags = LC__REG_HAS_TOKEN;
		memcpy(m->reg.token, d->token.bytes, LC_TOKEN_LEN);
		const char *key = lc__zctx_public_key(d->z);
		if (strlen(key) == LC__MSG_CURVE_KEY_LEN) { /* P answers with it */
			m->reg.flags |= LC__REG_HAS_CURVE_KEY;
			memcpy(m->reg.curve_key, key, LC__MSG_CURVE_KEY_LEN + 1);
		}
		if (split) {
			m->reg.flags |= LC__REG_HAS_TP;
			m->reg.d_tp = (uint32_t)d->tp_size;
		}
		m->reg.fingerprint = d->layout->fingerprint;
		for (uint32_t i = 0; i < d->layout->nbuf; i++) {
			const lc_buffer_t *b = &d->layout->bufs[i];
			bufs[i] = (lc__msg_buffer_t){.layer = b->layer, .kind = b->kind,
						     .flags = b->flags, .item_len = b->item_len,
						     .region = d->buf_region[i],
						     .offset = d->buf_offset[i]};
		}
		m->reg.nbuffers = d->layout->nbuf;
		m->reg.buffers = bufs;
		m->reg.nregions = (uint32_t)d->nregions;
		m->reg.region_descs = (const void **)d->descs;
		m->reg.region_desc_lens = d->desc_lens;
		rc = lc__msg_encode(m, buf, len);
	}
	free(bufs);
	free(m);
	return rc;
}

static ppeer_t *peer_get(lc_decode_t *d, const char *addr)
{
	for (int i = 0; i < d->npeers; i++)
		if (!strcmp(d->peers[i]->addr, addr))
			return d->peers[i];
	if (d->npeers >= MAX_PEERS)
		return NULL;
	ppeer_t *pe = calloc(1, sizeof *pe);
	if (!pe)
		return NULL;
	snprintf(pe->addr, sizeof pe->addr, "%s", addr);
	d->peers[d->npeers++] = pe;
	return pe;
}

/* Bring one Bootstrapping receiver forward. Called with lock held; drops
 * it around HTTP. Returns true if it made progress worth another pass. */
static void discover_one(lc_decode_t *d, uint64_t room)
{
	char why[300] = "";
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 1};
	lc_receiver_t *r = find_room(d, room);
	if (!r || r->status != LC_ROOM_BOOTSTRAPPING)
		return;
	ppeer_t *pe = r->peer;
	uint64_t gen = pe->generation;
	if (!pe->info) {
		lc__parallel_info_t *pi = calloc(1, sizeof *pi);
		if (!pi)
			return;
		char addr[LC__BS_HOST_MAX];
		snprintf(addr, sizeof addr, "%s", pe->addr);
		pthread_mutex_unlock(&d->lock);
		int rc = lc__bootstrap_get_parallel(addr, &o, pi, why, sizeof why);
		pthread_mutex_lock(&d->lock);
		if (rc || pe->info || pe->generation != gen) {
			free(pi);
			if (rc && (r = find_room(d, room))) {
				lc__reason(r->reason, sizeof r->reason, "%s", why);
				r->next_try_ns = lc__now_ns() + RETRY_NS;
			}
			return;
		}
		pe->ranks = calloc((size_t)pi->world_size, sizeof *pe->ranks);
		if (!pe->ranks) {
			free(pi);
			return;
		}
		pe->info = pi;
		if (!(r = find_room(d, room)) || r->status != LC_ROOM_BOOTSTRAPPING)
			return;
	}
	if (geometry_check(d, pe->info, why, sizeof why)) {
		LC_ERROR("decode %s: P at %s refused: %s", d->session, pe->addr, why);
		fail_room(d, r, LC_FAIL_BAD_INPUT, false, "geometry mismatch with P at %s: %s",
			  pe->addr, why);
		return;
	}
	if (!r->ntargets && plan_targets(d, r, pe->info, why, sizeof why)) {
		fail_room(d, r, LC_FAIL_BAD_INPUT, false, "%s", why);
		return;
	}
	int ptp = pe->info->world_size / pe->info->dp_size;
	for (int i = 0; i < r->ntargets; i++) {
		int rank = r->targets[i].rank;
		prank_t *pr = &pe->ranks[rank];
		if (pr->refused) {
			fail_room(d, r, LC_FAIL_BAD_INPUT, false, "P rank %d refused this D: %s", rank,
				  pr->refuse_reason);
			return;
		}
		if (!pr->resolved) {
			lc__rank_info_t ri;
			char addr[LC__BS_HOST_MAX];
			snprintf(addr, sizeof addr, "%s", pe->addr);
			pthread_mutex_unlock(&d->lock);
			int rc = lc__bootstrap_get_rank(addr, rank % ptp, rank / ptp, &o, &ri, why,
							sizeof why);
			pthread_mutex_lock(&d->lock);
			if (pe->generation != gen || !pe->info)
				return;
			r = find_room(d, room);
			if (rc) {
				if (r) {
					lc__reason(r->reason, sizeof r->reason, "%s", why);
					r->next_try_ns = lc__now_ns() + RETRY_NS;
				}
				return;
			}
			if (!pr->resolved) {
				snprintf(pr->endpoint, sizeof pr->endpoint, "tcp://%s:%d", ri.rank_ip,
					 ri.rank_port);
				snprintf(pr->key, sizeof pr->key, "%s", ri.curve_key);
				pr->resolved = true;
			}
			if (!r || r->status != LC_ROOM_BOOTSTRAPPING)
				return;
		}
		if (!pr->registered) {
			uint8_t *buf;
			size_t len;
			if (!pr->push && lc__push_connect(d->z, pr->endpoint, pr->key, &pr->push)) {
				fail_room(d, r, LC_FAIL_TRANSFER, false, "cannot connect to P rank %d",
					  rank);
				return;
			}
			if (encode_register(d, tp_split(d, pe->info), &buf, &len)) {
				fail_room(d, r, LC_FAIL_BAD_INPUT, false, "cannot encode the registration");
				return;
			}
			int rc = lc__push_send(pr->push, buf, len, 0);
			free(buf);
			if (rc) {
				CTL_ADD(d, send_failures);
				r->next_try_ns = lc__now_ns() + RETRY_NS;
				return;
			}
			CTL_ADD(d, msgs_sent);
			CTL_ADD(d, registrations);
			pr->registered = true;
			LC_INFO("decode %s: registered with P rank %d at %s", d->session, rank,
				pr->endpoint);
		}
	}
	r->reason[0] = '\0';
	r->bootstrapped_ns = lc__now_ns();
	set_state(r, LC_ROOM_BOOTSTRAPPED);
}

static void heartbeat(lc_decode_t *d, uint64_t now)
{
	lc__http_opts_t o = {.timeout_ms = (int)LC__MIN(d->hb_interval_ns / 1000000, 2000),
			     .retries = 0};
	for (int i = 0; i < d->npeers; i++) {
		ppeer_t *pe = d->peers[i];
		if (now < pe->next_probe_ns)
			continue;
		pe->next_probe_ns = now + d->hb_interval_ns;
		/* A P never discovered is not "dead": its rooms wait for it until
		 * their bootstrap deadline (a D may start before its P). */
		if (!pe->info)
			continue;
		bool active = false;
		for (lc_receiver_t *r = d->receivers; r && !active; r = r->next)
			active = r->peer == pe && !final(r->status);
		if (!active)
			continue;
		char addr[LC__BS_HOST_MAX];
		snprintf(addr, sizeof addr, "%s", pe->addr);
		uint64_t gen = pe->generation;
		pthread_mutex_unlock(&d->lock);
		int rc = lc__bootstrap_health(addr, &o);
		pthread_mutex_lock(&d->lock);
		if (pe->generation != gen)
			continue;
		if (!rc) {
			pe->misses = 0;
			continue;
		}
		CTL_ADD(d, heartbeat_failures);
		if (++pe->misses < d->hb_misses)
			continue;
		CTL_ADD(d, peers_dead);
		LC_ERROR("decode %s: P at %s missed %d heartbeats: failing its rooms", d->session,
			 pe->addr, pe->misses);
		for (lc_receiver_t *r = d->receivers; r; r = r->next)
			if (r->peer == pe)
				fail_room(d, r, LC_FAIL_SESSION_GONE, false,
					  "P at %s missed %d heartbeats", pe->addr, pe->misses);
		pe->misses = 0;
		reset_peer(d, pe); /* a restarted P is discovered and registered afresh */
	}
}

static void *disc_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-decode-disc");
	lc_decode_t *d = arg;
	pthread_mutex_lock(&d->lock);
	while (!atomic_load(&d->stop)) {
		uint64_t now = lc__now_ns();
		uint64_t next = now + LC__MIN(d->hb_interval_ns, 1000000000ull);
		/* Receivers waiting for discovery, by room (the list may change
		 * while the lock is dropped). */
		uint64_t rooms[64];
		int n = 0;
		for (lc_receiver_t *r = d->receivers; r && n < 64; r = r->next)
			if (r->status == LC_ROOM_BOOTSTRAPPING) {
				if (r->next_try_ns <= now)
					rooms[n++] = r->room;
				else if (r->next_try_ns < next)
					next = r->next_try_ns;
			}
		for (int i = 0; i < n && !atomic_load(&d->stop); i++)
			discover_one(d, rooms[i]);
		heartbeat(d, lc__now_ns());
		if (n)
			continue;
		struct timespec ts = lc__abs_ts(next);
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* ---- control thread ---- */

static void send_cancel(lc_decode_t *d, lc_receiver_t *r, const char *reason)
{
	ppeer_t *pe = r->peer;
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
		for (int i = 0; i < r->ntargets; i++) {
			prank_t *pr = &pe->ranks[r->targets[i].rank];
			if (pr->push && !lc__push_send(pr->push, buf, len, 0))
				CTL_ADD(d, msgs_sent);
		}
		free(buf);
	}
	free(m);
}

static target_t *target_of(lc_receiver_t *r, uint32_t p_rank)
{
	for (int i = 0; i < r->ntargets; i++)
		if (r->targets[i].rank == (int)p_rank)
			return &r->targets[i];
	return NULL;
}

static void handle_status(lc_decode_t *d, const lc__msg_status_t *s)
{
	CTL_ADD(d, statuses);
	lc_receiver_t *r = find_room(d, s->room);
	target_t *t = r ? target_of(r, s->p_rank) : NULL;
	if (!r || final(r->status) || !t || t->dummy) {
		/* Unknown rooms never create entries (bounded tables). */
		CTL_ADD(d, msgs_unexpected);
		LC_DEBUG("decode %s: status for room %llu from P rank %u ignored", d->session,
			 (unsigned long long)s->room, s->p_rank);
		return;
	}
	if (s->status == LC_ROOM_FAILED) {
		/* A session P no longer knows: register again next time. */
		if (s->fail_reason == LC_FAIL_SESSION_GONE && r->peer->ranks &&
		    (int)s->p_rank < r->peer->info->world_size)
			r->peer->ranks[s->p_rank].registered = false;
		fail_room(d, r, s->fail_reason ? (int)s->fail_reason : LC_FAIL_TRANSFER, false,
			  "P rank %u: %s", s->p_rank, s->reason);
		return;
	}
	if (!t->responded) {
		t->responded = true;
		r->responses++;
	}
	if (!r->has_metadata && s->metadata_len) { /* first wins */
		r->metadata = malloc(s->metadata_len);
		if (r->metadata) {
			memcpy(r->metadata, s->metadata, s->metadata_len);
			r->metadata_len = s->metadata_len;
			r->has_metadata = true;
		}
	}
	if (r->responses >= r->required_responses) {
		for (int i = 0; i < r->ntargets; i++)
			r->targets[i].layers = d->layout->layers;
		if (r->granted) { /* every write acknowledged: nothing more may land */
			lc_grant_revoke(d->ctx, r->room);
			r->granted = false;
		}
		set_state(r, LC_ROOM_SUCCESS);
	}
}

static void handle_message(lc_decode_t *d, const void *buf, size_t len)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	char why[200];
	if (!m)
		return;
	CTL_ADD(d, msgs_received);
	if (lc__msg_decode(buf, len, m, why, sizeof why)) {
		CTL_ADD(d, msgs_malformed);
		LC_WARN("decode %s: dropped a malformed message (%zu bytes): %s", d->session, len,
			why);
		free(m);
		return;
	}
	pthread_mutex_lock(&d->lock);
	switch (m->type) {
	case LC__MSG_STATUS:
		handle_status(d, &m->status);
		break;
	case LC__MSG_LAYERS: {
		CTL_ADD(d, layer_updates);
		lc_receiver_t *r = find_room(d, m->layers.room);
		target_t *t = r ? target_of(r, m->layers.p_rank) : NULL;
		if (t && !final(r->status) && m->layers.layers <= d->layout->layers &&
		    m->layers.layers > t->layers)
			t->layers = m->layers.layers;
		else
			CTL_ADD(d, msgs_unexpected);
		break;
	}
	case LC__MSG_REGISTER_REPLY: {
		if (!m->reply.result)
			break;
		CTL_ADD(d, registrations_refused);
		LC_ERROR("decode %s: P rank %u refused the registration: %s", d->session,
			 m->reply.p_rank, m->reply.reason);
		for (int i = 0; i < d->npeers; i++) {
			ppeer_t *pe = d->peers[i];
			if (!pe->info || (int)m->reply.p_rank >= pe->info->world_size ||
			    !pe->ranks[m->reply.p_rank].registered)
				continue;
			prank_t *pr = &pe->ranks[m->reply.p_rank];
			pr->refused = m->reply.result;
			snprintf(pr->refuse_reason, sizeof pr->refuse_reason, "%s", m->reply.reason);
			for (lc_receiver_t *r = d->receivers; r; r = r->next)
				if (r->peer == pe && target_of(r, m->reply.p_rank))
					fail_room(d, r, LC_FAIL_BAD_INPUT, false,
						  "P rank %u refused this D: %s", m->reply.p_rank,
						  m->reply.reason);
		}
		break;
	}
	default:
		CTL_ADD(d, msgs_unexpected);
		LC_WARN("decode %s: unexpected %s message dropped", d->session,
			lc__msg_type_name(m->type));
	}
	pthread_mutex_unlock(&d->lock);
	lc__msg_free(m);
	free(m);
}

/* Deadlines of every state; returns ms until the next one (capped). */
static int check_deadlines(lc_decode_t *d, uint64_t now)
{
	uint64_t next = now + 200ull * 1000000;
	pthread_mutex_lock(&d->lock);
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (final(r->status))
			continue;
		if (r->status == LC_ROOM_BOOTSTRAPPING) {
			uint64_t dl = r->created_ns + d->bootstrap_ns;
			if (now >= dl)
				fail_room(d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, false,
					  "not bootstrapped within %llu ms%s%s",
					  (unsigned long long)(d->bootstrap_ns / 1000000),
					  r->reason[0] ? ": " : "", r->reason);
			else if (dl < next)
				next = dl;
		} else {
			uint64_t dl = r->bootstrapped_ns + d->waiting_ns;
			if (now >= dl)
				fail_room(d, r, LC_FAIL_WAITING_TIMEOUT, true,
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
static void *ctl_main(void *arg)
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

/* ---- create / destroy ---- */

int lc_decode_create(lc_ctx_t *ctx, const lc_decode_params_t *params, lc_decode_t **out)
{
#ifndef LC_HAVE_ZMQ
	return LC_ENOTSUP;
#else
	lc_decode_params_t pp = {0};
	int rc;
	if (!ctx || !params || !out || params->size < offsetof(lc_decode_params_t, tp_size))
		return -EINVAL;
	memcpy(&pp, params, LC__MIN(params->size, sizeof pp));
	if (!pp.layout || !pp.regions || !pp.region_count || !pp.listen_url ||
	    pp.region_count > LC__MSG_MAX_REGIONS)
		return -EINVAL;
	if (pp.tp_size <= 0)
		pp.tp_size = 1;
	if (pp.tp_rank < 0 || pp.tp_rank >= pp.tp_size)
		return -EINVAL;
	lc_decode_t *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	d->ctx = ctx;
	d->tp_size = pp.tp_size;
	d->tp_rank = pp.tp_rank;
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	snprintf(d->host, sizeof d->host, "%s", pp.host ? pp.host : "127.0.0.1");
	int64_t v;
	lc_ctx_config_get_int(ctx, "bootstrap_timeout_ms", &v);
	d->bootstrap_ns = (uint64_t)v * 1000000;
	lc_ctx_config_get_int(ctx, "waiting_timeout_ms", &v);
	d->waiting_ns = (uint64_t)v * 1000000;
	lc_ctx_config_get_int(ctx, "heartbeat_interval_ms", &v);
	d->hb_interval_ns = (uint64_t)v * 1000000;
	lc_ctx_config_get_int(ctx, "heartbeat_misses", &v);
	d->hb_misses = (int)v;
	lc_ctx_config_get_int(ctx, "bootstrap_port", &d->default_port);
	if ((rc = lc__layout_clone(pp.layout, &d->layout)))
		goto fail;

	/* The data-plane listener before the regions are packed: a ucx
	 * listener must exist when a region is packed for its descriptor to
	 * carry the ucx keys (docs/transport-ucx.md). */
	if ((rc = lc_listener_create(ctx, pp.listen_url, &d->listener)) ||
	    (rc = lc_listener_url(d->listener, d->data_url, sizeof d->data_url)) < 0)
		goto fail;

	/* Map every buffer to the region holding it; pack the regions. */
	d->nregions = pp.region_count;
	d->regions = calloc(d->nregions, sizeof *d->regions);
	d->descs = calloc(d->nregions, sizeof *d->descs);
	d->desc_lens = calloc(d->nregions, sizeof *d->desc_lens);
	d->buf_region = calloc(d->layout->nbuf, sizeof *d->buf_region);
	d->buf_offset = calloc(d->layout->nbuf, sizeof *d->buf_offset);
	if (!d->regions || !d->descs || !d->desc_lens || !d->buf_region || !d->buf_offset) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < d->nregions; i++) {
		d->regions[i] = pp.regions[i];
		d->descs[i] = malloc(LC_REGION_DESC_MAX);
		if (!d->descs[i]) {
			rc = -ENOMEM;
			goto fail;
		}
		rc = lc_region_pack(pp.regions[i], d->descs[i], LC_REGION_DESC_MAX);
		if (rc < 0)
			goto fail;
		d->desc_lens[i] = (size_t)rc;
	}
	for (uint32_t b = 0; b < d->layout->nbuf; b++) {
		const lc_buffer_t *buf = &d->layout->bufs[b];
		bool found = false;
		for (size_t i = 0; i < d->nregions && !found; i++) {
			uintptr_t base = (uintptr_t)lc_region_addr(d->regions[i]);
			uintptr_t a = (uintptr_t)buf->base;
			if (a >= base && a + buf->length <= base + lc_region_length(d->regions[i])) {
				d->buf_region[b] = (uint32_t)i;
				d->buf_offset[b] = a - base;
				found = true;
			}
		}
		if (!found) {
			LC_ERROR("decode: buffer %u is not inside any given region", b);
			rc = -EINVAL;
			goto fail;
		}
	}
	if ((rc = lc_token_issue(ctx, &d->token)))
		goto fail;
	if ((rc = lc__zctx_create(&d->z)) ||
	    (rc = lc__pull_bind(d->z, d->host, &d->pull, d->endpoint, sizeof d->endpoint)))
		goto fail;
	if (pp.session && *pp.session) {
		if (strlen(pp.session) >= sizeof d->session) {
			rc = -EINVAL;
			goto fail;
		}
		snprintf(d->session, sizeof d->session, "%s", pp.session);
	} else {
		const char *colon = strrchr(d->endpoint, ':');
		lc__reason(d->session, sizeof d->session, "d%d@%s:%s", d->tp_rank, d->host,
			 colon ? colon + 1 : "0");
	}
	if (pthread_create(&d->ctl_thread, NULL, ctl_main, d)) {
		rc = -EAGAIN;
		goto fail;
	}
	d->ctl_started = true;
	if (pthread_create(&d->disc_thread, NULL, disc_main, d)) {
		rc = -EAGAIN;
		goto fail;
	}
	d->disc_started = true;
	LC_INFO("decode %s: data %s, control %s", d->session, d->data_url, d->endpoint);
	*out = d;
	return 0;
fail:
	lc_decode_destroy(d);
	return rc;
#endif
}

void lc_decode_destroy(lc_decode_t *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		fail_room(d, r, LC_FAIL_CANCELLED, true, "decode side destroyed");
	atomic_store(&d->stop, true);
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	if (d->ctl_started)
		pthread_join(d->ctl_thread, NULL);
	if (d->disc_started)
		pthread_join(d->disc_thread, NULL);
	for (int i = 0; i < d->npeers; i++) {
		reset_peer(d, d->peers[i]);
		free(d->peers[i]);
	}
	lc__pull_close(d->pull);
	lc__zctx_destroy(d->z);
	lc_listener_destroy(d->listener);
	if (d->descs)
		for (size_t i = 0; i < d->nregions; i++)
			free(d->descs[i]);
	free(d->descs);
	free(d->desc_lens);
	free(d->regions);
	free(d->buf_region);
	free(d->buf_offset);
	lc_layout_destroy(d->layout);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

int lc_decode_endpoint(const lc_decode_t *d, char *buf, size_t cap)
{
	if (!d || !buf)
		return -EINVAL;
	int n = snprintf(buf, cap, "%s", d->endpoint);
	return (size_t)n >= cap ? -ENOSPC : n;
}

int lc_decode_counter(lc_decode_t *d, const char *name, uint64_t *out)
{
	if (!d || !name || !out)
		return -EINVAL;
	for (int i = 0; i < LC__CTL_COUNT; i++)
		if (!strcmp(lc__ctl_counter_name(i), name)) {
			*out = atomic_load(&d->ctl[i]);
			return 0;
		}
	return -ENOENT;
}

/* ---- receivers ---- */

int lc_receiver_create(lc_decode_t *d, const char *bootstrap, uint64_t room,
		       lc_receiver_t **out)
{
	char addr[LC__BS_HOST_MAX];
	if (!d || !out)
		return -EINVAL;
	if (bootstrap && *bootstrap) {
		const char *a = !strncmp(bootstrap, "http://", 7) ? bootstrap + 7 : bootstrap;
		if (strlen(a) >= sizeof addr || !strchr(a, ':'))
			return -EINVAL;
		snprintf(addr, sizeof addr, "%s", a);
	} else {
		snprintf(addr, sizeof addr, "127.0.0.1:%lld", (long long)d->default_port);
	}
	lc_receiver_t *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->d = d;
	r->room = room;
	r->status = LC_ROOM_BOOTSTRAPPING;
	r->created_ns = lc__now_ns();
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	if (find_room(d, room))
		rc = -EEXIST;
	else if (!(r->peer = peer_get(d, addr)))
		rc = -ENOSPC;
	if (rc) {
		pthread_mutex_unlock(&d->lock);
		free(r);
		return rc;
	}
	r->next = d->receivers;
	d->receivers = r;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	*out = r;
	return 0;
}

/* Grant [pages] of every page buffer (slots of every state buffer). */
static int grant_pages(lc_decode_t *d, lc_receiver_t *r, const lc_receiver_pages_t *pg)
{
	for (uint32_t b = 0; b < d->layout->nbuf; b++) {
		const lc_buffer_t *buf = &d->layout->bufs[b];
		bool state = buf->kind == LC_BUFFER_STATE;
		const int64_t *ids = state ? pg->state_slots : pg->pages;
		size_t n = state ? pg->state_slot_count : pg->page_count;
		uint64_t items = buf->length / buf->item_len;
		for (size_t i = 0; i < n;) {
			size_t j = i + 1;
			while (j < n && ids[j] == ids[j - 1] + 1)
				j++;
			if (ids[i] < 0 || (uint64_t)ids[j - 1] >= items)
				return -EINVAL;
			int rc = lc_grant_add(d->ctx, r->room, d->regions[d->buf_region[b]],
					      d->buf_offset[b] + (uint64_t)ids[i] * buf->item_len,
					      (uint64_t)(j - i) * buf->item_len);
			if (rc < 0)
				return rc;
			i = j;
		}
	}
	return 0;
}

int lc_receiver_send(lc_receiver_t *r, const lc_receiver_pages_t *pages)
{
	lc_receiver_pages_t pg = {0};
	if (!r || !pages || pages->size < offsetof(lc_receiver_pages_t, prefix_len))
		return -EINVAL;
	memcpy(&pg, pages, LC__MIN(pages->size, sizeof pg));
	if (pages->size <= offsetof(lc_receiver_pages_t, aux_index))
		pg.aux_index = -1;
	if ((pg.page_count && !pg.pages) || (pg.state_slot_count && !pg.state_slots) ||
	    pg.page_count > LC__MSG_MAX_PAGES || pg.state_slot_count > LC__MSG_MAX_SLOTS ||
	    pg.aux_index < -1)
		return -EINVAL;
	lc_decode_t *d = r->d;
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	if (r->status != LC_ROOM_BOOTSTRAPPED || r->sent) {
		rc = LC_ERR_STATE;
		goto out;
	}
	if ((rc = grant_pages(d, r, &pg))) {
		lc_grant_revoke(d->ctx, r->room);
		goto out;
	}
	r->granted = true;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < r->ntargets; i++) {
		prank_t *pr = r->peer->ranks ? &r->peer->ranks[r->targets[i].rank] : NULL;
		memset(m, 0, sizeof *m);
		m->type = LC__MSG_TRANSFER_INFO;
		lc__msg_transfer_info_t *t = &m->info;
		t->room = r->room;
		snprintf(t->session, sizeof t->session, "%s", d->session);
		snprintf(t->status_ep, sizeof t->status_ep, "%s", d->endpoint);
		t->required_dst = r->targets[i].required_dst;
		t->prefix_len = pg.prefix_len;
		t->aux_index = -1;
		if (r->targets[i].dummy) {
			t->flags = LC__INFO_DUMMY;
		} else {
			t->aux_index = pg.aux_index;
			t->page_count = (uint32_t)pg.page_count;
			t->pages = (int64_t *)pg.pages;
			t->slot_count = (uint32_t)pg.state_slot_count;
			t->slots = (int64_t *)pg.state_slots;
		}
		uint8_t *buf;
		size_t len;
		if (!pr || !pr->push || (rc = lc__msg_encode(m, &buf, &len))) {
			rc = rc ? rc : LC_ERR_STATE;
			break;
		}
		rc = lc__push_send(pr->push, buf, len, 0);
		free(buf);
		if (rc) {
			CTL_ADD(d, send_failures);
			break;
		}
		CTL_ADD(d, msgs_sent);
		CTL_ADD(d, transfer_infos);
	}
	free(m);
	r->sent = true;
	if (rc) {
		fail_room(d, r, LC_FAIL_TRANSFER, true, "sending the transfer info: %s",
			  lc_strerror(rc));
		rc = 0; /* the room is Failed; poll says why */
	} else {
		set_state(r, LC_ROOM_TRANSFERRING);
	}
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

static uint32_t layers_of(const lc_receiver_t *r)
{
	uint32_t m = UINT32_MAX;
	for (int i = 0; i < r->ntargets; i++)
		if (!r->targets[i].dummy)
			m = LC__MIN(m, r->targets[i].layers);
	return m == UINT32_MAX ? 0 : m;
}

int lc_receiver_poll(lc_receiver_t *r, lc_room_info_t *out)
{
	if (!r)
		return -EINVAL;
	lc_decode_t *d = r->d;
	pthread_mutex_lock(&d->lock);
	int status = r->status;
	if (out) {
		lc_room_info_t info = {0};
		info.size = out->size ? LC__MIN(out->size, sizeof info) : sizeof info;
		info.status = r->status;
		info.fail_reason = r->fail_reason;
		snprintf(info.reason, sizeof info.reason, "%s",
			 r->status == LC_ROOM_FAILED ? r->reason : "");
		info.dst_count = (uint32_t)r->ntargets;
		info.required_dst_count = r->required_dst;
		info.layers_landed = layers_of(r);
		memcpy(out, &info, info.size);
	}
	pthread_mutex_unlock(&d->lock);
	return status;
}

int lc_receiver_layers_ready(lc_receiver_t *r)
{
	if (!r)
		return -EINVAL;
	pthread_mutex_lock(&r->d->lock);
	int n = r->status == LC_ROOM_FAILED ? 0 : (int)layers_of(r);
	pthread_mutex_unlock(&r->d->lock);
	return n;
}

int lc_receiver_metadata(lc_receiver_t *r, void *buf, size_t cap)
{
	if (!r || (cap && !buf))
		return -EINVAL;
	int rc;
	pthread_mutex_lock(&r->d->lock);
	if (r->status != LC_ROOM_SUCCESS)
		rc = LC_ERR_STATE;
	else if (r->metadata_len > cap)
		rc = -ENOSPC;
	else {
		if (r->metadata_len)
			memcpy(buf, r->metadata, r->metadata_len);
		rc = (int)r->metadata_len;
	}
	pthread_mutex_unlock(&r->d->lock);
	return rc;
}

int lc_receiver_cancel(lc_receiver_t *r, const char *reason)
{
	if (!r)
		return -EINVAL;
	int rc = 0;
	pthread_mutex_lock(&r->d->lock);
	if (final(r->status))
		rc = LC_ERR_STATE;
	else
		fail_room(r->d, r, LC_FAIL_CANCELLED, true, "cancelled by D: %s",
			  reason ? reason : "no reason");
	pthread_mutex_unlock(&r->d->lock);
	return rc;
}

void lc_receiver_destroy(lc_receiver_t *r)
{
	if (!r)
		return;
	lc_decode_t *d = r->d;
	pthread_mutex_lock(&d->lock);
	fail_room(d, r, LC_FAIL_CANCELLED, true, "receiver destroyed before the room finished");
	if (r->granted)
		lc_grant_revoke(d->ctx, r->room);
	for (lc_receiver_t **pp = &d->receivers; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	pthread_mutex_unlock(&d->lock);
	free(r->metadata);
	free(r);
}
