/*
 * loop://NAME: an in-process transport for tests (ours and users'). A worker
 * thread per connection applies writes with the same receiver checks as the
 * network transports (regions, ranges, grants), and can inject faults: fail
 * the k-th write, drop it (never complete), delay every write, fail after N
 * bytes, fail a room or a batch tag.
 *
 * Threading: `registry_lock` protects the list of listeners and their
 * reference counts; a worker holds a reference on the listener while it
 * copies, and listener_close waits for references to drop. Each connection's
 * queue and fault settings are under its own `lock`.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/params.h"
#include "transport/transport.h"

typedef struct loop_listener {
	lc_listener_t *owner;
	char name[LC__URL_MAX];
	int refs;
	bool closed;
	struct loop_listener *next;
} loop_listener_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registry_cond = PTHREAD_COND_INITIALIZER;
static loop_listener_t *registry;
static uint64_t auto_names;

typedef struct loop_conn {
	lc_conn_t *conn;
	char name[LC__URL_MAX];
	pthread_t worker;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	lc__batch_t **queue; /* FIFO of referenced batches */
	size_t head, count, cap;
	bool stop;
	lc_loop_faults_t faults;
	uint64_t writes_seen;  /* for fail_write / drop_write */
	uint64_t bytes_landed; /* for fail_after_bytes */
} loop_conn_t;

static void url_name(const char *url, char *name, size_t cap)
{
	const char *n = url + strlen("loop://");
	size_t len = strcspn(n, "?");
	snprintf(name, cap, "%.*s", (int)LC__MIN(len, cap - 1), n);
}

static int loop_listen(lc_listener_t *l, const char *url)
{
	loop_listener_t *ll = calloc(1, sizeof *ll);
	if (!ll)
		return -ENOMEM;
	ll->owner = l;
	url_name(url, ll->name, sizeof ll->name);
	pthread_mutex_lock(&registry_lock);
	if (!ll->name[0] || !strcmp(ll->name, "auto"))
		snprintf(ll->name, sizeof ll->name, "auto-%llu", (unsigned long long)++auto_names);
	for (loop_listener_t *o = registry; o; o = o->next) {
		if (!strcmp(o->name, ll->name)) {
			pthread_mutex_unlock(&registry_lock);
			free(ll);
			return -EEXIST;
		}
	}
	ll->next = registry;
	registry = ll;
	pthread_mutex_unlock(&registry_lock);
	snprintf(l->url, sizeof l->url, "loop://%.*s", (int)(sizeof l->url - 8), ll->name);
	l->priv = ll;
	return 0;
}

static void loop_listener_close(lc_listener_t *l)
{
	loop_listener_t *ll = l->priv, **pp;
	pthread_mutex_lock(&registry_lock);
	for (pp = &registry; *pp; pp = &(*pp)->next) {
		if (*pp == ll) {
			*pp = ll->next;
			break;
		}
	}
	ll->closed = true;
	while (ll->refs > 0)
		pthread_cond_wait(&registry_cond, &registry_lock);
	pthread_mutex_unlock(&registry_lock);
	free(ll);
}

