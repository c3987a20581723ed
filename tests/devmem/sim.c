/*
 * Simulated device memory and staging (docs/gpu.md), each case its own
 * process:  sim <loop|tcp|shm|ucx> <case>
 *
 *   negative_control  a direct CPU read of sim memory kills the process that
 *                     tries it (SIGSEGV), run in a child
 *   kinds             registration refuses unknown and mismatched kinds;
 *                     descriptors carry the kind
 *   ring_small        a batch larger than the staging ring completes (a
 *                     one-off buffer), and batches that do not all fit wait
 *                     for ring space and complete in order (back-pressure)
 *   revoke_in_flight  lc_grant_revoke returns only once no device copy of
 *                     the room is in flight, and none starts afterwards
 *   cancel_staging    a room cancelled while its sources are being staged
 *                     completes cancelled and lands nothing
 *   mixed_room        one batch mixing host and sim sources into host and
 *                     sim destinations
 *   ucx_put_refused   put mode refuses device memory with LC_ENOTSUP
 *   ack_after_copy    D's landings are pipelined (tcp) but a write is
 *                     acknowledged only once its device copy completed:
 *                     when P sees the batch complete, D's engine has
 *                     finished every byte of it
 *   close_in_flight   P goes away while D's copies are in flight: D's
 *                     receiver waits for them, and the room's revoke then
 *                     returns (no bracket left behind)
 *   close_waiting     P's connection destroyed while batches wait for
 *                     staging ring space: each completes once, the waiting
 *                     ones cancelled, none of their bytes landed
 */
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MIB (1u << 20)
#define ROOM 7

typedef struct pair {
	const char *tp;
	lc_ctx_t *rx, *tx;
	lc_listener_t *l;
	lc_cq_t *cq;
	lc_conn_t *conn;
} pair_t;

static void pair_open(pair_t *p, const char *rx_knobs, const char *tx_knobs)
{
	char url[256];
	lc_token_t tok;
	TU_OK(lc_ctx_create(NULL, &p->rx));
	TU_OK(lc_ctx_create(NULL, &p->tx));
	tu_knobs(p->rx, rx_knobs);
	tu_knobs(p->tx, tx_knobs);
	int rc = lc_listener_create(p->rx, tu_listen_url(p->tp), &p->l);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s cannot listen here\n", p->tp);
		exit(TU_SKIP);
	}
	TU_OK(rc);
	TU_OK(lc_listener_url(p->l, url, sizeof url));
	TU_OK(lc_token_issue(p->rx, &tok));
	TU_OK(lc_cq_create(p->tx, &p->cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = p->cq, .token = tok, .has_token = 1};
	TU_OK(lc_conn_create(p->tx, url, &cp, &p->conn));
}

static uint32_t import(pair_t *p, const lc_region_t *r)
{
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t id;
	int n = lc_region_pack(r, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_conn_import_region(p->conn, desc, (size_t)n, &id));
	return id;
}

static void pair_close(pair_t *p)
{
	lc_ctx_destroy(p->tx);
	lc_ctx_destroy(p->rx);
	lc_cq_destroy(p->cq);
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

/* A sim range holding the pattern of seed (and its host copy in *view). */
static uint8_t *sim_filled(size_t len, uint64_t seed, uint8_t **view)
{
	uint8_t *d;
	TU_OK(lc_sim_alloc(len, (void **)&d));
	*view = malloc(len);
	tu_fill(*view, len, seed);
	TU_OK(lc_sim_write(d, *view, len));
	return d;
}

static void expect_sim(const uint8_t *dev, uint64_t off, const uint8_t *want, size_t len)
{
	uint8_t *got = malloc(len);
	TU_OK(lc_sim_read(dev + off, got, len));
	TU_CHECK(!memcmp(got, want, len), "sim bytes at %llu differ", (unsigned long long)off);
	free(got);
}

static lc_completion_t post_wait(pair_t *p, const lc_write_t *w, size_t n, uint64_t room)
{
	lc_batch_params_t bp = {.size = sizeof bp, .room = room};
	uint64_t id;
	TU_OK(lc_batch_post(p->conn, w, n, &bp, &id));
	lc_completion_t c = tu_wait_one(p->cq, 30000);
	TU_CHECK(c.batch_id == id, "completion of another batch");
	return c;
}

/* ---- cases ---- */

static void case_negative_control(pair_t *p)
{
	uint8_t *d;
	(void)p;
	TU_OK(lc_sim_alloc(4096, (void **)&d));
	pid_t child = fork();
	TU_CHECK(child >= 0, "fork");
	if (child == 0) {
		signal(SIGSEGV, SIG_DFL);
		volatile uint8_t x = *(volatile uint8_t *)d; /* must fault */
		(void)x;
		_exit(0);
	}
	int st = 0;
	TU_CHECK(waitpid(child, &st, 0) == child, "waitpid");
	TU_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
		 "a direct read of sim memory did not fault (status %#x)", st);
	TU_OK(lc_sim_free(d));
}

