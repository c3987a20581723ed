/*
 * `layercake bench planner`: CPU cost of planning one request's layer-wise
 * writes (coalesce the page runs once, then one descriptor per buffer and
 * run for every layer), for the three request shapes of
 * ../shared/tools/seed_planner_cost.py. When that script and a Python with
 * numpy are found, the seed is measured in the same run and the ratio is
 * printed (--no-seed skips it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "core/layout.h"
#include "core/planner.h"

typedef struct shape {
	const char *name;
	uint32_t layers, bufs_per_layer, pages, run_len;
	uint64_t item_len;
	double us, mdesc, seed_mdesc;
	size_t descriptors;
} shape_t;

static shape_t shapes[] = {
	{"dsv3-mla-8k-tok-page64", 61, 1, 128, 4, 64 * 656 * 2, 0, 0, 0, 0},
	{"llama70b-mha-32k-tok-page16", 80, 2, 2048, 8, 16 * 8 * 128 * 2, 0, 0, 0, 0},
	{"llama8b-mha-4k-tok-page1", 32, 2, 4096, 16, 8 * 128 * 2, 0, 0, 0, 0},
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Scattered runs of run_len consecutive pages, as the seed script draws
 * them: distinct run starts, destination runs a permutation of them. */
static void make_pages(const shape_t *s, int64_t *src, int64_t *dst)
{
	uint32_t nruns = s->pages / s->run_len;
	int64_t *starts = malloc(nruns * sizeof(int64_t));
	uint8_t *used = calloc(100000, 1);
	for (uint32_t i = 0; i < nruns; i++) {
		uint64_t k;
		do
			k = rng() % 100000;
		while (used[k]);
		used[k] = 1;
		starts[i] = (int64_t)k * s->run_len;
	}
	for (uint32_t i = 0; i < nruns; i++)
		for (uint32_t j = 0; j < s->run_len; j++)
			src[i * s->run_len + j] = starts[i] + j;
	for (uint32_t i = nruns - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rng() % (i + 1));
		int64_t t = starts[i];
		starts[i] = starts[j];
		starts[j] = t;
	}
	for (uint32_t i = 0; i < nruns; i++)
		for (uint32_t j = 0; j < s->run_len; j++)
			dst[i * s->run_len + j] = starts[i] + j;
	free(starts);
	free(used);
}

static int run_shape(shape_t *s)
{
	uint32_t nbuf = s->layers * s->bufs_per_layer;
	lc_buffer_t *bufs = calloc(nbuf, sizeof(*bufs));
	lc__xfer_t *x = calloc(nbuf, sizeof(*x));
	int64_t *src = malloc(s->pages * sizeof(int64_t)),
		*dst = malloc(s->pages * sizeof(int64_t));
	lc__run_t *runs = malloc(s->pages * sizeof(lc__run_t));
	lc_layout_t *l = NULL;
	lc_write_t *out = NULL;
	int rc = -1;
	if (!bufs || !x || !src || !dst || !runs)
		goto out;
	for (uint32_t b = 0; b < nbuf; b++) {
		bufs[b].base = (void *)(uintptr_t)((uint64_t)(b + 1) << 40);
		bufs[b].item_len = s->item_len;
		bufs[b].length = s->item_len * 200000;
		bufs[b].layer = (int32_t)(b / s->bufs_per_layer);
		bufs[b].kind = LC_BUFFER_OTHER;
	}
	if (lc_layout_create(bufs, nbuf, &l))
		goto out;
	for (uint32_t b = 0; b < nbuf; b++)
		lc__xfer_whole_page(&x[b], &l->bufs[b], b + 1, (uint64_t)(b + 1) << 36);
	make_pages(s, src, dst);
	lc__plan_t p = {.layout = l, .xfer = x, .runs = runs, .pages = s->pages};
	p.nruns = lc__coalesce(src, dst, s->pages, runs);
	size_t cap = lc__plan_count(&p, 0, 1);
	out = malloc(cap * sizeof(*out));
	if (!out)
		goto out;

	/* One request: coalesce once, then every layer as its own group into
	 * a reused descriptor buffer (what the engine posts per group). */
	uint64_t reps = 0, t0 = lc__now_ns(), t, sink = 0;
	size_t ndesc = 0;
	do {
		for (int k = 0; k < 16; k++, reps++) {
			ndesc = 0;
			p.nruns = lc__coalesce(src, dst, s->pages, runs);
			for (uint32_t layer = 0; layer < s->layers; layer++) {
				uint64_t bytes;
				size_t n = lc__plan_emit(&p, layer, layer + 1, out, &bytes);
				ndesc += n;
				sink += out[n - 1].remote_offset + bytes;
			}
		}
		t = lc__now_ns();
	} while (t - t0 < 300000000ull);
	if (!sink)
		fprintf(stderr, " ");
	s->us = (double)(t - t0) / 1e3 / (double)reps;
	s->descriptors = ndesc;
	s->mdesc = (double)ndesc / s->us; /* descriptors per us = millions per s */
	rc = 0;
out:
	free(out);
	lc_layout_destroy(l);
	free(bufs);
	free(x);
	free(src);
	free(dst);
	free(runs);
	return rc;
}

