/*
 * The prefill side's public calls (pd/prefill_int.h has the structures, the
 * threads and the locking): lc_prefill_* for a P rank, lc_sender_* for a
 * room.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/params.h"
#include "control/addr.h"
#include "control/shared_secret.h"
#include "engine/engine.h"
#include "pd/prefill_int.h"

#ifdef LC_HAVE_ZMQ
static int metrics_source(void *arg, lc__metrics_snapshot_t *out)
{
	lc_prefill_t *p = arg;
	snprintf(out->label, sizeof out->label, "%d", p->rank);
	out->ctx = p->ctx;
	out->engine.size = sizeof out->engine;
	out->has_engine = lc_engine_metrics(p->engine, &out->engine) == 0;
	for (int r = 0; out->has_engine && r < LC_FAIL_REASON_COUNT; r++)
		lc_engine_failed_by_reason(p->engine, r, &out->failed_by_reason[r]);
	for (int i = 0; i < LC__CTL_COUNT; i++)
		if (!lc__pull_counter(p->pull, i, &out->ctl[i]))
			out->ctl[i] = atomic_load(&p->ctl[i]);
	return 0;
}

/* The owned route (control/bootstrap.h, lc__bootstrap_claim): the token
 * the claim got, and a thread that refreshes the route every third of its
 * life so that it lapses only once this P is gone. */
struct lc__route_keeper {
	lc__prefill_info_t info;
	char secret[LC__BS_SECRET_MAX];
	bool has_secret;
	char owner[LC__BS_OWNER_LEN + 1];
	uint64_t ttl_ms;
	pthread_t thread;
	bool running, stop;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
};

/* retries: 5 for the claim at create, 0 for a refresh (the next one is
 * the retry). */
static int claim(lc_prefill_t *p, struct lc__route_keeper *k, int retries, char *why, size_t cap)
{
	lc__http_opts_t o = {
		.timeout_ms = 2000, .retries = retries, .secret = k->has_secret ? k->secret : NULL};
	return lc__bootstrap_claim(p->bootstrap, &k->info, false, &o, k->owner, &k->ttl_ms, why,
				   cap);
}

