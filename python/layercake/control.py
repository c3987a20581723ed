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
import time

from . import _ffi
from .core import Region, _Handle
from .engine import Engine, RoomStatus, int64_pointer, room_info
from .errors import LayercakeError, check

EAGAIN = -11


def _str(buf_fn, h, cap=512):
    buf = ctypes.create_string_buffer(cap)
    check(buf_fn(h, buf, cap))
    return buf.value.decode()


def _until_final(poll, timeout, until):
    """Poll until the status is final (or >= until); the last RoomInfo."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.0002
    while True:
        info = poll()
        if info.status.final or (until is not None and info.status >= until):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"room still {info.status.name} after {timeout} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.005)


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


class BootstrapServer(_Handle):
    """The bootstrap HTTP server run by P (lc_bootstrap_t).

    BootstrapServer(host=None, port=0): host None binds every address (as C
    and the CLI do; docs/deployment.md); port 0 picks a free one, -1 takes the
    bootstrap_port knob. `addr` is the "host:port" to give ranks: the
    advertise_host knob, the bound host, else this host's primary address."""

    _free = _ffi.lc_bootstrap_stop

    def __init__(self, host=None, port=0, secret=None, ctx=None):
        super().__init__(None)
        self._keep = [host.encode() if host else None, secret.encode() if secret else None]
        p = _ffi.BootstrapParams()
        p.size = ctypes.sizeof(p)
        p.host, p.port, p.secret = self._keep[0], int(port), self._keep[1]
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
    registration with the bootstrap server. Blocks while registering."""

    _free = _ffi.lc_prefill_destroy

    def __init__(self, ctx, layout, bootstrap, host=None, name=None, world_size=1, dp_size=1,
                 engine_rank=0, metrics_server=None, bootstrap_secret=None):
        super().__init__(ctx)
        if isinstance(bootstrap, BootstrapServer):
            bootstrap = bootstrap.addr
        self._keep = [bootstrap.encode(), host.encode() if host else None,
                      name.encode() if name else None,
                      bootstrap_secret.encode() if bootstrap_secret else None]
        p = _ffi.PrefillParams()
        p.size = ctypes.sizeof(p)
        p.layout = layout._need()
        p.bootstrap, p.host, p.name, p.bootstrap_secret = self._keep
        p.world_size, p.dp_size, p.engine_rank = int(world_size), int(dp_size), int(engine_rank)
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
        self.endpoint = _str(_ffi.lc_prefill_endpoint, self._h)
        self.engine_rank = int(engine_rank)

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

    def sender(self, room):
        return Sender(self, room)


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
        """Block until final (or status >= until); TimeoutError past timeout."""
        return _until_final(self.poll, timeout, until)

    async def wait_async(self, timeout=None, until=None):
        return await _until_final_async(self.poll, timeout, until)


class Sender(_Room):
    """P's handle on one room (lc_sender_t). Closing it forgets the room (an
    unfinished room is aborted first)."""

    _free = _ffi.lc_sender_destroy
    _poll = _ffi.lc_sender_poll

    def __init__(self, prefill, room):
        super().__init__(prefill)
        self.room = int(room)
        h = ctypes.c_void_p()
        check(_ffi.lc_sender_create(prefill._need(), self.room, ctypes.byref(h)), f"sender {room}")
        self._h = h.value
        self._info = _ffi.RoomInfo()

    def set_metadata(self, data):
        """The room's metadata (first token...), delivered to D with Success."""
        data = bytes(data)
        check(_ffi.lc_sender_metadata_set(self._need(), data, len(data)), "metadata")

    @property
    def prefix_len(self):
        """D's decode prefix length in tokens, or None until it is known."""
        v = ctypes.c_uint64()
        rc = _ffi.lc_sender_prefix_len(self._need(), ctypes.byref(v))
        if rc == EAGAIN:
            return None
        check(rc, "prefix_len")
        return v.value

    def abort(self, reason="aborted by P"):
        check(_ffi.lc_sender_cancel(self._need(), reason.encode()), f"abort room {self.room}")


class Decode(_Handle):
    """One D rank (lc_decode_t): data-plane listener, session token, control
    socket and the discovery/deadline threads. `regions` must hold every
    buffer of `layout`; they stay registered while the Decode lives."""

    _free = _ffi.lc_decode_destroy

    def __init__(self, ctx, layout, regions, listen_url="tcp://0.0.0.0:0", host=None,
                 session=None, tp_size=1, tp_rank=0):
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
        p.tp_size, p.tp_rank = int(tp_size), int(tp_rank)
        h = ctypes.c_void_p()
        check(_ffi.lc_decode_create(ctx._need(), ctypes.byref(p), ctypes.byref(h)), "lc_decode_create")
        self._h = h.value
        for r in regions:  # the C side keeps the region pointers
            self._depend_on(r)
        self.endpoint = _str(_ffi.lc_decode_endpoint, self._h)

    def counter(self, name):
        v = ctypes.c_uint64()
        check(_ffi.lc_decode_counter(self._need(), name.encode(), ctypes.byref(v)), f"counter {name}")
        return v.value

    def receiver(self, bootstrap, room):
        return Receiver(self, bootstrap, room)


class Receiver(_Room):
    """D's handle on one room (lc_receiver_t). Closing it cancels an
    unfinished room (grants revoked: the pages may be reused at once)."""

    _free = _ffi.lc_receiver_destroy
    _poll = _ffi.lc_receiver_poll

    def __init__(self, decode, bootstrap, room):
        super().__init__(decode)
        if isinstance(bootstrap, BootstrapServer):
            bootstrap = bootstrap.addr
        self.room = int(room)
        h = ctypes.c_void_p()
        check(_ffi.lc_receiver_create(decode._need(), bootstrap.encode() if bootstrap else None,
                                      self.room, ctypes.byref(h)), f"receiver {room}")
        self._h = h.value
        self._info = _ffi.RoomInfo()

    def send(self, pages, prefix_len=0, aux_index=-1, state_slots=None):
        """Grant P the room's pages (D page ids after the prefix; no copy in
        Python) and send the transfer info. Raises LC_ERR_STATE before
        Bootstrapped: wait(until=RoomStatus.BOOTSTRAPPED) first."""
        pg = _ffi.ReceiverPages()
        pg.size = ctypes.sizeof(pg)
        pg.pages, pg.page_count, k1 = int64_pointer(pages, "pages")
        pg.prefix_len, pg.aux_index = int(prefix_len), int(aux_index)
        pg.state_slots, pg.state_slot_count, k2 = int64_pointer(state_slots, "state_slots")
        rc = _ffi.lc_receiver_send(self._need(), ctypes.byref(pg))
        del k1, k2
        check(rc, f"send room {self.room}")

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

