/* Completion queues: a ring of completions and an eventfd for poll(). */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/common.h"
#include "core/ctx.h"
#include "transport/cq.h"

int lc_cq_create(lc_ctx_t *ctx, lc_cq_t **out)
{
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_cq_create: %s is NULL", !ctx ? "ctx" : "out");
	lc_cq_t *cq = calloc(1, sizeof *cq);
	if (!cq)
		return -ENOMEM;
	cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cq->efd < 0) {
		int rc = -errno;
		free(cq);
		return rc;
	}
	cq->ctx = ctx;
	cq->spin_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_cq_spin_us) * 1000;
	pthread_mutex_init(&cq->lock, NULL);
	pthread_rwlock_init(&cq->pollers_lock, NULL);
	pthread_cond_init(&cq->idle, NULL);
	*out = cq;
	return 0;
}

static void efd_signal(lc_cq_t *cq)
{
	uint64_t one = 1;
	if (write(cq->efd, &one, sizeof one) < 0)
		LC__ERROR("completion queue eventfd write: %s", strerror(errno));
}

int lc_cq_shutdown(lc_cq_t *cq)
{
	if (!cq)
		return LC__FAIL(-EINVAL, "lc_cq_shutdown: cq is NULL");
	/* Set before the write: a waiter woken by it, or a poll that drains it
	 * (lc_cq_poll writes it again), sees the flag. */
	atomic_store(&cq->closing, true);
	efd_signal(cq);
	return 0;
}

void lc_cq_destroy(lc_cq_t *cq)
{
	if (!cq)
		return;
	lc_cq_shutdown(cq);
	pthread_mutex_lock(&cq->lock);
	while (cq->waiters)
		pthread_cond_wait(&cq->idle, &cq->lock);
	pthread_mutex_unlock(&cq->lock);
	close(cq->efd);
	pthread_cond_destroy(&cq->idle);
	pthread_mutex_destroy(&cq->lock);
	pthread_rwlock_destroy(&cq->pollers_lock);
	free(cq->ring);
	free(cq);
}

int lc_cq_fd(lc_cq_t *cq)
{
	return cq ? cq->efd : -EINVAL;
}

int lc__cq_reserve(lc_cq_t *cq)
{
	int rc = 0;
	pthread_mutex_lock(&cq->lock);
	if (cq->count + cq->reserved + 1 > cq->cap) {
		size_t ncap = cq->cap ? cq->cap * 2 : 64;
		lc_completion_t *nr = malloc(ncap * sizeof *nr);
		if (!nr) {
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < cq->count; i++)
			nr[i] = cq->ring[(cq->head + i) % cq->cap];
		free(cq->ring);
		cq->ring = nr;
		cq->cap = ncap;
		cq->head = 0;
	}
	cq->reserved++;
out:
	pthread_mutex_unlock(&cq->lock);
	return rc;
}

void lc__cq_unreserve(lc_cq_t *cq)
{
	pthread_mutex_lock(&cq->lock);
	cq->reserved--;
	pthread_mutex_unlock(&cq->lock);
}

void lc__cq_push(lc_cq_t *cq, const lc_completion_t *c)
{
	uint64_t one = 1;
	bool signal = false, unarmed;
	pthread_mutex_lock(&cq->lock);
	cq->ring[(cq->head + cq->count) % cq->cap] = *c;
	cq->reserved--;
	atomic_fetch_add_explicit(&cq->pushes, 1, memory_order_release);
	if (cq->arm_mode) {
		signal = cq->armed;
		cq->armed = false;
		cq->count++;
	} else {
		signal = cq->count++ == 0;
		if (signal && cq->spinners) {
			cq->efd_owed = true; /* the spinner polls: no wake needed */
			signal = false;
		}
	}
	unarmed = !cq->arm_mode;
	pthread_mutex_unlock(&cq->lock);
	/* The eventfd is written, and drained (lc_cq_poll), outside the lock:
	 * a waiter that saw `pushes` move takes the lock at once, and a system
	 * call inside the critical section made it sleep on the mutex, a futex
	 * wait and a wake-up more per completion. */
	if (signal) {
		if (write(cq->efd, &one, sizeof one) < 0)
			LC__ERROR("completion queue eventfd write: %s", strerror(errno));
		if (unarmed)
			atomic_store_explicit(&cq->efd_set, true, memory_order_release);
	}
}

