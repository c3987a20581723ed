"""The data plane: contexts, memory, regions, grants, tokens, completion
queues, listeners, connections and batches.

Ownership follows the C library: a Context owns everything created from it.
Python objects keep their parent alive, and closing a parent closes its
children first, so objects may be dropped or closed in any order.
"""
import ctypes
import weakref

from . import _ffi
from .errors import LayercakeError, check

try:  # numpy is optional; page arrays and write arrays use it when present
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None

MEM_SHAREABLE = 1
MEM_NO_HUGEPAGE = 2

WRITE_DTYPE = None
if _np is not None:
    WRITE_DTYPE = _np.dtype(
        [("local", "<u8"), ("remote_offset", "<u8"), ("length", "<u8"),
         ("remote_region", "<u4"), ("reserved", "<u4")]
    )


def version():
    return _ffi.lc_version().decode()


def transports():
    return _ffi.lc_transports().decode().split(",")


def config_table():
    """Every knob: (name, env, default, help, min, max)."""
    out = []
    for i in range(_ffi.lc_config_count()):
        c = _ffi.lc_config_info(i).contents
        out.append((c.name.decode(), c.env.decode(), c.default_str.decode(), c.help.decode(), c.min, c.max))
    return out


class _Handle:
    """An owned C handle with idempotent close and parent/child tracking."""

    def __init__(self, parent=None):
        self._h = None
        self._parent = parent
        self._children = weakref.WeakSet()
        if parent is not None:
            parent._children.add(self)

    def _need(self):
        if self._h is None:
            raise LayercakeError(-1015, type(self).__name__)  # LC_ERR_CLOSED
        return self._h

    @property
    def closed(self):
        return self._h is None

    def close(self):
        for child in list(self._children):
            child.close()
        if self._h is not None:
            h, self._h = self._h, None
            self._destroy(h)

    def _destroy(self, h):  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Memory:
    """Host memory from the library's allocator: 2 MiB aligned, huge pages,
    touched; memfd-backed when shareable (needed by shm://). Supports the
    buffer protocol through .view (a memoryview) and .numpy()."""

    def __init__(self, length, shareable=True, hugepages=True):
        self._ptr = ctypes.c_void_p()
        flags = (MEM_SHAREABLE if shareable else 0) | (0 if hugepages else MEM_NO_HUGEPAGE)
        check(_ffi.lc_mem_alloc(int(length), flags, ctypes.byref(self._ptr)), "lc_mem_alloc")
        self.length = int(length)
        self._array = (ctypes.c_uint8 * self.length).from_address(self._ptr.value)

    @property
    def address(self):
        if self._ptr is None:
            raise LayercakeError(-1015, "Memory")
        return self._ptr.value

    @property
    def view(self):
        return memoryview(self._array).cast("B")

    def numpy(self, dtype="u1"):
        if _np is None:
            raise RuntimeError("numpy is not installed")
        return _np.frombuffer(self._array, dtype=dtype)

    def free(self):
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            self._array = None
            _ffi.lc_mem_free(p)

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


def _address_of(buf):
    """Address and length of a writable or readable buffer-protocol object,
    without copying."""
    if isinstance(buf, Memory):
        return buf.address, buf.length
    if _np is not None and isinstance(buf, _np.ndarray):
        if not buf.flags["C_CONTIGUOUS"]:
            raise ValueError("array must be C-contiguous")
        return buf.ctypes.data, buf.nbytes
    mv = memoryview(buf)
    if not mv.contiguous:
        raise ValueError("buffer must be contiguous")
    if mv.readonly:
        c = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)  # pragma: no cover
        raise ValueError("buffer must be writable to be registered")
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(c), mv.nbytes


class Context(_Handle):
    """The root object (lc_ctx_t)."""

    def __init__(self, name="py", **config):
        super().__init__()
        h = ctypes.c_void_p()
        self._name = name.encode()
        p = _ffi.CtxParams(ctypes.sizeof(_ffi.CtxParams), self._name)
        check(_ffi.lc_ctx_create(ctypes.byref(p), ctypes.byref(h)), "lc_ctx_create")
        self._h = h.value
        for k, v in config.items():
            self.config_set(k, v)

    def _destroy(self, h):
        _ffi.lc_ctx_destroy(h)

    def config_set(self, name, value):
        check(_ffi.lc_ctx_config_set(self._need(), name.encode(), str(int(value)).encode()),
              f"config {name}")

    def config_get(self, name):
        v = ctypes.c_int64()
        check(_ffi.lc_ctx_config_get_int(self._need(), name.encode(), ctypes.byref(v)), f"config {name}")
        return v.value

    def counters(self):
        h = self._need()
        return {
            _ffi.lc_counter_name(i).decode(): _ffi.lc_ctx_counter(h, i)
            for i in range(_ffi.lc_counter_count())
        }

    def register(self, buf):
        """Register memory (a Memory, numpy array or writable buffer)."""
        return Region(self, buf)

    def grant(self, room, region, offset, length):
        check(_ffi.lc_grant_add(self._need(), int(room), region._need(), int(offset), int(length)),
              "lc_grant_add")

    def revoke(self, room):
        return check(_ffi.lc_grant_revoke(self._need(), int(room)), "lc_grant_revoke")

    def issue_token(self):
        t = _ffi.Token()
        check(_ffi.lc_token_issue(self._need(), ctypes.byref(t)), "lc_token_issue")
        return bytes(t.bytes)

    def listen(self, url):
        return Listener(self, url)

    def completion_queue(self):
        return CompletionQueue(self)

    def connect(self, url, cq, token=None, lanes=0):
        return Connection(self, url, cq, token, lanes)


