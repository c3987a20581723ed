/*
 * End-to-end tests of the control plane: P and D as separate processes
 * (fork), real ZeroMQ and HTTP sockets and a real data-plane transport on
 * loopback. Usage: control_e2e <case>. Each case exits 0 on success, 77
 * when a facility is missing here.
 *
 * The synthetic model: an MHA layout of LAYERS layers (2 buffers each) over
 * PAGES pages. P page p of buffer b holds tu_fill(seed(b, p)). Global page
 * g of a prompt lives in P page g + 1; D's destination page for index j
 * (after its prefix) of room i is PAGES - 1 - (i * n + j). D fills its
 * memory with a canary and checks every page afterwards: exactly the
 * granted pages changed, with exactly P's bytes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "control/bootstrap.h"
#include "control/codec.h"
#include "testutil.h"

#define LAYERS 4
#define NBUF (2 * LAYERS)
#define PAGES 64
#define ITEM 4096
#define CANARY 0x5a
#define ROOM0 100
#define META_LEN 2048

typedef struct cfg {
	const char *url;   /* D's data-plane listener */
	int p_world, p_dp; /* P ranks (all in the P process) */
	int d_procs;       /* D ranks (one process each), D tp size */
	int rooms;
	int chunks;
	int prefix_pages;
	int total_pages;
	int layer_sleep_us;
	uint64_t d_item; /* D's item_len (ITEM unless testing a mismatch) */
	uint64_t p_item; /* P's item_len; below ITEM: heads split over P's TP */
	/* Expectations. */
	int p_expect, d_expect; /* LC_ROOM_SUCCESS or LC_ROOM_FAILED */
	int p_reason, d_reason; /* fail reason expected when Failed */
	const char *d_reason_text;
	const char *p_knobs; /* "name=value,..." */
	const char *d_knobs;
	const char *d_session;
	int room_base;
	uint32_t rows; /* > 1: token-major pages of `rows` tokens (strided writes) */
	int waves;     /* waves of rooms (room_base advancing by rooms each); 0 = 1 */
	/* P does not wait for D (issue 44): its first hold_chunks forwards (the
	 * last of them after hold_layers layers, if > 0) run while its rooms are
	 * Bootstrapping; only then may D send its transfer info (hold_pipe).
	 * Chunks then count pages from token 0 (lc_chunk_t.page_tokens). */
	int hold_chunks, hold_layers;
	bool no_grant; /* D never sends it: P's rooms fail at their deadline first */
} cfg_t;

static cfg_t C;
static int status_fd = -1;          /* child -> parent progress lines */
static int hold_pipe[2] = {-1, -1}; /* P -> D: "send your transfer info now" */

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t seed_of(int b, int p)
{
	return 1000 + (uint64_t)b * PAGES + (uint64_t)p;
}

#define say(...) tu_say(status_fd, __VA_ARGS__)

typedef tu_pool_t side_t;

/* A page of the model as a whole (all heads): ITEM bytes. A rank whose
 * item is smaller (heterogeneous TP) holds the slice at its rank's share. */
static void global_page(int b, int p, uint8_t *out)
{
	tu_fill(out, ITEM, seed_of(b, p));
}

static size_t slice_of(uint64_t item, int tp_rank)
{
	return item < ITEM ? (size_t)tp_rank * item : 0;
}

/* A rank's page of item bytes cut from the global page g: head-major, the
 * slice at its share; token-major (C.rows > 1), that slice of every token
 * row (a page is rows rows of ITEM / rows bytes, heads within a row). */
static void rank_page(const uint8_t *g, uint64_t item, int tp_rank, uint8_t *out)
{
	if (C.rows <= 1) {
		memcpy(out, g + slice_of(item, tp_rank), item);
		return;
	}
	uint64_t grow = ITEM / C.rows, row = item / C.rows;
	for (uint32_t t = 0; t < C.rows; t++)
		memcpy(out + t * row, g + t * grow + slice_of(row * C.rows, tp_rank) / C.rows, row);
}

/* The pool's layout again with token-major rows. */
static void pool_rows(side_t *s)
{
	if (C.rows <= 1)
		return;
	lc_layout_destroy(s->layout);
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = LAYERS,
				 .rows = C.rows,
				 .pages = PAGES,
				 .item_len = {s->item, s->item},
				 .bases = s->bases};
	TU_OK(lc_layout_build(&lp, &s->layout));
}

static void side_init(side_t *s, const char *name, uint64_t item, bool is_p, int tp_rank,
		      const char *kn)
{
	tu_pool_init(s, name, kn, LAYERS, PAGES, item);
	pool_rows(s);
	if (is_p) {
		uint8_t g[ITEM];
		for (int b = 0; b < NBUF; b++)
			for (int p = 0; p < PAGES; p++) {
				global_page(b, p, g);
				rank_page(g, item, tp_rank,
					  (uint8_t *)s->bases[b] + (size_t)p * item);
			}
	} else {
		memset(s->mem, CANARY, s->len);
	}
}

static void side_fini(side_t *s)
{
	tu_pool_fini(s);
}

static int room_pages(void)
{
	return C.total_pages - C.prefix_pages;
}

static int64_t d_page(int room_index, int j)
{
	return PAGES - 1 - (room_index * room_pages() + j);
}

static void metadata_of(uint64_t room, uint8_t *out)
{
	tu_fill(out, META_LEN, room * 31 + 7);
}

/* ==== P process ==== */

static bool rank_serves(int rank, uint64_t room)
{
	int ptp = C.p_world / C.p_dp;
	int group = (int)(room % (uint64_t)C.p_dp);
	return rank / ptp == group;
}

/* Wait (20 s at most) for every room to be Bootstrapped (or final). */
static void wait_bootstrapped(lc_sender_t *snd[8][8])
{
	uint64_t deadline = now_ms() + 20000;
	for (bool all = false; !all && now_ms() < deadline; usleep(2000)) {
		all = true;
		for (int r = 0; r < C.p_world; r++)
			for (int i = 0; i < C.rooms; i++)
				if (snd[r][i] &&
				    lc_sender_poll(snd[r][i], NULL) == LC_ROOM_BOOTSTRAPPING)
					all = false;
	}
}

/* hold_chunks: what P recorded so far is held; let D send its transfer
 * info, and wait until it has arrived. no_grant: wait instead for the
 * rooms to fail at their bootstrap deadline, their chunks released. */
