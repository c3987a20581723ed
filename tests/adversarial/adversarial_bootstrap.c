/*
 * Adversarial tests of the bootstrap server and the secret generator
 * (issue 13, findings 10 and 16), and of GET /query, the Mooncake
 * connector's registry that routers read for P's engine id (issue 44). The server is a real process (the
 * `layercake bootstrap` command on 127.0.0.1, port 0) spoken to over real
 * sockets: libcurl for well-formed HTTP carrying bad fields, a raw TCP
 * socket for bad framing. Each refusal must be a 400 with a reason, a log
 * line on the server's stderr and a counter on its /metrics, and nothing
 * of the refused request may be stored or served back.
 *
 *     adversarial_bootstrap <case> CLI     (CLI: the layercake binary)
 *     adversarial_bootstrap list
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control/bootstrap.h"
#include "testutil.h"

/* ==== the server: a child process ==== */

typedef struct server {
	pid_t pid;
	char addr[64]; /* "127.0.0.1:PORT" */
	char log[64];  /* its stderr */
} server_t;

static server_t S;

static void server_stop(void)
{
	if (S.pid > 0) {
		kill(S.pid, SIGTERM);
		waitpid(S.pid, NULL, 0);
		S.pid = 0;
	}
	if (S.log[0])
		unlink(S.log);
}

