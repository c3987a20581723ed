/*
 * The engine over loop:// in one process: a receiver context (D) with a
 * listener, one region and grants; a sender context (P) with the engine; a
 * producer that records layers; faults injected through loop URLs. No
 * timing is asserted: every wait is for an event, bounded by a watchdog.
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
#define PAGES 32 /* pages per buffer */
#define ITEM 256 /* bytes per page */
#define NBUF (2 * L)
#define BUF_BYTES (PAGES * ITEM)
#define MAXD 3

typedef struct event {
	uint64_t room;
	char session[64];
	int status, reason;
	char meta[64];
	size_t meta_len;
	int bytes_ok; /* every byte of the room in place when Success came */
} event_t;

typedef struct fx {
	lc_ctx_t *p, *d;
	lc_listener_t *listener;
	lc_region_t *dreg, *preg;
	uint8_t *pmem, *dmem[MAXD];
	lc_region_t *dregs[MAXD];
	char url[128];
	lc_token_t token;
	lc_layout_t *layout;
	lc_engine_t *e;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	event_t ev[64];
	int nev;
	uint32_t landed[MAXD];
	uint64_t landed_room[MAXD];
	int landed_calls, landed_regressed;
	uint64_t posts, first_iter, last_iter;
	bool watch_thread; /* count posts made on `watched` (inline submission) */
	pthread_t watched;
	uint64_t posts_on_watched;
	/* on_post parks while hold_posts is set (engine lock held by its
	 * thread); held says it parked, hold_expired that it gave up. */
	bool hold_posts, held, hold_expired;
	/* what a successful room must have delivered, for the in-callback check */
	int64_t expect_src[PAGES], expect_dst[PAGES];
	size_t expect_n;
} fx_t;

static int fx_id;

static int session_index(const char *s)
{
	return s[0] == 'd' ? s[1] - '0' : 0;
}

static bool pages_landed(fx_t *f, int di)
{
	for (int b = 0; b < NBUF; b++)
		for (size_t i = 0; i < f->expect_n; i++)
			if (memcmp(f->pmem + b * BUF_BYTES + f->expect_src[i] * ITEM,
				   f->dmem[di] + b * BUF_BYTES + f->expect_dst[i] * ITEM, ITEM))
				return false;
	return true;
}

static void on_final(void *arg, const lc_room_final_t *fin)
{
	uint64_t room = fin->room;
	const char *session = fin->session;
	int status = fin->status;
	int reason = fin->fail_reason;
	const void *meta = fin->metadata;
	size_t meta_len = fin->metadata_len;
	fx_t *f = arg;
	pthread_mutex_lock(&f->lock);
	event_t *e = &f->ev[f->nev++ % 64];
	e->room = room;
	snprintf(e->session, sizeof(e->session), "%s", session);
	e->status = status;
	e->reason = reason;
	e->meta_len = meta_len;
	if (meta_len && meta_len <= sizeof(e->meta))
		memcpy(e->meta, meta, meta_len);
	e->bytes_ok = status == LC_ROOM_SUCCESS ? pages_landed(f, session_index(session)) : 0;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static void on_landed(void *arg, uint64_t room, const char *session, uint32_t layers)
{
	fx_t *f = arg;
	pthread_mutex_lock(&f->lock);
	int i = session_index(session);
	if (room != f->landed_room[i])
		f->landed[i] = 0;
	if (layers <= f->landed[i])
		f->landed_regressed = 1; /* must only ever grow */
	f->landed_room[i] = room;
	f->landed[i] = layers;
	f->landed_calls++;
	pthread_mutex_unlock(&f->lock);
}

static void on_post(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns, uint64_t post_ns,
		    uint64_t iteration, bool inline_pass)
{
	fx_t *f = arg; /* engine lock held: no engine calls */
	pthread_mutex_lock(&f->lock);
	if (f->watch_thread && pthread_equal(pthread_self(), f->watched))
		f->posts_on_watched++;
	if (!f->posts++)
		f->first_iter = iteration;
	f->last_iter = iteration;
	pthread_cond_broadcast(&f->cond);
	if (f->hold_posts) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		f->held = true;
		pthread_cond_broadcast(&f->cond);
		while (f->hold_posts && !f->hold_expired)
			if (pthread_cond_timedwait(&f->cond, &f->lock, &ts))
				f->hold_expired = true;
	}
	pthread_mutex_unlock(&f->lock);
}

/* Knobs for the sender context, "name=value" pairs ending with NULL. */
static fx_t *fx_new(const char *const *knobs, int external_counter)
{
	fx_t *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = "D"};
	assert_int_equal(lc_ctx_create(&cp, &f->d), 0);
	cp.name = "P";
	assert_int_equal(lc_ctx_create(&cp, &f->p), 0);
	for (int i = 0; knobs && knobs[i]; i += 2)
		assert_int_equal(lc_ctx_config_set(f->p, knobs[i], knobs[i + 1]), 0);
	snprintf(f->url, sizeof(f->url), "loop://engine-%d-%d", (int)getpid(), ++fx_id);
	assert_int_equal(lc_listener_create(f->d, f->url, &f->listener), 0);
	assert_int_equal(lc_token_issue(f->d, &f->token), 0);
	for (int i = 0; i < MAXD; i++) {
		f->dmem[i] = calloc(1, NBUF * BUF_BYTES);
		assert_int_equal(
			lc_region_register(f->d, f->dmem[i], NBUF * BUF_BYTES, &f->dregs[i]), 0);
	}
	f->pmem = malloc(NBUF * BUF_BYTES);
	tu_fill(f->pmem, NBUF * BUF_BYTES, 42);
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
				 .name = "test",
				 .final_cb = on_final,
				 .final_arg = f,
				 .landed_cb = on_landed,
				 .landed_arg = f,
				 .external_counter = external_counter};
	assert_int_equal(lc_engine_create(f->p, &ep, &f->e), 0);
	lc__engine_set_post_hook(f->e, on_post, f);
	return f;
}

