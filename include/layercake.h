/*
 * layercake: layer-wise KV-cache streaming from a prefill instance (P) to a
 * decode instance (D).
 *
 * This is the only public header. Conventions, once for all functions:
 *
 * - Every call returns int: 0 (or a count) on success, a negative error code
 *   on failure: either -errno (-EINVAL, -ENOMEM, ...) or one of the LC_ERR_*
 *   codes below. lc_strerror() and lc_err_name() describe both kinds.
 * - Output parameters are written only on success.
 * - Handles are opaque. Parameter structs start with a `size` member that
 *   the caller sets to sizeof(the struct); fields past `size` take defaults,
 *   so the structs can grow without breaking callers. Passing NULL for a
 *   parameter struct means "all defaults".
 * - Callbacks: if a call that takes a callback fails, the callback never
 *   runs; otherwise it runs exactly once.
 * - The library never prints to stdout and never exits the process; it logs
 *   through a settable logger (stderr by default, level from LAYERCAKE_LOG).
 * - Pages are borrowed, never owned: memory registered with the library must
 *   stay valid until it is deregistered, and destination pages granted to a
 *   room must stay valid until the grant is revoked.
 * - Threading: unless a function says otherwise, calls on different handles
 *   may run concurrently from any threads, and calls on the same handle are
 *   serialised internally. Destroy functions must not race with other calls
 *   on the handle they destroy.
 */
#ifndef LAYERCAKE_H
#define LAYERCAKE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LC_API __attribute__((visibility("default")))
#else
#define LC_API
#endif

/* ------------------------------------------------------------------------
 * Version
 * ---------------------------------------------------------------------- */

#define LC_VERSION_MAJOR 0
#define LC_VERSION_MINOR 1
#define LC_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
LC_API const char *lc_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH of the library actually loaded. */
LC_API int lc_version_number(void);

/* ------------------------------------------------------------------------
 * Errors: one table. X(name, value, text).
 * ---------------------------------------------------------------------- */

#define LC_ERRNO_CODES(X)                                                      \
	X(LC_OK, 0, "success")                                                 \
	X(LC_EINVAL, -EINVAL, "invalid argument")                              \
	X(LC_ENOMEM, -ENOMEM, "out of memory")                                 \
	X(LC_EAGAIN, -EAGAIN, "try again")                                     \
	X(LC_ENOENT, -ENOENT, "no such entry")                                 \
	X(LC_EEXIST, -EEXIST, "already exists")                                \
	X(LC_EBUSY, -EBUSY, "busy")                                            \
	X(LC_ETIMEDOUT, -ETIMEDOUT, "timed out")                               \
	X(LC_ENOSPC, -ENOSPC, "no space left")                                 \
	X(LC_EMSGSIZE, -EMSGSIZE, "message too long")                          \
	X(LC_ERANGE, -ERANGE, "value out of range")                            \
	X(LC_ENOTSUP, -ENOTSUP, "operation not supported")

#define LC_LIBRARY_CODES(X)                                                    \
	X(LC_ERR_REGION, -1001, "unknown memory region")                       \
	X(LC_ERR_RANGE, -1002, "range outside the registered region")          \
	X(LC_ERR_GRANT, -1003, "write not covered by a grant for its room")    \
	X(LC_ERR_CANCELLED, -1004, "cancelled")                                \
	X(LC_ERR_EXPIRED, -1005, "deadline expired")                           \
	X(LC_ERR_PEER_CLOSED, -1006, "peer closed the connection")             \
	X(LC_ERR_UNREACHABLE, -1007, "peer unreachable")                       \
	X(LC_ERR_AUTH, -1008, "authentication failed")                         \
	X(LC_ERR_PROTO, -1009, "malformed or unexpected message")              \
	X(LC_ERR_NO_TRANSPORT, -1010, "no transport for this URL")             \
	X(LC_ERR_INJECTED, -1011, "injected fault")                            \
	X(LC_ERR_STALLED, -1012, "no progress within the progress deadline")   \
	X(LC_ERR_GEOMETRY, -1013, "page geometry differs between P and D")     \
	X(LC_ERR_SESSION_FAILED, -1014, "session failed and is blocked")       \
	X(LC_ERR_CLOSED, -1015, "handle is closing")                           \
	X(LC_ERR_STATE, -1016, "not allowed in the current state")             \
	X(LC_ERR_IO, -1017, "transport I/O error")                             \
	X(LC_ERR_BOOTSTRAP, -1018, "bootstrap server error")

#define LC_ERROR_CODES(X) LC_ERRNO_CODES(X) LC_LIBRARY_CODES(X)

enum lc_error {
#define LC__ERR_ENUM(name, value, text) name = (value),
	LC_ERROR_CODES(LC__ERR_ENUM)
#undef LC__ERR_ENUM
};

/* Text for any code returned by the library, including plain -errno values.
 * Never NULL; the string is static. */
LC_API const char *lc_strerror(int code);
/* Symbolic name ("LC_ERR_GRANT", "LC_EINVAL") or "LC_UNKNOWN". Static. */
LC_API const char *lc_err_name(int code);

/* ------------------------------------------------------------------------
 * Logging
 * ---------------------------------------------------------------------- */

typedef enum lc_log_level {
	LC_LOG_OFF = 0,
	LC_LOG_ERROR = 1,
	LC_LOG_WARN = 2,
	LC_LOG_INFO = 3,
	LC_LOG_DEBUG = 4,
	LC_LOG_TRACE = 5,
} lc_log_level_t;

/* Receives one formatted line without a trailing newline. May be called from
 * any library thread, concurrently; must not call back into the library. */
typedef void (*lc_log_cb)(lc_log_level_t level, const char *line, void *arg);

/* Replace the process-wide logger (NULL restores the stderr logger). */
LC_API void lc_log_set_handler(lc_log_cb cb, void *arg);
/* Set the process-wide level. The initial level comes from LAYERCAKE_LOG
 * (off, error, warn, info, debug, trace; default warn). */
LC_API void lc_log_set_level(lc_log_level_t level);
LC_API lc_log_level_t lc_log_get_level(void);
/* Parses "off".."trace" or "0".."5"; -EINVAL otherwise. */
LC_API int lc_log_level_parse(const char *text, lc_log_level_t *out);

/* ------------------------------------------------------------------------
 * Configuration: one table of knobs. Each has a LAYERCAKE_* environment
 * variable, a default and a help line. A context reads the environment when
 * it is created; lc_ctx_config_set() overrides a value afterwards.
 * ---------------------------------------------------------------------- */

typedef struct lc_config_info {
	const char *name;        /* e.g. "tcp_lanes" */
	const char *env;         /* e.g. "LAYERCAKE_TCP_LANES" */
	const char *default_str; /* e.g. "4" */
	const char *help;        /* one line */
	int64_t min;             /* inclusive bounds of the value */
	int64_t max;
} lc_config_info_t;

