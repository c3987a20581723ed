/*
 * tcp://'s receiver (D) against a raw P that speaks the wire format
 * (transport/tcp/wire.h) wrongly, over real sockets on 127.0.0.1 (port 0).
 *
 *     adversarial_tcpwire d_malformed  a raw P against a real D: bad magic,
 *                          version or type, WRITES before HELLO, HELLO flags
 *                          it does not know, a second HELLO, runs of 0 or 129
 *                          writes, a seq that skips, a plain write with a
 *                          stride, an oversized or overlapping strided write:
 *                          each lane is closed, frames_malformed counts it
 *                          once, no byte of D's region changes; a wrong or
 *                          missing token gets LC_ERR_AUTH; a lane half-closed
 *                          mid-table is closed without a malformed count.
 *     adversarial_tcpwire d_rejects    unknown region, out of range, not
 *                          granted, another room, a zero-length write: a
 *                          REJECT each with its code and seq, the counters,
 *                          the good write after them lands; then a sender
 *                          that does not read its REJECTs (51,200 of them
 *                          over a 4 KiB receive buffer): D pauses, loses none,
 *                          sends them in order once read.
 *     adversarial_tcpwire d_midframe   a grant revoked in the middle of a
 *                          payload (REJECT, detail revoked, nothing past the
 *                          revoke lands), a lane reset mid-payload (the room
 *                          revokes at once, the next lane works).
 *     adversarial_tcpwire d_caps       pending caps (per address and per
 *                          listener: the oldest silent connection goes,
 *                          conns_evicted_pending), tcp_lanes_max with busy
 *                          lanes (-EBUSY, lanes_refused_cap) and with quiet
 *                          ones (lanes_evicted), the handshake deadline, a
 *                          listener on [::1], a port already taken.
 * (A real P against a scripted raw D: adversarial_tcpp.c.)
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/tcp/wire.h"
#include "testutil.h"

#define REGION_LEN (1u << 20)
#define G_OFF (64u << 10)
#define G_LEN (512u << 10)
#define ROOM 21
#define CANARY 0x5a

static void sleep_ms(int ms)
{
	struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&t, NULL);
}

/* ---- D: a listener with one granted range ---- */

typedef struct target {
	lc_ctx_t *ctx;
	lc_listener_t *l;
	uint8_t *mem;
	lc_region_t *region;
	uint32_t rid;
	lc_token_t token;
	char url[128];
	int port;
} target_t;

static target_t T;

static void target_up(const char *knobs, const char *url)
{
	TU_OK(lc_ctx_create(NULL, &T.ctx));
	TU_OK(lc_ctx_config_set(T.ctx, "require_token", "1"));
	tu_knobs(T.ctx, knobs);
	TU_OK(lc_mem_alloc(REGION_LEN, 0, (void **)&T.mem));
	memset(T.mem, CANARY, REGION_LEN);
	TU_OK(lc_region_register(T.ctx, T.mem, REGION_LEN, &T.region));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(T.region, desc, sizeof desc);
	TU_OK(n);
	lc_region_desc_t d;
	TU_OK(lc_region_unpack(desc, (size_t)n, &d));
	T.rid = d.region_id;
	TU_OK(lc_token_issue(T.ctx, &T.token));
	TU_OK(lc_grant_issue(T.ctx, ROOM, T.region, G_OFF, G_LEN));
	TU_OK(lc_listener_create(T.ctx, url ? url : "tcp://127.0.0.1:0", &T.l));
	TU_OK(lc_listener_url(T.l, T.url, sizeof T.url));
	T.port = atoi(strrchr(T.url, ':') + 1);
}

