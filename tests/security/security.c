/*
 * Security tests (issue 8): what an attacker who can reach a port can and
 * cannot do. Real sockets only: a raw TCP client speaking the tcp:// wire
 * format (transport/tcp/wire.h) with forged tokens and forged frames against a real
 * listener, HTTP requests against a real bootstrap server, and real
 * ZeroMQ sockets against CURVE-protected inboxes.
 *
 *     lc_security <case>     (lc_security list: the cases)
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "transport/tcp/wire.h"
#include "testutil.h"

#define REGION_LEN (1u << 20)
#define G_OFF (256u << 10)
#define G_LEN (256u << 10)
#define ROOM 7
#define CANARY 0x3c

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ==== the tcp:// data plane: a real listener, a raw client ==== */

typedef struct target {
	lc_ctx_t *ctx;
	lc_listener_t *l;
	uint8_t *mem;
	lc_region_t *region;
	lc_token_t token;
	int port;
} target_t;

static target_t T;

static void target_up(void)
{
	TU_OK(lc_ctx_create(NULL, &T.ctx));
	TU_OK(lc_ctx_config_set(T.ctx, "require_token", "1"));
	TU_OK(lc_ctx_config_set(T.ctx, "connect_timeout_ms", "2000"));
	TU_OK(lc_mem_alloc(REGION_LEN, 0, (void **)&T.mem));
	memset(T.mem, CANARY, REGION_LEN);
	TU_OK(lc_region_register(T.ctx, T.mem, REGION_LEN, &T.region));
	TU_OK(lc_token_issue(T.ctx, &T.token));
	TU_OK(lc_grant_issue(T.ctx, ROOM, T.region, G_OFF, G_LEN));
	int rc = lc_listener_create(T.ctx, "tcp://127.0.0.1:0", &T.l);
	if (rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: no tcp transport\n");
		exit(TU_SKIP);
	}
	TU_OK(rc);
	char url[128];
	TU_OK(lc_listener_url(T.l, url, sizeof url));
	T.port = atoi(strrchr(url, ':') + 1);
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

/* Bytes outside [lo, hi) of the region that are not the canary. */
static size_t written_outside(uint64_t lo, uint64_t hi)
{
	size_t n = 0;
	for (size_t i = 0; i < REGION_LEN; i++)
		if ((i < lo || i >= hi) && T.mem[i] != CANARY)
			n++;
	return n;
}

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)T.port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
		 strerror(errno));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	/* The receiver may close first; that is the expected outcome then. */
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

static void send_hello(int fd, const lc_token_t *tok)
{
	uint8_t f[LC__TCP_CTRL_LEN];
	lc__tcp_ctrl_t h = {.type = LC__TCP_HELLO,
			    .status = tok ? LC__TCP_HELLO_TOKEN : 0,
			    .a = tok ? lc__get_u64(tok->bytes) : 0,
			    .b = tok ? lc__get_u64(tok->bytes + 8) : 0};
	lc__tcp_encode_ctrl(f, &h);
	send_all(fd, f, sizeof f);
}

typedef struct wdesc {
	uint32_t region;
	uint64_t offset, length;
	uint32_t count;  /* > 1: strided, blocks of length bytes stride apart */
	uint64_t stride;
} wdesc_t;

/* One WRITES frame with n writes and their payloads (byte `fill`). */
static void send_run(int fd, uint64_t room, uint64_t seq, const wdesc_t *w, uint32_t n,
		     uint8_t fill)
{
	size_t len = LC__TCP_HDR_LEN + (size_t)n * LC__TCP_DESC_LEN;
	uint8_t *f = calloc(1, len);
	lc__tcp_run_hdr_t h = {.n = n, .room = room, .seq = seq};
	lc__tcp_encode_run(f, &h);
	for (uint32_t i = 0; i < n; i++) {
		lc__tcp_desc_t d = {.region = w[i].region,
				    .count = w[i].count,
				    .offset = w[i].offset,
				    .length = w[i].length,
				    .stride = w[i].stride};
		lc__tcp_encode_desc(f + LC__TCP_HDR_LEN + i * LC__TCP_DESC_LEN, &d);
	}
	send_all(fd, f, len);
	free(f);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t left = w[i].length < (1u << 24) ? w[i].length : 0;
		uint8_t buf[4096];
		memset(buf, fill, sizeof buf);
		while (left) {
			size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
			send_all(fd, buf, k);
			left -= k;
		}
	}
}

/* Next control frame from the receiver: 1 and *f, 0 if the connection
 * closed, -1 on timeout. */
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

/* Wait until the receiver closes the connection (nothing else may come
 * but acknowledgements and rejections). */
static bool closed_by_peer(int fd, int timeout_ms)
{
	lc__tcp_ctrl_t f;
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	while (now_ms() < dl) {
		int r = recv_ctrl(fd, &f, (int)(dl - now_ms()));
		if (r == 0)
			return true;
		if (r < 0)
			return false;
		TU_CHECK(f.type == LC__TCP_ACK || f.type == LC__TCP_REJECT ||
				 f.type == LC__TCP_HELLO_REPLY,
			 "unexpected frame type %u", f.type);
	}
	return false;
}

/* A lane that presented `tok`: the receiver's HELLO_REPLY status. */
static int handshake(int fd, const lc_token_t *tok)
{
	send_hello(fd, tok);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 3000) == 1 && f.type == LC__TCP_HELLO_REPLY, "no HELLO_REPLY");
	return f.status;
}