/* Register D session "d<i>" (its own region, buffers of d_item bytes per
 * page back to back) on engine e, with an optional URL query and optional
 * heterogeneous-TP fragments. Returns lc_engine_session_add's result. */
static int fx_session_on(fx_t *f, lc_engine_t *e, int i, const char *query, uint64_t d_item,
			 const lc_fragment_t *frags, size_t nfrags)
{
	char name[16], url[192];
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(f->dregs[i], desc, sizeof(desc));
	assert_true(n > 0);
	const void *descs[] = {desc};
	size_t lens[] = {(size_t)n};
	uint32_t region[NBUF] = {0};
	uint64_t offset[NBUF];
	for (int b = 0; b < NBUF; b++)
		offset[b] = (uint64_t)b * PAGES * d_item;
	snprintf(name, sizeof(name), "d%d", i);
	snprintf(url, sizeof(url), "%s%s", f->url, query ? query : "");
	lc_session_params_t sp = {.size = sizeof(sp),
				  .name = name,
				  .url = url,
				  .token = f->token,
				  .has_token = 1,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1,
				  .buffer_region = region,
				  .buffer_offset = offset,
				  .fragments = frags,
				  .fragment_count = nfrags};
	return lc_engine_session_add(e, &sp);
}

static void fx_session(fx_t *f, int i, const char *query)
{
	assert_int_equal(fx_session_on(f, f->e, i, query, ITEM, NULL, 0), 0);
}

static void fx_free(fx_t *f)
{
	lc_engine_destroy(f->e);
	assert_false(f->landed_regressed);
	lc_layout_destroy(f->layout);
	lc_ctx_destroy(f->p);
	lc_ctx_destroy(f->d);
	for (int i = 0; i < MAXD; i++)
		free(f->dmem[i]);
	free(f->pmem);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
}

/* Destination for session i: D pages dst[0..n) (granted for the room). */
static void fx_dst(fx_t *f, uint64_t room, int i, uint32_t required, const int64_t *dst, size_t n,
		   int dummy)
{
	char name[16];
	snprintf(name, sizeof(name), "d%d", i);
	if (!dummy)
		assert_int_equal(lc_grant_issue(f->d, room, f->dregs[i], 0, NBUF * BUF_BYTES), 0);
	lc_dst_params_t dp = {.size = sizeof(dp),
			      .session = dummy ? NULL : name,
			      .pages = dst,
			      .page_count = n,
			      .required_dst_count = required,
			      .is_dummy = dummy};
	assert_int_equal(lc_engine_room_dst_add(f->e, room, &dp), 0);
}

static int fx_chunk(fx_t *f, uint64_t room, const int64_t *src, size_t n, uint64_t dst_index,
		    int last)
{
	lc_chunk_t c = {.size = sizeof(c),
			.room = room,
			.pages = src,
			.page_count = n,
			.dst_index = dst_index,
			.is_last = last};
	return lc_engine_chunk_add(f->e, &c);
}

static void record_layers(fx_t *f, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(lc_engine_record_cache(f->e), 0);
}

/* Wait (bounded) for the n-th status event. */
static void wait_events(fx_t *f, int n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&f->lock);
	while (f->nev < n)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &ts)) {
			pthread_mutex_unlock(&f->lock);
			fail_msg("timed out waiting for %d status events (have %d)", n, f->nev);
		}
	pthread_mutex_unlock(&f->lock);
}

static void wait_posts(fx_t *f, uint64_t n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&f->lock);
	while (f->posts < n)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &ts)) {
			pthread_mutex_unlock(&f->lock);
			fail_msg("timed out waiting for %llu posts", (unsigned long long)n);
		}
	pthread_mutex_unlock(&f->lock);
}

static int room_status(fx_t *f, uint64_t room, lc_room_info_t *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return lc_engine_room_status(f->e, room, info);
}

static lc_engine_metrics_t metrics(fx_t *f)
{
	lc_engine_metrics_t m = {.size = sizeof(m)};
	assert_int_equal(lc_engine_metrics(f->e, &m), 0);
	return m;
}

static void expect(fx_t *f, const int64_t *src, const int64_t *dst, size_t n)
{
	pthread_mutex_lock(&f->lock);
	memcpy(f->expect_src, src, n * sizeof(int64_t));
	memcpy(f->expect_dst, dst, n * sizeof(int64_t));
	f->expect_n = n;
	pthread_mutex_unlock(&f->lock);
}

static const int64_t SRC[] = {3, 4, 5, 9, 10, 20};
static const int64_t DST[] = {0, 1, 2, 7, 8, 30};

/* A producer that records the layers of one forward at a set pace, then the
 * batch's aux step. */
typedef struct producer {
	fx_t *f;
	int layers;
	int pace_us;
	int aux;
} producer_t;

static void *produce(void *arg)
{
	producer_t *p = arg;
	for (int i = 0; i < p->layers; i++) {
		usleep((useconds_t)p->pace_us);
		lc_engine_record_cache(p->f->e);
	}
	if (p->aux)
		lc_engine_record_aux(p->f->e);
	return NULL;
}

static void layers_stream_while_the_producer_records_them(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 7, 0, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 7, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	producer_t p = {f, L, 2000, 1};
	pthread_t th;
	pthread_create(&th, NULL, produce, &p);
	pthread_join(th, NULL);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 7, "tok=42", 6), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	assert_int_equal(f->ev[0].meta_len, 6);
	assert_memory_equal(f->ev[0].meta, "tok=42", 6);
	assert_true(f->ev[0].bytes_ok);
	assert_int_equal(f->landed[0], L);
	lc_room_info_t info;
	assert_int_equal(room_status(f, 7, &info), 0);
	assert_int_equal(info.status, LC_ROOM_SUCCESS);
	lc_engine_metrics_t m = metrics(f);
	/* One batch per (task, destination, group); runs coalesced: 3 per buffer. */
	assert_int_equal(m.batches_posted, L);
	assert_int_equal(m.writes_posted, L * 2 * 3);
	assert_int_equal(m.bytes_acked, (uint64_t)NBUF * 6 * ITEM);
	assert_int_equal(m.rooms_succeeded, 1);
	fx_free(f);
}

