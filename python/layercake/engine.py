"""The engine layer: layouts (with the model builders), step counters, room
statuses and the P-side engine (batches, chunks, sessions, rooms, metrics).

Page indices: every argument named `pages`, `state_slots`, `src_local`...
takes a C-contiguous numpy int64 array or any buffer-protocol object of
8-byte signed integers (array.array("q"), a memoryview, bytes): its address
is passed to C as is, nothing is copied in Python (the C side copies what it
keeps). A plain Python sequence of ints is also accepted and converted (that
one is a copy). Anything else (int32 arrays, strided views) is refused with
TypeError/ValueError rather than silently copied.
"""
import ctypes
import enum
from collections import namedtuple
from contextlib import contextmanager

from . import _ffi
from . import gpu as _gpu
from .core import Memory, Region, RawMemory, _Handle, _address_of
from .errors import LC_EINVAL, LC_ERR_CLOSED, LC_ERR_STATE, LayercakeError, check

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None

STEP_MOD = _ffi.STEP_MOD


class RoomStatus(enum.IntEnum):
    """lc_room_status_t; the values are TokenSpeed's TransferPoll values."""

    FAILED = 0
    BOOTSTRAPPING = 1
    BOOTSTRAPPED = 2
    WAITING_FOR_INPUT = 3
    TRANSFERRING = 4
    SUCCESS = 5

    @property
    def final(self):
        return self in (RoomStatus.FAILED, RoomStatus.SUCCESS)


class _FailReasonBase(enum.IntEnum):
    @property
    def label(self):
        """The C label text ("transfer", "engine_stopped"): lc_fail_reason_name."""
        return _ffi.lc_fail_reason_name(int(self)).decode()


# lc_fail_reason_t as the loaded library has it (its LC_FAIL_REASONS table):
# members named by the C symbol without LC_FAIL_ (LC_FAIL_STOPPED -> STOPPED).
FailReason = _FailReasonBase("FailReason", [
    (_ffi.lc_fail_reason_symbol(i).decode()[len("LC_FAIL_"):], i)
    for i in range(_ffi.FAIL_REASON_COUNT)
], module=__name__)
FailReason.__doc__ = "lc_fail_reason_t, read from the C library at import."


def _fail_reason(code):
    """FailReason(code), or the plain int for a reason this package cannot name."""
    try:
        return FailReason(code)
    except ValueError:
        return code


class BufferKind(enum.IntEnum):
    K = 0
    V = 1
    LATENT = 2
    QUANT = 3
    INDEX = 4
    STATE = 5
    OTHER = 6


class Model(enum.IntEnum):
    MHA = 0
    MLA = 1
    MLA_PER_TOKEN_HEAD = 2
    DSA = 3


BUFFER_DRAFT = 1

RoomInfo = namedtuple("RoomInfo", "status fail_reason reason dst_count required_dst_count layers_landed")
RoomInfo.__doc__ = "A room's status (RoomStatus), failure reason (FailReason) and progress."

Buffer = namedtuple("Buffer", "base length item_len layer kind flags rows")
Buffer.__new__.__defaults__ = (BufferKind.OTHER, 0, 0)
Buffer.__doc__ = ("One KV buffer of a layout: page i of it is at base + i * item_len; rows: "
                  "tokens per token-major page (0: head-major).")


def room_info(ri):
    """RoomInfo from an _ffi.RoomInfo."""
    return RoomInfo(RoomStatus(ri.status), _fail_reason(ri.fail_reason),
                    ri.reason.decode(errors="replace"), ri.dst_count,
                    ri.required_dst_count, ri.layers_landed)


def status_name(status):
    return _ffi.lc_room_status_name(int(status)).decode()


def step_ready(current, target):
    """True if step `target` is ready given the counter value `current`
    (wraparound-safe modulo STEP_MOD)."""
    return bool(_ffi.lc_step_ready(int(current) % STEP_MOD, int(target) % STEP_MOD))