static void server_start(const char *cli)
{
	int out[2];
	snprintf(S.log, sizeof S.log, "/tmp/lc-adv-bs-%ld.log", (long)getpid());
	TU_CHECK(pipe(out) == 0, "pipe: %s", strerror(errno));
	S.pid = fork();
	TU_CHECK(S.pid >= 0, "fork: %s", strerror(errno));
	if (S.pid == 0) {
		FILE *err = fopen(S.log, "w");
		if (!err)
			_exit(126);
		dup2(out[1], 1);
		dup2(fileno(err), 2);
		close(out[0]);
		setenv("LAYERCAKE_LOG", "warn", 1);
		execl(cli, cli, "bootstrap", "--host", "127.0.0.1", "--port", "0", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	atexit(server_stop);
	char line[128] = "";
	size_t n = 0;
	struct pollfd p = {.fd = out[0], .events = POLLIN};
	while (n < sizeof line - 1 && poll(&p, 1, 10000) == 1) {
		if (read(out[0], line + n, 1) != 1 || line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	close(out[0]);
	if (strstr(line, "not built") || strstr(line, "not supported")) {
		server_stop();
		exit(TU_SKIP);
	}
	TU_CHECK(sscanf(line, "listening %63s", S.addr) == 1, "server said \"%s\"", line);
}

/* One request; the reply's body in *resp (caller frees), the status back. */
static int http(const char *method, const char *path, const char *body, size_t len, char **resp)
{
	char url[256];
	size_t rl = 0;
	char *mine = NULL;
	snprintf(url, sizeof url, "http://%s%s", S.addr, path);
	int code = lc__http_request(method, url, body, len, NULL, 3000, resp ? resp : &mine, &rl);
	free(mine);
	return code;
}

/* A metric's value from /metrics (the whole line's name and labels); one
 * not served yet reads 0 until `must` (checked after the requests, so that
 * a server without the metric fails on what it accepted first). */
static unsigned long long metric_(const char *name, bool must)
{
	char *m = NULL;
	TU_CHECK(http("GET", "/metrics", NULL, 0, &m) == 200, "GET /metrics failed");
	char line[256];
	snprintf(line, sizeof line, "\n%s ", name); /* a sample, not its # HELP */
	char *at = m ? strstr(m, line) : NULL;
	unsigned long long v = 0;
	TU_CHECK((!must && !at) || (at && sscanf(at + strlen(line), "%llu", &v) == 1),
		 "no metric %s", name);
	free(m);
	return v;
}
#define metric_before(name) metric_(name, false)
#define metric(name) metric_(name, true)

/* Lines of the server's stderr holding needle. */
static int log_lines(const char *needle)
{
	FILE *f = fopen(S.log, "r");
	char line[1024];
	int n = 0;
	TU_CHECK(f, "cannot read %s", S.log);
	while (fgets(line, sizeof line, f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

#define INVALID "layercake_bootstrap_registrations_total{outcome=\"invalid\"}"

/* A PUT body for rank 0 of a 1-rank world with one field spliced in raw
 * (text already JSON, e.g. "\"rank_ip\":\"x\""). */
static size_t body_with(char *buf, size_t cap, const char *fields)
{
	int n = snprintf(buf, cap,
			 "{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,\"rank_port\":5555,"
			 "\"engine_rank\":0,%s}",
			 fields);
	TU_CHECK(n > 0 && (size_t)n < cap, "body too long");
	return (size_t)n;
}

/* PUT fields; expect 400 with `reason` in the reply and nothing stored. */
static void refused(const char *fields, size_t fields_len, const char *reason)
{
	char buf[1024];
	char f[512];
	memcpy(f, fields, fields_len); /* may hold raw bytes, never NUL */
	f[fields_len] = '\0';
	size_t len = body_with(buf, sizeof buf, f);
	char *resp = NULL;
	int code = http("PUT", "/route", buf, len, &resp);
	TU_CHECK(code == 400, "PUT {%s}: HTTP %d (%s), want 400", f, code, resp ? resp : "");
	TU_CHECK(resp && strstr(resp, reason), "PUT {%s}: reason \"%s\", want \"%s\"", f,
		 resp ? resp : "", reason);
	free(resp);
	code = http("GET", "/route?engine_rank=0&target_dp_group=0", NULL, 0, &resp);
	TU_CHECK(code == 404, "after PUT {%s}: GET rank 0 is HTTP %d: %s", f, code,
		 resp ? resp : "");
	free(resp);
}

#define REFUSED(lit, reason) refused(lit, sizeof(lit) - 1, reason)

/* Rank 0's route is owned (issue 21): the PUTs after the first carry the
 * owner token the first one got. */
static char owner[64];

static void accepted(const char *fields)
{
	char buf[1024], f[600];
	snprintf(f, sizeof f, "%s%s%s%s", fields, *owner ? ",\"owner_token\":\"" : "", owner,
		 *owner ? "\"" : "");
	size_t len = body_with(buf, sizeof buf, f);
	char *resp = NULL;
	int code = http("PUT", "/route", buf, len, &resp);
	TU_CHECK(code == 200, "PUT {%s}: HTTP %d (%s), want 200", fields, code, resp ? resp : "");
	const char *t = resp ? strstr(resp, "\"owner_token\":\"") : NULL;
	TU_CHECK(t && sscanf(t + 15, "%32[0-9a-f]", owner) == 1, "PUT {%s}: no owner token: %s",
		 fields, resp ? resp : "");
	free(resp);
}

/* ==== finding 10: rank_ip ==== */

static int case_rank_ip(const char *cli)
{
	server_start(cli);
	unsigned long long before = metric_before(INVALID);
	REFUSED("\"rank_ip\":\"*\"", "rank_ip");
	REFUSED("\"rank_ip\":\"127.0.0.1:1/../x\"", "rank_ip");
	REFUSED("\"rank_ip\":\"10.0.0.1:7000\"", "rank_ip");
	REFUSED("\"rank_ip\":\"host name\"", "rank_ip");
	REFUSED("\"rank_ip\":\"-lead.example\"", "rank_ip");
	REFUSED("\"rank_ip\":\"a..b\"", "rank_ip");
	REFUSED("\"rank_ip\":\"256.1.1.1\"", "rank_ip");
	REFUSED("\"rank_ip\":\"[::1]\"", "rank_ip");
	REFUSED("\"rank_ip\":\"tcp://10.0.0.1\"", "rank_ip");
	REFUSED("\"rank_ip\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.x\"",
		"rank_ip"); /* a 64-character label */
	REFUSED("\"rank_ip\":\"127.0.0.1\\nX-Injected: 1\"", "control character");
	REFUSED("\"rank_ip\":\"\xff\xfe\"", "UTF-8");
	unsigned long long after = metric(INVALID);
	TU_CHECK(after - before == 12, "invalid PUTs counted %llu, want 12", after - before);
	/* Logged through the rate-limited path (LC__LOG_PEER): the first at
	 * once, the rest counted above and summed in a later line. */
	TU_CHECK(log_lines("PUT /route refused (400)") >= 1, "refusals not logged");
	/* Host names and both address families still register. */
	accepted("\"rank_ip\":\"p0-rank.cluster.internal\"");
	accepted("\"rank_ip\":\"fe80::1\"");
	accepted("\"rank_ip\":\"10.1.2.3\"");
	char *resp = NULL;
	TU_CHECK(http("GET", "/route?engine_rank=0&target_dp_group=0", NULL, 0, &resp) == 200,
		 "GET rank 0 failed");
	TU_CHECK(resp && strstr(resp, "\"rank_ip\":\"10.1.2.3\""), "served %s", resp);
	free(resp);
	fprintf(stderr, "ok: 12 bad rank_ip refused (400, reason, log, counter), hosts accepted\n");
	return 0;
}

/* ==== finding 10: layout_fingerprint ==== */

static int case_fingerprint(const char *cli)
{
	server_start(cli);
	unsigned long long before = metric_before(INVALID);
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"-1\"", "layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\" 1f\"", "layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"0x1f\"", "layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"0x00000000deadbeef\"",
		"layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"1f\"", "layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"+0000000deadbeef\"",
		"layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"00000000deadbeef0\"",
		"layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"00000000deadbeeg\"",
		"layout_fingerprint");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"\"", "layout_fingerprint");
	unsigned long long after = metric(INVALID);
	TU_CHECK(after - before == 9, "invalid PUTs counted %llu, want 9", after - before);
	/* None of them fixed the geometry: nothing is registered yet, and the
	 * first valid PUT decides it. */
	char *resp = NULL;
	int code = http("GET", "/route?engine_rank=-1&target_dp_group=-1", NULL, 0, &resp);
	TU_CHECK(code == 404, "a refused PUT fixed the layout: HTTP %d %s", code, resp);
	free(resp);
	accepted("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"00000000DEADBEEF\"");
	TU_CHECK(http("GET", "/route?engine_rank=-1&target_dp_group=-1", NULL, 0, &resp) == 200,
		 "GET layout failed");
	TU_CHECK(resp && strstr(resp, "\"layout_fingerprint\":\"00000000deadbeef\""), "served %s",
		 resp);
	free(resp);
	fprintf(stderr, "ok: 9 bad fingerprints refused; none fixed the layout\n");
	return 0;
}

/* ==== finding 10: strings: NUL, control characters, invalid UTF-8 ==== */

static int case_strings(const char *cli)
{
	server_start(cli);
	unsigned long long before = metric_before(INVALID);
	/* An escaped NUL used to cut the string: "Prefill" and "127.0.0.1". */
	REFUSED("\"role\":\"Prefill\\u0000x\",\"rank_ip\":\"127.0.0.1\"", "NUL");
	REFUSED("\"rank_ip\":\"127.0.0.1\\u0000.evil\"", "NUL");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"curve_public_key\":\"a\\u0000\"", "NUL");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"layout_fingerprint\":\"00000000\\u0000eadbeef\"",
		"NUL");
	REFUSED("\"rank_ip\":\"127.0.0.1\\r\"", "control character");
	REFUSED("\"rank_ip\":\"127.0.0.1\\u007f\"", "control character");
	REFUSED("\"rank_ip\":\"127.0.0.1\\u0085\"", "control character");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"curve_public_key\":\"\xc0\xaf\"",
		"UTF-8"); /* overlong */
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"curve_public_key\":\"\xed\xa0\x80\"", "UTF-8");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"curve_public_key\":\"\xe2\x82\"", "UTF-8");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"curve_public_key\":\"not z85 and not 40 long\"",
		"curve_public_key");
	unsigned long long after = metric(INVALID);
	TU_CHECK(after - before == 11, "invalid PUTs counted %llu, want 11", after - before);
	TU_CHECK(log_lines("PUT /route refused (400)") >= 1, "refusals not logged");
	fprintf(stderr, "ok: NUL, control characters, bad UTF-8 and bad keys refused\n");
	return 0;
}

