/* Tensor-parallel topology: the fragments P sends a D rank and the target
 * P ranks D plans for a room, at equal, D-larger, P-larger and
 * heterogeneous (page sizes differ) TP, across dp groups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/topology.h"

static lc__tp_plan_t plan(int p_world, int p_dp, int d_tp, int d_rank, const uint64_t *p_lens,
			  const uint64_t *d_lens, uint32_t nbuf, uint64_t room, int expect)
{
	lc__topology_t t = {.p_world = p_world,
			    .p_dp = p_dp,
			    .d_tp = d_tp,
			    .d_rank = d_rank,
			    .p_lens = p_lens,
			    .d_lens = d_lens,
			    .nbuf = nbuf};
	lc__tp_plan_t out;
	char why[200] = "";
	assert_int_equal(lc__tp_plan_targets(&t, room, &out, why, sizeof why), expect);
	if (expect)
		assert_true(why[0] != '\0');
	return out;
}

static void equal_tp_is_one_rank_in_the_rooms_dp_group(void **state)
{
	uint64_t lens[] = {4096, 4096};
	lc__tp_plan_t p = plan(4, 2, 2, 1, lens, lens, 2, 3, 0); /* room 3: dp group 1 */
	assert_int_equal(p.ntargets, 1);
	assert_int_equal(p.targets[0].rank, 2 + 1);
	assert_int_equal(p.targets[0].required_dst, 1);
	assert_false(p.targets[0].dummy);
	assert_int_equal(p.required_responses, 1);
	assert_int_equal(p.required_dst, 1);
}

static void larger_d_tp_shares_one_p_rank(void **state)
{
	uint64_t lens[] = {4096};
	lc__tp_plan_t p = plan(2, 1, 4, 3, lens, lens, 1, 0, 0);
	assert_int_equal(p.ntargets, 1);
	assert_int_equal(p.targets[0].rank, 1);
	assert_int_equal(p.required_dst, 2);
	plan(2, 1, 3, 0, lens, lens, 1, 0, LC_ERR_GEOMETRY); /* 3 % 2 */
}

static void larger_p_tp_gives_one_real_rank_and_dummies(void **state)
{
	uint64_t lens[] = {4096};
	lc__tp_plan_t p = plan(4, 1, 2, 1, lens, lens, 1, 0, 0);
	assert_int_equal(p.ntargets, 2);
	assert_int_equal(p.targets[0].rank, 2);
	assert_false(p.targets[0].dummy);
	assert_int_equal(p.targets[1].rank, 3);
	assert_true(p.targets[1].dummy);
	assert_int_equal(p.required_responses, 1);
	assert_int_equal(p.required_dst, 1);
}

/* P TP 1 holding 2 units per page, D TP 2 holding 1: P rank 0 serves both
 * D ranks, half a page each. */
static void split_tp_fragments_pair_the_units(void **state)
{
	uint64_t p_lens[] = {2048}, d_lens[] = {1024};
	lc__topology_t t = {.p_world = 1,
			    .p_dp = 1,
			    .d_tp = 2,
			    .d_rank = 1,
			    .p_lens = p_lens,
			    .d_lens = d_lens,
			    .nbuf = 1};
	lc_fragment_t f[1];
	char why[200];
	assert_true(lc__tp_split(&t));
	assert_int_equal(lc__tp_fragments(&t, 0, 1, f, why, sizeof why), 1);
	assert_int_equal(f[0].buffer, 0);
	assert_int_equal(f[0].src_offset, 1024);
	assert_int_equal(f[0].dst_offset, 0);
	assert_int_equal(f[0].bytes, 1024);
	assert_int_equal(lc__tp_fragments(&t, 0, 0, NULL, why, sizeof why), 1);
	lc__tp_plan_t p = plan(1, 1, 2, 1, p_lens, d_lens, 1, 0, 0);
	assert_int_equal(p.ntargets, 1);
	assert_int_equal(p.targets[0].rank, 0);
	assert_int_equal(p.targets[0].required_dst, 2);
	assert_int_equal(p.required_dst, 2);
}

/* Replicas: a P rank with nothing for any D rank is a dummy of one D
 * rank, so that its room ends too. */
static void split_tp_replica_is_a_dummy_of_one_d_rank(void **state)
{
	uint64_t p_lens[] = {512}, d_lens[] = {256};
	/* P TP 2 x 512 bytes, D TP 1 x 256: a P rank holds more than D's
	 * whole page, which does not split. */
	plan(2, 1, 1, 0, p_lens, d_lens, 1, 0, LC_ERR_GEOMETRY);
	/* P TP 2 x 256 bytes, D TP 4 x 128 bytes (512 distinct units each
	 * side): D rank 0 hears P rank 0 alone, which serves 2 D ranks. */
	uint64_t p2[] = {256}, d2[] = {128};
	lc__tp_plan_t p = plan(2, 1, 4, 0, p2, d2, 1, 0, 0);
	assert_int_equal(p.ntargets, 1);
	assert_int_equal(p.targets[0].rank, 0);
	assert_int_equal(p.targets[0].required_dst, 2);
	/* P TP 4 x 128 bytes over 256 distinct: ranks 1 and 3 are replicas;
	 * D TP 1 x 256: D rank 0 hears ranks 0 and 2 (real) and 1, 3 (dummies). */
	uint64_t p3[] = {128}, d3[] = {256};
	p = plan(4, 1, 1, 0, p3, d3, 1, 0, 0);
	assert_int_equal(p.ntargets, 4);
	assert_int_equal(p.required_responses, 2);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(p.targets[i].rank, i);
		assert_int_equal(p.targets[i].dummy, i % 2 == 1);
		assert_int_equal(p.targets[i].required_dst, 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(equal_tp_is_one_rank_in_the_rooms_dp_group),
		cmocka_unit_test(larger_d_tp_shares_one_p_rank),
		cmocka_unit_test(larger_p_tp_gives_one_real_rank_and_dummies),
		cmocka_unit_test(split_tp_fragments_pair_the_units),
		cmocka_unit_test(split_tp_replica_is_a_dummy_of_one_d_rank),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
