/*
 * Chunks become tasks (rule 1). The batch calls copy each chunk under the
 * lock; lc_engine_batch_end stamps a batch's chunks with the steps it
 * reserved and hands them to the inbox. The engine thread (or an inline
 * pass) takes the inbox: per task and destination it resolves the page
 * indices and coalesces the runs once ("wreq"), so that posting a layer
 * group later is a walk over ready-made runs. Intake never blocks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "engine/engine_int.h"

int lc_engine_batch_begin(lc_engine_t *e, int is_idle)
{
	int rc = 0;
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_batch_begin: engine is NULL");
	pthread_mutex_lock(&e->lock);
	if (e->batch_open)
		rc = lc__engine_bad_input(e, LC_ERR_STATE, "batch_begin inside an open batch");
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

/* A task holding a copy of the chunk's arrays (the caller's may go). */
static int task_from_chunk(lc_engine_t *e, const lc_chunk_t *ch, lc__task_t **out)
{
	bool oom = false;
	lc__task_t *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->room_id = ch->room;
	t->is_last = ch->is_last != 0;
	t->positions = ch->page_count;
	t->dst_index = ch->dst_index;
	t->page_tokens = ch->page_tokens;
	t->pages = dup_or_null(ch->pages, ch->page_count, sizeof(int64_t), &oom);
	t->src_mask = dup_or_null(ch->src_mask, ch->page_count, 1, &oom);
	t->src_local = dup_or_null(ch->src_local, ch->src_local_count, sizeof(int64_t), &oom);
	t->nsrc_local = ch->src_local_count;
	if (t->is_last) {
		t->state_slots =
			dup_or_null(ch->state_slots, ch->state_slot_count, sizeof(int64_t), &oom);
		t->nslots = t->state_slots ? ch->state_slot_count : 0;
	}
	if (oom) {
		lc__task_free(e, t);
		return -ENOMEM;
	}
	t->created_ns = lc__now_ns();
	*out = t;
	return 0;
}

/* An id of ids[0..n) outside [0, max) of buffer b: counted, logged as D
 * words a grant it refuses (page, index, pool size), -EINVAL. */
static int check_ids(lc_engine_t *e, const lc_chunk_t *ch, const char *label, const int64_t *ids,
		     size_t n, uint64_t max, uint32_t b, bool state)
{
	for (size_t i = 0; i < n; i++) {
		if (ids[i] >= 0 && (uint64_t)ids[i] < max)
			continue;
		char what[LC_REASON_MAX];
		lc__reason(what, sizeof(what),
			   "chunk for room %" PRIu64 ": %s id %" PRId64
			   " (index %zu) is outside buffer %u (%" PRIu64 " %s, ids 0..%" PRId64 ")",
			   ch->room, label, ids[i], i, b, max, state ? "slots" : "pages",
			   (int64_t)max - 1);
		return lc__engine_bad_input(e, -EINVAL, what);
	}
	return 0;
}

/* P's ids in the chunk against the layout's pools: an id past a buffer's
 * end would read another buffer's page, or memory that is no page at all. */
static int check_chunk_ids(lc_engine_t *e, const lc_chunk_t *ch)
{
	int rc = 0;
	if (e->pages_buf == UINT32_MAX) {
		/* no page buffer: the pages move nothing */
	} else if (ch->src_mask) {
		size_t marked = 0;
		for (size_t i = 0; i < ch->page_count; i++)
			marked += ch->src_mask[i] != 0;
		if (ch->src_local_count < marked) {
			char what[LC_REASON_MAX];
			lc__reason(what, sizeof(what),
				   "chunk for room %" PRIu64
				   ": src_mask marks %zu pages, src_local holds %zu",
				   ch->room, marked, ch->src_local_count);
			return lc__engine_bad_input(e, -EINVAL, what);
		}
		rc = check_ids(e, ch, "src_local page", ch->src_local, marked, e->max_pages,
			       e->pages_buf, false);
	} else {
		rc = check_ids(e, ch, "page", ch->pages, ch->page_count, e->max_pages, e->pages_buf,
			       false);
	}
	if (!rc && ch->is_last && e->slots_buf != UINT32_MAX)
		rc = check_ids(e, ch, "state slot", ch->state_slots, ch->state_slot_count,
			       e->max_slots, e->slots_buf, true);
	return rc;
}

/* Page and state-slot entries a held chunk names (p_held_pages_max). */
static uint64_t chunk_entries(const lc_chunk_t *ch)
{
	return (uint64_t)ch->page_count + (ch->is_last ? ch->state_slot_count : 0);
}

