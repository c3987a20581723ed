/*
 * tcp:// sender (P). A connection is `lanes` persistent TCP sockets to one
 * listener, served as one task on the context's I/O core (non-blocking
 * sockets and connect). post() splits a batch into at most one segment per
 * lane, queues the segments and kicks the task; it never touches a socket.
 * The task sends runs of up to 128 writes as WRITES frames (a header, a
 * table of the run's descriptors, then the payloads straight from the
 * caller's registered memory), up to 1024 iovecs per sendmsg, and completes
 * writes from the receiver's cumulative ACK frames.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/tcp/send_int.h"

/* A batch is split across lanes only in pieces of at least this much. */
#define SEG_MIN_BYTES (256u << 10)

/* ====================================================================
 * Sender: segments and the send cursor.
 * ==================================================================== */

static void seg_release(lane_t *ln, seg_t *s)
{
	segblock_t *blk = s->blk;
	ln->queued -= s->bytes;
	if (--blk->live == 0) {
		lc__batch_unref(blk->b);
		free(blk);
	}
}

/* Writes of s whose frame has started (those the receiver may apply). */
static size_t seg_sent(const lane_t *ln, const seg_t *s)
{
	if (s != ln->cur)
		return s->end - s->first;
	return ln->cur_idx + (ln->cur_off ? ln->run_n : 0) - s->first;
}

/* Pop fully acknowledged segments that the cursor has left behind. */
static void lane_pop_done(lane_t *ln)
{
	while (ln->head && ln->head != ln->cur &&
	       ln->head->acked == ln->head->end - ln->head->first) {
		seg_t *s = ln->head;
		ln->head = s->next;
		if (!ln->head)
			ln->tail = NULL;
		seg_release(ln, s);
	}
}

/* Move the cursor past finished segments and unsent writes of completed
 * batches (only at frame boundaries: a started frame is always finished). */
static void cursor_normalize(lane_t *ln)
{
	while (ln->cur && ln->cur_off == 0 && lc__tcp_skip_frame(ln->cur, ln->cur_idx)) {
		ln->cur->end = ln->cur_idx;
		ln->cur = ln->cur->next;
		ln->cur_idx = ln->cur ? ln->cur->first : 0;
	}
	lane_pop_done(ln);
}

static void lane_append(lane_t *ln, seg_t *s, uint64_t now)
{
	if (!ln->head) {
		ln->progress_ns = now; /* the stall clock starts with the work */
		ln->resend_ok = ln->state == LANE_READY;
	}
	s->next = NULL;
	if (ln->tail)
		ln->tail->next = s;
	else
		ln->head = s;
	ln->tail = s;
	if (!ln->cur) {
		ln->cur = s;
		ln->cur_idx = s->first;
		ln->cur_off = 0;
	}
	ln->queued += s->bytes;
}

/* ---- lane failure ---- */

static void lane_close_fd(lane_t *ln)
{
	if (ln->fd >= 0) {
		lc__io_fd_del(&ln->tc->task, &ln->iofd);
		close(ln->fd);
	}
	ln->fd = -1;
	ln->state = LANE_DOWN;
	ln->writable = false;
	ln->in_len = 0;
	ln->seq_next = ln->seq_acked = 0;
}

/* Fail every batch the lane holds with `code`, close the socket. The lane
 * reconnects when new work arrives. */
