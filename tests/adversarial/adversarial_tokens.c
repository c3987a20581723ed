/*
 * A token opens only its own rooms (issue 43, finding 2): a request steers
 * D to an impostor's bootstrap server, D registers with the impostor's P
 * rank and so hands it a data-plane token of its own. With that token the
 * impostor writes into a room D granted to a real P (its id known: rooms
 * are the router's small integers). Three processes on loopback:
 *
 *   D         this process: a real lc_decode_t, its pages canaries, a room
 *             VICTIM at the real P and a room BAIT at the impostor
 *   P         a child: a bootstrap server and a real P rank serving VICTIM
 *             once told to
 *   impostor  a child: a fake bootstrap server (raw TCP) and a fake P rank
 *             (a ZeroMQ inbox reading D's REGISTER with the real codec)
 *             that accepts D's registration, takes D's token, data URL and
 *             region descriptors, and then, with its own context, writes
 *             VICTIM's pages at D (every buffer) and its own room's
 *
 * What must hold, over the case's transport (D's listener: tcp, shm, ucx):
 * the impostor's batch for VICTIM fails with LC_ERR_GRANT and not one byte
 * of D's memory outside BAIT's pages changes (every byte checked against
 * the canary) nor is any credited to VICTIM (D's own count: no byte
 * covered, no layer ready), D counts writes_rejected_token and says so in
 * a warning;
 * its batch for BAIT, the room D gave it, lands (the token itself is
 * good: the refusal is the binding's); VICTIM is still Transferring, and
 * once P writes it, it succeeds with P's bytes, page by page.
 *
 * Exit 0 pass, 1 fail, 77 skipped (the transport is not built in).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "control/codec.h"
#include "core/ctx.h"
#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core VM, sanitizers */
#define VICTIM 700
#define BAIT 701
#define IMP_SEED 0xbadull

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

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

/* D's pages: VICTIM's are room 0's of rooms.h, BAIT's room 1's. */
static int64_t victim_page(int j)
{
	return adv_d_page(0, j);
}

static int64_t bait_page(int j)
{
	return adv_d_page(1, j);
}

/* ==== the real P ==== */

