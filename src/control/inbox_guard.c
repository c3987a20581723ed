/* The guard of a ZeroMQ inbox (control/inbox_guard.h has the why). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/filter.h>

#include "control/inbox_guard.h"
#include "core/config.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>

/* A connection's peer: its address (IPv4-mapped as IPv4; len 0: not IP)
 * and port. */
typedef struct peer {
	uint8_t len;
	uint16_t port;
	unsigned char addr[16];
} peer_t;

/* One connection held: its fd (libzmq's), peer, when it came (seq: the
 * order of accepts) and whether it proved itself (vouched). */
typedef struct held {
	int fd;
	bool proven;
	peer_t peer;
	uint64_t seq;
} held_t;

/* A vouch for a connection whose ACCEPTED the guard has not read yet: the
 * owner can read a connection's first message before the guard reads its
 * accept (an fd number the guard still knows as an older connection, one
 * it evicted or refused: their DISCONNECTED comes first). Keyed by what
 * holds the fd at the vouch (its peer, port included), taken by that
 * connection's accept within VOUCH_EARLY_MS. */
typedef struct early {
	int fd;
	peer_t peer;
	uint64_t ms; /* 0: unused */
} early_t;

#define VOUCH_EARLY 16
#define VOUCH_EARLY_MS 2000

struct lc__inbox_guard {
	void *mon; /* PAIR end of the monitor; the thread's */
	pthread_t thread;
	_Atomic bool stop;
	_Atomic uint64_t refused, nheld, door_shut, evicted;
	unsigned max, per_addr;
	pthread_mutex_t lock; /* the table, the early vouches and the door */
	held_t *held;         /* max of them; n in use, nproven of them proven */
	unsigned n, nproven;
	uint64_t seq;
	early_t early[VOUCH_EARLY];
	int listen_fd, port; /* from ZMQ_EVENT_LISTENING */
	int spare;           /* a descriptor kept to free on EMFILE */
	enum door_why { DOOR_OPEN, DOOR_FULL, DOOR_EMFILE } door; /* see door() */
	uint64_t door_ms;                                         /* when it last changed */
};

static _Atomic uint64_t guard_seq;

#define DOOR_EMFILE_MS 250 /* out of descriptors: the door's shortest shut */

/* An IPv6 address into p (IPv4-mapped as IPv4). */
static void peer_v6(peer_t *p, const struct in6_addr *a)
{
	if (IN6_IS_ADDR_V4MAPPED(a)) {
		memcpy(p->addr, a->s6_addr + 12, 4);
		p->len = 4;
	} else {
		memcpy(p->addr, a, 16);
		p->len = 16;
	}
}

/* The peer of fd into *out (zeroed first); false when it has none or is
 * not IP. */
static bool peer_of(int fd, peer_t *out)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	*out = (peer_t){0};
	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		return false;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
		memcpy(out->addr, &a->sin_addr, 4);
		out->len = 4;
		out->port = ntohs(a->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
		peer_v6(out, &a->sin6_addr);
		out->port = ntohs(a->sin6_port);
	}
	return out->len > 0;
}

static bool same_host(const peer_t *a, const peer_t *b)
{
	return a->len == b->len && !memcmp(a->addr, b->addr, a->len);
}

static bool same_peer(const peer_t *a, const peer_t *b)
{
	return same_host(a, b) && a->port == b->port;
}

static int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		return -1;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -1;
}

static void addr_text(const unsigned char *a, uint8_t n, char *buf, size_t cap)
{
	if (!n || !inet_ntop(n == 4 ? AF_INET : AF_INET6, a, buf, (socklen_t)cap))
		snprintf(buf, cap, "?");
}

/* End connection fd (libzmq's: shutdown(2), never close; libzmq sees the end
 * and closes it). The event is read after the fact: fd may since have been
 * closed and its number reused. Only a connection accepted on this inbox's
 * port from the same peer is shut down; never anything else of the
 * process. */
static void end_conn(const lc__inbox_guard_t *g, int fd, const peer_t *p)
{
	int one = 0;
	socklen_t ol = sizeof one;
	peer_t now;
	peer_of(fd, &now);
	if (g->port > 0 && local_port(fd) == g->port &&
	    !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &one, &ol) && !one && same_peer(&now, p))
		shutdown(fd, SHUT_RDWR);
}

