/*
 * The posting pass (rules 2, 3, 5, 7): both step counters are read once,
 * and every task posts every ready layer group to every destination, one
 * deferred batch per (task, destination, group); then each connection used
 * is rung once. The same pass checks the aux steps and the layer and
 * metadata deadlines and frees finished and dead tasks (the acknowledgement
 * deadline is each batch's own: its expiry arrives as a completion). It runs on the engine thread, or on a
 * recording thread that found the engine lock free (inline submission,
 * thread.c); either way under e->lock.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/checksum.h"
#include "engine/engine_int.h"
#include "transport/generic.h"

/* Whether every layout buffer lies inside one registered region of the
 * context, as of the region table's generation (looked up again when
 * regions change). Then the engine's writes, whose sources lie in its
 * buffers by construction, take the trusted post: no per-write lookup. */
static bool sources_resolved(lc_engine_t *e)
{
	uint64_t gen = atomic_load(&e->ctx->regions.gen) + 1; /* 0: never */
	if (gen == e->src_gen)
		return e->src_ok;
	bool ok = true, device = false;
	for (uint32_t i = 0; i < e->layout->nbuf && ok; i++) {
		const lc_buffer_t *b = &e->layout->bufs[i];
		lc__region_info_t ri;
		ok = !lc__source_find(e->ctx, b->base, b->length, &ri);
		device |= ok && !LC__KIND_IS_HOST(ri.kind);
	}
	e->src_gen = gen;
	e->src_ok = ok;
	e->src_device = device;
	return ok;
}

/* Post v (n writes, malloc'd; taken) on conn. */
static int post_writes(lc_engine_t *e, lc_conn_t *conn, lc_write_t *v, size_t n, uint64_t bytes,
		       const lc_batch_params_t *bp, uint64_t *bid)
{
	if (sources_resolved(e))
		return lc__batch_post_trusted(conn, v, n, bytes, e->src_device, bp, bid);
	/* A buffer over several regions, or not registered: the checked post
	 * finds each write's region, or the reason to fail. */
	int rc = lc_batch_post(conn, v, n, bp, bid);
	free(v);
	return rc;
}

/* Group g holds nothing for this destination: it counts as acknowledged. */
static void skip_group(lc__task_t *t, lc__wreq_t *w, uint32_t g)
{
	w->gstate[g] = LC__GROUP_ACKED;
	w->acked++;
	while (w->lead < t->ngroups && w->gstate[w->lead] == LC__GROUP_ACKED)
		w->lead++;
}

/* Post layers [b, end) of w as group g. LC_BATCH_DEFER: the connection is
 * rung once per pass, in flush_posts, not once per room. Returns false if
 * the room failed. */
static bool post_wreq(lc_engine_t *e, lc__wreq_t *w, uint32_t g, uint32_t b, uint32_t end,
		      size_t cap, uint64_t now)
{
	lc__room_t *r = w->task->room;
	uint64_t bytes = 0, bid = 0;
	/* Emitted straight into what becomes the batch's array. */
	lc_write_t *v = malloc(cap * sizeof(*v));
	if (!v) {
		lc__engine_fail_room(e, r, LC_FAIL_TRANSFER, "out of memory planning layers %u-%u",
				     b, end - 1);
		return false;
	}
	size_t n = lc__plan_emit(&w->plan, b, end, v, &bytes);
	if (e->checksum) { /* the bytes as they are now, where D will hold them */
		lc__room_dst_t *d = &r->dst[w->dst];
		for (size_t i = 0; i < n; i++)
			d->sum = lc__sum_add(d->sum,
					     lc__sum_range(v[i].remote_region, v[i].remote_offset,
							   v[i].local, v[i].length));
	}
	lc_batch_params_t bp = {
		.size = sizeof(bp),
		.room = r->id,
		.tag = g,
		/* The batch's deadline is the acknowledgement timeout: its
		 * expiry comes back as a completion (finish.c). */
		.timeout_ms = (int64_t)LC__MAX(e->transfer_ns / 1000000, 1),
		.user_data = w->id,
		.flags = LC_BATCH_DEFER,
	};
	int rc = post_writes(e, w->sess->conn, v, n, bytes, &bp, &bid);
	if (rc) {
		lc__session_fail(w->sess->core, now, lc_strerror(rc));
		e->m.session_failures++;
		lc__engine_fail_room(e, r, LC_FAIL_TRANSFER, "posting layers %u-%u to %s: %s", b,
				     end - 1, w->sess->core->name, lc_strerror(rc));
		return false;
	}
	if (!w->sess->to_flush) {
		w->sess->to_flush = true;
		w->sess->flush_next = e->to_flush;
		e->to_flush = w->sess;
	}
	w->gstate[g] = LC__GROUP_POSTED;
	w->posted_ns[g] = now;
	w->outstanding++;
	e->m.batches_posted++;
	e->m.writes_posted += n;
	e->m.bytes_posted += bytes;
	return true;
}

