/* `layercake demo`: for now, the data-plane demo: a receiver context with a
 * listener, a granted region, and a sender streaming pages to it over a
 * transport, verifying every byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "layercake.h"

static const char demo_help[] =
	"NAME\n"
	"    layercake demo - stream KV pages to a receiver and verify every byte\n\n"
	"SYNOPSIS\n"
	"    layercake demo [--transport loop|tcp|shm] [--pages N] [--page-kib K]\n\n"
	"DESCRIPTION\n"
	"    Creates a receiver with a listener and a granted region, streams N pages of\n"
	"    K KiB into it in batches, verifies them byte by byte and prints bandwidth\n"
	"    and counters.\n";

static int fail(const char *what, int rc)
{
	fprintf(stderr, "layercake demo: %s: %s (%s)\n", what, lc_strerror(rc), lc_err_name(rc));
	return 1;
}

int lc__cmd_demo(int argc, char **argv)
{
	const char *transport = "tcp";
	size_t pages = 4096, page_kib = 64;
	if (lc__cli_wants_help(argc, argv)) {
		fputs(demo_help, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--transport") && i + 1 < argc)
			transport = argv[++i];
		else if (!strcmp(argv[i], "--pages") && i + 1 < argc)
			pages = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--page-kib") && i + 1 < argc)
			page_kib = strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "layercake demo: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (!pages || !page_kib)
		return fail("--pages and --page-kib must be positive", -22);
	size_t page = page_kib << 10, len = pages * page;
	lc_ctx_t *rx, *tx;
	lc_listener_t *l;
	lc_region_t *rr, *sr;
	lc_cq_t *cq;
	lc_conn_t *conn;
	lc_token_t token;
	void *src, *dst;
	char url[256];
	uint8_t desc[LC_REGION_DESC_MAX];
	uint32_t rid;
	int rc;
	char lurl[64];
	snprintf(lurl, sizeof lurl, "%s://%s", transport,
		 !strcmp(transport, "tcp") ? "127.0.0.1:0" : "demo");
	if ((rc = lc_ctx_create(NULL, &rx)) || (rc = lc_ctx_create(NULL, &tx)))
		return fail("context", rc);
	if ((rc = lc_mem_alloc(len, LC_MEM_SHAREABLE, &src)) ||
	    (rc = lc_mem_alloc(len, LC_MEM_SHAREABLE, &dst)))
		return fail("allocate", rc);
	for (size_t i = 0; i < len; i++)
		((uint8_t *)src)[i] = (uint8_t)(i * 131 + i / page);
	if ((rc = lc_listener_create(rx, lurl, &l)) || (rc = lc_listener_url(l, url, sizeof url)) < 0)
		return fail("listen", rc);
	if ((rc = lc_region_register(rx, dst, len, &rr)) ||
	    (rc = lc_region_register(tx, src, len, &sr)) || (rc = lc_grant_add(rx, 1, rr, 0, len)) ||
	    (rc = lc_token_issue(rx, &token)))
		return fail("register", rc);
	int dlen = lc_region_pack(rr, desc, sizeof desc);
	if (dlen < 0)
		return fail("pack", dlen);
	lc_conn_params_t cp = {.size = sizeof cp, .token = token, .has_token = 1};
	if ((rc = lc_cq_create(tx, &cq)))
		return fail("cq", rc);
	cp.cq = cq;
	if ((rc = lc_conn_create(tx, url, &cp, &conn)) ||
	    (rc = lc_conn_import_region(conn, desc, (size_t)dlen, &rid)))
		return fail("connect", rc);
	printf("layercake %s demo: %zu pages of %zu KiB over %s\n", lc_version(), pages, page_kib,
	       url);
	enum { BATCH = 64 };
	lc_write_t w[BATCH];
	size_t posted = 0, inflight = 0, failed = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (posted < pages || inflight) {
		while (posted < pages && inflight < 8) {
			size_t n = pages - posted < BATCH ? pages - posted : BATCH;
			for (size_t i = 0; i < n; i++)
				w[i] = (lc_write_t){(uint8_t *)src + (posted + i) * page,
						    (posted + i) * page, page, rid, 0};
			lc_batch_params_t bp = {.size = sizeof bp, .room = 1};
			uint64_t id;
			if ((rc = lc_batch_post(conn, w, n, &bp, &id)))
				return fail("post", rc);
			posted += n;
			inflight++;
		}
		lc_completion_t c[8];
		int got = lc_cq_wait(cq, c, 8, 10000);
		if (got <= 0)
			return fail("wait", got ? got : -110);
		for (int i = 0; i < got; i++) {
			if (c[i].status) {
				fprintf(stderr, "batch %llu: %s\n", (unsigned long long)c[i].batch_id,
					c[i].reason);
				failed++;
			}
		}
		inflight -= (size_t)got;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	size_t bad = 0;
	for (size_t p = 0; p < pages; p++)
		bad += memcmp((uint8_t *)src + p * page, (uint8_t *)dst + p * page, page) != 0;
	printf("moved %.1f MiB in %.3f s (%.2f GB/s), %zu failed batches, %zu of %zu pages "
	       "differ\n",
	       (double)len / (1 << 20), s, (double)len / s / 1e9, failed, bad, pages);
	lc_ctx_destroy(tx);
	lc_ctx_destroy(rx);
	lc_cq_destroy(cq);
	lc_mem_free(src);
	lc_mem_free(dst);
	return failed || bad ? 1 : 0;
}
