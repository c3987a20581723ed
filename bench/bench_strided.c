/*
 * `layercake bench strided`: token-major pages under heterogeneous TP
 * (P TP 1 -> D TP 2, a page of `rows` tokens x `heads` KV heads), moved
 * two ways in the same run over one transport: one strided write per page
 * (count = rows blocks: what the planner emits) against one write per
 * token (what it would take without strided writes). Prints descriptors
 * per request and GB/s of each, and their ratio; --json: one JSON object.
 *
 * A request is `layers` layers x 2 buffers (K, V) x `pages` pages; D rank
 * 1's half of the heads of every token row moves. Sender and receiver are
 * two contexts of this process; each request is its own room, granted the
 * receiver's whole region. Requests are posted one batch per layer, with
 * at most `inflight` batches outstanding.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "layercake.h"

typedef struct sopts {
	const char *transport;
	uint32_t rows, heads, layers, pages, requests, inflight;
	uint64_t head_bytes;
	bool json;
} sopts_t;

typedef struct sres {
	double seconds, gbps;
	uint64_t descriptors_per_request, bytes;
	int status;
} sres_t;

static const char shelp[] =
	"usage: layercake bench strided [--transport loop|tcp|shm|ucx] [--rows R]\n"
	"           [--heads H] [--head-bytes B] [--layers L] [--pages N]\n"
	"           [--requests Q] [--inflight I] [--json]\n\n"
	"    Token-major pages of R tokens (16) x H KV heads (8) x B bytes per head\n"
	"    (256: 128 x bf16) at P TP 1 -> D TP 2: each request moves D rank 1's\n"
	"    H/2 heads of every token of N pages (64) of L layers (32) x 2 buffers,\n"
	"    Q times (8), first as one strided write per page, then as one write\n"
	"    per token, over the transport (loop). Prints descriptors per request,\n"
	"    GB/s of each and the ratio strided / per-token.\n";

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int sparse(int argc, char **argv, sopts_t *o)
{
	*o = (sopts_t){"loop", 16, 8, 32, 64, 8, 16, 256, false};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint32_t hb = 0;
		int rc = 0;
		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(shelp, stdout);
			return 1;
		}
		if (!v) {
			fprintf(stderr, "bench strided: %s needs a value\n", a);
			return -EINVAL;
		}
		i++;
		if (!strcmp(a, "--transport"))
			o->transport = v;
		else if (!strcmp(a, "--rows"))
			rc = parse_u32(v, 2, LC_WRITE_MAX_COUNT, &o->rows);
		else if (!strcmp(a, "--heads"))
			rc = parse_u32(v, 2, 1024, &o->heads);
		else if (!strcmp(a, "--head-bytes"))
			rc = parse_u32(v, 1, 1u << 20, &hb), o->head_bytes = hb;
		else if (!strcmp(a, "--layers"))
			rc = parse_u32(v, 1, 1024, &o->layers);
		else if (!strcmp(a, "--pages"))
			rc = parse_u32(v, 1, 1u << 16, &o->pages);
		else if (!strcmp(a, "--requests"))
			rc = parse_u32(v, 1, 1u << 16, &o->requests);
		else if (!strcmp(a, "--inflight"))
			rc = parse_u32(v, 1, 4096, &o->inflight);
		else
			rc = -EINVAL;
		if (rc) {
			fprintf(stderr, "bench strided: bad option %s %s\n", a, v);
			return -EINVAL;
		}
	}
	if (o->heads % 2) {
		fprintf(stderr, "bench strided: heads must split over D TP 2\n");
		return -EINVAL;
	}
	return 0;
}

typedef struct rig {
	lc_ctx_t *rx, *tx;
	lc_listener_t *listener;
	lc_region_t *dreg, *sreg;
	uint8_t *dmem, *smem;
	size_t dlen, slen;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint32_t remote;
} rig_t;

static void rig_destroy(rig_t *r)
{
	lc_ctx_destroy(r->tx);
	lc_ctx_destroy(r->rx);
	lc_cq_destroy(r->cq);
	if (r->smem)
		lc_mem_free(r->smem);
	if (r->dmem)
		lc_mem_free(r->dmem);
}

/* P's pages: one buffer's pages (every layer reads them); D's: a page per
 * (layer, buffer, page), so that no byte of a request lands twice. */
