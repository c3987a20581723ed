/*
 * The bootstrap HTTP server (libmicrohttpd + json-c) and its client
 * (libcurl). The request logic lives in lc__bootstrap_handle so that the
 * fuzzer and the tests can drive it without sockets.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/bootstrap.h"
#include "core/config.h"

#if defined(LC_HAVE_MHD) && defined(LC_HAVE_JSONC) && defined(LC_HAVE_CURL)
#define LC__BS_BUILT 1
#include <arpa/inet.h>
#include <curl/curl.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <netinet/in.h>
#endif

static const char *const ctl_counter_names[] = {
#define LC__CTL_NAME(name) #name,
	LC__CTL_COUNTERS(LC__CTL_NAME)
#undef LC__CTL_NAME
};

const char *lc__ctl_counter_name(int i)
{
	return i >= 0 && i < LC__CTL_COUNT ? ctl_counter_names[i] : NULL;
}

int lc__bootstrap_secret(const char *secret, char *out, size_t cap)
{
	if (secret && *secret) {
		if (strlen(secret) >= cap)
			return -ENAMETOOLONG;
		strcpy(out, secret);
		return 1;
	}
	const char *dir = getenv("LAYERCAKE_SECRET_DIR");
	if (!dir || !*dir)
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/bootstrap.secret", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	char line[LC__BS_SECRET_MAX];
	int rc = 0;
	if (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (*line && strlen(line) < cap) {
			strcpy(out, line);
			rc = 1;
		}
	}
	fclose(f);
	return rc;
}

/* ---- growing string buffer ---- */

typedef struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
} sbuf_t;

static void sb_printf(sbuf_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *s, const char *fmt, ...)
{
	if (s->oom)
		return;
	for (;;) {
		va_list ap;
		size_t room = s->cap - s->len;
		va_start(ap, fmt);
		int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			s->oom = true;
			return;
		}
		if (s->p && (size_t)n < room) {
			s->len += (size_t)n;
			return;
		}
		size_t cap = s->cap ? s->cap * 2 : 4096;
		while (cap < s->len + (size_t)n + 1)
			cap *= 2;
		char *np = realloc(s->p, cap);
		if (!np) {
			s->oom = true;
			return;
		}
		s->p = np;
		s->cap = cap;
	}
}

#ifdef LC__BS_BUILT

/* ==== server ==== */

typedef struct rank_entry {
	bool registered;
	char ip[LC__BS_HOST_MAX];
	int port;
	char key[LC__BS_KEY_MAX];
} rank_entry_t;

typedef struct source {
	int id;
	lc__metrics_source_fn fn;
	void *arg;
} source_t;

#define LC__BS_MAX_SOURCES 64

enum { CODE_2XX, CODE_400, CODE_401, CODE_404, CODE_405, CODE_409, CODE_413, CODE_OTHER,
       CODE_COUNT };
static const char *const code_label[CODE_COUNT] = {"2xx", "400", "401", "404",
						   "405", "409", "413", "other"};

struct lc_bootstrap {
	struct MHD_Daemon *daemon;
	int port;
	char host[LC__BS_HOST_MAX];
	char secret[LC__BS_SECRET_MAX];
	bool has_secret;
	lc_ctx_t *ctx;

	/* lock protects everything below; sources_busy counts /metrics
	 * renders using sources (source_remove waits on cond for 0). */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool configured;
	int world_size, dp_size;
	uint64_t fingerprint;
	uint32_t layers;
	uint32_t nlens;
	uint64_t kv_item_lens[LC__BS_MAX_LENS];
	rank_entry_t *ranks; /* world_size */
	int registered;
	source_t sources[LC__BS_MAX_SOURCES];
	int nsources, next_source_id, sources_busy;
	uint64_t requests[CODE_COUNT];
	uint64_t puts_ok, puts_refused;
};

static int code_index(int http)
{
	switch (http) {
	case 400:
		return CODE_400;
	case 401:
		return CODE_401;
	case 404:
		return CODE_404;
	case 405:
		return CODE_405;
	case 409:
		return CODE_409;
	case 413:
		return CODE_413;
	default:
		return http >= 200 && http < 300 ? CODE_2XX : CODE_OTHER;
	}
}

static int reply_text(char **resp, size_t *len, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int reply_text(char **resp, size_t *len, int code, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	*resp = strdup(buf);
	*len = *resp ? strlen(*resp) : 0;
	return code;
}

static int reply_json(char **resp, size_t *len, json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	*resp = strdup(s ? s : "{}");
	*len = *resp ? strlen(*resp) : 0;
	json_object_put(o);
	return 200;
}

/* Strict integer field: present, an int, in [lo, hi]. */
static int json_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
		    char *why, size_t cap)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v)) {
		snprintf(why, cap, "missing field \"%s\"", key);
		return -1;
	}
	if (!json_object_is_type(v, json_type_int)) {
		snprintf(why, cap, "field \"%s\" is not an integer", key);
		return -1;
	}
	errno = 0;
	int64_t x = json_object_get_int64(v);
	if (errno || x < lo || x > hi) {
		snprintf(why, cap, "field \"%s\" out of range [%lld, %lld]", key, (long long)lo,
			 (long long)hi);
		return -1;
	}
	*out = x;
	return 0;
}

