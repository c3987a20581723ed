/*
 * How rooms end. Completions from the engine's queue are matched to their
 * wreq and group (rule 4); a room succeeds once nothing is left to wait for,
 * and fails through one idempotent function, whatever the cause (a failed
 * or expired batch, a post error, a deadline, a blocked session, bad input,
 * cancel). Room-level deadlines and the retention of finished rooms are
 * checked here too (rule 7). What the callbacks must say is queued as notes
 * under the lock and delivered with the lock dropped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"

/* ---- notes: callbacks queued under the lock ------------------------------ */

static lc__note_t *note_new(lc_engine_t *e)
{
	if (e->nnotes == e->notes_cap) {
		size_t cap = e->notes_cap ? 2 * e->notes_cap : 32;
		lc__note_t *n = realloc(e->notes, cap * sizeof(*n));
		if (!n)
			return NULL;
		e->notes = n;
		e->notes_cap = cap;
	}
	lc__note_t *n = &e->notes[e->nnotes++];
	memset(n, 0, sizeof(*n));
	return n;
}

/* The final status of room r for destination d; Success carries a copy of
 * the metadata blob. */
static void note_status(lc__note_t *n, const lc__room_t *r, const lc__room_dst_t *d,
			bool e_checksum)
{
	n->kind = LC__NOTE_STATUS;
	n->room = r->id;
	n->session = d->session_name ? strdup(d->session_name) : NULL;
	n->status = r->status;
	n->has_sum = e_checksum && r->status == LC_ROOM_SUCCESS;
	n->sum = d->sum;
	n->reason = r->status == LC_ROOM_FAILED ? r->fail_reason : LC_FAIL_NONE;
	lc__reason(n->text, sizeof(n->text), "%s", r->status == LC_ROOM_FAILED ? r->reason : "");
	if (r->status == LC_ROOM_SUCCESS && r->metadata_len) {
		n->meta = malloc(r->metadata_len);
		if (n->meta) {
			memcpy(n->meta, r->metadata, r->metadata_len);
			n->meta_len = r->metadata_len;
		} else {
			/* A Success without its metadata (the first token) would be
			 * silently wrong at D: tell the destination Failed. */
			LC__ERROR("room %llu: out of memory copying its metadata for %s",
				  (unsigned long long)r->id, d->session_name);
			n->status = LC_ROOM_FAILED;
			n->has_sum = false;
			n->reason = LC_FAIL_TRANSFER;
			lc__reason(n->text, sizeof(n->text),
				   "P ran out of memory copying the room's metadata");
		}
	}
}

/* Queue the final status for every non-dummy destination not yet told. */
static void queue_status(lc_engine_t *e, lc__room_t *r)
{
	for (uint32_t i = 0; i < r->ndst; i++) {
		lc__room_dst_t *d = &r->dst[i];
		if (d->dummy || d->notified)
			continue;
		d->notified = true;
		lc__note_t *n = note_new(e);
		if (!n) {
			LC__ERROR("room %llu: out of memory queueing the status for %s",
				  (unsigned long long)r->id, d->session_name);
			continue;
		}
		note_status(n, r, d, e->checksum);
	}
	r->notify_pending = false;
	if (!lc__engine_on_thread(e))
		lc__engine_wake(e);
}

void lc__engine_note_landed(lc_engine_t *e, lc__task_t *t)
{
	lc__room_t *r = t->room;
	/* A room's layers have landed only once every earlier chunk is
	 * acknowledged: counted on the last chunk's task, when it is alone. */
	if (!t->is_last || r->tasks != 1 || !e->params.landed_cb)
		return;
	for (uint32_t i = 0; i < t->nwreq; i++) {
		lc__wreq_t *w = &t->wreqs[i];
		uint32_t b, end;
		if (!w->lead)
			continue;
		lc__group_range(e->layout->layers, e->interval, w->lead - 1, &b, &end);
		lc__room_dst_t *d = &r->dst[w->dst];
		if (end <= d->landed)
			continue;
		d->landed = end;
		lc__note_t *n = note_new(e);
		if (n) {
			n->kind = LC__NOTE_LANDED;
			n->room = r->id;
			n->session = d->session_name ? strdup(d->session_name) : NULL;
			n->layers = end;
		}
	}
}

void lc__engine_deliver_notes(lc_engine_t *e)
{
	while (e->nnotes) {
		lc__note_t *notes = e->notes;
		size_t n = e->nnotes;
		lc__notes_hook_fn hook = e->notes_hook;
		void *hook_arg = e->notes_hook_arg;
		e->notes = NULL;
		e->nnotes = e->notes_cap = 0;
		pthread_mutex_unlock(&e->lock);
		for (size_t i = 0; i < n; i++) {
			lc__note_t *x = &notes[i];
			const char *s = x->session ? x->session : "";
			if (x->kind == LC__NOTE_STATUS && e->params.final_cb)
				e->params.final_cb(
					e->params.final_arg,
					&(lc_room_final_t){
						.size = sizeof(lc_room_final_t),
						.room = x->room,
						.session = s,
						.status = x->status,
						.fail_reason = x->reason,
						.reason_text = x->text,
						.metadata = x->meta,
						.metadata_len = x->meta_len,
						.flags = x->has_sum ? LC_FINAL_HAS_CHECKSUM : 0,
						.checksum = x->sum});
			else if (x->kind == LC__NOTE_LANDED && e->params.landed_cb)
				e->params.landed_cb(e->params.landed_arg, x->room, s, x->layers);
			free(x->session);
			free(x->meta);
		}
		free(notes);
		if (hook)
			hook(hook_arg);
		pthread_mutex_lock(&e->lock);
	}
}