static void release_d(lc_sender_t *snd[8][8], lc_engine_t **eng)
{
	if (C.no_grant) {
		for (int r = 0; r < C.p_world; r++) { /* every chunk held ... */
			lc_engine_metrics_t m = {.size = sizeof m};
			TU_OK(lc_engine_metrics(eng[r], &m));
			TU_CHECK(m.chunks_held == (uint64_t)(C.rooms * C.chunks),
				 "P rank %d holds %llu chunks", r,
				 (unsigned long long)m.chunks_held);
		}
		/* ... until the rooms fail at their deadline, D silent */
		uint64_t deadline = now_ms() + 20000;
		for (bool all = false; !all && now_ms() < deadline; usleep(2000)) {
			all = true;
			for (int r = 0; r < C.p_world; r++)
				for (int i = 0; i < C.rooms; i++)
					if (snd[r][i] &&
					    lc_sender_poll(snd[r][i], NULL) != LC_ROOM_FAILED)
						all = false;
		}
		for (int r = 0; r < C.p_world; r++) {
			lc_engine_metrics_t m = {.size = sizeof m};
			TU_OK(lc_engine_metrics(eng[r], &m));
			TU_CHECK(m.chunks_held == 0 && m.pages_held == 0 && m.batches_posted == 0,
				 "P rank %d holds %llu chunks after its rooms failed", r,
				 (unsigned long long)m.chunks_held);
		}
	}
	say("held");
	for (int i = 0; i < C.d_procs; i++)
		TU_CHECK(write(hold_pipe[1], "g", 1) == 1, "hold pipe");
	if (!C.no_grant)
		wait_bootstrapped(snd);
}

/* One wave of rooms (room_base .. room_base + rooms - 1) on every rank. */
static int p_wave(lc_prefill_t **pf, lc_engine_t **eng, lc_sender_t *snd[8][8], int expect,
		  int expect_reason)
{
	int failures = 0;
	for (int i = 0; i < C.rooms; i++) {
		uint64_t room = (uint64_t)(C.room_base + i);
		for (int r = 0; r < C.p_world; r++)
			if (rank_serves(r, room))
				TU_OK(lc_sender_create(pf[r], room, &snd[r][i]));
	}
	/* Wait for every room to be Bootstrapped (or final), unless P goes on
	 * without D for the first hold_chunks forwards (release_d). */
	if (!C.hold_chunks)
		wait_bootstrapped(snd);
	/* Chunked prefill: every rank runs the same forwards. With hold_chunks
	 * the chunks cover the request from token 0, D's prefix included. */
	int first = C.hold_chunks ? 0 : C.prefix_pages;
	int total = C.total_pages - first, per = total / C.chunks;
	for (int k = 0; k < C.chunks; k++) {
		for (int r = 0; r < C.p_world; r++) {
			TU_OK(lc_engine_batch_begin(eng[r], 0));
			for (int i = 0; i < C.rooms; i++) {
				if (!snd[r][i] || lc_sender_poll(snd[r][i], NULL) == LC_ROOM_FAILED)
					continue;
				uint64_t prefix = 0;
				if (lc_sender_prefix_len(snd[r][i], &prefix) == 0)
					TU_CHECK(prefix == (uint64_t)C.prefix_pages * 16,
						 "prefix %llu", (unsigned long long)prefix);
				/* The held chunks must be added while Bootstrapping. */
				TU_CHECK(k >= C.hold_chunks || lc_sender_poll(snd[r][i], NULL) ==
								       LC_ROOM_BOOTSTRAPPING,
					 "room %d Bootstrapped before D was let go", i);
				int n = k == C.chunks - 1 ? total - k * per : per;
				int64_t pages[PAGES];
				for (int j = 0; j < n; j++)
					pages[j] = first + k * per + j + 1;
				lc_chunk_t ch = {.size = sizeof ch,
						 .room = (uint64_t)(C.room_base + i),
						 .pages = pages,
						 .page_count = (size_t)n,
						 .dst_index = (uint64_t)(k * per),
						 .is_last = k == C.chunks - 1,
						 .page_tokens = C.hold_chunks ? 16 : 0};
				int rc = lc_engine_chunk_add(eng[r], &ch);
				if (rc)
					fprintf(stderr, "P rank %d room %d chunk %d: %s\n", r, i, k,
						lc_strerror(rc));
				TU_CHECK(!rc || !C.hold_chunks, "a chunk P did not wait for: %s",
					 lc_strerror(rc));
			}
			TU_OK(lc_engine_batch_end(eng[r]));
		}
		say("chunk %d", k);
		for (int l = 0; l < LAYERS; l++) {
			if (k == C.hold_chunks - 1 && C.hold_layers && l == C.hold_layers)
				release_d(snd, eng);
			usleep((useconds_t)C.layer_sleep_us);
			for (int r = 0; r < C.p_world; r++)
				TU_OK(lc_engine_record_cache(eng[r]));
		}
		for (int r = 0; r < C.p_world; r++)
			TU_OK(lc_engine_record_aux(eng[r]));
		if (k == C.hold_chunks - 1 && !C.hold_layers)
			release_d(snd, eng);
	}
	uint64_t deadline;
	for (int r = 0; r < C.p_world; r++)
		for (int i = 0; i < C.rooms; i++)
			if (snd[r][i]) {
				uint8_t meta[META_LEN];
				metadata_of((uint64_t)(C.room_base + i), meta);
				lc_sender_metadata_set(snd[r][i], meta, sizeof meta);
			}
	deadline = now_ms() + 20000;
	for (int r = 0; r < C.p_world; r++)
		for (int i = 0; i < C.rooms; i++) {
			if (!snd[r][i])
				continue;
			lc_room_info_t info = {.size = sizeof info};
			int st;
			while ((st = lc_sender_poll(snd[r][i], &info)) != LC_ROOM_SUCCESS &&
			       st != LC_ROOM_FAILED && now_ms() < deadline)
				usleep(2000);
			fprintf(stderr, "P rank %d room %d: %s (%s) %s\n", r, C.room_base + i,
				lc_room_status_name(st), lc_fail_reason_name(info.fail_reason),
				info.reason);
			if (st != expect || (st == LC_ROOM_FAILED && expect_reason &&
					     info.fail_reason != expect_reason))
				failures++;
			say("p-final %d %d", st, info.fail_reason);
		}
	return failures;
}

static void p_senders_destroy(lc_sender_t *snd[8][8])
{
	for (int r = 0; r < C.p_world; r++)
		for (int i = 0; i < C.rooms; i++) {
			lc_sender_destroy(snd[r][i]);
			snd[r][i] = NULL;
		}
}

