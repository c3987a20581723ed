/*
 * The decode side inside (docs/control-plane.md): one lc_decode_t per D
 * rank, one lc_receiver_t per room. Four files share these structures:
 *   decode.c           the public calls (create, receivers, poll, cancel),
 *   decode_discover.c  the discovery workers: bootstrap lookups, session
 *                      registration, the heartbeat (blocking HTTP),
 *   decode_peers.c     the table of P peers (two halves, pins outliving
 *                      their peer) and the channels to P ranks (capped,
 *                      idle ones closed),
 *   decode_control.c   the control thread: P's messages, deadlines, and the
 *                      room status (every change through core/room.c).
 * Which P ranks a room talks to is decided in core/topology.c.
 *
 * Threads: the control thread owns the inbox (P's statuses, layer updates,
 * registration replies) and enforces every deadline; d_discover_threads
 * discovery workers run the blocking HTTP so that neither the caller nor
 * the inbox waits on it. A worker takes one room at a time, and one
 * bootstrap address has at most one worker (ppeer.busy): a slow or silent
 * address holds one worker, and addresses whose last lookup failed hold at
 * most half of them (disc_slow_max), so it delays only its own rooms.
 *
 * Locking: `lock` protects the receiver list, every receiver's fields, the
 * peer table, the pins table, the channel count and the room counters.
 * HTTP is never done with it held (a worker marks the peer busy, copies
 * what it needs, drops the lock, and looks things up again by room
 * afterwards). lc_grant_revoke and non-blocking PUSH sends may run under it
 * (both are bounded: microseconds, and a zero send timeout).
 */
#ifndef LC_PD_DECODE_INT_H
#define LC_PD_DECODE_INT_H

#include <pthread.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "core/layout.h"
#include "core/room.h"
#include "core/topology.h"

#define LC__D_RETRY_NS (200ull * 1000000) /* lookup errors are retried this often */
/* A refused registration is tried again after this, by the next room that
 * needs the P rank: a refusal (real or forged) never sticks. */
#define LC__D_REFUSED_RETRY_NS (500ull * 1000000)
/* A REGISTER unanswered this long is no longer outstanding: no reply is
 * believed for it afterwards. */
#define LC__D_REPLY_WAIT_NS (10000ull * 1000000)
/* After P's lanes into D closed, this long is spent looking for a P rank
 * whose control channel is down too (decode_discover.c, lanes_gone), every
 * LC__D_GONE_POLL_NS. */
#define LC__D_GONE_WINDOW_NS (1000ull * 1000000)
#define LC__D_GONE_POLL_NS (20ull * 1000000)
/* How long D waits for a pinned P rank's old address to accept a
 * connection before it follows a changed route (no CURVE). */
#define LC__D_PROBE_MS 500
/* A discovery worker's longest sleep while rooms are live: bounds a
 * wake-up lost by lc__decode_lane_gone's trylock. */
#define LC__D_LIVE_WAIT_NS (100ull * 1000000)

/* One P rank as this D knows it. */
typedef struct lc__prank {
	bool resolved;            /* endpoint known */
	bool registered;          /* registration sent since the last reset */
	bool reg_pending;         /* a REGISTER sent and not yet answered */
	uint32_t reg_epoch;       /* REGISTERs sent so far */
	uint64_t reg_sent_ns;     /* when the last one went */
	uint64_t unsent_since_ns; /* REGISTERs could not be queued since (0: they could) */
	int refused;              /* the last registration refused: the code (0: none) */
	uint64_t retry_ns;        /* refused: register again no sooner than this */
	char refuse_reason[LC__MSG_STR_MAX];
	/* The session secret at this rank (128 bits from getrandom, made at the
	 * first REGISTER, kept across registrations): D's messages to the rank
	 * carry it, the rank's messages to D must (docs/security.md). */
	bool has_secret;
	uint8_t secret[LC__MSG_SECRET_LEN];
	/* The data-plane token this rank, and only this rank, was given (made
	 * with the first REGISTER to its endpoint; revoked when D forgets the
	 * rank or follows it elsewhere): every room sent to the rank is bound
	 * to it (lc_grant_bind), so that whoever holds it writes only the
	 * rooms D gave this rank (docs/security.md, "A token opens only its
	 * own rooms"). */
	bool has_token;
	lc_token_t token;
	char endpoint[300];
	char key[LC__BS_KEY_MAX];
	lc__push_t *push;
	/* What the last REGISTER told the rank (control/addr.h: chosen for the
	 * route towards it), for the reason when no reply comes. */
	char adv_status[LC__MSG_STR_MAX];
	char adv_data[LC__MSG_STR_MAX];
	int adv_rc; /* nothing sound to tell the rank: why (set when resolved) */
	char adv_why[LC_REASON_MAX];
	/* A live room last used the rank (decode_peers.c, channels_sweep): its
	 * channel (push) closes once this is d_channel_idle_ms old. */
	uint64_t used_ns;
} lc__prank_t;

