/* The bootstrap client (control/bootstrap_client.c) against a fake server: a
 * raw TCP socket on 127.0.0.1 (port 0) answering what a test chooses, one
 * connection at a time. Wrong statuses, bodies that are not the parallel
 * info or a rank's endpoint, bytes that are not HTTP, a close without an
 * answer, an answer that never comes, an oversize answer: each call fails
 * with its code, the kind of failure (lc__http_opts_t.fail), the reason's
 * words and the number of tries the contract promises. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/bootstrap.h"
#include "testutil.h"

/* ---- the fake server ---- */

#define ANSWER_CLOSE "<close>" /* read the request, close without a byte */
#define ANSWER_SLOW "<slow>"   /* read the request, answer nothing until the client goes */
#define ANSWER_HUGE "<huge>"   /* a 200 of 2 MiB (the client keeps at most 1 MiB) */

typedef struct fake {
	int fd;
	int port;
	char addr[64];
	pthread_t thread;
	pthread_mutex_t lock;
	const char *route;  /* the answer to /route (raw bytes or a marker) */
	const char *health; /* the answer to /health */
	int requests;       /* requests read */
	int route_requests;
	char last_request[4096];
} fake_t;

static fake_t fk;

static char *http(int code, const char *body)
{
	static __thread char buf[8192];
	snprintf(buf, sizeof buf,
		 "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\n\r\n%s",
		 code, strlen(body), body);
	return strdup(buf);
}

/* The request's head and body (by Content-Length), NUL-terminated. */
static ssize_t read_request(int c, char *buf, size_t cap)
{
	size_t n = 0;
	for (;;) {
		struct pollfd p = {.fd = c, .events = POLLIN};
		if (poll(&p, 1, 10000) != 1)
			return -1;
		ssize_t k = recv(c, buf + n, cap - 1 - n, 0);
		if (k <= 0)
			return -1;
		n += (size_t)k;
		buf[n] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		const char *cl = strcasestr(buf, "Content-Length:");
		size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
		if (n >= want || n + 1 >= cap)
			return (ssize_t)n;
	}
}

static void *fake_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(fk.fd, NULL, NULL);
		if (c < 0)
			return NULL;
		char req[4096];
		if (read_request(c, req, sizeof req) < 0) {
			close(c);
			continue;
		}
		pthread_mutex_lock(&fk.lock);
		bool health = strstr(req, " /health") != NULL;
		/* A copy: the test frees its answers once the client has them,
		 * which may be before send() here has returned. */
		char *a = strdup(health ? fk.health : fk.route);
		fk.requests++;
		fk.route_requests += !health;
		snprintf(fk.last_request, sizeof fk.last_request, "%s", req);
		pthread_mutex_unlock(&fk.lock);
		if (!strcmp(a, ANSWER_SLOW)) {
			struct pollfd p = {.fd = c, .events = POLLIN};
			char x;
			while (poll(&p, 1, 10000) == 1 && recv(c, &x, 1, 0) > 0)
				;
		} else if (!strcmp(a, ANSWER_HUGE)) {
			char head[160];
			size_t big = 2u << 20;
			int hn = snprintf(head, sizeof head,
					  "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", big);
			char *body = malloc(big);
			memset(body, 'x', big);
			if (send(c, head, (size_t)hn, MSG_NOSIGNAL) == hn) {
				for (size_t off = 0; off < big;) {
					ssize_t k = send(c, body + off, big - off, MSG_NOSIGNAL);
					if (k <= 0)
						break; /* the client stopped reading */
					off += (size_t)k;
				}
			}
			free(body);
		} else if (strcmp(a, ANSWER_CLOSE)) {
			if (send(c, a, strlen(a), MSG_NOSIGNAL) < 0) {
				/* the client went */
			}
		}
		close(c);
		free(a);
	}
}

static void fake_set(const char *route, const char *health)
{
	pthread_mutex_lock(&fk.lock);
	fk.route = route;
	fk.health = health;
	fk.requests = fk.route_requests = 0;
	pthread_mutex_unlock(&fk.lock);
}

static int fake_count(bool route_only)
{
	pthread_mutex_lock(&fk.lock);
	int n = route_only ? fk.route_requests : fk.requests;
	pthread_mutex_unlock(&fk.lock);
	return n;
}

