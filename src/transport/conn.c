/* Listeners, connections and batch posting: the generic half of the data
 * plane, in front of every transport. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "transport/cq.h"
#include "transport/generic.h"
#include "transport/stage.h"

/* ---- listeners ---- */

int lc_listener_create(lc_ctx_t *ctx, const char *url, lc_listener_t **out)
{
	lc_last_error_clear();
	if (!ctx || !url || !out)
		return LC__FAIL(-EINVAL, "lc_listener_create: %s is NULL",
				!ctx   ? "ctx"
				: !url ? "url"
				       : "out");
	const lc__transport_ops_t *ops = lc__transport_find(url);
	if (!ops)
		return LC__FAIL(LC_ERR_NO_TRANSPORT, "no transport for %s (built in: %s)", url,
				lc_transports());
	lc_listener_t *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->ctx = ctx;
	l->ops = ops;
	int rc = ops->init ? lc__transport_state(ctx, ops, &l->ctx_state) : 0;
	if (!rc)
		rc = ops->listener.listen(l, url);
	if (rc) {
		free(l);
		return LC__FAIL(rc, "listen on %s: %s", url, lc__why(rc));
	}
	pthread_mutex_lock(&ctx->objs_lock);
	l->ctx_next = ctx->listeners;
	if (ctx->listeners)
		ctx->listeners->ctx_prev = l;
	ctx->listeners = l;
	pthread_mutex_unlock(&ctx->objs_lock);
	LC__INFO("listening on %s", l->url);
	*out = l;
	return 0;
}

int lc_listener_url(const lc_listener_t *l, char *buf, size_t cap)
{
	if (!l || !buf)
		return LC__FAIL(-EINVAL, "lc_listener_url: %s is NULL", !l ? "listener" : "buf");
	size_t n = strlen(l->url);
	if (n + 1 > cap)
		return LC__FAIL(-ENOSPC, "lc_listener_url: %zu bytes needed, %zu given", n + 1,
				cap);
	memcpy(buf, l->url, n + 1);
	return (int)n;
}

void lc_listener_destroy(lc_listener_t *l)
{
	if (!l)
		return;
	lc_ctx_t *ctx = l->ctx;
	pthread_mutex_lock(&ctx->objs_lock);
	if (l->ctx_prev)
		l->ctx_prev->ctx_next = l->ctx_next;
	else
		ctx->listeners = l->ctx_next;
	if (l->ctx_next)
		l->ctx_next->ctx_prev = l->ctx_prev;
	pthread_mutex_unlock(&ctx->objs_lock);
	l->ops->listener.close(l);
	free(l);
}

/* ---- connections ---- */

int lc_conn_create(lc_ctx_t *ctx, const char *url, const lc_conn_params_t *params, lc_conn_t **out)
{
	lc_conn_params_t p;
	/* params are required: a connection needs a completion queue. */
	/* P connects to the URL a D sent: failures past the arguments are
	 * logged rate-limited (LC__LOG_PEER). */
	lc_last_error_clear();
	if (!ctx || !url || !out || !params)
		return LC__FAIL(-EINVAL, "lc_conn_create: %s is NULL",
				!ctx   ? "ctx"
				: !url ? "url"
				: !out ? "out"
				       : "params (cq is required)");
	LC__PARAMS_COPY(&p, params);
	if (!p.cq)
		return LC__FAIL(-EINVAL, "lc_conn_create: params->cq is required");
	if (strlen(url) >= LC__URL_MAX)
		return LC__FAIL(-EINVAL, "lc_conn_create: URL longer than %d bytes",
				LC__URL_MAX - 1);
	if (p.lanes < 0)
		return LC__FAIL(-EINVAL, "lc_conn_create: lanes %d < 0", p.lanes);
	const lc__transport_ops_t *ops = lc__transport_find(url);
	if (!ops) {
		lc__error_set(LC_ERR_NO_TRANSPORT, "no transport for %.200s (built in: %s)", url,
			      lc_transports());
		LC__WARN_PEER("%s", lc_last_error());
		return LC_ERR_NO_TRANSPORT;
	}
	lc_conn_t *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->ctx = ctx;
	c->ops = ops;
	c->cq = p.cq;
	snprintf(c->url, sizeof c->url, "%s", url);
	c->token = p.token;
	c->has_token = p.has_token != 0;
	pthread_mutex_init(&c->lock, NULL);
	c->pending.next = c->pending.prev = &c->pending;
	int rc = ops->init ? lc__transport_state(ctx, ops, &c->ctx_state) : 0;
	if (!rc)
		rc = ops->conn.open(c, url, &p);
	if (!rc) { /* where its batches' deadlines are kept */
		rc = lc__io_timer_loop(ctx, c->io_task, &c->timer_loop);
		if (rc)
			ops->conn.close(c);
	}
	if (rc) {
		LC__COUNT(ctx, conns_failed);
		pthread_mutex_destroy(&c->lock);
		free(c);
		lc__error_set(rc, "connection to %s: %s", url, lc__why(rc));
		LC__WARN_PEER("%s", lc_last_error());
		return rc;
	}
	LC__COUNT(ctx, conns_opened);
	pthread_mutex_lock(&ctx->objs_lock);
	c->ctx_next = ctx->conns;
	if (ctx->conns)
		ctx->conns->ctx_prev = c;
	ctx->conns = c;
	pthread_mutex_unlock(&ctx->objs_lock);
	*out = c;
	return 0;
}