static void *refresh_main(void *arg)
{
	lc_prefill_t *p = arg;
	struct lc__route_keeper *k = p->route;
	pthread_setname_np(pthread_self(), "lc-p-route");
	pthread_mutex_lock(&k->lock);
	while (!k->stop) {
		uint64_t ivl_ms = LC__MAX(k->ttl_ms / 3, 50);
		struct timespec ts = lc__abs_ts(lc__now_ns() + ivl_ms * 1000000ull);
		while (!k->stop && pthread_cond_timedwait(&k->cond, &k->lock, &ts) == 0)
			;
		if (k->stop)
			break;
		pthread_mutex_unlock(&k->lock);
		char why[300] = "";
		int rc = claim(p, k, 0, why, sizeof why);
		if (rc == -EEXIST) {
			uint64_t n = LC__P_CTL_ADD(p, route_conflicts) + 1;
			LC__LOG_PEER(LC_LOG_ERROR,
				     "prefill %s: rank %d's route was taken by another P (%llu "
				     "refreshes refused): %s",
				     p->name, p->rank, (unsigned long long)n, why);
		} else if (rc) {
			uint64_t n = LC__P_CTL_ADD(p, route_refresh_failures) + 1;
			LC__LOG_PEER(
				LC_LOG_WARN,
				"prefill %s: refreshing rank %d's route failed (%llu so far): %s",
				p->name, p->rank, (unsigned long long)n, why);
		}
		pthread_mutex_lock(&k->lock);
		if (!k->ttl_ms) /* the server no longer gives a life: stop refreshing */
			break;
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

static void route_stop(lc_prefill_t *p)
{
	struct lc__route_keeper *k = p->route;
	if (!k)
		return;
	if (k->running) {
		pthread_mutex_lock(&k->lock);
		k->stop = true;
		pthread_cond_signal(&k->cond);
		pthread_mutex_unlock(&k->lock);
		pthread_join(k->thread, NULL);
	}
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->lock);
	memset(k->secret, 0, sizeof k->secret);
	free(k);
	p->route = NULL;
}

/* PUT /route: claim this rank (its endpoint and page geometry); a rank
 * another live P owns fails the create (-EEXIST), loudly. The bearer: the
 * bootstrap secret given (or bootstrap.secret), else the shared secret's. */
static int register_bootstrap(lc_prefill_t *p, const char *secret_param, const lc__shared_t *shared)
{
	char why[300] = "";
	struct lc__route_keeper *k = calloc(1, sizeof *k);
	if (!k)
		return -ENOMEM;
	pthread_mutex_init(&k->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->cond, &ca);
	pthread_condattr_destroy(&ca);
	p->route = k;
	const char *colon = strrchr(p->endpoint, ':');
	k->info = (lc__prefill_info_t){.world_size = p->world,
				       .dp_size = p->dp,
				       .engine_rank = p->rank,
				       .rank_port = colon ? atoi(colon + 1) : 0,
				       .fingerprint = p->layout->fingerprint,
				       .layers = p->layout->layers,
				       .nlens = p->layout->nbuf,
				       .kv_item_lens = p->item_lens};
	snprintf(k->info.rank_ip, sizeof k->info.rank_ip, "%s", p->host);
	snprintf(k->info.curve_key, sizeof k->info.curve_key, "%s", lc__zctx_public_key(p->z));
	snprintf(k->info.engine_id, sizeof k->info.engine_id, "%s", p->engine_id);
	k->has_secret = lc__bootstrap_secret(secret_param, k->secret, sizeof k->secret) == 1;
	if (!k->has_secret && shared->set) {
		snprintf(k->secret, sizeof k->secret, "%s", shared->bearer);
		k->has_secret = true;
	}
	int rc = claim(p, k, 5, why, sizeof why);
	if (rc == -EEXIST) {
		/* A P restarted after a crash finds its old route until it lapses:
		 * wait for that (at most a route's life), then fail loudly. */
		uint64_t ttl = (uint64_t)lc__ctx_cfg(p->ctx, LC__CFG_route_ttl_ms);
		uint64_t until = lc__now_ns() + (ttl + 2000) * 1000000ull;
		LC__WARN("prefill %s: rank %d is taken at bootstrap %s; waiting up to %llu ms for "
			 "its route to lapse (a restarted P): %s",
			 p->name, p->rank, p->bootstrap, (unsigned long long)(ttl + 2000), why);
		while (rc == -EEXIST && lc__now_ns() < until) {
			usleep(200000);
			rc = claim(p, k, 0, why, sizeof why);
		}
	}
	if (rc == -EEXIST) {
		LC__P_CTL_ADD(p, route_conflicts);
		return LC__FAIL_AT(LC_LOG_ERROR, rc,
				   "prefill %s: rank %d is taken at bootstrap %s (another P, or a "
				   "stale registration until its route lapses): %s",
				   p->name, p->rank, p->bootstrap, why);
	}
	if (rc) {
		return LC__FAIL_AT(LC_LOG_ERROR, rc,
				   "prefill %s: registering with bootstrap %s failed: %s", p->name,
				   p->bootstrap, why);
	}
	if (k->ttl_ms) {
		if (pthread_create(&k->thread, NULL, refresh_main, p))
			return -EAGAIN;
		k->running = true;
	}
	return 0;
}

/* Every buffer inside a region registered on the context, as D requires of
 * its own: P's engine would otherwise post pages from memory the data plane
 * refuses (or worse, from a neighbouring region) at the first transfer. */
static int check_regions(lc_prefill_t *p, const lc_layout_t *layout)
{
	for (uint32_t b = 0; b < layout->nbuf; b++) {
		const lc_buffer_t *buf = &layout->bufs[b];
		lc__region_info_t ri;
		if (buf->base && !lc__regions_find(&p->ctx->regions, buf->base, buf->length, &ri))
			continue;
		LC__ERROR("prefill %s: buffer %u (layer %d, kind %u, %" PRIu64
			  " bytes at %p) is not inside any region registered on the context",
			  p->name, b, buf->layer, buf->kind, buf->length, buf->base);
		return -EINVAL;
	}
	return 0;
}

static int copy_layout(lc_prefill_t *p, const lc_layout_t *layout)
{
	int rc = check_regions(p, layout);
	if (rc || (rc = lc__layout_clone(layout, &p->layout)))
		return rc;
	p->item_lens = calloc(p->layout->nbuf ? p->layout->nbuf : 1, sizeof *p->item_lens);
	if (!p->item_lens)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->layout->nbuf; i++)
		p->item_lens[i] = p->layout->bufs[i].item_len;
	return 0;
}

