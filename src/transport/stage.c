/* Staging of device-kind sources through the context's host ring (stage.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/copier.h"
#include "core/mem.h"
#include "transport/generic.h"
#include "transport/stage.h"

#define SLOT (64u << 10) /* ring allocation unit */

typedef struct staged staged_t;

typedef struct lc__stage {
	lc_ctx_t *ctx;
	pthread_mutex_t lock;
	uint8_t *ring;
	size_t nslots;
	uint8_t *used; /* per slot */
	struct lc_region *region;
	staged_t *wait_head, *wait_tail;
} lc__stage_t;

struct staged {
	lc__stage_t *st;
	lc_conn_t *c;
	lc__batch_t *b;
	uint64_t bytes;       /* device bytes to stage */
	size_t slot0, nslots; /* ring space, when nslots */
	uint8_t *buf;
	void *overflow; /* one-off buffer (lc_mem_alloc), when the ring is too small */
	struct lc_region *overflow_region;
	_Atomic size_t left;
	_Atomic int err;
	staged_t *next;
	/* Per write, found at post: its source's kind (0 for host) and device,
	 * so that a region deregistered meanwhile never sends a device
	 * pointer to a transport. */
	struct {
		int8_t kind, device;
	} src[];
};

static bool is_device(lc_ctx_t *ctx, const lc_write_t *w, lc__region_info_t *r)
{
	return !lc__source_find(ctx, w->local, w->length, r) && !LC__KIND_IS_HOST(r->kind);
}

static lc__stage_t *stage_get(lc_ctx_t *ctx, int *rc)
{
	pthread_mutex_lock(&ctx->objs_lock);
	lc__stage_t *st = ctx->stage;
	if (st)
		goto out;
	size_t len = (size_t)lc__ctx_cfg(ctx, LC__CFG_staging_ring_mib) << 20;
	st = calloc(1, sizeof *st);
	void *ring = NULL;
	uint64_t off = 0;
	if (!st || !(st->used = calloc(len / SLOT, 1)) ||
	    (*rc = lc_mem_alloc(len, LC_MEM_SHAREABLE, &ring)))
		goto fail;
	*rc = lc__regions_add(&ctx->regions, ctx, ring, len, lc__mem_memfd(ring, len, &off), off,
			      &st->region);
	if (*rc)
		goto fail;
	st->ctx = ctx;
	st->ring = ring;
	st->nslots = len / SLOT;
	pthread_mutex_init(&st->lock, NULL);
	ctx->stage = st;
	LC__DEBUG("staging ring of %zu MiB (region %u)", len >> 20, st->region->id);
	goto out;
fail:
	if (!*rc)
		*rc = -ENOMEM;
	if (ring)
		lc_mem_free(ring);
	if (st)
		free(st->used);
	free(st);
	st = NULL;
out:
	pthread_mutex_unlock(&ctx->objs_lock);
	return st;
}

/* Under lock: first fit of n contiguous slots; false if none. */
static bool ring_take(lc__stage_t *st, staged_t *s)
{
	size_t n = (size_t)((s->bytes + SLOT - 1) / SLOT), run = 0;
	for (size_t i = 0; i < st->nslots; i++) {
		run = st->used[i] ? 0 : run + 1;
		if (run == n) {
			s->slot0 = i + 1 - n;
			s->nslots = n;
			memset(st->used + s->slot0, 1, n);
			s->buf = st->ring + s->slot0 * SLOT;
			return true;
		}
	}
	return false;
}

static void staged_end(staged_t *s)
{
	lc_conn_t *c = s->c;
	lc__batch_unref(s->b); /* may free s and the staging space (on_free) */
	atomic_fetch_sub(&c->staging, 1);
}

