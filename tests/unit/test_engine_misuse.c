/*
 * Misuse of P's engine is refused at the call or fails the room, never
 * SUCCESS with wrong bytes (issue 20, points 2 and 3): a step record that
 * no batch reserved, an outside producer's counter beyond its reservation,
 * P page ids outside the layout, a layout outside every registered region.
 * The engine runs over loop:// in one process (a D context with a listener
 * and regions, a P context with the engine); every wait is for an event,
 * bounded, and nothing about timing is asserted.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "layercake.h"
#include "testutil.h"

#define L 4      /* layers */
#define PAGES 16 /* pages per buffer */
#define ITEM 256 /* bytes per page */
#define NBUF (2 * L)
#define BUF_BYTES (PAGES * ITEM)
#define GARBAGE 0xEE

typedef struct fx {
	lc_ctx_t *p, *d;
	lc_listener_t *listener;
	lc_region_t *dreg, *preg;
	uint8_t *pmem, *dmem;
	char url[128];
	lc_token_t token;
	lc_layout_t *layout;
	lc_engine_t *e;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int nev, status, reason;
	char text[LC_REASON_MAX];
	int bytes_ok; /* the room's pages equal at P and D when Success came */
	/* what the room under test moves, and which of its layers P has
	 * written so far: a group posted before its layer is written sent
	 * another forward's bytes */
	uint64_t watch_room;
	int64_t src[PAGES], dst[PAGES];
	size_t n;
	bool written[L];
	int early_posts;
} fx_t;

static int fx_id;

/* Every log line, for the assertions on what the library says. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void on_log(lc_log_level_t level, const char *line, void *arg)
{
	(void)level;
	(void)arg;
	pthread_mutex_lock(&log_lock);
	size_t n = strlen(log_text);
	if (n + strlen(line) + 2 < sizeof(log_text))
		snprintf(log_text + n, sizeof(log_text) - n, "%s\n", line);
	pthread_mutex_unlock(&log_lock);
}

static void log_reset(void)
{
	pthread_mutex_lock(&log_lock);
	log_text[0] = '\0';
	pthread_mutex_unlock(&log_lock);
}

/* Wait (bounded) for a log line holding `what`. */
static bool log_has(const char *what, int wait_ms)
{
	for (int i = 0;; i++) {
		pthread_mutex_lock(&log_lock);
		bool found = strstr(log_text, what) != NULL;
		pthread_mutex_unlock(&log_lock);
		if (found || i * 10 >= wait_ms)
			return found;
		usleep(10000);
	}
}

static bool pages_equal(fx_t *f)
{
	for (int b = 0; b < NBUF; b++)
		for (size_t i = 0; i < f->n; i++)
			if (memcmp(f->pmem + b * BUF_BYTES + f->src[i] * ITEM,
				   f->dmem + b * BUF_BYTES + f->dst[i] * ITEM, ITEM))
				return false;
	return true;
}

