/*
 * The shm sender (P): a connection to one shm listener, one task on the
 * context's I/O core (transport/io/io.h).
 *
 * post() queues a batch and kicks the task; it never touches the socket.
 * The task connects (a unix connect completes or fails at once, so it never
 * waits), handshakes, passes each source region once (REGION with its
 * memfd; DROP evicts the oldest beyond LC__SHM_MAX_SRC_REGIONS), sends the
 * writes as WRITES messages of up to LC__SHM_MAX_WRITES small records, and
 * completes them from D's ACKS, which come in the order the writes went.
 * The socket is non-blocking and edge-triggered; on_event() records
 * readiness and service() does the work and keeps two deadlines: the
 * handshake (connect_timeout_ms) and progress while acks are due
 * (progress_timeout_ms).
 *
 * CUDA IPC (docs/gpu.md "CUDA IPC"): a batch with CUDA device sources
 * comes through post_device(). When the receiver accepted IPC in the
 * handshake, its device sources are exported once per region and
 * connection (IPC_REGION: cuIpcGetMemHandle, or a VMM allocation's fd) and
 * its writes go as for host memory, D copying device to device. When D
 * did not accept IPC, or a source cannot be exported, the batch is staged
 * (stage.c) and comes back through post() with host sources. Batches
 * posted before the WELCOME wait undecided and are settled when it comes.
 *
 * Threading: sc->lock protects the batch list, the send cursor, `unacked`
 * and `closing` (post() appends, the loop thread does the rest); everything
 * else of shm_conn_t is the loop thread's, under sc->send_mu, which the
 * loop thread holds in each of the task's ops. A posting thread that finds
 * the connection ready and send_mu free sends its batch itself (run to
 * completion: no wake of the loop thread on the way out), but only the
 * plain case: host sources D already maps, room in the socket; anything
 * else (a REGION to pass, a source gone, a full socket, an error) is left
 * to the loop thread, kicked. Acks are matched under sc->lock and their
 * completions delivered after it (p_on_acks), so a woken caller's next
 * post does not sleep on the lock. Lock order: send_mu -> sc->lock ->
 * ctx->regions.lock, sc->lock -> conn->lock (through lc__batch_*
 * completions on failure paths), and sc->lock -> the loop's lock (kicks).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/cuda.h"
#include "transport/shm/send_int.h"
#include "transport/stage.h"

/* ---- the batch list ---- */

static void pbatch_drop(pbatch_t *pb)
{
	lc__batch_unref(pb->b);
	free(pb);
}

/* Under lock: pop batches at the head that need nothing more. */
static void pop_done(shm_conn_t *sc)
{
	while (sc->head) {
		pbatch_t *pb = sc->head;
		bool sending_done = pb->sent == pb->b->nwrites || lc__batch_is_completed(pb->b);
		if (!sending_done || pb->acked < pb->sent)
			return;
		sc->head = pb->next;
		if (!sc->head)
			sc->tail = NULL;
		if (sc->cursor == pb)
			sc->cursor = pb->next;
		sc->nlist--;
		pbatch_drop(pb);
	}
}

