"""Counting allowed (q, k) pairs, the denominator of every TFLOP/s figure.

docs/benchmark.md: TFLOP/s = 4 * allowed_pairs * Hq * D / time. The count is exact:
the spec's mask_mod is evaluated on every pair (on the GPU, in row chunks),
per batch element and head where the mask depends on them (documents).

The same pass finds the mask's structure: the smallest band lo <= q - k <= hi
holding every allowed pair; if the count equals the band's size in every
(batch, head), the mask *is* that band: full, causal or a sliding window. Peers
with built-in flags (SDPA is_causal, FlashAttention window_size) use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cubridge.attention import Shape, attention_flops
from cubridge.spec.grids import Mod, arange, eval_mask, index_grid

# Elements of one evaluated mask chunk (bool): bounds memory at large S.
CHUNK_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class MaskStats:
    """Allowed pairs of one problem, summed over batch elements and query heads."""

    shape: Shape
    allowed_pairs: int
    depends_on_batch: bool
    depends_on_head: bool
    band: tuple[int, int] | None  # (lo, hi) of q - k when the mask is exactly that band
    empty_rows: int = 0  # query rows (of every batch element and head) that allow no key

    @property
    def total_pairs(self) -> int:
        s = self.shape
        return s.b * s.hq * s.sq * s.sk

    @property
    def density(self) -> float:
        return self.allowed_pairs / self.total_pairs

    @property
    def flops(self) -> float:
        """Forward FLOPs on allowed pairs: 2 * pairs * (D + Dv), i.e. 4 * pairs * D."""
        return attention_flops(self.allowed_pairs, 1, self.shape.d, self.shape.dv)

    @property
    def structure(self) -> str:
        """'full', 'causal', 'window<W>' (causal and q - k < W), 'band' or 'general'."""
        if self.band is None:
            return "general"
        lo, hi = self.band
        s = self.shape
        if lo <= -(s.sk - 1) and hi >= s.sq - 1:
            return "full"
        if lo == 0 and hi >= s.sq - 1:
            return "causal"
        if lo == 0:
            return f"window{hi + 1}"
        return "band"

    @property
    def window(self) -> int | None:
        """W for a sliding-window mask (causal and q - k < W)."""
        st = self.structure
        return int(st[len("window"):]) if st.startswith("window") else None


def band_pairs(sq: int, sk: int, lo: int, hi: int) -> int:
    """Number of (q, k) in [0, sq) x [0, sk) with lo <= q - k <= hi."""
    q = torch.arange(sq, dtype=torch.int64)
    first = (q - hi).clamp(min=0)
    last = (q - lo).clamp(max=sk - 1)
    return int((last - first + 1).clamp(min=0).sum())


def count_allowed_pairs(mask_mod: Mod | None, shape: Shape, device: torch.device | str,
                        chunk_elements: int = CHUNK_ELEMENTS) -> MaskStats:
    """Count the pairs mask_mod allows over all batch elements and query heads."""
    if mask_mod is None:
        return MaskStats(shape, shape.b * shape.hq * shape.sq * shape.sk, False, False,
                         (-(shape.sk - 1), shape.sq - 1))
    b, h, _, k = index_grid(arange(shape.b, device), arange(shape.hq, device),
                            arange(1, device), arange(shape.sk, device))
    rows = max(1, chunk_elements // (shape.b * shape.hq * shape.sk))
    allowed = empty = 0
    lo, hi = shape.sq, -shape.sk  # empty band
    by_batch = by_head = False
    for start in range(0, shape.sq, rows):
        q = arange(min(rows, shape.sq - start), device, start).view(1, 1, -1, 1)
        mask = eval_mask(mask_mod, b, h, q, k)
        by_batch |= mask.shape[0] > 1
        by_head |= mask.shape[1] > 1
        # A mask that ignores b or h counts once for each of them.
        repeat = (shape.b if mask.shape[0] == 1 else 1) * (shape.hq if mask.shape[1] == 1 else 1)
        allowed += int(mask.sum()) * repeat
        empty += int((~mask.any(dim=-1)).sum()) * repeat
        anywhere = mask.any(dim=1).any(dim=0)  # [rows, K]: allowed in some (b, h)
        if anywhere.any():
            diff = (q - k)[0, 0].expand_as(anywhere)[anywhere]
            lo, hi = min(lo, int(diff.min())), max(hi, int(diff.max()))
    band = None
    if allowed and allowed == shape.b * shape.hq * band_pairs(shape.sq, shape.sk, lo, hi):
        band = (lo, hi)
    return MaskStats(shape, allowed, by_batch, by_head, band, empty)
