/*
 * Rounds of rooms at an honest P (rounds.c), for the cases that run the
 * same P through several rounds while the attacker acts between them
 * (adversarial_lockout.c, adversarial_sessions.c): round r's room i is
 * adv_room_of(room0, r, i); P writes NPAGES pages of LAYERS layers per room
 * (rooms.h's geometry), pages 1..NPAGES, with metadata tu_fill(room id).
 */
#ifndef LC_TESTS_ADVERSARIAL_ROUNDS_H
#define LC_TESTS_ADVERSARIAL_ROUNDS_H

#include <stdint.h>

#include "layercake.h"
#include "testutil.h"

/* An honest P: a bootstrap server, pool "p0" (LAYERS layers, PAGES pages
 * of ITEM bytes, knobs as tu_knobs takes them) with page p of buffer k
 * filled from seed(k, p), and one P rank on it; says "addr ADDR EP". */
typedef struct adv_p {
	tu_pool_t s;
	lc_bootstrap_t *b;
	lc_prefill_t *pf;
	lc_engine_t *eng;
	char addr[64], ep[300];
} adv_p_t;
void adv_p_up(adv_p_t *p, const char *knobs, uint64_t (*seed)(int k, int page));
void adv_p_down(adv_p_t *p);

uint64_t adv_room_of(uint64_t room0, int round, int i);
/* One round at P: senders for its rooms, bootstrapped within boot_ms; says
 * "p-boot R", waits for a byte on go_fd, writes the bootstrapped rooms,
 * waits (8 s at most) for each to end, logs it, says "p-round R". */
void adv_p_round(lc_prefill_t *pf, lc_engine_t *eng, uint64_t room0, int round, int go_fd,
		 int boot_ms);

#endif
