/*
 * The decode side's discovery workers: find P through its bootstrap server
 * (once per P address, cached), check P's geometry against D's, plan each
 * room's target P ranks (core/topology.c), fetch each rank's endpoint once
 * and register the session once per P rank; and watch each P with live
 * rooms (the heartbeat). All HTTP runs here with `lock` dropped, one worker
 * per bootstrap address at a time (pd/decode_int.h, "Threads").
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/addr.h"
#include "control/curve_keys.h"
#include "pd/decode_int.h"

/* This D rank against P's published layout. */
static lc__topology_t topology(const lc_decode_t *d, const lc__parallel_info_t *pi)
{
	return (lc__topology_t){.p_world = pi->world_size,
				.p_dp = pi->dp_size,
				.d_tp = d->tp_size,
				.d_rank = d->tp_rank,
				.p_lens = pi->kv_item_lens,
				.d_lens = d->item_lens,
				/* P's rows are taken to be D's: P checks them when
				 * D registers (lc__msg_register_t rows). */
				.p_rows = d->layout->rows,
				.d_rows = d->layout->rows,
				.nbuf = LC__MIN(pi->nlens, d->layout->nbuf)};
}

/* D's own check of P's geometry from the bootstrap's parallel info. */
static int geometry_check(lc_decode_t *d, const lc__parallel_info_t *pi, char *why, size_t cap)
{
	const lc_layout_t *l = d->layout;
	lc__topology_t t = topology(d, pi);
	if (pi->nlens && pi->nlens != l->nbuf) {
		snprintf(why, cap, "buffer count differs: P has %u buffers, D has %u", pi->nlens,
			 l->nbuf);
		return LC_ERR_GEOMETRY;
	}
	if (lc__tp_split(&t))
		return 0; /* heterogeneous TP: lc__tp_plan_targets pairs the pages */
	if (pi->fingerprint && pi->fingerprint != l->fingerprint) {
		snprintf(why, cap, "layout fingerprint differs: P %016llx, D %016llx",
			 (unsigned long long)pi->fingerprint, (unsigned long long)l->fingerprint);
		return LC_ERR_GEOMETRY;
	}
	return 0;
}

/* What this D tells the P rank at endpoint to reach it at (control/addr.h):
 * its control endpoint and its data listener, a wildcard replaced by the
 * local address of the route towards the rank. Reads only what is fixed at
 * lc_decode_create, so it runs with `lock` dropped (a host name may need a
 * DNS lookup). 0, or an error with why. */
static int advertise_to(const lc_decode_t *d, const char *endpoint, char *status, char *data,
			size_t cap, char *why, size_t why_cap)
{
	char peer[LC__BS_HOST_MAX], no_route[300] = "";
	int port;
	if (lc__addr_split(endpoint, peer, sizeof peer, &port))
		lc__reason(peer, sizeof peer, "%s", endpoint);
	int rc = lc__addr_url_for(d->endpoint, peer, status, cap, no_route, sizeof no_route);
	if (!rc)
		rc = lc__addr_url_for(d->data_url, peer, data, cap, no_route, sizeof no_route);
	if (rc) {
		lc__reason(why, why_cap,
			   "set P's host or LAYERCAKE_ADVERTISE_HOST on P: P advertised %s, and "
			   "%s",
			   endpoint, no_route);
		return rc;
	}
	/* Never a loopback address to a P on another host: it would reach P's
	 * own host (statuses lost, the data plane connecting to itself). */
	if (lc__addr_loopback_wrong(status, peer)) {
		lc__reason(why, why_cap,
			   "set LAYERCAKE_ADVERTISE_HOST or D's host (unset: every address): %s, "
			   "D's control endpoint, is a loopback address P at %s cannot reach",
			   status, peer);
		return LC_ERR_UNREACHABLE;
	}
	if (lc__addr_loopback_wrong(data, peer)) {
		lc__reason(
			why, why_cap,
			"set D's listen_url to tcp://0.0.0.0:0 (every address) or "
			"LAYERCAKE_ADVERTISE_HOST: %s, D's data listener, is a loopback address P "
			"at %s cannot reach",
			data, peer);
		return LC_ERR_UNREACHABLE;
	}
	return 0;
}

/* split: D's geometry differs from P's (heterogeneous TP): D's TP size
 * goes along, for P's lc_tp_fragment. */
