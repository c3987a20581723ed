/*
 * Inside tcp's sender: the state send.c (lanes, connections, posting) and
 * frames.c (WRITES frames described as iovecs from the send cursor) share.
 * Threading is send.c's (its head comment).
 */
#ifndef LC_TRANSPORT_TCP_SEND_INT_H
#define LC_TRANSPORT_TCP_SEND_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "transport/tcp/tcp_int.h"

/* iovecs per sendmsg (IOV_MAX) and room for the headers and tables of the
 * frames they carry (at most one 24-byte header and one descriptor per
 * payload iovec). */
#define MAX_IOV 1024
#define HBUF_LEN (2 * MAX_IOV * LC__TCP_DESC_LEN)
#define IN_CAP (128u * LC__TCP_CTRL_LEN)

/* ====================================================================
 * Sender state.
 *
 * Threading: post() (any thread) fills `subq` under tcp_conn.lock; the
 * rest of tcp_conn, lane and seg is the I/O thread's, under send_mu, which
 * the I/O thread holds in each of the task's ops. A posting thread that
 * finds send_mu free sends what it posted itself (send_inline: run to
 * completion, no wake of the I/O thread on the way out) on lanes that are
 * connected and writable; a lane down, a full socket or an error is left
 * to the I/O thread, kicked. Only the I/O thread fails a lane or touches
 * the epoll set. Lock order: send_mu -> tcp_conn.lock.
 * Batches are shared with the generic layer: each segblock holds one
 * reference and only reads b->writes, b->room and the atomic fields.
 * ==================================================================== */

typedef struct segblock segblock_t;

/* Writes [first, end) of a batch, carried by one lane. end shrinks when the
 * batch completes (deadline, cancel) before those frames went out. */
typedef struct seg {
	lc__batch_t *b;
	segblock_t *blk;
	struct seg *next; /* lane FIFO */
	size_t first, end;
	size_t acked; /* writes of this segment acknowledged */
	uint64_t bytes;
} seg_t;

/* One allocation per posted batch: its segments. */
struct segblock {
	lc__batch_t *b;   /* referenced until every segment is released */
	segblock_t *next; /* submission queue */
	size_t n, live;
	seg_t segs[];
};

enum lane_state { LANE_DOWN, LANE_CONNECTING, LANE_HELLO, LANE_READY };

/* One WRITES frame described in a sendmsg. */
typedef struct built {
	seg_t *s;
	size_t idx, n; /* writes [idx, idx+n) of s */
	size_t off0;   /* bytes of the frame sent before this sendmsg */
	size_t left;   /* bytes of the frame this sendmsg carries */
	bool whole;    /* they reach the frame's end (else: out of iovecs) */
} built_t;

struct tcp_conn;

/* One TCP socket. FIFO head..tail: segments not yet fully acknowledged.
 * The send cursor (cur, cur_idx, cur_off) is the next byte to send: cur_off
 * bytes of the WRITES frame carrying writes [cur_idx, cur_idx+run_n) of cur
 * went out already (run_n is fixed once a frame has started). */
typedef struct lane {
	struct tcp_conn *tc;
	int idx, fd;
	enum lane_state state;
	bool writable;
	uint64_t deadline_ns; /* connect + handshake, while not READY */
	uint64_t progress_ns; /* last byte sent or ack received, or work arrived */
	seg_t *head, *tail, *cur;
	size_t cur_idx, cur_off, run_n;
	uint64_t seq_next;  /* seq of the write at the cursor */
	uint64_t seq_acked; /* writes acknowledged */
	uint64_t queued;    /* payload bytes queued and unacknowledged */
	/* Queued writes came to an idle, connected lane, none acked: D closes
	 * such a lane only with no granted write open; they may go again once. */
	bool resend_ok;
	uint8_t in[IN_CAP];
	size_t in_len;
	lc__io_fd_t iofd;
} lane_t;

typedef struct tcp_conn {
	lc_conn_t *conn;
	lc_ctx_t *ctx;
	char host[256];
	int port;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	lc__io_task_t task;   /* on the context's I/O core */
	lc__io_alarm_t alarm; /* the lanes' stall deadlines after an inline send */
	bool warm;            /* lanes were connected ahead of the first batch */
	int nlanes;
	lane_t *lanes;
	uint64_t connect_ns, progress_ns;
	int sockbuf;

	pthread_mutex_t send_mu; /* the I/O thread's state (above, below) */
	pthread_mutex_t lock;
	segblock_t *subq, *subq_tail; /* under lock */
	bool closing;                 /* under lock */

	/* I/O thread scratch for one sendmsg. */
	struct iovec iov[MAX_IOV];
	uint8_t hbuf[HBUF_LEN];
	built_t built[MAX_IOV / 2];
} tcp_conn_t;

typedef struct build_state {
	int niov;
	size_t hused, total, nf;
	size_t skip;  /* bytes of the frame being described still to skip */
	size_t bytes; /* bytes of it described */
	bool full;    /* out of iovecs */
} build_state_t;

/* Whether writes from (s, idx), not started, should be skipped. */
static inline bool lc__tcp_skip_frame(const seg_t *s, size_t idx)
{
	return idx == s->end || lc__batch_is_completed(s->b);
}

/* frames.c */
/* A write's payload bytes on the wire (every block of a strided one). */
uint64_t lc__tcp_wire_bytes(const lc_write_t *w);
/* Describe the frames at the cursor in tc->iov; returns the frame count. */
size_t lc__tcp_lane_build(lane_t *ln, build_state_t *st);
/* w bytes of the built frames went out: move the cursor. */
void lc__tcp_lane_advance(lane_t *ln, size_t nf, size_t w);

#endif
