/*
 * The CUDA shim against drivers that fail or lack entry points, on the
 * fake libcuda (fakecuda.c) and its smallest sibling (fakecuda_min.c).
 * One process per case:
 *
 *   each      every entry point the shim resolves fails in turn
 *             (FAKECUDA_FAIL, read by the fake at each call): the call
 *             that uses it returns LC_ERR_CUDA and the shim counts it
 *             (lc_cuda_info's errors); CUDA's codes map to their errno
 *             (FAKECUDA_FAIL_CODE); the composite calls (IPC open/close on
 *             a device, VMM import/close) undo what they did when one
 *             step fails. Afterwards the driver works again.
 *   missing   a driver with only the required entry points: every optional
 *             one is LC_ENOTSUP, the plain-name fallback is used, nothing
 *             is counted as a failed call.
 *   unloaded  no driver at all: the same calls refused, the dlopen error kept.
 *   noreq     a driver without the required cuDeviceGet: not usable, and
 *             lc_cuda_info says which symbol is missing.
 *   initname  cuInit fails and so does cuGetErrorName: why names the code.
 *
 * Usage: test_cudafail CASE
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cuda.h"
#include "layercake.h"
#include "testutil.h"

#define N 4096

static struct {
	CUcontext ctx;
	CUstream s;
	CUevent ev;
	CUdeviceptr d, d2;
	uint8_t *host;
	CUipcMemHandle ipc;
} w;

static uint64_t errors(void)
{
	lc_cuda_info_t i = {.size = sizeof i};
	TU_OK(lc_cuda_info(&i));
	TU_CHECK(i.errors == lc__cuda_errors(), "info.errors %llu, shim %llu",
		 (unsigned long long)i.errors, (unsigned long long)lc__cuda_errors());
	return i.errors;
}

/* ---- each: one call per entry point, with valid arguments ---------------- */

static int c_version(void)
{
	int v;
	return lc__cuda_driver_version(&v);
}
static int c_count(void)
{
	int n;
	return lc__cuda_device_count(&n);
}
static int c_get(void)
{
	CUdevice d;
	return lc__cuda_device_get(0, &d);
}
static int c_device(void)
{
	lc_cuda_device_t d = {.size = sizeof d};
	return lc_cuda_device(0, &d);
}
static int c_retain(void)
{
	CUcontext c;
	int rc = lc__cuda_primary_ctx_retain(0, &c);
	if (!rc)
		lc__cuda_primary_ctx_release(0);
	return rc;
}
static int c_push(void)
{
	int rc = lc__cuda_ctx_push(w.ctx);
	if (!rc)
		lc__cuda_ctx_pop();
	return rc;
}
static int c_set(void)
{
	return lc__cuda_ctx_set(w.ctx);
}
static int c_sync(void)
{
	return lc__cuda_ctx_synchronize();
}
static int c_kind(void)
{
	int kind, dev;
	return lc_cuda_pointer_kind((void *)(uintptr_t)w.d, &kind, &dev);
}
static int c_stream(void)
{
	CUstream s;
	int rc = lc__cuda_stream_create(&s);
	if (!rc)
		lc__cuda_stream_destroy(s);
	return rc;
}
static int c_stream_ctx(void)
{
	CUcontext c;
	return lc__cuda_stream_ctx(w.s, &c);
}
static int c_stream_sync(void)
{
	return lc__cuda_stream_synchronize(w.s);
}
static int c_event(void)
{
	CUevent e;
	int rc = lc__cuda_event_create(&e);
	if (!rc)
		lc__cuda_event_destroy(e);
	return rc;
}
static int c_record(void)
{
	return lc__cuda_event_record(w.ev, w.s);
}
static int c_event_sync(void)
{
	return lc__cuda_event_synchronize(w.ev);
}
static int c_htod(void)
{
	return lc__cuda_memcpy_htod_async(w.d, w.host, N, w.s);
}
static int c_dtoh(void)
{
	return lc__cuda_memcpy_dtoh_async(w.host, w.d, N, w.s);
}
static int c_dtod(void)
{
	return lc__cuda_memcpy_dtod_async(w.d2, w.d, N, w.s);
}
static int c_alloc(void)
{
	CUdeviceptr p;
	int rc = lc__cuda_mem_alloc(&p, N);
	if (!rc)
		lc__cuda_mem_free(p);
	return rc;
}
static int c_register(void)
{
	uint8_t *b = malloc(N);
	int rc = lc__cuda_host_register(b, N, LC__CU_MEMHOSTREGISTER_DEVICEMAP);
	if (!rc)
		TU_OK(lc__cuda_host_unregister(b));
	free(b);
	return rc;
}
static int c_unregister(void)
{
	uint8_t *b = malloc(N);
	TU_OK(lc__cuda_host_register(b, N, 0));
	int rc = lc__cuda_host_unregister(b);
	if (rc) {
		unsetenv("FAKECUDA_FAIL");
		TU_OK(lc__cuda_host_unregister(b));
	}
	free(b);
	return rc;
}
static int c_devptr(void)
{
	CUdeviceptr p;
	return lc__cuda_host_device_ptr(w.host, &p);
}
static int c_write(void)
{
	return lc__cuda_write_value64(w.s, (CUdeviceptr)(uintptr_t)w.host, 7);
}
static int c_ipc_get(void)
{
	CUipcMemHandle h;
	return lc__cuda_ipc_get(w.d, &h);
}
static int c_ipc_open(void)
{
	CUdeviceptr p;
	int rc = lc__cuda_ipc_open_on(0, &w.ipc, &p);
	if (!rc)
		TU_OK(lc__cuda_ipc_close_on(0, p));
	return rc;
}
static int c_ipc_close(void)
{
	CUdeviceptr p;
	const char *f = getenv("FAKECUDA_FAIL");
	char keep[64];
	snprintf(keep, sizeof keep, "%s", f ? f : "");
	unsetenv("FAKECUDA_FAIL");
	TU_OK(lc__cuda_ipc_open_on(0, &w.ipc, &p));
	setenv("FAKECUDA_FAIL", keep, 1);
	int rc = lc__cuda_ipc_close_on(0, p);
	if (rc) {
		/* The retains are gone either way; the mapping is still open. */
		unsetenv("FAKECUDA_FAIL");
		TU_OK(lc__cuda_ipc_close(p));
	}
	return rc;
}
static int c_range(void)
{
	CUdeviceptr base;
	size_t size;
	return lc__cuda_mem_range(w.d + 8, &base, &size);
}