static void fill_register(lc_decode_t *d, bool split, const lc__prank_t *pr, lc__msg_t *m,
			  lc__msg_buffer_t *bufs)
{
	m->type = LC__MSG_REGISTER;
	memcpy(m->secret, pr->secret, LC__MSG_SECRET_LEN);
	snprintf(m->reg.session, sizeof m->reg.session, "%s", d->session);
	snprintf(m->reg.status_ep, sizeof m->reg.status_ep, "%s", pr->adv_status);
	snprintf(m->reg.data_url, sizeof m->reg.data_url, "%s", pr->adv_data);
	m->reg.d_rank = (uint32_t)d->tp_rank;
	m->reg.flags = LC__REG_HAS_TOKEN;
	memcpy(m->reg.token, pr->token.bytes, LC_TOKEN_LEN);
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
	for (uint32_t i = 0; split && i < d->layout->nbuf; i++)
		if (d->layout->rows[i] > 1)
			m->reg.flags |= LC__REG_HAS_ROWS; /* token-major pages: rows go along */
	for (uint32_t i = 0; i < d->layout->nbuf; i++) {
		const lc_buffer_t *b = &d->layout->bufs[i];
		bufs[i] = (lc__msg_buffer_t){.layer = b->layer,
					     .kind = b->kind,
					     .flags = b->flags,
					     .item_len = b->item_len,
					     .region = d->buf_region[i],
					     .offset = d->buf_offset[i],
					     .rows = d->layout->rows[i]};
	}
	m->reg.nbuffers = d->layout->nbuf;
	m->reg.buffers = bufs;
	m->reg.nregions = (uint32_t)d->nregions;
	m->reg.region_descs = (const void **)d->descs;
	m->reg.region_desc_lens = d->desc_lens;
}

static int encode_register(lc_decode_t *d, bool split, const lc__prank_t *pr, uint8_t **buf,
			   size_t *len)
{
	lc__msg_t *m = calloc(1, sizeof *m);
	lc__msg_buffer_t *bufs = calloc(d->layout->nbuf, sizeof *bufs);
	int rc = -ENOMEM;
	if (m && bufs) {
		fill_register(d, split, pr, m, bufs);
		rc = lc__msg_encode(m, buf, len);
	}
	free(bufs);
	free(m);
	return rc;
}

/* A lookup failed: keep why for the deadline's message, retry later. */
static void retry_later(lc_decode_t *d, uint64_t room, const char *why)
{
	lc_receiver_t *r = lc__decode_find(d, room);
	if (r && !lc__decode_final(r)) { /* a final room's reason stays */
		lc__reason(r->reason, sizeof r->reason, "%s", why);
		r->next_try_ns = lc__now_ns() + LC__D_RETRY_NS;
	}
}

/* A lookup at the bootstrap server took this long or longer: its peer is
 * slow (it may hold only disc_slow_max workers) until one is quick. */
#define SLOW_LOOKUP_NS (500ull * 1000000)

/* How a lookup at pe's bootstrap server went (fail: enum lc__bs_fail,
 * NONE when it answered; took: its time): a silent or unreachable address,
 * or one that answers slowly, is slow. */
static void lookup_done(lc__ppeer_t *pe, int fail, uint64_t took)
{
	pe->slow = fail == LC__BS_FAIL_TIMEOUT || fail == LC__BS_FAIL_UNREACHABLE ||
		   took >= SLOW_LOOKUP_NS;
}

/* A lookup at the peer's bootstrap server failed (fail: enum lc__bs_fail).
 * Said at once, and again only when its kind changes: a refused connection
 * is a P not up yet (D may start first: the rooms wait for their bootstrap
 * deadline), an answer that is not a bootstrap server's will not change
 * (the rooms fail now). The peer's next lookup, for any of its rooms, is
 * no sooner than LC__D_RETRY_NS from now. */
static void lookup_failed(lc_decode_t *d, uint64_t room, lc__ppeer_t *pe, int fail, const char *why)
{
	LC__D_CTL_ADD(d, bootstrap_failures);
	pe->next_lookup_ns = lc__now_ns() + LC__D_RETRY_NS;
	if (fail != pe->last_fail) {
		pe->last_fail = fail;
		if (fail == LC__BS_FAIL_NOT_SERVER)
			LC__ERROR("decode %s: bootstrap address %s is wrong: %s", d->session,
				  pe->addr, why);
		else if (fail == LC__BS_FAIL_HTTP) /* a server there: P not up yet */
			LC__INFO("decode %s: bootstrap server %s: %s; waiting for P", d->session,
				 pe->addr, why);
		else
			LC__WARN("decode %s: bootstrap server %s: %s; retrying until "
				 "bootstrap_timeout_ms (%llu ms) in case P is not up yet",
				 d->session, pe->addr, why,
				 (unsigned long long)(d->bootstrap_ns / 1000000));
	}
	retry_later(d, room, why);
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (r->peer != pe || r->status != LC_ROOM_BOOTSTRAPPING)
			continue;
		if (fail == LC__BS_FAIL_NOT_SERVER)
			lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false,
					"%s; give D its P's bootstrap server host:port", why);
		else if (!pe->info) /* their reason at the deadline */
			lc__reason(r->reason, sizeof r->reason, "%s", why);
	}
}

/* P's layout names more P ranks than d_peer_ranks_max (ranks x DP
 * groups): D would keep a channel and a registration per rank its rooms
 * name. Refused; the peer's rooms fail, saying so. */
