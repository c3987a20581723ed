/*
 * The decode side's public calls (pd/decode_int.h has the structures, the
 * threads and the locking): lc_decode_* for a D rank, lc_receiver_* for a
 * room.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/params.h"
#include "control/addr.h"
#include "control/shared_secret.h"
#include "pd/decode_int.h"
#include "transport/transport.h"

#ifdef LC_HAVE_ZMQ
static void load_knobs(lc_decode_t *d, lc_ctx_t *ctx)
{
	const uint64_t ms = 1000000;
	d->bootstrap_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_bootstrap_timeout_ms) * ms;
	d->waiting_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_waiting_timeout_ms) * ms;
	d->landed_wait_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_landed_wait_ms) * ms;
	d->checksum = lc__ctx_cfg(ctx, LC__CFG_room_checksum) != 0;
	d->hb_interval_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_heartbeat_interval_ms) * ms;
	d->hb_misses = (int)lc__ctx_cfg(ctx, LC__CFG_heartbeat_misses);
	d->reply_wait_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_connect_timeout_ms) * ms;
	d->default_port = lc__ctx_cfg(ctx, LC__CFG_bootstrap_port);
	d->peers_max = (int)lc__ctx_cfg(ctx, LC__CFG_d_peers_max);
	d->peer_ranks_max = (int)lc__ctx_cfg(ctx, LC__CFG_d_peer_ranks_max);
	d->channels_max = (int)lc__ctx_cfg(ctx, LC__CFG_d_channels_max);
	/* Up to four descriptors a channel: they may take a quarter of
	 * RLIMIT_NOFILE, the rest of the process keeps the others. */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 16 < (rlim_t)d->channels_max) {
		d->channels_max = (int)LC__MAX(rl.rlim_cur / 16, 1);
		LC__INFO("decode: at most %d channels to P ranks (a quarter of RLIMIT_NOFILE %llu "
			 "at four descriptors each, under d_channels_max)",
			 d->channels_max, (unsigned long long)rl.rlim_cur);
	}
	d->chan_idle_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_d_channel_idle_ms) * ms;
	d->ndisc = (int)lc__ctx_cfg(ctx, LC__CFG_d_discover_threads);
	d->disc_slow_max = d->ndisc / 2 > 0 ? d->ndisc / 2 : 1;
}

/* Pack every region for P, and find the region holding each buffer. */
static int map_regions(lc_decode_t *d, const lc_decode_params_t *pp)
{
	d->nregions = pp->region_count;
	d->regions = calloc(d->nregions, sizeof *d->regions);
	d->descs = calloc(d->nregions, sizeof *d->descs);
	d->desc_lens = calloc(d->nregions, sizeof *d->desc_lens);
	d->buf_region = calloc(d->layout->nbuf, sizeof *d->buf_region);
	d->buf_offset = calloc(d->layout->nbuf, sizeof *d->buf_offset);
	if (!d->regions || !d->descs || !d->desc_lens || !d->buf_region || !d->buf_offset)
		return -ENOMEM;
	for (size_t i = 0; i < d->nregions; i++) {
		d->regions[i] = pp->regions[i];
		if (!(d->descs[i] = malloc(LC_REGION_DESC_MAX)))
			return -ENOMEM;
		int rc = lc_region_pack(pp->regions[i], d->descs[i], LC_REGION_DESC_MAX);
		if (rc < 0)
			return rc;
		d->desc_lens[i] = (size_t)rc;
	}
	for (uint32_t b = 0; b < d->layout->nbuf; b++) {
		const lc_buffer_t *buf = &d->layout->bufs[b];
		uintptr_t a = (uintptr_t)buf->base;
		size_t i = 0;
		for (; i < d->nregions; i++) {
			uintptr_t base = (uintptr_t)lc_region_addr(d->regions[i]);
			if (a >= base && a + buf->length <= base + lc_region_length(d->regions[i]))
				break;
		}
		if (i == d->nregions)
			return LC__FAIL_AT(LC_LOG_ERROR, -EINVAL,
					   "decode: buffer %u is not inside any given region", b);
		d->buf_region[b] = (uint32_t)i;
		d->buf_offset[b] = a - (uintptr_t)lc_region_addr(d->regions[i]);
	}
	return 0;
}

