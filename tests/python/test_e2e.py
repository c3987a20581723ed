"""P and D over tcp in two processes through the Python API: P is
pd_peer.py (plain API or the TokenSpeed adapter), D is this test process.
Every wait is bounded; P is killed if it outlives the test."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
from pd_peer import child_env, readline_within
from layercake import tokenspeed as ts

HERE = os.path.dirname(os.path.abspath(__file__))


class PeerP:
    def __init__(self, mode, rooms, chunks, prefix_pages, expect="SUCCESS", layer_sleep=None):
        env = child_env()
        if layer_sleep is not None:
            env["PD_PEER_LAYER_SLEEP"] = str(layer_sleep)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "pd_peer.py"), mode, str(rooms), str(chunks),
             str(prefix_pages), expect],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = readline_within(self.proc.stdout, 30)
        assert line.startswith("BOOTSTRAP "), f"P did not start: {line!r}"
        self.addr = line.split()[1]

    def finish(self, timeout=60):
        try:
            out, _ = self.proc.communicate(input="", timeout=timeout)  # EOF: P may exit
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return self.proc.returncode, out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def peers():
    started = []
    yield lambda *a, **k: started.append(PeerP(*a, **k)) or started[-1]
    for p in started:
        p.kill()


def d_side():
    mem, kv, args = peer.kv_args(fill=False)
    return mem, kv, args


def check_bytes(kv, rooms, prefix_pages):
    nbuf = 2 * peer.LAYERS
    for k in range(rooms):
        want = peer.pattern(nbuf, peer.p_pages(k)[prefix_pages:])
        got = kv[:, peer.d_pages(k, prefix_pages)]
        assert np.array_equal(got, want), f"room {k}: bytes differ"
    used = np.zeros(peer.PAGES, bool)
    for k in range(rooms):
        used[peer.d_pages(k, prefix_pages)] = True
    assert not kv[:, ~used].any(), "a page outside every grant was written"


@pytest.mark.parametrize("chunks,prefix_pages", [(1, 0), (3, 2)])
def test_plain_api_over_tcp(peers, chunks, prefix_pages):
    rooms = 3
    p = peers("api", rooms, chunks, prefix_pages)
    mem, kv, args = d_side()
    ctx = lc.Context("d")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region], listen_url="tcp://127.0.0.1:0")
    rx = [d.receiver(p.addr, peer.ROOM0 + k) for k in range(rooms)]
    for k, r in enumerate(rx):
        assert r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED).status == lc.RoomStatus.BOOTSTRAPPED
        r.send(peer.d_pages(k, prefix_pages), prefix_len=prefix_pages * peer.TOKENS_PER_PAGE, aux_index=k)
    with pytest.raises(lc.LayercakeError) as e:
        rx[0].send(peer.d_pages(0, prefix_pages))  # once per room
    assert e.value.name == "LC_ERR_STATE"
    infos = [r.wait(timeout=30) for r in rx]
    assert [i.status for i in infos] == [lc.RoomStatus.SUCCESS] * rooms, infos
    assert all(i.layers_landed == peer.LAYERS for i in infos)
    assert [r.metadata() for r in rx] == [b"room=%d" % (peer.ROOM0 + k) for k in range(rooms)]
    check_bytes(kv, rooms, prefix_pages)
    assert d.counter("transfer_infos") == rooms
    rc, out = p.finish()
    assert rc == 0, out
    assert out.count("SUCCESS") == rooms
    ctx.close()


def test_adapter_over_tcp(peers):
    rooms, chunks, prefix_pages = 2, 2, 1
    p = peers("adapter", rooms, chunks, prefix_pages)
    mem, kv, args = d_side()
    mgr = ts.LayercakeKVManagerDecode(args, ts.DisaggregationMode.DECODE)
    receivers = [ts.LayercakeKVReceiver(mgr, p.addr, peer.ROOM0 + k) for k in range(rooms)]
    deadline = time.monotonic() + 30
    for k, r in enumerate(receivers):
        while r.poll() == ts.TransferPoll.Bootstrapping and time.monotonic() < deadline:
            time.sleep(0.001)
        r.init(peer.d_pages(k, prefix_pages), aux_index=k, decode_prefix_len=prefix_pages * peer.TOKENS_PER_PAGE)
    final = (ts.TransferPoll.Success, ts.TransferPoll.Failed)
    while any(r.poll() not in final for r in receivers) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert [r.poll() for r in receivers] == [ts.TransferPoll.Success] * rooms, mgr.failure_records
    assert all(r.layers_ready() == peer.LAYERS for r in receivers)
    for k in range(rooms):
        token, spec = mgr.pop_prefill_metadata(peer.ROOM0 + k)
        assert token == 1000 + k and list(spec) == [k, k + 1]
    check_bytes(kv, rooms, prefix_pages)
    rc, out = p.finish()
    assert rc == 0, out
    mgr.close()


def test_d_cancel_fails_the_room_on_both_sides(peers):
    # Cancelled while P computes its (slow) layers. A cancel before the
    # transfer info was sent is not told to P (decode.c); P then fails the
    # room only at its bootstrap timeout.
    p = peers("api", 1, 1, 0, "FAILED", layer_sleep=0.25)
    mem, kv, args = d_side()
    ctx = lc.Context("d")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, region)
    r = d.receiver(p.addr, peer.ROOM0)
    r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
    r.send(peer.d_pages(0, 0))
    r.cancel("the client went away")
    info = r.poll()
    assert info.status == lc.RoomStatus.FAILED and info.fail_reason == lc.FailReason.CANCELLED
    assert "the client went away" in info.reason
    with pytest.raises(lc.LayercakeError) as e:
        r.cancel()
    assert e.value.name == "LC_ERR_STATE"
    with pytest.raises(lc.LayercakeError):
        r.metadata()
    rc, out = p.finish()
    assert rc == 0 and "FAILED" in out, out
    ctx.close()


def test_a_room_without_p_always_ends():
    mem, kv, args = d_side()
    ctx = lc.Context("d", bootstrap_timeout_ms=300)
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region])
    r = d.receiver("127.0.0.1:1", 7)  # nobody listens there
    info = r.wait(timeout=30)
    assert info.status == lc.RoomStatus.FAILED and info.reason
    ctx.close()


def test_bad_control_plane_input_raises():
    mem, kv, args = d_side()
    ctx = lc.Context("bad")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    outside = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM)  # bases 0: in no region
    with pytest.raises(lc.LayercakeError) as e:
        lc.Decode(ctx, outside, [region])
    assert e.value.name == "LC_EINVAL"
    with pytest.raises(lc.LayercakeError) as e:
        lc.Decode(ctx, layout, [region], tp_size=2, tp_rank=2)
    assert e.value.name == "LC_EINVAL"
    with pytest.raises(lc.LayercakeError) as e:
        lc.Decode(ctx, layout, [region], listen_url="nope://x")
    assert e.value.code < 0
    d = lc.Decode(ctx, layout, [region])
    with pytest.raises(lc.LayercakeError) as e:
        d.receiver("no-port-here", 1)
    assert e.value.name == "LC_EINVAL"
    r = d.receiver("127.0.0.1:1", 1)
    with pytest.raises(lc.LayercakeError) as e:
        d.receiver("127.0.0.1:1", 1)
    assert e.value.name == "LC_EEXIST"
    with pytest.raises(lc.LayercakeError) as e:
        r.send([1, 2, 3])  # not Bootstrapped
    assert e.value.name == "LC_ERR_STATE"
    with pytest.raises(lc.LayercakeError) as e:
        d.counter("no_such_counter")
    assert e.value.name == "LC_ENOENT"
    bs = lc.BootstrapServer()
    with pytest.raises(lc.LayercakeError) as e:
        lc.Prefill(ctx, layout, bs, world_size=2, dp_size=3)
    assert e.value.name == "LC_EINVAL"
    p = lc.Prefill(ctx, layout, bs)
    s = p.sender(5)
    with pytest.raises(lc.LayercakeError) as e:
        p.sender(5)
    assert e.value.name == "LC_EEXIST"
    assert s.prefix_len is None and s.status == lc.RoomStatus.BOOTSTRAPPING
    s.abort("no longer needed")
    assert s.poll().status == lc.RoomStatus.FAILED
    with pytest.raises(lc.LayercakeError) as e:
        s.abort()
    assert e.value.name == "LC_ERR_STATE"
    ctx.close()
    bs.close()


def test_async_waits(peers):
    import asyncio

    p = peers("api", 1, 1, 0)
    mem, kv, args = d_side()
    ctx = lc.Context("d")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region])
    r = d.receiver(p.addr, peer.ROOM0)

    async def main():
        await r.wait_async(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
        r.send(peer.d_pages(0, 0))
        return await asyncio.wait_for(r.wait_async(), 30)

    assert asyncio.run(main()).status == lc.RoomStatus.SUCCESS
    rc, out = p.finish()
    assert rc == 0, out
    ctx.close()


def test_decode_wait_and_fileno_wake_on_each_change(peers):
    """D driven by its fd alone: select() on Decode.fileno() returns for each
    status change of the room (a lost wake would leave it 30 s and fail),
    and Decode.wait(0) takes the wake."""
    import select

    p = peers("api", 1, 1, 0)
    mem, kv, args = d_side()
    ctx = lc.Context("d")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region], listen_url="tcp://127.0.0.1:0")
    assert d.wait(0) is False
    assert d.fileno() >= 0
    r = d.receiver(p.addr, peer.ROOM0)
    seen, sent = [], False
    while True:
        st = r.status
        if not seen or seen[-1] != st:
            seen.append(st)
        if st.final:
            break
        if st == lc.RoomStatus.BOOTSTRAPPED and not sent:
            r.send(peer.d_pages(0, 0), aux_index=0)
            sent = True
            continue
        readable, _, _ = select.select([d.fileno()], [], [], 30)
        assert readable, f"no wake in 30 s with the room {st.name}: {seen}"
        assert d.wait(0) is True
    assert seen[-1] == lc.RoomStatus.SUCCESS, seen
    assert lc.RoomStatus.BOOTSTRAPPED in seen
    assert r.wait(timeout=1).status == lc.RoomStatus.SUCCESS  # Receiver.wait over Decode.wait
    check_bytes(kv, 1, 0)
    rc, out = p.finish()
    assert rc == 0, out
    ctx.close()