static int case_tcp_token(void)
{
	target_up();
	lc_token_t forged, revoked;
	for (int i = 0; i < LC_TOKEN_LEN; i++)
		forged.bytes[i] = (uint8_t)(T.token.bytes[i] ^ (i == 5 ? 1 : 0)); /* one bit off */
	TU_OK(lc_token_issue(T.ctx, &revoked));
	TU_OK(lc_token_revoke(T.ctx, &revoked));
	const struct {
		const char *what;
		const lc_token_t *tok;
	} cases[] = {{"no token", NULL},
		     {"forged token (one bit off)", &forged},
		     {"revoked token", &revoked}};
	uint64_t rej0 = counter("conns_rejected_auth");
	for (size_t k = 0; k < LC__ARRAY_SIZE(cases); k++) {
		int fd = raw_connect();
		int st = handshake(fd, cases[k].tok);
		TU_CHECK(st == LC_ERR_AUTH, "%s: HELLO_REPLY status %d", cases[k].what, st);
		/* Writes sent anyway, straight into the granted range, land nothing. */
		wdesc_t w = {.region = lc_region_id(T.region), .offset = G_OFF, .length = 4096};
		send_run(fd, ROOM, 0, &w, 1, 0xEE);
		TU_CHECK(closed_by_peer(fd, 3000), "%s: connection not closed", cases[k].what);
		close(fd);
		fprintf(stderr, "ok: %s refused (LC_ERR_AUTH), connection closed\n", cases[k].what);
	}
	TU_CHECK(written_outside(0, 0) == 0, "bytes landed without a valid token");
	TU_CHECK(counter("conns_rejected_auth") - rej0 == LC__ARRAY_SIZE(cases),
		 "conns_rejected_auth %llu",
		 (unsigned long long)(counter("conns_rejected_auth") - rej0));
	/* Frames before HELLO: a malformed lane, closed. */
	uint64_t mal0 = counter("frames_malformed");
	int fd = raw_connect();
	wdesc_t w = {.region = lc_region_id(T.region), .offset = G_OFF, .length = 64};
	send_run(fd, ROOM, 0, &w, 1, 0xEE);
	TU_CHECK(closed_by_peer(fd, 3000), "WRITES before HELLO: not closed");
	close(fd);
	TU_CHECK(counter("frames_malformed") == mal0 + 1, "frames_malformed not counted");
	/* A silent client is closed after connect_timeout_ms (2 s here). */
	fd = raw_connect();
	uint64_t t0 = now_ms();
	TU_CHECK(closed_by_peer(fd, 6000), "a client that never says HELLO stays connected");
	fprintf(stderr, "ok: a silent client was closed after %llu ms\n",
		(unsigned long long)(now_ms() - t0));
	close(fd);
	/* The real token works (so the refusals above were for the token). */
	fd = raw_connect();
	TU_CHECK(handshake(fd, &T.token) == 0, "the issued token is refused");
	send_run(fd, ROOM, 0, &w, 1, 0x11);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 3000) == 1 && f.type == LC__TCP_ACK && f.a == 1, "no ACK");
	TU_CHECK(T.mem[G_OFF] == 0x11 && T.mem[G_OFF + 63] == 0x11, "write did not land");
	close(fd);
	target_down();
	return 0;
}

/* Writes that must be rejected, each answered by a REJECT with its code;
 * not one byte of them lands. */
static int case_tcp_outside(void)
{
	target_up();
	uint32_t reg = lc_region_id(T.region);
	const struct {
		const char *what;
		uint64_t room;
		wdesc_t w;
		int code;
	} cases[] = {
		{"unknown region", ROOM, {reg + 100, G_OFF, 4096, 0, 0}, LC_ERR_REGION},
		{"past the region's end",
		 ROOM,
		 {reg, REGION_LEN - 100, 4096, 0, 0},
		 LC_ERR_OUT_OF_REGION},
		{"offset + length wraps around",
		 ROOM,
		 {reg, UINT64_MAX - 15, 32, 0, 0},
		 LC_ERR_OUT_OF_REGION},
		{"in the region, before the grant", ROOM, {reg, 0, 4096, 0, 0}, LC_ERR_GRANT},
		{"straddles the grant's end", ROOM, {reg, G_OFF + G_LEN - 16, 32, 0, 0}, LC_ERR_GRANT},
		{"straddles the grant's start", ROOM, {reg, G_OFF - 1, 2, 0, 0}, LC_ERR_GRANT},
		{"granted range, another room", ROOM + 1, {reg, G_OFF, 4096, 0, 0}, LC_ERR_GRANT},
	};
	int fd = raw_connect();
	TU_CHECK(handshake(fd, &T.token) == 0, "token refused");
	uint64_t seq = 0;
	for (size_t k = 0; k < LC__ARRAY_SIZE(cases); k++) {
		send_run(fd, cases[k].room, seq, &cases[k].w, 1, 0xEE);
		lc__tcp_ctrl_t f;
		TU_CHECK(recv_ctrl(fd, &f, 3000) == 1, "%s: no answer", cases[k].what);
		TU_CHECK(f.type == LC__TCP_REJECT && f.status == cases[k].code && f.a == seq,
			 "%s: frame %u status %d (%s) seq %llu", cases[k].what, f.type, f.status,
			 lc_err_name(f.status), (unsigned long long)f.a);
		fprintf(stderr, "ok: %s -> REJECT %s\n", cases[k].what, lc_err_name(f.status));
		seq++;
	}
	/* A run mixing good and bad writes: the good ones land, the bad not. */
	wdesc_t mix[3] = {{reg, G_OFF, 64, 0, 0}, {reg, G_OFF - 64, 64, 0, 0}, {reg, G_OFF + 64, 64, 0, 0}};
	send_run(fd, ROOM, seq, mix, 3, 0x22);
	bool rejected = false, acked = false;
	for (lc__tcp_ctrl_t f; (!rejected || !acked) && recv_ctrl(fd, &f, 3000) == 1;) {
		if (f.type == LC__TCP_REJECT && f.a == seq + 1 && f.status == LC_ERR_GRANT)
			rejected = true;
		if (f.type == LC__TCP_ACK && f.a == seq + 3)
			acked = true;
	}
	TU_CHECK(rejected && acked, "mixed run: rejected %d acked %d", rejected, acked);
	TU_CHECK(T.mem[G_OFF] == 0x22 && T.mem[G_OFF + 127] == 0x22, "good writes did not land");
	TU_CHECK(written_outside(G_OFF, G_OFF + G_LEN) == 0, "bytes landed outside the grant");
	TU_CHECK(counter("writes_rejected_region") >= 1 && counter("writes_rejected_range") >= 2 &&
			 counter("writes_rejected_grant") >= 5,
		 "rejections not counted");
	close(fd);
	target_down();
	return 0;
}

