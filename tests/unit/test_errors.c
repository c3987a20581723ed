/* Errors carry their cause: lc_last_error() after each failing call names
 * what was wrong; reasons are cut at a word; the rate-limited log path
 * (LC__LOG_PEER) lets the first line through and counts what it holds back. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/addr.h"
#include "core/common.h"
#include "layercake.h"
#include "testutil.h"

/* The failure rc, with lc_last_error() holding `want` for that code. */
#define assert_fails_with(call, rc, want)                                                          \
	do {                                                                                       \
		lc_last_error_clear();                                                             \
		int got_ = (call);                                                                 \
		assert_int_equal(got_, (rc));                                                      \
		assert_int_equal(lc_last_error_code(), (rc));                                      \
		if (!strstr(lc_last_error(), (want)))                                              \
			fail_msg("%s: reason \"%s\" lacks \"%s\"", #call, lc_last_error(), (want)); \
	} while (0)

static void listener_urls_say_what_is_wrong(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_listener_t *l = NULL;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_fails_with(lc_listener_create(ctx, "tcp://127.0.0.1", &l), -EINVAL,
			  "tcp://127.0.0.1: missing port");
	assert_fails_with(lc_listener_create(ctx, "tcp://127.0.0.1:99999", &l), -EINVAL,
			  "port '99999' is not a number in 0..65535");
	assert_fails_with(lc_listener_create(ctx, "tcp://[::1]", &l), -EINVAL, "missing port");
	assert_fails_with(lc_listener_create(ctx, NULL, &l), -EINVAL, "url is NULL");
	assert_fails_with(lc_listener_create(ctx, "nope://x:1", &l), LC_ERR_NO_TRANSPORT,
			  "no transport for nope://x:1");
	if (tu_transport_built("shm"))
		assert_fails_with(lc_listener_create(ctx, "shm://bad/name", &l), -EINVAL,
				  "'/' in the name");
	/* A call that succeeds after a failure starts afresh. */
	assert_int_equal(lc_listener_create(ctx, "tcp://127.0.0.1:0", &l), 0);
	assert_int_equal(lc_last_error_code(), 0);
	assert_string_equal(lc_last_error(), "");
	lc_listener_destroy(l);
	lc_ctx_destroy(ctx);
}

static void connections_and_params_say_what_is_missing(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_conn_t *c;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	assert_fails_with(lc_conn_create(ctx, "tcp://127.0.0.1:1", NULL, &c), -EINVAL,
			  "params (cq is required)");
	lc_conn_params_t p = {.size = sizeof p};
	assert_fails_with(lc_conn_create(ctx, "tcp://127.0.0.1:1", &p, &c), -EINVAL,
			  "params->cq is required");
	p.cq = cq;
	assert_fails_with(lc_conn_create(ctx, "tcp://127.0.0.1", &p, &c), -EINVAL,
			  "tcp://127.0.0.1: missing port");
	assert_fails_with(lc_ctx_config_set(ctx, "tcp_lanes", "100000"), -ERANGE,
			  "config set tcp_lanes=100000: out of range (allowed");
	assert_fails_with(lc_ctx_config_set(ctx, "no_such_knob", "1"), -ENOENT,
			  "no knob named 'no_such_knob'");
	/* A forgotten .size in a struct that needs it. */
	lc_engine_params_t ep = {.size = 0};
	lc_engine_t *e;
	assert_fails_with(lc_engine_create(ctx, &ep, &e), -EINVAL,
			  "params->size is too small (set it to sizeof(lc_engine_params_t))");
	/* NULL params where a field is required: the same -EINVAL, saying so */
	assert_fails_with(lc_engine_create(ctx, NULL, &e), -EINVAL,
			  "params is NULL (the layout is required)");
	ep.size = sizeof ep;
	assert_fails_with(lc_engine_create(ctx, &ep, &e), -EINVAL, "params->layout is required");
	/* ... and where every field has a default, NULL is those defaults */
	static char mem[4096];
	lc_region_t *r;
	assert_int_equal(lc_region_register_ex(ctx, mem, sizeof mem, NULL, &r), 0);
	assert_int_equal(lc_region_kind(r), LC_MEM_KIND_HOST);
	assert_int_equal(lc_region_deregister(r), 0);
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

static void bootstrap_addresses_must_be_host_port(void **state)
{
	(void)state;
	char out[64];
	assert_int_equal(lc__addr_bootstrap("127.0.0.1:8998", out, sizeof out), 0);
	assert_string_equal(out, "127.0.0.1:8998");
	assert_int_equal(lc__addr_bootstrap("http://[::1]:8998/", out, sizeof out), 0);
	assert_string_equal(out, "[::1]:8998");
	assert_fails_with(lc__addr_bootstrap("localhost", out, sizeof out), -EINVAL,
			  "localhost: missing port: a bootstrap address is host:port");
	assert_fails_with(lc__addr_bootstrap("tcp://10.0.0.1:8998", out, sizeof out), -EINVAL,
			  "tcp:// is not the bootstrap server's scheme");
	assert_fails_with(lc__addr_bootstrap("127.0.0.1:0", out, sizeof out), -EINVAL, "port 0");
	assert_fails_with(lc__addr_bootstrap("127.0.0.1:x", out, sizeof out), -EINVAL,
			  "the port is not a number");
	assert_fails_with(lc__addr_bootstrap(":8998", out, sizeof out), -EINVAL, "no host");
	assert_fails_with(lc__addr_bootstrap("h:1/route", out, sizeof out), -EINVAL, "no path");
}

/* P and D creation: the cause in words, not "invalid argument". */
static void prefill_and_decode_name_the_cause(void **state)
{
	(void)state;
	tu_pool_t pool;
	tu_pool_init(&pool, "e", NULL, 2, 8, 64);
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = pool.layout,
				  .bootstrap = "localhost",
				  .world_size = 1,
				  .dp_size = 1};
	lc_prefill_t *p;
	int rc = lc_prefill_create(pool.ctx, &pp, &p);
	if (rc == LC_ENOTSUP) {
		tu_pool_fini(&pool);
		skip();
	}
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(lc_last_error(), "localhost: missing port"));
	assert_non_null(strstr(lc_last_error(), "host:port"));

	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = pool.layout,
				 .regions = &pool.region,
				 .region_count = 1};
	lc_decode_t *d;
	assert_fails_with(lc_decode_create(pool.ctx, &dp, &d), -EINVAL,
			  "params->listen_url is required");
	/* A region that holds buffer 0 only. */
	lc_region_t *small;
	assert_int_equal(lc_region_register(pool.ctx, malloc(4096), 4096, &small), 0);
	void *small_addr = lc_region_addr(small);
	lc_buffer_t b = {.base = small_addr, .length = 64 * 8, .item_len = 64, .layer = 0};
	lc_buffer_t bufs[2] = {b, b};
	bufs[1].base = pool.bases[1];
	lc_layout_t *lay;
	assert_int_equal(lc_layout_create(bufs, 2, &lay), 0);
	dp.layout = lay;
	dp.regions = &small;
	dp.listen_url = "tcp://127.0.0.1:0";
	assert_fails_with(lc_decode_create(pool.ctx, &dp, &d), -EINVAL,
			  "buffer 1 is not inside any given region");
	dp.listen_url = "tcp://127.0.0.1";
	assert_fails_with(lc_decode_create(pool.ctx, &dp, &d), -EINVAL,
			  "tcp://127.0.0.1: missing port");

	dp.layout = pool.layout;
	dp.regions = &pool.region;
	dp.listen_url = "tcp://127.0.0.1:0";
	assert_int_equal(lc_decode_create(pool.ctx, &dp, &d), 0);
	lc_receiver_t *r;
	assert_fails_with(lc_receiver_create(d, "localhost", 1, &r), -EINVAL,
			  "localhost: missing port: a bootstrap address is host:port");
	assert_fails_with(lc_receiver_create(d, "tcp://127.0.0.1:8998", 1, &r), -EINVAL,
			  "tcp:// is not the bootstrap server's scheme");
	lc_decode_destroy(d);
	lc_layout_destroy(lay);
	lc_region_deregister(small);
	free(small_addr);
	tu_pool_fini(&pool);
}

