/*
 * One switch for an authenticated deployment (issue 43, finding 7, and the
 * shared secret of docs/security.md, "One switch"): every P, D and
 * bootstrap server of the deployment is given LAYERCAKE_SHARED_SECRET, and
 * every impostor path of the finding fails closed. Real processes on
 * 127.0.0.1 (fork), the route's life 4 s; the parent plays the attacker
 * over HTTP (a PUT /route every 20 ms, without the secret) and, where one
 * is needed, with an inbox or a whole P of its own.
 *
 *     adversarial_secret <case> <layercake cli>
 *
 *   p_restart        finding 7(a). P is SIGKILLed; the attacker PUTs rank 0
 *                    naming its own P (a real one, serving other bytes) every
 *                    20 ms from then on, past the route's lapse; the real P,
 *                    restarted 1 s after the kill, gets rank 0 back at once
 *                    (the server finds nothing at the dead owner's endpoint);
 *                    no PUT of the attacker is taken, GET never names it, its
 *                    P gets no REGISTER, and D's rooms succeed with the real
 *                    P's bytes (no Success holds another byte).
 *   bootstrap_restart finding 7(b). A standalone `layercake bootstrap` is
 *                    SIGKILLed and restarted on its port while P lives; the
 *                    attacker's PUTs (every 20 ms from the kill on) are all
 *                    refused, P's refreshes take its rank again (no
 *                    route_conflicts), and a new D's rooms succeed byte-exact
 *                    while the attacker's inbox gets nothing.
 *   wrong_secret_d   a D with another secret, and one with none: their rooms
 *                    fail, D's memory is untouched, and nothing reaches P's
 *                    control plane (its registrations stay 0).
 *   wrong_secret_p   a P with another secret, and one with none: its create
 *                    fails (LC_ERR_AUTH) and the server has no route.
 *   open_server      the bootstrap server runs without the secret (a
 *                    misconfiguration), P and D with it: once P is gone and
 *                    its route lapsed the attacker takes rank 0 naming its
 *                    inbox, and D's rooms fail without a byte to it (its
 *                    route cannot prove the secret: no CURVE handshake).
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "control/bootstrap.h"
#include "core/layout.h"
#include "forge.h"
#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define SECRET "a1f0c3e27b9d4856a1f0c3e27b9d4856"
#define OTHER "0000111122223333444455556666777788889999"
#define TTL_MS "4000"
#define D_KNOBS                                                                                    \
	"heartbeat_interval_ms=200,heartbeat_misses=2,bootstrap_timeout_ms=4000,"                  \
	"connect_timeout_ms=2000"
#define ALL ((1 << ROOMS) - 1)

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

/* The secret a child runs with: NULL none (unset), else the text. */
static void use_secret(const char *secret)
{
	if (secret)
		setenv("LAYERCAKE_SHARED_SECRET", secret, 1);
	else
		unsetenv("LAYERCAKE_SHARED_SECRET");
}

static uint64_t impostor_seed(int k, int pg)
{
	return adv_seed_of(k, pg) ^ 0x5eedull;
}

/* ==== P: one rank, a round per digit byte; 'c' says its counters ==== */

typedef struct p_arg {
	const char *bs;     /* the bootstrap server it registers with; NULL: its own */
	const char *secret; /* NULL: none */
	bool impostor;      /* other bytes (impostor_seed), its own bootstrap server */
} p_arg_t;

