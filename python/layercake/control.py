"""The control plane: the bootstrap server, P ranks (Prefill) with one
Sender per room, D ranks (Decode) with one Receiver per room.

Lifetimes follow the header and are enforced here: a Sender closes before
its Prefill, a Receiver before its Decode, a Prefill before the Context it
runs on and before the BootstrapServer that publishes its metrics, a Decode
before its Context and before every Region it receives into. Closing (or
garbage-collecting) any object closes what depends on it first, so objects
may be dropped in any order.

Rooms have no file descriptor in the C API; Sender.wait/Receiver.wait poll
with a growing sleep, and wait_async does the same without blocking an
asyncio loop. (CompletionQueue.fd is the library's pollable descriptor.)
"""
import asyncio
import ctypes
import math
import numbers
import time
import weakref

from . import _convert as _cv
from . import _ffi
from .core import Region, _Handle
from .engine import BufferKind, Engine, Layout, RoomStatus, _with_detail, int64_pointer, room_info
from .errors import LC_EAGAIN, LC_EINVAL, LayercakeError, check

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None



def _need_type(value, types, what, expected):
    """TypeError naming what was expected, rather than an AttributeError
    deep inside (Prefill(ctx, layout, None))."""
    if not isinstance(value, types):
        raise TypeError(f"{what} must be {expected}, not {type(value).__name__}")
    return value


def _pair(pair, what):
    """A pairing value as the C calls take it: None (unpaired), or bytes
    of LC_PAIR_MIN..LC_PAIR_MAX (16..64) bytes. bytes-like objects are
    copied; anything else is a TypeError (a str too: encode it), a length
    out of range a ValueError."""
    if pair is None:
        return None
    if isinstance(pair, str) or not isinstance(pair, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what}: pair must be bytes or None, not {type(pair).__name__} "
                        "(a uuid4's .bytes, or a transfer id's .encode())")
    pair = bytes(pair)
    if not _ffi.PAIR_MIN <= len(pair) <= _ffi.PAIR_MAX:
        raise ValueError(f"{what}: pair of {len(pair)} bytes: give {_ffi.PAIR_MIN}..{_ffi.PAIR_MAX} "
                         "bytes (at least 122 random bits, as a uuid4)")
    return pair


def _str(buf_fn, h, cap=512):
    buf = ctypes.create_string_buffer(cap)
    check(buf_fn(h, buf, cap))
    return buf.value.decode()


def _ms(timeout, what="wait: timeout"):
    """Seconds (None: no deadline) as the C waits' milliseconds (a C int:
    OverflowError past about 24 days, never a wrapped one)."""
    if timeout is None:
        return -1
    if not isinstance(timeout, numbers.Real):
        raise TypeError(f"{what}: need seconds (a number) or None, got {type(timeout).__name__}")
    s = float(timeout)
    if math.isnan(s):
        raise ValueError(f"{what}: NaN seconds")
    if s <= 0:
        return 0
    if s * 1000 > (1 << 31) - 1:
        raise OverflowError(f"{what}: {timeout} s is more than a C int of milliseconds holds "
                            f"({((1 << 31) - 1) / 1000:.0f} s); None waits without a deadline")
    return _cv.c_int(math.ceil(s * 1000), what)


