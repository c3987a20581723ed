/* Unit tests of the foundation: errors, config, grants, regions, completion
 * queues, descriptors, URL parsing. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "core/grant.h"
#include "core/histogram.h"
#include "core/region.h"
#include "layercake.h"
#include "transport/cq.h"
#include "transport/land.h"
#include "transport/transport.h"

static void error_names_and_texts_cover_library_and_errno_codes(void **state)
{
	(void)state;
	assert_string_equal(lc_err_name(LC_ERR_GRANT), "LC_ERR_GRANT");
	assert_string_equal(lc_err_name(-EINVAL), "LC_EINVAL");
	assert_string_equal(lc_err_name(0), "LC_OK");
	assert_string_equal(lc_err_name(-99999), "LC_UNKNOWN");
	assert_string_equal(lc_strerror(LC_ERR_EXPIRED), "deadline expired");
	/* errno values outside the table still get the C library's text */
	assert_string_equal(lc_strerror(-ECONNREFUSED), strerror(ECONNREFUSED));
	assert_non_null(lc_strerror(123456));
	/* the table as bindings read it: every code once, in table order */
	int code = 1, n = lc_err_count();
	assert_int_equal(n, 12 + 20); /* LC_ERRNO_CODES, LC_LIBRARY_CODES */
	assert_int_equal(lc_err_code(0, &code), 0);
	assert_int_equal(code, LC_OK);
	assert_int_equal(lc_err_code(n - 1, &code), 0);
	assert_int_equal(code, LC_ERR_MEM_KIND);
	for (int i = 0; i < n; i++) {
		assert_int_equal(lc_err_code(i, &code), 0);
		assert_string_not_equal(lc_err_name(code), "LC_UNKNOWN");
	}
	assert_int_equal(lc_err_code(n, &code), -ERANGE);
	assert_int_equal(lc_err_code(-1, &code), -ERANGE);
	assert_int_equal(lc_err_code(0, NULL), -EINVAL);
	assert_int_equal(lc_version_number(), 100);
	assert_string_equal(lc_version(), "0.1.0");
}

static void config_reads_environment_and_rejects_bad_values(void **state)
{
	(void)state;
	lc__config_t cfg;
	setenv("LAYERCAKE_TCP_LANES", "7", 1);
	setenv("LAYERCAKE_BATCH_TIMEOUT_MS", "abc", 1); /* malformed: ignored */
	setenv("LAYERCAKE_HEARTBEAT_MISSES", "0", 1);   /* below the minimum: ignored */
	lc__config_load(&cfg);
	assert_int_equal(LC__CFG(&cfg, tcp_lanes), 7);
	assert_int_equal(LC__CFG(&cfg, batch_timeout_ms), 30000);
	assert_int_equal(LC__CFG(&cfg, heartbeat_misses), 2);
	unsetenv("LAYERCAKE_TCP_LANES");
	unsetenv("LAYERCAKE_BATCH_TIMEOUT_MS");
	unsetenv("LAYERCAKE_HEARTBEAT_MISSES");

	lc_ctx_t *ctx;
	char buf[32];
	int64_t v;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_ctx_config_set(ctx, "tcp_lanes", "3"), 0);
	assert_int_equal(lc_ctx_config_get_int(ctx, "tcp_lanes", &v), 0);
	assert_int_equal(v, 3);
	assert_int_equal(lc_ctx_config_set(ctx, "tcp_lanes", "65"), -ERANGE);
	assert_int_equal(lc_ctx_config_set(ctx, "tcp_lanes", "3x"), -EINVAL);
	assert_int_equal(lc_ctx_config_set(ctx, "no_such_knob", "1"), -ENOENT);
	assert_int_equal(lc_ctx_config_get(ctx, "tcp_lanes", buf, sizeof buf), 1);
	assert_string_equal(buf, "3");
	assert_int_equal(lc_ctx_config_get(ctx, "tcp_lanes", buf, 1), -ENOSPC);
	for (int i = 0; i < lc_config_count(); i++) {
		const lc_config_info_t *c = lc_config_info(i);
		assert_non_null(c);
		assert_true(strncmp(c->env, "LAYERCAKE_", 10) == 0);
		assert_true(c->help[0] != '\0');
	}
	assert_null(lc_config_info(lc_config_count()));
	lc_ctx_destroy(ctx);
}

