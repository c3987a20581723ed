/*
 * The ucx transport's internals, shared by the files of src/transport/ucx/:
 *
 *   ucx.c     the ops table (lc__ucx_ops)
 *   engine.c  the per-context state (ops init/fini) and its engine: UCP
 *             context and worker, their task on the I/O core, start/stop
 *   am.c      the active-message dispatch to send.c's and recv.c's handlers
 *   wire.h    the messages and the descriptor keys, encoded and decoded
 *   base.c    what all build on: status mapping, knobs, sending messages,
 *             the engine's command queue
 * Calls point down that list's order: ucx.c -> engine.c -> am.c -> send.c,
 * recv.c -> region.c -> base.c.
 *   send.c    P: connections, batches as leased operations, puts / writes
 *   recv.c    D: listeners, accepted connections, leases, landing writes
 *   region.c  region maps and keys (D), imported regions (P)
 *
 * ucx://HOST:PORT: writes as UCP active messages (data mode "am", the
 * default) or, with LAYERCAKE_UCX_DATA=put, one-sided puts over hardware
 * RMA only (RC/DC; software-emulated RMA is refused unless
 * ucx_allow_sw_rma), with the receiver still in charge of what may land.
 * See docs/transport-ucx.md for the design; in short:
 *
 * - One UCP context and worker per layercake context, progressed by one
 *   task on the context's I/O core (transport/io/io.h). The state
 *   (`ustate_t`) is the context's ucx slot (ops init/fini; the generic
 *   layer hands it over in l->ctx_state / c->ctx_state) and lives as long as the context; its engine (UCP
 *   context, worker, task) is started when the context first listens or
 *   connects over ucx and stopped when its last ucx listener or connection
 *   closes (refs, under st->life_lock).
 * - The data mode is the context's, fixed at engine start. In am mode the
 *   context has no UCP_FEATURE_RMA (whose software put/get handlers copy
 *   to and from any address a connected peer names) and D publishes no
 *   key. In put mode D maps a region (ucp_mem_map) the first time
 *   lc_region_pack packs it while a ucx listener exists, and appends the
 *   rkey to the descriptor; P keeps the blob per connection and unpacks it
 *   on its endpoint; both refuse a connection whose puts UCX would emulate
 *   in software (lc__ucx_ep_hw_rma).
 * - Token first: D refuses every message but HELLO from an endpoint that
 *   has not presented an accepted token.
 * - Leases make one-sided writes receiver-enforced: before the puts of a
 *   batch, P sends the batch's write list (LEASE); D checks every write
 *   against its regions and the room's grant exactly as the copying
 *   transports do, and holds the room's grant bracket (lc__land_enter)
 *   until P reports that the puts are flushed (DONE). So lc_grant_revoke
 *   on D waits for leased batches; D's thread sees the revoke pending,
 *   asks P to stop (REVOKE), and fences P's endpoint (closes it) if P has
 *   not released the lease within fence_ms.
 * - Landing: each leased write keeps its landing of the memory seam
 *   (lc__land_t, opened at LEASE) until D finishes it with lc__land_done,
 *   which counts it: in am mode when D's own receive of it completes, in
 *   put mode at DONE on P's word that it was put and flushed (the one trust
 *   point left). ACK tells P how many D counted; the batch completes at ACK
 *   if that is all of them.
 * - Data mode "am" (the default; LAYERCAKE_UCX_DATA=put selects puts):
 *   writes travel as active messages that D receives into the destinations
 *   it checked (rendezvous: D pulls). It keeps revoke a hard stop on every
 *   UCX transport: a lease holds the room's bracket until its last
 *   rendezvous receive has landed, past DONE or its release.
 *
 * Threading: every UCX call runs on the loop thread of the state's task
 * (the worker is UCS_THREAD_MODE_SINGLE; a task stays on one loop), called
 * "the thread" below. Callers hand it asynchronous work through `cmds`
 * (st->lock) and lc__io_kick, and run synchronous commands with
 * lc__io_call (lc__ucx_run_sync). A connection's `lock` protects what
 * post() and import_region() share with the thread (new ops, remote
 * regions, the dead status); everything else of a connection, and every
 * D-side structure, belongs to the thread. Lock order: st->life_lock ->
 * st->lock (a loop's own lock, taken by attach/detach/kick, is a leaf);
 * uc->lock is a leaf except that the generic lc__batch_* functions
 * (conn->lock, cq->lock) may be called under it.
 */
