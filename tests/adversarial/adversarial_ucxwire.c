/*
 * ucx://'s receiver (D, data mode am) against a peer that holds D's token
 * and speaks the ucx wire (transport/ucx/wire.h) wrongly: a child process
 * with its own UCP context (forked before D starts any thread) opens
 * endpoints to D's listener and sends, in order:
 *
 *   on three endpoints of their own: a HELLO cut short, a HELLO of version
 *       1 (LC_ERR_PROTO, frames_malformed), a HELLO with a token D did not
 *       issue (LC_ERR_AUTH, conns_rejected_auth);
 *   on a fourth, after a good HELLO: a HELLO without a reply endpoint; a
 *       LEASE cut short; a LEASE claiming 2 entries with 1 (LC_ERR_PROTO);
 *       a put lease (LC_ENOTSUP in am mode); a lease of a room D never
 *       granted (LC_ERR_GRANT, index 0); one whose second write lies past
 *       the region (LC_ERR_OUT_OF_REGION, index 1); a good lease; WRITEs
 *       with a short header, for an unknown lease, an index past the
 *       lease, a wrong length; the good WRITE; the same WRITE again; a
 *       DONE cut short; a DONE of an unknown lease (ACK, 0 landed); the
 *       good DONE (ACK, 1 landed);
 *   to a second D in data mode put (software RMA allowed): leases whose
 *       DONE claims more writes than leased, or other bytes (no write
 *       counted, ACK 0 landed, malformed), and a good one (ACK 1 landed);
 *   then a lease on the first D that its owner revokes and the peer never
 *       finishes: D sends REVOKE, fences the connection off after the
 *       listener's fence_ms (300), and lc_grant_revoke returns.
 *
 * D must answer each with the code above, count every malformed message
 * (11 of them), land the good write's bytes and nothing else.
 * Loopback only (UCX_TLS from ctest); exit 77 where ucx is not built in.
 */
#include <errno.h>
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

#define REGION (1u << 20)
#define CANARY 0xa5
#define ROOM 21
#define NONE 0x7fffffff /* no reply came */

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

typedef struct target {
	int port, put_port; /* D in data mode am, D2 in put mode */
	uint32_t region, put_region;
	lc_token_t token, put_token;
} target_t;

typedef struct report {
	int connected;
	int hello_short, hello_v1, hello_badtok, hello_ok;
	int lease_proto, lease_put, lease_room, lease_room_idx, lease_range, lease_range_idx;
	int lease_ok;
	int64_t ack_unknown, ack_ok; /* landed, or -1 */
	int put_hello, put_lease;
	int64_t put_ack_many, put_ack_bytes, put_ack_ok;
} report_t;

/* ---- the peer (child) ---- */

static int g_hello = NONE;
static uw_lease_reply_t g_lease = {.status = NONE};
static uw_ack_t g_ack = {.seq = UINT64_MAX};
static int g_failed;

static const void *body(const void *h, size_t hl, const void *d, size_t l, size_t *len)
{
	*len = l ? l : hl;
	return l ? d : h;
}

static ucs_status_t on_hello_reply(void *arg, const void *h, size_t hl, void *d, size_t l,
				   const ucp_am_recv_param_t *p)
{
	(void)arg, (void)p;
	size_t n;
	const uint8_t *b = body(h, hl, d, l, &n);
	if (uw_status_decode(b, n, &g_hello))
		g_hello = NONE - 1;
	return UCS_OK;
}

static ucs_status_t on_lease_reply(void *arg, const void *h, size_t hl, void *d, size_t l,
				   const ucp_am_recv_param_t *p)
{
	(void)arg, (void)p;
	size_t n;
	const uint8_t *b = body(h, hl, d, l, &n);
	if (uw_lease_reply_decode(b, n, &g_lease))
		g_lease.status = NONE - 1;
	return UCS_OK;
}