static void text_knobs_are_listed_read_from_the_environment_and_not_set(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	char buf[64];
	int64_t v;
	int found = 0;
	for (int i = 0; i < lc_config_count(); i++) {
		const lc_config_info_t *c = lc_config_info(i);
		if (!strcmp(c->name, "secret_dir") || !strcmp(c->name, "log") ||
		    !strcmp(c->name, "cuda_lib") || !strcmp(c->name, "advertise_host") ||
		    !strcmp(c->name, "status_schemes") || !strcmp(c->name, "shared_secret") ||
		    !strcmp(c->name, "shared_secret_file") || !strcmp(c->name, "ucx_lib")) {
			assert_int_equal(c->is_text, 1);
			found++;
		} else {
			assert_int_equal(c->is_text, 0);
		}
	}
	assert_int_equal(found, 8);
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	setenv("LAYERCAKE_SECRET_DIR", "/tmp/lc-keys", 1);
	assert_int_equal(lc_ctx_config_get(ctx, "secret_dir", buf, sizeof buf), 12);
	assert_string_equal(buf, "/tmp/lc-keys");
	assert_int_equal(lc_ctx_config_get(ctx, "secret_dir", buf, 4), -ENOSPC);
	unsetenv("LAYERCAKE_SECRET_DIR");
	assert_int_equal(lc_ctx_config_get(ctx, "secret_dir", buf, sizeof buf), 0);
	assert_string_equal(buf, "");
	assert_int_equal(lc_ctx_config_set(ctx, "secret_dir", "/x"), -ENOTSUP);
	assert_int_equal(lc_ctx_config_get_int(ctx, "secret_dir", &v), -ENOENT);
	assert_int_equal(lc_ctx_config_get(ctx, "log", buf, sizeof buf), 4);
	assert_string_equal(buf, "warn");
	unsetenv("LAYERCAKE_CUDA_LIB");
	assert_int_equal(lc_ctx_config_get(ctx, "cuda_lib", buf, sizeof buf), 12);
	assert_string_equal(buf, "libcuda.so.1");
	/* The shared secret is never read back: only whether it is set. */
	setenv("LAYERCAKE_SHARED_SECRET", "0123456789abcdef0123456789abcdef", 1);
	assert_int_equal(lc_ctx_config_get(ctx, "shared_secret", buf, sizeof buf), 5);
	assert_string_equal(buf, "(set)");
	unsetenv("LAYERCAKE_SHARED_SECRET");
	assert_int_equal(lc_ctx_config_get(ctx, "shared_secret", buf, sizeof buf), 0);
	lc_ctx_destroy(ctx);
}

static void grant_ranges_merge_and_lookup_needs_full_containment(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 5, 1, 0, 100), 0);
	assert_int_equal(lc__grant_issue(t, 5, 1, 200, 100), 0);
	/* inside one range */
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, 10, 90, &g), 0);
	lc__grant_put(g);
	/* spans the hole [100, 200) */
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, 50, 200, &g), LC_ERR_GRANT);
	/* filling the hole merges the three ranges into one */
	assert_int_equal(lc__grant_issue(t, 5, 1, 100, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, 0, 300, &g), 0);
	lc__grant_put(g);
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, 0, 301, &g), LC_ERR_GRANT);
	/* another region, another room, wrapping offsets */
	assert_int_equal(lc__grant_lookup(t, 5, 0, 2, 0, 10, &g), LC_ERR_GRANT);
	assert_int_equal(lc__grant_lookup(t, 6, 0, 1, 0, 10, &g), LC_ERR_GRANT);
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, UINT64_MAX - 5, 10, &g), LC_ERR_GRANT);
	assert_int_equal(lc__grant_issue(t, 5, 1, UINT64_MAX - 5, 10), -EINVAL);
	assert_int_equal(lc__grant_issue(t, 5, 1, 0, 0), -EINVAL);
	assert_int_equal(lc__grant_revoke(t, 5), 1); /* one merged range */
	assert_int_equal(lc__grant_lookup(t, 5, 0, 1, 0, 10, &g), LC_ERR_GRANT);
	assert_int_equal(lc__grant_revoke(t, 5), 0);
	lc__grant_table_destroy(t);
}

