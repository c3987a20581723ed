/*
 * `layercake bench transport`: bandwidth and batch latency of one transport,
 * sender and receiver in two processes (loop: one process, it is in-process
 * by design), between regions from the library's allocator, measured the
 * way ../shared/tools/baseline.c measures loopback TCP so that the two can
 * be compared as a ratio in the same run.
 *
 * The receiver (child) creates the listener, its region, grants and a
 * token, and hands URL + token + packed descriptor to the sender (parent)
 * through a pipe. The sender posts batches of `batch` writes of `block`
 * bytes, wrapping around both regions like the baseline, keeping a bounded
 * number of batches in flight, until `total` bytes are acknowledged.
 *
 * Each lap around the receiver's region is its own room (ROOM + lap, all
 * granted up front, the whole region each), as a decode side gives each
 * request fresh pages: one room rewritten lap after lap would be a room
 * whose bytes land twice, which the receiver counts and warns about
 * (bytes_landed_twice). A batch never spans a wrap.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "core/common.h" /* LC__MIN */
#include "core/cuda.h"
#include "core/stream.h"
#include "layercake.h"
#include "layercake/testing.h" /* --mem sim */

#define ROOM 1

typedef struct opts {
	const char *transport;
	size_t region, block, batch, total;
	int lanes, inflight;
	int warmup; /* --warmup: blocks before the clock; 0: the default */
	bool json, baseline;
	bool sim;              /* --mem sim* / cuda*: some region in device memory */
	bool sim_src, sim_dst; /* which: both, -src, -dst */
	int dev_kind;          /* LC_MEM_KIND_SIM or LC_MEM_KIND_CUDA */
	bool verify;           /* patterned sources, receiver counts mismatched bytes */
} opts_t;

typedef struct result {
	double seconds;
	size_t batches, bytes;
	double p50_us, p99_us;
	int inflight;
	uint64_t rx_bytes;   /* what the receiver counted as applied */
	uint64_t mismatched; /* bytes the receiver found wrong (verify) */
} result_t;

/* What the receiver hands the sender. */
typedef struct rx_info {
	char url[256];
	lc_token_t token;
	uint32_t desc_len;
	uint8_t desc[LC_REGION_DESC_MAX];
} rx_info_t;

/* The receiver's objects (child process, or the same process for loop). */
typedef struct receiver {
	lc_ctx_t *ctx;
	int kind; /* of mem */
	void *mem;
	lc_region_t *region;
	lc_listener_t *listener;
} receiver_t;