/* D cancels a room (its grant is revoked): later writes for it are
 * rejected and land nothing, on a lane that was already writing it. */
static int case_tcp_cancelled(void)
{
	target_up();
	uint32_t reg = lc_region_id(T.region);
	int fd = raw_connect();
	TU_CHECK(handshake(fd, &T.token) == 0, "token refused");
	wdesc_t w = {reg, G_OFF, 8192, 0, 0};
	send_run(fd, ROOM, 0, &w, 1, 0x33);
	lc__tcp_ctrl_t f;
	TU_CHECK(recv_ctrl(fd, &f, 3000) == 1 && f.type == LC__TCP_ACK, "first write not acked");
	TU_CHECK(lc_grant_revoke(T.ctx, ROOM) >= 1, "revoke");
	uint8_t *snap = malloc(REGION_LEN);
	memcpy(snap, T.mem, REGION_LEN);
	wdesc_t late[2] = {{reg, G_OFF, 8192, 0, 0}, {reg, G_OFF + 8192, 8192, 0, 0}};
	send_run(fd, ROOM, 1, late, 2, 0x44);
	int rejects = 0;
	while (rejects < 2 && recv_ctrl(fd, &f, 3000) == 1)
		if (f.type == LC__TCP_REJECT) {
			TU_CHECK(f.status == LC_ERR_GRANT, "code %s", lc_err_name(f.status));
			rejects++;
		}
	TU_CHECK(rejects == 2, "late writes not rejected (%d)", rejects);
	TU_CHECK(!memcmp(snap, T.mem, REGION_LEN), "a write landed after the room was cancelled");
	fprintf(stderr, "ok: writes for a cancelled room rejected (LC_ERR_GRANT), memory intact\n");
	free(snap);
	close(fd);
	target_down();
	return 0;
}

