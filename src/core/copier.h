/*
 * Copy engines (docs/gpu.md): how bytes move between host memory
 * and memory the CPU must not touch (a GPU's, or the simulated device
 * memory of LC_MEM_KIND_SIM). One engine per (context, memory kind, device),
 * made on first use; the memory seam (src/transport/seam.h) stages device
 * sources and landings through it, so that no CPU pointer is ever
 * dereferenced into device memory.
 *
 * Every copy is asynchronous: the call queues it and returns 0 (or a
 * negative errno / LC_ERR_* without queueing), and `done` runs exactly once
 * later, on a thread of the engine, with 0 or the error. The host side of a
 * copy stays valid and untouched by the caller until `done`. Copies queued
 * on one engine complete in order.
 *
 * Implementations: src/core/copier_sim.c (LC_MEM_KIND_SIM: a worker thread, pread/
 * pwrite on the memfd behind the PROT_NONE range), src/core/copier_cuda.c
 * (LC_MEM_CUDA: a stream per device and context, events, libcuda through
 * src/core/cuda.h, loaded with dlopen at first use).
 */
#ifndef LC_CORE_COPIER_H
#define LC_CORE_COPIER_H

#include <stddef.h>
#include <stdint.h>

typedef void (*lc__copy_done_fn)(void *arg, int status);

typedef struct lc__copier lc__copier_t;

typedef struct lc__copier_ops {
	const char *name; /* "sim", "cuda" */
	/* host <- device */
	int (*to_host)(lc__copier_t *c, void *host, const void *dev, size_t len,
		       lc__copy_done_fn done, void *arg);
	/* device <- host */
	int (*from_host)(lc__copier_t *c, void *dev, const void *host, size_t len,
			 lc__copy_done_fn done, void *arg);
	/* device <- device, same kind (CUDA IPC, the sim); NULL if none */
	int (*dev_to_dev)(lc__copier_t *c, void *dst, const void *src, size_t len,
			  lc__copy_done_fn done, void *arg);
	/* Wait (bounded by deadline_ns, CLOCK_MONOTONIC; 0: none) until every
	 * copy queued so far has called `done`. 0, or -ETIMEDOUT. */
	int (*drain)(lc__copier_t *c, uint64_t deadline_ns);
	void (*destroy)(lc__copier_t *c); /* drains first */
	/* Optional (added with the sim): device <- host on the calling
	 * thread, returning when the bytes are in place, for an engine whose
	 * copy is CPU work anyway (the sim's pwrite). The memory seam's
	 * landings wait for their copy; this saves them two thread hand-offs
	 * per slice. NULL: lc__copy_to_dev_sync queues from_host and waits. */
	int (*from_host_now)(lc__copier_t *c, void *dev, const void *host, size_t len);
} lc__copier_ops_t;

struct lc__copier {
	const lc__copier_ops_t *ops;
	int kind;   /* lc_mem_kind_t */
	int device; /* ordinal (CUDA), 0 for the sim */
};

struct lc_ctx;

/* Copy engines of a context, by kind and device (copier.c): made at first
 * use and kept until the context is destroyed. LC_ERR_MEM_KIND for a kind
 * without engine (host, pinned), LC_ENOTSUP for CUDA where none is built
 * or no driver is found. Thread-safe. */
#define LC__COPIER_DEVICES 16
int lc__copier_get(struct lc_ctx *ctx, int kind, int device, lc__copier_t **out);
/* Wait (bounded by deadline_ns; 0: none) for every copy queued so far on
 * every engine of the context. */
int lc__copiers_drain(struct lc_ctx *ctx, uint64_t deadline_ns);
/* Destroy every engine (each drains first). */
void lc__copiers_fini(struct lc_ctx *ctx);
/* Queue a copy and wait for it: 0 or the error (the copy's own, or the
 * queueing's). For callers that must not return before the bytes are in
 * place (the memory seam's landings). */
int lc__copy_to_dev_sync(lc__copier_t *c, void *dev, const void *host, size_t len);
int lc__copy_to_host_sync(lc__copier_t *c, void *host, const void *dev, size_t len);
/* dev_to_dev, waited for (LC_ENOTSUP where the engine has none): shm's
 * CUDA IPC landings. */
int lc__copy_dev_to_dev_sync(lc__copier_t *c, void *dst, const void *src, size_t len);

/* The engines (copier_sim.c; copier_cuda.c where built). */
int lc__copy_sim_create(struct lc_ctx *ctx, lc__copier_t **out);

#endif