static const char *json_str(json_object *o, const char *key, bool required, size_t max,
			    char *why, size_t cap)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v)) {
		if (required)
			snprintf(why, cap, "missing field \"%s\"", key);
		return required ? NULL : "";
	}
	if (!json_object_is_type(v, json_type_string)) {
		snprintf(why, cap, "field \"%s\" is not a string", key);
		return NULL;
	}
	const char *s = json_object_get_string(v);
	if (strlen(s) >= max || (required && !*s)) {
		snprintf(why, cap, "field \"%s\" empty or longer than %zu", key, max - 1);
		return NULL;
	}
	return s;
}

static bool auth_ok(const lc_bootstrap_t *b, const char *auth)
{
	if (!b->has_secret)
		return true;
	if (!auth || strncmp(auth, "Bearer ", 7))
		return false;
	const char *given = auth + 7;
	size_t n = strlen(b->secret), m = strlen(given);
	unsigned diff = (unsigned)(n ^ m);
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned)(b->secret[i] ^ (i < m ? given[i] : 0));
	return diff == 0;
}

static int handle_put(lc_bootstrap_t *b, const char *auth, const char *body, size_t body_len,
		      char **resp, size_t *resp_len)
{
	char why[256] = "";
	int64_t world, dp, rank, port, fp_layers = 0;
	if (!auth_ok(b, auth))
		return reply_text(resp, resp_len, 401, "authentication required");
	if (body_len > LC__BS_BODY_MAX)
		return reply_text(resp, resp_len, 413, "body over %u bytes", LC__BS_BODY_MAX);
	if (!body_len)
		return reply_text(resp, resp_len, 400, "empty body");
	json_tokener *tok = json_tokener_new_ex(32);
	if (!tok)
		return reply_text(resp, resp_len, 500, "out of memory");
	json_object *o = json_tokener_parse_ex(tok, body, (int)body_len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success || used != body_len) {
		json_object_put(o);
		return reply_text(resp, resp_len, 400, "malformed JSON: %s",
				  jerr != json_tokener_success ? json_tokener_error_desc(jerr)
							       : "trailing data");
	}
	int code = 400;
	const char *role, *ip, *key, *fp;
	json_object *lens;
	uint64_t fingerprint = 0;
	uint64_t item_lens[LC__BS_MAX_LENS];
	size_t nlens = 0;
	if (!json_object_is_type(o, json_type_object)) {
		snprintf(why, sizeof why, "body is not a JSON object");
		goto refuse;
	}
	if (!(role = json_str(o, "role", true, 32, why, sizeof why)))
		goto refuse;
	if (strcmp(role, "Prefill")) {
		snprintf(why, sizeof why, "role \"%s\" is not \"Prefill\"", role);
		goto refuse;
	}
	if (json_int(o, "world_size", 1, LC__BS_MAX_WORLD, &world, why, sizeof why) ||
	    json_int(o, "dp_size", 1, LC__BS_MAX_WORLD, &dp, why, sizeof why) ||
	    json_int(o, "engine_rank", 0, LC__BS_MAX_WORLD - 1, &rank, why, sizeof why) ||
	    json_int(o, "rank_port", 1, 65535, &port, why, sizeof why))
		goto refuse;
	if (world % dp) {
		snprintf(why, sizeof why, "dp_size %lld does not divide world_size %lld",
			 (long long)dp, (long long)world);
		goto refuse;
	}
	if (rank >= world) {
		snprintf(why, sizeof why, "engine_rank %lld outside world_size %lld",
			 (long long)rank, (long long)world);
		goto refuse;
	}
	if (!(ip = json_str(o, "rank_ip", true, LC__BS_HOST_MAX, why, sizeof why)) ||
	    !(key = json_str(o, "curve_public_key", false, LC__BS_KEY_MAX, why, sizeof why)) ||
	    !(fp = json_str(o, "layout_fingerprint", false, 32, why, sizeof why)))
		goto refuse;
	if (*fp) {
		char *end;
		errno = 0;
		fingerprint = strtoull(fp, &end, 16);
		if (errno || *end || end == fp) {
			snprintf(why, sizeof why, "layout_fingerprint \"%s\" is not hex", fp);
			goto refuse;
		}
	}
	if (json_object_object_get_ex(o, "layers", NULL) &&
	    json_int(o, "layers", 0, 1 << 20, &fp_layers, why, sizeof why))
		goto refuse;
	if (json_object_object_get_ex(o, "kv_item_lens", &lens)) {
		if (!json_object_is_type(lens, json_type_array) ||
		    json_object_array_length(lens) > LC__BS_MAX_LENS) {
			snprintf(why, sizeof why, "kv_item_lens is not an array of at most %u",
				 LC__BS_MAX_LENS);
			goto refuse;
		}
		nlens = json_object_array_length(lens);
		for (size_t i = 0; i < nlens; i++) {
			json_object *v = json_object_array_get_idx(lens, i);
			errno = 0;
			int64_t x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
									 : -1;
			if (x <= 0 || errno) {
				snprintf(why, sizeof why, "kv_item_lens[%zu] is not a positive integer",
					 i);
				goto refuse;
			}
			item_lens[i] = (uint64_t)x;
		}
	}

	pthread_mutex_lock(&b->lock);
	if (!b->configured) {
		b->ranks = calloc((size_t)world, sizeof *b->ranks);
		if (!b->ranks) {
			pthread_mutex_unlock(&b->lock);
			code = 500;
			snprintf(why, sizeof why, "out of memory");
			goto refuse;
		}
		b->configured = true;
		b->world_size = (int)world;
		b->dp_size = (int)dp;
		b->fingerprint = fingerprint;
		b->layers = (uint32_t)fp_layers;
		b->nlens = (uint32_t)nlens;
		memcpy(b->kv_item_lens, item_lens, nlens * sizeof *item_lens);
	} else if (b->world_size != world || b->dp_size != dp) {
		/* TokenSpeed kept the first PUT silently; a mismatch is a bug. */
		snprintf(why, sizeof why,
			 "parallel layout differs from the registered one: world_size %lld dp_size "
			 "%lld, registered %d and %d",
			 (long long)world, (long long)dp, b->world_size, b->dp_size);
		code = 409;
	} else if (b->fingerprint != fingerprint || b->nlens != nlens ||
		   memcmp(b->kv_item_lens, item_lens, nlens * sizeof *item_lens)) {
		snprintf(why, sizeof why,
			 "page geometry differs from the registered ranks' (fingerprint %016llx, "
			 "registered %016llx)",
			 (unsigned long long)fingerprint, (unsigned long long)b->fingerprint);
		code = 409;
	}
	if (code == 409) {
		b->puts_refused++;
		pthread_mutex_unlock(&b->lock);
		goto refuse;
	}
	rank_entry_t *e = &b->ranks[rank];
	if (!e->registered)
		b->registered++;
	e->registered = true;
	snprintf(e->ip, sizeof e->ip, "%s", ip);
	e->port = (int)port;
	snprintf(e->key, sizeof e->key, "%s", key);
	b->puts_ok++;
	pthread_mutex_unlock(&b->lock);
	json_object_put(o);
	LC_INFO("bootstrap: rank %lld registered at %s:%lld", (long long)rank, ip,
		(long long)port);
	return reply_text(resp, resp_len, 200, "OK");
refuse:
	json_object_put(o);
	LC_WARN("bootstrap: PUT /route refused (%d): %s", code, why);
	return reply_text(resp, resp_len, code, "%s", why);
}

