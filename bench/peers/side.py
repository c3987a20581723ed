#!/usr/bin/env python3
"""One peer's side of `make bench-peers`: layercake, NIXL or Mooncake TE,
initiator (this process, P) and target (a child, D) on loopback, every case
run through the same harness so that the figures differ only by library.

    side.py --peer layercake|nixl|mooncake|mooncake-1m --transport tcp|shm [--quick]

Prints one JSON object on stdout: {"peer", "transport", "cases": {name:
{"value", "unit", ...} or {"error": "..."}}}. A case the peer cannot run is
an error entry, never left out. Both sides use the same memory: regions from
layercake's allocator (lc_mem_alloc: 2 MiB aligned, huge pages, memfd), every
page touched before timing, the same region size and the same write
geometry; the timing loops are the same Python code for every peer (post,
then poll for completion), so the binding's cost is on both sides of a ratio.

Cases
  bw_4m       4 MiB writes, 16 in flight, wrapping a REGION-byte region (GB/s)
  bw_64k      batches of 64 writes of 64 KiB, 4 batches in flight (GB/s)
  rtt_4k      one 4 KiB write posted, polled until complete, one at a time:
              p50 and p99 (us)
  layers      32 layers of 2 x 128 KiB (K and V), P computes a layer every
              1 ms; time from the last layer's record to D knowing every
              layer landed (layercake: layers_ready; NIXL: one notification
              per layer; Mooncake: its writes, then a ZeroMQ notice per
              layer sent when the layer's batch completes) p50 (ms)
  idle_p, idle_d  each process's CPU over IDLE seconds with nothing in
              flight, after the cases (% of one core)

The target is this file with --role target: commands arrive as JSON lines on
its stdin, answers leave as JSON lines on its stdout.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
import traceback

MIB = 1 << 20
REGION = 256 * MIB
LAYERS, KV_BYTES = 32, 128 * 1024  # per layer: K and V, one write each
COMPUTE_S = 0.001
POLL_S = 0.0001  # D's poll pace in the layer-wise case, the same for all


def now_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for both processes


def cpu_s():
    # Every thread of this process, from the scheduler's run time: os.times()
    # counts whole 10 ms ticks, which made one tick more or less over the
    # 10 s idle window (0.1% of a core) decide an idle row.
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Buffer:
    """n bytes of anonymous memory, 2 MiB aligned, transparent huge pages
    asked for (MADV_HUGEPAGE), every byte written before timing: what
    lc_mem_alloc gives layercake (docs/architecture.md), for the peers,
    whose processes must not load liblayercake (it links Debian's UCX, NIXL
    bundles its own: two UCX in one process crash)."""

    def __init__(self, n):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        p = libc.mmap(None, n + 2 * MIB, 3, 0x22, -1, 0)  # RW, MAP_PRIVATE | MAP_ANONYMOUS
        if p in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        self.address = (p + 2 * MIB - 1) & ~(2 * MIB - 1)
        libc.madvise(self.address, n, 14)  # MADV_HUGEPAGE
        ctypes.memset(self.address, 1, n)
        self.length = n


def alloc(n, peer):
    """The region of `peer`: layercake's allocator for layercake (shm://
    needs its memfd), a Buffer of the same shape for the others."""
    if peer != "layercake":
        return Buffer(n)
    import layercake as lc
    mem = lc.Memory(n)
    mem.numpy()[:] = 1
    return mem


def say(obj):
    """One answer to the initiator: the libraries log on stdout too, so
    answers carry a mark and everything else is passed on to stderr."""
    print("@@" + json.dumps(obj), flush=True)


def hear(f):
    while True:
        line = f.readline()
        if not line:
            return None
        if line.startswith("@@"):
            return json.loads(line[2:])
        sys.stderr.write(line)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# ---------------------------------------------------------------- layercake

class LcInit:
    """layercake's initiator over its raw transport API (lc_conn, lc_batch_post)."""

    def __init__(self, tgt, transport, info):
        import layercake as lc
        self.lc = lc
        self.ctx = lc.Context("peers-p")
        self.mem = alloc(REGION, "layercake")
        self.reg = self.ctx.register(self.mem)
        self.cq = self.ctx.completion_queue()
        self.conn = self.ctx.connect(info["url"], self.cq, bytes.fromhex(info["token"]))
        self.rid = self.conn.import_region(bytes.fromhex(info["desc"]))
        self.base = self.mem.address
        self.room = 1

    def post(self, writes):
        """writes: (local offset, remote offset, length). Returns a handle."""
        w = [(self.base + lo, self.rid, ro, n) for lo, ro, n in writes]
        return self.conn.post(w, self.room)

    def reap(self, want):
        """Block until `want` completions; returns their count."""
        got = 0
        while got < want:
            for c in self.cq.wait(1000):
                if c["status"]:
                    raise RuntimeError(f"batch failed: {c['reason']}")
                got += 1
        return got

    def next_lap(self):
        self.room += 1