/* VMM: memory allocated with FAKECUDA_VMM=1 is VMM-mapped memory. */
static int vmm_export(int *fd)
{
	CUdeviceptr p;
	setenv("FAKECUDA_VMM", "1", 1);
	const char *f = getenv("FAKECUDA_FAIL");
	char keep[64];
	snprintf(keep, sizeof keep, "%s", f ? f : "");
	unsetenv("FAKECUDA_FAIL");
	TU_OK(lc__cuda_mem_alloc(&p, N));
	setenv("FAKECUDA_FAIL", keep, 1);
	int rc = lc__cuda_vmm_export(p, fd);
	unsetenv("FAKECUDA_FAIL");
	lc__cuda_mem_free(p);
	setenv("FAKECUDA_FAIL", keep, 1);
	unsetenv("FAKECUDA_VMM");
	return rc;
}
static int c_vmm_export(void)
{
	int fd = -1;
	int rc = vmm_export(&fd);
	if (!rc)
		close(fd);
	return rc;
}
static int c_vmm_import(void)
{
	int fd = -1;
	const char *f = getenv("FAKECUDA_FAIL");
	char keep[64];
	snprintf(keep, sizeof keep, "%s", f ? f : "");
	unsetenv("FAKECUDA_FAIL");
	TU_OK(vmm_export(&fd));
	setenv("FAKECUDA_FAIL", keep, 1);
	CUdeviceptr p;
	int rc = lc__cuda_vmm_import(0, fd, N, &p);
	if (!rc)
		lc__cuda_vmm_close(0, p, N);
	close(fd);
	return rc;
}

