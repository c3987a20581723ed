"""One side of a level-1 test: vLLM's own Scheduler and the layercake
connector in both of its roles (scheduler and worker) in this process, with
the model runner's calls around each step done here as vLLM's runner does
them (bind metadata, the forward's per-layer save_kv_layer, wait_for_save,
transfer results, load errors, worker metadata, clear) and real CPU KV
tensors in one of the layouts vLLM's attention backends hand to
register_kv_caches (PLAN's "layout"): the CPU backend's [blocks, kv_heads,
block_size, 2 * head_dim] with all layers in one allocation (default),
FlashAttention's [2, blocks, block_size, kv_heads, head_dim], MLA's
[blocks, block_size, dim], and FlashInfer's HND (memory [blocks, 2,
kv_heads, block_size, head_dim], handed over as a permuted NHD view).

    sched_peer.py --role P|D --plan PLAN.json --out RESULT.json [--bootstrap-file F]

P's "forward" writes each scheduled token's K/V with a pattern made of the
token id, its position and the layer; D checks, when a request's KV has
arrived, every byte of every prompt token in its blocks against the same
pattern. PLAN lists the requests (id, room, prompt, max_tokens) and the
events (abort a request at a condition, pause P's forward at a layer). The
result: what was checked, the scheduler's state at the end, the leftovers.
"""
import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch  # noqa: E402

LAYERS, KV_HEADS, HEAD_DIM, BLOCK, BLOCKS = 4, 2, 32, 32, 64


def model_dir():
    d = tempfile.mkdtemp(prefix="lc-vllm-model-")
    atexit.register(shutil.rmtree, d, True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
           "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": KV_HEADS,
           "num_hidden_layers": LAYERS, "vocab_size": 512, "max_position_embeddings": 1024,
           "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "bos_token_id": 1,
           "eos_token_id": 2, "head_dim": HEAD_DIM}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def make(role, extra, layout, tp=1):
    from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                             SchedulerConfig, VllmConfig)
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from layercake.vllm import LayercakeConnector

    model = ModelConfig(model=model_dir(), skip_tokenizer_init=True, dtype="bfloat16",
                        max_model_len=1024, seed=0)
    sched_cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=1024,
                                enable_chunked_prefill=True, is_encoder_decoder=False)
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=False)
    cache.num_gpu_blocks = BLOCKS
    extra = dict(extra, tp_size=tp)

    def ktc_of(x):
        return KVTransferConfig(kv_connector="LayercakeConnector",
                                kv_connector_module_path="layercake.vllm",
                                kv_role="kv_producer" if role == "P" else "kv_consumer",
                                kv_connector_extra_config=x)
    ktc = ktc_of(extra)
    vc = VllmConfig(model_config=model, scheduler_config=sched_cfg, cache_config=cache,
                    kv_transfer_config=ktc, device_config=DeviceConfig("cpu"))
    names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
    heads = KV_HEADS // tp  # each TP rank's share of the KV heads
    kcc = KVCacheConfig(num_blocks=BLOCKS, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(names, FullAttentionSpec(block_size=BLOCK, num_kv_heads=heads,
                                                  head_size=HEAD_DIM, dtype=torch.bfloat16))])
    sched = Scheduler(vllm_config=vc, kv_cache_config=kcc,
                      structured_output_manager=StructuredOutputManager(vc), block_size=BLOCK,
                      log_stats=False)
    # One worker per TP rank, as vLLM runs them (each its own connector,
    # context and KV tensors holding the rank's heads), rank 0 first: it
    # serves P's bootstrap, the others register there.
    workers, caches = [], []
    for r in range(tp):
        wvc = VllmConfig(model_config=model, scheduler_config=sched_cfg, cache_config=cache,
                         kv_transfer_config=ktc_of(dict(extra, tp_rank=r)),
                         device_config=DeviceConfig("cpu"))
        w = LayercakeConnector(wvc, KVConnectorRole.WORKER, kcc)
        c = {n: t for n, t in zip(names, kv_tensors(layout, heads))}
        w.register_kv_caches(c)
        workers.append(w)
        caches.append(c)
    return sched, workers, caches, names


