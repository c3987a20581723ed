"""layercake._speedups (python/speedups/speedups.c): the C module of post,
poll and wait. Built, it is the way those calls go, and it must answer
exactly as the ctypes way does; every value it does not convert goes the
ctypes way."""
import os
import re
import threading

import pytest

import layercake as lc
from layercake import _ffi, core

from test_dataplane import _reap, make_pair

fast = _ffi.speedups
needs_fast = pytest.mark.skipif(fast is None, reason=f"layercake._speedups: {_ffi.SPEEDUPS_FROM}")


def test_the_module_beside_the_library_is_the_one_in_use():
    """A build that made the module must load it: a silent fall back (a
    layout mismatch, an import error) would leave every user on the slow
    way unnoticed. The reason is said either way."""
    lib_dir = os.path.dirname(os.path.realpath(_ffi.LIBRARY_PATH))
    built = os.path.exists(os.path.join(lib_dir, _ffi.SPEEDUPS_NAME))
    if os.environ.get("LAYERCAKE_SPEEDUPS") == "0":
        assert fast is None and "LAYERCAKE_SPEEDUPS=0" in _ffi.SPEEDUPS_FROM
    elif built:
        assert fast is not None, _ffi.SPEEDUPS_FROM
        assert core._fast is fast
    else:
        pytest.skip("no module built beside " + _ffi.LIBRARY_PATH)
    assert _ffi.SPEEDUPS_FROM


@needs_fast
def test_values_it_does_not_convert_are_left_to_ctypes():
    """None, never a guess and never a Python error left set, for each value
    the module does not take; a call that converts reaches the library."""
    p = make_pair("loop://auto")
    h = p["conn"]._need()
    w = [(p["src"].address, p["rid"], 0, 4096)]
    for args in [
        (h, "not writes", 1, 0, 0, 0, 0),
        (h, [(1, 2, 3)], 1, 0, 0, 0, 0),                  # 3 values
        (h, [(1, 2, 3, 4, 5)], 1, 0, 0, 0, 0),            # 5 values
        (h, [(-1, p["rid"], 0, 4096)], 1, 0, 0, 0, 0),    # negative address
        (h, [(1, 1 << 32, 0, 4096)], 1, 0, 0, 0, 0),      # region beyond u32
        (h, [(1.5, p["rid"], 0, 4096)], 1, 0, 0, 0, 0),   # a float
        (h, [object()], 1, 0, 0, 0, 0),
        (h, w, -1, 0, 0, 0, 0),                           # room
        (h, w, 1, 1 << 32, 0, 0, 0),                      # tag
        (h, w, 1, 0, 0, 1 << 63, 0),                      # timeout beyond i64
        (h, w, 1, 0, 0, 0, 1 << 64),                      # user_data
        (-1, w, 1, 0, 0, 0, 0),                           # handle
    ]:
        assert fast.post(*args) is None, args
    # At most how many: above its stack's 64, 64 (as _convert.at_least_one says);
    # below 1 it is left to the binding, which raises ValueError.
    assert fast.poll(p["cq"]._need(), 65) == [] and fast.poll(p["cq"]._need(), 1 << 100) == []
    assert fast.poll(p["cq"]._need(), 0) is None and fast.poll(p["cq"]._need(), -1) is None
    assert fast.wait(p["cq"]._need(), 0, 0) is None and fast.wait(p["cq"]._need(), -(1 << 100), 0) is None
    assert fast.wait(-5, 1, 0) is None
    assert fast.poll(p["cq"]._need(), 2.5) is None and fast.wait(p["cq"]._need(), 1, 1 << 40) is None
    assert fast.wait(p["cq"]._need(), 1, "soon") is None
    with pytest.raises(TypeError):
        fast.post(h, w)  # too few arguments: Python's own error

    class Shrinks:  # an __index__ that empties the list being read
        def __index__(self):
            evil.clear()
            return p["src"].address
    evil = [(Shrinks(), p["rid"], 0, 4096), (p["src"].address, p["rid"], 4096, 4096)]
    assert fast.post(h, evil, 1, 0, 0, 0, 0) is None and evil == []
    # Converts, and the library answers: no grant for room 1 yet.
    bid = fast.post(h, w, 1, 0, 0, 0, 0)
    assert isinstance(bid, int) and bid >= 0
    c = p["cq"].wait(5000)
    assert c[0]["batch_id"] == bid and lc.err_name(c[0]["status"]) == "LC_ERR_GRANT"
    # The library's own negative code comes back as it is (unknown flags).
    rc = fast.post(h, w, 1, 0, 0x80, 0, 0)
    assert lc.err_name(rc) == "LC_EINVAL"
    assert "unknown flags" in lc.errors._reason(rc)  # recorded on this thread
    p["rx"].close()
    p["tx"].close()


