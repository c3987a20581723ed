/*
 * Inside shm's receiver: the listener and connection state recv.c (the
 * socket, the messages, the copies) and recv_lane.c (the lanes, lane.h)
 * share. Threading is recv.c's (its head comment): the loop thread owns
 * all of it.
 */
#ifndef LC_TRANSPORT_SHM_RECV_INT_H
#define LC_TRANSPORT_SHM_RECV_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/cuda.h"
#include "transport/shm/lane.h"
#include "transport/shm/shm_int.h"

enum src_mode { SRC_MAP, SRC_CMA, SRC_IPC };

/* An allocation of P's GPU memory imported here (CUDA IPC). */
typedef struct ipc_import {
	uint8_t handle[LC__SHM_IPC_HANDLE_LEN]; /* the IPC handle (not for VMM) */
	bool vmm;
	bool local; /* P is this process: its address, nothing opened */
	int device; /* our ordinal it was imported into */
	CUdeviceptr ptr;
	uint64_t size;
	unsigned refs;
} ipc_import_t;

typedef struct src_region {
	uint32_t id;
	enum src_mode mode;
	int err;             /* nonzero: writes naming it fail with this code */
	const uint8_t *base; /* SRC_MAP: start of the region in our mapping */
	void *map;
	size_t map_len;
	uint64_t p_addr; /* SRC_CMA: the region's address in P */
	uint64_t len;
	ipc_import_t *imp; /* SRC_IPC: the allocation, the region at +ipc_off */
	uint64_t ipc_off;
} src_region_t;

typedef struct dconn {
	int fd;
	lc__io_fd_t iofd;
	pid_t pid;
	uid_t uid;
	bool ready;              /* handshake done */
	uint64_t who;            /* the id of the token its HELLO presented (seam.h) */
	bool ipc;                /* CUDA IPC accepted */
	bool readable, writable; /* as the last edges said */
	uint64_t accepted_ns;
	src_region_t *srcs;
	size_t nsrcs;
	uint8_t *in;            /* one received message */
	uint32_t in_next, in_n; /* a WRITES message being applied: next record */
	uint8_t *acks;          /* pending acknowledgements */
	size_t nacks;
	/* The lane (lane.h), when the handshake made one: our own indices
	 * (never read back from the shared page), the socket messages handled
	 * since the handshake (a lane record waits for its count), and whether
	 * dc->in and the pending acks came from the lane. */
	lc__shm_lane_t lane;
	uint64_t w_tail, a_head, sock_msgs;
	/* P's acks tail as last read. An ack looks at P's page only when this
	 * copy says the ring is full (P's tail only moves on), which keeps a
	 * load of a line P's core wrote off every ack's path; the loop checks
	 * the tail P publishes each time it parks (lane_tail_bad: a forged
	 * one, the connection closes). */
	uint64_t a_tail_seen;
	bool lane_tail_bad;
	/* A ring P's parked loop is owed unless P takes the acks first: due
	 * then, owed since. */
	uint64_t ring_due_ns, ring_owed_ns;
	uint64_t polled_ns; /* when P's polling flag was last seen set */
	bool in_lane;
	struct dconn *next, *prev;
} dconn_t;

typedef struct shm_listener {
	lc_listener_t *l;
	lc_ctx_t *ctx;
	char name[LC__SHM_NAME_MAX + 1];
	int lfd;
	lc__io_task_t task; /* on the context's I/O core */
	lc__io_fd_t liofd;  /* the listening socket (LISTEN_TAG) */
	_Atomic int stop;   /* closing: cut a long WRITES message short */
	uint64_t hello_ns;  /* connect_timeout_ms */
	dconn_t conns;      /* sentinel; newest first */
	size_t nconns;
	size_t pending_max; /* connections before their HELLO (shm_pending_max) */
	uint64_t evicted;
	lc__shm_helper_t *helper; /* second copy thread, NULL: copy alone */
	bool no_ipc;              /* the URL says ?ipc=0 */
	ipc_import_t **imports;   /* LC__SHM_MAX_IPC_IMPORTS */
	size_t nimports;
} shm_listener_t;

/* What serving a connection left to do. */
/* ---- recv_lane.c ---- */

/* Whether dc's lane holds a record D may take now (or a malformed head,
 * which lc__shm_lane_take reports). */
bool lc__shm_lane_ready(const dconn_t *dc);
/* Take what lc__shm_lane_ready allows into dc->in as one WRITES message:
 * 1, 0 for nothing, -1 for a malformed head. */
int lc__shm_lane_take(shm_listener_t *sl, dconn_t *dc);
/* Put dc's pending acks (of lane writes) in its acks ring, ringing P if
 * it parked: 0, -EPROTO (P broke the lane's rules) or a send error. */
int lc__shm_ack_lane(dconn_t *dc);
/* A lane for a P whose HELLO h offered one: its memfd to pass, or -1. */
int lc__shm_lane_offer(shm_listener_t *sl, dconn_t *dc, const lc__shm_hello_t *h);
/* A ring owed to P (lc__shm_ack_lane defers it): dropped when P took the
 * acks, polls, or its loop woke; sent once due. Returns the deadline still
 * pending, 0 for none. */
uint64_t lc__shm_lane_ring_due(shm_listener_t *sl, dconn_t *dc, uint64_t now);
/* The listener task's poll op (io.h). */
bool lc__shm_listener_poll(lc__io_task_t *t, int how);

#endif
