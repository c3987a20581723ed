/* Layouts: buffer order and per-layer offsets of every builder (spec 2.6),
 * draft layers, state buffers, the general builder and the fingerprint. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/layout.h"

static lc_layout_t *build(uint32_t model, uint32_t layers, uint32_t draft)
{
	lc_layout_params_t p = {.size = sizeof(p),
				.model = model,
				.layers = layers,
				.draft_layers = draft,
				.pages = 8,
				.item_len = {256, 128, 64}};
	lc_layout_t *l = NULL;
	assert_int_equal(lc_layout_build(&p, &l), 0);
	return l;
}

static void expect_layer(const lc_layout_t *l, int layer, const uint32_t *want, int n)
{
	uint32_t got[8];
	assert_int_equal(lc_layout_layer_buffers(l, layer, got, 8), n);
	for (int i = 0; i < n; i++)
		assert_int_equal(got[i], want[i]);
}

static void mha_buffers_are_all_k_then_all_v(void **state)
{
	lc_layout_t *l = build(LC_LAYOUT_MHA, 4, 0);
	lc_buffer_t b;
	assert_int_equal(lc_layout_buffer_count(l), 8);
	assert_int_equal(lc_layout_layer_count(l), 4);
	for (int k = 0; k < 4; k++)
		expect_layer(l, k, (uint32_t[]){k, 4 + k}, 2);
	assert_int_equal(lc_layout_buffer(l, 1, &b), 0);
	assert_int_equal(b.kind, LC_BUFFER_K);
	assert_int_equal(b.item_len, 256);
	assert_int_equal(b.length, 256 * 8);
	assert_int_equal(lc_layout_buffer(l, 5, &b), 0);
	assert_int_equal(b.kind, LC_BUFFER_V);
	assert_int_equal(b.item_len, 128);
	assert_int_equal(lc_layout_buffer(l, 8, &b), -ERANGE);
	lc_layout_destroy(l);
}

static void mha_draft_layers_follow_target_buffers_and_ids(void **state)
{
	/* Target [K0..K3, V0..V3], then draft [Kd0, Kd1, Vd0, Vd1] (the pool's
	 * concatenation, not the seed's interleaved _init_offsets). */
	lc_layout_t *l = build(LC_LAYOUT_MHA, 4, 2);
	lc_buffer_t b;
	assert_int_equal(lc_layout_buffer_count(l), 12);
	assert_int_equal(lc_layout_layer_count(l), 6);
	expect_layer(l, 3, (uint32_t[]){3, 7}, 2);
	expect_layer(l, 4, (uint32_t[]){8, 10}, 2);
	expect_layer(l, 5, (uint32_t[]){9, 11}, 2);
	assert_int_equal(lc_layout_buffer(l, 10, &b), 0);
	assert_int_equal(b.flags & LC_BUFFER_DRAFT, LC_BUFFER_DRAFT);
	assert_int_equal(b.kind, LC_BUFFER_V);
	assert_int_equal(b.layer, 4);
	lc_layout_destroy(l);
}

static void mla_has_one_latent_buffer_per_layer_and_draft_after(void **state)
{
	lc_layout_t *l = build(LC_LAYOUT_MLA, 3, 1);
	lc_buffer_t b;
	assert_int_equal(lc_layout_buffer_count(l), 4);
	for (int k = 0; k < 4; k++)
		expect_layer(l, k, (uint32_t[]){k}, 1);
	assert_int_equal(lc_layout_buffer(l, 3, &b), 0);
	assert_int_equal(b.kind, LC_BUFFER_LATENT);
	assert_int_equal(b.flags, LC_BUFFER_DRAFT);
	lc_layout_destroy(l);
}

static void mla_per_token_head_has_three_sub_buffers_per_layer(void **state)
{
	/* offsets[l] = [l, L + l, 2L + l] */
	lc_layout_t *l = build(LC_LAYOUT_MLA_PER_TOKEN_HEAD, 5, 0);
	lc_buffer_t b;
	assert_int_equal(lc_layout_buffer_count(l), 15);
	for (int k = 0; k < 5; k++)
		expect_layer(l, k, (uint32_t[]){k, 5 + k, 10 + k}, 3);
	assert_int_equal(lc_layout_buffer(l, 12, &b), 0);
	assert_int_equal(b.item_len, 64);
	assert_int_equal(b.kind, LC_BUFFER_QUANT);
	lc_layout_destroy(l);
}

static void dsa_adds_an_index_buffer_per_layer(void **state)
{
	lc_layout_t *l = build(LC_LAYOUT_DSA, 3, 1);
	lc_buffer_t b;
	assert_int_equal(lc_layout_buffer_count(l), 8);
	expect_layer(l, 1, (uint32_t[]){1, 4}, 2);
	expect_layer(l, 3, (uint32_t[]){6, 7}, 2); /* draft: [C_d0, I_d0] */
	assert_int_equal(lc_layout_buffer(l, 4, &b), 0);
	assert_int_equal(b.kind, LC_BUFFER_INDEX);
	assert_int_equal(b.item_len, 128);
	lc_layout_destroy(l);
}

