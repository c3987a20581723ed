/*
 * Internal helpers shared by every layer: logging macros, clocks, small
 * utilities. Internal non-static names use the lc__ prefix and are hidden
 * from the shared library by the version script.
 */
#ifndef LC_CORE_COMMON_H
#define LC_CORE_COMMON_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "layercake.h"
#include "layercake/testing.h"

#define LC__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define LC__MIN(a, b) ((a) < (b) ? (a) : (b))
/* The struct of type `type` whose member `member` is at ptr. */
#define LC__CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define LC__MAX(a, b) ((a) > (b) ? (a) : (b))
#define LC__UNUSED(x) ((void)(x))

/* Logging: one formatted line per call through the process-wide handler. */
void lc__log(lc_log_level_t level, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The same with a va_list; more > 0 appends " (<more> more since last)". */
void lc__vlog(lc_log_level_t level, const char *file, int line, uint64_t more, const char *fmt,
	      va_list ap) __attribute__((format(printf, 5, 0)));
extern _Atomic int lc__log_level;

#define LC__LOG(level, ...)                                                                        \
	do {                                                                                       \
		if ((int)(level) <= atomic_load_explicit(&lc__log_level, memory_order_relaxed))    \
			lc__log((level), __FILE__, __LINE__, __VA_ARGS__);                         \
	} while (0)
#define LC__ERROR(...) LC__LOG(LC_LOG_ERROR, __VA_ARGS__)
#define LC__WARN(...) LC__LOG(LC_LOG_WARN, __VA_ARGS__)
#define LC__INFO(...) LC__LOG(LC_LOG_INFO, __VA_ARGS__)
#define LC__DEBUG(...) LC__LOG(LC_LOG_DEBUG, __VA_ARGS__)
#define LC__TRACE(...) LC__LOG(LC_LOG_TRACE, __VA_ARGS__)

/*
 * Failing with a reason. LC__FAIL(rc, fmt, ...) logs the reason at WARN
 * (LC__FAIL_AT: at a chosen level), records it with rc as the calling
 * thread's lc_last_error() and evaluates to rc, so a failing path reads
 * `return LC__FAIL(-EINVAL, "buffer %u is not inside any region", b);`.
 * lc__error_set records without a log line (the caller logs its own way).
 * For failures a caller causes; a peer's goes through LC__LOG_PEER.
 */
int lc__fail(int rc, lc_log_level_t level, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void lc__error_set(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The reason recorded on this thread for a failure rc of a callee, when it
 * recorded one with that code; lc_strerror(rc) otherwise. For wrapping:
 * `return LC__FAIL(rc, "listen on %s: %s", url, lc__why(rc));` (clear the
 * last error where the outer call starts, so an older text is not taken). */
const char *lc__why(int rc);
#define LC__FAIL(rc, ...) lc__fail((rc), LC_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define LC__FAIL_AT(level, rc, ...) lc__fail((rc), (level), __FILE__, __LINE__, __VA_ARGS__)

/*
 * The one logging path for whatever a peer can trigger (a dropped or
 * refused message, a refused connection): each call site has its own
 * limiter, which lets the first occurrence through, then at most one line
 * per LC__LOG_PEER_INTERVAL_NS, that line ending "(N more since last)" with
 * the occurrences it held back. Lock-free (two atomics per site), so a
 * flood costs a clock read per event; the counters beside each site still
 * count every event. No peer can grow the log faster than one line per
 * second per site.
 */
typedef struct lc__ratelimit {
	_Atomic uint64_t next_ns;    /* the earliest time the next line may go out */
	_Atomic uint64_t suppressed; /* occurrences held back since the last line */
} lc__ratelimit_t;
#define LC__LOG_PEER_INTERVAL_NS 1000000000ull
/* Whether this occurrence may be logged; when it may, *more is the number
 * held back since the last line that went out. */
bool lc__ratelimit_pass(lc__ratelimit_t *rl, uint64_t *more);
void lc__log_more(lc_log_level_t level, const char *file, int line, uint64_t more, const char *fmt,
		  ...) __attribute__((format(printf, 5, 6)));

#define LC__LOG_PEER(level, ...)                                                                   \
	do {                                                                                       \
		static lc__ratelimit_t lc__rl_;                                                    \
		uint64_t lc__more_;                                                                \
		if ((int)(level) <= atomic_load_explicit(&lc__log_level, memory_order_relaxed) &&  \
		    lc__ratelimit_pass(&lc__rl_, &lc__more_))                                      \
			lc__log_more((level), __FILE__, __LINE__, lc__more_, __VA_ARGS__);         \
	} while (0)
#define LC__WARN_PEER(...) LC__LOG_PEER(LC_LOG_WARN, __VA_ARGS__)
#define LC__ERROR_PEER(...) LC__LOG_PEER(LC_LOG_ERROR, __VA_ARGS__)

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t lc__now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Absolute CLOCK_MONOTONIC timespec for pthread_cond_timedwait (the condvar
 * must be created with pthread_condattr_setclock(CLOCK_MONOTONIC)). */
static inline struct timespec lc__abs_ts(uint64_t deadline_ns)
{
	struct timespec t = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
			     .tv_nsec = (long)(deadline_ns % 1000000000ull)};
	return t;
}

/* Little-endian load/store helpers for wire formats. */
static inline void lc__put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void lc__put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline void lc__put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t lc__get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t lc__get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t lc__get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* len random bytes from getrandom(2), retried on EINTR and short reads.
 * Never a made-up value: if the kernel gives none, returns -errno (-EIO for
 * a zero read), logs an error and counts it (lc__random_failures), and buf
 * is not to be used. Tokens, owner ids and names all come from here. */
int lc__random_bytes(void *buf, size_t len);
/* One 64-bit value the same way; *out written only on success. */
int lc__random_u64(uint64_t *out);
/* Failures of lc__random_bytes in this process so far. */
uint64_t lc__random_failures(void);

/* Whether n bytes at a and b are equal, in a time that does not depend on
 * where they differ (for secrets). */
static inline bool lc__ct_equal(const void *a, const void *b, size_t n)
{
	const uint8_t *x = a, *y = b;
	uint8_t diff = 0;
	for (size_t i = 0; i < n; i++)
		diff |= (uint8_t)(x[i] ^ y[i]);
	return diff == 0;
}

/* FNV-1a 64 over bytes, for fingerprints and checks (not for security). */
static inline uint64_t lc__fnv1a(uint64_t h, const void *data, size_t n)
{
	const uint8_t *p = data;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}
#define LC__FNV_INIT 14695981039346656037ull

/* snprintf into a fixed reason buffer, never overflowing. A text that does
 * not fit is cut at a word boundary and ends "..." (never mid-word). */
void lc__reason(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lc__vreason(char *buf, size_t cap, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#endif
