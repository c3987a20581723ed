/* The I/O core (io.h): epoll loops with a doorbell, commands and timers.
 * Deadlines live in two heaps per loop (heap.h): tasks' (loop thread only)
 * and timers' (under the loop's lock, armed from any thread). A wait
 * sleeps until the earlier of the two tops; a turn services the ready
 * list (tasks with events or kicks) and pops only what is due. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/io/io.h"

#define MAX_LOOPS 64
#define MAX_EVENTS 64
/* The longest wait of a loop: one wake-up a second when idle (what the
 * context's timer thread did before), so that a post arming a deadline
 * further out than that never needs to ring. */
#define MAX_SLEEP_NS 1000000000ull

/* A function to run on the loop thread; the caller waits for `done`. */
typedef struct cmd {
	void (*fn)(lc__io_task_t *t, void *arg);
	lc__io_task_t *task;
	void *arg;
	bool detach, done;
	int rc; /* of an attach */
	struct cmd *next;
} cmd_t;

struct lc__io_loop {
	struct lc__io *io;
	int index, epfd, bellfd;
	pthread_t thread;
	pthread_mutex_t lock; /* cmds, kicks, stop */
	pthread_cond_t cond;  /* a command is done */
	cmd_t *cmds, **cmds_tail;
	lc__io_task_t *kicks;
	_Atomic int bell_pending;
	bool stop;
	lc__heap_t timers;       /* under lock */
	lc__io_timer_t *firing;  /* under lock: the timer whose fire() runs */
	_Atomic uint64_t asleep; /* the wait's end (UINT64_MAX: none), 0 awake */
	size_t ntasks;           /* under io->lock: for placement */
	/* loop thread only */
	size_t nlinked;
	uint64_t spin_ns;      /* io_spin_us */
	int quick;             /* share of recent waits that ended within spin_ns, of QUICK_ONE */
	lc__heap_t due;        /* attached tasks with a deadline */
	lc__io_task_t ready;   /* sentinel of the circular ready list */
	lc__io_task_t *polled; /* tasks with ops->poll, through poll_next */
	struct epoll_event *ev;
	int nev, iev; /* the wait being dispatched */
	lc__io_fd_t bell;
};

struct lc__io {
	lc_ctx_t *ctx;
	pthread_mutex_t lock; /* loops[], nloops, each loop's ntasks */
	int max_loops, nloops;
	lc__io_loop_t *loops[MAX_LOOPS];
};

static void ring(lc__io_loop_t *lp)
{
	uint64_t one = 1;
	if (!atomic_exchange(&lp->bell_pending, 1) && write(lp->bellfd, &one, sizeof one) < 0)
		LC__WARN("io: doorbell: %s", strerror(errno));
}

/* The loop the calling thread runs, if it is a loop thread. */
static _Thread_local const lc__io_loop_t *current_loop;

static bool on_loop(const lc__io_loop_t *lp)
{
	return current_loop == lp;
}

/* ---- the loop thread ---- */

/* Put t on the ready list (once): it is serviced this turn. */
static void make_ready(lc__io_loop_t *lp, lc__io_task_t *t)
{
	if (t->touched)
		return;
	t->touched = true;
	t->next = &lp->ready;
	t->prev = lp->ready.prev;
	lp->ready.prev->next = t;
	lp->ready.prev = t;
}

static void unready(lc__io_task_t *t)
{
	if (!t->touched)
		return;
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->next = t->prev = NULL;
	t->touched = false;
}

/* Room in the heap for every attached task first: a deadline set after a
 * service can then never fail. */
static int task_link(lc__io_loop_t *lp, lc__io_task_t *t)
{
	int rc = lc__heap_reserve(&lp->due, lp->nlinked + 1);
	if (rc)
		return rc;
	lp->nlinked++;
	t->linked = true;
	t->due.pos = 0;
	if (t->ops->poll) {
		t->poll_next = lp->polled;
		lp->polled = t;
	}
	make_ready(lp, t); /* service at once */
	return 0;
}

static void task_unlink(lc__io_loop_t *lp, lc__io_task_t *t)
{
	unready(t);
	lc__heap_remove(&lp->due, &t->due);
	for (lc__io_task_t **p = &lp->polled; *p; p = &(*p)->poll_next)
		if (*p == t) {
			*p = t->poll_next;
			break;
		}
	t->linked = false;
	lp->nlinked--;
}

