/* The adversarial tests' shared harness (harness.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
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
