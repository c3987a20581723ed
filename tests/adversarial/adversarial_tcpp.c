/*
 * tcp://'s sender (P) against a scripted raw D: a TCP listener on 127.0.0.1
 * (port 0) in a thread of this process that speaks the wire format
 * (transport/tcp/wire.h) wrongly, one way per script; every lane P opens
 * (P also connects ahead of its first batch, and replaces a failed lane)
 * gets the same script. Each batch fails with its cause and the counter:
 * a HELLO_REPLY with LC_ERR_AUTH, -EBUSY or junk fields, an ACK before it,
 * an ACK past what was sent, a REJECT (revoked mid-write, or with a positive
 * status), a WRITES frame to P, a reset (after the write, or 64 KiB into
 * 32 MiB), silence past progress_timeout_ms (reading nothing at all: P's
 * sends stop on a full buffer), an ACK of one write of two and the close in
 * one segment (P reads a short ACK and must still see the close: it stops
 * reading at a short read only when the edge did not say the peer closed);
 * a correct script succeeds.
 *
 *     adversarial_tcpp replies
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

static void sleep_ms(int ms)
{
	struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&t, NULL);
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

enum script {
	S_OK,          /* HELLO_REPLY 0, ACK the write: success (the harness holds) */
	S_AUTH,        /* HELLO_REPLY LC_ERR_AUTH */
	S_BUSY,        /* HELLO_REPLY -EBUSY */
	S_REPLY_JUNK,  /* HELLO_REPLY 0 with a = 7 */
	S_ACK_FIRST,   /* an ACK where the HELLO_REPLY belongs */
	S_ACK_PAST,    /* ACK of 5 writes after 1 was sent */
	S_REVOKED,     /* REJECT LC_ERR_GRANT, detail revoked */
	S_REJECT_POS,  /* REJECT with status +3 */
	S_WRITES_TO_P, /* a WRITES frame to the sender */
	S_RESET,       /* reset once the write arrived */
	S_SILENT,      /* nothing after the HELLO_REPLY */
	S_NOREAD,      /* never reads a byte after the HELLO (P's sends see EAGAIN) */
	S_RESET_MID,   /* reset after 64 KiB of a 32 MiB write */
	S_ACK_CLOSE,   /* two writes: ACK the first and close, in one segment */
};

typedef struct raw_d {
	int lfd, port;
	enum script s;
	_Atomic bool stop;
	pthread_t th;
} raw_d_t;

#define P_LEN 4096

/* One lane of the script. */
static void raw_d_serve(raw_d_t *r, int fd)
{
	uint8_t b[LC__TCP_HDR_LEN + 2 * LC__TCP_DESC_LEN + P_LEN];
	lc__tcp_ctrl_t reply = {.type = LC__TCP_HELLO_REPLY};
	if (tu_recv_exact(fd, b, LC__TCP_CTRL_LEN, 20000) != 1)
		goto out;
	switch (r->s) {
	case S_AUTH:
		reply.status = LC_ERR_AUTH;
		break;
	case S_BUSY:
		reply.status = -EBUSY;
		break;
	case S_REPLY_JUNK:
		reply.a = 7;
		break;
	case S_ACK_FIRST:
		reply.type = LC__TCP_ACK;
		break;
	default:
		break;
	}
	lc__tcp_encode_ctrl(b, &reply);
	tu_send_all(fd, b, LC__TCP_CTRL_LEN);
	if (r->s == S_AUTH || r->s == S_BUSY || r->s == S_REPLY_JUNK || r->s == S_ACK_FIRST)
		goto drain;
	if (r->s == S_NOREAD) { /* until the test ends */
		while (!atomic_load(&r->stop))
			sleep_ms(10);
		goto out;
	}
	if (r->s == S_RESET_MID) {
		static uint8_t sink[64u << 10];
		tu_recv_exact(fd, sink, sizeof sink, 20000);
		struct linger lg = {1, 0};
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		goto out;
	}
	/* The write: header, one descriptor (two for S_ACK_CLOSE), payload. */
	if (tu_recv_exact(fd, b, sizeof b - (r->s == S_ACK_CLOSE ? 0 : LC__TCP_DESC_LEN),
			  20000) != 1)
		goto out;
	lc__tcp_ctrl_t f = {.type = LC__TCP_ACK, .a = 1};
	switch (r->s) {
	case S_ACK_PAST:
		f.a = 5;
		break;
	case S_REVOKED:
		f = (lc__tcp_ctrl_t){.type = LC__TCP_REJECT,
				     .status = LC_ERR_GRANT,
				     .b = LC__TCP_REJECT_REVOKED};
		break;
	case S_REJECT_POS:
		f = (lc__tcp_ctrl_t){.type = LC__TCP_REJECT, .status = 3};
		break;
	case S_RESET: {
		struct linger lg = {1, 0};
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		goto out;
	}
	case S_SILENT:
		goto drain;
	case S_ACK_CLOSE: { /* corked: the ACK and the FIN leave as one segment */
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
		lc__tcp_encode_ctrl(b, &f);
		tu_send_all(fd, b, LC__TCP_CTRL_LEN);
		shutdown(fd, SHUT_WR);
		goto drain;
	}
	default:
		break;
	}
	lc__tcp_encode_ctrl(b, &f);
	if (r->s == S_WRITES_TO_P)
		b[2] = LC__TCP_WRITES;
	tu_send_all(fd, b, LC__TCP_CTRL_LEN);
drain: /* until P closes the lane */
	while (tu_recv_exact(fd, b, 1, 20000) == 1)
		;
out:
	close(fd);
}

/* Every lane P opens gets the same script: P also connects ahead of its
 * first batch, and a lane failed before the batch is replaced by another. */
