/*
 * The fault matrix (issue 8): real P and D processes, real sockets, faults
 * caused for real (signals, network namespaces, veth links, tc netem), and
 * for each case the promise checked: every room reaches a terminal state
 * with the expected reason within its deadline, the room table and memory
 * are back to baseline afterwards, and the rooms of other sessions are
 * unaffected and byte-exact.
 *
 *     lc_faults <case>          (lc_faults list: the cases)
 *
 * Topology, every case: two P instances (P0, P1: each a process with its
 * own bootstrap server and one P rank) and two D instances (D0, D1: each a
 * process with one D rank). Every D receives R rooms from every P, so there
 * are four (P, D) session pairs. A fault hits one instance (P0 or D0, "the
 * victim"); the rooms of the other pairs are the bystanders and must
 * succeed byte-exact. Network cases put P0, P1 and D1 in one namespace and
 * D0 in another, joined by a veth pair: only D0's traffic crosses the link.
 *
 * Deadlines are the LAYERCAKE_* knobs, set short in the environment of the
 * processes. Each case writes results/<case>.json (in the working
 * directory, or $LC_FAULTS_OUT): the deadline, the measured time from the
 * fault to the terminal state of every room, and the verdict, for
 * docs/reliability.md.
 *
 * Exit: 0 pass, 1 fail, 77 skipped (not root, no network namespaces, or
 * neither tc netem nor lc_netdelay here, for the cases that need them).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "testutil.h"

#define LAYERS 8
#define NBUF (2 * LAYERS)
#define PAGES 64
#define ITEM 8192
#define RP 4     /* pages per room */
#define CHUNKS 2 /* chunked prefill: two batches per room */
#define R 2      /* rooms per (P, D) pair */
#define NP 2
#define ND 2
#define CANARY 0x5a
#define META_LEN 256
#define FAULT_LAYER 3 /* "at layer k": after P0 recorded this many layers */
#define MARGIN_MS 1500
#define SLOT_DEAD 4     /* D page slots 4, 5: rooms at an unreachable bootstrap */
#define SLOT_CONFLICT 6 /* D1's claim on one of D0's room ids */
#define MAX_ROOMS 16

enum fault {
	F_D_KILLED,
	F_P_KILLED,
	F_D_STOPPED,
	F_LINK_DOWN,
	F_LOSS,
	F_DELAY,
	F_STEP_NEVER,
	F_METADATA_NEVER,
	F_BOOTSTRAP_UNREACHABLE,
	F_ROOM_REUSED,
	F_D_CANCELS,
	F_COUNT
};

static const char *const case_names[F_COUNT] = {
	"d_killed",    "p_killed",       "d_stopped",
	"link_down",   "loss10",         "delay50",
	"step_never",  "metadata_never", "bootstrap_unreachable",
	"room_reused", "d_cancels"};

static const char *const case_titles[F_COUNT] = {"D killed (SIGKILL) at layer 3",
						 "P killed (SIGKILL) at layer 3",
						 "D stopped (SIGSTOP) for longer than the deadline",
						 "link down mid-transfer (veth)",
						 "10% packet loss (netem, both ways)",
						 "50 ms delay (netem, both ways)",
						 "step counter never reaches layer 4",
						 "metadata never published",
						 "bootstrap server unreachable",
						 "room id reused (while live, and after the end)",
						 "D cancels mid-transfer"};

static enum fault F;
static bool NET; /* D0 behind a veth pair in its own namespace */
static int layer_us = 40000;
static int waves = 1;

/* Knobs (ms), applied as LAYERCAKE_* variables before any process starts. */
static struct {
	int connect, progress, transfer, layer, metadata, bootstrap, waiting, hb_interval,
		hb_misses;
} K = {1000, 5000, 2000, 1500, 1500, 3000, 10000, 300, 2};

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t room_id(int p, int d, int i)
{
	return 1000 + (uint64_t)p * 100 + (uint64_t)d * 10 + (uint64_t)i;
}

static uint64_t seed_of(int p, int b, int page)
{
	return (uint64_t)(p + 1) * 100000 + (uint64_t)b * PAGES + (uint64_t)page;
}

/* P page of page j of room (p, d, i): distinct per room. */
static int src_page(int d, int i, int j)
{
	return 1 + (d * R + i) * RP + j;
}

static uint64_t rss_bytes(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ==== line channels between the parent and its children ==== */

typedef struct chan {
	int fd;
	char buf[16384];
	size_t len;
} chan_t;

static int out_fd = -1; /* child -> parent */
static chan_t cmd_in;   /* parent -> child */

#define say(...) tu_say(out_fd, __VA_ARGS__)

/* Next complete line of c, waiting up to timeout_ms (0: do not wait). */
static bool chan_line(chan_t *c, char *out, size_t cap, int timeout_ms)
{
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		if (nl) {
			size_t ll = (size_t)(nl - c->buf);
			if (ll >= cap)
				ll = cap - 1;
			memcpy(out, c->buf, ll);
			out[ll] = '\0';
			size_t used = (size_t)(nl - c->buf) + 1;
			memmove(c->buf, nl + 1, c->len - used);
			c->len -= used;
			return true;
		}
		if (c->fd < 0)
			return false;
		int left = (int)(dl > now_ms() ? dl - now_ms() : 0);
		fd_set fds;
		FD_ZERO(&fds);
		FD_SET(c->fd, &fds);
		struct timeval tv = {left / 1000, (left % 1000) * 1000};
		if (select(c->fd + 1, &fds, NULL, NULL, &tv) <= 0)
			return false;
		ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
		if (n <= 0) {
			close(c->fd);
			c->fd = -1;
			continue;
		}
		c->len += (size_t)n;
	}
}

/* Wait for a command from the parent ("next", "quit", ...). */
static bool wait_cmd(const char *what, int timeout_ms, char *out, size_t cap)
{
	char line[256];
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	while (now_ms() < dl)
		if (chan_line(&cmd_in, line, sizeof line, (int)(dl - now_ms())) &&
		    !strncmp(line, what, strlen(what))) {
			if (out)
				snprintf(out, cap, "%s", line);
			return true;
		}
	return false;
}

/* ==== network namespaces ==== */

static char ns_p[32], ns_d[32], veth_p[16], veth_d[16];
static bool ns_made;
/* Where tc netem is missing: lc_netdelay (tests/support/netdelay.c, path in
 * $LC_NETDELAY) holds or drops the packets between two TUN devices that
 * replace the veth pair, under the same names. */
static pid_t netdelay_pid;
#define IP_P "10.77.0.1"
#define IP_D "10.77.0.2"

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static void ns_cleanup(void)
{
	if (!ns_made)
		return;
	ns_made = false;
	if (netdelay_pid > 0) { /* its TUN devices go with it */
		kill(netdelay_pid, SIGKILL);
		waitpid(netdelay_pid, NULL, 0);
		netdelay_pid = 0;
	}
	/* Deleting a namespace deletes the veth end inside it, and so the pair. */
	sh("ip netns del %s 2>/dev/null", ns_p);
	sh("ip netns del %s 2>/dev/null", ns_d);
	sh("ip link del %s 2>/dev/null", veth_p);
}

/* Namespaces left behind by a run that was killed (SIGKILL from a timeout):
 * lcf-<pid>-p/d whose pid is gone. */
