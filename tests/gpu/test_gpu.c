/*
 * CUDA plumbing without a GPU (docs/gpu.md). Each case is its own ctest
 * process: `absent` runs with LAYERCAKE_CUDA_LIB naming a file that does not
 * exist; the others load tests/gpu/fakecuda.c's library, which implements
 * the driver API on host memory. They prove the shim, the copy engine and
 * the stream step records as plumbing; they prove nothing about CUDA.
 *
 * Usage: test_gpu CASE   (absent, nodev, shim, copy, drain, steps,
 *                         engine, fail_write, fail_register, fail_copy)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/copier_cuda.h"
#include "core/cuda.h"
#include "layercake.h"
#include "testutil.h"

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define CHECK_RC(expr, want)                                                                       \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_ != (want)) {                                                               \
			fprintf(stderr, "%s:%d: %s returned %d (%s), want %d\n", __FILE__,         \
				__LINE__, #expr, rc_, lc_err_name(rc_), want);                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static lc_ctx_t *ctx_new(const char *name)
{
	lc_ctx_t *c;
	lc_ctx_params_t cp = {.size = sizeof(cp), .name = name};
	CHECK_RC(lc_ctx_create(&cp, &c), 0);
	return c;
}

static uint64_t counter(lc_ctx_t *c, const char *name)
{
	uint64_t v = 0;
	CHECK_RC(lc_ctx_counter_by_name(c, name, &v), 0);
	return v;
}

/* A P engine alone: layout over host memory, no session. */
typedef struct solo {
	lc_ctx_t *ctx;
	uint8_t *mem;
	lc_region_t *reg;
	lc_layout_t *layout;
	lc_engine_t *e;
} solo_t;

#define L 4
#define PAGES 8
#define ITEM 256
#define NBUF (2 * L)
#define BUF (PAGES * ITEM)

static void solo_new(solo_t *s)
{
	s->ctx = ctx_new("P");
	s->mem = calloc(1, NBUF * BUF);
	tu_fill(s->mem, NBUF * BUF, 7);
	CHECK_RC(lc_region_register(s->ctx, s->mem, NBUF * BUF, &s->reg), 0);
	void *bases[NBUF];
	for (int b = 0; b < NBUF; b++)
		bases[b] = s->mem + b * BUF;
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	CHECK_RC(lc_layout_build(&lp, &s->layout), 0);
	lc_engine_params_t ep = {.size = sizeof(ep), .layout = s->layout, .name = "gpu"};
	CHECK_RC(lc_engine_create(s->ctx, &ep, &s->e), 0);
	/* Two empty forwards' worth of steps (2 L cache, 2 aux): a record no
	 * batch reserved is refused. */
	for (int i = 0; i < 2; i++) {
		CHECK_RC(lc_engine_batch_begin(s->e, 0), 0);
		CHECK_RC(lc_engine_batch_end(s->e), 0);
	}
}

static void solo_free(solo_t *s)
{
	lc_engine_destroy(s->e);
	lc_layout_destroy(s->layout);
	lc_ctx_destroy(s->ctx);
	free(s->mem);
}