static int p_child(void *arg, int go_fd)
{
	const p_arg_t *a = arg;
	tu_pool_t s;
	lc_bootstrap_t *own = NULL;
	lc_prefill_t *pf;
	lc_engine_t *eng;
	char bs[64], ep[300];
	use_secret(a->secret);
	if (a->impostor) { /* the attacker's own server, open */
		lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
		TU_OK(lc_bootstrap_start(&bp, &own));
		TU_OK(lc_bootstrap_addr(own, bs, sizeof bs));
	} else {
		snprintf(bs, sizeof bs, "%s", a->bs);
	}
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	for (int k = 0; k < NBUF; k++)
		for (int pg = 0; pg < PAGES; pg++)
			tu_fill((uint8_t *)s.bases[k] + (size_t)pg * ITEM, ITEM,
				a->impostor ? impostor_seed(k, pg) : adv_seed_of(k, pg));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = bs,
				  .host = "127.0.0.1",
				  .name = a->impostor ? "mallory" : "p0",
				  .world_size = 1,
				  .dp_size = 1};
	int rc = lc_prefill_create(s.ctx, &pp, &pf);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	if (rc) {
		say("create %d", rc);
		adv_wait_byte(go_fd);
		tu_pool_fini(&s);
		lc_bootstrap_stop(own);
		return 0;
	}
	TU_OK(lc_prefill_engine(pf, &eng));
	TU_OK(lc_prefill_endpoint(pf, ep, sizeof ep));
	say("p-up %s", ep);
	char c;
	while ((c = adv_wait_byte(go_fd)) != 'q') {
		if (c == 'c') {
			uint64_t reg = 0, conflicts = 0, received = 0;
			lc_prefill_counter(pf, "registrations", &reg);
			lc_prefill_counter(pf, "route_conflicts", &conflicts);
			lc_prefill_counter(pf, "msgs_received", &received);
			say("p-counters %llu %llu %llu", (unsigned long long)reg,
			    (unsigned long long)conflicts, (unsigned long long)received);
			continue;
		}
		adv_p_round(pf, eng, ROOM0, c - '0', go_fd, a->impostor ? 2000 : 8000);
	}
	lc_prefill_destroy(pf);
	tu_pool_fini(&s);
	lc_bootstrap_stop(own);
	return 0;
}

/* ==== D: a round per byte ('0'+r: sent; 'a'+r: opened, never sent) ==== */

typedef struct d_arg {
	const char *bs, *secret;
} d_arg_t;

/* Room i final: 2 if Success with P's bytes in its pages, 1 if Success
 * with other bytes, 0 if Failed. */
