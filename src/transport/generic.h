/* Generic data-plane internals shared by batch.c, conn.c and the API layer
 * (not for transports: they use transport.h). */
#ifndef LC_TRANSPORT_GENERIC_H
#define LC_TRANSPORT_GENERIC_H

#include "transport/transport.h"

void lc__batch_complete(lc__batch_t *b, int status, const char *reason);
size_t lc__conn_collect(lc_conn_t *c, bool (*pred)(const lc__batch_t *, const void *),
			const void *arg, lc__batch_t **v, size_t cap);
/* Arm b's deadline (b->deadline_ns, set) on its connection's timer loop;
 * before the transport sees b, so that a completion always disarms it. */
int lc__batch_arm(lc__batch_t *b);
/* Free every transport's per-context state (registry.c); the context has no
 * connection or listener left. */
void lc__transports_fini(lc_ctx_t *ctx);

#endif