static void case_kinds(pair_t *p)
{
	lc_ctx_t *ctx;
	lc_region_t *r;
	uint8_t *d, *h;
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_sim_alloc(MIB, (void **)&d));
	TU_OK(lc_mem_alloc(MIB, 0, (void **)&h));
	lc_region_params_t host = {.size = sizeof host, .kind = LC_MEM_KIND_HOST};
	lc_region_params_t sim = {.size = sizeof sim, .kind = LC_MEM_KIND_SIM};
	lc_region_params_t bad = {.size = sizeof bad, .kind = 99};
	TU_CHECK(lc_region_register_ex(ctx, d, MIB, &host, &r) == LC_ERR_MEM_KIND,
		 "sim memory registered as host");
	TU_CHECK(lc_region_register_ex(ctx, h, MIB, &sim, &r) == LC_ERR_MEM_KIND,
		 "host memory registered as sim");
	TU_CHECK(lc_region_register_ex(ctx, h, MIB, &bad, &r) == -EINVAL, "kind 99 accepted");
	TU_CHECK(counter(ctx, "regions_rejected_kind") == 3, "refusals not counted");
	TU_OK(lc_region_register(ctx, d, MIB, &r)); /* detected */
	TU_CHECK(lc_region_kind(r) == LC_MEM_KIND_SIM, "kind %d", lc_region_kind(r));
	uint8_t desc[LC_REGION_DESC_MAX];
	lc_region_desc_t dd;
	int n = lc_region_pack(r, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_region_unpack(desc, (size_t)n, &dd));
	TU_CHECK(dd.mem_kind == LC_MEM_KIND_SIM, "descriptor kind %d", dd.mem_kind);
	lc_region_t *hr;
	TU_OK(lc_region_register_ex(ctx, h, MIB, &host, &hr));
	TU_CHECK(lc_region_kind(hr) == LC_MEM_KIND_HOST, "host kind");
	lc_ctx_destroy(ctx);
	TU_OK(lc_sim_free(d));
	lc_mem_free(h);
	(void)p;
}

/* Ring of 1 MiB: one 6 MiB batch (overflow), then 16 batches of 512 KiB
 * posted at once (at most two fit: the rest wait). */
static void case_ring_small(pair_t *p)
{
	enum { N = 16, BIG = 6 * MIB, SMALL = MIB / 2 };
	uint8_t *view, *dview, *dst;
	pair_open(p, NULL, "staging_ring_mib=1,sim_latency_us=2000");
	uint8_t *src = sim_filled(BIG + N * SMALL, 3, &view);
	lc_region_t *sr, *dr;
	TU_OK(lc_region_register(p->tx, src, BIG + N * SMALL, &sr));
	dst = sim_filled(BIG + N * SMALL, 4, &dview);
	TU_OK(lc_region_register(p->rx, dst, BIG + N * SMALL, &dr));
	TU_OK(lc_grant_issue(p->rx, ROOM, dr, 0, BIG + N * SMALL));
	uint32_t rid = import(p, dr);
	lc_write_t big = {.local = src, .length = BIG, .remote_region = rid};
	lc_completion_t c = post_wait(p, &big, 1, ROOM);
	TU_CHECK(c.status == 0, "big batch: %s (%s)", lc_err_name(c.status), c.reason);
	TU_CHECK(counter(p->tx, "staging_overflows") == 1, "no overflow counted");
	uint64_t ids[N];
	for (int i = 0; i < N; i++) {
		lc_write_t w = {.local = src + BIG + i * SMALL,
				.remote_offset = BIG + (uint64_t)i * SMALL,
				.length = SMALL,
				.remote_region = rid};
		lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM};
		TU_OK(lc_batch_post(p->conn, &w, 1, &bp, &ids[i]));
	}
	for (int i = 0; i < N; i++) {
		c = tu_wait_one(p->cq, 30000);
		TU_CHECK(c.status == 0, "batch: %s (%s)", lc_err_name(c.status), c.reason);
	}
	TU_CHECK(counter(p->tx, "staging_waits") > 0, "no batch waited for ring space");
	expect_sim(dst, 0, view, BIG + N * SMALL);
	pair_close(p);
	lc_sim_free(src);
	lc_sim_free(dst);
	free(view);
	free(dview);
}

