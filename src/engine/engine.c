/*
 * The transfer loop of the seed (async_conn.py), done right: one thread per
 * engine streams every room's ready layer groups to every destination as
 * asynchronous batches, counts acknowledgements per batch, and finalizes
 * each room exactly once. DESIGN.md section 3 lists the rules; docs/engine.md
 * maps each seed defect to its fix and test.
 *
 * Threading contract
 *   - e->lock protects everything below it in struct lc_engine: the room
 *     table, the sessions, the open batch, the inbox, the task list, the
 *     wreq id map, the notes queue and the metrics. The engine thread holds
 *     it while it works and drops it to wait and to run callbacks. API calls
 *     take it briefly. Lock order: e->lock, then the data plane's own locks
 *     (lc_batch_post, lc_conn_cancel_room are called under e->lock; they
 *     never call back into the engine).
 *   - The step words are atomics (core/steps.h); want_wake is an atomic
 *     Dekker flag between the engine thread and lock-free producers.
 *   - Callbacks run on the engine thread (or the destroying thread, after
 *     the engine thread has joined) with no lock held.
 *   - Tasks of a failed room are marked dead at once and freed by the engine
 *     thread; nothing dereferences a dead task's room or session.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/histogram.h"
#include "core/layout.h"
#include "core/planner.h"
#include "core/room.h"
#include "core/session.h"
#include "core/steps.h"
#include "engine/engine.h"
#include "transport/cq.h"

/* A D session as the engine sees it: its connection and where each layout
 * buffer's page 0 is in D's imported regions. */
typedef struct esession {
	lc__session_t *core; /* name, health */
	lc_conn_t *conn;
	lc__xfer_t *xfer; /* per layout buffer */
	struct esession *flush_next; /* on e->to_flush while deferred posts wait */
	bool to_flush;
} esession_t;

typedef struct task task_t;

/* One task toward one destination: its page runs and per-group state. */
typedef struct wreq {
	task_t *task;
	uint32_t dst; /* index into room->dst */
	esession_t *sess;
	uint64_t id; /* batch user_data */
	lc__plan_t plan;
	lc__run_t *runs, *state_runs;
	uint8_t *gstate; /* per group: G_WAIT, G_POSTED, G_ACKED */
	uint64_t *posted_ns;
	uint32_t acked, lead; /* groups acknowledged; leading ones */
	uint32_t outstanding; /* batches posted, not completed */
	struct wreq *hnext;   /* id map chain */
} wreq_t;

enum { G_WAIT = 0, G_POSTED = 1, G_ACKED = 2 };

/* One chunk of one room: the seed's LayerWiseTask. */
struct task {
	task_t *next;
	uint64_t room_id;
	lc__room_t *room; /* set at intake; never dereferenced once dead */
	bool gated;       /* stamped by a batch: waits for steps */
	bool is_last;
	bool dead;
	bool aux_ready;
	uint64_t cache_begin, aux_step;
	uint64_t created_ns;
	uint32_t ngroups, next_group; /* groups [0, next_group) posted */
	uint32_t nwreq;
	wreq_t *wreqs;
	/* the chunk, copied */
	int64_t *pages;
	size_t positions;
	uint64_t dst_index;
	int64_t *state_slots;
	size_t nslots;
	uint8_t *src_mask;
	int64_t *src_local;
	size_t nsrc_local;
};

/* A callback to run once the lock is dropped. */
typedef struct note {
	int kind; /* NOTE_STATUS, NOTE_LANDED */
	uint64_t room;
	char *session;
	int status, reason;
	char text[LC_REASON_MAX];
	uint8_t *meta;
	size_t meta_len;
	uint32_t layers;
} note_t;

enum { NOTE_STATUS, NOTE_LANDED };

typedef struct postlog {
	uint64_t room;
	uint32_t group;
	uint64_t ready_ns; /* step record time; 0: not gated or unknown */
} postlog_t;

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

	/* configuration, read at creation */
	int64_t interval;
	uint64_t ttl_ns, layer_ns, metadata_ns, transfer_ns, bootstrap_ns, waiting_ns;
	uint64_t spin_ns, sleep_ns;
	int64_t transfer_ms;
	bool inline_submit;
	uint64_t coalesce_ns; /* acknowledgement moderation */
	uint64_t seen_cache, seen_aux; /* steps the last progress pass read */

	pthread_mutex_t lock;
	bool stopping;
	lc__room_table_t rooms;
	lc__session_table_t sessions;
	bool batch_open, batch_idle;
	task_t *batch_head, **batch_tail; /* chunks of the open batch */
	task_t *inbox, **inbox_tail;      /* stamped, not yet taken */
	task_t *tasks;                    /* taken (the engine thread's list) */
	wreq_t **idmap;
	size_t idmap_n;
	uint64_t next_wreq_id;
	note_t *notes;
	size_t nnotes, notes_cap;
	uint64_t room_scan_at; /* 0: scan rooms at the next iteration */
	lc_write_t *scratch;
	size_t scratch_cap;
	esession_t *to_flush; /* sessions with deferred posts (within progress) */
	postlog_t *postlog;   /* groups posted in this pass (flush_posts) */
	size_t npostlog, postlog_cap;
	lc_engine_metrics_t m;
	lc__post_hook_fn post_hook;
	void *post_hook_arg;
};

#define IDMAP_N 4096

static void wake(lc_engine_t *e)
{
	uint64_t one = 1;
	ssize_t rc = write(e->evfd, &one, sizeof(one));
	LC__UNUSED(rc); /* EAGAIN: the counter is already non-zero */
}

static bool on_engine_thread(const lc_engine_t *e)
{
	return e->started && pthread_equal(pthread_self(), e->thread);
}

/* ---- notes ------------------------------------------------------------ */

static note_t *note_new(lc_engine_t *e)
{
	if (e->nnotes == e->notes_cap) {
		size_t cap = e->notes_cap ? 2 * e->notes_cap : 32;
		note_t *n = realloc(e->notes, cap * sizeof(*n));
		if (!n)
			return NULL;
		e->notes = n;
		e->notes_cap = cap;
	}
	note_t *n = &e->notes[e->nnotes++];
	memset(n, 0, sizeof(*n));
	return n;
}

/* Queue the final status for every non-dummy destination not yet told. */
static void queue_status(lc_engine_t *e, lc__room_t *r)
{
	for (uint32_t i = 0; i < r->ndst; i++) {
		lc__room_dst_t *d = &r->dst[i];
		if (d->dummy || d->notified)
			continue;
		d->notified = true;
		note_t *n = note_new(e);
		if (!n) {
			LC_ERROR("room %llu: out of memory queueing the status for %s",
				 (unsigned long long)r->id, d->session_name);
			continue;
		}
		n->kind = NOTE_STATUS;
		n->room = r->id;
		n->session = d->session_name ? strdup(d->session_name) : NULL;
		n->status = r->status;
		n->reason = r->status == LC_ROOM_FAILED ? r->fail_reason : LC_FAIL_NONE;
		lc__reason(n->text, sizeof(n->text), "%s", r->status == LC_ROOM_FAILED ? r->reason : "");
		if (r->status == LC_ROOM_SUCCESS && r->metadata_len) {
			n->meta = malloc(r->metadata_len);
			if (n->meta) {
				memcpy(n->meta, r->metadata, r->metadata_len);
				n->meta_len = r->metadata_len;
			}
		}
	}
	r->notify_pending = false;
	if (!on_engine_thread(e))
		wake(e);
}