static int set_session(lc_decode_t *d, const char *session)
{
	if (session && *session) {
		if (strlen(session) >= sizeof d->session)
			return LC__FAIL(-EINVAL, "decode: session name longer than %zu bytes",
					sizeof d->session - 1);
		snprintf(d->session, sizeof d->session, "%s", session);
	} else {
		const char *colon = strrchr(d->endpoint, ':');
		char me[LC__BS_HOST_MAX];
		if (lc__addr_is_wildcard(d->host))
			lc__addr_host_primary(me, sizeof me);
		else
			snprintf(me, sizeof me, "%s", d->host);
		lc__reason(d->session, sizeof d->session, "d%d@%s:%s", d->tp_rank, me,
			   colon ? colon + 1 : "0");
	}
	return 0;
}

static int copy_layout(lc_decode_t *d, const lc_layout_t *layout)
{
	int rc = lc__layout_clone(layout, &d->layout);
	if (rc)
		return rc;
	d->item_lens = calloc(d->layout->nbuf ? d->layout->nbuf : 1, sizeof *d->item_lens);
	if (!d->item_lens)
		return -ENOMEM;
	for (uint32_t i = 0; i < d->layout->nbuf; i++)
		d->item_lens[i] = d->layout->bufs[i].item_len;
	return 0;
}

static lc_decode_t *decode_new(lc_ctx_t *ctx, const lc_decode_params_t *pp)
{
	lc_decode_t *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	d->ctx = ctx;
	d->tp_size = pp->tp_size;
	d->tp_rank = pp->tp_rank;
	d->notify.efd = -1;
	d->evfd = -1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	/* Bound here; what P is told is chosen per P rank (decode_discover.c,
	 * control/addr.h). "": the wildcard. */
	snprintf(d->host, sizeof d->host, "%s", pp->host ? pp->host : "");
	load_knobs(d, ctx);
	return d;
}

static int start_threads(lc_decode_t *d)
{
	if (pthread_create(&d->ctl_thread, NULL, lc__decode_ctl_main, d))
		return -EAGAIN;
	d->ctl_started = true;
	if (!(d->disc_threads = calloc((size_t)d->ndisc, sizeof *d->disc_threads)))
		return -ENOMEM;
	for (; d->disc_started < d->ndisc; d->disc_started++)
		if (pthread_create(&d->disc_threads[d->disc_started], NULL, lc__decode_disc_main,
				   d))
			return -EAGAIN;
	return 0;
}
#endif

