/* The engine of a context's ucx transport: the UCP context and worker,
 * their task on the I/O core (progress, commands, P's and D's periodic
 * work), starting and stopping them, and the per-context state (ops init
 * and fini). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/io/io.h"
#include "transport/ucx/ucx_int.h"

static bool uc_busy(ustate_t *st)
{
	for (uconn_t *uc = st->conns; uc; uc = uc->next) {
		if (uc->ops.next != &uc->ops)
			return true;
		pthread_mutex_lock(&uc->lock); /* in_head is written by posters */
		bool queued = uc->in_head != NULL;
		pthread_mutex_unlock(&uc->lock);
		if (queued)
			return true;
	}
	for (sconn_t *sc = st->sconns; sc; sc = sc->next)
		if (sc->leases)
			return true;
	return st->reqs > 0 || st->dead_leases;
}

static void service(ustate_t *st, uint64_t now)
{
	lc__ucx_send_service(st, now);
	lc__ucx_recv_service(st, now);
	if (now >= st->next_prune) {
		lc__ucx_prune_maps(st);
		st->next_prune = now + 1000000000ull;
	}
}

/* How long the task may sleep once the worker is armed. */
static uint64_t idle_ns(ustate_t *st, bool busy)
{
	bool soon = busy || st->connreqs;
	for (uconn_t *uc = st->conns; uc && !soon; uc = uc->next)
		soon = uc->state == UC_CONNECTING;
	for (sconn_t *sc = st->sconns; sc && !soon; sc = sc->next)
		soon = sc->rejected;
	return (soon ? 2 : 100) * 1000000ull;
}

/* The task's service on its loop thread: commands, UCX progress, P's and
 * D's periodic work. It asks to run again at once while it has work and saw
 * activity in the last SPIN_NS, else arms the worker (whose fd then wakes
 * the loop) and sleeps until idle_ns() passes. */
static uint64_t task_service(lc__io_task_t *t, uint64_t now)
{
	ustate_t *st = lc__ucx_task_state(t);
	if (!st->fd_added) {
		if (lc__io_fd_add(t, &st->wfd, st->worker_fd, EPOLLIN, 0))
			LC__WARN("ucx: watching the worker's fd: %s", strerror(errno));
		st->fd_added = true; /* without it, the 2 / 100 ms polls carry on */
	}
	bool active = lc__ucx_run_cmds(st);
	unsigned n = 0;
	for (int i = 0; i < 64; i++) {
		unsigned k = ucp_worker_progress(st->worker);
		if (!k)
			break;
		n += k;
	}
	now = lc__now_ns();
	if (n || active)
		st->last_activity = now;
	service(st, now);
	bool busy = uc_busy(st);
	if (busy && now - st->last_activity < SPIN_NS)
		return now;
	pthread_mutex_lock(&st->lock);
	bool queued = st->cmd_head != NULL;
	pthread_mutex_unlock(&st->lock);
	if (queued || ucp_worker_arm(st->worker) == UCS_ERR_BUSY)
		return now;
	return now + idle_ns(st, busy);
}

static void task_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	(void)t, (void)f, (void)events, (void)now; /* service() progresses */
}

static const lc__io_task_ops_t task_ops = {
	.name = "ucx",
	.on_event = task_event,
	.service = task_service,
};

/* Release the engine's UCX objects and reset it for a later start. */
static void engine_free(ustate_t *st)
{
	if (st->worker)
		ucp_worker_destroy(st->worker);
	st->worker = NULL;
	lc__ucx_send_free(st); /* no callback can come any more */
	lc__ucx_recv_free(st);
	if (st->uctx)
		ucp_cleanup(st->uctx);
	st->uctx = NULL;
	while (st->cmd_head) { /* only if the engine failed to start */
		cmd_t *c = st->cmd_head;
		st->cmd_head = c->next;
		free(c);
	}
	st->cmd_tail = NULL;
	st->worker_fd = -1;
	st->fd_added = false;
	st->reqs = 0;
	st->last_activity = st->next_prune = 0;
}

