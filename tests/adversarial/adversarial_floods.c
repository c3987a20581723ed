/*
 * Connection floods (issue 21, findings 3 and 6): real P, D and bootstrap
 * processes (fork) on loopback, the parent playing the attacker with raw
 * TCP sockets that connect and then say nothing (or trickle). The victim's
 * descriptors (/proc/PID/fd) and CPU time (/proc/PID/stat utime + stime)
 * are read while the attacker holds its connections.
 *
 *     adversarial_floods <case>
 *
 *   inbox_flood      3,000 idle TCP connections to P's ZeroMQ inbox from
 *                    50 source addresses (127.0.0.10-59, under
 *                    inbox_conns_per_addr each), P under RLIMIT_NOFILE
 *                    1,024: P stays under 300 fds and 10% of a core, counts
 *                    the connections it closed to take newer ones
 *                    (inbox_conns_evicted) and never shuts its door on
 *                    them, and a real D's rooms succeed byte-exact
 *                    afterwards.
 *   inbox_emfile     the same with P left 16 descriptors after start, fewer
 *                    than the inbox's cap: P runs out of them, and libzmq's
 *                    listener must not spin on EMFILE (under 10% of a core;
 *                    the old code spun: 86%);
 *                    once the attacker has left (its connections reset)
 *                    and P greets a new connection, a real D's rooms
 *                    succeed.
 *   inbox_held_p     3,000 connections from 200 source addresses
 *                    (127.0.0.2-201) that finish the ZMTP NULL handshake as
 *                    a PUSH would (greeting and READY written by hand) and
 *                    then say nothing, held at P's inbox, every one of its
 *                    inbox_conns_max slots taken; a real D that never met P
 *                    then registers and its rooms succeed byte-exact while
 *                    the attacker still holds the inbox's other slots. P
 *                    counts the connections it evicted to make room
 *                    (inbox_conns_evicted). Before the fix: every room
 *                    failed ("no REGISTER reply").
 *   inbox_held_d     the same at D's inbox: P, never met, must connect to
 *                    it to answer D's REGISTER.
 *   inbox_held_p_one, inbox_held_d_one  the same from one address, the real
 *                    peers' own (127.0.0.1): the attacker holds that
 *                    address's share (inbox_conns_per_addr), and the real
 *                    peer takes the place of the oldest of it.
 *   bootstrap_idle   1,000 idle connections from 127.0.0.1 to a bootstrap
 *                    server: GET /health and GET /route from 127.0.0.2
 *                    answer, the median of five under 100 ms.
 *   bootstrap_slowloris  300 connections from 127.0.0.1 trickling a request
 *                    header a byte at a time: /health from 127.0.0.2 answers
 *                    as above, and a trickling connection is closed by the
 *                    server once bootstrap_request_ms (1 s here) has passed.
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/bootstrap.h"
#include "harness.h"
#include "holder.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

#define INBOX_FLOOD 3000
#define INBOX_ADDRS 50
#define INBOX_MAX_FDS 300
#define INBOX_MAX_CPU 0.10
#define INBOX_EMFILE_LIMIT 48 /* marks the case; P's limit is set after start */
#define INBOX_EMFILE_SPARE 16 /* P's descriptors left after start: EMFILE below the cap */
#define HELD_ADDRS 200        /* 127.0.0.2 .. 127.0.0.201 */
#define HELD_CAP 128          /* inbox_conns_max, its default */
#define HELD_PER_ADDR 64      /* inbox_conns_per_addr, its default */
#define BS_IDLE 1000
#define BS_SLOW 300
#define HEALTH_MS 100

/* ==== raw sockets ==== */

/* "tcp://h:p" or "h:p" into host and port. */
static void split(const char *ep, char *host, size_t cap, int *port)
{
	const char *a = strncmp(ep, "tcp://", 6) ? ep : ep + 6;
	const char *c = strrchr(a, ':');
	TU_CHECK(c && (size_t)(c - a) < cap, "bad endpoint %s", ep);
	memcpy(host, a, (size_t)(c - a));
	host[c - a] = '\0';
	*port = atoi(c + 1);
}

