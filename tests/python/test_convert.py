"""Integers reach C whole or not at all (issue 43, finding 9).

ctypes keeps an int's low bits: by the ctypes way region 2**32 + r was
region r (the write landed), a count of 2**32 a 16-byte write with status
0, offset 2**200 offset 0, a wait of 2**32 + 300 ms a wait of 300 ms, while
the C module refused the same values. Now each kind of value has one
converter (layercake/_convert.py) that both ways share: a value out of its
C type's range is an OverflowError, another type a TypeError, with or
without the C module, and the C module refuses exactly what the converters
refuse."""
import math
import time

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
from layercake import _convert as cv
from layercake import _ffi, control

from test_dataplane import make_pair

fast = _ffi.speedups


@pytest.fixture(scope="module")
def pair():
    """One loop pair for the module, room 3 granted (tests leave it so)."""
    p = make_pair("loop://auto")
    p["rx"].grant(3, p["rreg"], 0, 1 << 20)
    yield p
    p["rx"].close()
    p["tx"].close()


def _nothing_moved(p, before):
    """No batch was posted (nothing completes) and the destination is as it was."""
    assert p["cq"].wait(50) == []
    assert bytes(p["dst"].view[:1 << 20]) == before


# The cases, each as the ctypes way wrapped it, and the rest of a
# post's values at the first value past their range.
POST_CASES = [
    ("region 2**32 + r", lambda p: ([(p["src"].address, (1 << 32) + p["rid"], 0, 4096)], {}),
     OverflowError, "region"),
    ("count 2**32", lambda p: ([(p["src"].address, p["rid"], 0, 16, 1 << 32, 16, 16)], {}),
     OverflowError, "count"),
    ("offset 2**200", lambda p: ([(p["src"].address, p["rid"], 1 << 200, 4096)], {}),
     OverflowError, "offset"),
    ("length -1", lambda p: ([(p["src"].address, p["rid"], 0, -1)], {}), OverflowError, "length"),
    ("local 2**64 + a", lambda p: ([((1 << 64) + p["src"].address, p["rid"], 0, 4096)], {}),
     OverflowError, "local"),
    ("stride 2**64", lambda p: ([(p["src"].address, p["rid"], 0, 16, 2, 1 << 64, 16)], {}),
     OverflowError, "local_stride"),
    ("room -1", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"room": -1}), OverflowError, "room"),
    ("room 2**64 + 3", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"room": (1 << 64) + 3}),
     OverflowError, "room"),
    ("tag 2**32", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"tag": 1 << 32}), OverflowError, "tag"),
    ("timeout 2**63", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"timeout_ms": 1 << 63}),
     OverflowError, "timeout_ms"),
    ("user_data 2**64", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"user_data": 1 << 64}),
     OverflowError, "user_data"),
    ("a float local", lambda p: ([(float(p["src"].address), p["rid"], 0, 4096)], {}), TypeError, "local"),
    ("a str offset", lambda p: ([(p["src"].address, p["rid"], "0", 4096)], {}), TypeError, "offset"),
    ("a float room", lambda p: ([(p["src"].address, p["rid"], 0, 4096)], {"room": 3.0}), TypeError, "room"),
    ("5 values", lambda p: ([(p["src"].address, p["rid"], 0, 4096, 1)], {}), ValueError, "5 values"),
]


@pytest.mark.parametrize("case,make,exc,names", POST_CASES, ids=[c[0] for c in POST_CASES])
@pytest.mark.parametrize("many", [False, True], ids=["one write", "17 writes"])
def test_post_refuses_what_does_not_fit_both_ways(way, pair, case, make, exc, names, many):
    """One write (the packed path) and 17 (past the scratch: the plain
    ctypes path), with the module and without: the same error, no batch."""
    writes, kw = make(pair)
    kw.setdefault("room", 3)
    if many:
        writes = [(pair["src"].address, pair["rid"], 8192 + i * 16, 16) for i in range(16)] + writes
    before = bytes(pair["dst"].view[:1 << 20])
    with pytest.raises(exc, match=names):
        pair["conn"].post(writes, **kw)
    _nothing_moved(pair, before)