/* What a command does on the loop thread besides its fn. */
static void cmd_apply(lc__io_loop_t *lp, cmd_t *c)
{
	if (c->fn)
		c->fn(c->task, c->arg);
	if (c->detach)
		task_unlink(lp, c->task);
	else if (!c->task->linked)
		c->rc = task_link(lp, c->task); /* an attach */
}

static void run_commands(lc__io_loop_t *lp)
{
	pthread_mutex_lock(&lp->lock);
	cmd_t *c = lp->cmds;
	lp->cmds = NULL;
	lp->cmds_tail = &lp->cmds;
	pthread_mutex_unlock(&lp->lock);
	while (c) {
		cmd_t *next = c->next;
		cmd_apply(lp, c);
		pthread_mutex_lock(&lp->lock);
		c->done = true;
		pthread_cond_broadcast(&lp->cond);
		pthread_mutex_unlock(&lp->lock);
		c = next;
	}
}

/* Tasks kicked since the last look are due now. */
static void take_kicks(lc__io_loop_t *lp)
{
	pthread_mutex_lock(&lp->lock);
	lc__io_task_t *t = lp->kicks;
	lp->kicks = NULL;
	pthread_mutex_unlock(&lp->lock);
	while (t) {
		lc__io_task_t *next = t->kick_next;
		atomic_store(&t->kicked, 0);
		if (t->linked)
			make_ready(lp, t);
		t = next;
	}
}

/* Until the earliest deadline of either heap, 0 with work ready, and never
 * longer than MAX_SLEEP_NS. Publishes the wait's end under the lock, so that
 * a timer armed earlier rings the loop; a timer due past the end (a batch
 * deadline, seconds away) is seen at the next wake-up without a ring. */
static int wait_ms(lc__io_loop_t *lp, uint64_t now)
{
	lc__heap_node_t *t = lc__heap_top(&lp->due);
	uint64_t next = t ? t->key : UINT64_MAX;
	if (lp->ready.next != &lp->ready)
		next = 0;
	pthread_mutex_lock(&lp->lock);
	lc__heap_node_t *tm = lc__heap_top(&lp->timers);
	if (tm)
		next = LC__MIN(next, tm->key);
	next = LC__MIN(next, now + MAX_SLEEP_NS);
	if (lp->kicks)
		next = 0; /* kicked since take_kicks, without a ring (lc__io_kick) */
	atomic_store(&lp->asleep, next ? next : 1);
	pthread_mutex_unlock(&lp->lock);
	if (next <= now)
		return 0;
	return (int)((next - now + 999999) / 1000000);
}

static void dispatch(lc__io_loop_t *lp, uint64_t now)
{
	for (lp->iev = 0; lp->iev < lp->nev; lp->iev++) {
		lc__io_fd_t *f = lp->ev[lp->iev].data.ptr;
		if (!f)
			continue; /* removed during this dispatch */
		if (f == &lp->bell) {
			uint64_t v;
			/* Read, then re-arm: re-armed first, a ring landing between
			 * the two would be read away with pending left set, and no
			 * ring would write again (a loop asleep forever). A ring
			 * between read and re-arm is seen: commands and kicks are
			 * taken after this dispatch. */
			if (read(lp->bellfd, &v, sizeof v) < 0 && errno != EAGAIN)
				LC__DEBUG("io: doorbell read: %s", strerror(errno));
			atomic_store(&lp->bell_pending, 0);
			continue;
		}
		make_ready(lp, f->task);
		f->task->ops->on_event(f->task, f, lp->ev[lp->iev].events, now);
	}
	lp->nev = lp->iev = 0;
}

/* Fire the due timers, one at a time with the lock dropped. */
static void fire_timers(lc__io_loop_t *lp, uint64_t now)
{
	pthread_mutex_lock(&lp->lock);
	for (lc__heap_node_t *x; (x = lc__heap_top(&lp->timers)) && x->key <= now;) {
		lc__heap_remove(&lp->timers, x);
		lc__io_timer_t *tm = LC__CONTAINER_OF(x, lc__io_timer_t, node);
		lp->firing = tm;
		pthread_mutex_unlock(&lp->lock);
		tm->fire(tm, now);
		pthread_mutex_lock(&lp->lock);
		lp->firing = NULL;
		pthread_cond_broadcast(&lp->cond);
	}
	pthread_mutex_unlock(&lp->lock);
}