static void target_down(void)
{
	lc_listener_destroy(T.l);
	lc_region_deregister(T.region);
	lc_ctx_destroy(T.ctx);
	lc_mem_free(T.mem);
	memset(&T, 0, sizeof T);
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

/* Bytes of D's region outside [from, to) that are not the canary. */
static size_t changed_outside(size_t from, size_t to)
{
	size_t n = 0;
	for (size_t i = 0; i < REGION_LEN; i++)
		if ((i < from || i >= to) && T.mem[i] != CANARY)
			n++;
	return n;
}

/* ---- the raw P ---- */

static int raw_connect_at(int port, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	TU_CHECK(fd >= 0, "socket: %s", strerror(errno));
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	TU_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
	return fd;
}

static int raw_connect(void)
{
	return raw_connect_at(T.port, 0);
}

/* Next control frame: 1 and *f, 0 if the connection closed, -1 on timeout. */
static int recv_ctrl(int fd, lc__tcp_ctrl_t *f, int timeout_ms)
{
	uint8_t b[LC__TCP_CTRL_LEN];
	int rc = tu_recv_exact(fd, b, sizeof b, timeout_ms);
	if (rc != 1)
		return rc;
	TU_CHECK(lc__tcp_prefix_ok(b), "D sent a malformed frame");
	lc__tcp_decode_ctrl(b, f);
	return 1;
}

/* Whether the peer closed fd (EOF or reset) within timeout_ms; bytes
 * before the close are read and dropped. */
static bool closed_within(int fd, int timeout_ms)
{
	uint64_t dl = tu_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(dl > tu_now_ms() ? dl - tu_now_ms() : 0);
		if (poll(&p, 1, left) <= 0)
			return false;
		uint8_t b[4096];
		ssize_t n = recv(fd, b, sizeof b, 0);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			return true;
	}
}

/* Whether fd is still open now (nothing pending that says otherwise). */
static bool still_open(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	return poll(&p, 1, 0) == 0;
}

static void send_hello(int fd, int32_t flags, const lc_token_t *tok)
{
	uint8_t b[LC__TCP_CTRL_LEN];
	lc__tcp_ctrl_t h = {.type = LC__TCP_HELLO, .status = flags};
	if (tok) {
		h.a = lc__get_u64(tok->bytes);
		h.b = lc__get_u64(tok->bytes + 8);
	}
	lc__tcp_encode_ctrl(b, &h);
	tu_send_all(fd, b, sizeof b);
}

/* HELLO with D's token: the HELLO_REPLY's status. */
static int handshake(int fd)
{
	send_hello(fd, LC__TCP_HELLO_TOKEN, &T.token);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 10000) == 1 && f.type == LC__TCP_HELLO_REPLY, "no HELLO_REPLY");
	return f.status;
}

static int lane(void)
{
	int fd = raw_connect();
	TU_CHECK(handshake(fd) == 0, "D refused the handshake");
	return fd;
}

/* A WRITES frame (header and table) of n descriptors into buf; its length. */
static size_t put_run(uint8_t *buf, uint64_t room, uint64_t seq, const lc__tcp_desc_t *d,
		      uint32_t n)
{
	lc__tcp_encode_run(buf, &(lc__tcp_run_hdr_t){.n = n, .room = room, .seq = seq});
	for (uint32_t i = 0; i < n; i++)
		lc__tcp_encode_desc(buf + LC__TCP_HDR_LEN + i * LC__TCP_DESC_LEN, &d[i]);
	return LC__TCP_HDR_LEN + (size_t)n * LC__TCP_DESC_LEN;
}

/* ---- d_malformed ---- */

typedef struct bad_stream {
	const char *what;
	bool after_hello;
	uint8_t bytes[LC__TCP_HDR_LEN + 2 * LC__TCP_DESC_LEN];
	size_t len;
} bad_stream_t;

static size_t one_desc_run(uint8_t *b, uint64_t seq, lc__tcp_desc_t d)
{
	return put_run(b, ROOM, seq, &d, 1);
}

