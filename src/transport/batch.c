/*
 * Batches: exactly one completion each, whatever races (acknowledgement,
 * failure, deadline, cancel, close). The deadline timer of a context lives
 * here too.
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
	 * call: its transport threads are joined and the timer unlinked before
	 * lc_conn_destroy completes the rest itself. */
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

/* ---- deadline timer: one thread per context, started when the context is
 * created (lc_ctx_create). It scans pending batches under objs_lock (so a connection
 * cannot be destroyed under it) and sleeps until the earliest deadline. */

struct lc__batch_timer {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, kicked;
	_Atomic uint64_t next_wake; /* written under lock, read without by kick */
};

static uint64_t expire_due(lc_ctx_t *ctx, uint64_t now)
{
	uint64_t next = now + 1000000000ull;
	pthread_mutex_lock(&ctx->objs_lock);
	for (lc_conn_t *c = ctx->conns; c; c = c->ctx_next) {
		lc__batch_t *due[64];
		size_t ndue = 0;
		pthread_mutex_lock(&c->lock);
		for (lc__batch_t *b = c->pending.next; b != &c->pending; b = b->next) {
			if (!b->deadline_ns)
				continue;
			if (b->deadline_ns <= now && ndue < LC__ARRAY_SIZE(due)) {
				lc__batch_ref(b);
				due[ndue++] = b;
			} else if (b->deadline_ns < next) {
				next = b->deadline_ns;
			}
		}
		pthread_mutex_unlock(&c->lock);
		if (ndue == LC__ARRAY_SIZE(due))
			next = now; /* more are due: come back at once */
		for (size_t i = 0; i < ndue; i++) {
			lc__batch_t *b = due[i];
			lc__batch_fail(b, LC_ERR_EXPIRED,
				       "deadline expired %.1f ms after posting (%zu of %zu writes "
				       "acknowledged) to %s",
				       (double)(now - b->post_ns) / 1e6, atomic_load(&b->applied),
				       b->nwrites, c->url);
			lc__batch_unref(b);
		}
	}
	pthread_mutex_unlock(&ctx->objs_lock);
	return next;
}

static void *timer_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-timer");
	lc_ctx_t *ctx = arg;
	struct lc__batch_timer *t = ctx->timer;
	for (;;) {
		uint64_t next = expire_due(ctx, lc__now_ns());
		pthread_mutex_lock(&t->lock);
		t->next_wake = next;
		while (!t->stop && !t->kicked && lc__now_ns() < t->next_wake) {
			struct timespec ts = lc__abs_ts(t->next_wake);
			pthread_cond_timedwait(&t->cond, &t->lock, &ts);
		}
		bool stop = t->stop;
		t->kicked = false;
		pthread_mutex_unlock(&t->lock);
		if (stop)
			return NULL;
	}
}

int lc__timer_start(lc_ctx_t *ctx)
{
	pthread_condattr_t attr;
	struct lc__batch_timer *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cond, &attr);
	pthread_condattr_destroy(&attr);
	ctx->timer = t;
	int rc = pthread_create(&t->thread, NULL, timer_main, ctx);
	if (rc) {
		ctx->timer = NULL;
		pthread_cond_destroy(&t->cond);
		pthread_mutex_destroy(&t->lock);
		free(t);
		return -rc;
	}
	return 0;
}

void lc__timer_kick(lc_ctx_t *ctx, uint64_t deadline_ns)
{
	struct lc__batch_timer *t = ctx->timer;
	/* Most deadlines lie beyond the timer's next wake-up (at most 1 s
	 * away): no lock on the posting path for them. */
	if (!t || deadline_ns >= atomic_load(&t->next_wake))
		return;
	pthread_mutex_lock(&t->lock);
	if (deadline_ns < t->next_wake) {
		t->kicked = true;
		pthread_cond_signal(&t->cond);
	}
	pthread_mutex_unlock(&t->lock);
}

void lc__timer_stop(lc_ctx_t *ctx)
{
	struct lc__batch_timer *t = ctx->timer;
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_signal(&t->cond);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
	ctx->timer = NULL;
}