/* ---- success and failure ------------------------------------------------- */

/* Stop everything a room has in flight: its tasks die, its posted batches
 * are cancelled at the data plane, the chunks it held while Bootstrapping
 * are dropped. */
static void kill_tasks(lc_engine_t *e, lc__room_t *r)
{
	lc__engine_held_release(e, r, false);
	for (lc__task_t *t = e->tasks; t; t = t->next) {
		if (t->dead || t->room != r)
			continue;
		t->dead = true;
		for (uint32_t i = 0; i < t->nwreq; i++) {
			lc__wreq_t *w = &t->wreqs[i];
			if (w->outstanding && w->sess && w->sess->conn)
				lc_conn_room_cancel(w->sess->conn, r->id);
		}
	}
	r->tasks = 0;
	r->last_task = NULL;
}

/* The room ended: its destinations no longer count toward their sessions'
 * quotas (p_session_rooms_max, p_session_descs_max) nor the engine's
 * (p_descs_max), and the page lists D sent go: a finished room is kept for
 * its status only. By name: a session removed since is gone. */
static void release_quota(lc_engine_t *e, lc__room_t *r)
{
	for (uint32_t i = 0; i < r->ndst; i++) {
		lc__room_dst_t *d = &r->dst[i];
		lc__session_t *s = d->quota || d->descs
					   ? lc__session_find(&e->sessions, d->session_name)
					   : NULL;
		if (d->quota && s && s->rooms_live)
			s->rooms_live--;
		if (s)
			s->descs_live -= LC__MIN(s->descs_live, d->descs);
		e->descs_live -= LC__MIN(e->descs_live, d->descs);
		d->quota = false;
		d->descs = 0;
		free(d->pages);
		free(d->state_slots);
		free(d->dst_mask);
		free(d->dst_local);
		d->pages = d->state_slots = d->dst_local = NULL;
		d->dst_mask = NULL;
		d->page_count = d->state_slot_count = d->dst_local_count = 0;
	}
}

