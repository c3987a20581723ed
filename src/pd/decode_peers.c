/*
 * The decode side's table of P peers and its channels to P ranks
 * (pd/decode_int.h has the structures and the locking; everything here runs
 * with `lock` held and does no I/O).
 *
 * Peers: one per bootstrap address, in two halves of d_peers_max places.
 * A receiver's address takes a place among the proven peers when this D met
 * that P before (its bootstrap server answered), else among the others,
 * and moves to the proven half when its server first answers. So addresses
 * where nothing answers (mistyped, down, or named by requests to fill the
 * table) can hold only their own half: a P this D met keeps its place, and
 * finds one when it is named again. In a full half the least recently named
 * peer with no live room gives its place; a proven one leaves its pins in
 * a compact table of as many addresses, so that it is not trusted afresh
 * (docs/security.md, "D authenticates P").
 *
 * Channels: a PUSH (with its monitor: three ZeroMQ sockets, two to four
 * descriptors) per P rank D talks to. At most d_channels_max are open: a
 * new one closes the least recently used channel with no live room, or
 * waits. One no live room used for d_channel_idle_ms closes, so descriptors
 * come back after the rooms end whatever P advertised.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd/decode_int.h"

static bool has_pins(const lc__pin_t *pins, int n)
{
	for (int i = 0; i < n; i++)
		if (pins[i].set)
			return true;
	return false;
}

/* Each peer's live rooms into pe->live. */
static void count_live(lc_decode_t *d)
{
	for (int i = 0; i < d->npeers; i++)
		d->peers[i]->live = 0;
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->peer && !lc__decode_final(r))
			r->peer->live++;
}

static int met_find(const lc_decode_t *d, const char *addr)
{
	for (int i = 0; i < d->nmet; i++)
		if (!strcmp(d->met[i].addr, addr))
			return i;
	return -1;
}

static void met_drop(lc_decode_t *d, int i)
{
	free(d->met[i].pins);
	d->met[i] = d->met[--d->nmet];
}

/* A proven peer leaves: what it pinned stays, under its address (the least
 * recently named address goes when the table is full). */
static void met_keep(lc_decode_t *d, lc__ppeer_t *pe)
{
	if (d->nmet >= d->peers_max) {
		int old = 0;
		for (int i = 1; i < d->nmet; i++)
			if (d->met[i].last_used_ns < d->met[old].last_used_ns)
				old = i;
		met_drop(d, old);
	}
	lc__pmet_t *m = &d->met[d->nmet++];
	snprintf(m->addr, sizeof m->addr, "%s", pe->addr);
	m->last_used_ns = pe->last_used_ns;
	m->pins = pe->pins;
	m->npins = pe->npins;
	pe->pins = NULL;
	pe->npins = 0;
}

static void peer_free(lc_decode_t *d, int i)
{
	lc__ppeer_t *pe = d->peers[i];
	if (pe->proven)
		d->nproven--;
	else
		d->nraw--;
	lc__decode_peer_reset(d, pe);
	free(pe->pins);
	free(pe);
	d->peers[i] = d->peers[--d->npeers];
}

/* The half (proven or not) is full: forget its least recently named peer
 * that has no live room and no worker on it. Final receivers naming it
 * lose it (nothing of a final room needs its peer). -ENOSPC when every
 * peer of the half has a live room or a worker. */
static int evict_one(lc_decode_t *d, bool proven, const char *newcomer)
{
	int best = -1;
	count_live(d);
	for (int i = 0; i < d->npeers; i++) {
		const lc__ppeer_t *pe = d->peers[i];
		if (pe->proven != proven || pe->busy || pe->live)
			continue;
		if (best < 0 || pe->last_used_ns < d->peers[best]->last_used_ns)
			best = i;
	}
	if (best < 0)
		return -ENOSPC;
	lc__ppeer_t *pe = d->peers[best];
	uint64_t n = LC__D_CTL_ADD(d, peers_evicted) + 1;
	LC__LOG_PEER(LC_LOG_INFO,
		     "decode %s: %d P addresses %s known (d_peers_max): forgot %s (%s, last "
		     "named %llu ms ago) for %s (%llu forgotten so far)",
		     d->session, proven ? d->nproven : d->nraw,
		     proven ? "that answered" : "not answered yet", pe->addr,
		     !proven                         ? "never resolved"
		     : has_pins(pe->pins, pe->npins) ? "its pinned routes kept"
						     : "nothing pinned",
		     (unsigned long long)((lc__now_ns() - pe->last_used_ns) / 1000000), newcomer,
		     (unsigned long long)n);
	for (lc_receiver_t *r = d->receivers; r; r = r->next)
		if (r->peer == pe)
			r->peer = NULL;
	if (proven)
		met_keep(d, pe);
	peer_free(d, best);
	return 0;
}

