/* GET /metrics of the bootstrap server: Prometheus text of the server,
 * and of every P rank that publishes its engine and control plane here. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/bootstrap_internal.h"
#include "core/histogram.h"

static const char *const ctl_counter_names[] = {
#define LC__CTL_NAME(name) #name,
	LC__CTL_COUNTERS(LC__CTL_NAME)
#undef LC__CTL_NAME
};

const char *lc__ctl_counter_name(int i)
{
	return i >= 0 && i < LC__CTL_COUNT ? ctl_counter_names[i] : NULL;
}

#ifdef LC__BS_BUILT

static void render_hist(lc__sbuf_t *s, const char *name, const char *labels,
			const lc_histogram_t *h)
{
	uint64_t cum = 0;
	const char *sep = *labels ? "," : "";
	/* Every fourth bucket (exact powers of two of microseconds) keeps the text
	 * short; the cumulative count stays exact at each printed bound. */
	for (int i = 0; i < LC_HIST_BUCKETS - 1; i++) {
		cum += h->buckets[i];
		if (i % 4 == 0 && i <= 4 * 26)
			lc__sb_printf(s, "%s_bucket{%s%sle=\"%.9g\"} %llu\n", name, labels, sep,
				      lc_histogram_bucket_le_us(i) / 1e6, (unsigned long long)cum);
	}
	lc__sb_printf(s, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
		      (unsigned long long)h->count);
	lc__sb_printf(s, "%s_sum{%s} %.9f\n", name, labels, (double)h->sum_ns / 1e9);
	lc__sb_printf(s, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
}

/* What the server itself counts, copied under its lock. */
typedef struct server_counts {
	uint64_t req[CODE_COUNT], puts_ok, puts_refused, puts_invalid, headers_invalid;
	uint64_t puts_conflict, puts_replaced, conns_refused_addr, conns_deadline;
	int registered, world;
} server_counts_t;

/* Snapshots of every source (n of them good), taken with no server lock
 * held; source_remove waits for sources_busy to drop. NULL: no memory. */
static lc__metrics_snapshot_t *snapshot(lc_bootstrap_t *b, server_counts_t *c, int *n)
{
	lc__bs_source_t src[LC__BS_MAX_SOURCES];
	pthread_mutex_lock(&b->lock);
	int nsrc = b->nsources;
	memcpy(src, b->sources, sizeof src);
	b->sources_busy++;
	memcpy(c->req, b->requests, sizeof c->req);
	c->puts_ok = b->puts_ok;
	c->puts_refused = b->puts_refused;
	c->puts_invalid = b->puts_invalid;
	c->headers_invalid = b->headers_invalid;
	c->puts_conflict = b->puts_conflict;
	c->puts_replaced = b->puts_replaced;
	c->conns_refused_addr = b->conns_refused_addr;
	c->conns_deadline = b->conns_deadline;
	c->registered = b->registered;
	c->world = b->world_size;
	pthread_mutex_unlock(&b->lock);

	lc__metrics_snapshot_t *snaps = calloc((size_t)(nsrc ? nsrc : 1), sizeof *snaps);
	*n = 0;
	for (int i = 0; snaps && i < nsrc; i++) {
		snaps[*n].engine.size = sizeof snaps[*n].engine;
		if (src[i].fn(src[i].arg, &snaps[*n]) == 0)
			(*n)++;
	}
	pthread_mutex_lock(&b->lock);
	if (--b->sources_busy == 0)
		pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	return snaps;
}