static void case_d_malformed(void)
{
	target_up(NULL, NULL);
	bad_stream_t s[16];
	int ns = 0;
	uint8_t *b;

	memset(s, 0, sizeof s);
	b = s[ns].bytes; /* not our protocol at all */
	memcpy(b, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 24);
	s[ns].what = "http", s[ns++].len = 24;

	b = s[ns].bytes; /* version 1 */
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO});
	b[3] = 1;
	s[ns].what = "version 1", s[ns].after_hello = false, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* a type nobody defined */
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = 0x7f});
	s[ns].what = "type 0x7f", s[ns].after_hello = false, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* WRITES before any HELLO */
	s[ns].len =
		one_desc_run(b, 0, (lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 8});
	s[ns].what = "writes before hello", s[ns++].after_hello = false;

	b = s[ns].bytes; /* HELLO with a flag it does not know */
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO, .status = 2});
	s[ns].what = "hello flags 2", s[ns].after_hello = false, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* a second HELLO */
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = LC__TCP_HELLO});
	s[ns].what = "second hello", s[ns].after_hello = true, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* a receiver's frame from the sender */
	lc__tcp_encode_ctrl(b, &(lc__tcp_ctrl_t){.type = LC__TCP_ACK});
	s[ns].what = "ack from P", s[ns].after_hello = true, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* a run of 0 writes */
	lc__tcp_encode_run(b, &(lc__tcp_run_hdr_t){.n = 0, .room = ROOM});
	s[ns].what = "run of 0", s[ns].after_hello = true, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* a run of 129 writes */
	lc__tcp_encode_run(b, &(lc__tcp_run_hdr_t){.n = LC__TCP_MAX_RUN + 1, .room = ROOM});
	s[ns].what = "run of 129", s[ns].after_hello = true, s[ns++].len = LC__TCP_HDR_LEN;

	b = s[ns].bytes; /* the first run claims seq 5 */
	s[ns].len =
		one_desc_run(b, 5, (lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 8});
	s[ns].what = "seq 5 first", s[ns++].after_hello = true;

	b = s[ns].bytes; /* a plain write with a stride */
	s[ns].len = one_desc_run(
		b, 0,
		(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 8, .stride = 64});
	s[ns].what = "plain write with a stride", s[ns++].after_hello = true;

	b = s[ns].bytes; /* 2^45 bytes */
	s[ns].len = one_desc_run(
		b, 0, (lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 1ull << 45});
	s[ns].what = "2^45 bytes", s[ns++].after_hello = true;

	b = s[ns].bytes; /* count * length overflows */
	s[ns].len = one_desc_run(b, 0,
				 (lc__tcp_desc_t){.region = T.rid,
						  .count = 4,
						  .offset = G_OFF,
						  .length = 1ull << 62,
						  .stride = 1ull << 62});
	s[ns].what = "strided overflow", s[ns++].after_hello = true;

	b = s[ns].bytes; /* strided blocks that overlap */
	s[ns].len = one_desc_run(
		b, 0,
		(lc__tcp_desc_t){
			.region = T.rid, .count = 4, .offset = G_OFF, .length = 64, .stride = 16});
	s[ns].what = "overlapping blocks", s[ns++].after_hello = true;

	b = s[ns].bytes; /* more blocks than LC_WRITE_MAX_COUNT */
	s[ns].len = one_desc_run(b, 0,
				 (lc__tcp_desc_t){.region = T.rid,
						  .count = LC_WRITE_MAX_COUNT + 1,
						  .offset = G_OFF,
						  .length = 1,
						  .stride = 1});
	s[ns].what = "too many blocks", s[ns++].after_hello = true;

	b = s[ns].bytes; /* a stride whose span overflows */
	s[ns].len = one_desc_run(b, 0,
				 (lc__tcp_desc_t){.region = T.rid,
						  .count = 2,
						  .offset = G_OFF,
						  .length = 8,
						  .stride = UINT64_MAX - 4});
	s[ns].what = "span overflow", s[ns++].after_hello = true;

	for (int i = 0; i < ns; i++) {
		uint64_t before = counter(T.ctx, "frames_malformed");
		int fd = s[i].after_hello ? lane() : raw_connect();
		tu_send_all(fd, s[i].bytes, s[i].len);
		TU_CHECK(closed_within(fd, 10000), "%s: D kept the lane", s[i].what);
		close(fd);
		uint64_t after = counter(T.ctx, "frames_malformed");
		fprintf(stderr, "%s: closed, frames_malformed +%llu\n", s[i].what,
			(unsigned long long)(after - before));
		TU_CHECK(after == before + 1, "%s: frames_malformed +%llu", s[i].what,
			 (unsigned long long)(after - before));
	}

	/* A token D did not issue, and none at all: LC_ERR_AUTH, counted. */
	lc_token_t wrong = T.token;
	wrong.bytes[3] ^= 0x40;
	for (int k = 0; k < 2; k++) {
		uint64_t before = counter(T.ctx, "conns_rejected_auth");
		int fd = raw_connect();
		send_hello(fd, k ? 0 : LC__TCP_HELLO_TOKEN, k ? NULL : &wrong);
		lc__tcp_ctrl_t f;
		TU_CHECK(recv_ctrl(fd, &f, 10000) == 1 && f.type == LC__TCP_HELLO_REPLY &&
				 f.status == LC_ERR_AUTH,
			 "%s token: no LC_ERR_AUTH reply", k ? "no" : "a wrong");
		TU_CHECK(closed_within(fd, 10000), "D kept an unauthenticated lane");
		close(fd);
		TU_CHECK(counter(T.ctx, "conns_rejected_auth") == before + 1, "not counted");
	}

	/* Half-closed in the middle of a table: closed, not malformed. */
	uint64_t before = counter(T.ctx, "frames_malformed");
	int fd = lane();
	uint8_t run[LC__TCP_HDR_LEN + 2 * LC__TCP_DESC_LEN];
	lc__tcp_desc_t d[2] = {{.region = T.rid, .offset = G_OFF, .length = 8},
			       {.region = T.rid, .offset = G_OFF + 8, .length = 8}};
	put_run(run, ROOM, 0, d, 2);
	lc__put_u32(run + 4, 4); /* claims 4 descriptors; 2 follow */
	tu_send_all(fd, run, sizeof run);
	shutdown(fd, SHUT_WR);
	TU_CHECK(closed_within(fd, 10000), "D kept a half-closed lane");
	close(fd);
	TU_CHECK(counter(T.ctx, "frames_malformed") == before, "a half-close counted malformed");

	TU_CHECK(changed_outside(0, 0) == 0, "%zu bytes of D's region changed",
		 changed_outside(0, 0));
	target_down();
}

