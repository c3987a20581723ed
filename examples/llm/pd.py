#!/usr/bin/env python3
"""Prefill (P) and decode (D) of a real torch transformer over layercake,
checked against a single instance running the same weights.

    pd.py [--attn gqa|mla|both] [--layers 8] [--dim 256] [--requests 4] [--prompt 256]
          [--steps 8] [--page-size 16] [--checkpoint FILE] [--seed 0] [--no-tp]

P and D run in this process with their own contexts, pools and page ids, and
talk over real tcp (and ZeroMQ/HTTP for the control plane), as two machines
would. For each attention kind and mode (layer-wise and whole-request) it
prints, per request, the tokens matched against the single instance, whether
every KV page at D equals P's, and the time to first token at D; for GQA also
with P at TP 2 and D at TP 1 and the reverse (token-major pages, strided writes).

How P and D use layercake (docs/integration.md walks through it):
- pools: every per-layer KV tensor registered as it is (ctx.register(t): the
  Region keeps the tensor alive), the layout built from its data pointers;
- D: receiver per request, waits Bootstrapped, allocates its own pages and
  sends them (prefix_len = tokens it already holds);
- P: sender per request, waits Bootstrapped (D's pages and prefix_len known),
  adds one chunk per request in a batch before the forward, records a cache
  step right after each layer's K/V write, sets the first sampled token as
  metadata, records the aux step;
- D: on Success reads the first token from the metadata and decodes from the
  received pages.
"""
import argparse
import inspect
import os
import sys
import threading
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "..", "python"))

import layercake as lc  # noqa: E402
from model import Config, KVPool, Model, PagedKV, Seq, decode, init_weights, load_checkpoint, pages_for  # noqa: E402

WAIT_S = 120

# Whether this layercake can be told that pages are token-major
# ([page_size, heads, head_dim]: Layout(..., rows=page_size)), which
# heterogeneous TP needs to move each rank's heads of every token with one
# strided write per page. Without it, P and D must have the same TP size.
TOKEN_MAJOR = "rows" in inspect.signature(lc.Layout.build).parameters


class Request:
    """One prompt. prefix_of/prefix_pages: this prompt starts with the first
    prefix_pages pages of request prefix_of's prompt, which both instances
    still hold (prefix cache): P extends over its cached pages, D asks only
    for the rest (prefix_len). cancel_at_layer: P aborts it after that
    layer of its prefill."""

    def __init__(self, rid, prompt, prefix_of=None, prefix_pages=0, cancel_at_layer=None):
        self.rid, self.prompt = rid, list(prompt)
        self.prefix_of, self.prefix_pages, self.cancel_at_layer = prefix_of, prefix_pages, cancel_at_layer


def waves(requests):
    """Requests in forward batches: those reusing a prefix go after the one
    holding it."""
    done, out, left = set(), [], list(requests)
    while left:
        w = [r for r in left if r.prefix_of is None or r.prefix_of in done]
        if not w:
            raise ValueError("prefix_of refers to no earlier request")
        out.append(w)
        done |= {r.rid for r in w}
        left = [r for r in left if r not in w]
    return out


def seqs_for(wave, kv, tables, page_size):
    """Each request's page table (cached prefix pages + new ones) and its Seq."""
    out = []
    for r in wave:
        k = r.prefix_pages if r.prefix_of is not None else 0
        table = tables[r.prefix_of][:k] if k else []
        table = table + kv.alloc(pages_for(len(r.prompt), page_size) - k)
        tables[r.rid] = table
        out.append(Seq(r.prompt[k * page_size:], k * page_size, table))
    return out


def single_instance(model, requests, pages, page_size, steps):
    """The reference: one instance, same weights, same batches."""
    kv = PagedKV([KVPool(model.cfg, pages, page_size)])
    tables, tokens = {}, {}
    for wave in waves(requests):
        first = model.forward(seqs_for(wave, kv, tables, page_size), kv)
        for r, f in zip(wave, first):
            if r.cancel_at_layer is None:
                tokens[r.rid], _ = decode(model, kv, tables[r.rid], len(r.prompt), f, steps)
    return tokens


