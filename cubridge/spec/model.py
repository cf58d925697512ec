"""The typed form of a user's spec file (docs/specs.md describes the file).

This is the contract between the spec loader and every stage that consumes a
spec (transfer, verify, bench): stages read these fields and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from cubridge.attention import HeadConfig, Shape

Normalizer = Literal["softmax", "sigmoid", "relu"]

# reference(q, k, v, **aux) -> out, or (out, lse); see cubridge.attention for layouts.
ReferenceFn = Callable[..., "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"]
# make_aux(shape, generator, device) -> {name: tensor}
AuxMaker = Callable[[Shape, torch.Generator, torch.device], Mapping[str, torch.Tensor]]


@dataclass(frozen=True)
class Tolerance:
    """Thresholds for one dtype against the float64 reference (docs/specs.md
    explains the defaults): `rel` bounds ||out - ref|| / ||ref||, `abs` bounds
    max |out - ref| as a fraction of max |ref|, and `lse` bounds
    max |lse - ref_lse| / max(1, max |ref_lse|) on rows with an allowed key."""

    rel: float
    abs: float
    lse: float = 1e-4


@dataclass(frozen=True)
class Spec:
    name: str
    description: str
    path: Path | None
    reference: ReferenceFn
    make_aux: AuxMaker | None
    configs: Sequence[HeadConfig]
    seq_lens: Sequence[int]
    dtypes: Sequence[torch.dtype]
    tolerances: Mapping[torch.dtype, Tolerance]
    # FlexAttention-style mods; they may take aux tensors as keyword-only
    # arguments named like the aux keys (bind_mods() closes over them).
    mask_mod: Callable[..., torch.Tensor] | None = None
    score_mod: Callable[..., torch.Tensor] | None = None
    normalizer: Normalizer = "softmax"
    returns_lse: bool = True  # False for elementwise normalisers (no LSE exists)
    scale: float | None = None  # None: 1/sqrt(D)
    extra: Mapping[str, object] = field(default_factory=dict)
    # Declared aux shapes, {name: dims}; a dim is an int or an expression over
    # B, Hq, Hk, Sq, Sk, D, Dv ("Sq + Sk - 1"); () is a 0-d scalar.
    aux_shapes: Mapping[str, tuple[int | str, ...]] | None = None
    # True if the mods and the normaliser say all the reference computes (with
    # no mods: plain attention). False for a spec without mods whose reference
    # does more (cosine scores, extra masks): peers and hook codegen cannot use it.
    mods_describe_reference: bool = True
    # flops(shape, allowed_pairs) -> forward FLOPs, for a structure whose matrix
    # work is not 4 * pairs * D (differential attention); None: that default.
    flops: Callable[[Shape, int], float] | None = None
    # SELF_ATTENTION = True: queries and keys are the same positions (Sq = Sk), so
    # one per-position aux tensor (document or token-type ids, "S") serves both; every
    # check, verification and call is then at Sq = Sk (cubridge.spec.shapes.fit_shapes).
    self_attention: bool = False