static void ns_reap_stale(void)
{
	FILE *f = popen("ip netns list 2>/dev/null", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f)) {
		int pid;
		char side;
		if (sscanf(line, "lcf-%d-%c", &pid, &side) == 2 && kill(pid, 0) && errno == ESRCH)
			sh("ip netns del lcf-%d-%c 2>/dev/null", pid, side);
	}
	if (f)
		pclose(f);
}

/* 0: ready; 77: cannot (with a message). */
static int ns_setup(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skip: network fault cases need root (ip netns, veth, tc)\n");
		return TU_SKIP;
	}
	if (sh("command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1")) {
		fprintf(stderr, "skip: iproute2 (ip, tc) not installed\n");
		return TU_SKIP;
	}
	ns_reap_stale();
	int pid = (int)getpid();
	snprintf(ns_p, sizeof ns_p, "lcf-%d-p", pid);
	snprintf(ns_d, sizeof ns_d, "lcf-%d-d", pid);
	snprintf(veth_p, sizeof veth_p, "lcf%dp", pid);
	snprintf(veth_d, sizeof veth_d, "lcf%dd", pid);
	if (sh("ip netns add %s 2>/dev/null", ns_p)) {
		fprintf(stderr, "skip: cannot create a network namespace here\n");
		return TU_SKIP;
	}
	ns_made = true;
	if (sh("ip netns add %s", ns_d) ||
	    sh("ip link add %s type veth peer name %s", veth_p, veth_d) ||
	    sh("ip link set %s netns %s", veth_p, ns_p) ||
	    sh("ip link set %s netns %s", veth_d, ns_d) ||
	    sh("ip -n %s addr add %s/24 dev %s", ns_p, IP_P, veth_p) ||
	    sh("ip -n %s addr add %s/24 dev %s", ns_d, IP_D, veth_d) ||
	    sh("ip -n %s link set lo up", ns_p) || sh("ip -n %s link set lo up", ns_d) ||
	    sh("ip -n %s link set %s up", ns_p, veth_p) ||
	    sh("ip -n %s link set %s up", ns_d, veth_d)) {
		fprintf(stderr, "skip: cannot set up the veth pair between namespaces\n");
		ns_cleanup();
		return TU_SKIP;
	}
	return 0;
}

/* Replace the veth pair by two TUN devices of the same names joined by
 * lc_netdelay with `args` (its options). 0, or 77 with a message. */
static int netdelay_link(const char *args)
{
	const char *exe = getenv("LC_NETDELAY");
	if (!exe || access(exe, X_OK)) {
		fprintf(stderr, "skip: tc netem is not available in this kernel (sch_netem), and "
				"no lc_netdelay ($LC_NETDELAY) to stand in for it\n");
		return TU_SKIP;
	}
	sh("ip -n %s link del %s 2>/dev/null", ns_p, veth_p); /* and its peer */
	int out[2];
	if (pipe2(out, O_CLOEXEC))
		return TU_SKIP;
	char cmd[512];
	snprintf(cmd, sizeof cmd, "exec '%s' %s %s %s", exe, args, veth_p, veth_d);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(out[1], 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	netdelay_pid = pid;
	char line[128] = "";
	struct pollfd pf = {.fd = out[0], .events = POLLIN};
	ssize_t n = pid > 0 && poll(&pf, 1, 5000) == 1 ? read(out[0], line, sizeof line - 1) : -1;
	close(out[0]); /* its later output (statistics) is not needed */
	if (n <= 0 || strncmp(line, "ready", 5) || sh("ip link set %s netns %s", veth_p, ns_p) ||
	    sh("ip link set %s netns %s", veth_d, ns_d) ||
	    sh("ip -n %s addr add %s/24 dev %s", ns_p, IP_P, veth_p) ||
	    sh("ip -n %s addr add %s/24 dev %s", ns_d, IP_D, veth_d) ||
	    sh("ip -n %s link set %s mtu 65000 up", ns_p, veth_p) ||
	    sh("ip -n %s link set %s mtu 65000 up", ns_d, veth_d)) {
		fprintf(stderr, "skip: tc netem is not available (sch_netem) and lc_netdelay could "
				"not set up its TUN devices\n");
		return TU_SKIP;
	}
	fprintf(stderr, "link: no tc netem here; lc_netdelay %s between TUN devices %s, %s\n", args,
		veth_p, veth_d);
	return 0;
}

/* netem `spec` on both ends, else lc_netdelay with `nd_args` (the same
 * fault: the options hold or drop each direction alike). */
static int netem(const char *spec, const char *nd_args)
{
	if (sh("ip netns exec %s tc qdisc add dev %s root netem %s 2>/dev/null", ns_p, veth_p,
	       spec) ||
	    sh("ip netns exec %s tc qdisc add dev %s root netem %s 2>/dev/null", ns_d, veth_d,
	       spec))
		return netdelay_link(nd_args);
	return 0;
}

static void enter_ns(const char *name)
{
	char path[128];
	snprintf(path, sizeof path, "/run/netns/%s", name);
	int fd = open(path, O_RDONLY);
	TU_CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0, "setns %s: %s", name, strerror(errno));
	close(fd);
}

/* ==== the model, on both sides ==== */

typedef tu_pool_t side_t;

static void side_init(side_t *s, const char *name, int p_index)
{
	tu_pool_init(s, name, NULL, LAYERS, PAGES, ITEM);
	if (p_index >= 0) {
		for (int b = 0; b < NBUF; b++)
			for (int q = 0; q < PAGES; q++)
				tu_fill((uint8_t *)s->bases[b] + (size_t)q * ITEM, ITEM,
					seed_of(p_index, b, q));
	} else {
		memset(s->mem, CANARY, s->len);
	}
}

static void side_fini(side_t *s)
{
	tu_pool_fini(s);
}

static void metadata_of(uint64_t room, uint8_t *out)
{
	tu_fill(out, META_LEN, room * 31 + 7);
}

/* Report every sender that turned final since the last call (1 ms resolution
 * while P computes, so that measured times are the library's, not ours). */
static int p_poll(int p, lc_sender_t *snd[ND][R], bool done[ND][R])
{
	int left = 0;
	for (int d = 0; d < ND; d++)
		for (int i = 0; i < R; i++) {
			if (done[d][i])
				continue;
			lc_room_info_t info = {.size = sizeof info};
			int st = lc_sender_poll(snd[d][i], &info);
			if (st != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED) {
				left++;
				continue;
			}
			done[d][i] = true;
			say("final P %d %d %d %d %d %llu %s", p, d, i, st, info.fail_reason,
			    (unsigned long long)now_ms(), info.reason);
		}
	return left;
}

static void p_sleep(int p, lc_sender_t *snd[ND][R], bool done[ND][R], int us)
{
	uint64_t end = now_ms() + (uint64_t)us / 1000;
	do {
		p_poll(p, snd, done);
		usleep(1000);
	} while (now_ms() < end);
}

/* ==== P process ==== */

