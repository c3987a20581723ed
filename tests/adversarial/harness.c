/* The adversarial tests' shared harness (harness.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "testutil.h"

int adv_status_fd = -1;

uint64_t adv_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

char adv_wait_byte(int fd)
{
	char c;
	if (read(fd, &c, 1) != 1)
		return 'q';
	return c;
}

void adv_spawn(adv_proc_t *pr, adv_child_fn fn, void *arg)
{
	int st[2], go[2];
	TU_CHECK(pipe(st) == 0 && pipe(go) == 0, "pipe");
	memset(pr, 0, sizeof *pr);
	pr->pid = fork();
	TU_CHECK(pr->pid >= 0, "fork");
	if (pr->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(st[0]);
		close(go[1]);
		adv_status_fd = st[1];
		_exit(fn(arg, go[0]));
	}
	close(st[1]);
	close(go[0]);
	pr->status_fd = st[0];
	pr->go_fd = go[1];
}

void adv_send_byte(adv_proc_t *pr, char c)
{
	TU_CHECK(write(pr->go_fd, &c, 1) == 1, "go pipe");
}

void adv_go(adv_proc_t *pr)
{
	adv_send_byte(pr, 'g');
}

bool adv_wait_line(adv_proc_t *p, const char *prefix, int timeout_ms, char *out, size_t cap)
{
	uint64_t dl = adv_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		char *nl;
		while ((nl = memchr(p->buf, '\n', p->len))) {
			*nl = '\0';
			bool hit = !strncmp(p->buf, prefix, strlen(prefix));
			if (hit && out)
				snprintf(out, cap, "%.*s", (int)cap - 1, p->buf);
			size_t used = (size_t)(nl - p->buf) + 1;
			memmove(p->buf, nl + 1, p->len - used);
			p->len -= used;
			if (hit)
				return true;
		}
		if (adv_now_ms() >= dl)
			return false;
		struct timeval tv = {0, 50000};
		fd_set fds;
		FD_ZERO(&fds);
		FD_SET(p->status_fd, &fds);
		if (select(p->status_fd + 1, &fds, NULL, NULL, &tv) > 0) {
			ssize_t n = read(p->status_fd, p->buf + p->len, sizeof p->buf - 1 - p->len);
			if (n <= 0)
				return false;
			p->len += (size_t)n;
		}
	}
}

int adv_reap(adv_proc_t *p, int timeout_ms)
{
	uint64_t dl = adv_now_ms() + (uint64_t)timeout_ms;
	int st;
	close(p->go_fd); /* EOF: quit */
	while (adv_now_ms() < dl) {
		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			close(p->status_fd);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		usleep(5000);
	}
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
	close(p->status_fd);
	return 124;
}

void *adv_push_to(void *zc, const char *ep)
{
	void *tx = zmq_socket(zc, ZMQ_PUSH);
	int linger = 0, hwm = 100000;
	zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(tx, ZMQ_SNDHWM, &hwm, sizeof hwm);
	TU_CHECK(zmq_connect(tx, ep) == 0, "connect %s", ep);
	return tx;
}

void adv_send_msg(void *tx, const lc__msg_t *m, int flags)
{
	uint8_t *buf;
	size_t len;
	TU_OK(lc__msg_encode(m, &buf, &len));
	zmq_send(tx, buf, len, flags);
	free(buf);
}

bool adv_inbox_next(void *rx, int type, int ms, lc__msg_t *m)
{
	for (uint64_t dl = adv_now_ms() + (uint64_t)ms; adv_now_ms() < dl;) {
		zmq_pollitem_t it = {.socket = rx, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, 50) <= 0)
			continue;
		zmq_msg_t zm;
		zmq_msg_init(&zm);
		if (zmq_msg_recv(&zm, rx, 0) < 0) {
			zmq_msg_close(&zm);
			continue;
		}
		memset(m, 0, sizeof *m);
		int rc = lc__msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), m, NULL, 0);
		zmq_msg_close(&zm);
		if (!rc && m->type == type)
			return true;
		if (!rc)
			lc__msg_free(m);
	}
	return false;
}

int adv_loopback_port(int *fd_out)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	TU_CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
			 getsockname(s, (struct sockaddr *)&a, &n) == 0 &&
			 (!fd_out || listen(s, 16) == 0),
		 "a loopback port");
	if (fd_out)
		*fd_out = s;
	return ntohs(a.sin_port);
}

static void *bs_main(void *arg)
{
	adv_bs_t *b = arg;
	for (;;) {
		int c = accept(b->fd, NULL, NULL);
		if (c < 0)
			return NULL;
		char req[2048];
		size_t n = 0;
		while (n + 1 < sizeof req && !memmem(req, n, "\r\n\r\n", 4)) {
			struct pollfd p = {.fd = c, .events = POLLIN};
			ssize_t k = poll(&p, 1, 5000) == 1 ? recv(c, req + n, sizeof req - 1 - n, 0)
							   : -1;
			if (k <= 0)
				break;
			n += (size_t)k;
		}
		req[n] = '\0';
		char out[2048];
		pthread_mutex_lock(&b->lock);
		const char *body = strstr(req, "engine_rank=-1") ? b->parallel
				   : strstr(req, " /health")     ? "ok"
								 : b->rank;
		int len = snprintf(out, sizeof out,
				   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
				   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
				   strlen(body), body);
		pthread_mutex_unlock(&b->lock);
		if (send(c, out, (size_t)len, MSG_NOSIGNAL) < 0) {
			/* the client went */
		}
		close(c);
	}
}

void adv_bs_start(adv_bs_t *b)
{
	pthread_mutex_init(&b->lock, NULL);
	snprintf(b->addr, sizeof b->addr, "127.0.0.1:%d", adv_loopback_port(&b->fd));
	TU_CHECK(pthread_create(&b->th, NULL, bs_main, b) == 0, "the bootstrap server's thread");
}

void adv_bs_set(adv_bs_t *b, const char *parallel, const char *rank)
{
	pthread_mutex_lock(&b->lock);
	if (parallel)
		snprintf(b->parallel, sizeof b->parallel, "%s", parallel);
	if (rank)
		snprintf(b->rank, sizeof b->rank, "%s", rank);
	pthread_mutex_unlock(&b->lock);
}

void adv_bs_stop(adv_bs_t *b)
{
	shutdown(b->fd, SHUT_RDWR);
	close(b->fd);
	pthread_join(b->th, NULL);
	pthread_mutex_destroy(&b->lock);
}
