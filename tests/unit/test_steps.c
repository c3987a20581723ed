/* Step counters: the seed's wraparound-safe readiness, reservation, the
 * CPU producer and adaptive polling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/steps.h"

#define MOD LC_STEP_MOD

static void readiness_around_zero(void **state)
{
	assert_false(lc_step_ready(0, 0)); /* nothing recorded yet */
	assert_true(lc_step_ready(1, 0));  /* the first record makes step 0 ready */
	assert_false(lc_step_ready(1, 1));
	assert_false(lc_step_ready(0, 5)); /* behind */
	assert_true(lc_step_ready(6, 5));
	assert_true(lc_step_ready(100, 5));
}

static void readiness_across_wraparound_at_2_pow_62(void **state)
{
	/* Step MAX-1 becomes ready when the counter wraps to 0. */
	assert_false(lc_step_ready(MOD - 1, MOD - 1));
	assert_true(lc_step_ready(0, MOD - 1));
	assert_true(lc_step_ready(3, MOD - 2));
	/* A counter just before the wrap is not past a target just after it. */
	assert_false(lc_step_ready(MOD - 1, 0));
	assert_false(lc_step_ready(MOD - 3, 2));
}

static void readiness_needs_less_than_half_the_modulus_ahead(void **state)
{
	assert_true(lc_step_ready(MOD / 2 - 1, 0));
	assert_false(lc_step_ready(MOD / 2 + 1, 0)); /* too far: read as behind */
}

static void step_add_wraps_modulo_2_pow_62(void **state)
{
	assert_int_equal(lc__step_add(MOD - 1, 1), 0);
	assert_int_equal(lc__step_add(MOD - 2, 5), 3);
	assert_int_equal(lc__step_add(7, 0), 7);
}

static void cpu_record_advances_and_wraps(void **state)
{
	uint64_t words[2] __attribute__((aligned(8))) = {MOD - 1, 0};
	lc__steps_t s;
	uint64_t c, a, step;
	assert_int_equal(lc__steps_init(&s, &words[0], &words[1]), 0);
	lc__steps_reserve(&s, 1, &c, &a);
	assert_true(lc__steps_record(&s, LC_STEP_CACHE, &step));
	assert_int_equal(step, MOD - 1);
	assert_int_equal(words[0], 0);
	assert_true(lc__step_ready(lc__steps_read(&s, LC_STEP_CACHE), MOD - 1));
	assert_true(lc__steps_record(&s, LC_STEP_AUX, &step));
	assert_int_equal(words[1], 1);
	assert_true(lc__steps_record_time(&s, MOD - 1) > 0);
	lc__steps_fini(&s);
}

/* A record beyond the reservation moves nothing, across the wrap too: it
 * would make the next batch's first step ready before its layer is
 * written. */
static void records_beyond_the_reservation_are_refused(void **state)
{
	uint64_t words[2] __attribute__((aligned(8))) = {MOD - 2, 5};
	lc__steps_t s;
	uint64_t c, a, step;
	assert_int_equal(lc__steps_init(&s, &words[0], &words[1]), 0);
	assert_false(lc__steps_record(&s, LC_STEP_CACHE, &step)); /* nothing reserved */
	assert_int_equal(step, MOD - 2);
	assert_false(lc__steps_record(&s, LC_STEP_AUX, &step));
	assert_int_equal(words[0], MOD - 2);
	assert_int_equal(words[1], 5);
	lc__steps_reserve(&s, 3, &c, &a);
	for (int i = 0; i < 3; i++)
		assert_true(lc__steps_record(&s, LC_STEP_CACHE, &step));
	assert_int_equal(words[0], 1);
	assert_false(lc__steps_record(&s, LC_STEP_CACHE, &step));
	assert_int_equal(step, 1);
	assert_int_equal(words[0], 1);
	assert_true(lc__steps_record(&s, LC_STEP_AUX, &step));
	assert_false(lc__steps_record(&s, LC_STEP_AUX, &step));
	assert_int_equal(words[1], 6);
	/* An outside producer's word past the bound reads as an overrun. */
	assert_false(lc__steps_overrun(&s, LC_STEP_CACHE, 1));
	assert_true(lc__steps_overrun(&s, LC_STEP_CACHE, 2));
	lc__steps_rebase(&s, LC_STEP_CACHE, 2);
	assert_false(lc__steps_overrun(&s, LC_STEP_CACHE, 2));
	lc__steps_fini(&s);
}

static void outside_producer_absolute_values_are_read(void **state)
{
	lc__steps_t s;
	assert_int_equal(lc__steps_init(&s, NULL, NULL), 0);
	assert_non_null(s.own_block);
	assert_int_equal((uintptr_t)s.own_block % 4096, 0);
	__atomic_store_n(s.word[LC_STEP_CACHE], 42, __ATOMIC_RELEASE);
	assert_int_equal(lc__steps_read(&s, LC_STEP_CACHE), 42);
	assert_true(lc__step_ready(lc__steps_read(&s, LC_STEP_CACHE), 41));
	lc__steps_fini(&s);
}

static void misaligned_counter_words_are_refused(void **state)
{
	static uint64_t words[3];
	lc__steps_t s;
	assert_int_equal(lc__steps_init(&s, (uint64_t *)((char *)words + 4), &words[2]), -EINVAL);
}

static void batch_reservation_advances_layers_and_one_aux(void **state)
{
	lc__steps_t s;
	uint64_t c, a;
	assert_int_equal(lc__steps_init(&s, NULL, NULL), 0);
	lc__steps_reserve(&s, 61, &c, &a);
	assert_int_equal(c, 0);
	assert_int_equal(a, 0);
	lc__steps_reserve(&s, 61, &c, &a);
	assert_int_equal(c, 61);
	assert_int_equal(a, 1);
	s.cursor[LC_STEP_CACHE] = MOD - 10;
	lc__steps_reserve(&s, 61, &c, &a);
	assert_int_equal(c, MOD - 10);
	assert_int_equal(s.cursor[LC_STEP_CACHE], 51);
	lc__steps_fini(&s);
}

static void adaptive_polling_spins_then_sleeps_up_to_the_cap(void **state)
{
	lc__backoff_t b;
	lc__backoff_init(&b, 50000, 20000);
	assert_int_equal(lc__backoff_next(&b, 1000000), 0);
	assert_int_equal(lc__backoff_next(&b, 1040000), 0);
	assert_int_equal(lc__backoff_next(&b, 1060000), 1000);
	assert_int_equal(lc__backoff_next(&b, 1070000), 2000);
	uint64_t last = 0;
	for (int i = 0; i < 10; i++)
		last = lc__backoff_next(&b, 1080000);
	assert_int_equal(last, 20000); /* never a fixed 1 ms */
	lc__backoff_reset(&b);
	assert_int_equal(lc__backoff_next(&b, 5000000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(readiness_around_zero),
		cmocka_unit_test(readiness_across_wraparound_at_2_pow_62),
		cmocka_unit_test(readiness_needs_less_than_half_the_modulus_ahead),
		cmocka_unit_test(step_add_wraps_modulo_2_pow_62),
		cmocka_unit_test(cpu_record_advances_and_wraps),
		cmocka_unit_test(records_beyond_the_reservation_are_refused),
		cmocka_unit_test(outside_producer_absolute_values_are_read),
		cmocka_unit_test(misaligned_counter_words_are_refused),
		cmocka_unit_test(batch_reservation_advances_layers_and_one_aux),
		cmocka_unit_test(adaptive_polling_spins_then_sleeps_up_to_the_cap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
