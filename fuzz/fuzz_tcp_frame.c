/*
 * libFuzzer target: the tcp:// receiver's frame parser (HELLO, WRITES
 * headers, descriptor tables, payloads), fed through its real read path.
 *
 * tcp/recv.c has no parse function of its own that a fuzzer could call: the
 * parser is the receiving lane's state machine (lc__tcp_rlane_pump -> readv ->
 * consume_stage -> frame_from_stage -> on_hello / on_run -> payloads
 * straight into registered memory). So this target includes tcp/recv.c (and
 * tcp/listen.c, for closing the lane) and
 * drives one receiving lane over a socketpair, exactly as the listener's
 * I/O-core task does after accept(), minus epoll.
 *
 * Input: byte 0 = flags (bit 0: prepend a valid HELLO carrying the session
 * token; bit 1: revoke the room's grant halfway through and grant it again
 * at the end; bits 2-7: the size of the pieces the stream is delivered
 * in, 0 = 4 KiB, else 1..813 bytes), then the byte stream a sender would
 * write.
 *
 * Invariant checked beyond the sanitizers: not one byte lands outside the
 * one range granted (region A [64 KiB, 128 KiB) for room 7); region B, which
 * has no grant, is never written.
 */
#include "transport/tcp/recv.c"
#include "transport/tcp/listen.c"

#include <signal.h>
#include <sys/socket.h>

#define ROOM 7
#define A_LEN (256u << 10)
#define B_LEN (64u << 10)
#define G_OFF (64u << 10)
#define G_LEN (64u << 10)
#define CANARY 0xa5

static lc_ctx_t *ctx;
static lc_region_t *ra, *rb;
static uint8_t *mem_a, *mem_b;
static lc_token_t token;
static tcp_listener_t tl;
static uint8_t canary_buf[A_LEN];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	lc_log_set_level(LC_LOG_OFF);
	signal(SIGPIPE, SIG_IGN);
	mem_a = aligned_alloc(4096, A_LEN);
	mem_b = aligned_alloc(4096, B_LEN);
	memset(mem_a, CANARY, A_LEN);
	memset(mem_b, CANARY, B_LEN);
	memset(canary_buf, CANARY, sizeof canary_buf);
	if (lc_ctx_create(NULL, &ctx) || lc_region_register(ctx, mem_a, A_LEN, &ra) ||
	    lc_region_register(ctx, mem_b, B_LEN, &rb) || lc_token_issue(ctx, &token) ||
	    lc_grant_issue(ctx, ROOM, ra, G_OFF, G_LEN) < 0)
		abort();
	tl.ctx = ctx;
	tl.fd = -1;
	return 0;
}

static void check_canaries(void)
{
	if (memcmp(mem_a, canary_buf, G_OFF) ||
	    memcmp(mem_a + G_OFF + G_LEN, canary_buf, A_LEN - G_OFF - G_LEN)) {
		fprintf(stderr, "region A written outside the grant\n");
		abort();
	}
	if (memcmp(mem_b, canary_buf, B_LEN)) {
		fprintf(stderr, "region B (never granted) written\n");
		abort();
	}
}

static void drain(int fd)
{
	uint8_t buf[4096];
	while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	uint8_t flags = data[0];
	data++;
	size--;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv))
		abort();
	int big = 4 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	rlane_t *r = calloc(1, sizeof *r);
	*r = (rlane_t){.tl = &tl, .fd = sv[0], .phase = R_HELLO, .writable = true};
	tl.lanes = r;
	tl.nlanes = 1;
	if (flags & 1) {
		uint8_t hello[LC__TCP_CTRL_LEN];
		lc__tcp_ctrl_t h = {.type = LC__TCP_HELLO,
				    .status = LC__TCP_HELLO_TOKEN,
				    .a = lc__get_u64(token.bytes),
				    .b = lc__get_u64(token.bytes + 8)};
		lc__tcp_encode_ctrl(hello, &h);
		if (write(sv[1], hello, sizeof hello) != (ssize_t)sizeof hello)
			abort();
	}
	/* 0: whole 4 KiB pieces (fast); else pieces of 1..813 bytes, which
	 * split headers and tables at every place. */
	size_t piece = (flags >> 2) ? (size_t)(flags >> 2) * 13 - 12 : 4096, off = 0;
	bool revoked = false;
	while (off < size && !r->dead) {
		size_t n = LC__MIN(piece, size - off);
		ssize_t w = write(sv[1], data + off, n);
		if (w > 0)
			off += (size_t)w;
		if ((flags & 2) && !revoked && off >= size / 2) {
			lc_grant_revoke(ctx, ROOM);
			revoked = true;
		}
		r->readable = true;
		lc__tcp_rlane_pump(r);
		drain(sv[1]);
		if (w <= 0 && !r->readable)
			break; /* the lane stopped reading (paused): the sender would wait */
	}
	shutdown(sv[1], SHUT_WR);
	for (int k = 0; k < 64 && !r->dead; k++) {
		r->readable = true;
		r->writable = true;
		lc__tcp_rlane_pump(r);
		drain(sv[1]);
	}
	rlane_close(&tl, r); /* closes sv[0], releases grant references */
	close(sv[1]);
	check_canaries();
	if (revoked && lc_grant_issue(ctx, ROOM, ra, G_OFF, G_LEN) < 0)
		abort();
	memset(mem_a + G_OFF, CANARY, G_LEN);
	return 0;
}