static void lane_fail(lane_t *ln, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void lane_fail(lane_t *ln, int code, const char *fmt, ...)
{
	char why[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(why, sizeof why, fmt, ap);
	va_end(ap);
	tcp_conn_t *tc = ln->tc;
	size_t nseg = 0;
	for (seg_t *s = ln->head, *next; s; s = next, nseg++) {
		next = s->next;
		lc__batch_fail(s->b, code, "tcp://%s:%d lane %d: %s", tc->host, tc->port, ln->idx,
			       why);
		seg_release(ln, s);
	}
	if (nseg && code != LC_ERR_CANCELLED)
		LC__WARN_PEER("tcp://%s:%d lane %d: %s (%s; %zu segments failed)", tc->host,
			      tc->port, ln->idx, why, lc_err_name(code), nseg);
	else
		LC__DEBUG("tcp://%s:%d lane %d: %s", tc->host, tc->port, ln->idx, why);
	ln->head = ln->tail = ln->cur = NULL;
	ln->cur_idx = ln->cur_off = 0;
	ln->queued = 0;
	lane_close_fd(ln);
}

/* D closed a lane whose queued writes may go again (resend_ok): rewind, and
 * reconnect as for any queued work. False: the caller fails them. */
static bool lane_resend(lane_t *ln, const char *why)
{
	if (!ln->resend_ok || !ln->head)
		return false;
	ln->resend_ok = false;
	LC__DEBUG("tcp://%s:%d lane %d: %s while idle; sending its new writes on a new connection",
		  ln->tc->host, ln->tc->port, ln->idx, why);
	lane_close_fd(ln);
	ln->cur = ln->head;
	ln->cur_idx = ln->head->first;
	ln->cur_off = 0;
	return true;
}

static void lane_malformed(lane_t *ln, const char *what)
{
	LC__COUNT(ln->tc->ctx, frames_malformed);
	LC__WARN_PEER("tcp://%s:%d lane %d: malformed frame from the receiver: %s", ln->tc->host,
		      ln->tc->port, ln->idx, what);
	lane_fail(ln, LC_ERR_PROTO, "malformed frame from the receiver: %s", what);
}

/* ---- connecting ---- */

static int resolve(tcp_conn_t *tc, char *err, size_t cap)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char port[16];
	if (tc->addrlen)
		return 0;
	snprintf(port, sizeof port, "%d", tc->port);
	int rc = getaddrinfo(tc->host, port, &hints, &res);
	if (rc || !res) {
		snprintf(err, cap, "cannot resolve %.64s: %.64s", tc->host, gai_strerror(rc));
		return LC_ERR_UNREACHABLE;
	}
	memcpy(&tc->addr, res->ai_addr, res->ai_addrlen);
	tc->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void lane_connect(lane_t *ln, uint64_t now)
{
	tcp_conn_t *tc = ln->tc;
	char err[160];
	if (resolve(tc, err, sizeof err)) {
		lane_fail(ln, LC_ERR_UNREACHABLE, "%s", err);
		return;
	}
	ln->fd = socket(tc->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ln->fd < 0) {
		lane_fail(ln, LC_ERR_IO, "socket: %s", strerror(errno));
		return;
	}
	lc__tcp_sockopts(ln->fd, tc->sockbuf);
	if (connect(ln->fd, (struct sockaddr *)&tc->addr, tc->addrlen) && errno != EINPROGRESS) {
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, LC_ERR_UNREACHABLE, "connect: %s", strerror(errno));
		return;
	}
	int rc = lc__io_fd_add(&tc->task, &ln->iofd, ln->fd,
			       EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, (uint32_t)ln->idx);
	if (rc) {
		lane_fail(ln, LC_ERR_IO, "epoll: %s", strerror(-rc));
		return;
	}
	ln->state = LANE_CONNECTING;
	ln->deadline_ns = now + tc->connect_ns;
	ln->progress_ns = now;
}

/* The non-blocking connect finished (or failed): send HELLO. */
static void lane_connected(lane_t *ln)
{
	tcp_conn_t *tc = ln->tc;
	int err = 0;
	socklen_t len = sizeof err;
	uint8_t hello[LC__TCP_CTRL_LEN];
	if (getsockopt(ln->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, LC_ERR_UNREACHABLE, "connect: %s", strerror(err ? err : errno));
		return;
	}
	lc__tcp_ctrl_t h = {.type = LC__TCP_HELLO};
	if (tc->conn->has_token) {
		h.status = LC__TCP_HELLO_TOKEN;
		h.a = lc__get_u64(tc->conn->token.bytes);
		h.b = lc__get_u64(tc->conn->token.bytes + 8);
	}
	lc__tcp_encode_ctrl(hello, &h);
	/* 24 bytes into a fresh socket's empty buffer: all or an error. */
	if (send(ln->fd, hello, sizeof hello, MSG_NOSIGNAL | MSG_DONTWAIT) !=
	    (ssize_t)sizeof hello) {
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, LC_ERR_UNREACHABLE, "sending the handshake: %s", strerror(errno));
		return;
	}
	ln->state = LANE_HELLO;
}

static void on_hello_reply(lane_t *ln, const lc__tcp_ctrl_t *f, uint64_t now)
{
	tcp_conn_t *tc = ln->tc;
	if (f->status == LC_ERR_AUTH) {
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, LC_ERR_AUTH, "the receiver rejected the session token (%s)",
			  tc->conn->has_token ? "token not issued by it or revoked"
					      : "it requires a token and none was given");
		return;
	}
	if (f->status == -EBUSY && !f->a && !f->b) {
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, -EBUSY,
			  "the receiver refused the lane: it holds its cap of authenticated lanes "
			  "(tcp_lanes_per_addr / tcp_lanes_max), every one busy");
		return;
	}
	if (f->status != 0 || f->a || f->b) {
		lane_malformed(ln, "bad HELLO_REPLY");
		return;
	}
	ln->state = LANE_READY;
	ln->writable = true;
	ln->deadline_ns = 0;
	ln->progress_ns = now;
	LC__DEBUG("tcp://%s:%d lane %d ready", tc->host, tc->port, ln->idx);
}