def lc_target(transport):
    import layercake as lc
    ctx = lc.Context("peers-d")
    mem = alloc(REGION, "layercake")
    reg = ctx.register(mem)
    url = "tcp://127.0.0.1:0" if transport == "tcp" else "shm://auto"
    lst = ctx.listen(url)
    for room in range(1, 4097):  # one room per lap (fresh pages each lap, as D gives)
        ctx.grant(room, reg, 0, REGION)
    return {"url": lst.url, "token": ctx.issue_token().hex(), "desc": reg.pack().hex()}, (ctx, mem, reg, lst)


# --------------------------------------------------------------------- NIXL

def nixl_mod():
    from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent, nixl_agent_config


def nixl_agent_for(name):
    agent, cfg = nixl_mod()
    return agent(name, cfg(backends=["UCX"]))


class NixlInit:
    def __init__(self, tgt, transport, info):
        self.agent = nixl_agent_for("peers-p")
        self.mem = alloc(REGION, "nixl")
        self.base = self.mem.address
        self.agent.register_memory([(self.base, REGION, 0, "")], "DRAM")
        self.remote = self.agent.add_remote_agent(bytes.fromhex(info["md"]))
        self.rbase = info["base"]
        self.pending = []
        self.handles = {}  # a transfer handle is reposted once done (NIXL's fast path)

    def post(self, writes, notif=b""):
        key = (tuple(writes), notif)
        h = self.handles.get(key)
        if h is None:
            local = self.agent.get_xfer_descs([(self.base + lo, n, 0) for lo, _, n in writes], "DRAM")
            remote = self.agent.get_xfer_descs([(self.rbase + ro, n, 0) for _, ro, n in writes], "DRAM")
            h = self.handles[key] = self.agent.initialize_xfer("WRITE", local, remote, self.remote, notif)
        st = self.agent.transfer(h)
        if st == "ERR":
            raise RuntimeError("nixl transfer: ERR")
        self.pending.append(h)
        return h

    def reap(self, want):
        got = 0
        while got < want:
            keep = []
            for h in self.pending:
                st = self.agent.check_xfer_state(h) if got < want else "PROC"
                if st == "DONE":
                    got += 1
                elif st == "ERR":
                    raise RuntimeError("nixl transfer: ERR")
                else:
                    keep.append(h)
            self.pending = keep
        return got

    def next_lap(self):
        pass


def nixl_target(transport):
    agent = nixl_agent_for("peers-d")
    mem = alloc(REGION, "nixl")
    agent.register_memory([(mem.address, REGION, 0, "")], "DRAM")
    return {"md": agent.get_agent_metadata().hex(), "base": mem.address}, (agent, mem)


# ----------------------------------------------------------------- Mooncake

def mc_engine():
    from mooncake.engine import TransferEngine
    te = TransferEngine()
    rc = te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    if rc:
        raise RuntimeError(f"mooncake initialize(tcp, P2PHANDSHAKE) returned {rc}")
    return te


