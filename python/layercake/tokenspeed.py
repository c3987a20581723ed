"""Drop-in KV managers for TokenSpeed-style engines.

`LayercakeKVManager` has the surface of the seed's MooncakeAsyncKVManager
(../shared/seed/async_conn.py, spec section 2.4) for P:

    mgr.register_step_counter(step_counter)
    with mgr.add_batch(is_idle):
        mgr.add_transfer_request(room, kv_indices, index_slice, is_last, aux_index)
    mgr.check_status(room) / mgr.update_status(room, s) / mgr.record_failure(room, text)

with the seed's gating: a room that is unknown, Failed, not yet
bootstrapped (no transfer info) or already finished (a dummy rank's room)
is ignored; `is_last` without `aux_index` raises ValueError. One deliberate
difference: a chunk added inside an idle batch raises LayercakeError
(LC_ERR_STATE) where the seed silently drops it.

`LayercakeKVManagerDecode` is the decode-side counterpart (rooms opened with
add_receiver / LayercakeKVReceiver, pages sent with receiver.init, the first
token read with pop_prefill_metadata). The layer-by-layer work (planning,
writes, acknowledgements, deadlines, statuses to D) happens in C, off the
GIL; the Python cost per request is one ctypes call per chunk. See
docs/python.md for the full mapping.
"""
import enum
import logging
import struct
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager

from . import _ffi
from . import gpu
from .control import Decode, Prefill
from .core import MEM_CUDA, MEM_HOST, MEM_PINNED, Context, RawMemory
from .engine import BufferKind, Buffer, Layout, RoomStatus, Steps, step_ready
from .errors import LC_ENOENT, LC_ERR_STATE, LayercakeError

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None

logger = logging.getLogger("layercake.tokenspeed")



class TransferPoll(enum.IntEnum):
    """TokenSpeed's TransferPoll (pd/base/status.py); equal to RoomStatus."""

    Failed = 0
    Bootstrapping = 1
    Bootstrapped = 2
    WaitingForInput = 3
    Transferring = 4
    Success = 5


