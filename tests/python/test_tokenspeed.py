"""The TokenSpeed adapter (layercake.tokenspeed) against the seed manager.

The gating table below is what the seed does (spec 2.4); it is checked on
the adapter always, and on the seed itself when ../shared/seed/async_conn.py
(or $LAYERCAKE_SEED) is there. One row differs on purpose: a chunk in an
idle batch, which the seed drops silently and the adapter refuses."""
import threading
import time
import types

import numpy as np
import pytest

import layercake as lc
import pd_peer as peer
import seed_harness
from layercake import tokenspeed as ts

LAYERS = 3
PAGES = np.arange(4, dtype=np.int64)

# (name, setup steps, add_transfer_request(is_last, aux_index, idle), seed outcome, adapter outcome)
GATING = [
    ("unknown room", [], (False, None, False), "ignored", "ignored"),
    ("unknown room, last chunk without aux_index", [], (True, None, False), "ValueError", "ValueError"),
    ("known room without transfer info", ["open"], (False, None, False), "ignored", "ignored"),
    ("bootstrapped room", ["open", "bootstrap"], (False, None, False), "queued", "queued"),
    ("bootstrapped room, last chunk", ["open", "bootstrap"], (True, 0, False), "queued", "queued"),
    ("bootstrapped room, last chunk without aux_index", ["open", "bootstrap"], (True, None, False),
     "ValueError", "ValueError"),
    ("failed room", ["open", "bootstrap", "fail"], (False, None, False), "ignored", "ignored"),
    ("room failed before its transfer info", ["open", "fail"], (False, None, False), "ignored", "ignored"),
    ("room failed while unknown", ["fail"], (False, None, False), "ignored", "ignored"),
    ("finished room (a dummy rank's, after Success)", ["open", "bootstrap", "finish"], (False, None, False),
     "ignored", "ignored"),
    ("idle batch", ["open", "bootstrap"], (False, None, True), "ignored", "LayercakeError"),
]


class SeedSide:
    def __init__(self, seed):
        self.m = seed_harness.seed_manager(seed, LAYERS)

    def step(self, room, what):
        m = self.m
        if what == "open":
            m.update_status(room, seed_harness.TransferPoll.Bootstrapping)
        elif what == "bootstrap":
            m.transfer_infos[room] = {"10.0.0.2:7001": object()}
            m.update_status(room, seed_harness.TransferPoll.Bootstrapped)
        elif what == "fail":
            m.record_failure(room, "test")
            m.update_status(room, seed_harness.TransferPoll.Failed)
        elif what == "finish":  # what the seed's worker does for a dummy rank's last chunk
            m.update_status(room, seed_harness.TransferPoll.Success)
            m.transfer_infos.pop(room)

    def add(self, room, is_last, aux, idle):
        q = self.m.transfer_queues[0].items
        before = len(q)
        with self.m.add_batch(idle):
            self.m.add_transfer_request(room, PAGES, slice(0, len(PAGES)), is_last, aux)
        return "queued" if len(q) > before else "ignored"

    def status(self, room):
        return int(self.m.check_status(room))

    def update(self, room, s):
        self.m.update_status(room, s)

    def close(self):
        pass


class AdapterSide:
    """The adapter on a real P rank (in-process bootstrap server). A room is
    bootstrapped with a dummy destination: the gates do not need a D."""

    def __init__(self):
        self.ctx = lc.Context("gating")
        self.mem = lc.Memory(1 << 21)
        self.ctx.register(self.mem)
        layout = lc.Layout.mla(LAYERS, 16, 4096, bases=[self.mem.address + i * 16 * 4096 for i in range(LAYERS)])
        self.bs = lc.BootstrapServer()
        self.m = ts.LayercakeKVManager(None, ts.DisaggregationMode.PREFILL, None, ctx=self.ctx, layout=layout,
                                       bootstrap=self.bs.addr)
        self.sc = self.m.register_step_counter(ts.StepCounter())

    def step(self, room, what):
        m = self.m
        if what == "open":
            m.update_status(room, ts.TransferPoll.Bootstrapping)
        elif what == "bootstrap":
            m.engine.room_dst_add(room, dummy=True)
        elif what == "fail":
            m.record_failure(room, "test")
            m.update_status(room, ts.TransferPoll.Failed)
        elif what == "finish":
            with m.add_batch(False):
                assert m.add_transfer_request(room, PAGES, slice(0, 4), True, aux_index=0)
            self.sc.record_batch()
            wait_for(lambda: m.check_status(room) == ts.TransferPoll.Success)

    def add(self, room, is_last, aux, idle):
        with self.m.add_batch(idle):
            return "queued" if self.m.add_transfer_request(room, PAGES, slice(0, 4), is_last, aux) else "ignored"

    def status(self, room):
        return int(self.m.check_status(room))

    def update(self, room, s):
        self.m.update_status(room, s)

    def close(self):
        self.m.close()
        self.bs.close()
        self.ctx.close()


