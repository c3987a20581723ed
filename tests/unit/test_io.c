/* The I/O core: tasks on bounded loops, kicks from other threads, fd events,
 * deadlines, synchronous calls and detach. Real threads, real eventfds. */
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "transport/io/io.h"

typedef struct probe {
	lc__io_task_t task;
	lc__io_fd_t fdh;
	int efd;
	_Atomic int services, events, calls, detached;
	_Atomic uint64_t deadline_ns; /* what service() returns */
	pthread_t thread;             /* the loop thread seen by service() */
} probe_t;

static void probe_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t ev, uint64_t now)
{
	probe_t *p = LC__CONTAINER_OF(t, probe_t, task);
	uint64_t v;
	assert_int_equal(read(f->fd, &v, sizeof v), sizeof v);
	atomic_fetch_add(&p->events, 1);
}

static uint64_t probe_service(lc__io_task_t *t, uint64_t now)
{
	probe_t *p = LC__CONTAINER_OF(t, probe_t, task);
	p->thread = pthread_self();
	atomic_fetch_add(&p->services, 1);
	return atomic_load(&p->deadline_ns);
}

static const lc__io_task_ops_t probe_ops = {
	.name = "probe", .on_event = probe_event, .service = probe_service};

static int wait_for(_Atomic int *v, int at_least)
{
	for (int i = 0; i < 5000 && atomic_load(v) < at_least; i++)
		usleep(1000);
	return atomic_load(v);
}

static lc_ctx_t *ctx_with_threads(const char *n)
{
	lc_ctx_t *ctx;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_ctx_config_set(ctx, "io_threads", n), 0);
	return ctx;
}

static void kicks_and_events_reach_the_task(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("2");
	probe_t p = {0};
	p.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_int_equal(lc__io_attach(ctx, &p.task, &probe_ops), 0);
	assert_true(wait_for(&p.services, 1) >= 1); /* attached tasks are serviced once */
	assert_int_equal(lc__io_fd_add(&p.task, &p.fdh, p.efd, EPOLLIN, 7), 0);
	int before = atomic_load(&p.services);
	lc__io_kick(&p.task);
	assert_true(wait_for(&p.services, before + 1) > before);
	uint64_t one = 1;
	assert_int_equal(write(p.efd, &one, sizeof one), sizeof one);
	assert_int_equal(wait_for(&p.events, 1), 1);
	assert_int_equal(p.fdh.tag, 7);
	lc__io_detach(&p.task, NULL, NULL);
	close(p.efd);
	lc_ctx_destroy(ctx);
}

static void a_deadline_brings_service_without_a_kick(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("1");
	probe_t p = {0};
	atomic_store(&p.deadline_ns, lc__now_ns() + 20 * 1000000ull);
	assert_int_equal(lc__io_attach(ctx, &p.task, &probe_ops), 0);
	assert_true(wait_for(&p.services, 1) >= 1);
	atomic_store(&p.deadline_ns, 0); /* after the timed service: none */
	assert_true(wait_for(&p.services, 2) >= 2);
	lc__io_detach(&p.task, NULL, NULL);
	lc_ctx_destroy(ctx);
}

static void on_loop_call(lc__io_task_t *t, void *arg)
{
	probe_t *p = arg;
	assert_true(pthread_equal(pthread_self(), p->thread));
	atomic_fetch_add(&p->calls, 1);
}

static void on_detach(lc__io_task_t *t, void *arg)
{
	probe_t *p = arg;
	atomic_fetch_add(&p->detached, 1);
	lc__io_fd_del(t, &p->fdh);
}

static void calls_and_detach_run_on_the_loop_thread_and_wait(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("1");
	probe_t p = {0};
	p.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_int_equal(lc__io_attach(ctx, &p.task, &probe_ops), 0);
	assert_true(wait_for(&p.services, 1) >= 1);
	assert_int_equal(lc__io_fd_add(&p.task, &p.fdh, p.efd, EPOLLIN, 0), 0);
	lc__io_call(&p.task, on_loop_call, &p);
	assert_int_equal(atomic_load(&p.calls), 1); /* synchronous */
	lc__io_detach(&p.task, on_detach, &p);
	assert_int_equal(atomic_load(&p.detached), 1);
	/* Detached: neither kicks nor events reach it any more. */
	int services = atomic_load(&p.services), events = atomic_load(&p.events);
	uint64_t one = 1;
	assert_int_equal(write(p.efd, &one, sizeof one), sizeof one);
	usleep(20000);
	assert_int_equal(atomic_load(&p.services), services);
	assert_int_equal(atomic_load(&p.events), events);
	close(p.efd);
	lc_ctx_destroy(ctx);
}

static void threads_are_bounded_and_tasks_spread(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("3");
	enum { N = 12 };
	probe_t p[N] = {0};
	for (int i = 0; i < N; i++)
		assert_int_equal(lc__io_attach(ctx, &p[i].task, &probe_ops), 0);
	for (int i = 0; i < N; i++)
		assert_true(wait_for(&p[i].services, 1) >= 1);
	assert_int_equal(lc__io_nthreads(ctx), 3);
	/* Least loaded first: each of the 3 loops got 4 of the 12 tasks. */
	int distinct = 0;
	for (int i = 0; i < N; i++) {
		int seen = 0;
		for (int j = 0; j < i; j++)
			seen |= pthread_equal(p[i].thread, p[j].thread);
		distinct += !seen;
	}
	assert_int_equal(distinct, 3);
	for (int i = 0; i < N; i++)
		lc__io_detach(&p[i].task, NULL, NULL);
	lc_ctx_destroy(ctx);
}