/* Forged frames: each closes its lane, is counted, lands nothing. */
static int case_tcp_forged(void)
{
	target_up();
	uint32_t reg = lc_region_id(T.region);
	enum {
		BAD_MAGIC,
		BAD_VERSION,
		BAD_TYPE,
		SECOND_HELLO,
		CTRL_AS_DATA,
		SEQ_GAP,
		N_ZERO,
		N_TOO_MANY,
		PLAIN_STRIDE,
		HUGE_LENGTH,
		STRIDED_MANY,
		STRIDED_OVERLAP,
		STRIDED_WRAP,
		STRIDED_HUGE,
		NCASES
	};
	const char *what[NCASES] = {"wrong magic",
				    "version 1 (no strided descriptors)",
				    "unknown type",
				    "second HELLO",
				    "ACK sent by P",
				    "seq out of order",
				    "run of 0 writes",
				    "run of 129 writes",
				    "stride on a plain write",
				    "length over 2^44",
				    "strided: count over LC_WRITE_MAX_COUNT",
				    "strided: stride under the block length",
				    "strided: span overflowing 2^64",
				    "strided: payload over 2^44"};
	for (int k = 0; k < NCASES; k++) {
		uint64_t mal0 = counter("frames_malformed"), range0 = counter("writes_rejected_range");
		int fd = raw_connect();
		TU_CHECK(handshake(fd, &T.token) == 0, "token refused");
		uint8_t f[LC__TCP_HDR_LEN + LC__TCP_DESC_LEN] = {0};
		lc__tcp_run_hdr_t h = {.n = 1, .room = ROOM, .seq = 0};
		lc__tcp_desc_t d = {.region = reg, .offset = G_OFF, .length = 16};
		wdesc_t w = {reg, G_OFF, 16, 0, 0};
		switch (k) {
		case BAD_MAGIC:
		case BAD_VERSION:
		case BAD_TYPE:
			lc__tcp_encode_run(f, &h);
			lc__tcp_encode_desc(f + LC__TCP_HDR_LEN, &d);
			if (k == BAD_MAGIC)
				f[0] ^= 0xff;
			else if (k == BAD_VERSION)
				f[3] = 1;
			else
				f[2] = 0x7f;
			send_all(fd, f, sizeof f);
			break;
		case SECOND_HELLO:
			send_hello(fd, &T.token);
			break;
		case CTRL_AS_DATA:
			lc__tcp_encode_ctrl(f, &(lc__tcp_ctrl_t){.type = LC__TCP_ACK, .a = 5});
			send_all(fd, f, LC__TCP_CTRL_LEN);
			break;
		case SEQ_GAP:
			send_run(fd, ROOM, 3, &w, 1, 0x55);
			break;
		case N_ZERO:
		case N_TOO_MANY:
			h.n = k == N_ZERO ? 0 : LC__TCP_MAX_RUN + 1;
			lc__tcp_encode_run(f, &h);
			send_all(fd, f, LC__TCP_HDR_LEN);
			break;
		case PLAIN_STRIDE:
			w.stride = 64;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			break;
		case STRIDED_MANY:
			w.count = LC_WRITE_MAX_COUNT + 1;
			w.stride = 16;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			break;
		case STRIDED_OVERLAP:
			w.count = 4;
			w.stride = 8;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			break;
		case STRIDED_WRAP:
			w.count = 4;
			w.stride = UINT64_MAX / 2;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			break;
		case STRIDED_HUGE:
			w.count = 2; /* each block under 2^44, both over it */
			w.length = (1ull << 43) + 1;
			w.stride = 1ull << 44;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			send_all(fd, "xxxxxxxxxxxxxxxx", 16);
			break;
		case HUGE_LENGTH:
			w.length = (1ull << 44) + 1;
			send_run(fd, ROOM, 0, &w, 1, 0x55);
			send_all(fd, "xxxxxxxxxxxxxxxx", 16);
			break;
		}
		TU_CHECK(closed_by_peer(fd, 3000), "%s: lane not closed", what[k]);
		close(fd);
		TU_CHECK(counter("frames_malformed") == mal0 + 1, "%s: not counted", what[k]);
		/* A strided shape breaking the rules is also counted as such. */
		bool shape = k == STRIDED_MANY || k == STRIDED_OVERLAP || k == STRIDED_WRAP;
		TU_CHECK(!shape || counter("writes_rejected_range") == range0 + 1,
			 "%s: writes_rejected_range not counted", what[k]);
		fprintf(stderr, "ok: %s -> lane closed, counted\n", what[k]);
	}
	TU_CHECK(written_outside(0, 0) == 0, "a forged frame landed bytes");
	target_down();
	return 0;
}

/* ==== the bootstrap server over real HTTP ==== */

static const char *PUT_BODY =
	"{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
	"\"rank_port\":5555,\"engine_rank\":0}";

static int put(const char *addr, const char *body, size_t len, const char *auth)
{
	char url[128], *resp = NULL;
	size_t rl = 0;
	snprintf(url, sizeof url, "http://%s/route", addr);
	int code = lc__http_request("PUT", url, body, len, auth, 3000, &resp, &rl);
	free(resp);
	return code;
}

static int case_http_bad_input(void)
{
	lc_bootstrap_t *b;
	char addr[64];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	int rc = lc_bootstrap_start(&bp, &b);
	if (rc == LC_ENOTSUP)
		return TU_SKIP;
	TU_OK(rc);
	lc_bootstrap_addr(b, addr, sizeof addr);
	const char *bad[] = {
		"{{{",
		"{\"role\":\"Prefill\"",
		"[1,2,3]",
		"\"just a string\"",
		"{\"role\":\"Prefill\",\"world_size\":\"1\"}",
		"{\"role\":\"Prefill\",\"world_size\":1e400}",
		"{\"role\":\"Decode\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":\"x\","
		"\"rank_port\":1,\"engine_rank\":0}",
		"{\"a\":" /* truncated */};
	for (size_t k = 0; k < LC__ARRAY_SIZE(bad); k++) {
		int code = put(addr, bad[k], strlen(bad[k]), NULL);
		TU_CHECK(code == 400, "malformed body %zu: HTTP %d", k, code);
	}
	/* Deeply nested JSON: refused (json-c depth limit), no stack blowup. */
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 1);
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	int code = put(addr, deep, 60000, NULL); /* under the size limit */
	TU_CHECK(code == 400, "deeply nested JSON: HTTP %d", code);
	/* Oversize bodies: declared, and streamed without a length. */
	size_t big = LC__BS_BODY_MAX + 1;
	char *body = malloc(big);
	memset(body, ' ', big);
	memcpy(body, PUT_BODY, strlen(PUT_BODY));
	code = put(addr, body, big, NULL);
	TU_CHECK(code == 413, "oversize body: HTTP %d", code);
	code = put(addr, deep, 2 * depth, NULL);
	TU_CHECK(code == 413, "oversize nested body: HTTP %d", code);
	free(body);
	free(deep);
	/* Query strings. */
	const char *q[] = {"engine_rank=x&target_dp_group=0", "engine_rank=-5&target_dp_group=0",
			   "engine_rank=99999999999999999999&target_dp_group=0",
			   "target_dp_group=0"};
	for (size_t k = 0; k < LC__ARRAY_SIZE(q); k++) {
		char url[256], *resp = NULL;
		size_t rl;
		snprintf(url, sizeof url, "http://%s/route?%s", addr, q[k]);
		code = lc__http_request("GET", url, NULL, 0, NULL, 3000, &resp, &rl);
		free(resp);
		TU_CHECK(code == 400 || code == 404, "query %s: HTTP %d", q[k], code);
	}
	/* And it still serves. */
	TU_CHECK(put(addr, PUT_BODY, strlen(PUT_BODY), NULL) == 200, "valid PUT refused");
	fprintf(stderr, "ok: malformed JSON 400, oversize 413, bad queries 4xx, server alive\n");
	lc_bootstrap_stop(b);
	return 0;
}