class McInit:
    def __init__(self, tgt, transport, info):
        self.te = mc_engine()
        self.mem = alloc(REGION, "mooncake")
        self.base = self.mem.address
        rc = self.te.register_memory(self.base, REGION)
        if rc:
            raise RuntimeError(f"mooncake register_memory returned {rc}")
        self.target = f"127.0.0.1:{info['port']}"
        self.rbase = info["base"]
        self.pending = []

    def post(self, writes):
        bid = self.te.batch_transfer_async_write(self.target, [self.base + lo for lo, _, _ in writes],
                                                 [self.rbase + ro for _, ro, _ in writes],
                                                 [n for _, _, n in writes])
        if bid == 0 or bid < 0:
            raise RuntimeError(f"mooncake batch_transfer_async_write returned {bid}")
        self.pending.append(bid)
        return bid

    def wait(self, bid):
        rc = self.te.get_batch_transfer_status([bid])
        if rc < 0:
            raise RuntimeError(f"mooncake batch status {rc}")

    def reap(self, want):
        # get_batch_transfer_status waits for the batches it is given: reap
        # the oldest first, as completions of a FIFO of batches.
        got = 0
        while got < want:
            bid = self.pending.pop(0)
            rc = self.te.get_batch_transfer_status([bid])
            if rc < 0:
                raise RuntimeError(f"mooncake batch status {rc}")
            got += 1
        return got

    def next_lap(self):
        pass


def mc_target(transport):
    te = mc_engine()
    mem = alloc(REGION, "mooncake")
    rc = te.register_memory(mem.address, REGION)
    if rc:
        raise RuntimeError(f"mooncake register_memory returned {rc}")
    return {"port": te.get_rpc_port(), "base": mem.address}, (te, mem)


# mooncake-1m: the same engine at its best settings here (anchors.md): one
# submitting thread, as this harness always is, and 1 MiB tcp slices
# (MC_TCP_SLICE_SIZE; its default 64 KiB costs a completion per slice).
# Measured beside the default so that no figure rests on a weak setting.
MC_TUNED_ENV = {"MC_TCP_SLICE_SIZE": str(1 * MIB)}
INIT = {"layercake": LcInit, "nixl": NixlInit, "mooncake": McInit, "mooncake-1m": McInit}
TARGET = {"layercake": lc_target, "nixl": nixl_target, "mooncake": mc_target, "mooncake-1m": mc_target}


# -------------------------------------------------------------------- cases

def case_bw(ini, block, batch, inflight, total):
    """Batches of `batch` writes of `block` bytes, `inflight` batches
    outstanding, wrapping the region (a batch never spans the wrap)."""
    per = block * batch
    nb = total // per
    laps_at = REGION // per
    posted = reaped = 0
    off = 0
    ini.next_lap()  # a pass starts on fresh pages (a room of its own), as the laps do
    t0 = time.perf_counter()
    while reaped < nb:
        while posted < nb and posted - reaped < inflight:
            if off + per > REGION:
                off = 0
                reaped += ini.reap(posted - reaped)  # the lap's room is done before the next
                ini.next_lap()
                continue
            ini.post([(off + i * block, off + i * block, block) for i in range(batch)])
            off += per
            posted += 1
        if posted > reaped:
            reaped += ini.reap(1)
    dt = time.perf_counter() - t0
    del laps_at
    return {"value": nb * per / dt / 1e9, "unit": "GB/s", "seconds": dt}


def case_rtt(ini, n):
    lat = []
    off = 0
    ini.next_lap()
    for i in range(n + 100):
        if off == 0 and i:
            ini.next_lap()  # each 16 MiB lap of the region lands in a room of its own
        t = time.perf_counter_ns()
        ini.post([(off, off, 4096)])
        ini.reap(1)
        if i >= 100:  # warm-up
            lat.append((time.perf_counter_ns() - t) / 1e3)
        off = (off + 4096) % (16 * MIB)
    return {"value": pct(lat, 50), "p99": pct(lat, 99), "unit": "us", "samples": n}


def layer_writes(layer):
    k = 2 * layer * KV_BYTES
    return [(k, k, KV_BYTES), (k + KV_BYTES, k + KV_BYTES, KV_BYTES)]


# ------------------------------------------------------------------ target

