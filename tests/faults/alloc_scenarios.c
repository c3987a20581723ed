/*
 * The scenarios of lc_alloc_fail (alloc_fail.c): each does a small piece of
 * real work through the public API, returns AF_ERROR at the first call that
 * fails (after undoing everything it made, as an application would), and
 * AF_BROKEN where the library broke a promise on the way: wrong bytes
 * delivered as success, a batch without its completion, a room that never
 * reaches a final status within its deadlines.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc_fail.h"

#define CALL(expr)                                                                                 \
	do {                                                                                       \
		af_stage(#expr);                                                                   \
		int rc_ = (expr);                                                                  \
		if (rc_ < 0) {                                                                     \
			out = af_failed(#expr, rc_);                                               \
			goto undo;                                                                 \
		}                                                                                  \
	} while (0)

static uint8_t byte_at(size_t i, unsigned seed)
{
	return (uint8_t)(i * 13 + seed * 31 + (i >> 12));
}

/* ---- ctx: a context, its knobs, counters, a queue, a token ---- */

static int scen_ctx(void)
{
	int out = AF_SUCCESS;
	lc_ctx_t *ctx = NULL;
	lc_cq_t *cq = NULL;
	lc_token_t tok;
	char buf[64];
	uint64_t v;
	CALL(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "af"},
			   &ctx));
	CALL(lc_ctx_config_set(ctx, "tcp_lanes", "2"));
	CALL(lc_ctx_config_get(ctx, "tcp_lanes", buf, sizeof buf));
	CALL(lc_ctx_counter_by_name(ctx, lc_counter_name(0), &v));
	CALL(lc_cq_create(ctx, &cq));
	CALL(lc_token_issue(ctx, &tok));
	CALL(lc_token_revoke(ctx, &tok));
	/* A bad call after an injected failure must still say why. */
	af_stage("lc_ctx_config_set(bad)");
	if (lc_ctx_config_set(ctx, "no_such_knob", "1") >= 0)
		out = af_broken("an unknown knob was accepted");
undo:
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
	return out;
}

/* ---- region: host and simulated device memory, grants, descriptors ---- */

static int scen_region(void)
{
	int out = AF_SUCCESS;
	lc_ctx_t *ctx = NULL;
	void *mem = NULL, *sim = NULL;
	lc_region_t *r = NULL, *rs = NULL;
	uint8_t desc[LC_REGION_DESC_MAX];
	lc_region_desc_t d;
	const size_t len = 4u << 20;
	CALL(lc_ctx_create(NULL, &ctx));
	CALL(lc_mem_alloc(len, LC_MEM_SHAREABLE, &mem));
	CALL(lc_region_register(ctx, mem, len, &r));
	af_stage("lc_region_pack");
	int dl = lc_region_pack(r, desc, sizeof desc);
	if (dl < 0) {
		out = af_failed("lc_region_pack", dl);
		goto undo;
	}
	CALL(lc_region_unpack(desc, (size_t)dl, &d));
	for (uint64_t room = 1; room <= 3; room++)
		for (uint64_t off = 0; off < 8; off += 2)
			CALL(lc_grant_issue(ctx, room, r, off * 4096 * room, 4096));
	CALL(lc_grant_revoke(ctx, 2));
	CALL(lc_sim_alloc(1u << 20, &sim));
	CALL(lc_region_register(ctx, sim, 1u << 20, &rs));
	CALL(lc_grant_issue(ctx, 9, rs, 0, 8192));
	CALL(lc_sim_write(sim, mem, 4096));
undo:
	if (rs)
		lc_region_deregister(rs);
	if (r)
		lc_region_deregister(r);
	lc_ctx_destroy(ctx);
	if (sim)
		lc_sim_free(sim);
	if (mem)
		lc_mem_free(mem);
	return out;
}

/* ---- xfer.<tp>: a listener, a connection, one batch of writes ---- */

#define XLEN (1u << 20)
#define XROOM 7

/* sim: both ends in simulated device memory (lc_sim_alloc), so that the
 * writes go through the staging ring and the sim copy engine; the bytes are
 * moved and read with lc_sim_write / lc_sim_read. */
