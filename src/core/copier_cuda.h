/*
 * The CUDA copy engine's factory (src/core/copier_cuda.c; the interface is
 * src/core/copier.h).
 */
#ifndef LC_CORE_COPIER_CUDA_H
#define LC_CORE_COPIER_CUDA_H

#include "core/common.h"
#include "core/copier.h"

/* A copier for CUDA device `device` of ctx: its own non-blocking stream in
 * the device's primary context (retained until destroy) and a worker
 * thread. 0, LC_ENOTSUP (no CUDA), -EINVAL, -ERANGE (no such device),
 * -ENOMEM, a thread errno or the failing CUDA call's error. */
int lc__copier_cuda_create(lc_ctx_t *ctx, int device, lc__copier_t **out);

#endif
