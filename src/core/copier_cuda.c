/*
 * The CUDA copy engine (src/core/copier.h, docs/gpu.md): one non-blocking
 * stream in the device's primary context per engine; each copy is enqueued
 * with an event recorded after it, and one worker thread waits for the
 * events in order (cuEventSynchronize on BLOCKING_SYNC events: it sleeps in
 * the driver, it does not spin) and runs `done`.
 *
 * Why events and a thread of ours rather than cuLaunchHostFunc: a host
 * function runs on a driver thread that must not call CUDA, and `done`
 * does (a staging pipeline queues the next chunk's copy from it); a host
 * function also stalls its stream until it returns, and stops a copy
 * engine from running ahead. The events cost one thread per engine.
 *
 * Threading: c->lock protects the job queue and the counts; the stream is
 * used by submitters under c->lock (one order of enqueue = one order on the
 * stream = the order the worker completes them in).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/copier_cuda.h"
#include "core/ctx.h"
#include "core/cuda.h"

typedef struct job {
	struct job *next;
	CUevent ev;
	lc__copy_done_fn done;
	void *arg;
} job_t;

typedef struct cuda_copier {
	lc__copier_t base;
	lc_ctx_t *ctx;
	CUcontext cu;
	CUstream stream;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t more, progress; /* worker: jobs queued; drain: jobs done */
	job_t *head, **tail, *spare;   /* queued in stream order; recycled jobs */
	uint64_t queued, completed;
	bool stop;
} cuda_copier_t;

static cuda_copier_t *of(lc__copier_t *c)
{
	return LC__CONTAINER_OF(c, cuda_copier_t, base);
}

static void *worker(void *arg)
{
	cuda_copier_t *c = arg;
	pthread_setname_np(pthread_self(), "lc-cuda-copy");
	lc__cuda_ctx_set(c->cu);
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->head && !c->stop)
			pthread_cond_wait(&c->more, &c->lock);
		if (!c->head)
			break;
		job_t *j = c->head;
		pthread_mutex_unlock(&c->lock);
		int rc = lc__cuda_event_synchronize(j->ev);
		if (rc)
			LC__COUNT(c->ctx, cuda_errors);
		j->done(j->arg, rc);
		pthread_mutex_lock(&c->lock);
		c->head = j->next;
		if (!c->head)
			c->tail = &c->head;
		j->next = c->spare;
		c->spare = j;
		c->completed++;
		pthread_cond_broadcast(&c->progress);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

enum dir { TO_HOST, FROM_HOST, DEV_TO_DEV };

/* Enqueue the copy and its event in the engine's context; on failure
 * nothing is queued and done never runs. */
static int submit(lc__copier_t *base, enum dir d, void *dst, const void *src, size_t len,
		  lc__copy_done_fn done, void *arg)
{
	cuda_copier_t *c = of(base);
	int rc;
	if (!done || !dst || !src || !len)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	job_t *j = c->spare;
	if (j)
		c->spare = j->next;
	else if (!(j = calloc(1, sizeof(*j)))) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = lc__cuda_ctx_push(c->cu)))
		goto recycle;
	if (!j->ev && (rc = lc__cuda_event_create(&j->ev)))
		goto pop;
	if (d == TO_HOST)
		rc = lc__cuda_memcpy_dtoh_async(dst, (CUdeviceptr)(uintptr_t)src, len, c->stream);
	else if (d == FROM_HOST)
		rc = lc__cuda_memcpy_htod_async((CUdeviceptr)(uintptr_t)dst, src, len, c->stream);
	else
		rc = lc__cuda_memcpy_dtod_async((CUdeviceptr)(uintptr_t)dst,
						(CUdeviceptr)(uintptr_t)src, len, c->stream);
	if (rc == 0)
		rc = lc__cuda_event_record(j->ev, c->stream);
pop:
	lc__cuda_ctx_pop();
	if (rc) {
		/* A copy queued without its event still completes before the
		 * next event: ordering holds; only this call reports failure. */
		LC__COUNT(c->ctx, cuda_errors);
		goto recycle;
	}
	j->done = done;
	j->arg = arg;
	j->next = NULL;
	*c->tail = j;
	c->tail = &j->next;
	c->queued++;
	pthread_cond_signal(&c->more);
	goto out;