static int xfer(const char *listen_url, int sim)
{
	int out = AF_SUCCESS;
	lc_ctx_t *rx = NULL, *tx = NULL;
	uint8_t *dst = NULL, *src = NULL, *host = NULL, *back = NULL;
	lc_region_t *dr = NULL, *sr = NULL;
	lc_listener_t *l = NULL;
	lc_cq_t *cq = NULL;
	lc_conn_t *c = NULL;
	lc_token_t tok;
	char url[256];
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t rid;
	uint64_t id;

	CALL(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "rx"}, &rx));
	host = malloc(XLEN);
	back = malloc(XLEN);
	if (!host || !back) {
		out = af_broken("the test's own malloc failed");
		goto undo;
	}
	for (size_t i = 0; i < XLEN; i++)
		host[i] = byte_at(i, 1);
	if (sim)
		CALL(lc_sim_alloc(XLEN, (void **)&dst));
	else
		CALL(lc_mem_alloc(XLEN, LC_MEM_SHAREABLE, (void **)&dst));
	CALL(lc_region_register(rx, dst, XLEN, &dr));
	af_stage("lc_listener_create");
	int rc = lc_listener_create(rx, listen_url, &l);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		af_broken("%s cannot listen here: %s", listen_url, lc_strerror(rc));
		out = AF_SKIP;
		goto undo;
	}
	CALL(rc);
	CALL(lc_listener_url(l, url, sizeof url));
	CALL(lc_token_issue(rx, &tok));
	CALL(lc_grant_issue(rx, XROOM, dr, 0, XLEN / 2));
	af_stage("lc_region_pack");
	int dl = lc_region_pack(dr, desc, sizeof desc);
	if (dl < 0) {
		out = af_failed("lc_region_pack", dl);
		goto undo;
	}

	CALL(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "tx"}, &tx));
	if (sim) {
		CALL(lc_sim_alloc(XLEN, (void **)&src));
		CALL(lc_sim_write(src, host, XLEN));
	} else {
		CALL(lc_mem_alloc(XLEN, LC_MEM_SHAREABLE, (void **)&src));
		memcpy(src, host, XLEN);
	}
	CALL(lc_region_register(tx, src, XLEN, &sr));
	CALL(lc_cq_create(tx, &cq));
	lc_conn_params_t cp = {
		.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1, .lanes = 2};
	CALL(lc_conn_create(tx, url, &cp, &c));
	CALL(lc_conn_import_region(c, desc, (size_t)dl, &rid));
	lc_write_t w[4];
	for (int i = 0; i < 4; i++)
		w[i] = (lc_write_t){.local = src + (size_t)i * 65536,
				    .remote_offset = (uint64_t)i * 65536,
				    .length = 65536,
				    .remote_region = rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = XROOM, .timeout_ms = 3000};
	CALL(lc_batch_post(c, w, 4, &bp, &id));
	af_stage("lc_cq_wait");
	lc_completion_t done;
	int got = lc_cq_wait(cq, &done, 1, 20000);
	if (got != 1) {
		out = af_broken("batch of 3 s deadline: no completion in 20 s (rc %d)", got);
		goto undo;
	}
	if (done.status) {
		out = af_failed("the batch's completion", done.status);
		if (!done.reason[0])
			out = af_broken("a failed batch without a reason");
		goto undo;
	}
	if (sim)
		CALL(lc_sim_read(dst, back, 4 * 65536));
	else
		memcpy(back, dst, 4 * 65536);
	for (size_t i = 0; i < 4 * 65536; i++)
		if (back[i] != host[i]) {
			out = af_broken("success with byte %zu wrong", i);
			goto undo;
		}
undo:
	af_stage("teardown");
	lc_conn_destroy(c);
	lc_cq_destroy(cq);
	lc_listener_destroy(l);
	if (sr)
		lc_region_deregister(sr);
	if (dr)
		lc_region_deregister(dr);
	lc_ctx_destroy(tx);
	lc_ctx_destroy(rx);
	if (src)
		sim ? lc_sim_free(src) : lc_mem_free(src);
	if (dst)
		sim ? lc_sim_free(dst) : lc_mem_free(dst);
	free(host);
	free(back);
	return out;
}

