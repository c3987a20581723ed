/*
 * tcp:// receiver (D): the listening socket, accepted lanes (caps on
 * pending handshakes per listener and per source address, the oldest
 * evicted; the idle deadline of authenticated lanes, whose caps are
 * decided at their HELLO in recv.c), closing a lane (its device copies
 * drained, bounded), and the listener task on the context's I/O core.
 * Frames and writes: recv.c.
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
#include <unistd.h>

#include "transport/tcp/recv_int.h"

/* ---- receiver: lanes ---- */

static void rlane_close(tcp_listener_t *tl, rlane_t *r)
{
	/* Copies in flight land granted bytes and name this lane: wait for
	 * them; past the bound, their landings are left open (a leak, logged)
	 * rather than finished under a copy still holding their bracket. */
	bool quiet = lc__bounces_quiesce(&tl->bounces, r, lc__now_ns() + CLOSE_WAIT_NS);
	if (!quiet) {
		LC__WARN("tcp: a closing lane's device copies did not complete within %llu ms",
			 (unsigned long long)(CLOSE_WAIT_NS / 1000000));
		lc__bounces_forget(&tl->bounces, r);
	}
	r->fill = NULL;
	for (uint32_t i = r->run_i; r->phase == R_RUN && i < r->run_n; i++)
		if (r->run[i].land.g && (quiet || !r->run[i].inflight))
			lc__land_done(&r->run[i].land, false);
	lc__landq_fini(&r->q, quiet);
	if (r->prev)
		r->prev->next = r->next;
	else
		tl->lanes = r->next;
	if (r->next)
		r->next->prev = r->prev;
	tl->nlanes--;
	lc__io_fd_del(&tl->task, &r->iofd);
	close(r->fd);
	free(r);
}