typedef struct revoker {
	pair_t *p;
	uint64_t copies_at_return;
} revoker_t;

static void *revoke_soon(void *arg)
{
	revoker_t *r = arg;
	uint64_t t0 = (uint64_t)time(NULL);
	while (!counter(r->p->rx, "device_copies") && (uint64_t)time(NULL) - t0 < 10)
		usleep(200);
	lc_grant_revoke(r->p->rx, ROOM);
	r->copies_at_return = counter(r->p->rx, "device_copies");
	return NULL;
}

/* D's copies take 20 ms each: revoke mid-batch, then no copy may follow. */
static void case_revoke_in_flight(pair_t *p)
{
	enum { N = 32, LEN = 256 << 10 };
	uint8_t *h, *view;
	pair_open(p, "sim_latency_us=20000", NULL);
	TU_OK(lc_mem_alloc(N * LEN, 0, (void **)&h));
	tu_fill(h, N * LEN, 5);
	lc_region_t *sr, *dr;
	TU_OK(lc_region_register(p->tx, h, N * LEN, &sr));
	uint8_t *dst = sim_filled(N * LEN, 6, &view);
	TU_OK(lc_region_register(p->rx, dst, N * LEN, &dr));
	TU_OK(lc_grant_issue(p->rx, ROOM, dr, 0, N * LEN));
	uint32_t rid = import(p, dr);
	lc_write_t w[N];
	for (int i = 0; i < N; i++)
		w[i] = (lc_write_t){.local = h + i * LEN,
				    .remote_offset = (uint64_t)i * LEN,
				    .length = LEN,
				    .remote_region = rid};
	revoker_t rv = {p, 0};
	pthread_t t;
	pthread_create(&t, NULL, revoke_soon, &rv);
	lc_completion_t c = post_wait(p, w, N, ROOM);
	pthread_join(t, NULL);
	TU_CHECK(c.status == LC_ERR_GRANT, "status %s (%s), expected the revoke's",
		 lc_err_name(c.status), c.reason);
	usleep(200000);
	uint64_t later = counter(p->rx, "device_copies");
	TU_CHECK(later == rv.copies_at_return,
		 "%llu device copies completed after lc_grant_revoke returned",
		 (unsigned long long)(later - rv.copies_at_return));
	pair_close(p);
	lc_sim_free(dst);
	lc_mem_free(h);
	free(view);
}

