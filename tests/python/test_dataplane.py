"""The data plane through the Python API: real transports, real bytes."""
import asyncio
import gc

import numpy as np
import pytest

import layercake as lc


def make_pair(url):
    rx, tx = lc.Context("rx"), lc.Context("tx")
    dst, src = lc.Memory(4 << 20), lc.Memory(4 << 20)
    dst.numpy()[:] = 0xA5
    src.numpy()[:] = np.arange(4 << 20, dtype=np.uint64).astype(np.uint8)
    rreg, sreg = rx.register(dst), tx.register(src)
    listener = rx.listen(url)
    token = rx.issue_token()
    cq = tx.completion_queue()
    conn = tx.connect(listener.url, cq, token)
    rid = conn.import_region(rreg.pack())
    return dict(rx=rx, tx=tx, dst=dst, src=src, rreg=rreg, sreg=sreg, listener=listener,
                cq=cq, conn=conn, rid=rid, token=token)


@pytest.mark.parametrize("url", ["loop://auto", "tcp://127.0.0.1:0", "shm://auto"])
def test_numpy_writes_land_exactly_where_granted(url):
    if url.split(":")[0] not in lc.transports():
        pytest.skip(f"{url} not built in")
    p = make_pair(url)
    p["rx"].grant(9, p["rreg"], 0, 1 << 20)
    w = np.zeros(256, dtype=lc.WRITE_DTYPE)
    w["local"] = p["src"].address + np.arange(256) * 4096
    w["remote_offset"] = np.arange(256)[::-1] * 4096
    w["length"] = 4096
    w["remote_region"] = p["rid"]
    bid = p["conn"].post(w, room=9, tag=3)
    done = p["cq"].wait(10000)
    assert done and done[0]["batch_id"] == bid and done[0]["status"] == 0, done
    assert done[0]["bytes"] == 256 * 4096 and done[0]["tag"] == 3
    src, dst = p["src"].numpy(), p["dst"].numpy()
    for i in (0, 17, 255):
        j = 255 - i
        assert np.array_equal(src[i * 4096:(i + 1) * 4096], dst[j * 4096:(j + 1) * 4096])
    assert (dst[1 << 20:] == 0xA5).all()
    p["rx"].close()
    p["tx"].close()


@pytest.mark.parametrize("url", ["loop://auto", "tcp://127.0.0.1:0", "shm://auto"])
def test_bound_room_takes_only_its_tokens_writes(url):
    """ctx.bind(room, token): a connection that presented another token of
    the receiver's is refused on the room (LC_ERR_GRANT, nothing lands,
    writes_rejected_token), while the bound token's writes land."""
    if url.split(":")[0] not in lc.transports():
        pytest.skip(f"{url} not built in")
    p = make_pair(url)
    rx = p["rx"]
    other = rx.issue_token()
    with pytest.raises(ValueError):
        rx.bind(9, b"short")
    stranger = p["tx"].connect(p["listener"].url, p["cq"], other)
    sid = stranger.import_region(p["rreg"].pack())
    rx.bind(9, p["token"])
    rx.grant(9, p["rreg"], 0, 1 << 20)
    stranger.post([(p["src"].address, sid, 0, 4096)], room=9)
    done = p["cq"].wait(10000)
    assert done and lc.err_name(done[0]["status"]) == "LC_ERR_GRANT", done
    assert (p["dst"].numpy()[:1 << 20] == 0xA5).all()
    assert rx.counters()["writes_rejected_token"] >= 1
    p["conn"].post([(p["src"].address, p["rid"], 0, 4096)], room=9)
    done = p["cq"].wait(10000)
    assert done and done[0]["status"] == 0, done
    assert (p["dst"].numpy()[:4096] == p["src"].numpy()[:4096]).all()
    rx.close()
    p["tx"].close()