/* ---- acknowledgements ---- */

/* n more frames are in place at the receiver: complete them in order. */
static void lane_consume(lane_t *ln, uint64_t n)
{
	for (seg_t *s = ln->head; n && s; s = s->next) {
		size_t k = LC__MIN((uint64_t)(seg_sent(ln, s) - s->acked), n);
		if (!k)
			continue;
		s->acked += k;
		ln->seq_acked += k;
		n -= k;
		lc__batch_applied(s->b, k);
	}
	cursor_normalize(ln);
}

static void on_reject(lane_t *ln, const lc__tcp_ctrl_t *f)
{
	lane_consume(ln, f->a - ln->seq_acked);
	seg_t *s = ln->head;
	while (s && seg_sent(ln, s) == s->acked)
		s = s->next;
	if (!s) { /* checked by the caller: seq < seq_next */
		lane_malformed(ln, "REJECT for a write not sent");
		return;
	}
	size_t i = s->first + s->acked;
	const lc_write_t *w = &s->b->writes[i];
	lc__batch_fail(s->b, f->status,
		       "tcp://%s:%d: write %zu (region %u, offset %llu, %u x %llu bytes %llu "
		       "apart, room %llu) rejected: %s%s",
		       ln->tc->host, ln->tc->port, i, w->remote_region,
		       (unsigned long long)w->remote_offset, w->count > 1 ? w->count : 1,
		       (unsigned long long)w->length,
		       (unsigned long long)(w->count > 1 ? w->remote_stride : w->length),
		       (unsigned long long)s->b->room, lc_err_name(f->status),
		       f->b == LC__TCP_REJECT_REVOKED ? ", grant revoked mid-write" : "");
	s->acked++;
	ln->seq_acked++;
	lane_pop_done(ln);
}

/* One control frame from the receiver; false if the lane was failed. */
static bool on_ctrl(lane_t *ln, const uint8_t *p, uint64_t now)
{
	lc__tcp_ctrl_t f;
	lc__tcp_decode_ctrl(p, &f);
	if (ln->state == LANE_HELLO) {
		if (f.type != LC__TCP_HELLO_REPLY) {
			lane_malformed(ln, "expected HELLO_REPLY");
			return false;
		}
		on_hello_reply(ln, &f, now);
		return ln->state == LANE_READY;
	}
	bool ack = f.type == LC__TCP_ACK && f.status == 0 && f.b == 0;
	bool rej = f.type == LC__TCP_REJECT && f.status < 0 && f.b <= LC__TCP_REJECT_REVOKED;
	uint64_t started = ln->seq_next + (ln->cur_off ? ln->run_n : 0);
	if ((!ack && !rej) || f.a < ln->seq_acked || f.a > started || (rej && f.a == started)) {
		lane_malformed(ln, "unexpected or out-of-range acknowledgement");
		return false;
	}
	ln->progress_ns = now;
	ln->resend_ok = false;
	if (ack)
		lane_consume(ln, f.a - ln->seq_acked);
	else
		on_reject(ln, &f);
	return true;
}

/* Read and handle everything the receiver sent (edge-triggered; a read
 * shorter than asked drained the socket, epoll(7): no EAGAIN read after,
 * unless the edge said the peer closed, which raises no later one). */
static void lane_read(lane_t *ln, uint32_t events, uint64_t now)
{
	bool to_end = events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
	for (;;) {
		size_t asked = IN_CAP - ln->in_len;
		ssize_t n = recv(ln->fd, ln->in + ln->in_len, asked, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			if (!lane_resend(ln, "peer closed the connection"))
				lane_fail(ln, LC_ERR_PEER_CLOSED, "peer closed the connection%s%s",
					  n ? ": " : "", n ? strerror(errno) : "");
			return;
		}
		if (n < 0)
			return;
		ln->in_len += (size_t)n;
		size_t pos = 0;
		while (ln->in_len - pos >= LC__TCP_CTRL_LEN) {
			if (!lc__tcp_prefix_ok(ln->in + pos) || ln->in[pos + 2] == LC__TCP_WRITES) {
				lane_malformed(ln, "bad frame prefix");
				return;
			}
			if (!on_ctrl(ln, ln->in + pos, now))
				return;
			pos += LC__TCP_CTRL_LEN;
		}
		memmove(ln->in, ln->in + pos, ln->in_len - pos);
		ln->in_len -= pos;
		if ((size_t)n < asked && !to_end)
			return;
	}
}

