/* A P and D scripted step by step (admission.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admission.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

void adm_pair(uint8_t *pair, size_t *len, uint64_t seed)
{
	*len = 16 + seed % 21; /* 16..36 bytes: a uuid4's raw bytes to its text */
	tu_fill(pair, *len, 0x9a17 + seed);
}

/* ==== P ==== */

static int create_sender(lc_prefill_t *pf, const adm_p_arg_t *a, lc_sender_t **s)
{
#ifdef LC_PAIR_MAX
	lc_sender_params_t sp = {.size = sizeof sp,
				 .room = ADM_ROOM,
				 .pair = a->pair_len ? a->pair : NULL,
				 .pair_len = a->pair_len};
	return lc_sender_create_ex(pf, &sp, s);
#else
	TU_CHECK(!a->pair_len, "a pairing value, and a library without them");
	return lc_sender_create(pf, ADM_ROOM, s);
#endif
}

static uint64_t ctx_counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	lc_ctx_counter_by_name(ctx, name, &v); /* -ENOENT: a library without it */
	return v;
}

/* The room's chunk: P pages 1..NPAGES after D's prefix, as the honest P
 * of rooms.c, into a batch whose first `layers` layers are recorded. */
static void p_batch(lc_engine_t *eng, lc_sender_t *s, int layers)
{
	int64_t pages[NPAGES];
	uint64_t prefix = 0;
	for (int j = 0; j < NPAGES; j++)
		pages[j] = 1 + j;
	if (lc_sender_prefix_len(s, &prefix))
		prefix = 0;
	size_t skip = (size_t)(prefix / ADM_PAGE_TOKENS);
	skip = skip > NPAGES ? NPAGES : skip;
	lc_chunk_t ch = {.size = sizeof ch,
			 .room = ADM_ROOM,
			 .pages = pages + skip,
			 .page_count = NPAGES - skip,
			 .is_last = 1};
	TU_OK(lc_engine_batch_begin(eng, 0));
	int rc = lc_engine_chunk_add(eng, &ch);
	if (rc)
		fprintf(stderr, "P: chunk of room %d: %s\n", ADM_ROOM, lc_strerror(rc));
	TU_OK(lc_engine_batch_end(eng));
	for (int l = 0; l < layers; l++) {
		usleep(2000);
		TU_OK(lc_engine_record_cache(eng));
	}
}

static void p_rest(lc_engine_t *eng, lc_sender_t *s, int from)
{
	for (int l = from; l < LAYERS; l++) {
		usleep(2000);
		TU_OK(lc_engine_record_cache(eng));
	}
	TU_OK(lc_engine_record_aux(eng));
	if (s) {
		uint8_t meta[META_LEN];
		tu_fill(meta, sizeof meta, ADM_ROOM);
		lc_sender_metadata_set(s, meta, sizeof meta);
	}
}

int adm_p_child(void *arg, int go_fd)
{
	adm_p_arg_t *a = arg;
	adv_p_t P;
	lc_sender_t *s = NULL;
	int half = -1; /* layers recorded of an open forward */
	adv_p_up(&P, a->knobs, adv_seed_of);
	for (char c; (c = adv_wait_byte(go_fd)) != 'q';) {
		lc_room_info_t info = {.size = sizeof info};
		int st;
		uint64_t dl;
		switch (c) {
		case 's':
			say("p-sender %d", create_sender(P.pf, a, &s));
			break;
		case 'b':
			dl = adv_now_ms() + 10000;
			while ((st = lc_sender_poll(s, NULL)) == LC_ROOM_BOOTSTRAPPING &&
			       adv_now_ms() < dl)
				usleep(1000);
			uint64_t prefix;
			say("p-boot %d %lld", st,
			    lc_sender_prefix_len(s, &prefix) ? -1ll : (long long)prefix);
			break;
		case 'f':
		case 'h':
			p_batch(P.eng, s, c == 'h' ? LAYERS / 2 : 0);
			if (c == 'h') {
				half = LAYERS / 2;
				say("p-half");
				break;
			}
			p_rest(P.eng, s, 0);
			dl = adv_now_ms() + 10000;
			while ((st = lc_sender_poll(s, &info)) != LC_ROOM_SUCCESS &&
			       st != LC_ROOM_FAILED && adv_now_ms() < dl)
				usleep(1000);
			say("p-final %d %llu %s", st, (unsigned long long)adv_now_ms(),
			    info.reason);
			break;
		case 'x':
			st = lc_sender_cancel(s, "the request was aborted at P");
			say("p-cancel %d %llu", st, (unsigned long long)adv_now_ms());
			break;
		case 'r':
			say("p-poll %d", lc_sender_poll(s, NULL));
			break;
		case 'd':
			lc_sender_destroy(s);
			s = NULL;
			say("p-destroyed %llu", (unsigned long long)adv_now_ms());
			break;
		case 'c':
			say("p-counters pair %llu claimed %llu ended %llu parked %llu noroom %llu",
			    (unsigned long long)ctx_counter(P.s.ctx, "infos_refused_pair"),
			    (unsigned long long)ctx_counter(P.s.ctx, "infos_refused_claimed"),
			    (unsigned long long)ctx_counter(P.s.ctx, "infos_refused_ended"),
			    (unsigned long long)ctx_counter(P.s.ctx, "infos_parked"),
			    (unsigned long long)ctx_counter(P.s.ctx, "infos_refused_no_room"));
			break;
		default:
			fprintf(stderr, "P: unknown command %c\n", c);
			return 2;
		}
	}
	if (half >= 0) /* the forward's remaining steps, whatever the room became */
		p_rest(P.eng, NULL, half);
	lc_sender_destroy(s);
	adv_p_down(&P);
	return 0;
}

