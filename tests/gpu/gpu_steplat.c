/*
 * The GPU-written step latency (docs/gpu.md; run by tests/gpu/run.sh on a
 * GPU, and against the fake libcuda in CI, where the figures mean nothing
 * and only the plumbing is checked).
 *
 * One room per iteration, one layer, one page, to a D over loop:// in this
 * process: the batch is added, then on an idle CUDA stream the host
 * enqueues lc_engine_record_cache_on_stream at t0 and measures
 *   seen:   t0 -> the counter word changed (host spin: the GPU's write)
 *   posted: t0 -> the engine posted the layer's writes (post hook)
 * and prints p50/p99 of both as one JSON line; every page landed at D is
 * compared byte for byte with P's. Exit 0 pass, 1 fail, 77 no CUDA.
 *
 * Usage: gpu_steplat [iterations]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cuda.h"
#include "engine/engine.h"
#include "layercake.h"

#define GPU_TOOL "gpu_steplat"
#include "gpu_tool.h"

#define PAGES 256
#define ITEM 4096

static _Atomic uint64_t posts, post_ns, finals;

static void on_post(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns, uint64_t pns,
		    uint64_t iteration, bool inline_pass)
{
	atomic_store(&post_ns, pns);
	atomic_fetch_add(&posts, 1);
}

static void on_final(void *arg, const lc_room_final_t *fin)
{
	uint64_t room = fin->room;
	int status = fin->status;
	const char *text = fin->reason_text;
	if (status != LC_ROOM_SUCCESS)
		DIE("room %llu failed: %s", (unsigned long long)room, text ? text : "");
	atomic_fetch_add(&finals, 1);
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[(int)((n - 1) * q)] / 1000.0;
}

static void wait_until(_Atomic uint64_t *v, uint64_t want, const char *what)
{
	uint64_t t = now_ns();
	while (atomic_load(v) < want)
		if (now_ns() - t > 5000000000ull)
			DIE("timed out waiting for %s", what);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 1000;
	if (iters < 1 || iters > PAGES * 100)
		DIE("iterations: 1 .. %d", PAGES * 100);
	if (lc__cuda_load()) {
		printf("{\"bench\":\"gpu_steplat\",\"skipped\":\"%s\"}\n", lc__cuda_why());
		return 77;
	}
	lc_ctx_t *p, *d;
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "P"};
	TRY(lc_ctx_create(&cp, &p));
	cp.name = "D";
	TRY(lc_ctx_create(&cp, &d));
	char url[64];
	snprintf(url, sizeof url, "loop://steplat-%d", (int)getpid());
	lc_listener_t *l;
	lc_token_t tok;
	TRY(lc_listener_create(d, url, &l));
	TRY(lc_token_issue(d, &tok));
	uint8_t *pm = malloc(PAGES * ITEM), *dm = calloc(1, PAGES * ITEM);
	for (size_t i = 0; i < PAGES * ITEM; i++)
		pm[i] = (uint8_t)(i * 131 + 7);
	lc_region_t *pr, *dr;
	TRY(lc_region_register(p, pm, PAGES * ITEM, &pr));
	TRY(lc_region_register(d, dm, PAGES * ITEM, &dr));
	void *bases[] = {pm};
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MLA,
				 .layers = 1,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	lc_layout_t *layout;
	TRY(lc_layout_build(&lp, &layout));
	lc_engine_params_t ep = {
		.size = sizeof(ep), .layout = layout, .name = "steplat", .final_cb = on_final};
	lc_engine_t *e;
	TRY(lc_engine_create(p, &ep, &e));
	lc__engine_set_post_hook(e, on_post, NULL);
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	if (n <= 0)
		DIE("lc_region_pack: %d", n);
	const void *descs[] = {desc};
	size_t lens[] = {(size_t)n};
	lc_session_params_t sp = {.size = sizeof(sp),
				  .name = "d0",
				  .url = url,
				  .token = tok,
				  .has_token = 1,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1};
	TRY(lc_engine_session_add(e, &sp));

	CUcontext cu;
	CUstream st;
	TRY(lc__cuda_primary_ctx_retain(0, &cu));
	TRY(lc__cuda_ctx_push(cu));
	TRY(lc__cuda_stream_create(&st));
	uint64_t *word;
	TRY(lc_engine_counter(e, LC_STEP_CACHE, &word));
	uint64_t *seen = calloc((size_t)iters, 8), *posted = calloc((size_t)iters, 8);
	for (int i = 0; i < iters; i++) {
		uint64_t room = (uint64_t)i + 1;
		int64_t page = i % PAGES;
		TRY(lc_grant_issue(d, room, dr, 0, PAGES * ITEM));
		lc_dst_params_t dp = {.size = sizeof(dp),
				      .session = "d0",
				      .pages = &page,
				      .page_count = 1,
				      .required_dst_count = 1};
		TRY(lc_engine_room_dst_add(e, room, &dp));
		TRY(lc_engine_batch_begin(e, 0));
		lc_chunk_t c = {.size = sizeof(c),
				.room = room,
				.pages = &page,
				.page_count = 1,
				.is_last = 1};
		TRY(lc_engine_chunk_add(e, &c));
		TRY(lc_engine_batch_end(e));
		TRY(lc_engine_room_metadata_set(e, room, "m", 1));
		TRY(lc__cuda_stream_synchronize(st)); /* idle: the write runs at once */
		uint64_t before = __atomic_load_n(word, __ATOMIC_ACQUIRE);
		uint64_t want = atomic_load(&posts) + 1;
		uint64_t t0 = now_ns();
		TRY(lc_engine_record_cache_on_stream(e, st));
		while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == before)
			if (now_ns() - t0 > 5000000000ull)
				DIE("the counter word never moved");
		seen[i] = now_ns() - t0;
		wait_until(&posts, want, "the post");
		posted[i] = atomic_load(&post_ns) - t0;
		TRY(lc_engine_record_aux_on_stream(e, st));
		wait_until(&finals, (uint64_t)i + 1, "the room's status");
	}
	TRY(lc__cuda_stream_synchronize(st));
	/* The last writer of each D page was the last room that used it. */
	long bad = 0;
	for (int pg = 0; pg < PAGES && pg < iters; pg++)
		bad += memcmp(dm + (size_t)pg * ITEM, pm + (size_t)pg * ITEM, ITEM) != 0;
	printf("{\"bench\":\"gpu_steplat\",\"iterations\":%d,\"seen_p50_us\":%.2f,"
	       "\"seen_p99_us\":%.2f,\"posted_p50_us\":%.2f,\"posted_p99_us\":%.2f,"
	       "\"mismatched_pages\":%ld}\n",
	       iters, pct(seen, iters, 0.5), pct(seen, iters, 0.99), pct(posted, iters, 0.5),
	       pct(posted, iters, 0.99), bad);
	lc_engine_destroy(e);
	lc__cuda_stream_destroy(st);
	lc__cuda_ctx_pop();
	lc__cuda_primary_ctx_release(0);
	lc_layout_destroy(layout);
	lc_listener_destroy(l);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	free(pm);
	free(dm);
	free(seen);
	free(posted);
	return bad ? 1 : 0;
}
