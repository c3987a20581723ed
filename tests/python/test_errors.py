"""LayercakeError carries the cause the library recorded (lc_last_error),
not only the code's generic text; wrong Python types fail as TypeError
before they reach C."""
import threading

import pytest

import layercake as lc
import pd_peer as peer
from layercake import _ffi


def test_decode_with_too_small_a_region_names_the_buffer():
    mem, _, args = peer.kv_args(fill=False)
    small = lc.Memory(peer.PAGES * peer.ITEM)  # holds buffer 0 only
    with lc.Context("d") as ctx:
        reg = ctx.register(small)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
        with pytest.raises(lc.LayercakeError) as e:
            lc.Decode(ctx, layout, [reg], listen_url="tcp://127.0.0.1:0")
        assert e.value.name == "LC_EINVAL"
        assert "buffer 0 is not inside any given region" in str(e.value)
        assert "invalid argument" not in str(e.value)
        assert e.value.reason == "decode: buffer 0 is not inside any given region"
    del mem


def test_listen_without_a_port_says_so():
    with lc.Context("c") as ctx:
        with pytest.raises(lc.LayercakeError) as e:
            ctx.listen("tcp://127.0.0.1")
        assert "tcp://127.0.0.1: missing port" in str(e.value)
        with pytest.raises(lc.LayercakeError) as e:
            ctx.listen("tcp://127.0.0.1:http")
        assert "port 'http' is not a number" in str(e.value)


@pytest.mark.parametrize("addr,why", [
    ("localhost", "localhost: missing port"),
    ("tcp://127.0.0.1:8998", "tcp:// is not the bootstrap server's scheme"),
    ("127.0.0.1:0", "port 0"),
])
def test_bad_bootstrap_address_is_refused_with_the_expected_form(addr, why):
    mem, _, args = peer.kv_args(fill=False)
    with lc.Context("d") as ctx:
        reg = ctx.register(mem)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
        with lc.Decode(ctx, layout, [reg], listen_url="tcp://127.0.0.1:0") as d:
            with pytest.raises(lc.LayercakeError) as e:
                d.receiver(addr, 7)
            assert why in str(e.value)
            assert "host:port" in str(e.value)
        with pytest.raises(lc.LayercakeError) as e:
            lc.Prefill(ctx, layout, addr)
        assert why in str(e.value) and "host:port" in str(e.value)


def test_prefill_without_a_bootstrap_address_is_a_type_error():
    mem, _, args = peer.kv_args(fill=False)
    with lc.Context("p") as ctx:
        ctx.register(mem)
        layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
        with pytest.raises(TypeError, match="bootstrap must be .*host:port"):
            lc.Prefill(ctx, layout, None)
        with pytest.raises(TypeError, match="layout must be"):
            lc.Prefill(ctx, None, "127.0.0.1:1")
        with pytest.raises(TypeError, match="listen_url must be"):
            lc.Decode(ctx, layout, [], listen_url=None)


def test_config_reason_names_the_knob_and_range():
    with lc.Context("c") as ctx:
        with pytest.raises(lc.LayercakeError) as e:
            ctx.config_set("tcp_lanes", 100000)
        assert "tcp_lanes" in str(e.value) and "allowed" in str(e.value)
        with pytest.raises(lc.LayercakeError) as e:
            ctx.config_set("no_such_knob", 1)
        assert "no knob named 'no_such_knob'" in str(e.value)


def test_no_stale_reason_from_an_earlier_failure():
    """A reason is taken once, for the code it was recorded with: a later
    failure that records none shows the code's text, not the old reason."""
    with lc.Context("c") as ctx:
        with pytest.raises(lc.LayercakeError):
            ctx.listen("tcp://127.0.0.1")
    assert lc.errors.last_error() == ""  # taken by the exception
    err = lc.LayercakeError(-22, "x", lc.errors._reason(-22))
    assert str(err) == "x: LC_EINVAL: invalid argument"


def test_reason_is_per_thread():
    with lc.Context("c") as ctx:
        with pytest.raises(lc.LayercakeError):
            ctx.listen("tcp://127.0.0.1")
        _ffi.lc_listener_create(ctx._need(), b"tcp://127.0.0.1", None)  # out NULL: a reason here
        here = lc.errors.last_error()
        seen = []
        t = threading.Thread(target=lambda: seen.append(lc.errors.last_error()))
        t.start()
        t.join()
        assert here and seen == [""]