/* Timers (io.h): fire in deadline order on the loop thread; a cancelled
 * one never fires; a timer armed earlier than the loop's wait wakes it. */
typedef struct probe_timer {
	lc__io_timer_t tm;
	int index;
	_Atomic int *order; /* next slot of the firing order */
	int *fired_as;      /* where this one came in the order */
	uint64_t due, fired_at;
} probe_timer_t;

static void probe_fire(lc__io_timer_t *tm, uint64_t now)
{
	probe_timer_t *t = LC__CONTAINER_OF(tm, probe_timer_t, tm);
	t->fired_at = now;
	*t->fired_as = atomic_fetch_add(t->order, 1);
}

static void timers_fire_in_order_and_a_cancelled_one_never(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("1");
	lc__io_loop_t *lp = NULL;
	assert_int_equal(lc__io_timer_loop(ctx, NULL, &lp), 0);
	assert_non_null(lp);
	assert_int_equal(lc__io_nthreads(ctx), 1); /* started for the timers */
	enum { N = 8 };
	probe_timer_t t[N];
	int fired_as[N];
	_Atomic int order = 0;
	/* Armed latest first; the 60 ms one (index 5) is cancelled. */
	uint64_t now = lc__now_ns();
	for (int i = N - 1; i >= 0; i--) {
		t[i] = (probe_timer_t){.tm.fire = probe_fire,
				       .index = i,
				       .order = &order,
				       .fired_as = &fired_as[i],
				       .due = now + (uint64_t)(10 + 10 * i) * 1000000ull};
		fired_as[i] = -1;
		assert_int_equal(lc__io_timer_arm(lp, &t[i].tm, t[i].due), 0);
	}
	lc__io_timer_cancel(&t[5].tm);
	assert_int_equal(wait_for(&order, N - 1), N - 1);
	usleep(30000); /* past where the cancelled one would have fired */
	assert_int_equal(atomic_load(&order), N - 1);
	for (int i = 0; i < N; i++) /* returns once fire() is done with it */
		lc__io_timer_cancel(&t[i].tm);
	for (int i = 0, want = 0; i < N; i++) {
		if (i == 5) {
			assert_int_equal(fired_as[i], -1);
			continue;
		}
		assert_int_equal(fired_as[i], want++);
		assert_true(t[i].fired_at >= t[i].due);
	}
	/* A timer sooner than the loop's current wait (none) wakes it. */
	probe_timer_t late = {.tm.fire = probe_fire, .order = &order, .fired_as = &fired_as[0]};
	late.due = lc__now_ns() + 5 * 1000000ull;
	assert_int_equal(lc__io_timer_arm(lp, &late.tm, late.due), 0);
	assert_int_equal(wait_for(&order, N), N);
	lc__io_timer_cancel(&late.tm); /* fired already: nothing */
	lc_ctx_destroy(ctx);
}

/* Many tasks with deadlines far apart: each is serviced at its own, the
 * others not before theirs (the heap pops only what is due). */
static void many_task_deadlines_each_at_its_time(void **state)
{
	lc_ctx_t *ctx = ctx_with_threads("1");
	enum { N = 64 };
	probe_t *p = calloc(N, sizeof *p);
	assert_non_null(p);
	uint64_t now = lc__now_ns();
	for (int i = 0; i < N; i++)
		atomic_store(&p[i].deadline_ns, now + 60000000000ull); /* a minute */
	for (int i = 0; i < N; i++)
		assert_int_equal(lc__io_attach(ctx, &p[i].task, &probe_ops), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(wait_for(&p[i].services, 1), 1);
	/* One task asks for a service 10 ms from now by a kick. */
	atomic_store(&p[N / 2].deadline_ns, lc__now_ns() + 10000000ull);
	lc__io_kick(&p[N / 2].task);
	assert_int_equal(wait_for(&p[N / 2].services, 2), 2);
	atomic_store(&p[N / 2].deadline_ns, 0);
	assert_int_equal(wait_for(&p[N / 2].services, 3), 3); /* the timed one */
	usleep(20000);
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&p[i].services), i == N / 2 ? 3 : 1);
	for (int i = 0; i < N; i++)
		lc__io_detach(&p[i].task, NULL, NULL);
	free(p);
	lc_ctx_destroy(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kicks_and_events_reach_the_task),
		cmocka_unit_test(a_deadline_brings_service_without_a_kick),
		cmocka_unit_test(calls_and_detach_run_on_the_loop_thread_and_wait),
		cmocka_unit_test(threads_are_bounded_and_tasks_spread),
		cmocka_unit_test(timers_fire_in_order_and_a_cancelled_one_never),
		cmocka_unit_test(many_task_deadlines_each_at_its_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