static void *produce_watched(void *arg)
{
	producer_t *p = arg;
	pthread_mutex_lock(&p->f->lock);
	p->f->watched = pthread_self();
	p->f->watch_thread = true;
	pthread_mutex_unlock(&p->f->lock);
	return produce(arg);
}

/* Rule 6 without a wake-up on the critical path: a record that finds the
 * engine thread asleep posts the ready groups on the recording thread; with
 * inline_submit=0 every post is the engine thread's. Data lands either way. */
static void run_paced_room(fx_t *f, uint64_t room)
{
	fx_session(f, 0, NULL);
	fx_dst(f, room, 0, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, room, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	producer_t p = {f, L, 2000, 1};
	pthread_t th;
	pthread_create(&th, NULL, produce_watched, &p);
	pthread_join(th, NULL);
	assert_int_equal(lc_engine_room_metadata_set(f->e, room, "t", 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	assert_true(f->ev[0].bytes_ok);
}

static void a_record_posts_on_the_recording_thread_when_the_engine_sleeps(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	run_paced_room(f, 11);
	lc_engine_metrics_t m = metrics(f);
	pthread_mutex_lock(&f->lock);
	/* 4 records 2 ms apart: the engine thread sleeps through at least one. */
	assert_true(m.inline_submits >= 1);
	assert_true(f->posts_on_watched >= 1);
	pthread_mutex_unlock(&f->lock);
	fx_free(f);

	static const char *const off[] = {"inline_submit", "0", NULL};
	f = fx_new(off, 0);
	run_paced_room(f, 12);
	m = metrics(f);
	pthread_mutex_lock(&f->lock);
	assert_int_equal(m.inline_submits, 0);
	assert_int_equal(f->posts_on_watched, 0);
	assert_int_equal(f->posts, L);
	pthread_mutex_unlock(&f->lock);
	fx_free(f);

	/* Without acknowledgement moderation the room finishes the same way. */
	static const char *const no_coalesce[] = {"ack_coalesce_us", "0", NULL};
	f = fx_new(no_coalesce, 0);
	run_paced_room(f, 13);
	assert_int_equal(metrics(f).rooms_succeeded, 1);
	fx_free(f);
}

/* The never-blocking mode (inline_submit=0): records return while the
 * engine thread holds the engine lock, parked in the post hook of the first
 * layer's pass. A record that waited for it would return only after the
 * hook gave up (hold_expired). */
static void records_do_not_wait_for_the_engine_lock_with_inline_submit_off(void **state)
{
	static const char *const off[] = {"inline_submit", "0", NULL};
	fx_t *f = fx_new(off, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 14, 0, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 14, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	pthread_mutex_lock(&f->lock);
	f->hold_posts = true;
	pthread_mutex_unlock(&f->lock);
	record_layers(f, 1);

	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&f->lock);
	while (!f->held)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &ts)) {
			pthread_mutex_unlock(&f->lock);
			fail_msg("the engine thread never posted the first layer");
		}
	pthread_mutex_unlock(&f->lock);

	record_layers(f, L - 1);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	pthread_mutex_lock(&f->lock);
	assert_false(f->hold_expired);
	f->hold_posts = false;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);

	assert_int_equal(lc_engine_room_metadata_set(f->e, 14, "t", 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	assert_true(f->ev[0].bytes_ok);
	assert_int_equal(metrics(f).inline_submits, 0);
	fx_free(f);
}

static void every_ready_group_goes_out_in_one_iteration(void **state)
{
	fx_t *f = fx_new(NULL, 1);
	fx_session(f, 0, NULL);
	fx_dst(f, 8, 0, 1, DST, 6, 0);
	/* The forward already ran: the outside producer's word says L. */
	uint64_t *word;
	assert_int_equal(lc_engine_counter(f->e, LC_STEP_CACHE, &word), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 8, SRC, 6, 0, 0), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	__atomic_store_n(word, L, __ATOMIC_RELEASE);
	wait_posts(f, L);
	pthread_mutex_lock(&f->lock);
	assert_int_equal(f->first_iter, f->last_iter); /* not one layer per iteration */
	pthread_mutex_unlock(&f->lock);
	fx_free(f);
}

static void batches_are_stamped_and_empty_batches_still_reserve(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 9, 0, 1, DST, 6, 0);
	/* An empty non-idle batch reserves L steps; an idle one reserves none. */
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 1), 0);
	assert_int_equal(fx_chunk(f, 9, SRC, 6, 0, 1), LC_ERR_STATE); /* not dropped silently */
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 9, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	/* The empty batch's forward: these steps are not the chunk's. */
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	usleep(20000);
	pthread_mutex_lock(&f->lock);
	assert_int_equal(f->posts, 0); /* stamped at step L, not 0 */
	pthread_mutex_unlock(&f->lock);
	/* The chunk's forward: the first layer group is step L. */
	record_layers(f, 1);
	wait_posts(f, 1);
	record_layers(f, L - 1);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	wait_posts(f, L);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 9, NULL, 0), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	lc_engine_metrics_t m = metrics(f);
	assert_true(m.bad_input >= 1);
	fx_free(f);
}

static void batch_calls_out_of_order_are_refused(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	assert_int_equal(lc_engine_batch_end(f->e), LC_ERR_STATE);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), LC_ERR_STATE);
	assert_int_equal(fx_chunk(f, 12345, SRC, 6, 0, 1), -ENOENT);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	fx_free(f);
}