/* ---- sending ---- */

/* Send from the cursor while the socket takes it. Inline (a posting
 * thread): on an error, stop and return false, leaving the lane for the
 * I/O thread to fail or resend; true otherwise. */
static bool lane_flush(lane_t *ln, uint64_t now, bool inline_)
{
	cursor_normalize(ln);
	while (ln->writable && ln->cur) {
		build_state_t st;
		size_t nf = lc__tcp_lane_build(ln, &st);
		if (!nf) {
			ln->cur = NULL; /* everything left belonged to completed batches */
			break;
		}
		struct msghdr msg = {.msg_iov = ln->tc->iov, .msg_iovlen = (size_t)st.niov};
		ssize_t w = sendmsg(ln->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			ln->writable = false;
			break;
		}
		if (w < 0) {
			if (inline_)
				return false;
			if (!lane_resend(ln, "send failed"))
				lane_fail(ln, LC_ERR_PEER_CLOSED, "send: %s", strerror(errno));
			return true;
		}
		ln->progress_ns = now;
		lc__tcp_lane_advance(ln, nf, (size_t)w);
		cursor_normalize(ln);
		if ((size_t)w < st.total)
			ln->writable = false; /* buffer full: EPOLLOUT will say when */
	}
	return true;
}

/* ---- the I/O thread ---- */

static void on_lane_event(lane_t *ln, uint32_t events, uint64_t now)
{
	if (ln->fd < 0)
		return;
	if (ln->state == LANE_CONNECTING) {
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		lane_connected(ln);
		if (ln->state != LANE_HELLO)
			return;
	}
	if (events & EPOLLOUT)
		ln->writable = ln->state == LANE_READY;
	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		lane_read(ln, events, now);
}

/* Hand queued segments to lanes: the live lane with the least queued. */
static lane_t *pick_lane(tcp_conn_t *tc)
{
	lane_t *best = &tc->lanes[0];
	for (int i = 1; i < tc->nlanes; i++) {
		lane_t *ln = &tc->lanes[i];
		bool up = ln->state != LANE_DOWN, best_up = best->state != LANE_DOWN;
		if ((up && !best_up) || (up == best_up && ln->queued < best->queued))
			best = ln;
	}
	return best;
}

static void take_submissions(tcp_conn_t *tc, uint64_t now)
{
	pthread_mutex_lock(&tc->lock);
	segblock_t *blk = tc->subq;
	tc->subq = tc->subq_tail = NULL;
	pthread_mutex_unlock(&tc->lock);
	while (blk) {
		segblock_t *next = blk->next;
		for (size_t i = 0; i < blk->n; i++)
			lane_append(pick_lane(tc), &blk->segs[i], now);
		blk = next;
	}
}

static void lane_check_deadlines(lane_t *ln, uint64_t now)
{
	tcp_conn_t *tc = ln->tc;
	if (ln->state == LANE_CONNECTING || ln->state == LANE_HELLO) {
		if (now < ln->deadline_ns)
			return;
		LC__COUNT(tc->ctx, conns_failed);
		lane_fail(ln, LC_ERR_UNREACHABLE, "no %s within connect_timeout_ms=%llu",
			  ln->state == LANE_CONNECTING ? "connection" : "handshake reply",
			  (unsigned long long)(tc->connect_ns / 1000000));
		return;
	}
	/* progress_ns may be past now: an inline send after this pass began. */
	if (ln->state == LANE_READY && ln->head && now >= ln->progress_ns &&
	    now - ln->progress_ns >= tc->progress_ns) {
		LC__COUNT(tc->ctx, lanes_stalled);
		lane_fail(ln, LC_ERR_STALLED,
			  "no progress for %llu ms (%llu writes sent, %llu acknowledged)",
			  (unsigned long long)((now - ln->progress_ns) / 1000000),
			  (unsigned long long)ln->seq_next, (unsigned long long)ln->seq_acked);
	}
}

