/*
 * `layercake bench wake`: latency from a CPU step record
 * (lc_engine_record_cache) to that layer's writes being posted, with 64
 * rooms in flight. P and D are two contexts in one process over loop://;
 * every round opens 64 rooms, puts one chunk of each in one batch, and a
 * producer records the layers at a set pace. Samples are per (room, layer)
 * (the engine's post hook), plus the time until all 64 rooms' writes for
 * the layer were posted.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "engine/engine.h"

#define ROOMS 64
#define LAYERS 32
#define PAGES_PER_ROOM 4
#define ITEM 256

typedef struct wake_bench {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t *samples; /* per (room, layer) ns */
	size_t n, cap;
	uint64_t *by_engine; /* the samples of passes the engine thread ran */
	size_t n_engine;
	uint64_t last_post[LAYERS]; /* latest post of each layer this round */
	uint64_t ready[LAYERS];
	int done;
} wake_bench_t;

static void on_post(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns, uint64_t post_ns,
		    uint64_t iteration, bool inline_pass)
{
	wake_bench_t *w = arg;
	pthread_mutex_lock(&w->lock);
	if (w->n < w->cap)
		w->samples[w->n++] = post_ns - ready_ns;
	if (!inline_pass && w->n_engine < w->cap)
		w->by_engine[w->n_engine++] = post_ns - ready_ns;
	if (group < LAYERS) {
		w->ready[group] = ready_ns;
		if (post_ns > w->last_post[group])
			w->last_post[group] = post_ns;
	}
	pthread_mutex_unlock(&w->lock);
}

