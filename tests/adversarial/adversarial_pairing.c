/*
 * Pairing is proven, not guessed (issue 43, finding 3): the router gives P
 * and D of one request the same unguessable pairing value, and P takes a
 * D's transfer info for the room only with it. A real P process, real D
 * processes on 127.0.0.1 (admission.h), attackers that are real Ds naming
 * the victim's room at P's real bootstrap server.
 *
 *     adversarial_pairing <case>
 *
 *   refused        the victim's P sender is paired. Three attackers' Ds
 *                  name its room: one before the sender exists (its info
 *                  parked, then refused when the sender comes), one with no
 *                  pairing value, one with another; each with prefix 32
 *                  (the finding-8 lie). Each fails at once, "pairing value
 *                  mismatch" (infos_refused_pair 3), P's room stays as it
 *                  was (Bootstrapping, no prefix), and the victim's D then
 *                  gets every byte of the room. (Before: the first D to
 *                  name the room got the victim's KV.)
 *   second_d       the victim's D claims the room; a second D with the same
 *                  pairing value (the request sent twice) is refused,
 *                  "claimed", and the first goes on undisturbed: Success,
 *                  every byte.
 *   destroyed      P's paired sender destroyed before its D sent: that D
 *                  is refused within 1 s, with the reason; a D with another
 *                  pairing value for the same room id is another request's
 *                  and waits for its own sender (refused as no such room
 *                  after p_park_ms, 1.5 s).
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "harness.h"
#include "rooms.h"
#include "testutil.h"

#define TOLD_MS 1000

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

typedef struct world {
	adm_p_arg_t pa;
	adv_proc_t p;
	char addr[64];
	char line[512];
} world_t;

/* P up, its sender to be paired with the value of seed 1. */
static void up(world_t *w, const char *park_ms)
{
	memset(w, 0, sizeof *w);
	adm_pair(w->pa.pair, &w->pa.pair_len, 1);
	if (park_ms)
		setenv("LAYERCAKE_P_PARK_MS", park_ms, 1);
	adm_p_start(&w->p, &w->pa, w->addr);
	unsetenv("LAYERCAKE_P_PARK_MS");
}

/* A D for the room with the pairing value of seed (0: none). */
static void d_up(world_t *w, adv_proc_t *d, adm_d_arg_t *a, uint64_t seed, uint64_t prefix)
{
	memset(a, 0, sizeof *a);
	a->bs_addr = w->addr;
	a->prefix = prefix;
	if (seed)
		adm_pair(a->pair, &a->pair_len, seed);
	adm_d_start(d, a);
}

/* Each child holds its siblings' go pipes (forked after them): EOF comes
 * only once every process closed them, so each is told to quit. */
static void down(world_t *w, adv_proc_t *ds, int nd)
{
	for (int i = 0; i < nd; i++)
		adm_quit(&ds[i]);
	adm_quit(&w->p);
	for (int i = 0; i < nd; i++) {
		int rc = adv_reap(&ds[i], 20000);
		EXPECT(rc == 0, "D %d exited %d", i, rc);
	}
	int rc = adv_reap(&w->p, 20000);
	EXPECT(rc == 0, "P exited %d", rc);
}

static void expect_refused(adv_proc_t *d, uint64_t since, const char *who, const char *word)
{
	adm_done_t r;
	TU_CHECK(adm_d_done(d, 20000, &r), "%s: its room never ended", who);
	EXPECT(r.status == LC_ROOM_FAILED, "%s: %s, want Failed", who,
	       lc_room_status_name(r.status));
	EXPECT(r.t_ms <= since + TOLD_MS, "%s: refused after %llu ms (want < %d)", who,
	       (unsigned long long)(r.t_ms - since), TOLD_MS);
	EXPECT(strstr(r.reason, word), "%s: reason '%s' names no '%s'", who, r.reason, word);
}

static void expect_success(adv_proc_t *d, const char *who)
{
	adm_done_t r;
	TU_CHECK(adm_d_done(d, 20000, &r), "%s: its room never ended", who);
	EXPECT(r.status == LC_ROOM_SUCCESS && !r.bad, "%s: %s, %d pages differ: %s", who,
	       lc_room_status_name(r.status), r.bad, r.reason);
}

