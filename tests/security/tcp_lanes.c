/*
 * Authenticated tcp:// lanes are capped and idle out (issue 21, point 8): a
 * token holder that opens lane after lane to D's listener and leaves them
 * idle cannot keep a real P out. Real sockets on 127.0.0.1: a raw client
 * speaking the wire format (transport/tcp/wire.h) with D's real token, and
 * a real P (lc_conn_create, lc_batch_post) writing D's granted range.
 *
 *     lc_tcp_lanes flood   1,024 authenticated idle lanes from one address:
 *                          D holds at most tcp_lanes_per_addr of them and
 *                          refuses the rest (lanes_refused_cap); then a real P
 *                          gets its lanes (lanes_evicted: idle ones made room)
 *                          and its writes land byte-exact, nothing outside the
 *                          grant touched.
 *     lc_tcp_lanes idle    tcp_lane_idle_ms=300: 40 idle authenticated lanes
 *                          are closed (lanes_idled_out); a lane in the middle
 *                          of a granted write is not, however long it waits,
 *                          and its write lands; a real P idled out between two
 *                          batches reconnects and both land byte-exact.
 *     lc_tcp_lanes resend  a raw receiver closes P's idle lane as P's next
 *                          batch's first bytes arrive (D idling the lane out
 *                          in that instant): P sends the batch again on a new
 *                          lane instead of failing it.
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/tcp/wire.h"
#include "testutil.h"

#define REGION_LEN (4u << 20)
#define G_OFF (1u << 20)
#define G_LEN (2u << 20)
#define ROOM 11
#define ROOM_BUSY 12  /* the stalled raw write's: its own range past the grant */
#define ROOM_AGAIN 13 /* P's second round, the same range once ROOM is revoked */
#define BUSY_OFF (G_OFF + G_LEN)
#define BUSY_LEN (64u << 10)
#define CANARY 0x3c
#define FLOOD 1024
#define PER_ADDR 128 /* the tcp_lanes_per_addr default */

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ---- D: a listener with one granted range ---- */

typedef struct target {
	lc_ctx_t *ctx;
	lc_listener_t *l;
	uint8_t *mem;
	lc_region_t *region;
	lc_token_t token;
	char url[128];
	int port;
} target_t;

static target_t T;

static void target_up(const char *idle_ms)
{
	TU_OK(lc_ctx_create(NULL, &T.ctx));
	TU_OK(lc_ctx_config_set(T.ctx, "require_token", "1"));
	if (idle_ms)
		TU_OK(lc_ctx_config_set(T.ctx, "tcp_lane_idle_ms", idle_ms));
	TU_OK(lc_mem_alloc(REGION_LEN, 0, (void **)&T.mem));
	memset(T.mem, CANARY, REGION_LEN);
	TU_OK(lc_region_register(T.ctx, T.mem, REGION_LEN, &T.region));
	TU_OK(lc_token_issue(T.ctx, &T.token));
	TU_OK(lc_grant_issue(T.ctx, ROOM, T.region, G_OFF, G_LEN));
	TU_OK(lc_grant_issue(T.ctx, ROOM_BUSY, T.region, BUSY_OFF, BUSY_LEN));
	int rc = lc_listener_create(T.ctx, "tcp://127.0.0.1:0", &T.l);
	if (rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: no tcp transport\n");
		exit(TU_SKIP);
	}
	TU_OK(rc);
	TU_OK(lc_listener_url(T.l, T.url, sizeof T.url));
	T.port = atoi(strrchr(T.url, ':') + 1);
}

static void target_down(void)
{
	lc_listener_destroy(T.l);
	lc_region_deregister(T.region);
	lc_ctx_destroy(T.ctx);
	lc_mem_free(T.mem);
}

static uint64_t counter(const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(T.ctx, name, &v));
	return v;
}

/* Bytes outside the grant (and the stalled write's range) that changed. */
static size_t written_outside(void)
{
	size_t n = 0;
	for (size_t i = 0; i < REGION_LEN; i++)
		if ((i < G_OFF || i >= BUSY_OFF + BUSY_LEN) && T.mem[i] != CANARY)
			n++;
	return n;
}

/* ---- the raw client ---- */

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)T.port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) {
		close(fd);
		return -1;
	}
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

/* Next control frame: 1 and *f, 0 if the connection closed, -1 on timeout. */
static int recv_ctrl(int fd, lc__tcp_ctrl_t *f, int timeout_ms)
{
	uint8_t b[LC__TCP_CTRL_LEN];
	size_t got = 0;
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	while (got < sizeof b) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(dl > now_ms() ? dl - now_ms() : 0);
		if (poll(&p, 1, left) <= 0)
			return -1;
		ssize_t n = recv(fd, b + got, sizeof b - got, 0);
		if (n <= 0)
			return 0;
		got += (size_t)n;
	}
	TU_CHECK(lc__tcp_prefix_ok(b), "receiver sent a malformed frame");
	lc__tcp_decode_ctrl(b, f);
	return 1;
}