/* The due tasks join the ready list first, so that a task asking to be
 * serviced again at once (a past deadline) runs once per turn; then every
 * ready task is serviced and keeps the deadline it returns. */
static void service_due(lc__io_loop_t *lp, uint64_t now)
{
	for (lc__heap_node_t *x; (x = lc__heap_top(&lp->due)) && x->key <= now;) {
		lc__heap_remove(&lp->due, x);
		make_ready(lp, LC__CONTAINER_OF(x, lc__io_task_t, due));
	}
	while (lp->ready.next != &lp->ready) {
		lc__io_task_t *t = lp->ready.next;
		unready(t);
		uint64_t d = t->ops->service(t, now);
		if (!t->linked)
			continue; /* detached itself */
		if (!d)
			lc__heap_remove(&lp->due, &t->due);
		else if (lc__heap_linked(&t->due))
			lc__heap_update(&lp->due, &t->due, d);
		else
			lc__heap_insert(&lp->due, &t->due, d); /* reserved: cannot fail */
	}
	fire_timers(lp, now);
}

/* Wait for events until the next deadline. Adaptive polling: a loop whose
 * recent waits nearly all (above SPIN_QUICK) ended within io_spin_us
 * (events close behind one another: a write and its acknowledgement, the
 * next write of a caller waiting on the last, a stream) looks without
 * sleeping first, for at most io_spin_us, since a sleep on epoll costs a
 * wake-up. lp->quick estimates that share over about the last 8 waits,
 * whether the loop spun or slept: a wait is quick when its events came
 * within the budget of its start. A loop whose events come further apart,
 * or only now and then close together (a batch, its acknowledgement, then a
 * gap until the next forward), sleeps at once: a spin there often ends in
 * the sleep anyway, and its looks take the core from the threads doing the
 * work (32 rooms in flight through the control plane lost a fifth of their
 * rate when every loop spun after every event, still a tenth at 5 in 8;
 * docs/architecture.md). An idle loop spins nothing. Timers
 * armed and kicks made meanwhile ring the doorbell, which ends the spin like
 * any event.
 * Between looks the loop yields its core: where loops of P and D and the
 * posting threads outnumber the cores, the thread that will produce the
 * next event (a peer's loop, a caller about to post) then runs on it. A
 * spin that never yielded held the core for a whole time slice and made a
 * 4 KiB round trip 3-5x slower on two cores, hence the yield. */
#define QUICK_ONE 256			/* lp->quick's scale: every wait quick */
#define SPIN_QUICK (QUICK_ONE * 7 / 8)	/* spin above this share */

/* Ask every polled task (io.h, ops->poll); those with work are ready.
 * Returns whether any had. */
static bool poll_tasks(lc__io_loop_t *lp, int how)
{
	bool any = false;
	for (lc__io_task_t *t = lp->polled; t; t = t->poll_next)
		if (t->ops->poll(t, how) && how != LC__IO_WAKE) {
			make_ready(lp, t);
			any = true;
		}
	return any;
}

/* Polled tasks are looked at once a turn, between the looks of a spin
 * and, parked, once more before a sleep: a lane's peer rings only a loop
 * that parked, so a loop that spins serves it without a system call. */
static int wait_events(lc__io_loop_t *lp, struct epoll_event *ev)
{
	uint64_t start = lc__now_ns();
	int ms = wait_ms(lp, start), n = 0;
	bool found = lp->polled && poll_tasks(lp, LC__IO_LOOK), parked = false;
	if (found)
		ms = 0;
	if (ms && lp->spin_ns && lp->quick > SPIN_QUICK) {
		uint64_t until = start + lp->spin_ns;
		if (ms > 0)
			until = LC__MIN(until, start + (uint64_t)ms * 1000000);
		do {
			if ((n = epoll_wait(lp->epfd, ev, MAX_EVENTS, 0)) != 0)
				break;
			sched_yield();
			if (lp->polled && (found = poll_tasks(lp, LC__IO_LOOK)))
				break;
		} while (lc__now_ns() < until);
		if (!n)
			ms = found ? 0 : wait_ms(lp, lc__now_ns());
	}
	if (!n && ms != 0 && lp->polled) {
		parked = true;
		if ((found = poll_tasks(lp, LC__IO_PARK)))
			ms = 0;
	}
	if (!n)
		n = epoll_wait(lp->epfd, ev, MAX_EVENTS, ms);
	if (parked)
		poll_tasks(lp, LC__IO_WAKE);
	if (n > 0 || found || (n == 0 && ms != 0)) { /* events, or a deadline without any */
		int q = (n > 0 || found) && lc__now_ns() - start < lp->spin_ns ? QUICK_ONE : 0;
		lp->quick += (q - lp->quick) / 8;
	}
	return n;
}