/* Number of knobs; lc_config_info(i) for 0 <= i < count, NULL past the end. */
LC_API int lc_config_count(void);
LC_API const lc_config_info_t *lc_config_info(int index);

/* ------------------------------------------------------------------------
 * Context: the root object. Owns the regions, grants, listeners and
 * connections created from it, and the library threads that serve them.
 * ---------------------------------------------------------------------- */

typedef struct lc_ctx lc_ctx_t;

typedef struct lc_ctx_params {
	size_t size;      /* sizeof(lc_ctx_params_t) */
	const char *name; /* for log lines; copied; may be NULL */
} lc_ctx_params_t;

/* Create a context; reads LAYERCAKE_* variables. Does not block. */
LC_API int lc_ctx_create(const lc_ctx_params_t *params, lc_ctx_t **out);
/* Destroy: closes every connection and listener (pending batches complete
 * as LC_ERR_CANCELLED), revokes every grant, deregisters every region and
 * joins the library threads. Blocks for at most the time those threads take
 * to notice (bounded by their poll intervals). NULL is a no-op. */
LC_API void lc_ctx_destroy(lc_ctx_t *ctx);

/* Read a knob as a decimal string into buf (NUL-terminated). Returns the
 * length, -ENOENT for an unknown name, -ENOSPC if buf is too small. */
LC_API int lc_ctx_config_get(lc_ctx_t *ctx, const char *name, char *buf, size_t cap);
/* Set a knob from text ("4", "2500"); -ERANGE outside its bounds. Takes
 * effect for objects created afterwards. */
LC_API int lc_ctx_config_set(lc_ctx_t *ctx, const char *name, const char *value);
/* Same, numeric. Returns -ENOENT for an unknown name. */
LC_API int lc_ctx_config_get_int(lc_ctx_t *ctx, const char *name, int64_t *out);

/* Counters of a context (monotonic, since creation). Each is named in
 * lc_counter_name(); lc_ctx_counter() reads one by index. */
LC_API int lc_counter_count(void);
LC_API const char *lc_counter_name(int index);
LC_API uint64_t lc_ctx_counter(lc_ctx_t *ctx, int index);
/* Read one counter by name; -ENOENT if there is no such counter. */
LC_API int lc_ctx_counter_by_name(lc_ctx_t *ctx, const char *name, uint64_t *out);

/* ------------------------------------------------------------------------
 * Host memory allocator, done right for KV regions: 2 MiB aligned, advised
 * as transparent huge pages and touched before it is returned (first touch
 * is slow on virtual machines, and must not happen inside a timed path).
 * ---------------------------------------------------------------------- */

enum lc_mem_flags {
	/* memfd-backed, so that the shm transport can share it with a peer
	 * process on the same host. */
	LC_MEM_SHAREABLE = 1u << 0,
	/* Do not advise huge pages (for comparisons). */
	LC_MEM_NO_HUGEPAGE = 1u << 1,
};

/* Allocate len bytes (rounded up to 2 MiB), zeroed. Blocks while touching. */
LC_API int lc_mem_alloc(size_t len, unsigned flags, void **out);
/* Free memory from lc_mem_alloc. -EINVAL if ptr did not come from it. */
LC_API int lc_mem_free(void *ptr);

/* ------------------------------------------------------------------------
 * Regions: memory registered with a context. Local regions are the sources
 * of writes; remote peers write into regions they were granted.
 * ---------------------------------------------------------------------- */

typedef struct lc_region lc_region_t;

/* Register [addr, addr+len). The memory stays the caller's. Ids are unique
 * within the context and never reused while it lives. */
LC_API int lc_region_register(lc_ctx_t *ctx, void *addr, size_t len, lc_region_t **out);
/* Revokes every grant on the region, then forgets it. Writes for it that a
 * peer sends afterwards are rejected with LC_ERR_REGION. */
LC_API int lc_region_deregister(lc_region_t *region);
LC_API uint32_t lc_region_id(const lc_region_t *region);
LC_API void *lc_region_addr(const lc_region_t *region);
LC_API size_t lc_region_length(const lc_region_t *region);

/* Maximum size of a packed region descriptor. */
#define LC_REGION_DESC_MAX 512

/* Pack the remote descriptor of a region (what a peer needs to address
 * writes to it: owner id, region id, length and transport keys), to carry
 * over the control plane. Returns the packed length. Little-endian,
 * versioned; see docs/protocol.md. */
LC_API int lc_region_pack(const lc_region_t *region, void *buf, size_t cap);

/* A decoded descriptor. */
typedef struct lc_region_desc {
	uint64_t owner;     /* id of the owning context (random per context) */
	uint32_t region_id; /* id to name in lc_write_t.remote_region */
	uint32_t flags;
	uint64_t length; /* bytes */
} lc_region_desc_t;

/* Decode and validate a packed descriptor (strict length checks). */
LC_API int lc_region_unpack(const void *buf, size_t len, lc_region_desc_t *out);

/* ------------------------------------------------------------------------
 * Grants (receiver side): the right of peers to write given byte ranges of
 * given regions for a given room. Writes that are not entirely inside one
 * granted range of their room are rejected and land nothing.
 * ---------------------------------------------------------------------- */

/* Allow writes for `room` into [offset, offset+length) of region. Ranges of
 * one room may be added in several calls; adjacent ranges merge. */
LC_API int lc_grant_add(lc_ctx_t *ctx, uint64_t room, const lc_region_t *region,
			uint64_t offset, uint64_t length);
/* Revoke every range of `room`. When this returns, no write for the room is
 * being applied and none will be applied later: the pages may be freed.
 * Blocks only for writes already being copied (microseconds). Returns the
 * number of ranges revoked (0 if the room had none). */
LC_API int lc_grant_revoke(lc_ctx_t *ctx, uint64_t room);

/* ------------------------------------------------------------------------
 * Session tokens: a receiver accepts data-plane connections only from peers
 * presenting a token it issued (unless tokens are disabled with the config
 * knob require_token=0). Tokens travel over the control plane.
 * ---------------------------------------------------------------------- */

#define LC_TOKEN_LEN 16

typedef struct lc_token {
	uint8_t bytes[LC_TOKEN_LEN];
} lc_token_t;

/* Create a random token and accept it from now on. */
LC_API int lc_token_issue(lc_ctx_t *ctx, lc_token_t *out);
/* Stop accepting a token (connections already open stay open). */
LC_API int lc_token_revoke(lc_ctx_t *ctx, const lc_token_t *token);

/* ------------------------------------------------------------------------
 * Completion queues: one completion per posted batch, exactly once.
 * ---------------------------------------------------------------------- */

typedef struct lc_cq lc_cq_t;