static const char help[] =
	"usage: layercake bench transport [--transport tcp|shm|loop|ucx] [--region-mib M]\n"
	"           [--block-kib K] [--batch B] [--total-mib T] [--lanes N]\n"
	"           [--inflight N] [--warmup W] [--json] [--no-baseline]\n"
	"           [--mem host|sim|sim-src|sim-dst|cuda|cuda-src|cuda-dst]\n\n"
	"    Streams T MiB (default 2048) from a sender region to a receiver region\n"
	"    of M MiB (default 1024) each, as batches of B (default 1) writes of K KiB\n"
	"    (default 4096), wrapping around the regions, with at most N batches in\n"
	"    flight (default: about 64 MiB worth, 2..256). Sender and receiver are two\n"
	"    processes (loop: one). Regions come from lc_mem_alloc (2 MiB aligned,\n"
	"    huge pages, touched before timing). Prints GB/s (10^9 bytes/s) and the\n"
	"    post-to-completion latency of batches (p50, p99); with --json exactly one\n"
	"    JSON object on stdout. The same run first measures the physical\n"
	"    baseline the way ../shared/tools/baseline.c does (tcp, and ucx with\n"
	"    UCX_TLS=tcp: one loopback TCP connection between two processes, T MiB in\n"
	"    K KiB chunks through M MiB regions; otherwise one copy of M MiB, best of\n"
	"    5, by memcpy and by the streaming copy that lands large writes, the\n"
	"    faster of the two: memcpy_gbps, stream_gbps) and prints it with the\n"
	"    ratio (baseline_gbps, ratio; --no-baseline skips it: 0 and 0).\n"
	"    shm also prints that copy from a read-only memfd mapping, the pages it\n"
	"    reads from (memfd_gbps, memfd_ratio): what the source pages cost, not a\n"
	"    ratio to meet.\n"
	"    --lanes sets tcp lanes (default: config tcp_lanes).\n"
	"    --warmup W streams W blocks untimed before the clock starts (default:\n"
	"    one block, for shm one lap of the region); ucx_perftest's -w is the same.\n"
	"    --mem sim puts both regions in simulated device memory (docs/gpu.md): the\n"
	"    same transfer runs with host memory first, then with sim memory, and the\n"
	"    ratio sim/host is printed (sim-src, sim-dst: only that side's region) with the copy-only time per GiB of the sim's\n"
	"    engine (device->host and host->device, measured alone in the same run)\n"
	"    against the wire-only time (the host run), to show the overlap.\n"
	"    --mem cuda does the same with CUDA device memory (device 0, libcuda\n"
	"    through the library's loader, LAYERCAKE_CUDA_LIB): device->device staged\n"
	"    over the transport against host->host in the same run. With --mem the\n"
	"    sources carry a pattern and the receiver checks every byte it was sent\n"
	"    (mismatched_bytes, 0 when right).\n";

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t unit, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > (1ull << 40) / unit)
		return -EINVAL;
	*out = (size_t)v * unit;
	return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	size_t v;
	if (parse_size(s, 1, &v) || v < (size_t)lo || v > (size_t)hi)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
	static const struct option longs[] = {{"transport", 1, 0, 't'},
					      {"region-mib", 1, 0, 'r'},
					      {"block-kib", 1, 0, 'k'},
					      {"batch", 1, 0, 'b'},
					      {"total-mib", 1, 0, 'T'},
					      {"lanes", 1, 0, 'l'},
					      {"inflight", 1, 0, 'i'},
					      {"json", 0, 0, 'j'},
					      {"no-baseline", 0, 0, 'n'},
					      {"mem", 1, 0, 'm'},
					      {"warmup", 1, 0, 'w'},
					      {"help", 0, 0, 'h'},
					      {0, 0, 0, 0}};
	*o = (opts_t){.transport = "tcp",
		      .region = 1024u << 20,
		      .block = 4096u << 10,
		      .batch = 1,
		      .total = 2048u << 20,
		      .baseline = true,
		      .dev_kind = LC_MEM_KIND_HOST};
	optind = 1;
	for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
		int rc = 0;
		switch (c) {
		case 't':
			o->transport = optarg;
			break;
		case 'r':
			rc = parse_size(optarg, 1u << 20, &o->region);
			break;
		case 'k':
			rc = parse_size(optarg, 1u << 10, &o->block);
			break;
		case 'b':
			rc = parse_size(optarg, 1, &o->batch);
			break;
		case 'T':
			rc = parse_size(optarg, 1u << 20, &o->total);
			break;
		case 'l':
			rc = parse_int(optarg, 1, 64, &o->lanes);
			break;
		case 'i':
			rc = parse_int(optarg, 1, 4096, &o->inflight);
			break;
		case 'w':
			rc = parse_int(optarg, 1, 100000, &o->warmup);
			break;
		case 'j':
			o->json = true;
			break;
		case 'n':
			o->baseline = false;
			break;
		case 'm': {
			bool cuda = !strncmp(optarg, "cuda", 4);
			const char *side = optarg + (cuda ? 4 : 3);
			if (cuda || !strncmp(optarg, "sim", 3)) {
				o->sim_src = !*side || !strcmp(side, "-src");
				o->sim_dst = !*side || !strcmp(side, "-dst");
			}
			o->sim = o->verify = o->sim_src || o->sim_dst;
			o->dev_kind = cuda ? LC_MEM_KIND_CUDA : LC_MEM_KIND_SIM;
			rc = o->sim || !strcmp(optarg, "host") ? 0 : -EINVAL;
			break;
		}
		case 'h':
			fputs(help, stdout);
			return 1;
		default:
			return -EINVAL;
		}
		if (rc) {
			fprintf(stderr, "bench transport: bad value '%s'\n", optarg);
			return rc;
		}
	}
	if (o->block > o->region) {
		fprintf(stderr, "bench transport: a block must fit in the region\n");
		return -EINVAL;
	}
	return 0;
}

/* Huge pages matter ~6x for loopback TCP here, and memfd (shmem) memory
 * gets none where shmem THP is off (/sys/kernel/mm/transparent_hugepage/
 * shmem_enabled = never on these VMs): only the shm sender, whose memfd the
 * receiver maps and copies from, allocates shareable memory; receivers
 * always get anonymous huge pages. */
static unsigned mem_flags(const char *tp)
{
	return !strcmp(tp, "shm") ? LC_MEM_SHAREABLE : 0;
}

/* What the untimed warm-up streams: --warmup blocks, else one block (tcp
 * and loop, like the baseline, start with a fresh connection) or, for shm,
 * one lap of the region (the receiver's mapping of our memfd touched). */
static size_t warmup_bytes(const opts_t *o)
{
	if (o->warmup)
		return (size_t)o->warmup * o->block;
	return !strcmp(o->transport, "shm") ? o->region : o->block;
}

/* Laps around the region that warm-up and the timed run can take: writes
 * are whole blocks but the last, and none crosses a wrap, so a lap holds
 * region / block of them. (Counting region - block + 1 bytes a lap made a
 * region of one block ask for a grant per byte: hundreds of millions, and
 * the bench hung without a word.) */
static size_t laps_max(const opts_t *o)
{
	return (warmup_bytes(o) + o->total) / (o->region / o->block * o->block) + 2;
}

static int grant_laps(const opts_t *o, receiver_t *r)
{
	int rc = 0;
	for (size_t lap = 0; lap < laps_max(o) && !rc; lap++)
		rc = lc_grant_issue(r->ctx, ROOM + lap, r->region, 0, o->region);
	return rc;
}

static void dev_free(int kind, void *p);

static void receiver_destroy(receiver_t *r)
{
	lc_ctx_destroy(r->ctx); /* closes the listener, forgets the region */
	if (r->mem)
		dev_free(r->kind, r->mem);
}

/* ---- device memory: the sim, or CUDA device 0 through the library's
 * loader (core/cuda.h). CUDA is first touched after the fork of the run
 * that needs it: a process that used CUDA before fork() cannot in the
 * child. ---- */

enum { CHUNK = 4u << 20 };

static int cuda_ready(void)
{
	static int rc = 1;
	static CUcontext cu;
	if (rc == 1) {
		rc = lc__cuda_load();
		if (!rc)
			rc = lc__cuda_primary_ctx_retain(0, &cu);
		if (!rc)
			rc = lc__cuda_ctx_set(cu);
	}
	return rc;
}

