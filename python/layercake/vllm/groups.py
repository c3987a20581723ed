"""vLLM's KV cache groups (its hybrid KV cache manager) as one layercake
page list per room.

A hybrid model (sliding window layers beside full attention ones) has one
KV cache group per kind, each with its own block table over one shared
block pool: a block id belongs to one group at a time, and the groups'
tensors alias (layer i of every group lives in the same memory). The
layercake engine takes one page list per chunk for every buffer, so a
request's blocks go as one list of the groups' blocks, block position by
position (positions j, then group g within j). Each memory slice (the
layers that share it, one per group) is one layercake layer, recorded
once the last of them is computed (layout.slices), so each page moves the
one layer that owns that block.

A sliding-window group keeps only the blocks of the last window: vLLM
frees (and turns into its null block) those that fall out of the window,
on P while it prefills and on D before it decodes. They are left out of
the list: P never reads them (they may be reused already), D never has
them written. Which are left out depends only on the prompt length and
the groups' windows, so P and D agree without talking; a position's index
in the list is the count of kept blocks before it, and D's prefix of k
blocks goes to the engine as that index in pages (P's engine skips the
list's pages below it). Like vLLM's own connectors (NIXL, Mooncake), a
window keeps cdiv(window, block) + 1 blocks. One group (any model without
the hybrid manager) is the plain list: entry j is block j; a model whose
layers all slide is one group, clipped to its window all the same."""
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec


def _cdiv(a, b):
    return -(-a // b)


class Groups:

    def __init__(self, kv_cache_config, block_size):
        groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or ())
        self.block_size = block_size
        self.n = max(1, len(groups))
        self.window_blocks = [0] * self.n  # 0: every block is kept
        self.layer_group = {}
        for g, grp in enumerate(groups):
            spec = grp.kv_cache_spec
            for name in grp.layer_names:
                self.layer_group[name] = g
            if isinstance(spec, SlidingWindowSpec):
                # A model whose every layer slides is one group, clipped too.
                self.window_blocks[g] = _cdiv(spec.sliding_window, spec.block_size) + 1
            elif self.n == 1:
                continue
            elif not isinstance(spec, FullAttentionSpec):
                raise NotImplementedError(
                    f"layercake: KV cache group {g} is {type(spec).__name__}: hybrid models "
                    "with full and sliding-window attention only (no mamba state yet)")
            if getattr(spec, "block_size", block_size) != block_size:
                raise NotImplementedError(
                    f"layercake: KV cache group {g} has {spec.block_size}-token blocks, "
                    f"the others {block_size}: one block size for every group")

    @property
    def hybrid(self):
        return self.n > 1

    @property
    def plain(self):
        """The list is vLLM's block table itself: entry j is block j."""
        return self.n == 1 and not self.window_blocks[0]

    def _cut(self, g, nblocks):
        """The first block position of group g that D needs."""
        w = self.window_blocks[g]
        return max(0, nblocks - w) if w else 0

    def index(self, j, prompt_tokens):
        """The list index of block position j: kept blocks before it."""
        nblocks = _cdiv(prompt_tokens, self.block_size)
        return sum(max(0, j - self._cut(g, nblocks)) for g in range(self.n))

    def pages(self, ids_by_group, first, upto, prompt_tokens):
        """(index, block ids) of block positions [first, upto) of a request
        of prompt_tokens tokens: the list index of the first and the kept
        blocks in list order. ValueError if a kept block is vLLM's null
        block (0): a window narrower than P and D think."""
        if self.plain:
            return first, [int(b) for b in ids_by_group[0][first:upto]]
        nblocks = _cdiv(prompt_tokens, self.block_size)
        cuts = [self._cut(g, nblocks) for g in range(self.n)]
        out = []
        for j in range(first, upto):
            for g in range(self.n):
                if j >= cuts[g]:
                    b = int(ids_by_group[g][j])
                    if b == 0:
                        raise ValueError(f"block {j} of KV cache group {g} is vLLM's null "
                                         "block inside the kept window")
                    out.append(b)
        return self.index(first, prompt_tokens), out