#define LC_REASON_MAX 160

typedef struct lc_completion {
	uint64_t batch_id;  /* as returned by lc_batch_post */
	uint64_t user_data; /* from lc_batch_params_t */
	uint64_t room;
	uint32_t tag;    /* from lc_batch_params_t, e.g. a layer group */
	int32_t status;  /* 0, LC_ERR_EXPIRED, LC_ERR_CANCELLED, or a failure */
	uint64_t bytes;  /* bytes the batch carried */
	uint64_t latency_ns; /* post -> completion */
	char reason[LC_REASON_MAX]; /* human text; "" on success */
} lc_completion_t;

LC_API int lc_cq_create(lc_ctx_t *ctx, lc_cq_t **out);
/* The queue must not be in use by a live connection. */
LC_API void lc_cq_destroy(lc_cq_t *cq);
/* A file descriptor that is readable while completions are queued (level
 * triggered; for poll/epoll/asyncio). Owned by the queue. */
LC_API int lc_cq_fd(lc_cq_t *cq);
/* Move up to max completions into out without blocking; returns how many. */
LC_API int lc_cq_poll(lc_cq_t *cq, lc_completion_t *out, int max);
/* Like lc_cq_poll, but waits up to timeout_ms (-1 waits forever, which only
 * the caller may choose) for at least one. Returns 0 on timeout. */
LC_API int lc_cq_wait(lc_cq_t *cq, lc_completion_t *out, int max, int timeout_ms);

/* ------------------------------------------------------------------------
 * Transports, listeners and connections.
 *
 * URLs: "loop://NAME" (in-process, with fault injection),
 *       "tcp://HOST:PORT" (port 0 on listen picks one),
 *       "shm://NAME" (same host; NAME "" or "auto" picks one),
 *       "ucx://HOST:PORT" (where built).
 * ---------------------------------------------------------------------- */

/* Comma-separated schemes built into this library, e.g. "loop,tcp,shm". */
LC_API const char *lc_transports(void);

typedef struct lc_listener lc_listener_t;

/* Start accepting writes into this context's regions at url. The resolved
 * URL (actual port, generated name) is available from lc_listener_url. */
LC_API int lc_listener_create(lc_ctx_t *ctx, const char *url, lc_listener_t **out);
LC_API int lc_listener_url(const lc_listener_t *listener, char *buf, size_t cap);
/* Stops accepting and closes every connection accepted by it. */
LC_API void lc_listener_destroy(lc_listener_t *listener);

typedef struct lc_conn lc_conn_t;

typedef struct lc_conn_params {
	size_t size;      /* sizeof(lc_conn_params_t) */
	lc_cq_t *cq;      /* where completions go; required */
	lc_token_t token; /* presented to the receiver */
	int has_token;    /* 0: send no token */
	int lanes;        /* tcp: parallel connections; 0 = config tcp_lanes */
} lc_conn_params_t;

/* Open a connection to a listener. Never blocks on the network: connecting
 * and the handshake happen in the background; batches posted meanwhile are
 * queued, and fail with LC_ERR_UNREACHABLE (or LC_ERR_AUTH) if the peer
 * cannot be reached within connect_timeout_ms. */
LC_API int lc_conn_create(lc_ctx_t *ctx, const char *url, const lc_conn_params_t *params,
			  lc_conn_t **out);
/* Pending batches complete with LC_ERR_CANCELLED before this returns. */
LC_API void lc_conn_destroy(lc_conn_t *conn);

/* Import a packed region descriptor of the peer, so that writes may name it.
 * Required before posting writes to that region. */
LC_API int lc_conn_import_region(lc_conn_t *conn, const void *desc, size_t len,
				 uint32_t *region_id_out);

/* One write: copy `length` bytes from local memory (inside a region of the
 * sending context) to `remote_offset` of the peer's region. */
typedef struct lc_write {
	const void *local;
	uint64_t remote_offset;
	uint64_t length;
	uint32_t remote_region;
	uint32_t reserved; /* zero */
} lc_write_t;

typedef struct lc_batch_params {
	size_t size;        /* sizeof(lc_batch_params_t) */
	uint64_t room;      /* the room the writes belong to (grant key) */
	uint32_t tag;       /* free for the caller, e.g. a layer group */
	uint32_t flags;     /* LC_BATCH_* */
	int64_t timeout_ms; /* 0 = config batch_timeout_ms; < 0 = no deadline */
	uint64_t user_data; /* echoed in the completion */
} lc_batch_params_t;

/* Flags of lc_batch_params_t. */
enum lc_batch_flags {
	/* Queue the batch without waking the transport: it starts at the
	 * latest at the next lc_conn_flush() or post without this flag on the
	 * connection (earlier if the transport's thread is awake anyway): a
	 * doorbell, so that posting many batches costs one wake-up. Its
	 * deadline runs from the post either way. */
	LC_BATCH_DEFER = 1u << 0,
};

/* Post a batch of writes. Non-blocking; copies the descriptor array. Exactly
 * one completion follows on the connection's queue: status 0 once every
 * write is in place at the receiver (acknowledged, not merely sent), or the
 * first failure, LC_ERR_EXPIRED at the deadline, or LC_ERR_CANCELLED. A
 * failed post (negative return) produces no completion. n may be 0 (the
 * completion follows at once). Returns 0 and the batch id in *batch_id. */
LC_API int lc_batch_post(lc_conn_t *conn, const lc_write_t *writes, size_t n,
			 const lc_batch_params_t *params, uint64_t *batch_id);

/* Start every batch posted with LC_BATCH_DEFER on this connection. */
LC_API int lc_conn_flush(lc_conn_t *conn);

/* Complete every pending batch of `room` on this connection with
 * LC_ERR_CANCELLED and drop its writes not yet sent. Returns how many
 * batches were cancelled. (Receivers make late writes impossible with
 * lc_grant_revoke.) */
LC_API int lc_conn_cancel_room(lc_conn_t *conn, uint64_t room);

/* Faults for the loop transport (tests, users' own tests). Applied to the
 * writes of batches posted afterwards, counting writes from 1 per
 * connection. `mask` says which fields are set. Also settable in the URL:
 * loop://name?fail_write=3&drop_write=2&delay_us=100&fail_after_bytes=4096
 * &fail_room=7&fail_tag=5 */
enum lc_loop_fault_mask {
	LC_FAULT_FAIL_WRITE = 1u << 0,       /* fail the k-th write */
	LC_FAULT_DROP_WRITE = 1u << 1,       /* never complete the k-th write */
	LC_FAULT_DELAY = 1u << 2,            /* sleep delay_us before each write */
	LC_FAULT_FAIL_AFTER_BYTES = 1u << 3, /* fail once this many bytes landed */
	LC_FAULT_FAIL_ROOM = 1u << 4,        /* fail every write of this room */
	LC_FAULT_FAIL_TAG = 1u << 5,         /* fail every write of batches with this tag */
};