void lc_conn_destroy(lc_conn_t *c)
{
	if (!c)
		return;
	lc_ctx_t *ctx = c->ctx;
	atomic_store(&c->closing, 1);
	/* Unlink first: lc_ctx_destroy then no longer sees the connection. */
	pthread_mutex_lock(&ctx->objs_lock);
	if (c->ctx_prev)
		c->ctx_prev->ctx_next = c->ctx_next;
	else
		ctx->conns = c->ctx_next;
	if (c->ctx_next)
		c->ctx_next->ctx_prev = c->ctx_prev;
	pthread_mutex_unlock(&ctx->objs_lock);
	lc__stage_conn_close(c);
	c->ops->conn.close(c);
	lc__conn_fail_all(c, LC_ERR_CANCELLED, "connection to %s closed", c->url);
	/* An expiry claimed before fail_all may still be delivering. */
	lc__io_timer_quiesce(c->timer_loop);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int lc_conn_import_region(lc_conn_t *c, const void *desc, size_t len, uint32_t *region_id_out)
{
	lc_region_desc_t d;
	if (!c || !desc || !region_id_out)
		return LC__FAIL(-EINVAL, "lc_conn_import_region: %s is NULL",
				!c      ? "conn"
				: !desc ? "desc"
					: "region_id_out");
	int rc = lc_region_unpack(desc, len, &d);
	if (rc)
		return rc;
	if (c->ops->conn.import_region) {
		/* Unpack checked every key frame; this transport reads its own. */
		const uint8_t *key;
		size_t key_len;
		lc__region_key_find((const uint8_t *)desc + LC__DESC_HEADER, len - LC__DESC_HEADER,
				    c->ops->key_tag, &key, &key_len);
		rc = c->ops->conn.import_region(c, &d, key, key_len);
		if (rc)
			return rc;
	}
	*region_id_out = d.region_id;
	return 0;
}

/* ---- batches ---- */

/* A strided write's blocks: whether count and strides are sane (blocks do
 * not overlap, the span does not overflow), and the span at each side. */
static int strided_span(const lc_write_t *w, uint64_t *local_span, uint64_t *remote_span)
{
	if (w->count <= 1) {
		*local_span = *remote_span = w->length;
		return 0;
	}
	if (w->count > LC_WRITE_MAX_COUNT || w->local_stride < w->length ||
	    w->remote_stride < w->length)
		return -EINVAL;
	uint64_t k = w->count - 1;
	if (w->local_stride > (UINT64_MAX - w->length) / k ||
	    w->remote_stride > (UINT64_MAX - w->length) / k)
		return -EINVAL;
	*local_span = k * w->local_stride + w->length;
	*remote_span = k * w->remote_stride + w->length;
	if (*remote_span > UINT64_MAX - w->remote_offset ||
	    *local_span > UINTPTR_MAX - (uintptr_t)w->local)
		return -EINVAL;
	return 0;
}

/* The batch's copy of the caller's writes. A strided write (count > 1)
 * stays one descriptor for a transport that moves blocks itself
 * (LC__TP_STRIDED); for the others it is expanded here into its blocks. */
static int copy_writes(lc_conn_t *c, const lc_write_t *writes, size_t n, lc__batch_t *b)
{
	size_t keep = 0;
	bool native = c->ops->caps & LC__TP_STRIDED;
	for (size_t i = 0; i < n; i++) {
		uint64_t ls, rs;
		if (!writes[i].length)
			continue;
		if (strided_span(&writes[i], &ls, &rs)) {
			return LC__FAIL(
				-EINVAL,
				"batch to %s: write %zu: %u blocks of %llu bytes at strides "
				"%llu/%llu overlap or overflow",
				c->url, i, writes[i].count, (unsigned long long)writes[i].length,
				(unsigned long long)writes[i].local_stride,
				(unsigned long long)writes[i].remote_stride);
		}
		keep += native || writes[i].count <= 1 ? 1 : writes[i].count;
	}
	b->writes = malloc((keep ? keep : 1) * sizeof *b->writes);
	if (!b->writes)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const lc_write_t *w = &writes[i];
		lc__region_info_t src;
		uint64_t
			ls = 0,
			rs = 0; /* set by strided_span, checked above (Release builds cannot see it) */
		if (w->length == 0)
			continue; /* lands nothing; complete with the rest */
		strided_span(w, &ls, &rs);
		if (!w->local || lc__source_find(c->ctx, w->local, ls, &src)) {
			return LC__FAIL(
				LC_ERR_REGION,
				"batch to %s: write %zu source %p+%llu is not in a registered region",
				c->url, i, w->local, (unsigned long long)ls);
		}
		uint32_t count = w->count > 1 ? w->count : 1;
		b->bytes += (uint64_t)count * w->length;
		b->device_src |= !LC__KIND_IS_HOST(src.kind);
		if (count == 1 || native) {
			lc_write_t *o = &b->writes[b->nwrites++];
			*o = *w;
			if (count == 1) {
				o->count = 0;
				o->local_stride = o->remote_stride = 0;
			}
			continue;
		}
		for (uint32_t k = 0; k < count; k++)
			b->writes[b->nwrites++] = (lc_write_t){
				.local = (const uint8_t *)w->local + (uint64_t)k * w->local_stride,
				.remote_offset = w->remote_offset + (uint64_t)k * w->remote_stride,
				.length = w->length,
				.remote_region = w->remote_region};
	}
	return 0;
}

