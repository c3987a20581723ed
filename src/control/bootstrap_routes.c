/*
 * The bootstrap routes (docs/protocol.md, "HTTP routes"): PUT /route from
 * P ranks, GET /route for D, GET /query for routers, /health, /metrics. Every field a peer sends is
 * checked here; a bad one is a 4xx with the reason, never a crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/addr.h"
#include "control/bootstrap_internal.h"

#ifdef LC__BS_BUILT

/* given == secret, in time that depends on the secret's length only. */
static bool same_secret(const char *secret, const char *given)
{
	size_t n = strlen(secret), m = strlen(given);
	unsigned diff = (unsigned)(n ^ m);
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned)(secret[i] ^ (i < m ? given[i] : 0));
	return diff == 0;
}

/* The bootstrap secret given, or the shared secret's bearer: either one. */
static bool auth_ok(const lc_bootstrap_t *b, const char *auth)
{
	if (!b->has_secret)
		return true;
	if (!auth || strncmp(auth, "Bearer ", 7))
		return false;
	bool a = b->has_explicit && same_secret(b->secret, auth + 7);
	bool c = b->has_bearer && same_secret(b->bearer, auth + 7);
	return a || c;
}

/* What one PUT /route carries, checked. */
typedef struct put_req {
	int64_t world, dp, rank, port, layers;
	const char *ip, *key, *engine_id; /* inside the request's JSON object */
	uint64_t fingerprint;
	size_t nlens;
	uint64_t item_lens[LC__BS_MAX_LENS];
	const char *owner;                 /* "" or LC__BS_OWNER_LEN hex digits */
	bool takeover;                     /* replace an owned route (needs the secret) */
	char issued[LC__BS_OWNER_LEN + 1]; /* the owner token of the stored route */
	bool fresh;                        /* stored for a new owner (not a refresh) */
	bool logged;                       /* a refusal store_rank logged (rate-limited) itself */
} put_req_t;

/* The body as one JSON value (no trailing data), or NULL with why. */
static json_object *parse_body(const char *body, size_t body_len, char *why, size_t cap)
{
	json_tokener *tok = json_tokener_new_ex(32);
	if (!tok) {
		snprintf(why, cap, "out of memory");
		return NULL;
	}
	json_object *o = json_tokener_parse_ex(tok, body, (int)body_len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t used = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!o || jerr != json_tokener_success || used != body_len) {
		json_object_put(o);
		snprintf(why, cap, "malformed JSON: %s",
			 jerr != json_tokener_success ? json_tokener_error_desc(jerr)
						      : "trailing data");
		return NULL;
	}
	return o;
}

/* owner_token (optional: a refresh carries the one its first PUT got) and
 * takeover (optional boolean). Neither is a TokenSpeed field; a TokenSpeed
 * P sends neither and owns its rank until the route's life lapses. */
static int parse_owner(json_object *o, put_req_t *q, char *why, size_t cap)
{
	json_object *t;
	if (!(q->owner = lc__bs_json_str(o, "owner_token", false, LC__BS_OWNER_LEN + 1, why, cap)))
		return -1;
	if (*q->owner && (strlen(q->owner) != LC__BS_OWNER_LEN ||
			  strspn(q->owner, "0123456789abcdef") != LC__BS_OWNER_LEN)) {
		snprintf(why, cap, "owner_token is not %d lowercase hex digits", LC__BS_OWNER_LEN);
		return -1;
	}
	if (json_object_object_get_ex(o, "takeover", &t)) {
		if (!json_object_is_type(t, json_type_boolean)) {
			snprintf(why, cap, "field \"takeover\" is not a boolean");
			return -1;
		}
		q->takeover = json_object_get_boolean(t);
	}
	return 0;
}