/* Fail every batch we hold and forget them. */
static void fail_all(shm_conn_t *sc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_all(shm_conn_t *sc, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(reason, sizeof reason, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&sc->lock);
	pbatch_t *pb = sc->head;
	sc->head = sc->tail = sc->cursor = NULL;
	sc->nlist = 0;
	sc->unacked = sc->lane_unacked = 0;
	pthread_mutex_unlock(&sc->lock);
	while (pb) {
		pbatch_t *nx = pb->next;
		lc__batch_fail(pb->b, code, "%s", reason);
		pbatch_drop(pb);
		pb = nx;
	}
}

static bool has_work(shm_conn_t *sc)
{
	pthread_mutex_lock(&sc->lock);
	bool w = sc->head != NULL;
	pthread_mutex_unlock(&sc->lock);
	return w;
}

static bool awaiting_acks(shm_conn_t *sc)
{
	pthread_mutex_lock(&sc->lock);
	bool w = sc->unacked != 0;
	pthread_mutex_unlock(&sc->lock);
	return w;
}

/* ---- connection state ---- */

static void p_disconnect(shm_conn_t *sc)
{
	if (sc->fd >= 0) {
		lc__io_fd_del(&sc->task, &sc->iofd);
		close(sc->fd);
	}
	sc->fd = -1;
	if (sc->out_fd >= 0)
		close(sc->out_fd);
	sc->out_fd = -1;
	sc->out_len = 0;
	sc->nsrcs = 0;
	sc->readable = sc->writable = false;
	sc->state = P_DOWN;
	lc__shm_lane_unmap(&sc->lane);
	sc->w_head = sc->a_tail = sc->sock_sent = 0;
	atomic_store_explicit(&sc->a_seen, 0, memory_order_relaxed);
	sc->lane_bad = false;
	pthread_mutex_lock(&sc->lock);
	sc->ipc = IPC_UNKNOWN;
	pthread_mutex_unlock(&sc->lock);
}

/* Close the socket and fail every batch. The next post reconnects. */
static void p_fail(shm_conn_t *sc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void p_fail(shm_conn_t *sc, int code, const char *fmt, ...)
{
	char why[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(why, sizeof why, fmt, ap);
	va_end(ap);
	LC__DEBUG("%s: %s: %s", sc->c->url, lc_err_name(code), why);
	p_disconnect(sc);
	fail_all(sc, code, "%s: %s", sc->c->url, why);
}

static void p_connect(shm_conn_t *sc, uint64_t now)
{
	struct sockaddr_un sa;
	socklen_t alen = lc__shm_addr(sc->name, &sa);
	sc->want_connect = false;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		p_fail(sc, LC_ERR_IO, "socket: %s", strerror(errno));
		return;
	}
	/* A unix connect completes at once or fails at once (EAGAIN: the
	 * listener's backlog is full; treated as unreachable). */
	if (connect(fd, (struct sockaddr *)&sa, alen)) {
		int err = errno;
		close(fd);
		LC__COUNT(sc->ctx, conns_failed);
		p_fail(sc, LC_ERR_UNREACHABLE, "no shm listener named \"%s\" on this host (%s)",
		       sc->name, strerror(err));
		return;
	}
	int rc = lc__io_fd_add(&sc->task, &sc->iofd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			       0);
	if (rc) {
		close(fd);
		p_fail(sc, LC_ERR_IO, "epoll: %s", strerror(-rc));
		return;
	}
	sc->fd = fd;
	sc->writable = true;
	/* Offered where device memory made this process load CUDA already. */
	sc->ipc_offer = !sc->no_ipc && lc__cuda_loaded();
	sc->lane_offer = lc__ctx_cfg(sc->ctx, LC__CFG_shm_lane) != 0;
	lc__shm_hello_t h = {.magic = LC__SHM_MAGIC,
			     .version = LC__SHM_VERSION,
			     .flags = (sc->c->has_token ? LC__SHM_HELLO_TOKEN : 0) |
				      (sc->ipc_offer ? LC__SHM_HELLO_IPC : 0) |
				      (sc->lane_offer ? LC__SHM_HELLO_LANE : 0)};
	if (sc->c->has_token)
		memcpy(h.token, sc->c->token.bytes, LC_TOKEN_LEN);
	uint8_t m[LC__SHM_HELLO_LEN];
	rc = lc__shm_send(fd, m, lc__shm_put_hello(m, &h), -1);
	if (rc) {
		p_fail(sc, LC_ERR_UNREACHABLE, "sending the handshake: %s", strerror(-rc));
		return;
	}
	sc->state = P_HELLO;
	sc->deadline_ns = now + sc->connect_ns;
}

/* ---- sending ---- */

/* Under lock: the registered source region of the next write of pb into
 * *ri (kept from the previous write when it still covers this one). false
 * when it is gone: the batch is failed. */
static bool source_of(shm_conn_t *sc, pbatch_t *pb, lc__region_info_t *ri, bool *have,
		      bool can_fail)
{
	const lc_write_t *w = &pb->b->writes[pb->sent];
	lc__shm_write_source(sc, w, ri, have);
	if (!*have && can_fail)
		lc__batch_fail(pb->b, LC_ERR_REGION,
			       "%s: write %zu: source %p+%llu is no longer registered", sc->c->url,
			       pb->sent, (const void *)w->local, (unsigned long long)w->length);
	return *have;
}

/* Under lock. Put the next message into sc->out: a REGION or DROP when a
 * write needs one, else up to LC__SHM_MAX_WRITES writes. Inline (a posting
 * thread): only writes from host sources D already maps; returns false
 * where it stopped at one that needs the loop thread (nothing is failed or
 * passed), true otherwise. */
static bool build_next(shm_conn_t *sc, bool inline_)
{
	uint32_t n = 0;
	lc__region_info_t ri = {0};
	bool have_ri = false, plain = true;
	pbatch_t *pb = sc->cursor;
	while (pb && n < LC__SHM_MAX_WRITES) {
		lc__batch_t *b = pb->b;
		if (lc__batch_is_completed(b) || pb->sent == b->nwrites) {
			pb = pb->next;
			if (!n)
				sc->cursor = pb;
			continue;
		}
		if (inline_ && (pb->ipc || pb->undecided)) {
			plain = false;
			break;
		}
		if (!source_of(sc, pb, &ri, &have_ri, !inline_)) {
			if (inline_) {
				plain = false;
				break;
			}
			continue; /* completed now: skipped above */
		}
		if (!LC__KIND_IS_HOST(ri.kind) &&
		    (ri.kind != LC_MEM_KIND_CUDA || !pb->ipc || sc->ipc != IPC_ON ||
		     !lc__shm_export_find(sc, ri.id))) {
			if (inline_) {
				plain = false;
				break;
			}
			/* Cannot happen but by a bug: never send a device
			 * pointer D would read as host memory. */
			lc__batch_fail(b, LC_ENOTSUP,
				       "%s: write %zu: device source without CUDA IPC", sc->c->url,
				       pb->sent);
			continue;
		}
		if (!lc__shm_src_known(sc, ri.id)) {
			plain = false;
			if (!n && !inline_)
				lc__shm_build_region(sc, &ri);
			break; /* else send the writes first */
		}
		lc__shm_write_t rec;
		lc__shm_write_record(b, &b->writes[pb->sent], &ri, &rec);
		lc__shm_put_write(sc->out, n++, &rec);
		pb->sent++;
	}
	if (pb && n == LC__SHM_MAX_WRITES)
		plain = false; /* more to send */
	if (n) {
		sc->unacked += n;
		lc__shm_put_hdr(sc->out, LC__SHM_WRITES, n);
		sc->out_len = lc__shm_writes_len(n);
	}
	return plain;
}

/* Send what can be sent without blocking; on a full socket wait for the
 * EPOLLOUT edge. */
static void p_send(shm_conn_t *sc)
{
	while (sc->state == P_READY && sc->writable) {
		if (!sc->out_len) {
			bool ring = false;
			pthread_mutex_lock(&sc->lock);
			if (sc->lane.base)
				lc__shm_lane_put(sc, &ring);
			/* The socket waits while the lane holds writes: D takes
			 * lane records in order after the socket messages they
			 * count, and no socket message may overtake them. */
			if (!sc->lane_unacked)
				build_next(sc, false);
			pop_done(sc);
			pthread_mutex_unlock(&sc->lock);
			if (ring)
				lc__shm_lane_ring(sc);
			if (!sc->out_len)
				return;
		}
		int rc = lc__shm_send(sc->fd, sc->out, sc->out_len, sc->out_fd);
		if (rc == -EAGAIN) {
			sc->writable = false;
			return;
		}
		if (sc->out_fd >= 0)
			close(sc->out_fd);
		sc->out_fd = -1;
		sc->out_len = 0;
		if (rc)
			p_fail(sc, LC_ERR_PEER_CLOSED, "send: %s", strerror(-rc));
		else
			sc->sock_sent++;
	}
}

/* ---- receiving ---- */

static const char *reject_text(int status)
{
	switch (status) {
	case -ENOTSUP:
		return "source memory is not shareable with the receiver: allocate it with "
		       "lc_mem_alloc(LC_MEM_SHAREABLE)";
	default:
		return lc_strerror(status);
	}
}

/* Apply one ACKS message, from the socket or (lane) the lane: each
 * acknowledges the oldest batch sent the same way. Returns false when it
 * does not match what was sent (a protocol error). */
static bool p_on_acks(shm_conn_t *sc, const uint8_t *m, size_t len, bool lane)
{
	uint32_t n = lc__shm_count(m, len, LC__SHM_ACK_REC);
	if (!n)
		return false;
	/* Matched under sc->lock, completed after it: a completion wakes the
	 * thread waiting for it, which posts again at once and takes sc->lock
	 * in lc__shm_post; holding the lock through the completions (the
	 * connection's lock, the queue's eventfd) put that thread to sleep on
	 * the mutex, a wake-up more per round trip. Each batch is referenced
	 * meanwhile (pop_done drops the list's reference). */
	struct {
		lc__batch_t *b;
		uint32_t writes;
		int status;
		size_t first;
	} done[16];
	for (uint32_t i = 0; i < n;) {
		uint32_t k = 0;
		bool ok = true;
		pthread_mutex_lock(&sc->lock);
		for (; i < n && k < LC__ARRAY_SIZE(done); i++) {
			lc__shm_ack_t a;
			lc__shm_get_ack(m, i, &a);
			pbatch_t *pb = sc->head;
			while (pb && (pb->acked == pb->sent || pb->lane != lane))
				pb = pb->next;
			if (!pb || pb->b->id != a.batch || a.writes == 0 ||
			    a.writes > pb->sent - pb->acked) {
				ok = false;
				break;
			}
			lc__batch_ref(pb->b);
			done[k].b = pb->b;
			done[k].writes = a.writes;
			done[k].status = a.status;
			done[k].first = pb->acked;
			k++;
			pb->acked += a.writes;
			sc->unacked -= a.writes;
			if (lane)
				sc->lane_unacked -= a.writes;
		}
		pop_done(sc);
		pthread_mutex_unlock(&sc->lock);
		for (uint32_t j = 0; j < k; j++) {
			if (done[j].status == 0)
				lc__batch_applied(done[j].b, done[j].writes);
			else
				lc__batch_fail(done[j].b, done[j].status,
					       "%s: write %zu rejected by the receiver: %s",
					       sc->c->url, done[j].first,
					       reject_text(done[j].status));
			lc__batch_unref(done[j].b);
		}
		if (!ok)
			return false;
	}
	sc->progress_ns = lc__now_ns();
	return true;
}

/* The handshake said whether D accepts CUDA IPC: settle the batches with
 * device sources posted before it. Without IPC they are staged (they come
 * back through post() with host sources); nothing was sent yet. */
static void settle(shm_conn_t *sc, bool ipc)
{
	pbatch_t *stage = NULL, **tail = &stage;
	pthread_mutex_lock(&sc->lock);
	sc->ipc = ipc ? IPC_ON : IPC_OFF;
	pbatch_t *prev = NULL;
	for (pbatch_t *pb = sc->head, *nx; pb; pb = nx) {
		nx = pb->next;
		if (!pb->undecided) {
			prev = pb;
			continue;
		}
		pb->undecided = false;
		if (ipc) {
			pb->ipc = true;
			prev = pb;
			continue;
		}
		if (prev)
			prev->next = nx;
		else
			sc->head = nx;
		if (sc->tail == pb)
			sc->tail = prev;
		sc->nlist--;
		pb->next = NULL;
		*tail = pb;
		tail = &pb->next;
	}
	sc->cursor = sc->head;
	pthread_mutex_unlock(&sc->lock);
	while (stage) {
		pbatch_t *nx = stage->next;
		if (!lc__batch_is_completed(stage->b)) {
			int rc = lc__stage_post(sc->c, stage->b);
			if (rc < 0)
				lc__batch_fail(stage->b, rc, "%s: staging: %s", sc->c->url,
					       lc_strerror(rc));
		}
		pbatch_drop(stage);
		stage = nx;
	}
}

/* The handshake reply, with the lane's memfd (fd) if D made one. Returns
 * false when it is malformed. A lane that cannot be mapped is not used:
 * D sends acks there only for writes that came that way. */
static bool p_on_welcome(shm_conn_t *sc, const uint8_t *m, size_t len, int fd)
{
	lc__shm_welcome_t w;
	if (lc__shm_get_welcome(m, len, &w))
		return false;
	if ((w.flags & LC__SHM_WELCOME_LANE) && fd >= 0 && sc->lane_offer && !w.status) {
		int rc = lc__shm_lane_map(&sc->lane, fd);
		if (!rc)
			lc__shm_lane_set(sc->lane.p_polling, sc->cq_spinners != 0);
		if (rc)
			LC__WARN_PEER("%s: the receiver's lane is unusable (%s); using the socket "
				      "alone",
				      sc->c->url, strerror(-rc));
	}
	if (w.status) {
		LC__COUNT(sc->ctx, conns_failed);
		p_fail(sc, w.status, "%s",
		       w.status == LC_ERR_AUTH ? "the receiver refused our session token"
					       : "the receiver refused the handshake");
		return true;
	}
	settle(sc, sc->ipc_offer && (w.flags & LC__SHM_WELCOME_IPC));
	sc->state = P_READY;
	LC__DEBUG("%s: connected%s", sc->c->url, sc->ipc == IPC_ON ? ", CUDA IPC" : "");
	return true;
}

static void p_receive(shm_conn_t *sc)
{
	while (sc->fd >= 0) {
		int fd;
		bool truncated;
		ssize_t n = lc__shm_recv(sc->fd, sc->in, LC__SHM_ACKS_MAX, &fd, &truncated);
		int err = errno;
		if (n < 0 && err == EINTR)
			continue;
		if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
			sc->readable = false;
			return;
		}
		if (n <= 0) {
			p_fail(sc, sc->state == P_HELLO ? LC_ERR_UNREACHABLE : LC_ERR_PEER_CLOSED,
			       "the receiver closed the connection%s%s", n ? ": " : "",
			       n ? strerror(err) : "");
			return;
		}
		bool ok = !truncated;
		uint32_t type = lc__shm_type(sc->in, (size_t)n);
		if (ok && sc->state == P_HELLO)
			ok = p_on_welcome(sc, sc->in, (size_t)n, fd);
		else if (ok && type == LC__SHM_LANE_RING)
			ok = sc->lane.base && n == LC__SHM_HDR; /* the lane is looked at after */
		else if (ok)
			ok = type == LC__SHM_ACKS && p_on_acks(sc, sc->in, (size_t)n, false);
		if (fd >= 0)
			close(fd); /* the lane's is mapped; the receiver passes no other */
		if (!ok) {
			LC__COUNT(sc->ctx, frames_malformed);
			LC__WARN_PEER("%s: malformed message from the receiver; closing",
				      sc->c->url);
			p_fail(sc, LC_ERR_PROTO, "malformed message from the receiver");
			return;
		}
	}
}

/* Under send_mu: take D's acknowledgements of lane writes, copied out of
 * the ring into sc->in as ACKS messages. Returns false on malformed ones
 * (taken: the caller fails the connection or has the loop do it). */
static bool lane_acks(shm_conn_t *sc)
{
	for (;;) {
		uint64_t n = lc__shm_lane_avail(&sc->lane, sc->lane.a_head, sc->a_tail);
		if (!n)
			return true;
		if (n == UINT64_MAX)
			return false;
		uint32_t k = (uint32_t)LC__MIN(n, (uint64_t)LC__SHM_MAX_WRITES);
		for (uint32_t i = 0; i < k; i++)
			memcpy(sc->in + LC__SHM_HDR + (size_t)i * LC__SHM_ACK_REC,
			       lc__shm_lane_aslot(&sc->lane, sc->a_tail + i), LC__SHM_ACK_REC);
		sc->a_tail += k;
		atomic_store_explicit(&sc->a_seen, sc->a_tail, memory_order_relaxed);
		lc__shm_lane_release(&sc->lane, sc->lane.a_tail, sc->a_tail);
		lc__shm_put_hdr(sc->in, LC__SHM_ACKS, k);
		if (!p_on_acks(sc, sc->in, lc__shm_acks_len(k), true))
			return false;
	}
}

/* The loop thread's look at the acks ring (and at what a caller found). */
static void p_lane_acks(shm_conn_t *sc)
{
	if (!sc->lane_bad && lane_acks(sc))
		return;
	LC__COUNT(sc->ctx, frames_malformed);
	LC__WARN_PEER("%s: malformed acknowledgements in the lane; closing", sc->c->url);
	p_fail(sc, LC_ERR_PROTO, "malformed acknowledgements in the lane");
}

/* ---- the connection as a task of the I/O core ---- */

/* Fail what ran past its deadline; returns the next deadline, 0 for none. */
static uint64_t p_deadlines(shm_conn_t *sc, uint64_t now)
{
	if (sc->state == P_HELLO) {
		if (now < sc->deadline_ns)
			return sc->deadline_ns;
		LC__COUNT(sc->ctx, conns_failed);
		p_fail(sc, LC_ERR_UNREACHABLE, "no handshake within connect_timeout_ms");
	} else if (sc->state == P_READY && awaiting_acks(sc)) {
		if (now < sc->progress_ns + sc->progress_limit_ns) /* progress_ns may be > now */
			return sc->progress_ns + sc->progress_limit_ns;
		LC__COUNT(sc->ctx, lanes_stalled);
		p_fail(sc, LC_ERR_STALLED, "no acknowledgement within progress_timeout_ms");
	}
	return 0;
}

static uint64_t conn_service(lc__io_task_t *t, uint64_t now)
{
	shm_conn_t *sc = LC__CONTAINER_OF(t, shm_conn_t, task);
	pthread_mutex_lock(&sc->send_mu);
	now = lc__now_ns(); /* after any inline send that held the lock */
	if (sc->state == P_DOWN && (sc->want_connect || has_work(sc)))
		p_connect(sc, now);
	if (sc->fd >= 0 && sc->readable)
		p_receive(sc);
	if (sc->lane.base && sc->state == P_READY)
		p_lane_acks(sc);
	if (!awaiting_acks(sc))
		sc->progress_ns = now; /* the progress clock starts with the next send */
	p_send(sc);
	uint64_t due = p_deadlines(sc, now);
	pthread_mutex_unlock(&sc->send_mu);
	return due;
}

static void conn_on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	shm_conn_t *sc = LC__CONTAINER_OF(t, shm_conn_t, task);
	(void)f;
	(void)now;
	pthread_mutex_lock(&sc->send_mu);
	sc->readable |= (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	sc->writable |= (events & EPOLLOUT) != 0;
	pthread_mutex_unlock(&sc->send_mu);
}

/* A posting thread sends what the list holds now, if that is the plain
 * case and nobody else is sending; true when it left nothing for the loop
 * thread (no kick needed). The loop thread alone changes the socket's
 * state and fails batches: here a failed or short send only leaves the
 * message built for it. */
static bool send_inline(shm_conn_t *sc)
{
	if (pthread_mutex_trylock(&sc->send_mu))
		return false; /* the loop thread is in the task: it will look */
	bool done = sc->state == P_READY && sc->writable && !sc->out_len && sc->fd >= 0;
	if (done) {
		bool ring = false;
		uint32_t put = 0;
		pthread_mutex_lock(&sc->lock);
		bool idle = sc->unacked == 0;
		if (sc->lane.base)
			put = lc__shm_lane_put(sc, &ring);
		done = sc->lane_unacked ? !lc__shm_unsent(sc)
					: build_next(sc, true); /* as p_send */
		pthread_mutex_unlock(&sc->lock);
		if (idle && (put || sc->out_len))
			sc->progress_ns = lc__now_ns(); /* as conn_service does */
		if (put) {
			if (ring)
				lc__shm_lane_ring(sc);
			LC__COUNT(sc->ctx, sends_inline);
			lc__io_alarm_set(&sc->alarm, sc->progress_ns + sc->progress_limit_ns);
		}
		if (sc->out_len) {
			if (lc__shm_send(sc->fd, sc->out, sc->out_len, -1) == 0) {
				sc->out_len = 0;
				sc->sock_sent++;
				LC__COUNT(sc->ctx, sends_inline);
				lc__io_alarm_set(&sc->alarm,
						 sc->progress_ns + sc->progress_limit_ns);
			} else {
				done = false;
			}
		}
	}
	pthread_mutex_unlock(&sc->send_mu);
	return done;
}

static const lc__io_task_ops_t conn_task_ops = {
	.name = "shm-send",
	.on_event = conn_on_event,
	.service = conn_service,
	.poll = lc__shm_conn_poll,
};

/* ---- ops: sender ---- */

/* Under sc->lock: a closing connection is being detached from its loop. */
static void kick_locked(shm_conn_t *sc)
{
	if (!sc->closing)
		lc__io_kick(&sc->task);
}

/* Queue a batch at the tail (the lock held) and wake the sender unless the
 * batch is deferred to the next flush. */
static void enqueue_locked(shm_conn_t *sc, pbatch_t *pb, bool kick)
{
	if (sc->tail)
		sc->tail->next = pb;
	else
		sc->head = pb;
	sc->tail = pb;
	if (!sc->cursor)
		sc->cursor = pb;
	sc->nlist++;
	if (kick && !pb->b->defer)
		kick_locked(sc);
}

static void wake(shm_conn_t *sc)
{
	pthread_mutex_lock(&sc->lock);
	kick_locked(sc);
	pthread_mutex_unlock(&sc->lock);
}

/* A caller spinning in lc_cq_wait (cq.h): while any spins, the lane says
 * P polls (D then rings no parked loop); each look takes the acks on the
 * caller's thread unless the loop thread or a poster holds the state.
 * What the loop alone may do (fail the connection, send what waited for
 * the acks) is left to it, kicked. */
static void cq_poll(lc__cq_poller_t *p, int how)
{
	shm_conn_t *sc = LC__CONTAINER_OF(p, shm_conn_t, poller);
	if (how == LC__CQ_SPIN_LOOK) {
		if (pthread_mutex_trylock(&sc->send_mu))
			return;
	} else {
		pthread_mutex_lock(&sc->send_mu);
		sc->cq_spinners += how == LC__CQ_SPIN_BEGIN ? 1 : (size_t)-1;
		if (sc->lane.base)
			lc__shm_lane_set(sc->lane.p_polling, sc->cq_spinners != 0);
	}
	bool kick = false;
	if (sc->lane.base && sc->state == P_READY && !sc->lane_bad &&
	    lc__shm_lane_avail(&sc->lane, sc->lane.a_head, sc->a_tail)) {
		sc->lane_bad = !lane_acks(sc);
		pthread_mutex_lock(&sc->lock);
		kick = sc->lane_bad || lc__shm_unsent(sc);
		pthread_mutex_unlock(&sc->lock);
	}
	pthread_mutex_unlock(&sc->send_mu);
	if (kick)
		wake(sc);
}

static void conn_free(shm_conn_t *sc)
{
	for (size_t i = 0; i < sc->nexports; i++)
		if (sc->exports[i].vmm_fd >= 0)
			close(sc->exports[i].vmm_fd);
	free(sc->exports);
	pthread_mutex_destroy(&sc->send_mu);
	pthread_mutex_destroy(&sc->lock);
	free(sc->in);
	free(sc->out);
	free(sc);
}

int lc__shm_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	int rc;
	(void)p;
	shm_conn_t *sc = calloc(1, sizeof *sc);
	if (!sc)
		return -ENOMEM;
	pthread_mutex_init(&sc->lock, NULL);
	pthread_mutex_init(&sc->send_mu, NULL);
	sc->c = c;
	sc->ctx = c->ctx;
	sc->fd = sc->out_fd = -1;
	sc->want_connect = true;
	sc->connect_ns = (uint64_t)lc__ctx_cfg(c->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	sc->progress_limit_ns =
		(uint64_t)lc__ctx_cfg(c->ctx, LC__CFG_progress_timeout_ms) * 1000000ull;
	rc = lc__shm_name_from_url(url, sc->name, sizeof sc->name, false);
	if (rc)
		goto fail;
	uint64_t ipc = 1;
	lc__url_query_u64(url, "ipc", &ipc);
	sc->no_ipc = ipc == 0;
	sc->out = malloc(LC__SHM_MSG_MAX);
	sc->in = malloc(LC__SHM_ACKS_MAX);
	if (!sc->out || !sc->in) {
		rc = -ENOMEM;
		goto fail;
	}
	c->priv = sc;
	rc = lc__io_attach(c->ctx, &sc->task, &conn_task_ops);
	if (rc) {
		c->priv = NULL;
		goto fail;
	}
	lc__io_alarm_init(&sc->alarm, &sc->task);
	sc->poller.fn = cq_poll;
	lc__cq_poller_add(c->cq, &sc->poller);
	c->io_task = &sc->task; /* batch deadlines on its loop */
	return 0;
fail:
	conn_free(sc);
	return rc;
}

/* On the loop thread, as the task detaches: close the socket. */
static void conn_release(lc__io_task_t *t, void *arg)
{
	shm_conn_t *sc = arg;
	(void)t;
	pthread_mutex_lock(&sc->send_mu);
	p_disconnect(sc);
	pthread_mutex_unlock(&sc->send_mu);
}

void lc__shm_conn_close(lc_conn_t *c)
{
	shm_conn_t *sc = c->priv;
	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	sc->closing = true;
	pthread_mutex_unlock(&sc->lock);
	lc__cq_poller_del(c->cq, &sc->poller); /* no caller's spin looks any more */
	lc__io_alarm_cancel(&sc->alarm);
	lc__io_detach(&sc->task, conn_release, sc);
	/* Batches the loop thread handed to staging (settle) before it
	 * stopped: wait for their copies, as the generic layer did for its own. */
	lc__stage_conn_close(c);
	/* The generic layer completes the batches (cancelled); drop ours. */
	for (pbatch_t *pb = sc->head, *nx; pb; pb = nx) {
		nx = pb->next;
		pbatch_drop(pb);
	}
	conn_free(sc);
	c->priv = NULL;
}

int lc__shm_post(lc_conn_t *c, lc__batch_t *b)
{
	shm_conn_t *sc = c->priv;
	pbatch_t *pb = calloc(1, sizeof *pb);
	if (!pb)
		return -ENOMEM;
	pthread_mutex_lock(&sc->lock);
	if (sc->closing) {
		pthread_mutex_unlock(&sc->lock);
		free(pb);
		return LC_ERR_CLOSED;
	}
	lc__batch_ref(b);
	pb->b = b;
	enqueue_locked(sc, pb, false);
	pthread_mutex_unlock(&sc->lock);
	if (!b->defer && !send_inline(sc))
		wake(sc);
	return 0;
}

int lc__shm_post_device(lc_conn_t *c, lc__batch_t *b)
{
	shm_conn_t *sc = c->priv;
	if (sc->no_ipc || !lc__cuda_loaded())
		return 1;
	pthread_mutex_lock(&sc->lock);
	if (sc->closing) {
		pthread_mutex_unlock(&sc->lock);
		return LC_ERR_CLOSED;
	}
	bool ipc = sc->ipc != IPC_OFF;
	lc__region_info_t ri = {0};
	for (size_t i = 0; i < b->nwrites && ipc; i++) {
		const lc_write_t *w = &b->writes[i];
		const uint8_t *p = w->local;
		if (i && p >= ri.addr && w->length <= ri.len &&
		    (size_t)(p - ri.addr) <= ri.len - w->length)
			continue;
		if (lc__source_find(sc->ctx, p, w->length, &ri))
			ipc = false; /* gone: staging fails it with its reason */
		else if (!LC__KIND_IS_HOST(ri.kind))
			ipc = ri.kind == LC_MEM_KIND_CUDA && lc__shm_exportable(sc, &ri);
	}
	pbatch_t *pb = ipc ? calloc(1, sizeof *pb) : NULL;
	if (!pb) {
		pthread_mutex_unlock(&sc->lock);
		return 1;
	}
	lc__batch_ref(b);
	pb->b = b;
	pb->ipc = sc->ipc == IPC_ON;
	pb->undecided = sc->ipc == IPC_UNKNOWN;
	enqueue_locked(sc, pb, true);
	pthread_mutex_unlock(&sc->lock);
	return 0;
}

void lc__shm_flush(lc_conn_t *c)
{
	if (!send_inline(c->priv))
		wake(c->priv);
}

void lc__shm_room_cancel(lc_conn_t *c, uint64_t room)
{
	(void)room; /* its batches are completed: the task skips them */
	wake(c->priv);
}