static int p_main(int p)
{
	char name[16], addr[96], host_port[96];
	snprintf(name, sizeof name, "p%d", p);
	signal(SIGPIPE, SIG_IGN);
	const char *ip = NET ? IP_P : "127.0.0.1";
	side_t s;
	side_init(&s, name, p);
	lc_bootstrap_t *bs;
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = NET ? "0.0.0.0" : ip, .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &bs));
	snprintf(host_port, sizeof host_port, "%s:%d", ip, lc_bootstrap_port(bs));
	lc_prefill_t *pf;
	lc_engine_t *eng;
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = host_port,
				  .host = ip,
				  .name = name,
				  .world_size = 1,
				  .dp_size = 1,
				  .engine_rank = 0,
				  .metrics_server = bs};
	TU_OK(lc_prefill_create(s.ctx, &pp, &pf));
	TU_OK(lc_prefill_engine(pf, &eng));
	snprintf(addr, sizeof addr, "%s", host_port);
	uint64_t rss0 = rss_bytes();
	say("addr %s", addr);
	int failures = 0;
	for (int w = 0; w < waves; w++) {
		lc_sender_t *snd[ND][R];
		for (int d = 0; d < ND; d++)
			for (int i = 0; i < R; i++)
				TU_OK(lc_sender_create(pf, room_id(p, d, i), &snd[d][i]));
		uint64_t dl = now_ms() + 20000;
		for (bool all = false; !all && now_ms() < dl; usleep(2000)) {
			all = true;
			for (int d = 0; d < ND; d++)
				for (int i = 0; i < R; i++)
					if (lc_sender_poll(snd[d][i], NULL) ==
					    LC_ROOM_BOOTSTRAPPING)
						all = false;
		}
		bool stop_steps = false, done[ND][R] = {{false}};
		int recorded = 0;
		for (int k = 0; k < CHUNKS && !stop_steps; k++) {
			TU_OK(lc_engine_batch_begin(eng, 0));
			for (int d = 0; d < ND; d++)
				for (int i = 0; i < R; i++) {
					if (lc_sender_poll(snd[d][i], NULL) == LC_ROOM_FAILED)
						continue;
					int per = RP / CHUNKS;
					int64_t pages[RP];
					for (int j = 0; j < per; j++)
						pages[j] = src_page(d, i, k * per + j);
					lc_chunk_t ch = {.size = sizeof ch,
							 .room = room_id(p, d, i),
							 .pages = pages,
							 .page_count = (size_t)per,
							 .dst_index = (uint64_t)(k * per),
							 .is_last = k == CHUNKS - 1};
					int rc = lc_engine_chunk_add(eng, &ch);
					if (rc)
						fprintf(stderr, "P%d room %llu chunk %d: %s\n", p,
							(unsigned long long)ch.room, k,
							lc_strerror(rc));
				}
			TU_OK(lc_engine_batch_end(eng));
			say("batch %d %d %llu", w, k, (unsigned long long)now_ms());
			for (int l = 0; l < LAYERS; l++) {
				p_sleep(p, snd, done, layer_us);
				if (F == F_STEP_NEVER && p == 0 && recorded == LAYERS / 2) {
					stop_steps = true; /* layer 4 never becomes ready */
					break;
				}
				TU_OK(lc_engine_record_cache(eng));
				recorded++;
				say("layer %d %d", w, recorded);
			}
			if (!stop_steps)
				TU_OK(lc_engine_record_aux(eng));
		}
		if (F == F_METADATA_NEVER && p == 0)
			say("fault %llu", (unsigned long long)now_ms()); /* last layer ready */
		else
			for (int d = 0; d < ND; d++)
				for (int i = 0; i < R; i++) {
					uint8_t meta[META_LEN];
					metadata_of(room_id(p, d, i), meta);
					lc_sender_metadata_set(snd[d][i], meta, sizeof meta);
				}
		dl = now_ms() + 30000;
		int left;
		while ((left = p_poll(p, snd, done)) && now_ms() < dl)
			usleep(1000);
		if (left)
			failures++;
		for (int d = 0; d < ND; d++)
			for (int i = 0; i < R; i++)
				lc_sender_destroy(snd[d][i]);
		say("wave-done %d", w);
		if (w + 1 < waves && !wait_cmd("next", 60000, NULL, 0))
			failures++;
	}
	/* Back to baseline: no room, no task, memory within a bound. */
	lc_engine_metrics_t m = {.size = sizeof m};
	uint64_t active = 0;
	for (uint64_t dl = now_ms() + 3000; now_ms() < dl; usleep(10000)) {
		TU_OK(lc_engine_metrics(eng, &m));
		active = m.rooms_active + m.tasks_pending + m.tasks_inflight;
		if (!active)
			break;
	}
	say("p-check %d %llu %llu %llu %llu %llu", p, (unsigned long long)m.rooms_active,
	    (unsigned long long)m.tasks_pending, (unsigned long long)m.tasks_inflight,
	    (unsigned long long)rss0, (unsigned long long)rss_bytes());
	wait_cmd("quit", 60000, NULL, 0);
	lc_prefill_destroy(pf);
	lc_bootstrap_stop(bs);
	side_fini(&s);
	return failures ? 1 : 0;
}

/* ==== D process ==== */

typedef struct droom {
	lc_receiver_t *r;
	int p, i, slot; /* p = -1: the unreachable bootstrap */
	uint64_t room;
	bool sent, final;
	int status;
} droom_t;

static int d_verify(side_t *s, droom_t *rooms, int n, int d, int wave)
{
	int bad = 0;
	bool slot_ok[PAGES / RP] = {false}; /* slots whose pages must be P's bytes */
	int slot_p[PAGES / RP], slot_i[PAGES / RP];
	bool slot_used[PAGES / RP] = {false};
	for (int k = 0; k < n; k++) {
		slot_used[rooms[k].slot] = true;
		if (rooms[k].status == LC_ROOM_SUCCESS) {
			slot_ok[rooms[k].slot] = true;
			slot_p[rooms[k].slot] = rooms[k].p;
			slot_i[rooms[k].slot] = rooms[k].i;
		}
	}
	for (int b = 0; b < NBUF; b++)
		for (int q = 0; q < PAGES; q++) {
			const uint8_t *pg = (uint8_t *)s->bases[b] + (size_t)q * ITEM;
			int slot = q / RP, j = q % RP;
			if (slot_ok[slot]) {
				long at = tu_verify(
					pg, ITEM,
					seed_of(slot_p[slot], b, src_page(d, slot_i[slot], j)));
				if (at >= 0) {
					fprintf(stderr,
						"D%d wave %d: buffer %d page %d differs at %ld\n",
						d, wave, b, q, at);
					bad++;
				}
			} else if (!slot_used[slot] || slot >= SLOT_DEAD) {
				/* Never granted, or granted for a room P must never
				 * write (unreachable P, refused claim). */
				for (size_t x = 0; x < ITEM; x++)
					if (pg[x] != CANARY) {
						fprintf(stderr,
							"D%d wave %d: page %d of buffer %d "
							"(never granted) written\n",
							d, wave, q, b);
						bad++;
						break;
					}
			}
		}
	return bad;
}

static void d_room_add(lc_decode_t *dec, droom_t *dr, int *n, const char *bs, int p, int i,
		       int slot, uint64_t room)
{
	droom_t *x = &dr[(*n)++];
	*x = (droom_t){.p = p, .i = i, .slot = slot, .room = room, .status = -1};
	TU_OK(lc_receiver_create(dec, bs, room, &x->r));
}

