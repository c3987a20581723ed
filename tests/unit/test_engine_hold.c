/*
 * P never waits for D (issue 44): chunks added to a room still
 * Bootstrapping are held by the engine with the steps their batch reserved,
 * and go out when D's transfer info arrives: the layers recorded meanwhile
 * at once, the later ones as they are recorded. Held chunks are bounded,
 * and dropped when the room fails first (its bootstrap deadline, a cancel,
 * a close, the engine's end). Over loop:// in one process, as test_engine;
 * no timing is asserted, every wait is bounded by a watchdog.
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
	int nev, status, reason, bytes_ok;
	uint64_t posts;
	int64_t expect_src[PAGES], expect_dst[PAGES];
	size_t expect_n;
} fx_t;

static int fx_id;

/* Every expected page of every buffer at D holds P's bytes. */
static bool pages_landed(fx_t *f)
{
	for (int b = 0; b < NBUF; b++)
		for (size_t i = 0; i < f->expect_n; i++)
			if (memcmp(f->pmem + b * BUF_BYTES + f->expect_src[i] * ITEM,
				   f->dmem + b * BUF_BYTES + f->expect_dst[i] * ITEM, ITEM))
				return false;
	return true;
}

static void on_final(void *arg, const lc_room_final_t *fin)
{
	fx_t *f = arg;
	pthread_mutex_lock(&f->lock);
	f->nev++;
	f->status = fin->status;
	f->reason = fin->fail_reason;
	f->bytes_ok = fin->status == LC_ROOM_SUCCESS && pages_landed(f);
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static void on_post(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns, uint64_t post_ns,
		    uint64_t iteration, bool inline_pass)
{
	fx_t *f = arg; /* engine lock held: no engine calls */
	pthread_mutex_lock(&f->lock);
	f->posts++;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* Knobs for P's context, "name=value" pairs ending with NULL. */
static fx_t *fx_new(const char *const *knobs)
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
	snprintf(f->url, sizeof(f->url), "loop://hold-%d-%d", (int)getpid(), ++fx_id);
	assert_int_equal(lc_listener_create(f->d, f->url, &f->listener), 0);
	assert_int_equal(lc_token_issue(f->d, &f->token), 0);
	f->dmem = calloc(1, NBUF * BUF_BYTES);
	assert_int_equal(lc_region_register(f->d, f->dmem, NBUF * BUF_BYTES, &f->dreg), 0);
	f->pmem = malloc(NBUF * BUF_BYTES);
	tu_fill(f->pmem, NBUF * BUF_BYTES, 44);
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
				 .name = "hold",
				 .final_cb = on_final,
				 .final_arg = f};
	assert_int_equal(lc_engine_create(f->p, &ep, &f->e), 0);
	lc__engine_set_post_hook(f->e, on_post, f);
	/* D's session "d0": its region, buffers back to back. */
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

/* D's transfer info for room: D pages dst[0..n) after a prefix of
 * prefix_len tokens, granted for the room. Returns lc_engine_room_dst_add's
 * result. */
static int fx_grant(fx_t *f, uint64_t room, const int64_t *dst, size_t n, uint64_t prefix_len)
{
	assert_int_equal(lc_grant_issue(f->d, room, f->dreg, 0, NBUF * BUF_BYTES), 0);
	lc_dst_params_t dp = {.size = sizeof(dp),
			      .session = "d0",
			      .pages = dst,
			      .page_count = n,
			      .prefix_len = prefix_len,
			      .required_dst_count = 1};
	return lc_engine_room_dst_add(f->e, room, &dp);
}

/* One chunk; page_tokens > 0: dst_index counts from token 0. */
static int fx_chunk(fx_t *f, uint64_t room, const int64_t *src, size_t n, uint64_t dst_index,
		    int last, uint64_t page_tokens)
{
	lc_chunk_t c = {.size = sizeof(c),
			.room = room,
			.pages = src,
			.page_count = n,
			.dst_index = dst_index,
			.is_last = last,
			.page_tokens = page_tokens};
	return lc_engine_chunk_add(f->e, &c);
}

/* A forward's chunk: a batch of one chunk, none of its layers recorded. */
static void fx_forward(fx_t *f, uint64_t room, const int64_t *src, size_t n, uint64_t dst_index,
		       int last)
{
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, room, src, n, dst_index, last, 0), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
}