def kv_tensors(layout, H=KV_HEADS):
    """Per-layer KV tensors as vLLM's attention backends hand them over,
    with H KV heads (a TP rank's share)."""
    D, B, N = HEAD_DIM, BLOCK, BLOCKS
    z = lambda *shape: torch.zeros(*shape, dtype=torch.bfloat16)  # noqa: E731
    if layout == "cpu":  # the CPU backend: every layer in one allocation
        pool = z(LAYERS, N, H, B, 2 * D)
        return [pool[i] for i in range(LAYERS)]
    if layout == "flash":  # FlashAttention: K and V leading, one tensor per layer
        return [z(2, N, B, H, D) for _ in range(LAYERS)]
    if layout == "mla":  # MLA: one latent vector per token, whole on every rank
        return [z(N, B, 2 * KV_HEADS * D) for _ in range(LAYERS)]
    if layout == "hnd":  # FlashInfer's HND: [N, 2, H, B, D] in memory, seen as NHD
        return [z(N, 2, H, B, D).permute(0, 1, 3, 2, 4) for _ in range(LAYERS)]
    raise SystemExit(f"unknown layout {layout}")


def slot(t, b, o):
    """The bytes of the token at offset o of block b in one layer's tensor."""
    u = t.view(torch.uint8)
    if u.dim() == 4:  # cpu [N, H, B, 2D]
        return u[b, :, o, :]
    if u.dim() == 3:  # mla [N, B, L]
        return u[b, o, :]
    if t.shape[0] == 2:  # flash [2, N, B, H, D]
        return u[:, b, o]
    return u[b, :, o]  # hnd, logically [N, 2, B, H, D]


def pattern(tok, pos, layer):
    """The bytes of one token's K/V in one layer, every head: [2 (K, V),
    kv_heads, head_dim * 2] uint8."""
    n = KV_HEADS * 2 * HEAD_DIM * 2
    x = (torch.arange(n, dtype=torch.int64) * 13 + tok * 131 + pos * 7 + layer * 31) % 251
    return x.to(torch.uint8).view(2, KV_HEADS, 2 * HEAD_DIM)


def rank_bytes(full, s, rank, tp):
    """What TP rank `rank` of `tp` holds of `full` (pattern()), shaped as
    its slot s: its heads' K and V (an MLA latent: all of it)."""
    if s.dim() == 1:  # mla: replicated
        return full.reshape(-1)
    h = KV_HEADS // tp
    part = full[:, rank * h:(rank + 1) * h, :]
    if s.dim() == 2:  # cpu [heads, K then V]
        return part.permute(1, 0, 2).reshape(s.shape)
    return part.reshape(s.shape)  # flash, hnd [2, heads, 2 * head_dim]


