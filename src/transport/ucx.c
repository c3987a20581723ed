/*
 * ucx://HOST:PORT: writes as UCP one-sided puts (RDMA, shared memory, TCP,
 * whatever UCX_TLS lets UCX pick), with the receiver still in charge of
 * what may land. See docs/transport-ucx.md for the design; in short:
 *
 * - One UCP context, worker and progress thread per layercake context.
 *   The state (`ustate_t`) is the context's ucx slot (ops init/fini,
 *   lc__transport_state) and lives as long as the context; its engine (UCP
 *   context, worker, thread) is started when the context first listens or
 *   connects over ucx and stopped when its last ucx listener or connection
 *   closes (refs, under st->life_lock).
 * - D maps a region (ucp_mem_map) the first time lc_region_pack packs it
 *   while a ucx listener exists, and appends the rkey to the descriptor. P
 *   keeps the blob per connection and unpacks it on its endpoint.
 * - Leases make one-sided writes receiver-enforced: before the puts of a
 *   batch, P sends the batch's write list (LEASE); D checks every write
 *   against its regions and the room's grant exactly as the copying
 *   transports do, and holds the room's grant bracket (lc__grant_enter)
 *   until P reports that the puts are flushed (DONE). So lc_grant_revoke
 *   on D waits for leased batches; D's thread sees the revoke pending,
 *   asks P to stop (REVOKE), and fences P's endpoint (closes it) if P has
 *   not released the lease within fence_ms.
 * - Completion: put every write, ucp_ep_flush_nbx (remote completion), DONE;
 *   D counts the bytes and answers ACK; the batch completes at ACK.
 * - Data mode "am" (the default; LAYERCAKE_UCX_DATA=put selects puts):
 *   writes travel as active messages that D receives into the destinations
 *   it checked (rendezvous: D pulls). It keeps revoke a hard stop on every
 *   UCX transport, and is single-copy where UCX 1.13 emulates
 *   shared-memory puts to user memory with two copies. In put mode over
 *   same-host shared memory a put is a copy by P's own process: the fence
 *   cannot stop it (docs/transport-ucx.md).
 *
 * Threading: every UCX call runs on the state's progress thread (the worker
 * is UCS_THREAD_MODE_SINGLE). Callers hand work to it through `cmds`
 * (st->lock) and wait for synchronous commands on st->cond. A connection's
 * `lock` protects what post() and import_region() share with the thread
 * (new ops, remote regions, the dead status); everything else of a
 * connection, and every D-side structure, belongs to the thread. Lock
 * order: st->life_lock -> st->lock; uc->lock is a leaf except that the generic
 * lc__batch_* functions (conn->lock, cq->lock) may be called under it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "transport/transport.h"

/* Active message ids (P = sender of writes, D = receiver). */
enum {
	AM_HELLO = 1,       /* P->D: token */
	AM_HELLO_REPLY = 2, /* D->P: status */
	AM_LEASE = 3,       /* P->D: seq, room, flags, writes */
	AM_LEASE_REPLY = 4, /* D->P: seq, status, index of the rejected write */
	AM_DONE = 5,        /* P->D: seq, writes, bytes, status: puts flushed */
	AM_ACK = 6,         /* D->P: seq, writes D counted as landed */
	AM_REVOKE = 7,      /* D->P: room: stop writing, release its leases */
	AM_WRITE = 8,       /* P->D, data mode "am": header seq, index; payload */
	AM_COUNT = 9,
};

#define HELLO_MAGIC 0x5855434cu /* "LCUX" */
#define PROTO_VERSION 2 /* 2: lease flags, ACK carries D's count */
#define LEASE_F_AM 1u    /* the lease's writes travel as AM_WRITE */
#define HELLO_LEN 24
#define LEASE_HDR 24
#define LEASE_ENTRY 24
#define KEY_MAGIC 0x4b55434cu /* "LCUK" */
#define KEY_VERSION 1
#define KEY_HDR 24

#define ROUND_BYTES (64ull << 20) /* puts per flush: bounds what a revoke waits for */
#define SPIN_NS 200000ull          /* keep polling this long after activity */
#define FENCE_MS_DEFAULT 2000      /* revoke waits this long for P's release */
#define REJECTED_LINGER_NS 2000000000ull /* a rejected endpoint is closed after */
#define CLOSE_WAIT_NS 3000000000ull      /* bound on waiting for UCX requests */

typedef struct ustate ustate_t;
typedef struct uconn uconn_t;

/* ---- P side ---- */

typedef struct rregion {
	uint32_t id;
	uint64_t length;
	uint64_t base; /* D's address of offset 0 */
	uint8_t *rkey_buf;
	size_t rkey_len;
	bool stale;       /* rkey_buf replaced since rkey was unpacked */
	ucp_rkey_h rkey;  /* thread only; unpacked on first use */
} rregion_t;

/* NEW -> LEASING -> LEASED -> PUTTING -> FLUSHED -> DONE_SENT -> (ACK) freed.
 * Callbacks only move states; the loop (uc_pump) issues the UCX calls. */
enum op_state { OP_NEW, OP_LEASING, OP_LEASED, OP_PUTTING, OP_FLUSHED, OP_DONE_SENT };

typedef struct uop {
	lc__batch_t *b; /* referenced; NULL once orphaned */
	uint64_t seq;
	uint64_t room;
	enum op_state state;
	int pending;        /* UCX requests (flush, am writes) pointing at this op */
	ustate_t *st;
	bool orphan;        /* detached: the flush callback frees it */
	bool revoked;       /* D revoked the room: no puts, release the lease */
	bool am;            /* data mode "am" (fixed when the lease is sent) */
	ucs_status_t flush_status;
	uint8_t *hdrs; /* data mode "am": per-write headers, valid until sent */
	rregion_t **rr;     /* per write */
	size_t nput;        /* writes actually put */
	struct uop *next, *prev;
} uop_t;

enum uc_state { UC_CONNECTING, UC_READY, UC_DEAD };

struct uconn {
	lc_conn_t *conn;
	ustate_t *st;
	char host[LC__URL_MAX];
	int port;

	pthread_mutex_t lock;
	uop_t *in_head, *in_tail; /* posted, not yet taken by the thread */
	rregion_t **regions;      /* sorted by id; entries never freed before close */
	size_t nregions, rcap;
	int dead_code;
	char dead_reason[LC_REASON_MAX];

	/* progress thread only */
	ucp_ep_h ep;
	enum uc_state state;
	bool started, ep_closed, need_close;
	uint64_t connect_deadline;
	uop_t ops; /* sentinel */
	uint64_t next_seq;
	uconn_t *next;
};

/* ---- D side ---- */

typedef struct ulistener {
	lc_listener_t *l;
	ustate_t *st;
	ucp_listener_h lh;
	uint64_t fence_ns;
	struct ulistener *next;
} ulistener_t;

/* One leased write: its landing through the memory seam, opened when the
 * lease is granted and done (counted or not) exactly once. */
typedef struct lwrite {
	lc__land_t land;
	struct lease *ls;
	uint8_t *stage; /* a rendezvous into memory without a direct pointer */
	bool busy;      /* a rendezvous receive is under way */
	bool done;      /* lc__land_done was called */
} lwrite_t;

typedef struct lease {
	ustate_t *st;
	uint64_t seq, room;
	lc__grant_room_t *g; /* the bracket (entered while `entered`) */
	bool entered;
	bool am;             /* writes arrive as AM_WRITE: D counts each receive */
	bool released;       /* off its connection; freed when recvs reaches 0 */
	int recvs;           /* rendezvous receives outstanding */
	uint32_t n, nopen;   /* writes; landings opened */
	uint64_t landed;     /* writes counted by lc__land_done(, true) */
	lwrite_t *w;
	uint64_t revoke_seen_ns; /* 0 until the room's revoke was noticed */
	struct lease *next;
} lease_t;

typedef struct sconn {
	ulistener_t *ul;
	ucp_ep_h ep;
	bool authed, rejected, failed, closed;
	uint64_t close_at;
	lease_t *leases;
	struct sconn *next;
} sconn_t;

typedef struct connreq {
	ulistener_t *ul;
	ucp_conn_request_h req;
	struct connreq *next;
} connreq_t;

typedef struct umap {
	uint32_t id;
	uint8_t *addr;
	size_t len;
	ucp_mem_h memh;
	void *rkey;
	size_t rkey_len;
	struct umap *next;
} umap_t;

/* ---- per-context state ---- */

typedef struct cmd {
	void (*fn)(ustate_t *, void *);
	void *arg;
	bool sync, done;
	struct cmd *next;
} cmd_t;

struct ustate {
	lc_ctx_t *ctx;
	pthread_mutex_t life_lock; /* refs, nlisteners, running: engine start/stop */
	int refs;                  /* listeners + connections + packers */
	int nlisteners;            /* pack checks it */
	bool running;              /* the engine below exists */

	ucp_context_h uctx;
	ucp_worker_h worker;
	int efd, epfd;
	pthread_t thread;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	cmd_t *cmd_head, *cmd_tail;
	bool stop;
	_Atomic int sleeping;

	/* progress thread only */
	int reqs; /* UCX requests with our callbacks outstanding */
	uint64_t last_activity;
	uint64_t next_prune;
	ulistener_t *listeners;
	connreq_t *connreqs;
	uconn_t *conns;
	sconn_t *sconns;
	umap_t *maps;

	/* Closed connections, kept until the worker is destroyed: UCX 1.13 may
	 * still call a force-closed endpoint's error handler, whose argument is
	 * the connection. Under `lock`. */
	uconn_t *graveyard;
	sconn_t *sc_graveyard; /* the same for D's accepted connections */
	/* Ops released while UCX requests still point at them (thread only):
	 * their last request frees them, or state_free does once the worker,
	 * and so every callback, is gone (a peer that vanished mid-batch can
	 * leave requests that never complete). */
	uop_t orphans;
	/* Leases released while rendezvous receives still point at them
	 * (thread only): freed by their last receive, or with the worker. */
	lease_t *dead_leases;
};