static void dummy_destinations_succeed_without_writes(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_dst(f, 10, 0, 1, NULL, 0, 1);
	lc_room_info_t info;
	assert_int_equal(room_status(f, 10, &info), 0);
	assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPED);
	assert_int_equal(fx_chunk(f, 10, SRC, 6, 0, 1), 0);
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(room_status(f, 10, &info), 0);
		if (info.status == LC_ROOM_SUCCESS)
			break;
		usleep(1000);
	}
	assert_int_equal(info.status, LC_ROOM_SUCCESS);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.batches_posted, 0);
	assert_int_equal(f->nev, 0); /* a dummy is told nothing */
	fx_free(f);
}

static void fan_in(fx_t *f, uint64_t room, int n)
{
	lc_room_info_t info;
	for (int i = 0; i < n; i++) {
		fx_session(f, i, NULL);
		fx_dst(f, room, i, (uint32_t)n, DST, 6, 0);
		assert_int_equal(room_status(f, room, &info), 0);
		assert_int_equal(info.dst_count, i + 1);
		if (i < n - 1) {
			/* Held until every destination is in (docs/engine.md). */
			assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPING);
			if (i == 0) {
				expect(f, SRC, DST, 6);
				assert_int_equal(fx_chunk(f, room, SRC, 6, 0, 1), 0);
			}
			assert_int_equal(metrics(f).chunks_held, 1);
		}
	}
	assert_true(info.status >= LC_ROOM_BOOTSTRAPPED);
	assert_int_equal(metrics(f).chunks_held, 0);
	expect(f, SRC, DST, 6);
	if (n == 1)
		assert_int_equal(fx_chunk(f, room, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, room, "m", 1), 0);
	wait_events(f, n);
	for (int i = 0; i < n; i++) {
		assert_int_equal(f->ev[i].status, LC_ROOM_SUCCESS);
		assert_true(f->ev[i].bytes_ok);
	}
	usleep(20000);
	assert_int_equal(f->nev, n); /* once per destination */
}

static void fan_in_of_two_destinations(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fan_in(f, 11, 2);
	fx_free(f);
}

static void fan_in_of_three_destinations(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fan_in(f, 12, 3);
	fx_free(f);
}

static void second_destination_finishing_first_does_not_succeed_early(void **state)
{
	/* d0's writes are slow, d1's fast: d1's acknowledgements all arrive
	 * first. The seed's index-aligned polls (9.1.5) would declare the task
	 * done; here Success must wait for every byte at d0. */
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, "?delay_us=20000");
	fx_session(f, 1, NULL);
	fx_dst(f, 13, 0, 2, DST, 6, 0);
	fx_dst(f, 13, 1, 2, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 13, "m", 1), 0);
	assert_int_equal(fx_chunk(f, 13, SRC, 6, 0, 1), 0);
	wait_events(f, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(f->ev[i].status, LC_ROOM_SUCCESS);
		assert_true(f->ev[i].bytes_ok); /* d0's bytes in place at Success */
	}
	fx_free(f);
}

static void failure_in_layer_k_fails_the_room_once_and_tells_every_destination(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, "?fail_tag=2"); /* layer group 2 fails at d0 */
	fx_session(f, 1, NULL);
	fx_dst(f, 14, 0, 2, DST, 6, 0);
	fx_dst(f, 14, 1, 2, DST, 6, 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 14, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	producer_t p = {f, L, 1000, 1};
	pthread_t th;
	pthread_create(&th, NULL, produce, &p);
	pthread_join(th, NULL);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 14, "m", 1), 0);
	wait_events(f, 2);
	usleep(50000); /* give a duplicate a chance to show up */
	assert_int_equal(f->nev, 2);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[1].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[0].reason, LC_FAIL_TRANSFER);
	assert_true(strcmp(f->ev[0].session, f->ev[1].session) != 0);
	lc_room_info_t info;
	assert_int_equal(room_status(f, 14, &info), 0);
	assert_int_equal(info.status, LC_ROOM_FAILED);
	assert_int_equal(info.fail_reason, LC_FAIL_TRANSFER);
	/* Reported: the room is gone, its id may start fresh. */
	assert_int_equal(room_status(f, 14, &info), -ENOENT);
	uint64_t failures = 0;
	assert_int_equal(lc_engine_session_blocked(f->e, "d0", &failures), 1);
	assert_int_equal(failures, 1);
	assert_int_equal(lc_engine_session_blocked(f->e, "d1", NULL), 0);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.rooms_failed, 1);
	uint64_t by_reason = 0;
	assert_int_equal(lc_engine_failed_by_reason(f->e, LC_FAIL_TRANSFER, &by_reason), 0);
	assert_int_equal(by_reason, 1);
	assert_int_equal(lc_engine_failed_by_reason(f->e, LC_FAIL_REASON_COUNT, &by_reason),
			 -ERANGE);
	fx_free(f);
}