static void *other_thread(void *arg)
{
	*(const char **)arg = lc_last_error()[0] ? "set" : "";
	return NULL;
}

static void the_reason_is_the_calling_threads(void **state)
{
	(void)state;
	const char *seen = "unset";
	pthread_t t;
	lc__error_set(-EINVAL, "here only");
	assert_int_equal(pthread_create(&t, NULL, other_thread, &seen), 0);
	pthread_join(t, NULL);
	assert_string_equal(seen, "");
	assert_string_equal(lc_last_error(), "here only");
	assert_int_equal(LC__FAIL(-ENOSPC, "outer: %s", lc__why(-EINVAL)), -ENOSPC);
	assert_string_equal(lc_last_error(), "outer: here only");
	assert_string_equal(lc__why(-EINVAL), lc_strerror(-EINVAL)); /* code differs now */
}

static void reasons_are_cut_at_a_word(void **state)
{
	(void)state;
	char buf[LC_REASON_MAX], text[400] = "";
	while (strlen(text) < 300)
		strcat(text, "segment of words ");
	lc__reason(buf, sizeof buf, "%s", text);
	size_t n = strlen(buf);
	assert_true(n < sizeof buf);
	assert_string_equal(buf + n - 3, "...");
	/* What precedes "..." ends a word of the original text. */
	assert_memory_equal(buf, text, n - 3);
	assert_true(text[n - 3] == ' ');
	/* A text that fits is left alone. */
	lc__reason(buf, sizeof buf, "short %d", 1);
	assert_string_equal(buf, "short 1");
}