static void grant_table_grows_and_revokes_by_region(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	assert_int_equal(lc__grant_table_create(&t), 0);
	for (uint64_t room = 1; room <= 5000; room++)
		assert_int_equal(lc__grant_issue(t, room, (uint32_t)(room % 3 + 1), room * 10, 10),
				 0);
	assert_int_equal(lc__grant_rooms(t), 5000);
	for (uint64_t room = 1; room <= 5000; room += 2)
		assert_int_equal(lc__grant_revoke(t, room), 1);
	assert_int_equal(lc__grant_rooms(t), 2500);
	/* region 1 holds rooms with room % 3 == 0 */
	int n = lc__grant_revoke_region(t, 1);
	assert_true(n > 0);
	for (uint64_t room = 2; room <= 5000; room += 2) {
		int rc = lc__grant_lookup(t, room, 0, (uint32_t)(room % 3 + 1), room * 10, 10, &g);
		if (room % 3 == 0) {
			assert_int_equal(rc, LC_ERR_GRANT);
		} else {
			assert_int_equal(rc, 0);
			lc__grant_put(g);
		}
	}
	lc__grant_table_destroy(t);
}

/* A room bound to writers' token ids takes writes only from them, whatever
 * the range; a bind alone is no live grant; the binding goes with revoke. */
static void grant_bound_room_takes_only_its_writers(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	lc__grant_room_t *g;
	lc__grant_count_t c;
	uint32_t ready;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_bind(t, 7, 0), -EINVAL); /* 0 is no token */
	assert_int_equal(lc__grant_bind(t, 7, 11), 0);
	assert_int_equal(lc__grant_bind(t, 7, 11), 0); /* again: nothing new */
	/* Bound, nothing granted yet: nothing lands, nothing to count. */
	assert_int_equal(lc__grant_lookup(t, 7, 11, 1, 0, 10, &g), LC_ERR_GRANT);
	assert_int_equal(lc__grant_room_count(t, 7, &c), LC_ERR_GRANT);
	assert_int_equal(lc__grant_layers_ready(t, 7, &ready), LC_ERR_GRANT);
	assert_int_equal(lc__grant_issue(t, 7, 1, 0, 100), 0);
	assert_int_equal(lc__grant_room_count(t, 7, &c), 0);
	assert_int_equal(c.granted, 100);
	assert_int_equal(lc__grant_lookup(t, 7, 11, 1, 0, 100, &g), 0);
	lc__grant_put(g);
	/* Another writer, or none: refused inside the range and out of it. */
	assert_int_equal(lc__grant_lookup(t, 7, 12, 1, 0, 10, &g), LC_ERR_AUTH);
	assert_int_equal(lc__grant_lookup(t, 7, 0, 1, 0, 10, &g), LC_ERR_AUTH);
	assert_int_equal(lc__grant_lookup(t, 7, 12, 1, 500, 10, &g), LC_ERR_AUTH);
	/* Fan-in: a second writer bound to the room. */
	assert_int_equal(lc__grant_bind(t, 7, 12), 0);
	assert_int_equal(lc__grant_bind(t, 7, 13), 0);
	assert_int_equal(lc__grant_lookup(t, 7, 12, 1, 0, 10, &g), 0);
	lc__grant_put(g);
	assert_int_equal(lc__grant_lookup(t, 7, 14, 1, 0, 10, &g), LC_ERR_AUTH);
	/* An unbound room takes every writer. */
	assert_int_equal(lc__grant_issue(t, 8, 1, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 8, 12, 1, 0, 10, &g), 0);
	lc__grant_put(g);
	assert_int_equal(lc__grant_lookup(t, 8, 0, 1, 0, 10, &g), 0);
	lc__grant_put(g);
	/* Revoked and granted again: bound to no one. */
	assert_int_equal(lc__grant_revoke(t, 7), 1);
	assert_int_equal(lc__grant_issue(t, 7, 1, 0, 100), 0);
	assert_int_equal(lc__grant_lookup(t, 7, 14, 1, 0, 10, &g), 0);
	lc__grant_put(g);
	/* A room only bound is revoked like any other (no range). */
	assert_int_equal(lc__grant_bind(t, 9, 11), 0);
	assert_int_equal(lc__grant_rooms(t), 3);
	assert_int_equal(lc__grant_revoke(t, 9), 0);
	assert_int_equal(lc__grant_rooms(t), 2);
	lc__grant_table_destroy(t);
}

