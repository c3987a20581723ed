/*
 * The ucx transport against an attacker that speaks UCX itself (issue 13,
 * findings 13 and 14):
 *
 *   raw_rma_am: D listens in data mode am (the default). A child process
 *       with its own UCP context (RMA and AM enabled) connects to D's
 *       listener and, knowing the exact address of D's region (the parent
 *       tells it: a perfect guess) and holding an rkey it packed itself,
 *       tries ucp_put_nbx and ucp_get_nbx on that memory, then sends WRITE
 *       (eager and rendezvous) and LEASE messages without ever presenting a
 *       token. D's memory must keep its canaries, the get must bring back
 *       nothing of D's, D's descriptor must carry no ucx key, and D counts
 *       the refused messages (conns_rejected_auth).
 *   raw_idle: the same raw peer connects and says nothing: D closes its
 *       endpoint after connect_timeout_ms, as tcp does.
 *   put_sw_rma_refused: D and P in data mode put, without
 *       ucx_allow_sw_rma, on loopback, where UCX emulates RMA in software:
 *       the connection is refused with LC_ENOTSUP, D counts
 *       conns_refused_sw_rma, nothing lands.
 *   am_revoke_rndv: data mode am with 4 MiB writes (rendezvous): in rounds,
 *       D revokes the room while the writes are landing; a snapshot of D's
 *       memory taken when lc_grant_revoke returns must still match after
 *       P's batch has ended.
 *
 * Loopback only (UCX_TLS from ctest); exit 77 where ucx is not built in.
 */
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include "testutil.h"
#include "transport/ucx/wire.h"

#define REGION (64u << 20)
#define CANARY 0xa5
#define ROOM 21

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

static bool all_canary(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != CANARY)
			return false;
	return true;
}

/* D: a context whose data mode is `mode`, a canary region granted to ROOM,
 * a ucx listener, and the region's packed descriptor. */
typedef struct dside {
	lc_ctx_t *ctx;
	lc_region_t *r;
	lc_listener_t *l;
	uint8_t *dst;
	char url[256];
	lc_token_t token;
	uint8_t desc[LC_REGION_DESC_MAX];
	int dlen;
} dside_t;

static void d_setup(dside_t *d, const char *mode)
{
	TU_OK(lc_ctx_create(NULL, &d->ctx));
	TU_OK(lc_ctx_config_set(d->ctx, "ucx_data", mode));
	TU_OK(lc_ctx_config_set(d->ctx, "ucx_allow_sw_rma", "0"));
	TU_OK(lc_mem_alloc(REGION, 0, (void **)&d->dst));
	memset(d->dst, CANARY, REGION);
	TU_OK(lc_region_register(d->ctx, d->dst, REGION, &d->r));
	TU_OK(lc_listener_create(d->ctx, "ucx://127.0.0.1:0", &d->l));
	TU_OK(lc_listener_url(d->l, d->url, sizeof d->url));
	TU_OK(lc_token_issue(d->ctx, &d->token));
	TU_OK(lc_grant_issue(d->ctx, ROOM, d->r, 0, REGION));
	d->dlen = lc_region_pack(d->r, d->desc, sizeof d->desc);
	TU_OK(d->dlen);
}

static void d_teardown(dside_t *d)
{
	lc_listener_destroy(d->l);
	lc_ctx_destroy(d->ctx);
	lc_mem_free(d->dst);
}

/* ---- raw_rma_am: the attacker ---- */

typedef struct target {
	int port;
	uint64_t addr; /* D's region */
	int idle;      /* raw_idle: connect, send nothing */
} target_t;

typedef struct report {
	int connected;
	int closed_by_d;            /* raw_idle: D closed the endpoint */
	int put_status, get_status; /* UCS status of the request; 1: still pending */
	int get_read_canary;        /* the get brought back D's bytes */
} report_t;

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)ep, (void)status;
	*(int *)arg = 1;
}

static void req_done(void *req, ucs_status_t status, void *user)
{
	(void)req;
	*(int *)user = status;
}

