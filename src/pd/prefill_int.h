/*
 * The prefill side inside (docs/control-plane.md): one lc_prefill_t per P
 * rank glues the engine to the control plane, one lc_sender_t per room.
 * Four files share these structures:
 *   prefill.c           the public calls (create, senders) and the
 *                       bootstrap registration,
 *   prefill_control.c   the control thread: D's messages in (transfer
 *                       infos, cancels go to the engine),
 *   prefill_register.c  whether a D's registration is taken (policy),
 *   prefill_admit.c     whether a D's transfer info is taken (the
 *                       sender's pairing value, whether it ended), infos
 *                       for rooms without a sender yet (parked until one
 *                       comes, or refused) and what is remembered of
 *                       destroyed senders,
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
	/* Its transfer infos parked (prefill_admit.c), and their page and slot
	 * ids: control thread. A session with any is not evicted. */
	uint32_t parked;
	uint64_t parked_descs;
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

/* A transfer info for a room this rank had no sender for when it came,
 * held until one comes (lc_sender_create_ex), p_park_ms at most. The
 * session is kept by name and secret, looked up again when the info is
 * taken (it may have gone meanwhile). Control thread. */
typedef struct lc__parked {
	uint64_t at_ns;
	uint64_t descs;                       /* page and slot ids it holds */
	char ename[LC__P_ENAME_MAX];          /* the session's engine name */
	uint8_t secret[LC__MSG_SECRET_LEN];   /* the incarnation it proved */
	char peer[LC__MSG_CURVE_KEY_LEN + 1]; /* the CURVE key it came with ("": none) */
	lc__msg_transfer_info_t info;         /* owns its pages and slots */
	/* D cancelled the room while the info waited (its request aborted): a
	 * sender that comes within p_park_ms with the info's pairing value
	 * fails at once with this reason, instead of holding its KV for a D
	 * that is gone until bootstrap_timeout. */
	bool cancelled;
	char reason[LC_REASON_MAX];
} lc__parked_t;

/* A destroyed sender, remembered so that a transfer info for its room is
 * refused at once with the reason (one parked before the destroy, one with
 * its pairing value, or for an unpaired sender one shortly after) instead
 * of waiting p_park_ms. A ring of the last
 * LC__P_STOMBS; under `lock`. */
#define LC__P_STOMBS 1024
/* How long after its destroy an unpaired sender refuses a new transfer
 * info for its room (a paired one: while remembered). */
#define LC__P_STOMB_UNPAIRED_NS (10000ull * 1000000)
typedef struct lc__stomb {
	uint64_t room;
	uint64_t at_ns; /* 0: an empty slot */
	uint8_t pair_len;
	uint8_t pair[LC_PAIR_MAX];
	int fail_reason;
	char reason[LC_REASON_MAX];
} lc__stomb_t;

/* Rooms whose sender was created, cancelled or destroyed since the control
 * thread last looked at the parked infos (under `lock`); past the ring's
 * size every parked info is looked at. */
#define LC__P_TOUCHED 256