static void record_layers(fx_t *f, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(lc_engine_record_cache(f->e), 0);
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
			fail_msg("timed out waiting for the room's final status");
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

static uint64_t posts(fx_t *f)
{
	pthread_mutex_lock(&f->lock);
	uint64_t n = f->posts;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static lc_engine_metrics_t metrics(fx_t *f)
{
	lc_engine_metrics_t m = {.size = sizeof(m)};
	assert_int_equal(lc_engine_metrics(f->e, &m), 0);
	return m;
}

static int status_of(fx_t *f, uint64_t room, lc_room_info_t *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return lc_engine_room_status(f->e, room, info);
}

static void expect(fx_t *f, const int64_t *src, const int64_t *dst, size_t n)
{
	pthread_mutex_lock(&f->lock);
	memcpy(f->expect_src, src, n * sizeof(int64_t));
	memcpy(f->expect_dst, dst, n * sizeof(int64_t));
	f->expect_n = n;
	pthread_mutex_unlock(&f->lock);
}

static void expect_success(fx_t *f, uint64_t room)
{
	assert_int_equal(lc_engine_room_metadata_set(f->e, room, "m", 1), 0);
	wait_final(f);
	assert_int_equal(f->status, LC_ROOM_SUCCESS);
	assert_true(f->bytes_ok);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.chunks_held, 0);
	assert_int_equal(m.pages_held, 0);
}

static const int64_t SRC[] = {3, 4, 5, 9, 10, 20};
static const int64_t DST[] = {0, 1, 2, 7, 8, 30};

static void every_layer_recorded_before_the_grant_goes_out_after_it(void **state)
{
	fx_t *f = fx_new(NULL);
	lc_room_info_t info;
	assert_int_equal(lc_engine_room_open(f->e, 1), 0);
	expect(f, SRC, DST, 6);
	fx_forward(f, 1, SRC, 6, 0, 1);
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.chunks_held, 1);
	assert_int_equal(m.pages_held, 6);
	assert_int_equal(status_of(f, 1, &info), 0);
	assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPING);
	assert_int_equal(posts(f), 0); /* nowhere to go yet */
	assert_int_equal(fx_grant(f, 1, DST, 6, 0), 0);
	expect_success(f, 1);
	assert_int_equal(posts(f), L);
	fx_free(f);
}

static void half_the_layers_before_the_grant_and_the_rest_after(void **state)
{
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 2), 0);
	expect(f, SRC, DST, 6);
	fx_forward(f, 2, SRC, 6, 0, 1);
	record_layers(f, L / 2);
	assert_int_equal(fx_grant(f, 2, DST, 6, 0), 0);
	wait_posts(f, L / 2); /* the recorded half, at once */
	assert_int_equal(posts(f), L / 2);
	record_layers(f, L - L / 2);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	expect_success(f, 2);
	fx_free(f);
}

static void several_chunks_some_before_the_grant_some_after(void **state)
{
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 3), 0);
	expect(f, SRC, DST, 6);
	fx_forward(f, 3, SRC, 2, 0, 0); /* chunk 0: every layer before */
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	fx_forward(f, 3, SRC + 2, 2, 2, 0); /* chunk 1: half before */
	record_layers(f, L / 2);
	assert_int_equal(metrics(f).chunks_held, 2);
	assert_int_equal(fx_grant(f, 3, DST, 6, 0), 0);
	wait_posts(f, L + L / 2);
	record_layers(f, L - L / 2);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	fx_forward(f, 3, SRC + 4, 2, 4, 1); /* chunk 2: after */
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	expect_success(f, 3);
	assert_int_equal(posts(f), 3 * L);
	assert_int_equal(metrics(f).chunks_added, 3);
	fx_free(f);
}