/* Whether room r, still Bootstrapping, may hold one more chunk: under
 * p_room_held_chunks_max and p_held_pages_max. -ENOSPC otherwise, counted
 * and logged once per 1,024 (a caller that keeps adding would flood it). */
static int held_check(lc_engine_t *e, const lc__room_t *r, const lc_chunk_t *ch)
{
	uint64_t n = chunk_entries(ch);
	bool room = r->held_chunks + 1 > e->held_chunks_max;
	if (!room && e->held_pages + n <= e->held_pages_max)
		return 0;
	uint64_t k = ++e->m.chunks_refused_held;
	lc__error_set(-ENOSPC,
		      "engine %s: chunk for room %llu refused: the room is Bootstrapping (D's "
		      "transfer info not in yet) and %s (%llu) is reached",
		      e->name, (unsigned long long)ch->room,
		      room ? "p_room_held_chunks_max" : "p_held_pages_max",
		      (unsigned long long)(room ? e->held_chunks_max : e->held_pages_max));
	if (k % 1024 == 1)
		LC__WARN("%s; %llu refused so far", lc_last_error(), (unsigned long long)k);
	return -ENOSPC;
}

/* Whether a chunk may be added now (*out: its room); an error code
 * otherwise. A room still Bootstrapping takes it, held (docs/engine.md). */
static int check_chunk(lc_engine_t *e, const lc_chunk_t *ch, lc__room_t **out)
{
	if (e->batch_open && e->batch_idle)
		return lc__engine_bad_input(e, LC_ERR_STATE, "chunk added to an idle batch");
	if ((ch->page_count && !ch->pages && !ch->src_mask) || (ch->src_mask && !ch->src_local) ||
	    (ch->state_slot_count && !ch->state_slots))
		return lc__engine_bad_input(e, -EINVAL, "chunk arrays");
	int rc = check_chunk_ids(e, ch);
	if (rc)
		return rc;
	lc__room_t *r = lc__room_find(&e->rooms, ch->room);
	if (!r)
		return lc__engine_bad_input(e, -ENOENT, "chunk for an unknown room");
	unsigned long long id = (unsigned long long)ch->room;
	if (r->status == LC_ROOM_FAILED) { /* failed meanwhile: not a caller bug, not counted */
		lc__error_set(LC_ERR_STATE,
			      "engine %s: room %llu has failed (%s): its chunks are refused",
			      e->name, id, r->reason);
		return LC_ERR_STATE;
	}
	if (lc__room_final(r)) {
		char what[160];
		snprintf(what, sizeof what, "chunk for room %llu, which is %s (it has ended)", id,
			 lc_room_status_name(r->status));
		return lc__engine_bad_input(e, LC_ERR_STATE, what);
	}
	*out = r;
	return lc__room_fanin_done(r) ? 0 : held_check(e, r, ch);
}

