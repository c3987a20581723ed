/*
 * D sessions at the engine (lc_engine_session_add / _remove / _blocked),
 * through the public API only, over loop:// in one process: every way a
 * caller can get the parameters wrong is refused with its code and adds
 * nothing; registering a name again or removing it fails that session's
 * rooms in flight (LC_FAIL_SESSION_GONE, the reason says which) and leaves
 * other sessions' rooms alone. Also lc_engine_create's refusals, and rooms
 * whose destination and chunk cannot be planned together (bad_input).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "layercake.h"

#define L 2
#define PAGES 8
#define ITEM 256
#define NBUF (2 * L)
#define BUF_BYTES (PAGES * ITEM)

typedef struct fx {
	lc_ctx_t *d, *p;
	lc_listener_t *listener;
	char url[128];
	lc_token_t token;
	uint8_t *dmem, *pmem;
	lc_region_t *dreg, *preg;
	uint8_t desc[LC_REGION_DESC_MAX];
	size_t dlen;
	lc_layout_t *layout;
	lc_engine_t *e;
	/* the arrays of params() */
	const void *descs[1];
	size_t lens[1];
	uint32_t region[NBUF];
	uint64_t offset[NBUF];
} fx_t;

static int fx_setup(void **state)
{
	static int id;
	fx_t *f = calloc(1, sizeof *f);
	assert_non_null(f);
	lc_ctx_params_t cp = {.size = sizeof cp, .name = "D"};
	assert_int_equal(lc_ctx_create(&cp, &f->d), 0);
	cp.name = "P";
	assert_int_equal(lc_ctx_create(&cp, &f->p), 0);
	snprintf(f->url, sizeof f->url, "loop://sessions-%d-%d", (int)getpid(), ++id);
	assert_int_equal(lc_listener_create(f->d, f->url, &f->listener), 0);
	assert_int_equal(lc_token_issue(f->d, &f->token), 0);
	f->dmem = calloc(1, NBUF * BUF_BYTES);
	f->pmem = calloc(1, NBUF * BUF_BYTES);
	assert_int_equal(lc_region_register(f->d, f->dmem, NBUF * BUF_BYTES, &f->dreg), 0);
	assert_int_equal(lc_region_register(f->p, f->pmem, NBUF * BUF_BYTES, &f->preg), 0);
	int n = lc_region_pack(f->dreg, f->desc, sizeof f->desc);
	assert_true(n > 0);
	f->dlen = (size_t)n;
	void *bases[NBUF];
	for (int b = 0; b < NBUF; b++)
		bases[b] = f->pmem + b * BUF_BYTES;
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	assert_int_equal(lc_layout_build(&lp, &f->layout), 0);
	lc_engine_params_t ep = {.size = sizeof ep, .layout = f->layout, .name = "sessions"};
	assert_int_equal(lc_engine_create(f->p, &ep, &f->e), 0);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	fx_t *f = *state;
	lc_engine_destroy(f->e);
	lc_layout_destroy(f->layout);
	lc_ctx_destroy(f->p);
	lc_ctx_destroy(f->d);
	free(f->dmem);
	free(f->pmem);
	free(f);
	return 0;
}

/* Valid parameters for session `name`: D's one region holds every buffer,
 * back to back. */
static lc_session_params_t params(fx_t *f, const char *name)
{
	f->descs[0] = f->desc;
	f->lens[0] = f->dlen;
	for (int b = 0; b < NBUF; b++) {
		f->region[b] = 0;
		f->offset[b] = (uint64_t)b * BUF_BYTES;
	}
	return (lc_session_params_t){.size = sizeof(lc_session_params_t),
				     .name = name,
				     .url = f->url,
				     .token = f->token,
				     .has_token = 1,
				     .region_descs = f->descs,
				     .region_desc_lens = f->lens,
				     .region_count = 1,
				     .buffer_region = f->region,
				     .buffer_offset = f->offset};
}

static uint64_t bad_input(fx_t *f)
{
	lc_engine_metrics_t m = {.size = sizeof m};
	assert_int_equal(lc_engine_metrics(f->e, &m), 0);
	return m.bad_input;
}

static void expect_unknown(fx_t *f, const char *name)
{
	assert_int_equal(lc_engine_session_blocked(f->e, name, NULL), -ENOENT);
}