void lc__cq_set_arm_mode(lc_cq_t *cq)
{
	cq->arm_mode = true;
}

bool lc__cq_arm(lc_cq_t *cq)
{
	pthread_mutex_lock(&cq->lock);
	bool empty = cq->count == 0;
	cq->armed = empty;
	pthread_mutex_unlock(&cq->lock);
	return empty;
}

bool lc__cq_expecting(lc_cq_t *cq)
{
	return atomic_load(&cq->reserved) > 0;
}

void lc__cq_disarm(lc_cq_t *cq, bool readable)
{
	uint64_t drain;
	pthread_mutex_lock(&cq->lock);
	cq->armed = false;
	pthread_mutex_unlock(&cq->lock);
	/* A push that armed-fired may write after we woke for another reason:
	 * the next wake is then spurious, and cleared here. */
	if (readable && read(cq->efd, &drain, sizeof drain) < 0 && errno != EAGAIN)
		LC__ERROR("completion queue eventfd read: %s", strerror(errno));
}

int lc_cq_poll(lc_cq_t *cq, lc_completion_t *out, int max)
{
	uint64_t drain_v;
	int n = 0;
	if (!cq || (!out && max > 0) || max < 0)
		return LC__FAIL(-EINVAL, "lc_cq_poll: %s",
				!cq       ? "cq is NULL"
				: max < 0 ? "max < 0"
					  : "out is NULL");
	pthread_mutex_lock(&cq->lock);
	while (n < max && cq->count > 0) {
		out[n++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
	}
	/* Unarmed, the eventfd is readable while completions are queued. It is
	 * drained once the queue is empty and a push wrote it since the last
	 * drain (efd_set is set after the write: a write not yet flagged is
	 * drained by the next empty poll, so a readable fd with nothing queued
	 * lasts at most until then). Outside the lock a push may land between
	 * the unlock and the read, which then eats its write: `pushes` moved,
	 * so the eventfd is written again (a spurious wake, never a lost one). */
	bool drain = !cq->arm_mode && cq->count == 0 &&
		     atomic_exchange_explicit(&cq->efd_set, false, memory_order_acq_rel);
	/* A write a push left to a spinner (cq.h) is owed only while
	 * completions stay queued. */
	bool owed = cq->efd_owed && cq->count > 0;
	if (cq->count == 0 || owed)
		cq->efd_owed = false;
	uint64_t seen = atomic_load_explicit(&cq->pushes, memory_order_relaxed);
	pthread_mutex_unlock(&cq->lock);
	if (owed) {
		uint64_t one = 1;
		if (write(cq->efd, &one, sizeof one) < 0)
			LC__ERROR("completion queue eventfd write: %s", strerror(errno));
		atomic_store_explicit(&cq->efd_set, true, memory_order_release);
	}
	if (drain) {
		if (read(cq->efd, &drain_v, sizeof drain_v) < 0 && errno != EAGAIN)
			LC__ERROR("completion queue eventfd read: %s", strerror(errno));
		if (atomic_load_explicit(&cq->pushes, memory_order_acquire) != seen) {
			efd_signal(cq);
			atomic_store_explicit(&cq->efd_set, true, memory_order_release);
		} else if (atomic_load(&cq->closing)) {
			efd_signal(cq); /* the read may have eaten lc_cq_shutdown's write */
		}
	}
	return n;
}

void lc__cq_poller_add(lc_cq_t *cq, lc__cq_poller_t *p)
{
	pthread_rwlock_wrlock(&cq->pollers_lock);
	p->next = cq->pollers;
	cq->pollers = p;
	atomic_store(&cq->has_pollers, true);
	pthread_rwlock_unlock(&cq->pollers_lock);
}

void lc__cq_poller_del(lc_cq_t *cq, lc__cq_poller_t *p)
{
	pthread_rwlock_wrlock(&cq->pollers_lock);
	for (lc__cq_poller_t **q = &cq->pollers; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	atomic_store(&cq->has_pollers, cq->pollers != NULL);
	pthread_rwlock_unlock(&cq->pollers_lock);
}

static void call_pollers(lc_cq_t *cq, int how)
{
	for (lc__cq_poller_t *p = cq->pollers; p; p = p->next)
		p->fn(p, how);
}

/* Adaptive polling: while completions are due, watch the push count for
 * up to spin_ns (and the caller's deadline), yielding the core between
 * looks so that the thread about to push can run on it; a thread with
 * nothing in flight goes to sleep at once. Pollers (cq.h) look too: a
 * completion a peer left in shared memory is then taken on this thread,
 * with no hand-off from a loop thread. */
static void spin(lc_cq_t *cq, uint64_t deadline)
{
	uint64_t seen = atomic_load_explicit(&cq->pushes, memory_order_acquire);
	uint64_t until = lc__now_ns() + cq->spin_ns;
	if (deadline && deadline < until)
		until = deadline;
	bool polls = atomic_load_explicit(&cq->has_pollers, memory_order_relaxed);
	pthread_mutex_lock(&cq->lock);
	cq->spinners++; /* a push meanwhile leaves the eventfd to us */
	pthread_mutex_unlock(&cq->lock);
	if (polls) {
		pthread_rwlock_rdlock(&cq->pollers_lock);
		call_pollers(cq, LC__CQ_SPIN_BEGIN);
	}
	while (atomic_load_explicit(&cq->reserved, memory_order_relaxed) &&
	       atomic_load_explicit(&cq->pushes, memory_order_acquire) == seen &&
	       !atomic_load_explicit(&cq->closing, memory_order_relaxed) && lc__now_ns() < until) {
		if (polls) {
			call_pollers(cq, LC__CQ_SPIN_LOOK);
			if (atomic_load_explicit(&cq->pushes, memory_order_acquire) != seen)
				break;
		}
		sched_yield();
	}
	if (polls) {
		call_pollers(cq, LC__CQ_SPIN_END);
		pthread_rwlock_unlock(&cq->pollers_lock);
	}
	/* The caller polls next (lc_cq_wait), before any sleep. */
	pthread_mutex_lock(&cq->lock);
	cq->spinners--;
	pthread_mutex_unlock(&cq->lock);
}

static int wait_loop(lc_cq_t *cq, lc_completion_t *out, int max, int timeout_ms)
{
	uint64_t deadline = timeout_ms >= 0 ? lc__now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
	bool spun = false;
	for (;;) {
		int n = lc_cq_poll(cq, out, max);
		if (n != 0)
			return n;
		if (atomic_load(&cq->closing))
			return LC__FAIL_AT(LC_LOG_DEBUG, LC_ERR_CLOSED,
					   "lc_cq_wait: the queue is shutting down");
		if (cq->spin_ns && !spun && timeout_ms != 0) {
			spin(cq, deadline);
			spun = true;
			continue;
		}
		int wait_ms = -1;
		if (timeout_ms >= 0) {
			uint64_t now = lc__now_ns();
			if (now >= deadline)
				return 0;
			wait_ms = (int)((deadline - now + 999999) / 1000000);
		}
		struct pollfd p = {.fd = cq->efd, .events = POLLIN};
		if (poll(&p, 1, wait_ms) < 0 && errno != EINTR)
			return -errno;
	}
}

int lc_cq_wait(lc_cq_t *cq, lc_completion_t *out, int max, int timeout_ms)
{
	/* max 0 could never return a completion: it would spin on a readable
	 * eventfd until the deadline, and for ever without one. */
	if (!cq || !out || max < 1)
		return LC__FAIL(-EINVAL, "lc_cq_wait: %s",
				!cq    ? "cq is NULL"
				: !out ? "out is NULL"
				       : "max < 1 (a wait returns at least one completion)");
	pthread_mutex_lock(&cq->lock);
	cq->waiters++;
	pthread_mutex_unlock(&cq->lock);
	int n = wait_loop(cq, out, max, timeout_ms);
	/* The last of a destroy's waiters to leave lets it free the queue:
	 * nothing of cq is touched after this unlock. */
	pthread_mutex_lock(&cq->lock);
	if (--cq->waiters == 0 && atomic_load(&cq->closing))
		pthread_cond_broadcast(&cq->idle);
	pthread_mutex_unlock(&cq->lock);
	return n;
}