static void on_final(void *arg, const lc_room_final_t *fin)
{
	uint64_t room = fin->room;
	int status = fin->status;
	int reason = fin->fail_reason;
	const char *text = fin->reason_text;
	fx_t *f = arg;
	pthread_mutex_lock(&f->lock);
	if (room == f->watch_room) {
		f->status = status;
		f->reason = reason;
		snprintf(f->text, sizeof(f->text), "%s", text ? text : "");
		f->bytes_ok = status == LC_ROOM_SUCCESS && pages_equal(f);
		f->nev++;
	}
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static void on_post(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns, uint64_t post_ns,
		    uint64_t iteration, bool inline_pass)
{
	fx_t *f = arg; /* engine lock held: no engine calls */
	(void)ready_ns;
	(void)post_ns;
	(void)iteration;
	(void)inline_pass;
	pthread_mutex_lock(&f->lock);
	if (room == f->watch_room && group < L && !f->written[group])
		f->early_posts++;
	pthread_mutex_unlock(&f->lock);
}

/* D listens on loop:// or, with tcp set, on tcp://127.0.0.1:0. */
static fx_t *fx_new_on(const char *knobs, int external_counter, bool tcp)
{
	fx_t *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "D"};
	assert_int_equal(lc_ctx_create(&cp, &f->d), 0);
	cp.name = "P";
	assert_int_equal(lc_ctx_create(&cp, &f->p), 0);
	tu_knobs(f->p, "layerwise_interval=1");
	tu_knobs(f->p, knobs);
	snprintf(f->url, sizeof(f->url), "loop://misuse-%d-%d", (int)getpid(), ++fx_id);
	if (tcp)
		snprintf(f->url, sizeof(f->url), "tcp://127.0.0.1:0");
	assert_int_equal(lc_listener_create(f->d, f->url, &f->listener), 0);
	assert_true(lc_listener_url(f->listener, f->url, sizeof(f->url)) >= 0);
	assert_int_equal(lc_token_issue(f->d, &f->token), 0);
	f->dmem = calloc(1, NBUF * BUF_BYTES);
	assert_int_equal(lc_region_register(f->d, f->dmem, NBUF * BUF_BYTES, &f->dreg), 0);
	f->pmem = malloc(NBUF * BUF_BYTES);
	memset(f->pmem, GARBAGE, NBUF * BUF_BYTES);
	assert_int_equal(lc_region_register(f->p, f->pmem, NBUF * BUF_BYTES, &f->preg), 0);
	void *bases[NBUF];
	for (int b = 0; b < NBUF; b++)
		bases[b] = f->pmem + b * BUF_BYTES;
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	assert_int_equal(lc_layout_build(&lp, &f->layout), 0);
	lc_engine_params_t ep = {.size = sizeof(ep),
				 .layout = f->layout,
				 .name = "misuse",
				 .final_cb = on_final,
				 .final_arg = f,
				 .external_counter = external_counter};
	assert_int_equal(lc_engine_create(f->p, &ep, &f->e), 0);
	lc__engine_set_post_hook(f->e, on_post, f);

	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(f->dreg, desc, sizeof(desc));
	assert_true(n > 0);
	const void *descs[] = {desc};
	size_t lens[] = {(size_t)n};
	uint32_t region[NBUF] = {0};
	uint64_t offset[NBUF];
	for (int b = 0; b < NBUF; b++)
		offset[b] = (uint64_t)b * BUF_BYTES;
	lc_session_params_t sp = {.size = sizeof(sp),
				  .name = "d0",
				  .url = f->url,
				  .token = f->token,
				  .has_token = 1,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1,
				  .buffer_region = region,
				  .buffer_offset = offset};
	assert_int_equal(lc_engine_session_add(f->e, &sp), 0);
	return f;
}

static fx_t *fx_new(const char *knobs, int external_counter)
{
	return fx_new_on(knobs, external_counter, false);
}

static void fx_free(fx_t *f)
{
	lc_engine_destroy(f->e);
	lc_layout_destroy(f->layout);
	lc_ctx_destroy(f->p);
	lc_ctx_destroy(f->d);
	free(f->dmem);
	free(f->pmem);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
}

/* Room `room` moving P pages src[i] = 2 i + 1 to D pages dst[i] = i. */
static void fx_room(fx_t *f, uint64_t room, size_t n)
{
	pthread_mutex_lock(&f->lock);
	f->watch_room = room;
	f->n = n;
	f->nev = 0;
	for (size_t i = 0; i < n; i++) {
		f->src[i] = (int64_t)(2 * i + 1);
		f->dst[i] = (int64_t)i;
	}
	memset(f->written, 0, sizeof(f->written));
	pthread_mutex_unlock(&f->lock);
	assert_int_equal(lc_grant_issue(f->d, room, f->dreg, 0, NBUF * BUF_BYTES), 0);
	lc_dst_params_t dp = {.size = sizeof(dp),
			      .session = "d0",
			      .pages = f->dst,
			      .page_count = n,
			      .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, room, &dp), 0);
}

