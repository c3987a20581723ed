"""KV tensors as vLLM hands them to register_kv_caches, described as
layercake buffers without a copy: the CPU backend's per-layer
[blocks, kv_heads, block_size, 2*head_dim] (layers sharing one allocation),
FlashAttention's [2, blocks, block_size, kv_heads, head_dim], MLA's
[blocks, block_size, dim], FlashInfer's permuted HND view; a layout whose
blocks are not back to back, or skip bytes inside, is refused with its shape
and strides. A hybrid model's KV cache groups: aliasing layers as one slice
(layout.slices) and the page list of every group's kept blocks (groups.py)."""
import pytest
import torch

from layercake.vllm import build_layout, describe_kv_caches

NB, H, BS, D = 8, 2, 32, 32


def test_cpu_backend_layers_share_one_allocation():
    pool = torch.zeros(3, NB, H, BS, 2 * D, dtype=torch.bfloat16)
    caches = {f"l{i}": pool[i] for i in range(3)}
    layers, storages = describe_kv_caches(caches, block_size=BS)
    assert len(storages) == 1 and storages[0][0] == pool.data_ptr()
    assert storages[0][1] == pool.numel() * 2
    block = H * BS * 2 * D * 2
    for i, (name, bufs) in enumerate(layers):
        assert bufs == [(pool[i].data_ptr(), block, NB, 0)]  # head-major
    lay = build_layout(layers, BS)
    assert lay.layer_count == 3 and [b.item_len for b in lay.buffers] == [block] * 3
    assert [b.base for b in lay.buffers] == [pool[i].data_ptr() for i in range(3)]


def test_flash_attention_k_and_v():
    t = torch.zeros(2, NB, BS, H, D, dtype=torch.float16)
    layers, _ = describe_kv_caches({"l0": t}, num_blocks=NB, block_size=BS)
    item = BS * H * D * 2
    # token-major: BS rows per page
    assert layers[0][1] == [(t[0].data_ptr(), item, NB, BS), (t[1].data_ptr(), item, NB, BS)]
    kinds = [b.kind.name for b in build_layout(layers, BS).buffers]
    assert kinds == ["K", "V"]


def test_mla():
    t = torch.zeros(NB, BS, 576, dtype=torch.bfloat16)
    layers, _ = describe_kv_caches({"l0": t}, block_size=BS)
    assert layers[0][1] == [(t.data_ptr(), BS * 576 * 2, NB, BS)]


def test_blocks_not_back_to_back_refused():
    # Block-outermost over layers ([blocks, layers, ...]): one layer's view has
    # a block stride of layers x block bytes.
    pool = torch.zeros(NB, 2, H, BS, 2 * D, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match=r"shape \(8, 2, 32, 64\) strides"):
        describe_kv_caches({"l0": pool[:, 0]})
    # A view that skips bytes inside each block (every other head).
    t = torch.zeros(NB, BS, 2 * H, 2 * D)[:, :, ::2]
    with pytest.raises(NotImplementedError, match="contiguous"):
        describe_kv_caches({"l0": t})


def test_permuted_hnd_view_taken_as_it_is():
    # FlashInfer's HND: [blocks, 2, heads, block_size, head_dim] in memory,
    # handed over as the NHD view [blocks, 2, block_size, heads, head_dim].
    phys = torch.zeros(NB, 2, H, BS, D, dtype=torch.bfloat16)
    t = phys.permute(0, 1, 3, 2, 4)
    assert not t[0].is_contiguous()
    layers, storages = describe_kv_caches({"l0": t}, num_blocks=NB, block_size=BS)
    # K and V inside each block: no TP split (None)
    assert layers[0][1] == [(phys.data_ptr(), 2 * H * BS * D * 2, NB, None)]
    assert storages[0][0] == phys.data_ptr()