/* role, the parallel layout and this rank's endpoint. */
static int parse_rank(json_object *o, put_req_t *q, char *why, size_t cap)
{
	const char *role;
	if (!json_object_is_type(o, json_type_object)) {
		snprintf(why, cap, "body is not a JSON object");
		return -1;
	}
	if (!(role = lc__bs_json_str(o, "role", true, 32, why, cap)))
		return -1;
	if (strcmp(role, "Prefill")) {
		snprintf(why, cap, "role \"%s\" is not \"Prefill\"", role);
		return -1;
	}
	if (lc__bs_json_int(o, "world_size", 1, LC__BS_MAX_WORLD, &q->world, why, cap) ||
	    lc__bs_json_int(o, "dp_size", 1, LC__BS_MAX_WORLD, &q->dp, why, cap) ||
	    lc__bs_json_int(o, "engine_rank", 0, LC__BS_MAX_WORLD - 1, &q->rank, why, cap) ||
	    lc__bs_json_int(o, "rank_port", 1, 65535, &q->port, why, cap))
		return -1;
	if (q->world % q->dp) {
		snprintf(why, cap, "dp_size %lld does not divide world_size %lld", (long long)q->dp,
			 (long long)q->world);
		return -1;
	}
	if (q->rank >= q->world) {
		snprintf(why, cap, "engine_rank %lld outside world_size %lld", (long long)q->rank,
			 (long long)q->world);
		return -1;
	}
	if (!(q->ip = lc__bs_json_str(o, "rank_ip", true, LC__BS_HOST_MAX, why, cap)) ||
	    !(q->key = lc__bs_json_str(o, "curve_public_key", false, LC__BS_KEY_MAX, why, cap)) ||
	    !(q->engine_id = lc__bs_json_str(o, "engine_id", false, LC__BS_ENGINE_ID_MAX, why, cap)))
		return -1;
	/* D connects to what is stored here: only a host, never a wildcard,
	 * a port or a path. */
	if (!lc__bs_host_ok(q->ip)) {
		snprintf(why, cap, "rank_ip \"%.64s\" is not a host name or an IP address", q->ip);
		return -1;
	}
	if (!lc__bs_curve_key_ok(q->key)) {
		snprintf(why, cap, "curve_public_key is not 40 characters of z85");
		return -1;
	}
	return parse_owner(o, q, why, cap);
}

/* The page geometry: fingerprint, layers, kv_item_lens. */
static int parse_geometry(json_object *o, put_req_t *q, char *why, size_t cap)
{
	const char *fp;
	json_object *lens;
	if (!(fp = lc__bs_json_str(o, "layout_fingerprint", false, 32, why, cap)))
		return -1;
	/* Absent means 0; present, exactly what P formats: 16 hex digits. */
	if (json_object_object_get_ex(o, "layout_fingerprint", NULL) &&
	    lc__bs_fingerprint_parse(fp, &q->fingerprint)) {
		snprintf(why, cap, "layout_fingerprint \"%.32s\" is not %d hex digits", fp,
			 LC__BS_FP_DIGITS);
		return -1;
	}
	if (json_object_object_get_ex(o, "layers", NULL) &&
	    lc__bs_json_int(o, "layers", 0, 1 << 20, &q->layers, why, cap))
		return -1;
	if (!json_object_object_get_ex(o, "kv_item_lens", &lens))
		return 0;
	if (!json_object_is_type(lens, json_type_array) ||
	    json_object_array_length(lens) > LC__BS_MAX_LENS) {
		snprintf(why, cap, "kv_item_lens is not an array of at most %u", LC__BS_MAX_LENS);
		return -1;
	}
	q->nlens = json_object_array_length(lens);
	for (size_t i = 0; i < q->nlens; i++) {
		json_object *v = json_object_array_get_idx(lens, i);
		errno = 0;
		int64_t x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
		if (x <= 0 || errno) {
			snprintf(why, cap, "kv_item_lens[%zu] is not a positive integer", i);
			return -1;
		}
		q->item_lens[i] = (uint64_t)x;
	}
	return 0;
}

/* The first PUT fixes the layout; later ones must agree. Returns 200, 409
 * or 500 (with why). Under b->lock. */