/* Parse a decimal int query parameter; -1 missing, -2 malformed. */
static int query_int(const char *query, const char *key, long *out)
{
	size_t klen = strlen(key);
	for (const char *p = query; p && *p;) {
		const char *amp = strchr(p, '&');
		size_t n = amp ? (size_t)(amp - p) : strlen(p);
		if (n > klen && !strncmp(p, key, klen) && p[klen] == '=') {
			char val[32];
			size_t vn = n - klen - 1;
			if (!vn || vn >= sizeof val)
				return -2;
			memcpy(val, p + klen + 1, vn);
			val[vn] = '\0';
			char *end;
			errno = 0;
			long v = strtol(val, &end, 10);
			if (errno || *end)
				return -2;
			*out = v;
			return 0;
		}
		p = amp ? amp + 1 : NULL;
	}
	return -1;
}

static int handle_get_route(lc_bootstrap_t *b, const char *query, char **resp, size_t *len)
{
	long er = 0, g = 0;
	int a = query_int(query, "engine_rank", &er), c = query_int(query, "target_dp_group", &g);
	if (a == -1 || c == -1)
		return reply_text(resp, len, 400, "missing engine_rank or target_dp_group");
	if (a == -2 || c == -2)
		return reply_text(resp, len, 400, "engine_rank and target_dp_group must be integers");
	pthread_mutex_lock(&b->lock);
	if (!b->configured) {
		pthread_mutex_unlock(&b->lock);
		return reply_text(resp, len, 404, "no prefill rank registered yet");
	}
	if (er == -1 && g == -1) {
		json_object *o = json_object_new_object();
		json_object *lens = json_object_new_array();
		json_object *units = json_object_new_array();
		for (uint32_t i = 0; i < b->nlens; i++) {
			json_object_array_add(lens, json_object_new_int64((int64_t)b->kv_item_lens[i]));
			json_object_array_add(units, json_object_new_int64(1));
		}
		char fp[32];
		snprintf(fp, sizeof fp, "%016llx", (unsigned long long)b->fingerprint);
		json_object_object_add(o, "prefill_tp_size", json_object_new_int(b->world_size));
		json_object_object_add(o, "prefill_dp_size", json_object_new_int(b->dp_size));
		json_object_object_add(o, "enable_mla_l1_5_cache", json_object_new_boolean(0));
		json_object_object_add(o, "kv_item_lens", lens);
		json_object_object_add(o, "kv_unit_lens", units);
		json_object_object_add(o, "state_item_lens", json_object_new_array());
		json_object_object_add(o, "state_unit_lens", json_object_new_array());
		json_object_object_add(o, "layout_fingerprint", json_object_new_string(fp));
		json_object_object_add(o, "layers", json_object_new_int((int)b->layers));
		json_object_object_add(o, "registered_ranks", json_object_new_int(b->registered));
		pthread_mutex_unlock(&b->lock);
		return reply_json(resp, len, o);
	}
	int tp_per_dp = b->world_size / b->dp_size;
	if (er < 0 || g < 0) {
		pthread_mutex_unlock(&b->lock);
		return reply_text(resp, len, 400, "engine_rank and target_dp_group must be >= 0 "
						  "(or both -1)");
	}
	if (er >= tp_per_dp || g >= b->dp_size || !b->ranks[g * tp_per_dp + er].registered) {
		pthread_mutex_unlock(&b->lock);
		return reply_text(resp, len, 404, "unknown rank: engine_rank %ld of dp group %ld",
				  er, g);
	}
	rank_entry_t e = b->ranks[g * tp_per_dp + er];
	pthread_mutex_unlock(&b->lock);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "rank_ip", json_object_new_string(e.ip));
	json_object_object_add(o, "rank_port", json_object_new_int(e.port));
	if (e.key[0])
		json_object_object_add(o, "curve_public_key", json_object_new_string(e.key));
	return reply_json(resp, len, o);
}

