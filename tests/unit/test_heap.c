/* The I/O core's deadline heap (transport/io/heap.h): order, removal from
 * anywhere, key updates both ways, and many entries against a sorted
 * reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "transport/io/heap.h"

/* Pop everything; assert keys come out in order; return how many. */
static size_t drain_sorted(lc__heap_t *h)
{
	uint64_t last = 0;
	size_t n = 0;
	for (lc__heap_node_t *x; (x = lc__heap_pop(h)); n++) {
		assert_true(x->key >= last);
		assert_false(lc__heap_linked(x));
		last = x->key;
	}
	return n;
}

static void pops_in_key_order(void **state)
{
	lc__heap_t h = {0};
	lc__heap_node_t v[7];
	const uint64_t keys[7] = {50, 10, 40, 10, 70, 20, 30};
	for (int i = 0; i < 7; i++)
		assert_int_equal(lc__heap_insert(&h, &v[i], keys[i]), 0);
	assert_int_equal(lc__heap_top(&h)->key, 10);
	const uint64_t want[7] = {10, 10, 20, 30, 40, 50, 70};
	for (int i = 0; i < 7; i++)
		assert_int_equal(lc__heap_pop(&h)->key, want[i]);
	assert_null(lc__heap_pop(&h));
	assert_null(lc__heap_top(&h));
	lc__heap_free(&h);
}

static void a_middle_entry_is_removed_and_the_rest_stays_ordered(void **state)
{
	lc__heap_t h = {0};
	lc__heap_node_t v[15];
	for (int i = 0; i < 15; i++)
		assert_int_equal(lc__heap_insert(&h, &v[i], (uint64_t)(i * 7 % 15) + 1), 0);
	/* neither the top nor the last slot */
	lc__heap_node_t *mid = h.v[5];
	uint64_t gone = mid->key;
	lc__heap_remove(&h, mid);
	assert_false(lc__heap_linked(mid));
	lc__heap_remove(&h, mid); /* twice: nothing */
	assert_int_equal(h.n, 14);
	uint64_t last = 0;
	for (lc__heap_node_t *x; (x = lc__heap_pop(&h));) {
		assert_true(x->key > last);
		assert_true(x->key != gone);
		last = x->key;
	}
	lc__heap_free(&h);
}

static void an_update_moves_an_entry_both_ways(void **state)
{
	lc__heap_t h = {0};
	lc__heap_node_t a, b, c, d;
	assert_int_equal(lc__heap_insert(&h, &a, 10), 0);
	assert_int_equal(lc__heap_insert(&h, &b, 20), 0);
	assert_int_equal(lc__heap_insert(&h, &c, 30), 0);
	assert_int_equal(lc__heap_insert(&h, &d, 40), 0);
	lc__heap_update(&h, &d, 5); /* to the top */
	assert_ptr_equal(lc__heap_top(&h), &d);
	lc__heap_update(&h, &d, 35); /* down again */
	assert_ptr_equal(lc__heap_top(&h), &a);
	lc__heap_update(&h, &a, 100); /* the top to the bottom */
	assert_ptr_equal(lc__heap_pop(&h), &b);
	assert_ptr_equal(lc__heap_pop(&h), &c);
	assert_ptr_equal(lc__heap_pop(&h), &d);
	assert_ptr_equal(lc__heap_pop(&h), &a);
	lc__heap_free(&h);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* Many entries, a third removed, a third updated: what pops matches a
 * sorted copy of what should be left. */
static void many_entries_match_a_sorted_reference(void **state)
{
	enum { N = 20000 };
	lc__heap_t h = {0};
	lc__heap_node_t *v = calloc(N, sizeof *v);
	uint64_t *ref = calloc(N, sizeof *ref);
	size_t nref = 0;
	assert_non_null(v);
	assert_non_null(ref);
	srand(23);
	for (int i = 0; i < N; i++)
		assert_int_equal(lc__heap_insert(&h, &v[i], (uint64_t)rand() % 100000), 0);
	for (int i = 0; i < N; i++) {
		if (i % 3 == 0)
			lc__heap_remove(&h, &v[i]);
		else if (i % 3 == 1)
			lc__heap_update(&h, &v[i], (uint64_t)rand() % 100000);
	}
	for (int i = 0; i < N; i++)
		if (lc__heap_linked(&v[i]))
			ref[nref++] = v[i].key;
	assert_int_equal(nref, h.n);
	qsort(ref, nref, sizeof *ref, cmp_u64);
	for (size_t i = 0; i < nref; i++)
		assert_int_equal(lc__heap_pop(&h)->key, ref[i]);
	assert_int_equal(drain_sorted(&h), 0);
	lc__heap_free(&h);
	free(v);
	free(ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pops_in_key_order),
		cmocka_unit_test(a_middle_entry_is_removed_and_the_rest_stays_ordered),
		cmocka_unit_test(an_update_moves_an_entry_both_ways),
		cmocka_unit_test(many_entries_match_a_sorted_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