/* ---- d_rejects ---- */

typedef struct flood {
	int fd, frames;
	uint32_t rid;
	pthread_t th;
} flood_t;

#define FLOOD_FRAMES 400

/* Frames of 128 one-byte writes to a room D never granted. */
static void *flood_main(void *arg)
{
	flood_t *f = arg;
	static uint8_t buf[LC__TCP_HDR_LEN + LC__TCP_MAX_RUN * (LC__TCP_DESC_LEN + 1)];
	lc__tcp_desc_t d[LC__TCP_MAX_RUN];
	for (uint32_t i = 0; i < LC__TCP_MAX_RUN; i++)
		d[i] = (lc__tcp_desc_t){.region = f->rid, .offset = G_OFF + i, .length = 1};
	for (int k = 0; k < f->frames; k++) {
		size_t n = put_run(buf, 999, (uint64_t)k * LC__TCP_MAX_RUN, d, LC__TCP_MAX_RUN);
		memset(buf + n, 0xee, LC__TCP_MAX_RUN);
		tu_send_all(f->fd, buf, n + LC__TCP_MAX_RUN);
	}
	return NULL;
}

static void case_d_rejects(void)
{
	target_up(NULL, NULL);
	static const char *const names[] = {"writes_rejected_region", "writes_rejected_range",
					    "writes_rejected_grant"};
	uint64_t c0[3];
	for (int i = 0; i < 3; i++)
		c0[i] = counter(T.ctx, names[i]);

	int fd = lane();
	uint8_t buf[LC__TCP_HDR_LEN + 4 * LC__TCP_DESC_LEN + 4096];
	uint8_t junk[64];
	memset(junk, 0xee, sizeof junk);
	/* seq 0..3: unknown region, past the region's end, outside the grant,
	 * a zero-length write. */
	lc__tcp_desc_t d[4] = {
		{.region = T.rid + 1000, .offset = G_OFF, .length = 16},
		{.region = T.rid, .offset = REGION_LEN - 8, .length = 16},
		{.region = T.rid, .offset = 0, .length = 16},
		{.region = T.rid, .offset = G_OFF, .length = 0},
	};
	size_t n = put_run(buf, ROOM, 0, d, 4);
	tu_send_all(fd, buf, n);
	tu_send_all(fd, junk, 48);
	/* seq 4: a room with no grant, into ROOM's range. */
	n = put_run(buf, ROOM + 1, 4,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 32}, 1);
	tu_send_all(fd, buf, n);
	tu_send_all(fd, junk, 32);
	/* seq 5: a good write. */
	n = put_run(buf, ROOM, 5,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 4096}, 1);
	tu_fill(buf + n, 4096, 77);
	tu_send_all(fd, buf, n + 4096);

	static const int want[5] = {LC_ERR_REGION, LC_ERR_OUT_OF_REGION, LC_ERR_GRANT, 0,
				    LC_ERR_GRANT};
	bool seen[5] = {0};
	uint64_t acked = 0;
	while (acked < 6) {
		lc__tcp_ctrl_t f;
		TU_CHECK(recv_ctrl(fd, &f, 10000) == 1, "D stopped answering (acked %llu)",
			 (unsigned long long)acked);
		if (f.type == LC__TCP_ACK) {
			TU_CHECK(f.a >= acked && f.a <= 6, "ACK %llu", (unsigned long long)f.a);
			acked = f.a;
			continue;
		}
		TU_CHECK(f.type == LC__TCP_REJECT && f.a < 5 && want[f.a] &&
				 f.status == want[f.a] && f.b == LC__TCP_REJECT_CHECK,
			 "unexpected frame type %u status %d seq %llu", f.type, f.status,
			 (unsigned long long)f.a);
		seen[f.a] = true;
		acked = f.a + 1;
	}
	for (int i = 0; i < 5; i++)
		TU_CHECK(seen[i] == (want[i] != 0), "seq %d: REJECT %s", i,
			 seen[i] ? "sent" : "missing");
	TU_CHECK(tu_verify(T.mem + G_OFF, 4096, 77) < 0, "the good write did not land");
	TU_CHECK(changed_outside(G_OFF, G_OFF + 4096) == 0, "bytes outside the good write changed");
	static const uint64_t dc[3] = {1, 1, 2};
	for (int i = 0; i < 3; i++)
		TU_CHECK(counter(T.ctx, names[i]) == c0[i] + dc[i], "%s +%llu", names[i],
			 (unsigned long long)(counter(T.ctx, names[i]) - c0[i]));
	close(fd);

	/* A sender that does not read: D's REJECTs back up behind a 4 KiB
	 * receive buffer; D stops reading rather than drop one. */
	uint64_t g0 = counter(T.ctx, "writes_rejected_grant");
	flood_t fl = {.fd = raw_connect_at(T.port, 4096), .frames = FLOOD_FRAMES, .rid = T.rid};
	TU_CHECK(handshake(fl.fd) == 0, "handshake");
	TU_CHECK(pthread_create(&fl.th, NULL, flood_main, &fl) == 0, "thread");
	sleep_ms(500); /* let D fill its buffers (the test holds either way) */
	const uint64_t total = (uint64_t)FLOOD_FRAMES * LC__TCP_MAX_RUN;
	for (uint64_t seq = 0; seq < total; seq++) {
		lc__tcp_ctrl_t f;
		int rc = recv_ctrl(fl.fd, &f, 20000);
		TU_CHECK(rc == 1, "REJECT %llu of %llu: %s", (unsigned long long)seq,
			 (unsigned long long)total, rc ? "timeout" : "closed");
		TU_CHECK(f.type == LC__TCP_REJECT && f.a == seq && f.status == LC_ERR_GRANT,
			 "frame %llu: type %u seq %llu status %d", (unsigned long long)seq, f.type,
			 (unsigned long long)f.a, f.status);
	}
	pthread_join(fl.th, NULL);
	TU_CHECK(counter(T.ctx, "writes_rejected_grant") == g0 + total, "rejects not counted");
	/* The lane still works: a good write is acknowledged. */
	n = put_run(buf, ROOM, total,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF + 8192, .length = 4096}, 1);
	tu_fill(buf + n, 4096, 78);
	tu_send_all(fl.fd, buf, n + 4096);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fl.fd, &f, 10000) == 1 && f.type == LC__TCP_ACK && f.a == total + 1,
		 "no ACK after the flood");
	TU_CHECK(tu_verify(T.mem + G_OFF + 8192, 4096, 78) < 0, "the write after the flood");
	close(fl.fd);
	target_down();
}

