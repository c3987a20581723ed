/*
 * The bootstrap service inside. Five files share this header:
 *   bootstrap.c          the server's life (libmicrohttpd glue, start, stop,
 *                        metrics sources) and the bootstrap secret,
 *   bootstrap_routes.c   the routes: PUT/GET /route, GET /query, /health
 *                        (validation of every field a rank sends),
 *   bootstrap_metrics.c  GET /metrics (Prometheus text),
 *   bootstrap_client.c   the client side (libcurl, timeouts, retries),
 *   bootstrap_json.c     JSON field checks, replies, a growing string.
 *
 * Threading: the server runs one libmicrohttpd polling thread; everything
 * in struct lc_bootstrap below `lock` is under it.
 */
#ifndef LC_CONTROL_BOOTSTRAP_INTERNAL_H
#define LC_CONTROL_BOOTSTRAP_INTERNAL_H

#include <pthread.h>

#include "control/bootstrap.h"

#if defined(LC_HAVE_MHD) && defined(LC_HAVE_JSONC) && defined(LC_HAVE_CURL)
#define LC__BS_BUILT 1
#include <json-c/json.h>
#endif

#ifdef LC__BS_BUILT

/* ---- a growing string ---- */

typedef struct lc__sbuf {
	char *p;
	size_t len, cap;
	bool oom; /* an allocation failed: the text is incomplete */
} lc__sbuf_t;

void lc__sb_printf(lc__sbuf_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the server's state ---- */

/* A route is owned: the first PUT of a rank gets an owner token that its
 * later PUTs (refreshes) carry; until expires_ns no other PUT may replace
 * it but one with the bootstrap secret asking for a takeover. */
typedef struct lc__bs_rank {
	bool registered;
	char ip[LC__BS_HOST_MAX];
	int port;
	char key[LC__BS_KEY_MAX];
	char owner[LC__BS_OWNER_LEN + 1];
	char engine_id[LC__BS_ENGINE_ID_MAX]; /* "" when the rank named none */
	uint64_t expires_ns;                  /* CLOCK_MONOTONIC */
} lc__bs_rank_t;

/* A connection the server holds, for the per-address limit and the
 * absolute deadline (bootstrap.c). */
typedef struct lc__bs_conn {
	struct lc__bs_conn *next;
	void *mhd;           /* struct MHD_Connection */
	int fd;              /* owned by libmicrohttpd; shut down at the deadline */
	uint64_t started_ns; /* accepted */
	bool shut;           /* past its deadline, shut down once */
	unsigned char addr[16];
	size_t addr_len;
} lc__bs_conn_t;

typedef struct lc__bs_source {
	int id;
	lc__metrics_source_fn fn;
	void *arg;
} lc__bs_source_t;

#define LC__BS_MAX_SOURCES 64
/* How long an authenticated PUT's probe of a route's owner waits for a
 * connection (bootstrap_routes.c, owner_dead). */
#define LC__BS_PROBE_MS 500

/* HTTP statuses counted on /metrics. */
enum {
	CODE_2XX,
	CODE_400,
	CODE_401,
	CODE_404,
	CODE_405,
	CODE_409,
	CODE_413,
	CODE_OTHER,
	CODE_COUNT
};
extern const char *const lc__bs_code_label[CODE_COUNT];
int lc__bs_code_index(int http);

struct lc_bootstrap {
	struct MHD_Daemon *daemon;
	int port;
	char host[LC__BS_HOST_MAX];
	/* PUT /route's bearers: the bootstrap secret given (or bootstrap.secret)
	 * and the shared secret's (control/shared_secret.h); either passes.
	 * has_secret: at least one is set. */
	char secret[LC__BS_SECRET_MAX];
	char bearer[LC__BS_SECRET_MAX];
	bool has_explicit, has_bearer, has_secret;
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
	lc__bs_rank_t *ranks; /* world_size */
	int registered;
	lc__bs_source_t sources[LC__BS_MAX_SOURCES];
	int nsources, next_source_id, sources_busy;
	uint64_t requests[CODE_COUNT];
	uint64_t puts_ok, puts_refused;
	uint64_t puts_invalid;    /* PUTs refused with 400: a field failed its check */
	uint64_t headers_invalid; /* requests refused for their headers */
	uint64_t puts_conflict;   /* PUTs refused (409): the rank is owned by another */
	uint64_t puts_replaced;   /* authenticated PUTs that replaced a dead owner's route */
	uint64_t route_ttl_ms;

	/* Connections (bootstrap.c): the ones held, by source address. */
	lc__bs_conn_t *conns;
	unsigned per_addr_max;
	uint64_t request_ns; /* absolute deadline of a connection */
	uint64_t conns_refused_addr, conns_deadline;
	pthread_t reaper;
	bool reaper_running, reaper_stop;
	bool reaper_idle; /* asleep with no connection to time: a new one wakes it */
	pthread_cond_t reaper_cond; /* CLOCK_MONOTONIC */
};

/* ---- JSON (bootstrap_json.c) ---- */

/* A text reply (*resp allocated, caller frees); returns code. */
int lc__bs_reply_text(char **resp, size_t *len, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A JSON reply (takes o); returns 200. */
int lc__bs_reply_json(char **resp, size_t *len, json_object *o);
/* Strict integer field: present, an int, in [lo, hi]; -1 with why. */
int lc__bs_json_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
		    char *why, size_t cap);
/* String field shorter than max (non-empty when required); "" when an
 * optional one is absent; NULL with why. */
const char *lc__bs_json_str(json_object *o, const char *key, bool required, size_t max, char *why,
			    size_t cap);
/* Why s (n bytes) is not valid UTF-8 free of NUL and control characters,
 * or NULL when it is. lc__bs_json_str applies it to every string field. */
const char *lc__bs_text_bad(const char *s, size_t n);
/* rank_ip: an IPv4 or IPv6 literal (inet_pton) or an RFC 1123 host name;
 * never "*", a port, a path or a wildcard. */
bool lc__bs_host_ok(const char *s);
/* layout_fingerprint: exactly LC__BS_FP_DIGITS hex digits, as P formats it
 * ("%016llx"); no sign, prefix or space. 0, or -1 with *out untouched. */
#define LC__BS_FP_DIGITS 16
int lc__bs_fingerprint_parse(const char *s, uint64_t *out);
/* curve_public_key: "" (CURVE off) or 40 characters of the z85 alphabet. */
bool lc__bs_curve_key_ok(const char *s);
/* A whole JSON object, or NULL. */
json_object *lc__bs_parse_obj(const char *s, size_t len);
/* The client's readings of a 200 reply's body (s, len bytes; any bytes):
 * GET /route's parallel info and one rank's endpoint. 0 with *out filled
 * inside the documented bounds, or LC_ERR_BOOTSTRAP (*out partly written).
 * Apart from the HTTP client so that fuzz_json can reach them. */
int lc__bs_parse_parallel(const char *s, size_t len, lc__parallel_info_t *out);
int lc__bs_parse_rank(const char *s, size_t len, lc__rank_info_t *out);
/* The PUT /route body of P's rank (TokenSpeed's fields, plus owner_token
 * when owner is not empty and takeover when asked; bootstrap_owner.c),
 * malloc'ed; NULL without memory. */
char *lc__bs_route_body(const lc__prefill_info_t *info, const char *owner, bool takeover);

#else /* built without libmicrohttpd, json-c or libcurl */

struct lc_bootstrap {
	int unused;
};

#endif

#endif
