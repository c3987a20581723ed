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


def run_pair(tmp_path, model, lengths, load_mode, env=None, ps=None, extra=None):
    """One engine alone (the reference), then P and D through layercake, on
    the same prompts (ps, or made of lengths); returns (reference's result,
    D's, P's)."""
    prompts = tmp_path / "prompts.json"
    ps = ps or [[(i * 37 + k * 11) % 500 + 3 for k in range(n)] for i, n in enumerate(lengths)]
    prompts.write_text(json.dumps(ps))
    env = dict(os.environ, **(env or {}))

    ref, ref_out, log = engine(tmp_path, "ref", model, prompts, env=env)
    assert ref.wait(timeout=600) == 0, tail(tmp_path, "ref")
    log.close()

    bs = tmp_path / "bootstrap"
    env["LC_VLLM_EXTRA"] = json.dumps(dict(extra or {}, load_mode=load_mode))
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
    return (json.loads(ref_out.read_text()), json.loads(d_out.read_text()),
            json.loads(p_out.read_text()))


def check_tokens(ref, got, p, lengths, load_mode):
    want = ref["tokens"]
    same = sum(a == b for a, b in zip(got["tokens"], want))
    print(f"tokens identical ({load_mode}): {same} of {len(want)}")
    assert same == len(want), (got["tokens"], want)
    want_cached = [n - (load_mode == "per_layer") for n in lengths]
    assert got["cached"] == want_cached, got["cached"]
    assert [t[0] for t in p["tokens"]] == [t[0] for t in want]  # P's own first token agrees too


@pytest.mark.parametrize("load_mode", ["async", "per_layer"])
def test_two_engines_tokens_identical(tmp_path, load_mode):
    model = tiny_llama.write(str(tmp_path / "model"), seed=0)
    ref, got, p = run_pair(tmp_path, model, LENGTHS, load_mode)
    check_tokens(ref, got, p, LENGTHS, load_mode)


HYBRID_LENGTHS = [7, 33, 100, 230, 300]
WINDOW = 48  # tokens: the sliding layers keep cdiv(48, 32) + 1 = 3 blocks


def test_hybrid_model(tmp_path):
    """A hybrid model (layers 0, 2 sliding window attention over 48 tokens,
    1, 3 full attention): vLLM keeps its hybrid KV cache manager on with
    layercake (SupportsHMA) and makes two KV cache groups; prompts up to
    ~6x the window, chunked prefill over up to 5 steps of 64 tokens, so
    both P's prefill and D drop the sliding group's early blocks. D's
    tokens equal one engine's alone, every prompt token from the
    connector (async loads: per_layer reports failures by block, which vLLM
    refuses with several groups)."""
    load_mode = "async"
    model = tiny_llama.write(str(tmp_path / "model"), seed=1, sliding_window=WINDOW)
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "LC_VLLM_BATCH_TOKENS": "64"}
    ref, got, p = run_pair(tmp_path, model, HYBRID_LENGTHS, load_mode, env)
    for r in (ref, got, p):
        groups = r["kv_cache_groups"]
        assert [g[:2] for g in groups] == [["SlidingWindowSpec", WINDOW],
                                           ["FullAttentionSpec", None]], groups
    check_tokens(ref, got, p, HYBRID_LENGTHS, load_mode)


def test_prefix_caching(tmp_path):
    """Prefix caching on at P and D, prefill chunked (64 tokens a step): a
    second wave of prompts shares a 128-token prefix (4 blocks) with the
    first wave's. D's tokens equal one engine's alone (prefix caching on
    too), and D granted P only the blocks it did not hold: for each
    second-wave prompt, a prefix of at least the 4 shared blocks and that
    many fewer pages (D's own memory, as D's d_grant timing events say)."""
    shared = [(k * 13) % 500 + 3 for k in range(128)]
    first = [shared + [(k * 7 + i) % 500 + 3 for k in range(n)] for i, n in enumerate((90, 200))]
    second = [shared + [(k * 5 + 9 * i) % 500 + 3 for k in range(n)] for i, n in enumerate((60, 170))]
    ps = first + second
    lengths = [len(p) for p in ps]
    tf = tmp_path / "timing.jsonl"
    env = {"LC_VLLM_PREFIX_CACHING": "1", "LC_VLLM_WAVES": "2", "LC_VLLM_BATCH_TOKENS": "64"}
    ref, got, p = run_pair(tmp_path, tiny_llama.write(str(tmp_path / "model"), seed=0), lengths,
                           "async", env, ps=ps, extra={"timing_file": str(tf)})
    same = sum(a == b for a, b in zip(got["tokens"], ref["tokens"]))
    print(f"tokens identical (prefix caching): {same} of {len(ps)}")
    assert same == len(ps), (got["tokens"], ref["tokens"])
    assert got["cached"] == lengths, got["cached"]  # D's own prefix + the connector's
    grants = {e["room"]: e for e in map(json.loads, tf.read_text().splitlines())
              if e["event"] == "d_grant"}
    assert sorted(grants) == [5000 + i for i in range(len(ps))], grants
    for i, n in enumerate(lengths):
        g = grants[5000 + i]
        print(f"prompt {i}: {n} tokens, D's prefix {g['prefix_tokens']}, {g['pages']} pages granted")
        blocks = -(-n // 32)
        assert g["prefix_tokens"] + 32 * g["pages"] >= n and g["pages"] <= blocks, g
        if i >= len(first):  # the shared blocks came from D's own cache
            assert g["prefix_tokens"] >= 128 and g["pages"] <= blocks - 4, g