/* Post group g of task t to every destination. Returns false if the room
 * failed. */
static bool post_group(lc_engine_t *e, lc__task_t *t, uint32_t g, uint64_t now)
{
	uint32_t b, end;
	lc__group_range(e->layout->layers, e->interval, g, &b, &end);
	for (uint32_t i = 0; i < t->nwreq; i++) {
		lc__wreq_t *w = &t->wreqs[i];
		size_t cap = lc__plan_count(&w->plan, b, end);
		if (!cap)
			skip_group(t, w, g);
		else if (!post_wreq(e, w, g, b, end, cap, now))
			return false;
	}
	lc__engine_note_landed(e, t);
	return true;
}

/* A group posted in this pass, for the step-to-post histogram once its
 * connection has been rung. */
static void log_post(lc_engine_t *e, uint64_t room, uint32_t g, uint64_t ready_ns)
{
	if (e->npostlog == e->postlog_cap) {
		size_t cap = e->postlog_cap ? 2 * e->postlog_cap : 64;
		lc__postlog_t *v = realloc(e->postlog, cap * sizeof(*v));
		if (!v)
			return; /* a sample lost, nothing else */
		e->postlog = v;
		e->postlog_cap = cap;
	}
	e->postlog[e->npostlog++] = (lc__postlog_t){room, g, ready_ns};
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
	bool inline_pass = !lc__engine_on_thread(e);
	while (e->to_flush) {
		lc__esession_t *s = e->to_flush;
		e->to_flush = s->flush_next;
		s->flush_next = NULL;
		s->to_flush = false;
		lc_conn_flush(s->conn);
	}
	for (size_t i = 0; i < e->npostlog; i++) {
		lc__postlog_t *p = &e->postlog[i];
		uint64_t ready_ns = p->ready_ns && p->ready_ns <= post_ns ? p->ready_ns : now;
		lc__hist_add(&e->m.step_to_post, post_ns - ready_ns);
		if (e->post_hook)
			e->post_hook(e->post_hook_arg, p->room, p->group, ready_ns, post_ns,
				     e->m.loop_iterations, inline_pass);
	}
	e->npostlog = 0;
}

/* Post the groups of t whose last layer's step is ready (all of them for an
 * ungated task), then note whether its aux step is. */
static void post_ready_groups(lc_engine_t *e, lc__task_t *t, uint64_t cache, uint64_t aux,
			      uint64_t now)
{
	lc__room_t *r = t->room;
	while (t->next_group < t->ngroups) {
		uint32_t b, end, g = t->next_group;
		lc__group_range(e->layout->layers, e->interval, g, &b, &end);
		uint64_t step = lc__step_add(t->cache_begin, end - 1);
		if (t->gated && !lc__step_ready(cache, step))
			break;
		if (!post_group(e, t, g, now))
			break;
		t->next_group++;
		log_post(e, r->id, g, t->gated ? lc__steps_record_time(&e->steps, step) : 0);
	}
	if (!t->dead && t->next_group == t->ngroups && t->is_last && !r->last_ready_ns) {
		/* The metadata and aux deadlines run from here; the room scan
		 * must learn the new one. */
		r->last_ready_ns = now;
		e->room_scan_at = 0;
	}
	if (!t->dead && !t->aux_ready)
		t->aux_ready = !t->gated || !t->is_last || lc__step_ready(aux, t->aux_step);
}

