/* Generic data-plane internals shared by batch.c, conn.c and the API layer
 * (not for transports: they use transport.h). */
#ifndef LC_TRANSPORT_GENERIC_H
#define LC_TRANSPORT_GENERIC_H

#include "transport/transport.h"

void lc__batch_complete(lc__batch_t *b, int status, const char *reason);
size_t lc__conn_collect(lc_conn_t *c, bool (*pred)(const lc__batch_t *, const void *),
			const void *arg, lc__batch_t **v, size_t cap);
/* Arm b's deadline (b->deadline_ns, set) on its connection's timer loop;
 * under conn->lock as b is linked (conn.c), so that whoever completes b
 * finds it armed and disarms it. */
int lc__batch_arm(lc__batch_t *b);
/*
 * The engine's post (trusted; not public): writes is a malloc'd array of n
 * descriptors the caller built and checked itself: none of length zero,
 * count 0 or 1 (one block) or a strided write whose blocks do not overlap,
 * every source inside a registered region of c's context, bytes their
 * total, device_src whether any source may be device memory. The array
 * becomes the batch's (freed by it, also on failure): no copy and no
 * per-write region lookup. params as lc_batch_post's, already checked.
 * Errors as lc_batch_post's.
 */
int lc__batch_post_trusted(lc_conn_t *c, lc_write_t *writes, size_t n, uint64_t bytes,
			   bool device_src, const lc_batch_params_t *params, uint64_t *batch_id);
/* Free every transport's per-context state (registry.c); the context has no
 * connection or listener left. */
void lc__transports_fini(lc_ctx_t *ctx);

#endif
