/* Step counters and adaptive polling. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/steps.h"

int lc_step_ready(uint64_t current, uint64_t target)
{
	return lc__step_ready(current, target);
}

int lc__steps_init(lc__steps_t *s, uint64_t *cache_word, uint64_t *aux_word)
{
	memset(s, 0, sizeof(*s));
	if (((uintptr_t)cache_word | (uintptr_t)aux_word) & 7)
		return -EINVAL;
	if (!cache_word || !aux_word) {
		/* Alone in a page, so a caller may cuMemHostRegister it. */
		s->own_block = aligned_alloc(4096, 4096);
		if (!s->own_block)
			return -ENOMEM;
		memset(s->own_block, 0, 4096);
	}
	s->word[LC_STEP_CACHE] = cache_word ? cache_word : &s->own_block[0];
	s->word[LC_STEP_AUX] = aux_word ? aux_word : &s->own_block[8];
	/* Reservations start where the counters are now. */
	s->cursor[LC_STEP_CACHE] = lc__steps_read(s, LC_STEP_CACHE);
	s->cursor[LC_STEP_AUX] = lc__steps_read(s, LC_STEP_AUX);
	return 0;
}

void lc__steps_fini(lc__steps_t *s)
{
	free(s->own_block);
	s->own_block = NULL;
}

bool lc__steps_record(lc__steps_t *s, int which, uint64_t *step)
{
	uint64_t old = __atomic_load_n(s->word[which], __ATOMIC_RELAXED), next;
	uint64_t now = which == LC_STEP_CACHE ? lc__now_ns() : 0;
	do {
		/* Step `old` must have been reserved: a batch ended before its
		 * forward's first record, so the bound read here is current. */
		if (!lc__step_ready(lc__steps_bound(s, which), old)) {
			*step = old % LC_STEP_MOD;
			return false;
		}
		next = lc__step_add(old, 1);
		if (which == LC_STEP_CACHE)
			__atomic_store_n(&s->record_ns[next % LC__STEP_TIMES], now,
					 __ATOMIC_RELAXED);
	} while (!__atomic_compare_exchange_n(s->word[which], &old, next, false, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	*step = old % LC_STEP_MOD;
	return true;
}

uint64_t lc__steps_record_time(const lc__steps_t *s, uint64_t target)
{
	/* Step t became ready when the word reached t + 1. */
	return __atomic_load_n(&s->record_ns[lc__step_add(target, 1) % LC__STEP_TIMES],
			       __ATOMIC_RELAXED);
}

void lc__steps_reserve(lc__steps_t *s, uint32_t layers, uint64_t *cache_begin, uint64_t *aux_begin)
{
	*cache_begin = s->cursor[LC_STEP_CACHE];
	*aux_begin = s->cursor[LC_STEP_AUX];
	/* Release: a producer that sees the new bound sees the batch. */
	__atomic_store_n(&s->cursor[LC_STEP_CACHE], lc__step_add(*cache_begin, layers),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&s->cursor[LC_STEP_AUX], lc__step_add(*aux_begin, 1), __ATOMIC_RELEASE);
}

void lc__steps_rebase(lc__steps_t *s, int which, uint64_t v)
{
	__atomic_store_n(&s->cursor[which], v % LC_STEP_MOD, __ATOMIC_RELEASE);
}

void lc__backoff_init(lc__backoff_t *b, uint64_t spin_ns, uint64_t max_sleep_ns)
{
	b->spin_ns = spin_ns;
	b->max_sleep_ns = max_sleep_ns ? max_sleep_ns : 1000;
	lc__backoff_reset(b);
}

uint64_t lc__backoff_next(lc__backoff_t *b, uint64_t now_ns)
{
	if (!b->since_ns)
		b->since_ns = now_ns;
	if (now_ns - b->since_ns < b->spin_ns)
		return 0;
	b->sleep_ns = b->sleep_ns ? b->sleep_ns * 2 : 1000;
	if (b->sleep_ns > b->max_sleep_ns)
		b->sleep_ns = b->max_sleep_ns;
	return b->sleep_ns;
}