/* P's copies take 50 ms each: cancel the room while staging. */
static void case_cancel_staging(pair_t *p)
{
	enum { N = 8, LEN = MIB };
	uint8_t *view, *dst;
	pair_open(p, NULL, "sim_latency_us=50000");
	uint8_t *src = sim_filled(N * LEN, 7, &view);
	lc_region_t *sr, *dr;
	TU_OK(lc_region_register(p->tx, src, N * LEN, &sr));
	TU_OK(lc_mem_alloc(N * LEN, 0, (void **)&dst));
	TU_OK(lc_region_register(p->rx, dst, N * LEN, &dr));
	TU_OK(lc_grant_issue(p->rx, ROOM, dr, 0, N * LEN));
	uint32_t rid = import(p, dr);
	lc_write_t w[N];
	for (int i = 0; i < N; i++)
		w[i] = (lc_write_t){.local = src + i * LEN,
				    .remote_offset = (uint64_t)i * LEN,
				    .length = LEN,
				    .remote_region = rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM};
	uint64_t id;
	TU_OK(lc_batch_post(p->conn, w, N, &bp, &id));
	usleep(20000);
	TU_CHECK(lc_conn_room_cancel(p->conn, ROOM) == 1, "nothing cancelled");
	lc_completion_t c = tu_wait_one(p->cq, 30000);
	TU_CHECK(c.status == LC_ERR_CANCELLED, "status %s", lc_err_name(c.status));
	usleep(600000); /* the staging copies finish; nothing may be sent */
	TU_CHECK(counter(p->rx, "bytes_applied") == 0, "a cancelled room's bytes landed");
	/* The ring is free again: the next batch goes through. */
	c = post_wait(p, w, 1, ROOM);
	TU_CHECK(c.status == 0, "after cancel: %s (%s)", lc_err_name(c.status), c.reason);
	TU_CHECK(!memcmp(dst, view, LEN), "bytes after cancel");
	pair_close(p);
	lc_sim_free(src);
	lc_mem_free(dst);
	free(view);
}

/* Host and sim sources into host and sim destinations, one batch. */
static void case_mixed_room(pair_t *p)
{
	enum { LEN = MIB };
	uint8_t *hs, *hd, *sview, *dview;
	pair_open(p, NULL, NULL);
	TU_OK(lc_mem_alloc(LEN, 0, (void **)&hs));
	tu_fill(hs, LEN, 8);
	TU_OK(lc_mem_alloc(LEN, 0, (void **)&hd));
	uint8_t *ss = sim_filled(LEN, 9, &sview), *sd = sim_filled(LEN, 10, &dview);
	lc_region_t *r[4];
	TU_OK(lc_region_register(p->tx, hs, LEN, &r[0]));
	TU_OK(lc_region_register(p->tx, ss, LEN, &r[1]));
	TU_OK(lc_region_register(p->rx, hd, LEN, &r[2]));
	TU_OK(lc_region_register(p->rx, sd, LEN, &r[3]));
	TU_OK(lc_grant_issue(p->rx, ROOM, r[2], 0, LEN));
	TU_OK(lc_grant_issue(p->rx, ROOM, r[3], 0, LEN));
	uint32_t host_id = import(p, r[2]), sim_id = import(p, r[3]);
	enum { Q = LEN / 4 };
	lc_write_t w[4] = {
		{.local = hs, .remote_offset = 0, .length = Q, .remote_region = host_id},
		{.local = ss + Q, .remote_offset = Q, .length = Q, .remote_region = host_id},
		{.local = hs + 2 * Q, .remote_offset = 2 * Q, .length = Q, .remote_region = sim_id},
		{.local = ss + 3 * Q, .remote_offset = 3 * Q, .length = Q, .remote_region = sim_id},
	};
	lc_completion_t c = post_wait(p, w, 4, ROOM);
	TU_CHECK(c.status == 0, "mixed batch: %s (%s)", lc_err_name(c.status), c.reason);
	TU_CHECK(!memcmp(hd, hs, Q) && !memcmp(hd + Q, sview + Q, Q), "host destination bytes");
	expect_sim(sd, 2 * Q, hs + 2 * Q, Q);
	expect_sim(sd, 3 * Q, sview + 3 * Q, Q);
	pair_close(p);
	lc_sim_free(ss);
	lc_sim_free(sd);
	lc_mem_free(hs);
	lc_mem_free(hd);
	free(sview);
	free(dview);
}

static void case_ucx_put_refused(pair_t *p)
{
	lc_ctx_t *ctx;
	lc_listener_t *l;
	lc_region_t *r;
	uint8_t *d, desc[LC_REGION_DESC_MAX];
	if (strcmp(p->tp, "ucx")) {
		fprintf(stderr, "skip: ucx only\n");
		exit(TU_SKIP);
	}
	TU_OK(lc_ctx_create(NULL, &ctx));
	tu_knobs(ctx, "ucx_data=1,ucx_allow_sw_rma=1");
	TU_OK(lc_listener_create(ctx, "ucx://127.0.0.1:0", &l));
	TU_OK(lc_sim_alloc(MIB, (void **)&d));
	TU_OK(lc_region_register(ctx, d, MIB, &r));
	int rc = lc_region_pack(r, desc, sizeof desc);
	TU_CHECK(rc == LC_ENOTSUP, "put mode packed device memory: %d", rc);
	lc_ctx_destroy(ctx);
	lc_sim_free(d);
}

