/*
 * Inside shm's sender: the connection state send.c (the batch list, the
 * socket, the task) and send_ipc.c (CUDA IPC exports of source regions)
 * share. Threading is send.c's (its head comment).
 */
#ifndef LC_TRANSPORT_SHM_SEND_INT_H
#define LC_TRANSPORT_SHM_SEND_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/cq.h"
#include "transport/shm/lane.h"
#include "transport/shm/shm_int.h"

typedef struct pbatch {
	lc__batch_t *b; /* referenced */
	size_t sent;    /* writes sent (a prefix of b->writes) */
	size_t acked;   /* writes acknowledged (<= sent) */
	bool ipc;       /* device sources that go by CUDA IPC */
	bool undecided; /* device sources, posted before the WELCOME */
	bool lane;      /* sent whole through the lane: its acks come there */
	struct pbatch *next;
} pbatch_t;

enum pstate { P_DOWN, P_HELLO, P_READY };
enum pipc { IPC_UNKNOWN, IPC_ON, IPC_OFF };

/* A CUDA source region as exported to D (once per region and connection). */
typedef struct pexport {
	bool ok;    /* exportable; else its batches are staged */
	int vmm_fd; /* VMM: the exported fd (a dup goes with each IPC_REGION), or -1 */
	lc__shm_ipc_region_t rec;
} pexport_t;
typedef struct shm_conn {
	lc_conn_t *c;
	lc_ctx_t *ctx;
	char name[LC__SHM_NAME_MAX + 1];
	lc__io_task_t task;   /* on the context's I/O core */
	lc__io_alarm_t alarm; /* p_deadlines by the progress limit after an inline send */
	uint64_t connect_ns, progress_limit_ns;

	pthread_mutex_t lock;
	pbatch_t *head, *tail;
	pbatch_t *cursor; /* first batch that may have writes left to send */
	size_t nlist;
	size_t unacked;      /* writes sent and not yet acknowledged */
	size_t lane_unacked; /* of them, through the lane */
	bool closing;
	enum pipc ipc;      /* what this connection's handshake said */
	pexport_t *exports; /* LC__SHM_MAX_EXPORTS, by region id */
	size_t nexports;
	bool no_ipc; /* the URL says ?ipc=0: always stage */

	/* The loop thread's: held by it in every op of the task, and taken
	 * (trylock) by a posting thread that sends a batch at once, inline
	 * (send_inline). Everything below is under it. */
	pthread_mutex_t send_mu;
	int fd;
	lc__io_fd_t iofd;
	enum pstate state;
	bool readable, writable;                /* as the last edges said */
	bool want_connect;                      /* handshake before the first post */
	bool ipc_offer;                         /* the HELLO offered CUDA IPC */
	uint64_t deadline_ns;                   /* handshake deadline in P_HELLO */
	uint64_t progress_ns;                   /* last ack, or when acks started being awaited */
	uint32_t srcs[LC__SHM_MAX_SRC_REGIONS]; /* source regions D holds, oldest first */
	size_t nsrcs;
	uint8_t *out; /* one message waiting to be sent */
	size_t out_len;
	int out_fd;
	uint8_t *in;
	/* The lane (lane.h) when the WELCOME passed one: our own indices
	 * (never read back from the shared page) and the socket messages sent
	 * since the handshake, which each lane record carries. The loop
	 * thread alone reads the acks ring (a_tail). */
	bool lane_offer;
	lc__shm_lane_t lane;
	uint64_t w_head, a_tail, sock_sent;
	/* A caller spinning in lc_cq_wait on this connection's queue takes
	 * lane acks itself (cq.h's poller, under send_mu): how many spin now
	 * (the lane's P polling flag says whether any), a copy of a_tail for
	 * the loop's lock-free look, and acks a caller found malformed (the
	 * loop fails the connection). */
	lc__cq_poller_t poller;
	size_t cq_spinners;
	_Atomic uint64_t a_seen;
	bool lane_bad;
} shm_conn_t;

/* send_ipc.c. Under sc->lock: put the message that must go before a write
 * from source region ri that D does not hold into sc->out (its REGION or
 * IPC_REGION, or with D's table full a DROP of the oldest). */
void lc__shm_build_region(shm_conn_t *sc, const lc__region_info_t *ri);
/* send_ipc.c. Under sc->lock: the export of region id, or NULL. */
pexport_t *lc__shm_export_find(shm_conn_t *sc, uint32_t id);
/* Under sc->lock: whether CUDA region ri can go by IPC, exporting it the
 * first time it is asked (the table never grows past LC__SHM_MAX_EXPORTS:
 * beyond, writes are staged). */
bool lc__shm_exportable(shm_conn_t *sc, const lc__region_info_t *ri);

/* send_lane.c. Under sc->lock: whether D holds source region id. */
bool lc__shm_src_known(const shm_conn_t *sc, uint32_t id);
/* The registered source region of write w into *ri (kept from the
 * previous write when it still covers this one; *have says *ri is one);
 * false when it is gone. */
bool lc__shm_write_source(shm_conn_t *sc, const lc_write_t *w, lc__region_info_t *ri, bool *have);
/* The wire record of write w of batch b from source region ri. */
void lc__shm_write_record(const lc__batch_t *b, const lc_write_t *w, const lc__region_info_t *ri,
			  lc__shm_write_t *rec);
/* Under send_mu and sc->lock, with no message built: put whole plain
 * batches from the cursor on into the lane and publish them. Returns the
 * records put; *ring: D's loop parked and must be rung (lc__shm_lane_ring,
 * after the locks). */
uint32_t lc__shm_lane_put(shm_conn_t *sc, bool *ring);
/* Under sc->lock: whether a batch from the cursor on has writes to send. */
bool lc__shm_unsent(const shm_conn_t *sc);
/* Under send_mu: tell a parked D that the lane has records. */
void lc__shm_lane_ring(shm_conn_t *sc);
/* The connection task's poll op (io.h). */
bool lc__shm_conn_poll(lc__io_task_t *t, int how);

#endif
