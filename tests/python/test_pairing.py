"""Pairing values through the Python binding (issue 43, finding 3):
Prefill.sender(room, pair=...) and Decode.receiver(bootstrap, room, pair=...).

P runs in its own process (this file run as a script); D is this test
process. The attacker is a receiver of the same room at P's real bootstrap
server without the request's pairing value: refused, "pairing value
mismatch", and the victim's receiver then gets every byte."""
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
from pd_peer import child_env, readline_within

ROOM = 4242


def run_p(pair_hex):
    """The P process: one paired sender of ROOM; prints BOOTSTRAP addr,
    then the room's end, and waits for stdin to close."""
    pair = bytes.fromhex(pair_hex)
    mem, kv, args = peer.kv_args(fill=True)
    ctx = lc.Context("p")
    ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    bs = lc.BootstrapServer()
    p = lc.Prefill(ctx, layout, bs)
    s = p.sender(ROOM, pair=pair)
    print("BOOTSTRAP", bs.addr, flush=True)
    info = s.wait(timeout=60, until=lc.RoomStatus.BOOTSTRAPPED)
    print("P boot", info.status.name, s.prefix_len, flush=True)
    e = p.engine
    with e.batch():
        e.add_chunk(ROOM, peer.p_pages(0), 0, True)
    for _ in range(peer.LAYERS):
        time.sleep(peer.LAYER_SLEEP)
        p.steps.record_cache()
    p.steps.record_aux()
    s.set_metadata(b"paired")
    info = s.wait(timeout=30)
    print("P room", info.status.name, info.reason, flush=True)
    sys.stdin.read()
    s.close()
    p.close()
    bs.close()
    ctx.close()


@pytest.fixture
def paired_p():
    pair = uuid.uuid4().bytes
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "p", pair.hex()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=child_env())
    try:
        line = readline_within(proc.stdout, 30)
        assert line.startswith("BOOTSTRAP "), f"P did not start: {line!r}"
        yield proc, line.split()[1], pair
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_pair_arguments_are_checked():
    mem, kv, args = peer.kv_args(fill=False)
    ctx = lc.Context("d")
    try:
        region = ctx.register(mem)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
        d = lc.Decode(ctx, layout, [region], listen_url="tcp://127.0.0.1:0")
        with pytest.raises(TypeError, match="pair must be bytes"):
            d.receiver("127.0.0.1:1", 1, pair=str(uuid.uuid4()))
        with pytest.raises(ValueError, match="16..64"):
            d.receiver("127.0.0.1:1", 1, pair=b"x" * 15)
        with pytest.raises(ValueError, match="16..64"):
            d.receiver("127.0.0.1:1", 1, pair=b"x" * 65)
        for ok in (bytearray(16), memoryview(b"y" * 64), str(uuid.uuid4()).encode()):
            d.receiver("127.0.0.1:1", 2, pair=ok).close()
        d.receiver("127.0.0.1:1", 3, pair=None).close()
        d.close()
    finally:
        ctx.close()


def test_only_the_paired_receiver_gets_the_room(paired_p):
    proc, addr, pair = paired_p
    mem, kv, args = peer.kv_args(fill=False)
    ctx = lc.Context("d")
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region], listen_url="tcp://127.0.0.1:0")
    pages = peer.d_pages(0, 0)
    try:
        for wrong in (None, uuid.uuid4().bytes):
            r = d.receiver(addr, ROOM, pair=wrong)
            r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
            r.send(pages)
            t = time.monotonic()
            info = r.wait(timeout=30)
            assert info.status == lc.RoomStatus.FAILED, info
            assert "pairing value mismatch" in info.reason, info.reason
            assert time.monotonic() - t < 1.0
            r.close()
        assert not kv.any(), "a refused receiver's pages were written"
        r = d.receiver(addr, ROOM, pair=pair)
        r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
        r.send(pages)
        info = r.wait(timeout=30)
        assert info.status == lc.RoomStatus.SUCCESS, info
        assert r.metadata() == b"paired"
        want = peer.pattern(2 * peer.LAYERS, peer.p_pages(0))
        assert np.array_equal(kv[:, pages], want), "the paired receiver's bytes differ from P's"
        r.close()
        out, _ = proc.communicate(input="", timeout=30)
        assert "P boot BOOTSTRAPPED 0" in out and "P room SUCCESS" in out, out
    finally:
        d.close()
        ctx.close()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "p":
    run_p(sys.argv[2])


def test_prefill_engine_id_is_checked():
    """The engine id P's bootstrap shows on GET /query comes from the caller:
    one too long, or holding a control character, is refused naming the
    field; a good one serves."""
    mem, kv, args = peer.kv_args(fill=False)
    ctx = lc.Context("p")
    bs = lc.BootstrapServer()
    try:
        ctx.register(mem)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
        for bad in ("e" * 4096, "e\n1"):
            with pytest.raises(lc.LayercakeError, match="engine_id"):
                lc.Prefill(ctx, layout, bs, engine_id=bad)
        lc.Prefill(ctx, layout, bs, engine_id="prefill-0").close()
    finally:
        bs.close()
        ctx.close()
