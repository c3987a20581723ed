/*
 * lc_prefill_wait / lc_prefill_fd and lc_decode_wait / lc_decode_fd in a
 * real P and D (one process, two threads, a bootstrap server, tcp on
 * loopback). Each side sleeps until woken and only then looks at its
 * rooms, as a serving engine's loop would. Properties:
 *   - no wake is lost: every status change a side observes follows a wait
 *     that returned 1, or a pass that did something (and so looked again
 *     at once); a wait that times out (10 s) and is followed by a change
 *     is a lost wake;
 *   - the fd polls readable only when a wait would return at once;
 *   - every room succeeds.
 * No timing is asserted; the 10 s are a deadline, not a measurement.
 *
 *   control_wait [rooms] [inflight]
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "layercake.h"
#include "testutil.h"

#define ITEM 4096
#define WAIT_MS 10000
#define MAX_INFLIGHT 16

static lc_prefill_t *pf;
static lc_engine_t *eng;
static lc_decode_t *dec;
static char boot[64];
static int nrooms = 60, inflight = 4;
static int qfd;                      /* D -> P: a room was queued, or stop */
static _Atomic uint64_t queued_upto; /* rooms 1..queued_upto exist at D */
static atomic_bool stop;
static atomic_int p_lost, d_lost, p_changes, d_changes, p_failed, d_at_create;

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void kick_p(void)
{
	uint64_t one = 1;
	TU_CHECK(write(qfd, &one, sizeof one) == sizeof one, "eventfd write");
}

/* P's sleep: its fd and the queue's, as an event loop polls them. Returns
 * whether it was woken (not timed out). */
static bool p_sleep(void)
{
	uint64_t drain;
	struct pollfd f[2] = {{.fd = lc_prefill_fd(pf), .events = POLLIN},
			      {.fd = qfd, .events = POLLIN}};
	int n = poll(f, 2, WAIT_MS);
	TU_CHECK(n >= 0, "poll");
	if (f[1].revents & POLLIN)
		TU_CHECK(read(qfd, &drain, sizeof drain) == sizeof drain, "eventfd read");
	bool fd_ready = f[0].revents & POLLIN;
	int w = lc_prefill_wait(pf, 0);
	TU_CHECK(w == 0 || w == 1, "lc_prefill_wait: %d", w);
	TU_CHECK(!fd_ready || w == 1, "prefill fd readable but the wait had nothing");
	return n > 0;
}

/* One forward for the Bootstrapped rooms not yet started. */
static void p_forward(lc_sender_t **s, const uint64_t *room, bool *started, int n)
{
	int64_t page[MAX_INFLIGHT * 2];
	bool now[MAX_INFLIGHT * 2] = {0};
	TU_OK(lc_engine_batch_begin(eng, 0));
	for (int i = 0; i < n; i++) {
		if (started[i] || lc_sender_poll(s[i], NULL) != LC_ROOM_BOOTSTRAPPED)
			continue;
		page[i] = (int64_t)(room[i] % (uint64_t)inflight);
		lc_chunk_t c = {.size = sizeof c,
				.room = room[i],
				.pages = &page[i],
				.page_count = 1,
				.is_last = 1};
		TU_OK(lc_engine_chunk_add(eng, &c));
		started[i] = now[i] = true;
	}
	TU_OK(lc_engine_batch_end(eng));
	TU_OK(lc_engine_record_cache(eng));
	for (int i = 0; i < n; i++)
		if (now[i])
			TU_OK(lc_sender_metadata_set(s[i], "tok", 4));
	TU_OK(lc_engine_record_aux(eng));
}