static int check_layout(lc_bootstrap_t *b, const put_req_t *q, char *why, size_t cap)
{
	if (!b->configured) {
		b->ranks = calloc((size_t)q->world, sizeof *b->ranks);
		if (!b->ranks) {
			snprintf(why, cap, "out of memory");
			return 500;
		}
		b->configured = true;
		b->world_size = (int)q->world;
		b->dp_size = (int)q->dp;
		b->fingerprint = q->fingerprint;
		b->layers = (uint32_t)q->layers;
		b->nlens = (uint32_t)q->nlens;
		memcpy(b->kv_item_lens, q->item_lens, q->nlens * sizeof *q->item_lens);
		return 200;
	}
	if (b->world_size != q->world || b->dp_size != q->dp) {
		/* TokenSpeed kept the first PUT silently; a mismatch is a bug. */
		snprintf(why, cap,
			 "parallel layout differs from the registered one: world_size %lld dp_size "
			 "%lld, registered %d and %d",
			 (long long)q->world, (long long)q->dp, b->world_size, b->dp_size);
		return 409;
	}
	if (b->fingerprint != q->fingerprint || b->nlens != q->nlens ||
	    memcmp(b->kv_item_lens, q->item_lens, q->nlens * sizeof *q->item_lens)) {
		snprintf(why, cap,
			 "page geometry differs from the registered ranks' (fingerprint %016llx, "
			 "registered %016llx)",
			 (unsigned long long)q->fingerprint, (unsigned long long)b->fingerprint);
		return 409;
	}
	return 200;
}

/* Whether this PUT may write rank e: a free rank, its owner's refresh, a
 * lapsed route, or a takeover with the bootstrap secret. 409 with why
 * otherwise. Under b->lock. */
static int check_owner(lc_bootstrap_t *b, const lc__bs_rank_t *e, const put_req_t *q, uint64_t now,
		       char *why, size_t cap)
{
	if (!e->registered || now >= e->expires_ns)
		return 200;
	if (*q->owner && lc__ct_equal(q->owner, e->owner, LC__BS_OWNER_LEN))
		return 200;
	if (q->takeover && b->has_secret)
		return 200; /* auth_ok passed: the PUT carries the secret */
	snprintf(why, cap,
		 "engine_rank %lld " LC__BS_TAKEN_TEXT " (at %.64s:%d) for %llu ms more; %s",
		 (long long)q->rank, e->ip, e->port,
		 (unsigned long long)((e->expires_ns - now) / 1000000),
		 *q->owner ? "owner_token does not match" : "no owner_token given");
	return 409;
}

/* A PUT that proved a secret (the server has one) for a rank another P
 * owns: a restarted P, whose old incarnation died without a word, or a
 * second P of the rank by mistake. The route is replaced at once when
 * nothing accepts connections at the owner's endpoint any more (the old
 * P is gone; only an authenticated PUT wrote that endpoint, so this probes
 * no address an outsider chose). Under b->lock, which it drops for the
 * probe (at most LC__BS_PROBE_MS); true when the route may be replaced,
 * with e unchanged meanwhile. */
static bool owner_dead(lc_bootstrap_t *b, const lc__bs_rank_t *e)
{
	char ip[LC__BS_HOST_MAX], owner[LC__BS_OWNER_LEN + 1];
	int port = e->port;
	snprintf(ip, sizeof ip, "%s", e->ip);
	memcpy(owner, e->owner, sizeof owner);
	pthread_mutex_unlock(&b->lock);
	bool alive = lc__addr_tcp_alive(ip, port, LC__BS_PROBE_MS);
	pthread_mutex_lock(&b->lock);
	/* Another PUT may have moved the route while the lock was dropped. */
	return !alive && e->registered && e->port == port && !strcmp(e->ip, ip) &&
	       lc__ct_equal(e->owner, owner, LC__BS_OWNER_LEN);
}

/* Record the rank. Returns 200, 409 or 500 (with why); on 200 q->issued
 * holds the route's owner token. */