static const struct {
	const char *fail; /* the entry point made to fail */
	int (*call)(void);
	int want; /* what the call returns then */
} calls[] = {
	{"cuDriverGetVersion", c_version, LC_ERR_CUDA},
	{"cuDeviceGetCount", c_count, LC_ERR_CUDA},
	{"cuDeviceGet", c_get, LC_ERR_CUDA},
	{"cuDeviceGetName", c_device, LC_ERR_CUDA},
	{"cuDeviceGetPCIBusId", c_device, LC_ERR_CUDA},
	{"cuDeviceTotalMem_v2", c_device, LC_ERR_CUDA},
	{"cuDevicePrimaryCtxRetain", c_retain, LC_ERR_CUDA},
	{"cuCtxPushCurrent_v2", c_push, LC_ERR_CUDA},
	{"cuCtxSetCurrent", c_set, LC_ERR_CUDA},
	{"cuCtxSynchronize", c_sync, LC_ERR_CUDA},
	{"cuPointerGetAttribute", c_kind, LC_ERR_CUDA},
	{"cuStreamCreate", c_stream, LC_ERR_CUDA},
	{"cuStreamGetCtx", c_stream_ctx, LC_ERR_CUDA},
	{"cuStreamSynchronize", c_stream_sync, LC_ERR_CUDA},
	{"cuEventCreate", c_event, LC_ERR_CUDA},
	{"cuEventRecord", c_record, LC_ERR_CUDA},
	{"cuEventSynchronize", c_event_sync, LC_ERR_CUDA},
	{"cuMemcpyHtoDAsync_v2", c_htod, LC_ERR_CUDA},
	{"cuMemcpyDtoHAsync_v2", c_dtoh, LC_ERR_CUDA},
	{"cuMemcpyDtoDAsync_v2", c_dtod, LC_ERR_CUDA},
	{"cuMemAlloc_v2", c_alloc, LC_ERR_CUDA},
	{"cuMemHostRegister_v2", c_register, LC_ERR_CUDA},
	{"cuMemHostUnregister", c_unregister, LC_ERR_CUDA},
	{"cuMemHostGetDevicePointer_v2", c_devptr, LC_ERR_CUDA},
	{"cuStreamWriteValue64_v2", c_write, LC_ERR_CUDA},
	{"cuIpcGetMemHandle", c_ipc_get, LC_ERR_CUDA},
	{"cuIpcOpenMemHandle_v2", c_ipc_open, LC_ERR_CUDA},
	/* open_on's own steps: a failed retain or push opens nothing */
	{"cuDevicePrimaryCtxRetain", c_ipc_open, LC_ERR_CUDA},
	{"cuCtxPushCurrent_v2", c_ipc_open, LC_ERR_CUDA},
	{"cuIpcCloseMemHandle", c_ipc_close, LC_ERR_CUDA},
	{"cuDevicePrimaryCtxRetain", c_ipc_close, LC_ERR_CUDA},
	{"cuCtxPushCurrent_v2", c_ipc_close, LC_ERR_CUDA},
	{"cuMemGetAddressRange_v2", c_range, LC_ERR_CUDA},
	/* not VMM memory as far as this driver can tell: not an error */
	{"cuMemRetainAllocationHandle", c_vmm_export, -ENOENT},
	{"cuMemExportToShareableHandle", c_vmm_export, LC_ERR_CUDA},
	/* the handle's release failing is counted, the export stands */
	{"cuMemRelease", c_vmm_export, 0},
	{"cuMemImportFromShareableHandle", c_vmm_import, LC_ERR_CUDA},
	{"cuMemAddressReserve", c_vmm_import, LC_ERR_CUDA},
	{"cuMemMap", c_vmm_import, LC_ERR_CUDA},
	{"cuMemSetAccess", c_vmm_import, LC_ERR_CUDA},
	{"cuDevicePrimaryCtxRetain", c_vmm_import, LC_ERR_CUDA},
	{"cuCtxPushCurrent_v2", c_vmm_import, LC_ERR_CUDA},
};

