/*
 * Completion queues. Slots are reserved when a batch is posted, so that
 * delivering its completion never allocates and can never fail.
 *
 * Threading: `lock` protects the ring and the counters; any thread may push
 * (transport threads, the deadline timer, callers cancelling); any thread
 * may poll. The eventfd is readable exactly while count > 0.
 */
#ifndef LC_TRANSPORT_CQ_H
#define LC_TRANSPORT_CQ_H

#include <pthread.h>

#include "layercake.h"

struct lc_cq {
	lc_ctx_t *ctx;
	pthread_mutex_t lock;
	lc_completion_t *ring;
	size_t cap, head, count, reserved;
	int efd;
};

int lc__cq_reserve(lc_cq_t *cq);
void lc__cq_unreserve(lc_cq_t *cq);
/* Consumes one reservation. */
void lc__cq_push(lc_cq_t *cq, const lc_completion_t *c);

#endif
