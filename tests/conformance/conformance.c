/*
 * The transport conformance suite, written once and run for every transport:
 *     conformance <scheme> <case> [--mem [cuda-]src|dst|both [--no-ipc]]
 * Each case is its own process (ctest runs one per test). A transport not
 * built into the library, or not usable here, exits 77 (skipped); one that
 * rides an outside library (LC__TP_NEEDS_LIB: ucx), once built in, never
 * skips: failing to start is a failure. The suite knows no scheme: it asks
 * the transport's capabilities (LC__TP_*, transport/transport.h), and a case
 * that needs one the transport lacks exits 77 too.
 *
 * --mem puts the sender's source, the receiver's destination or both in
 * simulated device memory (lc_sim_alloc, docs/gpu.md): the harness then
 * keeps a host view of each (h->src, h->dst) and moves it with
 * lc_sim_write/lc_sim_read, never touching the device range itself.
 * --mem cuda-src|cuda-dst|cuda-both does the same with CUDA device memory
 * (cuMemAlloc, registered as LC_MEM_KIND_CUDA, filled and read with the
 * driver's copies): in CI it runs on the fake libcuda (tests/gpu/fakecuda.c,
 * LAYERCAKE_CUDA_LIB), on a GPU machine on the real one. Over shm with
 * CUDA on both sides the writes go by CUDA IPC (the case checks D's
 * ipc_writes counter); --no-ipc adds ?ipc=0 to the URL (forced staging,
 * checked by P's staging_bytes).
 *
 * Receiver memory is filled with a canary byte; every case checks that bytes
 * land exactly where they were written and granted, and nowhere else.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/cuda.h"
#include "testutil.h"
#include "transport/transport.h"

#define REGION (16u << 20)
#define CANARY 0xa5
#define ROOM 1
#define SEED 42
#define LC_MIN_U64(a, b) ((a) < (b) ? (a) : (b))

typedef struct harness {
	const char *tp;
	uint32_t caps; /* the transport's LC__TP_* */
	lc_ctx_t *rx, *tx;
	lc_listener_t *listener;
	char url[256];
	uint8_t *dst, *src;         /* host memory, or the host view of the sim's */
	uint8_t *dst_dev, *src_dev; /* simulated device memory (--mem), or NULL */
	bool sim_src, sim_dst;
	bool cuda;   /* the device memory is CUDA's, not the sim's */
	bool no_ipc; /* shm: ?ipc=0 */
	lc_region_t *dst_region, *src_region;
	uint32_t remote; /* the receiver's region id, as imported */
	lc_cq_t *cq;
	lc_conn_t *conn;
	lc_token_t token;
	pid_t child; /* receiver process, when the case needs one */
} harness_t;

/* A case that needs capabilities the transport lacks is skipped (77). */
static void need_caps(const harness_t *h, uint32_t caps, const char *what)
{
	if ((h->caps & caps) == caps)
		return;
	fprintf(stderr, "skip: the case needs %s, which transport %s lacks (caps 0x%x)\n", what,
		h->tp, (unsigned)h->caps);
	exit(TU_SKIP);
}

/* ---- device memory: the sim's or CUDA's ---- */

static void cuda_ready(void)
{
	static CUcontext cu;
	if (cu)
		return;
	int rc = lc__cuda_load();
	if (rc) {
		fprintf(stderr, "skip: no CUDA here (%s)\n", lc__cuda_why());
		exit(TU_SKIP);
	}
	TU_OK(lc__cuda_primary_ctx_retain(0, &cu));
	TU_OK(lc__cuda_ctx_set(cu));
}

static void dev_alloc(harness_t *h, uint8_t **out)
{
	if (!h->cuda) {
		TU_OK(lc_sim_alloc(REGION, (void **)out));
		return;
	}
	CUdeviceptr p;
	cuda_ready();
	TU_OK(lc__cuda_mem_alloc(&p, REGION));
	*out = (uint8_t *)(uintptr_t)p;
}

static void dev_free(harness_t *h, uint8_t *p)
{
	if (h->cuda)
		lc__cuda_mem_free((CUdeviceptr)(uintptr_t)p);
	else
		lc_sim_free(p);
}

static void dev_write(harness_t *h, uint8_t *dev, const uint8_t *host, size_t n)
{
	if (!h->cuda) {
		TU_OK(lc_sim_write(dev, host, n));
		return;
	}
	TU_OK(lc__cuda_memcpy_htod_async((CUdeviceptr)(uintptr_t)dev, host, n, NULL));
	TU_OK(lc__cuda_stream_synchronize(NULL));
}

static void dev_read(harness_t *h, uint8_t *host, const uint8_t *dev, size_t n)
{
	if (!h->cuda) {
		TU_OK(lc_sim_read(dev, host, n));
		return;
	}
	TU_OK(lc__cuda_memcpy_dtoh_async(host, (CUdeviceptr)(uintptr_t)dev, n, NULL));
	TU_OK(lc__cuda_stream_synchronize(NULL));
}

static int dev_kind(const harness_t *h)
{
	return h->cuda ? LC_MEM_KIND_CUDA : LC_MEM_KIND_SIM;
}

static int register_mem(harness_t *h, lc_ctx_t *ctx, void *p, bool dev, lc_region_t **out)
{
	lc_region_params_t rp = {.size = sizeof rp,
				 .kind = dev ? dev_kind(h) : (int)LC_MEM_KIND_HOST};
	return lc_region_register_ex(ctx, p, REGION, &rp, out);
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The receiver side: context, listener, canary-filled region, a token. */
static void receiver_setup(harness_t *h)
{
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "rx"},
			    &h->rx));
	TU_OK(lc_mem_alloc(REGION, LC_MEM_SHAREABLE, (void **)&h->dst));
	memset(h->dst, CANARY, REGION);
	if (h->sim_dst) {
		dev_alloc(h, &h->dst_dev);
		dev_write(h, h->dst_dev, h->dst, REGION);
	}
	TU_OK(register_mem(h, h->rx, h->dst_dev ? h->dst_dev : h->dst, h->sim_dst, &h->dst_region));
	TU_CHECK(lc_region_kind(h->dst_region) ==
			 (h->sim_dst ? dev_kind(h) : (int)LC_MEM_KIND_HOST),
		 "destination region kind %d", lc_region_kind(h->dst_region));
	int rc = lc_listener_create(h->rx, tu_listen_url(h->tp), &h->listener);
	/* A transport on an outside library is built in (main checked): its
	 * failing to start here is a failure of the suite, not a skip. */
	if ((rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) && !(h->caps & LC__TP_NEEDS_LIB)) {
		fprintf(stderr, "skip: %s cannot listen here: %s\n", h->tp, lc_strerror(rc));
		exit(TU_SKIP);
	}
	TU_OK(rc);
	TU_OK(lc_listener_url(h->listener, h->url, sizeof h->url));
	TU_OK(lc_token_issue(h->rx, &h->token));
}

