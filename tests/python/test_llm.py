"""A real torch transformer prefilled on P and decoded on D over layercake,
checked token for token against a single instance of the same weights and
byte for byte (every KV page D received against P's). The model and the P/D
driver are examples/llm/ (docs/integration.md walks through them).

Small sizes: the whole file runs in a few seconds on a CPU."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "llm"))

import pd  # noqa: E402
from model import Config, init_weights, load_checkpoint, save_checkpoint  # noqa: E402

PS = 8  # tokens per page
STEPS = 6  # decoded tokens after the first


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine; also fixes the GEMM blocking
    yield
    torch.set_num_threads(n)


def config(attn):
    return Config(vocab=256, dim=64, layers=4, heads=4, kv_heads=2, head_dim=16, ffn=128, attn=attn,
                  kv_lora_rank=32, qk_nope_dim=16, qk_rope_dim=8, v_head_dim=16)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A checkpoint per attention kind, written with torch.save in Llama naming."""
    d = tmp_path_factory.mktemp("ckpt")
    out = {}
    for attn in ("gqa", "mla"):
        path = str(d / f"{attn}.pt")
        save_checkpoint(init_weights(config(attn), seed=7), path)
        out[attn] = path
    return out


def check_run(out, reqs):
    """Every request that was not cancelled: Success on both sides, every KV
    page at D equal to P's, the first token from the metadata equal to P's,
    and every decoded token equal to the single instance's. A cancelled
    request: Failed on both sides, with the reason."""
    assert set(out["requests"]) == {r.rid for r in reqs}
    for r in reqs:
        res = out["requests"][r.rid]
        if r.cancel_at_layer is not None:
            assert res["status"] == "FAILED" and res["p_status"] == "FAILED", res
            assert "cancelled mid-prefill" in res["reason"]
            continue
        assert res["status"] == "SUCCESS" and res["p_status"] == "SUCCESS", res
        assert not set(res["d_pages"]) & set(res["p_pages"]), "D's page ids should differ from P's"
        assert res["pages_equal"], f"request {r.rid}: D's KV pages differ from P's"
        assert res["first_equal"]
        assert res["tokens"] == res["ref"], f"request {r.rid}: {res['tokens']} != {res['ref']}"
        assert len(res["tokens"]) == STEPS + 1


def test_checkpoint_loads_with_every_name_and_shape_checked(checkpoints, tmp_path):
    cfg = config("gqa")
    w = load_checkpoint(cfg, checkpoints["gqa"])
    ref = init_weights(cfg, seed=7)
    assert set(w) == set(ref) and all(torch.equal(w[k], ref[k]) for k in ref)
    assert "model.layers.3.self_attn.q_proj.weight" in w
    with pytest.raises(ValueError, match="missing"):  # a GQA checkpoint is not an MLA model
        load_checkpoint(config("mla"), checkpoints["gqa"])
    bad = dict(ref)
    bad["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    torch.save(bad, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="up_proj.weight has shape"):
        load_checkpoint(cfg, str(tmp_path / "bad.pt"))


@pytest.mark.parametrize("attn", ["gqa", "mla"])
@pytest.mark.parametrize("mode", ["layerwise", "whole"])
def test_disaggregated_decode_equals_one_instance(attn, mode, checkpoints):
    """Three concurrent requests of different lengths in one prefill batch,
    the second cancelled by P halfway through its layers, then a fourth
    reusing half of the first one's pages at both P and D."""
    cfg = config(attn)
    w = load_checkpoint(cfg, checkpoints[attn])
    reqs = pd.make_requests(cfg, 3, 40, PS, prefix=True, cancel=True)
    assert len({len(r.prompt) for r in reqs}) == len(reqs)
    assert reqs[1].cancel_at_layer is not None and reqs[3].prefix_of == 0
    check_run(pd.run(cfg, w, reqs, page_size=PS, mode=mode, steps=STEPS), reqs)


@pytest.mark.parametrize("attn", ["gqa", "mla"])
def test_prefix_reuse_sends_only_the_pages_d_lacks(attn):
    cfg = config(attn)
    reqs = pd.make_requests(cfg, 1, 40, PS, prefix=True, cancel=False)
    a, b = reqs
    out = pd.run(cfg, init_weights(cfg, 3), reqs, page_size=PS, steps=STEPS)
    check_run(out, reqs)
    assert b.prefix_pages == 2
    assert out["requests"][b.rid]["prefix_len"] == b.prefix_pages * PS  # P saw D's prefix
    pages = -(-len(a.prompt) // PS) + -(-len(b.prompt) // PS) - b.prefix_pages
    buffers = 2 * cfg.layers if attn == "gqa" else cfg.layers
    page_bytes = PS * (cfg.kv_heads * cfg.head_dim if attn == "gqa" else cfg.kv_width) * 4
    assert out["bytes_acked"] == pages * buffers * page_bytes


@pytest.mark.parametrize("fault", ["shift_page", "drop_layer"])
@pytest.mark.parametrize("attn", ["gqa", "mla"])
def test_the_checks_fail_when_the_transfer_is_wrong(fault, attn):
    """shift_page: D grants one page of request 0 one slot off its page
    table. drop_layer: P's layout points the middle layer at a never-written
    copy. The transfers still report Success; the byte check and the decoded
    tokens are what catch them."""
    cfg = config(attn)
    reqs = pd.make_requests(cfg, 2, 40, PS, prefix=False, cancel=False)
    out = pd.run(cfg, init_weights(cfg, 0), reqs, page_size=PS, steps=STEPS, faults=(fault,))
    bad = [0] if fault == "shift_page" else [0, 1]
    for rid, res in out["requests"].items():
        assert res["status"] == "SUCCESS"
        if rid in bad:
            assert not res["pages_equal"]
            assert res["tokens"] != res["ref"], "a wrong KV page left the decoded tokens unchanged"
            with pytest.raises(AssertionError):
                check_run({"requests": {rid: res}}, [r for r in reqs if r.rid == rid])
        else:
            assert res["pages_equal"] and res["tokens"] == res["ref"]


@pytest.mark.skipif(not pd.TOKEN_MAJOR, reason="needs strided writes (Layout rows=): P and D at different "
                    "TP over token-major pages")
@pytest.mark.parametrize("p_tp,d_tp", [(2, 1), (1, 2)])
def test_heterogeneous_tp_over_token_major_pages(p_tp, d_tp):
    """Each rank of the larger side holds half the KV heads in its own
    token-major pool (the full layer is computed, each rank keeps its half),
    so every page moves as one strided write per P rank and D rank pair."""
    cfg = config("gqa")
    reqs = pd.make_requests(cfg, 3, 40, PS, prefix=True, cancel=True)
    check_run(pd.run(cfg, init_weights(cfg, 5), reqs, page_size=PS, steps=STEPS, p_tp=p_tp, d_tp=d_tp), reqs)
    # One write per page and (P rank, D rank) pair: not one per token. D's
    # pages run backwards from P's, so no two pages coalesce.
    reqs = pd.make_requests(cfg, 2, 40, PS, prefix=False, cancel=False)
    out = pd.run(cfg, init_weights(cfg, 5), reqs, page_size=PS, steps=1, p_tp=p_tp, d_tp=d_tp)
    pages = sum(-(-len(r.prompt) // PS) for r in reqs)
    assert out["writes_posted"] == pages * 2 * cfg.layers * max(p_tp, d_tp)
    assert out["bytes_acked"] == pages * 2 * cfg.layers * PS * cfg.kv_heads * cfg.head_dim * 4
