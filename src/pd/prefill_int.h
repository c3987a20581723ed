/*
 * The prefill side inside (docs/control-plane.md): one lc_prefill_t per P
 * rank glues the engine to the control plane, one lc_sender_t per room.
 * Four files share these structures:
 *   prefill.c           the public calls (create, senders) and the
 *                       bootstrap registration,
 *   prefill_control.c   the control thread: D's messages in (transfer
 *                       infos, cancels go to the engine),
 *   prefill_register.c  whether a D's registration is taken (policy),
 *   prefill_outbox.c    statuses and layer updates out: queued by the
 *                       engine's callbacks, sent by the control thread
 *                       (a final status with nothing queued before it
 *                       goes at once, from the callback's thread).
 * What a P rank sends each D rank under heterogeneous TP is decided in
 * core/topology.c.
 *
 * Threading: the control thread owns the inbox (PULL) and sends every
 * outbound message but one kind: a final status the engine's callback
 * sends itself, without waiting, when it gets `send_lock` by trylock and
 * nothing is queued before it (otherwise it queues it, as the layer
 * updates always are). `send_lock` guards the session sockets and the
 * sessions' lives; the control thread holds it while it handles a message
 * and while it flushes. `lock` protects the session table, the outbound
 * queue and the sender list; it is never held while calling into the
 * engine or sending, and engine calls never run with it held. Lock order:
 * send_lock, then lock (the callback tries send_lock with lock held, which
 * never waits).
 * Teardown: lc_prefill_destroy joins the control thread before it
 * destroys the engine (no D message reaches a dying engine), then sends
 * the engine's final statuses itself.
 */
#ifndef LC_PD_PREFILL_INT_H
#define LC_PD_PREFILL_INT_H

#include <pthread.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "core/layout.h"

/* The session table's size: the p_sessions_max knob's ceiling. */
#define LC__P_MAX_SESSIONS 4096

/* An engine session name: a session id and "#N". */
#define LC__P_ENAME_MAX (LC__MSG_STR_MAX + 24)

/* One registered D session as the control plane knows it: one incarnation
 * of a session id, owned by whoever knows its secret (and, with CURVE, holds
 * the key that registered it). A D that registers again with the same
 * secret refreshes its incarnation; another secret makes another
 * incarnation beside it, with its own engine session (ename), so that what
 * was bound to one (its rooms, its statuses) never reaches the other. */
typedef struct lc__dsess {
	char name[LC__MSG_STR_MAX];           /* the session id D chose */
	char ename[LC__P_ENAME_MAX];          /* the engine's name: name, or name#N */
	uint8_t secret[LC__MSG_SECRET_LEN];   /* from D's REGISTER; never all zero */
	char peer[LC__MSG_CURVE_KEY_LEN + 1]; /* CURVE key that registered it; "": none */
	char status_ep[LC__MSG_STR_MAX];
	char key[LC__MSG_CURVE_KEY_LEN + 1]; /* D's CURVE key; "": this P's own */
	lc__push_t *push;                    /* with send_lock held */
	uint64_t active_ns;                  /* last REGISTER or TRANSFER_INFO (control thread) */
	bool proven; /* a room of it succeeded (lock held): evicted last (prefill_register.c) */
} lc__dsess_t;

/* Answers to an endpoint without a session (a refused REGISTER, an evicted
 * session's transfer info): one socket per endpoint, reused, kept
 * p_reply_ms from its opening for its answers to go out, with at most
 * LC__P_REPLY_MSGS of them (a D has one REGISTER unanswered at a time; the
 * rest are dropped), at most p_replies_max sockets (the oldest goes first,
 * with whatever it still holds). What P holds for endpoints that never
 * answer is thus bounded. Control thread. */
#define LC__P_REPLIES_CAP 512
#define LC__P_REPLY_MSGS 16
typedef struct lc__preply {
	char ep[LC__MSG_STR_MAX];
	char key[LC__MSG_CURVE_KEY_LEN + 1];
	lc__push_t *push;
	uint64_t until_ns;
	uint32_t sent;
} lc__preply_t;

/* An evicted session, remembered so that its next transfer info is told
 * "register again" at the endpoint it registered (never at one the message
 * names). A ring: the oldest is forgotten. Control thread. */
#define LC__P_TOMBS 256
typedef struct lc__ptomb {
	char name[LC__MSG_STR_MAX];
	uint8_t secret[LC__MSG_SECRET_LEN];
	char status_ep[LC__MSG_STR_MAX];
	char key[LC__MSG_CURVE_KEY_LEN + 1];
} lc__ptomb_t;

/* A message the engine asked for, queued for the control thread. */
typedef struct lc__outmsg {
	int type; /* LC__MSG_STATUS or LC__MSG_LAYERS */
	uint64_t room;
	char session[LC__P_ENAME_MAX]; /* the engine's name of the session */
	int status, fail_reason;
	char reason[LC_REASON_MAX];
	uint8_t *metadata;
	size_t metadata_len;
	uint32_t layers;
	uint32_t status_flags; /* LC__STATUS_* */
	uint64_t checksum;
} lc__outmsg_t;

struct lc_sender {
	lc_prefill_t *p;
	uint64_t room;
	bool final;
	bool has_prefix;
	uint64_t prefix_len;
	lc_room_info_t last;
	struct lc_sender *next;
};

