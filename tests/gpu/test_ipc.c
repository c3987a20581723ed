/*
 * shm's CUDA IPC mode (docs/gpu.md "CUDA IPC") with two real processes, on
 * the fake libcuda (tests/gpu/fakecuda.c: device memory is a memfd per
 * allocation, and an IPC handle is opened by mapping /proc/<pid>/fd/<n>).
 * The receiver (D) is a forked child that serves one listener; its
 * destination memory is allocated before the fork as a shared mapping, so
 * that the parent (P) can check every byte. Run as `test_ipc <case>`:
 *
 *   ipc          CUDA -> CUDA by IPC: D imports once, copies each write,
 *                nothing staged; the import is closed when P disconnects
 *   vmm          the same with FAKECUDA_VMM=1: an fd over SCM_RIGHTS
 *   staged       ?ipc=0: staged through the ring, no IPC write
 *   host_dst     CUDA -> host memory of a D that has CUDA: IPC, device to host
 *   d_nocuda     D without CUDA: the WELCOME refuses IPC, P stages
 *   one_alloc    two regions carved from one allocation: two exports, one import
 *   bad_handle   a raw peer sends a handle D cannot open: its writes are
 *                acknowledged with an error, ipc_rejected, connection kept
 *   bad_size     a real handle claiming a larger allocation: LC_ERR_OUT_OF_REGION,
 *                and the import is closed again
 *   bad_range    a region beyond its allocation, a write beyond its region,
 *                an IPC region without IPC accepted: malformed, connection closed
 *   fail_open, fail_vmm_import, fail_vmm_map, fail_vmm_access
 *                D's driver refuses the import (cuIpcOpenMemHandle, or a step
 *                of the VMM import: FAKECUDA_VMM=1): the writes fail with a
 *                reason, ipc_rejected, and nothing stays mapped at D
 *   fail_dtod, fail_dtoh
 *                D's driver fails the copy itself (device to device into
 *                CUDA memory, device to host into host memory): the batch
 *                fails with LC_ERR_IO, device_copy_errors counted
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/cuda.h"
#include "testutil.h"
#include "transport/shm/shm_int.h"

#define REGION (8u << 20)
#define ROOM 7
#define SEED 1234

enum dmode { D_CUDA, D_HOST, D_HOST_NOCUDA };

typedef struct counters {
	uint64_t ipc_writes, ipc_imports, ipc_rejected, malformed, applied, copy_errors;
	long maps; /* fake device mappings in D (memfd:fakecuda lines of its maps) */
} counters_t;

typedef struct child {
	pid_t pid;
	int to, from;
	char url[256];
	lc_token_t token;
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t dlen;
	uint8_t *dst; /* shared with the child */
	enum dmode mode;
	const char *fail; /* FAKECUDA_FAIL in D alone, or NULL */
} child_t;

static void cuda_ready(void)
{
	static CUcontext cu;
	if (cu)
		return;
	if (lc__cuda_load()) {
		fprintf(stderr, "skip: no CUDA (%s)\n", lc__cuda_why());
		exit(TU_SKIP);
	}
	TU_OK(lc__cuda_primary_ctx_retain(0, &cu));
	TU_OK(lc__cuda_ctx_set(cu));
}

static long fake_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	long n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		n += strstr(line, "memfd:fakecuda") != NULL;
	fclose(f);
	return n;
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

static void full_write(int fd, const void *p, size_t n)
{
	TU_CHECK(write(fd, p, n) == (ssize_t)n, "pipe write");
}

static void full_read(int fd, void *p, size_t n)
{
	TU_CHECK(read(fd, p, n) == (ssize_t)n, "pipe read");
}

