/*
 * Step records a CUDA stream writes (docs/gpu.md, "The GPU step counter").
 * lc_engine_record_cache_on_stream enqueues one cuStreamWriteValue64 of the
 * counter's next absolute value into the engine's counter word: no kernel,
 * ordered after the layer's work on that stream (a replayed CUDA graph
 * would replay the captured values: not supported, docs/gpu.md). The words are host memory registered once (DEVICEMAP | PORTABLE)
 * on first use; from then on the engine thread polls them adaptively, as
 * for external_counter, since a GPU cannot write an eventfd.
 *
 * The value is absolute, so the library counts what was enqueued (gpu.next)
 * on the recording thread's side: reading the word at enqueue time would
 * give what the GPU has done, not what was queued before it. The same count
 * is held against the reservation: a record no batch reserved is refused
 * at enqueue, as a CPU record is (reserve.c).
 */
#include <errno.h>

#include "core/ctx.h"
#include "core/cuda.h"
#include "engine/engine_int.h"

void lc__engine_gpu_init(lc_engine_t *e)
{
	pthread_mutex_init(&e->gpu.lock, NULL);
	atomic_store(&e->gpu.active, 0);
}

/* Register the page holding word `which` unless an earlier one covers it;
 * CUDA memory already registered (cudaHostAlloc'ed words) is taken as it
 * is. Needs a current context. */
static int register_word(lc_engine_t *e, int which)
{
	uint64_t *w = e->steps.word[which];
	void *page = (void *)((uintptr_t)w & ~(uintptr_t)4095);
	int rc = 0;
	if (which == LC_STEP_AUX && e->gpu.reg[LC_STEP_CACHE] == page)
		goto mapped;
	rc = lc__cuda_host_register(
		page, 4096, LC__CU_MEMHOSTREGISTER_DEVICEMAP | LC__CU_MEMHOSTREGISTER_PORTABLE);
	if (rc == 0)
		e->gpu.reg[which] = page;
	else if (rc != -EEXIST)
		return rc;
mapped:;
	CUdeviceptr d;
	if ((rc = lc__cuda_host_device_ptr(w, &d)))
		return rc;
	e->gpu.dptr[which] = d;
	return 0;
}

static void unregister_words(lc_engine_t *e)
{
	for (int i = 0; i < 2; i++)
		if (e->gpu.reg[i]) {
			lc__cuda_host_unregister(e->gpu.reg[i]);
			e->gpu.reg[i] = NULL;
		}
}

/* First stream record: map both words in the stream's context, start the
 * stream-side count where the words are, and switch the engine thread to
 * polling (woken so that it does not sleep through the first write). */
static int activate(lc_engine_t *e, CUstream s)
{
	CUcontext c = NULL;
	int rc = lc__cuda_stream_ctx(s, &c);
	if (rc)
		return rc;
	if ((rc = lc__cuda_ctx_push(c)))
		return rc;
	if ((rc = register_word(e, LC_STEP_CACHE)) == 0)
		rc = register_word(e, LC_STEP_AUX);
	if (rc)
		unregister_words(e);
	lc__cuda_ctx_pop();
	if (rc)
		return rc;
	e->gpu.cu_ctx = c;
	e->gpu.next[LC_STEP_CACHE] = lc__steps_read(&e->steps, LC_STEP_CACHE);
	e->gpu.next[LC_STEP_AUX] = lc__steps_read(&e->steps, LC_STEP_AUX);
	atomic_store(&e->gpu.active, 1);
	lc__engine_wake(e);
	LC__INFO("engine %s: step counters written by CUDA streams from now on", e->name);
	return 0;
}

static int record_on_stream(lc_engine_t *e, int which, void *stream)
{
	if (!e)
		return -EINVAL;
	int rc = lc__cuda_load();
	if (rc)
		return rc;
	CUstream s = stream;
	pthread_mutex_lock(&e->gpu.lock);
	/* As for CPU records, the step must have been reserved: counted here
	 * against what was enqueued, since the GPU writes it later. */
	uint64_t at = atomic_load(&e->gpu.active) ? e->gpu.next[which]
						  : lc__steps_read(&e->steps, which);
	if (!lc__step_ready(lc__steps_bound(&e->steps, which), at)) {
		pthread_mutex_unlock(&e->gpu.lock);
		return lc__engine_refuse_record(e, which, at);
	}
	if (!atomic_load(&e->gpu.active) && (rc = activate(e, s)))
		goto out;
	/* The registering context current for the call (the legacy default
	 * stream is the current context's); a no-op push where the caller's
	 * thread has it current already, as PyTorch's threads do. */
	if ((rc = lc__cuda_ctx_push(e->gpu.cu_ctx)))
		goto out;
	uint64_t v = lc__step_add(e->gpu.next[which], 1);
	rc = lc__cuda_write_value64(s, e->gpu.dptr[which], v);
	lc__cuda_ctx_pop();
	if (rc)
		goto out;
	e->gpu.next[which] = v;
	e->gpu.enqueued++;
out:
	pthread_mutex_unlock(&e->gpu.lock);
	if (rc && rc != LC_ENOTSUP)
		LC__COUNT(e->ctx, cuda_errors);
	return rc;
}

int lc_engine_record_cache_on_stream(lc_engine_t *e, void *cu_stream)
{
	return record_on_stream(e, LC_STEP_CACHE, cu_stream);
}

int lc_engine_record_aux_on_stream(lc_engine_t *e, void *cu_stream)
{
	return record_on_stream(e, LC_STEP_AUX, cu_stream);
}

void lc__engine_gpu_fini(lc_engine_t *e)
{
	pthread_mutex_lock(&e->gpu.lock);
	if (atomic_load(&e->gpu.active) && lc__cuda_ctx_push(e->gpu.cu_ctx) == 0) {
		/* A write still queued would land in freed memory. */
		lc__cuda_ctx_synchronize();
		unregister_words(e);
		lc__cuda_ctx_pop();
	}
	pthread_mutex_unlock(&e->gpu.lock);
	pthread_mutex_destroy(&e->gpu.lock);
}