typedef struct lc_loop_faults {
	size_t size;   /* sizeof(lc_loop_faults_t) */
	uint32_t mask; /* enum lc_loop_fault_mask */
	uint32_t fail_tag;
	uint64_t fail_write;
	uint64_t drop_write;
	uint64_t delay_us;
	uint64_t fail_after_bytes;
	uint64_t fail_room;
} lc_loop_faults_t;

/* -EINVAL if conn is not a loop connection. */
LC_API int lc_loop_set_faults(lc_conn_t *conn, const lc_loop_faults_t *faults);

/* ==== engine: layout, steps, rooms, engine (issue 3) ==== */

/* ------------------------------------------------------------------------
 * Layouts: the table of P's KV buffers. Page i of buffer b lives at
 * base + i * item_len. A layer is the list of buffers whose `layer` equals
 * its global id. Buffers of kind LC_BUFFER_STATE hold per-request state
 * (mamba) addressed by slot instead of by page.
 * ---------------------------------------------------------------------- */

typedef enum lc_buffer_kind {
	LC_BUFFER_K = 0,      /* MHA keys */
	LC_BUFFER_V = 1,      /* MHA values */
	LC_BUFFER_LATENT = 2, /* MLA latent (compressed KV) */
	LC_BUFFER_QUANT = 3,  /* one of the per_token_head sub-buffers of MLA */
	LC_BUFFER_INDEX = 4,  /* DSA index keys */
	LC_BUFFER_STATE = 5,  /* per-request state (mamba), addressed by slot */
	LC_BUFFER_OTHER = 6,
} lc_buffer_kind_t;

enum lc_buffer_flags {
	LC_BUFFER_DRAFT = 1u << 0, /* belongs to a draft (MTP) layer */
};

typedef struct lc_buffer {
	void *base;        /* first byte; must lie in a region of the engine's ctx */
	uint64_t length;   /* bytes */
	uint64_t item_len; /* bytes per page (per slot for LC_BUFFER_STATE) */
	int32_t layer;     /* global layer id, >= 0 */
	uint32_t kind;     /* lc_buffer_kind_t */
	uint32_t flags;    /* enum lc_buffer_flags */
	uint32_t reserved; /* zero */
} lc_buffer_t;

typedef struct lc_layout lc_layout_t;

/* The general builder: a layout from any table of buffers (copied). Layers
 * are 0 .. max(layer); a layer may have no buffer (a layer without KV still
 * ticks the step counter). Errors: -EINVAL (NULL, n == 0, a negative layer,
 * item_len 0, length not a multiple of item_len, kind out of range),
 * -ENOMEM. Any thread. */
LC_API int lc_layout_create(const lc_buffer_t *buffers, size_t n, lc_layout_t **out);

typedef enum lc_layout_model {
	LC_LAYOUT_MHA = 0, /* K and V per layer: [K_0..K_{L-1}, V_0..V_{L-1}] */
	LC_LAYOUT_MLA = 1, /* one latent buffer per layer: [C_0..C_{L-1}] */
	/* MLA with per_token_head quantisation, three sub-buffers per layer:
	 * [Q0_0..Q0_{L-1}, Q1_0..Q1_{L-1}, Q2_0..Q2_{L-1}] */
	LC_LAYOUT_MLA_PER_TOKEN_HEAD = 2,
	LC_LAYOUT_DSA = 3, /* MLA plus an index buffer: [C_0..C_{L-1}, I_0..I_{L-1}] */
} lc_layout_model_t;

/* Parameters of the model builders. Buffer order is the pool's: the target
 * buffers as described by `model`, then the draft (MTP) buffers in the same
 * pattern over draft_layers, then the state buffers (component-major:
 * [c0 of every state layer, c1 ...]). Draft layers get the global ids after
 * every target KV and state layer id. */
typedef struct lc_layout_params {
	size_t size;           /* sizeof(lc_layout_params_t) */
	uint32_t model;        /* lc_layout_model_t */
	uint32_t layers;       /* target KV layers, >= 1 */
	uint32_t draft_layers; /* draft/MTP KV layers */
	uint32_t reserved;
	uint64_t pages;       /* pages per KV buffer (length = pages * item_len) */
	uint64_t item_len[3]; /* bytes per page of each per-layer component:
			       * MHA {K, V}, MLA {C}, per_token_head {Q0, Q1, Q2},
			       * DSA {C, I}; a zero V/Q1/Q2/I takes item_len[0] */
	void *const *bases;   /* one base per buffer in the order above, or NULL
			       * (all bases 0: a geometry-only layout) */
	/* Optional: global layer id of each target KV layer (hybrid models);
	 * NULL means 0..layers-1. */
	const int32_t *kv_layer_ids;
	/* Optional per-request state buffers (mamba): state_components buffers
	 * for each of the state_layers layers whose global ids are given. */
	uint32_t state_components;
	uint32_t state_layers;
	const int32_t *state_layer_ids;
	uint64_t state_slots;    /* slots per state buffer */
	uint64_t state_item_len; /* bytes per slot */
	void *const *state_bases; /* state_components * state_layers, or NULL */
} lc_layout_params_t;

/* Build the layout of a standard pool. Errors as lc_layout_create, plus
 * -EINVAL for an unknown model or zero layers. Any thread. */
LC_API int lc_layout_build(const lc_layout_params_t *params, lc_layout_t **out);
/* NULL is a no-op. The layout must not be in use by a live engine. */
LC_API void lc_layout_destroy(lc_layout_t *layout);
/* Number of buffers, and a copy of buffer i (-ERANGE past the end). */
LC_API int lc_layout_buffer_count(const lc_layout_t *layout);
LC_API int lc_layout_buffer(const lc_layout_t *layout, int index, lc_buffer_t *out);
/* Number of layers (max global layer id + 1): the cache steps one batch
 * reserves. */
LC_API int lc_layout_layer_count(const lc_layout_t *layout);
/* Indices of the buffers of global layer `layer`, in buffer order, into
 * out[0..cap). Returns how many there are (may exceed cap; only cap are
 * written), -ERANGE for an unknown layer. */
LC_API int lc_layout_layer_buffers(const lc_layout_t *layout, int layer, uint32_t *out,
				   size_t cap);
/* 64-bit fingerprint of the page geometry (per buffer: layer, kind, flags,
 * item_len; not base or length). P and D must have equal fingerprints. */
LC_API uint64_t lc_layout_fingerprint(const lc_layout_t *layout);

/* ------------------------------------------------------------------------
 * Step counters: the wraparound-safe comparison of two counters modulo
 * LC_STEP_MOD. Step t names the (t+1)-th record: it is ready once the
 * counter has moved strictly past t (by less than LC_STEP_MOD / 2).
 * ---------------------------------------------------------------------- */