static void fanout_refused(lc_decode_t *d, lc__ppeer_t *pe, const lc__parallel_info_t *pi)
{
	char why[LC_REASON_MAX];
	uint64_t n = LC__D_CTL_ADD(d, routes_refused_fanout) + 1;
	lc__reason(why, sizeof why,
		   "bootstrap %s advertises %d P ranks (%d DP groups), more than "
		   "d_peer_ranks_max (%d): refused",
		   pe->addr, pi->world_size, pi->dp_size, d->peer_ranks_max);
	LC__ERROR_PEER("decode %s: %s (%llu refused so far)", d->session, why,
		       (unsigned long long)n);
	pe->next_lookup_ns = lc__now_ns() + LC__D_RETRY_NS;
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->peer == pe && r->status == LC_ROOM_BOOTSTRAPPING)
			lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false, "%s", why);
}

/* GET /route -1/-1 of the room's P, once per peer (the worker holds it:
 * pe->busy). Returns the receiver, still Bootstrapping, once pe->info is
 * known; NULL to stop this pass. */
static lc_receiver_t *fetch_parallel(lc_decode_t *d, uint64_t room, lc__ppeer_t *pe)
{
	char why[300] = "", addr[LC__BS_HOST_MAX];
	int fail = LC__BS_FAIL_NONE;
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 1, .fail = &fail};
	uint64_t gen = pe->generation;
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	if (!pi)
		return NULL;
	snprintf(addr, sizeof addr, "%s", pe->addr);
	uint64_t t0 = lc__now_ns();
	pthread_mutex_unlock(&d->lock);
	int rc = lc__bootstrap_get_parallel(addr, &o, pi, why, sizeof why);
	uint64_t took = lc__now_ns() - t0;
	pthread_mutex_lock(&d->lock);
	lookup_done(pe, fail, took);
	if (rc || pe->info || pe->generation != gen) {
		free(pi);
		if (rc)
			lookup_failed(d, room, pe, fail, why);
		return NULL;
	}
	pe->last_fail = LC__BS_FAIL_NONE;
	if (pi->world_size > d->peer_ranks_max) {
		fanout_refused(d, pe, pi);
		free(pi);
		return NULL;
	}
	if (!lc__decode_peer_prove(d, pe, why, sizeof why)) {
		pe->next_lookup_ns = lc__now_ns() + LC__D_RETRY_NS;
		for (lc_receiver_t *r = d->receivers; r; r = r->next)
			if (r->peer == pe && r->status == LC_ROOM_BOOTSTRAPPING)
				lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false, "%s", why);
		free(pi);
		return NULL;
	}
	pe->ranks = calloc((size_t)pi->world_size, sizeof *pe->ranks);
	if (!pe->ranks) {
		free(pi);
		return NULL;
	}
	pe->info = pi;
	lc_receiver_t *r = lc__decode_find(d, room);
	return r && r->status == LC_ROOM_BOOTSTRAPPING ? r : NULL;
}

/* A P rank beside its bootstrap server advertises the route towards it,
 * a loopback address (or, from an older P, a wildcard): from a D that
 * reached the bootstrap server elsewhere, the rank is at the bootstrap
 * server's address (control/addr.h). */
static void rank_host(const char *bootstrap, lc__rank_info_t *ri)
{
	char bs[LC__BS_HOST_MAX];
	int port;
	if (lc__addr_split(bootstrap, bs, sizeof bs, &port) || lc__addr_is_loopback(bs) ||
	    lc__addr_is_wildcard(bs))
		return;
	if (lc__addr_is_loopback(ri->rank_ip) || lc__addr_is_wildcard(ri->rank_ip))
		snprintf(ri->rank_ip, sizeof ri->rank_ip, "%s", bs);
}

/* The pin of P rank `rank` of a peer (grown on demand, kept across
 * lc__decode_peer_reset); NULL without memory. */
static lc__pin_t *pin_of(lc__ppeer_t *pe, int rank)
{
	if (rank >= pe->npins) {
		lc__pin_t *p = realloc(pe->pins, (size_t)(rank + 1) * sizeof *p);
		if (!p)
			return NULL;
		memset(p + pe->npins, 0, (size_t)(rank + 1 - pe->npins) * sizeof *p);
		pe->pins = p;
		pe->npins = rank + 1;
	}
	return &pe->pins[rank];
}

/* D authenticates a P rank before it hands it anything (its data-plane
 * token and session secret go in the REGISTER; docs/security.md, "D
 * authenticates P"): a route is only the bootstrap server's word, which
 * anyone who reaches the server may have written. With CURVE on, the
 * rank's server key must be one D trusts (curve_keys.h, or the shared
 * secret's; a route without a key is refused, every P with CURVE on
 * publishes its own): the handshake then proves the rank holds its
 * secret, wherever it moved.
 * Without CURVE, the endpoint and key first learned for the rank are
 * pinned for this D's life: a changed route is refused while something
 * still accepts connections at the pinned endpoint (old_alive: the rank is
 * there, the new route is an impostor's), and taken as the rank's move
 * once nothing does (a P restarted on another port). False: the room
 * failed, nothing was sent. */
