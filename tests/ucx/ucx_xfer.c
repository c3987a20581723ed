/*
 * ucx_xfer: one receiver (D) and one sender (P) as separate processes that
 * meet through a file, so that they can run in different network
 * namespaces (tests/ucx/netns_test.sh) or simply as a throughput check of
 * any transport.
 *
 *   ucx_xfer serve URL INFO_FILE REGION_MIB
 *       listen at URL, grant room 1 the whole region, write the resolved
 *       URL, a token and the packed region descriptor to INFO_FILE, then
 *       wait until INFO_FILE.done appears; verify that the first TOTAL
 *       bytes (from INFO_FILE.done) equal the sender's pattern and the rest
 *       still hold the canary. Exit 0 when byte-exact.
 *   ucx_xfer send INFO_FILE TOTAL_MIB BLOCK_KIB INFLIGHT
 *       connect, stream TOTAL_MIB in BLOCK_KIB writes (one per batch,
 *       INFLIGHT batches posted), then write INFO_FILE.done. Prints one JSON
 *       line with the throughput.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define ROOM 1
#define SEED 7
#define CANARY 0x5a

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void hex_put(FILE *f, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", p[i]);
	fputc('\n', f);
}

static size_t hex_get(const char *s, uint8_t *out, size_t cap)
{
	size_t n = 0;
	while (s[0] && s[1] && s[0] != '\n' && n < cap) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			break;
		out[n++] = (uint8_t)v;
		s += 2;
	}
	return n;
}

static int serve(const char *url, const char *info, size_t region_mib)
{
	size_t len = region_mib << 20;
	lc_ctx_t *ctx;
	lc_region_t *r;
	lc_listener_t *l;
	lc_token_t tok;
	uint8_t *mem, desc[LC_REGION_DESC_MAX];
	char rurl[256], tmp[512], done[512];
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_mem_alloc(len, 0, (void **)&mem));
	memset(mem, CANARY, len);
	TU_OK(lc_region_register(ctx, mem, len, &r));
	TU_OK(lc_listener_create(ctx, url, &l));
	TU_OK(lc_listener_url(l, rurl, sizeof rurl));
	TU_OK(lc_grant_issue(ctx, ROOM, r, 0, len));
	TU_OK(lc_token_issue(ctx, &tok));
	int dlen = lc_region_pack(r, desc, sizeof desc);
	TU_OK(dlen);
	snprintf(tmp, sizeof tmp, "%s.tmp", info);
	FILE *f = fopen(tmp, "w");
	TU_CHECK(f, "cannot write %s", tmp);
	fprintf(f, "%s\n", rurl);
	hex_put(f, tok.bytes, sizeof tok.bytes);
	hex_put(f, desc, (size_t)dlen);
	fclose(f);
	TU_CHECK(rename(tmp, info) == 0, "rename %s", info);
	fprintf(stderr, "serve: listening on %s\n", rurl);

	snprintf(done, sizeof done, "%s.done", info);
	unsigned long long total = 0;
	for (int waited = 0;; waited++) {
		f = fopen(done, "r");
		if (f) {
			int ok = fscanf(f, "%llu", &total) == 1;
			fclose(f);
			if (ok)
				break;
		}
		TU_CHECK(waited < 120000, "no sender within 120 s");
		usleep(1000);
	}
	TU_CHECK(total <= len, "sender wrote %llu bytes into %zu", total, len);
	long bad = tu_verify(mem, total, SEED);
	TU_CHECK(bad < 0, "byte %ld differs from the sender's pattern", bad);
	for (size_t i = total; i < len; i++)
		TU_CHECK(mem[i] == CANARY, "byte %zu past the written range changed", i);
	uint64_t applied = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, "bytes_applied", &applied));
	printf("{\"role\":\"serve\",\"url\":\"%s\",\"verified_bytes\":%llu,"
	       "\"bytes_applied\":%llu,\"byte_exact\":true}\n",
	       rurl, total, (unsigned long long)applied);
	lc_ctx_destroy(ctx);
	lc_mem_free(mem);
	return 0;
}

static int send_all(const char *info, size_t total_mib, size_t block_kib, int inflight)
{
	char line[2048], url[256], done[512], tmp[512];
	lc_token_t tok;
	uint8_t desc[LC_REGION_DESC_MAX];
	size_t dlen;
	for (int waited = 0;; waited++) {
		if (access(info, R_OK) == 0)
			break;
		TU_CHECK(waited < 60000, "no receiver info in %s within 60 s", info);
		usleep(1000);
	}
	FILE *f = fopen(info, "r");
	TU_CHECK(f, "open %s", info);
	TU_CHECK(fgets(url, sizeof url, f), "url");
	url[strcspn(url, "\n")] = 0;
	TU_CHECK(fgets(line, sizeof line, f) &&
			 hex_get(line, tok.bytes, sizeof tok.bytes) == sizeof tok.bytes,
		 "token");
	TU_CHECK(fgets(line, sizeof line, f), "descriptor");
	dlen = hex_get(line, desc, sizeof desc);
	fclose(f);

	size_t total = total_mib << 20, block = block_kib << 10;
	lc_ctx_t *ctx;
	lc_region_t *r;
	lc_cq_t *cq;
	lc_conn_t *conn;
	uint8_t *src;
	uint32_t remote;
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_mem_alloc(total, 0, (void **)&src));
	tu_fill(src, total, SEED);
	TU_OK(lc_region_register(ctx, src, total, &r));
	TU_OK(lc_cq_create(ctx, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1};
	TU_OK(lc_conn_create(ctx, url, &cp, &conn));
	TU_OK(lc_conn_import_region(conn, desc, dlen, &remote));

	/* Warm up (connection, keys), then time the stream. */
	lc_write_t w = {.local = src,
			.remote_offset = 0,
			.length = block < total ? block : total,
			.remote_region = remote};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 30000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, &w, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 30000);
	TU_CHECK(c.status == 0, "warm-up: %s (%s)", lc_err_name(c.status), c.reason);

	double t0 = now_s();
	size_t posted = 0, landed = 0;
	int outstanding = 0;
	while (landed < total) {
		while (outstanding < inflight && posted < total) {
			w.local = src + posted;
			w.remote_offset = posted;
			w.length = total - posted < block ? total - posted : block;
			TU_OK(lc_batch_post(conn, &w, 1, &bp, &id));
			posted += w.length;
			outstanding++;
		}
		lc_completion_t cs[64];
		int n = lc_cq_wait(cq, cs, 64, 30000);
		TU_CHECK(n > 0, "no completion within 30 s");
		for (int i = 0; i < n; i++) {
			TU_CHECK(cs[i].status == 0, "batch failed: %s (%s)",
				 lc_err_name(cs[i].status), cs[i].reason);
			landed += cs[i].bytes;
		}
		outstanding -= n;
	}
	double secs = now_s() - t0;
	printf("{\"role\":\"send\",\"url\":\"%s\",\"total_mib\":%zu,\"block_kib\":%zu,"
	       "\"inflight\":%d,\"seconds\":%.6f,\"gbps\":%.4f}\n",
	       url, total_mib, block_kib, inflight, secs, (double)total / secs / 1e9);
	fflush(stdout);
	lc_conn_destroy(conn);
	lc_ctx_destroy(ctx);
	lc_cq_destroy(cq);
	lc_mem_free(src);

	snprintf(done, sizeof done, "%s.done", info);
	snprintf(tmp, sizeof tmp, "%s.done.tmp", info);
	f = fopen(tmp, "w");
	TU_CHECK(f, "open %s", tmp);
	fprintf(f, "%zu\n", total);
	fclose(f);
	TU_CHECK(rename(tmp, done) == 0, "rename %s", done);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 5 && !strcmp(argv[1], "serve"))
		return serve(argv[2], argv[3], strtoul(argv[4], NULL, 10));
	if (argc == 6 && !strcmp(argv[1], "send"))
		return send_all(argv[2], strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10),
				atoi(argv[5]));
	fprintf(stderr, "usage: ucx_xfer serve URL INFO_FILE REGION_MIB\n"
			"       ucx_xfer send INFO_FILE TOTAL_MIB BLOCK_KIB INFLIGHT\n");
	return 2;
}