static void blocked_session_fails_new_rooms_until_it_registers_again(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, "?fail_write=1");
	fx_dst(f, 15, 0, 1, DST, 6, 0);
	assert_int_equal(fx_chunk(f, 15, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	/* Within the TTL: a new room fails at once, with no write. */
	uint64_t posted = metrics(f).batches_posted;
	fx_dst(f, 16, 0, 1, DST, 6, 0);
	wait_events(f, 2);
	assert_int_equal(f->ev[1].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[1].reason, LC_FAIL_SESSION_BLOCKED);
	assert_int_equal(metrics(f).batches_posted, posted);
	/* Registering again clears the block. */
	fx_session(f, 0, NULL);
	assert_int_equal(lc_engine_session_blocked(f->e, "d0", NULL), 0);
	fx_dst(f, 17, 0, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(fx_chunk(f, 17, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 17, "m", 1), 0);
	wait_events(f, 3);
	assert_int_equal(f->ev[2].status, LC_ROOM_SUCCESS);
	fx_free(f);
}

static void session_ttl_expiry_unblocks(void **state)
{
	const char *knobs[] = {"session_ttl_ms", "1", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, "?fail_write=1");
	fx_dst(f, 18, 0, 1, DST, 6, 0);
	assert_int_equal(fx_chunk(f, 18, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	usleep(5000);
	assert_int_equal(lc_engine_session_blocked(f->e, "d0", NULL), 0);
	fx_free(f);
}

static void layer_that_never_becomes_ready_expires(void **state)
{
	const char *knobs[] = {"layer_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 19, 0, 1, DST, 6, 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 19, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	record_layers(f, L - 1); /* the last layer never comes */
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[0].reason, LC_FAIL_LAYER_TIMEOUT);
	fx_free(f);
}

static void destination_that_never_acknowledges_expires(void **state)
{
	const char *knobs[] = {"transfer_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, "?drop_write=1");
	fx_dst(f, 20, 0, 1, DST, 6, 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 20, "m", 1), 0);
	assert_int_equal(fx_chunk(f, 20, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[0].reason, LC_FAIL_TRANSFER_TIMEOUT);
	fx_free(f);
}

static void metadata_that_never_arrives_expires(void **state)
{
	const char *knobs[] = {"metadata_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 21, 0, 1, DST, 6, 0);
	assert_int_equal(fx_chunk(f, 21, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[0].reason, LC_FAIL_METADATA_TIMEOUT);
	assert_true(metrics(f).bytes_acked > 0); /* the KV itself had landed */
	fx_free(f);
}

static void aux_step_that_is_never_recorded_expires(void **state)
{
	const char *knobs[] = {"metadata_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 22, 0, 1, DST, 6, 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 22, "m", 1), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 22, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	record_layers(f, L); /* no record_aux */
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_FAILED);
	assert_int_equal(f->ev[0].reason, LC_FAIL_METADATA_TIMEOUT);
	fx_free(f);
}

static void room_without_all_destinations_expires(void **state)
{
	const char *knobs[] = {"bootstrap_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 23, 0, 2, DST, 6, 0); /* the second never comes */
	wait_events(f, 1);
	assert_int_equal(f->ev[0].reason, LC_FAIL_BOOTSTRAP_TIMEOUT);
	fx_free(f);
}

static void cancel_stops_submitting_and_tells_destinations_once(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 24, 0, 1, DST, 6, 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 24, SRC, 6, 0, 1), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	record_layers(f, 1);
	wait_posts(f, 1);
	assert_int_equal(lc_engine_room_cancel(f->e, 24, "D aborted"), 0);
	assert_int_equal(lc_engine_room_cancel(f->e, 24, "again"), LC_ERR_STATE);
	uint64_t posted = metrics(f).batches_posted;
	record_layers(f, L - 1);
	lc_engine_record_aux(f->e);
	wait_events(f, 1);
	usleep(20000);
	assert_int_equal(f->nev, 1);
	assert_int_equal(f->ev[0].reason, LC_FAIL_CANCELLED);
	assert_int_equal(metrics(f).batches_posted, posted);
	fx_free(f);
}

static void short_destination_page_list_fails_instead_of_truncating(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 25, 0, 1, DST, 4, 0); /* D allocated 4 pages, the chunk has 6 */
	assert_int_equal(fx_chunk(f, 25, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].reason, LC_FAIL_BAD_INPUT);
	assert_int_equal(metrics(f).batches_posted, 0);
	fx_free(f);
}

static void chunked_room_succeeds_after_its_last_chunk(void **state)
{
	/* Two chunks, two batches: pages [0, 3) then [3, 6) of D's list. */
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 26, 0, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
		assert_int_equal(fx_chunk(f, 26, SRC + 3 * k, 3, (uint64_t)(3 * k), k == 1), 0);
		assert_int_equal(lc_engine_batch_end(f->e), 0);
		record_layers(f, L);
		lc_engine_record_aux(f->e);
	}
	assert_int_equal(lc_engine_room_metadata_set(f->e, 26, "m", 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	assert_true(f->ev[0].bytes_ok);
	fx_free(f);
}

static void finished_rooms_do_not_accumulate(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	for (uint64_t room = 100; room < 140; room++) {
		fx_dst(f, room, 0, 1, DST, 6, 0);
		assert_int_equal(fx_chunk(f, room, SRC, 6, 0, 1), 0);
		assert_int_equal(lc_engine_room_metadata_set(f->e, room, "m", 1), 0);
	}
	wait_events(f, 40);
	lc_room_info_t info;
	for (uint64_t room = 100; room < 140; room++) {
		assert_int_equal(room_status(f, room, &info), 0);
		assert_int_equal(info.status, LC_ROOM_SUCCESS);
		assert_int_equal(room_status(f, room, &info), -ENOENT);
	}
	/* The same id again starts fresh. */
	assert_int_equal(lc_engine_room_open(f->e, 100), 0);
	assert_int_equal(room_status(f, 100, &info), 0);
	assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPING);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.rooms_succeeded, 40);
	assert_int_equal(m.rooms_active, 1);
	fx_free(f);
}

/* One session may be a destination of at most p_session_rooms_max
 * unfinished rooms (dummies naming it included); a room that ends frees its
 * place, and other sessions are not affected. */
static void a_session_holds_at_most_its_quota_of_unfinished_rooms(void **state)
{
	const char *knobs[] = {"p_session_rooms_max", "2", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_session(f, 1, NULL);
	fx_dst(f, 30, 0, 1, DST, 6, 0);
	lc_dst_params_t dummy = {
		.size = sizeof(dummy), .session = "d0", .required_dst_count = 2, .is_dummy = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, 31, &dummy), 0);
	assert_int_equal(lc_grant_issue(f->d, 32, f->dregs[0], 0, NBUF * BUF_BYTES), 0);
	lc_dst_params_t third = {.size = sizeof(third),
				 .session = "d0",
				 .pages = DST,
				 .page_count = 6,
				 .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, 32, &third), -ENOSPC);
	uint64_t refused = 0;
	assert_int_equal(lc_ctx_counter_by_name(f->p, "rooms_refused_session_quota", &refused), 0);
	assert_int_equal(refused, 1);
	lc_room_info_t info;
	assert_int_equal(room_status(f, 32, &info), -ENOENT); /* nothing was opened */
	fx_dst(f, 33, 1, 1, DST, 6, 0);                       /* another session: fine */
	/* Room 30 ends (cancelled): d0 has a place again. */
	assert_int_equal(lc_engine_room_cancel(f->e, 30, "done"), 0);
	assert_int_equal(lc_engine_room_dst_add(f->e, 32, &third), 0);
	fx_free(f);
}

/* Issue 21, point 5: what unfinished rooms hold for transfer infos is
 * capped per session and per engine, refused before allocation, and a room
 * that ends gives its share back. */
static void transfer_info_descriptors_are_capped_per_session_and_engine(void **state)
{
	const char *knobs[] = {"p_session_descs_max", "8", "p_descs_max", "12", NULL};
	fx_t *f = fx_new(knobs, 0);
	fx_session(f, 0, NULL);
	fx_session(f, 1, NULL);
	fx_dst(f, 40, 0, 1, DST, 6, 0);
	lc_dst_params_t d = {.size = sizeof(d),
			     .session = "d0",
			     .pages = DST,
			     .page_count = 6,
			     .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, 41, &d), -ENOBUFS); /* d0: 12 > 8 */
	lc_room_info_t info;
	assert_int_equal(room_status(f, 41, &info), -ENOENT); /* nothing was opened */
	fx_dst(f, 42, 1, 1, DST, 6, 0);                       /* d1: 6; in all 12 */
	d.page_count = 2;
	assert_int_equal(lc_engine_room_dst_add(f->e, 41, &d), -ENOBUFS); /* in all: 14 > 12 */
	uint64_t refused = 0;
	assert_int_equal(lc_ctx_counter_by_name(f->p, "infos_refused_descs", &refused), 0);
	assert_int_equal(refused, 2);
	/* Room 40 ends (cancelled): its 6 go back. */
	assert_int_equal(lc_engine_room_cancel(f->e, 40, "done"), 0);
	assert_int_equal(lc_engine_room_dst_add(f->e, 41, &d), 0);
	fx_free(f);
}

static void destroy_fails_unfinished_rooms_once(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, NULL);
	fx_dst(f, 27, 0, 1, DST, 6, 0);
	lc_engine_destroy(f->e);
	f->e = NULL;
	assert_int_equal(f->nev, 1);
	assert_int_equal(f->ev[0].reason, LC_FAIL_STOPPED);
	fx_free(f);
}

static void stalled_destination_does_not_block_other_rooms(void **state)
{
	/* d0 never acknowledges room 28's first write. The seed's blocking
	 * batch_transfer_sync would hold its only thread there; here room 29
	 * on d1 completes meanwhile. */
	fx_t *f = fx_new(NULL, 0);
	fx_session(f, 0, "?drop_write=1");
	fx_session(f, 1, NULL);
	fx_dst(f, 28, 0, 1, DST, 6, 0);
	fx_dst(f, 29, 1, 1, DST, 6, 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 28, "m", 1), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 29, "m", 1), 0);
	assert_int_equal(fx_chunk(f, 28, SRC, 6, 0, 1), 0);
	wait_posts(f, L);
	assert_int_equal(fx_chunk(f, 29, SRC, 6, 0, 1), 0);
	wait_events(f, 1);
	assert_int_equal(f->ev[0].room, 29);
	assert_int_equal(f->ev[0].status, LC_ROOM_SUCCESS);
	assert_true(f->ev[0].bytes_ok);
	lc_room_info_t info;
	assert_int_equal(room_status(f, 28, &info), 0);
	assert_int_equal(info.status, LC_ROOM_TRANSFERRING);
	fx_free(f);
}

