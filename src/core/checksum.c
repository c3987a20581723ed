/*
 * The room checksum (core/checksum.h): a position-keyed polynomial sum
 * modulo 2^61 - 1.
 */
#include <string.h>

#include "core/checksum.h"

#define P LC__SUM_PRIME

static uint64_t mod_p(unsigned __int128 x)
{
	uint64_t lo = (uint64_t)(x & P), hi = (uint64_t)(x >> 61);
	uint64_t s = lo + (hi & P) + (hi >> 61); /* hi < 2^67: at most two folds */
	s = (s & P) + (s >> 61);
	return s >= P ? s - P : s;
}

static uint64_t mul(uint64_t a, uint64_t b)
{
	return mod_p((unsigned __int128)a * b);
}

static uint64_t power(uint64_t k, uint64_t e)
{
	uint64_t r = 1;
	for (; e; e >>= 1, k = mul(k, k))
		if (e & 1)
			r = mul(r, k);
	return r;
}

#define CHAINS 8

/* acc * k + w modulo P, lazily: acc < 2^62 in and out (the same residue,
 * not fully reduced), any w. acc * k < 2^123: its low 61 bits plus the
 * rest, plus w folded once, stay below 2^64; one more fold is < 2^62. */
static inline uint64_t step(uint64_t acc, uint64_t k, uint64_t w)
{
	unsigned __int128 x = (unsigned __int128)acc * k;
	uint64_t s = ((uint64_t)x & P) + (uint64_t)(x >> 61) + (w & P) + (w >> 61);
	return (s & P) + (s >> 61);
}

/* A region's key: a mix of its id (splitmix64), in [2, P - 1]. */
static uint64_t key(uint32_t region)
{
	uint64_t z = region + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return 2 + z % (P - 3);
}

static uint64_t load_le(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

/* The word at word index q holding bytes [a, b) of it (the rest zero). */
static uint64_t partial(const uint8_t *p, unsigned a, unsigned b)
{
	uint64_t v = 0;
	for (unsigned j = a; j < b; j++)
		v |= (uint64_t)p[j - a] << (8 * j);
	return mod_p(v);
}

uint64_t lc__sum_range(uint32_t region, uint64_t offset, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	if (!len)
		return 0;
	uint64_t k = key(region), q = offset / 8, sum = 0;
	unsigned head = (unsigned)(offset % 8);
	if (head) { /* the first word, from byte `head` */
		unsigned b = len < 8 - head ? head + (unsigned)len : 8;
		sum = mul(partial(p, head, b), power(k, q));
		p += b - head;
		len -= b - head;
		q++;
	}
	size_t words = len / 8;
	if (words) {
		/* Horner's rule on CHAINS interleaved chains (k^CHAINS each), so
		 * that the multiplications do not wait on one another; inside a
		 * chain values are kept below 2^62, not fully reduced. */
		uint64_t kc = power(k, CHAINS), acc[CHAINS] = {0};
		size_t m = words / CHAINS;
		for (size_t i = m; i-- > 0;)
			for (unsigned j = 0; j < CHAINS; j++)
				acc[j] = step(acc[j], kc, load_le(p + 8 * (CHAINS * i + j)));
		uint64_t s = 0, kj = 1;
		for (unsigned j = 0; j < CHAINS; j++, kj = mul(kj, k))
			s = lc__sum_add(s, mul(mod_p(acc[j]), kj));
		for (size_t i = CHAINS * m; i < words; i++) /* the last words */
			s = lc__sum_add(s, mul(mod_p(load_le(p + 8 * i)), power(k, i)));
		sum = lc__sum_add(sum, mul(s, power(k, q)));
		p += 8 * words;
		len -= 8 * words;
		q += words;
	}
	if (len)
		sum = lc__sum_add(sum, mul(partial(p, 0, (unsigned)len), power(k, q)));
	return sum;
}