def test_the_first_value_in_range_still_posts(way, pair):
    """The edges themselves convert: the library then answers for them."""
    src, rid, conn = pair["src"].address, pair["rid"], pair["conn"]
    bid = conn.post([(src, rid, 0, 4096)], room=3, tag=(1 << 32) - 1, user_data=(1 << 64) - 1,
                    timeout_ms=(1 << 63) - 1)
    c = pair["cq"].wait(5000)[0]
    assert c["batch_id"] == bid and c["status"] == 0 and c["tag"] == (1 << 32) - 1
    assert c["user_data"] == (1 << 64) - 1
    conn.post([(src, (1 << 32) - 1, 0, 4096)], room=3)  # a region id that fits, never imported
    assert pair["cq"].wait(5000)[0]["status"] != 0
    # numpy integers and bool convert as ints do (__index__)
    bid = conn.post([(np.uint64(src), np.uint32(rid), np.int64(4096), True * 4096)], room=np.uint64(3))
    c = pair["cq"].wait(5000)[0]
    assert c["batch_id"] == bid and c["status"] == 0 and c["bytes"] == 4096


def test_wait_timeout_beyond_a_c_int_is_refused_not_shortened(way, pair):
    """2**32 + 300 ms was a 300 ms wait by the ctypes way."""
    t0 = time.monotonic()
    for t in ((1 << 32) + 300, (1 << 31), -(1 << 31) - 1):
        with pytest.raises(OverflowError, match="timeout_ms"):
            pair["cq"].wait(t)
    with pytest.raises(TypeError, match="timeout_ms"):
        pair["cq"].wait(0.3)
    assert time.monotonic() - t0 < 0.25  # refused at once, never waited


def test_grants_and_room_calls_refuse_what_does_not_fit(pair):
    rx, rreg, conn = pair["rx"], pair["rreg"], pair["conn"]
    for args, name in [((1 << 64, rreg, 0, 4096), "room"), ((4, rreg, 1 << 200, 4096), "offset"),
                       ((4, rreg, 0, (1 << 64) + 4096), "length"), ((-4, rreg, 0, 4096), "room")]:
        with pytest.raises(OverflowError, match=name):
            rx.grant(*args)
    with pytest.raises(OverflowError, match="room"):
        rx.revoke((1 << 64) + 3)
    with pytest.raises(OverflowError, match="room"):
        conn.room_cancel(-1)
    # room 3 is still granted (revoking 2**64 + 3 did not revoke 3) and not cancelled
    conn.post([(pair["src"].address, pair["rid"], 0, 16)], room=3)
    assert pair["cq"].wait(5000)[0]["status"] == 0


def test_context_and_memory_values():
    with pytest.raises(OverflowError, match="log level"):
        lc.set_log_level((1 << 32) + 3)
    with pytest.raises(OverflowError, match="code"):
        lc.strerror(1 << 32)
    with pytest.raises(OverflowError, match="length"):
        lc.Memory(-1)
    with pytest.raises(TypeError, match="length"):
        lc.Memory(4096.0)
    with pytest.raises(OverflowError, match="address"):
        lc.RawMemory(-1, 4096)
    with lc.Context("v") as ctx:
        mem = lc.Memory(1 << 20)
        with pytest.raises(OverflowError, match="kind"):
            ctx.register(mem, kind=(1 << 32) + lc.MEM_HOST)
        with pytest.raises(OverflowError, match="device"):
            ctx.register(mem, kind=lc.MEM_PINNED, device=1 << 31)
        with pytest.raises(TypeError, match="tcp_lanes"):
            ctx.config_set("tcp_lanes", 2.5)
        cq = ctx.completion_queue()
        with pytest.raises(OverflowError, match="lanes"):
            ctx.connect("loop://nowhere", cq, lanes=1 << 32)
        with pytest.raises(ValueError, match="16 bytes"):
            ctx.connect("loop://nowhere", cq, token=b"short")
        with pytest.raises(ValueError, match="range"):
            ctx.connect("loop://nowhere", cq, token=[256] + [0] * 15)