/* The sender side: context, source region, queue, connection. */
static void sender_setup(harness_t *h, const uint8_t *desc, size_t dlen)
{
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "tx"},
			    &h->tx));
	TU_OK(lc_mem_alloc(REGION, LC_MEM_SHAREABLE, (void **)&h->src));
	tu_fill(h->src, REGION, SEED);
	if (h->sim_src) {
		dev_alloc(h, &h->src_dev);
		dev_write(h, h->src_dev, h->src, REGION);
	}
	TU_OK(register_mem(h, h->tx, h->src_dev ? h->src_dev : h->src, h->sim_src, &h->src_region));
	TU_OK(lc_cq_create(h->tx, &h->cq));
	lc_conn_params_t p = {.size = sizeof p, .cq = h->cq, .token = h->token, .has_token = 1};
	char url[sizeof h->url + 8];
	snprintf(url, sizeof url, "%s%s", h->url, h->no_ipc ? "?ipc=0" : "");
	TU_OK(lc_conn_create(h->tx, url, &p, &h->conn));
	TU_OK(lc_conn_import_region(h->conn, desc, dlen, &h->remote));
	lc_region_desc_t d;
	TU_OK(lc_region_unpack(desc, dlen, &d));
	TU_CHECK(d.mem_kind == (h->sim_dst ? dev_kind(h) : (int)LC_MEM_KIND_HOST),
		 "the descriptor says memory kind %d", d.mem_kind);
}

static void setup(harness_t *h)
{
	uint8_t desc[LC_REGION_DESC_MAX];
	receiver_setup(h);
	int dlen = lc_region_pack(h->dst_region, desc, sizeof desc);
	TU_OK(dlen);
	sender_setup(h, desc, (size_t)dlen);
}

/* Receiver in a child process (for cases that kill or stop the peer). The
 * child grants ROOM the whole region and sleeps until killed. */
static void setup_remote(harness_t *h)
{
	int fds[2];
	TU_CHECK(pipe(fds) == 0, "pipe");
	h->child = fork();
	TU_CHECK(h->child >= 0, "fork");
	if (h->child == 0) {
		uint8_t desc[LC_REGION_DESC_MAX];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		receiver_setup(h);
		TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
		int dlen = lc_region_pack(h->dst_region, desc, sizeof desc);
		TU_OK(dlen);
		uint32_t n = (uint32_t)dlen;
		if (write(fds[1], h->url, sizeof h->url) != (ssize_t)sizeof h->url ||
		    write(fds[1], &h->token, sizeof h->token) != (ssize_t)sizeof h->token ||
		    write(fds[1], &n, sizeof n) != (ssize_t)sizeof n ||
		    write(fds[1], desc, n) != (ssize_t)n)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t n = 0;
	TU_CHECK(read(fds[0], h->url, sizeof h->url) == (ssize_t)sizeof h->url &&
			 read(fds[0], &h->token, sizeof h->token) == (ssize_t)sizeof h->token &&
			 read(fds[0], &n, sizeof n) == (ssize_t)sizeof n && n <= sizeof desc &&
			 read(fds[0], desc, n) == (ssize_t)n,
		 "receiver child did not start");
	close(fds[0]);
	sender_setup(h, desc, n);
}

static void teardown(harness_t *h)
{
	if (h->child > 0) {
		kill(h->child, SIGKILL);
		waitpid(h->child, NULL, 0);
	}
	lc_ctx_destroy(h->tx);
	lc_ctx_destroy(h->rx);
	lc_cq_destroy(h->cq);
	if (h->src)
		lc_mem_free(h->src);
	if (h->dst)
		lc_mem_free(h->dst);
	if (h->src_dev)
		dev_free(h, h->src_dev);
	if (h->dst_dev)
		dev_free(h, h->dst_dev);
}

/* The sender's source as registered (device or host). */
static uint8_t *src_base(harness_t *h)
{
	return h->src_dev ? h->src_dev : h->src;
}

/* The host view of a source pointer of a write. */
static const uint8_t *src_view(harness_t *h, const void *local)
{
	return h->src + ((const uint8_t *)local - src_base(h));
}

/* Refresh the host view of [off, off+len) of the receiver's memory. */
static void sync_range(harness_t *h, uint64_t off, uint64_t len)
{
	if (h->dst_dev)
		dev_read(h, h->dst + off, h->dst_dev + off, LC_MIN_U64(len, REGION - off));
}

static void sync_dst(harness_t *h)
{
	sync_range(h, 0, REGION);
}

static lc_write_t wr(harness_t *h, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
	return (lc_write_t){.local = src_base(h) + src_off,
			    .remote_offset = dst_off,
			    .length = len,
			    .remote_region = h->remote};
}

static lc_completion_t post_wait(harness_t *h, const lc_write_t *w, size_t n, uint64_t room,
				 int64_t timeout_ms)
{
	lc_batch_params_t p = {.size = sizeof p, .room = room, .timeout_ms = timeout_ms};
	uint64_t id;
	TU_OK(lc_batch_post(h->conn, w, n, &p, &id));
	lc_completion_t c = tu_wait_one(h->cq, 30000);
	TU_CHECK(c.batch_id == id, "completion for batch %llu, expected %llu",
		 (unsigned long long)c.batch_id, (unsigned long long)id);
	return c;
}

static void expect_status(const lc_completion_t *c, int status)
{
	TU_CHECK(c->status == status, "status %s (%s), expected %s", lc_err_name(c->status),
		 c->reason, lc_err_name(status));
	TU_CHECK(status == 0 || c->reason[0], "a failed batch must carry a reason");
}

/* Every byte outside [lo, hi) still holds the canary. */
static void expect_canary_outside(harness_t *h, size_t lo, size_t hi)
{
	sync_dst(h);
	for (size_t i = 0; i < REGION; i++) {
		if (i == lo)
			i = hi;
		if (i >= REGION)
			break;
		TU_CHECK(h->dst[i] == CANARY, "byte %zu changed outside [%zu, %zu)", i, lo, hi);
	}
}

static void expect_same(harness_t *h, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
	sync_range(h, dst_off, len + 1); /* and the byte after, for gap checks */
	TU_CHECK(!memcmp(h->src + src_off, h->dst + dst_off, len),
		 "bytes at dst %llu differ from src %llu (+%llu)", (unsigned long long)dst_off,
		 (unsigned long long)src_off, (unsigned long long)len);
}

/* ---- cases ---- */

static void case_single_write(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 4096, 65536));
	lc_write_t w = wr(h, 0, 4096, 65536);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, 0);
	TU_CHECK(c.bytes == 65536 && c.room == ROOM, "bytes %llu room %llu",
		 (unsigned long long)c.bytes, (unsigned long long)c.room);
	expect_same(h, 0, 4096, 65536);
	expect_canary_outside(h, 4096, 4096 + 65536);
}

