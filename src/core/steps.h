/*
 * Step counters (spec 2.1-2.2): two counters modulo LC_STEP_MOD, `cache`
 * (one tick per layer written) and `aux` (one tick per batch whose metadata
 * is written), each in an 8-byte host word that a CPU producer bumps with
 * lc__steps_record() or an outside producer (a GPU) overwrites with
 * absolute values. Reservation cursors hand each batch its first steps,
 * and bound the CPU records: a record no batch reserved is refused, so that
 * it cannot shift the steps of every later batch.
 *
 * Threading: the words are read and written with atomic builtins from any
 * thread. The cursors are written by the batch owner (the engine serialises
 * that under its lock) and read atomically by lock-free producers. The
 * record-time ring is written by producers and read by the engine, both
 * atomically.
 */
#ifndef LC_CORE_STEPS_H
#define LC_CORE_STEPS_H

#include "core/common.h"

#define LC__STEP_TIMES 256

static inline uint64_t lc__step_add(uint64_t a, uint64_t d)
{
	return (a % LC_STEP_MOD + d % LC_STEP_MOD) % LC_STEP_MOD;
}

/* The seed's readiness: target != cur && (target + MAX - cur) % MAX > MAX/2. */
static inline bool lc__step_ready(uint64_t cur, uint64_t target)
{
	cur %= LC_STEP_MOD;
	target %= LC_STEP_MOD;
	return target != cur && ((target + LC_STEP_MOD - cur) % LC_STEP_MOD) > LC_STEP_MOD / 2;
}

typedef struct lc__steps {
	uint64_t *word[2];   /* LC_STEP_CACHE, LC_STEP_AUX: the host words */
	uint64_t *own_block; /* page-aligned block holding our words, or NULL */
	/* Next step to reserve: steps below it are reserved, and a word at
	 * the cursor has had every reserved record. */
	uint64_t cursor[2];
	/* CLOCK_MONOTONIC ns of the record that moved the cache word to v, at
	 * [v % LC__STEP_TIMES]; 0 when unknown (outside producer). */
	uint64_t record_ns[LC__STEP_TIMES];
} lc__steps_t;

/* Words: caller-provided (8-byte aligned) or, where NULL, our own block. */
int lc__steps_init(lc__steps_t *s, uint64_t *cache_word, uint64_t *aux_word);
void lc__steps_fini(lc__steps_t *s);
static inline uint64_t lc__steps_read(const lc__steps_t *s, int which)
{
	return __atomic_load_n(s->word[which], __ATOMIC_ACQUIRE) % LC_STEP_MOD;
}
/* The reservation bound of a word: its cursor (any thread). */
static inline uint64_t lc__steps_bound(const lc__steps_t *s, int which)
{
	return __atomic_load_n(&s->cursor[which], __ATOMIC_ACQUIRE) % LC_STEP_MOD;
}
/* Whether value v of a word lies beyond what was reserved (v > bound). */
static inline bool lc__steps_overrun(const lc__steps_t *s, int which, uint64_t v)
{
	return lc__step_ready(v, lc__steps_bound(s, which));
}
/* CPU producer: counter += 1 (mod), stamping the record time, if the step
 * it makes ready was reserved (the word is below the cursor): one
 * compare-and-swap against the bound, no lock. Returns true if recorded;
 * *step is the step the record made ready, or would have. */
bool lc__steps_record(lc__steps_t *s, int which, uint64_t *step);
/* Time of the record that made step `target` ready (0 if unknown). */
uint64_t lc__steps_record_time(const lc__steps_t *s, uint64_t target);
/* A batch: returns the first cache and aux steps, advances the cursors by
 * (layers, 1). */
void lc__steps_reserve(lc__steps_t *s, uint32_t layers, uint64_t *cache_begin, uint64_t *aux_begin);
/* Move a word's cursor to v: after an outside producer overran its
 * reservation, later batches reserve from where the word is. */
void lc__steps_rebase(lc__steps_t *s, int which, uint64_t v);

/* Adaptive polling of a word written by an outside producer: spin for
 * spin_ns, then sleep, doubling from 1 us up to max_sleep_ns. */
typedef struct lc__backoff {
	uint64_t spin_ns, max_sleep_ns;
	uint64_t since_ns; /* start of the current wait; 0 = not waiting */
	uint64_t sleep_ns;
} lc__backoff_t;

void lc__backoff_init(lc__backoff_t *b, uint64_t spin_ns, uint64_t max_sleep_ns);
/* Progress seen or nothing awaited: start over. */
static inline void lc__backoff_reset(lc__backoff_t *b)
{
	b->since_ns = 0;
	b->sleep_ns = 0;
}
/* How long to wait before the next read, in ns (0 = read again now). */
uint64_t lc__backoff_next(lc__backoff_t *b, uint64_t now_ns);

#endif