static void on_final(void *arg, const lc_room_final_t *fin)
{
	wake_bench_t *w = arg;
	pthread_mutex_lock(&w->lock);
	w->done++;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(uint64_t *v, size_t n, double q)
{
	if (!n)
		return 0;
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i] / 1e3;
}

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		int rc_ = (x);                                                                     \
		if (rc_ < 0) {                                                                     \
			fprintf(stderr, "bench wake: %s: %s\n", #x, lc_strerror(rc_));             \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

int lc__bench_wake(int argc, char **argv)
{
	int json = 0, rounds = 50, pace_us = 200;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pace-us") && i + 1 < argc)
			pace_us = atoi(argv[++i]);
		else {
			printf("layercake bench wake [--json] [--rounds N] [--pace-us US]\n"
			       "    microseconds from a CPU step record to the layer's writes\n"
			       "    being posted, %d rooms in flight, %d layers per forward.\n",
			       ROOMS, LAYERS);
			return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
		}
	}
	if (rounds < 1)
		rounds = 1;

	static wake_bench_t w;
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.cap = (size_t)rounds * ROOMS * LAYERS;
	w.samples = malloc(w.cap * sizeof(uint64_t));
	w.by_engine = malloc(w.cap * sizeof(uint64_t));
	/* Touched now: a first-touch page fault inside the post hook would
	 * delay the recording thread's next pass. */
	if (w.samples && w.by_engine) {
		memset(w.samples, 0, w.cap * sizeof(uint64_t));
		memset(w.by_engine, 0, w.cap * sizeof(uint64_t));
	}
	uint64_t *all64 = malloc((size_t)rounds * LAYERS * sizeof(uint64_t));
	size_t nall = 0;
	if (!w.samples || !w.by_engine || !all64)
		return 1;

	lc_ctx_t *p, *d;
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "D"};
	CHECK(lc_ctx_create(&cp, &d));
	cp.name = "P";
	CHECK(lc_ctx_create(&cp, &p));
	CHECK(lc_ctx_config_set(d, "require_token", "0"));
	char url[64];
	snprintf(url, sizeof(url), "loop://bench-wake-%d", (int)getpid());
	lc_listener_t *listener;
	CHECK(lc_listener_create(d, url, &listener));

	size_t nbuf = 2 * LAYERS, buf_bytes = (size_t)ROOMS * PAGES_PER_ROOM * ITEM;
	size_t total = nbuf * buf_bytes;
	void *pmem, *dmem;
	CHECK(lc_mem_alloc(total, 0, &pmem));
	CHECK(lc_mem_alloc(total, 0, &dmem));
	lc_region_t *preg, *dreg;
	CHECK(lc_region_register(p, pmem, total, &preg));
	CHECK(lc_region_register(d, dmem, total, &dreg));
	void *bases[2 * LAYERS];
	uint32_t region[2 * LAYERS] = {0};
	uint64_t offset[2 * LAYERS];
	for (size_t b = 0; b < nbuf; b++) {
		bases[b] = (uint8_t *)pmem + b * buf_bytes;
		offset[b] = b * buf_bytes;
	}
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MHA,
				 .layers = LAYERS,
				 .pages = ROOMS * PAGES_PER_ROOM,
				 .item_len = {ITEM},
				 .bases = bases};
	lc_layout_t *layout;
	CHECK(lc_layout_build(&lp, &layout));
	lc_engine_params_t ep = {.size = sizeof(ep),
				 .layout = layout,
				 .name = "bench",
				 .final_cb = on_final,
				 .final_arg = &w};
	lc_engine_t *e;
	CHECK(lc_engine_create(p, &ep, &e));
	lc__engine_set_post_hook(e, on_post, &w);
	uint8_t desc[LC_REGION_DESC_MAX];
	int dn = lc_region_pack(dreg, desc, sizeof(desc));
	CHECK(dn);
	const void *descs[] = {desc};
	size_t lens[] = {(size_t)dn};
	lc_session_params_t sp = {.size = sizeof(sp),
				  .name = "d0",
				  .url = url,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1,
				  .buffer_region = region,
				  .buffer_offset = offset};
	CHECK(lc_engine_session_add(e, &sp));

	int64_t pages[PAGES_PER_ROOM];
	for (int r = 0; r < rounds; r++) {
		pthread_mutex_lock(&w.lock);
		w.done = 0;
		memset(w.last_post, 0, sizeof(w.last_post));
		pthread_mutex_unlock(&w.lock);
		for (uint64_t room = 1; room <= ROOMS; room++) {
			uint64_t id = (uint64_t)r * 1000 + room;
			for (int i = 0; i < PAGES_PER_ROOM; i++)
				pages[i] = (int64_t)((room - 1) * PAGES_PER_ROOM + i);
			CHECK(lc_grant_issue(d, id, dreg, 0, total));
			lc_dst_params_t dp = {.size = sizeof(dp),
					      .session = "d0",
					      .pages = pages,
					      .page_count = PAGES_PER_ROOM,
					      .required_dst_count = 1};
			CHECK(lc_engine_room_dst_add(e, id, &dp));
		}
		CHECK(lc_engine_batch_begin(e, 0));
		for (uint64_t room = 1; room <= ROOMS; room++) {
			for (int i = 0; i < PAGES_PER_ROOM; i++)
				pages[i] = (int64_t)((room - 1) * PAGES_PER_ROOM + i);
			lc_chunk_t c = {.size = sizeof(c),
					.room = (uint64_t)r * 1000 + room,
					.pages = pages,
					.page_count = PAGES_PER_ROOM,
					.is_last = 1};
			CHECK(lc_engine_chunk_add(e, &c));
		}
		CHECK(lc_engine_batch_end(e));
		for (int l = 0; l < LAYERS; l++) {
			usleep((useconds_t)pace_us);
			CHECK(lc_engine_record_cache(e));
		}
		CHECK(lc_engine_record_aux(e));
		for (uint64_t room = 1; room <= ROOMS; room++)
			CHECK(lc_engine_room_metadata_set(e, (uint64_t)r * 1000 + room, "t", 1));
		pthread_mutex_lock(&w.lock);
		while (w.done < ROOMS)
			pthread_cond_wait(&w.cond, &w.lock);
		for (int l = 0; l < LAYERS; l++)
			if (w.last_post[l] > w.ready[l])
				all64[nall++] = w.last_post[l] - w.ready[l];
		pthread_mutex_unlock(&w.lock);
		for (uint64_t room = 1; room <= ROOMS; room++) {
			lc_room_info_t info = {.size = sizeof(info)};
			lc_engine_room_status(e, (uint64_t)r * 1000 + room, &info);
			lc_grant_revoke(d, (uint64_t)r * 1000 + room);
		}
	}
	lc_engine_metrics_t m = {.size = sizeof(m)};
	lc_engine_metrics(e, &m);
	lc_engine_destroy(e);
	lc_layout_destroy(layout);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	lc_mem_free(pmem);
	lc_mem_free(dmem);

	qsort(w.samples, w.n, sizeof(uint64_t), cmp_u64);
	qsort(all64, nall, sizeof(uint64_t), cmp_u64);
	qsort(w.by_engine, w.n_engine, sizeof(uint64_t), cmp_u64);
	double p50 = pct(w.samples, w.n, 0.5), p99 = pct(w.samples, w.n, 0.99);
	double a50 = pct(all64, nall, 0.5), a99 = pct(all64, nall, 0.99);
	if (json)
		printf("{\"bench\":\"wake\",\"rooms\":%d,\"layers\":%d,\"samples\":%zu,"
		       "\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,"
		       "\"all_rooms_p50_us\":%.1f,\"all_rooms_p99_us\":%.1f,\"rooms_failed\":%llu,"
		       "\"inline_submits\":%llu,\"records\":%d,\"group_ack_p50_us\":%.1f,"
		       "\"group_ack_p99_us\":%.1f,\"loop_iterations\":%llu,"
		       "\"engine_thread_samples\":%zu,\"engine_thread_p50_us\":%.1f,"
		       "\"engine_thread_p99_us\":%.1f}\n",
		       ROOMS, LAYERS, w.n, p50, p99, pct(w.samples, w.n, 1.0), a50, a99,
		       (unsigned long long)m.rooms_failed, (unsigned long long)m.inline_submits,
		       rounds * (LAYERS + 1), lc_histogram_quantile_us(&m.group_ack_latency, 0.5),
		       lc_histogram_quantile_us(&m.group_ack_latency, 0.99),
		       (unsigned long long)m.loop_iterations, w.n_engine,
		       pct(w.by_engine, w.n_engine, 0.5), pct(w.by_engine, w.n_engine, 0.99));
	else
		printf("wake: %zu samples (%d rooms x %d layers x %d rounds)\n"
		       "  record -> room's writes posted: p50 %.1f us  p99 %.1f us  max %.1f us\n"
		       "  record -> all %d rooms posted:   p50 %.1f us  p99 %.1f us\n",
		       w.n, ROOMS, LAYERS, rounds, p50, p99, pct(w.samples, w.n, 1.0), ROOMS, a50,
		       a99);
	free(w.samples);
	free(w.by_engine);
	free(all64);
	return m.rooms_failed ? 1 : 0;
}
