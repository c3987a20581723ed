/*
 * Issue 21, points 1 and 2: D authenticates P before it hands over its
 * data-plane token and session secret. A route is the bootstrap server's
 * word, and whoever can PUT /route (here: the holder of the bootstrap
 * secret, so that the case stands however the server guards its routes)
 * can point a known rank at itself. Real processes on 127.0.0.1: the
 * parent runs the bootstrap server and plays the impostor (a ZeroMQ inbox
 * that counts what reaches it), one real P rank, one real D.
 *
 *     adversarial_route hijack        CURVE off. Round 0 succeeds (D pins P's
 *                                     route). P is stopped until D declares
 *                                     it dead (D forgets what it knew of P),
 *                                     the impostor PUTs itself over rank 0,
 *                                     P continues. Round 2: D refuses the
 *                                     changed route (rooms failed naming it,
 *                                     routes_refused counted), the impostor
 *                                     gets no message, no byte of D changes.
 *                                     The real route back: round 3 takes
 *                                     P's bytes only.
 *     adversarial_route moved         CURVE off. Round 0 succeeds; P is
 *                                     SIGKILLed and a new P rank 0 starts
 *                                     (another port); nothing accepts at the
 *                                     pinned address any more, so D follows
 *                                     the route (routes_moved) and round 3
 *                                     succeeds byte-exact (round 2 may meet
 *                                     a REGISTER still out to the dead one).
 *     adversarial_route hijack_curve  CURVE on, the impostor's key not in D's
 *                                     authorized keys: its route is refused
 *                                     before any handshake (no REGISTER, no
 *                                     token); with the real route back the
 *                                     next round succeeds byte-exact.
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "control/bootstrap.h"
#include "forge.h"
#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define SECRET "adv-route-secret"
#define D_KNOBS "heartbeat_interval_ms=200,heartbeat_misses=2,bootstrap_timeout_ms=4000"
#define ALL ((1 << ROOMS) - 1)

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

/* ==== P: one rank, a round per byte (the round number) ==== */

static int p_child(void *arg, int go_fd)
{
	const char *bs = arg;
	tu_pool_t s;
	lc_prefill_t *pf;
	lc_engine_t *eng;
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	for (int k = 0; k < NBUF; k++)
		for (int pg = 0; pg < PAGES; pg++)
			tu_fill((uint8_t *)s.bases[k] + (size_t)pg * ITEM, ITEM,
				adv_seed_of(k, pg));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = bs,
				  .bootstrap_secret = SECRET,
				  .name = "p0",
				  .world_size = 1,
				  .dp_size = 1};
	int rc = lc_prefill_create(s.ctx, &pp, &pf);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	TU_OK(lc_prefill_engine(pf, &eng));
	say("p-up");
	char c;
	while ((c = adv_wait_byte(go_fd)) != 'q')
		adv_p_round(pf, eng, ROOM0, c - '0', go_fd, 8000);
	lc_prefill_destroy(pf);
	tu_pool_fini(&s);
	return 0;
}

/* ==== D: a round per byte (its number) ==== */

/* Room i of the round final: 1 if Success with P's bytes in its pages. */
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
	return bad ? 0 : 1;
}

/* Bytes of D's pool that are not the canary, outside the pages of rooms
 * that succeeded (mask). */
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

/* send false: the rooms are opened and never sent (live, planned, nothing
 * told to P). */
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
	int mask = 0;
	dl = adv_now_ms() + 10000;
	for (int i = 0; i < ROOMS; i++)
		mask |= d_room(rcv[i], s, round, i, dl) << i;
	for (int i = 0; i < ROOMS; i++)
		lc_receiver_destroy(rcv[i]);
	uint64_t refused = 0;
	TU_OK(lc_decode_counter(d, "routes_refused", &refused));
	say("d-round %d %d %ld %llu", round, mask, d_changed(s, mask), (unsigned long long)refused);
}

static int d_child(void *arg, int go_fd)
{
	const char *bs = arg;
	tu_pool_t s;
	lc_decode_t *d;
	tu_pool_init(&s, "d0", D_KNOBS, LAYERS, PAGES, ITEM);
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
	say("d-up");
	char c;
	while ((c = adv_wait_byte(go_fd)) != 'q')
		d_round(d, &s, bs, c >= 'a' ? c - 'a' : c - '0', c < 'a');
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return 0;
}

/* ==== the parent: the bootstrap server and the impostor ==== */

typedef struct world {
	lc_bootstrap_t *b;
	char bs[64];
	adv_proc_t p, d;
	void *zc, *inbox;
	char inbox_ep[128];
	char real_route[1024]; /* the PUT body that restores P's route */
} world_t;