int lc_decode_create(lc_ctx_t *ctx, const lc_decode_params_t *params, lc_decode_t **out)
{
#ifndef LC_HAVE_ZMQ
	return LC_ENOTSUP;
#else
	lc_decode_params_t pp;
	int rc;
	/* NULL params stay -EINVAL: the layout, regions and listener have no
	 * default. */
	lc_last_error_clear();
	LC__PARAMS_COPY(&pp, params);
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_decode_create: %s is NULL", ctx ? "out" : "ctx");
	const char *missing = !pp.layout         ? "layout"
			      : !pp.regions      ? "regions"
			      : !pp.region_count ? "region_count"
			      : !pp.listen_url   ? "listen_url"
						 : NULL;
	if (missing)
		return LC__FAIL(-EINVAL, "lc_decode_create: params->%s is required (%s)", missing,
				params ? "not set" : "params is NULL");
	if (pp.region_count > LC__MSG_MAX_REGIONS)
		return LC__FAIL(-EINVAL, "lc_decode_create: %zu regions, at most %d",
				pp.region_count, LC__MSG_MAX_REGIONS);
	if (pp.tp_size <= 0)
		pp.tp_size = 1;
	if (pp.tp_rank < 0 || pp.tp_rank >= pp.tp_size)
		return LC__FAIL(-EINVAL, "lc_decode_create: tp_rank %d outside [0, tp_size %d)",
				pp.tp_rank, pp.tp_size);
	lc_decode_t *d = decode_new(ctx, &pp);
	if (!d)
		return -ENOMEM;
	if (!(d->peers = calloc(2 * (size_t)d->peers_max, sizeof *d->peers)) ||
	    !(d->met = calloc((size_t)d->peers_max, sizeof *d->met))) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = lc__notify_init(&d->notify)) || (rc = copy_layout(d, pp.layout)))
		goto fail;
	if ((d->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		rc = -errno;
		goto fail;
	}
	/* The data-plane listener before the regions are packed: a ucx
	 * listener must exist when a region is packed for its descriptor to
	 * carry the ucx keys (docs/transport-ucx.md). */
	if ((rc = lc_listener_create(ctx, pp.listen_url, &d->listener)) ||
	    (rc = lc_listener_url(d->listener, d->data_url, sizeof d->data_url)) < 0)
		goto fail;
	if ((rc = map_regions(d, &pp)))
		goto fail;
	lc__shared_t shared;
	if ((rc = lc__shared_load(pp.shared_secret, "lc_decode_create", &shared)) < 0)
		goto fail;
	rc = lc__zctx_create(&shared, &d->z);
	lc__shared_wipe(&shared);
	if (rc)
		goto fail;
	/* P's liveness is its control channel's (decode_discover.c, heartbeat). */
	int hb_ms = (int)(d->hb_interval_ns / 1000000);
	lc__zctx_watch_pushes(d->z, hb_ms, hb_ms * d->hb_misses);
	if ((rc = lc__pull_bind(d->z, d->host, &d->pull, d->endpoint, sizeof d->endpoint)))
		goto fail;
	if (!lc__zctx_public_key(d->z)[0])
		lc__shared_warn_open("decode", d->host,
				     "the control socket (P's statuses; its token goes to any "
				     "route)");
	if ((rc = set_session(d, pp.session)) || (rc = start_threads(d)))
		goto fail;
	/* A P that dies closes its lanes at once (decode_discover.c). */
	lc__listener_watch(d->listener, lc__decode_lane_gone, d);
	LC__INFO("decode %s: data %s, control %s", d->session, d->data_url, d->endpoint);
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
		lc__decode_fail(d, r, LC_FAIL_CANCELLED, true, "decode side destroyed");
	atomic_store(&d->stop, true);
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	lc__decode_ctl_wake(d);
	if (d->ctl_started)
		pthread_join(d->ctl_thread, NULL);
	for (int i = 0; i < d->disc_started; i++)
		pthread_join(d->disc_threads[i], NULL);
	free(d->disc_threads);
	if (d->peers)
		lc__decode_peers_free(d);
	free(d->peers);
	free(d->met);
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
	free(d->item_lens);
	lc_layout_destroy(d->layout);
	lc__notify_fini(&d->notify);
	if (d->evfd >= 0)
		close(d->evfd);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

int lc_decode_wait(lc_decode_t *d, int timeout_ms)
{
	if (!d)
		return LC__FAIL(-EINVAL, "lc_decode_wait: decode is NULL");
	return lc__notify_wait(&d->notify, timeout_ms);
}

int lc_decode_fd(const lc_decode_t *d)
{
	if (!d)
		return LC__FAIL(-EINVAL, "lc_decode_fd: decode is NULL");
	return d->notify.efd;
}

int lc_decode_endpoint(const lc_decode_t *d, char *buf, size_t cap)
{
	char ep[LC__MSG_STR_MAX], why[300];
	if (!d || !buf)
		return LC__FAIL(-EINVAL, "lc_decode_endpoint: %s is NULL", !d ? "decode" : "buf");
	/* As advertised to a peer not known yet (control/addr.h): the bound
	 * wildcard never leaves this process. */
	if (lc__addr_url_for(d->endpoint, NULL, ep, sizeof ep, why, sizeof why))
		snprintf(ep, sizeof ep, "%s", d->endpoint);
	int n = snprintf(buf, cap, "%s", ep);
	return (size_t)n >= cap ? -ENOSPC : n;
}

int lc_decode_counter(lc_decode_t *d, const char *name, uint64_t *out)
{
	if (!d || !name || !out)
		return LC__FAIL(-EINVAL, "lc_decode_counter: %s is NULL",
				!d      ? "decode"
				: !name ? "name"
					: "out");
	if (!strcmp(name, "channels_open")) { /* a gauge */
		pthread_mutex_lock(&d->lock);
		*out = (uint64_t)d->nchannels;
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	for (int i = 0; i < LC__CTL_COUNT; i++)
		if (!strcmp(lc__ctl_counter_name(i), name)) {
			if (!lc__pull_counter(d->pull, i, out))
				*out = atomic_load(&d->ctl[i]);
			return 0;
		}
	lc__error_set(-ENOENT, "decode: no counter named '%.100s'", name);
	return -ENOENT;
}

/* ---- receivers ---- */

int lc_receiver_create(lc_decode_t *d, const char *bootstrap, uint64_t room, lc_receiver_t **out)
{
	if (!d || !out)
		return LC__FAIL(-EINVAL, "lc_receiver_create: %s is NULL", d ? "out" : "decode");
	lc_receiver_params_t rp = {.size = sizeof rp, .bootstrap = bootstrap, .room = room};
	return lc_receiver_create_ex(d, &rp, out);
}

int lc_receiver_create_ex(lc_decode_t *d, const lc_receiver_params_t *params, lc_receiver_t **out)
{
	char addr[LC__BS_HOST_MAX], why[LC_REASON_MAX] = "";
	lc_receiver_params_t rp;
	LC__PARAMS_TAKE("lc_receiver_create_ex", d, "decode", &rp, params, "params",
			lc_receiver_params_t, room);
	if (!out)
		return LC__FAIL(-EINVAL, "lc_receiver_create_ex: out is NULL");
	if (LC__PARAMS_SHORT(params, lc_receiver_params_t, pair_len))
		rp.pair = NULL, rp.pair_len = 0;
	const char *bootstrap = rp.bootstrap;
	uint64_t room = rp.room;
	if ((rp.pair_len && !rp.pair) || (!rp.pair_len && rp.pair) ||
	    (rp.pair_len && (rp.pair_len < LC_PAIR_MIN || rp.pair_len > LC_PAIR_MAX)))
		return LC__FAIL(-EINVAL,
				"receiver of room %llu: pairing value of %zu bytes%s: give %d..%d "
				"bytes, or none (pair NULL, pair_len 0)",
				(unsigned long long)room, rp.pair_len,
				rp.pair_len && !rp.pair ? " at NULL" : "", LC_PAIR_MIN,
				LC_PAIR_MAX);
	if (bootstrap && *bootstrap) {
		if (lc__addr_bootstrap(bootstrap, addr, sizeof addr))
			return LC__FAIL(-EINVAL, "receiver of room %llu: %s",
					(unsigned long long)room, lc_last_error());
	} else {
		snprintf(addr, sizeof addr, "127.0.0.1:%lld", (long long)d->default_port);
	}
	lc_receiver_t *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->d = d;
	r->room = room;
	r->pair_len = (uint8_t)rp.pair_len;
	if (rp.pair_len)
		memcpy(r->pair, rp.pair, rp.pair_len);
	r->status = LC_ROOM_BOOTSTRAPPING;
	r->created_ns = lc__now_ns();
	r->default_bootstrap = !(bootstrap && *bootstrap);
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	if (lc__decode_find(d, room))
		rc = -EEXIST;
	else
		rc = lc__decode_peer_get(d, addr, &r->peer, why, sizeof why);
	if (rc) {
		pthread_mutex_unlock(&d->lock);
		free(r);
		if (rc == -ENOSPC) { /* a flood's: logged at a rate (decode_peers.c) */
			lc__error_set(rc, "receiver of room %llu: %s", (unsigned long long)room,
				      why);
			return rc;
		}
		return LC__FAIL(rc, "receiver of room %llu: %s", (unsigned long long)room,
				rc == -EEXIST ? "the room already has a receiver"
					      : lc_strerror(rc));
	}
	r->next = d->receivers;
	d->receivers = r;
	d->rooms.opened++;
	/* A P this D already registered with: Bootstrapped before the call
	 * returns, and the discovery workers, whose watch counts live rooms,
	 * are woken only if one slept with none live (a wake-up per room
	 * otherwise, on the path of every room). */
	lc__decode_discover_now(d, r);
	if (r->status == LC_ROOM_BOOTSTRAPPING || !d->disc_live)
		pthread_cond_broadcast(&d->cond);
	bool idle = atomic_load(&d->ctl_idle); /* looked before the room was linked */
	pthread_mutex_unlock(&d->lock);
	if (idle)
		lc__decode_ctl_wake(d); /* its deadlines now include this room's */
	*out = r;
	return 0;
}

/* The room goes to its real target ranks' writers alone: bound to each
 * one's token before any page is granted, so that no moment leaves the
 * pages open to another token this D gave out (an impostor's that D
 * registered with: docs/security.md, "A token opens only its own rooms").
 * Dummy targets write nothing and get no binding. */
static int bind_room(lc_decode_t *d, lc_receiver_t *r)
{
	int bound = 0;
	for (int i = 0; i < r->plan.ntargets; i++) {
		const lc__tp_target_t *tg = &r->plan.targets[i];
		const lc__prank_t *pr = r->peer->ranks ? &r->peer->ranks[tg->rank] : NULL;
		if (tg->dummy)
			continue;
		if (!pr || !pr->has_token)
			return LC__FAIL(LC_ERR_STATE,
					"decode %s: room %" PRIu64 ": P rank %d holds no token "
					"of this D (its registration was forgotten)",
					d->session, r->room, tg->rank);
		int rc = lc_grant_bind(d->ctx, r->room, &pr->token);
		if (rc)
			return rc;
		bound++;
	}
	return bound ? 0
		     : LC__FAIL(LC_ERR_STATE, "decode %s: room %" PRIu64 ": no P rank writes it",
				d->session, r->room);
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
			if (ids[i] < 0 || (uint64_t)ids[j - 1] >= items) {
				/* ids[i..j) run up by one: the first bad one */
				int64_t bad = ids[i] < 0 || (uint64_t)ids[i] >= items
						      ? ids[i]
						      : (int64_t)items;
				LC__COUNT(d->ctx, grants_refused_range);
				/* The cause goes to lc_last_error() too, not only
				 * to the log (issue 20: no -EINVAL without it). */
				return LC__FAIL(-EINVAL,
						"decode %s: room %" PRIu64 ": %s id %" PRId64
						" (index %zu) is outside buffer %u (%" PRIu64
						" %s, ids 0..%" PRIu64 "); nothing granted",
						d->session, r->room, state ? "state slot" : "page",
						bad, i + (size_t)(bad - ids[i]), b, items,
						state ? "slots" : "pages", items - 1);
			}
			lc__sum_range_t g = {d->regions[d->buf_region[b]],
					     d->buf_offset[b] + (uint64_t)ids[i] * buf->item_len,
					     (uint64_t)(j - i) * buf->item_len};
			int rc = lc_grant_issue(d->ctx, r->room, g.region, g.offset, g.length);
			if (rc < 0 || (d->checksum && (rc = lc__decode_keep_range(r, &g))))
				return rc;
			i = j;
		}
	}
	return 0;
}

