/*
 * Adversarial tests of D's byte accounting (issue 13): a real P process
 * (lc_prefill over a real bootstrap server, ZeroMQ and tcp://) that lies.
 * It tells D "Success" with a STATUS sent over a real ZeroMQ socket to D's
 * control endpoint, encoded by the real codec, without having sent every
 * byte D granted. D must count what landed in its own memory and refuse:
 * the room Fails with "peer claimed success: N of M bytes landed", and D's
 * memory holds exactly what was sent (canaries elsewhere untouched).
 *
 * Usage: adversarial_accounting <case>; exit 0 on success, 77 when a
 * facility is missing here. Cases:
 *   honest         1 P rank sends everything: Success, every byte right
 *   lie_nothing    1 P rank sends nothing, claims Success
 *   lie_partial    1 P rank sends 2 of 4 layers, claims Success
 *   claim_early    a Success arrives before the bytes, which all follow
 *                  within landed_wait_ms: Success, every byte right
 *   honest_fan_in  2 P ranks (heads split over P's TP) -> 1 D: Success
 *   lie_fan_in     the same, rank 0 honest, rank 1 claims Success having
 *                  sent nothing
 *   lie_twice      1 P rank writes the first half of the room twice (as
 *                  many bytes as the whole room) and its engine says
 *                  Success: D counts each byte once and fails the room
 *   forged_layers  1 P rank sends 2 of 4 layers, then a forged LAYERS
 *                  (raw ZeroMQ, harness.c) says all 4 landed: D's
 *                  layers_ready stays at its own count, 2; D cancels
 *   intervals_cap  2 P ranks, rank 1 silent, D's grant_intervals_max 1:
 *                  rank 0's half-pages leave more gaps than D keeps, so D
 *                  stops counting and fails the room (whatever landed
 *                  before the revoke is not checked; canaries are)
 * With the room checksum on (room_checksum=1, docs/security.md):
 *   checksum_honest         1 P rank, P and D sum: Success
 *   checksum_honest_fan_in  2 P ranks: their sums add up to D's
 *   checksum_forged         every byte sent, then a Success whose sum
 *                           disagrees with D's memory: Failed
 *   checksum_missing        the sum on at D only: Failed, and says so
 *
 * Every case also watches lc_receiver_layers_ready while the room runs:
 * it never falls, and its highest value is D's own count of complete
 * layers (all when honest, the fewest any P rank sent when lying, 0 when
 * half of every layer is missing); the honest cases pace P's layers so
 * that D sees it rise through the layers between.
 *
 * The model: MHA, LAYERS layers (2 buffers each), PAGES pages of ITEM
 * bytes. Global page g holds tu_fill(seed(b, g)); P rank r of w holds
 * bytes [r * ITEM / w, (r + 1) * ITEM / w) of it. P sends global pages
 * 1..ROOM_PAGES; D receives index j in its page PAGES - 1 - j.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "control/codec.h"
#include "pd/prefill_int.h"
#include "harness.h"
#include "testutil.h"

#define LAYERS 4
#define NBUF (2 * LAYERS)
#define PAGES 16
#define ROOM_PAGES 8
#define ITEM 4096
#define CANARY 0x5a
#define ROOM 7
#define META_LEN 256
#define MAX_P 2

typedef struct cfg {
	int p_world;            /* P ranks, one TP group (heads split when 2) */
	int send_layers[MAX_P]; /* layers each P rank really sends */
	bool lie[MAX_P];        /* the rank claims Success itself */
	bool claim_first;       /* the claim comes before any byte is sent */
	bool twice;             /* the first half of the room is sent twice */
	bool forge_layers;      /* a forged LAYERS says every layer landed */
	bool cap;               /* D's grant_intervals_max is 1 */
	int layer_gap_us;       /* P's pause between layers */
	int d_expect;           /* LC_ROOM_SUCCESS or LC_ROOM_FAILED */
	int sum;                /* room_checksum: 0 off, 1 at P and D, 2 at D only */
	bool forge_sum;         /* the claimed Success carries a wrong sum */
	const char *sum_reason; /* D's expected failure, when the sum decides */
} cfg_t;

