/* The I/O core: tasks on bounded loops, kicks from other threads, fd events,
 * deadlines, synchronous calls and detach. Real threads, real eventfds. */
#include <pthread.h>
#include <setjmp.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kicks_and_events_reach_the_task),
		cmocka_unit_test(a_deadline_brings_service_without_a_kick),
		cmocka_unit_test(calls_and_detach_run_on_the_loop_thread_and_wait),
		cmocka_unit_test(threads_are_bounded_and_tasks_spread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
