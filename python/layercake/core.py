"""The data plane: contexts, memory, regions, grants, tokens, completion
queues, listeners, connections and batches.

Ownership follows the C library: a Context owns everything created from it.
Python objects keep their parent alive, and closing a parent closes its
children first, so objects may be dropped or closed in any order.
"""
import atexit
import ctypes
import struct
import sys
import threading
import weakref

from . import _convert as _cv
from . import _ffi
from .errors import LC_EBUSY, LC_ERR_CLOSED, LayercakeError, check

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
         ("remote_region", "<u4"), ("count", "<u4"), ("local_stride", "<u8"),
         ("remote_stride", "<u8")]
    )


# The C structures a small write's path packs and unpacks with struct
# (Connection.post, CompletionQueue._convert): building them field by field
# through ctypes was most of the Python cost of a 4 KiB write's round trip.
_WRITE = struct.Struct("=QQQIIQQ")   # lc_write_t
_PARAMS = struct.Struct("=QQIIqQ")   # lc_batch_params_t
_CQE = struct.Struct("=QQQIiQQ")     # lc_completion_t up to its reason
_CQE_SIZE = ctypes.sizeof(_ffi.Completion)
if (_WRITE.size, _PARAMS.size, _CQE.size + _ffi.REASON_MAX) != (
        ctypes.sizeof(_ffi.Write), ctypes.sizeof(_ffi.BatchParams), _CQE_SIZE):
    raise ImportError("layercake: lc_write_t, lc_batch_params_t or lc_completion_t "
                      "changed; update core.py's struct formats")
_SCRATCH_WRITES = 16  # a batch with more goes the ctypes way
# The C module of post, poll and wait (docs/python.md, "Speedups"), or None:
# then, and for any value it does not convert, the ctypes ways below.
_fast = _ffi.speedups


class _PostScratch(threading.local):
    """One thread's memory for a small batch's writes, params and id: the C
    call copies the writes (lc_batch_post) and releases the GIL, so each
    thread has its own."""

    def __init__(self):
        n = _SCRATCH_WRITES * _WRITE.size
        self.buf = ctypes.create_string_buffer(n + _PARAMS.size + 8)
        base = ctypes.addressof(self.buf)
        self.writes, self.params_off = base, n
        self.params, self.bid = base + n, base + n + _PARAMS.size
        self.bid_v = ctypes.c_uint64.from_buffer(self.buf, n + _PARAMS.size)
        self.busy = False  # a post from a signal handler amid one: the ctypes way


_scratch = _PostScratch()


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


# Root handles still open; closed in order at interpreter exit, so that no
# library thread outlives the interpreter state it may call back into.
_roots = weakref.WeakSet()


@atexit.register
def _close_roots():
    for h in list(_roots):
        try:
            h.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass
    if _log_cb is not None:  # no library thread is left to call it
        _ffi.lc_log_set_handler(_ffi.LOG_CB(), None)


_log_cb = None
_LOG_LEVELS = {1: 40, 2: 30, 3: 20, 4: 10, 5: 5}  # lc level -> logging level


def set_log_level(level):
    """The library's process-wide log level: "off".."trace" or 0..5."""
    if isinstance(level, str):
        v = ctypes.c_int()
        check(_ffi.lc_log_level_parse(level.encode(), ctypes.byref(v)), f"log level {level!r}")
        level = v.value
    _ffi.lc_log_set_level(_cv.c_int(level, "log level"))


def log_to(logger=None):
    """Send the library's log lines to a logging.Logger ("layercake" by
    default) instead of stderr; log_to(False) restores stderr. The handler
    runs on library threads."""
    global _log_cb
    if logger is False:
        _ffi.lc_log_set_handler(_ffi.LOG_CB(), None)
        _log_cb = None
        return
    import logging

    lg = logger or logging.getLogger("layercake")

    def cb(level, line, arg):
        try:
            lg.log(_LOG_LEVELS.get(level, 20), "%s", line.decode(errors="replace"))
        except Exception:  # pragma: no cover - never raise into C
            pass

    new = _ffi.LOG_CB(cb)
    _ffi.lc_log_set_handler(new, None)
    _log_cb = new  # kept alive while installed


