/*
 * Which D a P rank takes for a room, and what D hears when P will not
 * serve it (issue 43 finding 8, issue 44's "D's bootstrapped means P's
 * connector knows the room"): a real P process and real D processes on
 * 127.0.0.1, scripted step by step (admission.h), no pairing value (these
 * cases hold for unpaired senders too; adversarial_pairing.c has the
 * paired ones).
 *
 *     adversarial_admission <case>
 *
 *   refused_prefix   finding 8: D1 claims the room with prefix 0; then D2
 *                    (another D, another session) sends a transfer info for
 *                    it with prefix 32, which P refuses (the room is
 *                    claimed) and D2 hears at once. P's sender still reads
 *                    prefix 0, sends every page, and D1 gets every byte.
 *                    (Before: the refused info moved the prefix to 32, P
 *                    skipped two pages and D1 failed short.)
 *   no_room          a D's transfer info for a room P never opens (P
 *                    alive): P holds it p_park_ms (1 s) and refuses it,
 *                    "P has no such room"; D fails within 3 s of its send
 *                    (before: after waiting_timeout_ms, 300 s).
 *   no_room_d        the same with P holding it long (p_park_ms 60 s): D
 *                    fails by itself, its bootstrap_timeout_ms (2 s) passed
 *                    without P confirming a sender for the room.
 *   cancel_before    P's sender cancelled (its final status read) before D
 *                    sent: D fails within 1 s of its send, "cancelled".
 *   destroy_before   P's sender destroyed before D sent: the same.
 *   cancel_parked    D's info reached P before the sender (parked); P
 *                    creates the sender and cancels it at once: D fails
 *                    within 1 s of the cancel.
 *   destroy_parked   the same with the sender destroyed at once.
 *   d_gone_parked    D's info parked at P, then D's room ends (D's request
 *                    aborted; here its bootstrap_timeout_ms) and D tells P;
 *                    P's sender created after that fails within 1 s with
 *                    D's reason (before: it held its KV for a D that was
 *                    gone until its bootstrap deadline).
 *   cancel_bootstrapped  the room took D's info; P cancels: D within 1 s.
 *   cancel_sending   half the room's layers sent; P cancels: D within 1 s.
 *   destroy_after    the room succeeded at both; P destroys its sender: D's
 *                    room stays Success with every byte.
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

/* "Well under 1 s": what D may take to hear of a P-side end. */
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

/* P up; p_park_ms given through the environment, which a library without
 * the knob ignores (a context's knobs refuse a name they do not know). */
static void up(world_t *w, const char *park_ms)
{
	memset(w, 0, sizeof *w);
	if (park_ms)
		setenv("LAYERCAKE_P_PARK_MS", park_ms, 1);
	adm_p_start(&w->p, &w->pa, w->addr);
	unsetenv("LAYERCAKE_P_PARK_MS");
}

