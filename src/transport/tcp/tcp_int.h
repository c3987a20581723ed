/*
 * tcp://HOST:PORT: the default data plane between any two hosts. Internal
 * header of the transport's folder:
 *   wire.h  the wire format (frames, descriptors, control frames)
 *   send.c      the sender: connections of `lanes` sockets, one I/O-core
 *               task each, and posting (inline sends)
 *   frames.c    the sender's WRITES frames as iovecs from a lane's cursor
 *   send_int.h  the sender state send.c and frames.c share
 *   listen.c    the receiver's listeners (one I/O-core task each): the
 *               listening socket, accepted lanes, their caps and deadlines
 *   recv.c      the receiver's frames and writes, landing through the
 *               memory seam
 *   recv_int.h  the receiver state listen.c and recv.c share
 *   sock.c      the socket helpers both sides share
 *   tcp.c       the ops table
 * See docs/transport-tcp.md.
 */
#ifndef LC_TRANSPORT_TCP_TCP_INT_H
#define LC_TRANSPORT_TCP_TCP_INT_H

#include "transport/io/io.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

/* sock.c: TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when sockbuf > 0. */
void lc__tcp_sockopts(int fd, int sockbuf);
/* The socket_buffer_kib knob in bytes (0: kernel autotuning). */
int lc__tcp_sockbuf(lc_ctx_t *ctx);

/* Sender ops (send.c). */
int lc__tcp_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p);
void lc__tcp_conn_close(lc_conn_t *c);
int lc__tcp_post(lc_conn_t *c, lc__batch_t *b);
void lc__tcp_flush(lc_conn_t *c);
/* Receiver ops (recv.c). */
int lc__tcp_listen(lc_listener_t *l, const char *url);
void lc__tcp_listener_close(lc_listener_t *l);

#endif