typedef struct copier {
	lc__grant_room_t *g;
	_Atomic int inside;
	_Atomic int release;
} copier_t;

static void *hold_copy(void *arg)
{
	copier_t *c = arg;
	assert_true(lc__grant_enter(c->g));
	atomic_store(&c->inside, 1);
	while (!atomic_load(&c->release))
		usleep(100);
	lc__grant_exit(c->g);
	return NULL;
}

static void *revoke_room(void *arg)
{
	lc__grant_table_t *t = arg;
	lc__grant_revoke(t, 9);
	return NULL;
}

static void revoke_waits_for_a_copy_in_progress_and_blocks_new_ones(void **state)
{
	(void)state;
	lc__grant_table_t *t;
	copier_t c = {0};
	pthread_t copier, revoker;
	assert_int_equal(lc__grant_table_create(&t), 0);
	assert_int_equal(lc__grant_issue(t, 9, 1, 0, 4096), 0);
	assert_int_equal(lc__grant_lookup(t, 9, 0, 1, 0, 4096, &c.g), 0);
	assert_false(lc__grant_revoked(c.g));
	pthread_create(&copier, NULL, hold_copy, &c);
	while (!atomic_load(&c.inside))
		usleep(100);
	pthread_create(&revoker, NULL, revoke_room, t);
	usleep(20000);
	/* the revoke cannot have returned: a copy is inside */
	assert_int_equal(pthread_tryjoin_np(revoker, NULL), EBUSY);
	atomic_store(&c.release, 1);
	pthread_join(copier, NULL);
	pthread_join(revoker, NULL);
	/* the entry we still reference is revoked: no new copy may start */
	assert_true(lc__grant_revoked(c.g));
	assert_false(lc__grant_enter(c.g));
	lc__grant_put(c.g);
	lc__grant_table_destroy(t);
}

/* The seam's in-order queue releases a write only when its copies and
 * those of every older write are reaped, whatever order they complete in. */
static void landing_queue_releases_writes_in_order(void **state)
{
	(void)state;
	lc__landq_t q = {0};
	lc__landq_ent_t e;
	assert_int_equal(lc__landq_make(&q, 4), 0);
	lc__landq_push(&q, &(lc__landq_ent_t){.seq = 5, .inflight = 1});
	lc__landq_push(&q, &(lc__landq_ent_t){.seq = 6});
	lc__landq_push(&q, &(lc__landq_ent_t){.seq = 7, .inflight = 2});
	assert_false(lc__landq_pop(&q, &e)); /* 5's copy is in flight */
	assert_true(lc__landq_reaped(&q, 7, 0));
	assert_false(lc__landq_reaped(&q, 8, 0)); /* not queued */
	assert_false(lc__landq_pop(&q, &e));
	assert_true(lc__landq_reaped(&q, 5, 0));
	assert_true(lc__landq_pop(&q, &e));
	assert_true(e.seq == 5 && !e.failed);
	assert_true(lc__landq_pop(&q, &e));
	assert_true(e.seq == 6);
	assert_false(lc__landq_pop(&q, &e)); /* 7 has one copy left */
	assert_true(lc__landq_reaped(&q, 7, LC_ERR_IO));
	assert_true(lc__landq_pop(&q, &e));
	assert_true(e.seq == 7 && e.failed);
	assert_int_equal(q.n, 0);
	lc__landq_fini(&q, true);
}

