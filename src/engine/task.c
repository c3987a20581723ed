/*
 * Tasks and their per-destination requests (wreqs) as data: the id map
 * through which completions find their wreq, and freeing. Every other engine
 * file builds on these; this file calls none of them.
 */
#include <stdlib.h>

#include "engine/engine_int.h"

/* ---- the wreq id map: completions name their wreq by id ----------------- */

void lc__engine_idmap_put(lc_engine_t *e, lc__wreq_t *w)
{
	size_t b = w->id & (LC__IDMAP_N - 1);
	w->hnext = e->idmap[b];
	e->idmap[b] = w;
}

lc__wreq_t *lc__engine_wreq_find(lc_engine_t *e, uint64_t id)
{
	for (lc__wreq_t *w = e->idmap[id & (LC__IDMAP_N - 1)]; w; w = w->hnext)
		if (w->id == id)
			return w;
	return NULL;
}

static void idmap_del(lc_engine_t *e, lc__wreq_t *w)
{
	lc__wreq_t **pp = &e->idmap[w->id & (LC__IDMAP_N - 1)];
	while (*pp && *pp != w)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = w->hnext;
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

/* ---- batches and chunks (API) ------------------------------------------- */