int lc_engine_chunk_add(lc_engine_t *e, const lc_chunk_t *c)
{
	lc__task_t *t;
	lc__room_t *r = NULL;
	int rc;
	lc_chunk_t ch;
	LC__PARAMS_TAKE("lc_engine_chunk_add", e, "engine", &ch, c, "chunk", lc_chunk_t, is_last);
	pthread_mutex_lock(&e->lock);
	if ((rc = check_chunk(e, &ch, &r)) || (rc = task_from_chunk(e, &ch, &t)))
		goto out;
	if (!lc__room_fanin_done(r)) { /* held until Bootstrapped: counted now */
		uint64_t n = chunk_entries(&ch);
		r->held_chunks++;
		r->held_pages += n;
		e->held_chunks++;
		e->held_pages += n;
	}
	if (e->batch_open) {
		*e->batch_tail = t;
		e->batch_tail = &t->next;
	} else {
		/* Outside a batch: after the forward, every layer is ready. */
		*e->inbox_tail = t;
		e->inbox_tail = &t->next;
		lc__engine_wake(e);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_batch_end(lc_engine_t *e)
{
	uint64_t cache, aux, now = lc__now_ns();
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_batch_end: engine is NULL");
	pthread_mutex_lock(&e->lock);
	if (!e->batch_open) {
		int rc = lc__engine_bad_input(e, LC_ERR_STATE, "batch_end without batch_begin");
		pthread_mutex_unlock(&e->lock);
		return rc;
	}
	e->batch_open = false;
	if (!e->batch_idle) {
		/* A word an outside producer moved past the last reservation
		 * is seen before this batch is stamped from the cursor. */
		lc__engine_check_steps(e, now, lc__steps_read(&e->steps, LC_STEP_CACHE),
				       lc__steps_read(&e->steps, LC_STEP_AUX));
		/* Reserve even when empty: the forward records every layer. */
		lc__steps_reserve(&e->steps, e->layout->layers, &cache, &aux);
		for (lc__task_t *t = e->batch_head; t; t = t->next) {
			t->gated = true;
			t->cache_begin = cache;
			t->aux_step = aux;
			t->created_ns = now;
		}
		if (e->batch_head) {
			*e->inbox_tail = e->batch_head;
			e->inbox_tail = e->batch_tail;
			lc__engine_wake(e);
		}
	}
	e->batch_head = NULL;
	e->batch_tail = &e->batch_head;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

/* ---- intake: resolve indices, coalesce runs once per task ---------------- */

/* The KV pages: the four partial-cache cases resolved in one pass, then
 * contiguous (src, dst) runs coalesced. A destination page list too short
 * for the chunk fails the room rather than truncate it. */
static int plan_pages(lc_engine_t *e, lc__task_t *t, lc__room_t *r, lc__room_dst_t *d,
		      lc__wreq_t *w)
{
	int64_t *src = NULL, *dst = NULL;
	ssize_t n;
	int rc = 0;
	if (t->positions) {
		src = malloc(t->positions * sizeof(int64_t));
		dst = malloc(t->positions * sizeof(int64_t));
		w->runs = malloc(t->positions * sizeof(lc__run_t));
		if (!src || !dst || !w->runs) {
			rc = -ENOMEM;
			goto out;
		}
	}
	size_t skip = 0, ranked = 0;
	uint64_t begin = t->dst_index;
	if (t->page_tokens) {
		/* Positions from token 0: D's prefix pages are D's already. */
		if (d->prefix_len % t->page_tokens) {
			rc = -EINVAL;
			lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT,
					     "%s's prefix of %llu tokens is not a whole number of "
					     "%llu-token pages",
					     d->session_name, (unsigned long long)d->prefix_len,
					     (unsigned long long)t->page_tokens);
			goto out;
		}
		uint64_t pp = d->prefix_len / t->page_tokens;
		skip = (size_t)LC__MIN(pp > begin ? pp - begin : 0, (uint64_t)t->positions);
		begin = begin > pp ? begin - pp : 0;
		for (size_t j = 0; t->src_mask && j < skip; j++)
			ranked += t->src_mask[j] != 0;
	}
	lc__resolve_in_t in = {
		.src = t->pages ? t->pages + skip : NULL,
		.src_mask = t->src_mask ? t->src_mask + skip : NULL,
		.src_local = t->src_local ? t->src_local + ranked : NULL,
		.src_local_count = t->nsrc_local - LC__MIN(ranked, t->nsrc_local),
		.positions = t->positions - skip,
		.dst = d->pages,
		.dst_count = d->page_count,
		.dst_begin = begin,
		.dst_mask = d->dst_mask,
		.dst_local = d->dst_local,
		.dst_local_count = d->dst_local_count,
	};
	n = in.positions ? lc__resolve(&in, src, dst) : 0;
	if (n < 0) {
		rc = (int)n;
		if (n == -ERANGE)
			lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT,
					     "%s holds %zu pages; the chunk needs [%llu, %llu)",
					     d->session_name, d->page_count,
					     (unsigned long long)begin,
					     (unsigned long long)(begin + in.positions));
		else
			lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT,
					     "partial-cache index out of range for %s",
					     d->session_name);
		goto out;
	}
	w->plan.nruns = lc__coalesce(src, dst, (size_t)n, w->runs);
	w->plan.pages = n;
out:
	free(src);
	free(dst);
	return rc;
}

/* The state (mamba) slots of the last chunk: equal counts pair up, one P
 * slot broadcasts to every D slot. */
static int plan_state_slots(lc_engine_t *e, lc__task_t *t, lc__room_t *r, lc__room_dst_t *d,
			    lc__wreq_t *w)
{
	size_t m = LC__MAX(t->nslots, d->state_slot_count);
	int64_t *src = malloc(m * sizeof(int64_t));
	int64_t *dst = malloc(m * sizeof(int64_t));
	ssize_t n;
	int rc = 0;
	w->state_runs = malloc(m * sizeof(lc__run_t));
	if (!src || !dst || !w->state_runs) {
		rc = -ENOMEM;
		goto out;
	}
	n = lc__pair_slots(t->state_slots, t->nslots, d->state_slots, d->state_slot_count, src,
			   dst);
	if (n < 0) {
		rc = (int)n;
		lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT,
				     "state slots: P has %zu, %s has %zu (only 1:n broadcasts)",
				     t->nslots, d->session_name, d->state_slot_count);
		goto out;
	}
	w->plan.nstate_runs = lc__coalesce(src, dst, (size_t)n, w->state_runs);
	w->plan.slots = n;
