/*
 * lc_netdelay: a userspace delay (and loss) link between two TUN devices,
 * for kernels without sch_netem.
 *
 *   lc_netdelay [--delay-us N] [--loss PCT] [--seed N] [--queue N] TUN_A TUN_B
 *
 * Creates TUN_A and TUN_B (IFF_TUN | IFF_NO_PI, /dev/net/tun; needs
 * CAP_NET_ADMIN) and forwards every IP packet read from one to the other
 * after holding it for --delay-us (1000) microseconds, both directions.
 * With --loss PCT a packet is dropped with that probability (xorshift PRNG
 * seeded by --seed, default 1, so runs repeat). Each direction is a FIFO
 * of at most --queue packets (4096) and 64 MiB; a packet that finds it full
 * is dropped and counted. One thread, ppoll(2), CLOCK_MONOTONIC deadlines.
 *
 * Once both devices exist it prints "ready TUN_A TUN_B" on stdout: the
 * caller may then move them into network namespaces (`ip link set TUN_A
 * netns NS`; the open file stays attached), address them and set their MTU
 * (a large MTU, e.g. 65000, keeps the packet rate and so the cost low). The
 * devices disappear when the program exits. On SIGUSR1 it prints one line
 * of JSON statistics on stdout (totals so far) and goes on; on SIGTERM or
 * SIGINT it prints them and exits 0. It gets SIGTERM when its parent dies
 * (a test killed by its timeout leaves no forwarder behind).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* ppoll */
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define PKT_MAX 65536
#define QUEUE_BYTES_MAX (64u << 20)
#define READ_BURST 64 /* packets read from one device before looking elsewhere */

typedef struct pkt {
	uint64_t due_ns;  /* when it may leave */
	uint64_t read_ns; /* when it was read */
	size_t len;
	uint8_t *data;
} pkt_t;

typedef struct dir {
	const char *name; /* "a_to_b" */
	int in, out;      /* read from in, write to out */
	pkt_t *q;         /* ring of cap slots */
	size_t cap, head, count, bytes;
	uint64_t packets, fwd_bytes, lost, dropped_full, write_errors;
	uint64_t held_min_ns, held_max_ns, held_sum_ns;
} dir_t;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_state = 1;

