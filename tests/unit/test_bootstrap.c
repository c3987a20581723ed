/* The bootstrap server over real HTTP on 127.0.0.1 (port 0), driven with
 * libcurl: routes, malformed and oversize requests, unknown ranks, wrong
 * methods, the secret, the client helpers and /metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/bootstrap.h"
#include "testutil.h"

typedef struct fixture {
	lc_bootstrap_t *b;
	char addr[64];
	char url[96];
} fixture_t;

static int setup(void **state)
{
	fixture_t *f = calloc(1, sizeof *f);
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	int rc = lc_bootstrap_start(&p, &f->b);
	if (rc == LC_ENOTSUP) {
		free(f);
		exit(TU_SKIP);
	}
	assert_int_equal(rc, 0);
	assert_true(lc_bootstrap_port(f->b) > 0);
	assert_true(lc_bootstrap_addr(f->b, f->addr, sizeof f->addr) > 0);
	snprintf(f->url, sizeof f->url, "http://%s", f->addr);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture_t *f = *state;
	lc_bootstrap_stop(f->b);
	free(f);
	return 0;
}

/* One request; returns the status and keeps the body in *body (freed by
 * the next call). */
static int req(fixture_t *f, const char *method, const char *path, const char *body,
	       const char *auth, char **out)
{
	static char *last;
	char url[256];
	size_t len = 0;
	free(last);
	last = NULL;
	snprintf(url, sizeof url, "%s%s", f->url, path);
	int code = lc__http_request(method, url, body, body ? strlen(body) : 0, auth, 3000, &last,
				    &len);
	if (out)
		*out = last;
	return code;
}

static const char *put_body(int world, int dp, int rank, int port)
{
	static char buf[512];
	snprintf(buf, sizeof buf,
		 "{\"role\":\"Prefill\",\"world_size\":%d,\"dp_size\":%d,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":%d,\"engine_rank\":%d,\"enable_mla_l1_5_cache\":false,"
		 "\"kv_item_lens\":[4096,4096],\"kv_unit_lens\":[1,1],\"state_item_lens\":[],"
		 "\"state_unit_lens\":[],\"layout_fingerprint\":\"00000000deadbeef\",\"layers\":2}",
		 world, dp, port, rank);
	return buf;
}

static void test_health_and_methods(void **state)
{
	fixture_t *f = *state;
	char *body;
	assert_int_equal(req(f, "GET", "/health", NULL, NULL, &body), 200);
	assert_string_equal(body, "OK");
	assert_int_equal(req(f, "POST", "/health", "x", NULL, NULL), 405);
	assert_int_equal(req(f, "DELETE", "/route", NULL, NULL, NULL), 405);
	assert_int_equal(req(f, "POST", "/route", "{}", NULL, NULL), 405);
	assert_int_equal(req(f, "PUT", "/metrics", "{}", NULL, NULL), 405);
	assert_int_equal(req(f, "GET", "/nothing", NULL, NULL, NULL), 404);
	/* Nothing registered yet. */
	assert_int_equal(
		req(f, "GET", "/route?engine_rank=-1&target_dp_group=-1", NULL, NULL, NULL), 404);
}