#define LC_STEP_MOD (UINT64_C(1) << 62)

/* 1 if step `target` is ready given the counter value `current`, else 0. */
LC_API int lc_step_ready(uint64_t current, uint64_t target);

/* ------------------------------------------------------------------------
 * Room status (the seed's TransferPoll values) and failure reasons.
 * Updates are monotonic; Failed is sticky; Success and Failed are final.
 * ---------------------------------------------------------------------- */

typedef enum lc_room_status {
	LC_ROOM_FAILED = 0,
	LC_ROOM_BOOTSTRAPPING = 1,
	LC_ROOM_BOOTSTRAPPED = 2,
	LC_ROOM_WAITING_FOR_INPUT = 3,
	LC_ROOM_TRANSFERRING = 4,
	LC_ROOM_SUCCESS = 5,
} lc_room_status_t;

#define LC_ROOM_FAIL_REASONS(X)                                                \
	X(LC_FAIL_NONE, 0, "none")                                             \
	X(LC_FAIL_TRANSFER, 1, "transfer")                                     \
	X(LC_FAIL_SESSION_BLOCKED, 2, "session_blocked")                       \
	X(LC_FAIL_LAYER_TIMEOUT, 3, "layer_timeout")                           \
	X(LC_FAIL_TRANSFER_TIMEOUT, 4, "transfer_timeout")                     \
	X(LC_FAIL_METADATA_TIMEOUT, 5, "metadata_timeout")                     \
	X(LC_FAIL_BOOTSTRAP_TIMEOUT, 6, "bootstrap_timeout")                   \
	X(LC_FAIL_WAITING_TIMEOUT, 7, "waiting_timeout")                       \
	X(LC_FAIL_CANCELLED, 8, "cancelled")                                   \
	X(LC_FAIL_SESSION_GONE, 9, "session_gone")                             \
	X(LC_FAIL_BAD_INPUT, 10, "bad_input")                                  \
	X(LC_FAIL_STOPPED, 11, "engine_stopped")

typedef enum lc_fail_reason {
#define LC__FAIL_ENUM(name, value, text) name = (value),
	LC_ROOM_FAIL_REASONS(LC__FAIL_ENUM)
#undef LC__FAIL_ENUM
	LC_FAIL_REASON_COUNT
} lc_fail_reason_t;

/* "Failed", "Success", ... ; "Unknown" out of range. Static. */
LC_API const char *lc_room_status_name(int status);
/* Label text of a failure reason ("transfer", "layer_timeout"...). Static. */
LC_API const char *lc_fail_reason_name(int reason);

/* ------------------------------------------------------------------------
 * Histograms (metrics): four buckets per power of two; bucket i counts
 * values <= 2^(i/4) microseconds (and above the previous bound), the last
 * bucket counts everything above (Prometheus le="+Inf" is `count`).
 * ---------------------------------------------------------------------- */

#define LC_HIST_BUCKETS 96

typedef struct lc_histogram {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t buckets[LC_HIST_BUCKETS]; /* not cumulative */
} lc_histogram_t;

/* Upper bound of bucket i in microseconds (2^(i/4)); HUGE_VAL for the last
 * and out of range. */
LC_API double lc_histogram_bucket_le_us(int index);
/* Approximate q-quantile (0 < q <= 1) in microseconds (bucket upper bound
 * interpolated); 0 for an empty histogram. */
LC_API double lc_histogram_quantile_us(const lc_histogram_t *h, double q);

/* ------------------------------------------------------------------------
 * Engine (P side): one thread that streams every room's layers to its
 * destinations as they become ready.
 *
 * Threading contract: every lc_engine_* call may come from any thread; the
 * batch calls (batch_begin, chunk_add, batch_end) belong to the one thread
 * that launches forwards (the scheduler) and must not interleave with each
 * other from several threads. lc_engine_record_cache/aux are lock-free.
 * Callbacks run on the engine thread with no engine lock held; they may
 * call lc_engine_* functions except lc_engine_destroy, and should return
 * quickly (they delay every room's writes).
 * ---------------------------------------------------------------------- */

typedef struct lc_engine lc_engine_t;

/* Status of a room toward one destination session, exactly once per
 * (room, non-dummy destination) when the room ends: LC_ROOM_SUCCESS with
 * the room's metadata blob, or LC_ROOM_FAILED with a reason (metadata NULL).
 * The issue-4 control plane turns it into a P->D status frame. */
typedef void (*lc_room_status_cb)(void *arg, uint64_t room, const char *session, int status,
				  int fail_reason, const char *reason_text, const void *metadata,
				  size_t metadata_len);
/* The leading `layers` layers of every page of the room sent so far have
 * landed at `session` (acknowledged). Called when the number grows. */
typedef void (*lc_layers_landed_cb)(void *arg, uint64_t room, const char *session,
				    uint32_t layers);

typedef struct lc_engine_params {
	size_t size;               /* sizeof(lc_engine_params_t) */
	const lc_layout_t *layout; /* copied; buffers must lie in regions of ctx */
	const char *name;          /* for log lines; copied; may be NULL */
	lc_room_status_cb status_cb;
	void *status_arg;
	lc_layers_landed_cb landed_cb;
	void *landed_arg;
	/* An outside producer (a GPU via cuStreamWriteValue64) writes absolute
	 * step values into the counter words: the engine then polls them
	 * adaptively (spin poll_spin_us, then sleeps growing to poll_sleep_us)
	 * while a layer is awaited. 0: only lc_engine_record_* move them. */
	int external_counter;
	int reserved;
	/* Optional caller-owned counter words (8-byte aligned, e.g. host-mapped
	 * memory); NULL uses words the engine allocates (lc_engine_counter). */
	uint64_t *cache_word;
	uint64_t *aux_word;
} lc_engine_params_t;

/* Create an engine on ctx and start its thread. Reads the knobs
 * layerwise_interval, session_ttl_ms, layer_timeout_ms, metadata_timeout_ms,
 * transfer_timeout_ms, bootstrap_timeout_ms, waiting_timeout_ms,
 * poll_spin_us and poll_sleep_us from ctx. Errors: -EINVAL (no layout,
 * misaligned words), -ENOMEM, or a thread/eventfd errno. */
LC_API int lc_engine_create(lc_ctx_t *ctx, const lc_engine_params_t *params,
			    lc_engine_t **out);
/* Stop the thread; rooms not finished fail with LC_FAIL_STOPPED (status
 * callbacks run for them), sessions' connections are closed. Blocks until
 * the thread has joined. Not from a callback. NULL is a no-op. */
LC_API void lc_engine_destroy(lc_engine_t *engine);