static bool route_trusted(lc_decode_t *d, uint64_t room, lc__ppeer_t *pe, int rank, const char *ep,
			  const char *key, bool old_alive)
{
	char why[LC_REASON_MAX];
	const char *own = lc__zctx_public_key(d->z);
	if (own[0] && !key[0]) {
		/* Every P with CURVE on publishes its key: a route without one
		 * is no P this D could authenticate. Refused before any
		 * connection (no descriptor spent on it). */
		lc__reason(why, sizeof why,
			   "P rank %d's route (%s) names no CURVE key, and this D talks only "
			   "CURVE: nothing sent to it",
			   rank, ep);
	} else if (own[0]) {
		int ok = !strcmp(key, own) || lc__zctx_shared_key(d->z, key)
				 ? 1
				 : lc__curve_key_authorized(key);
		if (ok == 1)
			return true;
		lc__reason(why, sizeof why,
			   "P rank %d's route (%s) names CURVE key %.40s, which D does not "
			   "authorize (authorized_keys%s): nothing sent to it",
			   rank, ep, key, ok < 0 ? " unreadable" : "");
	} else {
		lc__pin_t *pin = pin_of(pe, rank);
		if (pin && !pin->set) {
			snprintf(pin->endpoint, sizeof pin->endpoint, "%s", ep);
			snprintf(pin->key, sizeof pin->key, "%s", key);
			pin->set = true;
			return true;
		}
		if (pin && !strcmp(pin->endpoint, ep) && !strcmp(pin->key, key))
			return true;
		if (pin && !old_alive) {
			LC__D_CTL_ADD(d, routes_moved);
			LC__WARN_PEER(
				"decode %s: P rank %d moved from %s to %s (nothing accepts at the "
				"old address any more): following it",
				d->session, rank, pin->endpoint, ep);
			snprintf(pin->endpoint, sizeof pin->endpoint, "%s", ep);
			snprintf(pin->key, sizeof pin->key, "%s", key);
			return true;
		}
		if (!pin)
			lc__reason(why, sizeof why, "P rank %d: no memory to pin its route", rank);
		else
			lc__reason(why, sizeof why,
				   "P rank %d's route changed during this D's session: %s first "
				   "(still answering), now %s; refused (pinned without CURVE)",
				   rank, pin->endpoint, ep);
	}
	LC__D_CTL_ADD(d, routes_refused);
	uint64_t now = lc__now_ns();
	pe->refused_quiet++;
	if (now >= pe->refused_log_ns) { /* a route is anyone's: one line a second */
		LC__ERROR("decode %s: bootstrap %s: %s (%llu refused since the last line)",
			  d->session, pe->addr, why, (unsigned long long)pe->refused_quiet);
		pe->refused_quiet = 0;
		pe->refused_log_ns = now + 1000000000ull;
	}
	lc_receiver_t *r = lc__decode_find(d, room);
	if (r)
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false, "%s", why);
	return false;
}

/* Whether something accepts TCP connections at a pinned P rank's old
 * address, asked before D follows a changed route. With `lock` dropped (a
 * host name may need DNS). */
static bool endpoint_alive(const char *endpoint)
{
	char host[LC__BS_HOST_MAX];
	int port;
	return !lc__addr_split(endpoint, host, sizeof host, &port) &&
	       lc__addr_tcp_alive(host, port, LC__D_PROBE_MS);
}

/* GET /route of one P rank, once per rank. Returns the receiver, still
 * Bootstrapping, once the rank's endpoint is known; NULL to stop. */
/* The rank's token goes: no new connection may present it (rooms bound to
 * it keep its id until they are revoked). */
static void token_drop(lc_decode_t *d, lc__prank_t *pr)
{
	if (pr->has_token)
		lc_token_revoke(d->ctx, &pr->token);
	pr->has_token = false;
}

