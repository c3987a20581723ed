/*
 * A fake libcuda for tests on machines without a GPU: just enough of the
 * driver API, on host memory, to exercise layercake's plumbing (the dlopen
 * shim, the CUDA copy engine's ordering and drain, stream step records
 * reaching the engine, error paths). It proves our plumbing, not CUDA: no
 * asynchrony of a real GPU, no real device memory, no real IPC.
 *
 * - "Device memory" is a memfd mapping per cuMemAlloc (kept in a table, so
 *   that cuPointerGetAttribute can tell it from host memory).
 * - Asynchronous copies are memcpy on the calling thread; events complete
 *   at once (cuEventSynchronize sleeps FAKECUDA_SYNC_DELAY_US first).
 * - cuStreamWriteValue64 stores the value on the calling thread, into host
 *   memory registered with DEVICEMAP only (else CUDA_ERROR_INVALID_VALUE).
 * - IPC works across processes: a handle carries (magic, pid, fd number,
 *   size), and cuIpcOpenMemHandle maps /proc/<pid>/fd/<n> (same uid; the
 *   same process maps its own memfd a second time). VMM: with
 *   FAKECUDA_VMM=1, cuMemAlloc'ed memory behaves as cuMemCreate+cuMemMap
 *   memory (cuMemRetainAllocationHandle finds it, cuIpcGetMemHandle
 *   refuses it), cuMemExportToShareableHandle gives a dup of the memfd, and
 *   cuMemImportFromShareableHandle/cuMemAddressReserve/cuMemMap/
 *   cuMemSetAccess map it in the importer.
 * Environment, read only here: FAKECUDA_FAIL=name[,name...] makes those
 * functions (their exported names, e.g. cuStreamWriteValue64_v2) return
 * CUDA_ERROR_UNKNOWN (999), or FAKECUDA_FAIL_CODE's value when set (e.g. 2,
 * CUDA_ERROR_OUT_OF_MEMORY); FAKECUDA_NODEV=1 makes cuInit fail with
 * CUDA_ERROR_NO_DEVICE; FAKECUDA_DEVICES=n (default 1).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef struct fstream *CUstream;
typedef struct fevent *CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct {
	char reserved[64];
} CUipcMemHandle;

struct fstream {
	CUcontext ctx;
};
struct fevent {
	int recorded;
};

enum { OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_DEVICE = 101 };
enum { INVALID_CONTEXT = 201, INVALID_HANDLE = 400, ALREADY_REG = 712, NOT_REG = 713 };
enum { UNKNOWN = 999 };

typedef struct range {
	uintptr_t base;
	size_t len;
	unsigned flags;
	int device; /* 1: device memory (cuMemAlloc'ed, imported or mapped) */
	int fd;     /* cuMemAlloc: its memfd; VMM-mapped: the handle's fd; else -1 */
	int how;    /* ALLOC, IPC (opened handle), VMM (cuMemMap'ed) */
} range_t;
enum { ALLOC = 0, IPC = 1, VMM = 2 };
#define MAX_RANGES 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static range_t ranges[MAX_RANGES];
static int nranges, inited, primary_refs[8];
static __thread CUcontext stack[16];
static __thread int depth;