/* The child: a receiver that answers 'c' with its counters until 'q'. */
static void child_main(child_t *c, int in, int out)
{
	lc_ctx_t *rx;
	lc_region_t *r;
	lc_listener_t *l;
	if (c->fail) /* the fake reads it at each call: P is not affected */
		setenv("FAKECUDA_FAIL", c->fail, 1);
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "d"}, &rx));
	if (c->mode == D_HOST)
		cuda_ready(); /* D has CUDA, its destination is host memory */
	lc_region_params_t rp = {.size = sizeof rp,
				 .kind = c->mode == D_CUDA ? LC_MEM_KIND_CUDA : LC_MEM_KIND_HOST};
	TU_OK(lc_region_register_ex(rx, c->dst, REGION, &rp, &r));
	TU_OK(lc_listener_create(rx, tu_listen_url("shm"), &l));
	TU_OK(lc_listener_url(l, c->url, sizeof c->url));
	TU_OK(lc_token_issue(rx, &c->token));
	TU_OK(lc_grant_issue(rx, ROOM, r, 0, REGION));
	int n = lc_region_pack(r, c->desc, sizeof c->desc);
	TU_OK(n);
	c->dlen = (uint32_t)n;
	full_write(out, c->url, sizeof c->url);
	full_write(out, &c->token, sizeof c->token);
	full_write(out, &c->dlen, sizeof c->dlen);
	full_write(out, c->desc, c->dlen);
	for (;;) {
		char cmd;
		if (read(in, &cmd, 1) != 1 || cmd == 'q')
			break;
		counters_t k = {.ipc_writes = counter(rx, "ipc_writes"),
				.ipc_imports = counter(rx, "ipc_imports"),
				.ipc_rejected = counter(rx, "ipc_rejected"),
				.malformed = counter(rx, "frames_malformed"),
				.applied = counter(rx, "writes_applied"),
				.copy_errors = counter(rx, "device_copy_errors"),
				.maps = fake_maps()};
		full_write(out, &k, sizeof k);
	}
	lc_listener_destroy(l);
	lc_ctx_destroy(rx);
	_exit(0);
}

static void child_start(child_t *c, enum dmode mode)
{
	int a[2], b[2];
	c->mode = mode;
	if (mode == D_CUDA) {
		CUdeviceptr p;
		cuda_ready();
		TU_OK(lc__cuda_mem_alloc(&p, REGION)); /* a MAP_SHARED memfd in the fake */
		c->dst = (uint8_t *)(uintptr_t)p;
	} else {
		c->dst = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
			      0);
		TU_CHECK(c->dst != MAP_FAILED, "mmap");
	}
	memset(c->dst, 0xa5, REGION);
	TU_CHECK(pipe(a) == 0 && pipe(b) == 0, "pipe");
	c->pid = fork();
	TU_CHECK(c->pid >= 0, "fork");
	if (c->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[1]);
		close(b[0]);
		child_main(c, a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	c->to = a[1];
	c->from = b[0];
	full_read(c->from, c->url, sizeof c->url);
	full_read(c->from, &c->token, sizeof c->token);
	full_read(c->from, &c->dlen, sizeof c->dlen);
	TU_CHECK(c->dlen <= sizeof c->desc, "descriptor");
	full_read(c->from, c->desc, c->dlen);
}

static counters_t child_counters(child_t *c)
{
	counters_t k;
	full_write(c->to, "c", 1);
	full_read(c->from, &k, sizeof k);
	return k;
}

static void child_stop(child_t *c)
{
	int st = 0;
	full_write(c->to, "q", 1);
	TU_CHECK(waitpid(c->pid, &st, 0) == c->pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		 "receiver exit status %d", st);
}

/* ---- an honest P ---- */

typedef struct sender {
	lc_ctx_t *tx;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint8_t *src; /* device memory */
	uint8_t *host;
	uint32_t remote;
	lc_region_t *regions[2];
} sender_t;