# Taking a node's pointer to free it, so that two threads closing one
# handle free it once.
_take_lock = threading.Lock()
# Notified when a counted call (_Node.calls) leaves a closing node.
_calls_left = threading.Condition()
_get_ident = threading.get_ident


class _Node:
    """The native side of a handle: the C pointer, its destroy function and
    the nodes that must close before it. Nodes never refer to the Python
    objects, so the order of closing does not depend on the order in which
    the garbage collector finalizes objects (it clears weak references
    before running finalizers: a WeakSet of children is empty by then).

    A handle whose calls release the GIL and may be in the library while
    another thread closes it (a CompletionQueue's wait) counts them: `calls`
    holds the thread id of each call in flight (see CompletionQueue.wait
    for the pattern), `wake(h)` makes them return (lc_cq_shutdown), and
    close sets `closing`, wakes them and waits until they have left before
    it frees the pointer: a use after free otherwise."""

    __slots__ = ("h", "free", "children", "parents", "calls", "wake", "closing")

    def __init__(self, free):
        self.h, self.free, self.children, self.parents = None, free, set(), []
        self.calls, self.wake, self.closing = None, None, False

    def counted(self, wake=None):
        """Count this node's calls from now on (before the handle is shared)."""
        self.calls, self.wake = [], wake

    def close(self):
        for c in list(self.children):
            c.close()
        if self.calls is not None and self.h is not None:
            self._drain()
        with _take_lock:
            h, self.h = self.h, None
        if h is not None and self.free is not None:
            self.free(h)
        for p in self.parents:
            p.children.discard(self)
        self.parents = []

    def _drain(self):
        """Wake the calls in flight on other threads and wait until they
        have left. A call of this thread (a signal handler that closes
        amid it) has left the library already."""
        self.closing = True  # before looking at calls: a call that enters after sees it
        me = _get_ident()
        if not any(t != me for t in self.calls):
            return
        if self.wake is not None:
            self.wake(self.h)
        with _calls_left:
            while any(t != me for t in self.calls):
                _calls_left.wait()

    def left(self):
        """A counted call left (it popped itself from calls) while closing."""
        with _calls_left:
            _calls_left.notify_all()