static lc_receiver_t *resolve_rank(lc_decode_t *d, uint64_t room, lc__ppeer_t *pe, int rank)
{
	char why[300] = "", addr[LC__BS_HOST_MAX];
	int fail = LC__BS_FAIL_NONE;
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 1, .fail = &fail};
	uint64_t gen = pe->generation, t0 = lc__now_ns();
	int ptp = pe->info->world_size / pe->info->dp_size;
	lc__rank_info_t ri;
	char pinned[sizeof pe->pins->endpoint] = "";
	bool old_alive = false;
	if (rank < pe->npins && pe->pins[rank].set)
		snprintf(pinned, sizeof pinned, "%s", pe->pins[rank].endpoint);
	snprintf(addr, sizeof addr, "%s", pe->addr);
	pthread_mutex_unlock(&d->lock); /* pe->busy: as in fetch_parallel */
	int rc = lc__bootstrap_get_rank(addr, rank % ptp, rank / ptp, &o, &ri, why, sizeof why);
	uint64_t took = lc__now_ns() - t0;
	char ep[300], adv_status[LC__MSG_STR_MAX], adv_data[LC__MSG_STR_MAX],
		adv_why[LC_REASON_MAX];
	int adv_rc = 0;
	if (!rc) {
		char hp[LC__BS_HOST_MAX + 16];
		rank_host(addr, &ri);
		lc__addr_join(ri.rank_ip, ri.rank_port, hp, sizeof hp);
		snprintf(ep, sizeof ep, "tcp://%s", hp);
		adv_rc = advertise_to(d, ep, adv_status, adv_data, sizeof adv_status, adv_why,
				      sizeof adv_why);
		old_alive = pinned[0] && strcmp(pinned, ep) && endpoint_alive(pinned);
	}
	pthread_mutex_lock(&d->lock);
	lookup_done(pe, fail, took);
	if (pe->generation != gen || !pe->info)
		return NULL;
	if (rc) {
		retry_later(d, room, why);
		return NULL;
	}
	lc__prank_t *pr = &pe->ranks[rank];
	if (!pr->resolved && !route_trusted(d, room, pe, rank, ep, ri.curve_key, old_alive))
		return NULL;
	if (!pr->resolved) {
		/* Whatever answers at a new endpoint gets a token of its own,
		 * never the one given to the rank's last endpoint. */
		if (strcmp(pr->endpoint, ep))
			token_drop(d, pr);
		snprintf(pr->endpoint, sizeof pr->endpoint, "%s", ep);
		pr->adv_rc = adv_rc;
		if (adv_rc)
			snprintf(pr->adv_why, sizeof pr->adv_why, "%s", adv_why);
		else {
			snprintf(pr->adv_status, sizeof pr->adv_status, "%s", adv_status);
			snprintf(pr->adv_data, sizeof pr->adv_data, "%s", adv_data);
		}
		snprintf(pr->key, sizeof pr->key, "%s", ri.curve_key);
		pr->resolved = true;
	}
	lc_receiver_t *r = lc__decode_find(d, room);
	return r && r->status == LC_ROOM_BOOTSTRAPPING ? r : NULL;
}

/* Send this D's registration to P rank `rank`. Returns 0 when sent, 1 to
 * retry later, -1 when the room failed. */
static int register_rank(lc_decode_t *d, lc_receiver_t *r, lc__prank_t *pr, int rank)
{
	lc__topology_t t = topology(d, r->peer->info);
	uint8_t *buf;
	size_t len;
	char why[LC_REASON_MAX];
	int rc = lc__decode_chan_open(d, r->peer, rank, why, sizeof why);
	if (rc == -ENOSPC) { /* every channel in use by a live room: one frees */
		lc__reason(r->reason, sizeof r->reason, "%s", why);
		r->next_try_ns = lc__now_ns() + LC__D_RETRY_NS;
		return 1;
	}
	if (rc) {
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, false, "%s", why);
		return -1;
	}
	if (!pr->has_secret && lc__random_bytes(pr->secret, LC__MSG_SECRET_LEN)) {
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false,
				"no session secret for P rank %d: getrandom failed", rank);
		return -1;
	}
	pr->has_secret = true;
	if (pr->adv_rc) {
		LC__ERROR_PEER("decode %s: P rank %d: %s", d->session, rank, pr->adv_why);
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, true, "P rank %d: %s", rank, pr->adv_why);
		return -1;
	}
	int trc = pr->has_token ? 0 : lc_token_issue(d->ctx, &pr->token);
	if (trc) {
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false,
				"no data-plane token for P rank %d: %s", rank, lc_strerror(trc));
		return -1;
	}
	pr->has_token = true;
	if (encode_register(d, lc__tp_split(&t), pr, &buf, &len)) {
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false, "cannot encode the registration");
		return -1;
	}
	rc = lc__push_send(pr->push, buf, len, 0);
	free(buf);
	uint64_t now = lc__now_ns();
	if (rc) {
		/* Not even queued: the channel to the rank never came up. Past
		 * connect_timeout_ms the room fails naming P's address. */
		LC__D_CTL_ADD(d, send_failures);
		if (!pr->unsent_since_ns)
			pr->unsent_since_ns = now;
		if (now - pr->unsent_since_ns >= d->reply_wait_ns) {
			lc__decode_fail(
				d, r, LC_FAIL_BOOTSTRAP_TIMEOUT, false,
				"set P's host or LAYERCAKE_ADVERTISE_HOST on P: this D cannot "
				"reach P rank %d at %s, the address P advertised (%llu ms, "
				"connect_timeout_ms)",
				rank, pr->endpoint,
				(unsigned long long)(d->reply_wait_ns / 1000000));
			return -1;
		}
		r->next_try_ns = now + LC__D_RETRY_NS;
		return 1;
	}
	pr->unsent_since_ns = 0;
	LC__D_CTL_ADD(d, msgs_sent);
	LC__D_CTL_ADD(d, registrations);
	pr->registered = true;
	pr->reg_pending = true;
	pr->reg_epoch++;
	pr->reg_sent_ns = lc__now_ns();
	if (atomic_load(&d->ctl_idle))
		lc__decode_ctl_wake(d); /* the reply's deadline */
	LC__INFO("decode %s: registered with P rank %d at %s (status %s, data %s)", d->session,
		 rank, pr->endpoint, pr->adv_status, pr->adv_data);
	return 0;
}