/* UCP context and worker, and their task on the I/O core; under life_lock. */
static int engine_start(ustate_t *st)
{
	ucp_config_t *cfg;
	ucs_status_t s;
	int rc = lc__ucx_dl_load();
	if (rc)
		return rc;
	s = ucp_config_read(NULL, NULL, &cfg); /* UCX_TLS and friends */
	if (s != UCS_OK)
		goto fail_ucs;
	/* RMA only in put mode: with UCP_FEATURE_RMA a worker installs UCX's
	 * software put/get handlers, which copy to and from whatever address a
	 * connected peer names, before any layercake message is checked. */
	st->put_mode = !lc__ucx_data_mode_am(st->ctx);
	st->allow_sw_rma = lc__ucx_allow_sw_rma(st->ctx);
	ucp_params_t p = {
		.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
		.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
			    (st->put_mode ? UCP_FEATURE_RMA : 0),
		.name = "layercake",
	};
	s = ucp_init(&p, cfg, &st->uctx);
	ucp_config_release(cfg);
	if (s != UCS_OK)
		goto fail_ucs;
	/* UCX with CUDA (docs/gpu.md): which memory UCX moves itself. A
	 * context that cannot say moves host memory only. */
	ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
	st->memory_types = ucp_context_query(st->uctx, &ca) == UCS_OK
				   ? ca.memory_types
				   : UCS_BIT(UCS_MEMORY_TYPE_HOST);
	st->cuda_direct = lc__ucx_moves_kind(st->memory_types, LC_MEM_KIND_CUDA);
	char types[96];
	lc__ucx_mem_types_str(st->memory_types, types, sizeof types);
	LC__INFO("ucx: memory types %s: CUDA device memory %s", types,
		 st->cuda_direct ? "moved by UCX" : "staged through the host ring");
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};
	s = ucp_worker_create(st->uctx, &wp, &st->worker);
	if (s != UCS_OK || lc__ucx_register_handlers(st, &s))
		goto fail_ucs;
	s = ucp_worker_get_efd(st->worker, &st->worker_fd);
	if (s != UCS_OK)
		goto fail_ucs;
	rc = lc__io_attach(st->ctx, &st->task, &task_ops);
	if (rc)
		goto fail;
	st->running = true;
	return 0;
fail_ucs:
	LC__WARN("ucx: initialising UCX: %s", ucs_status_string(s));
	rc = lc__ucx_map_status(s, false);
	if (rc == LC_ERR_IO || rc == -ENOTSUP || rc == LC_ERR_UNREACHABLE)
		rc = LC_ERR_NO_TRANSPORT;
fail:
	engine_free(st);
	return rc;
}

/* At detach, on the loop thread: release what is left (normally nothing). */
static void state_teardown(ustate_t *st)
{
	lc__ucx_recv_teardown(st);
	uint64_t until = lc__now_ns() + CLOSE_WAIT_NS;
	while (st->reqs > 0 && lc__now_ns() < until)
		ucp_worker_progress(st->worker);
	if (st->reqs > 0)
		LC__WARN("ucx: %d UCX requests still outstanding at teardown", st->reqs);
	lc__ucx_maps_free(st);
}

/* On the loop thread, the task's last call: the commands still queued, then
 * the teardown, while UCX is still called from that thread alone. */
static void task_detach(lc__io_task_t *t, void *arg)
{
	ustate_t *st = lc__ucx_task_state(t);
	(void)arg;
	lc__ucx_run_cmds(st);
	if (st->fd_added)
		lc__io_fd_del(t, &st->wfd);
	state_teardown(st);
}

/* Detach the task and free the engine; under life_lock. */
static void engine_stop(ustate_t *st)
{
	lc__io_detach(&st->task, task_detach, NULL);
	engine_free(st);
	st->running = false;
}
/* ops->init: the context's ucx slot. Cheap: UCX starts at first use. */
int lc__ucx_init(lc_ctx_t *ctx, void **state)
{
	ustate_t *st = calloc(1, sizeof *st);
	if (!st)
		return -ENOMEM;
	st->ctx = ctx;
	st->worker_fd = -1;
	st->orphans.next = st->orphans.prev = &st->orphans;
	pthread_mutex_init(&st->life_lock, NULL);
	pthread_mutex_init(&st->lock, NULL);
	*state = st;
	return 0;
}

/* ops->fini: every listener and connection of the context is closed. */
void lc__ucx_fini(lc_ctx_t *ctx, void *state)
{
	ustate_t *st = state;
	(void)ctx;
	if (st->running) /* only if a close was missed: never expected */
		engine_stop(st);
	pthread_mutex_destroy(&st->lock);
	pthread_mutex_destroy(&st->life_lock);
	free(st);
}

/* The state of ctx with a reference on its engine, which `start` starts if
 * it is not running (without it: -ENOENT). */
int lc__ucx_state_get(void *state, bool start, bool listener, ustate_t **out)
{
	ustate_t *st = state;
	int rc = 0;
	if (!st)
		return -EINVAL;
	pthread_mutex_lock(&st->life_lock);
	if (!st->running)
		rc = start ? engine_start(st) : -ENOENT;
	if (!rc) {
		st->refs++;
		if (listener)
			st->nlisteners++;
	}
	pthread_mutex_unlock(&st->life_lock);
	if (!rc)
		*out = st;
	return rc;
}

int lc__ucx_detected(void *state, uint64_t *memory_types, bool *cuda_direct)
{
	ustate_t *st = state;
	pthread_mutex_lock(&st->life_lock);
	bool running = st->running;
	if (running) {
		*memory_types = st->memory_types;
		*cuda_direct = st->cuda_direct;
	}
	pthread_mutex_unlock(&st->life_lock);
	return running ? 0 : -ENOENT;
}

void lc__ucx_state_put(ustate_t *st, bool listener)
{
	pthread_mutex_lock(&st->life_lock);
	if (listener)
		st->nlisteners--;
	if (--st->refs == 0)
		engine_stop(st);
	pthread_mutex_unlock(&st->life_lock);
}