#ifndef LC_TRANSPORT_UCX_UCX_INT_H
#define LC_TRANSPORT_UCX_UCX_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include "transport/io/io.h"
#include "transport/transport.h"
#include "transport/ucx/wire.h"

#define ROUND_BYTES (64ull << 20)        /* puts per flush: bounds what a revoke waits for */
#define SPIN_NS 200000ull                /* keep polling this long after activity */
#define FENCE_MS_DEFAULT 2000            /* revoke waits this long for P's release */
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
	bool stale;      /* rkey_buf replaced since rkey was unpacked */
	ucp_rkey_h rkey; /* thread only; unpacked on first use */
} rregion_t;

/* NEW -> LEASING -> LEASED -> PUTTING -> FLUSHED -> DONE_SENT -> (ACK) freed.
 * Callbacks only move states; the loop (lc__ucx_uc_pump) issues the UCX calls. */
enum op_state { OP_NEW, OP_LEASING, OP_LEASED, OP_PUTTING, OP_FLUSHED, OP_DONE_SENT };

typedef struct uop {
	lc__batch_t *b; /* referenced; NULL once orphaned */
	uint64_t seq;
	uint64_t room;
	enum op_state state;
	int pending; /* UCX requests (flush, am writes) pointing at this op */
	ustate_t *st;
	bool orphan;  /* detached: the flush callback frees it */
	bool revoked; /* D revoked the room: no puts, release the lease */
	bool am;      /* data mode "am" (fixed when the lease is sent) */
	ucs_status_t flush_status;
	uint8_t *hdrs;  /* data mode "am": per-write headers, valid until sent */
	rregion_t **rr; /* per write */
	size_t nput;    /* writes actually put */
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

	/* the thread only */
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
	bool busy;      /* a rendezvous receive, or its device copies, under way */
	bool done;      /* lc__land_done was called */
	/* Device copies of `stage` in flight (recv.c, copy_start, through
	 * the seam's lc__land_copy_async): their completion sets copy_status
	 * and hands `fin` to the thread, which finishes the write; the
	 * lease's `recvs` counts the write until then. */
	_Atomic int copy_status;
	struct cmd *fin;
} lwrite_t;

typedef struct lease {
	ustate_t *st;
	struct sconn *sc; /* its connection (while not released) */
	uint64_t seq, room;
	/* The bracket (entered while `entered`): a copy of the first write's
	 * landing, whose grant entry every write of the lease shares; it
	 * outlives the writes' own lc__land_done. */
	lc__land_t bracket;
	/* The bracket is held until every rendezvous receive of the lease has
	 * completed, even past DONE or the release: a receive in flight lands
	 * bytes, and lc_grant_revoke must not return before it has. */
	bool entered;
	bool am;           /* writes arrive as UW_WRITE: D counts each receive */
	bool released;     /* off its connection; freed when recvs reaches 0 */
	bool done_pending; /* DONE arrived with receives in flight: ACK after */
	int recvs;         /* rendezvous receives outstanding */
	uint32_t n, nopen; /* writes; landings opened */
	uint64_t landed;   /* writes counted by lc__land_done(, true) */
	lwrite_t *w;
	uint64_t revoke_seen_ns; /* 0 until the room's revoke was noticed */
	uint64_t released_ns;    /* when it was released with receives in flight */
	struct lease *next;
} lease_t;

typedef struct sconn {
	ulistener_t *ul;
	ucp_ep_h ep;
	bool authed, rejected, failed, closed;
	uint64_t who; /* the id of the token its HELLO presented (seam.h) */
	uint64_t close_at;
	uint64_t hello_deadline; /* closed unless authed by then (connect_timeout_ms) */
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
	struct cmd *next;
} cmd_t;

struct ustate {
	lc_ctx_t *ctx;
	pthread_mutex_t life_lock; /* refs, nlisteners, running: engine start/stop */
	int refs;                  /* listeners + connections + packers */
	int nlisteners;            /* pack checks it */
	bool running;              /* the engine below exists */
	/* Fixed at engine start (config ucx_data, ucx_allow_sw_rma): put mode
	 * enables UCP_FEATURE_RMA and packs keys; am mode does neither. */
	bool put_mode, allow_sw_rma;
	/* Fixed at engine start (ucp_context_query, UCP_ATTR_FIELD_MEMORY_TYPES):
	 * the memory types this UCX moves, and whether that includes CUDA
	 * device memory (docs/gpu.md "UCX with CUDA"); read by any thread once
	 * `running` (set after them under life_lock). */
	uint64_t memory_types;
	bool cuda_direct;