/* ---- d_midframe ---- */

/* Wait until D's byte at off is no longer the canary. */
static void wait_landed(size_t off)
{
	uint64_t dl = tu_now_ms() + 10000;
	while (((volatile uint8_t *)T.mem)[off] == CANARY) {
		TU_CHECK(tu_now_ms() < dl, "byte %zu never landed", off);
		sleep_ms(2);
	}
}

static void case_d_midframe(void)
{
	target_up(NULL, NULL);
	enum { W = 256u << 10, PART = 64u << 10 };
	uint8_t *pay = malloc(W);
	tu_fill(pay, W, 5);
	uint8_t hdr[LC__TCP_HDR_LEN + LC__TCP_DESC_LEN];

	/* The grant revoked after 64 KiB of a 256 KiB write. */
	int fd = lane();
	size_t n = put_run(hdr, ROOM, 0,
			   &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = W}, 1);
	tu_send_all(fd, hdr, n);
	tu_send_all(fd, pay, PART);
	wait_landed(G_OFF + PART - 1);
	TU_CHECK(lc_grant_revoke(T.ctx, ROOM) >= 1, "nothing revoked");
	tu_send_all(fd, pay + PART, W - PART);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 10000) == 1, "no answer to a revoked write");
	fprintf(stderr, "revoked mid-write: type %u status %s seq %llu detail %llu\n", f.type,
		lc_err_name(f.status), (unsigned long long)f.a, (unsigned long long)f.b);
	TU_CHECK(f.type == LC__TCP_REJECT && f.status == LC_ERR_GRANT && f.a == 0 &&
			 f.b == LC__TCP_REJECT_REVOKED,
		 "not a revoked REJECT");
	TU_CHECK(changed_outside(G_OFF, G_OFF + PART) == 0, "bytes landed after the revoke");
	/* The lane goes on: seq 1 into the room granted again. */
	memset(T.mem, CANARY, REGION_LEN);
	TU_OK(lc_grant_issue(T.ctx, ROOM, T.region, G_OFF, G_LEN));
	n = put_run(hdr, ROOM, 1,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 4096}, 1);
	tu_send_all(fd, hdr, n);
	tu_send_all(fd, pay, 4096);
	TU_CHECK(recv_ctrl(fd, &f, 10000) == 1 && f.type == LC__TCP_ACK && f.a == 2,
		 "no ACK after the revoked write");
	close(fd);

	/* A reset after 64 KiB of the payload: nothing more lands, the room
	 * revokes (no bracket left open), another lane works. */
	memset(T.mem, CANARY, REGION_LEN);
	fd = lane();
	n = put_run(hdr, ROOM, 0,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF + 4096, .length = W}, 1);
	tu_send_all(fd, hdr, n);
	tu_send_all(fd, pay, PART);
	wait_landed(G_OFF + 4096 + PART - 1);
	struct linger lg = {1, 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(fd);
	sleep_ms(100);
	TU_CHECK(changed_outside(G_OFF + 4096, G_OFF + 4096 + PART) == 0,
		 "bytes past the reset landed");
	TU_CHECK(lc_grant_revoke(T.ctx, ROOM) >= 1, "the room did not revoke");
	TU_OK(lc_grant_issue(T.ctx, ROOM, T.region, G_OFF, G_LEN));
	fd = lane();
	n = put_run(hdr, ROOM, 0,
		    &(lc__tcp_desc_t){.region = T.rid, .offset = G_OFF, .length = 4096}, 1);
	tu_send_all(fd, hdr, n);
	tu_send_all(fd, pay, 4096);
	TU_CHECK(recv_ctrl(fd, &f, 10000) == 1 && f.type == LC__TCP_ACK && f.a == 1,
		 "a lane after the reset was not acknowledged");
	TU_CHECK(memcmp(T.mem + G_OFF, pay, 4096) == 0, "its bytes");
	close(fd);
	free(pay);
	target_down();
}

