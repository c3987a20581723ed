/*
 * ZeroMQ channels between ranks: one bound PULL socket per rank (its
 * inbox) and PUSH sockets to peers' inboxes, with bounded queues (HWM),
 * a short LINGER, send timeouts and a maximum message size. Optional CURVE
 * (docs/control-plane.md, "Security"): when $LAYERCAKE_SECRET_DIR holds
 * curve.public and curve.secret (z85), every inbox is a CURVE server with
 * that keypair, every PUSH a CURVE client with it, and a ZAP handler
 * accepts only client keys listed in curve.public or authorized_keys. The
 * shared secret (control/shared_secret.h) gives a keypair of its own, used
 * and accepted the same way.
 * A context may watch its PUSH sockets (D's, to its P ranks): ZMTP
 * heartbeats and a socket monitor say whether each peer is reachable.
 *
 * Threading: a lc__zctx_t is shared (zmq contexts are thread-safe). A PULL
 * is used by its owner thread only. A PUSH carries its own lock, so any
 * thread may send on it.
 */
#ifndef LC_CONTROL_CHANNEL_H
#define LC_CONTROL_CHANNEL_H

#include "core/common.h"

#define LC__CHAN_SNDHWM 4096
#define LC__CHAN_RCVHWM 65536
#define LC__CHAN_LINGER_MS 200
#define LC__CHAN_BACKLOG 32 /* an inbox's accept queue (libzmq's default: 100) */
#define LC__CHAN_KEY_LEN 40 /* z85 of a 32-byte key */

typedef struct lc__zctx lc__zctx_t;
typedef struct lc__pull lc__pull_t;
typedef struct lc__push lc__push_t;

/* A zmq context, with CURVE set up from $LAYERCAKE_SECRET_DIR when both key
 * files are present, and from the shared secret when one is set (shared:
 * NULL or unset for none; control/shared_secret.h): its keypair is this
 * context's own when the folder holds none, and its public key is accepted
 * from peers either way (then a ZAP thread runs). Errors: -ENOMEM, -EINVAL
 * (malformed key files), LC_ENOTSUP (built without ZeroMQ, or CURVE keys
 * present but the libzmq lacks CURVE). */
struct lc__shared;
int lc__zctx_create(const struct lc__shared *shared, lc__zctx_t **out);
/* Whether z85 is the shared secret's public key (a peer that holds the
 * secret). */
bool lc__zctx_shared_key(const lc__zctx_t *z, const char *z85);
void lc__zctx_destroy(lc__zctx_t *z);
/* The z85 public key when CURVE is on, else "". */
const char *lc__zctx_public_key(const lc__zctx_t *z);
/* Client keys refused by the ZAP handler so far. */
uint64_t lc__zctx_auth_refused(const lc__zctx_t *z);
/* Watch every PUSH connected from now on (D's sockets to its P ranks): a
 * ZMTP heartbeat (a PING every ivl_ms; no traffic back within timeout_ms
 * drops the connection) and a socket monitor that lc__push_up reads. ZMTP's
 * own PING/PONG, answered by the peer's libzmq: no message of ours changes.
 * Call before any lc__push_connect, from the thread that created z. */
void lc__zctx_watch_pushes(lc__zctx_t *z, int ivl_ms, int timeout_ms);

/* Bind an inbox on tcp://host:* (host NULL or a wildcard: every address,
 * IPv4 and IPv6; control/addr.h); the bound endpoint ("tcp://host:port",
 * "tcp://[::]:port" for the wildcard) goes to endpoint[cap]. */
int lc__pull_bind(lc__zctx_t *z, const char *host, lc__pull_t **out, char *endpoint, size_t cap);
/* The zmq socket, for zmq_poll in the owner thread. */
void *lc__pull_socket(lc__pull_t *p);
/* Receive one message without blocking: 1 and a malloc'd copy in *buf
 * (caller frees), 0 if none, < 0 on error. Oversize messages never arrive
 * (ZMQ_MAXMSGSIZE disconnects the sender). */
int lc__pull_recv(lc__pull_t *p, void **buf, size_t *len);
/* The same, and the sender's CURVE public key (z85, as the ZAP handler
 * authenticated it) in peer_key[cap >= 41]; "" without CURVE. */
int lc__pull_recv_from(lc__pull_t *p, void **buf, size_t *len, char *peer_key, size_t cap);
/* The connection that brought the last message received proved itself
 * (its sender is a peer the owner knows: control/inbox_guard.h): it keeps
 * its place when the inbox is full. The owner thread, after deciding so. */
void lc__pull_vouch(lc__pull_t *p);
void lc__pull_close(lc__pull_t *p);
/* The inbox's own counters among the control counters (control/bootstrap.h):
 * inbox_conns_refused (refused: inbox_conns_max or inbox_conns_per_addr
 * with nothing to evict, or closed while out of descriptors),
 * inbox_conns_evicted (closed, having proven nothing, to take a newcomer),
 * inbox_door_shut (control/inbox_guard.h). True and *out for one of them
 * (0 for a NULL p), false for any other ctl. Any thread. */
bool lc__pull_counter(const lc__pull_t *p, int ctl, uint64_t *out);
/* Connections the inbox holds now. Any thread. */
uint64_t lc__pull_conns_held(const lc__pull_t *p);

/* Connect to a peer inbox. server_key: the peer's z85 key ("" or NULL: our
 * own, for a deployment sharing one keypair). Never blocks on the network. */
int lc__push_connect(lc__zctx_t *z, const char *endpoint, const char *server_key, lc__push_t **out);
/* Send one message, waiting at most timeout_ms for queue space. Any thread.
 * -EAGAIN on timeout (peer slow or gone), other -errno on failure. */
int lc__push_send(lc__push_t *p, const void *buf, size_t len, int timeout_ms);
/* Whether a watched PUSH's connection is up: 1 once a ZMTP handshake with
 * the peer succeeded and until the connection drops (peer gone, a heartbeat
 * unanswered, a failed handshake), else 0; 1 always for an unwatched PUSH.
 * Reads the monitor's events without blocking. Any thread. */
int lc__push_up(lc__push_t *p);
void lc__push_close(lc__push_t *p);
/* Close at once, dropping what is still queued (no LINGER): for a socket
 * whose peer never answered. */
void lc__push_close_now(lc__push_t *p);

#endif