static int fails(const char *name)
{
	const char *f = getenv("FAKECUDA_FAIL");
	size_t n = strlen(name);
	for (const char *p = f; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}
static int fail_code(void)
{
	const char *c = getenv("FAKECUDA_FAIL_CODE");
	return c && *c ? atoi(c) : UNKNOWN;
}
#define ENTER(name)                                                                                \
	do {                                                                                       \
		if (!inited && strcmp(name, "cuInit") && strcmp(name, "cuGetErrorName"))           \
			return NOT_INITIALIZED;                                                    \
		if (fails(name))                                                                   \
			return fail_code();                                                        \
	} while (0)

static int devices(void)
{
	const char *d = getenv("FAKECUDA_DEVICES");
	return d ? atoi(d) : 1;
}

static range_t *find(uintptr_t p)
{
	for (int i = 0; i < nranges; i++)
		if (p >= ranges[i].base && p < ranges[i].base + ranges[i].len)
			return &ranges[i];
	return NULL;
}

static void add_dev(uintptr_t base, size_t len, int fd, int how)
{
	if (nranges < MAX_RANGES)
		ranges[nranges++] = (range_t){base, len, 0, 1, fd, how};
}

static void add(uintptr_t base, size_t len, unsigned flags, int device)
{
	if (nranges < MAX_RANGES)
		ranges[nranges++] = (range_t){base, len, flags, device, -1, ALLOC};
}

static int vmm_mode(void)
{
	const char *v = getenv("FAKECUDA_VMM");
	return v && *v == '1';
}

static void drop(range_t *r)
{
	*r = ranges[--nranges];
}

API CUresult cuInit(unsigned flags)
{
	ENTER("cuInit");
	if (getenv("FAKECUDA_NODEV"))
		return NO_DEVICE;
	inited = 1;
	return OK;
}

API CUresult cuGetErrorName(CUresult r, const char **out)
{
	static const struct {
		int code;
		const char *name;
	} names[] = {{OK, "CUDA_SUCCESS"},
		     {INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
		     {NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
		     {NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
		     {INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
		     {INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
		     {INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
		     {ALREADY_REG, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
		     {NOT_REG, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
		     {UNKNOWN, "CUDA_ERROR_UNKNOWN"}};
	if (fails("cuGetErrorName"))
		return fail_code();
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].code == r) {
			*out = names[i].name;
			return OK;
		}
	return INVALID_VALUE;
}

API CUresult cuDriverGetVersion(int *v)
{
	ENTER("cuDriverGetVersion");
	*v = 12040;
	return OK;
}

API CUresult cuDeviceGetCount(int *n)
{
	ENTER("cuDeviceGetCount");
	*n = devices();
	return OK;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	ENTER("cuDeviceGet");
	if (ordinal < 0 || ordinal >= devices())
		return INVALID_DEVICE;
	*d = ordinal;
	return OK;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	ENTER("cuDeviceGetName");
	snprintf(name, (size_t)len, "Fake CUDA device %d", d);
	return OK;
}

API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
	ENTER("cuDeviceGetPCIBusId");
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + d);
	return OK;
}

API CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d)
{
	ENTER("cuDeviceTotalMem_v2");
	*b = (size_t)1 << 30;
	return OK;
}

/* Context d is the address 0x1000 + d: never dereferenced. */
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRetain");
	if (d < 0 || d >= devices() || d >= 8)
		return INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	primary_refs[d]++;
	pthread_mutex_unlock(&lock);
	*c = (CUcontext)(uintptr_t)(0x1000 + d);
	return OK;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRelease_v2");
	if (d < 0 || d >= 8 || !primary_refs[d])
		return INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	primary_refs[d]--;
	pthread_mutex_unlock(&lock);
	return OK;
}

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	ENTER("cuCtxPushCurrent_v2");
	if (!c || depth >= 16)
		return INVALID_CONTEXT;
	stack[depth++] = c;
	return OK;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	ENTER("cuCtxPopCurrent_v2");
	if (!depth)
		return INVALID_CONTEXT;
	*c = stack[--depth];
	return OK;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	ENTER("cuCtxSetCurrent");
	if (depth)
		stack[depth - 1] = c;
	else if (c)
		stack[depth++] = c;
	return OK;
}

API CUresult cuCtxSynchronize(void)
{
	ENTER("cuCtxSynchronize");
	return depth ? OK : INVALID_CONTEXT;
}

API CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	ENTER("cuPointerGetAttribute");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	range_t copy = r ? *r : (range_t){0};
	pthread_mutex_unlock(&lock);
	if (!r)
		return INVALID_VALUE;
	switch (attr) {
	case 2: /* MEMORY_TYPE */
		*(unsigned *)data = copy.device ? 2 : 1;
		return OK;
	case 8: /* IS_MANAGED */
		*(unsigned *)data = 0;
		return OK;
	case 9: /* DEVICE_ORDINAL */
		*(int *)data = 0;
		return OK;
	}
	return INVALID_VALUE;
}

API CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	ENTER("cuStreamCreate");
	if (!depth)
		return INVALID_CONTEXT;
	*s = calloc(1, sizeof(**s));
	(*s)->ctx = stack[depth - 1];
	return OK;
}

API CUresult cuStreamDestroy_v2(CUstream s)
{
	ENTER("cuStreamDestroy_v2");
	free(s);
	return OK;
}

API CUresult cuStreamGetCtx(CUstream s, CUcontext *c)
{
	ENTER("cuStreamGetCtx");
	if (!s) {
		if (!depth)
			return INVALID_CONTEXT;
		*c = stack[depth - 1];
		return OK;
	}
	*c = s->ctx;
	return OK;
}

API CUresult cuStreamSynchronize(CUstream s)
{
	ENTER("cuStreamSynchronize");
	return OK;
}

API CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	ENTER("cuEventCreate");
	if (!depth)
		return INVALID_CONTEXT;
	*e = calloc(1, sizeof(**e));
	return OK;
}

API CUresult cuEventDestroy_v2(CUevent e)
{
	ENTER("cuEventDestroy_v2");
	free(e);
	return OK;
}