class Region(_Handle):
    def __init__(self, ctx, buf):
        super().__init__(ctx)
        self._keep = buf  # the memory must outlive the registration
        addr, n = _address_of(buf)
        h = ctypes.c_void_p()
        check(_ffi.lc_region_register(ctx._need(), addr, n, ctypes.byref(h)), "lc_region_register")
        self._h = h.value
        self.address, self.length = addr, n
        self.id = _ffi.lc_region_id(self._h)

    def _destroy(self, h):
        if not self._parent.closed:
            _ffi.lc_region_deregister(h)

    def pack(self):
        """The packed remote descriptor (bytes) to send to a peer."""
        buf = ctypes.create_string_buffer(_ffi.REGION_DESC_MAX)
        n = check(_ffi.lc_region_pack(self._need(), buf, len(buf)), "lc_region_pack")
        return buf.raw[:n]


def unpack_region(desc):
    d = _ffi.RegionDesc()
    check(_ffi.lc_region_unpack(desc, len(desc), ctypes.byref(d)), "lc_region_unpack")
    return {"owner": d.owner, "region_id": d.region_id, "flags": d.flags, "length": d.length}


class Listener(_Handle):
    def __init__(self, ctx, url):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(_ffi.lc_listener_create(ctx._need(), url.encode(), ctypes.byref(h)), f"listen {url}")
        self._h = h.value
        buf = ctypes.create_string_buffer(256)
        check(_ffi.lc_listener_url(self._h, buf, len(buf)))
        self.url = buf.value.decode()

    def _destroy(self, h):
        if not self._parent.closed:
            _ffi.lc_listener_destroy(h)


class CompletionQueue(_Handle):
    """One completion per posted batch; `fd` is readable while any is queued
    (use it with asyncio: see wait_async)."""

    def __init__(self, ctx):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(_ffi.lc_cq_create(ctx._need(), ctypes.byref(h)), "lc_cq_create")
        self._h = h.value
        self._buf = (_ffi.Completion * 64)()

    def _destroy(self, h):
        # Connections using this queue are its children: closed first.
        _ffi.lc_cq_destroy(h)

    @property
    def fd(self):
        return _ffi.lc_cq_fd(self._need())

    def _convert(self, n):
        return [
            {"batch_id": c.batch_id, "user_data": c.user_data, "room": c.room, "tag": c.tag,
             "status": c.status, "bytes": c.bytes, "latency_ns": c.latency_ns,
             "reason": c.reason.decode(errors="replace")}
            for c in self._buf[:n]
        ]

    def poll(self, max_items=64):
        n = check(_ffi.lc_cq_poll(self._need(), self._buf, min(max_items, 64)), "lc_cq_poll")
        return self._convert(n)

    def wait(self, timeout_ms=1000, max_items=64):
        n = check(_ffi.lc_cq_wait(self._need(), self._buf, min(max_items, 64), int(timeout_ms)), "lc_cq_wait")
        return self._convert(n)

    async def wait_async(self, max_items=64):
        """Wait for completions without blocking the event loop."""
        import asyncio

        items = self.poll(max_items)
        if items:
            return items
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = self.fd

        def ready():
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            while True:
                await fut
                items = self.poll(max_items)
                if items:
                    return items
                fut = loop.create_future()
        finally:
            loop.remove_reader(fd)


class Connection(_Handle):
    def __init__(self, ctx, url, cq, token=None, lanes=0):
        super().__init__(ctx)
        cq._children.add(self)
        self._cq = cq
        p = _ffi.ConnParams(ctypes.sizeof(_ffi.ConnParams), cq._need())
        if token is not None:
            if len(token) != _ffi.TOKEN_LEN:
                raise ValueError("token must be 16 bytes")
            p.token.bytes[:] = list(token)
            p.has_token = 1
        p.lanes = int(lanes)
        h = ctypes.c_void_p()
        check(_ffi.lc_conn_create(ctx._need(), url.encode(), ctypes.byref(p), ctypes.byref(h)), f"connect {url}")
        self._h = h.value

    def _destroy(self, h):
        if not self._parent.closed:
            _ffi.lc_conn_destroy(h)

    def import_region(self, desc):
        rid = ctypes.c_uint32()
        check(_ffi.lc_conn_import_region(self._need(), desc, len(desc), ctypes.byref(rid)), "import")
        return rid.value

    def post(self, writes, room, tag=0, timeout_ms=0, user_data=0):
        """Post a batch. `writes` is a numpy array of WRITE_DTYPE (used in
        place, no copy) or a sequence of (local_address, remote_region,
        remote_offset, length). Returns the batch id."""
        if _np is not None and isinstance(writes, _np.ndarray):
            if writes.dtype != WRITE_DTYPE or not writes.flags["C_CONTIGUOUS"]:
                raise ValueError("writes must be a contiguous array of layercake.WRITE_DTYPE")
            ptr, n = writes.ctypes.data, len(writes)
            keep = writes
        else:
            n = len(writes)
            keep = (_ffi.Write * max(n, 1))()
            for i, (local, region, off, length) in enumerate(writes):
                keep[i] = _ffi.Write(local, off, length, region, 0)
            ptr = ctypes.addressof(keep)
        p = _ffi.BatchParams(ctypes.sizeof(_ffi.BatchParams), int(room), int(tag), 0, int(timeout_ms), int(user_data))
        bid = ctypes.c_uint64()
        check(_ffi.lc_batch_post(self._need(), ptr, n, ctypes.byref(p), ctypes.byref(bid)), "lc_batch_post")
        del keep
        return bid.value

    def cancel_room(self, room):
        return check(_ffi.lc_conn_cancel_room(self._need(), int(room)), "cancel_room")
