/* shm's lane (lane.h): creating it at D, mapping it at P. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "transport/shm/lane.h"

/* Keys for ThreadSanitizer (lane.h), by the memfd's inode: both mappings
 * of one lane in a process get the same. */
static char tsan_keys[64];

static void lane_bind(lc__shm_lane_t *ln, uint8_t *base, int fd)
{
	struct stat st;
	ln->tsan_key = &tsan_keys[fstat(fd, &st) ? 0 : st.st_ino % sizeof tsan_keys];
	ln->base = base;
	ln->w_head = (_Atomic uint64_t *)(base + 64);
	ln->w_tail = (_Atomic uint64_t *)(base + 128);
	ln->a_head = (_Atomic uint64_t *)(base + 192);
	ln->a_tail = (_Atomic uint64_t *)(base + 256);
	ln->p_parked = (_Atomic uint32_t *)(base + 320);
	ln->d_parked = (_Atomic uint32_t *)(base + 384);
	ln->p_polling = (_Atomic uint32_t *)(base + 448);
	ln->wslots = base + LC__SHM_LANE_RINGS;
	ln->aslots = ln->wslots + (size_t)LC__SHM_LANE_SLOTS * LC__SHM_LANE_WSLOT;
}

int lc__shm_lane_create(lc__shm_lane_t *ln, int *fd)
{
	*ln = (lc__shm_lane_t){0};
	int f = memfd_create("layercake-shm-lane", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	void *m = MAP_FAILED;
	if (ftruncate(f, LC__SHM_LANE_SIZE) ||
	    fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
	    (m = mmap(NULL, LC__SHM_LANE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) ==
		    MAP_FAILED) {
		int err = -errno;
		close(f);
		return err;
	}
	lane_bind(ln, m, f);
	lc__put_u32(ln->base, LC__SHM_LANE_MAGIC);
	lc__put_u32(ln->base + 4, LC__SHM_LANE_SLOTS);
	*fd = f;
	return 0;
}

int lc__shm_lane_map(lc__shm_lane_t *ln, int fd)
{
	*ln = (lc__shm_lane_t){0};
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	/* Sealed against shrinking: a truncated lane would make our loads
	 * and stores fault (SIGBUS). */
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) ||
	    st.st_size < (off_t)LC__SHM_LANE_SIZE)
		return -EINVAL;
	void *m = mmap(NULL, LC__SHM_LANE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	if (lc__get_u32(m) != LC__SHM_LANE_MAGIC ||
	    lc__get_u32((uint8_t *)m + 4) != LC__SHM_LANE_SLOTS) {
		munmap(m, LC__SHM_LANE_SIZE);
		return -EPROTO;
	}
	lane_bind(ln, m, fd);
	return 0;
}

void lc__shm_lane_unmap(lc__shm_lane_t *ln)
{
	if (ln->base)
		munmap(ln->base, LC__SHM_LANE_SIZE);
	*ln = (lc__shm_lane_t){0};
}