static void *raw_d_main(void *arg)
{
	raw_d_t *r = arg;
	struct timeval tv = {0, 100000};
	setsockopt(r->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (!atomic_load(&r->stop)) {
		int fd = accept(r->lfd, NULL, NULL);
		if (fd >= 0)
			raw_d_serve(r, fd);
	}
	return NULL;
}

static void p_against(enum script s, int want, const char *words, const char *count)
{
	/* The two that must fill P's socket buffers write 32 MiB. */
	size_t len = s == S_NOREAD || s == S_RESET_MID ? 32u << 20 : P_LEN;
	raw_d_t r = {.s = s};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	r.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	TU_CHECK(r.lfd >= 0 && bind(r.lfd, (struct sockaddr *)&a, sizeof a) == 0 &&
			 listen(r.lfd, 4) == 0 &&
			 getsockname(r.lfd, (struct sockaddr *)&a, &alen) == 0,
		 "raw D: %s", strerror(errno));
	r.port = ntohs(a.sin_port);
	TU_CHECK(pthread_create(&r.th, NULL, raw_d_main, &r) == 0, "thread");

	lc_ctx_t *p, *other;
	TU_OK(lc_ctx_create(NULL, &p));
	TU_OK(lc_ctx_config_set(p, "progress_timeout_ms",
				s == S_SILENT || s == S_NOREAD ? "500" : "20000"));
	TU_OK(lc_ctx_create(NULL, &other));
	/* The baseline before the connection: its handshake may run (and a
	 * bad HELLO_REPLY be counted) before lc_conn_import_region returns. */
	uint64_t c0 = count ? counter(p, count) : 0;
	uint8_t *dmem = calloc(1, len), *src = calloc(1, len);
	lc_region_t *dr, *sr;
	TU_OK(lc_region_register(other, dmem, len, &dr));
	TU_OK(lc_region_register(p, src, len, &sr));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(n);
	lc_cq_t *cq;
	TU_OK(lc_cq_create(p, &cq));
	char url[64];
	snprintf(url, sizeof url, "tcp://127.0.0.1:%d", r.port);
	lc_conn_t *conn;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .lanes = 1};
	TU_OK(lc_conn_create(p, url, &cp, &conn));
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	lc_write_t w[2] = {{.local = src, .remote_region = remote, .length = len}};
	size_t nw = 1;
	if (s == S_ACK_CLOSE) { /* two halves */
		w[0].length = len / 2;
		w[1] = (lc_write_t){.local = src + len / 2, .remote_region = remote,
				    .remote_offset = len / 2, .length = len / 2};
		nw = 2;
	}
	lc_batch_params_t bp = {.size = sizeof bp, .room = 1, .timeout_ms = 30000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, w, nw, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 25000);
	fprintf(stderr, "script %d: %s (%s)\n", s, lc_err_name(c.status), c.reason);
	TU_CHECK(c.batch_id == id && c.status == want && (!words || strstr(c.reason, words)),
		 "script %d: %s, expected %s with \"%s\"", s, lc_err_name(c.status),
		 lc_err_name(want), words ? words : "");
	if (count)
		TU_CHECK(counter(p, count) >= c0 + 1, "script %d: %s not counted", s, count);
	lc_conn_destroy(conn);
	atomic_store(&r.stop, true);
	pthread_join(r.th, NULL);
	close(r.lfd);
	lc_cq_destroy(cq);
	lc_region_deregister(sr);
	lc_region_deregister(dr);
	lc_ctx_destroy(p);
	lc_ctx_destroy(other);
	free(src);
	free(dmem);
}

static void case_p_replies(void)
{
	p_against(S_OK, 0, NULL, NULL);
	p_against(S_AUTH, LC_ERR_AUTH, "rejected the session token", "conns_failed");
	p_against(S_BUSY, -EBUSY, "cap of authenticated lanes", "conns_failed");
	p_against(S_REPLY_JUNK, LC_ERR_PROTO, "bad HELLO_REPLY", "frames_malformed");
	p_against(S_ACK_FIRST, LC_ERR_PROTO, "expected HELLO_REPLY", "frames_malformed");
	p_against(S_ACK_PAST, LC_ERR_PROTO, "out-of-range acknowledgement", "frames_malformed");
	p_against(S_REVOKED, LC_ERR_GRANT, "grant revoked mid-write", NULL);
	p_against(S_REJECT_POS, LC_ERR_PROTO, "out-of-range acknowledgement", "frames_malformed");
	p_against(S_WRITES_TO_P, LC_ERR_PROTO, "bad frame prefix", "frames_malformed");
	p_against(S_RESET, LC_ERR_PEER_CLOSED, "peer closed", NULL);
	p_against(S_SILENT, LC_ERR_STALLED, "no progress", "lanes_stalled");
	p_against(S_NOREAD, LC_ERR_STALLED, "no progress", "lanes_stalled");
	p_against(S_RESET_MID, LC_ERR_PEER_CLOSED, NULL, NULL);
	/* Not STALLED after progress_timeout_ms: the close is seen at once. */
	p_against(S_ACK_CLOSE, LC_ERR_PEER_CLOSED, "peer closed", NULL);
}

int main(int argc, char **argv)
{
	if (argc != 2 || strcmp(argv[1], "replies")) {
		fprintf(stderr, "usage: adversarial_tcpp replies\n");
		return 2;
	}
	tu_watchdog(170);
	signal(SIGPIPE, SIG_IGN);
	if (!tu_transport_built("tcp")) {
		fprintf(stderr, "skip: no tcp transport\n");
		return TU_SKIP;
	}
	case_p_replies();
	printf("adversarial_tcpp replies: ok\n");
	return 0;
}
