/*
 * Issue 43, findings 4 and 5: what requests naming bad P addresses do to a
 * D's descriptors, its table of P peers and its discovery. A real D process
 * and a real P process (rounds.c), and the attacker in the parent: a fake
 * bootstrap server (an HTTP thread answering GET /route with the layout a
 * case chooses), a fake P rank (a ZeroMQ inbox that reads nothing and
 * answers nothing), ports where nothing listens and a listener that never
 * answers, all on 127.0.0.1. Each round at the real P checks every byte.
 *
 *   fanout        the fake bootstrap advertises 4,096 DP groups and 400
 *                 receivers name it (each room another P rank): refused
 *                 (routes_refused_fanout, the rooms fail naming
 *                 d_peer_ranks_max), D's descriptors stay where they were;
 *                 then a P D never met gets its round. Before: D went from
 *                 ~30 to ~1,000 descriptors, ZeroMQ ran out of sockets and
 *                 stayed so after the receivers closed ("cannot connect to
 *                 P rank 0" for any new P).
 *   fanout_wide   1,024 DP groups (within d_peer_ranks_max): at most
 *                 d_channels_max channels open while 300 receivers live,
 *                 every one closed within d_channel_idle_ms (1 s here) of
 *                 the receivers' end (descriptors back to where they were),
 *                 and the new P's round succeeds.
 *   fanout_curve  CURVE on at D and P (one keypair); the fake routes name
 *                 no key: each refused (routes_refused), no channel opened,
 *                 descriptors flat; the new P's round succeeds.
 *   refused_flood D has had a round at P; 256 receivers then name 256 ports
 *                 where nothing listens (live, waiting for their P): every
 *                 one is taken, and a round at the P D knows succeeds while
 *                 they live. Before: that P's receivers were refused at
 *                 create (-ENOSPC): the refused addresses had taken its place.
 *   silent_lookup 12 receivers name one listener that never answers; once
 *                 D's first lookup there timed out, a P D never met gets its
 *                 round, every room Bootstrapped within 3 s of its creation,
 *                 less than one silent lookup takes (2 tries of 2 s). Before:
 *                 the one discovery thread looked the silent address up once
 *                 per room, 4 s each, the new P's rooms behind them (47 s).
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

#define FLOOD0 100000 /* the flood's rooms */
#define FLOOD_MAX 512
#define SILENT_ROOMS 12
#define BOOT_MS_MAX 3000 /* a silent lookup: 2 tries of 2 s, and a pause */

static int failures;

#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* ---- the attacker's bootstrap server ---- */

static int bs_fd;
static char parallel_json[256], rank_json[256];

static void *bs_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(bs_fd, NULL, NULL);
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
		const char *body = strstr(req, "engine_rank=-1") ? parallel_json
				   : strstr(req, " /health")     ? "ok"
								 : rank_json;
		char out[1024];
		int len = snprintf(out, sizeof out,
				   "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
				   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
				   strlen(body), body);
		if (send(c, out, (size_t)len, MSG_NOSIGNAL) < 0) {
			/* D went */
		}
		close(c);
	}
}

/* A loopback port: listening (its socket in *fd, never accepted from when
 * the caller says so) or bound and never listening (connections refused;
 * kept until exit, so that no one else takes the port). */
static int loopback_port(bool listening, int *fd)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	TU_CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
			 getsockname(s, (struct sockaddr *)&a, &n) == 0 &&
			 (!listening || listen(s, 64) == 0),
		 "a loopback port");
	if (fd)
		*fd = s;
	return ntohs(a.sin_port);
}

/* ---- D ---- */

typedef struct d_arg {
	const char *bs;              /* the real P's bootstrap */
	char flood[FLOOD_MAX][64];   /* addresses the flood names, in turn */
	int nflood_addrs, nflood;    /* ... and its receivers */
	int flood_ms;                /* how long the flood lives before 'X' */
	int settle_ms, settle_slack; /* 'X': descriptors back within, to base + slack */
	char silent[64];             /* 'S' */
} d_arg_t;

static int fd_count(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;
	if (!dir)
		return -1;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* dir's own */
}

static uint64_t counter(lc_decode_t *d, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_decode_counter(d, name, &v));
	return v;
}

