#!/usr/bin/env python3
"""P and D as two Python processes with nothing but the standard library and
an installed layercake (no numpy): the bare host's check of the wheel
(scripts/test-bare-host.sh). P runs the bootstrap server and one P rank; D
discovers it, grants its pages and receives one request's KV cache layer by
layer over the URL given, then checks every byte, that no other page was
written, and the metadata.

    bare_pd.py [--url tcp://127.0.0.1:0 | shm://auto] [--layers 8]

This process is D; it starts P as a child (the same file, --role prefill)
and relays its lines. Prints OK and exits 0 when D received everything intact.
"""
import argparse
import array
import os
import subprocess
import sys
import threading
import time

import layercake as lc

PAGES, ITEM, ROOM, PROMPT_PAGES = 32, 8192, 42, 16
DEADLINE_S = 30
# Byte i of page p of buffer b: (31 b + 7 p + 13 i) mod 256.
_ROW = bytes((13 * i) % 256 for i in range(ITEM))


def page_bytes(b, p):
    c = (31 * b + 7 * p) % 256
    return _ROW.translate(bytes((x + c) % 256 for x in range(256)))


def pool(name, layers, fill):
    """A context, an MHA pool [K_0..K_{L-1}, V_0..V_{L-1}] in one allocation,
    its view, layout and registration."""
    ctx = lc.Context(name)
    mem = lc.Memory(2 * layers * PAGES * ITEM)
    view = mem.view
    if fill:
        for b in range(2 * layers):
            for p in range(PAGES):
                off = (b * PAGES + p) * ITEM
                view[off:off + ITEM] = page_bytes(b, p)
    bases = [mem.address + b * PAGES * ITEM for b in range(2 * layers)]
    layout = lc.Layout.mha(layers, PAGES, ITEM, bases=bases)
    return ctx, mem, view, layout, ctx.register(mem)


def prefill(args):
    ctx, mem, view, layout, region = pool("prefill", args.layers, fill=True)
    with lc.BootstrapServer(host="127.0.0.1", port=0) as bs:
        p = lc.Prefill(ctx, layout, bs.addr, world_size=1, dp_size=1, engine_rank=0, metrics_server=bs)
        print(f"BOOTSTRAP {bs.addr}", flush=True)
        sender = p.sender(ROOM)
        sender.wait(timeout=DEADLINE_S, until=lc.RoomStatus.BOOTSTRAPPED)
        engine, steps = p.engine, p.steps
        with engine.batch():  # one forward: its chunk first, then its layers
            engine.add_chunk(ROOM, array.array("q", range(PROMPT_PAGES)), dst_index=0, is_last=True)
        for layer in range(args.layers):
            steps.record_cache()
            print(f"P: {layer + 1} of {args.layers} layers computed", flush=True)
        steps.record_aux()
        sender.set_metadata(b"token=1234")
        info = sender.wait(timeout=DEADLINE_S)
        print(f"P: room {ROOM} {info.status.name} {info.reason}", flush=True)
        sys.stdin.read()  # until D is done
        ok = info.status == lc.RoomStatus.SUCCESS
        p.close()
    del view
    ctx.close()
    return 0 if ok else 1


def decode(args):
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "prefill",
                              "--layers", str(args.layers)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        if not line.startswith("BOOTSTRAP "):
            print("P did not start", file=sys.stderr)
            return 1
        addr = line.split()[1]
        relay = threading.Thread(target=lambda: [print(x, end="", flush=True) for x in child.stdout],
                                 daemon=True)
        relay.start()
        ctx, mem, view, layout, region = pool("decode", args.layers, fill=False)
        d = lc.Decode(ctx, layout, [region], listen_url=args.url)
        r = d.receiver(addr, ROOM)
        t0 = time.monotonic()
        r.wait(timeout=DEADLINE_S, until=lc.RoomStatus.BOOTSTRAPPED)
        pages = list(range(PAGES - 1, PAGES - 1 - PROMPT_PAGES, -1))  # the top ones, reversed
        r.send(array.array("q", pages), prefix_len=0, aux_index=0)
        seen = 0
        while not r.status.final and time.monotonic() - t0 < DEADLINE_S:
            ready = r.layers_ready
            if ready > seen:
                print(f"D: {ready} of {args.layers} layers landed", flush=True)
                seen = ready
            time.sleep(0.0002)
        info = r.poll()
        print(f"D: room {ROOM} {info.status.name} {info.reason}", flush=True)
        good = info.status == lc.RoomStatus.SUCCESS
        bad = 0
        for b in range(2 * args.layers):
            for j, p in enumerate(pages):  # P's page j landed in D's page pages[j]
                off = (b * PAGES + p) * ITEM
                bad += view[off:off + ITEM] != page_bytes(b, j)
            for p in range(PAGES - PROMPT_PAGES):  # never granted: still zero
                off = (b * PAGES + p) * ITEM
                bad += any(view[off:off + ITEM])
        meta = r.metadata() if good else b""
        good = good and bad == 0 and meta == b"token=1234"
        print(f"D: {'every byte verified' if good else f'MISMATCH ({bad} pages)'}: {PROMPT_PAGES} pages x "
              f"{2 * args.layers} buffers x {ITEM} bytes, metadata {meta.decode()!r}", flush=True)
        r.close()
        d.close()
        del view
        ctx.close()
        child.stdin.close()
        p_rc = child.wait(timeout=DEADLINE_S)
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
