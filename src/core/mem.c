/*
 * The host allocator for KV regions: 2 MiB aligned, advised as transparent
 * huge pages, touched before it is returned, memfd-backed on request. On the
 * VMs we measure, first touch runs at ~0.3 GB/s and 4 KiB pages make large
 * copies several times slower, so neither may happen inside a timed path.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/common.h"

#define HUGE_2M (2u << 20)

typedef struct allocation {
	uint8_t *addr;
	size_t len;
	int memfd;
	struct allocation *next;
} allocation_t;

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static allocation_t *allocations;

/* Reserve an aligned window of address space, then place the mapping. */
static void *map_aligned(size_t len, int fd)
{
	uint8_t *raw = mmap(NULL, len + HUGE_2M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return NULL;
	uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
	if (p > raw)
		munmap(raw, (size_t)(p - raw));
	munmap(p + len, (size_t)(raw + len + HUGE_2M - p - len));
	void *m = fd >= 0 ? mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)
			  : mmap(p, len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (m == MAP_FAILED) {
		munmap(p, len);
		return NULL;
	}
	return p;
}

int lc_mem_alloc(size_t len, unsigned flags, void **out)
{
	int fd = -1, rc;
	if (!out || len == 0 || (flags & ~(unsigned)(LC_MEM_SHAREABLE | LC_MEM_NO_HUGEPAGE)))
		return LC__FAIL(-EINVAL, "lc_mem_alloc: %s",
				!out ? "out is NULL"
				: len == 0
					? "length 0"
					: "unknown flags (LC_MEM_SHAREABLE, LC_MEM_NO_HUGEPAGE)");
	size_t n = (len + HUGE_2M - 1) & ~(size_t)(HUGE_2M - 1);
	if (n < len)
		return -ENOMEM;
	allocation_t *a = calloc(1, sizeof *a);
	if (!a)
		return -ENOMEM;
	if (flags & LC_MEM_SHAREABLE) {
		/* Sealed against shrinking: a peer that maps it (shm://) can then
		 * never take SIGBUS because we truncated it under them. */
		fd = memfd_create("layercake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, (off_t)n) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
			rc = -errno;
			goto fail;
		}
	}
	uint8_t *p = map_aligned(n, fd);
	if (!p) {
		rc = -ENOMEM;
		goto fail;
	}
	if (!(flags & LC_MEM_NO_HUGEPAGE) && madvise(p, n, MADV_HUGEPAGE) && fd < 0)
		LC__DEBUG("madvise(MADV_HUGEPAGE): %s", strerror(errno));
	/* Touch every page now, while nobody is timing. */
	for (size_t off = 0; off < n; off += 4096)
		((volatile uint8_t *)p)[off] = 0;
	*a = (allocation_t){p, n, fd, NULL};
	pthread_mutex_lock(&alloc_lock);
	a->next = allocations;
	allocations = a;
	pthread_mutex_unlock(&alloc_lock);
	*out = p;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(a);
	return rc;
}

int lc_mem_free(void *ptr)
{
	allocation_t **pp, *a = NULL;
	if (!ptr)
		return LC__FAIL(-EINVAL, "lc_mem_free: ptr is NULL");
	pthread_mutex_lock(&alloc_lock);
	for (pp = &allocations; *pp; pp = &(*pp)->next) {
		if ((*pp)->addr == ptr) {
			a = *pp;
			*pp = a->next;
			break;
		}
	}
	pthread_mutex_unlock(&alloc_lock);
	if (!a)
		return LC__FAIL(-EINVAL, "lc_mem_free: %p is not an lc_mem_alloc allocation", ptr);
	munmap(a->addr, a->len);
	if (a->memfd >= 0)
		close(a->memfd);
	free(a);
	return 0;
}

int lc__mem_memfd(const void *addr, size_t len, uint64_t *offset)
{
	const uint8_t *p = addr;
	int fd = -1;
	pthread_mutex_lock(&alloc_lock);
	for (allocation_t *a = allocations; a; a = a->next) {
		if (p >= a->addr && p < a->addr + a->len) {
			if (a->memfd >= 0 && len <= a->len - (size_t)(p - a->addr)) {
				fd = a->memfd;
				*offset = (uint64_t)(p - a->addr);
			}
			break;
		}
	}
	pthread_mutex_unlock(&alloc_lock);
	return fd;
}
