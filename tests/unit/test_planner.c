/* Planner: run coalescing, layer groups, descriptor emission (whole pages
 * and per-rank fragments, state slots) and the four index-resolution cases
 * of spec 6.5. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/planner.h"

static void coalesce_empty_gives_no_run(void **state)
{
	lc__run_t runs[1];
	assert_int_equal(lc__coalesce(NULL, NULL, 0, runs), 0);
}

static void coalesce_single_page_is_one_run(void **state)
{
	int64_t s[] = {7}, d[] = {3};
	lc__run_t r[1];
	assert_int_equal(lc__coalesce(s, d, 1, r), 1);
	assert_int_equal(r[0].src, 7);
	assert_int_equal(r[0].dst, 3);
	assert_int_equal(r[0].n, 1);
}

static void coalesce_all_contiguous_is_one_run(void **state)
{
	int64_t s[] = {10, 11, 12, 13}, d[] = {0, 1, 2, 3};
	lc__run_t r[4];
	assert_int_equal(lc__coalesce(s, d, 4, r), 1);
	assert_int_equal(r[0].n, 4);
}

static void coalesce_none_contiguous_is_one_run_per_page(void **state)
{
	int64_t s[] = {5, 3, 9, 10}, d[] = {0, 1, 2, 4}; /* 9->10 but dst 2->4 */
	lc__run_t r[4];
	assert_int_equal(lc__coalesce(s, d, 4, r), 4);
	assert_int_equal(r[3].src, 10);
	assert_int_equal(r[3].dst, 4);
}

static void coalesce_splits_where_either_side_jumps(void **state)
{
	int64_t s[] = {1, 2, 3, 8, 9, 4}, d[] = {5, 6, 7, 8, 9, 10};
	lc__run_t r[6];
	assert_int_equal(lc__coalesce(s, d, 6, r), 3);
	assert_int_equal(r[0].n, 3);
	assert_int_equal(r[1].src, 8);
	assert_int_equal(r[1].n, 2);
	assert_int_equal(r[2].src, 4);
}

static void check_groups(uint32_t L, int64_t I, const uint32_t *bounds, uint32_t n)
{
	assert_int_equal(lc__group_count(L, I), n);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t b, e;
		lc__group_range(L, I, k, &b, &e);
		assert_int_equal(b, bounds[2 * k]);
		assert_int_equal(e, bounds[2 * k + 1]);
	}
}

static void groups_of_one_layer(void **state)
{
	check_groups(4, 1, (uint32_t[]){0, 1, 1, 2, 2, 3, 3, 4}, 4);
}

static void groups_of_three_layers_end_short(void **state)
{
	check_groups(8, 3, (uint32_t[]){0, 3, 3, 6, 6, 8}, 3);
	assert_int_equal(lc__group_count(61, 3), 21);
	uint32_t b, e;
	lc__group_range(61, 3, 20, &b, &e);
	assert_int_equal(b, 60);
	assert_int_equal(e, 61);
}

static void groups_of_l_layers_is_one_group(void **state)
{
	check_groups(8, 8, (uint32_t[]){0, 8}, 1);
	check_groups(8, 100, (uint32_t[]){0, 8}, 1);
}

static void interval_zero_or_less_sends_all_layers_at_once(void **state)
{
	check_groups(8, 0, (uint32_t[]){0, 8}, 1);
	check_groups(8, -1, (uint32_t[]){0, 8}, 1);
}

/* A 3-layer MHA layout with distinct item lengths for K and V. */
static lc_layout_t *mha3(void)
{
	lc_layout_params_t p = {.size = sizeof(p),
				.model = LC_LAYOUT_MHA,
				.layers = 3,
				.pages = 100,
				.item_len = {100, 10}};
	void *bases[6];
	for (int i = 0; i < 6; i++)
		bases[i] = (void *)(uintptr_t)((i + 1) << 20);
	p.bases = bases;
	lc_layout_t *l;
	assert_int_equal(lc_layout_build(&p, &l), 0);
	return l;
}