static int d_room(lc_receiver_t *rcv, const tu_pool_t *s, int round, int i, uint64_t dl)
{
	lc_room_info_t info = {.size = sizeof info};
	int st;
	while ((st = lc_receiver_poll(rcv, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	say("d-final %d %d %s %s|%s", round, i, lc_room_status_name(st),
	    lc_fail_reason_name(info.fail_reason), info.reason);
	if (st != LC_ROOM_SUCCESS)
		return 0;
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++)
			bad += tu_verify((const uint8_t *)s->bases[b] + adv_d_page(i, j) * ITEM,
					 ITEM, adv_seed_of(b, 1 + j)) >= 0;
	return bad ? 1 : 2;
}

/* Bytes of D's pool that are not the canary, outside the pages of rooms
 * that succeeded byte-exact (mask). */
static long d_changed(const tu_pool_t *s, int mask)
{
	long n = 0;
	for (int b = 0; b < NBUF; b++)
		for (int64_t pg = 0; pg < PAGES; pg++) {
			bool mine = false;
			for (int i = 0; i < ROOMS; i++)
				for (int j = 0; j < NPAGES; j++)
					mine |= (mask >> i & 1) && adv_d_page(i, j) == pg;
			const uint8_t *p = (const uint8_t *)s->bases[b] + pg * ITEM;
			for (size_t x = 0; !mine && x < ITEM; x++)
				n += p[x] != CANARY;
		}
	return n;
}

/* Says "d-round R EXACT SUCCESSES CHANGED": EXACT the mask of rooms that
 * succeeded with P's bytes, SUCCESSES the mask of every Success. */
static void d_round(lc_decode_t *d, tu_pool_t *s, const char *bs, int round, bool send)
{
	lc_receiver_t *rcv[ROOMS];
	bool sent[ROOMS] = {0};
	memset(s->mem, CANARY, s->len);
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_receiver_create(d, bs, adv_room_of(ROOM0, round, i), &rcv[i]));
	uint64_t dl = adv_now_ms() + 8000;
	for (int left = ROOMS; left && adv_now_ms() < dl; usleep(1000))
		for (int i = 0; i < ROOMS; i++) {
			int st = sent[i] ? -1 : lc_receiver_poll(rcv[i], NULL);
			if (st != LC_ROOM_BOOTSTRAPPED && st != LC_ROOM_FAILED)
				continue;
			int64_t pages[NPAGES];
			for (int j = 0; j < NPAGES; j++)
				pages[j] = adv_d_page(i, j);
			lc_receiver_pages_t pg = {.size = sizeof pg,
						  .pages = pages,
						  .page_count = NPAGES,
						  .aux_index = i};
			if (st == LC_ROOM_BOOTSTRAPPED && send)
				TU_OK(lc_receiver_send(rcv[i], &pg));
			sent[i] = true;
			left--;
		}
	say("d-sent %d", round);
	int exact = 0, succ = 0;
	dl = adv_now_ms() + 10000;
	for (int i = 0; i < ROOMS; i++) {
		int v = d_room(rcv[i], s, round, i, dl);
		exact |= (v == 2) << i;
		succ |= (v >= 1) << i;
	}
	for (int i = 0; i < ROOMS; i++)
		lc_receiver_destroy(rcv[i]);
	say("d-round %d %d %d %ld", round, exact, succ, d_changed(s, exact));
}

static int d_child(void *arg, int go_fd)
{
	const d_arg_t *a = arg;
	tu_pool_t s;
	lc_decode_t *d;
	use_secret(a->secret);
	tu_pool_init(&s, "d0", D_KNOBS, LAYERS, PAGES, ITEM);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .host = "127.0.0.1"};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	say("d-up");
	char c;
	while ((c = adv_wait_byte(go_fd)) != 'q')
		d_round(d, &s, a->bs, c >= 'a' ? c - 'a' : c - '0', c < 'a');
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return 0;
}

/* ==== the parent: the attacker over HTTP ==== */

static char bs_addr[64];

static int http(const char *method, const char *path, const char *body, const char *auth,
		char **resp)
{
	char url[256];
	size_t rl = 0;
	snprintf(url, sizeof url, "http://%s%s", bs_addr, path);
	*resp = NULL;
	return lc__http_request(method, url, body, body ? strlen(body) : 0, auth, 1000, resp, &rl);
}

/* Rank 0's port as GET /route gives it; 0 when none. */
static int route_port(void)
{
	char *resp;
	int port = 0;
	int code = http("GET", "/route?engine_rank=0&target_dp_group=0", NULL, NULL, &resp);
	const char *at = code == 200 && resp ? strstr(resp, "\"rank_port\":") : NULL;
	if (at)
		sscanf(at + strlen("\"rank_port\":"), "%d", &port);
	free(resp);
	return port;
}

static int port_of(const char *ep)
{
	const char *colon = strrchr(ep, ':');
	return colon ? atoi(colon + 1) : 0;
}

/* The attacker: a PUT /route of rank 0 naming port every 20 ms, without
 * any secret, each followed by a GET; what it got. */
typedef struct poller {
	pthread_t th;
	int port;
	_Atomic bool stop;
	_Atomic int puts, taken, owned, refused; /* 200s; GETs naming it; 401s */
} poller_t;