def wait_for(cond, timeout=20):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError("condition not reached")
        time.sleep(0.001)


def outcome(side, room, steps, call):
    for s in steps:
        side.step(room, s)
    try:
        return side.add(room, *call)
    except Exception as e:  # noqa: BLE001 - the outcome is the exception's type
        return type(e).__name__


@pytest.fixture(params=["seed", "adapter"])
def side(request):
    if request.param == "seed":
        seed = seed_harness.load_seed()
        if seed is None:
            pytest.skip("the seed (../shared/seed/async_conn.py) is not here; the adapter rows still run")
        s = SeedSide(seed)
    else:
        s = AdapterSide()
    s.kind = request.param
    yield s
    s.close()


def test_gating_table(side):
    got, want = [], []
    for i, (name, steps, call, seed_out, ours) in enumerate(GATING):
        got.append((name, outcome(side, 1000 + i, steps, call)))
        want.append((name, seed_out if side.kind == "seed" else ours))
    assert got == want


def test_status_rules(side):
    bs, bd, f = ts.TransferPoll.Bootstrapping, ts.TransferPoll.Bootstrapped, ts.TransferPoll.Failed
    with pytest.raises(KeyError):
        side.status(1)
    side.step(2, "open")
    side.step(2, "bootstrap")
    side.update(2, bs)  # monotonic: no step back
    assert side.status(2) == bd
    side.update(3, f)  # an unknown room, failed: known and Failed
    assert side.status(3) == f
    side.step(4, "open")
    side.step(4, "fail")
    side.update(4, bd)  # Failed is sticky
    assert side.status(4) == f


def test_seed_and_adapter_agree_on_the_empty_batch_reservation():
    # The seed advances (layer_num, 1) on every non-idle batch, empty or not,
    # and nothing on an idle one. The adapter's C engine does the same; its
    # effect is checked end to end in test_empty_batch_still_reserves_steps.
    seed = seed_harness.load_seed()
    if seed is None:
        pytest.skip("the seed is not here")
    m = seed_harness.seed_manager(seed, LAYERS)
    with m.add_batch(False):
        pass
    with m.add_batch(True):
        pass
    assert m.step_counter.current_step() == (LAYERS, 1)


def test_idle_batch_raises_with_the_library_code():
    s = AdapterSide()
    try:
        s.step(1, "open")
        s.step(1, "bootstrap")
        with pytest.raises(lc.LayercakeError) as e:
            with s.m.add_batch(True):
                s.m.add_transfer_request(1, PAGES, slice(0, 4), False)
        assert e.value.name == "LC_ERR_STATE" and "idle batch" in str(e.value)
        assert s.add(1, False, None, False) == "queued"  # the idle batch was closed
        with pytest.raises(lc.LayercakeError):
            with s.m.add_batch(False):
                with s.m.add_batch(False):
                    pass
    finally:
        s.close()


def test_modes_and_interval_are_checked():
    with pytest.raises(RuntimeError):
        ts.LayercakeKVManager(None, ts.DisaggregationMode.DECODE)
    with pytest.raises(RuntimeError):
        ts.LayercakeKVManagerDecode(None, "prefill")
    with pytest.raises(ValueError):
        ts.LayercakeKVManager(None, "prefill", types.SimpleNamespace(disaggregation_layerwise_interval=0))
    with pytest.raises(TypeError):
        s = AdapterSide()
        try:
            s.m.register_step_counter(object())
        finally:
            s.close()


def test_layout_from_kv_args_matches_the_builder():
    mem, kv, args = peer.kv_args(fill=False)
    a = ts.layout_from_kv_args(args)
    b = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    assert a.buffers == b.buffers and a.fingerprint == b.fingerprint
    args.offsets.append([0])  # a buffer in two layers is fine; one in none is not
    args.kv_data_ptrs.append(1 << 40)
    args.kv_data_lens.append(4096)
    args.kv_item_lens.append(4096)
    args.offsets.pop()
    with pytest.raises(ValueError):
        ts.layout_from_kv_args(args)


def test_metadata_codec():
    blob = ts.encode_metadata(42, np.array([1, 2, 3], dtype=np.int32))
    token, spec = ts.decode_metadata(blob)
    assert token == 42 and list(spec) == [1, 2, 3]
    with pytest.raises(ValueError):
        ts.decode_metadata(b"nope")
    with pytest.raises(ValueError):
        ts.decode_metadata(blob[:-1])


# ---- P and D adapters in one process (real tcp between them) ------------------