	ucp_context_h uctx;
	ucp_worker_h worker;
	int worker_fd;
	lc__io_task_t task; /* on a loop of the context's I/O core */

	pthread_mutex_t lock;
	cmd_t *cmd_head, *cmd_tail; /* asynchronous commands, under `lock` */

	/* the loop thread only */
	lc__io_fd_t wfd; /* worker_fd in the loop's epoll set */
	bool fd_added;
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

typedef struct msg {
	ustate_t *st;
	size_t len;
	uint8_t data[];
} msg_t;

/* ---- am.c ---- */

/* Install the active-message handlers on st's new worker. */
int lc__ucx_register_handlers(ustate_t *st, ucs_status_t *sp);

/* ---- base.c ---- */

/* A UCX status as a layercake code; `connected` tells a refused connection
 * (unreachable) from one that broke (peer closed). */
int lc__ucx_map_status(ucs_status_t s, bool connected);
/* UCX itself: loaded at the first call when the library links none
 * (LC_UCX_DLOPEN, dl.c), once per process; 0, or LC_ERR_NO_TRANSPORT with a
 * warning naming what to install. Called before any other UCX call. */
#ifdef LC_UCX_DLOPEN
int lc__ucx_dl_load(void);
#else
static inline int lc__ucx_dl_load(void)
{
	return 0;
}
#endif
int lc__ucx_resolve(const char *host, int port, bool passive, struct sockaddr_storage *out,
		    socklen_t *len);
/* Config knobs ucx_err_mode and ucx_data of ctx. */
ucp_err_handling_mode_t lc__ucx_err_mode(lc_ctx_t *ctx);
bool lc__ucx_data_mode_am(lc_ctx_t *ctx);
bool lc__ucx_allow_sw_rma(lc_ctx_t *ctx);
/* UCX with CUDA (docs/gpu.md): whether a UCX whose context reports
 * `memory_types` (a mask of UCS_BIT(ucs_memory_type_t)) moves memory of
 * layercake kind `kind` itself. Only LC_MEM_KIND_CUDA with the
 * UCS_MEMORY_TYPE_CUDA bit: host kinds need no decision (UCX reads them in
 * place), the sim is ours, and a CUDA region under a UCX without CUDA is
 * staged through the host ring like tcp's. Pure, for tests. */
bool lc__ucx_moves_kind(uint64_t memory_types, int kind);
/* The UCS memory type of a kind UCX moves (lc__ucx_moves_kind). */
ucs_memory_type_t lc__ucx_mem_type(int kind);
/* "host,cuda,..." for a mask of memory types, for logs. */
void lc__ucx_mem_types_str(uint64_t memory_types, char *buf, size_t cap);
/* Whether UCX carries ep's puts on a transport whose RMA a NIC checks
 * against a memory key (RC/DC); desc gets the put lanes' transports. */
bool lc__ucx_ep_hw_rma(ucp_ep_h ep, char *desc, size_t cap);
/* Messages: new (NULL without memory), send and forget (freed when sent;
 * thread only), post (send, log a failure; ignores a NULL message). */
msg_t *lc__ucx_msg_new(ustate_t *st, size_t len);
ucs_status_t lc__ucx_msg_send(ucp_ep_h ep, unsigned id, msg_t *m);
void lc__ucx_msg_post(ucp_ep_h ep, unsigned id, msg_t *m);
void lc__ucx_ep_close_force(ustate_t *st, ucp_ep_h ep);
/* Commands to the thread: wake it (any thread), queue an asynchronous
 * command (under st->lock), run one and wait for it. */
void lc__ucx_wake(ustate_t *st);
void lc__ucx_cmd_push(ustate_t *st, cmd_t *c);
void lc__ucx_run_sync(ustate_t *st, void (*fn)(ustate_t *, void *), void *arg);
/* Run the queued commands (loop thread); whether there were any. */
bool lc__ucx_run_cmds(ustate_t *st);
static inline ustate_t *lc__ucx_task_state(lc__io_task_t *t)
{
	return LC__CONTAINER_OF(t, ustate_t, task);
}

/* ---- engine.c ---- */

/* ops->init / ops->fini: the context's state (no UCX until first use). */
int lc__ucx_init(lc_ctx_t *ctx, void **state);
void lc__ucx_fini(lc_ctx_t *ctx, void *state);
/* The state of ctx with a reference on its engine, started if `start`
 * (else -ENOENT when it is not running); put drops it, and the last put
 * stops the engine. */
int lc__ucx_state_get(void *state, bool start, bool listener, ustate_t **out);
void lc__ucx_state_put(ustate_t *st, bool listener);
/* What the running engine of a state detected (tests, ops): its memory
 * types mask and whether it moves CUDA memory; -ENOENT if not running. */
int lc__ucx_detected(void *state, uint64_t *memory_types, bool *cuda_direct);

/* ---- send.c (P) ---- */

/* Handlers of D's messages, for the connection of endpoint ep. */
uconn_t *lc__ucx_uc_by_ep(ustate_t *st, ucp_ep_h ep);
void lc__ucx_on_hello_reply(uconn_t *uc, const uint8_t *d, size_t len);
void lc__ucx_on_lease_reply(uconn_t *uc, const uint8_t *d, size_t len);
void lc__ucx_on_ack(uconn_t *uc, const uint8_t *d, size_t len);
void lc__ucx_on_revoke(uconn_t *uc, const uint8_t *d, size_t len);
/* ops */
/* ops entry points, called by ucx.c with a reference on the engine (st). */
int lc__ucx_conn_open(ustate_t *st, lc_conn_t *c, const char *url);
void lc__ucx_conn_close(lc_conn_t *c);
int lc__ucx_post(lc_conn_t *c, lc__batch_t *b);
void lc__ucx_flush(lc_conn_t *c);
void lc__ucx_room_cancel(lc_conn_t *c, uint64_t room);
/* The thread's periodic work for P: handshake deadlines, queued ops, closes,
 * and failing the ops of dead connections. */
void lc__ucx_send_service(ustate_t *st, uint64_t now);
/* With the worker destroyed: free closed connections and orphaned ops. */
void lc__ucx_send_free(ustate_t *st);

/* ---- recv.c (D) ---- */

/* Handlers of P's messages, for the accepted connection of endpoint ep. */
sconn_t *lc__ucx_sc_by_ep(ustate_t *st, ucp_ep_h ep);
void lc__ucx_on_hello(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len);
void lc__ucx_on_lease(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len);
void lc__ucx_on_done(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len);
void lc__ucx_on_write(ustate_t *st, sconn_t *sc, const uint8_t *h, size_t hlen, void *data,
		      size_t length, bool rndv);
/* A message other than HELLO from an endpoint that has not passed the
 * token check: refused, counted, and the endpoint closed. */
void lc__ucx_on_unauthed(ustate_t *st, sconn_t *sc, unsigned id);
/* ops */
int lc__ucx_listen(ustate_t *st, lc_listener_t *l, const char *url);
void lc__ucx_listener_close(lc_listener_t *l);
/* The thread's periodic work for D: accept, fence, close. */
void lc__ucx_recv_service(ustate_t *st, uint64_t now);
/* The thread stopped: destroy listeners, close accepted connections. */
void lc__ucx_recv_teardown(ustate_t *st);
/* With the worker destroyed: free closed connections and released leases. */
void lc__ucx_recv_free(ustate_t *st);

/* ---- region.c ---- */

/* P, thread: the region's rkey unpacked on uc's endpoint. */
bool lc__ucx_ensure_rkey(uconn_t *uc, rregion_t *r, ucs_status_t *err);
/* P, under uc->lock: an imported region by id. */
rregion_t *lc__ucx_region_find(uconn_t *uc, uint32_t id);
/* D, thread: unmap regions that were deregistered. */
void lc__ucx_prune_maps(ustate_t *st);
/* ops */
int lc__ucx_import_region(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *key,
			  size_t key_len);
int lc__ucx_pack_region(ustate_t *st, lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf,
			size_t cap);
/* Unmap every region (engine stop). */
void lc__ucx_maps_free(ustate_t *st);

#endif