static void d_up(world_t *w, adv_proc_t *d, adm_d_arg_t *a, const char *knobs, uint64_t prefix)
{
	memset(a, 0, sizeof *a);
	a->bs_addr = w->addr;
	a->knobs = knobs;
	a->prefix = prefix;
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

static void expect_told(const adm_done_t *r, uint64_t since, const char *what, const char *word)
{
	EXPECT(r->status == LC_ROOM_FAILED, "%s: D's room %s, want Failed", what,
	       lc_room_status_name(r->status));
	EXPECT(r->t_ms <= since + TOLD_MS, "%s: D heard after %llu ms (want < %d)", what,
	       (unsigned long long)(r->t_ms - since), TOLD_MS);
	EXPECT(strstr(r->reason, word), "%s: reason '%s' names no '%s'", what, r->reason, word);
}

static void case_refused_prefix(void)
{
	world_t w;
	adv_proc_t d[2];
	adm_d_arg_t a[2];
	adm_done_t r1, r2;
	up(&w, NULL);
	d_up(&w, &d[0], &a[0], NULL, 0);
	d_up(&w, &d[1], &a[1], NULL, 2 * ADM_PAGE_TOKENS);
	adm_p_do(&w.p, 's', "p-sender ", w.line, sizeof w.line);
	adm_d_send(&d[0]);
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-boot 2 0"), "P: '%s', want Bootstrapped with prefix 0", w.line);
	/* The second D: refused, and told so at once. */
	uint64_t t2 = adm_d_send(&d[1]);
	TU_CHECK(adm_d_done(&d[1], 10000, &r2), "D2 never ended");
	EXPECT(r2.status == LC_ROOM_FAILED && r2.t_ms <= t2 + TOLD_MS &&
		       strstr(r2.reason, "claimed"),
	       "D2: %s after %llu ms: %s", lc_room_status_name(r2.status),
	       (unsigned long long)(r2.t_ms - t2), r2.reason);
	/* P's sender is as D1 left it. */
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	EXPECT(!strcmp(w.line, "p-boot 2 0"), "P after the refusal: '%s', want prefix 0", w.line);
	adm_p_do(&w.p, 'f', "p-final ", w.line, sizeof w.line);
	EXPECT(!strncmp(w.line, "p-final 5 ", 10), "P: '%s', want Success", w.line);
	TU_CHECK(adm_d_done(&d[0], 10000, &r1), "D1 never ended");
	EXPECT(r1.status == LC_ROOM_SUCCESS && !r1.bad, "D1: %s, %d pages differ: %s",
	       lc_room_status_name(r1.status), r1.bad, r1.reason);
	down(&w, d, 2);
}

/* A room P never opens: D fails within bound_ms of its send, P's refusal
 * (p_park_ms) or D's own deadline (bootstrap_timeout_ms). */
static void case_no_room(const char *park_ms, const char *d_knobs, int bound_ms)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	up(&w, park_ms);
	d_up(&w, &d, &a, d_knobs, 0);
	uint64_t t = adm_d_send(&d);
	TU_CHECK(adm_d_done(&d, 20000, &r), "D's room never ended (20 s)");
	EXPECT(r.status == LC_ROOM_FAILED && r.fail_reason == LC_FAIL_BOOTSTRAP_TIMEOUT,
	       "D: %s (%s): %s", lc_room_status_name(r.status), lc_fail_reason_name(r.fail_reason),
	       r.reason);
	EXPECT(r.t_ms <= t + (uint64_t)bound_ms, "D failed %llu ms after its send (want < %d)",
	       (unsigned long long)(r.t_ms - t), bound_ms);
	EXPECT(strstr(r.reason, "no such room"), "reason: %s", r.reason);
	down(&w, &d, 1);
}

/* P's sender ends before D sends: 'x' cancel (and its final status read),
 * or 'd' destroy. */
static void case_before(char end)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	up(&w, NULL);
	d_up(&w, &d, &a, NULL, 0);
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	if (end == 'x') {
		adm_p_do(&w.p, 'x', "p-cancel 0 ", w.line, sizeof w.line);
		adm_p_do(&w.p, 'r', "p-poll 0", w.line, sizeof w.line); /* the engine forgets it */
	} else {
		adm_p_do(&w.p, 'd', "p-destroyed ", w.line, sizeof w.line);
	}
	uint64_t t = adm_d_send(&d);
	TU_CHECK(adm_d_done(&d, 20000, &r), "D's room never ended (20 s)");
	expect_told(&r, t, end == 'x' ? "cancelled before D" : "destroyed before D",
		    end == 'x' ? "cancel" : "destroyed");
	down(&w, &d, 1);
}

/* D's info parked at P, then the sender created and at once cancelled
 * ('x') or destroyed ('d'). */
static void case_parked(char end)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	unsigned long long t;
	up(&w, NULL);
	d_up(&w, &d, &a, NULL, 0);
	adm_d_send(&d);
	usleep(200000); /* the info is at P, parked */
	adv_send_byte(&w.p, 's');
	adm_p_do(&w.p, end, end == 'x' ? "p-cancel " : "p-destroyed ", w.line, sizeof w.line);
	TU_CHECK(sscanf(w.line, end == 'x' ? "p-cancel %*d %llu" : "p-destroyed %llu", &t) == 1,
		 "'%s'", w.line);
	TU_CHECK(adm_d_done(&d, 20000, &r), "D's room never ended (20 s)");
	expect_told(&r, t, end == 'x' ? "cancelled while parked" : "destroyed while parked",
		    end == 'x' ? "cancel" : "");
	down(&w, &d, 1);
}

/* D cancels its parked info before P's sender comes: the sender fails at
 * once. */
