/* Notifiers (core/notify.h): a wait sees every signal before it, many
 * signals make one wake, the fd is readable exactly while a wake is due,
 * and a signal from another thread wakes a blocked wait. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/notify.h"

static bool readable(const lc__notify_t *n)
{
	struct pollfd p = {.fd = n->efd, .events = POLLIN};
	return poll(&p, 1, 0) == 1;
}

static void nothing_pending_means_no_wake(void **state)
{
	(void)state;
	lc__notify_t n;
	assert_int_equal(lc__notify_init(&n), 0);
	assert_false(readable(&n));
	assert_int_equal(lc__notify_wait(&n, 0), 0);
	assert_int_equal(lc__notify_wait(&n, 1), 0); /* times out */
	lc__notify_signal(NULL);                     /* a holder without one */
	lc__notify_fini(&n);
}

static void many_signals_make_one_wake(void **state)
{
	(void)state;
	lc__notify_t n;
	assert_int_equal(lc__notify_init(&n), 0);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 1000; i++)
			lc__notify_signal(&n);
		assert_true(readable(&n));
		assert_int_equal(lc__notify_wait(&n, 0), 1);
		assert_false(readable(&n));
		assert_int_equal(lc__notify_wait(&n, 0), 0);
	}
	lc__notify_fini(&n);
}

static void *signal_later(void *arg)
{
	lc__notify_t *n = arg;
	struct pollfd none = {.fd = -1};
	poll(&none, 1, 20); /* let the waiter block first, mostly */
	lc__notify_signal(n);
	return NULL;
}

static void another_thread_wakes_a_blocked_wait(void **state)
{
	(void)state;
	lc__notify_t n;
	assert_int_equal(lc__notify_init(&n), 0);
	for (int i = 0; i < 50; i++) {
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, signal_later, &n), 0);
		assert_int_equal(lc__notify_wait(&n, 10000), 1); /* a deadline, not a timing */
		pthread_join(t, NULL);
		assert_int_equal(lc__notify_wait(&n, 0), 0);
	}
	lc__notify_fini(&n);
}

/* Two threads signal as fast as they can while this one waits and counts
 * what it has seen: every signal before a wait is seen by that wait. */
typedef struct {
	lc__notify_t *n;
	_Atomic uint64_t *sent;
} storm_t;

static void *storm(void *arg)
{
	storm_t *s = arg;
	for (int i = 0; i < 100000; i++) {
		atomic_fetch_add(s->sent, 1);
		lc__notify_signal(s->n);
	}
	return NULL;
}

static void no_signal_is_lost_under_a_storm(void **state)
{
	(void)state;
	lc__notify_t n;
	_Atomic uint64_t sent = 0;
	assert_int_equal(lc__notify_init(&n), 0);
	storm_t s = {&n, &sent};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, storm, &s), 0);
	uint64_t seen = 0;
	while (seen < 200000) {
		assert_int_equal(lc__notify_wait(&n, 10000), 1);
		seen = atomic_load(&sent); /* the look after the wake */
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	lc__notify_fini(&n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(nothing_pending_means_no_wake),
		cmocka_unit_test(many_signals_make_one_wake),
		cmocka_unit_test(another_thread_wakes_a_blocked_wait),
		cmocka_unit_test(no_signal_is_lost_under_a_storm),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
