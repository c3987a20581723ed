/*
 * Batches: exactly one completion each, whatever races (acknowledgement,
 * failure, deadline, cancel, close). A batch's deadline is a timer on an
 * I/O loop (io.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cq.h"
#include "transport/transport.h"

void lc__batch_ref(lc__batch_t *b)
{
	atomic_fetch_add(&b->refs, 1);
}

void lc__batch_unref(lc__batch_t *b)
{
	if (atomic_fetch_sub(&b->refs, 1) == 1) {
		if (b->on_free)
			b->on_free(b);
		free(b->writes);
		free(b);
	}
}

bool lc__batch_is_completed(const lc__batch_t *b)
{
	return atomic_load(&((lc__batch_t *)b)->completed) != 0;
}

/* Claim the single completion. */
static bool claim(lc__batch_t *b)
{
	int expected = 0;
	return atomic_compare_exchange_strong(&b->completed, &expected, 1);
}

static void count_outcome(lc_ctx_t *ctx, int status)
{
	switch (status) {
	case 0:
		LC__COUNT(ctx, batches_done);
		break;
	case LC_ERR_EXPIRED:
		LC__COUNT(ctx, batches_expired);
		break;
	case LC_ERR_CANCELLED:
		LC__COUNT(ctx, batches_cancelled);
		break;
	default:
		LC__COUNT(ctx, batches_failed);
		break;
	}
}

/* Deliver a claimed batch's completion and drop the generic reference. */
static void deliver(lc__batch_t *b, int status, const char *reason)
{
	lc_conn_t *c = b->conn;
	lc__io_timer_cancel(&b->timer); /* waits for an expire() running */
	lc_completion_t done = {
		.batch_id = b->id,
		.user_data = b->user_data,
		.room = b->room,
		.tag = b->tag,
		.status = status,
		.bytes = b->bytes,
		.latency_ns = lc__now_ns() - b->post_ns,
	};
	if (reason)
		lc__reason(done.reason, sizeof done.reason, "%s", reason);
	pthread_mutex_lock(&c->lock);
	b->prev->next = b->next;
	b->next->prev = b->prev;
	b->next = b->prev = NULL;
	c->npending--;
	pthread_mutex_unlock(&c->lock);
	/* Outside the connection's lock: posting threads take it too, and the
	 * push may write the queue's eventfd. The connection outlives this
	 * call: its transport threads are joined, and its timer loop quiesced,
	 * before lc_conn_destroy completes the rest itself. */
	lc__cq_push(c->cq, &done);
	count_outcome(c->ctx, status);
	if (status && status != LC_ERR_CANCELLED)
		LC__DEBUG("batch %llu room %llu on %s: %s: %s", (unsigned long long)b->id,
			  (unsigned long long)b->room, c->url, lc_err_name(status), done.reason);
	lc__batch_unref(b);
}

void lc__batch_complete(lc__batch_t *b, int status, const char *reason)
{
	if (claim(b))
		deliver(b, status, reason);
}

void lc__batch_applied(lc__batch_t *b, size_t n)
{
	size_t done = atomic_fetch_add(&b->applied, n) + n;
	if (done >= b->nwrites)
		lc__batch_complete(b, 0, NULL);
}

void lc__batch_fail(lc__batch_t *b, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	va_list ap;
	if (lc__batch_is_completed(b))
		return;
	va_start(ap, fmt);
	lc__vreason(reason, sizeof reason, fmt, ap);
	va_end(ap);
	lc__batch_complete(b, code, reason);
}

typedef bool (*batch_pred)(const lc__batch_t *b, const void *arg);

/* Up to cap pending batches of a connection not completed yet that match a
 * predicate, referenced. No allocation (a connection torn down for want of
 * memory must still complete every batch): callers take them in rounds of
 * cap until a round comes back short; completed batches are not taken
 * again, so the rounds end. */
size_t lc__conn_collect(lc_conn_t *c, batch_pred pred, const void *arg, lc__batch_t **v, size_t cap)
{
	size_t n = 0;
	pthread_mutex_lock(&c->lock);
	for (lc__batch_t *b = c->pending.next; b != &c->pending && n < cap; b = b->next) {
		if (!lc__batch_is_completed(b) && (!pred || pred(b, arg))) {
			lc__batch_ref(b);
			v[n++] = b;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

void lc__conn_fail_all(lc_conn_t *c, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	lc__batch_t *v[64];
	size_t n;
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(reason, sizeof reason, fmt, ap);
	va_end(ap);
	do {
		n = lc__conn_collect(c, NULL, NULL, v, LC__ARRAY_SIZE(v));
		for (size_t i = 0; i < n; i++) {
			lc__batch_complete(v[i], code, reason);
			lc__batch_unref(v[i]);
		}
	} while (n == LC__ARRAY_SIZE(v));
}

/* ---- deadlines: a timer on the I/O loop of the batch's connection
 * (io.h), armed at posting (conn.c), disarmed by the completion. */

static void expire(lc__io_timer_t *tm, uint64_t now)
{
	lc__batch_t *b = LC__CONTAINER_OF(tm, lc__batch_t, timer);
	/* Alive: whoever completes it first waits in lc__io_timer_cancel
	 * until this returns, before dropping the generic reference. */
	lc__batch_fail(b, LC_ERR_EXPIRED,
		       "deadline expired %.1f ms after posting (%zu of %zu writes "
		       "acknowledged) to %s",
		       (double)(now - b->post_ns) / 1e6, atomic_load(&b->applied), b->nwrites,
		       b->conn->url);
}

int lc__batch_arm(lc__batch_t *b)
{
	b->timer.fire = expire;
	return lc__io_timer_arm(b->conn->timer_loop, &b->timer, b->deadline_ns);
}
