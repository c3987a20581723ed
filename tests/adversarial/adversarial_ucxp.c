/*
 * ucx://'s sender (P, data mode am) against a scripted raw D: a child
 * process with its own UCP context and listener (forked before P starts any
 * thread) answers P's HELLO, LEASE and DONE wrongly, one way per script,
 * which the parent names over a pipe before each connection. Each batch
 * must fail with its cause; a correct script succeeds (the harness holds):
 *
 *   HELLO_REPLY LC_ERR_AUTH, -EBUSY, LC_ENOTSUP, or cut short (then
 *   nothing: LC_ERR_UNREACHABLE after connect_timeout_ms); a LEASE_REPLY
 *   refusing write 0, or naming a write the batch does not have; an ACK
 *   landing none of the writes; a REVOKE of the room after the lease; stray
 *   LEASE_REPLY and ACK for leases P never sent, before the right ones; the
 *   endpoint closed once the lease is granted (a failure with its reason,
 *   where UCX tells P: not with error mode none).
 * Then, against a real D in data mode put: descriptors P must refuse to
 * import (no key, a broken key magic or length, a key mapping less than the
 * region), and 20 regions imported out of order, one twice, written.
 *
 * Loopback only (UCX_TLS from ctest); exit 77 where ucx is not built in.
 */
#include <errno.h>
#include <fcntl.h>
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

#define LEN 4096
#define ROOM 5

enum script {
	S_OK,
	S_AUTH,      /* HELLO_REPLY LC_ERR_AUTH */
	S_BUSY,      /* HELLO_REPLY -EBUSY */
	S_NOTSUP,    /* HELLO_REPLY LC_ENOTSUP */
	S_SHORT,     /* HELLO_REPLY of 2 bytes, then nothing */
	S_LEASE_NO,  /* LEASE_REPLY LC_ERR_GRANT for write 0 */
	S_LEASE_IDX, /* LEASE_REPLY LC_ERR_OUT_OF_REGION for write 99 */
	S_ACK_NONE,  /* ACK: 0 landed */
	S_REVOKE,    /* REVOKE of the room once leased */
	S_STRAY,     /* a LEASE_REPLY and an ACK for seq + 100 first */
	S_GONE,      /* the endpoint closed (forced) once the lease is granted */
	S_END,
};

/* ---- the raw D (child) ---- */

typedef struct out {
	ucp_ep_h ep;
	unsigned id; /* 0: close ep (forced) */
	uint8_t b[UW_LEASE_REPLY_LEN];
	size_t len;
} out_t;

static struct {
	ucp_worker_h w;
	int script, rd;
	ucp_conn_request_h req;
	out_t q[16];
	int nq;
} R;

static void queue(ucp_ep_h ep, unsigned id, const void *b, size_t len)
{
	if (R.nq < 16) {
		R.q[R.nq] = (out_t){.ep = ep, .id = id, .len = len};
		memcpy(R.q[R.nq++].b, b, len);
	}
}

static ucs_status_t on_msg(void *arg, const void *h, size_t hl, void *d, size_t l,
			   const ucp_am_recv_param_t *p)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	(void)h, (void)hl;
	if (!(p->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
		return UCS_OK;
	ucp_ep_h ep = p->reply_ep;
	uint8_t b[UW_LEASE_REPLY_LEN];
	if (id == UW_HELLO) {
		int st = R.script == S_AUTH     ? LC_ERR_AUTH
			 : R.script == S_BUSY   ? -EBUSY
			 : R.script == S_NOTSUP ? LC_ENOTSUP
						: 0;
		uw_status_encode(b, st);
		queue(ep, UW_HELLO_REPLY, b, R.script == S_SHORT ? 2 : UW_STATUS_LEN);
	} else if (id == UW_LEASE) {
		uw_lease_t lh;
		if (uw_lease_decode(d, l, &lh))
			return UCS_OK;
		uw_lease_reply_t r = {.seq = lh.seq};
		if (R.script == S_STRAY) {
			uw_lease_reply_encode(b, &(uw_lease_reply_t){.seq = lh.seq + 100});
			queue(ep, UW_LEASE_REPLY, b, UW_LEASE_REPLY_LEN);
			uw_ack_encode(b, &(uw_ack_t){.seq = lh.seq + 100, .landed = 1});
			queue(ep, UW_ACK, b, UW_ACK_LEN);
		}
		if (R.script == S_LEASE_NO)
			r.status = LC_ERR_GRANT;
		if (R.script == S_LEASE_IDX)
			r.status = LC_ERR_OUT_OF_REGION, r.index = 99;
		uw_lease_reply_encode(b, &r);
		queue(ep, UW_LEASE_REPLY, b, UW_LEASE_REPLY_LEN);
		if (R.script == S_REVOKE) {
			uw_revoke_encode(b, lh.room);
			queue(ep, UW_REVOKE, b, UW_REVOKE_LEN);
		}
		if (R.script == S_GONE)
			queue(ep, 0, b, 0);
	} else if (id == UW_DONE) {
		uw_done_t dn;
		if (uw_done_decode(d, l, &dn))
			return UCS_OK;
		uw_ack_encode(b, &(uw_ack_t){.seq = dn.seq,
					     .landed = R.script == S_ACK_NONE ? 0 : dn.writes});
		queue(ep, UW_ACK, b, UW_ACK_LEN);
	}
	return UCS_OK; /* WRITE: eager, nothing to pull */
}

static void on_conn(ucp_conn_request_h req, void *arg)
{
	(void)arg;
	R.req = req;
}

static void ep_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg, (void)ep, (void)status;
}