/* --- step counters (producer side) --- */

enum lc_step_counter { LC_STEP_CACHE = 0, LC_STEP_AUX = 1 };

/* CPU producer: advance the cache counter by one (one layer of the current
 * forward written), or the aux counter by one (the batch's metadata
 * written), and wake the engine. Lock-free, any thread, never blocks. Every
 * non-idle batch needs exactly layer_count cache records and one aux
 * record, in order. */
LC_API int lc_engine_record_cache(lc_engine_t *engine);
LC_API int lc_engine_record_aux(lc_engine_t *engine);
/* Address of a counter word (enum lc_step_counter) for an outside producer
 * that writes absolute values modulo LC_STEP_MOD; valid for the engine's
 * life. The engine's own words sit alone in a page-aligned 4 KiB block,
 * ready for cuMemHostRegister. */
LC_API int lc_engine_counter(lc_engine_t *engine, int which, uint64_t **out);

/* --- batches (the seed's add_batch(is_idle)) --- */

/* One chunk of a room produced by the current batch. */
typedef struct lc_chunk {
	size_t size;         /* sizeof(lc_chunk_t) */
	uint64_t room;
	const int64_t *pages; /* P page ids of this chunk; copied */
	size_t page_count;
	/* Index of the chunk's first page in each destination's dst page list
	 * (the seed's index_slice.start; D's list already skips its prefix). */
	uint64_t dst_index;
	int is_last;          /* the last chunk: carries state slots, awaits metadata */
	int reserved;
	const int64_t *state_slots; /* P state (mamba) slots, last chunk only */
	size_t state_slot_count;
	/* P-side partial cache ("MLA L1.5", src ON): this rank owns the pages
	 * where src_mask is 1; src_local are its physical pages for them.
	 * NULL = src OFF. Both of page_count / popcount entries; copied. */
	const uint8_t *src_mask;
	const int64_t *src_local;
	size_t src_local_count;
} lc_chunk_t;

/* Open a batch (one forward of P). Chunks added until lc_engine_batch_end
 * are stamped with the batch's first cache step and aux step. An idle batch
 * reserves nothing and accepts no chunk. LC_ERR_STATE if a batch is open. */
LC_API int lc_engine_batch_begin(lc_engine_t *engine, int is_idle);
/* Add a chunk. Inside a non-idle batch it waits for its layers' steps;
 * outside any batch (non-layer-wise use, after the forward) its layers are
 * ready at once. Errors: LC_ERR_STATE (the open batch is idle; the room
 * is not Bootstrapped yet, already final, or Failed meanwhile), -ENOENT
 * (unknown room), -EINVAL (bad pages or masks), -ENOMEM. Every error but a
 * Failed room is also counted in bad_input and logged. */
LC_API int lc_engine_chunk_add(lc_engine_t *engine, const lc_chunk_t *chunk);
/* Close the batch: a non-idle batch hands its chunks to the engine and
 * advances the reservation by (layer_count, 1) even when it had no chunk.
 * LC_ERR_STATE if no batch is open. Must precede the forward's first
 * record. */
LC_API int lc_engine_batch_end(lc_engine_t *engine);

/* --- heterogeneous tensor parallelism (spec 6.7) --- */

/* What one P rank sends of each page of one buffer to one D rank: bytes
 * [src_offset, src_offset + bytes) of each P page land at dst_offset of the
 * D page, D pages being dst_item_len bytes apart. */
typedef struct lc_fragment {
	uint32_t buffer;       /* P layout buffer index */
	uint32_t reserved;     /* zero */
	uint64_t src_offset;   /* bytes into each P page */
	uint64_t dst_offset;   /* bytes into each D page */
	uint64_t bytes;        /* bytes moved per page, > 0 */
	uint64_t dst_item_len; /* D's bytes per page of this buffer */
} lc_fragment_t;

/* One side's view of one buffer: its TP size, this rank, bytes per page,
 * and bytes per unit (a KV head's slice of a page; unit_len == item_len
 * for a buffer every rank holds whole, such as an MLA latent). */
typedef struct lc_tp_side {
	int tp_size;
	int tp_rank;
	uint64_t item_len;
	uint64_t unit_len;
} lc_tp_side_t;

/* The fragment P rank p->tp_rank sends to D rank d->tp_rank. A side with T
 * ranks of L = item_len / unit_len units each holds G = L * T units; with
 * H = min(Gp, Gd) distinct units, each side's ranks form replica groups
 * of G / H ranks holding the same L units (GQA with more ranks than KV
 * heads; a whole-page buffer at unequal TP). Rank r holds distinct units
 * [(r / rep) * L, (r / rep + 1) * L); the first rank of each P replica group
 * sends the units it shares with D rank d. Equal geometry gives rank p ->
 * rank p, whole pages; an MLA latent at P TP 2, D TP 1 gives rank 0 -> 0
 * and nothing from rank 1 (a dummy); at P TP 1, D TP 2, rank 0 -> both.
 * Returns 1 and fills out's offsets, bytes and dst_item_len (buffer left
 * as it was), 0 if p sends d nothing of this buffer, LC_ERR_GEOMETRY if the
 * two sides cannot be paired (unit lengths differ, a unit count that does
 * not divide), -EINVAL for bad arguments. Pure; any thread. A D rank's P
 * ranks are those with a fragment for it, and a P rank's required
 * destination count those D ranks with a fragment from it. */
LC_API int lc_tp_fragment(const lc_tp_side_t *p, const lc_tp_side_t *d, lc_fragment_t *out);

/* --- sessions (one per D rank) --- */

typedef struct lc_session_params {
	size_t size;      /* sizeof(lc_session_params_t) */
	const char *name; /* D's session id, e.g. "10.0.0.2:7001"; copied */
	const char *url;  /* D's data-plane listener, e.g. "tcp://10.0.0.2:7002" */
	lc_token_t token; /* presented to D */
	int has_token;
	int reserved;
	/* D's packed region descriptors (lc_region_pack) */
	const void *const *region_descs;
	const size_t *region_desc_lens;
	size_t region_count;
	/* Per layout buffer: which descriptor holds it and at what byte offset
	 * D's page 0 (slot 0) of it starts. NULL buffer_region means buffer i
	 * is descriptor i at offset 0 (region_count == buffer count). */
	const uint32_t *buffer_region;
	const uint64_t *buffer_offset; /* NULL = all 0 */
	/* Heterogeneous TP: with fragment_count > 0 only the buffers named
	 * here go to this session, each as its fragment's byte range of every
	 * page (one fragment per buffer, from lc_tp_fragment); NULL/0 means
	 * whole pages of every buffer (equal geometry). Copied. */
	const lc_fragment_t *fragments;
	size_t fragment_count;
} lc_session_params_t;