/* Host source, sim destination whose copies take 10 ms each. */
static lc_write_t *slow_dst(pair_t *p, int n, size_t len, uint8_t **h, uint8_t **dst,
			    uint8_t **view, lc_region_t **dro)
{
	lc_region_t *sr, *dr;
	pair_open(p, "sim_latency_us=10000", NULL);
	TU_OK(lc_mem_alloc((size_t)n * len, 0, (void **)h));
	tu_fill(*h, (size_t)n * len, 8);
	TU_OK(lc_region_register(p->tx, *h, (size_t)n * len, &sr));
	*dst = sim_filled((size_t)n * len, 9, view);
	TU_OK(lc_region_register(p->rx, *dst, (size_t)n * len, &dr));
	TU_OK(lc_grant_issue(p->rx, ROOM, dr, 0, (uint64_t)n * len));
	uint32_t rid = import(p, dr);
	*dro = dr;
	lc_write_t *w = calloc((size_t)n, sizeof *w);
	for (int i = 0; i < n; i++)
		w[i] = (lc_write_t){.local = *h + (size_t)i * len,
				    .remote_offset = (uint64_t)i * len,
				    .length = len,
				    .remote_region = rid};
	return w;
}

static void case_ack_after_copy(pair_t *p)
{
	enum { N = 16, LEN = MIB };
	uint8_t *h, *dst, *view;
	lc_region_t *dr;
	lc_write_t *w = slow_dst(p, N, LEN, &h, &dst, &view, &dr);
	TU_OK(lc_grant_issue(p->rx, ROOM + 1, dr, 0, (uint64_t)N * LEN)); /* round 2's room */
	for (int round = 0; round < 2; round++) { /* whole writes, then 2.5 slots each */
		size_t len = round ? (5 * MIB) / 2 : LEN, n = (size_t)N * LEN / len;
		for (size_t i = 0; i < n; i++) {
			w[i].local = h + i * len;
			w[i].remote_offset = i * len;
			w[i].length = len;
		}
		uint64_t before = counter(p->rx, "device_copy_bytes");
		lc_completion_t c = post_wait(p, w, n, ROOM + (uint64_t)round);
		TU_CHECK(c.status == 0, "status %s (%s)", lc_err_name(c.status), c.reason);
		uint64_t copied = counter(p->rx, "device_copy_bytes") - before;
		TU_CHECK(copied >= n * len,
			 "acknowledged with %llu of %zu bytes copied to the device",
			 (unsigned long long)copied, n * len);
		expect_sim(dst, 0, h, n * len);
	}
	pair_close(p);
	lc_sim_free(dst);
	lc_mem_free(h);
	free(view);
	free(w);
}

static void case_close_in_flight(pair_t *p)
{
	enum { N = 32, LEN = MIB };
	uint8_t *h, *dst, *view;
	lc_region_t *dr;
	lc_write_t *w = slow_dst(p, N, LEN, &h, &dst, &view, &dr);
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM};
	uint64_t id;
	TU_OK(lc_batch_post(p->conn, w, N, &bp, &id));
	uint64_t t0 = (uint64_t)time(NULL);
	while (!counter(p->rx, "device_copies") && (uint64_t)time(NULL) - t0 < 10)
		usleep(200);
	lc_ctx_destroy(p->tx); /* P goes: its lanes close at D mid-batch */
	p->tx = NULL;
	TU_OK(lc_grant_revoke(p->rx, ROOM)); /* must not wait for a lost bracket */
	uint64_t at = counter(p->rx, "device_copies");
	usleep(100000);
	TU_CHECK(counter(p->rx, "device_copies") == at, "a copy completed after the revoke");
	lc_ctx_destroy(p->rx);
	lc_cq_destroy(p->cq);
	lc_sim_free(dst);
	lc_mem_free(h);
	free(view);
	free(w);
}