static void regions_reject_overlap_and_never_reuse_ids(void **state)
{
	(void)state;
	lc__regions_t t;
	struct lc_region *a, *b, *c;
	lc__region_info_t info;
	static uint8_t mem[3 * 4096];
	assert_int_equal(lc__regions_init(&t), 0);
	assert_int_equal(lc__regions_add(&t, NULL, mem, 4096, -1, 0, &a), 0);
	assert_int_equal(lc__regions_add(&t, NULL, mem + 4096, 4096, -1, 0, &b), 0);
	assert_int_equal(lc__regions_add(&t, NULL, mem + 100, 10, -1, 0, &c), -EEXIST);
	assert_int_equal(lc__regions_add(&t, NULL, mem + 4000, 200, -1, 0, &c), -EEXIST);
	assert_int_equal(lc__regions_find(&t, mem + 4090, 6, &info), 0);
	assert_int_equal(info.id, a->id);
	/* a range straddling two regions belongs to neither */
	assert_int_equal(lc__regions_find(&t, mem + 4090, 10, &info), LC_ERR_REGION);
	assert_int_equal(lc__regions_find(&t, mem + 2 * 4096, 1, &info), LC_ERR_REGION);
	uint32_t old = a->id;
	assert_int_equal(lc__regions_remove(&t, a), 0);
	assert_int_equal(lc__regions_get(&t, old, &info), LC_ERR_REGION);
	assert_int_equal(lc__regions_add(&t, NULL, mem, 4096, -1, 0, &a), 0);
	assert_true(a->id != old);
	assert_int_equal(lc__regions_get(&t, b->id, &info), 0);
	assert_ptr_equal(info.addr, mem + 4096);
	lc__regions_fini(&t);
}

