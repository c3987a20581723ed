/*
 * `layercake bench landed`: what one layers_ready poll costs with N landed
 * ranges in the room (core/landed.h). A room of one 64-layer region is
 * granted whole and watched; N writes land out of order, every other
 * 64-byte block of layer 0, so the count keeps N intervals and layer 0
 * stays incomplete (the worst case: a poll cannot stop early). Times
 * `polls` lc__grant_layers_ready calls, and, for the old way, as many
 * scans of layer 0's coverage (lc__grant_covered, what each poll did
 * before the count was kept as bytes land). Best of three per N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "core/grant.h"
#include "core/landed.h"

#define LAYERS 64
#define BLOCK 64ull

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A watched room with n landed ranges in layer 0 (of n + 1 blocks' gaps). */
static lc__grant_table_t *room_with(uint64_t n)
{
	lc__grant_table_t *t;
	uint64_t layer = (2 * n + 2) * BLOCK;
	if (lc__grant_table_create(&t))
		return NULL;
	lc__grant_set_intervals_max(t, n + 16);
	lc__landed_span_t s[LAYERS];
	for (uint32_t l = 0; l < LAYERS; l++)
		s[l] = (lc__landed_span_t){
			.region = 1, .layer = l, .lo = l * layer, .hi = (l + 1) * layer};
	if (lc__grant_issue(t, 1, 1, 0, LAYERS * layer) || lc__grant_watch(t, 1, s, LAYERS, LAYERS))
		goto fail;
	/* Out of order: odd blocks from the top down. */
	for (uint64_t i = n; i-- > 0;) {
		lc__grant_room_t *g;
		lc__grant_landing_t o;
		uint64_t off = (2 * i + 1) * BLOCK;
		if (lc__grant_lookup(t, 1, 0, 1, off, BLOCK, &g))
			goto fail;
		int rc = lc__grant_landed(g, 1, off, BLOCK, &o);
		lc__grant_put(g);
		if (rc)
			goto fail;
	}
	return t;
fail:
	lc__grant_table_destroy(t);
	return NULL;
}

static double time_polls(lc__grant_table_t *t, uint64_t polls, uint64_t layer, bool scan)
{
	double best = 1e30;
	volatile uint64_t sink = 0;
	for (int r = 0; r < 3; r++) {
		double t0 = now_s();
		for (uint64_t i = 0; i < polls; i++) {
			uint32_t ready = 0;
			uint64_t g = 0, c = 0;
			if (scan)
				lc__grant_covered(t, 1, 1, 0, layer, &g, &c);
			else
				lc__grant_layers_ready(t, 1, &ready);
			sink += ready + (c < g);
		}
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	(void)sink;
	return best;
}

int lc__bench_landed(int argc, char **argv)
{
	uint64_t polls = 1000000, ns[2] = {10, 10000};
	int json = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--polls") && i + 1 < argc)
			polls = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: layercake bench landed [--polls N] [--json]\n");
			return 2;
		}
	}
	double poll_ns[2], scan_ns[2];
	for (int k = 0; k < 2; k++) {
		lc__grant_table_t *t = room_with(ns[k]);
		if (!t) {
			fprintf(stderr, "bench landed: cannot build a room of %llu ranges\n",
				(unsigned long long)ns[k]);
			return 1;
		}
		uint64_t layer = (2 * ns[k] + 2) * BLOCK;
		uint64_t scans = polls / (ns[k] > 100 ? 100 : 1); /* the old way is slow */
		poll_ns[k] = time_polls(t, polls, layer, false) * 1e9 / (double)polls;
		scan_ns[k] = time_polls(t, scans, layer, true) * 1e9 / (double)scans;
		lc__grant_table_destroy(t);
	}
	if (json)
		printf("{\"bench\":\"landed\",\"polls\":%llu,\"ranges\":[%llu,%llu],"
		       "\"poll_ns\":[%.1f,%.1f],\"scan_ns\":[%.1f,%.1f]}\n",
		       (unsigned long long)polls, (unsigned long long)ns[0],
		       (unsigned long long)ns[1], poll_ns[0], poll_ns[1], scan_ns[0], scan_ns[1]);
	else
		for (int k = 0; k < 2; k++)
			printf("%6llu landed ranges: layers_ready poll %7.1f ns, "
			       "old per-poll scan %9.1f ns\n",
			       (unsigned long long)ns[k], poll_ns[k], scan_ns[k]);
	return 0;
}