/* Register (or register again) a D session: connect to its listener (in the
 * background) and import its regions. Registering an existing name clears
 * its failure state (TTL) and replaces its connection; rooms in flight on
 * the old connection fail with LC_FAIL_SESSION_GONE. Errors: -EINVAL,
 * LC_ERR_GEOMETRY (a fragment outside its P or D page, or a buffer named
 * twice), -ENOMEM, or the error of lc_conn_create / lc_conn_import_region. */
LC_API int lc_engine_session_add(lc_engine_t *engine, const lc_session_params_t *params);
/* Forget a session; its unfinished rooms fail (LC_FAIL_SESSION_GONE).
 * -ENOENT if unknown. */
LC_API int lc_engine_session_remove(lc_engine_t *engine, const char *name);
/* 1 if the session is blocked by a recent failure (within session_ttl_ms),
 * 0 if healthy, -ENOENT if unknown. Sets *failures to its failure count. */
LC_API int lc_engine_session_blocked(lc_engine_t *engine, const char *name,
				     uint64_t *failures);

/* --- rooms --- */

/* Open a room (the sender of a request exists): status Bootstrapping.
 * -EEXIST if the room is known (a finished room stays known until its final
 * status was read or it was released; then the id starts fresh). */
LC_API int lc_engine_room_open(lc_engine_t *engine, uint64_t room);

/* D's transfer info for one destination session of a room. */
typedef struct lc_dst_params {
	size_t size;         /* sizeof(lc_dst_params_t) */
	const char *session; /* a registered session name (not needed if dummy) */
	const int64_t *pages; /* D page ids after D's prefix; copied */
	size_t page_count;
	uint64_t prefix_len;  /* D's decode prefix length in tokens (info) */
	int64_t aux_index;    /* D's request slot (info, echoed nowhere) */
	uint32_t required_dst_count; /* required_dst_info_num, >= 1 */
	int is_dummy;         /* a dummy destination: no writes, no status */
	const int64_t *state_slots; /* D state slots; copied */
	size_t state_slot_count;
	/* D-side partial cache (dst ON): mask over the page list, and local
	 * page ids for the masked positions. NULL = dst OFF. */
	const uint8_t *dst_mask;
	const int64_t *dst_local;
	size_t dst_local_count;
} lc_dst_params_t;

/* Add a destination to a room (opening it if unknown, as the seed's
 * monotonic status allows). When required_dst_count distinct sessions have
 * been added the room is Bootstrapped. A destination whose session is
 * blocked fails the room at once (LC_FAIL_SESSION_BLOCKED). Errors:
 * -EINVAL, -ENOENT (unknown session), -EEXIST (session already added),
 * LC_ERR_STATE (room final, or more destinations than required). */
LC_API int lc_engine_room_dst_add(lc_engine_t *engine, uint64_t room,
				  const lc_dst_params_t *dst);
/* Publish the room's metadata (first token, draft ids...; copied, at most
 * LC_METADATA_MAX bytes), delivered with Success. Once per room: -EEXIST
 * after the first; -EMSGSIZE if too long; -ENOENT unknown room. */
#define LC_METADATA_MAX 4096
LC_API int lc_engine_room_metadata_set(lc_engine_t *engine, uint64_t room, const void *data,
				       size_t len);
/* Cancel a room: stop submitting, cancel its posted batches, fail it with
 * LC_FAIL_CANCELLED (every destination notified once). Returns 0, -ENOENT
 * if unknown, LC_ERR_STATE if it already ended. */
LC_API int lc_engine_room_cancel(lc_engine_t *engine, uint64_t room, const char *reason);

typedef struct lc_room_info {
	size_t size;     /* sizeof(lc_room_info_t) */
	int status;      /* lc_room_status_t */
	int fail_reason; /* lc_fail_reason_t */
	char reason[LC_REASON_MAX];
	uint32_t dst_count;      /* destinations added */
	uint32_t required_dst_count;
	uint32_t layers_landed;  /* leading layers landed at every destination */
	uint32_t reserved;
} lc_room_info_t;

/* Read a room's status. Reading a final status (Success or Failed)
 * reports it: the room is removed (its destinations' status callbacks are
 * already queued) and its id may start fresh. A finished room nobody reads
 * is dropped after waiting_timeout_ms. -ENOENT for an unknown room. */
LC_API int lc_engine_room_status(lc_engine_t *engine, uint64_t room, lc_room_info_t *out);
/* Forget a room without reading it; an unfinished room is cancelled first.
 * -ENOENT if unknown. */
LC_API int lc_engine_room_release(lc_engine_t *engine, uint64_t room);

/* --- metrics --- */

typedef struct lc_engine_metrics {
	size_t size; /* sizeof(lc_engine_metrics_t), set by the caller */
	uint64_t rooms_opened;
	uint64_t rooms_succeeded;
	uint64_t rooms_failed;
	uint64_t rooms_failed_by_reason[LC_FAIL_REASON_COUNT];
	uint64_t rooms_expired_unread; /* finished, never read, dropped */
	uint64_t rooms_active;         /* gauge */
	uint64_t chunks_added;
	uint64_t batches_posted;  /* lc_batch_post calls */
	uint64_t batches_failed;
	uint64_t writes_posted;   /* descriptors */
	uint64_t bytes_posted;
	uint64_t bytes_acked;
	uint64_t bad_input;       /* calls refused for bad arguments */
	uint64_t session_failures;
	uint64_t tasks_pending;   /* gauge: queue depth (waiting for steps) */
	uint64_t tasks_inflight;  /* gauge: posted, awaiting acknowledgement */
	uint64_t tasks_pending_max; /* highest queue depth seen */
	uint64_t loop_iterations;
	lc_histogram_t room_latency;      /* open -> final */
	lc_histogram_t group_ack_latency; /* layer group posted -> acknowledged */
	lc_histogram_t step_to_post;      /* step recorded (or first seen) -> posted */
	uint64_t inline_submits; /* step records that posted on the recording thread */
} lc_engine_metrics_t;

/* Copy a consistent snapshot of the metrics (fields up to out->size). */
LC_API int lc_engine_metrics(lc_engine_t *engine, lc_engine_metrics_t *out);

/* ==== end engine ==== */

/* ==== control plane: bootstrap, messages, sender, receiver (issue 4) ==== */

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
/* "host:port" to give P and D ranks ("127.0.0.1:port" for a wildcard
 * bind). Returns the length; -ENOSPC if cap is too small. */