static void send_done(void *req, ucs_status_t status, void *user)
{
	(void)req, (void)status, (void)user;
}

static void raw_d(int rd, int wr)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	R.rd = rd;
	fcntl(rd, F_SETFL, O_NONBLOCK);
	ucp_config_t *cfg;
	ucp_context_h uctx;
	TU_CHECK(ucp_config_read(NULL, NULL, &cfg) == UCS_OK, "config");
	ucp_params_t up = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
	TU_CHECK(ucp_init(&up, cfg, &uctx) == UCS_OK, "ucp_init");
	ucp_config_release(cfg);
	ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				  .thread_mode = UCS_THREAD_MODE_SINGLE};
	TU_CHECK(ucp_worker_create(uctx, &wp, &R.w) == UCS_OK, "worker");
	for (unsigned id = UW_HELLO; id <= UW_WRITE; id++) {
		ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
							   UCP_AM_HANDLER_PARAM_FIELD_CB |
							   UCP_AM_HANDLER_PARAM_FIELD_ARG,
					     .id = id,
					     .cb = on_msg,
					     .arg = (void *)(uintptr_t)id};
		TU_CHECK(ucp_worker_set_am_recv_handler(R.w, &hp) == UCS_OK, "am handler");
	}
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = sizeof sa},
		.conn_handler = {.cb = on_conn},
	};
	ucp_listener_h lh;
	TU_CHECK(ucp_listener_create(R.w, &lp, &lh) == UCS_OK, "listener");
	ucp_listener_attr_t at = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
	TU_CHECK(ucp_listener_query(lh, &at) == UCS_OK, "listener query");
	int port = ntohs(((const struct sockaddr_in *)&at.sockaddr)->sin_port);
	TU_CHECK(write(wr, &port, sizeof port) == (ssize_t)sizeof port, "port");
	const char *mode = getenv("LAYERCAKE_UCX_ERR_MODE");
	for (;;) {
		if (!ucp_worker_progress(R.w))
			usleep(100);
		/* The parent names the next connections' script before it
		 * connects; EOF: the parent is done. */
		int sc;
		ssize_t k;
		while ((k = read(rd, &sc, sizeof sc)) == (ssize_t)sizeof sc)
			R.script = sc;
		if (k == 0)
			_exit(0);
		if (R.req) {
			ucp_ep_params_t ep_p = {
				.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
					      UCP_EP_PARAM_FIELD_ERR_HANDLER |
					      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
				.conn_request = R.req,
				.err_mode = mode && !strcmp(mode, "none")
						    ? UCP_ERR_HANDLING_MODE_NONE
						    : UCP_ERR_HANDLING_MODE_PEER,
				.err_handler = {.cb = ep_err},
			};
			ucp_ep_h ep;
			R.req = NULL;
			TU_CHECK(ucp_ep_create(R.w, &ep_p, &ep) == UCS_OK, "accept");
		}
		for (int i = 0; i < R.nq; i++) {
			if (!R.q[i].id) { /* P's next sends meet a closed endpoint */
				ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
							  .flags = UCP_EP_CLOSE_FLAG_FORCE};
				ucs_status_ptr_t r = ucp_ep_close_nbx(R.q[i].ep, &cp);
				uint64_t until = tu_now_ms() + 2000;
				while (UCS_PTR_IS_PTR(r) &&
				       ucp_request_check_status(r) == UCS_INPROGRESS &&
				       tu_now_ms() < until)
					ucp_worker_progress(R.w);
				if (UCS_PTR_IS_PTR(r))
					ucp_request_free(r);
				continue;
			}
			ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
								 UCP_OP_ATTR_FIELD_FLAGS,
						 .cb.send = send_done,
						 .flags = UCP_AM_SEND_FLAG_REPLY |
							  UCP_AM_SEND_FLAG_EAGER};
			ucs_status_ptr_t r = ucp_am_send_nbx(R.q[i].ep, R.q[i].id, NULL, 0,
							     R.q[i].b, R.q[i].len, &p);
			uint64_t until = tu_now_ms() + 2000;
			while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS &&
			       tu_now_ms() < until)
				ucp_worker_progress(R.w);
			if (UCS_PTR_IS_PTR(r))
				ucp_request_free(r);
		}
		R.nq = 0;
	}
}