/* ---- heterogeneous tensor parallelism (spec 6.7) ---- */

#define UNIT (ITEM / 4) /* a KV head's bytes per page: P TP 1 holds 4 heads */

/* The fragments of every buffer from P rank (pt, pr) to D rank (dt, dr). */
static void tp_fragments(int pt, int pr, uint64_t p_item, int dt, int dr, uint64_t d_item,
			 lc_fragment_t *fr)
{
	lc_tp_side_t ps = {.tp_size = pt, .tp_rank = pr, .item_len = p_item, .unit_len = UNIT};
	lc_tp_side_t ds = {.tp_size = dt, .tp_rank = dr, .item_len = d_item, .unit_len = UNIT};
	for (int b = 0; b < NBUF; b++) {
		assert_int_equal(lc_tp_fragment(&ps, &ds, &fr[b]), 1);
		fr[b].buffer = (uint32_t)b;
	}
}

/* The same over token-major pages of ROWS tokens: a head of one token is
 * UNIT / ROWS bytes, a rank's share of a page ROWS strided blocks. */
#define ROWS 4
static void tp_fragments_rows(int pt, int pr, uint64_t p_item, int dt, int dr, uint64_t d_item,
			      lc_fragment_t *fr)
{
	lc_tp_side_t ps = {pt, pr, p_item, UNIT / ROWS, ROWS, 0};
	lc_tp_side_t ds = {dt, dr, d_item, UNIT / ROWS, ROWS, 0};
	for (int b = 0; b < NBUF; b++) {
		assert_int_equal(lc_tp_fragment(&ps, &ds, &fr[b]), 1);
		fr[b].buffer = (uint32_t)b;
	}
}

static void wait_final(lc_engine_t *e, uint64_t room, int want)
{
	lc_room_info_t info = {.size = sizeof(info)};
	for (int i = 0; i < 20000; i++) {
		assert_int_equal(lc_engine_room_status(e, room, &info), 0);
		if (info.status == LC_ROOM_SUCCESS || info.status == LC_ROOM_FAILED)
			break;
		usleep(1000);
	}
	assert_int_equal(info.status, want);
}