int lc__decode_peer_get(lc_decode_t *d, const char *addr, lc__ppeer_t **out, char *why, size_t cap)
{
	lc__ppeer_t *pe = NULL;
	for (int i = 0; i < d->npeers && !pe; i++)
		if (!strcmp(d->peers[i]->addr, addr))
			pe = d->peers[i];
	if (!pe) {
		int m = met_find(d, addr);
		bool proven = m >= 0;
		if ((proven ? d->nproven : d->nraw) >= d->peers_max && evict_one(d, proven, addr)) {
			uint64_t n = LC__D_CTL_ADD(d, peers_refused) + 1;
			lc__reason(why, cap,
				   "too many P addresses %s this D: all %d places (d_peers_max) "
				   "are named by live rooms, %s is not; let rooms end or raise "
				   "d_peers_max",
				   proven ? "that answered" : "not answered yet by", d->peers_max,
				   addr);
			LC__WARN_PEER("decode %s: receiver refused: %s (%llu refused so far)",
				      d->session, why, (unsigned long long)n);
			return -ENOSPC;
		}
		if (!(pe = calloc(1, sizeof *pe)))
			return -ENOMEM;
		snprintf(pe->addr, sizeof pe->addr, "%s", addr);
		pe->proven = proven;
		if (proven) {
			pe->pins = d->met[m].pins;
			pe->npins = d->met[m].npins;
			d->met[m].pins = NULL;
			met_drop(d, m);
			d->nproven++;
		} else {
			d->nraw++;
		}
		d->peers[d->npeers++] = pe;
	}
	pe->refs++;
	pe->last_used_ns = lc__now_ns();
	*out = pe;
	return 0;
}

void lc__decode_peer_put(lc__ppeer_t *pe)
{
	if (pe)
		pe->refs--;
}

bool lc__decode_peer_prove(lc_decode_t *d, lc__ppeer_t *pe, char *why, size_t cap)
{
	if (pe->proven)
		return true;
	if (d->nproven >= d->peers_max && evict_one(d, true, pe->addr)) {
		uint64_t n = LC__D_CTL_ADD(d, peers_refused) + 1;
		lc__reason(why, cap,
			   "P at %s answered, but all %d places of P addresses that answered "
			   "this D (d_peers_max) are named by live rooms",
			   pe->addr, d->peers_max);
		LC__WARN_PEER("decode %s: %s (%llu refused so far)", d->session, why,
			      (unsigned long long)n);
		return false;
	}
	pe->proven = true;
	d->nraw--;
	d->nproven++;
	return true;
}

void lc__decode_peer_reset(lc_decode_t *d, lc__ppeer_t *pe)
{
	if (pe->info)
		for (int i = 0; i < pe->info->world_size; i++) {
			lc__prank_t *pr = &pe->ranks[i];
			lc__decode_chan_close(d, pr);
			/* The rank's token goes: no new connection may present
			 * it. Rooms bound to it keep its id until they are
			 * revoked, which lc__decode_fail does to every room of
			 * the rank before D forgets or moves it. */
			if (pr->has_token)
				lc_token_revoke(d->ctx, &pr->token);
			pr->has_token = false;
		}
	free(pe->ranks);
	free(pe->info);
	pe->ranks = NULL;
	pe->info = NULL;
	pe->generation++;
}

void lc__decode_peers_free(lc_decode_t *d)
{
	while (d->npeers)
		peer_free(d, d->npeers - 1);
	while (d->nmet)
		met_drop(d, d->nmet - 1);
}

/* ---- channels ---- */

void lc__decode_chan_close(lc_decode_t *d, lc__prank_t *pr)
{
	if (!pr->push)
		return;
	lc__push_close(pr->push);
	pr->push = NULL;
	d->nchannels--;
	/* A new channel is a new connection: P hears from this D again by a
	 * REGISTER (same secret: the same session at P). */
	pr->registered = false;
	pr->reg_pending = false;
	pr->unsent_since_ns = 0;
}