static int p_main(int addr_fd, int quit_fd)
{
	side_t side[8];
	lc_prefill_t *pf[8];
	lc_engine_t *eng[8];
	lc_sender_t *snd[8][8];
	lc_bootstrap_t *b;
	char addr[64];
	memset(snd, 0, sizeof snd);
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &b));
	lc_bootstrap_addr(b, addr, sizeof addr);
	for (int r = 0; r < C.p_world; r++) {
		char name[16];
		snprintf(name, sizeof name, "p%d", r);
		uint64_t item = C.p_item ? C.p_item : ITEM;
		side_init(&side[r], name, item, true, r % (C.p_world / C.p_dp), C.p_knobs);
		lc_prefill_params_t pp = {.size = sizeof pp,
					  .layout = side[r].layout,
					  .bootstrap = addr,
					  .name = name,
					  .world_size = C.p_world,
					  .dp_size = C.p_dp,
					  .engine_rank = r,
					  .metrics_server = b};
		TU_OK(lc_prefill_create(side[r].ctx, &pp, &pf[r]));
		TU_OK(lc_prefill_engine(pf[r], &eng[r]));
	}
	if (write(addr_fd, addr, sizeof addr) != (ssize_t)sizeof addr)
		return 3;
	close(addr_fd);

	int failures = p_wave(pf, eng, snd, C.p_expect, C.p_reason);
	if (C.d_session && C.p_expect == LC_ROOM_FAILED) {
		/* kill_d_recover: the dead D's session is blocked (TTL) ... */
		uint64_t nfail = 0;
		int blocked = lc_engine_session_blocked(eng[0], C.d_session, &nfail);
		fprintf(stderr, "P: session %s blocked=%d failures=%llu\n", C.d_session, blocked,
			(unsigned long long)nfail);
		say("blocked %d", blocked);
		if (blocked != 1)
			failures++;
		/* ... until the restarted D registers again: room_base + rooms. */
		p_senders_destroy(snd);
		C.room_base += C.rooms;
		failures += p_wave(pf, eng, snd, LC_ROOM_SUCCESS, 0);
	}
	for (int w = 1; w < C.waves; w++) {
		p_senders_destroy(snd);
		C.room_base += C.rooms;
		failures += p_wave(pf, eng, snd, C.p_expect, C.p_reason);
	}
	/* Wait until the parent says the D side is done. */
	char c;
	if (read(quit_fd, &c, 1) < 0)
		failures++;
	uint64_t malformed = 0, refused = 0;
	lc_prefill_counter(pf[0], "msgs_malformed", &malformed);
	lc_prefill_counter(pf[0], "registrations_refused", &refused);
	fprintf(stderr, "P: malformed %llu refused %llu\n", (unsigned long long)malformed,
		(unsigned long long)refused);
	say("p-counters %llu %llu", (unsigned long long)malformed, (unsigned long long)refused);
	for (int r = 0; r < C.p_world; r++) {
		for (int i = 0; i < C.rooms; i++)
			lc_sender_destroy(snd[r][i]);
		lc_prefill_destroy(pf[r]);
		side_fini(&side[r]);
	}
	lc_bootstrap_stop(b);
	return failures ? 1 : 0;
}

/* ==== D process ==== */

static int d_verify(const side_t *s, int tp_rank)
{
	int bad = 0;
	for (int b = 0; b < NBUF; b++) {
		const uint8_t *base = s->mem + (size_t)b * PAGES * s->item;
		for (int q = 0; q < PAGES; q++) {
			const uint8_t *pg = base + (size_t)q * s->item;
			int room_index = -1, j = -1;
			for (int i = 0; i < C.rooms && room_index < 0; i++)
				for (int k = 0; k < room_pages(); k++)
					if (d_page(i, k) == q) {
						room_index = i;
						j = k;
					}
			if (room_index >= 0) {
				uint8_t g[ITEM], want[ITEM];
				global_page(b, C.prefix_pages + j + 1, g);
				rank_page(g, s->item, tp_rank, want);
				long at = -1;
				for (size_t x = 0; x < s->item && at < 0; x++)
					if (pg[x] != want[x])
						at = (long)x;
				if (at >= 0) {
					fprintf(stderr,
						"D%d: buffer %d page %d (room %d idx %d) "
						"differs at %ld\n",
						tp_rank, b, q, room_index, j, at);
					bad++;
				}
			} else {
				for (size_t x = 0; x < s->item; x++)
					if (pg[x] != CANARY) {
						fprintf(stderr,
							"D%d: canary page %d of buffer %d "
							"written\n",
							tp_rank, q, b);
						bad++;
						break;
					}
			}
		}
	}
	return bad;
}

typedef enum d_mode { D_NORMAL, D_CANCEL, D_MALFORMED, D_PEERS } d_mode_t;