static int dev_alloc(int kind, size_t n, void **out)
{
	if (kind == LC_MEM_KIND_SIM)
		return lc_sim_alloc(n, out);
	CUdeviceptr d;
	int rc = cuda_ready();
	if (!rc)
		rc = lc__cuda_mem_alloc(&d, n);
	if (!rc)
		*out = (void *)(uintptr_t)d;
	return rc;
}

static void dev_free(int kind, void *p)
{
	if (kind == LC_MEM_KIND_SIM)
		lc_sim_free(p);
	else if (kind == LC_MEM_KIND_CUDA)
		lc__cuda_mem_free((CUdeviceptr)(uintptr_t)p);
	else
		lc_mem_free(p);
}

/* Synchronous host <-> device, the sim's or CUDA's (default stream). */
static int dev_rw(int kind, void *dev, void *host, size_t n, bool write)
{
	if (kind == LC_MEM_KIND_SIM)
		return write ? lc_sim_write(dev, host, n) : lc_sim_read(dev, host, n);
	int rc = write ? lc__cuda_memcpy_htod_async((CUdeviceptr)(uintptr_t)dev, host, n, NULL)
		       : lc__cuda_memcpy_dtoh_async(host, (CUdeviceptr)(uintptr_t)dev, n, NULL);
	return rc ? rc : lc__cuda_ctx_synchronize();
}

/* The verified runs' source bytes: never 0 (receivers start zeroed), and
 * different per 4 KiB page, so that a misplaced block shows. */
static void pattern(uint8_t *buf, size_t off, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t o = off + i;
		buf[i] = (uint8_t)(((o & 4095) + (o >> 12) * 37) % 255 + 1);
	}
}

/* Memory of `kind` holding the pattern (verify) or `value`, or zeroed. */
static int mem_filled(int kind, size_t n, bool pat, int value, uint8_t **out)
{
	int rc = kind == LC_MEM_KIND_HOST ? lc_mem_alloc(n, 0, (void **)out)
					  : dev_alloc(kind, n, (void **)out);
	uint8_t *buf = rc ? NULL : malloc(CHUNK);
	if (!rc && !buf)
		rc = -ENOMEM;
	for (size_t off = 0; !rc && off < n; off += CHUNK) {
		size_t k = LC__MIN((size_t)CHUNK, n - off);
		if (pat)
			pattern(buf, off, k);
		else
			memset(buf, value, k);
		if (kind == LC_MEM_KIND_HOST)
			memcpy(*out + off, buf, k);
		else
			rc = dev_rw(kind, *out + off, buf, k, true);
	}
	free(buf);
	return rc;
}

/* Bytes of the receiver's region that differ from the pattern, over what
 * the sender wrote ([0, covered)). */
static int count_mismatched(int kind, uint8_t *mem, size_t covered, uint64_t *out)
{
	uint8_t *want = malloc(CHUNK), *got = kind == LC_MEM_KIND_HOST ? NULL : malloc(CHUNK);
	int rc = want && (got || kind == LC_MEM_KIND_HOST) ? 0 : -ENOMEM;
	*out = 0;
	for (size_t off = 0; !rc && off < covered; off += CHUNK) {
		size_t k = LC__MIN((size_t)CHUNK, covered - off);
		const uint8_t *g = mem + off;
		pattern(want, off, k);
		if (kind != LC_MEM_KIND_HOST) {
			rc = dev_rw(kind, mem + off, got, k, false);
			g = got;
		}
		for (size_t i = 0; !rc && i < k; i++)
			*out += g[i] != want[i];
	}
	free(want);
	free(got);
	return rc;
}

/* What the sender's laps write: blocks from 0 until one would not fit. */
static size_t covered_bytes(const opts_t *o)
{
	size_t lap = o->region / o->block * o->block;
	return LC__MIN(lap, o->total);
}

static int receiver_create(const opts_t *o, receiver_t *r, rx_info_t *info)
{
	int rc;
	memset(r, 0, sizeof *r);
	memset(info, 0, sizeof *info);
	lc_ctx_params_t cp = {.size = sizeof cp, .name = "bench-rx"};
	r->kind = o->sim_dst ? o->dev_kind : LC_MEM_KIND_HOST;
	lc_region_params_t rp = {.size = sizeof rp, .kind = r->kind};
	if ((rc = lc_ctx_create(&cp, &r->ctx)) ||
	    (rc = o->sim_dst ? mem_filled(r->kind, o->region, false, 0, (uint8_t **)&r->mem)
			     : lc_mem_alloc(o->region, 0, &r->mem)) ||
	    (rc = lc_region_register_ex(r->ctx, r->mem, o->region, &rp, &r->region)) ||
	    (rc = lc_listener_create(r->ctx, lc__bench_listen_url(o->transport), &r->listener)) ||
	    (rc = grant_laps(o, r)) || (rc = lc_token_issue(r->ctx, &info->token)))
		goto fail;
	if ((rc = lc_listener_url(r->listener, info->url, sizeof info->url)) < 0 ||
	    (rc = lc_region_pack(r->region, info->desc, sizeof info->desc)) < 0)
		goto fail;
	info->desc_len = (uint32_t)rc;
	return 0;
fail:
	fprintf(stderr, "bench transport: receiver: %s\n", lc_strerror(rc));
	receiver_destroy(r);
	return rc;
}

