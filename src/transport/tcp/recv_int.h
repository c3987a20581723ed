/*
 * tcp:// receiver internals shared by recv.c (frames, writes, device
 * landings) and listen.c (the listening socket, lanes, the listener task):
 * the limits, the lane and listener state. Threading: recv.c's header.
 */
#ifndef LC_TCP_RECV_INT_H
#define LC_TCP_RECV_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/land.h"
#include "transport/tcp/tcp_int.h"

/* How much one read may put in the staging buffer (which also holds a
 * partial header and table): small, so that payload bytes that land there
 * and are copied again cost little; large enough to carry a frame's table
 * and dozens of tiny writes per syscall, and a whole 4 KiB write with its
 * header, so that such a write costs one readv (recv.c: a short read ends
 * the pump without an EAGAIN read). */
#define STAGE_READ (8u << 10)
/* A read shorter than asked drained the socket (epoll(7)); the pump stops
 * there, without a read that meets EAGAIN, when it got at most this much:
 * a lone small write, the next of which comes only after its ACK. A
 * longer one is a stream still arriving: the next read likely has more. */
#define DRAINED_MAX (64u << 10)
#define STAGE_CAP (STAGE_READ + LC__TCP_HDR_LEN + LC__TCP_MAX_RUN * LC__TCP_DESC_LEN)
#define SCRATCH_LEN (64u << 10)
/* Writes per lane in the seam's in-order queue (device copies in flight,
 * or queued behind such); a lane reads on only while a whole run more
 * would fit. */
#define LANDQ_CAP (2 * LC__TCP_MAX_RUN + LC__BOUNCE_N)
/* Bound on waiting for a closing lane's copies in flight. */
#define CLOSE_WAIT_NS 5000000000ull
/* Acknowledge at least every ACK_BYTES applied, and whenever the socket
 * runs dry; bytes one lane may read before others get a turn. */
#define ACK_BYTES (1u << 20)
#define PUMP_BUDGET (16u << 20)
#define OUT_FRAMES (LC__TCP_MAX_RUN + 16u)
#define OUT_CAP (OUT_FRAMES * LC__TCP_CTRL_LEN)
#define MAX_ACCEPTED 1024
/* Connections accepted per event on the listening socket (level-triggered:
 * the rest come next round), well under tcp_pending_per_addr's default, so
 * that a real peer's HELLO is read before newer connections can make it
 * the oldest pending one. */
#define ACCEPT_BURST 16
/* What an fd of a listener task is. */
#define LISTEN_TAG 0
#define LANE_TAG 1
/* iovecs per readv: a run's payloads, a strided write's blocks one each. */
#define READ_IOV 1024

/* ====================================================================
 * Receiver state.
 *
 * Threading: the I/O thread running the listener's task owns every rlane
 * and the scratch buffer; listen() and listener_close() touch them only
 * before the task is attached (lc__io_attach) and after it is detached
 * (lc__io_detach). Shared state is reached only through the
 * context's thread-safe helpers (the memory seam, counters, tokens). The
 * one exception is a bounce slot's copy completion (the seam's pipeline,
 * land.h), on the copy engine's thread: it kicks the task, and the I/O
 * thread reaps the slot (lc__tcp_slots_reap).
 * ==================================================================== */

enum rphase { R_HELLO, R_HDR, R_RUN };

/* One write of the run being received. */
typedef struct rwrite {
	uint8_t *dst;      /* NULL: rejected, the payload is discarded */
	lc__land_t land;   /* the seam's landing, until the payload is in place */
	bool dev;          /* device memory: dst is land.dev, never read into; the
			  * payload bounces through the seam's slots (land.h) */
	uint32_t inflight; /* its copies queued and not reaped */
	uint32_t region;
	uint64_t offset, len; /* len: payload bytes on the wire */
	/* A strided write (count > 1): count blocks of blen bytes, stride
	 * apart from offset at D; its landing spans them all. Into device
	 * memory it is landed block by block synchronously (sdev): its bytes
	 * are read into scratch and copied by lc__land_copy, no bounce slot. */
	uint32_t count;
	uint64_t blen, stride;
	bool sdev;
	int code, detail; /* the rejection, when dst is NULL */
} rwrite_t;

