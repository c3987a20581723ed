/*
 * The CUDA driver shim: dlopen, one function table, and wrappers that turn
 * CUresults into LC codes with a log line and a count. Symbols are looked
 * up by their versioned names first (cuMemHostRegister_v2...), the names
 * <cuda.h> maps the plain ones to, then the plain names.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "core/config.h"
#include "core/cuda.h"

typedef struct cu_fns {
	CUresult (*Init)(unsigned);
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice);
	CUresult (*CtxPushCurrent)(CUcontext);
	CUresult (*CtxPopCurrent)(CUcontext *);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamGetCtx)(CUstream, CUcontext *);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*EventCreate)(CUevent *, unsigned);
	CUresult (*EventDestroy)(CUevent);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventSynchronize)(CUevent);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemHostRegister)(void *, size_t, unsigned);
	CUresult (*MemHostUnregister)(void *);
	CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*StreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*IpcCloseMemHandle)(CUdeviceptr);
	CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle);
	CUresult (*MemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int,
					       unsigned long long);
	CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
	CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
				      unsigned long long);
	CUresult (*MemAddressFree)(CUdeviceptr, size_t);
	CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			   unsigned long long);
	CUresult (*MemUnmap)(CUdeviceptr, size_t);
	CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} cu_fns_t;

/* Field offset, whether load fails without it, and its names in order. */
static const struct {
	size_t off;
	int required;
	const char *names[3];
} symbols[] = {
#define S(f, req, ...)                                                                             \
	{                                                                                          \
		offsetof(cu_fns_t, f), req,                                                        \
		{                                                                                  \
			__VA_ARGS__                                                                \
		}                                                                                  \
	}
	S(Init, 1, "cuInit"),
	S(GetErrorName, 1, "cuGetErrorName"),
	S(DriverGetVersion, 1, "cuDriverGetVersion"),
	S(DeviceGetCount, 1, "cuDeviceGetCount"),
	S(DeviceGet, 1, "cuDeviceGet"),
	S(DeviceGetName, 0, "cuDeviceGetName"),
	S(DeviceGetPCIBusId, 0, "cuDeviceGetPCIBusId"),
	S(DeviceTotalMem, 0, "cuDeviceTotalMem_v2", "cuDeviceTotalMem"),
	S(DevicePrimaryCtxRetain, 0, "cuDevicePrimaryCtxRetain"),
	S(DevicePrimaryCtxRelease, 0, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
	S(CtxPushCurrent, 0, "cuCtxPushCurrent_v2", "cuCtxPushCurrent"),
	S(CtxPopCurrent, 0, "cuCtxPopCurrent_v2", "cuCtxPopCurrent"),
	S(CtxSetCurrent, 0, "cuCtxSetCurrent"),
	S(CtxSynchronize, 0, "cuCtxSynchronize"),
	S(PointerGetAttribute, 0, "cuPointerGetAttribute"),
	S(StreamCreate, 0, "cuStreamCreate"),
	S(StreamDestroy, 0, "cuStreamDestroy_v2", "cuStreamDestroy"),
	S(StreamGetCtx, 0, "cuStreamGetCtx"),
	S(StreamSynchronize, 0, "cuStreamSynchronize"),
	S(EventCreate, 0, "cuEventCreate"),
	S(EventDestroy, 0, "cuEventDestroy_v2", "cuEventDestroy"),
	S(EventRecord, 0, "cuEventRecord"),
	S(EventSynchronize, 0, "cuEventSynchronize"),
	S(MemcpyHtoDAsync, 0, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync"),
	S(MemcpyDtoHAsync, 0, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync"),
	S(MemcpyDtoDAsync, 0, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"),
	S(MemAlloc, 0, "cuMemAlloc_v2", "cuMemAlloc"),
	S(MemFree, 0, "cuMemFree_v2", "cuMemFree"),
	S(MemHostRegister, 0, "cuMemHostRegister_v2", "cuMemHostRegister"),
	S(MemHostUnregister, 0, "cuMemHostUnregister"),
	S(MemHostGetDevicePointer, 0, "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer"),
	/* _v2 (CUDA 11.7+) needs no CAN_USE_STREAM_MEM_OPS opt-in. */
	S(StreamWriteValue64, 0, "cuStreamWriteValue64_v2", "cuStreamWriteValue64"),
	S(IpcGetMemHandle, 0, "cuIpcGetMemHandle"),
	S(IpcOpenMemHandle, 0, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
	S(IpcCloseMemHandle, 0, "cuIpcCloseMemHandle"),
	S(MemGetAddressRange, 0, "cuMemGetAddressRange_v2", "cuMemGetAddressRange"),
	S(MemRetainAllocationHandle, 0, "cuMemRetainAllocationHandle"),
	S(MemRelease, 0, "cuMemRelease"),
	S(MemExportToShareableHandle, 0, "cuMemExportToShareableHandle"),
	S(MemImportFromShareableHandle, 0, "cuMemImportFromShareableHandle"),
	S(MemAddressReserve, 0, "cuMemAddressReserve"),
	S(MemAddressFree, 0, "cuMemAddressFree"),
	S(MemMap, 0, "cuMemMap"),
	S(MemUnmap, 0, "cuMemUnmap"),
	S(MemSetAccess, 0, "cuMemSetAccess"),
#undef S
};

static cu_fns_t cu;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static _Atomic int loaded;
static char why[256];
static _Atomic uint64_t errors;

static const char *err_name(CUresult r)
{
	const char *n = NULL;
	if (cu.GetErrorName && cu.GetErrorName(r, &n) == 0 && n)
		return n;
	return "CUDA_ERROR_?";
}

static void load(void)
{
	const char *lib = lc__config_env_str(LC__CFGS_cuda_lib);
	void *h = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "dlopen: %s", e ? e : "failed");
		LC__INFO("cuda: not found (%s)", why);
		return;
	}
	for (size_t i = 0; i < LC__ARRAY_SIZE(symbols); i++) {
		void *f = NULL;
		for (int k = 0; k < 3 && symbols[i].names[k] && !f; k++)
			f = dlsym(h, symbols[i].names[k]);
		if (!f && symbols[i].required) {
			snprintf(why, sizeof why, "symbol %s missing", symbols[i].names[0]);
			goto fail;
		}
		memcpy((char *)&cu + symbols[i].off, &f, sizeof(f));
	}
	CUresult r = cu.Init(0);
	if (r) {
		snprintf(why, sizeof why, "cuInit: %s (%d)", err_name(r), r);
		goto fail;
	}
	loaded = 1;
	why[0] = '\0';
	LC__INFO("cuda: %s loaded", lib ? lib : "libcuda.so.1");
	return;
fail:
	LC__INFO("cuda: not usable (%s)", why);
	memset(&cu, 0, sizeof(cu));
	dlclose(h);
}

int lc__cuda_load(void)
{
	pthread_once(&load_once, load);
	return loaded ? 0 : LC_ENOTSUP;
}

int lc__cuda_loaded(void)
{
	return atomic_load(&loaded);
}

const char *lc__cuda_why(void)
{
	return why;
}

uint64_t lc__cuda_errors(void)
{
	return atomic_load(&errors);
}

/* A CUresult as an LC code: logged and counted unless it is success. */
static int check(CUresult r, const char *call)
{
	if (r == LC__CUDA_SUCCESS)
		return 0;
	if (r == LC__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		return -EEXIST;
	atomic_fetch_add(&errors, 1);
	LC__WARN("cuda: %s failed: %s (%d)", call, err_name(r), r);
	switch (r) {
	case LC__CUDA_ERROR_INVALID_VALUE:
		return -EINVAL;
	case LC__CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case LC__CUDA_ERROR_NOT_SUPPORTED:
		return -ENOTSUP;
	default:
		return LC_ERR_CUDA;
	}
}

/* Loaded and the function present, or return the reason. */
#define NEED(f)                                                                                    \
	do {                                                                                       \
		if (lc__cuda_load())                                                               \
			return LC_ENOTSUP;                                                         \
		if (!cu.f) {                                                                       \
			LC__WARN("cuda: cu" #f " is not in this driver");                          \
			return LC_ENOTSUP;                                                         \
		}                                                                                  \
	} while (0)
#define NEED_VOID(f)                                                                               \
	do {                                                                                       \
		if (lc__cuda_load() || !cu.f)                                                      \
			return;                                                                    \
	} while (0)

int lc__cuda_driver_version(int *out)
{
	NEED(DriverGetVersion);
	return check(cu.DriverGetVersion(out), "cuDriverGetVersion");
}

int lc__cuda_device_count(int *out)
{
	NEED(DeviceGetCount);
	return check(cu.DeviceGetCount(out), "cuDeviceGetCount");
}

int lc__cuda_device_get(int ordinal, CUdevice *out)
{
	int n = 0, rc;
	if ((rc = lc__cuda_device_count(&n)))
		return rc;
	if (ordinal < 0 || ordinal >= n)
		return -ERANGE;
	return check(cu.DeviceGet(out, ordinal), "cuDeviceGet");
}

int lc__cuda_device_describe(int ordinal, char *name, size_t name_cap, char *pci, size_t pci_cap,
			     uint64_t *total_mem)
{
	CUdevice d;
	int rc = lc__cuda_device_get(ordinal, &d);
	if (rc)
		return rc;
	if (name && name_cap) {
		name[0] = '\0';
		if (cu.DeviceGetName &&
		    (rc = check(cu.DeviceGetName(name, (int)name_cap, d), "cuDeviceGetName")))
			return rc;
	}
	if (pci && pci_cap) {
		pci[0] = '\0';
		if (cu.DeviceGetPCIBusId &&
		    (rc = check(cu.DeviceGetPCIBusId(pci, (int)pci_cap, d), "cuDeviceGetPCIBusId")))
			return rc;
	}
	if (total_mem) {
		size_t b = 0;
		if (cu.DeviceTotalMem && (rc = check(cu.DeviceTotalMem(&b, d), "cuDeviceTotalMem")))
			return rc;
		*total_mem = b;
	}
	return 0;
}

int lc__cuda_primary_ctx_retain(int ordinal, CUcontext *out)
{
	CUdevice d;
	int rc;
	NEED(DevicePrimaryCtxRetain);
	if ((rc = lc__cuda_device_get(ordinal, &d)))
		return rc;
	return check(cu.DevicePrimaryCtxRetain(out, d), "cuDevicePrimaryCtxRetain");
}

void lc__cuda_primary_ctx_release(int ordinal)
{
	CUdevice d;
	NEED_VOID(DevicePrimaryCtxRelease);
	if (lc__cuda_device_get(ordinal, &d) == 0)
		check(cu.DevicePrimaryCtxRelease(d), "cuDevicePrimaryCtxRelease");
}

int lc__cuda_ctx_push(CUcontext ctx)
{
	NEED(CtxPushCurrent);
	return check(cu.CtxPushCurrent(ctx), "cuCtxPushCurrent");
}

void lc__cuda_ctx_pop(void)
{
	CUcontext c;
	NEED_VOID(CtxPopCurrent);
	check(cu.CtxPopCurrent(&c), "cuCtxPopCurrent");
}

int lc__cuda_ctx_set(CUcontext ctx)
{
	NEED(CtxSetCurrent);
	return check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
}

int lc__cuda_ctx_synchronize(void)
{
	NEED(CtxSynchronize);
	return check(cu.CtxSynchronize(), "cuCtxSynchronize");
}

int lc__cuda_pointer_kind(const void *p, int *kind, int *device)
{
	unsigned type = 0;
	int ordinal = -1, managed = 0;
	if (!kind || !device)
		return -EINVAL;
	NEED(PointerGetAttribute);
	CUdeviceptr dp = (CUdeviceptr)(uintptr_t)p;
	CUresult r = cu.PointerGetAttribute(&type, LC__CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp);
	if (r == LC__CUDA_ERROR_INVALID_VALUE) {
		/* Memory CUDA does not know: plain host memory. */
		*kind = LC_CUDA_PTR_HOST;
		*device = -1;
		return 0;
	}
	int rc = check(r, "cuPointerGetAttribute(MEMORY_TYPE)");
	if (rc)
		return rc;
	if ((rc = check(cu.PointerGetAttribute(&managed, LC__CU_POINTER_ATTRIBUTE_IS_MANAGED, dp),
			"cuPointerGetAttribute(IS_MANAGED)")))
		return rc;
	if ((rc = check(
		     cu.PointerGetAttribute(&ordinal, LC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp),
		     "cuPointerGetAttribute(DEVICE_ORDINAL)")))
		return rc;
	if (managed)
		*kind = LC_CUDA_PTR_MANAGED;
	else if (type == LC__CU_MEMORYTYPE_DEVICE)
		*kind = LC_CUDA_PTR_DEVICE;
	else
		*kind = LC_CUDA_PTR_PINNED;
	*device = *kind == LC_CUDA_PTR_PINNED ? -1 : ordinal;
	return 0;
}

int lc__cuda_stream_create(CUstream *out)
{
	NEED(StreamCreate);
	return check(cu.StreamCreate(out, LC__CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

void lc__cuda_stream_destroy(CUstream s)
{
	NEED_VOID(StreamDestroy);
	check(cu.StreamDestroy(s), "cuStreamDestroy");
}

int lc__cuda_stream_ctx(CUstream s, CUcontext *out)
{
	NEED(StreamGetCtx);
	return check(cu.StreamGetCtx(s, out), "cuStreamGetCtx");
}

int lc__cuda_stream_synchronize(CUstream s)
{
	NEED(StreamSynchronize);
	return check(cu.StreamSynchronize(s), "cuStreamSynchronize");
}

int lc__cuda_event_create(CUevent *out)
{
	NEED(EventCreate);
	return check(cu.EventCreate(out, LC__CU_EVENT_BLOCKING_SYNC | LC__CU_EVENT_DISABLE_TIMING),
		     "cuEventCreate");
}

void lc__cuda_event_destroy(CUevent e)
{
	NEED_VOID(EventDestroy);
	check(cu.EventDestroy(e), "cuEventDestroy");
}

int lc__cuda_event_record(CUevent e, CUstream s)
{
	NEED(EventRecord);
	return check(cu.EventRecord(e, s), "cuEventRecord");
}

int lc__cuda_event_synchronize(CUevent e)
{
	NEED(EventSynchronize);
	return check(cu.EventSynchronize(e), "cuEventSynchronize");
}

int lc__cuda_memcpy_htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	NEED(MemcpyHtoDAsync);
	return check(cu.MemcpyHtoDAsync(dst, src, n, s), "cuMemcpyHtoDAsync");
}

int lc__cuda_memcpy_dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	NEED(MemcpyDtoHAsync);
	return check(cu.MemcpyDtoHAsync(dst, src, n, s), "cuMemcpyDtoHAsync");
}

int lc__cuda_memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	NEED(MemcpyDtoDAsync);
	return check(cu.MemcpyDtoDAsync(dst, src, n, s), "cuMemcpyDtoDAsync");
}

int lc__cuda_mem_alloc(CUdeviceptr *out, size_t n)
{
	NEED(MemAlloc);
	return check(cu.MemAlloc(out, n), "cuMemAlloc");
}

void lc__cuda_mem_free(CUdeviceptr p)
{
	NEED_VOID(MemFree);
	check(cu.MemFree(p), "cuMemFree");
}

int lc__cuda_host_register(void *p, size_t n, unsigned flags)
{
	NEED(MemHostRegister);
	return check(cu.MemHostRegister(p, n, flags), "cuMemHostRegister");
}

int lc__cuda_host_unregister(void *p)
{
	NEED(MemHostUnregister);
	return check(cu.MemHostUnregister(p), "cuMemHostUnregister");
}

int lc__cuda_host_device_ptr(void *p, CUdeviceptr *out)
{
	NEED(MemHostGetDevicePointer);
	return check(cu.MemHostGetDevicePointer(out, p, 0), "cuMemHostGetDevicePointer");
}

int lc__cuda_write_value64(CUstream s, CUdeviceptr dst, uint64_t value)
{
	NEED(StreamWriteValue64);
	return check(cu.StreamWriteValue64(s, dst, value, LC__CU_STREAM_WRITE_VALUE_DEFAULT),
		     "cuStreamWriteValue64");
}

int lc__cuda_ipc_get(CUdeviceptr p, CUipcMemHandle *out)
{
	NEED(IpcGetMemHandle);
	return check(cu.IpcGetMemHandle(out, p), "cuIpcGetMemHandle");
}

int lc__cuda_ipc_open(const CUipcMemHandle *h, CUdeviceptr *out)
{
	NEED(IpcOpenMemHandle);
	return check(cu.IpcOpenMemHandle(out, *h, LC__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		     "cuIpcOpenMemHandle");
}

int lc__cuda_ipc_close(CUdeviceptr p)
{
	NEED(IpcCloseMemHandle);
	return check(cu.IpcCloseMemHandle(p), "cuIpcCloseMemHandle");
}

int lc__cuda_ipc_open_on(int ordinal, const CUipcMemHandle *h, CUdeviceptr *out)
{
	CUcontext c;
	int rc = lc__cuda_primary_ctx_retain(ordinal, &c);
	if (rc)
		return rc;
	rc = lc__cuda_ctx_push(c);
	if (!rc) {
		rc = lc__cuda_ipc_open(h, out);
		lc__cuda_ctx_pop();
	}
	if (rc)
		lc__cuda_primary_ctx_release(ordinal);
	return rc; /* the retain is held until lc__cuda_ipc_close_on */
}

int lc__cuda_ipc_close_on(int ordinal, CUdeviceptr p)
{
	CUcontext c;
	int rc = lc__cuda_primary_ctx_retain(ordinal, &c);
	if (rc)
		return rc;
	rc = lc__cuda_ctx_push(c);
	if (!rc) {
		rc = lc__cuda_ipc_close(p);
		lc__cuda_ctx_pop();
	}
	lc__cuda_primary_ctx_release(ordinal);
	lc__cuda_primary_ctx_release(ordinal); /* open's */
	return rc;
}

int lc__cuda_mem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size)
{
	NEED(MemGetAddressRange);
	return check(cu.MemGetAddressRange(base, size, p), "cuMemGetAddressRange");
}

int lc__cuda_vmm_export(CUdeviceptr p, int *fd)
{
	if (lc__cuda_load())
		return LC_ENOTSUP;
	if (!cu.MemRetainAllocationHandle || !cu.MemRelease || !cu.MemExportToShareableHandle)
		return -ENOENT; /* a driver before VMM: no VMM memory either */
	CUmemGenericAllocationHandle h;
	/* Fails for memory that is not VMM-mapped: not an error. */
	if (cu.MemRetainAllocationHandle(&h, (void *)(uintptr_t)p) != LC__CUDA_SUCCESS)
		return -ENOENT;
	int out = -1;
	int rc = check(cu.MemExportToShareableHandle(
			       &out, h, LC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		       "cuMemExportToShareableHandle");
	check(cu.MemRelease(h), "cuMemRelease");
	if (!rc)
		*fd = out;
	return rc;
}

int lc__cuda_vmm_import(int ordinal, int fd, size_t size, CUdeviceptr *out)
{
	NEED(MemImportFromShareableHandle);
	NEED(MemAddressReserve);
	NEED(MemMap);
	NEED(MemSetAccess);
	NEED(MemAddressFree);
	NEED(MemUnmap);
	NEED(MemRelease);
	CUcontext c;
	int rc = lc__cuda_primary_ctx_retain(ordinal, &c);
	if (rc)
		return rc;
	rc = lc__cuda_ctx_push(c);
	if (rc) {
		lc__cuda_primary_ctx_release(ordinal);
		return rc;
	}
	CUmemGenericAllocationHandle h;
	CUdeviceptr va = 0;
	bool reserved = false, mapped = false, imported = false;
	rc = check(cu.MemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
						   LC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		   "cuMemImportFromShareableHandle");
	imported = rc == 0;
	if (!rc)
		rc = check(cu.MemAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
	reserved = imported && rc == 0;
	if (!rc)
		rc = check(cu.MemMap(va, size, 0, h, 0), "cuMemMap");
	mapped = reserved && rc == 0;
	if (!rc) {
		CUmemAccessDesc a = {
			.location = {.type = LC__CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal},
			.flags = LC__CU_MEM_ACCESS_FLAGS_PROT_READ};
		rc = check(cu.MemSetAccess(va, size, &a, 1), "cuMemSetAccess");
	}
	/* The mapping keeps the physical allocation alive: the handle can go. */
	if (imported)
		check(cu.MemRelease(h), "cuMemRelease");
	if (rc && mapped)
		check(cu.MemUnmap(va, size), "cuMemUnmap");
	if (rc && reserved)
		check(cu.MemAddressFree(va, size), "cuMemAddressFree");
	lc__cuda_ctx_pop();
	if (rc)
		lc__cuda_primary_ctx_release(ordinal);
	else
		*out = va; /* the retain is held until lc__cuda_vmm_close */
	return rc;
}

void lc__cuda_vmm_close(int ordinal, CUdeviceptr p, size_t size)
{
	NEED_VOID(MemUnmap);
	NEED_VOID(MemAddressFree);
	CUcontext c;
	if (lc__cuda_primary_ctx_retain(ordinal, &c))
		return;
	if (!lc__cuda_ctx_push(c)) {
		check(cu.MemUnmap(p, size), "cuMemUnmap");
		check(cu.MemAddressFree(p, size), "cuMemAddressFree");
		lc__cuda_ctx_pop();
	}
	lc__cuda_primary_ctx_release(ordinal);
	lc__cuda_primary_ctx_release(ordinal); /* import's */
}

/* ---- public -------------------------------------------------------------- */

int lc_cuda_info(lc_cuda_info_t *out)
{
	if (!out || out->size < offsetof(lc_cuda_info_t, why))
		return LC__FAIL(-EINVAL, "lc_cuda_info: %s",
				out ? "out->size is too small (sizeof(lc_cuda_info_t))"
				    : "out is NULL");
	lc_cuda_info_t i;
	memset(&i, 0, sizeof(i));
	const char *lib = lc__config_env_str(LC__CFGS_cuda_lib);
	snprintf(i.library, sizeof i.library, "%s", lib ? lib : "libcuda.so.1");
	if (lc__cuda_load() == 0) {
		i.found = 1;
		lc__cuda_device_count(&i.device_count);
		lc__cuda_driver_version(&i.driver_version);
	}
	snprintf(i.why, sizeof i.why, "%s", why);
	i.errors = lc__cuda_errors();
	size_t n = LC__MIN(out->size, sizeof(i));
	i.size = n;
	memcpy(out, &i, n);
	return 0;
}

int lc_cuda_device(int ordinal, lc_cuda_device_t *out)
{
	if (!out || out->size < sizeof(size_t))
		return LC__FAIL(-EINVAL, "lc_cuda_device: %s",
				out ? "out->size is not set (sizeof(lc_cuda_device_t))"
				    : "out is NULL");
	lc_cuda_device_t d;
	memset(&d, 0, sizeof(d));
	d.ordinal = ordinal;
	int rc = lc__cuda_device_describe(ordinal, d.name, sizeof d.name, d.pci_bus_id,
					  sizeof d.pci_bus_id, &d.total_mem);
	if (rc)
		return rc;
	size_t n = LC__MIN(out->size, sizeof(d));
	d.size = n;
	memcpy(out, &d, n);
	return 0;
}

int lc_cuda_pointer_kind(const void *p, int *kind, int *device)
{
	return lc__cuda_pointer_kind(p, kind, device);
}