/* ---- /metrics ---- */

static void render_hist(sbuf_t *s, const char *name, const char *labels,
			const lc_histogram_t *h)
{
	uint64_t cum = 0;
	const char *sep = *labels ? "," : "";
	/* Every fourth bucket (exact powers of two of microseconds) keeps the text
	 * short; the cumulative count stays exact at each printed bound. */
	for (int i = 0; i < LC_HIST_BUCKETS - 1; i++) {
		cum += h->buckets[i];
		if (i % 4 == 0 && i <= 4 * 26)
			sb_printf(s, "%s_bucket{%s%sle=\"%.9g\"} %llu\n", name, labels, sep,
				  lc_histogram_bucket_le_us(i) / 1e6, (unsigned long long)cum);
	}
	sb_printf(s, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
		  (unsigned long long)h->count);
	sb_printf(s, "%s_sum{%s} %.9f\n", name, labels, (double)h->sum_ns / 1e9);
	sb_printf(s, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
}

int lc__bootstrap_render_metrics(lc_bootstrap_t *b, char **out, size_t *out_len)
{
	sbuf_t s = {0};
	lc__metrics_snapshot_t *snaps = NULL;
	int n = 0;
	uint64_t req[CODE_COUNT], puts_ok, puts_refused;
	int registered, world;

	pthread_mutex_lock(&b->lock);
	source_t src[LC__BS_MAX_SOURCES];
	int nsrc = b->nsources;
	memcpy(src, b->sources, sizeof src);
	b->sources_busy++;
	memcpy(req, b->requests, sizeof req);
	puts_ok = b->puts_ok;
	puts_refused = b->puts_refused;
	registered = b->registered;
	world = b->world_size;
	pthread_mutex_unlock(&b->lock);

	snaps = calloc((size_t)(nsrc ? nsrc : 1), sizeof *snaps);
	for (int i = 0; snaps && i < nsrc; i++) {
		snaps[n].engine.size = sizeof snaps[n].engine;
		if (src[i].fn(src[i].arg, &snaps[n]) == 0)
			n++;
	}
	pthread_mutex_lock(&b->lock);
	if (--b->sources_busy == 0)
		pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	if (!snaps)
		return -ENOMEM;

	sb_printf(&s, "# HELP layercake_bootstrap_requests_total HTTP requests by status.\n"
		      "# TYPE layercake_bootstrap_requests_total counter\n");
	for (int i = 0; i < CODE_COUNT; i++)
		sb_printf(&s, "layercake_bootstrap_requests_total{code=\"%s\"} %llu\n",
			  code_label[i], (unsigned long long)req[i]);
	sb_printf(&s, "# HELP layercake_bootstrap_registrations_total PUT /route outcomes.\n"
		      "# TYPE layercake_bootstrap_registrations_total counter\n"
		      "layercake_bootstrap_registrations_total{outcome=\"accepted\"} %llu\n"
		      "layercake_bootstrap_registrations_total{outcome=\"refused\"} %llu\n",
		  (unsigned long long)puts_ok, (unsigned long long)puts_refused);
	sb_printf(&s, "# HELP layercake_bootstrap_ranks Registered P ranks and world size.\n"
		      "# TYPE layercake_bootstrap_ranks gauge\n"
		      "layercake_bootstrap_ranks{kind=\"registered\"} %d\n"
		      "layercake_bootstrap_ranks{kind=\"world\"} %d\n",
		  registered, world);

	/* Context counters: the server's own context, then each source's. */
	if (b->ctx || n) {
		sb_printf(&s, "# HELP layercake_ctx_counter_total Data-plane counters of a "
			      "context.\n# TYPE layercake_ctx_counter_total counter\n");
		for (int k = -1; k < n; k++) {
			lc_ctx_t *ctx = k < 0 ? b->ctx : snaps[k].ctx;
			const char *lab = k < 0 ? "bootstrap" : snaps[k].label;
			if (!ctx)
				continue;
			for (int i = 0; i < lc_counter_count(); i++)
				sb_printf(&s, "layercake_ctx_counter_total{rank=\"%s\",name=\"%s\"} %llu\n",
					  lab, lc_counter_name(i),
					  (unsigned long long)lc_ctx_counter(ctx, i));
		}
	}
	if (n) {
		sb_printf(&s, "# HELP layercake_control_messages_total Control-plane events.\n"
			      "# TYPE layercake_control_messages_total counter\n");
		for (int k = 0; k < n; k++)
			for (int i = 0; i < LC__CTL_COUNT; i++)
				sb_printf(&s,
					  "layercake_control_messages_total{rank=\"%s\",event=\"%s\"} "
					  "%llu\n",
					  snaps[k].label, ctl_counter_names[i],
					  (unsigned long long)snaps[k].ctl[i]);
	}

	/* Rooms by outcome and the transfer latency histogram: one series per
	 * engine, or zeros when no engine publishes here (standalone server). */
	lc_engine_metrics_t zero;
	memset(&zero, 0, sizeof zero);
	int ne = 0;
	for (int k = 0; k < n; k++)
		ne += snaps[k].has_engine;
	sb_printf(&s, "# HELP layercake_rooms_total Rooms finished, by outcome and reason.\n"
		      "# TYPE layercake_rooms_total counter\n");
	for (int k = 0; k < (ne ? n : 1); k++) {
		if (ne && !snaps[k].has_engine)
			continue;
		const lc_engine_metrics_t *m = ne ? &snaps[k].engine : &zero;
		char lab[96];
		snprintf(lab, sizeof lab, "rank=\"%s\",", ne ? snaps[k].label : "");
		sb_printf(&s, "layercake_rooms_total{%soutcome=\"success\",reason=\"none\"} %llu\n",
			  lab, (unsigned long long)m->rooms_succeeded);
		for (int r = 1; r < LC_FAIL_REASON_COUNT; r++)
			sb_printf(&s, "layercake_rooms_total{%soutcome=\"failed\",reason=\"%s\"} %llu\n",
				  lab, lc_fail_reason_name(r),
				  (unsigned long long)m->rooms_failed_by_reason[r]);
	}
	sb_printf(&s, "# HELP layercake_rooms_active Rooms open on the engine.\n"
		      "# TYPE layercake_rooms_active gauge\n");
	for (int k = 0; k < (ne ? n : 1); k++) {
		if (ne && !snaps[k].has_engine)
			continue;
		sb_printf(&s, "layercake_rooms_active{rank=\"%s\"} %llu\n", ne ? snaps[k].label : "",
			  (unsigned long long)(ne ? snaps[k].engine.rooms_active : 0));
	}
	sb_printf(&s, "# HELP layercake_bytes_total Bytes posted and acknowledged.\n"
		      "# TYPE layercake_bytes_total counter\n");
	for (int k = 0; k < (ne ? n : 1); k++) {
		if (ne && !snaps[k].has_engine)
			continue;
		const lc_engine_metrics_t *m = ne ? &snaps[k].engine : &zero;
		const char *lab = ne ? snaps[k].label : "";
		sb_printf(&s, "layercake_bytes_total{rank=\"%s\",kind=\"posted\"} %llu\n", lab,
			  (unsigned long long)m->bytes_posted);
		sb_printf(&s, "layercake_bytes_total{rank=\"%s\",kind=\"acked\"} %llu\n", lab,
			  (unsigned long long)m->bytes_acked);
	}
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
	for (size_t h = 0; h < LC__ARRAY_SIZE(hists); h++) {
		sb_printf(&s, "# HELP %s %s\n# TYPE %s histogram\n", hists[h].name, hists[h].help,
			  hists[h].name);
		for (int k = 0; k < (ne ? n : 1); k++) {
			if (ne && !snaps[k].has_engine)
				continue;
			const lc_engine_metrics_t *m = ne ? &snaps[k].engine : &zero;
			char lab[80];
			snprintf(lab, sizeof lab, "rank=\"%s\"", ne ? snaps[k].label : "");
			render_hist(&s, hists[h].name, lab,
				    (const lc_histogram_t *)((const char *)m + hists[h].off));
		}
	}
	free(snaps);
	if (s.oom) {
		free(s.p);
		return -ENOMEM;
	}
	*out = s.p;
	*out_len = s.len;
	return 0;
}

int lc__bootstrap_handle(lc_bootstrap_t *b, const char *method, const char *path,
			 const char *query, const char *auth, const char *body, size_t body_len,
			 char **resp, size_t *resp_len)
{
	int code;
	*resp = NULL;
	*resp_len = 0;
	if (!method || !path) {
		code = reply_text(resp, resp_len, 400, "bad request");
	} else if (!strcmp(path, "/route")) {
		if (!strcmp(method, "PUT"))
			code = handle_put(b, auth, body, body_len, resp, resp_len);
		else if (!strcmp(method, "GET"))
			code = handle_get_route(b, query, resp, resp_len);
		else
			code = reply_text(resp, resp_len, 405, "method %.16s not allowed on /route",
					  method);
	} else if (!strcmp(path, "/health")) {
		code = !strcmp(method, "GET") || !strcmp(method, "HEAD")
			       ? reply_text(resp, resp_len, 200, "OK")
			       : reply_text(resp, resp_len, 405, "method not allowed on /health");
	} else if (!strcmp(path, "/metrics")) {
		if (strcmp(method, "GET"))
			code = reply_text(resp, resp_len, 405, "method not allowed on /metrics");
		else if (lc__bootstrap_render_metrics(b, resp, resp_len))
			code = reply_text(resp, resp_len, 500, "out of memory");
		else
			code = 200;
	} else {
		code = reply_text(resp, resp_len, 404, "no such route");
	}
	pthread_mutex_lock(&b->lock);
	b->requests[code_index(code)]++;
	pthread_mutex_unlock(&b->lock);
	return code;
}

/* ---- libmicrohttpd glue ---- */

typedef struct conn_state {
	char *body;
	size_t len;
	bool too_big;
} conn_state_t;

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	sbuf_t *q = cls;
	sb_printf(q, "%s%s=%s", q->len ? "&" : "", key, value ? value : "");
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	lc_bootstrap_t *b = cls;
	conn_state_t *st = *con_cls;
	if (!st) {
		st = calloc(1, sizeof *st);
		if (!st)
			return MHD_NO;
		*con_cls = st;
		/* Refuse a declared oversize body before reading it. */
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > LC__BS_BODY_MAX)
			st->too_big = true;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!st->too_big && st->len + *upload_size <= LC__BS_BODY_MAX) {
			char *nb = realloc(st->body, st->len + *upload_size + 1);
			if (!nb)
				return MHD_NO;
			st->body = nb;
			memcpy(st->body + st->len, upload, *upload_size);
			st->len += *upload_size;
			st->body[st->len] = '\0';
		} else {
			st->too_big = true;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	char *resp = NULL;
	size_t resp_len = 0;
	int code;
	if (st->too_big) {
		code = reply_text(&resp, &resp_len, 413, "body over %u bytes", LC__BS_BODY_MAX);
		pthread_mutex_lock(&b->lock);
		b->requests[CODE_413]++;
		pthread_mutex_unlock(&b->lock);
	} else {
		sbuf_t q = {0};
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_query, &q);
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							       MHD_HTTP_HEADER_AUTHORIZATION);
		code = lc__bootstrap_handle(b, method, url, q.oom ? NULL : q.p, auth, st->body,
					    st->len, &resp, &resp_len);
		free(q.p);
	}
	struct MHD_Response *r =
		MHD_create_response_from_buffer(resp_len, resp ? resp : (char *)"",
						resp ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(resp);
		return MHD_NO;
	}
	const char *ctype = "text/plain; charset=utf-8";
	if (resp && resp[0] == '{')
		ctype = "application/json";
	else if (!strcmp(url, "/metrics") && code == 200)
		ctype = "text/plain; version=0.0.4; charset=utf-8";
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (st->too_big)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, r);
	MHD_destroy_response(r);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	conn_state_t *st = *con_cls;
	if (st) {
		free(st->body);
		free(st);
		*con_cls = NULL;
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	LC_DEBUG("bootstrap http: %s", line);
}

