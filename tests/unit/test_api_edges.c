/* The public calls' edges that test_misuse.c leaves: log levels by number
 * and alias and out of range, region accessors on NULL, ranges that wrap or
 * overlap, counters and knobs read into too little room, grants outside
 * their region, simulated memory without a source, histogram quantiles at
 * their bounds. Each answered exactly, or refused with the reason. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layercake.h"
#include "testutil.h"

static void log_levels(void **state)
{
	(void)state;
	lc_log_level_t l;
	assert_int_equal(lc_log_level_parse("3", &l), 0);
	assert_int_equal(l, LC_LOG_INFO);
	assert_int_equal(lc_log_level_parse("0", &l), 0);
	assert_int_equal(l, LC_LOG_OFF);
	assert_int_equal(lc_log_level_parse("WARNING", &l), 0);
	assert_int_equal(l, LC_LOG_WARN);
	assert_int_equal(lc_log_level_parse("Debug", &l), 0);
	assert_int_equal(l, LC_LOG_DEBUG);
	assert_true(lc_log_level_parse("9", &l) < 0);
	assert_true(lc_log_level_parse("33", &l) < 0);
	lc_log_level_t was = lc_log_get_level();
	lc_log_set_level((lc_log_level_t)-7);
	assert_int_equal(lc_log_get_level(), LC_LOG_OFF);
	lc_log_set_level((lc_log_level_t)99);
	assert_int_equal(lc_log_get_level(), LC_LOG_TRACE);
	lc_log_set_level(was);
}

static void regions(void **state)
{
	(void)state;
	assert_int_equal(lc_region_id(NULL), 0);
	assert_null(lc_region_addr(NULL));
	assert_int_equal(lc_region_length(NULL), 0);
	lc_ctx_t *c;
	lc_ctx_params_t p = {.size = sizeof p, .name = "edges"};
	assert_int_equal(lc_ctx_create(&p, &c), 0);
	lc_region_t *r = NULL, *r2 = NULL;
	/* a range that wraps past the end of the address space */
	assert_int_equal(lc_region_register(c, (void *)(UINTPTR_MAX - 15), 64, &r), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "wraps"));
	uint8_t *buf = malloc(1 << 16);
	assert_int_equal(lc_region_register(c, buf, 1 << 16, &r), 0);
	/* overlapping one registered already */
	assert_true(lc_region_register(c, buf + 4096, 4096, &r2) < 0);
	assert_null(r2);
	/* grants outside the region, of no length, of another context's */
	assert_int_equal(lc_grant_issue(c, 1, r, 0, 0), LC_ERR_OUT_OF_REGION);
	assert_int_equal(lc_grant_issue(c, 1, r, (1 << 16) + 1, 1), LC_ERR_OUT_OF_REGION);
	assert_int_equal(lc_grant_issue(c, 1, r, 4096, 1 << 16), LC_ERR_OUT_OF_REGION);
	assert_non_null(strstr(lc_last_error(), "are not inside region"));
	assert_int_equal(lc_grant_issue(c, 1, NULL, 0, 1), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "region is NULL"));
	lc_ctx_t *other;
	assert_int_equal(lc_ctx_create(&p, &other), 0);
	assert_int_equal(lc_grant_issue(other, 1, r, 0, 1), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "another context"));
	lc_ctx_destroy(other);
	/* counters and knobs into too little room, or not named */
	uint64_t v;
	assert_int_equal(lc_ctx_counter(c, -1, &v), -ERANGE);
	assert_int_equal(lc_ctx_counter(c, lc_counter_count(), &v), -ERANGE);
	assert_int_equal(lc_ctx_counter(c, 0, NULL), -EINVAL);
	assert_int_equal(lc_ctx_counter(NULL, 0, &v), -EINVAL);
	assert_int_equal(lc_ctx_counter(c, 0, &v), 0);
	assert_int_equal(lc_ctx_counter_by_name(c, NULL, &v), -EINVAL);
	assert_int_equal(lc_ctx_counter_by_name(c, "batches_posted", NULL), -EINVAL);
	char small[2];
	char full[64];
	int n = lc_ctx_config_get(c, "connect_timeout_ms", full, sizeof full);
	assert_true(n >= 2); /* a number of more than one digit */
	assert_int_equal(lc_ctx_config_get(c, "connect_timeout_ms", small, sizeof small), -ENOSPC);
	assert_true(lc_ctx_config_set(c, NULL, "1") < 0);
	assert_int_equal(lc_region_deregister(r), 0);
	lc_ctx_destroy(c);
	free(buf);
}