static void one_descriptor_per_buffer_and_run_per_layer(void **state)
{
	lc_layout_t *l = mha3();
	lc__xfer_t x[6];
	for (int b = 0; b < 6; b++)
		lc__xfer_whole_page(&x[b], &l->bufs[b], 100 + b, 1000 * b);
	int64_t s[] = {4, 5, 6, 20}, d[] = {0, 1, 2, 9};
	lc__run_t runs[4];
	lc__plan_t p = {.layout = l, .xfer = x, .runs = runs, .pages = 4};
	p.nruns = lc__coalesce(s, d, 4, runs);
	assert_int_equal(p.nruns, 2);
	assert_int_equal(lc__plan_count(&p, 1, 3), 8); /* 2 layers x 2 buffers x 2 runs */
	lc_write_t w[8];
	uint64_t bytes;
	assert_int_equal(lc__plan_emit(&p, 1, 3, w, &bytes), 8);
	/* Layer 1: K_1 = buffer 1, then V_1 = buffer 4. */
	assert_ptr_equal(w[0].local, (uint8_t *)l->bufs[1].base + 4 * 100);
	assert_int_equal(w[0].remote_offset, 1000 + 0 * 100);
	assert_int_equal(w[0].length, 300);
	assert_int_equal(w[0].remote_region, 101);
	assert_ptr_equal(w[1].local, (uint8_t *)l->bufs[1].base + 20 * 100);
	assert_int_equal(w[1].remote_offset, 1000 + 9 * 100);
	assert_int_equal(w[1].length, 100);
	assert_ptr_equal(w[2].local, (uint8_t *)l->bufs[4].base + 4 * 10);
	assert_int_equal(w[2].remote_offset, 4000);
	assert_int_equal(w[2].length, 30);
	assert_int_equal(w[4].remote_region, 102); /* layer 2, K_2 */
	assert_int_equal(bytes, 2 * (400 + 40));
	lc_layout_destroy(l);
}

static void fragments_move_a_byte_range_of_each_page(void **state)
{
	/* Heterogeneous TP: this P rank holds half of D's page. */
	lc_layout_t *l = mha3();
	lc__xfer_t x[6];
	for (int b = 0; b < 6; b++) {
		lc__xfer_whole_page(&x[b], &l->bufs[b], 7, 0);
		x[b].skip = 1;
	}
	x[0] = (lc__xfer_t){.src_base = (uint8_t *)l->bufs[0].base + 0,
			    .src_stride = 100,
			    .dst_base = 50,
			    .dst_stride = 200,
			    .bytes = 50,
			    .dst_region = 7};
	int64_t s[] = {1, 2}, d[] = {3, 4};
	lc__run_t runs[2];
	lc__plan_t p = {.layout = l, .xfer = x, .runs = runs, .pages = 2};
	p.nruns = lc__coalesce(s, d, 2, runs);
	assert_int_equal(lc__plan_count(&p, 0, 3), 2);
	lc_write_t w[2];
	uint64_t bytes;
	assert_int_equal(lc__plan_emit(&p, 0, 3, w, &bytes), 2);
	assert_ptr_equal(w[0].local, (uint8_t *)l->bufs[0].base + 100);
	assert_int_equal(w[0].remote_offset, 50 + 3 * 200);
	assert_int_equal(w[1].remote_offset, 50 + 4 * 200);
	assert_int_equal(w[1].length, 50);
	assert_int_equal(bytes, 100);
	lc_layout_destroy(l);
}

