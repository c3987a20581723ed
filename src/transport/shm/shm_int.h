/*
 * Inside the shm transport: what the sender (send.c), the receiver
 * (recv.c, copy.c) and the socket helpers (shm.c) share. The wire format is
 * wire.h; the design is docs/transport-shm.md.
 */
#ifndef LC_TRANSPORT_SHM_SHM_INT_H
#define LC_TRANSPORT_SHM_SHM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "transport/io/io.h"
#include "transport/shm/wire.h"
#include "transport/transport.h"

#define LC__SHM_NAME_MAX 64
/* Source regions one connection may have mapped at D at a time. P evicts
 * (DROP) the oldest beyond this; D treats more as malformed. */
#define LC__SHM_MAX_SRC_REGIONS 256
/* CUDA IPC: source regions one connection exports (P; beyond, writes are
 * staged) and allocations one listener imports at a time (D; beyond, the
 * writes naming them fail). */
#define LC__SHM_MAX_EXPORTS 1024
#define LC__SHM_MAX_IPC_IMPORTS 1024

/* ---- shm.c: names and sockets ---- */

/* The listener name of an shm:// URL; "" or "auto" makes one up when
 * listening, and is -EINVAL when connecting. */
int lc__shm_name_from_url(const char *url, char *name, size_t cap, bool listening);
/* The abstract unix address ("@layercake-shm-NAME") of a listener name. */
socklen_t lc__shm_addr(const char *name, struct sockaddr_un *sa);
/* Send one message without blocking, passing pass_fd (>= 0) along: 0,
 * -EAGAIN when the socket is full, or another -errno. */
int lc__shm_send(int sock, const void *buf, size_t len, int pass_fd);
/* Receive one message without blocking. *fd gets the first fd passed with
 * it (any further fd is closed), or -1; a message or control data that did
 * not fit sets *truncated and passes no fd. Returns recvmsg's result. */
ssize_t lc__shm_recv(int sock, void *buf, size_t cap, int *fd, bool *truncated);

/* ---- the two sides: ops of lc__shm_ops ---- */

int lc__shm_listen(lc_listener_t *l, const char *url);
void lc__shm_listener_close(lc_listener_t *l);
int lc__shm_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p);
void lc__shm_conn_close(lc_conn_t *c);
int lc__shm_post(lc_conn_t *c, lc__batch_t *b);
int lc__shm_post_device(lc_conn_t *c, lc__batch_t *b);
void lc__shm_flush(lc_conn_t *c);
void lc__shm_room_cancel(lc_conn_t *c, uint64_t room);

/* ---- copy.c: the receiver's copy paths ---- */

/* An optional second copy thread of a listener (config shm_copy_threads). */
typedef struct lc__shm_helper lc__shm_helper_t;
lc__shm_helper_t *lc__shm_helper_start(void);
void lc__shm_helper_stop(lc__shm_helper_t *h);
/* Writes of at least this many bytes are split with the helper. */
#define LC__SHM_SPLIT_MIN (1u << 20)

/* Each lands a write of writer `who` (the id of the token its connection
 * presented: lc__land_open) through the seam. */

/* Land `length` bytes of a mapped source through the seam, the copy split
 * between this thread and h. Returns 0 or the seam's code. */
int lc__shm_copy_split(lc__shm_helper_t *h, lc_ctx_t *ctx, uint64_t who, uint64_t room,
		       uint32_t region, uint64_t offset, const uint8_t *src, uint64_t length);
/* Land `length` bytes from src, device memory imported by CUDA IPC into
 * device `device`'s context, through the CUDA copy engine: device to
 * device into a CUDA destination, device to host into a host one (a
 * bounce for other kinds), in bracketed slices each waited for. A strided
 * write (w->count > 1) is checked as one span against the region and the
 * grant before any block moves; offset and src are its first block's. */
int lc__shm_copy_ipc(lc_ctx_t *ctx, uint64_t who, int device, uint64_t room, uint32_t region,
		     uint64_t offset, uint64_t src, const lc__shm_write_t *w);
/* Land `length` bytes at p_addr in process pid with process_vm_readv. */
int lc__shm_copy_cma(lc_ctx_t *ctx, uint64_t who, pid_t pid, uint64_t room, uint32_t region,
		     uint64_t offset, uint64_t p_addr, uint64_t length);

#endif
