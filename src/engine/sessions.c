/*
 * D sessions (API): a session is one D rank, reached through one connection
 * on the engine's completion queue, with D's regions imported and, per
 * layout buffer, where its pages land (whole pages, or a fragment for
 * heterogeneous TP). Connecting and importing happen without the engine
 * lock; only the registration in the table takes it. Registering a name
 * again replaces the session and fails the rooms that used the old one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/params.h"
#include "engine/engine_int.h"

void lc__esession_free(lc__esession_t *s)
{
	if (!s)
		return;
	lc_conn_destroy(s->conn);
	free(s->xfer);
	free(s);
}

/* Fail every unfinished room with a destination on session s. */
static void fail_rooms_of(lc_engine_t *e, lc__esession_t *s, const char *why)
{
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(&e->rooms, &it));) {
		if (lc__room_final(r))
			continue;
		for (uint32_t i = 0; i < r->ndst; i++)
			if (r->dst[i].session == s) {
				lc__engine_fail_room(e, r, LC_FAIL_SESSION_GONE, "session %s %s",
						     s->core->name, why);
				break;
			}
	}
}

/* A fragment that does not fit its pages: counted and logged as bad input
 * (takes the lock for the counter). */
static int bad_fragment(lc_engine_t *e, const lc_session_params_t *p, size_t i, const char *problem)
{
	const lc_fragment_t *f = &p->fragments[i];
	char what[256];
	snprintf(what, sizeof what,
		 "session %s: fragment %zu (buffer %u, %u x %llu bytes at %llu -> %llu of %llu, "
		 "strides %llu/%llu)%s",
		 p->name, i, f->buffer, f->count ? f->count : 1, (unsigned long long)f->bytes,
		 (unsigned long long)f->src_offset, (unsigned long long)f->dst_offset,
		 (unsigned long long)f->dst_item_len, (unsigned long long)f->src_stride,
		 (unsigned long long)f->dst_stride, problem);
	pthread_mutex_lock(&e->lock);
	int rc = lc__engine_bad_peer_input(e, LC_ERR_GEOMETRY, what);
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* Whether [off, off + bytes) blocks `count` times `stride` apart stay
 * within a page of item_len bytes (overflow-safe); blocks must not overlap. */
static bool blocks_fit(uint64_t off, uint64_t bytes, uint32_t count, uint64_t stride,
		       uint64_t item_len)
{
	if (!bytes || off > item_len || bytes > item_len - off)
		return false;
	if (count <= 1)
		return true;
	if (stride < bytes || stride > item_len)
		return false;
	/* last block at off + (count-1)*stride must end by item_len */
	uint64_t room = item_len - off - bytes;
	return (uint64_t)(count - 1) <= room / stride;
}

static bool fragment_fits(const lc_fragment_t *f, uint64_t p_item_len)
{
	if (f->count > LC_WRITE_MAX_COUNT)
		return false;
	return blocks_fit(f->src_offset, f->bytes, f->count, f->src_stride, p_item_len) &&
	       blocks_fit(f->dst_offset, f->bytes, f->count, f->dst_stride, f->dst_item_len);
}

/* Heterogeneous TP: only the buffers with a fragment go to this session,
 * each as a byte range of every page. The bounds are checked here, once:
 * the planner trusts its transfer table. */
static int apply_fragments(lc_engine_t *e, lc__esession_t *s, const lc_session_params_t *p)
{
	if (!p->fragments)
		return -EINVAL;
	for (uint32_t b = 0; b < e->layout->nbuf; b++)
		s->xfer[b].skip = 1;
	for (size_t i = 0; i < p->fragment_count; i++) {
		const lc_fragment_t *f = &p->fragments[i];
		if (f->buffer >= e->layout->nbuf)
			return bad_fragment(e, p, i, " names no buffer");
		const lc_buffer_t *buf = &e->layout->bufs[f->buffer];
		lc__xfer_t *x = &s->xfer[f->buffer];
		if (!x->skip)
			return bad_fragment(e, p, i, ": buffer named twice");
		if (!fragment_fits(f, buf->item_len))
			return bad_fragment(e, p, i, " does not fit its pages");
		x->src_base = (const uint8_t *)buf->base + f->src_offset;
		x->dst_base += f->dst_offset;
		x->dst_stride = f->dst_item_len;
		x->bytes = f->bytes;
		x->skip = 0;
		x->count = f->count > 1 ? f->count : 0;
		x->block_src = x->count ? f->src_stride : 0;
		x->block_dst = x->count ? f->dst_stride : 0;
	}
	return 0;
}

static int check_session_params(lc_engine_t *e, const lc_session_params_t *p)
{
	/* A REGISTER reaches here too: reasons recorded, logs rate-limited. */
	if (!p || LC__PARAMS_SHORT(p, lc_session_params_t, region_count) || !p->name || !*p->name ||
	    !p->url || (p->region_count && (!p->region_descs || !p->region_desc_lens))) {
		lc__error_set(-EINVAL, "session: %s",
			      !p ? "params is NULL"
			      : LC__PARAMS_SHORT(p, lc_session_params_t, region_count)
				      ? LC__PARAMS_SHORT_TEXT("params", lc_session_params_t)
			      : !p->name || !*p->name ? "params->name is required"
			      : !p->url               ? "params->url is required"
						      : "region_descs or region_desc_lens is NULL");
		return -EINVAL;
	}
	if (!p->buffer_region && p->region_count != e->layout->nbuf) {
		lc__error_set(-EINVAL, "session %s: %zu region descriptors for %u buffers", p->name,
			      p->region_count, e->layout->nbuf);
		LC__WARN_PEER("%s", lc_last_error());
		return -EINVAL;
	}
	const uint32_t *buf_region = p->buffer_region;
	for (uint32_t b = 0; buf_region && b < e->layout->nbuf; b++)
		if (buf_region[b] >= p->region_count)
			return -EINVAL;
	return 0;
}

/* Where each buffer's pages land: D's regions imported into the connection,
 * then whole pages or the fragments. */
static int map_buffers(lc_engine_t *e, lc__esession_t *s, const lc_session_params_t *p,
		       uint32_t *ids)
{
	int rc;
	const uint32_t *buf_region = p->buffer_region;
	const uint64_t *buf_offset = p->buffer_offset;
	for (size_t i = 0; i < p->region_count; i++)
		if ((rc = lc_conn_import_region(s->conn, p->region_descs[i], p->region_desc_lens[i],
						&ids[i]))) {
			LC__WARN_PEER("session %s: importing region %zu: %s", p->name, i,
				      lc__why(rc));
			return rc;
		}
	for (uint32_t b = 0; b < e->layout->nbuf; b++) {
		uint32_t id = ids[buf_region ? buf_region[b] : b];
		lc__xfer_whole_page(&s->xfer[b], &e->layout->bufs[b], id,
				    buf_offset ? buf_offset[b] : 0);
	}
	if (p->fragment_count)
		return apply_fragments(e, s, p);
	return 0;
}

/* A connected session with its transfer table, not yet registered. */
static int session_build(lc_engine_t *e, const lc_session_params_t *p, lc__esession_t **out)
{
	lc__esession_t *s = calloc(1, sizeof(*s));
	uint32_t *ids = calloc(p->region_count ? p->region_count : 1, sizeof(uint32_t));
	int rc;
	if (s)
		s->xfer = calloc(e->layout->nbuf, sizeof(*s->xfer));
	if (!s || !ids || !s->xfer) {
		rc = -ENOMEM;
		goto fail;
	}
	lc_conn_params_t cp = {.size = sizeof(cp), .cq = e->cq, .has_token = p->has_token};
	cp.token = p->token;
	if ((rc = lc_conn_create(e->ctx, p->url, &cp, &s->conn))) {
		LC__WARN_PEER("session %s: connecting to %s: %s", p->name, p->url, lc__why(rc));
		goto fail;
	}
	if ((rc = map_buffers(e, s, p, ids)))
		goto fail;
	free(ids);
	*out = s;
	return 0;
fail:
	free(ids);
	lc__esession_free(s);
	return rc;
}

int lc_engine_session_add(lc_engine_t *e, const lc_session_params_t *params)
{
	lc__esession_t *s, *old = NULL;
	lc__session_t *core;
	lc_session_params_t copy;
	const lc_session_params_t *p = &copy;
	int rc;
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_session_add: engine is NULL");
	/* Only the copy is read: fields past the caller's size are zero
	 * (absent: whole pages at offset 0); its size is the caller's. */
	LC__PARAMS_COPY(&copy, params);
	if ((rc = check_session_params(e, params ? p : NULL)) || (rc = session_build(e, p, &s)))
		return rc;

	pthread_mutex_lock(&e->lock);
	core = lc__session_find(&e->sessions, p->name);
	if (core) {
		old = core->owner;
		fail_rooms_of(e, old, "registered again");
		lc__session_clear(core);
	} else if ((rc = lc__session_add(&e->sessions, p->name, &core))) {
		pthread_mutex_unlock(&e->lock);
		lc__esession_free(s);
		return rc;
	}
	core->owner = s;
	s->core = core;
	pthread_mutex_unlock(&e->lock);
	if (old) {
		old->core = NULL;
		lc__esession_free(old);
	}
	LC__INFO("engine %s: session %s -> %s", e->name, p->name, p->url);
	return 0;
}

int lc_engine_session_remove(lc_engine_t *e, const char *name)
{
	lc__esession_t *s;
	if (!e || !name)
		return LC__FAIL(-EINVAL, "lc_engine_session_remove: %s is NULL",
				!e ? "engine" : "name");
	pthread_mutex_lock(&e->lock);
	lc__session_t *core = lc__session_find(&e->sessions, name);
	if (!core) {
		pthread_mutex_unlock(&e->lock);
		return -ENOENT;
	}
	s = core->owner;
	fail_rooms_of(e, s, "removed");
	/* Destinations of finished rooms may still name it: forget the link. */
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(&e->rooms, &it));)
		for (uint32_t i = 0; i < r->ndst; i++)
			if (r->dst[i].session == s)
				r->dst[i].session = NULL;
	lc__session_remove(&e->sessions, core);
	pthread_mutex_unlock(&e->lock);
	s->core = NULL;
	lc__esession_free(s);
	return 0;
}