static void d_send(droom_t *x)
{
	int64_t pages[RP];
	for (int j = 0; j < RP; j++)
		pages[j] = x->slot * RP + j;
	lc_receiver_pages_t pg = {.size = sizeof pg,
				  .pages = pages,
				  .page_count = RP,
				  .prefix_len = 0,
				  .aux_index = x->slot};
	TU_OK(lc_receiver_send(x->r, &pg));
	x->sent = true;
}

static int d_main(int d)
{
	char name[16], line[512], paddr[NP][96], dead[96];
	snprintf(name, sizeof name, "d%d", d);
	signal(SIGPIPE, SIG_IGN);
	bool remote = NET && d == 0;
	const char *ip = NET ? (remote ? IP_D : IP_P) : "127.0.0.1";
	char listen[64], session[16];
	snprintf(listen, sizeof listen, "tcp://%s:0", ip);
	snprintf(session, sizeof session, "dec%d", d);
	side_t s;
	side_init(&s, name, -1);
	lc_decode_t *dec;
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = listen,
				 .host = ip,
				 .session = session,
				 .tp_size = 1,
				 .tp_rank = 0};
	TU_OK(lc_decode_create(s.ctx, &dp, &dec));
	TU_CHECK(wait_cmd("addrs", 30000, line, sizeof line), "no P addresses");
	TU_CHECK(sscanf(line, "addrs %95s %95s %95s", paddr[0], paddr[1], dead) == 3, "%s", line);
	uint64_t rss0 = rss_bytes();
	say("ready");
	int failures = 0;
	for (int w = 0; w < waves; w++) {
		droom_t dr[MAX_ROOMS];
		int n = 0;
		if (w)
			memset(s.mem, CANARY, s.len); /* reused ids must land afresh */
		for (int p = 0; p < NP; p++)
			for (int i = 0; i < R; i++)
				d_room_add(dec, dr, &n, paddr[p], p, i, p * R + i,
					   room_id(p, d, i));
		if (F == F_BOOTSTRAP_UNREACHABLE && d == 0) {
			say("fault %llu", (unsigned long long)now_ms());
			for (int i = 0; i < 2; i++)
				d_room_add(dec, dr, &n, dead, -1, i, SLOT_DEAD + i,
					   9000 + (uint64_t)i);
		}
		bool cancelled = false, conflict = false;
		uint8_t *snap = NULL;
		int said_sent = 0;
		uint64_t dl = now_ms() + (uint64_t)K.bootstrap + (uint64_t)K.waiting + 20000;
		for (int left = n; left && now_ms() < dl; usleep(1000)) {
			if (F == F_ROOM_REUSED && d == 1 && w == 0 && !conflict &&
			    chan_line(&cmd_in, line, sizeof line, 0) && !strcmp(line, "conflict")) {
				/* D1 claims one of D0's live rooms at P0. */
				conflict = true;
				say("fault %llu", (unsigned long long)now_ms());
				d_room_add(dec, dr, &n, paddr[0], 0, 0, SLOT_CONFLICT,
					   room_id(0, 0, 0));
				left++;
			}
			int sent = 0;
			for (int k = 0; k < n; k++) {
				droom_t *x = &dr[k];
				if (x->final)
					continue;
				lc_room_info_t info = {.size = sizeof info};
				int st = lc_receiver_poll(x->r, &info);
				if (st == LC_ROOM_BOOTSTRAPPED && !x->sent)
					d_send(x);
				sent += x->sent;
				if (F == F_D_CANCELS && d == 0 && w == 0 && x->p == 0 &&
				    x->i == 0 && !cancelled && x->sent &&
				    lc_receiver_layers_ready(x->r) >= 1) {
					cancelled = true;
					snap = malloc(s.len);
					uint64_t t = now_ms();
					TU_OK(lc_receiver_cancel(x->r, "fault matrix: D cancels"));
					st = lc_receiver_poll(x->r, &info);
					uint64_t t1 = now_ms();
					/* Grants are revoked: from here on nothing lands in
					 * the room's pages (slot 0 of every buffer; the other
					 * rooms are still being written). */
					for (int b = 0; b < NBUF; b++)
						memcpy(snap + (size_t)b * PAGES * ITEM,
						       s.mem + (size_t)b * PAGES * ITEM,
						       (size_t)RP * ITEM);
					say("fault %llu layers %d", (unsigned long long)t,
					    lc_receiver_layers_ready(x->r));
					say("final D %d %d %d %d %d %llu %s", x->p, d, x->slot, st,
					    info.fail_reason, (unsigned long long)t1, info.reason);
					x->final = true;
					x->status = st;
					left--;
					continue;
				}
				if (st != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED)
					continue;
				x->final = true;
				x->status = st;
				left--;
				say("final D %d %d %d %d %d %llu %s", x->p, d, x->slot, st,
				    info.fail_reason, (unsigned long long)now_ms(), info.reason);
				if (st == LC_ROOM_SUCCESS && x->p >= 0) {
					uint8_t meta[LC_METADATA_MAX], want[META_LEN];
					int len = lc_receiver_metadata(x->r, meta, sizeof meta);
					metadata_of(x->room, want);
					if (len != META_LEN || memcmp(meta, want, META_LEN)) {
						fprintf(stderr,
							"D%d: metadata of room %llu wrong\n", d,
							(unsigned long long)x->room);
						failures++;
					}
				}
			}
			if (sent == NP * R && !said_sent) {
				said_sent = 1;
				say("sent %d", w);
			}
		}
		int bad = d_verify(&s, dr, n, d, w);
		if (snap) {
			/* P keeps computing after the cancel: nothing may land in
			 * the cancelled room's pages (slot 0 of every buffer). */
			usleep(500000);
			for (int b = 0; b < NBUF; b++) {
				size_t off = (size_t)b * PAGES * ITEM;
				if (memcmp(snap + off, s.mem + off, (size_t)RP * ITEM)) {
					fprintf(stderr,
						"D%d: buffer %d of the cancelled room "
						"changed after the cancel\n",
						d, b);
					bad++;
				}
			}
			free(snap);
		}
		for (int k = 0; k < n; k++) {
			if (!dr[k].final) {
				fprintf(stderr, "D%d: room %llu never final\n", d,
					(unsigned long long)dr[k].room);
				failures++;
			}
			lc_receiver_destroy(dr[k].r);
		}
		say("verify %d %d %d", d, w, bad);
		say("wave-done %d", w);
		if (w + 1 < waves && !wait_cmd("next", 60000, NULL, 0))
			failures++;
	}
	size_t grants = lc__grant_rooms(s.ctx->grants);
	say("d-check %d %zu %llu %llu", d, grants, (unsigned long long)rss0,
	    (unsigned long long)rss_bytes());
	wait_cmd("quit", 60000, NULL, 0);
	lc_decode_destroy(dec);
	side_fini(&s);
	return failures ? 1 : 0;
}

/* A P rank whose bootstrap server is unreachable: lc_prefill_create must
 * give up with LC_ERR_UNREACHABLE within its bounded retries. */