/* ---- helpers ---- */

/* A UCX status as a layercake code; `connected` tells a refused connection
 * (unreachable) from one that broke (peer closed). */
static int map_status(ucs_status_t s, bool connected)
{
	switch (s) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_INVALID_PARAM:
		return -EINVAL;
	case UCS_ERR_UNSUPPORTED:
		return -ENOTSUP;
	case UCS_ERR_CANCELED:
		return LC_ERR_CANCELLED;
	case UCS_ERR_TIMED_OUT:
	case UCS_ERR_ENDPOINT_TIMEOUT:
		return connected ? LC_ERR_PEER_CLOSED : LC_ERR_UNREACHABLE;
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_REJECTED:
	case UCS_ERR_NOT_CONNECTED:
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_NO_DEVICE:
	case UCS_ERR_INVALID_ADDR:
	case UCS_ERR_IO_ERROR:
		return connected ? LC_ERR_PEER_CLOSED : LC_ERR_UNREACHABLE;
	default:
		return LC_ERR_IO;
	}
}

static int resolve(const char *host, int port, bool passive, struct sockaddr_storage *out,
		   socklen_t *len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
	struct addrinfo *ai;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	int rc = getaddrinfo(host[0] ? host : NULL, ps, &hints, &ai);
	if (rc) {
		LC_WARN("ucx: cannot resolve %s: %s", host, gai_strerror(rc));
		return LC_ERR_UNREACHABLE;
	}
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* UCX 1.13 only selects transports that detect peer failure when an
 * endpoint asks for UCP_ERR_HANDLING_MODE_PEER, which leaves out the
 * shared-memory transports (posix, sysv). Config ucx_err_mode=none
 * (LAYERCAKE_UCX_ERR_MODE) lets them in; a peer's exit is then still
 * reported through the connection manager's TCP connection (client/server
 * endpoints keep it). */
static ucp_err_handling_mode_t err_mode(lc_ctx_t *ctx)
{
	return lc__ctx_cfg(ctx, LC__CFG_ucx_err_mode) == 1 ? UCP_ERR_HANDLING_MODE_NONE
							    : UCP_ERR_HANDLING_MODE_PEER;
}

/* Data mode (config ucx_data, LAYERCAKE_UCX_DATA), chosen per batch when
 * its lease is sent. "am" (0, the default): each write an active message
 * that D receives into the destination it checked itself (UCX's rendezvous
 * lets D pull large writes, a single copy over cma where UCX 1.13 would
 * emulate puts to user memory with two), so a revoke on D is a hard stop
 * whatever UCX transport carries the bytes. "put" (1): one-sided
 * ucp_put_nbx + flush, for RDMA NICs, where the fence (closing P's
 * endpoint) stops the NIC; over same-host shared memory a put is a copy
 * made by P's own process, which no fence on D can stop. */
static bool data_mode_am(lc_ctx_t *ctx)
{
	return lc__ctx_cfg(ctx, LC__CFG_ucx_data) == 0;
}

/* ---- sending active messages ---- */

typedef struct msg {
	ustate_t *st;
	size_t len;
	uint8_t data[];
} msg_t;

static msg_t *msg_new(ustate_t *st, size_t len)
{
	msg_t *m = malloc(sizeof *m + len);
	if (m) {
		m->st = st;
		m->len = len;
	}
	return m;
}

static void msg_sent(void *req, ucs_status_t status, void *user)
{
	msg_t *m = user;
	m->st->reqs--;
	free(m);
	ucp_request_free(req);
}

/* Send and forget (the message is freed on completion). */
static ucs_status_t msg_send(ucp_ep_h ep, unsigned id, msg_t *m)
{
	ustate_t *st = m->st;
	ucp_request_param_t p = {
		.op_attr_mask =
			UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = msg_sent,
		.user_data = m,
		.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
	};
	ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, NULL, 0, m->data, m->len, &p);
	if (r == NULL) {
		free(m);
		return UCS_OK;
	}
	if (UCS_PTR_IS_ERR(r)) {
		free(m);
		return UCS_PTR_STATUS(r);
	}
	st->reqs++;
	return UCS_OK;
}

static void send_u64s(ustate_t *st, ucp_ep_h ep, unsigned id, const uint64_t *v, size_t n)
{
	msg_t *m = msg_new(st, n * 8);
	if (!m)
		return;
	for (size_t i = 0; i < n; i++)
		lc__put_u64(m->data + 8 * i, v[i]);
	ucs_status_t s = msg_send(ep, id, m);
	if (s != UCS_OK)
		LC_DEBUG("ucx: sending message %u: %s", id, ucs_status_string(s));
}

/* ---- endpoint close ---- */

static void close_done(void *req, ucs_status_t status, void *user)
{
	ustate_t *st = user;
	st->reqs--;
	ucp_request_free(req);
}

static void ep_close_force(ustate_t *st, ucp_ep_h ep)
{
	ucp_request_param_t p = {
		.op_attr_mask =
			UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = close_done,
		.user_data = st,
		.flags = UCP_EP_CLOSE_FLAG_FORCE,
	};
	ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
	if (r && !UCS_PTR_IS_ERR(r))
		st->reqs++;
}

/* ---- P side: operations ---- */

static void op_unlink(uop_t *op)
{
	op->prev->next = op->next;
	op->next->prev = op->prev;
	op->next = op->prev = op;
}

static void op_free(uop_t *op)
{
	free(op->hdrs);
	free(op->rr);
	free(op);
}

/* Detach an op from its connection and drop the batch reference; the memory
 * goes now, or with the flush callback that still points at it. */
static void op_release(uop_t *op)
{
	op_unlink(op);
	if (op->b) {
		lc__batch_unref(op->b);
		op->b = NULL;
	}
	if (op->pending) {
		ustate_t *st = op->st;
		op->orphan = true;
		op->next = st->orphans.next;
		op->prev = &st->orphans;
		st->orphans.next->prev = op;
		st->orphans.next = op;
		return;
	}
	op_free(op);
}

static uop_t *op_find(uconn_t *uc, uint64_t seq)
{
	for (uop_t *op = uc->ops.next; op != &uc->ops; op = op->next)
		if (op->seq == seq)
			return op;
	return NULL;
}

/* Move posted ops to the thread's list. */
static void uc_take_new(uconn_t *uc)
{
	pthread_mutex_lock(&uc->lock);
	uop_t *op = uc->in_head;
	uc->in_head = uc->in_tail = NULL;
	pthread_mutex_unlock(&uc->lock);
	while (op) {
		uop_t *next = op->next;
		op->prev = uc->ops.prev;
		op->next = &uc->ops;
		uc->ops.prev->next = op;
		uc->ops.prev = op;
		op = next;
	}
}

/* Record that the connection is dead, without touching its operations: UCX
 * callbacks (endpoint errors, active messages) may run inside a send made
 * while an operation is being worked on, so only the service loop, at a
 * safe point, fails and releases them (see service()). */
static void uc_mark_dead(uconn_t *uc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void uc_mark_dead(uconn_t *uc, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	va_list ap;
	if (uc->state == UC_DEAD)
		return;
	uc->state = UC_DEAD;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof reason, fmt, ap);
	va_end(ap);
	LC_WARN("ucx: %s", reason);
	pthread_mutex_lock(&uc->lock);
	uc->dead_code = code;
	snprintf(uc->dead_reason, sizeof uc->dead_reason, "%s", reason);
	pthread_mutex_unlock(&uc->lock);
	if (code == LC_ERR_STALLED)
		LC__COUNT(uc->conn->ctx, lanes_stalled);
}

static void uc_close_ep(uconn_t *uc)
{
	if (!uc->ep || uc->ep_closed)
		return;
	pthread_mutex_lock(&uc->lock);
	for (size_t i = 0; i < uc->nregions; i++) {
		if (uc->regions[i]->rkey) {
			ucp_rkey_destroy(uc->regions[i]->rkey);
			uc->regions[i]->rkey = NULL;
		}
	}
	pthread_mutex_unlock(&uc->lock);
	ep_close_force(uc->st, uc->ep);
	uc->ep_closed = true;
}

static void send_lease(uconn_t *uc, uop_t *op)
{
	lc__batch_t *b = op->b;
	msg_t *m = msg_new(uc->st, LEASE_HDR + b->nwrites * LEASE_ENTRY);
	if (!m) {
		lc__batch_fail(b, -ENOMEM, "ucx: no memory for the lease of %zu writes", b->nwrites);
		op_release(op);
		return;
	}
	op->seq = ++uc->next_seq;
	op->am = data_mode_am(uc->conn->ctx);
	lc__put_u64(m->data, op->seq);
	lc__put_u64(m->data + 8, op->room);
	lc__put_u32(m->data + 16, (uint32_t)b->nwrites);
	lc__put_u32(m->data + 20, op->am ? LEASE_F_AM : 0);
	for (size_t i = 0; i < b->nwrites; i++) {
		uint8_t *e = m->data + LEASE_HDR + i * LEASE_ENTRY;
		lc__put_u32(e, b->writes[i].remote_region);
		lc__put_u32(e + 4, 0);
		lc__put_u64(e + 8, b->writes[i].remote_offset);
		lc__put_u64(e + 16, b->writes[i].length);
	}
	ucs_status_t s = msg_send(uc->ep, AM_LEASE, m);
	if (s != UCS_OK) {
		lc__batch_fail(b, map_status(s, true), "ucx: sending the lease to %s: %s",
			       uc->conn->url, ucs_status_string(s));
		op_release(op);
		return;
	}
	op->state = OP_LEASING;
}