/* A room with session `name` as its one destination: Bootstrapped. */
static void room_on(fx_t *f, uint64_t room, const char *name)
{
	int64_t pages[2] = {0, 1};
	lc_dst_params_t dp = {.size = sizeof dp,
			      .session = name,
			      .pages = pages,
			      .page_count = 2,
			      .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, room, &dp), 0);
	lc_room_info_t info = {.size = sizeof info};
	assert_int_equal(lc_engine_room_status(f->e, room, &info), 0);
	assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPED);
}

static void expect_failed(fx_t *f, uint64_t room, const char *words)
{
	lc_room_info_t info = {.size = sizeof info};
	assert_int_equal(lc_engine_room_status(f->e, room, &info), 0);
	assert_int_equal(info.status, LC_ROOM_FAILED);
	assert_int_equal(info.fail_reason, LC_FAIL_SESSION_GONE);
	if (!strstr(info.reason, words))
		fail_msg("reason \"%s\" does not say \"%s\"", info.reason, words);
}

static void bad_params_are_refused_and_add_nothing(void **state)
{
	fx_t *f = *state;
	lc_session_params_t p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(NULL, &p), -EINVAL);
	assert_int_equal(lc_engine_session_add(f->e, NULL), -EINVAL);
	p.size = 8; /* before buffer_region: a struct from no known version */
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	p = params(f, NULL);
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	p = params(f, "");
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	p = params(f, "d0");
	p.url = NULL;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	p = params(f, "d0");
	p.region_descs = NULL;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	p = params(f, "d0");
	p.region_desc_lens = NULL;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	/* Without buffer_region: one descriptor per buffer is required. */
	p = params(f, "d0");
	p.buffer_region = NULL;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	/* A buffer in a descriptor that was not given. */
	p = params(f, "d0");
	f->region[NBUF - 1] = 1;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	expect_unknown(f, "d0");
	/* The same parameters, fixed, are taken. */
	p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	uint64_t failures = 7;
	assert_int_equal(lc_engine_session_blocked(f->e, "d0", &failures), 0);
	assert_int_equal(failures, 0);
}

/* A listener that does not exist and a descriptor that is not one: the
 * connection's and the import's errors, nothing registered. */
static void unreachable_url_and_bad_descriptor(void **state)
{
	fx_t *f = *state;
	lc_session_params_t p = params(f, "d0");
	p.url = "nosuchscheme://127.0.0.1:1";
	assert_int_not_equal(lc_engine_session_add(f->e, &p), 0);
	expect_unknown(f, "d0");
	p = params(f, "d0");
	uint8_t junk[16];
	memset(junk, 0x5a, sizeof junk);
	f->descs[0] = junk;
	f->lens[0] = sizeof junk;
	assert_int_not_equal(lc_engine_session_add(f->e, &p), 0);
	expect_unknown(f, "d0");
}

/* Fragments (heterogeneous TP) outside their pages: LC_ERR_GEOMETRY, each
 * counted as bad input; a fitting one is taken. */