static int lines;
static char last_line[1024];
static void count_lines(lc_log_level_t level, const char *line, void *arg)
{
	(void)level;
	(void)arg;
	lines++;
	snprintf(last_line, sizeof last_line, "%s", line);
}

static void flood(int n)
{
	for (int i = 0; i < n; i++)
		LC__WARN_PEER("a peer's message %d dropped", i);
}

static void peer_lines_are_rate_limited_with_a_count(void **state)
{
	(void)state;
	lc_log_set_handler(count_lines, NULL);
	uint64_t t0 = lc__now_ns();
	flood(10000);
	bool quick = lc__now_ns() - t0 < LC__LOG_PEER_INTERVAL_NS;
	if (quick)
		assert_int_equal(lines, 1); /* the first only */
	assert_non_null(strstr(last_line, "a peer's message 0 dropped"));
	assert_null(strstr(last_line, "more since last"));
	usleep(LC__LOG_PEER_INTERVAL_NS / 1000 + 100000);
	int before = lines;
	flood(1);
	assert_int_equal(lines, before + 1);
	if (quick)
		assert_non_null(strstr(last_line, "(9999 more since last)"));
	else
		assert_non_null(strstr(last_line, "more since last)"));

	/* The limiter itself: one pass per interval, every other call counted. */
	lc__ratelimit_t rl = {0};
	uint64_t more = 99;
	assert_true(lc__ratelimit_pass(&rl, &more));
	assert_int_equal(more, 0);
	for (int i = 0; i < 5; i++)
		(void)lc__ratelimit_pass(&rl, &more);
	atomic_store(&rl.next_ns, 0); /* as if the interval had passed */
	assert_true(lc__ratelimit_pass(&rl, &more));
	assert_true(more == 5 || !quick);
	lc_log_set_handler(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(listener_urls_say_what_is_wrong),
		cmocka_unit_test(connections_and_params_say_what_is_missing),
		cmocka_unit_test(bootstrap_addresses_must_be_host_port),
		cmocka_unit_test(prefill_and_decode_name_the_cause),
		cmocka_unit_test(the_reason_is_the_calling_threads),
		cmocka_unit_test(reasons_are_cut_at_a_word),
		cmocka_unit_test(peer_lines_are_rate_limited_with_a_count),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