/* Raw messages at P's control socket and D's own, plus HTTP garbage. */
static void send_garbage(const char *bs_addr, lc_decode_t *d)
{
	lc__rank_info_t ri;
	char why[256], dep[300], pep[300];
	lc__http_opts_t o = {.timeout_ms = 2000, .retries = 3};
	TU_OK(lc__bootstrap_get_rank(bs_addr, 0, 0, &o, &ri, why, sizeof why));
	snprintf(pep, sizeof pep, "tcp://%s:%d", ri.rank_ip, ri.rank_port);
	TU_OK(lc_decode_endpoint(d, dep, sizeof dep));
	void *zc = zmq_ctx_new();
	void *rx = zmq_socket(zc, ZMQ_PULL);
	TU_CHECK(zmq_bind(rx, "tcp://127.0.0.1:*") == 0, "bind");
	char my_ep[256];
	size_t n = sizeof my_ep;
	zmq_getsockopt(rx, ZMQ_LAST_ENDPOINT, my_ep, &n);
	const char *targets[2] = {pep, dep};
	for (int t = 0; t < 2; t++) {
		void *tx = zmq_socket(zc, ZMQ_PUSH);
		int linger = 1000;
		zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
		TU_CHECK(zmq_connect(tx, targets[t]) == 0, "connect");
		zmq_send(tx, "garbage", 7, 0);
		zmq_send(tx, "", 0, 0);
		uint8_t hdr[12] = {0x4c, 0x43, 0x43, 0x50, LC__MSG_VERSION, 0, 5, 0, 200, 0, 0, 0};
		zmq_send(tx, hdr, sizeof hdr, 0);  /* status claiming 200 bytes */
		zmq_send(tx, "a", 1, ZMQ_SNDMORE); /* multi-part */
		zmq_send(tx, "b", 1, 0);
		if (t == 0) {
			/* A registration with another geometry: refused by P. */
			lc__msg_buffer_t bufs[NBUF];
			uint8_t desc[16] = {1};
			const void *descs[1] = {desc};
			size_t lens[1] = {sizeof desc};
			lc__msg_t m;
			memset(&m, 0, sizeof m);
			m.type = LC__MSG_REGISTER;
			snprintf(m.reg.session, sizeof m.reg.session, "intruder");
			memset(m.secret, 0x17, sizeof m.secret); /* any: P checks geometry */
			snprintf(m.reg.status_ep, sizeof m.reg.status_ep, "%s", my_ep);
			snprintf(m.reg.data_url, sizeof m.reg.data_url, "tcp://127.0.0.1:1");
			for (int b = 0; b < NBUF; b++)
				bufs[b] = (lc__msg_buffer_t){.layer = b % LAYERS,
							     .kind = b < LAYERS ? 0 : 1,
							     .item_len = b == 3 ? 512 : ITEM};
			m.reg.nbuffers = NBUF;
			m.reg.buffers = bufs;
			m.reg.nregions = 1;
			m.reg.region_descs = descs;
			m.reg.region_desc_lens = lens;
			uint8_t *buf;
			size_t len;
			TU_OK(lc__msg_encode(&m, &buf, &len));
			zmq_send(tx, buf, len, 0);
			free(buf);
		}
		zmq_close(tx);
	}
	/* P's refusal names the difference. */
	int timeout = 5000;
	zmq_setsockopt(rx, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
	uint8_t reply[2048];
	int got = zmq_recv(rx, reply, sizeof reply, 0);
	TU_CHECK(got > 0, "no registration reply");
	lc__msg_t m;
	TU_OK(lc__msg_decode(reply, (size_t)got, &m, NULL, 0));
	TU_CHECK(m.type == LC__MSG_REGISTER_REPLY && m.reply.result == LC_ERR_GEOMETRY,
		 "reply %d result %d", m.type, m.reply.result);
	TU_CHECK(strstr(m.reply.reason, "buffer 3") && strstr(m.reply.reason, "item_len"),
		 "reason: %s", m.reply.reason);
	fprintf(stderr, "D: P refused the intruder: %s\n", m.reply.reason);
	lc__msg_free(&m);
	zmq_close(rx);
	zmq_ctx_term(zc);
	/* HTTP garbage at the bootstrap server. */
	char url[128], *resp = NULL;
	size_t rl;
	snprintf(url, sizeof url, "http://%s/route", bs_addr);
	TU_CHECK(lc__http_request("PUT", url, "{{{", 3, NULL, 2000, &resp, &rl) == 400, "put");
	free(resp);
	snprintf(url, sizeof url, "http://%s/route?engine_rank=7&target_dp_group=0", bs_addr);
	TU_CHECK(lc__http_request("GET", url, NULL, 0, NULL, 2000, &resp, &rl) == 404, "get");
	free(resp);
}

/* One wave of rooms (room_base ..) at the P at bs_addr: sent once
 * Bootstrapped, each checked as the case expects (the cancel of D_CANCEL
 * included), the receivers destroyed. Returns the failures. */
static int d_wave(lc_decode_t *d, const side_t *s, const char *bs_addr, int tp_rank, d_mode_t mode)
{
	lc_receiver_t *rcv[8];
	for (int i = 0; i < C.rooms; i++)
		TU_OK(lc_receiver_create(d, bs_addr, (uint64_t)(C.room_base + i), &rcv[i]));
	if (C.hold_chunks) { /* P's first forwards run before D's transfer info */
		struct pollfd pfd = {.fd = hold_pipe[0], .events = POLLIN};
		char g;
		TU_CHECK(poll(&pfd, 1, 20000) == 1 && read(hold_pipe[0], &g, 1) == 1,
			 "P never let D send");
	}
	/* Bootstrapped, then send the pages (no_grant: never; cancel). */
	uint64_t deadline = now_ms() + 20000;
	bool sent[8] = {0};
	for (int i = 0; C.no_grant && i < C.rooms; i++)
		TU_OK(lc_receiver_cancel(rcv[i], "test: D never sent its pages"));
	for (int left = C.no_grant ? 0 : C.rooms; left && now_ms() < deadline; usleep(1000)) {
		for (int i = 0; i < C.rooms; i++) {
			if (sent[i])
				continue;
			int st = lc_receiver_poll(rcv[i], NULL);
			if (st == LC_ROOM_FAILED) {
				sent[i] = true;
				left--;
				continue;
			}
			if (st != LC_ROOM_BOOTSTRAPPED)
				continue;
			int64_t pages[PAGES];
			for (int j = 0; j < room_pages(); j++)
				pages[j] = d_page(i, j);
			lc_receiver_pages_t pg = {.size = sizeof pg,
						  .pages = pages,
						  .page_count = (size_t)room_pages(),
						  .prefix_len = (uint64_t)C.prefix_pages * 16,
						  .aux_index = i};
			TU_OK(lc_receiver_send(rcv[i], &pg));
			sent[i] = true;
			left--;
		}
	}
	say("sent");
	uint8_t *snapshot = NULL;
	if (mode == D_CANCEL) {
		/* Cancel once the first layers have landed. */
		for (uint64_t dl = now_ms() + 10000;
		     lc_receiver_layers_ready(rcv[0]) < 1 && now_ms() < dl;)
			usleep(500);
		fprintf(stderr, "D: cancelling at %d layers\n", lc_receiver_layers_ready(rcv[0]));
		TU_OK(lc_receiver_cancel(rcv[0], "test cancel"));
		snapshot = malloc(s->len);
		memcpy(snapshot, s->mem, s->len);
	}
	int failures = 0;
	deadline = now_ms() + 20000;
	for (int i = 0; i < C.rooms; i++) {
		lc_room_info_t info = {.size = sizeof info};
		int st;
		while ((st = lc_receiver_poll(rcv[i], &info)) != LC_ROOM_SUCCESS &&
		       st != LC_ROOM_FAILED && now_ms() < deadline)
			usleep(1000);
		fprintf(stderr, "D%d room %d: %s (%s) %s, layers %u\n", tp_rank, C.room_base + i,
			lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason,
			info.layers_landed);
		say("d-final %d %d", st, info.fail_reason);
		if (st != C.d_expect)
			failures++;
		if (st == LC_ROOM_FAILED && C.d_reason && info.fail_reason != C.d_reason)
			failures++;
		if (st == LC_ROOM_FAILED && C.d_reason_text &&
		    !strstr(info.reason, C.d_reason_text))
			failures++;
		if (st == LC_ROOM_SUCCESS) {
			uint8_t meta[LC_METADATA_MAX], want[META_LEN];
			int n = lc_receiver_metadata(rcv[i], meta, sizeof meta);
			metadata_of((uint64_t)(C.room_base + i), want);
			if (n != META_LEN || memcmp(meta, want, META_LEN)) {
				fprintf(stderr, "D: metadata of room %d wrong (%d bytes)\n",
					C.room_base + i, n);
				failures++;
			}
			if (lc_receiver_layers_ready(rcv[i]) != LAYERS)
				failures++;
		}
	}
	if (mode == D_CANCEL) {
		/* P keeps computing; nothing may land after the cancel. */
		usleep(1500 * 1000);
		if (memcmp(snapshot, s->mem, s->len)) {
			fprintf(stderr, "D: memory changed after cancel\n");
			failures++;
		}
		for (size_t x = 0; x < s->len; x += s->item) {
			size_t page = (x / s->item) % PAGES;
			bool granted = page + (size_t)room_pages() >= PAGES;
			if (!granted && s->mem[x] != CANARY) {
				fprintf(stderr, "D: canary at page %zu written\n", page);
				failures++;
			}
		}
		free(snapshot);
	} else if (C.d_expect == LC_ROOM_SUCCESS) {
		failures += d_verify(s, tp_rank);
	}
	for (int i = 0; i < C.rooms; i++)
		lc_receiver_destroy(rcv[i]);
	return failures;
}

static uint64_t d_counter(lc_decode_t *d, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_decode_counter(d, name, &v));
	return v;
}