/* HELLO with D's token: the HELLO_REPLY status (0 admitted, -EBUSY refused). */
static int handshake(int fd)
{
	uint8_t b[LC__TCP_CTRL_LEN];
	lc__tcp_ctrl_t h = {.type = LC__TCP_HELLO,
			    .status = LC__TCP_HELLO_TOKEN,
			    .a = lc__get_u64(T.token.bytes),
			    .b = lc__get_u64(T.token.bytes + 8)};
	lc__tcp_encode_ctrl(b, &h);
	send_all(fd, b, sizeof b);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 5000) == 1 && f.type == LC__TCP_HELLO_REPLY, "no HELLO_REPLY");
	return f.status;
}

/* Whether D closed fd (EOF or reset), without waiting. */
static bool is_closed(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, 0) <= 0)
		return false;
	uint8_t b[64];
	ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Lanes of fds[0..n) that D still holds, once the count is stable. */
static int still_open(const int *fds, int n)
{
	int open = 0;
	for (int i = 0; i < n; i++)
		open += fds[i] >= 0 && !is_closed(fds[i]);
	return open;
}

/* ---- the real P ---- */

typedef struct sender {
	lc_ctx_t *ctx;
	uint8_t *mem;
	lc_region_t *region;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint32_t rid;
} sender_t;

static void sender_up(sender_t *s)
{
	TU_OK(lc_ctx_create(NULL, &s->ctx));
	TU_OK(lc_mem_alloc(G_LEN, 0, (void **)&s->mem));
	TU_OK(lc_region_register(s->ctx, s->mem, G_LEN, &s->region));
	TU_OK(lc_cq_create(s->ctx, &s->cq));
	lc_conn_params_t cp = {
		.size = sizeof cp, .cq = s->cq, .token = T.token, .has_token = 1, .lanes = 4};
	TU_OK(lc_conn_create(s->ctx, T.url, &cp, &s->conn));
	uint8_t desc[256];
	int n = lc_region_pack(T.region, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_conn_import_region(s->conn, desc, (size_t)n, &s->rid));
}

/* The whole grant in 64 KiB writes, bytes from `seed`; its completion status. */
static int sender_round(sender_t *s, uint64_t room, uint64_t seed)
{
	enum { W = 64u << 10, N = G_LEN / W };
	lc_write_t w[N];
	tu_fill(s->mem, G_LEN, seed);
	for (int i = 0; i < N; i++)
		w[i] = (lc_write_t){.local = s->mem + (size_t)i * W,
				    .remote_offset = G_OFF + (uint64_t)i * W,
				    .length = W,
				    .remote_region = s->rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = room, .timeout_ms = 10000};
	uint64_t id;
	TU_OK(lc_batch_post(s->conn, w, N, &bp, &id));
	lc_completion_t c = tu_wait_one(s->cq, 15000);
	if (c.status)
		fprintf(stderr, "P's batch: %s: %s\n", lc_err_name(c.status), c.reason);
	return c.status;
}

static void sender_down(sender_t *s)
{
	lc_conn_destroy(s->conn);
	lc_cq_destroy(s->cq);
	lc_region_deregister(s->region);
	lc_ctx_destroy(s->ctx);
	lc_mem_free(s->mem);
}

static int check_landed(uint64_t seed)
{
	long bad = tu_verify(T.mem + G_OFF, G_LEN, seed);
	size_t out = written_outside();
	if (bad >= 0 || out)
		fprintf(stderr, "D: first wrong byte in the grant at %ld, %zu bytes outside it\n",
			bad, out);
	return bad >= 0 || out ? 1 : 0;
}

/* ---- cases ---- */