static int post_batch(lc_conn_t *c, lc__batch_t *b, const lc_batch_params_t *params,
		      uint64_t *batch_id);

/* Give b to the transport, or to staging for device sources. */
static int hand_over(lc_conn_t *c, lc__batch_t *b)
{
	int rc;
	if (!b->device_src)
		return c->ops->conn.post(c, b);
	if (!c->ops->conn.post_device || (rc = c->ops->conn.post_device(c, b)) == 1)
		rc = lc__stage_post(c, b);
	return rc;
}

int lc_batch_post(lc_conn_t *c, const lc_write_t *writes, size_t n, const lc_batch_params_t *params,
		  uint64_t *batch_id)
{
	lc_batch_params_t p = {0};
	int rc;
	if (!c || !batch_id || (n && !writes))
		return LC__FAIL(-EINVAL, "lc_batch_post: %s is NULL",
				!c          ? "conn"
				: !batch_id ? "batch_id"
					    : "writes (with n > 0)");
	LC__PARAMS_COPY(&p, params);
	if (p.flags & ~(uint32_t)LC_BATCH_DEFER)
		return LC__FAIL(-EINVAL, "lc_batch_post: unknown flags 0x%x", p.flags);
	if (atomic_load(&c->closing))
		return LC__FAIL(LC_ERR_CLOSED, "lc_batch_post: connection to %s is closing",
				c->url);
	lc__batch_t *b = calloc(1, sizeof *b);
	if (!b)
		return -ENOMEM;
	rc = copy_writes(c, writes, n, b);
	if (rc) {
		free(b->writes);
		free(b);
		return rc;
	}
	return post_batch(c, b, &p, batch_id);
}

/* Queue b (its writes in place): reserve its completion, link it with its
 * deadline armed, hand it over. Frees b when it fails before it is linked. */