int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out)
{
	lc_bootstrap_params_t p = {0};
	if (!out)
		return -EINVAL;
	p.port = -1;
	if (params)
		memcpy(&p, params, LC__MIN(params->size ? params->size : sizeof p, sizeof p));
	if (p.port < -1 || p.port > 65535)
		return -EINVAL;
	lc_bootstrap_t *b = calloc(1, sizeof *b);
	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	b->ctx = p.ctx;
	snprintf(b->host, sizeof b->host, "%s", p.host && *p.host ? p.host : "0.0.0.0");
	int rc = lc__bootstrap_secret(p.secret, b->secret, sizeof b->secret);
	if (rc < 0) {
		LC_ERROR("bootstrap: cannot read the secret: %s", strerror(-rc));
		goto fail;
	}
	b->has_secret = rc == 1;
	int port = p.port;
	if (port < 0) {
		int64_t v = 8998;
		if (p.ctx)
			lc_ctx_config_get_int(p.ctx, "bootstrap_port", &v);
		else if (getenv("LAYERCAKE_BOOTSTRAP_PORT"))
			v = strtol(getenv("LAYERCAKE_BOOTSTRAP_PORT"), NULL, 10);
		port = (int)v;
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, b->host, &sa.sin_addr) != 1) {
		LC_ERROR("bootstrap: bind address '%s' is not an IPv4 address", b->host);
		rc = -EINVAL;
		goto fail;
	}
	b->daemon = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_POLL, (uint16_t)port,
		NULL, NULL, on_request, b, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, b, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024), MHD_OPTION_EXTERNAL_LOGGER,
		mhd_log, NULL, MHD_OPTION_END);
	if (!b->daemon) {
		rc = errno ? -errno : -EADDRINUSE;
		LC_ERROR("bootstrap: cannot listen on %s:%d: %s", b->host, port, strerror(-rc));
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(b->daemon, MHD_DAEMON_INFO_BIND_PORT);
	b->port = di ? di->port : port;
	LC_INFO("bootstrap: listening on %s:%d%s", b->host, b->port,
		b->has_secret ? " (PUT needs the secret)" : "");
	*out = b;
	return 0;
fail:
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b);
	return rc;
}