/* Every copy of s is done: hand the batch to its transport. */
static void staged_post(staged_t *s)
{
	lc__batch_t *b = s->b;
	int err = atomic_load(&s->err);
	if (err) {
		lc__batch_fail(b, LC_ERR_IO, "staging a device source failed: %s",
			       lc_strerror(err));
	} else if (!lc__batch_is_completed(b) && !atomic_load(&s->c->closing)) {
		LC__COUNT_ADD(s->st->ctx, staging_bytes, s->bytes);
		LC__DEBUG("staged %llu bytes in %llu us", (unsigned long long)s->bytes,
			  (unsigned long long)(lc__now_ns() - b->post_ns) / 1000);
		int rc = s->c->ops->conn.post(s->c, b);
		if (rc < 0)
			lc__batch_fail(b, rc, "post after staging: %s", lc_strerror(rc));
	}
	staged_end(s);
}

static void copy_done(void *arg, int status)
{
	staged_t *s = arg;
	if (status)
		atomic_store(&s->err, status);
	if (atomic_fetch_sub(&s->left, 1) == 1)
		staged_post(s);
}

/* Space is held: queue the device sources' copies, point the writes at
 * the staged bytes. */
static void staged_start(staged_t *s)
{
	lc__batch_t *b = s->b;
	lc_ctx_t *ctx = s->st->ctx;
	uint64_t off = 0;
	atomic_store(&s->left, 1);
	for (size_t i = 0; i < b->nwrites && !lc__batch_is_completed(b); i++) {
		lc_write_t *w = &b->writes[i];
		lc__copier_t *cp;
		if (LC__KIND_IS_HOST(s->src[i].kind))
			continue;
		int rc = lc__copier_get(ctx, s->src[i].kind, s->src[i].device, &cp);
		/* A strided write's blocks are packed: its staged source is
		 * contiguous (local_stride = length). */
		uint32_t count = w->count > 1 ? w->count : 1;
		for (uint32_t k = 0; k < count && !rc; k++) {
			atomic_fetch_add(&s->left, 1);
			rc = cp->ops->to_host(cp, s->buf + off + (uint64_t)k * w->length,
					      (const uint8_t *)w->local +
						      (uint64_t)k * w->local_stride,
					      w->length, copy_done, s);
			if (rc)
				atomic_fetch_sub(&s->left, 1);
		}
		if (rc) {
			atomic_fetch_add(&s->left, 1);
			copy_done(s, rc);
			break;
		}
		w->local = s->buf + off;
		if (count > 1)
			w->local_stride = w->length;
		off += (uint64_t)count * w->length;
	}
	copy_done(s, 0);
}

/* Under lock: start every waiting batch that now fits, in order. */
static staged_t *wait_pop(lc__stage_t *st)
{
	staged_t *s = st->wait_head;
	if (!s || !ring_take(st, s))
		return NULL;
	st->wait_head = s->next;
	if (!st->wait_head)
		st->wait_tail = NULL;
	s->next = NULL;
	return s;
}

static void staged_free(lc__batch_t *b)
{
	staged_t *s = b->stage;
	lc__stage_t *st = s->st;
	if (s->overflow) {
		lc__regions_remove(&st->ctx->regions, s->overflow_region);
		lc_mem_free(s->overflow);
	}
	pthread_mutex_lock(&st->lock);
	if (s->nslots)
		memset(st->used + s->slot0, 0, s->nslots);
	staged_t *ready = NULL, **tail = &ready, *n;
	while ((n = wait_pop(st))) {
		*tail = n;
		tail = &n->next;
	}
	pthread_mutex_unlock(&st->lock);
	free(s);
	while (ready) {
		n = ready->next;
		staged_start(ready);
		ready = n;
	}
}

/* A batch larger than the ring: a one-off buffer of its own. */
static int overflow_take(lc__stage_t *st, staged_t *s)
{
	uint64_t off = 0;
	int rc = lc_mem_alloc(s->bytes, LC_MEM_SHAREABLE, &s->overflow);
	if (rc)
		return rc;
	rc = lc__regions_add(&st->ctx->regions, st->ctx, s->overflow, s->bytes,
			     lc__mem_memfd(s->overflow, s->bytes, &off), off, &s->overflow_region);
	if (rc) {
		lc_mem_free(s->overflow);
		s->overflow = NULL;
		return rc;
	}
	s->buf = s->overflow;
	LC__COUNT(st->ctx, staging_overflows);
	LC__DEBUG("staging %llu bytes through a one-off buffer (ring %zu MiB)",
		  (unsigned long long)s->bytes, st->nslots * SLOT >> 20);
	return 0;
}

