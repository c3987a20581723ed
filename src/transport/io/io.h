/*
 * The I/O core: the event loops that the socket transports (tcp, shm) run
 * on, in the spirit of libuv's loop and nng's pollq. A context owns a small
 * bounded set of loops (config io_threads), each one thread with an epoll
 * set, an eventfd doorbell, a command queue, and its deadlines in heaps
 * (heap.h): the tasks' and the timers' (lc__io_timer_t, e.g. a batch's).
 * A transport describes its wire as tasks (a connection, a listener) and
 * never builds a thread, a wake-up or a timer of its own.
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
#include "transport/io/heap.h"

typedef struct lc__io_loop lc__io_loop_t;
typedef struct lc__io_task lc__io_task_t;

/* One fd of a task in a loop's epoll set; lives as long as it is added. */
typedef struct lc__io_fd {
	lc__io_task_t *task;
	int fd;
	uint32_t tag; /* free for the task */
} lc__io_fd_t;

/* What a loop asks a task's poll() (below). */
enum lc__io_poll_how {
	LC__IO_LOOK, /* is there work? */
	LC__IO_PARK, /* the loop is about to sleep: have the peer ring, then look */
	LC__IO_WAKE, /* the loop is awake again: the peer need not ring */
};

typedef struct lc__io_task_ops {
	const char *name; /* for logs */
	void (*on_event)(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now);
	uint64_t (*service)(lc__io_task_t *t, uint64_t now);
	/* Optional: memory a peer writes with no fd to say so (shm's lanes,
	 * transport/shm/lane.h). The loop calls poll(t, LC__IO_LOOK) once a
	 * turn and between the looks of a spin, and services t when it says
	 * true. Before a sleep it calls poll(t, LC__IO_PARK): the task tells
	 * its peer to ring (an fd event) from now on, looks again after a full
	 * fence, and says true when there is work (the loop then does not
	 * sleep); after the wait, poll(t, LC__IO_WAKE). Loop thread; cheap;
	 * never blocks. The return value of WAKE is ignored. */
	bool (*poll)(lc__io_task_t *t, int how);
} lc__io_task_ops_t;

struct lc__io_task {
	const lc__io_task_ops_t *ops;
	lc__io_loop_t *loop;
	/* loop thread only */
	lc__heap_node_t due;        /* in the loop's task heap while it has a deadline */
	bool linked;                /* attached to the loop */
	bool touched;               /* on the ready list: events, a kick, or due */
	lc__io_task_t *next, *prev; /* the ready list */
	lc__io_task_t *poll_next;   /* the loop's tasks with ops->poll */
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

/*
 * Timers: a deadline on a loop for something that is not a task (a
 * batch, conn.c). Kept in a heap per loop under the loop's lock, so any
 * thread may arm or cancel one; fire() runs on the loop thread with no
 * lock held, one timer at a time.
 */
typedef struct lc__io_timer {
	lc__heap_node_t node;
	void (*fire)(struct lc__io_timer *tm, uint64_t now);
	lc__io_loop_t *loop; /* where it was armed */
} lc__io_timer_t;

/* The loop that keeps timers for t: t's own loop when t is attached,
 * otherwise (a transport with no I/O task, such as loop://) the least
 * loaded loop of ctx, started if none runs. Loops live until
 * lc__io_destroy. */
int lc__io_timer_loop(lc_ctx_t *ctx, const lc__io_task_t *t, lc__io_loop_t **out);
/* Arm tm (not armed, fire set) to fire at deadline_ns on lp. -ENOMEM. */
int lc__io_timer_arm(lc__io_loop_t *lp, lc__io_timer_t *tm, uint64_t deadline_ns);
/* Disarm tm. On return fire() is neither running nor will it run, unless
 * called from tm's own fire(). Any thread; a timer never armed is fine. */
void lc__io_timer_cancel(lc__io_timer_t *tm);
/* Wait until lp fires no timer (returns at once on lp's own thread): what
 * a timer fired before this call has finished with its object. */
void lc__io_timer_quiesce(lc__io_loop_t *lp);

/*
 * An alarm: a kick of an attached task at a deadline, set from any thread.
 * For a thread that did a task's work itself (a posting thread that sent
 * inline) and so left the task's own deadlines unlooked at: the alarm
 * makes the loop thread service the task by then, and service() computes
 * the real deadline as always. One pending at a time: setting an alarm
 * that is set does nothing (the earlier one is at least as early for a
 * fixed delay). Arming never rings a loop asleep until before the
 * deadline, so a set costs the loop's lock and a heap insert.
 */
typedef struct lc__io_alarm {
	lc__io_timer_t tm;
	lc__io_task_t *task;
	_Atomic bool armed;
} lc__io_alarm_t;

/* After t is attached. */
void lc__io_alarm_init(lc__io_alarm_t *a, lc__io_task_t *t);
/* Kick the task at deadline_ns unless an alarm is pending. */
void lc__io_alarm_set(lc__io_alarm_t *a, uint64_t deadline_ns);
/* Before the task detaches: on return the alarm neither runs nor will. */
void lc__io_alarm_cancel(lc__io_alarm_t *a);

/* Loop threads running for ctx (for tests and `layercake info`). */
int lc__io_nthreads(lc_ctx_t *ctx);
/* Stop every loop of ctx; no task may be attached any more. */
void lc__io_destroy(lc_ctx_t *ctx);

#endif
