/* The bootstrap server (control/bootstrap.c, bootstrap_routes.c) from a raw
 * TCP client on loopback: parameters refused with their cause, IPv6, its
 * address as told, the secret file, requests whose query, method, framing
 * or body no rank sends, and PUTs that disagree with the registered layout.
 * Each answer is checked for its status and words. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/bootstrap.h"
#include "testutil.h"

#define assert_fails_with(call, rc, want)                                                          \
	do {                                                                                       \
		lc_last_error_clear();                                                             \
		int got_ = (call);                                                                 \
		assert_int_equal(got_, (rc));                                                      \
		if (!strstr(lc_last_error(), (want)))                                              \
			fail_msg("%s: reason \"%s\" lacks \"%s\"", #call, lc_last_error(),         \
				 (want));                                                          \
	} while (0)

/* One raw request to host:port (family af); the status, the whole answer
 * in out (NUL-terminated). */
static int raw(int af, int port, const char *request, size_t req_len, char *out, size_t cap)
{
	int s = socket(af, SOCK_STREAM, 0);
	struct sockaddr_in a4 = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
				  .sin6_port = htons((uint16_t)port),
				  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	assert_true(s >= 0);
	int rc = af == AF_INET ? connect(s, (struct sockaddr *)&a4, sizeof a4)
			       : connect(s, (struct sockaddr *)&a6, sizeof a6);
	assert_int_equal(rc, 0);
	for (size_t off = 0; off < req_len;) {
		ssize_t k = send(s, request + off, req_len - off, MSG_NOSIGNAL);
		if (k <= 0)
			break; /* the server may close early (413) */
		off += (size_t)k;
	}
	size_t n = 0;
	for (;;) {
		struct pollfd p = {.fd = s, .events = POLLIN};
		if (poll(&p, 1, 10000) != 1)
			break;
		ssize_t k = recv(s, out + n, cap - 1 - n, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
		out[n] = '\0';
		/* One answer: the head, then Content-Length bytes. */
		char *end = strstr(out, "\r\n\r\n");
		const char *cl = strcasestr(out, "Content-Length:");
		if (end && cl && n >= (size_t)(end + 4 - out) + strtoul(cl + 15, NULL, 10))
			break;
		if (n + 1 >= cap)
			break;
	}
	out[n] = '\0';
	close(s);
	int code = 0;
	return sscanf(out, "HTTP/1.%*d %d", &code) == 1 ? code : -1;
}

static int get(int port, const char *path, char *out, size_t cap)
{
	char req[512];
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			 path);
	return raw(AF_INET, port, req, (size_t)n, out, cap);
}

static int put(int port, const char *auth, const char *body, char *out, size_t cap)
{
	char req[4096];
	int n = snprintf(req, sizeof req,
			 "PUT /route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%s"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			 auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "",
			 strlen(body), body);
	return raw(AF_INET, port, req, (size_t)n, out, cap);
}

static lc_bootstrap_t *start(const char *host, const char *secret)
{
	lc_bootstrap_params_t p = {.size = sizeof p, .host = host, .port = 0, .secret = secret};
	lc_bootstrap_t *b = NULL;
	int rc = lc_bootstrap_start(&p, &b);
	if (rc == LC_ENOTSUP)
		exit(TU_SKIP);
	return rc ? NULL : b;
}

