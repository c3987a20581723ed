"""A small decoder-only transformer in plain torch ops, with a paged KV cache.

Two attention kinds:
- "gqa": Llama-style grouped-query attention (RMSNorm, rotary embeddings,
  SwiGLU MLP). KV pool per layer: K and V tensors, token-major within a page
  as SGLang's and vLLM's default layouts are: [pages, page_size, kv_heads, head_dim].
- "mla": DeepSeek-V2-style multi-head latent attention: the cache holds the
  compressed latent (after kv_a_layernorm) and the decoupled rotary key, one
  tensor per layer [pages, page_size, kv_lora_rank + qk_rope_dim].

Weights use the Llama/DeepSeek checkpoint names (model.layers.N.self_attn.q_proj.weight ...),
are initialised from a seed or loaded from a PyTorch checkpoint (torch.save of a
state dict) with every name and shape checked.

One code path serves prefill, prefix-extend and decode: `forward` writes the new
tokens' K/V into their pages, calls `on_layer(layer)` right after (where a P
instance records the layer's step), then attends over the request's pages.
The same inputs in the same batch composition give the same bits, which is what
lets the tests compare a disaggregated run with a single instance exactly.
"""
import dataclasses
import math

import torch
import torch.nn.functional as F

DTYPE = torch.float32