static void *poll_main(void *arg)
{
	poller_t *q = arg;
	tu_pool_t s;
	char lens[512] = "", body[1024], *resp;
	tu_pool_init(&s, "mallory", NULL, LAYERS, PAGES, ITEM);
	for (uint32_t i = 0; i < s.layout->nbuf; i++)
		snprintf(lens + strlen(lens), sizeof lens - strlen(lens), "%s%llu", i ? "," : "",
			 (unsigned long long)s.layout->bufs[i].item_len);
	snprintf(body, sizeof body,
		 "{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":%d,\"engine_rank\":0,\"kv_item_lens\":[%s],"
		 "\"layout_fingerprint\":\"%016llx\",\"layers\":%u}",
		 q->port, lens, (unsigned long long)s.layout->fingerprint, s.layout->layers);
	tu_pool_fini(&s);
	while (!atomic_load(&q->stop)) {
		int code = http("PUT", "/route", body, NULL, &resp);
		free(resp);
		atomic_fetch_add(&q->puts, 1);
		if (code == 200)
			atomic_fetch_add(&q->taken, 1);
		if (code == 401)
			atomic_fetch_add(&q->refused, 1);
		if (route_port() == q->port)
			atomic_fetch_add(&q->owned, 1);
		usleep(20 * 1000);
	}
	return NULL;
}

static void poller_start(poller_t *q, int port)
{
	memset(q, 0, sizeof *q);
	q->port = port;
	TU_CHECK(pthread_create(&q->th, NULL, poll_main, q) == 0, "poller");
}

/* Stops it; 0 when none of its PUTs was taken and GET never named it. */
static int poller_stop(poller_t *q)
{
	atomic_store(&q->stop, true);
	pthread_join(q->th, NULL);
	fprintf(stderr, "attacker: %d PUTs, %d taken, %d refused 401, GET named it %d times\n",
		q->puts, q->taken, q->refused, q->owned);
	return q->taken || q->owned;
}

/* One D round (and P's, and the impostor's, when given). Fills the D
 * round's masks and changed bytes. */
static void round_of(adv_proc_t *d, adv_proc_t *p, adv_proc_t *imp, int r, int *exact, int *succ,
		     long *changed)
{
	char line[512];
	adv_send_byte(d, (char)(r < 0 ? 'a' - r - 1 : '0' + r));
	r = r < 0 ? -r - 1 : r;
	snprintf(line, sizeof line, "d-sent %d", r);
	TU_CHECK(adv_wait_line(d, line, 20000, NULL, 0), "D never sent round %d", r);
	adv_proc_t *ps[2] = {p, imp};
	for (int k = 0; k < 2; k++)
		if (ps[k]) {
			adv_send_byte(ps[k], (char)('0' + r));
			snprintf(line, sizeof line, "p-boot %d", r);
			TU_CHECK(adv_wait_line(ps[k], line, 20000, NULL, 0), "P round %d", r);
			adv_go(ps[k]);
		}
	for (int i = 0; i < ROOMS; i++) {
		TU_CHECK(adv_wait_line(d, "d-final ", 30000, line, sizeof line),
			 "D round %d room %d never final", r, i);
		fprintf(stderr, "%s\n", line);
	}
	snprintf(line, sizeof line, "d-round %d ", r);
	TU_CHECK(adv_wait_line(d, line, 30000, line, sizeof line), "D round %d", r);
	TU_CHECK(sscanf(line, "d-round %*d %d %d %ld", exact, succ, changed) == 3, "%s", line);
	fprintf(stderr, "round %d: %s\n", r, line);
	for (int k = 0; k < 2; k++)
		if (ps[k]) {
			snprintf(line, sizeof line, "p-round %d", r);
			TU_CHECK(adv_wait_line(ps[k], line, 20000, NULL, 0), "P round %d end", r);
		}
}

/* A round that must succeed byte-exact (1 failure otherwise). */
static int round_ok(adv_proc_t *d, adv_proc_t *p, adv_proc_t *imp, int r)
{
	int exact, succ;
	long changed;
	round_of(d, p, imp, r, &exact, &succ, &changed);
	if (exact != ALL || succ != ALL || changed) {
		fprintf(stderr,
			"round %d: want every room Success with P's bytes (exact %d, "
			"success %d, %ld bytes outside)\n",
			r, exact, succ, changed);
		return 1;
	}
	return 0;
}