/* Ring of 1 MiB and slow copies: of 8 batches of 512 KiB, two stage and six
 * wait for ring space; the connection is destroyed at once. Every batch
 * completes exactly once (the waiting ones LC_ERR_CANCELLED) before
 * lc_conn_destroy returns, and no cancelled batch's byte lands. */
static void case_close_waiting(pair_t *p)
{
	enum { N = 8, SMALL = MIB / 2 };
	uint8_t *view, *dview;
	pair_open(p, NULL, "staging_ring_mib=1,sim_latency_us=100000");
	uint8_t *src = sim_filled(N * SMALL, 5, &view);
	uint8_t *dst = malloc(N * SMALL);
	dview = malloc(N * SMALL);
	memset(dst, 0xc3, N * SMALL);
	memcpy(dview, dst, N * SMALL);
	lc_region_t *sr, *dr;
	TU_OK(lc_region_register(p->tx, src, N * SMALL, &sr));
	TU_OK(lc_region_register(p->rx, dst, N * SMALL, &dr));
	TU_OK(lc_grant_issue(p->rx, ROOM, dr, 0, N * SMALL));
	uint32_t rid = import(p, dr);
	uint64_t ids[N];
	for (int i = 0; i < N; i++) {
		lc_write_t w = {.local = src + i * SMALL,
				.remote_offset = (uint64_t)i * SMALL,
				.length = SMALL,
				.remote_region = rid};
		lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM};
		TU_OK(lc_batch_post(p->conn, &w, 1, &bp, &ids[i]));
	}
	TU_CHECK(counter(p->tx, "staging_waits") > 0, "no batch waited for ring space");
	lc_conn_destroy(p->conn);
	int seen[N] = {0}, cancelled = 0;
	lc_completion_t c[N + 1];
	int n = lc_cq_poll(p->cq, c, N + 1);
	TU_CHECK(n == N, "%d completions of %d batches at lc_conn_destroy", n, N);
	for (int k = 0; k < n; k++) {
		int i = 0;
		while (i < N && ids[i] != c[k].batch_id)
			i++;
		TU_CHECK(i < N && !seen[i]++, "completion of batch %llu",
			 (unsigned long long)c[k].batch_id);
		TU_CHECK(c[k].status == 0 || c[k].status == LC_ERR_CANCELLED, "batch %d: %s (%s)", i,
			 lc_err_name(c[k].status), c[k].reason);
		if (c[k].status == LC_ERR_CANCELLED) {
			cancelled++;
			TU_CHECK(!memcmp(dst + i * SMALL, dview + i * SMALL, SMALL),
				 "a cancelled batch's bytes landed");
		}
	}
	TU_CHECK(cancelled > 0, "no waiting batch was cancelled");
	pair_close(p);
	lc_sim_free(src);
	free(dst);
	free(view);
	free(dview);
}

static const struct {
	const char *name;
	void (*run)(pair_t *);
} cases[] = {
	{"ack_after_copy", case_ack_after_copy},
	{"close_in_flight", case_close_in_flight},
	{"close_waiting", case_close_waiting},
	{"negative_control", case_negative_control},
	{"kinds", case_kinds},
	{"ring_small", case_ring_small},
	{"revoke_in_flight", case_revoke_in_flight},
	{"cancel_staging", case_cancel_staging},
	{"mixed_room", case_mixed_room},
	{"ucx_put_refused", case_ucx_put_refused},
};

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: sim <transport> <case>\n");
		return 2;
	}
	tu_watchdog(110);
	signal(SIGPIPE, SIG_IGN);
	pair_t p = {.tp = argv[1]};
	if (!tu_transport_built(p.tp)) {
		fprintf(stderr, "skip: transport %s is not built in\n", p.tp);
		return TU_SKIP;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (strcmp(argv[2], cases[i].name))
			continue;
		cases[i].run(&p);
		printf("sim %s %s: ok\n", p.tp, cases[i].name);
		return 0;
	}
	fprintf(stderr, "unknown case %s\n", argv[2]);
	return 2;
}