static int p_orphan_main(const char *dead)
{
	side_t s;
	side_init(&s, "p-orphan", 0);
	lc_prefill_t *pf = NULL;
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = dead,
				  .host = "127.0.0.1",
				  .name = "p-orphan",
				  .world_size = 1,
				  .dp_size = 1,
				  .engine_rank = 0};
	uint64_t t0 = now_ms();
	int rc = lc_prefill_create(s.ctx, &pp, &pf);
	say("orphan %d %llu %llu", rc, (unsigned long long)t0, (unsigned long long)now_ms());
	if (!rc)
		lc_prefill_destroy(pf);
	side_fini(&s);
	return 0;
}

/* ==== the parent ==== */

typedef struct proc {
	const char *name;
	pid_t pid;
	chan_t out;
	int cmd_fd;
	bool dead;
} proc_t;

static proc_t procs[5];
static int nprocs;

static proc_t *spawn(const char *name, const char *ns, int (*fn)(int), int arg, const char *sarg)
{
	int o[2], c[2];
	TU_CHECK(pipe(o) == 0 && pipe(c) == 0, "pipe");
	proc_t *pr = &procs[nprocs++];
	*pr = (proc_t){.name = name};
	fflush(NULL);
	pr->pid = fork();
	TU_CHECK(pr->pid >= 0, "fork");
	if (pr->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGALRM, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		close(o[0]);
		close(c[1]);
		for (int k = 0; k < nprocs - 1; k++) {
			if (procs[k].out.fd >= 0)
				close(procs[k].out.fd);
			close(procs[k].cmd_fd);
		}
		out_fd = o[1];
		cmd_in.fd = c[0];
		if (ns)
			enter_ns(ns);
		_exit(fn ? fn(arg) : p_orphan_main(sarg));
	}
	close(o[1]);
	close(c[0]);
	pr->out.fd = o[0];
	pr->cmd_fd = c[1];
	return pr;
}

static void tell(proc_t *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tell(proc_t *pr, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	if (write(pr->cmd_fd, line, (size_t)n) < 0 && !pr->dead && errno != EPIPE)
		fprintf(stderr, "tell %s: %s\n", pr->name, strerror(errno));
}

/* Everything the children said, in order, with the parent's receive time. */
typedef struct event {
	int proc;
	char line[400];
} event_t;

static event_t events[512];
static int nevents;

/* Read whatever the children say within timeout_ms; returns the index of
 * the first event (from `proc`, or any when < 0) starting with prefix that
 * arrived at or after index `from`, or -1. */
static int wait_event(int proc, const char *prefix, int timeout_ms, int from)
{
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		for (int k = from; k < nevents; k++)
			if ((proc < 0 || events[k].proc == proc) &&
			    !strncmp(events[k].line, prefix, strlen(prefix)))
				return k;
		from = nevents;
		if (now_ms() >= dl)
			return -1;
		fd_set fds;
		int maxfd = -1;
		FD_ZERO(&fds);
		for (int k = 0; k < nprocs; k++)
			if (procs[k].out.fd >= 0) {
				FD_SET(procs[k].out.fd, &fds);
				if (procs[k].out.fd > maxfd)
					maxfd = procs[k].out.fd;
			}
		if (maxfd < 0) {
			usleep(10000);
			continue;
		}
		struct timeval tv = {0, 20000};
		if (select(maxfd + 1, &fds, NULL, NULL, &tv) <= 0)
			continue;
		for (int k = 0; k < nprocs; k++) {
			chan_t *c = &procs[k].out;
			if (c->fd < 0 || !FD_ISSET(c->fd, &fds))
				continue;
			ssize_t n = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
			if (n <= 0) {
				close(c->fd);
				c->fd = -1;
				continue;
			}
			c->len += (size_t)n;
			char *nl;
			while ((nl = memchr(c->buf, '\n', c->len))) {
				*nl = '\0';
				if (nevents < (int)LC__ARRAY_SIZE(events)) {
					events[nevents].proc = k;
					size_t ll = LC__MIN((size_t)(nl - c->buf),
							    sizeof events[nevents].line - 1);
					memcpy(events[nevents].line, c->buf, ll);
					events[nevents].line[ll] = '\0';
					nevents++;
				}
				size_t used = (size_t)(nl - c->buf) + 1;
				memmove(c->buf, nl + 1, c->len - used);
				c->len -= used;
			}
		}
	}
}

static void kill_all(void)
{
	for (int k = 0; k < nprocs; k++)
		if (procs[k].pid > 0 && !procs[k].dead) {
			kill(procs[k].pid, SIGCONT);
			kill(procs[k].pid, SIGKILL);
			waitpid(procs[k].pid, NULL, 0);
			procs[k].dead = true;
		}
}

static void on_fatal_signal(int sig)
{
	fprintf(stderr, "fault matrix: signal %d (watchdog or ctest timeout): cleaning up\n", sig);
	kill_all();
	ns_cleanup();
	_exit(1);
}

static int reap(proc_t *pr, int timeout_ms)
{
	if (pr->dead)
		return 0;
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	int st;
	while (now_ms() < dl) {
		if (waitpid(pr->pid, &st, WNOHANG) == pr->pid) {
			pr->dead = true;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		usleep(10000);
	}
	kill(pr->pid, SIGKILL);
	waitpid(pr->pid, NULL, 0);
	pr->dead = true;
	return 124;
}

/* An address where nothing answers: a bound socket that never listens
 * (connections are refused at once; the port stays reserved). */
static int dead_addr(char *out, size_t cap)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof a;
	TU_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
			 getsockname(fd, (struct sockaddr *)&a, &l) == 0,
		 "bind");
	snprintf(out, cap, "127.0.0.1:%d", ntohs(a.sin_port));
	return fd;
}

/* ---- expectations ---- */

typedef struct expect {
	bool victim;
	int status, reason; /* reason: -1 any */
	int alt_reason;     /* a second acceptable reason, -1 none */
	int deadline_ms;
	uint64_t t0; /* fault instant for this room (0: wave start) */
	const char *deadline_knob;
} expect_t;

typedef struct result {
	char side; /* 'P' or 'D' */
	int p, d, slot, status, reason;
	uint64_t t;
	char text[200];
	expect_t e;
	bool ok;
	long measured_ms;
} result_t;

static result_t results[128];
static int nresults;
static uint64_t t_fault, t_resume, t_start;

/* D's liveness is its control channel's (docs/control-plane.md): ZMTP
 * PINGs every interval, the connection dropped after `misses` intervals
 * without traffic back, and D fails P's rooms after `misses` consecutive
 * checks (one per interval) that found it down. A killed P closes the
 * connection at once: (misses + 1) intervals. A cut link first waits out
 * the heartbeat timeout: (2 misses + 1) intervals. */
static int hb_deadline(bool cut)
{
	return ((cut ? 2 : 1) * K.hb_misses + 1) * K.hb_interval;
}

