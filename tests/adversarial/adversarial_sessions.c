/*
 * Adversarial tests: sessions are owned (issue 13, findings 1, 3 and 4). A
 * real P and a real D as separate processes (fork), real ZeroMQ and TCP
 * sockets on 127.0.0.1, rooms in rounds that the parent paces; the parent
 * plays the attacker with the real codec.
 *
 *     adversarial_sessions <case>
 *
 *   hijack         an attacker REGISTERs D's session id with its own data
 *                  url and status endpoint (P takes it as a new incarnation
 *                  with the attacker's secret): D's next rounds succeed
 *                  byte-exact, the attacker's listener gets no page and its
 *                  inbox no status of D's rooms; P counted the incarnation.
 *   hijack_curve   CURVE on, the attacker an authorised key-holder that
 *                  even knows D's secret: its REGISTER of D's session is
 *                  refused (LC_ERR_AUTH: the session is bound to D's key),
 *                  its CANCELs of D's rooms are refused; D's rounds succeed.
 *   forged_p       while D's rooms are open: STATUS Failed, LAYERS and a
 *                  REGISTER_REPLY refusal without D's secret, and a stream
 *                  of forged refusals while D registers: all dropped and
 *                  counted (session_mismatches), every room succeeds.
 *   replay         the attacker's own incarnation of D's id CANCELs D's
 *                  rooms and sends TRANSFER_INFOs for them, and a stale
 *                  secret's TRANSFER_INFO and CANCEL name D's session and
 *                  status endpoint: all refused, and P sends D nothing for
 *                  them (issue 21, point 7: no connection to an endpoint
 *                  that an unproven message names); D's rooms succeed.
 *   restart        D exits after a round; a new D process with the same
 *                  session id (a new secret) succeeds at its first round.
 *   old_version    a version-1 REGISTER gets a version-1 REGISTER_REPLY
 *                  refusal naming both versions; P counts it.
 *   evict_flood    (issue 21, point 4) after a round, D idles; 400
 *                  REGISTERs with fresh ids and secrets of their own fill
 *                  P's table (256) and are refused past it: D's session
 *                  (active, proven) is not evicted, its rounds succeed.
 *   evict_flood_proven  the same with p_session_grace_ms 0: only D's
 *                  proven status (a room of it succeeded: p_session_keep_ms)
 *                  keeps it; the forged sessions evict one another.
 *   evicted_recovers  p_sessions_max 1, both windows 0: one forged
 *                  REGISTER evicts idle D; D's next TRANSFER_INFO is told
 *                  "register again" at the endpoint D registered, that
 *                  round fails, and the one after succeeds.
 *   reflect        (issue 21, point 7) a TRANSFER_INFO that proves no
 *                  session names a tcp listener of the test's, another an
 *                  ipc:// one, and a REGISTER names the ipc:// one: P opens
 *                  no connection to either (status_schemes: tcp).
 *   refusal_burst  (issue 21, point 10) 3,000 refused REGISTERs naming a
 *                  blackhole (a listening socket that never accepts), then
 *                  a refused registrant with an inbox: it gets its answer,
 *                  and P logs fewer than 100 lines for them all.
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.h>

#include "forge.h"
#include "harness.h"
#include "pd/decode_int.h"
#include "pd/prefill_int.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)
#define ALL ((1 << ROOMS) - 1)

static uint64_t room_of(int round, int i)
{
	return adv_room_of(ROOM0, round, i);
}

/* ==== P process: a round of ROOMS rooms per 'g', counters on 'c' ==== */

static void p_counters(lc_prefill_t *pf)
{
	uint64_t v[4] = {0};
	const char *names[4] = {"session_incarnations", "session_mismatches", "cancels_refused",
				"msgs_old_version"};
	for (int i = 0; i < 4; i++)
		TU_OK(lc_prefill_counter(pf, names[i], &v[i]));
	fprintf(stderr,
		"P: incarnations %llu, mismatches %llu, cancels refused %llu, old "
		"version %llu\n",
		(unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2],
		(unsigned long long)v[3]);
	say("p-counters %llu %llu %llu %llu", (unsigned long long)v[0], (unsigned long long)v[1],
	    (unsigned long long)v[2], (unsigned long long)v[3]);
}

/* P's log lines, counted (and still written to stderr). */
static _Atomic uint64_t p_log_lines;

