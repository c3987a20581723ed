/*
 * An id map: 64-bit ids to non-NULL pointers, open addressing with linear
 * probing over a power-of-two table (grown at 3/4 full, counting deleted
 * slots; rehashed in place of growing when most of those are deleted), and
 * the one hash of ids (lc__hash64, murmur3's finaliser). Used by the grant
 * table (rooms), the room table and the engine's wreq ids.
 *
 * `max` caps the live entries where a peer can grow the map: a put past it
 * is -ENOSPC, so a flood costs the map at most that much memory (0: no
 * cap, for maps only the local process fills).
 *
 * Not thread-safe: the owner serialises every call. A put or del during an
 * iteration (lc__idmap_next) may reorder entries; del of the entry just
 * returned is safe.
 */
#ifndef LC_CORE_IDMAP_H
#define LC_CORE_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lc__idmap {
	uint64_t *ids;
	void **vals; /* NULL empty, LC__IDMAP_TOMB deleted */
	size_t cap;  /* a power of two, or 0 before the first put */
	size_t used; /* live + deleted slots */
	size_t live;
	size_t max; /* live entries allowed; 0 = no cap */
} lc__idmap_t;

static inline uint64_t lc__hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* An empty map (allocates nothing). */
void lc__idmap_init(lc__idmap_t *m, size_t max);
void lc__idmap_fini(lc__idmap_t *m);
/* The pointer stored for id, or NULL. */
void *lc__idmap_get(const lc__idmap_t *m, uint64_t id);
/* Store v (not NULL) for id: -EEXIST if id is present, -ENOSPC past max,
 * -ENOMEM when the table cannot grow. */
int lc__idmap_put(lc__idmap_t *m, uint64_t id, void *v);
/* Remove id; returns what was stored, or NULL. */
void *lc__idmap_del(lc__idmap_t *m, uint64_t id);
static inline size_t lc__idmap_count(const lc__idmap_t *m)
{
	return m->live;
}
/* Iterate: start with *it = 0; each call yields one live entry (id, value)
 * and returns true, then false at the end. */
bool lc__idmap_next(const lc__idmap_t *m, size_t *it, uint64_t *id, void **v);

#endif
