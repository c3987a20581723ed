"""KV tensors as vLLM hands them to register_kv_caches, described as
layercake buffers without a copy: the CPU backend's per-layer
[blocks, kv_heads, block_size, 2*head_dim] (layers sharing one allocation),
FlashAttention's [2, blocks, block_size, kv_heads, head_dim], MLA's
[blocks, block_size, dim], FlashInfer's permuted HND view; a layout whose
blocks are not back to back, or skip bytes inside, is refused with its shape
and strides."""
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
