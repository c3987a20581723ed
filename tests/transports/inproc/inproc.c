/*
 * inproc://NAME: a fifth transport, written only to check that a transport
 * is its folder and one registry line (docs/architecture.md "Adding a
 * transport"); never in the library. In-process: a listener is a name in a
 * process-wide list, a connection a worker thread that lands each batch's
 * writes through the seam (regions, ranges, grants, device memory: none of
 * it here). It packs a region key of its own (the region's length, under
 * LC__KEY_TAG_TEST) and checks it at import, so that descriptors carry a
 * tagged key of a second transport beside ucx's.
 *
 * Capabilities: LC__TP_STRIDED only; the conformance cases that need a
 * remote peer or fault injection skip by capability.
 *
 * Threading: `lock` guards the listener list and the references a worker
 * holds on a listener while it lands; a listener's close waits for them.
 * Each connection's queue is under its own lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

typedef struct inproc_listener {
	lc_listener_t *owner;
	char name[LC__URL_MAX];
	int refs;
	struct inproc_listener *next;
} ilistener_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unref = PTHREAD_COND_INITIALIZER;
static ilistener_t *listeners;
static uint64_t auto_names;

typedef struct inproc_conn {
	char name[LC__URL_MAX];
	pthread_t worker;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	lc__batch_t **queue; /* a ring of referenced batches */
	size_t head, count, cap;
	bool stop;
} iconn_t;

static void url_name(const char *url, char *name, size_t cap)
{
	const char *n = url + strlen("inproc://");
	snprintf(name, cap, "%.*s", (int)LC__MIN(strcspn(n, "?"), cap - 1), n);
}

static int inproc_listen(lc_listener_t *l, const char *url)
{
	ilistener_t *il = calloc(1, sizeof *il);
	if (!il)
		return -ENOMEM;
	il->owner = l;
	url_name(url, il->name, sizeof il->name);
	pthread_mutex_lock(&lock);
	if (!il->name[0] || !strcmp(il->name, "auto"))
		snprintf(il->name, sizeof il->name, "auto-%llu", (unsigned long long)++auto_names);
	for (ilistener_t *o = listeners; o; o = o->next) {
		if (!strcmp(o->name, il->name)) {
			pthread_mutex_unlock(&lock);
			free(il);
			return -EEXIST;
		}
	}
	il->next = listeners;
	listeners = il;
	pthread_mutex_unlock(&lock);
	snprintf(l->url, sizeof l->url, "inproc://%.*s", (int)(sizeof l->url - 10), il->name);
	l->priv = il;
	return 0;
}

static void inproc_listener_close(lc_listener_t *l)
{
	ilistener_t *il = l->priv;
	pthread_mutex_lock(&lock);
	for (ilistener_t **pp = &listeners; *pp; pp = &(*pp)->next)
		if (*pp == il) {
			*pp = il->next;
			break;
		}
	while (il->refs > 0)
		pthread_cond_wait(&unref, &lock);
	pthread_mutex_unlock(&lock);
	free(il);
}

/* The listener named `name`, referenced; NULL if none. */
static ilistener_t *listener_get(const char *name)
{
	ilistener_t *il;
	pthread_mutex_lock(&lock);
	for (il = listeners; il && strcmp(il->name, name); il = il->next)
		;
	if (il)
		il->refs++;
	pthread_mutex_unlock(&lock);
	return il;
}

static void listener_put(ilistener_t *il)
{
	pthread_mutex_lock(&lock);
	if (--il->refs == 0)
		pthread_cond_broadcast(&unref);
	pthread_mutex_unlock(&lock);
}

/* Land every write of b at the listener's context, in order. */
static void run_batch(iconn_t *ic, lc__batch_t *b)
{
	ilistener_t *il = listener_get(ic->name);
	if (!il) {
		lc__batch_fail(b, LC_ERR_UNREACHABLE, "no inproc listener named '%s'", ic->name);
		return;
	}
	lc_ctx_t *rx = il->owner->ctx;
	uint64_t who;
	if (!lc__ctx_token_accepted(rx, b->conn->token.bytes, b->conn->has_token, &who)) {
		LC__COUNT(rx, conns_rejected_auth);
		lc__batch_fail(b, LC_ERR_AUTH, "inproc://%s rejected the session token", ic->name);
		listener_put(il);
		return;
	}
	for (size_t i = 0; i < b->nwrites && !lc__batch_is_completed(b); i++) {
		const lc_write_t *w = &b->writes[i];
		int rc = lc__land_strided(rx, who, b->room, w->remote_region, w->remote_offset,
					  w->local, w->length, w->count, w->local_stride,
					  w->remote_stride);
		if (rc) {
			lc__batch_fail(b, rc, "inproc://%s rejected write %zu (region %u): %s",
				       ic->name, i, w->remote_region, lc_strerror(rc));
			break;
		}
		lc__batch_applied(b, 1);
	}
	listener_put(il);
}

