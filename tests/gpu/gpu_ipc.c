/*
 * CUDA IPC against cuMemcpyDtoD in one process (docs/gpu.md, "CUDA IPC";
 * run by tests/gpu/run.sh on a GPU). Both sides copy with the CUDA copy
 * engine (src/core/copier_cuda.c, dev_to_dev).
 *
 *   local:  one process, src -> dst, both its own cuMemAlloc's
 *   ipc:    the parent exports src (cuIpcGetMemHandle) and hands the handle
 *           over a pipe; a child (forked before either touches CUDA) opens
 *           it and copies into its own allocation, then checks every byte
 *           (copied back to the host) against the pattern.
 * Prints one JSON line per mode (GB/s, mismatched bytes). With
 * --same-process the "child" is this process (the fake libcuda of CI; real
 * CUDA refuses to open a handle in the process that exported it).
 *
 * Usage: gpu_ipc [--same-process] [MiB] [reps]. Exit 0, 1 fail, 77 no CUDA.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/copier_cuda.h"
#include "core/cuda.h"
#include "layercake.h"

#define GPU_TOOL "gpu_ipc"
#include "gpu_tool.h"

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 2654435761u >> 13);
}

static void done(void *arg, int status)
{
	if (status)
		*(int *)arg = status;
}

typedef struct side {
	lc_ctx_t *ctx;
	lc__copier_t *cp;
	CUcontext cu;
} side_t;

/* A copier, and device 0's primary context current on this thread (for
 * cuMemAlloc and cuIpcOpenMemHandle). */
static void side_open(side_t *s)
{
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "ipc"};
	TRY(lc_ctx_create(&cp, &s->ctx));
	TRY(lc__copier_cuda_create(s->ctx, 0, &s->cp));
	TRY(lc__cuda_primary_ctx_retain(0, &s->cu));
	TRY(lc__cuda_ctx_set(s->cu));
}

static void side_close(side_t *s)
{
	s->cp->ops->destroy(s->cp);
	lc__cuda_primary_ctx_release(0);
	lc_ctx_destroy(s->ctx);
}

/* reps copies of n bytes src -> dst; GB/s. */
static double copy_rate(side_t *s, CUdeviceptr dst, CUdeviceptr src, size_t n, int reps)
{
	int err = 0;
	uint64_t t0 = now_ns();
	for (int r = 0; r < reps; r++)
		TRY(s->cp->ops->dev_to_dev(s->cp, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n,
					   done, &err));
	TRY(s->cp->ops->drain(s->cp, 0));
	if (err)
		DIE("a copy failed: %s", lc_strerror(err));
	return (double)n * reps / (double)(now_ns() - t0);
}

/* Bytes of dev that differ from the pattern (copied back to the host). */
static long verify(side_t *s, CUdeviceptr dev, size_t n)
{
	uint8_t *h = malloc(n);
	int err = 0;
	TRY(s->cp->ops->to_host(s->cp, h, (void *)(uintptr_t)dev, n, done, &err));
	TRY(s->cp->ops->drain(s->cp, 0));
	long bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += h[i] != pattern(i);
	free(h);
	return err ? -1 : bad;
}

/* The importer: open, copy, verify, report. */
static int importer(const CUipcMemHandle *h, size_t n, int reps)
{
	side_t s;
	side_open(&s);
	CUdeviceptr src, dst;
	TRY(lc__cuda_ipc_open(h, &src));
	TRY(lc__cuda_mem_alloc(&dst, n));
	double gbs = copy_rate(&s, dst, src, n, reps);
	long bad = verify(&s, dst, n);
	printf("{\"bench\":\"gpu_ipc\",\"mode\":\"ipc\",\"mib\":%zu,\"reps\":%d,\"gbps\":%.2f,"
	       "\"mismatched_bytes\":%ld}\n",
	       n >> 20, reps, gbs, bad);
	fflush(stdout);
	TRY(lc__cuda_ipc_close(src));
	lc__cuda_mem_free(dst);
	side_close(&s);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	int same = argc > 1 && !strcmp(argv[1], "--same-process");
	int a = 1 + same;
	size_t n = (size_t)(argc > a ? atoi(argv[a]) : 256) << 20;
	int reps = argc > a + 1 ? atoi(argv[a + 1]) : 20;
	int fds[2] = {-1, -1};
	pid_t child = -1;
	if (!n || reps < 1)
		DIE("usage: gpu_ipc [--same-process] [MiB] [reps]");
	if (!same) {
		if (pipe(fds))
			DIE("pipe: %s", strerror(errno));
		child = fork(); /* before CUDA: a driver does not survive fork */
		if (child < 0)
			DIE("fork: %s", strerror(errno));
		if (child == 0) {
			close(fds[1]);
			CUipcMemHandle h;
			size_t got = 0;
			while (got < sizeof(h)) {
				ssize_t r = read(fds[0], (char *)&h + got, sizeof(h) - got);
				if (r <= 0)
					_exit(r == 0 ? 77 : 1); /* the parent found no CUDA */
				got += (size_t)r;
			}
			_exit(importer(&h, n, reps));
		}
		close(fds[0]);
	}
	if (lc__cuda_load()) {
		printf("{\"bench\":\"gpu_ipc\",\"skipped\":\"%s\"}\n", lc__cuda_why());
		if (!same) {
			close(fds[1]);
			waitpid(child, NULL, 0);
		}
		return 77;
	}
	side_t s;
	side_open(&s);
	CUdeviceptr src, dst;
	TRY(lc__cuda_mem_alloc(&src, n));
	TRY(lc__cuda_mem_alloc(&dst, n));
	uint8_t *h = malloc(n);
	for (size_t i = 0; i < n; i++)
		h[i] = pattern(i);
	int err = 0;
	TRY(s.cp->ops->from_host(s.cp, (void *)(uintptr_t)src, h, n, done, &err));
	TRY(s.cp->ops->drain(s.cp, 0));
	free(h);
	double gbs = copy_rate(&s, dst, src, n, reps);
	long bad = verify(&s, dst, n);
	printf("{\"bench\":\"gpu_ipc\",\"mode\":\"local_dtod\",\"mib\":%zu,\"reps\":%d,"
	       "\"gbps\":%.2f,\"mismatched_bytes\":%ld}\n",
	       n >> 20, reps, gbs, bad);
	fflush(stdout);
	CUipcMemHandle ih;
	TRY(lc__cuda_ipc_get(src, &ih));
	int rc = bad ? 1 : 0;
	if (same) {
		rc |= importer(&ih, n, reps);
	} else {
		if (write(fds[1], &ih, sizeof(ih)) != (ssize_t)sizeof(ih))
			DIE("write: %s", strerror(errno));
		close(fds[1]);
		int status = 0;
		waitpid(child, &status, 0); /* src stays allocated until it is done */
		rc |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	lc__cuda_mem_free(src);
	lc__cuda_mem_free(dst);
	side_close(&s);
	return rc;
}