static int fx_chunk(fx_t *f, uint64_t room, const int64_t *src, size_t n)
{
	lc_chunk_t c = {
		.size = sizeof(c), .room = room, .pages = src, .page_count = n, .is_last = 1};
	return lc_engine_chunk_add(f->e, &c);
}

/* The forward writes layer k's KV (K_k and V_k of the room's pages, bytes
 * of this room only), then records it. */
static void write_layer(fx_t *f, int k, uint64_t seed)
{
	pthread_mutex_lock(&f->lock);
	for (int b = k; b < NBUF; b += L)
		for (size_t i = 0; i < f->n; i++)
			tu_fill(f->pmem + b * BUF_BYTES + f->src[i] * ITEM, ITEM,
				seed * 1000 + (uint64_t)b * 100 + i);
	f->written[k] = true;
	pthread_mutex_unlock(&f->lock);
}

static lc_engine_metrics_t metrics(fx_t *f)
{
	lc_engine_metrics_t m = {.size = sizeof(m)};
	assert_int_equal(lc_engine_metrics(f->e, &m), 0);
	return m;
}

static void wait_final(fx_t *f)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&f->lock);
	while (!f->nev)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &ts)) {
			pthread_mutex_unlock(&f->lock);
			fail_msg("room %llu never ended", (unsigned long long)f->watch_room);
		}
	pthread_mutex_unlock(&f->lock);
}

/* One forward of room `room` (n pages), layer by layer, then its aux step
 * and metadata; the final status is in f. */
static void forward(fx_t *f, uint64_t room, size_t n, uint64_t seed)
{
	fx_room(f, room, n);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, room, f->src, n), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	/* A step made ready too early is posted by the engine thread at once;
	 * the pause lets that happen before the first layer is written (it
	 * only makes the old defect show, nothing here depends on it). */
	usleep(20000);
	for (int k = 0; k < L; k++) {
		write_layer(f, k, seed);
		assert_int_equal(lc_engine_record_cache(f->e), 0);
	}
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, room, "m", 1), 0);
	wait_final(f);
}

static void stray_records_between_batches(const char *knobs, bool tcp)
{
	fx_t *f = fx_new_on(knobs, 0, tcp);
	log_reset();
	forward(f, 1, 6, 1);
	assert_int_equal(f->status, LC_ROOM_SUCCESS);
	assert_true(f->bytes_ok);
	/* The engine records on a forward that had no batch (no room). */
	assert_int_equal(lc_engine_record_cache(f->e), LC_ERR_STATE);
	assert_int_equal(lc_engine_record_aux(f->e), LC_ERR_STATE);
	assert_int_equal(metrics(f).records_refused, 2);
	assert_true(log_has("1 cache step record(s) refused: step 4 was reserved by no ended batch",
			    5000));
	assert_true(log_has("1 aux step record(s) refused: step 1", 5000));
	/* The next forward's steps are its own: no layer goes out before it
	 * is written, and D holds exactly P's bytes. */
	memset(f->pmem, GARBAGE, NBUF * BUF_BYTES);
	forward(f, 2, 6, 2);
	assert_int_equal(f->status, LC_ROOM_SUCCESS);
	assert_int_equal(f->early_posts, 0);
	assert_true(f->bytes_ok);
	/* Records past a batch's reservation are refused the same way. */
	assert_int_equal(lc_engine_record_cache(f->e), LC_ERR_STATE);
	assert_int_equal(metrics(f).records_refused, 3);
	fx_free(f);
}

static void a_stray_record_between_batches_is_refused_and_shifts_nothing(void **state)
{
	(void)state;
	stray_records_between_batches(NULL, false);
	/* The never-blocking mode: the bound is a compare-and-swap, no lock. */
	stray_records_between_batches("inline_submit=0", false);
	/* Over tcp:// on loopback, as between two hosts. */
	stray_records_between_batches(NULL, true);
}

/* An outside producer (a GPU) writes the words: a value beyond what the
 * batches reserved fails the room waiting for it, with the value and the
 * reservation in its reason, and the next batch starts where the word is. */