void lc_bootstrap_stop(lc_bootstrap_t *b)
{
	if (!b)
		return;
	MHD_stop_daemon(b->daemon);
	free(b->ranks);
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

int lc__bootstrap_source_add(lc_bootstrap_t *b, lc__metrics_source_fn fn, void *arg)
{
	int id = -ENOSPC;
	pthread_mutex_lock(&b->lock);
	if (b->nsources < LC__BS_MAX_SOURCES) {
		id = ++b->next_source_id;
		b->sources[b->nsources++] = (source_t){.id = id, .fn = fn, .arg = arg};
	}
	pthread_mutex_unlock(&b->lock);
	return id;
}

void lc__bootstrap_source_remove(lc_bootstrap_t *b, int id)
{
	pthread_mutex_lock(&b->lock);
	for (int i = 0; i < b->nsources; i++)
		if (b->sources[i].id == id) {
			b->sources[i] = b->sources[--b->nsources];
			break;
		}
	while (b->sources_busy)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

/* ==== client ==== */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct body_sink {
	sbuf_t s;
	bool too_big;
} body_sink_t;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	body_sink_t *b = arg;
	size_t len = size * n;
	if (b->s.len + len > (1u << 20)) {
		b->too_big = true;
		return 0;
	}
	sb_printf(&b->s, "%.*s", (int)len, data);
	return b->s.oom ? 0 : len;
}

int lc__http_request(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len)
{
	pthread_once(&curl_once, curl_init_once);
	CURL *c = curl_easy_init();
	if (!c)
		return -ENOMEM;
	body_sink_t sink = {0};
	struct curl_slist *hdr = NULL;
	char authbuf[LC__BS_SECRET_MAX + 32];
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
	}
	if (!strcmp(method, "HEAD"))
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	hdr = curl_slist_append(hdr, "Expect:");
	if (auth) {
		snprintf(authbuf, sizeof authbuf, "Authorization: Bearer %s", auth);
		hdr = curl_slist_append(hdr, authbuf);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	CURLcode cc = curl_easy_perform(c);
	long status = 0;
	int rc;
	if (cc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		rc = (int)status;
	} else {
		LC_DEBUG("http %s %s: %s", method, url, curl_easy_strerror(cc));
		rc = cc == CURLE_OPERATION_TIMEDOUT ? LC_ETIMEDOUT : LC_ERR_UNREACHABLE;
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	if (rc > 0 && resp) {
		if (!sink.s.p)
			sb_printf(&sink.s, "%s", "");
		*resp = sink.s.p;
		*resp_len = sink.s.len;
	} else {
		free(sink.s.p);
	}
	return rc;
}

/* One request with bounded retries (connection errors and 5xx). */
static int http_retry(const char *method, const char *addr, const char *path_query,
		      const char *body, const lc__http_opts_t *o, char **resp, size_t *resp_len)
{
	char url[LC__BS_HOST_MAX + 256];
	const char *hostport = !strncmp(addr, "http://", 7) ? addr + 7 : addr;
	snprintf(url, sizeof url, "http://%s%s", hostport, path_query);
	int timeout = o && o->timeout_ms > 0 ? o->timeout_ms : 2000;
	int retries = o && o->retries >= 0 ? LC__MIN(o->retries, 20) : 2;
	unsigned pause_ms = 50;
	int rc = LC_ERR_UNREACHABLE;
	for (int attempt = 0; attempt <= retries; attempt++) {
		if (attempt) {
			usleep(pause_ms * 1000);
			pause_ms = LC__MIN(pause_ms * 2, 1000u);
		}
		*resp = NULL;
		rc = lc__http_request(method, url, body, body ? strlen(body) : 0,
				      o ? o->secret : NULL, timeout, resp, resp_len);
		if (rc > 0 && rc < 500)
			return rc;
		if (rc > 0 && attempt < retries)
			free(*resp);
	}
	return rc;
}

static int http_error(int code, const char *what, const char *resp, char *why, size_t cap)
{
	if (why && cap) {
		if (code < 0)
			snprintf(why, cap, "%s: %s", what, lc_strerror(code));
		else
			snprintf(why, cap, "%s: HTTP %d: %.200s", what, code, resp ? resp : "");
	}
	if (code < 0)
		return code == LC_ETIMEDOUT ? LC_ERR_UNREACHABLE : code;
	if (code == 401)
		return LC_ERR_AUTH;
	if (code == 404)
		return -ENOENT;
	return LC_ERR_BOOTSTRAP;
}

int lc__bootstrap_register(const char *addr, const lc__prefill_info_t *info,
			   const lc__http_opts_t *o, char *why, size_t why_cap)
{
	json_object *j = json_object_new_object();
	json_object *lens = json_object_new_array();
	if (!j || !lens) {
		json_object_put(j);
		json_object_put(lens);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < info->nlens; i++)
		json_object_array_add(lens, json_object_new_int64((int64_t)info->kv_item_lens[i]));
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", (unsigned long long)info->fingerprint);
	json_object_object_add(j, "role", json_object_new_string("Prefill"));
	json_object_object_add(j, "world_size", json_object_new_int(info->world_size));
	json_object_object_add(j, "dp_size", json_object_new_int(info->dp_size));
	json_object_object_add(j, "rank_ip", json_object_new_string(info->rank_ip));
	json_object_object_add(j, "rank_port", json_object_new_int(info->rank_port));
	json_object_object_add(j, "engine_rank", json_object_new_int(info->engine_rank));
	json_object_object_add(j, "enable_mla_l1_5_cache", json_object_new_boolean(0));
	json_object_object_add(j, "kv_item_lens", lens);
	json_object_object_add(j, "layout_fingerprint", json_object_new_string(fp));
	json_object_object_add(j, "layers", json_object_new_int((int)info->layers));
	if (info->curve_key[0])
		json_object_object_add(j, "curve_public_key",
				       json_object_new_string(info->curve_key));
	char *body = strdup(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN));
	json_object_put(j);
	if (!body)
		return -ENOMEM;
	char *resp = NULL;
	size_t len = 0;
	int code = http_retry("PUT", addr, "/route", body, o, &resp, &len);
	free(body);
	int rc = code == 200 ? 0 : http_error(code, "PUT /route", resp, why, why_cap);
	free(resp);
	return rc;
}

static json_object *parse_obj(const char *s, size_t len)
{
	json_tokener *tok = json_tokener_new_ex(16);
	if (!tok)
		return NULL;
	json_object *o = json_tokener_parse_ex(tok, s, (int)len);
	if (json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

int lc__bootstrap_get_parallel(const char *addr, const lc__http_opts_t *o,
			       lc__parallel_info_t *out, char *why, size_t why_cap)
{
	char *resp = NULL;
	size_t len = 0;
	int code = http_retry("GET", addr, "/route?engine_rank=-1&target_dp_group=-1", NULL, o,
			      &resp, &len);
	if (code != 200) {
		int rc = http_error(code, "GET /route (parallel info)", resp, why, why_cap);
		free(resp);
		return rc;
	}
	json_object *j = parse_obj(resp, len);
	free(resp);
	int64_t w, d, reg = 0, layers = 0;
	char tmp[128];
	const char *fp;
	json_object *lens;
	int rc = LC_ERR_BOOTSTRAP;
	if (!j || json_int(j, "prefill_tp_size", 1, LC__BS_MAX_WORLD, &w, tmp, sizeof tmp) ||
	    json_int(j, "prefill_dp_size", 1, LC__BS_MAX_WORLD, &d, tmp, sizeof tmp) || w % d)
		goto bad;
	json_int(j, "registered_ranks", 0, LC__BS_MAX_WORLD, &reg, tmp, sizeof tmp);
	json_int(j, "layers", 0, 1 << 20, &layers, tmp, sizeof tmp);
	out->world_size = (int)w;
	out->dp_size = (int)d;
	out->registered = (int)reg;
	out->layers = (uint32_t)layers;
	out->fingerprint = 0;
	out->nlens = 0;
	if ((fp = json_str(j, "layout_fingerprint", false, 32, tmp, sizeof tmp)) && *fp)
		out->fingerprint = strtoull(fp, NULL, 16);
	if (json_object_object_get_ex(j, "kv_item_lens", &lens) &&
	    json_object_is_type(lens, json_type_array)) {
		size_t n = LC__MIN(json_object_array_length(lens), (size_t)LC__BS_MAX_LENS);
		for (size_t i = 0; i < n; i++)
			out->kv_item_lens[i] =
				(uint64_t)json_object_get_int64(json_object_array_get_idx(lens, i));
		out->nlens = (uint32_t)n;
	}
	rc = 0;
bad:
	if (rc && why && why_cap)
		snprintf(why, why_cap, "GET /route (parallel info): malformed reply");
	json_object_put(j);
	return rc;
}

int lc__bootstrap_get_rank(const char *addr, int tp_rank, int dp_group, const lc__http_opts_t *o,
			   lc__rank_info_t *out, char *why, size_t why_cap)
{
	char path[96], tmp[128];
	snprintf(path, sizeof path, "/route?engine_rank=%d&target_dp_group=%d", tp_rank, dp_group);
	char *resp = NULL;
	size_t len = 0;
	int code = http_retry("GET", addr, path, NULL, o, &resp, &len);
	if (code != 200) {
		int rc = http_error(code, "GET /route (rank)", resp, why, why_cap);
		free(resp);
		return rc;
	}
	json_object *j = parse_obj(resp, len);
	free(resp);
	int64_t port;
	const char *ip, *key;
	int rc = LC_ERR_BOOTSTRAP;
	if (j && (ip = json_str(j, "rank_ip", true, LC__BS_HOST_MAX, tmp, sizeof tmp)) &&
	    !json_int(j, "rank_port", 1, 65535, &port, tmp, sizeof tmp) &&
	    (key = json_str(j, "curve_public_key", false, LC__BS_KEY_MAX, tmp, sizeof tmp))) {
		snprintf(out->rank_ip, sizeof out->rank_ip, "%s", ip);
		out->rank_port = (int)port;
		snprintf(out->curve_key, sizeof out->curve_key, "%s", key);
		rc = 0;
	} else if (why && why_cap) {
		snprintf(why, why_cap, "GET %s: malformed reply", path);
	}
	json_object_put(j);
	return rc;
}

int lc__bootstrap_health(const char *addr, const lc__http_opts_t *o)
{
	char *resp = NULL;
	size_t len = 0;
	lc__http_opts_t once = {.timeout_ms = o ? o->timeout_ms : 2000, .retries = 0};
	int code = http_retry("GET", addr, "/health", NULL, &once, &resp, &len);
	free(resp);
	return code == 200 ? 0 : code < 0 ? code : LC_ERR_BOOTSTRAP;
}

#else /* built without libmicrohttpd, json-c or libcurl */

struct lc_bootstrap {
	int unused;
};

int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out)
{
	return LC_ENOTSUP;
}
void lc_bootstrap_stop(lc_bootstrap_t *b)
{
}
int lc__bootstrap_source_add(lc_bootstrap_t *b, lc__metrics_source_fn fn, void *arg)
{
	return LC_ENOTSUP;
}
void lc__bootstrap_source_remove(lc_bootstrap_t *b, int id)
{
}
int lc__bootstrap_render_metrics(lc_bootstrap_t *b, char **out, size_t *len)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_handle(lc_bootstrap_t *b, const char *method, const char *path,
			 const char *query, const char *auth, const char *body, size_t body_len,
			 char **resp, size_t *resp_len)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_register(const char *addr, const lc__prefill_info_t *info,
			   const lc__http_opts_t *o, char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_get_parallel(const char *addr, const lc__http_opts_t *o,
			       lc__parallel_info_t *out, char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_get_rank(const char *addr, int tp_rank, int dp_group, const lc__http_opts_t *o,
			   lc__rank_info_t *out, char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_health(const char *addr, const lc__http_opts_t *o)
{
	return LC_ENOTSUP;
}
int lc__http_request(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len)
{
	return LC_ENOTSUP;
}
#endif

int lc_bootstrap_port(const lc_bootstrap_t *b)
{
#ifdef LC__BS_BUILT
	return b ? b->port : -EINVAL;
#else
	return -EINVAL;
#endif
}

int lc_bootstrap_addr(const lc_bootstrap_t *b, char *buf, size_t cap)
{
#ifdef LC__BS_BUILT
	if (!b || !buf)
		return -EINVAL;
	const char *h = strcmp(b->host, "0.0.0.0") ? b->host : "127.0.0.1";
	int n = snprintf(buf, cap, "%s:%d", h, b->port);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
#else
	return -EINVAL;
#endif
}
