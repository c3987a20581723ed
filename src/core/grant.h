/*
 * Grants: per room, the byte ranges of which regions peers may write.
 *
 * Threading: the table is shared by the receiving threads of every transport
 * and by the API (add/revoke). `lock` protects the map and each room's range
 * array. A receiving thread that copies into granted memory brackets each
 * copy with lc__grant_enter/exit on the room entry it looked up; revoke marks
 * the entry and waits until no copy is inside, so that after revoke returns
 * no write for the room can land. Entries are reference counted so that a
 * receiver may hold one across several partial copies (tcp payloads).
 *
 * Accounting: each room entry counts the bytes granted (the sum of its
 * merged ranges: a range granted twice counts once) and the bytes that
 * landed (every finished write, added by the memory seam, one relaxed
 * atomic add per write). The counts live as long as the entry: a revoke
 * drops them with the grant, and a later grant of the same room id starts
 * from zero. Counting is per room, not per byte: a write landed twice counts
 * twice, so `landed` may exceed `granted` (a replay or a duplicate, which
 * the seam logs and counts); a duplicate that stands in for a missing
 * write of the same size is not told apart by counting alone.
 */
#ifndef LC_CORE_GRANT_H
#define LC_CORE_GRANT_H

#include <stdbool.h>
#include <stdint.h>

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
/* Number of rooms with live grants (for tests and metrics). */
size_t lc__grant_rooms(lc__grant_table_t *t);

/* Look up the room and check that [offset, offset+length) of region lies in
 * one granted range. On success returns 0 and a referenced entry (release
 * with lc__grant_put). LC_ERR_GRANT otherwise. */
int lc__grant_lookup(lc__grant_table_t *t, uint64_t room, uint32_t region, uint64_t offset,
		     uint64_t length, lc__grant_room_t **out);
/* Bracket one copy into granted memory. enter returns false (and needs no
 * exit) once the room is revoked. */
bool lc__grant_enter(lc__grant_room_t *g);
void lc__grant_exit(lc__grant_room_t *g);
void lc__grant_put(lc__grant_room_t *g);

/* Count `bytes` landed in the room (any thread, no lock). Returns how many
 * of them lie beyond the room's granted total (0 normally); *first_over is
 * true for the write that first took the count past the grant. */
uint64_t lc__grant_landed(lc__grant_room_t *g, uint64_t bytes, bool *first_over);
/* The room's granted and landed totals (a snapshot under the table lock).
 * LC_ERR_GRANT when the room has no live grant (never issued, or revoked). */
int lc__grant_room_bytes(lc__grant_table_t *t, uint64_t room, uint64_t *granted, uint64_t *landed);

#endif
