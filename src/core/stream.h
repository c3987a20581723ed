/*
 * Copies that stream into memory: non-temporal stores, which write whole
 * cache lines to memory without reading them first and without evicting
 * what the cache holds. For bytes landing in a region far larger than the
 * cache (a KV pool), which this CPU will not read soon, they move 1.3-1.6x
 * what glibc's memcpy moves here (docs/transport-shm.md has the figures);
 * into a buffer that stays in cache they are slower, so small copies stay
 * memcpy (lc__copy_landing's threshold, the knob land_stream_min_kib).
 */
#ifndef LC_CORE_STREAM_H
#define LC_CORE_STREAM_H

#include <stddef.h>

/* n bytes from src to dst (they must not overlap) with non-temporal stores
 * where the CPU has them (x86-64: SSE2, AVX2 when present), else memcpy.
 * The stores are fenced before it returns: they are visible to every other
 * thread, and ordered before any later store, like memcpy's. */
void lc__copy_stream(void *dst, const void *src, size_t n);

/* memcpy below `stream_min` bytes (0: always memcpy), lc__copy_stream from
 * there up. */
void lc__copy_landing(void *dst, const void *src, size_t n, size_t stream_min);

/* Which copy lc__copy_stream uses here: "avx2", "sse2" or "memcpy". */
const char *lc__copy_stream_kind(void);

#endif