static void send_done(uconn_t *uc, uop_t *op, int status)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < op->nput && op->b; i++)
		bytes += op->b->writes[i].length;
	msg_t *m = msg_new(uc->st, 32);
	op->state = OP_DONE_SENT;
	if (!m)
		return; /* D keeps the lease until fence or close */
	lc__put_u64(m->data, op->seq);
	lc__put_u64(m->data + 8, op->nput);
	lc__put_u64(m->data + 16, bytes);
	lc__put_u64(m->data + 24, (uint64_t)(int64_t)status);
	ucs_status_t s = msg_send(uc->ep, AM_DONE, m);
	if (s != UCS_OK)
		LC_DEBUG("ucx: sending done to %s: %s", uc->conn->url, ucs_status_string(s));
}

static void op_flushed(uconn_t *uc, uop_t *op, ucs_status_t status)
{
	if (status != UCS_OK) {
		if (op->b)
			lc__batch_fail(op->b, map_status(status, true),
				       "ucx: flushing writes to %s: %s", uc->conn->url,
				       ucs_status_string(status));
		op_release(op); /* the endpoint is broken: D releases on its error */
		return;
	}
	if (op->b && op->nput < op->b->nwrites && !op->revoked &&
	    !lc__batch_is_completed(op->b)) {
		op->state = OP_LEASED; /* the next round of puts */
		return;
	}
	send_done(uc, op, 0);
}

/* A request of the op's current round finished: the round is flushed when
 * the last one does. An orphaned op is freed by its last request. */
static void op_request_done(uop_t *op, ucs_status_t status)
{
	if (status != UCS_OK && op->flush_status == UCS_OK)
		op->flush_status = status;
	if (--op->pending > 0)
		return;
	if (op->orphan) {
		op_unlink(op);
		op_free(op);
		return;
	}
	op->state = OP_FLUSHED;
}

static void write_sent(void *req, ucs_status_t status, void *user)
{
	uop_t *op = user;
	op->st->reqs--;
	ucp_request_free(req);
	op_request_done(op, status);
}

static void flush_cb(void *req, ucs_status_t status, void *user)
{
	uop_t *op = user; /* op->st outlives every request; the connection may not */
	op->st->reqs--;
	ucp_request_free(req);
	op_request_done(op, status);
}

static bool ensure_rkey(uconn_t *uc, rregion_t *r, ucs_status_t *err)
{
	if (r->rkey && !r->stale)
		return true;
	pthread_mutex_lock(&uc->lock);
	if (r->rkey) {
		ucp_rkey_destroy(r->rkey);
		r->rkey = NULL;
	}
	ucs_status_t s = ucp_ep_rkey_unpack(uc->ep, r->rkey_buf, &r->rkey);
	r->stale = false;
	pthread_mutex_unlock(&uc->lock);
	if (s != UCS_OK) {
		r->rkey = NULL;
		*err = s;
		return false;
	}
	return true;
}

static void start_puts(uconn_t *uc, uop_t *op)
{
	lc__batch_t *b = op->b;
	ucs_status_t err = UCS_OK;
	uint64_t round = 0;
	op->state = OP_PUTTING;
	op->flush_status = UCS_OK;
	if (op->am && !op->hdrs) {
		op->hdrs = malloc(b->nwrites * 16);
		if (!op->hdrs) {
			lc__batch_fail(b, -ENOMEM, "ucx: no memory for %zu write headers", b->nwrites);
			send_done(uc, op, -ENOMEM);
			return;
		}
	}
	for (size_t i = op->nput; i < b->nwrites && round < ROUND_BYTES; i++) {
		const lc_write_t *w = &b->writes[i];
		rregion_t *r = op->rr[i];
		if (lc__batch_is_completed(b) || op->revoked)
			break;
		if (!op->am && !ensure_rkey(uc, r, &err)) {
			lc__batch_fail(b, map_status(err, true),
				       "ucx: unpacking the key of region %u of %s: %s", r->id,
				       uc->conn->url, ucs_status_string(err));
			break;
		}
		ucs_status_ptr_t rq;
		if (op->am) {
			uint8_t *h = op->hdrs + i * 16;
			ucp_request_param_t ap = {
				.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
						UCP_OP_ATTR_FIELD_FLAGS,
				.cb.send = write_sent,
				.user_data = op,
				.flags = UCP_AM_SEND_FLAG_REPLY,
			};
			lc__put_u64(h, op->seq);
			lc__put_u64(h + 8, i);
			rq = ucp_am_send_nbx(uc->ep, AM_WRITE, h, 16, w->local, w->length, &ap);
			if (rq && !UCS_PTR_IS_ERR(rq)) {
				op->pending++;
				uc->st->reqs++;
				op->nput = i + 1;
				round += w->length;
				continue;
			}
		} else {
			ucp_request_param_t p = {.op_attr_mask = 0};
			rq = ucp_put_nbx(uc->ep, w->local, w->length, r->base + w->remote_offset,
					 r->rkey, &p);
		}
		if (UCS_PTR_IS_ERR(rq)) {
			err = UCS_PTR_STATUS(rq);
			lc__batch_fail(b, map_status(err, true), "ucx: put of write %zu to %s: %s", i,
				       uc->conn->url, ucs_status_string(err));
			break;
		}
		if (rq)
			ucp_request_free(rq); /* completion is tracked by the flush */
		op->nput = i + 1;
		round += w->length;
	}
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.cb.send = flush_cb,
		.user_data = op,
	};
	op->pending++; /* held while this round is issued */
	ucs_status_ptr_t rq = op->am ? NULL : ucp_ep_flush_nbx(uc->ep, &p);
	if (rq == NULL || UCS_PTR_IS_ERR(rq)) {
		op_request_done(op, UCS_PTR_STATUS(rq));
	} else {
		uc->st->reqs++;
	}
}

/* Ops waiting for the connection to be ready, and for the lease. */
static void uc_pump(uconn_t *uc)
{
	uc_take_new(uc);
	if (uc->state != UC_READY)
		return;
	for (uop_t *op = uc->ops.next, *next; op != &uc->ops; op = next) {
		next = op->next;
		switch (op->state) {
		case OP_NEW:
			if (!op->b || lc__batch_is_completed(op->b))
				op_release(op);
			else
				send_lease(uc, op);
			break;
		case OP_LEASED:
			if (!op->b || lc__batch_is_completed(op->b) || op->revoked)
				send_done(uc, op, LC_ERR_CANCELLED); /* release, nothing written */
			else
				start_puts(uc, op);
			break;
		case OP_FLUSHED:
			op_flushed(uc, op, op->flush_status);
			break;
		default:
			break;
		}
	}
}

/* ---- P side: messages from D ---- */

static uconn_t *uc_by_ep(ustate_t *st, ucp_ep_h ep)
{
	for (uconn_t *uc = st->conns; uc; uc = uc->next)
		if (uc->ep == ep && !uc->ep_closed)
			return uc;
	return NULL;
}

static void on_hello_reply(uconn_t *uc, const uint8_t *d, size_t len)
{
	if (len < 4 || uc->state != UC_CONNECTING)
		return;
	int status = (int32_t)lc__get_u32(d);
	if (status == 0) {
		uc->state = UC_READY;
		LC_DEBUG("ucx: connected to %s", uc->conn->url);
	} else if (status == LC_ERR_AUTH) {
		uc_mark_dead(uc, LC_ERR_AUTH, "%s rejected the session token", uc->conn->url);
		uc->need_close = true;
	} else {
		uc_mark_dead(uc, status, "%s refused the connection: %s", uc->conn->url,
			lc_strerror(status));
		uc->need_close = true;
	}
}

static void on_lease_reply(uconn_t *uc, const uint8_t *d, size_t len)
{
	if (len < 16)
		return;
	uop_t *op = op_find(uc, lc__get_u64(d));
	int status = (int32_t)lc__get_u32(d + 8);
	uint32_t index = lc__get_u32(d + 12);
	if (!op || op->state != OP_LEASING)
		return;
	if (status) {
		if (op->b) {
			const lc_write_t *w = index < op->b->nwrites ? &op->b->writes[index] : NULL;
			lc__batch_fail(op->b, status,
				       "ucx://%s:%d rejected write %u (region %u, offset %llu, %llu "
				       "bytes, room %llu): %s",
				       uc->host, uc->port, index, w ? w->remote_region : 0,
				       (unsigned long long)(w ? w->remote_offset : 0),
				       (unsigned long long)(w ? w->length : 0),
				       (unsigned long long)op->room, lc_strerror(status));
		}
		op_release(op); /* D holds nothing for a refused lease */
		return;
	}
	op->state = OP_LEASED; /* the loop puts (or releases) */
}

/* D's word on what landed is what completes a batch: a write D did not
 * count (its receive failed, or the room was being revoked) fails it. */
static void on_ack(uconn_t *uc, const uint8_t *d, size_t len)
{
	if (len < 16)
		return;
	uop_t *op = op_find(uc, lc__get_u64(d));
	uint64_t landed = lc__get_u64(d + 8);
	if (!op || op->state != OP_DONE_SENT)
		return;
	if (op->b && !op->revoked && op->nput == op->b->nwrites) {
		if (landed == op->b->nwrites)
			lc__batch_applied(op->b, op->b->nwrites - atomic_load(&op->b->applied));
		else
			lc__batch_fail(op->b, LC_ERR_GRANT,
				       "ucx: %s landed %llu of the %zu writes of room %llu",
				       uc->conn->url, (unsigned long long)landed, op->b->nwrites,
				       (unsigned long long)op->room);
	}
	op_release(op);
}

