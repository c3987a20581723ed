/* The honest P and D of the adversarial cases (rooms.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "pd/decode_int.h"
#include "rooms.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

uint64_t adv_seed_of(int b, int p)
{
	return 7000 + (uint64_t)b * PAGES + (uint64_t)p;
}

/* Room i's page j: P page 1 + j, D page PAGES - 1 - (i * NPAGES + j). */
int64_t adv_d_page(int i, int j)
{
	return PAGES - 1 - (i * NPAGES + j);
}

int adv_p_forward(lc_engine_t *eng, lc_sender_t **snd)
{
	int64_t pages[NPAGES];
	for (int j = 0; j < NPAGES; j++)
		pages[j] = 1 + j;
	TU_OK(lc_engine_batch_begin(eng, 0));
	for (int i = 0; i < ROOMS; i++) {
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = ROOM0 + (uint64_t)i,
				 .pages = pages,
				 .page_count = NPAGES,
				 .is_last = 1};
		if (lc_sender_poll(snd[i], NULL) != LC_ROOM_FAILED)
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
		tu_fill(meta, sizeof meta, ROOM0 + (uint64_t)i);
		lc_sender_metadata_set(snd[i], meta, sizeof meta);
	}
	int failures = 0;
	uint64_t dl = adv_now_ms() + 15000;
	for (int i = 0; i < ROOMS; i++) {
		lc_room_info_t info = {.size = sizeof info};
		int st;
		while ((st = lc_sender_poll(snd[i], &info)) != LC_ROOM_SUCCESS &&
		       st != LC_ROOM_FAILED && adv_now_ms() < dl)
			usleep(2000);
		fprintf(stderr, "P room %d: %s %s\n", ROOM0 + i, lc_room_status_name(st),
			info.reason);
		failures += st != LC_ROOM_SUCCESS;
	}
	return failures;
}

static int d_check_room(lc_receiver_t *rcv, const tu_pool_t *s, int i)
{
	lc_room_info_t info = {.size = sizeof info};
	int st;
	uint64_t dl = adv_now_ms() + 15000;
	while ((st = lc_receiver_poll(rcv, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	fprintf(stderr, "D room %d: %s (%s) %s\n", ROOM0 + i, lc_room_status_name(st),
		lc_fail_reason_name(info.fail_reason), info.reason);
	if (st != LC_ROOM_SUCCESS)
		return 1;
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++) {
			const uint8_t *pg = (const uint8_t *)s->bases[b] + adv_d_page(i, j) * ITEM;
			bad += tu_verify(pg, ITEM, adv_seed_of(b, 1 + j)) >= 0;
		}
	if (bad)
		fprintf(stderr, "D room %d: %d pages differ from P's\n", ROOM0 + i, bad);
	return bad ? 1 : 0;
}

int adv_d_main(const char *bs_addr, const char *listen_url, int go_fd)
{
	tu_pool_t s;
	lc_decode_t *d;
	lc_receiver_t *rcv[ROOMS];
	tu_pool_init(&s, "d0", NULL, LAYERS, PAGES, ITEM);
	memset(s.mem, CANARY, s.len);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = listen_url};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	char ep[300];
	TU_CHECK(lc_decode_endpoint(d, ep, sizeof ep) > 0, "lc_decode_endpoint");
	say("d-url %s", d->data_url);
	say("d-ep %s", ep);
	adv_wait_byte(go_fd);
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_receiver_create(d, bs_addr, ROOM0 + (uint64_t)i, &rcv[i]));
	bool sent[ROOMS] = {0};
	uint64_t dl = adv_now_ms() + 15000;
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
	say("sent");
	int failures = 0;
	for (int i = 0; i < ROOMS; i++)
		failures += d_check_room(rcv[i], &s, i);
	uint64_t evicted = 0, inbox_evicted = 0;
	lc_ctx_counter_by_name(s.ctx, "conns_evicted_pending", &evicted);
	lc_decode_counter(d, "inbox_conns_evicted", &inbox_evicted);
	say("d-done %d %llu %llu", failures, (unsigned long long)evicted,
	    (unsigned long long)inbox_evicted);
	adv_wait_byte(go_fd); /* its connections held until the parent reaps it */
	for (int i = 0; i < ROOMS; i++)
		lc_receiver_destroy(rcv[i]);
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return failures ? 1 : 0;
}

/* D's bootstrap address and listener URL. */

int adv_d_child(void *arg, int go_fd)
{
	const adv_d_arg_t *a = arg;
	return adv_d_main(a->bs_addr, a->url, go_fd);
}