static void state_buffers_are_addressed_by_slot_and_draft_ids_follow_them(void **state)
{
	/* Hybrid: KV layers 0 and 2, mamba layers 1 and 3, two components. */
	int32_t kv_ids[] = {0, 2}, st_ids[] = {1, 3};
	lc_layout_params_t p = {.size = sizeof(p),
				.model = LC_LAYOUT_MHA,
				.layers = 2,
				.draft_layers = 1,
				.pages = 4,
				.item_len = {32},
				.kv_layer_ids = kv_ids,
				.state_components = 2,
				.state_layers = 2,
				.state_layer_ids = st_ids,
				.state_slots = 3,
				.state_item_len = 1000};
	lc_layout_t *l;
	lc_buffer_t b;
	assert_int_equal(lc_layout_build(&p, &l), 0);
	/* [K0 K2 V0 V2 | Kd Vd | S(c0,l1) S(c0,l3) S(c1,l1) S(c1,l3)] */
	assert_int_equal(lc_layout_buffer_count(l), 10);
	assert_int_equal(lc_layout_layer_count(l), 5); /* draft id 4, after state id 3 */
	expect_layer(l, 1, (uint32_t[]){6, 8}, 2);
	expect_layer(l, 2, (uint32_t[]){1, 3}, 2);
	expect_layer(l, 4, (uint32_t[]){4, 5}, 2);
	assert_int_equal(lc_layout_buffer(l, 9, &b), 0);
	assert_int_equal(b.kind, LC_BUFFER_STATE);
	assert_int_equal(b.layer, 3);
	assert_int_equal(b.length, 3000);
	lc_layout_destroy(l);
}

static void general_builder_accepts_layers_without_buffers(void **state)
{
	lc_buffer_t bufs[] = {
		{.base = (void *)0x1000,
		 .length = 64,
		 .item_len = 16,
		 .layer = 2,
		 .kind = LC_BUFFER_OTHER},
		{.base = (void *)0x2000,
		 .length = 64,
		 .item_len = 16,
		 .layer = 0,
		 .kind = LC_BUFFER_OTHER},
	};
	lc_layout_t *l;
	assert_int_equal(lc_layout_create(bufs, 2, &l), 0);
	assert_int_equal(lc_layout_layer_count(l), 3);
	assert_int_equal(lc_layout_layer_buffers(l, 1, NULL, 0), 0);
	expect_layer(l, 2, (uint32_t[]){0}, 1);
	assert_int_equal(lc_layout_layer_buffers(l, 3, NULL, 0), -ERANGE);
	lc_layout_destroy(l);
}

static void invalid_buffers_are_refused(void **state)
{
	lc_buffer_t bad[] = {{.length = 65, .item_len = 16, .layer = 0}};
	lc_layout_t *l = NULL;
	assert_int_equal(lc_layout_create(bad, 1, &l), -EINVAL);
	bad[0].length = 64;
	bad[0].layer = -1;
	assert_int_equal(lc_layout_create(bad, 1, &l), -EINVAL);
	bad[0].layer = 0;
	bad[0].item_len = 0;
	assert_int_equal(lc_layout_create(bad, 1, &l), -EINVAL);
	lc_layout_params_t p = {
		.size = sizeof(p), .model = 99, .layers = 1, .pages = 1, .item_len = {1}};
	assert_int_equal(lc_layout_build(&p, &l), -EINVAL);
	assert_null(l);
}

static void fingerprint_covers_geometry_not_addresses(void **state)
{
	lc_layout_params_t p = {.size = sizeof(p),
				.model = LC_LAYOUT_MHA,
				.layers = 4,
				.pages = 8,
				.item_len = {256}};
	lc_layout_t *a, *b, *c, *d;
	void *bases[8] = {(void *)1, (void *)2};
	assert_int_equal(lc_layout_build(&p, &a), 0);
	p.bases = bases;
	p.pages = 100; /* D may hold more pages than P */
	assert_int_equal(lc_layout_build(&p, &b), 0);
	assert_true(lc_layout_fingerprint(a) == lc_layout_fingerprint(b));
	p.item_len[0] = 512;
	assert_int_equal(lc_layout_build(&p, &c), 0);
	assert_true(lc_layout_fingerprint(a) != lc_layout_fingerprint(c));
	p.item_len[0] = 256;
	p.model = LC_LAYOUT_DSA;
	assert_int_equal(lc_layout_build(&p, &d), 0);
	assert_true(lc_layout_fingerprint(a) != lc_layout_fingerprint(d));
	lc_layout_destroy(a);
	lc_layout_destroy(b);
	lc_layout_destroy(c);
	lc_layout_destroy(d);
}

#define REFUSED(expr, rc, text)                                                                    \
	do {                                                                                       \
		assert_int_equal((expr), (rc));                                                    \
		assert_non_null(strstr(lc_last_error(), (text)));                                  \
	} while (0)