/* What D first learned of a P rank's route, kept for the D's life
 * without CURVE (decode_discover.c, route_trusted), also after its peer
 * gave its place to another (lc__pmet_t). */
typedef struct lc__pin {
	bool set;
	char endpoint[300];
	char key[LC__BS_KEY_MAX];
} lc__pin_t;

/* A P address this D met (its bootstrap server answered) and forgot for
 * another: what it pinned there, kept in a compact table of at most
 * d_peers_max (decode_peers.c), so that a forgotten P is neither trusted
 * afresh nor treated as a stranger when it is named again. */
typedef struct lc__pmet {
	char addr[LC__BS_HOST_MAX];
	uint64_t last_used_ns;
	lc__pin_t *pins;
	int npins;
} lc__pmet_t;

/* One P instance, by bootstrap address. The table has two halves of
 * d_peers_max places (decode_peers.c): peers whose bootstrap server
 * answered this D (proven) and peers not answered yet, so that addresses
 * where nothing answers never take the place of a P this D met. In a full
 * half, a peer with no live room gives its place to a newcomer. */
typedef struct lc__ppeer {
	char addr[LC__BS_HOST_MAX];
	bool proven; /* its bootstrap server answered a lookup (or it was met) */
	/* A discovery worker is on it with `lock` dropped (one at a time): it
	 * is not freed meanwhile, and no other worker takes its rooms. */
	bool busy;
	bool slow; /* its last lookup failed: it may hold only disc_slow_max workers */
	/* Receivers naming the peer (created, not yet destroyed); a final
	 * receiver's peer may be forgotten under it (r->peer set NULL). */
	int refs;
	int live;                  /* scratch of count_live: live rooms naming it */
	uint64_t last_used_ns;     /* a receiver was last created for it */
	uint64_t next_lookup_ns;   /* after a failed lookup: the next, no sooner */
	lc__parallel_info_t *info; /* NULL until fetched */
	lc__prank_t *ranks;        /* info->world_size */
	lc__pin_t *pins;           /* npins, by rank; survive lc__decode_peer_reset */
	int npins;
	uint64_t refused_log_ns, refused_quiet; /* routes refused: one line a second */
	int misses;
	int last_fail; /* the last lookup's enum lc__bs_fail (said once per kind) */
	uint64_t next_probe_ns;
	uint64_t generation; /* bumped when the peer is declared dead */
} lc__ppeer_t;

/* One granted range, kept for the room checksum. */
typedef struct lc__sum_range {
	lc_region_t *region;
	uint64_t offset, length;
} lc__sum_range_t;

/* What a target P rank has told this room so far. */
typedef struct lc__dtarget {
	bool responded;
	bool has_sum; /* its Success carried a room checksum */
	uint64_t sum;
	uint32_t layers;    /* its LAYERS messages: advisory, D counts its own */
	uint32_t reg_epoch; /* the rank's registration the room went out under */
	/* It confirmed that the room has a sender there and took D's transfer
	 * info (STATUS Bootstrapped, or its Success): P knows the room. */
	bool acked;
} lc__dtarget_t;