static void an_outside_counter_beyond_its_reservation_fails_the_room(void **state)
{
	(void)state;
	fx_t *f = fx_new(NULL, 1);
	uint64_t *cache, *aux;
	assert_int_equal(lc_engine_counter(f->e, LC_STEP_CACHE, &cache), 0);
	assert_int_equal(lc_engine_counter(f->e, LC_STEP_AUX, &aux), 0);
	fx_room(f, 5, 6);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 5, f->src, 6), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	for (int k = 0; k < L; k++)
		write_layer(f, k, 5);
	/* One record more than the batch reserved (L). */
	__atomic_store_n(cache, L + 1, __ATOMIC_RELEASE);
	__atomic_store_n(aux, 1, __ATOMIC_RELEASE);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 5, "m", 1), 0);
	wait_final(f);
	assert_int_equal(f->status, LC_ROOM_FAILED);
	assert_int_equal(f->reason, LC_FAIL_BAD_INPUT);
	assert_non_null(strstr(f->text, "cache step counter at 5 is beyond its reservation"));
	assert_non_null(strstr(f->text, "steps below 4"));
	assert_int_equal(metrics(f).counter_overruns, 1);

	/* The next batch reserves [5, 5 + L): its forward succeeds. */
	fx_room(f, 6, 4);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 6, f->src, 4), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	for (int k = 0; k < L; k++)
		write_layer(f, k, 6);
	__atomic_store_n(cache, L + 1 + L, __ATOMIC_RELEASE);
	__atomic_store_n(aux, 2, __ATOMIC_RELEASE);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 6, "m", 1), 0);
	wait_final(f);
	assert_int_equal(f->status, LC_ROOM_SUCCESS);
	assert_true(f->bytes_ok);
	assert_int_equal(metrics(f).counter_overruns, 1);
	fx_free(f);
}

/* Page ids outside the layout's PAGES pages are refused at chunk_add with
 * D's wording (page, index, pool size), counted in bad_input. */
static void chunk_pages_outside_the_layout_are_refused_at_the_call(void **state)
{
	(void)state;
	fx_t *f = fx_new(NULL, 0);
	fx_room(f, 9, 3);
	log_reset();
	static const int64_t past_end[] = {0, 1, PAGES};
	static const int64_t negative[] = {-1, 2, 3};
	assert_int_equal(fx_chunk(f, 9, past_end, 3), -EINVAL);
	assert_true(log_has("page id 16 (index 2) is outside buffer 0 (16 pages, ids 0..15)", 0));
	assert_int_equal(fx_chunk(f, 9, negative, 3), -EINVAL);
	assert_true(log_has("page id -1 (index 0) is outside buffer 0 (16 pages, ids 0..15)", 0));
	assert_int_equal(metrics(f).bad_input, 2);
	/* The partial cache's local pages too, and its count. */
	static const uint8_t mask[] = {1, 0, 1};
	static const int64_t local[] = {4, PAGES};
	lc_chunk_t c = {.size = sizeof(c),
			.room = 9,
			.page_count = 3,
			.is_last = 1,
			.src_mask = mask,
			.src_local = local,
			.src_local_count = 2};
	assert_int_equal(lc_engine_chunk_add(f->e, &c), -EINVAL);
	assert_true(log_has("src_local page id 16 (index 1) is outside buffer 0", 0));
	c.src_local_count = 1;
	assert_int_equal(lc_engine_chunk_add(f->e, &c), -EINVAL);
	assert_true(log_has("src_mask marks 2 pages, src_local holds 1", 0));
	assert_int_equal(metrics(f).bad_input, 4);
	/* The last page of the pool is a page. */
	static const int64_t edge[] = {0, 7, PAGES - 1};
	assert_int_equal(fx_chunk(f, 9, edge, 3), 0);
	fx_free(f);
}