static void sender_start(sender_t *s, child_t *c, const char *query, int nregions)
{
	CUdeviceptr p;
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "p"},
			    &s->tx));
	cuda_ready();
	TU_OK(lc__cuda_mem_alloc(&p, REGION));
	s->src = (uint8_t *)(uintptr_t)p;
	s->host = malloc(REGION);
	tu_fill(s->host, REGION, SEED);
	TU_OK(lc__cuda_memcpy_htod_async(p, s->host, REGION, NULL));
	TU_OK(lc__cuda_stream_synchronize(NULL));
	lc_region_params_t rp = {.size = sizeof rp, .kind = LC_MEM_KIND_CUDA};
	size_t part = REGION / (size_t)nregions;
	for (int i = 0; i < nregions; i++)
		TU_OK(lc_region_register_ex(s->tx, s->src + i * part, part, &rp, &s->regions[i]));
	TU_OK(lc_cq_create(s->tx, &s->cq));
	char url[300];
	snprintf(url, sizeof url, "%s%s", c->url, query);
	lc_conn_params_t cp = {.size = sizeof cp, .cq = s->cq, .token = c->token, .has_token = 1};
	TU_OK(lc_conn_create(s->tx, url, &cp, &s->conn));
	TU_OK(lc_conn_import_region(s->conn, c->desc, c->dlen, &s->remote));
}

/* 64 writes of 64 KiB over the first 4 MiB and one over the rest (5 MiB,
 * two seam slices, with one region; 4 MiB, the second region, with two),
 * to the same offsets at D; Success expected. */
static size_t send_all(sender_t *s, int nregions)
{
	uint64_t big = nregions == 1 ? 3u << 20 : 4u << 20;
	enum { N = 65 };
	lc_write_t w[N];
	for (int i = 0; i < 64; i++)
		w[i] = (lc_write_t){.local = s->src + i * 65536u,
				    .remote_region = s->remote,
				    .remote_offset = (uint64_t)i * 65536u,
				    .length = 65536};
	w[64] = (lc_write_t){.local = s->src + big,
			     .remote_region = s->remote,
			     .remote_offset = big,
			     .length = REGION - big};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(s->conn, w, N, &bp, &id));
	lc_completion_t c = tu_wait_one(s->cq, 30000);
	TU_CHECK(c.batch_id == id && c.status == 0, "batch: %s (%s)", lc_err_name(c.status),
		 c.reason);
	return N;
}

static void expect_landed(sender_t *s, child_t *c)
{
	uint8_t *view = malloc(REGION);
	if (c->mode == D_CUDA) {
		TU_OK(lc__cuda_memcpy_dtoh_async(view, (CUdeviceptr)(uintptr_t)c->dst, REGION,
						 NULL));
		TU_OK(lc__cuda_stream_synchronize(NULL));
	} else {
		memcpy(view, c->dst, REGION);
	}
	TU_CHECK(!memcmp(view, s->host, REGION), "D's bytes differ from P's");
	free(view);
}

static void sender_stop(sender_t *s)
{
	lc_conn_destroy(s->conn);
	lc_cq_destroy(s->cq);
	lc_ctx_destroy(s->tx);
	lc__cuda_mem_free((CUdeviceptr)(uintptr_t)s->src);
	free(s->host);
}

/* D's fake mappings back to `want` (imports closed), within 5 s. */
static void expect_maps(child_t *c, long want)
{
	long got = -1;
	for (int i = 0; i < 500; i++) {
		got = child_counters(c).maps;
		if (got == want)
			return;
		usleep(10000);
	}
	TU_CHECK(got == want, "D holds %ld fake device mappings, expected %ld", got, want);
}