static loop_listener_t *listener_get(const char *name)
{
	loop_listener_t *found = NULL;
	pthread_mutex_lock(&registry_lock);
	for (loop_listener_t *o = registry; o; o = o->next) {
		if (!strcmp(o->name, name) && !o->closed) {
			o->refs++;
			found = o;
			break;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	return found;
}

static void listener_put(loop_listener_t *ll)
{
	pthread_mutex_lock(&registry_lock);
	if (--ll->refs == 0)
		pthread_cond_broadcast(&registry_cond);
	pthread_mutex_unlock(&registry_lock);
}

static bool listener_closed(loop_listener_t *ll)
{
	pthread_mutex_lock(&registry_lock);
	bool closed = ll->closed;
	pthread_mutex_unlock(&registry_lock);
	return closed;
}

/* Sleep in slices so that close and cancel stay prompt. */
static void delay_us(loop_conn_t *lc, lc__batch_t *b, uint64_t us)
{
	uint64_t end = lc__now_ns() + us * 1000;
	while (!lc__batch_is_completed(b)) {
		uint64_t now = lc__now_ns();
		if (now >= end)
			return;
		pthread_mutex_lock(&lc->lock);
		bool stop = lc->stop;
		pthread_mutex_unlock(&lc->lock);
		if (stop)
			return;
		uint64_t slice = LC__MIN(end - now, 1000000ull);
		struct timespec ts = {0, (long)slice};
		nanosleep(&ts, NULL);
	}
}

enum write_outcome { WRITE_APPLIED, WRITE_FAILED, WRITE_DROPPED };

/* who: the id of the token the connection presented (seam.h). */
static enum write_outcome apply_write(loop_conn_t *lc, loop_listener_t *ll, uint64_t who,
				      lc__batch_t *b, const lc_write_t *w,
				      const lc_loop_faults_t *f)
{
	uint64_t k = ++lc->writes_seen;
	if (f->mask & LC_FAULT_DELAY)
		delay_us(lc, b, f->delay_us);
	if (listener_closed(ll)) {
		lc__batch_fail(b, LC_ERR_PEER_CLOSED, "loop://%s closed during the batch",
			       lc->name);
		return WRITE_FAILED;
	}
	if ((f->mask & LC_FAULT_FAIL_WRITE) && k == f->fail_write) {
		lc__batch_fail(b, LC_ERR_INJECTED, "injected failure at write %llu",
			       (unsigned long long)k);
		return WRITE_FAILED;
	}
	if ((f->mask & LC_FAULT_DROP_WRITE) && k == f->drop_write)
		return WRITE_DROPPED;
	if ((f->mask & LC_FAULT_FAIL_ROOM) && b->room == f->fail_room) {
		lc__batch_fail(b, LC_ERR_INJECTED, "injected failure for room %llu",
			       (unsigned long long)b->room);
		return WRITE_FAILED;
	}
	if ((f->mask & LC_FAULT_FAIL_TAG) && b->tag == f->fail_tag) {
		lc__batch_fail(b, LC_ERR_INJECTED, "injected failure for tag %u", b->tag);
		return WRITE_FAILED;
	}
	if (w->count > 1) { /* strided: one descriptor, its blocks land in turn */
		int rc = lc__land_strided(ll->owner->ctx, who, b->room, w->remote_region,
					  w->remote_offset, w->local, w->length, w->count,
					  w->local_stride, w->remote_stride);
		if (rc) {
			lc__batch_fail(b, rc,
				       "loop://%s rejected strided write %llu (region %u, offset "
				       "%llu, %u x %llu bytes, room %llu): %s",
				       lc->name, (unsigned long long)k, w->remote_region,
				       (unsigned long long)w->remote_offset, w->count,
				       (unsigned long long)w->length, (unsigned long long)b->room,
				       lc_strerror(rc));
			return WRITE_FAILED;
		}
		lc->bytes_landed += (uint64_t)w->count * w->length;
		return WRITE_APPLIED;
	}
	uint64_t len = w->length;
	bool cut = false;
	if (f->mask & LC_FAULT_FAIL_AFTER_BYTES) {
		uint64_t left = f->fail_after_bytes > lc->bytes_landed
					? f->fail_after_bytes - lc->bytes_landed
					: 0;
		if (len > left) {
			len = left;
			cut = true;
		}
	}
	lc_ctx_t *rctx = ll->owner->ctx;
	int rc = len ? lc__land_write(rctx, who, b->room, w->remote_region, w->remote_offset,
				      w->local, len)
		     : 0;
	if (rc) {
		lc__batch_fail(b, rc,
			       "loop://%s rejected write %llu (region %u, offset %llu, "
			       "%llu bytes, room %llu): %s",
			       lc->name, (unsigned long long)k, w->remote_region,
			       (unsigned long long)w->remote_offset, (unsigned long long)w->length,
			       (unsigned long long)b->room, lc_strerror(rc));
		return WRITE_FAILED;
	}
	lc->bytes_landed += len;
	if (cut) {
		lc__batch_fail(b, LC_ERR_INJECTED, "injected failure after %llu bytes",
			       (unsigned long long)f->fail_after_bytes);
		return WRITE_FAILED;
	}
	return WRITE_APPLIED;
}

static void run_batch(loop_conn_t *lc, lc__batch_t *b)
{
	lc_loop_faults_t f;
	loop_listener_t *ll = listener_get(lc->name);
	if (!ll) {
		lc__batch_fail(b, LC_ERR_UNREACHABLE, "no loop listener named '%s'", lc->name);
		return;
	}
	uint64_t who;
	if (!lc__ctx_token_accepted(ll->owner->ctx, lc->conn->token.bytes, lc->conn->has_token,
				    &who)) {
		LC__COUNT(ll->owner->ctx, conns_rejected_auth);
		lc__batch_fail(b, LC_ERR_AUTH, "loop://%s rejected the session token", lc->name);
		listener_put(ll);
		return;
	}
	pthread_mutex_lock(&lc->lock);
	f = lc->faults;
	pthread_mutex_unlock(&lc->lock);
	for (size_t i = 0; i < b->nwrites && !lc__batch_is_completed(b); i++) {
		enum write_outcome o = apply_write(lc, ll, who, b, &b->writes[i], &f);
		if (o != WRITE_APPLIED)
			break;
		lc__batch_applied(b, 1);
	}
	listener_put(ll);
}

static void *loop_worker(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-loop");
	loop_conn_t *lc = arg;
	for (;;) {
		pthread_mutex_lock(&lc->lock);
		while (!lc->stop && lc->count == 0)
			pthread_cond_wait(&lc->cond, &lc->lock);
		if (lc->stop) {
			pthread_mutex_unlock(&lc->lock);
			return NULL;
		}
		lc__batch_t *b = lc->queue[lc->head];
		lc->head = (lc->head + 1) % lc->cap;
		lc->count--;
		pthread_mutex_unlock(&lc->lock);
		if (!lc__batch_is_completed(b))
			run_batch(lc, b);
		lc__batch_unref(b);
	}
}

static int parse_faults(const char *url, lc_loop_faults_t *f)
{
	static const struct {
		const char *key;
		uint32_t bit;
		size_t offset;
	} keys[] = {
		{"fail_write", LC_FAULT_FAIL_WRITE, offsetof(lc_loop_faults_t, fail_write)},
		{"drop_write", LC_FAULT_DROP_WRITE, offsetof(lc_loop_faults_t, drop_write)},
		{"delay_us", LC_FAULT_DELAY, offsetof(lc_loop_faults_t, delay_us)},
		{"fail_after_bytes", LC_FAULT_FAIL_AFTER_BYTES,
		 offsetof(lc_loop_faults_t, fail_after_bytes)},
		{"fail_room", LC_FAULT_FAIL_ROOM, offsetof(lc_loop_faults_t, fail_room)},
	};
	uint64_t v;
	memset(f, 0, sizeof *f);
	f->size = sizeof *f;
	for (size_t i = 0; i < LC__ARRAY_SIZE(keys); i++) {
		int rc = lc__url_query_u64(url, keys[i].key, &v);
		if (rc < 0)
			return -EINVAL;
		if (rc) {
			f->mask |= keys[i].bit;
			memcpy((uint8_t *)f + keys[i].offset, &v, sizeof v);
		}
	}
	int rc = lc__url_query_u64(url, "fail_tag", &v);
	if (rc < 0 || (rc && v > UINT32_MAX))
		return -EINVAL;
	if (rc) {
		f->mask |= LC_FAULT_FAIL_TAG;
		f->fail_tag = (uint32_t)v;
	}
	return 0;
}

/* A connection's worker thread, if the context has one left. */
static bool thread_take(lc_ctx_t *ctx, const char *url)
{
	int max = (int)lc__ctx_cfg(ctx, LC__CFG_loop_conn_threads_max);
	if (atomic_fetch_add(&ctx->conn_threads, 1) < max)
		return true;
	atomic_fetch_sub(&ctx->conn_threads, 1);
	uint64_t n = LC__COUNT(ctx, conns_refused_threads) + 1;
	if (!(n & (n - 1))) /* the 1st, 2nd, 4th...: a flood does not flood the log */
		LC__WARN_PEER(
			"loop: refusing %s: %d connection threads running (loop_conn_threads_max); "
			"%llu refused",
			url, max, (unsigned long long)n);
	return false;
}

static int loop_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	if (!thread_take(c->ctx, url))
		return -EAGAIN;
	loop_conn_t *lc = calloc(1, sizeof *lc);
	int rc;
	if (!lc) {
		atomic_fetch_sub(&c->ctx->conn_threads, 1);
		return -ENOMEM;
	}
	rc = parse_faults(url, &lc->faults);
	if (rc)
		goto fail;
	url_name(url, lc->name, sizeof lc->name);
	lc->conn = c;
	lc->cap = 64;
	lc->queue = malloc(lc->cap * sizeof *lc->queue);
	if (!lc->queue) {
		rc = -ENOMEM;
		goto fail;
	}
	pthread_mutex_init(&lc->lock, NULL);
	pthread_cond_init(&lc->cond, NULL);
	rc = -pthread_create(&lc->worker, NULL, loop_worker, lc);
	if (rc) {
		pthread_cond_destroy(&lc->cond);
		pthread_mutex_destroy(&lc->lock);
		goto fail;
	}
	c->priv = lc;
	return 0;
fail:
	free(lc->queue);
	free(lc);
	atomic_fetch_sub(&c->ctx->conn_threads, 1);
	return rc;
}

static void loop_conn_close(lc_conn_t *c)
{
	loop_conn_t *lc = c->priv;
	pthread_mutex_lock(&lc->lock);
	lc->stop = true;
	pthread_cond_signal(&lc->cond);
	pthread_mutex_unlock(&lc->lock);
	pthread_join(lc->worker, NULL);
	for (size_t i = 0; i < lc->count; i++)
		lc__batch_unref(lc->queue[(lc->head + i) % lc->cap]);
	pthread_cond_destroy(&lc->cond);
	pthread_mutex_destroy(&lc->lock);
	free(lc->queue);
	free(lc);
	c->priv = NULL;
	atomic_fetch_sub(&c->ctx->conn_threads, 1);
}

static int loop_post(lc_conn_t *c, lc__batch_t *b)
{
	loop_conn_t *lc = c->priv;
	int rc = 0;
	pthread_mutex_lock(&lc->lock);
	if (lc->count == lc->cap) {
		size_t ncap = lc->cap * 2;
		lc__batch_t **nq = malloc(ncap * sizeof *nq);
		if (!nq) {
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < lc->count; i++)
			nq[i] = lc->queue[(lc->head + i) % lc->cap];
		free(lc->queue);
		lc->queue = nq;
		lc->cap = ncap;
		lc->head = 0;
	}
	lc__batch_ref(b);
	lc->queue[(lc->head + lc->count++) % lc->cap] = b;
	if (!b->defer)
		pthread_cond_signal(&lc->cond);
out:
	pthread_mutex_unlock(&lc->lock);
	return rc;
}

static void loop_flush(lc_conn_t *c)
{
	loop_conn_t *lc = c->priv;
	pthread_mutex_lock(&lc->lock);
	if (lc->count)
		pthread_cond_signal(&lc->cond);
	pthread_mutex_unlock(&lc->lock);
}

extern const lc__transport_ops_t lc__loop_ops;

/* Fault injection belongs to loop:// alone, so it is not in the generic ops
 * table: the public entry point checks the connection is a loop one. */
int lc_loop_set_faults(lc_conn_t *c, const lc_loop_faults_t *faults)
{
	if (!c || !faults || c->ops != &lc__loop_ops)
		return LC__FAIL(-EINVAL, "lc_loop_set_faults: %s",
				!c        ? "conn is NULL"
				: !faults ? "faults is NULL"
					  : "not a loop:// connection");
	loop_conn_t *lc = c->priv;
	lc_loop_faults_t f;
	LC__PARAMS_COPY(&f, faults);
	f.size = sizeof f;
	pthread_mutex_lock(&lc->lock);
	lc->faults = f;
	lc->writes_seen = 0;
	lc->bytes_landed = 0;
	pthread_mutex_unlock(&lc->lock);
	return 0;
}

const lc__transport_ops_t lc__loop_ops = {
	.scheme = "loop",
	.caps = LC__TP_STRIDED | LC__TP_FAULTS,
	.listener = {.listen = loop_listen, .close = loop_listener_close},
	.conn = {.open = loop_conn_open,
		 .close = loop_conn_close,
		 .post = loop_post,
		 .flush = loop_flush},
};
