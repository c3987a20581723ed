#!/usr/bin/env python3
"""P and D as two Python processes: P runs the bootstrap server and one P
rank, D discovers it, grants its pages and receives one request's KV cache
layer by layer over tcp, then checks every byte and the first token.

    python_prefill_decode.py [--url tcp://127.0.0.1:0 | shm://auto] [--layers 8]

This process is D; it starts P as a child (the same file with --role prefill)
and relays its lines. Exit status 0 when D received everything intact.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

import layercake as lc

PAGES, ITEM, ROOM, PROMPT_PAGES = 32, 8192, 42, 16


def pool(name, layers, fill):
    """A context, an MHA pool [K_0..K_{L-1}, V_0..V_{L-1}] in one allocation,
    its layout and its registration."""
    ctx = lc.Context(name)
    mem = lc.Memory(2 * layers * PAGES * ITEM)
    kv = mem.numpy().reshape(2 * layers, PAGES, ITEM)
    if fill:  # byte i of page p of buffer b: (31 b + 7 p + 13 i) mod 256
        b, p, i = np.ogrid[:2 * layers, :PAGES, :ITEM]
        kv[:] = (31 * b + 7 * p + 13 * i) % 256
    bases = [mem.address + b * PAGES * ITEM for b in range(2 * layers)]
    layout = lc.Layout.mha(layers, PAGES, ITEM, bases=bases)
    return ctx, mem, kv, layout, ctx.register(mem)


def prefill(args):
    ctx, mem, kv, layout, region = pool("prefill", args.layers, fill=True)
    with lc.BootstrapServer(host="127.0.0.1", port=0) as bs:
        p = lc.Prefill(ctx, layout, bs.addr, world_size=1, dp_size=1, engine_rank=0, metrics_server=bs)
        print(f"BOOTSTRAP {bs.addr}", flush=True)
        sender = p.sender(ROOM)
        sender.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
        print(f"P: room {ROOM} bootstrapped, D's prefix {sender.prefix_len} tokens", flush=True)
        engine, steps = p.engine, p.steps
        with engine.batch():  # one forward: its chunk first, then its layers
            engine.add_chunk(ROOM, np.arange(PROMPT_PAGES, dtype=np.int64), dst_index=0, is_last=True)
        for layer in range(args.layers):
            time.sleep(0.005)  # the layer's compute
            steps.record_cache()
            print(f"P: {layer + 1} of {args.layers} layers computed", flush=True)
        steps.record_aux()
        sender.set_metadata(b"token=1234")
        info = sender.wait(timeout=30)
        m = engine.metrics()
        print(f"P: room {ROOM} {info.status.name} {info.reason} "
              f"({m['bytes_acked']} bytes acknowledged in {m['batches_posted']} batches)", flush=True)
        sys.stdin.read()  # until D is done
        ok = info.status == lc.RoomStatus.SUCCESS
        p.close()
    ctx.close()
    return 0 if ok else 1


def decode(args):
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "prefill",
                              "--layers", str(args.layers)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        if not line.startswith("BOOTSTRAP "):
            print("P did not start", file=sys.stderr)
            return 1
        addr = line.split()[1]
        relay = threading.Thread(target=lambda: [print(x, end="", flush=True) for x in child.stdout],
                                 daemon=True)
        relay.start()
        ctx, mem, kv, layout, region = pool("decode", args.layers, fill=False)
        d = lc.Decode(ctx, layout, [region], listen_url=args.url)
        r = d.receiver(addr, ROOM)
        t0 = time.monotonic()
        r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
        pages = np.arange(PAGES - 1, PAGES - 1 - PROMPT_PAGES, -1, dtype=np.int64)  # top, reversed
        r.send(pages, prefix_len=0, aux_index=0)
        seen = 0
        while not r.status.final and time.monotonic() - t0 < 30:
            ready = r.layers_ready
            if ready > seen:
                print(f"D: {ready} of {args.layers} layers landed", flush=True)
                seen = ready
            time.sleep(0.0002)
        info = r.poll()
        print(f"D: room {ROOM} {info.status.name} {info.reason} ({(time.monotonic() - t0) * 1e3:.1f} ms)",
              flush=True)
        b, i = np.ogrid[:2 * args.layers, :ITEM]
        good = info.status == lc.RoomStatus.SUCCESS and all(
            np.array_equal(kv[:, pages[j]], ((31 * b + 7 * j + 13 * i) % 256).astype(np.uint8))
            for j in range(PROMPT_PAGES))
        untouched = not kv[:, :PAGES - PROMPT_PAGES].any()
        meta = r.metadata() if info.status == lc.RoomStatus.SUCCESS else b""
        good = good and untouched and meta == b"token=1234"
        print(f"D: {'every byte verified' if good else 'MISMATCH'}: {PROMPT_PAGES} pages x "
              f"{2 * args.layers} buffers x {ITEM} bytes, metadata {meta.decode()!r}", flush=True)
        r.close()
        d.close()
        ctx.close()
        child.stdin.close()
        p_rc = child.wait(timeout=30)
        relay.join(5)
        print("OK" if good and p_rc == 0 else "FAILED", flush=True)
        return 0 if good and p_rc == 0 else 1
    finally:
        if child.poll() is None:
            child.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="tcp://127.0.0.1:0", help="D's data-plane listener")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--role", choices=("decode", "prefill"), default="decode")
    args = ap.parse_args()
    return prefill(args) if args.role == "prefill" else decode(args)


if __name__ == "__main__":
    sys.exit(main())