static cfg_t C;
static int status_fd = -1;
static lc_prefill_t *liars[MAX_P]; /* the P ranks, for the session secret */
static int forged_fd = -1;         /* P -> D: the forged LAYERS went out */

#define say(...) tu_say(status_fd, __VA_ARGS__)

static void global_page(int b, int g, uint8_t *out)
{
	tu_fill(out, ITEM, 1000 + (uint64_t)b * PAGES + (uint64_t)g);
}

static void metadata_of(uint8_t *out)
{
	tu_fill(out, META_LEN, ROOM * 31 + 7);
}

static uint64_t p_item(void)
{
	return ITEM / (uint64_t)C.p_world;
}

/* ==== P ==== */

/* The lie: a STATUS Success for the room from P rank `rank`, over ZeroMQ to
 * D's control endpoint, with the metadata a real P would send and the
 * session secret that rank holds (a lying P is one D registered with). */
static void claim_success(const char *d_ep, int rank)
{
	uint8_t meta[META_LEN];
	metadata_of(meta);
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	lc_prefill_t *pf = liars[rank];
	pthread_mutex_lock(&pf->lock);
	TU_CHECK(pf->nsessions == 1, "P rank %d has %zu sessions", rank, pf->nsessions);
	memcpy(m.secret, pf->sessions[0]->secret, LC__MSG_SECRET_LEN);
	pthread_mutex_unlock(&pf->lock);
	m.type = LC__MSG_STATUS;
	m.status.room = ROOM;
	m.status.p_rank = (uint32_t)rank;
	m.status.status = LC_ROOM_SUCCESS;
	m.status.metadata = meta;
	m.status.metadata_len = META_LEN;
	if (C.forge_sum) {
		m.status.flags = LC__STATUS_HAS_CHECKSUM;
		m.status.checksum = 12345;
	}
	uint8_t *buf;
	size_t len;
	TU_OK(lc__msg_encode(&m, &buf, &len));
	void *zc = zmq_ctx_new();
	void *tx = zmq_socket(zc, ZMQ_PUSH);
	int linger = 2000;
	zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
	TU_CHECK(zmq_connect(tx, d_ep) == 0, "connect %s", d_ep);
	TU_CHECK(zmq_send(tx, buf, len, 0) == (int)len, "send");
	zmq_close(tx);
	zmq_ctx_term(zc);
	free(buf);
	fprintf(stderr, "P rank %d: claimed Success to %s\n", rank, d_ep);
}

/* What it sent has landed at D (P's own view): then a LAYERS saying every
 * layer did, raw over ZeroMQ, and D is told it went out. */
static void forge_layers(lc_sender_t *s, const char *d_ep, int rank)
{
	lc_room_info_t info = {.size = sizeof info};
	uint64_t dl = tu_now_ms() + 10000;
	while (lc_sender_poll(s, &info) != LC_ROOM_FAILED &&
	       info.layers_landed < (uint32_t)C.send_layers[rank] && tu_now_ms() < dl)
		usleep(2000);
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_LAYERS;
	m.layers.room = ROOM;
	m.layers.p_rank = (uint32_t)rank;
	m.layers.layers = LAYERS;
	void *zc = zmq_ctx_new();
	void *tx = adv_push_to(zc, d_ep);
	adv_send_msg(tx, &m, 0);
	int linger = 2000;
	zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
	zmq_close(tx);
	zmq_ctx_term(zc);
	fprintf(stderr, "P rank %d: forged LAYERS %d to %s\n", rank, LAYERS, d_ep);
	TU_CHECK(write(forged_fd, "f", 1) == 1, "forged pipe");
}

