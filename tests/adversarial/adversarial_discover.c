/*
 * Issue 20, point 4: a wrong explicit bootstrap address was silent for
 * bootstrap_timeout_ms (120 s), then "peer unreachable" even when the port
 * was open and answered something else. A real D against a real socket on
 * 127.0.0.1 must hear about it within WORD_MS:
 *
 *     adversarial_discover refused   nothing listens there: a warning naming
 *                                    "connection refused" and the address at
 *                                    once; the room keeps waiting (a D may
 *                                    start before its P)
 *     adversarial_discover garbage   a TCP server answering bytes that are
 *                                    not HTTP: the room fails (bad_input),
 *                                    "not a bootstrap server"
 *     adversarial_discover http404   a web server answering 404 to anything:
 *                                    the same
 *     adversarial_discover no_p_yet  a real bootstrap server with no P yet
 *                                    (404 to GET /route, 200 to /health): the
 *                                    room waits (D may start before its P),
 *                                    no "not a bootstrap server"
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

#define WORD_MS 5000

/* ---- the log, as D writes it ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static size_t log_len;

static void on_log(lc_log_level_t level, const char *line, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (level <= LC_LOG_WARN && log_len + strlen(line) + 2 < sizeof log_text)
		log_len += (size_t)snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n",
					    line);
	pthread_mutex_unlock(&log_lock);
}

static bool log_has(const char *a, const char *b)
{
	pthread_mutex_lock(&log_lock);
	bool yes = false;
	for (const char *l = log_text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *end = strchr(l, '\n');
		char line[1024];
		snprintf(line, sizeof line, "%.*s", end ? (int)(end - l) : (int)strlen(l), l);
		if (strstr(line, a) && strstr(line, b))
			yes = true;
	}
	pthread_mutex_unlock(&log_lock);
	return yes;
}

/* ---- a server that is not a bootstrap server ---- */

static int srv_fd;
static const char *srv_answer;

static void *srv_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(srv_fd, NULL, NULL);
		if (c < 0)
			return NULL;
		char buf[2048];
		usleep(20000); /* the request in (a server that reads before it answers) */
		if (recv(c, buf, sizeof buf, MSG_DONTWAIT) < 0) {
			/* answered anyway */
		}
		if (send(c, srv_answer, strlen(srv_answer), MSG_NOSIGNAL) < 0) {
			/* the client went */
		}
		close(c);
	}
}

/* Listening on 127.0.0.1:0 (listening: 1) or bound and closed (0). */
static int loopback_port(bool listening)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	TU_CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
			 getsockname(s, (struct sockaddr *)&a, &n) == 0 &&
			 (!listening || listen(s, 16) == 0),
		 "a loopback port");
	if (listening)
		srv_fd = s;
	else
		close(s);
	return ntohs(a.sin_port);
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	tu_watchdog(60);
	if (argc != 2) {
		fprintf(stderr, "usage: %s refused|garbage|http404\n", argv[0]);
		return 2;
	}
	bool refused = !strcmp(argv[1], "refused"), no_p = !strcmp(argv[1], "no_p_yet");
	if (!strcmp(argv[1], "garbage"))
		srv_answer = "SSH-2.0-OpenSSH_9.2 not what you wanted\r\n";
	else if (!strcmp(argv[1], "http404"))
		srv_answer =
			"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n"
			"Content-Length: 22\r\nConnection: close\r\n\r\n<h1>Not Found</h1>\r\n\r\n";
	else if (!refused && !no_p) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	lc_log_set_handler(on_log, NULL);
	tu_pool_t s;
	tu_pool_init(&s, "d0", NULL, 2, 8, 4096); /* bootstrap_timeout_ms: 120 s */
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .tp_size = 1};
	lc_decode_t *d;
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	pthread_t srv;
	char bs[64];
	lc_bootstrap_t *b = NULL;
	if (no_p) {
		lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
		TU_OK(lc_bootstrap_start(&bp, &b));
		TU_OK(lc_bootstrap_addr(b, bs, sizeof bs));
	} else {
		snprintf(bs, sizeof bs, "127.0.0.1:%d", loopback_port(!refused));
	}
	if (srv_answer)
		TU_CHECK(pthread_create(&srv, NULL, srv_main, NULL) == 0, "server thread");
	lc_receiver_t *r;
	uint64_t t0 = now_ms();
	TU_OK(lc_receiver_create(d, bs, 7, &r));
	lc_room_info_t info = {.size = sizeof info};
	int st = LC_ROOM_BOOTSTRAPPING, failures = 0;
	bool heard = false;
	/* no_p_yet: lookups every 200 ms, each a 404 and a /health. */
	while (now_ms() - t0 < (no_p ? 1500 : WORD_MS)) {
		st = lc_receiver_poll(r, &info);
		heard = refused ? log_has("connection refused", bs)
				: log_has("not a bootstrap server", bs);
		if (st == LC_ROOM_FAILED || st == LC_ROOM_SUCCESS || (refused && heard))
			break;
		usleep(5000);
	}
	uint64_t ms = now_ms() - t0;
	fprintf(stderr, "after %llu ms: %s (%s) \"%s\"\n", (unsigned long long)ms,
		lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
	pthread_mutex_lock(&log_lock);
	fprintf(stderr, "log:\n%s", log_text);
	pthread_mutex_unlock(&log_lock);
	if (no_p && (st != LC_ROOM_BOOTSTRAPPING || heard)) {
		fprintf(stderr, "want the room waiting for P and no \"not a bootstrap server\"\n");
		failures++;
	}
	if (!no_p && !heard) {
		fprintf(stderr, "want a warning naming %s within %d ms\n",
			refused ? "\"connection refused\"" : "\"not a bootstrap server\"", WORD_MS);
		failures++;
	}
	if (refused && st != LC_ROOM_BOOTSTRAPPING) {
		fprintf(stderr, "want the room still waiting for its P (D may start first)\n");
		failures++;
	}
	if (srv_answer &&
	    (st != LC_ROOM_FAILED || info.fail_reason != LC_FAIL_BAD_INPUT ||
	     !strstr(info.reason, "not a bootstrap server") || !strstr(info.reason, bs))) {
		fprintf(stderr,
			"want Failed (bad_input) within %d ms, the reason naming \"not a "
			"bootstrap server\" and %s\n",
			WORD_MS, bs);
		failures++;
	}
	lc_receiver_destroy(r);
	lc_decode_destroy(d);
	if (b)
		lc_bootstrap_stop(b);
	if (srv_answer) {
		shutdown(srv_fd, SHUT_RDWR);
		close(srv_fd);
		pthread_join(srv, NULL);
	}
	tu_pool_fini(&s);
	lc_log_set_handler(NULL, NULL);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