@pytest.mark.parametrize("url", ["loop://auto", "tcp://127.0.0.1:0", "shm://auto"])
def test_strided_writes_land_block_by_block(url):
    """A strided write (count blocks at two strides), as a numpy row and as
    a tuple: every block lands, nothing between blocks changes."""
    if url.split(":")[0] not in lc.transports():
        pytest.skip(f"{url} not built in")
    p = make_pair(url)
    p["rx"].grant(9, p["rreg"], 0, 1 << 20)
    w = np.zeros(1, dtype=lc.WRITE_DTYPE)
    w["local"], w["remote_offset"], w["length"] = p["src"].address + 64, 0, 64
    w["remote_region"], w["count"], w["local_stride"], w["remote_stride"] = p["rid"], 16, 256, 512
    p["conn"].post(w, room=9)
    p["conn"].post([(p["src"].address, p["rid"], 65536, 32, 8, 32, 100)], room=9)
    got = []
    while len(got) < 2:
        done = p["cq"].wait(10000)
        assert done, got
        got += list(done)
    assert all(c["status"] == 0 for c in got), got
    assert sorted(c["bytes"] for c in got) == [8 * 32, 16 * 64]
    src, dst = p["src"].numpy(), p["dst"].numpy()
    D = dst[:16 * 512].reshape(16, 512)
    S = src[:16 * 256].reshape(16, 256)
    assert np.array_equal(D[:, :64], S[:, 64:128])
    assert (D[:, 64:] == 0xA5).all()
    E = dst[65536:65536 + 800].reshape(8, 100)
    assert np.array_equal(E[:, :32], src[:256].reshape(8, 32))
    assert (E[:, 32:] == 0xA5).all()
    p["rx"].close()
    p["tx"].close()


@pytest.mark.parametrize("url", ["loop://auto", "tcp://127.0.0.1:0"])
def test_deferred_posts_start_at_flush(url):
    if url.split(":")[0] not in lc.transports():
        pytest.skip(f"{url} not built in")
    p = make_pair(url)
    p["rx"].grant(5, p["rreg"], 0, 1 << 20)
    ids = [p["conn"].post([(p["src"].address + i * 4096, p["rid"], i * 4096, 4096)], room=5,
                          tag=i, defer=True) for i in range(8)]
    p["conn"].flush()
    got = []
    while len(got) < 8:
        c = p["cq"].wait(10000)
        assert c, "deferred batches did not complete after flush"
        got += c
    assert sorted(c["batch_id"] for c in got) == sorted(ids)
    assert all(c["status"] == 0 for c in got)
    assert np.array_equal(p["src"].numpy()[:8 * 4096], p["dst"].numpy()[:8 * 4096])
    p["rx"].close()
    p["tx"].close()



def _reap(cq, n):
    got = []
    while len(got) < n:
        done = cq.wait(10000)
        assert done, got
        got += done
    return got