static int wait_final(lc_sender_t *s, int ms, lc_room_info_t *info)
{
	int st;
	uint64_t dl = tu_now_ms() + (uint64_t)ms;
	while ((st = lc_sender_poll(s, info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       tu_now_ms() < dl)
		usleep(2000);
	return st;
}

/* Send layers [0, n) of the room's pages on every rank that sends any. */
static void p_forward(lc_engine_t **eng)
{
	int64_t pages[ROOM_PAGES];
	for (int j = 0; j < ROOM_PAGES; j++)
		pages[j] = j + 1;
	for (int r = 0; r < C.p_world; r++) {
		if (!C.send_layers[r])
			continue;
		TU_OK(lc_engine_batch_begin(eng[r], 0));
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = ROOM,
				 .pages = pages,
				 .page_count = ROOM_PAGES,
				 .is_last = true};
		if (C.twice) {
			/* The first half of D's pages, twice: the room's size in
			 * bytes, half of its pages. */
			ch.page_count = ROOM_PAGES / 2;
			ch.is_last = false;
			TU_OK(lc_engine_chunk_add(eng[r], &ch));
			ch.is_last = true;
		}
		TU_OK(lc_engine_chunk_add(eng[r], &ch));
		TU_OK(lc_engine_batch_end(eng[r]));
	}
	for (int l = 0; l < LAYERS; l++) {
		usleep((useconds_t)C.layer_gap_us);
		for (int r = 0; r < C.p_world; r++)
			if (l < C.send_layers[r])
				TU_OK(lc_engine_record_cache(eng[r]));
	}
	for (int r = 0; r < C.p_world; r++)
		if (C.send_layers[r] == LAYERS)
			TU_OK(lc_engine_record_aux(eng[r]));
}

/* The room on every rank: honest ranks finish it, lying ranks claim it. */
static int p_room(lc_engine_t **eng, lc_sender_t **snd, const char *d_ep)
{
	int failures = 0;
	uint8_t meta[META_LEN];
	metadata_of(meta);
	if (C.claim_first)
		claim_success(d_ep, 0);
	p_forward(eng);
	for (int r = 0; r < C.p_world; r++) /* a liar's own P never ends the room */
		if (C.send_layers[r] == LAYERS && !C.lie[r])
			lc_sender_metadata_set(snd[r], meta, sizeof meta);
	for (int r = 0; r < C.p_world; r++) {
		lc_room_info_t info = {.size = sizeof info};
		if (C.forge_layers) {
			forge_layers(snd[r], d_ep, r);
			continue;
		}
		if (C.lie[r]) {
			/* What it sent has landed at D: then the lie. */
			uint64_t dl = tu_now_ms() + 10000;
			while (lc_sender_poll(snd[r], &info) != LC_ROOM_FAILED &&
			       info.layers_landed < (uint32_t)C.send_layers[r] && tu_now_ms() < dl)
				usleep(2000);
			claim_success(d_ep, r);
			continue;
		}
		int st = wait_final(snd[r], 20000, &info);
		fprintf(stderr, "P rank %d: %s (%s) %s\n", r, lc_room_status_name(st),
			lc_fail_reason_name(info.fail_reason), info.reason);
		if (C.d_expect == LC_ROOM_SUCCESS && st != LC_ROOM_SUCCESS)
			failures++;
	}
	return failures;
}

static int p_main(int addr_fd, int ep_fd, int quit_fd)
{
	tu_pool_t side[MAX_P];
	lc_prefill_t *pf[MAX_P];
	lc_engine_t *eng[MAX_P];
	lc_sender_t *snd[MAX_P];
	lc_bootstrap_t *b;
	char addr[64], d_ep[256];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	if (C.sum == 2)
		unsetenv("LAYERCAKE_ROOM_CHECKSUM");
	TU_OK(lc_bootstrap_start(&bp, &b));
	lc_bootstrap_addr(b, addr, sizeof addr);
	uint64_t item = p_item();
	for (int r = 0; r < C.p_world; r++) {
		char name[16];
		snprintf(name, sizeof name, "p%d", r);
		tu_pool_init(&side[r], name, NULL, LAYERS, PAGES, item);
		uint8_t g[ITEM];
		for (int bb = 0; bb < NBUF; bb++)
			for (int p = 0; p < PAGES; p++) {
				global_page(bb, p, g);
				memcpy((uint8_t *)side[r].bases[bb] + (size_t)p * item,
				       g + (size_t)r * item, item);
			}
		lc_prefill_params_t pp = {.size = sizeof pp,
					  .layout = side[r].layout,
					  .bootstrap = addr,
					  .name = name,
					  .world_size = C.p_world,
					  .dp_size = 1,
					  .engine_rank = r,
					  .metrics_server = b};
		TU_OK(lc_prefill_create(side[r].ctx, &pp, &pf[r]));
		TU_OK(lc_prefill_engine(pf[r], &eng[r]));
		TU_OK(lc_sender_create(pf[r], ROOM, &snd[r]));
		liars[r] = pf[r];
	}
	TU_CHECK(write(addr_fd, addr, sizeof addr) == (ssize_t)sizeof addr, "addr");
	close(addr_fd);
	TU_CHECK(read(ep_fd, d_ep, sizeof d_ep) == (ssize_t)sizeof d_ep, "D's endpoint");
	/* D has granted its pages once every rank's room is Bootstrapped. */
	uint64_t dl = tu_now_ms() + 20000;
	for (int r = 0; r < C.p_world; r++)
		while (lc_sender_poll(snd[r], NULL) == LC_ROOM_BOOTSTRAPPING && tu_now_ms() < dl)
			usleep(2000);
	int failures = p_room(eng, snd, d_ep);
	char c;
	if (read(quit_fd, &c, 1) < 0)
		failures++;
	for (int r = 0; r < C.p_world; r++) {
		lc_sender_destroy(snd[r]);
		lc_prefill_destroy(pf[r]);
		tu_pool_fini(&side[r]);
	}
	lc_bootstrap_stop(b);
	return failures ? 1 : 0;
}

/* ==== D ==== */

/* The bytes of granted index j (D page PAGES - 1 - j) of buffer b that P
 * really sent: P rank r's slice when layer(b) < send_layers[r], and only
 * the first half of the pages when it sent that half twice. */
static uint8_t expected(int b, int j, size_t x, const uint8_t *g)
{
	int rank = (int)(x / p_item());
	if (C.twice && j >= ROOM_PAGES / 2)
		return CANARY;
	return b % LAYERS < C.send_layers[rank] ? g[x] : CANARY;
}

/* The granted bytes that landed: each counted once. */
static uint64_t sent_bytes(void)
{
	uint64_t n = 0, pages = C.twice ? ROOM_PAGES / 2 : ROOM_PAGES;
	for (int r = 0; r < C.p_world; r++)
		n += (uint64_t)C.send_layers[r] * 2 * pages * p_item();
	return n;
}

/* Bytes that landed on bytes already landed. */
static uint64_t twice_bytes(void)
{
	return C.twice ? sent_bytes() : 0;
}

/* The highest layers_ready D may show: the leading layers every rank sent
 * in full. */
static int own_layers(void)
{
	int n = LAYERS;
	for (int r = 0; r < C.p_world; r++)
		n = C.send_layers[r] < n ? C.send_layers[r] : n;
	return C.twice ? 0 : n;
}

/* D's memory holds exactly what P sent, and canaries everywhere else. */
static int d_verify(const tu_pool_t *s)
{
	int bad = 0;
	uint8_t g[ITEM];
	for (int b = 0; b < NBUF; b++)
		for (int q = 0; q < PAGES; q++) {
			const uint8_t *pg = (const uint8_t *)s->bases[b] + (size_t)q * ITEM;
			int j = PAGES - 1 - q;
			bool granted = j < ROOM_PAGES;
			if (granted && C.cap)
				continue; /* landed up to the revoke, or not */
			if (granted)
				global_page(b, j + 1, g);
			for (size_t x = 0; x < ITEM; x++) {
				uint8_t want = granted ? expected(b, j, x, g) : CANARY;
				if (pg[x] != want) {
					fprintf(stderr,
						"D: buffer %d page %d (%s) differs at %zu\n", b, q,
						granted ? "granted" : "canary", x);
					bad++;
					break;
				}
			}
		}
	return bad;
}

static int d_check_final(lc_ctx_t *ctx, lc_receiver_t *rcv, int st, const lc_room_info_t *info)
{
	int failures = 0;
	uint64_t short_landed = 0, over = 0;
	lc_ctx_counter_by_name(ctx, "rooms_short_landed", &short_landed);
	lc_ctx_counter_by_name(ctx, "bytes_landed_twice", &over);
	fprintf(stderr, "D: %s (%s) %s; rooms_short_landed %llu, bytes_landed_twice %llu\n",
		lc_room_status_name(st), lc_fail_reason_name(info->fail_reason), info->reason,
		(unsigned long long)short_landed, (unsigned long long)over);
	if (st != C.d_expect || over != twice_bytes())
		failures++;
	if (C.d_expect == LC_ROOM_FAILED && C.sum_reason) {
		uint64_t sum_failed = 0;
		lc_ctx_counter_by_name(ctx, "rooms_checksum_failed", &sum_failed);
		if (info->fail_reason != LC_FAIL_TRANSFER || !strstr(info->reason, C.sum_reason) ||
		    sum_failed != 1 || short_landed) {
			fprintf(stderr, "D: wrong failure (want \"%s\", rooms_checksum_failed 1)\n",
				C.sum_reason);
			failures++;
		}
	} else if (C.cap) {
		uint64_t capped = 0;
		lc_ctx_counter_by_name(ctx, "grant_intervals_capped", &capped);
		if (info->fail_reason != LC_FAIL_TRANSFER ||
		    !strstr(info->reason, "D stopped counting the room") ||
		    !strstr(info->reason, "grant_intervals_max") || capped != 1 || short_landed)
			failures++;
	} else if (C.d_expect == LC_ROOM_FAILED) {
		unsigned long long n = 0, m = 0;
		const char *at = strstr(info->reason, "peer claimed success: ");
		if (info->fail_reason != LC_FAIL_TRANSFER ||
		    !strstr(info->reason, "bytes landed") || !at ||
		    sscanf(at, "peer claimed success: %llu of %llu", &n, &m) != 2 ||
		    n != sent_bytes() || m != (unsigned long long)NBUF * ROOM_PAGES * ITEM ||
		    short_landed != 1) {
			fprintf(stderr, "D: wrong failure (want %llu of %llu bytes)\n",
				(unsigned long long)sent_bytes(),
				(unsigned long long)NBUF * ROOM_PAGES * ITEM);
			failures++;
		}
	} else {
		uint8_t meta[LC_METADATA_MAX], want[META_LEN];
		metadata_of(want);
		int n = lc_receiver_metadata(rcv, meta, sizeof meta);
		if (n != META_LEN || memcmp(meta, want, META_LEN) || short_landed ||
		    lc_receiver_layers_ready(rcv) != LAYERS)
			failures++;
	}
	return failures;
}

/* lc_receiver_layers_ready while the room runs. */
typedef struct layers_watch {
	int max, prev, between; /* between: values seen strictly inside (0, LAYERS) */
	bool fell;
} layers_watch_t;

static void watch_layers(lc_receiver_t *rcv, layers_watch_t *w)
{
	int l = lc_receiver_layers_ready(rcv);
	if (lc_receiver_poll(rcv, NULL) == LC_ROOM_FAILED)
		return; /* a failed room reads 0 */
	if (l < w->prev)
		w->fell = true;
	if (l > w->prev && l > 0 && l < LAYERS)
		w->between++;
	w->prev = l;
	w->max = l > w->max ? l : w->max;
}

static int check_watch(const layers_watch_t *w, int st)
{
	int want = st == LC_ROOM_SUCCESS ? LAYERS : own_layers();
	int max = w->max;
	if ((st == LC_ROOM_SUCCESS || C.sum_reason) && max < want)
		max = want; /* the last layer and the final status may land between two looks */
	fprintf(stderr, "D: layers_ready rose to %d (want %d), %d values between, %s\n", max, want,
		w->between, w->fell ? "fell" : "never fell");
	bool paced = C.layer_gap_us >= 20000 && st == LC_ROOM_SUCCESS;
	return max != want || w->fell || (paced && !w->between) ? 1 : 0;
}

/* The forged LAYERS: D's own count reaches what P sent, P's forgery
 * arrives, and layers_ready stays at D's count. */
static int d_forged(lc_decode_t *d, lc_receiver_t *rcv, layers_watch_t *w)
{
	uint64_t dl = tu_now_ms() + 20000, ups = 0;
	while (w->max < own_layers() && tu_now_ms() < dl) {
		watch_layers(rcv, w);
		usleep(1000);
	}
	char c = 0;
	struct timeval tv = {20, 0};
	fd_set fds;
	FD_ZERO(&fds);
	FD_SET(forged_fd, &fds);
	if (select(forged_fd + 1, &fds, NULL, NULL, &tv) != 1 || read(forged_fd, &c, 1) != 1) {
		fprintf(stderr, "D: P never forged its LAYERS\n");
		return 1;
	}
	/* The forgery is on D's socket: give the control thread time, then
	 * look for a while. */
	for (int i = 0; i < 400; i++) {
		watch_layers(rcv, w);
		usleep(1000);
	}
	lc_room_info_t info = {.size = sizeof info};
	lc_receiver_poll(rcv, &info);
	lc_decode_counter(d, "layer_updates", &ups);
	fprintf(stderr,
		"D: after the forged LAYERS: layers_ready %d, layers_landed %u, "
		"layer_updates %llu\n",
		lc_receiver_layers_ready(rcv), info.layers_landed, (unsigned long long)ups);
	return lc_receiver_layers_ready(rcv) != own_layers() ||
			       info.layers_landed != (uint32_t)own_layers() ||
			       info.status != LC_ROOM_TRANSFERRING
		       ? 1
		       : 0;
}

static int d_main(const char *bs_addr)
{
	tu_pool_t s;
	lc_decode_t *d;
	lc_receiver_t *rcv;
	char ep[256] = {0};
	tu_pool_init(&s, "d0", NULL, LAYERS, PAGES, ITEM);
	memset(s.mem, CANARY, s.len);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .tp_size = 1,
				 .tp_rank = 0};
	if (C.cap)
		TU_OK(lc_ctx_config_set(s.ctx, "grant_intervals_max", "1"));
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	TU_OK(lc_decode_endpoint(d, ep, sizeof ep));
	say("ep %s", ep);
	TU_OK(lc_receiver_create(d, bs_addr, ROOM, &rcv));
	uint64_t dl = tu_now_ms() + 20000;
	int st;
	while ((st = lc_receiver_poll(rcv, NULL)) == LC_ROOM_BOOTSTRAPPING && tu_now_ms() < dl)
		usleep(1000);
	TU_CHECK(st == LC_ROOM_BOOTSTRAPPED, "not bootstrapped: %s", lc_room_status_name(st));
	int64_t pages[ROOM_PAGES];
	for (int j = 0; j < ROOM_PAGES; j++)
		pages[j] = PAGES - 1 - j;
	lc_receiver_pages_t pg = {
		.size = sizeof pg, .pages = pages, .page_count = ROOM_PAGES, .aux_index = 0};
	TU_OK(lc_receiver_send(rcv, &pg));
	lc_room_info_t info = {.size = sizeof info};
	int failures = 0;
	layers_watch_t w = {0};
	if (C.forge_layers) {
		failures += d_forged(d, rcv, &w);
		TU_OK(lc_receiver_cancel(rcv, "forged LAYERS seen"));
	}
	dl = tu_now_ms() + 20000;
	while ((st = lc_receiver_poll(rcv, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       tu_now_ms() < dl) {
		watch_layers(rcv, &w);
		usleep(1000);
	}
	failures += check_watch(&w, st);
	if (!C.forge_layers)
		failures += d_check_final(s.ctx, rcv, st, &info);
	/* Nothing lands after the final status either. */
	usleep(300 * 1000);
	failures += d_verify(&s);
	lc_receiver_destroy(rcv);
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return failures ? 1 : 0;
}

/* ==== the parent ==== */

static int reap(pid_t pid, int timeout_ms)
{
	uint64_t dl = tu_now_ms() + (uint64_t)timeout_ms;
	int st;
	while (tu_now_ms() < dl) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return 124;
}

/* D's "ep <endpoint>" progress line. */
static bool read_ep(int fd, char *ep, size_t cap)
{
	char line[256];
	size_t n = 0;
	while (n < sizeof line - 1 && read(fd, line + n, 1) == 1 && line[n] != '\n')
		n++;
	line[n] = '\0';
	if (strncmp(line, "ep ", 3))
		return false;
	snprintf(ep, cap, "%.250s", line + 3);
	return true;
}

static int run(void)
{
	int a[2], e[2], q[2], st[2], f[2];
	if (C.sum)
		setenv("LAYERCAKE_ROOM_CHECKSUM", "1", 1);
	TU_CHECK(pipe(a) == 0 && pipe(e) == 0 && pipe(q) == 0 && pipe(st) == 0 && pipe(f) == 0,
		 "pipe");
	pid_t p = fork();
	TU_CHECK(p >= 0, "fork");
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(e[1]);
		close(q[1]);
		close(f[0]);
		forged_fd = f[1];
		_exit(p_main(a[1], e[0], q[0]));
	}
	close(f[1]);
	close(a[1]);
	close(e[0]);
	close(q[0]);
	char addr[64];
	TU_CHECK(read(a[0], addr, sizeof addr) == (ssize_t)sizeof addr, "P did not start");
	pid_t d = fork();
	TU_CHECK(d >= 0, "fork");
	if (d == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(st[0]);
		status_fd = st[1];
		forged_fd = f[0];
		_exit(d_main(addr));
	}
	close(st[1]);
	char ep[256] = {0};
	int rc = 0;
	if (!read_ep(st[0], ep, sizeof ep)) {
		rc = reap(d, 5000);
		kill(p, SIGKILL);
		reap(p, 1000);
		return rc == TU_SKIP ? TU_SKIP : 1;
	}
	TU_CHECK(write(e[1], ep, sizeof ep) == (ssize_t)sizeof ep, "endpoint to P");
	int x = reap(d, 60000);
	if (x) {
		fprintf(stderr, "D exited %d\n", x);
		rc = 1;
	}
	if (write(q[1], "q", 1) != 1)
		rc = 1;
	x = reap(p, 30000);
	if (x) {
		fprintf(stderr, "P exited %d\n", x);
		rc = 1;
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: adversarial_accounting <case>\n");
		return 2;
	}
	tu_watchdog(110);
	signal(SIGPIPE, SIG_IGN);
	const char *c = argv[1];
	C = (cfg_t){.p_world = 1,
		    .send_layers = {LAYERS, LAYERS},
		    .layer_gap_us = 2000,
		    .d_expect = LC_ROOM_SUCCESS};
	if (!strcmp(c, "honest")) {
		C.layer_gap_us = 50000; /* D sees layers_ready rise */
		return run();
	}
	if (!strcmp(c, "claim_early")) {
		C.claim_first = true;
		return run();
	}
	if (!strcmp(c, "honest_fan_in")) {
		C.p_world = 2;
		C.layer_gap_us = 50000;
		return run();
	}
	C.sum = 1;
	if (!strcmp(c, "checksum_honest"))
		return run();
	if (!strcmp(c, "checksum_honest_fan_in")) {
		C.p_world = 2;
		return run();
	}
	C.d_expect = LC_ROOM_FAILED;
	if (!strcmp(c, "checksum_forged")) {
		C.lie[0] = C.forge_sum = true;
		C.sum_reason = "room checksum mismatch: P ranks sent 0x3039";
		return run();
	}
	if (!strcmp(c, "checksum_missing")) {
		C.sum = 2;
		C.sum_reason = "P rank 0 sent no room checksum";
		return run();
	}
	C.sum = 0;
	C.d_expect = LC_ROOM_FAILED;
	if (!strcmp(c, "lie_nothing")) {
		C.send_layers[0] = 0;
		C.lie[0] = true;
		return run();
	}
	if (!strcmp(c, "lie_partial")) {
		C.send_layers[0] = LAYERS / 2;
		C.lie[0] = true;
		return run();
	}
	if (!strcmp(c, "lie_fan_in")) {
		C.p_world = 2;
		C.send_layers[1] = 0;
		C.lie[1] = true;
		return run();
	}
	if (!strcmp(c, "lie_twice")) {
		C.twice = true;
		return run();
	}
	if (!strcmp(c, "intervals_cap")) {
		C.p_world = 2;
		C.send_layers[1] = 0;
		C.cap = true;
		return run();
	}
	if (!strcmp(c, "forged_layers")) {
		C.send_layers[0] = LAYERS / 2;
		C.forge_layers = true;
		return run();
	}
	fprintf(stderr, "unknown case %s\n", c);
	return 2;
}