/* ---- d_caps ---- */

/* Silent connections past a pending cap: the oldest ones go. */
static void pending_cap(const char *knobs, int cap)
{
	enum { N = 6 };
	target_up(knobs, NULL);
	int fds[N];
	for (int i = 0; i < N; i++) {
		fds[i] = raw_connect();
		sleep_ms(50); /* accepted in this order */
	}
	uint64_t dl = tu_now_ms() + 10000;
	while (counter(T.ctx, "conns_evicted_pending") < (uint64_t)(N - cap)) {
		TU_CHECK(tu_now_ms() < dl, "%s: %llu evicted", knobs,
			 (unsigned long long)counter(T.ctx, "conns_evicted_pending"));
		sleep_ms(10);
	}
	for (int i = 0; i < N - cap; i++)
		TU_CHECK(closed_within(fds[i], 10000), "%s: connection %d kept", knobs, i);
	sleep_ms(100);
	for (int i = N - cap; i < N; i++)
		TU_CHECK(still_open(fds[i]), "%s: connection %d closed", knobs, i);
	TU_CHECK(counter(T.ctx, "conns_evicted_pending") == (uint64_t)(N - cap), "%s: %llu evicted",
		 knobs, (unsigned long long)counter(T.ctx, "conns_evicted_pending"));
	/* A real handshake still gets through. */
	int fd = lane();
	close(fd);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	target_down();
}