static void completion_queue_fd_is_readable_exactly_while_nonempty(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_completion_t out[4];
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	struct pollfd p = {.fd = lc_cq_fd(cq), .events = POLLIN};
	assert_int_equal(poll(&p, 1, 0), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(lc__cq_reserve(cq), 0);
	for (uint64_t i = 0; i < 100; i++)
		lc__cq_push(cq, &(lc_completion_t){.batch_id = i});
	assert_int_equal(poll(&p, 1, 0), 1);
	uint64_t expect = 0;
	int n;
	while ((n = lc_cq_poll(cq, out, 4)) > 0) {
		for (int i = 0; i < n; i++)
			assert_int_equal(out[i].batch_id, expect++);
		if (expect < 100)
			assert_int_equal(poll(&p, 1, 0), 1);
	}
	assert_int_equal(expect, 100);
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_int_equal(lc_cq_wait(cq, out, 4, 10), 0); /* times out */
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

/* A pusher on another thread races the consumer's drain of the eventfd
 * (both run outside the queue's lock): a consumer that sleeps on the fd
 * whenever a poll comes back empty must still see every completion, in
 * order (a lost wake leaves it asleep with work queued: the deadline
 * fails the test), and the fd is quiet once the queue is drained. */
struct cq_pusher {
	lc_cq_t *cq;
	uint64_t n;
};

static void *cq_push_all(void *arg)
{
	struct cq_pusher *p = arg;
	for (uint64_t i = 0; i < p->n; i++) {
		lc__cq_push(p->cq, &(lc_completion_t){.batch_id = i});
		if (i % 7 == 0)
			sched_yield(); /* let the consumer empty the queue often */
	}
	return NULL;
}

static void completion_queue_loses_no_wake_to_a_racing_push(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_completion_t out[8];
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	struct cq_pusher p = {.cq = cq, .n = 20000};
	for (uint64_t i = 0; i < p.n; i++)
		assert_int_equal(lc__cq_reserve(cq), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cq_push_all, &p), 0);
	struct pollfd pf = {.fd = lc_cq_fd(cq), .events = POLLIN};
	uint64_t expect = 0;
	while (expect < p.n) {
		int n = lc_cq_poll(cq, out, 8);
		assert_true(n >= 0);
		for (int i = 0; i < n; i++)
			assert_int_equal(out[i].batch_id, expect++);
		if (n == 0)
			assert_int_equal(poll(&pf, 1, 5000), 1); /* woken, not lost */
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(lc_cq_poll(cq, out, 8), 0);
	assert_int_equal(poll(&pf, 1, 0), 0); /* drained: quiet */
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

/* A caller spinning in lc_cq_wait takes a completion pushed meanwhile
 * without the eventfd (cq.h); what it leaves queued (it asked for one of
 * three) makes the fd readable after all, for a consumer that sleeps on
 * it, and the fd is quiet once the queue is drained. */
struct cq_spinner {
	lc_cq_t *cq;
	lc_completion_t got;
	int n;
};

static void *cq_wait_one(void *arg)
{
	struct cq_spinner *w = arg;
	w->n = lc_cq_wait(w->cq, &w->got, 1, 30000);
	return NULL;
}

static void completion_queue_spinner_takes_pushes_and_signals_what_it_leaves(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_completion_t out[4];
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	cq->spin_ns = 30ull * 1000000000; /* spins until the push */
	for (int i = 0; i < 3; i++)
		assert_int_equal(lc__cq_reserve(cq), 0);
	struct cq_spinner w = {.cq = cq};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cq_wait_one, &w), 0);
	for (bool spinning = false; !spinning; sched_yield()) {
		pthread_mutex_lock(&cq->lock);
		spinning = cq->spinners == 1;
		pthread_mutex_unlock(&cq->lock);
	}
	for (uint64_t i = 0; i < 3; i++)
		lc__cq_push(cq, &(lc_completion_t){.batch_id = i});
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.n, 1);
	assert_int_equal(w.got.batch_id, 0);
	struct pollfd pf = {.fd = lc_cq_fd(cq), .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 5000), 1); /* two still queued: signalled */
	assert_int_equal(lc_cq_poll(cq, out, 4), 2);
	assert_int_equal(out[0].batch_id, 1);
	assert_int_equal(out[1].batch_id, 2);
	assert_int_equal(lc_cq_poll(cq, out, 4), 0);
	assert_int_equal(poll(&pf, 1, 0), 0); /* drained: quiet */
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

/* Closing a queue that threads wait on (issue 43, finding 9): they wake,
 * return LC_ERR_CLOSED, and lc_cq_destroy frees the queue only once they
 * have left (under ASan a waiter still inside would read freed memory).
 * A later wait returns at once; what is queued is still returned first. */
struct cq_closer {
	lc_cq_t *cq;
	int timeout_ms, n;
	lc_completion_t got;
};

static void *cq_wait_closing(void *arg)
{
	struct cq_closer *w = arg;
	w->n = lc_cq_wait(w->cq, &w->got, 1, w->timeout_ms);
	return NULL;
}

static void wait_for_waiters(lc_cq_t *cq, unsigned n)
{
	for (bool in = false; !in; sched_yield()) {
		pthread_mutex_lock(&cq->lock);
		in = cq->waiters == n;
		pthread_mutex_unlock(&cq->lock);
	}
}

static void completion_queue_destroy_wakes_and_waits_for_its_waiters(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	struct cq_closer w[3] = {{.cq = cq, .timeout_ms = -1, .n = 1},
				 {.cq = cq, .timeout_ms = -1, .n = 1},
				 {.cq = cq, .timeout_ms = 60000, .n = 1}};
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, cq_wait_closing, &w[i]), 0);
	wait_for_waiters(cq, 3);
	usleep(20000); /* asleep in poll(), most likely */
	uint64_t t0 = lc__now_ns();
	lc_cq_destroy(cq); /* returns once all three have left */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].n, LC_ERR_CLOSED);
	}
	assert_true(lc__now_ns() - t0 < 10ull * 1000000000);
	lc_ctx_destroy(ctx);
}

