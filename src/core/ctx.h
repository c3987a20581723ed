/*
 * The state of a context that every layer shares: configuration, counters,
 * regions, grants, accepted tokens, and a slot per transport for its
 * per-context state. src/core/ctx.c keeps it; src/transport/ctx.c creates
 * and destroys contexts (it alone reaches the transports' teardown).
 *
 * Threading: cfg is protected by cfg_lock (writers: lc_ctx_config_set;
 * readers copy values under it with lc__ctx_cfg). counters are atomics.
 * regions and grants carry their own locks. tokens are under token_lock.
 * The lists of live objects (conns, listeners) are under objs_lock, taken
 * before any connection's own lock.
 */
#ifndef LC_CORE_CTX_H
#define LC_CORE_CTX_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/common.h"
#include "core/config.h"
#include "core/grant.h"
#include "core/metrics.h"
#include "core/region.h"

struct lc__io; /* src/transport/io/ */

/* A token this context issued, and its id: a number never 0 and never
 * given twice in the context's life, which is what a data-plane connection
 * keeps of the token it presented and what a room's grant is bound to
 * (core/grant.h, lc__grant_bind): the token's bytes stay here. */
typedef struct lc__token_slot {
	lc_token_t token;
	uint64_t id;
} lc__token_slot_t;

/* Transports with per-context state (src/transport/registry.c). */
#define LC__TRANSPORT_SLOTS 8

struct lc_ctx {
	char name[64];
	uint64_t uid; /* random; names this context in region descriptors */

	pthread_mutex_t cfg_lock;
	lc__config_t cfg;

	_Atomic uint64_t counters[LC__CNT_COUNT];
	/* Threads started for connections (loop://), at most loop_conn_threads_max:
	 * a peer that names many connections never buys a thread each. */
	_Atomic int conn_threads;

	lc__regions_t regions;
	lc__grant_table_t *grants;

	pthread_mutex_t token_lock;
	lc__token_slot_t *tokens; /* issued and not revoked */
	size_t ntokens, token_cap;
	uint64_t token_ids; /* ids given so far: the next token's is one more */

	pthread_mutex_t objs_lock;
	struct lc_conn *conns;                /* doubly linked through conn->ctx_next/prev */
	struct lc_listener *listeners;        /* linked through listener->ctx_next/prev */
	struct lc__io *io;                    /* created at first use, under objs_lock */
	void *ctx_state[LC__TRANSPORT_SLOTS]; /* by registry index, under objs_lock */

	/* Copy engines for device kinds (core/copier.c): made under copy_lock,
	 * read without it once set. */
	pthread_mutex_t copy_lock;
	struct lc__copier *_Atomic copy_sim;
	struct lc__copier *_Atomic copy_cuda[16]; /* LC__COPIER_DEVICES */
	/* The host staging ring of device-kind sources (transport/stage.c),
	 * made at first use. */
	struct lc__stage *stage;
};

/* Fill a zeroed context's own state; undo with lc__ctx_fini. */
int lc__ctx_init(lc_ctx_t *ctx, const char *name);
void lc__ctx_fini(lc_ctx_t *ctx);

/* A config value, read under the lock. */
int64_t lc__ctx_cfg(lc_ctx_t *ctx, enum lc__config_field field);
/* Whether a listener of this context accepts a peer that presented `token`
 * (has_token false: none), at its handshake: a token it issued and has not
 * revoked, or anything when require_token is 0. *who (NULL: not wanted)
 * gets the id of the token presented, or 0 when it is none of this
 * context's (accepted only with require_token 0): what the connection
 * keeps and hands the memory seam with each write, so that a room bound
 * to other tokens refuses it (core/grant.h). A linear scan under
 * token_lock: once per connection (loop://: per batch), never per write. */
bool lc__ctx_token_accepted(lc_ctx_t *ctx, const uint8_t *token, bool has_token, uint64_t *who);
/* The id of a token this context issued and has not revoked: 0, or
 * -ENOENT. */
int lc__ctx_token_id(lc_ctx_t *ctx, const lc_token_t *token, uint64_t *id);

#endif