static void sim_and_histogram(void **state)
{
	(void)state;
	void *s;
	assert_int_equal(lc_sim_alloc(4096, &s), 0);
	assert_int_equal(lc_sim_write(s, NULL, 16), -EINVAL);
	assert_int_equal(lc_sim_read(s, NULL, 16), -EINVAL);
	assert_int_equal(lc_sim_write(s, NULL, 0), 0);
	assert_int_equal(lc_sim_free(s), 0);
	assert_true(lc_histogram_bucket_le_us(-1) == HUGE_VAL);
	assert_true(lc_histogram_bucket_le_us(LC_HIST_BUCKETS - 1) == HUGE_VAL);
	assert_true(lc_histogram_bucket_le_us(4) == 2.0);
	lc_histogram_t h = {0};
	assert_true(lc_histogram_quantile_us(NULL, 0.5) == 0);
	assert_true(lc_histogram_quantile_us(&h, 0.5) == 0); /* empty */
	h.count = 2;
	h.buckets[0] = 1;                   /* <= 1 us */
	h.buckets[LC_HIST_BUCKETS - 1] = 1; /* above every bound */
	assert_true(lc_histogram_quantile_us(&h, 0) == 0);
	assert_true(lc_histogram_quantile_us(&h, 0.5) == 1.0);
	/* q past 1 is 1: the top bucket has no bound, its lower one is said */
	assert_true(lc_histogram_quantile_us(&h, 7) ==
		    lc_histogram_bucket_le_us(LC_HIST_BUCKETS - 2));
}

/* P's and D's calls on a NULL object or into NULL: -EINVAL with the reason;
 * the void ones are no-ops. */
static void pd_calls_on_null(void **state)
{
	(void)state;
	lc_engine_t *e;
	lc_sender_t *sn;
	lc_receiver_t *rc;
	lc_room_info_t info = {.size = sizeof info};
	char buf[64];
	uint64_t v;
	lc_receiver_pages_t pg = {.size = sizeof pg};
	assert_int_equal(lc_prefill_engine(NULL, &e), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "prefill is NULL"));
	assert_int_equal(lc_prefill_endpoint(NULL, buf, sizeof buf), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "prefill is NULL"));
	assert_int_equal(lc_prefill_counter(NULL, "x", &v), -EINVAL);
	assert_int_equal(lc_sender_create(NULL, 1, &sn), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "prefill is NULL"));
	assert_true(lc_sender_metadata_set(NULL, buf, 1) < 0);
	assert_true(lc_sender_poll(NULL, &info) < 0);
	assert_int_equal(lc_sender_prefix_len(NULL, &v), -EINVAL);
	assert_true(lc_sender_cancel(NULL, "x") < 0);
	lc_sender_destroy(NULL);
	lc_prefill_destroy(NULL);
	assert_int_equal(lc_decode_endpoint(NULL, buf, sizeof buf), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "decode is NULL"));
	assert_int_equal(lc_decode_counter(NULL, "x", &v), -EINVAL);
	assert_true(lc_receiver_create(NULL, NULL, 1, &rc) < 0);
	assert_true(lc_receiver_send(NULL, &pg) < 0);
	assert_true(lc_receiver_poll(NULL, &info) < 0);
	assert_true(lc_receiver_layers_ready(NULL) < 0);
	assert_true(lc_receiver_metadata(NULL, buf, sizeof buf) < 0);
	assert_true(lc_receiver_cancel(NULL, "x") < 0);
	lc_receiver_destroy(NULL);
	lc_decode_destroy(NULL);
	assert_true(lc_bootstrap_port(NULL) < 0);
	assert_true(lc_bootstrap_addr(NULL, buf, sizeof buf) < 0);
	lc_bootstrap_stop(NULL);
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(log_levels),
		cmocka_unit_test(regions),
		cmocka_unit_test(sim_and_histogram),
		cmocka_unit_test(pd_calls_on_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