static expect_t expectation(char side, int p, int d, int slot)
{
	expect_t e = {.status = LC_ROOM_SUCCESS,
		      .reason = -1,
		      .alt_reason = -1,
		      .deadline_ms = K.bootstrap + K.waiting,
		      .t0 = t_start,
		      .deadline_knob = "bootstrap_timeout_ms + waiting_timeout_ms"};
	bool p0 = p == 0, d0 = d == 0;
	switch (F) {
	case F_D_KILLED:
		if (side == 'P' && d0)
			e = (expect_t){true,
				       LC_ROOM_FAILED,
				       LC_FAIL_TRANSFER,
				       LC_FAIL_TRANSFER_TIMEOUT,
				       K.transfer,
				       t_fault,
				       "transfer_timeout_ms"};
		break;
	case F_P_KILLED:
		if (side == 'D' && p0)
			e = (expect_t){true,
				       LC_ROOM_FAILED,
				       LC_FAIL_SESSION_GONE,
				       -1,
				       hb_deadline(false),
				       t_fault,
				       "(heartbeat_misses+1) x heartbeat_interval_ms"};
		break;
	case F_D_STOPPED:
		if (side == 'P' && d0)
			e = (expect_t){true,       LC_ROOM_FAILED, LC_FAIL_TRANSFER_TIMEOUT, -1,
				       K.transfer, t_fault,        "transfer_timeout_ms"};
		if (side == 'D' && d0) /* D0 learns it when it runs again */
			e = (expect_t){true, LC_ROOM_FAILED, LC_FAIL_TRANSFER_TIMEOUT,          -1,
				       0,    t_resume,       "on resume (P's status is queued)"};
		break;
	case F_LINK_DOWN:
		if (side == 'P' && d0)
			e = (expect_t){true,
				       LC_ROOM_FAILED,
				       LC_FAIL_TRANSFER_TIMEOUT,
				       LC_FAIL_TRANSFER,
				       K.transfer,
				       t_fault,
				       "transfer_timeout_ms"};
		if (side == 'D' && d0)
			e = (expect_t){true,
				       LC_ROOM_FAILED,
				       LC_FAIL_SESSION_GONE,
				       -1,
				       hb_deadline(true),
				       t_fault,
				       "(2 x heartbeat_misses+1) x heartbeat_interval_ms"};
		break;
	case F_LOSS:
	case F_DELAY:
		if (d0) {
			e.victim = true;
			e.deadline_ms = K.bootstrap + K.waiting;
		}
		break;
	case F_STEP_NEVER:
		if (p0)
			e = (expect_t){true,    LC_ROOM_FAILED, LC_FAIL_LAYER_TIMEOUT, -1,
				       K.layer, t_fault,        "layer_timeout_ms"};
		break;
	case F_METADATA_NEVER:
		if (p0)
			e = (expect_t){true,       LC_ROOM_FAILED, LC_FAIL_METADATA_TIMEOUT, -1,
				       K.metadata, t_fault,        "metadata_timeout_ms"};
		break;
	case F_BOOTSTRAP_UNREACHABLE:
		if (side == 'D' && p < 0)
			e = (expect_t){true,        LC_ROOM_FAILED, LC_FAIL_BOOTSTRAP_TIMEOUT, -1,
				       K.bootstrap, t_fault,        "bootstrap_timeout_ms"};
		break;
	case F_ROOM_REUSED:
		if (side == 'D' && slot == SLOT_CONFLICT)
			e = (expect_t){true,        LC_ROOM_FAILED, LC_FAIL_BAD_INPUT,     -1,
				       K.bootstrap, t_fault,        "bootstrap_timeout_ms"};
		break;
	case F_D_CANCELS:
		if (p0 && d0 && slot == 0)
			e = (expect_t){true,
				       LC_ROOM_FAILED,
				       LC_FAIL_CANCELLED,
				       -1,
				       side == 'D' ? 0 : K.transfer,
				       t_fault,
				       side == 'D' ? "synchronous (lc_receiver_cancel)"
						   : "transfer_timeout_ms"};
		break;
	default:
		break;
	}
	return e;
}

static const char *st_name(int st)
{
	return st < 0 ? "none" : lc_room_status_name(st);
}

static void collect_finals(int from, int wave)
{
	for (int k = from; k < nevents; k++) {
		result_t r = {0};
		unsigned long long t;
		int off = 0;
		if (sscanf(events[k].line, "final %c %d %d %d %d %d %llu %n", &r.side, &r.p, &r.d,
			   &r.slot, &r.status, &r.reason, &t, &off) < 7)
			continue;
		r.t = t;
		snprintf(r.text, sizeof r.text, "%s", events[k].line + off);
		r.e = expectation(r.side, r.p, r.d, r.slot);
		uint64_t t0 = r.e.t0 ? r.e.t0 : t_start;
		r.measured_ms = (long)r.t - (long)t0;
		r.ok = r.status == r.e.status;
		if (r.ok && r.status == LC_ROOM_FAILED && r.e.reason >= 0)
			r.ok = r.reason == r.e.reason || r.reason == r.e.alt_reason;
		if (r.ok && r.e.victim && r.measured_ms > r.e.deadline_ms + MARGIN_MS)
			r.ok = false;
		fprintf(stderr,
			"%s wave %d %c P%d->D%d slot %d: %s (%s) after %ld ms "
			"[want %s%s%s, deadline %d ms] %s%s\n",
			r.ok ? "ok  " : "FAIL", wave, r.side, r.p, r.d, r.slot, st_name(r.status),
			lc_fail_reason_name(r.reason), r.measured_ms, st_name(r.e.status),
			r.e.reason >= 0 ? " " : "",
			r.e.reason >= 0 ? lc_fail_reason_name(r.e.reason) : "", r.e.deadline_ms,
			r.text, r.e.victim ? " (victim)" : "");
		if (nresults < (int)LC__ARRAY_SIZE(results))
			results[nresults++] = r;
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s >= 0x20)
			fputc(*s, f);
	}
	fputc('"', f);
}

static void write_json(bool pass, const char *notes)
{
	const char *dir = getenv("LC_FAULTS_OUT");
	char path[512];
	if (!dir)
		dir = "results";
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/%s.json", dir, case_names[F]);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "{\"case\":");
	json_str(f, case_names[F]);
	fprintf(f, ",\"title\":");
	json_str(f, case_titles[F]);
	fprintf(f, ",\"result\":\"%s\",\"margin_ms\":%d,\"victims\":[", pass ? "pass" : "fail",
		MARGIN_MS);
	/* Per side: the victims' deadline and the worst measured time. */
	int nv = 0;
	for (int side = 0; side < 2; side++) {
		char c = side ? 'D' : 'P';
		long worst = -1;
		int deadline = -1, count = 0;
		const char *knob = "", *reason = "";
		for (int k = 0; k < nresults; k++)
			if (results[k].e.victim && results[k].side == c) {
				count++;
				if (results[k].measured_ms > worst) {
					worst = results[k].measured_ms;
					deadline = results[k].e.deadline_ms;
					knob = results[k].e.deadline_knob;
					reason = results[k].status == LC_ROOM_SUCCESS
							 ? "Success"
							 : lc_fail_reason_name(results[k].reason);
				}
			}
		if (!count)
			continue;
		fprintf(f,
			"%s{\"side\":\"%c\",\"rooms\":%d,\"outcome\":\"%s\",\"deadline_ms\":%d,"
			"\"worst_ms\":%ld,\"deadline\":",
			nv++ ? "," : "", c, count, reason, deadline, worst);
		json_str(f, knob);
		fputc('}', f);
	}
	fputc(']', f);
	fprintf(f,
		",\"knobs\":{\"connect_timeout_ms\":%d,\"progress_timeout_ms\":%d,"
		"\"transfer_timeout_ms\":%d,\"layer_timeout_ms\":%d,\"metadata_timeout_ms\":%d,"
		"\"bootstrap_timeout_ms\":%d,\"waiting_timeout_ms\":%d,"
		"\"heartbeat_interval_ms\":%d,\"heartbeat_misses\":%d},\"notes\":",
		K.connect, K.progress, K.transfer, K.layer, K.metadata, K.bootstrap, K.waiting,
		K.hb_interval, K.hb_misses);
	json_str(f, notes);
	fprintf(f, ",\"rooms\":[");
	for (int k = 0; k < nresults; k++) {
		result_t *r = &results[k];
		fprintf(f,
			"%s{\"side\":\"%c\",\"p\":%d,\"d\":%d,\"slot\":%d,\"victim\":%s,"
			"\"status\":\"%s\",\"reason\":\"%s\",\"expected_status\":\"%s\","
			"\"expected_reason\":\"%s\",\"deadline_ms\":%d,\"measured_ms\":%ld,"
			"\"ok\":%s,\"text\":",
			k ? "," : "", r->side, r->p, r->d, r->slot, r->e.victim ? "true" : "false",
			st_name(r->status), lc_fail_reason_name(r->reason), st_name(r->e.status),
			r->e.reason >= 0 ? lc_fail_reason_name(r->e.reason) : "", r->e.deadline_ms,
			r->measured_ms, r->ok ? "true" : "false");
		json_str(f, r->text);
		fputc('}', f);
	}
	fprintf(f, "]}\n");
	fclose(f);
	fprintf(stderr, "results: %s\n", path);
}

