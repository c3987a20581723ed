/* Copy engines of a context by memory kind (copier.h). */
#include <errno.h>
#include <pthread.h>

#include "core/copier.h"
#include "core/copier_cuda.h"
#include "core/ctx.h"

int lc__copier_get(lc_ctx_t *ctx, int kind, int device, lc__copier_t **out)
{
	lc__copier_t *_Atomic *slot;
	if (kind == LC_MEM_KIND_SIM)
		slot = &ctx->copy_sim;
	else if (kind == LC_MEM_KIND_CUDA && device >= 0 && device < LC__COPIER_DEVICES)
		slot = &ctx->copy_cuda[device];
	else
		return kind == LC_MEM_KIND_CUDA ? -EINVAL : LC_ERR_MEM_KIND;
	lc__copier_t *c = atomic_load_explicit(slot, memory_order_acquire);
	if (c) {
		*out = c;
		return 0;
	}
	int rc = 0;
	pthread_mutex_lock(&ctx->copy_lock);
	c = atomic_load(slot);
	if (!c) {
		/* CUDA: copier_cuda.c, through the driver shim (LC_ENOTSUP
		 * where libcuda cannot be loaded). */
		rc = kind == LC_MEM_KIND_SIM ? lc__copy_sim_create(ctx, &c)
					     : lc__copier_cuda_create(ctx, device, &c);
		if (!rc)
			atomic_store_explicit(slot, c, memory_order_release);
	}
	pthread_mutex_unlock(&ctx->copy_lock);
	if (!rc)
		*out = c;
	return rc;
}

static lc__copier_t *take(lc__copier_t *_Atomic *slot)
{
	return atomic_exchange(slot, NULL);
}

int lc__copiers_drain(lc_ctx_t *ctx, uint64_t deadline_ns)
{
	int rc = 0;
	lc__copier_t *c = atomic_load(&ctx->copy_sim);
	if (c)
		rc = c->ops->drain(c, deadline_ns);
	for (int i = 0; i < LC__COPIER_DEVICES && !rc; i++)
		if ((c = atomic_load(&ctx->copy_cuda[i])))
			rc = c->ops->drain(c, deadline_ns);
	return rc;
}

void lc__copiers_fini(lc_ctx_t *ctx)
{
	lc__copier_t *c = take(&ctx->copy_sim);
	if (c)
		c->ops->destroy(c);
	for (int i = 0; i < LC__COPIER_DEVICES; i++)
		if ((c = take(&ctx->copy_cuda[i])))
			c->ops->destroy(c);
}

/* A copy waited for. */
typedef struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int status;
} sync_wait_t;

static void sync_done(void *arg, int status)
{
	sync_wait_t *w = arg;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	w->status = status;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* dir: 1 host -> device, 0 device -> host, 2 device (host) -> device. */
static int sync_copy(lc__copier_t *c, void *dev, void *host, size_t len, int dir)
{
	sync_wait_t w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	if (dir == 2 && !c->ops->dev_to_dev)
		return LC_ENOTSUP;
	int rc = dir == 1   ? c->ops->from_host(c, dev, host, len, sync_done, &w)
		 : dir == 0 ? c->ops->to_host(c, host, dev, len, sync_done, &w)
			    : c->ops->dev_to_dev(c, dev, host, len, sync_done, &w);
	if (rc)
		return rc;
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return w.status;
}

int lc__copy_to_dev_sync(lc__copier_t *c, void *dev, const void *host, size_t len)
{
	if (c->ops->from_host_now)
		return c->ops->from_host_now(c, dev, host, len);
	return sync_copy(c, dev, (void *)(uintptr_t)host, len, 1);
}

int lc__copy_dev_to_dev_sync(lc__copier_t *c, void *dst, const void *src, size_t len)
{
	return sync_copy(c, dst, (void *)(uintptr_t)src, len, 2);
}

int lc__copy_to_host_sync(lc__copier_t *c, void *host, const void *dev, size_t len)
{
	return sync_copy(c, (void *)(uintptr_t)dev, host, len, 0);
}