def check_request(caches, names, block_ids, prompt, rank=0, tp=1):
    bad = 0
    for pos, tok in enumerate(prompt):
        b, o = block_ids[pos // BLOCK], pos % BLOCK
        for li, n in enumerate(names):
            s = slot(caches[n], b, o)
            if not torch.equal(s, rank_bytes(pattern(tok, pos, li), s, rank, tp)):
                bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=("P", "D"), required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bootstrap-file")
    a = ap.parse_args()
    plan = json.load(open(a.plan))
    extra = dict(plan.get("extra", {}))
    if a.role == "P":
        extra["bootstrap_file"] = a.bootstrap_file
    else:
        extra["bootstrap"] = open(a.bootstrap_file).read().strip()

    from vllm import SamplingParams
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    tp = int(plan.get("p_tp" if a.role == "P" else "d_tp", 1))
    if a.role == "P" and tp > 1:
        extra["bootstrap_port"] = int(plan["bootstrap_port"])
    sched, workers, caches_r, names = make(a.role, extra, plan.get("layout", "cpu"), tp)
    worker, caches = workers[0], caches_r[0]  # the event hooks look at rank 0
    # Both sides up before any request, so that deadlines measure the
    # transfer, not the other process's start (importing vLLM takes seconds).
    ready = a.bootstrap_file + ".d-ready"
    if a.role == "D":
        open(ready, "w").close()
    else:
        t0 = time.monotonic()
        while not os.path.exists(ready):
            if time.monotonic() - t0 > 120:
                raise SystemExit("P: D did not start within 120 s")
            time.sleep(0.05)
    reqs = {}
    mine = plan["requests"] + (plan.get("d_only", []) if a.role == "D" else [])
    for r in mine:
        # The pairing value both sides agree on (a router draws it at random).
        params = {"layercake_room": r["room"],
                  "layercake_pair": r.get("pair", f"{r['room']:032x}")}
        if a.role == "D":
            params["layercake_bootstrap"] = extra["bootstrap"]
        # A hostile plan gives each side's kv_transfer_params as they are.
        params = r.get("p_params" if a.role == "P" else "d_params", params)
        sp = SamplingParams(max_tokens=1 if a.role == "P" else r["max_tokens"], temperature=0.0,
                            extra_args={"kv_transfer_params": params})
        req = Request(request_id=r["id"], prompt_token_ids=list(r["prompt"]), sampling_params=sp,
                      pooling_params=None)
        reqs[r["id"]] = r
        sched.add_request(req)
    events = plan.get("events", [])
    from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
    aggregator = KVOutputAggregator(expected_finished_count=tp)
    result = {"role": a.role, "checked": {}, "bad_bytes": {}, "aborted": [], "steps": 0,
              "finished_recving": [], "finished_sending": [], "load_errors": [], "finish": {}}
    deadline = time.monotonic() + float(plan.get("deadline_s", 60))
    done_ids = set()
    while sched.has_requests() and time.monotonic() < deadline:
        so = sched.schedule()
        result["steps"] += 1
        meta = so.kv_connector_metadata
        for w in workers:
            w.bind_connector_metadata(meta)
        block_tables = {rid: list(sched.kv_cache_manager.get_block_ids(rid)[0])
                        for rid in so.num_scheduled_tokens}
        # The forward: each layer's K/V of the scheduled tokens, then save_kv_layer.
        for li, n in enumerate(names):
            for rid, cnt in so.num_scheduled_tokens.items():
                req = sched.requests[rid]
                start = req.num_computed_tokens - cnt  # schedule() advanced it already
                for pos in range(start, start + cnt):
                    tok = req.all_token_ids[pos]
                    b, o = block_tables[rid][pos // BLOCK], pos % BLOCK
                    full = pattern(tok, pos, li)
                    for r in range(tp):
                        s = slot(caches_r[r][n], b, o)
                        s.copy_(rank_bytes(full, s, r, tp))
            for ev in events:
                if ev.get("pause_at_layer") == li and a.role == "P" and not ev.get("done") \
                        and ev["id"] in getattr(meta, "chunks", {}):  # the step that sends it
                    ev["done"] = True
                    time.sleep(ev.get("pause_s", 2.0))
            if so.total_num_scheduled_tokens:
                for w, c in zip(workers, caches_r):
                    w.save_kv_layer(n, c[n], None)
            for ev in events:
                # P's engine takes an abort while the sending forward is between
                # two layers (vLLM's engine core does so while the worker runs
                # the step, with asynchronous scheduling): the scheduler side
                # hears of it now, the worker at the next step's metadata.
                if ev.get("when") == "after_layer" and ev.get("layer") == li and a.role == "P" \
                        and not ev.get("done") and ev["abort"] in getattr(meta, "chunks", {}):
                    ev["done"] = True
                    if ev.get("stop_d"):  # the test stops D (SIGSTOP): the room stays in flight
                        open(a.bootstrap_file + ".p-at-layer", "w").close()
                        t0 = time.monotonic()
                        while not os.path.exists(a.bootstrap_file + ".d-stopped"):
                            if time.monotonic() - t0 > 30:
                                raise SystemExit("P: D was not stopped within 30 s")
                            time.sleep(0.01)
                    rid = ev["abort"]
                    held = len(block_tables[rid])
                    sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                    result["aborted"].append(rid)
                    # request_finished delayed the free: the blocks stay held.
                    result["free_after_abort"] = sched.kv_cache_manager.block_pool.get_num_free_blocks()
                    result["held_at_abort"] = held
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            req = sched.requests[rid]
            end = req.num_computed_tokens  # already advanced by schedule()
            sampled.append([7] if end >= req.num_tokens else [])
        outs = []
        for w in workers:
            w.start_load_kv(None)
            w.wait_for_save()
            tr = w.get_transfer_results(so.finished_req_ids)
            errs = w.get_block_ids_with_load_errors()
            wmeta = w.build_connector_worker_meta()
            w.clear_connector_metadata()
            outs.append(ModelRunnerOutput(
                req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=sampled,
                kv_connector_output=KVConnectorOutput(
                    finished_sending=tr.finished_sending or None,
                    finished_recving=tr.finished_recving or None,
                    invalid_block_ids=errs, failed_recving=set(tr.failed_recving),
                    kv_connector_worker_meta=wmeta)))
        # vLLM's own aggregation of its workers' outputs (a request is
        # finished once every rank says so; meta and errors combined).
        out = aggregator.aggregate(outs) if tp > 1 else outs[0]
        kvo = out.kv_connector_output
        fin_recv = set(kvo.finished_recving or ())
        failed = set(kvo.failed_recving or ())
        errs = set(kvo.invalid_block_ids or ())
        # D: a request whose KV just arrived: check every byte now, on every rank.
        for rid in sorted(fin_recv):
            result["finished_recving"].append(rid)
            if rid in sched.requests and rid not in failed and rid in reqs \
                    and rid not in result["aborted"]:
                bt = list(sched.kv_cache_manager.get_block_ids(rid)[0])
                result["bad_bytes"][rid] = sum(
                    check_request(caches_r[r], names, bt, reqs[rid]["prompt"], r, tp)
                    for r in range(tp))
                result["checked"][rid] = len(reqs[rid]["prompt"])
        result["finished_sending"] += sorted(kvo.finished_sending or ())
        result["load_errors"] += sorted(errs)
        eco = sched.update_from_output(so, out)
        for outs in eco.values():
            for o in outs.outputs:
                if o.finish_reason is not None:
                    done_ids.add(o.request_id)
                    result["finish"][o.request_id] = str(o.finish_reason)
        # Aborts, between steps as vLLM's engine does them.
        for ev in events:
            if "abort" not in ev or ev.get("done") or ev.get("role") != a.role:
                continue
            rid = ev["abort"]
            hit = False
            if ev.get("when") == "layers_landed" and a.role == "D":
                ent = worker._worker._recvs.get(rid)
                hit = ent is not None and ent[4] and ent[0].layers_ready >= ev.get("layers", 1)
            elif ev.get("when") == "scheduled" and rid in so.num_scheduled_tokens:
                hit = True
            if hit and rid in sched.requests:
                ev["done"] = True
                sched.finish_requests([rid], RequestStatus.FINISHED_ABORTED)
                result["aborted"].append(rid)
        for ev in events:
            # P: the aborted room is final and its blocks released: D may resume.
            if ev.get("stop_d") and ev.get("done") and a.role == "P" and not ev.get("told") \
                    and ev["abort"] not in worker._worker._senders and ev["abort"] not in sched.requests:
                ev["told"] = True
                result["free_when_final"] = sched.kv_cache_manager.block_pool.get_num_free_blocks()
                open(a.bootstrap_file + ".p-final", "w").close()
        # Streaming chunks: P stops after the step that sent `gate`'s first
        # chunk (not its last) until D has that chunk's tokens byte-exact in
        # its own memory; D watches. With the KV sent only with the last
        # chunk, P waits in vain (gate_timeout) and computes the rest after.
        for ev in events:
            if ev.get("gate") is None or ev.get("done"):
                continue
            rid = ev["gate"]
            if a.role == "P" and rid in getattr(meta, "chunks", {}) and not meta.chunks[rid][3]:
                ev["done"] = True
                t0 = time.monotonic()
                while not os.path.exists(a.bootstrap_file + ".d-early"):
                    if time.monotonic() - t0 > ev.get("wait_s", 20):
                        result["gate_timeout"] = True
                        break
                    time.sleep(0.01)
                else:
                    result["gated"] = True
                    result["gate_tokens_left"] = (sched.requests[rid].num_prompt_tokens
                                                  - sched.requests[rid].num_computed_tokens)
            elif a.role == "D" and rid in sched.requests:
                ent = worker._worker._recvs.get(rid)
                if ent is None or not ent[4]:
                    continue
                bt = list(sched.kv_cache_manager.get_block_ids(rid)[0])
                n = ev["tokens"]
                if check_request(caches, names, bt, reqs[rid]["prompt"][:n]) == 0:
                    ev["done"] = True
                    result["early_landed"] = True
                    open(a.bootstrap_file + ".d-early", "w").close()
        time.sleep(0.002)
    kvm = sched.kv_cache_manager
    result.update(
        timed_out=sched.has_requests(),
        requests_left=len(sched.requests), waiting=len(sched.waiting), running=len(sched.running),
        free_blocks=kvm.block_pool.get_num_free_blocks(), total_blocks=BLOCKS,
        senders_left=sum(len(getattr(w._worker, "_senders", {})) for w in workers),
        receivers_left=sum(len(getattr(w._worker, "_recvs", {})) for w in workers),
        done=sorted(done_ids), counters=worker.counters(), stats=worker.stats, tp=tp,
        sched_counters=sched.connector.counters())
    # Leaks: P's engine has no room left; D's context holds no grant for any room.
    if a.role == "P":
        # A room that only D opened (P never had the request) stays in P's
        # engine until waiting_timeout_ms: wait for that deadline, bounded.
        t0 = time.monotonic()
        def active():
            return sum(w._worker._prefill.engine.metrics()["rooms_active"] for w in workers)
        while active() and time.monotonic() - t0 < float(plan.get("drain_s", 0)):
            time.sleep(0.1)
        result["rooms_active"] = active()
    else:
        result["grants_left"] = sum(w._worker._ctx.revoke(r["room"]) for w in workers for r in mine)
    for w in reversed(workers):
        w.shutdown()
    json.dump(result, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