def tp_fragment(p_tp, p_rank, p_item_len, d_tp, d_rank, d_item_len, unit_len, rows=1):
    """Heterogeneous TP (lc_tp_fragment): what P rank p_rank sends of each
    page of one buffer to D rank d_rank, as a dict (src_offset, dst_offset,
    bytes, dst_item_len, count, src_stride, dst_stride), or None if nothing.
    `unit_len` is the bytes of one KV head of one token; `rows` the tokens
    per page of a token-major page ([page_size, heads, head_dim]: the item
    lengths are rows * heads * unit_len), 1 for head-major pages. A
    token-major fragment is `count` blocks of `bytes`, block i at
    src_offset + i * src_stride of P's page and dst_offset + i * dst_stride
    of D's. LayercakeError if the two geometries cannot be paired."""
    ps = _ffi.TpSide(int(p_tp), int(p_rank), int(p_item_len), int(unit_len), int(rows), 0)
    ds = _ffi.TpSide(int(d_tp), int(d_rank), int(d_item_len), int(unit_len), int(rows), 0)
    f = _ffi.Fragment()
    if not check(_ffi.lc_tp_fragment(ctypes.byref(ps), ctypes.byref(ds), ctypes.byref(f)),
                 "tp_fragment"):
        return None
    return {"src_offset": f.src_offset, "dst_offset": f.dst_offset, "bytes": f.bytes,
            "dst_item_len": f.dst_item_len, "count": max(f.count, 1),
            "src_stride": f.src_stride, "dst_stride": f.dst_stride}


def _with_detail(err, detail):
    """`err` (a LayercakeError) with `detail` appended to its message."""
    err.detail = detail
    err.args = (f"{err.args[0]}: {detail}",)
    return err


# ---- arrays without copies ---------------------------------------------------

_INT64_FORMATS = ("q", "<q", "=q", "l", "<l", "=l")


def int64_pointer(obj, what="pages"):
    """(address, count, keepalive) of an int64 array, without copying it.

    None or an empty sequence gives (None, 0, None). The keepalive must be
    held until the C call returns."""
    if obj is None:
        return None, 0, None
    if _np is not None and isinstance(obj, _np.ndarray):
        if obj.dtype != _np.int64:
            raise TypeError(f"{what}: need int64 indices, got {obj.dtype} (convert explicitly)")
        if obj.ndim != 1 or not obj.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what}: need a 1-D contiguous array")
        n = obj.shape[0]
        return (obj.ctypes.data if n else None), n, obj
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if mv is not None:
        if mv.ndim > 1 or not mv.contiguous:
            raise ValueError(f"{what}: need a 1-D contiguous buffer")
        if mv.itemsize == 8 and mv.format in _INT64_FORMATS:
            n = mv.nbytes // 8
        elif mv.format in ("B", "b", "c") and mv.nbytes % 8 == 0:
            n = mv.nbytes // 8  # raw bytes of little-endian int64
        else:
            raise TypeError(f"{what}: need int64 items, got buffer format {mv.format!r}")
        if n == 0:
            return None, 0, None
        if _np is not None:  # address of a read-only buffer too, no copy
            a = _np.frombuffer(mv, dtype=_np.int64, count=n)
            return a.ctypes.data, n, (a, mv)
        if mv.readonly:  # pragma: no cover - numpy is always there in practice
            raise TypeError(f"{what}: read-only buffers need numpy")
        c = (ctypes.c_int64 * n).from_buffer(mv)
        return ctypes.addressof(c), n, (c, mv)
    if hasattr(obj, "__array_interface__") and _np is not None:
        return int64_pointer(_np.asarray(obj), what)
    seq = list(obj)
    if not seq:
        return None, 0, None
    arr = (ctypes.c_int64 * len(seq))(*[int(x) for x in seq])
    return ctypes.addressof(arr), len(seq), arr