static void on_revoke(uconn_t *uc, const uint8_t *d, size_t len)
{
	if (len < 8)
		return;
	uint64_t room = lc__get_u64(d);
	uc_take_new(uc);
	for (uop_t *op = uc->ops.next, *next; op != &uc->ops; op = next) {
		next = op->next;
		if (op->room != room)
			continue;
		if (op->b)
			lc__batch_fail(op->b, LC_ERR_GRANT,
				       "ucx: %s revoked the grant of room %llu", uc->conn->url,
				       (unsigned long long)room);
		if (op->state == OP_NEW)
			op_release(op);
		else
			op->revoked = true; /* a leased op still sends its DONE */
	}
}

/* ---- D side: messages from P ---- */

static sconn_t *sc_by_ep(ustate_t *st, ucp_ep_h ep)
{
	for (sconn_t *sc = st->sconns; sc; sc = sc->next)
		if (sc->ep == ep && !sc->closed)
			return sc;
	return NULL;
}

/* Finish a leased write through the seam, once: counted when `landed`. */
static void write_done(lwrite_t *w, bool landed)
{
	if (w->done)
		return;
	w->done = true;
	lc__land_done(&w->land, landed);
	if (landed)
		w->ls->landed++;
}

static void lease_free(lease_t *ls)
{
	for (uint32_t i = 0; i < ls->nopen; i++) {
		write_done(&ls->w[i], false);
		free(ls->w[i].stage);
	}
	free(ls->w);
	free(ls);
}

/* Leave the room's bracket and finish every write not counted; the memory
 * waits for rendezvous receives that still point into it. */
static void lease_release(lease_t *ls)
{
	if (ls->entered)
		lc__grant_exit(ls->g);
	ls->entered = false;
	for (uint32_t i = 0; i < ls->nopen; i++)
		write_done(&ls->w[i], false);
	if (ls->recvs == 0) {
		lease_free(ls);
		return;
	}
	ls->released = true;
	ls->next = ls->st->dead_leases;
	ls->st->dead_leases = ls;
}

static void lease_reap(ustate_t *st, lease_t *ls)
{
	for (lease_t **pp = &st->dead_leases; *pp; pp = &(*pp)->next) {
		if (*pp == ls) {
			*pp = ls->next;
			lease_free(ls);
			return;
		}
	}
}

static void sc_release_leases(sconn_t *sc)
{
	while (sc->leases) {
		lease_t *ls = sc->leases;
		sc->leases = ls->next;
		lease_release(ls);
	}
}

/* Close an accepted endpoint; once closed no put from it can land (the
 * connection under it is gone), so its leases are released. */
static void sc_close(ustate_t *st, sconn_t *sc)
{
	if (sc->closed)
		return;
	sc->closed = true;
	ep_close_force(st, sc->ep);
	sc_release_leases(sc);
}

static void reply_status(ustate_t *st, ucp_ep_h ep, unsigned id, uint64_t seq, int status,
			 uint32_t index, bool with_seq)
{
	msg_t *m = msg_new(st, with_seq ? 16 : 4);
	if (!m)
		return;
	if (with_seq) {
		lc__put_u64(m->data, seq);
		lc__put_u32(m->data + 8, (uint32_t)status);
		lc__put_u32(m->data + 12, index);
	} else {
		lc__put_u32(m->data, (uint32_t)status);
	}
	ucs_status_t s = msg_send(ep, id, m);
	if (s != UCS_OK)
		LC_DEBUG("ucx: reply %u: %s", id, ucs_status_string(s));
}

static void on_hello(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	if (len < HELLO_LEN || lc__get_u32(d) != HELLO_MAGIC ||
	    lc__get_u16(d + 4) != PROTO_VERSION) {
		LC__COUNT(st->ctx, frames_malformed);
		reply_status(st, sc->ep, AM_HELLO_REPLY, 0, LC_ERR_PROTO, 0, false);
		sc->rejected = true;
		sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
		return;
	}
	if (!lc__ctx_token_accepted(st->ctx, d + 8, d[6] != 0)) {
		LC__COUNT(st->ctx, conns_rejected_auth);
		LC_WARN("ucx: rejected a connection with a bad session token");
		reply_status(st, sc->ep, AM_HELLO_REPLY, 0, LC_ERR_AUTH, 0, false);
		sc->rejected = true;
		sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
		return;
	}
	sc->authed = true;
	reply_status(st, sc->ep, AM_HELLO_REPLY, 0, 0, 0, false);
}

/* Open a landing per write (regions, ranges and the room's grant, checked
 * and counted by the seam exactly as for the copying transports); all must
 * share one grant entry, whose bracket the lease then holds until DONE.
 * *bad: the index of the rejected write. */
static int lease_open(ustate_t *st, lease_t *ls, const uint8_t *d, uint32_t *bad)
{
	for (uint32_t i = 0; i < ls->n; i++) {
		const uint8_t *e = d + LEASE_HDR + (size_t)i * LEASE_ENTRY;
		lwrite_t *w = &ls->w[i];
		*bad = i;
		int rc = lc__land_open(st->ctx, ls->room, lc__get_u32(e), lc__get_u64(e + 8),
				       lc__get_u64(e + 16), &w->land);
		if (rc)
			return rc;
		w->ls = ls;
		ls->nopen = i + 1;
		if (w->land.g != ls->w[0].land.g) { /* revoked and granted again meanwhile */
			LC__COUNT(st->ctx, writes_rejected_grant);
			return LC_ERR_GRANT;
		}
	}
	ls->g = ls->w[0].land.g;
	if (!lc__grant_enter(ls->g)) {
		LC__COUNT(st->ctx, writes_rejected_grant);
		*bad = 0;
		return LC_ERR_GRANT;
	}
	ls->entered = true;
	return 0;
}

static void on_lease(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	if (len < LEASE_HDR) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	uint64_t seq = lc__get_u64(d);
	uint32_t n = lc__get_u32(d + 16), bad = 0;
	if (!sc->authed) {
		reply_status(st, sc->ep, AM_LEASE_REPLY, seq, LC_ERR_AUTH, 0, true);
		return;
	}
	if (n == 0 || (len - LEASE_HDR) / LEASE_ENTRY != n || (len - LEASE_HDR) % LEASE_ENTRY) {
		LC__COUNT(st->ctx, frames_malformed);
		reply_status(st, sc->ep, AM_LEASE_REPLY, seq, LC_ERR_PROTO, 0, true);
		return;
	}
	lease_t *ls = calloc(1, sizeof *ls);
	lwrite_t *w = calloc(n, sizeof *w);
	if (!ls || !w) {
		free(ls);
		free(w);
		reply_status(st, sc->ep, AM_LEASE_REPLY, seq, -ENOMEM, 0, true);
		return;
	}
	*ls = (lease_t){.st = st, .seq = seq, .room = lc__get_u64(d + 8), .n = n, .w = w,
			.am = (lc__get_u32(d + 20) & LEASE_F_AM) != 0};
	int rc = lease_open(st, ls, d, &bad);
	if (rc) {
		lease_release(ls); /* finishes the opened landings, uncounted */
		reply_status(st, sc->ep, AM_LEASE_REPLY, seq, rc, bad, true);
		return;
	}
	ls->next = sc->leases;
	sc->leases = ls;
	reply_status(st, sc->ep, AM_LEASE_REPLY, seq, 0, 0, true);
}

/* Put mode: D cannot observe one-sided puts, so the first `writes` leased
 * writes count as landed on P's word that they were put and flushed (the
 * trust point of put mode, docs/transport-ucx.md); `bytes` must agree with
 * D's own lengths. In am mode D counted each write as it received it. */
static void lease_count_puts(ustate_t *st, lease_t *ls, uint64_t writes, uint64_t bytes)
{
	uint64_t sum = 0;
	if (ls->am || writes == 0)
		return;
	if (writes > ls->n) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	for (uint64_t i = 0; i < writes; i++)
		sum += ls->w[i].land.length;
	if (sum != bytes) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	for (uint64_t i = 0; i < writes; i++)
		write_done(&ls->w[i], true);
}

static void on_done(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	if (len < 32) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	uint64_t seq = lc__get_u64(d), landed = 0;
	for (lease_t **pp = &sc->leases; *pp; pp = &(*pp)->next) {
		lease_t *ls = *pp;
		if (ls->seq != seq)
			continue;
		*pp = ls->next;
		lease_count_puts(st, ls, lc__get_u64(d + 8), lc__get_u64(d + 16));
		landed = ls->landed;
		lease_release(ls);
		break;
	}
	uint64_t v[2] = {seq, landed};
	send_u64s(st, sc->ep, AM_ACK, v, 2);
}

/* A write's bytes are in place (or failed): count it through the seam. */
static void write_received(lwrite_t *w, ucs_status_t status)
{
	bool ok = status == UCS_OK;
	if (!ok)
		LC_DEBUG("ucx: receiving a write: %s", ucs_status_string(status));
	if (ok && w->stage && !w->done) {
		int rc = lc__land_copy(&w->land, 0, w->stage, w->land.length);
		if (rc)
			lc__land_revoked(&w->land);
		ok = rc == 0;
	}
	free(w->stage);
	w->stage = NULL;
	w->busy = false;
	write_done(w, ok); /* nothing once the lease was released */
}

static void recv_done(void *req, ucs_status_t status, size_t length, void *user)
{
	lwrite_t *w = user;
	lease_t *ls = w->ls;
	ustate_t *st = ls->st;
	(void)length;
	st->reqs--;
	ucp_request_free(req);
	write_received(w, status);
	if (--ls->recvs == 0 && ls->released)
		lease_reap(st, ls);
}

/* The write named by an AM_WRITE header: of an am lease of this
 * connection, of the right length, not received yet. */
static lwrite_t *write_find(ustate_t *st, sconn_t *sc, const uint8_t *h, size_t hlen,
			    size_t length)
{
	uint64_t seq = hlen >= 16 ? lc__get_u64(h) : 0, index = hlen >= 16 ? lc__get_u64(h + 8) : 0;
	for (lease_t *ls = sc ? sc->leases : NULL; ls; ls = ls->next) {
		if (ls->seq != seq)
			continue;
		if (!ls->am || index >= ls->n)
			break;
		lwrite_t *w = &ls->w[index];
		if (w->land.length != length || w->busy || w->done)
			break;
		return w;
	}
	LC__COUNT(st->ctx, frames_malformed);
	return NULL;
}

