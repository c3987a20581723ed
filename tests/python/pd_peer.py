"""The P side of the end-to-end tests, run as its own process:

    pd_peer.py api|adapter ROOMS CHUNKS PREFIX_PAGES [expect]

It starts a bootstrap server and one P rank, prints "BOOTSTRAP host:port",
streams ROOMS rooms (room ids 100..) in CHUNKS chunked-prefill forwards each
layer by layer, prints "P room <id> <status> <reason>" per room, then waits
for stdin to close. `api` uses the plain Prefill/Sender API, `adapter` the
TokenSpeed-style manager (layercake.tokenspeed). Exit 0 when every room
reached `expect` (SUCCESS by default). Shared helpers for the D side too.
"""
import os
import select
import sys
import time
import types

import numpy as np

import layercake as lc

LAYERS, PAGES, ITEM, TOTAL, TOKENS_PER_PAGE = 4, 64, 2048, 8, 16
ROOM0 = 100
LAYER_SLEEP = float(os.environ.get("PD_PEER_LAYER_SLEEP", "0.002"))  # a layer's "compute"


def child_env():
    """The environment for a child Python process: it finds this package,
    these helpers and LAYERCAKE_LIB (when set) as the tests do."""
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.abspath(os.path.join(here, "..", "..", "python"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([pkg, here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def readline_within(stream, timeout):
    """One line from a child's pipe, or '' if none comes within timeout."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


def pattern(nbuf, page_ids):
    """Bytes of the given P pages of every buffer: (nbuf, len(pages), ITEM)."""
    b, p, i = np.ogrid[:nbuf, :len(page_ids), :ITEM]
    pid = np.asarray(page_ids, dtype=np.int64)[None, :, None]
    return ((31 * b + 7 * pid + 13 * i) % 256).astype(np.uint8)


def p_pages(k):
    """P's occupied pages of room index k (all of its prompt)."""
    return np.arange(k * TOTAL, (k + 1) * TOTAL, dtype=np.int64)


def d_pages(k, prefix_pages):
    """D's pages for room index k after its prefix hit: from the top, reversed."""
    n = TOTAL - prefix_pages
    top = PAGES - 1 - k * TOTAL
    return np.arange(top, top - n, -1, dtype=np.int64)


def kv_args(fill):
    """A TokenSpeed-style KVArgs over one allocation: MHA, LAYERS layers."""
    nbuf = 2 * LAYERS
    mem = lc.Memory(nbuf * PAGES * ITEM)
    kv = mem.numpy().reshape(nbuf, PAGES, ITEM)
    if fill:
        kv[:] = pattern(nbuf, np.arange(PAGES))
    args = types.SimpleNamespace(
        kv_data_ptrs=[mem.address + b * PAGES * ITEM for b in range(nbuf)],
        kv_data_lens=[PAGES * ITEM] * nbuf, kv_item_lens=[ITEM] * nbuf,
        offsets=[[l, LAYERS + l] for l in range(LAYERS)], target_layer_num=LAYERS, draft_layer_num=0,
        engine_rank=0)
    return mem, kv, args


def windows(prefix_pages, chunks):
    """TokenSpeed's chunk windows (spec 2.3): (start, end) over P's pages,
    index_slice = [start - dpp, end - dpp)."""
    n = TOTAL - prefix_pages
    per = n // chunks
    out, s = [], prefix_pages
    for c in range(chunks):
        e = TOTAL if c == chunks - 1 else s + per
        out.append((s, e))
        s = e
    return out


def run_api(addr_out, rooms, chunks, prefix_pages, expect):
    mem, kv, args = kv_args(fill=True)
    ctx = lc.Context("p")
    ctx.register(mem)
    layout = lc.Layout.mha(LAYERS, PAGES, ITEM, bases=args.kv_data_ptrs)
    bs = lc.BootstrapServer()
    p = lc.Prefill(ctx, layout, bs, metrics_server=bs)
    addr_out(bs.addr)
    senders = [p.sender(ROOM0 + k) for k in range(rooms)]
    for s in senders:
        s.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
    e = p.engine
    for c in range(chunks):
        with e.batch():
            for k, s in enumerate(senders):
                if s.status == lc.RoomStatus.FAILED:
                    continue
                dpp = s.prefix_len // TOKENS_PER_PAGE
                start, end = windows(dpp, chunks)[c]
                e.add_chunk(s.room, p_pages(k)[start:end], start - dpp, c == chunks - 1)
        for _ in range(LAYERS):
            time.sleep(LAYER_SLEEP)
            p.steps.record_cache()
        p.steps.record_aux()
    for s in senders:
        try:
            s.set_metadata(b"room=%d" % s.room)
        except lc.LayercakeError:
            pass  # the room ended (a D cancelled it)
    return finish([(s.room, s.wait) for s in senders], expect, lambda: (p.close(), bs.close(), ctx.close()))


def run_adapter(addr_out, rooms, chunks, prefix_pages, expect):
    from layercake import tokenspeed as ts

    mem, kv, args = kv_args(fill=True)
    bs = lc.BootstrapServer()
    server_args = types.SimpleNamespace(disaggregation_layerwise_interval=2,
                                        disaggregation_bootstrap_port=bs.port)
    mgr = ts.LayercakeKVManager(args, ts.DisaggregationMode.PREFILL, server_args)
    sc = ts.StepCounter()
    mgr.register_step_counter(sc)
    addr_out(bs.addr)
    senders = [ts.LayercakeKVSender(mgr, bs.addr, ROOM0 + k) for k in range(rooms)]
    deadline = time.monotonic() + 30
    while any(s.poll() == ts.TransferPoll.Bootstrapping for s in senders) and time.monotonic() < deadline:
        time.sleep(0.001)
    for c in range(chunks):
        with mgr.add_batch(is_idle=False):
            for k in range(rooms):
                room = ROOM0 + k
                dpp = (mgr.get_decode_prefix_len(room) or 0) // TOKENS_PER_PAGE
                start, end = windows(dpp, chunks)[c]
                last = c == chunks - 1
                mgr.add_transfer_request(room, p_pages(k)[start:end], slice(start - dpp, end - dpp), last,
                                         aux_index=k if last else None)
        with mgr.add_batch(is_idle=True):  # an idle batch in between reserves nothing
            pass
        for _ in range(LAYERS):
            time.sleep(LAYER_SLEEP)
            sc.record_cache()
        sc.record_aux()
    for k in range(rooms):
        mgr.set_prefill_metadata(ROOM0 + k, 1000 + k, [k, k + 1])

    def waiter(room):
        def wait(timeout):
            end = time.monotonic() + timeout
            while mgr.check_status(room) not in (ts.TransferPoll.Success, ts.TransferPoll.Failed) \
                    and time.monotonic() < end:
                time.sleep(0.001)
            st = mgr.check_status(room)
            return types.SimpleNamespace(status=lc.RoomStatus(int(st)), reason=mgr.failure_records.get(room, ""))
        return wait

    return finish([(ROOM0 + k, waiter(ROOM0 + k)) for k in range(rooms)], expect,
                  lambda: (mgr.close(), bs.close()))


def finish(waits, expect, close):
    ok = True
    for room, wait in waits:
        info = wait(timeout=30)
        print(f"P room {room} {info.status.name} {info.reason}", flush=True)
        ok = ok and info.status.name == expect
    sys.stdin.read()
    close()
    return 0 if ok else 1


def main(argv):
    mode, rooms, chunks, prefix = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    expect = argv[5] if len(argv) > 5 else "SUCCESS"

    def addr_out(a):
        print(f"BOOTSTRAP {a}", flush=True)

    run = run_api if mode == "api" else run_adapter
    return run(addr_out, rooms, chunks, prefix, expect)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
