/*
 * Simulated device memory (LC_MEM_KIND_SIM, docs/gpu.md): ranges reserved
 * PROT_NONE, each backed by a memfd that only the sim copy engine
 * (copier_sim.c) and the lc_sim_read/write test helpers touch.
 *
 * Threading: the table of ranges is guarded by one mutex; a range must not
 * be freed while a region or a copy uses it (as with any registered memory).
 */
#ifndef LC_CORE_SIM_H
#define LC_CORE_SIM_H

#include <stddef.h>
#include <stdint.h>

/* The memfd behind [p, p+len) and p's offset in it; -1 outside one range. */
int lc__sim_lookup(const void *p, size_t len, uint64_t *off);
/* pread (write 0) or pwrite (1) all n bytes at off of fd: 0 or -errno. */
int lc__sim_rw(int fd, void *buf, size_t n, uint64_t off, int write);

#endif
