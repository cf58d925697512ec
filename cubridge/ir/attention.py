"""The numerics every attention CuIR program shares, written once:
`AttentionKernelBase` adds to `KernelBase` the GQA head map, the score tile
through the hooks, the online softmax (or the elementwise normaliser) and the
epilogue. A kernel's worker calls them in its own order (an Ampere kernel
rescales O at once, a Hopper consumer after the previous block's PV retired),
so the schedule stays in the kernel and the arithmetic here.

    state = self.softmax_state(rows)
    for n, kind in blocks:
        s = self.scores(s_acc, b, h, q_idx, n, kind)      # scale, score_mod, mask
        p, rescale = self.normalize(state, s)             # P and O's rescale factor
        ...
    self.epilogue(state, o_acc, b, h, row0, rows)        # O / l and the LSE

The numerics follow the CUDA kernels: scores are natural-unit logits after
score_mod, otherwise the softmax scale folds into exp2; a row with nothing
allowed yet keeps max -inf and contributes exp2(-inf) = 0; rows with no
allowed key write O = 0 and LSE = -inf. The row max follows every rise
(`threshold` 0, the eager rescale) or, for a lazy rescale, moves only when a
block raises it by more than `threshold` in log2 units (`state.moved` then
says whether O needs rescaling at all).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cubridge.ir import tile_math as tm
from cubridge.ir.hooks import BlockKind
from cubridge.ir.kernel import KernelBase
from cubridge.ir.memory import Tile


@dataclass
class SoftmaxState:
    """One role's running row statistics over the key blocks it has seen."""

    row_max: torch.Tensor  # [rows], -inf until a row sees an allowed key
    row_sum: torch.Tensor  # [rows], sum of exp2(s * to_log2 - max) so far
    to_log2: float  # factor taking a score to the exp2 domain
    threshold: float = 0.0  # log2 units a block must raise a row's max by to move it
    moved: bool = False  # whether the last block moved some row's max (O needs rescaling)
    blocks: int = 0  # key blocks folded in so far


class AttentionKernelBase(KernelBase):
    """KernelBase plus the attention numerics shared by the library's programs."""

    def kv_head(self, h: int) -> int:
        """The KV head query head `h` reads (GQA: Hq / Hk query heads per KV head)."""
        return h // (self.heads_q // self.heads_kv)

    def softmax_state(self, rows: int, threshold: float = 0.0) -> SoftmaxState:
        """Fresh row statistics for `rows` query rows. `threshold` > 0: the lazy
        rescale, a row's max moves only when a block raises it by more than
        `threshold` (log2 units; exponentials stay below 2**threshold)."""
        to_log2 = tm.LOG2E if self.has_score_mod else self.scale * tm.LOG2E
        return SoftmaxState(tm.full((rows,), float("-inf")), tm.full((rows,), 0.0), to_log2,
                            float(threshold))

    def scores(self, s_acc: Tile, b: int, h: int, q_idx: torch.Tensor, n: int,
               kind: BlockKind, *, all_masked: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The score tile of key block `n` from its accumulator, after the scale
        (applied here when score_mod or the elementwise normaliser needs natural
        units), score_mod and the mask: (s, allowed), both [rows, block_n].
        `all_masked`: no pair allowed (a block the CTA visits that is EMPTY for
        these rows: the Hopper consumer masks it whole)."""
        s = self.load(s_acc)
        if self.has_score_mod or self.normalizer == "elementwise":
            s = s * self.scale
        kv_idx = tm.iota(n * self.block_n, self.block_n)[None, :]
        s, allowed = self.apply_score_hooks(s, b, h, q_idx, kv_idx, kind)
        if all_masked:
            allowed = tm.where(allowed, False, False)
        return s, allowed

    def normalize(self, state: SoftmaxState, s: torch.Tensor, allowed: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """P of one score tile and the factor O's rows must be rescaled by (None
        for an elementwise normaliser, which keeps no running max). Updates the
        row statistics in `state` (and `state.moved`: whether some row's max moved,
        so that O must be rescaled; rows that kept theirs have factor 1)."""
        state.blocks += 1
        if self.normalizer != "softmax":
            return tm.where(allowed, self.activation(s), 0.0), None
        s = tm.where(allowed, s, float("-inf"))
        old = state.row_max
        mx = tm.maximum(old, tm.row_max(s))
        if state.threshold > 0:
            # lazy: keep the max unless the block raises it by more than the threshold
            # (log2 units); a row with max -inf always takes the block's
            keep = (old != float("-inf")) & ((mx - old) * state.to_log2 <= state.threshold)
            mx = tm.where(keep, old, mx)
        else:
            keep = (old != float("-inf")) & (mx == old)
        # A row with nothing allowed yet keeps max -inf; use 0 so exp2 gives 0.
        max_scaled = tm.where(mx == float("-inf"), 0.0, mx * state.to_log2)
        rescale = tm.where(keep, 1.0, tm.exp2(old * state.to_log2 - max_scaled))
        state.moved = bool((~keep).any())
        state.row_max = mx
        p = tm.exp2(s * state.to_log2 - max_scaled[:, None])
        state.row_sum = state.row_sum * rescale + tm.row_sum(p)
        return p, rescale

    def epilogue(self, state: SoftmaxState, o_acc: Tile, b: int, h: int, row0: int,
                 rows: int) -> None:
        """Write the `rows` output rows from `row0` (O / l for softmax, with the
        LSE; O as accumulated for an elementwise normaliser). A role that folded
        in no key block writes O = 0 (and LSE -inf) without reading `o_acc`."""
        dv = self.head_dim_v
        o = self.load(o_acc) if state.blocks else tm.full((rows, dv), 0.0)
        o_rows = self.o.tile(b, h, start=row0, rows=rows)
        if self.normalizer != "softmax":
            self.copy(o_rows, tm.convert(o, self.dtype))
            return
        inv = tm.where(state.row_sum > 0, 1.0 / state.row_sum, 0.0)
        self.copy(o_rows, tm.convert(o * inv[:, None], self.dtype))
        lse = tm.where(state.row_sum > 0,
                       (state.row_max * state.to_log2 + tm.log2(state.row_sum)) * tm.LN2,
                       float("-inf"))
        self.copy(self.lse.tile(b, h, start=row0, rows=rows), lse)