static uint64_t word(lc_engine_t *e, int which)
{
	uint64_t *w;
	CHECK_RC(lc_engine_counter(e, which, &w), 0);
	return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* A stream in device 0's primary context (made current for the call). */
static CUstream stream_new(CUcontext *cu)
{
	CUstream s;
	CHECK_RC(lc__cuda_primary_ctx_retain(0, cu), 0);
	CHECK_RC(lc__cuda_ctx_push(*cu), 0);
	CHECK_RC(lc__cuda_stream_create(&s), 0);
	lc__cuda_ctx_pop();
	return s;
}

static void stream_free(CUstream s, CUcontext cu)
{
	CHECK_RC(lc__cuda_ctx_push(cu), 0);
	lc__cuda_stream_destroy(s);
	lc__cuda_ctx_pop();
	lc__cuda_primary_ctx_release(0);
}

/* ---- cases ------------------------------------------------------------- */

static int case_absent(void)
{
	lc_cuda_info_t info = {.size = sizeof(info)};
	CHECK_RC(lc_cuda_info(&info), 0);
	CHECK(!info.found && info.device_count == 0);
	CHECK(strstr(info.why, "dlopen") != NULL);
	lc_cuda_device_t d = {.size = sizeof(d)};
	CHECK_RC(lc_cuda_device(0, &d), LC_ENOTSUP);
	int kind, dev, x = 0;
	CHECK_RC(lc_cuda_pointer_kind(&x, &kind, &dev), LC_ENOTSUP);
	lc_ctx_t *c = ctx_new("absent");
	lc__copier_t *cp;
	CHECK_RC(lc__copier_cuda_create(c, 0, &cp), LC_ENOTSUP);
	solo_t s;
	solo_new(&s);
	CHECK_RC(lc_engine_record_cache_on_stream(s.e, NULL), LC_ENOTSUP);
	CHECK_RC(lc_engine_record_aux_on_stream(s.e, NULL), LC_ENOTSUP);
	/* The CPU producer is untouched. */
	CHECK_RC(lc_engine_record_cache(s.e), 0);
	CHECK(word(s.e, LC_STEP_CACHE) == 1);
	CHECK(counter(s.ctx, "cuda_errors") == 0);
	solo_free(&s);
	lc_ctx_destroy(c);
	CHECK(lc__cuda_errors() == 0);
	return 0;
}

static int case_nodev(void)
{
	lc_cuda_info_t info = {.size = sizeof(info)};
	CHECK_RC(lc_cuda_info(&info), 0);
	CHECK(!info.found);
	CHECK(strstr(info.why, "cuInit: CUDA_ERROR_NO_DEVICE") != NULL);
	int n;
	CHECK_RC(lc__cuda_device_count(&n), LC_ENOTSUP);
	return 0;
}

static int case_shim(void)
{
	lc_cuda_info_t info = {.size = sizeof(info)};
	CHECK_RC(lc_cuda_info(&info), 0);
	CHECK(info.found && info.device_count == 2 && info.driver_version == 12040);
	lc_cuda_device_t d = {.size = sizeof(d)};
	CHECK_RC(lc_cuda_device(1, &d), 0);
	CHECK(!strcmp(d.name, "Fake CUDA device 1") && !strcmp(d.pci_bus_id, "0000:11:00.0"));
	CHECK(d.total_mem == (uint64_t)1 << 30);
	CHECK_RC(lc_cuda_device(2, &d), -ERANGE);

	int kind, dev;
	uint64_t host[64];
	CHECK_RC(lc_cuda_pointer_kind(host, &kind, &dev), 0);
	CHECK(kind == LC_CUDA_PTR_HOST && dev == -1);
	CHECK_RC(lc__cuda_host_register(host, sizeof(host), LC__CU_MEMHOSTREGISTER_DEVICEMAP), 0);
	CHECK_RC(lc__cuda_host_register(host, sizeof(host), 0), -EEXIST);
	CHECK_RC(lc_cuda_pointer_kind(host + 3, &kind, &dev), 0);
	CHECK(kind == LC_CUDA_PTR_PINNED && dev == -1);
	CUdeviceptr hp;
	CHECK_RC(lc__cuda_host_device_ptr(host, &hp), 0);
	CHECK_RC(lc__cuda_host_unregister(host), 0);

	CUdeviceptr p, q;
	CHECK_RC(lc__cuda_mem_alloc(&p, 4096), 0);
	CHECK_RC(lc_cuda_pointer_kind((void *)(uintptr_t)(p + 100), &kind, &dev), 0);
	CHECK(kind == LC_CUDA_PTR_DEVICE && dev == 0);
	CUipcMemHandle h;
	CHECK_RC(lc__cuda_ipc_get(p, &h), 0);
	CHECK_RC(lc__cuda_ipc_open(&h, &q), 0);
	/* The fake maps the exporter's memfd again: another address, the
	 * same bytes (the fake's device memory is host memory). */
	CHECK(q != 0 && q != p);
	*(volatile uint8_t *)(uintptr_t)(p + 7) = 0x5a;
	CHECK(*(volatile uint8_t *)(uintptr_t)(q + 7) == 0x5a);
	CUdeviceptr base;
	size_t size;
	CHECK_RC(lc__cuda_mem_range(p + 100, &base, &size), 0);
	CHECK(base == p && size == 4096);
	int vfd = -1;
	CHECK_RC(lc__cuda_vmm_export(p, &vfd), -ENOENT); /* not VMM memory */
	CHECK_RC(lc__cuda_ipc_close(q), 0);
	lc__cuda_mem_free(p);
	CHECK(lc__cuda_errors() == 0);
	/* A failing call: an LC code, a count, a log line. */
	CHECK_RC(lc__cuda_host_unregister(host), LC_ERR_CUDA);
	CHECK(lc__cuda_errors() == 1);
	return 0;
}

typedef struct order {
	pthread_mutex_t lock;
	int seen[64], n, bad;
} order_t;

static order_t ord = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void done_in_order(void *arg, int status)
{
	pthread_mutex_lock(&ord.lock);
	if (status)
		ord.bad++;
	ord.seen[ord.n++] = (int)(intptr_t)arg;
	pthread_mutex_unlock(&ord.lock);
}

/* Host -> device -> device -> host, in 16 chunks each, every completion in
 * queue order; the bytes come back unchanged. */
static int case_copy(void)
{
	lc_ctx_t *c = ctx_new("copy");
	lc__copier_t *cp;
	CHECK_RC(lc__copier_cuda_create(c, 0, &cp), 0);
	CHECK(!strcmp(cp->ops->name, "cuda") && cp->device == 0);
	enum { N = 16, CH = 4096 };
	uint8_t *src = malloc(N * CH), *back = calloc(1, N * CH);
	tu_fill(src, N * CH, 3);
	CUdeviceptr d1, d2;
	CHECK_RC(lc__cuda_mem_alloc(&d1, N * CH), 0);
	CHECK_RC(lc__cuda_mem_alloc(&d2, N * CH), 0);
	int k = 0;
	for (int i = 0; i < N; i++, k++)
		CHECK_RC(cp->ops->from_host(cp, (void *)(uintptr_t)(d1 + i * CH), src + i * CH, CH,
					    done_in_order, (void *)(intptr_t)k),
			 0);
	for (int i = 0; i < N; i++, k++)
		CHECK_RC(cp->ops->dev_to_dev(cp, (void *)(uintptr_t)(d2 + i * CH),
					     (void *)(uintptr_t)(d1 + i * CH), CH, done_in_order,
					     (void *)(intptr_t)k),
			 0);
	for (int i = 0; i < N; i++, k++)
		CHECK_RC(cp->ops->to_host(cp, back + i * CH, (void *)(uintptr_t)(d2 + i * CH), CH,
					  done_in_order, (void *)(intptr_t)k),
			 0);
	CHECK_RC(cp->ops->drain(cp, now_ns() + 10000000000ull), 0);
	CHECK(ord.n == 3 * N && ord.bad == 0);
	for (int i = 0; i < ord.n; i++)
		CHECK(ord.seen[i] == i);
	CHECK(tu_verify(back, N * CH, 3) == -1);
	/* Bad arguments queue nothing. */
	CHECK_RC(cp->ops->to_host(cp, NULL, (void *)(uintptr_t)d1, 1, done_in_order, NULL),
		 -EINVAL);
	cp->ops->destroy(cp);
	lc__cuda_mem_free(d1);
	lc__cuda_mem_free(d2);
	CHECK(counter(c, "cuda_errors") == 0);
	lc_ctx_destroy(c);
	free(src);
	free(back);
	return 0;
}

/* drain is bounded: with completions 200 ms away, a 10 ms deadline says
 * -ETIMEDOUT; without one it waits them out. */
static int case_drain(void)
{
	lc_ctx_t *c = ctx_new("drain");
	lc__copier_t *cp;
	CHECK_RC(lc__copier_cuda_create(c, 0, &cp), 0);
	uint8_t buf[64] = {1};
	CUdeviceptr d;
	CHECK_RC(lc__cuda_mem_alloc(&d, sizeof(buf)), 0);
	CHECK_RC(cp->ops->from_host(cp, (void *)(uintptr_t)d, buf, sizeof(buf), done_in_order,
				    (void *)0),
		 0);
	CHECK_RC(cp->ops->from_host(cp, (void *)(uintptr_t)d, buf, sizeof(buf), done_in_order,
				    (void *)1),
		 0);
	CHECK_RC(cp->ops->drain(cp, now_ns() + 10000000ull), -ETIMEDOUT);
	CHECK_RC(cp->ops->drain(cp, 0), 0);
	CHECK(ord.n == 2);
	cp->ops->destroy(cp);
	lc__cuda_mem_free(d);
	lc_ctx_destroy(c);
	return 0;
}

/* Stream records move the engine's words to absolute values the library
 * counted; CPU records are refused from then on. */
static int case_steps(void)
{
	solo_t s;
	solo_new(&s);
	CHECK_RC(lc_engine_record_cache(s.e), 0); /* the CPU first: 1 */
	CUcontext cu;
	CUstream st = stream_new(&cu);
	for (int i = 0; i < 5; i++)
		CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), 0);
	CHECK_RC(lc_engine_record_aux_on_stream(s.e, st), 0);
	CHECK(word(s.e, LC_STEP_CACHE) == 6 && word(s.e, LC_STEP_AUX) == 1);
	CHECK_RC(lc_engine_record_cache(s.e), LC_ERR_STATE);
	CHECK(word(s.e, LC_STEP_CACHE) == 6);
	/* Stream records are held to the reservation (2 L) at enqueue. */
	for (int i = 6; i < 2 * L; i++)
		CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), 0);
	CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), LC_ERR_STATE);
	CHECK_RC(lc_engine_record_aux_on_stream(s.e, st), 0);
	CHECK_RC(lc_engine_record_aux_on_stream(s.e, st), LC_ERR_STATE);
	CHECK(word(s.e, LC_STEP_CACHE) == 2 * L && word(s.e, LC_STEP_AUX) == 2);
	lc_engine_metrics_t m = {.size = sizeof(m)};
	CHECK_RC(lc_engine_metrics(s.e, &m), 0);
	CHECK(m.records_refused == 2); /* the cache and the aux stream records */
	/* The engine's words are pinned now, for CUDA. */
	uint64_t *w;
	int kind, dev;
	CHECK_RC(lc_engine_counter(s.e, LC_STEP_CACHE, &w), 0);
	CHECK_RC(lc_cuda_pointer_kind(w, &kind, &dev), 0);
	CHECK(kind == LC_CUDA_PTR_PINNED);
	CHECK_RC(lc_engine_record_cache_on_stream(NULL, st), -EINVAL);
	solo_free(&s);
	/* destroy unregistered them */
	stream_free(st, cu);
	CHECK(lc__cuda_errors() == 0);
	return 0;
}

