/* The attacker's holder and the real peer's watch (holder.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "holder.h"
#include "testutil.h"

int adv_tcp_from(const char *src, const char *host, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (src) {
		struct sockaddr_in me = {.sin_family = AF_INET};
		inet_pton(AF_INET, src, &me.sin_addr);
		if (bind(fd, (struct sockaddr *)&me, sizeof me)) {
			close(fd);
			return -1;
		}
	}
	inet_pton(AF_INET, host, &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A reset: a plain close of a flood's sockets leaves the peer's kernel
 * with half-open entries whose handshakes it completes for a minute. */
void adv_close_reset(int fd)
{
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	close(fd);
}

/* What a PUSH says to finish a ZMTP 3.0 handshake with the NULL mechanism
 * (RFC 23): the 64-byte greeting, then a READY command naming its socket
 * type. Returns its length. */
static size_t zmtp_hello(unsigned char *b)
{
	static const char type[] = "Socket-Type", push[] = "PUSH";
	size_t n = 0;
	memset(b, 0, 64);
	b[0] = 0xff;
	b[9] = 0x7f;
	b[10] = 3; /* version 3.0 */
	memcpy(b + 12, "NULL", 4);
	n = 64; /* as-server 0 and the filler: zeros */
	unsigned char *c = b + n;
	size_t body = 1 + 5 + 1 + strlen(type) + 4 + strlen(push);
	c[0] = 0x04; /* a command, short */
	c[1] = (unsigned char)body;
	c[2] = 5;
	memcpy(c + 3, "READY", 5);
	c[8] = (unsigned char)strlen(type);
	memcpy(c + 9, type, strlen(type));
	unsigned char *v = c + 9 + strlen(type);
	v[0] = v[1] = v[2] = 0;
	v[3] = (unsigned char)strlen(push);
	memcpy(v + 4, push, strlen(push));
	return n + 2 + body;
}

enum { H_CONNECTING, H_SENT, H_READY }; /* of an open connection (fd >= 0) */

/* The inbox closed connection i: gone on this side too (a reset: nothing
 * lingers in either kernel's tables). */
static void hold_closed(hold_t *h, int i)
{
	if (h->st[i] == H_READY)
		atomic_fetch_sub(&h->ready, 1);
	else
		h->on_way--;
	adv_close_reset(h->fd[i]);
	h->fd[i] = -1;
	atomic_fetch_add(&h->closed, 1);
}