static int rig_create(const sopts_t *o, rig_t *r)
{
	uint64_t p_item = (uint64_t)o->rows * o->heads * o->head_bytes;
	uint64_t d_item = p_item / 2;
	uint8_t desc[LC_REGION_DESC_MAX];
	lc_token_t tok;
	int rc, dl;
	memset(r, 0, sizeof *r);
	r->slen = (size_t)p_item * o->pages;
	r->dlen = (size_t)d_item * o->pages * o->layers * 2;
	lc_ctx_params_t rp = {.size = sizeof rp, .name = "strided-rx"};
	lc_ctx_params_t tp = {.size = sizeof tp, .name = "strided-tx"};
	if ((rc = lc_ctx_create(&rp, &r->rx)) || (rc = lc_ctx_create(&tp, &r->tx)) ||
	    (rc = lc_mem_alloc(r->dlen, 0, (void **)&r->dmem)) ||
	    (rc = lc_mem_alloc(r->slen, !strcmp(o->transport, "shm") ? LC_MEM_SHAREABLE : 0,
			       (void **)&r->smem)))
		return rc;
	memset(r->dmem, 0, r->dlen);
	for (size_t i = 0; i < r->slen; i++)
		r->smem[i] = (uint8_t)(i * 131 + 7);
	if ((rc = lc_region_register(r->rx, r->dmem, r->dlen, &r->dreg)) ||
	    (rc = lc_region_register(r->tx, r->smem, r->slen, &r->sreg)) ||
	    (rc = lc_listener_create(r->rx, lc__bench_listen_url(o->transport), &r->listener)) ||
	    (rc = lc_token_issue(r->rx, &tok)) || (rc = lc_cq_create(r->tx, &r->cq)))
		return rc;
	for (uint32_t q = 0; q <= 2 * o->requests && !rc; q++)
		rc = lc_grant_issue(r->rx, 1 + q, r->dreg, 0, r->dlen);
	if (rc || (dl = lc_region_pack(r->dreg, desc, sizeof desc)) < 0)
		return rc ? rc : -EINVAL;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = r->cq, .token = tok, .has_token = 1};
	char url[256];
	if ((rc = lc_listener_url(r->listener, url, sizeof url)) < 0 ||
	    (rc = lc_conn_create(r->tx, url, &cp, &r->conn)))
		return rc;
	return lc_conn_import_region(r->conn, desc, (size_t)dl, &r->remote);
}

/* One layer's writes of a request: per page (and buffer) one strided write,
 * or rows plain ones. Returns how many. */
static size_t layer_writes(const sopts_t *o, const rig_t *r, uint32_t layer, bool strided,
			   lc_write_t *w)
{
	uint64_t prow = (uint64_t)o->heads * o->head_bytes, drow = prow / 2, block = drow;
	uint64_t p_item = prow * o->rows, d_item = drow * o->rows;
	size_t n = 0;
	for (uint32_t b = 0; b < 2; b++)
		for (uint32_t p = 0; p < o->pages; p++) {
			/* D rank 1: the second half of every P row, into D's rows. */
			const uint8_t *src = r->smem + (uint64_t)p * p_item + drow;
			uint64_t dst = (((uint64_t)layer * 2 + b) * o->pages + p) * d_item;
			if (strided) {
				w[n++] = (lc_write_t){.local = src,
						      .remote_offset = dst,
						      .length = block,
						      .remote_region = r->remote,
						      .count = o->rows,
						      .local_stride = prow,
						      .remote_stride = drow};
				continue;
			}
			for (uint32_t t = 0; t < o->rows; t++)
				w[n++] = (lc_write_t){.local = src + t * prow,
						      .remote_offset = dst + t * drow,
						      .length = block,
						      .remote_region = r->remote};
		}
	return n;
}

static int wait_one(rig_t *r, int *status)
{
	lc_completion_t c;
	for (int tries = 0; tries < 600; tries++) {
		int n = lc_cq_wait(r->cq, &c, 1, 100);
		if (n < 0)
			return n;
		if (n == 1) {
			if (c.status && !*status) {
				*status = c.status;
				fprintf(stderr, "bench strided: batch failed: %s\n", c.reason);
			}
			return 0;
		}
	}
	return -ETIMEDOUT;
}

static int run_mode(const sopts_t *o, rig_t *r, bool strided, uint64_t room0, sres_t *out)
{
	size_t cap = (size_t)2 * o->pages * o->rows;
	lc_write_t *w = malloc(cap * sizeof *w);
	uint32_t outstanding = 0;
	int rc = 0;
	if (!w)
		return -ENOMEM;
	memset(out, 0, sizeof *out);
	double t0 = now_s();
	for (uint32_t q = 0; q < o->requests && !rc; q++)
		for (uint32_t l = 0; l < o->layers && !rc; l++) {
			size_t n = layer_writes(o, r, l, strided, w);
			if (q == 0)
				out->descriptors_per_request += n;
			while (outstanding >= o->inflight && !rc) {
				rc = wait_one(r, &out->status);
				outstanding -= !rc;
			}
			lc_batch_params_t bp = {.size = sizeof bp, .room = room0 + q, .tag = l};
			uint64_t id;
			if (!rc && !(rc = lc_batch_post(r->conn, w, n, &bp, &id)))
				outstanding++;
		}
	while (outstanding && !rc) {
		rc = wait_one(r, &out->status);
		outstanding -= !rc;
	}
	out->seconds = now_s() - t0;
	out->bytes = (uint64_t)o->requests * o->layers * 2 * o->pages * o->rows * (o->heads / 2) *
		     o->head_bytes;
	out->gbps = out->seconds > 0 ? (double)out->bytes / out->seconds / 1e9 : 0;
	free(w);
	return rc ? rc : out->status;
}

