"""How much work one benchmark problem holds, and how that was counted.

The allowed (q, k) pairs come from the first of these that applies:
- the spec's mask_mod, evaluated on every pair (cubridge.bench.flops);
- no mask_mod and a score_mod that sets scores to -inf on a condition of the
  positions (a mask written in score_mod): the pairs it leaves finite;
- no mask_mod and a score_mod that masks with a floor value (Hugging Face's
  finfo.min): the pairs it leaves above it (a row with none weighs every key
  alike: its mean of V is not counted, and the mask's band is not reported);
- no mask_mod and a reference that is plain attention with the spec's score_mod
  and normaliser (checked when the spec is loaded): every pair;
- otherwise the reference itself, probed for the keys that receive weight
  (cubridge.bench.probe); when that is impossible, every pair, saying why.
FLOPs are 4 * pairs * D (2 * pairs * (D + Dv)) unless the spec declares
`flops(shape, allowed_pairs)` for a structure that does other matrix work
(differential attention: two QK^T on half of D each and two PV products).
Every report carries the `counting` sentence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.bench.flops import MaskStats, count_allowed_pairs
from cubridge.bench.probe import ProbeError, probe_allowed_pairs
from cubridge.spec.errors import SpecError
from cubridge.spec.model import Spec
from cubridge.spec.mods import BoundMods
from cubridge.transfer.score_masks import floor_mask_mod, score_mask_mod


@dataclass(frozen=True)
class Work:
    stats: MaskStats
    flops: float
    counting: str  # how pairs and FLOPs were obtained
    # the mask the spec writes as -inf in score_mod, or as a floor (finfo.min) that
    # leaves every row a key, as a mask_mod (None: none); the bench gives it to
    # FlexAttention as a BlockMask (transfer.score_masks)
    score_mask_mod: Callable[..., torch.Tensor] | None = None


def count_pairs(spec: Spec, mods: BoundMods, shape: Shape, device: torch.device | str,
                seed: int = 0) -> tuple[MaskStats, str]:
    """The allowed pairs of `spec` at `shape` and the sentence saying how they were counted."""
    return _count_pairs(spec, mods, shape, device, seed, *_masks_in_score(spec, mods))


def _masks_in_score(spec: Spec, mods: BoundMods) -> tuple[
        Callable[..., torch.Tensor] | None, Callable[..., torch.Tensor] | None]:
    """(-inf mask, floor mask) of a score_mod as mask_mods. Beside a mask_mod a floor
    mask counts under sigmoid and relu only (where a pair at finfo.min weighs nothing
    and cubridge lifts it): under softmax its whole-masked rows weigh the mask_mod's
    keys."""
    lifted = score_mask_mod(spec, mods.score_mod)
    if lifted is not None or (mods.mask_mod is not None and spec.normalizer == "softmax"):
        return lifted, None
    return None, floor_mask_mod(spec, mods.score_mod)


def _count_pairs(spec: Spec, mods: BoundMods, shape: Shape, device: torch.device | str,
                 seed: int, lifted: Callable[..., torch.Tensor] | None,
                 floor: Callable[..., torch.Tensor] | None = None) -> tuple[MaskStats, str]:
    if mods.mask_mod is not None:
        beside = lifted or floor  # (what score_mod masks too, where cubridge lifts it)
        if beside is None:
            return (count_allowed_pairs(mods.mask_mod, shape, device),
                    "pairs: the spec's mask_mod evaluated on every pair")
        mask_mod = mods.mask_mod

        def both(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor,
                 k: torch.Tensor) -> torch.Tensor:
            return mask_mod(b, h, q, k) & beside(b, h, q, k)

        value = "-inf" if lifted else \
            f"its floor value (finfo.min, which weighs nothing under {spec.normalizer})"
        return (count_allowed_pairs(both, shape, device),
                f"pairs: those the spec's mask_mod allows and its score_mod does not set to "
                f"{value}, on every pair")
    if lifted is not None:
        return (count_allowed_pairs(lifted, shape, device),
                "pairs: those score_mod does not set to -inf (no mask_mod; score_mod masks "
                "with -inf on a condition of the positions)")
    if floor is not None:
        stats = count_allowed_pairs(floor, shape, device)
        weightless = "in a row that keeps a key" if spec.normalizer == "softmax" else \
            f"under {spec.normalizer}"
        counting = ("pairs: those score_mod does not set to its floor value (no mask_mod; "
                    f"score_mod masks with finfo.min, which weighs nothing {weightless})")
        if stats.empty_rows and spec.normalizer == "softmax":
            # (those rows weigh every key alike: no band describes them)
            stats = dataclasses.replace(stats, band=None)
            counting += f"; {stats.empty_rows} rows keep no key (their output: the mean of V)"
        return stats, counting
    if spec.mods_describe_reference:
        return (count_allowed_pairs(None, shape, device),
                "pairs: every pair (no mask_mod; the reference is unmasked attention)")
    try:
        probe = probe_allowed_pairs(spec, shape, device, seed)
    except ProbeError as exc:
        return (count_allowed_pairs(None, shape, device),
                f"pairs: every pair, an upper bound (no mask_mod, and the reference could "
                f"not be probed: {exc}; declare `flops` in the spec for an exact figure)")
    return probe.stats, f"pairs: {probe.counting}"


def declared_flops(spec: Spec, shape: Shape, pairs: int) -> float:
    """The spec's own `flops(shape, allowed_pairs)`, checked."""
    assert spec.flops is not None
    where = f"{spec.path}: flops" if spec.path is not None else f"spec {spec.name!r}: flops"
    try:
        value = spec.flops(shape, pairs)
    except Exception as exc:
        raise SpecError(f"flops({shape}, {pairs}) raised {type(exc).__name__}: {exc}",
                        where) from exc
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise SpecError(f"flops({shape}, {pairs}) returned {value!r}; return a finite, "
                        "non-negative number of floating-point operations", where)
    return float(value)


def count_work(spec: Spec, mods: BoundMods, shape: Shape, device: torch.device | str,
               seed: int = 0) -> Work:
    lifted, floor = _masks_in_score(spec, mods)
    stats, counting = _count_pairs(spec, mods, shape, device, seed, lifted, floor)
    if floor is not None and not stats.empty_rows:
        lifted = floor  # (the same output as the score_mod as written, on every row)
    if spec.flops is None:
        return Work(stats, stats.flops, f"{counting}; FLOPs: 4 * pairs * D", lifted)
    return Work(stats, declared_flops(spec, shape, stats.allowed_pairs),
                f"{counting}; FLOPs: the spec's flops(shape, allowed_pairs)", lifted)
