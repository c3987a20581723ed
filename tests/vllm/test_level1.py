"""Level 1: vLLM's own Scheduler with layercake.vllm.LayercakeConnector in
both roles, P and D as two processes (tests/vllm/sched_peer.py) over tcp on
loopback, real CPU KV tensors in the CPU backend's layout (and, for the
byte-exact case, FlashAttention's, MLA's and FlashInfer's permuted HND).

Each test writes a plan (requests, events), runs P, waits for its bootstrap
address, runs D, and checks both results: every prompt byte D received
equals what P wrote, both schedulers empty with every block free, no sender
or receiver left in the connectors, no room left in P's engine, no grant
left in D's context."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "sched_peer.py")


def prompt(n, seed):
    return [(seed * 37 + i * 11) % 500 + 3 for i in range(n)]


def run(tmp_path, plan, timeout=150, during=None):
    pf, bs = tmp_path / "plan.json", tmp_path / "bootstrap"
    pf.write_text(json.dumps(plan))
    env = dict(os.environ)
    outs, procs = {}, {}
    logs = {r: open(tmp_path / f"{r}.log", "w") for r in "PD"}
    try:
        for role in "PD":
            outs[role] = tmp_path / f"{role}.json"
            procs[role] = subprocess.Popen(
                [sys.executable, PEER, "--role", role, "--plan", str(pf), "--out", str(outs[role]),
                 "--bootstrap-file", str(bs)], stdout=logs[role], stderr=subprocess.STDOUT, env=env)
            if role == "P":
                t0 = time.monotonic()
                while not bs.exists():
                    assert procs["P"].poll() is None, (tmp_path / "P.log").read_text()[-3000:]
                    assert time.monotonic() - t0 < 90, "P did not publish its bootstrap address"
                    time.sleep(0.2)
        if during is not None:
            during(procs, bs)
        for role in "PD":
            rc = procs[role].wait(timeout=timeout)
            assert rc == 0, f"{role} exited {rc}: " + (tmp_path / f"{role}.log").read_text()[-3000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        for f in logs.values():
            f.close()
    return json.loads(outs["P"].read_text()), json.loads(outs["D"].read_text())


def assert_clean(p, d):
    for r in (p, d):
        assert not r["timed_out"], r
        assert r["requests_left"] == 0 and r["waiting"] == 0 and r["running"] == 0, r
        assert r["free_blocks"] == r["total_blocks"] - 1, r  # all but vLLM's null block
        assert r["senders_left"] == 0 and r["receivers_left"] == 0, r
    assert p["rooms_active"] == 0, p
    assert d["grants_left"] == 0, d


@pytest.mark.parametrize("layout", ["cpu", "flash", "mla", "hnd"])
def test_requests_byte_exact(tmp_path, layout):
    # Lengths: under a block, exactly one, several, and one longer than the
    # step's token budget (64) so P's prefill is chunked over several steps.
    lens = [5, 32, 77, 150]
    reqs = [{"id": f"r{i}", "room": 1000 + i, "prompt": prompt(n, i), "max_tokens": 3}
            for i, n in enumerate(lens)]
    p, d = run(tmp_path, {"requests": reqs, "deadline_s": 90, "layout": layout})
    assert_clean(p, d)
    assert d["checked"] == {r["id"]: len(r["prompt"]) for r in reqs}
    assert d["bad_bytes"] == {r["id"]: 0 for r in reqs}
    assert sorted(p["finished_sending"]) == sorted(r["id"] for r in reqs)
    assert d["load_errors"] == []
    assert sorted(d["done"]) == sorted(p["done"]) == sorted(r["id"] for r in reqs)
    assert p["stats"]["save_kv_layer_calls"] > 0


def test_chunks_stream_as_computed(tmp_path):
    # A 540-token prompt over 9 prefill chunks (64 tokens a step): P stops
    # after the step that computed its first chunk and waits until D holds
    # that chunk's 64 tokens byte-exact in its own memory, before P computes
    # the rest: an earlier chunk's blocks land while later chunks are still
    # to be computed. Then every byte of the prompt, as always.
    reqs = [{"id": "r0", "room": 6100, "prompt": prompt(540, 9), "max_tokens": 2}]
    ev = [{"gate": "r0", "tokens": 64}]
    p, d = run(tmp_path, {"requests": reqs, "events": ev, "deadline_s": 90})
    assert_clean(p, d)
    assert p.get("gated") and not p.get("gate_timeout"), p
    assert p["gate_tokens_left"] >= 7 * 64, p  # P had 7 or more chunks still to compute
    assert d.get("early_landed"), d
    assert d["bad_bytes"] == {"r0": 0}


def test_abort_on_d_mid_layer(tmp_path):
    # P pauses after layer 1 of r1's forward; D aborts r1 once a layer has landed.
    reqs = [{"id": "r0", "room": 2000, "prompt": prompt(40, 1), "max_tokens": 2},
            {"id": "r1", "room": 2001, "prompt": prompt(60, 2), "max_tokens": 2}]
    ev = [{"id": "r1", "pause_at_layer": 1, "pause_s": 3.0},
          {"abort": "r1", "role": "D", "when": "layers_landed", "layers": 1}]
    p, d = run(tmp_path, {"requests": reqs, "events": ev, "deadline_s": 90})
    assert_clean(p, d)
    assert d["aborted"] == ["r1"]
    assert d["bad_bytes"].get("r0") == 0 and "r1" not in d["checked"]
    assert sorted(p["finished_sending"]) == ["r0", "r1"]  # r1's blocks freed once its room failed


def test_abort_on_p_mid_prefill(tmp_path):
    # r1's prompt takes three steps on P; P aborts it after its first chunk
    # (room bootstrapped, blocks granted, nothing sent): D's room fails, D
    # fails the request (vLLM's default failure policy), both sides clean.
    reqs = [{"id": "r0", "room": 3000, "prompt": prompt(20, 3), "max_tokens": 2},
            {"id": "r1", "room": 3001, "prompt": prompt(170, 4), "max_tokens": 2}]
    ev = [{"abort": "r1", "role": "P", "when": "scheduled"}]
    p, d = run(tmp_path, {"requests": reqs, "events": ev, "deadline_s": 90})
    assert_clean(p, d)
    assert p["aborted"] == ["r1"]
    assert d["bad_bytes"].get("r0") == 0 and "r1" not in d["checked"]
    assert "r1" in d["finished_recving"] and d["load_errors"], d


def test_forced_failure_unknown_room(tmp_path):
    # D asks for a room P never opens: D's bootstrap deadline fails it, the
    # failure comes back as load errors, and nothing is left behind.
    reqs = [{"id": "r0", "room": 4000, "prompt": prompt(40, 5), "max_tokens": 2}]
    # The room D opened on P for x1 is dropped by P's engine at its
    # waiting_timeout_ms (set to 4 s here; drain_s bounds the wait for it).
    plan = {"requests": reqs, "deadline_s": 60, "drain_s": 15,
            "extra": {"bootstrap_timeout_s": 3, "knobs": {"waiting_timeout_ms": 4000}},
            "d_only": [{"id": "x1", "room": 4999, "prompt": prompt(50, 6), "max_tokens": 2}]}
    p, d = run(tmp_path, plan)
    assert_clean(p, d)
    assert d["bad_bytes"] == {"r0": 0}
    assert "x1" in d["finished_recving"] and d["load_errors"], d


def wait_file(path, procs, what, deadline_s=90):
    t0 = time.monotonic()
    while not os.path.exists(path):
        for role, p in procs.items():
            assert p.poll() is None, f"{role} exited {p.returncode} before {what}"
        assert time.monotonic() - t0 < deadline_s, f"no {what} within {deadline_s} s"
        time.sleep(0.01)


def test_abort_on_p_between_layers(tmp_path):
    # P's engine takes an abort of r1 between layers 1 and 2 of the forward
    # that sends it, with D stopped (SIGSTOP) from that moment so that the
    # room is still in flight when P's worker hears of the abort (at the
    # next step): P must keep r1's blocks until the room is final (cancelled),
    # then free them; D, resumed, must fail r1 (its room was cancelled) and
    # still hold r0 byte-exact; nothing left on either side.
    reqs = [{"id": "r0", "room": 5000, "prompt": prompt(20, 7), "max_tokens": 2},
            {"id": "r1", "room": 5001, "prompt": prompt(60, 8), "max_tokens": 2}]
    ev = [{"abort": "r1", "role": "P", "when": "after_layer", "layer": 1, "stop_d": True}]

    def during(procs, bs):
        wait_file(str(bs) + ".p-at-layer", procs, "P's abort point")
        procs["D"].send_signal(signal.SIGSTOP)
        open(str(bs) + ".d-stopped", "w").close()
        try:
            wait_file(str(bs) + ".p-final", {"P": procs["P"]}, "P's room final")
        finally:
            procs["D"].send_signal(signal.SIGCONT)

    p, d = run(tmp_path, {"requests": reqs, "events": ev, "deadline_s": 90}, during=during)
    assert_clean(p, d)
    assert p["aborted"] == ["r1"]
    # At the abort r1's blocks were still held (delayed free): freed only once final.
    assert p["free_after_abort"] + p["held_at_abort"] <= p["total_blocks"] - 1, p
    assert p["free_when_final"] >= p["free_after_abort"] + p["held_at_abort"], p
    assert sorted(p["finished_sending"]) == ["r0", "r1"]
    assert d["bad_bytes"].get("r0") == 0 and "r1" not in d["checked"], d
    assert "r1" in d["finished_recving"] and d["load_errors"], d


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("p_tp,d_tp,layout", [(2, 1, "cpu"), (2, 1, "flash"), (2, 1, "mla"),
                                              (1, 2, "cpu"), (1, 2, "flash")])
def test_tp_sizes_differ(tmp_path, p_tp, d_tp, layout):
    # P and D at different TP sizes: each side runs one worker connector per
    # rank with the rank's share of the KV heads (an MLA latent whole on
    # every rank), vLLM's KVOutputAggregator combines the workers' outputs;
    # every rank of D holds its heads of every prompt token byte-exact.
    lens = [5, 40, 150]
    reqs = [{"id": f"r{i}", "room": 2000 + i, "prompt": prompt(n, i + 7), "max_tokens": 2}
            for i, n in enumerate(lens)]
    p, d = run(tmp_path, {"requests": reqs, "deadline_s": 90, "layout": layout,
                          "p_tp": p_tp, "d_tp": d_tp, "bootstrap_port": free_port()})
    assert_clean(p, d)
    assert (p["tp"], d["tp"]) == (p_tp, d_tp)
    assert d["checked"] == {r["id"]: len(r["prompt"]) for r in reqs}
    assert d["bad_bytes"] == {r["id"]: 0 for r in reqs}
    assert sorted(p["finished_sending"]) == sorted(r["id"] for r in reqs)
    assert d["load_errors"] == []
