/*
 * layercake/pd.h: prefill/decode disaggregation over the control plane:
 * the bootstrap server, the prefill side (lc_prefill_t and its senders)
 * and the decode side (lc_decode_t and its receivers).
 * Conventions: see layercake/base.h.
 */
#ifndef LAYERCAKE_PD_H
#define LAYERCAKE_PD_H

#include "layercake/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Bootstrap server (run by P; spec 4.6, docs/protocol.md): P ranks register
 * with PUT /route, D ranks read the parallel layout and rank endpoints with
 * GET /route?engine_rank=&target_dp_group=, probe GET /health, and
 * operators scrape GET /metrics (Prometheus text). Bad requests get 4xx
 * with a one-line message, an unknown rank 404.
 * ---------------------------------------------------------------------- */

typedef struct lc_bootstrap lc_bootstrap_t;

typedef struct lc_bootstrap_params {
	size_t size;      /* sizeof(lc_bootstrap_params_t) */
	const char *host; /* bind address; NULL = "0.0.0.0" */
	int port;         /* 0 = a free port; -1 = knob bootstrap_port (ctx, else env) */
	int reserved;
	/* PUT /route then needs "Authorization: Bearer <secret>" (else 401).
	 * NULL = the first line of $LAYERCAKE_SECRET_DIR/bootstrap.secret when
	 * that file exists, else no authentication. Copied. */
	const char *secret;
	/* Optional: this context's counters appear in /metrics. Must outlive
	 * the server. */
	lc_ctx_t *ctx;
	/* The deployment's shared secret (docs/security.md, "One switch"); NULL
	 * or "" = LAYERCAKE_SHARED_SECRET, else the first line of
	 * LAYERCAKE_SHARED_SECRET_FILE, else none. When set, PUT /route also
	 * takes the bearer derived from it (beside `secret`, if any), and a PUT
	 * that carries a valid bearer replaces at once a route whose owner no
	 * longer accepts connections (a restarted P). Copied, then wiped. */
	const char *shared_secret;
} lc_bootstrap_params_t;

/* Start the server (its own thread). Returns when it listens. Errors:
 * -EINVAL, -EADDRINUSE (or another bind errno), -ENOMEM, LC_ENOTSUP when
 * the library was built without libmicrohttpd/json-c. Any thread. */
LC_API int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out);
/* Stop serving and free. Blocks until requests in progress finish (each
 * is bounded). Not while a lc_prefill_t still publishes metrics on it.
 * NULL is a no-op. */
LC_API void lc_bootstrap_stop(lc_bootstrap_t *bootstrap);
/* The port it listens on (useful with port 0). */
LC_API int lc_bootstrap_port(const lc_bootstrap_t *bootstrap);
/* "host:port" to give P and D ranks: LAYERCAKE_ADVERTISE_HOST, else the
 * bound host, else (a wildcard bind) this host's primary address (the
 * default route's source; docs/deployment.md). "[v6]:port" for IPv6.
 * Returns the length; -ENOSPC if cap is too small. */