static void a_chunk_outside_a_batch_is_held_too(void **state)
{
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 4), 0);
	expect(f, SRC, DST, 6);
	assert_int_equal(fx_chunk(f, 4, SRC, 6, 0, 1, 0), 0); /* after its forward */
	assert_int_equal(metrics(f).chunks_held, 1);
	assert_int_equal(fx_grant(f, 4, DST, 6, 0), 0);
	expect_success(f, 4);
	fx_free(f);
}

static void pages_below_ds_prefix_are_left_out_when_counted_from_token_0(void **state)
{
	/* P's chunk covers the request from token 0 (16-token pages); D
	 * holds a prefix of 2 pages and granted the 4 after it. */
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 5), 0);
	expect(f, SRC + 2, DST, 4);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 5, SRC, 3, 0, 0, 16), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
	assert_int_equal(fx_chunk(f, 5, SRC + 3, 3, 3, 1, 16), 0);
	assert_int_equal(lc_engine_batch_end(f->e), 0);
	record_layers(f, L);
	assert_int_equal(lc_engine_record_aux(f->e), 0);
	assert_int_equal(fx_grant(f, 5, DST, 4, 32), 0);
	expect_success(f, 5);
	/* D's prefix pages (D's list does not name them) and the pages past
	 * the granted four are untouched. */
	for (int b = 0; b < NBUF; b++)
		for (int p = 0; p < PAGES; p++) {
			bool granted = p == 0 || p == 1 || p == 2 || p == 7;
			for (int x = 0; !granted && x < ITEM; x++)
				assert_int_equal(f->dmem[b * BUF_BYTES + p * ITEM + x], 0);
		}
	fx_free(f);
}

static void a_prefix_that_is_not_whole_pages_fails_the_room(void **state)
{
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 6), 0);
	assert_int_equal(fx_chunk(f, 6, SRC, 6, 0, 1, 16), 0);
	assert_int_equal(fx_grant(f, 6, DST, 6, 20), 0);
	wait_final(f);
	assert_int_equal(f->status, LC_ROOM_FAILED);
	assert_int_equal(f->reason, LC_FAIL_BAD_INPUT);
	assert_int_equal(posts(f), 0);
	fx_free(f);
}

static void a_room_d_never_grants_fails_at_its_deadline_and_drops_its_chunks(void **state)
{
	const char *knobs[] = {"bootstrap_timeout_ms", "100", NULL};
	fx_t *f = fx_new(knobs);
	lc_room_info_t info;
	assert_int_equal(lc_engine_room_open(f->e, 7), 0);
	fx_forward(f, 7, SRC, 6, 0, 1);
	record_layers(f, L);
	assert_int_equal(metrics(f).pages_held, 6);
	for (int i = 0; i < 20000; i++) { /* the watchdog bounds it too */
		assert_int_equal(status_of(f, 7, &info), 0);
		if (info.status == LC_ROOM_FAILED)
			break;
		usleep(1000);
	}
	assert_int_equal(info.status, LC_ROOM_FAILED);
	assert_int_equal(info.fail_reason, LC_FAIL_BOOTSTRAP_TIMEOUT);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.chunks_held, 0);
	assert_int_equal(m.pages_held, 0);
	assert_int_equal(m.batches_posted, 0);
	fx_free(f);
}

static void cancel_or_close_while_held_releases_everything(void **state)
{
	fx_t *f = fx_new(NULL);
	assert_int_equal(lc_engine_room_open(f->e, 8), 0);
	fx_forward(f, 8, SRC, 6, 0, 1);
	record_layers(f, L / 2);
	assert_int_equal(lc_engine_room_cancel(f->e, 8, "P aborted"), 0);
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.chunks_held, 0);
	assert_int_equal(m.pages_held, 0);
	/* D's info after the cancel: the room has ended, nothing goes out. */
	assert_int_equal(fx_grant(f, 8, DST, 6, 0), LC_ERR_STATE);
	assert_int_equal(fx_chunk(f, 8, SRC, 6, 0, 1, 0), LC_ERR_STATE);
	record_layers(f, L - L / 2);
	lc_room_info_t info;
	assert_int_equal(status_of(f, 8, &info), 0);
	assert_int_equal(info.fail_reason, LC_FAIL_CANCELLED);
	/* Closed while held: the same. */
	assert_int_equal(lc_engine_room_open(f->e, 9), 0);
	assert_int_equal(fx_chunk(f, 9, SRC, 6, 0, 1, 0), 0);
	assert_int_equal(metrics(f).chunks_held, 1);
	assert_int_equal(lc_engine_room_close(f->e, 9), 0);
	assert_int_equal(metrics(f).chunks_held, 0);
	assert_int_equal(posts(f), 0);
	/* The engine's end with chunks held: dropped, nothing leaks. */
	assert_int_equal(lc_engine_room_open(f->e, 10), 0);
	fx_forward(f, 10, SRC, 6, 0, 1);
	fx_free(f);
}