/* One TRANSFER_INFO to target i (a dummy gets no pages). */
static int send_info(lc_decode_t *d, lc_receiver_t *r, const lc_receiver_pages_t *pg, int i,
		     lc__msg_t *m)
{
	const lc__tp_target_t *tg = &r->plan.targets[i];
	lc__prank_t *pr = r->peer->ranks ? &r->peer->ranks[tg->rank] : NULL;
	lc__msg_transfer_info_t *t = &m->info;
	memset(m, 0, sizeof *m);
	m->type = LC__MSG_TRANSFER_INFO;
	if (pr)
		memcpy(m->secret, pr->secret, LC__MSG_SECRET_LEN);
	t->room = r->room;
	snprintf(t->session, sizeof t->session, "%s", d->session);
	snprintf(t->status_ep, sizeof t->status_ep, "%s", d->endpoint);
	t->required_dst = tg->required_dst;
	t->prefix_len = pg->prefix_len;
	t->aux_index = -1;
	if (r->pair_len) {
		t->flags |= LC__INFO_HAS_PAIR;
		t->pair_len = r->pair_len;
		memcpy(t->pair, r->pair, sizeof t->pair);
	}
	if (tg->dummy) {
		t->flags |= LC__INFO_DUMMY;
	} else {
		t->flags |= LC__INFO_WANTS_ACK; /* P knows the room once it says so */
		t->aux_index = pg->aux_index;
		t->page_count = (uint32_t)pg->page_count;
		t->pages = (int64_t *)pg->pages;
		t->slot_count = (uint32_t)pg->state_slot_count;
		t->slots = (int64_t *)pg->state_slots;
	}
	uint8_t *buf;
	size_t len;
	int rc;
	if (!pr || !pr->push)
		return LC_ERR_STATE;
	if ((rc = lc__msg_encode(m, &buf, &len)))
		return rc;
	rc = lc__push_send(pr->push, buf, len, 0);
	free(buf);
	if (rc) {
		LC__D_CTL_ADD(d, send_failures);
		return rc;
	}
	LC__D_CTL_ADD(d, msgs_sent);
	LC__D_CTL_ADD(d, transfer_infos);
	return 0;
}

