/*
 * The bootstrap service (docs/protocol.md, "HTTP routes"): the server that
 * P ranks register with and D ranks discover P through (libmicrohttpd,
 * public lc_bootstrap_* API), and its client side (libcurl) with timeouts
 * and bounded retries.
 *
 * Threading: the server runs one libmicrohttpd polling thread; the rank
 * table and the list of metrics sources are under the server's lock. Client
 * calls are synchronous, thread-safe, and bounded by their timeouts.
 */
#ifndef LC_CONTROL_BOOTSTRAP_H
#define LC_CONTROL_BOOTSTRAP_H

#include "core/common.h"

#define LC__BS_BODY_MAX (64u * 1024) /* largest PUT body accepted */
#define LC__BS_MAX_WORLD 4096        /* P world size */
#define LC__BS_MAX_LENS 4096         /* entries of kv/state length lists */
#define LC__BS_HOST_MAX 256
#define LC__BS_KEY_MAX 64 /* z85 CURVE public key (40) + NUL */
#define LC__BS_SECRET_MAX 256
#define LC__BS_OWNER_LEN 32 /* owner token: 128 random bits in hex */
#define LC__BS_ENGINE_ID_MAX 129 /* engine_id (GET /query) + NUL */

/* What a P rank registers (PUT /route) and what GET /route returns. */
typedef struct lc__prefill_info {
	int world_size, dp_size, engine_rank;
	char rank_ip[LC__BS_HOST_MAX];
	int rank_port;
	char curve_key[LC__BS_KEY_MAX]; /* "" when CURVE is off */
	uint64_t fingerprint;
	uint32_t layers;
	uint32_t nlens;
	uint64_t *kv_item_lens; /* nlens; owned by whoever filled it */
	char engine_id[LC__BS_ENGINE_ID_MAX]; /* "" when none (GET /query) */
} lc__prefill_info_t;

/* The parallel layout (GET /route?engine_rank=-1&target_dp_group=-1). */
typedef struct lc__parallel_info {
	int world_size; /* "prefill_tp_size" (the spec's name for the world size) */
	int dp_size;
	int registered;
	uint64_t fingerprint;
	uint32_t layers;
	uint32_t nlens;
	uint64_t kv_item_lens[LC__BS_MAX_LENS];
} lc__parallel_info_t;

/* One rank's endpoint (GET /route?engine_rank=t&target_dp_group=g). */
typedef struct lc__rank_info {
	char rank_ip[LC__BS_HOST_MAX];
	int rank_port;
	char curve_key[LC__BS_KEY_MAX];
} lc__rank_info_t;

/* --- metrics sources: a P rank hands the server a snapshot on /metrics --- */

#define LC__CTL_COUNTERS(X)                                                                        \
	X(msgs_received)                                                                           \
	X(msgs_sent)                                                                               \
	X(msgs_malformed)                                                                          \
	X(msgs_unexpected)                                                                         \
	X(send_failures)                                                                           \
	X(registrations)                                                                           \
	X(registrations_refused)                                                                   \
	X(transfer_infos)                                                                          \
	X(cancels)                                                                                 \
	X(statuses)                                                                                \
	X(statuses_at_once)                                                                        \
	X(layer_updates)                                                                           \
	X(heartbeat_failures)                                                                      \
	X(peers_dead)                                                                              \
	X(session_mismatches)                                                                      \
	X(session_incarnations)                                                                    \
	X(msgs_old_version)                                                                        \
	X(registrations_unanswered)                                                                \
	X(bootstrap_failures)                                                                      \
	X(routes_refused)                                                                          \
	X(routes_moved)                                                                            \
	X(lanes_closed)                                                                            \
	X(peers_gone)                                                                              \
	X(peers_evicted)                                                                           \
	X(peers_refused)                                                                           \
	X(routes_refused_fanout)                                                                   \
	X(channels_closed)                                                                         \
	X(channels_refused)                                                                        \
	X(route_conflicts)                                                                         \
	X(route_refresh_failures)                                                                  \
	X(inbox_conns_refused)                                                                     \
	X(inbox_conns_evicted)                                                                     \
	X(inbox_door_shut)

enum lc__ctl_counter {
#define LC__CTL_ENUM(name) LC__CTL_##name,
	LC__CTL_COUNTERS(LC__CTL_ENUM)
#undef LC__CTL_ENUM
		LC__CTL_COUNT
};
const char *lc__ctl_counter_name(int i);

typedef struct lc__metrics_snapshot {
	char label[64]; /* value of the rank="" label */
	lc_ctx_t *ctx;  /* NULL: no context counters */
	bool has_engine;
	lc_engine_metrics_t engine;
	uint64_t failed_by_reason[LC_FAIL_REASON_COUNT]; /* lc_engine_failed_by_reason */
	uint64_t ctl[LC__CTL_COUNT];
} lc__metrics_snapshot_t;

/* Fill *out (called on the server thread, under no lock of the server).
 * Returns 0, or < 0 to skip the source this time. */