/* One 12 MiB write: past every transport's slice and staging chunk, and
 * over shm past the size (LC__SHM_SPLIT_MIN) that a second copy thread
 * (shm_copy_threads=2, conformance.shm_copy2.*) takes half of. */
static void case_large_write(harness_t *h)
{
	const uint64_t len = 12u << 20;
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 2u << 20, len));
	lc_write_t w = wr(h, 1u << 20, 2u << 20, len);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, 0);
	TU_CHECK(c.bytes == len, "bytes %llu", (unsigned long long)c.bytes);
	expect_same(h, 1u << 20, 2u << 20, len);
	expect_canary_outside(h, 2u << 20, (2u << 20) + len);
}

static void case_batch_10000(harness_t *h)
{
	enum { N = 10000, LEN = 512 };
	static lc_write_t w[N];
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, (uint64_t)N * LEN * 2));
	/* Scattered destinations: every other slot, in a shuffled order. */
	for (size_t i = 0; i < N; i++)
		w[i] = wr(h, i * LEN, ((i * 7919) % N) * 2 * LEN, LEN);
	lc_completion_t c = post_wait(h, w, N, ROOM, 0);
	expect_status(&c, 0);
	for (size_t i = 0; i < N; i++) {
		expect_same(h, i * LEN, ((i * 7919) % N) * 2 * LEN, LEN);
		TU_CHECK(h->dst[((i * 7919) % N) * 2 * LEN + LEN] == CANARY, "gap %zu written", i);
	}
}

/* LC_BATCH_DEFER: batches queued without waking the transport all start at
 * lc_conn_flush and land in place, each with its own completion; a post
 * with an unknown flag is refused. */
static void case_deferred_flush(harness_t *h)
{
	enum { N = 16, LEN = 8192 };
	bool seen[N] = {false};
	uint64_t id;
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, (uint64_t)N * LEN));
	lc_batch_params_t p = {.size = sizeof p, .room = ROOM, .flags = LC_BATCH_DEFER};
	lc_write_t w = wr(h, 0, 0, LEN);
	p.flags = 1u << 7;
	TU_CHECK(lc_batch_post(h->conn, &w, 1, &p, &id) == -EINVAL, "unknown flag accepted");
	p.flags = LC_BATCH_DEFER;
	for (uint32_t i = 0; i < N; i++) {
		w = wr(h, (uint64_t)i * LEN, (uint64_t)i * LEN, LEN);
		p.tag = i;
		TU_OK(lc_batch_post(h->conn, &w, 1, &p, &id));
	}
	TU_OK(lc_conn_flush(h->conn));
	for (int i = 0; i < N; i++) {
		lc_completion_t c = tu_wait_one(h->cq, 30000);
		expect_status(&c, 0);
		TU_CHECK(c.tag < N && !seen[c.tag], "completion for tag %u", c.tag);
		seen[c.tag] = true;
	}
	expect_same(h, 0, 0, (uint64_t)N * LEN);
	expect_canary_outside(h, 0, (size_t)N * LEN);
}

/* Strided writes (token-major pages under heterogeneous TP): each block of
 * a write lands at its strided destination, nothing between blocks is
 * touched, and the completion counts every block's bytes. */
static lc_write_t strided(harness_t *h, uint64_t src_off, uint64_t dst_off, uint64_t len,
			  uint32_t count, uint64_t src_stride, uint64_t dst_stride)
{
	lc_write_t w = wr(h, src_off, dst_off, len);
	w.count = count;
	w.local_stride = src_stride;
	w.remote_stride = dst_stride;
	return w;
}

static void case_strided_write(harness_t *h)
{
	enum { PAGES = 64, ROWS = 16, BLOCK = 128, SROW = 256, DROW = 512 };
	enum { SPAGE = ROWS * SROW, DPAGE = ROWS * DROW };
	/* And one write of more blocks than a sendmsg or readv takes iovecs
	 * (tcp: 1024), small ones, at D past the pages. */
	enum { MANY = 3000, MLEN = 32, MSRC = 64, MDST = 96, MOFF = (PAGES + 2) * DPAGE };
	static lc_write_t w[PAGES + 3];
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, (uint64_t)MOFF + MANY * MDST));
	/* One write per page: P's second half-row of each token (a GQA head
	 * split) into the second quarter of D's rows, pages in a scattered
	 * order; then a one-block "strided" write and a plain one. */
	uint64_t want = 0;
	for (size_t i = 0; i < PAGES; i++) {
		uint64_t d = (i * 37) % PAGES;
		w[i] = strided(h, i * SPAGE + BLOCK, d * DPAGE + BLOCK, BLOCK, ROWS, SROW, DROW);
		want += (uint64_t)ROWS * BLOCK;
	}
	w[PAGES] = strided(h, 0, (uint64_t)PAGES * DPAGE, 4096, 1, 1, 1);
	w[PAGES + 1] = wr(h, 8192, (uint64_t)(PAGES + 1) * DPAGE, 1000);
	want += 4096 + 1000;
	w[PAGES + 2] = strided(h, 0, MOFF, MLEN, MANY, MSRC, MDST);
	want += (uint64_t)MANY * MLEN;
	uint64_t applied0 = 0, applied1 = 0;
	TU_OK(lc_ctx_counter_by_name(h->rx, "writes_applied", &applied0));
	lc_completion_t c = post_wait(h, w, PAGES + 3, ROOM, 0);
	expect_status(&c, 0);
	/* A transport that carries strided writes natively (ops->strided:
	 * LC__TP_STRIDED: loop, shm, tcp) hands D each one as one descriptor,
	 * counted once; one that splits them counts every block (ucx; the CUDA
	 * IPC path of a LC__TP_CUDA_IPC transport, shm). */
	TU_OK(lc_ctx_counter_by_name(h->rx, "writes_applied", &applied1));
	bool native = (h->caps & LC__TP_STRIDED) && !(h->cuda && (h->caps & LC__TP_CUDA_IPC));
	TU_CHECK(!native || applied1 - applied0 == PAGES + 3,
		 "%s: D applied %llu writes for %d strided pages, 2 plain writes and one of "
		 "%d blocks (expected one descriptor per strided write)",
		 h->tp, (unsigned long long)(applied1 - applied0), PAGES, MANY);
	TU_CHECK(c.bytes == want, "completion bytes %llu, expected %llu",
		 (unsigned long long)c.bytes, (unsigned long long)want);
	sync_dst(h);
	for (size_t i = 0; i < PAGES; i++) {
		uint64_t d = (i * 37) % PAGES;
		for (size_t r = 0; r < ROWS; r++) {
			uint64_t so = i * SPAGE + BLOCK + r * SROW,
				 dof = d * DPAGE + BLOCK + r * DROW;
			TU_CHECK(!memcmp(h->src + so, h->dst + dof, BLOCK),
				 "page %zu row %zu: bytes at dst %llu differ", i, r,
				 (unsigned long long)dof);
		}
		/* Everything of D's page but the blocks keeps the canary. */
		for (uint64_t o = 0; o < DPAGE; o++) {
			bool in_block = o >= BLOCK && (o - BLOCK) % DROW < BLOCK;
			if (!in_block)
				TU_CHECK(h->dst[d * DPAGE + o] == CANARY,
					 "page %llu byte %llu between blocks was written",
					 (unsigned long long)d, (unsigned long long)o);
		}
	}
	expect_same(h, 0, (uint64_t)PAGES * DPAGE, 4096);
	expect_same(h, 8192, (uint64_t)(PAGES + 1) * DPAGE, 1000);
	for (uint64_t o = (uint64_t)(PAGES + 1) * DPAGE + 1000; o < MOFF; o++)
		TU_CHECK(h->dst[o] == CANARY, "byte %llu before the many-block write changed",
			 (unsigned long long)o);
	for (uint64_t k = 0; k < MANY; k++) {
		TU_CHECK(!memcmp(h->src + k * MSRC, h->dst + MOFF + k * MDST, MLEN),
			 "many-block write: block %llu differs", (unsigned long long)k);
		for (uint64_t o = MLEN; o < MDST; o++)
			TU_CHECK(h->dst[MOFF + k * MDST + o] == CANARY,
				 "many-block write: gap after block %llu written",
				 (unsigned long long)k);
	}
	expect_canary_outside(h, 0, (size_t)MOFF + MANY * MDST);
}

