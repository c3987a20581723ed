"""The model of `make bench-vllm`: a Llama-style model with seeded random
weights (tests/vllm/tiny_llama.py writes it) scaled so that its KV cache
weighs against its compute as a served model's does, plus a word-level
tokenizer whose decode then encode gives back the same ids (vLLM's random
dataset and its TTFT/ITL figures need one):

    model.py DIR [--layers 8 --kv-heads 4 --head-dim 64 --hidden 256]

The defaults: 8 layers, 4 KV heads of 64, float32: 16 KiB of KV per token
(4,096 tokens: 64 MiB), about 5 M weights per layer stack (10 MFLOP a token).
A served 8B model on a GPU spends a few percent of its prefill time moving
its KV at RDMA speed; this one, on two CPU cores and loopback tcp, about the
same (docs/bench.md, "In the engine")."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "..", "tests", "vllm")

SPECIAL = ["[UNK]", "<s>", "</s>"]


def kv_bytes_per_token(c):
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * c["head_dim"] * 4


def config_of(layers=8, kv_heads=4, head_dim=64, hidden=256, vocab=2048, max_len=8192):
    heads = max(1, hidden // head_dim)
    return dict(num_hidden_layers=layers, num_key_value_heads=min(kv_heads, heads),
                num_attention_heads=heads, head_dim=head_dim, hidden_size=hidden,
                intermediate_size=3 * hidden, vocab_size=vocab,
                max_position_embeddings=max_len)


def write_tokenizer(d, vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = SPECIAL + [f"w{i}" for i in range(len(SPECIAL), vocab)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
                   "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 1 << 20,
                   "add_bos_token": False, "add_eos_token": False}, f, indent=1)
    ids = list(range(len(SPECIAL), min(vocab, 400)))
    back = tok.encode(tok.decode(ids)).ids
    if back != ids:  # the random dataset's prompts would not have the lengths asked for
        raise SystemExit(f"model.py: the tokenizer does not round-trip: {ids[:8]} -> {back[:8]}")


def write(d, seed=0, **kw):
    sys.path.insert(0, TESTS)
    import tiny_llama  # torch: imported here, so that run.py --help needs none
    c = config_of(**kw)
    tiny_llama.write(d, seed, layers=c.pop("num_hidden_layers"), **c)
    c = json.load(open(os.path.join(d, "config.json")))
    write_tokenizer(d, c["vocab_size"])
    return d, c


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args()
    d, c = write(a.dir, layers=a.layers, kv_heads=a.kv_heads, head_dim=a.head_dim, hidden=a.hidden)
    print(d, f"{kv_bytes_per_token(c)} B of KV a token")
