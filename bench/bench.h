/*
 * Benchmarks behind `layercake bench <name>`. Each prints human text on a
 * terminal, or exactly one JSON object on stdout with --json (logs go to
 * stderr). Entry points are weak so that the CLI links while a benchmark is
 * being written; a missing one reports "not built".
 */
#ifndef LC_BENCH_H
#define LC_BENCH_H

#include <stdbool.h>
#include <string.h>

#include "layercake.h"

int lc__bench_transport(int argc, char **argv) __attribute__((weak));
int lc__bench_planner(int argc, char **argv) __attribute__((weak));
int lc__bench_wake(int argc, char **argv) __attribute__((weak));
int lc__bench_control(int argc, char **argv) __attribute__((weak));
int lc__bench_checksum(int argc, char **argv) __attribute__((weak));
int lc__bench_strided(int argc, char **argv) __attribute__((weak));
int lc__bench_landed(int argc, char **argv) __attribute__((weak));
/* bench/bench_peers.c: execs bench/peers/run.py in the peers' venv; by name only. */
int lc__bench_peers(int argc, char **argv) __attribute__((weak));

/* The loopback listener URL of a transport name (tcp, shm, ucx; anything
 * else is loop://). */
static inline const char *lc__bench_listen_url(const char *tp)
{
	if (!strcmp(tp, "tcp"))
		return "tcp://127.0.0.1:0";
	if (!strcmp(tp, "shm"))
		return "shm://auto";
	if (!strcmp(tp, "ucx"))
		return "ucx://127.0.0.1:0";
	return "loop://auto";
}

/* Whether this library was built with the transport `scheme` ("ucx"):
 * one of the names in lc_transports(), so that the CLI needs only the
 * public header to ask. */
static inline bool lc__bench_has_transport(const char *scheme)
{
	size_t n = strlen(scheme);
	for (const char *s = lc_transports(); *s;) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		if (len == n && !strncmp(s, scheme, n))
			return true;
		if (!end)
			break;
		s = end + 1;
	}
	return false;
}

#endif