static void *loop_main(void *arg)
{
	lc__io_loop_t *lp = arg;
	char name[16];
	snprintf(name, sizeof name, "lc-io-%d", lp->index);
	pthread_setname_np(pthread_self(), name);
	current_loop = lp;
	struct epoll_event ev[MAX_EVENTS];
	lp->ev = ev;
	for (;;) {
		run_commands(lp);
		pthread_mutex_lock(&lp->lock);
		bool stop = lp->stop && !lp->cmds;
		pthread_mutex_unlock(&lp->lock);
		if (stop)
			break;
		take_kicks(lp);
		uint64_t now = lc__now_ns();
		service_due(lp, now);
		int n = wait_events(lp, ev);
		atomic_store(&lp->asleep, 0);
		if (n < 0 && errno != EINTR)
			LC__WARN("io: epoll_wait: %s", strerror(errno));
		lp->nev = n > 0 ? n : 0;
		now = lc__now_ns();
		dispatch(lp, now);
		take_kicks(lp);
		service_due(lp, now);
	}
	return NULL;
}

/* ---- loops ---- */

static void loop_free(lc__io_loop_t *lp)
{
	if (lp->epfd >= 0)
		close(lp->epfd);
	if (lp->bellfd >= 0)
		close(lp->bellfd);
	pthread_cond_destroy(&lp->cond);
	pthread_mutex_destroy(&lp->lock);
	lc__heap_free(&lp->due);
	lc__heap_free(&lp->timers);
	free(lp);
}

static int loop_start(struct lc__io *io, lc__io_loop_t **out)
{
	lc__io_loop_t *lp = calloc(1, sizeof *lp);
	int rc;
	if (!lp)
		return -ENOMEM;
	lp->io = io;
	lp->index = io->nloops;
	lp->spin_ns = (uint64_t)lc__ctx_cfg(io->ctx, LC__CFG_io_spin_us) * 1000;
	pthread_mutex_init(&lp->lock, NULL);
	pthread_cond_init(&lp->cond, NULL);
	lp->cmds_tail = &lp->cmds;
	lp->ready.next = lp->ready.prev = &lp->ready;
	lp->epfd = epoll_create1(EPOLL_CLOEXEC);
	lp->bellfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (lp->epfd < 0 || lp->bellfd < 0) {
		rc = -errno;
		goto fail;
	}
	lp->bell.fd = lp->bellfd;
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = &lp->bell};
	if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->bellfd, &e)) {
		rc = -errno;
		goto fail;
	}
	rc = -pthread_create(&lp->thread, NULL, loop_main, lp);
	if (rc)
		goto fail;
	*out = lp;
	return 0;
fail:
	loop_free(lp);
	return rc;
}

static void loop_stop(lc__io_loop_t *lp)
{
	pthread_mutex_lock(&lp->lock);
	lp->stop = true;
	pthread_mutex_unlock(&lp->lock);
	atomic_store(&lp->bell_pending, 0);
	ring(lp);
	pthread_join(lp->thread, NULL);
	if (lp->nlinked)
		LC__WARN("io: loop %d stopped with tasks attached", lp->index);
	if (lp->timers.n)
		LC__WARN("io: loop %d stopped with timers armed", lp->index);
	loop_free(lp);
}

static int io_get(lc_ctx_t *ctx, struct lc__io **out)
{
	int rc = 0;
	pthread_mutex_lock(&ctx->objs_lock);
	if (!ctx->io) {
		struct lc__io *io = calloc(1, sizeof *io);
		if (io) {
			io->ctx = ctx;
			pthread_mutex_init(&io->lock, NULL);
			io->max_loops =
				(int)LC__MIN(lc__ctx_cfg(ctx, LC__CFG_io_threads), MAX_LOOPS);
			ctx->io = io;
		} else {
			rc = -ENOMEM;
		}
	}
	*out = ctx->io;
	pthread_mutex_unlock(&ctx->objs_lock);
	return rc;
}