/* Run queued callbacks with the lock dropped. Called with e->lock held. */
static void deliver_notes(lc_engine_t *e)
{
	while (e->nnotes) {
		note_t *notes = e->notes;
		size_t n = e->nnotes;
		e->notes = NULL;
		e->nnotes = e->notes_cap = 0;
		pthread_mutex_unlock(&e->lock);
		for (size_t i = 0; i < n; i++) {
			note_t *x = &notes[i];
			const char *s = x->session ? x->session : "";
			if (x->kind == NOTE_STATUS && e->params.status_cb)
				e->params.status_cb(e->params.status_arg, x->room, s, x->status,
						    x->reason, x->text, x->meta, x->meta_len);
			else if (x->kind == NOTE_LANDED && e->params.landed_cb)
				e->params.landed_cb(e->params.landed_arg, x->room, s, x->layers);
			free(x->session);
			free(x->meta);
		}
		free(notes);
		pthread_mutex_lock(&e->lock);
	}
}

/* ---- tasks and the wreq id map ----------------------------------------- */

static void idmap_put(lc_engine_t *e, wreq_t *w)
{
	size_t b = w->id & (IDMAP_N - 1);
	w->hnext = e->idmap[b];
	e->idmap[b] = w;
}

static wreq_t *idmap_get(lc_engine_t *e, uint64_t id)
{
	for (wreq_t *w = e->idmap[id & (IDMAP_N - 1)]; w; w = w->hnext)
		if (w->id == id)
			return w;
	return NULL;
}

static void idmap_del(lc_engine_t *e, wreq_t *w)
{
	wreq_t **pp = &e->idmap[w->id & (IDMAP_N - 1)];
	while (*pp && *pp != w)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = w->hnext;
}

static void task_free(lc_engine_t *e, task_t *t)
{
	for (uint32_t i = 0; i < t->nwreq; i++) {
		wreq_t *w = &t->wreqs[i];
		if (w->id)
			idmap_del(e, w);
		free(w->runs);
		free(w->state_runs);
		free(w->gstate);
		free(w->posted_ns);
	}
	free(t->wreqs);
	free(t->pages);
	free(t->state_slots);
	free(t->src_mask);
	free(t->src_local);
	free(t);
}

static void free_list(lc_engine_t *e, task_t *t)
{
	while (t) {
		task_t *next = t->next;
		task_free(e, t);
		t = next;
	}
}

/* Stop everything a room has in flight: its tasks die, its posted batches
 * are cancelled at the data plane. */
static void kill_tasks(lc_engine_t *e, lc__room_t *r)
{
	for (task_t *t = e->tasks; t; t = t->next) {
		if (t->dead || t->room != r)
			continue;
		t->dead = true;
		for (uint32_t i = 0; i < t->nwreq; i++) {
			wreq_t *w = &t->wreqs[i];
			if (w->outstanding && w->sess && w->sess->conn)
				lc_conn_cancel_room(w->sess->conn, r->id);
		}
	}
	r->tasks = 0;
	r->last_task = NULL;
}