/* The room's P known: check it, plan the targets. False if the room failed. */
static bool plan_room(lc_decode_t *d, lc_receiver_t *r)
{
	char why[300] = "";
	lc__ppeer_t *pe = r->peer;
	if (geometry_check(d, pe->info, why, sizeof why))
		/* P refuses the registration naming the first difference, and the
		 * refusal fails the room here and there (decode_control.c): P
		 * learns of it at once instead of at its bootstrap deadline. */
		LC__WARN_PEER("decode %s: geometry differs from P at %s: %s", d->session, pe->addr,
			      why);
	if (r->planned)
		return true;
	lc__topology_t t = topology(d, pe->info);
	if (lc__tp_plan_targets(&t, r->room, &r->plan, why, sizeof why)) {
		/* The pages cannot pair. P refuses this D for the same reason
		 * (the same core/topology.c): register with the ranks the room
		 * would use were the pages equal, so that the refusal fails the
		 * room at P too, at once. Should P accept, the room fails here
		 * (doomed) and P is told. */
		char why2[300];
		lc__topology_t same = t;
		same.d_lens = same.p_lens;
		if (lc__tp_plan_targets(&same, r->room, &r->plan, why2, sizeof why2)) {
			lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, false, "%s", why);
			return false;
		}
		lc__reason(r->doomed, sizeof r->doomed, "%s", why);
	}
	r->planned = true;
	return true;
}

/* Every target rank of r answered the registration the room goes out
 * under: Bootstrapped (or failed, when its pages cannot pair). Lock held. */
static void bootstrapped(lc_decode_t *d, lc_receiver_t *r)
{
	for (int i = 0; i < r->plan.ntargets; i++)
		r->got[i].reg_epoch = r->peer->ranks[r->plan.targets[i].rank].reg_epoch;
	if (r->doomed[0]) {
		lc__decode_fail(d, r, LC_FAIL_BAD_INPUT, true, "%s", r->doomed);
		return;
	}
	r->reason[0] = '\0';
	lc__decode_set_state(d, r, LC_ROOM_BOOTSTRAPPED);
}

/* Bring one Bootstrapping receiver forward. Called with lock held; drops
 * it around HTTP and looks the room up again afterwards. */
static void discover_one(lc_decode_t *d, uint64_t room)
{
	lc_receiver_t *r = lc__decode_find(d, room);
	if (!r || r->status != LC_ROOM_BOOTSTRAPPING)
		return;
	lc__ppeer_t *pe = r->peer;
	if (!pe->info && !(r = fetch_parallel(d, room, pe)))
		return;
	if (!plan_room(d, r))
		return;
	for (int i = 0; i < r->plan.ntargets; i++) {
		int rank = r->plan.targets[i].rank;
		lc__prank_t *pr = &pe->ranks[rank];
		if (pr->refused && !pr->registered && lc__now_ns() < pr->retry_ns) {
			/* Refused a moment ago: this room registers again then. */
			lc__reason(r->reason, sizeof r->reason, "P rank %d refused this D: %s",
				   rank, pr->refuse_reason);
			r->next_try_ns = pr->retry_ns;
			return;
		}
		if (!pr->resolved && !(r = resolve_rank(d, room, pe, rank)))
			return;
		if (!pr->registered && register_rank(d, r, pr, rank))
			return;
		if (pr->reg_pending) {
			/* Bootstrapped only once P answered: the return path works
			 * (a refusal or silence fails the room, decode_control.c). */
			/* Never sooner than a moment from now: past the deadline
			 * the control thread fails the room, and must get the
			 * lock to do it. */
			r->next_try_ns = LC__MAX(pr->reg_sent_ns + d->reply_wait_ns,
						 lc__now_ns() + LC__D_RETRY_NS);
			return;
		}
	}
	bootstrapped(d, r);
}

