"""The deployment's shared secret through the Python API (docs/security.md,
"One switch"): BootstrapServer, Prefill and Decode take shared_secret= (as
the vLLM connector passes it from its config); with it a room goes through
byte-exact, and a P or D holding another secret gets nothing."""
import numpy as np
import pytest

import layercake as lc
import pd_peer as peer

SECRET = "8c1d0e5a9f3b42e6b7d1c0a95e4f3812"
OTHER = b"ffffeeeeddddccccbbbbaaaa99998888"


def p_side(ctx_name="p"):
    mem, kv, args = peer.kv_args(fill=True)
    ctx = lc.Context(ctx_name)
    ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    return mem, ctx, layout


def d_side(secret, **knobs):
    mem, kv, args = peer.kv_args(fill=False)
    ctx = lc.Context("d", **knobs)
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    d = lc.Decode(ctx, layout, [region], listen_url="tcp://127.0.0.1:0", host="127.0.0.1",
                  shared_secret=secret)
    return mem, kv, ctx, d


def test_a_room_with_the_shared_secret():
    bs = lc.BootstrapServer(host="127.0.0.1", shared_secret=SECRET)
    pmem, pctx, layout = p_side()
    p = lc.Prefill(pctx, layout, bs, host="127.0.0.1", shared_secret=SECRET.encode())
    dmem, kv, dctx, d = d_side(SECRET)
    room = 700
    s = p.sender(room)
    r = d.receiver(bs.addr, room)
    assert r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED).status == lc.RoomStatus.BOOTSTRAPPED
    r.send(peer.d_pages(0, 0), aux_index=0)
    s.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
    e = p.engine
    with e.batch():
        e.add_chunk(room, peer.p_pages(0), 0, True)
    for _ in range(peer.LAYERS):
        p.steps.record_cache()
    p.steps.record_aux()
    s.set_metadata(b"m")
    assert r.wait(timeout=30).status == lc.RoomStatus.SUCCESS
    assert s.wait(timeout=30).status == lc.RoomStatus.SUCCESS
    want = peer.pattern(2 * peer.LAYERS, peer.p_pages(0))
    assert np.array_equal(kv[:, peer.d_pages(0, 0)], want)
    s.close(), r.close(), d.close(), p.close(), dctx.close(), pctx.close(), bs.close()


def test_other_secrets_get_nothing():
    bs = lc.BootstrapServer(host="127.0.0.1", shared_secret=SECRET)
    pmem, pctx, layout = p_side()
    # A P of another secret, or of none, cannot register its route.
    for secret in (OTHER, None):
        with pytest.raises(lc.LayercakeError) as e:
            lc.Prefill(pctx, layout, bs, host="127.0.0.1", shared_secret=secret)
        assert e.value.name == "LC_ERR_AUTH"
    p = lc.Prefill(pctx, layout, bs, host="127.0.0.1", shared_secret=SECRET)
    # A D of another secret: its room fails, nothing reaches P.
    dmem, kv, dctx, d = d_side(OTHER, connect_timeout_ms=1000)
    r = d.receiver(bs.addr, 701)
    info = r.wait(timeout=30)
    assert info.status == lc.RoomStatus.FAILED and "authorize" in info.reason, info
    assert p.counter("registrations") == 0 and p.counter("msgs_received") == 0
    assert not kv.any()
    r.close(), d.close(), p.close(), dctx.close(), pctx.close(), bs.close()


def test_shared_secret_argument_checks():
    with pytest.raises(TypeError):
        lc.BootstrapServer(host="127.0.0.1", shared_secret=1234)
    with pytest.raises(ValueError):
        lc.BootstrapServer(host="127.0.0.1", shared_secret="a\0b" * 16)
    with pytest.raises(lc.LayercakeError) as e:  # under 32 characters
        lc.BootstrapServer(host="127.0.0.1", shared_secret="short")
    assert e.value.name == "LC_EINVAL" and "32" in str(e.value)