/* The body of a PUT /route for rank 0 at ip:port with key, P's geometry
 * copied from the parallel info. */
static void route_body(const world_t *w, const char *ip, int port, const char *key, char *out,
		       size_t cap)
{
	char url[128], *resp = NULL, lens[512] = "[]", fp[32] = "";
	size_t len = 0;
	snprintf(url, sizeof url, "http://%s/route?engine_rank=-1&target_dp_group=-1", w->bs);
	TU_CHECK(lc__http_request("GET", url, NULL, 0, NULL, 3000, &resp, &len) == 200,
		 "parallel info");
	const char *l = strstr(resp, "\"kv_item_lens\":"),
		   *f = strstr(resp, "\"layout_fingerprint\":\"");
	TU_CHECK(l && f, "parallel info fields: %s", resp);
	sscanf(l + strlen("\"kv_item_lens\":"), "%511[^]]", lens);
	sscanf(f + strlen("\"layout_fingerprint\":\""), "%31[0-9a-f]", fp);
	free(resp);
	int n = snprintf(out, cap,
			 "{\"role\":\"Prefill\",\"world_size\":1,\"dp_size\":1,\"rank_ip\":\"%s\","
			 "\"rank_port\":%d,\"engine_rank\":0,\"enable_mla_l1_5_cache\":false,"
			 "\"kv_item_lens\":%s],\"layout_fingerprint\":\"%s\",\"layers\":%d",
			 ip, port, lens, fp, LAYERS);
	if (key && key[0])
		n += snprintf(out + n, cap - (size_t)n, ",\"curve_public_key\":\"%s\"", key);
	snprintf(out + n, cap - (size_t)n, ",\"takeover\":true}"); /* with the secret */
}

static void put_route(const world_t *w, const char *body)
{
	char url[128], *resp = NULL;
	size_t len = 0;
	snprintf(url, sizeof url, "http://%s/route", w->bs);
	int code = lc__http_request("PUT", url, body, strlen(body), SECRET, 3000, &resp, &len);
	fprintf(stderr, "PUT /route %s: %d %s\n", body, code, resp ? resp : "");
	TU_CHECK(code == 200, "the PUT over rank 0 (with the bootstrap secret)");
	free(resp);
}

/* The real route, kept to restore it: P's own rank_ip, port and key. */
static void keep_real_route(world_t *w)
{
	char url[128], *resp = NULL, ip[64] = "", key[64] = "";
	size_t len = 0;
	int port = 0;
	snprintf(url, sizeof url, "http://%s/route?engine_rank=0&target_dp_group=0", w->bs);
	TU_CHECK(lc__http_request("GET", url, NULL, 0, NULL, 3000, &resp, &len) == 200, "route");
	const char *a = strstr(resp, "\"rank_ip\":\""), *b = strstr(resp, "\"rank_port\":"),
		   *c = strstr(resp, "\"curve_public_key\":\"");
	TU_CHECK(a && b, "route fields: %s", resp);
	sscanf(a + strlen("\"rank_ip\":\""), "%63[^\"]", ip);
	sscanf(b + strlen("\"rank_port\":"), "%d", &port);
	if (c)
		sscanf(c + strlen("\"curve_public_key\":\""), "%63[^\"]", key);
	free(resp);
	route_body(w, ip, port, key, w->real_route, sizeof w->real_route);
}

/* The impostor's route: rank 0 at its inbox, with its key (or none). */
static void hijack(world_t *w, const char *key)
{
	char body[1024];
	const char *colon = strrchr(w->inbox_ep, ':');
	route_body(w, "127.0.0.1", atoi(colon + 1), key, body, sizeof body);
	put_route(w, body);
}

/* One round: D's on 'r' (-r - 1: D's rooms opened, never sent), P's too
 * when with_p; D's "d-round" line parsed,
 * its rooms' "d-final" lines in finals (ROOMS lines). */