/* A round in which no room may succeed and D's memory stays untouched. */
static int round_refused(adv_proc_t *d, adv_proc_t *p, int r)
{
	int exact, succ;
	long changed;
	round_of(d, p, NULL, r, &exact, &succ, &changed);
	if (succ || changed) {
		fprintf(stderr,
			"round %d: want every room failed, D untouched (success %d, %ld "
			"bytes changed)\n",
			r, succ, changed);
		return 1;
	}
	return 0;
}

/* A P's counters: registrations, route_conflicts, msgs_received. */
static void p_counters(adv_proc_t *p, unsigned long long *reg, unsigned long long *conflicts,
		       unsigned long long *received)
{
	char line[256];
	adv_send_byte(p, 'c');
	TU_CHECK(adv_wait_line(p, "p-counters ", 10000, line, sizeof line) &&
			 sscanf(line, "p-counters %llu %llu %llu", reg, conflicts, received) == 3,
		 "P's counters: %s", line);
	fprintf(stderr, "%s\n", line);
}

static bool p_up(adv_proc_t *p, char *ep, size_t cap)
{
	char line[512];
	if (!adv_wait_line(p, "", 20000, line, sizeof line) || strncmp(line, "p-up ", 5)) {
		fprintf(stderr, "P: '%s' (want p-up)\n", line);
		return false;
	}
	snprintf(ep, cap, "%.299s", line + 5);
	return true;
}

static void bootstrap_here(lc_bootstrap_t **b)
{
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	int rc = lc_bootstrap_start(&bp, b);
	if (rc == LC_ENOTSUP)
		exit(TU_SKIP);
	TU_OK(rc);
	TU_OK(lc_bootstrap_addr(*b, bs_addr, sizeof bs_addr));
	/* Threads just started in this process: GCC 12's AddressSanitizer can
	 * leave a child forked at that moment blocked (adversarial_owned.c). */
	usleep(300 * 1000);
}

