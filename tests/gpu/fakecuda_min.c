/*
 * The smallest fake libcuda: only the entry points the shim requires
 * (cuInit, cuGetErrorName, cuDriverGetVersion, cuDeviceGetCount,
 * cuDeviceGet), plus cuDeviceTotalMem under its plain name only (the shim
 * falls back to it when cuDeviceTotalMem_v2 is not there). Every optional
 * entry point is absent, as in a driver older than the one layercake was
 * written against. Built twice: fakecuda_min, and fakecuda_noreq with
 * -DFAKE_NO_DEVICE_GET, which lacks the required cuDeviceGet.
 */
#include <stddef.h>
#include <string.h>

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;

API CUresult cuInit(unsigned flags)
{
	(void)flags;
	return 0;
}

API CUresult cuGetErrorName(CUresult r, const char **out)
{
	*out = r ? "CUDA_ERROR_UNKNOWN" : "CUDA_SUCCESS";
	return 0;
}

API CUresult cuDriverGetVersion(int *v)
{
	*v = 9000;
	return 0;
}

API CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return 0;
}

#ifndef FAKE_NO_DEVICE_GET
API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	*d = ordinal;
	return 0;
}
#endif

API CUresult cuDeviceTotalMem(size_t *b, CUdevice d)
{
	(void)d;
	*b = (size_t)1 << 20;
	return 0;
}