class _Handle:
    """An owned C handle with idempotent close and parent/child ordering.

    A child keeps its parents' Python objects alive (strong references);
    closing a parent closes its children first, whether by close(), a with
    block or the garbage collector. A handle may have several parents (a
    Decode depends on its Context and on every Region it writes into):
    closing any of them closes it. Subclasses name their C destroy function
    in `_free` and set `self._h` once created."""

    _free = None

    def __init__(self, parent=None):
        self._node = _Node(self._free)
        self._parent = parent
        self._parents = []
        if parent is not None:
            self._depend_on(parent)
        else:
            _roots.add(self)

    @property
    def _h(self):
        return self._node.h

    @_h.setter
    def _h(self, value):
        self._node.h = value

    def _depend_on(self, other):
        """Close this handle before `other`, whenever `other` closes."""
        other_node = other._node if isinstance(other, (_Handle, Memory)) else other
        other_node.children.add(self._node)
        self._node.parents.append(other_node)
        if other is not self._parent:
            self._parents.append(other)

    def _need(self):
        if self._node.h is None:
            raise LayercakeError(LC_ERR_CLOSED, type(self).__name__)
        return self._node.h

    @property
    def closed(self):
        return self._node.h is None

    def close(self):
        self._node.close()

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
    buffer protocol through .view (a memoryview) and .numpy(). Regions of
    it are deregistered before it is freed."""

    def __init__(self, length, shareable=True, hugepages=True):
        ptr = ctypes.c_void_p()
        flags = (MEM_SHAREABLE if shareable else 0) | (0 if hugepages else MEM_NO_HUGEPAGE)
        length = _cv.size(length, "Memory length")
        check(_ffi.lc_mem_alloc(length, flags, ctypes.byref(ptr)), "lc_mem_alloc")
        self._node = _Node(_ffi.lc_mem_free)
        self._node.h = ptr.value
        self.length = length
        self._array = (ctypes.c_uint8 * self.length).from_address(ptr.value)
        # numpy arrays and memoryviews of it hold _array: it holds the memory.
        self._array._memory = self

    @property
    def address(self):
        if self._node.h is None:
            raise LayercakeError(LC_ERR_CLOSED, "Memory")
        return self._node.h

    @property
    def view(self):
        return memoryview(self._array).cast("B")

    def numpy(self, dtype="u1"):
        if _np is None:
            raise RuntimeError("numpy is not installed")
        return _np.frombuffer(self._array, dtype=dtype)

    def free(self):
        """Free the memory now. Refused (LayercakeError EBUSY) while a live
        Region registers it or a numpy array / memoryview of it exists.
        (Dropping every reference frees it too.)"""
        if self._node.h is not None:
            if self._node.children:
                raise LayercakeError(LC_EBUSY, "Memory.free while a Region registers it")
            if sys.getrefcount(self._array) > 2:  # ours and getrefcount's
                raise LayercakeError(LC_EBUSY, "Memory.free while an array or view of it exists")
            self._array._memory = None
            self._array = None
            self._node.close()

    def __del__(self):
        try:
            self._node.close()  # unreachable: its regions close first
        except Exception:
            pass


class RawMemory:
    """Memory the caller owns and addresses by number (a GPU pool's host
    mirror, a pointer from another library): RawMemory(address, length).
    Nothing keeps it alive; the caller must."""

    def __init__(self, address, length):
        self.address = _cv.address(address, "RawMemory address")
        self.length = _cv.size(length, "RawMemory length")


def _contiguous_bytes(shape, strides, itemsize, what):
    """Bytes spanned by a C-contiguous array of `shape`; ValueError naming
    the shape and strides if `strides` (in bytes; None = C-contiguous) is
    anything else."""
    n = 1
    for s in shape:
        n *= int(s)
    if strides is not None and n > 1:
        expect, want = itemsize, []
        for s in reversed(shape):
            want.append(expect)
            expect *= int(s)
        want.reverse()
        if any(int(s) != 1 and int(st) != w for s, st, w in zip(shape, strides, want)):
            raise ValueError(
                f"{what}: memory must be C-contiguous to be registered (shape {tuple(shape)}, "
                f"strides {tuple(strides)} bytes, contiguous would be {tuple(want)}); register "
                f"the whole pool tensor, or call .contiguous() on a copy you keep")
    return n * itemsize


def _typestr_size(typestr):
    return int(typestr[2:]) if len(typestr) > 2 else 1


# DLPack (dlpack.h): the capsule holds a DLManagedTensor whose first member
# is the DLTensor below. Device types: 1 CPU, 2 CUDA, 3 CUDA host (pinned),
# 13 CUDA managed.
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_KINDS = {1: None, 2: "cuda", 3: "pinned", 13: "cuda"}


def _dlpack_memory(obj, what):
    """(address, length, kind, device, capsule) of a DLPack producer. The
    capsule is kept unconsumed: while it lives, the producer keeps the
    memory (its deleter runs when the capsule is freed)."""
    cap = obj.__dlpack__()
    t = _DLTensor.from_address(_capsule_pointer(cap, b"dltensor"))
    if t.device.device_type not in _DL_KINDS:
        raise ValueError(f"{what}: DLPack device type {t.device.device_type} is not memory "
                         f"layercake can register (CPU, CUDA, CUDA host)")
    itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = None if not t.strides else [t.strides[i] * itemsize for i in range(t.ndim)]
    n = _contiguous_bytes(shape, strides, itemsize, what)
    kind = _DL_KINDS[t.device.device_type]
    return (t.data or 0) + t.byte_offset, n, kind, t.device.device_id, cap


def _memory_of(buf, what="register"):
    """(address, length, kind, device, keepalive) of memory to register or
    to use as a layout base, without copying. `kind` is None (host), "cuda"
    or "pinned", as the object says; device is its ordinal or None. Accepts
    Memory/RawMemory, numpy arrays, anything with __cuda_array_interface__
    (torch CUDA tensors, CuPy, Numba), torch CPU tensors (data_ptr), anything
    with __array_interface__ or __dlpack__, and writable buffer-protocol
    objects. Non-contiguous memory is refused with ValueError."""
    if isinstance(buf, (Memory, RawMemory)):
        return buf.address, buf.length, None, None, None
    if _np is not None and isinstance(buf, _np.ndarray):
        if not buf.flags["C_CONTIGUOUS"]:
            _contiguous_bytes(buf.shape, buf.strides, buf.itemsize, what)
        return buf.ctypes.data, buf.nbytes, None, None, None
    try:  # torch raises (not AttributeError) for a tensor that requires grad
        cai = getattr(buf, "__cuda_array_interface__", None)
    except Exception as e:
        raise ValueError(f"{what}: {type(buf).__name__}.__cuda_array_interface__: {e}") from None
    if cai is not None:
        n = _contiguous_bytes(cai["shape"], cai.get("strides"), _typestr_size(cai["typestr"]), what)
        dev = getattr(buf, "device", None)
        dev = getattr(dev, "index", None) if hasattr(dev, "index") else getattr(dev, "id", None)
        return int(cai["data"][0] or 0), n, "cuda", dev, None
    if callable(getattr(buf, "data_ptr", None)) and callable(getattr(buf, "element_size", None)):
        # A torch tensor on the CPU (no __array_interface__; .numpy() does
        # not cover every dtype): its storage as it is.
        itemsize = int(buf.element_size())
        shape = tuple(buf.shape)
        strides = None if buf.is_contiguous() else [s * itemsize for s in buf.stride()]
        n = _contiguous_bytes(shape, strides, itemsize, what)
        if strides is None and buf.numel() > 1 and not buf.is_contiguous():  # pragma: no cover
            raise ValueError(f"{what}: tensor is not contiguous")
        dev = getattr(buf, "device", None)
        if getattr(dev, "type", "cpu") not in ("cpu",):
            if getattr(dev, "type", None) == "cuda":
                return int(buf.data_ptr()), n, "cuda", dev.index, None
            raise ValueError(f"{what}: tensors on {dev} cannot be registered")
        return int(buf.data_ptr()), n, None, None, None
    ai = getattr(buf, "__array_interface__", None)
    if ai is not None:
        n = _contiguous_bytes(ai["shape"], ai.get("strides"), _typestr_size(ai["typestr"]), what)
        return int(ai["data"][0] or 0), n, None, None, None
    if hasattr(buf, "__dlpack__"):
        return _dlpack_memory(buf, what)
    try:
        mv = memoryview(buf)
    except TypeError:
        raise TypeError(
            f"{what}: cannot take the address of a {type(buf).__name__}: pass a layercake "
            f"Memory, RawMemory(address, length), a numpy array, a torch tensor, or any object "
            f"with __cuda_array_interface__, __array_interface__, __dlpack__ or the buffer "
            f"protocol") from None
    if not mv.contiguous:
        raise ValueError(f"{what}: buffer must be contiguous")
    if mv.readonly:
        raise ValueError(f"{what}: buffer must be writable to be registered")
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    addr = ctypes.addressof(c)
    del c  # its own export of mv; mv (the export of buf) is what Region keeps
    return addr, mv.nbytes, None, None, mv


def _hold_export(buf, keep):
    """A buffer export of `buf` (a memoryview) for a registration to hold:
    while it is held, a resizable exporter (bytearray, array.array, a numpy
    array that owns its data, ...) refuses to resize or free its storage
    (BufferError), so the registered address stays its memory. None for
    objects without the buffer protocol (Memory, RawMemory, torch tensors,
    CUDA memory): there the Region keeps the object itself alive."""
    if isinstance(keep, memoryview):
        return keep
    if isinstance(buf, (Memory, RawMemory)):
        return None
    try:
        return memoryview(buf)
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return None


def _region_free(export):
    """Region's destroy: deregister, then release the export it held, so the
    memory may move only once the library no longer lands bytes there."""

    def free(h):
        try:
            _ffi.lc_region_deregister(h)
        finally:
            if export is not None:
                try:
                    export.release()
                except BufferError:  # pragma: no cover - nobody else gets this view
                    pass

    return free


def _address_of(buf):
    """Address and length of memory (see _memory_of), without copying."""
    a, n, _k, _d, _keep = _memory_of(buf)
    return a, n


# Memory kinds of a region (lc_mem_kind_t, docs/gpu.md).
MEM_HOST, MEM_PINNED, MEM_CUDA, MEM_SIM = 0, 1, 2, 3


class Context(_Handle):
    """The root object (lc_ctx_t)."""

    _free = _ffi.lc_ctx_destroy

    def __init__(self, name="py", **config):
        super().__init__()
        self._regions = set()  # a context owns its regions (strongly), as in C
        h = ctypes.c_void_p()
        self._name = name.encode()
        p = _ffi.CtxParams(ctypes.sizeof(_ffi.CtxParams), self._name)
        check(_ffi.lc_ctx_create(ctypes.byref(p), ctypes.byref(h)), "lc_ctx_create")
        self._h = h.value
        for k, v in config.items():
            self.config_set(k, v)


    def config_set(self, name, value):
        """Set a knob from an int, or from its text as the environment gives
        it ("4"); the library parses it and checks the knob's range."""
        if not isinstance(value, str):
            value = _cv.integer(value, f"config {name}")  # a float is not cut down to an int
        check(_ffi.lc_ctx_config_set(self._need(), name.encode(), str(value).encode()),
              f"config {name}")

    def config_get(self, name):
        v = ctypes.c_int64()
        check(_ffi.lc_ctx_config_get_int(self._need(), name.encode(), ctypes.byref(v)), f"config {name}")
        return v.value

    def counters(self):
        h = self._need()
        out, v = {}, ctypes.c_uint64()
        for i in range(_ffi.lc_counter_count()):
            check(_ffi.lc_ctx_counter(h, i, ctypes.byref(v)), "counter")
            out[_ffi.lc_counter_name(i).decode()] = v.value
        return out

    def register(self, buf, kind=None, device=None):
        """Register memory: a Memory, RawMemory(address, length), a numpy
        array, a torch tensor (CPU or CUDA), or anything exposing
        __cuda_array_interface__ (CuPy, Numba), __array_interface__,
        __dlpack__ or the writable buffer protocol. The memory must be
        C-contiguous (ValueError naming the strides otherwise); nothing is
        copied. The Region keeps `buf` alive; the context keeps the Region
        registered until region.close() or its own close, whether or not the
        caller keeps the returned object.

        `kind` is the memory kind (MEM_HOST, MEM_PINNED, MEM_CUDA, MEM_SIM;
        docs/gpu.md) and `device` its device ordinal. By default both come
        from the object: CUDA memory (a CUDA interface, a torch CUDA tensor,
        a DLPack CUDA device) is MEM_CUDA on its device, DLPack CUDA-host
        memory MEM_PINNED, everything else MEM_HOST. Device memory is never
        read by the CPU."""
        return Region(self, buf, kind, device)

    def grant(self, room, region, offset, length):
        check(_ffi.lc_grant_issue(self._need(), _cv.u64(room, "grant: room"), region._need(),
                                  _cv.u64(offset, "grant: offset"), _cv.u64(length, "grant: length")),
              "lc_grant_issue")

    def revoke(self, room):
        return check(_ffi.lc_grant_revoke(self._need(), _cv.u64(room, "revoke: room")), "lc_grant_revoke")

    def issue_token(self):
        t = _ffi.Token()
        check(_ffi.lc_token_issue(self._need(), ctypes.byref(t)), "lc_token_issue")
        return bytes(t.bytes)

    def bind(self, room, token):
        """Give `room` to the writers of `token` (16 bytes from issue_token)
        alone: from now until revoke(room) a write for the room lands only
        from a connection that presented one of the room's bound tokens;
        others fail with LC_ERR_GRANT (lc_grant_bind). Bind before grant()."""
        if len(token) != _ffi.TOKEN_LEN:
            raise ValueError("token must be 16 bytes")
        t = _ffi.Token()
        t.bytes[:] = list(token)
        check(_ffi.lc_grant_bind(self._need(), int(room), ctypes.byref(t)), "lc_grant_bind")

    def listen(self, url):
        return Listener(self, url)

    def completion_queue(self):
        return CompletionQueue(self)

    def connect(self, url, cq, token=None, lanes=0):
        return Connection(self, url, cq, token, lanes)