static void progress_for(ucp_worker_h w, int ms)
{
	uint64_t until = tu_now_ms() + (uint64_t)ms;
	while (tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
}

/* Wait for a request until ms pass; its UCS status, or 1 if still pending. */
static int req_wait(ucp_worker_h w, ucs_status_ptr_t r, int *st, int ms)
{
	if (r == NULL)
		return UCS_OK;
	if (UCS_PTR_IS_ERR(r))
		return UCS_PTR_STATUS(r);
	uint64_t until = tu_now_ms() + (uint64_t)ms;
	while (*st == 1 && tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
	return *st;
}

/* D's replies (HELLO_REPLY with LC_ERR_AUTH): read and ignored. UCX 1.13
 * crashes on a reply message for an id without a handler. */
static ucs_status_t am_ignore(void *arg, const void *h, size_t hl, void *d, size_t l,
			      const ucp_am_recv_param_t *p)
{
	(void)arg, (void)h, (void)hl, (void)d, (void)l, (void)p;
	return UCS_OK;
}

static void am_send(ucp_ep_h ep, ucp_worker_h w, unsigned id, const void *h, size_t hl,
		    const void *d, size_t dl, uint32_t flags)
{
	int st = 1;
	ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						 UCP_OP_ATTR_FIELD_USER_DATA |
						 UCP_OP_ATTR_FIELD_FLAGS,
				 .cb.send = req_done,
				 .user_data = &st,
				 .flags = UCP_AM_SEND_FLAG_REPLY | flags};
	ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, h, hl, d, dl, &p);
	req_wait(w, r, &st, 1000);
}

static void attacker(int rd, int wr)
{
	target_t t;
	report_t rep = {.put_status = 1, .get_status = 1};
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	TU_CHECK(read(rd, &t, sizeof t) == (ssize_t)sizeof t, "target");
	ucp_config_t *cfg;
	ucp_context_h uctx;
	ucp_worker_h w;
	ucp_ep_h ep;
	TU_CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
	ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES,
			   .features = UCP_FEATURE_RMA | UCP_FEATURE_AM};
	TU_CHECK(ucp_init(&up, cfg, &uctx) == UCS_OK, "ucp_init");
	ucp_config_release(cfg);
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	TU_CHECK(ucp_worker_create(uctx, &wp, &w) == UCS_OK, "worker");
	for (unsigned id = UW_HELLO; id <= UW_WRITE; id++) {
		ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
							   UCP_AM_HANDLER_PARAM_FIELD_CB,
					     .id = id,
					     .cb = am_ignore};
		TU_CHECK(ucp_worker_set_am_recv_handler(w, &hp) == UCS_OK, "am handler");
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t.port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int failed = 0;
	const char *mode = getenv("LAYERCAKE_UCX_ERR_MODE"); /* D's, which UCX needs matched */
	ucp_ep_params_t ep_p = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof sa},
		.err_mode = mode && !strcmp(mode, "none") ? UCP_ERR_HANDLING_MODE_NONE
							  : UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = ep_err, .arg = &failed},
	};
	TU_CHECK(ucp_ep_create(w, &ep_p, &ep) == UCS_OK, "ep_create");
	/* Wireup: a flush completes once the endpoint is connected. */
	int st = 1;
	ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						  UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.send = req_done,
				  .user_data = &st};
	rep.connected = req_wait(w, ucp_ep_flush_nbx(ep, &fp), &st, 3000) == UCS_OK && !failed;
	if (t.idle) { /* no HELLO: D must close us after its connect_timeout_ms */
		uint64_t until = tu_now_ms() + 5000;
		while (!failed && tu_now_ms() < until)
			progress_for(w, 10);
		rep.closed_by_d = failed;
		TU_CHECK(write(wr, &rep, sizeof rep) == (ssize_t)sizeof rep, "report");
		char c;
		TU_CHECK(read(rd, &c, 1) <= 1, "exit signal");
		_exit(0);
	}

	/* An rkey of our own memory: its memory domains (tcp's registers
	 * nothing) are all a software path needs; the address is D's. */
	static uint8_t mine[4096], got[4096];
	memset(mine, 0x5a, sizeof mine);
	memset(got, 0, sizeof got);
	ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
						 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
				   .address = mine,
				   .length = sizeof mine};
	ucp_mem_h memh;
	void *kbuf;
	size_t klen;
	ucp_rkey_h rkey;
	TU_CHECK(ucp_mem_map(uctx, &mp, &memh) == UCS_OK, "mem_map");
	TU_CHECK(ucp_rkey_pack(uctx, memh, &kbuf, &klen) == UCS_OK, "rkey_pack");
	TU_CHECK(ucp_ep_rkey_unpack(ep, kbuf, &rkey) == UCS_OK, "rkey_unpack");

	int ps = 1, gs = 1;
	ucp_request_param_t pp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						  UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.send = req_done,
				  .user_data = &ps};
	ucs_status_ptr_t pr = ucp_put_nbx(ep, mine, sizeof mine, t.addr + 4096, rkey, &pp);
	rep.put_status = req_wait(w, pr, &ps, 500);
	st = 1;
	fp.user_data = &st;
	req_wait(w, ucp_ep_flush_nbx(ep, &fp), &st, 1000); /* remote completion, if any */
	ucp_request_param_t gp = pp;
	gp.user_data = &gs;
	ucs_status_ptr_t gr = ucp_get_nbx(ep, got, sizeof got, t.addr + 8192, rkey, &gp);
	rep.get_status = req_wait(w, gr, &gs, 1000);
	rep.get_read_canary = got[0] == CANARY && got[sizeof got - 1] == CANARY;

	/* Layercake's own messages, but no HELLO: a lease, then writes. */
	uint8_t lease[UW_LEASE_HDR + UW_LEASE_ENTRY];
	uw_lease_t lh = {.seq = 1, .room = ROOM, .n = 1, .flags = UW_LEASE_F_AM};
	uw_lease_entry_t le = {.region = 0, .offset = 12288, .length = 4096};
	uw_lease_encode(lease, &lh);
	uw_lease_entry_encode(lease, 0, &le);
	am_send(ep, w, UW_LEASE, NULL, 0, lease, sizeof lease, UCP_AM_SEND_FLAG_EAGER);
	uint8_t hdr[UW_WRITE_HDR];
	uw_write_encode(hdr, 1, 0);
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, mine, sizeof mine, UCP_AM_SEND_FLAG_EAGER);
	static uint8_t big[1 << 20];
	memset(big, 0x5a, sizeof big);
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, big, sizeof big, UCP_AM_SEND_FLAG_RNDV);
	progress_for(w, 300);
	TU_CHECK(write(wr, &rep, sizeof rep) == (ssize_t)sizeof rep, "report");
	/* Stay until D has checked (the requests still out die with us). */
	char c;
	TU_CHECK(read(rd, &c, 1) <= 1, "exit signal");
	_exit(0);
}

