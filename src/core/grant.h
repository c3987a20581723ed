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

#endif