/* ---- P (the parent) ---- */

static void p_against(int to, int port, enum script s, int want, const char *words)
{
	lc_ctx_t *p, *other;
	TU_OK(lc_ctx_create(NULL, &p));
	TU_OK(lc_ctx_config_set(p, "ucx_data", "am"));
	TU_OK(lc_ctx_config_set(p, "connect_timeout_ms", s == S_SHORT ? "1000" : "20000"));
	TU_OK(lc_ctx_create(NULL, &other));
	TU_OK(lc_ctx_config_set(other, "ucx_data", "am"));
	uint8_t *dmem = calloc(1, LEN), *src;
	lc_region_t *dr, *sr;
	TU_OK(lc_region_register(other, dmem, LEN, &dr));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_mem_alloc(LEN, 0, (void **)&src));
	TU_OK(lc_region_register(p, src, LEN, &sr));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(p, &cq));
	char url[64];
	snprintf(url, sizeof url, "ucx://127.0.0.1:%d", port);
	int sc = (int)s;
	TU_CHECK(write(to, &sc, sizeof sc) == (ssize_t)sizeof sc, "script");
	lc_token_t tok = {{0}};
	lc_conn_t *conn;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1};
	TU_OK(lc_conn_create(p, url, &cp, &conn));
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	lc_write_t w = {.local = src, .remote_region = remote, .length = LEN};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 30000};
	uint64_t id;
	lc_completion_t c = {0};
	int rc = lc_batch_post(conn, &w, 1, &bp, &id);
	if (rc == 0)
		c = tu_wait_one(cq, 25000);
	else
		c = (lc_completion_t){.batch_id = id = 0, .status = rc};
	const char *why = rc ? lc_last_error() : c.reason;
	fprintf(stderr, "script %d: %s (%s)\n", s, lc_err_name(c.status), why);
	if (want == 1) /* any failure with its reason, in time */
		want = c.status < 0 && *why ? c.status : 1;
	TU_CHECK(c.batch_id == id && c.status == want && (!words || strstr(why, words)),
		 "script %d: %s, expected %s with \"%s\"", s, lc_err_name(c.status),
		 lc_err_name(want), words ? words : "");
	lc_conn_destroy(conn);
	lc_cq_destroy(cq);
	lc_region_deregister(sr);
	lc_region_deregister(dr);
	lc_ctx_destroy(p);
	lc_ctx_destroy(other);
	lc_mem_free(src);
	free(dmem);
}

/* ---- put mode: descriptors P must refuse to import ---- */

/* Forged key frames around a good ucx key (the descriptor comes from the
 * network): an unknown tag before it is skipped and the key still imports;
 * the ucx key twice, a frame cut short, a frame under another tag only, and
 * a descriptor header announcing more key bytes than there are are
 * refused. desc[0..n) is a good put-mode descriptor with one frame. */