/* Tell the grant table which byte spans make each layer of the room (each
 * buffer of D's layout), so that it keeps layers_of's count. LC_ERR_GRANT
 * (nothing granted: no layer can land) is no failure. */
static int watch_layers(lc_decode_t *d, lc_receiver_t *r)
{
	const lc_layout_t *lo = d->layout;
	lc__landed_span_t *s = malloc((lo->nbuf ? lo->nbuf : 1) * sizeof *s);
	if (!s)
		return -ENOMEM;
	size_t n = 0;
	for (uint32_t l = 0; l < lo->layers; l++)
		for (uint32_t k = lo->layer_start[l]; k < lo->layer_start[l + 1]; k++) {
			uint32_t b = lo->layer_buf[k];
			s[n++] = (lc__landed_span_t){
				.region = lc_region_id(d->regions[d->buf_region[b]]),
				.layer = l,
				.lo = d->buf_offset[b],
				.hi = d->buf_offset[b] + lo->bufs[b].length};
		}
	int rc = lc__grant_watch(d->ctx->grants, r->room, s, n, lo->layers);
	free(s);
	return rc == LC_ERR_GRANT ? 0 : rc;
}

int lc_receiver_send(lc_receiver_t *r, const lc_receiver_pages_t *pages)
{
	lc_receiver_pages_t pg = {0};
	LC__PARAMS_TAKE("lc_receiver_send", r, "receiver", &pg, pages, "pages", lc_receiver_pages_t,
			page_count);
	if (LC__PARAMS_SHORT(pages, lc_receiver_pages_t, aux_index))
		pg.aux_index = -1; /* absent: none, not slot 0 */
	if ((pg.page_count && !pg.pages) || (pg.state_slot_count && !pg.state_slots) ||
	    pg.page_count > LC__MSG_MAX_PAGES || pg.state_slot_count > LC__MSG_MAX_SLOTS ||
	    pg.aux_index < -1)
		return LC__FAIL(
			-EINVAL, "lc_receiver_send of room %llu: %s", (unsigned long long)r->room,
			pg.page_count && !pg.pages                ? "pages->pages is NULL"
			: pg.state_slot_count && !pg.state_slots  ? "pages->state_slots is NULL"
			: pg.page_count > LC__MSG_MAX_PAGES       ? "too many pages"
			: pg.state_slot_count > LC__MSG_MAX_SLOTS ? "too many state slots"
								  : "aux_index < -1");
	lc_decode_t *d = r->d;
	pthread_mutex_lock(&d->lock);
	int rc = 0;
	if (r->status != LC_ROOM_BOOTSTRAPPED || r->sent) {
		rc = LC__FAIL(LC_ERR_STATE, "lc_receiver_send of room %llu: %s",
			      (unsigned long long)r->room,
			      r->sent ? "its pages were already sent (once per room)"
			      : r->status == LC_ROOM_BOOTSTRAPPING
				      ? "not Bootstrapped yet (poll until LC_ROOM_BOOTSTRAPPED)"
				      : "the room is final");
		goto out;
	}
	if ((rc = bind_room(d, r)) || (rc = grant_pages(d, r, &pg))) {
		lc_grant_revoke(d->ctx, r->room);
		goto out;
	}
	r->granted = true;
	/* What every P rank together must land (merged: pages listed twice
	 * count once); no grant at all is nothing to land. */
	lc__grant_count_t c;
	r->grant_bytes = lc__grant_room_count(d->ctx->grants, r->room, &c) ? 0 : c.granted;
	if ((rc = watch_layers(d, r)))
		goto out;
	lc__msg_t *m = calloc(1, sizeof *m);
	if (!m) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < r->plan.ntargets && !rc; i++)
		rc = send_info(d, r, &pg, i, m);
	free(m);
	r->sent = true;
	r->sent_ns = lc__now_ns();
	if (rc) {
		lc__decode_fail(d, r, LC_FAIL_TRANSFER, true, "sending the transfer info: %s",
				lc_strerror(rc));
		rc = 0; /* the room is Failed; poll says why */
	} else {
		lc__decode_set_state(d, r, LC_ROOM_TRANSFERRING);
	}
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* D's "layers landed": the leading layers all of whose granted bytes are
 * in its memory, kept by the grant table's landed count as writes land
 * (watch_layers; fan-in from several P ranks is just more writes into the
 * same memory), so a poll reads it in O(1). P's LAYERS messages are not
 * believed. Grows only while the room holds its grant; Success means every
 * layer. */