static uint64_t rng_next(void)
{
	/* xorshift64* */
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static int tun_open(const char *name)
{
	struct ifreq ifr;
	if (strlen(name) >= IFNAMSIZ) {
		fprintf(stderr, "netdelay: device name %s is longer than %d\n", name, IFNAMSIZ - 1);
		return -1;
	}
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "netdelay: /dev/net/tun: %s\n", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof ifr);
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr)) {
		fprintf(stderr, "netdelay: TUNSETIFF %s: %s\n", name, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Read what is waiting on d->in (at most READ_BURST packets) into the queue. */
static void dir_read(dir_t *d, uint8_t *buf, uint64_t delay_ns, uint64_t loss_threshold)
{
	for (int i = 0; i < READ_BURST; i++) {
		ssize_t n = read(d->in, buf, PKT_MAX);
		if (n <= 0)
			return;
		uint64_t t = now_ns();
		if (loss_threshold && rng_next() < loss_threshold) {
			d->lost++;
			continue;
		}
		if (d->count == d->cap || d->bytes + (size_t)n > QUEUE_BYTES_MAX) {
			d->dropped_full++;
			continue;
		}
		uint8_t *copy = malloc((size_t)n);
		if (!copy) {
			d->dropped_full++;
			continue;
		}
		memcpy(copy, buf, (size_t)n);
		pkt_t *p = &d->q[(d->head + d->count) % d->cap];
		*p = (pkt_t){.due_ns = t + delay_ns, .read_ns = t, .len = (size_t)n, .data = copy};
		d->count++;
		d->bytes += (size_t)n;
	}
}

/* Write every packet whose time has come; return the next deadline or 0. */
static uint64_t dir_flush(dir_t *d)
{
	while (d->count) {
		pkt_t *p = &d->q[d->head];
		uint64_t t = now_ns();
		if (t < p->due_ns)
			return p->due_ns;
		ssize_t w = write(d->out, p->data, p->len);
		if (w != (ssize_t)p->len) {
			d->write_errors++;
		} else {
			uint64_t held = t - p->read_ns;
			if (!d->packets || held < d->held_min_ns)
				d->held_min_ns = held;
			if (held > d->held_max_ns)
				d->held_max_ns = held;
			d->held_sum_ns += held;
			d->packets++;
			d->fwd_bytes += p->len;
		}
		free(p->data);
		d->bytes -= p->len;
		d->head = (d->head + 1) % d->cap;
		d->count--;
	}
	return 0;
}

static void dir_json(const dir_t *d, bool comma)
{
	printf("\"%s\":{\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"held_min_us\":%.1f,"
	       "\"held_max_us\":%.1f,\"held_avg_us\":%.1f,\"lost\":%" PRIu64
	       ",\"dropped_full\":%" PRIu64 ",\"write_errors\":%" PRIu64
	       ",\"queued_at_exit\":%zu}%s",
	       d->name, d->packets, d->fwd_bytes, (double)d->held_min_ns / 1e3,
	       (double)d->held_max_ns / 1e3,
	       d->packets ? (double)d->held_sum_ns / (double)d->packets / 1e3 : 0.0, d->lost,
	       d->dropped_full, d->write_errors, d->count, comma ? "," : "");
}

static void print_stats(const dir_t *d, const char *const *names, uint64_t delay_us,
			double loss_pct, uint64_t seed)
{
	printf("{\"netdelay\":{\"a\":\"%s\",\"b\":\"%s\",\"delay_us\":%" PRIu64
	       ",\"loss_pct\":%g,\"seed\":%" PRIu64 ",",
	       names[0], names[1], delay_us, loss_pct, seed);
	dir_json(&d[0], true);
	dir_json(&d[1], false);
	printf("}}\n");
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr, "usage: lc_netdelay [--delay-us N] [--loss PCT] [--seed N] [--queue N] "
			"TUN_A TUN_B\n");
}

int main(int argc, char **argv)
{
	uint64_t delay_us = 1000, seed = 1;
	double loss_pct = 0;
	size_t qcap = 4096;
	const char *names[2] = {NULL, NULL};
	int nnames = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		if (!strcmp(a, "--delay-us") && v) {
			delay_us = strtoull(v, &end, 10);
			i++;
		} else if (!strcmp(a, "--loss") && v) {
			loss_pct = strtod(v, &end);
			if (loss_pct < 0 || loss_pct > 100)
				end = NULL;
			i++;
		} else if (!strcmp(a, "--seed") && v) {
			seed = strtoull(v, &end, 10);
			i++;
		} else if (!strcmp(a, "--queue") && v) {
			qcap = (size_t)strtoull(v, &end, 10);
			if (!qcap)
				end = NULL;
			i++;
		} else if (a[0] != '-' && nnames < 2) {
			names[nnames++] = a;
			continue;
		} else {
			usage();
			return 2;
		}
		if (!end || *end) {
			fprintf(stderr, "netdelay: bad value for %s: %s\n", a, v);
			return 2;
		}
	}
	if (nnames != 2 || !strcmp(names[0], names[1])) {
		usage();
		return 2;
	}
	rng_state = seed ? seed : 1;
	/* P(drop) = loss_pct / 100 against a uniform 64-bit draw. */
	uint64_t loss_threshold = loss_pct >= 100
					  ? UINT64_MAX
					  : (uint64_t)(loss_pct / 100.0 * 18446744073709551616.0);
	prctl(PR_SET_TIMERSLACK, 1000UL); /* wake-ups to the microsecond */
	pid_t parent = getppid();

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGUSR1);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)         /* the parent died before that */
		kill(getpid(), SIGTERM); /* pending on the signalfd: stats, exit */
	int fa = tun_open(names[0]);
	int fb = fa >= 0 ? tun_open(names[1]) : -1;
	uint8_t *buf = malloc(PKT_MAX);
	dir_t d[2] = {{.name = "a_to_b", .in = fa, .out = fb, .cap = qcap},
		      {.name = "b_to_a", .in = fb, .out = fa, .cap = qcap}};
	d[0].q = calloc(qcap, sizeof(pkt_t));
	d[1].q = calloc(qcap, sizeof(pkt_t));
	int rc = 1;
	if (sfd < 0 || fa < 0 || fb < 0 || !buf || !d[0].q || !d[1].q) {
		if (sfd < 0)
			fprintf(stderr, "netdelay: signalfd: %s\n", strerror(errno));
		goto out;
	}
	printf("ready %s %s\n", names[0], names[1]);
	fflush(stdout);

	uint64_t delay_ns = delay_us * 1000;
	for (;;) {
		uint64_t next = 0;
		for (int i = 0; i < 2; i++) {
			uint64_t due = dir_flush(&d[i]);
			if (due && (!next || due < next))
				next = due;
		}
		struct pollfd pf[3] = {{.fd = fa, .events = POLLIN},
				       {.fd = fb, .events = POLLIN},
				       {.fd = sfd, .events = POLLIN}};
		struct timespec ts, *tp = NULL;
		if (next) {
			uint64_t t = now_ns(), wait = next > t ? next - t : 0;
			ts = (struct timespec){(time_t)(wait / 1000000000u),
					       (long)(wait % 1000000000u)};
			tp = &ts;
		}
		int n = ppoll(pf, 3, tp, NULL);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "netdelay: ppoll: %s\n", strerror(errno));
			goto out;
		}
		if (n <= 0)
			continue;
		if (pf[2].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) != (ssize_t)sizeof si)
				continue;
			print_stats(d, names, delay_us, loss_pct, seed);
			if (si.ssi_signo != SIGUSR1)
				break;
			continue;
		}
		if ((pf[0].revents | pf[1].revents) & (POLLERR | POLLNVAL)) {
			fprintf(stderr, "netdelay: a device failed\n");
			goto out;
		}
		if (pf[0].revents & POLLIN)
			dir_read(&d[0], buf, delay_ns, loss_threshold);
		if (pf[1].revents & POLLIN)
			dir_read(&d[1], buf, delay_ns, loss_threshold);
	}
	rc = 0;
out:
	for (int i = 0; i < 2; i++) {
		while (d[i].q && d[i].count) {
			free(d[i].q[d[i].head].data);
			d[i].head = (d[i].head + 1) % d[i].cap;
			d[i].count--;
		}
		free(d[i].q);
	}
	free(buf);
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	if (sfd >= 0)
		close(sfd);
	return rc;
}