def _until_final(poll, timeout, until, sleep):
    """Poll until the status is final (or >= until); the last RoomInfo.
    sleep(s) is the owner's wait: it returns early when a room of the owner
    changed status, and after at most s when another thread took that wake."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info = poll()
        if info.status.final or (until is not None and info.status >= until):
            return info
        pause = 0.005
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"room still {info.status.name} after {timeout} s")
            pause = min(pause, left)
        sleep(pause)


async def _until_final_async(poll, timeout, until):
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.0005
    while True:
        info = poll()
        if info.status.final or (until is not None and info.status >= until):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"room still {info.status.name} after {timeout} s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.01)


def _shared_secret(value, who):
    """The shared_secret argument as the C call takes it: None (the
    environment's), or bytes of a str or bytes. The library checks its
    length and characters (at least 32 printable characters)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{who}: shared_secret must be a str or bytes, not {type(value).__name__}")
    if not value or b"\0" in value:
        raise ValueError(f"{who}: shared_secret must be non-empty and hold no NUL byte")
    return bytes(value)


class BootstrapServer(_Handle):
    """The bootstrap HTTP server run by P (lc_bootstrap_t).

    BootstrapServer(host=None, port=0): host None binds every address (as C
    and the CLI do; docs/deployment.md); port 0 picks a free one, -1 takes the
    bootstrap_port knob. `addr` is the "host:port" to give ranks: the
    advertise_host knob, the bound host, else this host's primary address.
    shared_secret (str or bytes, at least 32 characters): the deployment's
    one secret (docs/security.md, "One switch"); None takes
    LAYERCAKE_SHARED_SECRET or LAYERCAKE_SHARED_SECRET_FILE, else none."""

    _free = _ffi.lc_bootstrap_stop

    def __init__(self, host=None, port=0, secret=None, ctx=None, shared_secret=None):
        super().__init__(None)
        shared = _shared_secret(shared_secret, "BootstrapServer")
        self._keep = [host.encode() if host else None, secret.encode() if secret else None]
        p = _ffi.BootstrapParams()
        p.size = ctypes.sizeof(p)
        p.host, p.port, p.secret = self._keep[0], _cv.c_int(port, "BootstrapServer: port"), self._keep[1]
        p.shared_secret = shared  # read by lc_bootstrap_start, not kept
        if ctx is not None:
            p.ctx = ctx._need()
            self._depend_on(ctx)
        h = ctypes.c_void_p()
        check(_ffi.lc_bootstrap_start(ctypes.byref(p), ctypes.byref(h)), "lc_bootstrap_start")
        self._h = h.value
        self.port = _ffi.lc_bootstrap_port(self._h)
        self.addr = _str(_ffi.lc_bootstrap_addr, self._h, 128)


class Prefill(_Handle):
    """One P rank (lc_prefill_t): its engine, its control socket, its
    registration with the bootstrap server. Blocks while registering.
    shared_secret: as BootstrapServer's; when set the rank registers with
    the bearer derived from it and its control socket takes only peers that
    hold it (CURVE). engine_id: the engine the rank belongs to (vLLM's),
    shown on the bootstrap server's GET /query for routers."""

    _free = _ffi.lc_prefill_destroy

    def __init__(self, ctx, layout, bootstrap, host=None, name=None, world_size=1, dp_size=1,
                 engine_rank=0, metrics_server=None, bootstrap_secret=None, shared_secret=None,
                 engine_id=None):
        _need_type(layout, Layout, "Prefill: layout", "a layercake.Layout")
        if isinstance(bootstrap, BootstrapServer):
            bootstrap = bootstrap.addr
        _need_type(bootstrap, str, "Prefill: bootstrap",
                   "the bootstrap server's address as 'host:port' (str) or a BootstrapServer")
        _need_type(engine_id, (str, type(None)), "Prefill: engine_id", "a str or None")
        shared = _shared_secret(shared_secret, "Prefill")
        super().__init__(ctx)
        self._keep = [bootstrap.encode(), host.encode() if host else None,
                      name.encode() if name else None,
                      bootstrap_secret.encode() if bootstrap_secret else None,
                      engine_id.encode() if engine_id else None]
        p = _ffi.PrefillParams()
        p.size = ctypes.sizeof(p)
        p.layout = layout._need()
        p.bootstrap, p.host, p.name, p.bootstrap_secret, p.engine_id = self._keep
        p.world_size = _cv.c_int(world_size, "Prefill: world_size")
        p.dp_size = _cv.c_int(dp_size, "Prefill: dp_size")
        p.engine_rank = _cv.c_int(engine_rank, "Prefill: engine_rank")
        p.shared_secret = shared
        if metrics_server is not None:
            p.metrics_server = metrics_server._need()
        h = ctypes.c_void_p()
        check(_ffi.lc_prefill_create(ctx._need(), ctypes.byref(p), ctypes.byref(h)), "lc_prefill_create")
        self._h = h.value
        if metrics_server is not None:
            self._depend_on(metrics_server)
        e = ctypes.c_void_p()
        check(_ffi.lc_prefill_engine(self._h, ctypes.byref(e)))
        self._engine_h = e.value
        self._layer_count = layout.layer_count
        self.page_size = layout.page_size  # tokens per page, if the layout says
        self._senders = weakref.WeakValueDictionary()  # room -> Sender (error messages)
        self._batch_idle = False
        self.endpoint = _str(_ffi.lc_prefill_endpoint, self._h)
        self.engine_rank = p.engine_rank

    @property
    def engine(self):
        """A view of this rank's engine: batches, chunks, steps, metrics."""
        e = Engine(self, None, _view=self._engine_h)
        e._layers = self._layer_count
        return e

    @property
    def steps(self):
        return self.engine.steps

    def counter(self, name):
        v = ctypes.c_uint64()
        check(_ffi.lc_prefill_counter(self._need(), name.encode(), ctypes.byref(v)), f"counter {name}")
        return v.value

    def wait(self, timeout=None):
        """Block until one of this rank's rooms changed status since the last
        call (True) or `timeout` seconds passed (False; None: no deadline).
        Then poll the senders: a change after that wakes the next call.
        Coalesced, sometimes spurious, never lost; one waiting thread at a
        time (lc_prefill_wait)."""
        return bool(check(_ffi.lc_prefill_wait(self._need(), _ms(timeout, "Prefill.wait: timeout")),
                          "lc_prefill_wait"))

    def fileno(self):
        """An fd that polls readable while wait(0) would return True, for
        select() or asyncio's add_reader; do not read or close it."""
        return check(_ffi.lc_prefill_fd(self._need()), "lc_prefill_fd")

    def sender(self, room, pair=None):
        """A Sender for `room`. pair: the request's pairing value (bytes,
        16..64, the same the router gives D's receiver), or None: unpaired.
        A paired sender takes only a D transfer info that carries the same
        value (lc_sender_create_ex)."""
        return Sender(self, room, pair=pair)


class _Room(_Handle):
    """What P's and D's room handles share: poll, status and wait, through
    the C poll function named by _poll."""

    _poll = None

    def poll(self):
        """RoomInfo (non-blocking); a final status stays readable."""
        self._info.size = ctypes.sizeof(self._info)
        check(type(self)._poll(self._need(), ctypes.byref(self._info)), self._poll.__name__)
        return room_info(self._info)

    @property
    def status(self):
        return RoomStatus(check(type(self)._poll(self._need(), None), self._poll.__name__))

    def wait(self, timeout=None, until=None):
        """Block until final (or status >= until); TimeoutError past timeout.
        Sleeps in the owner's wait (Prefill.wait / Decode.wait), so it
        returns as soon as the room changes."""
        return _until_final(self.poll, timeout, until, self._parent.wait)

    async def wait_async(self, timeout=None, until=None):
        return await _until_final_async(self.poll, timeout, until)


class Sender(_Room):
    """P's handle on one room (lc_sender_t). Closing it forgets the room (an
    unfinished room is aborted first)."""

    _free = _ffi.lc_sender_destroy
    _poll = _ffi.lc_sender_poll

    def __init__(self, prefill, room, pair=None):
        room = _cv.u64(room, "sender: room")
        pair = _pair(pair, f"sender {room}")
        super().__init__(prefill)
        self.room = room
        h = ctypes.c_void_p()
        p = _ffi.SenderParams()
        p.size = ctypes.sizeof(p)
        p.room = self.room
        buf = ctypes.create_string_buffer(pair, len(pair)) if pair else None
        p.pair = ctypes.cast(buf, ctypes.c_void_p) if buf else None
        p.pair_len = len(pair) if pair else 0
        check(_ffi.lc_sender_create_ex(prefill._need(), ctypes.byref(p), ctypes.byref(h)),
              f"sender {room}")  # the pairing value is copied
        self._h = h.value
        self._info = _ffi.RoomInfo()
        self._page_size = prefill.page_size
        prefill._senders[self.room] = self

    def set_metadata(self, data):
        """The room's metadata (first token...), delivered to D with Success.
        Once per room (-EEXIST after). Set it before or after the batch's
        aux step record, as long as it is before the last chunk's pages have
        landed plus metadata_timeout_ms: a room whose last chunk was added
        succeeds only once both its pages and its metadata are there."""
        data = bytes(data)
        check(_ffi.lc_sender_metadata_set(self._need(), data, len(data)), "metadata")

    @property
    def prefix_len(self):
        """D's decode prefix length in tokens (the tokens D already holds),
        or None until D's transfer info has arrived (it is known once the
        room is Bootstrapped). P does not send those tokens: it skips its
        first prefix_len / page_size pages (see prefix_pages), and the first
        page it does send has dst_index 0."""
        v = ctypes.c_uint64()
        rc = _ffi.lc_sender_prefix_len(self._need(), ctypes.byref(v))
        if rc == LC_EAGAIN:
            return None
        check(rc, "prefix_len")
        return v.value

    def prefix_pages(self, page_size=None):
        """How many of the request's leading pages P skips: prefix_len /
        page_size, where page_size (tokens per page) is given here or by
        the layout (Layout(..., page_size=)). None until prefix_len is
        known. ValueError if the prefix is not a whole number of pages (D
        asked for a partial page; layercake moves whole pages only) or if
        no page size is known."""
        n = self.prefix_len
        if n is None:
            return None
        ps = page_size if page_size is not None else self._page_size
        if ps is None:
            raise ValueError("prefix_pages: tokens per page unknown: pass page_size= here or to "
                             "the Layout")
        ps = _cv.at_least_one(ps, "prefix_pages: page_size")
        if n % ps:
            raise ValueError(f"room {self.room}: D's prefix_len {n} tokens is not a whole number "
                             f"of {ps}-token pages ({n // ps} pages + {n % ps} tokens)")
        return n // ps

    def abort(self, reason="aborted by P"):
        check(_ffi.lc_sender_cancel(self._need(), reason.encode()), f"abort room {self.room}")


class Decode(_Handle):
    """One D rank (lc_decode_t): data-plane listener, session token, control
    socket and the discovery/deadline threads. `regions` must hold every
    buffer of `layout`; they stay registered while the Decode lives.
    shared_secret: as BootstrapServer's; when set D registers (its token
    included) only with P ranks that prove they hold it (CURVE)."""

    _free = _ffi.lc_decode_destroy

    def __init__(self, ctx, layout, regions, listen_url="tcp://0.0.0.0:0", host=None,
                 session=None, tp_size=1, tp_rank=0, shared_secret=None):
        _need_type(layout, Layout, "Decode: layout", "a layercake.Layout")
        _need_type(listen_url, str, "Decode: listen_url", "a data-plane URL (str), e.g. 'tcp://0.0.0.0:0'")
        shared = _shared_secret(shared_secret, "Decode")
        super().__init__(ctx)
        regions = [regions] if isinstance(regions, Region) else list(regions)
        self._keep = [listen_url.encode(), host.encode() if host else None,
                      session.encode() if session else None]
        arr = (ctypes.c_void_p * len(regions))(*[r._need() for r in regions])
        p = _ffi.DecodeParams()
        p.size = ctypes.sizeof(p)
        p.layout = layout._need()
        p.regions = ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p))
        p.region_count = len(regions)
        p.listen_url, p.host, p.session = self._keep
        p.tp_size, p.tp_rank = _cv.c_int(tp_size, "Decode: tp_size"), _cv.c_int(tp_rank, "Decode: tp_rank")
        p.shared_secret = shared
        h = ctypes.c_void_p()
        check(_ffi.lc_decode_create(ctx._need(), ctypes.byref(p), ctypes.byref(h)), "lc_decode_create")
        self._h = h.value
        for r in regions:  # the C side keeps the region pointers
            self._depend_on(r)
        self.endpoint = _str(_ffi.lc_decode_endpoint, self._h)
        self.page_size = layout.page_size
        # (items, buffer index) of the smallest page buffer and state buffer:
        # the page and slot ids a receiver may grant.
        self._limits = {}
        for i, b in enumerate(layout.buffers):
            key = "slot" if b.kind == BufferKind.STATE else "page"
            items = b.length // b.item_len
            if key not in self._limits or items < self._limits[key][0]:
                self._limits[key] = (items, i)

    def counter(self, name):
        v = ctypes.c_uint64()
        check(_ffi.lc_decode_counter(self._need(), name.encode(), ctypes.byref(v)), f"counter {name}")
        return v.value

    def wait(self, timeout=None):
        """Prefill.wait for D: a receiver's status changed (lc_decode_wait).
        Layers landing do not wake it; poll Receiver.layers_ready."""
        return bool(check(_ffi.lc_decode_wait(self._need(), _ms(timeout, "Decode.wait: timeout")),
                          "lc_decode_wait"))

    def fileno(self):
        """Prefill.fileno for D (lc_decode_fd)."""
        return check(_ffi.lc_decode_fd(self._need()), "lc_decode_fd")

    def receiver(self, bootstrap, room, pair=None):
        """A Receiver for `room` from the P whose bootstrap server is
        `bootstrap`. pair: the request's pairing value (bytes, 16..64, as
        P's sender got it), or None (lc_receiver_create_ex)."""
        return Receiver(self, bootstrap, room, pair=pair)