/* State slots against the state buffers' slots. */
static void state_slots_outside_the_layout_are_refused_at_the_call(void **state)
{
	(void)state;
	static uint8_t mem[2 * 8 * 64 + 4 * 128];
	lc_buffer_t bufs[] = {
		{.base = mem, .length = 8 * 64, .item_len = 64, .layer = 0, .kind = LC_BUFFER_K},
		{.base = mem + 512,
		 .length = 8 * 64,
		 .item_len = 64,
		 .layer = 0,
		 .kind = LC_BUFFER_V},
		{.base = mem + 1024,
		 .length = 4 * 128,
		 .item_len = 128,
		 .layer = 1,
		 .kind = LC_BUFFER_STATE},
	};
	lc_layout_t *layout;
	lc_ctx_t *ctx;
	lc_engine_t *e;
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "S"};
	assert_int_equal(lc_ctx_create(&cp, &ctx), 0);
	assert_int_equal(lc_layout_create(bufs, 3, &layout), 0);
	lc_engine_params_t ep = {.size = sizeof(ep), .layout = layout, .name = "state"};
	assert_int_equal(lc_engine_create(ctx, &ep, &e), 0);
	lc_dst_params_t dp = {.size = sizeof(dp), .required_dst_count = 1, .is_dummy = 1};
	assert_int_equal(lc_engine_room_dst_add(e, 3, &dp), 0);
	log_reset();
	static const int64_t pages[] = {7};
	static const int64_t slots[] = {4};
	lc_chunk_t c = {.size = sizeof(c),
			.room = 3,
			.pages = pages,
			.page_count = 1,
			.is_last = 1,
			.state_slots = slots,
			.state_slot_count = 1};
	assert_int_equal(lc_engine_chunk_add(e, &c), -EINVAL);
	assert_true(
		log_has("state slot id 4 (index 0) is outside buffer 2 (4 slots, ids 0..3)", 0));
	static const int64_t page8[] = {8};
	c.pages = page8;
	c.state_slot_count = 0;
	assert_int_equal(lc_engine_chunk_add(e, &c), -EINVAL);
	assert_true(log_has("page id 8 (index 0) is outside buffer 0 (8 pages, ids 0..7)", 0));
	static const int64_t slot3[] = {3};
	c.pages = pages;
	c.state_slots = slot3;
	c.state_slot_count = 1;
	assert_int_equal(lc_engine_chunk_add(e, &c), 0);
	lc_engine_metrics_t m = {.size = sizeof(m)};
	assert_int_equal(lc_engine_metrics(e, &m), 0);
	assert_int_equal(m.bad_input, 2);
	lc_engine_destroy(e);
	lc_layout_destroy(layout);
	lc_ctx_destroy(ctx);
}

/* P refuses a layout whose V buffers lie outside every registered region at
 * create, naming the buffer, as D does; no bootstrap server is contacted. */
static void prefill_refuses_a_layout_outside_every_region(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "P"};
	assert_int_equal(lc_ctx_create(&cp, &ctx), 0);
	uint8_t *mem = calloc(1, NBUF * BUF_BYTES);
	lc_region_t *reg;
	/* Only the K buffers are registered. */
	assert_int_equal(lc_region_register(ctx, mem, L * BUF_BYTES, &reg), 0);
	void *bases[NBUF];
	for (int b = 0; b < NBUF; b++)
		bases[b] = mem + b * BUF_BYTES;
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	lc_layout_t *layout;
	assert_int_equal(lc_layout_build(&lp, &layout), 0);
	lc_prefill_params_t pp = {.size = sizeof(pp),
				  .layout = layout,
				  .bootstrap = "127.0.0.1:1",
				  .host = "127.0.0.1",
				  .world_size = 1,
				  .dp_size = 1};
	lc_prefill_t *pf = NULL;
	log_reset();
	int rc = lc_prefill_create(ctx, &pp, &pf);
	if (rc == LC_ENOTSUP) {
		lc_layout_destroy(layout);
		lc_ctx_destroy(ctx);
		free(mem);
		skip(); /* built without the control plane */
	}
	assert_int_equal(rc, -EINVAL);
	assert_null(pf);
	assert_true(log_has("buffer 4 (layer 0, kind 1", 0));
	assert_true(log_has("is not inside any region registered on the context", 0));
	lc_layout_destroy(layout);
	lc_ctx_destroy(ctx);
	free(mem);
}