static int case_http_secret(void)
{
	char dir[] = "/tmp/lc-sec-XXXXXX";
	TU_CHECK(mkdtemp(dir), "mkdtemp");
	const char *ways[2] = {"parameter", "LAYERCAKE_SECRET_DIR/bootstrap.secret"};
	int rc = 0;
	for (int way = 0; way < 2 && !rc; way++) {
		lc_bootstrap_t *b;
		char addr[64], path[256];
		lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
		if (way == 0) {
			bp.secret = "s3cret-token";
		} else {
			snprintf(path, sizeof path, "%s/bootstrap.secret", dir);
			FILE *f = fopen(path, "w");
			fprintf(f, "s3cret-token\nsecond line ignored\n");
			fclose(f);
			chmod(path, 0600);
			setenv("LAYERCAKE_SECRET_DIR", dir, 1);
		}
		int r = lc_bootstrap_start(&bp, &b);
		if (r == LC_ENOTSUP) {
			rc = TU_SKIP;
			break;
		}
		TU_OK(r);
		lc_bootstrap_addr(b, addr, sizeof addr);
		size_t n = strlen(PUT_BODY);
		TU_CHECK(put(addr, PUT_BODY, n, NULL) == 401, "%s: PUT without a secret",
			 ways[way]);
		TU_CHECK(put(addr, PUT_BODY, n, "wrong") == 401, "%s: wrong secret", ways[way]);
		TU_CHECK(put(addr, PUT_BODY, n, "s3cret-toke") == 401, "%s: prefix", ways[way]);
		TU_CHECK(put(addr, PUT_BODY, n, "s3cret-token2") == 401, "%s: longer", ways[way]);
		TU_CHECK(put(addr, PUT_BODY, n, "") == 401, "%s: empty", ways[way]);
		/* Unauthenticated requests do not change the rank table. */
		char url[128], *resp = NULL;
		size_t rl;
		snprintf(url, sizeof url, "http://%s/route?engine_rank=-1&target_dp_group=-1",
			 addr);
		TU_CHECK(lc__http_request("GET", url, NULL, 0, NULL, 3000, &resp, &rl) == 404,
			 "%s: a refused PUT registered something", ways[way]);
		free(resp);
		TU_CHECK(put(addr, PUT_BODY, n, "s3cret-token") == 200, "%s: right secret",
			 ways[way]);
		fprintf(stderr, "ok: secret from the %s: unauthenticated PUTs 401\n", ways[way]);
		lc_bootstrap_stop(b);
		unsetenv("LAYERCAKE_SECRET_DIR");
	}
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd)) {
	}
	return rc;
}

/* ==== CURVE on the control plane, real ZeroMQ sockets ==== */

static char keydir[64];

static void write_line(const char *name, const char *text)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", keydir, name);
	FILE *f = fopen(path, "w");
	TU_CHECK(f, "%s", path);
	fprintf(f, "%s\n", text);
	fclose(f);
}

static void cleanup_keydir(void)
{
	if (keydir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", keydir);
		if (system(cmd)) {
		}
	}
}

/* The key directory of this process (removed at exit). */
static void make_keydir(void)
{
	snprintf(keydir, sizeof keydir, "/tmp/lc-curve-XXXXXX");
	TU_CHECK(mkdtemp(keydir), "mkdtemp");
	atexit(cleanup_keydir);
}

/* A P rank through the public API with CURVE on: keypair pub/sec, one
 * authorized client key, its own bootstrap server (secret bs_secret or
 * none). */
typedef struct curve_p {
	lc_bootstrap_t *b;
	lc_ctx_t *ctx;
	uint8_t *mem;
	lc_region_t *reg;
	lc_layout_t *layout;
	lc_prefill_t *pf;
	char addr[64], ep[128];
} curve_p_t;

static int curve_p_start(curve_p_t *P, const char *pub, const char *sec, const char *authorized,
			 const char *bs_secret)
{
	memset(P, 0, sizeof *P);
	write_line("curve.public", pub);
	write_line("curve.secret", sec);
	write_line("authorized_keys", authorized);
	setenv("LAYERCAKE_SECRET_DIR", keydir, 1);
	lc_bootstrap_params_t bp = {
		.size = sizeof bp, .host = "127.0.0.1", .port = 0, .secret = bs_secret};
	int rc = lc_bootstrap_start(&bp, &P->b);
	if (rc == LC_ENOTSUP)
		return TU_SKIP;
	TU_OK(rc);
	lc_bootstrap_addr(P->b, P->addr, sizeof P->addr);
	TU_OK(lc_ctx_create(NULL, &P->ctx));
	TU_OK(lc_mem_alloc(1 << 21, 0, (void **)&P->mem));
	TU_OK(lc_region_register(P->ctx, P->mem, 1 << 21, &P->reg));
	void *bases[2] = {P->mem, P->mem + (1 << 20)};
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = 1,
				 .pages = 256,
				 .item_len = {4096, 4096},
				 .bases = bases};
	TU_OK(lc_layout_build(&lp, &P->layout));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = P->layout,
				  .bootstrap = P->addr,
				  .world_size = 1,
				  .dp_size = 1,
				  .bootstrap_secret = bs_secret};
	TU_OK(lc_prefill_create(P->ctx, &pp, &P->pf));
	TU_OK(lc_prefill_endpoint(P->pf, P->ep, sizeof P->ep));
	return 0;
}