API CUresult cuEventRecord(CUevent e, CUstream s)
{
	ENTER("cuEventRecord");
	e->recorded = 1;
	return OK;
}

API CUresult cuEventSynchronize(CUevent e)
{
	ENTER("cuEventSynchronize");
	const char *d = getenv("FAKECUDA_SYNC_DELAY_US");
	if (d)
		usleep((useconds_t)atoi(d));
	return e->recorded ? OK : INVALID_HANDLE;
}

API CUresult cuEventQuery(CUevent e)
{
	ENTER("cuEventQuery");
	return OK;
}

/* Device ranges must be cuMemAlloc'ed; host ones anything. */
static CUresult copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n)
{
	pthread_mutex_lock(&lock);
	range_t *d = find((uintptr_t)dst), *s = find((uintptr_t)src);
	int ok = (!dst_dev || (d && d->device && (uintptr_t)dst + n <= d->base + d->len)) &&
		 (!src_dev || (s && s->device && (uintptr_t)src + n <= s->base + s->len));
	pthread_mutex_unlock(&lock);
	if (!ok)
		return INVALID_VALUE;
	memcpy(dst, src, n);
	return OK;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	ENTER("cuMemcpyHtoDAsync_v2");
	return copy((void *)(uintptr_t)dst, 1, src, 0, n);
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	ENTER("cuMemcpyDtoHAsync_v2");
	return copy(dst, 0, (const void *)(uintptr_t)src, 1, n);
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	ENTER("cuMemcpyDtoDAsync_v2");
	return copy((void *)(uintptr_t)dst, 1, (const void *)(uintptr_t)src, 1, n);
}

static void *map_fd(int fd, size_t n)
{
	void *m = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return m == MAP_FAILED ? NULL : m;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	ENTER("cuMemAlloc_v2");
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)(n ? n : 1))) {
		if (fd >= 0)
			close(fd);
		return 2;
	}
	void *m = map_fd(fd, n);
	if (!m) {
		close(fd);
		return 2;
	}
	pthread_mutex_lock(&lock);
	add_dev((uintptr_t)m, n, fd, vmm_mode() ? VMM : ALLOC);
	pthread_mutex_unlock(&lock);
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	ENTER("cuMemFree_v2");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	range_t copy = r ? *r : (range_t){0};
	int ok = r && r->device && r->base == (uintptr_t)p && r->fd >= 0;
	if (ok)
		drop(r);
	pthread_mutex_unlock(&lock);
	if (!ok)
		return INVALID_VALUE;
	munmap((void *)copy.base, copy.len ? copy.len : 1);
	close(copy.fd);
	return OK;
}

API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	ENTER("cuMemGetAddressRange_v2");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	int ok = r && r->device;
	if (ok) {
		if (base)
			*base = r->base;
		if (size)
			*size = r->len;
	}
	pthread_mutex_unlock(&lock);
	return ok ? OK : INVALID_VALUE;
}

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	ENTER("cuMemHostRegister_v2");
	pthread_mutex_lock(&lock);
	CUresult r = find((uintptr_t)p) ? ALREADY_REG : OK;
	if (r == OK)
		add((uintptr_t)p, n, flags, 0);
	pthread_mutex_unlock(&lock);
	return r;
}

API CUresult cuMemHostUnregister(void *p)
{
	ENTER("cuMemHostUnregister");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	CUresult rc = r && !r->device && r->base == (uintptr_t)p ? OK : NOT_REG;
	if (rc == OK)
		drop(r);
	pthread_mutex_unlock(&lock);
	return rc;
}

static int mapped(uintptr_t p, size_t n)
{
	pthread_mutex_lock(&lock);
	range_t *r = find(p);
	int ok = r && !r->device && (r->flags & 2) && p + n <= r->base + r->len;
	pthread_mutex_unlock(&lock);
	return ok;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags)
{
	ENTER("cuMemHostGetDevicePointer_v2");
	if (!mapped((uintptr_t)p, 1))
		return INVALID_VALUE;
	*d = (CUdeviceptr)(uintptr_t)p; /* unified addressing */
	return OK;
}

API CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, uint64_t value, unsigned flags)
{
	ENTER("cuStreamWriteValue64_v2");
	if ((addr & 7) || !mapped((uintptr_t)addr, 8))
		return INVALID_VALUE;
	__atomic_store_n((uint64_t *)(uintptr_t)addr, value, __ATOMIC_RELEASE);
	return OK;
}

static const char magic[8] = "FAKEIPC";