static void case_d_gone_parked(void)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	int st;
	up(&w, "60000");
	d_up(&w, &d, &a, "bootstrap_timeout_ms=1000,connect_timeout_ms=1000", 0);
	adm_d_send(&d);
	TU_CHECK(adm_d_done(&d, 20000, &r), "D's room never ended (20 s)");
	EXPECT(r.status == LC_ROOM_FAILED, "D: %s", lc_room_status_name(r.status));
	usleep(300000); /* D's cancel is at P */
	uint64_t t = adv_now_ms();
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	adm_p_do(&w.p, 'b', "p-boot ", w.line, sizeof w.line);
	uint64_t took = adv_now_ms() - t;
	TU_CHECK(sscanf(w.line, "p-boot %d", &st) == 1, "'%s'", w.line);
	EXPECT(st == LC_ROOM_FAILED && took < TOLD_MS,
	       "P's sender after D cancelled: %s after %llu ms (want Failed within %d ms)",
	       lc_room_status_name(st), (unsigned long long)took, TOLD_MS);
	down(&w, &d, 1);
}

/* The room took D's info; P cancels before ('b') or while ('h') sending. */
static void case_cancel_live(char stage)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	unsigned long long t;
	up(&w, NULL);
	d_up(&w, &d, &a, NULL, 0);
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	adm_d_send(&d);
	adm_p_do(&w.p, 'b', "p-boot 2 ", w.line, sizeof w.line);
	if (stage == 'h') {
		adm_p_do(&w.p, 'h', "p-half", w.line, sizeof w.line);
		usleep(100000); /* the first layers are landing */
	}
	adm_p_do(&w.p, 'x', "p-cancel 0 ", w.line, sizeof w.line);
	TU_CHECK(sscanf(w.line, "p-cancel %*d %llu", &t) == 1, "'%s'", w.line);
	TU_CHECK(adm_d_done(&d, 20000, &r), "D's room never ended (20 s)");
	expect_told(&r, t, stage == 'h' ? "cancelled while sending" : "cancelled when bootstrapped",
		    "cancel");
	down(&w, &d, 1);
}

static void case_destroy_after(void)
{
	world_t w;
	adv_proc_t d;
	adm_d_arg_t a;
	adm_done_t r;
	up(&w, NULL);
	d_up(&w, &d, &a, NULL, 0);
	adm_p_do(&w.p, 's', "p-sender 0", w.line, sizeof w.line);
	adm_d_send(&d);
	adm_p_do(&w.p, 'b', "p-boot 2 ", w.line, sizeof w.line);
	adm_p_do(&w.p, 'f', "p-final ", w.line, sizeof w.line);
	EXPECT(!strncmp(w.line, "p-final 5 ", 10), "P: '%s', want Success", w.line);
	TU_CHECK(adm_d_done(&d, 10000, &r), "D's room never ended");
	adm_p_do(&w.p, 'd', "p-destroyed ", w.line, sizeof w.line);
	usleep(300000); /* anything P would say of the room now has come */
	EXPECT(r.status == LC_ROOM_SUCCESS && !r.bad, "D: %s, %d pages differ: %s",
	       lc_room_status_name(r.status), r.bad, r.reason);
	down(&w, &d, 1);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc != 2) {
		fprintf(stderr, "usage: %s <case>\n", argv[0]);
		return 2;
	}
	const char *c = argv[1];
	if (!strcmp(c, "refused_prefix"))
		case_refused_prefix();
	else if (!strcmp(c, "no_room"))
		case_no_room("1000", NULL, 3000);
	else if (!strcmp(c, "no_room_d"))
		case_no_room("60000", "bootstrap_timeout_ms=2000,connect_timeout_ms=1000", 3500);
	else if (!strcmp(c, "cancel_before"))
		case_before('x');
	else if (!strcmp(c, "destroy_before"))
		case_before('d');
	else if (!strcmp(c, "cancel_parked"))
		case_parked('x');
	else if (!strcmp(c, "destroy_parked"))
		case_parked('d');
	else if (!strcmp(c, "d_gone_parked"))
		case_d_gone_parked();
	else if (!strcmp(c, "cancel_bootstrapped"))
		case_cancel_live('b');
	else if (!strcmp(c, "cancel_sending"))
		case_cancel_live('h');
	else if (!strcmp(c, "destroy_after"))
		case_destroy_after();
	else {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