LC_API int lc_bootstrap_addr(const lc_bootstrap_t *bootstrap, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * Prefill side: one lc_prefill_t per P rank. It owns the rank's engine,
 * registers the rank with the bootstrap server, and serves D's messages on
 * its control socket (ZeroMQ PULL, tcp): session registrations (a D whose
 * layout fingerprint differs is refused with a reply naming the
 * difference), transfer infos (added to the engine's rooms) and cancels.
 * The engine's status and "layers landed" events go back to D.
 *
 * Threading: one control thread per lc_prefill_t; every call may come from
 * any thread. Feed chunks with the engine's batch API (lc_prefill_engine).
 * Control-plane security: when LAYERCAKE_SECRET_DIR holds curve.public and
 * curve.secret (z85), every control socket uses ZeroMQ CURVE with that
 * keypair and accepts only peers presenting a public key listed in the
 * directory (curve.public and authorized_keys, one z85 key a line).
 * ---------------------------------------------------------------------- */

typedef struct lc_prefill lc_prefill_t;

typedef struct lc_prefill_params {
	size_t size;               /* sizeof(lc_prefill_params_t) */
	const lc_layout_t *layout; /* P's buffers, in regions of ctx; copied */
	const char *bootstrap;     /* "host:port" of the bootstrap server; required */
	const char *host;          /* address D reaches this rank at; NULL = "127.0.0.1" */
	const char *name;          /* for log lines; may be NULL */
	int world_size;            /* P ranks in all, >= 1 */
	int dp_size;               /* data-parallel groups, divides world_size */
	int engine_rank;           /* this rank, 0 .. world_size-1 */
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
} lc_prefill_params_t;

/* Create the engine (lc_engine_create; knobs from ctx), bind the control
 * socket, start the control thread and register with the bootstrap server
 * (PUT /route: 2 s per try, 5 retries with growing pauses).
 * Blocks for the registration. Errors: -EINVAL, -ENOMEM, the engine's
 * errors, LC_ERR_UNREACHABLE / LC_ERR_AUTH / LC_ERR_BOOTSTRAP from the
 * registration, LC_ENOTSUP without ZeroMQ or libcurl. */
LC_API int lc_prefill_create(lc_ctx_t *ctx, const lc_prefill_params_t *params,
			     lc_prefill_t **out);
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
 * "layer_updates", "msgs_sent", "msgs_received", "send_failures"...).
 * -ENOENT for an unknown name. */
LC_API int lc_prefill_counter(lc_prefill_t *prefill, const char *name, uint64_t *out);

/* A sender: P's handle on one room (the request's bootstrap_room). */
typedef struct lc_sender lc_sender_t;

/* Open the room on the engine (status Bootstrapping; Bootstrapped once the
 * room's D ranks have sent their transfer infos). A room D already
 * announced is adopted. Errors: -EINVAL, -ENOMEM, -EEXIST (another sender
 * has the room). */
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
 * transfer info has arrived; known by the time lc_sender_poll() first
 * returns a status past Bootstrapping because of that info. */
LC_API int lc_sender_prefix_len(lc_sender_t *sender, uint64_t *tokens);
/* Abort the room: stop sending, fail it (LC_FAIL_CANCELLED) and tell every
 * D rank once. LC_ERR_STATE if it already ended. */
LC_API int lc_sender_abort(lc_sender_t *sender, const char *reason);
/* Forget the room (an unfinished room is aborted first). NULL no-op. */
LC_API void lc_sender_destroy(lc_sender_t *sender);

/* ------------------------------------------------------------------------
 * Decode side: one lc_decode_t per D rank. It owns D's data-plane listener
 * and session token, its control socket (ZeroMQ PULL) for P's status and
 * "layers landed" messages, and two threads: the control thread (messages,
 * deadlines) and the discovery thread (bootstrap lookups, heartbeat).
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
	size_t size;               /* sizeof(lc_decode_params_t) */
	const lc_layout_t *layout; /* D's buffers (bases inside `regions`); copied */
	lc_region_t *const *regions; /* regions holding every buffer */
	size_t region_count;
	const char *listen_url; /* data-plane listener: "tcp://127.0.0.1:0", "shm://auto" */
	const char *host;       /* address P reaches D's control socket at; NULL = "127.0.0.1" */
	/* D's session id as P knows it; NULL = "d<tp_rank>@host:port". A
	 * restarted D that reuses it clears P's failure record (TTL). */
	const char *session;
	int tp_size; /* D ranks per dp group, >= 1 (0 = 1) */
	int tp_rank; /* this rank within its group */
} lc_decode_params_t;

/* Create the listener, issue the session token, bind the control socket
 * and start the threads. Errors: -EINVAL (a buffer outside every region),
 * -ENOMEM, listener errors, LC_ENOTSUP without ZeroMQ or libcurl. */
LC_API int lc_decode_create(lc_ctx_t *ctx, const lc_decode_params_t *params,
			    lc_decode_t **out);
/* Fail and cancel unfinished rooms (grants revoked first), stop the
 * threads, close everything. Receivers must be destroyed first. */
LC_API void lc_decode_destroy(lc_decode_t *decode);
/* The control endpoint P ranks send to ("tcp://host:port"). */
LC_API int lc_decode_endpoint(const lc_decode_t *decode, char *buf, size_t cap);
/* Counters by name, as lc_prefill_counter ("heartbeat_failures",
 * "peers_dead" too). */
LC_API int lc_decode_counter(lc_decode_t *decode, const char *name, uint64_t *out);

/* A receiver: D's handle on one room. */
typedef struct lc_receiver lc_receiver_t;

/* Start receiving `room` from the P instance whose bootstrap server is at
 * `bootstrap` ("host:port"; NULL = 127.0.0.1:<knob bootstrap_port>).
 * Non-blocking: discovery (cached per P address) and the session
 * registration (once per P rank) run on the discovery thread; the status
 * moves Bootstrapping -> Bootstrapped. Deadlines: Bootstrapped within
 * bootstrap_timeout_ms; then Success or Failed within waiting_timeout_ms.
 * Errors: -EINVAL, -ENOMEM, -EEXIST (the room has a receiver). */
LC_API int lc_receiver_create(lc_decode_t *decode, const char *bootstrap, uint64_t room,
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

/* Grant P the room's pages (lc_grant_add on every buffer) and send the
 * transfer info to every target P rank; status Transferring. The pages
 * must stay valid until the room ends or is cancelled. Once per room.
 * Errors: LC_ERR_STATE (not Bootstrapped yet: poll first, or already
 * sent or final), -EINVAL (a page outside a buffer), -ENOMEM. */
LC_API int lc_receiver_send(lc_receiver_t *receiver, const lc_receiver_pages_t *pages);
/* Poll: returns the status (>= 0) and fills *out if not NULL
 * (layers_landed too). Non-blocking; deadlines are enforced by the control
 * thread, so a room always reaches a final status. */
LC_API int lc_receiver_poll(lc_receiver_t *receiver, lc_room_info_t *out);
/* How many leading layers of the room have landed at D (a decoder may start
 * layer k once k < this). */
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

/* ==== end control plane ==== */

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_H */