static int setup(void **state)
{
	(void)state;
	/* Built without the bootstrap service: every call is LC_ENOTSUP. */
	if (lc__bootstrap_health("127.0.0.1:1", NULL) == LC_ENOTSUP)
		exit(TU_SKIP);
	pthread_mutex_init(&fk.lock, NULL);
	fk.fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	assert_true(fk.fd >= 0 && bind(fk.fd, (struct sockaddr *)&a, sizeof a) == 0 &&
		    getsockname(fk.fd, (struct sockaddr *)&a, &n) == 0 && listen(fk.fd, 16) == 0);
	fk.port = ntohs(a.sin_port);
	snprintf(fk.addr, sizeof fk.addr, "127.0.0.1:%d", fk.port);
	fake_set(ANSWER_CLOSE, ANSWER_CLOSE);
	assert_int_equal(pthread_create(&fk.thread, NULL, fake_main, NULL), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shutdown(fk.fd, SHUT_RDWR);
	close(fk.fd);
	pthread_join(fk.thread, NULL);
	return 0;
}

#define PARALLEL_OK                                                                                \
	"{\"prefill_tp_size\":4,\"prefill_dp_size\":2,\"registered_ranks\":3,\"layers\":7,"        \
	"\"layout_fingerprint\":\"00000000deadbeef\",\"kv_item_lens\":[10,20,30]}"

/* A 200 to GET /route that is the parallel info, and the ones that are not. */
static void test_parallel_bodies(void **state)
{
	(void)state;
	char why[512];
	int fail = -1;
	lc__http_opts_t o = {.timeout_ms = 3000, .retries = 2, .fail = &fail};
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	char *ok = http(200, PARALLEL_OK);
	fake_set(ok, ok);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why), 0);
	assert_int_equal(pi->world_size, 4);
	assert_int_equal(pi->dp_size, 2);
	assert_int_equal(pi->registered, 3);
	assert_int_equal(pi->layers, 7);
	assert_true(pi->fingerprint == 0xdeadbeefull);
	assert_int_equal(pi->nlens, 3);
	assert_true(pi->kv_item_lens[2] == 30);
	assert_int_equal(fail, LC__BS_FAIL_NONE);
	assert_non_null(strstr(fk.last_request, "GET /route?engine_rank=-1&target_dp_group=-1"));
	free(ok);

	/* No fingerprint, no lengths, no counts: still the parallel info. */
	char *bare = http(200, "{\"prefill_tp_size\":1,\"prefill_dp_size\":1}");
	fake_set(bare, bare);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why), 0);
	assert_int_equal(pi->registered, 0);
	assert_int_equal(pi->nlens, 0);
	assert_true(pi->fingerprint == 0);
	free(bare);

	/* Each of these is a 200 that no bootstrap server sends: final, one try. */
	const char *bodies[] = {
		"<html>hello</html>",
		"[1,2,3]",
		"{\"prefill_dp_size\":1}",
		"{\"prefill_tp_size\":\"4\",\"prefill_dp_size\":1}",
		"{\"prefill_tp_size\":0,\"prefill_dp_size\":1}",
		"{\"prefill_tp_size\":4,\"prefill_dp_size\":3}",
		"{\"prefill_tp_size\":4,\"prefill_dp_size\":99999}",
		"{\"prefill_tp_size\":4,\"prefill_dp_size\":2,\"layout_fingerprint\":\"zz\"}",
		"{\"prefill_tp_size\":4,\"prefill_dp_size\":2,\"layout_fingerprint\":7}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		char *a = http(200, bodies[i]);
		fake_set(a, a);
		fail = -1;
		why[0] = '\0';
		assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
				 LC_ERR_BOOTSTRAP);
		assert_int_equal(fail, LC__BS_FAIL_NOT_SERVER);
		if (!strstr(why, "not a bootstrap server at") || !strstr(why, fk.addr) ||
		    !strstr(why, "is not the parallel info"))
			fail_msg("body %s: reason \"%s\"", bodies[i], why);
		/* The reason shows the answer's first bytes, quotes made harmless. */
		if (i == 0)
			assert_non_null(strstr(why, "<html>hello</html>"));
		assert_int_equal(fake_count(true), 1);
		free(a);
	}
	free(pi);
}

/* 404 to GET /route: a bootstrap server without P yet (its /health is 200),
 * or any web server (final: "not a bootstrap server"). */
static void test_parallel_404(void **state)
{
	(void)state;
	char why[512];
	int fail = -1;
	lc__http_opts_t o = {.timeout_ms = 3000, .retries = 2, .fail = &fail};
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	char *nf = http(404, "no \"P\" yet"), *up = http(200, "ok"), *down = http(503, "down");
	fake_set(nf, up);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why), -ENOENT);
	assert_int_equal(fail, LC__BS_FAIL_HTTP);
	assert_non_null(strstr(why, "HTTP 404"));
	fake_set(nf, down);
	fail = -1;
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_int_equal(fail, LC__BS_FAIL_NOT_SERVER);
	assert_non_null(strstr(why, "not a bootstrap server at"));
	assert_non_null(strstr(why, "GET /health is not 200"));
	assert_non_null(strstr(why, "no .P. yet")); /* quotes in the answer replaced */
	fake_set(nf, ANSWER_CLOSE);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	free(nf);
	free(up);
	free(down);
	free(pi);
}

