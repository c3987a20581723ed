"""Python values as the C types the binding passes them as: one function
per kind of value (STYLE.md, "The Python side").

ctypes converts an int to a C integer argument or struct field by keeping
its low bits: region 2**32 + 5 reached the library as region 5. Every
integer the binding hands to C goes through one of these instead, the
ctypes way and the C module's way alike:

- an int, or an object with __index__ (numpy integers, bool), as
  struct.pack and the C module (python/speedups/speedups.c) take them;
  anything else (a float, a str, None) is a TypeError;
- inside the C type's range, or an OverflowError that names the value, the
  range and what it was for;
- a value whose meaning has a narrower range (a count of at least one) is
  a ValueError.

The C module converts the same kinds with the same bounds. It answers
None for any value it does not take, and the binding then converts the
call's values here, so an error is decided and worded in one place,
whichever way a call goes (tests/python/test_convert.py).
"""
import ctypes
import operator


def _index(v, what):
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what}: need an int, got {type(v).__name__} {v!r:.40}") from None


def _kind(name, lo, hi):
    def convert(v, what):
        i = _index(v, what)
        if lo <= i <= hi:
            return i
        raise OverflowError(f"{what}: {i} is out of range for {name} ({lo} .. {hi})")

    convert.__name__ = convert.__qualname__ = name
    convert.__doc__ = f"v as a C {name} ({lo} .. {hi}); TypeError/OverflowError naming `what`."
    return convert


_BITS_SIZE = 8 * ctypes.sizeof(ctypes.c_size_t)
_BITS_PTR = 8 * ctypes.sizeof(ctypes.c_void_p)
_BITS_INT = 8 * ctypes.sizeof(ctypes.c_int)

u8 = _kind("uint8", 0, (1 << 8) - 1)
u32 = _kind("uint32", 0, (1 << 32) - 1)
u64 = _kind("uint64", 0, (1 << 64) - 1)
i32 = _kind("int32", -(1 << 31), (1 << 31) - 1)
i64 = _kind("int64", -(1 << 63), (1 << 63) - 1)
c_int = _kind("int", -(1 << (_BITS_INT - 1)), (1 << (_BITS_INT - 1)) - 1)
size = _kind("size_t", 0, (1 << _BITS_SIZE) - 1)
address = _kind("an address", 0, (1 << _BITS_PTR) - 1)


def at_least_one(v, what, cap=None):
    """A count of at least one (ValueError below), as a C int; above `cap`
    it is `cap` (a maximum asked for that the caller's array bounds)."""
    i = _index(v, what)
    if i < 1:
        raise ValueError(f"{what}: {i}; need at least 1")
    if cap is not None and i > cap:
        return cap
    return c_int(i, what)


def write(w, what="write"):
    """One write tuple of Connection.post: (local, region, offset, length)
    or with (count, local_stride, remote_stride) after it, as the fields of
    lc_write_t in their order (local, remote_offset, length, remote_region,
    count, local_stride, remote_stride)."""
    n = len(w)
    if n not in (4, 7):
        raise ValueError(f"{what}: (local, region, offset, length) or with (count, local_stride, "
                         f"remote_stride) after it, got {n} values")
    local, region, offset, length = (address(w[0], what + " local"), u32(w[1], what + " region"),
                                     u64(w[2], what + " offset"), u64(w[3], what + " length"))
    if n == 4:
        return local, offset, length, region, 0, 0, 0
    return (local, offset, length, region, u32(w[4], what + " count"),
            u64(w[5], what + " local_stride"), u64(w[6], what + " remote_stride"))


def u32_array(values, what):
    """A ctypes uint32 array of `values`, each converted."""
    return (ctypes.c_uint32 * len(values))(*[u32(v, f"{what}[{i}]") for i, v in enumerate(values)])


def u64_array(values, what):
    return (ctypes.c_uint64 * len(values))(*[u64(v, f"{what}[{i}]") for i, v in enumerate(values)])


def i32_array(values, what):
    return (ctypes.c_int32 * len(values))(*[i32(v, f"{what}[{i}]") for i, v in enumerate(values)])


def i64_array(values, what):
    return (ctypes.c_int64 * len(values))(*[i64(v, f"{what}[{i}]") for i, v in enumerate(values)])


def integer(v, what):
    """Any int (or __index__), for arithmetic the binding does itself
    before a C type's converter (step numbers modulo STEP_MOD)."""
    return _index(v, what)


def token(v, what, length=16):
    """A session token (LC_TOKEN_LEN bytes) from bytes or a sequence of
    byte values: ValueError for another length or a value outside a byte."""
    if isinstance(v, (int, str)) or v is None:
        raise TypeError(f"{what}: need {length} bytes, got {type(v).__name__}")
    try:
        b = bytes(v)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    except TypeError:
        raise TypeError(f"{what}: need {length} bytes, got {type(v).__name__}") from None
    if len(b) != length:
        raise ValueError(f"{what}: a token is {length} bytes, got {len(b)}")
    return b
