/*
 * The contract between the generic data plane (connections, batches,
 * completion queues, deadlines: src/transport/batch.c, conn.c) and each
 * transport (loop.c, tcp.c, shm.c, ucx.c).
 *
 * A transport is a const ops table registered by URL scheme (registry.c).
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

#define LC__URL_MAX 256

typedef struct lc__batch {
	uint64_t id;
	struct lc_conn *conn;
	uint64_t room;
	uint32_t tag;
	uint64_t user_data;
	uint64_t post_ns;
	uint64_t deadline_ns; /* 0: none */
	bool defer;           /* LC_BATCH_DEFER: post() queues without waking */
	lc_write_t *writes;   /* zero-length writes removed; owned */
	size_t nwrites;
	uint64_t bytes;
	_Atomic size_t applied;
	_Atomic int completed;
	_Atomic int refs;
	struct lc__batch *next, *prev; /* conn->pending, under conn->lock */
	void *tp;                      /* free for the transport */
} lc__batch_t;

struct lc_conn {
	lc_ctx_t *ctx;
	const struct lc__transport_ops *ops;
	void *tp; /* the transport's connection state */
	lc_cq_t *cq;
	char url[LC__URL_MAX];
	lc_token_t token;
	bool has_token;
	int lanes;

	pthread_mutex_t lock;
	lc__batch_t pending; /* sentinel of a circular list */
	size_t npending;
	uint64_t next_batch_id;
	_Atomic int closing;

	struct lc_conn *ctx_next, *ctx_prev; /* ctx->conns, under objs_lock */
};

struct lc_listener {
	lc_ctx_t *ctx;
	const struct lc__transport_ops *ops;
	void *tp;
	char url[LC__URL_MAX]; /* resolved by the transport's listen() */
	struct lc_listener *ctx_next, *ctx_prev;
};

typedef struct lc__transport_ops {
	const char *scheme;
	/* Receiver side. listen() parses url, starts serving, and writes the
	 * resolved URL into l->url. */
	int (*listen)(lc_listener_t *l, const char *url);
	/* Stop serving; close accepted connections; join threads. */
	void (*listener_close)(lc_listener_t *l);
	/* Sender side. Must not block on the network. */
	int (*conn_open)(lc_conn_t *c, const char *url);
	/* After return the transport touches no batch and holds no reference. */
	void (*conn_close)(lc_conn_t *c);
	/* Queue a batch (nwrites >= 1); non-blocking. A negative return means
	 * the batch was not taken (and no reference is held). */
	int (*post)(lc_conn_t *c, lc__batch_t *b);
	/* Optional: start batches queued with b->defer (ring the doorbell). A
	 * transport without it starts every batch at post(). */
	void (*flush)(lc_conn_t *c);
	/* Optional: drop unsent writes of a room (its batches are completed). */
	void (*cancel_room)(lc_conn_t *c, uint64_t room);
	/* Optional: a packed descriptor of the peer is being imported. */
	int (*import_region)(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *blob,
			     size_t blob_len);
	/* Optional: append transport keys to a packed region descriptor. */
	int (*pack_region)(lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap);
	/* Optional: set loop faults (loop only). */
	int (*set_faults)(lc_conn_t *c, const lc_loop_faults_t *faults);
} lc__transport_ops_t;

/* Registry (registry.c). */
const lc__transport_ops_t *lc__transport_find(const char *url);

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

/* Receiver helpers (recv.c): validate a write against the context's regions
 * and the room's grants, counting and logging rejections. On success *dst
 * is where the bytes go and *g is a referenced grant entry: bracket every
 * copy with lc__grant_enter/exit and release with lc__grant_put. */
int lc__recv_check(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset,
		   uint64_t length, uint8_t **dst, lc__grant_room_t **g);
/* Check, copy `length` bytes from src, count. For transports whose payload
 * is already addressable (loop, shm). */
int lc__recv_copy(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset,
		  const void *src, uint64_t length);
/* Count applied bytes (transports that copy themselves, e.g. tcp). */
void lc__recv_count(lc_ctx_t *ctx, uint64_t writes, uint64_t bytes);

/* Sender helper: the registered local region holding [addr, addr+len). */
int lc__local_find(lc_ctx_t *ctx, const void *addr, size_t len, lc__region_info_t *out);

/* URL helpers: split "scheme://host:port[?query]". */
int lc__url_host_port(const char *url, const char *scheme, char *host, size_t host_cap,
		      int *port);
/* Value of key in a URL query ("a=1&b=2"); returns 1 if found. */
int lc__url_query_u64(const char *url, const char *key, uint64_t *out);

#endif
