/*
 * layercake/dataplane.h: the data plane. The context (the root object),
 * host memory, regions, grants, session tokens, completion queues, and the
 * transports behind listeners, connections and batches of writes.
 * Conventions: see layercake/base.h.
 */
#ifndef LAYERCAKE_DATAPLANE_H
#define LAYERCAKE_DATAPLANE_H

#include "layercake/base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Read counter `index` of the table in layercake/base.h (lc_counter_name)
 * into *out. -ERANGE for an index outside 0 .. lc_counter_count()-1,
 * -EINVAL for NULL arguments. */
LC_API int lc_ctx_counter(lc_ctx_t *ctx, int index, uint64_t *out);
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

/* Memory kinds (docs/gpu.md). Host and pinned host memory are read and
 * written by the CPU in place; device kinds never are: their sources and
 * landings go through the context's copy engine for the kind, staged
 * through a host ring (staging_ring_mib). LC_MEM_KIND_SIM is simulated
 * device memory (lc_sim_alloc in layercake/testing.h), for tests without
 * a GPU. */
typedef enum lc_mem_kind {
	LC_MEM_KIND_HOST = 0,
	LC_MEM_KIND_PINNED = 1, /* host memory pinned for a device's DMA */
	LC_MEM_KIND_CUDA = 2,   /* CUDA device memory; device = ordinal */
	LC_MEM_KIND_SIM = 3,    /* simulated device memory (lc_sim_alloc) */
} lc_mem_kind_t;

typedef struct lc_region_params {
	size_t size;    /* sizeof(lc_region_params_t) */
	int32_t kind;   /* lc_mem_kind_t */
	int32_t device; /* device ordinal for LC_MEM_KIND_CUDA; 0 otherwise */
} lc_region_params_t;

/* Register [addr, addr+len) as memory of the given kind (NULL params:
 * as lc_region_register). A kind the library does not know is -EINVAL; a
 * kind that contradicts what the memory is (a simulated range registered
 * as host, host memory registered as sim) or a copy engine that is not
 * available (CUDA without libcuda) is LC_ERR_MEM_KIND (LC_ENOTSUP for
 * CUDA without a driver); both are logged and counted
 * (regions_rejected_kind). */
LC_API int lc_region_register_ex(lc_ctx_t *ctx, void *addr, size_t len,
				 const lc_region_params_t *params, lc_region_t **out);
/* The region's lc_mem_kind_t (LC_MEM_KIND_HOST for NULL). */
LC_API int lc_region_kind(const lc_region_t *region);

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
	uint64_t length;  /* bytes */
	int32_t mem_kind; /* lc_mem_kind_t of the peer's memory */
	int32_t device;   /* its device ordinal (LC_MEM_KIND_CUDA) */
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
LC_API int lc_grant_issue(lc_ctx_t *ctx, uint64_t room, const lc_region_t *region, uint64_t offset,
			  uint64_t length);
/* Revoke every range of `room`, and its bound tokens. When this returns, no
 * write for the room is being applied and none will be applied later: the
 * pages may be freed. Blocks only for writes already being copied
 * (microseconds). Returns the number of ranges revoked (0 if the room had
 * none). */
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

/* Create a random token (16 bytes from getrandom) and accept it from now
 * on. Errors: -EINVAL, -ENOMEM, or -errno of getrandom (-ENOSYS, -EPERM...)
 * when the kernel gives no random bytes: then no token exists, never a
 * weaker one; logged and counted (random_failures). */
LC_API int lc_token_issue(lc_ctx_t *ctx, lc_token_t *out);
/* Stop accepting a token (connections already open stay open). */
LC_API int lc_token_revoke(lc_ctx_t *ctx, const lc_token_t *token);

/* Give `room` to the writers holding `token` (one this context issued with
 * lc_token_issue and has not revoked) and to no one else: from the first
 * bind of a room until its lc_grant_revoke, a write for the room lands only
 * if its connection presented one of the tokens bound to the room at its
 * handshake; a write from any other connection (another token, or none
 * with require_token=0) is refused with LC_ERR_GRANT, lands nothing, is
 * counted in writes_rejected_token and logged (rate-limited). A room never
 * bound takes writes from every connection the context accepted. Bind once
 * per writer's token (several P ranks writing one room: each one's), and
 * before the room's first lc_grant_issue, so that no moment leaves its
 * ranges open to every token; a bind creates the room's entry if needed
 * (nothing lands in it until a range is issued). Any thread. Errors:
 * -EINVAL (NULL ctx or token), -ENOENT (the token is not one this context
 * issued, or was revoked), -ENOMEM. D (lc_decode_t) gives each P rank it
 * registers with a token of its own and binds each room to its P ranks'
 * tokens (docs/security.md, "A token opens only its own rooms"). */
LC_API int lc_grant_bind(lc_ctx_t *ctx, uint64_t room, const lc_token_t *token);

/* ------------------------------------------------------------------------
 * Completion queues: one completion per posted batch, exactly once.
 * ---------------------------------------------------------------------- */

typedef struct lc_cq lc_cq_t;

#define LC_REASON_MAX 160