/* ==== D ==== */

static int create_receiver(lc_decode_t *d, const adm_d_arg_t *a, lc_receiver_t **r)
{
#ifdef LC_PAIR_MAX
	lc_receiver_params_t rp = {.size = sizeof rp,
				   .bootstrap = a->bs_addr,
				   .room = ADM_ROOM,
				   .pair = a->pair_len ? a->pair : NULL,
				   .pair_len = a->pair_len};
	return lc_receiver_create_ex(d, &rp, r);
#else
	TU_CHECK(!a->pair_len, "a pairing value, and a library without them");
	return lc_receiver_create(d, a->bs_addr, ADM_ROOM, r);
#endif
}

/* Pages of the room that differ from P's (prefix 0: D page j holds P page
 * 1 + j), and canaries written outside. */
static int bad_pages(const tu_pool_t *s)
{
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++) {
			const uint8_t *pg = (const uint8_t *)s->bases[b] + adv_d_page(0, j) * ITEM;
			bad += tu_verify(pg, ITEM, adv_seed_of(b, 1 + j)) >= 0;
		}
	return bad;
}

int adm_d_child(void *arg, int go_fd)
{
	adm_d_arg_t *a = arg;
	tu_pool_t s;
	lc_decode_t *d;
	lc_receiver_t *r;
	tu_pool_init(&s, "d", a->knobs, LAYERS, PAGES, ITEM);
	memset(s.mem, CANARY, s.len);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0"};
	TU_OK(lc_decode_create(s.ctx, &dp, &d));
	say("d-ready");
	if (adv_wait_byte(go_fd) == 'q')
		goto out;
	TU_OK(create_receiver(d, a, &r));
	int st;
	uint64_t dl = adv_now_ms() + 10000;
	while ((st = lc_receiver_poll(r, NULL)) == LC_ROOM_BOOTSTRAPPING && adv_now_ms() < dl)
		usleep(1000);
	if (st == LC_ROOM_BOOTSTRAPPED) {
		int64_t pages[NPAGES];
		for (int j = 0; j < NPAGES; j++)
			pages[j] = adv_d_page(0, j);
		lc_receiver_pages_t pg = {.size = sizeof pg,
					  .pages = pages,
					  .page_count = NPAGES,
					  .prefix_len = a->prefix,
					  .aux_index = 0};
		TU_OK(lc_receiver_send(r, &pg));
	}
	say("d-sent %d %llu", st, (unsigned long long)adv_now_ms());
	lc_room_info_t info = {.size = sizeof info};
	dl = adv_now_ms() + (uint64_t)(a->wait_ms ? a->wait_ms : 20000);
	while ((st = lc_receiver_poll(r, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	uint64_t t = adv_now_ms();
	say("d-done %d %d %llu %d %s", st, info.fail_reason, (unsigned long long)t,
	    st == LC_ROOM_SUCCESS ? bad_pages(&s) : 0, info.reason);
	adv_wait_byte(go_fd);
	lc_receiver_destroy(r);
out:
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return 0;
}

/* ==== the parent ==== */

void adm_p_start(adv_proc_t *p, adm_p_arg_t *a, char *addr)
{
	char line[512], ep[300];
	adv_spawn(p, adm_p_child, a);
	TU_CHECK(adv_wait_line(p, "addr ", 15000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", addr, ep) == 2,
		 "P did not start");
}

void adm_p_do(adv_proc_t *p, char c, const char *prefix, char *line, size_t cap)
{
	adv_send_byte(p, c);
	TU_CHECK(adv_wait_line(p, prefix, 20000, line, cap), "P said no '%s' after '%c'", prefix,
		 c);
	fprintf(stderr, "%s\n", line);
}

void adm_d_start(adv_proc_t *d, adm_d_arg_t *a)
{
	adv_spawn(d, adm_d_child, a);
	TU_CHECK(adv_wait_line(d, "d-ready", 15000, NULL, 0), "D did not start");
}

uint64_t adm_d_send(adv_proc_t *d)
{
	char line[512];
	int st;
	unsigned long long t;
	adv_go(d);
	TU_CHECK(adv_wait_line(d, "d-sent ", 20000, line, sizeof line) &&
			 sscanf(line, "d-sent %d %llu", &st, &t) == 2,
		 "D never sent");
	fprintf(stderr, "%s\n", line);
	return t;
}

bool adm_d_done(adv_proc_t *d, int timeout_ms, adm_done_t *out)
{
	char line[512];
	unsigned long long t;
	int n = 0;
	memset(out, 0, sizeof *out);
	out->status = -1;
	if (!adv_wait_line(d, "d-done ", timeout_ms, line, sizeof line))
		return false;
	fprintf(stderr, "%s\n", line);
	if (sscanf(line, "d-done %d %d %llu %d %n", &out->status, &out->fail_reason, &t, &out->bad,
		   &n) < 4)
		return false;
	out->t_ms = t;
	snprintf(out->reason, sizeof out->reason, "%s", n ? line + n : "");
	return true;
}

void adm_quit(adv_proc_t *p)
{
	char q = 'q';
	ssize_t n = write(p->go_fd, &q, 1); /* EPIPE: it has gone already */
	(void)n;
}

uint64_t adm_counter(const char *line, const char *name)
{
	char key[64];
	snprintf(key, sizeof key, " %s ", name);
	const char *at = strstr(line, key);
	return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}