def test_layouts_and_the_engine_refuse_what_does_not_fit():
    with pytest.raises(OverflowError, match="layer"):
        lc.Layout([lc.Buffer(0, 4096, 1024, 1 << 31)])
    with pytest.raises(OverflowError, match="item_len"):
        lc.Layout([lc.Buffer(0, 4096, -1024, 0)])
    with pytest.raises(OverflowError, match="layers"):
        lc.Layout.mha((1 << 32) + 2, 16, 1024)
    with pytest.raises(OverflowError, match="pages"):
        lc.Layout.mha(2, -16, 1024)
    with pytest.raises(OverflowError, match="item_len"):
        lc.Layout.mha(2, 16, 1 << 64)
    with pytest.raises(OverflowError, match="kv_layer_ids"):
        lc.Layout.mha(2, 16, 1024, kv_layer_ids=[0, 1 << 32])
    with pytest.raises(ValueError, match="page_size"):
        lc.Layout.mha(2, 16, 1024, page_size=0)
    layout = lc.Layout.mha(2, 16, 1024)
    with pytest.raises(OverflowError, match="i"):
        layout.buffer((1 << 32) + 1)
    with pytest.raises(OverflowError, match="rows"):
        lc.tp_fragment(1, 0, 1024, 1, 0, 1024, 64, rows=1 << 32)
    with pytest.raises(TypeError, match="current"):
        lc.step_ready(1.5, 1)
    with lc.Context("e") as ctx:
        mem = lc.Memory(1 << 21)
        ctx.register(mem)
        eng = lc.Engine(ctx, lc.Layout.mla(2, 8, 4096, bases=[mem.address, mem.address + 8 * 4096]))
        with pytest.raises(OverflowError, match="room"):
            eng.room_open((1 << 64) + 5)
        eng.room_open(5)
        with pytest.raises(OverflowError, match="prefix_len"):
            eng.room_dst_add(5, dummy=True, prefix_len=-1)
        with pytest.raises(OverflowError, match="required_dst_count"):
            eng.room_dst_add(5, dummy=True, required_dst_count=1 << 32)
        with pytest.raises(OverflowError, match=r"pages\[1\]"):
            eng.room_dst_add(5, dummy=True, pages=[1, 1 << 63])
        with pytest.raises(OverflowError, match="buffer_region"):
            eng.session_add("s", "loop://x", [], buffer_region=[1 << 32])
        with pytest.raises(OverflowError, match=r"src_mask\[0\]"):
            eng.add_chunk(5, [0], src_mask=[256])
        eng.room_cancel(5)
        with pytest.raises(OverflowError, match="room"):
            eng.room_close(-5)


def test_control_plane_values():
    mem, _, args = peer.kv_args(fill=False)
    with lc.Context("cp") as ctx:
        reg = ctx.register(mem)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs, page_size=16)
        with pytest.raises(OverflowError, match="port"):
            lc.BootstrapServer(host="127.0.0.1", port=(1 << 32) + 80)
        with lc.BootstrapServer(host="127.0.0.1") as bs:
            with pytest.raises(OverflowError, match="engine_rank"):
                lc.Prefill(ctx, layout, bs, engine_rank=1 << 32)
            with lc.Prefill(ctx, layout, bs) as p:
                with pytest.raises(OverflowError, match="room"):
                    p.sender((1 << 64) + 7)
                with pytest.raises(OverflowError, match="timeout"):
                    p.wait(timeout=(1 << 32) / 1000 + 0.3)  # 2**32 + 300 ms
                with pytest.raises(OverflowError, match="timeout"):
                    p.wait(timeout=math.inf)
                with pytest.raises(TypeError, match="timeout"):
                    p.wait(timeout="1")
                assert p.wait(timeout=0.001) in (True, False)
        with lc.Decode(ctx, layout, [reg], listen_url="tcp://127.0.0.1:0") as d:
            with pytest.raises(OverflowError, match="tp_rank"):
                lc.Decode(ctx, layout, [reg], listen_url="tcp://127.0.0.1:0", tp_rank=1 << 32)
            with pytest.raises(OverflowError, match="room"):
                d.receiver("127.0.0.1:1", -1)
            with pytest.raises(OverflowError, match="timeout"):
                d.wait(timeout=1e10)
    del mem


# ---- the converters, and the C module against them ----------------------------

EDGES = {
    cv.u8: (0, 255), cv.u32: (0, (1 << 32) - 1), cv.u64: (0, (1 << 64) - 1),
    cv.i32: (-(1 << 31), (1 << 31) - 1), cv.i64: (-(1 << 63), (1 << 63) - 1),
    cv.c_int: (-(1 << 31), (1 << 31) - 1), cv.size: (0, (1 << 64) - 1),
    cv.address: (0, (1 << 64) - 1),
}


