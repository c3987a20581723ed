/*
 * The CUDA driver shim (docs/gpu.md "CUDA without CUDA at build
 * time"). libcuda is opened with dlopen at first use (the text knob
 * cuda_lib, default "libcuda.so.1") and its functions are reached through
 * one table; the types and constants below are the driver API's documented
 * ones, declared here so that nothing CUDA is needed to build. Never include
 * <cuda.h> next to this header.
 *
 * Every wrapper returns 0, LC_ENOTSUP when the driver is absent (nothing is
 * logged for that: it is the host-only case), or, when the CUDA call fails,
 * an LC code (-EINVAL, -ENOMEM, -EEXIST, -ENOTSUP, LC_ERR_CUDA) after a log
 * line naming the call and its CUresult (cuGetErrorName) and a count in
 * lc__cuda_errors().
 *
 * Threading: the table is filled once (pthread_once) and read-only after.
 * Wrappers are safe from any thread as the driver is; those that need a
 * context say so (the caller makes one current: lc__cuda_ctx_push/pop).
 */
#ifndef LC_CORE_CUDA_H
#define LC_CORE_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
#define LC__CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
	char reserved[LC__CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
/* The virtual memory management API (cuMemCreate/cuMemMap: PyTorch's
 * expandable segments). */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemLocation_st {
	int type; /* CUmemLocationType: LC__CU_MEM_LOCATION_TYPE_DEVICE */
	int id;   /* the device ordinal */
} CUmemLocation;
typedef struct CUmemAccessDesc_st {
	CUmemLocation location;
	int flags; /* CUmemAccess_flags */
} CUmemAccessDesc;
#define LC__CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define LC__CU_MEM_LOCATION_TYPE_DEVICE 0x1
#define LC__CU_MEM_ACCESS_FLAGS_PROT_READ 0x1

enum {
	LC__CUDA_SUCCESS = 0,
	LC__CUDA_ERROR_INVALID_VALUE = 1,
	LC__CUDA_ERROR_OUT_OF_MEMORY = 2,
	LC__CUDA_ERROR_NO_DEVICE = 100,
	LC__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	LC__CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	LC__CUDA_ERROR_NOT_SUPPORTED = 801,
};
enum {
	LC__CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	LC__CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	LC__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
};
enum { LC__CU_MEMORYTYPE_HOST = 1, LC__CU_MEMORYTYPE_DEVICE = 2, LC__CU_MEMORYTYPE_UNIFIED = 4 };
#define LC__CU_MEMHOSTREGISTER_PORTABLE 0x01u
#define LC__CU_MEMHOSTREGISTER_DEVICEMAP 0x02u
#define LC__CU_STREAM_NON_BLOCKING 0x1u
#define LC__CU_EVENT_BLOCKING_SYNC 0x1u
#define LC__CU_EVENT_DISABLE_TIMING 0x2u
#define LC__CU_STREAM_WRITE_VALUE_DEFAULT 0x0u
#define LC__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1u

/* Load and cuInit once per process: 0 or LC_ENOTSUP. */
int lc__cuda_load(void);
/* Whether the driver is loaded already (never loads it): a peer offers
 * CUDA IPC only where device memory made it load CUDA. */
int lc__cuda_loaded(void);
/* Why the last load failed ("" when loaded or not tried). Static. */
const char *lc__cuda_why(void);
/* CUDA calls that failed in this process. */
uint64_t lc__cuda_errors(void);
int lc__cuda_driver_version(int *out);

int lc__cuda_device_count(int *out);
int lc__cuda_device_get(int ordinal, CUdevice *out);
/* Name, PCI bus id and memory of a device; any of the outputs may be NULL. */
int lc__cuda_device_describe(int ordinal, char *name, size_t name_cap, char *pci, size_t pci_cap,
			     uint64_t *total_mem);

/* The device's primary context, retained (release it once per retain). */
int lc__cuda_primary_ctx_retain(int ordinal, CUcontext *out);
void lc__cuda_primary_ctx_release(int ordinal);
/* Make ctx current on this thread (push) and undo it (pop); set: bind. */
int lc__cuda_ctx_push(CUcontext ctx);
void lc__cuda_ctx_pop(void);
int lc__cuda_ctx_set(CUcontext ctx);
int lc__cuda_ctx_synchronize(void); /* needs a current context */

/* *kind: lc_cuda_ptr_kind_t; *device: the ordinal, -1 for host memory. */
int lc__cuda_pointer_kind(const void *p, int *kind, int *device);

/* Streams and events (need a current context). Events are made with
 * BLOCKING_SYNC | DISABLE_TIMING: a waiter sleeps instead of spinning. */
int lc__cuda_stream_create(CUstream *out);
void lc__cuda_stream_destroy(CUstream s);
int lc__cuda_stream_ctx(CUstream s, CUcontext *out);
int lc__cuda_stream_synchronize(CUstream s);
int lc__cuda_event_create(CUevent *out);
void lc__cuda_event_destroy(CUevent e);
int lc__cuda_event_record(CUevent e, CUstream s);
int lc__cuda_event_synchronize(CUevent e);

int lc__cuda_memcpy_htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream s);
int lc__cuda_memcpy_dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream s);
int lc__cuda_memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
/* Synchronous helpers for tests and tools. */
int lc__cuda_mem_alloc(CUdeviceptr *out, size_t n);
void lc__cuda_mem_free(CUdeviceptr p);