/* ---- a whole room whose steps a stream records --------------------------- */

typedef struct room_fx {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int status, done;
} room_fx_t;

static void on_final(void *arg, const lc_room_final_t *fin)
{
	int status = fin->status;
	room_fx_t *f = arg;
	pthread_mutex_lock(&f->lock);
	f->status = status;
	f->done = 1;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static int case_engine(void)
{
	room_fx_t f = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, 0};
	lc_ctx_t *d = ctx_new("D"), *p = ctx_new("P");
	char url[64];
	snprintf(url, sizeof url, "loop://gpu-%d", (int)getpid());
	lc_listener_t *l;
	lc_token_t tok;
	CHECK_RC(lc_listener_create(d, url, &l), 0);
	CHECK_RC(lc_token_issue(d, &tok), 0);
	uint8_t *pmem = malloc(NBUF * BUF), *dmem = calloc(1, NBUF * BUF);
	tu_fill(pmem, NBUF * BUF, 11);
	lc_region_t *preg, *dreg;
	CHECK_RC(lc_region_register(p, pmem, NBUF * BUF, &preg), 0);
	CHECK_RC(lc_region_register(d, dmem, NBUF * BUF, &dreg), 0);
	void *bases[NBUF];
	for (int b = 0; b < NBUF; b++)
		bases[b] = pmem + b * BUF;
	lc_layout_params_t lp = {.size = sizeof(lp),
				 .model = LC_LAYOUT_MHA,
				 .layers = L,
				 .pages = PAGES,
				 .item_len = {ITEM},
				 .bases = bases};
	lc_layout_t *layout;
	CHECK_RC(lc_layout_build(&lp, &layout), 0);
	lc_engine_params_t ep = {
		.size = sizeof(ep), .layout = layout, .final_cb = on_final, .final_arg = &f};
	lc_engine_t *e;
	CHECK_RC(lc_engine_create(p, &ep, &e), 0);
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dreg, desc, sizeof desc);
	CHECK(n > 0);
	const void *descs[] = {desc};
	size_t lens[] = {(size_t)n};
	uint32_t region[NBUF] = {0};
	uint64_t offset[NBUF];
	for (int b = 0; b < NBUF; b++)
		offset[b] = (uint64_t)b * BUF;
	lc_session_params_t sp = {.size = sizeof(sp),
				  .name = "d0",
				  .url = url,
				  .token = tok,
				  .has_token = 1,
				  .region_descs = descs,
				  .region_desc_lens = lens,
				  .region_count = 1,
				  .buffer_region = region,
				  .buffer_offset = offset};
	CHECK_RC(lc_engine_session_add(e, &sp), 0);
	static const int64_t src[] = {1, 2, 5}, dst[] = {0, 3, 7};
	CHECK_RC(lc_grant_issue(d, 9, dreg, 0, NBUF * BUF), 0);
	lc_dst_params_t dp = {.size = sizeof(dp),
			      .session = "d0",
			      .pages = dst,
			      .page_count = 3,
			      .required_dst_count = 1};
	CHECK_RC(lc_engine_room_dst_add(e, 9, &dp), 0);
	CHECK_RC(lc_engine_batch_begin(e, 0), 0);
	lc_chunk_t c = {.size = sizeof(c), .room = 9, .pages = src, .page_count = 3, .is_last = 1};
	CHECK_RC(lc_engine_chunk_add(e, &c), 0);
	CHECK_RC(lc_engine_batch_end(e), 0);
	CHECK_RC(lc_engine_room_metadata_set(e, 9, "m", 1), 0);

	CUcontext cu;
	CUstream st = stream_new(&cu);
	for (int i = 0; i < L; i++) {
		usleep(2000); /* the engine thread polls between layers */
		CHECK_RC(lc_engine_record_cache_on_stream(e, st), 0);
	}
	CHECK_RC(lc_engine_record_aux_on_stream(e, st), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&f.lock);
	while (!f.done && !pthread_cond_timedwait(&f.cond, &f.lock, &ts))
		;
	pthread_mutex_unlock(&f.lock);
	CHECK(f.done && f.status == LC_ROOM_SUCCESS);
	for (int b = 0; b < NBUF; b++)
		for (int i = 0; i < 3; i++)
			CHECK(!memcmp(dmem + b * BUF + dst[i] * ITEM,
				      pmem + b * BUF + src[i] * ITEM, ITEM));
	lc_engine_metrics_t m = {.size = sizeof(m)};
	CHECK_RC(lc_engine_metrics(e, &m), 0);
	CHECK(m.writes_posted > 0 && m.rooms_succeeded == 1);
	lc_engine_destroy(e);
	stream_free(st, cu);
	lc_layout_destroy(layout);
	lc_listener_destroy(l);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	free(pmem);
	free(dmem);
	return 0;
}