@needs_fast
def test_completions_read_the_same_both_ways(monkeypatch):
    """Every field of a completion, a failure's reason included, as the
    ctypes way reads it from the same kind of batch."""
    p = make_pair("loop://auto")
    p["rx"].grant(4, p["rreg"], 0, 1 << 20)
    src, rid, conn, cq = p["src"].address, p["rid"], p["conn"], p["cq"]

    def round_(way):
        if way == "ctypes":
            monkeypatch.setattr(core, "_fast", None)
        else:
            monkeypatch.setattr(core, "_fast", fast)
        off = 0 if way == "ctypes" else 4096  # a page each: no write lands twice
        ok = conn.post([(src, rid, off, 4096)], room=4, tag=11, user_data=(1 << 64) - 1)
        bad = conn.post([(src, rid, off, 4096)], room=77, tag=12, user_data=3)
        got = {c["batch_id"]: c for c in _reap(cq, 2)}
        assert cq.poll() == [] and cq.wait(0) == []
        return got[ok], got[bad]

    a, b = round_("speedups"), round_("ctypes")
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            if k not in ("batch_id", "latency_ns"):  # the reason names its write
                assert re.sub(r"write \d+|offset \d+", "", str(x[k])) == \
                    re.sub(r"write \d+|offset \d+", "", str(y[k])), (k, x, y)
    assert a[0]["user_data"] == (1 << 64) - 1 and a[0]["status"] == 0 and a[0]["reason"] == ""
    assert "room 77" in a[1]["reason"]
    p["rx"].close()
    p["tx"].close()
    with pytest.raises(lc.LayercakeError):  # closed: the binding's own check, first
        cq.poll()


@needs_fast
def test_large_batches_and_threads_waiting_on_one_queue():
    """A batch beyond the module's stack (heap) lands whole; threads
    waiting on one queue each get completions of their own (the module
    reads each into its own stack), none twice, none lost."""
    p = make_pair("loop://auto")
    p["rx"].grant(5, p["rreg"], 0, 4 << 20)
    src, rid, conn, cq = p["src"].address, p["rid"], p["conn"], p["cq"]
    big = [(src + i * 4096, rid, i * 4096, 4096) for i in range(200)]
    bid = conn.post(big, room=5)
    c = _reap(cq, 1)[0]
    assert c["batch_id"] == bid and c["status"] == 0 and c["bytes"] == 200 * 4096
    assert bytes(p["src"].numpy()[:200 * 4096]) == bytes(p["dst"].numpy()[:200 * 4096])

    n, seen, lock, errs = 400, [], threading.Lock(), []

    def waiter():
        try:
            while True:
                with lock:
                    if len(seen) >= n:
                        return
                for c in cq.wait(20, max_items=3):
                    with lock:
                        seen.append((c["batch_id"], c["user_data"], c["status"]))
        except Exception as ex:  # pragma: no cover - reported below
            errs.append(ex)

    th = [threading.Thread(target=waiter, daemon=True) for _ in range(3)]
    for t in th:
        t.start()
    ids = {conn.post([(src + (i % 256) * 4096, rid, (i % 256) * 4096, 4096)], room=5, user_data=i): i
           for i in range(n)}
    for t in th:
        t.join(30)
    assert not errs, errs
    assert sorted(b for b, _, _ in seen) == sorted(ids)
    assert all(ids[b] == ud and st == 0 for b, ud, st in seen)
    p["rx"].close()
    p["tx"].close()


def test_a_module_that_cannot_be_used_is_said_once(tmp_path):
    """A module beside the library that does not load (here: not an ELF
    file) leaves the ctypes way in use, with a warning that names the file."""
    import shutil
    import subprocess
    import sys
    shutil.copyfile(os.path.realpath(_ffi.LIBRARY_PATH), tmp_path / "liblayercake.so")
    (tmp_path / _ffi.SPEEDUPS_NAME).write_bytes(b"not a module")
    env = dict(os.environ, LAYERCAKE_LIB=str(tmp_path / "liblayercake.so"))
    env.pop("LAYERCAKE_SPEEDUPS", None)
    r = subprocess.run([sys.executable, "-c", "import layercake._ffi as f; print(f.speedups is None)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
    assert "RuntimeWarning" in r.stderr and str(tmp_path / _ffi.SPEEDUPS_NAME) in r.stderr, r.stderr