@pytest.mark.parametrize("way", ["speedups", "ctypes"])
def test_tuple_posts_packed_or_not_land_the_same(way, monkeypatch):
    """Lists of tuples go the C module's way (speedups.c) where it is built,
    else short ones a packed path (core.py: struct into this thread's
    scratch) and the rest the ctypes one: all land the same bytes and give
    the same completion fields; what does not convert (numpy integers do, a
    5-tuple or a float does not) meets the ctypes path's own errors;
    threads posting at once each keep their writes."""
    import threading
    from layercake import core
    if way == "ctypes":
        monkeypatch.setattr(core, "_fast", None)
    elif core._fast is None:
        pytest.skip("layercake._speedups not built: " + lc._ffi.SPEEDUPS_FROM)
    p = make_pair("loop://auto")
    p["rx"].grant(3, p["rreg"], 0, 4 << 20)
    src, rid, conn, cq = p["src"].address, p["rid"], p["conn"], p["cq"]
    packed = [(src + i * 4096, rid, (255 - i) * 4096, 4096) for i in range(16)]
    plain = [(src + i * 4096, rid, (255 - i) * 4096, 4096) for i in range(16, 17 + 16)]  # 17: ctypes
    b1 = conn.post(packed, room=3, tag=7, user_data=1 << 63, timeout_ms=20000)
    b2 = conn.post(tuple(plain), room=3, tag=8, user_data=5)
    b3 = conn.post([[np.uint64(src + 40 * 4096), np.int32(rid), np.int64(40 * 4096), 4096, 1, 0, 0]],
                   room=np.uint64(3))
    got = {c["batch_id"]: c for c in _reap(cq, 3)}
    assert got[b1]["tag"] == 7 and got[b1]["user_data"] == 1 << 63 and got[b1]["room"] == 3
    assert got[b1]["bytes"] == 16 * 4096 and got[b2]["bytes"] == 17 * 4096
    assert got[b2]["tag"] == 8 and got[b2]["user_data"] == 5 and got[b3]["bytes"] == 4096
    assert all(c["status"] == 0 and c["reason"] == "" for c in got.values()), got
    s, d = p["src"].numpy(), p["dst"].numpy()
    for i in range(33):
        j = 255 - i
        assert np.array_equal(s[i * 4096:(i + 1) * 4096], d[j * 4096:(j + 1) * 4096]), i
    assert np.array_equal(s[40 * 4096:41 * 4096], d[40 * 4096:41 * 4096])
    with pytest.raises(ValueError):
        conn.post([(src, rid, 0, 4096, 1)], room=3)  # neither 4 nor 7 values
    with pytest.raises(TypeError):
        conn.post([(float(src), rid, 0, 4096)], room=3)
    with pytest.raises(lc.LayercakeError) as e:
        conn.post([(12345, rid, 0, 10)], room=3)  # packs; the library refuses it
    assert e.value.name == "LC_ERR_REGION"
    conn.post([(src, rid, 0, 4096)], room=99)  # no grant: a reason comes back
    c = cq.wait(5000)[0]
    assert lc.err_name(c["status"]) == "LC_ERR_GRANT" and "room 99" in c["reason"]

    errs, ids = [], [[] for _ in range(4)]

    def poster(t):
        try:
            for k in range(50):
                i = 512 + t * 50 + k  # a page of its own: src page i to dst page i
                ids[t].append(conn.post([(src + i * 4096, rid, i * 4096, 4096)], room=3, tag=t))
        except Exception as ex:  # pragma: no cover - reported below
            errs.append(ex)
    th = [threading.Thread(target=poster, args=(t,)) for t in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert not errs, errs
    done = _reap(cq, 200)
    assert all(c["status"] == 0 for c in done), [c for c in done if c["status"]][:3]
    by_id = {c["batch_id"]: c["tag"] for c in done}
    assert all(by_id[b] == t for t in range(4) for b in ids[t])
    assert np.array_equal(s[512 * 4096:712 * 4096], d[512 * 4096:712 * 4096])
    p["rx"].close()
    p["tx"].close()

def test_rejections_raise_or_complete_with_the_library_code():
    p = make_pair("loop://auto")
    with pytest.raises(lc.LayercakeError) as e:
        p["rx"].grant(1, p["rreg"], (4 << 20) - 10, 4096)
    assert e.value.name == "LC_ERR_OUT_OF_REGION" and e.value.code == -1002
    with pytest.raises(lc.LayercakeError) as e:
        p["conn"].post([(12345, p["rid"], 0, 10)], room=1)  # source not registered
    assert e.value.name == "LC_ERR_REGION"
    p["conn"].post([(p["src"].address, p["rid"], 0, 4096)], room=77)  # no grant
    c = p["cq"].wait(5000)[0]
    assert lc.err_name(c["status"]) == "LC_ERR_GRANT" and "room 77" in c["reason"]
    with pytest.raises(lc.LayercakeError):
        lc.Context().config_set("tcp_lanes", 1000)
    with pytest.raises(lc.LayercakeError):
        p["tx"].connect("nope://x", p["cq"])


def test_asyncio_waits_on_the_completion_fd():
    p = make_pair("loop://auto")
    p["rx"].grant(1, p["rreg"], 0, 4096)

    async def run():
        p["conn"].post([(p["src"].address, p["rid"], 0, 4096)], room=1)
        return await asyncio.wait_for(p["cq"].wait_async(), 10)

    done = asyncio.run(run())
    assert done[0]["status"] == 0


@pytest.mark.parametrize("order", ["ctx_first", "children_first", "gc_only"])
def test_objects_dropped_in_any_order(order):
    p = make_pair("loop://auto")
    p["rx"].grant(1, p["rreg"], 0, 4096)
    p["conn"].post([(p["src"].address, p["rid"], 0, 4096)], room=1)
    if order == "ctx_first":
        p["tx"].close()
        p["rx"].close()
        p["conn"].close()  # already closed with its context: a no-op
        p["cq"].close()
        with pytest.raises(lc.LayercakeError):
            p["conn"].post([], room=1)
    elif order == "children_first":
        for k in ("conn", "cq", "listener", "rreg", "sreg", "tx", "rx"):
            p[k].close()
    p.clear()
    gc.collect()


def test_config_table_and_counters():
    names = [row[0] for row in lc.config_table()]
    assert "tcp_lanes" in names and "session_ttl_ms" in names
    ctx = lc.Context(tcp_lanes=2)
    assert ctx.config_get("tcp_lanes") == 2
    assert ctx.counters()["batches_posted"] == 0