/* ==== finding 10: framing: duplicate Content-Length ==== */

/* Send req on a fresh connection; the status line's code (0: none). */
static int raw(const char *req, size_t len, char *reply, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char host[64];
	int port = 0;
	TU_CHECK(sscanf(S.addr, "%63[^:]:%d", host, &port) == 2, "address %s", S.addr);
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect: %s",
		 strerror(errno));
	TU_CHECK(write(fd, req, len) == (ssize_t)len, "write: %s", strerror(errno));
	size_t n = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (n < cap - 1 && poll(&p, 1, 3000) == 1) {
		ssize_t k = read(fd, reply + n, cap - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	reply[n] = '\0';
	close(fd);
	int code = 0;
	sscanf(reply, "HTTP/1.1 %d", &code);
	return code;
}

static int case_content_length(const char *cli)
{
	server_start(cli);
	static const char body[] =
		"{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,"
		"\"rank_ip\":\"127.0.0.1\",\"rank_port\":5555,\"engine_rank\":0}";
	size_t blen = sizeof body - 1;
	const char *heads[] = {
		"Content-Length: %zu\r\nContent-Length: 5\r\n",
		"Content-Length: 5\r\nContent-Length: %zu\r\n",
		"Content-Length: %zu\r\ncontent-length: %zu\r\n",
		"Content-Length: %zu\r\nTransfer-Encoding: chunked\r\n",
	};
	char req[1024], reply[4096];
	unsigned long long before = metric_before("layercake_bootstrap_bad_headers_total");
	for (size_t k = 0; k < LC__ARRAY_SIZE(heads); k++) {
		char h[128];
		snprintf(h, sizeof h, heads[k], blen, blen);
		bool chunked = strstr(h, "chunked");
		int n = snprintf(req, sizeof req,
				 "PUT /route HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n",
				 h);
		if (chunked)
			n += snprintf(req + n, sizeof req - (size_t)n, "%zx\r\n%s\r\n0\r\n\r\n",
				      blen, body);
		else
			n += snprintf(req + n, sizeof req - (size_t)n, "%s", body);
		int code = raw(req, (size_t)n, reply, sizeof reply);
		TU_CHECK(code == 400, "headers %zu: HTTP %d, want 400:\n%s", k, code, reply);
		TU_CHECK(strstr(reply, "Content-Length"), "headers %zu: no reason:\n%s", k, reply);
		char *resp = NULL;
		code = http("GET", "/route?engine_rank=0&target_dp_group=0", NULL, 0, &resp);
		TU_CHECK(code == 404, "headers %zu: the PUT was stored: HTTP %d %s", k, code, resp);
		free(resp);
	}
	unsigned long long after = metric("layercake_bootstrap_bad_headers_total");
	TU_CHECK(after - before == LC__ARRAY_SIZE(heads), "bad headers counted %llu, want %zu",
		 after - before, LC__ARRAY_SIZE(heads));
	TU_CHECK(log_lines("Content-Length") >= 1, "refusals not logged"); /* rate-limited */
	/* One Content-Length still works. */
	int n = snprintf(req, sizeof req,
			 "PUT /route HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\nConnection: "
			 "close\r\n\r\n%s",
			 blen, body);
	TU_CHECK(raw(req, (size_t)n, reply, sizeof reply) == 200, "a plain PUT: %s", reply);
	fprintf(stderr, "ok: duplicate Content-Length and CL with chunked refused (400)\n");
	return 0;
}

/* ==== finding 16: no secret without getrandom ==== */

/* From here on getrandom(2) fails with ENOSYS in this process, as on a
 * kernel or sandbox that refuses it (a real seccomp filter, no mock). */
static int deny_getrandom(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getrandom, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = LC__ARRAY_SIZE(f), .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -errno;
	return 0;
}

static int random_child(void)
{
	lc_ctx_t *ctx = NULL;
	lc_token_t t, t2;
	uint64_t failures = 0;
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_token_issue(ctx, &t)); /* getrandom works: a token */
	int rc = deny_getrandom();
	if (rc) {
		fprintf(stderr, "seccomp unavailable here: %s\n", strerror(-rc));
		return TU_SKIP;
	}
	memset(&t2, 0x5a, sizeof t2);
	rc = lc_token_issue(ctx, &t2);
	TU_CHECK(rc == -ENOSYS, "lc_token_issue without getrandom returned %d (%s), want -ENOSYS",
		 rc, lc_err_name(rc));
	for (size_t i = 0; i < LC_TOKEN_LEN; i++)
		TU_CHECK(t2.bytes[i] == 0x5a, "the token was written on failure");
	TU_OK(lc_ctx_counter_by_name(ctx, "random_failures", &failures));
	TU_CHECK(failures == 1, "random_failures %llu, want 1", (unsigned long long)failures);
	/* A context needs a random owner id: none without getrandom. */
	lc_ctx_t *c2 = NULL;
	rc = lc_ctx_create(NULL, &c2);
	TU_CHECK(rc == -ENOSYS && !c2, "lc_ctx_create without getrandom returned %d", rc);
	lc_ctx_destroy(ctx);
	fprintf(stderr, "ok: no getrandom: no token, no context, an error, a count\n");
	return 0;
}