static void render_server(lc__sbuf_t *s, const server_counts_t *c)
{
	lc__sb_printf(s, "# HELP layercake_bootstrap_requests_total HTTP requests by status.\n"
			 "# TYPE layercake_bootstrap_requests_total counter\n");
	for (int i = 0; i < CODE_COUNT; i++)
		lc__sb_printf(s, "layercake_bootstrap_requests_total{code=\"%s\"} %llu\n",
			      lc__bs_code_label[i], (unsigned long long)c->req[i]);
	lc__sb_printf(s,
		      "# HELP layercake_bootstrap_registrations_total PUT /route outcomes.\n"
		      "# TYPE layercake_bootstrap_registrations_total counter\n"
		      "layercake_bootstrap_registrations_total{outcome=\"accepted\"} %llu\n"
		      "layercake_bootstrap_registrations_total{outcome=\"refused\"} %llu\n"
		      "layercake_bootstrap_registrations_total{outcome=\"invalid\"} %llu\n"
		      "layercake_bootstrap_registrations_total{outcome=\"conflict\"} %llu\n"
		      "layercake_bootstrap_registrations_total{outcome=\"replaced_dead\"} %llu\n",
		      (unsigned long long)c->puts_ok, (unsigned long long)c->puts_refused,
		      (unsigned long long)c->puts_invalid, (unsigned long long)c->puts_conflict,
		      (unsigned long long)c->puts_replaced);
	lc__sb_printf(s,
		      "# HELP layercake_bootstrap_conns_closed_total Connections the server "
		      "refused or closed: over bootstrap_conns_per_addr, past "
		      "bootstrap_request_ms.\n"
		      "# TYPE layercake_bootstrap_conns_closed_total counter\n"
		      "layercake_bootstrap_conns_closed_total{reason=\"per_addr\"} %llu\n"
		      "layercake_bootstrap_conns_closed_total{reason=\"deadline\"} %llu\n",
		      (unsigned long long)c->conns_refused_addr,
		      (unsigned long long)c->conns_deadline);
	lc__sb_printf(s,
		      "# HELP layercake_bootstrap_bad_headers_total Requests refused for their "
		      "headers (duplicate Content-Length, Content-Length with Transfer-Encoding).\n"
		      "# TYPE layercake_bootstrap_bad_headers_total counter\n"
		      "layercake_bootstrap_bad_headers_total %llu\n",
		      (unsigned long long)c->headers_invalid);
	lc__sb_printf(s,
		      "# HELP layercake_bootstrap_ranks Registered P ranks and world size.\n"
		      "# TYPE layercake_bootstrap_ranks gauge\n"
		      "layercake_bootstrap_ranks{kind=\"registered\"} %d\n"
		      "layercake_bootstrap_ranks{kind=\"world\"} %d\n",
		      c->registered, c->world);
}

/* Context counters (the server's own context, then each source's) and
 * control-plane counters. */
static void render_ctl(lc__sbuf_t *s, lc_ctx_t *own, const lc__metrics_snapshot_t *snaps, int n)
{
	if (own || n) {
		lc__sb_printf(s, "# HELP layercake_ctx_counter_total Data-plane counters of a "
				 "context.\n# TYPE layercake_ctx_counter_total counter\n");
		for (int k = -1; k < n; k++) {
			lc_ctx_t *ctx = k < 0 ? own : snaps[k].ctx;
			const char *lab = k < 0 ? "bootstrap" : snaps[k].label;
			if (!ctx)
				continue;
			for (int i = 0; i < lc_counter_count(); i++) {
				uint64_t v = 0;
				lc_ctx_counter(ctx, i, &v); /* i is in range: cannot fail */
				lc__sb_printf(
					s,
					"layercake_ctx_counter_total{rank=\"%s\",name=\"%s\"} "
					"%llu\n",
					lab, lc_counter_name(i), (unsigned long long)v);
			}
		}
	}
	if (!n)
		return;
	lc__sb_printf(s, "# HELP layercake_control_messages_total Control-plane events.\n"
			 "# TYPE layercake_control_messages_total counter\n");
	for (int k = 0; k < n; k++)
		for (int i = 0; i < LC__CTL_COUNT; i++)
			lc__sb_printf(s,
				      "layercake_control_messages_total{rank=\"%s\",event=\"%s\"} "
				      "%llu\n",
				      snaps[k].label, lc__ctl_counter_name(i),
				      (unsigned long long)snaps[k].ctl[i]);
}

/* The engines that publish here: one series each, or one series of zeros
 * (standalone server) when none does. */
typedef struct engines {
	const lc__metrics_snapshot_t *snaps;
	int n, ne;
	lc_engine_metrics_t zero;
	uint64_t zero_failed[LC_FAIL_REASON_COUNT];
} engines_t;

/* Engine k's metrics and label, or NULL to skip k. */
static const lc_engine_metrics_t *engine_at(const engines_t *e, int k, const char **label)
{
	if (e->ne && !e->snaps[k].has_engine)
		return NULL;
	*label = e->ne ? e->snaps[k].label : "";
	return e->ne ? &e->snaps[k].engine : &e->zero;
}

#define FOR_EACH_ENGINE(e, k, m, lab)                                                              \
	for (int k = 0; k < ((e)->ne ? (e)->n : 1); k++)                                           \
		if (((m) = engine_at((e), k, &(lab))))