void lc__engine_fail_room(lc_engine_t *e, lc__room_t *r, int reason, const char *fmt, ...)
{
	char text[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(text, sizeof text, fmt, ap);
	va_end(ap);
	if (lc__room_set_state(&e->rooms, r, LC_ROOM_FAILED, reason, text, lc__now_ns()) != 1)
		return; /* already final: told once */
	release_quota(e, r);
	kill_tasks(e, r);
	queue_status(e, r);
	e->room_scan_at = 0;
}

/* Dummy-only rooms have nobody to give metadata to. */
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
void lc__engine_try_finish(lc_engine_t *e, lc__room_t *r)
{
	if (lc__room_final(r) || !lc__room_fanin_done(r) || !r->last_chunk_taken || r->tasks)
		return;
	if (needs_metadata(r) && !r->has_metadata)
		return;
	if (lc__room_set_state(&e->rooms, r, LC_ROOM_SUCCESS, LC_FAIL_NONE, NULL, lc__now_ns()) ==
	    1) {
		for (uint32_t i = 0; i < r->ndst; i++)
			r->dst[i].landed = e->layout->layers;
		release_quota(e, r);
		queue_status(e, r);
	}
	e->room_scan_at = 0;
}

/* ---- completions (rule 4) ------------------------------------------------ */

/* A write D refused (late, revoked, outside its grant or region) or one
 * cancelled here says nothing about the link or the peer: it fails its room
 * only. Blocking the session for it would lock out a healthy D (rule 5). */
static bool refused_by_d(int status)
{
	return status == LC_ERR_CANCELLED || status == LC_ERR_GRANT || status == LC_ERR_REGION ||
	       status == LC_ERR_OUT_OF_REGION;
}

/* A batch past its deadline (transfer_timeout_ms from its post): the
 * destination did not acknowledge the group in time. */
static void on_ack_timeout(lc_engine_t *e, lc__wreq_t *w, uint32_t g, uint64_t now)
{
	lc__session_fail(w->sess->core, now, "acknowledgement timeout");
	e->m.session_failures++;
	lc__engine_fail_room(e, w->task->room, LC_FAIL_TRANSFER_TIMEOUT,
			     "layer group %u not acknowledged by %s within %llu ms", g,
			     w->sess->core->name, (unsigned long long)(e->transfer_ns / 1000000));
}

/* A group counts only when the data plane reports it applied at D. */
static void on_completion(lc_engine_t *e, const lc_completion_t *c, uint64_t now)
{
	lc__wreq_t *w = lc__engine_wreq_find(e, c->user_data);
	if (!w || w->task->dead)
		return; /* a cancelled room's batch, or a stale id */
	lc__task_t *t = w->task;
	lc__room_t *r = t->room;
	uint32_t g = c->tag;
	if (g >= t->ngroups || w->gstate[g] != LC__GROUP_POSTED) {
		LC__WARN("room %llu: unexpected completion for group %u", (unsigned long long)r->id,
			 g);
		return;
	}
	w->outstanding--;
	if (c->status == 0) {
		w->gstate[g] = LC__GROUP_ACKED;
		w->acked++;
		e->m.bytes_acked += c->bytes;
		lc__hist_add(&e->m.group_ack_latency, now - w->posted_ns[g]);
		while (w->lead < t->ngroups && w->gstate[w->lead] == LC__GROUP_ACKED)
			w->lead++;
		lc__engine_note_landed(e, t);
		return;
	}
	if (c->status == LC_ERR_EXPIRED) { /* counted as a timeout, as before */
		on_ack_timeout(e, w, g, now);
		return;
	}
	e->m.batches_failed++;
	if (!refused_by_d(c->status)) {
		const char *why = c->reason[0] ? c->reason : lc_strerror(c->status);
		lc__session_fail(w->sess->core, now, why);
		e->m.session_failures++;
	}
	lc__engine_fail_room(e, r, LC_FAIL_TRANSFER, "layer group %u to %s: %s%s%s", g,
			     w->sess->core->name, lc_strerror(c->status), c->reason[0] ? ": " : "",
			     c->reason);
}

/* At most one poll's worth per pass: a transport that keeps delivering
 * acknowledgements must not keep the pass from posting the groups a step
 * record made ready meanwhile. What is left makes lc__cq_arm() refuse, so
 * the engine runs another pass instead of sleeping. */
void lc__engine_drain_cq(lc_engine_t *e, uint64_t now)
{
	lc_completion_t c[LC__CQ_BATCH];
	int n = lc_cq_poll(e->cq, c, (int)LC__ARRAY_SIZE(c));
	for (int i = 0; i < n; i++)
		on_completion(e, &c[i], now);
}

/* ---- room deadlines and retention (rule 7) ------------------------------- */

/* Finished and never read: dropped after waiting_timeout_ms. */
static void retire_unread(lc_engine_t *e, lc__room_t *r, uint64_t now, uint64_t *next)
{
	uint64_t dl = r->final_ns + e->waiting_ns;
	if (now >= dl) {
		LC__INFO("room %llu: final status never read; dropped", (unsigned long long)r->id);
		e->rooms.metrics.expired_unread++;
		lc__room_remove(&e->rooms, r);
	} else {
		lc__earliest(next, dl);
	}
}

/* Fan-in: every destination within bootstrap_timeout_ms of the open. */
static void check_bootstrap(lc_engine_t *e, lc__room_t *r, uint64_t now, uint64_t *next)
{
	uint64_t dl = r->opened_ns + e->bootstrap_ns;
	if (now >= dl)
		lc__engine_fail_room(e, r, LC_FAIL_BOOTSTRAP_TIMEOUT,
				     "%u of %u destinations within %llu ms", r->ndst, r->required,
				     (unsigned long long)(e->bootstrap_ns / 1000000));
	else
		lc__earliest(next, dl);
}

/* A Bootstrapped room: its metadata within metadata_timeout_ms of the last
 * layer being ready, and the whole room within waiting_timeout_ms. */
static void check_bootstrapped(lc_engine_t *e, lc__room_t *r, uint64_t now, uint64_t *next)
{
	uint64_t dl = r->bootstrapped_ns + e->waiting_ns;
	if (r->last_ready_ns && !r->has_metadata && needs_metadata(r)) {
		uint64_t md = r->last_ready_ns + e->metadata_ns;
		if (now >= md) {
			lc__engine_fail_room(e, r, LC_FAIL_METADATA_TIMEOUT,
					     "metadata not published within %llu ms",
					     (unsigned long long)(e->metadata_ns / 1000000));
			return;
		}
		lc__earliest(next, md);
	}
	if (now >= dl)
		lc__engine_fail_room(e, r, LC_FAIL_WAITING_TIMEOUT,
				     "not finished within %llu ms of bootstrap",
				     (unsigned long long)(e->waiting_ns / 1000000));
	else
		lc__earliest(next, dl);
}

uint64_t lc__engine_scan_rooms(lc_engine_t *e, uint64_t now)
{
	uint64_t next = 0;
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(&e->rooms, &it));) { /* r may be removed */
		if (lc__room_final(r))
			retire_unread(e, r, now, &next);
		else if (!lc__room_fanin_done(r))
			check_bootstrap(e, r, now, &next);
		else
			check_bootstrapped(e, r, now, &next);
	}
	return next;
}