int lc__stage_ready(lc_ctx_t *ctx)
{
	int rc = 0;
	return stage_get(ctx, &rc) ? 0 : rc;
}

/* Whether c's transport moves every device source of b itself. */
static bool transport_moves(lc_conn_t *c, const lc__batch_t *b)
{
	for (size_t i = 0; i < b->nwrites; i++) {
		lc__region_info_t r;
		if (is_device(c->ctx, &b->writes[i], &r) &&
		    !c->ops->memory.moves_kind(c, r.kind, r.device))
			return false;
	}
	return true;
}

int lc__stage_post(lc_conn_t *c, lc__batch_t *b)
{
	int rc = 0;
	lc__stage_t *st = stage_get(c->ctx, &rc);
	if (!st)
		return rc;
	if (c->ops->memory.moves_kind && transport_moves(c, b))
		return c->ops->conn.post(c, b); /* UCX with CUDA: device memory as it is */
	staged_t *s = calloc(1, sizeof *s + b->nwrites * sizeof s->src[0]);
	if (!s)
		return -ENOMEM;
	s->st = st;
	s->c = c;
	s->b = b;
	for (size_t i = 0; i < b->nwrites; i++) {
		lc__region_info_t r;
		if (!is_device(c->ctx, &b->writes[i], &r))
			continue;
		s->src[i].kind = (int8_t)r.kind;
		s->src[i].device = (int8_t)r.device;
		s->bytes += b->writes[i].length *
			    (b->writes[i].count > 1 ? (uint64_t)b->writes[i].count : 1);
	}
	if (s->bytes > st->nslots * SLOT && (rc = overflow_take(st, s))) {
		free(s);
		return rc;
	}
	b->defer = false; /* posted by the copy engine once staged */
	b->stage = s;
	b->on_free = staged_free;
	lc__batch_ref(b);
	atomic_fetch_add(&c->staging, 1);
	pthread_mutex_lock(&st->lock);
	bool go = s->overflow || (!st->wait_head && ring_take(st, s));
	if (!go) {
		LC__COUNT(c->ctx, staging_waits);
		if (st->wait_tail)
			st->wait_tail->next = s;
		else
			st->wait_head = s;
		st->wait_tail = s;
	}
	pthread_mutex_unlock(&st->lock);
	if (go)
		staged_start(s);
	return 0;
}

void lc__stage_conn_close(lc_conn_t *c)
{
	lc__stage_t *st = c->ctx->stage;
	staged_t *mine = NULL;
	if (st) {
		pthread_mutex_lock(&st->lock);
		for (staged_t **pp = &st->wait_head; *pp;) {
			staged_t *s = *pp;
			if (s->c != c) {
				pp = &s->next;
				continue;
			}
			*pp = s->next;
			s->next = mine;
			mine = s;
		}
		st->wait_tail = NULL;
		for (staged_t *s = st->wait_head; s; s = s->next)
			st->wait_tail = s;
		pthread_mutex_unlock(&st->lock);
	}
	while (mine) {
		staged_t *n = mine->next;
		staged_end(mine); /* never started: its batch completes as cancelled */
		mine = n;
	}
	while (atomic_load(&c->staging))
		nanosleep(&(struct timespec){0, 100000}, NULL);
}

void lc__stage_fini(lc_ctx_t *ctx)
{
	lc__stage_t *st = ctx->stage;
	if (!st)
		return;
	ctx->stage = NULL;
	lc__regions_remove(&ctx->regions, st->region);
	lc_mem_free(st->ring);
	pthread_mutex_destroy(&st->lock);
	free(st->used);
	free(st);
}
