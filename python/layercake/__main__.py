"""`python -m layercake info [--json]`: what this installation is.

The version, the package and the library it loaded (and from where: the
package's own copy from the wheel, $LAYERCAKE_LIB, an installed prefix), the
transports built into that library, the C module or why the ctypes way is
taken, whether CUDA and UCX were found at run time, and each runtime library
it links with the file the loader found and where it comes from: the wheel
(layercake.libs/) or its Debian package. If a runtime library is missing,
`import layercake` already fails with a message naming it and its Debian
package (_ffi.py, _deps.py).
"""
import json
import os
import sys

from . import _deps, _ffi, gpu
from .core import transports, version

USAGE = "usage: python -m layercake info [--json]"


def info():
    cuda = gpu.cuda_info()
    return {
        "version": version(),
        "package": os.path.dirname(os.path.abspath(__file__)),
        "library": os.path.realpath(_ffi.LIBRARY_PATH) if os.path.exists(_ffi.LIBRARY_PATH)
        else _ffi.LIBRARY_PATH,
        "library_from": _ffi.LIBRARY_SOURCE,
        # The C module of post/poll/wait: its file, or why the ctypes way is used.
        "speedups": {"loaded": _ffi.speedups is not None, "from": _ffi.SPEEDUPS_FROM},
        "transports": transports(),
        "cuda": {"found": cuda.found, "devices": cuda.device_count, "library": cuda.library,
                 "why": cuda.why},
        "ucx": dict(zip(("file", "wanted", "why"), _deps.ucx())),
        "runtime_libraries": [{"soname": s, "debian": p, "file": f, "error": e,
                               "bundled": _deps.bundled(f)}
                              for s, p, f, e in _runtime_libraries()],
    }


def _runtime_libraries():
    try:
        return _deps.check(_ffi.LIBRARY_PATH)
    except (OSError, ValueError):  # a library found on the loader's path by name only
        return []


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "info" or any(a not in ("--json",) for a in argv[1:]):
        print(USAGE, file=sys.stderr)
        return 2
    i = info()
    if "--json" in argv:
        print(json.dumps(i))
        return 0
    print(f"layercake {i['version']}")
    print(f"package: {i['package']}")
    print(f"library: {i['library']} ({i['library_from']})")
    print(f"transports: {','.join(i['transports'])}")
    sp = i["speedups"]
    print(f"speedups: {sp['from']}" if sp["loaded"] else f"speedups: none, the ctypes way ({sp['from']})")
    c = i["cuda"]
    print(f"cuda: found, {c['devices']} device(s) ({c['library']})" if c["found"]
          else f"cuda: not found ({c['why']}): host memory only")
    u = i["ucx"]
    if "ucx" in i["transports"]:
        print(f"ucx: {u['file']}" if u["file"] else f"ucx: not found, ucx:// cannot be used ({u['why']})")
    print("runtime libraries (from the wheel or their Debian packages):")
    w = max([22] + [len(r["soname"]) for r in i["runtime_libraries"]])
    for r in i["runtime_libraries"]:
        where = r["file"] or f"MISSING: {r['error']}"
        print(f"  {r['soname']:<{w}} {'wheel' if r['bundled'] else r['debian'] or '-':<16} {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