/* The room calls misused: NULLs, sizes too small, unknown rooms, metadata
 * twice or too long, a cancel without a reason: each refused with its
 * code and reason, the room itself unharmed. */
static void room_calls_refuse_their_misuse(void **state)
{
	(void)state;
	fx_t *f = fx_new("", 0);
	uint8_t meta[LC_METADATA_MAX + 1] = {0};
	lc_room_info_t info = {.size = sizeof info};
	int64_t pages[1] = {0};
	lc_dst_params_t d = {.size = sizeof d,
			     .session = "d0",
			     .pages = pages,
			     .page_count = 1,
			     .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(NULL, 7, &d), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "engine is NULL"));
	assert_int_equal(lc_engine_room_dst_add(f->e, 7, NULL), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "params is NULL"));
	lc_dst_params_t tiny = {.size = sizeof(size_t)};
	assert_int_equal(lc_engine_room_dst_add(f->e, 7, &tiny), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "lc_engine_dst_add: params->size is too small "
						"(set it to sizeof(lc_dst_params_t))"));
	/* chunk_add's guard is the same one, with its own names. */
	lc_chunk_t tiny_chunk = {.size = sizeof(size_t)};
	assert_int_equal(lc_engine_chunk_add(NULL, &tiny_chunk), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "lc_engine_chunk_add: engine is NULL"));
	assert_int_equal(lc_engine_chunk_add(f->e, NULL), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "lc_engine_chunk_add: chunk is NULL"));
	assert_int_equal(lc_engine_chunk_add(f->e, &tiny_chunk), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "lc_engine_chunk_add: chunk->size is too small "
						"(set it to sizeof(lc_chunk_t))"));
	assert_int_equal(lc_engine_room_metadata_set(NULL, 7, meta, 1), -EINVAL);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, NULL, 1), -EINVAL);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, meta, sizeof meta), -EMSGSIZE);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, meta, 1), -ENOENT);
	assert_int_equal(lc_engine_room_cancel(NULL, 7, "x"), -EINVAL);
	assert_int_equal(lc_engine_room_cancel(f->e, 7, "x"), -ENOENT);
	assert_int_equal(lc_engine_room_status(NULL, 7, &info), -EINVAL);
	assert_int_equal(lc_engine_room_status(f->e, 7, NULL), -EINVAL);
	lc_room_info_t small = {.size = sizeof(size_t)};
	assert_int_equal(lc_engine_room_status(f->e, 7, &small), -EINVAL);
	assert_int_equal(lc_engine_room_status(f->e, 7, &info), -ENOENT);
	assert_int_equal(lc_engine_room_close(NULL, 7), -EINVAL);
	assert_int_equal(lc_engine_room_close(f->e, 7), -ENOENT);
	/* a real room: metadata once, a cancel without a reason, then final */
	assert_int_equal(lc_engine_room_dst_add(f->e, 7, &d), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, NULL, 0), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, meta, 1), -EEXIST);
	assert_non_null(strstr(lc_last_error(), "already set"));
	assert_int_equal(lc_engine_room_cancel(f->e, 7, NULL), 0);
	assert_int_equal(lc_engine_room_cancel(f->e, 7, "again"), LC_ERR_STATE);
	assert_int_equal(lc_engine_room_close(f->e, 7), 0);
	assert_int_equal(lc_engine_room_status(f->e, 7, &info), -ENOENT);
	fx_free(f);
}

int main(void)
{
	tu_watchdog(120);
	lc_log_set_handler(on_log, NULL);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_stray_record_between_batches_is_refused_and_shifts_nothing),
		cmocka_unit_test(an_outside_counter_beyond_its_reservation_fails_the_room),
		cmocka_unit_test(chunk_pages_outside_the_layout_are_refused_at_the_call),
		cmocka_unit_test(state_slots_outside_the_layout_are_refused_at_the_call),
		cmocka_unit_test(prefill_refuses_a_layout_outside_every_region),
		cmocka_unit_test(room_calls_refuse_their_misuse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
