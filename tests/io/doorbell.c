/*
 * The I/O core's doorbell under contention: threads call into a loop
 * (lc__io_call: queue a command, ring, wait for it) and kick it while it
 * dispatches doorbell events. A ring landing between the loop's read of the
 * doorbell and its re-arming must not be lost: once it was (the re-arm came
 * first), every later ring was skipped and a caller slept forever; the
 * watchdog then fails this test.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "transport/io/io.h"

#define THREADS 4

static lc__io_task_t task;
static _Atomic uint64_t calls;
static _Atomic int stop;

static void on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	(void)t, (void)f, (void)events, (void)now;
}

static uint64_t service(lc__io_task_t *t, uint64_t now)
{
	(void)t, (void)now;
	return 0;
}

static const lc__io_task_ops_t ops = {.on_event = on_event, .service = service};

static void count(lc__io_task_t *t, void *arg)
{
	(void)t, (void)arg;
	atomic_fetch_add(&calls, 1);
}

static void *caller(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		lc__io_call(&task, count, NULL);
		lc__io_kick(&task);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 5;
	lc_ctx_t *ctx;
	pthread_t th[THREADS];
	tu_watchdog(seconds + 30);
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc__io_attach(ctx, &task, &ops));
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, caller, NULL);
	sleep(seconds);
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	lc__io_detach(&task, NULL, NULL);
	lc_ctx_destroy(ctx);
	printf("io doorbell: %llu calls in %u s\n", (unsigned long long)atomic_load(&calls),
	       seconds);
	return 0;
}