out:
	free(src);
	free(dst);
	return rc;
}

/* Plan task t toward destination di of room r into w, and give w its id.
 * A failure fails the room (a half-built w is freed with its task). */
static int build_wreq(lc_engine_t *e, lc__task_t *t, lc__room_t *r, uint32_t di, lc__wreq_t *w)
{
	lc__room_dst_t *d = &r->dst[di];
	lc__esession_t *s = d->session;
	int rc;

	w->task = t;
	w->dst = di;
	w->sess = s;
	rc = plan_pages(e, t, r, d, w);
	if (!rc && t->is_last && t->nslots && d->state_slot_count)
		rc = plan_state_slots(e, t, r, d, w);
	if (!rc) {
		w->plan.layout = e->layout;
		w->plan.xfer = s->xfer;
		w->plan.runs = w->runs;
		w->plan.state_runs = w->state_runs;
		w->gstate = calloc(t->ngroups, 1);
		w->posted_ns = calloc(t->ngroups, sizeof(uint64_t));
		if (!w->gstate || !w->posted_ns) {
			rc = -ENOMEM;
		} else {
			w->id = ++e->next_wreq_id;
			rc = lc__engine_idmap_put(e, w);
		}
	}
	if (rc == -ENOMEM)
		lc__engine_fail_room(e, r, LC_FAIL_NO_MEMORY, "out of memory planning the chunk");
	return rc;
}

/* Link task t to its room and the task list. */
static void task_link(lc_engine_t *e, lc__task_t *t, lc__room_t *r, uint64_t now)
{
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
}

static void intake_one(lc_engine_t *e, lc__task_t *t, uint64_t now)
{
	lc__room_t *r = lc__room_find(&e->rooms, t->room_id);
	uint32_t nreal = 0;

	if (!r || lc__room_final(r)) {
		lc__task_free(e, t);
		return;
	}
	if (!lc__room_fanin_done(r)) {
		/* Bootstrapping: parked on the room with the steps its batch
		 * reserved, until lc__engine_held_release hands it back. */
		t->parked = true;
		t->next = r->held;
		r->held = t;
		return;
	}
	task_link(e, t, r, now);
	for (uint32_t i = 0; i < r->ndst; i++)
		nreal += !r->dst[i].dummy;
	if (!nreal) {
		/* Dummy destinations only: nothing to write, nothing to wait for. */
		t->next_group = t->ngroups;
		t->aux_ready = true;
		return;
	}
	t->wreqs = calloc(nreal, sizeof(lc__wreq_t));
	if (!t->wreqs) {
		lc__engine_fail_room(e, r, LC_FAIL_NO_MEMORY, "out of memory taking a chunk");
		return;
	}
	lc__room_set_state(&e->rooms, r, LC_ROOM_TRANSFERRING, 0, NULL, now);
	for (uint32_t i = 0; i < r->ndst && !t->dead; i++) {
		lc__room_dst_t *d = &r->dst[i];
		lc__esession_t *s = d->session;
		if (d->dummy)
			continue;
		if (!s) {
			lc__engine_fail_room(e, r, LC_FAIL_SESSION_GONE, "session %s is gone",
					     d->session_name);
			return;
		}
		if (lc__session_blocked(s->core, now, e->ttl_ns)) {
			lc__engine_fail_room(e, r, LC_FAIL_SESSION_BLOCKED,
					     "session %s is blocked: %s", s->core->name,
					     s->core->reason);
			return;
		}
		/* Counted first, so that lc__task_free frees a half-built one. */
		if (build_wreq(e, t, r, i, &t->wreqs[t->nwreq++]))
			return;
	}
}

void lc__engine_intake(lc_engine_t *e, uint64_t now)
{
	lc__task_t *t = e->inbox;
	e->inbox = NULL;
	e->inbox_tail = &e->inbox;
	while (t) {
		lc__task_t *next = t->next;
		e->m.chunks_added += !t->parked; /* a held one came by once already */
		intake_one(e, t, now);
		t = next;
	}
}
