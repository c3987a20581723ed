"""Layouts, page arrays without copies, exceptions on bad input, the engine's
batch and room rules through the Python API (no network)."""
import array
import time

import numpy as np
import pytest

import layercake as lc
from layercake.engine import int64_pointer


def engine_with_dummy_room(room=1, layers=2):
    ctx = lc.Context("eng")
    mem = lc.Memory(1 << 21)
    ctx.register(mem)
    layout = lc.Layout.mla(layers, 8, 4096, bases=[mem.address + i * 8 * 4096 for i in range(layers)])
    e = lc.Engine(ctx, layout)
    e.room_open(room)
    e.room_dst_add(room, dummy=True)
    return ctx, mem, e


def test_model_builders():
    mha = lc.Layout.mha(4, 16, 1024, draft_layers=1)
    kinds = [b.kind for b in mha.buffers]
    # Target [K_0..K_3, V_0..V_3], then the draft layer's K and V (global id 4).
    assert len(mha) == 10 and kinds[:4] == [lc.BufferKind.K] * 4 and kinds[4:8] == [lc.BufferKind.V] * 4
    assert mha.layer_count == 5 and mha.layer_buffers(4) == [8, 9]
    assert [b.flags for b in mha.buffers] == [0] * 8 + [1, 1]
    assert len(lc.Layout.mla(4, 16, 576)) == 4
    pth = lc.Layout.mla_per_token_head(3, 16, (512, 64, 32))
    assert [b.item_len for b in pth.buffers] == [512] * 3 + [64] * 3 + [32] * 3
    dsa = lc.Layout.dsa(2, 16, 656, 128)
    assert [b.kind for b in dsa.buffers] == [lc.BufferKind.LATENT] * 2 + [lc.BufferKind.INDEX] * 2
    hybrid = lc.Layout.mha(2, 16, 1024, kv_layer_ids=[1, 3], state_components=2, state_layer_ids=[0, 2],
                           state_slots=4, state_item_len=4096)
    assert hybrid.layer_count == 4
    assert sum(b.kind == lc.BufferKind.STATE for b in hybrid.buffers) == 4


def test_fingerprint_is_geometry_only():
    a = lc.Layout.mha(4, 16, 1024, bases=[0x100000 * (i + 1) for i in range(8)])
    b = lc.Layout.mha(4, 32, 1024)  # other bases and lengths, same geometry
    c = lc.Layout.mha(4, 16, 2048)
    assert a.fingerprint == b.fingerprint != c.fingerprint


@pytest.mark.parametrize("make, name", [
    (lambda: lc.Layout([]), "LC_EINVAL"),
    (lambda: lc.Layout([lc.Buffer(0, 100, 0, 0)]), "LC_EINVAL"),  # item_len 0
    (lambda: lc.Layout([lc.Buffer(0, 100, 64, -1)]), "LC_EINVAL"),  # negative layer
    (lambda: lc.Layout.build(9, 2, 16, 64), "LC_EINVAL"),  # unknown model
    (lambda: lc.Layout.mha(2, 16, 64).buffer(99), "LC_ERANGE"),
])
def test_bad_input_raises_with_code_and_text(make, name):
    with pytest.raises(lc.LayercakeError) as e:
        make()
    assert e.value.name == name and e.value.code < 0
    assert e.value.text == lc.strerror(e.value.code)
    # The message carries the cause the library recorded, not the code's text.
    assert e.value.reason != e.value.text and e.value.reason in str(e.value), str(e.value)


def test_page_arrays_are_passed_without_copies():
    a = np.arange(10, dtype=np.int64)
    ptr, n, _ = int64_pointer(a)
    assert (ptr, n) == (a.ctypes.data, 10)
    view = a[2:7]  # a contiguous slice: still no copy
    assert int64_pointer(view)[:2] == (a.ctypes.data + 16, 5)
    q = array.array("q", range(5))
    assert int64_pointer(q)[:2] == (q.buffer_info()[0], 5)
    ro = a.copy()
    ro.flags.writeable = False
    assert int64_pointer(ro)[0] == ro.ctypes.data
    raw = a.tobytes()
    ptr, n, keep = int64_pointer(raw)
    assert n == 10 and keep[0].ctypes.data == ptr and keep[0].base is not None
    assert int64_pointer([3, 4, 5])[1] == 3  # sequences are converted (the one copy)
    with pytest.raises(TypeError):
        int64_pointer(np.arange(4, dtype=np.int32))
    with pytest.raises(ValueError):
        int64_pointer(np.arange(8, dtype=np.int64)[::2])
    with pytest.raises(TypeError):
        int64_pointer(array.array("i", [1, 2]))