static void refuse(lc__inbox_guard_t *g, int fd, const peer_t *p, const char *why)
{
	end_conn(g, fd, p);
	uint64_t total = atomic_fetch_add(&g->refused, 1) + 1;
	char t[64];
	addr_text(p->addr, p->len, t, sizeof t);
	LC__LOG_PEER(LC_LOG_WARN,
		     "channel: inbox on port %d refused a connection from %s: %s (%llu refused "
		     "so far)",
		     g->port, t, why, (unsigned long long)total);
}

static bool is_listener(const lc__inbox_guard_t *g, int fd);

/* The door: while it is shut, the kernel drops whatever comes to the
 * listener (a socket filter that keeps no byte), so a flood costs P no
 * descriptor and no accept while it lasts, and the peers' kernels retry
 * their SYNs. Shut while the table is full of proven connections (nothing
 * to evict for a newcomer; open again below the cap), and
 * while the process is out of descriptors (open again once the spare is
 * back and DOOR_EMFILE_MS has passed): with nothing new queued, the accept
 * queue empties and libzmq's listener stops retrying. A connection whose
 * handshake completes in the instant the filter goes on inherits it, hears
 * nothing and is dropped at inbox_handshake_ms; its peer connects again. */
static void door(lc__inbox_guard_t *g, enum door_why why)
{
	if (g->listen_fd < 0 || (g->door != DOOR_OPEN) == (why != DOOR_OPEN) ||
	    !is_listener(g, g->listen_fd)) {
		if (g->door != DOOR_OPEN && why != DOOR_OPEN)
			g->door = why; /* the latest reason decides when it opens */
		return;
	}
	struct sock_filter drop = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = {.len = 1, .filter = &drop};
	int unused = 0; /* the kernel wants an int's length even here */
	int rc = why != DOOR_OPEN ? setsockopt(g->listen_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog,
					       sizeof prog)
				  : setsockopt(g->listen_fd, SOL_SOCKET, SO_DETACH_FILTER, &unused,
					       sizeof unused);
	if (rc) { /* refusals after the fact only */
		LC__LOG_PEER(LC_LOG_WARN,
			     "channel: inbox on port %d: cannot %s its socket filter: %s", g->port,
			     why != DOOR_OPEN ? "attach" : "detach", strerror(errno));
		return;
	}
	g->door = why;
	g->door_ms = (lc__now_ns() / 1000000);
	if (why != DOOR_OPEN)
		atomic_fetch_add(&g->door_shut, 1);
	if (why != DOOR_OPEN)
		LC__LOG_PEER(LC_LOG_WARN,
			     "channel: inbox on port %d %s (%u connections held): new connections "
			     "are dropped %s",
			     g->port,
			     why == DOOR_FULL ? "full of proven peers" : "out of descriptors", g->n,
			     why == DOOR_FULL ? "until one ends (inbox_conns_max)"
					      : "until descriptors are free again");
}

/* Full, and every connection held proven: a newcomer could only be
 * refused. */
static bool full_of_proven(const lc__inbox_guard_t *g)
{
	return g->n >= g->max && g->nproven >= g->n;
}

static void door_if_full(lc__inbox_guard_t *g)
{
	if (full_of_proven(g))
		door(g, DOOR_FULL);
}

static void drop(lc__inbox_guard_t *g, held_t *h)
{
	g->nproven -= h->proven;
	*h = g->held[--g->n];
	atomic_store(&g->nheld, g->n);
}

/* Close held connection h to make room for a newcomer (cap: which cap). */
static void evict(lc__inbox_guard_t *g, held_t *h, const char *cap)
{
	char t[64];
	addr_text(h->peer.addr, h->peer.len, t, sizeof t);
	end_conn(g, h->fd, &h->peer);
	uint64_t total = atomic_fetch_add(&g->evicted, 1) + 1;
	LC__LOG_PEER(LC_LOG_WARN,
		     "channel: inbox on port %d closed a connection from %s that had proven "
		     "nothing, the oldest such %s, to take a new one (%llu evicted so far)",
		     g->port, t, cap, (unsigned long long)total);
	drop(g, h); /* its DISCONNECTED then finds nothing */
}

