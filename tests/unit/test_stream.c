/* Streaming copies (core/stream.h): every byte of every length and both
 * alignments lands, nothing around the destination is touched, and the
 * landing copy's threshold picks memcpy or the stream as it says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/stream.h"

#define GUARD 64

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131 + seed * 7 + (i >> 8));
}

/* Copies n bytes from src+so to dst+doff with copy() and checks the bytes
 * and the guards either side. */
static void check_one(void (*copy)(void *, const void *, size_t), size_t n, size_t so, size_t doff)
{
	uint8_t *src = malloc(n + 2 * GUARD + 128), *dst = malloc(n + 2 * GUARD + 128);
	assert_non_null(src);
	assert_non_null(dst);
	fill(src, n + 2 * GUARD + 128, (unsigned)(n + so));
	memset(dst, 0xee, n + 2 * GUARD + 128);
	copy(dst + GUARD + doff, src + GUARD + so, n);
	assert_memory_equal(dst + GUARD + doff, src + GUARD + so, n);
	for (size_t i = 0; i < GUARD + doff; i++)
		assert_int_equal(dst[i], 0xee);
	for (size_t i = GUARD + doff + n; i < n + 2 * GUARD + 128; i++)
		assert_int_equal(dst[i], 0xee);
	free(src);
	free(dst);
}

static void every_small_length_and_alignment(void **state)
{
	(void)state;
	for (size_t n = 0; n <= 600; n += (n < 300 ? 1 : 37))
		for (size_t so = 0; so < 64; so += 5)
			for (size_t doff = 0; doff < 64; doff += 3)
				check_one(lc__copy_stream, n, so, doff);
}

static void large_odd_lengths(void **state)
{
	(void)state;
	const size_t sizes[] = {4096, 65536, 65536 + 1, (1u << 20) + 77, (4u << 20) - 3};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		check_one(lc__copy_stream, sizes[i], 0, 0);
		check_one(lc__copy_stream, sizes[i], 3, 17);
		check_one(lc__copy_stream, sizes[i], 31, 1);
	}
}

static void stream_min_4k(void *d, const void *s, size_t n)
{
	lc__copy_landing(d, s, n, 4096);
}

static void never_stream(void *d, const void *s, size_t n)
{
	lc__copy_landing(d, s, n, 0);
}

static void landing_either_side_of_the_threshold(void **state)
{
	(void)state;
	const size_t sizes[] = {0, 1, 4095, 4096, 4097, 70000};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		check_one(stream_min_4k, sizes[i], 1, 2);
		check_one(never_stream, sizes[i], 1, 2);
	}
}

static void says_which_copy(void **state)
{
	(void)state;
	const char *k = lc__copy_stream_kind();
	assert_true(!strcmp(k, "avx2") || !strcmp(k, "sse2") || !strcmp(k, "memcpy"));
#if defined(__x86_64__)
	assert_string_not_equal(k, "memcpy");
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_small_length_and_alignment),
		cmocka_unit_test(large_odd_lengths),
		cmocka_unit_test(landing_either_side_of_the_threshold),
		cmocka_unit_test(says_which_copy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