/* One HTTP GET from 127.0.0.2: its status (or -1) and how long it took. */
static int get_from_other(const char *bs, const char *path, uint64_t *ms)
{
	char host[64], req[256], buf[2048];
	int port;
	split(bs, host, sizeof host, &port);
	uint64_t t0 = adv_now_ms();
	int fd = adv_tcp_from("127.0.0.2", host, port);
	if (fd < 0)
		return -1;
	int n = snprintf(req, sizeof req,
			 "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, bs);
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	size_t got = 0;
	int code = -1;
	if (poll(&p, 1, 3000) == 1 && write(fd, req, (size_t)n) == n) {
		p.events = POLLIN;
		while (got < sizeof buf - 1 && poll(&p, 1, 3000) == 1) {
			ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
			if (r <= 0)
				break;
			got += (size_t)r;
			buf[got] = '\0';
			if (strstr(buf, "\r\n\r\n"))
				break;
		}
		buf[got] = '\0';
		if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
			code = -1;
	}
	*ms = adv_now_ms() - t0;
	close(fd);
	return code;
}

/* Whether P's inbox, within ms, accepts a connection from 127.0.0.2 and
 * greets it (ZMTP's first byte, 0xff): P takes connections again. */
static bool inbox_answers(const char *host, int port, int ms)
{
	uint64_t dl = adv_now_ms() + (uint64_t)ms;
	while (adv_now_ms() < dl) {
		int fd = adv_tcp_from("127.0.0.2", host, port);
		if (fd < 0) {
			usleep(100000);
			continue;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		unsigned char c = 0;
		bool ok = poll(&p, 1, 1000) == 1 && recv(fd, &c, 1, 0) == 1 && c == 0xff;
		adv_close_reset(fd);
		if (ok)
			return true;
		usleep(100000);
	}
	return false;
}

/* ==== /proc ==== */

static long fds_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	long n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* utime + stime of pid in seconds. */
static double cpu_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command may hold spaces */
	unsigned long ut = 0, st = 0;
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ==== inbox_flood ==== */

static int p_child(void *arg, int go_fd)
{
	/* The fd limit the finding was measured with, or one below the caps. */
	rlim_t lim = (rlim_t)(intptr_t)arg;
	struct rlimit rl = {.rlim_cur = lim < 1024 ? 1024 : lim, .rlim_max = 1024};
	TU_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
	adv_p_t P;
	lc_sender_t *snd[ROOMS] = {0};
	adv_p_up(&P, NULL, adv_seed_of);
	if (lim < 1024) {
		/* Out of descriptors under the inbox's cap (its quarter of the
		 * limit at start keeps a cap from doing it): the rest of P holds
		 * the others, as sessions and lanes would. */
		long now = fds_of(getpid());
		rl.rlim_cur = (rlim_t)(now + INBOX_EMFILE_SPARE);
		TU_CHECK(now > 0 && setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s",
			 strerror(errno));
	}
	adv_wait_byte(go_fd); /* D is up: the rooms */
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_sender_create(P.pf, ROOM0 + (uint64_t)i, &snd[i]));
	uint64_t dl = adv_now_ms() + 20000;
	for (int i = 0; i < ROOMS; i++)
		while (lc_sender_poll(snd[i], NULL) == LC_ROOM_BOOTSTRAPPING && adv_now_ms() < dl)
			usleep(2000);
	int failures = adv_p_forward(P.eng, snd);
	uint64_t refused = 0, shut = 0, evicted = 0;
	lc_prefill_counter(P.pf, "inbox_conns_refused", &refused);
	lc_prefill_counter(P.pf, "inbox_door_shut", &shut);
	lc_prefill_counter(P.pf, "inbox_conns_evicted", &evicted);
	say("p-done %d refused %llu shut %llu evicted %llu", failures, (unsigned long long)refused,
	    (unsigned long long)shut, (unsigned long long)evicted);
	adv_wait_byte(go_fd); /* quit */
	for (int i = 0; i < ROOMS; i++)
		lc_sender_destroy(snd[i]);
	adv_p_down(&P);
	return failures ? 1 : 0;
}

static int case_inbox_flood(int fd_limit)
{
	adv_proc_t p, d;
	char addr[64], ep[300], line[512], host[64];
	int port, failures = 0;
	static int fds[INBOX_FLOOD];
	adv_spawn(&p, p_child, (void *)(intptr_t)fd_limit);
	TU_CHECK(adv_wait_line(&p, "addr ", 15000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", addr, ep) == 2,
		 "P did not start");
	split(ep, host, sizeof host, &port);
	if (!strcmp(host, "[::]") || !strcmp(host, "*"))
		snprintf(host, sizeof host, "127.0.0.1");
	usleep(200000);
	long fds_before = fds_of(p.pid);
	double cpu0 = cpu_of(p.pid);
	uint64_t t0 = adv_now_ms();
	int opened = 0;
	for (int i = 0; i < INBOX_FLOOD; i++) {
		char src[32];
		snprintf(src, sizeof src, "127.0.0.%d", 10 + i % INBOX_ADDRS);
		fds[i] = adv_tcp_from(src, host, port);
		opened += fds[i] >= 0;
	}
	/* Held, idle, for 2.5 s (under inbox_handshake_ms, 3 s): P's fds once
	 * the burst has been sorted (from 300 ms on: what the flood leaves P
	 * holding, the cap's), their transient peak (libzmq accepts in its I/O
	 * thread and the guard refuses after the fact, from the monitor's
	 * events: on two busy cores a burst of up to ~200 connections is
	 * accepted before the guard runs; bounded by half the fd limit, so the
	 * rest of P never runs out), and P's CPU over the whole time. */
	long peak = fds_before, burst = fds_before;
	while (adv_now_ms() < t0 + 2500) {
		long n = fds_of(p.pid);
		if (adv_now_ms() < t0 + 300)
			burst = n > burst ? n : burst;
		else
			peak = n > peak ? n : peak;
		usleep(20000);
	}
	double cpu = (cpu_of(p.pid) - cpu0) / ((double)(adv_now_ms() - t0) / 1000.0);
	int still_open = 0;
	for (int i = 0; i < INBOX_FLOOD; i++) {
		char c;
		if (fds[i] >= 0 && !(recv(fds[i], &c, 1, MSG_DONTWAIT) == 0))
			still_open++;
	}
	fprintf(stderr,
		"attacker: %d connections opened, %d not closed by P; P: %ld fds before, at most "
		"%ld during (%ld in the first 300 ms), %.1f%% of a core\n",
		opened, still_open, fds_before, peak, burst, 100 * cpu);
	if (opened < INBOX_FLOOD * 9 / 10) {
		fprintf(stderr, "the attacker could not open its connections\n");
		failures++;
	}
	if (peak >= INBOX_MAX_FDS) {
		fprintf(stderr, "P held %ld fds (bound %d)\n", peak, INBOX_MAX_FDS);
		failures++;
	}
	if (burst >= fd_limit / 2 && fd_limit >= 1024) {
		fprintf(stderr, "P's fds peaked at %ld in the burst (bound %d)\n", burst,
			fd_limit / 2);
		failures++;
	}
	double max_cpu = INBOX_MAX_CPU; /* out of descriptors too: a spin takes a core */
	if (cpu >= max_cpu) {
		fprintf(stderr, "P used %.1f%% of a core (bound %.0f%%)\n", 100 * cpu,
			100 * max_cpu);
		failures++;
	}
	/* A real D afterwards, the attacker's connections still open; under
	 * the low limit the attacker leaves first (P has no descriptor to
	 * spare for D while the flood lasts: what is tested there is that it
	 * does not spin, and that it recovers). */
	if (fd_limit < 1024) {
		for (int i = 0; i < INBOX_FLOOD; i++)
			if (fds[i] >= 0)
				adv_close_reset(fds[i]);
		memset(fds, 0xff, sizeof fds);
		if (!inbox_answers(host, port, 20000)) {
			fprintf(stderr,
				"P's inbox never greeted a new connection after the flood\n");
			failures++;
		}
	}
	adv_spawn(&d, adv_d_child, &(adv_d_arg_t){addr, "tcp://127.0.0.1:0"});
	adv_go(&d);
	adv_go(&p);
	int rc = adv_reap(&d, 40000);
	if (rc)
		fprintf(stderr, "D exited %d\n", rc);
	failures += rc != 0;
	int pfail = -1;
	unsigned long long refused = 0, shut = 0, evicted = 0;
	if (!adv_wait_line(&p, "p-done", 30000, line, sizeof line) ||
	    sscanf(line, "p-done %d refused %llu shut %llu evicted %llu", &pfail, &refused, &shut,
		   &evicted) != 4 ||
	    pfail) {
		fprintf(stderr, "P: '%s' (want p-done 0)\n", line);
		failures++;
	}
	fprintf(stderr, "%s\n", line);
	if (fd_limit >= 1024) {
		/* Idle connections prove nothing: each one past the cap took
		 * the place of the oldest (counted), and the door, which shuts
		 * only on a table full of proven peers, stayed open. */
		if (!evicted) {
			fprintf(stderr, "P counted no inbox connection evicted\n");
			failures++;
		}
		if (shut) {
			fprintf(stderr, "P shut its inbox's door on idle connections\n");
			failures++;
		}
	} else if (!shut) {
		/* Out of descriptors: the door shuts (what libzmq accepted
		 * meanwhile is drained and counted as refused). */
		fprintf(stderr, "P never shut its inbox's door out of descriptors\n");
		failures++;
	}
	adv_go(&p);
	rc = adv_reap(&p, 20000);
	if (rc)
		fprintf(stderr, "P exited %d\n", rc);
	failures += rc != 0;
	for (int i = 0; i < INBOX_FLOOD; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return failures ? 1 : 0;
}

/* ==== inbox_held_p, inbox_held_d ==== */

/* The port of "tcp://h:p", reached on 127.0.0.1: every inbox here listens
 * on loopback or on every address, whatever host it advertises. */
static void target_of(const char *ep, char *host, size_t cap, int *port)
{
	split(ep, host, cap, port);
	snprintf(host, cap, "127.0.0.1");
}

static int case_inbox_held(bool at_d, int naddrs)
{
	static hold_t h;
	adv_proc_t p, d;
	char addr[64], ep[300], dep[300], line[512], host[64];
	int port, failures = 0;
	/* Both up before the attacker's sockets exist: a child would inherit them. */
	adv_spawn(&p, p_child, (void *)(intptr_t)1024);
	TU_CHECK(adv_wait_line(&p, "addr ", 15000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", addr, ep) == 2,
		 "P did not start");
	adv_spawn(&d, adv_d_child, &(adv_d_arg_t){addr, "tcp://127.0.0.1:0"});
	TU_CHECK(adv_wait_line(&d, "d-ep ", 15000, line, sizeof line) &&
			 sscanf(line, "d-ep %299s", dep) == 1,
		 "D did not start");
	target_of(at_d ? dep : ep, host, sizeof host, &port);
	fprintf(stderr, "attacker: %d connections to %s's inbox %s:%d from %d addresses\n",
		HOLD_MAX, at_d ? "D" : "P", host, port, naddrs);
	hold_start(&h, host, port, naddrs);
	/* What the inbox lets it hold: its cap, or one address's share. */
	int cap = naddrs == 1 ? HELD_PER_ADDR : HELD_CAP;
	/* Until every connection has come in and been greeted or closed
	 * (before the fix the inbox's door shut at its cap, and the rest
	 * waited on their SYNs: 20 s then). */
	uint64_t dl = adv_now_ms() + 20000;
	while (!atomic_load(&h.settled) && adv_now_ms() < dl)
		usleep(10000);
	hold_say(&h, "before D");
	if (atomic_load(&h.ready) < cap / 2) {
		fprintf(stderr, "the attacker could not take the inbox (%d handshaken, want %d)\n",
			atomic_load(&h.ready), cap / 2);
		failures++;
	}
	/* While D works, the attacker opens again each connection the inbox
	 * closes: newcomers keep coming (a thousand a second), and only what
	 * proved itself keeps its place. The real peer's connection to the
	 * inbox (D's to P, P's to D) is watched from before D starts until
	 * 600 ms after D's rooms ended, the flood going on: it proves itself
	 * with its first message and keeps its place, one connection all
	 * along (without the proof it is evicted within ~130 ms and libzmq
	 * connects again: two or more). */
	static peer_watch_t watch;
	peer_watch_start(&watch, at_d ? p.pid : d.pid, port);
	atomic_store(&h.refill, true);
	adv_go(&d);
	adv_go(&p);
	int dfail = -1;
	unsigned long long dpending = 0, devicted = 0;
	bool done = adv_wait_line(&d, "d-done", 60000, line, sizeof line);
	usleep(600000);
	peer_watch_stop(&watch);
	if (!done || sscanf(line, "d-done %d %llu %llu", &dfail, &dpending, &devicted) != 3 ||
	    dfail) {
		fprintf(stderr, "D: '%s' (want d-done 0): its rooms did not succeed byte-exact\n",
			line);
		failures++;
	}
	atomic_store(&h.refill, false);
	hold_say(&h, "after D's rooms");
	fprintf(stderr, "%s's connections to the inbox while D worked: %d (%d looks)\n",
		at_d ? "P" : "D", watch.n, watch.looks);
	if (watch.n != 1) {
		fprintf(stderr, "the real peer's connection was %s\n",
			watch.n ? "evicted (it connected again)" : "never seen");
		failures++;
	}
	/* Held all along: D got in by a slot or two, not by the flood's leaving. */
	if (atomic_load(&h.ready) < cap / 2) {
		fprintf(stderr, "the attacker no longer held the inbox (%d handshaken)\n",
			atomic_load(&h.ready));
		failures++;
	}
	int rc = adv_reap(&d, 20000);
	if (rc)
		fprintf(stderr, "D exited %d\n", rc);
	failures += rc != 0;
	int pfail = -1;
	unsigned long long refused = 0, shut = 0, evicted = 0;
	if (!adv_wait_line(&p, "p-done", 30000, line, sizeof line) ||
	    sscanf(line, "p-done %d refused %llu shut %llu evicted %llu", &pfail, &refused, &shut,
		   &evicted) != 4 ||
	    pfail) {
		fprintf(stderr, "P: '%s' (want p-done 0)\n", line);
		failures++;
	}
	fprintf(stderr, "%s; D's inbox evicted %llu\n", line, devicted);
	/* The inbox made room by closing the attacker's connections, and
	 * counted them. */
	if ((at_d ? devicted : evicted) == 0) {
		fprintf(stderr, "%s's inbox counted no connection evicted (inbox_conns_evicted)\n",
			at_d ? "D" : "P");
		failures++;
	}
	adv_go(&p);
	rc = adv_reap(&p, 20000);
	if (rc)
		fprintf(stderr, "P exited %d\n", rc);
	failures += rc != 0;
	hold_stop(&h);
	return failures ? 1 : 0;
}

/* ==== bootstrap_idle, bootstrap_slowloris ==== */

/* A bootstrap server with rank 0 registered (a PUT of its own). */
static int bs_child(void *arg, int go_fd)
{
	lc_bootstrap_t *b;
	char addr[64], url[128], *resp = NULL;
	size_t len;
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &b));
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	snprintf(url, sizeof url, "http://%s/route", addr);
	const char *body = "{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":"
			   "\"127.0.0.1\",\"rank_port\":7000,\"engine_rank\":0}";
	TU_CHECK(lc__http_request("PUT", url, body, strlen(body), NULL, 3000, &resp, &len) == 200,
		 "PUT failed");
	free(resp);
	say("bs %s", addr);
	adv_wait_byte(go_fd);
	lc_bootstrap_stop(b);
	return 0;
}

/* /health and GET /route from 127.0.0.2: every answer 200, the median of
 * five within HEALTH_MS. */
static int other_address_answers(const char *bs)
{
	int failures = 0;
	static const char *const paths[] = {"/health", "/route?engine_rank=0&target_dp_group=0"};
	for (size_t k = 0; k < 2; k++) {
		uint64_t ms[5];
		for (int i = 0; i < 5; i++) {
			int code = get_from_other(bs, paths[k], &ms[i]);
			if (code != 200) {
				fprintf(stderr, "GET %s from 127.0.0.2: %d after %llu ms\n",
					paths[k], code, (unsigned long long)ms[i]);
				failures++;
			}
		}
		for (int i = 0; i < 5; i++) /* sort: the median is ms[2] */
			for (int j = i + 1; j < 5; j++)
				if (ms[j] < ms[i]) {
					uint64_t t = ms[i];
					ms[i] = ms[j];
					ms[j] = t;
				}
		fprintf(stderr, "GET %s from 127.0.0.2: median %llu ms, max %llu ms\n", paths[k],
			(unsigned long long)ms[2], (unsigned long long)ms[4]);
		if (ms[2] >= HEALTH_MS) {
			fprintf(stderr, "median over %d ms\n", HEALTH_MS);
			failures++;
		}
	}
	return failures;
}

static int case_bootstrap(bool slow)
{
	adv_proc_t s;
	char line[256], bs[64], host[64];
	int port, failures = 0, n = slow ? BS_SLOW : BS_IDLE;
	static int fds[BS_IDLE];
	setenv("LAYERCAKE_BOOTSTRAP_REQUEST_MS", "1000", 1); /* the server's (a child) */
	adv_spawn(&s, bs_child, NULL);
	TU_CHECK(adv_wait_line(&s, "bs ", 15000, line, sizeof line) &&
			 sscanf(line, "bs %63s", bs) == 1,
		 "the bootstrap server did not start");
	split(bs, host, sizeof host, &port);
	for (int i = 0; i < n; i++)
		fds[i] = adv_tcp_from("127.0.0.1", host, port);
	usleep(300000);
	/* Slowloris: a byte of a header every 200 ms on every connection, for
	 * 3.2 s (past the 1 s deadline), /health asked from the other address
	 * while it goes on. */
	static const char hdr[] = "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaa";
	int closed = 0, sent_ok = 0;
	for (int k = 0; slow && k < 16; k++) {
		for (int i = 0; i < n; i++)
			if (fds[i] >= 0 &&
			    send(fds[i], hdr + k, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
				sent_ok++;
		if (k == 4)
			failures += other_address_answers(bs);
		usleep(200000);
	}
	if (!slow)
		failures += other_address_answers(bs);
	for (int i = 0; slow && i < n; i++) {
		char c;
		struct pollfd p = {.fd = fds[i], .events = POLLIN};
		if (fds[i] < 0 || (poll(&p, 1, 0) == 1 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0))
			closed++;
	}
	if (slow) {
		fprintf(stderr, "slowloris: %d bytes trickled, %d of %d connections closed\n",
			sent_ok, closed, n);
		if (closed != n) {
			fprintf(stderr, "%d trickling connections outlived bootstrap_request_ms\n",
				n - closed);
			failures++;
		}
	}
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	adv_go(&s);
	failures += adv_reap(&s, 20000) != 0;
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc != 2) {
		fprintf(stderr,
			"usage: %s inbox_flood|inbox_emfile|inbox_held_p|inbox_held_d|"
			"inbox_held_p_one|inbox_held_d_one|"
			"bootstrap_idle|bootstrap_slowloris\n",
			argv[0]);
		return 2;
	}
	/* The attacker's own descriptors. */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < INBOX_FLOOD + 256) {
		fprintf(stderr, "skip: the fd limit (%llu) is below the flood\n",
			(unsigned long long)rl.rlim_max);
		return TU_SKIP;
	}
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (!strcmp(argv[1], "inbox_flood"))
		return case_inbox_flood(1024);
	if (!strcmp(argv[1], "inbox_emfile"))
		return case_inbox_flood(INBOX_EMFILE_LIMIT);
	if (!strcmp(argv[1], "inbox_held_p"))
		return case_inbox_held(false, HELD_ADDRS);
	if (!strcmp(argv[1], "inbox_held_d"))
		return case_inbox_held(true, HELD_ADDRS);
	if (!strcmp(argv[1], "inbox_held_p_one"))
		return case_inbox_held(false, 1);
	if (!strcmp(argv[1], "inbox_held_d_one"))
		return case_inbox_held(true, 1);
	if (!strcmp(argv[1], "bootstrap_idle"))
		return case_bootstrap(false);
	if (!strcmp(argv[1], "bootstrap_slowloris"))
		return case_bootstrap(true);
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
