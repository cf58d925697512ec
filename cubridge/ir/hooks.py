"""The hook points of every CuIR attention kernel (docs/hooks.md).

`KernelBase` inherits these defaults: standard attention, optionally causal
through the `causal` config. A variant overrides some of them in a subclass;
the defaults stay correct for any override, because once `mask_mod` is
overridden they stop claiming anything about the mask (every key block in
range, every block PARTIAL) unless the subclass also overrides the block hooks.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import torch

from cubridge.ir.control import cdiv


class BlockKind(enum.IntEnum):
    """The class of a (query block, key block) tile, as in hook_types.cuh:
    EMPTY: no pair allowed, the block is skipped (no load, no MMA);
    FULL: every in-bounds pair allowed, no per-element mask (the tail mask k >= Sk still applies);
    PARTIAL: `mask_mod` is applied per element."""

    EMPTY = 0
    FULL = 1
    PARTIAL = 2


class HookDefaults:
    """Default hooks. Subclasses override methods of the same names."""

    normalizer: ClassVar[str] = "softmax"
    """"softmax" (online softmax: out and lse) or "elementwise" (out = sum
    activation(s) v, no running max, no lse)."""

    aux_names: ClassVar[tuple[str, ...]] = ()
    """Names of the aux tensors the program reads, as `self.aux[name]` (in
    hooks, and in workers where a variant needs one outside the scores); the
    kernel's caller must pass exactly these. In CUDA they are the AuxArgs
    slots `p.aux.t[i]`, in the order the spec's make_aux returns them."""

    empty_row_score: ClassVar[float | None] = None
    """None: a row with no allowed key gives out = 0 and lse = -inf. A finite C: the
    variant masks with the score C (a floor mask: finfo.min written in score_mod,
    lifted into mask_mod), and such a row weighs every key alike as the spec does;
    the executor fills it after the kernel (out = the mean of V, lse = C + log(Sk):
    cubridge.empty_rows), as the compiled variant's call does. Softmax only."""

    causal: bool = False
    """Config of the reference programs: the default mask_mod is q_idx >= kv_idx
    (absolute positions, as FlexAttention) and kv_block_range / block_kind use
    the causal closed form. Ignored once a subclass overrides mask_mod."""

    block_n: int
    seqlen_q: int
    seqlen_k: int
    aux: dict[str, torch.Tensor]

    def score_mod(self, s: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        """Edit fp32 scores `s` [M, N] (already multiplied by `scale`). `b`, `h`:
        0-d int64 tensors; `q_idx` [M, 1], `kv_idx` [1, N]: int64 absolute
        positions. Returns fp32 [M, N]. Default: identity."""
        return s

    def mask_mod(self, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                 kv_idx: torch.Tensor) -> torch.Tensor:
        """Which pairs take part: a bool tensor broadcasting to [M, N]. Default:
        `q_idx >= kv_idx` when `causal`, else every pair."""
        if self.causal:
            return q_idx >= kv_idx
        return torch.ones((), dtype=torch.bool)

    def activation(self, s: torch.Tensor) -> torch.Tensor:
        """The elementwise normaliser (normalizer "elementwise" only): fp32
        scores s [M, N] (scaled, after score_mod) -> fp32 weights of the same
        shape, e.g. `torch.sigmoid(s)`. The kernel zeroes masked-out pairs
        after the activation, so it need not handle them."""
        raise NotImplementedError(f"{type(self).__name__} has normalizer 'elementwise' "
                                  "but does not define activation(s)")

    def kv_block_range(self, b: int, h: int, q_start: int, q_end: int) -> tuple[int, int]:
        """Key blocks [lo, hi) the query rows q_start..q_end-1 visit (ints; q_end
        is clipped to Sq; the kernel clamps the result to [0, cdiv(Sk,
        block_n))). Default: all of them, or up to the diagonal when `causal`."""
        n = cdiv(self.seqlen_k, self.block_n)
        if self.causal and not self.mask_mod_overridden():
            return 0, min(n, cdiv(q_end, self.block_n))
        return 0, n

    def block_kind(self, b: int, h: int, q_start: int, q_end: int, k_start: int,
                   k_end: int) -> BlockKind:
        """Classify query rows [q_start, q_end) x keys [k_start, k_end) (ends
        exclusive and clipped to Sq / Sk). Default: FULL, or the causal closed
        form when `causal`; PARTIAL for every block once `mask_mod` is overridden."""
        if self.mask_mod_overridden():
            return BlockKind.PARTIAL
        if not self.causal:
            return BlockKind.FULL
        if k_start > q_end - 1:
            return BlockKind.EMPTY
        if k_end - 1 <= q_start:
            return BlockKind.FULL
        return BlockKind.PARTIAL

    # -- derived flags ------------------------------------------------------------------

    @classmethod
    def mask_mod_overridden(cls) -> bool:
        return _overrides(cls, "mask_mod")

    @property
    def has_score_mod(self) -> bool:
        """True when a subclass overrides score_mod (kHasScoreMod)."""
        return _overrides(type(self), "score_mod")

    @property
    def has_mask_mod(self) -> bool:
        """True when mask_mod is overridden or `causal` is set (kHasMaskMod)."""
        return self.causal or self.mask_mod_overridden()


def _overrides(cls: type, name: str) -> bool:
    fn: Any = getattr(cls, name)
    return fn is not getattr(HookDefaults, name)
