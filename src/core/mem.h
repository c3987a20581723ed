#ifndef LC_CORE_MEM_H
#define LC_CORE_MEM_H
#include <stddef.h>
#include <stdint.h>
/* The memfd behind memory from lc_mem_alloc(LC_MEM_SHAREABLE) containing
 * addr: returns the fd (owned by the allocator) and addr's offset in it, or
 * -1 when the memory is not memfd-backed. */
int lc__mem_memfd(const void *addr, size_t len, uint64_t *offset);
#endif
