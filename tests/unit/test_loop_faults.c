/*
 * loop://'s injected faults do what lc_loop_faults_t says (they are what
 * users' own tests build on): fail_after_bytes lands exactly that many
 * bytes, then fails the batch; fail_room fails that room's batches and no
 * other's. The bytes at the receiver are checked.
 */
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
#include "testutil.h"

#define LEN (64u << 10)

typedef struct fx {
	lc_ctx_t *d, *p;
	lc_listener_t *l;
	uint8_t *dmem, *pmem;
	lc_region_t *dreg, *preg;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint32_t remote;
} fx_t;

static void fx_up(fx_t *f, const char *query)
{
	static int id;
	char url[160];
	lc_ctx_params_t cp = {.size = sizeof cp, .name = "d"};
	assert_int_equal(lc_ctx_create(&cp, &f->d), 0);
	cp.name = "p";
	assert_int_equal(lc_ctx_create(&cp, &f->p), 0);
	f->dmem = calloc(1, LEN);
	f->pmem = malloc(LEN);
	tu_fill(f->pmem, LEN, 3);
	assert_int_equal(lc_region_register(f->d, f->dmem, LEN, &f->dreg), 0);
	assert_int_equal(lc_region_register(f->p, f->pmem, LEN, &f->preg), 0);
	snprintf(url, sizeof url, "loop://faults-%d-%d", (int)getpid(), ++id);
	assert_int_equal(lc_listener_create(f->d, url, &f->l), 0);
	lc_token_t t;
	assert_int_equal(lc_token_issue(f->d, &t), 0);
	for (uint64_t room = 1; room <= 8; room++)
		assert_int_equal(lc_grant_issue(f->d, room, f->dreg, 0, LEN), 0);
	assert_int_equal(lc_cq_create(f->p, &f->cq), 0);
	strncat(url, query, sizeof url - strlen(url) - 1);
	lc_conn_params_t pp = {.size = sizeof pp, .cq = f->cq, .token = t, .has_token = 1};
	assert_int_equal(lc_conn_create(f->p, url, &pp, &f->conn), 0);
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(f->dreg, desc, sizeof desc);
	assert_true(n > 0);
	assert_int_equal(lc_conn_import_region(f->conn, desc, (size_t)n, &f->remote), 0);
}

static void fx_down(fx_t *f)
{
	lc_conn_destroy(f->conn);
	lc_cq_destroy(f->cq);
	lc_listener_destroy(f->l);
	lc_ctx_destroy(f->p);
	lc_ctx_destroy(f->d);
	free(f->dmem);
	free(f->pmem);
}

/* n writes of len bytes from offset 0 on, for room: its completion. */
static lc_completion_t post(fx_t *f, uint64_t room, size_t n, uint64_t len)
{
	lc_write_t w[8];
	for (size_t i = 0; i < n; i++)
		w[i] = (lc_write_t){.local = f->pmem + i * len,
				    .remote_region = f->remote,
				    .remote_offset = i * len,
				    .length = len};
	lc_batch_params_t bp = {.size = sizeof bp, .room = room, .timeout_ms = 10000};
	uint64_t id;
	assert_int_equal(lc_batch_post(f->conn, w, n, &bp, &id), 0);
	lc_completion_t c = tu_wait_one(f->cq, 20000);
	assert_true(c.batch_id == id);
	return c;
}

static void fail_after_bytes_lands_exactly_that_many(void **state)
{
	fx_t f = {0};
	fx_up(&f, "?fail_after_bytes=6000");
	lc_completion_t c = post(&f, 1, 2, 4096);
	assert_int_equal(c.status, LC_ERR_INJECTED);
	assert_non_null(strstr(c.reason, "after 6000 bytes"));
	assert_memory_equal(f.dmem, f.pmem, 6000);
	for (size_t i = 6000; i < 8192; i++)
		if (f.dmem[i])
			fail_msg("byte %zu landed past fail_after_bytes", i);
	/* The budget is spent: the next batch lands nothing. */
	c = post(&f, 2, 1, 4096);
	assert_int_equal(c.status, LC_ERR_INJECTED);
	fx_down(&f);
}

static void fail_room_fails_that_room_only(void **state)
{
	fx_t f = {0};
	fx_up(&f, "");
	lc_loop_faults_t lf = {.size = sizeof lf, .mask = LC_FAULT_FAIL_ROOM, .fail_room = 5};
	assert_int_equal(lc_loop_set_faults(f.conn, &lf), 0);
	lc_completion_t c = post(&f, 5, 1, 4096);
	assert_int_equal(c.status, LC_ERR_INJECTED);
	assert_non_null(strstr(c.reason, "room 5"));
	for (size_t i = 0; i < 4096; i++)
		if (f.dmem[i])
			fail_msg("room 5's byte %zu landed", i);
	c = post(&f, 6, 1, 4096);
	assert_int_equal(c.status, 0);
	assert_memory_equal(f.dmem, f.pmem, 4096);
	fx_down(&f);
}

int main(void)
{
	tu_watchdog(60);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fail_after_bytes_lands_exactly_that_many),
		cmocka_unit_test(fail_room_fails_that_room_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