/* Channels open to P ranks now (0 where D does not say). */
static int channels(lc_decode_t *d)
{
	uint64_t v = 0;
	return lc_decode_counter(d, "channels_open", &v) ? 0 : (int)v;
}

/* Counters a D without them reads as 0. */
static unsigned long long counter_or_0(lc_decode_t *d, const char *name)
{
	uint64_t v = 0;
	return lc_decode_counter(d, name, &v) ? 0 : (unsigned long long)v;
}

/* While the flood lives: the most descriptors and channels seen. */
typedef struct sampler {
	lc_decode_t *d;
	_Atomic bool stop;
	int max_fds, max_channels;
	pthread_t th;
} sampler_t;

static void *sample_main(void *arg)
{
	sampler_t *s = arg;
	while (!atomic_load(&s->stop)) {
		int n = fd_count(), ch = channels(s->d);
		s->max_fds = n > s->max_fds ? n : s->max_fds;
		s->max_channels = ch > s->max_channels ? ch : s->max_channels;
		usleep(10000);
	}
	return NULL;
}

/* Room i of the round at the real P: Success, every byte P's. */
static bool d_check(lc_receiver_t *r, const tu_pool_t *s, uint64_t room, int i, uint64_t dl)
{
	lc_room_info_t info = {.size = sizeof info};
	int st;
	while ((st = lc_receiver_poll(r, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	fprintf(stderr, "D room %llu: %s (%s) %s\n", (unsigned long long)room,
		lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
	if (st != LC_ROOM_SUCCESS)
		return false;
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++)
			bad += tu_verify((const uint8_t *)s->bases[b] + adv_d_page(i, j) * ITEM,
					 ITEM, adv_seed_of(b, 1 + j)) >= 0;
	if (bad)
		fprintf(stderr, "D room %llu: %d pages differ from P's\n", (unsigned long long)room,
			bad);
	return !bad;
}

/* One round at the real P: says "d-sent", then "d-round R MASK BOOT_MS"
 * (the rooms that succeeded byte-exact; the longest any took to be
 * Bootstrapped, from its creation). A receiver refused at create is a room
 * that failed. */
static void d_round(lc_decode_t *d, tu_pool_t *s, const char *bs, int round)
{
	lc_receiver_t *rcv[ROOMS] = {0};
	uint64_t made[ROOMS], boot_ms = 0;
	memset(s->mem, CANARY, s->len);
	for (int i = 0; i < ROOMS; i++) {
		made[i] = adv_now_ms();
		int rc = lc_receiver_create(d, bs, adv_room_of(ROOM0, round, i), &rcv[i]);
		if (rc) {
			fprintf(stderr, "D round %d room %d refused at create: %s \"%s\"\n", round,
				i, lc_strerror(rc), lc_last_error());
			rcv[i] = NULL;
		}
	}
	bool sent[ROOMS] = {0};
	uint64_t dl = adv_now_ms() + 15000;
	for (int left = ROOMS; left && adv_now_ms() < dl; usleep(500))
		for (int i = 0; i < ROOMS; i++) {
			int st = sent[i] || !rcv[i] ? -1 : lc_receiver_poll(rcv[i], NULL);
			if (!sent[i] && !rcv[i]) {
				sent[i] = true;
				left--;
			}
			if (st != LC_ROOM_BOOTSTRAPPED && st != LC_ROOM_FAILED)
				continue;
			if (st == LC_ROOM_BOOTSTRAPPED) {
				uint64_t took = adv_now_ms() - made[i];
				boot_ms = took > boot_ms ? took : boot_ms;
				int64_t pages[NPAGES];
				for (int j = 0; j < NPAGES; j++)
					pages[j] = adv_d_page(i, j);
				lc_receiver_pages_t pg = {.size = sizeof pg,
							  .pages = pages,
							  .page_count = NPAGES,
							  .aux_index = i};
				TU_OK(lc_receiver_send(rcv[i], &pg));
			}
			sent[i] = true;
			left--;
		}
	for (int i = 0; i < ROOMS; i++)
		if (rcv[i] && !sent[i]) /* never Bootstrapped */
			boot_ms = adv_now_ms() - made[i];
	say("d-sent %d", round);
	int mask = 0;
	dl = adv_now_ms() + 15000;
	for (int i = 0; i < ROOMS; i++)
		if (rcv[i] && d_check(rcv[i], s, adv_room_of(ROOM0, round, i), i, dl))
			mask |= 1 << i;
	for (int i = 0; i < ROOMS; i++)
		lc_receiver_destroy(rcv[i]);
	say("d-round %d %d %llu", round, mask, (unsigned long long)boot_ms);
}

static lc_receiver_t *flood[FLOOD_MAX];

/* 'F': the flood's receivers, live for flood_ms; says "d-flood MADE
 * REFUSED MAX_FDS MAX_CHANNELS FANOUT ROUTES" (receivers refused at create,
 * the most descriptors and channels while they lived, routes refused). */
static void d_flood(lc_decode_t *d, const d_arg_t *a)
{
	sampler_t sm = {.d = d};
	TU_CHECK(!pthread_create(&sm.th, NULL, sample_main, &sm), "sampler");
	int made = 0, refused = 0;
	for (int i = 0; i < a->nflood; i++) {
		int rc = lc_receiver_create(d, a->flood[i % a->nflood_addrs], FLOOD0 + (uint64_t)i,
					    &flood[i]);
		if (rc) {
			flood[i] = NULL;
			refused++;
			if (refused == 1)
				fprintf(stderr, "D: flood receiver %d refused: %s\n", i,
					lc_last_error());
		} else {
			made++;
		}
	}
	usleep((useconds_t)a->flood_ms * 1000);
	atomic_store(&sm.stop, true);
	pthread_join(sm.th, NULL);
	for (int i = 0; i < a->nflood; i++) {
		lc_room_info_t info = {.size = sizeof info};
		if (flood[i] && lc_receiver_poll(flood[i], &info) == LC_ROOM_FAILED) {
			fprintf(stderr, "D: flood room %d: %s \"%s\"\n", i,
				lc_fail_reason_name(info.fail_reason), info.reason);
			break;
		}
	}
	say("d-flood %d %d %d %d %llu %llu", made, refused, sm.max_fds, sm.max_channels,
	    counter_or_0(d, "routes_refused_fanout"), counter_or_0(d, "routes_refused"));
}

/* 'X': the flood's receivers destroyed; descriptors watched until they are
 * back within settle_slack of base (or settle_ms): says "d-fds N CHANNELS". */
static void d_unflood(lc_decode_t *d, const d_arg_t *a, int base)
{
	for (int i = 0; i < a->nflood; i++) {
		lc_receiver_destroy(flood[i]);
		flood[i] = NULL;
	}
	int n = fd_count();
	for (uint64_t dl = adv_now_ms() + (uint64_t)a->settle_ms;
	     n > base + a->settle_slack && adv_now_ms() < dl; n = fd_count())
		usleep(20000);
	say("d-fds %d %d", n, channels(d));
}

/* 'S': receivers naming the silent address, until D's first lookup there
 * timed out (a discovery thread is busy with the next one, if it is so
 * made). */
static void d_silent(lc_decode_t *d, const d_arg_t *a)
{
	for (int i = 0; i < SILENT_ROOMS; i++)
		TU_OK(lc_receiver_create(d, a->silent, FLOOD0 + (uint64_t)i, &flood[i]));
	uint64_t t0 = adv_now_ms();
	while (counter(d, "bootstrap_failures") < 1 && adv_now_ms() < t0 + 20000)
		usleep(5000);
	fprintf(stderr, "D: first silent lookup failed after %llu ms\n",
		(unsigned long long)(adv_now_ms() - t0));
	usleep(100 * 1000);
	say("d-silent");
}

static int d_main(const d_arg_t *a, int go_fd)
{
	tu_pool_t s;
	lc_decode_t *d;
	tu_pool_init(&s, "d0", NULL, LAYERS, PAGES, ITEM);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0"};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	int base = fd_count();
	say("d-up %d", base);
	char c;
	for (int round = 0; (c = adv_wait_byte(go_fd)) != 'q';) {
		if (c == 'F')
			d_flood(d, a);
		else if (c == 'X')
			d_unflood(d, a, base);
		else if (c == 'S')
			d_silent(d, a);
		else if (c == 'g')
			d_round(d, &s, a->bs, round++);
	}
	for (int i = 0; i < FLOOD_MAX; i++)
		if (flood[i])
			lc_receiver_destroy(flood[i]);
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return 0;
}

static int d_child(void *arg, int go_fd)
{
	return d_main(arg, go_fd);
}

/* ---- P ---- */

static int p_child(void *arg, int go_fd)
{
	(void)arg;
	adv_p_t P;
	adv_p_up(&P, NULL, adv_seed_of);
	for (int round = 0; adv_wait_byte(go_fd) == 'g'; round++)
		adv_p_round(P.pf, P.eng, ROOM0, round, go_fd, 20000);
	adv_p_down(&P);
	return 0;
}

/* ---- the parent ---- */

typedef struct world {
	adv_proc_t p, d;
	d_arg_t a;
	int d_base;
} world_t;

static void up(world_t *w)
{
	char line[512], addr[64], ep[300];
	static char bs[64];
	adv_spawn(&w->p, p_child, NULL);
	TU_CHECK(adv_wait_line(&w->p, "addr ", 60000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", addr, ep) == 2,
		 "P did not start");
	snprintf(bs, sizeof bs, "%s", addr);
	w->a.bs = bs;
	adv_spawn(&w->d, d_child, &w->a);
	TU_CHECK(adv_wait_line(&w->d, "d-up ", 60000, line, sizeof line) &&
			 sscanf(line, "d-up %d", &w->d_base) == 1,
		 "D did not start");
}

/* A round at the real P; D's success mask (-1: a process stalled) and the
 * longest time a room took to be Bootstrapped. */
static int round_at_p(world_t *w, int round, uint64_t *boot_ms)
{
	char line[128];
	int r = -1, mask = -1;
	unsigned long long ms = 0;
	adv_send_byte(&w->d, 'g');
	adv_send_byte(&w->p, 'g');
	if (!adv_wait_line(&w->d, "d-sent", 30000, NULL, 0) ||
	    !adv_wait_line(&w->p, "p-boot", 30000, NULL, 0))
		return -1;
	adv_send_byte(&w->p, 'g');
	if (!adv_wait_line(&w->d, "d-round", 30000, line, sizeof line) ||
	    sscanf(line, "d-round %d %d %llu", &r, &mask, &ms) != 3 || r != round)
		return -1;
	if (!adv_wait_line(&w->p, "p-round", 30000, NULL, 0))
		return -1;
	fprintf(stderr, "round %d: D success mask %d, Bootstrapped within %llu ms\n", round, mask,
		ms);
	if (boot_ms)
		*boot_ms = ms;
	return mask;
}

typedef struct flood_seen {
	int made, refused, max_fds, max_channels;
	unsigned long long fanout, routes;
	int fds_after, channels_after;
} flood_seen_t;

static void run_flood(world_t *w, flood_seen_t *f)
{
	char line[256];
	adv_send_byte(&w->d, 'F');
	TU_CHECK(adv_wait_line(&w->d, "d-flood ", w->a.flood_ms + 30000, line, sizeof line) &&
			 sscanf(line, "d-flood %d %d %d %d %llu %llu", &f->made, &f->refused,
				&f->max_fds, &f->max_channels, &f->fanout, &f->routes) == 6,
		 "D's flood did not end");
	adv_send_byte(&w->d, 'X');
	TU_CHECK(adv_wait_line(&w->d, "d-fds ", w->a.settle_ms + 30000, line, sizeof line) &&
			 sscanf(line, "d-fds %d %d", &f->fds_after, &f->channels_after) == 2,
		 "D's flood was not destroyed");
	fprintf(stderr,
		"flood: %d receivers (%d refused at create), descriptors %d -> at most %d -> %d "
		"after; channels at most %d, %d after; routes refused: %llu fan-out, %llu other\n",
		f->made, f->refused, w->d_base, f->max_fds, f->fds_after, f->max_channels,
		f->channels_after, f->fanout, f->routes);
}

static int finish(world_t *w)
{
	int rc = adv_reap(&w->d, 20000);
	if (rc == TU_SKIP) {
		adv_reap(&w->p, 20000);
		return TU_SKIP;
	}
	EXPECT(!rc, "D exited %d", rc);
	EXPECT(!(rc = adv_reap(&w->p, 20000)), "P exited %d", rc);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

#define ALL ((1 << ROOMS) - 1)

/* The fake bootstrap (its port), advertising `world` DP groups of one rank
 * each, its routes at a fake P inbox that never reads nor answers (key: the
 * CURVE key they name). */
static int fake_p(void *zc, int world, const char *key)
{
	void *rx = zmq_socket(zc, ZMQ_PULL);
	int linger = 0;
	char ep[128];
	size_t n = sizeof ep;
	zmq_setsockopt(rx, ZMQ_LINGER, &linger, sizeof linger);
	TU_CHECK(zmq_bind(rx, "tcp://127.0.0.1:*") == 0, "bind");
	TU_CHECK(zmq_getsockopt(rx, ZMQ_LAST_ENDPOINT, ep, &n) == 0, "endpoint");
	snprintf(parallel_json, sizeof parallel_json,
		 "{\"prefill_tp_size\":%d,\"prefill_dp_size\":%d,\"registered_ranks\":%d}", world,
		 world, world);
	snprintf(rank_json, sizeof rank_json,
		 "{\"rank_ip\":\"127.0.0.1\",\"rank_port\":%d,\"curve_public_key\":\"%s\"}",
		 atoi(strrchr(ep, ':') + 1), key);
	static pthread_t th;
	int port = loopback_port(true, &bs_fd);
	TU_CHECK(!pthread_create(&th, NULL, bs_main, NULL), "bootstrap thread");
	return port;
}

static int case_fanout(int world, int nflood, bool curve)
{
	world_t w = {0};
	void *zc = zmq_ctx_new();
	int port = fake_p(zc, world, "");
	snprintf(w.a.flood[0], sizeof w.a.flood[0], "127.0.0.1:%d", port);
	w.a.nflood_addrs = 1;
	w.a.nflood = nflood;
	w.a.flood_ms = 3000;
	w.a.settle_ms = 5000;
	w.a.settle_slack = 8;
	up(&w);
	flood_seen_t f;
	run_flood(&w, &f);
	EXPECT(f.made == nflood, "%d of %d flood receivers made", f.made, nflood);
	if (world > 1024) { /* past d_peer_ranks_max */
		EXPECT(f.fanout >= 1, "the layout of %d P ranks was not refused", world);
		EXPECT(f.max_fds <= w.d_base + 32,
		       "descriptors grew from %d to %d under a refused layout", w.d_base,
		       f.max_fds);
	} else if (curve) {
		EXPECT(f.routes >= 1, "no route without a key refused");
		EXPECT(f.max_fds <= w.d_base + 32,
		       "descriptors grew from %d to %d under refused routes", w.d_base, f.max_fds);
	} else {
		EXPECT(f.max_channels <= 256, "%d channels open (d_channels_max 256)",
		       f.max_channels);
		EXPECT(f.max_fds <= w.d_base + 4 * 256 + 32,
		       "descriptors grew from %d to %d (d_channels_max 256)", w.d_base, f.max_fds);
	}
	EXPECT(f.fds_after <= w.d_base + w.a.settle_slack && !f.channels_after,
	       "after the flood's receivers closed: %d descriptors (%d before), %d channels",
	       f.fds_after, w.d_base, f.channels_after);
	/* A P this D never met. */
	int mask = round_at_p(&w, 0, NULL);
	EXPECT(mask == ALL, "the round at a new P after the flood: mask %d (want %d)", mask, ALL);
	int rc = finish(&w);
	shutdown(bs_fd, SHUT_RDWR);
	return rc;
}

/* Both children share one CURVE keypair (a P publishes its key, D's own),
 * in a folder removed at the end. */
static char key_dir[] = "/tmp/lc-dpeers-XXXXXX";

static void curve_env_gone(void)
{
	char path[128];
	snprintf(path, sizeof path, "%s/curve.public", key_dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/curve.secret", key_dir);
	unlink(path);
	rmdir(key_dir);
}

static bool curve_env(void)
{
	if (!zmq_has("curve")) {
		fprintf(stderr, "skip: this libzmq has no CURVE\n");
		return false;
	}
	char *dir = key_dir;
	char pub[41], sec[41], path[128];
	TU_CHECK(mkdtemp(dir) && !zmq_curve_keypair(pub, sec), "keys");
	const char *names[2] = {"curve.public", "curve.secret"}, *vals[2] = {pub, sec};
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		FILE *f = fopen(path, "w");
		TU_CHECK(f && fprintf(f, "%s\n", vals[i]) > 0 && !fclose(f), "%s", path);
		chmod(path, 0600);
	}
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	return true;
}

static int case_refused_flood(void)
{
	world_t w = {0};
	w.a.nflood = w.a.nflood_addrs = 256;
	for (int i = 0; i < 256; i++)
		snprintf(w.a.flood[i], sizeof w.a.flood[i], "127.0.0.1:%d",
			 loopback_port(false, NULL));
	w.a.flood_ms = 500;
	w.a.settle_ms = 100;
	w.a.settle_slack = 1 << 20;
	up(&w);
	int mask = round_at_p(&w, 0, NULL);
	EXPECT(mask == ALL, "round 0 (P met): mask %d (want %d)", mask, ALL);
	char line[256];
	flood_seen_t f;
	adv_send_byte(&w.d, 'F');
	TU_CHECK(adv_wait_line(&w.d, "d-flood ", 30000, line, sizeof line) &&
			 sscanf(line, "d-flood %d %d %d %d %llu %llu", &f.made, &f.refused,
				&f.max_fds, &f.max_channels, &f.fanout, &f.routes) == 6,
		 "D's flood did not end");
	EXPECT(f.made == 256 && !f.refused, "%d flood receivers made, %d refused", f.made,
	       f.refused);
	/* The flood lives: a round at the P D knows. */
	mask = round_at_p(&w, 1, NULL);
	EXPECT(mask == ALL,
	       "round 1 at the P D knows, 256 refused addresses named: mask %d "
	       "(want %d)",
	       mask, ALL);
	adv_send_byte(&w.d, 'X');
	TU_CHECK(adv_wait_line(&w.d, "d-fds ", 30000, NULL, 0), "D's flood was not destroyed");
	mask = round_at_p(&w, 2, NULL);
	EXPECT(mask == ALL, "round 2: mask %d (want %d)", mask, ALL);
	return finish(&w);
}

static int case_silent_lookup(void)
{
	world_t w = {0};
	int fd;
	snprintf(w.a.silent, sizeof w.a.silent, "127.0.0.1:%d", loopback_port(true, &fd));
	up(&w);
	adv_send_byte(&w.d, 'S');
	TU_CHECK(adv_wait_line(&w.d, "d-silent", 30000, NULL, 0), "D's silent rooms");
	uint64_t boot_ms = 0;
	int mask = round_at_p(&w, 0, &boot_ms);
	EXPECT(mask == ALL && boot_ms < BOOT_MS_MAX,
	       "the round at a new P while %d rooms wait on a silent address: mask %d (want %d), "
	       "Bootstrapped within %llu ms (want < %d: one silent lookup takes longer)",
	       SILENT_ROOMS, mask, ALL, (unsigned long long)boot_ms, BOOT_MS_MAX);
	int rc = finish(&w);
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	const char *c = argc == 2 ? argv[1] : "";
	if (!strcmp(c, "fanout"))
		return case_fanout(4096, 400, false);
	if (!strcmp(c, "fanout_wide")) {
		/* Through the environment: a D without the knob runs all the same. */
		setenv("LAYERCAKE_D_CHANNEL_IDLE_MS", "1000", 1);
		return case_fanout(1024, 300, false);
	}
	if (!strcmp(c, "fanout_curve")) {
		if (!curve_env())
			return TU_SKIP;
		int rc = case_fanout(512, 300, true);
		curve_env_gone();
		return rc;
	}
	if (!strcmp(c, "refused_flood"))
		return case_refused_flood();
	if (!strcmp(c, "silent_lookup"))
		return case_silent_lookup();
	fprintf(stderr, "usage: %s fanout|fanout_wide|fanout_curve|refused_flood|silent_lookup\n",
		argv[0]);
	return 2;
}
