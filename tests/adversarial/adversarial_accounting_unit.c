/*
 * D's byte accounting in one process (issue 13): the grant entry's granted
 * and landed totals (core/grant.h) and the memory seam's counting
 * (transport/seam.h), including duplicates and revoke.
 */
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
		     uint64_t want_landed)
{
	uint64_t g = 0, l = 0;
	assert_int_equal(lc__grant_room_bytes(t, room, &g, &l), 0);
	assert_int_equal(g, want_granted);
	assert_int_equal(l, want_landed);
}

/* Granted counts the merged ranges: overlaps and repeats count once. */
static void test_granted_merged(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	uint64_t g, l;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_room_bytes(t, 1, &g, &l), LC_ERR_GRANT);
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

/* Landed counts every write; bytes beyond the grant are reported once as
 * the crossing and as the excess. */
static void test_landed_over(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	bool first;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 1, 1, 0, 60, &g), 0);
	assert_int_equal(lc__grant_landed(g, 60, &first), 0);
	assert_false(first);
	assert_int_equal(lc__grant_landed(g, 60, &first), 20); /* a duplicate crosses */
	assert_true(first);
	assert_int_equal(lc__grant_landed(g, 60, &first), 60);
	assert_false(first);
	bytes_of(t, 1, 100, 180);
	/* Revoke drops the counts; a new grant of the id starts from zero,
	 * and a write still holding the old entry counts into the old one. */
	assert_int_equal(lc__grant_revoke(t, 1), 1);
	assert_int_equal(lc__grant_issue(t, 1, 1, 0, 100), 0);
	assert_int_equal(lc__grant_landed(g, 10, &first), 10);
	lc__grant_put(g);
	bytes_of(t, 1, 100, 0);
	lc__grant_table_destroy(t);
}

/* Through the seam: what lands is counted on the room, zero-length and
 * rejected writes count nothing, a replay counts bytes_landed_over_grant. */
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
	assert_int_equal(lc__land_write(ctx, 5, id, 0, src, 2048), 0);
	assert_int_equal(lc__land_write(ctx, 5, id, 2048, src, 0), 0);
	assert_int_equal(lc__land_write(ctx, 5, id, 4096, src, 16), LC_ERR_GRANT);
	bytes_of(ctx->grants, 5, 4096, 2048);
	assert_int_equal(lc__land_write(ctx, 5, id, 2048, src, 2048), 0);
	bytes_of(ctx->grants, 5, 4096, 4096);
	assert_int_equal(lc_ctx_counter_by_name(ctx, "bytes_landed_over_grant", &over), 0);
	assert_int_equal(over, 0);
	assert_int_equal(lc__land_write(ctx, 5, id, 0, src, 1024), 0); /* a replay */
	bytes_of(ctx->grants, 5, 4096, 5120);
	assert_int_equal(lc_ctx_counter_by_name(ctx, "bytes_landed_over_grant", &over), 0);
	assert_int_equal(over, 1024);
	assert_int_equal(lc_grant_revoke(ctx, 5), 1);
	lc_region_deregister(r);
	lc_ctx_destroy(ctx);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_granted_merged),
		cmocka_unit_test(test_landed_over),
		cmocka_unit_test(test_seam_counts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
