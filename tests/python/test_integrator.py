"""The Python API as an integrator meets it (issue 15): tensors registered
as they are, prefix lengths checked against the page size, errors that name
the state, the page and the limit."""
import ctypes
import logging

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
from layercake import _ffi
from layercake.core import _memory_of

try:
    import torch
except ImportError:  # pragma: no cover - python3-torch is a dependency
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="python3-torch not installed")


# ---- 3. anything with an array interface, a CUDA interface or DLPack ----------

@needs_torch
def test_register_a_torch_cpu_tensor_in_place():
    ctx = lc.Context("t")
    t = torch.zeros(4, 16, 2, 8, dtype=torch.bfloat16)  # no numpy view for bfloat16
    r = ctx.register(t)
    assert (r.address, r.length, r.kind) == (t.data_ptr(), t.numel() * 2, lc.MEM_HOST)
    layout = lc.Layout.mha(1, 4, 16 * 2 * 8 * 2, bases=[t[0], t[1]])  # bases: tensors too
    assert [b.base for b in layout.buffers] == [t[0].data_ptr(), t[1].data_ptr()]
    ctx.close()


@needs_torch
def test_a_non_contiguous_tensor_is_refused_with_its_strides():
    ctx = lc.Context("t")
    t = torch.zeros(8, 4).t()
    with pytest.raises(ValueError, match=r"C-contiguous.*strides"):
        ctx.register(t)
    with pytest.raises(ValueError, match="C-contiguous"):
        ctx.register(np.zeros((8, 4))[:, 1])
    ctx.close()


class _ArrayInterface:
    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


class _DLPackOnly:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__()

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class _CudaInterface:
    """What CuPy and torch CUDA tensors expose (never dereferenced here)."""

    class device:
        id = 3

    __cuda_array_interface__ = {"shape": (16, 4), "typestr": "<f2", "data": (0x7f0000000000, False),
                                "version": 3, "strides": None}


def test_register_through_array_interface_and_dlpack():
    ctx = lc.Context("t")
    a = np.zeros(4096, dtype=np.uint8)
    r = ctx.register(_ArrayInterface(a))
    assert (r.address, r.length) == (a.ctypes.data, 4096)
    if torch is not None:
        t = torch.zeros(1024, dtype=torch.float16)
        r2 = ctx.register(_DLPackOnly(t))
        assert (r2.address, r2.length, r2.kind) == (t.data_ptr(), 2048, lc.MEM_HOST)
    ctx.close()


def test_cuda_interface_gives_kind_and_device():
    addr, n, kind, dev, _ = _memory_of(_CudaInterface())
    assert (addr, n, kind, dev) == (0x7f0000000000, 16 * 4 * 2, "cuda", 3)
    strided = _CudaInterface()
    strided.__cuda_array_interface__ = dict(_CudaInterface.__cuda_array_interface__, strides=(2, 32))
    with pytest.raises(ValueError, match="C-contiguous"):
        _memory_of(strided)


def test_cuda_interface_reaches_the_library_as_cuda_memory():
    """Host memory behind a CUDA interface is registered as MEM_CUDA (and so
    refused: no driver here, or not device memory); kind= overrides."""
    host = np.zeros(16 * 4 * 2, dtype=np.uint8)
    fake = _CudaInterface()
    fake.__cuda_array_interface__ = dict(_CudaInterface.__cuda_array_interface__,
                                         data=(host.ctypes.data, False))
    ctx = lc.Context("t")
    with pytest.raises(lc.LayercakeError) as e:
        ctx.register(fake)
    assert e.value.name in ("LC_ENOTSUP", "LC_ERR_MEM_KIND"), e.value
    r = ctx.register(fake, kind=lc.MEM_HOST)
    assert (r.address, r.kind) == (host.ctypes.data, lc.MEM_HOST)
    ctx.close()


def test_an_object_without_memory_gets_a_hint():
    ctx = lc.Context("t")
    with pytest.raises(TypeError, match="__cuda_array_interface__.*__dlpack__"):
        ctx.register(object())
    ctx.close()


# ---- a P and a D in this process ------------------------------------------------

@pytest.fixture
def pd():
    """P and D (page_size known to both layouts), room 1 opened on both sides."""
    o = {}
    o["pmem"], o["pkv"], pargs = peer.kv_args(fill=True)
    o["dmem"], o["dkv"], dargs = peer.kv_args(fill=False)
    o["bs"] = lc.BootstrapServer()
    o["pctx"], o["dctx"] = lc.Context("p"), lc.Context("d")
    o["pctx"].register(o["pmem"])
    dreg = o["dctx"].register(o["dmem"])
    ps = peer.TOKENS_PER_PAGE
    playout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=pargs.kv_data_ptrs, page_size=ps)
    dlayout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=dargs.kv_data_ptrs, page_size=ps)
    o["prefill"] = lc.Prefill(o["pctx"], playout, o["bs"])
    o["decode"] = lc.Decode(o["dctx"], dlayout, [dreg])
    o["sender"] = o["prefill"].sender(1)
    o["receiver"] = o["decode"].receiver(o["bs"].addr, 1)
    o["receiver"].wait(timeout=20, until=lc.RoomStatus.BOOTSTRAPPED)
    yield o
    for k in ("sender", "receiver", "prefill", "decode", "bs", "pctx", "dctx"):
        o[k].close()


# ---- 4. P never waits for D: a chunk before Bootstrapped is held (issue 44) ------