static uint32_t layers_of(lc_receiver_t *r)
{
	lc_decode_t *d = r->d;
	uint32_t n;
	if (r->status == LC_ROOM_SUCCESS)
		return d->layout->layers;
	if (r->granted && !lc__grant_layers_ready(d->ctx->grants, r->room, &n) && n > r->ready)
		r->ready = n;
	return r->ready;
}

int lc_receiver_poll(lc_receiver_t *r, lc_room_info_t *out)
{
	if (!r)
		return LC__FAIL(-EINVAL, "lc_receiver_poll: receiver is NULL");
	lc_decode_t *d = r->d;
	pthread_mutex_lock(&d->lock);
	int status = r->status;
	if (out) {
		lc_room_info_t info = {0};
		info.size = out->size ? LC__MIN(out->size, sizeof info) : sizeof info;
		info.status = r->status;
		info.fail_reason = r->fail_reason;
		lc__reason(info.reason, sizeof info.reason, "%s",
			   r->status == LC_ROOM_FAILED ? r->reason : "");
		info.dst_count = (uint32_t)r->plan.ntargets;
		info.required_dst_count = r->plan.required_dst;
		info.layers_landed = layers_of(r);
		memcpy(out, &info, info.size);
	}
	pthread_mutex_unlock(&d->lock);
	return status;
}