static int store_rank(lc_bootstrap_t *b, put_req_t *q, char *why, size_t cap)
{
	pthread_mutex_lock(&b->lock);
	int code = check_layout(b, q, why, cap);
	if (code != 200) {
		if (code == 409)
			b->puts_refused++;
		pthread_mutex_unlock(&b->lock);
		return code;
	}
	lc__bs_rank_t *e = &b->ranks[q->rank];
	uint64_t now = lc__now_ns();
	code = check_owner(b, e, q, now, why, cap);
	if (code == 409 && b->has_secret && owner_dead(b, e)) {
		b->puts_replaced++;
		LC__WARN_PEER("bootstrap: engine_rank %lld: nothing accepts at its owner's "
			      "endpoint %.64s:%d any more; the authenticated PUT from %.64s:%lld "
			      "replaces the route (a restarted P)",
			      (long long)q->rank, e->ip, e->port, q->ip, (long long)q->port);
		code = 200;
		now = lc__now_ns();
	}
	if (code != 200) {
		b->puts_refused++;
		b->puts_conflict++;
		uint64_t n = b->puts_conflict;
		LC__LOG_PEER(LC_LOG_WARN, "bootstrap: PUT /route refused (409, %llu so far): %s",
			     (unsigned long long)n, why);
		q->logged = true;
		pthread_mutex_unlock(&b->lock);
		return code;
	}
	bool same = e->registered && *q->owner &&
		    lc__ct_equal(q->owner, e->owner, LC__BS_OWNER_LEN);
	if (!same) {
		/* A new owner: the token it proposes (a P re-registering after
		 * this server restarted keeps its own), else a fresh one. */
		uint8_t r[LC__BS_OWNER_LEN / 2];
		if (*q->owner) {
			memcpy(e->owner, q->owner, LC__BS_OWNER_LEN + 1);
		} else if (lc__random_bytes(r, sizeof r)) {
			snprintf(why, cap, "no randomness for an owner token");
			pthread_mutex_unlock(&b->lock);
			return 500;
		} else {
			for (size_t i = 0; i < sizeof r; i++)
				snprintf(e->owner + 2 * i, 3, "%02x", r[i]);
		}
	}
	if (!e->registered)
		b->registered++;
	e->registered = true;
	e->expires_ns = now + b->route_ttl_ms * 1000000ull;
	snprintf(e->ip, sizeof e->ip, "%s", q->ip);
	e->port = (int)q->port;
	snprintf(e->key, sizeof e->key, "%s", q->key);
	snprintf(e->engine_id, sizeof e->engine_id, "%s", q->engine_id);
	memcpy(q->issued, e->owner, sizeof q->issued);
	q->fresh = !same;
	b->puts_ok++;
	pthread_mutex_unlock(&b->lock);
	return 200;
}

/* The 200 reply: TokenSpeed's clients read only the status; ours take the
 * owner token and the route's life from it. */
static int reply_owned(lc_bootstrap_t *b, const put_req_t *q, char **resp, size_t *resp_len)
{
	json_object *o = json_object_new_object();
	if (!o)
		return lc__bs_reply_text(resp, resp_len, 500, "out of memory");
	json_object_object_add(o, "status", json_object_new_string("OK"));
	json_object_object_add(o, "owner_token", json_object_new_string(q->issued));
	json_object_object_add(o, "ttl_ms", json_object_new_int64((int64_t)b->route_ttl_ms));
	return lc__bs_reply_json(resp, resp_len, o);
}

