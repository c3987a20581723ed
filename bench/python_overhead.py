#!/usr/bin/env python3
"""Per-request Python cost of the TokenSpeed adapter (layercake.tokenspeed)
against the seed's MooncakeAsyncKVManager, on the request shapes of
../shared/tools/seed_planner_cost.py (same page arrays: scattered runs,
numpy seed 0).

    LAYERCAKE_LIB=build/liblayercake.so PYTHONPATH=python /usr/bin/python3 bench/python_overhead.py [SEED]

For one request (one chunk carrying all its pages, is_last):
  seed_sched_us   add_batch + add_transfer_request on the scheduler thread
  seed_worker_us  the seed worker's planning for the request (coalescing,
                  one (src, dst, len) descriptor per buffer and run for
                  every layer), Python holding the GIL, transfer engine stubbed
  adapter_us      add_batch + add_transfer_request + one check_status: all
                  the Python the adapter runs per request (wall time); the
                  planning and the writes run in C on the engine thread,
                  without the GIL. Back to back, batch_begin/batch_end also
                  wait for the engine's lock while its thread takes the
                  previous batch in (a real forward separates them):
  adapter_cpu_us  the same, CPU time of the calling thread (no lock waits)
  seed_cpu_us     seed_sched_us + seed_worker_us as CPU time; cpu_ratio is
                  seed_cpu_us / adapter_cpu_us
  records_us      per forward, not per request: layer_num record_cache + one
                  record_aux through the adapter's StepCounter (a CPU
                  producer; a GPU producer writes the counter words instead)
Rooms are opened beforehand (not timed, on either side). The adapter's rooms
have a dummy destination, so nothing is written: the figure is the Python
path alone. Prints one machine-readable line per shape; asserts nothing.
"""
import mmap
import os
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import seed_harness  # noqa: E402

import layercake as lc  # noqa: E402
from layercake import tokenspeed as ts  # noqa: E402

SHAPES = [("dsv3-mla-8k-tok-page64", 61, 1, 128, 4, 64 * 656 * 2),
          ("llama70b-mha-32k-tok-page16", 80, 2, 2048, 8, 16 * 8 * 128 * 2),
          ("llama8b-mha-4k-tok-page1", 32, 2, 4096, 16, 8 * 128 * 2)]
SEED_REPS, ADAPTER_REPS = 20, 200
BENCH_ITEM = 64  # the adapter's pool item length: its Python path never touches bytes