static void hold_event(hold_t *h, int i, short re)
{
	if (h->st[i] == H_CONNECTING && (re & (POLLOUT | POLLERR | POLLHUP))) {
		int err = 0;
		socklen_t el = sizeof err;
		getsockopt(h->fd[i], SOL_SOCKET, SO_ERROR, &err, &el);
		if (err ||
		    send(h->fd[i], h->hello, h->hello_len, MSG_NOSIGNAL) != (ssize_t)h->hello_len) {
			hold_closed(h, i);
			return;
		}
		h->st[i] = H_SENT;
	}
	if (!(re & (POLLIN | POLLHUP | POLLERR)) || h->st[i] == H_CONNECTING)
		return;
	unsigned char buf[512];
	ssize_t r = recv(h->fd[i], buf, sizeof buf, MSG_DONTWAIT);
	if (r > 0) {
		h->got[i] += (uint32_t)r;
		/* Its greeting and its READY: the inbox took ours. */
		if (h->st[i] == H_SENT && h->got[i] >= 64 + 2 + 6) {
			h->st[i] = H_READY;
			h->on_way--;
			atomic_fetch_add(&h->ready, 1);
			atomic_fetch_add(&h->ready_ever, 1);
		}
		return;
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	hold_closed(h, i);
}

/* More connections, while fewer than HOLD_WINDOW are on their way; with
 * refill on, each one the inbox closed is opened again (from the start
 * once all were opened), one a millisecond. */
static void hold_open(hold_t *h)
{
	uint64_t now = adv_now_ms();
	if (h->next == HOLD_MAX && atomic_load(&h->refill)) {
		h->next = 0;
		if (h->refill_ms + 10 < now) /* bursts of 10 at most */
			h->refill_ms = now - 10;
	}
	for (; h->next < HOLD_MAX && h->on_way < HOLD_WINDOW; h->next++) {
		int i = h->next;
		char src[32];
		if (h->fd[i] >= 0)
			continue;
		if (h->refill_ms) {
			if (h->refill_ms > now)
				break;
			h->refill_ms++;
		}
		h->got[i] = 0;
		snprintf(src, sizeof src, "127.0.0.%d", h->naddrs == 1 ? 1 : 2 + i % h->naddrs);
		h->fd[i] = adv_tcp_from(src, h->host, h->port);
		if (h->fd[i] < 0) {
			atomic_fetch_add(&h->closed, 1);
			continue;
		}
		h->st[i] = H_CONNECTING;
		h->on_way++;
		atomic_fetch_add(&h->opened, 1);
	}
	atomic_store(&h->settled, h->next == HOLD_MAX && !h->on_way);
}

static void *hold_main(void *arg)
{
	hold_t *h = arg;
	static struct pollfd pf[HOLD_MAX];
	static int idx[HOLD_MAX];
	while (!atomic_load(&h->stop)) {
		hold_open(h);
		int n = 0;
		for (int i = 0; i < HOLD_MAX; i++) {
			if (h->fd[i] < 0)
				continue;
			pf[n] = (struct pollfd){.fd = h->fd[i],
						.events = h->st[i] == H_CONNECTING ? POLLOUT
										   : POLLIN};
			idx[n++] = i;
		}
		if (poll(pf, (nfds_t)n, 20) <= 0)
			continue;
		for (int k = 0; k < n; k++)
			if (pf[k].revents)
				hold_event(h, idx[k], pf[k].revents);
	}
	return NULL;
}

void hold_start(hold_t *h, const char *host, int port, int naddrs)
{
	memset(h, 0, sizeof *h);
	memset(h->fd, 0xff, sizeof h->fd);
	h->hello_len = zmtp_hello(h->hello);
	snprintf(h->host, sizeof h->host, "%s", host);
	h->port = port;
	h->naddrs = naddrs;
	TU_CHECK(pthread_create(&h->th, NULL, hold_main, h) == 0, "pthread_create");
}

void hold_stop(hold_t *h)
{
	atomic_store(&h->stop, true);
	pthread_join(h->th, NULL);
	for (int i = 0; i < HOLD_MAX; i++)
		if (h->fd[i] >= 0)
			adv_close_reset(h->fd[i]);
}

void hold_say(hold_t *h, const char *when)
{
	fprintf(stderr,
		"attacker %s: %d connections opened, %d handshaken and held now (%d ever), %d "
		"closed by the inbox\n",
		when, atomic_load(&h->opened), atomic_load(&h->ready), atomic_load(&h->ready_ever),
		atomic_load(&h->closed));
}

/* The local ports of pid's established TCP connections to remote port
 * rport into ports[cap]; how many. The kernel's socket table through
 * sock_diag (established sockets only: a table full of the flood's
 * TIME_WAITs, as /proc/net/tcp shows it, takes 100 ms to read), matched
 * by inode to the sockets in /proc/PID/fd. */
static int conns_of(pid_t pid, int rport, int *ports, int cap)
{
	unsigned long inodes[256];
	int ni = 0, n = 0;
	char path[64], link[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return 0;
	for (struct dirent *e; (e = readdir(dir)) && ni < 256;) {
		char fp[320];
		snprintf(fp, sizeof fp, "%s/%s", path, e->d_name);
		ssize_t l = readlink(fp, link, sizeof link - 1);
		unsigned long ino;
		if (l > 0 && (link[l] = '\0', sscanf(link, "socket:[%lu]", &ino) == 1))
			inodes[ni++] = ino;
	}
	closedir(dir);
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return 0;
	static const int fams[] = {AF_INET, AF_INET6};
	for (size_t f = 0; f < 2; f++) {
		struct {
			struct nlmsghdr h;
			struct inet_diag_req_v2 r;
		} req = {.h = {.nlmsg_len = sizeof req,
			       .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
			 .r = {.sdiag_family = (uint8_t)fams[f],
			       .sdiag_protocol = IPPROTO_TCP,
			       .idiag_states = 1u << 1 /* TCP_ESTABLISHED */}};
		if (send(nl, &req, sizeof req, 0) != (ssize_t)sizeof req)
			break;
		static char buf[65536];
		for (bool more = true; more;) {
			ssize_t len = recv(nl, buf, sizeof buf, 0);
			if (len <= 0)
				break;
			for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
			     h = NLMSG_NEXT(h, len)) {
				if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
					more = false;
					break;
				}
				const struct inet_diag_msg *m = NLMSG_DATA(h);
				if (ntohs(m->id.idiag_dport) != rport)
					continue;
				for (int i = 0; i < ni; i++)
					if (inodes[i] == m->idiag_inode && n < cap)
						ports[n++] = ntohs(m->id.idiag_sport);
			}
		}
	}
	close(nl);
	return n;
}

static void *peer_watch_main(void *arg)
{
	peer_watch_t *c = arg;
	while (!atomic_load(&c->stop)) {
		int now[16], k = conns_of(c->pid, c->rport, now, 16);
		for (int i = 0; i < k; i++) {
			bool seen = false;
			for (int j = 0; j < c->n && !seen; j++)
				seen = c->ports[j] == now[i];
			if (!seen && c->n < 64)
				c->ports[c->n++] = now[i];
		}
		c->looks++;
		usleep(1000);
	}
	return NULL;
}

void peer_watch_start(peer_watch_t *c, pid_t pid, int rport)
{
	memset(c, 0, sizeof *c);
	c->pid = pid;
	c->rport = rport;
	TU_CHECK(pthread_create(&c->th, NULL, peer_watch_main, c) == 0, "pthread_create");
}

void peer_watch_stop(peer_watch_t *c)
{
	atomic_store(&c->stop, true);
	pthread_join(c->th, NULL);
}
