/*
 * tcp://'s sender against a D that is not one: a raw TCP listener on
 * 127.0.0.1 (port 0) that accepts P's lanes and then says nothing, or
 * answers garbage. P's batch must fail with its cause within P's
 * connect_timeout_ms (LC_ERR_UNREACHABLE, "no handshake reply"), or at the
 * first bad frame (LC_ERR_PROTO, frames_malformed counted). Also the URLs
 * a tcp:// connection refuses at create.
 *
 *     adversarial_tcp <case>      (silent, garbage, urls)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

#define LEN 4096

typedef struct raw_d {
	int lfd, port;
	bool garbage;
	_Atomic bool stop;
	pthread_t th;
} raw_d_t;

/* Accept every lane; read what it sends; answer garbage or nothing. */
static void *raw_d_main(void *arg)
{
	raw_d_t *r = arg;
	int fds[16], n = 0;
	struct timeval tv = {0, 100000};
	setsockopt(r->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (!atomic_load(&r->stop)) {
		int fd = accept(r->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		if (n < 16)
			fds[n++] = fd;
		if (r->garbage) {
			uint8_t junk[64];
			memset(junk, 0xff, sizeof junk);
			ssize_t k = write(fd, junk, sizeof junk);
			(void)k;
		}
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return NULL;
}

static void raw_d_start(raw_d_t *r, bool garbage)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	r->garbage = garbage;
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	TU_CHECK(r->lfd >= 0 && bind(r->lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
			 listen(r->lfd, 16) == 0 &&
			 getsockname(r->lfd, (struct sockaddr *)&a, &alen) == 0,
		 "raw D: %s", strerror(errno));
	r->port = ntohs(a.sin_port);
	TU_CHECK(pthread_create(&r->th, NULL, raw_d_main, r) == 0, "thread");
}

static void raw_d_stop(raw_d_t *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->th, NULL);
	close(r->lfd);
}

static void p_against(bool garbage, int want, const char *words)
{
	raw_d_t r = {0};
	raw_d_start(&r, garbage);
	lc_ctx_t *tx, *other;
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "p"},
			    &tx));
	if (!garbage) /* the deadline under test; a slow raw D must not hit it */
		TU_OK(lc_ctx_config_set(tx, "connect_timeout_ms", "300"));
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "x"},
			    &other));
	uint8_t *dmem = calloc(1, LEN), *src = calloc(1, LEN);
	lc_region_t *dr, *sr;
	TU_OK(lc_region_register(other, dmem, LEN, &dr));
	TU_OK(lc_region_register(tx, src, LEN, &sr));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(n);
	lc_cq_t *cq;
	TU_OK(lc_cq_create(tx, &cq));
	char url[64];
	snprintf(url, sizeof url, "tcp://127.0.0.1:%d", r.port);
	lc_conn_t *conn;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq};
	TU_OK(lc_conn_create(tx, url, &cp, &conn));
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	lc_write_t w = {.local = src, .remote_region = remote, .length = LEN};
	lc_batch_params_t bp = {.size = sizeof bp, .room = 1, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, &w, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 15000);
	fprintf(stderr, "raw D (%s): %s (%s)\n", garbage ? "garbage" : "silent",
		lc_err_name(c.status), c.reason);
	TU_CHECK(c.batch_id == id && c.status == want && strstr(c.reason, words),
		 "%s, expected %s with \"%s\"", lc_err_name(c.status), lc_err_name(want), words);
	if (garbage) {
		uint64_t v = 0;
		TU_OK(lc_ctx_counter_by_name(tx, "frames_malformed", &v));
		TU_CHECK(v >= 1, "P counted no malformed frame");
	}
	lc_conn_destroy(conn);
	raw_d_stop(&r);
	lc_cq_destroy(cq);
	lc_ctx_destroy(tx);
	lc_ctx_destroy(other);
	free(src);
	free(dmem);
}

static void case_urls(void)
{
	lc_ctx_t *tx;
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t)}, &tx));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(tx, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq};
	static const char *const bad[] = {"tcp://127.0.0.1", "tcp://127.0.0.1:99999",
					  "tcp://127.0.0.1:0", "tcp://127.0.0.1:x"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		lc_conn_t *conn = NULL;
		int rc = lc_conn_create(tx, bad[i], &cp, &conn);
		fprintf(stderr, "%s: %s\n", bad[i], lc_err_name(rc));
		TU_CHECK(rc < 0 && !conn, "%s was taken", bad[i]);
	}
	lc_cq_destroy(cq);
	lc_ctx_destroy(tx);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_tcp <case>\n");
		return 2;
	}
	tu_watchdog(55);
	signal(SIGPIPE, SIG_IGN);
	if (!tu_transport_built("tcp")) {
		fprintf(stderr, "skip: no tcp transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "silent"))
		p_against(false, LC_ERR_UNREACHABLE, "within connect_timeout_ms");
	else if (!strcmp(n, "garbage"))
		p_against(true, LC_ERR_PROTO, "malformed frame from the receiver");
	else if (!strcmp(n, "urls"))
		case_urls();
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_tcp %s: ok\n", n);
	return 0;
}