/* engine_id: what the bootstrap server takes (GET /query shows it). */
static bool engine_id_ok(const char *s)
{
	size_t n = strnlen(s, LC__BS_ENGINE_ID_MAX);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return n < LC__BS_ENGINE_ID_MAX;
}

static lc_prefill_t *prefill_new(lc_ctx_t *ctx, const lc_prefill_params_t *pp)
{
	lc_prefill_t *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->ctx = ctx;
	p->rank = pp->engine_rank;
	p->world = pp->world_size;
	p->dp = pp->dp_size;
	p->evfd = -1;
	snprintf(p->name, sizeof p->name, "%s", pp->name ? pp->name : "p");
	/* Bound here; advertised once the bootstrap's route is known (start). */
	snprintf(p->bind, sizeof p->bind, "%s", pp->host ? pp->host : "");
	snprintf(p->bootstrap, sizeof p->bootstrap, "%s", pp->bootstrap);
	snprintf(p->engine_id, sizeof p->engine_id, "%s", pp->engine_id ? pp->engine_id : "");
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->send_lock, NULL);
	return p;
}

/* What D is told to reach this rank at (control/addr.h): the public
 * address, the bound one, else the local address of the route towards the
 * bootstrap server. A loopback answer (P beside its bootstrap server) is
 * replaced by D with the bootstrap server's address (decode_discover.c). */
static int advertise(lc_prefill_t *p)
{
	char bs[LC__BS_HOST_MAX], why[300] = "", bound[LC__BS_HOST_MAX];
	int bs_port, port;
	const char *a = !strncmp(p->bootstrap, "http://", 7) ? p->bootstrap + 7 : p->bootstrap;
	if (lc__addr_split(a, bs, sizeof bs, &bs_port))
		snprintf(bs, sizeof bs, "%s", a);
	if (lc__addr_split(p->endpoint, bound, sizeof bound, &port))
		return -EINVAL;
	int rc = lc__addr_advertise(p->bind, bs, p->host, sizeof p->host, why, sizeof why);
	if (rc) {
		return LC__FAIL_AT(LC_LOG_ERROR, rc,
				   "prefill %s: no address to advertise (check the bootstrap "
				   "address, or set host or LAYERCAKE_ADVERTISE_HOST): %s",
				   p->name, why);
	}
	char hp[LC__BS_HOST_MAX + 16];
	lc__addr_join(p->host, port, hp, sizeof hp);
	snprintf(p->endpoint, sizeof p->endpoint, "tcp://%s", hp);
	return 0;
}

/* The engine, the control socket and the control thread. */
static int start(lc_prefill_t *p, const lc_prefill_params_t *pp, const lc__shared_t *shared)
{
	int rc;
	p->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->evfd < 0)
		return -errno;
	lc_engine_params_t ep = {.size = sizeof ep,
				 .layout = pp->layout,
				 .name = p->name,
				 .final_cb = lc__prefill_on_final,
				 .final_arg = p,
				 .landed_cb = lc__prefill_on_landed,
				 .landed_arg = p,
				 .external_counter = pp->external_counter,
				 .cache_word = pp->cache_word,
				 .aux_word = pp->aux_word};
	if ((rc = lc_engine_create(p->ctx, &ep, &p->engine)) ||
	    (rc = lc__zctx_create(shared, &p->z)) ||
	    (rc = lc__pull_bind(p->z, p->bind, &p->pull, p->endpoint, sizeof p->endpoint)) ||
	    (rc = advertise(p)))
		return rc;
	if (!lc__zctx_public_key(p->z)[0])
		lc__shared_warn_open("prefill", p->bind, "the control socket (D's REGISTERs)");
	lc__engine_set_notes_hook(p->engine, lc__prefill_on_notes, p);
	if (pthread_create(&p->thread, NULL, lc__prefill_control_main, p))
		return -EAGAIN;
	p->started = true;
	return 0;
}
#endif

