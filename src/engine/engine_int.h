/*
 * The transfer engine's internal state, shared by the files of src/engine/
 * and by nothing else (other layers include engine/engine.h). One thread per
 * engine streams every room's ready layer groups to every destination as
 * asynchronous batches, counts acknowledgements per batch, and finalizes
 * each room exactly once. DESIGN.md section 3 lists the rules; docs/engine.md
 * maps each seed defect to its fix and test, and each file to its job.
 *
 * Threading contract
 *   - e->lock protects everything below it in struct lc_engine: the room
 *     table, the sessions, the open batch, the inbox, the task list, the
 *     wreq id map, the notes queue and the metrics. The engine thread holds
 *     it while it works and drops it to wait and to run callbacks. API calls
 *     take it briefly. Lock order: e->lock, then the data plane's own locks
 *     (lc_batch_post, lc_conn_flush and lc_conn_room_cancel are called under
 *     e->lock; they never call back into the engine).
 *   - The step words are atomics (core/steps.h); want_wake is an atomic
 *     Dekker flag between the engine thread and lock-free producers.
 *   - gpu (stream records, gpu_steps.c) has its own mutex, gpu.lock, taken
 *     by lc_engine_record_*_on_stream and destroy, never with e->lock held
 *     and never while taking it. gpu.active is an atomic the engine thread
 *     reads to poll the words as an outside producer's.
 *   - Callbacks run on the engine thread (or the destroying thread, after
 *     the engine thread has joined) with no lock held.
 *   - Tasks of a failed room are marked dead at once and freed by the engine
 *     thread; nothing dereferences a dead task's room or session.
 *   - Every function declared here expects e->lock held, unless its comment
 *     says otherwise.
 */
#ifndef LC_ENGINE_ENGINE_INT_H
#define LC_ENGINE_ENGINE_INT_H

#include <pthread.h>
#include <unistd.h>
#include <stdatomic.h>

#include "core/histogram.h"
#include "core/idmap.h"
#include "core/layout.h"
#include "core/planner.h"
#include "core/room.h"
#include "core/session.h"
#include "core/steps.h"
#include "engine/engine.h"
#include "transport/cq.h"

/* Completions taken per pass, so that a stream of acknowledgements cannot
 * hold off the posting of groups a step record made ready. */
#define LC__CQ_BATCH 64
/* Longest sleep of the engine thread with no deadline due. */
#define LC__MAX_WAIT_NS 1000000000ll

/* A D session as the engine sees it: its connection and where each layout
 * buffer's page 0 is in D's imported regions. */
typedef struct lc__esession {
	lc__session_t *core; /* name, health */
	lc_conn_t *conn;
	lc__xfer_t *xfer;                /* per layout buffer */
	struct lc__esession *flush_next; /* on e->to_flush while deferred posts wait */
	bool to_flush;
} lc__esession_t;

typedef struct lc__task lc__task_t;

/* State of one layer group toward one destination. */
enum { LC__GROUP_WAIT = 0, LC__GROUP_POSTED = 1, LC__GROUP_ACKED = 2 };

/* One task toward one destination: its page runs and per-group state. */
typedef struct lc__wreq {
	lc__task_t *task;
	uint32_t dst; /* index into room->dst */
	lc__esession_t *sess;
	uint64_t id; /* batch user_data */
	lc__plan_t plan;
	lc__run_t *runs, *state_runs;
	uint8_t *gstate; /* per group: LC__GROUP_* */
	uint64_t *posted_ns;
	uint32_t acked, lead; /* groups acknowledged; leading ones */
	uint32_t outstanding; /* batches posted, not completed */
} lc__wreq_t;

/* One chunk of one room: the seed's LayerWiseTask. */
struct lc__task {
	lc__task_t *next;
	uint64_t room_id;
	lc__room_t *room; /* set at intake; never dereferenced once dead */
	bool gated;       /* stamped by a batch: waits for steps */
	bool is_last;
	bool dead;
	bool parked; /* was held on its Bootstrapping room (counted once) */
	bool aux_ready;
	uint64_t cache_begin, aux_step;
	uint64_t created_ns;
	uint32_t ngroups, next_group; /* groups [0, next_group) posted */
	uint32_t nwreq;
	lc__wreq_t *wreqs;
	/* the chunk, copied */
	int64_t *pages;
	size_t positions;
	uint64_t dst_index;
	uint64_t page_tokens; /* > 0: dst_index counts from token 0 (lc_chunk_t) */
	int64_t *state_slots;
	size_t nslots;
	uint8_t *src_mask;
	int64_t *src_local;
	size_t nsrc_local;
};

enum { LC__NOTE_STATUS, LC__NOTE_LANDED };

/* A callback to run once the lock is dropped. */
typedef struct lc__note {
	int kind; /* LC__NOTE_* */
	uint64_t room;
	char *session;
	int status, reason;
	char text[LC_REASON_MAX];
	uint8_t *meta;
	size_t meta_len;
	uint32_t layers;
	bool has_sum;
	uint64_t sum;
} lc__note_t;