/* 5xx and connection failures are retried (retries + 1 tries), 4xx and
 * bytes that are not HTTP are not. */
static void test_retries(void **state)
{
	(void)state;
	char why[512];
	int fail = -1;
	lc__http_opts_t o = {.timeout_ms = 3000, .retries = 2, .fail = &fail};
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	char *e500 = http(500, "busy"), *e418 = http(418, "teapot");
	fake_set(e500, e500);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_int_equal(fake_count(true), 3);
	assert_int_equal(fail, LC__BS_FAIL_HTTP);
	assert_non_null(strstr(why, "GET /route (parallel info): HTTP 500: busy"));
	fake_set(e418, e418);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_int_equal(fake_count(true), 1);
	assert_non_null(strstr(why, "HTTP 418: teapot"));

	/* Closed without an answer: maybe a busy server, so retried. */
	fake_set(ANSWER_CLOSE, ANSWER_CLOSE);
	fail = -1;
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	assert_int_equal(fake_count(true), 3);
	assert_int_equal(fail, LC__BS_FAIL_UNREACHABLE);
	assert_non_null(strstr(why, "unreachable"));
	assert_non_null(strstr(why, fk.addr));

	/* Bytes that are not HTTP: final at the first try. */
	fake_set("SSH-2.0-OpenSSH_9.2\r\n", "SSH-2.0-OpenSSH_9.2\r\n");
	fail = -1;
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &o, pi, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	assert_int_equal(fake_count(true), 1);
	assert_int_equal(fail, LC__BS_FAIL_NOT_SERVER);
	assert_non_null(strstr(why, "is not HTTP"));

	/* An answer that never comes: each try bounded by timeout_ms. */
	lc__http_opts_t slow = {.timeout_ms = 300, .retries = 1, .fail = &fail};
	fake_set(ANSWER_SLOW, ANSWER_SLOW);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, &slow, pi, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	assert_int_equal(fail, LC__BS_FAIL_TIMEOUT);
	assert_non_null(strstr(why, "no answer (timeout)"));
	assert_int_equal(lc__bootstrap_health(fk.addr, &slow), LC_ETIMEDOUT);

	/* An answer over 1 MiB is cut and refused, never kept. */
	fake_set(ANSWER_HUGE, ANSWER_HUGE);
	lc__http_opts_t once = {.timeout_ms = 5000, .retries = 0, .fail = &fail};
	assert_true(lc__bootstrap_get_parallel(fk.addr, &once, pi, why, sizeof why) < 0);
	assert_int_equal(fail, LC__BS_FAIL_UNREACHABLE);
	free(e500);
	free(e418);
	free(pi);
}

/* Options left out take their defaults; a reason buffer left out is not
 * written; the parallel info's lengths are capped and a non-array ignored. */
