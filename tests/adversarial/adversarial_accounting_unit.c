/*
 * D's byte accounting in one process (issue 13): the grant entry's granted
 * and landed totals (core/grant.h) and the memory seam's counting
 * (transport/seam.h), including duplicates and revoke.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/ctx.h"
#include "core/grant.h"
#include "layercake.h"
#include "transport/seam.h"

static void bytes_of(lc__grant_table_t *t, uint64_t room, uint64_t want_granted,
		     uint64_t want_covered)
{
	lc__grant_count_t c;
	assert_int_equal(lc__grant_room_count(t, room, &c), 0);
	assert_int_equal(c.granted, want_granted);
	assert_int_equal(c.covered, want_covered);
}

/* One landing; returns the bytes it landed twice. */
static uint64_t land(lc__grant_room_t *g, uint32_t region, uint64_t off, uint64_t len)
{
	lc__grant_landing_t o;
	assert_int_equal(lc__grant_landed(g, region, off, len, &o), 0);
	assert_false(o.broke);
	return o.twice;
}

static size_t intervals(lc__grant_table_t *t, uint64_t room)
{
	lc__grant_count_t c;
	assert_int_equal(lc__grant_room_count(t, room, &c), 0);
	return (size_t)c.intervals;
}

/* Granted counts the merged ranges: overlaps and repeats count once. */
static void test_granted_merged(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_count_t c;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_room_count(t, 1, &c), LC_ERR_GRANT);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	bytes_of(t, 1, 100, 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 50, 100), 0); /* overlaps: +50 */
	bytes_of(t, 1, 150, 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 150), 0); /* repeat: +0 */
	bytes_of(t, 1, 150, 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 200, 100), 0);
	assert_int_equal(lc__grant_issue(t, 1, 2, 0, 100), 0); /* another region */
	bytes_of(t, 1, 350, 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 120, 100), 0); /* bridges two ranges */
	bytes_of(t, 1, 400, 0);
	assert_int_equal(lc__grant_issue(t, 2, 1, 0, 10), 0); /* rooms are apart */
	bytes_of(t, 2, 10, 0);
	bytes_of(t, 1, 400, 0);
	lc__grant_table_destroy(t);
}

/* Each granted byte counts once: writes out of order leave gaps that
 * later writes close, overlaps and repeats count only their new bytes and
 * report the rest as landed twice. */
static void test_intervals_merge(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	lc__grant_landing_t o;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_issue(t, 1, 2, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 1, 0, 1, 0, 100, &g), 0);
	assert_int_equal(land(g, 1, 20, 10), 0);
	assert_int_equal(land(g, 1, 0, 10), 0); /* before: a second interval */
	assert_int_equal(land(g, 1, 40, 10), 0);
	assert_int_equal(intervals(t, 1), 3);
	bytes_of(t, 1, 200, 30);
	assert_int_equal(land(g, 1, 35, 0), 0); /* zero bytes: nothing */
	assert_int_equal(intervals(t, 1), 3);
	assert_int_equal(land(g, 1, 10, 10), 0); /* touches both sides: one interval */
	assert_int_equal(intervals(t, 1), 2);
	bytes_of(t, 1, 200, 40);
	assert_int_equal(land(g, 2, 0, 30), 0); /* the same offsets, another region */
	bytes_of(t, 1, 200, 70);
	assert_int_equal(intervals(t, 1), 3);
	/* An overlap spanning a gap: [25, 45) is 10 new bytes and 10 again. */
	assert_int_equal(lc__grant_landed(g, 1, 25, 20, &o), 0);
	assert_int_equal(o.twice, 10);
	assert_true(o.first_twice);
	bytes_of(t, 1, 200, 80);
	assert_int_equal(intervals(t, 1), 2);
	assert_int_equal(lc__grant_landed(g, 1, 0, 50, &o), 0); /* a replay */
	assert_int_equal(o.twice, 50);
	assert_false(o.first_twice);
	bytes_of(t, 1, 200, 80);
	assert_int_equal(land(g, 1, 50, 50), 0);
	assert_int_equal(land(g, 2, 30, 70), 0);
	bytes_of(t, 1, 200, 200);
	assert_int_equal(intervals(t, 1), 2); /* full: one per granted range */
	lc__grant_count_t c;
	lc__grant_room_count(t, 1, &c);
	assert_int_equal(c.twice, 60);
	assert_false(c.broken);
	lc__grant_put(g);
	lc__grant_table_destroy(t);
}

/* The lie of issue 13: the first half written twice (as many bytes as the
 * whole) covers half. */
static void test_duplicate_stands_in(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 3, 1, 4096, 8192), 0);
	assert_int_equal(lc__grant_lookup(t, 3, 0, 1, 4096, 4096, &g), 0);
	assert_int_equal(land(g, 1, 4096, 4096), 0);
	assert_int_equal(land(g, 1, 4096, 4096), 4096);
	bytes_of(t, 3, 8192, 4096);
	lc__grant_put(g);
	lc__grant_table_destroy(t);
}

/* The per-byte window: granted and covered bytes inside one buffer of a
 * region, whatever the ranges look like around it. */