typedef struct rlane {
	struct tcp_listener *tl;
	int fd;
	struct rlane *next, *prev;
	enum rphase phase;
	bool readable, writable, paused, dead;
	bool hup; /* an edge said the peer closed or failed: read on to the end */
	bool peer_gone; /* dead because the peer closed or reset it */
	bool wrote;     /* a WRITES frame came: room is the last one's */
	uint64_t hello_deadline_ns;
	uint8_t peer[16]; /* source address (4 or 16 bytes), for the pending caps */
	uint8_t peer_len;
	uint64_t active_ns; /* accepted, authenticated or last read bytes: the idle
			     * deadline and the order of eviction */
	uint64_t who; /* the id of the token its HELLO presented (seam.h) */
	/* the WRITES frame being received: write run_i has `done` bytes */
	uint64_t room;
	uint32_t run_n, run_i;
	uint64_t done;
	rwrite_t run[LC__TCP_MAX_RUN];
	/* acknowledgement state */
	uint64_t seq;   /* writes processed */
	uint64_t acked; /* writes acknowledged (queued in out) */
	uint64_t unacked_bytes;
	uint8_t stage[STAGE_CAP];
	size_t st_pos, st_len;
	uint8_t out[OUT_CAP];
	size_t out_len;
	lc__io_fd_t iofd;
	/* device landings */
	lc__bounce_t *fill; /* the slot run_i's bytes are read into, or NULL */
	bool slot_wait;     /* stopped: every slot busy */
	lc__landq_t q;      /* LANDQ_CAP, made at the lane's first device write */
} rlane_t;

typedef struct tcp_listener {
	lc_listener_t *l;
	lc_ctx_t *ctx;
	int fd;
	lc__io_task_t task; /* on the context's I/O core */
	lc__io_fd_t lfd;    /* the listening socket (tag LISTEN_TAG) */
	rlane_t *lanes;     /* doubly linked */
	size_t nlanes;
	uint64_t hello_ns;
	size_t pending_max, pending_per_addr; /* lanes before their HELLO */
	uint64_t evicted;
	/* Authenticated lanes: the idle deadline (0: none) and the caps. */
	uint64_t idle_ns;
	size_t lanes_max, lanes_per_addr;
	uint64_t idled, lanes_evicted, refused; /* for the rate-limited log lines */
	uint64_t idled_log_ns, evict_log_ns, refuse_log_ns;
	bool reap; /* a lane was marked dead outside the service loop's reach */
	int sockbuf;
	uint8_t scratch[SCRATCH_LEN];
	lc__bounces_t bounces; /* device-kind payloads; buffers made at first use */
} tcp_listener_t;

/* Eviction takes only a lane quiet for this long (so never one between two
 * batches of a busy peer), and one without a granted write in flight. */
#define EVICT_QUIET_NS 1000000000ull
/* One log line per interval for each kind of lane closed or refused. */
#define LANE_LOG_NS 1000000000ull

static inline bool lc__tcp_same_peer(const rlane_t *r, const uint8_t *key, uint8_t len)
{
	return r->peer_len == len && !memcmp(r->peer, key, len);
}

/* Whether lane r has a granted write open (bytes still to come, copies to
 * finish, an acknowledgement held behind them): such a lane is never idled
 * out nor evicted. Writes that were rejected do not count: their bytes are
 * discarded. */
static inline bool lc__tcp_rlane_busy(const rlane_t *r)
{
	if (r->q.n)
		return true;
	for (uint32_t i = r->run_i; r->phase == R_RUN && i < r->run_n; i++)
		if (r->run[i].land.g)
			return true;
	return false;
}

/* First occurrence, then at most one line per LANE_LOG_NS. */
static inline bool lc__tcp_log_due(uint64_t *last_ns, uint64_t now)
{
	if (*last_ns && now - *last_ns < LANE_LOG_NS)
		return false;
	*last_ns = now;
	return true;
}

/* recv.c, for listen.c */
void lc__tcp_rlane_flush(rlane_t *r);
bool lc__tcp_rlane_held(const rlane_t *r);
void lc__tcp_rlane_pump(rlane_t *r);
void lc__tcp_slots_reap(tcp_listener_t *tl);
/* A lane that just authenticated may stay (true), or its listener holds
 * its caps of lanes, every lane that could make room is busy or active, and
 * it is refused (false: counted and logged). */
bool lc__tcp_lane_admit(rlane_t *r);

#endif