/* The next lane deadline, 0 if none. */
static uint64_t sender_deadline(const tcp_conn_t *tc)
{
	uint64_t next = UINT64_MAX;
	for (int i = 0; i < tc->nlanes; i++) {
		lane_t *ln = &tc->lanes[i];
		if (ln->state == LANE_CONNECTING || ln->state == LANE_HELLO)
			next = LC__MIN(next, ln->deadline_ns);
		else if (ln->state == LANE_READY && ln->head)
			next = LC__MIN(next, ln->progress_ns + tc->progress_ns);
	}
	return next == UINT64_MAX ? 0 : next;
}

static void sender_service(tcp_conn_t *tc, uint64_t now)
{
	for (int i = 0; i < tc->nlanes; i++) {
		lane_t *ln = &tc->lanes[i];
		if (ln->state == LANE_DOWN && ln->head)
			lane_connect(ln, now);
		if (ln->state == LANE_READY)
			lane_flush(ln, now, false);
		if (ln->state != LANE_DOWN)
			lane_check_deadlines(ln, now);
	}
}

/* The connection as a task of the I/O core. */
static void sender_on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	tcp_conn_t *tc = LC__CONTAINER_OF(t, tcp_conn_t, task);
	pthread_mutex_lock(&tc->send_mu);
	on_lane_event(&tc->lanes[f->tag], events, now);
	pthread_mutex_unlock(&tc->send_mu);
}

static uint64_t sender_task_service(lc__io_task_t *t, uint64_t now)
{
	tcp_conn_t *tc = LC__CONTAINER_OF(t, tcp_conn_t, task);
	pthread_mutex_lock(&tc->send_mu);
	now = lc__now_ns(); /* after any inline send that held the lock */
	if (!tc->warm) {    /* the first batch finds lanes ready */
		tc->warm = true;
		for (int i = 0; i < tc->nlanes; i++)
			lane_connect(&tc->lanes[i], now);
	}
	take_submissions(tc, now);
	sender_service(tc, now);
	uint64_t due = sender_deadline(tc);
	pthread_mutex_unlock(&tc->send_mu);
	return due;
}

/* A posting thread sends what is queued, if every lane is connected and
 * the I/O thread is not in the task; true when it left nothing to send (no
 * kick needed: the acknowledgements wake the I/O thread, and the batches'
 * own deadlines are armed at post). */
static bool send_inline(tcp_conn_t *tc)
{
	if (pthread_mutex_trylock(&tc->send_mu))
		return false; /* the I/O thread is in the task: it will look */
	bool done = tc->warm;
	for (int i = 0; i < tc->nlanes && done; i++)
		done = tc->lanes[i].state == LANE_READY;
	if (done) {
		uint64_t now = lc__now_ns();
		take_submissions(tc, now);
		bool waiting = false;
		for (int i = 0; i < tc->nlanes && done; i++) {
			lane_t *ln = &tc->lanes[i];
			done = lane_flush(ln, now, true) && !ln->cur;
			waiting |= ln->head != NULL;
		}
		if (done)
			LC__COUNT(tc->ctx, sends_inline);
		if (done && waiting) /* lane_check_deadlines by the stall limit */
			lc__io_alarm_set(&tc->alarm, now + tc->progress_ns);
	}
	pthread_mutex_unlock(&tc->send_mu);
	return done;
}

static const lc__io_task_ops_t sender_task_ops = {
	.name = "tcp-send",
	.on_event = sender_on_event,
	.service = sender_task_service,
};

/* ---- ops: sender ---- */

static void wake(tcp_conn_t *tc)
{
	lc__io_kick(&tc->task);
}

/* Split a batch into at most `lanes` runs of writes of similar byte counts,
 * each worth splitting (SEG_MIN_BYTES). */
static segblock_t *split(lc__batch_t *b, int lanes)
{
	size_t want = LC__MIN((size_t)lanes, b->nwrites);
	want = LC__MIN(want, (size_t)(b->bytes / SEG_MIN_BYTES) + 1);
	segblock_t *blk = calloc(1, sizeof *blk + want * sizeof(seg_t));
	if (!blk)
		return NULL;
	blk->b = b;
	uint64_t acc = 0;
	size_t i = 0;
	for (size_t k = 0; k < want && i < b->nwrites; k++) {
		seg_t *s = &blk->segs[blk->n++];
		*s = (seg_t){.b = b, .blk = blk, .first = i};
		uint64_t goal = b->bytes / want * (k + 1);
		do {
			acc += lc__tcp_wire_bytes(&b->writes[i]);
			s->bytes += lc__tcp_wire_bytes(&b->writes[i++]);
		} while (i < b->nwrites && (acc < goal || k + 1 == want));
		s->end = i;
	}
	blk->live = blk->n;
	return blk;
}