/* A receiver at bootstrap address addr: its lc_receiver_create's code. */
static int d_recv(lc_decode_t *d, const char *addr, uint64_t room, lc_receiver_t **out)
{
	*out = NULL;
	lc_last_error_clear();
	int rc = lc_receiver_create(d, addr, room, out);
	fprintf(stderr, "D: receiver of room %llu at %s: %d %s\n", (unsigned long long)room, addr,
		rc, rc ? lc_last_error() : "");
	return rc;
}

/* No lookup in flight: the receivers at addresses where nothing listens
 * are destroyed, so none starts, and one under way ends in milliseconds
 * (connection refused), counted. A peer in a lookup keeps its place (H
 * below), which would make the evictions these cases count vary. */
static void d_quiesce(lc_decode_t *d)
{
	uint64_t v = d_counter(d, "bootstrap_failures"), since = now_ms();
	for (uint64_t dl = since + 5000; now_ms() < dl && now_ms() - since < 100; usleep(5000)) {
		uint64_t w = d_counter(d, "bootstrap_failures");
		if (w != v) {
			v = w;
			since = now_ms();
		}
	}
}

#define PEER_CHECK(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "D: peers: %s: ", #cond);                                  \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* peers_evict (d_peers_max=2, three waves at the real P): the table of P
 * addresses never fills for good. Addresses where nothing listens (a
 * bound, unlistened port on 127.0.0.1: connection refused) come and go
 * around the waves; with both places named by live receivers a third
 * address is refused naming the knob; a destroyed receiver's address gives
 * its place, a never-resolved one before P's pinned one (wave 2 finds P's
 * peer still known: no new REGISTER), and P's own peer, forgotten while
 * nothing names it, is found and registered with afresh (wave 3). A peer
 * whose lookup is in flight is never forgotten (H). */
static int d_peers_main(lc_decode_t *d, side_t *s, const char *bs_addr, int tp_rank)
{
	enum { A, B, C_, E, F, G, H, I, NADDR };
	int fds[NADDR], failures = 0;
	char addr[NADDR][64];
	for (int i = 0; i < NADDR; i++) {
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		socklen_t n = sizeof sa;
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		TU_CHECK(fds[i] >= 0 && !bind(fds[i], (struct sockaddr *)&sa, sizeof sa) &&
				 !getsockname(fds[i], (struct sockaddr *)&sa, &n),
			 "a closed port");
		snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", ntohs(sa.sin_port));
	}
	uint64_t room = 9000;
	lc_receiver_t *ra, *rb, *rc_, *re, *rf, *rg;
	PEER_CHECK(!d_recv(d, addr[A], room++, &ra) && !d_recv(d, addr[B], room++, &rb), "A, B");
	int rc = d_recv(d, addr[C_], room++, &rc_);
	PEER_CHECK(rc == -ENOSPC && strstr(lc_last_error(), "d_peers_max") &&
			   strstr(lc_last_error(), addr[C_]) && !rc_,
		   "a third address with two live: %d \"%s\"", rc, lc_last_error());
	/* Tried and failed at least once each: still never resolved. */
	for (uint64_t dl = now_ms() + 5000;
	     d_counter(d, "bootstrap_failures") < 2 && now_ms() < dl;)
		usleep(5000);
	PEER_CHECK(d_counter(d, "peers_evicted") == 0, "evicted early");
	lc_receiver_destroy(ra);
	lc_receiver_destroy(rb);
	d_quiesce(d);
	PEER_CHECK(!d_recv(d, addr[C_], room++, &rc_) && !d_recv(d, addr[E], room++, &re),
		   "C, E after A and B went");
	PEER_CHECK(d_counter(d, "peers_evicted") == 2, "%llu evicted, want 2",
		   (unsigned long long)d_counter(d, "peers_evicted"));
	lc_receiver_destroy(rc_);
	d_quiesce(d);
	/* Wave 1: P's address takes C's place. */
	failures += d_wave(d, s, bs_addr, tp_rank, D_PEERS);
	PEER_CHECK(d_counter(d, "peers_evicted") == 3, "wave 1: %llu evicted, want 3",
		   (unsigned long long)d_counter(d, "peers_evicted"));
	uint64_t regs = d_counter(d, "registrations");
	/* E named again (known: nothing forgotten), so that P's peer is the
	 * least recently used; yet E (never resolved) goes for F, not P's
	 * peer (resolved, pinned). */
	lc_receiver_destroy(re);
	PEER_CHECK(!d_recv(d, addr[E], room++, &re), "E again");
	lc_receiver_destroy(re);
	d_quiesce(d);
	PEER_CHECK(!d_recv(d, addr[F], room++, &rf), "F");
	memset(s->mem, CANARY, s->len);
	C.room_base += C.rooms;
	failures += d_wave(d, s, bs_addr, tp_rank, D_PEERS);
	PEER_CHECK(d_counter(d, "peers_evicted") == 4 && d_counter(d, "registrations") == regs,
		   "wave 2: %llu evicted (want 4), %llu registrations (want %llu: P's peer kept)",
		   (unsigned long long)d_counter(d, "peers_evicted"),
		   (unsigned long long)d_counter(d, "registrations"), (unsigned long long)regs);
	/* With F live, G takes P's place: P's pins go with it. */
	PEER_CHECK(!d_recv(d, addr[G], room++, &rg), "G");
	PEER_CHECK(d_counter(d, "peers_evicted") == 5, "G: %llu evicted, want 5",
		   (unsigned long long)d_counter(d, "peers_evicted"));
	lc_receiver_destroy(rf);
	lc_receiver_destroy(rg);
	d_quiesce(d);
	/* Wave 3: P found and registered with again. */
	memset(s->mem, CANARY, s->len);
	C.room_base += C.rooms;
	failures += d_wave(d, s, bs_addr, tp_rank, D_PEERS);
	PEER_CHECK(d_counter(d, "peers_evicted") == 6 && d_counter(d, "registrations") > regs,
		   "wave 3: %llu evicted (want 6), %llu registrations (want > %llu)",
		   (unsigned long long)d_counter(d, "peers_evicted"),
		   (unsigned long long)d_counter(d, "registrations"), (unsigned long long)regs);
	/* H listens and never answers: the discovery thread is inside its
	 * lookup (2 s timeouts) with the lock dropped when H's receiver goes.
	 * H is not forgotten meanwhile, though never resolved: I takes P's
	 * place, and H, asked for again once its lookup ended, is still known. */
	TU_CHECK(!listen(fds[H], 8), "listen");
	uint64_t f0 = d_counter(d, "bootstrap_failures");
	lc_receiver_t *rh, *ri;
	PEER_CHECK(!d_recv(d, addr[H], room++, &rh), "H");
	usleep(300 * 1000);
	PEER_CHECK(d_counter(d, "bootstrap_failures") == f0, "H's lookup ended early");
	lc_receiver_destroy(rh);
	PEER_CHECK(!d_recv(d, addr[I], room++, &ri), "I");
	lc_receiver_destroy(ri);
	PEER_CHECK(d_counter(d, "peers_evicted") == 8, "H, I: %llu evicted, want 8",
		   (unsigned long long)d_counter(d, "peers_evicted"));
	for (uint64_t dl = now_ms() + 10000;
	     d_counter(d, "bootstrap_failures") == f0 && now_ms() < dl;)
		usleep(10000);
	PEER_CHECK(!d_recv(d, addr[H], room++, &rh), "H again");
	lc_receiver_destroy(rh);
	PEER_CHECK(d_counter(d, "peers_evicted") == 8, "H again: %llu evicted, want 8 (H kept)",
		   (unsigned long long)d_counter(d, "peers_evicted"));
	for (int i = 0; i < NADDR; i++)
		close(fds[i]);
	return failures;
}