static void p_log(lc_log_level_t level, const char *line, void *arg)
{
	LC__UNUSED(level);
	LC__UNUSED(arg);
	atomic_fetch_add(&p_log_lines, 1);
	fprintf(stderr, "%s\n", line);
}

static int p_child(void *arg, int go_fd)
{
	LC__UNUSED(arg);
	adv_p_t P;
	lc_log_set_handler(p_log, NULL);
	adv_p_up(&P, NULL, adv_seed_of);
	lc_prefill_t *pf = P.pf;
	lc_engine_t *eng = P.eng;
	char c;
	for (int round = 0; (c = adv_wait_byte(go_fd)) != 'q';)
		if (c == 'c')
			p_counters(pf);
		else if (c == 'l')
			say("p-loglines %llu", (unsigned long long)atomic_load(&p_log_lines));
		else
			adv_p_round(pf, eng, ROOM0, round++, go_fd, 8000);
	adv_p_down(&P);
	return 0;
}

/* ==== D process: a round per 'g' (the number follows as a byte), its
 * secret at P rank 0 on 's', counters on 'c' ==== */

static int d_check_room(lc_receiver_t *rcv, const tu_pool_t *s, int round, int i, uint64_t dl)
{
	lc_room_info_t info = {.size = sizeof info};
	int st;
	while ((st = lc_receiver_poll(rcv, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	fprintf(stderr, "D round %d room %llu: %s (%s) %s\n", round,
		(unsigned long long)room_of(round, i), lc_room_status_name(st),
		lc_fail_reason_name(info.fail_reason), info.reason);
	if (st != LC_ROOM_SUCCESS)
		return 0;
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++) {
			const uint8_t *pg = (const uint8_t *)s->bases[b] + adv_d_page(i, j) * ITEM;
			bad += tu_verify(pg, ITEM, adv_seed_of(b, 1 + j)) >= 0;
		}
	/* Canaries: nothing outside the room's pages was written. */
	for (int b = 0; b < NBUF; b++)
		for (int64_t pg = 0; pg < PAGES - ROOMS * NPAGES; pg++)
			for (size_t x = 0; x < ITEM; x++)
				bad += ((const uint8_t *)s->bases[b])[pg * ITEM + x] != CANARY;
	if (bad)
		fprintf(stderr, "D room %llu: %d pages or canaries differ\n",
			(unsigned long long)room_of(round, i), bad);
	return bad ? 0 : 1;
}

static void d_round(lc_decode_t *d, tu_pool_t *s, const char *bs_addr, int round)
{
	lc_receiver_t *rcv[ROOMS];
	memset(s->mem, CANARY, s->len);
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_receiver_create(d, bs_addr, room_of(round, i), &rcv[i]));
	bool sent[ROOMS] = {0};
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
			if (st == LC_ROOM_BOOTSTRAPPED)
				TU_OK(lc_receiver_send(rcv[i], &pg));
			sent[i] = true;
			left--;
		}
	say("d-sent %d", round);
	int mask = 0;
	dl = adv_now_ms() + 10000;
	for (int i = 0; i < ROOMS; i++)
		mask |= d_check_room(rcv[i], s, round, i, dl) << i;
	for (int i = 0; i < ROOMS; i++)
		lc_receiver_destroy(rcv[i]);
	say("d-round %d %d", round, mask);
}

static void d_secret(lc_decode_t *d)
{
	char hex[2 * LC__MSG_SECRET_LEN + 1] = "none";
	pthread_mutex_lock(&d->lock);
	const lc__prank_t *pr = d->npeers && d->peers[0]->ranks ? &d->peers[0]->ranks[0] : NULL;
	for (int i = 0; pr && pr->has_secret && i < LC__MSG_SECRET_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", pr->secret[i]);
	pthread_mutex_unlock(&d->lock);
	say("d-secret %s", hex);
}

static int d_child(void *arg, int go_fd)
{
	const char *bs_addr = arg;
	tu_pool_t s;
	lc_decode_t *d;
	tu_pool_init(&s, "d0", NULL, LAYERS, PAGES, ITEM);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .session = D_SESSION};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	char d_ep[300]; /* as a peer reaches it (bound to every address) */
	TU_CHECK(lc_decode_endpoint(d, d_ep, sizeof d_ep) > 0, "endpoint");
	say("d-ep %s %s", d_ep, d->session);
	char c;
	while ((c = adv_wait_byte(go_fd)) != 'q') {
		if (c == 's') {
			d_secret(d);
		} else if (c == 'c') {
			uint64_t n = atomic_load(&d->ctl[LC__CTL_session_mismatches]);
			fprintf(stderr, "D: session mismatches %llu\n", (unsigned long long)n);
			say("d-counters %llu", (unsigned long long)n);
		} else {
			d_round(d, &s, bs_addr, (int)adv_wait_byte(go_fd));
		}
	}
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return 0;
}