/* Calls that return nothing: the failure is counted, nothing breaks. */
static void void_fails(void)
{
	static const char *const names[] = {"cuDevicePrimaryCtxRelease_v2", "cuCtxPopCurrent_v2",
					    "cuStreamDestroy_v2", "cuEventDestroy_v2",
					    "cuMemFree_v2"};
	CUcontext c;
	CUstream s;
	CUevent e;
	CUdeviceptr p;
	TU_OK(lc__cuda_primary_ctx_retain(0, &c));
	TU_OK(lc__cuda_ctx_push(c));
	TU_OK(lc__cuda_stream_create(&s));
	TU_OK(lc__cuda_event_create(&e));
	TU_OK(lc__cuda_mem_alloc(&p, N));
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		uint64_t before = errors();
		setenv("FAKECUDA_FAIL", names[i], 1);
		switch (i) {
		case 0:
			lc__cuda_primary_ctx_release(0);
			break;
		case 1:
			lc__cuda_ctx_pop();
			break;
		case 2:
			lc__cuda_stream_destroy(s);
			break;
		case 3:
			lc__cuda_event_destroy(e);
			break;
		case 4:
			lc__cuda_mem_free(p);
			break;
		}
		unsetenv("FAKECUDA_FAIL");
		TU_CHECK(errors() == before + 1, "%s failing was not counted", names[i]);
	}
	lc__cuda_primary_ctx_release(0);
	lc__cuda_ctx_pop();
	lc__cuda_stream_destroy(s);
	lc__cuda_event_destroy(e);
	lc__cuda_mem_free(p);
	/* VMM close: a failed retain or push unmaps nothing, the unmap and
	 * address free failing are counted. */
	static const char *const vmm[] = {"cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2",
					  "cuMemUnmap,cuMemAddressFree"};
	for (size_t i = 0; i < sizeof vmm / sizeof vmm[0]; i++) {
		int fd = -1;
		TU_OK(vmm_export(&fd));
		TU_OK(lc__cuda_vmm_import(0, fd, N, &p));
		close(fd);
		uint64_t before = errors();
		setenv("FAKECUDA_FAIL", vmm[i], 1);
		lc__cuda_vmm_close(0, p, N);
		unsetenv("FAKECUDA_FAIL");
		TU_CHECK(errors() > before, "vmm close with %s failing was not counted", vmm[i]);
		if (i < 2)
			lc__cuda_vmm_close(0, p, N);
	}
}

static int case_each(void)
{
	lc_cuda_info_t info = {.size = sizeof info};
	TU_OK(lc_cuda_info(&info));
	TU_CHECK(info.found && info.errors == 0, "fake driver: found %d errors %llu", info.found,
		 (unsigned long long)info.errors);
	TU_OK(lc__cuda_primary_ctx_retain(0, &w.ctx));
	TU_OK(lc__cuda_ctx_set(w.ctx));
	TU_OK(lc__cuda_stream_create(&w.s));
	TU_OK(lc__cuda_event_create(&w.ev));
	TU_OK(lc__cuda_mem_alloc(&w.d, N));
	TU_OK(lc__cuda_mem_alloc(&w.d2, N));
	TU_OK(lc__cuda_ipc_get(w.d, &w.ipc));
	w.host = malloc(N);
	TU_OK(lc__cuda_host_register(w.host, N, LC__CU_MEMHOSTREGISTER_DEVICEMAP));
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		unsetenv("FAKECUDA_FAIL");
		TU_CHECK(calls[i].call() == 0, "%s: fails before %s is made to", calls[i].fail,
			 calls[i].fail);
		uint64_t before = errors();
		setenv("FAKECUDA_FAIL", calls[i].fail, 1);
		int rc = calls[i].call();
		unsetenv("FAKECUDA_FAIL");
		TU_CHECK(rc == calls[i].want, "%s failing: %d (%s), want %d (%s)", calls[i].fail,
			 rc, lc_err_name(rc), calls[i].want, lc_err_name(calls[i].want));
		/* -ENOENT is an answer (not VMM memory), not a failure */
		TU_CHECK(calls[i].want == -ENOENT ? errors() == before : errors() > before,
			 "%s failing: counted %llu", calls[i].fail,
			 (unsigned long long)(errors() - before));
		TU_CHECK(calls[i].call() == 0, "%s: still failing once the driver is back",
			 calls[i].fail);
	}
	void_fails();
	/* CUDA's codes as errno values; a code the driver cannot name. */
	static const struct {
		const char *code;
		int want;
	} codes[] = {{"1", -EINVAL}, {"2", -ENOMEM}, {"801", -ENOTSUP}, {"700", LC_ERR_CUDA}};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		uint64_t before = errors();
		setenv("FAKECUDA_FAIL", "cuMemAlloc_v2", 1);
		setenv("FAKECUDA_FAIL_CODE", codes[i].code, 1);
		int rc = c_alloc();
		unsetenv("FAKECUDA_FAIL");
		unsetenv("FAKECUDA_FAIL_CODE");
		TU_CHECK(rc == codes[i].want, "code %s: %d, want %d", codes[i].code, rc,
			 codes[i].want);
		TU_CHECK(errors() == before + 1, "code %s was not counted", codes[i].code);
	}
	/* Already registered is -EEXIST and no failure. */
	uint64_t before = errors();
	TU_CHECK(lc__cuda_host_register(w.host, N, 0) == -EEXIST, "second register");
	TU_CHECK(errors() == before, "EEXIST counted as a failure");
	/* The public calls refuse bad arguments with a reason. */
	TU_CHECK(lc_cuda_info(NULL) == -EINVAL && strstr(lc_last_error(), "out is NULL"), "%s",
		 lc_last_error());
	lc_cuda_info_t small = {.size = 4};
	TU_CHECK(lc_cuda_info(&small) == -EINVAL && strstr(lc_last_error(), "too small"), "%s",
		 lc_last_error());
	TU_CHECK(lc_cuda_device(0, NULL) == -EINVAL && strstr(lc_last_error(), "out is NULL"), "%s",
		 lc_last_error());
	lc_cuda_device_t nodev = {.size = 0};
	TU_CHECK(lc_cuda_device(0, &nodev) == -EINVAL && strstr(lc_last_error(), "not set"), "%s",
		 lc_last_error());
	lc_cuda_device_t dev = {.size = sizeof dev};
	TU_CHECK(lc_cuda_device(1, &dev) == -ERANGE && lc_cuda_device(-1, &dev) == -ERANGE,
		 "a device that is not there");
	int kind, devno;
	TU_CHECK(lc_cuda_pointer_kind(w.host, NULL, &devno) == -EINVAL, "kind NULL");
	TU_OK(lc_cuda_pointer_kind(w.host, &kind, &devno));
	TU_CHECK(kind == LC_CUDA_PTR_PINNED && devno == -1, "registered host memory: %d", kind);
	int plain = 0;
	TU_OK(lc_cuda_pointer_kind(&plain, &kind, &devno));
	TU_CHECK(kind == LC_CUDA_PTR_HOST, "stack memory: %d", kind);
	TU_OK(lc__cuda_host_unregister(w.host));
	printf("each: %zu entry points failed in turn, %llu failures counted\n",
	       sizeof calls / sizeof calls[0], (unsigned long long)errors());
	return 0;
}

