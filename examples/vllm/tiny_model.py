"""Write a tiny Llama-style model with seeded random weights: config.json and
model.safetensors, no tokenizer, nothing downloaded. Enough for vLLM to load
and serve (prompts as token ids, with --skip-tokenizer-init), so P, D and the
proxy can be tried on a laptop (README.md, "With vLLM"); the vLLM tests use it
too. Needs torch and safetensors (the vLLM venv has both):

    python examples/vllm/tiny_model.py DIR [--seed 0] [--layers N] [--sliding-window W]

4 layers, hidden 128, 4 attention heads of 32, 2 KV heads, vocab 512 (with
--sliding-window W, every other layer slides over W tokens: a hybrid model); its
tokens are noise, the same on one engine and on P + D."""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
          "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "num_hidden_layers": 4, "vocab_size": 512,
          "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
          "tie_word_embeddings": False}


def write(d, seed=0, layers=None, sliding_window=None, **config):
    """sliding_window: a hybrid model, every other layer (0, 2, ...) sliding
    window attention over that many tokens, the others full attention:
    vLLM's hybrid KV cache manager makes one KV cache group of each. config
    overrides CONFIG's keys (the bench's larger model, bench/vllm/model.py)."""
    os.makedirs(d, exist_ok=True)
    c = dict(CONFIG, num_hidden_layers=layers or CONFIG["num_hidden_layers"], **config)
    if sliding_window:
        c["sliding_window"] = int(sliding_window)
        c["layer_types"] = ["sliding_attention" if L % 2 == 0 else "full_attention"
                            for L in range(c["num_hidden_layers"])]
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    g = torch.Generator().manual_seed(seed)

    def w(*shape, scale=0.08):
        return (torch.randn(*shape, generator=g) * scale).contiguous()

    t = {"model.embed_tokens.weight": w(v, h, scale=1.0), "model.norm.weight": torch.ones(h),
         "lm_head.weight": w(v, h)}
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        t[p + "self_attn.q_proj.weight"] = w(q, h)
        t[p + "self_attn.k_proj.weight"] = w(kv, h)
        t[p + "self_attn.v_proj.weight"] = w(kv, h)
        t[p + "self_attn.o_proj.weight"] = w(h, q)
        t[p + "mlp.gate_proj.weight"] = w(i, h)
        t[p + "mlp.up_proj.weight"] = w(i, h)
        t[p + "mlp.down_proj.weight"] = w(h, i)
        t[p + "input_layernorm.weight"] = torch.ones(h)
        t[p + "post_attention_layernorm.weight"] = torch.ones(h)
    save_file(t, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    return d


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--sliding-window", type=int, default=None)
    a = ap.parse_args()
    print(write(a.dir, a.seed, a.layers, a.sliding_window))
