/*
 * Issue 13, finding 11: a failure reason was formatted into r->reason while
 * r->reason was also an argument (undefined behaviour; reasons came out
 * doubled). A real D whose bootstrap server does not answer fails its room
 * at bootstrap_timeout_ms, with "not bootstrapped within N ms: <the last
 * lookup error>": the reason must hold the timeout once and the lookup
 * error once.
 *
 *     adversarial_reason    exit 0 pass, 1 fail, 77 skipped
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"

/* A loopback port nothing listens on (bound, then closed). */
static int closed_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	TU_CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
			 getsockname(s, (struct sockaddr *)&a, &n) == 0,
		 "a loopback port");
	close(s);
	return ntohs(a.sin_port);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

int main(void)
{
	tu_watchdog(60);
	tu_pool_t s;
	tu_pool_init(&s, "d0", "bootstrap_timeout_ms=600", 2, 8, 4096);
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
	char bs[64];
	snprintf(bs, sizeof bs, "127.0.0.1:%d", closed_port());
	lc_receiver_t *r;
	TU_OK(lc_receiver_create(d, bs, 7, &r));
	lc_room_info_t info = {.size = sizeof info};
	int st;
	for (int i = 0; i < 5000; i++) {
		st = lc_receiver_poll(r, &info);
		if (st == LC_ROOM_FAILED || st == LC_ROOM_SUCCESS)
			break;
		usleep(1000);
	}
	fprintf(stderr, "room 7: %s (%s) \"%s\"\n", lc_room_status_name(st),
		lc_fail_reason_name(info.fail_reason), info.reason);
	int failures = 0;
	const char *colon = strstr(info.reason, "ms: ");
	if (st != LC_ROOM_FAILED || info.fail_reason != LC_FAIL_BOOTSTRAP_TIMEOUT) {
		fprintf(stderr, "want Failed (bootstrap_timeout)\n");
		failures++;
	}
	if (count(info.reason, "not bootstrapped within 600 ms") != 1 || !colon || !colon[4] ||
	    count(info.reason, colon + 4) != 1) {
		fprintf(stderr, "want the timeout once, then the lookup error once\n");
		failures++;
	}
	lc_receiver_destroy(r);
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return failures ? 1 : 0;
}