static int p_child(void *arg, int go_fd)
{
	(void)arg;
	adv_p_t p;
	lc_sender_t *snd;
	adv_p_up(&p, NULL, adv_seed_of);
	TU_OK(lc_sender_create(p.pf, VICTIM, &snd));
	int st = LC_ROOM_BOOTSTRAPPING;
	for (uint64_t dl = adv_now_ms() + WAIT_MS;
	     (st = lc_sender_poll(snd, NULL)) == LC_ROOM_BOOTSTRAPPING && adv_now_ms() < dl;)
		usleep(2000);
	say("p-boot %d", st);
	if (adv_wait_byte(go_fd) == 'g') {
		int64_t pages[NPAGES];
		for (int j = 0; j < NPAGES; j++)
			pages[j] = 1 + j;
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = VICTIM,
				 .pages = pages,
				 .page_count = NPAGES,
				 .is_last = 1};
		TU_OK(lc_engine_batch_begin(p.eng, 0));
		TU_OK(lc_engine_chunk_add(p.eng, &ch));
		TU_OK(lc_engine_batch_end(p.eng));
		for (int l = 0; l < LAYERS; l++)
			TU_OK(lc_engine_record_cache(p.eng));
		TU_OK(lc_engine_record_aux(p.eng));
		uint8_t meta[META_LEN];
		tu_fill(meta, sizeof meta, VICTIM);
		TU_OK(lc_sender_metadata_set(snd, meta, sizeof meta));
		lc_room_info_t info = {.size = sizeof info};
		for (uint64_t dl = adv_now_ms() + WAIT_MS;
		     (st = lc_sender_poll(snd, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
		     adv_now_ms() < dl;)
			usleep(2000);
		fprintf(stderr, "P room %d: %s \"%s\"\n", VICTIM, lc_room_status_name(st),
			info.reason);
		say("p-done %d", st);
		adv_wait_byte(go_fd); /* EOF: the parent is done */
	}
	lc_sender_destroy(snd);
	adv_p_down(&p);
	return 0;
}

/* ==== the impostor ==== */

/* One batch of writes of the impostor's pages (its own pool, filled from
 * IMP_SEED) into D's pages `dst` of every buffer, for `room`; its status. */
static int imp_write(tu_pool_t *s, lc_conn_t *conn, lc_cq_t *cq, const lc__msg_register_t *reg,
		     const uint32_t *ids, uint64_t room, const int64_t *dst, int n)
{
	lc_write_t w[NBUF * NPAGES];
	int k = 0;
	for (uint32_t b = 0; b < reg->nbuffers && b < NBUF; b++)
		for (int j = 0; j < n; j++)
			w[k++] = (lc_write_t){.local = (uint8_t *)s->bases[b] + (size_t)j * ITEM,
					      .remote_region = ids[reg->buffers[b].region],
					      .remote_offset =
						      reg->buffers[b].offset +
						      (uint64_t)dst[j] * reg->buffers[b].item_len,
					      .length = reg->buffers[b].item_len};
	lc_batch_params_t bp = {.size = sizeof bp, .room = room, .timeout_ms = 10000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, w, (size_t)k, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, WAIT_MS);
	fprintf(stderr, "impostor: room %llu: %s \"%s\"\n", (unsigned long long)room,
		lc_err_name(c.status), c.reason);
	return c.status;
}

static int imp_child(void *arg, int go_fd)
{
	(void)arg;
	tu_pool_t s;
	tu_pool_init(&s, "imp", NULL, LAYERS, PAGES, ITEM);
	tu_fill(s.mem, s.len, IMP_SEED);
	void *zc = zmq_ctx_new();
	void *rx = zmq_socket(zc, ZMQ_PULL);
	int linger = 0;
	char ep[128], parallel[256], rank[256];
	size_t epn = sizeof ep;
	zmq_setsockopt(rx, ZMQ_LINGER, &linger, sizeof linger);
	TU_CHECK(zmq_bind(rx, "tcp://127.0.0.1:*") == 0, "bind");
	TU_CHECK(zmq_getsockopt(rx, ZMQ_LAST_ENDPOINT, ep, &epn) == 0, "endpoint");
	snprintf(parallel, sizeof parallel,
		 "{\"prefill_tp_size\":1,\"prefill_dp_size\":1,\"registered_ranks\":1,"
		 "\"layers\":%d,\"layout_fingerprint\":\"%016llx\"}",
		 LAYERS, (unsigned long long)lc_layout_fingerprint(s.layout));
	snprintf(rank, sizeof rank,
		 "{\"rank_ip\":\"127.0.0.1\",\"rank_port\":%d,\"curve_public_key\":\"\"}",
		 atoi(strrchr(ep, ':') + 1));
	adv_bs_t bs;
	adv_bs_start(&bs);
	adv_bs_set(&bs, parallel, rank);
	say("imp-bs %s", bs.addr);

	/* D's REGISTER: its token, data URL and regions, all the impostor's. */
	lc__msg_t reg, ti;
	TU_CHECK(adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &reg), "no REGISTER from D");
	TU_CHECK(reg.reg.flags & LC__REG_HAS_TOKEN, "D's REGISTER carries no token");
	void *tx = adv_push_to(zc, reg.reg.status_ep);
	lc__msg_t rep = {.type = LC__MSG_REGISTER_REPLY};
	memcpy(rep.secret, reg.secret, LC__MSG_SECRET_LEN);
	snprintf(rep.reply.session, sizeof rep.reply.session, "%s", reg.reg.session);
	adv_send_msg(tx, &rep, 0);
	TU_CHECK(adv_inbox_next(rx, LC__MSG_TRANSFER_INFO, WAIT_MS, &ti) && ti.info.room == BAIT,
		 "no TRANSFER_INFO of room %d", BAIT);
	say("imp-ready %s", reg.reg.data_url);

	if (adv_wait_byte(go_fd) == 'g') {
		lc_cq_t *cq;
		lc_conn_t *conn;
		uint32_t ids[LC__MSG_MAX_REGIONS];
		lc_conn_params_t cp = {.size = sizeof cp, .has_token = 1};
		memcpy(cp.token.bytes, reg.reg.token, LC_TOKEN_LEN);
		TU_OK(lc_cq_create(s.ctx, &cq));
		cp.cq = cq;
		TU_OK(lc_conn_create(s.ctx, reg.reg.data_url, &cp, &conn));
		for (uint32_t i = 0; i < reg.reg.nregions; i++)
			TU_OK(lc_conn_import_region(conn, reg.reg.region_descs[i],
						    reg.reg.region_desc_lens[i], &ids[i]));
		int64_t vp[NPAGES];
		for (int j = 0; j < NPAGES; j++)
			vp[j] = victim_page(j);
		int victim = imp_write(&s, conn, cq, &reg.reg, ids, VICTIM, vp, NPAGES);
		int bait = imp_write(&s, conn, cq, &reg.reg, ids, BAIT, ti.info.pages,
				     (int)LC__MIN(ti.info.page_count, NPAGES));
		say("imp-done %d %d", victim, bait);
		adv_wait_byte(go_fd); /* EOF: the parent is done */
		lc_conn_destroy(conn);
		lc_cq_destroy(cq);
	}
	lc__msg_free(&ti);
	lc__msg_free(&reg);
	zmq_close(tx);
	zmq_close(rx);
	zmq_ctx_term(zc);
	adv_bs_stop(&bs);
	tu_pool_fini(&s);
	return 0;
}