/* The loop with the fewest tasks; a new one while fewer than max run. */
static int pick_loop(struct lc__io *io, lc__io_loop_t **out)
{
	lc__io_loop_t *best = NULL;
	int rc = 0;
	pthread_mutex_lock(&io->lock);
	for (int i = 0; i < io->nloops; i++)
		if (!best || io->loops[i]->ntasks < best->ntasks)
			best = io->loops[i];
	if ((!best || best->ntasks > 0) && io->nloops < io->max_loops) {
		lc__io_loop_t *lp = NULL;
		rc = loop_start(io, &lp);
		if (!rc)
			best = io->loops[io->nloops++] = lp;
		else if (best)
			rc = 0; /* run on the loops we have */
	}
	if (best)
		best->ntasks++;
	pthread_mutex_unlock(&io->lock);
	*out = best;
	return best ? 0 : rc;
}

static void submit(lc__io_loop_t *lp, cmd_t *c)
{
	if (on_loop(lp)) {
		cmd_apply(lp, c);
		return;
	}
	pthread_mutex_lock(&lp->lock);
	*lp->cmds_tail = c;
	lp->cmds_tail = &c->next;
	pthread_mutex_unlock(&lp->lock);
	ring(lp);
	pthread_mutex_lock(&lp->lock);
	while (!c->done)
		pthread_cond_wait(&lp->cond, &lp->lock);
	pthread_mutex_unlock(&lp->lock);
}

/* ---- tasks ---- */

int lc__io_attach(lc_ctx_t *ctx, lc__io_task_t *t, const lc__io_task_ops_t *ops)
{
	struct lc__io *io;
	lc__io_loop_t *lp = NULL;
	int rc = io_get(ctx, &io);
	if (!rc)
		rc = pick_loop(io, &lp);
	if (rc)
		return rc;
	t->ops = ops;
	t->loop = lp;
	cmd_t c = {.task = t};
	submit(lp, &c);
	if (c.rc) {
		pthread_mutex_lock(&io->lock);
		lp->ntasks--;
		pthread_mutex_unlock(&io->lock);
		t->loop = NULL;
	}
	return c.rc;
}

void lc__io_detach(lc__io_task_t *t, void (*fn)(lc__io_task_t *t, void *arg), void *arg)
{
	lc__io_loop_t *lp = t->loop;
	if (!lp)
		return;
	cmd_t c = {.fn = fn, .task = t, .arg = arg, .detach = true};
	submit(lp, &c);
	pthread_mutex_lock(&lp->lock);
	for (lc__io_task_t **pp = &lp->kicks; *pp; pp = &(*pp)->kick_next) {
		if (*pp == t) {
			*pp = t->kick_next;
			break;
		}
	}
	pthread_mutex_unlock(&lp->lock);
	pthread_mutex_lock(&lp->io->lock);
	lp->ntasks--;
	pthread_mutex_unlock(&lp->io->lock);
	t->loop = NULL;
}

void lc__io_call(lc__io_task_t *t, void (*fn)(lc__io_task_t *t, void *arg), void *arg)
{
	cmd_t c = {.fn = fn, .task = t, .arg = arg};
	submit(t->loop, &c);
}

void lc__io_kick(lc__io_task_t *t)
{
	lc__io_loop_t *lp = t->loop;
	if (atomic_exchange(&t->kicked, 1))
		return;
	pthread_mutex_lock(&lp->lock);
	t->kick_next = lp->kicks;
	lp->kicks = t;
	/* Ring only a loop that set its wait (wait_ms, under this lock): an
	 * awake one takes the kick before it waits again (wait_ms sees the list
	 * and does not sleep). A task kicked while the loop is in it (a posting
	 * thread that found its lock held) so costs no doorbell write, read and
	 * extra epoll_wait. */
	bool asleep = atomic_load(&lp->asleep) != 0;
	pthread_mutex_unlock(&lp->lock);
	if (asleep && !on_loop(lp))
		ring(lp);
}

int lc__io_fd_add(lc__io_task_t *t, lc__io_fd_t *f, int fd, uint32_t events, uint32_t tag)
{
	f->task = t;
	f->fd = fd;
	f->tag = tag;
	struct epoll_event e = {.events = events, .data.ptr = f};
	return epoll_ctl(t->loop->epfd, EPOLL_CTL_ADD, fd, &e) ? -errno : 0;
}