/* Fail a room once: sticky status, every destination told once. */
static void fail_room(lc_engine_t *e, lc__room_t *r, int reason, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail_room(lc_engine_t *e, lc__room_t *r, int reason, const char *fmt, ...)
{
	char text[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (lc__room_set_state(&e->rooms, r, LC_ROOM_FAILED, reason, text, lc__now_ns()) != 1)
		return;
	kill_tasks(e, r);
	queue_status(e, r);
	e->room_scan_at = 0;
}

static bool needs_metadata(const lc__room_t *r)
{
	for (uint32_t i = 0; i < r->ndst; i++)
		if (!r->dst[i].dummy)
			return true;
	return false;
}

/* Success only when every destination is present, the last chunk was
 * taken, every task is acknowledged (and its aux step ready) and the
 * metadata is published. */
static void try_finish(lc_engine_t *e, lc__room_t *r)
{
	if (lc__room_final(r) || !lc__room_fanin_done(r) || !r->last_chunk_taken || r->tasks)
		return;
	if (needs_metadata(r) && !r->has_metadata)
		return;
	if (lc__room_set_state(&e->rooms, r, LC_ROOM_SUCCESS, LC_FAIL_NONE, NULL, lc__now_ns()) ==
	    1) {
		for (uint32_t i = 0; i < r->ndst; i++)
			r->dst[i].landed = e->layout->layers;
		queue_status(e, r);
	}
	e->room_scan_at = 0;
}

/* ---- intake: resolve indices, coalesce runs once per task -------------- */

static int build_wreq(lc_engine_t *e, task_t *t, lc__room_t *r, uint32_t di, wreq_t *w)
{
	lc__room_dst_t *d = &r->dst[di];
	esession_t *s = d->session;
	int64_t *src = NULL, *dst = NULL;
	ssize_t n;
	int rc = 0;

	w->task = t;
	w->dst = di;
	w->sess = s;
	if (t->positions) {
		src = malloc(t->positions * sizeof(int64_t));
		dst = malloc(t->positions * sizeof(int64_t));
		w->runs = malloc(t->positions * sizeof(lc__run_t));
		if (!src || !dst || !w->runs) {
			rc = -ENOMEM;
			goto out;
		}
	}
	lc__resolve_in_t in = {
		.src = t->pages,
		.src_mask = t->src_mask,
		.src_local = t->src_local,
		.src_local_count = t->nsrc_local,
		.positions = t->positions,
		.dst = d->pages,
		.dst_count = d->page_count,
		.dst_begin = t->dst_index,
		.dst_mask = d->dst_mask,
		.dst_local = d->dst_local,
		.dst_local_count = d->dst_local_count,
	};
	n = t->positions ? lc__resolve(&in, src, dst) : 0;
	if (n < 0) {
		rc = (int)n;
		if (n == -ERANGE)
			fail_room(e, r, LC_FAIL_BAD_INPUT,
				  "%s holds %zu pages; the chunk needs [%llu, %llu)",
				  d->session_name, d->page_count, (unsigned long long)t->dst_index,
				  (unsigned long long)(t->dst_index + t->positions));
		else
			fail_room(e, r, LC_FAIL_BAD_INPUT, "partial-cache index out of range for %s",
				  d->session_name);
		goto out;
	}
	w->plan.nruns = lc__coalesce(src, dst, (size_t)n, w->runs);
	w->plan.pages = n;
	if (t->is_last && t->nslots && d->state_slot_count) {
		size_t m = LC__MAX(t->nslots, d->state_slot_count);
		free(src);
		free(dst);
		src = malloc(m * sizeof(int64_t));
		dst = malloc(m * sizeof(int64_t));
		w->state_runs = malloc(m * sizeof(lc__run_t));
		if (!src || !dst || !w->state_runs) {
			rc = -ENOMEM;
			goto out;
		}
		n = lc__pair_slots(t->state_slots, t->nslots, d->state_slots, d->state_slot_count,
				   src, dst);
		if (n < 0) {
			rc = (int)n;
			fail_room(e, r, LC_FAIL_BAD_INPUT,
				  "state slots: P has %zu, %s has %zu (only 1:n broadcasts)",
				  t->nslots, d->session_name, d->state_slot_count);
			goto out;
		}
		w->plan.nstate_runs = lc__coalesce(src, dst, (size_t)n, w->state_runs);
		w->plan.slots = n;
	}
	w->plan.layout = e->layout;
	w->plan.xfer = s->xfer;
	w->plan.runs = w->runs;
	w->plan.state_runs = w->state_runs;
	w->gstate = calloc(t->ngroups, 1);
	w->posted_ns = calloc(t->ngroups, sizeof(uint64_t));
	if (!w->gstate || !w->posted_ns) {
		rc = -ENOMEM;
		goto out;
	}
	w->id = ++e->next_wreq_id;
	idmap_put(e, w);
out:
	if (rc == -ENOMEM)
		fail_room(e, r, LC_FAIL_BAD_INPUT, "out of memory planning the chunk");
	free(src);
	free(dst);
	return rc;
}

static void intake_one(lc_engine_t *e, task_t *t, uint64_t now)
{
	lc__room_t *r = lc__room_find(&e->rooms, t->room_id);
	uint32_t nreal = 0;

	if (!r || lc__room_final(r)) {
		task_free(e, t);
		return;
	}
	t->room = r;
	t->created_ns = t->created_ns ? t->created_ns : now;
	t->ngroups = lc__group_count(e->layout->layers, e->interval);
	t->next = e->tasks;
	e->tasks = t;
	r->tasks++;
	if (t->is_last) {
		r->last_chunk_taken = true;
		r->last_task = t;
	}
	for (uint32_t i = 0; i < r->ndst; i++)
		nreal += !r->dst[i].dummy;
	if (!nreal) {
		/* Dummy destinations only: nothing to write, nothing to wait for. */
		t->next_group = t->ngroups;
		t->aux_ready = true;
		return;
	}
	t->wreqs = calloc(nreal, sizeof(wreq_t));
	if (!t->wreqs) {
		fail_room(e, r, LC_FAIL_BAD_INPUT, "out of memory taking a chunk");
		return;
	}
	lc__room_set_state(&e->rooms, r, LC_ROOM_TRANSFERRING, 0, NULL, now);
	for (uint32_t i = 0; i < r->ndst && !t->dead; i++) {
		lc__room_dst_t *d = &r->dst[i];
		esession_t *s = d->session;
		if (d->dummy)
			continue;
		if (!s) {
			fail_room(e, r, LC_FAIL_SESSION_GONE, "session %s is gone", d->session_name);
			return;
		}
		if (lc__session_blocked(s->core, now, e->ttl_ns)) {
			fail_room(e, r, LC_FAIL_SESSION_BLOCKED, "session %s is blocked: %s",
				  s->core->name, s->core->reason);
			return;
		}
		/* Counted first, so that task_free frees a half-built one. */
		if (build_wreq(e, t, r, i, &t->wreqs[t->nwreq++]))
			return;
	}
}

static void intake(lc_engine_t *e, uint64_t now)
{
	task_t *t = e->inbox;
	e->inbox = NULL;
	e->inbox_tail = &e->inbox;
	while (t) {
		task_t *next = t->next;
		e->m.chunks_added++;
		intake_one(e, t, now);
		t = next;
	}
}

/* ---- posting ------------------------------------------------------------- */

static int ensure_scratch(lc_engine_t *e, size_t n)
{
	if (n <= e->scratch_cap)
		return 0;
	size_t cap = LC__MAX(n, 2 * e->scratch_cap);
	lc_write_t *s = realloc(e->scratch, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	e->scratch = s;
	e->scratch_cap = cap;
	return 0;
}

static void update_landed(lc_engine_t *e, task_t *t)
{
	lc__room_t *r = t->room;
	if (!t->is_last || r->tasks != 1 || !e->params.landed_cb)
		return;
	for (uint32_t i = 0; i < t->nwreq; i++) {
		wreq_t *w = &t->wreqs[i];
		uint32_t b, end;
		if (!w->lead)
			continue;
		lc__group_range(e->layout->layers, e->interval, w->lead - 1, &b, &end);
		lc__room_dst_t *d = &r->dst[w->dst];
		if (end <= d->landed)
			continue;
		d->landed = end;
		note_t *n = note_new(e);
		if (n) {
			n->kind = NOTE_LANDED;
			n->room = r->id;
			n->session = d->session_name ? strdup(d->session_name) : NULL;
			n->layers = end;
		}
	}
}

/* Post group g of task t to every destination. Returns false if the room
 * failed. */
static bool post_group(lc_engine_t *e, task_t *t, uint32_t g, uint64_t now)
{
	lc__room_t *r = t->room;
	uint32_t b, end;
	lc__group_range(e->layout->layers, e->interval, g, &b, &end);
	for (uint32_t i = 0; i < t->nwreq; i++) {
		wreq_t *w = &t->wreqs[i];
		size_t cap = lc__plan_count(&w->plan, b, end), n;
		uint64_t bytes = 0, bid = 0;
		if (!cap) {
			/* Nothing of these layers goes to this destination. */
			w->gstate[g] = G_ACKED;
			w->acked++;
			while (w->lead < t->ngroups && w->gstate[w->lead] == G_ACKED)
				w->lead++;
			continue;
		}
		if (ensure_scratch(e, cap)) {
			fail_room(e, r, LC_FAIL_TRANSFER, "out of memory planning layers %u-%u", b,
				  end - 1);
			return false;
		}
		n = lc__plan_emit(&w->plan, b, end, e->scratch, &bytes);
		lc_batch_params_t bp = {
			.size = sizeof(bp),
			.room = r->id,
			.tag = g,
			.timeout_ms = e->transfer_ms + 1000, /* the engine's deadline fires first */
			.user_data = w->id,
			.flags = LC_BATCH_DEFER, /* one wake-up per connection: flush_posts */
		};
		int rc = lc_batch_post(w->sess->conn, e->scratch, n, &bp, &bid);
		if (rc) {
			lc__session_fail(w->sess->core, now, lc_strerror(rc));
			e->m.session_failures++;
			fail_room(e, r, LC_FAIL_TRANSFER, "posting layers %u-%u to %s: %s", b,
				  end - 1, w->sess->core->name, lc_strerror(rc));
			return false;
		}
		if (!w->sess->to_flush) {
			w->sess->to_flush = true;
			w->sess->flush_next = e->to_flush;
			e->to_flush = w->sess;
		}
		w->gstate[g] = G_POSTED;
		w->posted_ns[g] = now;
		w->outstanding++;
		e->m.batches_posted++;
		e->m.writes_posted += n;
		e->m.bytes_posted += bytes;
	}
	update_landed(e, t);
	return true;
}

/* A group posted in this pass, for the step-to-post histogram once its
 * connection has been rung. */
static void log_post(lc_engine_t *e, uint64_t room, uint32_t g, uint64_t ready_ns)
{
	if (e->npostlog == e->postlog_cap) {
		size_t cap = e->postlog_cap ? 2 * e->postlog_cap : 64;
		postlog_t *v = realloc(e->postlog, cap * sizeof(*v));
		if (!v)
			return; /* a sample lost, nothing else */
		e->postlog = v;
		e->postlog_cap = cap;
	}
	e->postlog[e->npostlog++] = (postlog_t){room, g, ready_ns};
}

/* Ring each connection that got deferred posts in this pass, once. The
 * groups count as posted when the doorbells ring: the time is taken just
 * before, since the wake-up itself may hand this CPU to the transport's
 * thread, which is then already moving the bytes. */
static void flush_posts(lc_engine_t *e, uint64_t now)
{
	if (!e->to_flush && !e->npostlog)
		return; /* most passes post nothing: no clock read */
	uint64_t post_ns = lc__now_ns();
	bool inline_pass = !on_engine_thread(e);
	while (e->to_flush) {
		esession_t *s = e->to_flush;
		e->to_flush = s->flush_next;
		s->flush_next = NULL;
		s->to_flush = false;
		lc_conn_flush(s->conn);
	}
	for (size_t i = 0; i < e->npostlog; i++) {
		postlog_t *p = &e->postlog[i];
		uint64_t ready_ns = p->ready_ns && p->ready_ns <= post_ns ? p->ready_ns : now;
		lc__hist_add(&e->m.step_to_post, post_ns - ready_ns);
		if (e->post_hook)
			e->post_hook(e->post_hook_arg, p->room, p->group, ready_ns, post_ns,
				     e->m.loop_iterations, inline_pass);
	}
	e->npostlog = 0;
}

/* Next deadline accumulator. */
static void at(uint64_t *next, uint64_t when)
{
	if (when && (!*next || when < *next))
		*next = when;
}

/* Post every ready group of every task (rule 2), check aux steps and
 * deadlines, free finished and dead tasks. Returns the earliest deadline;
 * *waiting says whether some task awaits a step. */
static uint64_t progress(lc_engine_t *e, uint64_t now, bool *waiting)
{
	uint64_t cache = lc__steps_read(&e->steps, LC_STEP_CACHE);
	uint64_t aux = lc__steps_read(&e->steps, LC_STEP_AUX);
	uint64_t next = 0, pending = 0, inflight = 0;
	e->seen_cache = cache; /* what the engine thread may sleep on */
	e->seen_aux = aux;
	task_t **pp = &e->tasks;
	*waiting = false;

	while (*pp) {
		task_t *t = *pp;
		lc__room_t *r = t->room;
		if (!t->dead) {
			while (t->next_group < t->ngroups) {
				uint32_t b, end, g = t->next_group;
				lc__group_range(e->layout->layers, e->interval, g, &b, &end);
				uint64_t step = lc__step_add(t->cache_begin, end - 1);
				if (t->gated && !lc__step_ready(cache, step))
					break;
				if (!post_group(e, t, g, now))
					break;
				t->next_group++;
				log_post(e, r->id, g,
					 t->gated ? lc__steps_record_time(&e->steps, step) : 0);
			}
			if (!t->dead && t->next_group == t->ngroups && t->is_last && !r->last_ready_ns) {
				r->last_ready_ns = now;
				e->room_scan_at = 0;
			}
			if (!t->dead && !t->aux_ready)
				t->aux_ready = !t->gated || !t->is_last || lc__step_ready(aux, t->aux_step);
		}
		if (!t->dead) {
			bool acked = t->next_group == t->ngroups;
			for (uint32_t i = 0; i < t->nwreq && acked; i++)
				acked = t->wreqs[i].acked == t->ngroups;
			if (acked && t->aux_ready) {
				*pp = t->next;
				r->tasks--;
				if (r->last_task == t)
					r->last_task = NULL;
				task_free(e, t);
				if (r->last_task && r->tasks == 1)
					update_landed(e, r->last_task);
				try_finish(e, r);
				continue;
			}
			/* Deadlines (rule 7). */
			if (t->next_group < t->ngroups) {
				pending++;
				if (t->gated) {
					*waiting = true;
					uint64_t dl = t->created_ns + e->layer_ns;
					if (now >= dl) {
						uint32_t b, end;
						lc__group_range(e->layout->layers, e->interval,
								t->next_group, &b, &end);
						fail_room(e, r, LC_FAIL_LAYER_TIMEOUT,
							  "layer %u (step %llu) not ready within %llu ms",
							  end - 1,
							  (unsigned long long)lc__step_add(
								  t->cache_begin, end - 1),
							  (unsigned long long)(e->layer_ns / 1000000));
					} else {
						at(&next, dl);
					}
				}
			} else {
				inflight++;
			}
			for (uint32_t i = 0; i < t->nwreq && !t->dead; i++) {
				wreq_t *w = &t->wreqs[i];
				for (uint32_t g = w->lead; g < t->next_group && w->outstanding; g++) {
					if (w->gstate[g] != G_POSTED)
						continue;
					uint64_t dl = w->posted_ns[g] + e->transfer_ns;
					if (now >= dl) {
						lc__session_fail(w->sess->core, now,
								 "acknowledgement timeout");
						e->m.session_failures++;
						fail_room(e, r, LC_FAIL_TRANSFER_TIMEOUT,
							  "layer group %u not acknowledged by %s "
							  "within %llu ms",
							  g, w->sess->core->name,
							  (unsigned long long)(e->transfer_ns /
									       1000000));
					} else {
						at(&next, dl);
					}
					break; /* the earliest posted group decides */
				}
			}
			if (!t->dead && !t->aux_ready && t->next_group == t->ngroups) {
				*waiting = true;
				uint64_t dl = r->last_ready_ns + e->metadata_ns;
				if (now >= dl)
					fail_room(e, r, LC_FAIL_METADATA_TIMEOUT,
						  "aux step %llu not recorded within %llu ms",
						  (unsigned long long)t->aux_step,
						  (unsigned long long)(e->metadata_ns / 1000000));
				else
					at(&next, dl);
			}
		}
		if (t->dead) {
			*pp = t->next;
			task_free(e, t);
			continue;
		}
		pp = &t->next;
	}
	flush_posts(e, now);
	e->m.tasks_pending = pending;
	e->m.tasks_inflight = inflight;
	e->m.tasks_pending_max = LC__MAX(e->m.tasks_pending_max, pending);
	return next;
}

/* ---- completions (rule 4) ----------------------------------------------- */

static void on_completion(lc_engine_t *e, const lc_completion_t *c, uint64_t now)
{
	wreq_t *w = idmap_get(e, c->user_data);
	if (!w || w->task->dead)
		return; /* a cancelled room's batch, or a stale id */
	task_t *t = w->task;
	lc__room_t *r = t->room;
	uint32_t g = c->tag;
	if (g >= t->ngroups || w->gstate[g] != G_POSTED) {
		LC_WARN("room %llu: unexpected completion for group %u", (unsigned long long)r->id,
			g);
		return;
	}
	w->outstanding--;
	if (c->status == 0) {
		w->gstate[g] = G_ACKED;
		w->acked++;
		e->m.bytes_acked += c->bytes;
		lc__hist_add(&e->m.group_ack_latency, now - w->posted_ns[g]);
		while (w->lead < t->ngroups && w->gstate[w->lead] == G_ACKED)
			w->lead++;
		update_landed(e, t);
		return;
	}
	e->m.batches_failed++;
	if (c->status != LC_ERR_CANCELLED) {
		lc__session_fail(w->sess->core, now, c->reason[0] ? c->reason : lc_strerror(c->status));
		e->m.session_failures++;
	}
	fail_room(e, r, c->status == LC_ERR_EXPIRED ? LC_FAIL_TRANSFER_TIMEOUT : LC_FAIL_TRANSFER,
		  "layer group %u to %s: %s%s%s", g, w->sess->core->name, lc_strerror(c->status),
		  c->reason[0] ? ": " : "", c->reason);
}

/* At most one poll's worth per pass: a transport that keeps delivering
 * acknowledgements must not keep the pass from posting the groups a step
 * record made ready meanwhile. What is left makes lc__cq_arm() refuse, so
 * the engine runs another pass instead of sleeping. */
static void drain_cq(lc_engine_t *e, uint64_t now)
{
	lc_completion_t c[64];
	int n = lc_cq_poll(e->cq, c, (int)LC__ARRAY_SIZE(c));
	for (int i = 0; i < n; i++)
		on_completion(e, &c[i], now);
}

/* ---- room deadlines and retention --------------------------------------- */

static uint64_t scan_rooms(lc_engine_t *e, uint64_t now)
{
	uint64_t next = 0;
	for (size_t b = 0; b < e->rooms.nbuckets; b++) {
		lc__room_t *r = e->rooms.buckets[b];
		while (r) {
			lc__room_t *nx = r->next;
			if (lc__room_final(r)) {
				/* Finished and never read: dropped after waiting_timeout. */
				uint64_t dl = r->final_ns + e->waiting_ns;
				if (now >= dl) {
					LC_INFO("room %llu: final status never read; dropped",
						(unsigned long long)r->id);
					e->rooms.metrics.expired_unread++;
					lc__room_remove(&e->rooms, r);
				} else {
					at(&next, dl);
				}
			} else if (!lc__room_fanin_done(r)) {
				uint64_t dl = r->opened_ns + e->bootstrap_ns;
				if (now >= dl)
					fail_room(e, r, LC_FAIL_BOOTSTRAP_TIMEOUT,
						  "%u of %u destinations within %llu ms", r->ndst,
						  r->required, (unsigned long long)(e->bootstrap_ns / 1000000));
				else
					at(&next, dl);
			} else {
				uint64_t dl = r->bootstrapped_ns + e->waiting_ns;
				if (r->last_ready_ns && !r->has_metadata && needs_metadata(r)) {
					uint64_t md = r->last_ready_ns + e->metadata_ns;
					if (now >= md) {
						fail_room(e, r, LC_FAIL_METADATA_TIMEOUT,
							  "metadata not published within %llu ms",
							  (unsigned long long)(e->metadata_ns / 1000000));
						r = nx;
						continue;
					}
					at(&next, md);
				}
				if (now >= dl)
					fail_room(e, r, LC_FAIL_WAITING_TIMEOUT,
						  "not finished within %llu ms of bootstrap",
						  (unsigned long long)(e->waiting_ns / 1000000));
				else
					at(&next, dl);
			}
			r = nx;
		}
	}
	return next;
}

/* ---- the loop ------------------------------------------------------------ */

static void *engine_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-engine");
	lc_engine_t *e = arg;
	lc__backoff_t bo;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	lc__backoff_init(&bo, e->spin_ns, e->sleep_ns);

	pthread_mutex_lock(&e->lock);
	while (!e->stopping) {
		uint64_t now = lc__now_ns(), next;
		bool waiting;
		e->m.loop_iterations++;
		intake(e, now);                   /* rule 1 */
		drain_cq(e, now);                 /* rule 4 */
		next = progress(e, now, &waiting); /* rules 2, 3, 5, 7 */
		if (!e->room_scan_at || now >= e->room_scan_at)
			e->room_scan_at = scan_rooms(e, now);
		at(&next, e->room_scan_at);
		deliver_notes(e);
		if (e->inbox || e->stopping)
			continue;

		/* Rule 6: sleep until an event, the next deadline, or the next
		 * read of an outside producer's counter. The steps compared are
		 * those the last pass acted on: a step recorded since then (and
		 * before want_wake was set) must not be slept through. */
		uint64_t cache = e->seen_cache, aux = e->seen_aux;
		int64_t wait_ns = next ? (int64_t)(next - lc__now_ns()) : 1000000000;
		if (wait_ns > 1000000000)
			wait_ns = 1000000000;
		if (waiting) {
			atomic_store(&e->want_wake, 1);
			if (e->params.external_counter) {
				uint64_t b = lc__backoff_next(&bo, lc__now_ns());
				if ((int64_t)b < wait_ns)
					wait_ns = (int64_t)b;
			}
			/* Dekker with lc__steps_record: recheck after announcing. */
			if (lc__steps_read(&e->steps, LC_STEP_CACHE) != cache ||
			    lc__steps_read(&e->steps, LC_STEP_AUX) != aux) {
				atomic_store(&e->want_wake, 0);
				lc__backoff_reset(&bo);
				continue;
			}
		} else {
			lc__backoff_reset(&bo);
		}
		if (wait_ns < 0)
			wait_ns = 0;
		/* The completion queue writes its eventfd only while armed: the
		 * transports' pushes wake nobody while this thread works. */
		if (!lc__cq_arm(e->cq)) {
			atomic_store(&e->want_wake, 0);
			continue;
		}
		struct pollfd fds[2] = {{.fd = e->evfd, .events = POLLIN},
					{.fd = lc_cq_fd(e->cq), .events = POLLIN}};
		struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
		pthread_mutex_unlock(&e->lock);
		int rc = ppoll(fds, 2, &ts, NULL);
		if (rc > 0 && !(fds[0].revents & POLLIN) && e->coalesce_ns) {
			/* Woken by acknowledgements only: let the rest of the burst
			 * gather before taking the lock (moderation, as NICs do),
			 * so that the engine wakes a few times per layer, not once
			 * per room, and a step record meanwhile finds the lock free
			 * and posts inline. Any other event ends the wait. */
			struct pollfd ev = {.fd = e->evfd, .events = POLLIN};
			struct timespec cts = {0, (long)e->coalesce_ns};
			ppoll(&ev, 1, &cts, NULL);
		}
		pthread_mutex_lock(&e->lock);
		atomic_store(&e->want_wake, 0);
		lc__cq_disarm(e->cq, rc > 0 && (fds[1].revents & POLLIN));
		if (rc > 0 && (fds[0].revents & POLLIN)) {
			uint64_t v;
			ssize_t r = read(e->evfd, &v, sizeof(v));
			LC__UNUSED(r);
		}
		if (lc__steps_read(&e->steps, LC_STEP_CACHE) != cache ||
		    lc__steps_read(&e->steps, LC_STEP_AUX) != aux)
			lc__backoff_reset(&bo);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* ---- create / destroy ---------------------------------------------------- */

static int64_t cfg(lc_ctx_t *ctx, const char *name, int64_t def)
{
	int64_t v;
	return lc_ctx_config_get_int(ctx, name, &v) ? def : v;
}

static void session_free(esession_t *s)
{
	if (!s)
		return;
	lc_conn_destroy(s->conn);
	free(s->xfer);
	free(s);
}

int lc_engine_create(lc_ctx_t *ctx, const lc_engine_params_t *params, lc_engine_t **out)
{
	lc_engine_t *e;
	int rc;
	if (!ctx || !params || !out || params->size < offsetof(lc_engine_params_t, status_cb) ||
	    !params->layout)
		return -EINVAL;
	for (uint32_t i = 0; i < params->layout->nbuf; i++)
		if (!params->layout->bufs[i].base) {
			LC_WARN("engine: buffer %u of the layout has no base address", i);
			return -EINVAL;
		}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	memcpy(&e->params, params, LC__MIN(params->size, sizeof(e->params)));
	e->params.size = sizeof(e->params);
	e->params.layout = NULL;
	e->params.name = NULL;
	lc__reason(e->name, sizeof(e->name), "%s", params->name ? params->name : "engine");
	e->ctx = ctx;
	e->evfd = -1;
	e->inbox_tail = &e->inbox;
	e->batch_tail = &e->batch_head;
	e->interval = cfg(ctx, "layerwise_interval", 1);
	e->ttl_ns = (uint64_t)cfg(ctx, "session_ttl_ms", 30000) * 1000000ull;
	e->layer_ns = (uint64_t)cfg(ctx, "layer_timeout_ms", 60000) * 1000000ull;
	e->metadata_ns = (uint64_t)cfg(ctx, "metadata_timeout_ms", 30000) * 1000000ull;
	e->transfer_ms = cfg(ctx, "transfer_timeout_ms", 60000);
	e->transfer_ns = (uint64_t)e->transfer_ms * 1000000ull;
	e->bootstrap_ns = (uint64_t)cfg(ctx, "bootstrap_timeout_ms", 120000) * 1000000ull;
	e->waiting_ns = (uint64_t)cfg(ctx, "waiting_timeout_ms", 300000) * 1000000ull;
	e->spin_ns = (uint64_t)cfg(ctx, "poll_spin_us", 50) * 1000ull;
	e->sleep_ns = (uint64_t)cfg(ctx, "poll_sleep_us", 20) * 1000ull;
	e->inline_submit = cfg(ctx, "inline_submit", 1) != 0;
	e->coalesce_ns = (uint64_t)cfg(ctx, "ack_coalesce_us", 50) * 1000ull;

	if ((rc = lc__layout_clone(params->layout, &e->layout)))
		goto fail_free;
	if ((rc = lc__steps_init(&e->steps, params->cache_word, params->aux_word)))
		goto fail_layout;
	if ((rc = lc__room_table_init(&e->rooms)))
		goto fail_steps;
	e->idmap = calloc(IDMAP_N, sizeof(*e->idmap));
	if (!e->idmap) {
		rc = -ENOMEM;
		goto fail_rooms;
	}
	if ((rc = lc_cq_create(ctx, &e->cq)))
		goto fail_idmap;
	lc__cq_set_arm_mode(e->cq);
	e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (e->evfd < 0) {
		rc = -errno;
		goto fail_cq;
	}
	pthread_mutex_init(&e->lock, NULL);
	if ((rc = -pthread_create(&e->thread, NULL, engine_main, e)))
		goto fail_lock;
	e->started = true;
	LC_INFO("engine %s: %u buffers, %u layers, interval %lld", e->name, e->layout->nbuf,
		e->layout->layers, (long long)e->interval);
	*out = e;
	return 0;

fail_lock:
	pthread_mutex_destroy(&e->lock);
	close(e->evfd);
fail_cq:
	lc_cq_destroy(e->cq);
fail_idmap:
	free(e->idmap);
fail_rooms:
	lc__room_table_fini(&e->rooms);
fail_steps:
	lc__steps_fini(&e->steps);
fail_layout:
	lc_layout_destroy(e->layout);
fail_free:
	free(e);
	return rc;
}

void lc_engine_destroy(lc_engine_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_mutex_unlock(&e->lock);
	wake(e);
	pthread_join(e->thread, NULL);
	e->started = false;

	pthread_mutex_lock(&e->lock);
	for (size_t b = 0; b < e->rooms.nbuckets; b++)
		for (lc__room_t *r = e->rooms.buckets[b]; r; r = r->next)
			if (!lc__room_final(r))
				fail_room(e, r, LC_FAIL_STOPPED, "engine %s stopped", e->name);
	deliver_notes(e);
	free_list(e, e->tasks);
	free_list(e, e->inbox);
	free_list(e, e->batch_head);
	e->tasks = e->inbox = e->batch_head = NULL;
	pthread_mutex_unlock(&e->lock);

	for (size_t i = 0; i < e->sessions.count; i++)
		session_free(e->sessions.items[i]->owner);
	lc__session_table_fini(&e->sessions);
	lc_cq_destroy(e->cq);
	close(e->evfd);
	pthread_mutex_destroy(&e->lock);
	lc__room_table_fini(&e->rooms);
	lc__steps_fini(&e->steps);
	lc_layout_destroy(e->layout);
	free(e->idmap);
	free(e->scratch);
	free(e->postlog);
	free(e->notes);
	free(e);
}

void lc__engine_set_post_hook(lc_engine_t *e, lc__post_hook_fn fn, void *arg)
{
	pthread_mutex_lock(&e->lock);
	e->post_hook = fn;
	e->post_hook_arg = arg;
	pthread_mutex_unlock(&e->lock);
}

/* ---- steps ----------------------------------------------------------------- */

/* Rule 6 with the wake-up taken off the critical path: if the engine lock
 * is free (the engine thread sleeps, or runs callbacks), the recording
 * thread posts the groups this step made ready itself. Waking a sleeping
 * thread costs 50 us and more on a virtual machine; posting 64 rooms'
 * groups about 25 us. trylock never waits: an engine thread holding the
 * lock is awake and compares the steps with those its pass read before it
 * sleeps. Returns whether the engine thread still has to be woken (if it
 * sleeps): when the pass could not run, or left it work (a room scan for
 * new metadata deadlines, callbacks to deliver). The deadlines of the
 * groups just posted lie beyond the one the engine thread sleeps towards.
 * A batch the engine thread has not taken in yet (its wake-up after
 * lc_engine_batch_end is late) is taken in here: its layers are being
 * recorded. In bench wake this cut the records left to the engine thread
 * from ~28 to ~21 per 1,650, and p99 misses from 4 to 1 in 15 runs. */
static bool submit_inline(lc_engine_t *e)
{
	if (!e->inline_submit || on_engine_thread(e) || pthread_mutex_trylock(&e->lock))
		return true;
	bool wake_it = true;
	if (!e->stopping) {
		bool waiting;
		uint64_t now = lc__now_ns();
		if (e->inbox) /* the engine thread's wake-up is late */
			intake(e, now);
		progress(e, now, &waiting);
		e->m.inline_submits++;
		wake_it = e->room_scan_at == 0 || e->nnotes;
	}
	pthread_mutex_unlock(&e->lock);
	return wake_it;
}

static int record(lc_engine_t *e, int which)
{
	if (!e)
		return -EINVAL;
	lc__steps_record(&e->steps, which);
	if (submit_inline(e) && atomic_load(&e->want_wake))
		wake(e);
	return 0;
}

int lc_engine_record_cache(lc_engine_t *e)
{
	return record(e, LC_STEP_CACHE);
}

int lc_engine_record_aux(lc_engine_t *e)
{
	return record(e, LC_STEP_AUX);
}

int lc_engine_counter(lc_engine_t *e, int which, uint64_t **out)
{
	if (!e || !out || (which != LC_STEP_CACHE && which != LC_STEP_AUX))
		return -EINVAL;
	*out = e->steps.word[which];
	return 0;
}

/* ---- batches ----------------------------------------------------------------- */

static int bad_input(lc_engine_t *e, int rc, const char *what)
{
	e->m.bad_input++;
	LC_WARN("engine %s: %s: %s", e->name, what, lc_strerror(rc));
	return rc;
}

int lc_engine_batch_begin(lc_engine_t *e, int is_idle)
{
	int rc = 0;
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	if (e->batch_open)
		rc = bad_input(e, LC_ERR_STATE, "batch_begin inside an open batch");
	else {
		e->batch_open = true;
		e->batch_idle = is_idle != 0;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

static void *dup_or_null(const void *p, size_t n, size_t elem, bool *oom)
{
	if (!p || !n)
		return NULL;
	void *q = malloc(n * elem);
	if (!q)
		*oom = true;
	else
		memcpy(q, p, n * elem);
	return q;
}

int lc_engine_chunk_add(lc_engine_t *e, const lc_chunk_t *c)
{
	task_t *t;
	lc__room_t *r;
	bool oom = false;
	int rc = 0;
	if (!e || !c || c->size < offsetof(lc_chunk_t, state_slots))
		return -EINVAL;
	size_t csz = LC__MIN(c->size, sizeof(lc_chunk_t));
	lc_chunk_t ch = {0};
	memcpy(&ch, c, csz);
	pthread_mutex_lock(&e->lock);
	if (e->batch_open && e->batch_idle) {
		rc = bad_input(e, LC_ERR_STATE, "chunk added to an idle batch");
		goto out;
	}
	if ((ch.page_count && !ch.pages && !ch.src_mask) || (ch.src_mask && !ch.src_local) ||
	    (ch.state_slot_count && !ch.state_slots)) {
		rc = bad_input(e, -EINVAL, "chunk arrays");
		goto out;
	}
	r = lc__room_find(&e->rooms, ch.room);
	if (!r) {
		rc = bad_input(e, -ENOENT, "chunk for an unknown room");
		goto out;
	}
	if (r->status == LC_ROOM_FAILED) {
		rc = LC_ERR_STATE; /* the room failed meanwhile: not a caller bug */
		goto out;
	}
	if (lc__room_final(r) || !lc__room_fanin_done(r)) {
		rc = bad_input(e, LC_ERR_STATE, "chunk for a room not Bootstrapped");
		goto out;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	t->room_id = ch.room;
	t->is_last = ch.is_last != 0;
	t->positions = ch.page_count;
	t->dst_index = ch.dst_index;
	t->pages = dup_or_null(ch.pages, ch.page_count, sizeof(int64_t), &oom);
	t->src_mask = dup_or_null(ch.src_mask, ch.page_count, 1, &oom);
	t->src_local = dup_or_null(ch.src_local, ch.src_local_count, sizeof(int64_t), &oom);
	t->nsrc_local = ch.src_local_count;
	if (t->is_last) {
		t->state_slots = dup_or_null(ch.state_slots, ch.state_slot_count, sizeof(int64_t),
					     &oom);
		t->nslots = t->state_slots ? ch.state_slot_count : 0;
	}
	if (oom) {
		task_free(e, t);
		rc = -ENOMEM;
		goto out;
	}
	t->created_ns = lc__now_ns();
	if (e->batch_open) {
		*e->batch_tail = t;
		e->batch_tail = &t->next;
	} else {
		/* Outside a batch: after the forward, every layer is ready. */
		*e->inbox_tail = t;
		e->inbox_tail = &t->next;
		wake(e);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_batch_end(lc_engine_t *e)
{
	uint64_t cache, aux, now = lc__now_ns();
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	if (!e->batch_open) {
		int rc = bad_input(e, LC_ERR_STATE, "batch_end without batch_begin");
		pthread_mutex_unlock(&e->lock);
		return rc;
	}
	e->batch_open = false;
	if (!e->batch_idle) {
		/* Reserve even when empty: the forward records every layer. */
		lc__steps_reserve(&e->steps, e->layout->layers, &cache, &aux);
		for (task_t *t = e->batch_head; t; t = t->next) {
			t->gated = true;
			t->cache_begin = cache;
			t->aux_step = aux;
			t->created_ns = now;
		}
		if (e->batch_head) {
			*e->inbox_tail = e->batch_head;
			e->inbox_tail = e->batch_tail;
			wake(e);
		}
	}
	e->batch_head = NULL;
	e->batch_tail = &e->batch_head;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* ---- sessions ------------------------------------------------------------------ */

/* Fail every unfinished room with a destination on session s. */
static void fail_rooms_of(lc_engine_t *e, esession_t *s, const char *why)
{
	for (size_t b = 0; b < e->rooms.nbuckets; b++)
		for (lc__room_t *r = e->rooms.buckets[b]; r; r = r->next) {
			if (lc__room_final(r))
				continue;
			for (uint32_t i = 0; i < r->ndst; i++)
				if (r->dst[i].session == s) {
					fail_room(e, r, LC_FAIL_SESSION_GONE, "session %s %s",
						  s->core->name, why);
					break;
				}
		}
}

/* Heterogeneous TP: only the buffers with a fragment go to this session,
 * each as a byte range of every page. The bounds are checked here, once:
 * the planner trusts its transfer table. */
static int apply_fragments(lc_engine_t *e, esession_t *s, const lc_session_params_t *p)
{
	if (!p->fragments)
		return -EINVAL;
	for (uint32_t b = 0; b < e->layout->nbuf; b++)
		s->xfer[b].skip = 1;
	for (size_t i = 0; i < p->fragment_count; i++) {
		const lc_fragment_t *f = &p->fragments[i];
		const lc_buffer_t *buf = f->buffer < e->layout->nbuf ? &e->layout->bufs[f->buffer] : NULL;
		lc__xfer_t *x = buf ? &s->xfer[f->buffer] : NULL;
		if (!buf || !x->skip || !f->bytes || f->src_offset > buf->item_len ||
		    f->bytes > buf->item_len - f->src_offset || f->dst_offset > f->dst_item_len ||
		    f->bytes > f->dst_item_len - f->dst_offset) {
			char what[256];
			snprintf(what, sizeof what,
				 "session %s: fragment %zu (buffer %u, %llu bytes at %llu -> %llu of "
				 "%llu)%s",
				 p->name, i, f->buffer, (unsigned long long)f->bytes,
				 (unsigned long long)f->src_offset, (unsigned long long)f->dst_offset,
				 (unsigned long long)f->dst_item_len,
				 !buf ? " names no buffer" : !x->skip ? ": buffer named twice"
								    : " does not fit its pages");
			pthread_mutex_lock(&e->lock);
			int rc = bad_input(e, LC_ERR_GEOMETRY, what);
			pthread_mutex_unlock(&e->lock);
			return rc;
		}
		x->src_base = (const uint8_t *)buf->base + f->src_offset;
		x->dst_base += f->dst_offset;
		x->dst_stride = f->dst_item_len;
		x->bytes = f->bytes;
		x->skip = 0;
	}
	return 0;
}

int lc_engine_session_add(lc_engine_t *e, const lc_session_params_t *p)
{
	esession_t *s;
	lc__session_t *core;
	esession_t *old = NULL;
	uint32_t *ids = NULL;
	int rc;
	if (!e || !p || p->size < offsetof(lc_session_params_t, buffer_region) || !p->name ||
	    !*p->name || !p->url || (p->region_count && (!p->region_descs || !p->region_desc_lens)))
		return -EINVAL;
	if (!p->buffer_region && p->region_count != e->layout->nbuf) {
		LC_WARN("session %s: %zu region descriptors for %u buffers", p->name,
			p->region_count, e->layout->nbuf);
		return -EINVAL;
	}
	const uint32_t *buf_region = p->size > offsetof(lc_session_params_t, buffer_region)
					     ? p->buffer_region
					     : NULL;
	const uint64_t *buf_offset = p->size > offsetof(lc_session_params_t, buffer_offset)
					     ? p->buffer_offset
					     : NULL;
	for (uint32_t b = 0; buf_region && b < e->layout->nbuf; b++)
		if (buf_region[b] >= p->region_count)
			return -EINVAL;

	s = calloc(1, sizeof(*s));
	ids = calloc(p->region_count ? p->region_count : 1, sizeof(uint32_t));
	if (s)
		s->xfer = calloc(e->layout->nbuf, sizeof(*s->xfer));
	if (!s || !ids || !s->xfer) {
		rc = -ENOMEM;
		goto fail;
	}
	lc_conn_params_t cp = {.size = sizeof(cp), .cq = e->cq, .has_token = p->has_token};
	cp.token = p->token;
	if ((rc = lc_conn_create(e->ctx, p->url, &cp, &s->conn))) {
		LC_WARN("session %s: connecting to %s: %s", p->name, p->url, lc_strerror(rc));
		goto fail;
	}
	for (size_t i = 0; i < p->region_count; i++)
		if ((rc = lc_conn_import_region(s->conn, p->region_descs[i], p->region_desc_lens[i],
						&ids[i]))) {
			LC_WARN("session %s: importing region %zu: %s", p->name, i,
				lc_strerror(rc));
			goto fail;
		}
	for (uint32_t b = 0; b < e->layout->nbuf; b++)
		lc__xfer_whole_page(&s->xfer[b], &e->layout->bufs[b],
				    ids[buf_region ? buf_region[b] : b], buf_offset ? buf_offset[b] : 0);
	if (p->size >= offsetof(lc_session_params_t, fragment_count) + sizeof(size_t) &&
	    p->fragment_count && (rc = apply_fragments(e, s, p)))
		goto fail;
	free(ids);
	ids = NULL;

	pthread_mutex_lock(&e->lock);
	core = lc__session_find(&e->sessions, p->name);
	if (core) {
		old = core->owner;
		fail_rooms_of(e, old, "registered again");
		lc__session_clear(core);
	} else if ((rc = lc__session_add(&e->sessions, p->name, &core))) {
		pthread_mutex_unlock(&e->lock);
		goto fail;
	}
	core->owner = s;
	s->core = core;
	pthread_mutex_unlock(&e->lock);
	if (old) {
		old->core = NULL;
		session_free(old);
	}
	LC_INFO("engine %s: session %s -> %s", e->name, p->name, p->url);
	return 0;
fail:
	free(ids);
	session_free(s);
	return rc;
}

int lc_engine_session_remove(lc_engine_t *e, const char *name)
{
	esession_t *s;
	if (!e || !name)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	lc__session_t *core = lc__session_find(&e->sessions, name);
	if (!core) {
		pthread_mutex_unlock(&e->lock);
		return -ENOENT;
	}
	s = core->owner;
	fail_rooms_of(e, s, "removed");
	/* Destinations of finished rooms may still name it: forget the link. */
	for (size_t b = 0; b < e->rooms.nbuckets; b++)
		for (lc__room_t *r = e->rooms.buckets[b]; r; r = r->next)
			for (uint32_t i = 0; i < r->ndst; i++)
				if (r->dst[i].session == s)
					r->dst[i].session = NULL;
	lc__session_remove(&e->sessions, core);
	pthread_mutex_unlock(&e->lock);
	s->core = NULL;
	session_free(s);
	return 0;
}

int lc_engine_session_blocked(lc_engine_t *e, const char *name, uint64_t *failures)
{
	int rc;
	if (!e || !name)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	lc__session_t *core = lc__session_find(&e->sessions, name);
	if (!core)
		rc = -ENOENT;
	else {
		rc = lc__session_blocked(core, lc__now_ns(), e->ttl_ns) ? 1 : 0;
		if (failures)
			*failures = core->failures;
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* ---- rooms --------------------------------------------------------------------- */

int lc_engine_room_open(lc_engine_t *e, uint64_t room)
{
	lc__room_t *r;
	int rc;
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	rc = lc__room_open(&e->rooms, room, lc__now_ns(), &r);
	e->room_scan_at = 0;
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_dst_add(lc_engine_t *e, uint64_t room, const lc_dst_params_t *p)
{
	lc__room_t *r;
	lc__session_t *core = NULL;
	int rc = 0;
	uint64_t now = lc__now_ns();
	if (!e || !p || p->size < offsetof(lc_dst_params_t, state_slots))
		return -EINVAL;
	lc_dst_params_t d = {0};
	memcpy(&d, p, LC__MIN(p->size, sizeof(d)));
	pthread_mutex_lock(&e->lock);
	if ((d.page_count && !d.pages) || (d.dst_mask && !d.dst_local) ||
	    (!d.is_dummy && !d.session) || !d.required_dst_count) {
		rc = bad_input(e, -EINVAL, "destination parameters");
		goto out;
	}
	if (!d.is_dummy && !(core = lc__session_find(&e->sessions, d.session))) {
		rc = bad_input(e, -ENOENT, "destination on an unregistered session");
		goto out;
	}
	r = lc__room_find(&e->rooms, room);
	if (!r && (rc = lc__room_open(&e->rooms, room, now, &r)))
		goto out;
	if ((rc = lc__room_add_dst(r, &d, core ? core->owner : NULL))) {
		if (rc != LC_ERR_STATE || !lc__room_final(r))
			bad_input(e, rc, "room destination");
		goto out;
	}
	e->room_scan_at = 0;
	if (core && lc__session_blocked(core, now, e->ttl_ns)) {
		fail_room(e, r, LC_FAIL_SESSION_BLOCKED, "session %s is blocked: %s", core->name,
			  core->reason);
		goto out;
	}
	if (lc__room_fanin_done(r))
		lc__room_set_state(&e->rooms, r, LC_ROOM_BOOTSTRAPPED, 0, NULL, now);
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_metadata_set(lc_engine_t *e, uint64_t room, const void *data, size_t len)
{
	int rc = 0;
	if (!e || (len && !data))
		return -EINVAL;
	if (len > LC_METADATA_MAX)
		return -EMSGSIZE;
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = -ENOENT;
	else if (r->has_metadata)
		rc = -EEXIST;
	else {
		if (len) {
			r->metadata = malloc(len);
			if (!r->metadata) {
				rc = -ENOMEM;
				goto out;
			}
			memcpy(r->metadata, data, len);
		}
		r->metadata_len = len;
		r->has_metadata = true;
		try_finish(e, r);
		if (!on_engine_thread(e))
			wake(e);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_cancel(lc_engine_t *e, uint64_t room, const char *reason)
{
	int rc = 0;
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = -ENOENT;
	else if (lc__room_final(r))
		rc = LC_ERR_STATE;
	else
		fail_room(e, r, LC_FAIL_CANCELLED, "cancelled: %s", reason ? reason : "no reason");
	pthread_mutex_unlock(&e->lock);
	return rc;
}

static uint32_t landed_min(const lc__room_t *r)
{
	uint32_t m = UINT32_MAX;
	for (uint32_t i = 0; i < r->ndst; i++)
		if (!r->dst[i].dummy)
			m = LC__MIN(m, r->dst[i].landed);
	return m == UINT32_MAX ? 0 : m;
}

int lc_engine_room_status(lc_engine_t *e, uint64_t room, lc_room_info_t *out)
{
	int rc = 0;
	if (!e || !out || out->size < offsetof(lc_room_info_t, dst_count))
		return -EINVAL;
	lc_room_info_t info = {0};
	info.size = LC__MIN(out->size, sizeof(info));
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r) {
		rc = -ENOENT;
	} else {
		info.status = r->status;
		info.fail_reason = r->fail_reason;
		lc__reason(info.reason, sizeof(info.reason), "%s", r->reason);
		info.dst_count = r->ndst;
		info.required_dst_count = r->required;
		info.layers_landed = landed_min(r);
		/* Reported: a final room leaves the table (its notes are queued). */
		if (lc__room_final(r) && !r->tasks)
			lc__room_remove(&e->rooms, r);
		memcpy(out, &info, info.size);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_release(lc_engine_t *e, uint64_t room)
{
	int rc = 0;
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = -ENOENT;
	else {
		if (!lc__room_final(r))
			fail_room(e, r, LC_FAIL_CANCELLED, "released before it finished");
		lc__room_remove(&e->rooms, r);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_metrics(lc_engine_t *e, lc_engine_metrics_t *out)
{
	if (!e || !out || out->size < sizeof(size_t))
		return -EINVAL;
	lc_engine_metrics_t m;
	pthread_mutex_lock(&e->lock);
	m = e->m;
	const lc__room_metrics_t *rm = &e->rooms.metrics;
	m.rooms_opened = rm->opened;
	m.rooms_succeeded = rm->succeeded;
	m.rooms_failed = rm->failed;
	memcpy(m.rooms_failed_by_reason, rm->failed_by_reason, sizeof(m.rooms_failed_by_reason));
	m.rooms_expired_unread = rm->expired_unread;
	m.rooms_active = rm->opened - rm->succeeded - rm->failed;
	m.room_latency = rm->latency;
	pthread_mutex_unlock(&e->lock);
	size_t n = LC__MIN(out->size, sizeof(m));
	m.size = n;
	memcpy(out, &m, n);
	return 0;
}