static int case_p_restart(void)
{
	lc_bootstrap_t *b;
	adv_proc_t p, d, imp, p2;
	char ep[300], imp_ep[300], ep2[300];
	int failures = 0;
	bootstrap_here(&b);
	p_arg_t pa = {.bs = bs_addr, .secret = SECRET}, ia = {.impostor = true};
	d_arg_t da = {.bs = bs_addr, .secret = SECRET};
	adv_spawn(&p, p_child, &pa);
	TU_CHECK(p_up(&p, ep, sizeof ep), "P did not start");
	adv_spawn(&d, d_child, &da);
	TU_CHECK(adv_wait_line(&d, "d-up", 60000, NULL, 0), "D did not start");
	adv_spawn(&imp, p_child, &ia); /* the attacker's P: other bytes */
	TU_CHECK(p_up(&imp, imp_ep, sizeof imp_ep), "the impostor's P did not start");
	failures += round_ok(&d, &p, NULL, 0);
	/* P dies without a word; the attacker polls for its rank from then on. */
	poller_t q;
	kill(p.pid, SIGKILL);
	adv_reap(&p, 5000);
	uint64_t killed = adv_now_ms();
	poller_start(&q, port_of(imp_ep));
	usleep(1000 * 1000);
	adv_spawn(&p2, p_child, &pa);
	if (!p_up(&p2, ep2, sizeof ep2)) {
		fprintf(stderr, "the restarted P did not get rank 0 back\n");
		poller_stop(&q);
		adv_reap(&p2, 10000);
		return 1;
	}
	uint64_t up_ms = adv_now_ms() - killed;
	fprintf(stderr, "the restarted P is up %llu ms after the kill\n",
		(unsigned long long)up_ms);
	if (up_ms >= 4000) {
		fprintf(stderr, "want the restarted P up before the dead one's route lapses\n");
		failures++;
	}
	/* The attacker goes on past the route's life (the finding's 5.8 s). */
	while (adv_now_ms() < killed + 7000)
		usleep(50 * 1000);
	if (route_port() != port_of(ep2)) {
		fprintf(stderr, "rank 0 is not the restarted P's (port %d, want %d)\n",
			route_port(), port_of(ep2));
		failures++;
	}
	/* D forgets the dead P (its rooms opened, never sent), then rounds
	 * through the restarted one, the impostor's P serving its own. */
	int exact, succ;
	long changed;
	round_of(&d, NULL, NULL, -2, &exact, &succ, &changed);
	round_of(&d, &p2, &imp, 2, &exact, &succ, &changed);
	if (succ & ~exact) {
		fprintf(stderr, "round 2: a Success holds bytes that are not P's\n");
		failures++;
	}
	failures += round_ok(&d, &p2, &imp, 3);
	failures += poller_stop(&q);
	unsigned long long reg, conflicts, received;
	p_counters(&imp, &reg, &conflicts, &received);
	if (reg || received) {
		fprintf(stderr, "the impostor's P got %llu REGISTERs, %llu messages\n", reg,
			received);
		failures++;
	}
	p_counters(&p2, &reg, &conflicts, &received);
	if (conflicts) {
		fprintf(stderr, "the restarted P's refreshes were refused %llu times\n", conflicts);
		failures++;
	}
	/* Last spawned first: a child holds the go pipes of those before it. */
	adv_reap(&p2, 20000);
	adv_reap(&imp, 20000);
	adv_reap(&d, 20000);
	lc_bootstrap_stop(b);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

/* ---- a standalone bootstrap server (the CLI), killed and restarted ---- */

static pid_t server_pid;

static void server_kill(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
}

/* `cli bootstrap` on port ("0": any); its address in bs_addr. */
static void server_start(const char *cli, const char *port)
{
	int out[2];
	TU_CHECK(pipe(out) == 0, "pipe: %s", strerror(errno));
	server_pid = fork();
	TU_CHECK(server_pid >= 0, "fork: %s", strerror(errno));
	if (server_pid == 0) {
		dup2(out[1], 1);
		close(out[0]);
		execl(cli, cli, "bootstrap", "--host", "127.0.0.1", "--port", port, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	char line[128] = "";
	size_t n = 0;
	struct pollfd pf = {.fd = out[0], .events = POLLIN};
	while (n < sizeof line - 1 && poll(&pf, 1, 10000) == 1) {
		if (read(out[0], line + n, 1) != 1 || line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	close(out[0]);
	if (strstr(line, "not built") || strstr(line, "not supported")) {
		server_kill();
		exit(TU_SKIP);
	}
	TU_CHECK(sscanf(line, "listening %63s", bs_addr) == 1, "server said \"%s\"", line);
}

static int case_bootstrap_restart(const char *cli)
{
	adv_proc_t p, d1, d2;
	char ep[300], port[16];
	int failures = 0;
	atexit(server_kill);
	server_start(cli, "0");
	snprintf(port, sizeof port, "%d", port_of(bs_addr));
	void *zc = zmq_ctx_new();
	char inbox_ep[128];
	void *inbox = forge_inbox(zc, NULL, inbox_ep, sizeof inbox_ep);
	usleep(300 * 1000);
	p_arg_t pa = {.bs = bs_addr, .secret = SECRET};
	d_arg_t da = {.bs = bs_addr, .secret = SECRET};
	adv_spawn(&p, p_child, &pa);
	TU_CHECK(p_up(&p, ep, sizeof ep), "P did not start");
	adv_spawn(&d1, d_child, &da);
	TU_CHECK(adv_wait_line(&d1, "d-up", 15000, NULL, 0), "D did not start");
	failures += round_ok(&d1, &p, NULL, 0);
	adv_send_byte(&d1, 'q');
	adv_reap(&d1, 20000);
	/* The server restarts on its port while P lives; the attacker polls
	 * from the kill on. */
	poller_t q;
	server_kill();
	poller_start(&q, port_of(inbox_ep));
	usleep(100 * 1000);
	server_start(cli, port);
	uint64_t dl = adv_now_ms() + 10000;
	while (route_port() != port_of(ep) && adv_now_ms() < dl)
		usleep(20 * 1000);
	usleep(3000 * 1000); /* two more of P's refreshes, the attacker at it */
	failures += poller_stop(&q);
	if (route_port() != port_of(ep)) {
		fprintf(stderr, "rank 0 is not P's after the restart\n");
		failures++;
	}
	unsigned long long reg, conflicts, received;
	p_counters(&p, &reg, &conflicts, &received);
	if (conflicts) {
		fprintf(stderr, "P's refreshes were refused %llu times\n", conflicts);
		failures++;
	}
	/* A new D finds P, not the attacker. */
	adv_spawn(&d2, d_child, &da);
	TU_CHECK(adv_wait_line(&d2, "d-up", 15000, NULL, 0), "the new D did not start");
	failures += round_ok(&d2, &p, NULL, 1);
	int counts[LC__MSG_TYPE_MAX + 1] = {0}, n = 0;
	inbox_drain(inbox, 300, counts, false);
	for (int i = 0; i <= LC__MSG_TYPE_MAX; i++)
		n += counts[i];
	if (n) {
		fprintf(stderr, "the attacker's inbox got %d messages (REGISTER: %d)\n", n,
			counts[LC__MSG_REGISTER]);
		failures++;
	}
	/* The restarted server holds P's go pipe (forked after P): first. */
	adv_reap(&d2, 20000);
	server_kill();
	adv_reap(&p, 20000);
	zmq_close(inbox);
	zmq_ctx_term(zc);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

static int case_wrong_secret_d(void)
{
	lc_bootstrap_t *b;
	adv_proc_t p, d;
	char ep[300];
	int failures = 0;
	bootstrap_here(&b);
	p_arg_t pa = {.bs = bs_addr, .secret = SECRET};
	adv_spawn(&p, p_child, &pa);
	TU_CHECK(p_up(&p, ep, sizeof ep), "P did not start");
	const char *secrets[2] = {OTHER, NULL};
	for (int k = 0; k < 2; k++) {
		d_arg_t da = {.bs = bs_addr, .secret = secrets[k]};
		fprintf(stderr, "a D with %s\n", k ? "no secret" : "another secret");
		adv_spawn(&d, d_child, &da);
		TU_CHECK(adv_wait_line(&d, "d-up", 60000, NULL, 0), "D did not start");
		failures += round_refused(&d, NULL, k);
		adv_reap(&d, 20000);
	}
	unsigned long long reg, conflicts, received;
	p_counters(&p, &reg, &conflicts, &received);
	if (reg || received) {
		fprintf(stderr, "P's control plane got %llu REGISTERs, %llu messages\n", reg,
			received);
		failures++;
	}
	/* The deployment's own D still gets in. */
	d_arg_t da = {.bs = bs_addr, .secret = SECRET};
	adv_spawn(&d, d_child, &da);
	TU_CHECK(adv_wait_line(&d, "d-up", 60000, NULL, 0), "D did not start");
	failures += round_ok(&d, &p, NULL, 2);
	adv_reap(&d, 20000);
	adv_reap(&p, 20000);
	lc_bootstrap_stop(b);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

static int case_wrong_secret_p(void)
{
	lc_bootstrap_t *b;
	adv_proc_t p;
	char line[512];
	int failures = 0, rc;
	bootstrap_here(&b);
	const char *secrets[2] = {OTHER, NULL};
	for (int k = 0; k < 2; k++) {
		p_arg_t pa = {.bs = bs_addr, .secret = secrets[k]};
		adv_spawn(&p, p_child, &pa);
		if (!adv_wait_line(&p, "", 20000, line, sizeof line) ||
		    sscanf(line, "create %d", &rc) != 1 || rc != LC_ERR_AUTH) {
			fprintf(stderr, "a P with %s: '%s' (want create %d)\n",
				k ? "no secret" : "another secret", line, LC_ERR_AUTH);
			failures++;
		}
		adv_reap(&p, 10000);
	}
	char *resp;
	int code = http("GET", "/route?engine_rank=-1&target_dp_group=-1", NULL, NULL, &resp);
	free(resp);
	if (code != 404) {
		fprintf(stderr, "the server holds a route (GET: %d)\n", code);
		failures++;
	}
	lc_bootstrap_stop(b);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

static int case_open_server(void)
{
	lc_bootstrap_t *b;
	adv_proc_t p, d;
	char ep[300];
	int failures = 0;
	unsetenv("LAYERCAKE_SHARED_SECRET");
	bootstrap_here(&b); /* without the secret */
	void *zc = zmq_ctx_new();
	char inbox_ep[128];
	void *inbox = forge_inbox(zc, NULL, inbox_ep, sizeof inbox_ep);
	p_arg_t pa = {.bs = bs_addr, .secret = SECRET};
	d_arg_t da = {.bs = bs_addr, .secret = SECRET};
	adv_spawn(&p, p_child, &pa);
	TU_CHECK(p_up(&p, ep, sizeof ep), "P did not start");
	adv_spawn(&d, d_child, &da);
	TU_CHECK(adv_wait_line(&d, "d-up", 60000, NULL, 0), "D did not start");
	failures += round_ok(&d, &p, NULL, 0);
	kill(p.pid, SIGKILL);
	adv_reap(&p, 5000);
	/* The attacker takes the lapsed rank (nothing stops it here). */
	poller_t q;
	poller_start(&q, port_of(inbox_ep));
	uint64_t dl = adv_now_ms() + 30000; /* the route's life, then a loaded machine */
	while (!atomic_load(&q.owned) && adv_now_ms() < dl)
		usleep(50 * 1000);
	poller_stop(&q);
	TU_CHECK(route_port() == port_of(inbox_ep), "the attacker never took the rank");
	/* D forgets the dead P, then follows the route: nothing may reach the
	 * attacker, no room succeed. */
	failures += round_refused(&d, NULL, -2);
	failures += round_refused(&d, NULL, 2);
	int counts[LC__MSG_TYPE_MAX + 1] = {0}, n = 0;
	inbox_drain(inbox, 300, counts, false);
	for (int i = 0; i <= LC__MSG_TYPE_MAX; i++)
		n += counts[i];
	if (n) {
		fprintf(stderr, "the attacker's inbox got %d messages (REGISTER: %d)\n", n,
			counts[LC__MSG_REGISTER]);
		failures++;
	}
	adv_reap(&d, 20000);
	zmq_close(inbox);
	zmq_ctx_term(zc);
	lc_bootstrap_stop(b);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc < 2) {
		fprintf(stderr,
			"usage: %s p_restart|bootstrap_restart|wrong_secret_d|"
			"wrong_secret_p|open_server [cli]\n",
			argv[0]);
		return 2;
	}
	if (!zmq_has("curve"))
		return TU_SKIP;
	setenv("LAYERCAKE_ROUTE_TTL_MS", TTL_MS, 1);
	/* The deployment's secret: the parent's servers and every child
	 * inherit it (a child of another secret sets its own). */
	setenv("LAYERCAKE_SHARED_SECRET", SECRET, 1);
	if (!strcmp(argv[1], "p_restart"))
		return case_p_restart();
	if (!strcmp(argv[1], "bootstrap_restart") && argc == 3)
		return case_bootstrap_restart(argv[2]);
	if (!strcmp(argv[1], "wrong_secret_d"))
		return case_wrong_secret_d();
	if (!strcmp(argv[1], "wrong_secret_p"))
		return case_wrong_secret_p();
	if (!strcmp(argv[1], "open_server"))
		return case_open_server();
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