/* Data mode "am": a write of a granted lease, landed through the seam into
 * the destination D checked at lease time. Eager payloads are copied
 * (lc__land_copy); a rendezvous is received straight into the direct
 * destination, under the lease's bracket of the room, and counted when the
 * receive completes. */
static void on_write(ustate_t *st, sconn_t *sc, const uint8_t *h, size_t hlen, void *data,
		     size_t length, bool rndv)
{
	lwrite_t *w = write_find(st, sc, h, hlen, length);
	if (!w)
		return; /* dropped: a rendezvous is cancelled, nothing lands */
	if (w->ls->revoke_seen_ns || !rndv) {
		int rc = w->ls->revoke_seen_ns ? LC_ERR_GRANT : lc__land_copy(&w->land, 0, data, length);
		if (rc)
			lc__land_revoked(&w->land);
		write_done(w, rc == 0);
		return;
	}
	void *into = w->land.dst;
	if (!into && !(into = w->stage = malloc(length))) {
		write_done(w, false);
		return;
	}
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.cb.recv_am = recv_done,
		.user_data = w,
	};
	w->busy = true;
	ucs_status_ptr_t r = ucp_am_recv_data_nbx(st->worker, data, into, length, &p);
	if (UCS_PTR_IS_ERR(r)) {
		LC_WARN("ucx: receiving a write: %s", ucs_status_string(UCS_PTR_STATUS(r)));
		write_received(w, UCS_PTR_STATUS(r));
	} else if (r == NULL) {
		write_received(w, UCS_OK); /* completed in place */
	} else {
		st->reqs++;
		w->ls->recvs++;
	}
}

/* ---- active message dispatch ---- */

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param, unsigned id)
{
	ustate_t *st = arg;
	st->last_activity = lc__now_ns();
	if (id == AM_WRITE) {
		sconn_t *sc = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
				      ? sc_by_ep(st, param->reply_ep)
				      : NULL;
		on_write(st, sc && sc->authed ? sc : NULL, header, header_length, data, length,
			 (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
		return UCS_OK;
	}
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		LC__COUNT(st->ctx, frames_malformed);
		return UCS_OK;
	}
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		LC__COUNT(st->ctx, frames_malformed);
		return UCS_OK;
	}
	ucp_ep_h ep = param->reply_ep;
	const uint8_t *d = data;
	switch (id) {
	case AM_HELLO:
	case AM_LEASE:
	case AM_DONE: {
		sconn_t *sc = sc_by_ep(st, ep);
		if (!sc || sc->rejected)
			break;
		if (id == AM_HELLO)
			on_hello(st, sc, d, length);
		else if (id == AM_LEASE)
			on_lease(st, sc, d, length);
		else
			on_done(st, sc, d, length);
		break;
	}
	default: {
		uconn_t *uc = uc_by_ep(st, ep);
		if (!uc)
			break;
		if (id == AM_HELLO_REPLY)
			on_hello_reply(uc, d, length);
		else if (id == AM_LEASE_REPLY)
			on_lease_reply(uc, d, length);
		else if (id == AM_ACK)
			on_ack(uc, d, length);
		else if (id == AM_REVOKE)
			on_revoke(uc, d, length);
		break;
	}
	}
	return UCS_OK;
}

#define AM_HANDLER(name, id)                                                                   \
	static ucs_status_t name(void *arg, const void *h, size_t hl, void *d, size_t l,       \
				 const ucp_am_recv_param_t *p)                                 \
	{                                                                                      \
		return am_cb(arg, h, hl, d, l, p, id);                                         \
	}
AM_HANDLER(am_hello, AM_HELLO)
AM_HANDLER(am_hello_reply, AM_HELLO_REPLY)
AM_HANDLER(am_lease, AM_LEASE)
AM_HANDLER(am_lease_reply, AM_LEASE_REPLY)
AM_HANDLER(am_done, AM_DONE)
AM_HANDLER(am_ack, AM_ACK)
AM_HANDLER(am_revoke, AM_REVOKE)
AM_HANDLER(am_write, AM_WRITE)

/* ---- endpoint errors ---- */

static void uc_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	uconn_t *uc = arg;
	if (uc->state == UC_DEAD)
		return; /* closed (maybe in the graveyard: uc->conn is gone) */
	bool connected = uc->state == UC_READY;
	int code = map_status(status, connected);
	if (connected)
		uc_mark_dead(uc, code, "connection to %s broke: %s", uc->conn->url,
			ucs_status_string(status));
	else
		uc_mark_dead(uc, code, "cannot connect to %s: %s", uc->conn->url,
			ucs_status_string(status));
	uc->need_close = true; /* not from inside the callback */
}

/* A closed connection's memory stays until the worker is destroyed: UCX may
 * still call the closed endpoint's error handler (sc_err sees `closed`). */
static void sc_bury(ustate_t *st, sconn_t *sc)
{
	sc->next = st->sc_graveyard;
	st->sc_graveyard = sc;
}

static void sc_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	sconn_t *sc = arg;
	if (sc->closed || sc->failed)
		return;
	LC_INFO("ucx: a sender's connection closed: %s", ucs_status_string(status));
	sc->failed = true; /* sc_service closes it and releases its leases */
}

/* ---- D side: accepting ---- */

static void conn_handler(ucp_conn_request_h req, void *arg)
{
	ulistener_t *ul = arg;
	connreq_t *cr = malloc(sizeof *cr);
	if (!cr) {
		ucp_listener_reject(ul->lh, req);
		return;
	}
	cr->ul = ul;
	cr->req = req;
	cr->next = ul->st->connreqs;
	ul->st->connreqs = cr;
}

static void accept_pending(ustate_t *st)
{
	while (st->connreqs) {
		connreq_t *cr = st->connreqs;
		st->connreqs = cr->next;
		sconn_t *sc = calloc(1, sizeof *sc);
		if (!sc) {
			ucp_listener_reject(cr->ul->lh, cr->req);
			free(cr);
			continue;
		}
		sc->ul = cr->ul;
		ucp_ep_params_t ep = {
			.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
				      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			.conn_request = cr->req,
			.err_mode = err_mode(st->ctx),
			.err_handler = {.cb = sc_err, .arg = sc},
		};
		ucs_status_t s = ucp_ep_create(st->worker, &ep, &sc->ep);
		free(cr);
		if (s != UCS_OK) {
			LC_INFO("ucx: accepting a connection: %s", ucs_status_string(s));
			free(sc);
			continue;
		}
		sc->next = st->sconns;
		st->sconns = sc;
	}
}

/* Revokes pending on leased rooms: ask P to stop, fence after fence_ns. */
static void sc_service(ustate_t *st, uint64_t now)
{
	for (sconn_t **pp = &st->sconns; *pp;) {
		sconn_t *sc = *pp;
		if (!sc->closed && (sc->failed || (sc->rejected && now >= sc->close_at)))
			sc_close(st, sc);
		bool fence = false;
		for (lease_t *ls = sc->closed ? NULL : sc->leases; ls; ls = ls->next) {
			if (lc__grant_enter(ls->g)) {
				lc__grant_exit(ls->g);
				continue;
			}
			if (!ls->revoke_seen_ns) {
				ls->revoke_seen_ns = now;
				uint64_t room = ls->room;
				LC_DEBUG("ucx: room %llu revoked with a lease out; asking the sender",
					 (unsigned long long)room);
				send_u64s(st, sc->ep, AM_REVOKE, &room, 1);
			} else if (now - ls->revoke_seen_ns > sc->ul->fence_ns) {
				fence = true;
			}
		}
		if (fence) {
			LC_WARN("ucx: a sender did not release a revoked room within %llu ms; "
				"closing its connection (fence)",
				(unsigned long long)(sc->ul->fence_ns / 1000000));
			sc_close(st, sc);
		}
		if (sc->closed) {
			*pp = sc->next;
			sc_bury(st, sc);
		} else {
			pp = &sc->next;
		}
	}
}

/* ---- region maps (D) ---- */

static void map_free(ustate_t *st, umap_t *m)
{
	ucp_rkey_buffer_release(m->rkey);
	ucp_mem_unmap(st->uctx, m->memh);
	free(m);
}

/* Unmap regions that were deregistered (their ids are never reused). */
static void prune_maps(ustate_t *st)
{
	for (umap_t **pp = &st->maps; *pp;) {
		umap_t *m = *pp;
		lc__region_info_t info;
		if (lc__regions_get(&st->ctx->regions, m->id, &info) || info.addr != m->addr ||
		    info.len != m->len) {
			*pp = m->next;
			LC_DEBUG("ucx: unmapping region %u", m->id);
			map_free(st, m);
		} else {
			pp = &m->next;
		}
	}
}

/* ---- synchronous and asynchronous commands ---- */

static void wake(ustate_t *st)
{
	if (atomic_load(&st->sleeping)) {
		uint64_t one = 1;
		ssize_t n = write(st->efd, &one, sizeof one);
		(void)n;
	}
}

static void cmd_push(ustate_t *st, cmd_t *c)
{
	c->next = NULL;
	if (st->cmd_tail)
		st->cmd_tail->next = c;
	else
		st->cmd_head = c;
	st->cmd_tail = c;
}