static int handle_put(lc_bootstrap_t *b, const char *auth, const char *body, size_t body_len,
		      char **resp, size_t *resp_len)
{
	char why[256] = "";
	if (!auth_ok(b, auth))
		return lc__bs_reply_text(resp, resp_len, 401, "authentication required");
	if (body_len > LC__BS_BODY_MAX)
		return lc__bs_reply_text(resp, resp_len, 413, "body over %u bytes",
					 LC__BS_BODY_MAX);
	if (!body_len)
		return lc__bs_reply_text(resp, resp_len, 400, "empty body");
	json_object *o = parse_body(body, body_len, why, sizeof why);
	put_req_t *q = o ? calloc(1, sizeof *q) : NULL;
	int code = 500;
	if (!o)
		code = strcmp(why, "out of memory") ? 400 : 500;
	else if (!q)
		snprintf(why, sizeof why, "out of memory");
	else if (parse_rank(o, q, why, sizeof why) || parse_geometry(o, q, why, sizeof why))
		code = 400;
	else
		code = store_rank(b, q, why, sizeof why);
	if (code == 400) {
		pthread_mutex_lock(&b->lock);
		b->puts_invalid++;
		pthread_mutex_unlock(&b->lock);
	}
	if (code == 200)
		LC__LOG(q->fresh ? LC_LOG_INFO : LC_LOG_DEBUG, "bootstrap: rank %lld %s at %s:%lld",
			(long long)q->rank, q->fresh ? "registered" : "refreshed", q->ip,
			(long long)q->port);
	else if (!q || !q->logged)
		LC__WARN_PEER("bootstrap: PUT /route refused (%d): %s", code, why);
	int rc = code == 200 ? reply_owned(b, q, resp, resp_len)
			     : lc__bs_reply_text(resp, resp_len, code, "%s", why);
	free(q);
	json_object_put(o);
	return rc;
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
		return lc__bs_reply_text(resp, len, 400, "missing engine_rank or target_dp_group");
	if (a == -2 || c == -2)
		return lc__bs_reply_text(resp, len, 400,
					 "engine_rank and target_dp_group must be integers");
	pthread_mutex_lock(&b->lock);
	if (!b->configured) {
		pthread_mutex_unlock(&b->lock);
		return lc__bs_reply_text(resp, len, 404, "no prefill rank registered yet");
	}
	if (er == -1 && g == -1) {
		json_object *o = json_object_new_object();
		json_object *lens = json_object_new_array();
		json_object *units = json_object_new_array();
		for (uint32_t i = 0; i < b->nlens; i++) {
			json_object_array_add(lens,
					      json_object_new_int64((int64_t)b->kv_item_lens[i]));
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
		return lc__bs_reply_json(resp, len, o);
	}
	int tp_per_dp = b->world_size / b->dp_size;
	if (er < 0 || g < 0) {
		pthread_mutex_unlock(&b->lock);
		return lc__bs_reply_text(resp, len, 400,
					 "engine_rank and target_dp_group must be >= 0 "
					 "(or both -1)");
	}
	if (er >= tp_per_dp || g >= b->dp_size || !b->ranks[g * tp_per_dp + er].registered) {
		pthread_mutex_unlock(&b->lock);
		return lc__bs_reply_text(resp, len, 404,
					 "unknown rank: engine_rank %ld of dp group %ld", er, g);
	}
	lc__bs_rank_t e = b->ranks[g * tp_per_dp + er];
	pthread_mutex_unlock(&b->lock);
	json_object *o = json_object_new_object();
	json_object_object_add(o, "rank_ip", json_object_new_string(e.ip));
	json_object_object_add(o, "rank_port", json_object_new_int(e.port));
	if (e.key[0])
		json_object_object_add(o, "curve_public_key", json_object_new_string(e.key));
	return lc__bs_reply_json(resp, len, o);
}

/* "tcp://ip:port" of a rank, as the Mooncake connector's worker_addr. */
static json_object *worker_addr(const lc__bs_rank_t *e)
{
	char a[LC__BS_HOST_MAX + 32];
	bool v6 = strchr(e->ip, ':') != NULL;
	snprintf(a, sizeof a, "tcp://%s%s%s:%d", v6 ? "[" : "", e->ip, v6 ? "]" : "", e->port);
	return json_object_new_string(a);
}

/* One dp group's entry into out, unless none of its registered ranks named
 * an engine id (the lowest rank that did names the group's). -ENOMEM.
 * Under b->lock. */
static int query_group(const lc_bootstrap_t *b, int g, json_object *out)
{
	int tp = b->world_size / b->dp_size;
	const char *engine_id = NULL;
	json_object *workers = json_object_new_object(), *o = NULL;
	char key[16];
	if (!workers)
		return -ENOMEM;
	for (int r = 0; r < tp; r++) {
		const lc__bs_rank_t *e = &b->ranks[g * tp + r];
		if (!e->registered)
			continue;
		if (!engine_id && e->engine_id[0])
			engine_id = e->engine_id;
		json_object *stages = json_object_new_object(), *a = worker_addr(e);
		snprintf(key, sizeof key, "%d", r);
		if (!stages || !a || json_object_object_add(stages, "0", a)) { /* no pipeline stages */
			json_object_put(stages);
			json_object_put(a);
			goto nomem;
		}
		if (json_object_object_add(workers, key, stages)) {
			json_object_put(stages);
			goto nomem;
		}
	}
	if (!engine_id) {
		json_object_put(workers);
		return 0;
	}
	json_object *id = json_object_new_string(engine_id);
	snprintf(key, sizeof key, "%d", g);
	if (!id || !(o = json_object_new_object()) || json_object_object_add(o, "engine_id", id)) {
		json_object_put(id);
		goto nomem;
	}
	if (json_object_object_add(o, "worker_addr", workers))
		goto nomem; /* a failed add leaves the value with the caller */
	if (json_object_object_add(out, key, o)) {
		json_object_put(o);
		return -ENOMEM;
	}
	return 0;
nomem:
	json_object_put(o);
	json_object_put(workers);
	return -ENOMEM;
}

/* GET /query: the Mooncake connector's bootstrap registry, which routers
 * (llm-d's sidecar, vLLM's proxies) read for P's engine id: {"<dp group>":
 * {"engine_id": E, "worker_addr": {"<tp rank>": {"0": "tcp://ip:port"}}}};
 * {} until a rank that names an engine id registers. No parameters. */
static int handle_get_query(lc_bootstrap_t *b, const char *query, char **resp, size_t *len)
{
	if (query && *query) {
		LC__WARN_PEER("bootstrap: GET /query refused (400): it takes no parameters");
		return lc__bs_reply_text(resp, len, 400, "/query takes no parameters");
	}
	json_object *o = json_object_new_object();
	int rc = o ? 0 : -ENOMEM;
	pthread_mutex_lock(&b->lock);
	for (int g = 0; !rc && b->configured && g < b->dp_size; g++)
		rc = query_group(b, g, o);
	pthread_mutex_unlock(&b->lock);
	if (rc) {
		json_object_put(o);
		return lc__bs_reply_text(resp, len, 500, "out of memory");
	}
	return lc__bs_reply_json(resp, len, o);
}

int lc__bootstrap_handle(lc_bootstrap_t *b, const char *method, const char *path, const char *query,
			 const char *auth, const char *body, size_t body_len, char **resp,
			 size_t *resp_len)
{
	int code;
	*resp = NULL;
	*resp_len = 0;
	if (!method || !path) {
		code = lc__bs_reply_text(resp, resp_len, 400, "bad request");
	} else if (!strcmp(path, "/route")) {
		if (!strcmp(method, "PUT"))
			code = handle_put(b, auth, body, body_len, resp, resp_len);
		else if (!strcmp(method, "GET"))
			code = handle_get_route(b, query, resp, resp_len);
		else
			code = lc__bs_reply_text(resp, resp_len, 405,
						 "method %.16s not allowed on /route", method);
	} else if (!strcmp(path, "/query")) {
		code = !strcmp(method, "GET") ? handle_get_query(b, query, resp, resp_len)
					      : lc__bs_reply_text(resp, resp_len, 405,
								  "method %.16s not allowed on /query",
								  method);
	} else if (!strcmp(path, "/health")) {
		code = !strcmp(method, "GET") || !strcmp(method, "HEAD")
			       ? lc__bs_reply_text(resp, resp_len, 200, "OK")
			       : lc__bs_reply_text(resp, resp_len, 405,
						   "method not allowed on /health");
	} else if (!strcmp(path, "/metrics")) {
		if (strcmp(method, "GET"))
			code = lc__bs_reply_text(resp, resp_len, 405,
						 "method not allowed on /metrics");
		else if (lc__bootstrap_render_metrics(b, resp, resp_len))
			code = lc__bs_reply_text(resp, resp_len, 500, "out of memory");
		else
			code = 200;
	} else {
		code = lc__bs_reply_text(resp, resp_len, 404, "no such route");
	}
	pthread_mutex_lock(&b->lock);
	b->requests[lc__bs_code_index(code)]++;
	pthread_mutex_unlock(&b->lock);
	return code;
}

#else

int lc__bootstrap_handle(lc_bootstrap_t *b, const char *method, const char *path, const char *query,
			 const char *auth, const char *body, size_t body_len, char **resp,
			 size_t *resp_len)
{
	return LC_ENOTSUP;
}

#endif