static int case_flood(void)
{
	struct rlimit rl;
	TU_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 2 * FLOOD + 256) {
		fprintf(stderr, "skip: RLIMIT_NOFILE hard limit %llu\n",
			(unsigned long long)rl.rlim_max);
		return TU_SKIP;
	}
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 4 * FLOOD : rl.rlim_max;
	TU_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
	target_up(NULL);
	static int fds[FLOOD];
	int admitted = 0, refused = 0;
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = raw_connect();
		if (fds[i] < 0)
			break;
		int st = handshake(fds[i]);
		TU_CHECK(st == 0 || st == -EBUSY, "HELLO_REPLY status %d", st);
		admitted += st == 0;
		refused += st == -EBUSY;
	}
	usleep(300000); /* D closes what it refused or evicted */
	int open = still_open(fds, FLOOD);
	fprintf(stderr, "flood: %d lanes admitted, %d refused; D holds %d (cap %d)\n", admitted,
		refused, open, PER_ADDR);
	int failures = 0;
	if (open > PER_ADDR || refused == 0 || counter("lanes_refused_cap") == 0) {
		fprintf(stderr, "FAIL: D holds %d idle authenticated lanes from one address\n",
			open);
		failures++;
	}
	usleep(1200000); /* every held lane has been quiet for over a second */
	sender_t s;
	sender_up(&s);
	int st = sender_round(&s, ROOM, 0x5eed);
	failures += st != 0;
	failures += st == 0 && check_landed(0x5eed);
	uint64_t evicted = counter("lanes_evicted");
	fprintf(stderr, "P's batch %s; lanes_evicted %llu, lanes_refused_cap %llu\n",
		st ? "FAILED" : "succeeded", (unsigned long long)evicted,
		(unsigned long long)counter("lanes_refused_cap"));
	if (evicted == 0) {
		fprintf(stderr, "FAIL: P got in without evicting an idle lane at the cap?\n");
		failures++;
	}
	sender_down(&s);
	for (int i = 0; i < FLOOD; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	target_down();
	return failures ? 1 : 0;
}

/* A granted write of len bytes at BUSY_OFF, half its payload now; the rest later. */
static void half_write(int fd, uint8_t *payload, size_t len)
{
	uint8_t f[LC__TCP_HDR_LEN + LC__TCP_DESC_LEN];
	lc__tcp_run_hdr_t h = {.n = 1, .room = ROOM_BUSY, .seq = 0};
	lc__tcp_encode_run(f, &h);
	lc__tcp_desc_t d = {.region = lc_region_id(T.region), .offset = BUSY_OFF, .length = len};
	lc__tcp_encode_desc(f + LC__TCP_HDR_LEN, &d);
	send_all(fd, f, sizeof f);
	send_all(fd, payload, len / 2);
}

static int case_idle(void)
{
	enum { IDLE = 40, WLEN = BUSY_LEN };
	int failures = 0;
	target_up("300");
	int fds[IDLE];
	for (int i = 0; i < IDLE; i++) {
		fds[i] = raw_connect();
		TU_CHECK(fds[i] >= 0 && handshake(fds[i]) == 0, "lane %d not admitted", i);
	}
	/* A lane in the middle of a granted write, stalled past the deadline. */
	static uint8_t payload[WLEN];
	memset(payload, 0x77, sizeof payload);
	int busy = raw_connect();
	TU_CHECK(busy >= 0 && handshake(busy) == 0, "busy lane not admitted");
	half_write(busy, payload, WLEN);

	uint64_t dl = now_ms() + 10000;
	int open = IDLE;
	while ((open = still_open(fds, IDLE)) > 0 && now_ms() < dl)
		usleep(50000);
	fprintf(stderr, "idle: %d of %d idle lanes still open; lanes_idled_out %llu\n", open, IDLE,
		(unsigned long long)counter("lanes_idled_out"));
	if (open || counter("lanes_idled_out") < IDLE) {
		fprintf(stderr, "FAIL: idle authenticated lanes were not closed\n");
		failures++;
	}
	if (is_closed(busy)) {
		fprintf(stderr, "FAIL: a lane with a granted write in flight was idled out\n");
		failures++;
	} else {
		send_all(busy, payload + WLEN / 2, WLEN / 2);
		lc__tcp_ctrl_t f;
		int r = recv_ctrl(busy, &f, 5000);
		if (r != 1 || f.type != LC__TCP_ACK || f.a != 1 || T.mem[BUSY_OFF] != 0x77 ||
		    T.mem[BUSY_OFF + WLEN - 1] != 0x77) {
			fprintf(stderr, "FAIL: the stalled write did not land (%d, type %u)\n", r,
				r == 1 ? f.type : 0);
			failures++;
		}
	}
	close(busy);

	/* A real P idles out between two batches and reconnects. The
	 * baseline before P's lanes exist: they may idle out (300 ms) before
	 * the round's checks are done. */
	uint64_t before = counter("lanes_idled_out");
	sender_t s;
	sender_up(&s);
	failures += sender_round(&s, ROOM, 1) != 0 || check_landed(1);
	dl = now_ms() + 10000;
	while (counter("lanes_idled_out") == before && now_ms() < dl)
		usleep(50000);
	if (counter("lanes_idled_out") == before) {
		fprintf(stderr, "FAIL: P's idle lanes were not idled out\n");
		failures++;
	}
	TU_OK(lc_grant_revoke(T.ctx, ROOM));
	TU_OK(lc_grant_issue(T.ctx, ROOM_AGAIN, T.region, G_OFF, G_LEN));
	failures += sender_round(&s, ROOM_AGAIN, 2) != 0 || check_landed(2);
	sender_down(&s);
	for (int i = 0; i < IDLE; i++)
		close(fds[i]);
	target_down();
	return failures ? 1 : 0;
}