static pid_t spawn_attacker(int to[2], int from[2])
{
	TU_CHECK(pipe(to) == 0 && pipe(from) == 0, "pipe");
	pid_t pid = fork(); /* before D starts any thread or UCX */
	TU_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		attacker(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	return pid;
}

/* A raw peer that connects and never says HELLO is closed after D's
 * connect_timeout_ms, as on tcp. */
static void case_raw_idle(void)
{
	int to[2], from[2];
	pid_t pid = spawn_attacker(to, from);
	dside_t d;
	d_setup(&d, "am");
	TU_OK(lc_ctx_config_set(d.ctx, "connect_timeout_ms", "500"));
	const char *colon = strrchr(d.url, ':');
	target_t t = {.port = atoi(colon + 1), .idle = 1};
	TU_CHECK(write(to[1], &t, sizeof t) == (ssize_t)sizeof t, "target");
	report_t rep;
	TU_CHECK(read(from[0], &rep, sizeof rep) == (ssize_t)sizeof rep, "attacker report");
	fprintf(stderr, "idle raw peer: connected %d, closed by D %d\n", rep.connected,
		rep.closed_by_d);
	TU_CHECK(rep.connected, "the attacker never connected: not a test");
	/* Without UCP_ERR_HANDLING_MODE_PEER (sm) UCX need not tell the peer. */
	const char *mode = getenv("LAYERCAKE_UCX_ERR_MODE");
	if (!mode || strcmp(mode, "none"))
		TU_CHECK(rep.closed_by_d, "D kept an endpoint that never presented a token");
	close(to[1]);
	int ws;
	waitpid(pid, &ws, 0);
	TU_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "attacker exited badly (%d)", ws);
	d_teardown(&d);
}