typedef int (*lc__metrics_source_fn)(void *arg, lc__metrics_snapshot_t *out);

/* Register a source; returns an id > 0 for lc__bootstrap_source_remove.
 * remove waits until a /metrics request using the source has finished. */
int lc__bootstrap_source_add(lc_bootstrap_t *b, lc__metrics_source_fn fn, void *arg);
void lc__bootstrap_source_remove(lc_bootstrap_t *b, int id);

/* Render the Prometheus text of the server (caller frees). For tests. */
int lc__bootstrap_render_metrics(lc_bootstrap_t *b, char **out, size_t *len);

/* The request handler without sockets, for the fuzzer and unit tests:
 * method, path ("/route"), query ("engine_rank=0&..." or NULL), auth
 * header value (or NULL), body. Returns the HTTP status and a response body
 * (caller frees). */
int lc__bootstrap_handle(lc_bootstrap_t *b, const char *method, const char *path, const char *query,
			 const char *auth, const char *body, size_t body_len, char **resp,
			 size_t *resp_len);

/* The bootstrap secret: `secret` if non-NULL and non-empty, else the first
 * line of $LAYERCAKE_SECRET_DIR/bootstrap.secret if that exists. Returns 1
 * and fills out, 0 when there is none, -ENODATA when the file is there but
 * its first line is empty or unreadable (a folder), < 0 on a file that
 * cannot be opened. */
int lc__bootstrap_secret(const char *secret, char *out, size_t cap);

/* --- client (libcurl) --- */

/* addr: "host:port" or "http://host:port". timeout_ms bounds each try;
 * retries is the number of extra tries after a connection error or 5xx,
 * with a growing pause (50 ms doubling, at most 1 s). 4xx is final. */
typedef struct lc__http_opts {
	int timeout_ms;
	int retries;
	const char *secret; /* PUT: sent as "Authorization: Bearer <secret>" */
	int *fail;          /* optional out: the last try's enum lc__bs_fail */
} lc__http_opts_t;

/* What made a client call fail (lc__http_opts_t.fail), so that D can tell a
 * P not up yet from an address that will never work (docs/deployment.md,
 * "A wrong bootstrap address"). An answer that is not a bootstrap server's
 * is final: a call stops retrying at it. */
enum lc__bs_fail {
	LC__BS_FAIL_NONE = 0,
	LC__BS_FAIL_REFUSED,     /* connection refused: nothing listens there (yet) */
	LC__BS_FAIL_TIMEOUT,     /* no answer within timeout_ms */
	LC__BS_FAIL_UNREACHABLE, /* no route or host, or closed without an answer */
	LC__BS_FAIL_NOT_SERVER,  /* bytes that are not HTTP, or not a bootstrap server's */
	LC__BS_FAIL_HTTP,        /* a bootstrap server's error status (404 included) */
};

/* PUT /route. Errors: LC_ERR_UNREACHABLE, LC_ERR_AUTH (401),
 * LC_ERR_BOOTSTRAP (other non-200, with the server's text in why). */
int lc__bootstrap_register(const char *addr, const lc__prefill_info_t *info,
			   const lc__http_opts_t *o, char *why, size_t why_cap);
/* PUT /route of an owned route (bootstrap_owner.c): owner[LC__BS_OWNER_LEN
 * + 1] is "" to claim the rank, or the token a claim got, to refresh it; on
 * success it holds the route's token and *ttl_ms its life (0: a server
 * without owned routes). takeover (with the secret in o) replaces a route
 * another P owns. Errors: -EEXIST (409: the rank is owned by another P
 * whose route has not lapsed; why says so), else as lc__bootstrap_register. */
int lc__bootstrap_claim(const char *addr, const lc__prefill_info_t *info, bool takeover,
			const lc__http_opts_t *o, char *owner, uint64_t *ttl_ms, char *why,
			size_t why_cap);
/* The text of the 409 for an owned rank (the client tells it from a
 * layout conflict by it). */
#define LC__BS_TAKEN_TEXT "is registered by another P"
/* GET /route -1/-1. -ENOENT (404: nothing registered yet). A 404 whose
 * server does not answer GET /health with 200 is no bootstrap server:
 * LC_ERR_BOOTSTRAP, fail NOT_SERVER. */
int lc__bootstrap_get_parallel(const char *addr, const lc__http_opts_t *o, lc__parallel_info_t *out,
			       char *why, size_t why_cap);
/* GET /route for one rank. -ENOENT for an unknown rank (404). */
int lc__bootstrap_get_rank(const char *addr, int tp_rank, int dp_group, const lc__http_opts_t *o,
			   lc__rank_info_t *out, char *why, size_t why_cap);
/* GET /health: 0 if 200. */
int lc__bootstrap_health(const char *addr, const lc__http_opts_t *o);
/* A raw request (tests): returns the HTTP status (or < 0) and the body. */
int lc__http_request(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len);

#endif