static void case_refused(void)
{
	world_t w;
	adv_proc_t d[4];
	adm_d_arg_t a[4];
	up(&w, NULL);
	d_up(&w, &d[0], &a[0], 7, 2 * ADM_PAGE_TOKENS); /* before the sender, another value */
	d_up(&w, &d[1], &a[1], 0, 2 * ADM_PAGE_TOKENS); /* no value */
	d_up(&w, &d[2], &a[2], 8, 2 * ADM_PAGE_TOKENS); /* another value */
	d_up(&w, &d[3], &a[3], 1, 0);                   /* the victim's own */
	adm_d_send(&d[0]);
	usleep(200000); /* parked at P */
	unsigned long long t;
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	t = adv_now_ms();
	expect_refused(&d[0], t, "the D before the sender", "pairing value mismatch");
	for (int i = 1; i <= 2; i++) {
		char who[32];
		snprintf(who, sizeof who, "attacker %d", i);
		expect_refused(&d[i], adm_d_send(&d[i]), who, "pairing value mismatch");
	}
	/* Nothing of the room moved: still waiting for its D, no prefix. */
	adm_p_do(&w.p, 'r', "p-poll ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-poll 1"), "P's room: '%s', want Bootstrapping", w.line);
	adm_p_do(&w.p, 'c', "p-counters ", w.line, sizeof w.line);
	EXPECT(adm_counter(w.line, "pair") == 3, "infos_refused_pair: %s", w.line);
	/* The victim's D: the room, every byte. */
	adm_d_send(&d[3]);
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-boot 2 0"), "P: '%s', want Bootstrapped with prefix 0", w.line);
	adm_p_do(&w.p, 'f', "p-final ", w.line, sizeof w.line);
	EXPECT(!strncmp(w.line, "p-final 5 ", 10), "P: '%s', want Success", w.line);
	expect_success(&d[3], "the victim's D");
	down(&w, d, 4);
}

static void case_second_d(void)
{
	world_t w;
	adv_proc_t d[2];
	adm_d_arg_t a[2];
	up(&w, NULL);
	d_up(&w, &d[0], &a[0], 1, 0);
	d_up(&w, &d[1], &a[1], 1, 2 * ADM_PAGE_TOKENS);
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	adm_d_send(&d[0]);
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-boot 2 0"), "P: '%s', want Bootstrapped with prefix 0", w.line);
	expect_refused(&d[1], adm_d_send(&d[1]), "the second D", "claimed");
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-boot 2 0"), "P after the second D: '%s', want prefix 0", w.line);
	adm_p_do(&w.p, 'c', "p-counters ", w.line, sizeof w.line);
	EXPECT(adm_counter(w.line, "claimed") == 1, "infos_refused_claimed: %s", w.line);
	adm_p_do(&w.p, 'f', "p-final ", w.line, sizeof w.line);
	EXPECT(!strncmp(w.line, "p-final 5 ", 10), "P: '%s', want Success", w.line);
	expect_success(&d[0], "the first D");
	down(&w, d, 2);
}

static void case_destroyed(void)
{
	world_t w;
	adv_proc_t d[2];
	adm_d_arg_t a[2];
	adm_done_t r;
	up(&w, "1500");
	d_up(&w, &d[0], &a[0], 1, 0);
	d_up(&w, &d[1], &a[1], 9, 0);
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	adm_p_do(&w.p, 'd', "p-destroyed ", w.line, sizeof w.line);
	expect_refused(&d[0], adm_d_send(&d[0]), "the destroyed sender's D", "destroyed");
	uint64_t t = adm_d_send(&d[1]);
	TU_CHECK(adm_d_done(&d[1], 20000, &r), "the other request's D never ended");
	EXPECT(r.status == LC_ROOM_FAILED && r.t_ms >= t + 1000 && r.t_ms <= t + 4000 &&
		       strstr(r.reason, "no such room"),
	       "the other request's D: %s after %llu ms: %s", lc_room_status_name(r.status),
	       (unsigned long long)(r.t_ms - t), r.reason);
	down(&w, d, 2);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc != 2) {
		fprintf(stderr, "usage: %s refused|second_d|destroyed\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "refused"))
		case_refused();
	else if (!strcmp(argv[1], "second_d"))
		case_second_d();
	else if (!strcmp(argv[1], "destroyed"))
		case_destroyed();
	else {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