static int d_main(const char *bs_addr, int tp_rank, d_mode_t mode)
{
	side_t s;
	lc_decode_t *d;
	char name[16];
	snprintf(name, sizeof name, "d%d", tp_rank);
	side_init(&s, name, C.d_item, false, tp_rank, C.d_knobs);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = C.url,
				 .session = C.d_session,
				 .tp_size = C.d_procs,
				 .tp_rank = tp_rank};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	if (mode == D_MALFORMED)
		send_garbage(bs_addr, d);
	int failures = mode == D_PEERS ? d_peers_main(d, &s, bs_addr, tp_rank)
				       : d_wave(d, &s, bs_addr, tp_rank, mode);
	if (mode == D_MALFORMED) {
		uint64_t m = 0;
		lc_decode_counter(d, "msgs_malformed", &m);
		fprintf(stderr, "D: malformed %llu\n", (unsigned long long)m);
		if (m < 3)
			failures++;
	}
	lc_decode_destroy(d);
	side_fini(&s);
	return failures ? 1 : 0;
}

/* ==== the parent ==== */

typedef struct proc {
	pid_t pid;
	int status_fd;
} proc_t;

/* LAYERCAKE_SECRET_DIR of each side (CURVE), set in the child. */
static char p_secret[64], d_secret[64];

static void use_secret(const char *dir)
{
	if (dir[0])
		setenv("LAYERCAKE_SECRET_DIR", dir, 1);
}

static proc_t spawn_p(int *addr_read, int *quit_write)
{
	int a[2], q[2], st[2];
	TU_CHECK(pipe(a) == 0 && pipe(q) == 0 && pipe(st) == 0, "pipe");
	proc_t pr = {0};
	pr.pid = fork();
	TU_CHECK(pr.pid >= 0, "fork");
	if (pr.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(q[1]);
		close(st[0]);
		status_fd = st[1];
		use_secret(p_secret);
		_exit(p_main(a[1], q[0]));
	}
	close(a[1]);
	close(q[0]);
	close(st[1]);
	*addr_read = a[0];
	*quit_write = q[1];
	pr.status_fd = st[0];
	return pr;
}

static proc_t spawn_d(const char *addr, int tp_rank, d_mode_t mode)
{
	int st[2];
	TU_CHECK(pipe(st) == 0, "pipe");
	proc_t pr = {0};
	pr.pid = fork();
	TU_CHECK(pr.pid >= 0, "fork");
	if (pr.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(st[0]);
		status_fd = st[1];
		use_secret(d_secret);
		_exit(d_main(addr, tp_rank, mode));
	}
	close(st[1]);
	pr.status_fd = st[0];
	return pr;
}

/* Read progress lines until one starts with `prefix` (or EOF/timeout). */
static bool wait_line(proc_t *p, const char *prefix, int timeout_ms, char *out, size_t cap)
{
	static char buf[8][4096];
	static size_t len[8];
	int slot = p->status_fd % 8;
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		char *nl;
		while ((nl = memchr(buf[slot], '\n', len[slot]))) {
			*nl = '\0';
			bool hit = !strncmp(buf[slot], prefix, strlen(prefix));
			if (hit && out)
				snprintf(out, cap, "%s", buf[slot]);
			size_t used = (size_t)(nl - buf[slot]) + 1;
			memmove(buf[slot], nl + 1, len[slot] - used);
			len[slot] -= used;
			if (hit)
				return true;
		}
		if (now_ms() >= dl)
			return false;
		struct timeval tv = {0, 50000};
		fd_set fds;
		FD_ZERO(&fds);
		FD_SET(p->status_fd, &fds);
		if (select(p->status_fd + 1, &fds, NULL, NULL, &tv) > 0) {
			ssize_t n = read(p->status_fd, buf[slot] + len[slot],
					 sizeof buf[slot] - 1 - len[slot]);
			if (n <= 0)
				return false;
			len[slot] += (size_t)n;
		}
	}
}

static int reap(proc_t *p, int timeout_ms)
{
	uint64_t dl = now_ms() + (uint64_t)timeout_ms;
	int st;
	while (now_ms() < dl) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(p->pid, SIGKILL);
	waitpid(p->pid, &st, 0);
	return 124;
}