/* A strided write leaving the region or the grant fails at the receiver,
 * bad shapes are refused at post, and no byte lands. */
static void case_strided_bounds(harness_t *h)
{
	uint64_t id;
	lc_batch_params_t p = {.size = sizeof p, .room = ROOM};
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	/* First block inside, the last past the region's end. */
	lc_write_t past = strided(h, 0, REGION - 4096, 64, 16, 128, 1024);
	lc_completion_t c = post_wait(h, &past, 1, ROOM, 0);
	TU_CHECK(c.status == LC_ERR_OUT_OF_REGION || c.status == LC_ERR_GRANT,
		 "strided write past the region: %s", lc_err_name(c.status));
	uint64_t range = 0, grant = 0;
	TU_OK(lc_ctx_counter_by_name(h->rx, "writes_rejected_range", &range));
	TU_OK(lc_ctx_counter_by_name(h->rx, "writes_rejected_grant", &grant));
	/* ucx (LC__TP_SENDER_BOUNDS) refuses a write past the imported region
	 * at the sender. */
	TU_CHECK(range + grant >= 1 || (h->caps & LC__TP_SENDER_BOUNDS),
		 "the receiver counted no rejection");
	/* Overlapping blocks, a count over the cap, a span that overflows. */
	lc_write_t overlap = strided(h, 0, 0, 256, 4, 256, 128);
	TU_CHECK(lc_batch_post(h->conn, &overlap, 1, &p, &id) == -EINVAL, "overlap accepted");
	lc_write_t many = strided(h, 0, 0, 1, LC_WRITE_MAX_COUNT + 1, 1, 1);
	TU_CHECK(lc_batch_post(h->conn, &many, 1, &p, &id) == -EINVAL, "count cap not enforced");
	lc_write_t wrap = strided(h, 0, 0, 64, 4, 64, UINT64_MAX / 2);
	TU_CHECK(lc_batch_post(h->conn, &wrap, 1, &p, &id) == -EINVAL, "overflow accepted");
	/* A source block outside the sender's regions. */
	lc_write_t src_out = strided(h, 0, 0, 64, 2, REGION, 64);
	TU_CHECK(lc_batch_post(h->conn, &src_out, 1, &p, &id) == LC_ERR_REGION,
		 "source span outside the region accepted");
	/* Leaving the grant: granted [0, 64 KiB), blocks up to 96 KiB. */
	TU_OK(lc_grant_issue(h->rx, ROOM + 1, h->dst_region, 0, 65536));
	lc_write_t beyond = strided(h, 0, 0, 512, 4, 512, 32768);
	c = post_wait(h, &beyond, 1, ROOM + 1, 0);
	expect_status(&c, LC_ERR_GRANT);
	sync_dst(h);
	/* A receiver expanding blocks may land those inside before it meets
	 * the one outside; a native one checks the span first. Either way
	 * nothing lands outside the write's blocks. */
	for (size_t i = 0; i < REGION; i++) {
		bool blk = (i < 512) || (i >= 32768 && i < 32768 + 512) ||
			   (i >= 65536 && i < 65536 + 512);
		bool blk2 = i >= REGION - 4096 && (i - (REGION - 4096)) % 1024 < 64;
		if (!blk && !blk2)
			TU_CHECK(h->dst[i] == CANARY, "byte %zu changed", i);
	}
}

static void case_zero_length(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, 8192));
	lc_write_t only_empty = wr(h, 0, 0, 0);
	lc_completion_t c = post_wait(h, &only_empty, 1, ROOM, 0);
	expect_status(&c, 0);
	lc_write_t mixed[3] = {wr(h, 0, 100, 0), wr(h, 0, 0, 4096), wr(h, 0, 5000, 0)};
	c = post_wait(h, mixed, 3, ROOM, 0);
	expect_status(&c, 0);
	c = post_wait(h, NULL, 0, ROOM, 0);
	expect_status(&c, 0);
	expect_same(h, 0, 0, 4096);
	expect_canary_outside(h, 0, 4096);
}

static void case_outside_region(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	lc_write_t w = wr(h, 0, REGION - 100, 4096);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, LC_ERR_OUT_OF_REGION);
	lc_write_t w2 = wr(h, 0, UINT64_MAX - 10, 4096); /* offset + length wraps */
	c = post_wait(h, &w2, 1, ROOM, 0);
	expect_status(&c, LC_ERR_OUT_OF_REGION);
	expect_canary_outside(h, 0, 0);
}

static void case_outside_grant(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, 65536));
	lc_write_t straddle = wr(h, 0, 65536 - 512, 1024);
	lc_completion_t c = post_wait(h, &straddle, 1, ROOM, 0);
	expect_status(&c, LC_ERR_GRANT);
	lc_write_t beyond = wr(h, 0, 65536, 4096);
	c = post_wait(h, &beyond, 1, ROOM, 0);
	expect_status(&c, LC_ERR_GRANT);
	lc_write_t other_room = wr(h, 0, 0, 4096);
	c = post_wait(h, &other_room, 1, ROOM + 1, 0);
	expect_status(&c, LC_ERR_GRANT);
	expect_canary_outside(h, 0, 0);
	uint64_t rejected = 0;
	TU_OK(lc_ctx_counter_by_name(h->rx, "writes_rejected_grant", &rejected));
	TU_CHECK(rejected >= 3, "receiver counted %llu grant rejections",
		 (unsigned long long)rejected);
}