/* ---- resend: a lane closed in the instant P's first write went out ---- */

static int fake_accept(int lfd)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	TU_CHECK(poll(&p, 1, 10000) == 1, "P did not connect");
	int fd = accept(lfd, NULL, NULL);
	TU_CHECK(fd >= 0, "accept: %s", strerror(errno));
	return fd;
}

static void recv_exact(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		TU_CHECK(poll(&p, 1, 10000) == 1, "nothing from P");
		ssize_t k = recv(fd, (uint8_t *)buf + got, n - got, 0);
		TU_CHECK(k > 0, "P closed the lane");
		got += (size_t)k;
	}
}

/* A receiver's side of one lane: HELLO in, HELLO_REPLY 0 out. */
static void fake_handshake(int fd)
{
	uint8_t b[LC__TCP_CTRL_LEN];
	recv_exact(fd, b, sizeof b);
	TU_CHECK(lc__tcp_prefix_ok(b) && b[2] == LC__TCP_HELLO, "no HELLO");
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO_REPLY});
	send_all(fd, b, sizeof b);
}

/* P's lane is connected and idle; the receiver closes it as P's next batch
 * starts (a write on the wire as D idles the lane out: D landed none of it).
 * P must send the batch again on a new socket, not fail it. The receiver
 * here is a raw one that plays D's side of the wire. */
static int case_resend(void)
{
	enum { LEN = 4096 };
	target_up(NULL); /* only for a packed region descriptor and a token */
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	TU_CHECK(lfd >= 0 && !bind(lfd, (struct sockaddr *)&a, sizeof a) && !listen(lfd, 8) &&
			 !getsockname(lfd, (struct sockaddr *)&a, &alen),
		 "listen: %s", strerror(errno));
	snprintf(T.url, sizeof T.url, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	sender_t s;
	TU_OK(lc_ctx_create(NULL, &s.ctx));
	TU_OK(lc_mem_alloc(LEN, 0, (void **)&s.mem));
	memset(s.mem, 0x5a, LEN);
	TU_OK(lc_region_register(s.ctx, s.mem, LEN, &s.region));
	TU_OK(lc_cq_create(s.ctx, &s.cq));
	lc_conn_params_t cp = {
		.size = sizeof cp, .cq = s.cq, .token = T.token, .has_token = 1, .lanes = 1};
	TU_OK(lc_conn_create(s.ctx, T.url, &cp, &s.conn));
	uint8_t desc[256];
	int n = lc_region_pack(T.region, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_conn_import_region(s.conn, desc, (size_t)n, &s.rid));
	int fd = fake_accept(lfd); /* the lane P opens ahead of its first batch */
	fake_handshake(fd);
	usleep(200000); /* P has the reply: the lane is ready and idle */

	lc_write_t w = {
		.local = s.mem, .remote_offset = G_OFF, .length = LEN, .remote_region = s.rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 10000};
	uint64_t id;
	TU_OK(lc_batch_post(s.conn, &w, 1, &bp, &id));
	uint8_t hdr[LC__TCP_HDR_LEN];
	recv_exact(fd, hdr, sizeof hdr); /* the batch's first bytes arrived ... */
	close(fd);                       /* ... and the lane closes under them */

	fd = fake_accept(lfd);
	fake_handshake(fd);
	uint8_t frame[LC__TCP_HDR_LEN + LC__TCP_DESC_LEN + LEN];
	recv_exact(fd, frame, sizeof frame);
	lc__tcp_run_hdr_t h;
	lc__tcp_decode_run(frame, &h);
	int failures = 0;
	if (h.n != 1 || h.seq != 0 || h.room != ROOM || frame[sizeof frame - 1] != 0x5a) {
		fprintf(stderr, "FAIL: the resent frame is not the batch's (n %u seq %llu)\n", h.n,
			(unsigned long long)h.seq);
		failures++;
	}
	uint8_t ack[LC__TCP_CTRL_LEN];
	lc__tcp_encode_ctrl(ack, &(lc__tcp_ctrl_t){.type = LC__TCP_ACK, .a = 1});
	send_all(fd, ack, sizeof ack);
	lc_completion_t c = tu_wait_one(s.cq, 15000);
	if (c.status) {
		fprintf(stderr, "FAIL: P failed the batch instead of sending it again: %s: %s\n",
			lc_err_name(c.status), c.reason);
		failures++;
	}
	sender_down(&s);
	close(fd);
	close(lfd);
	target_down();
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(100);
	if (argc == 2 && !strcmp(argv[1], "flood"))
		return case_flood();
	if (argc == 2 && !strcmp(argv[1], "idle"))
		return case_idle();
	if (argc == 2 && !strcmp(argv[1], "resend"))
		return case_resend();
	fprintf(stderr, "usage: lc_tcp_lanes flood|idle|resend\n");
	return 2;
}
