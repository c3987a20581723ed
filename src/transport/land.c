/* The seam's pipeline for device destinations (land.h). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "transport/land.h"

void lc__bounces_init(lc__bounces_t *p, void (*kick)(void *), void *kick_arg)
{
	*p = (lc__bounces_t){.kick = kick, .kick_arg = kick_arg};
	for (int i = 0; i < LC__BOUNCE_N; i++) {
		p->b[i].pool = p;
		atomic_init(&p->b[i].state, LC__BOUNCE_FREE);
		atomic_init(&p->b[i].in_cb, 0);
	}
}

/* The copy engine's thread: a slot's copy completed. */
static void bounce_copied(void *arg, int status)
{
	lc__bounce_t *s = arg;
	atomic_store(&s->in_cb, 1);
	s->status = status;
	atomic_store(&s->state, LC__BOUNCE_DONE);
	s->pool->kick(s->pool->kick_arg);
	atomic_store(&s->in_cb, 0);
}

static void bounce_free(lc__bounce_t *s)
{
	s->stream = NULL;
	atomic_store(&s->state, LC__BOUNCE_FREE);
}

lc__bounce_t *lc__bounce_get(lc__bounces_t *p, void *stream, uint64_t seq, uint64_t at, bool *nomem)
{
	*nomem = false;
	if (!p->made) {
		for (int i = 0; i < LC__BOUNCE_N; i++) {
			if (!p->b[i].buf && !(p->b[i].buf = malloc(LC__BOUNCE_LEN))) {
				*nomem = true;
				return NULL;
			}
		}
		p->made = true;
	}
	for (int i = 0; i < LC__BOUNCE_N; i++) {
		lc__bounce_t *s = &p->b[i];
		if (atomic_load(&s->state) != LC__BOUNCE_FREE)
			continue;
		s->stream = stream;
		s->seq = seq;
		s->at = at;
		s->fill = 0;
		s->status = 0;
		atomic_store(&s->state, LC__BOUNCE_FILLING);
		return s;
	}
	return NULL;
}

int lc__bounce_flush(lc__bounce_t *s, const lc__land_t *l)
{
	if (!l || !s->fill) {
		bounce_free(s);
		return 0;
	}
	atomic_store(&s->state, LC__BOUNCE_COPYING);
	int rc = lc__land_copy_async(l, s->at, s->buf, s->fill, bounce_copied, s);
	if (!rc)
		return 1;
	bounce_free(s);
	return rc;
}

bool lc__bounces_reap(lc__bounces_t *p, void (*reaped)(void *stream, uint64_t seq, int status),
		      bool *free_slot)
{
	bool freed = false;
	*free_slot = false;
	for (int i = 0; p->made && i < LC__BOUNCE_N; i++) {
		lc__bounce_t *s = &p->b[i];
		int st = atomic_load(&s->state);
		*free_slot |= st == LC__BOUNCE_FREE;
		if (st != LC__BOUNCE_DONE)
			continue;
		void *stream = s->stream;
		int status = s->status;
		uint64_t seq = s->seq;
		bounce_free(s);
		freed = true;
		if (stream)
			reaped(stream, seq, status);
	}
	return freed;
}

bool lc__bounces_quiesce(lc__bounces_t *p, void *stream, uint64_t until_ns)
{
	bool busy = true;
	while (busy) {
		busy = false;
		for (int i = 0; p->made && i < LC__BOUNCE_N; i++) {
			lc__bounce_t *s = &p->b[i];
			int st = atomic_load(&s->state);
			if (stream && s->stream != stream)
				continue;
			if (st == LC__BOUNCE_COPYING || atomic_load(&s->in_cb)) {
				busy = true;
				continue;
			}
			if (st != LC__BOUNCE_FREE) /* FILLING or DONE */
				bounce_free(s);
		}
		if (busy && lc__now_ns() >= until_ns)
			return false;
		if (busy)
			nanosleep(&(struct timespec){0, 100000}, NULL);
	}
	return true;
}

void lc__bounces_forget(lc__bounces_t *p, void *stream)
{
	for (int i = 0; i < LC__BOUNCE_N; i++)
		if (p->b[i].stream == stream)
			p->b[i].stream = NULL;
}

void lc__bounces_fini(lc__bounces_t *p)
{
	for (int i = 0; i < LC__BOUNCE_N; i++) {
		free(p->b[i].buf);
		p->b[i].buf = NULL;
	}
	p->made = false;
}

/* ---- the in-order queue ---- */

int lc__landq_make(lc__landq_t *q, uint32_t cap)
{
	if (q->e)
		return 0;
	if (!(q->e = malloc(cap * sizeof *q->e)))
		return -ENOMEM;
	q->cap = cap;
	q->head = q->n = 0;
	return 0;
}

void lc__landq_push(lc__landq_t *q, const lc__landq_ent_t *e)
{
	*lc__landq_at(q, q->n++) = *e;
}

bool lc__landq_reaped(lc__landq_t *q, uint64_t seq, int status)
{
	for (uint32_t k = 0; k < q->n; k++) {
		lc__landq_ent_t *e = lc__landq_at(q, k);
		if (e->seq != seq)
			continue;
		e->inflight--;
		if (status && !e->failed) {
			LC__WARN("room %llu: device copy into region %u failed: %s",
				 (unsigned long long)e->land.room, e->land.region,
				 lc_strerror(status));
			e->failed = true;
		}
		return true;
	}
	return false;
}

bool lc__landq_pop(lc__landq_t *q, lc__landq_ent_t *out)
{
	if (!q->n || lc__landq_at(q, 0)->inflight)
		return false;
	lc__landq_ent_t *e = lc__landq_at(q, 0);
	if (e->land.g)
		lc__land_done(&e->land, !e->failed && !e->code);
	*out = *e;
	q->head = (q->head + 1) % q->cap;
	q->n--;
	return true;
}

void lc__landq_fini(lc__landq_t *q, bool quiet)
{
	for (uint32_t k = 0; k < q->n; k++) {
		lc__landq_ent_t *e = lc__landq_at(q, k);
		if (e->land.g && (quiet || !e->inflight))
			lc__land_done(&e->land, false);
	}
	free(q->e);
	*q = (lc__landq_t){0};
}