void lc__io_fd_del(lc__io_task_t *t, lc__io_fd_t *f)
{
	lc__io_loop_t *lp = t->loop;
	if (!lp)
		return; /* never attached (a test driving a task by hand) */
	epoll_ctl(lp->epfd, EPOLL_CTL_DEL, f->fd, NULL);
	/* Events of the wait being dispatched may still name f. */
	for (int i = lp->iev + 1; i < lp->nev; i++)
		if (lp->ev[i].data.ptr == f)
			lp->ev[i].data.ptr = NULL;
}

int lc__io_nthreads(lc_ctx_t *ctx)
{
	pthread_mutex_lock(&ctx->objs_lock);
	struct lc__io *io = ctx->io;
	pthread_mutex_unlock(&ctx->objs_lock);
	if (!io)
		return 0;
	pthread_mutex_lock(&io->lock);
	int n = io->nloops;
	pthread_mutex_unlock(&io->lock);
	return n;
}

void lc__io_destroy(lc_ctx_t *ctx)
{
	struct lc__io *io = ctx->io;
	if (!io)
		return;
	for (int i = 0; i < io->nloops; i++)
		loop_stop(io->loops[i]);
	pthread_mutex_destroy(&io->lock);
	free(io);
	ctx->io = NULL;
}

/* ---- timers ---- */

int lc__io_timer_loop(lc_ctx_t *ctx, const lc__io_task_t *t, lc__io_loop_t **out)
{
	struct lc__io *io;
	if (t && t->loop) {
		*out = t->loop;
		return 0;
	}
	int rc = io_get(ctx, &io);
	if (rc)
		return rc;
	/* Placement counts tasks: a timer user does not, it is light. */
	rc = pick_loop(io, out);
	if (!rc) {
		pthread_mutex_lock(&io->lock);
		(*out)->ntasks--;
		pthread_mutex_unlock(&io->lock);
	}
	return rc;
}

int lc__io_timer_arm(lc__io_loop_t *lp, lc__io_timer_t *tm, uint64_t deadline_ns)
{
	tm->loop = lp;
	pthread_mutex_lock(&lp->lock);
	int rc = lc__heap_insert(&lp->timers, &tm->node, deadline_ns);
	/* Ring only a loop asleep past this deadline: most deadlines lie
	 * beyond the wait already set. */
	bool wake = !rc && deadline_ns < atomic_load(&lp->asleep);
	pthread_mutex_unlock(&lp->lock);
	if (wake && !on_loop(lp))
		ring(lp);
	return rc;
}

void lc__io_timer_cancel(lc__io_timer_t *tm)
{
	lc__io_loop_t *lp = tm->loop;
	if (!lp)
		return;
	pthread_mutex_lock(&lp->lock);
	if (lc__heap_linked(&tm->node))
		lc__heap_remove(&lp->timers, &tm->node);
	else
		while (lp->firing == tm && !on_loop(lp))
			pthread_cond_wait(&lp->cond, &lp->lock);
	pthread_mutex_unlock(&lp->lock);
}

static void alarm_fire(lc__io_timer_t *tm, uint64_t now)
{
	lc__io_alarm_t *a = LC__CONTAINER_OF(tm, lc__io_alarm_t, tm);
	(void)now;
	atomic_store(&a->armed, false); /* before the kick: a later set arms anew */
	lc__io_kick(a->task);
}

void lc__io_alarm_init(lc__io_alarm_t *a, lc__io_task_t *t)
{
	*a = (lc__io_alarm_t){.task = t};
	a->tm.fire = alarm_fire;
	atomic_init(&a->armed, false);
}

void lc__io_alarm_set(lc__io_alarm_t *a, uint64_t deadline_ns)
{
	if (atomic_exchange(&a->armed, true))
		return;
	if (lc__io_timer_arm(a->task->loop, &a->tm, deadline_ns)) {
		atomic_store(&a->armed, false);
		lc__io_kick(a->task); /* no memory for the heap: look at once */
	}
}

void lc__io_alarm_cancel(lc__io_alarm_t *a)
{
	lc__io_timer_cancel(&a->tm);
}

void lc__io_timer_quiesce(lc__io_loop_t *lp)
{
	if (on_loop(lp))
		return;
	pthread_mutex_lock(&lp->lock);
	while (lp->firing)
		pthread_cond_wait(&lp->cond, &lp->lock);
	pthread_mutex_unlock(&lp->lock);
}