def full_heads(kv, table, n):
    """Every buffer's entries for the first n tokens of `table`, all KV
    heads (TP slices concatenated), as bytes."""
    out = []
    for layer in range(kv.pools[0].cfg.layers):
        k, v = kv.read(layer, table, n)
        out += [k.contiguous().view(torch.uint8)] + ([] if v is None else [v.contiguous().view(torch.uint8)])
    return out


def register_pool(ctx, pool, shadow_layer=None):
    """Regions over the pool's tensors, by data pointer, and its layout.
    shadow_layer (a fault for the tests): that layer's buffers point at
    never-written copies, as if P's layout dropped the layer."""
    keep, regions, bases = [], [], []
    for i, t in enumerate(pool.tensors):
        layer = i % pool.cfg.layers
        if layer == shadow_layer:
            t = torch.zeros_like(t)
            keep.append(t)
        regions.append(ctx.register(t))
        bases.append(t.data_ptr())
    cfg = pool.cfg
    kw = {"rows": pool.page_size} if TOKEN_MAJOR else {}  # token-major pages (strided TP writes)
    if cfg.attn == "gqa":
        layout = lc.Layout.mha(cfg.layers, pool.pages, pool.page_bytes, bases=bases, **kw)
    else:
        layout = lc.Layout.mla(cfg.layers, pool.pages, pool.page_bytes, bases=bases, **kw)
    return regions, layout, keep