int lc_prefill_create(lc_ctx_t *ctx, const lc_prefill_params_t *params, lc_prefill_t **out)
{
#ifndef LC_HAVE_ZMQ
	return LC_ENOTSUP;
#else
	lc_prefill_params_t pp;
	int rc;
	/* NULL params stay -EINVAL: the layout, the bootstrap address and the
	 * parallel layout have no default. */
	lc_last_error_clear();
	LC__PARAMS_COPY(&pp, params);
	char bs[LC__BS_HOST_MAX];
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_prefill_create: %s is NULL", ctx ? "out" : "ctx");
	if (!pp.layout || !pp.bootstrap)
		return LC__FAIL(-EINVAL, "lc_prefill_create: params->%s is required (%s)",
				!pp.layout ? "layout" : "bootstrap",
				params ? "not set" : "params is NULL");
	if (pp.world_size < 1 || pp.dp_size < 1 || pp.world_size % pp.dp_size ||
	    pp.engine_rank < 0 || pp.engine_rank >= pp.world_size)
		return LC__FAIL(
			-EINVAL,
			"lc_prefill_create: world_size %d, dp_size %d, engine_rank %d: "
			"need world_size >= 1 a multiple of dp_size >= 1 and engine_rank in "
			"[0, world_size)",
			pp.world_size, pp.dp_size, pp.engine_rank);
	if (lc__addr_bootstrap(pp.bootstrap, bs, sizeof bs))
		return LC__FAIL(-EINVAL, "lc_prefill_create: %s", lc_last_error());
	if (pp.engine_id && !engine_id_ok(pp.engine_id))
		return LC__FAIL(-EINVAL,
				"lc_prefill_create: params->engine_id is longer than %d bytes or holds "
				"a control character",
				LC__BS_ENGINE_ID_MAX - 1);
	lc__shared_t shared;
	if ((rc = lc__shared_load(pp.shared_secret, "lc_prefill_create", &shared)) < 0)
		return rc;
	lc_prefill_t *p = prefill_new(ctx, &pp);
	if (!p) {
		lc__shared_wipe(&shared);
		return -ENOMEM;
	}
	rc = copy_layout(p, pp.layout);
	if (!rc)
		rc = start(p, &pp, &shared);
	if (!rc)
		rc = register_bootstrap(p, pp.bootstrap_secret, &shared);
	lc__shared_wipe(&shared);
	if (rc)
		goto fail;
	if (pp.metrics_server) {
		p->metrics_server = pp.metrics_server;
		p->source_id = lc__bootstrap_source_add(pp.metrics_server, metrics_source, p);
		if (p->source_id < 0)
			p->metrics_server = NULL;
	}
	LC__INFO("prefill %s: rank %d/%d (dp %d) serving %s", p->name, p->rank, p->world, p->dp,
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
#ifdef LC_HAVE_ZMQ
	route_stop(p);
#endif
	/* The control thread first: it hands D's messages to the engine, and
	 * anyone may send those (a dummy transfer info needs no registration),
	 * so it must be gone before the engine is. The engine's final
	 * statuses are then queued by its callbacks and sent from here, the
	 * only thread left that uses the session sockets. */
	if (p->started) {
		atomic_store(&p->stop, true);
		lc__prefill_wake(p);
		pthread_join(p->thread, NULL);
		p->started = false;
	}
	/* Parked transfer infos: their D ranks are told (no sender will come). */
	pthread_mutex_lock(&p->send_lock);
	lc__prefill_park_clear(p);
	pthread_mutex_unlock(&p->send_lock);
	lc_engine_destroy(p->engine);
	p->engine = NULL;
	lc__prefill_flush(p);
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
	free(p->item_lens);
	lc_layout_destroy(p->layout);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->send_lock);
	free(p);
}

int lc_prefill_engine(lc_prefill_t *p, lc_engine_t **out)
{
	if (!p || !out)
		return LC__FAIL(-EINVAL, "lc_prefill_engine: %s is NULL", !p ? "prefill" : "out");
	*out = p->engine;
	return 0;
}

int lc_prefill_wait(lc_prefill_t *p, int timeout_ms)
{
	if (!p)
		return LC__FAIL(-EINVAL, "lc_prefill_wait: prefill is NULL");
	return lc__notify_wait(lc__engine_notify(p->engine), timeout_ms);
}

int lc_prefill_fd(const lc_prefill_t *p)
{
	if (!p)
		return LC__FAIL(-EINVAL, "lc_prefill_fd: prefill is NULL");
	return lc__engine_notify(p->engine)->efd;
}

