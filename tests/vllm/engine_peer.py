"""One real vLLM CPU engine (offline LLM) for the level-2 test:

    engine_peer.py --role ref|P|D --model DIR --prompts FILE --out FILE [--bootstrap-file F]

ref: one engine alone, greedy. P: kv_producer, max_tokens=1, each prompt's
room in kv_transfer_params; it stays up until FILE.done exists (D finished).
D: kv_consumer, greedy, the same rooms and P's bootstrap address. Writes
{"tokens": [[...]...], "cached": [num_cached_tokens...]}."""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

MAX_TOKENS = int(os.environ.get("LC_VLLM_MAX_TOKENS", 8))


def kv_cache_groups(llm):
    """The engine's KV cache groups, [[spec, sliding window, layers]...]
    (vLLM's hybrid KV cache manager makes one per attention kind), where
    the engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0);
    None otherwise."""
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    if core is None:
        return None
    return [[type(g.kv_cache_spec).__name__, getattr(g.kv_cache_spec, "sliding_window", None),
             list(g.layer_names)] for g in core.scheduler.kv_cache_config.kv_cache_groups]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("ref", "P", "D"), required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bootstrap-file")
    a = ap.parse_args()
    from vllm import LLM, SamplingParams
    prompts = json.load(open(a.prompts))
    kw = {}
    if a.role != "ref":
        extra = {"bootstrap_timeout_s": 60}
        extra.update(json.loads(os.environ.get("LC_VLLM_EXTRA", "{}")))  # bench/vllm_layerwise.py
        if a.role == "P":
            extra["bootstrap_file"] = a.bootstrap_file
        else:
            t0 = time.monotonic()
            while not os.path.exists(a.bootstrap_file):
                if time.monotonic() - t0 > 300:
                    raise SystemExit("D: no bootstrap address from P")
                time.sleep(0.2)
            extra["bootstrap"] = open(a.bootstrap_file).read().strip()
        kw["kv_transfer_config"] = {
            "kv_connector": "LayercakeConnector", "kv_connector_module_path": "layercake.vllm",
            "kv_role": "kv_producer" if a.role == "P" else "kv_consumer",
            "kv_connector_extra_config": extra}
    bt = os.environ.get("LC_VLLM_BATCH_TOKENS")  # chunked prefill (a bench, test_hybrid_model)
    if bt:
        kw.update(max_num_batched_tokens=int(bt), enable_chunked_prefill=True)
    llm = LLM(model=a.model, skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
              block_size=32, max_model_len=int(os.environ.get("LC_VLLM_MAX_LEN", 512)), max_num_seqs=8,
              enable_prefix_caching=os.environ.get("LC_VLLM_PREFIX_CACHING") == "1",
              seed=0, **kw)
    if os.environ.get("LC_VLLM_WARMUP") == "1":  # bench: one local request first (no connector)
        llm.generate([{"prompt_token_ids": prompts[0]}],
                     [SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True,
                                     detokenize=False)], use_tqdm=False)
    sps = []
    for i, _ in enumerate(prompts):
        extra = {}
        if a.role != "ref":
            extra = {"kv_transfer_params": {"layercake_room": 5000 + i,
                                            "layercake_pair": f"{5000 + i:032x}",
                                            "layercake_bootstrap": kw["kv_transfer_config"][
                                                "kv_connector_extra_config"].get("bootstrap")}}
        sps.append(SamplingParams(temperature=0.0, max_tokens=1 if a.role == "P" else MAX_TOKENS,
                                  ignore_eos=True, detokenize=False, extra_args=extra or None))
    # bench: P starts its prompts once D is up and about to send its own,
    # so that the timings measure the streaming, not D's start-up.
    ready = a.bootstrap_file and a.bootstrap_file + ".d-ready"
    if a.role == "D" and ready:
        open(ready, "w").close()
    if a.role == "P" and os.environ.get("LC_VLLM_P_WAITS_D") == "1":
        t0 = time.monotonic()
        while not os.path.exists(ready):
            if time.monotonic() - t0 > 300:
                raise SystemExit("P: D never got ready")
            time.sleep(0.05)
    # LC_VLLM_WAVES=n: the prompts in n waves one after another (a later
    # wave's prompts may hit the prefix cache of an earlier one's).
    waves = max(1, int(os.environ.get("LC_VLLM_WAVES", "1")))
    step = -(-len(prompts) // waves)
    outs = []
    for w in range(0, len(prompts), step):
        outs += llm.generate([{"prompt_token_ids": p} for p in prompts[w:w + step]],
                             sps[w:w + step], use_tqdm=False)
    res = {"tokens": [list(o.outputs[0].token_ids) for o in outs],
           "cached": [o.num_cached_tokens for o in outs], "kv_cache_groups": kv_cache_groups(llm)}
    with open(a.out, "w") as f:
        json.dump(res, f)
    if a.role == "P":  # the engine keeps stepping (has_pending_push_work) until D has every byte
        t0 = time.monotonic()
        while not os.path.exists(a.out + ".done") and time.monotonic() - t0 < 300:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
