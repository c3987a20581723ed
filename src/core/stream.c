/*
 * Non-temporal copies (core/stream.h). Head bytes go by memcpy until the
 * destination is aligned for the stores, then 64 or 128 bytes per step
 * (unaligned loads, aligned streaming stores), then the tail by memcpy;
 * one sfence at the end orders the weakly ordered stores before whatever
 * the caller does next (a grant bracket's exit, an acknowledgement).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/stream.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

static void copy_sse2(uint8_t *dst, const uint8_t *src, size_t n)
{
	for (; n >= 64; n -= 64, dst += 64, src += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)src);
		__m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
		__m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
		_mm_stream_si128((__m128i *)dst, a);
		_mm_stream_si128((__m128i *)(dst + 16), b);
		_mm_stream_si128((__m128i *)(dst + 32), c);
		_mm_stream_si128((__m128i *)(dst + 48), d);
	}
	memcpy(dst, src, n);
}

__attribute__((target("avx2"))) static void copy_avx2(uint8_t *dst, const uint8_t *src, size_t n)
{
	for (; n >= 128; n -= 128, dst += 128, src += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)src);
		__m256i b = _mm256_loadu_si256((const __m256i *)(src + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(src + 64));
		__m256i d = _mm256_loadu_si256((const __m256i *)(src + 96));
		_mm256_stream_si256((__m256i *)dst, a);
		_mm256_stream_si256((__m256i *)(dst + 32), b);
		_mm256_stream_si256((__m256i *)(dst + 64), c);
		_mm256_stream_si256((__m256i *)(dst + 96), d);
	}
	memcpy(dst, src, n);
}

/* CPUID and XGETBV asked directly, as __builtin_cpu_supports would: that
 * one needs libgcc's __cpu_model, which other toolchains (zig's, for the
 * manylinux wheel) do not link. AVX2 needs the CPU's bit and the OS saving
 * the YMM registers. */
static bool cpu_has_avx2(void)
{
	unsigned a, b, c, d, lo, hi;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
		return false;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & 6) != 6)
		return false;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2);
}

static bool have_avx2(void)
{
	/* 0 not asked yet, 1 no, 2 yes; two first callers both ask. */
	static _Atomic int known;
	int k = atomic_load_explicit(&known, memory_order_relaxed);
	if (!k) {
		k = cpu_has_avx2() ? 2 : 1;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 2;
}

void lc__copy_stream(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	bool avx2 = have_avx2();
	size_t align = avx2 ? 32 : 16;
	size_t head = (align - ((uintptr_t)d & (align - 1))) & (align - 1);
	if (n < head + 2 * align) {
		memcpy(d, s, n);
		return;
	}
	memcpy(d, s, head);
	if (avx2)
		copy_avx2(d + head, s + head, n - head);
	else
		copy_sse2(d + head, s + head, n - head);
	_mm_sfence();
}

const char *lc__copy_stream_kind(void)
{
	return have_avx2() ? "avx2" : "sse2";
}

#else

void lc__copy_stream(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

const char *lc__copy_stream_kind(void)
{
	return "memcpy";
}

#endif

void lc__copy_landing(void *dst, const void *src, size_t n, size_t stream_min)
{
	if (stream_min && n >= stream_min)
		lc__copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}
