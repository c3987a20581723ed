"""The processes of scripts/netns-cluster.sh, and the orchestrator that drives them.

    netns_cluster.py orchestrate CONFIG.json     (root namespace: spawns and drives the nodes)
    netns_cluster.py p|d JSON                    (one node, inside its namespace)

The orchestrator starts the bootstrap server (`layercake bootstrap`), the P
ranks and the D instances with `ip netns exec NS ...`, each in its own
network namespace, and talks to them over their stdin/stdout (one JSON
object a line; pipes cross namespaces). Every wait has a deadline. It prints
its results as lines "cluster {json}" (docs/deployment.md, "A cluster on one
machine") and exits 0 only when every check of every phase held.

A P rank holds one TP shard of every page (TP 2: half of each page of every
buffer, the KV heads split); a D instance at TP 1 receives the whole page,
one half from each P rank (heterogeneous TP, lc_tp_fragment). The bytes of
page j of buffer b of room R, as a whole, are uint32 words
seed(R, b, j) * GOLDEN + w; D checks every byte of every granted page and
the first token (metadata) of every room.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

GOLDEN = 0x9E3779B1
CANARY = 0xA5


# ---------------------------------------------------------------------------
# The page pattern (numpy), shared by P and D.

def pattern(np, room, nbuf, npages, item):
    """(nbuf, npages, item) bytes of room `room` as a whole (every head)."""
    b = np.arange(nbuf, dtype=np.uint64)[:, None, None]
    j = np.arange(npages, dtype=np.uint64)[None, :, None]
    w = np.arange(item // 4, dtype=np.uint32)[None, None, :]
    seed = ((np.uint64(room) * np.uint64(1000003) + b * np.uint64(7919) + j * np.uint64(131))
            & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    words = seed * np.uint32(GOLDEN) + w
    return words.view(np.uint8).reshape(nbuf, npages, item)


def first_token(room):
    return b"first-token:%d" % room


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def commands():
    """Commands from the orchestrator; stop when stdin closes."""
    for line in sys.stdin:
        line = line.strip()
        if line:
            yield json.loads(line)


def wait_all(rooms, timeout, until=None, t0=None):
    """Poll every room until final (or status >= until) or `timeout`:
    {room: (RoomInfo, seconds since t0 (default: now))}; rooms past the
    deadline are left out."""
    start = time.monotonic()
    t0 = start if t0 is None else t0
    done = {}
    pause = 0.0005
    while len(done) < len(rooms) and time.monotonic() - start < timeout:
        for r in rooms:
            if r.room in done:
                continue
            info = r.poll()
            if info.status.final or (until is not None and info.status >= until):
                done[r.room] = (info, time.monotonic() - t0)
        if len(done) < len(rooms):
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
    return done


def reason_of(info):
    if info.status.name == "SUCCESS":
        return ""
    fr = info.fail_reason
    label = fr.label if hasattr(fr, "label") else str(fr)
    return "%s: %s" % (label, info.reason)


# ---------------------------------------------------------------------------
# A P rank.

def node_p(cfg):
    import numpy as np
    import layercake as lc

    g = cfg["geometry"]
    L, item, npg = g["layers"], g["item"] // cfg["world"], g["pages_per_room"]
    nbuf = 2 * L
    slots = cfg["d_count"] * g["rooms"]
    pages = slots * npg
    mem = lc.Memory(nbuf * pages * item)
    kv = mem.numpy().reshape(nbuf, pages, item)
    ctx = lc.Context("p%d" % cfg["rank"])
    ctx.register(mem)
    layout = lc.Layout.mha(L, pages, item, bases=[mem.address + b * pages * item for b in range(nbuf)])
    p = lc.Prefill(ctx, layout, cfg["bootstrap"], host=cfg["host"], world_size=cfg["world"],
                   engine_rank=cfg["rank"])
    emit({"ev": "ready", "endpoint": p.endpoint})
    shard = slice(cfg["rank"] * item, (cfg["rank"] + 1) * item)
    deadline = cfg["deadline_s"]
    for c in commands():
        if c["cmd"] == "quit":
            break
        rooms = c["rooms"]  # [{"room", "slot"}]
        senders = []
        for r in rooms:
            s = r["slot"]
            kv[:, s * npg:(s + 1) * npg, :] = pattern(np, r["room"], nbuf, npg, g["item"])[:, :, shard]
            senders.append(p.sender(r["room"]))
        t0 = time.monotonic()
        booted = wait_all(senders, deadline, until=lc.RoomStatus.BOOTSTRAPPED, t0=t0)
        live = [s for s in senders if s.room in booted and not booted[s.room][0].status.final]
        t_forward = time.monotonic()  # CLOCK_MONOTONIC: one clock for every namespace
        emit({"ev": "forward", "rooms": len(live), "boot_s": round(t_forward - t0, 3)})
        slot_of = {r["room"]: r["slot"] for r in rooms}
        e = p.engine
        with e.batch():
            for s in live:
                sl = slot_of[s.room]
                e.add_chunk(s.room, np.arange(sl * npg, (sl + 1) * npg, dtype=np.int64), 0, True)
        for _ in range(L):
            time.sleep(c["layer_ms"] / 1000.0)
            p.steps.record_cache()
        p.steps.record_aux()
        for s in live:
            try:
                s.set_metadata(first_token(s.room))
            except lc.LayercakeError:
                pass  # the room already ended
        final = wait_all(senders, deadline, t0=t0)
        out = []
        for s in senders:
            if s.room in final:
                info, t = final[s.room]
                out.append({"room": s.room, "status": info.status.name, "reason": reason_of(info),
                            "t_s": round(t, 3)})
            else:
                out.append({"room": s.room, "status": "HUNG", "reason": "not final after %d s" % deadline,
                            "t_s": round(time.monotonic() - t0, 3)})
                s.abort("cluster: not final within the orchestrator's deadline")
        for s in senders:
            s.close()
        emit({"ev": "done", "rooms": out, "t_forward": t_forward})
    p.close()
    ctx.close()


# ---------------------------------------------------------------------------
# A D instance (TP 1: whole pages).

def node_d(cfg):
    import numpy as np
    import layercake as lc

    g = cfg["geometry"]
    L, item, npg = g["layers"], g["item"], g["pages_per_room"]
    nbuf = 2 * L
    pages = g["rooms"] * npg
    mem = lc.Memory(nbuf * pages * item)
    kv = mem.numpy().reshape(nbuf, pages, item)
    ctx = lc.Context("d%d" % cfg["index"])
    region = ctx.register(mem)
    layout = lc.Layout.mha(L, pages, item, bases=[mem.address + b * pages * item for b in range(nbuf)])
    dec = lc.Decode(ctx, layout, [region], listen_url=cfg["listen_url"], host=cfg["host"],
                    session=cfg["session"])
    emit({"ev": "ready", "endpoint": dec.endpoint})
    deadline = cfg["deadline_s"]
    for c in commands():
        if c["cmd"] == "quit":
            break
        rooms = c["rooms"]  # [{"room", "slot"}]
        kv[:] = CANARY  # nothing of an earlier round can pass for this one's bytes
        t0 = time.monotonic()
        recvs = [dec.receiver(cfg["bootstrap"], r["room"]) for r in rooms]
        slot_of = {r["room"]: r["slot"] for r in rooms}
        booted = wait_all(recvs, deadline, until=lc.RoomStatus.BOOTSTRAPPED, t0=t0)
        for rv in recvs:
            if rv.room in booted and not booted[rv.room][0].status.final:
                sl = slot_of[rv.room]
                try:
                    rv.send(np.arange(sl * npg, (sl + 1) * npg, dtype=np.int64))
                except lc.LayercakeError:
                    pass  # failed in between: its poll says why
        final = wait_all(recvs, deadline, t0=t0)
        out = []
        for rv in recvs:
            sl = slot_of[rv.room]
            rec = {"room": rv.room}
            if rv.room not in final:
                rec.update(status="HUNG", reason="not final after %d s" % deadline,
                           t_s=round(time.monotonic() - t0, 3), bytes=0, mismatched=0)
                rv.cancel("cluster: not final within the orchestrator's deadline")
            else:
                info, t = final[rv.room]
                rec.update(status=info.status.name, reason=reason_of(info), t_s=round(t, 3),
                           bytes=0, mismatched=0)
                if info.status.name == "SUCCESS":
                    got = kv[:, sl * npg:(sl + 1) * npg, :]
                    want = pattern(np, rv.room, nbuf, npg, item)
                    rec["bytes"] = int(got.size)
                    rec["mismatched"] = int(np.count_nonzero(got != want))
                    if rv.metadata() != first_token(rv.room):
                        rec["status"], rec["reason"] = "BAD_METADATA", "first token differs"
            out.append(rec)
        for rv in recvs:
            rv.close()
        emit({"ev": "done", "rooms": out, "t0": t0})
    dec.close()
    ctx.close()


# ---------------------------------------------------------------------------
# The orchestrator.

class Node:
    """A child process in a namespace, spoken to in JSON lines."""

    def __init__(self, name, ns, argv, env):
        self.name, self.ns = name, ns
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns] + argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, env=env, text=True, bufsize=1)
        self.buf = ""

    def send(self, obj):
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def line(self, timeout):
        """The next stdout line, or None at the deadline or EOF."""
        end = time.monotonic() + timeout
        while "\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536).decode()
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split("\n", 1)
        return line

    def event(self, timeout, want=None):
        """The next JSON event (of type `want`), or None at the deadline."""
        end = time.monotonic() + timeout
        while True:
            line = self.line(max(0.0, end - time.monotonic()))
            if line is None:
                return None
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a library line on stdout
            if want is None or ev.get("ev") == want:
                return ev

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=5):
        if self.proc.poll() is None:
            self.send({"cmd": "quit"})
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def out(obj):
    print("cluster " + json.dumps(obj, sort_keys=False), flush=True)


def say(text):
    print(text, file=sys.stderr, flush=True)


def link_stats(cfg):
    """{link name: (rx_bytes, tx_bytes)} of every bridge port, seen from the
    bridge: tx = towards the node, rx = from the node."""
    res = subprocess.run(["ip", "-n", cfg["hub"], "-j", "-s", "link", "show"], capture_output=True,
                         text=True, timeout=10)
    stats = {}
    for dev in json.loads(res.stdout or "[]"):
        for node, port in cfg["ports"].items():
            if dev.get("ifname") == port:
                s = dev["stats64"]
                stats[node] = (s["rx"]["bytes"], s["tx"]["bytes"])
    return stats


def set_link(cfg, node, up):
    subprocess.run(["ip", "-n", cfg["hub"], "link", "set", cfg["ports"][node], "up" if up else "down"],
                   check=True, timeout=10)


class Cluster:
    def __init__(self, cfg):
        self.cfg = cfg
        self.env = dict(os.environ)
        self.env.update(cfg["env"])
        self.nodes = {}
        self.room = 1000
        self.ok = True
        self.bootstrap = None
        self.totals = {"rooms": 0, "succeeded": 0, "failed": 0, "bytes_verified": 0, "mismatched_bytes": 0}

    def check(self, cond, what):
        if not cond:
            self.ok = False
            say("FAILED: " + what)
        return cond

    # -- processes
    def start_bootstrap(self):
        c = self.cfg
        argv = [c["layercake"], "bootstrap", "--host", c["ips"]["b"], "--port", str(c["bootstrap_port"])]
        self.bootstrap = Node("b", c["ns"]["b"], argv, self.env)
        line = self.bootstrap.line(c["start_timeout_s"])
        if not line or not line.startswith("listening"):
            raise RuntimeError("bootstrap server did not start: %r" % line)
        out({"event": "started", "node": "b", "ns": c["ns"]["b"], "addr": line.split()[1]})

    def node_cfg(self, name):
        c = self.cfg
        base = {"geometry": c["geometry"], "bootstrap": "%s:%d" % (c["ips"]["b"], c["bootstrap_port"]),
                "host": c["ips"][name], "deadline_s": c["room_deadline_s"]}
        if name.startswith("p"):
            base.update(rank=int(name[1:]), world=c["p_ranks"], d_count=c["d_count"])
        else:
            base.update(index=int(name[1:]), session="cluster-%s" % name,
                        listen_url="%s://%s:0" % (c["transport"], c["ips"][name]))
        return base

    def start(self, name):
        c = self.cfg
        argv = [c["python"], os.path.abspath(__file__), name[0], json.dumps(self.node_cfg(name))]
        n = Node(name, c["ns"][name], argv, self.env)
        ev = n.event(c["start_timeout_s"], "ready")
        if ev is None:
            n.kill()
            raise RuntimeError("%s did not start within %d s" % (name, c["start_timeout_s"]))
        self.nodes[name] = n
        out({"event": "started", "node": name, "ns": c["ns"][name], "addr": c["ips"][name],
             "endpoint": ev["endpoint"]})

    def p_names(self):
        return ["p%d" % r for r in range(self.cfg["p_ranks"])]

    def d_names(self):
        return ["d%d" % i for i in range(self.cfg["d_count"])]

    # -- one round: every live D gets `rooms` rooms, every P rank all of them
    def round(self, phase, during=None, dead=()):
        c = self.cfg
        g = c["geometry"]
        plan = {}  # d name -> [{"room", "slot"}]
        for di, d in enumerate(self.d_names()):
            plan[d] = []
            for k in range(g["rooms"]):
                self.room += 1
                plan[d].append({"room": self.room, "slot": k, "pslot": di * g["rooms"] + k})
        p_rooms = [{"room": r["room"], "slot": r["pslot"]} for d in plan for r in plan[d]]
        before = link_stats(c)
        t0 = time.monotonic()
        for p in self.p_names():
            self.nodes[p].send({"cmd": "round", "rooms": p_rooms, "layer_ms": c["layer_ms"]})
        for d in self.d_names():
            if d not in dead:
                self.nodes[d].send({"cmd": "round", "rooms": [{"room": r["room"], "slot": r["slot"]}
                                                              for r in plan[d]]})
        wait = 2 * c["room_deadline_s"] + 10
        if during is not None:
            for p in self.p_names():  # every P rank computes: the rooms are in flight
                self.check(self.nodes[p].event(wait, "forward") is not None, "%s: no forward" % p)
            during()
        res = {}
        starts, ends = [], []
        for name in self.p_names() + [d for d in self.d_names() if d not in dead]:
            n = self.nodes[name]
            ev = n.event(wait, "done") if n.proc.poll() is None else None
            res[name] = ev["rooms"] if ev else None
            if ev and "t_forward" in ev:
                starts.append(ev["t_forward"])
            if ev and "t0" in ev:
                ends += [ev["t0"] + r["t_s"] for r in ev["rooms"] if r["status"] == "SUCCESS"]
        # The transfer window: from the first P rank's forward to the last
        # room D saw succeed (one CLOCK_MONOTONIC for all namespaces).
        xfer = max(ends) - min(starts) if starts and ends and max(ends) > min(starts) else 0.0
        wall = [time.monotonic() - t0, xfer]
        after = link_stats(c)
        d_of = {r["room"]: d for d in plan for r in plan[d]}
        return plan, res, d_of, wall, before, after

    def report(self, phase, plan, res, d_of, walls, before, after):
        """The phase's lines; returns {d name: [D records]}, {d name: [P records]}.
        walls: [wall time of its rounds, their transfer windows]."""
        wall, xfer = walls
        by_d, p_by_d = {}, {}
        for name, rooms in res.items():
            if rooms is None:
                self.check(name in self.cfg.get("_killed", ()), "%s: no report in phase %s" % (name, phase))
                continue
            for r in rooms:
                if name.startswith("d"):
                    by_d.setdefault(name, []).append(r)
                else:
                    p_by_d.setdefault(d_of[r["room"]], []).append(dict(r, p=name))
        nb = 0
        for d, recs in sorted(by_d.items()):
            succ = [r for r in recs if r["status"] == "SUCCESS"]
            fails = [r for r in recs if r["status"] != "SUCCESS"]
            b = sum(r["bytes"] for r in recs)
            mm = sum(r["mismatched"] for r in recs)
            nb += b
            self.totals["rooms"] += len(recs)
            self.totals["succeeded"] += len(succ)
            self.totals["failed"] += len(fails)
            self.totals["bytes_verified"] += b
            self.totals["mismatched_bytes"] += mm
            reasons = {}
            for r in fails:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
            out({"phase": phase, "side": "D", "node": d, "rooms": len(recs), "succeeded": len(succ),
                 "failed": len(fails), "bytes_verified": b, "mismatched_bytes": mm,
                 "fail_reasons": reasons, "max_room_s": max([r["t_s"] for r in recs] or [0])})
        for d, recs in sorted(p_by_d.items()):
            fails = [r for r in recs if r["status"] != "SUCCESS"]
            reasons = {}
            for r in fails:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
            out({"phase": phase, "side": "P", "towards": d, "rooms": len(recs),
                 "succeeded": len(recs) - len(fails), "failed": len(fails), "fail_reasons": reasons,
                 "max_room_s": max([r["t_s"] for r in recs] or [0])})
        for node in sorted(after):
            if node not in before:
                continue
            rx = after[node][0] - before[node][0]
            tx = after[node][1] - before[node][1]
            out({"phase": phase, "link": node, "port": self.cfg["ports"][node],
                 "bytes_to_node": tx, "bytes_from_node": rx, "wall_s": round(wall, 3),
                 "transfer_s": round(xfer, 3), "gbps": round(max(rx, tx) / wall / 1e9, 3),
                 "gbps_in_transfer": round(max(rx, tx) / xfer / 1e9, 3) if xfer else None})
        out({"phase": phase, "wall_s": round(wall, 3), "bytes_verified": nb,
             "gbps_verified": round(nb / wall / 1e9, 3), "transfer_s": round(xfer, 3),
             "gbps_verified_in_transfer": round(nb / xfer / 1e9, 3) if xfer else None})
        return by_d, p_by_d

    def expect_all_success(self, phase, by_d, p_by_d, names):
        for d in names:
            recs = by_d.get(d, [])
            self.check(recs and all(r["status"] == "SUCCESS" for r in recs),
                       "%s: D %s rooms not all Success: %s" % (phase, d, _fails(recs)))
            self.check(all(r["mismatched"] == 0 for r in recs), "%s: D %s mismatched bytes" % (phase, d))
            precs = p_by_d.get(d, [])
            self.check(precs and all(r["status"] == "SUCCESS" for r in precs),
                       "%s: P rooms towards %s not all Success: %s" % (phase, d, _fails(precs)))

    def expect_failed(self, phase, recs, who, limit_s):
        """Every room failed with a reason, within its deadline."""
        self.check(recs, "%s: no rooms of %s" % (phase, who))
        for r in recs:
            self.check(r["status"] == "FAILED" and r["reason"],
                       "%s: %s room %d: %s, not failed with a reason" % (phase, who, r["room"], r["status"]))
            self.check(r["t_s"] <= limit_s, "%s: %s room %d failed after %.1f s > its deadline %.1f s"
                       % (phase, who, r["room"], r["t_s"], limit_s))

    def healthy(self, phase, rounds):
        """`rounds` rounds, reported as one phase: every room Success."""
        merged = None
        for _ in range(rounds):
            plan, res, d_of, wall, before, after = self.round(phase)
            if merged is None:
                merged = [plan, res, d_of, wall, before, after]
                continue
            for name, rooms in res.items():
                if merged[1].get(name) is not None and rooms is not None:
                    merged[1][name] = merged[1][name] + rooms
                else:
                    merged[1][name] = None
            merged[2].update(d_of)
            merged[3] = [merged[3][0] + wall[0], merged[3][1] + wall[1]]
            merged[5] = after
        by_d, p_by_d = self.report(phase, *merged)
        self.expect_all_success(phase, by_d, p_by_d, self.d_names())
        out({"outcome": phase, "rounds": rounds, "rooms": sum(len(v) for v in by_d.values()),
             "succeeded": sum(r["status"] == "SUCCESS" for v in by_d.values() for r in v), "ok": self.ok})

    def deadline_s(self):
        """How long a failing room may take: its bootstrap and waiting
        deadlines, plus a second of polling."""
        k = self.cfg["knobs"]
        return (k["LAYERCAKE_BOOTSTRAP_TIMEOUT_MS"] + k["LAYERCAKE_WAITING_TIMEOUT_MS"]) / 1000.0 + 1.0

    def cut(self, victim, seconds):
        c = self.cfg
        state = {}

        def during():
            time.sleep(c["layer_ms"] / 1000.0)  # a layer or so in flight
            set_link(c, victim, False)
            state["t_down"] = time.monotonic()
            out({"event": "link_down", "node": victim, "port": c["ports"][victim]})

        plan, res, d_of, wall, before, after = self.round("cut", during=during)
        by_d, p_by_d = self.report("cut", plan, res, d_of, wall, before, after)
        left = seconds - (time.monotonic() - state.get("t_down", time.monotonic()))
        if left > 0:
            time.sleep(left)
        set_link(c, victim, True)
        t_up = time.monotonic()
        out({"event": "link_up", "node": victim, "down_s": round(t_up - state.get("t_down", t_up), 3)})
        lim = self.deadline_s()
        # Whose rooms the cut ends: a D's own; every room when a P rank is
        # cut off (every room needs every P rank's shard); none when only
        # the bootstrap server is (P ranks already known go on).
        hit = [victim] if victim.startswith("d") else self.d_names() if victim.startswith("p") else []
        for d in hit:
            self.expect_failed("cut", by_d.get(d, []), "D %s" % d, lim)
            # P's side: every rank's rooms for a cut D; only the cut rank's
            # when a P rank was cut (the others' shards may have landed)
            precs = [r for r in p_by_d.get(d, []) if victim.startswith("d") or r["p"] == victim]
            self.expect_failed("cut", precs, "P towards %s" % d, lim)
        others = [d for d in self.d_names() if d not in hit]
        self.expect_all_success("cut", by_d, p_by_d, others)
        out({"outcome": "cut", "node": victim,
             "victim_rooms_failed": sum(r["status"] == "FAILED" for d in hit for r in by_d.get(d, [])),
             "victim_reasons": sorted({r["reason"] for d in hit for r in by_d.get(d, [])}),
             "p_reasons": sorted({r["reason"].split(":")[0] for d in hit for r in p_by_d.get(d, [])}),
             "others_succeeded": sum(r["status"] == "SUCCESS" for d in others for r in by_d.get(d, [])),
             "ok": self.ok})
        # The first round after the link returns (after --settle S): every
        # room Success.
        time.sleep(c.get("settle_s", 0))
        plan, res, d_of, wall, before, after = self.round("after_cut")
        by_d, p_by_d = self.report("after_cut", plan, res, d_of, wall, before, after)
        self.expect_all_success("after_cut", by_d, p_by_d, self.d_names())
        out({"outcome": "after_cut", "since_link_up_s": round(time.monotonic() - t_up, 3),
             "rooms": sum(len(v) for v in by_d.values()),
             "succeeded": sum(r["status"] == "SUCCESS" for v in by_d.values() for r in v), "ok": self.ok})

    def kill(self, victim):
        c = self.cfg
        c["_killed"] = (victim,)

        def during():
            time.sleep(c["layer_ms"] / 1000.0)
            self.nodes[victim].kill()
            out({"event": "killed", "node": victim})

        plan, res, d_of, wall, before, after = self.round("kill", during=during)
        by_d, p_by_d = self.report("kill", plan, res, d_of, wall, before, after)
        self.check(self.nodes[victim].proc.poll() is not None, "kill: %s still runs" % victim)
        lim = self.deadline_s()
        if victim.startswith("d"):
            # P's rooms for the dead D fail (it cannot say anything itself);
            # the other D instances' rooms go on.
            hit, recs = [victim], p_by_d.get(victim, [])
            self.expect_failed("kill", recs, "P towards killed %s" % victim, lim)
        else:
            # A dead P rank: every room needs its shard, so every D fails
            # every room of the round (heartbeat), with a reason.
            hit = self.d_names()
            recs = [r for d in hit for r in by_d.get(d, [])]
            for d in hit:
                self.expect_failed("kill", by_d.get(d, []), "D %s (P %s killed)" % (d, victim), lim)
        others = [d for d in self.d_names() if d not in hit]
        self.expect_all_success("kill", by_d, p_by_d, others)
        out({"outcome": "kill", "node": victim, "victim_rooms_failed": sum(r["status"] == "FAILED" for r in recs),
             "victim_reasons": sorted({r["reason"] for r in recs}),
             "others_succeeded": sum(r["status"] == "SUCCESS" for d in others for r in by_d.get(d, [])),
             "ok": self.ok})
        c["_killed"] = ()
        self.start(victim)  # a D with the same session id; a P rank with the same rank
        t_up = time.monotonic()
        plan, res, d_of, wall, before, after = self.round("after_kill")
        by_d, p_by_d = self.report("after_kill", plan, res, d_of, wall, before, after)
        self.expect_all_success("after_kill", by_d, p_by_d, self.d_names())
        out({"outcome": "after_kill", "since_restart_s": round(time.monotonic() - t_up, 3),
             "rooms": sum(len(v) for v in by_d.values()),
             "succeeded": sum(r["status"] == "SUCCESS" for v in by_d.values() for r in v), "ok": self.ok})

    def stop(self):
        for n in list(self.nodes.values()):
            n.stop()
        if self.bootstrap:
            self.bootstrap.proc.terminate()
            try:
                self.bootstrap.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            self.bootstrap.kill()


def _fails(recs):
    return sorted({"%s (%s)" % (r["status"], r["reason"]) for r in recs if r["status"] != "SUCCESS"})[:4]


def orchestrate(path):
    cfg = json.load(open(path))
    cl = Cluster(cfg)

    def on_term(sig, frame):
        raise KeyboardInterrupt("signal %d" % sig)
    signal.signal(signal.SIGTERM, on_term)
    t0 = time.monotonic()
    try:
        cl.start_bootstrap()
        for name in cl.p_names() + cl.d_names():
            cl.start(name)
        cl.healthy("healthy", cfg["rounds"])
        if cfg.get("cut"):
            cl.cut(cfg["cut"], cfg["cut_s"])
        if cfg.get("kill"):
            cl.kill(cfg["kill"])
    except (RuntimeError, KeyboardInterrupt) as e:
        cl.check(False, "run stopped: %s" % e)
    finally:
        cl.stop()
    out(dict(cl.totals, result="ok" if cl.ok else "FAILED", wall_s=round(time.monotonic() - t0, 3)))
    return 0 if cl.ok else 1


def main(argv):
    if len(argv) == 3 and argv[1] == "orchestrate":
        return orchestrate(argv[2])
    if len(argv) == 3 and argv[1] in ("p", "d"):
        cfg = json.loads(argv[2])
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(1))
        (node_p if argv[1] == "p" else node_d)(cfg)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