static void test_params(void **state)
{
	(void)state;
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 70000};
	lc_bootstrap_t *b = NULL;
	assert_fails_with(lc_bootstrap_start(&p, NULL), -EINVAL, "out is NULL");
	assert_fails_with(lc_bootstrap_start(&p, &b), -EINVAL, "port 70000 outside -1..65535");
	p.port = 0;
	p.host = "localhost";
	assert_fails_with(lc_bootstrap_start(&p, &b), -EINVAL,
			  "bind address 'localhost' is not a numeric IPv4 or IPv6 address");
	assert_null(b);
	/* A port that is taken: the cause names the address. */
	lc_bootstrap_t *one = start("127.0.0.1", NULL);
	assert_non_null(one);
	p.host = "127.0.0.1";
	p.port = lc_bootstrap_port(one);
	char want[64];
	snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d", p.port);
	lc_last_error_clear();
	assert_true(lc_bootstrap_start(&p, &b) < 0);
	assert_non_null(strstr(lc_last_error(), want));
	assert_null(b);
	/* A struct too short to hold the port: the knob's port (0 here). */
	setenv("LAYERCAKE_BOOTSTRAP_PORT", "0", 1);
	p.size = offsetof(lc_bootstrap_params_t, port);
	p.port = 12345;
	assert_int_equal(lc_bootstrap_start(&p, &b), 0);
	assert_true(lc_bootstrap_port(b) != 12345 && lc_bootstrap_port(b) > 0);
	lc_bootstrap_stop(b);
	unsetenv("LAYERCAKE_BOOTSTRAP_PORT");
	/* The address as told: NULLs refused, too small a buffer, the public
	 * address when one is set. */
	char buf[64];
	assert_fails_with(lc_bootstrap_addr(NULL, buf, sizeof buf), -EINVAL, "bootstrap is NULL");
	assert_fails_with(lc_bootstrap_addr(one, NULL, 0), -EINVAL, "buf is NULL");
	assert_int_equal(lc_bootstrap_addr(one, buf, 4), -ENOSPC);
	setenv("LAYERCAKE_ADVERTISE_HOST", "fd00::9", 1);
	assert_true(lc_bootstrap_addr(one, buf, sizeof buf) > 0);
	snprintf(want, sizeof want, "[fd00::9]:%d", lc_bootstrap_port(one));
	assert_string_equal(buf, want);
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
	lc_bootstrap_stop(one);
	lc_bootstrap_stop(NULL);
}

/* "*" is every address; "::1" an IPv6 listener a client reaches over ::1. */
static void test_hosts(void **state)
{
	(void)state;
	char out[4096], buf[96];
	lc_bootstrap_t *b = start("*", NULL);
	assert_non_null(b);
	assert_true(lc_bootstrap_addr(b, buf, sizeof buf) > 0);
	assert_null(strstr(buf, "0.0.0.0")); /* never a wildcard told */
	assert_int_equal(get(lc_bootstrap_port(b), "/health", out, sizeof out), 200);
	lc_bootstrap_stop(b);
	b = start("::1", NULL);
	if (!b) {
		fprintf(stderr, "no IPv6 loopback here: the IPv6 part skipped\n");
		return;
	}
	assert_true(lc_bootstrap_addr(b, buf, sizeof buf) > 0);
	char want[64];
	snprintf(want, sizeof want, "[::1]:%d", lc_bootstrap_port(b));
	assert_string_equal(buf, want);
	const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	assert_int_equal(raw(AF_INET6, lc_bootstrap_port(b), req, sizeof req - 1, out, sizeof out),
			 200);
	lc_bootstrap_stop(b);
}

