#!/usr/bin/env python3
"""Layer-wise against whole-request through layercake.vllm, side by side in
one run: two real vLLM CPU engines (tests/vllm/engine_peer.py) per mode, a
tiny Llama of --layers layers, --prompts prompts of --tokens tokens.

    $(scripts/vllm-venv.sh)/bin/python bench/vllm_layerwise.py [--layers 16]

Three modes: P layer-wise or whole-request, D loading asynchronously (vLLM
resumes the request once every byte landed) or per layer (D's forward
starts at once and waits in wait_for_layer_load for each layer). Per room:
the time from P's last layer record (its last save_kv_layer) to D having
every block (async: D notices at its next engine step; per_layer: D's wait
for the last layer returns) and to D's first token (the end of D's first
forward over the request), and P's CPU
time per save_kv_layer call (thread CPU time, so the engine's own threads are
not counted). Needs PYTHONPATH=python and LAYERCAKE_LIB (as make test-vllm)."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "vllm"))
import tiny_llama  # noqa: E402

PEER = os.path.join(ROOT, "tests", "vllm", "engine_peer.py")


MODES = (("layer-wise, D async", 1, "async"), ("whole-request, D async", 0, "async"),
         ("layer-wise, D per_layer", 1, "per_layer"))


def ms(a, b):
    return [(a[r] - b[r]) / 1e6 for r in b if r in a]


def pair(tmp, model, prompts, interval, load_mode, batch_tokens):
    tag = f"{interval}-{load_mode}"
    tf = os.path.join(tmp, f"timing-{tag}.jsonl")
    bs = os.path.join(tmp, f"bs-{tag}")
    env = dict(os.environ, LC_VLLM_EXTRA=json.dumps({"layerwise_interval": interval,
                                                     "load_mode": load_mode,
                                                     "timing_file": tf}),
               LC_VLLM_MAX_TOKENS="2", LC_VLLM_MAX_LEN="1024", LC_VLLM_WARMUP="1",
               LC_VLLM_P_WAITS_D="1", LC_VLLM_BATCH_TOKENS=str(batch_tokens))
    procs = []
    for role in ("P", "D"):
        out = os.path.join(tmp, f"{role}-{tag}.json")
        log = open(os.path.join(tmp, f"{role}-{tag}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, PEER, "--role", role, "--model", model,
                                        "--prompts", prompts, "--out", out, "--bootstrap-file", bs],
                                       stdout=log, stderr=subprocess.STDOUT, env=env), out, log))
    (p, p_out, _), (d, _, _) = procs
    rc_d = d.wait(timeout=600)
    open(p_out + ".done", "w").close()
    rc_p = p.wait(timeout=120)
    if rc_d or rc_p:
        raise SystemExit(f"{tag}: P rc {rc_p}, D rc {rc_d}; logs in {tmp}")  # kept
    ev = [json.loads(x) for x in open(tf)]
    last = {e["room"]: e["t_ns"] for e in ev if e["event"] == "p_last_layer"}
    land = {e["room"]: e["t_ns"] for e in ev if e["event"] == "d_all_landed"}
    first = {e["room"]: e["t_ns"] for e in ev if e["event"] == "d_first_token"}
    # Every save_kv_layer's CPU time but the first step's (cold caches, the
    # first rooms): the median per call.
    steps = [e["save_cpu_ns"] for e in ev if e["event"] == "p_stats"]
    calls = [c for s in steps[1:] for c in s] or [c for s in steps for c in s]
    cpu = statistics.median(calls) / 1e3
    return ms(land, last), ms(first, last), cpu, len(calls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=480)
    ap.add_argument("--modes", default="all", help="comma-separated indexes into MODES, or all")
    ap.add_argument("--batch-tokens", type=int, default=128,
                    help="max_num_batched_tokens: chunked prefill, one chunk per step")
    ap.add_argument("--keep", action="store_true", help="keep the folder (logs, timing files)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lc-vllm-bench-")
    model = tiny_llama.write(os.path.join(tmp, "model"), seed=0, layers=a.layers)
    prompts = os.path.join(tmp, "prompts.json")
    with open(prompts, "w") as f:
        json.dump([[(i * 37 + k * 11) % 500 + 3 for k in range(a.tokens)]
                   for i in range(a.prompts)], f)
    print(f"{a.layers} layers, {a.prompts} prompts x {a.tokens} tokens, "
          f"KV {a.layers * a.tokens * 2 * 2 * 32 * 4 / 1e6:.1f} MB per prompt")
    def fmt(x):
        if not x:
            return "n/a"
        return f"{statistics.median(x):7.2f} ms (min {min(x):.2f}, max {max(x):.2f}, {len(x)} rooms)"

    print("from P's last save_kv_layer (CLOCK_MONOTONIC) to D having every block / D's first token")
    modes = MODES if a.modes == "all" else [MODES[int(i)] for i in a.modes.split(",")]
    for name, interval, load_mode in modes:
        land, first, cpu, calls = pair(tmp, model, prompts, interval, load_mode, a.batch_tokens)
        print(f"{name:24s} every block: {fmt(land)}; first token: {fmt(first)}; "
              f"P CPU per save_kv_layer median {cpu:.1f} us ({calls} calls)", flush=True)
    if a.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