/* FAKECUDA_FAIL=cuStreamWriteValue64_v2: the record fails, is counted, and
 * the counter stays where it was (the next value is not consumed). */
static int case_fail_write(void)
{
	solo_t s;
	solo_new(&s);
	CUcontext cu;
	CUstream st = stream_new(&cu);
	CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), LC_ERR_CUDA);
	CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), LC_ERR_CUDA);
	CHECK(word(s.e, LC_STEP_CACHE) == 0);
	CHECK(counter(s.ctx, "cuda_errors") == 2 && lc__cuda_errors() == 2);
	solo_free(&s);
	stream_free(st, cu);
	return 0;
}

/* FAKECUDA_FAIL=cuMemHostRegister_v2: no stream mode, the CPU still may. */
static int case_fail_register(void)
{
	solo_t s;
	solo_new(&s);
	CUcontext cu;
	CUstream st = stream_new(&cu);
	CHECK_RC(lc_engine_record_cache_on_stream(s.e, st), LC_ERR_CUDA);
	CHECK_RC(lc_engine_record_cache(s.e), 0);
	CHECK(word(s.e, LC_STEP_CACHE) == 1);
	CHECK(counter(s.ctx, "cuda_errors") == 1);
	solo_free(&s);
	stream_free(st, cu);
	return 0;
}