/* Every P rank a live room uses: used now. */
static void mark_used(lc_decode_t *d, uint64_t now)
{
	for (lc_receiver_t *r = d->receivers; r; r = r->next) {
		if (lc__decode_final(r) || !r->planned || !r->peer || !r->peer->ranks)
			continue;
		for (int i = 0; i < r->plan.ntargets; i++)
			r->peer->ranks[r->plan.targets[i].rank].used_ns = now;
	}
}

/* Close the channel that no live room uses and that was used longest ago,
 * if it was last used before `before`. False when there is none. */
static bool close_idle(lc_decode_t *d, uint64_t now, uint64_t before)
{
	lc__prank_t *best = NULL;
	mark_used(d, now);
	for (int i = 0; i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		for (int k = 0; pe->info && pe->ranks && k < pe->info->world_size; k++) {
			lc__prank_t *pr = &pe->ranks[k];
			if (pr->push && pr->used_ns < before &&
			    (!best || pr->used_ns < best->used_ns))
				best = pr;
		}
	}
	if (!best)
		return false;
	LC__D_CTL_ADD(d, channels_closed);
	LC__DEBUG("decode %s: channel to P rank at %s closed (no live room for %llu ms)",
		  d->session, best->endpoint,
		  (unsigned long long)((now - best->used_ns) / 1000000));
	lc__decode_chan_close(d, best);
	return true;
}

int lc__decode_chan_open(lc_decode_t *d, lc__ppeer_t *pe, int rank, char *why, size_t cap)
{
	lc__prank_t *pr = &pe->ranks[rank];
	uint64_t now = lc__now_ns();
	if (pr->push)
		return 0;
	if (d->nchannels >= d->channels_max && !close_idle(d, now, now)) {
		uint64_t n = LC__D_CTL_ADD(d, channels_refused) + 1;
		lc__reason(why, cap,
			   "all %d channels to P ranks (d_channels_max) are used by live rooms: "
			   "P rank %d at %s waits for one",
			   d->channels_max, rank, pr->endpoint);
		LC__WARN_PEER("decode %s: %s (%llu waits so far)", d->session, why,
			      (unsigned long long)n);
		return -ENOSPC;
	}
	int rc = lc__push_connect(d->z, pr->endpoint, pr->key, &pr->push);
	if (rc == -EMFILE || rc == -ENFILE) {
		/* Out of sockets or descriptors for a moment (channels closed a
		 * moment ago linger LC__CHAN_LINGER_MS): the room waits. */
		uint64_t n = LC__D_CTL_ADD(d, channels_refused) + 1;
		lc__reason(why, cap, "no socket for a channel to P rank %d at %s (%s): waiting",
			   rank, pr->endpoint, lc_strerror(rc));
		LC__WARN_PEER("decode %s: %s; %d channels open (%llu waits so far)", d->session,
			      why, d->nchannels, (unsigned long long)n);
		return -ENOSPC;
	}
	if (rc) {
		lc__reason(why, cap, "cannot connect to P rank %d at %s: %s", rank, pr->endpoint,
			   lc_strerror(rc));
		return rc;
	}
	d->nchannels++;
	pr->used_ns = now;
	return 0;
}

uint64_t lc__decode_chan_sweep(lc_decode_t *d, uint64_t now)
{
	if (!d->chan_idle_ns)
		return UINT64_MAX;
	if (now < d->next_sweep_ns)
		return d->next_sweep_ns;
	/* A quarter of the idle time late at most, and a second. */
	d->next_sweep_ns = now + LC__MAX(LC__MIN(d->chan_idle_ns / 4, 1000000000ull), 10000000ull);
	if (!d->nchannels || now <= d->chan_idle_ns)
		return d->next_sweep_ns;
	uint64_t before = now - d->chan_idle_ns, n = 0;
	mark_used(d, now);
	for (int i = 0; i < d->npeers; i++) {
		lc__ppeer_t *pe = d->peers[i];
		for (int k = 0; pe->info && pe->ranks && k < pe->info->world_size; k++)
			if (pe->ranks[k].push && pe->ranks[k].used_ns < before) {
				lc__decode_chan_close(d, &pe->ranks[k]);
				LC__D_CTL_ADD(d, channels_closed);
				n++;
			}
	}
	if (n)
		LC__DEBUG("decode %s: %llu channels to P ranks closed (no live room for "
			  "d_channel_idle_ms, %llu ms); %d open",
			  d->session, (unsigned long long)n,
			  (unsigned long long)(d->chan_idle_ns / 1000000), d->nchannels);
	return d->next_sweep_ns;
}