static ucs_status_t on_ack(void *arg, const void *h, size_t hl, void *d, size_t l,
			   const ucp_am_recv_param_t *p)
{
	(void)arg, (void)p;
	size_t n;
	const uint8_t *b = body(h, hl, d, l, &n);
	if (uw_ack_decode(b, n, &g_ack))
		g_ack.seq = UINT64_MAX - 1;
	return UCS_OK;
}

static uint64_t g_revoked = UINT64_MAX;

static ucs_status_t on_revoke(void *arg, const void *h, size_t hl, void *d, size_t l,
			      const ucp_am_recv_param_t *p)
{
	(void)arg, (void)p;
	size_t n;
	const uint8_t *b = body(h, hl, d, l, &n);
	if (uw_revoke_decode(b, n, &g_revoked))
		g_revoked = UINT64_MAX - 1;
	return UCS_OK;
}

static ucs_status_t on_other(void *arg, const void *h, size_t hl, void *d, size_t l,
			     const ucp_am_recv_param_t *p)
{
	(void)arg, (void)h, (void)hl, (void)d, (void)l, (void)p;
	return UCS_OK;
}

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg, (void)ep, (void)status;
	g_failed = 1;
}

static void req_done(void *req, ucs_status_t status, void *user)
{
	(void)req;
	*(int *)user = status;
}

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

static void progress_for(ucp_worker_h w, int ms)
{
	uint64_t until = tu_now_ms() + (uint64_t)ms;
	while (tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
}

/* Progress until *v changes from `from` (or 10 s pass). */
static void wait_change(ucp_worker_h w, volatile int *v, int from)
{
	uint64_t until = tu_now_ms() + 10000;
	while (*v == from && tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
}

static void am_send(ucp_ep_h ep, ucp_worker_h w, unsigned id, const void *h, size_t hl,
		    const void *d, size_t dl, bool reply)
{
	int st = 1;
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = req_done,
		.user_data = &st,
		.flags = (reply ? UCP_AM_SEND_FLAG_REPLY : 0) | UCP_AM_SEND_FLAG_EAGER};
	req_wait(w, ucp_am_send_nbx(ep, id, h, hl, d, dl, &p), &st, 5000);
}

static ucp_ep_h ep_open(ucp_worker_h w, int port, int *connected)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	const char *mode = getenv("LAYERCAKE_UCX_ERR_MODE"); /* D's, which UCX needs matched */
	ucp_ep_params_t ep_p = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof sa},
		.err_mode = mode && !strcmp(mode, "none") ? UCP_ERR_HANDLING_MODE_NONE
							  : UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = {.cb = ep_err},
	};
	ucp_ep_h ep;
	TU_CHECK(ucp_ep_create(w, &ep_p, &ep) == UCS_OK, "ep_create");
	int st = 1;
	ucp_request_param_t fp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						  UCP_OP_ATTR_FIELD_USER_DATA,
				  .cb.send = req_done,
				  .user_data = &st};
	*connected &= req_wait(w, ucp_ep_flush_nbx(ep, &fp), &st, 5000) == UCS_OK;
	return ep;
}

/* HELLO of len bytes; the HELLO_REPLY's status (NONE: none came). */
static int hello(ucp_worker_h w, ucp_ep_h ep, uint16_t version, const lc_token_t *tok, size_t len)
{
	uint8_t b[UW_HELLO_LEN];
	uw_hello_t h = {.version = version, .has_token = true};
	memcpy(h.token, tok->bytes, LC_TOKEN_LEN);
	uw_hello_encode(b, &h);
	g_hello = NONE;
	am_send(ep, w, UW_HELLO, NULL, 0, b, len, true);
	wait_change(w, &g_hello, NONE);
	return g_hello;
}

/* A LEASE of entries e[0..n) claiming `claim` entries; its reply. */
static uw_lease_reply_t lease(ucp_worker_h w, ucp_ep_h ep, uint64_t seq, uint64_t room,
			      uint32_t flags, const uw_lease_entry_t *e, uint32_t n, uint32_t claim)
{
	uint8_t b[UW_LEASE_HDR + 4 * UW_LEASE_ENTRY];
	uw_lease_t h = {.seq = seq, .room = room, .n = claim, .flags = flags};
	uw_lease_encode(b, &h);
	for (uint32_t i = 0; i < n; i++)
		uw_lease_entry_encode(b, i, &e[i]);
	g_lease = (uw_lease_reply_t){.status = NONE};
	am_send(ep, w, UW_LEASE, NULL, 0, b, uw_lease_len(n), true);
	wait_change(w, &g_lease.status, NONE);
	return g_lease;
}