static const char *seed_script(void)
{
	static char path[512];
	const char *env = getenv("LAYERCAKE_SHARED_DIR");
	const char *dirs[] = {env, "../shared", "../../shared", "/work/shared"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (!dirs[i])
			continue;
		snprintf(path, sizeof(path), "%s/tools/seed_planner_cost.py", dirs[i]);
		if (!access(path, R_OK))
			return path;
	}
	return NULL;
}

/* Run the seed's cost script; fills seed_mdesc per shape. */
static int run_seed(void)
{
	const char *script = seed_script();
	char cmd[700], line[512];
	int found = 0;
	if (!script || access("/usr/bin/python3", X_OK))
		return 0;
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' 2>/dev/null", script);
	FILE *f = popen(cmd, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char name[128];
		double us, mdesc;
		unsigned long n;
		if (sscanf(line,
			   "seed-planner %127s us_per_request=%lf descriptors=%lu mdesc_per_s=%lf",
			   name, &us, &n, &mdesc) != 4)
			continue;
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
			if (!strcmp(shapes[i].name, name)) {
				shapes[i].seed_mdesc = mdesc;
				found++;
			}
	}
	pclose(f);
	return found;
}

int lc__bench_planner(int argc, char **argv)
{
	int json = 0, seed = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--no-seed"))
			seed = 0;
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("layercake bench planner [--json] [--no-seed]\n"
			       "    descriptors per second of the planner for the three shapes of\n"
			       "    ../shared/tools/seed_planner_cost.py, and the ratio to the seed\n"
			       "    measured in the same run (LAYERCAKE_SHARED_DIR locates it).\n");
			return 0;
		} else {
			fprintf(stderr, "bench planner: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	size_t n = sizeof(shapes) / sizeof(shapes[0]);
	for (size_t i = 0; i < n; i++)
		if (run_shape(&shapes[i])) {
			fprintf(stderr, "bench planner: out of memory\n");
			return 1;
		}
	int have_seed = seed ? run_seed() : 0;
	if (seed && !have_seed)
		fprintf(stderr, "bench planner: seed script or numpy not found; no ratio\n");
	if (json) {
		printf("{\"bench\":\"planner\",\"shapes\":[");
		for (size_t i = 0; i < n; i++) {
			shape_t *s = &shapes[i];
			printf("%s{\"shape\":\"%s\",\"us_per_request\":%.2f,\"descriptors\":%zu,"
			       "\"mdesc_per_s\":%.1f",
			       i ? "," : "", s->name, s->us, s->descriptors, s->mdesc);
			if (s->seed_mdesc > 0)
				printf(",\"seed_mdesc_per_s\":%.2f,\"ratio\":%.1f", s->seed_mdesc,
				       s->mdesc / s->seed_mdesc);
			printf("}");
		}
		printf("]}\n");
		return 0;
	}
	printf("%-30s %14s %12s %12s %12s %8s\n", "shape", "us_per_request", "descriptors",
	       "mdesc_per_s", "seed", "ratio");
	for (size_t i = 0; i < n; i++) {
		shape_t *s = &shapes[i];
		printf("%-30s %14.2f %12zu %12.1f", s->name, s->us, s->descriptors, s->mdesc);
		if (s->seed_mdesc > 0)
			printf(" %12.2f %7.1fx\n", s->seed_mdesc, s->mdesc / s->seed_mdesc);
		else
			printf(" %12s %8s\n", "-", "-");
	}
	return 0;
}
