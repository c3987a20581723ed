/*
 * layercake/testing.h: hooks for tests, the library's own and its users':
 * simulated device memory (a GPU stand-in without a GPU) and the loop
 * transport's fault injection. Not part of <layercake.h>: a program that
 * wants them includes this header on purpose. The functions are exported
 * by the shared library like every other call (the same symbol map, node
 * LAYERCAKE_0.1) and follow the conventions of layercake/base.h.
 */
#ifndef LAYERCAKE_TESTING_H
#define LAYERCAKE_TESTING_H

#include "layercake/dataplane.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Simulated device memory, for users' tests without a GPU: an address
 * range reserved PROT_NONE (any CPU access faults at once, as a GPU
 * pointer dereferenced on the host would), backed by a memfd that only the
 * sim copy engine reads and writes, on a worker thread, with the knobs
 * sim_latency_us and sim_gbps. Registering it (lc_region_register detects
 * it) gives an LC_MEM_KIND_SIM region. Thread-safe.
 * ---------------------------------------------------------------------- */

/* Reserve len bytes (rounded up to 4 KiB), zeroed. */
LC_API int lc_sim_alloc(size_t len, void **out);
/* Free a range from lc_sim_alloc; -EINVAL otherwise. */
LC_API int lc_sim_free(void *ptr);
/* Test helpers, the "cudaMemcpy" of the sim: copy between host memory and
 * [ptr, ptr+len) of a sim range, synchronously. -EINVAL outside one. */
LC_API int lc_sim_write(void *ptr, const void *src, size_t len);
LC_API int lc_sim_read(const void *ptr, void *dst, size_t len);
/* Whether [ptr, ptr+len) lies inside one sim range. */
LC_API int lc_sim_is(const void *ptr, size_t len);

/* Faults for the loop transport (tests, users' own tests). Applied to the
 * writes of batches posted afterwards, counting writes from 1 per
 * connection. `mask` says which fields are set. Also settable in the URL:
 * loop://name?fail_write=3&drop_write=2&delay_us=100&fail_after_bytes=4096
 * &fail_room=7&fail_tag=5 */
enum lc_loop_fault_mask {
	LC_FAULT_FAIL_WRITE = 1u << 0,       /* fail the k-th write */
	LC_FAULT_DROP_WRITE = 1u << 1,       /* never complete the k-th write */
	LC_FAULT_DELAY = 1u << 2,            /* sleep delay_us before each write */
	LC_FAULT_FAIL_AFTER_BYTES = 1u << 3, /* fail once this many bytes landed */
	LC_FAULT_FAIL_ROOM = 1u << 4,        /* fail every write of this room */
	LC_FAULT_FAIL_TAG = 1u << 5,         /* fail every write of batches with this tag */
};

typedef struct lc_loop_faults {
	size_t size;   /* sizeof(lc_loop_faults_t) */
	uint32_t mask; /* enum lc_loop_fault_mask */
	uint32_t fail_tag;
	uint64_t fail_write;
	uint64_t drop_write;
	uint64_t delay_us;
	uint64_t fail_after_bytes;
	uint64_t fail_room;
} lc_loop_faults_t;

/* -EINVAL if conn is not a loop connection. */
LC_API int lc_loop_set_faults(lc_conn_t *conn, const lc_loop_faults_t *faults);

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_TESTING_H */