struct lc_receiver {
	lc_decode_t *d;
	uint64_t room;
	lc__ppeer_t *peer;
	int status, fail_reason; /* changed only by lc__decode_set_state / lc__decode_fail */
	char reason[LC_REASON_MAX];
	uint64_t created_ns, bootstrapped_ns, final_ns, next_try_ns;
	uint64_t sent_ns; /* the transfer info went out */
	/* The request's pairing value, sent in every transfer info (0 bytes:
	 * none). */
	uint8_t pair_len;
	uint8_t pair[LC_PAIR_MAX];
	bool planned;               /* plan holds the targets */
	bool default_bootstrap;     /* created with bootstrap NULL: 127.0.0.1:<bootstrap_port> */
	char doomed[LC_REASON_MAX]; /* the pages cannot pair with P's: why ("": they do) */
	lc__tp_plan_t plan;         /* the P ranks of the room (core/topology.h) */
	lc__dtarget_t got[LC__TP_MAX_TARGETS];
	int responses;
	bool sent, granted;
	uint64_t grant_bytes; /* D's granted total for the room, at send */
	uint32_t ready;       /* leading layers whose granted bytes all landed */
	uint64_t claimed_ns;  /* every target said Success; D's count decides (0: not yet) */
	uint8_t *metadata;
	size_t metadata_len;
	bool has_metadata;
	lc__sum_range_t *sum_ranges; /* room_checksum: what D granted */
	size_t nsum_ranges, sum_cap;
	struct lc_receiver *next;
};

struct lc_decode {
	lc_ctx_t *ctx;
	lc_layout_t *layout;
	uint64_t *item_lens; /* per buffer, for core/topology.h */
	lc_region_t **regions;
	size_t nregions;
	uint32_t *buf_region; /* per buffer */
	uint64_t *buf_offset;
	uint8_t **descs;
	size_t *desc_lens;
	lc_listener_t *listener;
	char data_url[LC__MSG_STR_MAX];
	char host[LC__BS_HOST_MAX];     /* bound; "": the wildcard */
	char endpoint[LC__MSG_STR_MAX]; /* as bound: tcp://[::]:port for the wildcard */
	char session[LC__MSG_STR_MAX];
	int tp_size, tp_rank;
	uint64_t bootstrap_ns, waiting_ns, hb_interval_ns;
	uint64_t reply_wait_ns;  /* connect_timeout_ms: a REGISTER unanswered this long fails */
	uint64_t landed_wait_ns; /* a claimed room's bytes may still be landing this long */
	bool checksum;           /* room_checksum: check P's sums against D's memory */
	int hb_misses;
	int64_t default_port;
	lc__zctx_t *z;
	lc__pull_t *pull;
	pthread_t ctl_thread, *disc_threads; /* ndisc (d_discover_threads) */
	bool ctl_started;
	int ndisc, disc_started;
	/* Workers on a slow peer now, and at most (half of them, at least 1):
	 * the others stay free for addresses that answer. Under `lock`. */
	int disc_slow_busy, disc_slow_max;
	_Atomic bool stop;
	/* Wakes the control thread (lc__decode_ctl_wake): stop, and while it
	 * sleeps long (ctl_idle: no live room for LIVE_POLL_MS; set under `lock`
	 * as it looks) a new receiver or a registration sent. Otherwise it
	 * looks every LIVE_POLL_MS anyway, so rooms one after another pay no
	 * wake-up. ctl_live_ns: when it last saw a live room (its own). */
	int evfd;
	_Atomic bool ctl_idle;
	uint64_t ctl_live_ns;
	_Atomic uint64_t ctl[LC__CTL_COUNT];
	/* Lanes from P closed by P (the listener's word, any thread), and the
	 * last room written on one; the discovery workers' view of them. */
	_Atomic uint64_t lanes_gone, gone_room;
	uint64_t lanes_seen, gone_until_ns;
	/* A discovery worker saw a live room before it last slept, so it
	 * looks again within LC__D_LIVE_WAIT_NS anyway: a receiver
	 * Bootstrapped at creation need not wake the workers. Under `lock`. */
	bool disc_live;
	/* Channels (PUSH sockets, three ZeroMQ sockets each) open to P ranks,
	 * at most channels_max (d_channels_max); one no live room used for
	 * chan_idle_ns closes (decode_peers.c). Under `lock`. */
	int nchannels, channels_max;
	uint64_t chan_idle_ns, next_sweep_ns;
	int peer_ranks_max; /* d_peer_ranks_max: P ranks one bootstrap may advertise */

	pthread_mutex_t lock;
	pthread_cond_t cond; /* discovery work or stop */
	lc_receiver_t *receivers;
	lc__ppeer_t **peers; /* 2 * peers_max (d_peers_max): nproven + nraw */
	int npeers, peers_max, nproven, nraw;
	lc__pmet_t *met; /* peers_max entries: pins of forgotten P peers */
	int nmet;
	lc__room_metrics_t rooms; /* receivers' outcomes, counted by core/room.c */
	lc__notify_t notify;      /* receivers' status changes, for lc_decode_wait */
};

