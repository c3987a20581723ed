/*
 * The sim copy engine (copier.h, LC_MEM_KIND_SIM): one worker thread per
 * context, pread/pwrite on the memfd behind the PROT_NONE range, in queue
 * order, with the knobs sim_latency_us (added to each copy) and sim_gbps
 * (a bandwidth the copies share; 0 unlimited). Landings (from_host_now)
 * run on the caller's thread, with the same knobs.
 *
 * Threading: `lock` guards the queue and the counters; the worker runs the
 * copies and the `done` callbacks with no lock held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/copier.h"
#include "core/ctx.h"
#include "core/sim.h"

typedef struct job {
	void *host;
	uint64_t off;
	int fd;
	int write; /* 1: device <- host */
	size_t len;
	lc__copy_done_fn done;
	void *arg;
	struct job *next;
} job_t;

typedef struct sim_copier {
	lc__copier_t base;
	lc_ctx_t *ctx;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	job_t *head, *tail;
	uint64_t queued, finished;
	bool stop;
	uint64_t latency_ns, bytes_per_s;
	uint64_t busy_until_ns; /* the bandwidth model's clock */
} sim_copier_t;

static void sleep_until(uint64_t t)
{
	struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* One copy with the knobs' latency and bandwidth: 0 or -errno. */
static int copy_one(sim_copier_t *s, int fd, void *host, size_t len, uint64_t off, int write)
{
	int rc = lc__sim_rw(fd, host, len, off, write);
	uint64_t now = lc__now_ns(), t = now + s->latency_ns;
	if (s->bytes_per_s) {
		pthread_mutex_lock(&s->lock);
		uint64_t start = LC__MAX(now, s->busy_until_ns);
		s->busy_until_ns = start + (uint64_t)((double)len * 1e9 / (double)s->bytes_per_s);
		t = LC__MAX(t, s->busy_until_ns);
		pthread_mutex_unlock(&s->lock);
	}
	if (t > now)
		sleep_until(t);
	if (rc) {
		LC__COUNT(s->ctx, device_copy_errors);
		LC__WARN("sim copy of %zu bytes failed: %s", len, lc_strerror(rc));
	} else {
		LC__COUNT(s->ctx, device_copies);
		LC__COUNT_ADD(s->ctx, device_copy_bytes, len);
	}
	return rc;
}

static void run_job(sim_copier_t *s, job_t *j)
{
	j->done(j->arg, copy_one(s, j->fd, j->host, j->len, j->off, j->write));
}

static int from_host_now(lc__copier_t *c, void *dev, const void *host, size_t len)
{
	uint64_t off;
	int fd = lc__sim_lookup(dev, len, &off);
	if (fd < 0)
		return LC_ERR_MEM_KIND;
	return copy_one((sim_copier_t *)c, fd, (void *)(uintptr_t)host, len, off, 1);
}

static void *worker(void *arg)
{
	sim_copier_t *s = arg;
	pthread_setname_np(pthread_self(), "lc-sim-copy");
	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&s->work, &s->lock);
		if (!s->head)
			break;
		job_t *j = s->head;
		s->head = j->next;
		if (!s->head)
			s->tail = NULL;
		pthread_mutex_unlock(&s->lock);
		run_job(s, j);
		free(j);
		pthread_mutex_lock(&s->lock);
		s->finished++;
		pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static int queue(lc__copier_t *c, void *host, const void *dev, size_t len, int write,
		 lc__copy_done_fn done, void *arg)
{
	sim_copier_t *s = (sim_copier_t *)c;
	uint64_t off;
	int fd = lc__sim_lookup(dev, len, &off);
	if (fd < 0)
		return LC_ERR_MEM_KIND; /* not simulated device memory */
	job_t *j = malloc(sizeof *j);
	if (!j)
		return -ENOMEM;
	*j = (job_t){host, off, fd, write, len, done, arg, NULL};
	pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->next = j;
	else
		s->head = j;
	s->tail = j;
	s->queued++;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int to_host(lc__copier_t *c, void *host, const void *dev, size_t len, lc__copy_done_fn done,
		   void *arg)
{
	return queue(c, host, dev, len, 0, done, arg);
}

static int from_host(lc__copier_t *c, void *dev, const void *host, size_t len,
		     lc__copy_done_fn done, void *arg)
{
	return queue(c, (void *)(uintptr_t)host, dev, len, 1, done, arg);
}

static int drain(lc__copier_t *c, uint64_t deadline_ns)
{
	sim_copier_t *s = (sim_copier_t *)c;
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	uint64_t target = s->queued;
	while (s->finished < target && !rc) {
		if (!deadline_ns) {
			pthread_cond_wait(&s->idle, &s->lock);
			continue;
		}
		struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
				      (long)(deadline_ns % 1000000000ull)};
		if (pthread_cond_timedwait(&s->idle, &s->lock, &ts) == ETIMEDOUT &&
		    s->finished < target)
			rc = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static void destroy(lc__copier_t *c)
{
	sim_copier_t *s = (sim_copier_t *)c;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL); /* runs every queued copy first */
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->idle);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static const lc__copier_ops_t sim_ops = {
	.name = "sim",
	.to_host = to_host,
	.from_host = from_host,
	.dev_to_dev = NULL,
	.drain = drain,
	.destroy = destroy,
	.from_host_now = from_host_now,
};

int lc__copy_sim_create(lc_ctx_t *ctx, lc__copier_t **out)
{
	sim_copier_t *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->base = (lc__copier_t){.ops = &sim_ops, .kind = LC_MEM_KIND_SIM, .device = 0};
	s->ctx = ctx;
	s->latency_ns = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_sim_latency_us) * 1000;
	s->bytes_per_s = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_sim_gbps) * 1000000000ull;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->idle, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&s->work, NULL);
	int rc = -pthread_create(&s->thread, NULL, worker, s);
	if (rc) {
		pthread_cond_destroy(&s->work);
		pthread_cond_destroy(&s->idle);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return rc;
	}
	*out = &s->base;
	return 0;
}