static void forged_frames(lc_conn_t *conn, const uint8_t *desc, size_t n)
{
	uint8_t f[LC_REGION_DESC_MAX];
	size_t klen = n - UW_DESC_HEADER; /* the ucx frame, header included */
	uint32_t rid;
	TU_CHECK(n + 8 + klen <= sizeof f, "descriptor of %zu bytes", n);
	/* Unknown tag 0x7777 with 4 bytes, then the ucx frame. */
	memcpy(f, desc, UW_DESC_HEADER);
	uint8_t unknown[8] = {0x77, 0x77, 4, 0, 1, 2, 3, 4};
	memcpy(f + UW_DESC_HEADER, unknown, sizeof unknown);
	memcpy(f + UW_DESC_HEADER + 8, desc + UW_DESC_HEADER, klen);
	lc__put_u16(f + 6, (uint16_t)(klen + 8));
	TU_OK(lc_conn_import_region(conn, f, n + 8, &rid));
	/* The ucx frame twice. */
	memcpy(f + UW_DESC_HEADER, desc + UW_DESC_HEADER, klen);
	memcpy(f + UW_DESC_HEADER + klen, desc + UW_DESC_HEADER, klen);
	lc__put_u16(f + 6, (uint16_t)(2 * klen));
	TU_CHECK(lc_conn_import_region(conn, f, n + klen, &rid) == LC_ERR_PROTO,
		 "a descriptor with the ucx key twice imported");
	/* Two bytes of a frame header after the key. */
	memcpy(f, desc, n);
	f[n] = 0x77, f[n + 1] = 0x77;
	lc__put_u16(f + 6, (uint16_t)(klen + 2));
	TU_CHECK(lc_conn_import_region(conn, f, n + 2, &rid) == LC_ERR_PROTO,
		 "a descriptor with a cut key frame imported");
	/* Only an unknown tag: put mode finds no ucx key. */
	memcpy(f + UW_DESC_HEADER, unknown, sizeof unknown);
	lc__put_u16(f + 6, 8);
	TU_CHECK(lc_conn_import_region(conn, f, UW_DESC_HEADER + 8, &rid) == LC_ERR_PROTO,
		 "a put-mode descriptor without a ucx key imported");
	/* The header says one more key byte than there is. */
	memcpy(f, desc, n);
	lc__put_u16(f + 6, (uint16_t)(klen + 1));
	TU_CHECK(lc_conn_import_region(conn, f, n, &rid) == LC_ERR_PROTO,
		 "a descriptor shorter than its header says imported");
}

/* D and P in data mode put (software RMA allowed on loopback): descriptors
 * without a ucx key, with the key's magic broken, a key length past the
 * blob, or a key mapping less than the region are LC_ERR_PROTO at import;
 * 20 regions imported out of order (and one twice) all write correctly. */
static void case_put_imports(void)
{
	enum { NR = 20, RL = 4096 };
	lc_ctx_t *d, *p, *am;
	TU_OK(lc_ctx_create(NULL, &d));
	TU_OK(lc_ctx_create(NULL, &p));
	TU_OK(lc_ctx_create(NULL, &am));
	TU_OK(lc_ctx_config_set(am, "ucx_data", "am"));
	for (int i = 0; i < 2; i++) {
		lc_ctx_t *c = i ? p : d;
		TU_OK(lc_ctx_config_set(c, "ucx_data", "put"));
		TU_OK(lc_ctx_config_set(c, "ucx_allow_sw_rma", "1"));
	}
	lc_listener_t *l;
	char url[256];
	TU_OK(lc_listener_create(d, "ucx://127.0.0.1:0", &l));
	TU_OK(lc_listener_url(l, url, sizeof url));
	lc_token_t tok;
	TU_OK(lc_token_issue(d, &tok));
	uint8_t *dmem, *src;
	TU_OK(lc_mem_alloc(NR * RL, 0, (void **)&dmem));
	TU_OK(lc_mem_alloc(NR * RL, 0, (void **)&src));
	memset(dmem, 0, NR * RL);
	tu_fill(src, NR * RL, 12);
	lc_region_t *dr[NR], *sr, *amr;
	for (int i = 0; i < NR; i++) {
		TU_OK(lc_region_register(d, dmem + i * RL, RL, &dr[i]));
		TU_OK(lc_grant_issue(d, ROOM, dr[i], 0, RL));
	}
	TU_OK(lc_region_register(p, src, NR * RL, &sr));
	TU_OK(lc_region_register(am, dmem, RL, &amr));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(p, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1};
	lc_conn_t *conn;
	TU_OK(lc_conn_create(p, url, &cp, &conn));
	uint8_t desc[LC_REGION_DESC_MAX], bad[LC_REGION_DESC_MAX];
	uint32_t rid;
	int n = lc_region_pack(amr, desc, sizeof desc);
	TU_OK(n);
	TU_CHECK(lc_conn_import_region(conn, desc, (size_t)n, &rid) == LC_ERR_PROTO,
		 "an am-mode descriptor (no key) imported in put mode");
	n = lc_region_pack(dr[0], desc, sizeof desc);
	TU_CHECK(n > UW_KEY_AT + UW_KEY_HDR, "a put-mode descriptor of %d bytes", n);
	static const struct {
		size_t at;
		uint8_t v;
		const char *what;
	} breaks[] = {{UW_KEY_AT, 0x00, "key magic"},
		      {UW_KEY_AT + 7, 0xff, "key length past the blob"},
		      {UW_KEY_AT + 17, 0x00, "a key mapping less than the region"},
		      {UW_DESC_HEADER + 3, 0xff, "key frame length past the descriptor"},
		      {UW_DESC_HEADER, 0x00, "key frame tag 0"}};
	for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
		memcpy(bad, desc, (size_t)n);
		bad[breaks[i].at] = breaks[i].v;
		if (breaks[i].at == UW_KEY_AT + 17) /* length: one byte */
			memset(bad + UW_KEY_AT + 16, 0, 8), bad[UW_KEY_AT + 16] = 1;
		if (breaks[i].at == UW_DESC_HEADER)
			bad[UW_DESC_HEADER + 1] = 0; /* the whole u16 tag */
		int rc = lc_conn_import_region(conn, bad, (size_t)n, &rid);
		fprintf(stderr, "put import, %s: %s\n", breaks[i].what, lc_err_name(rc));
		TU_CHECK(rc < 0, "a descriptor with a broken %s imported", breaks[i].what);
	}
	forged_frames(conn, desc, (size_t)n);
	/* All 20, last first, region 7 twice; then a write to each. */
	uint32_t ids[NR];
	for (int i = NR - 1; i >= 0; i--) {
		n = lc_region_pack(dr[i], desc, sizeof desc);
		TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &ids[i]));
		if (i == 7)
			TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &ids[i]));
	}
	lc_write_t w[NR];
	for (int i = 0; i < NR; i++)
		w[i] = (lc_write_t){.local = src + i * RL, .remote_region = ids[i], .length = RL};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 30000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, w, NR, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 25000);
	fprintf(stderr, "put mode, 20 regions: %s (%s)\n", lc_err_name(c.status), c.reason);
	TU_CHECK(c.status == 0, "put writes to 20 imported regions");
	TU_CHECK(!memcmp(dmem, src, NR * RL), "bytes of the put writes");
	lc_conn_destroy(conn);
	lc_cq_destroy(cq);
	lc_listener_destroy(l);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	lc_ctx_destroy(am);
	lc_mem_free(dmem);
	lc_mem_free(src);
}

