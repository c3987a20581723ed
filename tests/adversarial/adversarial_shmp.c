/*
 * shm://'s sender (P) against a scripted raw D: a unix SEQPACKET listener in
 * a thread of this process that answers P's handshake and acknowledgements
 * wrongly, one way per script (the real encoders of transport/shm/wire.h).
 * Each batch must fail with its cause and, for a reply that breaks the
 * protocol, LC_ERR_PROTO with frames_malformed counted; a correct script
 * succeeds (the harness itself holds). Every lane P opens, it reopens after
 * a failure, gets the same script.
 *
 *     adversarial_shmp welcome   WELCOME refusing the token, refusing the
 *                                version, cut short; a close before it
 *     adversarial_shmp acks      ACKS of no record, for another batch, of 0
 *                                writes, of more writes than sent; a write
 *                                refused with -ENOTSUP or LC_ERR_GRANT; a
 *                                close after the WRITES; a D that reads
 *                                nothing (LC_ERR_STALLED); a correct ACK
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"
#include "transport/shm/shm_int.h"

#define LEN 4096

enum script {
	S_OK,         /* a correct WELCOME and ACK */
	S_AUTH,       /* WELCOME status LC_ERR_AUTH */
	S_VERSION,    /* WELCOME status LC_ERR_PROTO */
	S_SHORT,      /* a WELCOME cut to 12 bytes */
	S_CLOSE_HELLO, /* closed once the HELLO arrived */
	S_ACKS_EMPTY, /* ACKS of no record */
	S_ACK_OTHER,  /* an ACK of another batch */
	S_ACK_ZERO,   /* an ACK of 0 writes */
	S_ACK_MANY,   /* an ACK of 5 writes where 1 was sent */
	S_NOTSUP,     /* the write refused with -ENOTSUP */
	S_GRANT,      /* the write refused with LC_ERR_GRANT */
	S_CLOSE_WRITES, /* closed once the WRITES arrived */
	S_NOREAD,     /* reads nothing after the WELCOME: P's sends stop on a full socket */
};

typedef struct raw_d {
	int lfd;
	char name[LC__SHM_NAME_MAX + 1];
	enum script s;
	_Atomic bool stop;
	pthread_t th;
} raw_d_t;