static void set_knobs(void)
{
	char v[32];
#define KNOB(env, val)                                                                             \
	do {                                                                                       \
		snprintf(v, sizeof v, "%d", (val));                                                \
		setenv(env, v, 1);                                                                 \
	} while (0)
	KNOB("LAYERCAKE_CONNECT_TIMEOUT_MS", K.connect);
	KNOB("LAYERCAKE_PROGRESS_TIMEOUT_MS", K.progress);
	KNOB("LAYERCAKE_TRANSFER_TIMEOUT_MS", K.transfer);
	KNOB("LAYERCAKE_LAYER_TIMEOUT_MS", K.layer);
	KNOB("LAYERCAKE_METADATA_TIMEOUT_MS", K.metadata);
	KNOB("LAYERCAKE_BOOTSTRAP_TIMEOUT_MS", K.bootstrap);
	KNOB("LAYERCAKE_WAITING_TIMEOUT_MS", K.waiting);
	KNOB("LAYERCAKE_HEARTBEAT_INTERVAL_MS", K.hb_interval);
	KNOB("LAYERCAKE_HEARTBEAT_MISSES", K.hb_misses);
	KNOB("LAYERCAKE_TCP_LANES", 2);
#undef KNOB
	if (!getenv("LAYERCAKE_LOG"))
		setenv("LAYERCAKE_LOG", "error", 1);
}