static void *p_main(void *arg)
{
	(void)arg;
	lc_sender_t *s[MAX_INFLIGHT * 2];
	uint64_t room[MAX_INFLIGHT * 2], next = 1;
	int last[MAX_INFLIGHT * 2], n = 0;
	bool started[MAX_INFLIGHT * 2], looked_after_wake = true;
	while (!atomic_load(&stop) || n) {
		bool busy = false;
		for (; next <= atomic_load(&queued_upto) && n < MAX_INFLIGHT * 2; next++, n++) {
			TU_OK(lc_sender_create(pf, next, &s[n]));
			room[n] = next, last[n] = lc_sender_poll(s[n], NULL), started[n] = false;
			busy = true;
		}
		int ready = 0;
		for (int i = 0; i < n; i++) {
			int st = lc_sender_poll(s[i], NULL);
			if (st != last[i]) {
				atomic_fetch_add(&p_changes, 1);
				if (!looked_after_wake)
					atomic_fetch_add(&p_lost, 1);
			}
			last[i] = st;
			if (st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED) {
				if (st == LC_ROOM_FAILED)
					atomic_fetch_add(&p_failed, 1);
				lc_sender_destroy(s[i]);
				n--;
				s[i] = s[n], room[i] = room[n], last[i] = last[n];
				started[i] = started[n];
				i--;
				busy = true;
				continue;
			}
			ready += !started[i] && st == LC_ROOM_BOOTSTRAPPED;
		}
		if (ready) {
			p_forward(s, room, started, n);
			busy = true;
		}
		looked_after_wake = busy || p_sleep();
	}
	return NULL;
}

/* D's sleep: the fd first (readable means a wait returns at once), then
 * the wait itself. Returns whether it was woken. */
static bool d_sleep(void)
{
	bool fd_ready = readable(lc_decode_fd(dec));
	int w = lc_decode_wait(dec, 0);
	TU_CHECK(w == 0 || w == 1, "lc_decode_wait(0): %d", w);
	TU_CHECK(!fd_ready || w == 1, "decode fd readable but the wait had nothing");
	if (w == 1)
		return true;
	w = lc_decode_wait(dec, WAIT_MS);
	TU_CHECK(w == 0 || w == 1, "lc_decode_wait: %d", w);
	return w == 1;
}

static void d_run(void)
{
	lc_receiver_t *r[MAX_INFLIGHT] = {0};
	int last[MAX_INFLIGHT], opened = 0, ended = 0;
	bool sent[MAX_INFLIGHT], looked_after_wake = true;
	while (ended < nrooms) {
		bool busy = false;
		for (int k = 0; k < inflight; k++) {
			if (!r[k]) {
				if (opened == nrooms)
					continue;
				uint64_t room = (uint64_t)++opened;
				TU_OK(lc_receiver_create(dec, boot, room, &r[k]));
				last[k] = lc_receiver_poll(r[k], NULL), sent[k] = false;
				/* P already registered: Bootstrapped at once. */
				if (last[k] == LC_ROOM_BOOTSTRAPPED)
					atomic_fetch_add(&d_at_create, 1);
				atomic_store(&queued_upto, room);
				kick_p();
				busy = true;
				continue;
			}
			lc_room_info_t info = {.size = sizeof info};
			int st = lc_receiver_poll(r[k], &info);
			if (st != last[k]) {
				atomic_fetch_add(&d_changes, 1);
				if (!looked_after_wake)
					atomic_fetch_add(&d_lost, 1);
			}
			last[k] = st;
			if (st == LC_ROOM_BOOTSTRAPPED && !sent[k]) {
				int64_t page = k;
				lc_receiver_pages_t pg = {.size = sizeof pg,
							  .pages = &page,
							  .page_count = 1,
							  .aux_index = k};
				TU_OK(lc_receiver_send(r[k], &pg));
				sent[k] = busy = true;
			} else if (st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED) {
				TU_CHECK(st == LC_ROOM_SUCCESS, "D room failed: %s", info.reason);
				lc_receiver_destroy(r[k]);
				r[k] = NULL;
				ended++;
				busy = true;
			}
		}
		looked_after_wake = busy || d_sleep();
	}
}

