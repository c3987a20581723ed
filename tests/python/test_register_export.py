"""A registered object's memory stays where it is (issue 21, point 11): the
Region holds the object's buffer export (a memoryview) until it is
deregistered, so a bytearray, an array.array or a numpy array that owns its
data cannot be resized (BufferError; numpy's own reference check: ValueError) and so cannot move its storage under a
granted write; after close it can. A real tcp transfer into a registered
bytearray after an attempted resize lands byte-exact in the bytearray."""
import array

import numpy as np
import pytest

import layercake as lc

N = 1 << 20


def exporters():
    return {
        "bytearray": (bytearray(N), lambda b: b.extend(b"x" * N)),
        "array.array": (array.array("B", bytes(N)), lambda a: a.extend(bytes(N))),
    }


@pytest.mark.parametrize("name", ["bytearray", "array.array"])
def test_resizing_a_registered_object_raises_until_it_is_deregistered(name):
    obj, grow = exporters()[name]
    ctx = lc.Context("rx")
    reg = ctx.register(obj)
    with pytest.raises(BufferError):
        grow(obj)
    assert len(obj) == N  # nothing moved
    reg.close()
    grow(obj)  # deregistered: the object is the caller's again
    assert len(obj) == 2 * N
    ctx.close()


def test_a_registered_numpy_array_cannot_be_resized():
    a = np.zeros(N, dtype=np.uint8)
    ctx = lc.Context("rx")
    ctx.register(a)
    # numpy does not count buffer exports; its reference check refuses (the
    # Region references the array). resize(refcheck=False) is the caller's
    # own risk, as with any numpy view.
    with pytest.raises((ValueError, BufferError)):
        a.resize(2 * N)
    assert a.shape == (N,)
    ctx.close()


def test_closing_the_context_releases_the_export():
    buf = bytearray(N)
    ctx = lc.Context("rx")
    ctx.register(buf)  # the returned Region is dropped: the context keeps it registered
    with pytest.raises(BufferError):
        buf.extend(b"x")
    ctx.close()
    buf.extend(b"x")
    assert len(buf) == N + 1


def test_a_failed_registration_holds_nothing():
    buf = bytearray(N)
    ctx = lc.Context("rx")
    ctx.close()
    with pytest.raises(lc.LayercakeError):
        ctx.register(buf)
    buf.extend(b"x")  # not registered: resizable at once
    assert len(buf) == N + 1


def test_tcp_write_into_a_registered_bytearray_after_a_resize_attempt():
    if "tcp" not in lc.transports():
        pytest.skip("tcp not built in")
    rx, tx = lc.Context("rx"), lc.Context("tx")
    dst = bytearray(b"\xa5" * N)
    src = lc.Memory(N)
    pattern = (np.arange(N, dtype=np.uint64) * 7 % 251).astype(np.uint8)
    src.numpy()[:] = pattern
    rreg, tx_reg = rx.register(dst), tx.register(src)
    with pytest.raises(BufferError):
        dst.extend(b"\0" * (4 * N))  # would move the storage under the grant
    listener = rx.listen("tcp://127.0.0.1:0")
    cq = tx.completion_queue()
    conn = tx.connect(listener.url, cq, rx.issue_token())
    rid = conn.import_region(rreg.pack())
    rx.grant(5, rreg, 0, N // 2)
    w = np.zeros(128, dtype=lc.WRITE_DTYPE)
    w["local"] = src.address + np.arange(128) * 4096
    w["remote_offset"] = np.arange(128) * 4096
    w["length"] = 4096
    w["remote_region"] = rid
    conn.post(w, room=5, tag=1)
    done = cq.wait(10000)
    assert done and done[0]["status"] == 0 and done[0]["bytes"] == N // 2, done
    got = np.frombuffer(dst, dtype=np.uint8)
    assert np.array_equal(got[:N // 2], pattern[:N // 2])
    assert (got[N // 2:] == 0xA5).all()  # outside the grant: untouched
    del got
    rx.close()
    tx.close()
    assert tx_reg.closed and rreg.closed
    dst.extend(b"\0")  # the context closed: resizable again