static void serve(raw_d_t *r, int fd)
{
	uint8_t m[LC__SHM_MSG_MAX];
	struct timeval tv = {20, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (recv(fd, m, sizeof m, 0) <= 0 || r->s == S_CLOSE_HELLO) /* the HELLO */
		goto out;
	lc__shm_welcome_t w = {.magic = LC__SHM_MAGIC, .version = LC__SHM_VERSION};
	w.status = r->s == S_AUTH ? LC_ERR_AUTH : r->s == S_VERSION ? LC_ERR_PROTO : 0;
	size_t wl = lc__shm_put_welcome(m, &w);
	lc__shm_send(fd, m, r->s == S_SHORT ? 12 : wl, -1);
	if (w.status || r->s == S_SHORT)
		goto drain;
	if (r->s == S_NOREAD) {
		while (!atomic_load(&r->stop))
			usleep(10000);
		goto out;
	}
	/* P's REGION(s), then its WRITES. */
	ssize_t k;
	while ((k = recv(fd, m, sizeof m, 0)) > 0 && lc__shm_type(m, (size_t)k) != LC__SHM_WRITES)
		;
	if (k <= 0 || r->s == S_CLOSE_WRITES)
		goto out;
	lc__shm_write_t x;
	lc__shm_get_write(m, 0, &x);
	lc__shm_ack_t a = {.batch = x.batch, .writes = 1};
	switch (r->s) {
	case S_ACK_OTHER:
		a.batch++;
		break;
	case S_ACK_ZERO:
		a.writes = 0;
		break;
	case S_ACK_MANY:
		a.writes = 5;
		break;
	case S_NOTSUP:
		a.status = -ENOTSUP;
		break;
	case S_GRANT:
		a.status = LC_ERR_GRANT;
		break;
	default:
		break;
	}
	uint32_t n = r->s == S_ACKS_EMPTY ? 0 : 1;
	lc__shm_put_hdr(m, LC__SHM_ACKS, n);
	if (n)
		lc__shm_put_ack(m, 0, &a);
	lc__shm_send(fd, m, lc__shm_acks_len(n), -1);
drain: /* until P hangs up */
	while (recv(fd, m, sizeof m, 0) > 0)
		;
out:
	close(fd);
}

static void *raw_d_main(void *arg)
{
	raw_d_t *r = arg;
	struct timeval tv = {0, 100000};
	setsockopt(r->lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (!atomic_load(&r->stop)) {
		int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			serve(r, fd);
	}
	return NULL;
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

static void p_against(enum script s, int want, const char *words, const char *count)
{
	raw_d_t r = {.s = s};
	struct sockaddr_un sa;
	snprintf(r.name, sizeof r.name, "lc-rawdp-%d-%d", (int)getpid(), (int)s);
	socklen_t alen = lc__shm_addr(r.name, &sa);
	r.lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	TU_CHECK(r.lfd >= 0 && bind(r.lfd, (struct sockaddr *)&sa, alen) == 0 &&
			 listen(r.lfd, 4) == 0,
		 "raw D listen: %s", strerror(errno));
	TU_CHECK(pthread_create(&r.th, NULL, raw_d_main, &r) == 0, "thread");

	lc_ctx_t *p, *other;
	TU_OK(lc_ctx_create(NULL, &p));
	TU_OK(lc_ctx_create(NULL, &other));
	if (s == S_NOREAD)
		TU_OK(lc_ctx_config_set(p, "progress_timeout_ms", "500"));
	/* The baseline before the connection: its handshake runs as soon as
	 * lc_conn_create starts it, and a malformed WELCOME can be counted
	 * before lc_conn_import_region returns. */
	uint64_t c0 = count ? counter(p, count) : 0;
	uint8_t *dmem = calloc(1, LEN), *src;
	lc_region_t *dr, *sr;
	TU_OK(lc_region_register(other, dmem, LEN, &dr));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_mem_alloc(LEN, LC_MEM_SHAREABLE, (void **)&src));
	TU_OK(lc_region_register(p, src, LEN, &sr));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(p, &cq));
	char url[128];
	snprintf(url, sizeof url, "shm://%s", r.name);
	lc_conn_t *conn;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq};
	TU_OK(lc_conn_create(p, url, &cp, &conn));
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	/* S_NOREAD: 20,000 one-byte writes, records enough to fill the socket. */
	size_t nw = s == S_NOREAD ? 20000 : 1;
	lc_write_t *w = calloc(nw, sizeof *w);
	for (size_t i = 0; i < nw; i++)
		w[i] = (lc_write_t){.local = src + (nw > 1 ? i % LEN : 0),
				    .remote_region = remote,
				    .remote_offset = nw > 1 ? i % LEN : 0,
				    .length = nw > 1 ? 1 : LEN};
	lc_batch_params_t bp = {.size = sizeof bp, .room = 1, .timeout_ms = 30000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, w, nw, &bp, &id));
	free(w);
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
	lc_mem_free(src);
	free(dmem);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_shmp <case>\n");
		return 2;
	}
	tu_watchdog(170);
	signal(SIGPIPE, SIG_IGN);
	if (!tu_transport_built("shm")) {
		fprintf(stderr, "skip: no shm transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "welcome")) {
		p_against(S_OK, 0, NULL, NULL);
		p_against(S_AUTH, LC_ERR_AUTH, "refused our session token", "conns_failed");
		p_against(S_VERSION, LC_ERR_PROTO, "refused the handshake", "conns_failed");
		p_against(S_SHORT, LC_ERR_PROTO, "malformed message", "frames_malformed");
		p_against(S_CLOSE_HELLO, LC_ERR_UNREACHABLE, "closed the connection", NULL);
	} else if (!strcmp(n, "acks")) {
		p_against(S_ACKS_EMPTY, LC_ERR_PROTO, "malformed message", "frames_malformed");
		p_against(S_ACK_OTHER, LC_ERR_PROTO, "malformed message", "frames_malformed");
		p_against(S_ACK_ZERO, LC_ERR_PROTO, "malformed message", "frames_malformed");
		p_against(S_ACK_MANY, LC_ERR_PROTO, "malformed message", "frames_malformed");
		p_against(S_NOTSUP, -ENOTSUP, "allocate it with lc_mem_alloc(LC_MEM_SHAREABLE)", NULL);
		p_against(S_GRANT, LC_ERR_GRANT, "rejected by the receiver", NULL);
		p_against(S_CLOSE_WRITES, LC_ERR_PEER_CLOSED, "closed the connection", NULL);
		p_against(S_NOREAD, LC_ERR_STALLED, "no acknowledgement within", "lanes_stalled");
		p_against(S_OK, 0, NULL, NULL);
	} else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_shmp %s: ok\n", n);
	return 0;
}