bool lc__decode_discover_now(lc_decode_t *d, lc_receiver_t *r)
{
	lc__ppeer_t *pe = r->peer;
	if (!pe->info || !plan_room(d, r))
		return false;
	for (int i = 0; i < r->plan.ntargets; i++) {
		const lc__prank_t *pr = &pe->ranks[r->plan.targets[i].rank];
		if (!pr->resolved || !pr->registered || pr->reg_pending)
			return false; /* I/O or an answer to wait for: the thread's */
	}
	bootstrapped(d, r);
	return true;
}

static bool rank_in_use(const lc_decode_t *d, const lc__ppeer_t *pe, int rank)
{
	for (const lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (r->peer != pe || lc__decode_final(r) || !r->planned)
			continue;
		for (int i = 0; i < r->plan.ntargets; i++)
			if (r->plan.targets[i].rank == rank)
				return true;
	}
	return false;
}

/* The first of P's ranks whose control channel is down and that a live room
 * of this D uses (-1: none). A rank registered less than one interval ago
 * is given that long to finish its handshake, and while its REGISTER is
 * unanswered, connect_timeout_ms (the reply's own deadline): after a link
 * outage the new connection's first SYN may be lost, and TCP's 1 s
 * retransmit outlasts two 500 ms heartbeats (the cluster script's cut of a
 * P rank failed the next round that way). A rank that answered and then
 * went down counts misses at once. Rooms are scanned only for a rank found
 * down. */
static int rank_down(lc_decode_t *d, lc__ppeer_t *pe, uint64_t now)
{
	for (int rank = 0; rank < pe->info->world_size; rank++) {
		lc__prank_t *pr = &pe->ranks[rank];
		if (pr->push && !lc__push_up(pr->push) &&
		    now >= pr->reg_sent_ns + (pr->reg_pending
						      ? LC__MAX(d->hb_interval_ns, d->reply_wait_ns)
						      : d->hb_interval_ns) &&
		    rank_in_use(d, pe, rank))
			return rank;
	}
	return -1;
}

/* One P rank's channel was down for too many heartbeats (gone: its lanes
 * closed and its channel is down, lanes_gone): the peer's rooms fail, its
 * caches go. */
static void peer_dead(lc_decode_t *d, lc__ppeer_t *pe, int rank, bool gone)
{
	char ep[sizeof pe->ranks[rank].endpoint], why[160];
	snprintf(ep, sizeof ep, "%s", pe->ranks[rank].endpoint);
	LC__D_CTL_ADD(d, peers_dead);
	if (gone) {
		LC__D_CTL_ADD(d, peers_gone);
		snprintf(why, sizeof why, "closed its data lanes and its control channel is down");
	} else {
		snprintf(why, sizeof why, "missed %d heartbeats: control channel down", pe->misses);
	}
	LC__ERROR("decode %s: P at %s, rank %d (%s) %s: failing its rooms", d->session, pe->addr,
		  rank, ep, why);
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->peer == pe)
			lc__decode_fail(d, r, LC_FAIL_SESSION_GONE, false,
					"P at %s rank %d (%s) %s", pe->addr, rank, ep, why);
	pe->misses = 0;
	lc__decode_peer_reset(d, pe); /* a restarted P is discovered and registered afresh */
}

/* P's liveness is its control channel's, never its bootstrap server's: each
 * PUSH to a P rank carries ZMTP heartbeats and a monitor (control/channel.h,
 * lc__zctx_watch_pushes), so a dead, stopped or cut-off rank reads as down.
 * Every interval, a peer with a live room on a down rank counts a miss; at
 * heartbeat_misses in a row its rooms fail. A peer not yet discovered has
 * no channel: its rooms wait for discovery until their bootstrap deadline
 * (a D may start before its P, a bootstrap server may restart). No I/O. */
static void heartbeat(lc_decode_t *d, uint64_t now)
{
	for (int i = 0; i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		if (now < pe->next_probe_ns)
			continue;
		pe->next_probe_ns = now + d->hb_interval_ns;
		int rank = pe->info ? rank_down(d, pe, now) : -1;
		if (rank < 0) {
			pe->misses = 0;
			continue;
		}
		LC__D_CTL_ADD(d, heartbeat_failures);
		if (++pe->misses >= d->hb_misses)
			peer_dead(d, pe, rank, false);
	}
}

void lc__decode_lane_gone(void *arg, uint64_t room)
{
	lc_decode_t *d = arg;
	LC__D_CTL_ADD(d, lanes_closed);
	atomic_store(&d->gone_room, room);
	atomic_fetch_add(&d->lanes_gone, 1);
	/* Never waits: D may hold `lock` while it revokes a grant, which
	 * waits for this thread's landings. A wake-up missed here is caught
	 * within LC__D_LIVE_WAIT_NS. */
	if (!pthread_mutex_trylock(&d->lock)) {
		pthread_cond_signal(&d->cond);
		pthread_mutex_unlock(&d->lock);
	}
}

/* A P rank that answered D's REGISTER, whose control channel is down now
 * and that a live room uses (-1: none). No grace: lanes_gone asks it only
 * when P's lanes closed. */