class DisaggregationMode(enum.Enum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


def _mode_is(mode, want):
    for v in (getattr(mode, "value", None), getattr(mode, "name", None), mode):
        if isinstance(v, str) and v.lower() == want:
            return True
    return False


# ---- step counters -------------------------------------------------------------

class StepCounter:
    """Drop-in for TokenSpeed's StepCounter (pd/utils.py) on a CPU producer:
    the attention backends call record_cache() once per layer and the
    engine record_aux() once per non-idle batch. It does nothing until a
    manager binds it (register_step_counter). The reservation cursor
    (current_step/advance_step) belongs to the C engine: add_batch reserves.
    Unlike the seed's, a record that no ended non-idle add_batch reserved
    (an idle batch's forward, a forward without add_batch) raises
    LayercakeError LC_ERR_STATE and moves nothing, instead of shifting the
    steps of every later batch."""

    COUNT_NUM_MAX = _ffi.STEP_MOD

    def __init__(self, *args, **kwargs):
        self._steps = None

    def _bind(self, steps):
        self._steps = steps

    def _need(self):
        if self._steps is None:
            raise RuntimeError("StepCounter is not registered with a layercake manager")
        return self._steps

    def record_cache(self):
        self._need().record_cache()

    def record_aux(self):
        self._need().record_aux()

    def record_batch(self):
        """Every record of one batch whose forward did not run."""
        self._need().record_batch()

    def query_ready_cache_step(self):
        return self._need().value(Steps.CACHE)

    def query_ready_aux_step(self):
        return self._need().value(Steps.AUX)

    @staticmethod
    def is_step_ready(current, target):
        return step_ready(current, target)


def _torch_current_stream():
    """torch.cuda.current_stream().cuda_stream, torch imported on first use."""
    import torch  # noqa: PLC0415 (optional dependency)
    return torch.cuda.current_stream().cuda_stream


class CudaStepCounter(StepCounter):
    """A StepCounter whose records the GPU writes: record_cache() and
    record_aux() enqueue lc_engine_record_*_on_stream on the current CUDA
    stream (`stream`: a callable returning the handle; default
    torch.cuda.current_stream().cuda_stream), one cuStreamWriteValue64 per
    layer where the seed needs two torch ops, ordered after the layer's KV
    writes. Not inside a replayed CUDA graph: the writes are absolute values
    and a replay repeats the captured ones (docs/gpu.md)."""

    def __init__(self, *args, stream=None, **kwargs):
        super().__init__()
        self._stream = stream or _torch_current_stream

    def record_cache(self):
        self._need()._engine.record_cache_on_stream(self._stream())

    def record_aux(self):
        self._need()._engine.record_aux_on_stream(self._stream())

    def record_batch(self):
        for _ in range(self._need().layer_count):
            self.record_cache()
        self.record_aux()


def _map_onto_stream(counter, steps, stream):
    """Point a foreign GPU counter's record_cache/record_aux (TokenSpeed's
    StepCounter, called by its attention backends on the forward's stream)
    at the engine's stream records, and its queries at the engine's words:
    no bridge thread, no torch ops on a second counter."""
    engine = steps._engine
    counter.record_cache = lambda: engine.record_cache_on_stream(stream())
    counter.record_aux = lambda: engine.record_aux_on_stream(stream())
    counter.query_ready_cache_step = lambda: steps.value(Steps.CACHE)
    counter.query_ready_aux_step = lambda: steps.value(Steps.AUX)


def _cuda_usable():
    try:
        if not gpu.cuda_info().found:
            return False
        import torch  # noqa: PLC0415
        return bool(torch.cuda.is_available())
    except ImportError:
        return False


class _CounterBridge(threading.Thread):
    """Mirror a foreign counter (anything with query_ready_cache_step and
    query_ready_aux_step, e.g. TokenSpeed's GPU StepCounter reading pinned
    words) into the engine: each step it moved becomes one record. Counts
    from the counter's value at registration."""

    def __init__(self, counter, steps):
        super().__init__(name="layercake-step-bridge", daemon=True)
        self.counter, self.steps = counter, steps
        self.cache = int(counter.query_ready_cache_step())
        self.aux = int(counter.query_ready_aux_step())
        self.stop_event = threading.Event()

    def run(self):
        pause = 20e-6
        mod = _ffi.STEP_MOD
        while not self.stop_event.is_set():
            try:
                c = int(self.counter.query_ready_cache_step())
                a = int(self.counter.query_ready_aux_step())
                dc, da = (c - self.cache) % mod, (a - self.aux) % mod
                for _ in range(dc):
                    self.steps.record_cache()
                for _ in range(da):
                    self.steps.record_aux()
            except LayercakeError:
                return  # the engine closed
            self.cache, self.aux = c, a
            pause = 20e-6 if dc or da else min(pause * 2, 1e-3)
            time.sleep(pause)

    def stop(self):
        self.stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(2)


# ---- layouts from KVArgs ---------------------------------------------------------

def layout_from_kv_args(args, buffer_kinds=None):
    """The Layout of a TokenSpeed KVArgs (duck-typed): kv_data_ptrs,
    kv_data_lens, kv_item_lens, offsets (buffer indices per KV layer, target
    layers then draft layers), target_layer_num, kv_layer_ids (optional global
    layer ids), and optionally state_data_ptrs/_lens/_item_lens with
    state_layer_ids. Buffer kinds default to K,V for two buffers a layer,
    LATENT for one, QUANT for three; pass buffer_kinds to override (P and D
    must agree: the kind is part of the geometry fingerprint)."""
    ptrs, lens, items = list(args.kv_data_ptrs), list(args.kv_data_lens), list(args.kv_item_lens)
    offsets = [list(o) for o in args.offsets]
    target = getattr(args, "target_layer_num", None)
    target = len(offsets) if target is None else int(target)
    layer_ids = list(getattr(args, "kv_layer_ids", None) or [])
    if layer_ids and len(layer_ids) < len(offsets):
        # Draft layers get the ids after every target KV and state layer.
        state_ids = list(getattr(args, "state_layer_ids", None) or [])
        nxt = max(layer_ids + state_ids) + 1
        layer_ids += list(range(nxt, nxt + len(offsets) - len(layer_ids)))
    default_kinds = {1: [BufferKind.LATENT], 2: [BufferKind.K, BufferKind.V], 3: [BufferKind.QUANT] * 3}
    meta = {}
    for k, offs in enumerate(offsets):
        kinds = default_kinds.get(len(offs), [BufferKind.OTHER] * len(offs))
        for j, b in enumerate(offs):
            kind = buffer_kinds[b] if buffer_kinds is not None else kinds[j]
            meta[b] = (layer_ids[k] if layer_ids else k, kind, 1 if k >= target else 0)
    bufs = []
    for b in range(len(ptrs)):
        if b not in meta:
            raise ValueError(f"buffer {b} belongs to no layer in offsets")
        layer, kind, flags = meta[b]
        bufs.append(Buffer(int(ptrs[b]), int(lens[b]), int(items[b]), layer, kind, flags))
    sptrs = list(getattr(args, "state_data_ptrs", None) or [])
    if sptrs:
        sids = list(args.state_layer_ids)
        for b, p in enumerate(sptrs):
            bufs.append(Buffer(int(p), int(args.state_data_lens[b]), int(args.state_item_lens[b]),
                               int(sids[b]), BufferKind.STATE, 0))
    return Layout(bufs)


def detect_kinds(ranges):
    """[(address, length, kind, device)] of each range as CUDA sees its
    first byte (gpu.PTR_*: "host" when CUDA is absent or does not know it)."""
    out = []
    for a, n in ranges:
        kind, dev = gpu.PTR_HOST, -1
        try:
            kind, dev = gpu.pointer_kind(int(a))
        except LayercakeError:
            pass  # no CUDA: host memory is all there is
        out.append((int(a), int(n), kind, dev))
    return out


# How a range CUDA describes is registered: (lc_mem_kind_t, whether the
# ordinal goes with it). Managed memory is device memory to the CPU's
# safety: it is staged like device memory.
_MEM_OF_PTR = {gpu.PTR_HOST: (MEM_HOST, False), gpu.PTR_PINNED: (MEM_PINNED, False),
               gpu.PTR_DEVICE: (MEM_CUDA, True), gpu.PTR_MANAGED: (MEM_CUDA, True)}


def _register_ranges(ctx, ranges):
    """Register merged ranges, [(addr, len, ptr kind, device)] as
    detect_kinds gives them (ranges of one kind and device merge);
    returns the Regions, each registered with its memory kind."""
    merged = []
    for a, n, k, d in sorted((int(a), int(n), k, d) for a, n, k, d in ranges if n):
        if merged and (k, d) == merged[-1][2:] and a <= merged[-1][0] + merged[-1][1]:
            end = max(merged[-1][0] + merged[-1][1], a + n)
            merged[-1][1] = end - merged[-1][0]
        else:
            merged.append([a, n, k, d])
    out = []
    for a, n, k, d in merged:
        kind, with_dev = _MEM_OF_PTR.get(k, (MEM_HOST, False))
        out.append(ctx.register(RawMemory(a, n), kind, d if with_dev else 0))
    return out


def _buffer_ranges(args):
    out = list(zip(args.kv_data_ptrs, args.kv_data_lens))
    out += list(zip(getattr(args, "state_data_ptrs", None) or [], getattr(args, "state_data_lens", None) or []))
    return out


# ---- metadata (first token, draft candidates) ----------------------------------

_META_MAGIC = b"LCT1"


def encode_metadata(bootstrap_token, spec_candidate_ids=None):
    ids = [] if spec_candidate_ids is None else [int(x) for x in
                                                  (spec_candidate_ids.tolist() if hasattr(spec_candidate_ids, "tolist")
                                                   else spec_candidate_ids)]
    return _META_MAGIC + struct.pack(f"<qI{len(ids)}i", int(bootstrap_token), len(ids), *ids)


def decode_metadata(blob):
    """(bootstrap_token, spec_candidate_ids as an int32 numpy array or list)."""
    if len(blob) < 16 or blob[:4] != _META_MAGIC:
        raise ValueError("metadata not written by set_prefill_metadata")
    token, n = struct.unpack_from("<qI", blob, 4)
    if len(blob) != 16 + 4 * n:
        raise ValueError("metadata length does not match its count")
    ids = struct.unpack_from(f"<{n}i", blob, 16)
    return token, (_np.array(ids, dtype=_np.int32) if _np is not None else list(ids))


class _StatusView(Mapping):
    """request_status as the seed's code reads it: room -> TransferPoll."""

    def __init__(self, mgr):
        self._mgr = mgr

    def __getitem__(self, room):
        return self._mgr.check_status(room)

    def __contains__(self, room):
        return room in self._mgr._rooms

    def __iter__(self):
        return iter(list(self._mgr._rooms))

    def __len__(self):
        return len(self._mgr._rooms)


class _ManagerBase:
    """What both sides share: the status map with the seed's rules."""

    def __init__(self):
        self._rooms = {}  # room -> Sender or Receiver
        self.failure_records = {}
        self.failure_lock = threading.Lock()
        self.request_status = _StatusView(self)

    def record_failure(self, bootstrap_room, failure_reason):
        """As the seed: remember why; the status is set by update_status."""
        with self.failure_lock:
            self.failure_records[bootstrap_room] = failure_reason

    def check_status(self, bootstrap_room):
        """TransferPoll of a known room; KeyError for an unknown one (the
        seed reads a dict). A room's failure reason lands in failure_records."""
        h = self._rooms[bootstrap_room]
        info = h.poll()
        if info.status == RoomStatus.FAILED and info.reason:
            with self.failure_lock:
                self.failure_records.setdefault(bootstrap_room, info.reason)
        return TransferPoll(int(info.status))

    def update_status(self, bootstrap_room, status):
        """The seed's rules: monotonic, Failed sticky. Failed cancels the
        room (with failure_records' text). Lower or equal values are no-ops;
        progress beyond the room's actual status is decided by layercake and
        raises ValueError."""
        status = TransferPoll(int(status))
        h = self._rooms.get(bootstrap_room)
        if h is None:
            h = self._open_for_update(bootstrap_room, status)
            if h is None:
                return
        cur = TransferPoll(int(h.poll().status))
        if status == TransferPoll.Failed:
            if cur not in (TransferPoll.Failed, TransferPoll.Success):
                self._cancel(h, self.failure_records.get(bootstrap_room, "update_status(Failed)"))
            return
        if cur == TransferPoll.Failed or status <= cur:
            return
        raise ValueError(f"room {bootstrap_room}: {cur.name} -> {status.name} is decided by layercake")

    def _release(self, room):
        h = self._rooms.pop(room, None)
        if h is not None:
            h.close()
        with self.failure_lock:
            self.failure_records.pop(room, None)

    def release(self, bootstrap_room):
        """Forget a room (the seed's sender/receiver clear()); an unfinished
        room is cancelled first."""
        self._release(bootstrap_room)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- prefill ---------------------------------------------------------------------

class LayercakeKVManager(_ManagerBase):
    """P manager with the seed's surface. Arguments as the seed's:
    (args: KVArgs, disaggregation_mode, server_args, is_mla_backend,
    draft_is_mla_backend); keywords override what is read from them:

      bootstrap     "host:port" of the bootstrap server (else
                    127.0.0.1:server_args.disaggregation_bootstrap_port)
      world_size, dp_size, engine_rank   (else from args / server_args)
      layout        a layercake.Layout (else built from args' buffers)
      ctx           a layercake.Context (else one is created and owned)
      host          address to bind (None: every address; D is told the one on
                    its route, docs/deployment.md)
      config        dict of layercake knobs (e.g. {"metadata_timeout_ms": 5000})

    The layerwise interval comes from server_args.disaggregation_layerwise_interval
    (must be positive, as in the seed)."""

    def __init__(self, args=None, disaggregation_mode=DisaggregationMode.PREFILL, server_args=None,
                 is_mla_backend=False, draft_is_mla_backend=False, *, bootstrap=None, world_size=None,
                 dp_size=None, engine_rank=None, layout=None, ctx=None, host=None, name=None,
                 metrics_server=None, config=None, buffer_kinds=None):
        super().__init__()
        if not _mode_is(disaggregation_mode, "prefill"):
            raise RuntimeError("LayercakeKVManager is the prefill manager; use LayercakeKVManagerDecode")
        self.disaggregation_mode = disaggregation_mode
        self.is_mla_backend = is_mla_backend
        interval = getattr(server_args, "disaggregation_layerwise_interval", 1)
        if interval is None or int(interval) <= 0:
            raise ValueError("submit_interval must be positive")
        self.submit_interval = int(interval)
        self._own_ctx = ctx is None
        self.ctx = ctx if ctx is not None else Context(name or "tokenspeed-p")
        self._regions = []
        self.kv_kinds = []
        self._bridge = None
        self.step_counter = None
        self._batch = None  # None, "idle" or "open"
        self._batch_rooms = []
        self.ignored = {"unknown": 0, "failed": 0, "finished": 0, "not_bootstrapped": 0}
        try:
            self.ctx.config_set("layerwise_interval", self.submit_interval)
            for k, v in (config or {}).items():
                self.ctx.config_set(k, v)
            if layout is None:
                layout = layout_from_kv_args(args, buffer_kinds)
                ranges = _buffer_ranges(args)
                self.kv_kinds = detect_kinds(ranges)
                self._regions = _register_ranges(self.ctx, self.kv_kinds)
            self.layout = layout
            if bootstrap is None:
                port = getattr(server_args, "disaggregation_bootstrap_port", None) or \
                    getattr(args, "bootstrap_port", 8998)
                bootstrap = f"127.0.0.1:{port}"
            world = world_size or getattr(args, "world_size", None) or getattr(server_args, "tp_size", 1)
            dp = dp_size or getattr(args, "dp_size", None) or getattr(server_args, "dp_size", 1) or 1
            rank = engine_rank if engine_rank is not None else getattr(args, "engine_rank", 0)
            self.prefill = Prefill(self.ctx, layout, bootstrap, host=host, name=name,
                                   world_size=world, dp_size=dp, engine_rank=rank,
                                   metrics_server=metrics_server)
            self.engine = self.prefill.engine
            self.layer_num = layout.layer_count
        except BaseException:
            self.close()
            raise

    # --- the seed's surface ---

    def register_step_counter(self, step_counter, on_stream=None, stream=None):
        """Bind the counter the forward records into. A layercake
        tokenspeed.StepCounter or CudaStepCounter (or None: one is made)
        records straight into the engine. Any other object with
        query_ready_cache_step() and query_ready_aux_step() (TokenSpeed's GPU
        StepCounter) is, with on_stream (None: when CUDA and torch.cuda are
        usable), mapped onto the engine's stream records: its record_cache
        and record_aux enqueue lc_engine_record_*_on_stream on
        `stream()` (default: torch's current stream); otherwise mirrored by
        a bridge thread that turns each step it moves into a record."""
        if self._bridge is not None:
            self._bridge.stop()
            self._bridge = None
        if step_counter is None:
            step_counter = StepCounter()
        if isinstance(step_counter, StepCounter):
            step_counter._bind(self.engine.steps)
        elif (hasattr(step_counter, "record_cache") and hasattr(step_counter, "record_aux")
              and (on_stream if on_stream is not None else _cuda_usable())):
            _map_onto_stream(step_counter, self.engine.steps, stream or _torch_current_stream)
        elif hasattr(step_counter, "query_ready_cache_step") and hasattr(step_counter, "query_ready_aux_step"):
            self._bridge = _CounterBridge(step_counter, self.engine.steps)
            self._bridge.start()
        else:
            raise TypeError("step_counter: need a layercake.tokenspeed.StepCounter or an object with "
                            "query_ready_cache_step() and query_ready_aux_step()")
        self.step_counter = step_counter
        return step_counter

    @contextmanager
    def add_batch(self, is_idle):
        """One forward of P. Chunks added inside are stamped with this
        batch's steps; on exit a non-idle batch reserves (layer_num, 1) steps
        even when empty. Must close before the forward records any step.
        If the body raises, the batch still ends (its steps stay reserved:
        the forward's records must still happen, e.g.
        step_counter.record_batch()), the rooms that got a chunk in it fail
        with the exception's text, and the exception propagates."""
        if self._batch is not None:
            raise LayercakeError(LC_ERR_STATE, "add_batch inside an open batch")
        self.engine.batch_begin(bool(is_idle))
        self._batch = "idle" if is_idle else "open"
        self._batch_rooms = []
        try:
            yield
        except BaseException as exc:
            for room in dict.fromkeys(self._batch_rooms):
                self.record_failure(room, f"batch aborted: {exc!r}")
                self.update_status(room, TransferPoll.Failed)
            raise
        finally:
            self._batch = None
            self._batch_rooms = []
            self.engine.batch_end()

    def add_transfer_request(self, bootstrap_room, kv_indices, index_slice, is_last, aux_index=None,
                             mla_l1_5_args=None, state_indices=None):
        """One chunk of a room: P page ids `kv_indices` (int64, passed to C
        without a copy), `index_slice` into D's page list. Gating as the
        seed's; see the module doc. Returns True if the chunk was queued,
        False if it was ignored (the seed returns None either way)."""
        if is_last and aux_index is None:
            raise ValueError("aux_index must be set for the last transfer chunk.")
        if self._batch == "idle":
            raise LayercakeError(LC_ERR_STATE, "add_transfer_request inside an idle batch "
                                 "(the seed drops such chunks silently)")
        sender = self._rooms.get(bootstrap_room)
        if sender is None:
            self.ignored["unknown"] += 1
            logger.debug("room %s unknown: chunk ignored", bootstrap_room)
            return False
        status = sender.status
        if status != RoomStatus.BOOTSTRAPPED and status != RoomStatus.TRANSFERRING:
            key = {RoomStatus.FAILED: "failed", RoomStatus.SUCCESS: "finished"}.get(status, "not_bootstrapped")
            self.ignored[key] += 1
            logger.debug("room %s is %s: chunk ignored", bootstrap_room, status.name)
            return False
        if isinstance(index_slice, slice):
            start = index_slice.start or 0
        else:
            start = int(index_slice)
        pages = kv_indices
        if isinstance(index_slice, slice) and index_slice.stop is not None:
            n = max(0, min(len(kv_indices), index_slice.stop - start))
            if n != len(kv_indices):
                pages = kv_indices[:n]
        src_mask = src_local = None
        if mla_l1_5_args is not None:
            if isinstance(mla_l1_5_args, tuple):
                src_mask, src_local = mla_l1_5_args
            else:
                src_mask = mla_l1_5_args.page_transfer_mask
                src_local = mla_l1_5_args.page_local_indices
        try:
            self.engine.add_chunk(bootstrap_room, pages, start, is_last, state_slots=state_indices,
                                  src_mask=src_mask, src_local=src_local)
        except LayercakeError as e:
            if e.code == LC_ERR_STATE and sender.status == RoomStatus.FAILED:
                self.ignored["failed"] += 1  # failed meanwhile, as the seed's worker would
                return False
            raise
        if self._batch is not None:
            self._batch_rooms.append(bootstrap_room)
        return True

    # --- TokenSpeed's live-path extras ---

    def add_room(self, bootstrap_room):
        """Open a room (what the seed's sender constructor does with
        update_status(room, Bootstrapping)); returns its layercake Sender."""
        if bootstrap_room not in self._rooms:
            self._rooms[bootstrap_room] = self.prefill.sender(bootstrap_room)
        return self._rooms[bootstrap_room]

    def _open_for_update(self, room, status):
        self.add_room(room)
        return self._rooms[room]

    def _cancel(self, sender, reason):
        try:
            sender.abort(str(reason))
        except LayercakeError as e:
            if e.code != LC_ERR_STATE:  # finished meanwhile: nothing to cancel
                raise

    def set_prefill_metadata(self, bootstrap_room, bootstrap_token, spec_candidate_ids=None):
        """The first sampled token and draft candidates, delivered to D with
        Success (pop_prefill_metadata there). A last chunk's room succeeds
        only once this is set (else it fails at metadata_timeout_ms).
        Returns False for an unknown or finished room."""
        sender = self._rooms.get(bootstrap_room)
        if sender is None:
            return False
        try:
            sender.set_metadata(encode_metadata(bootstrap_token, spec_candidate_ids))
        except LayercakeError as e:
            if e.code in (LC_ENOENT, LC_ERR_STATE):  # the room already ended
                return False
            raise
        return True

    def abort_room(self, bootstrap_room, reason="aborted"):
        self.record_failure(bootstrap_room, reason)
        if bootstrap_room in self._rooms:
            self.update_status(bootstrap_room, TransferPoll.Failed)

    def get_decode_prefix_len(self, bootstrap_room):
        """D's decode prefix length (tokens) once its transfer info came, else None."""
        s = self._rooms.get(bootstrap_room)
        return None if s is None else s.prefix_len

    def metrics(self):
        return self.engine.metrics()

    def close(self):
        if self._bridge is not None:
            self._bridge.stop()
            self._bridge = None
        for room in list(self._rooms):
            self._release(room)
        if getattr(self, "prefill", None) is not None:
            self.prefill.close()
        for r in self._regions:
            r.close()
        if self._own_ctx:
            self.ctx.close()


class LayercakeKVSender:
    """The seed's per-request sender (MooncakeKVSender) over the manager:
    constructing it opens the room (update_status(room, Bootstrapping))."""

    def __init__(self, mgr, bootstrap_addr=None, bootstrap_room=None, *args, **kwargs):
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        mgr.update_status(bootstrap_room, TransferPoll.Bootstrapping)

    def poll(self):
        return self.kv_mgr.check_status(self.bootstrap_room)

    def failure_exception(self):
        reason = self.kv_mgr.failure_records.get(self.bootstrap_room, "Failed due to an unknown reason")
        raise RuntimeError(reason)

    def abort(self, reason="aborted"):
        self.kv_mgr.abort_room(self.bootstrap_room, reason)

    def clear(self):
        self.kv_mgr.release(self.bootstrap_room)


# ---- decode ----------------------------------------------------------------------

class LayercakeKVManagerDecode(_ManagerBase):
    """D manager: the decode-side counterpart. Arguments as the P manager's,
    plus listen_url (data plane, "tcp://0.0.0.0:0": every address, each P
    told the one on its route; or "shm://auto"),
    tp_size/tp_rank (D ranks per dp group) and session."""

    def __init__(self, args=None, disaggregation_mode=DisaggregationMode.DECODE, server_args=None,
                 is_mla_backend=False, draft_is_mla_backend=False, *, layout=None, regions=None,
                 ctx=None, listen_url="tcp://0.0.0.0:0", host=None, tp_size=1, tp_rank=0,
                 session=None, config=None, buffer_kinds=None):
        super().__init__()
        if not _mode_is(disaggregation_mode, "decode"):
            raise RuntimeError("LayercakeKVManagerDecode is the decode manager; use LayercakeKVManager")
        self.disaggregation_mode = disaggregation_mode
        self._own_ctx = ctx is None
        self.ctx = ctx if ctx is not None else Context("tokenspeed-d")
        self._regions = []
        self.decode = None
        try:
            for k, v in (config or {}).items():
                self.ctx.config_set(k, v)
            if layout is None:
                layout = layout_from_kv_args(args, buffer_kinds)
            if regions is None:
                self.kv_kinds = detect_kinds(_buffer_ranges(args))
                regions = self._regions = _register_ranges(self.ctx, self.kv_kinds)
            self.layout = layout
            self.bootstrap_port = getattr(server_args, "disaggregation_bootstrap_port", None)
            self.decode = Decode(self.ctx, layout, regions, listen_url=listen_url, host=host,
                                 session=session, tp_size=tp_size, tp_rank=tp_rank)
        except BaseException:
            self.close()
            raise

    def add_receiver(self, bootstrap_room, bootstrap_addr=None):
        """Start receiving a room from the P whose bootstrap server is at
        bootstrap_addr ("host:port"); Bootstrapping, then Bootstrapped."""
        if bootstrap_room not in self._rooms:
            if bootstrap_addr is None and self.bootstrap_port:
                bootstrap_addr = f"127.0.0.1:{self.bootstrap_port}"
            self._rooms[bootstrap_room] = self.decode.receiver(bootstrap_addr, bootstrap_room)
        return self._rooms[bootstrap_room]

    def _open_for_update(self, room, status):
        if status == TransferPoll.Failed:  # the seed creates an entry; we only record why
            return None
        raise KeyError(f"room {room} unknown: open it with add_receiver(room, bootstrap_addr)")

    def _cancel(self, receiver, reason):
        try:
            receiver.cancel(str(reason))
        except LayercakeError as e:
            if e.code != LC_ERR_STATE:
                raise

    def send_pages(self, bootstrap_room, kv_indices, aux_index=None, decode_prefix_len=0,
                   mamba_indices=None):
        """D's pages for the room (after its prefix hit; int64, no copy).
        Raises LC_ERR_STATE before Bootstrapped."""
        self._rooms[bootstrap_room].send(kv_indices, prefix_len=decode_prefix_len,
                                         aux_index=-1 if aux_index is None else aux_index,
                                         state_slots=mamba_indices)

    def layers_ready(self, bootstrap_room):
        """Leading layers landed (decode layer k once k < this)."""
        return self._rooms[bootstrap_room].layers_ready

    def pop_prefill_metadata(self, bootstrap_room):
        """(bootstrap_token, spec_candidate_ids) P set with
        set_prefill_metadata; (-1, None) before Success or without metadata."""
        r = self._rooms.get(bootstrap_room)
        if r is None or r.status != RoomStatus.SUCCESS:
            return -1, None
        blob = r.metadata()
        if not blob:
            return -1, None
        return decode_metadata(blob)

    def close(self):
        for room in list(self._rooms):
            self._release(room)
        if self.decode is not None:
            self.decode.close()
        for r in self._regions:
            r.close()
        if self._own_ctx:
            self.ctx.close()


class LayercakeKVReceiver:
    """The seed's per-request receiver (MooncakeKVReceiver) over the D manager."""

    def __init__(self, mgr, bootstrap_addr, bootstrap_room, *args, **kwargs):
        self.kv_mgr, self.bootstrap_room = mgr, bootstrap_room
        mgr.add_receiver(bootstrap_room, bootstrap_addr)

    def init(self, kv_indices, aux_index=None, decode_prefix_len=0, mamba_indices=None):
        self.kv_mgr.send_pages(self.bootstrap_room, kv_indices, aux_index, decode_prefix_len, mamba_indices)

    prefill = init

    def poll(self):
        return self.kv_mgr.check_status(self.bootstrap_room)

    def layers_ready(self):
        return self.kv_mgr.layers_ready(self.bootstrap_room)

    def failure_exception(self):
        reason = self.kv_mgr.failure_records.get(self.bootstrap_room, "Failed due to an unknown reason")
        raise RuntimeError(reason)

    def abort(self, reason="aborted by D"):
        self.kv_mgr.record_failure(self.bootstrap_room, reason)
        self.kv_mgr.update_status(self.bootstrap_room, TransferPoll.Failed)

    def clear(self):
        self.kv_mgr.release(self.bootstrap_room)


def make_kv_manager(args, disaggregation_mode, server_args=None, is_mla_backend=False,
                    draft_is_mla_backend=False, **kwargs):
    """The P or D manager for the mode (the one-class switch for an engine)."""
    cls = LayercakeKVManager if _mode_is(disaggregation_mode, "prefill") else LayercakeKVManagerDecode
    return cls(args, disaggregation_mode, server_args, is_mla_backend, draft_is_mla_backend, **kwargs)