static void case_revoked_grant(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, 65536));
	lc_write_t w = wr(h, 0, 0, 65536);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, 0);
	TU_CHECK(lc_grant_revoke(h->rx, ROOM) == 1, "revoke should report one range");
	lc_write_t late = wr(h, 65536, 0, 65536); /* other bytes, same place */
	c = post_wait(h, &late, 1, ROOM, 0);
	expect_status(&c, LC_ERR_GRANT);
	expect_same(h, 0, 0, 65536); /* still the first write's bytes */
	expect_canary_outside(h, 0, 65536);
}

static void case_unknown_region(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	lc_write_t w = wr(h, 0, 0, 4096);
	w.remote_region = h->remote + 1000;
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, LC_ERR_REGION);
	expect_canary_outside(h, 0, 0);
	/* A source outside the sender's registered memory is refused at post. */
	uint8_t stack[64];
	lc_write_t bad = {.local = stack, .length = sizeof stack, .remote_region = h->remote};
	uint64_t id;
	TU_CHECK(lc_batch_post(h->conn, &bad, 1, NULL, &id) == LC_ERR_REGION,
		 "unregistered source accepted");
	TU_CHECK(lc_cq_poll(h->cq, &(lc_completion_t){0}, 1) == 0,
		 "a refused post must produce no completion");
}

typedef struct closer {
	harness_t *h;
	unsigned delay_ms;
} closer_t;

static void *close_listener_later(void *arg)
{
	closer_t *c = arg;
	/* Close mid-batch: once the batch has reached the peer (a staged
	 * source, --mem src, reaches it only after its copies). */
	uint64_t applied = 0, t0 = now_ms();
	while (!applied && now_ms() - t0 < 5000) {
		lc_ctx_counter_by_name(c->h->rx, "writes_applied", &applied);
		usleep(1000);
	}
	usleep(c->delay_ms * 1000);
	lc_listener_destroy(c->h->listener);
	c->h->listener = NULL;
	return NULL;
}

/* Stop the receiver child and wait until every one of its threads has
 * stopped. kill() only queues SIGSTOP: one thread must be scheduled to take
 * it before the others are stopped, and on a loaded machine the child's I/O
 * thread meanwhile finished whole batches (CI, 2026-12-06: a 30 MiB batch
 * over shm acknowledged "OK" after the stop was sent). */