def pages_of(pages, run_len):
    rng = np.random.default_rng(0)
    starts = rng.choice(100000, size=pages // run_len, replace=False) * run_len
    src = np.concatenate([np.arange(s, s + run_len) for s in starts]).astype(np.int64)
    dst = np.concatenate([np.arange(s, s + run_len) for s in rng.permutation(starts)]).astype(np.int64)
    return src, dst


class StubEngine:
    def __init__(self):
        self.n = 0

    def batch_transfer_sync(self, sid, src, dst, lens):
        self.n += len(src)
        return 0


def seed_cost(seed, layers, bpl, pages, run_len, item):
    m = seed_harness.seed_manager(seed, layers)
    nbuf = layers * bpl
    m.kv_args = types.SimpleNamespace(kv_data_ptrs=[(i + 1) << 40 for i in range(nbuf)], kv_item_lens=[item] * nbuf)
    m.offsets = [[l * bpl + j for j in range(bpl)] for l in range(layers)]
    m.decode_kv_args_table = {"s:1": types.SimpleNamespace(dst_kv_ptrs=[(i + 1) << 44 for i in range(nbuf)])}
    m.engine = StubEngine()
    src, dst = pages_of(pages, run_len)
    for r in range(SEED_REPS):
        m.update_status(r, seed_harness.TransferPoll.Bootstrapping)
        m.transfer_infos[r] = {"10.0.0.2:7001": object()}
        m.update_status(r, seed_harness.TransferPoll.Bootstrapped)
    t0, c0 = time.perf_counter(), time.thread_time()
    for r in range(SEED_REPS):
        with m.add_batch(False):
            m.add_transfer_request(r, src, slice(0, len(src)), True, aux_index=0)
    t1 = time.perf_counter()
    for _ in range(SEED_REPS):
        pb, db = seed_harness.group_concurrent_contiguous(src, dst)
        for layer in range(layers):
            m.submit_layer_cache("s:1", layer, layer + 1, pb, db)
    t2, c2 = time.perf_counter(), time.thread_time()
    assert len(m.transfer_queues[0].items) == SEED_REPS
    n = SEED_REPS
    return (t1 - t0) / n, (t2 - t1) / n, (c2 - c0) / n, m.engine.n // n


def adapter_cost(layers, bpl, pages, run_len):
    src, _ = pages_of(pages, run_len)
    pool = int(src.max()) + 1
    nbuf = layers * bpl
    space = mmap.mmap(-1, nbuf * pool * BENCH_ITEM)  # virtual; never touched
    base = np.frombuffer(space, dtype=np.uint8).ctypes.data
    bases = [base + b * pool * BENCH_ITEM for b in range(nbuf)]
    model = lc.Model.MHA if bpl == 2 else lc.Model.MLA
    item_lens = (BENCH_ITEM, BENCH_ITEM) if bpl == 2 else (BENCH_ITEM,)
    layout = lc.Layout.build(model, layers, pool, item_lens, bases=bases)
    ctx = lc.Context("bench")
    ctx.register(lc.RawMemory(base, nbuf * pool * BENCH_ITEM))
    bs = lc.BootstrapServer()
    mgr = ts.LayercakeKVManager(None, "prefill", ctx=ctx, layout=layout, bootstrap=bs.addr)
    sc = mgr.register_step_counter(ts.StepCounter())
    rooms = range(1, ADAPTER_REPS + 1)
    for r in rooms:
        mgr.update_status(r, ts.TransferPoll.Bootstrapping)
        mgr.engine.room_dst_add(r, dummy=True)
    t0, c0 = time.perf_counter(), time.thread_time()
    for r in rooms:
        with mgr.add_batch(False):
            mgr.add_transfer_request(r, src, slice(0, len(src)), True, aux_index=0)
        mgr.check_status(r)
    t1, c1 = time.perf_counter(), time.thread_time()
    for _ in rooms:
        for _ in range(layers):
            sc.record_cache()
        sc.record_aux()
    t2 = time.perf_counter()
    queued = mgr.metrics()["chunks_added"]
    mgr.close()
    bs.close()
    ctx.close()
    del layout
    n = ADAPTER_REPS
    return (t1 - t0) / n, (c1 - c0) / n, (t2 - t1) / n, queued


def main():
    seed = seed_harness.load_seed(sys.argv[1] if len(sys.argv) > 1 else None)
    if seed is None:
        print("python-overhead: seed not found (../shared/seed/async_conn.py or $LAYERCAKE_SEED): "
              "adapter figures only", file=sys.stderr)
    print(f"# python {sys.version.split()[0]} numpy {np.__version__} layercake {lc.version()}")
    for name, layers, bpl, pages, run_len, item in SHAPES:
        a_us, a_cpu, rec_us, queued = adapter_cost(layers, bpl, pages, run_len)
        line = (f"python-overhead {name} adapter_us={a_us * 1e6:.1f} adapter_cpu_us={a_cpu * 1e6:.1f}"
                f" records_us={rec_us * 1e6:.1f}")
        if seed is not None:
            sched, worker, s_cpu, ndesc = seed_cost(seed, layers, bpl, pages, run_len, item)
            line += (f" seed_sched_us={sched * 1e6:.1f} seed_worker_us={worker * 1e6:.1f}"
                     f" seed_total_us={(sched + worker) * 1e6:.1f} seed_cpu_us={s_cpu * 1e6:.1f}"
                     f" seed_descriptors={ndesc} cpu_ratio={s_cpu / a_cpu:.0f}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