class Receiver(_Room):
    """D's handle on one room (lc_receiver_t). Closing it cancels an
    unfinished room (grants revoked: the pages may be reused at once)."""

    _free = _ffi.lc_receiver_destroy
    _poll = _ffi.lc_receiver_poll

    def __init__(self, decode, bootstrap, room, pair=None):
        room = _cv.u64(room, "receiver: room")
        pair = _pair(pair, f"receiver {room}")
        super().__init__(decode)
        if isinstance(bootstrap, BootstrapServer):
            bootstrap = bootstrap.addr
        self.room = room
        h = ctypes.c_void_p()
        p = _ffi.ReceiverParams()
        p.size = ctypes.sizeof(p)
        keep = bootstrap.encode() if bootstrap else None
        p.bootstrap, p.room = keep, self.room
        buf = ctypes.create_string_buffer(pair, len(pair)) if pair else None
        p.pair = ctypes.cast(buf, ctypes.c_void_p) if buf else None
        p.pair_len = len(pair) if pair else 0
        check(_ffi.lc_receiver_create_ex(decode._need(), ctypes.byref(p), ctypes.byref(h)),
              f"receiver {room}")  # the address and the pairing value are copied
        self._h = h.value
        self._decode = decode
        self._info = _ffi.RoomInfo()

    def send(self, pages, prefix_len=0, aux_index=-1, state_slots=None):
        """Grant P the room's pages and send it the transfer info.

        pages: D's page ids for the tokens P will send, i.e. AFTER D's
            prefix (no copy in Python). P's chunk with dst_index i lands in
            pages[i]. Each id must be < the pool's page count (ValueError
            naming the page and the limit otherwise, LC_EINVAL).
        prefix_len: tokens D already holds (prefix reuse); P skips
            prefix_len / page_size pages. Must be a whole number of pages
            (ValueError otherwise, when the layout knows its page_size).
        aux_index: D's request slot (informational); state_slots: D's
            state (mamba) slots.

        Raises LC_ERR_STATE before Bootstrapped: wait(until=RoomStatus.
        BOOTSTRAPPED) first. Once per room."""
        prefix_len = _cv.u64(prefix_len, f"send room {self.room}: prefix_len")
        aux_index = _cv.i64(aux_index, f"send room {self.room}: aux_index")
        if prefix_len and self._decode.page_size and prefix_len % self._decode.page_size:
            ps = self._decode.page_size
            raise ValueError(f"room {self.room}: prefix_len {prefix_len} tokens is not a whole "
                             f"number of {ps}-token pages; layercake moves whole pages")
        pg = _ffi.ReceiverPages()
        pg.size = ctypes.sizeof(pg)
        pg.pages, pg.page_count, k1 = int64_pointer(pages, "pages")
        pg.prefix_len, pg.aux_index = prefix_len, aux_index
        pg.state_slots, pg.state_slot_count, k2 = int64_pointer(state_slots, "state_slots")
        self._check_ids(pg.pages, pg.page_count, "page")
        self._check_ids(pg.state_slots, pg.state_slot_count, "slot")
        rc = _ffi.lc_receiver_send(self._need(), ctypes.byref(pg))
        del k1, k2
        check(rc, f"send room {self.room}")

    def _check_ids(self, addr, n, what):
        """ValueError naming the first id outside the pool (and the limit)."""
        lim = self._decode._limits.get(what)
        if not n or lim is None:
            return
        a = (ctypes.c_int64 * n).from_address(addr)
        items, buf = lim
        if _np is not None:  # vectorised: a request may list thousands of pages
            v = _np.ctypeslib.as_array(a)
            bad = _np.flatnonzero((v < 0) | (v >= items))
            bad = [(int(bad[0]), int(v[bad[0]]))] if bad.size else []
        else:  # pragma: no cover
            bad = [(i, x) for i, x in enumerate(a) if x < 0 or x >= items][:1]
        for i, v in bad:
            plural = "pages" if what == "page" else "slots"
            raise _with_detail(LayercakeError(LC_EINVAL, f"send room {self.room}"),  # as C
                               f"{what} id {v} (at index {i}) is outside D's pool: buffer {buf} "
                               f"has {items} {plural}, ids 0..{items - 1}")

    @property
    def layers_ready(self):
        """Leading layers landed at D: a decoder may start layer k if k < this."""
        return check(_ffi.lc_receiver_layers_ready(self._need()), "layers_ready")

    def metadata(self):
        """The metadata P sent with Success (bytes). LC_ERR_STATE before."""
        buf = ctypes.create_string_buffer(_ffi.METADATA_MAX)
        n = check(_ffi.lc_receiver_metadata(self._need(), buf, len(buf)), "metadata")
        return buf.raw[:n]

    def cancel(self, reason="cancelled by D"):
        check(_ffi.lc_receiver_cancel(self._need(), reason.encode()), f"cancel room {self.room}")