static void round_of(world_t *w, int r, bool with_p, int *mask, long *changed,
		     unsigned long long *refused, char finals[ROOMS][512])
{
	char line[512];
	adv_send_byte(&w->d, (char)((r < 0 ? 'a' - r - 1 : '0' + r)));
	r = r < 0 ? -r - 1 : r;
	snprintf(line, sizeof line, "d-sent %d", r);
	TU_CHECK(adv_wait_line(&w->d, line, 20000, NULL, 0), "D never sent round %d", r);
	if (with_p) {
		adv_send_byte(&w->p, (char)('0' + r));
		snprintf(line, sizeof line, "p-boot %d", r);
		TU_CHECK(adv_wait_line(&w->p, line, 20000, NULL, 0), "P round %d", r);
		adv_go(&w->p);
	}
	for (int i = 0; i < ROOMS; i++) {
		TU_CHECK(adv_wait_line(&w->d, "d-final ", 30000, finals[i], 512),
			 "D round %d room %d never final", r, i);
		fprintf(stderr, "%s\n", finals[i]);
	}
	snprintf(line, sizeof line, "d-round %d ", r);
	TU_CHECK(adv_wait_line(&w->d, line, 30000, line, sizeof line), "D round %d", r);
	TU_CHECK(sscanf(line, "d-round %*d %d %ld %llu", mask, changed, refused) == 3, "%s", line);
	fprintf(stderr, "round %d: %s\n", r, line);
	if (with_p) {
		snprintf(line, sizeof line, "p-round %d", r);
		TU_CHECK(adv_wait_line(&w->p, line, 20000, NULL, 0), "P round %d end", r);
	}
}

/* What reached the impostor's inbox within ms (every type). */
static int impostor_got(world_t *w, int ms)
{
	int counts[LC__MSG_TYPE_MAX + 1] = {0}, n = 0;
	inbox_drain(w->inbox, ms, counts, false);
	for (int i = 0; i <= LC__MSG_TYPE_MAX; i++)
		n += counts[i];
	fprintf(stderr, "the impostor's inbox got %d messages (REGISTER: %d)\n", n,
		counts[LC__MSG_REGISTER]);
	return n;
}

static void world_up(world_t *w, const keys_t *impostor)
{
	memset(w, 0, sizeof *w);
	lc_bootstrap_params_t bp = {
		.size = sizeof bp, .host = "127.0.0.1", .port = 0, .secret = SECRET};
	TU_OK(lc_bootstrap_start(&bp, &w->b));
	TU_OK(lc_bootstrap_addr(w->b, w->bs, sizeof w->bs));
	w->zc = zmq_ctx_new();
	w->inbox = forge_inbox(w->zc, impostor, w->inbox_ep, sizeof w->inbox_ep);
	/* The server's and ZeroMQ's threads have just started in this process:
	 * GCC 12's AddressSanitizer can leave a child forked at that moment
	 * blocked on its runtime lock (adversarial_owned.c says more). */
	usleep(300 * 1000);
	adv_spawn(&w->p, p_child, w->bs);
	TU_CHECK(adv_wait_line(&w->p, "p-up", 15000, NULL, 0), "P did not start");
	adv_spawn(&w->d, d_child, w->bs);
	TU_CHECK(adv_wait_line(&w->d, "d-up", 15000, NULL, 0), "D did not start");
	keep_real_route(w);
}

static int world_down(world_t *w, int failures)
{
	adv_reap(&w->d, 20000);
	adv_reap(&w->p, 20000);
	zmq_close(w->inbox);
	zmq_ctx_term(w->zc);
	lc_bootstrap_stop(w->b);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}

/* The round with the impostor's route: every room failed naming why, no
 * byte of D changed, the refusal counted, nothing reached the impostor. */
static int check_refused(world_t *w, int r, const char *why, unsigned long long refused_before)
{
	int mask, failures = 0;
	long changed;
	unsigned long long refused;
	char finals[ROOMS][512];
	round_of(w, r, false, &mask, &changed, &refused, finals);
	for (int i = 0; i < ROOMS; i++)
		if (!strstr(finals[i], why) || !strstr(finals[i], w->inbox_ep + strlen("tcp://"))) {
			fprintf(stderr,
				"round %d room %d: want a reason with \"%s\" naming the "
				"impostor's route %s\n",
				r, i, why, w->inbox_ep);
			failures++;
		}
	if (mask || changed) {
		fprintf(stderr,
			"round %d: want every room failed and D untouched (mask %d, %ld "
			"bytes changed)\n",
			r, mask, changed);
		failures++;
	}
	if (refused <= refused_before) {
		fprintf(stderr, "round %d: want routes_refused counted at D\n", r);
		failures++;
	}
	if (impostor_got(w, 300)) {
		fprintf(stderr, "round %d: D sent the impostor its registration\n", r);
		failures++;
	}
	return failures;
}

static int check_ok(world_t *w, int r)
{
	int mask;
	long changed;
	unsigned long long refused;
	char finals[ROOMS][512];
	round_of(w, r, true, &mask, &changed, &refused, finals);
	if (mask != ALL || changed) {
		fprintf(stderr,
			"round %d: want every room Success byte-exact (mask %d, %ld bytes "
			"outside)\n",
			r, mask, changed);
		return 1;
	}
	return 0;
}