/* Whether a vouch came for this connection before its accept was read. */
static bool vouched_early(lc__inbox_guard_t *g, int fd, const peer_t *p)
{
	uint64_t now = lc__now_ns() / 1000000;
	for (unsigned i = 0; i < VOUCH_EARLY; i++) {
		early_t *e = &g->early[i];
		if (!e->ms || e->fd != fd)
			continue;
		bool mine = now - e->ms < VOUCH_EARLY_MS && same_peer(&e->peer, p);
		e->ms = 0;
		if (mine)
			return true;
	}
	return false;
}

/* A connection past a cap makes room by evicting the oldest held one that
 * has proven nothing: its own address's when that address holds its
 * share (inbox_conns_per_addr), else the inbox's. Proven connections are
 * never evicted; with none to evict the newcomer is refused. */
static void on_accepted(lc__inbox_guard_t *g, int fd)
{
	peer_t a;
	peer_of(fd, &a);
	if (g->door == DOOR_EMFILE) {
		/* What waited in the queue: let libzmq empty it (it closes what
		 * is refused), so that its listener stops retrying. */
		refuse(g, fd, &a, "out of descriptors");
		return;
	}
	unsigned same = 0;
	held_t *old_all = NULL, *old_same = NULL;
	for (unsigned i = 0; i < g->n; i++) {
		held_t *h = &g->held[i];
		bool mine = a.len && same_host(&h->peer, &a);
		same += mine;
		if (h->proven)
			continue;
		if (!old_all || h->seq < old_all->seq)
			old_all = h;
		if (mine && (!old_same || h->seq < old_same->seq))
			old_same = h;
	}
	if (a.len && same >= g->per_addr) {
		if (!old_same) {
			refuse(g, fd, &a,
			       "inbox_conns_per_addr reached for its address, every one proven");
			return;
		}
		evict(g, old_same, "of its address (inbox_conns_per_addr)");
	} else if (g->n >= g->max) {
		if (!old_all) {
			refuse(g, fd, &a, "inbox_conns_max reached, every one proven");
			door_if_full(g);
			return;
		}
		evict(g, old_all, "of the inbox (inbox_conns_max)");
	}
	held_t *h = &g->held[g->n++];
	*h = (held_t){.fd = fd, .peer = a, .seq = g->seq++, .proven = vouched_early(g, fd, &a)};
	g->nproven += h->proven;
	atomic_store(&g->nheld, g->n);
	door_if_full(g);
}

static void on_disconnected(lc__inbox_guard_t *g, int fd)
{
	/* The most recent first: a reused number belongs to the newest. */
	held_t *h = NULL;
	for (unsigned i = 0; i < g->n; i++)
		if (g->held[i].fd == fd && (!h || g->held[i].seq > h->seq))
			h = &g->held[i];
	if (!h)
		return; /* refused or evicted: no longer held */
	drop(g, h);
	if (g->n < g->max && g->door == DOOR_FULL)
		door(g, DOOR_OPEN);
}

/* Whether fd is a listening socket on the inbox's port. */
static bool is_listener(const lc__inbox_guard_t *g, int fd)
{
	int on = 0;
	socklen_t ol = sizeof on;
	return fd >= 0 && !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) && on &&
	       local_port(fd) == g->port;
}

/* The listener libzmq bound. Made non-blocking: libzmq accepts only once
 * poll says so and takes EAGAIN as "someone else took it", and the drain
 * below must never block on an empty backlog (nor make libzmq's accept
 * block by taking the connection it was woken for). */
static void on_listening(lc__inbox_guard_t *g, int fd)
{
	g->port = local_port(fd);
	if (!is_listener(g, fd))
		return;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return; /* no drain on EMFILE then */
	g->listen_fd = fd;
}

/* Out of descriptors: libzmq's listener would retry its accept at once,
 * forever. Free the spare, accept and close what waits, take it back. */
