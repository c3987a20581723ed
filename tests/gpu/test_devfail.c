/*
 * D's device copy failing mid-run, on the fake libcuda: D's destination is
 * CUDA memory, P's source host memory, both in this process over transport
 * <tp>. A write lands; then D's driver fails every host-to-device copy
 * (FAKECUDA_FAIL, read by the fake at each call): the next batch fails
 * with an I/O error and D counts it (device_copy_errors or cuda_errors),
 * nothing is written where
 * the copy failed; once the driver recovers, the next batch lands again.
 *
 * Usage: test_devfail <tp>   (loop, tcp, shm, ucx)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cuda.h"
#include "testutil.h"

#define REGION (4u << 20)
#define LEN (1u << 20)
#define ROOM 3

typedef struct world {
	lc_ctx_t *rx, *tx;
	lc_listener_t *l;
	lc_region_t *dreg, *sreg;
	CUdeviceptr dst;
	uint8_t *src, *view;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint32_t remote;
} world_t;

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

static void up(world_t *w, const char *tp)
{
	CUcontext cu;
	if (lc__cuda_load()) {
		fprintf(stderr, "skip: no CUDA (%s)\n", lc__cuda_why());
		exit(TU_SKIP);
	}
	TU_OK(lc__cuda_primary_ctx_retain(0, &cu));
	TU_OK(lc__cuda_ctx_set(cu));
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "d"},
			    &w->rx));
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "p"},
			    &w->tx));
	TU_OK(lc__cuda_mem_alloc(&w->dst, REGION));
	lc_region_params_t rp = {.size = sizeof rp, .kind = LC_MEM_KIND_CUDA};
	TU_OK(lc_region_register_ex(w->rx, (void *)(uintptr_t)w->dst, REGION, &rp, &w->dreg));
	TU_OK(lc_mem_alloc(REGION, LC_MEM_SHAREABLE, (void **)&w->src));
	tu_fill(w->src, REGION, 5);
	TU_OK(lc_region_register(w->tx, w->src, REGION, &w->sreg));
	w->view = malloc(REGION);
	char url[256];
	lc_token_t token;
	TU_OK(lc_listener_create(w->rx, tu_listen_url(tp), &w->l));
	TU_OK(lc_listener_url(w->l, url, sizeof url));
	TU_OK(lc_token_issue(w->rx, &token));
	TU_OK(lc_grant_issue(w->rx, ROOM, w->dreg, 0, REGION));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(w->dreg, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_cq_create(w->tx, &w->cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = w->cq, .token = token, .has_token = 1};
	TU_OK(lc_conn_create(w->tx, url, &cp, &w->conn));
	TU_OK(lc_conn_import_region(w->conn, desc, (size_t)n, &w->remote));
}

static void down(world_t *w)
{
	lc_conn_destroy(w->conn);
	lc_cq_destroy(w->cq);
	lc_listener_destroy(w->l);
	lc_ctx_destroy(w->tx);
	lc_ctx_destroy(w->rx);
	lc__cuda_mem_free(w->dst);
	lc_mem_free(w->src);
	free(w->view);
}

/* One write of LEN bytes from src_off to dst_off: its completion. */
static lc_completion_t post(world_t *w, uint64_t src_off, uint64_t dst_off)
{
	lc_write_t wr = {.local = w->src + src_off,
			 .remote_region = w->remote,
			 .remote_offset = dst_off,
			 .length = LEN};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(w->conn, &wr, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(w->cq, 30000);
	TU_CHECK(c.batch_id == id, "completion of another batch");
	return c;
}

static void expect_landed(world_t *w, uint64_t src_off, uint64_t dst_off)
{
	TU_OK(lc__cuda_memcpy_dtoh_async(w->view, w->dst + dst_off, LEN, NULL));
	TU_OK(lc__cuda_stream_synchronize(NULL));
	TU_CHECK(!memcmp(w->view, w->src + src_off, LEN), "D's bytes at %llu differ",
		 (unsigned long long)dst_off);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_devfail <tp>\n");
		return 2;
	}
	tu_watchdog(55);
	if (!tu_transport_built(argv[1])) {
		fprintf(stderr, "skip: transport %s is not built in\n", argv[1]);
		return TU_SKIP;
	}
	world_t w = {0};
	up(&w, argv[1]);
	lc_completion_t c = post(&w, 0, 0);
	TU_CHECK(c.status == 0, "first write: %s (%s)", lc_err_name(c.status), c.reason);
	expect_landed(&w, 0, 0);
	/* D's driver now fails its host-to-device copies. */
	setenv("FAKECUDA_FAIL", "cuMemcpyHtoDAsync_v2", 1);
	c = post(&w, LEN, LEN);
	unsetenv("FAKECUDA_FAIL");
	/* Its own cause: an I/O error, not a revoked grant (ucx reports what
	 * landed: LC_ERR_GRANT, "landed 0 of the 1 writes"). */
	TU_CHECK(c.status != 0 && c.reason[0] && !strstr(c.reason, "revoked"),
		 "a write whose device copy failed: %s (%s)", lc_err_name(c.status), c.reason);
	TU_CHECK(strcmp(argv[1], "ucx") ? c.status == LC_ERR_IO : 1, "%s, expected LC_ERR_IO",
		 lc_err_name(c.status));
	uint64_t errs = counter(w.rx, "device_copy_errors") + counter(w.rx, "cuda_errors");
	fprintf(stderr, "%s: the failed copy: %s (%s), D counted %llu copy errors\n",
		argv[1], lc_err_name(c.status), c.reason, (unsigned long long)errs);
	TU_CHECK(errs >= 1, "D counted no device copy error");
	/* The driver is back: the next batch lands (a new connection if the
	 * transport dropped the old one). */
	c = post(&w, 2 * LEN, 2 * LEN);
	if (c.status) {
		fprintf(stderr, "after the failure: %s (%s); reconnecting\n", lc_err_name(c.status),
			c.reason);
		c = post(&w, 2 * LEN, 2 * LEN);
	}
	TU_CHECK(c.status == 0, "after the driver recovered: %s (%s)", lc_err_name(c.status),
		 c.reason);
	expect_landed(&w, 2 * LEN, 2 * LEN);
	down(&w);
	printf("test_devfail %s: ok\n", argv[1]);
	return 0;
}