static void stop_child(harness_t *h)
{
	int st = 0;
	TU_CHECK(kill(h->child, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	uint64_t t0 = now_ms();
	pid_t r;
	while ((r = waitpid(h->child, &st, WUNTRACED | WNOHANG)) == 0 && now_ms() - t0 < 10000)
		usleep(1000);
	TU_CHECK(r == h->child && WIFSTOPPED(st), "receiver child did not stop within 10 s");
}

static void case_peer_closes_mid_batch(harness_t *h)
{
	enum { N = 4096, LEN = 65536 };
	static lc_write_t w[N];
	lc_completion_t c;
	if (!(h->caps & LC__TP_REMOTE)) {
		/* In-process peer: slow the writes down, close the listener. */
		need_caps(h, LC__TP_FAULTS, "an in-process peer slowed down by faults");
		setup(h);
		TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
		lc_loop_faults_t f = {.size = sizeof f, .mask = LC_FAULT_DELAY, .delay_us = 1000};
		TU_OK(lc_loop_set_faults(h->conn, &f));
		for (size_t i = 0; i < 200; i++)
			w[i] = wr(h, i * LEN, i * LEN, LEN);
		pthread_t t;
		closer_t cl = {h, 20};
		lc_batch_params_t p = {.size = sizeof p, .room = ROOM, .timeout_ms = 20000};
		uint64_t id, t0 = now_ms();
		TU_OK(lc_batch_post(h->conn, w, 200, &p, &id));
		pthread_create(&t, NULL, close_listener_later, &cl);
		c = tu_wait_one(h->cq, 30000);
		pthread_join(t, NULL);
		TU_CHECK(now_ms() - t0 < 10000, "failure took %llu ms",
			 (unsigned long long)(now_ms() - t0));
	} else {
		/* A real peer process, killed while a 256 MiB batch is under way. */
		setup_remote(h);
		lc_write_t first = wr(h, 0, 0, 4096);
		c = post_wait(h, &first, 1, ROOM, 0);
		expect_status(&c, 0);
		/* A device source is staged first (unless it goes by CUDA IPC):
		 * 30 MiB fit the staging ring, where 256 MiB would first allocate
		 * a one-off buffer, seconds on a loaded 2-core VM before the
		 * batch is even posted. */
		size_t n = h->src_dev ? 480 : N;
		for (size_t i = 0; i < n; i++)
			w[i] = wr(h, (i * LEN) % REGION, (i * LEN) % REGION, LEN);
		lc_batch_params_t p = {.size = sizeof p, .room = ROOM, .timeout_ms = 20000};
		/* The peer is stopped before the post, so that the batch cannot
		 * finish before the kill lands (30 MiB over shm took less time
		 * than SIGKILL on a quiet machine), and killed once the batch is
		 * under way. */
		stop_child(h);
		uint64_t id, t0 = now_ms();
		TU_OK(lc_batch_post(h->conn, w, n, &p, &id));
		usleep(20000);
		kill(h->child, SIGKILL);
		waitpid(h->child, NULL, 0);
		h->child = 0;
		c = tu_wait_one(h->cq, 30000);
		TU_CHECK(now_ms() - t0 < 10000, "failure took %llu ms, deadline was 20000",
			 (unsigned long long)(now_ms() - t0));
	}
	/* The kill races the I/O thread taking the batch: lanes that saw the
	 * close before their work arrived reconnect and are refused, which is
	 * UNREACHABLE. Either way the batch fails fast, with a reason. */
	TU_CHECK(c.status == LC_ERR_PEER_CLOSED || c.status == LC_ERR_IO ||
			 (c.status == LC_ERR_UNREACHABLE && (h->caps & LC__TP_REMOTE)),
		 "status %s (%s), expected the peer's close", lc_err_name(c.status), c.reason);
	TU_CHECK(c.reason[0], "no reason");
	fprintf(stderr, "peer closed: %s\n", c.reason);
}

/* A peer that accepts but never answers: a stopped process (or, on loop,
 * writes delayed far past every deadline). */
static void stalled_peer(harness_t *h)
{
	if (!(h->caps & LC__TP_REMOTE)) {
		need_caps(h, LC__TP_FAULTS, "an in-process peer stalled by faults");
		setup(h);
		TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
		lc_write_t w = wr(h, 0, 0, 4096);
		lc_completion_t c = post_wait(h, &w, 1, ROOM, 0); /* connected and working */
		expect_status(&c, 0);
		/* Every further write waits 60 s: the peer looks stopped. */
		lc_loop_faults_t f = {
			.size = sizeof f, .mask = LC_FAULT_DELAY, .delay_us = 60000000};
		TU_OK(lc_loop_set_faults(h->conn, &f));
	} else {
		setup_remote(h);
		lc_write_t w = wr(h, 0, 0, 4096);
		lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
		expect_status(&c, 0);
		stop_child(h);
	}
}

static void case_deadline_expiry(harness_t *h)
{
	stalled_peer(h);
	lc_write_t w = wr(h, 0, 8192, 4096);
	uint64_t t0 = now_ms();
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 300);
	uint64_t took = now_ms() - t0;
	expect_status(&c, LC_ERR_EXPIRED);
	TU_CHECK(took >= 250 && took < 5000, "expired after %llu ms, deadline 300 ms",
		 (unsigned long long)took);
}

static void case_cancel_room(harness_t *h)
{
	stalled_peer(h);
	lc_write_t w = wr(h, 0, 8192, 4096);
	lc_batch_params_t p = {.size = sizeof p, .room = ROOM, .timeout_ms = 20000};
	lc_batch_params_t other = {.size = sizeof p, .room = ROOM + 1, .timeout_ms = 20000};
	uint64_t id, id_other;
	TU_OK(lc_batch_post(h->conn, &w, 1, &p, &id));
	TU_OK(lc_batch_post(h->conn, &w, 1, &other, &id_other));
	TU_CHECK(lc_conn_room_cancel(h->conn, ROOM) == 1, "one batch should be cancelled");
	lc_completion_t c = tu_wait_one(h->cq, 2000);
	TU_CHECK(c.batch_id == id, "cancelled the wrong batch");
	expect_status(&c, LC_ERR_CANCELLED);
	TU_CHECK(lc_cq_poll(h->cq, &c, 1) == 0, "the other room's batch must stay pending");
	TU_CHECK(lc_conn_room_cancel(h->conn, ROOM) == 0, "nothing left to cancel");
}

typedef struct submitter {
	harness_t *h;
	size_t base;
	int rc;
} submitter_t;

static void *submit_many(void *arg)
{
	submitter_t *s = arg;
	enum { BATCHES = 200, PER = 16, LEN = 1024 };
	for (size_t b = 0; b < BATCHES && !s->rc; b++) {
		lc_write_t w[PER];
		for (size_t i = 0; i < PER; i++) {
			size_t off = s->base + (b * PER + i) * LEN;
			w[i] = wr(s->h, off, off, LEN);
		}
		lc_batch_params_t p = {.size = sizeof p, .room = ROOM, .user_data = s->base};
		uint64_t id;
		s->rc = lc_batch_post(s->h->conn, w, PER, &p, &id);
	}
	return NULL;
}

static void case_two_threads(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	submitter_t s[2] = {{h, 0, 0}, {h, 8u << 20, 0}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, submit_many, &s[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	TU_OK(s[0].rc);
	TU_OK(s[1].rc);
	size_t per_thread[2] = {0, 0};
	for (int got = 0; got < 400; got++) {
		lc_completion_t c = tu_wait_one(h->cq, 30000);
		expect_status(&c, 0);
		per_thread[c.user_data ? 1 : 0]++;
	}
	TU_CHECK(per_thread[0] == 200 && per_thread[1] == 200, "completions %zu + %zu",
		 per_thread[0], per_thread[1]);
	TU_CHECK(lc_cq_poll(h->cq, &(lc_completion_t){0}, 1) == 0, "extra completion");
	expect_same(h, 0, 0, 200 * 16 * 1024);
	expect_same(h, 8u << 20, 8u << 20, 200 * 16 * 1024);
}

/* Small batches one at a time on a warm connection: the posting thread
 * sends them itself (sends_inline), and every byte lands. */
static void case_inline_send(harness_t *h)
{
	need_caps(h, LC__TP_INLINE_SEND, "inline sends");
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	lc_write_t w = wr(h, 0, 0, 4096);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0); /* warm */
	expect_status(&c, 0);
	uint64_t before = counter(h->tx, "sends_inline");
	for (int i = 1; i <= 64; i++) {
		w = wr(h, (uint64_t)i * 8192, (uint64_t)i * 4096, 4096);
		c = post_wait(h, &w, 1, ROOM, 0);
		expect_status(&c, 0);
	}
	uint64_t inl = counter(h->tx, "sends_inline") - before;
	fprintf(stderr, "%llu of 64 batches sent inline\n", (unsigned long long)inl);
	/* A device source is staged, and staging posts from its own thread
	 * with the source in host memory: inline too, but not every time. One
	 * that goes by CUDA IPC is the I/O thread's (exports, fds). */
	bool ipc = h->src_dev && h->cuda && (h->caps & LC__TP_CUDA_IPC) && !h->no_ipc;
	TU_CHECK(inl > 0 || ipc, "no batch was sent inline");
	for (int i = 1; i <= 64; i++)
		expect_same(h, (uint64_t)i * 8192, (uint64_t)i * 4096, 4096);
}

/* A caller that never spins in lc_cq_wait (an event loop: poll() on the
 * queue's fd, then lc_cq_poll), with pauses that let the loops go to
 * sleep: every completion still comes, each well within a loop's longest
 * sleep (1 s; over shm, D rings P's parked loop when nobody polls). */
static void case_fd_wait(harness_t *h)
{
	enum { N = 8, LEN = 4096 };
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, (uint64_t)N * LEN));
	int fd = lc_cq_fd(h->cq);
	TU_CHECK(fd >= 0, "no queue fd");
	for (uint32_t i = 0; i < N; i++) {
		usleep(30000);
		lc_write_t w = wr(h, (uint64_t)i * LEN, (uint64_t)i * LEN, LEN);
		lc_batch_params_t p = {.size = sizeof p, .room = ROOM};
		uint64_t id;
		TU_OK(lc_batch_post(h->conn, &w, 1, &p, &id));
		lc_completion_t c;
		int n = 0;
		for (int k = 0; k < 100 && n == 0; k++) {
			struct pollfd pf = {.fd = fd, .events = POLLIN};
			if (poll(&pf, 1, 900) == 0)
				break;
			n = lc_cq_poll(h->cq, &c, 1);
		}
		TU_CHECK(n == 1, "write %u: no completion on the queue's fd within 900 ms", i);
		TU_CHECK(c.batch_id == id, "completion for another batch");
		expect_status(&c, 0);
	}
	expect_same(h, 0, 0, (uint64_t)N * LEN);
	fprintf(stderr, "lane writes %llu, rings D->P %llu\n",
		(unsigned long long)counter(h->rx, "lane_writes"),
		(unsigned long long)counter(h->rx, "lane_rings"));
}