static int scen_loop(void)
{
	return xfer("loop://auto", 0);
}

static int scen_tcp(void)
{
	return xfer("tcp://127.0.0.1:0", 0);
}

static int scen_tcp_sim(void)
{
	return xfer("tcp://127.0.0.1:0", 1);
}

static int scen_shm(void)
{
	return xfer("shm://auto", 0);
}

static int scen_shm_sim(void)
{
	return xfer("shm://auto", 1);
}

static int scen_ucx(void)
{
	return xfer("ucx://127.0.0.1:0", 0);
}

/* ---- bootstrap: a server, a GET of /health and /metrics, stop ---- */

static int http_get(int port, const char *path)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok = 0;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	char req[128], resp[512];
	if (fd < 0)
		return 0;
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, req, (size_t)n) == n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		/* An answer, or the connection closed: under injected OOM the
		 * server may drop a request it has no memory for; not silence. */
		if (poll(&p, 1, 5000) == 1 && read(fd, resp, sizeof resp - 1) >= 0)
			ok = 1;
	}
	close(fd);
	return ok;
}

static int scen_bootstrap(void)
{
	int out = AF_SUCCESS;
	lc_ctx_t *ctx = NULL;
	lc_bootstrap_t *bs = NULL;
	char addr[64];
	CALL(lc_ctx_create(NULL, &ctx));
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0, .ctx = ctx};
	af_stage("lc_bootstrap_start");
	int rc = lc_bootstrap_start(&bp, &bs);
	if (rc == LC_ENOTSUP) {
		af_broken("no bootstrap server in this build");
		out = AF_SKIP;
		goto undo;
	}
	CALL(rc);
	CALL(lc_bootstrap_addr(bs, addr, sizeof addr));
	af_stage("GET /health");
	if (!http_get(lc_bootstrap_port(bs), "/health")) {
		out = af_broken("GET /health: no answer in 5 s");
		goto undo;
	}
	af_stage("GET /metrics");
	if (!http_get(lc_bootstrap_port(bs), "/metrics"))
		out = af_broken("GET /metrics: no answer in 5 s");
undo:
	af_stage("teardown");
	lc_bootstrap_stop(bs);
	lc_ctx_destroy(ctx);
	return out;
}

/* ---- pd.<tp>: P and D in this one process, one room end to end ---- */

#define LAYERS 2
#define PAGES 8
#define ITEM 4096
#define ROOM 42
#define PROMPT 4

typedef struct side {
	lc_ctx_t *ctx;
	uint8_t *mem;
	lc_region_t *region;
	lc_layout_t *layout;
} side_t;

static int side_init(side_t *m, const char *name, int fill)
{
	void *bases[2 * LAYERS];
	size_t len = (size_t)2 * LAYERS * PAGES * ITEM;
	int rc = lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = name},
			       &m->ctx);
	if (rc < 0)
		return af_failed("lc_ctx_create", rc);
	if ((rc = lc_mem_alloc(len, LC_MEM_SHAREABLE, (void **)&m->mem)) < 0)
		return af_failed("lc_mem_alloc", rc);
	for (size_t i = 0; fill && i < len; i++)
		m->mem[i] = byte_at(i, 2);
	for (int b = 0; b < 2 * LAYERS; b++)
		bases[b] = m->mem + (size_t)b * PAGES * ITEM;
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = LAYERS,
				 .pages = PAGES,
				 .item_len = {ITEM, ITEM},
				 .bases = bases};
	if ((rc = lc_layout_build(&lp, &m->layout)) < 0)
		return af_failed("lc_layout_build", rc);
	if ((rc = lc_region_register(m->ctx, m->mem, len, &m->region)) < 0)
		return af_failed("lc_region_register", rc);
	return 0;
}

static void side_fini(side_t *m)
{
	if (m->region)
		lc_region_deregister(m->region);
	lc_layout_destroy(m->layout);
	lc_ctx_destroy(m->ctx);
	if (m->mem)
		lc_mem_free(m->mem);
}

static int final(int st)
{
	return st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED || st < 0;
}