int lc_engine_session_blocked(lc_engine_t *e, const char *name, uint64_t *failures)
{
	int rc;
	if (!e || !name)
		return LC__FAIL(-EINVAL, "lc_engine_session_blocked: %s is NULL",
				!e ? "engine" : "name");
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

typedef struct owner_ref {
	const lc__esession_t *s;
	size_t index;
} owner_ref_t;

static int owner_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)((const owner_ref_t *)a)->s;
	uintptr_t y = (uintptr_t)((const owner_ref_t *)b)->s;
	return (x > y) - (x < y);
}

/* One pass over the rooms: a session is live while an unfinished room has
 * a destination on it. The sessions are sorted once so that the pass costs
 * O(rooms x log n), whatever n. */
int lc__engine_sessions_live(lc_engine_t *e, const char *const *names, size_t n, bool *live)
{
	if (!e || (n && (!names || !live)))
		return -EINVAL;
	owner_ref_t *own = calloc(n ? n : 1, sizeof *own);
	if (!own)
		return -ENOMEM;
	size_t k = 0;
	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < n; i++) {
		live[i] = false;
		lc__session_t *core = lc__session_find(&e->sessions, names[i]);
		if (core && core->owner)
			own[k++] = (owner_ref_t){core->owner, i};
	}
	qsort(own, k, sizeof *own, owner_cmp);
	size_t it = 0;
	for (lc__room_t *r; k && (r = lc__room_next(&e->rooms, &it));) {
		if (lc__room_final(r))
			continue;
		for (uint32_t i = 0; i < r->ndst; i++) {
			owner_ref_t key = {r->dst[i].session, 0};
			owner_ref_t *hit = r->dst[i].session
						   ? bsearch(&key, own, k, sizeof *own, owner_cmp)
						   : NULL;
			if (hit)
				live[hit->index] = true;
		}
	}
	pthread_mutex_unlock(&e->lock);
	free(own);
	return 0;
}
