/*
 * Grants: per room, the byte ranges of which regions peers may write.
 *
 * Threading: the table is shared by the receiving threads of every transport
 * and by the API (add/revoke). `lock` protects the map and each room's range
 * array (changed with the room's own lock held too, see below). A receiving
 * thread that copies into granted memory brackets each copy with
 * lc__grant_enter/exit on the room entry it looked up; revoke marks the
 * entry and waits until no copy is inside, so that after revoke returns no
 * write for the room can land. Entries are reference counted so that a
 * receiver may hold one across several partial copies (tcp payloads).
 *
 * Accounting (decode side): each room entry counts the bytes granted (the
 * sum of its merged ranges: a range granted twice counts once) and the
 * bytes covered: the granted bytes that some finished write landed on,
 * each byte at most once. The memory seam reports every finished write
 * (region, offset, length) with lc__grant_landed; the entry's landed count
 * (core/landed.h) keeps the covered parts as merged intervals, so a write
 * that lands twice (a replay, a duplicate) adds nothing and is reported
 * back as bytes landed twice; and, once D watches the room's layers
 * (lc__grant_watch), the leading layers complete, kept current as bytes
 * land (lc__grant_layers_ready is O(1)). The
 * intervals beyond one per granted range are capped (grant_intervals_max,
 * set with lc__grant_set_intervals_max): a write that would pass the cap
 * marks the room's accounting broken, and from then on nothing more is
 * counted for the room (D fails it). The counts live as long as the entry:
 * a revoke drops them with the grant, and a later grant of the same room
 * id starts from zero.
 *
 * Binding (docs/security.md, "A token opens only its own rooms"): a room
 * may be bound to the ids of the data-plane tokens (core/ctx.h) of the
 * writers it was given to. A bound room takes writes only from a writer
 * whose connection presented one of them; an unbound room from any writer
 * the context accepted. The ids are kept with the ranges (under `lock`, so
 * the lookup that checks the range checks the writer too: no lock and no
 * allocation more per write) and go with them at revoke.
 *
 * Lock order: the table's `lock`, then a room entry's own lock, which
 * guards the covered intervals and totals (taken once per finished write).
 */
#ifndef LC_CORE_GRANT_H
#define LC_CORE_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/landed.h"

typedef struct lc__grant_table lc__grant_table_t;
typedef struct lc__grant_room lc__grant_room_t;

int lc__grant_table_create(lc__grant_table_t **out);
/* Revokes everything; no receiver may still hold entries. */
void lc__grant_table_destroy(lc__grant_table_t *t);

int lc__grant_issue(lc__grant_table_t *t, uint64_t room, uint32_t region, uint64_t offset,
		    uint64_t length);
/* Returns the number of ranges revoked (0 if none). Waits for copies inside. */
int lc__grant_revoke(lc__grant_table_t *t, uint64_t room);
/* Revoke every room with a range in `region` (the region goes away). */
int lc__grant_revoke_region(lc__grant_table_t *t, uint32_t region);
/* Number of rooms with live grants or bindings (for tests and metrics). */
size_t lc__grant_rooms(lc__grant_table_t *t);

/* Bind room to the writers of token id `who` (never 0): from now until the
 * room is revoked it takes writes only from writers of its bound ids.
 * Makes the room's entry when it has none (no range: nothing lands until
 * one is issued), so that a bind before the first issue leaves no moment
 * in which the ranges are open to every writer. 0, -EINVAL, -ENOMEM. */
int lc__grant_bind(lc__grant_table_t *t, uint64_t room, uint64_t who);

/* Look up the room and check that writer `who` (the id of the token its
 * connection presented, 0 for none: core/ctx.h) may write it and that
 * [offset, offset+length) of region lies in one granted range. On success
 * returns 0 and a referenced entry (release with lc__grant_put).
 * LC_ERR_AUTH when the room is bound and `who` is not one of its writers
 * (whatever the range), LC_ERR_GRANT otherwise. */
int lc__grant_lookup(lc__grant_table_t *t, uint64_t room, uint64_t who, uint32_t region,
		     uint64_t offset, uint64_t length, lc__grant_room_t **out);
/* Bracket one copy into granted memory. enter returns false (and needs no
 * exit) once the room is revoked. */
bool lc__grant_enter(lc__grant_room_t *g);
void lc__grant_exit(lc__grant_room_t *g);
void lc__grant_put(lc__grant_room_t *g);
/* Whether g's room was revoked: a probe for a holder that must react to a
 * revoke (ask its peer to stop) without entering a bracket. */
bool lc__grant_revoked(const lc__grant_room_t *g);

/* Intervals a room may keep beyond one per granted range (rooms created
 * afterwards); at least 1. */
void lc__grant_set_intervals_max(lc__grant_table_t *t, uint64_t n);

/* What lc__grant_landed did with one finished write. */
typedef struct lc__grant_landing {
	uint64_t twice;   /* bytes of it that had landed before (duplicates) */
	bool first_twice; /* the room's first write with such bytes */
	bool broke;       /* this write passed the interval cap: accounting broken */
} lc__grant_landing_t;

/* Count [offset, offset+length) of region as landed in the room (any
 * thread; the room's lock). The caller looked the range up in one granted
 * range. Returns 0; -ENOSPC (the cap) or -ENOMEM when the room's
 * accounting is broken, now (out->broke) or before: nothing was counted. */
int lc__grant_landed(lc__grant_room_t *g, uint32_t region, uint64_t offset, uint64_t length,
		     lc__grant_landing_t *out);

/* A room's accounting, a snapshot. */
typedef struct lc__grant_count {
	uint64_t granted;   /* bytes of the merged granted ranges */
	uint64_t covered;   /* granted bytes landed, each once */
	uint64_t twice;     /* bytes that landed on covered bytes again */
	uint64_t intervals; /* covered intervals kept */
	bool broken;        /* the interval cap was hit: covered is incomplete */
} lc__grant_count_t;

/* The room's totals. LC_ERR_GRANT when the room has no live grant (never
 * issued, or revoked). */
int lc__grant_room_count(lc__grant_table_t *t, uint64_t room, lc__grant_count_t *out);
/* The room's granted and covered bytes inside [offset, offset+length) of
 * region (a buffer of D's layout, say). LC_ERR_GRANT when the room has no
 * live grant. */
int lc__grant_covered(lc__grant_table_t *t, uint64_t room, uint32_t region, uint64_t offset,
		      uint64_t length, uint64_t *granted, uint64_t *covered);

/* D's layers of the room: spans[i] (region, byte range) belongs to layer
 * spans[i].layer < layers. From now on the room's entry keeps how many
 * leading layers have every granted byte of their spans landed; replaces
 * an earlier watch. 0, LC_ERR_GRANT (no live grant), -ENOMEM, -EINVAL. */
int lc__grant_watch(lc__grant_table_t *t, uint64_t room, const lc__landed_span_t *spans, size_t n,
		    uint32_t layers);
/* *out: the watched room's leading layers complete (0 before a watch); it
 * never decreases. O(1). LC_ERR_GRANT when the room has no live grant. */
int lc__grant_layers_ready(lc__grant_table_t *t, uint64_t room, uint32_t *out);

#endif