/* Each misuse of the layout API refused with the reason naming it. */
static void misuse_names_its_cause(void **state)
{
	(void)state;
	lc_buffer_t b[] = {{.length = 64, .item_len = 16, .layer = 0}};
	lc_layout_t *l = NULL;
	REFUSED(lc_layout_create(NULL, 1, &l), -EINVAL, "buffers is NULL");
	REFUSED(lc_layout_create(b, 1, NULL), -EINVAL, "out is NULL");
	REFUSED(lc_layout_create(b, 0, &l), -EINVAL, "no buffers");
	REFUSED(lc_layout_create(b, (size_t)UINT32_MAX, &l), -EINVAL, "too many buffers");
	b[0].kind = LC_BUFFER_OTHER + 1;
	REFUSED(lc_layout_create(b, 1, &l), -EINVAL, "kind");
	b[0].kind = LC_BUFFER_K;
	b[0].rows = 3; /* 16 bytes in 3 rows */
	REFUSED(lc_layout_create(b, 1, &l), -EINVAL, "rows");
	b[0].rows = LC_WRITE_MAX_COUNT + 1;
	REFUSED(lc_layout_create(b, 1, &l), -EINVAL, "rows");
	b[0].rows = 0;
	b[0].layer = 1 << 20;
	assert_true(lc_layout_create(b, 1, &l) < 0);
	b[0].layer = 0;

	lc_layout_params_t p = {.size = sizeof p, .layers = 2, .pages = 4, .item_len = {64}};
	REFUSED(lc_layout_build(NULL, &l), -EINVAL, "params is NULL");
	REFUSED(lc_layout_build(&p, NULL), -EINVAL, "out is NULL");
	lc_layout_params_t small = {.size = 4};
	REFUSED(lc_layout_build(&small, &l), -EINVAL, "too small");
	p.layers = 0;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "no layers");
	p.layers = 2;
	p.item_len[0] = 0;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "item_len[0] is 0");
	p.item_len[0] = 64;
	p.pages = 0;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "no pages");
	p.pages = 4;
	int32_t ids[] = {5};
	p.state_components = 1;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "state_layers is not set");
	p.state_layers = 1;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "state_layer_ids is not set");
	p.state_layer_ids = ids;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "state_item_len is not set");
	p.state_item_len = 32;
	REFUSED(lc_layout_build(&p, &l), -EINVAL, "state_slots is not set");
	p.state_slots = 2;
	assert_int_equal(lc_layout_build(&p, &l), 0);

	/* Reading a layout: NULLs and indices past the end. */
	lc_buffer_t out;
	uint32_t idx[8];
	assert_int_equal(lc_layout_buffer_count(NULL), -EINVAL);
	assert_int_equal(lc_layout_layer_count(NULL), -EINVAL);
	assert_true(lc_layout_fingerprint(NULL) == 0);
	REFUSED(lc_layout_buffer(NULL, 0, &out), -EINVAL, "layout is NULL");
	REFUSED(lc_layout_buffer(l, 0, NULL), -EINVAL, "out is NULL");
	REFUSED(lc_layout_buffer(l, -1, &out), -ERANGE, "buffers");
	REFUSED(lc_layout_buffer(l, lc_layout_buffer_count(l), &out), -ERANGE, "buffers");
	REFUSED(lc_layout_layer_buffers(NULL, 0, idx, 8), -EINVAL, "layout is NULL");
	REFUSED(lc_layout_layer_buffers(l, 0, NULL, 8), -EINVAL, "out is NULL");
	REFUSED(lc_layout_layer_buffers(l, -1, idx, 8), -ERANGE, "layers");
	REFUSED(lc_layout_layer_buffers(l, lc_layout_layer_count(l), idx, 8), -ERANGE, "layers");
	/* A count without room for it: how many there are, none written. */
	assert_int_equal(lc_layout_layer_buffers(l, 0, NULL, 0), 2);
	idx[0] = 99;
	assert_int_equal(lc_layout_layer_buffers(l, 0, idx, 1), 2);
	assert_true(idx[0] != 99);
	/* the state layer, 5 */
	assert_int_equal(lc_layout_layer_buffers(l, 5, idx, 8), 1);
	lc_layout_destroy(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mha_buffers_are_all_k_then_all_v),
		cmocka_unit_test(mha_draft_layers_follow_target_buffers_and_ids),
		cmocka_unit_test(mla_has_one_latent_buffer_per_layer_and_draft_after),
		cmocka_unit_test(mla_per_token_head_has_three_sub_buffers_per_layer),
		cmocka_unit_test(dsa_adds_an_index_buffer_per_layer),
		cmocka_unit_test(state_buffers_are_addressed_by_slot_and_draft_ids_follow_them),
		cmocka_unit_test(general_builder_accepts_layers_without_buffers),
		cmocka_unit_test(invalid_buffers_are_refused),
		cmocka_unit_test(fingerprint_covers_geometry_not_addresses),
		cmocka_unit_test(misuse_names_its_cause),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
