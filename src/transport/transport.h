/*
 * The contract between the generic data plane (connections, batches,
 * completion queues, deadlines: src/transport/batch.c, conn.c) and each
 * transport (loop.c, tcp/, shm/, ucx/).
 *
 * A transport is a const ops table, split by role (listener, connection,
 * memory) with a capability mask, and one line in registry.c's table.
 * The generic layer owns batches: it copies the caller's descriptors, gives
 * the batch an id and a deadline, keeps it on the connection's pending list
 * and delivers exactly one completion. The transport moves bytes and reports
 * progress with lc__batch_applied() / lc__batch_fail(); either may race with
 * a deadline or a cancel: the first completion wins, later reports are
 * ignored, and the transport drops whatever it still holds of a batch once
 * lc__batch_is_completed() says so.
 *
 * Lock order: ctx->objs_lock -> conn->lock -> cq->lock. The generic layer
 * never calls into a transport while holding conn->lock, so transports may
 * call the lc__batch_* functions while holding their own locks.
 *
 * References: a batch starts with one reference owned by the generic layer
 * (dropped at completion). A transport that keeps a batch past post() takes
 * its own reference (lc__batch_ref) and drops it when done (lc__batch_unref).
 */
#ifndef LC_TRANSPORT_TRANSPORT_H
#define LC_TRANSPORT_TRANSPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/ctx.h"
#include "transport/io/io.h"
#include "transport/seam.h"

#define LC__URL_MAX 256

typedef struct lc__batch {
	uint64_t id;
	struct lc_conn *conn;
	uint64_t room;
	uint32_t tag;
	uint64_t user_data;
	uint64_t post_ns;
	uint64_t deadline_ns; /* 0: none */
	lc__io_timer_t timer; /* armed while pending with a deadline (batch.c) */
	bool defer;           /* LC_BATCH_DEFER: post() queues without waking */
	bool device_src;      /* a source is device memory: staged first (stage.c) */
	lc_write_t *writes;   /* zero-length writes removed; count 0 or > 1
			       * (strided, only where LC__TP_STRIDED); owned */
	size_t nwrites;
	uint64_t bytes;
	_Atomic size_t applied;
	_Atomic int completed;
	_Atomic int refs;
	struct lc__batch *next, *prev; /* conn->pending, under conn->lock */
	void *priv;                    /* free for the transport */
	/* Staging of device sources (stage.c): run when the last reference
	 * goes, to free the batch's staging space. */
	void (*on_free)(struct lc__batch *b);
	void *stage;
} lc__batch_t;

struct lc_conn {
	lc_ctx_t *ctx;
	const struct lc__transport_ops *ops;
	void *priv; /* the transport's connection state */
	lc_cq_t *cq;
	char url[LC__URL_MAX];
	lc_token_t token;
	bool has_token;
	void *ctx_state; /* the transport's per-context state (ops->init), or NULL */

	pthread_mutex_t lock;
	lc__batch_t pending; /* sentinel of a circular list */
	size_t npending;
	uint64_t next_batch_id;
	_Atomic int closing;
	_Atomic int staging; /* batches of this connection in stage.c */
	/* The transport's I/O task for this connection, if it has one (set by
	 * conn_open): batch deadlines are armed on its loop, else on any. */
	lc__io_task_t *io_task;
	lc__io_loop_t *timer_loop;

	struct lc_conn *ctx_next, *ctx_prev; /* ctx->conns, under objs_lock */
};

/* A peer closed or reset an authenticated connection into a listener (not
 * this side's close): room is the last room it wrote on it (0 if none). On
 * the transport's I/O thread; must not block nor take its owner's locks. */
typedef void (*lc__peer_gone_fn)(void *arg, uint64_t room);

struct lc_listener {
	lc_ctx_t *ctx;
	const struct lc__transport_ops *ops;
	void *priv;
	void *ctx_state;       /* the transport's per-context state, or NULL */
	char url[LC__URL_MAX]; /* resolved by the transport's listen() */
	struct lc_listener *ctx_next, *ctx_prev;
	/* Optional (lc__listener_watch): told when a peer goes (tcp only
	 * today; other transports never call it). */
	_Atomic(lc__peer_gone_fn) peer_gone;
	void *_Atomic peer_gone_arg;
};

/* Watch a listener's peers (D: a P whose lanes close, docs/control-plane.md
 * "A P that is gone"). fn NULL stops. Any thread; a call already running
 * may finish after it returns, lc_listener_destroy waits for it. */
static inline void lc__listener_watch(lc_listener_t *l, lc__peer_gone_fn fn, void *arg)
{
	atomic_store(&l->peer_gone_arg, arg);
	atomic_store(&l->peer_gone, fn);
}

/* For transports: a peer closed an authenticated connection. */
static inline void lc__listener_peer_gone(lc_listener_t *l, uint64_t room)
{
	lc__peer_gone_fn fn = atomic_load(&l->peer_gone);
	if (fn)
		fn(atomic_load(&l->peer_gone_arg), room);
}

/* What a transport can do. The generic layer and the tests ask these bits,
 * never the scheme (docs/architecture.md "Adding a transport"). */