static void on_accept_failed(lc__inbox_guard_t *g, int err)
{
	if ((err != EMFILE && err != ENFILE) || !is_listener(g, g->listen_fd))
		return;
	door(g, DOOR_EMFILE);
	if (g->spare >= 0)
		close(g->spare);
	unsigned drained = 0;
	for (int fd; drained < 4096 &&
		     (fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;
	     drained++)
		close(fd);
	g->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (drained) {
		uint64_t total = atomic_fetch_add(&g->refused, drained) + drained;
		LC__LOG_PEER(LC_LOG_WARN,
			     "channel: inbox on port %d out of descriptors (%s): closed %u waiting "
			     "connections (%llu refused so far)",
			     g->port, strerror(err), drained, (unsigned long long)total);
	}
}

static void *guard_main(void *arg)
{
	lc__inbox_guard_t *g = arg;
	pthread_setname_np(pthread_self(), "lc-inbox-guard");
	while (!atomic_load(&g->stop)) {
		zmq_pollitem_t it = {.socket = g->mon, .events = ZMQ_POLLIN};
		/* lc__inbox_guard_stop ends the monitor: MONITOR_STOPPED wakes
		 * this at once; the timeout only bounds a missed one. */
		int rc = zmq_poll(&it, 1, g->door == DOOR_EMFILE ? DOOR_EMFILE_MS : 1000);
		/* Lost to libzmq after a drain: take it back once one is free. */
		if (g->spare < 0)
			g->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
		pthread_mutex_lock(&g->lock);
		if (g->door == DOOR_EMFILE && g->spare >= 0 &&
		    (lc__now_ns() / 1000000) - g->door_ms >= DOOR_EMFILE_MS)
			door(g, full_of_proven(g) ? DOOR_FULL : DOOR_OPEN);
		pthread_mutex_unlock(&g->lock);
		if (rc <= 0)
			continue;
		/* Out of descriptors, libzmq reports every retry of its accept:
		 * one drain for each batch of events, not one per event. */
		int accept_err = 0;
		for (int n = 0; n < 1024; n++) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, g->mon, ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				break;
			}
			uint16_t ev = 0;
			uint32_t val = 0;
			if (zmq_msg_size(&m) >= 6) {
				memcpy(&ev, zmq_msg_data(&m), 2);
				memcpy(&val, (char *)zmq_msg_data(&m) + 2, 4);
			}
			while (zmq_msg_more(&m)) { /* the endpoint */
				zmq_msg_close(&m);
				zmq_msg_init(&m);
				if (zmq_msg_recv(&m, g->mon, ZMQ_DONTWAIT) < 0)
					break;
			}
			zmq_msg_close(&m);
			pthread_mutex_lock(&g->lock);
			if (ev == ZMQ_EVENT_LISTENING)
				on_listening(g, (int)val);
			else if (ev == ZMQ_EVENT_ACCEPTED)
				on_accepted(g, (int)val);
			else if (ev == ZMQ_EVENT_DISCONNECTED)
				on_disconnected(g, (int)val);
			else if (ev == ZMQ_EVENT_ACCEPT_FAILED && (val == EMFILE || val == ENFILE))
				accept_err = (int)val;
			else if (ev == ZMQ_EVENT_MONITOR_STOPPED)
				atomic_store(&g->stop, true);
			pthread_mutex_unlock(&g->lock);
		}
		if (accept_err) {
			pthread_mutex_lock(&g->lock);
			on_accept_failed(g, accept_err);
			pthread_mutex_unlock(&g->lock);
		}
	}
	zmq_close(g->mon);
	return NULL;
}

int lc__inbox_guard_start(void *zmq, void *sock, lc__inbox_guard_t **out)
{
	lc__inbox_guard_t *g = calloc(1, sizeof *g);
	if (!g)
		return -ENOMEM;
	g->max = (unsigned)lc__config_env_int(LC__CFG_inbox_conns_max);
	g->per_addr = (unsigned)lc__config_env_int(LC__CFG_inbox_conns_per_addr);
	/* Never more than a quarter of the descriptors the process may open:
	 * an inbox at its cap must leave the rest of the process (sessions,
	 * lanes) room, and libzmq's listener spins while none is left. */
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 4 < g->max) {
		g->max = (unsigned)LC__MAX(rl.rlim_cur / 4, 1);
		LC__INFO("channel: an inbox holds at most %u connections (a quarter of "
			 "RLIMIT_NOFILE %llu, under inbox_conns_max)",
			 g->max, (unsigned long long)rl.rlim_cur);
	}
	g->per_addr = LC__MIN(g->per_addr, g->max);
	g->listen_fd = -1;
	g->held = calloc(g->max, sizeof *g->held);
	g->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int rc = -ENOMEM;
	if (!g->held)
		goto fail;
	pthread_mutex_init(&g->lock, NULL);
	char name[64];
	snprintf(name, sizeof name, "inproc://lc-inbox-guard-%llu",
		 (unsigned long long)atomic_fetch_add(&guard_seq, 1));
	int events = ZMQ_EVENT_LISTENING | ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
		     ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_MONITOR_STOPPED;
	/* The reading end connects first (inproc may connect before the bind):
	 * stopping a monitor sends MONITOR_STOPPED with a blocking send, which
	 * never returns while nothing is connected to read it. */
	g->mon = zmq_socket(zmq, ZMQ_PAIR);
	int linger = 0, hwm = 0; /* no event dropped: the count must stay right */
	if (!g->mon) {
		rc = -zmq_errno();
		goto fail;
	}
	zmq_setsockopt(g->mon, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(g->mon, ZMQ_RCVHWM, &hwm, sizeof hwm);
	if (zmq_connect(g->mon, name)) {
		rc = -zmq_errno();
		goto fail_pair;
	}
	if (zmq_socket_monitor(sock, name, events)) {
		rc = -zmq_errno();
		goto fail_pair;
	}
	if (pthread_create(&g->thread, NULL, guard_main, g)) {
		rc = -EAGAIN;
		goto fail_monitor;
	}
	*out = g;
	return 0;
fail_monitor:
	zmq_socket_monitor(sock, NULL, 0); /* while g->mon still reads */
fail_pair:
	zmq_close(g->mon);
	pthread_mutex_destroy(&g->lock);
fail:
	if (g->spare >= 0)
		close(g->spare);
	free(g->held);
	free(g);
	return rc;
}