static void run_sync(ustate_t *st, void (*fn)(ustate_t *, void *), void *arg)
{
	cmd_t c = {.fn = fn, .arg = arg, .sync = true};
	pthread_mutex_lock(&st->lock);
	cmd_push(st, &c);
	pthread_mutex_unlock(&st->lock);
	atomic_store(&st->sleeping, 1); /* force the eventfd write */
	wake(st);
	pthread_mutex_lock(&st->lock);
	while (!c.done)
		pthread_cond_wait(&st->cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
}

static bool run_cmds(ustate_t *st)
{
	pthread_mutex_lock(&st->lock);
	cmd_t *c = st->cmd_head;
	st->cmd_head = st->cmd_tail = NULL;
	pthread_mutex_unlock(&st->lock);
	bool any = c != NULL;
	while (c) {
		cmd_t *next = c->next;
		c->fn(st, c->arg);
		if (c->sync) {
			pthread_mutex_lock(&st->lock);
			c->done = true;
			pthread_cond_broadcast(&st->cond);
			pthread_mutex_unlock(&st->lock);
		} else {
			free(c);
		}
		c = next;
	}
	return any;
}

/* ---- the progress thread ---- */

static bool uc_busy(ustate_t *st)
{
	for (uconn_t *uc = st->conns; uc; uc = uc->next) {
		if (uc->ops.next != &uc->ops)
			return true;
		pthread_mutex_lock(&uc->lock); /* in_head is written by posters */
		bool queued = uc->in_head != NULL;
		pthread_mutex_unlock(&uc->lock);
		if (queued)
			return true;
	}
	for (sconn_t *sc = st->sconns; sc; sc = sc->next)
		if (sc->leases)
			return true;
	return st->reqs > 0;
}

static void service(ustate_t *st, uint64_t now)
{
	accept_pending(st);
	for (uconn_t *uc = st->conns; uc; uc = uc->next) {
		if (!uc->started)
			continue;
		if (uc->state == UC_CONNECTING && now > uc->connect_deadline) {
			uc_mark_dead(uc, LC_ERR_UNREACHABLE, "no handshake with %s within %lld ms",
				uc->conn->url,
				(long long)lc__ctx_cfg(st->ctx, LC__CFG_connect_timeout_ms));
			uc_close_ep(uc);
		}
		uc_pump(uc);
		if (uc->need_close) {
			uc->need_close = false;
			uc_close_ep(uc);
		}
		if (uc->state == UC_DEAD) {
			uc_take_new(uc);
			while (uc->ops.next != &uc->ops) {
				uop_t *op = uc->ops.next;
				pthread_mutex_lock(&uc->lock);
				int code = uc->dead_code;
				char reason[LC_REASON_MAX];
				snprintf(reason, sizeof reason, "%s", uc->dead_reason);
				pthread_mutex_unlock(&uc->lock);
				if (op->b)
					lc__batch_fail(op->b, code, "%s", reason);
				op_release(op);
			}
		}
	}
	sc_service(st, now);
	if (now >= st->next_prune) {
		prune_maps(st);
		st->next_prune = now + 1000000000ull;
	}
}

static void *progress_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-ucx");
	ustate_t *st = arg;
	struct epoll_event ev[4];
	for (;;) {
		bool active = run_cmds(st);
		unsigned n = 0;
		for (int i = 0; i < 64; i++) {
			unsigned k = ucp_worker_progress(st->worker);
			if (!k)
				break;
			n += k;
		}
		uint64_t now = lc__now_ns();
		if (n || active)
			st->last_activity = now;
		service(st, now);
		pthread_mutex_lock(&st->lock);
		bool stop = st->stop && !st->cmd_head;
		pthread_mutex_unlock(&st->lock);
		if (stop)
			break;
		bool busy = uc_busy(st);
		if (busy && now - st->last_activity < SPIN_NS)
			continue;
		atomic_store(&st->sleeping, 1);
		pthread_mutex_lock(&st->lock);
		bool queued = st->cmd_head != NULL || st->stop;
		pthread_mutex_unlock(&st->lock);
		if (queued || ucp_worker_arm(st->worker) == UCS_ERR_BUSY) {
			atomic_store(&st->sleeping, 0);
			continue;
		}
		int timeout = busy || st->connreqs ? 2 : 100;
		for (uconn_t *uc = st->conns; uc; uc = uc->next)
			if (uc->state == UC_CONNECTING)
				timeout = 2;
		for (sconn_t *sc = st->sconns; sc; sc = sc->next)
			if (sc->rejected)
				timeout = 2;
		int k = epoll_wait(st->epfd, ev, 4, timeout);
		atomic_store(&st->sleeping, 0);
		for (int i = 0; i < k; i++) {
			if (ev[i].data.fd == st->efd) {
				uint64_t v;
				ssize_t r = read(st->efd, &v, sizeof v);
				(void)r;
			}
		}
	}
	return NULL;
}

/* ---- state lifetime ---- */

/* Release the engine's UCX objects and reset it for a later start. */
static void engine_free(ustate_t *st)
{
	if (st->worker)
		ucp_worker_destroy(st->worker);
	st->worker = NULL;
	while (st->sc_graveyard) {
		sconn_t *sc = st->sc_graveyard;
		st->sc_graveyard = sc->next;
		free(sc);
	}
	while (st->orphans.next != &st->orphans) {
		uop_t *op = st->orphans.next; /* no callback can come any more */
		op_unlink(op);
		op_free(op);
	}
	while (st->dead_leases) {
		lease_t *ls = st->dead_leases; /* no receive can complete any more */
		st->dead_leases = ls->next;
		lease_free(ls);
	}
	while (st->graveyard) { /* no callback can come any more */
		uconn_t *uc = st->graveyard;
		st->graveyard = uc->next;
		pthread_mutex_destroy(&uc->lock);
		free(uc);
	}
	if (st->uctx)
		ucp_cleanup(st->uctx);
	st->uctx = NULL;
	if (st->epfd >= 0)
		close(st->epfd);
	if (st->efd >= 0)
		close(st->efd);
	st->efd = st->epfd = -1;
	st->cmd_head = st->cmd_tail = NULL;
	st->stop = false;
	atomic_store(&st->sleeping, 0);
	st->reqs = 0;
	st->last_activity = st->next_prune = 0;
}

static int register_handlers(ustate_t *st, ucs_status_t *sp)
{
	static const struct {
		unsigned id;
		ucp_am_recv_callback_t cb;
	} handlers[] = {
		{AM_HELLO, am_hello},   {AM_HELLO_REPLY, am_hello_reply}, {AM_LEASE, am_lease},
		{AM_LEASE_REPLY, am_lease_reply}, {AM_DONE, am_done}, {AM_ACK, am_ack},
		{AM_REVOKE, am_revoke}, {AM_WRITE, am_write},
	};
	for (size_t i = 0; i < LC__ARRAY_SIZE(handlers); i++) {
		ucp_am_handler_param_t hp = {
			.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
				      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
			.id = handlers[i].id,
			.flags = UCP_AM_FLAG_WHOLE_MSG,
			.cb = handlers[i].cb,
			.arg = st,
		};
		*sp = ucp_worker_set_am_recv_handler(st->worker, &hp);
		if (*sp != UCS_OK)
			return -1;
	}
	return 0;
}

/* The wake-up: the worker's fd and our eventfd in one epoll set. */
static int make_wakeup(ustate_t *st, ucs_status_t *sp)
{
	int wfd;
	*sp = ucp_worker_get_efd(st->worker, &wfd);
	if (*sp != UCS_OK)
		return 1;
	st->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	st->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (st->efd < 0 || st->epfd < 0)
		return -errno;
	struct epoll_event e1 = {.events = EPOLLIN, .data.fd = st->efd};
	struct epoll_event e2 = {.events = EPOLLIN, .data.fd = wfd};
	if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->efd, &e1) ||
	    epoll_ctl(st->epfd, EPOLL_CTL_ADD, wfd, &e2))
		return -errno;
	return 0;
}

/* UCP context, worker and progress thread; under life_lock. */
static int engine_start(ustate_t *st)
{
	ucp_config_t *cfg;
	ucs_status_t s;
	int rc;
	s = ucp_config_read(NULL, NULL, &cfg); /* UCX_TLS and friends */
	if (s != UCS_OK)
		goto fail_ucs;
	ucp_params_t p = {
		.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
		.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
		.name = "layercake",
	};
	s = ucp_init(&p, cfg, &st->uctx);
	ucp_config_release(cfg);
	if (s != UCS_OK)
		goto fail_ucs;
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	s = ucp_worker_create(st->uctx, &wp, &st->worker);
	if (s != UCS_OK || register_handlers(st, &s))
		goto fail_ucs;
	rc = make_wakeup(st, &s);
	if (rc > 0)
		goto fail_ucs;
	if (!rc)
		rc = -pthread_create(&st->thread, NULL, progress_main, st);
	if (rc)
		goto fail;
	st->running = true;
	return 0;
fail_ucs:
	LC_WARN("ucx: initialising UCX: %s", ucs_status_string(s));
	rc = map_status(s, false) == LC_ERR_IO ? LC_ERR_NO_TRANSPORT : map_status(s, false);
	if (rc == -ENOTSUP || rc == LC_ERR_UNREACHABLE)
		rc = LC_ERR_NO_TRANSPORT;
fail:
	engine_free(st);
	return rc;
}

/* The thread is stopped; release what is left (normally nothing). */
static void state_teardown(ustate_t *st)
{
	for (ulistener_t *ul = st->listeners; ul; ul = ul->next)
		ucp_listener_destroy(ul->lh);
	st->listeners = NULL;
	for (sconn_t *sc = st->sconns, *n; sc; sc = n) {
		n = sc->next;
		sc_close(st, sc);
		sc_bury(st, sc);
	}
	st->sconns = NULL;
	uint64_t until = lc__now_ns() + CLOSE_WAIT_NS;
	while (st->reqs > 0 && lc__now_ns() < until)
		ucp_worker_progress(st->worker);
	if (st->reqs > 0)
		LC_WARN("ucx: %d UCX requests still outstanding at teardown", st->reqs);
	while (st->maps) {
		umap_t *m = st->maps;
		st->maps = m->next;
		map_free(st, m);
	}
}