enum {
	/* post() takes strided writes (count > 1) as they are, one descriptor
	 * each; without it the generic layer expands them into their blocks. */
	LC__TP_STRIDED = 1u << 0,
	/* The peer may be another process (or host): a receiver can be killed
	 * or stopped under a batch. Without it the peer lives in this process. */
	LC__TP_REMOTE = 1u << 1,
	/* URLs name a host and port ("SCHEME://127.0.0.1:0" listens on a free
	 * port); without it they name a rendezvous ("SCHEME://auto" picks a
	 * fresh name, an unknown name is an unreachable peer). */
	LC__TP_HOST_PORT = 1u << 2,
	/* lc_loop_set_faults() applies to its connections. */
	LC__TP_FAULTS = 1u << 3,
	/* Moves CUDA sources itself by CUDA IPC (post_device), block by block,
	 * counted in ipc_writes / ipc_exports / ipc_imports. */
	LC__TP_CUDA_IPC = 1u << 4,
	/* Refuses a write past an imported region at the sender (one-sided
	 * puts): the receiver may never see, nor count, it. */
	LC__TP_SENDER_BOUNDS = 1u << 5,
	/* Built only where an outside library was found (LC_HAVE_UCX): once
	 * built in, failing to start is a failure, not an unusable host. */
	LC__TP_NEEDS_LIB = 1u << 6,
	/* A posting thread sends a plain batch itself when the connection is
	 * ready and idle (run to completion), counted in sends_inline. */
	LC__TP_INLINE_SEND = 1u << 7,
};

/* Receiver side. listen() parses url, starts serving, and writes the
 * resolved URL into l->url; close() stops serving, closes accepted
 * connections and joins threads. Both required. */
typedef struct lc__listener_ops {
	int (*listen)(lc_listener_t *l, const char *url);
	void (*close)(lc_listener_t *l);
} lc__listener_ops_t;

/* Sender side. open, close and post are required. */
typedef struct lc__conn_ops {
	/* Must not block on the network. p is the caller's parameters
	 * (transport-specific fields such as tcp's lanes). */
	int (*open)(lc_conn_t *c, const char *url, const lc_conn_params_t *p);
	/* After return the transport touches no batch and holds no reference. */
	void (*close)(lc_conn_t *c);
	/* Queue a batch (nwrites >= 1); non-blocking. A negative return means
	 * the batch was not taken (and no reference is held). */
	int (*post)(lc_conn_t *c, lc__batch_t *b);
	/* Optional: a batch with device-kind sources (b->device_src). The
	 * transport either takes it as post() does and moves the device
	 * bytes itself (0; shm's CUDA IPC), or returns 1: the generic layer
	 * stages it (stage.c) and then calls post(). Negative: not taken. A
	 * transport without it has every such batch staged. */
	int (*post_device)(lc_conn_t *c, lc__batch_t *b);
	/* Optional: start batches queued with b->defer (ring the doorbell). A
	 * transport without it starts every batch at post(). */
	void (*flush)(lc_conn_t *c);
	/* Optional: drop unsent writes of a room (its batches are completed). */
	void (*room_cancel)(lc_conn_t *c, uint64_t room);
	/* Optional: a packed descriptor of the peer is being imported; key is
	 * this transport's key in it (ops->key_tag, already bounds-checked
	 * against the descriptor), or NULL with key_len 0 where it has none.
	 * The key comes from the network: check what it says. */
	int (*import_region)(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *key,
			     size_t key_len);
} lc__conn_ops_t;

/* Memory: what a transport adds to regions. Both optional. */
typedef struct lc__memory_ops {
	/* Write this transport's key for r into buf (at most cap bytes) and
	 * return its length, 0 for none; the registry frames it with
	 * ops->key_tag (lc__transports_pack_region). state is the context's
	 * state of the transport, NULL if never made. */
	int (*pack_region)(lc_ctx_t *ctx, void *state, const lc_region_t *r, uint8_t *buf,
			   size_t cap);
	/* Whether the transport moves a device-kind source region's memory
	 * itself (UCX built with CUDA, docs/gpu.md), so that a batch whose
	 * device sources are all of such kinds skips staging (stage.c). Any
	 * thread; must not block. */
	bool (*moves_kind)(lc_conn_t *c, int kind, int device);
} lc__memory_ops_t;

typedef struct lc__transport_ops {
	const char *scheme;
	uint32_t caps;    /* LC__TP_* */
	uint16_t key_tag; /* its keys' tag in packed descriptors (LC__KEY_TAG_*), 0: none */
	/* Optional: per-context state, made by the generic layer at the
	 * context's first listener or connection of the transport and handed
	 * to it in l->ctx_state / c->ctx_state (and to pack_region), so that a
	 * transport never looks itself up; freed by fini() when the context is
	 * destroyed, after every connection and listener of it closed. */
	int (*init)(lc_ctx_t *ctx, void **state);
	void (*fini)(lc_ctx_t *ctx, void *state);
	lc__listener_ops_t listener;
	lc__conn_ops_t conn;
	lc__memory_ops_t memory;
} lc__transport_ops_t;

/* Registry (registry.c). The transport of url's scheme, or NULL. */
const lc__transport_ops_t *lc__transport_find(const char *url);
/* The transport's state for ctx, made by its init() at first use. */
int lc__transport_state(lc_ctx_t *ctx, const lc__transport_ops_t *ops, void **out);
/* Every transport's key for r, each framed by its tag and length
 * (core/region.h), into buf; returns the bytes written. */
int lc__transports_pack_region(lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap);

/* Batches (batch.c). */
void lc__batch_ref(lc__batch_t *b);
void lc__batch_unref(lc__batch_t *b);
bool lc__batch_is_completed(const lc__batch_t *b);
/* n more writes are in place at the receiver; completes at nwrites. */
void lc__batch_applied(lc__batch_t *b, size_t n);
/* Complete with a failure (first completion wins). */
void lc__batch_fail(lc__batch_t *b, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fail every pending batch of the connection (peer gone, stalled). */
void lc__conn_fail_all(lc_conn_t *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* URL helpers: split "scheme://host:port[?query]". */
int lc__url_host_port(const char *url, const char *scheme, char *host, size_t host_cap, int *port);
/* Value of key in a URL query ("a=1&b=2"); returns 1 if found. */
int lc__url_query_u64(const char *url, const char *key, uint64_t *out);

#endif