static int post_batch(lc_conn_t *c, lc__batch_t *b, const lc_batch_params_t *params,
		      uint64_t *batch_id)
{
	const lc_batch_params_t p = *params;
	int rc = lc__cq_reserve(c->cq);
	if (rc) {
		free(b->writes);
		free(b);
		return rc;
	}
	int64_t timeout_ms = p.timeout_ms ? p.timeout_ms
					  : lc__ctx_cfg(c->ctx, LC__CFG_batch_timeout_ms);
	b->conn = c;
	b->room = p.room;
	b->tag = p.tag;
	b->user_data = p.user_data;
	b->defer = (p.flags & LC_BATCH_DEFER) && c->ops->conn.flush;
	b->post_ns = lc__now_ns();
	/* A timeout past what the clock holds (centuries) is no deadline: the
	 * product would wrap into the past and expire the batch at once. */
	uint64_t ms_left = (UINT64_MAX - b->post_ns) / 1000000ull;
	b->deadline_ns = timeout_ms > 0 && (uint64_t)timeout_ms <= ms_left
				 ? b->post_ns + (uint64_t)timeout_ms * 1000000ull
				 : 0;
	atomic_init(&b->refs, 2); /* generic (until completion) + this call */

	pthread_mutex_lock(&c->lock);
	/* Armed as it is linked: whoever finds it pending (a cancel, the
	 * close) finds it armed, and its expiry, which unlinks it under this
	 * lock, cannot find it unlinked. The loop's lock is a leaf. Its id
	 * first: an expiry reads it before taking this lock. */
	b->id = c->next_batch_id + 1;
	if (b->nwrites && b->deadline_ns && (rc = lc__batch_arm(b))) {
		pthread_mutex_unlock(&c->lock);
		lc__cq_unreserve(c->cq);
		free(b->writes);
		free(b);
		return rc;
	}
	c->next_batch_id++;
	b->prev = c->pending.prev;
	b->next = &c->pending;
	c->pending.prev->next = b;
	c->pending.prev = b;
	c->npending++;
	pthread_mutex_unlock(&c->lock);
	LC__COUNT(c->ctx, batches_posted);
	LC__COUNT_ADD(c->ctx, writes_posted, b->nwrites);
	LC__COUNT_ADD(c->ctx, bytes_posted, b->bytes);
	uint64_t id = b->id;

	if (b->nwrites == 0) {
		lc__batch_complete(b, 0, NULL);
	} else {
		rc = hand_over(c, b);
		if (rc < 0 && atomic_exchange(&b->completed, 1) == 0) {
			/* Not taken and not completed by anyone: undo, no completion. */
			lc__io_timer_cancel(&b->timer);
			pthread_mutex_lock(&c->lock);
			b->prev->next = b->next;
			b->next->prev = b->prev;
			c->npending--;
			pthread_mutex_unlock(&c->lock);
			lc__cq_unreserve(c->cq);
			lc__batch_unref(b);
			lc__batch_unref(b);
			return rc;
		}
	}
	lc__batch_unref(b);
	*batch_id = id;
	return 0;
}

int lc__batch_post_trusted(lc_conn_t *c, lc_write_t *writes, size_t n, uint64_t bytes,
			   bool device_src, const lc_batch_params_t *p, uint64_t *batch_id)
{
	if (atomic_load(&c->closing)) {
		free(writes);
		return LC__FAIL(LC_ERR_CLOSED, "lc_batch_post: connection to %s is closing",
				c->url);
	}
	lc__batch_t *b = calloc(1, sizeof *b);
	if (!b) {
		free(writes);
		return -ENOMEM;
	}
	bool expand = false;
	for (size_t i = 0; i < n; i++) { /* the batch's form: count 0 or > 1 */
		if (writes[i].count == 1)
			writes[i] = (lc_write_t){.local = writes[i].local,
						 .remote_offset = writes[i].remote_offset,
						 .length = writes[i].length,
						 .remote_region = writes[i].remote_region};
		expand |= writes[i].count > 1 && !(c->ops->caps & LC__TP_STRIDED);
	}
	if (expand) { /* a transport that cannot move strided writes: rare */
		int rc = copy_writes(c, writes, n, b);
		free(writes);
		if (rc) {
			free(b->writes);
			free(b);
			return rc;
		}
	} else {
		b->writes = writes;
		b->nwrites = n;
		b->bytes = bytes;
		b->device_src = device_src;
	}
	return post_batch(c, b, p, batch_id);
}

int lc_conn_flush(lc_conn_t *c)
{
	if (!c)
		return LC__FAIL(-EINVAL, "lc_conn_flush: conn is NULL");
	if (c->ops->conn.flush && !atomic_load(&c->closing))
		c->ops->conn.flush(c);
	return 0;
}

static bool same_room(const lc__batch_t *b, const void *arg)
{
	return b->room == *(const uint64_t *)arg;
}

int lc_conn_room_cancel(lc_conn_t *c, uint64_t room)
{
	lc__batch_t *v[64];
	size_t n;
	int cancelled = 0;
	if (!c)
		return LC__FAIL(-EINVAL, "lc_conn_room_cancel: conn is NULL");
	do { /* in rounds: no allocation (batch.c, lc__conn_collect) */
		n = lc__conn_collect(c, same_room, &room, v, LC__ARRAY_SIZE(v));
		for (size_t i = 0; i < n; i++) {
			if (!lc__batch_is_completed(v[i])) {
				lc__batch_complete(v[i], LC_ERR_CANCELLED, "room cancelled");
				cancelled++;
			}
			lc__batch_unref(v[i]);
		}
	} while (n == LC__ARRAY_SIZE(v));
	if (c->ops->conn.room_cancel)
		c->ops->conn.room_cancel(c, room);
	return cancelled;
}