static void fragments_outside_their_pages_are_refused(void **state)
{
	fx_t *f = *state;
	const lc_fragment_t ok = {.buffer = 0, .bytes = ITEM / 2, .dst_item_len = ITEM / 2};
	struct {
		lc_fragment_t fr[2];
		size_t n;
	} bad[] = {
		{{{.buffer = NBUF, .bytes = 64, .dst_item_len = ITEM}}, 1},  /* no such buffer */
		{{ok, ok}, 2},                                               /* named twice */
		{{{.buffer = 1, .bytes = 0, .dst_item_len = ITEM}}, 1},      /* no bytes */
		{{{.buffer = 1, .bytes = ITEM + 1, .dst_item_len = 2 * ITEM}}, 1}, /* > P page */
		{{{.buffer = 1, .src_offset = ITEM + 8, .bytes = 8, .dst_item_len = ITEM}}, 1},
		{{{.buffer = 1, .dst_offset = 64, .bytes = 64, .dst_item_len = 100}}, 1}, /* > D */
		/* blocks: overlapping, stride beyond the page, too many, past the end */
		{{{.buffer = 1, .bytes = 64, .dst_item_len = ITEM, .count = 2, .src_stride = 32,
		   .dst_stride = 64}},
		 1},
		{{{.buffer = 1, .bytes = 64, .dst_item_len = ITEM, .count = 2,
		   .src_stride = ITEM + 64, .dst_stride = 64}},
		 1},
		{{{.buffer = 1, .bytes = 1, .dst_item_len = ITEM, .count = LC_WRITE_MAX_COUNT + 1,
		   .src_stride = 1, .dst_stride = 1}},
		 1},
		{{{.buffer = 1, .bytes = 64, .dst_item_len = ITEM, .count = 4, .src_stride = 64,
		   .dst_stride = 128}},
		 1},
	};
	uint64_t before = bad_input(f);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lc_session_params_t p = params(f, "d0");
		p.fragments = bad[i].fr;
		p.fragment_count = bad[i].n;
		int rc = lc_engine_session_add(f->e, &p);
		if (rc != LC_ERR_GEOMETRY)
			fail_msg("fragment set %zu: %s, expected LC_ERR_GEOMETRY", i,
				 lc_err_name(rc));
		expect_unknown(f, "d0");
	}
	assert_int_equal(bad_input(f) - before, sizeof bad / sizeof bad[0]);
	/* A count without the array. */
	lc_session_params_t p = params(f, "d0");
	p.fragment_count = 1;
	assert_int_equal(lc_engine_session_add(f->e, &p), -EINVAL);
	/* Half of each page of buffer 0, and token rows of buffer 1. */
	lc_fragment_t good[2] = {ok,
				 {.buffer = 1, .bytes = 32, .dst_item_len = ITEM / 2, .count = 4,
				  .src_stride = 64, .dst_stride = 32}};
	p = params(f, "d0");
	p.fragments = good;
	p.fragment_count = 2;
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	assert_int_equal(lc_engine_session_blocked(f->e, "d0", NULL), 0);
}

/* Registering d0 again fails d0's rooms in flight, not d1's. */
static void register_again_fails_the_rooms_in_flight(void **state)
{
	fx_t *f = *state;
	lc_session_params_t p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	p = params(f, "d1");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	room_on(f, 1, "d0");
	room_on(f, 2, "d1");
	p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	expect_failed(f, 1, "registered again");
	lc_room_info_t info = {.size = sizeof info};
	assert_int_equal(lc_engine_room_status(f->e, 2, &info), 0);
	assert_int_equal(info.status, LC_ROOM_BOOTSTRAPPED);
	/* The new d0 takes rooms. */
	room_on(f, 3, "d0");
}

/* Removing d0 fails its rooms in flight and forgets it; a room that
 * already finished on it stays readable. */
static void remove_fails_the_rooms_and_forgets_the_session(void **state)
{
	fx_t *f = *state;
	lc_session_params_t p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	room_on(f, 1, "d0");
	room_on(f, 2, "d0");
	assert_int_equal(lc_engine_room_cancel(f->e, 2, "the test"), 0);
	assert_int_equal(lc_engine_session_remove(f->e, "d0"), 0);
	expect_failed(f, 1, "removed");
	lc_room_info_t info = {.size = sizeof info};
	assert_int_equal(lc_engine_room_status(f->e, 2, &info), 0);
	assert_int_equal(info.status, LC_ROOM_FAILED);
	assert_int_equal(info.fail_reason, LC_FAIL_CANCELLED);
	expect_unknown(f, "d0");
	assert_int_equal(lc_engine_session_remove(f->e, "d0"), -ENOENT);
	assert_int_equal(lc_engine_session_remove(f->e, NULL), -EINVAL);
	assert_int_equal(lc_engine_session_remove(NULL, "d0"), -EINVAL);
	assert_int_equal(lc_engine_session_blocked(NULL, "d0", NULL), -EINVAL);
	assert_int_equal(lc_engine_session_blocked(f->e, NULL, NULL), -EINVAL);
	/* A destination naming it now is unknown. */
	int64_t pages[1] = {0};
	lc_dst_params_t dp = {.size = sizeof dp,
			      .session = "d0",
			      .pages = pages,
			      .page_count = 1,
			      .required_dst_count = 1};
	assert_int_equal(lc_engine_room_dst_add(f->e, 4, &dp), -ENOENT);
	/* And it can be registered anew. */
	p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	room_on(f, 5, "d0");
}