typedef struct {
	char magic[8];
	int64_t pid, fd;
	uint64_t size;
} fake_handle_t;

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	ENTER("cuIpcGetMemHandle");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	int ok = r && r->device && r->how == ALLOC && r->fd >= 0 && r->base == (uintptr_t)p;
	fake_handle_t fh = {.pid = getpid(), .fd = ok ? r->fd : -1, .size = ok ? r->len : 0};
	pthread_mutex_unlock(&lock);
	if (!ok)
		return INVALID_VALUE;
	memcpy(fh.magic, magic, sizeof(magic));
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, &fh, sizeof(fh));
	return OK;
}

/* /proc/<pid>/fd/<n> of the exporter, checked to be a memfd of the size. */
static int open_peer_fd(int64_t pid, int64_t fd, uint64_t size)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid, (long long)fd);
	int f = open(path, O_RDWR | O_CLOEXEC);
	if (f < 0)
		return -1;
	if (fstat(f, &st) || (uint64_t)st.st_size != (size ? size : 1)) {
		close(f);
		return -1;
	}
	return f;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
	ENTER("cuIpcOpenMemHandle_v2");
	fake_handle_t fh;
	memcpy(&fh, h.reserved, sizeof(fh));
	if (memcmp(fh.magic, magic, sizeof(magic)))
		return INVALID_VALUE;
	int f = open_peer_fd(fh.pid, fh.fd, fh.size);
	if (f < 0)
		return INVALID_HANDLE;
	void *m = map_fd(f, fh.size);
	close(f);
	if (!m)
		return 2;
	pthread_mutex_lock(&lock);
	add_dev((uintptr_t)m, fh.size, -1, IPC);
	pthread_mutex_unlock(&lock);
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
	ENTER("cuIpcCloseMemHandle");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	range_t copy = r ? *r : (range_t){0};
	int ok = r && r->how == IPC && r->base == (uintptr_t)p;
	if (ok)
		drop(r);
	pthread_mutex_unlock(&lock);
	if (!ok)
		return INVALID_VALUE;
	munmap((void *)copy.base, copy.len ? copy.len : 1);
	return OK;
}

/* ---- VMM: a generic allocation handle is an fd of its own + 1 ---- */

typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
	int type, id;
	int flags;
} CUmemAccessDesc;

API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	ENTER("cuMemRetainAllocationHandle");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)addr);
	int fd = r && r->how == VMM ? fcntl(r->fd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&lock);
	if (fd < 0)
		return INVALID_VALUE;
	*h = (CUmemGenericAllocationHandle)fd + 1;
	return OK;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	ENTER("cuMemRelease");
	return h && close((int)(h - 1)) == 0 ? OK : INVALID_VALUE;
}

API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, int type,
					  unsigned long long flags)
{
	ENTER("cuMemExportToShareableHandle");
	if (!h || type != 1)
		return INVALID_VALUE;
	int fd = fcntl((int)(h - 1), F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return INVALID_VALUE;
	*(int *)out = fd;
	return OK;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, int type)
{
	ENTER("cuMemImportFromShareableHandle");
	if (type != 1)
		return INVALID_VALUE;
	int fd = fcntl((int)(uintptr_t)os, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return INVALID_VALUE;
	*h = (CUmemGenericAllocationHandle)fd + 1;
	return OK;
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
				 unsigned long long flags)
{
	ENTER("cuMemAddressReserve");
	void *m = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return 2;
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	ENTER("cuMemAddressFree");
	return munmap((void *)(uintptr_t)p, size) ? INVALID_VALUE : OK;
}

API CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		      unsigned long long flags)
{
	ENTER("cuMemMap");
	struct stat st;
	int fd = h ? (int)(h - 1) : -1;
	if (fd < 0 || offset || fstat(fd, &st) || (uint64_t)st.st_size < size)
		return INVALID_VALUE;
	/* Inaccessible until cuMemSetAccess, as on a GPU. */
	void *m = mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED)
		return INVALID_VALUE;
	int keep = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* the mapping keeps the allocation */
	pthread_mutex_lock(&lock);
	add_dev((uintptr_t)p, size, keep, VMM);
	pthread_mutex_unlock(&lock);
	return OK;
}

API CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n)
{
	ENTER("cuMemSetAccess");
	if (!n || d[0].type != 1 || !(d[0].flags & 1))
		return INVALID_VALUE;
	int prot = (d[0].flags & 2) ? PROT_READ | PROT_WRITE : PROT_READ;
	return mprotect((void *)(uintptr_t)p, size, prot) ? INVALID_VALUE : OK;
}

API CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	ENTER("cuMemUnmap");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	int fd = r && r->how == VMM && r->base == (uintptr_t)p ? r->fd : -2;
	if (fd != -2)
		drop(r);
	pthread_mutex_unlock(&lock);
	if (fd == -2)
		return INVALID_VALUE;
	if (fd >= 0)
		close(fd);
	mmap((void *)(uintptr_t)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	return OK;
}