static void held_chunks_are_capped_per_room_and_per_engine(void **state)
{
	const char *knobs[] = {"p_room_held_chunks_max", "2", "p_held_pages_max", "10", NULL};
	fx_t *f = fx_new(knobs);
	assert_int_equal(lc_engine_room_open(f->e, 11), 0);
	assert_int_equal(lc_engine_room_open(f->e, 12), 0);
	assert_int_equal(fx_chunk(f, 11, SRC, 2, 0, 0, 0), 0);
	assert_int_equal(fx_chunk(f, 11, SRC + 2, 2, 2, 0, 0), 0);
	assert_int_equal(fx_chunk(f, 11, SRC + 4, 2, 4, 1, 0), -ENOSPC);
	assert_non_null(strstr(lc_last_error(), "p_room_held_chunks_max"));
	const int64_t seven[] = {1, 2, 3, 4, 5, 6, 7};
	assert_int_equal(fx_chunk(f, 12, seven, 7, 0, 1, 0), -ENOSPC); /* 4 + 7 > 10 */
	assert_non_null(strstr(lc_last_error(), "p_held_pages_max"));
	assert_int_equal(fx_chunk(f, 12, SRC, 6, 0, 0, 0), 0); /* 4 + 6 */
	lc_engine_metrics_t m = metrics(f);
	assert_int_equal(m.chunks_refused_held, 2);
	assert_int_equal(m.chunks_held, 3);
	assert_int_equal(m.pages_held, 10);
	/* Room 11's grant hands its chunks on: room 12 may hold more, and room
	 * 11 takes chunks without a cap. */
	expect(f, SRC, DST, 6);
	assert_int_equal(fx_grant(f, 11, DST, 6, 0), 0);
	assert_int_equal(metrics(f).pages_held, 6);
	assert_int_equal(fx_chunk(f, 12, SRC + 2, 4, 6, 1, 0), 0);
	assert_int_equal(fx_chunk(f, 11, SRC + 4, 2, 4, 1, 0), 0);
	assert_int_equal(lc_engine_room_metadata_set(f->e, 11, "m", 1), 0);
	wait_final(f);
	assert_int_equal(f->status, LC_ROOM_SUCCESS);
	assert_true(f->bytes_ok);
	m = metrics(f);
	assert_int_equal(m.chunks_held, 2); /* room 12's, dropped at the end */
	assert_int_equal(m.pages_held, 10);
	fx_free(f);
}

int main(void)
{
	tu_watchdog(100);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_layer_recorded_before_the_grant_goes_out_after_it),
		cmocka_unit_test(half_the_layers_before_the_grant_and_the_rest_after),
		cmocka_unit_test(several_chunks_some_before_the_grant_some_after),
		cmocka_unit_test(a_chunk_outside_a_batch_is_held_too),
		cmocka_unit_test(pages_below_ds_prefix_are_left_out_when_counted_from_token_0),
		cmocka_unit_test(a_prefix_that_is_not_whole_pages_fails_the_room),
		cmocka_unit_test(a_room_d_never_grants_fails_at_its_deadline_and_drops_its_chunks),
		cmocka_unit_test(cancel_or_close_while_held_releases_everything),
		cmocka_unit_test(held_chunks_are_capped_per_room_and_per_engine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