def _u8_pointer(obj, what):
    """(address, count, keepalive) of a byte mask (numpy bool/uint8 or bytes)."""
    if obj is None:
        return None, 0, None
    if _np is not None and isinstance(obj, _np.ndarray):
        if obj.dtype not in (_np.bool_, _np.uint8, _np.int8) or obj.ndim != 1 \
                or not obj.flags["C_CONTIGUOUS"]:
            raise TypeError(f"{what}: need a 1-D contiguous bool or uint8 array")
        return (obj.ctypes.data if obj.size else None), obj.size, obj
    if _np is not None:
        a = _np.frombuffer(memoryview(obj), dtype=_np.uint8) if not isinstance(obj, (list, tuple)) \
            else _np.asarray(obj, dtype=_np.uint8)
        return (a.ctypes.data if a.size else None), a.size, a
    raise TypeError(f"{what}: need numpy")  # pragma: no cover


# ---- layouts -----------------------------------------------------------------

def _base_of(b):
    if b is None:
        return 0
    if isinstance(b, int):
        return b
    if isinstance(b, (Memory, RawMemory, Region)):
        return b.address
    return _address_of(b)[0]


class Layout:
    """The table of KV buffers (lc_layout_t). Build it with Layout(buffers)
    or one of the model builders (mha, mla, mla_per_token_head, dsa, build).
    The library copies a layout wherever it is used, so a Layout may be
    closed or dropped at any time.

    A layout is byte geometry only: per buffer its layer, kind, flags and
    `item_len`, the bytes of one page of that buffer (page_size tokens x
    the buffer's bytes per token; a slot for state buffers). It carries no
    element type: P and D must agree on the dtype themselves (float32 and
    int32 pages of equal size pass the fingerprint check; docs/python.md).

    `page_size` (tokens per page) is optional and stays in Python (it is
    not part of the C layout nor of its fingerprint). When given, a Prefill
    or Decode built on the layout checks prefix lengths against it: D's
    Receiver.send refuses a prefix_len that is not a whole number of pages,
    and P's Sender.prefix_pages says how many leading pages to skip."""

    def __init__(self, buffers=None, _handle=None, page_size=None):
        self._h = _handle  # freed by __del__ even if the check below raises
        if page_size is not None and int(page_size) < 1:
            raise ValueError(f"page_size must be >= 1 token, got {page_size}")
        self.page_size = None if page_size is None else int(page_size)
        if _handle is None:
            bufs = list(buffers or [])
            arr = (_ffi.Buffer * max(len(bufs), 1))()
            for i, b in enumerate(bufs):
                if not isinstance(b, Buffer):
                    b = Buffer(*b) if not isinstance(b, dict) else Buffer(**b)
                arr[i] = _ffi.Buffer(_base_of(b.base), int(b.length), int(b.item_len),
                                     int(b.layer), int(b.kind), int(b.flags), int(b.rows or 0))
            h = ctypes.c_void_p()
            check(_ffi.lc_layout_create(arr, len(bufs), ctypes.byref(h)), "lc_layout_create")
            _handle = h.value
        self._h = _handle

    @classmethod
    def build(cls, model, layers, pages, item_len, bases=None, draft_layers=0, kv_layer_ids=None,
              state_components=0, state_layer_ids=None, state_slots=0, state_item_len=0,
              state_bases=None, page_size=None, rows=0):
        """lc_layout_build. `pages` is the page count of every KV buffer
        (page ids 0 .. pages-1). `item_len` is an int or up to three ints
        (the per-layer components: MHA (K, V), MLA (C,), per_token_head (Q0,
        Q1, Q2), DSA (C, I)), each the bytes of ONE page of ONE buffer: for
        a token-major MHA pool [pages, page_size, kv_heads, head_dim] of K,
        page_size * kv_heads * head_dim * element size. `bases`: one per
        buffer in the pool's order (ints, Memory, numpy arrays, torch
        tensors...: anything ctx.register accepts) or None for a
        geometry-only layout. `page_size`: tokens per page (optional, kept
        in Python; see the class docstring). `rows`: tokens per page of
        token-major KV pages (SGLang's and vLLM's layout: pass page_size),
        0 for head-major pages; heterogeneous TP then moves each page's
        share of heads as one strided write per page. Given `rows` > 1 and
        no `page_size`, page_size is rows."""
        if page_size is not None and int(page_size) < 1:
            raise ValueError(f"page_size must be >= 1 token, got {page_size}")
        if page_size is None and int(rows) > 1:
            page_size = int(rows)
        p = _ffi.LayoutParams()
        p.size = ctypes.sizeof(p)
        p.rows = int(rows)
        p.model, p.layers, p.draft_layers, p.pages = int(model), int(layers), int(draft_layers), int(pages)
        lens = [int(item_len)] if isinstance(item_len, int) else [int(x) for x in item_len]
        if not 1 <= len(lens) <= 3:
            raise ValueError("item_len: one to three sizes")
        for i, v in enumerate(lens):
            p.item_len[i] = v
        keep = []
        if bases is not None:
            b = (ctypes.c_void_p * len(bases))(*[_base_of(x) for x in bases])
            keep.append(b)
            p.bases = ctypes.cast(b, ctypes.POINTER(ctypes.c_void_p))
        if kv_layer_ids is not None:
            ids = (ctypes.c_int32 * len(kv_layer_ids))(*kv_layer_ids)
            keep.append(ids)
            p.kv_layer_ids = ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32))
        if state_components:
            sids = (ctypes.c_int32 * len(state_layer_ids))(*state_layer_ids)
            keep.append(sids)
            p.state_components, p.state_layers = int(state_components), len(state_layer_ids)
            p.state_layer_ids = ctypes.cast(sids, ctypes.POINTER(ctypes.c_int32))
            p.state_slots, p.state_item_len = int(state_slots), int(state_item_len)
            if state_bases is not None:
                sb = (ctypes.c_void_p * len(state_bases))(*[_base_of(x) for x in state_bases])
                keep.append(sb)
                p.state_bases = ctypes.cast(sb, ctypes.POINTER(ctypes.c_void_p))
        h = ctypes.c_void_p()
        check(_ffi.lc_layout_build(ctypes.byref(p), ctypes.byref(h)), "lc_layout_build")
        return cls(_handle=h.value, page_size=page_size)

    @classmethod
    def mha(cls, layers, pages, item_len, v_item_len=None, **kw):
        """K and V per layer: buffers [K_0..K_{L-1}, V_0..V_{L-1}], each of
        `pages` pages. `item_len`: bytes per page per buffer (one page of
        one layer's K: page_size x kv_heads x head_dim x element size);
        `v_item_len` the same for V when it differs. Keywords as build()
        (bases=, page_size=, draft_layers=...)."""
        return cls.build(Model.MHA, layers, pages, (item_len, v_item_len or item_len), **kw)

    @classmethod
    def mla(cls, layers, pages, item_len, **kw):
        """One latent buffer per layer; `item_len` the bytes of one page of
        one layer's latent (page_size x (kv_lora_rank + rope_dim) x element
        size)."""
        return cls.build(Model.MLA, layers, pages, (item_len,), **kw)

    @classmethod
    def mla_per_token_head(cls, layers, pages, item_lens, **kw):
        """Three quantisation sub-buffers per layer, component-major."""
        return cls.build(Model.MLA_PER_TOKEN_HEAD, layers, pages, tuple(item_lens), **kw)

    @classmethod
    def dsa(cls, layers, pages, item_len, index_item_len=None, **kw):
        """MLA plus one index-key buffer per layer."""
        return cls.build(Model.DSA, layers, pages, (item_len, index_item_len or item_len), **kw)

    def _need(self):
        if self._h is None:
            raise LayercakeError(LC_ERR_CLOSED, "Layout")
        return self._h

    def close(self):
        if self._h is not None:
            h, self._h = self._h, None
            _ffi.lc_layout_destroy(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return check(_ffi.lc_layout_buffer_count(self._need()))

    def buffer(self, i):
        b = _ffi.Buffer()
        check(_ffi.lc_layout_buffer(self._need(), int(i), ctypes.byref(b)), "lc_layout_buffer")
        return Buffer(b.base or 0, b.length, b.item_len, b.layer, BufferKind(b.kind), b.flags,
                      b.rows)

    @property
    def buffers(self):
        return [self.buffer(i) for i in range(len(self))]

    @property
    def layer_count(self):
        """Layers (max global layer id + 1): the cache steps a batch reserves."""
        return check(_ffi.lc_layout_layer_count(self._need()))

    def layer_buffers(self, layer):
        cap = 64
        out = (ctypes.c_uint32 * cap)()
        n = check(_ffi.lc_layout_layer_buffers(self._need(), int(layer), out, cap), "layer_buffers")
        if n > cap:
            out = (ctypes.c_uint32 * n)()
            n = check(_ffi.lc_layout_layer_buffers(self._need(), int(layer), out, n))
        return list(out[:n])

    @property
    def fingerprint(self):
        return _ffi.lc_layout_fingerprint(self._need())


# ---- steps ---------------------------------------------------------------------

class Steps:
    """The step counters of an engine (producer side).

    A CPU producer calls record_cache() once per layer of a forward, in
    order, and record_aux() once per non-idle batch after its metadata is
    written (record_batch() does both for a batch whose forward did not
    run). cache_address/aux_address are the counter words for an outside
    producer (a GPU) that writes absolute values modulo STEP_MOD."""

    CACHE, AUX = 0, 1

    def __init__(self, engine):
        self._engine = engine

    @property
    def layer_count(self):
        return self._engine.layer_count

    # A record no ended batch reserved raises LC_ERR_STATE and changes no
    # step (counted in metrics().records_refused): open a batch for every
    # forward that records, an empty one where the forward has no room.
    _REFUSED = ("refused, the counter did not move: no ended non-idle batch reserved this "
                "step (batch_end() must precede a forward's first record; an idle batch "
                "reserves nothing), or a CUDA stream records this engine")

    def _record(self, fn, where):
        rc = fn(self._engine._need())
        check(rc, f"{where}: {self._REFUSED}" if rc == LC_ERR_STATE else where)

    def record_cache(self):
        self._record(_ffi.lc_engine_record_cache, "record_cache")

    def record_aux(self):
        self._record(_ffi.lc_engine_record_aux, "record_aux")

    def record_batch(self):
        """Every record of one batch: layer_count cache steps, one aux."""
        for _ in range(self.layer_count):
            self.record_cache()
        self.record_aux()

    def _address(self, which):
        p = ctypes.POINTER(ctypes.c_uint64)()
        check(_ffi.lc_engine_counter(self._engine._need(), which, ctypes.byref(p)), "counter")
        return ctypes.addressof(p.contents)

    @property
    def cache_address(self):
        return self._address(self.CACHE)

    @property
    def aux_address(self):
        return self._address(self.AUX)

    def value(self, which=CACHE):
        """The counter's current value (records so far, modulo STEP_MOD)."""
        return ctypes.c_uint64.from_address(self._address(which)).value

    @staticmethod
    def is_step_ready(current, target):
        return step_ready(current, target)


# ---- engine --------------------------------------------------------------------

class Engine(_Handle):
    """The P-side engine (lc_engine_t): one thread streaming every room's
    layers to its destinations as they become ready.

    Engine(ctx, layout, ...) creates and owns one; Prefill.engine is a view
    of the engine a Prefill owns (closing the view does nothing to it).
    on_status(room, session, status, fail_reason, reason, metadata) and
    on_layers(room, session, layers) run on the engine thread."""

    _free = _ffi.lc_engine_destroy

    def __init__(self, ctx, layout, name="engine", on_status=None, on_layers=None, _view=None):
        super().__init__(ctx)
        self._owned = _view is None
        self._layers = None
        if _view is not None:  # the Prefill destroys it; a view frees nothing
            self._node.free = None
            self._h = _view
            return
        self._name = name.encode()
        p = _ffi.EngineParams()
        p.size = ctypes.sizeof(p)
        p.layout = layout._need()
        p.name = self._name
        self._cbs = []
        if on_status is not None:
            def final_cb(arg, fin):
                f = fin.contents
                data = ctypes.string_at(f.metadata, f.metadata_len) if f.metadata and f.metadata_len else None
                on_status(f.room, (f.session or b"").decode(), RoomStatus(f.status), f.fail_reason,
                          (f.reason_text or b"").decode(errors="replace"), data)
            cb = _ffi.ROOM_FINAL_CB(final_cb)
            self._cbs.append(cb)
            p.final_cb = cb
        if on_layers is not None:
            def landed_cb(arg, room, session, layers):
                on_layers(room, (session or b"").decode(), layers)
            cb2 = _ffi.LAYERS_LANDED_CB(landed_cb)
            self._cbs.append(cb2)
            p.landed_cb = cb2
        h = ctypes.c_void_p()
        check(_ffi.lc_engine_create(ctx._need(), ctypes.byref(p), ctypes.byref(h)), "lc_engine_create")
        self._h = h.value
        self._layers = layout.layer_count

    @property
    def steps(self):
        return Steps(self)

    @property
    def layer_count(self):
        if self._layers is None:
            raise LayercakeError(LC_EINVAL, "layer_count unknown for this engine view")
        return self._layers

    # --- the GPU writes the step counter (docs/gpu.md) ---

    def record_cache_on_stream(self, stream):
        """lc_engine_record_cache_on_stream: enqueue on `stream` (an int
        handle such as torch.cuda.current_stream().cuda_stream, or a
        torch.cuda.Stream) the write of the next cache step, ordered after
        the stream's earlier work. Does not wait for the GPU. After the first
        stream record, CPU records of this engine raise LC_ERR_STATE.
        LayercakeError(LC_ENOTSUP) without CUDA."""
        h = _gpu.stream_handle(stream)
        check(_ffi.lc_engine_record_cache_on_stream(self._need(), ctypes.c_void_p(h)),
              "record_cache_on_stream")

    def record_aux_on_stream(self, stream):
        """As record_cache_on_stream, for the aux step (once per non-idle
        batch, after its metadata is written on that stream)."""
        h = _gpu.stream_handle(stream)
        check(_ffi.lc_engine_record_aux_on_stream(self._need(), ctypes.c_void_p(h)),
              "record_aux_on_stream")

    # --- batches (the seed's add_batch(is_idle)) ---

    def batch_begin(self, is_idle=False):
        check(_ffi.lc_engine_batch_begin(self._need(), 1 if is_idle else 0), "batch_begin")
        self._owner()._batch_idle = bool(is_idle)

    def batch_end(self):
        self._owner()._batch_idle = False
        check(_ffi.lc_engine_batch_end(self._need()), "batch_end")

    @contextmanager
    def batch(self, is_idle=False):
        """Chunks added inside are stamped with this batch's steps. The batch
        is ended even when the body raises (the C API has no abort): the
        forward's records must then still happen (Steps.record_batch)."""
        self.batch_begin(is_idle)
        try:
            yield self
        finally:
            self.batch_end()

    def add_chunk(self, room, pages, dst_index=0, is_last=False, state_slots=None, src_mask=None,
                  src_local=None, page_tokens=0):
        """Queue one chunk of a room's KV (lc_engine_chunk_add).

        pages: P's page ids holding this chunk's tokens (passed without a
            copy). Page i of the chunk goes to D's page dst_pages[dst_index
            + i] in every buffer of every layer.
        dst_index: where this chunk starts in D's page list for the room,
            the list D passed to Receiver.send. That list starts AFTER D's
            prefix: with prefix reuse, P skips its first
            sender.prefix_pages pages and the first page it sends has
            dst_index 0. A chunked prefill adds chunk k at the sum of the
            page counts of chunks 0..k-1.
        is_last: this chunk ends the room's KV: it carries the state slots,
            and the room succeeds once its pages have landed AND the
            metadata is set (Sender.set_metadata), else it fails at
            metadata_timeout_ms. Exactly one chunk per room has is_last.

        page_tokens: 0, or tokens per page: then dst_index counts the
            request's pages from its first token (D's prefix included), and
            the engine leaves out, per destination, the pages below D's
            prefix once D's transfer info is in. What a chunk added before
            that must use when D may hold a prefix.

        P need not wait for D: a chunk for a room still BOOTSTRAPPING is
        held by the engine (with its batch's steps) and goes out when D's
        transfer info arrives, the layers recorded meanwhile at once; if the
        room fails first (bootstrap_timeout_ms, abort) it is dropped. Held
        chunks are capped (knobs p_room_held_chunks_max, p_held_pages_max):
        past them this raises LayercakeError LC_ENOSPC. After the room
        ended, or inside an idle batch, this raises LayercakeError
        LC_ERR_STATE with a message saying which. Inside a non-idle batch
        the chunk waits for its layers' steps; outside any batch its layers
        are sent at once. Returns 0."""
        c = _ffi.Chunk()
        c.size = ctypes.sizeof(c)
        c.room = int(room)
        c.pages, c.page_count, k1 = int64_pointer(pages, "pages")
        c.dst_index = int(dst_index)
        c.is_last = 1 if is_last else 0
        c.page_tokens = int(page_tokens)
        c.state_slots, c.state_slot_count, k2 = int64_pointer(state_slots, "state_slots")
        c.src_mask, nmask, k3 = _u8_pointer(src_mask, "src_mask")
        c.src_local, c.src_local_count, k4 = int64_pointer(src_local, "src_local")
        if src_mask is not None and nmask != c.page_count:
            raise ValueError("src_mask must have one entry per page")
        rc = _ffi.lc_engine_chunk_add(self._need(), ctypes.byref(c))
        del k1, k2, k3, k4
        # LC_ERR_STATE's and LC_ENOSPC's causes (an idle batch, a room
        # ended or failed; the held cap reached) are the library's, in
        # LayercakeError.reason.
        return check(rc, f"chunk for room {room}")

    def _owner(self):
        """The object that outlives views: the Prefill of a view, else self."""
        return self if self._owned else self._parent

    # --- sessions ---

    def session_add(self, name, url, region_descs, token=None, buffer_region=None, buffer_offset=None,
                    fragments=None):
        """Register D session `name`. fragments (heterogeneous TP): a dict
        {buffer index: tp_fragment(...) result}; only those buffers go to
        this session, each as that byte range of every page."""
        descs = [bytes(d) for d in region_descs]
        n = len(descs)
        p = _ffi.SessionParams()
        p.size = ctypes.sizeof(p)
        p.name, p.url = name.encode(), url.encode()
        if token is not None:
            p.token.bytes[:] = list(token)
            p.has_token = 1
        bufs = [ctypes.create_string_buffer(d, len(d)) for d in descs]
        ptrs = (ctypes.c_void_p * n)(*[ctypes.addressof(b) for b in bufs])
        lens = (ctypes.c_size_t * n)(*[len(d) for d in descs])
        p.region_descs = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
        p.region_desc_lens = ctypes.cast(lens, ctypes.POINTER(ctypes.c_size_t))
        p.region_count = n
        if buffer_region is not None:
            br = (ctypes.c_uint32 * len(buffer_region))(*buffer_region)
            p.buffer_region = ctypes.cast(br, ctypes.POINTER(ctypes.c_uint32))
        if buffer_offset is not None:
            bo = (ctypes.c_uint64 * len(buffer_offset))(*buffer_offset)
            p.buffer_offset = ctypes.cast(bo, ctypes.POINTER(ctypes.c_uint64))
        if fragments:
            fr = (_ffi.Fragment * len(fragments))()
            for i, (b, f) in enumerate(sorted(fragments.items())):
                fr[i] = _ffi.Fragment(int(b), 0, f["src_offset"], f["dst_offset"], f["bytes"],
                                      f["dst_item_len"], int(f.get("count", 1)), 0,
                                      int(f.get("src_stride", 0)), int(f.get("dst_stride", 0)))
            p.fragments = ctypes.cast(fr, ctypes.POINTER(_ffi.Fragment))
            p.fragment_count = len(fragments)
        check(_ffi.lc_engine_session_add(self._need(), ctypes.byref(p)), f"session {name}")

    def session_remove(self, name):
        check(_ffi.lc_engine_session_remove(self._need(), name.encode()), f"session {name}")

    def session_blocked(self, name):
        """(blocked, failures)."""
        n = ctypes.c_uint64()
        rc = check(_ffi.lc_engine_session_blocked(self._need(), name.encode(), ctypes.byref(n)),
                   f"session {name}")
        return bool(rc), n.value

    # --- rooms ---

    def room_open(self, room):
        check(_ffi.lc_engine_room_open(self._need(), int(room)), f"room {room}")

    def room_dst_add(self, room, session=None, pages=None, prefix_len=0, aux_index=-1,
                     required_dst_count=1, dummy=False, state_slots=None, dst_mask=None,
                     dst_local=None):
        d = _ffi.DstParams()
        d.size = ctypes.sizeof(d)
        d.session = session.encode() if session else None
        d.pages, d.page_count, k1 = int64_pointer(pages, "pages")
        d.prefix_len, d.aux_index = int(prefix_len), int(aux_index)
        d.required_dst_count, d.is_dummy = int(required_dst_count), 1 if dummy else 0
        d.state_slots, d.state_slot_count, k2 = int64_pointer(state_slots, "state_slots")
        d.dst_mask, _, k3 = _u8_pointer(dst_mask, "dst_mask")
        d.dst_local, d.dst_local_count, k4 = int64_pointer(dst_local, "dst_local")
        rc = _ffi.lc_engine_room_dst_add(self._need(), int(room), ctypes.byref(d))
        del k1, k2, k3, k4
        check(rc, f"room {room} destination")

    def room_metadata_set(self, room, data):
        data = bytes(data)
        check(_ffi.lc_engine_room_metadata_set(self._need(), int(room), data, len(data)),
              f"room {room} metadata")

    def room_cancel(self, room, reason="cancelled"):
        check(_ffi.lc_engine_room_cancel(self._need(), int(room), reason.encode()), f"room {room}")

    def room_status(self, room):
        """RoomInfo; reading a final status removes the room (lc_engine_room_status)."""
        ri = _ffi.RoomInfo()
        ri.size = ctypes.sizeof(ri)
        check(_ffi.lc_engine_room_status(self._need(), int(room), ctypes.byref(ri)), f"room {room}")
        return room_info(ri)

    def room_close(self, room):
        check(_ffi.lc_engine_room_close(self._need(), int(room)), f"room {room}")

    def metrics(self):
        """Counters and gauges (dict); histograms as (count, p50_us, p99_us)."""
        m = _ffi.EngineMetrics()
        m.size = ctypes.sizeof(m)
        check(_ffi.lc_engine_metrics(self._need(), ctypes.byref(m)), "metrics")
        out = {}
        for name, _t in _ffi.EngineMetrics._fields_[1:]:
            v = getattr(m, name)
            if isinstance(v, _ffi.Histogram):
                out[name] = (v.count, _ffi.lc_histogram_quantile_us(ctypes.byref(v), 0.5),
                             _ffi.lc_histogram_quantile_us(ctypes.byref(v), 0.99))
            else:
                out[name] = v
        n = ctypes.c_uint64()
        out["rooms_failed_by_reason"] = by_reason = {}
        for r in FailReason:
            check(_ffi.lc_engine_failed_by_reason(self._need(), int(r), ctypes.byref(n)), "metrics")
            if n.value:
                by_reason[r.label] = n.value
        return out