/* Every byte of D's pages holds P's half-row it was sent. */
static bool verify(const sopts_t *o, const rig_t *r)
{
	uint64_t prow = (uint64_t)o->heads * o->head_bytes, drow = prow / 2;
	for (uint32_t lb = 0; lb < o->layers * 2; lb++)
		for (uint32_t p = 0; p < o->pages; p++)
			for (uint32_t t = 0; t < o->rows; t++)
				if (memcmp(r->dmem +
						   ((uint64_t)lb * o->pages + p) * drow * o->rows +
						   t * drow,
					   r->smem + ((uint64_t)p * o->rows + t) * prow + drow,
					   drow))
					return false;
	return true;
}

int lc__bench_strided(int argc, char **argv)
{
	sopts_t o;
	rig_t r;
	sres_t s = {0}, t = {0};
	int rc = sparse(argc, argv, &o);
	if (rc)
		return rc > 0 ? 0 : 2;
	if ((rc = rig_create(&o, &r))) {
		fprintf(stderr, "bench strided: %s setup: %s\n", o.transport, lc_strerror(rc));
		rig_destroy(&r);
		return rc == LC_ERR_NO_TRANSPORT ? 77 : 1;
	}
	/* Warm-up (connection, page faults), then the two modes, each its own
	 * rooms. */
	sres_t warm;
	sopts_t ow = o;
	ow.requests = 1;
	rc = run_mode(&ow, &r, true, 1 + 2 * (uint64_t)o.requests, &warm);
	memset(r.dmem, 0, r.dlen);
	if (!rc)
		rc = run_mode(&o, &r, true, 1, &s);
	bool ok_s = !rc && verify(&o, &r);
	memset(r.dmem, 0, r.dlen);
	if (!rc)
		rc = run_mode(&o, &r, false, 1 + o.requests, &t);
	bool ok_t = !rc && verify(&o, &r);
	rig_destroy(&r);
	if (rc || !ok_s || !ok_t) {
		fprintf(stderr, "bench strided: %s (verified: strided %d, per-token %d)\n",
			rc ? lc_strerror(rc) : "bytes differ", ok_s, ok_t);
		return 1;
	}
	double ratio = t.gbps > 0 ? s.gbps / t.gbps : 0;
	if (o.json) {
		printf("{\"bench\":\"strided\",\"transport\":\"%s\",\"rows\":%u,\"heads\":%u,"
		       "\"head_bytes\":%llu,\"layers\":%u,\"pages\":%u,\"requests\":%u,"
		       "\"bytes_per_request\":%llu,"
		       "\"strided\":{\"descriptors_per_request\":%llu,\"seconds\":%.4f,"
		       "\"gbps\":%.3f},"
		       "\"per_token\":{\"descriptors_per_request\":%llu,\"seconds\":%.4f,"
		       "\"gbps\":%.3f},\"ratio\":%.2f}\n",
		       o.transport, o.rows, o.heads, (unsigned long long)o.head_bytes, o.layers,
		       o.pages, o.requests, (unsigned long long)(s.bytes / o.requests),
		       (unsigned long long)s.descriptors_per_request, s.seconds, s.gbps,
		       (unsigned long long)t.descriptors_per_request, t.seconds, t.gbps, ratio);
		return 0;
	}
	printf("token-major TP split (P TP 1 -> D TP 2) over %s: %u rows x %u heads x %llu B, "
	       "%u layers x 2 x %u pages, %u requests\n",
	       o.transport, o.rows, o.heads, (unsigned long long)o.head_bytes, o.layers, o.pages,
	       o.requests);
	printf("%-10s %22s %10s %8s\n", "mode", "descriptors/request", "seconds", "GB/s");
	printf("%-10s %22llu %10.4f %8.3f\n", "strided",
	       (unsigned long long)s.descriptors_per_request, s.seconds, s.gbps);
	printf("%-10s %22llu %10.4f %8.3f\n", "per-token",
	       (unsigned long long)t.descriptors_per_request, t.seconds, t.gbps);
	printf("ratio strided/per-token: %.2fx throughput, %.0fx fewer descriptors\n", ratio,
	       (double)t.descriptors_per_request / (double)s.descriptors_per_request);
	return 0;
}
