/*
 * The id map (core/idmap.h): puts, gets and deletes against a plain array
 * model, the cap, iteration (deleting the entry just returned), and churn
 * that must not grow the table without bound.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/idmap.h"

enum { IDS = 4096 };

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state % n;
}

/* Ids spread as real ones are not: small, sequential, and high bits. */
static uint64_t id_of(size_t k)
{
	return k % 3 == 0 ? k : k % 3 == 1 ? (uint64_t)k << 40 : ~(uint64_t)k;
}

static void test_against_model(void **state)
{
	(void)state;
	static char vals[IDS];
	bool in[IDS] = {0};
	size_t live = 0;
	lc__idmap_t m;
	lc__idmap_init(&m, 0);
	assert_null(lc__idmap_get(&m, 1));
	assert_null(lc__idmap_del(&m, 1));
	for (int op = 0; op < 200000; op++) {
		size_t k = (size_t)rnd(IDS);
		uint64_t id = id_of(k);
		switch (rnd(3)) {
		case 0:
			assert_int_equal(lc__idmap_put(&m, id, &vals[k]), in[k] ? -EEXIST : 0);
			live += !in[k];
			in[k] = true;
			break;
		case 1:
			assert_ptr_equal(lc__idmap_del(&m, id), in[k] ? &vals[k] : NULL);
			live -= in[k];
			in[k] = false;
			break;
		default:
			assert_ptr_equal(lc__idmap_get(&m, id), in[k] ? &vals[k] : NULL);
		}
		assert_int_equal(lc__idmap_count(&m), live);
	}
	/* Iteration yields every live entry once. */
	size_t it = 0, seen = 0;
	uint64_t id;
	void *v;
	while (lc__idmap_next(&m, &it, &id, &v)) {
		size_t k = (size_t)((char *)v - vals);
		assert_true(in[k]);
		assert_int_equal(id, id_of(k));
		in[k] = false;
		seen++;
	}
	assert_int_equal(seen, live);
	lc__idmap_fini(&m);
}

static void test_cap(void **state)
{
	(void)state;
	static char v;
	lc__idmap_t m;
	lc__idmap_init(&m, 3);
	for (uint64_t i = 1; i <= 3; i++)
		assert_int_equal(lc__idmap_put(&m, i, &v), 0);
	assert_int_equal(lc__idmap_put(&m, 4, &v), -ENOSPC);
	assert_int_equal(lc__idmap_put(&m, 2, &v), -EEXIST);
	assert_ptr_equal(lc__idmap_del(&m, 2), &v);
	assert_int_equal(lc__idmap_put(&m, 4, &v), 0);
	assert_int_equal(lc__idmap_count(&m), 3);
	lc__idmap_fini(&m);
	/* fini keeps the cap: the map can be used again. */
	assert_int_equal(lc__idmap_put(&m, 9, &v), 0);
	lc__idmap_fini(&m);
}

/* Deleting each entry as it is returned visits every entry once. */
static void test_delete_while_iterating(void **state)
{
	(void)state;
	static char v[1000];
	lc__idmap_t m;
	lc__idmap_init(&m, 0);
	for (size_t i = 0; i < 1000; i++)
		assert_int_equal(lc__idmap_put(&m, id_of(i), &v[i]), 0);
	size_t it = 0, n = 0;
	uint64_t id;
	void *p;
	while (lc__idmap_next(&m, &it, &id, &p)) {
		assert_ptr_equal(lc__idmap_del(&m, id), p);
		n++;
	}
	assert_int_equal(n, 1000);
	assert_int_equal(lc__idmap_count(&m), 0);
	lc__idmap_fini(&m);
}

/* Ids that only ever increase, a few live at a time (the engine's wreqs):
 * deleted slots are reused or rehashed away, the table stays small. */
static void test_churn_stays_small(void **state)
{
	(void)state;
	static char v;
	lc__idmap_t m;
	lc__idmap_init(&m, 0);
	for (uint64_t id = 1; id <= 1000000; id++) {
		assert_int_equal(lc__idmap_put(&m, id, &v), 0);
		if (id > 8)
			assert_ptr_equal(lc__idmap_del(&m, id - 8), &v);
	}
	assert_int_equal(lc__idmap_count(&m), 8);
	assert_true(m.cap <= 64);
	for (uint64_t id = 1000000 - 7; id <= 1000000; id++)
		assert_ptr_equal(lc__idmap_get(&m, id), &v);
	lc__idmap_fini(&m);
}

static void test_hash_spreads(void **state)
{
	(void)state;
	/* Sequential ids must not land in sequential buckets of a small table. */
	unsigned hits[16] = {0};
	for (uint64_t id = 0; id < 1600; id++)
		hits[lc__hash64(id << 12) & 15]++;
	for (int b = 0; b < 16; b++)
		assert_true(hits[b] > 50 && hits[b] < 150);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_model),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_delete_while_iterating),
		cmocka_unit_test(test_churn_stays_small),
		cmocka_unit_test(test_hash_spreads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
