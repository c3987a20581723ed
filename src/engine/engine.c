/*
 * The engine object: creation (configuration read once from the context's
 * table), destruction, metrics and the post hook. The rest of the engine is
 * one file per job; docs/engine.md has the table, engine_int.h the state
 * and the threading contract.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/ctx.h"
#include "core/params.h"
#include "engine/engine_int.h"

static uint64_t cfg_ns(lc_ctx_t *ctx, enum lc__config_field field, uint64_t unit_ns)
{
	return (uint64_t)lc__ctx_cfg(ctx, field) * unit_ns;
}

/* The knobs are read once: an engine keeps the values it was created with,
 * whatever lc_ctx_config_set() changes later. */
static void read_config(lc_engine_t *e, lc_ctx_t *ctx)
{
	const uint64_t us = 1000ull, ms = 1000000ull;
	e->interval = lc__ctx_cfg(ctx, LC__CFG_layerwise_interval);
	e->ttl_ns = cfg_ns(ctx, LC__CFG_session_ttl_ms, ms);
	e->layer_ns = cfg_ns(ctx, LC__CFG_layer_timeout_ms, ms);
	e->metadata_ns = cfg_ns(ctx, LC__CFG_metadata_timeout_ms, ms);
	e->transfer_ns = cfg_ns(ctx, LC__CFG_transfer_timeout_ms, ms);
	e->bootstrap_ns = cfg_ns(ctx, LC__CFG_bootstrap_timeout_ms, ms);
	e->waiting_ns = cfg_ns(ctx, LC__CFG_waiting_timeout_ms, ms);
	e->spin_ns = cfg_ns(ctx, LC__CFG_poll_spin_us, us);
	e->sleep_ns = cfg_ns(ctx, LC__CFG_poll_sleep_us, us);
	e->inline_submit = lc__ctx_cfg(ctx, LC__CFG_inline_submit) != 0;
	e->checksum = lc__ctx_cfg(ctx, LC__CFG_room_checksum) != 0;
	e->coalesce_ns = cfg_ns(ctx, LC__CFG_ack_coalesce_us, us);
	e->held_chunks_max = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_p_room_held_chunks_max);
	e->held_pages_max = (uint64_t)lc__ctx_cfg(ctx, LC__CFG_p_held_pages_max);
}

/* The pool sizes chunk_add checks P's ids against. */
static void pool_sizes(lc_engine_t *e)
{
	e->pages_buf = e->slots_buf = UINT32_MAX;
	for (uint32_t i = 0; i < e->layout->nbuf; i++) {
		const lc_buffer_t *b = &e->layout->bufs[i];
		uint64_t items = b->length / b->item_len;
		bool state = b->kind == LC_BUFFER_STATE;
		uint32_t *which = state ? &e->slots_buf : &e->pages_buf;
		uint64_t *max = state ? &e->max_slots : &e->max_pages;
		if (*which == UINT32_MAX || items < *max) {
			*which = i;
			*max = items;
		}
	}
}

static int check_params(const lc_engine_params_t *params)
{
	if (!params || LC__PARAMS_SHORT(params, lc_engine_params_t, layout) || !params->layout)
		return LC__FAIL(-EINVAL, "lc_engine_create: %s",
				!params ? "params is NULL (the layout is required)"
				: LC__PARAMS_SHORT(params, lc_engine_params_t, layout)
					? LC__PARAMS_SHORT_TEXT("params", lc_engine_params_t)
					: "params->layout is required");
	for (uint32_t i = 0; i < params->layout->nbuf; i++)
		if (!params->layout->bufs[i].base)
			return LC__FAIL(-EINVAL,
					"engine: buffer %u of the layout has no base address", i);
	return 0;
}

int lc_engine_create(lc_ctx_t *ctx, const lc_engine_params_t *params, lc_engine_t **out)
{
	lc_engine_t *e;
	int rc;
	lc_last_error_clear();
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_engine_create: %s is NULL", ctx ? "out" : "ctx");
	if ((rc = check_params(params)))
		return rc;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	LC__PARAMS_COPY(&e->params, params);
	e->params.size = sizeof(e->params);
	e->params.layout = NULL;
	e->params.name = NULL;
	lc__reason(e->name, sizeof(e->name), "%s", params->name ? params->name : "engine");
	e->ctx = ctx;
	e->evfd = -1;
	e->inbox_tail = &e->inbox;
	e->batch_tail = &e->batch_head;
	read_config(e, ctx);
	lc__engine_gpu_init(e);

	if ((rc = lc__layout_clone(params->layout, &e->layout)))
		goto fail_free;
	pool_sizes(e);
	if ((rc = lc__steps_init(&e->steps, params->cache_word, params->aux_word)))
		goto fail_layout;
	if ((rc = lc__room_table_init(&e->rooms)))
		goto fail_steps;
	lc__idmap_init(&e->wreq_ids, 0);
	if ((rc = lc_cq_create(ctx, &e->cq)))
		goto fail_idmap;
	lc__cq_set_arm_mode(e->cq);
	e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (e->evfd < 0) {
		rc = -errno;
		goto fail_cq;
	}
	if ((rc = lc__notify_init(&e->notify))) {
		close(e->evfd);
		goto fail_cq;
	}
	e->rooms.notify = &e->notify;
	pthread_mutex_init(&e->lock, NULL);
	if ((rc = -pthread_create(&e->thread, NULL, lc__engine_thread_main, e)))
		goto fail_lock;
	e->started = true;
	LC__INFO("engine %s: %u buffers, %u layers, interval %lld", e->name, e->layout->nbuf,
		 e->layout->layers, (long long)e->interval);
	*out = e;
	return 0;

fail_lock:
	pthread_mutex_destroy(&e->lock);
	lc__notify_fini(&e->notify);
	close(e->evfd);
fail_cq:
	lc_cq_destroy(e->cq);
fail_idmap:
	lc__idmap_fini(&e->wreq_ids);
	lc__room_table_fini(&e->rooms);
fail_steps:
	lc__steps_fini(&e->steps);
fail_layout:
	lc_layout_destroy(e->layout);
fail_free:
	lc__engine_gpu_fini(e);
	free(e);
	return rc;
}

