/* Rounds of rooms at an honest P (rounds.h). */
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

void adv_p_up(adv_p_t *p, const char *knobs, uint64_t (*seed)(int k, int page))
{
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &p->b));
	TU_OK(lc_bootstrap_addr(p->b, p->addr, sizeof p->addr));
	tu_pool_init(&p->s, "p0", knobs, LAYERS, PAGES, ITEM);
	for (int k = 0; k < NBUF; k++)
		for (int pg = 0; pg < PAGES; pg++)
			tu_fill((uint8_t *)p->s.bases[k] + (size_t)pg * ITEM, ITEM, seed(k, pg));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = p->s.layout,
				  .bootstrap = p->addr,
				  .name = "p0",
				  .world_size = 1,
				  .dp_size = 1};
	TU_OK(lc_prefill_create(p->s.ctx, &pp, &p->pf));
	TU_OK(lc_prefill_engine(p->pf, &p->eng));
	TU_OK(lc_prefill_endpoint(p->pf, p->ep, sizeof p->ep));
	say("addr %s %s", p->addr, p->ep);
}

void adv_p_down(adv_p_t *p)
{
	lc_prefill_destroy(p->pf);
	tu_pool_fini(&p->s);
	lc_bootstrap_stop(p->b);
}

uint64_t adv_room_of(uint64_t room0, int round, int i)
{
	return room0 + 10 * (uint64_t)round + (uint64_t)i;
}

static void p_forward(lc_engine_t *eng, lc_sender_t **snd, const bool *fwd, uint64_t room0,
		      int round)
{
	int64_t pages[NPAGES];
	for (int j = 0; j < NPAGES; j++)
		pages[j] = 1 + j;
	TU_OK(lc_engine_batch_begin(eng, 0));
	for (int i = 0; i < ROOMS; i++) {
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = adv_room_of(room0, round, i),
				 .pages = pages,
				 .page_count = NPAGES,
				 .is_last = 1};
		if (fwd[i])
			lc_engine_chunk_add(eng, &ch);
	}
	TU_OK(lc_engine_batch_end(eng));
	for (int l = 0; l < LAYERS; l++) {
		usleep(2000);
		TU_OK(lc_engine_record_cache(eng));
	}
	TU_OK(lc_engine_record_aux(eng));
	for (int i = 0; i < ROOMS; i++) {
		uint8_t meta[META_LEN];
		tu_fill(meta, sizeof meta, adv_room_of(room0, round, i));
		if (fwd[i])
			lc_sender_metadata_set(snd[i], meta, sizeof meta);
	}
}

void adv_p_round(lc_prefill_t *pf, lc_engine_t *eng, uint64_t room0, int round, int go_fd,
		 int boot_ms)
{
	lc_sender_t *snd[ROOMS];
	bool fwd[ROOMS];
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_sender_create(pf, adv_room_of(room0, round, i), &snd[i]));
	uint64_t dl = adv_now_ms() + (uint64_t)boot_ms;
	for (int i = 0; i < ROOMS; i++) {
		int st;
		while ((st = lc_sender_poll(snd[i], NULL)) == LC_ROOM_BOOTSTRAPPING &&
		       adv_now_ms() < dl)
			usleep(2000);
		fwd[i] = st != LC_ROOM_BOOTSTRAPPING && st != LC_ROOM_FAILED;
	}
	say("p-boot %d", round);
	adv_wait_byte(go_fd);
	p_forward(eng, snd, fwd, room0, round);
	dl = adv_now_ms() + 8000;
	for (int i = 0; i < ROOMS; i++) {
		lc_room_info_t info = {.size = sizeof info};
		int st = lc_sender_poll(snd[i], &info);
		while (fwd[i] && st != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
		       adv_now_ms() < dl) {
			usleep(2000);
			st = lc_sender_poll(snd[i], &info);
		}
		fprintf(stderr, "P round %d room %llu: %s (%s) %s\n", round,
			(unsigned long long)adv_room_of(room0, round, i), lc_room_status_name(st),
			lc_fail_reason_name(info.fail_reason), info.reason);
		lc_sender_destroy(snd[i]);
	}
	say("p-round %d", round);
}
