"""Objects may be closed or dropped in any order, mid-transfer: nothing
crashes, closed objects raise LC_ERR_CLOSED, nothing leaks (weakrefs die,
the library's threads are joined)."""
import gc
import os
import random
import time
import weakref

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
from layercake import tokenspeed as ts
from layercake.core import _Handle

HANDLES = ["bs", "pctx", "preg", "prefill", "engine", "sender", "dctx", "dreg", "decode", "receiver"]


def threads():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux
        return None


def live_handles():
    return [o for o in gc.get_objects() if isinstance(o, _Handle) and not o.closed]


def world():
    """P and D in this process, one room mid-transfer (one layer of four recorded)."""
    o = {}
    o["pmem"], pkv, pargs = peer.kv_args(fill=True)
    o["dmem"], dkv, dargs = peer.kv_args(fill=False)
    o["bs"] = lc.BootstrapServer()
    o["pctx"], o["dctx"] = lc.Context("p"), lc.Context("d")
    o["preg"], o["dreg"] = o["pctx"].register(o["pmem"]), o["dctx"].register(o["dmem"])
    o["playout"] = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=pargs.kv_data_ptrs)
    o["dlayout"] = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=dargs.kv_data_ptrs)
    o["prefill"] = lc.Prefill(o["pctx"], o["playout"], o["bs"], metrics_server=o["bs"])
    o["engine"] = o["prefill"].engine
    o["decode"] = lc.Decode(o["dctx"], o["dlayout"], [o["dreg"]])
    o["receiver"] = o["decode"].receiver(o["bs"].addr, 1)
    o["sender"] = o["prefill"].sender(1)
    o["receiver"].wait(timeout=20, until=lc.RoomStatus.BOOTSTRAPPED)
    o["receiver"].send(peer.d_pages(0, 0))
    o["sender"].wait(timeout=20, until=lc.RoomStatus.BOOTSTRAPPED)
    with o["engine"].batch():
        o["engine"].add_chunk(1, peer.p_pages(0), 0, True)
    o["engine"].steps.record_cache()
    return o


ORDERS = [list(reversed(HANDLES)), list(HANDLES)] + [random.Random(s).sample(HANDLES, len(HANDLES)) for s in range(6)]


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_close_in_any_order(order):
    o = world()
    for name in order:
        o[name].close()
        o[name].close()  # idempotent
    for name in HANDLES:
        assert o[name].closed, name
    with pytest.raises(lc.LayercakeError) as e:
        o["sender"].poll()
    assert e.value.name == "LC_ERR_CLOSED"
    with pytest.raises(lc.LayercakeError):
        o["engine"].steps.record_cache()
    with pytest.raises(lc.LayercakeError):
        o["receiver"].send([1])
    o["pmem"].free()  # every region of it closed with its context
    o["dmem"].free()


def test_memory_is_not_freed_under_a_region_or_a_view():
    ctx = lc.Context("m")
    mem = lc.Memory(1 << 21)
    reg = ctx.register(mem)
    with pytest.raises(lc.LayercakeError) as e:
        mem.free()
    assert e.value.name == "LC_EBUSY"
    reg.close()
    view = mem.numpy()
    ref = weakref.ref(mem)
    del mem
    gc.collect()
    assert ref() is not None  # the view keeps the memory
    view[:] = 7  # and it is still valid
    with pytest.raises(lc.LayercakeError):
        ref().free()
    del view, reg, e  # a closed Region and a traceback also keep it
    gc.collect()
    assert ref() is None
    ctx.close()


def test_dropping_everything_frees_everything():
    gc.collect()
    t0, h0 = threads(), len(live_handles())
    for _ in range(3):
        o = world()
        refs = {k: weakref.ref(v) for k, v in o.items()}
        o.clear()
        gc.collect()
        alive = [k for k, r in refs.items() if r() is not None]
        assert alive == [], f"still referenced: {alive}"
    assert len(live_handles()) == h0
    if t0 is not None:
        deadline = time.monotonic() + 10
        while threads() > t0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads() <= t0, "library threads outlived their objects"


def test_adapters_dropped_mid_transfer():
    gc.collect()
    t0 = threads()
    pmem, pkv, pargs = peer.kv_args(fill=True)
    dmem, dkv, dargs = peer.kv_args(fill=False)
    bs = lc.BootstrapServer()
    p = ts.LayercakeKVManager(pargs, "prefill", bootstrap=bs.addr)
    d = ts.LayercakeKVManagerDecode(dargs, "decode")
    sc = p.register_step_counter(None)
    s = ts.LayercakeKVSender(p, bs.addr, 3)
    r = ts.LayercakeKVReceiver(d, bs.addr, 3)
    deadline = time.monotonic() + 20
    while r.poll() != ts.TransferPoll.Bootstrapped and time.monotonic() < deadline:
        time.sleep(0.001)
    r.init(peer.d_pages(0, 0), aux_index=0)
    while s.poll() != ts.TransferPoll.Bootstrapped and time.monotonic() < deadline:
        time.sleep(0.001)
    with p.add_batch(False):
        p.add_transfer_request(3, peer.p_pages(0), slice(0, peer.TOTAL), True, aux_index=0)
    sc.record_cache()
    refs = [weakref.ref(x) for x in (p, d, s, r, bs, p.prefill, d.decode)]
    bs.close()  # the server first: the P rank publishing on it closes with it
    del p, d, s, r, bs, sc
    gc.collect()
    assert [x() for x in refs] == [None] * len(refs)
    if t0 is not None:
        deadline = time.monotonic() + 10
        while threads() > t0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads() <= t0
    assert np.count_nonzero(pkv) > 0  # P's memory is ours all along
    with pytest.raises(lc.LayercakeError) as e:
        pmem.free()  # pkv still views it
    assert e.value.name == "LC_EBUSY"
    del pkv, dkv
    pmem.free()
    dmem.free()