def target_main(peer, transport):
    """D: set up, print its info, then serve commands until stdin closes."""
    try:
        info, keep = TARGET[peer](transport)
        keep = list(keep)
    except Exception as e:
        say({"error": f"{type(e).__name__}: {e}"})
        return 1
    say(info)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            ans = TARGET_CMDS[cmd["cmd"]](peer, keep, cmd)
        except Exception as e:
            ans = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-800:]}
        say(ans)
    sys.stdout.flush()
    os._exit(0)


def t_idle(peer, keep, cmd):
    c0 = cpu_s()
    time.sleep(cmd["seconds"])
    return {"cpu_pct": 100 * (cpu_s() - c0) / cmd["seconds"]}


def t_nixl_layers(peer, keep, cmd):
    """Count per-layer notifications; answer when every layer of the room
    was notified, with the time it knew."""
    agent = keep[0]
    want = {f"{cmd['room']}:{i}".encode() for i in range(LAYERS)}
    seen = set()
    deadline = time.monotonic() + 30
    while seen != want:
        for msgs in agent.get_new_notifs().values():
            seen.update(m for m in msgs if m in want)
        if seen == want:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(seen)} of {LAYERS} notifications in 30 s")
        time.sleep(POLL_S)
    return {"t_d": now_ns()}


def t_mc_layers_setup(peer, keep, cmd):
    import zmq
    zctx = zmq.Context()
    s = zctx.socket(zmq.PULL)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    keep += [zctx, s]
    return {"zmq_port": port}


def t_mc_layers(peer, keep, cmd):
    import zmq
    s = keep[3]
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < LAYERS:
        try:
            m = s.recv(zmq.NOBLOCK)
            r, layer = m.decode().split(":")
            if int(r) == cmd["room"]:
                seen.add(int(layer))
            continue
        except zmq.Again:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(seen)} of {LAYERS} notices in 30 s")
        time.sleep(POLL_S)
    return {"t_d": now_ns()}


TARGET_CMDS = {"idle": t_idle, "nixl_layers": t_nixl_layers,
               "mc_layers_setup": t_mc_layers_setup, "mc_layers": t_mc_layers}


# --------------------------------------------------------------- initiator

class Target:
    def __init__(self, peer, transport, env):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "target",
                                   "--peer", peer, "--transport", transport],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self.read()

    def read(self):
        d = hear(self.p.stdout)
        if d is None:
            raise RuntimeError(f"target exited ({self.p.wait()})")
        if "error" in d:
            raise RuntimeError("target: " + d["error"])
        return d

    def ask(self, cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=20)
        except Exception:
            self.p.kill()


def layers_nixl(ini, tgt, rooms):
    out = []
    for room in range(rooms):
        tgt.p.stdin.write(json.dumps({"cmd": "nixl_layers", "room": room}) + "\n")
        tgt.p.stdin.flush()
        for layer in range(LAYERS):
            time.sleep(COMPUTE_S)
            t_last = now_ns()
            ini.post(layer_writes(layer), notif=f"{room}:{layer}".encode())
        ini.reap(LAYERS)
        d = tgt.read()
        out.append((d["t_d"] - t_last) / 1e6)
    return out


def layers_mc(ini, tgt, rooms):
    import zmq
    port = tgt.ask({"cmd": "mc_layers_setup"})["zmq_port"]
    zctx = zmq.Context()
    push = zctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    out = []
    try:
        for room in range(rooms):
            tgt.p.stdin.write(json.dumps({"cmd": "mc_layers", "room": room}) + "\n")
            tgt.p.stdin.flush()
            ini.pending.clear()
            for layer in range(LAYERS):
                time.sleep(COMPUTE_S)
                t_last = now_ns()
                # get_batch_transfer_status blocks until the batch is done
                # (the binding has no non-blocking check): each layer's
                # notice leaves as soon as its writes completed
                ini.wait(ini.post(layer_writes(layer)))
                push.send(f"{room}:{layer}".encode())
            d = tgt.read()
            out.append((d["t_d"] - t_last) / 1e6)
    finally:
        push.close(0)
        zctx.term()
    return out