/* P, then the D ranks, then collect everything. */
static int run_plain(d_mode_t mode)
{
	int addr_fd, quit_fd;
	char addr[64];
	proc_t p = spawn_p(&addr_fd, &quit_fd);
	TU_CHECK(read(addr_fd, addr, sizeof addr) == (ssize_t)sizeof addr, "P did not start");
	proc_t d[4];
	for (int i = 0; i < C.d_procs; i++)
		d[i] = spawn_d(addr, i, i == 0 ? mode : D_NORMAL);
	int rc = 0;
	for (int i = 0; i < C.d_procs; i++) {
		int x = reap(&d[i], 40000);
		if (x == TU_SKIP) {
			kill(p.pid, SIGKILL);
			reap(&p, 1000);
			return TU_SKIP;
		}
		if (x) {
			fprintf(stderr, "D%d exited %d\n", i, x);
			rc = 1;
		}
	}
	char line[128];
	if (mode == D_MALFORMED) {
		if (write(quit_fd, "q", 1) != 1)
			rc = 1;
		unsigned long long mal = 0, refused = 0;
		if (!wait_line(&p, "p-counters", 10000, line, sizeof line) ||
		    sscanf(line, "p-counters %llu %llu", &mal, &refused) != 2 || mal < 3 ||
		    refused < 1) {
			fprintf(stderr, "P counters wrong: %s\n", line);
			rc = 1;
		}
	}
	close(quit_fd);
	int x = reap(&p, 30000);
	if (x) {
		fprintf(stderr, "P exited %d\n", x);
		rc = 1;
	}
	return rc;
}

static const char *const key_files[3] = {"curve.public", "curve.secret", "authorized_keys"};

/* A key directory: our keypair, and the peer's key authorized. */
static void key_dir(char *dir, size_t cap, const char *pub, const char *sec, const char *peer)
{
	snprintf(dir, cap, "/tmp/lc-e2e-curve-XXXXXX");
	TU_CHECK(mkdtemp(dir), "mkdtemp");
	const char *vals[3] = {pub, sec, peer};
	for (int i = 0; i < 3; i++) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", dir, key_files[i]);
		FILE *f = fopen(path, "w");
		TU_CHECK(f, "fopen %s", path);
		fprintf(f, "%s\n", vals[i]);
		fclose(f);
	}
}

static void rm_key_dir(const char *dir)
{
	for (int i = 0; i < 3; i++) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", dir, key_files[i]);
		unlink(path);
	}
	rmdir(dir);
}

/* CURVE with one keypair per rank, each authorizing the other's: D's
 * REGISTER carries D's key, so P's statuses reach D's inbox and the rooms
 * succeed, byte-exact, through the public API. */
static int case_curve_distinct_keypairs(void)
{
	char ppub[41], psec[41], dpub[41], dsec[41];
	if (!zmq_has("curve"))
		return TU_SKIP;
	TU_CHECK(!zmq_curve_keypair(ppub, psec) && !zmq_curve_keypair(dpub, dsec), "keypair");
	key_dir(p_secret, sizeof p_secret, ppub, psec, dpub);
	key_dir(d_secret, sizeof d_secret, dpub, dsec, ppub);
	C.rooms = 2;
	int rc = run_plain(D_NORMAL);
	rm_key_dir(p_secret);
	rm_key_dir(d_secret);
	return rc;
}

static void base_cfg(void)
{
	C = (cfg_t){.url = "tcp://127.0.0.1:0",
		    .p_world = 1,
		    .p_dp = 1,
		    .d_procs = 1,
		    .rooms = 1,
		    .chunks = 1,
		    .total_pages = 8,
		    .layer_sleep_us = 2000,
		    .d_item = ITEM,
		    .p_expect = LC_ROOM_SUCCESS,
		    .d_expect = LC_ROOM_SUCCESS,
		    .room_base = ROOM0};
}

/* The kill cases' start: P up (its bootstrap address in addr) and one D
 * that has sent its transfer info; then, mid-transfer, the victim (P, or
 * D once P's first chunk is under way) is killed and reaped. Returns the
 * time of the kill. */
static uint64_t kill_mid_transfer(proc_t *p, int *quit_fd, char addr[64], proc_t *d, bool kill_p)
{
	int addr_fd;
	*p = spawn_p(&addr_fd, quit_fd);
	TU_CHECK(read(addr_fd, addr, 64) == 64, "P did not start");
	close(addr_fd);
	*d = spawn_d(addr, 0, D_NORMAL);
	TU_CHECK(wait_line(d, "sent", 20000, NULL, 0), "D never sent");
	if (!kill_p)
		TU_CHECK(wait_line(p, "chunk 0", 20000, NULL, 0), "P never started");
	usleep(kill_p ? 100000 : 250000);
	proc_t *victim = kill_p ? p : d;
	kill(victim->pid, SIGKILL);
	uint64_t t0 = now_ms();
	reap(victim, 5000);
	return t0;
}

/* Tell P to quit and check it exits cleanly. */
static void quit_p(proc_t *p, int quit_fd)
{
	TU_CHECK(write(quit_fd, "q", 1) == 1, "P quit pipe");
	close(quit_fd);
	TU_CHECK(reap(p, 20000) == 0, "P exit");
}

static int case_kill_d(void)
{
	/* Room 100 to a D that is killed mid-transfer: P's room fails within
	 * the deadline and the session is blocked; then a D with the same
	 * session id registers again and room 101 succeeds. */
	C.layer_sleep_us = 200000;
	C.p_knobs = "transfer_timeout_ms=3000,progress_timeout_ms=2000,connect_timeout_ms=2000";
	C.p_expect = LC_ROOM_FAILED;
	int quit_fd;
	char addr[64], line[128];
	proc_t p, d;
	uint64_t t0 = kill_mid_transfer(&p, &quit_fd, addr, &d, false);
	TU_CHECK(wait_line(&p, "p-final", 15000, line, sizeof line), "P room never final");
	int st = -1, reason = -1;
	sscanf(line, "p-final %d %d", &st, &reason);
	fprintf(stderr, "P room final after %llu ms: %s\n", (unsigned long long)(now_ms() - t0),
		line);
	TU_CHECK(st == LC_ROOM_FAILED, "P room %d", st);
	TU_CHECK(now_ms() - t0 < 12000, "too slow");
	quit_p(&p, quit_fd);
	return 0;
}