static int rank_gone(const lc_decode_t *d, lc__ppeer_t *pe)
{
	for (int rank = 0; rank < pe->info->world_size; rank++) {
		lc__prank_t *pr = &pe->ranks[rank];
		if (pr->push && pr->registered && !pr->reg_pending && !lc__push_up(pr->push) &&
		    rank_in_use(d, pe, rank))
			return rank;
	}
	return -1;
}

/* P's lanes into this D closed or were reset by P (the listener's word):
 * for LC__D_GONE_WINDOW_NS, a P rank in use whose control channel is down
 * too is gone at once, not after heartbeat_misses intervals. A process that
 * died (SIGKILL, a crash) closes both at once; a partition closes neither,
 * and a P that closed a lane for a reason of its own keeps its channel up:
 * the heartbeat judges those. No I/O. */
static void lanes_gone(lc_decode_t *d, uint64_t now)
{
	uint64_t n = atomic_load(&d->lanes_gone);
	if (n != d->lanes_seen) {
		d->lanes_seen = n;
		d->gone_until_ns = now + LC__D_GONE_WINDOW_NS;
		LC__DEBUG("decode %s: a lane from P closed (last room %llu): looking for a P gone",
			  d->session, (unsigned long long)atomic_load(&d->gone_room));
	}
	if (now >= d->gone_until_ns)
		return;
	for (int i = 0; i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		int rank = pe->info ? rank_gone(d, pe) : -1;
		if (rank >= 0)
			peer_dead(d, pe, rank, true);
	}
}

/* The room a worker takes next: the first Bootstrapping one that is due,
 * whose peer no worker is on and, for a slow peer, while fewer than
 * disc_slow_max workers are on slow ones (the rest stay free for addresses
 * that answer). Rooms passed over for those two reasons are looked at again
 * when a worker finishes (it broadcasts); *next: when the first room not
 * yet due is; *live: whether any room is live. */
static lc_receiver_t *pick(lc_decode_t *d, uint64_t now, uint64_t *next, bool *live)
{
	lc_receiver_t *found = NULL;
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (lc__decode_final(r))
			continue;
		*live = true;
		if (found || r->status != LC_ROOM_BOOTSTRAPPING)
			continue;
		const lc__ppeer_t *pe = r->peer;
		uint64_t due = r->next_try_ns;
		if (!pe->info && pe->next_lookup_ns > due)
			due = pe->next_lookup_ns; /* its last lookup failed a moment ago */
		if (due > now)
			*next = LC__MIN(*next, due);
		else if (!pe->busy && (!pe->slow || d->disc_slow_busy < d->disc_slow_max))
			found = r;
	}
	return found;
}

/* Bring room r forward, holding its peer for the time (pe->busy). */
static void work(lc_decode_t *d, lc_receiver_t *r, uint64_t now)
{
	lc__ppeer_t *pe = r->peer;
	uint64_t room = r->room;
	bool slow = pe->slow;
	pe->busy = true;
	d->disc_slow_busy += slow;
	discover_one(d, room);
	pe->busy = false;
	d->disc_slow_busy -= slow;
	/* A pass that neither moved the room on nor set its next try (out of
	 * memory; a race lost) tries again after LC__D_RETRY_NS: at once, the
	 * workers would spin with the lock held and starve the control thread,
	 * which fails rooms at their deadlines, and every lc_receiver_poll. */
	r = lc__decode_find(d, room);
	if (r && r->status == LC_ROOM_BOOTSTRAPPING && r->next_try_ns <= now)
		r->next_try_ns = lc__now_ns() + LC__D_RETRY_NS;
	pthread_cond_broadcast(&d->cond); /* rooms passed over for pe, or for slowness */
}

void *lc__decode_disc_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-decode-disc");
	lc_decode_t *d = arg;
	pthread_mutex_lock(&d->lock);
	while (!atomic_load(&d->stop)) {
		uint64_t now = lc__now_ns();
		uint64_t next = now + LC__MIN(d->hb_interval_ns, 1000000000ull);
		bool live = false;
		/* No I/O, whichever worker comes by: each is due by its own clock. */
		lanes_gone(d, now);
		heartbeat(d, now);
		next = LC__MIN(next, lc__decode_chan_sweep(d, now));
		lc_receiver_t *r = pick(d, now, &next, &live);
		if (r) {
			work(d, r, now);
			continue;
		}
		if (atomic_load(&d->lanes_gone) != d->lanes_seen)
			continue;
		if (now < d->gone_until_ns)
			next = LC__MIN(next, now + LC__D_GONE_POLL_NS);
		else if (live)
			next = LC__MIN(next, now + LC__D_LIVE_WAIT_NS);
		struct timespec ts = lc__abs_ts(next);
		d->disc_live = live;
		pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		d->disc_live = false;
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}