static bool task_done(const lc__task_t *t)
{
	bool acked = t->next_group == t->ngroups;
	for (uint32_t i = 0; i < t->nwreq && acked; i++)
		acked = t->wreqs[i].acked == t->ngroups;
	return acked && t->aux_ready;
}

/* Free a finished (unlinked) task; its room may now succeed. */
static void retire_task(lc_engine_t *e, lc__task_t *t)
{
	lc__room_t *r = t->room;
	r->tasks--;
	if (r->last_task == t)
		r->last_task = NULL;
	lc__task_free(e, t);
	if (r->last_task && r->tasks == 1)
		lc__engine_note_landed(e, r->last_task);
	lc__engine_try_finish(e, r);
}

/* Layer readiness: the next group's last step within layer_timeout_ms of
 * the batch. */
static void check_layer_deadline(lc_engine_t *e, lc__task_t *t, uint64_t now, uint64_t *next)
{
	uint64_t dl = t->created_ns + e->layer_ns;
	if (now < dl) {
		lc__earliest(next, dl);
		return;
	}
	uint32_t b, end;
	lc__group_range(e->layout->layers, e->interval, t->next_group, &b, &end);
	lc__engine_fail_room(e, t->room, LC_FAIL_LAYER_TIMEOUT,
			     "layer %u (step %llu) not ready within %llu ms", end - 1,
			     (unsigned long long)lc__step_add(t->cache_begin, end - 1),
			     (unsigned long long)(e->layer_ns / 1000000));
}

/* Aux step: within metadata_timeout_ms of the last layer being ready. */
static void check_aux_deadline(lc_engine_t *e, lc__task_t *t, uint64_t now, uint64_t *next)
{
	uint64_t dl = t->room->last_ready_ns + e->metadata_ns;
	if (now >= dl)
		lc__engine_fail_room(e, t->room, LC_FAIL_METADATA_TIMEOUT,
				     "aux step %llu not recorded within %llu ms",
				     (unsigned long long)t->aux_step,
				     (unsigned long long)(e->metadata_ns / 1000000));
	else
		lc__earliest(next, dl);
}

uint64_t lc__engine_progress(lc_engine_t *e, uint64_t now, bool *waiting)
{
	uint64_t cache = lc__steps_read(&e->steps, LC_STEP_CACHE);
	uint64_t aux = lc__steps_read(&e->steps, LC_STEP_AUX);
	/* Before the values read are acted on: a word beyond its reservation
	 * fails the rooms it would have made ready. */
	uint64_t next = lc__engine_check_steps(e, now, cache, aux), pending = 0, inflight = 0;
	e->seen_cache = cache; /* what the engine thread may sleep on */
	e->seen_aux = aux;
	lc__task_t **pp = &e->tasks;
	*waiting = false;

	while (*pp) {
		lc__task_t *t = *pp;
		if (!t->dead)
			post_ready_groups(e, t, cache, aux, now);
		if (!t->dead && task_done(t)) {
			*pp = t->next;
			retire_task(e, t);
			continue;
		}
		if (!t->dead) {
			if (t->next_group < t->ngroups) {
				pending++;
				if (t->gated) {
					*waiting = true;
					check_layer_deadline(e, t, now, &next);
				}
			} else {
				inflight++;
			}
			if (!t->dead && !t->aux_ready && t->next_group == t->ngroups) {
				*waiting = true;
				check_aux_deadline(e, t, now, &next);
			}
		}
		if (t->dead) {
			*pp = t->next;
			lc__task_free(e, t);
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
