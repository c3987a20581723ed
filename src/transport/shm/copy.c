/*
 * The receiver's copy paths (shm_int.h): a mapped source split between the
 * loop thread and an optional helper thread, and process_vm_readv (CMA)
 * for sources that could not be mapped. Both land through the memory seam
 * in bracketed slices (LC__LAND_SLICE), so a revoke waits for at most one
 * slice; into device memory the seam bounces them (lc__land_fill).
 *
 * The helper (config shm_copy_threads=2) copies the second half of a large
 * write while the loop thread copies the first: one memcpy stream does not
 * saturate memory bandwidth, two come close (docs/transport-shm.md has the
 * figures). Threading: the loop thread posts one job at a time and waits
 * for it under h->lock; the job's fields belong to the helper while busy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "core/copier.h"
#include "transport/shm/shm_int.h"

struct lc__shm_helper {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, busy;        /* busy: a job is posted and not finished */
	const lc__land_t *land; /* the job: land len bytes of src at byte at */
	const uint8_t *src;
	uint64_t at, len;
	bool revoked; /* the helper saw the revoke */
};

static void *helper_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-shm-helper");
	lc__shm_helper_t *h = arg;
	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && (!h->busy || !h->land))
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->stop)
			break;
		pthread_mutex_unlock(&h->lock);
		bool ok = lc__land_copy(h->land, h->at, h->src, h->len) == 0;
		pthread_mutex_lock(&h->lock);
		h->revoked = !ok;
		h->land = NULL;
		h->busy = false;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

lc__shm_helper_t *lc__shm_helper_start(void)
{
	lc__shm_helper_t *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	if (pthread_create(&h->thread, NULL, helper_main, h)) {
		pthread_cond_destroy(&h->cond);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return NULL;
	}
	return h;
}

void lc__shm_helper_stop(lc__shm_helper_t *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

int lc__shm_copy_split(lc__shm_helper_t *h, lc_ctx_t *ctx, uint64_t who, uint64_t room,
		       uint32_t region, uint64_t offset, const uint8_t *src, uint64_t length)
{
	lc__land_t l;
	int rc = lc__land_open(ctx, who, room, region, offset, length, &l);
	if (rc)
		return rc;
	uint64_t half = (length / 2 + 63) & ~(uint64_t)63; /* cache-line split */
	pthread_mutex_lock(&h->lock);
	h->land = &l;
	h->src = src + half;
	h->at = half;
	h->len = length - half;
	h->busy = true;
	h->revoked = false;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	bool ok = lc__land_copy(&l, 0, src, half) == 0;
	pthread_mutex_lock(&h->lock);
	while (h->busy)
		pthread_cond_wait(&h->cond, &h->lock);
	ok = ok && !h->revoked;
	pthread_mutex_unlock(&h->lock);
	if (!ok)
		lc__land_revoked(&l);
	lc__land_done(&l, ok);
	return ok ? 0 : LC_ERR_GRANT;
}

/* ---- CUDA IPC ---- */

/* A source the seam lands by itself (lc__land_fill): an imported CUDA
 * source, copied to host by its device's engine. */
typedef struct ipc_src {
	lc__copier_t *cp;
	uint64_t addr;
} ipc_src_t;

static int64_t ipc_fill(void *arg, uint8_t *buf, uint64_t off, uint64_t k)
{
	ipc_src_t *f = arg;
	int rc = lc__copy_to_host_sync(f->cp, buf, (const void *)(uintptr_t)(f->addr + off),
				       (size_t)k);
	return rc ? rc : (int64_t)k;
}

/* A CUDA destination: device to device on its own engine's stream, in
 * bracketed slices. 0, LC_ERR_GRANT (revoked) or the copy's error. */
static int ipc_dev_to_dev(const lc__land_t *l, uint64_t at, uint64_t src, uint64_t n)
{
	int rc = 0;
	for (uint64_t done = 0; done < n && !rc;) {
		size_t k = (size_t)LC__MIN(n - done, (uint64_t)LC__LAND_SLICE);
		if (!lc__land_enter(l))
			return LC_ERR_GRANT;
		rc = lc__copy_dev_to_dev_sync(l->cp, l->dev + at + done,
					      (const void *)(uintptr_t)(src + done), k);
		lc__land_exit(l);
		done += k;
	}
	return rc;
}

int lc__shm_copy_ipc(lc_ctx_t *ctx, uint64_t who, int device, uint64_t room, uint32_t region,
		     uint64_t offset, uint64_t src, const lc__shm_write_t *w)
{
	lc__land_t l;
	ipc_src_t f = {0};
	uint32_t blocks = w->count > 1 ? w->count : 1;
	uint64_t length = w->length, span = length;
	int rc = blocks > 1 ? lc__land_strided_span(ctx, room, offset, length, w->count,
						    w->dst_stride, &span)
			    : 0;
	if (rc || (rc = lc__land_open(ctx, who, room, region, offset, span, &l)))
		return rc;
	/* The engine of the device the source was imported into, for copies
	 * that leave device memory for the host. */
	bool d2d = l.dev && l.cp->kind == LC_MEM_KIND_CUDA;
	if (!d2d)
		rc = lc__copier_get(ctx, LC_MEM_KIND_CUDA, device, &f.cp);
	for (uint32_t b = 0; b < blocks && !rc; b++) {
		uint64_t at = (uint64_t)b * w->dst_stride;
		f.addr = src + (uint64_t)b * w->src_stride;
		rc = d2d ? ipc_dev_to_dev(&l, at, f.addr, length)
			 : lc__land_fill(&l, at, length, ipc_fill, &f);
		if (!rc && blocks > 1)
			lc__land_block_done(&l, at, length);
	}
	if (rc == LC_ERR_GRANT) {
		lc__land_revoked(&l);
	} else if (rc) {
		LC__COUNT(ctx, device_copy_errors);
		LC__WARN("room %llu: CUDA IPC copy into region %u failed: %s",
			 (unsigned long long)room, region, lc_strerror(rc));
		rc = LC_ERR_IO;
	}
	if (blocks > 1 && !rc)
		LC__COUNT(ctx, writes_applied); /* blocks were accounted one by one */
	lc__land_done(&l, rc == 0 && blocks == 1);
	return rc;
}

/* P's memory, read by the kernel (process_vm_readv). */
typedef struct cma_src {
	pid_t pid;
	uint64_t addr;
} cma_src_t;

static int64_t cma_fill(void *arg, uint8_t *buf, uint64_t off, uint64_t k)
{
	cma_src_t *f = arg;
	struct iovec lv = {buf, (size_t)k}, rv = {(void *)(uintptr_t)(f->addr + off), (size_t)k};
	ssize_t got = process_vm_readv(f->pid, &lv, 1, &rv, 1, 0);
	if (got <= 0)
		return got < 0 && errno == EPERM ? -ENOTSUP : LC_ERR_IO;
	return got;
}

/* The kernel copies from P's memory straight into place inside the seam's
 * bracket, slice by slice (into device memory: through the seam's bounce). */
int lc__shm_copy_cma(lc_ctx_t *ctx, uint64_t who, pid_t pid, uint64_t room, uint32_t region,
		     uint64_t offset, uint64_t p_addr, uint64_t length)
{
	lc__land_t l;
	int rc = lc__land_open(ctx, who, room, region, offset, length, &l);
	if (rc)
		return rc;
	rc = lc__land_fill(&l, 0, length, cma_fill, &(cma_src_t){.pid = pid, .addr = p_addr});
	if (rc == LC_ERR_GRANT)
		lc__land_revoked(&l);
	lc__land_done(&l, rc == 0);
	return rc;
}