class Instance:
    """P ranks or D ranks, each with its context, pool, regions and layout."""

    def __init__(self, role, cfg, pages, page_size, tp, knobs, shadow_layer=None):
        self.ctxs, self.pools, self.regions, self.layouts, self.keep = [], [], [], [], []
        self.busy = False
        heads = cfg.kv_heads if cfg.attn == "gqa" else 1
        if tp > 1 and cfg.attn == "mla":
            raise ValueError("TP > 1 is shown with GQA only (an MLA latent is whole on every rank)")
        if cfg.attn == "gqa" and heads % tp:
            raise ValueError(f"{heads} KV heads do not split over TP {tp}")
        for r in range(tp):
            ctx = lc.Context(f"{role}{r}", **knobs)
            lo, hi = (r * heads // tp, (r + 1) * heads // tp) if cfg.attn == "gqa" else (0, None)
            pool = KVPool(cfg, pages, page_size, lo, hi, reverse=(role == "d"))
            regions, layout, keep = register_pool(ctx, pool, shadow_layer)
            self.ctxs.append(ctx)
            self.pools.append(pool)
            self.regions.append(regions)
            self.layouts.append(layout)
            self.keep.append(keep)
        self.kv = PagedKV(self.pools)

    def close(self):
        for c in self.ctxs:
            c.close()


def run(cfg, weights, requests, page_size=16, pages=None, mode="layerwise", p_tp=1, d_tp=1,
        steps=8, faults=(), room_base=1000, url="tcp://127.0.0.1:0", p_knobs=None, layer_sleep=0.0):
    """One disaggregated run and its single-instance reference. Returns a dict:
    per request (rid -> dict) and per run figures. `faults` (for the tests
    that prove the checks can fail): "shift_page" (D grants one page off by
    one from its page table), "drop_layer" (P's layout points the middle
    layer at a never-written copy)."""
    if p_tp != d_tp and not TOKEN_MAJOR:
        raise NotImplementedError("P and D at different TP sizes over token-major pages need strided "
                                  "writes (Layout rows=), which this layercake lacks")
    model = Model(cfg, weights)
    need = sum(pages_for(len(r.prompt) + steps, page_size) for r in requests)
    pages = pages or 2 * need + 8  # P from the bottom, D from the top: disjoint ids
    ref = single_instance(model, requests, pages, page_size, steps)
    knobs = {"layerwise_interval": 1 if mode == "layerwise" else 0, **(p_knobs or {})}
    cpu0, results = time.process_time(), {}
    bs = lc.BootstrapServer(host="127.0.0.1", port=0)
    P = Instance("p", cfg, pages, page_size, p_tp, knobs,
                 shadow_layer=cfg.layers // 2 if "drop_layer" in faults else None)
    D = Instance("d", cfg, pages, page_size, d_tp, {})
    prefills, decodes = [], []
    try:
        for r in range(p_tp):
            prefills.append(lc.Prefill(P.ctxs[r], P.layouts[r], bs.addr, host="127.0.0.1", world_size=p_tp,
                                       dp_size=1, engine_rank=r, metrics_server=bs if r == 0 else None))
        for r in range(d_tp):
            decodes.append(lc.Decode(D.ctxs[r], D.layouts[r], D.regions[r], listen_url=url,
                                     host="127.0.0.1", tp_size=d_tp, tp_rank=r))
        p_tables, d_tables = {}, {}
        for wave in waves(requests):
            _wave(model, wave, P, D, prefills, decodes, bs, p_tables, d_tables, page_size, steps,
                  faults, room_base, ref, results, layer_sleep)
        m = [p.engine.metrics() for p in prefills]
        return {"requests": results, "cpu_s": time.process_time() - cpu0,
                "bytes_acked": sum(x["bytes_acked"] for x in m),
                "writes_posted": sum(x["writes_posted"] for x in m), "mode": mode}
    finally:
        for d in decodes:
            d.close()
        if not P.busy:  # else leaked: the forward thread may still record
            for p in prefills:
                p.close()
            P.close()
        D.close()
        bs.close()


def _wave(model, wave, P, D, prefills, decodes, bs, p_tables, d_tables, ps, steps, faults, room_base, ref,
          results, layer_sleep=0.0):
    rooms = {r.rid: room_base + r.rid for r in wave}
    receivers = {r.rid: [d.receiver(bs.addr, rooms[r.rid]) for d in decodes] for r in wave}
    senders = {r.rid: [p.sender(rooms[r.rid]) for p in prefills] for r in wave}
    try:
        # D: its own pages (a cached prefix and new ones), granted once P is found.
        for i, r in enumerate(wave):
            k = r.prefix_pages if r.prefix_of is not None else 0
            new = D.kv.alloc(pages_for(len(r.prompt), ps) - k)
            d_tables[r.rid] = (d_tables[r.prefix_of][:k] if k else []) + new
            grant = np.asarray(new, dtype=np.int64)
            if "shift_page" in faults and i == 0:
                grant[len(grant) // 2] = D.kv.alloc(1)[0]  # a page D's table does not use
            for rcv in receivers[r.rid]:
                rcv.wait(timeout=WAIT_S, until=lc.RoomStatus.BOOTSTRAPPED)
                rcv.send(grant, prefix_len=k * ps, aux_index=i)
        # P: D's pages and prefix are known once the room is Bootstrapped.
        for r in wave:
            for snd in senders[r.rid]:
                snd.wait(timeout=WAIT_S, until=lc.RoomStatus.BOOTSTRAPPED)
        seqs = seqs_for(wave, P.kv, p_tables, ps)
        for p in prefills:
            with p.engine.batch():  # before the forward's first record
                for r in wave:
                    skip = senders[r.rid][0].prefix_len // ps  # D holds these pages already
                    table = np.asarray(p_tables[r.rid][skip:], dtype=np.int64)
                    p.engine.add_chunk(rooms[r.rid], table, dst_index=0, is_last=True)
        cancel = {r.cancel_at_layer: r for r in wave if r.cancel_at_layer is not None}

        def on_layer(layer):  # right after the layer's K/V is in the pool
            if layer_sleep:
                time.sleep(layer_sleep)  # slower compute (deadline experiments)
            for p in prefills:
                p.steps.record_cache()
            if layer in cancel:
                for snd in senders[cancel[layer].rid]:
                    try:
                        snd.abort("cancelled mid-prefill")
                    except lc.LayercakeError:  # LC_ERR_STATE: the room ended already (failed)
                        if not snd.status.final:
                            raise

        first, err, done = {}, [], []

        def prefill():
            try:
                toks = model.forward(seqs, P.kv, on_layer)
                for r, t in zip(wave, toks):
                    first[r.rid] = t
                    if r.cancel_at_layer is None:
                        for snd in senders[r.rid]:
                            if not snd.status.final:  # a failed room takes no metadata
                                snd.set_metadata(str(t).encode())
                for p in prefills:
                    p.steps.record_aux()
                done.append(time.monotonic())
            except Exception as e:  # pragma: no cover - reported by the caller
                err.append(e)

        t0 = time.monotonic()
        th = threading.Thread(target=prefill)
        th.start()
        ttft, first_layer, pending = {}, {}, {r.rid for r in wave}
        deadline = t0 + WAIT_S
        while pending and time.monotonic() < deadline:  # D: the first token arrives with Success
            for rid in list(pending):
                if rid not in first_layer and all(rc.layers_ready > 0 for rc in receivers[rid]):
                    first_layer[rid] = time.monotonic() - t0  # layer 0 complete in D's memory
                if all(rc.status.final for rc in receivers[rid]):
                    ttft[rid] = time.monotonic() - t0
                    pending.discard(rid)
            time.sleep(0.0002)
        th.join(WAIT_S)
        if th.is_alive():  # never destroy an engine its producer still records into
            P.busy = True
            raise TimeoutError(f"P's forward still running after {WAIT_S} s")
        if err:
            raise err[0]
        forward_s = done[0] - t0  # P's forward, its records and metadata
        for r in wave:
            infos = [rc.poll() for rc in receivers[r.rid]]
            sinfo = [snd.wait(timeout=WAIT_S) for snd in senders[r.rid]]
            ok = all(i.status == lc.RoomStatus.SUCCESS for i in infos)
            res = {"prompt": len(r.prompt), "status": infos[0].status.name, "p_status": sinfo[0].status.name,
                   "reason": infos[0].reason, "ttft_s": ttft.get(r.rid), "forward_s": forward_s,
                   "after_forward_s": ttft[r.rid] - forward_s if r.rid in ttft else None,
                   "first_layer_s": first_layer.get(r.rid),
                   "p_pages": list(p_tables[r.rid]), "d_pages": list(d_tables[r.rid]),
                   "prefix_len": senders[r.rid][0].prefix_len, "cancelled": r.cancel_at_layer is not None}
            if ok:
                meta = receivers[r.rid][0].metadata()
                tok = int(meta.decode())
                n = len(r.prompt)
                a = full_heads(D.kv, d_tables[r.rid], n)
                b = full_heads(P.kv, p_tables[r.rid], n)
                res["pages_equal"] = all(torch.equal(x, y) for x, y in zip(a, b))
                res["first_equal"] = tok == first[r.rid]
                out, d_tables[r.rid] = decode(model, D.kv, d_tables[r.rid], n, tok, steps)
                res["tokens"], res["ref"] = out, ref[r.rid]
                res["matched"] = next((j for j, (x, y) in enumerate(zip(out, ref[r.rid])) if x != y), len(out))
                res["match"] = out == ref[r.rid]
            results[r.rid] = res
    finally:
        for lst in list(receivers.values()) + list(senders.values()):
            for h in lst:
                h.close()


def make_requests(cfg, n, prompt, page_size, seed=1, prefix=True, cancel=True):
    """n prompts of different lengths; with prefix, one more request sharing
    the first half of request 0's pages; with cancel, request 1 is aborted
    halfway through P's layers."""
    g = torch.Generator().manual_seed(seed)
    reqs = []
    for i in range(n):
        length = max(page_size + 1, prompt - i * prompt // (2 * n) + (i % 3))
        reqs.append(Request(i, torch.randint(0, cfg.vocab, (length,), generator=g).tolist(),
                            cancel_at_layer=cfg.layers // 2 if cancel and i == 1 and n > 2 else None))
    if prefix:
        k = (len(reqs[0].prompt) // page_size) // 2
        tail = torch.randint(0, cfg.vocab, (prompt // 3 + 5,), generator=g).tolist()
        reqs.append(Request(n, reqs[0].prompt[:k * page_size] + tail, prefix_of=0, prefix_pages=k))
    return reqs


def ms(s):
    return "-" if s is None else f"{s * 1e3:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attn", choices=("gqa", "mla", "both"), default="both")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--layer-sleep", type=float, default=0.0,
                    help="seconds P sleeps after each layer's compute (slower compute, deadline experiments)")
    ap.add_argument("--no-tp", dest="tp", action="store_false",
                    help="skip the GQA runs with P at TP 2 and D at TP 1 and the reverse")
    ap.add_argument("--checkpoint", help="a torch.save'd state dict in Llama naming matching the sizes")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows, ok, cancelled = [], True, set()
    for attn in (("gqa", "mla") if args.attn == "both" else (args.attn,)):
        cfg = Config(vocab=1024, dim=args.dim, layers=args.layers, heads=8, kv_heads=4 if attn == "gqa" else 8,
                     head_dim=args.dim // 8, ffn=args.dim * 2, attn=attn, kv_lora_rank=args.dim // 4,
                     qk_nope_dim=args.dim // 16, qk_rope_dim=args.dim // 32, v_head_dim=args.dim // 8)
        w = load_checkpoint(cfg, args.checkpoint) if args.checkpoint else init_weights(cfg, args.seed)
        reqs = make_requests(cfg, args.requests, args.prompt, args.page_size)
        runs = [("layerwise", 1, 1), ("whole", 1, 1)]
        if attn == "gqa" and TOKEN_MAJOR and args.tp:
            runs += [("layerwise", 2, 1), ("layerwise", 1, 2)]
        for mode, p_tp, d_tp in runs:
            t0 = time.monotonic()
            out = run(cfg, w, reqs, page_size=args.page_size, mode=mode, steps=args.steps, p_tp=p_tp, d_tp=d_tp,
                      layer_sleep=args.layer_sleep)
            if (p_tp, d_tp) != (1, 1):
                mode = f"{mode} P{p_tp}D{d_tp}"
            print(f"{attn} {mode}: {len(reqs)} requests in {time.monotonic() - t0:.1f} s, "
                  f"{out['writes_posted']} writes", file=sys.stderr, flush=True)
            for rid, r in sorted(out["requests"].items()):
                good = r["cancelled"] and r["status"] == "FAILED" or r.get("match") and r.get("pages_equal")
                ok = ok and bool(good)
                if r["cancelled"]:
                    cancelled.add(rid)
                status = r["status"] + (" (cancelled on purpose)" if r["cancelled"] else "")
                rows.append((attn, mode, rid, r["prompt"], r["prefix_len"] or 0, status,
                             f"{r['matched']}/{len(r['ref'])}" if "ref" in r else "-",
                             {True: "yes", False: "NO"}.get(r.get("pages_equal"), "-"),
                             ms(r["forward_s"]), ms(r["first_layer_s"]) if not r["cancelled"] else "-",
                             ms(r["ttft_s"]) if not r["cancelled"] else "-",
                             ms(r["after_forward_s"]) if not r["cancelled"] else "-", f"{out['cpu_s']:.2f}"))
    hdr = ("attn", "mode", "req", "prompt", "prefix", "D status", "tokens matched", "KV pages equal",
           "P forward ms", "layer 0 at D ms", "TTFT ms", "TTFT-forward ms", "run CPU s")
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    for row in [hdr] + rows:
        print("  ".join(str(x).rjust(wd) for x, wd in zip(row, widths)))
    if cancelled:
        print(f"request {', '.join(map(str, sorted(cancelled)))}: cancelled by P on purpose halfway through its layers "
              "(sender.abort), so its FAILED is the expected outcome; it counts as good when D saw it fail")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
