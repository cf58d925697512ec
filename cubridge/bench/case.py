"""One benchmark problem: a spec at one head config and sequence length, with the
inputs every implementation receives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from cubridge.attention import HeadConfig, Shape, default_scale
from cubridge.bench.flops import MaskStats
from cubridge.spec.inputs import make_aux
from cubridge.spec.model import Spec
from cubridge.verify.peers import PeerProblem

if TYPE_CHECKING:
    from cubridge.spec.mods import BoundMods


@dataclass
class Case:
    spec: Spec
    config: HeadConfig
    shape: Shape
    dtype: torch.dtype
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    aux: Mapping[str, torch.Tensor]
    mods: BoundMods  # the spec's mods with aux bound (cubridge.spec.mods.bind_mods)
    stats: MaskStats

    @property
    def scale(self) -> float:
        return default_scale(self.shape.d) if self.spec.scale is None else self.spec.scale

    @property
    def device(self) -> torch.device:
        return self.q.device

    def problem(self) -> PeerProblem:
        """The case as the peer registry takes it (cubridge.verify.peers)."""
        st = self.stats
        return PeerProblem(self.spec, self.shape, self.dtype, self.q, self.k, self.v, self.aux,
                           self.mods, self.scale, st.structure, st.window, st.depends_on_batch,
                           st.depends_on_head)

    @property
    def is_plain_softmax(self) -> bool:
        """Standard attention with at most a mask: no score_mod, softmax normaliser."""
        return self.spec.score_mod is None and self.spec.normalizer == "softmax"


def make_aux_on(spec: Spec, shape: Shape, seed: int, device: torch.device) -> dict:
    """The spec's aux tensors for `shape` on `device`. Specs draw them on the CPU
    from a CPU generator (the spec part's convention, with its checks); they are
    then moved, so every device sees the same documents, slopes and tables."""
    aux = make_aux(spec, shape, torch.Generator().manual_seed(seed))
    return {name: t.to(device) for name, t in aux.items()}