@pytest.mark.parametrize("conv", list(EDGES), ids=lambda c: c.__name__)
def test_each_converter_takes_its_range_exactly(conv):
    lo, hi = EDGES[conv]
    assert conv(lo, "x") == lo and conv(hi, "x") == hi and conv(True, "x") == 1
    assert conv(np.int64(7), "x") == 7 and type(conv(np.int64(7), "x")) is int
    for bad in (lo - 1, hi + 1, hi + (1 << 200)):
        with pytest.raises(OverflowError, match=r"what: .* out of range"):
            conv(bad, "what")
    for bad in (1.0, "1", None, b"1", 1j):
        with pytest.raises(TypeError, match="what: need an int"):
            conv(bad, "what")


def test_at_least_one():
    assert cv.at_least_one(1, "n", 64) == 1 and cv.at_least_one(1 << 90, "n", 64) == 64
    for bad in (0, -1, -(1 << 90)):
        with pytest.raises(ValueError, match="n: .*at least 1"):
            cv.at_least_one(bad, "n", 64)
    with pytest.raises(OverflowError):
        cv.at_least_one(1 << 40, "n")


def test_ms_of_seconds():
    assert control._ms(None) == -1 and control._ms(0.0001) == 1 and control._ms(-3) == 0
    assert control._ms(-math.inf) == 0 and control._ms(True) == 1000
    assert control._ms(((1 << 31) - 1) / 1000) == (1 << 31) - 1
    with pytest.raises(OverflowError):
        control._ms((1 << 31) / 1000)
    with pytest.raises(ValueError):
        control._ms(math.nan)


VALUES = [0, 1, -1, True, (1 << 31) - 1, 1 << 31, -(1 << 31), -(1 << 31) - 1, (1 << 32) - 1, 1 << 32,
          (1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1, (1 << 64) - 1, 1 << 64, 1 << 200,
          np.uint64((1 << 64) - 1), np.int32(-5), 1.0, "1", None]


def _refused(conv, v):
    try:
        conv(v, "v")
    except (TypeError, OverflowError, ValueError):
        return True
    return False


@pytest.mark.skipif(fast is None, reason=f"layercake._speedups: {_ffi.SPEEDUPS_FROM}")
def test_the_module_refuses_exactly_what_the_converters_refuse(pair):
    """Each value of a post, and poll's and wait's counts and timeouts: the
    C module answers None (the binding then raises through the converter)
    exactly where the converter of that kind raises."""
    h, src, rid = pair["conn"]._need(), pair["src"].address, pair["rid"]
    # Length 0: the library posts the batch and moves nothing, whatever the
    # other values (no blocks expanded, no source looked up).
    base = [src, rid, 0, 0, 1, 16, 16]
    kinds = [cv.address, cv.u32, cv.u64, cv.u64, cv.u32, cv.u64, cv.u64]
    for k, conv in enumerate(kinds):
        for v in VALUES:
            w = list(base)
            w[k] = v
            r = fast.post(h, [tuple(w)], 77, 0, 0, 0, 0)  # room 77: no grant, nothing lands
            assert (r is None) == _refused(conv, v), (k, v, r)
    scalars = [(2, cv.u64), (3, cv.u32), (5, cv.i64), (6, cv.u64)]  # room, tag, timeout, user_data
    for pos, conv in scalars:
        for v in VALUES:
            args = [h, [tuple(base)], 77, 0, 0, 0, 0]
            args[pos] = v
            r = fast.post(*args)
            assert (r is None) == _refused(conv, v), (pos, v, r)
    assert pair["cq"].wait(5000)  # the posts that converted completed (GRANT)
    with lc.Context("shut") as ctx:
        cq = ctx.completion_queue()
        qh = cq._need()
        _ffi.lc_cq_shutdown(qh)  # every wait that converts returns at once
        for v in VALUES:
            r = fast.wait(qh, 1, v)
            assert (r is None) == _refused(cv.c_int, v), (v, r)
            for r in (fast.wait(qh, v, 0), fast.poll(qh, v)):
                assert (r is None) == _refused(lambda x, w: cv.at_least_one(x, w, 64), v), (v, r)