def test_engine_batch_and_room_rules():
    ctx, mem, e = engine_with_dummy_room(room=1)
    pages = np.arange(3, dtype=np.int64)
    with pytest.raises(lc.LayercakeError) as x:
        e.add_chunk(99, pages)
    assert x.value.name == "LC_ENOENT"
    e.room_open(2)  # no destination yet: Bootstrapping, the chunk is held (issue 44)
    e.add_chunk(2, pages)
    assert e.metrics()["chunks_held"] == 1
    e.room_cancel(2)
    with pytest.raises(lc.LayercakeError) as x:
        e.add_chunk(2, pages)
    assert x.value.name == "LC_ERR_STATE"
    with pytest.raises(lc.LayercakeError) as x:
        with e.batch(is_idle=True):
            e.add_chunk(1, pages)
    assert x.value.name == "LC_ERR_STATE" and "not allowed" in x.value.text
    with pytest.raises(lc.LayercakeError) as x:
        e.batch_end()  # the idle batch above was ended
    assert x.value.name == "LC_ERR_STATE"
    with pytest.raises(RuntimeError):
        with e.batch():
            raise RuntimeError("the scheduler failed")
    with e.batch():  # ended despite the exception: a new one opens
        e.add_chunk(1, pages, is_last=True)
    with pytest.raises(lc.LayercakeError) as x:
        e.room_metadata_set(1, b"x" * 5000)
    assert x.value.name == "LC_EMSGSIZE"
    assert e.metrics()["bad_input"] >= 3
    ctx.close()


def test_chunks_held_while_bootstrapping_are_capped_and_released():
    ctx = lc.Context("held")
    ctx.config_set("p_room_held_chunks_max", 1)  # read when the engine is created
    ctx.config_set("p_held_pages_max", 5)
    mem = lc.Memory(1 << 21)
    ctx.register(mem)
    e = lc.Engine(ctx, lc.Layout.mla(2, 8, 4096, bases=[mem.address + i * 8 * 4096 for i in range(2)]))
    pages = np.arange(3, dtype=np.int64)
    e.room_open(1)
    e.room_open(2)
    e.add_chunk(1, pages, page_tokens=16)
    with pytest.raises(lc.LayercakeError) as x:
        e.add_chunk(1, pages, dst_index=3, is_last=True)
    assert x.value.name == "LC_ENOSPC" and "p_room_held_chunks_max" in str(x.value), x.value
    with pytest.raises(lc.LayercakeError) as x:
        e.add_chunk(2, pages)  # 3 + 3 page entries > 5
    assert x.value.name == "LC_ENOSPC" and "p_held_pages_max" in str(x.value), x.value
    m = e.metrics()
    assert (m["chunks_held"], m["pages_held"], m["chunks_refused_held"]) == (1, 3, 2), m
    e.room_dst_add(1, dummy=True)  # Bootstrapped: handed on, room 2 may hold now
    e.add_chunk(2, pages, is_last=True)
    e.room_close(2)  # closed while held: released
    m = e.metrics()
    assert (m["chunks_held"], m["pages_held"]) == (0, 0), m
    ctx.close()


def test_steps_move_the_counter_words():
    ctx, mem, e = engine_with_dummy_room()
    s = e.steps
    assert s.value(s.CACHE) == 0 and s.layer_count == 2
    for _ in range(2):  # two forwards' steps: 4 cache, 2 aux
        with e.batch():
            pass
    s.record_cache()
    s.record_batch()
    assert s.value(s.CACHE) == 3 and s.value(s.AUX) == 1
    assert s.cache_address % 8 == 0 and s.aux_address != s.cache_address
    ctx.close()
    with pytest.raises(lc.LayercakeError) as x:
        s.record_cache()
    assert x.value.name == "LC_ERR_CLOSED"