/* ==== D ==== */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool warned; /* D said it refused a write of a token not the room's */

static void on_log(lc_log_level_t level, const char *line, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (level <= LC_LOG_WARN && strstr(line, "whose token the room was not given to"))
		warned = true;
	pthread_mutex_unlock(&log_lock);
}

/* Bytes of D's memory that are not the canary, outside BAIT's pages. */
static size_t changed_outside_bait(const tu_pool_t *s)
{
	size_t n = 0;
	for (int b = 0; b < NBUF; b++)
		for (int64_t pg = 0; pg < PAGES; pg++) {
			bool bait = false;
			for (int j = 0; j < NPAGES; j++)
				bait |= pg == bait_page(j);
			const uint8_t *p = (const uint8_t *)s->bases[b] + (size_t)pg * ITEM;
			for (size_t i = 0; !bait && i < ITEM; i++)
				n += p[i] != CANARY;
		}
	return n;
}

static int poll_past(lc_receiver_t *r, int from, lc_room_info_t *info)
{
	int st = from;
	for (uint64_t dl = adv_now_ms() + WAIT_MS; adv_now_ms() < dl && st == from; usleep(2000))
		st = lc_receiver_poll(r, info);
	return st;
}

int main(int argc, char **argv)
{
	tu_watchdog(110);
	if (argc != 2) {
		fprintf(stderr, "usage: %s tcp|shm|ucx\n", argv[0]);
		return 2;
	}
	const char *tp = argv[1];
	if (!tu_transport_built(tp)) {
		fprintf(stderr, "skip: %s:// is not built in\n", tp);
		return TU_SKIP;
	}
	/* The children first: none inherits D's threads or transport state
	 * (UCX's is not fork-safe). */
	adv_proc_t p, imp;
	char line[512], p_bs[64], imp_bs[64];
	adv_spawn(&p, p_child, NULL);
	adv_spawn(&imp, imp_child, NULL);
	lc_log_set_handler(on_log, NULL);
	tu_pool_t s;
	tu_pool_init(&s, "d0", NULL, LAYERS, PAGES, ITEM);
	memset(s.mem, CANARY, s.len);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = tu_listen_url(tp),
				 .host = "127.0.0.1"};
	lc_decode_t *d;
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		adv_reap(&p, 10000);
		adv_reap(&imp, 10000);
		return TU_SKIP;
	}
	TU_OK(rc);
	TU_CHECK(adv_wait_line(&p, "addr ", WAIT_MS, line, sizeof line) &&
			 sscanf(line, "addr %63s", p_bs) == 1,
		 "P did not come up");
	TU_CHECK(adv_wait_line(&imp, "imp-bs ", WAIT_MS, line, sizeof line) &&
			 sscanf(line, "imp-bs %63s", imp_bs) == 1,
		 "the impostor did not come up");

	/* A room at the real P, and one a request steered to the impostor. */
	lc_receiver_t *victim, *bait;
	lc_room_info_t info = {.size = sizeof info};
	TU_OK(lc_receiver_create(d, p_bs, VICTIM, &victim));
	TU_OK(lc_receiver_create(d, imp_bs, BAIT, &bait));
	int st = poll_past(victim, LC_ROOM_BOOTSTRAPPING, &info);
	TU_CHECK(st == LC_ROOM_BOOTSTRAPPED, "VICTIM: %s \"%s\"", lc_room_status_name(st),
		 info.reason);
	st = poll_past(bait, LC_ROOM_BOOTSTRAPPING, &info);
	TU_CHECK(st == LC_ROOM_BOOTSTRAPPED, "BAIT: %s \"%s\"", lc_room_status_name(st),
		 info.reason);
	int64_t vp[NPAGES], bp[NPAGES];
	for (int j = 0; j < NPAGES; j++) {
		vp[j] = victim_page(j);
		bp[j] = bait_page(j);
	}
	lc_receiver_pages_t pg = {.size = sizeof pg, .pages = vp, .page_count = NPAGES};
	TU_OK(lc_receiver_send(victim, &pg));
	pg.pages = bp;
	TU_OK(lc_receiver_send(bait, &pg));
	TU_CHECK(adv_wait_line(&p, "p-boot ", WAIT_MS, line, sizeof line), "P: no p-boot");
	TU_CHECK(adv_wait_line(&imp, "imp-ready ", WAIT_MS, line, sizeof line),
		 "the impostor got no transfer info");
	fprintf(stderr, "%s\n", line);

	/* The impostor writes VICTIM with its token, then its own room. */
	uint64_t refused0 = 0, refused = 0;
	lc_ctx_counter_by_name(s.ctx, "writes_rejected_token", &refused0);
	adv_go(&imp);
	int v_status = 1, b_status = 1;
	TU_CHECK(adv_wait_line(&imp, "imp-done ", WAIT_MS, line, sizeof line) &&
			 sscanf(line, "imp-done %d %d", &v_status, &b_status) == 2,
		 "the impostor did not finish");
	EXPECT(v_status == LC_ERR_GRANT,
	       "the impostor's batch for room %d (a real P's): %s, want LC_ERR_GRANT", VICTIM,
	       lc_err_name(v_status));
	EXPECT(b_status == 0, "the impostor's batch for its own room %d: %s, want 0", BAIT,
	       lc_err_name(b_status));
	size_t changed = changed_outside_bait(&s);
	EXPECT(changed == 0, "%zu bytes of D's memory outside the impostor's room changed",
	       changed);
	rc = lc_ctx_counter_by_name(s.ctx, "writes_rejected_token", &refused);
	EXPECT(rc == 0 && refused > refused0, "writes_rejected_token: rc %d, %llu (was %llu)", rc,
	       (unsigned long long)refused, (unsigned long long)refused0);
	pthread_mutex_lock(&log_lock);
	EXPECT(warned, "no warning of the refused write");
	pthread_mutex_unlock(&log_lock);
	lc__grant_count_t gc = {0};
	rc = lc__grant_room_count(s.ctx->grants, VICTIM, &gc);
	EXPECT(rc == 0 && gc.covered == 0 && gc.granted == (uint64_t)NBUF * NPAGES * ITEM,
	       "VICTIM credited after the attack: rc %d, %llu of %llu bytes covered", rc,
	       (unsigned long long)gc.covered, (unsigned long long)gc.granted);
	EXPECT(lc_receiver_layers_ready(victim) == 0, "VICTIM has layers ready after the attack");
	st = lc_receiver_poll(victim, &info);
	EXPECT(st == LC_ROOM_TRANSFERRING, "VICTIM after the attack: %s \"%s\"",
	       lc_room_status_name(st), info.reason);

	/* The real P writes VICTIM: Success, P's bytes. */
	adv_go(&p);
	st = poll_past(victim, LC_ROOM_TRANSFERRING, &info);
	EXPECT(st == LC_ROOM_SUCCESS, "VICTIM: %s (%s) \"%s\"", lc_room_status_name(st),
	       lc_fail_reason_name(info.fail_reason), info.reason);
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++)
			bad += tu_verify((const uint8_t *)s.bases[b] + (size_t)vp[j] * ITEM, ITEM,
					 adv_seed_of(b, 1 + j)) >= 0;
	EXPECT(bad == 0, "VICTIM: %d of %d pages differ from P's", bad, NBUF * NPAGES);
	EXPECT(adv_wait_line(&p, "p-done ", WAIT_MS, line, sizeof line) &&
		       atoi(line + 7) == LC_ROOM_SUCCESS,
	       "P: %s", line);

	lc_receiver_destroy(bait);
	lc_receiver_destroy(victim);
	lc_decode_destroy(d);
	EXPECT(adv_reap(&imp, 10000) == 0, "the impostor's exit");
	EXPECT(adv_reap(&p, 10000) == 0, "P's exit");
	tu_pool_fini(&s);
	lc_log_set_handler(NULL, NULL);
	fprintf(stderr, "%s: %s\n", tp, failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