/* The secret: given, too long, from the folder's file, absent there. */
static void test_secret_file(void **state)
{
	(void)state;
	char out[LC__BS_SECRET_MAX], dir[] = "/tmp/lc-bs-secret-XXXXXX", path[128];
	char longer[LC__BS_SECRET_MAX + 8];
	memset(longer, 'k', sizeof longer - 1);
	longer[sizeof longer - 1] = '\0';
	assert_int_equal(lc__bootstrap_secret(longer, out, sizeof out), -ENAMETOOLONG);
	assert_int_equal(lc__bootstrap_secret("given", out, sizeof out), 1);
	assert_string_equal(out, "given");
	assert_non_null(mkdtemp(dir));
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	assert_int_equal(lc__bootstrap_secret(NULL, out, sizeof out), 0); /* no file */
	snprintf(path, sizeof path, "%s/bootstrap.secret", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("from-the-file\r\nsecond line\n", f);
	fclose(f);
	assert_int_equal(lc__bootstrap_secret("", out, sizeof out), 1);
	assert_string_equal(out, "from-the-file");
	/* The server started from the folder wants it on PUT. */
	lc_bootstrap_t *b = start("127.0.0.1", NULL);
	assert_non_null(b);
	char ans[4096];
	assert_int_equal(put(lc_bootstrap_port(b), NULL, "{}", ans, sizeof ans), 401);
	assert_int_equal(put(lc_bootstrap_port(b), "Basic from-the-file", "{}", ans, sizeof ans),
			 401);
	assert_int_equal(put(lc_bootstrap_port(b), "Bearer from-the-fil", "{}", ans, sizeof ans),
			 401);
	assert_int_equal(put(lc_bootstrap_port(b), "Bearer from-the-file", "{}", ans, sizeof ans),
			 400);
	lc_bootstrap_stop(b);
	/* A secret file that holds no secret (an empty first line, or a
	 * folder by that name): refused, never a server open to every PUT. */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("\nsecond line\n", f);
	fclose(f);
	assert_int_equal(lc__bootstrap_secret(NULL, out, sizeof out), -ENODATA);
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	b = NULL;
	assert_fails_with(lc_bootstrap_start(&p, &b), -ENODATA, "bootstrap.secret holds no secret");
	assert_null(b);
	unlink(path);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(lc__bootstrap_secret(NULL, out, sizeof out), -ENODATA);
	rmdir(path);
	rmdir(dir);
	unsetenv("LAYERCAKE_SECRET_DIR");
}

#define RANK0                                                                                      \
	"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","          \
	"\"rank_port\":4000,\"engine_rank\":0,\"kv_item_lens\":[64,64],"                           \
	"\"layout_fingerprint\":\"00000000000000aa\",\"layers\":1"

/* Queries, methods and paths no client of the routes sends. */
static void test_requests(void **state)
{
	(void)state;
	char out[8192];
	lc_bootstrap_t *b = start("127.0.0.1", NULL);
	assert_non_null(b);
	int port = lc_bootstrap_port(b);
	/* Before any P: the parallel info is "no rank yet". */
	assert_int_equal(get(port, "/route?engine_rank=-1&target_dp_group=-1", out, sizeof out),
			 404);
	assert_non_null(strstr(out, "no prefill rank registered yet"));
	assert_int_equal(put(port, NULL, RANK0 "}", out, sizeof out), 200);
	assert_non_null(strstr(out, "application/json"));
	assert_non_null(strstr(out, "\"owner_token\""));
	static const struct {
		const char *path;
		int code;
		const char *words;
	} gets[] = {
		{"/route?engine_rank&target_dp_group=0", 400, "must be integers"},
		{"/route?engine_rank=1x&target_dp_group=0", 400, "must be integers"},
		{"/route?engine_rank=99999999999999999999&target_dp_group=0", 400,
		 "must be integers"},
		{"/route?engine_rank=123456789012345678901234567890123456&target_dp_group=0", 400,
		 "must be integers"},
		{"/route?target_dp_group=0", 400, "missing engine_rank or target_dp_group"},
		{"/route?engine_rank=0", 400, "missing engine_rank or target_dp_group"},
		{"/route?engine_rank=-1&target_dp_group=0", 400, "must be >= 0 (or both -1)"},
		{"/route?engine_rank=0&target_dp_group=-1", 400, "must be >= 0 (or both -1)"},
		{"/route?engine_rank=5&target_dp_group=0", 404, "unknown rank: engine_rank 5"},
		{"/route?engine_rank=0&target_dp_group=3", 404, "unknown rank"},
		{"/route?engine_rank=1&target_dp_group=0", 404,
		 "unknown rank"}, /* not registered */
		{"/route?x=1&engine_rank=0&target_dp_group=0", 200, "\"rank_port\":4000"},
		{"/route?engine_rankx=1&engine_rank=0&target_dp_group=0", 200, "\"rank_port\""},
		{"/route?engine_rank=0&target_dp_group=x", 400, "must be integers"},
		{"/route?engine_rank=-1&target_dp_group=-1", 200, "\"kv_item_lens\":[64,64]"},
		{"/nowhere", 404, "no such route"},
	};
	for (size_t i = 0; i < sizeof gets / sizeof *gets; i++) {
		int code = get(port, gets[i].path, out, sizeof out);
		if (code != gets[i].code || !strstr(out, gets[i].words))
			fail_msg("GET %s: HTTP %d, want %d with \"%s\": %s", gets[i].path, code,
				 gets[i].code, gets[i].words, out);
	}
	static const struct {
		const char *method, *path;
		int code;
	} other[] = {
		{"POST", "/health", 405},  {"HEAD", "/health", 200}, {"POST", "/metrics", 405},
		{"DELETE", "/route", 405}, {"GET", "/metrics", 200},
	};
	for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
		char req[256];
		int n = snprintf(req, sizeof req,
				 "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
				 "Content-Length: 0\r\n\r\n",
				 other[i].method, other[i].path);
		int code = raw(AF_INET, port, req, (size_t)n, out, sizeof out);
		if (code != other[i].code)
			fail_msg("%s %s: HTTP %d, want %d", other[i].method, other[i].path, code,
				 other[i].code);
	}
	/* A chunked body past the limit: 413, never kept. */
	size_t big = LC__BS_BODY_MAX + 4096;
	char *req = malloc(big + 512);
	int n = snprintf(req, 512,
			 "PUT /route HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
			 "Connection: close\r\n\r\n");
	size_t len = (size_t)n;
	for (size_t sent = 0; sent < big; sent += 4096) {
		len += (size_t)sprintf(req + len, "1000\r\n");
		memset(req + len, ' ', 4096);
		len += 4096;
		len += (size_t)sprintf(req + len, "\r\n");
	}
	len += (size_t)sprintf(req + len, "0\r\n\r\n");
	assert_int_equal(raw(AF_INET, port, req, len, out, sizeof out), 413);
	free(req);
	/* Content-Length beside Transfer-Encoding: refused for its framing. */
	const char smug[] = "PUT /route HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
			    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
			    "2\r\n{}\r\n0\r\n\r\n";
	int code = raw(AF_INET, port, smug, sizeof smug - 1, out, sizeof out);
	assert_true(code == 400);
	assert_int_equal(get(port, "/health", out, sizeof out), 200);
	lc_bootstrap_stop(b);
}