static int full_write(int fd, const void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t w = write(fd, (const char *)p + done, n - done);
		if (w <= 0 && errno != EINTR)
			return -1;
		done += w > 0 ? (size_t)w : 0;
	}
	return 0;
}

static int full_read(int fd, void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = read(fd, (char *)p + done, n - done);
		if (r == 0 || (r < 0 && errno != EINTR))
			return -1;
		done += r > 0 ? (size_t)r : 0;
	}
	return 0;
}

/* Child: serve until the parent closes `done`, then report bytes applied. */
static void receiver_child(const opts_t *o, int to_parent, int from_parent)
{
	receiver_t r;
	rx_info_t info;
	uint64_t applied = 0;
	char c;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (receiver_create(o, &r, &info) || full_write(to_parent, &info, sizeof info))
		_exit(1);
	while (read(from_parent, &c, 1) < 0 && errno == EINTR)
		;
	uint64_t res[2] = {0, 0};
	lc_ctx_counter_by_name(r.ctx, "bytes_applied", &applied);
	res[0] = applied;
	if (o->verify && count_mismatched(r.kind, r.mem, covered_bytes(o), &res[1]))
		res[1] = UINT64_MAX;
	if (full_write(to_parent, res, sizeof res))
		_exit(1);
	receiver_destroy(&r);
	_exit(0);
}

/* ---- the sender ---- */

typedef struct sender {
	const opts_t *o;
	lc_ctx_t *ctx;
	int kind; /* of mem */
	uint8_t *mem;
	lc_region_t *region;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint32_t remote;
	lc_write_t *writes;
	size_t next_off; /* wraps around like the baseline */
	size_t lap;      /* wraps so far: the room is ROOM + lap */
	uint64_t *lat_ns;
	size_t nlat;
} sender_t;

static int sender_open(sender_t *s, const opts_t *o, const rx_info_t *info)
{
	int rc;
	lc_ctx_params_t cp = {.size = sizeof cp, .name = "bench-tx"};
	s->o = o;
	if ((rc = lc_ctx_create(&cp, &s->ctx)))
		return rc;
	s->kind = o->sim_src ? o->dev_kind : LC_MEM_KIND_HOST;
	if (o->sim_src && (rc = mem_filled(s->kind, o->region, o->verify, 0x3c, &s->mem)))
		return rc;
	if (!o->sim_src) {
		if ((rc = lc_mem_alloc(o->region, mem_flags(o->transport), (void **)&s->mem)))
			return rc;
		if (o->verify)
			pattern(s->mem, 0, o->region);
		else /* touched and non-zero, like the baseline */
			memset(s->mem, 0x3c, o->region);
	}
	lc_conn_params_t p = {
		.size = sizeof p, .token = info->token, .has_token = 1, .lanes = o->lanes};
	lc_region_params_t rp = {.size = sizeof rp, .kind = s->kind};
	if ((rc = lc_region_register_ex(s->ctx, s->mem, o->region, &rp, &s->region)) ||
	    (rc = lc_cq_create(s->ctx, &s->cq)))
		return rc;
	p.cq = s->cq;
	if ((rc = lc_conn_create(s->ctx, info->url, &p, &s->conn)) ||
	    (rc = lc_conn_import_region(s->conn, info->desc, info->desc_len, &s->remote)))
		return rc;
	s->writes = calloc(o->batch, sizeof *s->writes);
	return s->writes ? 0 : -ENOMEM;
}

static void sender_close(sender_t *s)
{
	lc_ctx_destroy(s->ctx);
	lc_cq_destroy(s->cq);
	if (s->mem)
		dev_free(s->kind, s->mem);
	free(s->writes);
	free(s->lat_ns);
}

/* Post one batch of up to o->batch blocks, at most `left` bytes. */
static int post_batch(sender_t *s, size_t left, size_t *bytes)
{
	const opts_t *o = s->o;
	size_t n = 0, sum = 0;
	while (n < o->batch && sum < left) {
		size_t len = o->block < left - sum ? o->block : left - sum;
		if (s->next_off + len > o->region) {
			if (n)
				break; /* the next lap is the next room: a new batch */
			s->next_off = 0;
			s->lap++;
		}
		s->writes[n++] = (lc_write_t){.local = s->mem + s->next_off,
					      .remote_offset = s->next_off,
					      .length = len,
					      .remote_region = s->remote};
		s->next_off += len;
		sum += len;
	}
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM + s->lap, .timeout_ms = 60000};
	uint64_t id;
	int rc = lc_batch_post(s->conn, s->writes, n, &bp, &id);
	*bytes = sum;
	return rc;
}

/* Wait for completions; returns how many, or a negative failure. */
static int reap(sender_t *s, int timeout_ms)
{
	lc_completion_t c[64];
	int n = lc_cq_wait(s->cq, c, 64, timeout_ms);
	for (int i = 0; i < n; i++) {
		if (c[i].status) {
			fprintf(stderr, "bench transport: batch failed: %s: %s\n",
				lc_err_name(c[i].status), c[i].reason);
			return c[i].status;
		}
		if (s->lat_ns)
			s->lat_ns[s->nlat++] = c[i].latency_ns;
	}
	return n == 0 ? -ETIMEDOUT : n;
}

static int auto_inflight(const opts_t *o)
{
	size_t per = o->block * o->batch, n = (64u << 20) / (per ? per : 1);
	return (int)(n < 2 ? 2 : n > 256 ? 256 : n);
}