static int64_t done(ucp_worker_h w, ucp_ep_h ep, uint64_t seq, uint64_t writes, uint64_t bytes)
{
	uint8_t b[UW_DONE_LEN];
	uw_done_encode(b, &(uw_done_t){.seq = seq, .writes = writes, .bytes = bytes});
	g_ack.seq = UINT64_MAX;
	am_send(ep, w, UW_DONE, NULL, 0, b, sizeof b, true);
	uint64_t until = tu_now_ms() + 10000;
	while (g_ack.seq == UINT64_MAX && tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
	return g_ack.seq == seq ? (int64_t)g_ack.landed : -1;
}

static void peer(int rd, int wr)
{
	target_t t;
	report_t rep = {.connected = 1};
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	TU_CHECK(read(rd, &t, sizeof t) == (ssize_t)sizeof t, "target");
	ucp_config_t *cfg;
	ucp_context_h uctx;
	ucp_worker_h w;
	TU_CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
	ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
	TU_CHECK(ucp_init(&up, cfg, &uctx) == UCS_OK, "ucp_init");
	ucp_config_release(cfg);
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	TU_CHECK(ucp_worker_create(uctx, &wp, &w) == UCS_OK, "worker");
	for (unsigned id = UW_HELLO; id <= UW_WRITE; id++) {
		ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
							   UCP_AM_HANDLER_PARAM_FIELD_CB,
					     .id = id,
					     .cb = id == UW_HELLO_REPLY   ? on_hello_reply
						   : id == UW_LEASE_REPLY ? on_lease_reply
						   : id == UW_ACK         ? on_ack
						   : id == UW_REVOKE      ? on_revoke
									  : on_other};
		TU_CHECK(ucp_worker_set_am_recv_handler(w, &hp) == UCS_OK, "am handler");
	}
	lc_token_t bad = t.token;
	bad.bytes[0] ^= 1;
	ucp_ep_h e1 = ep_open(w, t.port, &rep.connected);
	rep.hello_short = hello(w, e1, UW_VERSION, &t.token, 6);
	ucp_ep_h e2 = ep_open(w, t.port, &rep.connected);
	rep.hello_v1 = hello(w, e2, 1, &t.token, UW_HELLO_LEN);
	ucp_ep_h e3 = ep_open(w, t.port, &rep.connected);
	rep.hello_badtok = hello(w, e3, UW_VERSION, &bad, UW_HELLO_LEN);
	ucp_ep_h ep = ep_open(w, t.port, &rep.connected);
	rep.hello_ok = hello(w, ep, UW_VERSION, &t.token, UW_HELLO_LEN);

	uint8_t b[UW_HELLO_LEN];
	uw_hello_encode(b, &(uw_hello_t){.version = UW_VERSION});
	am_send(ep, w, UW_HELLO, NULL, 0, b, sizeof b, false); /* no reply endpoint */
	am_send(ep, w, UW_LEASE, NULL, 0, b, 10, true);        /* a LEASE cut short */
	uw_lease_entry_t e[2] = {{.region = t.region, .offset = 0, .length = 4096},
				 {.region = t.region, .offset = REGION - 8, .length = 64}};
	rep.lease_proto = lease(w, ep, 2, ROOM, UW_LEASE_F_AM, e, 1, 2).status;
	rep.lease_put = lease(w, ep, 3, ROOM, 0, e, 1, 1).status;
	uw_lease_reply_t r = lease(w, ep, 4, 99, UW_LEASE_F_AM, e, 1, 1);
	rep.lease_room = r.status, rep.lease_room_idx = (int)r.index;
	r = lease(w, ep, 5, ROOM, UW_LEASE_F_AM, e, 2, 2);
	rep.lease_range = r.status, rep.lease_range_idx = (int)r.index;
	rep.lease_ok = lease(w, ep, 10, ROOM, UW_LEASE_F_AM, e, 1, 1).status;

	static uint8_t pay[4096];
	memset(pay, 0x5a, sizeof pay);
	uint8_t hdr[UW_WRITE_HDR];
	uw_write_encode(hdr, 10, 0);
	am_send(ep, w, UW_WRITE, hdr, 8, pay, sizeof pay, true); /* short header */
	uw_write_encode(hdr, 11, 0);
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, pay, sizeof pay, true); /* unknown lease */
	uw_write_encode(hdr, 10, 5);
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, pay, sizeof pay, true); /* index past it */
	uw_write_encode(hdr, 10, 0);
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, pay, 100, true);        /* wrong length */
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, pay, sizeof pay, true); /* the good one */
	am_send(ep, w, UW_WRITE, hdr, sizeof hdr, pay, sizeof pay, true); /* again */
	uint8_t dn[UW_DONE_LEN] = {0};
	am_send(ep, w, UW_DONE, NULL, 0, dn, 12, true); /* a DONE cut short */
	rep.ack_unknown = done(w, ep, 77, 0, 0);
	rep.ack_ok = done(w, ep, 10, 1, 4096);

	/* D2 in put mode counts a lease's writes on P's DONE: a DONE claiming
	 * more writes than leased, or other bytes, counts none (malformed). */
	ucp_ep_h pe = ep_open(w, t.put_port, &rep.connected);
	rep.put_hello = hello(w, pe, UW_VERSION, &t.put_token, UW_HELLO_LEN);
	uw_lease_entry_t pl = {.region = t.put_region, .offset = 0, .length = 4096};
	rep.put_lease = lease(w, pe, 20, ROOM, 0, &pl, 1, 1).status;
	rep.put_ack_many = done(w, pe, 20, 5, 4096);
	rep.put_lease |= lease(w, pe, 21, ROOM, 0, &pl, 1, 1).status;
	rep.put_ack_bytes = done(w, pe, 21, 1, 999);
	rep.put_lease |= lease(w, pe, 22, ROOM, 0, &pl, 1, 1).status;
	rep.put_ack_ok = done(w, pe, 22, 1, 4096);
	progress_for(w, 200);
	TU_CHECK(write(wr, &rep, sizeof rep) == (ssize_t)sizeof rep, "report");

	/* A lease D's owner then revokes, and no DONE ever: D asks (REVOKE),
	 * then fences the connection off after the listener's fence_ms. */
	uw_lease_entry_t fe = {.region = t.region, .offset = 8192, .length = 4096};
	int fl = lease(w, ep, 30, ROOM, UW_LEASE_F_AM, &fe, 1, 1).status;
	TU_CHECK(write(wr, &fl, sizeof fl) == (ssize_t)sizeof fl, "lease");
	uint64_t until = tu_now_ms() + 20000;
	while (g_revoked == UINT64_MAX && tu_now_ms() < until)
		if (!ucp_worker_progress(w))
			usleep(100);
	progress_for(w, 500);
	TU_CHECK(write(wr, &g_revoked, sizeof g_revoked) == (ssize_t)sizeof g_revoked, "revoke");
	char c;
	TU_CHECK(read(rd, &c, 1) <= 1, "exit signal");
	_exit(0);
}