static void test_covered_window(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	uint64_t gr, cv;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_covered(t, 4, 1, 0, 100, &gr, &cv), LC_ERR_GRANT);
	/* Buffers [0, 100) and [100, 200) of region 1; the grant spans both. */
	assert_int_equal(lc__grant_issue(t, 4, 1, 50, 100), 0);
	assert_int_equal(lc__grant_issue(t, 4, 1, 180, 10), 0);
	assert_int_equal(lc__grant_issue(t, 4, 0, 0, 500), 0); /* a region before */
	assert_int_equal(lc__grant_lookup(t, 4, 0, 1, 50, 100, &g), 0);
	assert_int_equal(lc__grant_covered(t, 4, 1, 0, 100, &gr, &cv), 0);
	assert_int_equal(gr, 50);
	assert_int_equal(cv, 0);
	assert_int_equal(land(g, 1, 50, 50), 0);
	assert_int_equal(lc__grant_covered(t, 4, 1, 0, 100, &gr, &cv), 0);
	assert_int_equal(cv, 50); /* the first buffer is complete */
	assert_int_equal(lc__grant_covered(t, 4, 1, 100, 100, &gr, &cv), 0);
	assert_int_equal(gr, 60);
	assert_int_equal(cv, 0);
	assert_int_equal(land(g, 1, 100, 50), 0); /* merges with [50, 100) */
	assert_int_equal(land(g, 1, 180, 5), 0);
	assert_int_equal(lc__grant_covered(t, 4, 1, 100, 100, &gr, &cv), 0);
	assert_int_equal(cv, 55);
	assert_int_equal(lc__grant_covered(t, 4, 2, 0, 100, &gr, &cv), 0);
	assert_int_equal(gr, 0);
	assert_int_equal(cv, 0);
	/* A range granted after bytes landed merges the ranges, not the count. */
	assert_int_equal(lc__grant_issue(t, 4, 1, 150, 30), 0);
	bytes_of(t, 4, 640, 105);
	lc__grant_put(g);
	lc__grant_table_destroy(t);
}

/* The cap: one interval per granted range plus grant_intervals_max; the
 * write past it breaks the room's accounting, and nothing counts after. */
static void test_intervals_cap(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	lc__grant_landing_t o;
	lc__grant_count_t c;
	assert_int_equal(lc__grant_table_create(&t), 0);
	lc__grant_set_intervals_max(t, 2);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 1, 0, 1, 0, 100, &g), 0);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(land(g, 1, i * 10, 1), 0);
	assert_int_equal(land(g, 1, 1, 1), 0); /* merging needs no room */
	assert_int_equal(lc__grant_landed(g, 1, 50, 1, &o), -ENOSPC);
	assert_true(o.broke);
	assert_int_equal(lc__grant_landed(g, 1, 60, 1, &o), -ENOSPC);
	assert_false(o.broke);
	assert_int_equal(lc__grant_landed(g, 1, 0, 100, &o), -ENOSPC); /* not counted */
	assert_int_equal(lc__grant_room_count(t, 1, &c), 0);
	assert_true(c.broken);
	assert_int_equal(c.covered, 4);
	assert_int_equal(c.intervals, 3);
	/* A later room id starts afresh. */
	assert_int_equal(lc__grant_revoke(t, 1), 1);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_room_count(t, 1, &c), 0);
	assert_false(c.broken);
	lc__grant_put(g);
	lc__grant_table_destroy(t);
}

/* Revoke drops the counts; a new grant of the id starts from zero, and a
 * write still holding the old entry counts into the old one. */
static void test_revoke_counts(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 1, 0, 1, 0, 60, &g), 0);
	assert_int_equal(land(g, 1, 0, 60), 0);
	bytes_of(t, 1, 100, 60);
	assert_int_equal(lc__grant_revoke(t, 1), 1);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(land(g, 1, 60, 10), 0);
	lc__grant_put(g);
	bytes_of(t, 1, 100, 0);
	lc__grant_table_destroy(t);
}

/* Through the seam: what lands is covered on the room, zero-length and
 * rejected writes count nothing, a replay counts bytes_landed_twice. */
static void test_seam_counts(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_region_t *r;
	uint8_t *mem = calloc(1, 8192), src[4096];
	uint64_t over = 0;
	memset(src, 7, sizeof src);
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_region_register(ctx, mem, 8192, &r), 0);
	uint32_t id = lc_region_id(r);
	assert_int_equal(lc_grant_issue(ctx, 5, r, 0, 4096), 0);
	assert_int_equal(lc__land_write(ctx, 0, 5, id, 0, src, 2048), 0);
	assert_int_equal(lc__land_write(ctx, 0, 5, id, 2048, src, 0), 0);
	assert_int_equal(lc__land_write(ctx, 0, 5, id, 4096, src, 16), LC_ERR_GRANT);
	bytes_of(ctx->grants, 5, 4096, 2048);
	assert_int_equal(lc__land_write(ctx, 0, 5, id, 2048, src, 2048), 0);
	bytes_of(ctx->grants, 5, 4096, 4096);
	assert_int_equal(lc_ctx_counter_by_name(ctx, "bytes_landed_twice", &over), 0);
	assert_int_equal(over, 0);
	assert_int_equal(lc__land_write(ctx, 0, 5, id, 0, src, 1024), 0); /* a replay */
	bytes_of(ctx->grants, 5, 4096, 4096);
	assert_int_equal(lc_ctx_counter_by_name(ctx, "bytes_landed_twice", &over), 0);
	assert_int_equal(over, 1024);
	assert_int_equal(lc_grant_revoke(ctx, 5), 1);
	lc_region_deregister(r);
	lc_ctx_destroy(ctx);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_granted_merged),      cmocka_unit_test(test_intervals_merge),
		cmocka_unit_test(test_duplicate_stands_in), cmocka_unit_test(test_covered_window),
		cmocka_unit_test(test_intervals_cap),       cmocka_unit_test(test_revoke_counts),
		cmocka_unit_test(test_seam_counts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