int main(int argc, char **argv)
{
	(void)argc, (void)argv;
	tu_watchdog(170);
	signal(SIGPIPE, SIG_IGN);
	if (!strstr(lc_transports(), "ucx")) {
		fprintf(stderr, "skip: ucx is not built in\n");
		return TU_SKIP;
	}
	int to[2], from[2];
	TU_CHECK(pipe(to) == 0 && pipe(from) == 0, "pipe");
	pid_t pid = fork(); /* before P starts any thread or UCX */
	TU_CHECK(pid >= 0, "fork");
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		raw_d(to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	int port;
	TU_CHECK(read(from[0], &port, sizeof port) == (ssize_t)sizeof port, "raw D's port");
	p_against(to[1], port, S_OK, 0, NULL);
	p_against(to[1], port, S_AUTH, LC_ERR_AUTH, "rejected the session token");
	p_against(to[1], port, S_BUSY, -EBUSY, "refused the connection");
	p_against(to[1], port, S_NOTSUP, LC_ENOTSUP, "refused put mode");
	p_against(to[1], port, S_SHORT, LC_ERR_UNREACHABLE, NULL);
	p_against(to[1], port, S_LEASE_NO, LC_ERR_GRANT, "rejected write 0");
	p_against(to[1], port, S_LEASE_IDX, LC_ERR_OUT_OF_REGION, "rejected write 99");
	p_against(to[1], port, S_ACK_NONE, LC_ERR_GRANT, "landed 0 of the 1 writes");
	p_against(to[1], port, S_REVOKE, LC_ERR_GRANT, "revoked the grant of room 5");
	p_against(to[1], port, S_STRAY, 0, NULL);
	/* Without UCP_ERR_HANDLING_MODE_PEER (sm) UCX need not tell P. */
	const char *em = getenv("LAYERCAKE_UCX_ERR_MODE");
	if (!em || strcmp(em, "none"))
		p_against(to[1], port, S_GONE, 1, NULL);
	close(to[1]);
	int ws;
	waitpid(pid, &ws, 0);
	case_put_imports();
	printf("adversarial_ucxp: ok\n");
	return 0;
}