static void case_d_caps(void)
{
	pending_cap("tcp_pending_per_addr=2", 2);
	pending_cap("tcp_pending_max=3", 3);

	/* tcp_lanes_max=2, both lanes in the middle of a write: a third is
	 * refused with -EBUSY. */
	target_up("tcp_lanes_max=2", NULL);
	int busy[2];
	uint8_t hdr[LC__TCP_HDR_LEN + LC__TCP_DESC_LEN];
	for (int i = 0; i < 2; i++) {
		busy[i] = lane();
		size_t n = put_run(hdr, ROOM, 0,
				   &(lc__tcp_desc_t){.region = T.rid,
						     .offset = G_OFF + (uint64_t)i * 8192,
						     .length = 8192},
				   1);
		tu_send_all(busy[i], hdr, n);
		tu_send_all(busy[i], hdr, 16); /* 16 of its 8,192 payload bytes */
	}
	sleep_ms(1500); /* both quiet past the eviction bound, but busy */
	int fd = raw_connect();
	TU_CHECK(handshake(fd) == -EBUSY, "a lane past tcp_lanes_max was admitted");
	TU_CHECK(closed_within(fd, 10000), "the refused lane stayed");
	close(fd);
	TU_CHECK(counter(T.ctx, "lanes_refused_cap") == 1, "lanes_refused_cap");
	for (int i = 0; i < 2; i++)
		close(busy[i]);
	target_down();

	/* The same with two quiet lanes: the least recently active goes. */
	target_up("tcp_lanes_max=2", NULL);
	int quiet[2] = {lane(), -1};
	sleep_ms(50);
	quiet[1] = lane();
	sleep_ms(1500);
	fd = lane();
	TU_CHECK(closed_within(quiet[0], 10000), "the oldest quiet lane was not closed");
	TU_CHECK(still_open(quiet[1]), "the newer quiet lane was closed");
	TU_CHECK(counter(T.ctx, "lanes_evicted") == 1, "lanes_evicted");
	close(fd);
	close(quiet[0]);
	close(quiet[1]);
	target_down();

	/* No HELLO within connect_timeout_ms: closed. */
	target_up("connect_timeout_ms=300", NULL);
	fd = raw_connect();
	TU_CHECK(closed_within(fd, 10000), "a silent connection outlived the handshake deadline");
	close(fd);
	/* A second listener on the same port: refused at create. */
	char url[64];
	snprintf(url, sizeof url, "tcp://127.0.0.1:%d", T.port);
	lc_listener_t *l2 = NULL;
	int rc = lc_listener_create(T.ctx, url, &l2);
	fprintf(stderr, "a second listener on %s: %s\n", url, lc_err_name(rc));
	TU_CHECK(rc < 0 && !l2, "a second listener on a taken port");
	target_down();

	/* A listener on [::1] and a real P writing to it. */
	int s6 = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	bool v6 = s6 >= 0 && bind(s6, (struct sockaddr *)&a6, sizeof a6) == 0;
	if (s6 >= 0)
		close(s6);
	if (!v6) {
		fprintf(stderr, "no IPv6 loopback here: [::1] part skipped\n");
		return;
	}
	target_up(NULL, "tcp://[::1]:0");
	TU_CHECK(strstr(T.url, "[::1]"), "url %s", T.url);
	lc_ctx_t *p;
	TU_OK(lc_ctx_create(NULL, &p));
	uint8_t *src = malloc(4096);
	tu_fill(src, 4096, 9);
	lc_region_t *sr;
	TU_OK(lc_region_register(p, src, 4096, &sr));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(p, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = T.token, .has_token = 1};
	lc_conn_t *conn;
	TU_OK(lc_conn_create(p, T.url, &cp, &conn));
	uint8_t desc[LC_REGION_DESC_MAX];
	int dn = lc_region_pack(T.region, desc, sizeof desc);
	uint32_t rid;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)dn, &rid));
	lc_write_t w = {.local = src, .remote_region = rid, .remote_offset = G_OFF, .length = 4096};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, &w, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 20000);
	TU_CHECK(c.status == 0, "over [::1]: %s (%s)", lc_err_name(c.status), c.reason);
	TU_CHECK(memcmp(T.mem + G_OFF, src, 4096) == 0, "bytes over [::1]");
	lc_conn_destroy(conn);
	lc_cq_destroy(cq);
	lc_region_deregister(sr);
	lc_ctx_destroy(p);
	free(src);
	target_down();
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_tcpwire <case>\n");
		return 2;
	}
	tu_watchdog(170);
	signal(SIGPIPE, SIG_IGN);
	if (!tu_transport_built("tcp")) {
		fprintf(stderr, "skip: no tcp transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "d_malformed"))
		case_d_malformed();
	else if (!strcmp(n, "d_rejects"))
		case_d_rejects();
	else if (!strcmp(n, "d_midframe"))
		case_d_midframe();
	else if (!strcmp(n, "d_caps"))
		case_d_caps();
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_tcpwire %s: ok\n", n);
	return 0;
}