static void state_buffers_use_slot_runs_within_their_layer_group(void **state)
{
	int32_t st[] = {1};
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MLA,
				 .layers = 1,
				 .pages = 4,
				 .item_len = {8},
				 .state_components = 1,
				 .state_layers = 1,
				 .state_layer_ids = st,
				 .state_slots = 4,
				 .state_item_len = 1000};
	void *sb[] = {(void *)0x100000};
	void *kb[] = {(void *)0x200000};
	lp.bases = kb;
	lp.state_bases = sb;
	lc_layout_t *l;
	assert_int_equal(lc_layout_build(&lp, &l), 0);
	lc__xfer_t x[2];
	lc__xfer_whole_page(&x[0], &l->bufs[0], 1, 0);
	lc__xfer_whole_page(&x[1], &l->bufs[1], 2, 0);
	int64_t ps[] = {3}, ds[] = {0, 2}, os[2], od[2];
	assert_int_equal(lc__pair_slots(ps, 1, ds, 2, os, od), 2); /* broadcast */
	lc__run_t sr[2];
	lc__plan_t p = {.layout = l, .xfer = x, .state_runs = sr, .slots = 2};
	p.nstate_runs = lc__coalesce(os, od, 2, sr);
	assert_int_equal(lc__plan_count(&p, 0, 1), 0); /* layer 0: no KV pages here */
	lc_write_t w[2];
	uint64_t bytes;
	assert_int_equal(lc__plan_emit(&p, 1, 2, w, &bytes), 2);
	assert_ptr_equal(w[0].local, (uint8_t *)0x100000 + 3000);
	assert_int_equal(w[0].remote_offset, 0);
	assert_int_equal(w[1].remote_offset, 2000);
	assert_int_equal(w[1].remote_region, 2);
	lc_layout_destroy(l);
}

static void slot_pairing_rules(void **state)
{
	int64_t os[3], od[3];
	assert_int_equal(lc__pair_slots((int64_t[]){1, 2}, 2, (int64_t[]){5, 6}, 2, os, od), 2);
	assert_int_equal(os[1], 2);
	assert_int_equal(od[1], 6);
	assert_int_equal(lc__pair_slots((int64_t[]){1, -1}, 2, (int64_t[]){5, 6}, 2, os, od), 1);
	assert_int_equal(lc__pair_slots((int64_t[]){1, 2}, 2, (int64_t[]){5, 6, 7}, 3, os, od),
			 -EINVAL);
}

/* Spec 6.5: the four (src, dst) partial-cache cases. */
static void resolve_off_off_pairs_positions(void **state)
{
	int64_t src[] = {10, 11, 12}, dst[] = {90, 91, 92, 93, 94}, os[3], od[3];
	lc__resolve_in_t in = {
		.src = src, .positions = 3, .dst = dst, .dst_count = 5, .dst_begin = 2};
	assert_int_equal(lc__resolve(&in, os, od), 3);
	assert_int_equal(os[0], 10);
	assert_int_equal(od[0], 92);
	assert_int_equal(od[2], 94);
}

static void resolve_on_off_takes_local_pages_and_masked_dst(void **state)
{
	uint8_t mask[] = {1, 0, 1, 1};
	int64_t local[] = {70, 71, 72}, dst[] = {90, 91, 92, 93}, os[4], od[4];
	lc__resolve_in_t in = {.src_mask = mask,
			       .src_local = local,
			       .src_local_count = 3,
			       .positions = 4,
			       .dst = dst,
			       .dst_count = 4};
	assert_int_equal(lc__resolve(&in, os, od), 3);
	assert_int_equal(os[1], 71);
	assert_int_equal(od[1], 92);
	assert_int_equal(os[2], 72);
	assert_int_equal(od[2], 93);
}

static void resolve_off_on_takes_masked_src_and_dst_local_pages(void **state)
{
	/* D owns positions 1 and 3 of its list; local ids via cumsum(mask)-1. */
	uint8_t dmask[] = {1, 0, 1, 0, 1};
	int64_t dlocal[] = {50, 51, 52}, src[] = {10, 11, 12}, dst[] = {0, 0, 0, 0, 0};
	int64_t os[3], od[3];
	lc__resolve_in_t in = {.src = src,
			       .positions = 3,
			       .dst = dst,
			       .dst_count = 5,
			       .dst_begin = 2,
			       .dst_mask = dmask,
			       .dst_local = dlocal,
			       .dst_local_count = 3};
	assert_int_equal(lc__resolve(&in, os, od), 2);
	assert_int_equal(os[0], 10);
	assert_int_equal(od[0], 51);
	assert_int_equal(os[1], 12);
	assert_int_equal(od[1], 52);
}

