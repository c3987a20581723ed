/* Tagged transport keys in packed region descriptors (core/region.h): a
 * descriptor comes from the network, so the decoder must take every forged
 * key area without reading past it: frames cut short, lengths past the
 * end, tag 0, a tag twice, too many frames; unknown tags are skipped. A
 * seeded fuzz loop mutates good descriptors and checks that whatever
 * lc_region_unpack accepts, every key lc__region_key_find hands out lies
 * inside the descriptor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/common.h"
#include "core/region.h"
#include "layercake.h"

/* A descriptor: a good header from a real region, then `keys` as given. */
static size_t forge(uint8_t *d, const uint8_t *keys, size_t klen)
{
	static uint8_t hdr[LC__DESC_HEADER];
	if (!hdr[0]) {
		lc_ctx_t *ctx;
		lc_region_t *r;
		static uint8_t mem[4096];
		assert_int_equal(
			lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t)}, &ctx),
			0);
		assert_int_equal(lc_region_register(ctx, mem, sizeof mem, &r), 0);
		int n = lc_region_pack(r, hdr, sizeof hdr);
		assert_int_equal(n, LC__DESC_HEADER); /* no transport packs a key here */
		lc_region_deregister(r);
		lc_ctx_destroy(ctx);
	}
	memcpy(d, hdr, LC__DESC_HEADER);
	if (klen)
		memcpy(d + LC__DESC_HEADER, keys, klen);
	lc__put_u16(d + 6, (uint16_t)klen);
	return LC__DESC_HEADER + klen;
}

static int unpack(const uint8_t *keys, size_t klen)
{
	uint8_t d[LC_REGION_DESC_MAX];
	lc_region_desc_t out;
	return lc_region_unpack(d, forge(d, keys, klen), &out);
}

static void two_tags_each_found_unknown_skipped(void **state)
{
	(void)state;
	const uint8_t keys[] = {0x34, 0x12, 3, 0, 'a', 'b', 'c', 0x01, 0x00, 2, 0, 'x', 'y'};
	const uint8_t *k;
	size_t n;
	assert_int_equal(unpack(keys, sizeof keys), 0);
	assert_int_equal(lc__region_key_find(keys, sizeof keys, 1, &k, &n), 1);
	assert_int_equal(n, 2);
	assert_memory_equal(k, "xy", 2);
	assert_int_equal(lc__region_key_find(keys, sizeof keys, 0x1234, &k, &n), 1);
	assert_int_equal(n, 3);
	assert_memory_equal(k, "abc", 3);
	assert_int_equal(lc__region_key_find(keys, sizeof keys, 7, &k, &n), 0);
	assert_null(k);
	assert_int_equal(n, 0);
	/* An empty key is a key. */
	const uint8_t empty[] = {9, 0, 0, 0};
	assert_int_equal(unpack(empty, sizeof empty), 0);
	assert_int_equal(lc__region_key_find(empty, sizeof empty, 9, &k, &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(unpack(NULL, 0), 0);
}

static void forged_frames_are_refused(void **state)
{
	(void)state;
	static const struct {
		uint8_t b[16];
		size_t len;
		const char *what;
	} bad[] = {
		{{1}, 1, "one byte of a frame"},
		{{1, 0, 0}, 3, "three bytes of a frame"},
		{{1, 0, 5, 0, 'a', 'b'}, 6, "a length past the end"},
		{{1, 0, 0xff, 0xff}, 4, "a length of 65535"},
		{{0, 0, 1, 0, 'a'}, 5, "tag 0"},
		{{1, 0, 1, 0, 'a', 1, 0, 0, 0}, 9, "tag 1 twice"},
		{{1, 0, 0, 0, 2, 0}, 6, "a good frame, then a cut one"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *why = NULL;
		assert_int_equal(lc__region_keys_check(bad[i].b, bad[i].len, &why), LC_ERR_PROTO);
		assert_non_null(why);
		assert_int_equal(unpack(bad[i].b, bad[i].len), LC_ERR_PROTO);
	}
	/* More frames than any build packs, each well-formed. */
	uint8_t many[(LC__DESC_KEYS_MAX + 1) * LC__KEY_FRAME] = {0};
	for (int i = 0; i <= LC__DESC_KEYS_MAX; i++)
		lc__put_u16(many + i * LC__KEY_FRAME, (uint16_t)(i + 1));
	assert_int_equal(unpack(many, sizeof many), LC_ERR_PROTO);
	assert_int_equal(unpack(many, sizeof many - LC__KEY_FRAME), 0);
	/* The header announcing more or fewer key bytes than follow. */
	uint8_t d[LC_REGION_DESC_MAX];
	lc_region_desc_t out;
	const uint8_t one[] = {1, 0, 1, 0, 'z'};
	size_t n = forge(d, one, sizeof one);
	assert_int_equal(lc_region_unpack(d, n - 1, &out), LC_ERR_PROTO);
	lc__put_u16(d + 6, (uint16_t)(sizeof one + 1));
	assert_int_equal(lc_region_unpack(d, n, &out), LC_ERR_PROTO);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Mutate good two-key descriptors at random; an accepted one's keys all lie
 * inside it, and a refused one says why (lc_last_error). */
static void fuzzed_descriptors_stay_inside(void **state)
{
	(void)state;
	const uint8_t keys[] = {0x01, 0x00, 6, 0, 1, 2, 3, 4, 5, 6, 0x00, 0xff, 2, 0, 7, 8};
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	size_t accepted = 0;
	for (int it = 0; it < 200000; it++) {
		uint8_t d[LC__DESC_HEADER + 64] = {0};
		size_t n = forge(d, keys, sizeof keys);
		for (int m = 0, nm = 1 + (int)(rnd(&seed) % 4); m < nm; m++) {
			size_t at = LC__DESC_HEADER + rnd(&seed) % (sizeof keys + 4);
			if (at >= n)
				n = at + 1; /* garbage appended */
			d[at] = (uint8_t)rnd(&seed);
		}
		if (rnd(&seed) % 2)
			lc__put_u16(d + 6, (uint16_t)(n - LC__DESC_HEADER));
		lc_region_desc_t out;
		if (lc_region_unpack(d, n, &out))
			continue;
		accepted++;
		for (uint32_t tag = 0; tag < 0x10000; tag += 0x7f) {
			const uint8_t *k;
			size_t kl;
			if (lc__region_key_find(d + LC__DESC_HEADER, n - LC__DESC_HEADER,
						(uint16_t)tag, &k, &kl)) {
				assert_true(k >= d + LC__DESC_HEADER + LC__KEY_FRAME);
				assert_true(k + kl <= d + n);
			}
		}
	}
	assert_true(accepted > 0); /* some mutations keep the frames whole */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(two_tags_each_found_unknown_skipped),
		cmocka_unit_test(forged_frames_are_refused),
		cmocka_unit_test(fuzzed_descriptors_stay_inside),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