#define LC__D_CTL_ADD(d, name) atomic_fetch_add(&(d)->ctl[LC__CTL_##name], 1)

static inline bool lc__decode_final(const lc_receiver_t *r)
{
	return r->status == LC_ROOM_SUCCESS || r->status == LC_ROOM_FAILED;
}

/* ---- decode_control.c (all with `lock` held) ---- */

lc_receiver_t *lc__decode_find(lc_decode_t *d, uint64_t room);
/* A forward status change, checked by core/room.c's legal table. */
void lc__decode_set_state(lc_decode_t *d, lc_receiver_t *r, int status);
/* Fail a room: grants revoked first (no late write lands), then P told
 * (when tell_p). A final room is left as it is. */
void lc__decode_fail(lc_decode_t *d, lc_receiver_t *r, int reason, bool tell_p, const char *fmt,
		     ...) __attribute__((format(printf, 5, 6)));
/* The control thread. */
void *lc__decode_ctl_main(void *arg);
void lc__decode_ctl_wake(lc_decode_t *d);

/* ---- decode_sum.c ---- */

/* room_checksum: keep a range D granted to the room. */
int lc__decode_keep_range(lc_receiver_t *r, const lc__sum_range_t *g);
/* room_checksum, once every granted byte landed and the grant is revoked:
 * 0 if the sums of the room's P ranks add up to D's own over its granted
 * ranges; else LC_ERR_PROTO with the reason in why. */
int lc__decode_check_sum(lc_decode_t *d, lc_receiver_t *r, char *why, size_t cap);

/* ---- decode_peers.c (all with `lock` held) ---- */

/* The peer of a bootstrap address for a new receiver (its reference
 * taken), created on first use in its half of the table (a P met before
 * among the proven, else among the others); in a full half a peer with no
 * live room and no worker on it is forgotten for it. -ENOSPC (why says
 * which half and names d_peers_max) when every place of the half is held,
 * -ENOMEM. */
int lc__decode_peer_get(lc_decode_t *d, const char *addr, lc__ppeer_t **out, char *why, size_t cap);
/* A receiver of the peer was destroyed (pe may be NULL: forgotten). */
void lc__decode_peer_put(lc__ppeer_t *pe);
/* Forget what is known of a peer (closes its channels, revokes its ranks'
 * tokens). */
void lc__decode_peer_reset(lc_decode_t *d, lc__ppeer_t *pe);
/* Free the whole table (lc_decode_destroy, threads stopped). */
void lc__decode_peers_free(lc_decode_t *d);
/* The peer's bootstrap server answered: it moves to the proven half. False
 * when that half is full of peers with live rooms (why says so). */
bool lc__decode_peer_prove(lc_decode_t *d, lc__ppeer_t *pe, char *why, size_t cap);
/* The channel to P rank `rank` of pe, opened on first use: 0; -ENOSPC
 * when d_channels_max are open and each has a live room (why says so:
 * the caller retries later), another error when it cannot be opened. */
int lc__decode_chan_open(lc_decode_t *d, lc__ppeer_t *pe, int rank, char *why, size_t cap);
/* Close the rank's channel (its registration goes with it). */
void lc__decode_chan_close(lc_decode_t *d, lc__prank_t *pr);
/* Channels no live room used for d_channel_idle_ms close; ns until the
 * next sweep is due. */
uint64_t lc__decode_chan_sweep(lc_decode_t *d, uint64_t now);

/* ---- decode_discover.c ---- */

/* A new receiver whose P is known and whose every target rank answered
 * this D's registration needs no I/O to be Bootstrapped: done here, on the
 * caller's thread, without a hop to the discovery workers and back (true).
 * False: a worker brings it forward (a lookup, a registration or its
 * answer is due). With `lock` held; never blocks. */
bool lc__decode_discover_now(lc_decode_t *d, lc_receiver_t *r);
/* A discovery worker (arg: the decode side). */
void *lc__decode_disc_main(void *arg);
/* The data listener's lc__peer_gone_fn: a lane from P closed or reset by
 * P. Takes no lock it could wait for (the listener's I/O thread). */
void lc__decode_lane_gone(void *arg, uint64_t room);

#endif