static int case_random(const char *cli)
{
	(void)cli;
	pid_t pid = fork();
	TU_CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		lc_log_set_level(LC_LOG_OFF);
		_exit(random_child());
	}
	int st = 0;
	TU_CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
	TU_CHECK(WIFEXITED(st), "the child died (signal %d)", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return WEXITSTATUS(st);
}

/* ==== issue 44: GET /query, the Mooncake connector's shape ==== */

#define BAD_REQ "layercake_bootstrap_requests_total{code=\"400\"}"
#define NOT_ALLOWED "layercake_bootstrap_requests_total{code=\"405\"}"

/* GET path: the status, and the body in want_body when not NULL (exact). */
static void get_query(const char *path, int want_code, const char *want_body)
{
	char *resp = NULL;
	int code = http("GET", path, NULL, 0, &resp);
	TU_CHECK(code == want_code, "GET %s: HTTP %d (%s), want %d", path, code, resp ? resp : "",
		 want_code);
	TU_CHECK(!want_body || (resp && !strcmp(resp, want_body)), "GET %s served %s, want %s",
		 path, resp ? resp : "(nothing)", want_body);
	free(resp);
}

static int case_query(const char *cli)
{
	server_start(cli);
	/* Nothing registered: Mooncake's server answers {} (a router polls). */
	get_query("/query", 200, "{}");
	/* A bad engine_id is refused with the rank's PUT, nothing stored. */
	unsigned long long before = metric_before(INVALID);
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"engine_id\":7", "engine_id");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"engine_id\":\"e\\n1\"", "control character");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"engine_id\":\"e\\u0000x\"", "NUL");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"engine_id\":\"\xff\"", "UTF-8");
	REFUSED("\"rank_ip\":\"127.0.0.1\",\"engine_id\":\""
		"0123456789012345678901234567890123456789012345678901234567890123"
		"01234567890123456789012345678901234567890123456789012345678901234\"",
		"engine_id"); /* 129 bytes */
	TU_CHECK(metric(INVALID) - before == 5, "invalid PUTs counted %llu, want 5",
		 metric(INVALID) - before);
	get_query("/query", 200, "{}");
	/* Bad methods and parameters: 405 and 400, with the reason, counted. */
	unsigned long long bad0 = metric_before(BAD_REQ), na0 = metric_before(NOT_ALLOWED);
	const char *methods[] = {"POST", "PUT", "DELETE", "PATCH"};
	for (size_t i = 0; i < LC__ARRAY_SIZE(methods); i++) {
		char *resp = NULL;
		int code = http(methods[i], "/query", "{}", 2, &resp);
		TU_CHECK(code == 405 && resp && strstr(resp, "not allowed on /query"),
			 "%s /query: HTTP %d (%s), want 405", methods[i], code, resp ? resp : "");
		free(resp);
	}
	const char *queries[] = {"/query?x=1", "/query?engine_rank=0&target_dp_group=0",
				 "/query?%00", "/query?a"};
	for (size_t i = 0; i < LC__ARRAY_SIZE(queries); i++)
		get_query(queries[i], 400, "/query takes no parameters");
	TU_CHECK(metric(BAD_REQ) - bad0 == LC__ARRAY_SIZE(queries), "400s counted %llu, want %zu",
		 metric(BAD_REQ) - bad0, LC__ARRAY_SIZE(queries));
	TU_CHECK(metric(NOT_ALLOWED) - na0 == LC__ARRAY_SIZE(methods),
		 "405s counted %llu, want %zu", metric(NOT_ALLOWED) - na0,
		 LC__ARRAY_SIZE(methods));
	TU_CHECK(log_lines("GET /query refused (400)") >= 1, "refusals not logged");
	/* A rank that names no engine id (a P outside vLLM) is not listed. */
	accepted("\"rank_ip\":\"127.0.0.1\"");
	get_query("/query", 200, "{}");
	/* The rank names its engine (refreshing its route): listed as Mooncake's
	 * server lists a dp rank, its worker at the rank's control endpoint. */
	accepted("\"rank_ip\":\"127.0.0.1\",\"engine_id\":\"9b2c-e\u00e9\"");
	get_query("/query", 200,
		  "{\"0\":{\"engine_id\":\"9b2c-e\u00e9\",\"worker_addr\":{\"0\":{\"0\":"
		  "\"tcp://127.0.0.1:5555\"}}}}");
	accepted("\"rank_ip\":\"fe80::1\",\"engine_id\":\"other-engine\"");
	get_query("/query", 200,
		  "{\"0\":{\"engine_id\":\"other-engine\",\"worker_addr\":{\"0\":{\"0\":"
		  "\"tcp://[fe80::1]:5555\"}}}}");
	fprintf(stderr, "ok: GET /query in Mooncake's shape; bad methods, parameters and "
			"engine ids refused (reason, log, counter)\n");
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(const char *cli);
	const char *what;
} cases[] = {
	{"rank_ip", case_rank_ip, "rank_ip must be a host name or an IP literal"},
	{"fingerprint", case_fingerprint, "layout_fingerprint: 16 hex digits, nothing else"},
	{"strings", case_strings, "strings: UTF-8, no NUL, no control characters"},
	{"content_length", case_content_length, "duplicate Content-Length refused"},
	{"random", case_random, "no token or context when getrandom fails"},
	{"query", case_query, "GET /query: Mooncake's registry shape, bad requests refused"},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: adversarial_bootstrap <case> CLI | list\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(100);
	if (!getenv("LAYERCAKE_LOG"))
		lc_log_set_level(LC_LOG_ERROR);
	for (size_t k = 0; k < LC__ARRAY_SIZE(cases); k++) {
		if (!strcmp(argv[1], "list"))
			printf("%s\t%s\n", cases[k].name, cases[k].what);
		else if (!strcmp(argv[1], cases[k].name))
			return cases[k].fn(argc > 2 ? argv[2] : "layercake");
	}
	if (strcmp(argv[1], "list")) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return 0;
}
