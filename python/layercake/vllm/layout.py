"""vLLM's KV tensors as layercake buffers: describe_kv_caches() reads the
tensors vLLM hands to register_kv_caches (no copy), build_layout() makes the
layercake Layout of them. Supported: a per-layer tensor whose block axis is
outermost and whose blocks are contiguous (the CPU backend's [blocks,
kv_heads, block_size, 2*head_dim], MLA's [blocks, block_size, dim]), and
FlashAttention's [2, blocks, ...]; anything else raises NotImplementedError
naming the shape and strides."""
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

import layercake as lc


# ---- KV tensors as layercake buffers ----------------------------------------

def _one_span(t):
    """Whether t's elements fill one span of memory without a gap, in any
    order: t is a permutation of a contiguous tensor (FlashInfer's HND cache
    handed over as an NHD view). A block moves as bytes, so P and D built
    alike agree on its inside whatever the view's order."""
    dims = sorted((st, n) for st, n in zip(t.stride(), t.shape) if n != 1)
    want = 1
    for st, n in dims:
        if st != want:
            return False
        want *= n
    return True


def _rows(x, block_size, kv_split):
    """Tokens per page of a token-major block, by vLLM's logical shapes
    (the same on P and D whatever their head counts: with one head per rank
    memory alone cannot tell): FlashAttention's [blocks, block_size, heads,
    head_dim] after its K/V axis, MLA's [blocks, block_size, dim]; 0 for the
    CPU backend's head-major [blocks, heads, block_size, 2 * head_dim] (a
    rank's heads one slice of the page); None for anything else, such as
    FlashInfer's [blocks, 2, ...] (K and V inside each block, a rank's heads
    in two pieces), which TP cannot split."""
    if block_size is None:
        return 0
    d = x.dim()
    if (kv_split and d == 4) or d == 3:
        return block_size if x.shape[1] == block_size else None
    if d == 4 and not kv_split:
        return 0 if x.shape[2] == block_size else None
    return None


def describe_kv_caches(kv_caches, num_blocks=None, block_size=None):
    """[(layer_name, [(base, item_len, blocks, rows)...])], [(storage_ptr, nbytes,
    tensor)] for the tensors vLLM hands to register_kv_caches: one buffer
    per layer (two, K and V, for a leading K/V axis). A view whose blocks
    each fill one span, in whatever order of dimensions (a permuted HND
    view), is taken as it is. Never copies."""
    layers, storages = [], {}
    for name, t in kv_caches.items():
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            raise NotImplementedError(f"layer {name}: only CPU tensors so far (got {t.device})")
        st = t.untyped_storage()
        storages.setdefault(st.data_ptr(), (st.data_ptr(), st.nbytes(), t))
        es = t.element_size()
        parts = [t[0], t[1]] if t.dim() == 5 and t.shape[0] == 2 and (
            num_blocks is None or t.shape[1] == num_blocks) else [t]
        bufs = []
        for x in parts:
            blk = x.shape[0]
            inner = x[0]
            block_bytes = inner.numel() * es
            if not _one_span(inner) or x.stride(0) * es != block_bytes:
                raise NotImplementedError(
                    f"layer {name}: KV tensor shape {tuple(t.shape)} strides {t.stride()}: "
                    "layercake needs each block's bytes contiguous and blocks back to back")
            bufs.append((x.data_ptr(), block_bytes, blk, _rows(x, block_size, len(parts) == 2)))
        layers.append((name, bufs))
    return layers, list(storages.values())


def build_layout(layers, block_size):
    bufs = []
    for li, (_, parts) in enumerate(layers):
        kinds = [lc.BufferKind.K, lc.BufferKind.V] if len(parts) == 2 else [lc.BufferKind.OTHER]
        for (base, item, blocks, *rows), kind in zip(parts, kinds):
            r = rows[0] if rows else 0
            bufs.append(lc.Buffer(base, item * blocks, item, li, kind, 0, r or 0))
    return lc.Layout(bufs, page_size=block_size)


def _tp_of(vllm_config, x, role):
    """(TP size, this worker's TP rank): vLLM's parallel state, or
    kv_connector_extra_config's "tp_size" / "tp_rank" where given (a test
    driving several workers in one process). The scheduler side has no
    rank."""
    size = x.get("tp_size")
    if size is None:
        size = getattr(vllm_config.parallel_config, "tensor_parallel_size", 1) or 1
    rank = x.get("tp_rank")
    if rank is None:
        rank = 0
        if role != KVConnectorRole.SCHEDULER and int(size) > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            rank = get_tensor_model_parallel_rank()
    size, rank = int(size), int(rank)
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"layercake: TP rank {rank} of {size}")
    return size, rank




def slices(layers, layer_group=None):
    """vLLM layers that share memory as one layercake layer. A hybrid
    model's KV cache groups alias (layer i of each group in the same
    tensor, each block owned by one group: groups.py): such a slice moves
    every group's blocks once, so it is recorded when the last of its
    layers (in vLLM's order) is computed. Returns (layers, index, record_on):
    describe_kv_caches' list with one entry per slice in recording order,
    {vLLM layer name: its slice's index}, and the names whose save records
    a slice (None where every layer is its own slice). NotImplementedError
    for memory shared otherwise (two layers of one group, buffers that
    overlap without being the same)."""
    by_key, order = {}, []
    for i, (name, parts) in enumerate(layers):
        key = tuple((p[0], p[1], p[2]) for p in parts)
        if key not in by_key:
            by_key[key] = []
            order.append(key)
        by_key[key].append((i, name, parts))
    spans = sorted((b, b + item * n, k) for k in order for b, item, n in k)
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0 and k0 != k1:
            raise NotImplementedError(
                f"KV tensors of layers {by_key[k0][0][1]} and {by_key[k1][0][1]} overlap "
                "without being the same memory")
    groups = layer_group or {}
    for k in order:
        names = [n for _, n, _ in by_key[k]]
        gs = [groups.get(n) for n in names]
        if len(names) > 1 and len(set(gs)) != len(gs) and len(set(groups.values())) > 1:
            raise NotImplementedError(f"layers {names} share memory within one KV cache group")
    if all(len(v) == 1 for v in by_key.values()):
        return layers, {n: i for i, (n, _) in enumerate(layers)}, None
    ordered = sorted(order, key=lambda k: by_key[k][-1][0])
    out, index, record_on = [], {}, set()
    for si, k in enumerate(ordered):
        members = by_key[k]
        out.append(("+".join(n for _, n, _ in members), members[0][2]))
        for _, n, _ in members:
            index[n] = si
        record_on.add(members[-1][1])
    return out, index, record_on