static void test_register_and_discover(void **state)
{
	fixture_t *f = *state;
	char *body;
	assert_int_equal(req(f, "PUT", "/route", put_body(4, 2, 0, 7000), NULL, &body), 200);
	assert_int_equal(req(f, "PUT", "/route", put_body(4, 2, 3, 7003), NULL, NULL), 200);
	assert_int_equal(
		req(f, "GET", "/route?engine_rank=-1&target_dp_group=-1", NULL, NULL, &body), 200);
	assert_non_null(strstr(body, "\"prefill_tp_size\":4"));
	assert_non_null(strstr(body, "\"prefill_dp_size\":2"));
	assert_non_null(strstr(body, "\"kv_item_lens\":[4096,4096]"));
	assert_non_null(strstr(body, "\"registered_ranks\":2"));
	/* engine_rank is the tp rank within the group: rank 3 = group 1, tp 1. */
	assert_int_equal(req(f, "GET", "/route?engine_rank=1&target_dp_group=1", NULL, NULL, &body),
			 200);
	assert_non_null(strstr(body, "\"rank_port\":7003"));
	/* Unknown ranks: 404, never 500. */
	assert_int_equal(req(f, "GET", "/route?engine_rank=1&target_dp_group=0", NULL, NULL, &body),
			 404);
	assert_non_null(strstr(body, "unknown rank"));
	assert_int_equal(req(f, "GET", "/route?engine_rank=5&target_dp_group=0", NULL, NULL, NULL),
			 404);
	assert_int_equal(req(f, "GET", "/route?engine_rank=0&target_dp_group=9", NULL, NULL, NULL),
			 404);
	/* Missing or malformed parameters: 400. */
	assert_int_equal(req(f, "GET", "/route", NULL, NULL, NULL), 400);
	assert_int_equal(req(f, "GET", "/route?engine_rank=0", NULL, NULL, NULL), 400);
	assert_int_equal(req(f, "GET", "/route?engine_rank=x&target_dp_group=0", NULL, NULL, NULL),
			 400);
	assert_int_equal(req(f, "GET", "/route?engine_rank=-3&target_dp_group=0", NULL, NULL, NULL),
			 400);
	assert_int_equal(req(f, "GET", "/route?engine_rank=99999999999999999999&target_dp_group=0",
			     NULL, NULL, NULL),
			 400);
	/* A different parallel layout or geometry later: 409 with a message. */
	assert_int_equal(req(f, "PUT", "/route", put_body(8, 2, 1, 7001), NULL, &body), 409);
	assert_non_null(strstr(body, "world_size"));
	char other[600];
	snprintf(other, sizeof other, "%s", put_body(4, 2, 1, 7001));
	char *fp = strstr(other, "deadbeef");
	memcpy(fp, "beefdead", 8);
	assert_int_equal(req(f, "PUT", "/route", other, NULL, &body), 409);
	assert_non_null(strstr(body, "geometry"));
	/* Routes are owned (issue 21): another PUT of rank 0 without its
	 * owner token is refused and the route stays P's. */
	assert_int_equal(req(f, "PUT", "/route", put_body(4, 2, 0, 7100), NULL, &body), 409);
	assert_non_null(strstr(body, LC__BS_TAKEN_TEXT));
	assert_int_equal(req(f, "GET", "/route?engine_rank=0&target_dp_group=0", NULL, NULL, &body),
			 200);
	assert_non_null(strstr(body, "7000"));
	/* With the token (P's refresh, here a move): 200, replaced. */
	char put[700], tok[40] = "";
	assert_int_equal(req(f, "PUT", "/route", put_body(4, 2, 2, 7002), NULL, &body), 200);
	const char *t = strstr(body, "\"owner_token\":\"");
	assert_non_null(t);
	assert_int_equal(sscanf(t + 15, "%32[0-9a-f]", tok), 1);
	assert_int_equal(strlen(tok), LC__BS_OWNER_LEN);
	assert_non_null(strstr(body, "\"ttl_ms\":"));
	snprintf(put, sizeof put, "%s", put_body(4, 2, 2, 7102));
	snprintf(put + strlen(put) - 1, sizeof put - strlen(put) + 1, ",\"owner_token\":\"%s\"}",
		 tok);
	assert_int_equal(req(f, "PUT", "/route", put, NULL, &body), 200);
	assert_non_null(strstr(body, tok)); /* the same owner */
	assert_int_equal(req(f, "GET", "/route?engine_rank=0&target_dp_group=1", NULL, NULL, &body),
			 200);
	assert_non_null(strstr(body, "7102"));
	/* A wrong token, or a takeover without a server secret: 409. */
	tok[0] = tok[0] == 'a' ? 'b' : 'a';
	snprintf(put, sizeof put, "%s", put_body(4, 2, 2, 7666));
	snprintf(put + strlen(put) - 1, sizeof put - strlen(put) + 1,
		 ",\"owner_token\":\"%s\",\"takeover\":true}", tok);
	assert_int_equal(req(f, "PUT", "/route", put, NULL, &body), 409);
	assert_int_equal(req(f, "GET", "/route?engine_rank=0&target_dp_group=1", NULL, NULL, &body),
			 200);
	assert_non_null(strstr(body, "7102"));
	/* Counted on /metrics. */
	assert_int_equal(req(f, "GET", "/metrics", NULL, NULL, &body), 200);
	assert_non_null(
		strstr(body, "layercake_bootstrap_registrations_total{outcome=\"conflict\"} 2\n"));
}