struct lc_sender {
	lc_prefill_t *p;
	uint64_t room;
	bool final;
	bool has_prefix; /* prefix_len read from the room's first real destination */
	uint64_t prefix_len;
	lc_room_info_t last;
	/* The pairing value (0 bytes: unpaired). Set at create. */
	uint8_t pair_len;
	uint8_t pair[LC_PAIR_MAX];
	/* Cancelled, or its final status read: a transfer info for the room
	 * is refused at once with the reason. Under `lock`. */
	bool ended;
	int end_fail;
	char end_reason[LC_REASON_MAX];
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
	char engine_id[LC__BS_ENGINE_ID_MAX]; /* "" : none (GET /query) */
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
	lc__stomb_t stombs[LC__P_STOMBS];
	size_t stomb_next;
	uint64_t touched[LC__P_TOUCHED];
	size_t ntouched;
	bool touched_all;
	/* Parked transfer infos (prefill_admit.c): control thread. */
	lc__parked_t **parked;
	size_t nparked, parked_cap;
	uint64_t parked_descs;
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

/* ---- prefill_admit.c ---- */

/* A transfer info of session s (NULL: a dummy of no registered session)
 * that proved it (secret; peer its CURVE key), for a room that may have a
 * sender: checked against the sender (its pairing value, whether it ended)
 * before anything changes, then handed to the engine, and D answered (its
 * refusal, or with LC__INFO_WANTS_ACK the confirmation); for a room without
 * a sender, parked. May take the info's arrays (t->pages, t->slots left
 * NULL). Control thread, send_lock held. */
void lc__prefill_take_info(lc_prefill_t *p, lc__dsess_t *s, lc__msg_transfer_info_t *t,
			   const uint8_t *secret, const char *peer);
/* Refuse a (non-dummy) transfer info: counted by the caller, logged
 * rate-limited, and D's room failed with the reason, on session s's
 * channel. Control thread, send_lock held. */
void lc__prefill_refuse_info(lc_prefill_t *p, lc__dsess_t *s, const lc__msg_transfer_info_t *t,
			     int fail_reason, const char *why);

/* Whether a and b (lengths la, lb, each zero-padded to LC_PAIR_MAX) are
 * the same pairing value, in constant time. */
bool lc__pair_equal(const uint8_t *a, size_t la, const uint8_t *b, size_t lb);
/* Hold t (taking its arrays) for room t->room until a sender comes, or
 * refuse it when the park is full (p_parked_max, p_session_parked_max, the
 * descriptor caps) or parking is off (p_park_ms 0). s: its session, never
 * NULL. Control thread. */
void lc__prefill_park(lc_prefill_t *p, lc__dsess_t *s, lc__msg_transfer_info_t *t,
		      const uint8_t *secret, const char *peer);
/* Whether a destroyed sender of the room refuses t at once: its reason to
 * why[cap] and the fail reason to *fail. at_ns: when t arrived (a parked
 * info that came before the destroy is refused unless the sender had
 * another pairing value; a later one with the sender's pairing value, or
 * within LC__P_STOMB_UNPAIRED_NS of an unpaired sender's destroy). Takes
 * `lock`. */
bool lc__prefill_stomb_refuses(lc_prefill_t *p, const lc__msg_transfer_info_t *t, uint64_t at_ns,
			       int *fail, char *why, size_t cap);
/* Remember a destroyed sender (lock held). */
void lc__prefill_stomb_add(lc_prefill_t *p, const lc_sender_t *s, int fail, const char *reason);
/* Note that room's sender changed (lock held); the caller wakes the
 * control thread. */
void lc__prefill_touch(lc_prefill_t *p, uint64_t room);
/* Control thread, each round (send_lock held): parked infos of rooms whose
 * sender changed are taken or refused; those held p_park_ms are refused
 * ("P has no such room"). Returns the next expiry (UINT64_MAX: none). */
uint64_t lc__prefill_park_run(lc_prefill_t *p);
/* D's CANCEL of a room it parked an info for: the info stays, marked
 * cancelled (its sender, if one comes in time, fails at once). True when
 * one did. Control thread. */
bool lc__prefill_park_cancel(lc_prefill_t *p, const lc__dsess_t *s, uint64_t room,
			    const char *reason);
/* Refuse and free every parked info (teardown: the control thread is
 * gone; send_lock held). */
void lc__prefill_park_clear(lc_prefill_t *p);

/* ---- prefill_register.c ---- */

/* A D's REGISTER (m->reg, with its secret); peer: the CURVE key it
 * authenticated with ("" without CURVE). Always answers (REGISTER_REPLY,
 * with the registrant's secret), never fails the thread. */
void lc__prefill_handle_register(lc_prefill_t *p, const lc__msg_t *m, const char *peer);

#endif