/* The source address of an accepted connection, as the pending caps key it. */
static void peer_key(const struct sockaddr_storage *a, uint8_t key[16], uint8_t *len)
{
	*len = 0;
	if (a->ss_family == AF_INET) {
		memcpy(key, &((const struct sockaddr_in *)a)->sin_addr, 4);
		*len = 4;
	} else if (a->ss_family == AF_INET6) {
		memcpy(key, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
		*len = 16;
	}
}

/* Room for one more connection before its handshake: past a cap the
 * oldest lane still waiting for its HELLO is closed (that address's own
 * when the address has its share), so that idle connections cannot keep a
 * real peer out. Lanes that authenticated are never closed here. */
static void make_room(tcp_listener_t *tl, const uint8_t *key, uint8_t len)
{
	size_t all = 0, same = 0;
	rlane_t *old_all = NULL, *old_same = NULL;
	/* Newest first: the last one found is the oldest. */
	for (rlane_t *r = tl->lanes; r; r = r->next) {
		if (r->phase != R_HELLO || r->dead)
			continue;
		all++;
		old_all = r;
		if (lc__tcp_same_peer(r, key, len)) {
			same++;
			old_same = r;
		}
	}
	rlane_t *v = same >= tl->pending_per_addr                           ? old_same
		     : all >= tl->pending_max || tl->nlanes >= MAX_ACCEPTED ? old_all
									    : NULL;
	if (!v)
		return;
	LC__COUNT(tl->ctx, conns_evicted_pending);
	tl->evicted++;
	LC__WARN_PEER("tcp: closing the oldest connection without a handshake to take a new "
		      "one (%s cap; %llu closed so far)",
		      v == old_same && same >= tl->pending_per_addr ? "per-address" : "listener",
		      (unsigned long long)tl->evicted);
	rlane_close(tl, v);
}

static void rlane_add(tcp_listener_t *tl, int fd, const struct sockaddr_storage *a)
{
	rlane_t *r = NULL;
	uint8_t key[16], len;
	peer_key(a, key, &len);
	make_room(tl, key, len);
	if (tl->nlanes >= MAX_ACCEPTED || !(r = calloc(1, sizeof *r))) {
		LC__WARN_PEER("tcp: refusing a connection (%zu open)", tl->nlanes);
		close(fd);
		return;
	}
	/* Readable at once: a peer's HELLO usually came with the connection. */
	*r = (rlane_t){.tl = tl, .fd = fd, .phase = R_HELLO, .readable = true, .writable = true};
	r->active_ns = lc__now_ns();
	r->hello_deadline_ns = r->active_ns + tl->hello_ns;
	memcpy(r->peer, key, len);
	r->peer_len = len;
	lc__tcp_sockopts(fd, 0); /* buffers are inherited from the listening socket */
	if (lc__io_fd_add(&tl->task, &r->iofd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			  LANE_TAG)) {
		close(fd);
		free(r);
		return;
	}
	r->next = tl->lanes;
	if (tl->lanes)
		tl->lanes->prev = r;
	tl->lanes = r;
	tl->nlanes++;
}

static void accept_burst(tcp_listener_t *tl)
{
	for (int k = 0; k < ACCEPT_BURST; k++) {
		struct sockaddr_storage a = {0};
		socklen_t alen = sizeof a;
		int fd =
			accept4(tl->fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				LC__WARN_PEER("tcp: accept: %s", strerror(errno));
			if (errno != EINTR && errno != ECONNABORTED)
				return;
			continue;
		}
		rlane_add(tl, fd, &a);
	}
}

/* Whether authenticated lane r has been idle past the deadline: nothing
 * in flight, nothing read for idle_ns, and no byte waiting in its socket
 * (a write the sender just started keeps it). */
static bool rlane_idle(tcp_listener_t *tl, rlane_t *r, uint64_t now)
{
	uint8_t b;
	/* now may predate active_ns: the service's clock is read before it pumps. */
	if (!tl->idle_ns || r->phase == R_HELLO || r->dead || lc__tcp_rlane_busy(r) ||
	    now < r->active_ns + tl->idle_ns)
		return false;
	ssize_t n = recv(r->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) { /* not idle after all: read it */
		r->readable = true;
		r->active_ns = now;
		return false;
	}
	return true;
}

/* Pump ready lanes, close dead ones, expire handshakes and idle lanes.
 * Returns the next deadline: now when a lane still has bytes (its budget
 * ran out) or one was marked dead out of turn, 0 for none. */
static uint64_t listener_service(lc__io_task_t *t, uint64_t now)
{
	tcp_listener_t *tl = LC__CONTAINER_OF(t, tcp_listener_t, task);
	uint64_t next = UINT64_MAX;
	bool again = false;
	tl->reap = false;
	lc__tcp_slots_reap(tl);
	for (rlane_t *r = tl->lanes, *nx; r; r = nx) {
		nx = r->next;
		lc__tcp_rlane_flush(r);
		if (r->readable && !r->paused && !lc__tcp_rlane_held(r))
			lc__tcp_rlane_pump(r);
		if (r->phase == R_HELLO && !r->dead && now >= r->hello_deadline_ns) {
			LC__WARN_PEER("tcp: no handshake within %llu ms; closing",
				      (unsigned long long)(tl->hello_ns / 1000000));
			r->dead = true;
		}
		if (rlane_idle(tl, r, now)) {
			LC__COUNT(tl->ctx, lanes_idled_out);
			tl->idled++;
			if (lc__tcp_log_due(&tl->idled_log_ns, now))
				LC__INFO("tcp: closing an authenticated lane idle for %llu ms "
					 "(tcp_lane_idle_ms; %llu closed so far)",
					 (unsigned long long)((now - r->active_ns) / 1000000),
					 (unsigned long long)tl->idled);
			r->dead = true;
		}
		if (r->dead) {
			/* A peer that went (EOF, reset) after its handshake: the
			 * listener's owner may want to know (D: is P gone?). */
			bool gone = r->peer_gone && r->phase != R_HELLO;
			uint64_t room = r->wrote ? r->room : 0;
			rlane_close(tl, r);
			if (gone)
				lc__listener_peer_gone(tl->l, room);
			continue;
		}
		if (r->phase == R_HELLO)
			next = LC__MIN(next, r->hello_deadline_ns);
		else if (tl->idle_ns && !lc__tcp_rlane_busy(r))
			next = LC__MIN(next, r->active_ns + tl->idle_ns);
		again |= r->readable && !r->paused && !lc__tcp_rlane_held(r);
	}
	return again || tl->reap ? now : next == UINT64_MAX ? 0 : next;
}

static void listener_on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	tcp_listener_t *tl = LC__CONTAINER_OF(t, tcp_listener_t, task);
	if (f->tag == LISTEN_TAG) {
		accept_burst(tl);
		return;
	}
	rlane_t *r = LC__CONTAINER_OF(f, rlane_t, iofd);
	r->readable |= (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	r->hup |= (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	r->writable |= (events & EPOLLOUT) != 0;
}

static const lc__io_task_ops_t listener_task_ops = {
	.name = "tcp-listen",
	.on_event = listener_on_event,
	.service = listener_service,
};

/* ---- ops: receiver ---- */

static int listen_socket(tcp_listener_t *tl, const char *host, int port)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char ports[16];
	int one = 1;
	snprintf(ports, sizeof ports, "%d", port);
	int rc = getaddrinfo(host[0] ? host : NULL, ports, &hints, &res);
	if (rc || !res) {
		LC__WARN("tcp: cannot resolve %s: %s", host, gai_strerror(rc));
		return -EINVAL;
	}
	tl->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tl->fd < 0) {
		rc = -errno;
		goto out;
	}
	setsockopt(tl->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	lc__tcp_sockopts(tl->fd, tl->sockbuf); /* accepted sockets inherit the buffers */
	if (bind(tl->fd, res->ai_addr, res->ai_addrlen) || listen(tl->fd, 128))
		rc = -errno;
out:
	freeaddrinfo(res);
	return rc;
}

/* The URL peers should use: the bound address and the actual port. */
static int resolved_url(tcp_listener_t *tl, char *url, size_t cap)
{
	struct sockaddr_storage a;
	socklen_t alen = sizeof a;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	if (getsockname(tl->fd, (struct sockaddr *)&a, &alen) ||
	    getnameinfo((struct sockaddr *)&a, alen, host, sizeof host, port, sizeof port,
			NI_NUMERICHOST | NI_NUMERICSERV))
		return -errno ? -errno : -EINVAL;
	bool v6 = a.ss_family == AF_INET6;
	snprintf(url, cap, "tcp://%s%.200s%s:%.8s", v6 ? "[" : "", host, v6 ? "]" : "", port);
	return 0;
}

/* On the loop thread, as the task detaches: close every lane. */
static void listener_release(lc__io_task_t *t, void *arg)
{
	tcp_listener_t *tl = arg;
	while (tl->lanes)
		rlane_close(tl, tl->lanes);
	lc__io_fd_del(t, &tl->lfd);
}

static void tcp_listener_free(tcp_listener_t *tl)
{
	if (tl->fd >= 0)
		close(tl->fd);
	if (!lc__bounces_quiesce(&tl->bounces, NULL, lc__now_ns() + CLOSE_WAIT_NS)) {
		LC__WARN("tcp: device copies still in flight at listener close; leaking it");
		return;
	}
	lc__bounces_fini(&tl->bounces);
	free(tl);
}

/* The copy engine's thread: a bounce slot's copy completed. */
static void listener_kick(void *task)
{
	lc__io_kick(task);
}

int lc__tcp_listen(lc_listener_t *l, const char *url)
{
	char host[256];
	int port, rc;
	rc = lc__url_host_port(url, "tcp", host, sizeof host, &port);
	if (rc)
		return -EINVAL;
	tcp_listener_t *tl = calloc(1, sizeof *tl);
	if (!tl)
		return -ENOMEM;
	tl->fd = -1;
	tl->l = l;
	tl->ctx = l->ctx;
	lc__bounces_init(&tl->bounces, listener_kick, &tl->task);
	tl->hello_ns = (uint64_t)lc__ctx_cfg(l->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	tl->pending_max = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_pending_max);
	tl->pending_per_addr = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_pending_per_addr);
	tl->idle_ns = (uint64_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_lane_idle_ms) * 1000000ull;
	tl->lanes_max = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_lanes_max);
	tl->lanes_per_addr = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_tcp_lanes_per_addr);
	tl->sockbuf = lc__tcp_sockbuf(l->ctx);
	rc = listen_socket(tl, host, port);
	if (rc)
		goto fail;
	rc = resolved_url(tl, l->url, sizeof l->url);
	if (rc)
		goto fail;
	rc = lc__io_attach(l->ctx, &tl->task, &listener_task_ops);
	if (rc)
		goto fail;
	rc = lc__io_fd_add(&tl->task, &tl->lfd, tl->fd, EPOLLIN, LISTEN_TAG);
	if (rc) {
		lc__io_detach(&tl->task, NULL, NULL);
		goto fail;
	}
	l->priv = tl;
	return 0;
fail:
	tcp_listener_free(tl);
	return rc;
}

void lc__tcp_listener_close(lc_listener_t *l)
{
	tcp_listener_t *tl = l->priv;
	lc__io_detach(&tl->task, listener_release, tl);
	tcp_listener_free(tl);
	l->priv = NULL;
}