@dataclasses.dataclass
class Config:
    vocab: int = 512
    dim: int = 128
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    head_dim: int = 16
    ffn: int = 256
    attn: str = "gqa"  # "gqa" or "mla"
    kv_lora_rank: int = 64  # MLA latent
    qk_nope_dim: int = 16
    qk_rope_dim: int = 8
    v_head_dim: int = 16
    rope_theta: float = 10000.0
    eps: float = 1e-6

    def __post_init__(self):
        if self.attn not in ("gqa", "mla"):
            raise ValueError(f"attn must be gqa or mla, not {self.attn!r}")
        if self.attn == "gqa" and self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")

    def shapes(self):
        """Every weight's name and shape, in checkpoint naming."""
        d, out = self.dim, {"model.embed_tokens.weight": (self.vocab, self.dim)}
        for i in range(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = (d,)
            if self.attn == "gqa":
                out[p + "self_attn.q_proj.weight"] = (self.heads * self.head_dim, d)
                out[p + "self_attn.k_proj.weight"] = (self.kv_heads * self.head_dim, d)
                out[p + "self_attn.v_proj.weight"] = (self.kv_heads * self.head_dim, d)
                out[p + "self_attn.o_proj.weight"] = (d, self.heads * self.head_dim)
            else:
                qk = self.qk_nope_dim + self.qk_rope_dim
                out[p + "self_attn.q_proj.weight"] = (self.heads * qk, d)
                out[p + "self_attn.kv_a_proj_with_mqa.weight"] = (self.kv_lora_rank + self.qk_rope_dim, d)
                out[p + "self_attn.kv_a_layernorm.weight"] = (self.kv_lora_rank,)
                out[p + "self_attn.kv_b_proj.weight"] = (self.heads * (self.qk_nope_dim + self.v_head_dim),
                                                         self.kv_lora_rank)
                out[p + "self_attn.o_proj.weight"] = (d, self.heads * self.v_head_dim)
            out[p + "post_attention_layernorm.weight"] = (d,)
            out[p + "mlp.gate_proj.weight"] = (self.ffn, d)
            out[p + "mlp.up_proj.weight"] = (self.ffn, d)
            out[p + "mlp.down_proj.weight"] = (d, self.ffn)
        out["model.norm.weight"] = (d,)
        out["lm_head.weight"] = (self.vocab, d)
        return out

    # --- the KV cache geometry ---

    @property
    def kv_width(self):
        """Elements per token per layer of one cache tensor (per KV head for GQA)."""
        return self.head_dim if self.attn == "gqa" else self.kv_lora_rank + self.qk_rope_dim


def init_weights(cfg, seed=0):
    """A state dict drawn from `seed`: matrices ~ N(0, 1/fan_in) so that
    activations stay O(1) and the output depends visibly on the context;
    norm weights near 1."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in cfg.shapes().items():
        if len(shape) == 1:
            sd[name] = 1.0 + 0.1 * torch.randn(shape, generator=g, dtype=DTYPE)
        elif name == "model.embed_tokens.weight":
            sd[name] = torch.randn(shape, generator=g, dtype=DTYPE)
        else:
            sd[name] = torch.randn(shape, generator=g, dtype=DTYPE) / math.sqrt(shape[1])
    return sd


def save_checkpoint(state_dict, path):
    torch.save(state_dict, path)


def load_checkpoint(cfg, path):
    """Load a torch.save'd state dict and check it against `cfg`: every
    expected name present with its shape, nothing unexpected (ValueError
    otherwise). Tensors are converted to float32 and made contiguous."""
    sd = torch.load(path, map_location="cpu", weights_only=True)  # tensors only: no pickled code runs
    if not isinstance(sd, dict):
        raise ValueError(f"{path}: not a state dict")
    want = cfg.shapes()
    missing = sorted(set(want) - set(sd))
    extra = sorted(set(sd) - set(want))
    if missing or extra:
        raise ValueError(f"{path}: missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
                         f"unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}")
    out = {}
    for name, shape in want.items():
        t = sd[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{path}: {name} has shape {tuple(t.shape)}, config wants {shape}")
        out[name] = t.to(DTYPE).contiguous()
    return out


# ---- the paged KV cache ------------------------------------------------------

class KVPool:
    """One instance's (or one TP rank's) KV pool: per layer, K and V tensors
    [pages, page_size, local_kv_heads, head_dim] (GQA, heads [head_lo, head_hi)
    of the model's), or one latent tensor [pages, page_size, lora + rope] (MLA).
    Pages are handed out by a free list; `reverse` hands them out from the top,
    so that two pools of one test give the same request different page ids."""

    def __init__(self, cfg, pages, page_size, head_lo=0, head_hi=None, reverse=False):
        self.cfg, self.pages, self.page_size = cfg, pages, page_size
        if cfg.attn == "gqa":
            self.head_lo, self.head_hi = head_lo, cfg.kv_heads if head_hi is None else head_hi
            shape = (pages, page_size, self.head_hi - self.head_lo, cfg.head_dim)
            self.k = [torch.zeros(shape, dtype=DTYPE) for _ in range(cfg.layers)]
            self.v = [torch.zeros(shape, dtype=DTYPE) for _ in range(cfg.layers)]
            self.tensors = self.k + self.v  # layercake's MHA order: K_0..K_{L-1}, V_0..V_{L-1}
        else:
            self.head_lo, self.head_hi = 0, 1
            shape = (pages, page_size, cfg.kv_lora_rank + cfg.qk_rope_dim)
            self.c = [torch.zeros(shape, dtype=DTYPE) for _ in range(cfg.layers)]
            self.tensors = list(self.c)
        self.free = list(range(pages)) if reverse else list(range(pages - 1, -1, -1))

    @property
    def page_bytes(self):
        """Bytes of one page of one buffer (layercake's item_len)."""
        t = self.tensors[0]
        return t[0].numel() * t.element_size()

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError(f"KV pool: {n} pages wanted, {len(self.free)} free")
        return [self.free.pop() for _ in range(n)]

    def release(self, pages):
        self.free.extend(reversed(list(pages)))


class PagedKV:
    """The KV cache the model reads and writes: one pool, or the pools of TP
    ranks each holding a slice of the KV heads (every rank's pool uses the
    same page ids). Writes go to every rank's slice; reads concatenate them."""

    def __init__(self, pools):
        self.pools = list(pools)
        self.page_size = self.pools[0].page_size

    def alloc(self, n):
        """Page ids for n pages (the same ids in every rank's pool)."""
        return self.pools[0].alloc(n)

    def write(self, layer, pages, slots, k, v=None):
        for p in self.pools:
            if v is None:
                p.c[layer][pages, slots] = k
            else:
                p.k[layer][pages, slots] = k[:, p.head_lo:p.head_hi]
                p.v[layer][pages, slots] = v[:, p.head_lo:p.head_hi]

    def read(self, layer, page_table, n):
        """The first n tokens' cache entries of a request, from its pages."""
        idx = torch.as_tensor(page_table, dtype=torch.long)
        p0 = self.pools[0]
        if p0.cfg.attn == "mla":
            c = p0.c[layer][idx]
            return c.reshape(-1, c.shape[-1])[:n], None
        ks = [p.k[layer][idx] for p in self.pools]
        vs = [p.v[layer][idx] for p in self.pools]
        k = ks[0] if len(ks) == 1 else torch.cat(ks, dim=2)
        v = vs[0] if len(vs) == 1 else torch.cat(vs, dim=2)
        return k.reshape(-1, k.shape[2], k.shape[3])[:n], v.reshape(-1, v.shape[2], v.shape[3])[:n]


# ---- the model -------------------------------------------------------------------

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Seq:
    """One request's part of a forward: `tokens` new tokens at positions
    start..start+len-1, whose cache lives in `page_table` (page ids covering
    every position so far, prefix included)."""

    def __init__(self, tokens, start, page_table):
        self.tokens = torch.as_tensor(tokens, dtype=torch.long)
        self.start, self.page_table = int(start), list(page_table)

    @property
    def end(self):
        return self.start + len(self.tokens)


class Model:
    def __init__(self, cfg, weights):
        self.cfg, self.w = cfg, weights
        rd = cfg.head_dim if cfg.attn == "gqa" else cfg.qk_rope_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, rd, 2, dtype=DTYPE) / rd))

    def rope(self, x, pos):
        """x: [n, heads, d]; positions: [n]."""
        f = pos.to(DTYPE)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((f, f), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        return x * cos + rotate_half(x) * sin

    def forward(self, seqs, kv, on_layer=None):
        """Run the new tokens of `seqs` (one batch) through every layer,
        writing their K/V into `kv` and calling on_layer(layer) right after
        each layer's write. Returns the greedy next token of each sequence."""
        cfg, w = self.cfg, self.w
        ps = kv.page_size
        x = F.embedding(torch.cat([s.tokens for s in seqs]), w["model.embed_tokens.weight"])
        pos = torch.cat([torch.arange(s.start, s.end) for s in seqs])
        pages = torch.cat([torch.as_tensor(s.page_table, dtype=torch.long)[torch.arange(s.start, s.end) // ps]
                           for s in seqs])
        slots = pos % ps
        bounds = [0]
        for s in seqs:
            bounds.append(bounds[-1] + len(s.tokens))
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)
            a = self._attn_gqa(i, p, h, pos, pages, slots, seqs, bounds, kv, on_layer) if cfg.attn == "gqa" \
                else self._attn_mla(i, p, h, pos, pages, slots, seqs, bounds, kv, on_layer)
            x = x + a
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
            g = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + g @ w[p + "mlp.down_proj.weight"].T
        last = torch.as_tensor([b - 1 for b in bounds[1:]])
        h = rms_norm(x[last], w["model.norm.weight"], cfg.eps)
        logits = h @ w["lm_head.weight"].T
        return logits.argmax(-1).tolist()

    @staticmethod
    def _causal(s, n):
        """Mask [new, n] of keys after each new token's position."""
        q = torch.arange(s.start, s.end)[:, None]
        return torch.arange(n)[None, :] > q

    def _attn_gqa(self, i, p, h, pos, pages, slots, seqs, bounds, kv, on_layer):
        cfg, w = self.cfg, self.w
        n, hd = h.shape[0], cfg.head_dim
        q = self.rope((h @ w[p + "self_attn.q_proj.weight"].T).view(n, cfg.heads, hd), pos)
        k = self.rope((h @ w[p + "self_attn.k_proj.weight"].T).view(n, cfg.kv_heads, hd), pos)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(n, cfg.kv_heads, hd)
        kv.write(i, pages, slots, k, v)
        if on_layer is not None:
            on_layer(i)
        rep = cfg.heads // cfg.kv_heads
        outs = []
        for j, s in enumerate(seqs):
            K, V = kv.read(i, s.page_table, s.end)
            K, V = K.repeat_interleave(rep, dim=1), V.repeat_interleave(rep, dim=1)
            qs = q[bounds[j]:bounds[j + 1]]
            sc = torch.einsum("qhd,khd->hqk", qs, K) / math.sqrt(hd)
            sc = sc.masked_fill(self._causal(s, s.end)[None], float("-inf"))
            outs.append(torch.einsum("hqk,khd->qhd", sc.softmax(-1), V).reshape(len(qs), -1))
        return torch.cat(outs) @ w[p + "self_attn.o_proj.weight"].T

    def _attn_mla(self, i, p, h, pos, pages, slots, seqs, bounds, kv, on_layer):
        cfg, w = self.cfg, self.w
        n, H, nope, rope, lora = h.shape[0], cfg.heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.kv_lora_rank
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(n, H, nope + rope)
        q_nope, q_pe = q[..., :nope], self.rope(q[..., nope:], pos)
        ckv = h @ w[p + "self_attn.kv_a_proj_with_mqa.weight"].T
        latent = rms_norm(ckv[:, :lora], w[p + "self_attn.kv_a_layernorm.weight"], cfg.eps)
        k_pe = self.rope(ckv[:, None, lora:], pos)[:, 0]
        kv.write(i, pages, slots, torch.cat((latent, k_pe), dim=-1))
        if on_layer is not None:
            on_layer(i)
        wkv = w[p + "self_attn.kv_b_proj.weight"]
        outs = []
        for j, s in enumerate(seqs):
            C, _ = kv.read(i, s.page_table, s.end)
            kvb = (C[:, :lora] @ wkv.T).view(-1, H, nope + cfg.v_head_dim)
            k_nope, V = kvb[..., :nope], kvb[..., nope:]
            qn, qp = q_nope[bounds[j]:bounds[j + 1]], q_pe[bounds[j]:bounds[j + 1]]
            sc = (torch.einsum("qhd,khd->hqk", qn, k_nope) + torch.einsum("qhd,kd->hqk", qp, C[:, lora:])) \
                / math.sqrt(nope + rope)
            sc = sc.masked_fill(self._causal(s, s.end)[None], float("-inf"))
            outs.append(torch.einsum("hqk,khd->qhd", sc.softmax(-1), V).reshape(len(qn), -1))
        return torch.cat(outs) @ w[p + "self_attn.o_proj.weight"].T


def pages_for(tokens, page_size):
    return -(-tokens // page_size)


def decode(model, kv, page_table, length, first_token, steps):
    """Greedy decode `steps` tokens after the prompt (length tokens cached in
    page_table, first_token sampled at prefill), allocating pages from `kv`
    as the sequence grows. Returns [first_token, ...] (steps + 1 tokens) and
    the grown page table."""
    out, table, tok, n = [first_token], list(page_table), first_token, length
    for _ in range(steps):
        if pages_for(n + 1, kv.page_size) > len(table):
            table += kv.alloc(1)
        tok = model.forward([Seq([tok], n, table)], kv)[0]
        out.append(tok)
        n += 1
    return out, table