/* Stop the thread and free the engine; under life_lock. */
static void engine_stop(ustate_t *st)
{
	pthread_mutex_lock(&st->lock);
	st->stop = true;
	pthread_mutex_unlock(&st->lock);
	atomic_store(&st->sleeping, 1);
	wake(st);
	pthread_join(st->thread, NULL);
	state_teardown(st);
	engine_free(st);
	st->running = false;
}

/* ops->init: the context's ucx slot. Cheap: UCX starts at first use. */
static int ucx_init(lc_ctx_t *ctx, void **state)
{
	ustate_t *st = calloc(1, sizeof *st);
	if (!st)
		return -ENOMEM;
	st->ctx = ctx;
	st->efd = st->epfd = -1;
	st->orphans.next = st->orphans.prev = &st->orphans;
	pthread_mutex_init(&st->life_lock, NULL);
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	*state = st;
	return 0;
}

/* ops->fini: every listener and connection of the context is closed. */
static void ucx_fini(lc_ctx_t *ctx, void *state)
{
	ustate_t *st = state;
	(void)ctx;
	if (st->running) /* only if a close was missed: never expected */
		engine_stop(st);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->life_lock);
	free(st);
}

extern const lc__transport_ops_t lc__ucx_ops;

/* The state of ctx with a reference on its engine, which `start` starts if
 * it is not running (without it: -ENOENT). */
static int state_get(lc_ctx_t *ctx, bool start, bool listener, ustate_t **out)
{
	void *p;
	int rc = lc__transport_state(ctx, &lc__ucx_ops, &p);
	if (rc)
		return rc;
	ustate_t *st = p;
	pthread_mutex_lock(&st->life_lock);
	if (!st->running)
		rc = start ? engine_start(st) : -ENOENT;
	if (!rc) {
		st->refs++;
		if (listener)
			st->nlisteners++;
	}
	pthread_mutex_unlock(&st->life_lock);
	if (!rc)
		*out = st;
	return rc;
}

static void state_put(ustate_t *st, bool listener)
{
	pthread_mutex_lock(&st->life_lock);
	if (listener)
		st->nlisteners--;
	if (--st->refs == 0)
		engine_stop(st);
	pthread_mutex_unlock(&st->life_lock);
}

/* ---- listeners ---- */

typedef struct listen_arg {
	ulistener_t *ul;
	struct sockaddr_storage sa;
	socklen_t salen;
	int rc;
	int port;
} listen_arg_t;

static void do_listen(ustate_t *st, void *arg)
{
	listen_arg_t *a = arg;
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (const struct sockaddr *)&a->sa, .addrlen = a->salen},
		.conn_handler = {.cb = conn_handler, .arg = a->ul},
	};
	ucs_status_t s = ucp_listener_create(st->worker, &lp, &a->ul->lh);
	if (s != UCS_OK) {
		LC_WARN("ucx: listening: %s", ucs_status_string(s));
		a->rc = s == UCS_ERR_BUSY ? -EADDRINUSE
			: s == UCS_ERR_UNSUPPORTED || s == UCS_ERR_NO_DEVICE ? LC_ERR_NO_TRANSPORT
									     : map_status(s, false);
		return;
	}
	ucp_listener_attr_t at = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
	s = ucp_listener_query(a->ul->lh, &at);
	if (s != UCS_OK) {
		ucp_listener_destroy(a->ul->lh);
		a->rc = LC_ERR_IO;
		return;
	}
	const struct sockaddr *sa = (const struct sockaddr *)&at.sockaddr;
	a->port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
						  : ((const struct sockaddr_in *)sa)->sin_port);
	a->ul->next = st->listeners;
	st->listeners = a->ul;
	a->rc = 0;
}

static int ucx_listen(lc_listener_t *l, const char *url)
{
	char host[LC__URL_MAX];
	int port, rc;
	uint64_t fence_ms = FENCE_MS_DEFAULT;
	rc = lc__url_host_port(url, "ucx", host, sizeof host, &port);
	if (rc)
		return rc;
	if (lc__url_query_u64(url, "fence_ms", &fence_ms) < 0 || fence_ms == 0 ||
	    fence_ms > 3600000)
		return -EINVAL;
	ulistener_t *ul = calloc(1, sizeof *ul);
	if (!ul)
		return -ENOMEM;
	listen_arg_t a = {.ul = ul, .rc = 0};
	rc = resolve(host, port, true, &a.sa, &a.salen);
	if (rc)
		goto fail_free;
	ustate_t *st;
	rc = state_get(l->ctx, true, true, &st);
	if (rc)
		goto fail_free;
	ul->l = l;
	ul->st = st;
	ul->fence_ns = fence_ms * 1000000ull;
	run_sync(st, do_listen, &a);
	if (a.rc) {
		rc = a.rc;
		state_put(st, true);
		goto fail_free;
	}
	bool v6 = strchr(host, ':') != NULL;
	snprintf(l->url, sizeof l->url, "ucx://%s%.*s%s:%d", v6 ? "[" : "",
		 (int)(sizeof l->url - 20), host, v6 ? "]" : "", a.port);
	l->tp = ul;
	return 0;
fail_free:
	free(ul);
	return rc;
}

static void do_listener_close(ustate_t *st, void *arg)
{
	ulistener_t *ul = arg;
	for (ulistener_t **pp = &st->listeners; *pp; pp = &(*pp)->next) {
		if (*pp == ul) {
			*pp = ul->next;
			break;
		}
	}
	/* Requests not yet accepted, then the listener, then what it accepted. */
	for (connreq_t **pp = &st->connreqs; *pp;) {
		connreq_t *cr = *pp;
		if (cr->ul == ul) {
			*pp = cr->next;
			ucp_listener_reject(ul->lh, cr->req);
			free(cr);
		} else {
			pp = &cr->next;
		}
	}
	ucp_listener_destroy(ul->lh);
	for (sconn_t **pp = &st->sconns; *pp;) {
		sconn_t *sc = *pp;
		if (sc->ul == ul) {
			sc_close(st, sc);
			*pp = sc->next;
			sc_bury(st, sc);
		} else {
			pp = &sc->next;
		}
	}
}

static void ucx_listener_close(lc_listener_t *l)
{
	ulistener_t *ul = l->tp;
	ustate_t *st = ul->st;
	run_sync(st, do_listener_close, ul);
	free(ul);
	l->tp = NULL;
	state_put(st, true);
}

/* ---- connections ---- */

static void do_connect(ustate_t *st, void *arg)
{
	uconn_t *uc = arg;
	struct sockaddr_storage sa;
	socklen_t salen;
	uc->next = st->conns;
	st->conns = uc;
	uc->started = true;
	uc->connect_deadline =
		lc__now_ns() + (uint64_t)lc__ctx_cfg(st->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	int rc = resolve(uc->host, uc->port, false, &sa, &salen);
	if (rc) {
		uc_mark_dead(uc, LC_ERR_UNREACHABLE, "cannot resolve %s", uc->host);
		return;
	}
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = salen},
		.err_mode = err_mode(st->ctx),
		.err_handler = {.cb = uc_err, .arg = uc},
	};
	ucs_status_t s = ucp_ep_create(st->worker, &ep, &uc->ep);
	if (s != UCS_OK) {
		uc->ep = NULL;
		uc_mark_dead(uc, LC_ERR_UNREACHABLE, "cannot connect to %s: %s", uc->conn->url,
			ucs_status_string(s));
		return;
	}
	msg_t *m = msg_new(st, HELLO_LEN);
	if (!m) {
		uc_mark_dead(uc, -ENOMEM, "no memory for the handshake");
		return;
	}
	memset(m->data, 0, HELLO_LEN);
	lc__put_u32(m->data, HELLO_MAGIC);
	lc__put_u16(m->data + 4, PROTO_VERSION);
	m->data[6] = uc->conn->has_token;
	memcpy(m->data + 8, uc->conn->token.bytes, LC_TOKEN_LEN);
	s = msg_send(uc->ep, AM_HELLO, m);
	if (s != UCS_OK)
		uc_mark_dead(uc, map_status(s, false), "handshake with %s: %s", uc->conn->url,
			ucs_status_string(s));
}

static int ucx_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	uconn_t *uc = calloc(1, sizeof *uc);
	int rc;
	if (!uc)
		return -ENOMEM;
	rc = lc__url_host_port(url, "ucx", uc->host, sizeof uc->host, &uc->port);
	if (rc || uc->port == 0) {
		free(uc);
		return rc ? rc : -EINVAL;
	}
	ustate_t *st;
	rc = state_get(c->ctx, true, false, &st);
	if (rc) {
		free(uc);
		return rc;
	}
	uc->conn = c;
	uc->st = st;
	uc->ops.next = uc->ops.prev = &uc->ops;
	pthread_mutex_init(&uc->lock, NULL);
	c->tp = uc;
	cmd_t *cmd = calloc(1, sizeof *cmd);
	if (!cmd) {
		pthread_mutex_destroy(&uc->lock);
		free(uc);
		state_put(st, false);
		return -ENOMEM;
	}
	cmd->fn = do_connect;
	cmd->arg = uc;
	pthread_mutex_lock(&st->lock);
	cmd_push(st, cmd);
	pthread_mutex_unlock(&st->lock);
	wake(st);
	return 0;
}

/* Closing an endpoint while UCX is still wiring it up makes UCX 1.13's tcp
 * transport assert (tcp_ep.c: "!(ep->flags & UCT_TCP_EP_FLAG_CTX_TYPE_TX)")
 * when the peer's half of the wireup is then refused. Let a handshake under
 * way finish (or fail) first, for at most this long. */
#define CLOSE_HANDSHAKE_WAIT_NS 2000000000ull