static void curve_p_stop(curve_p_t *P)
{
	lc_prefill_destroy(P->pf);
	lc_layout_destroy(P->layout);
	lc_region_deregister(P->reg);
	lc_ctx_destroy(P->ctx);
	lc_mem_free(P->mem);
	lc_bootstrap_stop(P->b);
}

/* Send one message from a raw PUSH with the given CURVE client keys (NULL:
 * plain, no CURVE) to `ep`; returns whether the inbox received it. */
static bool deliver(lc__pull_t *in, const char *ep, const char *server_pub, const char *cpub,
		    const char *csec)
{
	void *zc = zmq_ctx_new();
	void *tx = zmq_socket(zc, ZMQ_PUSH);
	int linger = 0;
	zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
	if (cpub) {
		zmq_setsockopt(tx, ZMQ_CURVE_SERVERKEY, server_pub, 40);
		zmq_setsockopt(tx, ZMQ_CURVE_PUBLICKEY, cpub, 40);
		zmq_setsockopt(tx, ZMQ_CURVE_SECRETKEY, csec, 40);
	}
	TU_CHECK(zmq_connect(tx, ep) == 0, "connect");
	int timeout = 500;
	zmq_setsockopt(tx, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
	zmq_send(tx, "hello", 5, 0); /* queues even before the handshake */
	bool got = false;
	for (uint64_t dl = now_ms() + 1500; now_ms() < dl && !got; usleep(10000)) {
		void *buf;
		size_t len;
		if (lc__pull_recv(in, &buf, &len) > 0) {
			got = len == 5 && !memcmp(buf, "hello", 5);
			free(buf);
		}
	}
	zmq_close(tx);
	zmq_ctx_term(zc);
	return got;
}

/* The CURVE cases' start: a fresh key directory and up to three
 * keypairs; false (the case skips) when this libzmq has no CURVE. */
typedef struct keypair {
	char pub[41], sec[41];
} keypair_t;

static bool curve_keys(keypair_t *a, keypair_t *b, keypair_t *c)
{
	if (!zmq_has("curve")) {
		fprintf(stderr, "skip: this libzmq has no CURVE\n");
		return false;
	}
	make_keydir();
	keypair_t *k[3] = {a, b, c};
	for (int i = 0; i < 3; i++)
		TU_CHECK(!k[i] || !zmq_curve_keypair(k[i]->pub, k[i]->sec), "keypair %d", i);
	return true;
}

static int case_curve(void)
{
	keypair_t S, A, U;
	if (!curve_keys(&S, &A, &U))
		return TU_SKIP;
	const char *spub = S.pub, *ssec = S.sec, *apub = A.pub, *asec = A.sec, *upub = U.pub,
		   *usec = U.sec;
	write_line("curve.public", spub);
	write_line("curve.secret", ssec);
	char auth[128];
	snprintf(auth, sizeof auth, "# a comment\n%s", apub);
	write_line("authorized_keys", auth);
	setenv("LAYERCAKE_SECRET_DIR", keydir, 1);
	lc__zctx_t *z;
	TU_OK(lc__zctx_create(NULL, &z));
	TU_CHECK(!strcmp(lc__zctx_public_key(z), spub), "CURVE not on");
	lc__pull_t *in;
	char ep[128];
	TU_OK(lc__pull_bind(z, "127.0.0.1", &in, ep, sizeof ep));
	/* Refused: a plain client, an unknown key, a client that does not know
	 * the server's key. */
	TU_CHECK(!deliver(in, ep, NULL, NULL, NULL), "a plain (no CURVE) client got through");
	uint64_t r0 = lc__zctx_auth_refused(z);
	TU_CHECK(!deliver(in, ep, spub, upub, usec), "an unknown client key got through");
	TU_CHECK(lc__zctx_auth_refused(z) > r0, "the unknown key was not counted");
	TU_CHECK(!deliver(in, ep, apub, apub, asec),
		 "a client with the wrong server key got through");
	fprintf(stderr,
		"ok: plain client, unknown key, wrong server key: refused "
		"(%llu refusals counted)\n",
		(unsigned long long)lc__zctx_auth_refused(z));
	/* Accepted: an authorized key, and the shared keypair itself. */
	TU_CHECK(deliver(in, ep, spub, apub, asec), "an authorized key was refused");
	TU_CHECK(deliver(in, ep, spub, spub, ssec), "the shared keypair was refused");
	fprintf(stderr, "ok: authorized_keys and the shared keypair accepted\n");
	lc__pull_close(in);
	lc__zctx_destroy(z);
	/* A malformed key file is an error, never a silent plaintext fallback. */
	write_line("curve.secret", "too-short");
	TU_CHECK(lc__zctx_create(NULL, &z) == -EINVAL, "a malformed key file was accepted");
	fprintf(stderr, "ok: malformed key file -> -EINVAL\n");
	return 0;
}

/* P's inbox with CURVE on, through the public API: a message from an
 * unknown key never reaches the control thread (msgs_received does not
 * move); one from an authorized key does (counted as malformed). */
static int case_curve_prefill(void)
{
	keypair_t S, A, U;
	if (!curve_keys(&S, &A, &U))
		return TU_SKIP;
	const char *spub = S.pub, *apub = A.pub, *asec = A.sec, *upub = U.pub, *usec = U.sec;
	curve_p_t P;
	int rc = curve_p_start(&P, spub, S.sec, apub, "bs");
	if (rc)
		return rc;
	lc_prefill_t *pf = P.pf;
	const char *addr = P.addr, *ep = P.ep;
	/* The key D learns from the bootstrap server is P's. */
	lc__rank_info_t ri;
	char why[256];
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 1};
	TU_OK(lc__bootstrap_get_rank(addr, 0, 0, &o, &ri, why, sizeof why));
	TU_CHECK(!strcmp(ri.curve_key, spub), "bootstrap publishes key %s", ri.curve_key);
	const struct {
		const char *who, *pub, *sec;
		bool in;
	} c[] = {{"plain client", NULL, NULL, false},
		 {"unknown key", upub, usec, false},
		 {"authorized key", apub, asec, true}};
	for (size_t k = 0; k < LC__ARRAY_SIZE(c); k++) {
		uint64_t m0 = 0, m1 = 0;
		TU_OK(lc_prefill_counter(pf, "msgs_received", &m0));
		void *zc = zmq_ctx_new();
		void *tx = zmq_socket(zc, ZMQ_PUSH);
		int linger = 0;
		zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
		if (c[k].pub) {
			zmq_setsockopt(tx, ZMQ_CURVE_SERVERKEY, spub, 40);
			zmq_setsockopt(tx, ZMQ_CURVE_PUBLICKEY, c[k].pub, 40);
			zmq_setsockopt(tx, ZMQ_CURVE_SECRETKEY, c[k].sec, 40);
		}
		TU_CHECK(zmq_connect(tx, ep) == 0, "connect");
		zmq_send(tx, "garbage", 7, ZMQ_DONTWAIT);
		for (uint64_t dl = now_ms() + 1500; now_ms() < dl && m1 == m0; usleep(10000))
			TU_OK(lc_prefill_counter(pf, "msgs_received", &m1));
		zmq_close(tx);
		zmq_ctx_term(zc);
		TU_CHECK((m1 > m0) == c[k].in, "%s: msgs_received %llu -> %llu", c[k].who,
			 (unsigned long long)m0, (unsigned long long)m1);
		fprintf(stderr, "ok: P's inbox, %s: %s\n", c[k].who,
			c[k].in ? "delivered" : "refused");
	}
	curve_p_stop(&P);
	return 0;
}