static void completion_queue_shutdown_is_sticky_and_returns_what_is_queued(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_completion_t out[2];
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	cq->spin_ns = 30ull * 1000000000; /* a spinning waiter must wake too */
	assert_int_equal(lc__cq_reserve(cq), 0);
	assert_int_equal(lc__cq_reserve(cq), 0);
	struct cq_closer w = {.cq = cq, .timeout_ms = -1, .n = 1};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, cq_wait_closing, &w), 0);
	wait_for_waiters(cq, 1);
	assert_int_equal(lc_cq_shutdown(cq), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.n, LC_ERR_CLOSED);
	assert_int_equal(lc_cq_shutdown(cq), 0); /* idempotent */
	/* Sticky: a wait that begins later returns at once, whatever its timeout. */
	assert_int_equal(lc_cq_wait(cq, out, 2, -1), LC_ERR_CLOSED);
	/* A poll that drains the eventfd leaves it readable: a sleeper would wake. */
	lc__cq_push(cq, &(lc_completion_t){.batch_id = 7});
	assert_int_equal(lc_cq_poll(cq, out, 2), 1);
	struct pollfd pf = {.fd = lc_cq_fd(cq), .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 0), 1);
	/* What is queued is returned before the closed answer. */
	lc__cq_push(cq, &(lc_completion_t){.batch_id = 8});
	assert_int_equal(lc_cq_wait(cq, out, 2, -1), 1);
	assert_int_equal(out[0].batch_id, 8);
	assert_int_equal(lc_cq_wait(cq, out, 2, 1000), LC_ERR_CLOSED);
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

/* The engine's queue: the eventfd is written only while the consumer has
 * armed it (about to sleep); pushes while it works leave it quiet. */
static void armed_completion_queue_signals_only_a_sleeping_consumer(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_completion_t out[4];
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_cq_create(ctx, &cq), 0);
	lc__cq_set_arm_mode(cq);
	struct pollfd p = {.fd = lc_cq_fd(cq), .events = POLLIN};
	for (int i = 0; i < 3; i++)
		assert_int_equal(lc__cq_reserve(cq), 0);
	lc__cq_push(cq, &(lc_completion_t){.batch_id = 1}); /* consumer awake */
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_false(lc__cq_arm(cq)); /* queued: do not sleep */
	assert_int_equal(lc_cq_poll(cq, out, 4), 1);
	assert_true(lc__cq_arm(cq)); /* empty: armed */
	lc__cq_push(cq, &(lc_completion_t){.batch_id = 2});
	assert_int_equal(poll(&p, 1, 0), 1); /* the sleeper is woken */
	lc__cq_disarm(cq, true);
	assert_int_equal(poll(&p, 1, 0), 0);                /* cleared */
	lc__cq_push(cq, &(lc_completion_t){.batch_id = 3}); /* disarmed: quiet */
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_int_equal(lc_cq_poll(cq, out, 4), 2);
	assert_int_equal(out[0].batch_id, 2);
	assert_int_equal(out[1].batch_id, 3);
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
}

static void region_descriptors_round_trip_and_reject_damage(void **state)
{
	(void)state;
	lc_ctx_t *ctx;
	lc_region_t *r;
	lc_region_desc_t d;
	uint8_t buf[LC_REGION_DESC_MAX];
	void *mem;
	assert_int_equal(lc_ctx_create(NULL, &ctx), 0);
	assert_int_equal(lc_mem_alloc(1 << 20, LC_MEM_SHAREABLE, &mem), 0);
	assert_int_equal((uintptr_t)mem % (2u << 20), 0);
	assert_int_equal(lc_region_register(ctx, mem, 1 << 20, &r), 0);
	int n = lc_region_pack(r, buf, sizeof buf);
	assert_true(n >= 32);
	assert_int_equal(lc_region_unpack(buf, (size_t)n, &d), 0);
	assert_int_equal(d.region_id, lc_region_id(r));
	assert_int_equal(d.length, 1 << 20);
	for (int cut = 0; cut < n; cut++)
		assert_int_equal(lc_region_unpack(buf, (size_t)cut, &d), LC_ERR_PROTO);
	buf[4] = 99; /* version */
	assert_int_equal(lc_region_unpack(buf, (size_t)n, &d), LC_ERR_PROTO);
	assert_int_equal(lc_region_pack(r, buf, 8), -ENOSPC);
	assert_int_equal(lc_grant_issue(ctx, 1, r, (1 << 20) - 10, 11), LC_ERR_OUT_OF_REGION);
	assert_int_equal(lc_region_deregister(r), 0);
	assert_int_equal(lc_mem_free(mem), 0);
	assert_int_equal(lc_mem_free(mem), -EINVAL);
	lc_ctx_destroy(ctx);
}