static void do_conn_close(ustate_t *st, void *arg)
{
	uconn_t *uc = arg;
	uint64_t until = lc__now_ns() + CLOSE_HANDSHAKE_WAIT_NS;
	while (uc->started && uc->ep && uc->state == UC_CONNECTING && lc__now_ns() < until)
		ucp_worker_progress(st->worker);
	for (uconn_t **pp = &st->conns; *pp; pp = &(*pp)->next) {
		if (*pp == uc) {
			*pp = uc->next;
			break;
		}
	}
	uc_take_new(uc);
	while (uc->ops.next != &uc->ops)
		op_release(uc->ops.next); /* the generic layer completes them */
	uc_close_ep(uc);
	uc->state = UC_DEAD;
}

static void ucx_conn_close(lc_conn_t *c)
{
	uconn_t *uc = c->tp;
	ustate_t *st = uc->st;
	run_sync(st, do_conn_close, uc);
	for (size_t i = 0; i < uc->nregions; i++) {
		free(uc->regions[i]->rkey_buf);
		free(uc->regions[i]);
	}
	free(uc->regions);
	uc->regions = NULL;
	uc->nregions = 0;
	uc->conn = NULL; /* dead: callbacks that still come return early */
	pthread_mutex_lock(&st->lock);
	uc->next = st->graveyard;
	st->graveyard = uc;
	pthread_mutex_unlock(&st->lock);
	c->tp = NULL;
	state_put(st, false);
}

/* Under uc->lock. */
static rregion_t *region_find(uconn_t *uc, uint32_t id)
{
	size_t lo = 0, hi = uc->nregions;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (uc->regions[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < uc->nregions && uc->regions[lo]->id == id ? uc->regions[lo] : NULL;
}

static int ucx_post(lc_conn_t *c, lc__batch_t *b)
{
	uconn_t *uc = c->tp;
	uop_t *op = calloc(1, sizeof *op);
	if (!op)
		return -ENOMEM;
	op->rr = malloc(b->nwrites * sizeof *op->rr);
	if (!op->rr) {
		free(op);
		return -ENOMEM;
	}
	op->room = b->room;
	op->st = uc->st;
	/* One-sided writes are checked here against the imported descriptor,
	 * and again by D against its regions and grants before any put. */
	pthread_mutex_lock(&uc->lock);
	int code = uc->dead_code;
	for (size_t i = 0; i < b->nwrites && !code; i++) {
		const lc_write_t *w = &b->writes[i];
		rregion_t *r = region_find(uc, w->remote_region);
		if (!r) {
			lc__batch_fail(b, LC_ERR_REGION,
				       "ucx: write %zu names region %u, which was not imported from %s",
				       i, w->remote_region, c->url);
			code = LC_ERR_REGION;
		} else if (w->remote_offset > r->length || w->length > r->length - w->remote_offset) {
			lc__batch_fail(b, LC_ERR_RANGE,
				       "ucx: write %zu [%llu, +%llu) lies outside region %u of %llu bytes",
				       i, (unsigned long long)w->remote_offset,
				       (unsigned long long)w->length, r->id,
				       (unsigned long long)r->length);
			code = LC_ERR_RANGE;
		}
		op->rr[i] = r;
	}
	if (code) {
		if (uc->dead_code)
			lc__batch_fail(b, uc->dead_code, "%s", uc->dead_reason);
		pthread_mutex_unlock(&uc->lock);
		free(op->rr);
		free(op);
		return 0; /* taken and completed with the failure */
	}
	lc__batch_ref(b);
	op->b = b;
	op->next = NULL;
	if (uc->in_tail)
		uc->in_tail->next = op;
	else
		uc->in_head = op;
	uc->in_tail = op;
	pthread_mutex_unlock(&uc->lock);
	if (!b->defer)
		wake(uc->st);
	return 0;
}

static void ucx_flush(lc_conn_t *c)
{
	uconn_t *uc = c->tp;
	wake(uc->st);
}

static void ucx_cancel_room(lc_conn_t *c, uint64_t room)
{
	/* Batches are completed by the generic layer; ops not yet leased are
	 * dropped by the thread when it sees them completed, and leased ones
	 * finish their flush and release the lease at D. */
	(void)c;
	(void)room;
	wake(((uconn_t *)c->tp)->st);
}

static int ucx_import_region(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *blob,
			     size_t blob_len)
{
	uconn_t *uc = c->tp;
	const uint8_t *k = blob + 32; /* the descriptor header (api/region.c) */
	size_t klen = blob_len - 32;
	if (blob_len < 32 || klen < KEY_HDR || lc__get_u32(k) != KEY_MAGIC ||
	    lc__get_u16(k + 4) != KEY_VERSION || KEY_HDR + (size_t)lc__get_u16(k + 6) > klen) {
		LC_WARN("ucx: region %u's descriptor carries no ucx key (pack it after creating "
			"the receiver's ucx listener)",
			desc->region_id);
		return LC_ERR_PROTO;
	}
	if (lc__get_u64(k + 16) < desc->length) {
		LC_WARN("ucx: region %u's key maps less than the region", desc->region_id);
		return LC_ERR_PROTO;
	}
	size_t rlen = lc__get_u16(k + 6);
	uint8_t *buf = malloc(rlen);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, k + KEY_HDR, rlen);
	pthread_mutex_lock(&uc->lock);
	rregion_t *r = region_find(uc, desc->region_id);
	if (!r) {
		if (uc->nregions == uc->rcap) {
			size_t ncap = uc->rcap ? uc->rcap * 2 : 16;
			rregion_t **nr = realloc(uc->regions, ncap * sizeof *nr);
			if (!nr)
				goto nomem;
			uc->regions = nr;
			uc->rcap = ncap;
		}
		r = calloc(1, sizeof *r);
		if (!r)
			goto nomem;
		size_t at = 0;
		while (at < uc->nregions && uc->regions[at]->id < desc->region_id)
			at++;
		memmove(&uc->regions[at + 1], &uc->regions[at],
			(uc->nregions - at) * sizeof *uc->regions);
		uc->regions[at] = r;
		uc->nregions++;
		r->id = desc->region_id;
	} else {
		free(r->rkey_buf);
		r->stale = true;
	}
	r->length = desc->length;
	r->base = lc__get_u64(k + 8);
	r->rkey_buf = buf;
	r->rkey_len = rlen;
	pthread_mutex_unlock(&uc->lock);
	return 0;
nomem:
	pthread_mutex_unlock(&uc->lock);
	free(buf);
	return -ENOMEM;
}

/* ---- packing (D) ---- */

typedef struct pack_arg {
	lc__region_info_t info;
	uint8_t *buf;
	size_t cap;
	int rc;
} pack_arg_t;

static void do_pack(ustate_t *st, void *arg)
{
	pack_arg_t *a = arg;
	prune_maps(st);
	umap_t *m;
	for (m = st->maps; m; m = m->next)
		if (m->id == a->info.id && m->addr == a->info.addr && m->len == a->info.len)
			break;
	if (!m) {
		m = calloc(1, sizeof *m);
		if (!m) {
			a->rc = -ENOMEM;
			return;
		}
		ucp_mem_map_params_t mp = {
			.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
			.address = a->info.addr,
			.length = a->info.len,
		};
		ucs_status_t s = ucp_mem_map(st->uctx, &mp, &m->memh);
		if (s != UCS_OK) {
			LC_WARN("ucx: mapping region %u: %s", a->info.id, ucs_status_string(s));
			free(m);
			a->rc = map_status(s, false);
			return;
		}
		s = ucp_rkey_pack(st->uctx, m->memh, &m->rkey, &m->rkey_len);
		if (s != UCS_OK) {
			LC_WARN("ucx: packing the key of region %u: %s", a->info.id,
				ucs_status_string(s));
			ucp_mem_unmap(st->uctx, m->memh);
			free(m);
			a->rc = map_status(s, false);
			return;
		}
		m->id = a->info.id;
		m->addr = a->info.addr;
		m->len = a->info.len;
		m->next = st->maps;
		st->maps = m;
	}
	size_t need = KEY_HDR + m->rkey_len;
	if (m->rkey_len > 0xffff || need > a->cap) {
		a->rc = -ENOSPC;
		return;
	}
	lc__put_u32(a->buf, KEY_MAGIC);
	lc__put_u16(a->buf + 4, KEY_VERSION);
	lc__put_u16(a->buf + 6, (uint16_t)m->rkey_len);
	lc__put_u64(a->buf + 8, (uint64_t)(uintptr_t)m->addr);
	lc__put_u64(a->buf + 16, m->len);
	memcpy(a->buf + KEY_HDR, m->rkey, m->rkey_len);
	a->rc = (int)need;
}

static int ucx_pack_region(lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap)
{
	ustate_t *st;
	/* Only a context that receives over ucx maps its memory: packing for
	 * tcp or shm must not start UCX. */
	if (state_get(ctx, false, false, &st))
		return 0;
	pthread_mutex_lock(&st->life_lock);
	bool listening = st->nlisteners > 0;
	pthread_mutex_unlock(&st->life_lock);
	pack_arg_t a = {.buf = buf, .cap = cap};
	if (listening && !lc__regions_get(&ctx->regions, r->id, &a.info))
		run_sync(st, do_pack, &a);
	state_put(st, false);
	return a.rc;
}

const lc__transport_ops_t lc__ucx_ops = {
	.scheme = "ucx",
	.init = ucx_init,
	.fini = ucx_fini,
	.listen = ucx_listen,
	.listener_close = ucx_listener_close,
	.conn_open = ucx_conn_open,
	.conn_close = ucx_conn_close,
	.post = ucx_post,
	.flush = ucx_flush,
	.cancel_room = ucx_cancel_room,
	.import_region = ucx_import_region,
	.pack_region = ucx_pack_region,
};