static void test_defaults_and_edges(void **state)
{
	(void)state;
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	lc__rank_info_t ri;
	char *ok = http(200, "{\"rank_ip\":\"127.0.0.1\",\"rank_port\":5001}");
	fake_set(ok, ok);
	assert_int_equal(lc__bootstrap_get_rank(fk.addr, 0, 0, NULL, &ri, NULL, 0), 0);
	assert_int_equal(ri.rank_port, 5001);
	lc__http_opts_t zero = {.timeout_ms = 0, .retries = -1};
	assert_int_equal(lc__bootstrap_get_rank(fk.addr, 0, 0, &zero, &ri, NULL, 0), 0);
	free(ok);
	/* Defaults: 2 retries after a 5xx; no reason asked for. */
	char *e503 = http(503, "busy");
	fake_set(e503, e503);
	assert_int_equal(lc__bootstrap_get_rank(fk.addr, 0, 0, NULL, &ri, NULL, 0),
			 LC_ERR_BOOTSTRAP);
	assert_int_equal(fake_count(true), 3);
	free(e503);
	char *bad = http(200, "{}");
	fake_set(bad, bad);
	assert_int_equal(lc__bootstrap_get_rank(fk.addr, 0, 0, NULL, &ri, NULL, 0),
			 LC_ERR_BOOTSTRAP);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, NULL, pi, NULL, 0), LC_ERR_BOOTSTRAP);
	free(bad);
	/* The reason shows at most the answer's first bytes, control
	 * characters made harmless. */
	char why[512];
	char *ctl =
		http(200, "\x01\x02\tjunk that goes on and on and on and on and on and on and on");
	fake_set(ctl, ctl);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, NULL, pi, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_non_null(strstr(why, "\"...junk that goes on"));
	assert_null(strstr(why, "on and on and on and on and on and on"));
	free(ctl);
	/* kv_item_lens not an array: no lengths; more than LC__BS_MAX_LENS:
	 * the first LC__BS_MAX_LENS. */
	char *nolens = http(200, "{\"prefill_tp_size\":1,\"prefill_dp_size\":1,"
				 "\"kv_item_lens\":5}");
	fake_set(nolens, nolens);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, NULL, pi, why, sizeof why), 0);
	assert_int_equal(pi->nlens, 0);
	free(nolens);
	size_t cap = 64 + 5 * (LC__BS_MAX_LENS + 10);
	char *body = malloc(cap), *p = body;
	p += sprintf(p, "{\"prefill_tp_size\":1,\"prefill_dp_size\":1,\"kv_item_lens\":[");
	for (int i = 0; i < LC__BS_MAX_LENS + 10; i++)
		p += sprintf(p, "%s7", i ? "," : "");
	sprintf(p, "]}");
	char *many = malloc(strlen(body) + 256);
	sprintf(many, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
		strlen(body), body);
	fake_set(many, many);
	assert_int_equal(lc__bootstrap_get_parallel(fk.addr, NULL, pi, why, sizeof why), 0);
	assert_int_equal(pi->nlens, LC__BS_MAX_LENS);
	assert_true(pi->kv_item_lens[LC__BS_MAX_LENS - 1] == 7);
	free(many);
	free(body);
	/* A raw request whose answer is not wanted. */
	char *okh = http(200, "ok");
	fake_set(okh, okh);
	char url[96];
	snprintf(url, sizeof url, "http://%s/health", fk.addr);
	assert_int_equal(lc__http_request("GET", url, NULL, 0, NULL, 3000, NULL, NULL), 200);
	free(okh);
	free(pi);
}

/* GET /route for one rank: the endpoint, or "malformed reply". */
static void test_rank_bodies(void **state)
{
	(void)state;
	char why[512];
	lc__http_opts_t o = {.timeout_ms = 3000, .retries = 0};
	lc__rank_info_t ri;
	char *ok = http(200, "{\"rank_ip\":\"127.0.0.1\",\"rank_port\":5000,\"curve_public_key\":"
			     "\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"}");
	fake_set(ok, ok);
	/* An "http://" address is the same server. */
	char url[96];
	snprintf(url, sizeof url, "http://%s", fk.addr);
	assert_int_equal(lc__bootstrap_get_rank(url, 3, 1, &o, &ri, why, sizeof why), 0);
	assert_string_equal(ri.rank_ip, "127.0.0.1");
	assert_int_equal(ri.rank_port, 5000);
	assert_int_equal(strlen(ri.curve_key), 40);
	assert_non_null(strstr(fk.last_request, "GET /route?engine_rank=3&target_dp_group=1 "));
	free(ok);
	const char *bodies[] = {
		"not json",
		"{\"rank_port\":5000}",
		"{\"rank_ip\":\"\",\"rank_port\":5000}",
		"{\"rank_ip\":\"127.0.0.1\",\"rank_port\":0}",
		"{\"rank_ip\":\"127.0.0.1\",\"rank_port\":70000}",
		"{\"rank_ip\":\"127.0.0.1\",\"rank_port\":\"5000\"}",
		"{\"rank_ip\":\"bad host!\",\"rank_port\":5000}",
		"{\"rank_ip\":\"127.0.0.1\",\"rank_port\":5000,\"curve_public_key\":\"short\"}",
		"{\"rank_ip\":\"127.0.0.1\",\"rank_port\":5000,\"curve_public_key\":5}",
	};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		char *a = http(200, bodies[i]);
		fake_set(a, a);
		why[0] = '\0';
		memset(&ri, 0x5a, sizeof ri);
		assert_int_equal(lc__bootstrap_get_rank(fk.addr, 0, 0, &o, &ri, why, sizeof why),
				 LC_ERR_BOOTSTRAP);
		if (!strstr(why, "malformed reply"))
			fail_msg("body %s: reason \"%s\"", bodies[i], why);
		assert_int_equal((unsigned char)ri.rank_ip[0], 0x5a); /* untouched */
		free(a);
	}
	char *nf = http(404, "no such rank");
	fake_set(nf, nf);
	assert_int_equal(lc__bootstrap_get_rank(fk.addr, 9, 0, &o, &ri, why, sizeof why), -ENOENT);
	assert_non_null(strstr(why, "GET /route (rank): HTTP 404: no such rank"));
	free(nf);
}

