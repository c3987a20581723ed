/*
 * `layercake bench checksum`: the room checksum's pass (core/checksum.h,
 * knob room_checksum) over one region, against one memcpy of a region of
 * the same size in the same run (what ../shared/tools/baseline.c measures).
 * Regions are 2 MiB aligned, advised as huge pages and touched before
 * timing; the best of five passes each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"
#include "core/checksum.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static char *region(size_t n, int value)
{
	size_t huge = 2u << 20;
	char *p = aligned_alloc(huge, (n + huge - 1) & ~(huge - 1));
	if (!p)
		return NULL;
	madvise(p, n, MADV_HUGEPAGE);
	memset(p, value, n);
	return p;
}

int lc__bench_checksum(int argc, char **argv)
{
	size_t mib = 256;
	int json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--region-mib") && i + 1 < argc)
			mib = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr,
				"usage: layercake bench checksum [--region-mib M] [--json]\n");
			return 2;
		}
	}
	size_t n = mib << 20;
	char *a = n ? region(n, 1) : NULL, *b = n ? region(n, 2) : NULL;
	if (!a || !b) {
		fprintf(stderr, "bench checksum: cannot allocate 2 x %zu MiB\n", mib);
		free(a);
		free(b);
		return 1;
	}
	double sum_best = 0, cpy_best = 0;
	volatile uint64_t sink = 0;
	for (int r = 0; r < 5; r++) {
		double t = now_s();
		sink += lc__sum_range(1, 0, a, n);
		double g = (double)n / (now_s() - t) / 1e9;
		sum_best = g > sum_best ? g : sum_best;
		t = now_s();
		memcpy(b, a, n);
		g = (double)n / (now_s() - t) / 1e9;
		cpy_best = g > cpy_best ? g : cpy_best;
	}
	(void)sink;
	if (json)
		printf("{\"bench\":\"checksum\",\"region_mib\":%zu,\"sum_gbps\":%.3f,"
		       "\"baseline\":\"memcpy\",\"baseline_gbps\":%.3f,\"ratio\":%.3f}\n",
		       mib, sum_best, cpy_best, sum_best / cpy_best);
	else
		printf("room checksum over %zu MiB: %.2f GB/s; memcpy %.2f GB/s; ratio %.2f\n", mib,
		       sum_best, cpy_best, sum_best / cpy_best);
	free(a);
	free(b);
	return 0;
}