static void resolve_on_on_keeps_positions_both_sides_own(void **state)
{
	uint8_t smask[] = {1, 1, 0, 1}, dmask[] = {0, 1, 1, 1};
	int64_t slocal[] = {70, 71, 72}, dlocal[] = {50, 51, 52}, dst[4] = {0};
	int64_t os[4], od[4];
	lc__resolve_in_t in = {.src_mask = smask,
			       .src_local = slocal,
			       .src_local_count = 3,
			       .positions = 4,
			       .dst = dst,
			       .dst_count = 4,
			       .dst_mask = dmask,
			       .dst_local = dlocal,
			       .dst_local_count = 3};
	/* common = {1, 3}: src ranks 1 and 2, dst ranks 0 and 2 */
	assert_int_equal(lc__resolve(&in, os, od), 2);
	assert_int_equal(os[0], 71);
	assert_int_equal(od[0], 50);
	assert_int_equal(os[1], 72);
	assert_int_equal(od[1], 52);
}

static void resolve_refuses_a_short_destination_list(void **state)
{
	int64_t src[] = {1, 2, 3}, dst[] = {9, 9}, os[3], od[3];
	lc__resolve_in_t in = {.src = src, .positions = 3, .dst = dst, .dst_count = 2};
	assert_int_equal(lc__resolve(&in, os, od), -ERANGE);
	in.positions = 2;
	in.dst_begin = 1;
	assert_int_equal(lc__resolve(&in, os, od), -ERANGE);
}

static void resolve_refuses_local_indices_out_of_range(void **state)
{
	uint8_t mask[] = {1, 1};
	int64_t local[] = {70}, dst[] = {1, 2}, os[2], od[2];
	lc__resolve_in_t in = {.src_mask = mask,
			       .src_local = local,
			       .src_local_count = 1,
			       .positions = 2,
			       .dst = dst,
			       .dst_count = 2};
	assert_int_equal(lc__resolve(&in, os, od), -EINVAL);
}

/* lc_tp_fragment over the cases of spec 6.7 and 5.5. */
static int tpf(int pt, int pr, uint64_t pi, int dt, int dr, uint64_t di, uint64_t unit,
	       lc_fragment_t *f)
{
	lc_tp_side_t p = {.tp_size = pt, .tp_rank = pr, .item_len = pi, .unit_len = unit};
	lc_tp_side_t d = {.tp_size = dt, .tp_rank = dr, .item_len = di, .unit_len = unit};
	memset(f, 0, sizeof(*f));
	return lc_tp_fragment(&p, &d, f);
}

