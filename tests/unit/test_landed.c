/*
 * D's landed count (core/landed.h through core/grant.h): the leading layers
 * complete, kept as bytes land, checked against a byte map after every
 * write: many ranges, overlapping, out of order, duplicated, before and
 * after the watch, with bytes granted after it and bytes of no layer.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/grant.h"
#include "core/landed.h"
#include "layercake.h"

enum {
	REGIONS = 2,
	RBYTES = 9000,
	LAYERS = 8,
	PAGE = 100,
	BUF = 900,    /* layer l: [l * 1000, l * 1000 + BUF) of each region */
	STRIDE = 1000 /* the bytes between buffers belong to no layer */
};

typedef struct model {
	uint8_t granted[REGIONS][RBYTES];
	uint8_t covered[REGIONS][RBYTES];
	uint32_t ready;
	uint64_t covered_n;
} model_t;

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(uint64_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state % n;
}

static bool layer_complete(const model_t *m, uint32_t l)
{
	for (int r = 0; r < REGIONS; r++)
		for (uint32_t b = l * STRIDE; b < l * STRIDE + BUF; b++)
			if (m->granted[r][b] && !m->covered[r][b])
				return false;
	return true;
}

/* The rule the count keeps: ready moves past complete layers, never back. */
static void model_advance(model_t *m)
{
	while (m->ready < LAYERS && layer_complete(m, m->ready))
		m->ready++;
}

static void grant_page(lc__grant_table_t *t, model_t *m, int r, uint32_t page)
{
	assert_int_equal(lc__grant_issue(t, 1, (uint32_t)r + 1, page * PAGE, PAGE), 0);
	memset(&m->granted[r][page * PAGE], 1, PAGE);
}

static void watch(lc__grant_table_t *t)
{
	lc__landed_span_t s[REGIONS * LAYERS];
	size_t n = 0;
	/* Listed layer by layer, regions interleaved: the watch sorts them. */
	for (uint32_t l = 0; l < LAYERS; l++)
		for (int r = 0; r < REGIONS; r++)
			s[n++] = (lc__landed_span_t){.region = (uint32_t)r + 1,
						     .layer = l,
						     .lo = l * STRIDE,
						     .hi = l * STRIDE + BUF};
	assert_int_equal(lc__grant_watch(t, 1, s, n, LAYERS), 0);
}

static void land(lc__grant_table_t *t, model_t *m, int r, uint64_t a, uint64_t b)
{
	lc__grant_room_t *g;
	lc__grant_landing_t o;
	assert_int_equal(lc__grant_lookup(t, 1, 0, (uint32_t)r + 1, a, b - a, &g), 0);
	assert_int_equal(lc__grant_landed(g, (uint32_t)r + 1, a, b - a, &o), 0);
	lc__grant_put(g);
	uint64_t twice = 0;
	for (uint64_t x = a; x < b; x++) {
		twice += m->covered[r][x];
		m->covered_n += !m->covered[r][x];
		m->covered[r][x] = 1;
	}
	assert_int_equal(o.twice, twice);
}

/* A random write inside one granted page: partial, overlapping others. */
static void land_random(lc__grant_table_t *t, model_t *m)
{
	for (;;) {
		int r = (int)rnd(REGIONS);
		uint32_t page = (uint32_t)rnd(RBYTES / PAGE);
		if (!m->granted[r][page * PAGE])
			continue;
		uint64_t a = page * PAGE + rnd(PAGE), b = a + 1 + rnd(page * PAGE + PAGE - a);
		land(t, m, r, a, b);
		return;
	}
}

static void check(lc__grant_table_t *t, model_t *m)
{
	uint32_t ready;
	lc__grant_count_t c;
	model_advance(m);
	assert_int_equal(lc__grant_layers_ready(t, 1, &ready), 0);
	assert_int_equal(ready, m->ready);
	assert_int_equal(lc__grant_room_count(t, 1, &c), 0);
	assert_int_equal(c.covered, m->covered_n);
	assert_false(c.broken);
}

/* Most pages of every buffer granted, some not (pages D does not use), some
 * between buffers; writes land at random, some before the watch. */
static void test_ready_follows_random_writes(void **state)
{
	(void)state;
	for (int round = 0; round < 4; round++) {
		lc__grant_table_t *t;
		model_t *m = calloc(1, sizeof *m);
		assert_non_null(m);
		assert_int_equal(lc__grant_table_create(&t), 0);
		lc__grant_set_intervals_max(t, 1u << 20);
		for (int r = 0; r < REGIONS; r++)
			for (uint32_t p = 0; p < RBYTES / PAGE; p++)
				if (rnd(10) < 8)
					grant_page(t, m, r, p);
		for (int i = 0; i < 50; i++)
			land_random(t, m);
		watch(t);
		check(t, m);
		while (m->ready < LAYERS) {
			land_random(t, m);
			check(t, m);
		}
		/* Duplicates and replays after completion change nothing. */
		for (int i = 0; i < 200; i++) {
			land_random(t, m);
			check(t, m);
		}
		lc__grant_table_destroy(t);
		free(m);
	}
}