/* A batch sent inline to a peer that stops: the connection's own stall
 * deadline (progress_timeout_ms, 500 ms here) still fails it, long before
 * the batch's 30 s deadline; the posting thread left an alarm for it. */
static void case_inline_stall(harness_t *h)
{
	need_caps(h, LC__TP_INLINE_SEND | LC__TP_REMOTE, "inline sends to another process");
	setenv("LAYERCAKE_PROGRESS_TIMEOUT_MS", "500", 1);
	stalled_peer(h);
	uint64_t before = counter(h->tx, "sends_inline");
	lc_write_t w = wr(h, 0, 8192, 4096);
	uint64_t t0 = now_ms();
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 30000);
	fprintf(stderr, "stalled: %s (%s) after %llu ms, %llu sent inline\n", lc_err_name(c.status),
		c.reason, (unsigned long long)(now_ms() - t0),
		(unsigned long long)(counter(h->tx, "sends_inline") - before));
	TU_CHECK(c.status == LC_ERR_STALLED, "status %s (%s), expected the stall",
		 lc_err_name(c.status), c.reason);
	TU_CHECK(now_ms() - t0 < 20000, "the stall took %llu ms",
		 (unsigned long long)(now_ms() - t0));
	kill(h->child, SIGCONT);
}

static void case_checksum_all(harness_t *h)
{
	enum { MAXW = 512 };
	static lc_write_t w[MAXW];
	size_t n = 0, off = 0;
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	/* Sizes from 1 byte to 1 MiB at odd offsets, a canary gap after each. */
	for (size_t len = 1; n < MAXW && off + len + 3 < REGION; len = len * 3 + 1) {
		if (len > (1u << 20))
			len = 1;
		w[n] = wr(h, (n * 4099) % (REGION - len), off, len);
		n++;
		off += len + 3;
	}
	lc_completion_t c = post_wait(h, w, n, ROOM, 0);
	expect_status(&c, 0);
	uint64_t written = 0;
	sync_dst(h);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *s = src_view(h, w[i].local);
		TU_CHECK(tu_checksum(s, w[i].length) ==
				 tu_checksum(h->dst + w[i].remote_offset, w[i].length),
			 "checksum of write %zu (%llu bytes) differs", i,
			 (unsigned long long)w[i].length);
		for (int g = 0; g < 3; g++)
			TU_CHECK(h->dst[w[i].remote_offset + w[i].length + g] == CANARY,
				 "gap after write %zu", i);
		written += w[i].length;
	}
	TU_CHECK(c.bytes == written, "completion bytes %llu, wrote %llu",
		 (unsigned long long)c.bytes, (unsigned long long)written);
	uint64_t applied;
	TU_OK(lc_ctx_counter_by_name(h->rx, "bytes_applied", &applied));
	TU_CHECK(applied == written, "receiver applied %llu bytes of %llu",
		 (unsigned long long)applied, (unsigned long long)written);
}

static void case_bad_token(harness_t *h)
{
	setup(h);
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, REGION));
	lc_conn_t *good = h->conn;
	uint8_t desc[LC_REGION_DESC_MAX];
	int dlen = lc_region_pack(h->dst_region, desc, sizeof desc);
	for (int variant = 0; variant < 2; variant++) {
		lc_conn_params_t p = {.size = sizeof p,
				      .cq = h->cq,
				      .token = h->token,
				      .has_token = variant == 0};
		p.token.bytes[3] ^= 0x40;
		lc_conn_t *bad;
		TU_OK(lc_conn_create(h->tx, h->url, &p, &bad));
		TU_OK(lc_conn_import_region(bad, desc, (size_t)dlen, &h->remote));
		h->conn = bad;
		lc_write_t w = wr(h, 0, 0, 4096);
		lc_completion_t c = post_wait(h, &w, 1, ROOM, 10000);
		expect_status(&c, LC_ERR_AUTH);
		lc_conn_destroy(bad);
	}
	h->conn = good;
	expect_canary_outside(h, 0, 0);
	uint64_t rejected;
	TU_OK(lc_ctx_counter_by_name(h->rx, "conns_rejected_auth", &rejected));
	TU_CHECK(rejected >= 2, "listener counted %llu rejections", (unsigned long long)rejected);
	lc_write_t w = wr(h, 0, 0, 4096); /* the good connection still works */
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, 0);
}

/* A room bound to a token (lc_grant_bind) takes writes only from
 * connections that presented it: another token the receiver accepts is
 * refused with LC_ERR_GRANT, counted in writes_rejected_token, and lands
 * nothing, while it may still write a room bound to no one; the binding
 * goes with the room's revoke. */
static void case_bound_token(harness_t *h)
{
	setup(h);
	lc_token_t other;
	TU_OK(lc_token_issue(h->rx, &other));
	TU_OK(lc_grant_bind(h->rx, ROOM, &h->token)); /* before the range: no moment open */
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, 65536));
	TU_OK(lc_grant_issue(h->rx, ROOM + 1, h->dst_region, 65536, 65536));
	lc_conn_t *good = h->conn, *stranger;
	uint8_t desc[LC_REGION_DESC_MAX];
	int dlen = lc_region_pack(h->dst_region, desc, sizeof desc);
	lc_conn_params_t p = {.size = sizeof p, .cq = h->cq, .token = other, .has_token = 1};
	char url[sizeof h->url + 8];
	snprintf(url, sizeof url, "%s%s", h->url, h->no_ipc ? "?ipc=0" : "");
	TU_OK(lc_conn_create(h->tx, url, &p, &stranger));
	TU_OK(lc_conn_import_region(stranger, desc, (size_t)dlen, &h->remote));
	h->conn = stranger;
	lc_write_t w = wr(h, 0, 0, 4096);
	lc_completion_t c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, LC_ERR_GRANT);
	lc_write_t blocks = {.local = src_base(h),
			     .remote_offset = 8192,
			     .length = 512,
			     .remote_region = h->remote,
			     .count = 4,
			     .local_stride = 1024,
			     .remote_stride = 1024};
	c = post_wait(h, &blocks, 1, ROOM, 0);
	expect_status(&c, LC_ERR_GRANT);
	expect_canary_outside(h, 0, 0);
	TU_CHECK(counter(h->rx, "writes_rejected_token") >= 2,
		 "receiver counted %llu token rejections",
		 (unsigned long long)counter(h->rx, "writes_rejected_token"));
	lc_write_t open_room = wr(h, 65536, 65536, 4096); /* bound to no one */
	c = post_wait(h, &open_room, 1, ROOM + 1, 0);
	expect_status(&c, 0);
	h->conn = good;
	c = post_wait(h, &w, 1, ROOM, 0);
	expect_status(&c, 0);
	expect_same(h, 0, 0, 4096);
	expect_same(h, 65536, 65536, 4096);
	/* The binding goes with the revoke: the room granted again is open. */
	TU_CHECK(lc_grant_revoke(h->rx, ROOM) == 1, "revoke should report one range");
	TU_OK(lc_grant_issue(h->rx, ROOM, h->dst_region, 0, 65536));
	h->conn = stranger;
	lc_write_t again = wr(h, 4096, 4096, 4096);
	c = post_wait(h, &again, 1, ROOM, 0);
	expect_status(&c, 0);
	expect_same(h, 4096, 4096, 4096);
	h->conn = good;
	lc_conn_destroy(stranger);
	/* Misuse: refused, each with its code. */
	TU_CHECK(lc_grant_bind(h->rx, ROOM, NULL) == -EINVAL, "bind to NULL");
	TU_CHECK(lc_grant_bind(NULL, ROOM, &other) == -EINVAL, "bind on NULL");
	TU_OK(lc_token_revoke(h->rx, &other));
	TU_CHECK(lc_grant_bind(h->rx, ROOM, &other) == -ENOENT, "bind to a revoked token");
	TU_CHECK(lc_grant_bind(h->tx, ROOM, &h->token) == -ENOENT,
		 "bind to another context's token");
}