def layers_lc(transport, rooms, idle_s):
    """layercake's layer-wise case through its engine (Prefill/Decode):
    P here, D in a child, the request's 32 layers recorded 1 ms apart, D
    polling layers_ready. Returns (latencies ms, idle P %, idle D %)."""
    import layercake as lc
    import numpy as np
    pages = KV_BYTES // 8192
    ctx = lc.Context("peers-lw-p")
    mem = alloc(2 * LAYERS * KV_BYTES, "layercake")
    bases = [mem.address + b * KV_BYTES for b in range(2 * LAYERS)]
    layout = lc.Layout.mha(LAYERS, pages, 8192, bases=bases)
    ctx.register(mem)
    env = dict(os.environ)
    with lc.BootstrapServer(host="127.0.0.1", port=0) as bs:
        p = lc.Prefill(ctx, layout, bs.addr, world_size=1, dp_size=1, engine_rank=0, metrics_server=bs)
        d = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "lc-decode",
                              "--transport", transport, "--bootstrap", bs.addr],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        out = []
        try:
            for room in range(1, rooms + 1):
                d.stdin.write(f"{room}\n")
                d.stdin.flush()
                s = p.sender(room)
                s.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
                with p.engine.batch():
                    p.engine.add_chunk(room, np.arange(pages, dtype=np.int64), dst_index=0, is_last=True)
                for _ in range(LAYERS):
                    time.sleep(COMPUTE_S)
                    t_last = now_ns()
                    p.steps.record_cache()
                p.steps.record_aux()
                s.set_metadata(b"token=1")
                info = s.wait(timeout=30)
                if info.status != lc.RoomStatus.SUCCESS:
                    raise RuntimeError(f"room {room}: {info.status.name} {info.reason}")
                ans = hear(d.stdout)
                if ans is None or "error" in ans:
                    raise RuntimeError("D: " + (ans or {}).get("error", "exited"))
                out.append((ans["t_d"] - t_last) / 1e6)
            d.stdin.write(f"idle {idle_s}\n")
            d.stdin.flush()
            c0 = cpu_s()
            time.sleep(idle_s)
            idle_p = 100 * (cpu_s() - c0) / idle_s
            idle_d = hear(d.stdout)["cpu_pct"]
        finally:
            d.stdin.close()
            d.wait(timeout=30)
            p.close()
    return out, idle_p, idle_d


def lc_decode_main(transport, bootstrap):
    import layercake as lc
    import numpy as np
    pages = KV_BYTES // 8192
    ctx = lc.Context("peers-lw-d")
    mem = alloc(2 * LAYERS * KV_BYTES, "layercake")
    bases = [mem.address + b * KV_BYTES for b in range(2 * LAYERS)]
    layout = lc.Layout.mha(LAYERS, pages, 8192, bases=bases)
    region = ctx.register(mem)
    url = "tcp://127.0.0.1:0" if transport == "tcp" else "shm://auto"
    dec = lc.Decode(ctx, layout, [region], listen_url=url)
    for line in sys.stdin:
        if line.startswith("idle"):
            s = float(line.split()[1])
            c0 = cpu_s()
            time.sleep(s)
            say({"cpu_pct": 100 * (cpu_s() - c0) / s})
            continue
        try:
            r = dec.receiver(bootstrap, int(line))
            r.wait(timeout=30, until=lc.RoomStatus.BOOTSTRAPPED)
            r.send(np.arange(pages, dtype=np.int64), prefix_len=0, aux_index=0)
            deadline = time.monotonic() + 30
            while r.layers_ready < LAYERS:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{r.layers_ready} of {LAYERS} layers in 30 s")
                time.sleep(POLL_S)
            t_d = now_ns()
            r.wait(timeout=30)
            r.close()
            say({"t_d": t_d})
        except Exception as e:
            say({"error": f"{type(e).__name__}: {e}"})
    dec.close()
    ctx.close()
    return 0