int lc_prefill_endpoint(const lc_prefill_t *p, char *buf, size_t cap)
{
	if (!p || !buf)
		return LC__FAIL(-EINVAL, "lc_prefill_endpoint: %s is NULL", !p ? "prefill" : "buf");
	int n = snprintf(buf, cap, "%s", p->endpoint);
	return (size_t)n >= cap ? -ENOSPC : n;
}

int lc_prefill_counter(lc_prefill_t *p, const char *name, uint64_t *out)
{
	if (!p || !name || !out)
		return LC__FAIL(-EINVAL, "lc_prefill_counter: %s is NULL",
				!p      ? "prefill"
				: !name ? "name"
					: "out");
	for (int i = 0; i < LC__CTL_COUNT; i++)
		if (!strcmp(lc__ctl_counter_name(i), name)) {
			if (!lc__pull_counter(p->pull, i, out))
				*out = atomic_load(&p->ctl[i]);
			return 0;
		}
	if (!strcmp(name, "cancels_refused")) {
		*out = atomic_load(&p->cancels_refused);
		return 0;
	}
	lc__error_set(-ENOENT, "prefill: no counter named '%.100s'", name);
	return -ENOENT;
}

/* ---- senders ---- */

int lc_sender_create_ex(lc_prefill_t *p, const lc_sender_params_t *params, lc_sender_t **out)
{
	lc_sender_params_t sp;
	LC__PARAMS_TAKE("lc_sender_create_ex", p, "prefill", &sp, params, "params",
			lc_sender_params_t, room);
	if (!out)
		return LC__FAIL(-EINVAL, "lc_sender_create_ex: out is NULL");
	if (LC__PARAMS_SHORT(params, lc_sender_params_t, pair_len))
		sp.pair = NULL, sp.pair_len = 0;
	if ((sp.pair_len && !sp.pair) || (!sp.pair_len && sp.pair) ||
	    (sp.pair_len && (sp.pair_len < LC_PAIR_MIN || sp.pair_len > LC_PAIR_MAX)))
		return LC__FAIL(-EINVAL,
				"lc_sender_create_ex of room %llu: pairing value of %zu bytes%s: "
				"give %d..%d bytes, or none (pair NULL, pair_len 0)",
				(unsigned long long)sp.room, sp.pair_len,
				sp.pair_len && !sp.pair ? " at NULL" : "", LC_PAIR_MIN,
				LC_PAIR_MAX);
	uint64_t room = sp.room;
	lc_sender_t *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->p = p;
	s->room = room;
	s->pair_len = (uint8_t)sp.pair_len;
	if (sp.pair_len)
		memcpy(s->pair, sp.pair, sp.pair_len);
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t *x = p->senders; x; x = x->next)
		if (x->room == room) {
			pthread_mutex_unlock(&p->lock);
			free(s);
			return LC__FAIL(-EEXIST, "lc_sender_create: room %llu already has a sender",
					(unsigned long long)room);
		}
	pthread_mutex_unlock(&p->lock);
	/* The room before the sender is seen: the control thread adds D's
	 * transfer infos only to a room the engine has open. */
	int rc = lc_engine_room_open(p->engine, room);
	if (rc && rc != -EEXIST) { /* -EEXIST: a final room not read yet, or a raced create */
		free(s);
		return rc;
	}
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t *x = p->senders; x; x = x->next)
		if (x->room == room) { /* created meanwhile by another thread */
			pthread_mutex_unlock(&p->lock);
			free(s);
			return LC__FAIL(-EEXIST, "lc_sender_create: room %llu already has a sender",
					(unsigned long long)room);
		}
	s->next = p->senders;
	p->senders = s;
	lc__prefill_touch(p, room); /* its parked transfer infos are taken now */
	pthread_mutex_unlock(&p->lock);
	lc__prefill_wake(p);
	*out = s;
	return 0;
}

int lc_sender_create(lc_prefill_t *p, uint64_t room, lc_sender_t **out)
{
	if (!p || !out)
		return LC__FAIL(-EINVAL, "lc_sender_create: %s is NULL", !p ? "prefill" : "out");
	lc_sender_params_t sp = {.size = sizeof sp, .room = room};
	return lc_sender_create_ex(p, &sp, out);
}

int lc_sender_metadata_set(lc_sender_t *s, const void *data, size_t len)
{
	if (!s)
		return LC__FAIL(-EINVAL, "lc_sender_metadata_set: sender is NULL");
	return lc_engine_room_metadata_set(s->p->engine, s->room, data, len);
}