recycle:
	j->next = c->spare;
	c->spare = j;
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int to_host(lc__copier_t *c, void *host, const void *dev, size_t len, lc__copy_done_fn done,
		   void *arg)
{
	return submit(c, TO_HOST, host, dev, len, done, arg);
}

static int from_host(lc__copier_t *c, void *dev, const void *host, size_t len,
		     lc__copy_done_fn done, void *arg)
{
	return submit(c, FROM_HOST, dev, host, len, done, arg);
}

static int dev_to_dev(lc__copier_t *c, void *dst, const void *src, size_t len,
		      lc__copy_done_fn done, void *arg)
{
	return submit(c, DEV_TO_DEV, dst, src, len, done, arg);
}

static int drain(lc__copier_t *base, uint64_t deadline_ns)
{
	cuda_copier_t *c = of(base);
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	uint64_t target = c->queued;
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
			      .tv_nsec = (long)(deadline_ns % 1000000000u)};
	while (c->completed < target && rc == 0) {
		if (!deadline_ns)
			pthread_cond_wait(&c->progress, &c->lock);
		else if (pthread_cond_timedwait(&c->progress, &c->lock, &ts) == ETIMEDOUT)
			rc = c->completed < target ? -ETIMEDOUT : 0;
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static void destroy(lc__copier_t *base)
{
	cuda_copier_t *c = of(base);
	drain(base, 0);
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->more);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	if (lc__cuda_ctx_push(c->cu) == 0) {
		for (job_t *j = c->spare, *n; j; j = n) {
			n = j->next;
			if (j->ev)
				lc__cuda_event_destroy(j->ev);
			free(j);
		}
		lc__cuda_stream_destroy(c->stream);
		lc__cuda_ctx_pop();
	}
	lc__cuda_primary_ctx_release(base->device);
	pthread_cond_destroy(&c->more);
	pthread_cond_destroy(&c->progress);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static const lc__copier_ops_t cuda_ops = {
	.name = "cuda",
	.to_host = to_host,
	.from_host = from_host,
	.dev_to_dev = dev_to_dev,
	.drain = drain,
	.destroy = destroy,
};

/* The stream in the primary context, made current for the call only. */
static int open_stream(cuda_copier_t *c, int device)
{
	int rc = lc__cuda_primary_ctx_retain(device, &c->cu);
	if (rc)
		return rc;
	if ((rc = lc__cuda_ctx_push(c->cu)) == 0) {
		rc = lc__cuda_stream_create(&c->stream);
		lc__cuda_ctx_pop();
	}
	if (rc)
		lc__cuda_primary_ctx_release(device);
	return rc;
}

int lc__copier_cuda_create(lc_ctx_t *ctx, int device, lc__copier_t **out)
{
	int rc;
	if (!ctx || !out)
		return -EINVAL;
	if ((rc = lc__cuda_load()))
		return rc;
	cuda_copier_t *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->base.ops = &cuda_ops;
	c->base.kind = LC_MEM_KIND_CUDA;
	c->base.device = device;
	c->ctx = ctx;
	c->tail = &c->head;
	if ((rc = open_stream(c, device)))
		goto fail_free;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->progress, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&c->more, NULL);
	pthread_mutex_init(&c->lock, NULL);
	if ((rc = -pthread_create(&c->thread, NULL, worker, c)))
		goto fail_sync;
	LC__INFO("cuda copier: device %d, stream %p", device, (void *)c->stream);
	*out = &c->base;
	return 0;

fail_sync:
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->more);
	pthread_cond_destroy(&c->progress);
	if (lc__cuda_ctx_push(c->cu) == 0) {
		lc__cuda_stream_destroy(c->stream);
		lc__cuda_ctx_pop();
	}
	lc__cuda_primary_ctx_release(device);
fail_free:
	if (rc && rc != LC_ENOTSUP)
		LC__COUNT(ctx, cuda_errors);
	free(c);
	return rc;
}
