/* Simulated device memory: PROT_NONE ranges backed by memfds (sim.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/common.h"
#include "core/sim.h"

typedef struct sim_range {
	uint8_t *addr;
	size_t len;
	int fd;
	struct sim_range *next;
} sim_range_t;

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_range_t *ranges;

int lc_sim_alloc(size_t len, void **out)
{
	if (!out || len == 0)
		return LC__FAIL(-EINVAL, "lc_sim_alloc: %s", out ? "length 0" : "out is NULL");
	size_t n = (len + 4095) & ~(size_t)4095;
	if (n < len)
		return -ENOMEM;
	sim_range_t *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	int rc;
	s->fd = memfd_create("layercake-sim", MFD_CLOEXEC);
	if (s->fd < 0 || ftruncate(s->fd, (off_t)n) < 0) {
		rc = -errno;
		goto fail;
	}
	/* Address space only: no CPU access may succeed, as with a GPU pointer. */
	void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		rc = -ENOMEM;
		goto fail;
	}
	s->addr = p;
	s->len = n;
	pthread_mutex_lock(&sim_lock);
	s->next = ranges;
	ranges = s;
	pthread_mutex_unlock(&sim_lock);
	*out = p;
	return 0;
fail:
	if (s->fd >= 0)
		close(s->fd);
	free(s);
	return rc;
}

int lc_sim_free(void *ptr)
{
	sim_range_t **pp, *s = NULL;
	if (!ptr)
		return LC__FAIL(-EINVAL, "lc_sim_free: ptr is NULL");
	pthread_mutex_lock(&sim_lock);
	for (pp = &ranges; *pp; pp = &(*pp)->next) {
		if ((*pp)->addr == ptr) {
			s = *pp;
			*pp = s->next;
			break;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	if (!s)
		return -EINVAL;
	munmap(s->addr, s->len);
	close(s->fd);
	free(s);
	return 0;
}

int lc__sim_lookup(const void *ptr, size_t len, uint64_t *off)
{
	const uint8_t *p = ptr;
	int fd = -1;
	pthread_mutex_lock(&sim_lock);
	for (sim_range_t *s = ranges; s; s = s->next) {
		if (p >= s->addr && p < s->addr + s->len) {
			if (len <= s->len - (size_t)(p - s->addr)) {
				fd = s->fd;
				*off = (uint64_t)(p - s->addr);
			}
			break;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return fd;
}

int lc_sim_is(const void *ptr, size_t len)
{
	uint64_t off;
	return ptr && lc__sim_lookup(ptr, len, &off) >= 0;
}

/* pread/pwrite the whole of n bytes, or -errno. */
static int rw_all(int fd, void *buf, size_t n, uint64_t off, int write)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = write ? pwrite(fd, (const uint8_t *)buf + done, n - done,
					   (off_t)(off + done))
				  : pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		done += (size_t)k;
	}
	return 0;
}

int lc__sim_rw(int fd, void *buf, size_t n, uint64_t off, int write)
{
	return rw_all(fd, buf, n, off, write);
}

int lc_sim_write(void *ptr, const void *src, size_t len)
{
	uint64_t off;
	int fd = lc__sim_lookup(ptr, len, &off);
	if (fd < 0 || (!src && len))
		return LC__FAIL(-EINVAL, "lc_sim_write: %s",
				fd < 0 ? "the range is not inside one lc_sim_alloc range"
				       : "src is NULL");
	return rw_all(fd, (void *)(uintptr_t)src, len, off, 1);
}

int lc_sim_read(const void *ptr, void *dst, size_t len)
{
	uint64_t off;
	int fd = lc__sim_lookup(ptr, len, &off);
	if (fd < 0 || (!dst && len))
		return LC__FAIL(-EINVAL, "lc_sim_read: %s",
				fd < 0 ? "the range is not inside one lc_sim_alloc range"
				       : "dst is NULL");
	return rw_all(fd, dst, len, off, 0);
}