/* lc_engine_create refuses what it cannot run with, and writes nothing. */
static void engine_create_refuses_bad_params(void **state)
{
	fx_t *f = *state;
	lc_engine_t *e = NULL;
	lc_engine_params_t ep = {.size = sizeof ep, .layout = f->layout};
	assert_int_equal(lc_engine_create(NULL, &ep, &e), -EINVAL);
	assert_int_equal(lc_engine_create(f->p, &ep, NULL), -EINVAL);
	assert_int_equal(lc_engine_create(f->p, NULL, &e), -EINVAL);
	ep.size = sizeof(size_t);
	assert_int_equal(lc_engine_create(f->p, &ep, &e), -EINVAL);
	ep = (lc_engine_params_t){.size = sizeof ep};
	assert_int_equal(lc_engine_create(f->p, &ep, &e), -EINVAL);
	/* A layout without base addresses (D's view of a pool). */
	lc_layout_t *bare;
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM}};
	if (lc_layout_build(&lp, &bare) == 0) {
		ep.layout = bare;
		assert_int_equal(lc_engine_create(f->p, &ep, &e), -EINVAL);
		lc_layout_destroy(bare);
	}
	assert_null(e);
}

/* The room's status once it is final (10 s at most). */
static lc_room_info_t final_of(fx_t *f, uint64_t room)
{
	lc_room_info_t info = {.size = sizeof info};
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(lc_engine_room_status(f->e, room, &info), 0);
		if (info.status == LC_ROOM_FAILED || info.status == LC_ROOM_SUCCESS)
			return info;
		usleep(5000);
	}
	fail_msg("room %llu did not end: status %d", (unsigned long long)room, info.status);
	return info;
}

/* What D's transfer info and P's chunk disagree on fails the room at
 * planning with bad_input and says what: state slots that do not pair
 * (2 at P, 3 at D: only 1:n broadcasts), a D page list too short for the
 * chunk, a D-side partial cache whose local ids run out. */
static void plans_that_do_not_fit_fail_the_room(void **state)
{
	fx_t *f = *state;
	lc_session_params_t p = params(f, "d0");
	assert_int_equal(lc_engine_session_add(f->e, &p), 0);
	assert_int_equal(lc_grant_issue(f->d, 1, f->dreg, 0, NBUF * BUF_BYTES), 0);
	int64_t dpages[4] = {0, 1, 2, 3}, dslots[3] = {0, 1, 2}, pslots[2] = {0, 1};
	int64_t dlocal[1] = {5};
	uint8_t dmask[2] = {1, 1};
	struct {
		uint64_t room;
		size_t dpage_count, dslot_count;
		const uint8_t *mask;
		const char *words;
	} t[] = {
		{61, 2, 3, NULL, "state slots"},
		{62, 1, 0, NULL, "holds 1 pages"},
		{63, 2, 0, dmask, "partial-cache index out of range"},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		lc_dst_params_t dp = {.size = sizeof dp,
				      .session = "d0",
				      .pages = dpages,
				      .page_count = t[i].dpage_count,
				      .required_dst_count = 1,
				      .state_slots = dslots,
				      .state_slot_count = t[i].dslot_count,
				      .dst_mask = t[i].mask,
				      .dst_local = t[i].mask ? dlocal : NULL,
				      .dst_local_count = t[i].mask ? 1 : 0};
		assert_int_equal(lc_engine_room_dst_add(f->e, t[i].room, &dp), 0);
		int64_t ppages[2] = {0, 1};
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = t[i].room,
				 .pages = ppages,
				 .page_count = 2,
				 .is_last = 1,
				 .state_slots = pslots,
				 .state_slot_count = 2};
		assert_int_equal(lc_engine_batch_begin(f->e, 0), 0);
		assert_int_equal(lc_engine_chunk_add(f->e, &ch), 0);
		assert_int_equal(lc_engine_batch_end(f->e), 0);
		lc_room_info_t info = final_of(f, t[i].room);
		assert_int_equal(info.status, LC_ROOM_FAILED);
		assert_int_equal(info.fail_reason, LC_FAIL_BAD_INPUT);
		if (!strstr(info.reason, t[i].words))
			fail_msg("room %llu: \"%s\" does not say \"%s\"",
				 (unsigned long long)t[i].room, info.reason, t[i].words);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(bad_params_are_refused_and_add_nothing, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(unreachable_url_and_bad_descriptor, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(fragments_outside_their_pages_are_refused,
						fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(register_again_fails_the_rooms_in_flight, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(remove_fails_the_rooms_and_forgets_the_session,
						fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(engine_create_refuses_bad_params, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(plans_that_do_not_fit_fail_the_room, fx_setup,
						fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