static void *worker(void *arg)
{
	iconn_t *ic = arg;
	pthread_mutex_lock(&ic->lock);
	for (;;) {
		while (!ic->stop && ic->count == 0)
			pthread_cond_wait(&ic->cond, &ic->lock);
		if (ic->stop)
			break;
		lc__batch_t *b = ic->queue[ic->head];
		ic->head = (ic->head + 1) % ic->cap;
		ic->count--;
		pthread_mutex_unlock(&ic->lock);
		if (!lc__batch_is_completed(b))
			run_batch(ic, b);
		lc__batch_unref(b);
		pthread_mutex_lock(&ic->lock);
	}
	pthread_mutex_unlock(&ic->lock);
	return NULL;
}

static int inproc_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	(void)p;
	iconn_t *ic = calloc(1, sizeof *ic);
	if (!ic || !(ic->queue = malloc(64 * sizeof *ic->queue))) {
		free(ic);
		return -ENOMEM;
	}
	ic->cap = 64;
	url_name(url, ic->name, sizeof ic->name);
	pthread_mutex_init(&ic->lock, NULL);
	pthread_cond_init(&ic->cond, NULL);
	int rc = -pthread_create(&ic->worker, NULL, worker, ic);
	if (rc) {
		pthread_cond_destroy(&ic->cond);
		pthread_mutex_destroy(&ic->lock);
		free(ic->queue);
		free(ic);
		return rc;
	}
	c->priv = ic;
	return 0;
}

static void inproc_conn_close(lc_conn_t *c)
{
	iconn_t *ic = c->priv;
	pthread_mutex_lock(&ic->lock);
	ic->stop = true;
	pthread_cond_signal(&ic->cond);
	pthread_mutex_unlock(&ic->lock);
	pthread_join(ic->worker, NULL);
	for (size_t i = 0; i < ic->count; i++)
		lc__batch_unref(ic->queue[(ic->head + i) % ic->cap]);
	pthread_cond_destroy(&ic->cond);
	pthread_mutex_destroy(&ic->lock);
	free(ic->queue);
	free(ic);
	c->priv = NULL;
}

static int inproc_post(lc_conn_t *c, lc__batch_t *b)
{
	iconn_t *ic = c->priv;
	pthread_mutex_lock(&ic->lock);
	if (ic->count == ic->cap) {
		lc__batch_t **nq = malloc(2 * ic->cap * sizeof *nq);
		if (!nq) {
			pthread_mutex_unlock(&ic->lock);
			return -ENOMEM;
		}
		for (size_t i = 0; i < ic->count; i++)
			nq[i] = ic->queue[(ic->head + i) % ic->cap];
		free(ic->queue);
		ic->queue = nq;
		ic->cap *= 2;
		ic->head = 0;
	}
	lc__batch_ref(b);
	ic->queue[(ic->head + ic->count++) % ic->cap] = b;
	if (!b->defer)
		pthread_cond_signal(&ic->cond);
	pthread_mutex_unlock(&ic->lock);
	return 0;
}

static void inproc_flush(lc_conn_t *c)
{
	iconn_t *ic = c->priv;
	pthread_mutex_lock(&ic->lock);
	pthread_cond_signal(&ic->cond);
	pthread_mutex_unlock(&ic->lock);
}

/* The key: the region's length, 8 bytes. */
static int inproc_pack_region(lc_ctx_t *ctx, void *state, const lc_region_t *r, uint8_t *buf,
			      size_t cap)
{
	(void)ctx, (void)state;
	if (cap < 8)
		return -ENOSPC;
	lc__put_u64(buf, r->len);
	return 8;
}

/* The key comes from the network: exactly 8 bytes saying the length. */
static int inproc_import_region(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *key,
				size_t key_len)
{
	(void)c;
	if (key_len != 8 || lc__get_u64(key) != desc->length)
		return LC_ERR_PROTO;
	return 0;
}

const lc__transport_ops_t lc__inproc_ops = {
	.scheme = "inproc",
	.caps = LC__TP_STRIDED,
	.key_tag = LC__KEY_TAG_TEST,
	.listener = {.listen = inproc_listen, .close = inproc_listener_close},
	.conn = {.open = inproc_conn_open,
		 .close = inproc_conn_close,
		 .post = inproc_post,
		 .flush = inproc_flush,
		 .import_region = inproc_import_region},
	.memory = {.pack_region = inproc_pack_region},
};