class Pair:
    def __init__(self, config=None):
        self.pmem, self.pkv, pargs = peer.kv_args(fill=True)
        self.dmem, self.dkv, dargs = peer.kv_args(fill=False)
        self.bs = lc.BootstrapServer()
        server_args = types.SimpleNamespace(disaggregation_layerwise_interval=1,
                                            disaggregation_bootstrap_port=self.bs.port)
        self.p = ts.make_kv_manager(pargs, ts.DisaggregationMode.PREFILL, server_args, config=config)
        self.d = ts.make_kv_manager(dargs, ts.DisaggregationMode.DECODE, server_args)

    def open(self, room, k=0):
        s = ts.LayercakeKVSender(self.p, self.bs.addr, room)
        r = ts.LayercakeKVReceiver(self.d, None, room)  # the port from server_args
        wait_for(lambda: r.poll() == ts.TransferPoll.Bootstrapped)
        r.init(peer.d_pages(k, 0), aux_index=k)
        wait_for(lambda: s.poll() == ts.TransferPoll.Bootstrapped)
        return s, r

    def close(self):
        self.p.close()
        self.d.close()
        self.bs.close()


@pytest.fixture
def pair():
    p = Pair()
    yield p
    p.close()


def test_empty_batch_still_reserves_steps(pair):
    sc = pair.p.register_step_counter(None)
    s, r = pair.open(7)
    with pair.p.add_batch(False):  # an empty forward: reserves steps 0..L-1 and aux 0
        pass
    with pair.p.add_batch(False):
        assert pair.p.add_transfer_request(7, peer.p_pages(0), slice(0, peer.TOTAL), True, aux_index=0)
    pair.p.set_prefill_metadata(7, 5)
    sc.record_batch()  # the empty forward's records only
    time.sleep(0.3)
    assert r.layers_ready() == 0 and r.poll() == ts.TransferPoll.Transferring
    sc.record_batch()  # now the chunk's forward
    wait_for(lambda: r.poll() == ts.TransferPoll.Success)
    assert s.poll() == ts.TransferPoll.Success and pair.d.pop_prefill_metadata(7)[0] == 5


def test_a_foreign_step_counter_is_bridged(pair):
    class GpuLikeCounter:  # TokenSpeed's StepCounter reads pinned words
        def __init__(self):
            self.cache = self.aux = 12345  # not zero: counted from registration

        def query_ready_cache_step(self):
            return self.cache

        def query_ready_aux_step(self):
            return self.aux

    g = GpuLikeCounter()
    pair.p.register_step_counter(g)
    s, r = pair.open(8)
    with pair.p.add_batch(False):
        pair.p.add_transfer_request(8, peer.p_pages(0), slice(0, peer.TOTAL), True, aux_index=0)
    pair.p.set_prefill_metadata(8, 9, [1])
    for layer in range(peer.LAYERS):
        g.cache += 1
        wait_for(lambda: r.layers_ready() == layer + 1 or r.poll() == ts.TransferPoll.Success)
    g.aux += 1
    wait_for(lambda: r.poll() == ts.TransferPoll.Success)
    assert np.array_equal(pair.dkv[:, peer.d_pages(0, 0)], pair.pkv[:, peer.p_pages(0)])


def test_exception_in_a_batch_fails_its_rooms(pair):
    sc = pair.p.register_step_counter(ts.StepCounter())
    s, r = pair.open(9)
    with pytest.raises(KeyError):
        with pair.p.add_batch(False):
            pair.p.add_transfer_request(9, peer.p_pages(0), slice(0, peer.TOTAL), False)
            raise KeyError("the scheduler broke")
    assert s.poll() == ts.TransferPoll.Failed
    assert "the scheduler broke" in pair.p.failure_records[9]
    with pytest.raises(RuntimeError, match="scheduler broke"):
        s.failure_exception()
    wait_for(lambda: r.poll() == ts.TransferPoll.Failed)  # D was told
    sc.record_batch()  # the aborted forward's steps, as the contract asks
    s.clear()
    assert 9 not in pair.p.request_status


def test_abort_room_and_unknown_metadata(pair):
    pair.p.register_step_counter(None)
    s, r = pair.open(11)
    assert pair.p.set_prefill_metadata(999, 1) is False
    pair.p.abort_room(11, "EPD embedding timeout")
    assert pair.p.check_status(11) == ts.TransferPoll.Failed
    wait_for(lambda: r.poll() == ts.TransferPoll.Failed)
    with pytest.raises(RuntimeError, match="EPD embedding timeout"):
        s.failure_exception()
    with pytest.raises(ValueError):
        pair.p.update_status(12, ts.TransferPoll.Success)  # progress is layercake's to decide
    assert pair.p.request_status[12] == ts.TransferPoll.Bootstrapping  # opened, as the seed inserts


def test_step_counter_from_threads(pair):
    # The attention backends may record from another thread than the scheduler's.
    sc = pair.p.register_step_counter(ts.StepCounter())
    s, r = pair.open(13)
    with pair.p.add_batch(False):
        pair.p.add_transfer_request(13, peer.p_pages(0), slice(0, peer.TOTAL), True, aux_index=0)
    pair.p.set_prefill_metadata(13, 1)
    t = threading.Thread(target=sc.record_batch)
    t.start()
    t.join(10)
    wait_for(lambda: r.poll() == ts.TransferPoll.Success)
    assert sc.query_ready_cache_step() == peer.LAYERS and sc.query_ready_aux_step() == 1