def run_cases(peer, transport, quick, idle_s):
    env = dict(os.environ)
    if peer == "nixl":
        # tcp: UCX_TLS=tcp. shm: UCX's defaults, which put between two
        # processes of one host with cma (process_vm_writev); UCX_TLS without
        # tcp fails: NIXL asks for peer failure handling, which no
        # shared-memory active-message transport of UCX offers.
        if transport == "tcp":
            env["UCX_TLS"] = os.environ["UCX_TLS"] = "tcp"
        else:
            env.pop("UCX_TLS", None)
            os.environ.pop("UCX_TLS", None)
    elif peer == "mooncake-1m":
        env.update(MC_TUNED_ENV)  # the target reads it at start, this process at its first transfer
        os.environ.update(MC_TUNED_ENV)
    res = {}
    scale = 4 if quick else 1
    rooms = 5 if quick else 20
    specs = [("bw_4m", lambda i: case_bw(i, 4 * MIB, 1, 16, (2048 if transport == "shm" else 1024) * MIB // scale)),
             ("bw_64k", lambda i: case_bw(i, 64 * 1024, 64, 4, (1024 if transport == "shm" else 512) * MIB // scale)),
             ("rtt_4k", lambda i: case_rtt(i, 5000 // scale))]
    if peer.startswith("mooncake") and transport == "shm":
        # tcp is its only protocol for host memory between two processes
        # without hardware (rdma, nvlink, efa, ascend need theirs)
        err = "no shared-memory transport in mooncake-transfer-engine-non-cuda (tcp only)"
        return {k: {"error": err} for k in ("bw_4m", "bw_64k", "rtt_4k", "layers", "idle_p", "idle_d")}
    tgt = None
    try:
        tgt = Target(peer, transport, env)
        ini = INIT[peer](tgt, transport, tgt.info)
        ini.reap(0)
        for name, fn in specs:
            try:
                fn(ini)  # warm-up pass at a tenth would do; one full pass is cheap enough
                res[name] = fn(ini)
            except Exception as e:
                res[name] = {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
        for name, _ in specs:
            res.setdefault(name, {"error": err})
        ini = None
    try:
        if peer == "layercake":
            lat, ip, idd = layers_lc(transport, rooms, idle_s)
        else:
            if ini is None:
                raise RuntimeError("no initiator (above)")
            lat = (layers_nixl if peer == "nixl" else layers_mc)(ini, tgt, rooms)
            tgt.p.stdin.write(json.dumps({"cmd": "idle", "seconds": idle_s}) + "\n")
            tgt.p.stdin.flush()
            c0 = cpu_s()
            time.sleep(idle_s)
            ip = 100 * (cpu_s() - c0) / idle_s
            idd = tgt.read()["cpu_pct"]
        res["layers"] = {"value": pct(lat, 50), "p99": pct(lat, 99), "unit": "ms", "rooms": len(lat)}
        res["idle_p"] = {"value": ip, "unit": "% core"}
        res["idle_d"] = {"value": idd, "unit": "% core"}
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        for name in ("layers", "idle_p", "idle_d"):
            res.setdefault(name, {"error": err})
    if tgt is not None:
        tgt.close()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--peer", choices=sorted(INIT), default="layercake")
    ap.add_argument("--transport", choices=("tcp", "shm"), default="tcp")
    ap.add_argument("--role", choices=("initiator", "target", "lc-decode"), default="initiator")
    ap.add_argument("--bootstrap", default="")
    ap.add_argument("--quick", action="store_true", help="a quarter of the bytes and samples")
    ap.add_argument("--idle-s", type=float, default=10.0)
    a = ap.parse_args()
    if a.role == "target":
        return target_main(a.peer, a.transport)
    if a.role == "lc-decode":
        return lc_decode_main(a.transport, a.bootstrap)
    res = run_cases(a.peer, a.transport, a.quick, a.idle_s)
    say({"peer": a.peer, "transport": a.transport, "cases": res})
    sys.stdout.flush()
    os._exit(0)  # NIXL's bundled libnl crashes in its exit handlers (rtnl_tc_unregister)


if __name__ == "__main__":
    sys.exit(main())