static void tp_fragments_cover_every_unit_once(void **state)
{
	lc_fragment_t f;
	static const struct {
		int pt, pr;
		uint64_t pi;
		int dt, dr;
		uint64_t di, unit;
		int rc;
		uint64_t src, dst, bytes;
	} c[] = {
		/* Equal geometry: rank p -> rank p, whole pages. */
		{2, 1, 512, 2, 1, 512, 128, 1, 0, 0, 512},
		{2, 1, 512, 2, 0, 512, 128, 0, 0, 0, 0},
		/* MHA, P TP 1 (8 heads), D TP 4 (2 heads): D rank 3 takes 6-7. */
		{1, 0, 1024, 4, 3, 256, 128, 1, 768, 0, 256},
		/* P TP 4 (2 heads), D TP 2 (4 heads): P rank 3 fills the back
		 * half of D rank 1's page and sends D rank 0 nothing. */
		{4, 3, 256, 2, 1, 512, 128, 1, 0, 256, 256},
		{4, 3, 256, 2, 0, 512, 128, 0, 0, 0, 0},
		/* P TP 2 (3 heads), D TP 3 (2 heads): D rank 1 holds heads 2-3,
		 * one from each P rank. */
		{2, 0, 384, 3, 1, 256, 128, 1, 256, 0, 128},
		{2, 1, 384, 3, 1, 256, 128, 1, 0, 128, 128},
		/* GQA, 2 KV heads over P TP 4 (pairs replicate), D TP 1: ranks 0
		 * and 2 send, 1 and 3 do not. */
		{4, 0, 128, 1, 0, 256, 128, 1, 0, 0, 128},
		{4, 1, 128, 1, 0, 256, 128, 0, 0, 0, 0},
		{4, 2, 128, 1, 0, 256, 128, 1, 0, 128, 128},
		{4, 3, 128, 1, 0, 256, 128, 0, 0, 0, 0},
		/* An MLA latent (one unit per page): P TP 2 -> D TP 1 is rank 0
		 * real, rank 1 nothing (the seed's dummy); P TP 1 -> D TP 2
		 * feeds both D ranks. */
		{2, 0, 576, 1, 0, 576, 576, 1, 0, 0, 576},
		{2, 1, 576, 1, 0, 576, 576, 0, 0, 0, 0},
		{1, 0, 576, 2, 1, 576, 576, 1, 0, 0, 576},
		/* What cannot pair: not whole units; 6 heads against 8; a rank
		 * out of range. */
		{1, 0, 512, 2, 0, 256, 100, LC_ERR_GEOMETRY, 0, 0, 0},
		{2, 0, 384, 4, 0, 256, 128, LC_ERR_GEOMETRY, 0, 0, 0},
		{2, 2, 512, 2, 0, 512, 128, -EINVAL, 0, 0, 0},
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		int rc = tpf(c[k].pt, c[k].pr, c[k].pi, c[k].dt, c[k].dr, c[k].di, c[k].unit, &f);
		if (rc != c[k].rc)
			fail_msg("case %zu: rc %d, want %d", k, rc, c[k].rc);
		if (rc == 1 && (f.src_offset != c[k].src || f.dst_offset != c[k].dst ||
				f.bytes != c[k].bytes || f.dst_item_len != c[k].di))
			fail_msg("case %zu: %llu -> %llu, %llu bytes", k,
				 (unsigned long long)f.src_offset, (unsigned long long)f.dst_offset,
				 (unsigned long long)f.bytes);
	}
	/* Every D rank's page is covered exactly once over all P ranks. */
	for (int pt = 1; pt <= 8; pt *= 2)
		for (int dt = 1; dt <= 8; dt *= 2)
			for (int dr = 0; dr < dt; dr++) {
				uint64_t di = 8 * 64 / (uint64_t)dt;
				uint8_t hits[512] = {0};
				for (int pr = 0; pr < pt; pr++)
					if (tpf(pt, pr, 8 * 64 / (uint64_t)pt, dt, dr, di, 64,
						&f) == 1) {
						assert_true(f.dst_offset + f.bytes <= di);
						for (uint64_t k = 0; k < f.bytes; k++)
							hits[f.dst_offset + k]++;
					}
				for (uint64_t k = 0; k < di; k++)
					assert_int_equal(hits[k], 1);
			}
	/* Unit lengths differ; no arguments. */
	lc_tp_side_t p = {1, 0, 512, 128, 0, 0}, d = {2, 0, 256, 64, 0, 0};
	assert_int_equal(lc_tp_fragment(&p, &d, &f), LC_ERR_GEOMETRY);
	assert_int_equal(lc_tp_fragment(NULL, &d, &f), -EINVAL);
}

/* Token-major pages ([rows, heads, head_dim]): a rank's heads are a block
 * of each token row; the fragment is rows blocks at the two row strides. */
static int tpr(int pt, int pr, uint64_t pi, int dt, int dr, uint64_t di, uint64_t unit,
	       uint32_t rows, lc_fragment_t *f)
{
	lc_tp_side_t p = {pt, pr, pi, unit, rows, 0}, d = {dt, dr, di, unit, rows, 0};
	memset(f, 0, sizeof(*f));
	return lc_tp_fragment(&p, &d, f);
}

