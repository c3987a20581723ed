"""One side of the multi-host tests (tests/netns/hosts_test.sh), run inside a
network namespace. P and D talk through files in DIR only to pace rounds;
everything else goes over the veth.

    hosts_peer.py p DIR [--p-host H] [--bs-host H] [--bootstrap-local]
                        [--rounds R] [--rooms N]
                        [--layer-sleep S] [--knob k=v ...]
    hosts_peer.py d DIR --bootstrap IP [--listen URL] [--host H] [--rounds R]
                        [--rooms N] [--expect SUCCESS|FAILED] [--within S]
                        [--reason-has TEXT ...] [--knob k=v ...]
                        [--fail-ok-round R] [--marker-after-send]

P: a bootstrap server (port 0; the port goes to DIR/port) and one P rank,
with no address setting unless given. Each round it opens ROOMS rooms,
writes DIR/p_ready.R, streams them layer by layer and reports "P round R
room ID STATUS reason". D: reads the port, opens the rounds' rooms against
IP:port, checks every byte of each Success room and reports
"D round R room ID STATUS secs reason"; exit 0 when every room of every
round is as expected (a round named by --fail-ok-round may also fail, but
within --within seconds).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402

import layercake as lc  # noqa: E402
import pd_peer as peer  # noqa: E402


def wait_file(path, timeout):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)
    with open(path) as f:
        return f.read().strip()


def put(path, text=""):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def context(name, knobs):
    ctx = lc.Context(name)
    for kv in knobs:
        k, v = kv.split("=", 1)
        ctx.config_set(k, int(v))
    return ctx


def run_p(a):
    mem, kv, args = peer.kv_args(fill=True)
    ctx = context("p", a.knob)
    ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    bs = lc.BootstrapServer(host=a.bs_host) if a.bs_host else lc.BootstrapServer()
    p = lc.Prefill(ctx, layout, f"127.0.0.1:{bs.port}" if a.bootstrap_local else bs,
                   host=a.p_host)
    print(f"P bootstrap {bs.addr} endpoint {p.endpoint if hasattr(p, 'endpoint') else '?'}", flush=True)
    put(os.path.join(a.dir, "port"), str(bs.port))
    e = p.engine
    for rnd in range(a.rounds):
        base = peer.ROOM0 + 100 * rnd
        senders = [p.sender(base + k) for k in range(a.rooms)]
        put(os.path.join(a.dir, f"p_ready.{rnd}"))
        end = time.monotonic() + a.wait  # one deadline for the round's rooms
        for s in senders:
            try:
                s.wait(timeout=max(0.01, end - time.monotonic()), until=lc.RoomStatus.BOOTSTRAPPED)
            except TimeoutError:
                pass
        live = [(k, s) for k, s in enumerate(senders) if s.status == lc.RoomStatus.BOOTSTRAPPED]
        if live:
            with e.batch():
                for k, s in live:
                    e.add_chunk(s.room, peer.p_pages(k), 0, True)
            for _ in range(peer.LAYERS):
                time.sleep(a.layer_sleep)
                p.steps.record_cache()
            p.steps.record_aux()
        for s in senders:
            try:
                s.set_metadata(b"room=%d" % s.room)
            except lc.LayercakeError:
                pass
        end = time.monotonic() + a.wait
        for s in senders:
            try:
                info = s.wait(timeout=max(0.01, end - time.monotonic()))
                print(f"P round {rnd} room {s.room} {info.status.name} {info.reason}", flush=True)
            except TimeoutError:
                print(f"P round {rnd} room {s.room} {s.status.name} (not final)", flush=True)
        put(os.path.join(a.dir, f"p_done.{rnd}"))
    wait_file(os.path.join(a.dir, "d_exit"), 600)
    p.close()
    bs.close()
    ctx.close()
    return 0


def run_d(a):
    port = wait_file(os.path.join(a.dir, "port"), 30)
    mem, kv, args = peer.kv_args(fill=False)
    ctx = context("d", a.knob)
    region = ctx.register(mem)
    layout = lc.Layout.mha(peer.LAYERS, peer.PAGES, peer.ITEM, bases=args.kv_data_ptrs)
    kw = {"host": a.host} if a.host else {}
    if a.listen:
        kw["listen_url"] = a.listen
    try:
        d = lc.Decode(ctx, layout, [region], **kw)
    except lc.LayercakeError as ex:
        if a.listen and a.listen.startswith("ucx") and ex.name == "LC_ERR_NO_TRANSPORT":
            print("skip: this build has no ucx transport", flush=True)
            put(os.path.join(a.dir, "d_exit"))
            return 77
        raise
    if a.bootstrap == "default":
        addr = None  # lc_receiver_create(NULL): 127.0.0.1:<bootstrap_port>
    else:
        addr = f"{a.bootstrap}:{port}" if ":" not in a.bootstrap else f"[{a.bootstrap}]:{port}"
    bad = 0
    nbuf = 2 * peer.LAYERS
    for rnd in range(a.rounds):
        wait_file(os.path.join(a.dir, f"p_ready.{rnd}"), 60)
        kv[:] = 0
        base = peer.ROOM0 + 100 * rnd
        t0 = time.monotonic()
        rx = [d.receiver(addr, base + k) for k in range(a.rooms)]
        for k, r in enumerate(rx):
            try:
                r.wait(timeout=a.within + 5, until=lc.RoomStatus.BOOTSTRAPPED)
            except TimeoutError:
                pass
            if r.poll().status == lc.RoomStatus.BOOTSTRAPPED:
                r.send(peer.d_pages(k, 0), aux_index=k)
        put(os.path.join(a.dir, f"d_sent.{rnd}"))
        for k, r in enumerate(rx):
            try:
                info = r.wait(timeout=max(a.within, 30) + 5)
            except TimeoutError:
                info = r.poll()
            secs = time.monotonic() - t0
            print(f"D round {rnd} room {base + k} {info.status.name} {secs:.2f}s {info.reason}", flush=True)
            want = a.expect
            if a.fail_ok_round == rnd and info.status == lc.RoomStatus.FAILED:
                want = "FAILED"
            if info.status.name != want:
                print(f"  want {want}", flush=True)
                bad += 1
            if info.status == lc.RoomStatus.FAILED and secs > a.within:
                print(f"  failed after {secs:.1f} s, not within {a.within} s", flush=True)
                bad += 1
            if info.status == lc.RoomStatus.FAILED and want == "FAILED":
                for text in a.reason_has:
                    if text not in info.reason:
                        print(f"  reason lacks {text!r}", flush=True)
                        bad += 1
            if info.status == lc.RoomStatus.SUCCESS:
                got = kv[:, peer.d_pages(k, 0)]
                if not np.array_equal(got, peer.pattern(nbuf, peer.p_pages(k))):
                    print("  bytes differ", flush=True)
                    bad += 1
        for r in rx:
            r.close()
        if a.rounds > 1:
            wait_file(os.path.join(a.dir, f"p_done.{rnd}"), 120)
    put(os.path.join(a.dir, "d_exit"))
    d.close()
    ctx.close()
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["p", "d"])
    ap.add_argument("dir")
    ap.add_argument("--p-host")
    ap.add_argument("--bs-host")
    ap.add_argument("--bootstrap-local", action="store_true")
    ap.add_argument("--bootstrap")
    ap.add_argument("--listen")
    ap.add_argument("--host")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rooms", type=int, default=4)
    ap.add_argument("--layer-sleep", type=float, default=0.005)
    ap.add_argument("--wait", type=float, default=30)
    ap.add_argument("--expect", default="SUCCESS")
    ap.add_argument("--within", type=float, default=10)
    ap.add_argument("--reason-has", action="append", default=[])
    ap.add_argument("--knob", action="append", default=[])
    ap.add_argument("--fail-ok-round", type=int, default=-1)
    a = ap.parse_args()
    return run_p(a) if a.role == "p" else run_d(a)


if __name__ == "__main__":
    sys.exit(main())