static void case_raw_rma_am(void)
{
	int to[2], from[2];
	pid_t pid = spawn_attacker(to, from);
	dside_t d;
	d_setup(&d, "am");
	/* am mode publishes no key: the descriptor is the 32-byte header. */
	TU_CHECK(d.dlen == UW_DESC_HEADER, "am-mode descriptor of %d bytes (a ucx key?)", d.dlen);
	const char *colon = strrchr(d.url, ':');
	target_t t = {.port = atoi(colon + 1), .addr = (uint64_t)(uintptr_t)d.dst};
	TU_CHECK(write(to[1], &t, sizeof t) == (ssize_t)sizeof t, "target");
	report_t rep;
	TU_CHECK(read(from[0], &rep, sizeof rep) == (ssize_t)sizeof rep, "attacker report");
	usleep(200000);
	fprintf(stderr,
		"attacker: connected %d, put %s, get %s, get read D's bytes %d; D: "
		"conns_rejected_auth %llu, frames_malformed %llu\n",
		rep.connected, rep.put_status == 1 ? "pending" : ucs_status_string(rep.put_status),
		rep.get_status == 1 ? "pending" : ucs_status_string(rep.get_status),
		rep.get_read_canary, (unsigned long long)counter(d.ctx, "conns_rejected_auth"),
		(unsigned long long)counter(d.ctx, "frames_malformed"));
	TU_CHECK(rep.connected, "the attacker never connected: not a test");
	TU_CHECK(all_canary(d.dst, REGION), "the attacker changed D's memory");
	TU_CHECK(!rep.get_read_canary, "the attacker read D's memory");
	TU_CHECK(counter(d.ctx, "conns_rejected_auth") >= 1, "D did not count the refusal");
	TU_CHECK(counter(d.ctx, "writes_applied") == 0, "D applied a write");
	close(to[1]);
	int ws;
	waitpid(pid, &ws, 0);
	TU_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "attacker exited badly (%d)", ws);
	d_teardown(&d);
}

/* ---- P through layercake ---- */

typedef struct pside {
	lc_ctx_t *ctx;
	lc_region_t *r;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint8_t *src;
	uint32_t remote;
} pside_t;