/* With the engine thread joined: every unfinished room fails (its
 * destinations are told, on this thread), then every task goes. */
static void stop_rooms_and_tasks(lc_engine_t *e)
{
	pthread_mutex_lock(&e->lock);
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(&e->rooms, &it));)
		if (!lc__room_final(r))
			lc__engine_fail_room(e, r, LC_FAIL_STOPPED, "engine %s stopped", e->name);
	lc__engine_deliver_notes(e);
	lc__task_list_free(e, e->tasks);
	lc__task_list_free(e, e->inbox);
	lc__task_list_free(e, e->batch_head);
	e->tasks = e->inbox = e->batch_head = NULL;
	pthread_mutex_unlock(&e->lock);
}

void lc_engine_destroy(lc_engine_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_mutex_unlock(&e->lock);
	lc__engine_wake(e);
	pthread_join(e->thread, NULL);
	e->started = false;

	stop_rooms_and_tasks(e);
	for (size_t i = 0; i < e->sessions.count; i++)
		lc__esession_free(e->sessions.items[i]->owner);
	lc__session_table_fini(&e->sessions);
	lc_cq_destroy(e->cq);
	close(e->evfd);
	lc__notify_fini(&e->notify);
	pthread_mutex_destroy(&e->lock);
	lc__room_table_fini(&e->rooms);
	lc__engine_gpu_fini(e);
	lc__steps_fini(&e->steps);
	lc_layout_destroy(e->layout);
	lc__idmap_fini(&e->wreq_ids);
	free(e->postlog);
	free(e->notes);
	free(e);
}

lc__notify_t *lc__engine_notify(lc_engine_t *e)
{
	return &e->notify;
}

void lc__engine_set_post_hook(lc_engine_t *e, lc__post_hook_fn fn, void *arg)
{
	pthread_mutex_lock(&e->lock);
	e->post_hook = fn;
	e->post_hook_arg = arg;
	pthread_mutex_unlock(&e->lock);
}

void lc__engine_set_notes_hook(lc_engine_t *e, lc__notes_hook_fn fn, void *arg)
{
	pthread_mutex_lock(&e->lock);
	e->notes_hook = fn;
	e->notes_hook_arg = arg;
	pthread_mutex_unlock(&e->lock);
}

int lc_engine_metrics(lc_engine_t *e, lc_engine_metrics_t *out)
{
	if (!e || !out || out->size < sizeof(size_t))
		return LC__FAIL(-EINVAL, "lc_engine_metrics: %s",
				!e     ? "engine is NULL"
				: !out ? "out is NULL"
				       : "out->size is not set (sizeof(lc_engine_metrics_t))");
	lc_engine_metrics_t m;
	pthread_mutex_lock(&e->lock);
	m = e->m;
	const lc__room_metrics_t *rm = &e->rooms.metrics;
	m.rooms_opened = rm->opened;
	m.rooms_succeeded = rm->succeeded;
	m.rooms_failed = rm->failed;
	m.rooms_expired_unread = rm->expired_unread;
	m.rooms_active = rm->opened - rm->succeeded - rm->failed;
	m.room_latency = rm->latency;
	m.records_refused = atomic_load(&e->refused[0]) + atomic_load(&e->refused[1]);
	m.chunks_held = e->held_chunks;
	m.pages_held = e->held_pages;
	pthread_mutex_unlock(&e->lock);
	size_t n = LC__MIN(out->size, sizeof(m));
	m.size = n;
	memcpy(out, &m, n);
	return 0;
}

int lc_engine_failed_by_reason(lc_engine_t *e, int reason, uint64_t *out)
{
	if (!e || !out)
		return LC__FAIL(-EINVAL, "lc_engine_failed_by_reason: %s is NULL",
				!e ? "engine" : "out");
	if (reason < 0 || reason >= LC_FAIL_REASON_COUNT)
		return LC__FAIL(-ERANGE, "lc_engine_failed_by_reason: reason %d is not in 0..%d",
				reason, LC_FAIL_REASON_COUNT - 1);
	pthread_mutex_lock(&e->lock);
	*out = e->rooms.metrics.failed_by_reason[reason];
	pthread_mutex_unlock(&e->lock);
	return 0;
}