/* ---- missing, unloaded: every call refused -------------------------------- */

/* Every wrapper refuses with LC_ENOTSUP and counts nothing; vmm_export says
 * vmm_export_want (-ENOENT: a loaded driver before VMM has no VMM memory;
 * LC_ENOTSUP when no driver is loaded). */
static void refuse_all(int vmm_export_want)
{
	CUcontext c = (CUcontext)1;
	CUstream s = NULL;
	CUevent e = NULL;
	CUdeviceptr p = 0, base;
	CUipcMemHandle h = {{0}};
	size_t size;
	uint8_t buf[64];
	int fd = -1, kind, dev, x = 0;
	const struct {
		const char *what;
		int rc;
	} r[] = {
		{"pointer_kind", lc_cuda_pointer_kind(&x, &kind, &dev)},
		{"primary_ctx_retain", lc__cuda_primary_ctx_retain(0, &c)},
		{"ctx_push", lc__cuda_ctx_push(c)},
		{"ctx_set", lc__cuda_ctx_set(c)},
		{"ctx_synchronize", lc__cuda_ctx_synchronize()},
		{"stream_create", lc__cuda_stream_create(&s)},
		{"stream_ctx", lc__cuda_stream_ctx(s, &c)},
		{"stream_synchronize", lc__cuda_stream_synchronize(s)},
		{"event_create", lc__cuda_event_create(&e)},
		{"event_record", lc__cuda_event_record(e, s)},
		{"event_synchronize", lc__cuda_event_synchronize(e)},
		{"memcpy_htod", lc__cuda_memcpy_htod_async(p, buf, sizeof buf, s)},
		{"memcpy_dtoh", lc__cuda_memcpy_dtoh_async(buf, p, sizeof buf, s)},
		{"memcpy_dtod", lc__cuda_memcpy_dtod_async(p, p, sizeof buf, s)},
		{"mem_alloc", lc__cuda_mem_alloc(&p, sizeof buf)},
		{"host_register", lc__cuda_host_register(buf, sizeof buf, 0)},
		{"host_unregister", lc__cuda_host_unregister(buf)},
		{"host_device_ptr", lc__cuda_host_device_ptr(buf, &p)},
		{"write_value64", lc__cuda_write_value64(s, p, 1)},
		{"ipc_get", lc__cuda_ipc_get(p, &h)},
		{"ipc_open", lc__cuda_ipc_open(&h, &p)},
		{"ipc_close", lc__cuda_ipc_close(p)},
		{"ipc_open_on", lc__cuda_ipc_open_on(0, &h, &p)},
		{"ipc_close_on", lc__cuda_ipc_close_on(0, p)},
		{"mem_range", lc__cuda_mem_range(p, &base, &size)},
		{"vmm_import", lc__cuda_vmm_import(0, 0, 4096, &p)},
	};
	for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
		TU_CHECK(r[i].rc == LC_ENOTSUP, "%s without its entry point: %d (%s)", r[i].what,
			 r[i].rc, lc_err_name(r[i].rc));
	int rc = lc__cuda_vmm_export(p, &fd);
	TU_CHECK(rc == vmm_export_want && fd == -1, "vmm_export: %d, want %d", rc, vmm_export_want);
	/* The void ones do nothing. */
	lc__cuda_primary_ctx_release(0);
	lc__cuda_ctx_pop();
	lc__cuda_stream_destroy(s);
	lc__cuda_event_destroy(e);
	lc__cuda_mem_free(p);
	lc__cuda_vmm_close(0, p, 4096);
	TU_CHECK(lc__cuda_errors() == 0, "%llu failures counted for absent entry points",
		 (unsigned long long)lc__cuda_errors());
	printf("%zu calls refused with LC_ENOTSUP\n", sizeof r / sizeof r[0]);
}