def test_chunk_before_bootstrapped_is_held_and_lands_after_ds_info(pd):
    """P adds the request's chunks and records every layer before D's
    transfer info; counted from token 0 (page_tokens), D's prefix pages are
    left out once the info is in, and every byte lands."""
    eng, s, steps = pd["prefill"].engine, pd["sender"], pd["prefill"].engine.steps
    assert s.status == lc.RoomStatus.BOOTSTRAPPING  # D has not sent its pages
    src, prefix_pages = peer.p_pages(0), 3
    with eng.batch():  # the first half of the prompt, every layer recorded
        eng.add_chunk(1, src[:4], dst_index=0, page_tokens=peer.TOKENS_PER_PAGE)
    steps.record_batch()
    with eng.batch():  # the rest, half its layers recorded before D's info
        eng.add_chunk(1, src[4:], dst_index=4, is_last=True, page_tokens=peer.TOKENS_PER_PAGE)
    steps.record_cache()
    steps.record_cache()
    m = eng.metrics()
    assert m["chunks_held"] == 2 and m["pages_held"] == len(src), m
    assert s.status == lc.RoomStatus.BOOTSTRAPPING
    dst = peer.d_pages(0, prefix_pages)
    pd["receiver"].send(dst, prefix_len=prefix_pages * peer.TOKENS_PER_PAGE)
    s.wait(timeout=20, until=lc.RoomStatus.TRANSFERRING)
    for _ in range(peer.LAYERS - 2):
        steps.record_cache()
    steps.record_aux()
    s.set_metadata(b"tok")
    assert s.wait(timeout=20).status == lc.RoomStatus.SUCCESS
    assert pd["receiver"].wait(timeout=20).status == lc.RoomStatus.SUCCESS
    assert (pd["dkv"][:, dst] == pd["pkv"][:, src[prefix_pages:]]).all()
    assert eng.metrics()["chunks_held"] == 0


# ---- 1. prefix reuse: whole pages, and what P skips -----------------------------

def test_prefix_not_a_whole_page_is_refused_at_d(pd):
    with pytest.raises(ValueError, match=r"prefix_len 20 tokens.*16-token pages"):
        pd["receiver"].send(peer.d_pages(0, 1), prefix_len=20)
    assert pd["receiver"].status == lc.RoomStatus.BOOTSTRAPPED  # nothing was sent


def test_p_skips_the_prefix_pages_and_counts_dst_index_from_there(pd):
    prefix_pages = 3
    dst = peer.d_pages(0, prefix_pages)
    pd["receiver"].send(dst, prefix_len=prefix_pages * peer.TOKENS_PER_PAGE)
    s = pd["sender"]
    s.wait(timeout=20, until=lc.RoomStatus.BOOTSTRAPPED)
    assert s.prefix_len == prefix_pages * peer.TOKENS_PER_PAGE
    skip = s.prefix_pages()
    assert skip == prefix_pages
    src = peer.p_pages(0)[skip:]
    eng = pd["prefill"].engine
    eng.add_chunk(1, src[:2], dst_index=0)              # outside a batch: sent at once
    eng.add_chunk(1, src[2:], dst_index=2, is_last=True)
    s.set_metadata(b"tok")
    assert s.wait(timeout=20).status == lc.RoomStatus.SUCCESS
    assert pd["receiver"].wait(timeout=20).status == lc.RoomStatus.SUCCESS
    assert (pd["dkv"][:, dst] == pd["pkv"][:, src]).all()


def test_p_refuses_a_partial_page_prefix(pd):
    assert pd["sender"].prefix_pages() is None  # not known before D's transfer info
    pd["decode"].page_size = None  # a D whose layout does not know its page size
    pd["receiver"].send(peer.d_pages(0, 2), prefix_len=20)
    s = pd["sender"]
    s.wait(timeout=20, until=lc.RoomStatus.BOOTSTRAPPED)
    assert s.prefix_len == 20
    with pytest.raises(ValueError, match=r"prefix_len 20 tokens is not a whole number of 16-token"):
        s.prefix_pages()
    assert s.prefix_pages(page_size=4) == 5


# ---- 5. a page beyond D's pool: the page, the limit, a log line ------------------

def test_page_beyond_the_pool_names_page_and_limit(pd):
    pages = np.array([5, 6, peer.PAGES], dtype=np.int64)
    with pytest.raises(lc.LayercakeError) as e:
        pd["receiver"].send(pages)
    assert e.value.name == "LC_EINVAL"
    msg = str(e.value)
    assert f"page id {peer.PAGES} (at index 2)" in msg and f"has {peer.PAGES} pages" in msg, msg


def test_page_beyond_the_pool_is_logged_by_the_library(pd, caplog):
    """The C check itself (bypassing Python's): -EINVAL and a warning line
    naming the room, the page and the limit."""
    pages = (ctypes.c_int64 * 2)(3, peer.PAGES + 5)
    pg = _ffi.ReceiverPages()
    pg.size = ctypes.sizeof(pg)
    pg.pages, pg.page_count, pg.aux_index = ctypes.addressof(pages), 2, -1
    lc.log_to(logging.getLogger("layercake.test"))
    try:
        with caplog.at_level(logging.WARNING, logger="layercake.test"):
            rc = _ffi.lc_receiver_send(pd["receiver"]._need(), ctypes.byref(pg))
    finally:
        lc.log_to(False)
    assert rc == -22
    assert pd["dctx"].counters()["grants_refused_range"] == 1
    lines = [r.getMessage() for r in caplog.records]
    assert any(f"page id {peer.PAGES + 5} (index 1)" in ln and f"{peer.PAGES} pages" in ln
               and "room 1" in ln for ln in lines), lines


def test_page_size_must_be_positive():
    with pytest.raises(ValueError, match="page_size"):
        lc.Layout.mha(2, 4, 64, page_size=0)
    assert lc.Layout.mha(2, 4, 64, page_size=16).page_size == 16
    assert lc.Layout.mha(2, 4, 64).page_size is None
