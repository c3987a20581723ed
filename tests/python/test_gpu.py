"""CUDA from Python without a GPU (docs/gpu.md): argument handling of
Engine.record_cache_on_stream, the LC_ENOTSUP path without libcuda, and the
TokenSpeed adapter's kind detection and counter mapping against the fake
libcuda of tests/gpu (host memory behind the driver API: plumbing, not
CUDA). The library reads cuda_lib once per process, so each case that
needs a particular driver runs in its own interpreter."""
import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

import layercake as lc
from layercake import gpu

FAKE = os.path.join(os.environ.get("LAYERCAKE_BUILD", "build"), "tests", "gpu", "libfakecuda.so")


def engine():
    ctx = lc.Context("gpu")
    mem = lc.Memory(1 << 20)
    ctx.register(mem)
    layout = lc.Layout.mla(2, 8, 4096, bases=[mem.address + i * 8 * 4096 for i in range(2)])
    e = lc.Engine(ctx, layout)
    with e.batch():  # one forward's steps: a record no batch reserved is refused
        pass
    return ctx, mem, e


def run_py(code, cuda_lib):
    env = dict(os.environ, LAYERCAKE_CUDA_LIB=cuda_lib)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("bad,exc", [("0x10", TypeError), (1.5, TypeError), (True, TypeError),
                                     (None, TypeError), (-1, ValueError), (1 << 64, ValueError)])
def test_stream_argument_is_checked_before_the_call(bad, exc):
    ctx, mem, e = engine()
    with pytest.raises(exc):
        e.record_cache_on_stream(bad)
    with pytest.raises(exc):
        e.record_aux_on_stream(bad)
    e.steps.record_cache()  # nothing was recorded on a stream: the CPU still may
    e.close()
    ctx.close()


def test_stream_handles_accepted():
    class TorchLikeStream:
        cuda_stream = 0x7F00

    assert gpu.stream_handle(0) == 0
    assert gpu.stream_handle(0xDEAD) == 0xDEAD
    assert gpu.stream_handle(ctypes.c_void_p(0x1234)) == 0x1234
    assert gpu.stream_handle(TorchLikeStream()) == 0x7F00


def test_without_cuda_every_call_says_not_supported():
    out = run_py("""
        import layercake as lc
        from layercake import gpu
        from layercake.errors import LayercakeError
        info = gpu.cuda_info()
        assert not info.found and "dlopen" in info.why, info
        assert gpu.cuda_devices() == []
        ctx = lc.Context("x"); mem = lc.Memory(1 << 20); ctx.register(mem)
        e = lc.Engine(ctx, lc.Layout.mla(2, 8, 4096, bases=[mem.address, mem.address + 32768]))
        with e.batch():
            pass
        for f in (e.record_cache_on_stream, e.record_aux_on_stream):
            try:
                f(0)
            except LayercakeError as err:
                assert err.code == -95, err
            else:
                raise AssertionError("no error")
        try:
            gpu.pointer_kind(mem.address)
        except LayercakeError as err:
            assert err.code == -95
        e.steps.record_cache()
        print("ok")
    """, "/nonexistent/libcuda.so.1")
    assert "ok" in out


@pytest.mark.skipif(not os.path.exists(FAKE), reason="fake libcuda not built")
def test_adapter_detects_kinds_and_maps_a_gpu_counter_onto_stream_records():
    out = run_py(f"""
        import ctypes
        import layercake as lc
        from layercake import gpu, tokenspeed as ts
        fake = ctypes.CDLL({FAKE!r})
        assert fake.cuInit(0) == 0
        # A "device" KV pool (fake cuMemAlloc: host memory the fake tracks).
        d = ctypes.c_uint64()
        assert fake.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(2 * 8 * 4096)) == 0
        host = lc.Memory(1 << 20)
        assert gpu.pointer_kind(d.value) == (gpu.PTR_DEVICE, 0)
        assert gpu.pointer_kind(host.address) == (gpu.PTR_HOST, -1)
        kinds = ts.detect_kinds([(d.value, 65536), (host.address, 4096)])
        assert [k for _, _, k, _ in kinds] == [gpu.PTR_DEVICE, gpu.PTR_HOST], kinds
        # A stream in the primary context (the fake's cuStreamGetCtx reads it).
        cu = ctypes.c_void_p(); s = ctypes.c_void_p()
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(cu), 0) == 0
        assert fake.cuCtxPushCurrent_v2(cu) == 0
        assert fake.cuStreamCreate(ctypes.byref(s), 1) == 0
        ctx = lc.Context("p"); ctx.register(host)
        e = lc.Engine(ctx, lc.Layout.mla(2, 8, 4096, bases=[host.address, host.address + 32768]))
        with e.batch():
            pass
        class GpuCounter:  # TokenSpeed's StepCounter, as the adapter sees it
            def record_cache(self): raise AssertionError("not mapped")
            def record_aux(self): raise AssertionError("not mapped")
            def query_ready_cache_step(self): return 0
            def query_ready_aux_step(self): return 0
        c = GpuCounter()
        ts._map_onto_stream(c, e.steps, lambda: s.value)
        c.record_cache(); c.record_cache(); c.record_aux()
        assert (c.query_ready_cache_step(), c.query_ready_aux_step()) == (2, 1)
        assert e.steps.value(lc.Steps.CACHE) == 2
        try:
            e.steps.record_cache()
        except lc.LayercakeError as err:
            assert err.code == lc.errors.LC_ERR_STATE  # the stream owns the counter
        else:
            raise AssertionError("CPU record allowed")
        e.close(); ctx.close()
        print("ok")
    """, FAKE)
    assert "ok" in out


@pytest.mark.skipif(not os.path.exists(FAKE), reason="fake libcuda not built")
def test_regions_are_registered_with_the_kind_cuda_reports():
    out = run_py(f"""
        import ctypes
        import layercake as lc
        from layercake import tokenspeed as ts
        from layercake.errors import LayercakeError
        fake = ctypes.CDLL({FAKE!r})
        assert fake.cuInit(0) == 0
        d = ctypes.c_uint64()
        assert fake.cuMemAlloc_v2(ctypes.byref(d), ctypes.c_size_t(65536)) == 0
        host = lc.Memory(1 << 20)
        ctx = lc.Context("kinds")
        regions = ts._register_ranges(ctx, ts.detect_kinds([(d.value, 65536), (host.address, 4096)]))
        assert sorted((r.kind, r.device) for r in regions) == [(lc.MEM_HOST, 0), (lc.MEM_CUDA, 0)]
        # Host memory said to be device memory is refused (LC_ERR_MEM_KIND).
        try:
            ctx.register(lc.RawMemory(host.address + 8192, 4096), lc.MEM_CUDA, 0)
        except LayercakeError as err:
            assert err.code == -1020, err
        else:
            raise AssertionError("host memory registered as CUDA memory")
        print("ok")
    """, FAKE)
    assert "ok" in out


def test_without_cuda_a_cuda_region_is_not_supported():
    out = run_py("""
        import layercake as lc
        from layercake.errors import LayercakeError
        ctx = lc.Context("x"); mem = lc.Memory(1 << 20)
        try:
            ctx.register(mem, lc.MEM_CUDA, 0)
        except LayercakeError as err:
            assert err.code == -95, err
        else:
            raise AssertionError("registered")
        ctx.register(mem)  # as host memory it is fine
        print("ok")
    """, "/nonexistent/libcuda.so.1")
    assert "ok" in out