static void misuse(void)
{
	TU_CHECK(lc_prefill_wait(NULL, 0) == -EINVAL, "NULL prefill");
	TU_CHECK(lc_prefill_fd(NULL) == -EINVAL, "NULL prefill");
	TU_CHECK(lc_decode_wait(NULL, 0) == -EINVAL, "NULL decode");
	TU_CHECK(lc_decode_fd(NULL) == -EINVAL, "NULL decode");
	TU_CHECK(lc_prefill_fd(pf) >= 0 && lc_decode_fd(dec) >= 0, "fds");
	/* Nothing happened yet on either side: a zero wait says so. */
	TU_CHECK(lc_decode_wait(dec, 0) == 0, "a wake before any receiver");
	TU_CHECK(lc_decode_wait(dec, 1) == 0, "a wake before any receiver (1 ms)");
}

int main(int argc, char **argv)
{
	if (argc > 1)
		nrooms = atoi(argv[1]);
	if (argc > 2)
		inflight = atoi(argv[2]);
	TU_CHECK(nrooms > 0 && inflight > 0 && inflight <= MAX_INFLIGHT, "usage");
	tu_watchdog(110);
	tu_pool_t P, D;
	tu_pool_init(&P, "wait-P", NULL, 1, (uint64_t)inflight, ITEM);
	tu_pool_init(&D, "wait-D", NULL, 1, (uint64_t)inflight, ITEM);
	lc_bootstrap_t *bs;
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &bs));
	TU_OK(lc_bootstrap_addr(bs, boot, sizeof boot));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = P.layout,
				  .bootstrap = boot,
				  .name = "wait-P",
				  .world_size = 1,
				  .dp_size = 1};
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = D.layout,
				 .regions = &D.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .tp_size = 1};
	TU_OK(lc_prefill_create(P.ctx, &pp, &pf));
	TU_OK(lc_prefill_engine(pf, &eng));
	TU_OK(lc_decode_create(D.ctx, &dp, &dec));
	TU_CHECK((qfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) >= 0, "eventfd");
	misuse();
	pthread_t pt;
	TU_CHECK(pthread_create(&pt, NULL, p_main, NULL) == 0, "thread");
	d_run();
	atomic_store(&stop, true);
	kick_p();
	pthread_join(pt, NULL);
	printf("control_wait: %d rooms, %d in flight: P saw %d changes, D %d; lost wakes P %d, "
	       "D %d; P failed %d\n",
	       nrooms, inflight, atomic_load(&p_changes), atomic_load(&d_changes),
	       atomic_load(&p_lost), atomic_load(&d_lost), atomic_load(&p_failed));
	TU_CHECK(atomic_load(&p_lost) == 0 && atomic_load(&d_lost) == 0, "a wake was lost");
	TU_CHECK(atomic_load(&p_failed) == 0, "a P room failed");
	/* Bootstrapping -> Bootstrapped is no change a poll sees for a room
	 * Bootstrapped at creation. */
	TU_CHECK(atomic_load(&d_changes) + atomic_load(&d_at_create) >= 2 * nrooms,
		 "D saw too few changes");
	/* Every room opened after P answered the first registration. */
	printf("control_wait: %d rooms Bootstrapped at creation\n", atomic_load(&d_at_create));
	TU_CHECK(nrooms <= inflight || atomic_load(&d_at_create) > 0,
		 "no room was Bootstrapped at creation");
	/* Final statuses leave from the engine's callback when nothing of
	 * their room is queued (prefill_outbox.c), else from the control
	 * thread: every room's reached D either way (above), and some went at
	 * once (they all may: none is required to). */
	uint64_t statuses = 0, at_once = 0;
	TU_OK(lc_prefill_counter(pf, "statuses", &statuses));
	TU_OK(lc_prefill_counter(pf, "statuses_at_once", &at_once));
	printf("control_wait: %llu statuses sent, %llu of them at once\n",
	       (unsigned long long)statuses, (unsigned long long)at_once);
	TU_CHECK(statuses >= (uint64_t)nrooms && at_once <= statuses, "status counts");
	TU_CHECK(at_once > 0, "no final status went at once");
	lc_decode_destroy(dec);
	lc_prefill_destroy(pf);
	lc_bootstrap_stop(bs);
	close(qfd);
	tu_pool_fini(&D);
	tu_pool_fini(&P);
	return 0;
}