static int run_case(void)
{
	char notes[512] = "";
	int fails = 0;
	if (NET) {
		int rc = ns_setup();
		if (rc)
			return rc;
		if (F == F_LOSS && (rc = netem("loss 10%", "--delay-us 0 --loss 10")))
			return rc;
		if (F == F_DELAY && (rc = netem("delay 50ms", "--delay-us 50000")))
			return rc;
	}
	set_knobs();
	char dead[96];
	int dead_fd = dead_addr(dead, sizeof dead);
	proc_t *P[NP], *D[ND];
	char addr[NP][96];
	for (int p = 0; p < NP; p++) {
		P[p] = spawn(p ? "P1" : "P0", NET ? ns_p : NULL, p_main, p, NULL);
		int k = wait_event((int)(P[p] - procs), "addr ", 30000, 0);
		TU_CHECK(k >= 0, "P%d did not start", p);
		snprintf(addr[p], sizeof addr[p], "%s", events[k].line + 5);
	}
	for (int d = 0; d < ND; d++) {
		const char *ns = NET ? (d == 0 ? ns_d : ns_p) : NULL;
		D[d] = spawn(d ? "D1" : "D0", ns, d_main, d, NULL);
		tell(D[d], "addrs %s %s %s", addr[0], addr[1], dead);
	}
	for (int d = 0; d < ND; d++)
		TU_CHECK(wait_event((int)(D[d] - procs), "ready", 30000, 0) >= 0,
			 "D%d did not start", d);
	int ip0 = (int)(P[0] - procs), id0 = (int)(D[0] - procs);
	for (int w = 0; w < waves; w++) {
		int from = nevents;
		t_start = now_ms();
		t_fault = t_resume = 0;
		char lk[32];
		snprintf(lk, sizeof lk, "layer %d %d", w, FAULT_LAYER);
		int k;
		if (w == 0)
			switch (F) {
			case F_D_KILLED:
			case F_P_KILLED:
			case F_D_STOPPED:
			case F_LINK_DOWN:
				TU_CHECK(wait_event(ip0, lk, 30000, from) >= 0,
					 "P0 never reached %s", lk);
				t_fault = now_ms();
				if (F == F_D_KILLED)
					kill(D[0]->pid, SIGKILL);
				else if (F == F_P_KILLED)
					kill(P[0]->pid, SIGKILL);
				else if (F == F_D_STOPPED)
					kill(D[0]->pid, SIGSTOP);
				else
					TU_CHECK(!sh("ip -n %s link set %s down", ns_d, veth_d),
						 "link down");
				if (F == F_D_STOPPED) {
					/* Longer than the deadline; P1->D1 must go on meanwhile. */
					wait_event(-1, "\x01", K.transfer + 2000, nevents);
					t_resume = now_ms();
					kill(D[0]->pid, SIGCONT);
				}
				break;
			case F_STEP_NEVER: /* the deadline counts from the batch */
				TU_CHECK((k = wait_event(ip0, "batch 0 0 ", 30000, from)) >= 0,
					 "batch");
				t_fault = strtoull(events[k].line + 10, NULL, 10);
				break;
			case F_METADATA_NEVER:
			case F_BOOTSTRAP_UNREACHABLE:
			case F_D_CANCELS: {
				int who = F == F_METADATA_NEVER ? ip0 : id0;
				/* (D0 may have said it before the wave began here) */
				TU_CHECK((k = wait_event(who, "fault ", 30000, 0)) >= 0,
					 "no fault");
				t_fault = strtoull(events[k].line + 6, NULL, 10);
				break;
			}
			case F_ROOM_REUSED:
				/* Once P0 holds D0's transfer infos (P0 starts its forward
				 * only when every room is Bootstrapped), D1 claims one of
				 * those room ids at P0. */
				TU_CHECK(wait_event(ip0, "batch 0 0 ", 30000, from) >= 0,
					 "P0 never bootstrapped");
				tell(D[1], "conflict");
				TU_CHECK((k = wait_event((int)(D[1] - procs), "fault ", 10000,
							 from)) >= 0,
					 "D1 never claimed");
				t_fault = strtoull(events[k].line + 6, NULL, 10);
				break;
			default:
				break;
			}
		/* Every live process finishes the wave. */
		for (int q = 0; q < 4; q++) {
			proc_t *pr = q < NP ? P[q] : D[q - NP];
			bool gone = (F == F_D_KILLED && pr == D[0]) ||
				    (F == F_P_KILLED && pr == P[0]);
			if (gone)
				continue;
			char want[32];
			snprintf(want, sizeof want, "wave-done %d", w);
			if (wait_event((int)(pr - procs), want, K.bootstrap + K.waiting + 30000,
				       from) < 0) {
				fprintf(stderr, "%s never finished wave %d\n", pr->name, w);
				fails++;
			}
		}
		collect_finals(from, w);
		for (int k2 = from; k2 < nevents; k2++) {
			int dd, ww, bad;
			if (sscanf(events[k2].line, "verify %d %d %d", &dd, &ww, &bad) == 3 &&
			    bad) {
				fprintf(stderr,
					"FAIL D%d wave %d: %d pages not byte-exact or written "
					"outside grants\n",
					dd, ww, bad);
				fails++;
			}
		}
		if (w + 1 < waves)
			for (int q = 0; q < nprocs; q++)
				tell(&procs[q], "next");
	}
	/* Room counts: every room of every live side is terminal. */
	int want_rooms = 0, got_rooms = 0;
	for (int side = 0; side < 2; side++)
		for (int p = 0; p < NP; p++)
			for (int d = 0; d < ND; d++) {
				bool gone = (F == F_D_KILLED && side == 1 && d == 0) ||
					    (F == F_P_KILLED && side == 0 && p == 0);
				if (!gone)
					want_rooms += R * waves;
			}
	if (F == F_BOOTSTRAP_UNREACHABLE)
		want_rooms += 2;
	if (F == F_ROOM_REUSED)
		want_rooms += 1;
	for (int k = 0; k < nresults; k++) {
		got_rooms++;
		if (!results[k].ok)
			fails++;
	}
	if (got_rooms != want_rooms) {
		fprintf(stderr, "FAIL: %d rooms terminal, %d expected (rooms lost)\n", got_rooms,
			want_rooms);
		fails++;
	}
	/* Back to baseline. */
	int from = 0;
	for (int q = 0; q < 4; q++) {
		proc_t *pr = q < NP ? P[q] : D[q - NP];
		if ((F == F_D_KILLED && pr == D[0]) || (F == F_P_KILLED && pr == P[0]))
			continue;
		int k = wait_event((int)(pr - procs), q < NP ? "p-check" : "d-check", 15000, from);
		if (k < 0) {
			fprintf(stderr, "FAIL: %s reported no baseline\n", pr->name);
			fails++;
			continue;
		}
		unsigned long long a, b, c, r0, r1;
		size_t g;
		int who;
		if (q < NP && sscanf(events[k].line, "p-check %d %llu %llu %llu %llu %llu", &who,
				     &a, &b, &c, &r0, &r1) == 6) {
			bool ok = !a && !b && !c && r1 < r0 + (64ull << 20);
			fprintf(stderr,
				"%s P%d baseline: rooms_active %llu tasks_pending %llu "
				"tasks_inflight %llu, RSS %llu -> %llu KiB\n",
				ok ? "ok  " : "FAIL", who, a, b, c, r0 >> 10, r1 >> 10);
			fails += !ok;
			snprintf(notes + strlen(notes), sizeof notes - strlen(notes),
				 "P%d rooms_active %llu RSS %+lld KiB; ", who, a,
				 (long long)(r1 - r0) / 1024);
		} else if (q >= NP && sscanf(events[k].line, "d-check %d %zu %llu %llu", &who, &g,
					     &r0, &r1) == 4) {
			bool ok = g == 0 && r1 < r0 + (64ull << 20);
			fprintf(stderr,
				"%s D%d baseline: rooms with live grants %zu, RSS %llu -> "
				"%llu KiB\n",
				ok ? "ok  " : "FAIL", who, g, r0 >> 10, r1 >> 10);
			fails += !ok;
			snprintf(notes + strlen(notes), sizeof notes - strlen(notes),
				 "D%d grants %zu RSS %+lld KiB; ", who, g,
				 (long long)(r1 - r0) / 1024);
		}
	}
	if (F == F_BOOTSTRAP_UNREACHABLE) {
		/* And a P rank that cannot register: bounded, with a clear error. */
		proc_t *o = spawn("P-orphan", NULL, NULL, 0, dead);
		int k = wait_event((int)(o - procs), "orphan ", 30000, 0);
		int rc = 0;
		unsigned long long t0 = 0, t1 = 0;
		if (k < 0 || sscanf(events[k].line, "orphan %d %llu %llu", &rc, &t0, &t1) != 3 ||
		    rc != LC_ERR_UNREACHABLE || t1 - t0 > 2000 * 6 + 1550 + MARGIN_MS) {
			fprintf(stderr,
				"FAIL lc_prefill_create with an unreachable bootstrap: %s\n",
				k < 0 ? "no answer" : events[k].line);
			fails++;
		} else {
			fprintf(stderr,
				"ok   lc_prefill_create with an unreachable bootstrap: %s "
				"after %llu ms\n",
				lc_err_name(rc), t1 - t0);
			snprintf(notes + strlen(notes), sizeof notes - strlen(notes),
				 "lc_prefill_create -> %s after %llu ms (bound 13550 ms); ",
				 lc_err_name(rc), t1 - t0);
		}
		reap(o, 5000);
	}
	for (int q = 0; q < nprocs; q++)
		tell(&procs[q], "quit");
	for (int q = 0; q < nprocs; q++) {
		int rc = reap(&procs[q], 20000);
		bool killed = (F == F_D_KILLED && &procs[q] == D[0]) ||
			      (F == F_P_KILLED && &procs[q] == P[0]);
		if (rc && !killed) {
			fprintf(stderr, "FAIL: %s exited %d\n", procs[q].name, rc);
			fails++;
		}
	}
	close(dead_fd);
	ns_cleanup();
	write_json(fails == 0, notes);
	fprintf(stderr, "%s: %s\n", case_names[F], fails ? "FAIL" : "PASS");
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: lc_faults <case> | list\n");
		return 2;
	}
	if (!strcmp(argv[1], "list")) {
		for (int k = 0; k < F_COUNT; k++)
			printf("%s\t%s\n", case_names[k], case_titles[k]);
		return 0;
	}
	int c = -1;
	for (int k = 0; k < F_COUNT; k++)
		if (!strcmp(argv[1], case_names[k]))
			c = k;
	if (c < 0) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	F = (enum fault)c;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_fatal_signal);
	signal(SIGTERM, on_fatal_signal);
	signal(SIGINT, on_fatal_signal);
	alarm(100); /* below ctest's TIMEOUT, so that namespaces are always removed */
	atexit(ns_cleanup);
	NET = F == F_LINK_DOWN || F == F_LOSS || F == F_DELAY;
	if (F == F_LOSS || F == F_DELAY) {
		/* A lossy or slow link: connects and probes must ride out
		 * retransmissions; the rooms must still all succeed. */
		K.bootstrap = 15000;
		K.connect = 12000; /* a SYN lost twice costs 3 s, thrice 7 s */
		K.transfer = 10000;
		K.progress = 10000;
		K.waiting = 30000;
		K.hb_interval = 2000;
		K.hb_misses = 5;
	}
	if (F == F_D_STOPPED)
		K.waiting = 15000; /* D0's own deadline must not beat P's status */
	if (F == F_ROOM_REUSED)
		waves = 2;
	return run_case();
}