void lc__inbox_guard_stop(lc__inbox_guard_t *g, void *sock)
{
	if (!g)
		return;
	zmq_socket_monitor(sock, NULL, 0);
	atomic_store(&g->stop, true);
	pthread_join(g->thread, NULL);
	if (g->spare >= 0)
		close(g->spare);
	pthread_mutex_destroy(&g->lock);
	free(g->held);
	free(g);
}

/* Peer-Address as libzmq writes it (no port), as peer_of keys it; false
 * when it is not an IP address. */
static bool addr_parse(const char *text, peer_t *out)
{
	struct in6_addr a6;
	*out = (peer_t){0};
	if (inet_pton(AF_INET, text, out->addr) == 1)
		out->len = 4;
	else if (inet_pton(AF_INET6, text, &a6) == 1)
		peer_v6(out, &a6);
	return out->len > 0;
}

void lc__inbox_guard_vouch(lc__inbox_guard_t *g, int fd, const char *peer_address)
{
	peer_t said, now;
	/* What holds fd now: a connection from the message's address (the
	 * message's own, or a newer one of the same host), else the message
	 * came on a connection since gone and there is no one to vouch for. */
	if (!g || fd < 0 || !peer_address || !addr_parse(peer_address, &said) ||
	    !peer_of(fd, &now) || !same_host(&now, &said))
		return;
	pthread_mutex_lock(&g->lock);
	held_t *h = NULL;
	for (unsigned i = 0; i < g->n && !h; i++)
		if (g->held[i].fd == fd && same_peer(&g->held[i].peer, &now))
			h = &g->held[i];
	if (h && !h->proven) {
		h->proven = true;
		g->nproven++;
		door_if_full(g);
	} else if (!h) { /* its accept not read yet: the oldest slot takes it */
		early_t *e = &g->early[0];
		for (unsigned i = 1; i < VOUCH_EARLY && e->ms; i++)
			if (!g->early[i].ms || g->early[i].ms < e->ms)
				e = &g->early[i];
		*e = (early_t){.fd = fd, .peer = now, .ms = LC__MAX(lc__now_ns() / 1000000, 1)};
	}
	pthread_mutex_unlock(&g->lock);
}

uint64_t lc__inbox_guard_refused(const lc__inbox_guard_t *g)
{
	return g ? atomic_load(&((lc__inbox_guard_t *)g)->refused) : 0;
}

uint64_t lc__inbox_guard_door_shut(const lc__inbox_guard_t *g)
{
	return g ? atomic_load(&((lc__inbox_guard_t *)g)->door_shut) : 0;
}

uint64_t lc__inbox_guard_evicted(const lc__inbox_guard_t *g)
{
	return g ? atomic_load(&((lc__inbox_guard_t *)g)->evicted) : 0;
}

uint64_t lc__inbox_guard_held(const lc__inbox_guard_t *g)
{
	return g ? atomic_load(&((lc__inbox_guard_t *)g)->nheld) : 0;
}

#else
typedef int lc__inbox_guard_unused_t; /* a translation unit may not be empty */
#endif
