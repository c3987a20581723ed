/*
 * The guard of a ZeroMQ inbox (a bound PULL, P's or D's): caps the TCP
 * connections it holds, in all and per source address, and keeps a flood
 * of connections from making libzmq's I/O thread spin on EMFILE.
 *
 * libzmq has no connection limit and accepts whatever arrives; a socket
 * monitor (zmq_socket_monitor) is the one place that sees every accepted
 * connection with its fd and every disconnect. The guard's thread reads it:
 * a connection over inbox_conns_max (at most a quarter of RLIMIT_NOFILE,
 * so that an inbox at its cap leaves the process descriptors), or over
 * inbox_conns_per_addr for its
 * source address, is shut down at once (shutdown(2), never close: the fd
 * stays libzmq's, which sees the end of it and closes it). Connections that
 * never finish their ZMTP handshake are dropped by libzmq itself after
 * inbox_handshake_ms (ZMQ_HANDSHAKE_IVL, set by channel.c): its own timer,
 * no work of ours. A ZAP handler was not chosen: it runs only once a
 * greeting arrives (an idle connection never reaches it) and never hears
 * of a disconnect, so it cannot count what is held.
 *
 * Refusing after the fact lets a burst through: libzmq accepts in its I/O
 * thread faster than the guard's thread hears of it. So while the table is
 * full the guard also shuts the listener's door, a socket filter that drops
 * every packet (SO_ATTACH_FILTER): the kernel completes no new handshake
 * and queues nothing until a held connection ends.
 *
 * EMFILE: libzmq's listener retries a failed accept at once for as long as
 * the backlog is readable. On ZMQ_EVENT_ACCEPT_FAILED with EMFILE/ENFILE
 * the guard shuts the door, frees a spare descriptor it holds for this,
 * accepts and closes what waits in the backlog, refuses what libzmq still
 * takes from it (all counted as refused), takes the spare back, and opens
 * the door again once it has the spare and DOOR_EMFILE_MS has passed.
 *
 * Threading: the guard's thread owns the monitor's PAIR socket and the
 * connection table; the counters are atomics, read by any thread.
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
/* Connections refused so far (caps and EMFILE drains), and held now. */
uint64_t lc__inbox_guard_refused(const lc__inbox_guard_t *g);
uint64_t lc__inbox_guard_held(const lc__inbox_guard_t *g);
/* Times the door shut (full, or out of descriptors): what came while it was
 * shut the kernel dropped, uncounted, so a flood the door kept out shows
 * here and not in refused. */
uint64_t lc__inbox_guard_door_shut(const lc__inbox_guard_t *g);

#endif
