/*
 * The honest P and D that the adversarial cases attack around: ROOMS rooms
 * of NPAGES pages over LAYERS layers (K and V buffers), P's pages filled from
 * adv_seed_of, D's pages at adv_d_page and checked byte by byte, canaries
 * everywhere else.
 */
#ifndef LC_TESTS_ADVERSARIAL_ROOMS_H
#define LC_TESTS_ADVERSARIAL_ROOMS_H

#include <stdint.h>

#include "layercake.h"

#define LAYERS 4
#define NBUF (2 * LAYERS)
#define PAGES 64
#define ITEM 4096
#define NPAGES 8 /* pages per room */
#define ROOMS 3
#define ROOM0 500
#define CANARY 0x5a
#define META_LEN 64

uint64_t adv_seed_of(int b, int p);
/* Room i's page j: P page 1 + j, D page PAGES - 1 - (i * NPAGES + j). */
int64_t adv_d_page(int i, int j);
/* P: one forward of every room's layers, recorded layer by layer. */
int adv_p_forward(lc_engine_t *eng, lc_sender_t **snd);

/* D's bootstrap address and listener URL. */
typedef struct adv_d_arg {
	const char *bs_addr, *url;
} adv_d_arg_t;
/* A real D process: its rooms against the P at bs_addr, every page checked;
 * 0 when all succeed byte-exact. Says "d-url URL" and "d-ep EP" (its data
 * listener and its inbox) once up, waits for a byte, says "d-done
 * FAILURES CONNS_EVICTED_PENDING INBOX_CONNS_EVICTED", and holds its
 * connections until the next byte (adv_reap's EOF). adv_d_child is its
 * adv_child_fn. */
int adv_d_main(const char *bs_addr, const char *listen_url, int go_fd);
int adv_d_child(void *arg, int go_fd);

#endif
