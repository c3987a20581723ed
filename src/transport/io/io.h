/*
 * The I/O core: the event loops that the socket transports (tcp, shm) run
 * on, in the spirit of libuv's loop and nng's pollq. A context owns a small
 * bounded set of loops (config io_threads), each one thread with an epoll
 * set, an eventfd doorbell, a command queue and per-task timers. A transport
 * describes its wire as tasks (a connection, a listener) and never builds a
 * thread or a wake-up of its own.
 *
 * A task is attached to the least loaded loop (a new loop is started while
 * fewer than io_threads run). From then on the loop thread alone calls its
 * ops:
 *   on_event(): one of the task's fds is ready. Record it; heavy work is
 *               better done in service(), which runs after every event of
 *               the same wait has been dispatched.
 *   service():  the task was kicked, had events, or its deadline passed.
 *               Returns the next deadline in lc__now_ns() time: 0 for none,
 *               a past value to be serviced again at once.
 * Any thread may kick a task (lc__io_kick: cheap, coalesced). A task is
 * detached synchronously; the detach callback runs on the loop thread and
 * must remove the task's fds, and after lc__io_detach returns the loop
 * never touches the task again.
 *
 * Lock order: a loop's lock is a leaf (no other lock is taken under it);
 * task ops are called with no loop lock held.
 */
#ifndef LC_TRANSPORT_IO_H
#define LC_TRANSPORT_IO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ctx.h"

typedef struct lc__io_loop lc__io_loop_t;
typedef struct lc__io_task lc__io_task_t;

/* One fd of a task in a loop's epoll set; lives as long as it is added. */
typedef struct lc__io_fd {
	lc__io_task_t *task;
	int fd;
	uint32_t tag; /* free for the task */
} lc__io_fd_t;

typedef struct lc__io_task_ops {
	const char *name; /* for logs */
	void (*on_event)(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now);
	uint64_t (*service)(lc__io_task_t *t, uint64_t now);
} lc__io_task_ops_t;

struct lc__io_task {
	const lc__io_task_ops_t *ops;
	lc__io_loop_t *loop;
	/* loop thread only */
	uint64_t deadline_ns;
	bool touched; /* had events in this wait */
	lc__io_task_t *next, *prev;
	/* kicks: any thread */
	_Atomic int kicked;
	lc__io_task_t *kick_next; /* under the loop's lock */
};

/* Attach t (zeroed but for what the transport keeps in it) to a loop of
 * ctx; its first service() runs soon after. */
int lc__io_attach(lc_ctx_t *ctx, lc__io_task_t *t, const lc__io_task_ops_t *ops);
/* Run fn(t, arg) on the loop thread (fn removes the task's fds), then
 * detach t. Synchronous; from the loop thread itself it runs inline. */
void lc__io_detach(lc__io_task_t *t, void (*fn)(lc__io_task_t *t, void *arg), void *arg);
/* Ask for a service() soon. Any thread; coalesced. */
void lc__io_kick(lc__io_task_t *t);
/* Run fn(t, arg) on t's loop thread and wait for it. */
void lc__io_call(lc__io_task_t *t, void (*fn)(lc__io_task_t *t, void *arg), void *arg);

/* Loop thread (or before the fd is shared with the loop): watch fd for
 * events (EPOLLIN | EPOLLOUT | EPOLLET ...), stop watching. */
int lc__io_fd_add(lc__io_task_t *t, lc__io_fd_t *f, int fd, uint32_t events, uint32_t tag);
void lc__io_fd_del(lc__io_task_t *t, lc__io_fd_t *f);

/* Loop threads running for ctx (for tests and `layercake info`). */
int lc__io_nthreads(lc_ctx_t *ctx);
/* Stop every loop of ctx; no task may be attached any more. */
void lc__io_destroy(lc_ctx_t *ctx);

#endif
