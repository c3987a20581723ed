/* Helpers shared by the tests. */
#ifndef LC_TESTUTIL_H
#define LC_TESTUTIL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "layercake.h"
#include "layercake/testing.h" /* lc_sim_*, loop faults */

#define TU_SKIP 77

/* Fail the test process with a message (for non-cmocka harnesses). */
#define TU_CHECK(cond, ...)                                                                        \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define TU_OK(expr)                                                                                \
	do {                                                                                       \
		int tu_rc_ = (expr);                                                               \
		TU_CHECK(tu_rc_ >= 0, "%s returned %d (%s: %s)", #expr, tu_rc_,                    \
			 lc_err_name(tu_rc_), lc_strerror(tu_rc_));                                \
	} while (0)

/* Deterministic bytes: fill/verify a buffer from a seed. */
void tu_fill(void *buf, size_t n, uint64_t seed);
/* Index of the first byte that differs from tu_fill's, or -1. */
long tu_verify(const void *buf, size_t n, uint64_t seed);
/* FNV-1a 64. */
uint64_t tu_checksum(const void *buf, size_t n);
/* Wait for exactly one completion (fails the test after timeout_ms). */
lc_completion_t tu_wait_one(lc_cq_t *cq, int timeout_ms);
/* Arm an alarm that kills the test process after `seconds` (belt and braces
 * under ctest's own timeout). */
void tu_watchdog(unsigned seconds);

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t tu_now_ms(void);
/* Raw sockets, for tests that play a peer: send all n bytes (stops
 * quietly at an error or a closed peer); receive exactly n bytes within
 * timeout_ms: 1, 0 on EOF or reset, -1 on timeout. */
void tu_send_all(int fd, const void *p, size_t n);
int tu_recv_exact(int fd, void *buf, size_t n, int timeout_ms);

/* One line (a newline is added) to a status pipe, as a child process reports
 * to its parent; a broken pipe ends the child (exit 3). */
void tu_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Set knobs from "name=value,name=value" (NULL: none); fails the test on a
 * bad knob. */
void tu_knobs(lc_ctx_t *ctx, const char *spec);

/* An MHA KV pool in a context of its own: 2 * layers buffers (K_0..K_{L-1},
 * V_0..V_{L-1}) of `pages` pages of `item` bytes, back to back in one
 * registered, memfd-backed allocation (zeroed; callers fill it). */
#define TU_POOL_MAX_BUFS 256
typedef struct tu_pool {
	lc_ctx_t *ctx;
	uint8_t *mem;
	size_t len;
	lc_region_t *region;
	lc_layout_t *layout;
	uint64_t pages, item;
	void *bases[TU_POOL_MAX_BUFS];
} tu_pool_t;

void tu_pool_init(tu_pool_t *p, const char *name, const char *knobs, int layers, uint64_t pages,
		  uint64_t item);
void tu_pool_fini(tu_pool_t *p);

/* What transport tp (a scheme) can do: its LC__TP_* capability bits
 * (transport/transport.h), 0 if it is not built in. */
uint32_t tu_transport_caps(const char *tp);
/* A listener URL of transport tp on a port or name chosen at bind, derived
 * from its scheme: "tp://127.0.0.1:0" where its URLs name a host and port
 * (LC__TP_HOST_PORT), else "tp://auto". Per thread, valid until the next
 * call. */
const char *tu_listen_url(const char *tp);
/* Whether transport tp is built into this library (lc_transports()). */
bool tu_transport_built(const char *tp);

#endif