/* ---- D (the parent) ---- */

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	tu_watchdog(110);
	signal(SIGPIPE, SIG_IGN);
	if (!strstr(lc_transports(), "ucx")) {
		fprintf(stderr, "skip: ucx is not built in\n");
		return TU_SKIP;
	}
	int to[2], from[2];
	TU_CHECK(pipe(to) == 0 && pipe(from) == 0, "pipe");
	pid_t pid = fork(); /* before D starts any thread or UCX */
	TU_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		peer(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);

	lc_ctx_t *ctx;
	lc_region_t *reg;
	lc_listener_t *l;
	uint8_t *dst;
	char url[256];
	target_t t = {0};
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_ctx_config_set(ctx, "ucx_data", "am"));
	TU_OK(lc_ctx_config_set(ctx, "require_token", "1"));
	TU_OK(lc_mem_alloc(REGION, 0, (void **)&dst));
	memset(dst, CANARY, REGION);
	TU_OK(lc_region_register(ctx, dst, REGION, &reg));
	TU_CHECK(lc_listener_create(ctx, "ucx://127.0.0.1:0?fence_ms=0", &l) == -EINVAL &&
			 strstr(lc_last_error(), "fence_ms"),
		 "fence_ms=0 taken");
	TU_OK(lc_listener_create(ctx, "ucx://127.0.0.1:0?fence_ms=300", &l));
	TU_OK(lc_listener_url(l, url, sizeof url));
	TU_OK(lc_token_issue(ctx, &t.token));
	TU_OK(lc_grant_issue(ctx, ROOM, reg, 0, REGION));
	uint8_t desc[LC_REGION_DESC_MAX];
	int dl = lc_region_pack(reg, desc, sizeof desc);
	TU_OK(dl);
	lc_region_desc_t rd;
	TU_OK(lc_region_unpack(desc, (size_t)dl, &rd));
	t.region = rd.region_id;
	t.port = atoi(strrchr(url, ':') + 1);
	lc_ctx_t *ctx2;
	lc_region_t *reg2;
	lc_listener_t *l2;
	uint8_t *dst2;
	TU_OK(lc_ctx_create(NULL, &ctx2));
	TU_OK(lc_ctx_config_set(ctx2, "ucx_data", "put"));
	TU_OK(lc_ctx_config_set(ctx2, "ucx_allow_sw_rma", "1"));
	TU_OK(lc_ctx_config_set(ctx2, "require_token", "1"));
	TU_OK(lc_mem_alloc(REGION, 0, (void **)&dst2));
	TU_OK(lc_region_register(ctx2, dst2, REGION, &reg2));
	TU_OK(lc_listener_create(ctx2, "ucx://127.0.0.1:0", &l2));
	TU_OK(lc_listener_url(l2, url, sizeof url));
	t.put_port = atoi(strrchr(url, ':') + 1);
	TU_OK(lc_token_issue(ctx2, &t.put_token));
	TU_OK(lc_grant_issue(ctx2, ROOM, reg2, 0, REGION));
	dl = lc_region_pack(reg2, desc, sizeof desc);
	TU_OK(dl);
	TU_OK(lc_region_unpack(desc, (size_t)dl, &rd));
	t.put_region = rd.region_id;
	uint64_t pm0 = counter(ctx2, "frames_malformed");
	uint64_t m0 = counter(ctx, "frames_malformed"), a0 = counter(ctx, "conns_rejected_auth");
	uint64_t g0 = counter(ctx, "writes_rejected_grant");
	uint64_t r0 = counter(ctx, "writes_rejected_range");
	TU_CHECK(write(to[1], &t, sizeof t) == (ssize_t)sizeof t, "target");
	report_t rep;
	TU_CHECK(read(from[0], &rep, sizeof rep) == (ssize_t)sizeof rep, "peer report");
	uint64_t m = counter(ctx, "frames_malformed") - m0;
	fprintf(stderr,
		"peer: connected %d; hello short %s, v1 %s, bad token %s, ok %s; lease proto %s, "
		"put %s, room %s@%d, range %s@%d, ok %s; ack unknown %lld, ok %lld; D: malformed "
		"+%llu, auth +%llu\n",
		rep.connected, lc_err_name(rep.hello_short), lc_err_name(rep.hello_v1),
		lc_err_name(rep.hello_badtok), lc_err_name(rep.hello_ok),
		lc_err_name(rep.lease_proto), lc_err_name(rep.lease_put),
		lc_err_name(rep.lease_room), rep.lease_room_idx, lc_err_name(rep.lease_range),
		rep.lease_range_idx, lc_err_name(rep.lease_ok), (long long)rep.ack_unknown,
		(long long)rep.ack_ok, (unsigned long long)m,
		(unsigned long long)(counter(ctx, "conns_rejected_auth") - a0));
	TU_CHECK(rep.connected, "the peer never connected: not a test");
	TU_CHECK(rep.hello_short == LC_ERR_PROTO && rep.hello_v1 == LC_ERR_PROTO, "bad HELLOs");
	TU_CHECK(rep.hello_badtok == LC_ERR_AUTH && rep.hello_ok == 0, "tokens");
	TU_CHECK(counter(ctx, "conns_rejected_auth") == a0 + 1, "conns_rejected_auth");
	TU_CHECK(rep.lease_proto == LC_ERR_PROTO && rep.lease_put == LC_ENOTSUP, "bad LEASEs");
	TU_CHECK(rep.lease_room == LC_ERR_GRANT && rep.lease_room_idx == 0, "ungranted lease");
	TU_CHECK(rep.lease_range == LC_ERR_OUT_OF_REGION && rep.lease_range_idx == 1,
		 "a lease past the region");
	TU_CHECK(counter(ctx, "writes_rejected_grant") == g0 + 1 &&
			 counter(ctx, "writes_rejected_range") == r0 + 1,
		 "rejected writes not counted");
	TU_CHECK(rep.lease_ok == 0 && rep.ack_unknown == 0 && rep.ack_ok == 1, "the good lease");
	TU_CHECK(m == 11, "frames_malformed +%llu, expected 11", (unsigned long long)m);
	for (size_t i = 0; i < REGION; i++)
		TU_CHECK(dst[i] == (i < 4096 ? 0x5a : CANARY), "D's byte %zu is %#x", i, dst[i]);
	fprintf(stderr,
		"put mode: hello %s, leases %s, ack of 5 writes %lld, of 999 bytes %lld, "
		"good %lld; D2 malformed +%llu\n",
		lc_err_name(rep.put_hello), lc_err_name(rep.put_lease), (long long)rep.put_ack_many,
		(long long)rep.put_ack_bytes, (long long)rep.put_ack_ok,
		(unsigned long long)(counter(ctx2, "frames_malformed") - pm0));
	TU_CHECK(rep.put_hello == 0 && rep.put_lease == 0, "put mode handshake or leases");
	TU_CHECK(rep.put_ack_many == 0 && rep.put_ack_bytes == 0 && rep.put_ack_ok == 1,
		 "D2 counted writes a DONE did not account for");
	TU_CHECK(counter(ctx2, "frames_malformed") == pm0 + 2, "D2's malformed DONEs");
	/* Phase 2: the revoke returns although the peer never sends DONE:
	 * D fenced the connection off, nothing landed in the leased range. */
	int fl;
	TU_CHECK(read(from[0], &fl, sizeof fl) == (ssize_t)sizeof fl && fl == 0,
		 "the fenced lease was refused (%d)", fl);
	TU_CHECK(lc_grant_revoke(ctx, ROOM) >= 1, "nothing revoked");
	uint64_t revoked;
	TU_CHECK(read(from[0], &revoked, sizeof revoked) == (ssize_t)sizeof revoked, "revoke");
	fprintf(stderr, "revoked with a lease out: the peer heard REVOKE of room %llu\n",
		(unsigned long long)revoked);
	TU_CHECK(revoked == ROOM, "the peer was not asked to release room %d", ROOM);
	for (size_t i = 8192; i < 8192 + 4096; i++)
		TU_CHECK(dst[i] == CANARY, "the fenced lease's range changed");
	close(to[1]);
	int ws;
	waitpid(pid, &ws, 0);
	TU_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "peer exited badly (%d)", ws);
	lc_listener_destroy(l);
	lc_region_deregister(reg);
	lc_ctx_destroy(ctx);
	lc_mem_free(dst);
	lc_listener_destroy(l2);
	lc_region_deregister(reg2);
	lc_ctx_destroy(ctx2);
	lc_mem_free(dst2);
	printf("adversarial_ucxwire: ok\n");
	return 0;
}
