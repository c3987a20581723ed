"""Closing a completion queue, or its Context, while other threads wait in
cq.wait (issue 43, finding 9): the waiters wake and raise LC_ERR_CLOSED,
and close returns only once they have left the library, whichever thread
closes and with or without the C module. On main the queue was freed under
a waiting thread (AddressSanitizer: heap-use-after-free in lc_cq_poll),
which then spun on freed memory until its timeout, or for ever with -1.
ctest python.asan runs this file under AddressSanitizer.

Also: a wait for fewer than one completion is a ValueError (it spun a
core for its whole timeout while a completion was queued, and for ever
with -1)."""
import threading
import time

import pytest

import layercake as lc

from test_dataplane import make_pair

def _waiters(cq, n, timeout_ms):
    """n threads waiting in cq.wait; (threads, results), once all are in."""
    results = [None] * n
    started = threading.Barrier(n + 1)

    def run(i):
        started.wait()
        try:
            results[i] = cq.wait(timeout_ms)
        except BaseException as e:  # noqa: B902 - reported by the test
            results[i] = e

    th = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in th:
        t.start()
    started.wait()
    deadline = time.monotonic() + 10
    while len(getattr(cq._node, "calls", None) or [0] * n) < n and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)  # into the library's poll(), most likely
    return th, results


@pytest.mark.parametrize("closer", ["context", "queue"])
@pytest.mark.parametrize("on", ["this thread", "another thread"])
@pytest.mark.parametrize("timeout_ms", [-1, 30000])
def test_close_wakes_the_threads_waiting_and_waits_for_them(way, closer, on, timeout_ms):
    ctx = lc.Context("closing")
    cq = ctx.completion_queue()
    th, results = _waiters(cq, 3, timeout_ms)

    def close():
        (ctx if closer == "context" else cq).close()

    t0 = time.monotonic()
    if on == "this thread":
        close()
    else:
        c = threading.Thread(target=close)
        c.start()
        c.join(20)
        assert not c.is_alive(), "close never returned"
    took = time.monotonic() - t0
    # close returned only once every waiter had left the library
    assert not getattr(cq._node, "calls", None) and cq.closed
    for t in th:
        t.join(10)
        assert not t.is_alive(), "a waiter never woke"
    for r in results:
        assert isinstance(r, lc.LayercakeError) and r.name == "LC_ERR_CLOSED", results
    assert took < 10, took
    with pytest.raises(lc.LayercakeError) as e:
        cq.wait(0)
    assert e.value.name == "LC_ERR_CLOSED"


def test_closing_races_threads_entering_wait(way):
    """Close at every moment of a waiter's way into the library: before its
    check, between the check and the call, inside. Each waiter raises
    LC_ERR_CLOSED (or returns [] if it timed out first); under ASan no read
    of the freed queue."""
    for i in range(150):
        ctx = lc.Context("race")
        cq = ctx.completion_queue()
        out = []

        def w():
            try:
                out.append(cq.wait(-1 if i % 2 else 2000))
            except lc.LayercakeError as e:
                out.append(e)

        t = threading.Thread(target=w, daemon=True)
        t.start()
        if i % 3:
            time.sleep((i % 7) * 0.0002)
        ctx.close()
        t.join(10)
        assert not t.is_alive(), f"round {i}: the waiter never woke"
        assert isinstance(out[0], lc.LayercakeError) and out[0].name == "LC_ERR_CLOSED", (i, out)


@pytest.mark.parametrize("bad", [0, -1, -(1 << 70)])
def test_max_items_below_one_is_a_value_error(way, bad):
    """With a completion queued, wait(max_items=0) spun a core for its whole
    timeout (for ever with -1) and returned nothing."""
    p = make_pair("loop://auto")
    p["rx"].grant(5, p["rreg"], 0, 1 << 20)
    p["conn"].post([(p["src"].address, p["rid"], 0, 4096)], room=5)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _readable(p["cq"].fd):
        time.sleep(0.001)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="max_items"):
        p["cq"].wait(3000, max_items=bad)
    with pytest.raises(ValueError, match="max_items"):
        p["cq"].poll(bad)
    assert time.monotonic() - t0 < 1
    got = p["cq"].wait(5000, max_items=1 << 70)  # above 64: 64
    assert len(got) == 1 and got[0]["status"] == 0
    for bad_type in (1.0, "1", None):
        with pytest.raises(TypeError, match="max_items"):
            p["cq"].wait(0, max_items=bad_type)
    p["rx"].close()
    p["tx"].close()


def _readable(fd):
    import select
    return bool(select.select([fd], [], [], 0)[0])


def test_shutdown_wakes_for_good_and_leaves_the_queue_open(way):
    """cq.shutdown() (lc_cq_shutdown), what close does first: waiters raise
    LC_ERR_CLOSED, a later wait too, at once; poll works; the handle stays open."""
    with lc.Context("shut") as ctx:
        cq = ctx.completion_queue()
        th, results = _waiters(cq, 2, -1)
        cq.shutdown()
        for t in th:
            t.join(10)
            assert not t.is_alive()
        assert all(isinstance(r, lc.LayercakeError) and r.name == "LC_ERR_CLOSED" for r in results), results
        t0 = time.monotonic()
        with pytest.raises(lc.LayercakeError) as e:
            cq.wait(-1)
        assert e.value.name == "LC_ERR_CLOSED" and time.monotonic() - t0 < 1
        assert cq.poll() == [] and not cq.closed
