/*
 * The guard of a ZeroMQ inbox (a bound PULL, P's or D's): caps the TCP
 * connections it holds, in all and per source address, without letting
 * idle connections keep a real peer out, and keeps a flood of connections
 * from making libzmq's I/O thread spin on EMFILE.
 *
 * libzmq has no connection limit and accepts whatever arrives; a socket
 * monitor (zmq_socket_monitor) is the one place that sees every accepted
 * connection with its fd and every disconnect. The guard's thread reads it
 * and keeps a table of the connections held: at most inbox_conns_max (at
 * most a quarter of RLIMIT_NOFILE, so that an inbox at its cap leaves the
 * process descriptors), at most inbox_conns_per_addr of them from one
 * source address.
 *
 * Proven and unproven. A connection proves itself when a message it
 * brought is taken by the inbox's owner as from a peer it knows: P takes
 * a REGISTER it accepts, or a transfer info or cancel that proves a
 * registered session's secret; D a registration reply, status or layer
 * update that carries the secret D registered with at that P rank. The
 * owner says so (lc__inbox_guard_vouch, through lc__pull_vouch) with the
 * fd and address libzmq gives each message ("__fd", "Peer-Address"). A
 * newcomer past a cap takes the place of the oldest connection that has
 * proven nothing, from its own address when that address holds its share,
 * else from the whole inbox: that one is shut down (shutdown(2), never
 * close: the fd stays libzmq's, which sees the end of it and closes it)
 * and counted (inbox_conns_evicted, logged rate-limited). A proven
 * connection is never evicted; only when every connection in the way is
 * proven is the newcomer refused (inbox_conns_refused). So idle connections,
 * however many and from however many addresses, cost a real peer only the
 * moment between its connection and its first message, and a peer that
 * proved itself keeps its place. Without authentication (CURVE, the shared
 * secret) a peer that registers is a peer: what holds it back is P's
 * session table (p_sessions_max) and the per-address cap.
 *
 * Connections that never finish their ZMTP handshake are dropped by
 * libzmq itself after inbox_handshake_ms (ZMQ_HANDSHAKE_IVL, set by
 * channel.c): its own timer, no work of ours. A ZAP handler was not
 * chosen: it runs only once a greeting arrives (an idle connection never
 * reaches it) and never hears of a disconnect, so it cannot count what is
 * held.
 *
 * Refusing after the fact lets a burst through: libzmq accepts in its I/O
 * thread faster than the guard's thread hears of it. So while the table is
 * full of proven connections the guard also shuts the listener's door, a
 * socket filter that drops every packet (SO_ATTACH_FILTER): the kernel
 * completes no new handshake and queues nothing until a held connection
 * ends. With an unproven connection to evict the door stays open.
 *
 * EMFILE: libzmq's listener retries a failed accept at once for as long as
 * the backlog is readable. On ZMQ_EVENT_ACCEPT_FAILED with EMFILE/ENFILE
 * the guard shuts the door, frees a spare descriptor it holds for this,
 * accepts and closes what waits in the backlog, refuses what libzmq still
 * takes from it (all counted as refused), takes the spare back, and opens
 * the door again once it has the spare and DOOR_EMFILE_MS has passed.
 *
 * Threading: the guard's thread owns the monitor's PAIR socket; the
 * connection table, the vouches not yet matched and the door are under
 * the guard's lock (the guard's thread and the owner's, which vouches);
 * the counters are atomics, read by any thread.
 */
#ifndef LC_CONTROL_INBOX_GUARD_H
#define LC_CONTROL_INBOX_GUARD_H

#include "core/common.h"

typedef struct lc__inbox_guard lc__inbox_guard_t;

/* Watch sock (a PULL not yet bound: the monitor must see the bind) of zmq
 * context zmq. Returns 0, or -errno (then nothing is watched). */
int lc__inbox_guard_start(void *zmq, void *sock, lc__inbox_guard_t **out);
/* Stop the thread and the monitor; before zmq_close(sock), from the
 * socket's owner thread. NULL is a no-op. */
void lc__inbox_guard_stop(lc__inbox_guard_t *g, void *sock);
/* The connection whose fd libzmq named fd ("__fd" of a message) and whose
 * address is peer_address ("Peer-Address") proved itself: it is never
 * evicted. A vouch that comes before the guard has read the connection's
 * accept is kept a moment for it. NULL, fd < 0 or an address that is not
 * IP: a no-op. Any thread. */
void lc__inbox_guard_vouch(lc__inbox_guard_t *g, int fd, const char *peer_address);
/* Connections refused so far (caps with nothing to evict, EMFILE drains),
 * evicted to make room for a newcomer, and held now. */
uint64_t lc__inbox_guard_refused(const lc__inbox_guard_t *g);
uint64_t lc__inbox_guard_evicted(const lc__inbox_guard_t *g);
uint64_t lc__inbox_guard_held(const lc__inbox_guard_t *g);
/* Times the door shut (full, or out of descriptors): what came while it was
 * shut the kernel dropped, uncounted, so a flood the door kept out shows
 * here and not in refused. */
uint64_t lc__inbox_guard_door_shut(const lc__inbox_guard_t *g);

#endif