def test_a_record_no_batch_reserved_is_refused_and_shifts_nothing():
    # An engine that records on every forward, one of them without a batch:
    # the stray record raises, moves no counter, and the next batch's
    # steps are its own.
    ctx, mem, e = engine_with_dummy_room()
    s = e.steps
    with pytest.raises(lc.LayercakeError) as x:
        s.record_cache()
    assert x.value.name == "LC_ERR_STATE" and "reserved" in str(x.value)
    with pytest.raises(lc.LayercakeError):
        s.record_aux()
    assert s.value(s.CACHE) == 0 and s.value(s.AUX) == 0
    assert e.metrics()["records_refused"] == 2
    with e.batch():
        pass
    s.record_batch()
    with pytest.raises(lc.LayercakeError):
        s.record_cache()  # one past the batch's layer_count
    assert s.value(s.CACHE) == 2 and s.value(s.AUX) == 1
    assert e.metrics()["records_refused"] == 3
    ctx.close()


def test_engine_callbacks_run_for_dummy_free_rooms_only():
    seen = []
    ctx = lc.Context("cb")
    mem = lc.Memory(1 << 21)
    ctx.register(mem)
    layout = lc.Layout.mla(1, 8, 4096, bases=[mem.address])
    e = lc.Engine(ctx, layout, on_status=lambda *a: seen.append(a))
    e.room_open(3)
    e.room_cancel(3, "test")
    info = e.room_status(3)
    assert info.status == lc.RoomStatus.FAILED and info.fail_reason == lc.FailReason.CANCELLED
    assert "test" in info.reason
    ctx.close()
    assert seen == []  # no destination, nobody to tell


def test_library_logs_reach_python_logging(caplog):
    import logging

    lc.log_to(logging.getLogger("layercake.test"))
    try:
        with caplog.at_level(logging.DEBUG, logger="layercake.test"):
            ctx, mem, e = engine_with_dummy_room()
            with pytest.raises(lc.LayercakeError):
                e.add_chunk(12345, [1])  # logged as bad input
            ctx.close()
        assert any("unknown room" in r.getMessage() for r in caplog.records), caplog.records
        with pytest.raises(lc.LayercakeError):
            lc.set_log_level("loud")
        lc.set_log_level("warn")
    finally:
        lc.log_to(False)


def test_tp_fragment_pairs_heads_across_unequal_tp():
    # P TP 1 holds 4 heads of 64 bytes per page; D TP 2 ranks hold 2 each.
    f = lc.tp_fragment(1, 0, 256, 2, 1, 128, 64)
    assert f == {"src_offset": 128, "dst_offset": 0, "bytes": 128, "dst_item_len": 128,
                 "count": 1, "src_stride": 0, "dst_stride": 0}
    # GQA: 2 KV heads over P TP 4; ranks 1 and 3 replicate 0 and 2.
    assert lc.tp_fragment(4, 1, 64, 1, 0, 128, 64) is None
    assert lc.tp_fragment(4, 2, 64, 1, 0, 128, 64)["dst_offset"] == 64
    with pytest.raises(lc.LayercakeError) as e:
        lc.tp_fragment(2, 0, 192, 4, 0, 128, 64)  # 6 heads against 8
    assert e.value.name == "LC_ERR_GEOMETRY"