/* PUTs with fields out of their rules, and ranks that disagree with the
 * layout the first PUT fixed: 400 and 409 with the reason. */
static void test_puts(void **state)
{
	(void)state;
	char out[8192];
	lc_bootstrap_t *b = start("127.0.0.1", NULL);
	assert_non_null(b);
	int port = lc_bootstrap_port(b);
	static const struct {
		const char *tail; /* appended to RANK0 (before the closing brace) */
		int code;
		const char *words;
	} puts_[] = {
		{",\"owner_token\":\"XYZ\"", 400, "owner_token is not 32 lowercase hex digits"},
		{",\"owner_token\":7", 400, "owner_token"},
		{",\"takeover\":\"yes\"", 400, "field \"takeover\" is not a boolean"},
		{",\"layers\":-1", 400, "layers"},
		{",\"kv_item_lens\":\"x\"", 400, "kv_item_lens is not an array"},
		{",\"kv_item_lens\":[1,\"a\"]", 400, "kv_item_lens[1] is not a positive integer"},
		{",\"kv_item_lens\":[0]", 400, "kv_item_lens[0] is not a positive integer"},
		{",\"curve_public_key\":\"short\"", 400, "curve_public_key is not 40"},
		{",\"rank_ip\":\"0.0.0.0:5\"", 400, "is not a host name or an IP address"},
		{"", 200, "\"owner_token\""},
	};
	for (size_t i = 0; i < sizeof puts_ / sizeof *puts_; i++) {
		char body[1024];
		snprintf(body, sizeof body, "%s%s}", RANK0, puts_[i].tail);
		int code = put(port, NULL, body, out, sizeof out);
		if (code != puts_[i].code || !strstr(out, puts_[i].words))
			fail_msg("PUT ...%s: HTTP %d, want %d with \"%s\": %s", puts_[i].tail, code,
				 puts_[i].code, puts_[i].words, out);
	}
	/* A rank that proposes its own owner token keeps it; its refresh with
	 * the token is taken; a token that is not hex is refused. */
	const char *own = "0123456789abcdef0123456789abcdef";
	char body[1024];
	snprintf(body, sizeof body,
		 "{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1,\"kv_item_lens\":[64,64],"
		 "\"layout_fingerprint\":\"00000000000000aa\",\"layers\":1,\"owner_token\":\"%s\"}",
		 own);
	assert_int_equal(put(port, NULL, body, out, sizeof out), 200);
	assert_non_null(strstr(out, own));
	assert_int_equal(put(port, NULL, body, out, sizeof out), 200); /* the refresh */
	assert_non_null(strstr(out, own));
	snprintf(body, sizeof body, "%s,\"owner_token\":\"%s\"}", RANK0,
		 "0123456789abcdef0123456789abcdeZ");
	assert_int_equal(put(port, NULL, body, out, sizeof out), 400);
	assert_non_null(strstr(out, "owner_token is not 32 lowercase hex digits"));
	/* The handler itself: no method, a body over the limit. */
	char *huge = calloc(1, LC__BS_BODY_MAX + 1), *resp;
	size_t rlen;
	assert_int_equal(lc__bootstrap_handle(b, NULL, "/route", NULL, NULL, NULL, 0, &resp, &rlen),
			 400);
	free(resp);
	assert_int_equal(lc__bootstrap_handle(b, "PUT", "/route", NULL, NULL, huge,
					      LC__BS_BODY_MAX + 1, &resp, &rlen),
			 413);
	free(resp);
	free(huge);
	/* Rank 1 with another layout than rank 0 fixed. */
	static const struct {
		const char *body;
		const char *words;
	} conflicts[] = {
		{"{\"role\":\"Prefill\",\"world_size\":4,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1}",
		 "parallel layout differs from the registered one"},
		{"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":2,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1}",
		 "parallel layout differs"},
		{"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1,\"kv_item_lens\":[64,64],"
		 "\"layout_fingerprint\":\"00000000000000bb\"}",
		 "page geometry differs"},
		{"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1,\"kv_item_lens\":[64],"
		 "\"layout_fingerprint\":\"00000000000000aa\"}",
		 "page geometry differs"},
		{"{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":4001,\"engine_rank\":1,\"kv_item_lens\":[64,65],"
		 "\"layout_fingerprint\":\"00000000000000aa\"}",
		 "page geometry differs"},
		{RANK0 ",\"rank_port\":4002}", "is registered by another P"},
	};
	for (size_t i = 0; i < sizeof conflicts / sizeof *conflicts; i++) {
		int code = put(port, NULL, conflicts[i].body, out, sizeof out);
		if (code != 409 || !strstr(out, conflicts[i].words))
			fail_msg("conflict %zu: HTTP %d, want 409 with \"%s\": %s", i, code,
				 conflicts[i].words, out);
	}
	lc_bootstrap_stop(b);
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	tu_watchdog(110);
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
	unsetenv("LAYERCAKE_SECRET_DIR");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),      cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_secret_file), cmocka_unit_test(test_requests),
		cmocka_unit_test(test_puts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
