/* The room checksum (core/checksum.h): the same value however the bytes are
 * cut into writes, in any order, and a different one when a byte, its
 * position or its region changes. Checked against a byte-at-a-time
 * reference written from the definition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/checksum.h"

enum { LEN = 4099 };
static uint8_t buf[LEN];

static uint64_t mulmod(uint64_t a, uint64_t b)
{
	return (uint64_t)(((unsigned __int128)a * b) % LC__SUM_PRIME);
}

/* Byte by byte from the definition, with k taken from one word's sum. */
static uint64_t reference(uint32_t region, uint64_t offset, const uint8_t *p, size_t len)
{
	uint8_t one[8] = {1};
	/* sum of the word 1 at word index 1 = k */
	uint64_t k = lc__sum_range(region, 8, one, 8), sum = 0;
	for (size_t i = 0; i < len; i++) {
		uint64_t pos = offset + i, kq = 1;
		for (uint64_t e = pos / 8, b = k; e; e >>= 1, b = mulmod(b, b))
			if (e & 1)
				kq = mulmod(kq, b);
		uint64_t v = ((uint64_t)p[i] << (8 * (pos % 8))) % LC__SUM_PRIME;
		sum = (sum + mulmod(v, kq)) % LC__SUM_PRIME;
	}
	return sum;
}

static int setup(void **state)
{
	(void)state;
	srand(7);
	for (size_t i = 0; i < LEN; i++)
		buf[i] = (uint8_t)rand();
	return 0;
}

static void matches_the_definition(void **state)
{
	(void)state;
	const size_t lens[] = {0, 1, 7, 8, 9, 31, 32, 33, 100, 1000};
	for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
		for (uint64_t off = 0; off < 9; off++)
			assert_int_equal(lc__sum_range(3, off + 4096, buf, lens[i]),
					 reference(3, off + 4096, buf, lens[i]));
}

static void any_cut_and_order_gives_the_same_sum(void **state)
{
	(void)state;
	uint64_t whole = lc__sum_range(5, 12345, buf, LEN);
	for (int trial = 0; trial < 200; trial++) {
		size_t cuts[16], n = 0, at = 0;
		while (at < LEN && n < 15) {
			at += 1 + (size_t)rand() % 700;
			if (at < LEN)
				cuts[n++] = at;
		}
		cuts[n] = LEN;
		uint64_t sum = 0;
		for (size_t i = n + 1; i-- > 0;) { /* last piece first */
			size_t b = i ? cuts[i - 1] : 0;
			sum = lc__sum_add(sum, lc__sum_range(5, 12345 + b, buf + b, cuts[i] - b));
		}
		assert_int_equal(sum, whole);
	}
}

static void a_changed_byte_position_or_region_changes_the_sum(void **state)
{
	(void)state;
	uint64_t whole = lc__sum_range(5, 0, buf, LEN);
	assert_int_not_equal(lc__sum_range(6, 0, buf, LEN), whole);
	assert_int_not_equal(lc__sum_range(5, 8, buf, LEN), whole);
	assert_int_not_equal(lc__sum_range(5, 1, buf, LEN), whole);
	for (size_t i = 0; i < LEN; i += 97) {
		buf[i] ^= 0x10;
		assert_int_not_equal(lc__sum_range(5, 0, buf, LEN), whole);
		buf[i] ^= 0x10;
	}
	/* Two pages swapped: same bytes, wrong places. */
	uint8_t a[256], b[256];
	memcpy(a, buf, 256);
	memcpy(b, buf + 256, 256);
	uint64_t right = lc__sum_add(lc__sum_range(5, 0, a, 256), lc__sum_range(5, 256, b, 256));
	uint64_t swapped = lc__sum_add(lc__sum_range(5, 0, b, 256), lc__sum_range(5, 256, a, 256));
	assert_int_not_equal(right, swapped);
	/* One page written twice instead of two different pages. */
	uint64_t twice = lc__sum_add(lc__sum_range(5, 0, a, 256), lc__sum_range(5, 0, a, 256));
	assert_int_not_equal(right, twice);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(matches_the_definition),
		cmocka_unit_test(any_cut_and_order_gives_the_same_sum),
		cmocka_unit_test(a_changed_byte_position_or_region_changes_the_sum),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