/* Page-lock host memory (flags LC__CU_MEMHOSTREGISTER_*); -EEXIST when
 * CUDA already has it registered (not counted as an error). */
int lc__cuda_host_register(void *p, size_t n, unsigned flags);
int lc__cuda_host_unregister(void *p);
/* The device address of mapped host memory (registered with DEVICEMAP). */
int lc__cuda_host_device_ptr(void *p, CUdeviceptr *out);
/* Enqueue a 64-bit write of `value` to dst on stream s: no kernel, ordered
 * with the stream's other work, capturable in CUDA graphs. */
int lc__cuda_write_value64(CUstream s, CUdeviceptr dst, uint64_t value);

/* CUDA IPC: export an allocation (cuMemAlloc), import it in another
 * process (lazy peer access), close the import. */
int lc__cuda_ipc_get(CUdeviceptr p, CUipcMemHandle *out);
int lc__cuda_ipc_open(const CUipcMemHandle *h, CUdeviceptr *out);
int lc__cuda_ipc_close(CUdeviceptr p);
/* Same, in the primary context of device `ordinal` (pushed for the call). */
int lc__cuda_ipc_open_on(int ordinal, const CUipcMemHandle *h, CUdeviceptr *out);
int lc__cuda_ipc_close_on(int ordinal, CUdeviceptr p);

/* The allocation holding p: its base and size (cuMemGetAddressRange). */
int lc__cuda_mem_range(CUdeviceptr p, CUdeviceptr *base, size_t *size);

/* VMM allocations. lc__cuda_vmm_export: when p lies in memory mapped with
 * cuMemMap, a POSIX file descriptor of its physical allocation
 * (cuMemRetainAllocationHandle + cuMemExportToShareableHandle, the handle
 * released again); -ENOENT, quietly, when p is not VMM memory (the
 * caller then uses cuIpcGetMemHandle). */
int lc__cuda_vmm_export(CUdeviceptr p, int *fd);
/* Import an exported allocation of `size` bytes on device `ordinal`:
 * cuMemImportFromShareableHandle, cuMemAddressReserve, cuMemMap and
 * cuMemSetAccess (read access for the device). *out is its address until
 * lc__cuda_vmm_close. The fd stays the caller's. */
int lc__cuda_vmm_import(int ordinal, int fd, size_t size, CUdeviceptr *out);
void lc__cuda_vmm_close(int ordinal, CUdeviceptr p, size_t size);

#endif