/* FAKECUDA_FAIL=cuMemcpyHtoDAsync_v2: the call fails, done never runs, and
 * later copies still complete in order. */
static int case_fail_copy(void)
{
	lc_ctx_t *c = ctx_new("copy");
	lc__copier_t *cp;
	CHECK_RC(lc__copier_cuda_create(c, 0, &cp), 0);
	uint8_t buf[64];
	CUdeviceptr d;
	CHECK_RC(lc__cuda_mem_alloc(&d, sizeof(buf)), 0);
	CHECK_RC(cp->ops->from_host(cp, (void *)(uintptr_t)d, buf, sizeof(buf), done_in_order,
				    (void *)0),
		 LC_ERR_CUDA);
	CHECK_RC(cp->ops->to_host(cp, buf, (void *)(uintptr_t)d, sizeof(buf), done_in_order,
				  (void *)7),
		 0);
	CHECK_RC(cp->ops->drain(cp, 0), 0);
	CHECK(ord.n == 1 && ord.seen[0] == 7);
	CHECK(counter(c, "cuda_errors") == 1);
	cp->ops->destroy(cp);
	lc__cuda_mem_free(d);
	lc_ctx_destroy(c);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} cases[] = {{"absent", case_absent},
		     {"nodev", case_nodev},
		     {"shim", case_shim},
		     {"copy", case_copy},
		     {"drain", case_drain},
		     {"steps", case_steps},
		     {"engine", case_engine},
		     {"fail_write", case_fail_write},
		     {"fail_register", case_fail_register},
		     {"fail_copy", case_fail_copy}};
	tu_watchdog(60);
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			int rc = cases[i].fn();
			if (!rc)
				printf("ok %s\n", cases[i].name);
			return rc;
		}
	fprintf(stderr, "usage: test_gpu CASE\n");
	return 2;
}