/* Distinct keypairs per rank, each authorizing the other's public key (the
 * deployment the header's "accepts only peers presenting a public key
 * listed in the directory" invites). D learns P's key from the bootstrap
 * server, P learns D's from REGISTER and connects with it; with its own
 * key instead (what prefill.c did before) nothing arrives. */
static int case_curve_distinct_keypairs(void)
{
	keypair_t Pk, Dk;
	if (!curve_keys(&Pk, &Dk, NULL))
		return TU_SKIP;
	const char *ppub = Pk.pub, *psec = Pk.sec, *dpub = Dk.pub, *dsec = Dk.sec;
	lc__zctx_t *zp, *zd;
	/* D's side: its keypair, P's key authorized. */
	write_line("curve.public", dpub);
	write_line("curve.secret", dsec);
	write_line("authorized_keys", ppub);
	setenv("LAYERCAKE_SECRET_DIR", keydir, 1);
	TU_OK(lc__zctx_create(NULL, &zd));
	lc__pull_t *d_inbox;
	char ep[128];
	TU_OK(lc__pull_bind(zd, "127.0.0.1", &d_inbox, ep, sizeof ep));
	/* P's side: its keypair, D's key authorized. */
	write_line("curve.public", ppub);
	write_line("curve.secret", psec);
	write_line("authorized_keys", dpub);
	TU_OK(lc__zctx_create(NULL, &zp));
	/* With D's key as the server key (what D's REGISTER now carries and
	 * prefill.c uses) the message arrives; with P's own key it cannot: that
	 * is why the key has to travel (control.curve_distinct_keypairs runs
	 * the whole path through the public API). */
	bool got[2] = {false, false};
	const char *server_key[2] = {dpub, NULL};
	for (int k = 0; k < 2; k++) {
		lc__push_t *tx;
		TU_OK(lc__push_connect(zp, ep, server_key[k], &tx));
		lc__push_send(tx, "status", 6, 500);
		for (uint64_t dl = now_ms() + 1500; now_ms() < dl && !got[k]; usleep(10000)) {
			void *buf;
			size_t len;
			if (lc__pull_recv(d_inbox, &buf, &len) > 0) {
				got[k] = true;
				free(buf);
			}
		}
		lc__push_close(tx);
	}
	lc__pull_close(d_inbox);
	lc__zctx_destroy(zp);
	lc__zctx_destroy(zd);
	TU_CHECK(got[0], "P -> D not delivered with D's key as the server key");
	TU_CHECK(!got[1], "P -> D delivered under P's own key as D's server key");
	return 0;
}