/* The timed loop: keep `inflight` batches posted until total is done. */
static int stream(sender_t *s, size_t total, int inflight, size_t *batches)
{
	size_t posted = 0;
	int outstanding = 0, rc = 0;
	*batches = 0;
	while (posted < total || outstanding > 0) {
		while (outstanding < inflight && posted < total) {
			size_t b;
			if ((rc = post_batch(s, total - posted, &b)))
				return rc;
			posted += b;
			outstanding++;
			(*batches)++;
		}
		rc = reap(s, 30000);
		if (rc < 0)
			return rc;
		outstanding -= rc;
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double percentile_us(uint64_t *v, size_t n, double q)
{
	if (!n)
		return 0;
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return (double)v[i] / 1e3;
}

static int sender_run(const opts_t *o, const rx_info_t *info, result_t *res)
{
	sender_t s = {0};
	size_t batches, warm;
	int rc = sender_open(&s, o, info);
	if (rc)
		goto out;
	/* Warm-up, untimed (warmup_bytes): connections up and handshaken. */
	if ((rc = stream(&s, warmup_bytes(o), auto_inflight(o), &warm)))
		goto out;
	size_t max_batches = o->total / o->block / o->batch + 2;
	s.lat_ns = calloc(max_batches, sizeof *s.lat_ns);
	if (!s.lat_ns) {
		rc = -ENOMEM;
		goto out;
	}
	res->inflight = o->inflight ? o->inflight : auto_inflight(o);
	double t0 = now_s();
	rc = stream(&s, o->total, res->inflight, &batches);
	res->seconds = now_s() - t0;
	if (rc)
		goto out;
	qsort(s.lat_ns, s.nlat, sizeof *s.lat_ns, cmp_u64);
	res->batches = batches;
	res->bytes = o->total;
	res->p50_us = percentile_us(s.lat_ns, s.nlat, 0.50);
	res->p99_us = percentile_us(s.lat_ns, s.nlat, 0.99);
out:
	if (rc)
		fprintf(stderr, "bench transport: sender: %s\n", lc_strerror(rc));
	sender_close(&s);
	return rc;
}

/* ---- the two ways to run ---- */

static int run_two_processes(const opts_t *o, result_t *res)
{
	int up[2], down[2];
	rx_info_t info;
	if (pipe(up) || pipe(down))
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		receiver_child(o, up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	int rc = full_read(up[0], &info, sizeof info) ? -EPIPE : sender_run(o, &info, res);
	close(down[1]); /* tells the receiver to report and exit */
	uint64_t rx[2];
	if (!rc && full_read(up[0], rx, sizeof rx))
		rc = -EPIPE;
	res->rx_bytes = rx[0];
	res->mismatched = rx[1];
	close(up[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	if (!rc && (!WIFEXITED(status) || WEXITSTATUS(status)))
		rc = -ECHILD;
	return rc;
}

static int run_one_process(const opts_t *o, result_t *res)
{
	receiver_t r;
	rx_info_t info;
	int rc = receiver_create(o, &r, &info);
	if (rc)
		return rc;
	rc = sender_run(o, &info, res);
	lc_ctx_counter_by_name(r.ctx, "bytes_applied", &res->rx_bytes);
	if (o->verify && count_mismatched(r.kind, r.mem, covered_bytes(o), &res->mismatched))
		res->mismatched = UINT64_MAX;
	receiver_destroy(&r);
	return rc;
}

/* ---- the physical baseline, measured in the same run ------------------- */

/* A touched region, 2 MiB aligned and advised as huge pages, as
 * ../shared/tools/baseline.c allocates it (the value is non-zero so the
 * memset cannot become calloc). */
static char *baseline_region(size_t n, int value)
{
	size_t huge = 2u << 20;
	char *p = aligned_alloc(huge, (n + huge - 1) & ~(huge - 1));
	if (!p)
		return NULL;
	madvise(p, n, MADV_HUGEPAGE);
	memset(p, value, n);
	return p;
}

typedef void (*copy_fn)(void *, const void *, size_t);

static void copy_memcpy(void *d, const void *s, size_t n)
{
	memcpy(d, s, n);
}

/* The copies a receiver can make of the region: glibc's memcpy (baseline.c's
 * "memcpy") and the streaming copy (core/stream.h) that lands large writes.
 * The baseline is the faster of the two, measured in this run; both are
 * printed (memcpy_gbps, stream_gbps). */
static double base_memcpy_gbps, base_stream_gbps;
static copy_fn base_copy = copy_memcpy;

/* n bytes from src to dst with `copy`, best of 5, GB/s; `sink` (written,
 * never read by the copy) keeps each copy observable. */
static double best_of_5(copy_fn copy, char *dst, const char *src, size_t n, char *sink)
{
	double best = 0;
	for (int r = 0; r < 5; r++) {
		double t = now_s();
		copy(dst, src, n);
		t = now_s() - t;
		sink[r] = dst[n - 1 - r];
		if (t > 0 && (best == 0 || t < best))
			best = t;
	}
	return best > 0 ? (double)n / best / 1e9 : 0;
}

/* One copy of a region with `copy`, best of 5, GB/s. */
static double baseline_copy(size_t n, copy_fn copy)
{
	char *a = baseline_region(n, 1), *b = baseline_region(n, 2);
	double gbps = a && b ? best_of_5(copy, b, a, n, a) : 0;
	free(a);
	free(b);
	return gbps;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

/* shm's own pages, for attribution only (never the ratio): one copy of a
 * region with the baseline's copy, best of 5, GB/s, from where shm://
 * reads, a memfd written through one mapping and mapped again read-only, shared, huge pages asked
 * for and pre-faulted as D maps P's memory (transport/shm/recv.c), into a
 * region as baseline_region makes it. Where shmem gets no huge pages
 * (shmem_enabled "never", docs/transport-shm.md) this is what the 4 KiB
 * source pages cost against the baseline. */
static double baseline_memfd(size_t n)
{
	int fd = memfd_create("bench-transport", MFD_CLOEXEC);
	char *w = MAP_FAILED, *r = MAP_FAILED, *b = NULL;
	double gbps = 0;
	if (fd < 0 || ftruncate(fd, (off_t)n))
		goto out;
	w = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w == MAP_FAILED)
		goto out;
	madvise(w, n, MADV_HUGEPAGE);
	memset(w, 1, n);
	r = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
	if (r == MAP_FAILED || !(b = baseline_region(n, 2)))
		goto out;
	madvise(r, n, MADV_HUGEPAGE);
	madvise(r, n, MADV_POPULATE_READ);
	gbps = best_of_5(base_copy, b, r, n, w);
out:
	free(b);
	if (r != MAP_FAILED)
		munmap(r, n);
	if (w != MAP_FAILED)
		munmap(w, n);
	if (fd >= 0)
		close(fd);
	return gbps;
}

/* The writer of baseline_tcp (child process). */
static void baseline_tcp_writer(const struct sockaddr_in *a, size_t total, size_t region,
				size_t chunk)
{
	char *src = baseline_region(region, 3);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (!src || c < 0 || connect(c, (const void *)a, sizeof(*a)))
		_exit(1);
	for (size_t sent = 0, off = 0; sent < total;) {
		size_t want = total - sent < chunk ? total - sent : chunk;
		ssize_t w = write(c, src + off, want);
		if (w <= 0)
			_exit(1);
		sent += (size_t)w;
		off += (size_t)w;
		if (off + chunk > region)
			off = 0;
	}
	close(c);
	_exit(0);
}

/* baseline.c's "tcp": one loopback TCP connection between two processes,
 * `total` bytes in `chunk` writes and reads wrapping around regions of
 * `region` bytes, GB/s (0 on failure). */
static double baseline_tcp(size_t total, size_t region, size_t chunk)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	double gbps = 0;
	if (ls < 0 || bind(ls, (void *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (void *)&a, &alen)) {
		if (ls >= 0)
			close(ls);
		return 0;
	}
	pid_t pid = fork();
	if (pid == 0)
		baseline_tcp_writer(&a, total, region, chunk);
	char *dst = pid > 0 ? baseline_region(region, 0x5a) : NULL;
	int s = dst ? accept(ls, NULL, NULL) : -1;
	if (s >= 0) {
		double t = now_s();
		size_t got = 0, off = 0;
		for (ssize_t k; got < total && (k = read(s, dst + off, chunk)) > 0;) {
			got += (size_t)k;
			off += (size_t)k;
			if (off + chunk > region)
				off = 0;
		}
		t = now_s() - t;
		if (got == total && t > 0)
			gbps = (double)got / t / 1e9;
		close(s);
	}
	if (pid > 0) {
		if (s < 0)
			kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	free(dst);
	close(ls);
	return gbps;
}

/* Whether UCX is limited to TCP (UCX_TLS names tcp and no shared-memory
 * transport); otherwise UCX may carry the bytes through shared memory. */
static bool ucx_tcp_only(void)
{
	static const char *const shared[] = {"sm",  "shm",   "posix", "sysv",
					     "cma", "xpmem", "knem",  "all"};
	const char *tls = getenv("UCX_TLS");
	if (!tls || !strstr(tls, "tcp"))
		return false;
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		if (strstr(tls, shared[i]))
			return false;
	return true;
}

/* The baseline for o's transport: what its bytes physically cross (tcp;
 * ucx with UCX_TLS limited to tcp: loopback TCP; otherwise one memcpy). */
static double baseline_gbps(const opts_t *o, const char **kind)
{
	if (!o->baseline) {
		*kind = "none";
		return 0;
	}
	if (!strcmp(o->transport, "tcp") || (!strcmp(o->transport, "ucx") && ucx_tcp_only())) {
		*kind = "tcp";
		return baseline_tcp(o->total, o->region, o->block);
	}
	base_memcpy_gbps = baseline_copy(o->region, copy_memcpy);
	base_stream_gbps = baseline_copy(o->region, lc__copy_stream);
	bool stream = base_stream_gbps > base_memcpy_gbps;
	base_copy = stream ? lc__copy_stream : copy_memcpy;
	*kind = stream ? "stream" : "memcpy";
	return stream ? base_stream_gbps : base_memcpy_gbps;
}

static void print_result(const opts_t *o, const result_t *r, int lanes, double base,
			 const char *kind)
{
	double gbps = (double)r->bytes / r->seconds / 1e9;
	double ratio = base > 0 ? gbps / base : 0;
	/* shm: what its source pages alone cost (baseline_memfd). */
	bool shm = o->baseline && !strcmp(o->transport, "shm");
	double mfd = shm ? baseline_memfd(o->region) : 0;
	if (o->json) {
		printf("{\"transport\":\"%s\",\"block_kib\":%zu,\"batch\":%zu,\"total_mib\":%zu,"
		       "\"region_mib\":%zu,\"lanes\":%d,\"inflight\":%d,\"seconds\":%.6f,"
		       "\"batches\":%zu,\"gbps\":%.3f,\"p50_batch_us\":%.1f,\"p99_batch_us\":%.1f,"
		       "\"baseline\":\"%s\",\"baseline_gbps\":%.3f,\"ratio\":%.3f",
		       o->transport, o->block >> 10, o->batch, o->total >> 20, o->region >> 20,
		       lanes, r->inflight, r->seconds, r->batches, gbps, r->p50_us, r->p99_us, kind,
		       base, ratio);
		if (base_memcpy_gbps > 0)
			printf(",\"memcpy_gbps\":%.3f,\"stream_gbps\":%.3f", base_memcpy_gbps,
			       base_stream_gbps);
		if (shm)
			printf(",\"memfd_gbps\":%.3f,\"memfd_ratio\":%.3f", mfd,
			       mfd > 0 ? gbps / mfd : 0);
		printf("}\n");
		return;
	}
	printf("bench transport %s: %zu MiB in %zu KiB blocks, batch %zu, lanes %d, %d in flight: "
	       "%.3f GB/s, batch p50 %.0f us, p99 %.0f us (%zu batches, %.3f s); "
	       "baseline %s %.3f GB/s, ratio %.2f",
	       o->transport, o->total >> 20, o->block >> 10, o->batch, lanes, r->inflight, gbps,
	       r->p50_us, r->p99_us, r->batches, r->seconds, kind, base, ratio);
	if (base_memcpy_gbps > 0)
		printf(" (memcpy %.3f, streaming copy %.3f GB/s)", base_memcpy_gbps,
		       base_stream_gbps);
	if (shm)
		printf("; the same copy from a read-only memfd mapping (shm's source pages) %.3f "
		       "GB/s, ratio %.2f",
		       mfd, mfd > 0 ? gbps / mfd : 0);
	printf("\n");
}

/* Lanes as the connection will use them, for the report. */
static int effective_lanes(const opts_t *o)
{
	lc_ctx_t *ctx;
	int64_t v = 1;
	if (o->lanes || strcmp(o->transport, "tcp"))
		return o->lanes ? o->lanes : 1;
	if (!lc_ctx_create(NULL, &ctx)) {
		lc_ctx_config_get_int(ctx, "tcp_lanes", &v);
		lc_ctx_destroy(ctx);
	}
	return (int)v;
}

/* Copy-only: the sim engine's work for `total` bytes in blocks, alone: P's
 * device->host (pread) and D's host->device (pwrite), seconds each. */
static int sim_copy_only(const opts_t *o, double *to_host_s, double *from_host_s)
{
	uint8_t *dev, *host;
	int kind = o->dev_kind;
	int rc = mem_filled(kind, o->region, false, 0x3c, &dev);
	if (rc)
		return rc;
	if ((rc = lc_mem_alloc(o->block, 0, (void **)&host))) {
		dev_free(kind, dev);
		return rc;
	}
	/* CUDA: from page-locked memory, as the staging ring is, and queued
	 * back to back on the default stream, waited for once. */
	bool pinned = kind == LC_MEM_KIND_CUDA && !lc__cuda_host_register(host, o->block, 0);
	for (int dir = 0; dir < 2 && !rc; dir++) {
		double t0 = now_s();
		for (size_t done = 0, off = 0; done < o->total && !rc; done += o->block) {
			if (off + o->block > o->region)
				off = 0;
			if (kind == LC_MEM_KIND_SIM)
				rc = dir ? lc_sim_write(dev + off, host, o->block)
					 : lc_sim_read(dev + off, host, o->block);
			else
				rc = dir ? lc__cuda_memcpy_htod_async(
						   (CUdeviceptr)(uintptr_t)(dev + off), host,
						   o->block, NULL)
					 : lc__cuda_memcpy_dtoh_async(
						   host, (CUdeviceptr)(uintptr_t)(dev + off),
						   o->block, NULL);
			off += o->block;
		}
		if (!rc && kind == LC_MEM_KIND_CUDA)
			rc = lc__cuda_ctx_synchronize();
		*(dir ? from_host_s : to_host_s) = now_s() - t0;
	}
	if (pinned)
		lc__cuda_host_unregister(host);
	lc_mem_free(host);
	dev_free(kind, dev);
	return rc;
}

static int run_mem(const opts_t *o, result_t *res)
{
	return !strcmp(o->transport, "loop") ? run_one_process(o, res) : run_two_processes(o, res);
}

/* --mem sim: the host run, the sim run and the copy-only times, one run. */
static int run_sim_compare(const opts_t *o, double base, const char *kind)
{
	opts_t oh = *o;
	result_t host = {0}, sim = {0};
	double to_h = 0, from_h = 0;
	oh.sim = oh.sim_src = oh.sim_dst = false;
	int rc = run_mem(&oh, &host);
	if (!rc)
		rc = run_mem(o, &sim);
	if (!rc)
		rc = sim_copy_only(o, &to_h, &from_h);
	if (rc) {
		fprintf(stderr, "bench transport %s --mem %s failed: %s\n", o->transport,
			o->dev_kind == LC_MEM_KIND_CUDA ? "cuda" : "sim", lc_strerror(rc));
		return 1;
	}
	double gib = (double)o->total / (1u << 30), hg = (double)host.bytes / host.seconds / 1e9;
	double sg = (double)sim.bytes / sim.seconds / 1e9;
	const char *dk = o->dev_kind == LC_MEM_KIND_CUDA ? "cuda" : "sim";
	char mem[16];
	snprintf(mem, sizeof mem, "%s%s", dk,
		 o->sim_src && o->sim_dst ? ""
		 : o->sim_src             ? "-src"
					  : "-dst");
	if (sim.rx_bytes < o->total)
		fprintf(stderr, "bench transport: receiver counted %llu bytes applied of %zu\n",
			(unsigned long long)sim.rx_bytes, o->total);
	uint64_t bad = host.mismatched == UINT64_MAX || sim.mismatched == UINT64_MAX
			       ? UINT64_MAX
			       : host.mismatched + sim.mismatched;
	if (bad)
		fprintf(stderr, "bench transport: %s mismatched bytes at the receiver\n",
			bad == UINT64_MAX ? "could not count" : "found");
	if (o->json) {
		/* "sim_gbps" and "s_per_gib_sim" name the device run, whichever
		 * kind (field names kept from the sim's first version). */
		printf("{\"transport\":\"%s\",\"mem\":\"%s\",\"block_kib\":%zu,\"total_mib\":%zu,"
		       "\"host_gbps\":%.3f,\"sim_gbps\":%.3f,\"dev_gbps\":%.3f,\"ratio\":%.3f,"
		       "\"s_per_gib_sim\":%.4f,\"s_per_gib_wire_only\":%.4f,"
		       "\"s_per_gib_copy_to_host\":%.4f,\"s_per_gib_copy_from_host\":%.4f,"
		       "\"mismatched_bytes\":%lld,\"verified_bytes\":%zu,"
		       "\"baseline\":\"%s\",\"baseline_gbps\":%.3f}\n",
		       o->transport, mem, o->block >> 10, o->total >> 20, hg, sg, sg,
		       hg > 0 ? sg / hg : 0, sim.seconds / gib, host.seconds / gib, to_h / gib,
		       from_h / gib, bad == UINT64_MAX ? -1ll : (long long)bad,
		       2 * covered_bytes(o), kind, base);
		return bad ? 1 : 0;
	}
	printf("bench transport %s --mem %s: %zu MiB in %zu KiB blocks, batch %zu, %d in flight\n"
	       "  host %.3f GB/s, %s %.3f GB/s: ratio %.2f (baseline %s %.3f GB/s)\n"
	       "  per GiB: %s run %.3f s; wire only (the host run) %.3f s; copy only "
	       "device->host %.3f s + host->device %.3f s; serial sum %.3f s\n"
	       "  mismatched bytes at the receivers: %lld of %zu checked\n",
	       o->transport, mem, o->total >> 20, o->block >> 10, o->batch, sim.inflight, hg, dk,
	       sg, hg > 0 ? sg / hg : 0, kind, base, dk, sim.seconds / gib, host.seconds / gib,
	       to_h / gib, from_h / gib, (host.seconds + to_h + from_h) / gib,
	       bad == UINT64_MAX ? -1ll : (long long)bad, 2 * covered_bytes(o));
	return bad ? 1 : 0;
}

/* Whether CUDA works here, asked in a child: this process must not touch
 * CUDA before the runs fork. 0, or the exit status to return. */
static int cuda_probe(void)
{
	int p[2];
	char why[256] = "";
	if (pipe(p))
		return 1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		int rc = cuda_ready();
		if (rc) {
			snprintf(why, sizeof why, "%s (%s)", lc__cuda_why(), lc_strerror(rc));
			full_write(p[1], why, strlen(why));
		}
		_exit(rc ? 1 : 0);
	}
	close(p[1]);
	int status = 1;
	ssize_t n = pid > 0 ? read(p[0], why, sizeof why - 1) : -1;
	why[n > 0 ? n : 0] = 0;
	close(p[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	fprintf(stderr, "bench transport: --mem cuda: CUDA is not usable here: %s\n",
		why[0] ? why : "no driver");
	return 3;
}

int lc__bench_transport(int argc, char **argv)
{
	opts_t o;
	result_t res = {0};
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	if (strcmp(o.transport, "tcp") && strcmp(o.transport, "shm") &&
	    strcmp(o.transport, "loop") && strcmp(o.transport, "ucx")) {
		fprintf(stderr, "bench transport: unknown transport '%s'\n%s", o.transport, help);
		return 2;
	}
	if (!strcmp(o.transport, "ucx") && !lc__bench_has_transport("ucx")) {
		fprintf(stderr, "bench transport: this build has no ucx transport (%s)\n",
			lc_transports());
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	const char *kind;
	double base = baseline_gbps(&o, &kind);
	if (o.sim && o.dev_kind == LC_MEM_KIND_CUDA && (rc = cuda_probe()))
		return rc;
	if (o.sim)
		return run_sim_compare(&o, base, kind);
	rc = run_mem(&o, &res);
	if (rc) {
		fprintf(stderr, "bench transport %s failed: %s\n", o.transport, lc_strerror(rc));
		return 1;
	}
	if (res.rx_bytes < o.total)
		fprintf(stderr, "bench transport: receiver counted %llu bytes applied of %zu\n",
			(unsigned long long)res.rx_bytes, o.total);
	print_result(&o, &res, effective_lanes(&o), base, kind);
	return 0;
}