/* PUT /route: the secret travels as a bearer token; 401 is LC_ERR_AUTH. */
static void test_register(void **state)
{
	(void)state;
	char why[512];
	int fail = -1;
	uint64_t lens[2] = {64, 64};
	lc__prefill_info_t info = {.world_size = 1,
				   .dp_size = 1,
				   .rank_ip = "127.0.0.1",
				   .rank_port = 4000,
				   .layers = 2,
				   .nlens = 2,
				   .kv_item_lens = lens};
	lc__http_opts_t o = {.timeout_ms = 3000, .retries = 1, .secret = "s3cret", .fail = &fail};
	char *ok = http(200, "{\"owner_token\":\"x\"}"), *e401 = http(401, "who are you"),
	     *e409 = http(409, "rank 0 is owned");
	fake_set(ok, ok);
	assert_int_equal(lc__bootstrap_register(fk.addr, &info, &o, why, sizeof why), 0);
	assert_non_null(strstr(fk.last_request, "PUT /route "));
	assert_non_null(strstr(fk.last_request, "Authorization: Bearer s3cret"));
	assert_non_null(strstr(fk.last_request, "\"rank_port\":4000"));
	fake_set(e401, e401);
	assert_int_equal(lc__bootstrap_register(fk.addr, &info, &o, why, sizeof why), LC_ERR_AUTH);
	assert_int_equal(fake_count(true), 1);
	assert_int_equal(fail, LC__BS_FAIL_HTTP);
	fake_set(e409, e409);
	assert_int_equal(lc__bootstrap_register(fk.addr, &info, &o, why, sizeof why),
			 LC_ERR_BOOTSTRAP);
	assert_non_null(strstr(why, "PUT /route: HTTP 409: rank 0 is owned"));
	free(ok);
	free(e401);
	free(e409);
}

/* /health: 200 or not; a raw request with HEAD gets no body. */
static void test_health_and_head(void **state)
{
	(void)state;
	char *ok = http(200, "ok"), *e503 = http(503, "down");
	fake_set(ok, ok);
	assert_int_equal(lc__bootstrap_health(fk.addr, NULL), 0);
	fake_set(e503, e503);
	assert_int_equal(lc__bootstrap_health(fk.addr, NULL), LC_ERR_BOOTSTRAP);
	assert_int_equal(fake_count(false), 1); /* one try */
	fake_set(ok, ok);
	char url[96], *resp = NULL;
	size_t len = 99;
	snprintf(url, sizeof url, "http://%s/health", fk.addr);
	assert_int_equal(lc__http_request("HEAD", url, NULL, 0, NULL, 3000, &resp, &len), 200);
	assert_non_null(resp);
	assert_int_equal(len, 0);
	assert_non_null(strstr(fk.last_request, "HEAD /health "));
	free(resp);
	free(ok);
	free(e503);
}

/* Nothing listens: "connection refused", so D can tell a P not up yet. */
static void test_refused(void **state)
{
	(void)state;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	assert_true(bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
		    getsockname(s, (struct sockaddr *)&a, &n) == 0);
	char addr[64], why[512];
	/* Bound, never listening: refused, and no other process takes the
	 * port meanwhile. */
	snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
	int fail = -1;
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 0, .fail = &fail};
	lc__parallel_info_t *pi = calloc(1, sizeof *pi);
	assert_int_equal(lc__bootstrap_get_parallel(addr, &o, pi, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	assert_int_equal(fail, LC__BS_FAIL_REFUSED);
	assert_non_null(strstr(why, "connection refused"));
	lc__rank_info_t ri;
	assert_int_equal(lc__bootstrap_get_rank(addr, 0, 0, &o, &ri, why, sizeof why),
			 LC_ERR_UNREACHABLE);
	assert_non_null(strstr(why, "GET /route (rank) at"));
	close(s);
	free(pi);
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	tu_watchdog(110);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parallel_bodies), cmocka_unit_test(test_parallel_404),
		cmocka_unit_test(test_retries),         cmocka_unit_test(test_rank_bodies),
		cmocka_unit_test(test_register),        cmocka_unit_test(test_health_and_head),
		cmocka_unit_test(test_refused),         cmocka_unit_test(test_defaults_and_edges),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
