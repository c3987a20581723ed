/*
 * Tasks and their per-destination requests (wreqs) as data: the id map
 * through which completions find their wreq, and freeing. Every other engine
 * file builds on these; this file calls none of them.
 */
#include <stdlib.h>

#include "engine/engine_int.h"

/* ---- the wreq id map: completions name their wreq by id ----------------- */

int lc__engine_idmap_put(lc_engine_t *e, lc__wreq_t *w)
{
	return lc__idmap_put(&e->wreq_ids, w->id, w);
}

lc__wreq_t *lc__engine_wreq_find(lc_engine_t *e, uint64_t id)
{
	return lc__idmap_get(&e->wreq_ids, id);
}

static void idmap_del(lc_engine_t *e, lc__wreq_t *w)
{
	if (lc__idmap_get(&e->wreq_ids, w->id) == w)
		lc__idmap_del(&e->wreq_ids, w->id);
}

void lc__task_free(lc_engine_t *e, lc__task_t *t)
{
	for (uint32_t i = 0; i < t->nwreq; i++) {
		lc__wreq_t *w = &t->wreqs[i];
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

void lc__task_list_free(lc_engine_t *e, lc__task_t *t)
{
	while (t) {
		lc__task_t *next = t->next;
		lc__task_free(e, t);
		t = next;
	}
}

/* ---- chunks held for a room still Bootstrapping ------------------------ */

void lc__engine_held_release(lc_engine_t *e, lc__room_t *r, bool to_inbox)
{
	lc__task_t *t = r->held, *oldest = NULL, *newest = t;
	e->held_chunks -= LC__MIN(e->held_chunks, r->held_chunks);
	e->held_pages -= LC__MIN(e->held_pages, r->held_pages);
	r->held = NULL;
	r->held_chunks = 0;
	r->held_pages = 0;
	if (!to_inbox) {
		lc__task_list_free(e, t);
		return;
	}
	while (t) { /* parked newest first: reverse */
		lc__task_t *next = t->next;
		t->next = oldest;
		oldest = t;
		t = next;
	}
	if (!oldest)
		return;
	newest->next = e->inbox;
	if (!e->inbox)
		e->inbox_tail = &newest->next;
	e->inbox = oldest;
	if (!lc__engine_on_thread(e))
		lc__engine_wake(e);
}

/* ---- batches and chunks (API) ------------------------------------------- */
