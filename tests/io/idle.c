/*
 * Adaptive polling of the I/O core (io_spin_us): the round trip of one
 * small write over tcp after activity (the loops spin there: each wait ends
 * within the budget); the process's CPU while its connection sits idle
 * afterwards; and its CPU while writes come one at a time, 5 ms apart (each
 * loop sees a near event, the acknowledgement, and a far one, the next
 * write: a loop that spun after every event burnt the budget twice per
 * write, 40% of a core at io_spin_us 1000). The loops spin only while most
 * of their waits end within io_spin_us, and never once idle.
 *     io_idle [io_spin_us|default] [idle seconds] [max idle CPU, % of a core]
 *             [max CPU for the spaced writes, % of a core]
 * ("default": the knob as shipped, LAYERCAKE_IO_SPIN_US unset.)
 * Prints one JSON line: {"io_spin_us", "rtt_p50_us", "idle_cpu_pct",
 * "spaced_cpu_pct"}.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "layercake.h"
#include "testutil.h"

#define ROOM 7
#define BYTES 4096
#define ROUNDS 400
#define SPACED 100 /* writes 5 ms apart */

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One 4 KiB write in room ROOM + i, waited for. */
static void write_one(lc_conn_t *c, lc_cq_t *cq, uint8_t *src, uint32_t rid, int i)
{
	lc_write_t w = {.local = src, .length = BYTES, .remote_region = rid};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM + (uint64_t)i};
	uint64_t id;
	TU_OK(lc_batch_post(c, &w, 1, &bp, &id));
	lc_completion_t done = tu_wait_one(cq, 10000);
	TU_CHECK(done.status == 0, "write %d: %s (%s)", i, lc_strerror(done.status), done.reason);
}

int main(int argc, char **argv)
{
	const char *spin = argc > 1 ? argv[1] : "1000";
	int idle_s = argc > 2 ? atoi(argv[2]) : 10;
	double max_pct = argc > 3 ? atof(argv[3]) : 5.0;
	double max_spaced_pct = argc > 4 ? atof(argv[4]) : 10.0;
	tu_watchdog((unsigned)idle_s + 60);
	bool shipped = !strcmp(spin, "default");
	lc_ctx_t *d, *p;
	if (shipped)
		unsetenv("LAYERCAKE_IO_SPIN_US"); /* read when a context is created */
	TU_OK(lc_ctx_create(NULL, &d));
	TU_OK(lc_ctx_create(NULL, &p));
	if (!shipped) {
		TU_OK(lc_ctx_config_set(d, "io_spin_us", spin));
		TU_OK(lc_ctx_config_set(p, "io_spin_us", spin));
	}

	/* D: a granted region behind a tcp listener. */
	uint8_t *dst, *src;
	lc_region_t *dr, *sr;
	lc_token_t tok;
	lc_listener_t *l;
	char url[256], desc[1024];
	TU_OK(lc_mem_alloc(BYTES, 0, (void **)&dst));
	TU_OK(lc_region_register(d, dst, BYTES, &dr));
	for (int i = 0; i < ROUNDS + SPACED; i++) /* a room per write: none lands twice */
		TU_OK(lc_grant_issue(d, ROOM + (uint64_t)i, dr, 0, BYTES));
	TU_OK(lc_token_issue(d, &tok));
	TU_OK(lc_listener_create(d, "tcp://127.0.0.1:0", &l));
	TU_CHECK(lc_listener_url(l, url, sizeof url) > 0, "listener url");
	int dlen = lc_region_pack(dr, desc, sizeof desc);
	TU_CHECK(dlen > 0, "region pack: %d", dlen);

	/* P: one connection, one 4 KiB write at a time. */
	lc_cq_t *cq;
	lc_conn_t *c;
	uint32_t rid;
	TU_OK(lc_cq_create(p, &cq));
	TU_OK(lc_mem_alloc(BYTES, 0, (void **)&src));
	tu_fill(src, BYTES, 24);
	TU_OK(lc_region_register(p, src, BYTES, &sr));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1};
	TU_OK(lc_conn_create(p, url, &cp, &c));
	TU_OK(lc_conn_import_region(c, desc, (size_t)dlen, &rid));
	static uint64_t rtt[ROUNDS];
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t t0 = now_ns();
		write_one(c, cq, src, rid, i);
		rtt[i] = now_ns() - t0;
	}
	TU_CHECK(tu_verify(dst, BYTES, 24) < 0, "the bytes landed wrong");
	qsort(rtt, ROUNDS, sizeof *rtt, cmp_u64);

	/* Idle: live connection and listener, nothing to do. */
	double c0 = cpu_s();
	uint64_t t0 = now_ns();
	sleep((unsigned)idle_s);
	double pct = 100.0 * (cpu_s() - c0) / ((double)(now_ns() - t0) / 1e9);

	/* Spaced writes: a near event and a far one per write. */
	c0 = cpu_s();
	t0 = now_ns();
	for (int i = ROUNDS; i < ROUNDS + SPACED; i++) {
		write_one(c, cq, src, rid, i);
		usleep(5000);
	}
	double spaced = 100.0 * (cpu_s() - c0) / ((double)(now_ns() - t0) / 1e9);
	printf("{\"io_spin_us\":\"%s\",\"rtt_p50_us\":%.1f,\"idle_cpu_pct\":%.2f,"
	       "\"spaced_cpu_pct\":%.2f}\n",
	       spin, (double)rtt[ROUNDS / 2] / 1e3, pct, spaced);
	TU_CHECK(pct < max_pct, "idle CPU %.2f%% of a core (bound %.1f%%) with io_spin_us %s", pct,
		 max_pct, spin);
	TU_CHECK(spaced < max_spaced_pct,
		 "writes 5 ms apart took %.2f%% of a core (bound %.1f%%) with io_spin_us %s", spaced,
		 max_spaced_pct, spin);

	lc_conn_destroy(c);
	lc_cq_destroy(cq);
	lc_listener_destroy(l);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	return 0;
}
