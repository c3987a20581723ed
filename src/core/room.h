/*
 * Rooms (spec 5.1, 5.5): the table of rooms by 64-bit id and the status
 * machine. Every status change, on P (the engine's lc__room_t) and on D
 * (a receiver), goes through lc__room_state_apply, which checks the
 * transition against one table (monotonic, Failed sticky, Success and
 * Failed final), records the reason, updates the metrics and logs
 * `old -> new`.
 *
 * Threading: not synchronised; the owner (the engine, under its lock)
 * serialises every access. The room's destinations are plain data; the
 * `session` pointer is the engine's (opaque here).
 */
#ifndef LC_CORE_ROOM_H
#define LC_CORE_ROOM_H

#include "core/common.h"
#include "core/idmap.h"
#include "core/notify.h"

typedef struct lc__room_dst {
	char *session_name;
	void *session; /* the engine's session, NULL for a dummy */
	int64_t *pages;
	size_t page_count;
	uint64_t prefix_len;
	int64_t aux_index;
	int64_t *state_slots;
	size_t state_slot_count;
	uint8_t *dst_mask;
	int64_t *dst_local;
	size_t dst_local_count;
	bool dummy;
	bool notified;   /* final status delivered */
	uint32_t landed; /* layers reported landed */
	uint64_t sum;    /* room_checksum: of every write posted to it (core/checksum.h) */
	bool quota;      /* counted in its session's rooms_live until the room ends */
	uint64_t descs;  /* charged to its session's and the engine's descs_live until then */
} lc__room_dst_t;

typedef struct lc__room {
	uint64_t id;
	int status;      /* lc_room_status_t */
	int fail_reason; /* lc_fail_reason_t */
	char reason[LC_REASON_MAX];
	uint64_t opened_ns, bootstrapped_ns, final_ns;
	uint32_t required; /* required_dst_count; 0 until the first destination */
	uint32_t ndst;
	lc__room_dst_t *dst; /* required entries once known */
	uint8_t *metadata;
	size_t metadata_len;
	bool has_metadata;
	bool last_chunk_taken;  /* the is_last chunk reached the engine */
	bool notify_pending;    /* final status not yet delivered */
	uint32_t tasks;         /* live tasks of the room */
	uint64_t last_ready_ns; /* every layer of the last chunk ready (metadata clock) */
	void *last_task;        /* the engine's live task of the last chunk, or NULL */
	/* Chunks added while the room is Bootstrapping (the engine's, opaque
	 * here): counted when added, handed to the engine's intake when the room
	 * becomes Bootstrapped, freed when it fails first. */
	void *held;           /* the engine's parked tasks, newest first, or NULL */
	uint32_t held_chunks; /* added while Bootstrapping, not yet handed on */
	uint64_t held_pages;  /* their page and state-slot entries */
} lc__room_t;

typedef struct lc__room_metrics {
	uint64_t opened, succeeded, failed;
	uint64_t failed_by_reason[LC_FAIL_REASON_COUNT];
	uint64_t expired_unread;
	lc_histogram_t latency;
} lc__room_metrics_t;

typedef struct lc__room_table {
	lc__idmap_t map; /* id -> lc__room_t */
	size_t count;
	lc__room_metrics_t metrics;
	lc__notify_t *notify; /* told of every status change, or NULL */
} lc__room_table_t;

int lc__room_table_init(lc__room_table_t *t);
void lc__room_table_fini(lc__room_table_t *t);
lc__room_t *lc__room_find(const lc__room_table_t *t, uint64_t id);
/* Iterate: start with *it = 0; NULL at the end. The room just returned may
 * be removed (lc__room_remove); none may be opened meanwhile. */
lc__room_t *lc__room_next(const lc__room_table_t *t, size_t *it);
/* A fresh room in Bootstrapping; -EEXIST if the id is present. */
int lc__room_open(lc__room_table_t *t, uint64_t id, uint64_t now_ns, lc__room_t **out);
/* Unlink and free (a later open of the id starts fresh). */
void lc__room_remove(lc__room_table_t *t, lc__room_t *r);
/* Add a destination (copies every array). -EEXIST for a repeated session,
 * LC_ERR_STATE past required or on a final room, -EINVAL for a required
 * count that disagrees with the first destination's, -ENOMEM. */
int lc__room_add_dst(lc__room_t *r, const lc_dst_params_t *p, void *session);

/* Where a holder keeps a room's status: the engine's lc__room_t and D's
 * receivers both hand their fields to lc__room_state_apply this way. */
typedef struct lc__room_view {
	uint64_t id;
	const char *side; /* log prefix, e.g. "room" or "receiver room" */
	int *status;      /* lc_room_status_t */
	int *fail_reason; /* lc_fail_reason_t */
	char *reason;
	size_t reason_cap;
	uint64_t opened_ns;
	uint64_t *bootstrapped_ns, *final_ns;
	lc__notify_t *notify; /* the holder's waiters, told of a change; or NULL */
} lc__room_view_t;

/* True if from -> to is a legal, effective transition. */
bool lc__room_transition_legal(int from, int to);
/* Apply a status update: returns 1 if the status changed, 0 if the update
 * was absorbed (monotonic: not above the current status), LC_ERR_STATE if
 * the room is final (Failed is sticky, Success final). */
int lc__room_set_state(lc__room_table_t *t, lc__room_t *r, int status, int fail_reason,
		       const char *reason, uint64_t now_ns);
/* The same for any holder (lc__room_set_state is this on an lc__room_t):
 * the only place a room's status changes. m: the holder's counters. */
int lc__room_state_apply(lc__room_metrics_t *m, const lc__room_view_t *v, int status,
			 int fail_reason, const char *reason, uint64_t now_ns);
static inline bool lc__room_final(const lc__room_t *r)
{
	return r->status == LC_ROOM_SUCCESS || r->status == LC_ROOM_FAILED;
}
/* Every destination present? */
static inline bool lc__room_fanin_done(const lc__room_t *r)
{
	return r->required && r->ndst == r->required;
}

#endif