static void tp_fragments_of_token_major_pages_are_strided(void **state)
{
	lc_fragment_t f;
	enum { ROWS = 16, HEAD = 128 };
	/* GQA, 2 KV heads: P TP 2 (1 head per rank) -> D TP 1 (2 heads). P
	 * rank 1 sends its row of every token into the second head of D's. */
	assert_int_equal(tpr(2, 1, ROWS * HEAD, 1, 0, ROWS * 2 * HEAD, HEAD, ROWS, &f), 1);
	assert_int_equal(f.count, ROWS);
	assert_int_equal(f.bytes, HEAD);
	assert_int_equal(f.src_offset, 0);
	assert_int_equal(f.dst_offset, HEAD);
	assert_int_equal(f.src_stride, HEAD);
	assert_int_equal(f.dst_stride, 2 * HEAD);
	assert_int_equal(f.dst_item_len, ROWS * 2 * HEAD);
	/* P TP 1 (2 heads) -> D TP 2: D rank 1 takes head 1 of every row. */
	assert_int_equal(tpr(1, 0, ROWS * 2 * HEAD, 2, 1, ROWS * HEAD, HEAD, ROWS, &f), 1);
	assert_int_equal(f.count, ROWS);
	assert_int_equal(f.src_offset, HEAD);
	assert_int_equal(f.dst_offset, 0);
	assert_int_equal(f.src_stride, 2 * HEAD);
	assert_int_equal(f.dst_stride, HEAD);
	/* An MLA latent (every rank holds it whole): whole rows on both sides
	 * make one block of the whole page, from rank 0 only at P TP 2. */
	assert_int_equal(tpr(2, 0, ROWS * 576, 1, 0, ROWS * 576, 576, ROWS, &f), 1);
	assert_true(f.count <= 1);
	assert_int_equal(f.bytes, ROWS * 576);
	assert_int_equal(tpr(2, 1, ROWS * 576, 1, 0, ROWS * 576, 576, ROWS, &f), 0);
	assert_int_equal(tpr(1, 0, ROWS * 576, 2, 1, ROWS * 576, 576, ROWS, &f), 1);
	assert_true(f.count <= 1);
	/* Every byte of every D page covered exactly once over all P ranks,
	 * block by block, and every block inside both pages. */
	for (int pt = 1; pt <= 8; pt *= 2)
		for (int dt = 1; dt <= 8; dt *= 2)
			for (int dr = 0; dr < dt; dr++) {
				uint64_t pi = 4 * 8 * 16 / (uint64_t)pt, di = 4 * 8 * 16 / (uint64_t)dt;
				uint8_t hits[512] = {0};
				for (int pr = 0; pr < pt; pr++) {
					if (tpr(pt, pr, pi, dt, dr, di, 16, 4, &f) != 1)
						continue;
					uint32_t n = f.count > 1 ? f.count : 1;
					for (uint32_t i = 0; i < n; i++) {
						uint64_t so = f.src_offset + i * f.src_stride;
						uint64_t dof = f.dst_offset + i * f.dst_stride;
						assert_true(so + f.bytes <= pi && dof + f.bytes <= di);
						for (uint64_t k = 0; k < f.bytes; k++)
							hits[dof + k]++;
					}
				}
				for (uint64_t k = 0; k < di; k++)
					if (hits[k] != 1)
						fail_msg("P TP %d D TP %d rank %d: byte %llu hit %u", pt,
							 dt, dr, (unsigned long long)k, hits[k]);
			}
	/* Rows that differ, do not divide the page, or pass the cap. */
	lc_tp_side_t p = {2, 0, 16 * 128, 128, 16, 0}, d = {1, 0, 16 * 256, 128, 8, 0};
	assert_int_equal(lc_tp_fragment(&p, &d, &f), LC_ERR_GEOMETRY);
	d.rows = 0;
	assert_int_equal(lc_tp_fragment(&p, &d, &f), LC_ERR_GEOMETRY);
	p.rows = d.rows = 15;
	assert_int_equal(lc_tp_fragment(&p, &d, &f), LC_ERR_GEOMETRY);
	p.rows = d.rows = LC_WRITE_MAX_COUNT + 1;
	assert_int_equal(lc_tp_fragment(&p, &d, &f), LC_ERR_GEOMETRY);
	/* rows 0 and 1 both mean head-major. */
	p = (lc_tp_side_t){2, 1, 256, 128, 1, 0};
	d = (lc_tp_side_t){1, 0, 512, 128, 0, 0};
	assert_int_equal(lc_tp_fragment(&p, &d, &f), 1);
	assert_true(f.count <= 1);
	assert_int_equal(f.dst_offset, 256);
}