/* A group posted in the current pass, reported once its doorbell rang. */
typedef struct lc__postlog {
	uint64_t room;
	uint32_t group;
	uint64_t ready_ns; /* step record time; 0: not gated or unknown */
} lc__postlog_t;

/* Step records a CUDA stream writes (gpu_steps.c, docs/gpu.md). */
typedef struct lc__engine_gpu {
	pthread_mutex_t lock;
	_Atomic int active; /* words registered: poll them (external) */
	void *reg[2];       /* page(s) we cuMemHostRegister'ed, or NULL */
	void *cu_ctx;       /* CUcontext of the registration */
	uint64_t dptr[2];   /* device addresses of the words */
	uint64_t next[2];   /* last absolute value enqueued, per word */
	uint64_t enqueued;  /* stream records so far */
} lc__engine_gpu_t;

struct lc_engine {
	lc_ctx_t *ctx;
	lc_layout_t *layout;
	char name[64];
	lc_engine_params_t params;
	lc_cq_t *cq;
	int evfd;
	pthread_t thread;
	bool started;
	lc__steps_t steps;
	_Atomic int want_wake;
	/* Records refused for want of a reservation, per word, and the step
	 * of the latest: counted by lock-free producers, reported by
	 * lc__engine_check_steps (under the lock, refused_logged/_log_ns). */
	_Atomic uint64_t refused[2], refused_step[2];
	lc__engine_gpu_t gpu;

	/* P page ids and state slots a chunk may name (intake.c): the fewest
	 * pages of a page buffer, the fewest slots of a state buffer, and the
	 * buffer that has them (UINT32_MAX: the layout has no such buffer). */
	uint64_t max_pages, max_slots;
	uint32_t pages_buf, slots_buf;

	/* configuration, read once at creation from the context's table */
	int64_t interval;
	uint64_t ttl_ns, layer_ns, metadata_ns, transfer_ns, bootstrap_ns, waiting_ns;
	uint64_t spin_ns, sleep_ns;
	bool inline_submit;
	bool checksum;                 /* room_checksum: sum every write posted */
	uint64_t coalesce_ns;          /* acknowledgement moderation */
	uint64_t seen_cache, seen_aux; /* steps the last progress pass read */
	bool tight_slack;              /* engine thread: timer slack cut (thread.c) */
	uint64_t refused_logged[2];    /* refused[] as last reported (reserve.c) */
	uint64_t refused_log_ns;       /* time of that report */

	pthread_mutex_t lock;
	bool stopping;
	lc__room_table_t rooms;
	lc__notify_t notify; /* rooms' status changes, for lc_prefill_wait */
	lc__session_table_t sessions;
	uint64_t descs_live; /* transfer-info descriptors of unfinished rooms (p_descs_max) */
	/* Chunks of rooms still Bootstrapping (intake.c, "Held chunks" in
	 * docs/engine.md): the caps, read once, and what is held now. */
	uint64_t held_chunks_max, held_pages_max; /* p_room_held_chunks_max, p_held_pages_max */
	uint64_t held_chunks, held_pages;
	bool batch_open, batch_idle;
	lc__task_t *batch_head, **batch_tail; /* chunks of the open batch */
	lc__task_t *inbox, **inbox_tail;      /* stamped, not yet taken */
	lc__task_t *tasks;                    /* taken (the engine thread's list) */
	lc__idmap_t wreq_ids; /* wreq id -> lc__wreq_t (the engine's own ids: no cap) */
	uint64_t next_wreq_id;
	lc__note_t *notes;
	size_t nnotes, notes_cap;
	uint64_t room_scan_at; /* 0: scan rooms at the next iteration */
	/* The layout's buffers as regions (progress.c, sources_resolved):
	 * for the region table's generation src_gen - 1 (0: not yet). */
	uint64_t src_gen;
	bool src_ok;              /* every buffer inside one registered region */
	bool src_device;          /* some buffer is device memory */
	lc__esession_t *to_flush; /* sessions with deferred posts (within progress) */
	lc__postlog_t *postlog;   /* groups posted in this pass (flush_posts) */
	size_t npostlog, postlog_cap;
	lc_engine_metrics_t m;
	lc__post_hook_fn post_hook;
	void *post_hook_arg;
	lc__notes_hook_fn notes_hook;
	void *notes_hook_arg;
};

static inline bool lc__engine_on_thread(const lc_engine_t *e)
{
	return e->started && pthread_equal(pthread_self(), e->thread);
}

/* Keep in *next the earliest non-zero deadline seen. */
static inline void lc__earliest(uint64_t *next, uint64_t when)
{
	if (when && (!*next || when < *next))
		*next = when;
}

/* Wake the engine thread (any thread, no lock needed). */
static inline void lc__engine_wake(lc_engine_t *e)
{
	uint64_t one = 1;
	ssize_t rc = write(e->evfd, &one, sizeof(one));
	LC__UNUSED(rc); /* EAGAIN: the counter is already non-zero */
}