/* A driver with only the required entry points (run at the default log
 * level and with warnings off: the refusal is the same). */
static int case_missing(void)
{
	lc_cuda_info_t info = {.size = sizeof info};
	TU_OK(lc_cuda_info(&info));
	TU_CHECK(info.found && info.device_count == 1 && info.driver_version == 9000,
		 "found %d devices %d driver %d (%s)", info.found, info.device_count,
		 info.driver_version, info.why);
	lc_cuda_device_t d = {.size = sizeof d};
	TU_OK(lc_cuda_device(0, &d));
	TU_CHECK(!d.name[0] && !d.pci_bus_id[0], "name '%s' pci '%s' from a driver without them",
		 d.name, d.pci_bus_id);
	TU_CHECK(d.total_mem == 1u << 20, "total_mem %llu: cuDeviceTotalMem not used",
		 (unsigned long long)d.total_mem);
	refuse_all(-ENOENT);
	return 0;
}

/* No driver at all: the same calls refused, the reason kept. */
static int case_unloaded(void)
{
	lc_cuda_info_t info = {.size = sizeof info};
	TU_OK(lc_cuda_info(&info));
	TU_CHECK(!info.found && strstr(info.why, "dlopen"), "found %d why %s", info.found,
		 info.why);
	refuse_all(LC_ENOTSUP);
	return 0;
}

static int case_noreq(void)
{
	lc_cuda_info_t info = {.size = sizeof info};
	TU_OK(lc_cuda_info(&info));
	TU_CHECK(!info.found && strstr(info.why, "symbol cuDeviceGet missing"), "found %d why %s",
		 info.found, info.why);
	int n;
	TU_CHECK(lc__cuda_device_count(&n) == LC_ENOTSUP, "device count on an unusable driver");
	lc_cuda_device_t d = {.size = sizeof d};
	TU_CHECK(lc_cuda_device(0, &d) == LC_ENOTSUP, "device on an unusable driver");
	return 0;
}

static int case_initname(void)
{
	lc_cuda_info_t info = {.size = sizeof info};
	TU_OK(lc_cuda_info(&info));
	TU_CHECK(!info.found && strstr(info.why, "cuInit: CUDA_ERROR_? (999)"), "found %d why %s",
		 info.found, info.why);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(void);
	} cases[] = {{"each", case_each},
		     {"missing", case_missing},
		     {"unloaded", case_unloaded},
		     {"noreq", case_noreq},
		     {"initname", case_initname}};
	tu_watchdog(60);
	for (size_t i = 0; argc > 1 && i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(argv[1], cases[i].name)) {
			int rc = cases[i].fn();
			if (!rc)
				printf("ok %s\n", cases[i].name);
			return rc;
		}
	fprintf(stderr, "usage: test_cudafail CASE\n");
	return 2;
}