static void case_unreachable_peer(harness_t *h)
{
	setup(h);
	char url[256];
	if (h->caps & LC__TP_HOST_PORT) {
		/* A port that was just free: bind, read it, close. */
		lc_listener_t *tmp;
		TU_OK(lc_listener_create(h->rx, tu_listen_url(h->tp), &tmp));
		TU_OK(lc_listener_url(tmp, url, sizeof url));
		lc_listener_destroy(tmp);
	} else {
		snprintf(url, sizeof url, "%s://layercake-nobody-%d", h->tp, (int)getpid());
	}
	lc_conn_params_t p = {.size = sizeof p, .cq = h->cq, .token = h->token, .has_token = 1};
	lc_conn_t *c;
	uint64_t t0 = now_ms();
	TU_OK(lc_conn_create(h->tx, url, &p, &c));
	TU_CHECK(now_ms() - t0 < 1000, "lc_conn_create blocked for %llu ms",
		 (unsigned long long)(now_ms() - t0));
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t rid;
	int dlen = lc_region_pack(h->dst_region, desc, sizeof desc);
	TU_OK(lc_conn_import_region(c, desc, (size_t)dlen, &rid));
	lc_write_t w = {.local = src_base(h), .length = 4096, .remote_region = rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(c, &w, 1, &bp, &id));
	lc_completion_t done = tu_wait_one(h->cq, 30000);
	expect_status(&done, LC_ERR_UNREACHABLE);
	TU_CHECK(now_ms() - t0 < 6000, "failing took %llu ms", (unsigned long long)(now_ms() - t0));
	fprintf(stderr, "unreachable: %s\n", done.reason);
	lc_conn_destroy(c);
}

static const struct {
	const char *name;
	void (*run)(harness_t *);
} cases[] = {
	{"single_write", case_single_write},
	{"large_write", case_large_write},
	{"batch_10000", case_batch_10000},
	{"zero_length", case_zero_length},
	{"outside_region", case_outside_region},
	{"outside_grant", case_outside_grant},
	{"revoked_grant", case_revoked_grant},
	{"unknown_region", case_unknown_region},
	{"peer_closes_mid_batch", case_peer_closes_mid_batch},
	{"deadline_expiry", case_deadline_expiry},
	{"cancel_room", case_cancel_room},
	{"two_threads", case_two_threads},
	{"inline_send", case_inline_send},
	{"inline_stall", case_inline_stall},
	{"checksum_all", case_checksum_all},
	{"bad_token", case_bad_token},
	{"bound_token", case_bound_token},
	{"unreachable_peer", case_unreachable_peer},
	{"deferred_flush", case_deferred_flush},
	{"fd_wait", case_fd_wait},
	{"strided_write", case_strided_write},
	{"strided_bounds", case_strided_bounds},
};

/* A LC__TP_CUDA_IPC transport (shm) with CUDA sources: every write that landed went by CUDA IPC, or,
 * with ?ipc=0, through the staging ring. */
static void check_ipc(harness_t *h)
{
	if (!h->cuda || !h->sim_src || !(h->caps & LC__TP_CUDA_IPC) || !h->rx || !h->tx ||
	    counter(h->rx, "writes_applied") == 0)
		return;
	uint64_t ipc = counter(h->rx, "ipc_writes"), staged = counter(h->tx, "staging_bytes");
	if (h->no_ipc)
		TU_CHECK(ipc == 0 && staged > 0, "?ipc=0: %llu IPC writes, %llu bytes staged",
			 (unsigned long long)ipc, (unsigned long long)staged);
	else
		TU_CHECK(ipc > 0 && staged == 0 && counter(h->tx, "ipc_exports") >= 1 &&
				 counter(h->rx, "ipc_imports") >= 1,
			 "CUDA IPC: %llu IPC writes, %llu bytes staged", (unsigned long long)ipc,
			 (unsigned long long)staged);
}

int main(int argc, char **argv)
{
	const char *mem = argc >= 5 && !strcmp(argv[3], "--mem") ? argv[4] : "";
	bool no_ipc = argc == 6 && !strcmp(argv[5], "--no-ipc");
	bool cuda = strstr(mem, "cuda-") ==
		    mem; /* a prefix (strncmp on a maybe-empty literal trips -Wstring-compare) */
	if (cuda)
		mem += 5;
	if ((argc != 3 && !*mem) || (argc == 6 && !no_ipc) || argc > 6) {
		fprintf(stderr, "usage: conformance <transport> <case> "
				"[--mem [cuda-]src|dst|both [--no-ipc]]\n");
		return 2;
	}
	tu_watchdog(55);
	signal(SIGPIPE, SIG_IGN);
	harness_t h = {.tp = argv[1],
		       .sim_src = !strcmp(mem, "src") || !strcmp(mem, "both"),
		       .sim_dst = !strcmp(mem, "dst") || !strcmp(mem, "both"),
		       .cuda = cuda,
		       .no_ipc = no_ipc};
	if (!tu_transport_built(h.tp)) {
		fprintf(stderr, "skip: transport %s is not built in (have: %s)\n", h.tp,
			lc_transports());
		return TU_SKIP;
	}
	h.caps = tu_transport_caps(h.tp);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (strcmp(argv[2], cases[i].name))
			continue;
		cases[i].run(&h);
		check_ipc(&h);
		teardown(&h);
		printf("conformance %s %s: ok\n", h.tp, cases[i].name);
		return 0;
	}
	fprintf(stderr, "unknown case %s\n", argv[2]);
	return 2;
}