/* A route whose owner stops refreshing lapses after route_ttl_ms: then a
 * new P (a restarted one) may take the rank. */
static void test_route_lapses(void **state)
{
	lc_bootstrap_t *b;
	char url[128], addr[64];
	setenv("LAYERCAKE_ROUTE_TTL_MS", "300", 1);
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	assert_int_equal(lc_bootstrap_start(&p, &b), 0);
	unsetenv("LAYERCAKE_ROUTE_TTL_MS");
	lc_bootstrap_addr(b, addr, sizeof addr);
	snprintf(url, sizeof url, "http://%s/route", addr);
	char *resp = NULL;
	size_t len;
	const char *first = put_body(1, 1, 0, 7000);
	assert_int_equal(
		lc__http_request("PUT", url, first, strlen(first), NULL, 3000, &resp, &len), 200);
	assert_non_null(strstr(resp, "\"ttl_ms\":300"));
	free(resp);
	usleep(600 * 1000); /* past the route's life: longer is as good */
	const char *second = put_body(1, 1, 0, 7001);
	assert_int_equal(
		lc__http_request("PUT", url, second, strlen(second), NULL, 3000, &resp, &len), 200);
	free(resp);
	snprintf(url, sizeof url, "http://%s/route?engine_rank=0&target_dp_group=0", addr);
	assert_int_equal(lc__http_request("GET", url, NULL, 0, NULL, 3000, &resp, &len), 200);
	assert_non_null(strstr(resp, "7001"));
	free(resp);
	lc_bootstrap_stop(b);
}

static void test_malformed_puts(void **state)
{
	fixture_t *f = *state;
	static const char *const bad[] = {
		"",
		"{",
		"not json",
		"[1,2,3]",
		"{\"role\":\"Decode\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":\"1\",\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":0,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":3,\"dp_size\":2,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":2}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":70000,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0,\"kv_item_lens\":[1,-2]}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0,\"layout_fingerprint\":\"xyz\"}",
		"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"a\","
		"\"rank_port\":1,\"engine_rank\":0} trailing",
		"{\"role\":\"Prefill\",\"world_size\":99999999999999999999}",
	};
	for (size_t i = 0; i < LC__ARRAY_SIZE(bad); i++) {
		char *body;
		int code = req(f, "PUT", "/route", bad[i], NULL, &body);
		if (code != 400)
			fail_msg("body %zu: HTTP %d (%s)", i, code, body ? body : "");
		assert_true(body && *body);
	}
	/* Deep nesting is refused by the parser's depth limit. */
	char deep[400];
	memset(deep, '[', 300);
	deep[300] = '\0';
	assert_int_equal(req(f, "PUT", "/route", deep, NULL, NULL), 400);
	/* Oversize: 413. */
	size_t n = LC__BS_BODY_MAX + 10;
	char *big = malloc(n + 1);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	big[n] = '\0';
	assert_int_equal(req(f, "PUT", "/route", big, NULL, NULL), 413);
	free(big);
	/* The server still works. */
	assert_int_equal(req(f, "GET", "/health", NULL, NULL, NULL), 200);
}