/* D's pages hold P's pages 0..PROMPT-1 at PAGES-1-i, every buffer. */
static int verify(const side_t *p, const side_t *d)
{
	for (int b = 0; b < 2 * LAYERS; b++)
		for (int i = 0; i < PROMPT; i++) {
			size_t so = ((size_t)b * PAGES + (size_t)i) * ITEM;
			size_t dof = ((size_t)b * PAGES + (size_t)(PAGES - 1 - i)) * ITEM;
			if (memcmp(p->mem + so, d->mem + dof, ITEM))
				return af_broken("D's room succeeded with buffer %d page %d wrong",
						 b, i);
		}
	return AF_SUCCESS;
}

enum { PD_SUM = 1, PD_CANCEL = 2 };

/* PD_SUM: with room_checksum on; PD_CANCEL: D cancels the room once P has
 * its chunk (both sides must still reach a final status). */
static int pd(const char *listen_url, int flags)
{
	int out = AF_SUCCESS, rc;
	side_t P = {0}, D = {0};
	lc_bootstrap_t *bs = NULL;
	lc_prefill_t *p = NULL;
	lc_engine_t *e = NULL;
	lc_sender_t *s = NULL;
	lc_decode_t *d = NULL;
	lc_receiver_t *r = NULL;
	char addr[64];
	uint64_t prefix;
	lc_room_info_t pi = {.size = sizeof pi}, di = {.size = sizeof di};

	if (flags & PD_SUM)
		setenv("LAYERCAKE_ROOM_CHECKSUM", "1", 1); /* this child only */
	af_stage("P's side");
	if ((out = side_init(&P, "P", 1)))
		goto undo;
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	af_stage("lc_bootstrap_start");
	rc = lc_bootstrap_start(&bp, &bs);
	if (rc == LC_ENOTSUP) {
		af_broken("no control plane in this build");
		out = AF_SKIP;
		goto undo;
	}
	CALL(rc);
	CALL(lc_bootstrap_addr(bs, addr, sizeof addr));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = P.layout,
				  .bootstrap = addr,
				  .host = "127.0.0.1",
				  .world_size = 1,
				  .dp_size = 1,
				  .metrics_server = bs};
	CALL(lc_prefill_create(P.ctx, &pp, &p));
	CALL(lc_prefill_engine(p, &e));

	af_stage("D's side");
	if ((out = side_init(&D, "D", 0)))
		goto undo;
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = D.layout,
				 .regions = &D.region,
				 .region_count = 1,
				 .listen_url = listen_url,
				 .host = "127.0.0.1",
				 .tp_size = 1};
	CALL(lc_decode_create(D.ctx, &dp, &d));
	CALL(lc_receiver_create(d, addr, ROOM, &r));
	CALL(lc_sender_create(p, ROOM, &s));

	/* D: Bootstrapped, then its pages; P: past Bootstrapping. */
	uint64_t t0 = af_now_ms();
	int dst, pst;
	af_stage("D bootstrapping");
	while ((dst = lc_receiver_poll(r, &di)) == LC_ROOM_BOOTSTRAPPING &&
	       af_now_ms() - t0 < 20000)
		usleep(1000);
	if (dst == LC_ROOM_BOOTSTRAPPING) {
		out = af_broken("D's room Bootstrapping after 20 s (bootstrap_timeout_ms 3 s)");
		goto undo;
	}
	if (dst == LC_ROOM_FAILED) {
		out = af_failed("D's room (bootstrapping)", LC_ERR_BOOTSTRAP);
		goto undo;
	}
	int64_t pages[PROMPT];
	for (int i = 0; i < PROMPT; i++)
		pages[i] = PAGES - 1 - i;
	lc_receiver_pages_t pg = {
		.size = sizeof pg, .pages = pages, .page_count = PROMPT, .aux_index = -1};
	CALL(lc_receiver_send(r, &pg));
	af_stage("P bootstrapping");
	while ((pst = lc_sender_poll(s, &pi)) == LC_ROOM_BOOTSTRAPPING && af_now_ms() - t0 < 20000)
		usleep(1000);
	if (pst == LC_ROOM_BOOTSTRAPPING) {
		out = af_broken("P's room Bootstrapping 20 s after D sent its pages");
		goto undo;
	}
	if (pst != LC_ROOM_FAILED) {
		CALL(lc_sender_prefix_len(s, &prefix));
		int64_t ppages[PROMPT];
		for (int i = 0; i < PROMPT; i++)
			ppages[i] = i;
		lc_chunk_t c = {.size = sizeof c,
				.room = ROOM,
				.pages = ppages,
				.page_count = PROMPT,
				.is_last = 1};
		CALL(lc_engine_batch_begin(e, 0));
		af_stage("lc_engine_chunk_add");
		rc = lc_engine_chunk_add(e, &c);
		int rc2 = lc_engine_batch_end(e);
		CALL(rc);
		CALL(rc2);
		for (int l = 0; l < LAYERS; l++)
			CALL(lc_engine_record_cache(e));
		CALL(lc_engine_record_aux(e));
		if (flags & PD_CANCEL) {
			af_stage("lc_receiver_cancel");
			rc = lc_receiver_cancel(r, "alloc_fail cancels");
			if (rc < 0 && rc != LC_ERR_STATE) { /* STATE: already final */
				out = af_failed("lc_receiver_cancel", rc);
				goto undo;
			}
		}
		CALL(lc_sender_metadata_set(s, "tok=7", 6));
	}
	af_stage("waiting for final");
	do {
		pst = lc_sender_poll(s, &pi);
		dst = lc_receiver_poll(r, &di);
		if (final(dst) && final(pst))
			break;
		usleep(1000);
	} while (af_now_ms() - t0 < 40000);
	if (!final(dst)) {
		out = af_broken("D's room %s after 40 s (P's %s: %s)", lc_room_status_name(dst),
				lc_room_status_name(pst), pi.reason);
		goto undo;
	}
	if (flags & PD_CANCEL) {
		if (dst != LC_ROOM_FAILED || di.fail_reason != LC_FAIL_CANCELLED)
			out = af_failed("the cancelled room", LC_ERR_CANCELLED);
	} else if (dst == LC_ROOM_SUCCESS) {
		char meta[16];
		if ((out = verify(&P, &D)))
			goto undo;
		if (lc_receiver_metadata(r, meta, sizeof meta) != 6 || strcmp(meta, "tok=7"))
			out = af_broken("D's room succeeded without P's metadata");
	} else {
		out = af_failed("the room", LC_ERR_CANCELLED);
		if (!di.reason[0])
			out = af_broken("D's room failed without a reason");
	}