/* A REGISTER whose declared CURVE key is not the key its sender
 * authenticated with is refused with LC_ERR_AUTH (answered to the real
 * key); declaring the real key gets past that check (and is refused here
 * only for its made-up geometry). */
static int case_curve_declared_key(void)
{
	keypair_t S, A, B;
	if (!curve_keys(&S, &A, &B))
		return TU_SKIP;
	const char *spub = S.pub, *apub = A.pub, *asec = A.sec, *bpub = B.pub;
	/* P: keypair S, authorizes A. */
	curve_p_t P;
	int rc = curve_p_start(&P, spub, S.sec, apub, NULL);
	if (rc)
		return rc;
	char d_ep[128];
	/* "D": keypair A, authorizes S; its inbox takes P's answers. */
	write_line("curve.public", apub);
	write_line("curve.secret", asec);
	write_line("authorized_keys", spub);
	lc__zctx_t *zd;
	TU_OK(lc__zctx_create(NULL, &zd));
	lc__pull_t *inbox;
	TU_OK(lc__pull_bind(zd, "127.0.0.1", &inbox, d_ep, sizeof d_ep));
	lc__push_t *tx;
	TU_OK(lc__push_connect(zd, P.ep, spub, &tx));
	static const uint8_t desc[40] = {1};
	const void *descs[1] = {desc};
	size_t lens[1] = {sizeof desc};
	lc__msg_buffer_t buf0 = {.layer = 0, .kind = LC_BUFFER_K, .item_len = 512};
	const char *declared[2] = {bpub, apub};
	for (int k = 0; k < 2; k++) {
		lc__msg_t m;
		memset(&m, 0, sizeof m);
		m.type = LC__MSG_REGISTER;
		snprintf(m.reg.session, sizeof m.reg.session, "d%d", k);
		memset(m.secret, 0x5e, sizeof m.secret);
		snprintf(m.reg.status_ep, sizeof m.reg.status_ep, "%s", d_ep);
		snprintf(m.reg.data_url, sizeof m.reg.data_url, "tcp://127.0.0.1:9");
		m.reg.flags = LC__REG_HAS_CURVE_KEY;
		snprintf(m.reg.curve_key, sizeof m.reg.curve_key, "%s", declared[k]);
		m.reg.nbuffers = 1;
		m.reg.buffers = &buf0;
		m.reg.nregions = 1;
		m.reg.region_descs = descs;
		m.reg.region_desc_lens = lens;
		uint8_t *wire;
		size_t wlen;
		TU_OK(lc__msg_encode(&m, &wire, &wlen));
		TU_OK(lc__push_send(tx, wire, wlen, 1000));
		free(wire);
		bool got = false;
		for (uint64_t dl = now_ms() + 3000; now_ms() < dl && !got; usleep(10000)) {
			void *rbuf;
			size_t rlen;
			if (lc__pull_recv(inbox, &rbuf, &rlen) <= 0)
				continue;
			lc__msg_t r;
			TU_OK(lc__msg_decode(rbuf, rlen, &r, NULL, 0));
			free(rbuf);
			TU_CHECK(r.type == LC__MSG_REGISTER_REPLY, "reply type %d", r.type);
			bool auth = r.reply.result == LC_ERR_AUTH;
			fprintf(stderr, "ok: declared %s key: refused %s (%s)\n",
				k ? "its own" : "another", lc_err_name(r.reply.result),
				r.reply.reason);
			TU_CHECK(r.reply.result < 0, "made-up geometry accepted");
			TU_CHECK(auth == (k == 0), "declared %s key: result %s",
				 k ? "its own" : "another", lc_err_name(r.reply.result));
			lc__msg_free(&r);
			got = true;
		}
		TU_CHECK(got, "no REGISTER_REPLY for declaration %d", k);
	}
	lc__push_close(tx);
	lc__pull_close(inbox);
	lc__zctx_destroy(zd);
	curve_p_stop(&P);
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(void);
	const char *what;
} cases[] = {
	{"tcp_token", case_tcp_token, "tcp: no, forged or revoked token refused; nothing lands"},
	{"tcp_outside", case_tcp_outside, "tcp: writes outside regions, ranges, grants rejected"},
	{"tcp_cancelled", case_tcp_cancelled, "tcp: writes for a cancelled room rejected"},
	{"tcp_forged", case_tcp_forged, "tcp: forged frames close the lane, counted"},
	{"http_bad_input", case_http_bad_input, "bootstrap: malformed JSON, oversize bodies"},
	{"http_secret", case_http_secret, "bootstrap: unauthenticated PUTs with a secret"},
	{"curve", case_curve, "control plane: CURVE refuses unknown keys (channel)"},
	{"curve_prefill", case_curve_prefill, "control plane: CURVE on P's inbox (public API)"},
	{"curve_distinct_keypairs", case_curve_distinct_keypairs,
	 "control plane: one keypair per rank: D's key is the server key"},
	{"curve_declared_key", case_curve_declared_key,
	 "control plane: a REGISTER declaring a key other than its sender's is refused"},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: lc_security <case> | list\n");
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
			return cases[k].fn();
	}
	if (strcmp(argv[1], "list")) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return 0;
}
