/*
 * A log line a peer can trigger, rate-limited: the first occurrence, then
 * at most one line per interval carrying how many were suppressed since.
 * Private to the control plane's bootstrap and inbox guards until core/log
 * has a general one; counters still count every event.
 *
 * Threading: a lc__ratelog_t is used under its owner's lock, or by one
 * thread.
 */
#ifndef LC_CONTROL_RATELOG_H
#define LC_CONTROL_RATELOG_H

#include "core/common.h"

#define LC__RATELOG_IVL_NS (5ull * 1000000000ull)

typedef struct lc__ratelog {
	uint64_t next_ns;    /* no line before this */
	uint64_t suppressed; /* events since the last line */
} lc__ratelog_t;

/* Whether to log now; *suppressed gets the events skipped since the last
 * line (then reset). */
static inline bool lc__ratelog_ok(lc__ratelog_t *r, uint64_t *suppressed)
{
	uint64_t now = lc__now_ns();
	if (r->next_ns && now < r->next_ns) {
		r->suppressed++;
		return false;
	}
	*suppressed = r->suppressed;
	r->suppressed = 0;
	r->next_ns = now + LC__RATELOG_IVL_NS;
	return true;
}

/* LC__RATELOG(r, level, fmt, ...): the line, with " (N more since the last
 * such line)" when some were suppressed. */
#define LC__RATELOG(r, level, fmt, ...)                                                            \
	do {                                                                                       \
		uint64_t lc__rl_n_;                                                                \
		if (!lc__ratelog_ok((r), &lc__rl_n_))                                              \
			break;                                                                     \
		if (lc__rl_n_)                                                                     \
			LC__LOG((level), fmt " (%llu more since the last such line)",              \
				##__VA_ARGS__, (unsigned long long)lc__rl_n_);                     \
		else                                                                               \
			LC__LOG((level), fmt, ##__VA_ARGS__);                                      \
	} while (0)

#endif