static int case_hijack(void)
{
	world_t w;
	int failures = 0, mask;
	long changed;
	unsigned long long refused;
	char finals[ROOMS][512];
	world_up(&w, NULL);
	failures += check_ok(&w, 0); /* D learns (pins) P's route */
	/* P stopped while D's round 1 is open (never sent: P is told
	 * nothing): D declares it dead and forgets what it knew; the impostor
	 * takes rank 0's route. */
	kill(w.p.pid, SIGSTOP);
	hijack(&w, NULL);
	round_of(&w, -2, false, &mask, &changed, &refused, finals);
	kill(w.p.pid, SIGCONT);
	if (mask || changed)
		fprintf(stderr, "round 1 (P stopped): mask %d, %ld bytes changed\n", mask, changed),
			failures++;
	for (int i = 0; i < ROOMS; i++) /* a stopped P closes no lane: heartbeats judge it */
		if (!strstr(finals[i], "missed 2 heartbeats"))
			fprintf(stderr, "round 1 room %d: want the heartbeat's verdict\n", i),
				failures++;
	failures += check_refused(&w, 2, "changed", refused);
	/* The real route back: the pin matches and D registers with P again.
	 * P after SIGSTOP answered that REGISTER only seconds later (P side,
	 * open), so the round may fail; it must not take a byte from anyone
	 * but P. */
	put_route(&w, w.real_route);
	round_of(&w, 3, true, &mask, &changed, &refused, finals);
	if (changed || impostor_got(&w, 100))
		fprintf(stderr, "round 3: %ld bytes changed outside P's rooms\n", changed),
			failures++;
	return world_down(&w, failures);
}

static int case_moved(void)
{
	world_t w;
	int failures = 0, mask;
	long changed;
	unsigned long long refused;
	char finals[ROOMS][512];
	world_up(&w, NULL);
	failures += check_ok(&w, 0);
	kill(w.p.pid, SIGKILL);
	adv_reap(&w.p, 5000);
	round_of(&w, -2, false, &mask, &changed, &refused, finals); /* D forgets P */
	adv_spawn(&w.p, p_child, w.bs); /* P restarted: same rank, another port */
	TU_CHECK(adv_wait_line(&w.p, "p-up", 15000, NULL, 0), "the new P did not start");
	/* Round 1's rooms may have looked the rank up again before the new P
	 * registered (the dead address, pinned: it matches), and a REGISTER
	 * to it may still be unanswered: round 2 may fail on it, and drops
	 * the dead address. Round 3 finds the new one and follows it. */
	round_of(&w, 2, true, &mask, &changed, &refused, finals);
	if (changed)
		fprintf(stderr, "round 2: %ld bytes changed outside\n", changed), failures++;
	failures += check_ok(&w, 3);
	return world_down(&w, failures);
}

static int case_hijack_curve(void)
{
	static char dir[64];
	keys_t s = {0}, a = {0};
	if (!zmq_has("curve"))
		return TU_SKIP;
	snprintf(dir, sizeof dir, "/tmp/lc-route-XXXXXX");
	TU_CHECK(mkdtemp(dir), "mkdtemp");
	TU_CHECK(!zmq_curve_keypair(s.pub, s.sec) && !zmq_curve_keypair(a.pub, a.sec), "keys");
	const char *names[2] = {"curve.public", "curve.secret"};
	const char *text[2] = {s.pub, s.sec};
	for (int i = 0; i < 2; i++) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		FILE *f = fopen(path, "w");
		TU_CHECK(f, "%s", path);
		fprintf(f, "%s\n", text[i]);
		fclose(f);
	}
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	world_t w;
	int failures = 0;
	world_up(&w, &a); /* the impostor: a CURVE server with its own key */
	hijack(&w, a.pub);
	failures += check_refused(&w, 0, "authorize", 0);
	put_route(&w, w.real_route);
	failures += check_ok(&w, 1);
	for (int i = 0; i < 2; i++) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
	return world_down(&w, failures);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc == 2 && !strcmp(argv[1], "hijack"))
		return case_hijack();
	if (argc == 2 && !strcmp(argv[1], "hijack_curve"))
		return case_hijack_curve();
	if (argc == 2 && !strcmp(argv[1], "moved"))
		return case_moved();
	fprintf(stderr, "usage: %s hijack|hijack_curve|moved\n", argv[0]);
	return 2;
}