static int case_kill_d_recover(void)
{
	/* Room 100 to a D killed mid-transfer fails on P and blocks the session
	 * (TTL); a restarted D with the same session id registers again, which
	 * clears the block, and room 101 succeeds byte-exact. */
	C.layer_sleep_us = 200000;
	C.d_session = "decode-a";
	C.p_knobs = "session_ttl_ms=60000,connect_timeout_ms=2000";
	C.p_expect = LC_ROOM_FAILED;
	int quit_fd;
	char addr[64], line[128];
	proc_t p, d;
	kill_mid_transfer(&p, &quit_fd, addr, &d, false);
	TU_CHECK(wait_line(&p, "blocked", 15000, line, sizeof line), "P never checked");
	TU_CHECK(!strcmp(line, "blocked 1"), "%s", line);
	C.room_base = ROOM0 + C.rooms;
	C.layer_sleep_us = 2000;
	proc_t d2 = spawn_d(addr, 0, D_NORMAL);
	int rc = reap(&d2, 40000);
	TU_CHECK(rc == 0, "restarted D exited %d", rc);
	TU_CHECK(wait_line(&p, "p-final", 15000, line, sizeof line), "P second room");
	TU_CHECK(!strncmp(line, "p-final 5", 9), "%s", line);
	quit_p(&p, quit_fd);
	return 0;
}

static int case_kill_p(void)
{
	C.layer_sleep_us = 300000;
	C.chunks = 1;
	C.d_knobs = "heartbeat_interval_ms=200,heartbeat_misses=2";
	C.d_expect = LC_ROOM_FAILED;
	C.d_reason = LC_FAIL_SESSION_GONE;
	C.d_reason_text = "control channel"; /* down; its lanes closed too: at once */
	int quit_fd;
	char addr[64], line[128];
	proc_t p, d;
	uint64_t t0 = kill_mid_transfer(&p, &quit_fd, addr, &d, true);
	TU_CHECK(wait_line(&d, "d-final", 10000, line, sizeof line), "D room never final");
	fprintf(stderr, "D room final %llu ms after P died: %s\n",
		(unsigned long long)(now_ms() - t0), line);
	TU_CHECK(now_ms() - t0 < 5000, "P's death noticed too slowly");
	close(quit_fd);
	return reap(&d, 10000);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: control_e2e <case>\n");
		return 2;
	}
	tu_watchdog(110);
	signal(SIGPIPE, SIG_IGN);
	const char *c = argv[1];
	base_cfg();
	if (!strcmp(c, "tcp_1p1d")) {
		C.rooms = 3;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "shm_1p1d")) {
		if (!tu_transport_built("shm"))
			return TU_SKIP;
		C.url = "shm://auto";
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "two_p_dp")) { /* 2 P ranks (dp 2) -> 1 D: rooms by room % dp */
		C.p_world = 2;
		C.p_dp = 2;
		C.rooms = 4;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "two_p_dummy")) { /* 2 P ranks (tp 2) -> 1 D: one real, one dummy */
		C.p_world = 2;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "one_p_two_d")) { /* fan-in: required_dst_info_num 2 */
		C.d_procs = 2;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "chunked_prefix")) { /* 3 chunks, 3 prefix pages skipped */
		C.total_pages = 12;
		C.prefix_pages = 3;
		C.chunks = 3;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	/* P never waits for D (issue 44): chunks held while Bootstrapping, D's
	 * prefix pages left out by page_tokens once its info is in. */
	if (!strncmp(c, "hold_", 5)) {
		if (strstr(c, "_shm")) {
			if (!tu_transport_built("shm"))
				return TU_SKIP;
			C.url = "shm://auto";
		}
		TU_CHECK(pipe(hold_pipe) == 0, "pipe");
		C.total_pages = 12;
		C.prefix_pages = 3;
		C.chunks = 3;
		C.rooms = 2;
		C.hold_chunks = 3;            /* hold_all: every chunk and layer before */
		if (strstr(c, "hold_half")) { /* half the layers before, half after */
			C.chunks = 1;
			C.hold_chunks = 1;
			C.hold_layers = LAYERS / 2;
		} else if (strstr(c, "hold_mixed")) { /* chunk 0, half of 1 before; 2 after */
			C.hold_chunks = 2;
			C.hold_layers = LAYERS / 2;
		} else if (strstr(c, "hold_no_grant")) { /* P's rooms fail at the deadline */
			C.no_grant = true;
			C.p_knobs = "bootstrap_timeout_ms=3000";
			C.p_expect = C.d_expect = LC_ROOM_FAILED;
			C.p_reason = LC_FAIL_BOOTSTRAP_TIMEOUT;
			C.d_reason = LC_FAIL_CANCELLED;
		}
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "tp_two_p_one_d")) { /* heads split: P TP 2 halves -> D TP 1 */
		C.p_world = 2;
		C.p_item = ITEM / 2;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "tp_one_p_two_d")) { /* heads split: P TP 1 -> D TP 2 halves */
		C.d_procs = 2;
		C.d_item = ITEM / 2;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "tp_two_p_one_d_token_major")) { /* strided: P TP 2 -> D TP 1 */
		C.p_world = 2;
		C.p_item = ITEM / 2;
		C.rows = 16;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "tp_one_p_two_d_token_major")) { /* strided: P TP 1 -> D TP 2 */
		C.d_procs = 2;
		C.d_item = ITEM / 2;
		C.rows = 16;
		C.rooms = 2;
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "geometry_mismatch")) {
		C.d_item = ITEM / 2;
		C.d_expect = LC_ROOM_FAILED;
		C.d_reason_text = "item_len";
		/* P told of D's refusal at once (issue 15), not at its deadline. */
		C.p_expect = LC_ROOM_FAILED;
		C.p_reason = LC_FAIL_CANCELLED;
		C.p_knobs = "bootstrap_timeout_ms=60000";
		return run_plain(D_NORMAL);
	}
	if (!strcmp(c, "cancel")) {
		C.layer_sleep_us = 150000;
		C.chunks = 2;
		C.d_expect = LC_ROOM_FAILED;
		C.d_reason = LC_FAIL_CANCELLED;
		C.p_expect = LC_ROOM_FAILED;
		C.p_reason = LC_FAIL_CANCELLED;
		return run_plain(D_CANCEL);
	}
	if (!strcmp(c, "malformed"))
		return run_plain(D_MALFORMED);
	if (!strcmp(c, "peers_evict")) { /* issue: a D's P addresses never forgotten */
		C.d_knobs = "d_peers_max=2";
		C.rooms = 2;
		C.waves = 3;
		return run_plain(D_PEERS);
	}
	if (!strcmp(c, "curve_distinct_keypairs"))
		return case_curve_distinct_keypairs();
	if (!strcmp(c, "kill_d"))
		return case_kill_d();
	if (!strcmp(c, "kill_d_recover"))
		return case_kill_d_recover();
	if (!strcmp(c, "kill_p"))
		return case_kill_p();
	fprintf(stderr, "unknown case %s\n", c);
	return 2;
}
