/* Session health: failure counting, the failed-session TTL and clearing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/session.h"

#define MS 1000000ull

static void failed_session_is_blocked_until_ttl_expires(void **state)
{
	lc__session_table_t t = {0};
	lc__session_t *s;
	assert_int_equal(lc__session_add(&t, "10.0.0.2:7001", &s), 0);
	assert_false(lc__session_blocked(s, 1000 * MS, 30000 * MS));
	lc__session_fail(s, 1000 * MS, "write failed");
	assert_true(lc__session_blocked(s, 1001 * MS, 30000 * MS));
	assert_true(lc__session_blocked(s, 30999 * MS, 30000 * MS));
	assert_false(lc__session_blocked(s, 31000 * MS, 30000 * MS));
	/* Expired entries are cleared, the count stays. */
	assert_int_equal(s->failed_at_ns, 0);
	assert_int_equal(s->failures, 1);
	lc__session_table_fini(&t);
}

static void registration_again_clears_the_block(void **state)
{
	lc__session_table_t t = {0};
	lc__session_t *s;
	assert_int_equal(lc__session_add(&t, "d0", &s), 0);
	lc__session_fail(s, 5 * MS, "x");
	assert_true(lc__session_blocked(s, 6 * MS, 30000 * MS));
	lc__session_clear(s);
	assert_false(lc__session_blocked(s, 7 * MS, 30000 * MS));
	assert_int_equal(s->failures, 1);
	lc__session_table_fini(&t);
}

static void ttl_zero_disables_blocking(void **state)
{
	lc__session_t s = {.name = "d"};
	lc__session_fail(&s, 5 * MS, "x");
	assert_false(lc__session_blocked(&s, 5 * MS, 0));
}

static void every_failure_is_counted(void **state)
{
	lc__session_t s = {.name = "d"};
	for (int i = 0; i < 3; i++)
		lc__session_fail(&s, (uint64_t)(i + 1) * MS, "x");
	assert_int_equal(s.failures, 3);
	assert_string_equal(s.reason, "x");
}

static void one_failed_session_leaves_others_unblocked(void **state)
{
	lc__session_table_t t = {0};
	lc__session_t *a, *b;
	assert_int_equal(lc__session_add(&t, "a", &a), 0);
	assert_int_equal(lc__session_add(&t, "b", &b), 0);
	assert_int_equal(lc__session_add(&t, "a", &a), -EEXIST);
	lc__session_fail(a, 10 * MS, "dead");
	assert_true(lc__session_blocked(a, 11 * MS, 30000 * MS));
	assert_false(lc__session_blocked(b, 11 * MS, 30000 * MS));
	assert_ptr_equal(lc__session_find(&t, "b"), b);
	lc__session_remove(&t, a);
	assert_null(lc__session_find(&t, "a"));
	assert_ptr_equal(lc__session_find(&t, "b"), b);
	lc__session_table_fini(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(failed_session_is_blocked_until_ttl_expires),
		cmocka_unit_test(registration_again_clears_the_block),
		cmocka_unit_test(ttl_zero_disables_blocking),
		cmocka_unit_test(every_failure_is_counted),
		cmocka_unit_test(one_failed_session_leaves_others_unblocked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