/* ==== the parent: pacing ==== */

typedef struct world {
	adv_proc_t p, d;
	char addr[64], p_ep[300], d_ep[300];
	void *zc; /* the attacker's ZeroMQ context */
} world_t;

static void start_d(world_t *w)
{
	char line[600];
	adv_spawn(&w->d, d_child, w->addr);
	TU_CHECK(adv_wait_line(&w->d, "d-ep ", 15000, line, sizeof line) &&
			 sscanf(line, "d-ep %299s", w->d_ep) == 1,
		 "D did not start");
}

static void start(world_t *w)
{
	char line[512];
	memset(w, 0, sizeof *w);
	adv_spawn(&w->p, p_child, NULL);
	TU_CHECK(adv_wait_line(&w->p, "addr ", 15000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", w->addr, w->p_ep) == 2,
		 "P did not start");
	start_d(w);
	w->zc = zmq_ctx_new();
}

typedef void (*attack_fn)(world_t *w, int round, void *arg);

/* One round: D's pages are sent, then `attack` (may be NULL), then P
 * writes. Returns D's success mask, -1 if a process stalled. */
static int run_round(world_t *w, int round, attack_fn attack, void *arg)
{
	char line[128];
	int r = -1, mask = -1;
	adv_send_byte(&w->d, 'g');
	adv_send_byte(&w->d, (char)round);
	adv_send_byte(&w->p, 'g');
	if (!adv_wait_line(&w->d, "d-sent", 10000, NULL, 0) ||
	    !adv_wait_line(&w->p, "p-boot", 10000, NULL, 0))
		return -1;
	if (attack)
		attack(w, round, arg);
	adv_send_byte(&w->p, 'g');
	if (!adv_wait_line(&w->d, "d-round", 15000, line, sizeof line) ||
	    sscanf(line, "d-round %d %d", &r, &mask) != 2 || r != round)
		return -1;
	if (!adv_wait_line(&w->p, "p-round", 15000, NULL, 0))
		return -1;
	fprintf(stderr, "round %d: D success mask %d\n", round, mask);
	return mask;
}

/* P's counters: incarnations, mismatches, cancels refused, old version. */
static void p_counters_of(world_t *w, unsigned long long *v)
{
	char line[160];
	adv_send_byte(&w->p, 'c');
	TU_CHECK(adv_wait_line(&w->p, "p-counters", 5000, line, sizeof line) &&
			 sscanf(line, "p-counters %llu %llu %llu %llu", &v[0], &v[1], &v[2],
				&v[3]) == 4,
		 "P's counters");
}

static unsigned long long d_mismatches(world_t *w)
{
	char line[128];
	unsigned long long n = 0;
	adv_send_byte(&w->d, 'c');
	TU_CHECK(adv_wait_line(&w->d, "d-counters", 5000, line, sizeof line) &&
			 sscanf(line, "d-counters %llu", &n) == 1,
		 "D's counters");
	return n;
}

static int finish(world_t *w, int failures)
{
	int rc = adv_reap(&w->d, 15000);
	if (rc && rc != TU_SKIP) {
		fprintf(stderr, "D exited %d\n", rc);
		failures++;
	}
	if ((rc = adv_reap(&w->p, 15000))) {
		fprintf(stderr, "P exited %d\n", rc);
		failures++;
	}
	if (w->zc)
		zmq_ctx_term(w->zc);
	return failures ? 1 : 0;
}

static int rounds_succeed(world_t *w, int first, int last, attack_fn attack, void *arg)
{
	int failures = 0;
	for (int round = first; round <= last; round++) {
		int mask = run_round(w, round, attack, arg);
		if (mask != ALL) {
			fprintf(stderr, "round %d: mask %d (want %d)\n", round, mask, ALL);
			failures++;
		}
	}
	return failures;
}

/* ==== the cases ==== */

/* The attacker's own incarnation of D's session id: P accepts it (its
 * geometry is right), answering at the attacker's inbox. */
static void hijack_register(void *tx, void *rx, const char *rx_ep, const sink_t *k,
			    const uint8_t *secret, const keys_t *keys, int32_t want)
{
	int counts[LC__MSG_TYPE_MAX + 1] = {0};
	forge_register(tx, rx_ep, k->url, secret, keys);
	int32_t got = inbox_drain(rx, 5000, counts, true);
	TU_CHECK(got == want, "the copy of D's session: %s (want %s)", lc_err_name(got),
		 lc_err_name(want));
}

static int case_hijack(void)
{
	world_t w;
	sink_t k;
	char rx_ep[128];
	uint8_t secret[LC__MSG_SECRET_LEN];
	unsigned long long v[4];
	int counts[LC__MSG_TYPE_MAX + 1] = {0};
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	sink_start(&k);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	guess(secret, 1);
	hijack_register(tx, rx, rx_ep, &k, secret, NULL, 0);
	failures += rounds_succeed(&w, 1, 2, NULL, NULL);
	inbox_drain(rx, 300, counts, false);
	if (counts[LC__MSG_STATUS] || counts[LC__MSG_LAYERS]) {
		fprintf(stderr, "the attacker got %d statuses, %d layer updates\n",
			counts[LC__MSG_STATUS], counts[LC__MSG_LAYERS]);
		failures++;
	}
	failures += sink_stop(&k) >= ITEM; /* a HELLO at most, never a page */
	p_counters_of(&w, v);
	failures += v[0] < 1; /* the copy is an incarnation of its own */
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

/* CURVE: P and D share keypair S; the attacker holds its own authorised
 * key A and learns D's secret. */
static int curve_setup(keys_t *a, keys_t *s)
{
	static char dir[64];
	if (!zmq_has("curve"))
		return TU_SKIP;
	snprintf(dir, sizeof dir, "/tmp/lc-sessions-XXXXXX");
	TU_CHECK(mkdtemp(dir), "mkdtemp");
	TU_CHECK(!zmq_curve_keypair(s->pub, s->sec) && !zmq_curve_keypair(a->pub, a->sec),
		 "keypairs");
	snprintf(a->server, sizeof a->server, "%s", s->pub);
	const char *names[3] = {"curve.public", "curve.secret", "authorized_keys"};
	char auth[100];
	snprintf(auth, sizeof auth, "%s\n%s", s->pub, a->pub);
	const char *text[3] = {s->pub, s->sec, auth};
	for (int i = 0; i < 3; i++) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		FILE *f = fopen(path, "w");
		TU_CHECK(f, "%s", path);
		fprintf(f, "%s\n", text[i]);
		fclose(f);
	}
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	return 0;
}

static void cancel_all(world_t *w, int round, void *arg)
{
	void **a = arg; /* tx, secret */
	LC__UNUSED(w);
	for (int i = 0; i < ROOMS; i++)
		forge_cancel(a[0], room_of(round, i), a[1]);
	usleep(300000);
}

static int case_hijack_curve(void)
{
	world_t w;
	sink_t k;
	keys_t a, s;
	char rx_ep[128], line[128], hex[64];
	uint8_t secret[LC__MSG_SECRET_LEN];
	unsigned long long v[4];
	int rc = curve_setup(&a, &s);
	if (rc)
		return rc;
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	adv_send_byte(&w.d, 's');
	TU_CHECK(adv_wait_line(&w.d, "d-secret ", 5000, line, sizeof line) &&
			 sscanf(line, "d-secret %63s", hex) == 1 && strlen(hex) == 32,
		 "D's secret: %s", line);
	for (int i = 0; i < LC__MSG_SECRET_LEN; i++)
		TU_CHECK(sscanf(hex + 2 * i, "%2hhx", &secret[i]) == 1, "hex");
	sink_start(&k);
	void *rx = forge_inbox(w.zc, &a, rx_ep, sizeof rx_ep);
	void *tx = forge_push(w.zc, w.p_ep, &a);
	/* D's own secret from another key: the session is D's key's. */
	hijack_register(tx, rx, rx_ep, &k, secret, &a, LC_ERR_AUTH);
	void *arg[2] = {tx, secret};
	failures += rounds_succeed(&w, 1, 2, cancel_all, arg);
	failures += sink_stop(&k) != 0;
	p_counters_of(&w, v);
	failures += v[1] < 1 + 2 * ROOMS || v[2] < 2 * ROOMS;
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

/* Forged refusals at D's inbox every millisecond, while D registers. */
typedef struct flood {
	world_t *w;
	_Atomic bool stop;
	int sent;
} flood_t;

static void *flood_main(void *arg)
{
	flood_t *f = arg;
	void *tx = adv_push_to(f->w->zc, f->w->d_ep);
	uint8_t secret[LC__MSG_SECRET_LEN];
	for (; !atomic_load(&f->stop); f->sent++, usleep(1000)) {
		guess(secret, 100 + (uint64_t)f->sent);
		forge_reply(tx, secret);
	}
	zmq_close(tx);
	return NULL;
}

static void forge_at_d(world_t *w, int round, void *arg)
{
	void *tx = arg;
	uint8_t secret[LC__MSG_SECRET_LEN];
	LC__UNUSED(w);
	guess(secret, 7);
	for (int i = 0; i < ROOMS; i++)
		forge_p_room(tx, room_of(round, i), secret);
	forge_reply(tx, secret);
	usleep(300000);
}

static int case_forged_p(void)
{
	world_t w;
	pthread_t th;
	start(&w);
	flood_t f = {.w = &w};
	TU_CHECK(pthread_create(&th, NULL, flood_main, &f) == 0, "flood");
	usleep(20000);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	atomic_store(&f.stop, true);
	pthread_join(th, NULL);
	fprintf(stderr, "forged refusals during round 0: %d\n", f.sent);
	void *tx = adv_push_to(w.zc, w.d_ep);
	failures += rounds_succeed(&w, 1, 2, forge_at_d, tx);
	unsigned long long n = d_mismatches(&w);
	failures += n < 2 * ROOMS; /* each room's STATUS and LAYERS, at least */
	zmq_close(tx);
	return finish(&w, failures);
}

typedef struct replay {
	void *tx;
	uint8_t own[LC__MSG_SECRET_LEN], stale[LC__MSG_SECRET_LEN];
	const char *rx_ep;
} replay_t;

static void replay_at_p(world_t *w, int round, void *arg)
{
	replay_t *r = arg;
	for (int i = 0; i < ROOMS; i++) {
		forge_cancel(r->tx, room_of(round, i), r->own);
		forge_info(r->tx, room_of(round, i), i, r->own, r->rx_ep);
		forge_cancel(r->tx, room_of(round, i), r->stale);
		forge_info(r->tx, room_of(round, i), i, r->stale, w->d_ep);
	}
	usleep(300000);
}

static int case_replay(void)
{
	world_t w;
	sink_t k;
	char rx_ep[128];
	replay_t r = {.rx_ep = rx_ep};
	unsigned long long v[4];
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	sink_start(&k);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	r.tx = forge_push(w.zc, w.p_ep, NULL);
	guess(r.own, 2);
	guess(r.stale, 3);
	hijack_register(r.tx, rx, rx_ep, &k, r.own, NULL, 0);
	failures += rounds_succeed(&w, 1, 2, replay_at_p, &r);
	failures += sink_stop(&k) >= ITEM;
	p_counters_of(&w, v);
	unsigned long long n = d_mismatches(&w);
	failures += v[1] < 4 * ROOMS || v[2] < 4 * ROOMS || n != 0;
	zmq_close(r.tx);
	zmq_close(rx);
	return finish(&w, failures);
}

static int case_restart(void)
{
	world_t w;
	unsigned long long v[4];
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	int rc = adv_reap(&w.d, 15000);
	failures += rc != 0;
	start_d(&w); /* the same session id, a new secret */
	failures += rounds_succeed(&w, 1, 2, NULL, NULL);
	p_counters_of(&w, v);
	failures += v[0] < 1;
	return finish(&w, failures);
}

static int case_old_version(void)
{
	world_t w;
	char rx_ep[128];
	unsigned long long v[4];
	start(&w);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	uint8_t v1[600];
	size_t n = LC__MSG_HEADER, ns = strlen(D_SESSION), ne = strlen(rx_ep);
	lc__put_u32(v1, LC__MSG_MAGIC);
	lc__put_u16(v1 + 4, 1);
	lc__put_u16(v1 + 6, LC__MSG_REGISTER);
	lc__put_u16(v1 + n, (uint16_t)ns);
	memcpy(v1 + n + 2, D_SESSION, ns);
	n += 2 + ns;
	lc__put_u16(v1 + n, (uint16_t)ne);
	memcpy(v1 + n + 2, rx_ep, ne);
	n += 2 + ne;
	memset(v1 + n, 0, 64); /* the rest, as far as P is concerned */
	n += 64;
	lc__put_u32(v1 + 8, (uint32_t)n);
	TU_CHECK(zmq_send(tx, v1, n, 0) == (int)n, "send");
	char reply[600];
	zmq_pollitem_t it = {.socket = rx, .events = ZMQ_POLLIN};
	TU_CHECK(zmq_poll(&it, 1, 5000) == 1, "no answer to a version-1 REGISTER");
	int got = zmq_recv(rx, reply, sizeof reply - 1, 0);
	TU_CHECK(got >= 26 && lc__get_u16((uint8_t *)reply + 4) == 1 &&
			 lc__get_u16((uint8_t *)reply + 6) == LC__MSG_REGISTER_REPLY,
		 "the answer is no version-1 REGISTER_REPLY (%d bytes)", got);
	size_t at = LC__MSG_HEADER + 2 + lc__get_u16((uint8_t *)reply + 12);
	int32_t result = (int32_t)lc__get_u32((uint8_t *)reply + at + 4);
	reply[got] = '\0';
	const char *reason = reply + at + 10;
	fprintf(stderr, "old D refused: %s: %s\n", lc_err_name(result), reason);
	int failures = result != LC_ERR_PROTO || !strstr(reason, "version 2") ||
		       !strstr(reason, "version 1");
	p_counters_of(&w, v);
	failures += v[3] < 1;
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

static int case_evict_flood_proven(void);
static int case_evict_flood(void)
{
	world_t w;
	sink_t k;
	char rx_ep[128], name[64];
	uint8_t secret[LC__MSG_SECRET_LEN];
	int counts[LC__MSG_TYPE_MAX + 1] = {0};
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	usleep(1000000); /* D's idle gap */
	sink_start(&k);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	for (int i = 0; i < 400; i++) {
		snprintf(name, sizeof name, "mallory%d", i);
		guess(secret, 100 + (uint64_t)i);
		forge_register_as(tx, name, rx_ep, k.url, secret, NULL);
	}
	inbox_drain(rx, 2000, counts, false);
	fprintf(stderr, "attacker: %d answers\n", counts[LC__MSG_REGISTER_REPLY]);
	failures += counts[LC__MSG_REGISTER_REPLY] < 256; /* it was let in, up to the cap */
	failures += rounds_succeed(&w, 1, 2, NULL, NULL);
	sink_stop(&k);
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

static int case_evict_flood_proven(void)
{
	setenv("LAYERCAKE_P_SESSION_GRACE_MS", "0", 1); /* P, a child */
	return case_evict_flood();
}

static int case_evicted_recovers(void)
{
	world_t w;
	sink_t k;
	char rx_ep[128];
	uint8_t secret[LC__MSG_SECRET_LEN];
	setenv("LAYERCAKE_P_SESSIONS_MAX", "1", 1); /* P, a child */
	setenv("LAYERCAKE_P_SESSION_GRACE_MS", "0", 1);
	setenv("LAYERCAKE_P_SESSION_KEEP_MS", "0", 1);
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	sink_start(&k);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	guess(secret, 5);
	forge_register_as(tx, "mallory", rx_ep, k.url, secret, NULL);
	TU_CHECK(inbox_drain(rx, 5000, (int[LC__MSG_TYPE_MAX + 1]){0}, true) == 0,
		 "the newcomer was not let in");
	int mask = run_round(&w, 1, NULL, NULL);
	fprintf(stderr, "round 1 (D evicted): mask %d (want 0)\n", mask);
	failures += mask != 0;
	failures += rounds_succeed(&w, 2, 2, NULL, NULL);
	sink_stop(&k);
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

/* A unix-socket listener at path (what an ipc:// endpoint binds). */
static int unix_listener(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	TU_CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 16),
		 "unix listener %s", path);
	return fd;
}

static int accepts(int fd)
{
	int n = 0, c;
	while ((c = accept(fd, NULL, NULL)) >= 0) {
		close(c);
		n++;
	}
	return n;
}

static int case_reflect(void)
{
	world_t w;
	sink_t k;
	char path[64], ipc_ep[96];
	uint8_t secret[LC__MSG_SECRET_LEN];
	start(&w);
	int failures = rounds_succeed(&w, 0, 0, NULL, NULL);
	sink_start(&k);
	snprintf(path, sizeof path, "/tmp/lc-reflect-%d.sock", (int)getpid());
	snprintf(ipc_ep, sizeof ipc_ep, "ipc://%s", path);
	int ux = unix_listener(path);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	guess(secret, 7);
	for (int i = 0; i < ROOMS; i++) /* D's session id, not its secret */
		forge_info(tx, room_of(9, i), i, secret, i ? k.url : ipc_ep);
	forge_register_as(tx, "mallory-ipc", ipc_ep, "tcp://127.0.0.1:1", secret, NULL);
	usleep(1500000);
	int n = accepts(ux);
	uint64_t bytes = sink_stop(&k);
	fprintf(stderr,
		"P connected %d times to the ipc listener, sent %llu bytes to the tcp one\n", n,
		(unsigned long long)bytes);
	failures += n != 0 || bytes != 0;
	failures += rounds_succeed(&w, 1, 1, NULL, NULL);
	close(ux);
	unlink(path);
	zmq_close(tx);
	return finish(&w, failures);
}

static unsigned long long p_log_lines_of(world_t *w)
{
	char line[128];
	unsigned long long n = 0;
	adv_send_byte(&w->p, 'l');
	TU_CHECK(adv_wait_line(&w->p, "p-loglines", 5000, line, sizeof line) &&
			 sscanf(line, "p-loglines %llu", &n) == 1,
		 "P's log lines");
	return n;
}

static int case_refusal_burst(void)
{
	world_t w;
	char bh_ep[64], rx_ep[128];
	uint8_t zero[LC__MSG_SECRET_LEN] = {0};
	int counts[LC__MSG_TYPE_MAX + 1] = {0};
	start(&w);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	int bh = socket(AF_INET, SOCK_STREAM, 0); /* listens, never accepts */
	TU_CHECK(bh >= 0 && !bind(bh, (struct sockaddr *)&a, sizeof a) && !listen(bh, 1) &&
			 !getsockname(bh, (struct sockaddr *)&a, &alen),
		 "blackhole");
	snprintf(bh_ep, sizeof bh_ep, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	unsigned long long lines = p_log_lines_of(&w);
	void *tx = forge_push(w.zc, w.p_ep, NULL);
	void *rx = forge_inbox(w.zc, NULL, rx_ep, sizeof rx_ep);
	/* No secret: refused; the registrant right behind the burst. */
	forge_register_n(tx, 3000, D_SESSION, bh_ep, "tcp://127.0.0.1:1", zero, NULL);
	forge_register(tx, rx_ep, "tcp://127.0.0.1:1", zero, NULL);
	int32_t got = inbox_drain(rx, 20000, counts, true);
	fprintf(stderr, "the registrant after the burst: %s\n",
		got == 1 ? "no answer" : lc_err_name(got));
	int failures = got != LC_ERR_AUTH;
	lines = p_log_lines_of(&w) - lines;
	fprintf(stderr, "P logged %llu lines for 3,001 refusals\n", lines);
	failures += lines >= 100; /* rate-limited: the counters count each */
	failures += rounds_succeed(&w, 0, 0, NULL, NULL);
	close(bh);
	zmq_close(tx);
	zmq_close(rx);
	return finish(&w, failures);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} cases[] = {{"hijack", case_hijack},
		     {"hijack_curve", case_hijack_curve},
		     {"forged_p", case_forged_p},
		     {"replay", case_replay},
		     {"restart", case_restart},
		     {"old_version", case_old_version},
		     {"evict_flood", case_evict_flood},
		     {"evict_flood_proven", case_evict_flood_proven},
		     {"evicted_recovers", case_evicted_recovers},
		     {"reflect", case_reflect},
		     {"refusal_burst", case_refusal_burst}};
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	for (size_t i = 0; argc == 2 && i < LC__ARRAY_SIZE(cases); i++)
		if (!strcmp(argv[1], cases[i].name))
			return cases[i].fn();
	fprintf(stderr,
		"usage: %s hijack|hijack_curve|forged_p|replay|restart|old_version|evict_flood|"
		"evict_flood_proven|evicted_recovers|reflect|refusal_burst\n",
		argv[0]);
	return 2;
}
