"""`python -m layercake info` and the runtime-library check (layercake/_deps.py).

The wheel itself is built and installed by scripts/test-wheel.sh (ctest
python.wheel, needs PyPI); these run against the build tree's library.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from layercake import _deps, _ffi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _info(*args, lib=None):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(_ffi.__file__))))
    if lib:
        env["LAYERCAKE_LIB"] = lib
    return subprocess.run([sys.executable, "-m", "layercake", "info", *args], cwd="/tmp",
                          env=env, capture_output=True, text=True, timeout=60)


def test_info_lists_version_library_transports():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(layercake VERSION ([0-9.]+)", f.read()).group(1)
    r = _info("--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["version"] == version
    assert info["library_from"] == "LAYERCAKE_LIB"
    assert os.path.samefile(info["library"], _ffi.LIBRARY_PATH)
    assert {"loop", "tcp", "shm"} <= set(info["transports"])
    # The same answer about the C module as this process's binding (a child
    # with the same environment), its file or its reason.
    assert info["speedups"] == {"loaded": _ffi.speedups is not None, "from": _ffi.SPEEDUPS_FROM}
    sonames = [x["soname"] for x in info["runtime_libraries"]]
    assert "libzmq.so.5" in sonames or not any(s.startswith("libzmq") for s in sonames)
    for x in info["runtime_libraries"]:
        assert x["file"] and os.path.exists(x["file"]), x
    text = _info()
    assert text.returncode == 0 and f"layercake {version}\n" in text.stdout
    assert re.search(r"^transports: .*tcp", text.stdout, re.M)
    assert re.search(r"^speedups: ", text.stdout, re.M)


def test_info_usage():
    r = subprocess.run([sys.executable, "-m", "layercake", "bogus"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_needed_matches_readelf():
    names = _deps.needed(_ffi.LIBRARY_PATH)
    try:
        out = subprocess.run(["readelf", "-d", _ffi.LIBRARY_PATH], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no readelf")
    assert names == re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    assert any(n.startswith("libc.so") for n in names)
    assert not any("cuda" in n for n in names), "CUDA is loaded at run time, never linked"


def test_package_names():
    assert _deps.package_of("libzmq.so.5") == "libzmq5"
    assert _deps.package_of("libucs.so.0") == "libucx0"
    assert _deps.package_of("libjson-c.so.5") == "libjson-c5"
    assert _deps.package_of("libnothing.so.1") is None


def test_missing_runtime_library_is_named(tmp_path):
    data = open(os.path.realpath(_ffi.LIBRARY_PATH), "rb").read()
    # Rename one linked library to one that does not exist, same length.
    old = next(n for n in _deps.needed(_ffi.LIBRARY_PATH) if n.startswith(("libzmq", "libucp")))
    new = "libucm.so.9" if old == "libucp.so.0" else "libzmq.so.9"
    assert len(new) == len(old)
    broken = tmp_path / "liblayercake.so"
    broken.write_bytes(data.replace(old.encode() + b"\0", new.encode() + b"\0"))
    assert _deps.missing_message(str(broken)).startswith(
        f"missing runtime libraries: {new} (Debian package {_deps.package_of(new)})")
    r = _info(lib=str(broken))
    assert r.returncode != 0
    assert f"{new} (Debian package {_deps.package_of(new)})" in r.stderr
    assert f"apt-get install {_deps.package_of(new)}" in r.stderr
    assert _deps.missing_message(_ffi.LIBRARY_PATH) == ""


# ucx:// loads UCX at run time (src/transport/ucx/dl.c, LAYERCAKE_UCX_LIB):
# without one it fails with the error that names what to install, and the
# other transports work as before in the same process.
_UCX_MISSING = """
import layercake as lc
ctx = lc.Context("d")
mem = lc.Memory(2 * 4096)
lay = lc.Layout.mha(1, 1, 4096, bases=[mem.address, mem.address + 4096])
reg = ctx.register(mem)
try:
    lc.Decode(ctx, lay, [reg], listen_url="ucx://127.0.0.1:0")
except lc.LayercakeError as e:
    print("REFUSED", e)
else:
    print("LISTENED")
d = lc.Decode(ctx, lay, [reg], listen_url="tcp://127.0.0.1:0")
print("TCP")
d.close()
ctx.close()
"""


def _python(code, **env):
    e = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(_ffi.__file__))), **env)
    return subprocess.run([sys.executable, "-c", code], cwd="/tmp", env=e, capture_output=True,
                          text=True, timeout=60)


def _has_ucx():
    return "ucx" in json.loads(_info("--json").stdout)["transports"]


def test_ucx_missing_names_what_to_install():
    if not _has_ucx():
        pytest.skip("built without the ucx transport")
    r = _python(_UCX_MISSING, LAYERCAKE_UCX_LIB="/nonexistent/libucp.so.0", LAYERCAKE_LOG="warn")
    assert r.returncode == 0, r.stderr
    assert "REFUSED" in r.stdout and "TCP" in r.stdout, r.stdout
    assert "/nonexistent/libucp.so.0" in r.stderr and "install UCX" in r.stderr, r.stderr
    i = subprocess.run([sys.executable, "-m", "layercake", "info"], cwd="/tmp", capture_output=True,
                       text=True, timeout=60,
                       env=dict(os.environ, LAYERCAKE_UCX_LIB="/nonexistent/libucp.so.0",
                                PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(_ffi.__file__)))))
    assert i.returncode == 0, i.stderr
    assert re.search(r"^ucx: not found, ucx:// cannot be used .*install UCX", i.stdout, re.M), i.stdout


def test_ucx_found_by_path():
    if not _has_ucx():
        pytest.skip("built without the ucx transport")
    try:
        import ctypes
        ctypes.CDLL("libucp.so.0")
    except OSError:
        pytest.skip("no UCX on this host")
    path = _deps._loaded_path("libucp.so.0")
    r = _python(_UCX_MISSING, LAYERCAKE_UCX_LIB=path, UCX_TLS="tcp", LAYERCAKE_LOG="warn")
    assert r.returncode == 0, r.stderr
    assert "LISTENED" in r.stdout and "TCP" in r.stdout, (r.stdout, r.stderr)
    info = json.loads(_info("--json").stdout)["ucx"]
    assert info["file"] and info["why"] is None, info