/* Bytes granted after the watch: a layer above ready waits for them, one
 * below it keeps ready where it is. */
static void test_grants_after_watch(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	model_t *m = calloc(1, sizeof *m);
	assert_non_null(m);
	assert_int_equal(lc__grant_table_create(&t), 0);
	lc__grant_set_intervals_max(t, 1u << 20);
	for (uint32_t l = 0; l < LAYERS; l++)
		grant_page(t, m, 0, l * STRIDE / PAGE); /* one page per layer */
	watch(t);
	check(t, m);
	for (uint32_t l = 0; l < 3; l++) {
		land(t, m, 0, l * STRIDE, l * STRIDE + PAGE);
		check(t, m);
	}
	assert_int_equal(m->ready, 3);
	grant_page(t, m, 1, 1);                 /* layer 0, below ready */
	grant_page(t, m, 1, 3 * STRIDE / PAGE); /* layer 3, at ready */
	land(t, m, 0, 3 * STRIDE, 3 * STRIDE + PAGE);
	check(t, m);
	assert_int_equal(m->ready, 3); /* layer 3 waits for its new page */
	while (m->ready < LAYERS) {
		land_random(t, m);
		check(t, m);
	}
	lc__grant_table_destroy(t);
	free(m);
}

/* Layers with nothing granted are complete at once; without a watch, or
 * without a grant, there is nothing to read. */
static void test_empty_layers_and_no_watch(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	uint32_t ready = 99;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_layers_ready(t, 1, &ready), LC_ERR_GRANT);
	lc__landed_span_t s = {.region = 1, .layer = 0, .lo = 0, .hi = 10};
	assert_int_equal(lc__grant_watch(t, 1, &s, 1, 1), LC_ERR_GRANT);
	assert_int_equal(lc__grant_issue(t, 1, 1, 5000, 100), 0);
	assert_int_equal(lc__grant_layers_ready(t, 1, &ready), 0);
	assert_int_equal(ready, 0);
	s.layer = 3;
	assert_int_equal(lc__grant_watch(t, 1, &s, 1, 3), -EINVAL);
	s.layer = 0;
	assert_int_equal(lc__grant_watch(t, 1, &s, 1, 3), 0); /* span 0: nothing granted */
	assert_int_equal(lc__grant_layers_ready(t, 1, &ready), 0);
	assert_int_equal(ready, 3);
	lc__grant_revoke(t, 1);
	assert_int_equal(lc__grant_layers_ready(t, 1, &ready), LC_ERR_GRANT);
	lc__grant_table_destroy(t);
}

/* The count by itself: adjacent writes merge, the cap breaks it. */
static void test_landed_alone(void **state)
{
	(void)state;
	lc__landed_t l;
	uint64_t twice;
	bool broke;
	lc__landed_init(&l);
	lc__landed_span_t s[2] = {{.region = 1, .layer = 1, .lo = 100, .hi = 200},
				  {.region = 1, .layer = 0, .lo = 0, .hi = 100}};
	uint64_t need[2] = {100, 100};
	assert_int_equal(lc__landed_watch(&l, s, need, 2, 2), 0);
	assert_int_equal(lc__landed_add(&l, 1, 150, 200, 3, &twice, &broke), 0);
	assert_int_equal(lc__landed_add(&l, 1, 0, 50, 3, &twice, &broke), 0);
	assert_int_equal(lc__landed_ready(&l), 0);
	assert_int_equal(lc__landed_add(&l, 1, 40, 160, 3, &twice, &broke), 0);
	assert_int_equal(twice, 20);
	assert_int_equal(l.niv, 1);
	assert_int_equal(lc__landed_ready(&l), 2);
	assert_int_equal(lc__landed_in(&l, 1, 90, 300), 110);
	assert_int_equal(lc__landed_add(&l, 2, 0, 1, 2, &twice, &broke), 0);
	assert_int_equal(lc__landed_add(&l, 2, 5, 6, 2, &twice, &broke), -ENOSPC);
	assert_true(broke);
	assert_int_equal(lc__landed_add(&l, 2, 0, 1, 2, &twice, &broke), -ENOSPC);
	assert_false(broke);
	assert_int_equal(l.covered, 201);
	lc__landed_fini(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ready_follows_random_writes),
		cmocka_unit_test(test_grants_after_watch),
		cmocka_unit_test(test_empty_layers_and_no_watch),
		cmocka_unit_test(test_landed_alone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