typedef struct lc_completion {
	uint64_t batch_id;  /* as returned by lc_batch_post */
	uint64_t user_data; /* from lc_batch_params_t */
	uint64_t room;
	uint32_t tag;               /* from lc_batch_params_t, e.g. a layer group */
	int32_t status;             /* 0, LC_ERR_EXPIRED, LC_ERR_CANCELLED, or a failure */
	uint64_t bytes;             /* bytes the batch carried */
	uint64_t latency_ns;        /* post -> completion */
	char reason[LC_REASON_MAX]; /* human text; "" on success */
} lc_completion_t;

LC_API int lc_cq_create(lc_ctx_t *ctx, lc_cq_t **out);
/* The queue must not be in use by a live connection. Threads waiting in
 * lc_cq_wait on it are woken (as by lc_cq_shutdown) and have returned
 * before the queue is freed: destroy blocks until then. A call on the
 * queue that begins once destroy has begun is a use after free. */
LC_API void lc_cq_destroy(lc_cq_t *cq);
/* Wake every thread waiting in lc_cq_wait on this queue, and make every
 * later lc_cq_wait return at once: with completions queued it returns
 * them, else LC_ERR_CLOSED. lc_cq_poll works as before; the fd stays
 * readable from now on. For a binding that must get its waiters out of
 * the library before it destroys the queue (a thread between its own
 * check and the call would miss a wake that is not sticky). Idempotent;
 * any thread; does not block. -EINVAL for NULL. */
LC_API int lc_cq_shutdown(lc_cq_t *cq);
/* A file descriptor that is readable while completions are queued (level
 * triggered; for poll/epoll/asyncio). Owned by the queue. It may stay
 * readable with nothing queued until the next lc_cq_poll, which clears it:
 * a reader polls, and waits again on an empty result (a spurious wake,
 * never a lost one). */
LC_API int lc_cq_fd(lc_cq_t *cq);
/* Move up to max completions into out without blocking; returns how many. */
LC_API int lc_cq_poll(lc_cq_t *cq, lc_completion_t *out, int max);
/* Like lc_cq_poll, but waits up to timeout_ms (-1 waits forever, which only
 * the caller may choose) for at least one. Returns 0 on timeout,
 * LC_ERR_CLOSED once the queue is shut down (lc_cq_shutdown, lc_cq_destroy)
 * with nothing queued, -EINVAL for max < 1 (it could return none). */
LC_API int lc_cq_wait(lc_cq_t *cq, lc_completion_t *out, int max, int timeout_ms);

/* ------------------------------------------------------------------------
 * Transports, listeners and connections.
 *
 * URLs: "loop://NAME" (in-process, with fault injection: layercake/testing.h),
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
 * cannot be reached within connect_timeout_ms. params->cq has no default,
 * so NULL params (or a NULL cq) fail with -EINVAL, saying so in
 * lc_last_error(). */
LC_API int lc_conn_create(lc_ctx_t *ctx, const char *url, const lc_conn_params_t *params,
			  lc_conn_t **out);
/* Pending batches complete with LC_ERR_CANCELLED before this returns. */
LC_API void lc_conn_destroy(lc_conn_t *conn);

/* Import a packed region descriptor of the peer, so that writes may name it.
 * Required before posting writes to that region. */
LC_API int lc_conn_import_region(lc_conn_t *conn, const void *desc, size_t len,
				 uint32_t *region_id_out);

/* One write: copy `length` bytes from local memory (inside a region of the
 * sending context) to `remote_offset` of the peer's region. A strided write
 * (count > 1) moves count blocks of `length` bytes each, block i from
 * local + i * local_stride to remote_offset + i * remote_stride (a token-
 * major page's share under heterogeneous TP: one descriptor per page, not
 * one per token). count 0 or 1 is one contiguous block (the strides are
 * then ignored). Strides must be >= length (blocks do not overlap), count
 * <= LC_WRITE_MAX_COUNT; every block must lie in a region of the sender
 * and, at the receiver, in the named region (else -EINVAL at post, or the
 * batch fails with LC_ERR_OUT_OF_REGION / LC_ERR_GRANT at the receiver). The
 * batch's bytes count count * length. */
typedef struct lc_write {
	const void *local;
	uint64_t remote_offset;
	uint64_t length; /* bytes of one block */
	uint32_t remote_region;
	uint32_t count;         /* blocks; 0 or 1: one block */
	uint64_t local_stride;  /* bytes between blocks at the sender */
	uint64_t remote_stride; /* bytes between blocks at the receiver */
} lc_write_t;

/* The most blocks of one strided write (tokens per page). */
#define LC_WRITE_MAX_COUNT 65536u

typedef struct lc_batch_params {
	size_t size;        /* sizeof(lc_batch_params_t) */
	uint64_t room;      /* the room the writes belong to (grant key) */
	uint32_t tag;       /* free for the caller, e.g. a layer group */
	uint32_t flags;     /* LC_BATCH_* */
	int64_t timeout_ms; /* 0 = config batch_timeout_ms; < 0 = no deadline (so is one
			     * too far for the clock, centuries) */
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
LC_API int lc_conn_room_cancel(lc_conn_t *conn, uint64_t room);

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_DATAPLANE_H */