struct lc_prefill {
	lc_ctx_t *ctx;
	lc_engine_t *engine;
	lc_layout_t *layout;
	uint64_t *item_lens; /* per buffer, for core/topology.h */
	char name[64];
	int rank, world, dp;
	char bind[LC__BS_HOST_MAX]; /* "" : the wildcard (control/addr.h) */
	char host[LC__BS_HOST_MAX]; /* advertised to the bootstrap server */
	char endpoint[300];         /* tcp://host:port, as advertised */
	char bootstrap[LC__BS_HOST_MAX];
	lc__zctx_t *z;
	lc__pull_t *pull;
	int evfd;
	pthread_t thread;
	bool started;
	_Atomic bool stop;
	_Atomic uint64_t ctl[LC__CTL_COUNT];
	_Atomic uint64_t cancels_refused; /* lc_prefill_counter "cancels_refused" */
	lc_bootstrap_t *metrics_server;
	int source_id;
	struct lc__route_keeper *route; /* prefill.c: the owned route's refresh */

	pthread_mutex_t lock;
	/* The session sockets (lc__dsess_t.push) and the sessions' lives: the
	 * control thread holds it while it handles a message and while it
	 * flushes the outbox, so that nothing else sends on a socket or frees
	 * a session meanwhile; the engine's final callback only trylocks it,
	 * to send a status at once (prefill_outbox.c). Taken before `lock`. */
	pthread_mutex_t send_lock;
	lc__dsess_t *sessions[LC__P_MAX_SESSIONS];
	size_t nsessions;
	lc__outmsg_t *outq;
	size_t nout, outcap;
	/* A "layers landed" update was queued in the engine's current run of
	 * callbacks: the control thread is woken once at its end
	 * (lc__prefill_on_notes), unless the room's final status, sent at
	 * once, dropped every such update meanwhile. Under `lock`. */
	bool wake_owed;
	lc_sender_t *senders;
	/* Prefix lengths of transfer infos that arrived before their sender
	 * (a bounded ring: the oldest is forgotten). */
	struct early {
		uint64_t room, prefix_len;
		bool used;
	} early[1024];
	size_t early_next;
	lc__preply_t replies[LC__P_REPLIES_CAP]; /* control thread */
	size_t nreplies;
	lc__ptomb_t tombs[LC__P_TOMBS]; /* control thread */
	size_t tomb_next;
};

#define LC__P_CTL_ADD(p, name) atomic_fetch_add(&(p)->ctl[LC__CTL_##name], 1)

/* ---- prefill_outbox.c ---- */

/* Wake the control thread. */
void lc__prefill_wake(lc_prefill_t *p);
/* Engine callbacks (lc_engine_params_t.final_cb / landed_cb): queue; a
 * final status is sent at once when nothing is queued before it and the
 * session sockets are free. */
void lc__prefill_on_final(void *arg, const lc_room_final_t *f);
void lc__prefill_on_landed(void *arg, uint64_t room, const char *session, uint32_t layers);
/* The engine's notes hook: after a run of the callbacks above. */
void lc__prefill_on_notes(void *arg);
/* Send what the engine queued (control thread; takes send_lock). */
void lc__prefill_flush(lc_prefill_t *p);
/* Session lookups (lock held, or on the control thread, which alone adds
 * and removes sessions), NULL when none: the incarnation of session id
 * `name` whose secret is `secret` (constant-time compare); the one the
 * engine knows as `ename`; any incarnation of `name`. */
lc__dsess_t *lc__prefill_session_find(lc_prefill_t *p, const char *name, const uint8_t *secret);
lc__dsess_t *lc__prefill_session_by_ename(lc_prefill_t *p, const char *ename);
lc__dsess_t *lc__prefill_session_any(lc_prefill_t *p, const char *name);
/* The incarnation a D message about session `name` proves (its secret and,
 * when the incarnation was registered over CURVE, the sender's key `peer`),
 * or NULL. A known id that nothing matches is counted (session_mismatches)
 * and logged (rate-limited, LC__LOG_PEER). A match vouches for the
 * connection that brought the message being handled (lc__pull_vouch).
 * Control thread. */
lc__dsess_t *lc__prefill_session_owned(lc_prefill_t *p, const char *name, const uint8_t *secret,
				       const char *peer, const char *what);
/* Encode and send (bounded wait); counts and logs a failure. */
int lc__prefill_send(lc_prefill_t *p, lc__push_t *push, const lc__msg_t *m);
/* Whether P may connect to endpoint ep (status_schemes: tcp:// unless the
 * knob allows more). */
bool lc__prefill_scheme_ok(const char *ep);
/* To an endpoint without a session (a refused D): through the reply
 * sockets (lc__preply_t), never blocking; key: D's CURVE key, or NULL for
 * this P's own. An endpoint status_schemes refuses gets nothing (counted:
 * replies_refused_scheme). The raw form sends encoded bytes. */
void lc__prefill_reply(lc_prefill_t *p, const char *ep, const char *key, const lc__msg_t *m);
void lc__prefill_reply_raw(lc_prefill_t *p, const char *ep, const char *key, const void *buf,
			   size_t len);
/* Close the reply sockets whose time is up (all: every one). Returns the
 * earliest expiry of those left, UINT64_MAX when none is. */
uint64_t lc__prefill_replies_expire(lc_prefill_t *p, bool all);

/* ---- prefill_control.c ---- */

/* The control thread. */
void *lc__prefill_control_main(void *arg);

/* ---- prefill_register.c ---- */

/* A D's REGISTER (m->reg, with its secret); peer: the CURVE key it
 * authenticated with ("" without CURVE). Always answers (REGISTER_REPLY,
 * with the registrant's secret), never fails the thread. */
void lc__prefill_handle_register(lc_prefill_t *p, const lc__msg_t *m, const char *peer);

#endif
