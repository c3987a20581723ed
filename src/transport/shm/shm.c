/*
 * shm://NAME: the same-host transport. See docs/transport-shm.md.
 *
 * The receiver (D) copies: it maps the sender's memfd-backed source regions
 * read-only (the fds arrive over a unix socket with SCM_RIGHTS) and, for each
 * small write request, checks region, range and grant and copies with one
 * memcpy into its registered memory, in bounded slices inside the memory
 * seam's bracket (lc__land_*). No payload byte crosses the socket. Sources
 * that are not memfd-backed are read with process_vm_readv (CMA) where the
 * kernel permits it, else their writes fail with -ENOTSUP and a reason.
 *
 * Files: wire.h (the messages), send.c (P), recv.c (D), copy.c (D's copy
 * paths and optional helper thread), sock.c (names and the unix socket, both
 * sides), this file (the ops table).
 *
 * Threads: none of its own. A connection (P) and a listener (D) are each a
 * task on the context's I/O core (transport/io/io.h), served by one of its
 * loop threads with every other tcp and shm connection of the context; only
 * shm_copy_threads=2 adds a copy helper thread per listener.
 */
#include "transport/shm/shm_int.h"

const lc__transport_ops_t lc__shm_ops = {
	.scheme = "shm",
	.caps = LC__TP_STRIDED | LC__TP_REMOTE | LC__TP_CUDA_IPC | LC__TP_INLINE_SEND,
	.listener = {.listen = lc__shm_listen, .close = lc__shm_listener_close},
	.conn = {.open = lc__shm_conn_open,
		 .close = lc__shm_conn_close,
		 .post = lc__shm_post,
		 .post_device = lc__shm_post_device,
		 .flush = lc__shm_flush,
		 .room_cancel = lc__shm_room_cancel},
};
