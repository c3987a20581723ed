"""CUDA as liblayercake finds it at run time (docs/gpu.md): whether libcuda
was loaded (and why not), its devices, what kind of memory a pointer is,
and CUDA stream handles as the C calls take them. Nothing here imports
torch or needs CUDA; without it, cuda_info().found is False and the calls
that need the driver raise LayercakeError(LC_ENOTSUP)."""
import ctypes
from collections import namedtuple

from . import _convert as _cv
from . import _ffi
from .errors import check

CudaInfo = namedtuple("CudaInfo", "found device_count driver_version errors library why")
CudaDevice = namedtuple("CudaDevice", "ordinal name pci_bus_id total_mem")

# lc_cuda_ptr_kind_t
PTR_HOST, PTR_PINNED, PTR_DEVICE, PTR_MANAGED = 0, 1, 2, 3
PTR_KIND_NAMES = {PTR_HOST: "host", PTR_PINNED: "pinned", PTR_DEVICE: "cuda", PTR_MANAGED: "managed"}


def cuda_info():
    """lc_cuda_info: loads libcuda on first use (knob cuda_lib)."""
    i = _ffi.CudaInfo()
    i.size = ctypes.sizeof(i)
    check(_ffi.lc_cuda_info(ctypes.byref(i)), "lc_cuda_info")
    return CudaInfo(bool(i.found), i.device_count, i.driver_version, i.errors,
                    i.library.decode(errors="replace"), i.why.decode(errors="replace"))


def cuda_devices():
    out = []
    for n in range(cuda_info().device_count):
        d = _ffi.CudaDevice()
        d.size = ctypes.sizeof(d)
        check(_ffi.lc_cuda_device(n, ctypes.byref(d)), "lc_cuda_device")
        out.append(CudaDevice(n, d.name.decode(errors="replace"),
                              d.pci_bus_id.decode(errors="replace"), d.total_mem))
    return out


def pointer_kind(address):
    """(kind, device) of an address as CUDA sees it: kind one of PTR_*
    (PTR_HOST: memory CUDA does not know), device the ordinal or -1. Raises
    LayercakeError(LC_ENOTSUP) without CUDA."""
    if isinstance(address, bool) or not isinstance(address, int):
        raise TypeError(f"address: need an int, got {type(address).__name__}")
    address = _cv.address(address, "pointer_kind: address")
    kind, dev = ctypes.c_int(), ctypes.c_int()
    check(_ffi.lc_cuda_pointer_kind(ctypes.c_void_p(address), ctypes.byref(kind), ctypes.byref(dev)),
          "lc_cuda_pointer_kind")
    return kind.value, dev.value


def stream_handle(stream):
    """The CUstream value of `stream` for the C calls: an int handle (what
    torch.cuda.current_stream().cuda_stream gives; 0 is the legacy default
    stream), a ctypes.c_void_p, or an object with a `cuda_stream` attribute
    (torch.cuda.Stream, cupy streams' `ptr` is not accepted: pass the int).
    TypeError for anything else (None, bool, float, str), ValueError for an
    int outside 0 .. 2**64-1."""
    if hasattr(stream, "cuda_stream"):
        stream = stream.cuda_stream
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError("stream: need a CUDA stream handle (an int such as "
                        "torch.cuda.current_stream().cuda_stream, or a torch.cuda.Stream), "
                        f"got {type(stream).__name__}")
    if stream < 0 or stream >= 1 << 64:
        raise ValueError(f"stream: handle {stream} out of range")
    return stream