static void honest(enum dmode mode, const char *query, int nregions, bool want_ipc)
{
	child_t c = {0};
	sender_t s = {0};
	child_start(&c, mode);
	long base = child_counters(&c).maps;
	sender_start(&s, &c, query, nregions);
	size_t n = send_all(&s, nregions);
	expect_landed(&s, &c);
	counters_t k = child_counters(&c);
	uint64_t staged = counter(s.tx, "staging_bytes");
	TU_CHECK(k.applied == n, "D applied %llu writes", (unsigned long long)k.applied);
	if (want_ipc) {
		TU_CHECK(k.ipc_writes == n && staged == 0,
			 "IPC: %llu IPC writes, %llu bytes staged",
			 (unsigned long long)k.ipc_writes, (unsigned long long)staged);
		TU_CHECK(k.ipc_imports == 1, "%llu imports", (unsigned long long)k.ipc_imports);
		TU_CHECK(counter(s.tx, "ipc_exports") == (uint64_t)nregions, "%llu exports",
			 (unsigned long long)counter(s.tx, "ipc_exports"));
		TU_CHECK(k.maps == base + 1, "D maps %ld, expected one import more than %ld",
			 k.maps, base);
	} else {
		TU_CHECK(k.ipc_writes == 0 && staged > 0, "staged: %llu IPC writes, %llu staged",
			 (unsigned long long)k.ipc_writes, (unsigned long long)staged);
	}
	TU_CHECK(k.ipc_rejected == 0 && k.malformed == 0, "rejections");
	sender_stop(&s);
	expect_maps(&c, base); /* the connection's imports closed */
	child_stop(&c);
}

/* D's driver fails `fail`: the batch fails with a reason (LC_ERR_IO when
 * the copy failed, any error when the import did), nothing lands, and the
 * failed import leaves nothing mapped. */
static void failing(enum dmode mode, const char *fail, bool import_fails)
{
	child_t c = {.fail = fail};
	sender_t s = {0};
	child_start(&c, mode);
	long base = child_counters(&c).maps;
	sender_start(&s, &c, "", 1);
	lc_write_t w = {.local = s.src, .remote_region = s.remote, .length = 1u << 20};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(s.conn, &w, 1, &bp, &id));
	lc_completion_t done = tu_wait_one(s.cq, 30000);
	TU_CHECK(done.batch_id == id && done.status != 0 && done.reason[0],
		 "with %s failing at D: %s (%s)", fail, lc_err_name(done.status), done.reason);
	fprintf(stderr, "%s failing at D: %s (%s)\n", fail, lc_err_name(done.status),
		done.reason);
	counters_t k = child_counters(&c);
	TU_CHECK(k.applied == 0 && k.ipc_writes == 0, "applied %llu, IPC writes %llu",
		 (unsigned long long)k.applied, (unsigned long long)k.ipc_writes);
	if (import_fails) {
		TU_CHECK(k.ipc_rejected == 1 && k.ipc_imports == 0, "rejected %llu imports %llu",
			 (unsigned long long)k.ipc_rejected, (unsigned long long)k.ipc_imports);
		TU_CHECK(k.maps == base, "a failed import left %ld mappings (had %ld)", k.maps,
			 base);
	} else {
		TU_CHECK(done.status == LC_ERR_IO && k.copy_errors >= 1 && k.ipc_imports == 1,
			 "copy errors %llu imports %llu", (unsigned long long)k.copy_errors,
			 (unsigned long long)k.ipc_imports);
	}
	sender_stop(&s);
	expect_maps(&c, base);
	child_stop(&c);
}

/* ---- a raw P speaking the wire by hand ---- */

static int raw_connect(child_t *c, bool offer_ipc, uint32_t *welcome_flags)
{
	char name[LC__SHM_NAME_MAX + 1];
	struct sockaddr_un sa;
	TU_OK(lc__shm_name_from_url(c->url, name, sizeof name, false));
	socklen_t alen = lc__shm_addr(name, &sa);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, alen) == 0, "connect");
	lc__shm_hello_t h = {.magic = LC__SHM_MAGIC,
			     .version = LC__SHM_VERSION,
			     .flags = LC__SHM_HELLO_TOKEN | (offer_ipc ? LC__SHM_HELLO_IPC : 0)};
	memcpy(h.token, c->token.bytes, LC_TOKEN_LEN);
	uint8_t m[LC__SHM_ACKS_MAX];
	TU_CHECK(send(fd, m, lc__shm_put_hello(m, &h), 0) > 0, "hello");
	ssize_t n = recv(fd, m, sizeof m, 0);
	lc__shm_welcome_t w;
	TU_CHECK(n > 0 && lc__shm_get_welcome(m, (size_t)n, &w) == 0 && w.status == 0, "welcome");
	*welcome_flags = w.flags;
	return fd;
}