/* The planner emits one strided write per page for a token-major
 * fragment, never one per token. */
static void strided_fragments_emit_one_write_per_page(void **state)
{
	lc_layout_t *l = mha3();
	lc__xfer_t x[6];
	for (int b = 0; b < 6; b++) {
		lc__xfer_whole_page(&x[b], &l->bufs[b], 7, 0);
		x[b].skip = 1;
	}
	x[0] = (lc__xfer_t){.src_base = (uint8_t *)l->bufs[0].base + 0,
			    .src_stride = 100,
			    .dst_base = 10,
			    .dst_stride = 200,
			    .bytes = 5,
			    .dst_region = 7,
			    .count = 10,
			    .block_src = 10,
			    .block_dst = 20};
	int64_t s[] = {1, 2, 3}, d[] = {3, 4, 5};
	lc__run_t runs[3];
	lc__plan_t p = {.layout = l, .xfer = x, .runs = runs, .pages = 3};
	p.nruns = lc__coalesce(s, d, 3, runs);
	assert_int_equal(p.nruns, 1); /* contiguous, but fragments go page by page */
	assert_int_equal(lc__plan_count(&p, 0, 3), 3);
	lc_write_t w[3];
	uint64_t bytes;
	assert_int_equal(lc__plan_emit(&p, 0, 3, w, &bytes), 3);
	for (int i = 0; i < 3; i++) {
		assert_ptr_equal(w[i].local, (uint8_t *)l->bufs[0].base + (1 + i) * 100);
		assert_int_equal(w[i].remote_offset, 10 + (3 + i) * 200);
		assert_int_equal(w[i].length, 5);
		assert_int_equal(w[i].count, 10);
		assert_int_equal(w[i].local_stride, 10);
		assert_int_equal(w[i].remote_stride, 20);
	}
	assert_int_equal(bytes, 3 * 10 * 5);
	lc_layout_destroy(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(coalesce_empty_gives_no_run),
		cmocka_unit_test(coalesce_single_page_is_one_run),
		cmocka_unit_test(coalesce_all_contiguous_is_one_run),
		cmocka_unit_test(coalesce_none_contiguous_is_one_run_per_page),
		cmocka_unit_test(coalesce_splits_where_either_side_jumps),
		cmocka_unit_test(groups_of_one_layer),
		cmocka_unit_test(groups_of_three_layers_end_short),
		cmocka_unit_test(groups_of_l_layers_is_one_group),
		cmocka_unit_test(interval_zero_or_less_sends_all_layers_at_once),
		cmocka_unit_test(one_descriptor_per_buffer_and_run_per_layer),
		cmocka_unit_test(fragments_move_a_byte_range_of_each_page),
		cmocka_unit_test(tp_fragments_cover_every_unit_once),
		cmocka_unit_test(tp_fragments_of_token_major_pages_are_strided),
		cmocka_unit_test(strided_fragments_emit_one_write_per_page),
		cmocka_unit_test(state_buffers_use_slot_runs_within_their_layer_group),
		cmocka_unit_test(slot_pairing_rules),
		cmocka_unit_test(resolve_off_off_pairs_positions),
		cmocka_unit_test(resolve_on_off_takes_local_pages_and_masked_dst),
		cmocka_unit_test(resolve_off_on_takes_masked_src_and_dst_local_pages),
		cmocka_unit_test(resolve_on_on_keeps_positions_both_sides_own),
		cmocka_unit_test(resolve_refuses_a_short_destination_list),
		cmocka_unit_test(resolve_refuses_local_indices_out_of_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