/* The sender's room ended (lock held): later transfer infos are refused
 * at once with the reason. */
static void mark_ended(lc_sender_t *s, int fail, const char *why)
{
	if (s->ended)
		return;
	s->ended = true;
	s->end_fail = fail;
	snprintf(s->end_reason, sizeof s->end_reason, "%s", why);
}

/* D's prefix, read from the room's first real destination while the
 * engine still has the room (a final room leaves it once reported). */
static void read_prefix(lc_sender_t *s)
{
	uint64_t tokens;
	pthread_mutex_lock(&s->p->lock);
	bool known = s->has_prefix;
	pthread_mutex_unlock(&s->p->lock);
	if (known || lc__engine_room_prefix(s->p->engine, s->room, &tokens))
		return;
	pthread_mutex_lock(&s->p->lock);
	s->prefix_len = tokens;
	s->has_prefix = true;
	pthread_mutex_unlock(&s->p->lock);
}

int lc_sender_poll(lc_sender_t *s, lc_room_info_t *out)
{
	if (!s)
		return LC__FAIL(-EINVAL, "lc_sender_poll: sender is NULL");
	if (!s->final) {
		lc_room_info_t info = {.size = sizeof info};
		read_prefix(s);
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
		if (s->final) {
			char why[LC_REASON_MAX];
			lc__reason(why, sizeof why, "ended: %s%s%s",
				   lc_room_status_name(info.status), info.reason[0] ? ": " : "",
				   info.reason);
			pthread_mutex_lock(&s->p->lock);
			mark_ended(s,
				   info.status == LC_ROOM_SUCCESS ? LC_FAIL_CANCELLED
								  : (int)info.fail_reason,
				   why);
			pthread_mutex_unlock(&s->p->lock);
		} else if (info.status != LC_ROOM_BOOTSTRAPPING) {
			read_prefix(s); /* the info that moved it on may have come meanwhile */
		}
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
		return LC__FAIL(-EINVAL, "lc_sender_prefix_len: %s is NULL",
				!s ? "sender" : "tokens");
	read_prefix(s);
	pthread_mutex_lock(&s->p->lock);
	int rc = s->has_prefix ? 0 : -EAGAIN;
	if (!rc)
		*tokens = s->prefix_len;
	pthread_mutex_unlock(&s->p->lock);
	return rc;
}

int lc_sender_cancel(lc_sender_t *s, const char *reason)
{
	if (!s)
		return LC__FAIL(-EINVAL, "lc_sender_cancel: sender is NULL");
	if (s->final) { /* a race with the room's end: recorded, not logged */
		lc__error_set(LC_ERR_STATE, "sender of room %llu: the room is already final",
			      (unsigned long long)s->room);
		return LC_ERR_STATE;
	}
	const char *why = reason ? reason : "aborted by P";
	/* Ended before the engine's room is: a transfer info the control
	 * thread takes between the two is refused with this reason, not with
	 * the engine's bare "already ended". D ranks the room holds are told
	 * by the engine's final status; one that comes later (parked, or new)
	 * is refused at once. */
	char text[LC_REASON_MAX];
	lc__reason(text, sizeof text, "was cancelled: %s", why);
	pthread_mutex_lock(&s->p->lock);
	mark_ended(s, LC_FAIL_CANCELLED, text);
	lc__prefill_touch(s->p, s->room);
	pthread_mutex_unlock(&s->p->lock);
	int rc = lc_engine_room_cancel(s->p->engine, s->room, why);
	lc__prefill_wake(s->p);
	return rc;
}

void lc_sender_destroy(lc_sender_t *s)
{
	if (!s)
		return;
	lc_prefill_t *p = s->p;
	/* Cancels an unfinished room; -ENOENT once a final status was read. */
	lc_engine_room_close(p->engine, s->room);
	pthread_mutex_lock(&p->lock);
	for (lc_sender_t **pp = &p->senders; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	lc__prefill_stomb_add(p, s, s->ended ? s->end_fail : LC_FAIL_CANCELLED,
			      s->ended ? s->end_reason : "was destroyed before the room finished");
	lc__prefill_touch(p, s->room); /* infos parked before now are refused */
	pthread_mutex_unlock(&p->lock);
	lc__prefill_wake(p);
	free(s);
}