static void p_setup(pside_t *p, const dside_t *d, const char *mode, size_t len)
{
	TU_OK(lc_ctx_create(NULL, &p->ctx));
	TU_OK(lc_ctx_config_set(p->ctx, "ucx_data", mode));
	TU_OK(lc_ctx_config_set(p->ctx, "ucx_allow_sw_rma", "0"));
	TU_OK(lc_mem_alloc(len, 0, (void **)&p->src));
	tu_fill(p->src, len, 7);
	TU_OK(lc_region_register(p->ctx, p->src, len, &p->r));
	TU_OK(lc_cq_create(p->ctx, &p->cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = p->cq, .token = d->token, .has_token = 1};
	TU_OK(lc_conn_create(p->ctx, d->url, &cp, &p->conn));
	TU_OK(lc_conn_import_region(p->conn, d->desc, (size_t)d->dlen, &p->remote));
}

static void p_teardown(pside_t *p)
{
	lc_conn_destroy(p->conn);
	lc_cq_destroy(p->cq);
	lc_ctx_destroy(p->ctx);
	lc_mem_free(p->src);
}

static void case_put_sw_rma_refused(void)
{
	dside_t d;
	pside_t p;
	d_setup(&d, "put");
	TU_CHECK(d.dlen > UW_DESC_HEADER, "put mode packed no key");
	p_setup(&p, &d, "put", REGION);
	lc_write_t w = {
		.local = p.src, .remote_offset = 0, .length = 65536, .remote_region = p.remote};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(p.conn, &w, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(p.cq, 25000);
	fprintf(stderr, "put over software RMA: %s (%s); D conns_refused_sw_rma %llu\n",
		lc_err_name(c.status), c.reason,
		(unsigned long long)counter(d.ctx, "conns_refused_sw_rma"));
	TU_CHECK(c.status == LC_ENOTSUP, "expected LC_ENOTSUP, got %s", lc_err_name(c.status));
	TU_CHECK(counter(d.ctx, "conns_refused_sw_rma") >= 1, "D did not count the refusal");
	TU_CHECK(all_canary(d.dst, REGION), "bytes landed over refused software RMA");
	p_teardown(&p);
	d_teardown(&d);
}

/* ---- am_revoke_rndv (finding 14) ---- */

#define BLOCK (4u << 20)
#define PASSES 4 /* P's batch writes D's region this many times over */
#define ROUNDS 6

static size_t landed(const uint8_t *m)
{
	size_t n = 0;
	for (size_t i = 0; i < REGION; i += 4096)
		n += m[i + 4095] != CANARY;
	return n * 4096;
}

static void case_am_revoke_rndv(void)
{
	dside_t d;
	pside_t p;
	d_setup(&d, "am");
	p_setup(&p, &d, "am", PASSES * (size_t)REGION);
	/* Each pass lands other bytes on the same destinations, so a late
	 * write of any pass shows. */
	static lc_write_t w[PASSES * (REGION / BLOCK)];
	size_t n = PASSES * (REGION / BLOCK);
	for (size_t i = 0; i < n; i++)
		w[i] = (lc_write_t){.local = p.src + i * BLOCK,
				    .remote_offset = (i % (REGION / BLOCK)) * BLOCK,
				    .length = BLOCK,
				    .remote_region = p.remote};
	uint8_t *snap = malloc(REGION);
	TU_CHECK(snap, "malloc");
	int cut = 0;
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t room = ROOM + 1 + (uint64_t)round;
		memset(d.dst, CANARY, REGION);
		TU_OK(lc_grant_issue(d.ctx, room, d.r, 0, (uint64_t)REGION));
		lc_batch_params_t bp = {.size = sizeof bp, .room = room, .timeout_ms = 30000};
		uint64_t id;
		TU_OK(lc_batch_post(p.conn, w, n, &bp, &id));
		/* Revoke a different time after the first block landed in each
		 * round, while rendezvous receives are under way. */
		uint64_t t0 = tu_now_ms();
		while (((volatile uint8_t *)d.dst)[BLOCK - 1] == CANARY && tu_now_ms() - t0 < 10000)
			;
		uint64_t t1 = tu_now_ms() + 3 * (uint64_t)round;
		while (tu_now_ms() < t1)
			;
		TU_CHECK(lc_grant_revoke(d.ctx, room) == 1, "revoke should report one range");
		memcpy(snap, d.dst, REGION);
		lc_completion_t c = tu_wait_one(p.cq, 30000);
		usleep(100000);
		cut += c.status != 0;
		fprintf(stderr,
			"round %d: %zu KiB of the region written when revoke returned; "
			"batch %s\n",
			round, landed(snap) >> 10, lc_err_name(c.status));
		TU_CHECK(!memcmp(snap, d.dst, REGION),
			 "round %d: bytes landed after lc_grant_revoke returned", round);
	}
	fprintf(stderr, "%d of %d batches cut by the revoke\n", cut, ROUNDS);
	TU_CHECK(cut > 0, "no revoke came while writes were landing: not a test");
	free(snap);
	p_teardown(&p);
	d_teardown(&d);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_ucx raw_rma_am|raw_idle|put_sw_rma_refused|"
				"am_revoke_rndv\n");
		return 2;
	}
	tu_watchdog(110);
	signal(SIGPIPE, SIG_IGN);
	if (!strstr(lc_transports(), "ucx")) {
		fprintf(stderr, "skip: ucx is not built in\n");
		return TU_SKIP;
	}
	if (!strcmp(argv[1], "raw_rma_am"))
		case_raw_rma_am();
	else if (!strcmp(argv[1], "raw_idle"))
		case_raw_idle();
	else if (!strcmp(argv[1], "put_sw_rma_refused"))
		case_put_sw_rma_refused();
	else if (!strcmp(argv[1], "am_revoke_rndv"))
		case_am_revoke_rndv();
	else
		return 2;
	printf("adversarial_ucx %s: ok\n", argv[1]);
	return 0;
}