static void raw_region(int fd, const lc__shm_ipc_region_t *r)
{
	uint8_t m[LC__SHM_IPC_REGION_LEN];
	TU_CHECK(send(fd, m, lc__shm_put_ipc_region(m, r), 0) > 0, "ipc region");
}

static void raw_write(int fd, uint32_t src, uint64_t src_off, uint64_t len)
{
	uint8_t m[LC__SHM_MSG_MAX];
	lc__shm_write_t w = {.batch = 1,
			     .room = ROOM,
			     .src = src,
			     .src_off = src_off,
			     .dst_off = 0,
			     .length = len};
	lc__shm_put_write(m, 0, &w);
	lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
	TU_CHECK(send(fd, m, lc__shm_writes_len(1), 0) > 0, "writes");
}

/* The status of the one ack that follows, or 1 when D closed instead. */
static int raw_ack(int fd)
{
	uint8_t m[LC__SHM_ACKS_MAX];
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ssize_t n = recv(fd, m, sizeof m, 0);
	TU_CHECK(n >= 0, "no answer from D: %s", strerror(errno));
	if (n == 0)
		return 1;
	TU_CHECK(lc__shm_type(m, (size_t)n) == LC__SHM_ACKS && lc__shm_count(m, (size_t)n, 16) == 1,
		 "not one ack");
	lc__shm_ack_t a;
	lc__shm_get_ack(m, 0, &a);
	return a.status;
}

static void case_bad_handle(void)
{
	child_t c = {0};
	uint32_t wf;
	child_start(&c, D_CUDA);
	int fd = raw_connect(&c, true, &wf);
	TU_CHECK(wf & LC__SHM_WELCOME_IPC, "D with CUDA did not accept IPC");
	lc__shm_ipc_region_t r = {.id = 5, .alloc_size = 1 << 20, .len = 1 << 20};
	memset(r.handle, 0x77, sizeof r.handle); /* not a handle */
	raw_region(fd, &r);
	raw_write(fd, 5, 0, 4096);
	int st = raw_ack(fd);
	TU_CHECK(st != 0 && st != 1, "a write from a bad handle: status %d", st);
	counters_t k = child_counters(&c);
	TU_CHECK(k.ipc_rejected == 1 && k.ipc_imports == 0 && k.malformed == 0 && k.applied == 0,
		 "rejected %llu imports %llu", (unsigned long long)k.ipc_rejected,
		 (unsigned long long)k.ipc_imports);
	/* The connection is kept: a second write gets its ack too. */
	raw_write(fd, 5, 4096, 4096);
	TU_CHECK(raw_ack(fd) == st, "second write");
	close(fd);
	child_stop(&c);
}

static void case_bad_size(void)
{
	child_t c = {0};
	uint32_t wf;
	CUdeviceptr p;
	CUipcMemHandle h;
	child_start(&c, D_CUDA);
	long base = child_counters(&c).maps;
	TU_OK(lc__cuda_mem_alloc(&p, 1 << 20));
	TU_OK(lc__cuda_ipc_get(p, &h));
	int fd = raw_connect(&c, true, &wf);
	/* Claims 2 MiB where the allocation has 1. */
	lc__shm_ipc_region_t r = {.id = 9, .alloc_size = 2 << 20, .len = 2 << 20};
	memcpy(r.handle, h.reserved, sizeof r.handle);
	raw_region(fd, &r);
	raw_write(fd, 9, (1 << 20) + 4096, 4096); /* would read past the allocation */
	int st = raw_ack(fd);
	TU_CHECK(st == LC_ERR_OUT_OF_REGION, "status %s", lc_err_name(st));
	counters_t k = child_counters(&c);
	TU_CHECK(k.ipc_rejected == 1 && k.ipc_imports == 0 && k.applied == 0, "counters");
	TU_CHECK(k.maps == base, "the rejected import is still mapped (%ld, %ld)", k.maps, base);
	close(fd);
	lc__cuda_mem_free(p);
	child_stop(&c);
}

