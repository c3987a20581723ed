/*
 * Session health (spec 5.4): one per D rank. Every failure counts; a failed
 * session is blocked for ttl_ns (0 disables blocking), so new rooms toward
 * it fail at once instead of stalling; a new registration clears it.
 *
 * Threading: not synchronised; the owner (the engine, under its lock)
 * serialises access.
 */
#ifndef LC_CORE_SESSION_H
#define LC_CORE_SESSION_H

#include "core/common.h"

typedef struct lc__session {
	char *name;
	uint64_t failures;     /* every failure, ever */
	uint64_t failed_at_ns; /* 0: not blocked */
	char reason[LC_REASON_MAX];
	void *owner;         /* the engine's per-session data */
	uint32_t rooms_live; /* unfinished rooms it is a destination of (the quota) */
	uint64_t descs_live; /* transfer-info descriptors those rooms hold (p_session_descs_max) */
} lc__session_t;

typedef struct lc__session_table {
	lc__session_t **items;
	size_t count, cap;
} lc__session_table_t;

void lc__session_fail(lc__session_t *s, uint64_t now_ns, const char *reason);
/* Blocked now? An expired block is cleared (the failure count stays). */
bool lc__session_blocked(lc__session_t *s, uint64_t now_ns, uint64_t ttl_ns);
void lc__session_clear(lc__session_t *s);

lc__session_t *lc__session_find(const lc__session_table_t *t, const char *name);
/* Adds a fresh entry; -EEXIST if the name exists, -ENOMEM. */
int lc__session_add(lc__session_table_t *t, const char *name, lc__session_t **out);
/* Unlinks and frees the entry (its owner data is the caller's). */
void lc__session_remove(lc__session_table_t *t, lc__session_t *s);
void lc__session_table_fini(lc__session_table_t *t);

#endif