undo:
	af_stage("teardown");
	lc_receiver_destroy(r);
	lc_sender_destroy(s);
	if (d)
		lc_decode_destroy(d);
	lc_prefill_destroy(p);
	lc_bootstrap_stop(bs);
	side_fini(&D);
	side_fini(&P);
	return out;
}

static int scen_pd_tcp(void)
{
	return pd("tcp://127.0.0.1:0", 0);
}

static int scen_pd_sum(void)
{
	return pd("tcp://127.0.0.1:0", PD_SUM);
}

static int scen_pd_cancel(void)
{
	return pd("tcp://127.0.0.1:0", PD_CANCEL);
}

static int scen_pd_shm(void)
{
	return pd("shm://auto", 0);
}

/* ---- engine.<tp>: P's engine alone, D's side by hand, one room ---- */

static int engine(const char *listen_url)
{
	int out = AF_SUCCESS, rc;
	side_t P = {0}, D = {0};
	lc_engine_t *e = NULL;
	lc_listener_t *l = NULL;
	lc_token_t tok;
	char url[256];
	uint8_t desc[LC_REGION_DESC_MAX];
	int session = 0, open = 0;
	lc_room_info_t ri = {.size = sizeof ri};

	af_stage("P's side");
	if ((out = side_init(&P, "P", 1)))
		goto undo;
	af_stage("D's side");
	if ((out = side_init(&D, "D", 0)))
		goto undo;
	CALL(lc_listener_create(D.ctx, listen_url, &l));
	CALL(lc_listener_url(l, url, sizeof url));
	CALL(lc_token_issue(D.ctx, &tok));
	CALL(lc_grant_issue(D.ctx, ROOM, D.region, 0, (uint64_t)2 * LAYERS * PAGES * ITEM));
	af_stage("lc_region_pack");
	int dl = lc_region_pack(D.region, desc, sizeof desc);
	if (dl < 0) {
		out = af_failed("lc_region_pack", dl);
		goto undo;
	}
	lc_engine_params_t ep = {.size = sizeof ep, .layout = P.layout, .name = "af"};
	CALL(lc_engine_create(P.ctx, &ep, &e));
	const void *descs[1] = {desc};
	size_t lens[1] = {(size_t)dl};
	uint32_t breg[2 * LAYERS] = {0};
	uint64_t boff[2 * LAYERS];
	for (int b = 0; b < 2 * LAYERS; b++)
		boff[b] = (uint64_t)b * PAGES * ITEM;
	lc_session_params_t sp = {.size = sizeof sp,
				  .name = "d0",
				  .url = url,
				  .token = tok,
				  .has_token = 1,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1,
				  .buffer_region = breg,
				  .buffer_offset = boff};
	CALL(lc_engine_session_add(e, &sp));
	session = 1;
	CALL(lc_engine_room_open(e, ROOM));
	open = 1;
	int64_t dpages[PROMPT], ppages[PROMPT];
	for (int i = 0; i < PROMPT; i++) {
		dpages[i] = PAGES - 1 - i;
		ppages[i] = i;
	}
	lc_dst_params_t dst = {.size = sizeof dst,
			       .session = "d0",
			       .pages = dpages,
			       .page_count = PROMPT,
			       .aux_index = -1,
			       .required_dst_count = 1};
	CALL(lc_engine_room_dst_add(e, ROOM, &dst));
	lc_chunk_t c = {.size = sizeof c,
			.room = ROOM,
			.pages = ppages,
			.page_count = PROMPT,
			.is_last = 1};
	CALL(lc_engine_batch_begin(e, 0));
	af_stage("lc_engine_chunk_add");
	rc = lc_engine_chunk_add(e, &c);
	int rc2 = lc_engine_batch_end(e);
	CALL(rc);
	CALL(rc2);
	for (int i = 0; i < LAYERS; i++)
		CALL(lc_engine_record_cache(e));
	CALL(lc_engine_record_aux(e));
	CALL(lc_engine_room_metadata_set(e, ROOM, "tok=7", 6));
	af_stage("waiting for final");
	uint64_t t0 = af_now_ms();
	int st;
	for (;;) {
		rc = lc_engine_room_status(e, ROOM, &ri);
		st = rc < 0 ? rc : ri.status;
		if (final(st) || af_now_ms() - t0 >= 40000)
			break;
		usleep(1000);
	}
	if (!final(st)) {
		out = af_broken("the room %s after 40 s", lc_room_status_name(st));
		goto undo;
	}
	if (st == LC_ROOM_SUCCESS)
		out = verify(&P, &D);
	else
		out = af_failed("the room", LC_ERR_CANCELLED);
undo:
	af_stage("teardown");
	if (open)
		lc_engine_room_close(e, ROOM);
	if (session)
		lc_engine_session_remove(e, "d0");
	lc_engine_destroy(e);
	lc_listener_destroy(l);
	side_fini(&D);
	side_fini(&P);
	return out;
}

static int scen_engine_loop(void)
{
	return engine("loop://auto");
}

static int scen_engine_tcp(void)
{
	return engine("tcp://127.0.0.1:0");
}

const af_scenario_t af_scenarios[] = {
	{"ctx", scen_ctx, 30},
	{"region", scen_region, 30},
	{"loop", scen_loop, 40},
	{"tcp", scen_tcp, 40},
	{"shm", scen_shm, 40},
	{"tcp.sim", scen_tcp_sim, 40},
	{"shm.sim", scen_shm_sim, 40},
	{"ucx", scen_ucx, 40},
	{"bootstrap", scen_bootstrap, 30},
	{"engine.loop", scen_engine_loop, 60},
	{"engine.tcp", scen_engine_tcp, 60},
	{"pd.tcp", scen_pd_tcp, 90},
	{"pd.shm", scen_pd_shm, 90},
	{"pd.sum", scen_pd_sum, 90},
	{"pd.cancel", scen_pd_cancel, 90},
	{NULL, NULL, 0},
};
