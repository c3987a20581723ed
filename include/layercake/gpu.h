/*
 * layercake/gpu.h: what the library knows of CUDA. libcuda is loaded with
 * dlopen at first use (knob cuda_lib, default "libcuda.so.1"); nothing CUDA
 * is needed to build, test or run host-only. Every call here returns
 * LC_ENOTSUP when the driver is absent; lc_cuda_info() says why.
 * docs/gpu.md. Conventions: see layercake/base.h.
 */
#ifndef LAYERCAKE_GPU_H
#define LAYERCAKE_GPU_H

#include "layercake/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lc_cuda_info {
	size_t size;        /* sizeof(lc_cuda_info_t) */
	int found;          /* 1: libcuda loaded and cuInit succeeded */
	int device_count;   /* 0 when not found */
	int driver_version; /* cuDriverGetVersion (12040 = 12.4), 0 when absent */
	int reserved;
	uint64_t errors;   /* CUDA calls that failed in this process so far */
	char library[256]; /* the path dlopen was given (knob cuda_lib) */
	char why[256];     /* when not found: the dlopen error, a missing
			      * symbol or cuInit's error name; else "" */
} lc_cuda_info_t;

/* Load the driver if not yet tried (once per process; the result sticks)
 * and describe it. 0, or -EINVAL (NULL, size too small). Never fails for
 * lack of CUDA: found says. Any thread; the first call may block in
 * dlopen and cuInit. */
LC_API int lc_cuda_info(lc_cuda_info_t *out);

typedef struct lc_cuda_device {
	size_t size; /* sizeof(lc_cuda_device_t) */
	int ordinal;
	int reserved;
	uint64_t total_mem;  /* bytes */
	char name[128];      /* "NVIDIA H200" */
	char pci_bus_id[32]; /* "0000:19:00.0" */
} lc_cuda_device_t;

/* Device `ordinal`: 0, LC_ENOTSUP (no CUDA), -ERANGE (no such device),
 * -EINVAL, or the error of the failing CUDA call. Any thread. */
LC_API int lc_cuda_device(int ordinal, lc_cuda_device_t *out);

/* What CUDA says a pointer is (cuPointerGetAttribute). */
typedef enum lc_cuda_ptr_kind {
	LC_CUDA_PTR_HOST = 0,    /* unknown to CUDA: ordinary host memory */
	LC_CUDA_PTR_PINNED = 1,  /* host memory CUDA allocated or registered */
	LC_CUDA_PTR_DEVICE = 2,  /* device memory of *device */
	LC_CUDA_PTR_MANAGED = 3, /* unified (managed) memory */
} lc_cuda_ptr_kind_t;

/* Classify p: *kind (lc_cuda_ptr_kind_t) and *device (the ordinal, -1 for
 * host memory). 0, LC_ENOTSUP (no CUDA), -EINVAL (NULL arguments) or the
 * error of the failing call. Any thread; never dereferences p. */
LC_API int lc_cuda_pointer_kind(const void *p, int *kind, int *device);

#ifdef __cplusplus
}
#endif

#endif
