#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static uint64_t next_word(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tu_fill(void *buf, size_t n, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = next_word(&s);
		memcpy(p + i, &w, 8);
	}
	if (i < n) {
		uint64_t w = next_word(&s);
		memcpy(p + i, &w, n - i);
	}
}

long tu_verify(const void *buf, size_t n, uint64_t seed)
{
	const uint8_t *p = buf;
	uint64_t s = seed;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = next_word(&s);
		size_t k = n - i < 8 ? n - i : 8;
		if (memcmp(p + i, &w, k)) {
			for (size_t j = 0; j < k; j++)
				if (p[i + j] != ((uint8_t *)&w)[j])
					return (long)(i + j);
		}
	}
	return -1;
}

uint64_t tu_checksum(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

lc_completion_t tu_wait_one(lc_cq_t *cq, int timeout_ms)
{
	lc_completion_t c;
	int n = lc_cq_wait(cq, &c, 1, timeout_ms);
	TU_CHECK(n == 1, "no completion within %d ms (rc %d)", timeout_ms, n);
	return c;
}

void tu_watchdog(unsigned seconds)
{
	signal(SIGALRM, SIG_DFL);
	alarm(seconds);
}