LC_API int lc_bootstrap_addr(const lc_bootstrap_t *bootstrap, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * Prefill side: one lc_prefill_t per P rank. It owns the rank's engine,
 * registers the rank with the bootstrap server, and serves D's messages on
 * its control socket (ZeroMQ PULL, tcp): session registrations (a D whose
 * layout fingerprint differs is refused with a reply naming the
 * difference), transfer infos (checked against the room's sender, then
 * added to the engine's room; held until the sender comes, p_park_ms at
 * most, when it has none yet) and cancels.
 * The engine's status and "layers landed" events go back to D.
 *
 * Threading: one control thread per lc_prefill_t; every call may come from
 * any thread. Feed chunks with the engine's batch API (lc_prefill_engine).
 * Control-plane security: when LAYERCAKE_SECRET_DIR holds curve.public and
 * curve.secret (z85), every control socket uses ZeroMQ CURVE with that
 * keypair and accepts only peers presenting a public key listed in the
 * directory (curve.public and authorized_keys, one z85 key a line). The
 * shared secret (shared_secret below, LAYERCAKE_SHARED_SECRET) is the one
 * switch for all of it: a keypair derived from it, used and accepted by
 * every rank, and the bootstrap bearer (docs/security.md, "One switch").
 * ---------------------------------------------------------------------- */

typedef struct lc_prefill lc_prefill_t;

typedef struct lc_prefill_params {
	size_t size;               /* sizeof(lc_prefill_params_t) */
	const lc_layout_t *layout; /* P's buffers, in regions of ctx; copied */
	const char *bootstrap;     /* "host:port" of the bootstrap server; required */
	/* Address the control socket binds; NULL (or "0.0.0.0", "::") = every
	 * address, and D is told LAYERCAKE_ADVERTISE_HOST, else the local
	 * address of the route towards the bootstrap server (docs/deployment.md);
	 * another address is bound and told as it is. */
	const char *host;
	const char *name; /* for log lines; may be NULL */
	int world_size;   /* P ranks in all, >= 1 */
	int dp_size;      /* data-parallel groups, divides world_size */
	int engine_rank;  /* this rank, 0 .. world_size-1 */
	int reserved;
	/* Optional: publish this rank's metrics (engine and control plane) on
	 * that server's /metrics; it must outlive the lc_prefill_t. */
	lc_bootstrap_t *metrics_server;
	const char *bootstrap_secret; /* NULL: as lc_bootstrap_params_t.secret */
	/* Step counters written by an outside producer (a GPU): passed to the
	 * engine as lc_engine_params_t.external_counter / cache_word /
	 * aux_word (see there). 0 / NULL: lc_engine_record_* only. */
	int external_counter;
	int reserved2;
	uint64_t *cache_word;
	uint64_t *aux_word;
	/* The deployment's shared secret, as lc_bootstrap_params_t's. When set,
	 * the rank registers with the bearer derived from it (unless
	 * bootstrap_secret or bootstrap.secret gives one) and its control
	 * socket is CURVE with the keypair derived from it (unless
	 * LAYERCAKE_SECRET_DIR holds one; its public key is accepted either
	 * way): only D ranks holding the secret can register. */
	const char *shared_secret;
	/* Optional: the engine this rank belongs to (vLLM's
	 * kv_transfer_config.engine_id), sent with the rank's PUT /route and
	 * shown on the bootstrap server's GET /query, the Mooncake connector's
	 * registry that routers read (docs/protocol.md, "HTTP routes"). NULL or
	 * "": none. At most 128 bytes of UTF-8 without control characters (else
	 * -EINVAL). Copied. */
	const char *engine_id;
} lc_prefill_params_t;

/* Create the engine (lc_engine_create; knobs from ctx), bind the control
 * socket, start the control thread and register with the bootstrap server
 * (PUT /route: 2 s per try, 5 retries with growing pauses). layout,
 * bootstrap and the parallel layout have no default: NULL params fail with
 * -EINVAL, naming the field in lc_last_error().
 * Blocks for the registration. The route is owned (docs/protocol.md 2): a
 * thread refreshes it every third of the server's route_ttl_ms until
 * lc_prefill_destroy. Errors: -EINVAL (also a layout buffer outside every
 * region registered on ctx, logged with the buffer, before anything
 * starts), -ENOMEM, the engine's errors,
 * -EEXIST when another P that is alive owns this engine_rank at the
 * bootstrap server (logged with its endpoint), LC_ERR_UNREACHABLE /
 * LC_ERR_AUTH / LC_ERR_BOOTSTRAP from the registration, LC_ENOTSUP without
 * ZeroMQ or libcurl. */
LC_API int lc_prefill_create(lc_ctx_t *ctx, const lc_prefill_params_t *params, lc_prefill_t **out);
/* Stop the control thread, destroy the engine (unfinished rooms fail and
 * their D ranks are told), close the sockets. Senders must be destroyed
 * first. NULL is a no-op. */
LC_API void lc_prefill_destroy(lc_prefill_t *prefill);
/* The rank's engine (owned by the lc_prefill_t): batches, chunks, step
 * records, sessions and metrics. */
LC_API int lc_prefill_engine(lc_prefill_t *prefill, lc_engine_t **out);
/* The control endpoint D ranks send to ("tcp://host:port"). */
LC_API int lc_prefill_endpoint(const lc_prefill_t *prefill, char *buf, size_t cap);
/* Control-plane counters by name ("msgs_malformed", "registrations",
 * "registrations_refused", "transfer_infos", "cancels", "statuses",
 * "layer_updates", "msgs_sent", "msgs_received", "send_failures"...;
 * "statuses_at_once": final statuses the engine's callback sent itself
 * (nothing of the room queued before it, the sockets free), of "statuses";
 * "cancels_refused": CANCELs from an unregistered session, or for a room
 * that session is not a destination of; "session_mismatches": messages
 * naming a known session without its secret (or, with CURVE, from another
 * key); "session_incarnations": REGISTERs of a known session id with a new
 * secret; "msgs_old_version": messages of another protocol version;
 * "route_conflicts": refreshes of the rank's route refused because another
 * P took it; "route_refresh_failures": refreshes that failed otherwise;
 * "inbox_conns_evicted": TCP connections the inbox closed, having proven
 * nothing, to take newer ones past its caps; "inbox_conns_refused": those it
 * refused, every connection in the way proven or out of descriptors).
 * -ENOENT for an unknown name. */
LC_API int lc_prefill_counter(lc_prefill_t *prefill, const char *name, uint64_t *out);
/* Block until a room of this rank's engine has changed status since the
 * last call (returns 1), or timeout_ms passed (0; 0 checks without
 * blocking, < 0 waits without a deadline). After it returns 1, poll the
 * senders: any change after that poll wakes the next call. Coalesced (many
 * changes, one wake) and sometimes spurious, never lost. One waiting
 * thread at a time. Errors: -EINVAL, -errno of poll(2). */
LC_API int lc_prefill_wait(lc_prefill_t *prefill, int timeout_ms);
/* A file descriptor that polls readable (POLLIN) while lc_prefill_wait
 * would return 1 at once: for an event loop beside its own fds. Do not read
 * or close it; call lc_prefill_wait(prefill, 0) to take the wake. */
LC_API int lc_prefill_fd(const lc_prefill_t *prefill);

/* A sender: P's handle on one room (the request's bootstrap_room). */
typedef struct lc_sender lc_sender_t;

/* A pairing value: opaque bytes that the router gives both halves of one
 * request (P's sender and D's receiver), so that P can tell the D of its
 * own request from anyone else naming the same room id. Use at least 122
 * random bits (a uuid4, vLLM's transfer_id: its 16 raw bytes or its 36
 * characters). Compared in constant time; never logged. */
#define LC_PAIR_MIN 16
#define LC_PAIR_MAX 64

typedef struct lc_sender_params {
	size_t size;   /* sizeof(lc_sender_params_t) */
	uint64_t room; /* the request's bootstrap_room */
	/* The pairing value (copied), pair_len LC_PAIR_MIN..LC_PAIR_MAX bytes;
	 * NULL and 0: an unpaired sender, which takes any D's transfer info
	 * for the room (lc_sender_create). */
	const void *pair;
	size_t pair_len;
} lc_sender_params_t;

/* Open the room on the engine (status Bootstrapping; Bootstrapped once the
 * room's D ranks have sent their transfer infos; the engine takes the
 * room's chunks from the start and holds them until then; D is told then, and D
 * counts its room as known to P only from then: lc_receiver_create).
 * Transfer infos that reached this rank before the sender (parked, at most
 * p_park_ms) are taken now, by the control thread, as if they had just
 * arrived.
 * A paired sender takes a transfer info (dummies too) only with the same
 * pairing value: one without, or with another, is refused before anything
 * of the room or the sender changes, counted (infos_refused_pair), logged
 * rate-limited, and its D's room fails ("pairing value mismatch"). Once
 * the room has all its destinations, a further D's transfer info is
 * refused (infos_refused_claimed) and the room goes on for the first; its
 * D is told unless it is a destination of the room already (a repeat:
 * telling it would fail its room at D). After the sender is cancelled or
 * its room ended, a transfer info is refused at once with the reason
 * (infos_refused_ended); after a sender is destroyed, so is one with its
 * pairing value, for as long as this rank remembers it (the last 1,024
 * destroyed), or for an unpaired sender any one within 10 s. Errors:
 * -EINVAL (params, a pair_len out of range), -ENOMEM, -EEXIST (another
 * sender has the room). Any thread. */
LC_API int lc_sender_create_ex(lc_prefill_t *prefill, const lc_sender_params_t *params,
			       lc_sender_t **out);
/* lc_sender_create_ex for an unpaired sender of `room`. */
LC_API int lc_sender_create(lc_prefill_t *prefill, uint64_t room, lc_sender_t **out);
/* The room's metadata (first token, draft candidates: opaque, at most
 * LC_METADATA_MAX bytes; copied), delivered to D with Success. */
LC_API int lc_sender_metadata_set(lc_sender_t *sender, const void *data, size_t len);
/* Poll: returns the status (lc_room_status_t, >= 0) and fills *out if not
 * NULL. A final status (Success or Failed) stays readable. Non-blocking. */
LC_API int lc_sender_poll(lc_sender_t *sender, lc_room_info_t *out);
/* D's decode prefix length (tokens) from its transfer info: P skips that
 * many tokens' pages (prefix / page size) when it builds the room's chunks
 * (lc_chunk_t.dst_index counts from there). -EAGAIN until a non-dummy
 * transfer info was taken by the room (one P refused never sets it);
 * known by the time lc_sender_poll() first returns a status past
 * Bootstrapping because of that info. P need not wait for it: chunks added
 * while the room is Bootstrapping are held by the engine, and with
 * lc_chunk_t.page_tokens set the engine skips D's prefix pages itself
 * (lc_engine_chunk_add). */
LC_API int lc_sender_prefix_len(lc_sender_t *sender, uint64_t *tokens);
/* Abort the room: stop sending, fail it (LC_FAIL_CANCELLED) and tell every
 * D rank once: those whose transfer infos the room holds at once, and any
 * later one (parked or new) when it arrives. LC_ERR_STATE if it already
 * ended. */
LC_API int lc_sender_cancel(lc_sender_t *sender, const char *reason);
/* Forget the room (an unfinished room is aborted first, its D ranks told
 * as by lc_sender_cancel; transfer infos parked before the destroy are
 * refused at once). NULL no-op. */
LC_API void lc_sender_destroy(lc_sender_t *sender);

/* ------------------------------------------------------------------------
 * Decode side: one lc_decode_t per D rank. It owns D's data-plane listener
 * and session token, its control socket (ZeroMQ PULL) for P's status and
 * "layers landed" messages, and its threads: the control thread (messages,
 * deadlines) and d_discover_threads discovery workers (bootstrap lookups,
 * registration, heartbeat).
 *
 * P ranks are chosen as in the spec: the dp group is room % P dp_size; with
 * P_tp = world_size / dp_size ranks per group and D's tp_size:
 *   equal      : P rank tp_rank, required_dst_info_num 1;
 *   D_tp > P_tp: P rank tp_rank * P_tp / D_tp, required D_tp / P_tp;
 *   P_tp > D_tp: P ranks tp_rank * (P_tp / D_tp) + k, the first real, the
 *                others dummy (no pages, no writes), required 1.
 * One real P rank answers per D rank (the page geometry of every rank is
 * the same: layouts are replicated, or sharded identically per rank).
 * ---------------------------------------------------------------------- */

typedef struct lc_decode lc_decode_t;

typedef struct lc_decode_params {
	size_t size;                 /* sizeof(lc_decode_params_t) */
	const lc_layout_t *layout;   /* D's buffers (bases inside `regions`); copied */
	lc_region_t *const *regions; /* regions holding every buffer */
	size_t region_count;
	/* Data-plane listener: "tcp://0.0.0.0:0", "ucx://0.0.0.0:0", "shm://auto";
	 * a wildcard host is never advertised: each P rank is told the address
	 * of this host on the route towards it (docs/deployment.md). */
	const char *listen_url;
	/* Address the control socket binds; NULL = every address, each P rank
	 * told as for listen_url (or LAYERCAKE_ADVERTISE_HOST); another address
	 * is bound and told as it is. */
	const char *host;
	/* D's session id as P knows it; NULL = "d<tp_rank>@host:port". A
	 * restarted D that reuses it clears P's failure record (TTL). */
	const char *session;
	int tp_size; /* D ranks per dp group, >= 1 (0 = 1) */
	int tp_rank; /* this rank within its group */
	/* The deployment's shared secret, as lc_bootstrap_params_t's. When set,
	 * the control socket is CURVE with the keypair derived from it (as
	 * lc_prefill_params_t's), and D hands its REGISTER (token, session
	 * secret) only to a P rank whose route names a key D trusts and that
	 * completes the CURVE handshake with it: a route that cannot prove the
	 * secret fails its rooms, and nothing reaches it. */
	const char *shared_secret;
} lc_decode_params_t;

/* Create the listener, issue the session token, bind the control socket
 * and start the threads. layout, regions, region_count and listen_url have
 * no default: NULL params (or any of them unset) fail with -EINVAL, naming
 * the field in lc_last_error(). Errors: -EINVAL (a buffer outside every region),
 * -ENOMEM, listener errors, LC_ENOTSUP without ZeroMQ or libcurl. */
LC_API int lc_decode_create(lc_ctx_t *ctx, const lc_decode_params_t *params, lc_decode_t **out);
/* Fail and cancel unfinished rooms (grants revoked first), stop the
 * threads, close everything. Receivers must be destroyed first. */
LC_API void lc_decode_destroy(lc_decode_t *decode);
/* The control endpoint ("tcp://host:port"; after a wildcard bind, with
 * this host's primary address: a P rank is told the address on its route). */
LC_API int lc_decode_endpoint(const lc_decode_t *decode, char *buf, size_t cap);
/* Counters by name, as lc_prefill_counter ("heartbeat_failures",
 * "peers_dead" too; "session_mismatches": P messages without the secret
 * this D registered with at that P rank, dropped; "peers_evicted": P
 * addresses forgotten for new ones, d_peers_max; "peers_refused": receivers
 * or lookups refused for want of a place; "routes_refused_fanout": P layouts
 * past d_peer_ranks_max; "channels_closed", "channels_refused": channels to
 * P ranks closed idle or for the cap, rooms that waited for one,
 * d_channels_max). "channels_open" is a gauge: the channels open now. */
LC_API int lc_decode_counter(lc_decode_t *decode, const char *name, uint64_t *out);
/* lc_prefill_wait for D: a receiver's status changed (Bootstrapped,
 * Transferring, Success, Failed). Layers landing do not wake it: poll
 * lc_receiver_layers_ready (O(1)) for those. */
LC_API int lc_decode_wait(lc_decode_t *decode, int timeout_ms);
/* lc_prefill_fd for D. */
LC_API int lc_decode_fd(const lc_decode_t *decode);

/* A receiver: D's handle on one room. */
typedef struct lc_receiver lc_receiver_t;

typedef struct lc_receiver_params {
	size_t size; /* sizeof(lc_receiver_params_t) */
	/* The P instance's bootstrap server, as lc_receiver_create's. */
	const char *bootstrap;
	uint64_t room;
	/* The pairing value P's sender of the room was given (copied; see
	 * lc_sender_params_t), carried in every transfer info of the room;
	 * NULL and 0: none (only an unpaired sender takes the room). */
	const void *pair;
	size_t pair_len;
} lc_receiver_params_t;

/* Start receiving `room` from the P instance whose bootstrap server is at
 * `bootstrap` ("host:port"; NULL = 127.0.0.1:<knob bootstrap_port>, and a
 * room fails after connect_timeout_ms when nothing answers there, saying to
 * give the bootstrap server's address: docs/deployment.md).
 * Non-blocking: discovery (cached per P address) and the session
 * registration (once per P rank) run on D's discovery threads
 * (d_discover_threads; an address that is slow or silent holds one of them
 * and delays only its own rooms); the status moves Bootstrapping ->
 * Bootstrapped. Deadlines: Bootstrapped within bootstrap_timeout_ms; every
 * P rank that gets the room's pages confirms it has a sender for the room
 * (it took the transfer info) within bootstrap_timeout_ms of the create,
 * and never less than connect_timeout_ms after lc_receiver_send, else the
 * room fails (LC_FAIL_BOOTSTRAP_TIMEOUT, "P has no such room"), as it does
 * at once when P refuses the transfer info (a pairing value that differs, a
 * room claimed or ended) or parked it p_park_ms without a sender coming;
 * then Success or Failed within waiting_timeout_ms. D keeps what it learned of
 * at most d_peers_max P addresses whose bootstrap server answered it, and
 * as many not answered yet: a new one takes the place of one with no live
 * room in its half (peers_evicted); an address nobody answers at never
 * takes the place of a P that answered. Errors: -EINVAL, -ENOMEM, -EEXIST
 * (the room has a receiver), -ENOSPC (a new address, and every place of its
 * half is named by a live room; peers_refused). */
LC_API int lc_receiver_create(lc_decode_t *decode, const char *bootstrap, uint64_t room,
			      lc_receiver_t **out);
/* lc_receiver_create with a pairing value. Errors as there, and -EINVAL
 * for params NULL or too short, or a pair_len outside
 * LC_PAIR_MIN..LC_PAIR_MAX (or a pair NULL with pair_len set). */
LC_API int lc_receiver_create_ex(lc_decode_t *decode, const lc_receiver_params_t *params,
				 lc_receiver_t **out);

/* Where the room's KV goes: D page ids (after D's prefix hit), the prefix
 * length in tokens, D's request slot and state slots. Arrays are copied. */
typedef struct lc_receiver_pages {
	size_t size; /* sizeof(lc_receiver_pages_t) */
	const int64_t *pages;
	size_t page_count;
	uint64_t prefix_len;
	int64_t aux_index; /* -1: none */
	const int64_t *state_slots;
	size_t state_slot_count;
} lc_receiver_pages_t;

/* Grant P the room's pages (lc_grant_issue on every buffer) and send the
 * transfer info to every target P rank; status Transferring. The pages
 * must stay valid until the room ends or is cancelled. Once per room.
 * Errors: LC_ERR_STATE (not Bootstrapped yet: poll first, or already
 * sent or final), -EINVAL (a page or slot outside a buffer: nothing is
 * granted; a warning names the room, the id and the buffer's page count,
 * and the context counts it in grants_refused_range), -ENOMEM. */
LC_API int lc_receiver_send(lc_receiver_t *receiver, const lc_receiver_pages_t *pages);
/* Poll: returns the status (>= 0) and fills *out if not NULL
 * (layers_landed too). Non-blocking; deadlines are enforced by the control
 * thread, so a room always reaches a final status. */
LC_API int lc_receiver_poll(lc_receiver_t *receiver, lc_room_info_t *out);
/* How many leading layers of the room have landed at D (a decoder may start
 * layer k once k < this): D's own count, the leading layers every granted
 * byte of which has landed in its memory, whichever P ranks wrote them; P's
 * layer messages are not believed. All layers after Success, 0 once
 * Failed. */
LC_API int lc_receiver_layers_ready(lc_receiver_t *receiver);
/* Copy the metadata P sent with Success into buf; returns its length.
 * LC_ERR_STATE before Success, -ENOSPC if cap is too small. */
LC_API int lc_receiver_metadata(lc_receiver_t *receiver, void *buf, size_t cap);
/* Cancel: revoke the room's grants first (when this returns no write of
 * the room can land, the pages may be freed), then tell every target P
 * rank; status Failed (LC_FAIL_CANCELLED). LC_ERR_STATE if already final. */
LC_API int lc_receiver_cancel(lc_receiver_t *receiver, const char *reason);
/* Forget the room; an unfinished room is cancelled first (grants revoked).
 * NULL is a no-op. */
LC_API void lc_receiver_destroy(lc_receiver_t *receiver);

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_PD_H */
