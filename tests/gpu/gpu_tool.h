/*
 * What the device-check programs (gpu_steplat.c, gpu_ipc.c) share: die with
 * a message naming the program, check a call, read the monotonic clock.
 * Each defines GPU_TOOL (its name) before including this.
 */
#ifndef LC_TESTS_GPU_TOOL_H
#define LC_TESTS_GPU_TOOL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "layercake.h"

#define DIE(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, GPU_TOOL ": " __VA_ARGS__);                                        \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)
#define TRY(expr)                                                                                  \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_)                                                                           \
			DIE("%s: %s", #expr, lc_strerror(rc_));                                    \
	} while (0)

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
