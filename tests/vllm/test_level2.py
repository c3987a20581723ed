"""Level 2: two real vLLM CPU engines (offline LLM, separate processes) with a
tiny Llama generated here with seeded weights (tests/vllm/tiny_llama.py), P
as kv_producer and D as kv_consumer through layercake.vllm over tcp. D's
greedy tokens must equal one engine's alone, for prompts of different
lengths, and D must have taken every prompt token from the connector
(num_cached_tokens == prompt length with prefix caching off: vLLM
recomputes only the last one to sample). Run for both of D's load modes:
"async" (vLLM resumes the request once every byte landed) and "per_layer"
(D's forward starts at once and waits for each layer in
wait_for_layer_load; there the connector provides all but the last prompt
token, which vLLM computes itself)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_llama  # noqa: E402

PEER = os.path.join(HERE, "engine_peer.py")
LENGTHS = [7, 33, 64, 100, 150]


def engine(tmp, role, model, prompts, bs=None, env=None):
    out = tmp / f"{role}.json"
    cmd = [sys.executable, PEER, "--role", role, "--model", str(model), "--prompts", str(prompts),
           "--out", str(out)]
    if bs is not None:
        cmd += ["--bootstrap-file", str(bs)]
    log = open(tmp / f"{role}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), out, log


def tail(tmp, role):
    return (tmp / f"{role}.log").read_text()[-4000:]


@pytest.mark.parametrize("load_mode", ["async", "per_layer"])
def test_two_engines_tokens_identical(tmp_path, load_mode):
    model = tiny_llama.write(str(tmp_path / "model"), seed=0)
    prompts = tmp_path / "prompts.json"
    ps = [[(i * 37 + k * 11) % 500 + 3 for k in range(n)] for i, n in enumerate(LENGTHS)]
    prompts.write_text(json.dumps(ps))

    ref, ref_out, log = engine(tmp_path, "ref", model, prompts)
    assert ref.wait(timeout=600) == 0, tail(tmp_path, "ref")
    log.close()
    want = json.loads(ref_out.read_text())["tokens"]

    bs = tmp_path / "bootstrap"
    env = dict(os.environ, LC_VLLM_EXTRA=json.dumps({"load_mode": load_mode}))
    p, p_out, plog = engine(tmp_path, "P", model, prompts, bs, env)
    d, d_out, dlog = engine(tmp_path, "D", model, prompts, bs, env)
    try:
        assert d.wait(timeout=600) == 0, tail(tmp_path, "D") + tail(tmp_path, "P")
        (tmp_path / "P.json.done").touch()
        assert p.wait(timeout=120) == 0, tail(tmp_path, "P")
    finally:
        for x in (p, d):
            if x.poll() is None:
                x.kill()
        plog.close()
        dlog.close()
    got = json.loads(d_out.read_text())
    same = sum(a == b for a, b in zip(got["tokens"], want))
    print(f"tokens identical ({load_mode}): {same} of {len(want)}")
    assert same == len(want), (got["tokens"], want)
    want_cached = [n - (load_mode == "per_layer") for n in LENGTHS]
    assert got["cached"] == want_cached, got["cached"]
    first = json.loads(p_out.read_text())["tokens"]
    assert [t[0] for t in first] == [t[0] for t in want]  # P's own first token agrees too