class Region(_Handle):
    _free = _ffi.lc_region_deregister

    def __init__(self, ctx, buf, kind=None, device=None):
        super().__init__(ctx)
        addr, n, seen_kind, seen_dev, keep = _memory_of(buf)
        # The memory must outlive the registration and stay where it is: the
        # object, and its buffer export, held until the region is
        # deregistered (close, or its context's close), then released.
        export = _hold_export(buf, keep)
        self._keep = (buf, keep)
        self._node.free = _region_free(export)
        h = ctypes.c_void_p()
        try:
            if kind is None:
                kind = {None: MEM_HOST, "cuda": MEM_CUDA, "pinned": MEM_PINNED}[seen_kind]
            if device is None:
                device = seen_dev if seen_dev is not None else 0
            kind, device = _cv.i32(kind, "register: kind"), _cv.i32(device, "register: device")
            addr, n = _cv.address(addr, "register: address"), _cv.size(n, "register: length")
            if kind == MEM_HOST:
                check(_ffi.lc_region_register(ctx._need(), addr, n, ctypes.byref(h)), "lc_region_register")
            else:
                p = _ffi.RegionParams(size=ctypes.sizeof(_ffi.RegionParams), kind=kind, device=device)
                check(_ffi.lc_region_register_ex(ctx._need(), addr, n, ctypes.byref(p), ctypes.byref(h)),
                      "lc_region_register_ex")
        except BaseException:
            if export is not None:  # not registered: the object may move again
                export.release()
            raise
        self.kind, self.device = kind, device
        self._h = h.value
        self.address, self.length = addr, n
        self.id = _ffi.lc_region_id(self._h)
        if isinstance(buf, Memory):
            self._depend_on(buf)
        ctx._regions.add(self)

    def close(self):
        super().close()
        self._parent._regions.discard(self)

    def contains(self, address, length=1):
        return self.address <= address and address + length <= self.address + self.length

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
    _free = _ffi.lc_listener_destroy

    def __init__(self, ctx, url):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(_ffi.lc_listener_create(ctx._need(), url.encode(), ctypes.byref(h)), f"listen {url}")
        self._h = h.value
        buf = ctypes.create_string_buffer(256)
        check(_ffi.lc_listener_url(self._h, buf, len(buf)))
        self.url = buf.value.decode()