int lc_receiver_layers_ready(lc_receiver_t *r)
{
	if (!r)
		return LC__FAIL(-EINVAL, "lc_receiver_layers_ready: receiver is NULL");
	pthread_mutex_lock(&r->d->lock);
	int n = r->status == LC_ROOM_FAILED ? 0 : (int)layers_of(r);
	pthread_mutex_unlock(&r->d->lock);
	return n;
}

int lc_receiver_metadata(lc_receiver_t *r, void *buf, size_t cap)
{
	if (!r || (cap && !buf))
		return LC__FAIL(-EINVAL, "lc_receiver_metadata: %s is NULL",
				r ? "buf" : "receiver");
	int rc;
	pthread_mutex_lock(&r->d->lock);
	if (r->status != LC_ROOM_SUCCESS)
		lc__error_set(rc = LC_ERR_STATE,
			      "room %llu: metadata is read after Success, the room is %s",
			      (unsigned long long)r->room, lc_room_status_name(r->status));
	else if (r->metadata_len > cap)
		rc = LC__FAIL(-ENOSPC, "room %llu: %zu bytes of metadata, %zu given",
			      (unsigned long long)r->room, r->metadata_len, cap);
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
		return LC__FAIL(-EINVAL, "lc_receiver_cancel: receiver is NULL");
	int rc = 0;
	pthread_mutex_lock(&r->d->lock);
	if (lc__decode_final(r))
		/* A race with the room's end, not a mistake: recorded, not logged. */
		lc__error_set(rc = LC_ERR_STATE, "room %llu: already %s",
			      (unsigned long long)r->room, lc_room_status_name(r->status));
	else
		lc__decode_fail(r->d, r, LC_FAIL_CANCELLED, true, "cancelled by D: %s",
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
	lc__decode_fail(d, r, LC_FAIL_CANCELLED, true,
			"receiver destroyed before the room finished");
	if (r->granted)
		lc_grant_revoke(d->ctx, r->room);
	for (lc_receiver_t **pp = &d->receivers; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	lc__decode_peer_put(r->peer);
	pthread_mutex_unlock(&d->lock);
	free(r->metadata);
	free(r->sum_ranges);
	free(r);
}