static void render_rooms(lc__sbuf_t *s, const engines_t *e)
{
	const lc_engine_metrics_t *m;
	const char *lab;
	lc__sb_printf(s, "# HELP layercake_rooms_total Rooms finished, by outcome and reason.\n"
			 "# TYPE layercake_rooms_total counter\n");
	FOR_EACH_ENGINE(e, k, m, lab)
	{
		lc__sb_printf(
			s,
			"layercake_rooms_total{rank=\"%s\",outcome=\"success\",reason=\"none\"} "
			"%llu\n",
			lab, (unsigned long long)m->rooms_succeeded);
		for (int r = 1; r < LC_FAIL_REASON_COUNT; r++)
			lc__sb_printf(
				s,
				"layercake_rooms_total{rank=\"%s\",outcome=\"failed\",reason=\"%s\"} "
				"%llu\n",
				lab, lc_fail_reason_name(r),
				(unsigned long long)(e->ne ? e->snaps[k].failed_by_reason
							   : e->zero_failed)[r]);
	}
	lc__sb_printf(s, "# HELP layercake_rooms_active Rooms open on the engine.\n"
			 "# TYPE layercake_rooms_active gauge\n");
	FOR_EACH_ENGINE(e, k, m, lab)
	{
		lc__sb_printf(s, "layercake_rooms_active{rank=\"%s\"} %llu\n", lab,
			      (unsigned long long)m->rooms_active);
	}
	lc__sb_printf(s, "# HELP layercake_bytes_total Bytes posted and acknowledged.\n"
			 "# TYPE layercake_bytes_total counter\n");
	FOR_EACH_ENGINE(e, k, m, lab)
	{
		lc__sb_printf(s, "layercake_bytes_total{rank=\"%s\",kind=\"posted\"} %llu\n", lab,
			      (unsigned long long)m->bytes_posted);
		lc__sb_printf(s, "layercake_bytes_total{rank=\"%s\",kind=\"acked\"} %llu\n", lab,
			      (unsigned long long)m->bytes_acked);
	}
	lc__sb_printf(s, "# HELP layercake_engine_refused_total Misuse P's engine refused: bad "
			 "arguments, step records no batch reserved, outside counters beyond "
			 "their reservation.\n"
			 "# TYPE layercake_engine_refused_total counter\n");
	FOR_EACH_ENGINE(e, k, m, lab)
	{
		lc__sb_printf(s,
			      "layercake_engine_refused_total{rank=\"%s\",kind=\"bad_input\"} "
			      "%llu\n",
			      lab, (unsigned long long)m->bad_input);
		lc__sb_printf(
			s,
			"layercake_engine_refused_total{rank=\"%s\",kind=\"records_refused\"} "
			"%llu\n",
			lab, (unsigned long long)m->records_refused);
		lc__sb_printf(
			s,
			"layercake_engine_refused_total{rank=\"%s\",kind=\"counter_overruns\"} "
			"%llu\n",
			lab, (unsigned long long)m->counter_overruns);
	}
}

static void render_hists(lc__sbuf_t *s, const engines_t *e)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} hists[] = {
		{"layercake_room_transfer_seconds", "Room open to final status.",
		 offsetof(lc_engine_metrics_t, room_latency)},
		{"layercake_layer_group_ack_seconds", "Layer group posted to acknowledged.",
		 offsetof(lc_engine_metrics_t, group_ack_latency)},
		{"layercake_step_to_post_seconds", "Step ready to layer group posted.",
		 offsetof(lc_engine_metrics_t, step_to_post)},
	};
	const lc_engine_metrics_t *m;
	const char *lab;
	for (size_t h = 0; h < LC__ARRAY_SIZE(hists); h++) {
		lc__sb_printf(s, "# HELP %s %s\n# TYPE %s histogram\n", hists[h].name,
			      hists[h].help, hists[h].name);
		FOR_EACH_ENGINE(e, k, m, lab)
		{
			char labels[80];
			snprintf(labels, sizeof labels, "rank=\"%s\"", lab);
			render_hist(s, hists[h].name, labels,
				    (const lc_histogram_t *)((const char *)m + hists[h].off));
		}
	}
}

int lc__bootstrap_render_metrics(lc_bootstrap_t *b, char **out, size_t *out_len)
{
	lc__sbuf_t s = {0};
	server_counts_t c;
	engines_t e = {0};
	lc__metrics_snapshot_t *snaps = snapshot(b, &c, &e.n);
	if (!snaps)
		return -ENOMEM;
	e.snaps = snaps;
	for (int k = 0; k < e.n; k++)
		e.ne += snaps[k].has_engine;
	render_server(&s, &c);
	render_ctl(&s, b->ctx, snaps, e.n);
	render_rooms(&s, &e);
	render_hists(&s, &e);
	free(snaps);
	if (s.oom) {
		free(s.p);
		return -ENOMEM;
	}
	*out = s.p;
	*out_len = s.len;
	return 0;
}

#else

int lc__bootstrap_render_metrics(lc_bootstrap_t *b, char **out, size_t *len)
{
	return LC_ENOTSUP;
}

#endif