def test_hybrid_groups_alias_as_slices():
    # vLLM's hybrid layout (KVCacheLayout.LBHNC, two groups): each group's
    # tensor holds its layers one after the other, and the groups' tensors
    # alias, so layer i of group 0 and layer i of group 1 share memory.
    from layercake.vllm.layout import slices
    pool = torch.zeros(2, NB, H, BS, 2 * D)
    caches = {"l0": pool[0], "l1": pool[0], "l2": pool[1], "l3": pool[1]}
    group = {"l0": 0, "l2": 0, "l1": 1, "l3": 1}
    layers, _ = describe_kv_caches(caches, block_size=BS)
    out, index, record_on = slices(layers, group)
    assert [n for n, _ in out] == ["l0+l1", "l2+l3"]
    assert index == {"l0": 0, "l1": 0, "l2": 1, "l3": 1} and record_on == {"l1", "l3"}
    assert build_layout(out, BS).layer_count == 2
    # One group: every layer its own slice, recorded as before.
    plain, _ = describe_kv_caches({f"l{i}": pool[i] for i in range(2)}, block_size=BS)
    assert slices(plain, {"l0": 0, "l1": 0}) == (plain, {"l0": 0, "l1": 1}, None)
    # Two layers of one group in one memory, or buffers that half overlap.
    with pytest.raises(NotImplementedError, match="within one KV cache group"):
        slices(layers, {"l0": 0, "l1": 0, "l2": 1, "l3": 1})
    flat = pool.view(-1)
    half = flat[H * BS * D:H * BS * D + NB * H * BS * 2 * D].view(NB, H, BS, 2 * D)
    bad, _ = describe_kv_caches({"l0": pool[0], "l1": half}, block_size=BS)
    with pytest.raises(NotImplementedError, match="overlap"):
        slices(bad, {"l0": 0, "l1": 1})


def test_hybrid_page_list():
    # Block ids of a 300-token prompt (10 blocks of 32) in a sliding group
    # (48 tokens: keeps cdiv(48, 32) + 1 = 3 blocks) and a full group.
    from types import SimpleNamespace

    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheGroupSpec,
                                            SlidingWindowSpec)
    from layercake.vllm.groups import Groups
    kw = dict(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.float32)
    cfg = SimpleNamespace(kv_cache_groups=[
        KVCacheGroupSpec(["l0", "l2"], SlidingWindowSpec(sliding_window=48, **kw)),
        KVCacheGroupSpec(["l1", "l3"], FullAttentionSpec(**kw))])
    g = Groups(cfg, BS)
    assert g.hybrid and g.window_blocks == [3, 0] and g.layer_group["l2"] == 0
    sw = [0] * 7 + [107, 108, 109]  # vLLM's null block (0) out of the window
    full = list(range(200, 210))
    assert g.pages((sw, full), 0, 10, 300) == (0, full[:7] + [107, 207, 108, 208, 109, 209])
    # Chunks: blocks [0, 4), [4, 8), [8, 10) on P make the same list.
    parts = [g.pages((sw, full), a, b, 300) for a, b in ((0, 4), (4, 8), (8, 10))]
    assert [i for i, _ in parts] == [0, 4, 9]
    assert sum((p for _, p in parts), []) == g.pages((sw, full), 0, 10, 300)[1]
    # D holding 8 blocks itself: its list starts at index 9.
    assert g.pages((sw, full), 8, 10, 300) == (9, [108, 208, 109, 209])
    with pytest.raises(ValueError, match="null block"):
        g.pages(([0] * 10, full), 0, 10, 300)
    one = Groups(SimpleNamespace(kv_cache_groups=cfg.kv_cache_groups[1:]), BS)
    assert one.plain and one.pages((full,), 2, 5, 300) == (2, full[2:5])
    # Every layer sliding: one group, vLLM's hybrid manager on, still clipped.
    only_sw = Groups(SimpleNamespace(kv_cache_groups=cfg.kv_cache_groups[:1]), BS)
    assert not only_sw.hybrid and not only_sw.plain
    assert only_sw.pages((sw,), 0, 10, 300) == (0, [107, 108, 109])