/* A TCP listener on 127.0.0.1 (its port to *port): a live P's endpoint. */
static int listening(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static void test_secret(void **state)
{
	lc_bootstrap_t *b;
	char dir[] = "/tmp/lc-secret-XXXXXX", path[128], url[128], addr[64];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/bootstrap.secret", dir);
	FILE *fp = fopen(path, "w");
	fputs("s3cret\n", fp);
	fclose(fp);
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	assert_int_equal(lc_bootstrap_start(&p, &b), 0);
	unsetenv("LAYERCAKE_SECRET_DIR");
	lc_bootstrap_addr(b, addr, sizeof addr);
	snprintf(url, sizeof url, "http://%s/route", addr);
	/* The owner's endpoint accepts connections (a live P): the bootstrap
	 * probes it before an authenticated PUT may replace the route. */
	int owner_port = 0, lfd = listening(&owner_port);
	const char *body = put_body(1, 1, 0, owner_port);
	char *resp = NULL;
	size_t len;
	assert_int_equal(lc__http_request("PUT", url, body, strlen(body), NULL, 3000, &resp, &len),
			 401);
	free(resp);
	assert_int_equal(
		lc__http_request("PUT", url, body, strlen(body), "wrong", 3000, &resp, &len), 401);
	free(resp);
	assert_int_equal(
		lc__http_request("PUT", url, body, strlen(body), "s3cret", 3000, &resp, &len), 200);
	free(resp);
	/* The secret alone does not replace an owned route; with takeover it
	 * does (an operator's restart before the route lapses). */
	const char *again = put_body(1, 1, 0, 7001);
	assert_int_equal(
		lc__http_request("PUT", url, again, strlen(again), "s3cret", 3000, &resp, &len),
		409);
	free(resp);
	char take[700];
	snprintf(take, sizeof take, "%s", again);
	snprintf(take + strlen(take) - 1, sizeof take - strlen(take) + 1, ",\"takeover\":true}");
	assert_int_equal(
		lc__http_request("PUT", url, take, strlen(take), "s3cret", 3000, &resp, &len), 200);
	free(resp);
	/* Nothing accepts at the owner's endpoint any more (7001: a P that
	 * died): an authenticated PUT replaces its route at once, an
	 * unauthenticated one is refused as before. */
	close(lfd);
	const char *restarted = put_body(1, 1, 0, 7002);
	assert_int_equal(
		lc__http_request("PUT", url, restarted, strlen(restarted), NULL, 3000, &resp, &len),
		401);
	free(resp);
	assert_int_equal(lc__http_request("PUT", url, restarted, strlen(restarted), "s3cret", 3000,
					  &resp, &len),
			 200);
	free(resp);
	/* The client helper with and without the secret. */
	uint64_t lens[1] = {64};
	lc__prefill_info_t info = {.world_size = 1,
				   .dp_size = 1,
				   .engine_rank = 0,
				   .rank_ip = "127.0.0.1",
				   .rank_port = 9,
				   .nlens = 1,
				   .kv_item_lens = lens};
	char why[256];
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 1};
	assert_int_equal(lc__bootstrap_register(addr, &info, &o, why, sizeof why), LC_ERR_AUTH);
	o.secret = "s3cret";
	/* Geometry differs from the PUT above (no fingerprint, other lens): 409. */
	assert_int_equal(lc__bootstrap_register(addr, &info, &o, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_non_null(strstr(why, "409"));
	lc_bootstrap_stop(b);
	unlink(path);
	rmdir(dir);
}

static void test_client(void **state)
{
	fixture_t *f = *state;
	uint64_t lens[3] = {128, 128, 256};
	lc__prefill_info_t info = {.world_size = 2,
				   .dp_size = 1,
				   .rank_ip = "127.0.0.1",
				   .rank_port = 5555,
				   .fingerprint = 0xabcdef0123456789ull,
				   .layers = 3,
				   .nlens = 3,
				   .kv_item_lens = lens};
	char why[256];
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 2};
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	lc__rank_info_t ri;
	assert_int_equal(lc__bootstrap_get_parallel(f->addr, &o, pi, why, sizeof why), -ENOENT);
	assert_int_equal(lc__bootstrap_register(f->addr, &info, &o, why, sizeof why), 0);
	info.engine_rank = 1;
	info.rank_port = 5556;
	snprintf(info.curve_key, sizeof info.curve_key, "%s",
		 "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
	assert_int_equal(lc__bootstrap_register(f->addr, &info, &o, why, sizeof why), 0);
	assert_int_equal(lc__bootstrap_get_parallel(f->addr, &o, pi, why, sizeof why), 0);
	assert_int_equal(pi->world_size, 2);
	assert_int_equal(pi->dp_size, 1);
	assert_int_equal(pi->registered, 2);
	assert_int_equal(pi->nlens, 3);
	assert_true(pi->kv_item_lens[2] == 256);
	assert_true(pi->fingerprint == 0xabcdef0123456789ull);
	assert_int_equal(pi->layers, 3);
	assert_int_equal(lc__bootstrap_get_rank(f->addr, 1, 0, &o, &ri, why, sizeof why), 0);
	assert_int_equal(ri.rank_port, 5556);
	assert_string_equal(ri.curve_key, info.curve_key);
	assert_int_equal(lc__bootstrap_get_rank(f->addr, 0, 1, &o, &ri, why, sizeof why), -ENOENT);
	assert_int_equal(lc__bootstrap_health(f->addr, &o), 0);
	free(pi);

	/* A dead address fails within the bounded retries. */
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	o.timeout_ms = 300;
	o.retries = 2;
	assert_true(lc__bootstrap_health("127.0.0.1:1", &o) < 0);
	assert_int_equal(lc__bootstrap_register("127.0.0.1:1", &info, &o, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_true(b.tv_sec - a.tv_sec < 10);
}

static int fake_source(void *arg, lc__metrics_snapshot_t *out)
{
	snprintf(out->label, sizeof out->label, "7");
	out->has_engine = true;
	out->engine.rooms_succeeded = 11;
	out->failed_by_reason[LC_FAIL_CANCELLED] = 2;
	out->engine.records_refused = 4;
	out->engine.room_latency.count = 1;
	out->engine.room_latency.sum_ns = 1500000;
	out->engine.room_latency.buckets[40] = 1;
	out->ctl[LC__CTL_msgs_malformed] = 3;
	return 0;
}

static void test_metrics(void **state)
{
	fixture_t *f = *state;
	char *body;
	assert_int_equal(req(f, "GET", "/metrics", NULL, NULL, &body), 200);
	assert_non_null(strstr(body, "# TYPE layercake_rooms_total counter"));
	assert_non_null(strstr(body, "layercake_rooms_total{rank=\"\",outcome=\"success\""));
	assert_non_null(strstr(body, "# TYPE layercake_room_transfer_seconds histogram"));
	assert_non_null(
		strstr(body, "layercake_room_transfer_seconds_bucket{rank=\"\",le=\"+Inf\"} 0"));
	int id = lc__bootstrap_source_add(f->b, fake_source, NULL);
	assert_true(id > 0);
	assert_int_equal(req(f, "GET", "/metrics", NULL, NULL, &body), 200);
	assert_non_null(strstr(
		body, "layercake_rooms_total{rank=\"7\",outcome=\"success\",reason=\"none\"} 11"));
	assert_non_null(strstr(body, "outcome=\"failed\",reason=\"cancelled\"} 2"));
	assert_non_null(strstr(body, "layercake_room_transfer_seconds_count{rank=\"7\"} 1"));
	assert_non_null(strstr(body, "event=\"msgs_malformed\"} 3"));
	assert_non_null(strstr(
		body, "layercake_engine_refused_total{rank=\"7\",kind=\"records_refused\"} 4"));
	lc__bootstrap_source_remove(f->b, id);
	/* Every sample line is "name{labels} value" or "name value". */
	assert_int_equal(req(f, "GET", "/metrics", NULL, NULL, &body), 200);
	for (char *line = strtok(body, "\n"); line; line = strtok(NULL, "\n")) {
		if (line[0] == '#')
			continue;
		char *sp = strrchr(line, ' ');
		assert_non_null(sp);
		char *end;
		strtod(sp + 1, &end);
		assert_true(*end == '\0');
	}
}

/* The handler without sockets, with hostile inputs. */
static void test_handler_direct(void **state)
{
	fixture_t *f = *state;
	char *resp;
	size_t len;
	static const char *const queries[] = {"engine_rank=&target_dp_group=",
					      "engine_rank=1&&&target_dp_group=0",
					      "engine_rank==1&target_dp_group=0",
					      "&&&",
					      "=",
					      "engine_rank=-1&target_dp_group=0"};
	for (size_t i = 0; i < LC__ARRAY_SIZE(queries); i++) {
		int code = lc__bootstrap_handle(f->b, "GET", "/route", queries[i], NULL, NULL, 0,
						&resp, &len);
		assert_true(code >= 400 && code < 500);
		free(resp);
	}
	int code = lc__bootstrap_handle(f->b, NULL, NULL, NULL, NULL, NULL, 0, &resp, &len);
	assert_int_equal(code, 400);
	free(resp);
	const char nul_body[] = "{\"role\":\"Pre\0fill\"}";
	code = lc__bootstrap_handle(f->b, "PUT", "/route", NULL, NULL, nul_body,
				    sizeof nul_body - 1, &resp, &len);
	assert_int_equal(code, 400);
	free(resp);
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	tu_watchdog(100);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_health_and_methods, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_and_discover, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_puts, setup, teardown),
		cmocka_unit_test(test_secret),
		cmocka_unit_test(test_route_lapses),
		cmocka_unit_test_setup_teardown(test_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handler_direct, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