static void one_p_rank_splits_its_heads_between_two_d_ranks(void **state)
{
	/* P TP 1 (4 heads per page), D TP 2 (2 heads each): each D rank gets
	 * its half of every page, byte-exact, and nothing else. */
	fx_t *f = fx_new(NULL, 0);
	for (int r = 0; r < 2; r++) {
		lc_fragment_t fr[NBUF];
		tp_fragments(1, 0, ITEM, 2, r, ITEM / 2, fr);
		assert_int_equal(fr[0].src_offset, (uint64_t)r * ITEM / 2);
		assert_int_equal(fx_session_on(f, f->e, r, NULL, ITEM / 2, fr, NBUF), 0);
		fx_dst(f, 21, r, 2, DST, 6, 0);
	}
	assert_int_equal(lc_engine_room_metadata_set(f->e, 21, "m", 1), 0);
	assert_int_equal(fx_chunk(f, 21, SRC, 6, 0, 1), 0);
	wait_events(f, 2);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(f->ev[r].status, LC_ROOM_SUCCESS);
		for (int b = 0; b < NBUF; b++)
			for (int i = 0; i < 6; i++)
				assert_memory_equal(f->dmem[r] + (b * PAGES + DST[i]) * (ITEM / 2),
						    f->pmem + b * BUF_BYTES + SRC[i] * ITEM +
							    r * (ITEM / 2),
						    ITEM / 2);
		/* The rest of D's buffers stayed untouched (zero). */
		size_t used = (size_t)NBUF * PAGES * (ITEM / 2), zero = 0;
		for (size_t k = used; k < (size_t)NBUF * BUF_BYTES; k++)
			zero += f->dmem[r][k] == 0;
		assert_int_equal(zero, NBUF * BUF_BYTES - used);
	}
	fx_free(f);
}

static void token_major_pages_split_with_one_strided_write_per_page(void **state)
{
	/* P TP 1 (4 heads), D TP 2 (2 heads each), pages of ROWS tokens: D
	 * rank r gets heads 2r, 2r+1 of every token row, byte-exact, and the
	 * engine posts one write per page and buffer (not one per token). */
	fx_t *f = fx_new(NULL, 0);
	const uint64_t prow = ITEM / ROWS, drow = ITEM / 2 / ROWS;
	for (int r = 0; r < 2; r++) {
		lc_fragment_t fr[NBUF];
		tp_fragments_rows(1, 0, ITEM, 2, r, ITEM / 2, fr);
		assert_int_equal(fr[0].count, ROWS);
		assert_int_equal(fr[0].src_stride, prow);
		assert_int_equal(fr[0].dst_stride, drow);
		assert_int_equal(fx_session_on(f, f->e, r, NULL, ITEM / 2, fr, NBUF), 0);
		fx_dst(f, 23, r, 2, DST, 6, 0);
	}
	uint64_t posted0 = 0;
	lc_ctx_counter_by_name(f->p, "writes_posted", &posted0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 23, "m", 1), 0);
	assert_int_equal(fx_chunk(f, 23, SRC, 6, 0, 1), 0);
	wait_events(f, 2);
	uint64_t posted = 0;
	lc_ctx_counter_by_name(f->p, "writes_posted", &posted);
	assert_int_equal(posted - posted0, 2 * NBUF * 6); /* per D rank, buffer and page */
	for (int r = 0; r < 2; r++) {
		assert_int_equal(f->ev[r].status, LC_ROOM_SUCCESS);
		for (int b = 0; b < NBUF; b++)
			for (int i = 0; i < 6; i++)
				for (uint64_t t = 0; t < ROWS; t++)
					assert_memory_equal(
						f->dmem[r] + (b * PAGES + DST[i]) * (ITEM / 2) +
							t * drow,
						f->pmem + b * BUF_BYTES + SRC[i] * ITEM + t * prow +
							(uint64_t)r * drow,
						drow);
		size_t used = (size_t)NBUF * PAGES * (ITEM / 2), zero = 0;
		for (size_t k = used; k < (size_t)NBUF * BUF_BYTES; k++)
			zero += f->dmem[r][k] == 0;
		assert_int_equal(zero, NBUF * BUF_BYTES - used);
	}
	fx_free(f);
}