def test_one_p_rank_feeds_two_d_ranks_their_heads_over_loop():
    """Heterogeneous TP through the engine over loop:// (a real transfer):
    each D rank's pages hold its half of P's heads, byte-exact."""
    layers, pages, item, room = 2, 8, 256, 31
    d = lc.Context("tp-d")
    p = lc.Context("tp-p")
    listener = d.listen("loop://tp-py-%d" % id(d))
    token = d.issue_token()
    pmem = lc.Memory(1 << 21)
    p.register(pmem)
    pv = np.frombuffer(pmem.view, dtype=np.uint8)
    pv[: 2 * layers * pages * item] = np.arange(2 * layers * pages * item) % 251
    layout = lc.Layout.mha(layers, pages, item,
                           bases=[pmem.address + b * pages * item for b in range(2 * layers)])
    e = lc.Engine(p, layout)
    dmem, dreg = [], []
    for r in range(2):
        dmem.append(lc.Memory(1 << 21))
        dreg.append(d.register(dmem[r]))
        frag = lc.tp_fragment(1, 0, item, 2, r, item // 2, item // 4)
        e.session_add(f"d{r}", listener.url, [dreg[r].pack()], token=token,
                      buffer_region=[0] * (2 * layers),
                      buffer_offset=[b * pages * item // 2 for b in range(2 * layers)],
                      fragments={b: frag for b in range(2 * layers)})
        d.grant(room, dreg[r], 0, dreg[r].length)
        e.room_dst_add(room, session=f"d{r}", pages=[5, 6, 7], required_dst_count=2)
    e.room_metadata_set(room, b"m")
    e.add_chunk(room, [0, 1, 2], is_last=True)
    for _ in range(5000):
        st = e.room_status(room).status
        if st in (lc.RoomStatus.SUCCESS, lc.RoomStatus.FAILED):
            break
        time.sleep(0.002)
    assert st == lc.RoomStatus.SUCCESS
    half = item // 2
    for r in range(2):
        dv = np.frombuffer(dmem[r].view, dtype=np.uint8)
        for b in range(2 * layers):
            for s, t in zip([0, 1, 2], [5, 6, 7]):
                got = dv[(b * pages + t) * half:(b * pages + t + 1) * half]
                want = pv[(b * pages + s) * item + r * half:(b * pages + s) * item + (r + 1) * half]
                assert np.array_equal(got, want), (r, b, s)
    e.close()
    p.close()
    d.close()


def test_token_major_pages_split_with_strided_writes_over_loop():
    """Token-major pages ([page_size, kv_heads, head_dim]) at P TP 1 -> D
    TP 2: each D rank's page holds its heads of every token, moved as one
    strided write per page; the layout keeps its rows."""
    layers, pages, rows, heads, hd, room = 2, 8, 4, 4, 16, 32
    item = rows * heads * hd
    frag = lc.tp_fragment(1, 0, item, 2, 1, item // 2, hd, rows=rows)
    assert frag == {"src_offset": 2 * hd, "dst_offset": 0, "bytes": 2 * hd,
                    "dst_item_len": item // 2, "count": rows,
                    "src_stride": heads * hd, "dst_stride": 2 * hd}
    with pytest.raises(lc.LayercakeError) as e:
        lc.tp_fragment(1, 0, item, 2, 1, item // 2, hd, rows=3)  # rows do not divide
    assert e.value.name == "LC_ERR_GEOMETRY"
    d = lc.Context("tpr-d")
    p = lc.Context("tpr-p")
    listener = d.listen("loop://tpr-py-%d" % id(d))
    token = d.issue_token()
    pmem = lc.Memory(1 << 21)
    p.register(pmem)
    pv = np.frombuffer(pmem.view, dtype=np.uint8)
    pv[: 2 * layers * pages * item] = np.arange(2 * layers * pages * item) % 251
    layout = lc.Layout.mha(layers, pages, item, rows=rows,
                           bases=[pmem.address + b * pages * item for b in range(2 * layers)])
    assert all(b.rows == rows for b in layout.buffers)
    e = lc.Engine(p, layout)
    dmem = []
    for r in range(2):
        dmem.append(lc.Memory(1 << 21))
        dreg = d.register(dmem[r])
        f = lc.tp_fragment(1, 0, item, 2, r, item // 2, hd, rows=rows)
        e.session_add(f"d{r}", listener.url, [dreg.pack()], token=token,
                      buffer_region=[0] * (2 * layers),
                      buffer_offset=[b * pages * item // 2 for b in range(2 * layers)],
                      fragments={b: f for b in range(2 * layers)})
        d.grant(room, dreg, 0, dreg.length)
        e.room_dst_add(room, session=f"d{r}", pages=[5, 6, 7], required_dst_count=2)
    posted0 = p.counters()["writes_posted"]
    e.room_metadata_set(room, b"m")
    e.add_chunk(room, [0, 1, 2], is_last=True)
    for _ in range(5000):
        st = e.room_status(room).status
        if st in (lc.RoomStatus.SUCCESS, lc.RoomStatus.FAILED):
            break
        time.sleep(0.002)
    assert st == lc.RoomStatus.SUCCESS
    # One write per page, buffer and D rank, not one per token.
    assert p.counters()["writes_posted"] - posted0 == 2 * 2 * layers * 3
    P = pv[: 2 * layers * pages * item].reshape(2 * layers, pages, rows, heads, hd)
    for r in range(2):
        dv = np.frombuffer(dmem[r].view, dtype=np.uint8)
        D = dv[: 2 * layers * pages * item // 2].reshape(2 * layers, pages, rows, heads // 2, hd)
        for s, t in zip([0, 1, 2], [5, 6, 7]):
            assert np.array_equal(D[:, t], P[:, s, :, 2 * r:2 * r + 2, :]), (r, s)
        untouched = [q for q in range(pages) if q not in (5, 6, 7)]
        assert not D[:, untouched].any()
    e.close()
    p.close()
    d.close()
