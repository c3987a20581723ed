/*
 * A fake libcuda for tests on machines without a GPU: just enough of the
 * driver API, on host memory, to exercise layercake's plumbing (the dlopen
 * shim, the CUDA copy engine's ordering and drain, stream step records
 * reaching the engine, error paths). It proves our plumbing, not CUDA: no
 * asynchrony of a real GPU, no real device memory, no real IPC.
 *
 * - "Device memory" is malloc'ed (cuMemAlloc keeps a table, so that
 *   cuPointerGetAttribute can tell it from host memory).
 * - Asynchronous copies are memcpy on the calling thread; events complete
 *   at once (cuEventSynchronize sleeps FAKECUDA_SYNC_DELAY_US first).
 * - cuStreamWriteValue64 stores the value on the calling thread, into host
 *   memory registered with DEVICEMAP only (else CUDA_ERROR_INVALID_VALUE).
 * - IPC handles carry the pointer (one process only).
 * Environment, read only here: FAKECUDA_FAIL=name[,name...] makes those
 * functions (their exported names, e.g. cuStreamWriteValue64_v2) return
 * CUDA_ERROR_UNKNOWN (999); FAKECUDA_NODEV=1 makes cuInit fail with
 * CUDA_ERROR_NO_DEVICE; FAKECUDA_DEVICES=n (default 1).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	int device; /* 1: cuMemAlloc'ed */
} range_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static range_t ranges[256];
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
#define ENTER(name)                                                                                \
	do {                                                                                       \
		if (!inited && strcmp(name, "cuInit") && strcmp(name, "cuGetErrorName"))           \
			return NOT_INITIALIZED;                                                    \
		if (fails(name))                                                                   \
			return UNKNOWN;                                                            \
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

static void add(uintptr_t base, size_t len, unsigned flags, int device)
{
	if (nranges < 256)
		ranges[nranges++] = (range_t){base, len, flags, device};
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

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	ENTER("cuMemAlloc_v2");
	void *m = calloc(1, n ? n : 1);
	if (!m)
		return 2;
	pthread_mutex_lock(&lock);
	add((uintptr_t)m, n, 0, 1);
	pthread_mutex_unlock(&lock);
	*p = (CUdeviceptr)(uintptr_t)m;
	return OK;
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
	ENTER("cuMemFree_v2");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	if (r && r->device)
		drop(r);
	pthread_mutex_unlock(&lock);
	if (!r)
		return INVALID_VALUE;
	free((void *)(uintptr_t)p);
	return OK;
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

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	ENTER("cuIpcGetMemHandle");
	pthread_mutex_lock(&lock);
	range_t *r = find((uintptr_t)p);
	int ok = r && r->device && r->base == (uintptr_t)p;
	pthread_mutex_unlock(&lock);
	if (!ok)
		return INVALID_VALUE;
	memset(h, 0, sizeof(*h));
	memcpy(h->reserved, magic, sizeof(magic));
	memcpy(h->reserved + 8, &p, sizeof(p));
	return OK;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
	ENTER("cuIpcOpenMemHandle_v2");
	if (memcmp(h.reserved, magic, sizeof(magic)))
		return INVALID_VALUE;
	memcpy(p, h.reserved + 8, sizeof(*p));
	return OK;
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
	ENTER("cuIpcCloseMemHandle");
	return OK;
}