static void two_p_ranks_fill_one_d_page(void **state)
{
	/* P TP 2 (2 heads each), D TP 1 (4 heads): two engines write their
	 * halves of the same D pages; each room succeeds on its own rank. */
	fx_t *f = fx_new(NULL, 0);
	size_t bytes = (size_t)NBUF * PAGES * (ITEM / 2);
	uint8_t *mem[2];
	lc_region_t *reg[2];
	lc_layout_t *lay[2];
	lc_engine_t *e[2];
	assert_int_equal(lc_grant_issue(f->d, 22, f->dregs[0], 0, NBUF * BUF_BYTES), 0);
	for (int r = 0; r < 2; r++) {
		mem[r] = malloc(bytes);
		assert_non_null(mem[r]);
		tu_fill(mem[r], bytes, 70 + r);
		assert_int_equal(lc_region_register(f->p, mem[r], bytes, &reg[r]), 0);
		void *bases[NBUF];
		for (int b = 0; b < NBUF; b++)
			bases[b] = mem[r] + (size_t)b * PAGES * (ITEM / 2);
		lc_layout_params_t lp = {.size = sizeof(lp),
					 .model = LC_LAYOUT_MHA,
					 .layers = L,
					 .pages = PAGES,
					 .item_len = {ITEM / 2},
					 .bases = bases};
		assert_int_equal(lc_layout_build(&lp, &lay[r]), 0);
		lc_engine_params_t ep = {.size = sizeof(ep), .layout = lay[r], .name = "tp"};
		assert_int_equal(lc_engine_create(f->p, &ep, &e[r]), 0);
		lc_fragment_t fr[NBUF];
		tp_fragments(2, r, ITEM / 2, 1, 0, ITEM, fr);
		assert_int_equal(fr[0].dst_offset, (uint64_t)r * ITEM / 2);
		assert_int_equal(fx_session_on(f, e[r], 0, NULL, ITEM, fr, NBUF), 0);
		lc_dst_params_t dp = {.size = sizeof(dp),
				      .session = "d0",
				      .pages = DST,
				      .page_count = 6,
				      .required_dst_count = 1};
		assert_int_equal(lc_engine_room_dst_add(e[r], 22, &dp), 0);
		assert_int_equal(lc_engine_room_metadata_set(e[r], 22, "m", 1), 0);
		lc_chunk_t c = {
			.size = sizeof(c), .room = 22, .pages = SRC, .page_count = 6, .is_last = 1};
		assert_int_equal(lc_engine_chunk_add(e[r], &c), 0);
	}
	for (int r = 0; r < 2; r++)
		wait_final(e[r], 22, LC_ROOM_SUCCESS);
	for (int b = 0; b < NBUF; b++)
		for (int i = 0; i < 6; i++)
			for (int r = 0; r < 2; r++)
				assert_memory_equal(
					f->dmem[0] + b * BUF_BYTES + DST[i] * ITEM + r * (ITEM / 2),
					mem[r] + ((size_t)b * PAGES + SRC[i]) * (ITEM / 2),
					ITEM / 2);
	for (int r = 0; r < 2; r++) {
		lc_engine_destroy(e[r]);
		lc_layout_destroy(lay[r]);
		lc_region_deregister(reg[r]);
		free(mem[r]);
	}
	fx_free(f);
}

static void fragments_outside_a_page_are_refused(void **state)
{
	fx_t *f = fx_new(NULL, 0);
	lc_fragment_t fr[NBUF];
	tp_fragments(1, 0, ITEM, 2, 1, ITEM / 2, fr);
	uint64_t bad0 = metrics(f).bad_input;
	fr[3].bytes = ITEM; /* past the end of the P page and of the D page */
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	fr[3] = fr[2]; /* buffer 2 named twice */
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	fr[3].buffer = NBUF; /* no such buffer */
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	/* Strided: the last block leaves the D page; overlapping blocks; a
	 * stride whose product with the count overflows; a count past the cap. */
	tp_fragments_rows(1, 0, ITEM, 2, 1, ITEM / 2, fr);
	fr[1].dst_stride += 1;
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	tp_fragments_rows(1, 0, ITEM, 2, 1, ITEM / 2, fr);
	fr[1].src_stride = fr[1].bytes - 1;
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	tp_fragments_rows(1, 0, ITEM, 2, 1, ITEM / 2, fr);
	fr[1].dst_stride = UINT64_MAX / 2;
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	tp_fragments_rows(1, 0, ITEM, 2, 1, ITEM / 2, fr);
	fr[1].count = LC_WRITE_MAX_COUNT + 1;
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), LC_ERR_GEOMETRY);
	assert_int_equal(metrics(f).bad_input, bad0 + 7);
	tp_fragments_rows(1, 0, ITEM, 2, 1, ITEM / 2, fr); /* and the honest one passes */
	assert_int_equal(fx_session_on(f, f->e, 0, NULL, ITEM / 2, fr, NBUF), 0);
	fx_free(f);
}

int main(void)
{
	tu_watchdog(100);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(layers_stream_while_the_producer_records_them),
		cmocka_unit_test(records_do_not_wait_for_the_engine_lock_with_inline_submit_off),
		cmocka_unit_test(every_ready_group_goes_out_in_one_iteration),
		cmocka_unit_test(a_record_posts_on_the_recording_thread_when_the_engine_sleeps),
		cmocka_unit_test(batches_are_stamped_and_empty_batches_still_reserve),
		cmocka_unit_test(batch_calls_out_of_order_are_refused),
		cmocka_unit_test(dummy_destinations_succeed_without_writes),
		cmocka_unit_test(a_session_holds_at_most_its_quota_of_unfinished_rooms),
		cmocka_unit_test(transfer_info_descriptors_are_capped_per_session_and_engine),
		cmocka_unit_test(fan_in_of_two_destinations),
		cmocka_unit_test(fan_in_of_three_destinations),
		cmocka_unit_test(second_destination_finishing_first_does_not_succeed_early),
		cmocka_unit_test(
			failure_in_layer_k_fails_the_room_once_and_tells_every_destination),
		cmocka_unit_test(blocked_session_fails_new_rooms_until_it_registers_again),
		cmocka_unit_test(session_ttl_expiry_unblocks),
		cmocka_unit_test(layer_that_never_becomes_ready_expires),
		cmocka_unit_test(destination_that_never_acknowledges_expires),
		cmocka_unit_test(metadata_that_never_arrives_expires),
		cmocka_unit_test(aux_step_that_is_never_recorded_expires),
		cmocka_unit_test(room_without_all_destinations_expires),
		cmocka_unit_test(cancel_stops_submitting_and_tells_destinations_once),
		cmocka_unit_test(short_destination_page_list_fails_instead_of_truncating),
		cmocka_unit_test(chunked_room_succeeds_after_its_last_chunk),
		cmocka_unit_test(finished_rooms_do_not_accumulate),
		cmocka_unit_test(destroy_fails_unfinished_rooms_once),
		cmocka_unit_test(stalled_destination_does_not_block_other_rooms),
		cmocka_unit_test(one_p_rank_splits_its_heads_between_two_d_ranks),
		cmocka_unit_test(two_p_ranks_fill_one_d_page),
		cmocka_unit_test(token_major_pages_split_with_one_strided_write_per_page),
		cmocka_unit_test(fragments_outside_a_page_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