int lc__tcp_post(lc_conn_t *c, lc__batch_t *b)
{
	tcp_conn_t *tc = c->priv;
	segblock_t *blk = split(b, tc->nlanes);
	if (!blk)
		return -ENOMEM;
	pthread_mutex_lock(&tc->lock);
	if (tc->closing) {
		pthread_mutex_unlock(&tc->lock);
		free(blk);
		return LC_ERR_CLOSED;
	}
	lc__batch_ref(b);
	if (tc->subq_tail)
		tc->subq_tail->next = blk;
	else
		tc->subq = blk;
	tc->subq_tail = blk;
	pthread_mutex_unlock(&tc->lock);
	if (!b->defer && !send_inline(tc))
		wake(tc);
	return 0;
}

void lc__tcp_flush(lc_conn_t *c)
{
	if (!send_inline(c->priv))
		wake(c->priv);
}

static void tcp_conn_free(tcp_conn_t *tc)
{
	pthread_mutex_destroy(&tc->send_mu);
	pthread_mutex_destroy(&tc->lock);
	free(tc->lanes);
	free(tc);
}

static int tcp_conn_setup(tcp_conn_t *tc, lc_conn_t *c, const lc_conn_params_t *p)
{
	lc_ctx_t *ctx = c->ctx;
	tc->conn = c;
	tc->ctx = ctx;
	int lanes = p->lanes ? p->lanes : (int)lc__ctx_cfg(ctx, LC__CFG_tcp_lanes);
	tc->nlanes = lanes > 0 ? LC__MIN(lanes, 64) : 1;
	tc->connect_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	tc->progress_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_progress_timeout_ms) * 1000000ull;
	tc->sockbuf = lc__tcp_sockbuf(ctx);
	tc->lanes = calloc((size_t)tc->nlanes, sizeof *tc->lanes);
	if (!tc->lanes)
		return -ENOMEM;
	for (int i = 0; i < tc->nlanes; i++)
		tc->lanes[i] = (lane_t){.tc = tc, .idx = i, .fd = -1};
	return 0;
}

int lc__tcp_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	tcp_conn_t *tc = calloc(1, sizeof *tc);
	int rc;
	if (!tc)
		return -ENOMEM;
	pthread_mutex_init(&tc->lock, NULL);
	pthread_mutex_init(&tc->send_mu, NULL);
	rc = lc__url_host_port(url, "tcp", tc->host, sizeof tc->host, &tc->port);
	if (rc || tc->port == 0) {
		if (!rc)
			lc__error_set(-EINVAL, "%s: port 0 (connect needs the listener's port)",
				      url);
		rc = -EINVAL;
		goto fail;
	}
	rc = tcp_conn_setup(tc, c, p);
	if (rc)
		goto fail;
	c->priv = tc;
	rc = lc__io_attach(c->ctx, &tc->task, &sender_task_ops);
	if (rc)
		goto fail;
	lc__io_alarm_init(&tc->alarm, &tc->task);
	c->io_task = &tc->task; /* batch deadlines on its loop */
	return 0;
fail:
	c->priv = NULL;
	tcp_conn_free(tc);
	return rc;
}

/* On the loop thread, as the task detaches: close every lane, fail what is
 * left. */
static void release_all(lc__io_task_t *t, void *arg)
{
	tcp_conn_t *tc = arg;
	(void)t;
	pthread_mutex_lock(&tc->send_mu);
	for (int i = 0; i < tc->nlanes; i++)
		lane_fail(&tc->lanes[i], LC_ERR_CANCELLED, "connection closed");
	for (segblock_t *blk = tc->subq, *next; blk; blk = next) {
		next = blk->next;
		lc__batch_fail(blk->b, LC_ERR_CANCELLED, "connection closed");
		lc__batch_unref(blk->b);
		free(blk);
	}
	tc->subq = tc->subq_tail = NULL;
	pthread_mutex_unlock(&tc->send_mu);
}

void lc__tcp_conn_close(lc_conn_t *c)
{
	tcp_conn_t *tc = c->priv;
	pthread_mutex_lock(&tc->lock);
	tc->closing = true;
	pthread_mutex_unlock(&tc->lock);
	lc__io_alarm_cancel(&tc->alarm);
	lc__io_detach(&tc->task, release_all, tc);
	tcp_conn_free(tc);
	c->priv = NULL;
}