/* A producer's record that no batch reserved (any thread, no lock): counted
 * and left for the engine thread to report. Returns LC_ERR_STATE. */
static inline int lc__engine_refuse_record(lc_engine_t *e, int which, uint64_t step)
{
	atomic_store(&e->refused_step[which], step);
	atomic_fetch_add(&e->refused[which], 1);
	lc__engine_wake(e);
	return LC_ERR_STATE;
}

/* Count, record (lc_last_error) and log bad input from a caller; returns rc. */
static inline int lc__engine_bad_input(lc_engine_t *e, int rc, const char *what)
{
	e->m.bad_input++;
	return LC__FAIL(rc, "engine %s: %s: %s", e->name, what, lc_strerror(rc));
}

/* The same for what a peer sends (a TRANSFER_INFO or REGISTER reaching the
 * engine through P's control thread): the log line is rate-limited (one
 * limiter per file that calls this). */
static inline int lc__engine_bad_peer_input(lc_engine_t *e, int rc, const char *what)
{
	e->m.bad_input++;
	lc__error_set(rc, "engine %s: %s: %s", e->name, what, lc_strerror(rc));
	LC__WARN_PEER("%s", lc_last_error());
	return rc;
}

/* The files call each other downwards only: engine.c (the object) ->
 * thread.c -> progress.c, intake.c, sessions.c, rooms.c -> reserve.c ->
 * finish.c -> task.c. */

/* task.c: tasks and wreqs as data. */
/* 0 or -ENOMEM. */
int lc__engine_idmap_put(lc_engine_t *e, lc__wreq_t *w);
lc__wreq_t *lc__engine_wreq_find(lc_engine_t *e, uint64_t id);
void lc__task_free(lc_engine_t *e, lc__task_t *t);
void lc__task_list_free(lc_engine_t *e, lc__task_t *t);
/* The chunks room r held while Bootstrapping stop counting (room and
 * engine); its parked tasks go to the front of the inbox, oldest first
 * (to_inbox: the room is Bootstrapped, the engine is woken) or are freed
 * (it failed). */
void lc__engine_held_release(lc_engine_t *e, lc__room_t *r, bool to_inbox);

/* intake.c: chunks become tasks. */
/* Take the inbox: each chunk becomes a task planned once per destination. */
void lc__engine_intake(lc_engine_t *e, uint64_t now);

/* progress.c: the posting pass. */
/* Post every ready group of every task, check aux steps and task deadlines,
 * free finished and dead tasks. Returns the earliest deadline; *waiting says
 * whether some task awaits a step. */
uint64_t lc__engine_progress(lc_engine_t *e, uint64_t now, bool *waiting);

/* finish.c: how rooms end, and the callbacks that say so. */
/* Fail a room once: sticky status, tasks killed, every destination told
 * once. Later calls for the same room do nothing. */
void lc__engine_fail_room(lc_engine_t *e, lc__room_t *r, int reason, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Succeed the room if nothing is left to wait for. */
void lc__engine_try_finish(lc_engine_t *e, lc__room_t *r);
/* Queue "layers landed" callbacks for the leading acknowledged groups of
 * the last task of a room. */
void lc__engine_note_landed(lc_engine_t *e, lc__task_t *t);
/* Run queued callbacks with the lock dropped (retaken before returning). */
void lc__engine_deliver_notes(lc_engine_t *e);
/* Take one poll's worth of completions (rule 4). */
void lc__engine_drain_cq(lc_engine_t *e, uint64_t now);
/* Room deadlines and retention (rule 7); returns the earliest deadline. */
uint64_t lc__engine_scan_rooms(lc_engine_t *e, uint64_t now);

/* reserve.c: every step record accounted for. Report refused records (at
 * most once a second), and fail the rooms awaiting steps if a word's value
 * as read (cache, aux: what the caller then acts on) lies beyond its
 * reservation (outside producer), moving its cursor to it. Returns when
 * the next report may be made (0: none waits). */
uint64_t lc__engine_check_steps(lc_engine_t *e, uint64_t now, uint64_t cache, uint64_t aux);

/* sessions.c */
/* Close a session's connection and free it (no lock needed: unlinked). */
void lc__esession_free(lc__esession_t *s);

/* gpu_steps.c (gpu.lock, not e->lock): set up and tear down. fini waits
 * for the registering context's work, then unregisters the words. */
void lc__engine_gpu_init(lc_engine_t *e);
void lc__engine_gpu_fini(lc_engine_t *e);
/* Whether the words are written by an outside producer (parameter or a
 * stream record): the engine thread then polls them. Any thread. */
static inline bool lc__engine_polls(lc_engine_t *e)
{
	return e->params.external_counter || atomic_load(&e->gpu.active);
}

/* thread.c: the engine thread (started by lc_engine_create, no lock held). */
void *lc__engine_thread_main(void *arg);

#endif