static void case_bad_range(void)
{
	child_t c = {0};
	uint32_t wf;
	CUdeviceptr p;
	CUipcMemHandle h;
	child_start(&c, D_CUDA);
	TU_OK(lc__cuda_mem_alloc(&p, 1 << 20));
	TU_OK(lc__cuda_ipc_get(p, &h));
	/* 1. A region that does not fit its allocation. */
	int fd = raw_connect(&c, true, &wf);
	lc__shm_ipc_region_t r = {.id = 1, .alloc_size = 1 << 20, .offset = 4096, .len = 1 << 20};
	memcpy(r.handle, h.reserved, sizeof r.handle);
	raw_region(fd, &r);
	TU_CHECK(raw_ack(fd) == 1, "D kept a connection with a region beyond its allocation");
	close(fd);
	/* 2. A write beyond its (valid) region. */
	fd = raw_connect(&c, true, &wf);
	r.offset = 0;
	r.len = 65536;
	raw_region(fd, &r);
	raw_write(fd, 1, 65536 - 4096, 8192);
	TU_CHECK(raw_ack(fd) == 1, "D kept a connection with a write beyond its region");
	close(fd);
	/* 3. An IPC region on a connection that did not offer IPC. */
	fd = raw_connect(&c, false, &wf);
	TU_CHECK(!(wf & LC__SHM_WELCOME_IPC), "IPC accepted though not offered");
	raw_region(fd, &r);
	TU_CHECK(raw_ack(fd) == 1, "D took an IPC region it did not accept");
	close(fd);
	counters_t k = child_counters(&c);
	TU_CHECK(k.malformed == 3 && k.applied == 0, "malformed %llu applied %llu",
		 (unsigned long long)k.malformed, (unsigned long long)k.applied);
	lc__cuda_mem_free(p);
	child_stop(&c);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_ipc <case>\n");
		return 2;
	}
	tu_watchdog(55);
	signal(SIGPIPE, SIG_IGN);
	const char *n = argv[1];
	if (!strcmp(n, "ipc") || !strcmp(n, "vmm"))
		honest(D_CUDA, "", 1, true);
	else if (!strcmp(n, "staged"))
		honest(D_CUDA, "?ipc=0", 1, false);
	else if (!strcmp(n, "host_dst"))
		honest(D_HOST, "", 1, true);
	else if (!strcmp(n, "d_nocuda"))
		honest(D_HOST_NOCUDA, "", 1, false);
	else if (!strcmp(n, "one_alloc"))
		honest(D_CUDA, "", 2, true);
	else if (!strcmp(n, "bad_handle"))
		case_bad_handle();
	else if (!strcmp(n, "bad_size"))
		case_bad_size();
	else if (!strcmp(n, "bad_range"))
		case_bad_range();
	else if (!strcmp(n, "fail_open"))
		failing(D_CUDA, "cuIpcOpenMemHandle_v2", true);
	else if (!strcmp(n, "fail_vmm_import"))
		failing(D_CUDA, "cuMemImportFromShareableHandle", true);
	else if (!strcmp(n, "fail_vmm_map"))
		failing(D_CUDA, "cuMemMap", true);
	else if (!strcmp(n, "fail_vmm_access"))
		failing(D_CUDA, "cuMemSetAccess", true);
	else if (!strcmp(n, "fail_dtod"))
		failing(D_CUDA, "cuMemcpyDtoDAsync_v2", false);
	else if (!strcmp(n, "fail_dtoh"))
		failing(D_HOST, "cuMemcpyDtoHAsync_v2", false);
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("test_ipc %s: ok\n", n);
	return 0;
}
