/*
 * Completion queues. Slots are reserved when a batch is posted, so that
 * delivering its completion never allocates and can never fail.
 *
 * Threading: `lock` protects the ring and the counters; any thread may push
 * (transport threads, I/O loops expiring deadlines, callers cancelling); any thread
 * may poll. The eventfd is readable while count > 0, but for the moment
 * between a push and the poll of a caller spinning in lc_cq_wait, which
 * takes the completion without it.
 *
 * Closing (lc_cq_shutdown, lc_cq_destroy): `closing` is set once and
 * never cleared; from then on a waiter that finds the queue empty returns
 * LC_ERR_CLOSED, and the eventfd stays readable so that a waiter asleep in
 * poll() wakes. `waiters` counts the callers inside lc_cq_wait (under
 * lock); lc_cq_destroy waits on `idle` until none is left, so a thread
 * still waiting when another destroys the queue returns before the queue
 * is freed.
 *
 * Armed mode (the engine's own queue, never handed to users): the eventfd
 * is written only when the consumer has armed the queue before sleeping,
 * and outside the lock; the consumer clears it after waking. Pushes while
 * the consumer works cost no system call and wake nobody.
 */
#ifndef LC_TRANSPORT_CQ_H
#define LC_TRANSPORT_CQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "layercake.h"

/* A transport's look from a waiting caller's spin (lc_cq_wait): a waiter
 * that spins calls fn(p, LC__CQ_SPIN_BEGIN), then LC__CQ_SPIN_LOOK between
 * its looks at the queue, then LC__CQ_SPIN_END; a transport whose peer
 * leaves completions in memory (shm's lane) takes them there, on the
 * caller's thread, instead of waiting for its loop thread to. fn must not
 * block for long and may push to the queue. */
enum { LC__CQ_SPIN_BEGIN, LC__CQ_SPIN_LOOK, LC__CQ_SPIN_END };
typedef struct lc__cq_poller {
	void (*fn)(struct lc__cq_poller *p, int how);
	struct lc__cq_poller *next;
} lc__cq_poller_t;

struct lc_cq {
	lc_ctx_t *ctx;
	pthread_mutex_t lock;
	lc_completion_t *ring;
	size_t cap, head, count;
	_Atomic size_t reserved; /* changed under lock; read without it (lc__cq_expecting, spin) */
	int efd;
	bool arm_mode, armed;
	uint64_t spin_ns;        /* cq_spin_us */
	_Atomic uint64_t pushes; /* completions pushed: what a spinning wait watches */
	_Atomic bool efd_set;    /* unarmed mode: written since the last drain (cq.c) */
	/* Under lock: callers spinning in lc_cq_wait, and an eventfd write
	 * a push left to them (unarmed mode: a spinner polls at once, so the
	 * write and its drain, two system calls per completion, are saved;
	 * lc_cq_poll writes it after all if it leaves completions queued). */
	size_t spinners;
	bool efd_owed;
	/* Pollers: held for reading through a spin, for writing to change. */
	pthread_rwlock_t pollers_lock;
	lc__cq_poller_t *pollers;
	_Atomic bool has_pollers;
	/* Closing (above): `waiters` and `idle` under lock. */
	_Atomic bool closing;
	unsigned waiters;
	pthread_cond_t idle;
};

/* Add or remove a poller (p lives until removed). Removing waits for a
 * spin that is calling it. Lock order: pollers_lock before anything the
 * poller takes; a caller of del holds none of those. */
void lc__cq_poller_add(lc_cq_t *cq, lc__cq_poller_t *p);
void lc__cq_poller_del(lc_cq_t *cq, lc__cq_poller_t *p);

int lc__cq_reserve(lc_cq_t *cq);
void lc__cq_unreserve(lc_cq_t *cq);
/* Consumes one reservation. */
void lc__cq_push(lc_cq_t *cq, const lc_completion_t *c);

/* Armed mode, set once before the queue is used. */
void lc__cq_set_arm_mode(lc_cq_t *cq);
/* Before sleeping on the eventfd: false if completions are queued (do not
 * sleep), else armed so that the next push writes the eventfd. */
bool lc__cq_arm(lc_cq_t *cq);
/* Whether completions are still to come: batches posted whose completion
 * is not pushed yet (their reservations). */
bool lc__cq_expecting(lc_cq_t *cq);
/* After waking: disarm, and clear the eventfd if it was written. */
void lc__cq_disarm(lc_cq_t *cq, bool readable);

#endif