static void urls_parse_hosts_ports_and_queries(void **state)
{
	(void)state;
	char host[64];
	int port;
	uint64_t v;
	assert_int_equal(lc__url_host_port("tcp://127.0.0.1:8998", "tcp", host, sizeof host, &port),
			 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 8998);
	assert_int_equal(lc__url_host_port("tcp://[::1]:0", "tcp", host, sizeof host, &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 0);
	assert_int_equal(lc__url_host_port("tcp://host", "tcp", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__url_host_port("tcp://h:70000", "tcp", host, sizeof host, &port),
			 -EINVAL);
	assert_int_equal(lc__url_host_port("shm://h:1", "tcp", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__url_query_u64("loop://x?a=1&fail_write=3", "fail_write", &v), 1);
	assert_int_equal(v, 3);
	assert_int_equal(lc__url_query_u64("loop://x?a=1", "fail_write", &v), 0);
	assert_int_equal(lc__url_query_u64("loop://x?fail_write=3z", "fail_write", &v), -EINVAL);
	assert_non_null(strstr(lc_transports(), "loop"));
}

/* A latency of 2^25 us (33.5 s) or more once gave bucket 96, one past the
 * array, and the increment landed on the engine's session table. */
static void histogram_buckets_stay_in_range(void **state)
{
	(void)state;
	assert_int_equal(lc__hist_bucket(0), 0);
	assert_int_equal(lc__hist_bucket(1000ull * (1ull << 25)), LC_HIST_BUCKETS - 1);
	assert_int_equal(lc__hist_bucket(UINT64_MAX), LC_HIST_BUCKETS - 1);
	for (int b = 0; b < 64; b++) {
		int i = lc__hist_bucket(1ull << b);
		assert_true(i >= 0 && i < LC_HIST_BUCKETS);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(error_names_and_texts_cover_library_and_errno_codes),
		cmocka_unit_test(config_reads_environment_and_rejects_bad_values),
		cmocka_unit_test(text_knobs_are_listed_read_from_the_environment_and_not_set),
		cmocka_unit_test(grant_ranges_merge_and_lookup_needs_full_containment),
		cmocka_unit_test(grant_table_grows_and_revokes_by_region),
		cmocka_unit_test(grant_bound_room_takes_only_its_writers),
		cmocka_unit_test(revoke_waits_for_a_copy_in_progress_and_blocks_new_ones),
		cmocka_unit_test(landing_queue_releases_writes_in_order),
		cmocka_unit_test(regions_reject_overlap_and_never_reuse_ids),
		cmocka_unit_test(completion_queue_fd_is_readable_exactly_while_nonempty),
		cmocka_unit_test(completion_queue_loses_no_wake_to_a_racing_push),
		cmocka_unit_test(completion_queue_spinner_takes_pushes_and_signals_what_it_leaves),
		cmocka_unit_test(completion_queue_destroy_wakes_and_waits_for_its_waiters),
		cmocka_unit_test(completion_queue_shutdown_is_sticky_and_returns_what_is_queued),
		cmocka_unit_test(armed_completion_queue_signals_only_a_sleeping_consumer),
		cmocka_unit_test(region_descriptors_round_trip_and_reject_damage),
		cmocka_unit_test(urls_parse_hosts_ports_and_queries),
		cmocka_unit_test(histogram_buckets_stay_in_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
