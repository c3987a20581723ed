"""The libraries liblayercake.so links, and where they come from.

`make wheel`'s manylinux wheel carries what the library links (ZeroMQ,
libmicrohttpd, libcurl, json-c) in layercake.libs/ beside the package, with
their own sonames (auditwheel): they come from the wheel. A library built
here (`pip install .`, `make install`) links the system's, Debian's runtime
packages (no -dev package is needed to run). When the library cannot be
loaded, _ffi.py asks here which of them are missing and names the packages;
`python -m layercake info` lists each one with the file the loader found.
UCX is never linked: ucx:// loads it at run time (ucx() says which one).
Needs nothing but the standard library and never loads liblayercake itself.
"""
import ctypes
import os
import struct

# Library name (its soname up to ".so") -> the Debian package (bookworm)
# that holds it. docs/python.md, "Installing", lists the same.
DEBIAN_PACKAGES = {
    "libzmq": "libzmq5",
    "libmicrohttpd": "libmicrohttpd12",
    "libcurl": "libcurl4",
    "libjson-c": "libjson-c5",
    "libucp": "libucx0",
    "libucs": "libucx0",
    "libuct": "libucx0",
    "libucm": "libucx0",
}
# The C library's own parts: always there, not worth listing.
_LIBC = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "ld-linux")


def needed(path):
    """The DT_NEEDED sonames of an ELF64 little-endian shared object, in order."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _name, sh_type, _fl, _addr, off, size, link, _info, _al, entsize in sections:
        if sh_type != 6:  # SHT_DYNAMIC
            continue
        stroff = sections[link][4]
        for i in range(size // (entsize or 16)):
            tag, val = struct.unpack_from("<qQ", data, off + i * 16)
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", stroff + val)
                names.append(data[stroff + val:end].decode())
    return names


def package_of(soname):
    """The Debian package holding `soname`, or None when it is not one we know."""
    return DEBIAN_PACKAGES.get(soname.split(".so", 1)[0])


# Where auditwheel puts a wheel's libraries: <site>/layercake.libs/.
WHEEL_LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "layercake.libs")


def bundled(path):
    """Whether the file `path` is one of the wheel's own libraries."""
    return bool(path) and os.path.dirname(os.path.realpath(path)) == os.path.realpath(WHEEL_LIBS)


UCX_INSTALL = ("install UCX (Debian/Ubuntu: apt-get install libucx0; RHEL: dnf install ucx; "
               "or pip install libucx-cu12) or set LAYERCAKE_UCX_LIB to a libucp.so")


def ucx():
    """(file or None, what was asked for, error or None): the UCX that ucx://
    would load (LAYERCAKE_UCX_LIB, else libucp.so.0 on the loader's path;
    src/transport/ucx/dl.c). Loads it into this process to find out."""
    want = os.environ.get("LAYERCAKE_UCX_LIB") or "libucp.so.0"
    try:
        ctypes.CDLL(want)
    except OSError as e:
        return None, want, f"{e}: {UCX_INSTALL}"
    return _loaded_path(os.path.basename(want)) or want, want, None


def _loaded_path(soname):
    """Where the loader found `soname` in this process (after a successful load)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split(None, 5)[-1].strip()
                if os.path.basename(p) == soname or os.path.basename(p).startswith(soname + "."):
                    return p
    except OSError:
        pass
    return None


def check(path):
    """[(soname, Debian package or None, found file or None, error or None)] for
    every library `path` links beyond the C library itself. Loads each one on
    its own (never `path`), so it says which are missing even when `path`
    itself cannot be loaded."""
    out = []
    for soname in needed(path):
        if soname.startswith(_LIBC):
            continue
        try:
            ctypes.CDLL(soname)
            out.append((soname, package_of(soname), _loaded_path(soname), None))
        except OSError as e:
            out.append((soname, package_of(soname), None, str(e)))
    return out


def missing_message(path):
    """A line naming the libraries `path` needs that the loader cannot find and
    the Debian packages to install, or "" when none is missing."""
    try:
        gone = [(s, p) for s, p, _f, err in check(path) if err]
    except (OSError, ValueError):
        return ""
    if not gone:
        return ""
    pkgs = sorted({p for _s, p in gone if p})
    text = "missing runtime libraries: " + ", ".join(
        f"{s} (Debian package {p})" if p else s for s, p in gone)
    if pkgs:
        text += "; install them: apt-get install " + " ".join(pkgs)
    return text