_CQ_ARRAY = 64  # completions a poll or wait takes at most (the C module's stack too)


class CompletionQueue(_Handle):
    """One completion per posted batch; `fd` is readable while any is queued
    (use it with asyncio: see wait_async). Connections using it close
    first.

    Closing it (or its Context) while other threads wait in wait() wakes
    them: each returns what is queued, or raises LayercakeError
    LC_ERR_CLOSED; close returns once they have left the library."""

    _free = _ffi.lc_cq_destroy

    def __init__(self, ctx):
        super().__init__(ctx)
        h = ctypes.c_void_p()
        check(_ffi.lc_cq_create(ctx._need(), ctypes.byref(h)), "lc_cq_create")
        self._h = h.value
        self._node.counted(_ffi.lc_cq_shutdown)
        self._buf = (_ffi.Completion * _CQ_ARRAY)()
        self._addr = ctypes.addressof(self._buf)
        self._mv = memoryview(self._buf).cast("B")


    @property
    def fd(self):
        return _ffi.lc_cq_fd(self._need())

    def _convert(self, n, where="lc_cq_poll"):
        # One struct unpack per completion: field by field through ctypes was
        # most of a small write's Python cost (docs/python.md).
        if n <= 0:
            if n < 0:
                check(n, where)
            return []
        mv, out = self._mv, []
        for o in range(0, n * _CQE_SIZE, _CQE_SIZE):
            bid, ud, room, tag, status, nbytes, lat = _CQE.unpack_from(mv, o)
            reason = ""
            if mv[o + _CQE.size]:
                r = bytes(mv[o + _CQE.size:o + _CQE_SIZE])
                reason = r.split(b"\0", 1)[0].decode(errors="replace")
            out.append({"batch_id": bid, "user_data": ud, "room": room, "tag": tag,
                        "status": status, "bytes": nbytes, "latency_ns": lat, "reason": reason})
        return out

    def _closed(self):
        return LayercakeError(LC_ERR_CLOSED, type(self).__name__)

    def poll(self, max_items=64):
        """Up to max_items (at least 1; above 64, 64) completions, without
        blocking: a list of dicts."""
        node, me = self._node, _get_ident()
        node.calls.append(me)  # counted: close waits for it to leave (_Node)
        try:
            h = node.h
            if h is None or node.closing:
                raise self._closed()
            if _fast is not None:
                r = _fast.poll(h, max_items)
                if type(r) is list:
                    return r
                if r is not None:
                    check(r, "lc_cq_poll")
            n = _cv.at_least_one(max_items, "poll: max_items", _CQ_ARRAY)
            return self._convert(_ffi.lc_cq_poll_addr(h, self._addr, n))
        finally:
            node.calls.remove(me)
            if node.closing:
                node.left()

    def wait(self, timeout_ms=1000, max_items=64):
        """As poll, waiting up to timeout_ms (a C int; -1: no deadline) for
        at least one; [] on timeout. LayercakeError LC_ERR_CLOSED when the
        queue is closed meanwhile with nothing queued."""
        node, me = self._node, _get_ident()
        node.calls.append(me)
        try:
            h = node.h
            if h is None or node.closing:
                raise self._closed()
            if _fast is not None:
                r = _fast.wait(h, max_items, timeout_ms)
                if type(r) is list:
                    return r
                if r is not None:
                    check(r, "lc_cq_wait")
            n = _cv.at_least_one(max_items, "wait: max_items", _CQ_ARRAY)
            t = _cv.c_int(timeout_ms, "wait: timeout_ms")
            return self._convert(_ffi.lc_cq_wait_addr(h, self._addr, n, t), "lc_cq_wait")
        finally:
            node.calls.remove(me)
            if node.closing:
                node.left()

    def shutdown(self):
        """lc_cq_shutdown: wake the threads in wait() for good; from now on
        wait() returns what is queued or raises LC_ERR_CLOSED at once, and
        poll() works as before. close() does this itself."""
        check(_ffi.lc_cq_shutdown(self._need()), "lc_cq_shutdown")

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
    _free = _ffi.lc_conn_destroy

    def __init__(self, ctx, url, cq, token=None, lanes=0):
        super().__init__(ctx)
        self._depend_on(cq)
        self._cq = cq
        p = _ffi.ConnParams(ctypes.sizeof(_ffi.ConnParams), cq._need())
        if token is not None:
            p.token.bytes[:] = list(_cv.token(token, "connect: token", _ffi.TOKEN_LEN))
            p.has_token = 1
        p.lanes = _cv.c_int(lanes, "connect: lanes")
        h = ctypes.c_void_p()
        check(_ffi.lc_conn_create(ctx._need(), url.encode(), ctypes.byref(p), ctypes.byref(h)), f"connect {url}")
        self._h = h.value


    def import_region(self, desc):
        rid = ctypes.c_uint32()
        check(_ffi.lc_conn_import_region(self._need(), desc, len(desc), ctypes.byref(rid)), "import")
        return rid.value

    def post(self, writes, room, tag=0, timeout_ms=0, user_data=0, defer=False):
        """Post a batch. `writes` is a numpy array of WRITE_DTYPE (used in
        place, no copy) or a sequence of (local_address, remote_region,
        remote_offset, length) or (local_address, remote_region, remote_offset,
        length, count, local_stride, remote_stride) for a strided write
        (count blocks of length bytes). defer=True queues it until flush() (one
        transport wake-up for many posts). Returns the batch id.

        Every value is an int (or __index__) in its C type's range: local
        an address, region, count and tag uint32, offset, length, strides,
        room and user_data uint64, timeout_ms int64. Anything else raises
        TypeError or OverflowError (never reaches the library cut down to
        its low bits), the same with or without the C module."""
        flags = _ffi.BATCH_DEFER if defer else 0
        if _fast is not None and type(writes) in (list, tuple):
            bid = _fast.post(self._need(), writes, room, tag, flags, timeout_ms, user_data)
            if bid is not None:
                return bid if bid >= 0 else check(bid, "lc_batch_post")
        if type(writes) in (list, tuple) and len(writes) <= _SCRATCH_WRITES:
            bid = self._post_packed(writes, room, tag, flags, timeout_ms, user_data)
            if bid is not None:
                return bid
        if _np is not None and isinstance(writes, _np.ndarray):
            if writes.dtype != WRITE_DTYPE or not writes.flags["C_CONTIGUOUS"]:
                raise ValueError("writes must be a contiguous array of layercake.WRITE_DTYPE")
            ptr, n = writes.ctypes.data, len(writes)
            keep = writes
        else:
            n = len(writes)
            keep = (_ffi.Write * max(n, 1))()
            for i, w in enumerate(writes):
                keep[i] = _ffi.Write(*_cv.write(w, f"post: writes[{i}]"))
            ptr = ctypes.addressof(keep)
        p = _ffi.BatchParams(ctypes.sizeof(_ffi.BatchParams), _cv.u64(room, "post: room"),
                             _cv.u32(tag, "post: tag"), flags, _cv.i64(timeout_ms, "post: timeout_ms"),
                             _cv.u64(user_data, "post: user_data"))
        bid = ctypes.c_uint64()
        check(_ffi.lc_batch_post(self._need(), ptr, n, ctypes.byref(p), ctypes.byref(bid)), "lc_batch_post")
        del keep
        return bid.value

    def _post_packed(self, writes, room, tag, flags, timeout_ms, user_data):
        """post's path for a short list of plain tuples: packed into this
        thread's scratch. None where a value does not pack (not an int, out
        of range, a tuple of another length): the ctypes way then takes it,
        and its converters (_convert) say what is wrong."""
        s = _scratch
        if s.busy:
            return None
        s.busy = True
        try:
            buf, o = s.buf, 0
            try:
                for w in writes:
                    if len(w) == 4:
                        _WRITE.pack_into(buf, o, w[0], w[2], w[3], w[1], 0, 0, 0)
                    elif len(w) == 7:
                        _WRITE.pack_into(buf, o, w[0], w[2], w[3], w[1], w[4], w[5], w[6])
                    else:
                        return None
                    o += _WRITE.size
                _PARAMS.pack_into(buf, s.params_off, _PARAMS.size, room, tag, flags,
                                  timeout_ms, user_data)
            except (struct.error, TypeError):
                return None
            check(_ffi.lc_batch_post_addr(self._need(), s.writes, len(writes), s.params, s.bid),
                  "lc_batch_post")
            return s.bid_v.value
        finally:
            s.busy = False

    def flush(self):
        """Start every batch posted with defer=True."""
        check(_ffi.lc_conn_flush(self._need()), "lc_conn_flush")

    def room_cancel(self, room):
        return check(_ffi.lc_conn_room_cancel(self._need(), _cv.u64(room, "room_cancel: room")),
                     "room_cancel")
